//! Latency-jitter regression checks as a library: what `redline regress` and `redline
//! report merge` are made of, independent of the graph that is measured.
//!
//! The harness measures any [`redline_runtime::Runtime`]: per-stage and end-to-end
//! histograms, deadline misses, late publishes and the frames spent outside the first
//! (nominal) mode. A regression check replays one workload several times
//! ("repetitions") and judges the figures against a reference:
//!
//! - **baseline mode**: the reference is a [`Measurement`] stored as JSON. Each figure is
//!   the **median over repetitions** of its per-repetition value (a P99 is computed within
//!   one replay, then the median is taken across replays), so one disturbed replay never
//!   decides a verdict.
//! - **A/B mode**: the two builds run alternately in one session (reference, candidate,
//!   candidate, reference, ... so slow drift of the machine hits both equally), each
//!   repetition in its own process, and the verdict uses the **median of the paired
//!   ratios** candidate/reference.
//!
//! A figure fails when it exceeds both its relative tolerance and its absolute floor
//! ([`RegressConfig`]): `now > max(reference × (1 + relative), reference + floor)`. The
//! floor keeps sub-microsecond noise on tiny stages from ever failing a run. Counts
//! (misses, late publishes, degraded frames) fail when the median rises by more than the
//! allowed extra.
//!
//! Everything here runs after (or between) measured frames: it allocates, reads and
//! writes files, and prints. Nothing in it is on the hot path; the one piece that runs
//! while frames run is the publisher [`measure::measure_runtime`] wraps around the
//! caller's, which only copies three numbers per frame into a preallocated vector. What
//! is measured (the driving graph, a calibrated test graph) is the caller's business: the
//! `redline` tool wires the driving graph to it.
//!
//! Files: [`config`] (the `[regress]` table: repetitions, warm-up, tolerances),
//! [`measurement`] (the JSON format of baselines and merged reports), [`histogram`]
//! (lossless histogram encoding), [`setup`] (machine and run setup, config hash),
//! [`measure`] (measuring a runtime), [`ab`] (the alternating order of A/B runs),
//! [`worker`] (repetitions in worker processes), [`verdict`] (the comparison and its
//! table), [`outputs`] (the output directory), [`hlog`] (HdrHistogram interval logs),
//! [`plot`] (SVG percentile and timeline plots).

pub mod ab;
pub mod config;
pub mod histogram;
pub mod hlog;
pub mod measure;
pub mod measurement;
pub mod outputs;
pub mod plot;
pub mod setup;
pub mod verdict;
pub mod worker;

pub use config::{RegressConfig, Tolerance};
pub use measurement::{Measurement, MeasurementError};
pub use verdict::{Row, Verdict};
