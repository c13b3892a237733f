//! `parallel_for` inside a stage: the static partition spreads over idle lanes, gives the
//! same result on any lane count, and never waits for a busy lane to start helping.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redline_runtime::parallel::chunk_range;
use redline_runtime::{
    FrameInfo, GraphBuilder, HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig, Stage,
    StageError, StageIo,
};

/// Writes `out[i] = f(frame, i)` in 16 chunks, spinning a little per chunk, and records
/// which threads ran chunks.
struct Wide {
    threads: Arc<Mutex<Vec<BTreeSet<String>>>>,
    seen: [AtomicU64; 16],
}

impl Stage for Wide {
    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let out = io.output::<u64>(0)?;
        let n = out.len();
        let addr = out.as_mut_ptr() as usize;
        let seen = &self.seen;
        io.parallel_for(n, 16, &|r| {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_micros(100) {
                std::hint::spin_loop();
            }
            let chunk = (0..16).position(|c| chunk_range(n, 16, c) == r).unwrap();
            // A hash of the thread id, to count distinct threads without allocating.
            let id = format!("{:?}", std::thread::current().id());
            let h = id
                .bytes()
                .fold(7u64, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
            seen[chunk].store(h, Ordering::Relaxed);
            for i in r {
                // SAFETY: chunks are disjoint ranges of `out`, which outlives parallel_for.
                unsafe {
                    *(addr as *mut u64).add(i) = f
                        .frame
                        .wrapping_mul(0x9E37_79B9)
                        .wrapping_add(i as u64 * i as u64)
                };
            }
        });
        let distinct: BTreeSet<String> = self
            .seen
            .iter()
            .map(|a| a.load(Ordering::Relaxed).to_string())
            .collect();
        if let Ok(mut v) = self.threads.try_lock() {
            v.push(distinct);
        }
        Ok(())
    }
}

/// The output hash (`HashPublisher`) of 20 lockstep frames of the `wide` stage: integer
/// arithmetic, the same on every platform. If a deliberate change to the stage or to
/// `HashPublisher` changes it, the failure message prints the new value: paste it here.
const PINNED_WIDE_HASH: u64 = 0xc780_df08_4862_c2ae;

fn run(lanes: usize) -> (u64, usize) {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let mut g = GraphBuilder::new();
    g.stage(
        "wide",
        Wide {
            threads: threads.clone(),
            seen: Default::default(),
        },
    )
    .writes::<u64>("out", 10_000);
    g.publish("out");
    let plan = g
        .build(&PlanConfig {
            lanes,
            frame_slots: 1,
        })
        .unwrap();
    let mut rt = Runtime::new(
        plan,
        RuntimeConfig {
            release: ReleaseMode::Lockstep,
            ..RuntimeConfig::default()
        },
    )
    .unwrap();
    let mut h = HashPublisher::default();
    rt.run(20, &mut h);
    let most = threads
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.len())
        .max()
        .unwrap_or(0);
    (h.hash, most)
}

#[test]
fn chunks_spread_over_lanes_with_identical_results() {
    let (one, threads_one) = run(1);
    assert_eq!(
        one,
        PINNED_WIDE_HASH,
        "the wide stage's outputs changed: hash {one:#018x}, pinned {PINNED_WIDE_HASH:#018x}. \
         If the change is deliberate, set PINNED_WIDE_HASH in {} to {one:#018x}",
        file!()
    );
    assert_eq!(
        threads_one, 1,
        "one lane: every chunk on the stage's own lane"
    );
    let (two, threads_two) = run(2);
    assert_eq!(two, one, "the partition does not depend on the lane count");
    assert!(
        threads_two >= 2,
        "with an idle second lane, chunks ran on {threads_two} thread(s)"
    );
    let (three, _) = run(3);
    assert_eq!(three, one);
}
