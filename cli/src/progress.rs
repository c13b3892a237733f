//! A progress line on stderr for long runs, drawn by its own thread so the runtime's
//! publisher only bumps an atomic counter (no I/O on the hot path). Off when stderr is not
//! a terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use redline_pipeline::run::Counters;

/// The progress line; dropped (or `finish`ed) to clear it.
#[derive(Debug)]
pub struct Progress {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing `label: published/total` every 200 ms, if stderr is a terminal.
    pub fn start(label: &str, total: u64, counters: Arc<Counters>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        if !std::io::stderr().is_terminal() {
            return Progress { stop, handle: None };
        }
        let label = label.to_string();
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut err = std::io::stderr();
            while !s.load(Ordering::Relaxed) {
                let p = counters.published.load(Ordering::Relaxed);
                let f = counters.fallbacks.load(Ordering::Relaxed);
                let pct = (100 * p).checked_div(total).unwrap_or(100);
                let _ = write!(
                    err,
                    "\r{label}: frame {p}/{total} ({pct}%), {f} fallbacks   "
                );
                let _ = err.flush();
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = write!(err, "\r{:width$}\r", "", width = label.len() + 60);
            let _ = err.flush();
        });
        Progress {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops and clears the line.
    pub fn finish(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop_now();
    }
}
