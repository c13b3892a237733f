//! Graceful degradation: a ladder of modes, entered on misses, left with hysteresis.
//!
//! Mode 0 is nominal; each later mode is one rung down and disables (replaces with their
//! fallback) a set of named stages. The ladder is fed one [`FrameOutcome`] per frame, in
//! frame order, and decides the mode of the frames released after that:
//!
//! - **Degrade** one rung when, within the last `window` frames, `degrade_after` or more
//!   frames were *bad*: a deadline miss (the frame published its fallback), or an overrun
//!   of a stage that is not best-effort.
//! - **Jump** to the last rung at once when a critical stage is lost (hung).
//! - **Recover** one rung after `recover_after` consecutive frames that finished with at
//!   least `slack_fraction` of their deadline to spare and without counted overruns.
//!
//! After any transition the window and the run of good frames restart, so one burst
//! moves the ladder one rung, not several. Every transition is returned with its reason.
//!
//! Cost: `observe` is a few integer operations on a 128-frame bit window; it never
//! allocates (the transition log is preallocated and, if full, counts what it drops).
//! Deterministic: the same outcome sequence always gives the same mode sequence.

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

/// One rung of the ladder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeSpec {
    /// Name, e.g. "reduced".
    pub name: String,
    /// Stages replaced by their fallback in this mode.
    #[serde(default)]
    pub disable: Vec<String>,
}

impl ModeSpec {
    /// A mode called `name` that disables the stages named in `disable`.
    pub fn new(name: &str, disable: &[&str]) -> ModeSpec {
        ModeSpec {
            name: name.into(),
            disable: disable.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Ladder rules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LadderConfig {
    /// Rungs, nominal first. An empty list means a single nominal mode.
    pub modes: Vec<ModeSpec>,
    /// Bad frames within `window` that trigger a step down.
    pub degrade_after: u32,
    /// Window length in frames (1..=128).
    pub window: u32,
    /// Consecutive good frames with slack that trigger a step up.
    pub recover_after: u32,
    /// A good frame ends with at least this fraction of its deadline left.
    pub slack_fraction: f64,
}

impl Default for LadderConfig {
    fn default() -> Self {
        LadderConfig {
            modes: vec![ModeSpec {
                name: "nominal".into(),
                disable: vec![],
            }],
            degrade_after: 3,
            window: 30,
            recover_after: 60,
            slack_fraction: 0.1,
        }
    }
}

/// What happened to one frame, as the ladder sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameOutcome {
    /// Frame number.
    pub frame: u64,
    /// The frame published its fallback (abandoned, dropped, or late in modeled time).
    pub deadline_miss: bool,
    /// A counted (not best-effort) stage overran its budget.
    pub overrun: bool,
    /// A critical stage was lost in this frame.
    pub critical_lost: bool,
    /// Time left before the deadline at publish, ns (0 if late).
    pub slack_ns: u64,
    /// The frame's deadline length, ns.
    pub deadline_len_ns: u64,
}

/// Why the mode changed (plain data: recording a transition never allocates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum TransitionReason {
    /// `bad` bad frames within the last `window`.
    Misses {
        /// Bad frames counted.
        bad: u32,
        /// Window length.
        window: u32,
    },
    /// `good` consecutive frames on time with slack.
    Recovered {
        /// Good frames counted.
        good: u32,
    },
    /// A critical stage was lost (hung).
    CriticalLost,
}

impl std::fmt::Display for TransitionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransitionReason::Misses { bad, window } => write!(
                f,
                "{bad} bad frames (deadline misses or overruns) within the last {window}"
            ),
            TransitionReason::Recovered { good } => {
                write!(f, "{good} consecutive frames on time with slack")
            }
            TransitionReason::CriticalLost => write!(f, "a critical stage was lost (hung)"),
        }
    }
}

/// One mode change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeTransition {
    /// The outcome of this frame triggered it; frames released afterwards use the new mode.
    pub after_frame: u64,
    /// Old mode index.
    pub from: u8,
    /// New mode index.
    pub to: u8,
    /// Why.
    pub reason: TransitionReason,
}

/// Compiled ladder: mode names and per-mode disabled-stage masks.
#[derive(Debug, Clone)]
pub struct Ladder {
    cfg: LadderConfig,
    masks: Vec<u64>,
    mode: usize,
    window_bits: u128,
    good_run: u32,
    transitions: Vec<ModeTransition>,
    transitions_dropped: u64,
    residency: Vec<u64>,
}

/// A ladder that does not match the plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LadderError {
    /// A mode names a stage the plan does not have.
    #[error("mode '{mode}' disables stage '{stage}', which is not in the graph (stages: {known})")]
    UnknownStage {
        /// Mode.
        mode: String,
        /// Stage named.
        stage: String,
        /// The plan's stage names.
        known: String,
    },
    /// Bad numbers.
    #[error("ladder: {0}")]
    Invalid(String),
}

const TRANSITION_LOG: usize = 4096;

impl Ladder {
    /// Checks the config against the plan and precomputes masks (start-up only).
    pub fn new(cfg: LadderConfig, plan: &Plan) -> Result<Ladder, LadderError> {
        let mut cfg = cfg;
        if cfg.modes.is_empty() {
            cfg.modes = LadderConfig::default().modes;
        }
        if cfg.modes.len() > 255 {
            return Err(LadderError::Invalid("at most 255 modes".into()));
        }
        if cfg.window == 0 || cfg.window > 128 {
            return Err(LadderError::Invalid(format!(
                "window = {}: use 1 to 128 frames",
                cfg.window
            )));
        }
        if cfg.degrade_after == 0 || cfg.degrade_after > cfg.window {
            return Err(LadderError::Invalid(format!(
                "degrade_after = {} must be between 1 and window ({})",
                cfg.degrade_after, cfg.window
            )));
        }
        if cfg.recover_after == 0 {
            return Err(LadderError::Invalid(
                "recover_after must be at least 1".into(),
            ));
        }
        if !(0.0..1.0).contains(&cfg.slack_fraction) {
            return Err(LadderError::Invalid(format!(
                "slack_fraction = {} must be in [0, 1)",
                cfg.slack_fraction
            )));
        }
        let mut masks = Vec::with_capacity(cfg.modes.len());
        for m in &cfg.modes {
            let mut mask = 0u64;
            for s in &m.disable {
                let Some(i) = plan.stage_index(s) else {
                    return Err(LadderError::UnknownStage {
                        mode: m.name.clone(),
                        stage: s.clone(),
                        known: plan
                            .stages()
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                mask |= 1u64 << i;
            }
            masks.push(mask);
        }
        let n = cfg.modes.len();
        Ok(Ladder {
            cfg,
            masks,
            mode: 0,
            window_bits: 0,
            good_run: 0,
            transitions: Vec::with_capacity(TRANSITION_LOG),
            transitions_dropped: 0,
            residency: vec![0; n],
        })
    }

    /// Current mode index.
    pub fn mode(&self) -> usize {
        self.mode
    }

    /// Name of mode `i`.
    pub fn mode_name(&self, i: usize) -> &str {
        &self.cfg.modes[i.min(self.cfg.modes.len() - 1)].name
    }

    /// Stages disabled in the current mode, as a bit mask over plan indices.
    pub fn disabled_mask(&self) -> u64 {
        self.masks[self.mode]
    }

    /// Frames observed in each mode.
    pub fn residency(&self) -> &[u64] {
        &self.residency
    }

    /// Transitions so far (the first 4096).
    pub fn transitions(&self) -> &[ModeTransition] {
        &self.transitions
    }

    /// Transitions not kept because the log was full.
    pub fn transitions_dropped(&self) -> u64 {
        self.transitions_dropped
    }

    /// Feeds one frame's outcome (frames in order). Returns true if the mode changed.
    pub fn observe(&mut self, o: &FrameOutcome) -> bool {
        self.residency[self.mode] += 1;
        let last = self.cfg.modes.len() - 1;
        if o.critical_lost && self.mode != last {
            self.transition(last, o.frame, TransitionReason::CriticalLost);
            return true;
        }
        let bad = o.deadline_miss || o.overrun;
        let mask: u128 = if self.cfg.window == 128 {
            u128::MAX
        } else {
            (1u128 << self.cfg.window) - 1
        };
        self.window_bits = ((self.window_bits << 1) | u128::from(bad)) & mask;
        let slack_ok = o.deadline_len_ns == 0
            || (o.slack_ns as f64) >= self.cfg.slack_fraction * o.deadline_len_ns as f64;
        if bad || !slack_ok {
            self.good_run = 0;
        } else {
            self.good_run = self.good_run.saturating_add(1);
        }
        let bad_count = self.window_bits.count_ones();
        if bad_count >= self.cfg.degrade_after && self.mode < last {
            let reason = TransitionReason::Misses {
                bad: bad_count,
                window: self.cfg.window,
            };
            self.transition(self.mode + 1, o.frame, reason);
            return true;
        }
        if self.good_run >= self.cfg.recover_after && self.mode > 0 {
            let reason = TransitionReason::Recovered {
                good: self.good_run,
            };
            self.transition(self.mode - 1, o.frame, reason);
            return true;
        }
        false
    }

    fn transition(&mut self, to: usize, frame: u64, reason: TransitionReason) {
        let from = self.mode;
        self.mode = to;
        self.window_bits = 0;
        self.good_run = 0;
        if self.transitions.len() < TRANSITION_LOG {
            self.transitions.push(ModeTransition {
                after_frame: frame,
                from: from as u8,
                to: to as u8,
                reason,
            });
        } else {
            self.transitions_dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::{demo_graph, Faults};
    use crate::plan::PlanConfig;

    fn plan() -> Plan {
        demo_graph(64, &Faults::new())
            .build(&PlanConfig::default())
            .unwrap()
    }

    fn cfg() -> LadderConfig {
        LadderConfig {
            modes: vec![
                ModeSpec {
                    name: "nominal".into(),
                    disable: vec![],
                },
                ModeSpec {
                    name: "reduced".into(),
                    disable: vec!["smooth".into()],
                },
                ModeSpec {
                    name: "safe_stop".into(),
                    disable: vec!["smooth".into(), "gradient".into()],
                },
            ],
            degrade_after: 3,
            window: 10,
            recover_after: 5,
            slack_fraction: 0.2,
        }
    }

    fn frame(frame: u64, miss: bool, slack_ns: u64) -> FrameOutcome {
        FrameOutcome {
            frame,
            deadline_miss: miss,
            overrun: false,
            critical_lost: false,
            slack_ns,
            deadline_len_ns: 100,
        }
    }

    #[test]
    fn degrades_on_misses_in_window_and_recovers_with_hysteresis() {
        let mut l = Ladder::new(cfg(), &plan()).unwrap();
        assert_eq!(l.disabled_mask(), 0);
        // Two misses: not enough.
        assert!(!l.observe(&frame(0, true, 0)));
        assert!(!l.observe(&frame(1, true, 0)));
        for f in 2..11 {
            assert!(!l.observe(&frame(f, false, 50)));
        }
        // The first two misses left the 10-frame window: a third miss alone does not degrade.
        assert!(!l.observe(&frame(11, true, 0)));
        assert!(!l.observe(&frame(12, true, 0)));
        assert!(l.observe(&frame(13, true, 0)));
        assert_eq!(l.mode(), 1);
        assert_eq!(
            l.disabled_mask(),
            1 << 2,
            "reduced disables smooth (plan index 2)"
        );
        // Frames without slack do not count towards recovery.
        for f in 14..30 {
            assert!(!l.observe(&frame(f, false, 10)));
        }
        for f in 30..34 {
            assert!(!l.observe(&frame(f, false, 50)));
        }
        assert!(l.observe(&frame(34, false, 50)));
        assert_eq!(l.mode(), 0);
        let t = l.transitions();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].from, t[0].to, t[0].after_frame), (0, 1, 13));
        assert_eq!(t[0].reason, TransitionReason::Misses { bad: 3, window: 10 });
        assert_eq!(t[1].reason, TransitionReason::Recovered { good: 5 });
        assert!(t[0].reason.to_string().contains("3 bad frames"));
        assert_eq!(l.residency().iter().sum::<u64>(), 35);
    }

    #[test]
    fn one_burst_moves_one_rung_and_critical_loss_jumps_to_the_last() {
        let mut l = Ladder::new(cfg(), &plan()).unwrap();
        for f in 0..5 {
            l.observe(&frame(f, true, 0));
        }
        assert_eq!(l.mode(), 1, "the window restarts after a transition");
        let mut lost = frame(5, false, 50);
        lost.critical_lost = true;
        assert!(l.observe(&lost));
        assert_eq!(l.mode(), 2);
        assert_eq!(
            l.transitions().last().unwrap().reason,
            TransitionReason::CriticalLost
        );
    }

    #[test]
    fn overruns_count_as_bad_frames() {
        let mut l = Ladder::new(cfg(), &plan()).unwrap();
        for f in 0..3 {
            let mut o = frame(f, false, 50);
            o.overrun = true;
            l.observe(&o);
        }
        assert_eq!(l.mode(), 1);
    }

    #[test]
    fn bad_configs_are_rejected_with_messages() {
        let mut c = cfg();
        c.modes[1].disable.push("no_such_stage".into());
        let e = Ladder::new(c, &plan()).unwrap_err().to_string();
        assert!(
            e.contains("'reduced'") && e.contains("'no_such_stage'") && e.contains("smooth"),
            "{e}"
        );
        let mut c = cfg();
        c.window = 0;
        assert!(Ladder::new(c, &plan())
            .unwrap_err()
            .to_string()
            .contains("window"));
        let mut c = cfg();
        c.degrade_after = 11;
        assert!(Ladder::new(c, &plan()).is_err());
        let mut c = cfg();
        c.slack_fraction = 1.5;
        assert!(Ladder::new(c, &plan()).is_err());
    }
}
