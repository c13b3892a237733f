//! Zero heap allocations per frame after warm-up: the demo graph (9 stages, fan-out and
//! fan-in, a parallel_for stage), 2 lanes, 2 frames in flight, 1000 frames, counted by a
//! counting global allocator over every thread of the process (scheduler, lanes, watchdog).
//!
//! One test per binary: the counter is process-wide.

use redline_runtime::demo::{demo_graph, empty_graph, Faults};
use redline_runtime::{HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig};
use redline_tests::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

fn count(release: ReleaseMode, graph: redline_runtime::GraphBuilder) -> (u64, u64, u64) {
    let plan = graph
        .build(&PlanConfig {
            lanes: 2,
            frame_slots: 2,
        })
        .unwrap();
    let cfg = RuntimeConfig {
        release,
        period_ns: 2_000_000,
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg).unwrap();
    let mut h = HashPublisher::default();
    rt.run(100, &mut h); // warm-up
    ALLOC.start();
    rt.run(1000, &mut h);
    let (allocs, bytes) = ALLOC.stop();
    assert_eq!(rt.frames_published(), 1100);
    (allocs, bytes, h.frames)
}

#[test]
fn no_allocation_per_frame_after_warm_up() {
    let faults = Faults::new();
    for release in [
        ReleaseMode::Lockstep,
        ReleaseMode::AsFastAsPossible,
        ReleaseMode::RealTime,
    ] {
        let (allocs, bytes, frames) = count(release, demo_graph(4096, &faults));
        assert_eq!(frames, 1100);
        assert_eq!(
            allocs, 0,
            "{release:?}: {allocs} allocations ({bytes} bytes) in 1000 frames of the demo graph"
        );
    }
    let (allocs, bytes, _) = count(ReleaseMode::AsFastAsPossible, empty_graph());
    assert_eq!(
        allocs, 0,
        "empty graph: {allocs} allocations ({bytes} bytes)"
    );
}
