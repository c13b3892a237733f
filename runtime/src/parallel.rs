//! `parallel_for` inside a stage: a static, deterministic partition spread over idle lanes.
//!
//! Contract:
//!
//! - `0..items` is cut into `chunks` contiguous ranges by [`chunk_range`]; the cut depends
//!   only on `items` and `chunks`, never on the lane count or on timing. A stage whose
//!   chunks each write only their own items therefore gets the same result on 1 or 8 lanes.
//! - The calling lane posts one "help" job to every other live lane and then works through
//!   the chunks itself; helpers that arrive take chunks too. The call returns when every
//!   chunk has finished. A helper busy with another stage simply arrives late or not at
//!   all: the caller never waits for a helper to *start*.
//! - Which thread runs which chunk never changes a result, but it decides where the bytes
//!   are cached: the chunks are cut into one contiguous *segment* per lane (the caller's
//!   first, then the other lanes in lane order after it), each lane takes its own segment's
//!   chunks front to back, and a lane that runs out steals from its neighbours' segments at
//!   the end nearest its own (the front of the segment after it, the back of the one
//!   before). So two calls in a row over the same rows (one layer of a network after the
//!   other) give each lane mostly the rows it wrote the call before, still in its own
//!   core's cache, instead of rows taken first come first served from one counter
//!   (ResNet-18 on two lanes: its max pool ran 2.5x slower than on one, reading the
//!   convolution's rows out of the other core's cache).
//! - No allocation, no lock: each lane owns one preallocated `ParallelTask` record,
//!   guarded by a generation/open/active state word, so a helper that dequeues a stale help
//!   job (for a call that already returned) notices and leaves without touching the closure.
//! - `chunks_mut` / `chunks_mut_pair` (reached through `StageIo::parallel_chunks_mut`
//!   and `StageIo::parallel_chunks_mut_pair`) split an output slice (or two) into the same
//!   [`chunk_range`] partition and hand each chunk to the closure as a `&mut` sub-slice:
//!   safe code, no raw pointers in stages, no allocation. This module is the one place that
//!   turns "disjoint chunk indices" into "disjoint `&mut` slices".
//! - A chunk that panics, on the calling lane or on a helper, is caught where it ran; the
//!   chunks not started yet are skipped, the call still waits until no helper is inside
//!   (the closure lives on the caller's stack), and then re-raises the first panic on the
//!   calling lane, where the stage boundary catches it (see [`crate::containment`]). A
//!   helper lane is never killed by another stage's panic.

use std::any::Any;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::lanes::LaneSet;

/// The `i`-th of `chunks` contiguous ranges of `0..items` (the first `items % chunks`
/// ranges are one longer). Empty when `i >= chunks`.
pub fn chunk_range(items: usize, chunks: usize, i: usize) -> Range<usize> {
    if chunks == 0 || i >= chunks {
        return 0..0;
    }
    let base = items / chunks;
    let extra = items % chunks;
    let start = i * base + i.min(extra);
    let len = base + usize::from(i < extra);
    start..start + len
}

/// Something that runs `f` on the [`chunk_range`]s of `0..items`, `chunks` of them.
///
/// # Safety
///
/// Implementors promise that `run_chunks` calls `f` on ranges that together cover
/// `0..items` with every index exactly once (whatever the threads; at most once when a
/// call panics), and returns, or unwinds, only after every such call has returned.
/// [`chunks_mut`] relies on it to hand out disjoint `&mut` sub-slices.
pub(crate) unsafe trait ChunkRunner {
    /// Runs `f` on every chunk (see the trait's safety contract).
    fn run_chunks(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_));
}

/// Runs every chunk on the calling thread (no lanes available).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inline;

// SAFETY: `run_inline` walks the chunks `0..chunks.max(1)` once each, in order, on this
// thread; `chunk_range` covers `0..items` exactly once (tested below), and it skips only
// empty ranges.
unsafe impl ChunkRunner for Inline {
    fn run_chunks(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
        run_inline(items, chunks, f);
    }
}

// SAFETY: `ParallelHandle::run` either runs inline (see `Inline`) or hands out chunk indices
// `0..chunks` from one atomic counter (`fetch_add`, so each index goes to exactly one
// thread) and returns (or re-raises a chunk's panic) only once `done == chunks` and no
// helper is inside the task; `work` counts a chunk done only after its call returned or
// its panic was caught.
unsafe impl ChunkRunner for ParallelHandle<'_> {
    fn run_chunks(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
        self.run(items, chunks, f);
    }
}

/// The base pointer of a slice being split across lanes.
struct SharedBase<T>(*mut T);

// SAFETY: the pointer is only used to build disjoint `&mut [T]` chunks, each handed to one
// thread at a time; sending a `&mut [T]` to another thread needs exactly `T: Send`.
unsafe impl<T: Send> Sync for SharedBase<T> {}

impl<T> SharedBase<T> {
    /// Chunk `r` of the slice.
    ///
    /// # Safety
    ///
    /// `r` lies inside the slice this base came from, that slice is mutably borrowed for
    /// the whole split, and no other live reference covers any index of `r`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn chunk(&self, r: Range<usize>) -> &mut [T] {
        // SAFETY: forwarded from this function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r.start), r.len()) }
    }
}

/// Splits `out` into `chunks` contiguous pieces, piece `i` being
/// `out[chunk_range(out.len(), chunks, i)]`, and calls `f(i, piece)` once for every `i`
/// (also for empty pieces; never when `chunks == 0`), spread over `runner`. Allocates
/// nothing.
pub(crate) fn chunks_mut<T: Send, R: ChunkRunner + ?Sized>(
    runner: &R,
    out: &mut [T],
    chunks: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync + '_),
) {
    if chunks == 0 {
        return;
    }
    let len = out.len();
    let base = SharedBase(out.as_mut_ptr());
    runner.run_chunks(chunks, chunks, &|indices| {
        for i in indices {
            let r = chunk_range(len, chunks, i);
            // SAFETY: `r` lies inside `out` (chunk_range never exceeds `len`), `out` stays
            // mutably borrowed by this call until `run_chunks` returns, and the runner
            // passes every chunk index exactly once (ChunkRunner's contract), so the ranges
            // of concurrent calls are disjoint.
            f(i, unsafe { base.chunk(r) });
        }
    });
}

/// The closure of `chunks_mut_pair`: `f(chunk index, piece of the first slice, piece of
/// the second slice)`.
pub type ChunkPairFn<'f, A, B> = dyn Fn(usize, &mut [A], &mut [B]) + Sync + 'f;

/// [`chunks_mut`] over two slices at once: piece `i` of each is
/// `x[chunk_range(x.len(), chunks, i)]`, e.g. one camera's output and its scratch area.
pub(crate) fn chunks_mut_pair<A: Send, B: Send, R: ChunkRunner + ?Sized>(
    runner: &R,
    a: &mut [A],
    b: &mut [B],
    chunks: usize,
    f: &ChunkPairFn<'_, A, B>,
) {
    if chunks == 0 {
        return;
    }
    let (a_len, b_len) = (a.len(), b.len());
    let (a_base, b_base) = (SharedBase(a.as_mut_ptr()), SharedBase(b.as_mut_ptr()));
    runner.run_chunks(chunks, chunks, &|indices| {
        for i in indices {
            let (ra, rb) = (chunk_range(a_len, chunks, i), chunk_range(b_len, chunks, i));
            // SAFETY: as in `chunks_mut`, for each of the two slices (distinct `&mut`
            // borrows, so they cannot overlap each other either).
            let (ca, cb) = unsafe { (a_base.chunk(ra), b_base.chunk(rb)) };
            f(i, ca, cb);
        }
    });
}

/// Runs every chunk on the calling thread, in order.
pub(crate) fn run_inline(items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
    let chunks = chunks.max(1);
    for i in 0..chunks {
        let r = chunk_range(items, chunks, i);
        if !r.is_empty() {
            f(r);
        }
    }
}

const OPEN: u64 = 1 << 31;
const ACTIVE_MASK: u64 = OPEN - 1;

type TaskFn = dyn Fn(Range<usize>) + Sync;

/// One lane's parallel call record. State word: generation (high 32 bits), open bit,
/// number of helpers inside (low 31 bits).
#[derive(Debug)]
pub(crate) struct ParallelTask {
    state: AtomicU64,
    /// Thin pointer to a `&TaskFn` that lives on the owner's stack during the call.
    func: AtomicPtr<&'static TaskFn>,
    items: AtomicUsize,
    chunks: AtomicUsize,
    /// Segments of the current call (`segments.len()` at most, one per lane).
    used: AtomicUsize,
    /// Per segment, the chunks nobody has taken yet: `front | back << 32`, the range
    /// `front..back` ([`ParallelTask::take`]).
    segments: Box<[SegmentWord]>,
    done: AtomicUsize,
    /// A chunk of the current call panicked: skip the rest, re-raise on the owner.
    panicked: AtomicBool,
    /// The first panic payload of the current call (panic path only).
    payload: Mutex<Option<Box<dyn Any + Send>>>,
}

/// One segment's word on a cache line of its own: each lane claims from its own segment's
/// word, and two words on one line would bounce it between the cores on every claim.
#[derive(Debug)]
#[repr(align(64))]
struct SegmentWord(AtomicU64);

/// Which end of a segment a lane takes its next chunk from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Front,
    Back,
}

impl ParallelTask {
    /// The record of one lane of a set of `lanes` (start-up only: it holds one segment word
    /// per lane).
    pub(crate) fn new(lanes: usize) -> Self {
        ParallelTask {
            state: AtomicU64::new(0),
            func: AtomicPtr::new(std::ptr::null_mut()),
            items: AtomicUsize::new(0),
            chunks: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            segments: (0..lanes.max(1))
                .map(|_| SegmentWord(AtomicU64::new(0)))
                .collect(),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            payload: Mutex::new(None),
        }
    }

    /// Opens the segments of a call of `chunks` chunks over `lanes` lanes: segment `j` holds
    /// `chunk_range(chunks, used, j)`, `used = min(lanes, chunks, segments.len())`. Owner
    /// only, before the state word opens the call.
    fn open_segments(&self, chunks: usize, lanes: usize) {
        let used = lanes.min(chunks).clamp(1, self.segments.len());
        for (j, seg) in self.segments.iter().take(used).enumerate() {
            let r = chunk_range(chunks, used, j);
            seg.0
                .store(r.start as u64 | (r.end as u64) << 32, Ordering::Relaxed);
        }
        self.used.store(used, Ordering::Relaxed);
    }

    /// Takes one chunk from `end` of segment `seg`, if any is left there.
    fn take(&self, seg: usize, end: End) -> Option<usize> {
        let word = &self.segments[seg].0;
        let mut s = word.load(Ordering::Acquire);
        loop {
            let (front, back) = (s & 0xFFFF_FFFF, s >> 32);
            if front >= back {
                return None;
            }
            let (next, took) = match end {
                End::Front => (s + 1, front),
                End::Back => (s - (1 << 32), back - 1),
            };
            match word.compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(took as usize),
                Err(now) => s = now,
            }
        }
    }

    /// The next chunk for the lane whose own segment is `own` (`used` or more: none): its
    /// own segment front to back, then the neighbours' at the end nearest it, nearest
    /// neighbours first; `None` when every segment is empty.
    fn next_chunk(&self, own: usize) -> Option<usize> {
        let used = self.used.load(Ordering::Acquire);
        if own < used {
            if let Some(i) = self.take(own, End::Front) {
                return Some(i);
            }
        }
        let own = own.min(used);
        for d in 1..=used {
            if own + d < used {
                if let Some(i) = self.take(own + d, End::Front) {
                    return Some(i);
                }
            }
            if d <= own {
                if let Some(i) = self.take(own - d, End::Back) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Takes and runs chunks until none is left, starting with segment `own`. Caller must
    /// be inside the task (owner, or a helper counted in `active`).
    fn work(&self, own: usize) {
        let items = self.items.load(Ordering::Acquire);
        let chunks = self.chunks.load(Ordering::Acquire);
        let fp = self.func.load(Ordering::Acquire);
        while let Some(i) = self.next_chunk(own) {
            // SAFETY: `fp` points at the owner's `&TaskFn`, which lives on the owner's stack
            // until the owner has seen `done == chunks` and closed the task with no helper
            // inside; we took chunk `i < chunks`, so the owner is still waiting for us.
            let f: &TaskFn = unsafe { *fp };
            let r = chunk_range(items, chunks, i);
            if !r.is_empty() && !self.panicked.load(Ordering::Acquire) {
                // A panic must not leave this frame (a helper lane would die, and the owner
                // would wait for `done` for ever): keep it for the owner to re-raise.
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(r))) {
                    let mut kept = self.payload.lock().unwrap_or_else(|e| e.into_inner());
                    if kept.is_none() {
                        *kept = Some(payload);
                    } else {
                        drop(kept);
                        crate::containment::drop_payload(payload);
                    }
                    self.panicked.store(true, Ordering::Release);
                }
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Helper side: joins generation `gen` if it is still open, works (segment `own` first:
    /// the helper lane's place after the owner, [`helper_segment`]), leaves.
    pub(crate) fn help(&self, gen: u32, own: usize) {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if (s >> 32) as u32 != gen || s & OPEN == 0 {
                return; // stale help job: that call has returned
            }
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        self.work(own);
        self.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The segment helper lane `helper` starts with in a call owned by lane `owner` of `lanes`:
/// its place counting from the owner (the owner's is 0).
pub(crate) fn helper_segment(owner: usize, helper: usize, lanes: usize) -> usize {
    (helper + lanes - owner) % lanes.max(1)
}

/// What a stage's `StageIo` holds to reach the other lanes.
#[derive(Clone, Copy)]
pub(crate) struct ParallelHandle<'a> {
    pub(crate) lanes: &'a LaneSet,
    pub(crate) lane: usize,
}

impl std::fmt::Debug for ParallelHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParallelHandle")
            .field("lane", &self.lane)
            .finish()
    }
}

impl ParallelHandle<'_> {
    pub(crate) fn run(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
        let chunks = chunks.max(1);
        // Segment words count chunks in 32 bits: more chunks than that (never met) run on
        // this lane alone, in the same partition.
        if chunks == 1 || self.lanes.live_count() < 2 || chunks > u32::MAX as usize {
            return run_inline(items, chunks, f);
        }
        let task = self.lanes.task(self.lane);
        // Only the owning lane opens its task, and the previous call closed it with no
        // helper inside, so these plain stores race with nobody who reads them.
        task.items.store(items, Ordering::Relaxed);
        task.chunks.store(chunks, Ordering::Relaxed);
        task.open_segments(chunks, self.lanes.lanes.len());
        task.done.store(0, Ordering::Relaxed);
        task.panicked.store(false, Ordering::Relaxed);
        // SAFETY: we erase the lifetime of `f` to store it in the shared record. Helpers
        // dereference it only while they hold a chunk index below `chunks`, and this
        // function does not return before `done == chunks` and no helper is inside (see
        // the close loop below), so `f` outlives every use.
        let fref_static: &'static TaskFn = unsafe {
            std::mem::transmute::<&(dyn Fn(Range<usize>) + Sync + '_), &'static TaskFn>(f)
        };
        let slot: *const &'static TaskFn = &fref_static;
        task.func.store(slot.cast_mut(), Ordering::Relaxed);
        let gen = ((task.state.load(Ordering::Relaxed) >> 32) as u32).wrapping_add(1);
        task.state
            .store(((gen as u64) << 32) | OPEN, Ordering::Release);
        self.lanes.post_help(self.lane, gen);
        task.work(0);
        while task.done.load(Ordering::Acquire) < chunks {
            std::hint::spin_loop();
        }
        // Close: only once no helper is inside, so none can still read `func`.
        loop {
            let s = task.state.load(Ordering::Acquire);
            if s & ACTIVE_MASK == 0
                && task
                    .state
                    .compare_exchange(s, s & !OPEN, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break;
            }
            std::hint::spin_loop();
        }
        task.func.store(std::ptr::null_mut(), Ordering::Relaxed);
        if task.panicked.load(Ordering::Acquire) {
            // No helper is inside any more and `f` is no longer reachable: the panic can
            // now leave this call, towards the stage boundary.
            let payload = task
                .payload
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(payload) = payload {
                resume_unwind(payload);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the chunks on `threads` scoped threads, each taking indices from a shared
    /// counter in reverse order, to stand in for any lane count and any timing.
    struct Threads(usize);

    // SAFETY: every index in `0..chunks` is taken once from the atomic counter, and the
    // scope joins every thread before `run_chunks` returns.
    unsafe impl ChunkRunner for Threads {
        fn run_chunks(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
            let chunks = chunks.max(1);
            let taken = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..self.0 {
                    s.spawn(|| loop {
                        let k = taken.fetch_add(1, Ordering::AcqRel);
                        if k >= chunks {
                            return;
                        }
                        let r = chunk_range(items, chunks, chunks - 1 - k);
                        if !r.is_empty() {
                            f(r);
                        }
                    });
                }
            });
        }
    }

    /// Per element: (chunk index that wrote it, how many times it was written).
    fn split_with(runner: &dyn ChunkRunner, len: usize, chunks: usize) -> Vec<(usize, u32)> {
        let mut out = vec![(usize::MAX, 0u32); len];
        chunks_mut(runner, &mut out, chunks, &|i, piece| {
            for e in piece.iter_mut() {
                e.0 = i;
                e.1 += 1;
            }
        });
        out
    }

    #[test]
    fn chunks_mut_writes_every_element_once_with_the_chunk_range_partition() {
        for len in 0..40 {
            for chunks in 1..9 {
                let out = split_with(&Inline, len, chunks);
                for i in 0..chunks {
                    for e in &out[chunk_range(len, chunks, i)] {
                        assert_eq!(*e, (i, 1), "len {len} chunks {chunks}");
                    }
                }
            }
        }
    }

    #[test]
    fn chunks_mut_partition_is_independent_of_lanes() {
        for (len, chunks) in [(0, 3), (1, 4), (10, 3), (17, 5), (64, 8), (100, 7)] {
            let reference = split_with(&Inline, len, chunks);
            for threads in [1, 2, 3, 8] {
                assert_eq!(split_with(&Threads(threads), len, chunks), reference);
            }
        }
    }

    #[test]
    fn chunks_mut_zero_length_and_uneven_splits() {
        // Zero length: every chunk is called, each with an empty piece.
        let calls = AtomicUsize::new(0);
        chunks_mut(&Inline, &mut [0u8; 0], 4, &|_, piece| {
            assert!(piece.is_empty());
            calls.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(calls.into_inner(), 4);
        // Zero chunks: nothing to call.
        chunks_mut(&Inline, &mut [0u8; 5], 0, &|_, _| {
            panic!("no chunk expected")
        });
        // Uneven: 10 into 4 gives 3, 3, 2, 2.
        let lens: Vec<usize> = (0..4).map(|i| chunk_range(10, 4, i).len()).collect();
        assert_eq!(lens, [3, 3, 2, 2]);
        let out = split_with(&Threads(3), 10, 4);
        let owners: Vec<usize> = out.iter().map(|e| e.0).collect();
        assert_eq!(owners, [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]);
        assert!(out.iter().all(|e| e.1 == 1));
    }

    #[test]
    fn chunks_mut_pair_splits_both_slices_alike() {
        let mut a = vec![0usize; 12];
        let mut b = vec![0usize; 6];
        chunks_mut_pair(&Threads(2), &mut a, &mut b, 3, &|i, ca, cb| {
            assert_eq!((ca.len(), cb.len()), (4, 2));
            ca.fill(i + 1);
            cb.fill(10 * (i + 1));
        });
        assert_eq!(a, [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
        assert_eq!(b, [10, 10, 20, 20, 30, 30]);
    }

    /// A helper thread standing in for lane 1: runs every help request posted to it until
    /// `stop`; counts the requests it served.
    fn helper(lanes: &LaneSet, stop: &std::sync::atomic::AtomicBool, served: &AtomicUsize) {
        while !stop.load(Ordering::Acquire) {
            match lanes.lanes[1].helps.pop() {
                Some((owner, gen)) => {
                    lanes
                        .task(owner as usize)
                        .help(gen, helper_segment(owner as usize, 1, 2));
                    served.fetch_add(1, Ordering::AcqRel);
                }
                None => std::hint::spin_loop(),
            }
        }
    }

    /// A chunk that panics on a helper lane: the helper survives (it serves the next call),
    /// the calling lane waits for it and then re-raises the helper's panic itself, so the
    /// stage boundary sees it; a chunk that panics on the calling lane is re-raised only
    /// after the helper has left the task (the closure lives on the caller's stack).
    #[test]
    fn a_panicking_chunk_is_re_raised_on_the_calling_lane_and_the_helper_survives() {
        let lanes = LaneSet::new(2, 8);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let served = AtomicUsize::new(0);
        let helper_thread = std::sync::Mutex::new(None);
        /// Stops the helper when the scope's body ends, also by a failed assertion: the
        /// scope joins the helper before it re-raises, so without this a failure hangs.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                *helper_thread.lock().unwrap() = Some(std::thread::current().id());
                helper(&lanes, &stop, &served);
            });
            let _stop = StopOnDrop(&stop);
            while helper_thread.lock().unwrap().is_none() {
                std::hint::spin_loop();
            }
            let helper_id = helper_thread.lock().unwrap().unwrap();
            let owner = ParallelHandle {
                lanes: &lanes,
                lane: 0,
            };
            // Each side's chunk waits for the other side to have taken one (with a bound,
            // so a broken helper fails the test, not hangs it): without that, a helper
            // that arrives before the caller starts working takes both chunks, and no
            // chunk runs on the caller (CI saw it once: the caller's panic never came).
            let helped = std::sync::atomic::AtomicBool::new(false);
            let caller_in = std::sync::atomic::AtomicBool::new(false);
            let wait_for = |flag: &std::sync::atomic::AtomicBool| {
                let t = std::time::Instant::now();
                while !flag.load(Ordering::SeqCst)
                    && t.elapsed() < std::time::Duration::from_secs(10)
                {
                    std::hint::spin_loop();
                }
            };
            let call = |panic_on_helper: bool| {
                helped.store(false, Ordering::SeqCst);
                caller_in.store(false, Ordering::SeqCst);
                let done = AtomicUsize::new(0);
                let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    owner.run(2, 2, &|_r| {
                        if std::thread::current().id() == helper_id {
                            helped.store(true, Ordering::SeqCst);
                            wait_for(&caller_in);
                            if panic_on_helper {
                                panic!("chunk panicked on the helper");
                            }
                        } else {
                            caller_in.store(true, Ordering::SeqCst);
                            wait_for(&helped);
                            if !panic_on_helper {
                                panic!("chunk panicked on the caller");
                            }
                        }
                        done.fetch_add(1, Ordering::SeqCst);
                    })
                }));
                (r, done.load(Ordering::SeqCst))
            };
            let (r, done) = call(true);
            assert!(helped.load(Ordering::SeqCst), "the helper took a chunk");
            let payload = r.expect_err("the helper's panic reaches the caller");
            assert_eq!(
                crate::containment::message(&*payload),
                "chunk panicked on the helper"
            );
            assert_eq!(done, 1, "the caller's chunk ran to its end");
            // The helper lane is alive and serves the next call; the caller's own panic
            // comes out of the call once the helper is out of the task.
            let (r, _) = call(false);
            assert!(helped.load(Ordering::SeqCst), "the helper served again");
            let payload = r.expect_err("the caller's panic is re-raised");
            assert_eq!(
                crate::containment::message(&*payload),
                "chunk panicked on the caller"
            );
            assert_eq!(lanes.task(0).state.load(Ordering::SeqCst) & ACTIVE_MASK, 0);
            // And a call without a panic works as before.
            let sum = AtomicUsize::new(0);
            owner.run(100, 4, &|r| {
                sum.fetch_add(r.len(), Ordering::SeqCst);
            });
            assert_eq!(sum.load(Ordering::SeqCst), 100);
            stop.store(true, Ordering::Release);
        });
        assert!(served.load(Ordering::SeqCst) >= 2);
    }

    /// The order lanes take chunks in: each its own segment front to back, then the
    /// neighbours' at the end nearest its own; every chunk exactly once.
    #[test]
    fn each_lane_takes_its_own_segment_first_then_the_nearest_neighbours_end() {
        let task = ParallelTask::new(3);
        // 10 chunks over 3 lanes: segments 0..4, 4..7, 7..10.
        task.open_segments(10, 3);
        let take = |own| task.next_chunk(own);
        assert_eq!((take(0), take(1), take(2)), (Some(0), Some(4), Some(7)));
        assert_eq!((take(0), take(0), take(0)), (Some(1), Some(2), Some(3)));
        // Lane 0 ran out: the front of segment 1 (next to its own rows), then segment 2's.
        assert_eq!((take(0), take(0)), (Some(5), Some(6)));
        assert_eq!(take(0), Some(8));
        // Lane 2 keeps its own; nothing left afterwards for anyone.
        assert_eq!(take(2), Some(9));
        assert_eq!((take(0), take(1), take(2)), (None, None, None));

        // A lane that runs out steals the back of the segment before its own.
        task.open_segments(8, 2);
        let mut got = Vec::new();
        while let Some(i) = take(1) {
            got.push(i);
        }
        assert_eq!(got, [4, 5, 6, 7, 3, 2, 1, 0]);
        // A lane without a segment of its own (more lanes than chunks) steals from the
        // back, last segment first.
        task.open_segments(2, 3);
        assert_eq!(task.used.load(Ordering::Relaxed), 2);
        assert_eq!((take(2), take(2), take(2)), (Some(1), Some(0), None));
    }

    /// Real threads on a real lane set: every chunk of every call runs exactly once, for
    /// chunk counts below, at and above the lane count.
    #[test]
    fn segmented_calls_run_every_chunk_exactly_once_on_three_lanes() {
        let lanes = LaneSet::new(3, 8);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for helper in 1..3 {
                let (lanes, stop) = (&lanes, &stop);
                s.spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        match lanes.lanes[helper].helps.pop() {
                            Some((owner, gen)) => lanes
                                .task(owner as usize)
                                .help(gen, helper_segment(owner as usize, helper, 3)),
                            None => std::hint::spin_loop(),
                        }
                    }
                });
            }
            let owner = ParallelHandle {
                lanes: &lanes,
                lane: 0,
            };
            for (items, chunks) in [(100, 2), (100, 3), (37, 7), (1000, 16), (5, 9), (64, 64)] {
                for _ in 0..50 {
                    let hits: Vec<AtomicUsize> = (0..items).map(|_| AtomicUsize::new(0)).collect();
                    owner.run(items, chunks, &|r| {
                        for i in r {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    assert!(
                        hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                        "{items} items in {chunks} chunks"
                    );
                }
            }
            stop.store(true, Ordering::Release);
        });
    }

    #[test]
    fn chunks_cover_exactly_once_in_order() {
        for items in 0..50 {
            for chunks in 1..12 {
                let mut next = 0;
                for i in 0..chunks {
                    let r = chunk_range(items, chunks, i);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, items);
            }
        }
        assert!(chunk_range(10, 3, 3).is_empty());
        assert!(chunk_range(10, 0, 0).is_empty());
    }
}
