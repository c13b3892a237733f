//! Reading damaged logs: chunks cut short or corrupt, and files without a usable summary.
//!
//! Promises: [`read_chunk`] decodes every complete record of a chunk cut by truncation and
//! drops a complete chunk that fails its CRC or decompression whole (its records cannot be
//! trusted); `LogReader::scan` walks the data section record by record from the magic, learns
//! schemas and channels, indexes every chunk and loose message it can read, and records what
//! was lost as [`LogIssue`](super::LogIssue)s. Cost: one full pass over the file, decompressing
//! every chunk once. Never panics and never allocates from a length it has not checked against
//! the file size and the [`ReadLimits`] (a record over `max_record_bytes` is skipped with an
//! [`OverLimit`](super::LogIssueKind::OverLimit) issue).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;

use super::limits::ReadLimits;
use super::reader::{Block, BlockKind, InChannel, LogReader};
use super::records::{self, Place, RawRecord, RecordError};
use super::LogIssueKind;

/// One record of a chunk that redline uses (others are skipped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ChunkItem {
    Schema {
        id: u16,
        name: String,
    },
    Channel {
        id: u16,
        schema_id: u16,
        topic: String,
        encoding: String,
    },
    Message {
        channel: u16,
        log_time: u64,
        /// The message data in [`ChunkRead::data`].
        range: Range<usize>,
    },
}

/// Outcome of reading one chunk's records.
pub(super) struct ChunkRead<'a> {
    /// The decompressed records.
    pub(super) data: Cow<'a, [u8]>,
    pub(super) items: Vec<ChunkItem>,
    pub(super) error: Option<RecordError>,
    /// The chunk's record was cut by the end of the file.
    pub(super) partial: bool,
}

/// Decompresses a chunk record body (possibly cut short: `record_len` is the length its
/// header declares) into its records. `at`: the chunk's file offset. Every length is checked
/// (see `records`); a complete chunk with any error yields no records.
pub(super) fn read_chunk<'a>(
    body: &'a [u8],
    record_len: u64,
    at: u64,
    limits: &ReadLimits,
) -> ChunkRead<'a> {
    let partial = (body.len() as u64) < record_len;
    let fail = |e: RecordError| ChunkRead {
        data: Cow::Borrowed(&[]),
        items: Vec::new(),
        error: Some(e),
        partial,
    };
    let chunk = match records::chunk(body, at, partial, limits) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let (data, mut error) = records::decompress(&chunk, at, limits);
    let mut items = Vec::new();
    if error.is_none() || partial {
        let place = Place::Chunk(at);
        for rec in records::Records::new(&data, 0, place, limits) {
            match rec.and_then(|r| chunk_item(&r, place, limits)) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => {}
                Err(e) => {
                    error.get_or_insert(e);
                    break;
                }
            }
        }
    }
    if error.is_some() && !partial {
        // A complete chunk that fails (CRC, decompression, a bad record) is dropped whole:
        // records decoded before the failure cannot be trusted.
        items.clear();
    }
    ChunkRead {
        data,
        items,
        error,
        partial,
    }
}

fn chunk_item(
    r: &RawRecord<'_>,
    place: Place,
    limits: &ReadLimits,
) -> Result<Option<ChunkItem>, RecordError> {
    Ok(Some(match r.opcode {
        records::OP_SCHEMA => {
            let s = records::schema(r, place, limits)?;
            ChunkItem::Schema {
                id: s.id,
                name: s.name.to_string(),
            }
        }
        records::OP_CHANNEL => {
            let c = records::channel(r, place, limits)?;
            ChunkItem::Channel {
                id: c.id,
                schema_id: c.schema_id,
                topic: c.topic.to_string(),
                encoding: c.encoding.to_string(),
            }
        }
        records::OP_MESSAGE => {
            let m = records::message(r, place, limits)?;
            // The data is the tail of the record body: its offset within the chunk data.
            let end = (r.at as usize) + 9 + r.body.len();
            ChunkItem::Message {
                channel: m.channel_id,
                log_time: m.log_time,
                range: end - m.data.len()..end,
            }
        }
        _ => return Ok(None),
    }))
}

impl LogReader {
    fn add_channel(
        &mut self,
        id: u16,
        schema_id: u16,
        topic: &str,
        encoding: &str,
        schemas: &BTreeMap<u16, String>,
    ) {
        let schema = schemas.get(&schema_id).cloned().unwrap_or_default();
        self.channels.entry(id).or_insert_with(|| InChannel {
            topic: topic.to_string(),
            schema,
            encoding: encoding.to_string(),
        });
    }

    /// Linear scan of the data section: finds chunks and loose messages, learns channels.
    /// Reads one record at a time into the reusable buffer, never more than
    /// `max_record_bytes` nor past the end of the file.
    pub(super) fn scan(&mut self) -> std::io::Result<()> {
        let limits = self.limits;
        let mut schemas: BTreeMap<u16, String> = BTreeMap::new();
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
            let mut len = [0u8; 8];
            len.copy_from_slice(&head[1..9]);
            let len = u64::from_le_bytes(len);
            let avail = self.file_len - pos - 9;
            if opcode == records::OP_FOOTER || opcode == records::OP_DATA_END {
                ended = true;
                break;
            }
            let cut = len > avail;
            if cut && opcode != records::OP_CHUNK {
                self.issue(
                    LogIssueKind::Truncated,
                    format!("the record at byte {pos} (opcode {opcode:#04x}) declares {len} bytes but only {avail} are left in the file: the file is cut short or the length is corrupt; the scan stops there and later data is lost"),
                );
                break;
            }
            let body_len = len.min(avail);
            let wanted = matches!(
                opcode,
                records::OP_CHUNK | records::OP_MESSAGE | records::OP_SCHEMA | records::OP_CHANNEL
            );
            if wanted && body_len > limits.max_record_bytes {
                let e = RecordError::OverLimit {
                    what: "record",
                    place: Place::File,
                    at: pos,
                    len: body_len,
                    limit: limits.max_record_bytes,
                    knob: "max_record_bytes",
                };
                self.issue(LogIssueKind::OverLimit, format!("{e}; it is skipped"));
            }
            if !wanted || body_len > limits.max_record_bytes {
                if cut {
                    break;
                }
                pos += 9 + len; // len <= avail: within the file
                continue;
            }
            let mut body = std::mem::take(&mut self.buf);
            body.clear();
            body.resize(body_len as usize, 0); // <= max_record_bytes and within the file
            let read = self.file.read_exact(&mut body);
            if let Err(e) = read {
                self.buf = body;
                return Err(e);
            }
            let rec = RawRecord {
                opcode,
                at: pos,
                body: &body,
            };
            match opcode {
                records::OP_CHUNK => {
                    let cr = read_chunk(&body, len, pos, &limits);
                    let mut chans = BTreeSet::new();
                    let (mut lo, mut hi) = (u64::MAX, 0u64);
                    let mut messages = 0usize;
                    for item in &cr.items {
                        match item {
                            ChunkItem::Schema { id, name } => {
                                schemas.insert(*id, name.clone());
                            }
                            ChunkItem::Channel {
                                id,
                                schema_id,
                                topic,
                                encoding,
                            } => self.add_channel(*id, *schema_id, topic, encoding, &schemas),
                            ChunkItem::Message {
                                channel, log_time, ..
                            } => {
                                messages += 1;
                                chans.insert(*channel);
                                lo = lo.min(*log_time);
                                hi = hi.max(*log_time);
                            }
                        }
                    }
                    let complete_ok = cr.error.is_none() && !cr.partial;
                    if let Some(e) = &cr.error {
                        if cr.partial {
                            self.issue(
                                LogIssueKind::Truncated,
                                format!("the file ends inside the chunk at byte {pos} ({e}); {messages} complete messages of it were recovered, the rest of the file is lost"),
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
                        part: 0,
                        offset: pos,
                        body_len,
                        kind: BlockKind::Chunk,
                        start_ns: if chans.is_empty() { 0 } else { lo },
                        end_ns: hi,
                        channels: Some(chans),
                        skip: !complete_ok && !cr.partial,
                    });
                }
                records::OP_MESSAGE => {
                    if let Ok(m) = records::message(&rec, Place::File, &limits) {
                        min_t = min_t.min(m.log_time);
                        max_t = max_t.max(m.log_time);
                        self.blocks.push(Block {
                            part: 0,
                            offset: pos,
                            body_len,
                            kind: BlockKind::Loose,
                            start_ns: m.log_time,
                            end_ns: m.log_time,
                            channels: Some(BTreeSet::from([m.channel_id])),
                            skip: false,
                        });
                    }
                }
                records::OP_SCHEMA => {
                    if let Ok(sc) = records::schema(&rec, Place::File, &limits) {
                        schemas.insert(sc.id, sc.name.to_string());
                    }
                }
                records::OP_CHANNEL => {
                    if let Ok(c) = records::channel(&rec, Place::File, &limits) {
                        self.add_channel(c.id, c.schema_id, c.topic, c.encoding, &schemas);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_header_cut_short_is_an_error() {
        let r = read_chunk(&[1, 2, 3], 100, 8, &ReadLimits::default());
        assert!(r.error.is_some() && r.partial && r.items.is_empty());
    }
}
