//! Entry points for the coverage-guided fuzzer (`fuzz/`, AFL++ through `cargo-afl`) and for
//! the regression tests of what it finds.
//!
//! Contract: each function takes arbitrary bytes and runs them through one input path of
//! the replay — [`log_bytes`]: the whole log path `redline replay --log` takes (open, summary
//! and index, recovery of a damaged file, decompression of a file compressed whole, message
//! decoding, frame grouping, the feed), with the default [`ReadLimits`] except
//! `max_unpacked_bytes`, 64 MiB (a small zstd input can expand a thousandfold and more, and
//! each would be written to the temporary directory); [`cdr_bytes`]: the CDR decoder of
//! every message type redline reads; [`video_bytes`]: the H.264 and H.265 decoding of a video
//! camera. They return normally for every input (errors are expected and ignored); a panic, an abort or an allocation failure is a bug the fuzzer
//! reports as a crash. Not for production use: [`log_bytes`] writes the bytes to a file in
//! the temporary directory (one per process), because the reader opens paths.

use std::path::PathBuf;

use crate::feed::Feed;
use crate::log::ReadLimits;
use crate::msgs::{
    CameraInfo, CompressedVideo, FfmpegPacket, GroundTruthMsg, H264Packet, Image, Odometry,
    RoadMap, RosMessage, TfMessage,
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
    ok += usize::from(FfmpegPacket::from_cdr(data).is_ok());
    ok += usize::from(H264Packet::from_cdr(data).is_ok());
    ok
}

/// Decodes `data` as an H.264 (`codec` `h264`) or H.265 (`h265`) stream, access unit by
/// access unit as a camera topic's messages bring them ([`crate::video::VideoStream`]);
/// returns the pictures decoded.
pub fn video_bytes(codec: &str, data: &[u8]) -> usize {
    let mut stream = crate::video::VideoStream::default();
    let units: Vec<Vec<u8>> = if codec == "h264" {
        (rusty_h264_decoder::split_access_units(data).into_iter())
            .map(<[u8]>::to_vec)
            .collect()
    } else {
        h265_access_units(data)
    };
    units
        .iter()
        .filter(|au| matches!(stream.picture(codec, au), Ok(Some(_))))
        .count()
}

/// An H.265 Annex B stream cut into access units (each NAL unit behind a 4-byte start
/// code): a unit ends before the parameter set, delimiter or prefix SEI, or the first slice
/// of a picture, that follows a picture's slices.
pub fn h265_access_units(data: &[u8]) -> Vec<Vec<u8>> {
    use rusty_h265::nal::{split_annex_b, NalHeader};
    let mut units: Vec<Vec<u8>> = Vec::new();
    let mut unit = Vec::new();
    let mut has_slice = false;
    for nal in split_annex_b(data) {
        let (vcl, starts) = match NalHeader::parse(nal) {
            Some(h) => {
                let t = h.nal_type.id();
                let first_slice = nal.get(2).is_some_and(|b| b & 0x80 != 0);
                (
                    t < 32,
                    if t < 32 {
                        first_slice
                    } else {
                        matches!(t, 32..=35 | 39 | 41..=44 | 48..=55)
                    },
                )
            }
            None => (false, false),
        };
        if starts && has_slice {
            units.push(std::mem::take(&mut unit));
            has_slice = false;
        }
        has_slice |= vcl;
        unit.extend_from_slice(&[0, 0, 0, 1]);
        unit.extend_from_slice(nal);
    }
    if !unit.is_empty() {
        units.push(unit);
    }
    units
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
        for codec in ["h264", "h265"] {
            assert_eq!(video_bytes(codec, &[]), 0);
            assert_eq!(
                video_bytes(codec, b"\x00\x00\x00\x01\x65junk\x00\x00\x01\x41more"),
                0
            );
        }
        let odom = TfMessage::default().to_cdr();
        assert!(cdr_bytes(&odom) >= 1, "a real message decodes");
        for cut in 0..odom.len() {
            cdr_bytes(&odom[..cut]);
        }
    }
}
