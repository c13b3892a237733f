//! The runtime: lanes, watchdog and the scheduler loop that releases, publishes and retires
//! frames.
//!
//! ## Contract
//!
//! - [`Runtime::new`] does all allocation: stage `init`, the arena (N frame slots), the held
//!   output region, lane and watchdog threads (pinned / SCHED_FIFO / `mlockall` when asked,
//!   automatic pinning resolved against the cores this process may use, with what the OS
//!   granted or refused recorded in [`Runtime::os_grants`]; a refusal is never an error,
//!   see [`crate::rt`]), histograms, span ring. The calling thread becomes the scheduler
//!   and keeps the `SCHED_FIFO` priority it was given after the runtime is dropped.
//! - [`Runtime::run`] drives `frames` frames and returns when each has been published and
//!   every slot retired. The scheduler loop, the lanes and metrics recording allocate
//!   nothing (tests count it), take no lock and do no I/O.
//! - **Release** is time-triggered at absolute times `t0 + k * period` in
//!   [`ReleaseMode::RealTime`] (never `sleep(period)`), or data-triggered as soon as a slot
//!   is free in [`ReleaseMode::AsFastAsPossible`] and [`ReleaseMode::Lockstep`]. In lockstep
//!   the frame clock is virtual (`release = k * period`) and the watchdog's frame guard is
//!   off; deadline misses and overruns then come only from a [`TimingModel`] (measured
//!   times are reported but never decide anything), which makes the mode
//!   sequence reproducible: the ladder sees frame `k`'s outcome exactly before frame
//!   `k + slots` is released, whatever the real timing.
//! - **Deadlines**: each frame's guard time is `deadline - publish_margin`. A frame not
//!   finished by then is abandoned by the watchdog and publishes its fallback (see
//!   [`crate::publish`]) before its deadline. A frame published after its deadline anyway
//!   (the scheduler itself was late) is counted in `late_publishes`: misses are never silent.
//! - **Watchdog detection delay**: within the OS wake-up latency when the budget is longer
//!   than a watchdog tick, within a tick otherwise (see `watchdog`).
//! - **Panics** (see [`crate::containment`]): a stage that panics is contained (its
//!   fallback stands in from then on; the report has the message). A panic in the
//!   publisher, a timing model or the scheduling step poisons the runtime: `run` returns
//!   by re-raising it on the caller's thread after the scheduling token and the run are
//!   released (drop guards), never by hanging; later `run` calls panic at once. Lane and
//!   watchdog threads record a panic that escapes them the same way, and
//!   [`Runtime::shutdown`] (or, failing that, `Drop`, on stderr) reports any thread that
//!   ended in a panic: none is silently discarded.
//!
//! ## Where things are
//!
//! - `config`: [`RuntimeConfig`], [`ReleaseMode`], [`TimingModel`], [`RuntimeError`].
//! - `clock`: the monotonic real clock and the frame clock (absolute or virtual releases).
//! - `release`: time-triggered and data-triggered frame release, dropping frames.
//! - `publishing`: in-order publish, the held outputs, fallback publish, modeled timing.
//! - `retirement`: reading a published slot out into the metrics and freeing it.
//! - `watchdog`: the watchdog thread and the scheduler's handling of hung stages.
//! - this file: the [`Runtime`] itself: start-up, `run`, the scheduling step, reports, drop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::arena::Arena;
use crate::containment::contain_thread;
use crate::exec::{Event, NodeStatic, Shared, DONE, RUNNING};
use crate::metrics::{LatencyHistogram, SpanRing};
use crate::modes::{FrameOutcome, Ladder};
use crate::plan::{Plan, StagePlan};
use crate::publish::Publisher;
use crate::report::{OverrunRecord, Report, StageCounters, ThreadPanic};
use crate::rt::{self, OsGrants};
use crate::stage::PortView;

pub(crate) mod clock;
mod config;
mod publishing;
mod release;
mod retirement;
pub(crate) mod watchdog;

use clock::FrameClock;
pub use config::{ReleaseMode, RuntimeConfig, RuntimeError, TimingModel, LOCKSTEP_HANG_AFTER_NS};
use watchdog::Watch;

/// A frame in the publish queue, in release order.
#[derive(Clone, Copy, Debug)]
enum Entry {
    InSlot {
        slot: u8,
    },
    Dropped {
        frame: u64,
        release_ns: u64,
        deadline_ns: u64,
        wall_release_ns: u64,
    },
}

const OUTCOME_RING: usize = 64;
const OVERRUN_LOG: usize = 4096;

/// The running system. See the module docs.
pub struct Runtime {
    shared: Arc<Shared>,
    stages: Vec<StagePlan>,
    cfg: RuntimeConfig,
    ladder: Ladder,
    timing: Option<Box<dyn TimingModel>>,
    lane_threads: Vec<Option<JoinHandle<()>>>,
    watchdog: Option<JoinHandle<()>>,
    os: OsGrants,
    // Publishing.
    held: Arena,
    held_views: Vec<PortView>,
    slot_views: Vec<PortView>,
    published_names: Vec<String>,
    held_from: Option<u64>,
    queue: heapless::Deque<Entry, 64>,
    published: Vec<bool>,
    // Frame counters.
    next_frame: u64,
    next_seq: u64,
    /// When frames are released (real, virtual or data-triggered).
    frame_clock: FrameClock,
    /// Last frame (exclusive) of the current `run`.
    target: u64,
    /// The current `run`'s publisher (lifetime erased; see `run`).
    publisher: Option<*mut (dyn Publisher + Send + 'static)>,
    // Modeled timing.
    vstage_free: Vec<u64>,
    vfinish: Vec<u64>,
    // Ladder feeding.
    outcomes: [FrameOutcome; OUTCOME_RING],
    published_through: u64,
    fed_through: u64,
    critical_lost_pending: bool,
    /// Critical stages whose panic the ladder has been told of (bit per node): in real
    /// time a frame can be published on the deadline guard before its panicking stage
    /// returns, so the loss is noticed from the node's state, once.
    critical_poison_seen: u64,
    // Metrics.
    e2e: LatencyHistogram,
    exec_hist: Vec<LatencyHistogram>,
    queue_hist: Vec<LatencyHistogram>,
    watchdog_delay: LatencyHistogram,
    spans: SpanRing,
    counters: Vec<StageCounters>,
    overruns: Vec<OverrunRecord>,
    overruns_dropped: u64,
    frames_released: u64,
    frames_published: u64,
    frames_complete: u64,
    frames_degraded: u64,
    deadline_misses: u64,
    misses_by_reason: [u64; 4],
    late_publishes: u64,
    lost_stages: Vec<(usize, u64)>,
    returned_stages: u64,
    /// Threads that ended in a panic, found when they were joined.
    thread_panics: Vec<ThreadPanic>,
}

// SAFETY: every field is `Send` except `publisher`, a raw pointer that is `Some` only while
// `run` executes (it borrows the runtime mutably, so the runtime cannot be moved to another
// thread meanwhile) and that points to a `Publisher + Send`. Lanes touch the runtime only
// through `Shared::core`, under the scheduling token, during `run`.
unsafe impl Send for Runtime {}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("stages", &self.stages.len())
            .field("next_frame", &self.next_frame)
            .finish()
    }
}

impl Runtime {
    /// Starts the runtime: initialises stages, allocates everything, starts threads.
    pub fn new(mut plan: Plan, cfg: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        if cfg.period_ns == 0 {
            return Err(RuntimeError::Config("period_ns must be > 0".into()));
        }
        let deadline = cfg.deadline_len_ns();
        if cfg.publish_margin_ns >= deadline {
            return Err(RuntimeError::Config(format!(
                "publish_margin_ns ({}) must be smaller than the deadline ({deadline} ns)",
                cfg.publish_margin_ns
            )));
        }
        let ladder = Ladder::new(cfg.ladder.clone(), &plan)?;
        let mut objects = Vec::with_capacity(plan.stages.len());
        for o in plan.objects.iter_mut() {
            objects.push(o.take().ok_or(RuntimeError::PlanConsumed)?);
        }
        for (i, (stage, _)) in objects.iter_mut().enumerate() {
            stage.init().map_err(|error| RuntimeError::Init {
                stage: plan.stages[i].name.clone(),
                error,
            })?;
        }
        let lanes = plan.config.lanes;
        let n = plan.stages.len();

        let mut os = OsGrants::default();
        // Automatic pinning becomes concrete cores here, from this process's allowed cores
        // (or a reason why nothing is pinned, reported on every lane and the watchdog).
        let (rt_req, pin_refusal) =
            rt::resolve_pinning(&cfg.rt, lanes, rt::allowed_cores().as_deref());
        if cfg.rt.lock_memory {
            os.memory_lock = rt::lock_all_memory();
        }
        os.rt_throttling = rt::read_rt_throttling();
        let arena = Arena::new(
            plan.layout.peak_bytes,
            plan.config.frame_slots,
            cfg.rt.lock_memory,
        )?;

        // Held outputs: published buffers packed at 64-byte offsets.
        let mut held_views = Vec::new();
        let mut slot_views = Vec::new();
        let mut published_names = Vec::new();
        let mut off = 0usize;
        for &b in &plan.published {
            let bp = &plan.buffers[b];
            slot_views.push(PortView {
                offset: bp.offset,
                len: bp.len,
                elem: bp.elem_type,
            });
            held_views.push(PortView {
                offset: off,
                len: bp.len,
                elem: bp.elem_type,
            });
            published_names.push(bp.name.clone());
            off += bp.bytes.div_ceil(64) * 64;
        }
        let held = Arena::new(off, 1, cfg.rt.lock_memory)?;

        let statics: Vec<NodeStatic> = plan
            .stages
            .iter()
            .map(|s| NodeStatic {
                budget_ns: s.budget_ns,
                successors: s.successors.iter().map(|&x| x as u8).collect(),
                n_preds: s.predecessors.len() as u32,
                inputs: s.inputs.clone().into_boxed_slice(),
                outputs: s.outputs.clone().into_boxed_slice(),
                plan_lane: s.lane,
            })
            .collect();
        let watch = Watch::new(&cfg, &plan.stages);
        let shared = Arc::new(Shared::new(
            statics,
            objects,
            arena,
            lanes,
            watch,
            cfg.lane_spin_ns,
        ));
        shared.scheduler.store(
            Box::into_raw(Box::new(std::thread::current())),
            Ordering::Release,
        );

        let mut rt_ = Runtime {
            shared: shared.clone(),
            stages: plan.stages.clone(),
            cfg: cfg.clone(),
            ladder,
            timing: None,
            lane_threads: Vec::new(),
            watchdog: None,
            os,
            held,
            held_views,
            slot_views,
            published_names,
            held_from: None,
            queue: heapless::Deque::new(),
            published: vec![false; plan.config.frame_slots],
            next_frame: 0,
            next_seq: 0,
            frame_clock: FrameClock::new(cfg.release, cfg.period_ns),
            target: 0,
            publisher: None,
            vstage_free: vec![0; n],
            vfinish: vec![0; n],
            outcomes: [FrameOutcome::default(); OUTCOME_RING],
            published_through: 0,
            fed_through: 0,
            critical_lost_pending: false,
            critical_poison_seen: 0,
            e2e: LatencyHistogram::new(),
            exec_hist: (0..n).map(|_| LatencyHistogram::new()).collect(),
            queue_hist: (0..n).map(|_| LatencyHistogram::new()).collect(),
            watchdog_delay: LatencyHistogram::new(),
            spans: SpanRing::new(cfg.span_capacity),
            counters: vec![StageCounters::default(); n],
            overruns: Vec::with_capacity(OVERRUN_LOG),
            overruns_dropped: 0,
            frames_released: 0,
            frames_published: 0,
            frames_complete: 0,
            frames_degraded: 0,
            deadline_misses: 0,
            misses_by_reason: [0; 4],
            late_publishes: 0,
            lost_stages: Vec::with_capacity(64),
            returned_stages: 0,
            thread_panics: Vec::new(),
        };

        // Threads: lanes first, then the watchdog (one priority above the lanes).
        let (tx, rx) = std::sync::mpsc::channel::<rt::ThreadGrant>();
        for lane in 0..lanes {
            let sh = shared.clone();
            let req = rt_req.clone();
            let tx = tx.clone();
            let name = format!("redline-lane-{lane}");
            let tname = name.clone();
            let mut builder = std::thread::Builder::new().name(name.clone());
            if cfg.lane_stack_bytes > 0 {
                builder = builder.stack_size(cfg.lane_stack_bytes);
            }
            let h = builder
                .spawn(move || {
                    // Stage panics never get here (the stage boundary catches them); a
                    // panic of the lane's own logic poisons the runtime (see containment).
                    let place = format!("lane {lane}, outside any stage");
                    let returned = contain_thread(&sh.escaped, &place, || {
                        let grant = rt::apply_to_current_thread(&tname, lane, &req);
                        rt::set_timer_slack_1ns();
                        sh.lanes.lanes[lane].thread.store(
                            Box::into_raw(Box::new(std::thread::current())),
                            Ordering::Release,
                        );
                        let _ = tx.send(grant);
                        crate::lanes::lane_main(&sh, lane);
                    });
                    if !returned {
                        sh.wake_scheduler(); // `run` re-raises it
                    }
                })
                .map_err(|error| RuntimeError::Thread { name, error })?;
            rt_.lane_threads.push(Some(h));
        }
        // When pinning, the watchdog takes core `pin_cores[lanes % len]`: a core of its own
        // when more cores than lanes are listed, else lane 0's, which it preempts (it runs
        // two priorities above the lanes).
        rt_.watchdog = Some(watchdog::spawn(shared.clone(), &rt_req, lanes, tx.clone())?);
        drop(tx);
        // Each thread sends its grant once and then keeps its sender for ever: count them.
        // This thread is not real-time yet, on purpose: `recv` spins and yields while a
        // sender it is waiting for is between claiming its place in the channel and writing
        // it, and a lane preempted there by a SCHED_FIFO thread of higher priority on its
        // core would never run again (yielding does not let a lower priority run). That
        // hung about 1 real-time replay in 30 under qemu (2026-11-27), where the window is
        // wide; natively it is a few instructions.
        let mut grants: Vec<rt::ThreadGrant> = (0..=lanes).filter_map(|_| rx.recv().ok()).collect();
        // The calling thread becomes the scheduler: one priority above the lanes, so it can
        // publish a fallback while a lane runs late; the watchdog is above it. From here on
        // it never waits for another thread by spinning (see `crate::queue`).
        let mut sched_req = rt_req.clone();
        sched_req.pin_cores = None;
        sched_req.auto_pin = false;
        sched_req.fifo_priority = sched_req.fifo_priority.map(|p| (p + 1).min(98));
        let mut sched_grant = rt::apply_to_current_thread("scheduler", 0, &sched_req);
        sched_grant.thread = "scheduler".into();
        if let Some(reason) = pin_refusal {
            for g in grants.iter_mut() {
                g.pinning = rt::Grant::Refused {
                    reason: reason.clone(),
                };
            }
        }
        grants.push(sched_grant);
        grants.sort_by(|a, b| a.thread.cmp(&b.thread));
        rt_.os.threads = grants;
        rt::set_timer_slack_1ns();
        Ok(rt_)
    }

    /// Uses modeled stage durations for budgets, deadlines and the ladder (lockstep replay).
    pub fn set_timing_model(&mut self, model: Box<dyn TimingModel>) {
        self.timing = Some(model);
    }

    /// What the OS granted (pinning, priority, memory lock).
    pub fn os_grants(&self) -> &OsGrants {
        &self.os
    }

    /// The stages as planned.
    pub fn stages(&self) -> &[StagePlan] {
        &self.stages
    }

    /// Current mode index.
    pub fn mode(&self) -> usize {
        self.ladder.mode()
    }

    /// The ladder (modes, transitions, residency).
    pub fn ladder(&self) -> &Ladder {
        &self.ladder
    }

    /// The span ring, for traces.
    pub fn spans(&self) -> &SpanRing {
        &self.spans
    }

    /// Frames published so far.
    pub fn frames_published(&self) -> u64 {
        self.frames_published
    }

    /// Runs `frames` more frames, publishing each to `publisher` in order.
    /// Frame numbers continue from the previous call.
    ///
    /// Publishing happens on whichever runtime thread holds the scheduling token: usually
    /// the lane that finished the frame (so a frame is published without waking another
    /// thread), otherwise this thread. Calls never overlap and always come in frame order.
    ///
    /// # Panics
    ///
    /// A stage that panics is contained (see [`crate::containment`]). A panic of the
    /// `publisher` (or of a [`TimingModel`], or of the runtime's own logic on any of its
    /// threads) is re-raised here, with its original payload, once the run is detached and
    /// the scheduling token released; it poisons the runtime, and every later call panics
    /// at once naming the first panic.
    pub fn run(&mut self, frames: u64, publisher: &mut (dyn Publisher + Send)) {
        if let Some(what) = self.shared.escaped.describe() {
            panic!(
                "this redline runtime is poisoned by an earlier panic outside any stage \
                 ({what}); build a new runtime"
            );
        }
        self.claim_scheduler_thread();
        self.target = self.next_frame + frames;
        self.frame_clock
            .start_run(self.shared.now_ns(), self.next_frame);
        let publisher: *mut (dyn Publisher + Send + '_) = publisher;
        // SAFETY: only the lifetime is erased, for the duration of this call: the pointer
        // is used by `step` while `core` is published below, and this function clears
        // `core` (under the token, so no step is running) before it returns.
        let erased: *mut (dyn Publisher + Send + 'static) =
            unsafe { std::mem::transmute(publisher) };
        self.publisher = Some(erased);
        let shared = self.shared.clone();
        shared.run_finished.store(false, Ordering::SeqCst);
        shared.next_due.store(0, Ordering::SeqCst);
        let me: *mut Runtime = self;
        // From here until `core` is cleared, the runtime is used only through `me`, by
        // whichever thread holds the token.
        shared.core.store(me, Ordering::SeqCst);
        // Detaches the run (waits for the token, clears `core` and the publisher) however
        // this function is left, unwinding included.
        let attached = RunGuard {
            shared: &shared,
            runtime: me,
        };
        loop {
            shared.try_step();
            if shared.run_finished.load(Ordering::SeqCst) || shared.escaped.is_poisoned() {
                break;
            }
            let now = shared.now_ns();
            let due = shared.next_due.load(Ordering::SeqCst);
            // Wake for the next release; lanes publish what they finish, and the watchdog
            // and the last publish unpark us. The 50 ms cap only bounds a lost wake-up.
            let wait = if due > now {
                (due - now).min(50_000_000)
            } else {
                50_000_000
            };
            std::thread::park_timeout(std::time::Duration::from_nanos(wait));
        }
        drop(attached);
        if shared.escaped.is_poisoned() {
            match shared.escaped.take_payload() {
                Some(payload) => std::panic::resume_unwind(payload),
                None => panic!(
                    "redline runtime poisoned: {}",
                    shared.escaped.describe().unwrap_or_default()
                ),
            }
        }
    }

    /// One scheduling step, run by the token holder: events, in-order publishing,
    /// retiring, releasing. Sets `run_finished` (and wakes the scheduler thread) when the
    /// run's frames are all published and every slot is idle.
    pub(crate) fn step(&mut self) {
        loop {
            self.drain_events();
            self.publish_ready();
            self.retire_ready();
            let released_before = self.frames_released;
            let due_at = self.release_due();
            self.shared.next_due.store(due_at, Ordering::SeqCst);
            if self.next_frame >= self.target && self.queue.is_empty() && self.all_slots_idle() {
                self.shared.run_finished.store(true, Ordering::SeqCst);
                self.shared.wake_scheduler();
                return;
            }
            if self.frames_released == released_before {
                return;
            }
            // Something was released or dropped: publish a dropped frame, or pick up a
            // frame that already finished, before giving the token back.
        }
    }

    fn claim_scheduler_thread(&mut self) {
        let p = self.shared.scheduler.load(Ordering::Acquire);
        // SAFETY: `p` came from Box::into_raw in `new` or here, and is freed only here or in
        // Drop, both on the owning `&mut self`; no frame is in flight between runs, so no lane
        // dereferences it now.
        let same = !p.is_null() && unsafe { (*p).id() } == std::thread::current().id();
        if !same {
            let new = Box::into_raw(Box::new(std::thread::current()));
            let old = self.shared.scheduler.swap(new, Ordering::AcqRel);
            if !old.is_null() {
                // SAFETY: see above; `old` is no longer reachable from the shared state.
                drop(unsafe { Box::from_raw(old) });
            }
        }
    }

    /// Handles the lanes' and the watchdog's events.
    fn drain_events(&mut self) {
        while let Some(e) = self.shared.events.pop() {
            match e {
                Event::FrameDone { slot } => {
                    let s = &self.shared.slots[slot as usize];
                    let _ = s.phase.compare_exchange(
                        RUNNING,
                        DONE,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                }
                Event::Abandoned => {}
                Event::Overrun { delay_ns, .. } => {
                    self.watchdog_delay.record(delay_ns);
                }
                Event::Hung {
                    lane,
                    node,
                    slot,
                    seq,
                } => self.write_off_hung(lane, node, slot, seq),
                Event::Returned => {
                    self.returned_stages += 1;
                }
            }
        }
    }
    /// Forgets every histogram, counter, overrun record and span (e.g. after warm-up
    /// frames). The mode, the held outputs and frame numbering are kept.
    pub fn reset_metrics(&mut self) {
        self.e2e.reset();
        self.watchdog_delay.reset();
        for h in self.exec_hist.iter_mut().chain(self.queue_hist.iter_mut()) {
            h.reset();
        }
        self.spans.clear();
        self.counters
            .iter_mut()
            .for_each(|c| *c = StageCounters::default());
        self.overruns.clear();
        self.overruns_dropped = 0;
        self.frames_released = 0;
        self.frames_published = 0;
        self.frames_complete = 0;
        self.frames_degraded = 0;
        self.deadline_misses = 0;
        self.misses_by_reason = [0; 4];
        self.late_publishes = 0;
    }

    /// Builds the report (allocates; call after `run`).
    pub fn report(&self) -> Report {
        Report::build(self.report_inputs())
    }

    pub(crate) fn report_inputs(&self) -> crate::report::ReportInputs<'_> {
        crate::report::ReportInputs {
            stages: &self.stages,
            cfg: &self.cfg,
            lanes: self.shared.lanes.lanes.len(),
            frame_slots: self.shared.slots.len(),
            arena_bytes: self.shared.arena.total_bytes(),
            arena_lock: self.shared.arena.memory_lock().clone(),
            ladder: &self.ladder,
            e2e: &self.e2e,
            exec: &self.exec_hist,
            queue: &self.queue_hist,
            watchdog_delay: &self.watchdog_delay,
            counters: &self.counters,
            overruns: &self.overruns,
            overruns_dropped: self.overruns_dropped,
            frames_released: self.frames_released,
            frames_published: self.frames_published,
            frames_complete: self.frames_complete,
            frames_degraded: self.frames_degraded,
            deadline_misses: self.deadline_misses,
            misses_by_reason: self.misses_by_reason,
            late_publishes: self.late_publishes,
            lost_stages: &self.lost_stages,
            returned_stages: self.returned_stages,
            nodes: &self.shared.nodes,
            runtime_panic: self.shared.escaped.describe(),
            live_lanes: self.shared.lanes.live_count(),
            events_dropped: self.shared.events_dropped.load(Ordering::Relaxed),
            spans_overwritten: self.spans.overwritten(),
            os: &self.os,
            modeled: self.timing.is_some(),
        }
    }

    /// End-to-end latency histogram (release to publish).
    pub fn end_to_end(&self) -> &LatencyHistogram {
        &self.e2e
    }

    /// Execution-time histogram of plan stage `i`.
    pub fn stage_execution(&self, i: usize) -> Option<&LatencyHistogram> {
        self.exec_hist.get(i)
    }

    /// Watchdog detection delay histogram (budget expiry to overrun recorded).
    pub fn watchdog_delay(&self) -> &LatencyHistogram {
        &self.watchdog_delay
    }

    /// Writes the span ring as Chrome trace-event JSON (Perfetto opens it).
    pub fn write_chrome_trace<W: std::io::Write>(&self, w: W) -> std::io::Result<()> {
        let names: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
        crate::metrics::write_chrome_trace(w, &self.spans, &names)
    }
}

/// Detaches a run from the shared state when dropped (see `Runtime::run`).
struct RunGuard<'a> {
    shared: &'a Shared,
    runtime: *mut Runtime,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        // Waits for the token: no step is running after this, and none can start.
        self.shared.detach_core();
        // SAFETY: `runtime` is the `&mut self` of the `run` call this guard lives in; with
        // `core` cleared no other thread uses it, so this is the only access.
        unsafe { (*self.runtime).publisher = None };
    }
}

impl Runtime {
    /// Stops and joins every thread (once; later calls find nothing to join). Threads
    /// that ended in a panic are kept in `thread_panics`.
    fn stop_threads(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for i in 0..self.shared.lanes.lanes.len() {
            let l = &self.shared.lanes.lanes[i];
            l.sleeping.store(true, Ordering::SeqCst);
            self.shared.lanes.wake(i);
        }
        if let Some(w) = self.watchdog.take() {
            w.thread().unpark();
            if let Err(payload) = w.join() {
                self.thread_panics.push(ThreadPanic {
                    thread: "watchdog".into(),
                    message: crate::containment::message(&*payload),
                });
            }
        }
        for (i, h) in self.lane_threads.iter_mut().enumerate() {
            // A lost lane may be stuck for ever inside a hung stage: detach it. Its thread
            // holds an Arc of the shared state, so nothing it touches is freed under it.
            if self.shared.lanes.lanes[i].lost.load(Ordering::Acquire) {
                continue;
            }
            if let Some(h) = h.take() {
                if let Err(payload) = h.join() {
                    self.thread_panics.push(ThreadPanic {
                        thread: format!("lane {i}"),
                        message: crate::containment::message(&*payload),
                    });
                }
            }
        }
    }

    /// Stops the runtime: stops and joins its threads (a lost lane still stuck in a hung
    /// stage is detached, as in `Drop`) and says whether anything panicked outside a
    /// stage: a lane or watchdog thread, the publisher or the scheduling step. Stage
    /// panics are contained and in the report; they are not errors here.
    pub fn shutdown(mut self) -> Result<(), RuntimeError> {
        self.stop_threads();
        if let Some(payload) = self.shared.escaped.take_payload() {
            crate::containment::drop_payload(payload); // reported here instead
        }
        if let Some((place, message)) = self.shared.escaped.first() {
            return Err(RuntimeError::Panicked {
                place: place.clone(),
                message: message.clone(),
            });
        }
        if let Some(t) = self.thread_panics.drain(..).next() {
            return Err(RuntimeError::Panicked {
                place: t.thread,
                message: t.message,
            });
        }
        Ok(())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_threads();
        // Never silent: `run` re-raises an escaped panic and `shutdown` returns these; a
        // runtime just dropped says here what neither reported.
        if let Some(payload) = self.shared.escaped.take_payload() {
            crate::containment::drop_payload(payload);
            eprintln!(
                "redline: a runtime thread panicked outside any stage: {}",
                self.shared.escaped.describe().unwrap_or_default()
            );
        }
        for t in &self.thread_panics {
            eprintln!(
                "redline: the {} thread ended in a panic: {}",
                t.thread, t.message
            );
        }
        let any_lost = self
            .shared
            .lanes
            .lanes
            .iter()
            .any(|l| l.lost.load(Ordering::Acquire));
        if any_lost {
            // A lost lane may still return later and unpark the scheduler or its peers
            // through these handles: leave them (a few bytes) rather than free them.
            return;
        }
        for l in self.shared.lanes.lanes.iter() {
            let t = l.thread.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !t.is_null() {
                // SAFETY: leaked from a Box by the lane thread at start; every lane has been
                // joined above, so nobody can dereference it any more.
                drop(unsafe { Box::from_raw(t) });
            }
        }
        let p = self
            .shared
            .scheduler
            .swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: leaked from a Box in `new`/`claim_scheduler_thread`; the lanes and
            // the watchdog, the only other users, have been joined.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
