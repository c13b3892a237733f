//! Camera streams recorded as compressed video: H.264 or H.265 (HEVC) access units, one
//! picture per message (`foxglove_msgs/msg/CompressedVideo` with format `h264` or `h265`,
//! `ffmpeg_image_transport_msgs/msg/FFMPEGPacket` of an H.264 or HEVC codec,
//! `h264_msgs/msg/Packet` (H.264), or a `CompressedImage` whose format names one), decoded
//! to 8-bit RGB when the log is read.
//!
//! Promises:
//! - Pictures are exact: H.264 and H.265 decoding is integer arithmetic that the standards
//!   fix bit for bit (decoders: the pure-Rust `rusty_h264-decoder` and `rusty_h265`, pinned;
//!   no threads of their own), and the decoded 4:2:0 picture goes to RGB in integer
//!   arithmetic by the matrix the stream's sequence parameter set signals in its VUI
//!   (`matrix_coefficients` BT.709, BT.601 or BT.2020, video or full range: the standards'
//!   `Kr`/`Kb` in 20-bit fixed point, `msgs::YuvMatrix`); a stream that signals
//!   nothing, or BT.601 video range, gets the formulas of the raw YUV encodings (OpenCV's
//!   `COLOR_YUV2RGB_I420`), what `ffmpeg_image_transport`'s encoder input assumes. Same
//!   log, same pictures, on any machine. `rusty_h265` reads debugging switches from the
//!   environment that change its pictures (`RH265_NO_LF`, `RH265_NO_SAO`,
//!   `RH265_ABLATE_*`): with one of them set (looked up once per decoder), an H.265
//!   picture is an issue that names it, never a silently different picture.
//! - A stream is decoded from a keyframe (H.264: an IDR picture; H.265: an IRAP picture, IDR,
//!   CRA or BLA, which carries or follows its parameter sets): pictures before the first
//!   one of a read are an issue each ("before the stream's first keyframe"); so are the
//!   leading pictures of a CRA keyframe that a read starts at which reference pictures
//!   before it (RASL), as the standard says. [`crate::log::LogReader::messages`] pre-reads
//!   every video camera (a `CompressedImage` one told by its first message's format) from
//!   [`crate::log::EGO_PREROLL_NS`] before a later start, so a read from inside a group of
//!   pictures is whole when its keyframe lies in that window.
//! - An access unit that fails to decode is an issue; the stream then waits for its next
//!   keyframe (a damaged reference would spoil every picture until then). A decoder that
//!   panics on hostile bytes is caught the same way: never a panic out of here.
//! - Each message's picture is the one its own access unit codes, placed by the message's
//!   timestamp, which `CompressedVideo` defines as that picture's capture time. A stream with
//!   B-frames (pictures coded out of display order) therefore places every picture where it
//!   belongs, provided the recorder stamped each message with its picture's time; a driver
//!   that stamps messages in coding order misplaces the reordered pictures, and nothing in
//!   the stream can tell. (H.265: the decoder outputs pictures in display order, when its
//!   reordering rules let it; redline instead takes each picture as soon as its access
//!   unit is decoded — it ends the picture with a one-slice marker the decoder rejects
//!   after finishing the picture before it, see `H265::END_OF_PICTURE` — and finds it by a
//!   per-unit tag, in the decoder's output or its picture buffer.)
//! - A sequence whose pictures are larger than `max_image_side` (the reader's limit) is
//!   refused before the decoder allocates them; the stream waits for its next keyframe.
//! - H.264 and 4:2:0 H.265 (Main, Main 10): other formats (`vp9`, `av1`) and other chroma
//!   formats are an issue naming what they are. A 10-bit picture is rounded to 8 bits
//!   (`(v + 2) >> 2`, at most 255) before the conversion to RGB.
//!
//! Cost: the decoder's reference pictures and one RGB buffer per picture, allocated as it
//! goes (reader side, never in a stage: the log reader runs each camera's stream on a
//! thread of its own, `log::camera_threads`); H.265 copies the cropped planes once more.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rusty_h265::bits::BitReader;
use rusty_h265::nal::{split_annex_b, unescape, NalHeader};

use crate::msgs::{i420_to_rgb8, ImageIssue, YuvMatrix};
use crate::types::RgbImage;

/// The video codecs redline decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// H.264 / AVC.
    H264,
    /// H.265 / HEVC.
    H265,
}

impl Codec {
    /// The codec that `format` (a `CompressedVideo`'s `h264`/`h265`, a `CompressedImage`'s
    /// format, or an `FFMPEGPacket`'s codec: `libx264`, `h264_nvenc`, `hevc`, `libx265`,
    /// `hevc_nvenc`, ...) names, when redline decodes it.
    pub fn of(format: &str) -> Option<Codec> {
        let f = format.to_ascii_lowercase();
        if f.contains("265") || f.contains("hevc") {
            Some(Codec::H265)
        } else if f.contains("264") || f.contains("avc") {
            Some(Codec::H264)
        } else {
            None
        }
    }

    /// The codec's name in messages: `H.264`, `H.265`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "H.264",
            Codec::H265 => "H.265",
        }
    }

    /// What access unit `au` (Annex B) holds, read from its NAL unit headers (and its
    /// sequence parameter sets) in one pass.
    fn inspect(self, au: &[u8]) -> UnitInfo {
        let mut info = UnitInfo::default();
        for nal in split_annex_b(au) {
            // (NAL unit type, whether a slice, whether a keyframe's slice.)
            let (kind, slice, key) = match self {
                Codec::H264 => {
                    let Some(t) = nal.first().map(|b| b & 0x1f) else {
                        continue;
                    };
                    (t, (1..=5).contains(&t), t == 5)
                }
                Codec::H265 => match NalHeader::parse(nal).filter(|h| h.layer_id == 0) {
                    // Types 22 and 23 are reserved IRAP types the decoder skips.
                    Some(h) => (h.nal_type.id(), h.nal_type.id() < 22, h.nal_type.is_irap()),
                    None => continue,
                },
            };
            info.picture |= slice;
            info.keyframe |= slice && key;
            let sps = match (self, kind) {
                (Codec::H264, 7) => h264_sequence(nal),
                (Codec::H265, 33) => h265_sequence(nal),
                _ => None,
            };
            info.sequence = sps.or(info.sequence);
        }
        info
    }
}

/// What an access unit holds ([`Codec::inspect`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct UnitInfo {
    /// It codes a picture (any slice), not only parameter sets or supplemental data.
    picture: bool,
    /// It codes a keyframe, a picture that decodes without any before it: an IDR picture
    /// (H.264), an IRAP picture (H.265: IDR, CRA, BLA).
    keyframe: bool,
    /// Its last sequence parameter set that parses.
    sequence: Option<Sequence>,
}

/// An H.265 sequence parameter set (`nal`, its 2-byte header first), read by the decoder's
/// own parser; `None` when it does not parse.
fn h265_sequence(nal: &[u8]) -> Option<Sequence> {
    let sps = rusty_h265::ps::parse_sps(&unescape(nal.get(2..)?).data).ok()?;
    let colour = match &sps.vui {
        Some(v) => YuvMatrix::for_video(v.matrix_coeffs, v.video_full_range_flag),
        None => YuvMatrix::OPENCV_BT601,
    };
    Some(Sequence {
        width: sps.width,
        height: sps.height,
        colour,
    })
}

/// What a sequence parameter set says that redline uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sequence {
    /// Coded picture size, px (before cropping).
    width: u32,
    height: u32,
    /// The conversion to RGB its VUI signals (BT.601 video range when it says nothing).
    colour: YuvMatrix,
}

/// An H.264 sequence parameter set (`nal`, its header byte first) read up to its VUI's
/// colour description (ITU-T H.264 7.3.2.1.1 and E.1.1); `None` when it does not parse.
fn h264_sequence(nal: &[u8]) -> Option<Sequence> {
    let rbsp = unescape(nal.get(1..)?);
    let r = &mut BitReader::new(&rbsp.data);
    let ue = |r: &mut BitReader| r.read_ue().ok();
    let se = |r: &mut BitReader| {
        let k = i64::from(r.read_ue().ok()?);
        Some(if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) })
    };
    let flag = |r: &mut BitReader| r.read_flag().ok();
    let profile = r.read_bits(8).ok()?;
    r.skip_bits(16).ok()?; // constraint flags, level
    ue(r)?; // seq_parameter_set_id
    if matches!(
        profile,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        let chroma_format = ue(r)?;
        if chroma_format == 3 {
            flag(r)?; // separate_colour_plane_flag
        }
        ue(r)?; // bit depths
        ue(r)?;
        flag(r)?; // qpprime_y_zero_transform_bypass_flag
        if flag(r)? {
            // Scaling lists: skipped by their syntax (7.3.2.1.1.1).
            for i in 0..if chroma_format == 3 { 12 } else { 8 } {
                if flag(r)? {
                    let (mut last, mut next) = (8i64, 8i64);
                    for _ in 0..if i < 6 { 16 } else { 64 } {
                        if next != 0 {
                            next = (last + se(r)? + 256).rem_euclid(256);
                        }
                        if next != 0 {
                            last = next;
                        }
                    }
                }
            }
        }
    }
    ue(r)?; // log2_max_frame_num_minus4
    match ue(r)? {
        0 => {
            ue(r)?; // log2_max_pic_order_cnt_lsb_minus4
        }
        1 => {
            flag(r)?;
            se(r)?;
            se(r)?;
            let cycle = ue(r)?;
            if cycle > 255 {
                return None;
            }
            for _ in 0..cycle {
                se(r)?;
            }
        }
        _ => {}
    }
    ue(r)?; // max_num_ref_frames
    flag(r)?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = ue(r)?.checked_add(1)?;
    let height_units = ue(r)?.checked_add(1)?;
    let frame_mbs_only = flag(r)?;
    if !frame_mbs_only {
        flag(r)?; // mb_adaptive_frame_field_flag
    }
    flag(r)?; // direct_8x8_inference_flag
    if flag(r)? {
        for _ in 0..4 {
            ue(r)?; // frame cropping offsets
        }
    }
    let width = width_mbs.saturating_mul(16);
    let height = height_units.saturating_mul(if frame_mbs_only { 16 } else { 32 });
    // The VUI, when present and readable, up to its colour description.
    let mut vui = || -> Option<YuvMatrix> {
        if !flag(r)? {
            return None;
        }
        if flag(r)? && r.read_bits(8).ok()? == 255 {
            r.skip_bits(32).ok()?; // sar_width, sar_height
        }
        if flag(r)? {
            flag(r)?; // overscan_appropriate_flag
        }
        if !flag(r)? {
            return None; // no video signal type
        }
        r.skip_bits(3).ok()?; // video_format
        let full_range = flag(r)?;
        let matrix = if flag(r)? {
            r.skip_bits(16).ok()?; // colour_primaries, transfer_characteristics
            r.read_bits(8).ok()? as u8
        } else {
            2 // unspecified
        };
        Some(YuvMatrix::for_video(matrix, full_range))
    };
    Some(Sequence {
        width,
        height,
        colour: vui().unwrap_or(YuvMatrix::OPENCV_BT601),
    })
}

/// Whether `format` names a video codec redline decodes ([`Codec::of`]).
pub fn is_video(format: &str) -> bool {
    Codec::of(format).is_some()
}

/// What one access unit gave.
enum Unit {
    /// Its picture, as RGB.
    Picture(RgbImage),
    /// No picture, and none was expected (parameter sets alone).
    Nothing,
    /// A picture that cannot be used, and why (4:2:2, odd size, a skipped leading picture).
    Refused(String),
}

/// One camera's decoder, by codec (boxed: each is kilobytes of state).
enum Decoding {
    H264(Box<rusty_h264_decoder::Decoder>),
    H265(Box<H265>),
}

impl Decoding {
    fn new(codec: Codec) -> Decoding {
        match codec {
            Codec::H264 => Decoding::H264(Box::default()),
            Codec::H265 => Decoding::H265(Box::new(H265::new())),
        }
    }

    fn codec(&self) -> Codec {
        match self {
            Decoding::H264(_) => Codec::H264,
            Decoding::H265(_) => Codec::H265,
        }
    }

    /// Decodes `au` (`picture`: whether it codes one), its picture converted by `colour`; an
    /// error is why it cannot be decoded.
    fn decode(&mut self, au: &[u8], picture: bool, colour: &YuvMatrix) -> Result<Unit, String> {
        match self {
            Decoding::H264(decoder) => {
                let Some(frame) = decoder.decode(au).map_err(|e| e.to_string())? else {
                    return Ok(Unit::Nothing);
                };
                let planes = [&frame.y[..], &frame.u, &frame.v];
                Ok(rgb("H.264", frame.width, frame.height, planes, colour))
            }
            Decoding::H265(h265) => h265.decode(au, picture, colour),
        }
    }
}

/// A decoded 8-bit I420 picture as RGB, or why it cannot be.
fn rgb(codec: &str, w: usize, h: usize, planes: [&[u8]; 3], colour: &YuvMatrix) -> Unit {
    match i420_to_rgb8(w, h, planes, colour) {
        Some(data) => Unit::Picture(RgbImage {
            width: w as u32,
            height: h as u32,
            data,
        }),
        None => Unit::Refused(format!(
            "{codec} picture of {w}x{h} px: redline reads 4:2:0 pictures of even width and \
             height"
        )),
    }
}

/// An H.265 decoder that gives each access unit's picture at once, in coding order.
struct H265 {
    decoder: rusty_h265::Decoder,
    /// The tag of the next access unit (its `pts` for the decoder).
    next_tag: i64,
    /// One of [`H265::ALTERING_SWITCHES`] set in the environment when the decoder was
    /// made: its pictures are then refused.
    altered_by: Option<&'static str>,
}

impl H265 {
    /// A one-slice NAL unit (type 1, a trailing picture's slice) that says "first slice of a
    /// new picture" and then ends before its header does. The decoder finishes the picture
    /// in flight on its first bit (in-loop filters, into the picture buffer, output if its
    /// reordering rules allow), then rejects the slice and keeps no state of it: the access
    /// unit's picture is complete without waiting for the next unit.
    const END_OF_PICTURE: [u8; 3] = [0x02, 0x01, 0x80];

    /// The decoder's debugging switches that change its pictures (read from the
    /// environment by `rusty_h265` itself).
    const ALTERING_SWITCHES: [&'static str; 5] = [
        "RH265_NO_LF",
        "RH265_NO_SAO",
        "RH265_ABLATE_MC",
        "RH265_ABLATE_INTRA",
        "RH265_ABLATE_RESIDUAL",
    ];

    fn new() -> H265 {
        let mut decoder = rusty_h265::Decoder::new();
        decoder.ablate = Default::default();
        let altered_by = (Self::ALTERING_SWITCHES.iter())
            .find(|s| std::env::var_os(s).is_some())
            .copied();
        H265 {
            decoder,
            next_tag: 0,
            altered_by,
        }
    }

    /// Decodes `au` (`picture`: whether it codes one, [`UnitInfo::picture`]).
    fn decode(&mut self, au: &[u8], picture: bool, colour: &YuvMatrix) -> Result<Unit, String> {
        if let Some(switch) = self.altered_by {
            return Ok(Unit::Refused(format!(
                "H.265 picture not decoded: {switch} is set in the environment, a debugging \
                 switch of the H.265 decoder that changes its pictures; unset it"
            )));
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        self.decoder
            .push_annexb(au, Some(tag))
            .map_err(|e| e.to_string())?;
        // Rejected by design (see END_OF_PICTURE): what matters is the picture it ends.
        let _ = self.decoder.push_nal(&Self::END_OF_PICTURE, None);
        // The unit's picture: in the output queue (drained: every other picture there was
        // taken from the buffer when its own unit was decoded) or still in the buffer.
        let mut found = None;
        while let Ok(frame) = self.decoder.next_frame() {
            if frame.pts == Some(tag) {
                found = Some((frame.picture, true));
            }
        }
        if found.is_none() {
            found = (self.decoder.dpb().iter())
                .find(|e| e.pts == Some(tag))
                .map(|e| (e.pic.clone(), e.output_flag));
        }
        match found {
            None if picture => Ok(Unit::Refused(
                "H.265 leading picture (RASL) of the keyframe this read starts at: it \
                 references pictures before that keyframe, so it cannot be decoded"
                    .to_string(),
            )),
            None => Ok(Unit::Nothing),
            Some((_, false)) => Ok(Unit::Refused(
                "H.265 picture marked not for display (pic_output_flag 0)".to_string(),
            )),
            Some((pic, true)) => Ok(Self::cropped(&pic, colour)),
        }
    }

    /// The picture's cropped 4:2:0 planes as RGB, or why not. Deeper pictures (Main 10: 10
    /// bits) are rounded to 8 bits first, each sample `min((v + 2^(d−9)) >> (d − 8), 255)`
    /// for a depth of `d` bits (round half up).
    fn cropped(pic: &rusty_h265::Picture, colour: &YuvMatrix) -> Unit {
        let depths = [pic.bit_depth_luma, pic.bit_depth_chroma];
        if pic.chroma_format_idc != 1 || depths.iter().any(|d| !(8..=16).contains(d)) {
            return Unit::Refused(format!(
                "H.265 picture of {} bits, chroma format {}: redline reads 4:2:0 pictures of \
                 8 to 16 bits (Main, Main 10); re-encode the camera as 4:2:0",
                pic.bit_depth_luma.max(pic.bit_depth_chroma),
                ["4:0:0", "4:2:0", "4:2:2", "4:4:4"]
                    .get(usize::from(pic.chroma_format_idc))
                    .unwrap_or(&"unknown"),
            ));
        }
        let (x0, y0, w, h) = pic.crop;
        let plane = |i: usize, x0: usize, y0: usize, w: usize, h: usize| -> Option<Vec<u8>> {
            let p = &pic.planes[i];
            let shift = u32::from(depths[usize::from(i > 0)] - 8);
            let half = (1u32 << shift) >> 1;
            let mut out = Vec::with_capacity(w * h);
            for y in y0..y0 + h {
                let row = p.data.get(y * p.stride + x0..y * p.stride + x0 + w)?;
                out.extend(
                    row.iter()
                        .map(|&v| ((u32::from(v) + half) >> shift).min(255) as u8),
                );
            }
            Some(out)
        };
        let planes = (
            plane(0, x0, y0, w, h),
            plane(1, x0 / 2, y0 / 2, w / 2, h / 2),
            plane(2, x0 / 2, y0 / 2, w / 2, h / 2),
        );
        match planes {
            (Some(y), Some(u), Some(v)) => rgb("H.265", w, h, [&y, &u, &v], colour),
            _ => Unit::Refused(format!(
                "H.265 picture's crop window {w}x{h} at ({x0}, {y0}) lies outside its planes"
            )),
        }
    }
}

/// One camera's video stream being decoded, picture by picture, in log order.
pub struct VideoStream {
    /// The decoder, made for the codec of the stream's first unit (and made again when a
    /// unit names another codec).
    decoding: Option<Decoding>,
    /// A keyframe has been decoded since the start (or since the last failure).
    started: bool,
    /// An access unit failed to decode in this read (the stream waits for a keyframe again).
    failed: bool,
    /// The largest picture side taken ([`crate::log::ReadLimits::max_image_side`]).
    max_side: u32,
    /// The conversion to RGB the stream's last sequence parameter set signals.
    colour: YuvMatrix,
}

impl Default for VideoStream {
    /// A stream with the default [`crate::log::ReadLimits::max_image_side`].
    fn default() -> VideoStream {
        VideoStream::with_max_side(crate::log::ReadLimits::default().max_image_side)
    }
}

impl std::fmt::Debug for VideoStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoStream")
            .field("codec", &self.decoding.as_ref().map(Decoding::codec))
            .field("started", &self.started)
            .field("failed", &self.failed)
            .finish()
    }
}

impl VideoStream {
    /// A stream whose pictures may be up to `max_side` px a side (a sequence that declares
    /// larger ones is refused before it is decoded).
    pub fn with_max_side(max_side: u32) -> VideoStream {
        VideoStream {
            decoding: None,
            started: false,
            failed: false,
            max_side,
            colour: YuvMatrix::OPENCV_BT601,
        }
    }

    /// Decodes one access unit (`format` the message's). `Ok(None)`: the unit holds no
    /// picture (parameter sets alone). An error is the reason this message gives no picture.
    pub fn picture(&mut self, format: &str, au: &[u8]) -> Result<Option<RgbImage>, ImageIssue> {
        let fail = |why: String| Err(ImageIssue::Video(why));
        let Some(codec) = Codec::of(format) else {
            return fail(format!(
                "video format {format:?} is not decoded: redline decodes H.264 (h264) and \
                 H.265 (h265) streams; re-encode the camera as one of them or as JPEG"
            ));
        };
        let name = codec.name();
        if self.decoding.as_ref().map(Decoding::codec) != Some(codec) {
            // A stream's first unit, or one of another codec: a fresh decoder that starts
            // at a keyframe.
            self.decoding = Some(Decoding::new(codec));
            self.started = false;
        }
        // A sequence parameter set: its picture size is checked before the decoder
        // allocates pictures of it (rusty_h265 takes up to 16888 px a side, about 0.9 GB a
        // picture), and its colour signalling chooses the conversion to RGB.
        let info = codec.inspect(au);
        if let Some(seq) = info.sequence {
            if seq.width.max(seq.height) > self.max_side {
                self.restart(codec);
                return fail(format!(
                    "{name} sequence of {}x{} px pictures, beyond max_image_side ({} px, the \
                     config's [log] table); the stream resumes at its next keyframe",
                    seq.width, seq.height, self.max_side
                ));
            }
            self.colour = seq.colour;
        }
        // Parameter sets alone always reach the decoder (a recorder may send them apart
        // from the keyframe); a picture before a keyframe would decode to garbage.
        let picture = info.picture;
        if !self.started && picture && !info.keyframe {
            return fail(if self.failed {
                format!(
                    "{name} picture after a damaged access unit: the stream waits for its \
                     next keyframe, so the pictures up to it are missing"
                )
            } else {
                format!(
                    "{name} picture before the stream's first keyframe in this read: a stream \
                     decodes from a keyframe, so the pictures up to the next one are missing"
                )
            });
        }
        let Some(decoding) = self.decoding.as_mut() else {
            return fail(format!("{name} stream has no decoder"));
        };
        let colour = self.colour;
        let decoded = catch_unwind(AssertUnwindSafe(|| decoding.decode(au, picture, &colour)));
        let unit = match decoded {
            Ok(Ok(unit)) => unit,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e,
                    _ => "the decoder failed on its bytes".to_string(),
                };
                self.restart(codec);
                return fail(format!(
                    "{name} access unit cannot be decoded ({why}); the stream resumes at its \
                     next keyframe"
                ));
            }
        };
        // A unit with a picture decoded: from here on the stream's pictures decode (even
        // when this one cannot be used, e.g. 4:2:2: the next ones say so too).
        self.started |= picture;
        match unit {
            Unit::Nothing => Ok(None),
            Unit::Refused(why) => fail(why),
            Unit::Picture(img) => Ok(Some(img)),
        }
    }

    /// Whether the stream still waits for its first keyframe in this read (no picture yet,
    /// no access unit failed): a picture refused now is only early, not damaged.
    pub fn awaits_first_keyframe(&self) -> bool {
        !self.started && !self.failed
    }

    /// After a failure: a fresh decoder that waits for the next keyframe.
    fn restart(&mut self, codec: Codec) {
        self.decoding = Some(Decoding::new(codec));
        self.started = false;
        self.failed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_junk_are_issues_not_panics() {
        for (format, codec) in [
            ("h264", Some(Codec::H264)),
            ("H264", Some(Codec::H264)),
            ("h264; annexb", Some(Codec::H264)),
            ("libx264", Some(Codec::H264)),
            ("h264_nvenc", Some(Codec::H264)),
            ("h265", Some(Codec::H265)),
            ("hevc", Some(Codec::H265)),
            ("libx265", Some(Codec::H265)),
            ("hevc_nvenc", Some(Codec::H265)),
            ("jpeg", None),
            ("vp9", None),
            ("av1", None),
        ] {
            assert_eq!(Codec::of(format), codec, "{format}");
        }
        let mut s = VideoStream::default();
        let e = s.picture("vp9", &[0, 0, 0, 1]).unwrap_err().to_string();
        assert!(e.contains("\"vp9\""), "{e}");
        // Not a keyframe: waits.
        let e = s
            .picture("h264", &[0, 0, 0, 1, 0x41, 0x9a, 0x00])
            .unwrap_err()
            .to_string();
        assert!(e.contains("first keyframe"), "{e}");
        // H.265: a trailing picture's slice (type 1) waits too.
        let e = (s.picture("h265", &[0, 0, 0, 1, 0x02, 0x01, 0xd0, 0x00]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("H.265 picture before") && e.contains("first keyframe"),
            "{e}"
        );
        // An IDR slice with no parameter sets, and garbage after an IDR header: issues.
        for (format, junk) in [
            ("h264", vec![0, 0, 0, 1, 0x65, 0x88, 0x84]),
            (
                "h264",
                vec![0, 0, 0, 1, 0x65, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
            (
                "h264",
                vec![
                    0, 0, 0, 1, 0x67, 0xff, 0, 0, 0, 1, 0x68, 0xff, 0, 0, 0, 1, 0x65, 0xff,
                ],
            ),
            // IDR_W_RADL (19) and CRA (21) slices without parameter sets, junk SPS + IDR.
            ("h265", vec![0, 0, 0, 1, 0x26, 0x01, 0xaf, 0x00]),
            ("h265", vec![0, 0, 0, 1, 0x2a, 0x01, 0xff, 0xff, 0xff]),
            (
                "h265",
                vec![
                    0, 0, 0, 1, 0x42, 0x01, 0xff, 0xff, 0, 0, 0, 1, 0x28, 0x01, 0xaf,
                ],
            ),
        ] {
            let e = s.picture(format, &junk).unwrap_err().to_string();
            assert!(
                e.contains("cannot be decoded") || e.contains("keyframe"),
                "{format}: {e}"
            );
        }
    }

    /// libx264's High-profile keyframe of a flat 64x48 picture (Y 90, U 100, V 160) with
    /// scaling matrices (`cqm=jvt`) and BT.709 signalled in its VUI (x264's SEI removed).
    const HIGH_BT709_H264: &[u8] = include_bytes!("video_fixtures/high_cqm_bt709_64x48.h264");

    #[test]
    fn an_h264_high_profile_sequence_signalling_bt709_converts_by_bt709() {
        let seq = Codec::H264
            .inspect(HIGH_BT709_H264)
            .sequence
            .expect("its SPS parses");
        let bt709 = YuvMatrix::for_video(1, false);
        assert_eq!((seq.width, seq.height, seq.colour), (64, 48, bt709));
        let img = (VideoStream::default().picture("h264", HIGH_BT709_H264))
            .unwrap()
            .expect("a picture");
        let planes: [&[u8]; 3] = [&[90; 64 * 48], &[100; 32 * 24], &[160; 32 * 24]];
        assert!(img.data == i420_to_rgb8(64, 48, planes, &bt709).unwrap());
        assert!(img.data != i420_to_rgb8(64, 48, planes, &YuvMatrix::OPENCV_BT601).unwrap());
        // A cut SPS does not parse; no SPS, no sequence.
        assert_eq!(Codec::H264.inspect(&HIGH_BT709_H264[..9]).sequence, None);
        assert_eq!(
            Codec::H264.inspect(&[0, 0, 0, 1, 0x65, 0x88]).sequence,
            None
        );
    }

    /// libx265's three flat 64x48 pictures (Y 76, 116, 156; U 128; V 128, 148, 168, as
    /// FFmpeg decodes them), P-frames after an IDR keyframe that carries its parameter sets.
    const FLAT_H265: &[u8] = include_bytes!("video_fixtures/flat_64x48.h265");

    #[test]
    fn h265_pictures_come_out_with_their_own_unit_even_with_parameter_sets_apart() {
        let units = crate::fuzzing::h265_access_units(FLAT_H265);
        assert_eq!(units.len(), 3);
        let want = |k: usize| {
            let (y, v) = (76 + 40 * k as u8, 128 + 20 * k as u8);
            let planes: [&[u8]; 3] = [&[y; 64 * 48], &[128; 32 * 24], &[v; 32 * 24]];
            i420_to_rgb8(64, 48, planes, &YuvMatrix::OPENCV_BT601).unwrap()
        };
        // The keyframe's parameter sets (VPS, SPS, PPS, SEI) as a message of their own, as
        // some recorders send them: no picture, and the keyframe after them decodes.
        let nals = split_annex_b(&units[0]);
        let (params, slice) = nals.split_at(nals.len() - 1);
        let annexb = |nals: &[&[u8]]| -> Vec<u8> {
            nals.iter()
                .flat_map(|n| [&[0u8, 0, 0, 1][..], n].concat())
                .collect()
        };
        let mut s = VideoStream::default();
        assert_eq!(s.picture("h265", &annexb(params)), Ok(None));
        assert!(s.awaits_first_keyframe());
        for (k, unit) in [annexb(slice), units[1].clone(), units[2].clone()]
            .iter()
            .enumerate()
        {
            // Each picture comes out of the call that brings its unit, not the next one.
            let img = s.picture("hevc_nvenc", unit).unwrap().expect("a picture");
            assert_eq!((img.width, img.height), (64, 48));
            assert!(img.data == want(k), "picture {k}");
        }
        // A stream taking pictures of at most 48 px a side refuses the 64x48 sequence before
        // decoding it.
        let mut small = VideoStream::with_max_side(48);
        let e = small.picture("h265", &units[0]).unwrap_err().to_string();
        assert!(
            e.contains("64x48 px pictures, beyond max_image_side (48 px"),
            "{e}"
        );
        assert!(VideoStream::with_max_side(64)
            .picture("h265", &units[0])
            .is_ok());
        // Read again from the second unit: a P-frame before any keyframe waits.
        let mut late = VideoStream::default();
        let e = late.picture("h265", &units[1]).unwrap_err().to_string();
        assert!(e.contains("first keyframe"), "{e}");
    }

    #[test]
    fn keyframes_and_pictures_by_nal_type() {
        let nal = |b: &[u8]| [&[0u8, 0, 0, 1][..], b].concat();
        // H.265: IDR_W_RADL, IDR_N_LP, CRA and BLA are keyframes; TRAIL, RASL, reserved
        // IRAP 22 are not; a VPS is no picture.
        for (header, key, picture) in [
            ([0x26, 0x01], true, true),
            ([0x28, 0x01], true, true),
            ([0x2a, 0x01], true, true),
            ([0x20, 0x01], true, true),
            ([0x02, 0x01], false, true),
            ([0x10, 0x01], false, true),
            ([0x2c, 0x01], false, false),
            ([0x40, 0x01], false, false),
        ] {
            let au = nal(&[header[0], header[1], 0x80]);
            assert_eq!(Codec::H265.inspect(&au).keyframe, key, "{header:x?}");
            assert_eq!(Codec::H265.inspect(&au).picture, picture, "{header:x?}");
        }
        // H.264: an SPS and PPS are no picture, an IDR slice is a keyframe.
        let sps_pps = [nal(&[0x67, 0x42]), nal(&[0x68, 0xce])].concat();
        assert!(!Codec::H264.inspect(&sps_pps).picture);
        let idr = [sps_pps.clone(), nal(&[0x65, 0x88])].concat();
        assert!(Codec::H264.inspect(&idr).picture && Codec::H264.inspect(&idr).keyframe);
        assert!(!Codec::H264.inspect(&nal(&[0x41, 0x9a])).keyframe);
    }
}
