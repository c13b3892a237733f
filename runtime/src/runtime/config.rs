//! Runtime settings and start-up errors: [`RuntimeConfig`], [`ReleaseMode`],
//! [`TimingModel`] and [`RuntimeError`].
//!
//! Contract: plain data and a trait, checked by `Runtime::new` (a zero period or a publish
//! margin not below the deadline is a [`RuntimeError::Config`]). Nothing here runs on the
//! hot path except [`TimingModel::duration_ns`], which the scheduler calls once per stage
//! and frame in modeled (lockstep) runs and which must therefore not allocate.

use serde::{Deserialize, Serialize};

use crate::arena::ArenaError;
use crate::modes::{LadderConfig, LadderError};
use crate::rt::RtRequest;

/// How frames are released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseMode {
    /// Time-triggered at absolute times, one period apart (vehicle, real-time replay).
    #[default]
    RealTime,
    /// Data-triggered: next frame as soon as a slot is free; real clock.
    AsFastAsPossible,
    /// Data-triggered with a virtual clock advancing one period per frame.
    Lockstep,
}

/// Stage durations from a model or a recorded trace, for reproducible timing decisions.
pub trait TimingModel: Send {
    /// Modeled duration of plan stage `stage` in `frame`; `fallback` when it runs its fallback.
    fn duration_ns(&mut self, stage: usize, frame: u64, fallback: bool) -> u64;
}

impl<F: FnMut(usize, u64, bool) -> u64 + Send> TimingModel for F {
    fn duration_ns(&mut self, stage: usize, frame: u64, fallback: bool) -> u64 {
        self(stage, frame, fallback)
    }
}

/// The default `hang_after_ns` in lockstep, ns (see [`RuntimeConfig::hang_after_ns`]): one
/// minute. It was ten seconds, and the shipped backbone on the scalar kernel path of an
/// aarch64 build under qemu takes 5.6–5.9 s a frame on an idle 2-core machine and 10.0–10.2 s
/// with two busy processes beside it: there it was written off as hung in frame 0 and the
/// lockstep output hash changed (as on CI, 2026-11-27). A minute is six times that.
pub const LOCKSTEP_HANG_AFTER_NS: u64 = 60_000_000_000;

/// Runtime settings (plan settings live in [`crate::plan::PlanConfig`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuntimeConfig {
    /// Frame period, ns (30 Hz by default).
    pub period_ns: u64,
    /// Deadline after release, ns; 0 = one period.
    pub deadline_ns: u64,
    /// The fallback is published this long before the deadline, ns.
    pub publish_margin_ns: u64,
    /// How frames are released.
    pub release: ReleaseMode,
    /// A stage running longer than this is declared hung and its lane lost, ns;
    /// 0 = four deadlines, except in lockstep: there 0 means [`LOCKSTEP_HANG_AFTER_NS`]
    /// (one minute), because lockstep takes no timing decision from the wall clock and a
    /// slow machine (a loaded CI runner, an emulator) must not write off a stage that is
    /// merely slow; the write-off stays only as the backstop that keeps a replay with a
    /// stage that truly never returns from waiting for ever.
    pub hang_after_ns: u64,
    /// Longest watchdog sleep, ns; 0 = automatic: half the smallest stage budget (or of
    /// the guard interval when no stage has a budget), between 100 µs and 5 ms. The
    /// watchdog otherwise sleeps exactly until the earliest expiry it knows of, so a
    /// budget longer than the tick is checked on time; every wake-up costs the lanes a
    /// little (a context switch), which is why the tick is not smaller than it must be.
    pub watchdog_tick_ns: u64,
    /// An idle lane spins this long for new work before it parks, ns.
    pub lane_spin_ns: u64,
    /// Spans kept for the trace (oldest overwritten).
    pub span_capacity: usize,
    /// Pinning, SCHED_FIFO, memory locking.
    pub rt: RtRequest,
    /// Degradation ladder.
    pub ladder: LadderConfig,
    /// Stack size of each lane thread, bytes; 0 = Rust's default (2 MiB, or
    /// `RUST_MIN_STACK`). Stages run on these stacks; with locked memory every byte of
    /// them is resident, so a vehicle build may want them small.
    pub lane_stack_bytes: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            period_ns: 33_333_333,
            deadline_ns: 0,
            publish_margin_ns: 1_000_000,
            release: ReleaseMode::RealTime,
            hang_after_ns: 0,
            watchdog_tick_ns: 0,
            lane_spin_ns: 100_000,
            span_capacity: 1 << 16,
            rt: RtRequest::default(),
            ladder: LadderConfig::default(),
            lane_stack_bytes: 0,
        }
    }
}

impl RuntimeConfig {
    /// Deadline length actually used.
    pub fn deadline_len_ns(&self) -> u64 {
        if self.deadline_ns == 0 {
            self.period_ns
        } else {
            self.deadline_ns
        }
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A stage's `init` failed.
    #[error("stage '{stage}' failed to initialise: {error}")]
    Init {
        /// Stage name.
        stage: String,
        /// Its error.
        error: crate::stage::StageError,
    },
    /// The arena could not be allocated.
    #[error("arena: {0}")]
    Arena(#[from] ArenaError),
    /// The ladder does not fit the plan.
    #[error(transparent)]
    Ladder(#[from] LadderError),
    /// A bad setting.
    #[error("invalid runtime configuration: {0}")]
    Config(String),
    /// A thread could not be spawned.
    #[error("could not start thread '{name}': {error}")]
    Thread {
        /// Thread name.
        name: String,
        /// OS error.
        error: std::io::Error,
    },
    /// A runtime thread, the publisher or the scheduling step panicked outside any stage
    /// (returned by `Runtime::shutdown`; stage panics are contained and reported, not
    /// errors).
    #[error("redline runtime: a panic in {place}: {message}")]
    Panicked {
        /// Where: a lane or watchdog thread, or the publisher / scheduling step.
        place: String,
        /// The panic message.
        message: String,
    },
    /// The plan was already used by another runtime.
    #[error("the plan's stages were already taken by another runtime: build a new plan")]
    PlanConsumed,
}
