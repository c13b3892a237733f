//! The watchdog: one thread, off the hot path, that watches running stages and frames,
//! plus the scheduler's side of what it reports.
//!
//! ## Contract
//!
//! - **What it detects**: a stage running past its budget (`Event::Overrun`, with the
//!   detection delay, and the stage's bit in the frame's overrun mask); a stage running
//!   longer than `hang_after` (`Event::Hung`); a frame still running at its guard time
//!   (`deadline - publish_margin`), which it marks `ABANDONED` so the scheduler publishes
//!   the frame's fallback before the deadline (`Event::Abandoned`). In lockstep the frame
//!   guard is off (no timing decision without a timing model).
//! - **Detection delay**: it sleeps until the earliest budget expiry, hang time or guard
//!   time it knows of, or one tick ([`tick_ns`]: `watchdog_tick_ns`, by default half the
//!   shortest budget, 100 µs to 5 ms), so a budget overrun is seen within the OS wake-up
//!   latency when the budget is longer than a tick, within a tick otherwise. The measured
//!   delay is in the report (`watchdog_delay`).
//! - **Cost**: it reads atomics of every lane and slot once per wake-up and allocates only
//!   at thread start (two small per-lane arrays). It never runs a stage, never blocks on a
//!   lane and never touches a slot's buffers; events go through the preallocated event
//!   queue (a full queue counts `events_dropped`, it never blocks).
//! - **Write-off** (scheduler side, [`Runtime::write_off_hung`]): a hung stage's lane is
//!   marked lost, its stages move to live lanes, its turn is completed on its behalf and
//!   the loss is counted; a lost critical stage is reported to the ladder.
//! - **Hang threshold**: `hang_after_ns`, by default four deadlines; in lockstep, by default
//!   [`super::LOCKSTEP_HANG_AFTER_NS`] (lockstep takes no timing decision from the wall
//!   clock, so only a stage stuck far beyond any slow machine is written off there).
//! - A panic of the watchdog itself is recorded and poisons the runtime (see
//!   [`crate::containment`]).

use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::config::{ReleaseMode, RuntimeConfig, RuntimeError};
use super::Runtime;
use crate::exec::{unpack_running, Event, Shared, ABANDONED, NONE, RUNNING};
use crate::plan::StagePlan;
use crate::rt::{self, RtRequest, ThreadGrant};
use crate::stage::Criticality;

/// The watchdog's settings (fixed at start-up).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch {
    /// Report stages past their budget.
    pub check_budgets: bool,
    /// Abandon frames at their guard time (off in lockstep).
    pub guard_frames: bool,
    /// A stage running this long is hung, ns.
    pub hang_after_ns: u64,
    /// Longest sleep, ns.
    pub tick_ns: u64,
}

impl Watch {
    /// The settings for `cfg` and the planned `stages`.
    pub(crate) fn new(cfg: &RuntimeConfig, stages: &[StagePlan]) -> Watch {
        Watch {
            check_budgets: true,
            guard_frames: cfg.release != ReleaseMode::Lockstep,
            hang_after_ns: match (cfg.hang_after_ns, cfg.release) {
                (0, ReleaseMode::Lockstep) => super::LOCKSTEP_HANG_AFTER_NS,
                (0, _) => cfg.deadline_len_ns().saturating_mul(4),
                (ns, _) => ns,
            },
            tick_ns: tick_ns(cfg, stages),
        }
    }
}

/// The watchdog's longest sleep (see `RuntimeConfig::watchdog_tick_ns`).
pub(crate) fn tick_ns(cfg: &RuntimeConfig, stages: &[StagePlan]) -> u64 {
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

/// Starts the watchdog thread, one real-time priority above the scheduler (two above the
/// lanes), on core `core` when pinning (it shares the last lane's core: it must preempt
/// it). It sends what the OS granted on `grants` once started.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    rt_request: &RtRequest,
    core: usize,
    grants: Sender<ThreadGrant>,
) -> Result<JoinHandle<()>, RuntimeError> {
    let mut req = rt_request.clone();
    req.fifo_priority = req.fifo_priority.map(|p| (p + 2).min(99));
    // The per-lane flags are allocated here, on the starting thread: allocated by the
    // watchdog itself they could land after the runtime had started (a loaded machine starts
    // the thread late), inside a zero-allocation window (`runtime_zero_alloc` caught two
    // 16-byte allocations by "redline-watchdog" that way).
    let n_lanes = shared.lanes.lanes.len();
    let flags = (vec![NONE; n_lanes], vec![NONE; n_lanes]);
    std::thread::Builder::new()
        .name("redline-watchdog".into())
        .spawn(move || {
            let mut grant = rt::apply_to_current_thread("watchdog", core, &req);
            grant.thread = "watchdog".into();
            rt::set_timer_slack_1ns();
            let _ = grants.send(grant);
            // A runtime without its watchdog cannot keep deadlines: a panic here poisons
            // it, and `run` re-raises it (see `containment`).
            let returned =
                crate::containment::contain_thread(&shared.escaped, "the watchdog thread", || {
                    watchdog_main(&shared, flags)
                });
            if !returned {
                shared.wake_scheduler();
            }
        })
        .map_err(|error| RuntimeError::Thread {
            name: "redline-watchdog".into(),
            error,
        })
}

/// The body of the watchdog thread (see the module docs for the detection delay).
/// `flags`: the start time each lane's budget overrun and hang were last flagged for, one
/// entry per lane, allocated by [`spawn`].
fn watchdog_main(shared: &Shared, flags: (Vec<u64>, Vec<u64>)) {
    let (mut budget_flagged, mut hang_flagged) = flags;
    let w = shared.watch;
    while !shared.shutdown.load(Ordering::Acquire) {
        let now = shared.now_ns();
        let mut wake_at = now + w.tick_ns;
        for (i, l) in shared.lanes.lanes.iter().enumerate() {
            if l.lost.load(Ordering::Acquire) {
                continue;
            }
            let running = l.running.load(Ordering::Acquire);
            if running == NONE {
                continue;
            }
            let start = l.started_ns.load(Ordering::Acquire);
            if l.running.load(Ordering::Acquire) != running {
                continue; // changed under us; look again next round
            }
            let (node, seq, slot) = unpack_running(running);
            let budget = shared.statics[node as usize].budget_ns;
            if w.check_budgets && budget > 0 && budget_flagged[i] != start {
                let expiry = start + budget;
                if now >= expiry {
                    budget_flagged[i] = start;
                    shared.slots[slot as usize]
                        .overrun_mask
                        .fetch_or(1u64 << node, Ordering::AcqRel);
                    // Wakes the scheduler: an event posted behind this one while it was
                    // being pushed (a lane's FrameDone) is seen only after this push (see
                    // `Shared::post`). Overruns are rare; the wake costs one short step.
                    shared.post(
                        Event::Overrun {
                            delay_ns: now - expiry,
                        },
                        true,
                    );
                } else {
                    wake_at = wake_at.min(expiry);
                }
            }
            if hang_flagged[i] != start {
                let hang_at = start + w.hang_after_ns;
                if now >= hang_at {
                    hang_flagged[i] = start;
                    shared.post(
                        Event::Hung {
                            lane: i as u8,
                            node,
                            slot,
                            seq,
                        },
                        true,
                    );
                } else {
                    wake_at = wake_at.min(hang_at);
                }
            }
        }
        if w.guard_frames {
            for s in shared.slots.iter() {
                if s.phase.load(Ordering::Acquire) != RUNNING {
                    continue;
                }
                let guard = s.guard_ns.load(Ordering::Acquire);
                if now >= guard {
                    if s.phase
                        .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        shared.post(Event::Abandoned, true);
                    }
                } else {
                    wake_at = wake_at.min(guard);
                }
            }
        }
        let now = shared.now_ns();
        if wake_at > now {
            std::thread::park_timeout(std::time::Duration::from_nanos(wake_at - now));
        }
    }
}

impl Runtime {
    /// Scheduler side of `Event::Hung`: writes the stage off (unless it returned in the
    /// meantime) and records the loss.
    pub(super) fn write_off_hung(&mut self, lane: u8, node: u8, slot: u8, seq: u64) {
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
}
