//! `foxglove_msgs/msg/CompressedVideo`: one picture of a compressed video stream per
//! message, as Foxglove's ROS 2 schemas define it and camera drivers that encode on the
//! vehicle (H.264 from a hardware encoder) record it.
//!
//! Promises: the fields in the ROS 2 definition's order; decoding never panics. What the
//! bytes are (Annex-B H.264 access units) is [`crate::video`]'s business. Cost: a decode
//! allocates the frame id, the data and the format.

use super::std_msgs::{Time, TIME_DEF};
use crate::cdr::{CdrError, CdrReader, CdrWriter};

/// `foxglove_msgs/msg/CompressedVideo`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompressedVideo {
    /// When the picture was captured.
    pub timestamp: Time,
    /// The camera's frame.
    pub frame_id: String,
    /// One access unit (Annex B for `h264`): a keyframe carries its parameter sets.
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
}
