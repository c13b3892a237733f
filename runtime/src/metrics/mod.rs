//! Metrics: nanosecond latency histograms and a preallocated span ring for timelines.
//!
//! # Contract
//!
//! Allocation-free, panic-free, lock-free (hot path; safe inside `Stage::run` and the scheduler
//! loop):
//! - [`LatencyHistogram::record`]: fixed bounds 1 ns ..= 60 s, 3 significant digits, auto-resize
//!   off; values above 60 s are clamped and counted in [`LatencyHistogram::saturated`].
//! - [`LatencyHistogram::add`], [`LatencyHistogram::reset`], [`LatencyHistogram::count`].
//! - [`SpanRing::push`]: overwrites the oldest span when full, counted in
//!   [`SpanRing::overwritten`].
//!
//! Allocating or scanning (off the hot path: start-up, reporting, shutdown):
//! - [`LatencyHistogram::new`] (about 230 KiB of counters), [`SpanRing::new`] (`capacity` spans).
//! - [`LatencyHistogram::summary`] (scans the counters; allocation-free but O(buckets)).
//! - [`write_chrome_trace`] (buffered I/O, formatting).
//!
//! Neither type is shared between threads: each lane owns its histograms and ring, and the
//! reporting side merges histograms with [`LatencyHistogram::add`] after the run (or from a
//! snapshot handed over off the hot path).

mod histogram;
mod spans;

pub use histogram::{LatencyHistogram, LatencySummary, OutOfRange, HIGHEST_NS, LOWEST_NS, SIGFIG};
pub use spans::{write_chrome_trace, Span, SpanKind, SpanRing};
