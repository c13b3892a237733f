//! Types shared by the scenario generator, the renderer, the log format and the replay
//! driver. Units: metres, seconds (timestamps in ns), radians; angles counter-clockwise.
//!
//! Frames of reference:
//! - **world**: fixed, z up; the road starts at the origin heading along +x.
//! - **ego** (`base_link`): x forward, y left, z up, origin on the ground under the rear axle.
//! - **camera** (ROS optical frame): z forward, x right, y down.

use serde::{Deserialize, Serialize};

/// Kinds of actors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum ActorClass {
    /// Passenger car.
    Car = 0,
    /// Pedestrian.
    Pedestrian = 1,
    /// Cyclist.
    Cyclist = 2,
}

impl ActorClass {
    /// From the wire value.
    pub fn from_u8(v: u8) -> Option<ActorClass> {
        match v {
            0 => Some(ActorClass::Car),
            1 => Some(ActorClass::Pedestrian),
            2 => Some(ActorClass::Cyclist),
            _ => None,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ActorClass::Car => "car",
            ActorClass::Pedestrian => "pedestrian",
            ActorClass::Cyclist => "cyclist",
        }
    }
}

/// The ego vehicle at one instant, in the world frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EgoState {
    /// Timestamp, ns since the start of the scenario.
    pub stamp_ns: u64,
    /// Position, m.
    pub x: f64,
    /// Position, m.
    pub y: f64,
    /// Heading, rad.
    pub yaw: f64,
    /// Forward speed, m/s.
    pub v: f64,
    /// Yaw rate, rad/s.
    pub yaw_rate: f64,
}

/// One actor (ground-truth box) at one instant, in the world frame.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GtObject {
    /// Stable id over the whole scenario.
    pub id: u32,
    /// Class.
    pub class: ActorClass,
    /// Box centre, m (z = centre height).
    pub x: f64,
    /// Box centre, m.
    pub y: f64,
    /// Box centre, m.
    pub z: f64,
    /// Extent along its heading, m.
    pub length: f64,
    /// Extent across, m.
    pub width: f64,
    /// Extent up, m.
    pub height: f64,
    /// Heading, rad.
    pub yaw: f64,
    /// Velocity, m/s (world frame).
    pub vx: f64,
    /// Velocity, m/s (world frame).
    pub vy: f64,
}

/// All actors at one instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// Timestamp, ns since the start of the scenario.
    pub stamp_ns: u64,
    /// Actors (any order; ids are stable).
    pub objects: Vec<GtObject>,
}

/// An 8-bit RGB image, row major, no padding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RgbImage {
    /// Width, px.
    pub width: u32,
    /// Height, px.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub data: Vec<u8>,
}
