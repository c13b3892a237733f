//! [`LogReader`]: opens a sensor log and streams its messages in log-time order.
//!
//! Promises (see the parent module for the full reading contract): an intact file is read
//! through its summary, seeking only the chunks that overlap the wanted time range and hold a
//! wanted channel; a damaged one falls back to the linear scan in `recovery`; damage met while
//! reading becomes an issue, never a panic; messages come out in log-time order (ties: file
//! order). Cost: one reusable read buffer; one decompressed chunk in memory at a time when
//! chunks do not overlap in time. Spawns no threads and does not log.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use mcap::records::{op, MessageHeader, Record};
use mcap::sans_io::{SummaryReadEvent, SummaryReader, SummaryReaderOptions};
use mcap::McapError;

use super::decode::{kind_of, map_data, Kind};
use super::recovery::read_chunk;
use super::{
    camera_of_topic, LogError, LogIssue, LogIssueKind, LogMessage, RoadMapData, MAX_ISSUES,
    MCAP_MAGIC,
};
use crate::msgs::{CameraInfo, RoadMap, RosMessage, TfMessage};
use redline_pipeline::camera::CameraSpec;

#[derive(Clone, Debug)]
pub(super) struct InChannel {
    pub(super) topic: String,
    pub(super) schema: String,
    pub(super) encoding: String,
}

#[derive(Clone, Debug)]
pub(super) struct Block {
    /// File offset of the record's opcode.
    pub(super) offset: u64,
    /// Bytes of the record body present in the file.
    pub(super) body_len: u64,
    /// A loose (unchunked) message record instead of a chunk.
    pub(super) loose: bool,
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    /// Channels with messages in the block; `None` when unknown.
    pub(super) channels: Option<BTreeSet<u16>>,
    /// Damage already reported at open: skip.
    pub(super) skip: bool,
}

#[derive(Debug)]
pub(super) struct RawMsg {
    pub(super) key: (u64, usize, usize),
    pub(super) channel: u16,
    pub(super) data: Vec<u8>,
}

/// Reads a sensor log (see the module docs for what it promises on damaged files).
pub struct LogReader {
    pub(super) path: PathBuf,
    pub(super) file: File,
    pub(super) file_len: u64,
    pub(super) indexed: bool,
    pub(super) channels: BTreeMap<u16, InChannel>,
    pub(super) blocks: Vec<Block>,
    pub(super) cameras: Vec<CameraSpec>,
    /// image channel id → camera index
    pub(super) image_cams: BTreeMap<u16, usize>,
    pub(super) map: Option<RoadMapData>,
    pub(super) range: (u64, u64),
    pub(super) issues: Vec<LogIssue>,
    pub(super) dropped_issues: u64,
    pub(super) chunks_read: u64,
    pub(super) buf: Vec<u8>,
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
