//! Frame release: when the next frame enters a slot, and what happens when none is free.
//!
//! ## Contract
//!
//! - Real time ([`ReleaseMode::RealTime`]): frame `k` is released at its absolute due time
//!   from the frame clock (`clock::FrameClock`), never by sleeping a period; a frame due
//!   while every slot is busy is *dropped*: it is queued in order and publishes its fallback
//!   ([`crate::publish::FallbackReason::NoFreeSlot`]), so the output rate never slips.
//! - Data-triggered ([`ReleaseMode::AsFastAsPossible`], [`ReleaseMode::Lockstep`]): the next
//!   frame waits for a free slot and is never dropped. In lockstep the release time is
//!   virtual and frame `k` is released only once frame `k - slots` is published, after the
//!   ladder has seen exactly the outcomes of frames up to `k - slots`.
//! - Releasing a frame resets the slot's per-stage bookkeeping (relaxed stores, published
//!   by the `RUNNING` phase store with `Release`) and offers the root stages. It allocates
//!   nothing and takes no lock; it runs only under the scheduling token.

use std::sync::atomic::Ordering;

use super::{Entry, Runtime, OUTCOME_RING};
use crate::exec::{Outcome, FREE, RUNNING};
use crate::runtime::ReleaseMode;

impl Runtime {
    /// Releases (or drops) every frame of the run that is due now. Returns the real time at
    /// which the next frame falls due (real-time release), or 0 when none is waiting on time.
    pub(super) fn release_due(&mut self) -> u64 {
        let mut due_at = 0;
        while self.next_frame < self.target {
            let now = self.shared.now_ns();
            let released = match (
                self.cfg.release,
                self.frame_clock.release_ns(self.next_frame),
            ) {
                (ReleaseMode::RealTime, Some(due)) => {
                    if now < due {
                        due_at = due;
                        break;
                    }
                    self.release_or_drop(due, due, true)
                }
                (ReleaseMode::Lockstep, Some(virt)) => {
                    let s = self.published.len() as u64;
                    if self.next_frame >= s && self.published_through + s < self.next_frame + 1 {
                        break; // frame k - slots not published yet
                    }
                    self.release_or_drop(virt, now, false)
                }
                _ => self.release_or_drop(now, now, false),
            };
            if !released {
                break;
            }
        }
        due_at
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
}
