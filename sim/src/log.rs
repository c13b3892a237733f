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
//! overlap in time). It spawns no threads and does not log.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use mcap::records::{self, op, MessageHeader, Record};
use mcap::sans_io::{SummaryReadEvent, SummaryReader, SummaryReaderOptions};
use mcap::{Compression, McapError, WriteOptions};

use crate::cdr::{CdrError, CdrWriter};
pub use crate::msgs::ImageIssue;
use crate::msgs::{
    CameraInfo, GroundTruthMsg, Header, Image, Odometry, RoadMap, RosMessage, TfMessage,
};
use crate::types::{CameraSpec, EgoState, GroundTruth, RgbImage};

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
    /// The file does not start with the MCAP magic.
    #[error("{path} is not an MCAP file (no MCAP magic at its start); pass a log written by redline or ros2 bag")]
    NotMcap {
        /// The file.
        path: PathBuf,
    },
    /// No `camera_info` message could be read.
    #[error("log {path} has no readable /cam/<name>/camera_info message, so its cameras are unknown; the log is not a redline sensor log or its first chunk is lost")]
    NoCameras {
        /// The file.
        path: PathBuf,
    },
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
    #[error("cannot infer the frame period of log {path}: fewer than two odometry or image stamps; pass the period explicitly")]
    UnknownPeriod {
        /// The file.
        path: PathBuf,
    },
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
    /// Too many issues: the rest were not recorded.
    TooManyIssues,
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

// ---------------------------------------------------------------------------------------------
// Writer

#[derive(Debug)]
struct OutChannel {
    id: u16,
    topic: String,
    count: u64,
    sequence: u32,
}

#[derive(Debug, Clone, Copy)]
struct CamChannels {
    image: usize,
    info: usize,
}

/// Writes a sensor log. Drop without [`LogWriter::finish`] still finishes the file but
/// swallows errors: call `finish`.
pub struct LogWriter {
    path: PathBuf,
    mcap: mcap::Writer<BufWriter<File>>,
    channels: Vec<OutChannel>,
    cams: Vec<CamChannels>,
    odom: usize,
    tf: usize,
    gt: usize,
    map: usize,
    buf: Vec<u8>,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("path", &self.path)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl LogWriter {
    /// Creates the file, registers schemas and channels, and writes each camera's
    /// `camera_info` and the `/tf_static` mounts at t = 0.
    pub fn create(path: &Path, cameras: &[CameraSpec]) -> Result<LogWriter, LogError> {
        Self::create_with(path, cameras, LogOptions::default())
    }

    /// [`LogWriter::create`] with explicit chunk size and compression level.
    pub fn create_with(
        path: &Path,
        cameras: &[CameraSpec],
        options: LogOptions,
    ) -> Result<LogWriter, LogError> {
        let io = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io)?;
        let opts = WriteOptions::new()
            .profile("ros2")
            .library("redline-sim")
            .compression(Some(Compression::Zstd))
            .compression_level(options.zstd_level)
            .compression_threads(0)
            .chunk_size(Some(options.chunk_size.max(1)));
        let mcap = opts
            .create(BufWriter::with_capacity(1 << 20, file))
            .map_err(|e| mcap_err(path, e))?;
        let mut w = LogWriter {
            path: path.to_path_buf(),
            mcap,
            channels: Vec::new(),
            cams: Vec::new(),
            odom: 0,
            tf: 0,
            gt: 0,
            map: 0,
            buf: Vec::new(),
        };
        let image_schema = w.schema::<Image>()?;
        let info_schema = w.schema::<CameraInfo>()?;
        for c in cameras {
            let image = w.channel(image_schema, &image_topic(&c.name))?;
            let info = w.channel(info_schema, &camera_info_topic(&c.name))?;
            w.cams.push(CamChannels { image, info });
        }
        let s = w.schema::<Odometry>()?;
        w.odom = w.channel(s, TOPIC_ODOM)?;
        let s = w.schema::<TfMessage>()?;
        w.tf = w.channel(s, TOPIC_TF_STATIC)?;
        let s = w.schema::<GroundTruthMsg>()?;
        w.gt = w.channel(s, TOPIC_GROUND_TRUTH)?;
        let s = w.schema::<RoadMap>()?;
        w.map = w.channel(s, TOPIC_MAP)?;

        for (i, c) in cameras.iter().enumerate() {
            let ch = w.cams[i].info;
            w.put(ch, 0, &CameraInfo::from_spec(c))?;
        }
        let tf = w.tf;
        w.put(tf, 0, &TfMessage::camera_mounts(cameras))?;
        Ok(w)
    }

    fn schema<M: RosMessage>(&mut self) -> Result<u16, LogError> {
        self.mcap
            .add_schema(M::NAME, "ros2msg", M::schema().as_bytes())
            .map_err(|e| mcap_err(&self.path, e))
    }

    fn channel(&mut self, schema: u16, topic: &str) -> Result<usize, LogError> {
        let id = self
            .mcap
            .add_channel(schema, topic, "cdr", &BTreeMap::new())
            .map_err(|e| mcap_err(&self.path, e))?;
        self.channels.push(OutChannel {
            id,
            topic: topic.to_string(),
            count: 0,
            sequence: 0,
        });
        Ok(self.channels.len() - 1)
    }

    fn put<M: RosMessage>(&mut self, ch: usize, log_time: u64, m: &M) -> Result<(), LogError> {
        let mut w = CdrWriter::with_buffer(std::mem::take(&mut self.buf));
        m.write(&mut w);
        self.put_encoded(ch, log_time, w, M::NAME)
    }

    fn put_encoded(
        &mut self,
        ch: usize,
        log_time: u64,
        w: CdrWriter,
        what: &'static str,
    ) -> Result<(), LogError> {
        let data = w
            .try_finish()
            .map_err(|source| LogError::Encode { what, source })?;
        let c = &mut self.channels[ch];
        let header = MessageHeader {
            channel_id: c.id,
            sequence: c.sequence,
            log_time,
            publish_time: log_time,
        };
        c.sequence = c.sequence.wrapping_add(1);
        c.count += 1;
        let res = self.mcap.write_to_known_channel(&header, &data);
        self.buf = data;
        res.map_err(|e| mcap_err(&self.path, e))
    }

    /// Writes the road map at t = 0 (call once; readers use the first map message).
    pub fn write_map(
        &mut self,
        lanes: u32,
        lane_width: f64,
        centre: &[(f64, f64)],
    ) -> Result<(), LogError> {
        if centre.is_empty() {
            return Err(LogError::EmptyMap(0));
        }
        let m = RoadMap {
            header: Header::new(0, "map"),
            lanes,
            lane_width,
            centre_x: centre.iter().map(|p| p.0).collect(),
            centre_y: centre.iter().map(|p| p.1).collect(),
        };
        let ch = self.map;
        self.put(ch, 0, &m)?;
        Ok(())
    }

    fn cam(&self, cam: usize) -> Result<CamChannels, LogError> {
        self.cams.get(cam).copied().ok_or(LogError::NoSuchCamera {
            cam,
            cameras: self.cams.len(),
        })
    }

    /// Writes one `rgb8` image of camera `cam` (rig order) taken at `stamp_ns`. The image may
    /// differ in size from the camera's calibration (readers then report
    /// [`ImageIssue::WrongSize`]) but its data must be `width * height * 3` bytes.
    pub fn write_image(
        &mut self,
        cam: usize,
        stamp_ns: u64,
        img: &RgbImage,
    ) -> Result<(), LogError> {
        let ch = self.cam(cam)?.image;
        if img.data.len() as u64 != img.width as u64 * img.height as u64 * 3 {
            return Err(LogError::BadImage {
                width: img.width,
                height: img.height,
                len: img.data.len(),
            });
        }
        let frame = format!("cam_{}", self.camera_name(cam));
        let mut w = CdrWriter::with_buffer(std::mem::take(&mut self.buf));
        Image::encode_rgb(&mut w, &Header::new(stamp_ns, &frame), img);
        self.put_encoded(ch, stamp_ns, w, Image::SCHEMA_NAME)
    }

    fn camera_name(&self, cam: usize) -> &str {
        let t = &self.channels[self.cams[cam].image].topic;
        camera_of_topic(t, "image_raw").unwrap_or("")
    }

    /// Writes an arbitrary image message on camera `cam`'s topic with an explicit log time:
    /// for fault injection (late images, other encodings, corrupt layouts).
    pub fn write_raw_image(
        &mut self,
        cam: usize,
        log_time_ns: u64,
        msg: &Image,
    ) -> Result<(), LogError> {
        let ch = self.cam(cam)?.image;
        self.put(ch, log_time_ns, msg)
    }

    /// Writes the ego odometry at its stamp.
    pub fn write_odometry(&mut self, ego: &EgoState) -> Result<(), LogError> {
        let ch = self.odom;
        self.put(ch, ego.stamp_ns, &Odometry::from_ego(ego))
    }

    /// Writes ground truth at its stamp.
    pub fn write_ground_truth(&mut self, gt: &GroundTruth) -> Result<(), LogError> {
        let ch = self.gt;
        self.put(ch, gt.stamp_ns, &GroundTruthMsg::from_gt(gt))
    }

    /// Flushes the last chunk, writes the summary and footer, and reports what was written.
    pub fn finish(mut self) -> Result<LogStats, LogError> {
        self.mcap.finish().map_err(|e| mcap_err(&self.path, e))?;
        let path = self.path.clone();
        let per_topic: Vec<(String, u64)> = self
            .channels
            .iter()
            .map(|c| (c.topic.clone(), c.count))
            .collect();
        let messages = per_topic.iter().map(|p| p.1).sum();
        let mut out = self.mcap.into_inner();
        out.flush().map_err(|source| LogError::Io {
            path: path.clone(),
            source,
        })?;
        let mut file = out.into_inner().map_err(|e| LogError::Io {
            path: path.clone(),
            source: e.into_error(),
        })?;
        canonicalize_summary(&mut file).map_err(|source| LogError::Io {
            path: path.clone(),
            source,
        })?;
        let bytes = file
            .metadata()
            .map_err(|source| LogError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        Ok(LogStats {
            messages,
            bytes,
            per_topic,
        })
    }
}

/// CRC-32 (IEEE), as MCAP uses.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The mcap crate writes the summary's schema and channel records in `HashMap` order, which
/// differs from run to run. Sort each run of them by id in place (lengths and group offsets do
/// not change) and fix the summary CRC, so that identical input gives an identical file.
fn canonicalize_summary(f: &mut File) -> std::io::Result<()> {
    const FOOTER: u64 = 1 + 8 + 20;
    let len = f.metadata()?.len();
    if len < 8 + FOOTER + 8 {
        return Ok(());
    }
    let footer_pos = len - 8 - FOOTER;
    let mut footer = [0u8; FOOTER as usize];
    f.seek(SeekFrom::Start(footer_pos))?;
    f.read_exact(&mut footer)?;
    let (Some(summary_start), Some(offsets_start), Some(saved_crc)) = (
        read_u64(&footer, 9),
        read_u64(&footer, 17),
        read_u32(&footer, 25),
    ) else {
        return Ok(());
    };
    if footer[0] != op::FOOTER || summary_start == 0 || summary_start > footer_pos {
        return Ok(());
    }
    let end = if offsets_start != 0 {
        offsets_start
    } else {
        footer_pos
    };
    let mut section = vec![0u8; (footer_pos + 25 - summary_start) as usize];
    f.seek(SeekFrom::Start(summary_start))?;
    f.read_exact(&mut section)?;
    let body_end = (end.saturating_sub(summary_start) as usize).min(section.len());
    // (opcode, start, end) of each record
    let mut recs = Vec::new();
    let mut pos = 0usize;
    while pos + 9 <= body_end {
        let l = read_u64(&section, pos + 1).unwrap_or(u64::MAX);
        let Some(next) = usize::try_from(l)
            .ok()
            .and_then(|l| (pos + 9).checked_add(l))
        else {
            return Ok(());
        };
        if next > body_end {
            return Ok(());
        }
        recs.push((section[pos], pos, next));
        pos = next;
    }
    let mut out = section.clone();
    let mut i = 0;
    while i < recs.len() {
        let opc = recs[i].0;
        let mut j = i;
        while j < recs.len() && recs[j].0 == opc {
            j += 1;
        }
        if opc == op::SCHEMA || opc == op::CHANNEL {
            let mut run: Vec<&[u8]> = recs[i..j].iter().map(|r| &section[r.1..r.2]).collect();
            run.sort_by_key(|r| {
                u16::from_le_bytes([
                    r.get(9).copied().unwrap_or(0),
                    r.get(10).copied().unwrap_or(0),
                ])
            });
            let mut at = recs[i].1;
            for r in run {
                out[at..at + r.len()].copy_from_slice(r);
                at += r.len();
            }
        }
        i = j;
    }
    if out != section {
        f.seek(SeekFrom::Start(summary_start))?;
        f.write_all(&out[..body_end])?;
        if saved_crc != 0 {
            f.seek(SeekFrom::Start(footer_pos + 25))?;
            f.write_all(&crc32(&out).to_le_bytes())?;
        }
        f.flush()?;
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------------
// Reader

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Image,
    CameraInfo,
    Odometry,
    Tf,
    GroundTruth,
    Map,
}

#[derive(Clone, Debug)]
struct InChannel {
    topic: String,
    schema: String,
    encoding: String,
}

#[derive(Clone, Debug)]
struct Block {
    /// File offset of the record's opcode.
    offset: u64,
    /// Bytes of the record body present in the file.
    body_len: u64,
    /// A loose (unchunked) message record instead of a chunk.
    loose: bool,
    start_ns: u64,
    end_ns: u64,
    /// Channels with messages in the block; `None` when unknown.
    channels: Option<BTreeSet<u16>>,
    /// Damage already reported at open: skip.
    skip: bool,
}

#[derive(Debug)]
struct RawMsg {
    key: (u64, usize, usize),
    channel: u16,
    data: Vec<u8>,
}

/// Reads a sensor log (see the module docs for what it promises on damaged files).
pub struct LogReader {
    path: PathBuf,
    file: File,
    file_len: u64,
    indexed: bool,
    channels: BTreeMap<u16, InChannel>,
    blocks: Vec<Block>,
    cameras: Vec<CameraSpec>,
    /// image channel id → camera index
    image_cams: BTreeMap<u16, usize>,
    map: Option<RoadMapData>,
    range: (u64, u64),
    issues: Vec<LogIssue>,
    dropped_issues: u64,
    chunks_read: u64,
    buf: Vec<u8>,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("path", &self.path)
            .field("indexed", &self.indexed)
            .field("cameras", &self.cameras.len())
            .field("blocks", &self.blocks.len())
            .field("issues", &self.issues.len())
            .finish_non_exhaustive()
    }
}

/// Outcome of reading one chunk's records.
struct ChunkRead {
    records: Vec<Record<'static>>,
    error: Option<String>,
    /// The chunk's record was cut by the end of the file.
    partial: bool,
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Decompresses a chunk record body (possibly cut short) into its records.
fn read_chunk(body: &[u8], record_len: u64) -> ChunkRead {
    let partial = (body.len() as u64) < record_len;
    let fail = |why: &str| ChunkRead {
        records: Vec::new(),
        error: Some(why.to_string()),
        partial,
    };
    let (Some(start), Some(end), Some(usize_), Some(crc), Some(clen)) = (
        read_u64(body, 0),
        read_u64(body, 8),
        read_u64(body, 16),
        read_u32(body, 24),
        read_u32(body, 28),
    ) else {
        return fail("chunk header cut short");
    };
    let name_end = 32 + clen as usize;
    let (Some(name), Some(csize)) = (body.get(32..name_end), read_u64(body, name_end)) else {
        return fail("chunk header cut short");
    };
    let Ok(compression) = std::str::from_utf8(name) else {
        return fail("chunk compression name is not UTF-8");
    };
    let data_start = name_end + 8;
    let avail = body.len().saturating_sub(data_start) as u64;
    if !partial && csize > avail {
        return fail("chunk compressed size exceeds its record");
    }
    let data = &body[data_start.min(body.len())..data_start + csize.min(avail) as usize];
    let header = records::ChunkHeader {
        message_start_time: start,
        message_end_time: end,
        uncompressed_size: usize_,
        uncompressed_crc: crc,
        compression: compression.to_string(),
        compressed_size: csize,
    };
    let reader = match mcap::read::ChunkReader::new(header, data) {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    let mut records = Vec::new();
    let mut error = None;
    for r in reader {
        match r {
            Ok(r) => records.push(r.into_owned()),
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    if error.is_some() && !partial {
        // A complete chunk that fails (CRC, decompression) is dropped whole: records decoded
        // before the failure cannot be trusted.
        records.clear();
    }
    ChunkRead {
        records,
        error,
        partial,
    }
}

impl LogReader {
    /// Opens a log. An intact file is read through its summary and indexes. A file whose
    /// summary is missing or damaged (truncated, crashed recorder) is still opened: it falls back
    /// to a linear scan that recovers every readable message and records what was lost in
    /// [`LogReader::issues`]. Errors only when nothing can be read: not an MCAP file,
    /// unreadable file, no `camera_info`.
    pub fn open(path: &Path) -> Result<LogReader, LogError> {
        let io = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut magic = [0u8; 8];
        let n = read_up_to(&mut file, &mut magic).map_err(io)?;
        if n < 8 || magic != MCAP_MAGIC {
            return Err(LogError::NotMcap {
                path: path.to_path_buf(),
            });
        }
        let mut r = LogReader {
            path: path.to_path_buf(),
            file,
            file_len,
            indexed: false,
            channels: BTreeMap::new(),
            blocks: Vec::new(),
            cameras: Vec::new(),
            image_cams: BTreeMap::new(),
            map: None,
            range: (0, 0),
            issues: Vec::new(),
            dropped_issues: 0,
            chunks_read: 0,
            buf: Vec::new(),
        };
        match r.read_summary() {
            Ok(Some(summary)) if r.use_summary(&summary) => {}
            Ok(found) => {
                let why = if found.is_some() {
                    "its summary has no usable chunk index"
                } else {
                    "it has no summary section"
                };
                r.issue(
                    LogIssueKind::UnindexedFile,
                    format!("{why}; read by a linear scan (slower)"),
                );
                r.scan().map_err(io)?;
            }
            Err(e) => {
                r.issue(
                    LogIssueKind::UnindexedFile,
                    format!("its summary/footer is unreadable ({e}); read by a linear scan, which recovers every complete message"),
                );
                r.scan().map_err(io)?;
            }
        }
        r.blocks.sort_by_key(|b| (b.start_ns, b.offset));
        r.load_rig()?;
        Ok(r)
    }

    fn issue(&mut self, kind: LogIssueKind, detail: String) {
        let issue = LogIssue { kind, detail };
        if self.issues.contains(&issue) {
            return;
        }
        if self.issues.len() + 1 < MAX_ISSUES {
            self.issues.push(issue);
        } else {
            self.dropped_issues += 1;
            let detail = format!("{} more issues were not recorded", self.dropped_issues);
            match self.issues.last_mut() {
                Some(last) if last.kind == LogIssueKind::TooManyIssues => last.detail = detail,
                _ => self.issues.push(LogIssue {
                    kind: LogIssueKind::TooManyIssues,
                    detail,
                }),
            }
        }
    }

    fn read_summary(&mut self) -> Result<Option<mcap::Summary>, McapError> {
        self.file.seek(SeekFrom::Start(0))?;
        let mut sr = SummaryReader::new_with_options(
            SummaryReaderOptions::default().with_file_size(self.file_len),
        );
        while let Some(event) = sr.next_event() {
            match event? {
                SummaryReadEvent::ReadRequest(n) => {
                    let got = self.file.read(sr.insert(n))?;
                    sr.notify_read(got);
                }
                SummaryReadEvent::SeekRequest(to) => {
                    let pos = self.file.seek(to)?;
                    sr.notify_seeked(pos);
                }
            }
        }
        Ok(sr.finish())
    }

    /// Takes channels and chunk indexes from the summary; false when it is unusable.
    fn use_summary(&mut self, s: &mcap::Summary) -> bool {
        let data_chunks = s.stats.as_ref().map(|st| st.chunk_count).unwrap_or(0);
        if s.chunk_indexes.is_empty() && data_chunks > 0 {
            return false;
        }
        if s.chunk_indexes.is_empty() && s.stats.as_ref().is_some_and(|st| st.message_count > 0) {
            // unchunked file with messages: the linear scan reads it
            return false;
        }
        for ci in &s.chunk_indexes {
            if ci.chunk_length < 9
                || ci.chunk_start_offset.saturating_add(ci.chunk_length) > self.file_len
            {
                return false;
            }
        }
        for (id, ch) in &s.channels {
            self.channels.insert(
                *id,
                InChannel {
                    topic: ch.topic.clone(),
                    schema: ch
                        .schema
                        .as_ref()
                        .map(|s| s.name.clone())
                        .unwrap_or_default(),
                    encoding: ch.message_encoding.clone(),
                },
            );
        }
        self.blocks = s
            .chunk_indexes
            .iter()
            .map(|ci| Block {
                offset: ci.chunk_start_offset,
                body_len: ci.chunk_length - 9,
                loose: false,
                start_ns: ci.message_start_time,
                end_ns: ci.message_end_time,
                channels: (!ci.message_index_offsets.is_empty())
                    .then(|| ci.message_index_offsets.keys().copied().collect()),
                skip: false,
            })
            .collect();
        self.range = match &s.stats {
            Some(st) => (st.message_start_time, st.message_end_time),
            None => (
                self.blocks.iter().map(|b| b.start_ns).min().unwrap_or(0),
                self.blocks.iter().map(|b| b.end_ns).max().unwrap_or(0),
            ),
        };
        self.indexed = true;
        true
    }

    fn add_channel_record(
        &mut self,
        c: &records::Channel,
        schemas: &BTreeMap<u16, (String, String)>,
    ) {
        let schema = schemas
            .get(&c.schema_id)
            .map(|s| s.0.clone())
            .unwrap_or_default();
        self.channels.entry(c.id).or_insert(InChannel {
            topic: c.topic.clone(),
            schema,
            encoding: c.message_encoding.clone(),
        });
    }

    /// Linear scan of the data section: finds chunks and loose messages, learns channels.
    fn scan(&mut self) -> std::io::Result<()> {
        let mut schemas: BTreeMap<u16, (String, String)> = BTreeMap::new();
        let mut pos: u64 = 8;
        let mut min_t = u64::MAX;
        let mut max_t = 0u64;
        let mut ended = false;
        while pos < self.file_len {
            if self.file_len - pos < 9 {
                break;
            }
            let mut head = [0u8; 9];
            self.file.seek(SeekFrom::Start(pos))?;
            self.file.read_exact(&mut head)?;
            let opcode = head[0];
            let len = u64::from_le_bytes(head[1..9].try_into().unwrap_or([0; 8]));
            let avail = self.file_len - pos - 9;
            if opcode == op::FOOTER || opcode == op::DATA_END {
                ended = true;
                break;
            }
            let cut = len > avail;
            if cut && opcode != op::CHUNK {
                break;
            }
            let body_len = len.min(avail);
            match opcode {
                op::CHUNK | op::MESSAGE | op::SCHEMA | op::CHANNEL => {
                    self.buf.resize(body_len as usize, 0);
                    self.file.read_exact(&mut self.buf)?;
                }
                _ => {
                    pos += 9 + len;
                    continue;
                }
            }
            let body = std::mem::take(&mut self.buf);
            match opcode {
                op::CHUNK => {
                    let cr = read_chunk(&body, len);
                    let mut chans = BTreeSet::new();
                    let (mut lo, mut hi) = (u64::MAX, 0u64);
                    for rec in &cr.records {
                        match rec {
                            Record::Schema { header, .. } => {
                                schemas.insert(
                                    header.id,
                                    (header.name.clone(), header.encoding.clone()),
                                );
                            }
                            Record::Channel(c) => self.add_channel_record(c, &schemas),
                            Record::Message { header, .. } => {
                                chans.insert(header.channel_id);
                                lo = lo.min(header.log_time);
                                hi = hi.max(header.log_time);
                            }
                            _ => {}
                        }
                    }
                    let complete_ok = cr.error.is_none() && !cr.partial;
                    if let Some(e) = &cr.error {
                        if cr.partial {
                            self.issue(
                                LogIssueKind::Truncated,
                                format!("the file ends inside the chunk at byte {pos} ({e}); {} complete messages of it were recovered, the rest of the recording is lost", chans_count(&cr.records)),
                            );
                        } else {
                            self.issue(
                                LogIssueKind::CorruptChunk,
                                format!("chunk at byte {pos} is corrupt ({e}); its messages are skipped"),
                            );
                        }
                    } else if cr.partial {
                        self.issue(
                            LogIssueKind::Truncated,
                            format!("the file ends inside the chunk at byte {pos}; its messages were recovered, later data is lost"),
                        );
                    }
                    if !chans.is_empty() {
                        min_t = min_t.min(lo);
                        max_t = max_t.max(hi);
                    }
                    self.blocks.push(Block {
                        offset: pos,
                        body_len,
                        loose: false,
                        start_ns: if chans.is_empty() { 0 } else { lo },
                        end_ns: hi,
                        channels: Some(chans),
                        skip: !complete_ok && !cr.partial,
                    });
                }
                op::MESSAGE => {
                    if let Ok(Record::Message { header, .. }) =
                        mcap::parse_record(op::MESSAGE, &body)
                    {
                        min_t = min_t.min(header.log_time);
                        max_t = max_t.max(header.log_time);
                        self.blocks.push(Block {
                            offset: pos,
                            body_len,
                            loose: true,
                            start_ns: header.log_time,
                            end_ns: header.log_time,
                            channels: Some(BTreeSet::from([header.channel_id])),
                            skip: false,
                        });
                    }
                }
                op::SCHEMA => {
                    if let Ok(Record::Schema { header, .. }) = mcap::parse_record(op::SCHEMA, &body)
                    {
                        schemas.insert(header.id, (header.name, header.encoding));
                    }
                }
                op::CHANNEL => {
                    if let Ok(Record::Channel(c)) = mcap::parse_record(op::CHANNEL, &body) {
                        self.add_channel_record(&c, &schemas);
                    }
                }
                _ => {}
            }
            self.buf = body;
            if cut {
                pos = self.file_len;
                break;
            }
            pos += 9 + len;
        }
        if !ended {
            let already = self
                .issues
                .iter()
                .any(|i| i.kind == LogIssueKind::Truncated);
            if !already {
                self.issue(
                    LogIssueKind::Truncated,
                    format!("the file ends at byte {} without a footer (recorder crashed or file cut); every complete message before that point was recovered", self.file_len.min(pos)),
                );
            }
        }
        self.range = if min_t == u64::MAX {
            (0, 0)
        } else {
            (min_t, max_t)
        };
        Ok(())
    }

    /// Reads camera_info, tf_static and the map, and builds the camera rig.
    fn load_rig(&mut self) -> Result<(), LogError> {
        let kinds: BTreeMap<u16, Kind> = self
            .channels
            .iter()
            .filter_map(|(id, c)| kind_of(&c.schema).map(|k| (*id, k)))
            .collect();
        let wanted: BTreeSet<u16> = kinds
            .iter()
            .filter(|(_, k)| matches!(k, Kind::CameraInfo | Kind::Tf | Kind::Map))
            .map(|(id, _)| *id)
            .collect();
        let mut infos: Vec<(String, CameraInfo)> = Vec::new();
        let mut tfs: Vec<TfMessage> = Vec::new();
        let mut map = None;
        let mut raws = RawIter::new(self, wanted, 0, u64::MAX);
        while let Some(raw) = raws.next_raw() {
            let reader = &mut *raws.reader;
            let Some(ch) = reader.channels.get(&raw.channel).cloned() else {
                continue;
            };
            match kinds.get(&raw.channel) {
                Some(Kind::CameraInfo) => match CameraInfo::from_cdr(&raw.data) {
                    Ok(ci) => {
                        if let Some(name) = camera_of_topic(&ch.topic, "camera_info") {
                            if !infos.iter().any(|(n, _)| n == name) {
                                infos.push((name.to_string(), ci));
                            }
                        } else {
                            reader.issue(LogIssueKind::UnknownSchema, format!("camera_info on topic {} is not /cam/<name>/camera_info; ignored", ch.topic));
                        }
                    }
                    Err(e) => reader.issue(
                        LogIssueKind::UndecodableMessage,
                        format!("{} at {} ns: {e}", ch.topic, raw.key.0),
                    ),
                },
                Some(Kind::Tf) => match TfMessage::from_cdr(&raw.data) {
                    Ok(tf) => tfs.push(tf),
                    Err(e) => reader.issue(
                        LogIssueKind::UndecodableMessage,
                        format!("{} at {} ns: {e}", ch.topic, raw.key.0),
                    ),
                },
                Some(Kind::Map) if map.is_none() => match RoadMap::from_cdr(&raw.data)
                    .map_err(|e| e.to_string())
                    .and_then(map_data)
                {
                    Ok(m) => map = Some(m),
                    Err(e) => reader.issue(
                        LogIssueKind::UndecodableMessage,
                        format!("{} at {} ns: {e}", ch.topic, raw.key.0),
                    ),
                },
                _ => {}
            }
        }
        if infos.is_empty() {
            return Err(LogError::NoCameras {
                path: self.path.clone(),
            });
        }
        for (name, ci) in infos {
            let k = ci.to_intrinsics();
            let child = format!("cam_{name}");
            let mount = tfs
                .iter()
                .flat_map(|t| t.transforms.iter())
                .find(|t| t.child_frame_id == child && t.header.frame_id == "base_link");
            let mut spec = CameraSpec {
                name: name.clone(),
                width: k.width,
                height: k.height,
                fx: k.fx,
                fy: k.fy,
                cx: k.cx,
                cy: k.cy,
                x: 0.0,
                y: 0.0,
                z: 0.0,
                yaw: 0.0,
                pitch: 0.0,
            };
            match mount {
                Some(t) => {
                    let (yaw, pitch) = t.transform.rotation.camera_mount_angles();
                    spec.x = t.transform.translation.x;
                    spec.y = t.transform.translation.y;
                    spec.z = t.transform.translation.z;
                    spec.yaw = yaw;
                    spec.pitch = pitch;
                }
                None => self.issue(
                    LogIssueKind::MissingTransform,
                    format!("no base_link -> {child} transform on /tf_static; camera {name} is assumed at the origin looking forward"),
                ),
            }
            self.cameras.push(spec);
        }
        for (id, c) in &self.channels {
            if kinds.get(id) == Some(&Kind::Image) {
                if let Some(name) = camera_of_topic(&c.topic, "image_raw") {
                    if let Some(i) = self.cameras.iter().position(|s| s.name == name) {
                        self.image_cams.insert(*id, i);
                    }
                }
            }
        }
        self.map = map;
        Ok(())
    }

    /// The camera rig, in the order of the log's `camera_info` messages (the writer's order).
    /// Mount yaw/pitch come back through a quaternion (equal to ~1e-15 rad).
    pub fn cameras(&self) -> &[CameraSpec] {
        &self.cameras
    }

    /// The road map, if the log has one.
    pub fn map(&self) -> Option<&RoadMapData> {
        self.map.as_ref()
    }

    /// First and last message log time, ns ((0, 0) for an empty log).
    pub fn time_range(&self) -> (u64, u64) {
        self.range
    }

    /// Problems found so far (at open and by [`LogReader::messages`]), without duplicates.
    pub fn issues(&self) -> &[LogIssue] {
        &self.issues
    }

    /// True when the file was read through its summary and indexes.
    pub fn is_indexed(&self) -> bool {
        self.indexed
    }

    /// Chunks decompressed by [`LogReader::messages`] and by opening, so far (shows what
    /// seeking by time and topic saved).
    pub fn chunks_read(&self) -> u64 {
        self.chunks_read
    }

    /// Chunks (and loose messages) in the data section.
    pub fn chunk_count(&self) -> usize {
        self.blocks.len()
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// (topic, schema name) of every channel, by channel id.
    pub fn topics(&self) -> Vec<(String, String)> {
        self.channels
            .values()
            .map(|c| (c.topic.clone(), c.schema.clone()))
            .collect()
    }

    /// Messages of the given topics (all if empty) with log time in `[start_ns, end_ns)`, in
    /// log-time order (ties in file order), decoded. Streams: chunks are read (by seeking via
    /// the chunk index) only when they overlap the range and hold a wanted topic. A message that
    /// cannot be decoded or whose schema is unknown becomes an issue and is skipped; a corrupt
    /// chunk becomes an issue and its messages are skipped; the iteration continues.
    pub fn messages(
        &mut self,
        topics: &[&str],
        start_ns: u64,
        end_ns: u64,
    ) -> impl Iterator<Item = LogMessage> + '_ {
        let wanted: BTreeSet<u16> = self
            .channels
            .iter()
            .filter(|(_, c)| topics.is_empty() || topics.contains(&c.topic.as_str()))
            .map(|(id, _)| *id)
            .collect();
        Messages {
            raw: RawIter::new(self, wanted, start_ns, end_ns),
        }
    }

    fn decode(&mut self, raw: RawMsg) -> Option<LogMessage> {
        let ch = self.channels.get(&raw.channel)?.clone();
        let at = raw.key.0;
        let undecodable = |e: &dyn std::fmt::Display| {
            (
                LogIssueKind::UndecodableMessage,
                format!(
                    "{} message at {at} ns cannot be decoded: {e}; skipped",
                    ch.topic
                ),
            )
        };
        let kind = if ch.encoding == "cdr" {
            kind_of(&ch.schema)
        } else {
            None
        };
        let Some(kind) = kind else {
            self.issue(
                LogIssueKind::UnknownSchema,
                format!(
                    "topic {} has schema {:?} with encoding {:?}, which redline does not read; its messages are skipped",
                    ch.topic, ch.schema, ch.encoding
                ),
            );
            return None;
        };
        let res: Result<(u64, Payload), (LogIssueKind, String)> = (|| match kind {
            Kind::Image => {
                let cam = *self.image_cams.get(&raw.channel).ok_or_else(|| {
                    (
                        LogIssueKind::UnknownSchema,
                        format!("image topic {} belongs to no camera with a camera_info; its messages are skipped", ch.topic),
                    )
                })?;
                let msg = Image::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = msg.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
                let spec = &self.cameras[cam];
                let want = (spec.width, spec.height);
                let image = if (msg.width, msg.height) != want && msg.encoding == "rgb8" {
                    Err(ImageIssue::WrongSize {
                        got: (msg.width, msg.height),
                        want,
                    })
                } else {
                    msg.into_rgb()
                };
                Ok((stamp, Payload::Image { cam, image }))
            }
            Kind::Odometry => {
                let m = Odometry::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let ego = m.to_ego().map_err(|e| undecodable(&e))?;
                Ok((ego.stamp_ns, Payload::Odometry(ego)))
            }
            Kind::GroundTruth => {
                let m = GroundTruthMsg::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let gt = m.to_gt().map_err(|e| undecodable(&e))?;
                Ok((gt.stamp_ns, Payload::GroundTruth(gt)))
            }
            Kind::Map => {
                let m = RoadMap::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = m.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
                let d = map_data(m).map_err(|e| undecodable(&e))?;
                Ok((stamp, Payload::Map(d)))
            }
            Kind::CameraInfo => {
                let m = CameraInfo::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = m.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
                Ok((stamp, Payload::CameraInfo))
            }
            Kind::Tf => {
                let m = TfMessage::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = match m.transforms.first() {
                    Some(t) => t.header.stamp.to_ns().map_err(|e| undecodable(&e))?,
                    None => 0,
                };
                Ok((stamp, Payload::Tf))
            }
        })();
        match res {
            Ok((stamp_ns, payload)) => Some(LogMessage {
                topic: ch.topic,
                log_time_ns: at,
                stamp_ns,
                payload,
            }),
            Err((kind, detail)) => {
                self.issue(kind, detail);
                None
            }
        }
    }

    /// Reads the raw messages of one block that pass the filters.
    fn load_block(
        &mut self,
        bi: usize,
        ordinal: usize,
        wanted: &BTreeSet<u16>,
        start: u64,
        end: u64,
        out: &mut Vec<RawMsg>,
    ) {
        let b = self.blocks[bi].clone();
        let mut body = std::mem::take(&mut self.buf);
        body.resize(b.body_len as usize, 0);
        let read = self
            .file
            .seek(SeekFrom::Start(b.offset + 9))
            .and_then(|_| self.file.read_exact(&mut body));
        if let Err(e) = read {
            self.issue(
                LogIssueKind::Truncated,
                format!(
                    "cannot read {} bytes at byte {} ({e}); those messages are skipped",
                    b.body_len, b.offset
                ),
            );
            self.buf = body;
            return;
        }
        let take = |h: &MessageHeader, data: Vec<u8>, idx: usize, out: &mut Vec<RawMsg>| {
            if wanted.contains(&h.channel_id) && h.log_time >= start && h.log_time < end {
                out.push(RawMsg {
                    key: (h.log_time, ordinal, idx),
                    channel: h.channel_id,
                    data,
                });
            }
        };
        if b.loose {
            if let Ok(Record::Message { header, data }) = mcap::parse_record(op::MESSAGE, &body) {
                take(&header, data.into_owned(), 0, out);
            }
        } else {
            // The record length in the file; for a cut chunk it exceeds what is there.
            let mut head = [0u8; 9];
            let record_len = self
                .file
                .seek(SeekFrom::Start(b.offset))
                .and_then(|_| self.file.read_exact(&mut head))
                .map(|_| u64::from_le_bytes(head[1..9].try_into().unwrap_or([0; 8])))
                .unwrap_or(b.body_len);
            let cr = read_chunk(&body, record_len);
            self.chunks_read += 1;
            if let (Some(e), false) = (&cr.error, cr.partial) {
                self.issue(
                    LogIssueKind::CorruptChunk,
                    format!(
                        "chunk at byte {} (log time {}..{} ns) is corrupt ({e}); its messages are skipped",
                        b.offset, b.start_ns, b.end_ns
                    ),
                );
            }
            for (idx, rec) in cr.records.into_iter().enumerate() {
                if let Record::Message { header, data } = rec {
                    take(&header, data.into_owned(), idx, out);
                }
            }
        }
        self.buf = body;
    }
}

fn chans_count(records: &[Record<'_>]) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::Message { .. }))
        .count()
}

fn kind_of(schema: &str) -> Option<Kind> {
    match schema {
        n if n == Image::SCHEMA_NAME => Some(Kind::Image),
        n if n == CameraInfo::SCHEMA_NAME => Some(Kind::CameraInfo),
        n if n == Odometry::SCHEMA_NAME => Some(Kind::Odometry),
        n if n == TfMessage::SCHEMA_NAME => Some(Kind::Tf),
        n if n == GroundTruthMsg::SCHEMA_NAME => Some(Kind::GroundTruth),
        n if n == RoadMap::SCHEMA_NAME => Some(Kind::Map),
        _ => None,
    }
}

fn map_data(m: RoadMap) -> Result<RoadMapData, String> {
    if m.centre_x.len() != m.centre_y.len() {
        return Err(format!(
            "map centre line has {} x but {} y coordinates",
            m.centre_x.len(),
            m.centre_y.len()
        ));
    }
    Ok(RoadMapData {
        lanes: m.lanes,
        lane_width: m.lane_width,
        centre: m.centre_x.into_iter().zip(m.centre_y).collect(),
    })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Merges raw messages of the selected blocks in log-time order.
struct RawIter<'r> {
    reader: &'r mut LogReader,
    wanted: BTreeSet<u16>,
    start: u64,
    end: u64,
    order: Vec<usize>,
    next: usize,
    /// Sorted by key, descending: `pop` yields the earliest.
    pending: Vec<RawMsg>,
}

impl<'r> RawIter<'r> {
    fn new(reader: &'r mut LogReader, wanted: BTreeSet<u16>, start: u64, end: u64) -> Self {
        let order = reader
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                !b.skip
                    && b.end_ns >= start
                    && b.start_ns < end
                    && match &b.channels {
                        Some(c) => c.iter().any(|id| wanted.contains(id)),
                        None => true,
                    }
            })
            .map(|(i, _)| i)
            .collect();
        RawIter {
            reader,
            wanted,
            start,
            end,
            order,
            next: 0,
            pending: Vec::new(),
        }
    }

    fn next_raw(&mut self) -> Option<RawMsg> {
        loop {
            while self.next < self.order.len() {
                let bi = self.order[self.next];
                let earliest = self.pending.last().map(|m| m.key.0);
                if earliest.is_some_and(|t| self.reader.blocks[bi].start_ns > t) {
                    break;
                }
                let before = self.pending.len();
                self.reader.load_block(
                    bi,
                    self.next,
                    &self.wanted,
                    self.start,
                    self.end,
                    &mut self.pending,
                );
                self.next += 1;
                if self.pending.len() != before {
                    self.pending
                        .sort_unstable_by_key(|m| std::cmp::Reverse(m.key));
                }
            }
            if let Some(m) = self.pending.pop() {
                return Some(m);
            }
            if self.next >= self.order.len() {
                return None;
            }
        }
    }
}

/// The iterator returned by [`LogReader::messages`].
struct Messages<'r> {
    raw: RawIter<'r>,
}

impl Iterator for Messages<'_> {
    type Item = LogMessage;

    fn next(&mut self) -> Option<LogMessage> {
        loop {
            let raw = self.raw.next_raw()?;
            if let Some(m) = self.raw.reader.decode(raw) {
                return Some(m);
            }
        }
    }
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

    #[test]
    fn crc32_matches_reference() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn chunk_header_cut_short_is_an_error() {
        let r = read_chunk(&[1, 2, 3], 100);
        assert!(r.error.is_some() && r.partial && r.records.is_empty());
    }
}
