//! The synthetic driving scenario: a seeded road, a scripted ego vehicle and 20+ actors
//! (cars, cyclists, pedestrians), simulated once at construction and then read frame by
//! frame.
//!
//! Contract:
//! - **Deterministic.** [`Scenario::generate`] depends on the [`ScenarioConfig`] only (a
//!   private splitmix64 generator seeded by `config.seed`, a fixed step `dt = 1 / fps`,
//!   f64 arithmetic with the platform-independent trigonometry of [`redline_pipeline::camera::det`]),
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
//!
//! Layout: `road` (the seeded centre line and lane geometry, and the per-pixel road window the
//! renderer uses), `traffic` (agent behaviour: IDM car following, lane changes, cyclists,
//! roadside and crossing pedestrians, the fixed-step simulation), `placement` (where the ego and
//! the actors start). This module holds the config, its validation, the seeded random streams
//! and [`Scenario`]: generation and the frame accessors.

mod placement;
mod road;
mod traffic;

pub use road::Road;

use crate::camera::{
    rig, DEFAULT_FRONT_HFOV_DEG, DEFAULT_TELE_HFOV_DEG, MAX_FRONT_HFOV_DEG, MIN_FRONT_HFOV_DEG,
    MIN_TELE_HFOV_DEG,
};
use crate::render::render_scene;
use crate::types::{ActorClass, EgoState, GroundTruth, GtObject, RgbImage};
use placement::place_agents;
use redline_pipeline::camera::det;
use redline_pipeline::camera::CameraSpec;
use redline_runtime::rng::{mix64, SplitMix64};
use serde::{Deserialize, Serialize};
use traffic::Sim;

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
    /// The front camera's horizontal field of view, degrees
    /// ([`crate::camera::surround_rig_with`]); 40 to 120. Default 40.
    pub front_hfov_deg: f64,
    /// The forward telephoto camera's horizontal field of view, degrees
    /// ([`crate::camera::tele_camera`], the rig's seventh camera, `front_tele`); 10 up to
    /// `front_hfov_deg`; `None` leaves it out (the six-camera rig of the releases before
    /// the telephoto). Default 20. In a config file: degrees, or `"off"` (TOML has no null;
    /// JSON's `null` and `false` mean off too).
    #[serde(deserialize_with = "tele_fov", serialize_with = "tele_fov_out")]
    pub tele_hfov_deg: Option<f64>,
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
            front_hfov_deg: DEFAULT_FRONT_HFOV_DEG,
            tele_hfov_deg: Some(DEFAULT_TELE_HFOV_DEG),
        }
    }
}

/// `tele_hfov_deg` into a config: the degrees, or `"off"` (so that TOML, which has no null,
/// reads it back as it was).
fn tele_fov_out<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(d) => s.serialize_f64(*d),
        None => s.serialize_str("off"),
    }
}

/// A telephoto FOV written as text (`--tele-hfov`, or a string in a config): degrees
/// (`"20"`), or `off` / `none` (no telephoto camera), case-insensitive. The range is checked
/// by [`ScenarioConfig::validate`].
pub fn parse_tele_hfov(s: &str) -> Result<Option<f64>, String> {
    if s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    s.parse::<f64>()
        .map(Some)
        .map_err(|_| format!("tele_hfov_deg `{s}` is neither degrees (e.g. 20) nor \"off\""))
}

/// `tele_hfov_deg` from a config: a number, a string [`parse_tele_hfov`] reads, or off
/// (`false`, `null`).
fn tele_fov<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tele {
        Degrees(f64),
        Flag(bool),
        Word(String),
    }
    match Option::<Tele>::deserialize(d)? {
        Some(Tele::Degrees(v)) => Ok(Some(v)),
        None | Some(Tele::Flag(false)) => Ok(None),
        Some(Tele::Word(w)) => parse_tele_hfov(&w).map_err(serde::de::Error::custom),
        Some(Tele::Flag(true)) => Err(serde::de::Error::custom(
            "tele_hfov_deg = true: give degrees (e.g. 20) or \"off\" (no telephoto camera)",
        )),
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
    /// `front_hfov_deg` outside [`MIN_FRONT_HFOV_DEG`]..=[`MAX_FRONT_HFOV_DEG`].
    #[error(
        "scenario front_hfov_deg = {0} is invalid: use {min} to {max} degrees (narrower leaves \
         a gap between the front and the front-side cameras), e.g. 70 or 40 for a narrow \
         front camera",
        min = MIN_FRONT_HFOV_DEG,
        max = MAX_FRONT_HFOV_DEG
    )]
    FrontFov(f64),
    /// `tele_hfov_deg` outside [`MIN_TELE_HFOV_DEG`]..=`front_hfov_deg`.
    #[error(
        "scenario tele_hfov_deg = {tele} is invalid: use {min} degrees up to the front \
         camera's {front} (a telephoto view is the narrower one), e.g. 20, or \"off\" for \
         the six-camera rig",
        min = MIN_TELE_HFOV_DEG
    )]
    TeleFov {
        /// Requested telephoto FOV.
        tele: f64,
        /// The front camera's FOV.
        front: f64,
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
        if !(self.front_hfov_deg.is_finite()
            && (MIN_FRONT_HFOV_DEG..=MAX_FRONT_HFOV_DEG).contains(&self.front_hfov_deg))
        {
            return Err(ScenarioError::FrontFov(self.front_hfov_deg));
        }
        if let Some(tele) = self.tele_hfov_deg {
            if !(tele.is_finite() && (MIN_TELE_HFOV_DEG..=self.front_hfov_deg).contains(&tele)) {
                return Err(ScenarioError::TeleFov {
                    tele,
                    front: self.front_hfov_deg,
                });
            }
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

// ---------------------------------------------------------------------------------------
// Deterministic random numbers
// ---------------------------------------------------------------------------------------

/// The scenario's generator: SplitMix64 on an independent stream per (seed, stream).
type Rng = SplitMix64;

/// The generator of stream `stream` of scenario seed `seed` (1: road, 2: placement).
fn rng_stream(seed: u64, stream: u64) -> Rng {
    SplitMix64::new(mix64(seed ^ mix64(stream)))
}

/// A generated scenario: the road, the camera rig and every frame's ego pose and actors.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The config it was generated from.
    pub config: ScenarioConfig,
    /// The road.
    pub road: Road,
    /// The rig ([`rig`]): the six surround cameras at the configured image size and front
    /// FOV, then the telephoto camera when configured.
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
        let cameras = rig(
            config.image_width,
            config.image_height,
            config.front_hfov_deg,
            config.tele_hfov_deg,
        );
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
