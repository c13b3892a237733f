//! The regression harness judged on real-time replays, end to end: the `[slowdown]` knob,
//! the runtime's histograms, [`measure_runtime`] (what `redline regress` measures a replay
//! with), merging, and both verdicts (paired ratios as in `redline regress --against`,
//! medians against a baseline).
//!
//! - a 20 % slowdown injected into one stage is reported as a regression naming that
//!   stage, by both verdicts;
//! - the same build and config against itself passes, by both verdicts;
//! - a baseline written to disk reads back identical and judges the same way.
//!
//! ## Why the timing tests run a calibrated graph, not the perception workload
//!
//! These tests check the harness, not the machine. The driving graph's stages vary with
//! the machine: on the shared CI runner the same build's `segmentation_head` P50 read
//! +24.8 % against itself (median of 9 paired replays) and a 20 % slower backbone read
//! only +11.5 %, so a verdict there tests the runner's noise, which is a measurement
//! (`tools/regress/noise.py`, figures in the README), not a unit test. Here every stage is
//! a [`Calibrated`] busy-wait against the clock, in the driving graph's shape (a chain,
//! two heads in parallel on two lanes): its execution time is the same every frame on any
//! machine, unless the OS takes the core away past its end. So a 20 % slowdown reads
//! 1.20 and the same build 1.00 at P50 (measured here; with both cores loaded by other
//! processes and SCHED_FIFO refused: 1.24–1.25 and 1.00). The tails
//! (P99, P99.9, max) are judged with the default tolerances when the real-time settings
//! were granted; without them one late OS wake-up sets a replay's P99, so they are then
//! left unjudged with a loud warning (see [`calibrated_tolerances`]). The same assertions
//! on the real workload are the `#[ignore]`d `real_workload_*` tests below: run them on a
//! quiet machine with `cargo test -p redline-tests --test regress -- --ignored`.
//!
//! The two sides' replays alternate (reference, candidate, candidate, reference, ...) as
//! `redline regress --against` does, so that drift of the machine falls on both sides.
//! Replays are real time with the lanes pinned, SCHED_FIFO and memory locked where the
//! OS allows (as in the vehicle); what was granted is printed. The tolerances are the
//! defaults (tails aside, as above).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redline_bench::regress::ab::{alternate, Side};
use redline_bench::regress::measure::{measure_runtime, SetupFacts};
use redline_bench::regress::setup::fnv1a_hex;
use redline_bench::regress::{Measurement, RegressConfig, Tolerance, Verdict};
use redline_pipeline::config::{PipelineConfig, Slowdown};
use redline_pipeline::run::{start_runtime, Counters, RecordingPublisher};
use redline_pipeline::sensors::FrameSource;
use redline_pipeline::slowdown::add_stage;
use redline_runtime::rt::RtRequest;
use redline_runtime::{
    FrameInfo, GraphBuilder, PlanConfig, Published, ReleaseMode, Runtime, RuntimeConfig, Stage,
    StageError, StageIo,
};
use redline_sim::feed::Feed;
use redline_sim::scenario::ScenarioConfig;
use redline_tests::temp_dir;

/// Replays per side.
const REPS: usize = 9;

static SERIAL: Mutex<()> = Mutex::new(());

fn show(v: &Verdict) -> String {
    format!("{}{}", v.table(), v.summary_lines().join("\n"))
}

/// How a replay with `cfg` is configured, as its measurement records it (the config hash
/// of the test's own config: equal configs, equal hashes).
fn setup_facts(cfg: &PipelineConfig, source: &str) -> SetupFacts {
    SetupFacts {
        config_hash: fnv1a_hex(&format!("{cfg:?}")),
        release: format!("{:?}", cfg.release),
        lanes: cfg.lanes,
        frame_slots: cfg.frame_slots,
        perception: format!("{:?}", cfg.perception),
        slowdown: cfg
            .slowdown
            .iter()
            .map(|(stage, s)| format!("{stage}: {s}"))
            .collect(),
        source: source.to_string(),
    }
}

fn slowed(mut cfg: PipelineConfig, stage: &str, percent: f64) -> PipelineConfig {
    cfg.slowdown.insert(
        stage.into(),
        Slowdown {
            percent,
            busy_ms: 0.0,
        },
    );
    cfg
}

/// Both verdicts on a reference and a candidate measured alternately.
fn verdicts(
    reference: &Measurement,
    now: &Measurement,
    tolerances: &RegressConfig,
) -> [Verdict; 2] {
    [
        Verdict::paired(reference, now, tolerances),
        Verdict::against_baseline(reference, now, tolerances),
    ]
}

fn assert_regression_named(v: &Verdict, stage: &str, min_ratio: f64) {
    eprintln!("{} verdict:\n{}", v.method, show(v));
    let figure = format!("{stage} p50");
    assert!(
        !v.passed(),
        "a 20% slower {stage} passed ({}):\n{}",
        v.method,
        show(v)
    );
    let row = v
        .rows
        .iter()
        .find(|r| r.figure == figure)
        .unwrap_or_else(|| panic!("{figure} judged: {}", show(v)));
    assert!(!row.pass, "{}", show(v));
    assert!(
        row.ratio.unwrap() > min_ratio,
        "the knob adds 20% of each run: {}",
        show(v)
    );
    let summary = v.summary_lines().join("\n");
    assert!(
        summary.contains("REGRESSION") && summary.contains(&format!("{figure}:")),
        "{summary}"
    );
    assert!(
        v.warnings.iter().any(|w| w.contains("slowdown")),
        "the injected slowdown is named as a setup difference: {:?}",
        v.warnings
    );
}

fn assert_passes(v: &Verdict, reference: &Measurement) {
    eprintln!("{} verdict:\n{}", v.method, show(v));
    assert!(
        v.passed(),
        "same build, same config failed ({}):\n{}",
        v.method,
        show(v)
    );
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    // Every stage and end to end judged at 4 percentiles, plus 3 counts.
    let stages = reference.stage_names().len();
    assert_eq!(v.rows.len(), (stages + 1) * 4 + 3);
    assert_eq!(v.now_reps, REPS);
}

// ---------------------------------------------------------------------------------------
// The calibrated graph.

/// Frames per calibrated replay (the first `warmup_frames` of them forgotten).
const CAL_FRAMES: u64 = 120;
/// Its frame period: 100 Hz; a frame's chain is ≈ 3.3 ms.
const CAL_PERIOD_NS: u64 = 10_000_000;

/// A stage busy for a fixed wall time per frame (spinning on the clock, as a compute
/// kernel occupies its lane), passing the sum of its inputs and the frame number on, so the
/// graph's data flow is real.
#[derive(Debug)]
struct Calibrated {
    busy: Duration,
}

impl Stage for Calibrated {
    fn run(&mut self, frame: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let start = Instant::now();
        let mut value = frame.frame as u32;
        for i in 0..io.input_count() {
            value = value.wrapping_add(io.input::<u32>(i)?[0]);
        }
        io.output::<u32>(0)?[0] = value;
        while start.elapsed() < self.busy {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

/// (stage, busy µs, reads): the driving graph's shape with fixed stage times.
const CALIBRATED_GRAPH: &[(&str, u64, &[&str])] = &[
    ("preprocess", 300, &[]),
    ("backbone", 1500, &["preprocess"]),
    ("detection_head", 600, &["backbone"]),
    ("segmentation_head", 500, &["backbone"]),
    ("tracking", 400, &["detection_head"]),
    ("planning", 300, &["tracking", "segmentation_head"]),
];

fn calibrated_config() -> PipelineConfig {
    let mut cfg = PipelineConfig {
        release: ReleaseMode::RealTime,
        lanes: 2,
        ..PipelineConfig::default()
    };
    cfg.rt = Some(RtRequest {
        pin_cores: Some(vec![0, 1]),
        fifo_priority: Some(40),
        lock_memory: true,
        ..RtRequest::default()
    });
    cfg
}

/// One real-time replay of the calibrated graph with `cfg`'s slowdowns, measured by the
/// code that measures `redline regress`'s replays.
fn calibrated_replay(cfg: &PipelineConfig, label: &str) -> Measurement {
    let mut g = GraphBuilder::new();
    for &(name, busy_us, reads) in CALIBRATED_GRAPH {
        let mut s = add_stage(
            &mut g,
            cfg,
            None,
            name,
            Calibrated {
                busy: Duration::from_micros(busy_us),
            },
        )
        .writes::<u32>(name, 1)
        .budget_us(busy_us * 3);
        for input in reads {
            s = s.reads::<u32>(input, 1);
        }
    }
    g.publish("planning");
    let plan = g
        .build(&PlanConfig {
            lanes: cfg.lanes,
            frame_slots: cfg.frame_slots,
        })
        .expect("calibrated graph plans");
    let mut rt = Runtime::new(
        plan,
        RuntimeConfig {
            period_ns: CAL_PERIOD_NS,
            // Three periods: a frame that waits on the OS is measured, not replaced by
            // its fallback (the counts are judged exactly).
            deadline_ns: 3 * CAL_PERIOD_NS,
            release: cfg.release,
            rt: cfg.rt_request(),
            ..RuntimeConfig::default()
        },
    )
    .expect("runtime starts");
    REAL_TIME_GRANTED.get_or_init(|| {
        let grants = rt.os_grants();
        eprintln!("OS grants: {}", grants.summary_lines().join("; "));
        grants.all_granted()
    });

    measure_runtime(
        &mut rt,
        &setup_facts(cfg, "calibrated graph (tests/tests/regress.rs)"),
        CAL_FRAMES,
        RegressConfig::default().warmup_frames,
        label,
        &mut |_: &Published<'_>| {},
    )
}

/// Whether the calibrated replays ran pinned, SCHED_FIFO and locked (set by the first).
static REAL_TIME_GRANTED: OnceLock<bool> = OnceLock::new();

/// The tolerances the calibrated verdicts use: the defaults, except that without the
/// real-time grants the tails (P99, P99.9, max) are not judged, loudly. Measured here
/// without SCHED_FIFO (capabilities dropped), the same build's end-to-end P99 (≈ the
/// max of 90 frames) ranged 3.3–9.3 ms between replays: it is set by one late OS
/// wake-up, which is what the runtime's real-time settings exist to prevent, not by the
/// harness. P50s and the counts are judged either way.
fn calibrated_tolerances() -> RegressConfig {
    let mut t = RegressConfig::default();
    if !REAL_TIME_GRANTED.get().copied().unwrap_or(false) {
        eprintln!(
            "WARNING: real-time settings refused (see OS grants above): the tails (P99, \
             P99.9, max) are NOT judged by this run; run as root (or with CAP_SYS_NICE and \
             CAP_IPC_LOCK) to test them"
        );
        let unjudged = Tolerance {
            relative: 1e6,
            floor_us: 1e9,
        };
        (t.p99, t.p999, t.max) = (unjudged, unjudged, unjudged);
    }
    t
}

/// `REPS` replays per side, alternating R, C, C, R, ... ([`alternate`]); each side merged.
fn measure_calibrated(
    reference: &PipelineConfig,
    candidate: &PipelineConfig,
) -> (Measurement, Measurement) {
    let Ok((r, c)) = alternate(
        REPS,
        |side, i| {
            Ok::<_, Infallible>(match side {
                Side::Reference => calibrated_replay(reference, &format!("reference-{i}")),
                Side::Candidate => calibrated_replay(candidate, &format!("candidate-{i}")),
            })
        },
        |_, _, _| {},
    );
    (
        Measurement::merge(&r).unwrap(),
        Measurement::merge(&c).unwrap(),
    )
}

#[test]
fn a_twenty_percent_slower_stage_is_a_regression_naming_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = calibrated_config();
    let slow = slowed(calibrated_config(), "backbone", 20.0);
    let (reference, now) = measure_calibrated(&base, &slow);
    for v in verdicts(&reference, &now, &calibrated_tolerances()) {
        assert_regression_named(&v, "backbone", 1.15);
        // Only the slowed stage (and the end to end it lengthens) may fail at P50. A tail
        // (P99 and above) of another 0.3-0.6 ms stage is one preempted frame of a replay:
        // on a shared runner it moved 0.42 -> 0.94 ms once with nothing slowed there, so
        // it is reported, not judged (the same-build test judges every figure).
        for row in v.rows.iter().filter(|r| !r.pass) {
            let slowed =
                row.figure.starts_with("backbone ") || row.figure.starts_with("end_to_end ");
            let tail = [" p99", " p99.9", " max"]
                .iter()
                .any(|t| row.figure.ends_with(t));
            if !slowed && tail {
                eprintln!(
                    "note: {} failed (tail noise of a stage that was not slowed)",
                    row.figure
                );
                continue;
            }
            assert!(
                slowed,
                "{} failed although only the backbone was slowed:\n{}",
                row.figure,
                show(&v)
            );
        }
    }
}

#[test]
fn the_same_build_against_itself_passes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = calibrated_config();
    let (reference, now) = measure_calibrated(&cfg, &cfg);
    for v in verdicts(&reference, &now, &calibrated_tolerances()) {
        assert_passes(&v, &reference);
    }
}

// ---------------------------------------------------------------------------------------
// The real workload: the driving graph replaying the built-in drive.

/// Frames per real-workload replay.
const FRAMES: u64 = 150;

/// The built-in drive at 60 Hz: half the wall time; the ≈ 4 ms frames fit 16.7 ms easily.
fn real_scenario() -> ScenarioConfig {
    let fps = 60.0;
    ScenarioConfig {
        fps,
        seconds: FRAMES as f64 / fps + 0.5,
        ..ScenarioConfig::default_drive()
    }
}

fn real_config() -> PipelineConfig {
    let mut cfg = PipelineConfig {
        release: ReleaseMode::RealTime,
        ..PipelineConfig::default()
    };
    cfg.rt = Some(RtRequest {
        pin_cores: Some(vec![0, 1]),
        fifo_priority: Some(40),
        lock_memory: true,
        ..RtRequest::default()
    });
    cfg
}

fn feed() -> Arc<dyn FrameSource> {
    static FEED: OnceLock<Arc<dyn FrameSource>> = OnceLock::new();
    FEED.get_or_init(|| {
        Arc::new(
            Feed::from_scenario(&real_scenario(), Some(FRAMES as usize), &mut |_, _| {}).unwrap(),
        )
    })
    .clone()
}

/// One replay of the driving graph with `cfg`, measured as `redline regress` measures it.
fn real_replay(cfg: &PipelineConfig, label: &str) -> Measurement {
    let feed = feed();
    let (mut rt, _) = start_runtime(cfg, &feed).expect("the driving graph starts");
    let frames = FRAMES.min(feed.frame_count() as u64);
    measure_runtime(
        &mut rt,
        &setup_facts(cfg, feed.describe()),
        frames,
        RegressConfig::default().warmup_frames,
        label,
        &mut RecordingPublisher::new(frames as usize, Arc::new(Counters::default())),
    )
}

/// `reps` replays of the driving graph per side, alternating R, C, C, R, ...
fn measure_alternating(
    reference: &PipelineConfig,
    candidate: &PipelineConfig,
    reps: usize,
) -> (Vec<Measurement>, Vec<Measurement>) {
    let Ok(sides) = alternate(
        reps,
        |side, _| {
            Ok::<_, Infallible>(match side {
                Side::Reference => real_replay(reference, "reference"),
                Side::Candidate => real_replay(candidate, "candidate"),
            })
        },
        |_, _, _| {},
    );
    sides
}

/// Reference and candidate replays of the driving graph, alternating, each side merged.
fn measure_real(
    reference: &PipelineConfig,
    candidate: &PipelineConfig,
) -> (Measurement, Measurement) {
    let (r, c) = measure_alternating(reference, candidate, REPS);
    assert_eq!((r.len(), c.len()), (REPS, REPS));
    (
        Measurement::merge(&r).unwrap(),
        Measurement::merge(&c).unwrap(),
    )
}

#[test]
#[ignore = "timing of the real workload depends on the machine: run on a quiet one with --ignored"]
fn real_workload_a_twenty_percent_slower_backbone_is_a_regression_naming_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = real_config();
    let slow = slowed(real_config(), "backbone", 20.0);
    let (reference, now) = measure_real(&base, &slow);
    for v in verdicts(&reference, &now, &RegressConfig::default()) {
        assert_regression_named(&v, "backbone", 1.15);
    }
}

#[test]
#[ignore = "timing of the real workload depends on the machine: run on a quiet one with --ignored"]
fn real_workload_the_same_build_against_itself_passes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = real_config();
    let (reference, now) = measure_real(&cfg, &cfg);
    for v in verdicts(&reference, &now, &RegressConfig::default()) {
        assert_passes(&v, &reference);
    }
}

#[test]
fn a_baseline_on_disk_reads_back_identical() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let reps = measure_alternating(&real_config(), &real_config(), 1).0;
    let base = &Measurement::merge(&reps).unwrap();
    let dir = temp_dir("regress-baseline");
    let path = dir.join("baseline.json");
    base.save(&path).unwrap();
    let back = Measurement::load(&path).unwrap();
    assert_eq!(&back, base);
    // Whole histograms survive: every replay's samples are in the merged end to end.
    let e2e = back.histogram("end_to_end").unwrap().unwrap();
    let per_rep: u64 = back.reps.iter().map(|r| r.end_to_end.count).sum();
    assert_eq!(e2e.count(), per_rep);
    assert!(per_rep >= FRAMES / 2);
    // A baseline judged against itself passes with every ratio exactly 1.
    let v = Verdict::against_baseline(&back, base, &RegressConfig::default());
    assert!(v.passed());
    assert!(v
        .rows
        .iter()
        .all(|r| r.ratio.is_none_or(|x| (x - 1.0).abs() < 1e-12)));
}
