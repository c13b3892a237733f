//! Determinism: the demo graph's output hash is identical for 1, 2 and 4 lanes, with 1 to 3
//! frames in flight, and across runs, and equals a pinned value, so a change to any output
//! fails the test even when every run agrees with every other. Negative controls: a changed
//! demo config (same frame count) and a single flipped output bit change the hash.

use redline_runtime::demo::{demo_graph, Faults};
use redline_runtime::{
    FrameInfo, GraphBuilder, HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig, Stage,
    StageError, StageIo,
};

/// Elements per buffer of the demo graph the hashes are pinned for.
const LEN: usize = 4096;
/// Frames hashed.
const FRAMES: u64 = 300;

/// The output hash of `FRAMES` lockstep frames of `demo_graph(LEN)` (FNV-1a over every
/// published frame's number, status, held-from frame and output bytes: `HashPublisher`).
/// Integer arithmetic only, so the same on every platform. If a deliberate change to the
/// demo stages or to `HashPublisher` changes it, the failure message prints the new value:
/// paste it here and say in the commit why the outputs changed.
const PINNED_DEMO_HASH: u64 = 0x0c85_27a6_3fdd_15fd;

fn run(graph: GraphBuilder, lanes: usize, slots: usize, frames: u64) -> HashPublisher {
    let plan = graph
        .build(&PlanConfig {
            lanes,
            frame_slots: slots,
        })
        .expect("graph builds");
    let cfg = RuntimeConfig {
        release: ReleaseMode::Lockstep,
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg).expect("runtime starts");
    let mut h = HashPublisher::default();
    rt.run(frames, &mut h);
    let report = rt.report();
    assert_eq!(report.frames_published, frames);
    assert_eq!(
        report.deadline_misses, 0,
        "lockstep without a timing model never misses"
    );
    assert_eq!(h.frames, frames);
    assert_eq!(h.fallbacks, 0);
    h
}

fn hash_of(len: usize, lanes: usize, slots: usize, frames: u64) -> u64 {
    run(demo_graph(len, &Faults::new()), lanes, slots, frames).hash
}

#[test]
fn same_pinned_hash_for_any_lane_count_and_across_runs() {
    let reference = hash_of(LEN, 1, 1, FRAMES);
    assert_eq!(
        reference, PINNED_DEMO_HASH,
        "the demo graph's outputs changed: hash {reference:#018x}, pinned {PINNED_DEMO_HASH:#018x}. \
         If the change is deliberate, set PINNED_DEMO_HASH in {} to {reference:#018x}",
        file!()
    );
    for (lanes, slots) in [(1, 2), (2, 1), (2, 2), (4, 2), (4, 3)] {
        assert_eq!(
            hash_of(LEN, lanes, slots, FRAMES),
            reference,
            "lanes={lanes} slots={slots} changed the outputs"
        );
    }
    assert_eq!(
        hash_of(LEN, 2, 2, FRAMES),
        reference,
        "a second run differs"
    );
}

#[test]
fn a_changed_config_changes_the_hash() {
    // Negative control: one bit more in the buffer length (4096 -> 4097) changes the data
    // every stage sees, and nothing else the hash covers (same frames, statuses, held-from).
    for lanes in [1, 2, 4] {
        let changed = hash_of(LEN | 1, lanes, 2, FRAMES);
        assert_ne!(
            changed,
            hash_of(LEN, lanes, 2, FRAMES),
            "lanes={lanes}: the hash ignores the outputs"
        );
    }
}

/// Publishes the frame number, with bit 0 flipped in frame `flip` (if any).
struct Counter {
    flip: Option<u64>,
}

impl Stage for Counter {
    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let out = io.output::<u64>(0)?;
        out[0] = f.frame ^ u64::from(self.flip == Some(f.frame));
        Ok(())
    }
}

#[test]
fn one_flipped_output_bit_changes_the_hash() {
    let hash = |flip: Option<u64>| {
        let mut g = GraphBuilder::new();
        g.stage("counter", Counter { flip })
            .writes::<u64>("count", 1);
        g.publish("count");
        run(g, 2, 2, 100).hash
    };
    let clean = hash(None);
    assert_eq!(clean, hash(None), "the counter graph is not deterministic");
    for frame in [0, 57, 99] {
        assert_ne!(
            hash(Some(frame)),
            clean,
            "one output bit flipped in frame {frame}, same hash"
        );
    }
}
