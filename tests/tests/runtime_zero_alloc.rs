//! Zero heap allocations per frame after warm-up: the demo graph (9 stages, fan-out and
//! fan-in, a parallel_for stage), 2 lanes, 2 frames in flight, 1000 frames, counted by a
//! counting global allocator over every thread of the process (scheduler, lanes, watchdog).
//!
//! Positive control: an extra stage ([`AllocProbe`]) that allocates in `run` when its switch
//! is on. The graphs carry it, switched off, while the counter must read zero; then, with the
//! same runtime and the same allocator, it is switched on and the count must rise by at least
//! one allocation per run of the probe. So the zero above is a measurement, not a counter
//! that is off or blind to the lanes.
//!
//! After a stage panicked (caught at the stage boundary; the panic path itself allocates
//! the payload and the message), the frames that follow, with the fallback standing in for
//! the poisoned stage, allocate nothing either.
//!
//! One test per binary: the counter is process-wide.

use redline_runtime::demo::{demo_graph, empty_graph, ids, Faults};
use redline_runtime::{
    GraphBuilder, HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig,
};
use redline_tests::{AllocProbe, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

/// Frames measured with the probe switched off (must allocate nothing) and on (must allocate).
const FRAMES: u64 = 1000;
const CONTROL_FRAMES: u64 = 50;

/// What one run counted: allocations and bytes with the probe off, then with it on, the
/// probe's allocating runs, and the frames published.
struct Counts {
    off: (u64, u64),
    /// Which threads made the first allocations counted with the probe off.
    off_who: Vec<redline_tests::RecordedAllocation>,
    /// The same with the probe on (the record's own control: it must name the probe's).
    on_who: Vec<redline_tests::RecordedAllocation>,
    on: (u64, u64),
    probe_runs: u64,
    frames: u64,
    /// Frames run with the probe on (`CONTROL_FRAMES`, more if real time dropped them all).
    control_frames: u64,
    /// Stage panics caught (all during warm-up).
    panics: u64,
    panic_fallbacks: u64,
}

/// Allocations in `FRAMES` frames after warm-up with the probe off, then in
/// `CONTROL_FRAMES` frames with it on, on one runtime running `graph` plus the probe
/// stage (no inputs, one output, not published).
fn count(release: ReleaseMode, mut graph: GraphBuilder) -> Counts {
    let probe = AllocProbe::add_to(&mut graph);
    let plan = graph
        .build(&PlanConfig {
            lanes: 2,
            frame_slots: 2,
        })
        .unwrap();
    let cfg = RuntimeConfig {
        release,
        period_ns: 2_000_000,
        // No stage here hangs. The default (four 2 ms deadlines) lets a loaded CI machine
        // that preempts a lane for 8 ms write a stage off as hung and retire its lane,
        // which is not what this test measures.
        hang_after_ns: 10_000_000_000,
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg).unwrap();
    let mut h = HashPublisher::default();
    rt.run(100, &mut h); // warm-up
    ALLOC.start();
    rt.run(FRAMES, &mut h);
    let off = ALLOC.stop();
    let off_who = ALLOC.first_allocations();
    probe.switch_on();
    ALLOC.start();
    rt.run(CONTROL_FRAMES, &mut h);
    // Real time on an overloaded machine can abandon every frame of a block at its guard
    // before the probe runs; give the control more blocks (counted alike) until it has run.
    let mut control_frames = CONTROL_FRAMES;
    while probe.allocating_runs() == 0 && control_frames < 20 * CONTROL_FRAMES {
        rt.run(CONTROL_FRAMES, &mut h);
        control_frames += CONTROL_FRAMES;
    }
    let on = ALLOC.stop();
    let on_who = ALLOC.first_allocations();
    assert_eq!(rt.frames_published(), 100 + FRAMES + control_frames);
    let r = rt.report();
    Counts {
        off,
        off_who,
        on,
        on_who,
        probe_runs: probe.allocating_runs(),
        frames: h.frames,
        control_frames,
        panics: r.stages.iter().map(|s| s.counters.panics).sum(),
        panic_fallbacks: r.stages.iter().map(|s| s.counters.panic_fallbacks).sum(),
    }
}

/// The control's verdict: the probe ran, and every allocation it made was counted.
fn assert_control_counted(what: &str, c: &Counts) {
    let (allocs, bytes) = c.on;
    assert!(
        c.probe_runs > 0,
        "{what}: the probe never ran in {} frames",
        c.control_frames
    );
    assert!(
        allocs >= c.probe_runs && bytes >= c.probe_runs * 64,
        "{what}: the positive control allocated 64 bytes in each of {} runs but the counter \
         saw {allocs} allocations ({bytes} bytes): the counting allocator is not counting, so \
         the zero-allocation checks prove nothing",
        c.probe_runs
    );
    assert!(
        c.on_who.iter().any(|r| r.bytes == 64 && r.thread_id != 0),
        "{what}: the record of the first allocations does not show the probe's 64 bytes: {:?}",
        c.on_who
    );
}

#[test]
fn no_allocation_per_frame_after_warm_up() {
    let faults = Faults::new();
    for release in [
        ReleaseMode::Lockstep,
        ReleaseMode::AsFastAsPossible,
        ReleaseMode::RealTime,
    ] {
        let c = count(release, demo_graph(4096, &faults));
        let (allocs, bytes) = c.off;
        assert_eq!(c.frames, 100 + FRAMES + c.control_frames);
        assert_eq!(
            allocs, 0,
            "{release:?}: {allocs} allocations ({bytes} bytes) in {FRAMES} frames of the demo \
             graph, the first by {:?}",
            c.off_who
        );
        assert_control_counted(&format!("{release:?}, demo graph"), &c);
    }
    let c = count(ReleaseMode::AsFastAsPossible, empty_graph());
    let (allocs, bytes) = c.off;
    assert_eq!(
        allocs, 0,
        "empty graph: {allocs} allocations ({bytes} bytes), the first by {:?}",
        c.off_who
    );
    assert_control_counted("empty graph", &c);

    // A stage that panicked in warm-up (inside its parallel closure): every later frame
    // runs its fallback, and still allocates nothing.
    let panicking = Faults::new();
    panicking.panic_at(ids::SMOOTH, 50);
    let c = count(ReleaseMode::AsFastAsPossible, demo_graph(4096, &panicking));
    assert_eq!(c.panics, 1, "the injected panic was caught");
    assert!(
        c.panic_fallbacks >= FRAMES,
        "the fallback stood in: {}",
        c.panic_fallbacks
    );
    let (allocs, bytes) = c.off;
    assert_eq!(
        allocs, 0,
        "after a stage panic: {allocs} allocations ({bytes} bytes) in {FRAMES} frames, the \
         first by {:?}",
        c.off_who
    );
    assert_control_counted("after a stage panic", &c);
}
