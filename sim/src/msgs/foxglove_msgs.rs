//! Compressed video, one picture per message: `foxglove_msgs/msg/CompressedVideo`, as
//! Foxglove's ROS 2 schemas define it, `ffmpeg_image_transport_msgs/msg/FFMPEGPacket`,
//! what ROS 2's `ffmpeg_image_transport` publishes, and `h264_msgs/msg/Packet`, what
//! `h264_image_transport` publishes (H.264 only) — as camera drivers that encode on the
//! vehicle (H.264 or H.265 from a hardware encoder) record them.
//!
//! Promises: the fields in the ROS 2 definition's order; decoding never panics. What the
//! bytes are (Annex-B H.264 or H.265 access units) is [`crate::video`]'s business. Cost: a decode
//! allocates the frame id, the data and the format.

use super::std_msgs::{Header, Time, HEADER_DEF, TIME_DEF};
use crate::cdr::{CdrError, CdrReader, CdrWriter};

/// `foxglove_msgs/msg/CompressedVideo`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompressedVideo {
    /// When the picture was captured.
    pub timestamp: Time,
    /// The camera's frame.
    pub frame_id: String,
    /// One access unit (Annex B for `h264` and `h265`): a keyframe carries its parameter sets.
    pub data: Vec<u8>,
    /// The codec: `h264`, `h265`, `vp9` or `av1`.
    pub format: String,
}

ros_message!(
    CompressedVideo,
    "foxglove_msgs/msg/CompressedVideo",
    "builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n",
    [TIME_DEF]
);

impl CompressedVideo {
    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.timestamp.encode(w);
        w.string(&self.frame_id);
        w.bytes(&self.data);
        w.string(&self.format);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(CompressedVideo {
            timestamp: Time::decode(r)?,
            frame_id: r.string()?.to_string(),
            data: r.byte_seq("video data")?.to_vec(),
            format: r.string()?.to_string(),
        })
    }
}

/// `ffmpeg_image_transport_msgs/msg/FFMPEGPacket`: one encoded packet of a camera stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FfmpegPacket {
    /// Capture stamp and camera frame.
    pub header: Header,
    /// Picture width, px.
    pub width: i32,
    /// Picture height, px.
    pub height: i32,
    /// `codec;source pixel format;...` (the codec first: `h264`, `libx264`, `h264_nvenc`,
    /// `hevc`, `libx265`, `hevc_nvenc`, ...).
    pub encoding: String,
    /// The encoder's presentation time stamp.
    pub pts: u64,
    /// Packet flags (1: a keyframe).
    pub flags: u8,
    /// Byte order of the picture's source (unused for compressed packets).
    pub is_bigendian: bool,
    /// The packet (Annex B for H.264 and H.265).
    pub data: Vec<u8>,
}

ros_message!(
    FfmpegPacket,
    "ffmpeg_image_transport_msgs/msg/FFMPEGPacket",
    "std_msgs/Header header\nint32 width\nint32 height\nstring encoding\nuint64 pts\nuint8 flags\nbool is_bigendian\nuint8[] data\n",
    [HEADER_DEF, TIME_DEF]
);

impl FfmpegPacket {
    /// The codec: `encoding` up to its first `;`.
    pub fn codec(&self) -> &str {
        self.encoding.split(';').next().unwrap_or_default().trim()
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.i32(self.width);
        w.i32(self.height);
        w.string(&self.encoding);
        w.u64(self.pts);
        w.u8(self.flags);
        w.u8(u8::from(self.is_bigendian));
        w.bytes(&self.data);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(FfmpegPacket {
            header: Header::decode(r)?,
            width: r.i32()?,
            height: r.i32()?,
            encoding: r.string()?.to_string(),
            pts: r.u64()?,
            flags: r.u8()?,
            is_bigendian: r.u8()? != 0,
            data: r.byte_seq("video packet")?.to_vec(),
        })
    }
}

/// `h264_msgs/msg/Packet` (`h264_image_transport`): one H.264 access unit of a camera
/// stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct H264Packet {
    /// Capture stamp and camera frame.
    pub header: Header,
    /// The packet's sequence number.
    pub seq: i64,
    /// The access unit (Annex B).
    pub data: Vec<u8>,
}

ros_message!(
    H264Packet,
    "h264_msgs/msg/Packet",
    "std_msgs/Header header\nint64 seq\nuint8[] data\n",
    [HEADER_DEF, TIME_DEF]
);

impl H264Packet {
    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        // An int64 is the 8 bytes of the same two's complement value.
        w.u64(self.seq as u64);
        w.bytes(&self.data);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(H264Packet {
            header: Header::decode(r)?,
            seq: r.u64()? as i64,
            data: r.byte_seq("video packet")?.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::test_support::round_trip;
    use crate::msgs::RosMessage;

    #[test]
    fn roundtrips_and_cut_input_is_an_error() {
        let m = CompressedVideo {
            timestamp: Time {
                sec: 1_700_000_000,
                nanosec: 5,
            },
            frame_id: "camera_front".into(),
            data: vec![0, 0, 0, 1, 0x67, 0x42],
            format: "h264".into(),
        };
        round_trip(&m);
        assert!(CompressedVideo::schema().starts_with("builtin_interfaces/Time timestamp\n"));
    }

    #[test]
    fn h264_packets_roundtrip() {
        let m = H264Packet {
            header: Header::new(7, "camera_front"),
            seq: -3,
            data: vec![0, 0, 0, 1, 0x65, 0x88],
        };
        round_trip(&m);
        assert!(H264Packet::schema().starts_with("std_msgs/Header header\nint64 seq\n"));
    }

    #[test]
    fn ffmpeg_packets_roundtrip_and_name_their_codec() {
        let m = FfmpegPacket {
            header: Header::new(7, "camera_front"),
            width: 640,
            height: 480,
            encoding: "h264_nvenc;yuv420p;bgr8;bgr8".into(),
            pts: 12,
            flags: 1,
            is_bigendian: false,
            data: vec![0, 0, 0, 1, 0x65, 0x88],
        };
        round_trip(&m);
        assert_eq!(m.codec(), "h264_nvenc");
    }
}
