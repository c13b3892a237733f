//! `parallel_for` inside a stage: a static, deterministic partition spread over idle lanes.
//!
//! Contract:
//!
//! - `0..items` is cut into `chunks` contiguous ranges by [`chunk_range`]; the cut depends
//!   only on `items` and `chunks`, never on the lane count or on timing. A stage whose
//!   chunks each write only their own items therefore gets the same result on 1 or 8 lanes.
//! - The calling lane posts one "help" job to every other live lane and then works through
//!   the chunks itself; helpers that arrive take chunks from the same atomic counter. The
//!   call returns when every chunk has finished. A helper busy with another stage simply
//!   arrives late or not at all: the caller never waits for a helper to *start*.
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
    next: AtomicUsize,
    done: AtomicUsize,
    /// A chunk of the current call panicked: skip the rest, re-raise on the owner.
    panicked: AtomicBool,
    /// The first panic payload of the current call (panic path only).
    payload: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Default for ParallelTask {
    fn default() -> Self {
        ParallelTask {
            state: AtomicU64::new(0),
            func: AtomicPtr::new(std::ptr::null_mut()),
            items: AtomicUsize::new(0),
            chunks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            payload: Mutex::new(None),
        }
    }
}

impl ParallelTask {
    /// Takes and runs chunks until none is left. Caller must be inside the task
    /// (owner, or a helper counted in `active`).
    fn work(&self) {
        let items = self.items.load(Ordering::Acquire);
        let chunks = self.chunks.load(Ordering::Acquire);
        let fp = self.func.load(Ordering::Acquire);
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            if i >= chunks {
                return;
            }
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

    /// Helper side: joins generation `gen` if it is still open, works, leaves.
    pub(crate) fn help(&self, gen: u32) {
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
        self.work();
        self.state.fetch_sub(1, Ordering::AcqRel);
    }
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
        if chunks == 1 || self.lanes.live_count() < 2 {
            return run_inline(items, chunks, f);
        }
        let task = self.lanes.task(self.lane);
        // Only the owning lane opens its task, and the previous call closed it with no
        // helper inside, so these plain stores race with nobody who reads them.
        task.items.store(items, Ordering::Relaxed);
        task.chunks.store(chunks, Ordering::Relaxed);
        task.next.store(0, Ordering::Relaxed);
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
        task.work();
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
                    lanes.task(owner as usize).help(gen);
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
