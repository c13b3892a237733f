//! Bounded parsing of MCAP records: the reading side of the format, written so that no byte
//! pattern can make it panic or allocate from a length it has not checked.
//!
//! Promises: every length field (record length, string, byte array, map, chunk compressed and
//! uncompressed size) is compared with the bytes really left in the buffer it describes and
//! with the [`ReadLimits`] before it is used; a length that fails is a [`RecordError`] naming
//! the record, where it is, the length and what it was checked against. Parsing borrows from
//! the caller's buffer (no copies); only [`decompress`] allocates, and its output is bounded by
//! the chunk's declared uncompressed size, itself bounded by `max_chunk_bytes` (the buffer grows
//! with the data really produced, so a small corrupt chunk that declares a large size does not
//! allocate it). Supported chunk compressions: `zstd`, `lz4` (frame format) and none, which is
//! what the MCAP specification lists. CRCs (chunk, summary) are checked when not zero.
//!
//! Why not the mcap crate's readers: its `LinearReader` (behind `ChunkReader` and
//! `SummaryReader`) resizes its buffers to whatever record length it reads, and its record
//! parser reserves a string's declared length before reading it: a corrupt length aborted the
//! process (issue 10). The writer still uses the mcap crate.
//!
//! Cost: parsing is a bounds-checked walk over borrowed bytes; decompression allocates the
//! output once (growing by doubling, never past the declared size) plus the decoder's state.

use std::borrow::Cow;
use std::io::Read;

use mcap::records::op;

use super::limits::ReadLimits;

/// Where a record lies, for messages: in the file, or in a decompressed chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Offsets are file offsets.
    File,
    /// Offsets are within the decompressed records of the chunk at this file offset.
    Chunk(u64),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::File => write!(f, "file"),
            Place::Chunk(at) => write!(f, "decompressed chunk at file byte {at}"),
        }
    }
}

/// A malformed or over-limit record. Each says which record, where, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A length points past the end of what holds it.
    #[error(
        "{what} at byte {at} of the {place} needs {need} bytes but only {left} are left; the file \
         is cut short or a length field is corrupt"
    )]
    Truncated {
        /// The record or field.
        what: &'static str,
        /// Where the offset counts from.
        place: Place,
        /// Offset of the record or field.
        at: u64,
        /// Bytes it declares or needs.
        need: u64,
        /// Bytes really left.
        left: u64,
    },
    /// A length is over one of the [`ReadLimits`].
    #[error(
        "{what} at byte {at} of the {place} declares {len} bytes, over the limit of {limit} \
         (ReadLimits::{knob}, `{knob}` in the config's [log] table); the length field is corrupt, \
         or, if the log is intact and really this large, raise the limit"
    )]
    OverLimit {
        /// The record or field.
        what: &'static str,
        /// Where the offset counts from.
        place: Place,
        /// Offset of the record or field.
        at: u64,
        /// The declared length.
        len: u64,
        /// The limit.
        limit: u64,
        /// The limit's name.
        knob: &'static str,
    },
    /// A string is not UTF-8.
    #[error("{what} at byte {at} of the {place} is not UTF-8; the record is corrupt")]
    NotUtf8 {
        /// The field.
        what: &'static str,
        /// Where the offset counts from.
        place: Place,
        /// Offset of the string's length prefix.
        at: u64,
    },
    /// A record is not the one expected there.
    #[error("{what} at byte {at} of the {place} has opcode {opcode:#04x}; the offset or the record is corrupt")]
    WrongOpcode {
        /// The record expected.
        what: &'static str,
        /// Where the offset counts from.
        place: Place,
        /// Offset of the record.
        at: u64,
        /// The opcode found.
        opcode: u8,
    },
    /// The chunk's compression is not one redline reads.
    #[error(
        "chunk at file byte {at} is compressed with {name:?}, which redline does not read (zstd, \
         lz4 or none); its messages are skipped; recompress the log (e.g. `mcap compress`)"
    )]
    UnsupportedCompression {
        /// File offset of the chunk record.
        at: u64,
        /// The compression named.
        name: String,
    },
    /// The decompressor rejected the data.
    #[error("chunk at file byte {at} does not decompress ({why}); its data is corrupt")]
    Decompress {
        /// File offset of the chunk record.
        at: u64,
        /// The decompressor's message.
        why: String,
    },
    /// The chunk decompresses to a size other than the one it declares.
    #[error(
        "chunk at file byte {at} decompresses to {got} bytes, not the {declared} its header \
         declares (output stops at the declared size); the chunk is corrupt"
    )]
    SizeMismatch {
        /// File offset of the chunk record.
        at: u64,
        /// Declared uncompressed size.
        declared: u64,
        /// Bytes produced (one more than declared when it would have gone on).
        got: u64,
    },
    /// A CRC does not match.
    #[error(
        "{what} at file byte {at} fails its CRC (stored {saved:#010x}, computed {calculated:#010x}); \
         its data is corrupt"
    )]
    Crc {
        /// The checked data.
        what: &'static str,
        /// File offset of the record or section.
        at: u64,
        /// CRC stored in the file.
        saved: u32,
        /// CRC of the data read.
        calculated: u32,
    },
}

/// A bounds-checked cursor over one record body (or any buffer).
#[derive(Debug)]
pub(super) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in `place`.
    base: u64,
    place: Place,
    what: &'static str,
    max_name: u64,
}

impl<'a> Fields<'a> {
    pub(super) fn new(
        what: &'static str,
        buf: &'a [u8],
        base: u64,
        place: Place,
        limits: &ReadLimits,
    ) -> Self {
        Fields {
            buf,
            pos: 0,
            base,
            place,
            what,
            max_name: limits.max_name_bytes,
        }
    }

    fn at(&self) -> u64 {
        self.base.saturating_add(self.pos as u64)
    }

    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes, or `Truncated` naming `field`.
    fn take(&mut self, field: &'static str, n: u64) -> Result<&'a [u8], RecordError> {
        let left = self.left();
        match usize::try_from(n) {
            Ok(k) if k <= left => {
                let s = &self.buf[self.pos..self.pos + k];
                self.pos += k;
                Ok(s)
            }
            _ => Err(RecordError::Truncated {
                what: if field.is_empty() { self.what } else { field },
                place: self.place,
                at: self.at(),
                need: n,
                left: left as u64,
            }),
        }
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], RecordError> {
        let s = self.take(field, N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(super) fn u16(&mut self, field: &'static str) -> Result<u16, RecordError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    pub(super) fn u32(&mut self, field: &'static str) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    pub(super) fn u64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A `u32`-length-prefixed UTF-8 string, at most `max_name_bytes` long.
    pub(super) fn string(&mut self, field: &'static str) -> Result<&'a str, RecordError> {
        let at = self.at();
        let len = u64::from(self.u32(field)?);
        if len > self.max_name {
            return Err(RecordError::OverLimit {
                what: field,
                place: self.place,
                at,
                len,
                limit: self.max_name,
                knob: "max_name_bytes",
            });
        }
        let raw = self.take(field, len)?;
        std::str::from_utf8(raw).map_err(|_| RecordError::NotUtf8 {
            what: field,
            place: self.place,
            at,
        })
    }

    /// A `u32`-length-prefixed byte array (also a map: its prefix counts bytes).
    pub(super) fn prefixed(&mut self, field: &'static str) -> Result<&'a [u8], RecordError> {
        let len = u64::from(self.u32(field)?);
        self.take(field, len)
    }

    /// A `u64`-length-prefixed byte array; when `allow_cut`, a length past the end yields what
    /// is there (a chunk cut by truncation) and `true`.
    fn prefixed64(
        &mut self,
        field: &'static str,
        allow_cut: bool,
    ) -> Result<(&'a [u8], u64, bool), RecordError> {
        let len = self.u64(field)?;
        if allow_cut && len > self.left() as u64 {
            let rest = self.take(field, self.left() as u64)?;
            return Ok((rest, len, true));
        }
        Ok((self.take(field, len)?, len, false))
    }

    /// Everything not read yet.
    pub(super) fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}

/// One record: its opcode, where it starts (the opcode byte) and its body.
#[derive(Clone, Copy, Debug)]
pub(super) struct RawRecord<'a> {
    pub(super) opcode: u8,
    pub(super) at: u64,
    pub(super) body: &'a [u8],
}

/// Walks the records of a buffer (a chunk's decompressed records, the summary section),
/// checking each length against what is left and against `max_record_bytes`. Stops at the
/// first bad length (yielding its error once).
#[derive(Debug)]
pub(super) struct Records<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    place: Place,
    max_record: u64,
    failed: bool,
}

impl<'a> Records<'a> {
    pub(super) fn new(buf: &'a [u8], base: u64, place: Place, limits: &ReadLimits) -> Self {
        Records {
            buf,
            pos: 0,
            base,
            place,
            max_record: limits.max_record_bytes,
            failed: false,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RawRecord<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let at = self.base.saturating_add(self.pos as u64);
        let left = (self.buf.len() - self.pos) as u64;
        let fail = |e| Some(Err(e));
        self.failed = true;
        let Some(head) = self.buf.get(self.pos..self.pos + 9) else {
            return fail(RecordError::Truncated {
                what: "record header",
                place: self.place,
                at,
                need: 9,
                left,
            });
        };
        let opcode = head[0];
        let mut len = [0u8; 8];
        len.copy_from_slice(&head[1..9]);
        let len = u64::from_le_bytes(len);
        if len > self.max_record {
            return fail(RecordError::OverLimit {
                what: "record",
                place: self.place,
                at,
                len,
                limit: self.max_record,
                knob: "max_record_bytes",
            });
        }
        if len > left - 9 {
            return fail(RecordError::Truncated {
                what: "record",
                place: self.place,
                at,
                need: len,
                left: left - 9,
            });
        }
        let start = self.pos + 9;
        let end = start + len as usize; // len <= left - 9, so this is within buf
        self.pos = end;
        self.failed = false;
        Some(Ok(RawRecord {
            opcode,
            at,
            body: &self.buf[start..end],
        }))
    }
}

/// Schema record (the schema text itself is not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SchemaRec<'a> {
    pub(super) id: u16,
    pub(super) name: &'a str,
}

/// Channel record (metadata not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChannelRec<'a> {
    pub(super) id: u16,
    pub(super) schema_id: u16,
    pub(super) topic: &'a str,
    pub(super) encoding: &'a str,
}

/// Message record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MessageRec<'a> {
    pub(super) channel_id: u16,
    pub(super) log_time: u64,
    pub(super) data: &'a [u8],
}

/// Chunk record; `records` is what the file holds of the compressed records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChunkRec<'a> {
    pub(super) uncompressed_size: u64,
    pub(super) uncompressed_crc: u32,
    pub(super) compression: &'a str,
    pub(super) records: &'a [u8],
    /// The records were cut short (truncated file): `records` is a prefix.
    pub(super) cut: bool,
}

/// Chunk index record (of the summary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChunkIndexRec {
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    pub(super) chunk_start_offset: u64,
    pub(super) chunk_length: u64,
    /// Channels with a message index in the chunk (empty when the writer wrote none).
    pub(super) channels: Vec<u16>,
}

/// Statistics record (the fields redline uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StatisticsRec {
    pub(super) message_count: u64,
    pub(super) chunk_count: u32,
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
}

fn fields<'a>(
    what: &'static str,
    r: &RawRecord<'a>,
    place: Place,
    limits: &ReadLimits,
) -> Fields<'a> {
    // The body starts 9 bytes after the opcode.
    Fields::new(what, r.body, r.at.saturating_add(9), place, limits)
}

pub(super) fn schema<'a>(
    r: &RawRecord<'a>,
    place: Place,
    limits: &ReadLimits,
) -> Result<SchemaRec<'a>, RecordError> {
    let mut f = fields("schema record", r, place, limits);
    let id = f.u16("schema id")?;
    let name = f.string("schema name")?;
    f.string("schema encoding")?;
    f.prefixed("schema data")?;
    Ok(SchemaRec { id, name })
}

pub(super) fn channel<'a>(
    r: &RawRecord<'a>,
    place: Place,
    limits: &ReadLimits,
) -> Result<ChannelRec<'a>, RecordError> {
    let mut f = fields("channel record", r, place, limits);
    let id = f.u16("channel id")?;
    let schema_id = f.u16("channel schema id")?;
    let topic = f.string("channel topic")?;
    let encoding = f.string("channel message encoding")?;
    f.prefixed("channel metadata")?;
    Ok(ChannelRec {
        id,
        schema_id,
        topic,
        encoding,
    })
}

pub(super) fn message<'a>(
    r: &RawRecord<'a>,
    place: Place,
    limits: &ReadLimits,
) -> Result<MessageRec<'a>, RecordError> {
    let mut f = fields("message record", r, place, limits);
    let channel_id = f.u16("message channel id")?;
    f.u32("message sequence")?;
    let log_time = f.u64("message log time")?;
    f.u64("message publish time")?;
    Ok(MessageRec {
        channel_id,
        log_time,
        data: f.rest(),
    })
}

/// Parses a chunk record body; with `allow_cut`, a body cut by the end of the file yields the
/// compressed bytes that are there.
pub(super) fn chunk<'a>(
    body: &'a [u8],
    at: u64,
    allow_cut: bool,
    limits: &ReadLimits,
) -> Result<ChunkRec<'a>, RecordError> {
    let mut f = Fields::new(
        "chunk header",
        body,
        at.saturating_add(9),
        Place::File,
        limits,
    );
    f.u64("chunk start time")?;
    f.u64("chunk end time")?;
    let uncompressed_size = f.u64("chunk uncompressed size")?;
    let uncompressed_crc = f.u32("chunk uncompressed CRC")?;
    let compression = f.string("chunk compression")?;
    let (records, _, cut) = f.prefixed64("chunk records", allow_cut)?;
    Ok(ChunkRec {
        uncompressed_size,
        uncompressed_crc,
        compression,
        records,
        cut,
    })
}

pub(super) fn chunk_index(
    r: &RawRecord<'_>,
    limits: &ReadLimits,
) -> Result<ChunkIndexRec, RecordError> {
    let mut f = fields("chunk index record", r, Place::File, limits);
    let start_ns = f.u64("chunk index start time")?;
    let end_ns = f.u64("chunk index end time")?;
    let chunk_start_offset = f.u64("chunk index chunk offset")?;
    let chunk_length = f.u64("chunk index chunk length")?;
    let map = f.prefixed("chunk index message index offsets")?;
    // Entries are (u16 channel, u64 offset): the map's length is already checked against
    // the record, so this allocates at most map.len() / 10 entries.
    let channels = map
        .chunks_exact(10)
        .map(|e| u16::from_le_bytes([e[0], e[1]]))
        .collect();
    Ok(ChunkIndexRec {
        start_ns,
        end_ns,
        chunk_start_offset,
        chunk_length,
        channels,
    })
}

pub(super) fn statistics(
    r: &RawRecord<'_>,
    limits: &ReadLimits,
) -> Result<StatisticsRec, RecordError> {
    let mut f = fields("statistics record", r, Place::File, limits);
    let message_count = f.u64("statistics message count")?;
    f.u16("statistics schema count")?;
    f.u32("statistics channel count")?;
    f.u32("statistics attachment count")?;
    f.u32("statistics metadata count")?;
    let chunk_count = f.u32("statistics chunk count")?;
    let start_ns = f.u64("statistics start time")?;
    let end_ns = f.u64("statistics end time")?;
    Ok(StatisticsRec {
        message_count,
        chunk_count,
        start_ns,
        end_ns,
    })
}

/// CRC-32 (IEEE), as MCAP uses.
pub(super) fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Decompresses a chunk's records. The output never exceeds the declared uncompressed size,
/// which must be within `max_chunk_bytes`; the CRC is checked when the chunk is complete and
/// its CRC is not zero. For a chunk cut short (`c.cut`), what decompresses is returned with
/// the error that stopped it (expected: the data ends early). `at`: the chunk's file offset.
pub(super) fn decompress<'a>(
    c: &ChunkRec<'a>,
    at: u64,
    limits: &ReadLimits,
) -> (Cow<'a, [u8]>, Option<RecordError>) {
    let declared = c.uncompressed_size;
    if declared > limits.max_chunk_bytes {
        let e = RecordError::OverLimit {
            what: "chunk uncompressed size",
            place: Place::File,
            at,
            len: declared,
            limit: limits.max_chunk_bytes,
            knob: "max_chunk_bytes",
        };
        return (Cow::Borrowed(&[]), Some(e));
    }
    let out = match c.compression {
        "" => Ok(Cow::Borrowed(c.records)),
        "zstd" => match zstd::stream::read::Decoder::with_buffer(c.records) {
            Ok(mut d) => {
                // The decoder's window (allocated by zstd itself) stays within the chunk limit.
                let log = 64 - (limits.max_chunk_bytes.max(1) - 1).leading_zeros();
                let _ = d.window_log_max(log.clamp(10, 27));
                read_bounded(d, declared, at).map(Cow::Owned)
            }
            Err(e) => Err((
                Vec::new(),
                RecordError::Decompress {
                    at,
                    why: e.to_string(),
                },
            )),
        },
        "lz4" => match lz4::Decoder::new(c.records) {
            Ok(d) => read_bounded(d, declared, at).map(Cow::Owned),
            Err(e) => Err((
                Vec::new(),
                RecordError::Decompress {
                    at,
                    why: e.to_string(),
                },
            )),
        },
        other => Err((
            Vec::new(),
            RecordError::UnsupportedCompression {
                at,
                name: other.to_string(),
            },
        )),
    };
    let data = match out {
        Ok(d) => d,
        Err((partial, e)) => return (Cow::Owned(partial), Some(e)),
    };
    if c.cut {
        // A prefix: neither its size nor its CRC can be checked.
        return (data, None);
    }
    if data.len() as u64 != declared {
        let e = RecordError::SizeMismatch {
            at,
            declared,
            got: data.len() as u64,
        };
        return (data, Some(e));
    }
    if c.uncompressed_crc != 0 {
        let calculated = crc32(&data);
        if calculated != c.uncompressed_crc {
            let e = RecordError::Crc {
                what: "chunk",
                at,
                saved: c.uncompressed_crc,
                calculated,
            };
            return (data, Some(e));
        }
    }
    (data, None)
}

/// Reads `r` to its end or to `declared` bytes, whichever comes first; one byte more than
/// declared is a `SizeMismatch`. The buffer grows by doubling, capped at `declared`. On a
/// decoder error, returns what was produced with the error.
fn read_bounded<R: Read>(
    mut r: R,
    declared: u64,
    at: u64,
) -> Result<Vec<u8>, (Vec<u8>, RecordError)> {
    // declared <= max_chunk_bytes, checked by the caller; on a 32-bit target it may not fit.
    let Ok(cap) = usize::try_from(declared) else {
        return Err((
            Vec::new(),
            RecordError::Decompress {
                at,
                why: format!("{declared} bytes do not fit this machine's address space"),
            },
        ));
    };
    let mut out: Vec<u8> = Vec::new();
    loop {
        if out.len() == cap {
            let mut probe = [0u8; 1];
            return match r.read(&mut probe) {
                Ok(0) => Ok(out),
                Ok(_) => Err((
                    out,
                    RecordError::SizeMismatch {
                        at,
                        declared,
                        got: declared + 1,
                    },
                )),
                Err(e) => Err((
                    out,
                    RecordError::Decompress {
                        at,
                        why: e.to_string(),
                    },
                )),
            };
        }
        if out.len() == out.capacity() {
            let want = (out.capacity() * 2).max(64 * 1024).min(cap);
            out.reserve_exact(want - out.len());
        }
        let filled = out.len();
        let room = out.capacity().min(cap) - filled;
        out.resize(filled + room, 0);
        match r.read(&mut out[filled..]) {
            Ok(0) => {
                out.truncate(filled);
                return Ok(out);
            }
            Ok(n) => out.truncate(filled + n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => out.truncate(filled),
            Err(e) => {
                out.truncate(filled);
                return Err((
                    out,
                    RecordError::Decompress {
                        at,
                        why: e.to_string(),
                    },
                ));
            }
        }
    }
}

/// Opcodes redline reads (re-exported for the reader).
pub(super) use op::{
    CHANNEL as OP_CHANNEL, CHUNK as OP_CHUNK, CHUNK_INDEX as OP_CHUNK_INDEX,
    DATA_END as OP_DATA_END, FOOTER as OP_FOOTER, MESSAGE as OP_MESSAGE, SCHEMA as OP_SCHEMA,
    STATISTICS as OP_STATISTICS,
};

/// A message's serialized bytes: `data` itself, or, when it is one zstd frame (rosbag2's
/// message compression, `ros2 bag record --compression-mode message`, in either storage),
/// its decompressed bytes, at most `max_chunk_bytes` of them. Serialized CDR starts with
/// its encapsulation header (`00 01 00 00` and kin), never with the zstd magic, so no
/// flag from `metadata.yaml` is needed. The error says why (for an issue).
pub(super) fn message_bytes(data: &[u8], limits: &ReadLimits) -> Result<Vec<u8>, String> {
    if !data.starts_with(&super::unpack::ZSTD_MAGIC) {
        return Ok(data.to_vec());
    }
    let limit = limits.max_chunk_bytes;
    let fail =
        |e: &dyn std::fmt::Display| format!("is a zstd frame that cannot be decompressed ({e})");
    let mut d = zstd::stream::read::Decoder::with_buffer(data).map_err(|e| fail(&e))?;
    // The decoder's window (allocated by zstd itself) stays within the limit.
    let log = 64 - (limit.max(1) - 1).leading_zeros();
    let _ = d.window_log_max(log.clamp(10, 27));
    let mut out = Vec::new();
    (&mut d)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| fail(&e))?;
    if out.len() as u64 > limit {
        return Err(format!(
            "decompresses to more than {limit} bytes (`max_chunk_bytes` in the config's [log] table)"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(opcode: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![opcode];
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn record_lengths_are_checked_against_what_is_left_and_the_limit() {
        let limits = ReadLimits::small();
        let mut buf = rec(OP_MESSAGE, &[0; 22]);
        buf.extend_from_slice(&rec(OP_SCHEMA, &[1, 2, 3]));
        let all: Vec<_> = Records::new(&buf, 0, Place::File, &limits).collect();
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|r| r.is_ok()));
        // A length past the end: one error, then the walk stops.
        let mut bad = buf.clone();
        bad[1..9].copy_from_slice(&u64::MAX.to_le_bytes());
        let all: Vec<_> = Records::new(&bad, 100, Place::Chunk(7), &limits).collect();
        assert_eq!(all.len(), 1);
        let e = all[0].as_ref().unwrap_err();
        assert!(matches!(
            e,
            RecordError::OverLimit {
                at: 100,
                len: u64::MAX,
                knob: "max_record_bytes",
                ..
            }
        ));
        assert!(e.to_string().contains("chunk at file byte 7"), "{e}");
        bad[1..9].copy_from_slice(&1000u64.to_le_bytes());
        let e = Records::new(&bad, 0, Place::File, &limits)
            .next()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(e, RecordError::Truncated { need: 1000, .. }),
            "{e}"
        );
        // A header cut short.
        let e = Records::new(&buf[..5], 0, Place::File, &limits)
            .next()
            .unwrap()
            .unwrap_err();
        assert!(matches!(
            e,
            RecordError::Truncated {
                need: 9,
                left: 5,
                ..
            }
        ));
    }

    #[test]
    fn strings_and_arrays_are_checked_before_use() {
        let limits = ReadLimits::small();
        // channel: id, schema id, topic of length u32::MAX.
        let mut body = vec![1, 0, 2, 0];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        let r = rec(OP_CHANNEL, &body);
        let raw = Records::new(&r, 0, Place::File, &limits)
            .next()
            .unwrap()
            .unwrap();
        let e = channel(&raw, Place::File, &limits).unwrap_err();
        assert!(matches!(
            e,
            RecordError::OverLimit {
                what: "channel topic",
                len: 4_294_967_295,
                limit: 256,
                at: 13,
                ..
            }
        ));
        // Within the name limit but past the record.
        body[4..8].copy_from_slice(&200u32.to_le_bytes());
        let r = rec(OP_CHANNEL, &body);
        let raw = Records::new(&r, 0, Place::File, &limits)
            .next()
            .unwrap()
            .unwrap();
        assert!(matches!(
            channel(&raw, Place::File, &limits),
            Err(RecordError::Truncated {
                need: 200,
                left: 0,
                ..
            })
        ));
        // Chunk index map longer than the record.
        let mut body = vec![0u8; 32];
        body.extend_from_slice(&0x7fff_ffffu32.to_le_bytes());
        let r = rec(OP_CHUNK_INDEX, &body);
        let raw = Records::new(&r, 0, Place::File, &limits)
            .next()
            .unwrap()
            .unwrap();
        assert!(matches!(
            chunk_index(&raw, &limits),
            Err(RecordError::Truncated { .. })
        ));
    }

    fn chunk_body(compression: &str, usize_: u64, crc: u32, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&usize_.to_le_bytes());
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&(compression.len() as u32).to_le_bytes());
        b.extend_from_slice(compression.as_bytes());
        b.extend_from_slice(&(data.len() as u64).to_le_bytes());
        b.extend_from_slice(data);
        b
    }

    /// Bytes a decompressed chunk holds allocated (a borrowed one allocates nothing new).
    #[allow(clippy::ptr_arg)] // the Cow itself is what is asked about
    fn capacity(d: &std::borrow::Cow<'_, [u8]>) -> usize {
        match d {
            std::borrow::Cow::Owned(v) => v.capacity(),
            std::borrow::Cow::Borrowed(b) => b.len(),
        }
    }

    #[test]
    fn decompression_is_bounded_by_the_declared_size_and_the_limit() {
        let limits = ReadLimits::small();
        let plain = vec![7u8; 100_000];
        let z = zstd::bulk::compress(&plain, 3).unwrap();
        let crc = crc32(&plain);
        // Intact.
        let b = chunk_body("zstd", plain.len() as u64, crc, &z);
        let c = chunk(&b, 0, false, &limits).unwrap();
        let (d, e) = decompress(&c, 0, &limits);
        assert!(e.is_none(), "{e:?}");
        assert_eq!(&d[..], &plain[..]);
        // Declares less than it holds: output stops one byte past the declared size.
        let b = chunk_body("zstd", 1000, crc, &z);
        let c = chunk(&b, 0, false, &limits).unwrap();
        let (d, e) = decompress(&c, 0, &limits);
        assert!(d.len() <= 1000 && capacity(&d) <= 1000);
        assert!(matches!(
            e,
            Some(RecordError::SizeMismatch {
                declared: 1000,
                got: 1001,
                ..
            })
        ));
        // Declares more than the limit: nothing is decompressed.
        let b = chunk_body("zstd", u64::MAX / 3, crc, &z);
        let c = chunk(&b, 0, false, &limits).unwrap();
        let (d, e) = decompress(&c, 55, &limits);
        assert!(d.is_empty());
        assert!(matches!(
            e,
            Some(RecordError::OverLimit {
                at: 55,
                knob: "max_chunk_bytes",
                ..
            })
        ));
        // Declares a large size but holds little: the buffer follows the data, not the claim.
        let b = chunk_body("zstd", 8 << 20, crc, &z);
        let c = chunk(&b, 0, false, &limits).unwrap();
        let (d, e) = decompress(&c, 0, &limits);
        assert_eq!(d.len(), plain.len());
        assert!(capacity(&d) <= 2 * plain.len(), "{}", capacity(&d));
        assert!(matches!(e, Some(RecordError::SizeMismatch { .. })));
        // Wrong CRC.
        let b = chunk_body("zstd", plain.len() as u64, crc ^ 1, &z);
        let c = chunk(&b, 0, false, &limits).unwrap();
        assert!(matches!(
            decompress(&c, 0, &limits).1,
            Some(RecordError::Crc { .. })
        ));
        // lz4 frames and unknown compressions.
        let mut enc = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        std::io::Write::write_all(&mut enc, &plain).unwrap();
        let (l, res) = enc.finish();
        res.unwrap();
        let b = chunk_body("lz4", plain.len() as u64, crc, &l);
        let c = chunk(&b, 0, false, &limits).unwrap();
        let (d, e) = decompress(&c, 0, &limits);
        assert!(e.is_none(), "{e:?}");
        assert_eq!(d.len(), plain.len());
        let b = chunk_body("brotli", 10, 0, &[1, 2, 3]);
        let c = chunk(&b, 0, false, &limits).unwrap();
        assert!(matches!(
            decompress(&c, 0, &limits).1,
            Some(RecordError::UnsupportedCompression { .. })
        ));
        // Garbage in a zstd chunk is an error, not a panic.
        let b = chunk_body("zstd", 100, 0, &[0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff]);
        let c = chunk(&b, 0, false, &limits).unwrap();
        assert!(decompress(&c, 0, &limits).1.is_some());
    }

    #[test]
    fn a_cut_chunk_yields_its_compressed_prefix() {
        let limits = ReadLimits::small();
        let b = chunk_body("", 10, 0, &[1; 10]);
        let cut = &b[..b.len() - 4];
        assert!(chunk(cut, 0, false, &limits).is_err());
        let c = chunk(cut, 0, true, &limits).unwrap();
        assert!(c.cut && c.records.len() == 6);
    }
}
