//! [`Mailbox`]: a hand-over slot of depth one between two threads, which blocks instead of
//! spinning.
//!
//! Why not `std::sync::mpsc::sync_channel(1)`: its `recv` spins, then yields, while a sender
//! has claimed the slot but not yet written it. In a real-time replay the receiver is the
//! scheduler thread at SCHED_FIFO, the sender the log reader at SCHED_OTHER; if the reader is
//! preempted inside that window on the scheduler's core, the scheduler's yields never let it
//! run and the replay stalls until the kernel's real-time throttling lends the reader a slice
//! (the same wait that hung the runtime's start-up under qemu, see `redline_runtime::exec`).
//! Here both sides hold a [`Mutex`] only to move one value in or out and wait on a [`Condvar`]:
//! a thread that finds the lock taken or the slot in the wrong state sleeps in the kernel, so
//! a lower-priority holder always gets to finish.
//!
//! Contract: [`Mailbox::put`] waits while the slot is full and fails (giving the value back)
//! once the receiving side has [`close`](Mailbox::close)d; [`Mailbox::take`] waits while the
//! slot is empty and returns `None` once it is empty and the sending side has
//! [`hang_up`](Mailbox::hang_up) (which a [`Sender`] guard does when dropped, panics
//! included). Values come out in the order they went in. Not for the hot path: it locks and
//! may sleep (the stream feed calls it between runs).

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// A hand-over slot of depth one (see the module docs).
#[derive(Debug)]
pub struct Mailbox<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
}

#[derive(Debug)]
struct State<T> {
    slot: Option<T>,
    /// The receiving side is gone: puts fail.
    closed: bool,
    /// The sending side is gone: takes return what is left, then `None`.
    hung_up: bool,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                slot: None,
                closed: false,
                hung_up: false,
            }),
            changed: Condvar::new(),
        }
    }
}

impl<T> Mailbox<T> {
    /// An empty, open mailbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state; a panic while it was held (there is none in this file's critical
    /// sections) leaves it consistent, so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State<T>>) -> MutexGuard<'a, State<T>> {
        self.changed.wait(g).unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `v` into the slot, waiting while it is full. `Err(v)` once the receiving side has
    /// closed the mailbox.
    pub fn put(&self, v: T) -> Result<(), T> {
        let mut g = self.lock();
        while g.slot.is_some() && !g.closed {
            g = self.wait(g);
        }
        if g.closed {
            return Err(v);
        }
        g.slot = Some(v);
        drop(g);
        self.changed.notify_all();
        Ok(())
    }

    /// Takes the value in the slot, waiting while it is empty. `None` once it is empty and
    /// the sending side has hung up (or the mailbox is closed).
    pub fn take(&self) -> Option<T> {
        let mut g = self.lock();
        while g.slot.is_none() && !g.hung_up && !g.closed {
            g = self.wait(g);
        }
        let v = g.slot.take();
        drop(g);
        self.changed.notify_all();
        v
    }

    /// The receiving side is done: a waiting or later `put` fails, and what is in the slot
    /// is returned (for the caller to drop outside the lock).
    pub fn close(&self) -> Option<T> {
        let mut g = self.lock();
        g.closed = true;
        let v = g.slot.take();
        drop(g);
        self.changed.notify_all();
        v
    }

    /// The sending side is done: `take` returns what is left, then `None`.
    pub fn hang_up(&self) {
        self.lock().hung_up = true;
        self.changed.notify_all();
    }
}

/// The sending side's handle: hangs the mailbox up when dropped (also when its thread
/// panics), so the receiver never waits for a sender that is gone.
#[derive(Debug)]
pub struct Sender<T>(pub std::sync::Arc<Mailbox<T>>);

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.0.hang_up();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn values_come_out_in_order_and_a_full_slot_makes_put_wait() {
        let m = Arc::new(Mailbox::new());
        let tx = Sender(m.clone());
        let producer = std::thread::spawn(move || {
            for i in 0..1000u32 {
                tx.0.put(i).unwrap();
            }
        });
        let got: Vec<u32> = std::iter::from_fn(|| m.take()).collect();
        producer.join().unwrap();
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn take_returns_none_once_the_sender_is_gone_even_by_panic() {
        let m = Arc::new(Mailbox::<u32>::new());
        let tx = Sender(m.clone());
        let t = std::thread::spawn(move || {
            tx.0.put(7).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            panic!("the reader failed");
        });
        assert_eq!(m.take(), Some(7));
        // Waits for the panicking sender, then sees it gone.
        assert_eq!(m.take(), None);
        assert!(t.join().is_err());
        assert_eq!(m.take(), None);
    }

    #[test]
    fn close_fails_a_waiting_put_and_gives_back_what_was_in_the_slot() {
        let m = Arc::new(Mailbox::new());
        m.put(1u32).unwrap();
        let m2 = m.clone();
        let blocked = std::thread::spawn(move || m2.put(2));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(m.close(), Some(1));
        assert_eq!(blocked.join().unwrap(), Err(2));
        assert_eq!(m.put(3), Err(3));
        assert_eq!(m.take(), None);
    }
}
