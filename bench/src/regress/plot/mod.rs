//! Hand-written SVG plots for regression reports. No plotting crate: `svg` holds the
//! document, axes, text and polyline helpers, and each chart is its own module:
//!
//! - [`percentile`]: latency percentile distributions (HdrHistogram style), one curve per
//!   histogram, with the deadline or a budget;
//! - [`timeline`]: end-to-end latency frame by frame, with fallbacks, the deadline and
//!   mode changes.
//!
//! Every chart function returns a complete, standalone SVG 1.1 document of 900 × 500 px
//! whose y axis is latency in ms. Off the hot path: they allocate and scan whole
//! histograms; call them after a run, never from a stage or the scheduler loop.

pub mod percentile;
mod svg;
pub mod timeline;
