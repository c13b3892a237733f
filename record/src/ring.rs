//! A fixed pool of record slots handed between one producer (the publisher, on the hot path)
//! and one consumer (the writer thread) by index.
//!
//! Contract:
//! - Every slot is allocated once, in [`SlotRing::new`]; nothing here allocates afterwards.
//! - A slot index is owned by exactly one side at a time. It starts in the `free` queue;
//!   the producer takes it ([`SlotRing::claim`]), fills the slot, and hands it over
//!   ([`SlotRing::commit`]) into the `full` queue; the consumer takes it
//!   ([`SlotRing::take`]), reads the slot and gives it back ([`SlotRing::release`]).
//! - Both queues are [`BoundedQueue`]s with room for every slot: lock-free, never block,
//!   never allocate, and never wait for the other side to finish a push or pop (the
//!   publisher runs at a real-time priority and may preempt the writer thread in the
//!   middle of one; waiting for it there would stall the publisher). A full pool makes
//!   `claim` return `None` at once (the caller counts a drop), and so does a slot the
//!   consumer is still handing back.
//! - Records are handed over in claim order (both queues are FIFO), so the consumer sees
//!   frames in the order they were published.
//!
//! What it must never do: let two sides hold the same index (the `Claim`/`Taken` guards
//! are not `Clone` and are consumed by `commit`/`release`), or touch a slot without holding
//! its index.

use std::cell::UnsafeCell;

use redline_runtime::queue::BoundedQueue;

/// The pool: `slots` values of `T` and the two index queues.
pub struct SlotRing<T> {
    slots: Box<[UnsafeCell<T>]>,
    free: BoundedQueue<u32>,
    full: BoundedQueue<u32>,
}

impl<T> std::fmt::Debug for SlotRing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotRing")
            .field("slots", &self.slots.len())
            .field("free", &self.free.len())
            .field("full", &self.full.len())
            .finish()
    }
}

// SAFETY: a slot's contents are only reached through a `Claim` or a `Taken`, which hold its
// index exclusively (an index is in at most one queue or one guard at any time: it leaves a
// queue by a successful pop and re-enters by a push). The queues' push (release) and pop
// (acquire) order every write of a slot before the other side's reads of it. So sharing the
// ring between threads shares no `T` concurrently; `T: Send` suffices.
unsafe impl<T: Send> Sync for SlotRing<T> {}
// SAFETY: as above; the ring owns its `T`s.
unsafe impl<T: Send> Send for SlotRing<T> {}

/// A slot the producer holds: fill it through [`SlotRing::slot`], then [`SlotRing::commit`].
#[derive(Debug)]
pub struct Claim {
    index: u32,
}

/// A slot the consumer holds: read it through [`SlotRing::read`], then
/// [`SlotRing::release`].
#[derive(Debug)]
pub struct Taken {
    index: u32,
}

impl<T> SlotRing<T> {
    /// `slots` slots (at least 1), each made by `init` (start-up: allocates here only).
    pub fn new(slots: usize, mut init: impl FnMut() -> T) -> Self {
        let n = slots.clamp(1, u32::MAX as usize);
        let slots: Box<[UnsafeCell<T>]> = (0..n).map(|_| UnsafeCell::new(init())).collect();
        let free = BoundedQueue::new(n);
        let full = BoundedQueue::new(n);
        for i in 0..n as u32 {
            // Cannot fail: `free` has room for at least `n`.
            let _ = free.push(i);
        }
        SlotRing { slots, free, full }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Producer: a free slot, or None when every slot is full or being written (a drop).
    /// Lock-free; never allocates or blocks.
    pub fn claim(&self) -> Option<Claim> {
        self.free.pop().map(|index| Claim { index })
    }

    /// Producer: the claimed slot, to fill.
    #[allow(clippy::mut_from_ref)] // exclusive by the claim: see the SAFETY comment
    pub fn slot(&self, c: &mut Claim) -> &mut T {
        // SAFETY: `c` holds its index exclusively (it came from `free`, and only `commit`,
        // which consumes it, puts the index back into a queue), and `&mut Claim` borrows it
        // for as long as the returned reference lives, so no other reference to this slot
        // exists. The index is in bounds: only `new` creates indices, all below `n`.
        unsafe { &mut *self.slots[c.index as usize].get() }
    }

    /// Producer: hands the filled slot to the consumer.
    pub fn commit(&self, c: Claim) {
        // Cannot fail: `full` has room for every slot, and this index is in no queue.
        let _ = self.full.push(c.index);
    }

    /// Producer: gives a claimed slot back unfilled.
    pub fn abandon(&self, c: Claim) {
        let _ = self.free.push(c.index);
    }

    /// Consumer: the oldest filled slot, if any.
    pub fn take(&self) -> Option<Taken> {
        self.full.pop().map(|index| Taken { index })
    }

    /// Consumer: the taken slot, to read.
    pub fn read(&self, t: &Taken) -> &T {
        // SAFETY: `t` holds its index exclusively (popped from `full`; the producer wrote
        // the slot before pushing it there, and the queue orders that write before this
        // pop); it goes back to `free` only through `release`, which consumes `t`, so no
        // `&mut` to this slot exists while the returned reference does.
        unsafe { &*self.slots[t.index as usize].get() }
    }

    /// Consumer: gives the slot back to the producer.
    pub fn release(&self, t: Taken) {
        let _ = self.free.push(t.index);
    }

    /// Filled slots not yet taken.
    pub fn pending(&self) -> usize {
        self.full.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_full_ring_refuses_a_claim_and_frees_on_release() {
        let r = SlotRing::new(2, || 0u64);
        let mut a = r.claim().unwrap();
        *r.slot(&mut a) = 7;
        r.commit(a);
        let b = r.claim().unwrap();
        assert!(r.claim().is_none(), "two slots, two claims");
        r.abandon(b);
        let t = r.take().unwrap();
        assert_eq!(*r.read(&t), 7);
        r.release(t);
        assert!(r.take().is_none());
        assert!(r.claim().is_some());
    }

    #[test]
    fn records_cross_threads_in_order_and_intact() {
        let r = Arc::new(SlotRing::new(4, || [0u64; 64]));
        let n = 20_000u64;
        let consumer = {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while seen.len() < n as usize {
                    match r.take() {
                        Some(t) => {
                            let v = r.read(&t);
                            assert!(v.iter().all(|&x| x == v[0]), "torn slot");
                            seen.push(v[0]);
                            r.release(t);
                        }
                        None => std::thread::yield_now(),
                    }
                }
                seen
            })
        };
        let mut k = 0;
        while k < n {
            if let Some(mut c) = r.claim() {
                r.slot(&mut c).fill(k);
                r.commit(c);
                k += 1;
            } else {
                std::thread::yield_now();
            }
        }
        let seen = consumer.join().unwrap();
        assert!(seen.windows(2).all(|w| w[1] == w[0] + 1));
    }
}
