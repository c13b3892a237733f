//! Measuring a runtime: one replay of any graph becomes one [`Measurement`].
//!
//! - [`measure_runtime`]: runs a freshly started [`Runtime`] for a number of frames,
//!   forgets the warm-up (`Runtime::reset_metrics`) and measures the rest: what
//!   `redline regress` does for every replay of the driving graph, and what the harness's
//!   own tests do on a calibrated graph.
//! - [`measurement_of`]: the measurement of a run that has already finished (`redline
//!   replay --report` writes one, so plain replays merge with regression runs).
//!
//! Contract: the harness knows nothing about what the graph computes. The caller says how
//! the run was configured ([`SetupFacts`]: config hash, release mode, lanes, what it
//! replays, ...); the runtime tells the rest (histograms, counts, modes, deadline,
//! budgets). While frames run, the only work added is a publisher wrapped around the
//! caller's that copies each frame's number, latency and status into a vector allocated
//! before the run (no allocation, no lock, no I/O on the hot path); everything else
//! happens after the frames.

use std::collections::BTreeMap;
use std::time::Instant;

use redline_runtime::metrics::LatencyHistogram;
use redline_runtime::{FrameStatus, Published, Publisher, Runtime};

use super::histogram::EncodedHistogram;
use super::measurement::{
    Figures, Measurement, RepFigures, StageFigures, Timeline, TimelineFrame, END_TO_END, FORMAT,
};
use super::setup::{MachineInfo, RunSetup};

/// How a measured run was configured: the part of a [`RunSetup`] that only the caller
/// knows (the runtime reports the deadline, the budgets and the frame counts itself).
#[derive(Clone, Debug, PartialEq)]
pub struct SetupFacts {
    /// Hash of everything that changes the run's measurements (e.g. [`super::setup::fnv1a_hex`]
    /// of the config file without its `[regress]` table).
    pub config_hash: String,
    /// Release mode, in words.
    pub release: String,
    /// Worker lanes.
    pub lanes: usize,
    /// Frames in flight.
    pub frame_slots: usize,
    /// What produced the outputs (the driving graph: network or oracle perception).
    pub perception: String,
    /// Slowdowns injected on purpose (`stage: +P% +B ms`), empty in a real measurement.
    pub slowdown: Vec<String>,
    /// What was replayed (a log path, the built-in scenario, a test graph).
    pub source: String,
}

/// What [`measurement_of`] needs to know about a finished run besides the runtime.
#[derive(Debug)]
pub struct RunFacts<'a> {
    /// How it was configured.
    pub setup: &'a SetupFacts,
    /// Every frame it published, warm-up included (frames before `warmup` are skipped).
    pub timeline: &'a [TimelineFrame],
    /// Frames run, warm-up included.
    pub frames: u64,
    /// Warm-up frames (metrics reset after them).
    pub warmup: u64,
    /// Ladder residency when the metrics were reset (empty: none).
    pub residency_before: &'a [u64],
    /// Label of the replay.
    pub label: &'a str,
    /// When the measured frames started, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Their wall time, ms.
    pub wall_ms: f64,
}

/// Passes every frame on to the caller's publisher, then notes its number, latency and
/// whether it was a fallback, into room reserved before the run (never grows).
struct FrameLog<'p> {
    inner: &'p mut (dyn Publisher + Send),
    frames: Vec<TimelineFrame>,
}

impl Publisher for FrameLog<'_> {
    fn publish(&mut self, p: &Published<'_>) {
        self.inner.publish(p);
        if self.frames.len() == self.frames.capacity() {
            return; // never grow on the hot path
        }
        self.frames.push(TimelineFrame {
            frame: p.info.frame,
            latency_ns: p.latency_ns,
            fallback: matches!(p.status, FrameStatus::Fallback(_)),
        });
    }
}

/// Runs `frames` frames (warm-up included) of a freshly started runtime and measures
/// them as a regression check does: the first `warmup_frames` (at most half) run and are
/// then forgotten (`Runtime::reset_metrics`), the rest is the measurement. Every frame is
/// also handed to `publisher` (the caller's outputs, hashes, progress counters). `setup`
/// says how the runtime was configured and what it replays.
pub fn measure_runtime(
    rt: &mut Runtime,
    setup: &SetupFacts,
    frames: u64,
    warmup_frames: u64,
    label: &str,
    publisher: &mut (dyn Publisher + Send),
) -> Measurement {
    // Never let the warm-up eat more than half of a short log.
    let warm = warmup_frames.min(frames / 2);
    let mut log = FrameLog {
        inner: publisher,
        frames: Vec::with_capacity(frames as usize),
    };
    rt.run(warm, &mut log);
    let residency_before = rt.ladder().residency().to_vec();
    rt.reset_metrics();
    let started_unix_ms = unix_now_ms();
    let t0 = Instant::now();
    rt.run(frames - warm, &mut log);
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    measurement_of(
        rt,
        &RunFacts {
            setup,
            timeline: &log.frames,
            frames,
            warmup: warm,
            residency_before: &residency_before,
            label,
            started_unix_ms,
            wall_ms,
        },
    )
}

/// The measurement of a finished run (one replay): figures, whole histograms, timeline,
/// machine and setup.
pub fn measurement_of(rt: &Runtime, f: &RunFacts<'_>) -> Measurement {
    let warm = f.warmup;
    let report = rt.report();

    let mut hists: Vec<(String, &LatencyHistogram)> = vec![(END_TO_END.into(), rt.end_to_end())];
    let mut stages = Vec::new();
    for (i, s) in report.stages.iter().enumerate() {
        if let Some(h) = rt.stage_execution(i) {
            hists.push((s.name.clone(), h));
        }
        stages.push(StageFigures {
            name: s.name.clone(),
            figures: Figures::from(&s.execution),
        });
    }
    let ladder = rt.ladder();
    let mut mode_frames = BTreeMap::new();
    let mut degraded_frames = 0;
    for (i, &after) in ladder.residency().iter().enumerate() {
        let frames = after - f.residency_before.get(i).copied().unwrap_or(0);
        mode_frames.insert(ladder.mode_name(i).to_string(), frames);
        if i > 0 {
            degraded_frames += frames;
        }
    }
    let rep = RepFigures {
        label: f.label.to_string(),
        started_unix_ms: f.started_unix_ms,
        wall_ms: f.wall_ms,
        frames: report.frames_published,
        end_to_end: Figures::from(&report.end_to_end),
        stages,
        deadline_misses: report.deadline_misses,
        late_publishes: report.late_publishes,
        degraded_frames,
        mode_frames,
        quality: BTreeMap::new(),
    };
    let timeline = Timeline {
        deadline_ns: report.deadline_ns,
        frames: f
            .timeline
            .iter()
            .filter(|r| r.frame >= warm)
            .copied()
            .collect(),
        mode_changes: report
            .transitions
            .iter()
            .filter(|t| t.after_frame >= warm)
            .map(|t| {
                (
                    t.after_frame,
                    format!("{} → {}: {}", t.from, t.to, t.reason),
                )
            })
            .collect(),
    };
    let s = f.setup;
    let setup = RunSetup {
        redline_version: env!("CARGO_PKG_VERSION").into(),
        config_hash: s.config_hash.clone(),
        release: s.release.clone(),
        lanes: s.lanes,
        frame_slots: s.frame_slots,
        perception: s.perception.clone(),
        slowdown: s.slowdown.clone(),
        source: s.source.clone(),
        frames_per_rep: f.frames,
        warmup_frames: warm,
        deadline_ns: report.deadline_ns,
        budgets_ns: report
            .stages
            .iter()
            .map(|s| (s.name.clone(), s.budget_ns))
            .collect(),
    };
    Measurement {
        format: FORMAT.into(),
        created_unix_s: unix_now_ms() / 1000,
        machines: vec![MachineInfo::detect()],
        setups: vec![setup],
        reps: vec![rep],
        histograms: hists
            .iter()
            .map(|(n, h)| EncodedHistogram::encode(n, h))
            .collect(),
        timeline: Some(timeline),
    }
}

/// Now, ms since the Unix epoch (0 if the clock is before it).
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_runtime::{
        FrameInfo, GraphBuilder, PlanConfig, ReleaseMode, RuntimeConfig, Stage, StageError, StageIo,
    };

    /// Writes the frame number; takes no measurable time.
    #[derive(Debug)]
    struct Count;

    impl Stage for Count {
        fn run(&mut self, frame: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
            io.output::<u32>(0)?[0] = frame.frame as u32;
            Ok(())
        }
    }

    fn setup() -> SetupFacts {
        SetupFacts {
            config_hash: "0123456789abcdef".into(),
            release: "AsFastAsPossible".into(),
            lanes: 1,
            frame_slots: 1,
            perception: "none".into(),
            slowdown: vec![],
            source: "two counting stages".into(),
        }
    }

    #[test]
    fn a_runtime_is_measured_after_its_warm_up() {
        let mut g = GraphBuilder::new();
        g.stage("first", Count).writes::<u32>("a", 1);
        g.stage("second", Count)
            .reads::<u32>("a", 1)
            .writes::<u32>("b", 1);
        g.publish("b");
        let plan = g
            .build(&PlanConfig {
                lanes: 1,
                frame_slots: 1,
            })
            .unwrap();
        let mut rt = Runtime::new(
            plan,
            RuntimeConfig {
                release: ReleaseMode::AsFastAsPossible,
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let mut seen = 0u64;
        let mut count = |_: &Published<'_>| seen += 1;
        let m = measure_runtime(&mut rt, &setup(), 30, 10, "test", &mut count);
        assert_eq!(seen, 30, "the caller's publisher sees every frame");

        let rep = &m.reps[0];
        assert_eq!((rep.label.as_str(), rep.frames), ("test", 20));
        assert_eq!(rep.end_to_end.count, 20, "warm-up frames are forgotten");
        let names: Vec<&str> = rep.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["first", "second"]);
        let hists: Vec<&str> = m.histograms.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(hists, [END_TO_END, "first", "second"]);
        assert_eq!(m.histogram("second").unwrap().unwrap().count(), 20);
        let timeline = m.timeline.as_ref().unwrap();
        let frames: Vec<u64> = timeline.frames.iter().map(|f| f.frame).collect();
        assert_eq!(frames, (10..30).collect::<Vec<_>>());
        assert!(timeline.frames.iter().all(|f| !f.fallback));
        let s = &m.setups[0];
        assert_eq!((s.frames_per_rep, s.warmup_frames), (30, 10));
        assert_eq!(s.source, "two counting stages");
        assert_eq!(s.budgets_ns.len(), 2);

        // A short run keeps at least half of its frames.
        let m = measure_runtime(&mut rt, &setup(), 8, 10, "short", &mut |_: &Published<
            '_,
        >| {});
        assert_eq!(m.setups[0].warmup_frames, 4);
    }
}
