//! Entry points for the coverage-guided fuzzer (`fuzz/`, AFL++ through `cargo-afl`) and for
//! the regression tests of what it finds.
//!
//! Contract: each function takes arbitrary bytes and runs them through one input path of
//! the replay — [`log_bytes`]: the whole log path `redline replay --log` takes (open, summary
//! and index, recovery of a damaged file, decompression of a file compressed whole, message
//! decoding, frame grouping, the feed), with the default [`ReadLimits`] except
//! `max_unpacked_bytes`, 64 MiB (a small zstd input can expand a thousandfold and more, and
//! each would be written to the temporary directory); [`cdr_bytes`]: the CDR decoder of
//! every message type redline reads; [`video_bytes`]: the H.264 decoding of a video
//! camera. They return normally for every input (errors are expected and ignored); a panic, an abort or an allocation failure is a bug the fuzzer
//! reports as a crash. Not for production use: [`log_bytes`] writes the bytes to a file in
//! the temporary directory (one per process), because the reader opens paths.

use std::path::PathBuf;

use crate::feed::Feed;
use crate::log::ReadLimits;
use crate::msgs::{
    CameraInfo, CompressedVideo, GroundTruthMsg, Image, Odometry, RoadMap, RosMessage, TfMessage,
};

/// Runs `data` as a log file (MCAP, a ROS 2 SQLite bag, or either compressed with zstd: the
/// reader tells them by their magic) through the replay's log path; returns the frames read
/// (0 on an error).
pub fn log_bytes(data: &[u8]) -> usize {
    let path = scratch_path();
    if std::fs::write(&path, data).is_err() {
        return 0;
    }
    let limits = ReadLimits {
        max_unpacked_bytes: 64 << 20,
        ..ReadLimits::default()
    };
    let frames = Feed::from_log_with(&path, None, limits).map_or(0, |f| f.frames.len());
    // AFL forks a process per input: leave no file behind.
    let _ = std::fs::remove_file(&path);
    frames
}

/// Decodes `data` as each message type redline reads (one input exercises every type);
/// returns how many decoded.
pub fn cdr_bytes(data: &[u8]) -> usize {
    let mut ok = 0;
    ok += usize::from(Image::from_cdr(data).is_ok());
    ok += usize::from(CameraInfo::from_cdr(data).is_ok());
    ok += usize::from(Odometry::from_cdr(data).is_ok());
    ok += usize::from(TfMessage::from_cdr(data).is_ok());
    ok += usize::from(GroundTruthMsg::from_cdr(data).is_ok());
    ok += usize::from(RoadMap::from_cdr(data).is_ok());
    ok += usize::from(CompressedVideo::from_cdr(data).is_ok());
    ok
}

/// Decodes `data` as an H.264 stream, access unit by access unit as a camera topic's messages
/// bring them ([`crate::video::VideoStream`]); returns the pictures decoded.
pub fn video_bytes(data: &[u8]) -> usize {
    let mut stream = crate::video::VideoStream::default();
    rusty_h264_decoder::split_access_units(data)
        .into_iter()
        .filter(|au| matches!(stream.picture("h264", au), Ok(Some(_))))
        .count()
}

fn scratch_path() -> PathBuf {
    std::env::temp_dir().join(format!("redline-fuzz-{}.mcap", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_take_junk_and_real_messages() {
        assert_eq!(log_bytes(b"not a log"), 0);
        assert_eq!(log_bytes(&[]), 0);
        assert_eq!(cdr_bytes(&[]), 0);
        assert_eq!(video_bytes(&[]), 0);
        assert_eq!(
            video_bytes(b"\x00\x00\x00\x01\x65junk\x00\x00\x01\x41more"),
            0
        );
        let odom = TfMessage::default().to_cdr();
        assert!(cdr_bytes(&odom) >= 1, "a real message decodes");
        for cut in 0..odom.len() {
            cdr_bytes(&odom[..cut]);
        }
    }
}
