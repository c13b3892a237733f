//! The lanes: a fixed pool of worker threads, each with its own queue of stage jobs and of
//! `parallel_for` help requests.
//!
//! ## Contract
//!
//! - The lane set is built once at start-up ([`LaneSet::new`]); the queues are
//!   preallocated ([`crate::queue::BoundedQueue`]), so handing a lane work never allocates,
//!   locks or waits for another thread (a job whose push is still being written is seen
//!   after the pusher's [`LaneSet::wake`], which every push is followed by).
//! - A lane runs help requests first (another lane is waiting on its `parallel_for`), then
//!   its stage jobs; the lane that finishes a frame steps the scheduler itself (the
//!   scheduling token), so a finished frame is published without waking another thread.
//! - An idle lane spins for `lane_spin_ns` before it parks; [`LaneSet::wake`] unparks it.
//! - A lane whose stage hung is marked lost ([`LaneSet::mark_lost`]) and never given work
//!   again; its thread stops when (if ever) the stage returns, unless no lane is live
//!   then: that lane comes back ([`LaneSet::revive_if_none_live`]) and runs the queued work.
//! - A stage's panic never ends a lane (the stage boundary in `Shared::execute` catches
//!   it, and so does a lane helping another's `parallel_for`); a panic of the lane's own
//!   logic ends the thread, is recorded and poisons the runtime (see
//!   [`crate::containment`]).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::thread::Thread;

use crate::exec::{Executed, Shared, StageJob, NONE};
use crate::parallel::{helper_segment, ParallelTask};
use crate::queue::BoundedQueue;

/// One worker lane as seen by everybody else.
#[derive(Debug)]
pub(crate) struct Lane {
    pub stages: BoundedQueue<StageJob>,
    pub helps: BoundedQueue<(u8, u32)>,
    pub thread: AtomicPtr<Thread>,
    pub sleeping: AtomicBool,
    pub lost: AtomicBool,
    /// `pack(seq, slot) | node << 58`, or NONE when not inside a `run`.
    pub running: AtomicU64,
    pub started_ns: AtomicU64,
    pub task: ParallelTask,
}

/// The lanes, for dispatch and `parallel_for`.
#[derive(Debug)]
pub(crate) struct LaneSet {
    pub lanes: Box<[Lane]>,
    live: AtomicUsize,
}

impl LaneSet {
    /// `lanes` lanes, each with a stage queue of `queue_cap` jobs (start-up only).
    pub fn new(lanes: usize, queue_cap: usize) -> LaneSet {
        LaneSet {
            lanes: (0..lanes)
                .map(|_| Lane {
                    stages: BoundedQueue::new(queue_cap),
                    helps: BoundedQueue::new(4 * lanes.max(1)),
                    thread: AtomicPtr::new(std::ptr::null_mut()),
                    sleeping: AtomicBool::new(false),
                    lost: AtomicBool::new(false),
                    running: AtomicU64::new(NONE),
                    started_ns: AtomicU64::new(0),
                    task: ParallelTask::new(lanes),
                })
                .collect(),
            live: AtomicUsize::new(lanes),
        }
    }

    pub fn live_count(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    pub fn task(&self, lane: usize) -> &ParallelTask {
        &self.lanes[lane].task
    }

    pub fn wake(&self, lane: usize) {
        let l = &self.lanes[lane];
        if l.sleeping.swap(false, Ordering::SeqCst) {
            let t = l.thread.load(Ordering::Acquire);
            if !t.is_null() {
                // SAFETY: the pointer was leaked from a Box<Thread> by the lane at start and
                // is freed only when the runtime is dropped, after all lanes stopped.
                unsafe { (*t).unpark() };
            }
        }
    }

    pub fn post_help(&self, owner: usize, gen: u32) {
        for (i, l) in self.lanes.iter().enumerate() {
            if i != owner
                && !l.lost.load(Ordering::Acquire)
                && l.helps.push((owner as u8, gen)).is_ok()
            {
                self.wake(i);
            }
        }
    }

    /// Brings lost `lane` back when no lane is live (the last written-off stage returned
    /// and nothing else could run queued work); true if this call revived it. At most one
    /// lane is revived this way.
    pub fn revive_if_none_live(&self, lane: usize) -> bool {
        if self
            .live
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.lanes[lane].lost.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Marks `lane` lost; true if it was live until now.
    pub fn mark_lost(&self, lane: usize) -> bool {
        if !self.lanes[lane].lost.swap(true, Ordering::SeqCst) {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return true;
        }
        false
    }
}

/// The body of one lane thread. An idle lane spins for `lane_spin_ns` (checking its
/// queues) before it parks, so work handed to it in quick succession, as inside a frame,
/// starts without a futex wake-up.
pub(crate) fn lane_main(shared: &Shared, lane: usize) {
    let me = &shared.lanes.lanes[lane];
    let mut idle_since: Option<u64> = None;
    loop {
        if let Some((owner, gen)) = me.helps.pop() {
            let own = helper_segment(owner as usize, lane, shared.lanes.lanes.len());
            shared.lanes.task(owner as usize).help(gen, own);
            idle_since = None;
            continue;
        }
        if let Some(job) = me.stages.pop() {
            match shared.execute(lane, job) {
                // The written-off stage returned. The lane retires, unless no lane is
                // live: then it comes back so queued work (the fallback of the written-off
                // stage included) runs again instead of waiting for ever.
                Executed::WrittenOff => {
                    if !shared.revive_lane(lane) {
                        return;
                    }
                    idle_since = None;
                }
                // Publish it from here: no other thread needs waking.
                Executed::FrameDone => {
                    shared.try_step();
                    idle_since = None;
                }
                Executed::Done => idle_since = None,
            }
            continue;
        }
        if shared.shutdown.load(Ordering::Acquire) || me.lost.load(Ordering::Acquire) {
            return;
        }
        let now = shared.now_ns();
        let since = *idle_since.get_or_insert(now);
        if now.saturating_sub(since) < shared.lane_spin_ns {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
            continue;
        }
        me.sleeping.store(true, Ordering::SeqCst);
        // A Dekker pair with `LaneSet::wake` (push, then swap `sleeping`): the store above
        // must be ordered before the queue loads below. SeqCst does that in the language and
        // on hardware; the fence also makes emulators do it (qemu's TCG lets an aarch64
        // stlr/ldar pair reorder; see `Shared::offer` and tools/aarch64/run.sh).
        std::sync::atomic::fence(Ordering::SeqCst);
        if me.stages.is_empty() && me.helps.is_empty() && !shared.shutdown.load(Ordering::SeqCst) {
            std::thread::park();
        }
        me.sleeping.store(false, Ordering::SeqCst);
        idle_since = None;
    }
}
