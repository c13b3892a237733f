//! [`StageFaults`]: the `[[faults.stage]]` rules as a
//! [`StageHook`](redline_pipeline::slowdown::StageHook) that wraps the named stages of the
//! driving graph when it is built.
//!
//! Hot path of a wrapped stage: per rule one [`FrameSet::contains`]; on a hit, two relaxed
//! atomic updates (the count and the frame), then the fault: a spin on the clock (stall,
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
}

impl Counter {
    fn hit(&self, frame: u64) {
        self.injected.fetch_add(1, Ordering::Relaxed);
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
        let counters = (0..rules.len())
            .map(|_| Counter {
                injected: AtomicU64::new(0),
                first: AtomicU64::new(NONE),
                last: AtomicU64::new(NONE),
            })
            .collect();
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
