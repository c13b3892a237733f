//! Frame retirement: a published frame's slot is read out into the metrics and freed for
//! the next release.
//!
//! ## Contract
//!
//! - A slot is retired only once its frame is published, every stage turn is finished
//!   (`remaining == 0`) and no stage is still executing in it (`in_exec == 0`). A slot a
//!   hung stage is still writing into stays quarantined until that stage returns.
//! - While no lane is live, a slot whose frame is published but whose stages wait in a
//!   lost lane's queue counts as idle for the end of a run (nothing could run them before
//!   a written-off stage returns); it is retired once they have run.
//! - Retiring records, per stage, the counters (runs, errors, skips, lost fallbacks,
//!   cancellations, panics and the fallbacks standing in after one), the execution and queueing histograms, budget overruns (the first
//!   4096 in detail, the rest counted) and one span; then it stores `FREE` with `Release`.
//! - It allocates nothing (the overrun log and span ring are preallocated) and runs only
//!   under the scheduling token.

use std::sync::atomic::Ordering;

use super::{Runtime, OVERRUN_LOG};
use crate::exec::{Outcome, ABANDONED, DONE, FREE};
use crate::metrics::{Span, SpanKind};
use crate::report::OverrunRecord;

impl Runtime {
    /// True when no slot holds a frame the run still waits for: every slot is free, or
    /// quarantined by a hung stage after its frame was published, or published and
    /// waiting for a lane while none is live.
    pub(super) fn all_slots_idle(&self) -> bool {
        let no_live_lane = self.shared.lanes.live_count() == 0;
        self.shared.slots.iter().enumerate().all(|(i, s)| {
            let phase = s.phase.load(Ordering::Acquire);
            phase == FREE
                || (self.published[i]
                    && (no_live_lane
                        || (s.remaining.load(Ordering::Acquire) == 0
                            && s.in_exec.load(Ordering::Acquire) > 0))) // quarantined
        })
    }

    /// Retires every slot whose frame is published and whose stages are all done.
    pub(super) fn retire_ready(&mut self) {
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
                    Outcome::Panicked => {
                        c.panics += 1;
                        Some(SpanKind::Fallback)
                    }
                    Outcome::PanickedFallback => {
                        c.panic_fallbacks += 1;
                        Some(SpanKind::Fallback)
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
}
