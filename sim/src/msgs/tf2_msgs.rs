//! `tf2_msgs/msg/TFMessage`: the static camera mounts on `/tf_static`.
//!
//! Promises: [`TfMessage::camera_mounts`] gives one `base_link` → `cam_<name>` optical-frame
//! transform per camera; decoding bounds the transform count by the bytes left before
//! allocating, so a corrupt count is an error, not a huge allocation. Cost: one allocation for
//! the transform list plus the frame strings.

use super::geometry_msgs::{
    Quaternion, Transform, TransformStamped, Vector3, QUATERNION_DEF, TRANSFORM_DEF,
    TRANSFORM_STAMPED_DEF, VECTOR3_DEF,
};
use super::std_msgs::{Header, HEADER_DEF, TIME_DEF};
use crate::cdr::{CdrError, CdrReader, CdrWriter};
use redline_pipeline::camera::CameraSpec;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::test_support::{f, header, round_trip};
    use crate::msgs::RosMessage;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tf_round_trips(n in 0usize..4, h in header(), names in proptest::collection::vec("[a-z]{0,6}", 4), x in f()) {
            let transforms = (0..n).map(|i| TransformStamped {
                header: h.clone(), child_frame_id: names[i].clone(),
                transform: Transform { translation: Vector3 { x, y: i as f64, z: -x }, rotation: Quaternion::from_yaw(x) },
            }).collect();
            round_trip(&TfMessage { transforms });
        }
    }

    #[test]
    fn corrupt_count_does_not_allocate() {
        let mut w = CdrWriter::new();
        w.u32(u32::MAX);
        assert!(TfMessage::from_cdr(&w.finish()).is_err());
    }
}
