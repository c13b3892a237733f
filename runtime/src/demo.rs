//! Demo graphs used by the tests, the benchmarks and `redline demo`: real (small) work with
//! fan-out, fan-in, a stateful stage and a `parallel_for` stage, plus fault injection.
//!
//! [`demo_graph`] builds 9 stages:
//!
//! ```text
//!             ┌─> smooth (parallel_for) ─┐
//! source ─> normalize ─> gradient ───────┼─> fuse ─> temporal (stateful) ─> histogram ─> summary
//!             └─> energy ────────────────┘
//! ```
//!
//! Every stage is integer arithmetic on the frame number, so outputs are bit-identical
//! across runs and lane counts. [`empty_graph`] builds the 12-stage graph of empty stages the
//! scheduler-overhead benchmark measures. [`Faults`] lets a test stall, hang or panic a
//! stage.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::graph::GraphBuilder;
use crate::modes::{LadderConfig, ModeSpec};
use crate::rng::mix64;
use crate::stage::{Criticality, FrameInfo, Stage, StageError, StageIo};

/// Switches a test flips to stall, hang or panic one demo stage (by name index in the
/// demo).
#[derive(Debug)]
pub struct Faults {
    stall_stage: AtomicUsize,
    stall_ns: AtomicU64,
    hang_stage: AtomicUsize,
    hang_released: AtomicBool,
    panic_stage: AtomicUsize,
    panic_from: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            stall_stage: AtomicUsize::new(usize::MAX),
            stall_ns: AtomicU64::new(0),
            hang_stage: AtomicUsize::new(usize::MAX),
            hang_released: AtomicBool::new(false),
            panic_stage: AtomicUsize::new(usize::MAX),
            panic_from: AtomicU64::new(u64::MAX),
        }
    }
}

impl Faults {
    /// New switches, all off.
    pub fn new() -> Arc<Faults> {
        Arc::new(Faults::default())
    }

    /// Every run of demo stage `id` takes `ns` longer, sleeping (0 = stop stalling).
    pub fn stall(&self, id: usize, ns: u64) {
        self.stall_ns.store(ns, Ordering::SeqCst);
        self.stall_stage
            .store(if ns == 0 { usize::MAX } else { id }, Ordering::SeqCst);
    }

    /// The next run of demo stage `id` never returns until [`Faults::release_hang`].
    pub fn hang(&self, id: usize) {
        self.hang_released.store(false, Ordering::SeqCst);
        self.hang_stage.store(id, Ordering::SeqCst);
    }

    /// Lets a hung stage return (so test threads can end).
    pub fn release_hang(&self) {
        self.hang_stage.store(usize::MAX, Ordering::SeqCst);
        self.hang_released.store(true, Ordering::SeqCst);
    }

    /// Demo stage `id` panics in its first run at frame `frame` or later (a bug in user
    /// code, for the containment tests). `smooth` panics inside its `parallel_chunks_mut`
    /// closure, in its last chunk, so the panic may happen on a helper lane; every other
    /// stage panics at the start of `run`. The message names the stage and the frame.
    pub fn panic_at(&self, id: usize, frame: u64) {
        self.panic_from.store(frame, Ordering::SeqCst);
        self.panic_stage.store(id, Ordering::SeqCst);
    }

    /// Whether demo stage `id` is to panic in `frame`.
    fn panics(&self, id: usize, frame: u64) -> bool {
        self.panic_stage.load(Ordering::Relaxed) == id
            && frame >= self.panic_from.load(Ordering::Relaxed)
    }

    fn apply(&self, id: usize, frame: u64) {
        if id != ids::SMOOTH && self.panics(id, frame) {
            panic!(
                "injected panic: demo stage {} at frame {frame}",
                ids::NAMES[id]
            );
        }
        if self.stall_stage.load(Ordering::Relaxed) == id {
            // Sleep rather than spin: a stall of tens of ms spinning at SCHED_FIFO would
            // trip the kernel's RT throttling and stall the whole machine, not one stage.
            let ns = self.stall_ns.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_nanos(ns));
        }
        if self.hang_stage.load(Ordering::Relaxed) == id {
            while !self.hang_released.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Stage ids of the demo graph, for fault injection and ladder configs.
pub mod ids {
    /// source
    pub const SOURCE: usize = 0;
    /// normalize
    pub const NORMALIZE: usize = 1;
    /// smooth (splits its output over lanes with parallel_chunks_mut)
    pub const SMOOTH: usize = 2;
    /// gradient
    pub const GRADIENT: usize = 3;
    /// energy
    pub const ENERGY: usize = 4;
    /// fuse
    pub const FUSE: usize = 5;
    /// temporal (stateful)
    pub const TEMPORAL: usize = 6;
    /// histogram
    pub const HISTOGRAM: usize = 7;
    /// summary
    pub const SUMMARY: usize = 8;
    /// Names, by id.
    pub const NAMES: [&str; 9] = [
        "source",
        "normalize",
        "smooth",
        "gradient",
        "energy",
        "fuse",
        "temporal",
        "histogram",
        "summary",
    ];
}

/// A demo stage: `id` selects what it computes.
struct DemoStage {
    id: usize,
    faults: Arc<Faults>,
    state: Vec<i64>,
    len: usize,
}

impl Stage for DemoStage {
    fn init(&mut self) -> Result<(), StageError> {
        if self.id == ids::TEMPORAL {
            self.state = vec![0; self.len];
        }
        Ok(())
    }

    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        self.faults.apply(self.id, f.frame);
        let n = self.len;
        match self.id {
            ids::SOURCE => {
                let out = io.output::<u32>(0)?;
                for (i, v) in out.iter_mut().enumerate() {
                    *v = mix64(f.frame.wrapping_mul(1_000_003).wrapping_add(i as u64)) as u32;
                }
            }
            ids::NORMALIZE => {
                let inp = io.input::<u32>(0)?;
                let out = io.output::<i16>(0)?;
                for (o, &v) in out.iter_mut().zip(inp) {
                    *o = ((v >> 16) as i32 - 32768) as i16;
                }
            }
            ids::SMOOTH => {
                let inp = io.input::<i16>(0)?;
                let out = io.output::<i32>(0)?;
                let len = out.len();
                let panics = self.faults.panics(ids::SMOOTH, f.frame);
                io.parallel_chunks_mut(out, 4, &|chunk, piece| {
                    if panics && chunk == 3 {
                        panic!(
                            "injected panic: demo stage smooth at frame {}, chunk {chunk}",
                            f.frame
                        );
                    }
                    let first = crate::parallel::chunk_range(len, 4, chunk).start;
                    for (o, i) in piece.iter_mut().zip(first..) {
                        let a = i32::from(inp[i.saturating_sub(1)]);
                        let b = i32::from(inp[i]);
                        let c = i32::from(inp[(i + 1).min(n - 1)]);
                        *o = a + 2 * b + c;
                    }
                });
            }
            ids::GRADIENT => {
                let inp = io.input::<i16>(0)?;
                let out = io.output::<i32>(0)?;
                for i in 0..n {
                    out[i] = i32::from(inp[(i + 1).min(n - 1)]) - i32::from(inp[i]);
                }
            }
            ids::ENERGY => {
                let inp = io.input::<i16>(0)?;
                let out = io.output::<i32>(0)?;
                for (o, &v) in out.iter_mut().zip(inp) {
                    *o = (i32::from(v) * i32::from(v)) >> 8;
                }
            }
            ids::FUSE => {
                let a = io.input::<i32>(0)?;
                let b = io.input::<i32>(1)?;
                let c = io.input::<i32>(2)?;
                let out = io.output::<i64>(0)?;
                for i in 0..n {
                    out[i] = i64::from(a[i]) * 3 - i64::from(b[i]) + i64::from(c[i]);
                }
            }
            ids::TEMPORAL => {
                let inp = io.input::<i64>(0)?;
                let out = io.output::<i64>(0)?;
                // Integer exponential moving average over frames: needs strict frame order.
                for i in 0..n {
                    self.state[i] = self.state[i] - (self.state[i] >> 2) + (inp[i] >> 2);
                    out[i] = self.state[i] ^ (f.frame as i64);
                }
            }
            ids::HISTOGRAM => {
                let inp = io.input::<i64>(0)?;
                let out = io.output::<u64>(0)?;
                out.fill(0);
                for &v in inp {
                    out[(mix64(v as u64) & 15) as usize] += 1;
                }
            }
            ids::SUMMARY => {
                let h = io.input::<u64>(0)?;
                let out = io.output::<u64>(0)?;
                out[0] = f.frame;
                out[1] = h.iter().fold(0u64, |acc, &x| mix64(acc ^ x));
                out[2] = *h.iter().max().unwrap_or(&0);
                out[3] = u64::from(f.mode);
            }
            _ => return Err(StageError::new("unknown demo stage")),
        }
        Ok(())
    }
}

/// Budgets (µs) of the demo stages for up to 4096 elements per buffer; larger buffers
/// scale them linearly (see [`demo_budget_us`]). Generous: several times the typical
/// execution time in a release build, so that only real stalls overrun.
pub const DEMO_BUDGETS_US: [u64; 9] = [400, 300, 400, 300, 300, 400, 400, 300, 200];

/// Budget of demo stage `id` for buffers of `len` elements, µs.
pub fn demo_budget_us(id: usize, len: usize) -> u64 {
    DEMO_BUDGETS_US[id] * (len.div_ceil(4096).max(1) as u64)
}

/// The 9-stage demo graph over `len` elements per buffer; publishes `"summary"` (`u64[4]`).
pub fn demo_graph(len: usize, faults: &Arc<Faults>) -> GraphBuilder {
    let mut g = GraphBuilder::new();
    let st = |id: usize| DemoStage {
        id,
        faults: faults.clone(),
        state: Vec::new(),
        len,
    };
    let b = |id: usize| demo_budget_us(id, len);
    g.stage("source", st(ids::SOURCE))
        .writes::<u32>("raw", len)
        .budget_us(b(ids::SOURCE))
        .criticality(Criticality::Critical);
    g.stage("normalize", st(ids::NORMALIZE))
        .reads::<u32>("raw", len)
        .writes::<i16>("norm", len)
        .budget_us(b(ids::NORMALIZE));
    g.stage("smooth", st(ids::SMOOTH))
        .reads::<i16>("norm", len)
        .writes::<i32>("smooth", len)
        .budget_us(b(ids::SMOOTH));
    g.stage("gradient", st(ids::GRADIENT))
        .reads::<i16>("norm", len)
        .writes::<i32>("grad", len)
        .budget_us(b(ids::GRADIENT));
    g.stage("energy", st(ids::ENERGY))
        .reads::<i16>("norm", len)
        .writes::<i32>("energy", len)
        .budget_us(b(ids::ENERGY))
        .criticality(Criticality::BestEffort);
    g.stage("fuse", st(ids::FUSE))
        .reads::<i32>("smooth", len)
        .reads::<i32>("grad", len)
        .reads::<i32>("energy", len)
        .writes::<i64>("fused", len)
        .budget_us(b(ids::FUSE));
    g.stage("temporal", st(ids::TEMPORAL))
        .reads::<i64>("fused", len)
        .writes::<i64>("tracked", len)
        .budget_us(b(ids::TEMPORAL));
    g.stage("histogram", st(ids::HISTOGRAM))
        .reads::<i64>("tracked", len)
        .writes::<u64>("hist", 16)
        .budget_us(b(ids::HISTOGRAM));
    g.stage("summary", st(ids::SUMMARY))
        .reads::<u64>("hist", 16)
        .writes::<u64>("summary", 4)
        .budget_us(b(ids::SUMMARY))
        .criticality(Criticality::Critical);
    g.publish("summary");
    g
}

/// A stage that does nothing but touch its first output byte.
#[derive(Debug, Default, Clone, Copy)]
pub struct EmptyStage;

impl Stage for EmptyStage {
    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        if io.output_count() > 0 {
            io.output_bytes(0)?[0] = f.frame as u8;
        }
        Ok(())
    }
}

/// The 12-stage graph of empty stages with fan-out and fan-in:
/// `src → a0..a3 → b0..b3 → join → post → sink`, publishing `"sink"`.
pub fn empty_graph() -> GraphBuilder {
    let mut g = GraphBuilder::new();
    g.stage("src", EmptyStage).writes::<u8>("src", 64);
    for i in 0..4 {
        g.stage(&format!("a{i}"), EmptyStage)
            .reads::<u8>("src", 64)
            .writes::<u8>(&format!("a{i}"), 64);
    }
    for i in 0..4 {
        g.stage(&format!("b{i}"), EmptyStage)
            .reads::<u8>(&format!("a{i}"), 64)
            .writes::<u8>(&format!("b{i}"), 64);
    }
    {
        let mut s = g.stage("join", EmptyStage);
        for i in 0..4 {
            s = s.reads::<u8>(&format!("b{i}"), 64);
        }
        s.writes::<u8>("join", 64);
    }
    g.stage("post", EmptyStage)
        .reads::<u8>("join", 64)
        .writes::<u8>("post", 64);
    g.stage("sink", EmptyStage)
        .reads::<u8>("post", 64)
        .writes::<u8>("sink", 64);
    g.publish("sink");
    g
}

/// The demo's degradation ladder: nominal → reduced (no `smooth`) → minimal (no `smooth`,
/// `gradient` or `energy`), with the given thresholds (see [`LadderConfig`]). `minimal` is
/// the terminal rung; `smooth` is shed to `reduced` when it overruns in a third of the
/// window; a frame is at risk with less than 5 % of its deadline left, good with 10 %.
pub fn demo_ladder(degrade_after: u32, window: u32, recover_after: u32) -> LadderConfig {
    let mode = ModeSpec::new;
    LadderConfig {
        modes: vec![
            mode("nominal", &[]),
            mode("reduced", &["smooth"]),
            mode("minimal", &["smooth", "gradient", "energy"]),
        ],
        degrade_after,
        window,
        recover_after,
        slack_fraction: 0.1,
        risk_slack_fraction: 0.05,
        shed_after: window.div_ceil(3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig};

    /// Lockstep hash of the demo graph's published outputs over 40 frames on `lanes` lanes.
    fn lockstep_hash(lanes: usize) -> (u64, u64) {
        let faults = Faults::new();
        let plan = demo_graph(4099, &faults)
            .build(&PlanConfig {
                lanes,
                frame_slots: 2,
            })
            .unwrap();
        let cfg = RuntimeConfig {
            release: ReleaseMode::Lockstep,
            ..RuntimeConfig::default()
        };
        let mut rt = Runtime::new(plan, cfg).unwrap();
        let mut h = HashPublisher::default();
        rt.run(40, &mut h);
        (h.hash, h.frames)
    }

    /// The smooth stage splits its output with `parallel_chunks_mut`: the outputs are the
    /// same on any number of lanes, and the same as before the split (pinned hash, taken
    /// with the raw-pointer version of the stage).
    #[test]
    fn demo_outputs_do_not_depend_on_lanes() {
        let one = lockstep_hash(1);
        assert_eq!(one, (0x7afa_654f_db11_e6b3, 40));
        for lanes in [2, 4] {
            assert_eq!(lockstep_hash(lanes), one, "{lanes} lanes");
        }
    }
}
