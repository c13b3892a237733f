//! The execution core shared by the scheduler, the lanes and the watchdog.
//!
//! Everything here is allocated once when the runtime starts; after that, running a frame
//! touches only atomics, preallocated queues ([`crate::queue::BoundedQueue`]) and the arena.
//!
//! No thread here spins waiting for a thread of lower priority (where one must wait, it
//! sleeps: `Shared::detach_core`): a SCHED_FIFO thread that spins or yields for one it
//! preempted on its own core waits for ever. The queues' push and pop never wait for
//! another thread's push or pop to finish, so a pushed event or job may be
//! invisible until its pusher finishes, and every push is followed by what makes the
//! consumer look again: a job by [`crate::lanes::LaneSet::wake`], an event by the
//! poster's own scheduling step (`FrameDone`) or a wake of the scheduler thread (every
//! other event).
//!
//! ## How a frame flows
//!
//! 1. The scheduler *releases* a frame into a free slot: it resets the slot's per-stage
//!    counters of unfinished predecessors and *offers* every root stage.
//! 2. Offering stage `s` for the frame with sequence number `q` dispatches it to the
//!    queue of `s`'s lane, but only once `s` has finished frame `q - 1`: the per-stage
//!    gate (`next_seq` plus a small `parked` ring, resolved by compare-and-swap so exactly
//!    one side dispatches) keeps every stage in frame order even with frames in flight.
//! 3. A lane runs the stage (or its fallback, or nothing if the frame was abandoned), then
//!    *completes* it: decrements its successors' counters (offering those that reach zero),
//!    opens the gate for the next frame, and decrements the frame's count of unfinished
//!    stages. The lane that finishes the last stage posts `FrameDone` to the scheduler.
//!
//! Dispatch is decentralised: lanes hand work to each other directly, and the scheduler
//! thread is woken only for frame-level events. A lane spins briefly before parking (the
//! lane threads and their queues are in [`crate::lanes`]).
//!
//! ## Faults
//!
//! The watchdog that reports these faults is [`crate::runtime::watchdog`].
//!
//! - A stage past its budget is seen by the watchdog (`Event::Overrun`).
//! - A frame past its guard time (deadline minus the publish margin) is marked abandoned by
//!   the watchdog; stages of it that have not started are cancelled, and the scheduler
//!   publishes the frame's fallback.
//! - A stage running longer than `hang_after` is *lost*: the scheduler marks its lane lost
//!   (no longer used), moves that lane's stages to live lanes, and completes the hung stage
//!   on its behalf so later frames flow; from then on the stage's [`Fallback`] stands in
//!   for it. The slot the hung stage is writing into stays quarantined until it returns.
//!   Moving a lost lane's work is bounded: [`Shared::redirect_lost_queue`] pops each queued
//!   job once and pushes it once (never dispatching again), so no job is run twice or lost,
//!   and each stage keeps its frame order (its gate admits one frame at a time, so it has
//!   at most one job queued anywhere). With no live lane left, the jobs wait where they
//!   are; frames are published on fallback meanwhile, and the first written-off stage
//!   that returns revives its lane ([`Shared::revive_lane`]).
//! - A stage whose `run` panics is caught at the stage boundary ([`Shared::execute`]), its
//!   fallback writes that frame's outputs and it is *poisoned*: never run again, its
//!   fallback standing in from then on. A fallback that panics is replaced by zero-fill.
//!   See [`crate::containment`] for the whole panic contract (publisher, scheduling step,
//!   lane and watchdog threads).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::thread::Thread;

use crate::arena::Arena;
use crate::containment::{self, Escaped, PanicNote, StagePanics};
use crate::lanes::LaneSet;
use crate::parallel::ParallelHandle;
use crate::queue::BoundedQueue;
use crate::runtime::clock::Clock;
use crate::runtime::watchdog::Watch;
use crate::runtime::Runtime;
use crate::stage::{Fallback, FrameInfo, PortView, Stage, StageIo, ZeroFill};

/// Tries of [`Shared::detach_core`] that spin before it starts sleeping between tries.
const DETACH_SPINS: u32 = 1_000;

/// Marker for "no value" in packed atomics.
pub(crate) const NONE: u64 = u64::MAX;

// Slot phases.
pub(crate) const FREE: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const DONE: u8 = 2;
pub(crate) const ABANDONED: u8 = 3;

// Node execution states, in the low 2 bits of `Node::exec`; the high bits hold the
// sequence number of the frame being run, so a stale hang report for an earlier frame can
// never write off a later run of the same stage. LOST (written off as hung) and POISONED
// (its `run` panicked) are final: the fallback stands in from then on.
const IDLE: u64 = 0;
const BUSY: u64 = 1;
const LOST: u64 = 2;
const POISONED: u64 = 3;
const STATE_MASK: u64 = 3;

/// How one stage's turn in one frame ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Outcome {
    /// Not finished yet.
    Pending = 0,
    /// `run` returned Ok.
    Ran = 1,
    /// `run` returned Err; the fallback wrote the outputs.
    Failed = 2,
    /// Disabled by the frame's mode; the fallback wrote the outputs.
    Skipped = 3,
    /// The stage is lost; the fallback wrote the outputs.
    LostFallback = 4,
    /// The frame was abandoned before the stage started.
    Cancelled = 5,
    /// The stage hung in this frame and was completed on its behalf.
    Hung = 6,
    /// `run` panicked in this frame; the fallback wrote the outputs.
    Panicked = 7,
    /// The stage panicked in an earlier frame; the fallback wrote the outputs.
    PanickedFallback = 8,
}

impl Outcome {
    fn from_u8(v: u8) -> Outcome {
        match v {
            1 => Outcome::Ran,
            2 => Outcome::Failed,
            3 => Outcome::Skipped,
            4 => Outcome::LostFallback,
            5 => Outcome::Cancelled,
            6 => Outcome::Hung,
            7 => Outcome::Panicked,
            8 => Outcome::PanickedFallback,
            _ => Outcome::Pending,
        }
    }
}

/// A unit of work in a lane's queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StageJob {
    pub node: u8,
    pub slot: u8,
    pub seq: u64,
}

/// Holds the scheduling token (`Shared::token`) and gives it back when dropped, also when
/// the holder unwinds.
pub(crate) struct TokenGuard<'a>(&'a AtomicBool);

impl<'a> TokenGuard<'a> {
    /// Takes the token if it is free.
    pub fn acquire(token: &'a AtomicBool) -> Option<TokenGuard<'a>> {
        token
            // SeqCst also on failure: a failed acquire is one side of the Dekker pair with
            // the holder's release and re-check of the event queue (see `try_step`).
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| TokenGuard(token))
    }
}

impl Drop for TokenGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Messages to the scheduler thread.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    /// Every stage of the frame in `slot` has finished.
    FrameDone { slot: u8 },
    /// The watchdog abandoned a frame at its guard time.
    Abandoned,
    /// The watchdog saw a stage past its budget, `delay_ns` after the budget expired.
    Overrun { delay_ns: u64 },
    /// The watchdog saw `node` on `lane` running longer than `hang_after`.
    Hung {
        lane: u8,
        node: u8,
        slot: u8,
        seq: u64,
    },
    /// A lost stage finally returned.
    Returned,
}

/// What became of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Executed {
    /// Finished.
    Done,
    /// Finished and it was the frame's last stage: the scheduler has been woken.
    FrameDone,
    /// The lane was written off (its stage hung and came back): stop taking work.
    WrittenOff,
}

/// Per-stage static data the hot path needs (copied out of the plan).
#[derive(Debug)]
pub(crate) struct NodeStatic {
    pub budget_ns: u64,
    pub successors: Box<[u8]>,
    pub n_preds: u32,
    pub inputs: Box<[PortView]>,
    pub outputs: Box<[PortView]>,
    pub plan_lane: usize,
}

/// A stage's runtime state.
pub(crate) struct Node {
    stage: UnsafeCell<Box<dyn Stage>>,
    fallback: UnsafeCell<Box<dyn Fallback>>,
    /// Sequence number of the next frame this stage may process.
    next_seq: AtomicU64,
    /// Parked offers, indexed by `seq % slots`: `pack(seq, slot) + 1`, 0 = empty.
    parked: Box<[AtomicU64]>,
    /// `seq << 2 | state` (IDLE, BUSY, LOST or POISONED).
    exec: AtomicU64,
    /// The fallback panicked once: zero-fill stands in for it.
    fallback_poisoned: AtomicBool,
    /// Panics caught in this stage's `run` and fallback (first of each).
    pub panics: StagePanics,
    /// Lane the stage currently runs on.
    pub lane: AtomicUsize,
}

// SAFETY: `stage` is only accessed by the lane executing this node's `run`, and `fallback`
// only by the lane executing this node's fallback; the per-node frame gate (`next_seq`)
// admits one frame at a time, so at most one thread touches each cell at any moment. Once a
// stage is lost, `stage` is never touched again (its stuck thread keeps the only access);
// once it panicked (POISONED), it is never touched again at all (only dropped).
unsafe impl Sync for Node {}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("next_seq", &self.next_seq.load(Ordering::Relaxed))
            .field("exec", &self.exec.load(Ordering::Relaxed))
            .finish()
    }
}

/// Per-stage timing of one frame, written by the lane, read by the scheduler at retire.
#[derive(Debug, Default)]
pub(crate) struct NodeTiming {
    pub ready_ns: AtomicU64,
    pub start_ns: AtomicU64,
    pub end_ns: AtomicU64,
    pub lane: AtomicU8,
    pub outcome: AtomicU8,
}

impl NodeTiming {
    pub fn outcome(&self) -> Outcome {
        Outcome::from_u8(self.outcome.load(Ordering::Acquire))
    }
}

/// One frame slot: a frame in flight and its bookkeeping.
#[derive(Debug)]
pub(crate) struct Slot {
    pub frame: AtomicU64,
    pub seq: AtomicU64,
    pub phase: AtomicU8,
    pub mode: AtomicU8,
    pub remaining: AtomicU32,
    pub in_exec: AtomicU32,
    pub pending: Box<[AtomicU32]>,
    pub skip_mask: AtomicU64,
    pub overrun_mask: AtomicU64,
    /// Release time on the frame's clock (virtual in lockstep).
    pub release_ns: AtomicU64,
    /// Deadline on the frame's clock.
    pub deadline_ns: AtomicU64,
    /// Wall-clock time at which the watchdog abandons the frame.
    pub guard_ns: AtomicU64,
    /// Wall-clock release time, for end-to-end latency.
    pub wall_release_ns: AtomicU64,
    pub timing: Box<[NodeTiming]>,
}

/// Everything the scheduler, the lanes and the watchdog share.
pub(crate) struct Shared {
    pub statics: Box<[NodeStatic]>,
    pub nodes: Box<[Node]>,
    pub slots: Box<[Slot]>,
    pub arena: Arena,
    pub lanes: LaneSet,
    pub events: BoundedQueue<Event>,
    pub events_dropped: AtomicU64,
    pub scheduler: AtomicPtr<Thread>,
    pub shutdown: AtomicBool,
    /// The monotonic clock every thread reads.
    pub clock: Clock,
    pub watch: Watch,
    /// An idle lane spins this long for new work before it parks, ns.
    pub lane_spin_ns: u64,
    /// The runtime being driven by `Runtime::run`, or null between runs (and from the
    /// moment a panic escaped a scheduling step).
    pub core: AtomicPtr<Runtime>,
    /// A panic outside any stage (publisher, step, lane or watchdog thread): see
    /// [`crate::containment`].
    pub escaped: Escaped,
    /// Held by whoever is inside `Runtime::step`.
    pub token: AtomicBool,
    /// Set by `step` when the run's last frame is published and every slot idle.
    pub run_finished: AtomicBool,
    /// Next time-triggered release, wall-clock ns (0 = none pending).
    pub next_due: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("nodes", &self.nodes.len())
            .field("slots", &self.slots.len())
            .field("lanes", &self.lanes.lanes.len())
            .finish()
    }
}

pub(crate) fn pack(seq: u64, slot: u8) -> u64 {
    (seq << 4) | u64::from(slot & 0xF)
}

pub(crate) fn pack_running(node: u8, seq: u64, slot: u8) -> u64 {
    (u64::from(node) << 58) | (pack(seq, slot) & ((1 << 58) - 1))
}

pub(crate) fn unpack_running(v: u64) -> (u8, u64, u8) {
    let node = (v >> 58) as u8;
    let low = v & ((1 << 58) - 1);
    (node, low >> 4, (low & 0xF) as u8)
}

impl Shared {
    /// Whether `node`'s `run` panicked in some frame (its fallback stands in for good).
    /// Read by the scheduler to notice a lost critical stage even when the frame it
    /// panicked in was already published on the deadline guard's fallback.
    pub(crate) fn poisoned(&self, node: usize) -> bool {
        self.nodes[node].exec.load(Ordering::Acquire) & STATE_MASK == POISONED
    }

    /// Builds the shared state (start-up only).
    pub fn new(
        statics: Vec<NodeStatic>,
        objects: Vec<(Box<dyn Stage>, Box<dyn Fallback>)>,
        arena: Arena,
        lanes: usize,
        watch: Watch,
        lane_spin_ns: u64,
    ) -> Shared {
        let n = statics.len();
        let n_slots = arena.slots();
        let nodes: Box<[Node]> = objects
            .into_iter()
            .zip(&statics)
            .map(|((stage, fallback), st)| Node {
                stage: UnsafeCell::new(stage),
                fallback: UnsafeCell::new(fallback),
                next_seq: AtomicU64::new(0),
                parked: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
                exec: AtomicU64::new(IDLE),
                fallback_poisoned: AtomicBool::new(false),
                panics: StagePanics::default(),
                lane: AtomicUsize::new(st.plan_lane),
            })
            .collect();
        let slots = (0..n_slots)
            .map(|_| Slot {
                frame: AtomicU64::new(0),
                seq: AtomicU64::new(0),
                phase: AtomicU8::new(FREE),
                mode: AtomicU8::new(0),
                remaining: AtomicU32::new(0),
                in_exec: AtomicU32::new(0),
                pending: (0..n).map(|_| AtomicU32::new(0)).collect(),
                skip_mask: AtomicU64::new(0),
                overrun_mask: AtomicU64::new(0),
                release_ns: AtomicU64::new(0),
                deadline_ns: AtomicU64::new(0),
                guard_ns: AtomicU64::new(0),
                wall_release_ns: AtomicU64::new(0),
                timing: (0..n).map(|_| NodeTiming::default()).collect(),
            })
            .collect();
        let queue_cap = n * n_slots + 4;
        let lane_set = LaneSet::new(lanes, queue_cap);
        Shared {
            statics: statics.into_boxed_slice(),
            nodes,
            slots,
            arena,
            lanes: lane_set,
            events: BoundedQueue::new(4096),
            events_dropped: AtomicU64::new(0),
            scheduler: AtomicPtr::new(std::ptr::null_mut()),
            shutdown: AtomicBool::new(false),
            clock: Clock::start(),
            watch,
            lane_spin_ns,
            core: AtomicPtr::new(std::ptr::null_mut()),
            escaped: Escaped::default(),
            token: AtomicBool::new(false),
            run_finished: AtomicBool::new(false),
            next_due: AtomicU64::new(0),
        }
    }

    /// Nanoseconds since the runtime's epoch (monotonic; see [`Clock`]).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Posts an event; `wake` unparks the scheduler thread. Pass `wake = false` only when
    /// the caller steps the scheduler itself right after (`try_step`, or it holds the
    /// token): an event pushed while an earlier push is still being written stays
    /// invisible until that one is finished (see [`crate::queue`]), so each poster must
    /// make somebody look again after its own push.
    pub fn post(&self, e: Event, wake: bool) {
        if self.events.push(e).is_err() {
            self.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
        if wake {
            self.wake_scheduler();
        }
    }

    pub fn wake_scheduler(&self) {
        let t = self.scheduler.load(Ordering::Acquire);
        if !t.is_null() {
            // SAFETY: set by `Runtime::run` from a leaked Box<Thread> before any frame is
            // released and only replaced between runs (no frame in flight); freed on drop.
            unsafe { (*t).unpark() };
        }
    }

    /// Runs scheduling steps while the token is free and events are waiting. Never blocks:
    /// if another thread holds the token, that thread will see our events before it lets
    /// the token go (it re-checks the queue after releasing), unless they wait behind an
    /// event whose push is still in progress: then that event's poster steps or wakes the
    /// scheduler after it (see [`Shared::post`]).
    ///
    /// A panic inside the step (the publisher, a timing model, the step logic) is caught
    /// here: the run is detached (`core` cleared, under the token, so nobody steps the
    /// half-updated runtime again), the panic recorded in `escaped`, the token released
    /// (by its guard, whatever happens) and the scheduler thread woken, so `Runtime::run`
    /// re-raises it instead of waiting.
    pub fn try_step(&self) {
        loop {
            if self.core.load(Ordering::SeqCst).is_null() {
                return;
            }
            let Some(token) = TokenGuard::acquire(&self.token) else {
                return;
            };
            let p = self.core.load(Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: `core` is non-null only while `Runtime::run` is running, which
                // uses the runtime only through this same pointer and only under the token;
                // we hold the token, so this is the only access. `Runtime` is `Send`.
                let stepped = catch_unwind(AssertUnwindSafe(|| unsafe { (*p).step() }));
                if let Err(payload) = stepped {
                    self.core.store(std::ptr::null_mut(), Ordering::SeqCst);
                    self.escaped
                        .record("the publisher or the scheduling step", payload);
                    drop(token);
                    self.wake_scheduler();
                    return;
                }
            }
            drop(token);
            if p.is_null() || self.events.is_empty() {
                return;
            }
        }
    }

    /// Ends a run: waits for the token, clears `core`, so no thread can step it any more.
    ///
    /// The caller is the scheduler thread, which may run at a higher SCHED_FIFO priority
    /// than the lane holding the token and on the same core: a pure spin would never let
    /// that lane run to release it (a priority inversion that hung a real-time replay under
    /// qemu for minutes). So it spins briefly, then sleeps between tries. Off the hot path:
    /// once per run.
    pub fn detach_core(&self) {
        let mut tries = 0u32;
        let token = loop {
            if let Some(t) = TokenGuard::acquire(&self.token) {
                break t;
            }
            tries = tries.saturating_add(1);
            if tries < DETACH_SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        };
        self.core.store(std::ptr::null_mut(), Ordering::SeqCst);
        drop(token);
    }

    /// Offers `node` for the frame `seq` in `slot` (its inputs are ready).
    pub fn offer(&self, node: usize, slot: u8, seq: u64) {
        let n = &self.nodes[node];
        if n.next_seq.load(Ordering::SeqCst) == seq {
            self.dispatch(node, slot, seq);
            return;
        }
        let cell = &n.parked[(seq % n.parked.len() as u64) as usize];
        let v = pack(seq, slot) + 1;
        cell.store(v, Ordering::SeqCst);
        // The store above and the load below are one side of a Dekker pair with
        // `open_gate`. SeqCst alone orders them in the language and on hardware; the fence
        // also makes emulators order them (qemu's TCG lets an aarch64 stlr/ldar pair
        // reorder on x86 hosts: see tools/aarch64/run.sh).
        std::sync::atomic::fence(Ordering::SeqCst);
        if n.next_seq.load(Ordering::SeqCst) == seq
            && cell
                .compare_exchange(v, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.dispatch(node, slot, seq);
        }
    }

    /// Opens `node`'s gate for `seq + 1` and dispatches a parked offer for it, if any.
    fn open_gate(&self, node: usize, seq: u64) {
        let n = &self.nodes[node];
        let next = seq + 1;
        n.next_seq.store(next, Ordering::SeqCst);
        // The other side of the pair in `offer` (see there).
        std::sync::atomic::fence(Ordering::SeqCst);
        let cell = &n.parked[(next % n.parked.len() as u64) as usize];
        let v = cell.load(Ordering::SeqCst);
        if v != 0
            && (v - 1) >> 4 == next
            && cell
                .compare_exchange(v, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.dispatch(node, ((v - 1) & 0xF) as u8, next);
        }
    }

    fn dispatch(&self, node: usize, slot: u8, seq: u64) {
        let job = StageJob {
            node: node as u8,
            slot,
            seq,
        };
        let lane = self.nodes[node].lane.load(Ordering::Acquire);
        self.enqueue(job, lane);
        if self.lanes.lanes[lane].lost.load(Ordering::SeqCst) {
            // The lane was written off while (or before) the job was queued: move it on.
            self.redirect_lost_queue(lane);
        }
    }

    /// Queues `job` on `lane`, or on any live lane if that queue is full (cannot happen:
    /// each queue holds every (stage, slot) pair; but a job is never dropped).
    fn enqueue(&self, job: StageJob, lane: usize) {
        if self.lanes.lanes[lane].stages.push(job).is_ok() {
            self.lanes.wake(lane);
            return;
        }
        for (i, other) in self.lanes.lanes.iter().enumerate() {
            if !other.lost.load(Ordering::Acquire) && other.stages.push(job).is_ok() {
                self.lanes.wake(i);
                return;
            }
        }
    }

    /// Moves every job queued on a lost lane to its stage's current lane, or to the first
    /// live lane when that one is lost too. Bounded: it never calls [`Self::dispatch`]
    /// (which may call it back), pops at most the queue's capacity, and leaves the jobs
    /// where they are when no live lane is left (nothing could run them; the watchdog
    /// publishes those frames' fallbacks at their guard time).
    pub fn redirect_lost_queue(&self, lane: usize) {
        let is_live = |i: usize| !self.lanes.lanes[i].lost.load(Ordering::Acquire);
        let Some(first_live) = (0..self.lanes.lanes.len()).find(|&i| is_live(i)) else {
            return;
        };
        let queue = &self.lanes.lanes[lane].stages;
        for _ in 0..queue.capacity() {
            let Some(job) = queue.pop() else { break };
            let target = self.nodes[job.node as usize].lane.load(Ordering::Acquire);
            let target = if is_live(target) { target } else { first_live };
            self.enqueue(job, target);
        }
    }

    /// Finishes `node`'s turn in the frame `seq` in `slot`: successors, gate, frame count.
    /// Returns true if this completed the frame.
    pub fn complete(&self, node: usize, slot: u8, seq: u64) -> bool {
        let s = &self.slots[slot as usize];
        for &succ in self.statics[node].successors.iter() {
            if s.pending[succ as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                s.timing[succ as usize]
                    .ready_ns
                    .store(self.now_ns(), Ordering::Relaxed);
                self.offer(succ as usize, slot, seq);
            }
        }
        self.open_gate(node, seq);
        if s.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The caller steps the scheduler (a lane) or is already stepping it (write-off).
            self.post(Event::FrameDone { slot }, false);
            return true;
        }
        false
    }

    fn frame_info(&self, s: &Slot) -> FrameInfo {
        FrameInfo {
            frame: s.frame.load(Ordering::Acquire),
            release_ns: s.release_ns.load(Ordering::Acquire),
            deadline_ns: s.deadline_ns.load(Ordering::Acquire),
            mode: s.mode.load(Ordering::Acquire),
        }
    }

    fn io<'a>(&'a self, node: usize, slot: u8, lane: usize) -> StageIo<'a> {
        let st = &self.statics[node];
        let base = self
            .arena
            .slot_base(slot as usize)
            .expect("slot index from the scheduler is in range");
        // SAFETY: `base` is a slot laid out by this plan and lives as long as `self`; the
        // dependency counters guarantee the inputs are complete and no other stage accesses
        // the outputs (plan: no shared bytes between concurrently accessed buffers).
        // Fallbacks run at the stage's place in the dependency order, so their inputs are
        // complete too.
        unsafe {
            StageIo::new(
                base,
                &st.inputs,
                &st.outputs,
                Some(ParallelHandle {
                    lanes: &self.lanes,
                    lane,
                }),
            )
        }
    }

    /// Runs one stage job on `lane`.
    pub fn execute(&self, lane: usize, job: StageJob) -> Executed {
        let node = job.node as usize;
        let slot = job.slot;
        let s = &self.slots[slot as usize];
        let n = &self.nodes[node];
        let t = &s.timing[node];
        let start = self.now_ns();
        t.start_ns.store(start, Ordering::Relaxed);
        t.lane.store(lane as u8, Ordering::Relaxed);
        let info = self.frame_info(s);
        let state = n.exec.load(Ordering::Acquire) & STATE_MASK;
        let outcome = if s.phase.load(Ordering::Acquire) == ABANDONED {
            Outcome::Cancelled
        } else if state == LOST {
            self.run_fallback(node, slot, lane, &info);
            Outcome::LostFallback
        } else if state == POISONED {
            self.run_fallback(node, slot, lane, &info);
            Outcome::PanickedFallback
        } else if s.skip_mask.load(Ordering::Acquire) & (1u64 << node) != 0 {
            self.run_fallback(node, slot, lane, &info);
            Outcome::Skipped
        } else {
            let l = &self.lanes.lanes[lane];
            l.started_ns.store(start, Ordering::Release);
            l.running
                .store(pack_running(job.node, job.seq, slot), Ordering::Release);
            let busy = (job.seq << 2) | BUSY;
            n.exec.store(busy, Ordering::Release);
            s.in_exec.fetch_add(1, Ordering::AcqRel);
            let mut io = self.io(node, slot, lane);
            // SAFETY: the frame gate admits this node for one frame at a time and only this
            // lane executes it now, so this is the only reference to the stage object.
            let stage = unsafe { &mut *n.stage.get() };
            // The stage boundary: a panic in user code stops here (see `containment` for
            // why asserting unwind safety is sound: a stage that panicked is never called
            // again, and its fallback overwrites the outputs it may have half-written).
            let result = catch_unwind(AssertUnwindSafe(|| stage.run(&info, &mut io)));
            l.running.store(NONE, Ordering::Release);
            let after = if result.is_err() { POISONED } else { IDLE };
            if n.exec
                .compare_exchange(
                    busy,
                    (job.seq << 2) | after,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                // Written off as hung while we ran: the scheduler already completed this
                // turn on our behalf. Leave the slot and stop.
                if let Err(payload) = result {
                    Self::note_panic(&n.panics.run, info.frame, payload, true);
                }
                s.in_exec.fetch_sub(1, Ordering::AcqRel);
                self.post(Event::Returned, true);
                return Executed::WrittenOff;
            }
            s.in_exec.fetch_sub(1, Ordering::AcqRel);
            match result {
                Ok(Ok(())) => Outcome::Ran,
                Ok(Err(_)) => {
                    self.run_fallback(node, slot, lane, &info);
                    Outcome::Failed
                }
                Err(payload) => {
                    Self::note_panic(&n.panics.run, info.frame, payload, false);
                    self.run_fallback(node, slot, lane, &info);
                    Outcome::Panicked
                }
            }
        };
        t.end_ns.store(self.now_ns(), Ordering::Relaxed);
        t.outcome.store(outcome as u8, Ordering::Release);
        if self.complete(node, slot, job.seq) {
            Executed::FrameDone
        } else {
            Executed::Done
        }
    }

    /// Writes `node`'s outputs with its fallback; if the fallback panics (now or in an
    /// earlier frame), with zero bytes instead.
    fn run_fallback(&self, node: usize, slot: u8, lane: usize, info: &FrameInfo) {
        let n = &self.nodes[node];
        if !n.fallback_poisoned.load(Ordering::Acquire) {
            let mut io = self.io(node, slot, lane);
            // SAFETY: as for `stage` in `execute`: one frame at a time per node, one lane.
            let fb = unsafe { &mut *n.fallback.get() };
            match catch_unwind(AssertUnwindSafe(|| fb.fallback(info, &mut io))) {
                Ok(()) => return,
                Err(payload) => {
                    n.fallback_poisoned.store(true, Ordering::Release);
                    Self::note_panic(&n.panics.fallback, info.frame, payload, false);
                }
            }
        }
        // A fresh view: the panicking call may have taken some outputs already.
        let mut io = self.io(node, slot, lane);
        ZeroFill.fallback(info, &mut io);
    }

    /// Keeps the first panic of a stage's `run` or fallback (panic path only: allocates).
    fn note_panic(
        note: &std::sync::OnceLock<PanicNote>,
        frame: u64,
        payload: Box<dyn std::any::Any + Send>,
        written_off: bool,
    ) {
        let message = containment::message(&*payload);
        containment::drop_payload(payload);
        let _ = note.set(PanicNote {
            frame,
            message,
            written_off,
        });
    }

    /// Revives lost `lane` if no lane is live (see [`LaneSet::revive_if_none_live`]):
    /// every stage placed on a lost lane moves to it and the other lost lanes' queues are
    /// moved after them. Returns whether the lane is live again.
    pub fn revive_lane(&self, lane: usize) -> bool {
        if !self.lanes.revive_if_none_live(lane) {
            return false;
        }
        for node in self.nodes.iter() {
            let l = node.lane.load(Ordering::Acquire);
            if self.lanes.lanes[l].lost.load(Ordering::Acquire) {
                node.lane.store(lane, Ordering::Release);
            }
        }
        for other in 0..self.lanes.lanes.len() {
            if other != lane && self.lanes.lanes[other].lost.load(Ordering::Acquire) {
                self.redirect_lost_queue(other);
            }
        }
        true
    }

    /// Scheduler side of a hang: writes the stage off, moves its lane's work, completes
    /// its turn. Returns false if the stage returned in the meantime (no loss).
    pub fn write_off(&self, lane: usize, node: usize, slot: u8, seq: u64) -> bool {
        let n = &self.nodes[node];
        let busy = (seq << 2) | BUSY;
        if n.exec
            .compare_exchange(busy, (seq << 2) | LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.lanes.mark_lost(lane);
        let is_live = |i: &usize| !self.lanes.lanes[*i].lost.load(Ordering::Acquire);
        let live_n = (0..self.lanes.lanes.len()).filter(is_live).count();
        if live_n > 0 {
            for (i, other) in self.nodes.iter().enumerate() {
                if other.lane.load(Ordering::Acquire) == lane {
                    let target = (0..self.lanes.lanes.len())
                        .filter(is_live)
                        .nth(i % live_n)
                        .unwrap_or(lane);
                    other.lane.store(target, Ordering::Release);
                }
            }
        }
        self.redirect_lost_queue(lane);
        let s = &self.slots[slot as usize];
        let _ = s
            .phase
            .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire);
        let t = &s.timing[node];
        t.end_ns.store(self.now_ns(), Ordering::Relaxed);
        t.outcome.store(Outcome::Hung as u8, Ordering::Release);
        self.complete(node, slot, seq);
        true
    }
}
