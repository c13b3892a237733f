//! ROS 2 messages used in redline logs: Rust structs, their CDR encoding and their `ros2msg`
//! schema text, plus conversions to and from the shared sim types.
//!
//! Contract:
//! - Field order, types and alignment are exactly those of the ROS 2 message definitions
//!   (`sensor_msgs/msg/Image`, `CameraInfo`, `nav_msgs/msg/Odometry`, `tf2_msgs/msg/TFMessage`)
//!   so that ROS 2 tools, Foxglove and `mcap-ros2-support` decode our logs, and we decode theirs.
//! - [`RosMessage::schema`] is the text the MCAP `ros2` profile stores: the main
//!   definition, then for each dependency a line of 80 `=`, `MSG: pkg/Type` and its definition.
//! - Decoding never panics: malformed data is a [`CdrError`]; values that decode but make no
//!   sense for redline (unknown actor class, bad stamp, wrong image encoding) are a
//!   [`MsgError`] / [`ImageIssue`] from the conversion functions.
//! - Frames: odometry is `map` → `base_link`; a camera's frame `cam_<name>` is its ROS optical
//!   frame (z forward, x right, y down), mounted on `base_link` by yaw (about z) then pitch
//!   (about y, positive looks down). Angles go through quaternions, so yaw/pitch read back
//!   equal to within ~1e-15 rad, not bit-identical; every other field round-trips bit-exactly.
//!
//! Cost: encoding appends to a [`CdrWriter`]; decoding allocates the owned strings and
//! sequences of the returned struct. Not for a real-time stage's hot path.
//!
//! Layout, one file per ROS package: `std_msgs` (`builtin_interfaces/Time`, `std_msgs/Header`),
//! `geometry_msgs` (vectors, quaternions, poses, transforms), `sensor_msgs` (`Image`,
//! `CameraInfo`), `nav_msgs` (`Odometry`), `tf2_msgs` (`TFMessage`), `foxglove_msgs`
//! (`CompressedVideo`, read only), `redline_msgs` (this
//! project's ground truth and road map). This module holds the [`RosMessage`] trait, the
//! schema-text composition, the conversion errors, and re-exports every message type.

use crate::cdr::{CdrError, CdrReader, CdrWriter};

/// A message with a CDR encoding and a ROS 2 schema.
pub trait RosMessage: Sized {
    /// Full ROS 2 type name, e.g. `sensor_msgs/msg/Image`.
    const NAME: &'static str;
    /// The `ros2msg` schema text (main definition and dependencies).
    fn schema() -> String;
    /// Appends the fields to `w`.
    fn write(&self, w: &mut CdrWriter);
    /// Reads the fields from `r`.
    fn read(r: &mut CdrReader<'_>) -> Result<Self, CdrError>;

    /// Encodes into a fresh buffer (header included).
    fn to_cdr(&self) -> Vec<u8> {
        let mut w = CdrWriter::new();
        self.write(&mut w);
        w.finish()
    }
    /// Decodes a whole buffer (header included) and checks nothing meaningful is left over.
    fn from_cdr(bytes: &[u8]) -> Result<Self, CdrError> {
        let mut r = CdrReader::new(bytes)?;
        let m = Self::read(&mut r)?;
        r.finish()?;
        Ok(m)
    }
}

/// Implements [`RosMessage`] and the `SCHEMA_NAME` / `schema_text` items for a message type
/// with `encode` / `decode` methods. Defined before the submodules so that they can use it.
macro_rules! ros_message {
    ($ty:ty, $name:expr, $main:expr, [$($dep:expr),*]) => {
        impl $ty {
            /// Full ROS 2 type name, as stored in the MCAP schema record.
            pub const SCHEMA_NAME: &'static str = $name;
            /// The `ros2msg` schema text (main definition, then each dependency).
            pub fn schema_text() -> String {
                $crate::msgs::compose($main, &[$($dep),*])
            }
        }
        impl $crate::msgs::RosMessage for $ty {
            const NAME: &'static str = $name;
            fn schema() -> String {
                <$ty>::schema_text()
            }
            fn write(&self, w: &mut $crate::cdr::CdrWriter) {
                self.encode(w)
            }
            fn read(r: &mut $crate::cdr::CdrReader<'_>) -> Result<Self, $crate::cdr::CdrError> {
                <$ty>::decode(r)
            }
        }
    };
}

mod foxglove_msgs;
mod geometry_msgs;
mod nav_msgs;
mod pixel_encoding;
mod redline_msgs;
mod sensor_msgs;
mod std_msgs;
mod tf2_msgs;

pub use foxglove_msgs::{CompressedVideo, FfmpegPacket, H264Packet};
pub use geometry_msgs::{
    Pose, PoseStamped, PoseWithCovariance, PoseWithCovarianceStamped, Quaternion, Transform,
    TransformStamped, Twist, TwistWithCovariance, Vector3,
};
pub use nav_msgs::Odometry;
pub(crate) use pixel_encoding::{i420_to_rgb8, YuvMatrix};
pub use pixel_encoding::{BayerPattern, PixelEncoding};
pub use redline_msgs::{GroundTruthMsg, ObjectState, RoadMap};
pub use sensor_msgs::{CameraInfo, CameraIntrinsics, CompressedImage, Image, RegionOfInterest};
pub use std_msgs::{Header, Time};
pub use tf2_msgs::TfMessage;

/// Errors converting a decoded message to sim types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// A ground-truth object has a class value redline does not know.
    #[error(
        "ground-truth object {object_id} has class {class}, which is not a known ActorClass \
         (0 car, 1 pedestrian, 2 cyclist); the log was written by a newer or foreign tool"
    )]
    UnknownClass {
        /// The object's id.
        object_id: u32,
        /// The raw class value.
        class: u8,
    },
    /// A header stamp is negative or its nanoseconds are out of range.
    #[error(
        "header stamp {sec} s {nanosec} ns is not a valid time since the scenario start \
         (negative, or nanosec >= 1e9)"
    )]
    BadStamp {
        /// Seconds.
        sec: i32,
        /// Nanoseconds.
        nanosec: u32,
    },
}

/// Why an `Image` message cannot be used as an [`RgbImage`](crate::types::RgbImage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageIssue {
    /// The encoding is not one redline reads.
    #[error("image encoding is {got:?}; redline reads raw {} images and JPEG or PNG CompressedImage: convert the log's images", pixel_encoding::READ_ENCODINGS)]
    WrongEncoding {
        /// The encoding in the message.
        got: String,
    },
    /// The size differs from the camera's `camera_info`.
    #[error(
        "image is {}x{} but the camera_info says {}x{}; the camera's calibration does not \
         match its images", got.0, got.1, want.0, want.1
    )]
    WrongSize {
        /// (width, height) in the message.
        got: (u32, u32),
        /// (width, height) the camera promises.
        want: (u32, u32),
    },
    /// A compressed image that cannot be decoded.
    #[error("compressed image ({format}) cannot be decoded: {why}")]
    Undecodable {
        /// What the data looked like (`jpeg`, `png` or the message's format string).
        format: String,
        /// The decoder's message.
        why: String,
    },
    /// `step`, `is_bigendian` or the data length are inconsistent with width and height.
    #[error(
        "image layout is inconsistent: width {width}, height {height}, step {step}, {len} data \
         bytes (need step >= width*bytes per pixel and step*height bytes); the message is corrupt"
    )]
    BadLayout {
        /// Width, px.
        width: u32,
        /// Height, px.
        height: u32,
        /// Row stride, bytes.
        step: u32,
        /// Data length, bytes.
        len: usize,
    },
    /// A YUV 4:2:2 image whose width is odd: its pixels come in pairs.
    #[error(
        "image encoding {encoding} packs two pixels in four bytes, but the width is {width}, \
         odd; the message is corrupt"
    )]
    OddWidth {
        /// The encoding.
        encoding: String,
        /// Width, px.
        width: u32,
    },
    /// A YUV 4:2:0 image whose width or height is odd: its chroma covers 2×2 pixels.
    #[error(
        "image encoding {encoding} shares each chroma pair among 2x2 pixels, but the size is \
         {width}x{height}, not even; the message is corrupt"
    )]
    OddSize {
        /// The encoding.
        encoding: String,
        /// Width, px.
        width: u32,
        /// Height, px.
        height: u32,
    },
    /// A picture of a compressed video stream cannot be had (see [`crate::video`]).
    #[error("{0}")]
    Video(String),
}

const SEPARATOR: &str =
    "================================================================================";

fn compose(main: &str, deps: &[(&str, &str)]) -> String {
    let mut s = String::from(main);
    for (name, def) in deps {
        s.push_str(SEPARATOR);
        s.push_str("\nMSG: ");
        s.push_str(name);
        s.push('\n');
        s.push_str(def);
    }
    s
}

/// Helpers shared by the message files' tests: a CDR round trip that also checks cut input
/// fails cleanly, and proptest strategies for floats and headers.
#[cfg(test)]
mod test_support {
    use super::{Header, RosMessage, Time};
    use proptest::prelude::*;

    pub(super) fn round_trip<M: RosMessage + PartialEq + std::fmt::Debug>(m: &M) {
        let b = m.to_cdr();
        let back = M::from_cdr(&b).unwrap();
        assert_eq!(&back, m);
        // every strict prefix fails cleanly
        for cut in [0, 3, 4, 5, b.len() / 2, b.len().saturating_sub(1)] {
            if cut < b.len() && b.len() - cut > 3 {
                assert!(M::from_cdr(&b[..cut]).is_err(), "{} cut at {cut}", M::NAME);
            }
        }
    }

    pub(super) fn f() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>().prop_filter("not nan", |v| !v.is_nan()),
            -1e6..1e6f64
        ]
    }

    pub(super) fn header() -> impl Strategy<Value = Header> {
        (any::<i32>(), any::<u32>(), "[a-z_]{0,9}").prop_map(|(sec, nanosec, frame_id)| Header {
            stamp: Time { sec, nanosec },
            frame_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_text_has_dependencies() {
        let s = Odometry::schema_text();
        assert!(s.starts_with("std_msgs/Header header\n"));
        assert!(s.contains(&format!("{SEPARATOR}\nMSG: geometry_msgs/Quaternion\n")));
        assert_eq!(s.matches("MSG: ").count(), 9);
        assert_eq!(SEPARATOR.len(), 80);
        assert!(
            GroundTruthMsg::schema_text().contains("MSG: redline_msgs/ObjectState\nuint32 id\n")
        );
    }
}
