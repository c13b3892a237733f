//! In-order publishing: every released frame is handed to the publisher exactly once, in
//! frame order, as its outputs (complete or degraded) or its fallback.
//!
//! ## Contract
//!
//! - Frames are published strictly in release order from the scheduler's queue; a frame
//!   still running blocks the ones behind it (they are published as soon as it is).
//! - A finished frame publishes its slot's outputs, after copying the published buffers
//!   into the held region (the one explicit copy: the "hold last good outputs" fallback).
//!   A frame abandoned at its guard time, dropped for want of a slot, or modeled late
//!   publishes the held outputs marked [`FrameStatus::Fallback`] with the reason.
//! - A publish after the deadline is counted (`late_publishes`): misses are never silent.
//!   Every publish records end-to-end latency and a span, and feeds the ladder: directly
//!   in real time, in frame order `slots` frames later in lockstep (see `release`).
//! - What the ladder is fed ([`FrameOutcome`]): whether the frame published its fallback,
//!   the mask of stages (not best-effort) that overran their budget, and the end-to-end
//!   slack (deadline − publish, from the frame's release; 0 for a fallback or a late
//!   publish). Overruns and slack are measured in real time, modeled with a timing model,
//!   and absent (no overruns, `u64::MAX` slack) in lockstep without one.
//! - With a [`TimingModel`](super::TimingModel) the lateness and overruns of a frame come
//!   from the modeled critical path, never from measured times; in lockstep without one
//!   no timing decision is taken at all.
//! - Publishing allocates nothing and takes no lock; it runs only under the scheduling
//!   token, on whichever thread holds it.

use std::sync::atomic::Ordering;

use super::{Entry, Runtime, OUTCOME_RING};
use crate::exec::{Outcome, ABANDONED, DONE};
use crate::metrics::{Span, SpanKind};
use crate::modes::FrameOutcome;
use crate::publish::{FallbackReason, FrameStatus, Outputs, Published, Publisher};
use crate::runtime::ReleaseMode;
use crate::stage::{Criticality, FrameInfo};

impl Runtime {
    /// Publishes, in order, every frame at the head of the queue that can be published now.
    pub(super) fn publish_ready(&mut self) {
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
                    let reason = self.fallback_reason(FallbackReason::NoFreeSlot);
                    self.publish_fallback(publisher, info, reason, wall_release_ns, 0);
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
                    // A critical stage that panicked in this frame is lost for good, as
                    // one that hung (its fallback stands in from now on). In lockstep the
                    // frame's outcome says so deterministically; otherwise see
                    // `note_poisoned_critical` (the frame may be published before the
                    // panicking stage returns).
                    if self.cfg.release == ReleaseMode::Lockstep
                        && self.critical_panicked(slot as usize)
                    {
                        self.critical_lost_pending = true;
                    }
                    if phase == ABANDONED {
                        let counted = self.counted_mask(overrun_mask);
                        let reason = self.fallback_reason(FallbackReason::DeadlineGuard);
                        self.publish_fallback(publisher, info, reason, wall_release, counted);
                    } else {
                        // Lockstep without a model: no timing-based decision at all (the
                        // ladder must not depend on how fast this machine happened to be).
                        let lockstep = self.cfg.release == ReleaseMode::Lockstep;
                        let (late, slack, overruns) = if self.timing.is_some() {
                            self.modeled_schedule(slot as usize, &info)
                        } else if lockstep {
                            (false, u64::MAX, 0)
                        } else {
                            (false, 0, self.measured_overruns(slot as usize))
                        };
                        if late {
                            self.publish_fallback(
                                publisher,
                                info,
                                FallbackReason::ModeledLate,
                                wall_release,
                                overruns,
                            );
                        } else {
                            self.publish_normal(
                                publisher,
                                slot as usize,
                                info,
                                wall_release,
                                slack,
                                overruns,
                            );
                        }
                    }
                    self.published[slot as usize] = true;
                }
            }
            let _ = self.queue.pop_front();
        }
    }

    /// `usual`, or [`FallbackReason::NoLiveLane`] when every lane is lost (then that is
    /// why the frame could not finish or get a slot).
    fn fallback_reason(&self, usual: FallbackReason) -> FallbackReason {
        if self.shared.lanes.live_count() == 0 {
            FallbackReason::NoLiveLane
        } else {
            usual
        }
    }

    /// A critical stage's `run` panicked in the frame in `slot`.
    fn critical_panicked(&self, slot: usize) -> bool {
        let s = &self.shared.slots[slot];
        self.stages.iter().enumerate().any(|(i, st)| {
            st.criticality == Criticality::Critical && s.timing[i].outcome() == Outcome::Panicked
        })
    }

    /// Real time and as fast as possible: a critical stage whose `run` panicked since the
    /// last publication is lost (each node reported once). Read from the node's state, not
    /// the frame's, because the deadline guard may have published the frame the stage
    /// panicked in (e.g. while the panic hook printed a backtrace) before the stage returned.
    fn note_poisoned_critical(&mut self) {
        for (i, st) in self.stages.iter().enumerate() {
            let bit = 1u64 << i;
            if st.criticality == Criticality::Critical
                && self.critical_poison_seen & bit == 0
                && self.shared.poisoned(i)
            {
                self.critical_poison_seen |= bit;
                self.critical_lost_pending = true;
            }
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

    /// The stages (not best-effort) whose measured `run` overran its budget, as a mask.
    fn measured_overruns(&self, slot: usize) -> u64 {
        let s = &self.shared.slots[slot];
        let mut mask = 0;
        for (i, st) in self.stages.iter().enumerate() {
            let t = &s.timing[i];
            if st.budget_ns > 0
                && st.criticality != Criticality::BestEffort
                && matches!(t.outcome(), Outcome::Ran | Outcome::Failed)
                && t.end_ns
                    .load(Ordering::Relaxed)
                    .saturating_sub(t.start_ns.load(Ordering::Relaxed))
                    > st.budget_ns
            {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// Virtual schedule of a finished frame: (late, slack_ns, mask of the stages, not
    /// best-effort, whose modeled duration overran the budget).
    ///
    /// The modeled machine runs every stage as soon as its inputs are ready and it has
    /// finished the previous frame (the per-stage frame gate), as if each stage had its own
    /// lane: the critical path of modeled durations. It deliberately ignores the real lane
    /// count, so a modeled replay makes the same decisions, hence the same outputs, on any
    /// number of lanes. Durations measured on the target already include its contention.
    fn modeled_schedule(&mut self, slot: usize, info: &FrameInfo) -> (bool, u64, u64) {
        let Some(model) = self.timing.as_mut() else {
            return (false, 0, 0);
        };
        let s = &self.shared.slots[slot];
        let mut overruns = 0u64;
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
                overruns |= 1 << i;
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
        (late, info.deadline_ns.saturating_sub(end), overruns)
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
        overruns: u64,
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
        self.finish_publish(info.frame, latency, false, overruns, slack);
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
        self.finish_publish(info.frame, latency, true, overrun_mask, 0);
    }

    /// Records the publish and hands the frame's outcome to the ladder. `slack` is the
    /// end-to-end slack the ladder judges deadline risk by: measured (release → publish)
    /// in real time and as-fast-as-possible runs, modeled in lockstep with a timing model,
    /// `u64::MAX` (no timing decision) in lockstep without one; 0 for a fallback.
    fn finish_publish(
        &mut self,
        frame: u64,
        latency: u64,
        miss: bool,
        overrun_mask: u64,
        slack: u64,
    ) {
        self.e2e.record(latency);
        self.frames_published += 1;
        if self.cfg.release != ReleaseMode::Lockstep {
            self.note_poisoned_critical();
        }
        let o = FrameOutcome {
            frame,
            deadline_miss: miss,
            overrun_mask,
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
}
