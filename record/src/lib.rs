//! redline-record: what the driving graph published, per frame, as an MCAP file that
//! Foxglove (and its open-source fork Lichtblick) draws (`redline replay --record`).
//!
//! What it promises:
//! - Written off the hot path. The runtime's publishing thread only runs the
//!   [`RecordPublisher`]: it copies the frame's outputs into a slot of a ring preallocated
//!   at start ([`ring::SlotRing`]) — no allocation, no lock, no I/O, no waiting. A full ring drops the record and counts it; it never blocks a lane. A writer
//!   thread of its own ([`Recorder`]) encodes and writes.
//! - Channels and schemas ([`encode::topic`]): `/tf` (`foxglove.FrameTransform`,
//!   map → base_link), `/redline/detections`, `/redline/tracks`, `/redline/predictions`,
//!   `/redline/plan` (`foxglove.SceneUpdate`), `/redline/bev_segmentation`
//!   (`foxglove.Grid`), and `/redline/frame` (JSON `redline.FrameStats`: `latency_ms`,
//!   `mode`, `mode_name`, `deadline_miss`, ... for the Plot panel). Protobuf schemas are the
//!   `foxglove` crate's own, so any Foxglove schema decoder reads them.
//! - Optionally the camera images ([`images`]): the frame's input images, read from the
//!   frame source and JPEG-encoded by the writer thread (`foxglove.CompressedImage`), with
//!   each camera's calibration (`foxglove.CameraCalibration`, lens included) and mount
//!   (`foxglove.FrameTransform` `base_link` → `cam_<name>` on `/tf_static`), so that
//!   Foxglove's Image panel draws the 3D outputs over the images.
//! - Recording observes only: it does not change what the graph computes or publishes (the
//!   replay's output hash is the same with and without it).
//!
//! What it costs: one copy of about 27 KiB per frame on the publishing thread (an
//! [`OutputRecord`]; the predictions are most of it); the ring's memory (`slots` × that,
//! 1.7 MiB by default); a writer thread that polls every millisecond while idle; about
//! 8 KiB of file per frame on the built-in drive (uncompressed; grows with the objects).
//!
//! What it must never do: block or allocate in `publish`, or make a frame late.

pub mod encode;
pub mod frame;
pub mod images;
pub mod ring;
pub mod writer;

/// The Foxglove SDK this crate writes with (its message types decode a recording).
pub use foxglove;
pub use frame::{record_ring, OutputRecord, RecordCounters, RecordPublisher, RecordReader};
pub use images::{FeedImages, ImageSource, ImageStats};
pub use writer::{RecordSummary, Recorder, RecorderConfig, DEFAULT_SLOTS};

use std::path::PathBuf;

/// Why a recording could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The output file could not be created (or its size read).
    #[error("cannot create the recording {path}: {source} (check that the folder exists and is writable)")]
    Create {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The Foxglove SDK refused (starting or finishing the file, creating a channel).
    #[error("cannot {what}: {source}")]
    Foxglove {
        /// What was being done.
        what: &'static str,
        /// Cause.
        #[source]
        source: Box<foxglove::FoxgloveError>,
    },
    /// The writer thread could not be started.
    #[error("cannot start the recording's writer thread: {source}")]
    Thread {
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The writer thread panicked (a bug: please report it); the file is incomplete.
    #[error(
        "the recording's writer thread panicked; the file is incomplete (a bug: please report it)"
    )]
    WriterPanicked,
}
