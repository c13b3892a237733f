//! Reading damaged logs: chunks cut short or corrupt, and files without a usable summary.
//!
//! Promises: [`read_chunk`] decodes every complete record of a chunk cut by truncation and
//! drops a complete chunk that fails its CRC or decompression whole (its records cannot be
//! trusted); `LogReader::scan` walks the data section record by record from the magic, learns
//! schemas and channels, indexes every chunk and loose message it can read, and records what
//! was lost as [`LogIssue`](super::LogIssue)s. Cost: one full pass over the file, decompressing
//! every chunk once. Never panics and never allocates from a length it has not checked against
//! the file size.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};

use mcap::records::{self, op, Record};

use super::reader::{Block, InChannel, LogReader};
use super::{read_u32, read_u64, LogIssueKind};

/// Outcome of reading one chunk's records.
pub(super) struct ChunkRead {
    pub(super) records: Vec<Record<'static>>,
    pub(super) error: Option<String>,
    /// The chunk's record was cut by the end of the file.
    pub(super) partial: bool,
}

/// Decompresses a chunk record body (possibly cut short) into its records.
pub(super) fn read_chunk(body: &[u8], record_len: u64) -> ChunkRead {
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
    pub(super) fn scan(&mut self) -> std::io::Result<()> {
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
}

fn chans_count(records: &[Record<'_>]) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::Message { .. }))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_header_cut_short_is_an_error() {
        let r = read_chunk(&[1, 2, 3], 100);
        assert!(r.error.is_some() && r.partial && r.records.is_empty());
    }
}
