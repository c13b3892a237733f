//! Fault injection as configuration: the `[faults]` table of the config file.
//!
//! Two kinds of fault, each a rule that hits chosen frames (a list of frames and ranges,
//! and/or a seeded rate: see [`frames`]):
//!
//! - **sensor faults** ([`SensorFault`], applied by [`FaultyFeed`], a wrapper around any
//!   [`redline_pipeline::sensors::FrameSource`]) on any camera of the rig or the odometry:
//!   - `drop`: the camera's image (the odometry message) never arrives;
//!   - `delay`: it arrives `delay_ms` after the frame's release. The `sensors` stage copies
//!     the frame at its release and never waits for a sensor (a wait would spend the
//!     deadline), so the frame gets the newest data of that sensor that *had* arrived: an
//!     earlier frame's image or pose, with its own, older stamp, or nothing;
//!   - `freeze`: the sensor repeats what it delivered in the previous frame, stamp included
//!     (a stuck driver buffer);
//!   - `corrupt`: camera bytes damaged (`corrupt = "noise"`: a `fraction` of the bytes,
//!     default 0.25, replaced by random values; `"truncate"`: the last `fraction`, default
//!     0.5, of the image lost, as a cut transfer padded with zeros); odometry: every field
//!     of the pose replaced by random bits (mostly absurd values, sometimes plausible ones).
//!
//!   When several faults hit one sensor in one frame, `drop` decides first, then `freeze`,
//!   then `delay`; `corrupt` damages whatever was delivered. What the pipeline then does is
//!   its own contract ([`redline_pipeline::stages::SensorsStage`]): a missing or stale image
//!   (older than 1.5 periods) becomes black pixels, a missing, stale, absurd or future pose
//!   is replaced by dead-reckoning.
//! - **stage faults** ([`StageFault`], applied by [`StageFaults`], a
//!   [`redline_pipeline::slowdown::StageHook`] that wraps the named stages when the graph is
//!   built) on any stage of the driving graph:
//!   - `stall`: the stage busy-waits `stall_ms` before its `run` (the lane stays occupied,
//!     as with slower code; the same spin as the `[slowdown]` knob);
//!   - `hang`: the stage blocks for `hang_ms` (default 1000 ms, far past the watchdog's
//!     write-off time of four deadlines; bounded, so a run always ends, and releasable early
//!     with [`StageFaults::release_hangs`]);
//!   - `panic`: the stage's `run` panics.
//!
//! ```toml
//! [faults]
//! seed = 7                      # every rate-based draw and every corruption
//!
//! [[faults.sensor]]
//! target = "front"              # a camera of the rig, or "odometry"
//! fault = "freeze"              # drop | delay | corrupt | freeze
//! frames = "30..40, 75"         # frame numbers and ranges (a..b excludes b, a..=b not)
//!
//! [[faults.sensor]]
//! target = "odometry"
//! fault = "delay"
//! delay_ms = 50.0
//! rate = 0.02                   # each frame with this probability (seeded)
//!
//! [[faults.stage]]
//! stage = "backbone"
//! fault = "stall"               # stall | hang | panic
//! stall_ms = 40.0
//! frames = "100..110"
//! ```
//!
//! Contract:
//! - Deterministic: the same config, seed and source give the same faulted frames and the
//!   same stage-fault frames, on every machine and lane count (lockstep outputs are
//!   reproducible under faults).
//! - Every injected fault is visible: sensor faults as input issues of the frame source
//!   (one line per fault and frame, saying what was delivered instead) and counted in
//!   [`FaultyFeed::records`]; stage faults counted by their wrappers; [`FaultReport`] puts
//!   the counts by class next to the runtime's own record of each faulted stage (overruns,
//!   hangs and write-offs, errors, fallbacks).
//! - Costs: sensor faults are applied when the [`FaultyFeed`] is built (it copies every
//!   frame a fault changes: memory grows by one frame per faulted frame); during the run a
//!   frame is one binary search away. A stage without a fault is not wrapped at all; a
//!   wrapped one costs one virtual call and one [`frames::FrameSet::contains`] per rule and
//!   run. Neither allocates after start-up, except that a panic allocates its message.
//! - Configuration errors name the rule (`[[faults.sensor]] #2`), what is wrong, and the
//!   valid values (cameras of the rig, stages of the graph).

use std::collections::BTreeMap;

use redline_runtime::report::StageCounters;
use redline_runtime::rng::mix64;
use serde::{Deserialize, Serialize};

pub mod frames;
mod sensor;
mod stage;

pub use frames::FrameSet;
pub use sensor::FaultyFeed;
pub use stage::StageFaults;

/// The target name of the odometry in [`SensorFault::target`].
pub const ODOMETRY: &str = "odometry";

/// Default share of bytes hit by `corrupt = "noise"`.
pub const DEFAULT_NOISE_FRACTION: f64 = 0.25;
/// Default share of the image lost by `corrupt = "truncate"`.
pub const DEFAULT_TRUNCATE_FRACTION: f64 = 0.5;
/// Default duration of a `hang`, ms.
pub const DEFAULT_HANG_MS: f64 = 1000.0;
/// Longest `delay_ms`, `stall_ms` or `hang_ms` accepted, ms: a fault must end.
pub const MAX_FAULT_MS: f64 = 60_000.0;

/// The `[faults]` table: every fault to inject in a run (empty: none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Seed of every rate-based draw and every corruption.
    pub seed: u64,
    /// `[[faults.sensor]]` rules.
    pub sensor: Vec<SensorFault>,
    /// `[[faults.stage]]` rules.
    pub stage: Vec<StageFault>,
}

/// What happens to a sensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SensorFaultKind {
    /// Never arrives.
    Drop,
    /// Arrives `delay_ms` after the frame's release.
    Delay,
    /// Arrives damaged.
    Corrupt,
    /// Repeats the previous frame's data.
    Freeze,
}

/// How camera bytes are damaged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Corruption {
    /// A `fraction` of the bytes replaced by random values.
    #[default]
    Noise,
    /// The last `fraction` of the bytes lost (zero).
    Truncate,
}

/// One `[[faults.sensor]]` rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensorFault {
    /// A camera of the rig, by name, or `"odometry"`.
    pub target: String,
    /// What happens to it.
    pub fault: SensorFaultKind,
    /// Frames hit: numbers and ranges ([`frames::FRAMES_SYNTAX`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<String>,
    /// Each frame hit with this probability (seeded), besides `frames`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// `delay` only: arrival after the frame's release, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
    /// `corrupt` of a camera only: how the bytes are damaged (default noise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<Corruption>,
    /// `corrupt` of a camera only: share of the bytes damaged, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
}

/// What happens to a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageFaultKind {
    /// Busy for `stall_ms` more.
    Stall,
    /// Blocks for `hang_ms`.
    Hang,
    /// `run` panics.
    Panic,
}

/// One `[[faults.stage]]` rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageFault {
    /// A stage of the driving graph, by name.
    pub stage: String,
    /// What happens to it.
    pub fault: StageFaultKind,
    /// Frames hit: numbers and ranges ([`frames::FRAMES_SYNTAX`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<String>,
    /// Each frame hit with this probability (seeded), besides `frames`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// `stall` only: busy time added to the run, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_ms: Option<f64>,
    /// `hang` only: how long the stage blocks, ms (default [`DEFAULT_HANG_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_ms: Option<f64>,
}

/// A `[faults]` table that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// A sensor rule names no camera of the rig.
    #[error(
        "[[faults.sensor]] #{rule}: target = \"{name}\" is neither a camera of this rig nor \
         \"odometry\": use one of {valid}"
    )]
    UnknownTarget {
        /// Rule number, from 1.
        rule: usize,
        /// The name given.
        name: String,
        /// The names that work.
        valid: String,
    },
    /// A stage rule names no stage of the graph.
    #[error("[[faults.stage]] #{rule}: stage = \"{name}\" is not a stage of this graph: use one of {valid}")]
    UnknownStage {
        /// Rule number, from 1.
        rule: usize,
        /// The name given.
        name: String,
        /// The names that work.
        valid: String,
    },
    /// A value out of range, missing or given where it does not apply.
    #[error("[[faults.{table}]] #{rule}: {what}")]
    Invalid {
        /// `sensor` or `stage`.
        table: &'static str,
        /// Rule number, from 1.
        rule: usize,
        /// What is wrong and what to write.
        what: String,
    },
}

/// A duration in ms that must be positive and bounded.
fn check_ms(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 && v <= MAX_FAULT_MS {
        Ok(())
    } else {
        Err(format!(
            "{name} = {v}: give a duration above 0 and at most {MAX_FAULT_MS} ms"
        ))
    }
}

/// `Err` when `value` is given for a fault it does not apply to.
fn only_for<T>(value: &Option<T>, name: &str, applies: bool, to: &str) -> Result<(), String> {
    if value.is_some() && !applies {
        Err(format!(
            "{name} applies only to fault = \"{to}\": remove it"
        ))
    } else {
        Ok(())
    }
}

impl SensorFault {
    /// The frames this rule hits (rule `index` from 0 of a config seeded `seed`).
    pub fn frame_set(&self, seed: u64, index: usize) -> Result<FrameSet, String> {
        frame_set(self.frames.as_deref(), self.rate, rule_key(seed, 1, index))
    }

    fn check(&self) -> Result<(), String> {
        let is = |k| self.fault == k;
        only_for(
            &self.delay_ms,
            "delay_ms",
            is(SensorFaultKind::Delay),
            "delay",
        )?;
        let camera_corrupt = is(SensorFaultKind::Corrupt) && self.target != ODOMETRY;
        only_for(
            &self.corrupt,
            "corrupt",
            camera_corrupt,
            "corrupt\" of a camera",
        )?;
        only_for(
            &self.fraction,
            "fraction",
            camera_corrupt,
            "corrupt\" of a camera",
        )?;
        if is(SensorFaultKind::Delay) {
            match self.delay_ms {
                Some(d) => check_ms("delay_ms", d)?,
                None => return Err("fault = \"delay\" needs delay_ms (e.g. 50.0)".into()),
            }
        }
        if let Some(f) = self.fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!(
                    "fraction = {f}: give a share above 0 and at most 1"
                ));
            }
        }
        Ok(())
    }

    /// Share of a camera image's bytes a `corrupt` damages.
    pub fn corrupt_fraction(&self) -> f64 {
        self.fraction
            .unwrap_or(match self.corrupt.unwrap_or_default() {
                Corruption::Noise => DEFAULT_NOISE_FRACTION,
                Corruption::Truncate => DEFAULT_TRUNCATE_FRACTION,
            })
    }
}

impl StageFault {
    /// The frames this rule hits (rule `index` from 0 of a config seeded `seed`).
    pub fn frame_set(&self, seed: u64, index: usize) -> Result<FrameSet, String> {
        frame_set(self.frames.as_deref(), self.rate, rule_key(seed, 2, index))
    }

    fn check(&self) -> Result<(), String> {
        let is = |k| self.fault == k;
        only_for(
            &self.stall_ms,
            "stall_ms",
            is(StageFaultKind::Stall),
            "stall",
        )?;
        only_for(&self.hang_ms, "hang_ms", is(StageFaultKind::Hang), "hang")?;
        if is(StageFaultKind::Stall) {
            match self.stall_ms {
                Some(d) => check_ms("stall_ms", d)?,
                None => return Err("fault = \"stall\" needs stall_ms (e.g. 20.0)".into()),
            }
        }
        check_ms("hang_ms", self.hang_ms())
    }

    /// How long a `hang` blocks, ms.
    pub fn hang_ms(&self) -> f64 {
        self.hang_ms.unwrap_or(DEFAULT_HANG_MS)
    }
}

fn rule_key(seed: u64, table: u64, index: usize) -> u64 {
    mix64(seed ^ mix64((table << 32) | index as u64))
}

fn frame_set(frames: Option<&str>, rate: Option<f64>, key: u64) -> Result<FrameSet, String> {
    if frames.is_none() && rate.is_none() {
        return Err(format!(
            "say which frames it hits: frames = {} and/or rate = a probability per frame",
            "\"10..20, 35\""
        ));
    }
    FrameSet::new(frames, rate, key)
}

impl FaultConfig {
    /// Whether there is nothing to inject.
    pub fn is_empty(&self) -> bool {
        self.sensor.is_empty() && self.stage.is_empty()
    }

    /// Checks everything that does not depend on the source or the graph: frame lists,
    /// rates, and each fault's parameters (camera and stage names are checked by
    /// [`FaultyFeed::new`] and [`StageFaults::new`], which know the rig and the graph).
    pub fn validate(&self) -> Result<(), FaultError> {
        for (i, r) in self.sensor.iter().enumerate() {
            r.frame_set(self.seed, i)
                .and_then(|_| r.check())
                .map_err(|what| FaultError::Invalid {
                    table: "sensor",
                    rule: i + 1,
                    what,
                })?;
        }
        for (i, r) in self.stage.iter().enumerate() {
            r.frame_set(self.seed, i)
                .and_then(|_| r.check())
                .map_err(|what| FaultError::Invalid {
                    table: "stage",
                    rule: i + 1,
                    what,
                })?;
        }
        Ok(())
    }
}

/// What one sensor rule injected.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SensorFaultRecord {
    /// Rule number in `[[faults.sensor]]`, from 1.
    pub rule: usize,
    /// Camera name or `odometry`.
    pub target: String,
    /// The fault.
    pub fault: SensorFaultKind,
    /// Frames it hit.
    pub injected: u64,
    /// Those frames (the first [`SensorFaultRecord::MAX_FRAMES`]).
    pub frames: Vec<u64>,
}

impl SensorFaultRecord {
    /// Frames listed per rule.
    pub const MAX_FRAMES: usize = 256;

    /// `camera drop`, `odometry delay`, ...
    pub fn class(&self) -> String {
        let what = if self.target == ODOMETRY {
            ODOMETRY
        } else {
            "camera"
        };
        format!("{what} {}", kind_name(&self.fault))
    }
}

/// What one stage rule injected, beside what the runtime recorded for that stage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageFaultRecord {
    /// Rule number in `[[faults.stage]]`, from 1.
    pub rule: usize,
    /// The stage.
    pub stage: String,
    /// The fault.
    pub fault: StageFaultKind,
    /// Runs it hit (stalled, blocked or panicked).
    pub injected: u64,
    /// First frame hit.
    pub first_frame: Option<u64>,
    /// Last frame hit.
    pub last_frame: Option<u64>,
    /// The frames hit (the first [`StageFaultRecord::MAX_FRAMES`]).
    pub frames: Vec<u64>,
    /// The runtime's counters of the stage (runs, errors, overruns, hung, fallbacks, ...).
    pub runtime: StageCounters,
    /// Frames in which the runtime wrote the stage off as hung.
    pub written_off_in: Vec<u64>,
}

impl StageFaultRecord {
    /// Frames listed per rule.
    pub const MAX_FRAMES: usize = 256;

    /// `stage stall`, ...
    pub fn class(&self) -> String {
        format!("stage {}", kind_name(&self.fault))
    }
}

fn kind_name<T: Serialize>(k: &T) -> String {
    serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Every fault a run injected, by class and by rule (the `faults` part of `report.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultReport {
    /// The `[faults]` seed.
    pub seed: u64,
    /// Faults injected in all.
    pub injected: u64,
    /// Injected, by class (`camera drop`, `odometry delay`, `stage hang`, ...).
    pub by_class: BTreeMap<String, u64>,
    /// Per sensor rule.
    pub sensor: Vec<SensorFaultRecord>,
    /// Per stage rule, with the runtime's record of the stage.
    pub stage: Vec<StageFaultRecord>,
}

impl FaultReport {
    /// Sums the records of a run.
    pub fn new(
        seed: u64,
        sensor: Vec<SensorFaultRecord>,
        stage: Vec<StageFaultRecord>,
    ) -> FaultReport {
        let mut by_class = BTreeMap::new();
        for r in &sensor {
            *by_class.entry(r.class()).or_insert(0) += r.injected;
        }
        for r in &stage {
            *by_class.entry(r.class()).or_insert(0) += r.injected;
        }
        FaultReport {
            seed,
            injected: by_class.values().sum(),
            by_class,
            sensor,
            stage,
        }
    }

    /// Terminal lines: the counts by class, then one line per stage rule with the
    /// runtime's record of the stage.
    pub fn summary_lines(&self) -> Vec<String> {
        let classes: Vec<String> = self
            .by_class
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let mut v = vec![format!(
            "faults injected: {} ({}), seed {}",
            self.injected,
            if classes.is_empty() {
                "none".to_string()
            } else {
                classes.join(", ")
            },
            self.seed
        )];
        for r in &self.sensor {
            v.push(format!(
                "fault sensor #{}: {} {} in {} frames{}",
                r.rule,
                r.target,
                kind_name(&r.fault),
                r.injected,
                match r.frames.first() {
                    Some(f) => format!(" (first {f})"),
                    None => String::new(),
                }
            ));
        }
        for r in &self.stage {
            let c = &r.runtime;
            v.push(format!(
                "fault stage #{}: {} {} in {} runs; runtime: {} runs ok, {} errors, {} overruns, \
                 {} hung{}, {} lost fallbacks, {} skipped, {} cancelled",
                r.rule,
                r.stage,
                kind_name(&r.fault),
                r.injected,
                c.runs,
                c.errors,
                c.overruns,
                c.hung,
                if r.written_off_in.is_empty() {
                    String::new()
                } else {
                    format!(" (written off in frames {:?})", r.written_off_in)
                },
                c.lost_fallbacks,
                c.skipped,
                c.cancelled
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> FaultConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_full_table_parses_and_validates() {
        let c = parse(
            r#"
seed = 7
[[sensor]]
target = "front"
fault = "freeze"
frames = "30..40, 75"
[[sensor]]
target = "odometry"
fault = "delay"
delay_ms = 50.0
rate = 0.02
[[sensor]]
target = "back"
fault = "corrupt"
corrupt = "truncate"
fraction = 0.3
frames = "1"
[[stage]]
stage = "backbone"
fault = "stall"
stall_ms = 40.0
frames = "100..110"
[[stage]]
stage = "prediction"
fault = "hang"
frames = "5"
"#,
        );
        c.validate().unwrap();
        assert_eq!(c.sensor.len(), 3);
        assert_eq!(c.sensor[2].corrupt_fraction(), 0.3);
        assert_eq!(c.stage[1].hang_ms(), DEFAULT_HANG_MS);
        let back: FaultConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn mistakes_name_the_rule_and_the_fix() {
        let cases = [
            ("[[sensor]]\ntarget = \"a\"\nfault = \"drop\"\n", "sensor]] #1", "frames ="),
            (
                "[[sensor]]\ntarget = \"a\"\nfault = \"delay\"\nframes = \"1\"\n",
                "#1",
                "needs delay_ms",
            ),
            (
                "[[sensor]]\ntarget = \"a\"\nfault = \"drop\"\nframes = \"1\"\ndelay_ms = 3.0\n",
                "#1",
                "only to fault = \"delay\"",
            ),
            (
                "[[sensor]]\ntarget = \"odometry\"\nfault = \"corrupt\"\nframes = \"1\"\nfraction = 0.5\n",
                "#1",
                "of a camera",
            ),
            (
                "[[sensor]]\ntarget = \"a\"\nfault = \"corrupt\"\nframes = \"1\"\nfraction = 1.5\n",
                "#1",
                "fraction = 1.5",
            ),
            (
                "[[sensor]]\ntarget = \"a\"\nfault = \"drop\"\nrate = 2.0\n",
                "#1",
                "probability",
            ),
            (
                "[[stage]]\nstage = \"x\"\nfault = \"stall\"\nframes = \"1\"\n",
                "stage]] #1",
                "needs stall_ms",
            ),
            (
                "[[stage]]\nstage = \"x\"\nfault = \"panic\"\nframes = \"1\"\nhang_ms = 5.0\n",
                "#1",
                "only to fault = \"hang\"",
            ),
            (
                "[[stage]]\nstage = \"x\"\nfault = \"hang\"\nframes = \"1\"\nhang_ms = 1e9\n",
                "#1",
                "at most",
            ),
            (
                "[[stage]]\nstage = \"x\"\nfault = \"hang\"\nframes = \"1\"\n[[stage]]\nstage = \"x\"\nfault = \"hang\"\nframes = \"9..2\"\n",
                "stage]] #2",
                "holds no frame",
            ),
        ];
        for (text, rule, what) in cases {
            let e = parse(text).validate().unwrap_err().to_string();
            assert!(e.contains(rule) && e.contains(what), "{text}: {e}");
        }
        let e = toml::from_str::<FaultConfig>("[[stage]]\nstage = \"x\"\nfault = \"explode\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stall") && e.contains("panic"), "{e}");
        let e = toml::from_str::<FaultConfig>(
            "[[sensor]]\ntarget = \"x\"\nfault = \"drop\"\nframe = \"1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("frame"), "{e}");
    }

    #[test]
    fn report_sums_by_class() {
        let s = |target: &str, fault, injected| SensorFaultRecord {
            rule: 1,
            target: target.into(),
            fault,
            injected,
            frames: vec![],
        };
        let r = FaultReport::new(
            3,
            vec![
                s("front", SensorFaultKind::Drop, 2),
                s("back", SensorFaultKind::Drop, 3),
                s(ODOMETRY, SensorFaultKind::Freeze, 4),
            ],
            vec![StageFaultRecord {
                rule: 1,
                stage: "bev".into(),
                fault: StageFaultKind::Hang,
                injected: 1,
                first_frame: Some(9),
                last_frame: Some(9),
                frames: vec![9],
                runtime: StageCounters::default(),
                written_off_in: vec![9],
            }],
        );
        assert_eq!(r.injected, 10);
        assert_eq!(r.by_class["camera drop"], 5);
        assert_eq!(r.by_class["odometry freeze"], 4);
        assert_eq!(r.by_class["stage hang"], 1);
        let lines = r.summary_lines();
        assert!(lines[0].contains("faults injected: 10"), "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("written off in frames [9]")),
            "{lines:?}"
        );
    }
}
