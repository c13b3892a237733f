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
//! - No allocation, no lock: each lane owns one preallocated [`ParallelTask`] record,
//!   guarded by a generation/open/active state word, so a helper that dequeues a stale help
//!   job (for a call that already returned) notices and leaves without touching the closure.

use std::ops::Range;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::exec::LaneSet;

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
            if !r.is_empty() {
                f(r);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
