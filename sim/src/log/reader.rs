//! [`LogReader`]: opens a sensor log and streams its messages in log-time order.
//!
//! Promises (see the parent module for the full reading contract): an intact file is read
//! through its summary, seeking only the chunks that overlap the wanted time range and hold a
//! wanted channel (a `.db3` bag file through its messages table's pages, `db3`); a damaged
//! MCAP file falls back to the linear scan in `recovery`; damage met while
//! reading becomes an issue, never a panic; messages come out in log-time order (ties: file
//! order). Cost: one reusable read buffer; one decompressed chunk in memory at a time when
//! chunks do not overlap in time. Spawns no threads and does not log.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::bag_dir::bag_files;
use super::db3::Db3;
use super::limits::ReadLimits;
use super::merge::{Messages, RawIter};
use super::records::{self, Place, RecordError};
use super::recovery::{read_chunk, ChunkItem};
use super::sensor_map::SensorMap;
use super::split::MoreFile;
use super::sqlite;
use super::unpack;
use super::{LogError, LogIssue, LogIssueKind, LogMessage, RoadMapData, MAX_ISSUES, MCAP_MAGIC};
use crate::msgs::{CameraInfo, CompressedImage, RosMessage};
use redline_pipeline::camera::CameraSpec;

#[derive(Clone, Debug)]
pub(super) struct InChannel {
    pub(super) topic: String,
    pub(super) schema: String,
    pub(super) encoding: String,
}

#[derive(Clone, Debug)]
pub(super) struct Block {
    /// Which file of the log holds it: 0 the reader's own, k the k-th of
    /// [`LogReader::more_files`].
    pub(super) part: usize,
    /// File offset of the record's opcode.
    pub(super) offset: u64,
    /// Bytes of the record body present in the file.
    pub(super) body_len: u64,
    /// What the block is: a chunk, a loose message, or leaf pages of a `.db3` bag.
    pub(super) kind: BlockKind,
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    /// Channels with messages in the block; `None` when unknown.
    pub(super) channels: Option<BTreeSet<u16>>,
    /// Damage already reported at open: skip.
    pub(super) skip: bool,
}

/// What a [`Block`] of a log is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum BlockKind {
    /// An MCAP chunk record.
    Chunk,
    /// A loose (unchunked) MCAP message record.
    Loose,
    /// Leaf pages of a `.db3` bag's messages table: indices into its kept leaves
    /// ([`super::db3::Db3`]).
    Db3(std::ops::Range<usize>),
}

#[derive(Debug)]
pub(super) struct RawMsg {
    pub(super) key: (u64, usize, usize),
    pub(super) channel: u16,
    pub(super) data: Vec<u8>,
}

/// What the log is read from: a file, or bytes in memory ([`LogReader::from_bytes`]).
#[derive(Debug)]
pub(super) enum Source {
    File(File),
    Memory(Cursor<Vec<u8>>),
    /// A file compressed whole, read through a decompressed copy (`unpack`).
    Packed(unpack::Packed),
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::File(f) => f.read(buf),
            Source::Memory(c) => c.read(buf),
            Source::Packed(p) => p.read(buf),
        }
    }
}

impl Seek for Source {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        match self {
            Source::File(f) => f.seek(pos),
            Source::Memory(c) => c.seek(pos),
            Source::Packed(p) => p.seek(pos),
        }
    }
}

/// The parts of the summary section redline uses.
#[derive(Debug, Default)]
struct Summary {
    /// schema id → schema name
    schemas: BTreeMap<u16, String>,
    /// channel id → (schema id, topic, message encoding)
    channels: BTreeMap<u16, (u16, String, String)>,
    chunk_indexes: Vec<records::ChunkIndexRec>,
    stats: Option<records::StatisticsRec>,
}

/// Why the summary could not be used (the file is then read by a linear scan).
#[derive(Debug, thiserror::Error)]
enum SummaryError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// How far before the start of a read [`LogReader::messages`] reads a pose-only or `/tf`
/// odometry topic, so that its first pose has a speed and its whole transform chain, and a
/// video camera (`CompressedVideo`, `FFMPEGPacket`, `h264_msgs/msg/Packet`, or a
/// `CompressedImage` whose format names a codec), so that its stream has its keyframe when it
/// is at most this far before the start.
pub const EGO_PREROLL_NS: u64 = 2_000_000_000;

/// Footer record (opcode, length, 20-byte body) and end magic.
const FOOTER_LEN: u64 = 9 + 20 + 8;

/// Reads a sensor log (see the module docs for what it promises on damaged files).
pub struct LogReader {
    pub(super) path: PathBuf,
    pub(super) file: Source,
    pub(super) file_len: u64,
    pub(super) limits: ReadLimits,
    pub(super) indexed: bool,
    pub(super) channels: BTreeMap<u16, InChannel>,
    pub(super) blocks: Vec<Block>,
    pub(super) cameras: Vec<CameraSpec>,
    /// image channel id → camera index
    pub(super) image_cams: BTreeMap<u16, usize>,
    /// Which topics are the rig (the config's `[sensors]` table).
    pub(super) sensors: SensorMap,
    /// JPEG camera images are passed on compressed ([`super::Payload::Jpeg`]).
    pub(super) keep_jpeg: bool,
    pub(super) map: Option<RoadMapData>,
    pub(super) range: (u64, u64),
    pub(super) issues: Vec<LogIssue>,
    pub(super) dropped_issues: u64,
    pub(super) chunks_read: u64,
    pub(super) buf: Vec<u8>,
    /// The other files of a split bag, in recording order (empty for one file).
    pub(super) more_files: Vec<MoreFile>,
    /// Counts block reads, to tell which decompressed copy was read least recently.
    pub(super) read_clock: u64,
    /// Each camera topic's images, decoded on a thread of its own ahead of the reader (with
    /// its video stream state), reset per read.
    pub(super) camera_threads: super::camera_threads::CameraThreads,
    /// Bytes of every file of the log.
    pub(super) total_bytes: u64,
    /// The reader's own file (`path` names the directory of a split bag).
    pub(super) first_file: PathBuf,
    /// Per camera, the resize of its images (from its own size, the resize's input) to the
    /// rig's size ([`LogReader::cameras`]), when they differ.
    pub(super) resizers: Vec<Option<redline_pipeline::perception::Preprocess>>,
    /// The reader's own file's messages table, when it is a `.db3` bag file.
    pub(super) db3: Option<Db3>,
    /// The last pose read from a pose-only odometry topic (`geometry_msgs` pose types): the
    /// next one's speed and yaw rate are differences with it (`decode`).
    pub(super) last_pose: Option<crate::types::EgoState>,
    /// The transform tree read so far, when the odometry topic is a `/tf` topic.
    pub(super) tf_ego: super::decode::TfEgo,
    /// The log's static transforms (read with the rig): they seed [`LogReader::tf_ego`].
    pub(super) static_tf: Vec<crate::msgs::TransformStamped>,
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

impl LogReader {
    /// Opens a log with the default [`ReadLimits`]. An intact file is read through its
    /// summary and indexes. A file whose summary is missing or damaged (truncated, crashed
    /// recorder) is still opened: it falls back to a linear scan that recovers every readable
    /// message and records what was lost in [`LogReader::issues`]. Errors only when nothing can
    /// be read: neither an MCAP nor a ROS 2 `.db3` file, unreadable file, no `camera_info`.
    pub fn open(path: &Path) -> Result<LogReader, LogError> {
        Self::open_with(path, ReadLimits::default())
    }

    /// [`LogReader::open`] with explicit limits on what the file may make the reader allocate:
    /// a length over a limit is reported as an issue and its chunk or record skipped.
    pub fn open_with(path: &Path, limits: ReadLimits) -> Result<LogReader, LogError> {
        Self::open_mapped(path, limits, &SensorMap::default())
    }

    /// [`LogReader::open_with`] for a log whose sensors sit on other topics, named by the
    /// config's `[sensors]` table (see [`SensorMap`]): its cameras, their calibration (from
    /// the log or the map's calibration file), odometry and static transforms. A log that
    /// does not match the map is an error listing what the log has.
    pub fn open_mapped(
        path: &Path,
        limits: ReadLimits,
        sensors: &SensorMap,
    ) -> Result<LogReader, LogError> {
        Self::open_file(path, limits, Some(sensors))
    }

    /// Opens any log (MCAP, `.db3` or bag directory) without looking for a camera rig: for
    /// listing what a log holds ([`LogReader::channel_stats`], `redline log info`).
    /// [`LogReader::messages`] of such a reader decodes no images.
    pub fn open_any(path: &Path, limits: ReadLimits) -> Result<LogReader, LogError> {
        Self::open_file(path, limits, None)
    }

    fn open_file(
        path: &Path,
        limits: ReadLimits,
        sensors: Option<&SensorMap>,
    ) -> Result<LogReader, LogError> {
        if !path.is_dir() {
            return Self::open_one(path, limits, sensors);
        }
        let files = bag_files(path)?;
        if let [only] = &files[..] {
            return Self::open_one(only, limits, sensors);
        }
        let mut r = Self::open_split(path, &files, limits)?;
        if let Some(sensors) = sensors {
            r.sensors = sensors.clone();
            r.load_rig()?;
        }
        Ok(r)
    }

    pub(super) fn open_one(
        path: &Path,
        limits: ReadLimits,
        sensors: Option<&SensorMap>,
    ) -> Result<LogReader, LogError> {
        let io = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let mut magic = [0u8; 4];
        let n = read_up_to(&mut file, &mut magic).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        if n == magic.len() && magic == unpack::ZSTD_MAGIC {
            let mut u = unpack::to_temp_file(path, file, limits.max_unpacked_bytes)?;
            let (len, damage) = (u.len, u.damage.take());
            let packed = unpack::Packed::new(path, &limits, u);
            let r = Self::open_source(
                path.to_path_buf(),
                Source::Packed(packed),
                len,
                limits,
                sensors,
            );
            return Self::with_damage(path, r, len, damage);
        }
        let file_len = file.metadata().map_err(io)?.len();
        Self::open_source(
            path.to_path_buf(),
            Source::File(file),
            file_len,
            limits,
            sensors,
        )
    }

    /// Reads a log held in memory (`name` stands for its path in messages and issues). Same
    /// promises as [`LogReader::open_with`]; used by the fuzz target and by tests.
    pub fn from_bytes(
        name: impl Into<PathBuf>,
        bytes: Vec<u8>,
        limits: ReadLimits,
    ) -> Result<LogReader, LogError> {
        let rig = SensorMap::default();
        let path = name.into();
        if bytes.starts_with(&unpack::ZSTD_MAGIC) {
            let u = unpack::to_memory(&bytes, &limits);
            let r = Self::open_source(
                path.clone(),
                Source::Memory(Cursor::new(u.out)),
                u.len,
                limits,
                Some(&rig),
            );
            return Self::with_damage(&path, r, u.len, u.damage);
        }
        let len = bytes.len() as u64;
        Self::open_source(
            path,
            Source::Memory(Cursor::new(bytes)),
            len,
            limits,
            Some(&rig),
        )
    }

    fn open_source(
        path: PathBuf,
        mut file: Source,
        file_len: u64,
        limits: ReadLimits,
        sensors: Option<&SensorMap>,
    ) -> Result<LogReader, LogError> {
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let mut magic = [0u8; 16];
        let n = read_up_to(&mut file, &mut magic).map_err(io)?;
        let db3 = n == 16 && &magic == sqlite::MAGIC;
        if !db3 && (n < 8 || magic[..8] != *MCAP_MAGIC) {
            return Err(LogError::NotMcap { path });
        }
        let mut r = LogReader {
            path: path.clone(),
            file,
            file_len,
            limits,
            indexed: false,
            channels: BTreeMap::new(),
            blocks: Vec::new(),
            cameras: Vec::new(),
            image_cams: BTreeMap::new(),
            sensors: sensors.cloned().unwrap_or_default(),
            keep_jpeg: false,
            map: None,
            range: (0, 0),
            issues: Vec::new(),
            dropped_issues: 0,
            chunks_read: 0,
            buf: Vec::new(),
            more_files: Vec::new(),
            total_bytes: file_len,
            first_file: path.clone(),
            read_clock: 0,
            camera_threads: Default::default(),
            resizers: Vec::new(),
            db3: None,
            last_pose: None,
            tf_ego: Default::default(),
            static_tf: Vec::new(),
        };
        if db3 {
            r.open_db3()?;
        } else {
            r.open_mcap().map_err(io)?;
        }
        r.blocks.sort_by_key(|b| (b.start_ns, b.part, b.offset));
        if sensors.is_some() {
            r.load_rig()?;
        }
        Ok(r)
    }

    /// Indexes an MCAP file: through its summary, else by a linear scan.
    fn open_mcap(&mut self) -> std::io::Result<()> {
        let r = self;
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
                r.scan()?;
            }
            Err(e) => {
                r.issue(
                    LogIssueKind::UnindexedFile,
                    format!("its summary/footer is unreadable ({e}); read by a linear scan, which recovers every complete message"),
                );
                r.scan()?;
            }
        }
        Ok(())
    }

    /// The limits this reader checks lengths against.
    pub fn limits(&self) -> &ReadLimits {
        &self.limits
    }

    pub(super) fn issue(&mut self, kind: LogIssueKind, detail: String) {
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

    /// Reads the footer and the summary section (bounded by the file and
    /// `max_summary_bytes`, CRC checked when not zero). `None`: the file has no summary.
    fn read_summary(&mut self) -> Result<Option<Summary>, SummaryError> {
        let truncated = |need: u64| RecordError::Truncated {
            what: "footer and end magic",
            place: Place::File,
            at: 0,
            need,
            left: self.file_len,
        };
        if self.file_len < 8 + FOOTER_LEN {
            return Err(truncated(8 + FOOTER_LEN).into());
        }
        let footer_pos = self.file_len - FOOTER_LEN;
        let mut tail = [0u8; FOOTER_LEN as usize];
        self.file.seek(SeekFrom::Start(footer_pos))?;
        self.file.read_exact(&mut tail)?;
        if tail[29..] != *MCAP_MAGIC
            || tail[0] != records::OP_FOOTER
            || tail[1..9] != 20u64.to_le_bytes()
        {
            return Err(RecordError::WrongOpcode {
                what: "footer record and end magic",
                place: Place::File,
                at: footer_pos,
                opcode: tail[0],
            }
            .into());
        }
        let field = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&tail[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let summary_start = field(9);
        let offsets_start = field(17);
        let saved_crc = u32::from_le_bytes([tail[25], tail[26], tail[27], tail[28]]);
        if summary_start == 0 {
            return Ok(None);
        }
        if summary_start < 8 || summary_start > footer_pos {
            return Err(RecordError::Truncated {
                what: "summary section",
                place: Place::File,
                at: summary_start,
                need: summary_start,
                left: footer_pos,
            }
            .into());
        }
        let len = footer_pos - summary_start;
        if len > self.limits.max_summary_bytes {
            return Err(RecordError::OverLimit {
                what: "summary section",
                place: Place::File,
                at: summary_start,
                len,
                limit: self.limits.max_summary_bytes,
                knob: "max_summary_bytes",
            }
            .into());
        }
        // The section plus the footer fields its CRC covers (opcode, length, two offsets).
        let mut section = vec![0u8; len as usize + 25];
        self.file.seek(SeekFrom::Start(summary_start))?;
        self.file.read_exact(&mut section)?;
        if saved_crc != 0 {
            let calculated = records::crc32(&section);
            if calculated != saved_crc {
                return Err(RecordError::Crc {
                    what: "summary section",
                    at: summary_start,
                    saved: saved_crc,
                    calculated,
                }
                .into());
            }
        }
        // Summary offset records (an index of the summary) are not needed.
        let end = if (summary_start..=footer_pos).contains(&offsets_start) {
            offsets_start - summary_start
        } else {
            len
        };
        let limits = self.limits;
        let mut s = Summary::default();
        for rec in records::Records::new(
            &section[..end as usize],
            summary_start,
            Place::File,
            &limits,
        ) {
            let rec = rec?;
            match rec.opcode {
                records::OP_SCHEMA => {
                    let sc = records::schema(&rec, Place::File, &limits)?;
                    s.schemas.insert(sc.id, sc.name.to_string());
                }
                records::OP_CHANNEL => {
                    let c = records::channel(&rec, Place::File, &limits)?;
                    s.channels.insert(
                        c.id,
                        (c.schema_id, c.topic.to_string(), c.encoding.to_string()),
                    );
                }
                records::OP_CHUNK_INDEX => {
                    s.chunk_indexes.push(records::chunk_index(&rec, &limits)?)
                }
                records::OP_STATISTICS => s.stats = Some(records::statistics(&rec, &limits)?),
                _ => {}
            }
        }
        Ok(Some(s))
    }

    /// Takes channels and chunk indexes from the summary; false when it is unusable.
    fn use_summary(&mut self, s: &Summary) -> bool {
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
                || ci.chunk_start_offset < 8
                || ci.chunk_start_offset.saturating_add(ci.chunk_length) > self.file_len
            {
                return false;
            }
        }
        for (id, (schema_id, topic, encoding)) in &s.channels {
            self.channels.insert(
                *id,
                InChannel {
                    topic: topic.clone(),
                    schema: s.schemas.get(schema_id).cloned().unwrap_or_default(),
                    encoding: encoding.clone(),
                },
            );
        }
        self.blocks = s
            .chunk_indexes
            .iter()
            .map(|ci| Block {
                part: 0,
                offset: ci.chunk_start_offset,
                body_len: ci.chunk_length - 9,
                kind: BlockKind::Chunk,
                start_ns: ci.start_ns,
                end_ns: ci.end_ns,
                channels: (!ci.channels.is_empty()).then(|| ci.channels.iter().copied().collect()),
                skip: false,
            })
            .collect();
        self.range = match &s.stats {
            Some(st) => (st.start_ns, st.end_ns),
            None => (
                self.blocks.iter().map(|b| b.start_ns).min().unwrap_or(0),
                self.blocks.iter().map(|b| b.end_ns).max().unwrap_or(0),
            ),
        };
        self.indexed = true;
        true
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

    /// The log: its file, or the directory of a ROS 2 bag split over several files.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files the log is read from: one, or a split bag's in recording order.
    pub fn files(&self) -> Vec<&Path> {
        std::iter::once(self.first_file.as_path())
            .chain(self.more_files.iter().map(|f| f.path.as_path()))
            .collect()
    }

    /// Bytes of every file of the log.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
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
    /// chunk becomes an issue and its messages are skipped; the iteration continues. An ego
    /// source that is differenced (a pose-only or `/tf` odometry topic) starts afresh with
    /// each call, so a call's output does not depend on earlier calls: from the
    /// [`EGO_PREROLL_NS`] before `start_ns` (its previous pose, the transforms of its
    /// chain), as a replay from the log's start would have it. So does a wanted video camera
    /// (`CompressedVideo`, `FFMPEGPacket`, `h264_msgs/msg/Packet`, or a `CompressedImage`
    /// whose first message in that window names a codec): decoded from the same time before
    /// `start_ns`, its pictures from `start_ns` on are whole when the stream has a keyframe in
    /// that window.
    pub fn messages(
        &mut self,
        topics: &[&str],
        start_ns: u64,
        end_ns: u64,
    ) -> impl Iterator<Item = LogMessage> + '_ {
        // Each call reads on its own: a pose-only or `/tf` ego source starts afresh, whatever
        // an earlier call read, then reads what precedes the start.
        self.last_pose = None;
        self.tf_ego = super::decode::TfEgo::seeded(&self.static_tf);
        // Camera threads start afresh (video streams from their first keyframe in the read).
        self.camera_threads.clear();
        let wanted: BTreeSet<u16> = self
            .channels
            .iter()
            .filter(|(_, c)| topics.is_empty() || topics.contains(&c.topic.as_str()))
            .map(|(id, _)| *id)
            .collect();
        self.preroll(start_ns, &wanted);
        Messages::new(RawIter::new(self, wanted, start_ns, end_ns))
    }

    /// Decodes (and drops) the messages of a pose-only or `/tf` odometry topic, and of the
    /// `wanted` video cameras, in the [`EGO_PREROLL_NS`] before `start_ns`: the first pose
    /// read from `start_ns` then has the previous one to difference against and its transform
    /// chain's ancestors (a `map` → `odom` published once a second); a video stream has its
    /// last keyframe and the pictures after it. Cost: one more read of the first message in
    /// the window of each wanted `CompressedImage` camera (to tell video from JPEG or PNG).
    fn preroll(&mut self, start_ns: u64, wanted: &BTreeSet<u16>) {
        let from = start_ns.saturating_sub(EGO_PREROLL_NS).max(self.range.0);
        if from >= start_ns {
            return;
        }
        use super::decode::Kind;
        let odom = self.sensors.odometry_topic().to_string();
        let camera = |id: &u16| wanted.contains(id) && self.image_cams.contains_key(id);
        let mut ids = BTreeSet::new();
        // `CompressedImage` cameras that may carry video: told by their first message in
        // the window (a driver's H.264/H.265 stream names its codec in the format).
        let mut maybe_video = Vec::new();
        for (id, c) in self.channels.iter().filter(|(_, c)| c.encoding == "cdr") {
            match super::decode::kind_of(&c.schema) {
                Some(Kind::Pose | Kind::Tf) if c.topic == odom => ids.insert(*id),
                Some(Kind::CompressedVideo) if camera(id) => ids.insert(*id),
                Some(Kind::CompressedImage) if camera(id) => {
                    maybe_video.push(*id);
                    false
                }
                _ => false,
            };
        }
        for id in maybe_video {
            let first = RawIter::new(self, BTreeSet::from([id]), from, start_ns).next_raw();
            let msg = first.and_then(|raw| CompressedImage::from_cdr(&raw.data).ok());
            if msg.is_some_and(|m| crate::video::is_video(&m.format)) {
                ids.insert(id);
            }
        }
        if ids.is_empty() {
            return;
        }
        // Decoded (the video streams on their threads, ahead) and dropped.
        Messages::new(RawIter::new(self, ids, from, start_ns)).for_each(drop);
    }

    /// Reads the raw messages of one block that pass the filters.
    pub(super) fn load_block(
        &mut self,
        bi: usize,
        ordinal: usize,
        wanted: &BTreeSet<u16>,
        start: u64,
        end: u64,
        out: &mut Vec<RawMsg>,
    ) {
        let b = self.blocks[bi].clone();
        let limits = self.limits;
        if let BlockKind::Db3(leaves) = &b.kind {
            self.load_db3_block(&b, leaves.clone(), ordinal, wanted, start, end, out);
            return;
        }
        let loose = b.kind == BlockKind::Loose;
        if b.body_len > limits.max_record_bytes {
            let e = RecordError::OverLimit {
                what: if loose {
                    "message record"
                } else {
                    "chunk record"
                },
                place: Place::File,
                at: b.offset,
                len: b.body_len,
                limit: limits.max_record_bytes,
                knob: "max_record_bytes",
            };
            self.issue(
                LogIssueKind::OverLimit,
                format!("{e}; its messages are skipped"),
            );
            return;
        }
        let mut body = std::mem::take(&mut self.buf);
        body.clear();
        // body_len <= max_record_bytes (checked above) and within the file (checked at open).
        body.resize(b.body_len as usize, 0);
        self.make_room_for(Some(b.part));
        // The block's file, and for a later file of a split bag its channel ids.
        let (file, channel_ids) = match b.part {
            0 => (&mut self.file, None),
            k => {
                let more = &mut self.more_files[k - 1];
                (&mut more.file, Some(&more.channel_ids))
            }
        };
        let read = file
            .seek(SeekFrom::Start(b.offset.saturating_add(9)))
            .and_then(|_| file.read_exact(&mut body));
        // The record length in the file; for a cut chunk it exceeds what is there.
        let record_len = if loose || read.is_err() {
            b.body_len
        } else {
            let mut head = [0u8; 9];
            file.seek(SeekFrom::Start(b.offset))
                .and_then(|_| file.read_exact(&mut head))
                .map(|_| {
                    let mut l = [0u8; 8];
                    l.copy_from_slice(&head[1..9]);
                    u64::from_le_bytes(l)
                })
                .unwrap_or(b.body_len)
        };
        let channel_ids = channel_ids.cloned();
        if let Err(e) = read {
            let name = self.part_name(b.part);
            self.issue(
                LogIssueKind::Truncated,
                format!(
                    "{name}cannot read {} bytes at byte {} ({e}); those messages are skipped",
                    b.body_len, b.offset
                ),
            );
            self.buf = body;
            return;
        }
        let mut bad = Vec::new();
        let mut take = |channel: u16, log_time: u64, data: &[u8], idx: usize| {
            let channel = match &channel_ids {
                None => channel,
                Some(ids) => match ids.get(&channel) {
                    Some(&id) => id,
                    None => return,
                },
            };
            if wanted.contains(&channel) && log_time >= start && log_time < end {
                push_raw(
                    out,
                    &mut bad,
                    (log_time, ordinal, idx),
                    channel,
                    data,
                    &limits,
                );
            }
        };
        if loose {
            let rec = records::RawRecord {
                opcode: records::OP_MESSAGE,
                at: b.offset,
                body: &body,
            };
            if let Ok(m) = records::message(&rec, Place::File, &limits) {
                take(m.channel_id, m.log_time, m.data, 0);
            }
        } else {
            let cr = read_chunk(&body, record_len, b.offset, &limits);
            self.chunks_read += 1;
            if let (Some(e), false) = (&cr.error, cr.partial) {
                let name = self.part_name(b.part);
                self.issue(
                    LogIssueKind::CorruptChunk,
                    format!(
                        "{name}chunk at byte {} (log time {}..{} ns) is corrupt ({e}); its messages are skipped",
                        b.offset, b.start_ns, b.end_ns
                    ),
                );
            }
            for (idx, item) in cr.items.iter().enumerate() {
                if let ChunkItem::Message {
                    channel,
                    log_time,
                    range,
                } = item
                {
                    take(*channel, *log_time, &cr.data[range.clone()], idx);
                }
            }
        }
        self.buf = body;
        let name = self.part_name(b.part);
        for detail in bad {
            self.issue(LogIssueKind::UndecodableMessage, format!("{name}{detail}"));
        }
    }
}

/// Pushes a raw message to `out` (its bytes through [`records::message_bytes`]), or why it cannot be
/// read to `bad`.
pub(super) fn push_raw(
    out: &mut Vec<RawMsg>,
    bad: &mut Vec<String>,
    key: (u64, usize, usize),
    channel: u16,
    data: &[u8],
    limits: &ReadLimits,
) {
    match records::message_bytes(data, limits) {
        Ok(data) => out.push(RawMsg { key, channel, data }),
        Err(e) => bad.push(format!("message at {} ns {e}; skipped", key.0)),
    }
}

/// A calibration redline can use: image sides within `1..=max_image_side`, finite focal
/// lengths above zero and a finite principal point.
pub(super) fn check_calibration(ci: &CameraInfo, limits: &ReadLimits) -> Result<(), String> {
    let k = ci.to_intrinsics();
    let side = 1..=limits.max_image_side;
    if !side.contains(&k.width) || !side.contains(&k.height) {
        return Err(format!(
            "image size {}x{} is outside 1..={} px per side (ReadLimits::max_image_side, `max_image_side` in the config's [log] table)",
            k.width, k.height, limits.max_image_side
        ));
    }
    let focal_ok = |f: f64| f.is_finite() && f > 0.0;
    if !(focal_ok(k.fx) && focal_ok(k.fy) && k.cx.is_finite() && k.cy.is_finite()) {
        return Err(format!(
            "intrinsics fx {} fy {} cx {} cy {} are not finite positive focal lengths and a finite principal point",
            k.fx, k.fy, k.cx, k.cy
        ));
    }
    Ok(())
}

fn read_up_to(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
