//! Zero heap allocations per frame after warm-up for the whole driving graph (network and
//! oracle perception, and with the `[slowdown]` knob wrapping stages), 2 lanes, 2 frames in
//! flight, counted on every thread.

use std::sync::Arc;

use redline_pipeline::config::{Perception, PipelineConfig, Slowdown};
use redline_pipeline::graph;
use redline_pipeline::run::Counters;
use redline_pipeline::run::RecordingPublisher;
use redline_pipeline::sensors::FrameSource;
use redline_runtime::{PlanConfig, ReleaseMode, Runtime, RuntimeConfig};
use redline_sim::feed::Feed;
use redline_tests::{small_scenario, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

#[test]
fn driving_graph_allocates_nothing_per_frame() {
    let feed: Arc<dyn FrameSource> =
        Arc::new(Feed::from_scenario(&small_scenario(5, 3.0), None, &mut |_, _| {}).unwrap());
    let slowed = |percent: f64, busy_ms: f64| Slowdown { percent, busy_ms };
    for (perception, slowdown) in [
        (Perception::Network, vec![]),
        (Perception::Oracle, vec![]),
        (
            Perception::Network,
            vec![
                ("backbone", slowed(20.0, 0.0)),
                ("tracking", slowed(0.0, 0.1)),
            ],
        ),
    ] {
        let mut cfg = PipelineConfig {
            perception,
            ..PipelineConfig::default()
        };
        for (stage, sd) in slowdown {
            cfg.slowdown.insert(stage.to_string(), sd);
        }
        let (g, _) = graph::build(&cfg, &feed).unwrap();
        let plan = g
            .build(&PlanConfig {
                lanes: 2,
                frame_slots: 2,
            })
            .unwrap();
        let mut rt = Runtime::new(
            plan,
            RuntimeConfig {
                release: ReleaseMode::AsFastAsPossible,
                period_ns: feed.period_ns(),
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let mut publisher =
            RecordingPublisher::new(feed.frame_count(), Arc::new(Counters::default()));
        rt.run(20, &mut publisher); // warm-up
        ALLOC.start();
        rt.run(feed.frame_count() as u64 - 20, &mut publisher);
        let (allocs, bytes) = ALLOC.stop();
        assert_eq!(publisher.records.len(), feed.frame_count());
        assert_eq!(
            allocs, 0,
            "{perception:?}, slowdown {:?}: {allocs} allocations ({bytes} bytes) after warm-up",
            cfg.slowdown
        );
    }
}
