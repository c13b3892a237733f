//! Log files compressed whole: rosbag2's file compression (`ros2 bag record
//! --compression-mode file --compression-format zstd`, and the `rosbags` package's writer)
//! leaves each finished storage file as `<name>.mcap.zstd` or `<name>.db3.zstd`, the whole
//! file as one zstd stream.
//!
//! Promises: a file that starts with the zstd magic is decompressed, streaming, into an
//! unnamed temporary file in the system's temporary directory (`$TMPDIR`, else `/tmp`); it
//! has no name, so it is gone when the reader is dropped or the process ends, however it
//! ends. The reader then reads it exactly as it reads the plain file: same messages, same
//! output hash. (A log held in memory, [`LogReader::from_bytes`], is decompressed into
//! memory.) Which file is compressed is told by its first bytes, never by its name.
//! A stream that is cut (a recorder stopped while compressing, a partial copy) or damaged
//! keeps every byte decompressed before the damage: the plain file's own recovery then reads
//! what it can, and the damage is a [`LogIssueKind::Truncated`] issue. At most
//! `max_unpacked_bytes` ([`ReadLimits`]) are decompressed; past it, an
//! [`LogIssueKind::OverLimit`] issue. A temporary directory that cannot take the file is a
//! [`LogError::Unpack`] that names the directory and what to do.
//!
//! Temporary disk is bounded per log: the decompressed copies of a log's files may take
//! `unpacked_disk_bytes` ([`ReadLimits`], default 16 GiB) at once. Past it, the copies read
//! least recently are dropped (each [`Packed`] file keeps only its path) and made again when
//! a read reaches them — a long file-compressed recording then needs room for about two of
//! its files, not all of them, at the cost of decompressing each file once more per pass
//! (once to index it at open, once per [`LogReader::messages`] pass that reads it). A copy
//! made again must have the first copy's length, else reads from it fail as I/O errors (the
//! file changed while it was read). A copy is dropped only between blocks, and every block
//! read seeks first, so no read sees the position reset.
//!
//! Cost: one sequential pass over the compressed file at open (and per later copy), one
//! 1 MiB buffer, and as much temporary disk as the decompressed file. No threads.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{LogError, LogIssueKind, LogReader, ReadLimits};

/// The first bytes of a zstd frame.
pub(super) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Bytes moved per read of the decompressor.
const STEP: usize = 1 << 20;

/// What went wrong inside a compressed stream: recorded as an issue of the log read from it.
#[derive(Debug)]
pub(super) struct Damage {
    pub(super) kind: LogIssueKind,
    /// What is wrong with the stream.
    pub(super) why: String,
    /// What is read nevertheless.
    pub(super) then: String,
}

impl Damage {
    /// The issue's text.
    pub(super) fn detail(&self) -> String {
        format!("{}: {}", self.why, self.then)
    }
}

/// A compressed file, decompressed.
pub(super) struct Unpacked<T> {
    /// The decompressed bytes (a temporary file, rewound, or memory).
    pub(super) out: T,
    /// How many there are.
    pub(super) len: u64,
    /// Why the stream stopped early, if it did.
    pub(super) damage: Option<Damage>,
}

/// Decompresses `file` (the compressed log at `path`) into an unnamed temporary file, at
/// most `limit` bytes (`max_unpacked_bytes`).
pub(super) fn to_temp_file(
    path: &Path,
    file: File,
    limit: u64,
) -> Result<Unpacked<File>, LogError> {
    let dir = std::env::temp_dir();
    let no_room = |len: u64, e: std::io::Error| LogError::Unpack {
        path: path.to_path_buf(),
        why: format!(
            "it is compressed with zstd and is read from a decompressed copy in {}, which \
             failed after {len} bytes ({e}); set TMPDIR to a directory with room for the \
             whole decompressed file, or decompress the bag first (`ros2 bag decompress`)",
            dir.display()
        ),
    };
    let mut out = tempfile::tempfile_in(&dir).map_err(|e| no_room(0, e))?;
    let (len, damage) = unpack(file, &mut out, limit).map_err(|(n, e)| no_room(n, e))?;
    out.seek(SeekFrom::Start(0)).map_err(|e| no_room(len, e))?;
    Ok(Unpacked { out, len, damage })
}

/// A compressed log file read through a decompressed copy in the temporary directory, which
/// may be dropped between reads and made again (see the module docs).
#[derive(Debug)]
pub(super) struct Packed {
    path: PathBuf,
    /// `max_unpacked_bytes`, for a copy made again.
    limit: u64,
    /// Length of the decompressed file (the first copy's).
    pub(super) len: u64,
    copy: Option<File>,
    /// When it was last read ([`LogReader::make_room_for`]'s clock).
    pub(super) last_read: u64,
    /// Copies made of it so far.
    pub(super) copies: u64,
}

impl Packed {
    /// The compressed file at `path` and its first copy, just made.
    pub(super) fn new(path: &Path, limits: &ReadLimits, first: Unpacked<File>) -> Packed {
        Packed {
            path: path.to_path_buf(),
            limit: limits.max_unpacked_bytes,
            len: first.len,
            copy: Some(first.out),
            last_read: 0,
            copies: 1,
        }
    }

    /// Whether its copy is on disk now.
    pub(super) fn is_resident(&self) -> bool {
        self.copy.is_some()
    }

    /// Drops the copy (made again by the next read).
    pub(super) fn drop_copy(&mut self) {
        self.copy = None;
    }

    /// The copy, made again if it was dropped.
    fn copy(&mut self) -> std::io::Result<&mut File> {
        if let Some(ref mut f) = self.copy {
            return Ok(f);
        }
        let fail = |e: String| std::io::Error::other(e);
        let file = File::open(&self.path)?;
        let again = to_temp_file(&self.path, file, self.limit).map_err(|e| fail(e.to_string()))?;
        if again.len != self.len {
            return Err(fail(format!(
                "it decompresses to {} bytes now and did to {} when opened: the file changed \
                 while it was read",
                again.len, self.len
            )));
        }
        self.copies += 1;
        Ok(self.copy.insert(again.out))
    }
}

impl Read for Packed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.copy()?.read(buf)
    }
}

impl Seek for Packed {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.copy()?.seek(pos)
    }
}

impl LogReader {
    /// A log opened from a decompressed file (`unpack`): the stream's damage, if any,
    /// becomes an issue, or, when nothing could be read, part of the error.
    pub(super) fn with_damage(
        path: &Path,
        opened: Result<LogReader, LogError>,
        len: u64,
        damage: Option<Damage>,
    ) -> Result<LogReader, LogError> {
        let Some(damage) = damage else {
            return opened;
        };
        match opened {
            Ok(mut r) => {
                r.issue(damage.kind, damage.detail());
                Ok(r)
            }
            Err(e) => Err(LogError::BrokenStream {
                path: path.to_path_buf(),
                why: if len == 0 {
                    format!(
                        "{}, before any of it could be decompressed (zstd decompresses blocks \
                         of up to 128 KiB whole)",
                        damage.why
                    )
                } else {
                    format!(
                        "{}, and the {len} bytes decompressed before it are no readable log: {e}",
                        damage.why
                    )
                },
            }),
        }
    }

    /// The compressed files of the log, part by part (part 0 the first file).
    fn packed_parts(&mut self) -> impl Iterator<Item = (usize, &mut Packed)> {
        std::iter::once(&mut self.file)
            .chain(self.more_files.iter_mut().map(|m| &mut m.file))
            .enumerate()
            .filter_map(|(k, s)| match s {
                super::reader::Source::Packed(p) => Some((k, p)),
                _ => None,
            })
    }

    /// Before a read of part `reading` (or, for `None`, after opening): drops the copies
    /// read least recently, never `reading`'s, until the copies on disk plus `reading`'s fit
    /// `unpacked_disk_bytes`; marks `reading` as read now.
    pub(super) fn make_room_for(&mut self, reading: Option<usize>) {
        self.read_clock += 1;
        let now = self.read_clock;
        let budget = self.limits.unpacked_disk_bytes;
        let mut need = 0u64;
        let mut resident = Vec::new();
        for (k, p) in self.packed_parts() {
            if Some(k) == reading {
                p.last_read = now;
                need = p.len;
            } else if p.is_resident() {
                resident.push((p.last_read, k, p.len));
            }
        }
        resident.sort_unstable();
        let mut total = need + resident.iter().map(|r| r.2).sum::<u64>();
        let mut drop = Vec::new();
        for &(_, k, len) in &resident {
            if total <= budget {
                break;
            }
            drop.push(k);
            total -= len;
        }
        for (k, p) in self.packed_parts() {
            if drop.contains(&k) {
                p.drop_copy();
            }
        }
    }

    /// How many decompressed copies of compressed files this reader has made (one per
    /// compressed file at open, one more each time a dropped copy was read again).
    pub fn decompressions(&self) -> u64 {
        std::iter::once(&self.file)
            .chain(self.more_files.iter().map(|m| &m.file))
            .map(|s| match s {
                super::reader::Source::Packed(p) => p.copies,
                _ => 0,
            })
            .sum()
    }
}

/// Decompresses a log held in memory into memory.
pub(super) fn to_memory(bytes: &[u8], limits: &ReadLimits) -> Unpacked<Vec<u8>> {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let (len, damage) =
        unpack(bytes, &mut out, limits.max_unpacked_bytes).unwrap_or_else(|(n, e)| {
            let why = format!("decompressing it into memory failed after {n} bytes ({e})");
            let then = "what was decompressed is read".to_string();
            let kind = LogIssueKind::Truncated;
            (n, Some(Damage { kind, why, then }))
        });
    Unpacked { out, len, damage }
}

/// Streams the decompressed bytes of `input` into `out`, at most `limit` of them. Damage in
/// the stream ends it (what came before is kept); a failed write is the error, with the bytes
/// written before it.
fn unpack(
    input: impl Read,
    out: &mut impl Write,
    limit: u64,
) -> Result<(u64, Option<Damage>), (u64, std::io::Error)> {
    let broken = |len: u64, e: &dyn std::fmt::Display| {
        Some(Damage {
            kind: LogIssueKind::Truncated,
            why: format!(
                "it is compressed with zstd and its stream breaks after {len} decompressed \
                 bytes ({e}; the recorder stopped while compressing it, or the copy is partial \
                 or damaged)"
            ),
            then: "what precedes the break is read".to_string(),
        })
    };
    let mut decoder = match zstd::stream::read::Decoder::new(input) {
        Ok(d) => d,
        Err(e) => return Ok((0, broken(0, &e))),
    };
    let mut buf = vec![0u8; STEP];
    let mut len = 0u64;
    loop {
        let n = match decoder.read(&mut buf) {
            Ok(0) => return Ok((len, None)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Ok((len, broken(len, &e))),
        };
        let room = limit - len;
        if n as u64 > room {
            // `room` < n ≤ STEP, so it fits a usize.
            out.write_all(&buf[..room as usize]).map_err(|e| (len, e))?;
            let over = Damage {
                kind: LogIssueKind::OverLimit,
                why: format!(
                    "it is compressed with zstd and decompresses to more than {limit} bytes \
                     (`max_unpacked_bytes` in the config's [log] table)"
                ),
                then: format!("only the first {limit} are read"),
            };
            return Ok((limit, Some(over)));
        }
        out.write_all(&buf[..n]).map_err(|e| (len, e))?;
        len += n as u64;
    }
}

/// The files of the log at `path` (a file or a bag directory) that are compressed whole and
/// will be decompressed when it is opened, with their sizes: for a notice before a long
/// open. Unreadable files are left out (opening reports them).
pub fn compressed_files(path: &Path) -> Vec<(PathBuf, u64)> {
    let files = if path.is_dir() {
        super::bag_dir::bag_files(path).unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .filter_map(|f| {
            let mut file = File::open(&f).ok()?;
            let mut magic = [0u8; 4];
            file.read_exact(&mut magic).ok()?;
            let len = file.metadata().ok()?.len();
            (magic == ZSTD_MAGIC).then_some((f, len))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_whole_stream_and_concatenated_frames_decompress_exactly() {
        let plain = bytes(3 * STEP + 123);
        let z = zstd::bulk::compress(&plain, 3).unwrap();
        let u = to_memory(&z, &ReadLimits::default());
        assert_eq!((u.out.len() as u64, u.damage.is_none()), (u.len, true));
        assert_eq!(u.out, plain);
        // Two frames one after the other (a compressor that flushed a frame and went on).
        let mut two = zstd::bulk::compress(&plain[..1000], 1).unwrap();
        two.extend(zstd::bulk::compress(&plain[1000..], 1).unwrap());
        assert_eq!(to_memory(&two, &ReadLimits::default()).out, plain);
    }

    #[test]
    fn a_cut_stream_keeps_what_precedes_the_cut_and_says_so() {
        let plain = bytes(4 * STEP);
        let z = zstd::stream::encode_all(&plain[..], 1).unwrap();
        let u = to_memory(&z[..z.len() / 2], &ReadLimits::default());
        let d = u.damage.expect("a cut stream is damage");
        assert_eq!(d.kind, LogIssueKind::Truncated);
        assert!(d.detail().contains("breaks after"), "{d:?}");
        assert!(u.len > 0 && u.len < plain.len() as u64, "{}", u.len);
        assert_eq!(u.out[..], plain[..u.len as usize]);
        // Garbage after the magic: nothing, and the reason.
        let u = to_memory(
            &[0x28, 0xB5, 0x2F, 0xFD, 0xff, 0xff, 0xff, 0xff],
            &ReadLimits::default(),
        );
        assert_eq!(
            (u.len, u.damage.map(|d| d.kind)),
            (0, Some(LogIssueKind::Truncated))
        );
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        let plain = vec![0u8; 10 * STEP];
        let z = zstd::bulk::compress(&plain, 3).unwrap();
        let limits = ReadLimits {
            max_unpacked_bytes: 2 * STEP as u64 + 5,
            ..ReadLimits::default()
        };
        let u = to_memory(&z, &limits);
        assert_eq!(u.len, 2 * STEP as u64 + 5);
        assert_eq!(u.out.len(), 2 * STEP + 5);
        let d = u.damage.unwrap();
        assert_eq!(d.kind, LogIssueKind::OverLimit);
        assert!(d.detail().contains("max_unpacked_bytes"), "{d:?}");
    }

    #[test]
    fn a_temporary_copy_reads_as_the_file_and_is_made_again_after_a_drop() {
        let dir = tempfile::tempdir().unwrap();
        let plain = bytes(STEP + 77);
        let path = dir.path().join("x.mcap.zstd");
        std::fs::write(&path, zstd::bulk::compress(&plain, 3).unwrap()).unwrap();
        assert_eq!(
            compressed_files(&path),
            vec![(path.clone(), std::fs::metadata(&path).unwrap().len())]
        );
        let plain_path = dir.path().join("y.mcap");
        std::fs::write(&plain_path, &plain).unwrap();
        assert!(compressed_files(&plain_path).is_empty());

        let limits = ReadLimits::default();
        let u = to_temp_file(&path, File::open(&path).unwrap(), limits.max_unpacked_bytes).unwrap();
        assert_eq!(u.len, plain.len() as u64);
        let mut p = Packed::new(&path, &limits, u);
        let mut back = Vec::new();
        p.read_to_end(&mut back).unwrap();
        assert_eq!(back, plain);
        // Dropped, then read again: the same bytes from a second copy.
        p.drop_copy();
        assert!(!p.is_resident());
        p.seek(SeekFrom::Start(77)).unwrap();
        let mut again = Vec::new();
        p.read_to_end(&mut again).unwrap();
        assert_eq!((&again[..], p.copies), (&plain[77..], 2));
        // The file changed on disk: the next copy is refused.
        p.drop_copy();
        std::fs::write(&path, zstd::bulk::compress(&plain[1..], 3).unwrap()).unwrap();
        let e = p.seek(SeekFrom::Start(0)).unwrap_err().to_string();
        assert!(e.contains("changed while it was read"), "{e}");
    }
}
