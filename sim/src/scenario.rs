//! The synthetic driving scenario: a seeded road, a scripted ego vehicle and 20+ actors
//! (cars, cyclists, pedestrians), simulated once at construction and then read frame by
//! frame.
//!
//! Contract:
//! - **Deterministic.** [`Scenario::generate`] depends on the [`ScenarioConfig`] only (a
//!   private splitmix64 generator seeded by `config.seed`, a fixed step `dt = 1 / fps`,
//!   f64 arithmetic with the platform-independent trigonometry of [`crate::camera::det`]),
//!   so the same config gives bit-identical ground truth and images on every run and
//!   machine; a different seed gives a different scenario.
//! - **Collision-free.** Every mover (ego, cars, cyclists, roadside pedestrians) follows the
//!   nearest actor ahead in its lateral corridor with the Intelligent Driver Model (IDM);
//!   a lane-changing car occupies both lanes from the moment it starts until it completes;
//!   a lane change only starts when the gaps to the new leader and follower are safe; a
//!   crossing pedestrian only steps onto the road when every vehicle can stop comfortably,
//!   and while it crosses it blocks every lane. The tests check that no two boxes (ego
//!   included) ever overlap, for several seeds. The guarantee holds for the validated
//!   config range (lane width >= 2.5 m).
//! - **Ground truth** is in the world frame, ids stable (1..=actors), velocities from
//!   central finite differences of the simulated positions.
//!
//! Cost: generation simulates `frames × actors²` leader searches (about 6 ms for the default
//! 30 s, 24-actor scenario in release) and stores every frame's boxes (`frames × actors`
//! [`GtObject`]s, ~60 KiB per second at 30 fps). [`Scenario::ego`], [`Scenario::objects`]
//! and [`Scenario::render`] do not allocate once `out` has its size; [`Scenario::ground_truth`]
//! returns an owned copy. Nothing here panics on any config: invalid ones are
//! [`ScenarioError`]s.

use crate::camera::det;
use crate::camera::surround_rig;
use crate::render::render_scene;
use crate::types::{ActorClass, CameraSpec, EgoState, GroundTruth, GtObject, RgbImage};
use redline_runtime::rng::{mix64, SplitMix64};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

/// Ego vehicle length, m (same as `redline_pipeline::types::EGO_LENGTH`).
pub const EGO_LENGTH: f64 = 4.6;
/// Ego vehicle width, m.
pub const EGO_WIDTH: f64 = 1.9;
/// Ego vehicle height, m.
pub const EGO_HEIGHT: f64 = 1.5;
/// Distance from the ego origin (rear axle) forward to the ego box centre, m.
pub const EGO_REAR_TO_CENTRE: f64 = 1.4;
/// Arc length of the ego origin (rear axle) at frame 0, m.
pub const EGO_START_S: f64 = 20.0;
/// Ego target speed, m/s.
pub const EGO_TARGET_SPEED: f64 = 12.0;
/// Largest accepted `actors`.
pub const MAX_ACTORS: usize = 512;
/// Largest accepted number of frames (`round(seconds * fps)`).
pub const MAX_FRAMES: usize = 1_000_000;
/// Largest accepted image side, px.
pub const MAX_IMAGE_SIDE: u32 = 4096;

/// Everything that defines a scenario. Missing JSON fields take their defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScenarioConfig {
    /// Seed of every random choice (road, actors, noise). Default 7.
    pub seed: u64,
    /// Duration, s. Default 30.
    pub seconds: f64,
    /// Frame rate, Hz; the simulation steps at `1 / fps`. Default 30.
    pub fps: f64,
    /// Number of actors besides the ego. Default 24 (60 % cars, 20 % cyclists, 20 %
    /// pedestrians); any value up to [`MAX_ACTORS`] is accepted.
    pub actors: usize,
    /// Lanes, all in the direction of travel; lane 0 is the rightmost. Default 3.
    pub lanes: u32,
    /// Lane width, m. Default 3.5.
    pub lane_width: f64,
    /// Camera image width, px. Default 320.
    pub image_width: u32,
    /// Camera image height, px. Default 192.
    pub image_height: u32,
}

impl Default for ScenarioConfig {
    fn default() -> Self {
        ScenarioConfig {
            seed: 7,
            seconds: 30.0,
            fps: 30.0,
            actors: 24,
            lanes: 3,
            lane_width: 3.5,
            image_width: 320,
            image_height: 192,
        }
    }
}

/// An invalid [`ScenarioConfig`]; the message names the field and the accepted range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// `fps` is not a finite number in (0, 1000].
    #[error("scenario fps = {0} is invalid: use a finite frame rate in (0, 1000] Hz, e.g. 30")]
    Fps(f64),
    /// `seconds` is not a finite positive number.
    #[error("scenario seconds = {0} is invalid: use a finite duration > 0, e.g. 30")]
    Seconds(f64),
    /// `round(seconds * fps)` is 0 or too large.
    #[error(
        "scenario seconds * fps gives {0} frames: it must be between 1 and {max}; \
         lengthen seconds or lower fps",
        max = MAX_FRAMES
    )]
    FrameCount(f64),
    /// `lanes` is 0 or more than 8.
    #[error("scenario lanes = {0} is invalid: use 1 to 8 lanes")]
    Lanes(u32),
    /// `lane_width` outside [2.5, 6] m.
    #[error(
        "scenario lane_width = {0} m is invalid: use 2.5 to 6 m (a car is 1.9 m wide), e.g. 3.5"
    )]
    LaneWidth(f64),
    /// `actors` above [`MAX_ACTORS`].
    #[error("scenario actors = {0} is too many: use at most {max}", max = MAX_ACTORS)]
    Actors(usize),
    /// `image_width` or `image_height` zero or above [`MAX_IMAGE_SIDE`].
    #[error(
        "scenario image size {width}x{height} is invalid: image_width and image_height must be \
         1 to {max} px, e.g. 320x192",
        max = MAX_IMAGE_SIDE
    )]
    ImageSize {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// A road piece given to [`Road::from_pieces`] is invalid.
    #[error(
        "road piece {index} (length {length} m, curvature {curvature} 1/m) is invalid: \
         lengths must be finite and >= 1 m, curvatures finite with |curvature| * length < pi \
         and |curvature| <= 0.2"
    )]
    RoadPiece {
        /// Index of the piece.
        index: usize,
        /// Its length.
        length: f64,
        /// Its curvature.
        curvature: f64,
    },
}

impl ScenarioConfig {
    /// The built-in drive `redline` replays when given no log: the defaults at the
    /// pipeline's default camera resolution, 256×128.
    pub fn default_drive() -> ScenarioConfig {
        ScenarioConfig {
            image_width: 256,
            image_height: 128,
            ..ScenarioConfig::default()
        }
    }

    /// Checks every field; the error names the first invalid one.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !(self.fps.is_finite() && self.fps > 0.0 && self.fps <= 1000.0) {
            return Err(ScenarioError::Fps(self.fps));
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            return Err(ScenarioError::Seconds(self.seconds));
        }
        let frames = (self.seconds * self.fps).round();
        if !(frames >= 1.0 && frames <= MAX_FRAMES as f64) {
            return Err(ScenarioError::FrameCount(frames));
        }
        if self.lanes == 0 || self.lanes > 8 {
            return Err(ScenarioError::Lanes(self.lanes));
        }
        if !(self.lane_width.is_finite() && (2.5..=6.0).contains(&self.lane_width)) {
            return Err(ScenarioError::LaneWidth(self.lane_width));
        }
        if self.actors > MAX_ACTORS {
            return Err(ScenarioError::Actors(self.actors));
        }
        let bad = |s: u32| s == 0 || s > MAX_IMAGE_SIDE;
        if bad(self.image_width) || bad(self.image_height) {
            return Err(ScenarioError::ImageSize {
                width: self.image_width,
                height: self.image_height,
            });
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Deterministic random numbers
// ---------------------------------------------------------------------------------------

/// The scenario's generator: SplitMix64 on an independent stream per (seed, stream).
type Rng = SplitMix64;

fn rng_stream(seed: u64, stream: u64) -> Rng {
    SplitMix64::new(mix64(seed ^ mix64(stream)))
}

// ---------------------------------------------------------------------------------------
// Road
// ---------------------------------------------------------------------------------------

/// One straight (`k == 0`) or constant-curvature piece of the centre line.
#[derive(Clone, Copy, Debug)]
struct Segment {
    s0: f64,
    len: f64,
    /// Curvature, 1/m, positive turning left.
    k: f64,
    x0: f64,
    y0: f64,
    h0: f64,
    sin0: f64,
    cos0: f64,
    /// Arc centre (arcs only).
    cx: f64,
    cy: f64,
    /// Unit radial vectors from the centre to the start and end (arcs only).
    a0: [f64; 2],
    a1: [f64; 2],
}

impl Segment {
    fn new(s0: f64, len: f64, k: f64, x0: f64, y0: f64, h0: f64) -> Segment {
        let (sin0, cos0) = det::sin_cos(h0);
        let mut seg = Segment {
            s0,
            len,
            k,
            x0,
            y0,
            h0,
            sin0,
            cos0,
            cx: 0.0,
            cy: 0.0,
            a0: [0.0; 2],
            a1: [0.0; 2],
        };
        if k != 0.0 {
            seg.cx = x0 - sin0 / k;
            seg.cy = y0 + cos0 / k;
            let sk = k.signum();
            seg.a0 = [sin0 * sk, -cos0 * sk];
            let (s1, c1) = det::sin_cos(h0 + k * len);
            seg.a1 = [s1 * sk, -c1 * sk];
        }
        seg
    }

    /// Pose at distance `ds` from the start (extrapolated outside [0, len]).
    fn pose(&self, ds: f64) -> (f64, f64, f64) {
        if self.k == 0.0 {
            (self.x0 + self.cos0 * ds, self.y0 + self.sin0 * ds, self.h0)
        } else {
            let h = self.h0 + self.k * ds;
            let (sh, ch) = det::sin_cos(h);
            (
                self.x0 + (sh - self.sin0) / self.k,
                self.y0 - (ch - self.cos0) / self.k,
                h,
            )
        }
    }

    /// `(ds, d)` of a point: distance along the piece from its start and signed lateral
    /// offset (left positive).
    fn local(&self, x: f64, y: f64) -> (f64, f64) {
        if self.k == 0.0 {
            let px = x - self.x0;
            let py = y - self.y0;
            (
                px * self.cos0 + py * self.sin0,
                -px * self.sin0 + py * self.cos0,
            )
        } else {
            let qx = x - self.cx;
            let qy = y - self.cy;
            let r = (qx * qx + qy * qy).sqrt();
            let sk = self.k.signum();
            let d = 1.0 / self.k - sk * r;
            let cross = self.a0[0] * qy - self.a0[1] * qx;
            let dotp = self.a0[0] * qx + self.a0[1] * qy;
            let phi = sk * det::atan2(cross, dotp);
            (phi / self.k.abs(), d)
        }
    }

    /// Signed lateral offset of a point if its foot lies on this piece (no atan2).
    #[inline]
    fn lateral_if_on(&self, x: f64, y: f64) -> Option<f64> {
        if self.k == 0.0 {
            let px = x - self.x0;
            let py = y - self.y0;
            let ds = px * self.cos0 + py * self.sin0;
            if (0.0..=self.len).contains(&ds) {
                Some(-px * self.sin0 + py * self.cos0)
            } else {
                None
            }
        } else {
            let qx = x - self.cx;
            let qy = y - self.cy;
            let sk = self.k.signum();
            let c0 = sk * (self.a0[0] * qy - self.a0[1] * qx);
            let c1 = sk * (qx * self.a1[1] - qy * self.a1[0]);
            if c0 >= 0.0 && c1 >= 0.0 {
                let r = (qx * qx + qy * qy).sqrt();
                Some(1.0 / self.k - sk * r)
            } else {
                None
            }
        }
    }
}

/// The road: straight and constant-curvature segments joined smoothly (tangent-continuous),
/// `lanes` lanes in one direction. The world origin is the start of the centre line, which
/// heads along +x.
#[derive(Clone, Debug)]
pub struct Road {
    /// Number of lanes (lane 0 is the rightmost).
    pub lanes: u32,
    /// Lane width, m.
    pub lane_width: f64,
    segments: Vec<Segment>,
    length: f64,
}

impl Road {
    /// A road from `(length, curvature)` pieces joined tangentially, starting at the origin
    /// heading +x. Errors name the first invalid piece. Panics never.
    pub fn from_pieces(
        lanes: u32,
        lane_width: f64,
        pieces: &[(f64, f64)],
    ) -> Result<Road, ScenarioError> {
        if lanes == 0 || lanes > 8 {
            return Err(ScenarioError::Lanes(lanes));
        }
        if !(lane_width.is_finite() && (2.5..=6.0).contains(&lane_width)) {
            return Err(ScenarioError::LaneWidth(lane_width));
        }
        let mut segments = Vec::with_capacity(pieces.len().max(1));
        let (mut x, mut y, mut h, mut s) = (0.0, 0.0, 0.0, 0.0);
        for (index, &(length, curvature)) in pieces.iter().enumerate() {
            let ok = length.is_finite()
                && length >= 1.0
                && curvature.is_finite()
                && curvature.abs() <= 0.2
                && curvature.abs() * length < PI;
            if !ok {
                return Err(ScenarioError::RoadPiece {
                    index,
                    length,
                    curvature,
                });
            }
            let k = if curvature.abs() < 1e-9 {
                0.0
            } else {
                curvature
            };
            let seg = Segment::new(s, length, k, x, y, h);
            let (x1, y1, h1) = seg.pose(length);
            segments.push(seg);
            x = x1;
            y = y1;
            h = h1;
            s += length;
        }
        if segments.is_empty() {
            segments.push(Segment::new(0.0, 1.0, 0.0, 0.0, 0.0, 0.0));
            s = 1.0;
        }
        Ok(Road {
            lanes,
            lane_width,
            segments,
            length: s,
        })
    }

    /// A random road at least `min_length` long: a straight start, then at least two
    /// curves (radius 150–400 m, 12–30°, alternating direction) between straights, ending
    /// with a straight.
    fn random(lanes: u32, lane_width: f64, min_length: f64, rng: &mut Rng) -> Road {
        let mut pieces = vec![(rng.range_f64(80.0, 130.0), 0.0)];
        let mut total = pieces[0].0;
        let mut sign = if rng.chance(0.5) { 1.0 } else { -1.0 };
        let mut curves = 0;
        while curves < 2 || total < min_length {
            let radius = rng.range_f64(150.0, 400.0);
            let angle = rng.range_f64(12.0, 30.0) * PI / 180.0;
            pieces.push((radius * angle, sign / radius));
            total += radius * angle;
            sign = -sign;
            curves += 1;
            let straight = rng.range_f64(50.0, 140.0);
            pieces.push((straight, 0.0));
            total += straight;
        }
        // Every piece is valid by construction; fall back to a straight road otherwise.
        Road::from_pieces(lanes, lane_width, &pieces).unwrap_or(Road {
            lanes,
            lane_width,
            segments: vec![Segment::new(0.0, total, 0.0, 0.0, 0.0, 0.0)],
            length: total,
        })
    }

    /// Length of the centre line, m.
    pub fn length(&self) -> f64 {
        self.length
    }

    /// Half the paved width (`lanes * lane_width / 2`), m.
    pub fn half_width(&self) -> f64 {
        0.5 * f64::from(self.lanes) * self.lane_width
    }

    fn segment_index(&self, s: f64) -> usize {
        let i = self.segments.partition_point(|g| g.s0 + g.len < s);
        i.min(self.segments.len() - 1)
    }

    fn clamp_s(&self, s: f64) -> f64 {
        if s.is_nan() {
            0.0
        } else {
            s.clamp(0.0, self.length)
        }
    }

    /// Centre-line point and heading `(x, y, heading)` at arc length `s` (clamped to
    /// [0, length]; NaN reads as 0).
    pub fn pose_at(&self, s: f64) -> (f64, f64, f64) {
        let s = self.clamp_s(s);
        let g = &self.segments[self.segment_index(s)];
        g.pose(s - g.s0)
    }

    /// Curvature (1/m, positive left) at arc length `s` (clamped).
    pub fn curvature_at(&self, s: f64) -> f64 {
        self.segments[self.segment_index(self.clamp_s(s))].k
    }

    /// World point at arc length `s` and lateral offset `d` (left positive), with the
    /// centre-line heading there.
    pub fn point_at(&self, s: f64, d: f64) -> (f64, f64, f64) {
        let (x, y, h) = self.pose_at(s);
        let (sh, ch) = det::sin_cos(h);
        (x - d * sh, y + d * ch, h)
    }

    /// Arc length and signed lateral offset (left positive) of world point (x, y) relative
    /// to the centre line. Points before the start or past the end get `s < 0` or
    /// `s > length` (the end pieces extended along their tangents).
    pub fn project(&self, x: f64, y: f64) -> (f64, f64) {
        let n = self.segments.len();
        let mut best = (0.0, 0.0);
        let mut best_dist = f64::INFINITY;
        for (i, g) in self.segments.iter().enumerate() {
            let (ds, d) = g.local(x, y);
            let before = i == 0 && ds < 0.0;
            let after = i + 1 == n && ds > g.len;
            let inside = (0.0..=g.len).contains(&ds);
            let dist = if inside {
                d.abs()
            } else if before || after {
                let over = if before { ds } else { ds - g.len };
                (d * d + over * over).sqrt()
            } else {
                // Foot off this piece: distance to its nearest end.
                let e = g.pose(if ds < 0.0 { 0.0 } else { g.len });
                ((x - e.0) * (x - e.0) + (y - e.1) * (y - e.1)).sqrt()
            };
            if dist < best_dist {
                best_dist = dist;
                let ds = if inside || before || after {
                    ds
                } else if ds < 0.0 {
                    0.0
                } else {
                    g.len
                };
                let d = if inside || before || after {
                    d
                } else {
                    g.local_clamped_lateral(x, y, ds)
                };
                best = (g.s0 + ds, d);
            }
        }
        best
    }

    /// Centre line sampled every `spacing` metres from s = 0 (at most `max_points` points;
    /// a non-positive or non-finite spacing gives the start point only).
    pub fn sample_centre(&self, spacing: f64, max_points: usize) -> Vec<(f64, f64)> {
        let mut out = Vec::with_capacity(max_points.min(1 << 16));
        if max_points == 0 {
            return out;
        }
        if !(spacing.is_finite() && spacing > 0.0) {
            let (x, y, _) = self.pose_at(0.0);
            out.push((x, y));
            return out;
        }
        let mut i = 0usize;
        while out.len() < max_points {
            let s = i as f64 * spacing;
            if s > self.length {
                break;
            }
            let (x, y, _) = self.pose_at(s);
            out.push((x, y));
            i += 1;
        }
        out
    }

    /// Lateral offset of the centre of lane i (0 = rightmost): (i + 0.5 - lanes/2) * lane_width.
    pub fn lane_offset(&self, lane: u32) -> f64 {
        (f64::from(lane) + 0.5 - 0.5 * f64::from(self.lanes)) * self.lane_width
    }

    /// The pieces within `radius` of `(x, y)`, for per-pixel road lookups (render).
    pub(crate) fn window(&self, x: f64, y: f64, radius: f64) -> RoadWindow<'_> {
        let mut w = RoadWindow {
            road: self,
            idx: [0; WINDOW_CAP],
            n: 0,
        };
        for (i, g) in self.segments.iter().enumerate() {
            if w.n == WINDOW_CAP {
                break;
            }
            let (ds, d) = g.local(x, y);
            let dist = if (0.0..=g.len).contains(&ds) {
                d.abs()
            } else {
                let e = g.pose(if ds < 0.0 { 0.0 } else { g.len });
                ((x - e.0) * (x - e.0) + (y - e.1) * (y - e.1)).sqrt()
            };
            if dist <= radius {
                w.idx[w.n] = i;
                w.n += 1;
            }
        }
        w
    }
}

impl Segment {
    /// Lateral offset of a point measured at `ds` on this piece (used when the foot is off
    /// the piece).
    fn local_clamped_lateral(&self, x: f64, y: f64, ds: f64) -> f64 {
        let (px, py, h) = self.pose(ds);
        let (sh, ch) = det::sin_cos(h);
        -(x - px) * sh + (y - py) * ch
    }
}

const WINDOW_CAP: usize = 32;

/// A fixed-capacity set of road pieces near a point (no allocation).
#[derive(Debug)]
pub(crate) struct RoadWindow<'a> {
    road: &'a Road,
    idx: [usize; WINDOW_CAP],
    n: usize,
}

impl RoadWindow<'_> {
    /// Lateral offset (smallest magnitude) of a world point over the pieces whose extent
    /// contains its foot, and that piece; `None` off the road's extent.
    #[inline]
    pub(crate) fn lateral(&self, x: f64, y: f64) -> Option<(f64, usize)> {
        let mut best: Option<(f64, usize)> = None;
        for &i in &self.idx[..self.n] {
            if let Some(d) = self.road.segments[i].lateral_if_on(x, y) {
                match best {
                    Some((bd, _)) if bd.abs() <= d.abs() => {}
                    _ => best = Some((d, i)),
                }
            }
        }
        best
    }

    /// Arc length of a world point on piece `seg` (from [`RoadWindow::lateral`]).
    pub(crate) fn arc_length(&self, seg: usize, x: f64, y: f64) -> f64 {
        let g = &self.road.segments[seg.min(self.road.segments.len() - 1)];
        g.s0 + g.local(x, y).0
    }
}

// ---------------------------------------------------------------------------------------
// Simulation
// ---------------------------------------------------------------------------------------

/// What drives an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ego,
    Car,
    Cyclist,
    /// Pedestrian walking along the roadside.
    Walker,
    /// Pedestrian that crosses the road at a scheduled time, then back and forth.
    Crosser,
}

impl Kind {
    /// Moves along the road with IDM.
    fn is_mover(self) -> bool {
        !matches!(self, Kind::Crosser)
    }
    /// Drives on the road (must yield to crossing pedestrians).
    fn is_vehicle(self) -> bool {
        matches!(self, Kind::Ego | Kind::Car | Kind::Cyclist)
    }
}

/// Intelligent Driver Model parameters.
#[derive(Clone, Copy, Debug)]
struct Idm {
    /// Maximum acceleration, m/s².
    a: f64,
    /// Comfortable deceleration, m/s².
    b: f64,
    /// Time headway, s.
    t: f64,
    /// Standstill gap, m.
    s0: f64,
}

const EGO_IDM: Idm = Idm {
    a: 1.4,
    b: 2.0,
    t: 1.5,
    s0: 3.0,
};
const CYCLIST_IDM: Idm = Idm {
    a: 1.0,
    b: 2.0,
    t: 1.0,
    s0: 1.5,
};
const WALKER_IDM: Idm = Idm {
    a: 0.8,
    b: 1.5,
    t: 0.8,
    s0: 0.8,
};
/// Hardest braking any mover applies, m/s².
const MAX_BRAKE: f64 = 9.0;
/// Acceleration of a crossing pedestrian starting and stopping, m/s².
const CROSS_ACCEL: f64 = 1.5;
/// Lateral clearance added on each side when deciding whether two corridors overlap, m.
const CORRIDOR_MARGIN: f64 = 0.3;

/// IDM acceleration for speed `v`, desired speed `v0`, and an optional leader `(gap, speed)`.
fn idm_accel(p: &Idm, v: f64, v0: f64, leader: Option<(f64, f64)>) -> f64 {
    let r = if v0 > 0.0 { v / v0 } else { 1.0 };
    let r2 = r * r;
    let mut acc = p.a * (1.0 - r2 * r2);
    if let Some((gap, vl)) = leader {
        let dv = v - vl;
        let s_star = p.s0 + (v * p.t + v * dv / (2.0 * (p.a * p.b).sqrt())).max(0.0);
        let q = s_star / gap.max(0.05);
        acc -= p.a * q * q;
    }
    acc.clamp(-MAX_BRAKE, p.a)
}

/// Quintic smoothstep and its derivative: zero velocity and acceleration at both ends.
fn smoothstep(t: f64) -> (f64, f64) {
    let t = t.clamp(0.0, 1.0);
    let u = 1.0 - t;
    (
        t * t * t * (10.0 - 15.0 * t + 6.0 * t * t),
        30.0 * t * t * u * u,
    )
}

#[derive(Clone, Copy, Debug)]
struct LaneChange {
    from_d: f64,
    to_d: f64,
    to_lane: u32,
    tau: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cross {
    /// On a kerb, until `cross_time` and a clear road.
    Waiting,
    /// Walking to `cross_to`.
    Crossing,
}

#[derive(Clone, Debug)]
struct Agent {
    id: u32,
    class: ActorClass,
    kind: Kind,
    length: f64,
    width: f64,
    height: f64,
    /// Arc length of the box centre, m.
    s: f64,
    /// Lateral offset of the box centre, m.
    d: f64,
    /// Lateral speed, m/s (lane changes and crossings).
    d_dot: f64,
    /// Speed along the road, m/s (>= 0).
    v: f64,
    /// +1 along the road, -1 against (roadside pedestrians only).
    dir: f64,
    v0: f64,
    idm: Idm,
    lane: u32,
    lc: Option<LaneChange>,
    lc_duration: f64,
    cooldown_until: f64,
    /// A scheduled lane change: earliest time and direction (+1 left, -1 right).
    desire: Option<(f64, i32)>,
    cross: Cross,
    cross_time: f64,
    /// Wait on the far kerb before crossing back, s.
    cross_pause: f64,
    cross_speed: f64,
    cross_to: f64,
}

impl Agent {
    /// Half extent along the road, m.
    fn half_len(&self) -> f64 {
        if self.kind == Kind::Crosser {
            0.5 * self.width
        } else {
            0.5 * self.length
        }
    }
    fn half_wid(&self) -> f64 {
        if self.kind == Kind::Crosser {
            0.5 * self.length
        } else {
            0.5 * self.width
        }
    }
    /// Lateral interval this agent occupies or blocks: its body, both lanes during a lane
    /// change, the whole road while crossing.
    fn interval(&self, half_road: f64) -> (f64, f64) {
        let hw = self.half_wid();
        let (mut lo, mut hi) = (self.d - hw, self.d + hw);
        if let Some(lc) = &self.lc {
            lo = lo.min(lc.from_d.min(lc.to_d) - hw);
            hi = hi.max(lc.from_d.max(lc.to_d) + hw);
        }
        if self.kind == Kind::Crosser && self.cross == Cross::Crossing {
            lo = lo.min(-half_road);
            hi = hi.max(half_road);
        }
        (lo, hi)
    }
}

fn overlaps(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.1 + CORRIDOR_MARGIN && b.0 < a.1 + CORRIDOR_MARGIN
}

/// Counts of what happened in a scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioStats {
    /// Cars among the actors.
    pub cars: usize,
    /// Cyclists among the actors.
    pub cyclists: usize,
    /// Pedestrians among the actors.
    pub pedestrians: usize,
    /// Lane changes started.
    pub lane_changes: usize,
    /// Road crossings started.
    pub crossings: usize,
}

struct Sim<'r> {
    road: &'r Road,
    agents: Vec<Agent>,
    acc: Vec<f64>,
    half: f64,
    dt: f64,
    stats: ScenarioStats,
}

impl Sim<'_> {
    /// Nearest agent (other than `i`) ahead of (or behind) `i` along its direction whose
    /// interval overlaps `corridor`: `(index, bumper-to-bumper gap in s)`. Behind, only
    /// movers count.
    fn nearest(&self, i: usize, corridor: (f64, f64), ahead: bool) -> Option<(usize, f64)> {
        let a = &self.agents[i];
        let mut best: Option<(usize, f64)> = None;
        for (j, b) in self.agents.iter().enumerate() {
            if j == i || !overlaps(corridor, b.interval(self.half)) {
                continue;
            }
            if !ahead && !b.kind.is_mover() {
                continue;
            }
            let rel = a.dir * (b.s - a.s);
            let rel = if ahead { rel } else { -rel };
            if rel <= 0.0 && !(rel == 0.0 && ahead && j > i) {
                continue;
            }
            if best.is_none_or(|(_, r)| rel < r) {
                best = Some((j, rel));
            }
        }
        best.map(|(j, rel)| (j, rel - a.half_len() - self.agents[j].half_len()))
    }

    /// Speed of `b` along the direction of `a`.
    fn speed_along(a: &Agent, b: &Agent) -> f64 {
        if b.kind.is_mover() {
            b.v * b.dir * a.dir
        } else {
            0.0
        }
    }

    /// Converts a gap in centre-line arc length to metres along `a`'s lane.
    fn lane_gap(&self, a: &Agent, gap: f64) -> f64 {
        let f = (1.0 - self.road.curvature_at(a.s) * a.d).clamp(0.5, 1.5);
        gap * f
    }

    /// IDM leader `(gap, speed)` of agent `i` in `corridor`, including the road ends.
    fn leader_in(&self, i: usize, corridor: (f64, f64)) -> Option<(f64, f64)> {
        let a = &self.agents[i];
        let mut lead = self
            .nearest(i, corridor, true)
            .map(|(j, gap)| (gap, Self::speed_along(a, &self.agents[j])));
        let end_gap = if a.dir > 0.0 {
            self.road.length() - 3.0 - a.s - a.half_len()
        } else {
            a.s - 3.0 - a.half_len()
        };
        if lead.is_none_or(|(g, _)| end_gap < g) {
            lead = Some((end_gap, 0.0));
        }
        lead.map(|(g, v)| (self.lane_gap(a, g), v))
    }

    fn accel_in(&self, i: usize, corridor: (f64, f64)) -> f64 {
        let a = &self.agents[i];
        idm_accel(&a.idm, a.v, a.v0, self.leader_in(i, corridor))
    }

    /// Whether car `i` may start a lane change to `target` now.
    fn lane_change_safe(&self, i: usize, target: u32) -> bool {
        let a = &self.agents[i];
        let to_d = self.road.lane_offset(target);
        let hw = a.half_wid();
        let corridor = (a.d.min(to_d) - hw, a.d.max(to_d) + hw);
        if let Some((j, gap)) = self.nearest(i, corridor, true) {
            let vl = Self::speed_along(a, &self.agents[j]);
            let gap = self.lane_gap(a, gap);
            if gap < 4.0 + 0.8 * a.v + (a.v - vl).max(0.0) * 2.0
                || idm_accel(&a.idm, a.v, a.v0, Some((gap, vl))) < -2.0
            {
                return false;
            }
        }
        if let Some((j, gap)) = self.nearest(i, corridor, false) {
            let f = &self.agents[j];
            let gap = self.lane_gap(f, gap);
            let vf = f.v;
            if gap < 4.0 + 0.8 * vf + (vf - a.v).max(0.0) * 2.5
                || idm_accel(&f.idm, vf, f.v0, Some((gap, a.v))) < -2.0
            {
                return false;
            }
        }
        true
    }

    fn start_lane_change(&mut self, i: usize, target: u32) {
        let to_d = self.road.lane_offset(target);
        let a = &mut self.agents[i];
        a.lc = Some(LaneChange {
            from_d: a.d,
            to_d,
            to_lane: target,
            tau: 0.0,
        });
        a.desire = None;
        self.stats.lane_changes += 1;
    }

    fn decide_lane_changes(&mut self, step: usize, t: f64) {
        let lanes = self.road.lanes;
        for i in 0..self.agents.len() {
            let a = &self.agents[i];
            if a.kind != Kind::Car
                || a.lc.is_some()
                || t < a.cooldown_until
                || a.v < 5.0
                || !(step + a.id as usize).is_multiple_of(15)
            {
                continue;
            }
            let lane = a.lane;
            let valid = |dl: i32| {
                let l = i64::from(lane) + i64::from(dl);
                (0..i64::from(lanes)).contains(&l).then_some(l as u32)
            };
            // A scheduled lane change, as soon as it is safe.
            if let Some((when, dl)) = a.desire {
                if t >= when {
                    match valid(dl) {
                        Some(target) if self.lane_change_safe(i, target) => {
                            self.start_lane_change(i, target);
                            continue;
                        }
                        Some(_) => {}
                        None => self.agents[i].desire = None,
                    }
                }
            }
            // Overtaking a slower leader when the next lane is better.
            let a = &self.agents[i];
            let own = a.interval(self.half);
            let Some((j, gap)) = self.nearest(i, own, true) else {
                continue;
            };
            let vl = Self::speed_along(a, &self.agents[j]);
            if gap > 50.0 || vl > a.v0 - 1.5 || self.agents[j].kind == Kind::Crosser {
                continue;
            }
            let a_cur = self.accel_in(i, own);
            for dl in [1, -1] {
                let Some(target) = valid(dl) else { continue };
                let to_d = self.road.lane_offset(target);
                let hw = self.agents[i].half_wid();
                let a_new = self.accel_in(i, (to_d - hw, to_d + hw));
                if a_new > a_cur + 0.3 && self.lane_change_safe(i, target) {
                    self.start_lane_change(i, target);
                    break;
                }
            }
        }
    }

    /// Whether every vehicle can stop comfortably before crossing pedestrian `i`'s path.
    fn crossing_clear(&self, i: usize) -> bool {
        let p = &self.agents[i];
        // A vehicle already past the crossing line only moves away (speeds are >= 0), so 1 m
        // behind it is enough; one approaching needs room to stop.
        let (p_lo, p_hi) = (p.s - p.half_len() - 0.5, p.s + p.half_len() + 1.0);
        self.agents.iter().all(|b| {
            if !b.kind.is_vehicle() {
                return true;
            }
            let (lo, hi) = (b.s - b.half_len(), b.s + b.half_len());
            if lo < p_hi && hi > p_lo {
                return false;
            }
            if hi <= p_lo {
                let gap = p_lo - hi;
                // Stopping at 3 m/s² after a 0.5 s reaction, plus 3 m.
                let need = b.v * b.v / 6.0 + 0.5 * b.v + 3.0;
                return gap >= need;
            }
            true
        })
    }

    fn step(&mut self, step: usize) {
        let t = step as f64 * self.dt;
        let dt = self.dt;
        // 1. Crossings whose time has come start when the road is clear.
        for i in 0..self.agents.len() {
            let a = &self.agents[i];
            if a.kind == Kind::Crosser
                && a.cross == Cross::Waiting
                && t >= a.cross_time
                && self.crossing_clear(i)
            {
                self.agents[i].cross = Cross::Crossing;
                self.stats.crossings += 1;
            }
        }
        // 2. Lane-change decisions, in id order.
        self.decide_lane_changes(step, t);
        // 3. Accelerations from the current state (order-independent).
        for i in 0..self.agents.len() {
            self.acc[i] = if self.agents[i].kind.is_mover() {
                let own = self.agents[i].interval(self.half);
                self.accel_in(i, own)
            } else {
                0.0
            };
        }
        // 4. Integrate.
        for i in 0..self.agents.len() {
            let k = self.road.curvature_at(self.agents[i].s);
            let acc = self.acc[i];
            let a = &mut self.agents[i];
            if a.kind.is_mover() {
                let v_new = a.v + acc * dt;
                let ds = if v_new < 0.0 {
                    if acc < 0.0 {
                        -a.v * a.v / (2.0 * acc)
                    } else {
                        0.0
                    }
                } else {
                    a.v * dt + 0.5 * acc * dt * dt
                };
                a.v = v_new.max(0.0);
                let f = (1.0 - k * a.d).clamp(0.5, 1.5);
                a.s += a.dir * ds / f;
            }
            if let Some(mut lc) = a.lc {
                let rate = (a.v / 8.0).min(1.0) / a.lc_duration;
                lc.tau = (lc.tau + rate * dt).min(1.0);
                let (p, dp) = smoothstep(lc.tau);
                a.d = lc.from_d + (lc.to_d - lc.from_d) * p;
                a.d_dot = (lc.to_d - lc.from_d) * dp * rate;
                if lc.tau >= 1.0 {
                    a.d = lc.to_d;
                    a.d_dot = 0.0;
                    a.lane = lc.to_lane;
                    a.lc = None;
                    a.cooldown_until = t + 6.0;
                } else {
                    a.lc = Some(lc);
                }
            }
            if a.kind == Kind::Crosser && a.cross == Cross::Crossing {
                // Walk across: speed ramps up and down at CROSS_ACCEL, so positions and
                // finite-difference velocities stay smooth.
                let left = a.cross_to - a.d;
                let v = (a.v + CROSS_ACCEL * dt)
                    .min(a.cross_speed)
                    .min((2.0 * CROSS_ACCEL * left.abs()).sqrt());
                if left.abs() <= v * dt {
                    // Arrived: wait on this kerb, then cross back.
                    a.d = a.cross_to;
                    a.d_dot = 0.0;
                    a.v = 0.0;
                    a.cross = Cross::Waiting;
                    a.cross_to = -a.cross_to;
                    a.cross_time = t + a.cross_pause;
                } else {
                    a.v = v;
                    a.d_dot = v * left.signum();
                    a.d += v * dt * left.signum();
                }
            }
        }
    }

    /// World pose `(x, y, yaw)` of agent `a`'s box centre.
    fn world_pose(&self, a: &Agent) -> (f64, f64, f64) {
        let (x, y, h) = self.road.point_at(a.s, a.d);
        let yaw = match a.kind {
            Kind::Crosser => {
                let side = if a.cross_to > 0.0 { 1.0 } else { -1.0 };
                h + side * 0.5 * PI
            }
            Kind::Walker if a.dir < 0.0 => h + PI,
            _ => h + det::atan2(a.d_dot, a.v),
        };
        (x, y, det::wrap_angle(yaw))
    }
}

/// Places the ego (index 0) and `config.actors` actors in road coordinates.
fn place_agents(config: &ScenarioConfig, rng: &mut Rng) -> Vec<Agent> {
    let lanes = config.lanes;
    let w = config.lane_width;
    let half = 0.5 * f64::from(lanes) * w;
    let lane_offset = |lane: u32| (f64::from(lane) + 0.5 - 0.5 * f64::from(lanes)) * w;
    let ego_lane = lanes / 2;
    let ego_s = EGO_START_S + EGO_REAR_TO_CENTRE;
    let template = Agent {
        id: 0,
        class: ActorClass::Car,
        kind: Kind::Ego,
        length: EGO_LENGTH,
        width: EGO_WIDTH,
        height: EGO_HEIGHT,
        s: ego_s,
        d: lane_offset(ego_lane),
        d_dot: 0.0,
        v: 10.0,
        dir: 1.0,
        v0: EGO_TARGET_SPEED,
        idm: EGO_IDM,
        lane: ego_lane,
        lc: None,
        lc_duration: 4.0,
        cooldown_until: 0.0,
        desire: None,
        cross: Cross::Waiting,
        cross_time: 0.0,
        cross_pause: 0.0,
        cross_speed: 0.0,
        cross_to: 0.0,
    };
    let mut agents = vec![template.clone()];

    let n = config.actors;
    let n_cars = (0.6 * n as f64).round() as usize;
    let n_cyc = ((0.2 * n as f64).round() as usize).min(n - n_cars);
    let n_ped = n - n_cars - n_cyc;
    let n_cross = n_ped.div_ceil(2);
    let n_walk = n_ped - n_cross;

    // The stretch the ego drives through, where actors are spread.
    let route_end = ego_s + EGO_TARGET_SPEED * config.seconds;
    let s_lo = 4.0;
    let s_hi = (route_end + 60.0).max(s_lo + 100.0);

    let fits = |agents: &[Agent], c: &Agent| {
        agents.iter().all(|p| {
            if !overlaps(c.interval(half), p.interval(half)) {
                return true;
            }
            let gap = (c.s - p.s).abs() - c.half_len() - p.half_len();
            let dv = c.v - p.v;
            gap >= 3.0 + 1.5 * c.v.max(p.v) + dv * dv / 3.0
        })
    };
    let place = |agents: &mut Vec<Agent>, mut c: Agent, lo: f64, hi: f64, rng: &mut Rng| {
        c.id = agents.len() as u32;
        c.s = rng.range_f64(lo, hi);
        let mut tries = 0;
        while !fits(agents, &c) && tries < 100_000 {
            c.s += 4.0;
            tries += 1;
        }
        agents.push(c);
    };

    for _ in 0..n_cars {
        let v0 = rng.range_f64(8.0, 16.0);
        let lane = rng.below(u64::from(lanes)) as u32;
        let desire = if lanes > 1 && rng.chance(0.4) {
            let when = rng.range_f64(2.0, (0.7 * config.seconds).max(2.5));
            let dl = if lane == 0 {
                1
            } else if lane + 1 == lanes || rng.chance(0.5) {
                -1
            } else {
                1
            };
            Some((when, dl))
        } else {
            None
        };
        let c = Agent {
            class: ActorClass::Car,
            kind: Kind::Car,
            length: rng.range_f64(4.2, 4.8),
            width: rng.range_f64(1.8, 2.0),
            height: rng.range_f64(1.4, 1.6),
            d: lane_offset(lane),
            v: v0,
            v0,
            idm: Idm {
                a: rng.range_f64(1.2, 1.8),
                b: 2.0,
                t: rng.range_f64(1.2, 1.6),
                s0: 2.0,
            },
            lane,
            lc_duration: rng.range_f64(3.0, 5.0),
            desire,
            ..template.clone()
        };
        place(&mut agents, c, s_lo, s_hi, rng);
    }
    for _ in 0..n_cyc {
        let v0 = rng.range_f64(4.0, 6.0);
        let c = Agent {
            class: ActorClass::Cyclist,
            kind: Kind::Cyclist,
            length: rng.range_f64(1.7, 1.9),
            width: 0.6,
            height: rng.range_f64(1.6, 1.8),
            d: -half + 0.6,
            v: v0,
            v0,
            idm: CYCLIST_IDM,
            lane: 0,
            ..template.clone()
        };
        place(&mut agents, c, s_lo, s_hi, rng);
    }
    for _ in 0..n_walk {
        let v0 = rng.range_f64(1.0, 1.6);
        let side = if rng.chance(0.5) { 1.0 } else { -1.0 };
        let forward = rng.chance(0.5);
        let c = Agent {
            class: ActorClass::Pedestrian,
            kind: Kind::Walker,
            length: rng.range_f64(0.55, 0.65),
            width: rng.range_f64(0.55, 0.65),
            height: rng.range_f64(1.6, 1.9),
            d: side * (half + if forward { 1.5 } else { 2.4 }),
            v: v0,
            v0,
            dir: if forward { 1.0 } else { -1.0 },
            idm: WALKER_IDM,
            ..template.clone()
        };
        let lo = if forward { s_lo } else { 60.0 };
        place(&mut agents, c, lo, s_hi.max(lo + 50.0), rng);
    }
    let cross_lo = 60.0;
    let cross_hi = (ego_s + 0.85 * EGO_TARGET_SPEED * config.seconds).max(cross_lo + 40.0);
    let first_crosser = agents.len();
    for _ in 0..n_cross {
        let side = if rng.chance(0.5) { 1.0 } else { -1.0 };
        let mut s = rng.range_f64(cross_lo, cross_hi);
        let mut tries = 0;
        while agents[first_crosser..]
            .iter()
            .any(|p| (p.s - s).abs() < 12.0)
            && tries < 100_000
        {
            s += 13.0;
            tries += 1;
        }
        // The ego averages about 11 m/s; a crossing is scheduled 6–8.5 s before it would arrive, so
        // the ego (and traffic) must slow down for it when it can.
        let arrival = (s - ego_s) / 11.0;
        let c = Agent {
            id: agents.len() as u32,
            class: ActorClass::Pedestrian,
            kind: Kind::Crosser,
            length: rng.range_f64(0.55, 0.65),
            width: rng.range_f64(0.55, 0.65),
            height: rng.range_f64(1.6, 1.9),
            s,
            d: side * (half + 0.4),
            v: 0.0,
            v0: 0.0,
            cross: Cross::Waiting,
            cross_time: (arrival - rng.range_f64(6.0, 8.5)).max(0.5),
            cross_pause: rng.range_f64(3.0, 8.0),
            cross_speed: rng.range_f64(1.2, 1.5),
            cross_to: -side * (half + 0.4),
            ..template.clone()
        };
        agents.push(c);
    }
    agents
}

/// A generated scenario: the road, the camera rig and every frame's ego pose and actors.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The config it was generated from.
    pub config: ScenarioConfig,
    /// The road.
    pub road: Road,
    /// The surround rig ([`surround_rig`]) at the configured image size.
    pub cameras: Vec<CameraSpec>,
    egos: Vec<EgoState>,
    /// `frames × n_actors` boxes, frame major.
    objects: Vec<GtObject>,
    n_actors: usize,
    period_ns: u64,
    stats: ScenarioStats,
}

impl Scenario {
    /// Generates the scenario described by `config` (validated first; the error names the
    /// invalid field). Simulates every frame up front.
    pub fn generate(config: ScenarioConfig) -> Result<Scenario, ScenarioError> {
        config.validate()?;
        let frames = (config.seconds * config.fps).round() as usize;
        let dt = 1.0 / config.fps;
        let agents = place_agents(&config, &mut rng_stream(config.seed, 2));
        let max_s = agents.iter().map(|a| a.s).fold(0.0, f64::max);
        let min_len = max_s + 17.0 * config.seconds + 150.0;
        let road = Road::random(
            config.lanes,
            config.lane_width,
            min_len,
            &mut rng_stream(config.seed, 1),
        );
        let n_actors = agents.len() - 1;
        let mut stats = ScenarioStats::default();
        for a in &agents[1..] {
            match a.class {
                ActorClass::Car => stats.cars += 1,
                ActorClass::Cyclist => stats.cyclists += 1,
                ActorClass::Pedestrian => stats.pedestrians += 1,
            }
        }
        let mut sim = Sim {
            road: &road,
            acc: vec![0.0; agents.len()],
            agents,
            half: road.half_width(),
            dt,
            stats,
        };
        // States 0..=frames (one extra for the velocity of the last frame).
        let mut poses: Vec<(f64, f64, f64)> = Vec::with_capacity((frames + 1) * n_actors);
        let mut ego_poses: Vec<(f64, f64, f64, f64)> = Vec::with_capacity(frames + 1);
        for k in 0..=frames {
            let e = &sim.agents[0];
            let (cx, cy, yaw) = sim.world_pose(e);
            let (sy, cyaw) = det::sin_cos(yaw);
            ego_poses.push((
                cx - EGO_REAR_TO_CENTRE * cyaw,
                cy - EGO_REAR_TO_CENTRE * sy,
                yaw,
                e.v,
            ));
            for a in &sim.agents[1..] {
                poses.push(sim.world_pose(a));
            }
            if k < frames {
                sim.step(k);
            }
        }
        let period_ns = (1e9 / config.fps).round() as u64;
        let mut egos = Vec::with_capacity(frames);
        let mut objects = Vec::with_capacity(frames * n_actors);
        for k in 0..frames {
            let (prev, span) = if k == 0 { (0, dt) } else { (k - 1, 2.0 * dt) };
            let e0 = ego_poses[prev];
            let e1 = ego_poses[k + 1];
            let e = ego_poses[k];
            egos.push(EgoState {
                stamp_ns: k as u64 * period_ns,
                x: e.0,
                y: e.1,
                yaw: e.2,
                v: e.3,
                yaw_rate: det::wrap_angle(e1.2 - e0.2) / span,
            });
            for (j, a) in sim.agents[1..].iter().enumerate() {
                let p = poses[k * n_actors + j];
                let p0 = poses[prev * n_actors + j];
                let p1 = poses[(k + 1) * n_actors + j];
                objects.push(GtObject {
                    id: a.id,
                    class: a.class,
                    x: p.0,
                    y: p.1,
                    z: 0.5 * a.height,
                    length: a.length,
                    width: a.width,
                    height: a.height,
                    yaw: p.2,
                    vx: (p1.0 - p0.0) / span,
                    vy: (p1.1 - p0.1) / span,
                });
            }
        }
        let stats = sim.stats;
        let cameras = surround_rig(config.image_width, config.image_height);
        Ok(Scenario {
            config,
            road,
            cameras,
            egos,
            objects,
            n_actors,
            period_ns,
            stats,
        })
    }

    /// Number of frames, `round(seconds * fps)` (>= 1).
    pub fn frame_count(&self) -> usize {
        self.egos.len()
    }

    /// Frame period, `round(1e9 / fps)` ns.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Timestamp of `frame`: `frame * period_ns`.
    pub fn stamp_ns(&self, frame: usize) -> u64 {
        (frame as u64).saturating_mul(self.period_ns)
    }

    fn clamp_frame(&self, frame: usize) -> usize {
        frame.min(self.egos.len() - 1)
    }

    /// The ego state at `frame` (clamped to the last frame).
    pub fn ego(&self, frame: usize) -> EgoState {
        self.egos[self.clamp_frame(frame)]
    }

    /// Number of actors (ego excluded).
    pub fn actor_count(&self) -> usize {
        self.n_actors
    }

    /// The actors at `frame` (clamped), without copying; ids `1..=actor_count()` in order.
    pub fn objects(&self, frame: usize) -> &[GtObject] {
        let f = self.clamp_frame(frame);
        &self.objects[f * self.n_actors..(f + 1) * self.n_actors]
    }

    /// Every actor at `frame` (clamped; ids stable), world frame, with velocities.
    pub fn ground_truth(&self, frame: usize) -> GroundTruth {
        let f = self.clamp_frame(frame);
        GroundTruth {
            stamp_ns: self.stamp_ns(f),
            objects: self.objects(f).to_vec(),
        }
    }

    /// What happened: class counts, lane changes and crossings started.
    pub fn stats(&self) -> ScenarioStats {
        self.stats
    }

    /// Noise seed of camera `cam` at `frame`.
    fn noise_seed(&self, frame: usize, cam: usize) -> u64 {
        mix64(mix64(self.config.seed) ^ mix64(((frame as u64) << 8) | cam as u64))
    }

    /// Renders camera `cam` at `frame` (clamped) into `out` (resized to the camera's size if
    /// needed), with a little sensor noise seeded by (seed, frame, cam). Deterministic.
    /// An out-of-range `cam` leaves `out` empty (0 × 0).
    pub fn render(&self, frame: usize, cam: usize, out: &mut RgbImage) {
        let Some(spec) = self.cameras.get(cam) else {
            out.width = 0;
            out.height = 0;
            out.data.clear();
            return;
        };
        let f = self.clamp_frame(frame);
        render_scene(
            spec,
            &self.egos[f],
            &self.road,
            self.objects(f),
            self.noise_seed(f, cam),
            out,
        );
    }
}
