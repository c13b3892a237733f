//! Shared helpers for redline's cross-crate integration tests (the tests live in `tests/tests/`).
//!
//! [`CountingAllocator`] wraps the system allocator and counts allocations while counting is
//! on (every thread of the process), so a test can prove that a hot path allocates nothing
//! after warm-up. A zero it reports proves something only next to a positive control in the
//! same binary: `tests/runtime_zero_alloc.rs` and `tests/pipeline_zero_alloc.rs` run a stage
//! that allocates on purpose ([`AllocProbe`]) and require the count to rise. [`small_scenario`] and
//! [`scenario_log`] make short synthetic drives.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use redline_runtime::{FrameInfo, GraphBuilder, Stage, StageError, StageIo};

use redline_sim::scenario::{Scenario, ScenarioConfig};

/// Counts every `alloc`/`realloc` while [`CountingAllocator::start`] is in effect (or only
/// the calling thread's, after [`CountingAllocator::start_on_this_thread`]).
#[derive(Debug)]
pub struct CountingAllocator {
    counting: AtomicBool,
    this_thread_only: AtomicBool,
    allocations: AtomicU64,
    bytes: AtomicU64,
    /// The first [`FIRST_RECORDED`] counted allocations: `thread id << 32 | size` (size
    /// saturated to `u32`), so a failing count can say which thread allocated.
    first: [AtomicU64; FIRST_RECORDED],
}

/// How many counted allocations [`CountingAllocator::first_allocations`] can name.
pub const FIRST_RECORDED: usize = 8;

/// One recorded allocation: the kernel's thread id, that thread's name (from
/// `/proc/self/task/<tid>/comm`, read after counting stopped; `?` when the thread has exited
/// or the platform has no such file) and the size in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedAllocation {
    pub thread_id: u32,
    pub thread_name: String,
    pub bytes: u64,
}

/// The kernel's id of the calling thread (a system call: no allocation).
fn thread_id() -> u32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions and cannot fail.
        (unsafe { libc::gettid() }) as u32
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

thread_local! {
    /// True on the thread that called `start_on_this_thread`.
    static COUNTED_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl CountingAllocator {
    /// A counter, off.
    pub const fn new() -> Self {
        CountingAllocator {
            counting: AtomicBool::new(false),
            this_thread_only: AtomicBool::new(false),
            allocations: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            first: [const { AtomicU64::new(0) }; FIRST_RECORDED],
        }
    }

    /// The first (up to [`FIRST_RECORDED`]) allocations counted since the last start, with
    /// the threads that made them. Call it after `stop`, while the threads still run: it
    /// allocates, and a thread's name is only readable while it lives.
    pub fn first_allocations(&self) -> Vec<RecordedAllocation> {
        let n = (self.allocations.load(Ordering::SeqCst) as usize).min(FIRST_RECORDED);
        self.first[..n]
            .iter()
            .map(|e| {
                let v = e.load(Ordering::SeqCst);
                let thread_id = (v >> 32) as u32;
                let thread_name =
                    std::fs::read_to_string(format!("/proc/self/task/{thread_id}/comm"))
                        .map(|s| s.trim().to_string())
                        .unwrap_or_else(|_| "?".to_string());
                RecordedAllocation {
                    thread_id,
                    thread_name,
                    bytes: v & 0xFFFF_FFFF,
                }
            })
            .collect()
    }

    /// Resets the counts and starts counting (every thread of the process).
    pub fn start(&self) {
        self.this_thread_only.store(false, Ordering::SeqCst);
        self.allocations.store(0, Ordering::SeqCst);
        self.bytes.store(0, Ordering::SeqCst);
        self.counting.store(true, Ordering::SeqCst);
    }

    /// Resets the counts and counts the calling thread's allocations only (other threads,
    /// e.g. other tests of the same binary or a driver's, are ignored) until `stop`.
    pub fn start_on_this_thread(&self) {
        COUNTED_THREAD.with(|c| c.set(true));
        self.this_thread_only.store(true, Ordering::SeqCst);
        self.allocations.store(0, Ordering::SeqCst);
        self.bytes.store(0, Ordering::SeqCst);
        self.counting.store(true, Ordering::SeqCst);
    }

    /// Stops counting; returns (allocations, bytes) since `start`.
    pub fn stop(&self) -> (u64, u64) {
        self.counting.store(false, Ordering::SeqCst);
        let _ = COUNTED_THREAD.try_with(|c| c.set(false));
        (
            self.allocations.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
        )
    }

    fn note(&self, size: usize) {
        if self.counting.load(Ordering::Relaxed)
            && (!self.this_thread_only.load(Ordering::Relaxed)
                || COUNTED_THREAD
                    .try_with(std::cell::Cell::get)
                    .unwrap_or(false))
        {
            let k = self.allocations.fetch_add(1, Ordering::Relaxed) as usize;
            self.bytes.fetch_add(size as u64, Ordering::Relaxed);
            if let Some(slot) = self.first.get(k) {
                let size = size.min(u32::MAX as usize) as u64;
                slot.store(u64::from(thread_id()) << 32 | size, Ordering::Relaxed);
            }
        }
    }
}

impl Default for CountingAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees hold; the counters are atomics and never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.note(layout.size());
        // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.note(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator (i.e. by System) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.note(new_size);
        // SAFETY: `ptr`/`layout` come from this allocator; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The default config replaying in lockstep on `lanes` lanes with `network`, its three
/// models on `engine`. Lockstep has no frame guard and writes a stage off as hung only after
/// `redline_runtime::LOCKSTEP_HANG_AFTER_NS` of wall time, whatever the deadline; the 10 s
/// deadline here dates from when the write-off was four deadlines, and changes no output.
pub fn lockstep_config(
    lanes: usize,
    weights_seed: u64,
    engine: redline_models::engine::EngineKind,
    network: redline_pipeline::config::Network,
) -> redline_pipeline::config::PipelineConfig {
    let mut cfg = redline_pipeline::config::PipelineConfig {
        lanes,
        network,
        release: redline_runtime::ReleaseMode::Lockstep,
        weights_seed,
        deadline_ms: 10_000.0,
        ..Default::default()
    };
    cfg.models.backbone.engine = engine.name().to_string();
    cfg.models.det_head.engine = engine.name().to_string();
    cfg.models.seg_head.engine = engine.name().to_string();
    cfg
}

/// The default scenario's actors and road, `seconds` long, with small camera images
/// (the tests check behaviour, not pixels).
pub fn small_scenario(seed: u64, seconds: f64) -> ScenarioConfig {
    ScenarioConfig {
        seed,
        seconds,
        image_width: 128,
        image_height: 64,
        ..ScenarioConfig::default()
    }
}

/// A fresh temporary directory for one test, `redline-test-{name}-XXXXXX` under the system's
/// temporary directory. Dropping it removes it with what the test wrote, unless the thread is
/// panicking: a failed test's files stay for inspection, and the path is printed.
pub fn temp_dir(name: &str) -> TestDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("redline-test-{name}-"))
        .tempdir()
        .expect("temp dir");
    TestDir(Some(dir))
}

/// See [`temp_dir`]; derefs to its [`Path`].
#[derive(Debug)]
pub struct TestDir(Option<tempfile::TempDir>);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0
            .as_ref()
            .map(tempfile::TempDir::path)
            .expect("the directory lives until dropped")
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self
    }
}

impl AsRef<std::ffi::OsStr> for TestDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.as_os_str()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            if std::thread::panicking() {
                let kept = dir.keep();
                eprintln!("test failed: its files are kept in {}", kept.display());
            }
        }
    }
}

/// Writes a scenario log at `path` (all frames) and returns the scenario.
pub fn scenario_log(cfg: ScenarioConfig, path: &Path) -> Scenario {
    let scenario = Scenario::generate(cfg).expect("scenario");
    redline_sim::generate::write_scenario_log(&scenario, path, None, &mut |_| {})
        .expect("log written");
    scenario
}

#[cfg(test)]
mod tests {
    use super::CountingAllocator;

    #[global_allocator]
    static ALLOC: CountingAllocator = CountingAllocator::new();

    /// The counter's own contract (the one test of this binary, so no other test thread
    /// allocates while it counts): counts while on, not while off, and `start` resets.
    #[test]
    fn counts_only_while_on_and_start_resets() {
        ALLOC.start();
        let v: Vec<u8> = std::hint::black_box(Vec::with_capacity(100));
        let grown: Vec<u64> = std::hint::black_box(vec![1; 3]);
        let (allocs, bytes) = ALLOC.stop();
        assert!(
            allocs >= 2 && bytes >= 124,
            "{allocs} allocations, {bytes} bytes"
        );
        drop((v, grown));

        let off: Vec<u8> = std::hint::black_box(Vec::with_capacity(100));
        drop(off);
        assert_eq!(
            ALLOC.stop(),
            (allocs, bytes),
            "an allocation while off was counted"
        );
        ALLOC.start();
        assert_eq!(ALLOC.stop(), (0, 0), "start did not reset the counts");
    }
}

/// The positive control of the zero-allocation tests: a stage that writes the frame number
/// and, while switched on, first allocates a 64-byte vector and counts the runs that did (a
/// frame abandoned at its guard time does not run the stage, so a control compares the
/// allocation count with [`AllocProbe::allocating_runs`], not with the frames).
#[derive(Clone, Debug, Default)]
pub struct AllocProbe {
    allocate: Arc<AtomicBool>,
    allocating_runs: Arc<AtomicU64>,
}

impl AllocProbe {
    /// Adds the probe, switched off, to `graph` as stage `alloc_probe` (no inputs, one
    /// `u64` output, not published); the returned handle switches it.
    pub fn add_to(graph: &mut GraphBuilder) -> AllocProbe {
        let probe = AllocProbe::default();
        graph
            .stage("alloc_probe", probe.clone())
            .writes::<u64>("alloc_probe", 1);
        probe
    }

    /// Makes every later run allocate.
    pub fn switch_on(&self) {
        self.allocate.store(true, Ordering::SeqCst);
    }

    /// Runs that allocated so far.
    pub fn allocating_runs(&self) -> u64 {
        self.allocating_runs.load(Ordering::SeqCst)
    }
}

impl Stage for AllocProbe {
    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let out = io.output::<u64>(0)?;
        out[0] = if self.allocate.load(Ordering::Relaxed) {
            // The deliberate hot-path allocation the control must see.
            let v: Vec<u64> = std::hint::black_box(vec![f.frame; 8]);
            self.allocating_runs.fetch_add(1, Ordering::Relaxed);
            v[7]
        } else {
            f.frame
        };
        Ok(())
    }
}
