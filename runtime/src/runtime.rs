//! The runtime: lanes, watchdog and the scheduler loop that releases, publishes and retires
//! frames.
//!
//! ## Contract
//!
//! - [`Runtime::new`] does all allocation: stage `init`, the arena (N frame slots), the held
//!   output region, lane and watchdog threads (pinned / SCHED_FIFO / `mlockall` when asked,
//!   with what the OS granted recorded in [`Runtime::os_grants`]), histograms, span ring.
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
//! - **Watchdog detection delay**: the watchdog sleeps until the earliest budget expiry it
//!   knows of, or one tick (`watchdog_tick_ns`, by default half the shortest budget,
//!   100 µs to 5 ms), so a budget overrun is seen within the OS wake-up latency when the
//!   budget is longer than a tick, within a tick otherwise. The measured delay is in the
//!   report (`watchdog_delay`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::arena::{Arena, ArenaError};
use crate::exec::{
    self, Event, NodeStatic, Outcome, Shared, Watch, ABANDONED, DONE, FREE, RUNNING,
};
use crate::metrics::{LatencyHistogram, Span, SpanKind, SpanRing};
use crate::modes::{FrameOutcome, Ladder, LadderConfig, LadderError};
use crate::plan::{Plan, StagePlan};
use crate::publish::{FallbackReason, FrameStatus, Outputs, Published, Publisher};
use crate::report::{OverrunRecord, Report, StageCounters};
use crate::rt::{self, OsGrants, RtRequest};
use crate::stage::{Criticality, FrameInfo, PortView};

/// How frames are released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseMode {
    /// Time-triggered at absolute times, one period apart (vehicle, real-time replay).
    #[default]
    RealTime,
    /// Data-triggered: next frame as soon as a slot is free; real clock.
    AsFastAsPossible,
    /// Data-triggered with a virtual clock advancing one period per frame.
    Lockstep,
}

/// Stage durations from a model or a recorded trace, for reproducible timing decisions.
pub trait TimingModel: Send {
    /// Modeled duration of plan stage `stage` in `frame`; `fallback` when it runs its fallback.
    fn duration_ns(&mut self, stage: usize, frame: u64, fallback: bool) -> u64;
}

impl<F: FnMut(usize, u64, bool) -> u64 + Send> TimingModel for F {
    fn duration_ns(&mut self, stage: usize, frame: u64, fallback: bool) -> u64 {
        self(stage, frame, fallback)
    }
}

/// Runtime settings (plan settings live in [`crate::plan::PlanConfig`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuntimeConfig {
    /// Frame period, ns (30 Hz by default).
    pub period_ns: u64,
    /// Deadline after release, ns; 0 = one period.
    pub deadline_ns: u64,
    /// The fallback is published this long before the deadline, ns.
    pub publish_margin_ns: u64,
    /// How frames are released.
    pub release: ReleaseMode,
    /// A stage running longer than this is declared hung and its lane lost, ns;
    /// 0 = four deadlines.
    pub hang_after_ns: u64,
    /// Longest watchdog sleep, ns; 0 = automatic: half the smallest stage budget (or of
    /// the guard interval when no stage has a budget), between 100 µs and 5 ms. The
    /// watchdog otherwise sleeps exactly until the earliest expiry it knows of, so a
    /// budget longer than the tick is checked on time; every wake-up costs the lanes a
    /// little (a context switch), which is why the tick is not smaller than it must be.
    pub watchdog_tick_ns: u64,
    /// An idle lane spins this long for new work before it parks, ns.
    pub lane_spin_ns: u64,
    /// Spans kept for the trace (oldest overwritten).
    pub span_capacity: usize,
    /// Pinning, SCHED_FIFO, memory locking.
    pub rt: RtRequest,
    /// Degradation ladder.
    pub ladder: LadderConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            period_ns: 33_333_333,
            deadline_ns: 0,
            publish_margin_ns: 1_000_000,
            release: ReleaseMode::RealTime,
            hang_after_ns: 0,
            watchdog_tick_ns: 0,
            lane_spin_ns: 100_000,
            span_capacity: 1 << 16,
            rt: RtRequest::default(),
            ladder: LadderConfig::default(),
        }
    }
}

impl RuntimeConfig {
    /// Deadline length actually used.
    pub fn deadline_len_ns(&self) -> u64 {
        if self.deadline_ns == 0 {
            self.period_ns
        } else {
            self.deadline_ns
        }
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A stage's `init` failed.
    #[error("stage '{stage}' failed to initialise: {error}")]
    Init {
        /// Stage name.
        stage: String,
        /// Its error.
        error: crate::stage::StageError,
    },
    /// The arena could not be allocated.
    #[error("arena: {0}")]
    Arena(#[from] ArenaError),
    /// The ladder does not fit the plan.
    #[error(transparent)]
    Ladder(#[from] LadderError),
    /// A bad setting.
    #[error("invalid runtime configuration: {0}")]
    Config(String),
    /// A thread could not be spawned.
    #[error("could not start thread '{name}': {error}")]
    Thread {
        /// Thread name.
        name: String,
        /// OS error.
        error: std::io::Error,
    },
    /// The plan was already used by another runtime.
    #[error("the plan's stages were already taken by another runtime: build a new plan")]
    PlanConsumed,
}

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
    run_t0_ns: u64,
    run_first_frame: u64,
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
    misses_by_reason: [u64; 3],
    late_publishes: u64,
    lost_stages: Vec<(usize, u64)>,
    returned_stages: u64,
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
        // The calling thread becomes the scheduler: one priority above the lanes, so it can
        // publish a fallback while a lane runs late; the watchdog is above it.
        let mut sched_req = cfg.rt.clone();
        sched_req.pin_cores = None;
        sched_req.fifo_priority = sched_req.fifo_priority.map(|p| (p + 1).min(98));
        let mut sched_grant = rt::apply_to_current_thread("scheduler", 0, &sched_req);
        sched_grant.thread = "scheduler".into();
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
        let watch = Watch {
            check_budgets: true,
            guard_frames: cfg.release != ReleaseMode::Lockstep,
            hang_after_ns: if cfg.hang_after_ns == 0 {
                deadline.saturating_mul(4)
            } else {
                cfg.hang_after_ns
            },
            tick_ns: watchdog_tick(&cfg, &plan.stages),
            lane_spin_ns: cfg.lane_spin_ns,
        };
        let shared = Arc::new(Shared::new(statics, objects, arena, lanes, watch));
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
            run_t0_ns: 0,
            run_first_frame: 0,
            target: 0,
            publisher: None,
            vstage_free: vec![0; n],
            vfinish: vec![0; n],
            outcomes: [FrameOutcome::default(); OUTCOME_RING],
            published_through: 0,
            fed_through: 0,
            critical_lost_pending: false,
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
            misses_by_reason: [0; 3],
            late_publishes: 0,
            lost_stages: Vec::with_capacity(64),
            returned_stages: 0,
        };

        // Threads: lanes first, then the watchdog (one priority above the lanes).
        let (tx, rx) = std::sync::mpsc::channel::<rt::ThreadGrant>();
        for lane in 0..lanes {
            let sh = shared.clone();
            let req = cfg.rt.clone();
            let tx = tx.clone();
            let name = format!("redline-lane-{lane}");
            let tname = name.clone();
            let h = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    let grant = rt::apply_to_current_thread(&tname, lane, &req);
                    set_timer_slack_1ns();
                    sh.lanes.lanes[lane].thread.store(
                        Box::into_raw(Box::new(std::thread::current())),
                        Ordering::Release,
                    );
                    let _ = tx.send(grant);
                    exec::lane_main(&sh, lane);
                })
                .map_err(|error| RuntimeError::Thread { name, error })?;
            rt_.lane_threads.push(Some(h));
        }
        {
            let sh = shared.clone();
            let mut req = cfg.rt.clone();
            req.fifo_priority = req.fifo_priority.map(|p| (p + 2).min(99));
            // The watchdog shares the last lane's core when pinning: it must preempt it.
            let tx = tx.clone();
            let h = std::thread::Builder::new()
                .name("redline-watchdog".into())
                .spawn(move || {
                    let mut grant = rt::apply_to_current_thread("watchdog", lanes, &req);
                    grant.thread = "watchdog".into();
                    set_timer_slack_1ns();
                    let _ = tx.send(grant);
                    exec::watchdog_main(&sh);
                })
                .map_err(|error| RuntimeError::Thread {
                    name: "redline-watchdog".into(),
                    error,
                })?;
            rt_.watchdog = Some(h);
        }
        drop(tx);
        // Each thread sends its grant once and then keeps its sender for ever: count them.
        let mut grants: Vec<rt::ThreadGrant> = (0..=lanes).filter_map(|_| rx.recv().ok()).collect();
        grants.push(sched_grant);
        grants.sort_by(|a, b| a.thread.cmp(&b.thread));
        rt_.os.threads = grants;
        set_timer_slack_1ns();
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
    pub fn run(&mut self, frames: u64, publisher: &mut (dyn Publisher + Send)) {
        self.claim_scheduler_thread();
        self.target = self.next_frame + frames;
        self.run_first_frame = self.next_frame;
        self.run_t0_ns = self.shared.now_ns() + 200_000;
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
        loop {
            shared.try_step();
            if shared.run_finished.load(Ordering::SeqCst) {
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
        shared.detach_core();
        self.publisher = None;
    }

    /// One scheduling step, run by the token holder: events, in-order publishing,
    /// retiring, releasing. Sets `run_finished` (and wakes the scheduler thread) when the
    /// run's frames are all published and every slot is idle.
    pub(crate) fn step(&mut self) {
        let period = self.cfg.period_ns;
        loop {
            self.drain_events();
            self.publish_ready();
            self.retire_ready();
            let mut due_at = 0;
            let released_before = self.frames_released;
            while self.next_frame < self.target {
                let now = self.shared.now_ns();
                match self.cfg.release {
                    ReleaseMode::RealTime => {
                        let due =
                            self.run_t0_ns + (self.next_frame - self.run_first_frame) * period;
                        if now < due {
                            due_at = due;
                            break;
                        }
                        if !self.release_or_drop(due, due, true) {
                            break;
                        }
                    }
                    ReleaseMode::AsFastAsPossible => {
                        if !self.release_or_drop(now, now, false) {
                            break;
                        }
                    }
                    ReleaseMode::Lockstep => {
                        let s = self.published.len() as u64;
                        if self.next_frame >= s && self.published_through + s < self.next_frame + 1
                        {
                            break; // frame k - slots not published yet
                        }
                        let virt = self.next_frame * period;
                        if !self.release_or_drop(virt, now, false) {
                            break;
                        }
                    }
                }
            }
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

    fn all_slots_idle(&self) -> bool {
        self.shared.slots.iter().enumerate().all(|(i, s)| {
            let phase = s.phase.load(Ordering::Acquire);
            phase == FREE
                || (self.published[i]
                    && s.remaining.load(Ordering::Acquire) == 0
                    && s.in_exec.load(Ordering::Acquire) > 0) // quarantined by a hung stage
        })
    }

    /// Releases the next frame into a free slot, or drops it (fallback) when `may_drop`.
    /// Returns false when it did neither (wait for a slot).
    fn release_or_drop(&mut self, release_ns: u64, wall_ns: u64, may_drop: bool) -> bool {
        let frame = self.next_frame;
        let deadline_len = self.cfg.deadline_len_ns();
        let free = self
            .shared
            .slots
            .iter()
            .position(|s| s.phase.load(Ordering::Acquire) == FREE);
        if self.queue.is_full() {
            return false;
        }
        let Some(slot) = free else {
            if !may_drop {
                return false;
            }
            let _ = self.queue.push_back(Entry::Dropped {
                frame,
                release_ns,
                deadline_ns: release_ns + deadline_len,
                wall_release_ns: wall_ns,
            });
            self.next_frame += 1;
            self.frames_released += 1;
            return true;
        };
        // Lockstep: feed the ladder exactly the outcomes of frames up to frame - slots.
        if self.cfg.release == ReleaseMode::Lockstep {
            let upto = (frame + 1).saturating_sub(self.published.len() as u64);
            while self.fed_through < upto {
                let o = self.outcomes[(self.fed_through % OUTCOME_RING as u64) as usize];
                self.ladder.observe(&o);
                self.fed_through += 1;
            }
        }
        let s = &self.shared.slots[slot];
        let seq = self.next_seq;
        let n = self.stages.len();
        s.frame.store(frame, Ordering::Relaxed);
        s.seq.store(seq, Ordering::Relaxed);
        s.mode.store(self.ladder.mode() as u8, Ordering::Relaxed);
        s.skip_mask
            .store(self.ladder.disabled_mask(), Ordering::Relaxed);
        s.overrun_mask.store(0, Ordering::Relaxed);
        s.release_ns.store(release_ns, Ordering::Relaxed);
        s.deadline_ns
            .store(release_ns + deadline_len, Ordering::Relaxed);
        s.wall_release_ns.store(wall_ns, Ordering::Relaxed);
        s.guard_ns.store(
            wall_ns + deadline_len - self.cfg.publish_margin_ns,
            Ordering::Relaxed,
        );
        s.remaining.store(n as u32, Ordering::Relaxed);
        for (i, st) in self.shared.statics.iter().enumerate() {
            s.pending[i].store(st.n_preds, Ordering::Relaxed);
            let t = &s.timing[i];
            t.outcome.store(Outcome::Pending as u8, Ordering::Relaxed);
            t.ready_ns.store(wall_ns, Ordering::Relaxed);
            t.start_ns.store(0, Ordering::Relaxed);
            t.end_ns.store(0, Ordering::Relaxed);
        }
        self.published[slot] = false;
        let _ = self.queue.push_back(Entry::InSlot { slot: slot as u8 });
        s.phase.store(RUNNING, Ordering::Release);
        self.next_seq += 1;
        self.next_frame += 1;
        self.frames_released += 1;
        for (i, st) in self.shared.statics.iter().enumerate() {
            if st.n_preds == 0 {
                self.shared.offer(i, slot as u8, seq);
            }
        }
        true
    }

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
                } => {
                    if self
                        .shared
                        .write_off(lane as usize, node as usize, slot, seq)
                    {
                        self.counters[node as usize].hung += 1;
                        if self.lost_stages.len() < self.lost_stages.capacity() {
                            let frame = self.shared.slots[slot as usize]
                                .frame
                                .load(Ordering::Acquire);
                            self.lost_stages.push((node as usize, frame));
                        }
                        if self.stages[node as usize].criticality == Criticality::Critical {
                            self.critical_lost_pending = true;
                        }
                    }
                }
                Event::Returned => {
                    self.returned_stages += 1;
                }
            }
        }
    }

    fn publish_ready(&mut self) {
        let Some(publisher) = self.publisher else {
            return;
        };
        // SAFETY: set by `run` for its duration; only the token holder (us) uses it.
        let publisher: &mut (dyn Publisher + Send) = unsafe { &mut *publisher };
        while let Some(&entry) = self.queue.front() {
            match entry {
                Entry::Dropped {
                    frame,
                    release_ns,
                    deadline_ns,
                    wall_release_ns,
                } => {
                    let info = FrameInfo {
                        frame,
                        release_ns,
                        deadline_ns,
                        mode: self.ladder.mode() as u8,
                    };
                    self.publish_fallback(
                        publisher,
                        info,
                        FallbackReason::NoFreeSlot,
                        wall_release_ns,
                        0,
                    );
                }
                Entry::InSlot { slot } => {
                    let s = &self.shared.slots[slot as usize];
                    let phase = s.phase.load(Ordering::Acquire);
                    if phase != DONE && phase != ABANDONED {
                        return;
                    }
                    let info = FrameInfo {
                        frame: s.frame.load(Ordering::Relaxed),
                        release_ns: s.release_ns.load(Ordering::Relaxed),
                        deadline_ns: s.deadline_ns.load(Ordering::Relaxed),
                        mode: s.mode.load(Ordering::Relaxed),
                    };
                    let wall_release = s.wall_release_ns.load(Ordering::Relaxed);
                    let overrun_mask = s.overrun_mask.load(Ordering::Acquire);
                    if phase == ABANDONED {
                        let counted = self.counted_mask(overrun_mask);
                        self.publish_fallback(
                            publisher,
                            info,
                            FallbackReason::DeadlineGuard,
                            wall_release,
                            counted,
                        );
                    } else {
                        // Lockstep without a model: no timing-based decision at all (the
                        // ladder must not depend on how fast this machine happened to be).
                        let lockstep = self.cfg.release == ReleaseMode::Lockstep;
                        let (late, slack, overrun) = if self.timing.is_some() {
                            self.modeled_schedule(slot as usize, &info)
                        } else if lockstep {
                            (false, u64::MAX, false)
                        } else {
                            (false, 0, self.measured_overrun(slot as usize))
                        };
                        if late {
                            self.publish_fallback(
                                publisher,
                                info,
                                FallbackReason::ModeledLate,
                                wall_release,
                                u64::from(overrun),
                            );
                        } else {
                            self.publish_normal(
                                publisher,
                                slot as usize,
                                info,
                                wall_release,
                                slack,
                                overrun,
                            );
                        }
                    }
                    self.published[slot as usize] = true;
                }
            }
            let _ = self.queue.pop_front();
        }
    }

    fn counted_mask(&self, mask: u64) -> u64 {
        let mut m = mask;
        let mut counted = 0;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.stages[i].criticality != Criticality::BestEffort {
                counted |= 1 << i;
            }
        }
        counted
    }

    fn measured_overrun(&self, slot: usize) -> bool {
        let s = &self.shared.slots[slot];
        self.stages.iter().enumerate().any(|(i, st)| {
            let t = &s.timing[i];
            st.budget_ns > 0
                && st.criticality != Criticality::BestEffort
                && matches!(t.outcome(), Outcome::Ran | Outcome::Failed)
                && t.end_ns
                    .load(Ordering::Relaxed)
                    .saturating_sub(t.start_ns.load(Ordering::Relaxed))
                    > st.budget_ns
        })
    }

    /// Virtual schedule of a finished frame: (late, slack_ns, counted overrun).
    ///
    /// The modeled machine runs every stage as soon as its inputs are ready and it has
    /// finished the previous frame (the per-stage frame gate), as if each stage had its own
    /// lane: the critical path of modeled durations. It deliberately ignores the real lane
    /// count, so a modeled replay makes the same decisions, hence the same outputs, on any
    /// number of lanes. Durations measured on the target already include its contention.
    fn modeled_schedule(&mut self, slot: usize, info: &FrameInfo) -> (bool, u64, bool) {
        let Some(model) = self.timing.as_mut() else {
            return (false, 0, false);
        };
        let s = &self.shared.slots[slot];
        let mut overrun = false;
        let mut end = info.release_ns;
        let guard = info.deadline_ns.saturating_sub(self.cfg.publish_margin_ns);
        for i in 0..self.stages.len() {
            let st = &self.stages[i];
            let outcome = s.timing[i].outcome();
            let dur = match outcome {
                Outcome::Cancelled | Outcome::Pending => 0,
                Outcome::Ran => model.duration_ns(i, info.frame, false),
                _ => model.duration_ns(i, info.frame, true),
            };
            if outcome == Outcome::Ran
                && st.budget_ns > 0
                && dur > st.budget_ns
                && st.criticality != Criticality::BestEffort
            {
                overrun = true;
            }
            let ready = st
                .predecessors
                .iter()
                .map(|&p| self.vfinish[p])
                .max()
                .unwrap_or(info.release_ns)
                .max(info.release_ns);
            // In-order gate: a stage starts frame k only after it finished frame k - 1.
            let start = ready.max(self.vstage_free[i]);
            if start >= guard {
                // The frame would have been abandoned before this stage started: it is
                // cancelled and takes no time, as in a measured run.
                self.vfinish[i] = start;
                end = end.max(start);
                continue;
            }
            let fin = start + dur;
            self.vfinish[i] = fin;
            self.vstage_free[i] = fin;
            end = end.max(fin);
        }
        let late = end > info.deadline_ns;
        (late, info.deadline_ns.saturating_sub(end), overrun)
    }

    fn outputs_at(&self, base: std::ptr::NonNull<u8>, views_in_slot: bool) -> Outputs<'_> {
        let views = if views_in_slot {
            &self.slot_views
        } else {
            &self.held_views
        };
        // SAFETY: `base` is either a retired-for-writing slot (phase DONE: every stage has
        // finished and nothing writes it until it is released again, which only this
        // thread does) or the held region, written only by this thread between publishes.
        unsafe { Outputs::new(base, views, &self.published_names) }
    }

    fn publish_normal(
        &mut self,
        publisher: &mut dyn Publisher,
        slot: usize,
        info: FrameInfo,
        wall_release: u64,
        modeled_slack: u64,
        overrun: bool,
    ) {
        let s = &self.shared.slots[slot];
        let degraded = (0..self.stages.len()).any(|i| s.timing[i].outcome() != Outcome::Ran);
        let base = self.shared.arena.slot_base(slot).expect("slot in range");
        let held = self.held.slot_base(0);
        // The hold-last copy: published buffers into the held region (explicit memcpy).
        if let Some(held) = held {
            for (sv, hv) in self.slot_views.iter().zip(&self.held_views) {
                // SAFETY: source is inside the DONE slot, destination inside the held
                // region; both ranges were sized from the same buffer plan and do not overlap
                // (different allocations).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        base.as_ptr().add(sv.offset),
                        held.as_ptr().add(hv.offset),
                        sv.len * sv.elem.size,
                    );
                }
            }
        }
        self.held_from = Some(info.frame);
        let status = if degraded {
            FrameStatus::Degraded
        } else {
            FrameStatus::Complete
        };
        let (latency, done) = self.hand_over(publisher, info, status, wall_release, base, true);
        if degraded {
            self.frames_degraded += 1;
        } else {
            self.frames_complete += 1;
        }
        let slack = if self.cfg.release != ReleaseMode::Lockstep {
            (wall_release + self.cfg.deadline_len_ns()).saturating_sub(done)
        } else {
            modeled_slack
        };
        self.finish_publish(info.frame, latency, false, overrun, slack);
    }

    /// Calls the publisher with the outputs at `base` (a slot, or the held region), records
    /// the publish span and a late publish. Returns (latency, time the call returned).
    fn hand_over(
        &mut self,
        publisher: &mut dyn Publisher,
        info: FrameInfo,
        status: FrameStatus,
        wall_release: u64,
        base: std::ptr::NonNull<u8>,
        in_slot: bool,
    ) -> (u64, u64) {
        let now = self.shared.now_ns();
        let latency = now.saturating_sub(wall_release);
        let held_from = if in_slot {
            Some(info.frame)
        } else {
            self.held_from
        };
        let p = Published {
            info,
            status,
            held_from,
            latency_ns: latency,
            outputs: self.outputs_at(base, in_slot),
        };
        publisher.publish(&p);
        let done = self.shared.now_ns();
        self.spans.push(Span {
            stage: u16::MAX,
            frame: info.frame,
            lane: u16::MAX,
            start_ns: now,
            end_ns: done,
            kind: if in_slot {
                SpanKind::Publish
            } else {
                SpanKind::FrameFallback
            },
        });
        if self.cfg.release != ReleaseMode::Lockstep
            && done > wall_release + self.cfg.deadline_len_ns()
        {
            self.late_publishes += 1;
        }
        (latency, done)
    }

    fn publish_fallback(
        &mut self,
        publisher: &mut dyn Publisher,
        info: FrameInfo,
        reason: FallbackReason,
        wall_release: u64,
        overrun_mask: u64,
    ) {
        let base = self
            .held
            .slot_base(0)
            .unwrap_or(std::ptr::NonNull::dangling());
        let status = FrameStatus::Fallback(reason);
        let (latency, _) = self.hand_over(publisher, info, status, wall_release, base, false);
        self.deadline_misses += 1;
        self.misses_by_reason[reason as usize] += 1;
        self.finish_publish(info.frame, latency, true, overrun_mask != 0, 0);
    }

    fn finish_publish(&mut self, frame: u64, latency: u64, miss: bool, overrun: bool, slack: u64) {
        self.e2e.record(latency);
        self.frames_published += 1;
        let o = FrameOutcome {
            frame,
            deadline_miss: miss,
            overrun,
            critical_lost: std::mem::take(&mut self.critical_lost_pending),
            slack_ns: slack,
            deadline_len_ns: self.cfg.deadline_len_ns(),
        };
        self.outcomes[(frame % OUTCOME_RING as u64) as usize] = o;
        self.published_through = frame + 1;
        if self.cfg.release != ReleaseMode::Lockstep {
            self.ladder.observe(&o);
            self.fed_through = frame + 1;
        }
    }

    fn retire_ready(&mut self) {
        for slot in 0..self.shared.slots.len() {
            let s = &self.shared.slots[slot];
            let phase = s.phase.load(Ordering::Acquire);
            if (phase != DONE && phase != ABANDONED)
                || !self.published[slot]
                || s.remaining.load(Ordering::Acquire) != 0
                || s.in_exec.load(Ordering::Acquire) != 0
            {
                continue;
            }
            let frame = s.frame.load(Ordering::Relaxed);
            for i in 0..self.stages.len() {
                let t = &s.timing[i];
                let outcome = t.outcome();
                let start = t.start_ns.load(Ordering::Relaxed);
                let end = t.end_ns.load(Ordering::Relaxed);
                let ready = t.ready_ns.load(Ordering::Relaxed);
                let lane = t.lane.load(Ordering::Relaxed);
                let c = &mut self.counters[i];
                let kind = match outcome {
                    Outcome::Ran => {
                        c.runs += 1;
                        Some(SpanKind::Run)
                    }
                    Outcome::Failed => {
                        c.errors += 1;
                        Some(SpanKind::Fallback)
                    }
                    Outcome::Skipped => {
                        c.skipped += 1;
                        Some(SpanKind::Skipped)
                    }
                    Outcome::LostFallback => {
                        c.lost_fallbacks += 1;
                        Some(SpanKind::Fallback)
                    }
                    Outcome::Cancelled => {
                        c.cancelled += 1;
                        None
                    }
                    Outcome::Hung | Outcome::Pending => None,
                };
                if matches!(outcome, Outcome::Ran | Outcome::Failed) {
                    let exec = end.saturating_sub(start);
                    self.exec_hist[i].record(exec);
                    self.queue_hist[i].record(start.saturating_sub(ready));
                    let budget = self.stages[i].budget_ns;
                    if budget > 0 && exec > budget {
                        c.overruns += 1;
                        c.worst_overrun_ns = c.worst_overrun_ns.max(exec - budget);
                        if self.overruns.len() < OVERRUN_LOG {
                            self.overruns.push(OverrunRecord {
                                stage: i,
                                frame,
                                budget_ns: budget,
                                exec_ns: exec,
                                over_by_ns: exec - budget,
                            });
                        } else {
                            self.overruns_dropped += 1;
                        }
                    }
                }
                if let Some(kind) = kind {
                    self.spans.push(Span {
                        stage: i as u16,
                        frame,
                        lane: u16::from(lane),
                        start_ns: start,
                        end_ns: end,
                        kind,
                    });
                }
            }
            self.published[slot] = false;
            s.phase.store(FREE, Ordering::Release);
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
        self.misses_by_reason = [0; 3];
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

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for i in 0..self.shared.lanes.lanes.len() {
            let l = &self.shared.lanes.lanes[i];
            l.sleeping.store(true, Ordering::SeqCst);
            self.shared.lanes.wake(i);
        }
        if let Some(w) = self.watchdog.take() {
            w.thread().unpark();
            let _ = w.join();
        }
        for (i, h) in self.lane_threads.iter_mut().enumerate() {
            // A lost lane may be stuck for ever inside a hung stage: detach it. Its thread
            // holds an Arc of the shared state, so nothing it touches is freed under it.
            if self.shared.lanes.lanes[i].lost.load(Ordering::Acquire) {
                continue;
            }
            if let Some(h) = h.take() {
                let _ = h.join();
            }
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

/// The watchdog's longest sleep (see `RuntimeConfig::watchdog_tick_ns`).
fn watchdog_tick(cfg: &RuntimeConfig, stages: &[StagePlan]) -> u64 {
    if cfg.watchdog_tick_ns > 0 {
        return cfg.watchdog_tick_ns;
    }
    let guard = cfg.deadline_len_ns().saturating_sub(cfg.publish_margin_ns);
    let shortest = stages
        .iter()
        .map(|s| s.budget_ns)
        .filter(|&b| b > 0)
        .min()
        .unwrap_or(guard)
        .min(guard);
    (shortest / 2).clamp(100_000, 5_000_000)
}

fn set_timer_slack_1ns() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value and touches only the calling
    // thread's timer slack; no pointers are involved.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}
