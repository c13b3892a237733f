//! `geometry_msgs`: vectors, quaternions, poses, twists and transforms, and the camera-mount
//! rotation conventions (ROS optical frame in `base_link`).
//!
//! Promises: field layouts are the ROS 2 ones; [`Quaternion::camera_mount`] and
//! [`Quaternion::camera_mount_angles`] invert each other to within ~1e-12 rad for pitches in
//! (-pi/2, pi/2). Cost: plain arithmetic, no allocation (except a transform's frame strings on
//! decode). Decoding never panics.

use super::std_msgs::{Header, HEADER_DEF, TIME_DEF};
use crate::cdr::{CdrError, CdrReader, CdrWriter};
use redline_runtime::det_math as dm;

pub(super) const POINT_DEF: (&str, &str) =
    ("geometry_msgs/Point", "float64 x\nfloat64 y\nfloat64 z\n");
pub(super) const VECTOR3_DEF: (&str, &str) =
    ("geometry_msgs/Vector3", "float64 x\nfloat64 y\nfloat64 z\n");
pub(super) const QUATERNION_DEF: (&str, &str) = (
    "geometry_msgs/Quaternion",
    "float64 x\nfloat64 y\nfloat64 z\nfloat64 w\n",
);
pub(super) const POSE_DEF: (&str, &str) = (
    "geometry_msgs/Pose",
    "geometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n",
);
pub(super) const POSE_COV_DEF: (&str, &str) = (
    "geometry_msgs/PoseWithCovariance",
    "geometry_msgs/Pose pose\nfloat64[36] covariance\n",
);
pub(super) const TWIST_DEF: (&str, &str) = (
    "geometry_msgs/Twist",
    "geometry_msgs/Vector3 linear\ngeometry_msgs/Vector3 angular\n",
);
pub(super) const TWIST_COV_DEF: (&str, &str) = (
    "geometry_msgs/TwistWithCovariance",
    "geometry_msgs/Twist twist\nfloat64[36] covariance\n",
);
pub(super) const TRANSFORM_STAMPED_DEF: (&str, &str) = (
    "geometry_msgs/TransformStamped",
    "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/Transform transform\n",
);
pub(super) const TRANSFORM_DEF: (&str, &str) = (
    "geometry_msgs/Transform",
    "geometry_msgs/Vector3 translation\ngeometry_msgs/Quaternion rotation\n",
);

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
    pub(super) fn encode(&self, w: &mut CdrWriter) {
        w.f64(self.x);
        w.f64(self.y);
        w.f64(self.z);
    }
    pub(super) fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
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
        let (s, c) = dm::sin_cos(yaw * 0.5);
        Quaternion {
            x: 0.0,
            y: 0.0,
            z: s,
            w: c,
        }
    }

    /// Rotation by `yaw` about z, then `pitch` about the new y (positive pitch turns x down).
    pub fn from_yaw_pitch(yaw: f64, pitch: f64) -> Quaternion {
        let (s, c) = dm::sin_cos(pitch * 0.5);
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
        dm::atan2(ay, ax)
    }

    /// Yaw and pitch (positive looks down) of this rotation's x axis; the inverse of
    /// [`Quaternion::from_yaw_pitch`] for rotations without roll.
    pub fn yaw_pitch(self) -> (f64, f64) {
        let (ax, ay, az) = self.x_axis();
        (dm::atan2(ay, ax), dm::atan2(-az, dm::hypot(ax, ay)))
    }

    /// The rotation of a camera's optical frame in `base_link` for a mount yaw and pitch.
    pub fn camera_mount(yaw: f64, pitch: f64) -> Quaternion {
        Quaternion::from_yaw_pitch(yaw, pitch) * Quaternion::OPTICAL_TO_BODY
    }

    /// Mount yaw and pitch from the rotation of a camera's optical frame in `base_link`.
    pub fn camera_mount_angles(self) -> (f64, f64) {
        (self * Quaternion::OPTICAL_TO_BODY.conjugate()).yaw_pitch()
    }

    pub(super) fn encode(&self, w: &mut CdrWriter) {
        w.f64(self.x);
        w.f64(self.y);
        w.f64(self.z);
        w.f64(self.w);
    }
    pub(super) fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
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

impl Pose {
    pub(super) fn encode(&self, w: &mut CdrWriter) {
        self.position.encode(w);
        self.orientation.encode(w);
    }

    pub(super) fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Pose {
            position: Vector3::decode(r)?,
            orientation: Quaternion::decode(r)?,
        })
    }
}

/// `geometry_msgs/PoseWithCovariance`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoseWithCovariance {
    /// Pose.
    pub pose: Pose,
    /// Row-major 6x6 covariance (x, y, z, rot x, rot y, rot z).
    pub covariance: [f64; 36],
}

impl PoseWithCovariance {
    pub(super) fn encode(&self, w: &mut CdrWriter) {
        self.pose.encode(w);
        w.f64_array(&self.covariance);
    }

    pub(super) fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(PoseWithCovariance {
            pose: Pose::decode(r)?,
            covariance: r.f64_array()?,
        })
    }
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
    pub(super) fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.string(&self.child_frame_id);
        self.transform.translation.encode(w);
        self.transform.rotation.encode(w);
    }
    pub(super) fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
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
/// `geometry_msgs/msg/PoseStamped`: a localiser's pose output (no velocity).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoseStamped {
    /// Stamp and parent frame.
    pub header: Header,
    /// Pose in the parent frame.
    pub pose: Pose,
}

ros_message!(
    PoseStamped,
    "geometry_msgs/msg/PoseStamped",
    "std_msgs/Header header\ngeometry_msgs/Pose pose\n",
    [HEADER_DEF, TIME_DEF, POSE_DEF, POINT_DEF, QUATERNION_DEF]
);

impl PoseStamped {
    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        self.pose.encode(w);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(PoseStamped {
            header: Header::decode(r)?,
            pose: Pose::decode(r)?,
        })
    }
}

/// `geometry_msgs/msg/PoseWithCovarianceStamped`: the pose output of Autoware's and
/// robot_localization's localisers (no velocity).
#[derive(Clone, Debug, PartialEq)]
pub struct PoseWithCovarianceStamped {
    /// Stamp and parent frame.
    pub header: Header,
    /// Pose in the parent frame and its covariance.
    pub pose: PoseWithCovariance,
}

ros_message!(
    PoseWithCovarianceStamped,
    "geometry_msgs/msg/PoseWithCovarianceStamped",
    "std_msgs/Header header\ngeometry_msgs/PoseWithCovariance pose\n",
    [
        HEADER_DEF,
        TIME_DEF,
        POSE_COV_DEF,
        POSE_DEF,
        POINT_DEF,
        QUATERNION_DEF
    ]
);

impl PoseWithCovarianceStamped {
    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        self.pose.encode(w);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(PoseWithCovarianceStamped {
            header: Header::decode(r)?,
            pose: PoseWithCovariance::decode(r)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
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
}
