//! ROS 2 messages used in redline logs: Rust structs, their CDR encoding and their `ros2msg`
//! schema text, plus conversions to and from the shared sim types.
//!
//! Contract:
//! - Field order, types and alignment are exactly those of the ROS 2 message definitions
//!   (`sensor_msgs/msg/Image`, `CameraInfo`, `nav_msgs/msg/Odometry`, `tf2_msgs/msg/TFMessage`)
//!   so that ROS 2 tools, Foxglove and `mcap-ros2-support` decode our logs, and we decode theirs.
//! - [`RosMessage::schema_text`] is the text the MCAP `ros2` profile stores: the main
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

use crate::cdr::{CdrError, CdrReader, CdrWriter};
use crate::types::{ActorClass, CameraSpec, EgoState, GroundTruth, GtObject, RgbImage};

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

macro_rules! ros_message {
    ($ty:ty, $name:expr, $main:expr, [$($dep:expr),*]) => {
        impl $ty {
            /// Full ROS 2 type name, as stored in the MCAP schema record.
            pub const SCHEMA_NAME: &'static str = $name;
            /// The `ros2msg` schema text (main definition, then each dependency).
            pub fn schema_text() -> String {
                compose($main, &[$($dep),*])
            }
        }
        impl RosMessage for $ty {
            const NAME: &'static str = $name;
            fn schema() -> String {
                <$ty>::schema_text()
            }
            fn write(&self, w: &mut CdrWriter) {
                self.encode(w)
            }
            fn read(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
                <$ty>::decode(r)
            }
        }
    };
}

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

/// Why an `Image` message cannot be used as an [`RgbImage`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageIssue {
    /// The encoding is not `rgb8`.
    #[error("image encoding is {got:?}, redline reads only \"rgb8\"; convert the log's images")]
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
    /// `step`, `is_bigendian` or the data length are inconsistent with width and height.
    #[error(
        "image layout is inconsistent: width {width}, height {height}, step {step}, {len} data \
         bytes (need step >= width*3 and step*height bytes); the message is corrupt"
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

const TIME_DEF: (&str, &str) = ("builtin_interfaces/Time", "int32 sec\nuint32 nanosec\n");
const HEADER_DEF: (&str, &str) = (
    "std_msgs/Header",
    "builtin_interfaces/Time stamp\nstring frame_id\n",
);
const ROI_DEF: (&str, &str) = (
    "sensor_msgs/RegionOfInterest",
    "uint32 x_offset\nuint32 y_offset\nuint32 height\nuint32 width\nbool do_rectify\n",
);
const POINT_DEF: (&str, &str) = ("geometry_msgs/Point", "float64 x\nfloat64 y\nfloat64 z\n");
const VECTOR3_DEF: (&str, &str) = ("geometry_msgs/Vector3", "float64 x\nfloat64 y\nfloat64 z\n");
const QUATERNION_DEF: (&str, &str) = (
    "geometry_msgs/Quaternion",
    "float64 x\nfloat64 y\nfloat64 z\nfloat64 w\n",
);
const POSE_DEF: (&str, &str) = (
    "geometry_msgs/Pose",
    "geometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n",
);
const POSE_COV_DEF: (&str, &str) = (
    "geometry_msgs/PoseWithCovariance",
    "geometry_msgs/Pose pose\nfloat64[36] covariance\n",
);
const TWIST_DEF: (&str, &str) = (
    "geometry_msgs/Twist",
    "geometry_msgs/Vector3 linear\ngeometry_msgs/Vector3 angular\n",
);
const TWIST_COV_DEF: (&str, &str) = (
    "geometry_msgs/TwistWithCovariance",
    "geometry_msgs/Twist twist\nfloat64[36] covariance\n",
);
const TRANSFORM_STAMPED_DEF: (&str, &str) = (
    "geometry_msgs/TransformStamped",
    "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/Transform transform\n",
);
const TRANSFORM_DEF: (&str, &str) = (
    "geometry_msgs/Transform",
    "geometry_msgs/Vector3 translation\ngeometry_msgs/Quaternion rotation\n",
);
const OBJECT_STATE_DEF: (&str, &str) = (
    "redline_msgs/ObjectState",
    "uint32 id\nuint8 class\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 length\nfloat64 width\n\
     float64 height\nfloat64 yaw\nfloat64 vx\nfloat64 vy\n",
);

// ---------------------------------------------------------------------------------------------
// builtin_interfaces / std_msgs

/// `builtin_interfaces/Time`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time {
    /// Seconds.
    pub sec: i32,
    /// Nanoseconds, < 1e9.
    pub nanosec: u32,
}

impl Time {
    /// From nanoseconds since the scenario start; saturates at `i32::MAX` seconds (year 2038
    /// relative to the start: never reached by a scenario).
    pub fn from_ns(ns: u64) -> Time {
        let sec = ns / 1_000_000_000;
        Time {
            sec: i32::try_from(sec).unwrap_or(i32::MAX),
            nanosec: (ns % 1_000_000_000) as u32,
        }
    }
    /// To nanoseconds; a negative or malformed time is an error.
    pub fn to_ns(self) -> Result<u64, MsgError> {
        if self.sec < 0 || self.nanosec >= 1_000_000_000 {
            return Err(MsgError::BadStamp {
                sec: self.sec,
                nanosec: self.nanosec,
            });
        }
        Ok(self.sec as u64 * 1_000_000_000 + u64::from(self.nanosec))
    }
    fn encode(&self, w: &mut CdrWriter) {
        w.i32(self.sec);
        w.u32(self.nanosec);
    }
    fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Time {
            sec: r.i32()?,
            nanosec: r.u32()?,
        })
    }
}

/// `std_msgs/Header`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Acquisition time.
    pub stamp: Time,
    /// Coordinate frame.
    pub frame_id: String,
}

impl Header {
    /// A header at `stamp_ns` in `frame_id`.
    pub fn new(stamp_ns: u64, frame_id: &str) -> Header {
        Header {
            stamp: Time::from_ns(stamp_ns),
            frame_id: frame_id.to_string(),
        }
    }
    /// Appends the header to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.stamp.encode(w);
        w.string(&self.frame_id);
    }
    /// Reads a header.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Header {
            stamp: Time::decode(r)?,
            frame_id: r.string()?.to_string(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// geometry_msgs

/// `geometry_msgs/Vector3` (also used for `Point`, which has the same layout).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Vector3 {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
    /// z.
    pub z: f64,
}

impl Vector3 {
    fn encode(&self, w: &mut CdrWriter) {
        w.f64(self.x);
        w.f64(self.y);
        w.f64(self.z);
    }
    fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Vector3 {
            x: r.f64()?,
            y: r.f64()?,
            z: r.f64()?,
        })
    }
}

/// `geometry_msgs/Quaternion` (Hamilton, x y z w).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quaternion {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
    /// z.
    pub z: f64,
    /// w.
    pub w: f64,
}

impl std::ops::Mul for Quaternion {
    type Output = Quaternion;
    /// Hamilton product `self * o` (apply `o` first, then `self`).
    fn mul(self, o: Quaternion) -> Quaternion {
        Quaternion {
            w: self.w * o.w - self.x * o.x - self.y * o.y - self.z * o.z,
            x: self.w * o.x + self.x * o.w + self.y * o.z - self.z * o.y,
            y: self.w * o.y - self.x * o.z + self.y * o.w + self.z * o.x,
            z: self.w * o.z + self.x * o.y - self.y * o.x + self.z * o.w,
        }
    }
}

impl Default for Quaternion {
    fn default() -> Self {
        Quaternion::IDENTITY
    }
}

impl Quaternion {
    /// No rotation.
    pub const IDENTITY: Quaternion = Quaternion {
        x: 0.0,
        y: 0.0,
        z: 0.0,
        w: 1.0,
    };

    /// Rotation from the ROS optical frame (z forward, x right, y down) to a body frame
    /// (x forward, y left, z up).
    pub const OPTICAL_TO_BODY: Quaternion = Quaternion {
        x: -0.5,
        y: 0.5,
        z: -0.5,
        w: 0.5,
    };

    /// Rotation by `yaw` about z.
    pub fn from_yaw(yaw: f64) -> Quaternion {
        let (s, c) = (yaw * 0.5).sin_cos();
        Quaternion {
            x: 0.0,
            y: 0.0,
            z: s,
            w: c,
        }
    }

    /// Rotation by `yaw` about z, then `pitch` about the new y (positive pitch turns x down).
    pub fn from_yaw_pitch(yaw: f64, pitch: f64) -> Quaternion {
        let (s, c) = (pitch * 0.5).sin_cos();
        Quaternion::from_yaw(yaw)
            * (Quaternion {
                x: 0.0,
                y: s,
                z: 0.0,
                w: c,
            })
    }

    /// Inverse of a unit quaternion.
    pub fn conjugate(self) -> Quaternion {
        Quaternion {
            x: -self.x,
            y: -self.y,
            z: -self.z,
            w: self.w,
        }
    }

    /// Where this rotation sends the x axis.
    fn x_axis(self) -> (f64, f64, f64) {
        let Quaternion { x, y, z, w } = self;
        (
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y + w * z),
            2.0 * (x * z - w * y),
        )
    }

    /// Heading (rotation about z) of this rotation's x axis.
    pub fn yaw(self) -> f64 {
        let (ax, ay, _) = self.x_axis();
        ay.atan2(ax)
    }

    /// Yaw and pitch (positive looks down) of this rotation's x axis; the inverse of
    /// [`Quaternion::from_yaw_pitch`] for rotations without roll.
    pub fn yaw_pitch(self) -> (f64, f64) {
        let (ax, ay, az) = self.x_axis();
        (ay.atan2(ax), (-az).atan2(ax.hypot(ay)))
    }

    /// The rotation of a camera's optical frame in `base_link` for a mount yaw and pitch.
    pub fn camera_mount(yaw: f64, pitch: f64) -> Quaternion {
        Quaternion::from_yaw_pitch(yaw, pitch) * Quaternion::OPTICAL_TO_BODY
    }

    /// Mount yaw and pitch from the rotation of a camera's optical frame in `base_link`.
    pub fn camera_mount_angles(self) -> (f64, f64) {
        (self * Quaternion::OPTICAL_TO_BODY.conjugate()).yaw_pitch()
    }

    fn encode(&self, w: &mut CdrWriter) {
        w.f64(self.x);
        w.f64(self.y);
        w.f64(self.z);
        w.f64(self.w);
    }
    fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Quaternion {
            x: r.f64()?,
            y: r.f64()?,
            z: r.f64()?,
            w: r.f64()?,
        })
    }
}

/// `geometry_msgs/Pose`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pose {
    /// Position (`geometry_msgs/Point`).
    pub position: Vector3,
    /// Orientation.
    pub orientation: Quaternion,
}

/// `geometry_msgs/PoseWithCovariance`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoseWithCovariance {
    /// Pose.
    pub pose: Pose,
    /// Row-major 6x6 covariance (x, y, z, rot x, rot y, rot z).
    pub covariance: [f64; 36],
}

/// `geometry_msgs/Twist`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Twist {
    /// Linear velocity, m/s.
    pub linear: Vector3,
    /// Angular velocity, rad/s.
    pub angular: Vector3,
}

/// `geometry_msgs/TwistWithCovariance`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TwistWithCovariance {
    /// Twist.
    pub twist: Twist,
    /// Row-major 6x6 covariance.
    pub covariance: [f64; 36],
}

/// `geometry_msgs/Transform`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Transform {
    /// Translation, m.
    pub translation: Vector3,
    /// Rotation.
    pub rotation: Quaternion,
}

/// `geometry_msgs/TransformStamped`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransformStamped {
    /// Stamp and parent frame.
    pub header: Header,
    /// Child frame.
    pub child_frame_id: String,
    /// Pose of the child frame in the parent frame.
    pub transform: Transform,
}

impl TransformStamped {
    fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.string(&self.child_frame_id);
        self.transform.translation.encode(w);
        self.transform.rotation.encode(w);
    }
    fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(TransformStamped {
            header: Header::decode(r)?,
            child_frame_id: r.string()?.to_string(),
            transform: Transform {
                translation: Vector3::decode(r)?,
                rotation: Quaternion::decode(r)?,
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------
// sensor_msgs/msg/Image

/// `sensor_msgs/msg/Image`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Stamp and camera frame.
    pub header: Header,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// Pixel encoding, e.g. `rgb8`.
    pub encoding: String,
    /// 1 when multi-byte pixel values are big endian.
    pub is_bigendian: u8,
    /// Row length, bytes.
    pub step: u32,
    /// `step * height` bytes.
    pub data: Vec<u8>,
}

ros_message!(
    Image,
    "sensor_msgs/msg/Image",
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\n\
     uint32 step\nuint8[] data\n",
    [HEADER_DEF, TIME_DEF]
);

impl Image {
    /// An `rgb8` image message holding a copy of `img`.
    pub fn from_rgb(img: &RgbImage, stamp_ns: u64, frame_id: &str) -> Image {
        Image {
            header: Header::new(stamp_ns, frame_id),
            height: img.height,
            width: img.width,
            encoding: "rgb8".to_string(),
            is_bigendian: 0,
            step: img.width.saturating_mul(3),
            data: img.data.clone(),
        }
    }

    /// Encodes `img` as an `rgb8` image message without building an [`Image`] (no copy
    /// besides the one into `w`).
    pub fn encode_rgb(w: &mut CdrWriter, header: &Header, img: &RgbImage) {
        header.encode(w);
        w.u32(img.height);
        w.u32(img.width);
        w.string("rgb8");
        w.u8(0);
        w.u32(img.width.saturating_mul(3));
        w.bytes(&img.data);
    }

    /// Converts an `rgb8` message to an [`RgbImage`] (rows with padding are compacted).
    pub fn to_rgb(&self) -> Result<RgbImage, ImageIssue> {
        self.check_rgb()?;
        let row = self.width as usize * 3;
        let data = if self.step as usize == row {
            self.data[..row * self.height as usize].to_vec()
        } else {
            let mut d = Vec::with_capacity(row * self.height as usize);
            for y in 0..self.height as usize {
                let start = y * self.step as usize;
                d.extend_from_slice(&self.data[start..start + row]);
            }
            d
        };
        Ok(RgbImage {
            width: self.width,
            height: self.height,
            data,
        })
    }

    /// Like [`Image::to_rgb`], consuming the message so that unpadded data is moved, not copied.
    pub fn into_rgb(self) -> Result<RgbImage, ImageIssue> {
        self.check_rgb()?;
        if self.step == self.width * 3 {
            let mut data = self.data;
            data.truncate(self.width as usize * 3 * self.height as usize);
            Ok(RgbImage {
                width: self.width,
                height: self.height,
                data,
            })
        } else {
            self.to_rgb()
        }
    }

    fn check_rgb(&self) -> Result<(), ImageIssue> {
        if self.encoding != "rgb8" {
            return Err(ImageIssue::WrongEncoding {
                got: self.encoding.clone(),
            });
        }
        let bad = ImageIssue::BadLayout {
            width: self.width,
            height: self.height,
            step: self.step,
            len: self.data.len(),
        };
        let row = (self.width as u64) * 3;
        let need = (self.step as u64) * (self.height as u64);
        if (self.step as u64) < row || (self.data.len() as u64) < need {
            return Err(bad);
        }
        Ok(())
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.u32(self.height);
        w.u32(self.width);
        w.string(&self.encoding);
        w.u8(self.is_bigendian);
        w.u32(self.step);
        w.bytes(&self.data);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Image {
            header: Header::decode(r)?,
            height: r.u32()?,
            width: r.u32()?,
            encoding: r.string()?.to_string(),
            is_bigendian: r.u8()?,
            step: r.u32()?,
            data: r.byte_seq("image data")?.to_vec(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// sensor_msgs/msg/CameraInfo

/// `sensor_msgs/RegionOfInterest`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionOfInterest {
    /// Left column.
    pub x_offset: u32,
    /// Top row.
    pub y_offset: u32,
    /// Rows (0 = full image).
    pub height: u32,
    /// Columns (0 = full image).
    pub width: u32,
    /// Whether to rectify the region.
    pub do_rectify: bool,
}

/// `sensor_msgs/msg/CameraInfo`.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraInfo {
    /// Stamp and camera (optical) frame.
    pub header: Header,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// Distortion model, `plumb_bob` for ours (all coefficients zero).
    pub distortion_model: String,
    /// Distortion coefficients.
    pub d: Vec<f64>,
    /// Intrinsic matrix, row major.
    pub k: [f64; 9],
    /// Rectification matrix, row major.
    pub r: [f64; 9],
    /// Projection matrix 3x4, row major.
    pub p: [f64; 12],
    /// Horizontal binning.
    pub binning_x: u32,
    /// Vertical binning.
    pub binning_y: u32,
    /// Region of interest.
    pub roi: RegionOfInterest,
}

/// Pinhole intrinsics taken from a [`CameraInfo`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraIntrinsics {
    /// Width, px.
    pub width: u32,
    /// Height, px.
    pub height: u32,
    /// Focal length, px.
    pub fx: f64,
    /// Focal length, px.
    pub fy: f64,
    /// Principal point, px.
    pub cx: f64,
    /// Principal point, px.
    pub cy: f64,
}

ros_message!(
    CameraInfo,
    "sensor_msgs/msg/CameraInfo",
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring distortion_model\nfloat64[] d\n\
     float64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\nuint32 binning_y\n\
     sensor_msgs/RegionOfInterest roi\n",
    [HEADER_DEF, TIME_DEF, ROI_DEF]
);

impl CameraInfo {
    /// The calibration of an ideal (undistorted) pinhole camera, frame `cam_<name>`, stamp 0.
    pub fn from_spec(spec: &CameraSpec) -> CameraInfo {
        let (fx, fy, cx, cy) = (spec.fx, spec.fy, spec.cx, spec.cy);
        CameraInfo {
            header: Header::new(0, &format!("cam_{}", spec.name)),
            height: spec.height,
            width: spec.width,
            distortion_model: "plumb_bob".to_string(),
            d: vec![0.0; 5],
            k: [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
            r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p: [fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0],
            binning_x: 0,
            binning_y: 0,
            roi: RegionOfInterest::default(),
        }
    }

    /// Size, focal lengths and principal point (from `k`).
    pub fn to_intrinsics(&self) -> CameraIntrinsics {
        CameraIntrinsics {
            width: self.width,
            height: self.height,
            fx: self.k[0],
            fy: self.k[4],
            cx: self.k[2],
            cy: self.k[5],
        }
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.u32(self.height);
        w.u32(self.width);
        w.string(&self.distortion_model);
        w.seq_len(self.d.len());
        w.f64_array(&self.d);
        w.f64_array(&self.k);
        w.f64_array(&self.r);
        w.f64_array(&self.p);
        w.u32(self.binning_x);
        w.u32(self.binning_y);
        w.u32(self.roi.x_offset);
        w.u32(self.roi.y_offset);
        w.u32(self.roi.height);
        w.u32(self.roi.width);
        w.bool(self.roi.do_rectify);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(CameraInfo {
            header: Header::decode(r)?,
            height: r.u32()?,
            width: r.u32()?,
            distortion_model: r.string()?.to_string(),
            d: r.f64_seq("distortion coefficients")?,
            k: r.f64_array()?,
            r: r.f64_array()?,
            p: r.f64_array()?,
            binning_x: r.u32()?,
            binning_y: r.u32()?,
            roi: RegionOfInterest {
                x_offset: r.u32()?,
                y_offset: r.u32()?,
                height: r.u32()?,
                width: r.u32()?,
                do_rectify: r.bool()?,
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------
// nav_msgs/msg/Odometry

/// `nav_msgs/msg/Odometry`.
#[derive(Clone, Debug, PartialEq)]
pub struct Odometry {
    /// Stamp and parent frame (`map`).
    pub header: Header,
    /// Child frame (`base_link`); the twist is expressed in it.
    pub child_frame_id: String,
    /// Pose of the child frame in the parent frame.
    pub pose: PoseWithCovariance,
    /// Velocity in the child frame.
    pub twist: TwistWithCovariance,
}

ros_message!(
    Odometry,
    "nav_msgs/msg/Odometry",
    "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/PoseWithCovariance pose\n\
     geometry_msgs/TwistWithCovariance twist\n",
    [
        HEADER_DEF,
        TIME_DEF,
        POSE_COV_DEF,
        POSE_DEF,
        POINT_DEF,
        QUATERNION_DEF,
        TWIST_COV_DEF,
        TWIST_DEF,
        VECTOR3_DEF
    ]
);

impl Odometry {
    /// Ego pose as `map` → `base_link` odometry: position (x, y, 0), heading as a yaw
    /// quaternion, forward speed as linear x and yaw rate as angular z (in `base_link`).
    /// Covariances are zero (ground truth).
    pub fn from_ego(ego: &EgoState) -> Odometry {
        Odometry {
            header: Header::new(ego.stamp_ns, "map"),
            child_frame_id: "base_link".to_string(),
            pose: PoseWithCovariance {
                pose: Pose {
                    position: Vector3 {
                        x: ego.x,
                        y: ego.y,
                        z: 0.0,
                    },
                    orientation: Quaternion::from_yaw(ego.yaw),
                },
                covariance: [0.0; 36],
            },
            twist: TwistWithCovariance {
                twist: Twist {
                    linear: Vector3 {
                        x: ego.v,
                        y: 0.0,
                        z: 0.0,
                    },
                    angular: Vector3 {
                        x: 0.0,
                        y: 0.0,
                        z: ego.yaw_rate,
                    },
                },
                covariance: [0.0; 36],
            },
        }
    }

    /// Back to an [`EgoState`] (yaw from the quaternion's heading).
    pub fn to_ego(&self) -> Result<EgoState, MsgError> {
        Ok(EgoState {
            stamp_ns: self.header.stamp.to_ns()?,
            x: self.pose.pose.position.x,
            y: self.pose.pose.position.y,
            yaw: self.pose.pose.orientation.yaw(),
            v: self.twist.twist.linear.x,
            yaw_rate: self.twist.twist.angular.z,
        })
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.string(&self.child_frame_id);
        self.pose.pose.position.encode(w);
        self.pose.pose.orientation.encode(w);
        w.f64_array(&self.pose.covariance);
        self.twist.twist.linear.encode(w);
        self.twist.twist.angular.encode(w);
        w.f64_array(&self.twist.covariance);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Odometry {
            header: Header::decode(r)?,
            child_frame_id: r.string()?.to_string(),
            pose: PoseWithCovariance {
                pose: Pose {
                    position: Vector3::decode(r)?,
                    orientation: Quaternion::decode(r)?,
                },
                covariance: r.f64_array()?,
            },
            twist: TwistWithCovariance {
                twist: Twist {
                    linear: Vector3::decode(r)?,
                    angular: Vector3::decode(r)?,
                },
                covariance: r.f64_array()?,
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------
// tf2_msgs/msg/TFMessage

/// `tf2_msgs/msg/TFMessage`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TfMessage {
    /// Transforms.
    pub transforms: Vec<TransformStamped>,
}

ros_message!(
    TfMessage,
    "tf2_msgs/msg/TFMessage",
    "geometry_msgs/TransformStamped[] transforms\n",
    [
        TRANSFORM_STAMPED_DEF,
        HEADER_DEF,
        TIME_DEF,
        TRANSFORM_DEF,
        VECTOR3_DEF,
        QUATERNION_DEF
    ]
);

/// Smallest encoded size of a `TransformStamped` (header with empty frame, empty child,
/// 7 doubles), used to bound sequence counts before allocating.
const TRANSFORM_STAMPED_MIN: usize = 8 + 4 + 4 + 56;

impl TfMessage {
    /// The static mounts of a camera rig: `base_link` → `cam_<name>` (optical frame) for each
    /// camera, stamp 0.
    pub fn camera_mounts(cameras: &[CameraSpec]) -> TfMessage {
        TfMessage {
            transforms: cameras
                .iter()
                .map(|c| TransformStamped {
                    header: Header::new(0, "base_link"),
                    child_frame_id: format!("cam_{}", c.name),
                    transform: Transform {
                        translation: Vector3 {
                            x: c.x,
                            y: c.y,
                            z: c.z,
                        },
                        rotation: Quaternion::camera_mount(c.yaw, c.pitch),
                    },
                })
                .collect(),
        }
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        w.seq_len(self.transforms.len());
        for t in &self.transforms {
            t.encode(w);
        }
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        let n = r.seq_len("transforms", TRANSFORM_STAMPED_MIN)?;
        let mut transforms = Vec::with_capacity(n);
        for _ in 0..n {
            transforms.push(TransformStamped::decode(r)?);
        }
        Ok(TfMessage { transforms })
    }
}

// ---------------------------------------------------------------------------------------------
// redline_msgs

/// `redline_msgs/ObjectState`: one ground-truth box.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ObjectState {
    /// Stable id.
    pub id: u32,
    /// [`ActorClass`] wire value.
    pub class: u8,
    /// Centre, m.
    pub x: f64,
    /// Centre, m.
    pub y: f64,
    /// Centre height, m.
    pub z: f64,
    /// Length, m.
    pub length: f64,
    /// Width, m.
    pub width: f64,
    /// Height, m.
    pub height: f64,
    /// Heading, rad.
    pub yaw: f64,
    /// Velocity, m/s.
    pub vx: f64,
    /// Velocity, m/s.
    pub vy: f64,
}

/// Encoded size of one `ObjectState` at its smallest (aligned start).
const OBJECT_STATE_MIN: usize = 4 + 1 + 3 + 9 * 8;

/// `redline_msgs/msg/GroundTruth`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroundTruthMsg {
    /// Stamp, frame `map`.
    pub header: Header,
    /// Actors.
    pub objects: Vec<ObjectState>,
}

ros_message!(
    GroundTruthMsg,
    "redline_msgs/msg/GroundTruth",
    "std_msgs/Header header\nredline_msgs/ObjectState[] objects\n",
    [HEADER_DEF, TIME_DEF, OBJECT_STATE_DEF]
);

impl GroundTruthMsg {
    /// From sim ground truth (frame `map`).
    pub fn from_gt(gt: &GroundTruth) -> GroundTruthMsg {
        GroundTruthMsg {
            header: Header::new(gt.stamp_ns, "map"),
            objects: gt
                .objects
                .iter()
                .map(|o| ObjectState {
                    id: o.id,
                    class: o.class as u8,
                    x: o.x,
                    y: o.y,
                    z: o.z,
                    length: o.length,
                    width: o.width,
                    height: o.height,
                    yaw: o.yaw,
                    vx: o.vx,
                    vy: o.vy,
                })
                .collect(),
        }
    }

    /// To sim ground truth; an unknown class or a bad stamp is an error.
    pub fn to_gt(&self) -> Result<GroundTruth, MsgError> {
        let mut objects = Vec::with_capacity(self.objects.len());
        for o in &self.objects {
            let class = ActorClass::from_u8(o.class).ok_or(MsgError::UnknownClass {
                object_id: o.id,
                class: o.class,
            })?;
            objects.push(GtObject {
                id: o.id,
                class,
                x: o.x,
                y: o.y,
                z: o.z,
                length: o.length,
                width: o.width,
                height: o.height,
                yaw: o.yaw,
                vx: o.vx,
                vy: o.vy,
            });
        }
        Ok(GroundTruth {
            stamp_ns: self.header.stamp.to_ns()?,
            objects,
        })
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.seq_len(self.objects.len());
        for o in &self.objects {
            w.u32(o.id);
            w.u8(o.class);
            for v in [
                o.x, o.y, o.z, o.length, o.width, o.height, o.yaw, o.vx, o.vy,
            ] {
                w.f64(v);
            }
        }
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        let header = Header::decode(r)?;
        let n = r.seq_len("ground-truth objects", OBJECT_STATE_MIN)?;
        let mut objects = Vec::with_capacity(n);
        for _ in 0..n {
            objects.push(ObjectState {
                id: r.u32()?,
                class: r.u8()?,
                x: r.f64()?,
                y: r.f64()?,
                z: r.f64()?,
                length: r.f64()?,
                width: r.f64()?,
                height: r.f64()?,
                yaw: r.f64()?,
                vx: r.f64()?,
                vy: r.f64()?,
            });
        }
        Ok(GroundTruthMsg { header, objects })
    }
}

/// `redline_msgs/msg/RoadMap`: the road's lanes and centre line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoadMap {
    /// Stamp, frame `map`.
    pub header: Header,
    /// Number of lanes.
    pub lanes: u32,
    /// Lane width, m.
    pub lane_width: f64,
    /// Centre-line x coordinates, m.
    pub centre_x: Vec<f64>,
    /// Centre-line y coordinates, m (same length as `centre_x`).
    pub centre_y: Vec<f64>,
}

ros_message!(
    RoadMap,
    "redline_msgs/msg/RoadMap",
    "std_msgs/Header header\nuint32 lanes\nfloat64 lane_width\nfloat64[] centre_x\n\
     float64[] centre_y\n",
    [HEADER_DEF, TIME_DEF]
);

impl RoadMap {
    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.u32(self.lanes);
        w.f64(self.lane_width);
        w.seq_len(self.centre_x.len());
        w.f64_array(&self.centre_x);
        w.seq_len(self.centre_y.len());
        w.f64_array(&self.centre_y);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(RoadMap {
            header: Header::decode(r)?,
            lanes: r.u32()?,
            lane_width: r.f64()?,
            centre_x: r.f64_seq("centre_x")?,
            centre_y: r.f64_seq("centre_y")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip<M: RosMessage + PartialEq + std::fmt::Debug>(m: &M) {
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

    fn f() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>().prop_filter("not nan", |v| !v.is_nan()),
            -1e6..1e6f64
        ]
    }

    fn header() -> impl Strategy<Value = Header> {
        (any::<i32>(), any::<u32>(), "[a-z_]{0,9}").prop_map(|(sec, nanosec, frame_id)| Header {
            stamp: Time { sec, nanosec },
            frame_id,
        })
    }

    proptest! {
        #[test]
        fn image_round_trips(h in header(), w in 0u32..7, ht in 0u32..5, enc in "[a-z0-9]{0,7}",
                             be in any::<u8>(), extra in 0u32..3, seed in any::<u8>()) {
            let step = w * 3 + extra;
            let data = (0..step * ht).map(|i| (i as u8).wrapping_add(seed)).collect();
            round_trip(&Image { header: h, height: ht, width: w, encoding: enc, is_bigendian: be, step, data });
        }

        #[test]
        fn camera_info_round_trips(h in header(), d in proptest::collection::vec(f(), 0..6),
                                   k in proptest::array::uniform9(f()), p0 in f(), bx in any::<u32>(),
                                   rect in any::<bool>(), model in "[a-z_]{0,11}") {
            let mut p = [0.0; 12];
            p[0] = p0;
            round_trip(&CameraInfo { header: h, height: 3, width: 5, distortion_model: model, d, k,
                r: k, p, binning_x: bx, binning_y: 1,
                roi: RegionOfInterest { x_offset: 1, y_offset: 2, height: 3, width: 4, do_rectify: rect } });
        }

        #[test]
        fn odometry_round_trips(h in header(), child in "[a-z_]{0,12}", a in f(), b in f(), c in f(), cov in f()) {
            let mut m = Odometry::from_ego(&EgoState { stamp_ns: 0, x: a, y: b, yaw: c.rem_euclid(6.0), v: c, yaw_rate: a });
            m.header = h;
            m.child_frame_id = child;
            m.pose.covariance[35] = cov;
            m.twist.covariance[0] = cov;
            round_trip(&m);
        }

        #[test]
        fn tf_round_trips(n in 0usize..4, h in header(), names in proptest::collection::vec("[a-z]{0,6}", 4), x in f()) {
            let transforms = (0..n).map(|i| TransformStamped {
                header: h.clone(), child_frame_id: names[i].clone(),
                transform: Transform { translation: Vector3 { x, y: i as f64, z: -x }, rotation: Quaternion::from_yaw(x) },
            }).collect();
            round_trip(&TfMessage { transforms });
        }

        #[test]
        fn ground_truth_round_trips(h in header(), objs in proptest::collection::vec((any::<u32>(), 0u8..3, f(), f()), 0..5)) {
            let objects = objs.iter().map(|&(id, class, x, y)| ObjectState {
                id, class, x, y, z: 1.0, length: 4.5, width: 1.8, height: 1.5, yaw: x, vx: y, vy: -y,
            }).collect();
            let m = GroundTruthMsg { header: h, objects };
            round_trip(&m);
        }

        #[test]
        fn road_map_round_trips(h in header(), lanes in any::<u32>(), w in f(),
                                cx in proptest::collection::vec(f(), 0..9), cy in proptest::collection::vec(f(), 0..9)) {
            round_trip(&RoadMap { header: h, lanes, lane_width: w, centre_x: cx, centre_y: cy });
        }

        #[test]
        fn camera_mount_angles_round_trip(yaw in -3.1f64..3.1, pitch in -1.5f64..1.5) {
            let q = Quaternion::camera_mount(yaw, pitch);
            let (y2, p2) = q.camera_mount_angles();
            prop_assert!((y2 - yaw).abs() < 1e-12 && (p2 - pitch).abs() < 1e-12, "{yaw} {pitch} -> {y2} {p2}");
        }
    }

    #[test]
    fn optical_frame_looks_along_mount_heading() {
        // A camera mounted looking left (yaw +90 deg): its optical z axis is base_link +y.
        let q = Quaternion::camera_mount(std::f64::consts::FRAC_PI_2, 0.0);
        // rotate (0,0,1): third column of the rotation matrix
        let Quaternion { x, y, z, w } = q;
        let col_z = (
            2.0 * (x * z + w * y),
            2.0 * (y * z - w * x),
            1.0 - 2.0 * (x * x + y * y),
        );
        assert!(col_z.0.abs() < 1e-12 && (col_z.1 - 1.0).abs() < 1e-12 && col_z.2.abs() < 1e-12);
    }

    #[test]
    fn conversions() {
        let ego = EgoState {
            stamp_ns: 3_500_000_001,
            x: 1.0,
            y: -2.0,
            yaw: 0.3,
            v: 12.0,
            yaw_rate: 0.01,
        };
        let back = Odometry::from_ego(&ego).to_ego().unwrap();
        assert_eq!(back.stamp_ns, ego.stamp_ns);
        assert!((back.yaw - ego.yaw).abs() < 1e-15);
        assert_eq!(
            (back.x, back.y, back.v, back.yaw_rate),
            (1.0, -2.0, 12.0, 0.01)
        );

        let gt = GroundTruth {
            stamp_ns: 7,
            objects: vec![GtObject {
                id: 4,
                class: ActorClass::Cyclist,
                x: 1.0,
                y: 2.0,
                z: 0.8,
                length: 1.8,
                width: 0.6,
                height: 1.6,
                yaw: 0.1,
                vx: 4.0,
                vy: 0.5,
            }],
        };
        let mut m = GroundTruthMsg::from_gt(&gt);
        assert_eq!(m.to_gt().unwrap(), gt);
        m.objects[0].class = 9;
        assert_eq!(
            m.to_gt(),
            Err(MsgError::UnknownClass {
                object_id: 4,
                class: 9
            })
        );
        m.header.stamp.sec = -1;
        assert!(m.to_gt().is_err());

        let img = RgbImage {
            width: 2,
            height: 2,
            data: (0..12).collect(),
        };
        let mut msg = Image::from_rgb(&img, 5, "cam_front");
        assert_eq!(msg.to_rgb().unwrap(), img);
        let mut w = CdrWriter::new();
        Image::encode_rgb(&mut w, &Header::new(5, "cam_front"), &img);
        assert_eq!(w.finish(), msg.to_cdr());
        // padded rows
        let padded = Image {
            step: 8,
            data: vec![0, 1, 2, 3, 4, 5, 99, 99, 6, 7, 8, 9, 10, 11, 99, 99],
            ..msg.clone()
        };
        assert_eq!(padded.clone().into_rgb().unwrap(), img);
        msg.encoding = "bgr8".into();
        assert_eq!(
            msg.to_rgb(),
            Err(ImageIssue::WrongEncoding { got: "bgr8".into() })
        );
        msg.encoding = "rgb8".into();
        msg.data.truncate(5);
        assert!(matches!(msg.to_rgb(), Err(ImageIssue::BadLayout { .. })));

        let spec = CameraSpec {
            name: "front".into(),
            width: 320,
            height: 192,
            fx: 200.0,
            fy: 201.0,
            cx: 160.0,
            cy: 96.5,
            x: 1.5,
            y: 0.0,
            z: 1.6,
            yaw: 0.0,
            pitch: 0.05,
        };
        let ci = CameraInfo::from_spec(&spec);
        assert_eq!(ci.header.frame_id, "cam_front");
        assert_eq!(
            ci.to_intrinsics(),
            CameraIntrinsics {
                width: 320,
                height: 192,
                fx: 200.0,
                fy: 201.0,
                cx: 160.0,
                cy: 96.5
            }
        );
    }

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

    #[test]
    fn corrupt_counts_do_not_allocate() {
        let mut w = CdrWriter::new();
        Header::new(1, "map").encode(&mut w);
        w.u32(u32::MAX); // object count
        let b = w.finish();
        assert!(matches!(
            GroundTruthMsg::from_cdr(&b),
            Err(CdrError::TooLong { .. })
        ));
        let mut w = CdrWriter::new();
        w.u32(u32::MAX);
        assert!(TfMessage::from_cdr(&w.finish()).is_err());
    }
}
