//! The slowdown knob: makes one stage slower on purpose, to test the regression harness
//! (`[slowdown.STAGE]` in the config; see [`crate::config::Slowdown`]).
//!
//! [`Slowed`] wraps a stage. After each `run` it busy-waits `percent` of that run's own
//! duration plus a fixed `busy_ms`: a busy-wait, not a sleep, so the lane stays occupied
//! exactly as with a slower implementation, and the watchdog, the histograms and the
//! ladder see an honest longer execution. The outputs are the inner stage's, untouched.
//!
//! Hot path: two clock reads and a spin loop; no allocation, no lock, no panic. Stages
//! without a slowdown are not wrapped at all.

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
        let until = start + ran + extra;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        result
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        self.inner.make_fallback()
    }
}

/// Adds `stage` to `g` under `name`, wrapped in [`Slowed`] when the config has a
/// slowdown for that name.
pub fn add_stage<'g, S: Stage + 'static>(
    g: &'g mut GraphBuilder,
    cfg: &PipelineConfig,
    name: &str,
    stage: S,
) -> StageBuilder<'g> {
    match cfg.slowdown.get(name) {
        Some(sd) if sd.percent > 0.0 || sd.busy_ms > 0.0 => g.stage(name, Slowed::new(stage, *sd)),
        _ => g.stage(name, stage),
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
        add_stage(&mut g, &cfg, "spin", Spin(Duration::from_micros(500))).writes::<u32>("x", 1);
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
