//! A bounded multi-producer, multi-consumer queue whose operations never wait for another
//! thread: the queue between the runtime's threads (lane work, help requests, scheduler
//! events) and the recorder's slot hand-over.
//!
//! ## Why not `crossbeam_queue::ArrayQueue`
//!
//! Its `pop` spins, and its `push` spins and then calls `sched_yield`, until a push or pop
//! that another thread has begun is finished. Between SCHED_FIFO threads of different
//! priorities on one core that is a livelock, not a delay: if the scheduler thread
//! (priority 41) preempts a lane (40) between the lane's claim of a cell and its write of
//! the cell's stamp, then pops, it waits for that stamp for ever, because a FIFO thread
//! that spins or yields never lets a lower priority run on its core.
//!
//! The same wait, in the standard library's `mpsc` channel (whose `recv` spins and yields
//! for a sender in the middle of a send), hung real-time replays under qemu, where the
//! window is wide: about 1 run in 30 (2026-11-27, `tools/aarch64/run.sh`; `/proc` showed
//! the scheduler thread running on core 1, in `sched_yield` at about 100 % CPU, and lane 1
//! runnable on core 1 with no CPU time; attaching a tracer, which stops the scheduler
//! thread for a moment, let the replay finish). That one was in `Runtime::new` collecting
//! the threads' start-up reports, which now happens before the scheduler thread becomes
//! real-time. These queues carry the same hand-offs every frame, on the hot path; natively
//! the window is a few instructions, which makes the hang rare, not impossible.
//!
//! ## Contract
//!
//! - [`BoundedQueue::push`] and [`BoundedQueue::pop`] return without waiting for any other
//!   thread. They retry only when another thread's operation moved the shared position
//!   under them (some thread made progress: lock-free), never to wait for one to finish.
//! - The price, which callers must design for: a push that has begun and not finished
//!   (its thread preempted) hides its cell. `pop` and [`BoundedQueue::is_empty`] report
//!   empty while the oldest element is still being written (elements pushed after it wait
//!   behind it: the order stays FIFO). So **whoever pushes must follow the push with the
//!   wake-up or step that makes a consumer look again**; the consumer may see nothing in
//!   between. Likewise `push` reports full while the cell it needs is still being read.
//! - Capacity is the requested minimum rounded up to a power of two. `push` fails only
//!   when `capacity` elements are in the queue, counting those whose push or pop has begun
//!   and not finished: a queue sized for every element that can exist at once never
//!   fails a push.
//! - Memory is allocated once, in [`BoundedQueue::new`]; push and pop never allocate,
//!   lock, make a system call or panic.
//! - `is_empty` answers what `pop` would; `len` is approximate (for reports only).
//!
//! The algorithm is Dmitry Vyukov's bounded MPMC queue: each cell carries a sequence
//! number that says whose turn it is (the pusher of position `p` waits for `seq == p`,
//! the popper for `seq == p + 1`), and a turn that is not yet due is reported as full or
//! empty instead of awaited.
//!
//! Orderings: the cell's sequence number is stored and loaded with `SeqCst`, so a push
//! followed by a `SeqCst` flag operation (`LaneSet::wake`'s swap, the scheduling token's
//! compare-and-swap) and a consumer's `SeqCst` flag store, fence and `is_empty` form the
//! Dekker pairs the runtime relies on: at least one side sees the other.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Keeps the head and the tail on separate cache lines (128 bytes: adjacent-line
/// prefetching on x86-64, and the line size of some aarch64 cores).
#[repr(align(128))]
struct Padded(AtomicUsize);

struct Cell<T> {
    /// Whose turn it is: `p` for the pusher of position `p`, `p + 1` for its popper,
    /// `p + capacity` for the next lap's pusher.
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded MPMC queue that never waits for another thread (see the module docs).
pub struct BoundedQueue<T> {
    head: Padded,
    tail: Padded,
    cells: Box<[Cell<T>]>,
    mask: usize,
}

// SAFETY: a cell's value is written only by the pusher that won position `p` (the tail's
// compare-and-swap hands each position to one thread) while `seq == p`, and read only by
// the popper that won `p` at the head while `seq == p + 1`; the release/acquire (SeqCst)
// pair on `seq` orders the write before the read and the read before the next lap's write.
// So no value is accessed by two threads at once, and values move between threads: `T:
// Send` suffices for both.
unsafe impl<T: Send> Send for BoundedQueue<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for BoundedQueue<T> {}

impl<T> std::fmt::Debug for BoundedQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedQueue")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

impl<T> BoundedQueue<T> {
    /// A queue for at least `min_capacity` elements (at least 1), rounded up to a power of
    /// two. Allocates here only.
    pub fn new(min_capacity: usize) -> BoundedQueue<T> {
        let capacity = min_capacity.max(1).next_power_of_two();
        let cells = (0..capacity)
            .map(|i| Cell {
                seq: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        BoundedQueue {
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
            cells,
            mask: capacity - 1,
        }
    }

    /// How many elements fit.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Appends `value`, or gives it back if the queue is full (or the cell it needs is
    /// still being read by a popper that has not finished). Never waits.
    pub fn push(&self, value: T) -> Result<(), T> {
        match self.claim_push() {
            Some(pos) => {
                // SAFETY: `claim_push` just gave this thread position `pos`.
                unsafe { self.publish(pos, value) };
                Ok(())
            }
            None => Err(value),
        }
    }

    /// Removes the oldest element, or None if there is none (or the oldest is still being
    /// written by a pusher that has not finished). Never waits.
    pub fn pop(&self) -> Option<T> {
        let pos = self.claim_pop()?;
        // SAFETY: `claim_pop` just gave this thread position `pos`.
        Some(unsafe { self.take(pos) })
    }

    /// True when `pop` would return None now.
    pub fn is_empty(&self) -> bool {
        let mut pos = self.head.0.load(Ordering::SeqCst);
        loop {
            let seq = self.cells[pos & self.mask].seq.load(Ordering::SeqCst);
            match Self::turn(seq, pos.wrapping_add(1)) {
                0 => return false,
                d if d < 0 => return true,
                // Popped since we read the head: look at the new head.
                _ => pos = self.head.0.load(Ordering::SeqCst),
            }
        }
    }

    /// Elements pushed and not yet popped, approximately (for reports: it races with
    /// pushes and pops, and counts those begun and not finished).
    pub fn len(&self) -> usize {
        // The head first: the tail, read later, is at least that head (a position is
        // popped only after it was pushed), so the difference is not negative.
        let head = self.head.0.load(Ordering::SeqCst);
        let tail = self.tail.0.load(Ordering::SeqCst);
        tail.wrapping_sub(head).min(self.capacity())
    }

    /// `seq - expected` as a signed distance: 0 when it is the caller's turn, negative when
    /// the turn has not come (full for a pusher, empty for a popper), positive when
    /// another thread took this position already.
    fn turn(seq: usize, expected: usize) -> isize {
        seq.wrapping_sub(expected) as isize
    }

    /// Wins a tail position whose cell is free, or None if the queue is full.
    fn claim_push(&self) -> Option<usize> {
        self.claim(&self.tail.0, 0)
    }

    /// Wins the position `end` (the tail or the head) points at when the cell's turn is
    /// `position + offset` (0 for a pusher, 1 for a popper), or None when that turn has not
    /// come. Retries only when another thread moved `end` first.
    fn claim(&self, end: &AtomicUsize, offset: usize) -> Option<usize> {
        let mut pos = end.load(Ordering::Relaxed);
        loop {
            let seq = self.cells[pos & self.mask].seq.load(Ordering::SeqCst);
            match Self::turn(seq, pos.wrapping_add(offset)) {
                0 => match end.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(pos),
                    Err(now) => pos = now,
                },
                d if d < 0 => return None,
                _ => pos = end.load(Ordering::Relaxed),
            }
        }
    }

    /// Writes the value of position `pos` and hands the cell to its popper.
    ///
    /// # Safety
    ///
    /// `pos` must come from `claim_push` on this thread, published once.
    unsafe fn publish(&self, pos: usize, value: T) {
        let cell = &self.cells[pos & self.mask];
        // SAFETY: the caller won `pos`, and the cell's `seq == pos` (checked in
        // `claim_push`) means its previous value was read out; no other thread touches the
        // value until the store below.
        unsafe { (*cell.value.get()).write(value) };
        cell.seq.store(pos.wrapping_add(1), Ordering::SeqCst);
    }

    /// Wins the head position whose value is written, or None if there is none.
    fn claim_pop(&self) -> Option<usize> {
        self.claim(&self.head.0, 1)
    }

    /// Reads the value of position `pos` and frees the cell for the next lap's pusher.
    ///
    /// # Safety
    ///
    /// `pos` must come from `claim_pop` on this thread, taken once.
    unsafe fn take(&self, pos: usize) -> T {
        let cell = &self.cells[pos & self.mask];
        // SAFETY: the caller won `pos`, and `seq == pos + 1` (checked in `claim_pop`, with
        // SeqCst, which acquires) means the pusher's write is complete and visible; no
        // other thread touches the value until the store below.
        let value = unsafe { (*cell.value.get()).assume_init_read() };
        cell.seq
            .store(pos.wrapping_add(self.capacity()), Ordering::SeqCst);
        value
    }
}

impl<T> Drop for BoundedQueue<T> {
    fn drop(&mut self) {
        // `&mut self`: no push or pop is in progress, so every pushed value is poppable.
        while self.pop().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fifo_with_capacity_rounded_up_over_many_laps() {
        let q = BoundedQueue::new(5);
        assert_eq!(q.capacity(), 8);
        assert!(q.is_empty());
        for i in 0..8 {
            q.push(i).unwrap();
        }
        assert_eq!(q.push(8), Err(8), "a full queue gives the value back");
        assert_eq!(q.len(), 8);
        for i in 0..8 {
            assert_eq!(q.pop(), Some(i));
        }
        assert_eq!(q.pop(), None);
        // Many laps of partial fills: the cells' turns wrap correctly.
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..1000u64 {
            for _ in 0..(round % 7 + 1) {
                q.push(next_in).unwrap();
                next_in += 1;
            }
            while let Some(v) = q.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert!(q.is_empty());
            assert_eq!(q.len(), 0);
        }
        assert_eq!(next_in, next_out);
        assert_eq!(BoundedQueue::<u8>::new(0).capacity(), 1);
    }

    /// The property the module exists for: a push that has begun and not finished (its
    /// thread preempted) never makes `pop` or `is_empty` wait; later elements wait behind
    /// it, in order. `crossbeam_queue::ArrayQueue::pop` spins here for ever.
    #[test]
    fn a_push_in_progress_hides_its_cell_and_never_blocks_a_pop() {
        let q = BoundedQueue::new(4);
        let pos = q.claim_push().expect("room");
        assert_eq!(q.pop(), None, "the oldest element is still being written");
        assert!(q.is_empty());
        q.push(2).unwrap();
        assert_eq!(
            q.pop(),
            None,
            "a later element waits behind the unfinished one"
        );
        assert!(q.is_empty());
        assert_eq!(q.len(), 2, "len counts the push in progress");
        // SAFETY: `pos` came from `claim_push` above and is published once.
        unsafe { q.publish(pos, 1) };
        assert!(!q.is_empty());
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), None);
    }

    /// The other side: a pop that has begun and not finished makes a push into its cell
    /// report full at once (it does not wait), and never hides the other elements.
    #[test]
    fn a_pop_in_progress_never_blocks_a_push_or_the_next_pop() {
        let q = BoundedQueue::new(4);
        for i in 0..4 {
            q.push(i).unwrap();
        }
        let pos = q.claim_pop().expect("an element");
        assert_eq!(
            q.push(4),
            Err(4),
            "the cell is still being read: full, at once"
        );
        assert_eq!(q.pop(), Some(1), "later elements are not hidden");
        // SAFETY: `pos` came from `claim_pop` above and is taken once.
        assert_eq!(unsafe { q.take(pos) }, 0);
        q.push(4).unwrap();
        assert_eq!(
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
    }

    /// Several producers and consumers at once: every value comes out exactly once, and
    /// each consumer sees each producer's values in the order they were pushed.
    #[test]
    fn concurrent_producers_and_consumers_lose_and_duplicate_nothing() {
        const PRODUCERS: u64 = 3;
        const PER_PRODUCER: u64 = 20_000;
        let q = Arc::new(BoundedQueue::new(16));
        let taken = AtomicUsize::new(0);
        let consumed = std::thread::scope(|s| {
            for p in 0..PRODUCERS {
                let q = q.clone();
                s.spawn(move || {
                    for i in 0..PER_PRODUCER {
                        let mut v = (p << 32) | i;
                        while let Err(back) = q.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let q = q.clone();
                    let taken = &taken;
                    s.spawn(move || {
                        let mut got = Vec::new();
                        let mut last = [None::<u64>; PRODUCERS as usize];
                        while (taken.load(Ordering::SeqCst) as u64) < PRODUCERS * PER_PRODUCER {
                            match q.pop() {
                                Some(v) => {
                                    taken.fetch_add(1, Ordering::SeqCst);
                                    let (p, i) = ((v >> 32) as usize, v & 0xFFFF_FFFF);
                                    assert!(last[p].is_none_or(|l| l < i), "order per producer");
                                    last[p] = Some(i);
                                    got.push(v);
                                }
                                None => std::thread::yield_now(),
                            }
                        }
                        got
                    })
                })
                .collect();
            consumers
                .into_iter()
                .flat_map(|c| c.join().unwrap())
                .collect::<Vec<_>>()
        });
        let mut all = consumed;
        assert_eq!(q.pop(), None);
        all.sort_unstable();
        let expected: Vec<u64> = (0..PRODUCERS)
            .flat_map(|p| (0..PER_PRODUCER).map(move |i| (p << 32) | i))
            .collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn dropping_the_queue_drops_what_is_left() {
        let marker = Arc::new(());
        {
            let q = BoundedQueue::new(4);
            for _ in 0..3 {
                q.push(marker.clone()).unwrap();
            }
            drop(q.pop());
            assert_eq!(Arc::strong_count(&marker), 3);
        }
        assert_eq!(Arc::strong_count(&marker), 1);
    }
}
