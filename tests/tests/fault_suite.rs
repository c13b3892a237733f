//! The fault suite: every fault class of `[faults]` (`redline_sim::faults`) through the real
//! driving graph (the built-in scenario's feed, network perception, 2 lanes, 2 frames in
//! flight, lockstep), asserting for each run:
//!
//! - 0 panics escaping: a panic hook counts every panic whose message is not an injected
//!   one (on any thread), and the run returns;
//! - 0 frames without a published output: every frame published once, in order;
//! - 0 heap allocations per frame after warm-up, counted on every thread while the faults
//!   fire, with the positive control of `pipeline_zero_alloc.rs` (a probe stage that
//!   allocates when switched on must be seen);
//! - every injected fault visible in the report: each sensor fault as one input issue per
//!   frame it hit (the line names the rule), the counts by class, and the runtime's own
//!   record of each faulted stage (a stall as budget overruns, a hang as a write-off and
//!   its fallback standing in, a panic as a contained failure).
//!
//! A panicking stage is caught at the stage boundary by the runtime's panic containment
//! (`redline_runtime::containment`): recorded with its message, its fallback standing in
//! from then on, no lane lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

use redline_pipeline::config::PipelineConfig;
use redline_pipeline::graph;
use redline_pipeline::run::{Counters, RecordingPublisher};
use redline_pipeline::sensors::FrameSource;
use redline_runtime::report::Report;
use redline_runtime::{PlanConfig, ReleaseMode, Runtime, RuntimeConfig};
use redline_sim::faults::{FaultConfig, FaultReport, FaultyFeed, StageFaults};
use redline_sim::feed::Feed;
use redline_tests::{small_scenario, AllocProbe, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

/// Frames run before counting allocations, and frames at the end run with the probe on.
const WARM_UP: u64 = 15;
const CONTROL_FRAMES: u64 = 8;

/// Panics not injected by a fault rule, on any thread.
static STRAY_PANICS: AtomicU64 = AtomicU64::new(0);
/// Injected panics the hook saw (the hook's positive control).
static INJECTED_PANICS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();
/// One case at a time: the allocation counter and the panic count are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

fn count_stray_panics() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if msg.starts_with("injected fault") {
                INJECTED_PANICS.fetch_add(1, Ordering::SeqCst);
            } else {
                STRAY_PANICS.fetch_add(1, Ordering::SeqCst);
                default(info);
            }
        }));
    });
}

fn base_feed() -> Arc<Feed> {
    static FEED: Mutex<Option<Arc<Feed>>> = Mutex::new(None);
    let mut f = FEED.lock().unwrap_or_else(|e| e.into_inner());
    f.get_or_insert_with(|| {
        Arc::new(Feed::from_scenario(&small_scenario(11, 2.0), None, &mut |_, _| {}).unwrap())
    })
    .clone()
}

/// What one faulted run left behind.
struct Outcome {
    report: Report,
    faults: FaultReport,
    issues: Vec<(u64, String)>,
    frames: Vec<u64>,
    statuses: Vec<&'static str>,
    /// Hash of every published output.
    hash: u64,
    /// Frames whose published ego pose or trajectory holds a NaN or an infinity.
    non_finite: Vec<u64>,
    allocs: (u64, u64),
}

/// Runs the whole drive with `faults` (TOML of the `[faults]` table), lockstep.
fn run(faults_toml: &str, hang_after_ns: u64, lanes: usize) -> Outcome {
    count_stray_panics();
    STRAY_PANICS.store(0, Ordering::SeqCst);
    INJECTED_PANICS.store(0, Ordering::SeqCst);
    let faults: FaultConfig = toml::from_str(faults_toml).expect("fault table parses");
    let cfg = PipelineConfig {
        release: ReleaseMode::Lockstep,
        lanes,
        ..PipelineConfig::default()
    };
    let faulty = Arc::new(FaultyFeed::new(base_feed(), &faults).expect("sensor faults apply"));
    let feed: Arc<dyn FrameSource> = faulty.clone();
    let n = feed.frame_count() as u64;
    assert!(n > WARM_UP + CONTROL_FRAMES + 20, "{n} frames");
    let stage_faults =
        StageFaults::new(&faults, &graph::stage_names(cfg.perception)).expect("stage faults apply");
    let (mut g, _) = graph::build_with(&cfg, &feed, Some(&stage_faults)).unwrap();
    let probe = AllocProbe::add_to(&mut g);
    let plan = g
        .build(&PlanConfig {
            lanes: cfg.lanes,
            frame_slots: cfg.frame_slots,
        })
        .unwrap();
    let mut rt = Runtime::new(
        plan,
        RuntimeConfig {
            release: ReleaseMode::Lockstep,
            period_ns: feed.period_ns(),
            hang_after_ns,
            ladder: cfg.ladder.clone(),
            ..RuntimeConfig::default()
        },
    )
    .unwrap();
    let mut publisher = RecordingPublisher::new(n as usize, Arc::new(Counters::default()));
    rt.run(WARM_UP, &mut publisher);
    ALLOC.start();
    rt.run(n - WARM_UP - CONTROL_FRAMES, &mut publisher);
    let allocs = ALLOC.stop();
    probe.switch_on();
    ALLOC.start();
    rt.run(CONTROL_FRAMES, &mut publisher);
    let (control_allocs, control_bytes) = ALLOC.stop();
    let probe_runs = probe.allocating_runs();
    assert!(
        probe_runs > 0 && control_allocs >= probe_runs && control_bytes >= probe_runs * 64,
        "positive control: the probe allocated 64 bytes in each of {probe_runs} runs but the \
         counter saw {control_allocs} allocations ({control_bytes} bytes): the zero \
         allocations counted before prove nothing"
    );
    let report = rt.report();
    let faults = FaultReport::new(
        faults.seed,
        faulty.records().to_vec(),
        stage_faults.records(&report),
    );
    stage_faults.release_hangs();
    drop(rt);
    Outcome {
        report,
        faults,
        issues: feed.issues().to_vec(),
        hash: publisher.hash.hash,
        frames: publisher.records.iter().map(|r| r.frame).collect(),
        statuses: publisher.records.iter().map(|r| r.status).collect(),
        non_finite: publisher
            .records
            .iter()
            .filter(|r| {
                let e = &r.ego;
                ![e.x, e.y, e.yaw, e.v, e.yaw_rate]
                    .iter()
                    .all(|v| v.is_finite())
                    || !r
                        .trajectory
                        .iter()
                        .all(|p| [p.t, p.x, p.y, p.yaw, p.v].iter().all(|v| v.is_finite()))
            })
            .map(|r| r.frame)
            .collect(),
        allocs,
    }
}

/// The assertions every case shares.
fn check_common(o: &Outcome, case: &str) {
    for line in o.faults.summary_lines() {
        eprintln!("{case}: {line}");
    }
    let n = o.frames.len() as u64;
    assert_eq!(
        STRAY_PANICS.load(Ordering::SeqCst),
        0,
        "{case}: a panic that no fault injected (see stderr)"
    );
    assert_eq!(
        o.frames,
        (0..base_feed().frame_count() as u64).collect::<Vec<_>>(),
        "{case}: every frame published once, in order"
    );
    assert_eq!(o.report.frames_published, n, "{case}");
    assert!(
        o.non_finite.is_empty(),
        "{case}: NaN or infinity published (ego pose or trajectory) in frames {:?}",
        o.non_finite
    );
    assert_eq!(
        o.allocs,
        (0, 0),
        "{case}: (allocations, bytes) after warm-up, while the faults fired"
    );
    // The report carries every injection: counts by class add up, each class is there.
    let json = serde_json::to_value(&o.faults).unwrap();
    let mut total = 0;
    for (class, count) in &o.faults.by_class {
        assert!(*count > 0, "{case}: class {class} injected nothing");
        assert_eq!(json["by_class"][class].as_u64(), Some(*count), "{case}");
        total += count;
    }
    assert_eq!(o.faults.injected, total, "{case}");
    // Each sensor fault is an input issue of the frame it hit, naming its rule.
    for r in &o.faults.sensor {
        let tag = format!("injected fault (sensor rule #{})", r.rule);
        let lines: Vec<u64> = o
            .issues
            .iter()
            .filter(|(_, s)| s.starts_with(&tag))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(lines.len() as u64, r.injected, "{case}: rule #{}", r.rule);
        assert_eq!(&lines[..r.frames.len()], &r.frames[..], "{case}");
    }
}

/// Every sensor class on cameras and odometry, lists and rates, mostly inside the counted
/// frames (15..); stalls past the stage budgets.
const SENSORS_AND_STALLS: &str = r#"
seed = 5
[[sensor]]
target = "front"
fault = "drop"
frames = "20..23, 40"
[[sensor]]
target = "front_left"
fault = "delay"
delay_ms = 40.0
frames = "18..=21"
[[sensor]]
target = "front_right"
fault = "delay"
delay_ms = 10.0
rate = 0.2
[[sensor]]
target = "back"
fault = "freeze"
frames = "25..35"
[[sensor]]
target = "back_left"
fault = "corrupt"
rate = 0.3
[[sensor]]
target = "back_right"
fault = "corrupt"
corrupt = "truncate"
fraction = 0.7
frames = "16, 30..33"
[[sensor]]
target = "odometry"
fault = "drop"
frames = "20..24"
[[sensor]]
target = "odometry"
fault = "delay"
delay_ms = 70.0
frames = "28..30"
[[sensor]]
target = "odometry"
fault = "freeze"
frames = "33..37"
[[sensor]]
target = "odometry"
fault = "corrupt"
frames = "16, 39..42"
rate = 0.05
[[stage]]
stage = "backbone"
fault = "stall"
stall_ms = 12.0
rate = 0.15
[[stage]]
stage = "tracking"
fault = "stall"
stall_ms = 3.0
frames = "17..20"
"#;

#[test]
fn sensor_faults_and_stalls_are_survived_published_and_reported() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = run(SENSORS_AND_STALLS, 10_000_000_000, 2);
    check_common(&o, "sensors+stalls");
    for class in [
        "camera drop",
        "camera delay",
        "camera freeze",
        "camera corrupt",
        "odometry drop",
        "odometry delay",
        "odometry freeze",
        "odometry corrupt",
        "stage stall",
    ] {
        assert!(
            o.faults.by_class.contains_key(class),
            "{class} missing: {:?}",
            o.faults.by_class
        );
    }
    // A stall past the budget is an overrun in the runtime's record, in every frame it hit,
    // of at least the stall (a busy-wait never ends early).
    for (s, stall_ns) in o.faults.stage.iter().zip([12_000_000, 3_000_000]) {
        assert!(
            s.injected > 0 && s.frames.len() as u64 == s.injected,
            "{s:?}"
        );
        let index = o
            .report
            .stages
            .iter()
            .position(|r| r.name == s.stage)
            .unwrap();
        for &frame in &s.frames {
            assert!(
                o.report
                    .overruns
                    .iter()
                    .any(|r| r.stage == index && r.frame == frame && r.exec_ns >= stall_ns),
                "stage {} stalled in frame {frame}: no overrun of at least {stall_ns} ns recorded",
                s.stage
            );
        }
    }
    assert_eq!(o.faults.stage[1].frames, vec![17, 18, 19]);
    // Lockstep without a timing model: faults change data, never the schedule.
    assert_eq!(o.report.deadline_misses, 0);
    assert!(
        o.report.lost_stages.is_empty(),
        "{:?}",
        o.report.lost_stages
    );
    assert!(
        o.statuses.iter().all(|s| *s == "complete"),
        "{:?}",
        o.statuses
    );
    // Deterministic under faults: the same outputs on one lane (stalls change timing only).
    let one_lane = run(SENSORS_AND_STALLS, 10_000_000_000, 1);
    check_common(&one_lane, "sensors+stalls, 1 lane");
    assert_eq!(
        one_lane.hash, o.hash,
        "lockstep outputs differ between 2 lanes and 1"
    );
    let clean = run("", 10_000_000_000, 2);
    assert_ne!(
        clean.hash, o.hash,
        "the faults changed no output: were they applied?"
    );
}

#[test]
fn a_hung_stage_is_written_off_its_fallback_stands_in_and_every_frame_is_published() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Prediction blocks for 5 s in frame 20 (released when the run is over); the watchdog
    // writes it off after 1 s (a margin of some 50 backbone runs, for a busy machine).
    let o = run(
        r#"
[[stage]]
stage = "prediction"
fault = "hang"
hang_ms = 5000.0
frames = "20"
"#,
        1_000_000_000,
        2,
    );
    check_common(&o, "hang");
    let s = &o.faults.stage[0];
    assert_eq!((s.injected, s.first_frame), (1, Some(20)), "{s:?}");
    assert_eq!(s.written_off_in, vec![20], "{s:?}");
    assert_eq!(s.runtime.hung, 1, "{s:?}");
    // From then on the fallback (constant velocity) stands in for every frame.
    let after = o.frames.len() as u64 - 21;
    assert_eq!(s.runtime.lost_fallbacks, after, "{s:?}");
    assert!(
        o.statuses[21..].iter().all(|s| *s == "degraded"),
        "{:?}",
        o.statuses
    );
    assert_eq!(o.report.lost_stages.len(), 1);
}

/// Tracking panics in frame 10 (inside the warm-up: a panic allocates its message).
const PANIC_IN_TRACKING: &str = r#"
[[stage]]
stage = "tracking"
fault = "panic"
frames = "10"
"#;

#[test]
fn a_panicking_stage_never_takes_the_run_down() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Without panic containment the panicking lane never comes back and the watchdog
    // writes the stage off after `hang_after` (1 s here); with it, the fallback stands in
    // at once. Either way: every frame published, nothing escapes, no allocation after.
    let o = run(PANIC_IN_TRACKING, 1_000_000_000, 2);
    check_common(&o, "panic");
    assert_eq!(
        INJECTED_PANICS.load(Ordering::SeqCst),
        1,
        "the panic hook must see the injected panic (on a lane), or its count of stray \
         panics proves nothing"
    );
    let s = &o.faults.stage[0];
    assert_eq!((s.injected, s.first_frame), (1, Some(10)), "{s:?}");
    // The runtime did not count the panicking run as a run: frames 0..10 ran, then the
    // fallback stood in.
    assert_eq!(s.runtime.runs, 10, "{s:?}");
    assert!(
        o.statuses[11..].iter().all(|s| *s != "complete"),
        "{:?}",
        o.statuses
    );
}

#[test]
fn a_panic_is_contained_at_the_stage_boundary_and_recorded_with_its_message() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A write-off would need 30 s: a panic must be caught where it happens, not timed out.
    let t0 = std::time::Instant::now();
    let o = run(PANIC_IN_TRACKING, 30_000_000_000, 2);
    check_common(&o, "contained panic");
    assert!(t0.elapsed() < std::time::Duration::from_secs(20));
    let s = &o.faults.stage[0];
    assert_eq!((s.injected, s.runtime.runs), (1, 10), "{s:?}");
    assert_eq!(s.runtime.hung, 0, "caught, not written off as hung: {s:?}");
    assert!(
        o.report.lost_stages.is_empty(),
        "{:?}",
        o.report.lost_stages
    );
    let json = serde_json::to_string(&o.report).unwrap();
    assert!(
        json.contains("stage `tracking` panics in frame 10"),
        "the runtime's report records the panic with its message: {json}"
    );
}
