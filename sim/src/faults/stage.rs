//! [`StageFaults`]: the `[[faults.stage]]` rules as a
//! [`StageHook`](redline_pipeline::slowdown::StageHook) that wraps the named stages of the
//! driving graph when it is built.
//!
//! Hot path of a wrapped stage: per rule one [`FrameSet::contains`]; on a hit, three relaxed
//! atomic updates (the count, the frame, the first and last frames), then the fault: a spin on the clock (stall,
//! [`spin_until`], the `[slowdown]` knob's), a sleep loop that polls a release flag every
//! millisecond (hang: a fault that blocks on purpose), or a panic (whose message is the one
//! allocation). Then the wrapped stage's own `run`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redline_pipeline::slowdown::{spin_until, StageHook};
use redline_runtime::report::Report;
use redline_runtime::{Fallback, FrameInfo, Stage, StageError, StageIo};

use super::{FaultConfig, FaultError, FrameSet, StageFaultKind, StageFaultRecord};

const NONE: u64 = u64::MAX;

/// One rule, resolved.
#[derive(Clone, Debug)]
struct Rule {
    /// Index in `[[faults.stage]]`, from 0 (and into the counters).
    index: usize,
    stage: String,
    fault: StageFaultKind,
    frames: FrameSet,
    /// Stall or hang time.
    time: Duration,
}

/// What one rule did, updated by the wrapped stage.
#[derive(Debug)]
struct Counter {
    injected: AtomicU64,
    first: AtomicU64,
    last: AtomicU64,
    /// The first [`StageFaultRecord::MAX_FRAMES`] frames hit, in order (preallocated).
    frames: Box<[AtomicU64]>,
}

impl Counter {
    fn new() -> Counter {
        Counter {
            injected: AtomicU64::new(0),
            first: AtomicU64::new(NONE),
            last: AtomicU64::new(NONE),
            frames: (0..StageFaultRecord::MAX_FRAMES)
                .map(|_| AtomicU64::new(NONE))
                .collect(),
        }
    }

    /// Hot path: three relaxed atomic updates.
    fn hit(&self, frame: u64) {
        let i = self.injected.fetch_add(1, Ordering::Relaxed) as usize;
        if let Some(slot) = self.frames.get(i) {
            slot.store(frame, Ordering::Relaxed);
        }
        let _ = self
            .first
            .compare_exchange(NONE, frame, Ordering::Relaxed, Ordering::Relaxed);
        self.last.store(frame, Ordering::Relaxed);
    }
}

/// The stage faults of a run (see the [module docs](super)).
#[derive(Debug)]
pub struct StageFaults {
    rules: Vec<Rule>,
    counters: Arc<[Counter]>,
    release: Arc<AtomicBool>,
}

impl StageFaults {
    /// Resolves `cfg`'s stage rules (its sensor rules are ignored here) for a graph with
    /// these `stages` (e.g. [`redline_pipeline::graph::stage_names`]). Fails when the table
    /// is invalid or a rule names a stage not in the list.
    pub fn new(cfg: &FaultConfig, stages: &[&str]) -> Result<StageFaults, FaultError> {
        cfg.validate()?;
        let mut rules = Vec::with_capacity(cfg.stage.len());
        for (i, r) in cfg.stage.iter().enumerate() {
            if !stages.contains(&r.stage.as_str()) {
                return Err(FaultError::UnknownStage {
                    rule: i + 1,
                    name: r.stage.clone(),
                    valid: stages.join(", "),
                });
            }
            let frames = r
                .frame_set(cfg.seed, i)
                .map_err(|what| FaultError::Invalid {
                    table: "stage",
                    rule: i + 1,
                    what,
                })?;
            let ms = match r.fault {
                StageFaultKind::Stall => r.stall_ms.unwrap_or(0.0),
                StageFaultKind::Hang => r.hang_ms(),
                StageFaultKind::Panic => 0.0,
            };
            rules.push(Rule {
                index: i,
                stage: r.stage.clone(),
                fault: r.fault,
                frames,
                time: Duration::from_nanos((ms * 1e6).round() as u64),
            });
        }
        let counters = (0..rules.len()).map(|_| Counter::new()).collect();
        Ok(StageFaults {
            rules,
            counters,
            release: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Whether no stage is faulted.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Ends every hang now and makes later ones return at once (e.g. before dropping a
    /// runtime whose stage is still blocked).
    pub fn release_hangs(&self) {
        self.release.store(true, Ordering::Release);
    }

    /// Injections so far, per rule (in `[[faults.stage]]` order).
    pub fn injected(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.injected.load(Ordering::Relaxed))
            .collect()
    }

    /// What each rule injected, beside the runtime's record of its stage in `report`.
    pub fn records(&self, report: &Report) -> Vec<StageFaultRecord> {
        self.rules
            .iter()
            .map(|r| {
                let c = &self.counters[r.index];
                let frame = |a: &AtomicU64| Some(a.load(Ordering::Relaxed)).filter(|&f| f != NONE);
                StageFaultRecord {
                    rule: r.index + 1,
                    stage: r.stage.clone(),
                    fault: r.fault,
                    injected: c.injected.load(Ordering::Relaxed),
                    first_frame: frame(&c.first),
                    last_frame: frame(&c.last),
                    frames: c.frames.iter().map_while(frame).collect(),
                    runtime: report
                        .stages
                        .iter()
                        .find(|s| s.name == r.stage)
                        .map(|s| s.counters)
                        .unwrap_or_default(),
                    written_off_in: report
                        .lost_stages
                        .iter()
                        .filter(|l| l.stage == r.stage)
                        .map(|l| l.frame)
                        .collect(),
                }
            })
            .collect()
    }
}

impl StageHook for StageFaults {
    fn wraps(&self, name: &str) -> bool {
        self.rules.iter().any(|r| r.stage == name)
    }

    fn wrap(&self, name: &str, stage: Box<dyn Stage>) -> Box<dyn Stage> {
        Box::new(FaultyStage {
            inner: stage,
            name: name.to_string(),
            rules: self
                .rules
                .iter()
                .filter(|r| r.stage == name)
                .cloned()
                .collect(),
            counters: self.counters.clone(),
            release: self.release.clone(),
        })
    }
}

/// A stage with faults injected before its `run`.
struct FaultyStage {
    inner: Box<dyn Stage>,
    name: String,
    rules: Vec<Rule>,
    counters: Arc<[Counter]>,
    release: Arc<AtomicBool>,
}

impl std::fmt::Debug for FaultyStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStage")
            .field("name", &self.name)
            .field("rules", &self.rules)
            .finish()
    }
}

/// Blocks for `time` (sleeping, polling `release` every millisecond).
fn block(time: Duration, release: &AtomicBool) {
    let until = Instant::now() + time;
    while !release.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(1)));
    }
}

impl Stage for FaultyStage {
    fn init(&mut self) -> Result<(), StageError> {
        self.inner.init()
    }

    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        for r in &self.rules {
            if !r.frames.contains(f.frame) {
                continue;
            }
            self.counters[r.index].hit(f.frame);
            match r.fault {
                StageFaultKind::Stall => spin_until(Instant::now() + r.time),
                StageFaultKind::Hang => block(r.time, &self.release),
                StageFaultKind::Panic => panic!(
                    "injected fault (stage rule #{}): stage `{}` panics in frame {}",
                    r.index + 1,
                    self.name,
                    f.frame
                ),
            }
        }
        self.inner.run(f, io)
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        self.inner.make_fallback()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_pipeline::config::PipelineConfig;
    use redline_pipeline::slowdown::add_stage;
    use redline_runtime::{GraphBuilder, PlanConfig, ReleaseMode, Runtime, RuntimeConfig};

    /// Writes the frame number.
    #[derive(Debug)]
    struct Count;

    impl Stage for Count {
        fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
            io.output::<u64>(0)?[0] = f.frame;
            Ok(())
        }
    }

    fn faults(text: &str) -> StageFaults {
        StageFaults::new(&toml::from_str(text).unwrap(), &["a", "b"]).unwrap()
    }

    /// Stages `a` and `b` (b reads a), lockstep, `frames` frames; returns the report.
    fn run(f: &StageFaults, frames: u64) -> Report {
        let cfg = PipelineConfig::default();
        let mut g = GraphBuilder::new();
        add_stage(&mut g, &cfg, Some(f), "a", Count).writes::<u64>("x", 1);
        add_stage(&mut g, &cfg, Some(f), "b", Count)
            .reads::<u64>("x", 1)
            .writes::<u64>("y", 1);
        g.publish("y");
        let plan = g
            .build(&PlanConfig {
                lanes: 1,
                frame_slots: 1,
            })
            .unwrap();
        let mut rt = Runtime::new(
            plan,
            RuntimeConfig {
                release: ReleaseMode::Lockstep,
                hang_after_ns: 60_000_000_000,
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let mut h = redline_runtime::HashPublisher::default();
        rt.run(frames, &mut h);
        rt.report()
    }

    #[test]
    fn unknown_stages_list_the_graph() {
        let e = StageFaults::new(
            &toml::from_str("[[stage]]\nstage = \"c\"\nfault = \"panic\"\nframes = \"1\"\n")
                .unwrap(),
            &["a", "b"],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("#1") && e.contains("\"c\"") && e.contains("a, b"),
            "{e}"
        );
    }

    #[test]
    fn only_named_stages_are_wrapped_and_stalls_hit_their_frames() {
        let f = faults(
            "[[stage]]\nstage = \"b\"\nfault = \"stall\"\nstall_ms = 30.0\nframes = \"2, 4\"\n",
        );
        assert!(f.wraps("b") && !f.wraps("a"));
        let r = run(&f, 6);
        let rec = f.records(&r);
        assert_eq!(rec.len(), 1);
        assert_eq!(
            (rec[0].injected, rec[0].first_frame, rec[0].last_frame),
            (2, Some(2), Some(4))
        );
        assert_eq!(rec[0].frames, vec![2, 4]);
        assert_eq!(rec[0].runtime.runs, 6);
        // The stalled runs took at least 30 ms (a busy-wait never ends early); the others
        // are microseconds.
        let b = &r.stages[1];
        assert_eq!(b.name, "b");
        assert!(b.execution.max_ns >= 29_800_000, "{:?}", b.execution);
        assert!(
            r.stages[0].execution.max_ns < 20_000_000,
            "{:?}",
            r.stages[0]
        );
    }

    #[test]
    fn a_hang_blocks_until_released() {
        let f = Arc::new(faults(
            "[[stage]]\nstage = \"a\"\nfault = \"hang\"\nhang_ms = 60000.0\nframes = \"1\"\n",
        ));
        let releaser = {
            let f = f.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                f.release_hangs();
            })
        };
        let t0 = Instant::now();
        let r = run(&f, 3);
        releaser.join().unwrap();
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(90) && took < Duration::from_secs(30),
            "{took:?}"
        );
        assert_eq!(f.injected(), vec![1]);
        assert_eq!(r.stages[0].counters.runs, 3, "released, not written off");
    }
}
