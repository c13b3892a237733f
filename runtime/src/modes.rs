//! Graceful degradation: a ladder of modes, stepped down on evidence that the deadline is at
//! risk (not on noise), shedding non-critical load first, and left with hysteresis.
//!
//! Mode 0 is nominal; each later mode is one rung down and disables (replaces with their
//! fallback) a set of named stages. The **last rung is terminal**: in the driving graph it
//! is `safe_stop`, the planner's minimum-risk trajectory. The ladder is fed one
//! [`FrameOutcome`] per frame, in frame order, and decides the mode of the frames released
//! after that.
//!
//! ## Policy
//!
//! A frame is **at risk** when it missed its deadline (it published its fallback: abandoned
//! at the guard time, dropped for want of a free slot, or late in modeled time) or when it
//! was published with end-to-end slack (deadline − publish time, measured from its release)
//! below `risk_slack_fraction` of its deadline.
//!
//! - **Degrade** one rung when `degrade_after` or more of the last `window` frames were at
//!   risk — except from the last-but-one rung onto the last.
//! - **Stop** (enter the last rung from the last-but-one) when `degrade_after` or more of
//!   the last `window` frames *missed* their deadline. By then every stage the ladder can
//!   shed is shed, so misses mean the critical chain itself cannot meet the deadline; low
//!   slack alone is a reason to shed load, not to stop the car. Apart from a lost critical
//!   stage this is the only way onto the last rung.
//! - **Shed** a non-critical stage that keeps overrunning its budget: when a stage of
//!   [`Criticality::Normal`] overran in `shed_after` or more of the last `window` frames, the
//!   ladder goes to the *first mode that disables that stage*, provided that mode is deeper
//!   than the current one and is not the last rung (if several stages qualify, the
//!   shallowest such mode wins). Overruns of critical and best-effort stages, and of a stage
//!   only the last rung disables, never move the ladder by themselves: they are recorded
//!   and reported, and count only through the deadline risk they cause.
//! - **Jump** to the last rung at once when a critical stage is lost (hung).
//! - **Recover** one rung after `recover_after` consecutive frames published on time with at
//!   least `slack_fraction` of their deadline to spare (`slack_fraction >=
//!   risk_slack_fraction`; between the two a frame is neither at risk nor good).
//!
//! After any transition every window and the run of good frames restart, so one burst moves
//! the ladder one rung (or one shed), not several. Every transition is recorded with its
//! reason ([`TransitionReason`]; [`Ladder::describe`] names the stage).
//!
//! ## Why
//!
//! What a safety engineer expects of a degradation ladder in a car:
//!
//! - **No false minimum-risk manoeuvre on noise.** A budget is a planning allowance (a share
//!   of the frame's WCET), not the deadline. A stage overrunning it by a few milliseconds
//!   while the frame is still published with slack is a finding for the timing report, not a
//!   hazard; on a busy machine every burst of load does it. An unnecessary safe stop is a
//!   hazard of its own (unexpected braking) and teaches people to ignore the system, so
//!   overruns alone never reach the last rung.
//! - **Degrade on evidence that the deadline is at risk**: misses, frames published on
//!   fallback, and shrinking end-to-end slack, the last one so the ladder acts *before* the
//!   first miss. One evidence window, several frames in it, so a single late frame is not a
//!   trend.
//! - **Shed non-critical load first**, by the mode designed to replace it (its fallback), so a
//!   stage that has become too slow stops consuming the time the critical chain needs.
//! - **Stop the car only when the critical chain cannot deliver**: a critical stage lost, or
//!   frames still at risk with everything sheddable already shed.
//! - **Recover slowly** (many consecutive good frames, with more slack than the risk margin):
//!   degrading is cheap and safe, flapping between modes is not.
//!
//! ## Determinism and cost
//!
//! The ladder never reads a clock: it sees only the [`FrameOutcome`] fields. In lockstep the
//! runtime fills them from the timing model (modeled misses, slack and overruns) or, without
//! one, reports no miss, no overrun and unlimited slack, so the mode sequence is a function
//! of the log, the config and the model. `observe` is a few integer operations on 128-frame
//! bit windows (one per sheddable stage) and one floating-point comparison; it never
//! allocates (windows and the transition log are preallocated; a full log counts what it
//! drops).

use serde::{Deserialize, Serialize};

use crate::plan::Plan;
use crate::stage::Criticality;

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

/// Ladder rules (see the module docs for the policy).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LadderConfig {
    /// Rungs, nominal first, the terminal (safe-stop) rung last. An empty list means a
    /// single nominal mode.
    pub modes: Vec<ModeSpec>,
    /// Frames at deadline risk within `window` that step the mode down one rung
    /// (1..=`window`).
    pub degrade_after: u32,
    /// Window length in frames (1..=128).
    pub window: u32,
    /// Consecutive good frames that step the mode up one rung (>= 1).
    pub recover_after: u32,
    /// A good frame is published with at least this fraction of its deadline left, in
    /// [`risk_slack_fraction`](Self::risk_slack_fraction), 1).
    pub slack_fraction: f64,
    /// A frame published with less than this fraction of its deadline left is at risk, in
    /// [0, [`slack_fraction`](Self::slack_fraction)]; 0 counts misses only. Default 0.1
    /// (3.3 ms of a 33.3 ms frame).
    pub risk_slack_fraction: f64,
    /// Overruns of one non-critical stage within `window` that shed it (switch to the first
    /// mode that disables it); 0 never sheds on overruns. At most `window`.
    pub shed_after: u32,
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
            slack_fraction: 0.2,
            risk_slack_fraction: 0.1,
            shed_after: 10,
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
    /// Plan stages that overran their budget in this frame (bit `i` = stage `i`;
    /// best-effort stages left out).
    pub overrun_mask: u64,
    /// A critical stage was lost in this frame.
    pub critical_lost: bool,
    /// Time left before the deadline at publish, ns (0 if late; `u64::MAX` when no timing
    /// decision is taken, as in lockstep without a timing model).
    pub slack_ns: u64,
    /// The frame's deadline length, ns.
    pub deadline_len_ns: u64,
}

/// Why the mode changed (plain data: recording a transition never allocates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum TransitionReason {
    /// `misses + low_slack` frames at deadline risk within the last `window`.
    DeadlineRisk {
        /// Frames that published their fallback.
        misses: u32,
        /// Frames published with slack under the risk margin.
        low_slack: u32,
        /// Window length.
        window: u32,
    },
    /// Non-critical plan stage `stage` overran its budget in `overruns` of the last `window`
    /// frames: the ladder switched to the first mode that disables it.
    StageOverruns {
        /// Plan index of the stage.
        stage: u8,
        /// Overruns counted.
        overruns: u32,
        /// Window length.
        window: u32,
    },
    /// `good` consecutive frames on time with slack.
    Recovered {
        /// Good frames counted.
        good: u32,
    },
    /// A critical stage was lost (hung or panicked). The ladder goes to its last mode and
    /// stays there; logged even when the ladder was already there (`from == to`).
    CriticalLost,
    /// `misses` deadline misses within the last `window` frames with every sheddable stage
    /// already shed (in the last-but-one rung): the critical chain cannot meet the deadline.
    CriticalChainMisses {
        /// Frames that published their fallback.
        misses: u32,
        /// Window length.
        window: u32,
    },
}

impl std::fmt::Display for TransitionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransitionReason::DeadlineRisk {
                misses,
                low_slack,
                window,
            } => write!(
                f,
                "{} frames at deadline risk within the last {window} ({misses} published on \
                 fallback, {low_slack} with end-to-end slack under the margin)",
                misses + low_slack
            ),
            TransitionReason::StageOverruns {
                stage,
                overruns,
                window,
            } => write!(
                f,
                "stage #{stage} overran its budget in {overruns} of the last {window} frames: \
                 shed to its fallback"
            ),
            TransitionReason::Recovered { good } => {
                write!(f, "{good} consecutive frames on time with slack")
            }
            TransitionReason::CriticalLost => write!(
                f,
                "a critical stage was lost (hung or panicked): its fallback stands in and the \
                 ladder stays in its last mode"
            ),
            TransitionReason::CriticalChainMisses { misses, window } => write!(
                f,
                "{misses} deadline misses within the last {window} with every sheddable stage \
                 shed: the critical chain cannot meet the deadline"
            ),
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

/// No mode sheds this stage (see `Ladder::shed_to`).
const NO_SHED: u8 = u8::MAX;

/// Compiled ladder: mode names, per-mode disabled-stage masks and the evidence windows.
#[derive(Debug, Clone)]
pub struct Ladder {
    cfg: LadderConfig,
    masks: Vec<u64>,
    stage_names: Vec<String>,
    /// Per plan stage: the first mode that disables it, if the stage is
    /// [`Criticality::Normal`] and that mode is not the last rung; else `NO_SHED`.
    shed_to: Vec<u8>,
    /// Stages with a `shed_to` mode (the only ones whose overruns are windowed).
    sheddable: u64,
    mode: usize,
    /// Frames at risk in the window (bit 0 = latest frame).
    risk_bits: u128,
    /// Of those, deadline misses.
    miss_bits: u128,
    /// Per plan stage: frames in the window in which it overran (sheddable stages only).
    overrun_bits: Vec<u128>,
    good_run: u32,
    /// A critical stage was lost: the ladder stays in its last mode for good.
    pinned: bool,
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

impl LadderConfig {
    /// Range checks of the numbers (the modes are checked against a plan by [`Ladder::new`]).
    pub fn validate(&self) -> Result<(), LadderError> {
        if self.modes.len() > 255 {
            return Err(LadderError::Invalid("at most 255 modes".into()));
        }
        if self.window == 0 || self.window > 128 {
            return Err(LadderError::Invalid(format!(
                "window = {}: use 1 to 128 frames",
                self.window
            )));
        }
        if self.degrade_after == 0 || self.degrade_after > self.window {
            return Err(LadderError::Invalid(format!(
                "degrade_after = {} must be between 1 and window ({})",
                self.degrade_after, self.window
            )));
        }
        if self.shed_after > self.window {
            return Err(LadderError::Invalid(format!(
                "shed_after = {} must be between 0 (never shed on overruns) and window ({})",
                self.shed_after, self.window
            )));
        }
        if self.recover_after == 0 {
            return Err(LadderError::Invalid(
                "recover_after must be at least 1".into(),
            ));
        }
        if !(0.0..1.0).contains(&self.slack_fraction) {
            return Err(LadderError::Invalid(format!(
                "slack_fraction = {} must be in [0, 1)",
                self.slack_fraction
            )));
        }
        if !(0.0..=self.slack_fraction).contains(&self.risk_slack_fraction) {
            return Err(LadderError::Invalid(format!(
                "risk_slack_fraction = {} must be in [0, slack_fraction = {}]: a frame with \
                 less slack than the risk margin cannot count towards recovery",
                self.risk_slack_fraction, self.slack_fraction
            )));
        }
        Ok(())
    }
}

/// A `window`-frame bit window shifted by one frame with `bit` as the newest frame.
fn push(bits: u128, bit: bool, window: u32) -> u128 {
    let mask = if window >= 128 {
        u128::MAX
    } else {
        (1u128 << window) - 1
    };
    ((bits << 1) | u128::from(bit)) & mask
}

impl Ladder {
    /// Checks the config against the plan and precomputes masks (start-up only).
    pub fn new(cfg: LadderConfig, plan: &Plan) -> Result<Ladder, LadderError> {
        let mut cfg = cfg;
        if cfg.modes.is_empty() {
            cfg.modes = LadderConfig::default().modes;
        }
        cfg.validate()?;
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
        let stages = plan.stages();
        let shed_to: Vec<u8> = stages
            .iter()
            .enumerate()
            .map(|(i, st)| {
                let first = masks.iter().position(|m| m & (1u64 << i) != 0);
                match first {
                    Some(m) if m + 1 < n && st.criticality == Criticality::Normal => m as u8,
                    _ => NO_SHED,
                }
            })
            .collect();
        let sheddable = shed_to
            .iter()
            .enumerate()
            .filter(|(_, &m)| m != NO_SHED)
            .fold(0u64, |acc, (i, _)| acc | (1u64 << i));
        Ok(Ladder {
            masks,
            stage_names: stages.iter().map(|s| s.name.clone()).collect(),
            overrun_bits: vec![0; shed_to.len()],
            shed_to,
            sheddable,
            mode: 0,
            risk_bits: 0,
            miss_bits: 0,
            good_run: 0,
            pinned: false,
            transitions: Vec::with_capacity(TRANSITION_LOG),
            transitions_dropped: 0,
            residency: vec![0; n],
            cfg,
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

    /// The mode plan stage `stage` is shed to when it keeps overrunning, if any.
    pub fn shed_mode(&self, stage: usize) -> Option<usize> {
        self.shed_to
            .get(stage)
            .filter(|&&m| m != NO_SHED)
            .map(|&m| usize::from(m))
    }

    /// `reason` in words, with stage names and the risk margin (allocates: reports only).
    pub fn describe(&self, reason: &TransitionReason) -> String {
        match *reason {
            TransitionReason::DeadlineRisk {
                misses,
                low_slack,
                window,
            } => format!(
                "{} frames at deadline risk within the last {window} ({misses} published on \
                 fallback, {low_slack} with end-to-end slack under {:.0}% of the deadline)",
                misses + low_slack,
                self.cfg.risk_slack_fraction * 100.0
            ),
            TransitionReason::StageOverruns {
                stage,
                overruns,
                window,
            } => {
                let name = self
                    .stage_names
                    .get(usize::from(stage))
                    .map_or("?", String::as_str);
                format!(
                    "stage '{name}' overran its budget in {overruns} of the last {window} \
                     frames: shed to its fallback"
                )
            }
            other => other.to_string(),
        }
    }

    /// Feeds one frame's outcome (frames in order). Returns true if the mode changed.
    pub fn observe(&mut self, o: &FrameOutcome) -> bool {
        self.residency[self.mode] += 1;
        let last = self.cfg.modes.len() - 1;
        // A lost critical stage never comes back (its fallback stands in for the rest of
        // the run): the ladder goes to its last mode and stays there. The loss is logged
        // even when an earlier transition already reached the last mode.
        if o.critical_lost {
            let changed = self.mode != last;
            self.pinned = true;
            self.transition(last, o.frame, TransitionReason::CriticalLost);
            return changed;
        }
        if self.pinned {
            return false;
        }
        let window = self.cfg.window;
        let deadline = o.deadline_len_ns as f64;
        let low_slack = !o.deadline_miss
            && o.deadline_len_ns > 0
            && (o.slack_ns as f64) < self.cfg.risk_slack_fraction * deadline;
        let at_risk = o.deadline_miss || low_slack;
        self.risk_bits = push(self.risk_bits, at_risk, window);
        self.miss_bits = push(self.miss_bits, o.deadline_miss, window);
        // Overrun windows of the sheddable stages; the shallowest qualifying shed wins.
        let mut shed: Option<(usize, u32, usize)> = None; // (stage, overruns, target mode)
        let mut m = self.sheddable;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let bits = push(
                self.overrun_bits[i],
                o.overrun_mask & (1u64 << i) != 0,
                window,
            );
            self.overrun_bits[i] = bits;
            let count = bits.count_ones();
            let target = usize::from(self.shed_to[i]);
            if self.cfg.shed_after > 0
                && count >= self.cfg.shed_after
                && target > self.mode
                && shed.is_none_or(|(_, _, t)| target < t)
            {
                shed = Some((i, count, target));
            }
        }
        let slack_ok =
            o.deadline_len_ns == 0 || (o.slack_ns as f64) >= self.cfg.slack_fraction * deadline;
        if at_risk || !slack_ok {
            self.good_run = 0;
        } else {
            self.good_run = self.good_run.saturating_add(1);
        }
        let risk = self.risk_bits.count_ones();
        let misses = self.miss_bits.count_ones();
        if self.mode + 1 == last && misses >= self.cfg.degrade_after {
            let reason = TransitionReason::CriticalChainMisses { misses, window };
            self.transition(last, o.frame, reason);
            return true;
        }
        if self.mode + 1 < last && risk >= self.cfg.degrade_after {
            let reason = TransitionReason::DeadlineRisk {
                misses,
                low_slack: risk - misses,
                window,
            };
            self.transition(self.mode + 1, o.frame, reason);
            return true;
        }
        if let Some((stage, overruns, target)) = shed {
            let reason = TransitionReason::StageOverruns {
                stage: stage as u8,
                overruns,
                window,
            };
            self.transition(target, o.frame, reason);
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
        self.risk_bits = 0;
        self.miss_bits = 0;
        self.overrun_bits.iter_mut().for_each(|b| *b = 0);
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
mod tests;
