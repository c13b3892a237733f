//! `nav_msgs/msg/Odometry`: the ego pose and velocity, `map` → `base_link`.
//!
//! Promises: [`Odometry::from_ego`] / [`Odometry::to_ego`] round-trip an [`EgoState`] exactly
//! except the yaw, which goes through a quaternion (equal to ~1e-15 rad); a bad stamp is a
//! [`MsgError`]. Cost: no allocation beyond the frame strings. Decoding never panics.

use super::geometry_msgs::{
    Pose, PoseWithCovariance, Quaternion, Twist, TwistWithCovariance, Vector3, POINT_DEF,
    POSE_COV_DEF, POSE_DEF, QUATERNION_DEF, TWIST_COV_DEF, TWIST_DEF, VECTOR3_DEF,
};
use super::std_msgs::{Header, HEADER_DEF, TIME_DEF};
use super::MsgError;
use crate::cdr::{CdrError, CdrReader, CdrWriter};
use crate::types::EgoState;

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
        self.pose.encode(w);
        self.twist.twist.linear.encode(w);
        self.twist.twist.angular.encode(w);
        w.f64_array(&self.twist.covariance);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Odometry {
            header: Header::decode(r)?,
            child_frame_id: r.string()?.to_string(),
            pose: PoseWithCovariance::decode(r)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::test_support::{f, header, round_trip};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn odometry_round_trips(h in header(), child in "[a-z_]{0,12}", a in f(), b in f(), c in f(), cov in f()) {
            let mut m = Odometry::from_ego(&EgoState { stamp_ns: 0, x: a, y: b, yaw: c.rem_euclid(6.0), v: c, yaw_rate: a });
            m.header = h;
            m.child_frame_id = child;
            m.pose.covariance[35] = cov;
            m.twist.covariance[0] = cov;
            round_trip(&m);
        }
    }

    #[test]
    fn odometry_converts_to_ego() {
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
    }
}
