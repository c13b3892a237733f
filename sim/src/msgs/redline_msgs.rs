//! `redline_msgs`: this project's own messages, ground truth (`GroundTruth`, `ObjectState`) and
//! the road map (`RoadMap`).
//!
//! Promises: [`GroundTruthMsg::from_gt`] / [`GroundTruthMsg::to_gt`] round-trip sim ground
//! truth bit-exactly; an unknown actor class or a bad stamp is a [`MsgError`]. Decoding bounds
//! the object count by the bytes left before allocating. Cost: one allocation per object list
//! or centre line. Never panics on bad data.

use super::std_msgs::{Header, HEADER_DEF, TIME_DEF};
use super::MsgError;
use crate::cdr::{CdrError, CdrReader, CdrWriter};
use crate::types::{ActorClass, GroundTruth, GtObject};

pub(super) const OBJECT_STATE_DEF: (&str, &str) = (
    "redline_msgs/ObjectState",
    "uint32 id\nuint8 class\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 length\nfloat64 width\n\
     float64 height\nfloat64 yaw\nfloat64 vx\nfloat64 vy\n",
);

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
    use crate::msgs::test_support::{f, header, round_trip};
    use crate::msgs::RosMessage;
    use proptest::prelude::*;

    proptest! {
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
    }

    #[test]
    fn ground_truth_converts() {
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
    }

    #[test]
    fn corrupt_count_does_not_allocate() {
        let mut w = CdrWriter::new();
        Header::new(1, "map").encode(&mut w);
        w.u32(u32::MAX); // object count
        let b = w.finish();
        assert!(matches!(
            GroundTruthMsg::from_cdr(&b),
            Err(CdrError::TooLong { .. })
        ));
    }
}
