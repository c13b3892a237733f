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
//! Cost: one sequential pass over the compressed file at open, one 1 MiB buffer, and as much
//! temporary disk as the decompressed file. No threads.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{LogError, LogIssueKind, ReadLimits};

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

/// Decompresses `file` (the compressed log at `path`) into an unnamed temporary file.
pub(super) fn to_temp_file(
    path: &Path,
    file: File,
    limits: &ReadLimits,
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
    let (len, damage) =
        unpack(file, &mut out, limits.max_unpacked_bytes).map_err(|(n, e)| no_room(n, e))?;
    out.seek(SeekFrom::Start(0)).map_err(|e| no_room(len, e))?;
    Ok(Unpacked { out, len, damage })
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
    fn a_temporary_file_holds_the_decompressed_file_rewound() {
        let dir = tempfile::tempdir().unwrap();
        let plain = bytes(STEP + 77);
        let path = dir.path().join("x.mcap.zstd");
        std::fs::write(&path, zstd::bulk::compress(&plain, 3).unwrap()).unwrap();
        let mut u =
            to_temp_file(&path, File::open(&path).unwrap(), &ReadLimits::default()).unwrap();
        let mut back = Vec::new();
        u.out.read_to_end(&mut back).unwrap();
        assert_eq!((back, u.len), (plain.clone(), plain.len() as u64));
        assert_eq!(
            compressed_files(&path),
            vec![(path.clone(), std::fs::metadata(&path).unwrap().len())]
        );
        let plain_path = dir.path().join("y.mcap");
        std::fs::write(&plain_path, &plain).unwrap();
        assert!(compressed_files(&plain_path).is_empty());
    }
}
