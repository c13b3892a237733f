//! Plain-old-data types that travel between driving stages in arena buffers.
//!
//! Every type is `#[repr(C)]` and `bytemuck::Pod`, so a stage reads and writes them as
//! typed slices of the frame slot: no allocation, no serialisation. Fixed capacities are
//! constants here; an entry with `valid == 0` is empty. Frames of reference as in
//! `redline_sim::types`: **world** (fixed, z up), **ego** (x forward, y left, origin under
//! the rear axle).

use bytemuck::{Pod, Zeroable};

/// Detections one frame can carry.
pub const MAX_DETECTIONS: usize = 64;
/// Tracks the tracker keeps.
pub const MAX_TRACKS: usize = 64;
/// Prediction steps per track.
pub const PRED_STEPS: usize = 30;
/// Seconds between prediction steps (so the horizon is 3.0 s).
pub const PRED_DT: f32 = 0.1;
/// Points of a planned trajectory, one every `PRED_DT`, starting at t = `PRED_DT`.
pub const PLAN_STEPS: usize = 30;
/// Centre-line points of the road map, one every `MAP_SPACING` metres.
pub const MAP_POINTS: usize = 1024;
/// Metres between road-map points.
pub const MAP_SPACING: f32 = 2.0;

/// Ego vehicle length, m.
pub const EGO_LENGTH: f32 = 4.6;
/// Ego vehicle width, m.
pub const EGO_WIDTH: f32 = 1.9;
/// Distance from the ego origin (rear axle) forward to the box centre, m.
pub const EGO_REAR_TO_CENTRE: f32 = 1.4;

/// Object classes on the wire (same values as `redline_sim::types::ActorClass`).
pub mod class {
    /// Passenger car.
    pub const CAR: u32 = 0;
    /// Pedestrian.
    pub const PEDESTRIAN: u32 = 1;
    /// Cyclist.
    pub const CYCLIST: u32 = 2;
    /// Number of classes.
    pub const COUNT: usize = 3;
    /// Class names, indexed by class id (as `redline_sim::types::ActorClass` names them).
    pub const NAMES: [&str; COUNT] = ["car", "pedestrian", "cyclist"];
}

/// Segmentation classes per BEV cell (the segmentation head's argmax, and the ground truth
/// of [`crate::eval::seg_truth`]).
pub mod seg_class {
    /// Neither road surface nor marking (grass, kerb, off the map).
    pub const OTHER: u8 = 0;
    /// Road surface between the edge lines.
    pub const DRIVABLE: u8 = 1;
    /// A lane boundary line (road edges and lane dividers).
    pub const LANE_MARKING: u8 = 2;
    /// Number of classes.
    pub const COUNT: usize = 3;
    /// Class names, indexed by class id.
    pub const NAMES: [&str; COUNT] = ["other", "drivable", "lane_marking"];
}

/// The ego vehicle's pose and motion for a frame, world frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct EgoPose {
    /// Sensor timestamp of the frame, ns.
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

/// One detected object, **ego** frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct Detection {
    /// Box centre, m.
    pub x: f32,
    /// Box centre, m.
    pub y: f32,
    /// Heading, rad.
    pub yaw: f32,
    /// Extent along the heading, m.
    pub length: f32,
    /// Extent across, m.
    pub width: f32,
    /// Confidence in [0, 1].
    pub score: f32,
    /// `class::*`.
    pub class: u32,
    /// 1 if this entry holds a detection.
    pub valid: u32,
}

/// A ground-truth box as the oracle and the evaluators see it, **world** frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct GtBox {
    /// Stable actor id.
    pub id: u32,
    /// `class::*`.
    pub class: u32,
    /// Box centre, m.
    pub x: f64,
    /// Box centre, m.
    pub y: f64,
    /// Heading, rad.
    pub yaw: f64,
    /// Velocity, m/s.
    pub vx: f64,
    /// Velocity, m/s.
    pub vy: f64,
    /// Extent along the heading, m.
    pub length: f32,
    /// Extent across, m.
    pub width: f32,
    /// 1 if this entry holds a box.
    pub valid: u32,
    /// Padding.
    pub _pad: u32,
}

/// One confirmed track, **world** frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct TrackState {
    /// Track id (never reused within a run).
    pub id: u32,
    /// `class::*`.
    pub class: u32,
    /// Position, m.
    pub x: f32,
    /// Position, m.
    pub y: f32,
    /// Velocity, m/s.
    pub vx: f32,
    /// Velocity, m/s.
    pub vy: f32,
    /// Heading, rad.
    pub yaw: f32,
    /// Extent along the heading, m.
    pub length: f32,
    /// Extent across, m.
    pub width: f32,
    /// Frames since birth.
    pub age: u32,
    /// Consecutive frames without a matching detection.
    pub misses: u32,
    /// 1 if this entry holds a track.
    pub valid: u32,
}

/// Predicted future positions of one track, **world** frame: `xy[k]` at `(k + 1) * PRED_DT`.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct PredictedPath {
    /// Track id.
    pub track_id: u32,
    /// `class::*`.
    pub class: u32,
    /// Extent along the heading, m.
    pub length: f32,
    /// Extent across, m.
    pub width: f32,
    /// 1 if this entry holds a path.
    pub valid: u32,
    /// Padding.
    pub _pad: u32,
    /// Positions, m.
    pub xy: [[f32; 2]; PRED_STEPS],
}

impl Default for PredictedPath {
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

/// One point of the planned ego trajectory, **world** frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct TrajPoint {
    /// Seconds after the frame's timestamp.
    pub t: f32,
    /// Position, m.
    pub x: f32,
    /// Position, m.
    pub y: f32,
    /// Heading, rad.
    pub yaw: f32,
    /// Speed, m/s.
    pub v: f32,
    /// Padding.
    pub _pad: f32,
}

/// What the planner chose, published with the trajectory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct PlanSummary {
    /// 0 = a sampled candidate, 1 = the minimum-risk fallback (brake in lane).
    pub kind: u32,
    /// Candidates evaluated.
    pub candidates: u32,
    /// Candidates free of predicted collisions.
    pub collision_free: u32,
    /// Index of the chosen candidate.
    pub chosen: u32,
    /// Its total cost.
    pub cost: f32,
    /// Its lateral offset from the lane centre at the end, m.
    pub lateral_offset: f32,
    /// Its target speed, m/s.
    pub target_speed: f32,
    /// Padding.
    pub _pad: f32,
}

/// The road: a centre line sampled every `MAP_SPACING` m, world frame. Lanes are numbered
/// from the right; lane `i`'s centre is offset `(i + 0.5 - lanes / 2) * lane_width` to the
/// left of the centre line.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct RoadMap {
    /// Lanes (same direction).
    pub lanes: u32,
    /// Points used in `centre`.
    pub points: u32,
    /// Lane width, m.
    pub lane_width: f32,
    /// Padding.
    pub _pad: f32,
    /// Centre-line points (x, y), m.
    pub centre: [[f32; 2]; MAP_POINTS],
}

impl Default for RoadMap {
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

/// The bird's-eye-view grid, ego frame: cell (ix, iy) covers
/// x in [x0 + ix·res, x0 + (ix+1)·res), y in [y0 + iy·res, ...). Stored row-major by iy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BevSpec {
    /// Cells along x (forward).
    pub nx: usize,
    /// Cells along y (left).
    pub ny: usize,
    /// Cell size, m.
    pub res: f32,
    /// Rear edge, m.
    pub x0: f32,
    /// Right edge, m.
    pub y0: f32,
}

impl BevSpec {
    /// The default grid: 64 m forward, 16 m back, ±24 m sideways, 1 m cells (80 × 48).
    pub const DEFAULT: BevSpec = BevSpec {
        nx: 80,
        ny: 48,
        res: 1.0,
        x0: -16.0,
        y0: -24.0,
    };

    /// Cell containing ego-frame point (x, y), if inside.
    pub fn cell(&self, x: f32, y: f32) -> Option<(usize, usize)> {
        let ix = ((x - self.x0) / self.res).floor();
        let iy = ((y - self.y0) / self.res).floor();
        if ix < 0.0 || iy < 0.0 || ix >= self.nx as f32 || iy >= self.ny as f32 {
            return None;
        }
        Some((ix as usize, iy as usize))
    }

    /// Centre of cell (ix, iy), ego frame.
    pub fn centre(&self, ix: usize, iy: usize) -> (f32, f32) {
        (
            self.x0 + (ix as f32 + 0.5) * self.res,
            self.y0 + (iy as f32 + 0.5) * self.res,
        )
    }
}
