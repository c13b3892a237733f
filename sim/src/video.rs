//! Camera streams recorded as compressed video: H.264 access units, one picture per message
//! (`foxglove_msgs/msg/CompressedVideo` with format `h264`,
//! `ffmpeg_image_transport_msgs/msg/FFMPEGPacket` of an H.264 codec, or a `CompressedImage`
//! whose format names `h264`), decoded to 8-bit RGB when the log is read.
//!
//! Promises:
//! - Pictures are exact: H.264 decoding is integer arithmetic that the standard fixes bit
//!   for bit (decoder: the pure-Rust `rusty_h264-decoder`, pinned; no threads), and the
//!   decoded I420 picture goes to RGB by the integer BT.601 video-range formulas of the raw
//!   YUV encodings (OpenCV's `COLOR_YUV2RGB_I420`). Same log, same pictures, on any machine.
//!   The stream's signalled colour matrix and range (VUI) are not read: a BT.709 or
//!   full-range stream's colours are slightly off, as with OpenCV's default conversion.
//! - A stream is decoded from a keyframe (an IDR picture, which carries or follows its
//!   parameter sets): pictures before the first one of a read are an issue each ("before the
//!   stream's first keyframe"). [`crate::log::LogReader::messages`] pre-reads a
//!   `CompressedVideo` or `FFMPEGPacket` camera from [`crate::log::EGO_PREROLL_NS`] before a
//!   later start, so a
//!   read from inside a group of pictures is whole when its keyframe lies in that window.
//! - An access unit that fails to decode is an issue; the stream then waits for its next
//!   keyframe (a damaged reference would spoil every picture until then). A decoder that
//!   panics on hostile bytes is caught the same way: never a panic out of here.
//! - Each message's picture is the one its own access unit codes, placed by the message's
//!   timestamp, which `CompressedVideo` defines as that picture's capture time. A stream with
//!   B-frames (pictures coded out of display order) therefore places every picture where it
//!   belongs, provided the recorder stamped each message with its picture's time; a driver
//!   that stamps messages in coding order misplaces the reordered pictures, and nothing in
//!   the stream can tell.
//! - Only H.264: other formats (`h265`, `vp9`, `av1`) are an issue naming the format.
//!
//! Cost: the decoder's reference pictures and one RGB buffer per picture, allocated as it
//! goes (reader side, never in a stage).

use std::panic::{catch_unwind, AssertUnwindSafe};

use rusty_h264_decoder::{au_is_idr, Decoder};

use crate::msgs::{i420_to_rgb8, ImageIssue};
use crate::types::RgbImage;

/// Whether `format` (a `CompressedVideo`'s, a `CompressedImage`'s, or an `FFMPEGPacket`'s
/// codec: `h264`, `libx264`, `h264_nvenc`, ...) names H.264.
pub fn is_h264(format: &str) -> bool {
    let f = format.to_ascii_lowercase();
    f.contains("264") || f.contains("avc")
}

/// One camera's H.264 stream being decoded, picture by picture, in log order.
#[derive(Default)]
pub struct VideoStream {
    decoder: Decoder,
    /// A keyframe has been decoded since the start (or since the last failure).
    started: bool,
    /// An access unit failed to decode in this read (the stream waits for a keyframe again).
    failed: bool,
}

impl std::fmt::Debug for VideoStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoStream")
            .field("started", &self.started)
            .field("failed", &self.failed)
            .finish()
    }
}

impl VideoStream {
    /// Decodes one access unit (`format` the message's). `Ok(None)`: the unit holds no
    /// picture (parameter sets alone). An error is the reason this message gives no picture.
    pub fn picture(&mut self, format: &str, au: &[u8]) -> Result<Option<RgbImage>, ImageIssue> {
        let fail = |why: String| Err(ImageIssue::Video(why));
        if !is_h264(format) {
            return fail(format!(
                "video format {format:?} is not decoded: redline decodes H.264 (h264) streams; \
                 re-encode the camera as H.264 or JPEG"
            ));
        }
        let idr = au_is_idr(au);
        if !self.started && !idr {
            return fail(
                if self.failed {
                    "H.264 picture after a damaged access unit: the stream waits for its next \
                 keyframe (IDR), so the pictures up to it are missing"
                } else {
                    "H.264 picture before the stream's first keyframe (IDR) in this read: a \
                 stream decodes from a keyframe, so the pictures up to the next one are missing"
                }
                .to_string(),
            );
        }
        let decoded = catch_unwind(AssertUnwindSafe(|| self.decoder.decode(au)));
        let frame = match decoded {
            Ok(Ok(frame)) => frame,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the decoder failed on its bytes".to_string(),
                };
                self.restart();
                return fail(format!(
                    "H.264 access unit cannot be decoded ({why}); the stream resumes at its \
                     next keyframe"
                ));
            }
        };
        let Some(frame) = frame else {
            return Ok(None);
        };
        self.started = true;
        let (w, h) = (frame.width, frame.height);
        match i420_to_rgb8(w, h, &frame.y, &frame.u, &frame.v) {
            Some(data) => Ok(Some(RgbImage {
                width: w as u32,
                height: h as u32,
                data,
            })),
            None => fail(format!(
                "H.264 picture of {w}x{h} px: redline reads 4:2:0 pictures of even width and \
                 height"
            )),
        }
    }

    /// Whether the stream still waits for its first keyframe in this read (no picture yet,
    /// no access unit failed): a picture refused now is only early, not damaged.
    pub fn awaits_first_keyframe(&self) -> bool {
        !self.started && !self.failed
    }

    /// After a failure: a fresh decoder that waits for the next keyframe.
    fn restart(&mut self) {
        self.decoder = Decoder::new();
        self.started = false;
        self.failed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_junk_are_issues_not_panics() {
        assert!(is_h264("h264") && is_h264("H264") && is_h264("h264; annexb"));
        assert!(is_h264("libx264") && is_h264("h264_nvenc"));
        assert!(!is_h264("h265") && !is_h264("hevc_nvenc") && !is_h264("jpeg"));
        let mut s = VideoStream::default();
        let e = s.picture("h265", &[0, 0, 0, 1]).unwrap_err().to_string();
        assert!(e.contains("\"h265\""), "{e}");
        // Not a keyframe: waits.
        let e = s
            .picture("h264", &[0, 0, 0, 1, 0x41, 0x9a, 0x00])
            .unwrap_err()
            .to_string();
        assert!(e.contains("first keyframe"), "{e}");
        // An IDR slice with no parameter sets, and garbage after an IDR header: issues.
        for junk in [
            vec![0, 0, 0, 1, 0x65, 0x88, 0x84],
            vec![0, 0, 0, 1, 0x65, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            vec![
                0, 0, 0, 1, 0x67, 0xff, 0, 0, 0, 1, 0x68, 0xff, 0, 0, 0, 1, 0x65, 0xff,
            ],
        ] {
            let e = s.picture("h264", &junk).unwrap_err().to_string();
            assert!(
                e.contains("cannot be decoded") || e.contains("keyframe"),
                "{e}"
            );
        }
    }
}
