//! Recording allocates nothing on the publishing side after warm-up: the driving graph runs
//! with the recorder's [`RecordPublisher`] as its publisher (2 lanes, 2 frames in flight),
//! counted on every thread of the process, in two phases:
//!
//! - a consumer thread drains the ring (taking and releasing slots, as the writer thread
//!   does, without encoding): every frame goes through claim, copy and commit;
//! - the consumer pauses: the ring fills and every further frame takes the drop path.
//!
//! The writer thread's encoding and file I/O allocate by design and are not part of this
//! test (they run off the hot path; see `redline_record`).
//!
//! Positive control: the graph carries [`AllocProbe`], a stage that allocates in `run` when
//! switched on; for the drive's last frames it is on, and the count must rise by at least
//! one allocation per run of the probe, proving that the counter sees the runtime's threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use redline_pipeline::config::PipelineConfig;
use redline_pipeline::graph;
use redline_pipeline::sensors::FrameSource;
use redline_record::record_ring;
use redline_runtime::{PlanConfig, ReleaseMode, Runtime, RuntimeConfig};
use redline_sim::feed::Feed;
use redline_tests::{small_scenario, AllocProbe, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

const WARM_UP: u64 = 20;
const DRAINED: u64 = 30;
const PAUSED: u64 = 20;
const CONTROL_FRAMES: u64 = 10;
const SLOTS: usize = 4;

#[test]
fn recording_allocates_nothing_on_the_publishing_side() {
    let feed: Arc<dyn FrameSource> =
        Arc::new(Feed::from_scenario(&small_scenario(5, 3.0), None, &mut |_, _| {}).unwrap());
    assert!(feed.frame_count() as u64 >= WARM_UP + DRAINED + PAUSED + CONTROL_FRAMES);
    let cfg = PipelineConfig::default();
    let (mut g, _) = graph::build(&cfg, &feed).unwrap();
    let probe = AllocProbe::add_to(&mut g);
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
            hang_after_ns: 10_000_000_000,
            ..RuntimeConfig::default()
        },
    )
    .unwrap();
    let (mut publisher, mut reader) = record_ring(SLOTS);
    let (paused, stop, taken) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    // Spawned before counting (spawning allocates); its loop does not allocate.
    let consumer = {
        let (paused, stop, taken) = (paused.clone(), stop.clone(), taken.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if paused.load(Ordering::Acquire) || !reader.next(|_| {}) {
                    std::thread::yield_now();
                    continue;
                }
                taken.fetch_add(1, Ordering::Relaxed);
            }
            reader
        })
    };

    rt.run(WARM_UP, &mut publisher);
    ALLOC.start();
    rt.run(DRAINED, &mut publisher);
    let (drained_allocs, drained_bytes) = ALLOC.stop();
    paused.store(true, Ordering::Release);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let dropped_before = publisher.counters().dropped.load(Ordering::Relaxed);
    ALLOC.start();
    rt.run(PAUSED, &mut publisher);
    let (paused_allocs, paused_bytes) = ALLOC.stop();
    let dropped = publisher.counters().dropped.load(Ordering::Relaxed) - dropped_before;

    probe.switch_on();
    ALLOC.start();
    rt.run(CONTROL_FRAMES, &mut publisher);
    let (control_allocs, control_bytes) = ALLOC.stop();
    stop.store(true, Ordering::Release);
    let _reader = consumer.join().unwrap();

    assert!(
        taken.load(Ordering::Relaxed) >= DRAINED,
        "the consumer took {} frames: the drained phase did not exercise the copy",
        taken.load(Ordering::Relaxed)
    );
    assert!(
        dropped >= PAUSED - SLOTS as u64,
        "only {dropped} drops while paused: the drop path was not exercised"
    );
    assert_eq!(
        drained_allocs, 0,
        "{drained_allocs} allocations ({drained_bytes} bytes) while recording into a drained ring"
    );
    assert_eq!(
        paused_allocs, 0,
        "{paused_allocs} allocations ({paused_bytes} bytes) while dropping into a full ring"
    );
    let probe_runs = probe.allocating_runs();
    assert!(probe_runs > 0, "the probe never ran");
    assert!(
        control_allocs >= probe_runs && control_bytes >= probe_runs * 64,
        "the positive control allocated 64 bytes in each of {probe_runs} runs but the counter \
         saw {control_allocs} allocations ({control_bytes} bytes): the zeros above prove nothing"
    );
}
