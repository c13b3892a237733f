//! Panic containment: what happens when user code (or the runtime itself) panics.
//!
//! ## Contract
//!
//! - **A stage's `run` panics** (a bug in user code): the panic is caught at the stage
//!   boundary (`Shared::execute`, one `catch_unwind` around the call), its message is
//!   recorded here (first message per stage, at most [`MESSAGE_BYTES`] bytes), the stage's
//!   [`Fallback`](crate::Fallback) writes that frame's outputs, and the stage is
//!   *poisoned*: it is never called again and its fallback stands in for it in every later
//!   frame, whatever the mode (counted as `panic_fallbacks`). A critical stage that panics
//!   is lost exactly as one that hangs: the ladder goes to its last mode. Later frames flow
//!   and are published on time; the lane that caught the panic keeps working.
//! - **A fallback panics**: caught the same way; the stage's outputs are zero-filled
//!   ([`crate::stage::ZeroFill`]) in that frame and in every later frame that needs its
//!   fallback.
//! - **A `parallel_for` chunk panics** (on the stage's own lane or on a helper lane): the
//!   helper catches it, the call waits until no helper is inside (the closure lives on the
//!   owner's stack), then re-raises the first payload on the owner's lane, where the stage
//!   boundary catches it: the stage is poisoned as above.
//! - **Anything else panics** (the [`Publisher`](crate::Publisher), a
//!   [`TimingModel`](crate::TimingModel), the scheduling step itself, a lane outside any
//!   stage, the watchdog): this is not a stage the runtime can stand in for, so the
//!   runtime is *poisoned*: the thread that caught it records it, releases the scheduling
//!   token (a drop guard), detaches the run and wakes the scheduler thread; `Runtime::run`
//!   then returns by re-raising the original payload (`resume_unwind`) on the caller's
//!   thread. It never hangs. A poisoned runtime refuses further `run` calls (they panic
//!   with the first record); the report and `Runtime::shutdown` name it; dropping it still
//!   stops and joins every thread.
//!
//! ## Why unwinding out of user code is sound here
//!
//! `catch_unwind` needs `UnwindSafe`; we assert it (`AssertUnwindSafe`) because unwind
//! safety is about *logic*, not memory safety, and the state a panic may leave half-updated
//! is never trusted again: the stage object (poisoned: only its `Drop` still runs), the
//! outputs it was writing (the fallback overwrites every output of that frame; the inputs
//! were read-only views), and a `parallel_for` task record (closed before the panic leaves
//! the call). Everything the runtime shares (node state, the lane's `running` word, the
//! slot's `in_exec` count) is updated after the catch, on the normal path.
//!
//! ## Costs
//!
//! On the normal path: `catch_unwind` is free (landing pads, no allocation), plus one
//! relaxed load per fallback call. Only the panic path allocates (the payload, the message
//! copy) and prints: the standard panic hook stays in place and writes the message and
//! location to stderr once per panic. That is deliberate: a panic is a bug, it happens at
//! most twice per stage (its `run`, its fallback) before the stage is poisoned, and a
//! library must not replace the process's panic hook. Containment needs `panic = "unwind"`
//! (Rust's default); a build with `panic = "abort"` aborts on the first panic.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Longest message kept per panic, bytes (cut on a character boundary).
pub const MESSAGE_BYTES: usize = 256;

/// The text of a panic payload (`&str` or `String`, as `panic!` makes them), at most
/// [`MESSAGE_BYTES`] bytes. Allocates: panic path only.
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    let text: &str = if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(the panic payload is not a string)"
    };
    let mut end = text.len().min(MESSAGE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Drops a panic payload without letting a panicking `Drop` of the payload escape (the
/// pathological case `catch_unwind`'s documentation warns about): a second payload is
/// leaked instead.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// One caught panic of a stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PanicNote {
    /// Frame the stage was running.
    pub frame: u64,
    /// The panic message.
    pub message: String,
    /// The stage had already been written off as hung when it panicked.
    pub written_off: bool,
}

/// The panics of one stage. Each can happen at most once: a stage whose `run` panicked is
/// never run again, and a fallback that panicked is replaced by zero-fill.
#[derive(Debug, Default)]
pub(crate) struct StagePanics {
    pub run: OnceLock<PanicNote>,
    pub fallback: OnceLock<PanicNote>,
}

/// A panic outside any stage, which poisons the runtime.
#[derive(Debug, Default)]
pub(crate) struct Escaped {
    poisoned: AtomicBool,
    /// Where and what: the first one only.
    first: OnceLock<(String, String)>,
    /// The first payload, until `Runtime::run` re-raises it.
    payload: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Escaped {
    /// Records a panic caught in `place` and poisons the runtime. Keeps the first.
    pub fn record(&self, place: &str, payload: Box<dyn Any + Send>) {
        let msg = message(&*payload);
        let first = self.first.set((place.to_string(), msg)).is_ok();
        if first {
            *self.payload.lock().unwrap_or_else(|e| e.into_inner()) = Some(payload);
        } else {
            drop_payload(payload);
        }
        self.poisoned.store(true, Ordering::SeqCst);
    }

    /// True once anything escaped.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// (where, message) of the first panic that escaped, if any.
    pub fn first(&self) -> Option<&(String, String)> {
        self.first.get()
    }

    /// The first payload, once (for `resume_unwind`).
    pub fn take_payload(&self) -> Option<Box<dyn Any + Send>> {
        self.payload
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// "`place`: `message`" of the first escaped panic.
    pub fn describe(&self) -> Option<String> {
        self.first().map(|(place, msg)| format!("{place}: {msg}"))
    }
}

/// Runs a runtime thread's body (`place` names it), recording a panic that escapes it.
pub(crate) fn contain_thread(escaped: &Escaped, place: &str, body: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(()) => true,
        Err(payload) => {
            escaped.record(place, payload);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_reads_str_and_string_payloads_and_cuts_long_ones_on_a_char_boundary() {
        let p = catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(message(&*p), "static text");
        let p = catch_unwind(|| panic!("formatted {}", 42)).unwrap_err();
        assert_eq!(message(&*p), "formatted 42");
        let p = catch_unwind(|| std::panic::panic_any(7u32)).unwrap_err();
        assert_eq!(message(&*p), "(the panic payload is not a string)");
        // 255 ASCII bytes then a 2-byte character: the cut falls inside it, so it goes.
        let long = format!("{}é and more", "a".repeat(MESSAGE_BYTES - 1));
        let m = message(&long);
        assert_eq!(m, "a".repeat(MESSAGE_BYTES - 1));
    }

    #[test]
    fn an_escaped_panic_poisons_and_keeps_the_first_payload() {
        let e = Escaped::default();
        assert!(!e.is_poisoned());
        assert!(contain_thread(&e, "lane 0", || {}));
        assert!(!e.is_poisoned(), "a body that returns poisons nothing");
        assert!(!contain_thread(&e, "lane 1", || panic!("first")));
        assert!(!contain_thread(&e, "watchdog", || panic!("second")));
        assert!(e.is_poisoned());
        assert_eq!(e.describe().as_deref(), Some("lane 1: first"));
        let p = e.take_payload().expect("payload kept");
        assert_eq!(message(&*p), "first");
        assert!(e.take_payload().is_none(), "taken once");
    }
}
