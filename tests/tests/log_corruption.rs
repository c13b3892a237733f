//! Corrupted logs, as a fuzzer would make them, through the whole replay input path
//! (`Feed::from_log`: open, summary and index, recovery of damaged files, message decoding,
//! frame grouping).
//!
//! Issue 10 found a corrupted chunk length that made the reader ask for about 10^18 bytes:
//! the allocator aborted the process (3 of 60 corrupted copies). Here a few hundred seeded
//! corruptions of a generated log — byte flips, runs of 0xff over what may be length fields
//! (the largest lengths a u32/u64 can say), zeroed runs, truncations, and both at once —
//! must each end in a feed or an error: no panic, no abort, and no single allocation larger
//! than [`LARGEST_ALLOCATION`] (the log itself is a few MiB; every length in it is
//! checked against what is left of the file and the `ReadLimits` before anything is
//! allocated). A global allocator records the largest request, so a length that slipped
//! through unchecked shows as a failure here instead of an abort in a user's replay.
//!
//! Seeded with the project's one PRNG (`SplitMix64`): the same corruptions every run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use redline_runtime::rng::SplitMix64;
use redline_sim::feed::Feed;
use redline_tests::{scenario_log, small_scenario, temp_dir};

/// Records the largest single allocation request (then hands it to the system allocator).
struct LargestRequest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the only addition is an atomic
// maximum over the requested sizes, which neither allocates nor touches the memory.
unsafe impl GlobalAlloc for LargestRequest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation is).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: `ptr`/`layout` come from `System`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: LargestRequest = LargestRequest;

/// No single allocation may be larger: far above anything a correct read of this small log
/// needs (the grouped frames and zstd's decoder window included), far below what an
/// unchecked corrupted length asks for.
const LARGEST_ALLOCATION: usize = 64 << 20;

/// Copies made of the log.
const COPIES: u64 = 300;

fn corrupt(original: &[u8], rng: &mut SplitMix64) -> (Vec<u8>, String) {
    let mut b = original.to_vec();
    let n = b.len() as u64;
    let kind = rng.below(5);
    let what = match kind {
        0 => {
            let flips = 1 + rng.below(16);
            for _ in 0..flips {
                let at = rng.below(n) as usize;
                b[at] ^= 1 << rng.below(8);
            }
            format!("{flips} bit flips")
        }
        1 => {
            // Huge lengths: 4 or 8 bytes of 0xff (or a huge-but-plausible u64).
            let at = rng.below(n.saturating_sub(8)) as usize;
            let len = if rng.chance(0.5) { 4 } else { 8 };
            let value = if rng.chance(0.5) {
                u64::MAX
            } else {
                1u64 << (30 + rng.below(30))
            };
            b[at..at + len].copy_from_slice(&value.to_le_bytes()[..len]);
            format!("{len} bytes at {at} set to {value:#x}")
        }
        2 => {
            let at = rng.below(n) as usize;
            let end = (at + 1 + rng.below(256) as usize).min(b.len());
            b[at..end].fill(0);
            format!("bytes {at}..{end} zeroed")
        }
        3 => {
            let keep = rng.below(n) as usize;
            b.truncate(keep);
            format!("truncated to {keep} bytes")
        }
        _ => {
            let at = rng.below(n.saturating_sub(8)) as usize;
            b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
            let keep = at + 8 + rng.below(n - at as u64 - 8) as usize;
            b.truncate(keep);
            format!("8 bytes at {at} set to 0xff.., truncated to {keep}")
        }
    };
    (b, what)
}

/// What became of one corrupted copy.
enum Outcome {
    /// A feed, with issues recorded or not.
    Read { with_issues: bool },
    /// An error.
    Refused,
}

/// Writes `bytes` to `path` and reads it as the replay does: it must give a feed of at most
/// `most_frames` frames or an error naming the file, and neither panic nor make an
/// allocation over [`LARGEST_ALLOCATION`] (`what` names the copy in failures). Returns the
/// outcome and the largest allocation.
fn read_copy(path: &Path, bytes: &[u8], what: &str, most_frames: usize) -> (Outcome, usize) {
    std::fs::write(path, bytes).expect("temp file");
    LARGEST.store(0, Ordering::Relaxed);
    let outcome = std::panic::catch_unwind(|| Feed::from_log(path, None));
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= LARGEST_ALLOCATION,
        "{what}: an allocation of {largest} bytes"
    );
    let name = path.file_name().expect("a file").to_string_lossy();
    let outcome = match outcome {
        Err(_) => panic!("{what}: the reader panicked"),
        Ok(Ok(feed)) => {
            assert!(feed.frames.len() <= most_frames, "{what}");
            Outcome::Read {
                with_issues: !feed.issues.is_empty(),
            }
        }
        Ok(Err(e)) => {
            assert!(
                e.to_string().contains(&*name),
                "{what}: the error names the file: {e}"
            );
            Outcome::Refused
        }
    };
    (outcome, largest)
}

#[test]
fn no_corruption_of_a_log_panics_aborts_or_allocates_beyond_the_limits() {
    let dir = temp_dir("log-corruption");
    let log = dir.join("drive.mcap");
    scenario_log(small_scenario(5, 2.0), &log);
    let original = std::fs::read(&log).expect("log written");
    let clean = Feed::from_log(&log, None).expect("the intact log reads");
    assert!(!clean.frames.is_empty());

    let path = dir.join("corrupted.mcap");
    let mut rng = SplitMix64::stream(10, 0);
    let (mut read, mut refused, mut with_issues) = (0, 0, 0);
    let mut largest_seen = 0;
    for copy in 0..COPIES {
        let (bytes, what) = corrupt(&original, &mut rng);
        let what = format!("copy {copy} ({what})");
        let (outcome, largest) = read_copy(&path, &bytes, &what, clean.frames.len() + 1);
        largest_seen = largest_seen.max(largest);
        match outcome {
            Outcome::Read {
                with_issues: issues,
            } => {
                read += 1;
                with_issues += usize::from(issues);
            }
            Outcome::Refused => refused += 1,
        }
    }
    eprintln!(
        "{COPIES} corrupted copies of a {} byte log: {read} read ({with_issues} with issues \
         recorded), {refused} refused with an error; largest single allocation {largest_seen} bytes",
        original.len()
    );
    assert_eq!(read + refused, COPIES);
    assert!(with_issues > 0 && refused > 0, "the corruptions must bite");
}

/// A log compressed whole with zstd (how a file-compressed ROS 2 bag holds its files) reads
/// to the very frames of the log itself; corrupted copies of the compressed file (the
/// decompressor meets the damage first, then the reader meets what it let through) each end
/// in a feed or an error naming the file: no panic, no abort, no allocation beyond
/// [`LARGEST_ALLOCATION`].
#[test]
fn a_compressed_log_reads_like_the_log_and_no_corruption_of_it_panics() {
    let dir = temp_dir("log-corruption-zstd");
    let log = dir.join("drive.mcap");
    scenario_log(small_scenario(6, 2.0), &log);
    let original = std::fs::read(&log).expect("log written");
    let clean = Feed::from_log(&log, None).expect("the intact log reads");
    let packed = zstd::stream::encode_all(&original[..], 1).expect("compressed");
    let path = dir.join("drive.mcap.zstd");
    std::fs::write(&path, &packed).expect("temp file");
    let feed = Feed::from_log(&path, None).expect("the compressed log reads");
    assert_eq!(
        format!("{:?}", feed.frames),
        format!("{:?}", clean.frames),
        "the same frames"
    );
    assert!(feed.issues.is_empty(), "{:?}", feed.issues);

    let mut rng = SplitMix64::stream(11, 0);
    let (mut read, mut refused) = (0, 0);
    for copy in 0..COPIES / 3 {
        let (bytes, what) = corrupt(&packed, &mut rng);
        let what = format!("copy {copy} ({what})");
        match read_copy(&path, &bytes, &what, clean.frames.len() + 1).0 {
            Outcome::Read { .. } => read += 1,
            Outcome::Refused => refused += 1,
        }
    }
    eprintln!(
        "{} corrupted copies of a {} byte compressed log: {read} read, {refused} refused",
        COPIES / 3,
        packed.len()
    );
    assert!(read > 0 && refused > 0, "the corruptions must bite");
}
