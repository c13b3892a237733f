//! Wrapping stages of the driving graph as it is built: the slowdown knob, and a hook for
//! wrappers from outside the pipeline (fault injection in `redline_sim::faults`).
//!
//! The slowdown knob makes one stage slower on purpose, to test the regression harness
//! (`[slowdown.STAGE]` in the config; see [`crate::config::Slowdown`]).
//!
//! [`Slowed`] wraps a stage. After each `run` it busy-waits `percent` of that run's own
//! duration plus a fixed `busy_ms`: a busy-wait, not a sleep, so the lane stays occupied
//! exactly as with a slower implementation, and the watchdog, the histograms and the
//! ladder see an honest longer execution. The outputs are the inner stage's, untouched.
//!
//! A [`StageHook`] (given to [`crate::graph::build_with`]) wraps the stages it names, after
//! the slowdown; its wrapper is called through one extra virtual call per `run`.
//!
//! Hot path: two clock reads and a spin loop ([`spin_until`]); no allocation, no lock, no
//! panic. Stages without a slowdown and not named by the hook are not wrapped at all.

use std::time::{Duration, Instant};

use redline_runtime::graph::StageBuilder;
use redline_runtime::{Fallback, FrameInfo, GraphBuilder, Stage, StageError, StageIo};

use crate::config::{PipelineConfig, Slowdown};

/// A stage made slower by a [`Slowdown`].
#[derive(Debug)]
pub struct Slowed<S> {
    inner: S,
    /// Extra time per ns of the inner run, ×2^16 (integer arithmetic on the hot path).
    factor_q16: u64,
    busy: Duration,
}

impl<S: Stage> Slowed<S> {
    /// Wraps `inner` with `slowdown`.
    pub fn new(inner: S, slowdown: Slowdown) -> Self {
        Slowed {
            inner,
            factor_q16: (slowdown.percent / 100.0 * 65536.0).round() as u64,
            busy: Duration::from_nanos((slowdown.busy_ms * 1e6).round() as u64),
        }
    }
}

impl<S: Stage> Stage for Slowed<S> {
    fn init(&mut self) -> Result<(), StageError> {
        self.inner.init()
    }

    fn run(&mut self, frame: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let start = Instant::now();
        let result = self.inner.run(frame, io);
        let ran = start.elapsed();
        let ran_ns = u64::try_from(ran.as_nanos()).unwrap_or(u64::MAX);
        let extra = Duration::from_nanos(ran_ns.saturating_mul(self.factor_q16) >> 16) + self.busy;
        spin_until(start + ran + extra);
        result
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        self.inner.make_fallback()
    }
}

/// Busy-waits (spins on the clock) until `until`: the lane stays occupied exactly as with
/// slower code. No allocation, no lock, no system call besides the clock.
pub fn spin_until(until: Instant) {
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Wraps chosen stages of the driving graph when it is built (see [`crate::graph::build_with`]).
///
/// Asked once per stage, at build time (it may allocate then); what it returns runs on the
/// hot path and must keep the [`Stage`] contract except where it breaks it on purpose
/// (an injected fault).
pub trait StageHook: Send + Sync {
    /// Whether the stage named `name` is to be wrapped.
    fn wraps(&self, name: &str) -> bool;
    /// Wraps `stage` (called only for names [`StageHook::wraps`] accepted).
    fn wrap(&self, name: &str, stage: Box<dyn Stage>) -> Box<dyn Stage>;
}

/// A stage the hook wrapped: forwards to it (the runtime takes a sized `Stage`).
struct Hooked(Box<dyn Stage>);

impl Stage for Hooked {
    fn init(&mut self) -> Result<(), StageError> {
        self.0.init()
    }

    fn run(&mut self, frame: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        self.0.run(frame, io)
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        self.0.make_fallback()
    }
}

/// Adds `stage` to `g` under `name`, wrapped in [`Slowed`] when the config has a
/// slowdown for that name, then by `hook` when it wraps that name.
pub fn add_stage<'g, S: Stage + 'static>(
    g: &'g mut GraphBuilder,
    cfg: &PipelineConfig,
    hook: Option<&dyn StageHook>,
    name: &str,
    stage: S,
) -> StageBuilder<'g> {
    let slowdown = cfg
        .slowdown
        .get(name)
        .filter(|sd| sd.percent > 0.0 || sd.busy_ms > 0.0);
    match (slowdown, hook.filter(|h| h.wraps(name))) {
        (None, None) => g.stage(name, stage),
        (Some(sd), None) => g.stage(name, Slowed::new(stage, *sd)),
        (None, Some(h)) => g.stage(name, Hooked(h.wrap(name, Box::new(stage)))),
        (Some(sd), Some(h)) => g.stage(
            name,
            Hooked(h.wrap(name, Box::new(Slowed::new(stage, *sd)))),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_runtime::{PlanConfig, Runtime, RuntimeConfig};

    /// Busy for a fixed time: what the wrapper measures and scales.
    #[derive(Debug)]
    struct Spin(Duration);

    impl Stage for Spin {
        fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
            let t = Instant::now();
            while t.elapsed() < self.0 {
                std::hint::spin_loop();
            }
            io.output::<u32>(0)?[0] = 7;
            Ok(())
        }
    }

    fn min_exec_ns(slowdown: Option<Slowdown>) -> u64 {
        let mut cfg = PipelineConfig::default();
        if let Some(sd) = slowdown {
            cfg.slowdown.insert("spin".into(), sd);
        }
        let mut g = GraphBuilder::new();
        add_stage(&mut g, &cfg, None, "spin", Spin(Duration::from_micros(500)))
            .writes::<u32>("x", 1);
        g.publish("x");
        let plan = g
            .build(&PlanConfig {
                lanes: 1,
                frame_slots: 1,
            })
            .unwrap();
        let mut rt = Runtime::new(
            plan,
            RuntimeConfig {
                release: redline_runtime::ReleaseMode::AsFastAsPossible,
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let mut hash = redline_runtime::HashPublisher::default();
        rt.run(40, &mut hash);
        rt.report().stages[0].execution.min_ns
    }

    #[test]
    fn percent_and_busy_time_lengthen_every_run() {
        // Minimum execution time: a lower bound that noise can only raise, so the
        // assertions hold on a loaded machine (the slowdown is a busy-wait to a deadline,
        // never shorter than asked). Bounds are 0.5 % low: the histogram reports the
        // lowest value of the minimum's bucket (3 significant digits).
        let plain = min_exec_ns(None);
        assert!(plain >= 497_500, "{plain}");
        let slowed = min_exec_ns(Some(Slowdown {
            percent: 40.0,
            busy_ms: 0.0,
        }));
        assert!(
            slowed >= 696_500,
            "40% of >= 500 us must add >= 200 us: {slowed}"
        );
        let busy = min_exec_ns(Some(Slowdown {
            percent: 0.0,
            busy_ms: 0.3,
        }));
        assert!(busy >= 796_000, "0.3 ms fixed must add 300 us: {busy}");
    }
}
