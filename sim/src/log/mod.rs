//! Sensor logs as MCAP files with the ROS 2 profile: write them, read them back, and recover
//! what can be recovered from damaged ones.
//!
//! Format contract (what [`LogWriter`] writes and [`LogReader`] expects):
//! - header profile `ros2`, schema encoding `ros2msg` (text from [`crate::msgs`]), message
//!   encoding `cdr`; zstd-compressed chunks (level 3, ~4 MiB, single-threaded so the file is
//!   byte-identical for identical input on any machine); summary with statistics, chunk indexes
//!   and message indexes.
//! - topics: `/cam/<name>/image_raw` (`sensor_msgs/msg/Image`, `rgb8`, frame `cam_<name>`),
//!   `/cam/<name>/camera_info` (`sensor_msgs/msg/CameraInfo`, once at t = 0), `/ego/odom`
//!   (`nav_msgs/msg/Odometry`, `map` → `base_link`), `/tf_static` (`tf2_msgs/msg/TFMessage`:
//!   `base_link` → `cam_<name>` optical frames, once at t = 0), `/ground_truth`
//!   (`redline_msgs/msg/GroundTruth`), `/map` (`redline_msgs/msg/RoadMap`, once).
//!   Log time = publish time = header stamp (except where a caller writes a late message on
//!   purpose with [`LogWriter::write_raw_image`]).
//!
//! Reading contract:
//! - An intact file is read through its summary: [`LogReader::messages`] reads only the
//!   chunks that overlap the time range and hold a wanted channel (seek by chunk index).
//! - A file without a usable summary (truncated, crashed recorder, damaged footer) is still
//!   opened: a linear scan at open decompresses every readable chunk (a full pass over the
//!   file), recovers every message it can — including the complete messages at the start of a
//!   chunk cut by truncation — and records what was lost in [`LogReader::issues`].
//! - Damage met while reading (corrupt chunk, undecodable message, unknown schema) becomes a
//!   [`LogIssue`] and the message or chunk is skipped; the iteration goes on. Only "nothing can
//!   be read" is a [`LogError`]. Nothing here panics on bad input.
//! - Messages come out in log-time order (ties: file order), so output is deterministic.
//!
//! Cost: this is I/O-side code, not a real-time stage: it allocates per message and per chunk
//! (one reusable read buffer; one decompressed chunk in memory at a time when chunks do not
//! overlap in time). It does not log. It spawns one thread per camera topic of a read, which
//! decodes the camera's images (raw conversion, JPEG/PNG, video, resize) ahead of the reader
//! and ends with the read (`camera_threads`); nothing else.
//!
//! A log is one MCAP file, one ROS 2 SQLite bag file (`.db3`, `db3`), or a ROS 2 bag
//! directory (`metadata.yaml` and the MCAP or `.db3` files it lists, `bag_dir`): a bag split
//! over several files is read as one log — channels matched by topic, schema and encoding
//! across files, their chunks merged in log-time order, the calibration and static
//! transforms of the first file serving the whole recording. Issues of a split bag name
//! their file. A file of a split bag with nothing readable in it (empty: a recorder that
//! died just after starting it; cut before its first record; not a bag file) is an
//! [`LogIssueKind::UnreadableFile`] issue and the other files are read (the first file that
//! opens is then the log's first); only a bag with no readable file is an error. A `.db3` file is read by the same contract: its topics are the channels, its
//! messages table's leaf pages (in row order, ~4 MiB of rows each) the blocks merged in
//! log-time order, a row's `timestamp` the log time; a damaged page is an issue and its
//! rows are skipped (SQLite keeps no checksums, so damage inside a message's bytes is not
//! seen here: the decoders meet it). Any of these files compressed whole with zstd (a
//! file-compressed bag's `.mcap.zstd`, `.db3.zstd`; told by its magic) is decompressed at
//! open into an unnamed temporary file and read from there (`unpack`); byte offsets in its
//! issues are offsets in the decompressed file.
//!
//! Layout: `bag_dir` (a bag directory's files), `split` (a split bag's files joined into
//! one log), `unpack` (files compressed whole), `sqlite` (the read-only SQLite file
//! reader), `db3` (a `.db3` bag file's topics and messages as channels and blocks, and the
//! reader's `.db3` opening and block reads), `writer` ([`LogWriter`]), `summary` (the
//! canonical, byte-deterministic summary section the writer finishes with), `reader`
//! ([`LogReader`]: open, indexed reads), `merge` (the time-ordered merge of the blocks),
//! `recovery` (chunk reading that tolerates damage and the linear scan of files without a
//! usable summary), `decode` (raw CDR message → [`Payload`]). This module
//! holds the shared types, errors and topic names.

mod bag_dir;
mod camera_threads;
mod db3;
mod decode;
mod limits;
mod merge;
mod reader;
mod records;
mod recovery;
mod rig;
pub mod sensor_map;
mod split;
mod sqlite;
mod summary;
mod unpack;
mod writer;

pub use limits::ReadLimits;
pub use reader::{LogReader, EGO_PREROLL_NS};
pub use records::{Place, RecordError};
pub use rig::{CameraSample, ChannelStats};
pub use sensor_map::{CameraTopics, Rig, RigError, SensorMap, Stamps};
pub use unpack::compressed_files;
pub use writer::LogWriter;

use std::path::{Path, PathBuf};

use mcap::McapError;

use crate::cdr::CdrError;
pub use crate::msgs::ImageIssue;
use crate::types::{EgoState, GroundTruth, RgbImage};

/// Odometry topic.
pub const TOPIC_ODOM: &str = "/ego/odom";
/// Static transforms topic.
pub const TOPIC_TF_STATIC: &str = "/tf_static";
/// Ground-truth topic.
pub const TOPIC_GROUND_TRUTH: &str = "/ground_truth";
/// Road map topic.
pub const TOPIC_MAP: &str = "/map";
/// zstd level used for chunks.
pub const ZSTD_LEVEL: u32 = 3;
/// Target uncompressed chunk size, bytes.
pub const CHUNK_SIZE: u64 = 4 * 1024 * 1024;
/// At most this many issues are kept; a last issue says how many more were dropped.
pub const MAX_ISSUES: usize = 1000;

const MCAP_MAGIC: &[u8] = &[0x89, b'M', b'C', b'A', b'P', 0x30, b'\r', b'\n'];

/// `/cam/<name>/image_raw`.
pub fn image_topic(cam: &str) -> String {
    format!("/cam/{cam}/image_raw")
}

/// `/cam/<name>/camera_info`.
pub fn camera_info_topic(cam: &str) -> String {
    format!("/cam/{cam}/camera_info")
}

fn camera_of_topic<'t>(topic: &'t str, leaf: &str) -> Option<&'t str> {
    let name = topic.strip_prefix("/cam/")?.strip_suffix(leaf)?;
    let name = name.strip_suffix('/')?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// Errors writing or opening a log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be created, read or written.
    #[error("I/O error on log {path}: {source}; check the path, permissions and free disk space")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A ROS 2 bag directory redline cannot read (see `bag_dir`): the reason says what to do.
    #[error("ROS 2 bag {path}: {why}")]
    Bag {
        /// The bag directory.
        path: PathBuf,
        /// What is wrong and what to do.
        why: String,
    },
    /// A ROS 2 bag file in SQLite storage (`.db3`) redline cannot read.
    #[error("{path}: a SQLite file redline cannot read as a ROS 2 bag: {why}")]
    Db3 {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A log file compressed whole (`.mcap.zstd`, `.db3.zstd`) could not be decompressed
    /// for reading: the temporary directory could not take it (see `unpack`); the reason
    /// says what to do.
    #[error("{path}: {why}")]
    Unpack {
        /// The compressed file.
        path: PathBuf,
        /// What failed and what to do.
        why: String,
    },
    /// A log file compressed whole breaks before any readable log: nothing in it can be
    /// read.
    #[error("{path}: {why}")]
    BrokenStream {
        /// The compressed file.
        path: PathBuf,
        /// Where the stream breaks and why nothing before it reads.
        why: String,
    },
    /// The file starts with neither the MCAP magic nor SQLite's (nor zstd's).
    #[error("{path} is neither an MCAP file nor a SQLite (.db3) ROS 2 bag, nor one compressed with zstd (no magic at its start); pass a log written by redline or `ros2 bag record`, or a ROS 2 bag directory")]
    NotMcap {
        /// The file.
        path: PathBuf,
    },
    /// No camera could be found the default way (`/cam/<name>/camera_info`).
    #[error("log {path} has no readable /cam/<name>/camera_info message, so its cameras are unknown (image topics in the log: {found}); name them in a [sensors] table of the config: `redline log info {path}` prints one to start from")]
    NoCameras {
        /// The file.
        path: PathBuf,
        /// The log's image-like topics.
        found: String,
    },
    /// The log does not match the config's `[sensors]` table.
    #[error("log {path} does not match the [sensors] table: {what} (image topics in the log: {found}); `redline log info {path}` lists its topics and suggests a [sensors] table")]
    SensorMismatch {
        /// The file.
        path: PathBuf,
        /// What does not match.
        what: String,
        /// The log's image-like topics.
        found: String,
    },
    /// The `[sensors]` calibration file cannot be used.
    #[error(transparent)]
    Rig(#[from] RigError),
    /// The MCAP library reported an error.
    #[error("MCAP error on log {path}: {what}")]
    Mcap {
        /// The file.
        path: PathBuf,
        /// The library's message.
        what: String,
    },
    /// A camera index out of range was passed to the writer.
    #[error("camera index {cam} is out of range: the log was created with {cameras} cameras")]
    NoSuchCamera {
        /// The index given.
        cam: usize,
        /// The number of cameras.
        cameras: usize,
    },
    /// An image's data length does not match its size.
    #[error("image {width}x{height} has {len} bytes, expected width*height*3 = {}; fix the renderer's buffer", *width as u64 * *height as u64 * 3)]
    BadImage {
        /// Width, px.
        width: u32,
        /// Height, px.
        height: u32,
        /// Data length.
        len: usize,
    },
    /// A message could not be encoded.
    #[error("cannot encode a {what} message: {source}")]
    Encode {
        /// Which message.
        what: &'static str,
        /// Why.
        #[source]
        source: CdrError,
    },
    /// The map's centre line is malformed.
    #[error("map centre line has {0} points; give at least one (x, y) point")]
    EmptyMap(usize),
    /// The frame period could not be inferred.
    #[error("cannot infer the frame period of log {path}: its odometry and first camera have fewer than two distinct stamps (header stamps left zero by the driver?); set `stamps = \"log_time\"` in the config's [sensors] table to place messages by the time they were recorded")]
    UnknownPeriod {
        /// The file.
        path: PathBuf,
    },
}

impl LogError {
    /// Whether the error says the file itself holds nothing readable (not a bag file, cut
    /// before its first record, a broken compressed stream), as opposed to the environment
    /// (I/O, temporary space) or the configuration: a split bag skips such a file.
    pub(super) fn is_unreadable_file(&self) -> bool {
        matches!(
            self,
            LogError::NotMcap { .. }
                | LogError::Db3 { .. }
                | LogError::Mcap { .. }
                | LogError::BrokenStream { .. }
        )
    }
}

/// Kinds of damage found in a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogIssueKind {
    /// The file ends in the middle of the data section: messages after the cut are lost.
    Truncated,
    /// A chunk failed its CRC or decompression: its messages are skipped.
    CorruptChunk,
    /// A channel's schema or encoding is not one redline reads: its messages are skipped.
    UnknownSchema,
    /// A message failed to decode (or to convert): it is skipped.
    UndecodableMessage,
    /// The summary/indexes are missing or unreadable: the file was read by a linear scan.
    UnindexedFile,
    /// A camera has no `base_link` → `cam_<name>` transform: its mount pose is zero.
    MissingTransform,
    /// A length, size or count is over one of the [`ReadLimits`]: the record, chunk or
    /// camera is skipped (or, for `max_buffered_bytes`, messages may leave log-time order).
    OverLimit,
    /// Too many issues: the rest were not recorded.
    TooManyIssues,
    /// A camera's calibration has lens distortion in a model redline does not know: its
    /// images are used as ideal pinholes, not undistorted.
    LensDistortion,
    /// A camera's images are another size than the rig's smallest camera: they are resized
    /// to it when read, and its intrinsics scaled (a note, not damage).
    ResizedCamera,
    /// A file of a split bag has nothing readable in it (empty, cut before its first
    /// record, not a bag file): its messages are missing; the other files are read.
    UnreadableFile,
}

/// One problem found in a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogIssue {
    /// What kind.
    pub kind: LogIssueKind,
    /// Where and what, for a person.
    pub detail: String,
}

/// Writer tuning. The defaults ([`CHUNK_SIZE`], [`ZSTD_LEVEL`]) suit camera logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// Target uncompressed chunk size, bytes (smaller chunks: finer seeking, worse ratio).
    pub chunk_size: u64,
    /// zstd level, 1..=19 (3: fast with a good ratio).
    pub zstd_level: u32,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            chunk_size: CHUNK_SIZE,
            zstd_level: ZSTD_LEVEL,
        }
    }
}

/// What [`LogWriter::finish`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStats {
    /// Messages written.
    pub messages: u64,
    /// File size, bytes.
    pub bytes: u64,
    /// Messages per topic, in channel registration order.
    pub per_topic: Vec<(String, u64)>,
}

/// The road map of a log.
#[derive(Clone, Debug, PartialEq)]
pub struct RoadMapData {
    /// Number of lanes.
    pub lanes: u32,
    /// Lane width, m.
    pub lane_width: f64,
    /// Centre line points (x, y), m.
    pub centre: Vec<(f64, f64)>,
}

/// A decoded message.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// A camera image; `image` is `Err` when it cannot be used (wrong encoding or size, bad
    /// layout) — the rest of the frame can still be.
    Image {
        /// Camera index (rig order, see [`LogReader::cameras`]).
        cam: usize,
        /// The image or why it is unusable.
        image: Result<RgbImage, ImageIssue>,
    },
    /// Ego odometry.
    Odometry(EgoState),
    /// Ground truth.
    GroundTruth(GroundTruth),
    /// The road map.
    Map(RoadMapData),
    /// A camera calibration (already folded into [`LogReader::cameras`]).
    CameraInfo,
    /// Transforms (already folded into [`LogReader::cameras`]).
    Tf,
    /// A camera's JPEG stream, kept compressed for the graph's `jpeg_decode` stage (a reader set
    /// to [`LogReader::set_keep_jpeg`]); its size was checked against the camera's.
    Jpeg {
        /// Camera index (rig order).
        cam: usize,
        /// The JPEG bytes.
        data: Vec<u8>,
    },
    /// A message of a type redline reads on a topic the rig does not use (e.g. odometry
    /// from a second localiser); it only advances time.
    Unused,
}

/// One message read from a log.
#[derive(Clone, Debug, PartialEq)]
pub struct LogMessage {
    /// Topic.
    pub topic: String,
    /// MCAP log time (arrival), ns.
    pub log_time_ns: u64,
    /// Header stamp (acquisition), ns; 0 for messages without a header.
    pub stamp_ns: u64,
    /// Decoded content.
    pub payload: Payload,
}

fn mcap_err(path: &Path, e: McapError) -> LogError {
    match e {
        McapError::Io(source) => LogError::Io {
            path: path.to_path_buf(),
            source,
        },
        e => LogError::Mcap {
            path: path.to_path_buf(),
            what: e.to_string(),
        },
    }
}

/// Little-endian `u64` at `at`, or `None` when `b` is too short.
fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
/// Little-endian `u32` at `at`, or `None` when `b` is too short.
fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        assert_eq!(
            camera_of_topic("/cam/front/image_raw", "image_raw"),
            Some("front")
        );
        assert_eq!(
            camera_of_topic("/cam/front/camera_info", "camera_info"),
            Some("front")
        );
        assert_eq!(camera_of_topic("/cam//image_raw", "image_raw"), None);
        assert_eq!(camera_of_topic("/cam/a/b/image_raw", "image_raw"), None);
        assert_eq!(camera_of_topic("/ego/odom", "image_raw"), None);
    }
}
