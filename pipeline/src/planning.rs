//! Sampling-based trajectory planning in the road (Frenet) frame with a minimum-risk
//! fallback.
//!
//! Contract:
//! - [`Planner::plan`] samples candidates from the ego's current `(s, d, v)`: end lateral
//!   offsets = the current offset and every lane centre (lane changes over each of
//!   `lane_change_times` seconds' worth of travel, quintic smooth-step profile in arc
//!   length, so a car that slows down also steers less), times five speed profiles (keep
//!   speed, accelerate toward `max_speed`, slow to half speed comfortably, stop comfortably,
//!   stop at `max_decel`): `(1 + 2·lanes) × 5 >= 15` candidates (lanes above
//!   [`MAX_PLAN_LANES`] are not sampled). Each is `PLAN_STEPS` points at `t = (k+1)·PRED_DT`,
//!   world frame.
//! - A candidate is **forbidden** if the ego box ([`ego_box`], inflated by
//!   `safety_margin` on every side) overlaps a predicted box at the same step, or if the
//!   (uninflated) ego box leaves the road edges by more than `road_edge_tolerance` (a
//!   candidate may stay as far out as the ego already is, so a car slightly off the road can
//!   still come back). Allowed candidates cost
//!   `comfort (Σ a² dt, Σ a_lat² dt) − progress (arc length) + lane keeping (end offset from
//!   the nearest lane centre) + drivable (seconds outside the BEV drivable mask, if given)`.
//!   The cheapest allowed one wins (ties: the first in the fixed sampling order).
//! - If none is allowed, or the map or ego pose is unusable, the output is [`min_risk`]:
//!   braking in the current lane at `max_decel` to a stop, `summary.kind = 1`,
//!   `summary.chosen = summary.candidates`, `summary.cost = +inf`.
//! - Predicted boxes take their heading from their motion; a box that does not move takes
//!   the road heading where it stands (stopped cars line up with their lane), or, off a
//!   usable map, a square of side `max(length, width)`.
//!
//! Hot path: `plan`, `min_risk` and `boxes_overlap` never allocate, lock, log or panic; all
//! buffers come from [`Planner::new`]. Deterministic: fixed sampling order, strict `<` on
//! costs, no clocks or hashing.
//!
//! Cost: candidates × `PLAN_STEPS` × obstacles box tests, each guarded by a bounding-circle
//! check; ~35 × 30 × 64 = 67k circle tests for a 3-lane road and a full track table.

use heapless::Vec as HVec;

use crate::prediction::{
    frenet_to_world, lane_centre, map_pose, map_project, map_valid, road_half_width,
};
use crate::tracking::world_to_ego;
use crate::types::{
    BevSpec, EgoPose, PlanSummary, PredictedPath, RoadMap, TrajPoint, EGO_LENGTH,
    EGO_REAR_TO_CENTRE, EGO_WIDTH, MAX_TRACKS, PLAN_STEPS, PRED_DT, PRED_STEPS,
};

/// Lanes the planner samples lane changes to (a wider road is still driven, but only its
/// first lanes are targets).
pub const MAX_PLAN_LANES: u32 = 8;

/// Speed profiles per lateral target.
const SPEED_PROFILES: usize = 5;

/// Shortest arc length over which a lane change is spread, m (low speeds).
const MIN_LANE_CHANGE_M: f32 = 15.0;

/// A manoeuvre in progress is only continued while the ego is within this of it, m.
const MAX_COMMIT_DEVIATION_M: f32 = 0.5;

/// A manoeuvre in progress with less arc length left than this, m, counts as finished.
const MIN_COMMIT_M: f32 = 1.0;

/// Largest ego heading relative to the road the lateral profiles start from, rad (60°).
const MAX_REL_HEADING: f32 = 1.047;

/// Tuning of the planner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerParams {
    /// Speed limit, m/s.
    pub max_speed: f32,
    /// Comfortable deceleration, m/s² (positive).
    pub comfort_decel: f32,
    /// Strongest deceleration (the minimum-risk stop), m/s² (positive).
    pub max_decel: f32,
    /// Inflation of the ego box on every side for the collision check, m.
    pub safety_margin: f32,
    /// Acceleration toward `max_speed`, m/s².
    pub accel: f32,
    /// Durations of lane changes at the current speed, s (2–3 s).
    pub lane_change_times: [f32; 2],
    /// How far the ego box may stick out of the road edges, m.
    pub road_edge_tolerance: f32,
    /// Weight of progress (per metre of arc length).
    pub w_progress: f32,
    /// Weight of longitudinal acceleration (per (m/s²)²·s).
    pub w_accel: f32,
    /// Weight of lateral acceleration (per (m/s²)²·s).
    pub w_lat_accel: f32,
    /// Weight of the end distance from the nearest lane centre (per m).
    pub w_lane: f32,
    /// Weight of time spent outside the BEV drivable mask (per s).
    pub w_drivable: f32,
}

impl Default for PlannerParams {
    fn default() -> Self {
        Self {
            max_speed: 16.0,
            comfort_decel: 3.0,
            max_decel: 8.0,
            safety_margin: 0.5,
            accel: 1.5,
            lane_change_times: [2.0, 3.0],
            road_edge_tolerance: 0.2,
            w_progress: 1.0,
            w_accel: 0.5,
            w_lat_accel: 1.0,
            w_lane: 2.0,
            w_drivable: 20.0,
        }
    }
}

/// The ego box `(cx, cy, yaw, length, width)` for a trajectory point (rear-axle position
/// and heading), inflated by `margin` on every side.
pub fn ego_box(x: f32, y: f32, yaw: f32, margin: f32) -> (f32, f32, f32, f32, f32) {
    let (s, c) = yaw.sin_cos();
    (
        x + EGO_REAR_TO_CENTRE * c,
        y + EGO_REAR_TO_CENTRE * s,
        yaw,
        EGO_LENGTH + 2.0 * margin,
        EGO_WIDTH + 2.0 * margin,
    )
}

/// Oriented-box overlap test (centre, heading, length, width), separating axis theorem.
/// Touching boxes overlap. A box with a NaN field overlaps everything (conservative).
pub fn boxes_overlap(a: (f32, f32, f32, f32, f32), b: (f32, f32, f32, f32, f32)) -> bool {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (sa, ca) = a.2.sin_cos();
    let (sb, cb) = b.2.sin_cos();
    let (ha, wa) = (0.5 * a.3.abs(), 0.5 * a.4.abs());
    let (hb, wb) = (0.5 * b.3.abs(), 0.5 * b.4.abs());
    // Axes: a's length and width directions, b's length and width directions.
    let axes = [(ca, sa), (-sa, ca), (cb, sb), (-sb, cb)];
    for (ux, uy) in axes {
        let dist = (dx * ux + dy * uy).abs();
        let ra = ha * (ca * ux + sa * uy).abs() + wa * (-sa * ux + ca * uy).abs();
        let rb = hb * (cb * ux + sb * uy).abs() + wb * (-sb * ux + cb * uy).abs();
        if dist > ra + rb {
            return false;
        }
    }
    true
}

/// One predicted box at one step: centre, heading, length, width, bounding radius.
#[derive(Debug, Clone, Copy, Default)]
struct ObsBox {
    x: f32,
    y: f32,
    yaw: f32,
    length: f32,
    width: f32,
    radius: f32,
}

/// Speed profile: move toward `target` at `rate` (m/s²), then hold.
#[derive(Debug, Clone, Copy)]
struct SpeedProfile {
    v0: f32,
    target: f32,
    rate: f32,
}

impl SpeedProfile {
    /// (distance travelled, speed) at time t.
    fn at(&self, t: f32) -> (f32, f32) {
        let dv = self.target - self.v0;
        let rate = self.rate.max(1e-3);
        let t1 = dv.abs() / rate;
        let a = if dv >= 0.0 { rate } else { -rate };
        if t <= t1 {
            (self.v0 * t + 0.5 * a * t * t, self.v0 + a * t)
        } else {
            let s1 = self.v0 * t1 + 0.5 * a * t1 * t1;
            (s1 + self.target * (t - t1), self.target)
        }
    }
}

/// Lateral offset as a quintic in arc length `ds` over `[0, len]`: starts at `d0` with slope
/// `slope0` (dd/ds) and zero curvature, ends at `d1` with zero slope and curvature, then
/// holds `d1`. Returns `(d, dd/ds)`.
/// A lateral manoeuvre: the quintic of [`lateral`] anchored at arc length `s_start`.
#[derive(Debug, Clone, Copy)]
struct Lateral {
    d0: f32,
    slope0: f32,
    d1: f32,
    len: f32,
    s_start: f32,
}

impl Lateral {
    /// `(d, dd/ds)` at absolute arc length `s`.
    fn at(&self, s: f32) -> (f32, f32) {
        lateral(self.d0, self.slope0, self.d1, self.len, s - self.s_start)
    }
}

fn lateral(d0: f32, slope0: f32, d1: f32, len: f32, ds: f32) -> (f32, f32) {
    let u = ds / len;
    if u >= 1.0 {
        return (d1, 0.0);
    }
    let u = u.max(0.0);
    let b = slope0 * len;
    let a = d1 - d0 - b;
    let (c3, c4, c5) = (10.0 * a + 4.0 * b, -15.0 * a - 7.0 * b, 6.0 * a + 3.0 * b);
    let u2 = u * u;
    let u3 = u2 * u;
    let d = d0 + b * u + u3 * (c3 + u * (c4 + u * c5));
    let dd = b + u2 * (3.0 * c3 + u * (4.0 * c4 + u * 5.0 * c5));
    (d, dd / len)
}

fn wrap(a: f32) -> f32 {
    let r = (a + std::f32::consts::PI).rem_euclid(std::f32::consts::TAU);
    r - std::f32::consts::PI
}

fn positive_or(v: f32, d: f32) -> f32 {
    if v.is_finite() && v > 0.0 {
        v
    } else {
        d
    }
}

/// The ego's Frenet state.
#[derive(Debug, Clone, Copy)]
struct Start {
    ego: EgoPose,
    s0: f32,
    d0: f32,
    /// dd/ds now (the ego heading relative to the road), clamped to ±60°.
    slope0: f32,
    v0: f32,
    h0: f32,
}

/// Scores of one candidate.
#[derive(Debug, Clone, Copy)]
struct Score {
    cost: f32,
    collides: bool,
    off_road: bool,
    d_end: f32,
}

/// The sampling planner (see the module docs).
#[derive(Debug)]
pub struct Planner {
    params: PlannerParams,
    obs: Box<[ObsBox]>,
    n_obs: usize,
    cand: [TrajPoint; PLAN_STEPS],
    best: [TrajPoint; PLAN_STEPS],
    /// The lateral manoeuvre chosen last frame: target offset and the arc length where it ends.
    commit: Option<Lateral>,
}

impl Planner {
    /// A planner; allocates its obstacle table (`MAX_TRACKS × PRED_STEPS` boxes).
    pub fn new(params: PlannerParams) -> Self {
        Self {
            params,
            obs: vec![ObsBox::default(); MAX_TRACKS * PRED_STEPS].into_boxed_slice(),
            n_obs: 0,
            cand: [TrajPoint::default(); PLAN_STEPS],
            best: [TrajPoint::default(); PLAN_STEPS],
            commit: None,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &PlannerParams {
        &self.params
    }

    /// Forget the manoeuvre in progress (call when the ego pose jumps, e.g. a new log).
    pub fn reset(&mut self) {
        self.commit = None;
    }

    /// Candidates in the road (Frenet) frame from the ego's current (s, d, v), scored for
    /// collision, off-road, comfort, progress and lane keeping (see the module docs);
    /// writes the cheapest allowed one (or the minimum-risk fallback, `summary.kind = 1`)
    /// into `out[..PLAN_STEPS]` (world frame) and clears any further entries.
    /// `summary.lateral_offset` is the chosen end offset minus the centre of the lane the
    /// ego is in now (+lane width = one lane change to the left). The planner remembers the
    /// lateral manoeuvre it chose and offers its continuation next frame (call in frame
    /// order; [`Planner::reset`] after a jump).
    ///
    /// Per-frame: no allocation, no panic.
    pub fn plan(
        &mut self,
        ego: &EgoPose,
        map: &RoadMap,
        predictions: &[PredictedPath],
        drivable: Option<(&[u8], &BevSpec)>,
        out: &mut [TrajPoint],
        summary: &mut PlanSummary,
    ) {
        let p = self.params;
        let max_decel = positive_or(p.max_decel, PlannerParams::default().max_decel);
        *summary = PlanSummary::default();

        let ego_ok = ego.x.is_finite() && ego.y.is_finite() && ego.yaw.is_finite();
        let (s0, d0) = if ego_ok {
            map_project(map, ego.x as f32, ego.y as f32)
        } else {
            (f32::NAN, f32::NAN)
        };
        if !ego_ok || !map_valid(map) || !s0.is_finite() || !d0.is_finite() {
            self.fallback(ego, map, max_decel, out, summary);
            return;
        }
        let v0 = if ego.v.is_finite() {
            (ego.v as f32).max(0.0)
        } else {
            0.0
        };
        let (_, _, h0) = map_pose(map, s0);
        let rel0 = wrap(ego.yaw as f32 - h0).clamp(-MAX_REL_HEADING, MAX_REL_HEADING);
        let start = Start {
            ego: *ego,
            s0,
            d0,
            slope0: rel0.tan(),
            v0,
            h0,
        };

        self.load_obstacles(map, predictions);

        let lanes = map.lanes.min(MAX_PLAN_LANES);
        let own_lane = (0..map.lanes)
            .map(|i| lane_centre(map, i))
            .fold(f32::NAN, |best, c| {
                if best.is_nan() || (c - d0).abs() < (best - d0).abs() {
                    c
                } else {
                    best
                }
            });
        let max_speed = positive_or(p.max_speed, 0.0);
        let comfort = positive_or(p.comfort_decel, 1.0);
        let accel = positive_or(p.accel, 1.0);
        let profiles: [SpeedProfile; SPEED_PROFILES] = [
            SpeedProfile {
                v0,
                target: v0.min(max_speed),
                rate: comfort,
            },
            SpeedProfile {
                v0,
                target: max_speed,
                rate: if max_speed >= v0 { accel } else { comfort },
            },
            SpeedProfile {
                v0,
                target: 0.5 * v0,
                rate: comfort,
            },
            SpeedProfile {
                v0,
                target: 0.0,
                rate: comfort,
            },
            SpeedProfile {
                v0,
                target: 0.0,
                rate: max_decel,
            },
        ];

        let mut index = 0u32;
        let mut best_cost = f32::INFINITY;
        let mut best: Option<(u32, Score, f32)> = None;
        let mut collision_free = 0u32;
        // Lateral targets: keep the current offset, then each lane centre at each duration.
        // Lateral targets (offset, arc length to reach it, lateral manoeuvre?): keep the
        // current offset, each lane centre at each duration, then the manoeuvre chosen last
        // frame, continued over its remaining length (plan consistency: without it a lane
        // change re-planned from scratch every frame would never finish).
        let mut lats: HVec<(Lateral, bool), { 2 + 2 * MAX_PLAN_LANES as usize }> = HVec::new();
        let fresh = |d1: f32, len: f32| Lateral {
            d0,
            slope0: start.slope0,
            d1,
            len,
            s_start: s0,
        };
        let keep_len = (v0 * positive_or(p.lane_change_times[0], 2.5)).max(MIN_LANE_CHANGE_M);
        let _ = lats.push((fresh(d0, keep_len), false));
        for lane in 0..lanes {
            for t in p.lane_change_times {
                let len = (v0 * positive_or(t, 2.5)).max(MIN_LANE_CHANGE_M);
                let _ = lats.push((fresh(lane_centre(map, lane), len), true));
            }
        }
        if let Some(c) = self.commit {
            let remaining = c.s_start + c.len - s0;
            let near = (c.at(s0).0 - d0).abs() < MAX_COMMIT_DEVIATION_M;
            if remaining > MIN_COMMIT_M && remaining.is_finite() && near {
                let _ = lats.push((c, true));
            }
        }
        let mut best_lat = None;
        for &(lat, manoeuvre) in lats.iter() {
            for prof in profiles.iter() {
                let score = self.candidate(&start, map, prof, &lat, drivable);
                if !score.collides {
                    collision_free += 1;
                }
                let allowed = !score.collides && !score.off_road && score.cost.is_finite();
                if allowed && score.cost < best_cost {
                    best_cost = score.cost;
                    best = Some((index, score, prof.target));
                    best_lat = manoeuvre.then_some(lat);
                    self.best = self.cand;
                }
                index += 1;
            }
        }
        summary.candidates = index;
        summary.collision_free = collision_free;
        match best {
            Some((chosen, score, target)) => {
                self.commit = best_lat;
                summary.kind = 0;
                summary.chosen = chosen;
                summary.cost = score.cost;
                summary.lateral_offset = score.d_end - own_lane;
                summary.target_speed = target;
                let n = out.len().min(PLAN_STEPS);
                out[..n].copy_from_slice(&self.best[..n]);
                for o in out.iter_mut().skip(n) {
                    *o = TrajPoint::default();
                }
            }
            None => {
                let (c, f) = (summary.candidates, summary.collision_free);
                self.fallback(ego, map, max_decel, out, summary);
                summary.candidates = c;
                summary.collision_free = f;
                summary.chosen = c;
                summary.lateral_offset = d0 - own_lane;
            }
        }
    }

    fn fallback(
        &mut self,
        ego: &EgoPose,
        map: &RoadMap,
        decel: f32,
        out: &mut [TrajPoint],
        summary: &mut PlanSummary,
    ) {
        self.commit = None;
        min_risk(ego, map, decel, out);
        summary.kind = 1;
        summary.chosen = summary.candidates;
        summary.cost = f32::INFINITY;
        summary.target_speed = 0.0;
    }

    /// Precompute every predicted box at every step.
    fn load_obstacles(&mut self, map: &RoadMap, predictions: &[PredictedPath]) {
        self.n_obs = 0;
        let map_ok = map_valid(map);
        for pred in predictions.iter().filter(|p| p.valid != 0).take(MAX_TRACKS) {
            if pred
                .xy
                .iter()
                .any(|xy| !xy[0].is_finite() || !xy[1].is_finite())
            {
                continue;
            }
            let (mut l, mut w) = (pred.length, pred.width);
            if !(l.is_finite() && w.is_finite()) {
                continue;
            }
            l = l.abs();
            w = w.abs();
            let first = pred.xy[0];
            let last = pred.xy[PRED_STEPS - 1];
            let moving = ((last[0] - first[0]).powi(2) + (last[1] - first[1]).powi(2)) > 0.25;
            let overall = (last[1] - first[1]).atan2(last[0] - first[0]);
            let mut still_yaw = None;
            if !moving {
                let (s, d) = if map_ok {
                    map_project(map, first[0], first[1])
                } else {
                    (f32::NAN, f32::NAN)
                };
                if s.is_finite() && d.is_finite() && d.abs() <= road_half_width(map) + 2.0 {
                    still_yaw = Some(map_pose(map, s).2);
                } else {
                    // Heading unknown: a square that contains the box at any heading's width.
                    let side = l.max(w);
                    l = side;
                    w = side;
                    still_yaw = Some(0.0);
                }
            }
            let base = self.n_obs * PRED_STEPS;
            for k in 0..PRED_STEPS {
                let yaw = match still_yaw {
                    Some(y) => y,
                    None => {
                        let (a, b) = if k + 1 < PRED_STEPS {
                            (pred.xy[k], pred.xy[k + 1])
                        } else {
                            (pred.xy[k - 1], pred.xy[k])
                        };
                        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
                        if dx * dx + dy * dy > 1e-4 {
                            dy.atan2(dx)
                        } else {
                            overall
                        }
                    }
                };
                self.obs[base + k] = ObsBox {
                    x: pred.xy[k][0],
                    y: pred.xy[k][1],
                    yaw,
                    length: l,
                    width: w,
                    radius: 0.5 * (l * l + w * w).sqrt(),
                };
            }
            self.n_obs += 1;
        }
    }

    /// Build one candidate into `self.cand` and score it.
    fn candidate(
        &mut self,
        st: &Start,
        map: &RoadMap,
        prof: &SpeedProfile,
        lat: &Lateral,
        drivable: Option<(&[u8], &BevSpec)>,
    ) -> Score {
        let p = &self.params;
        let margin = if p.safety_margin.is_finite() {
            p.safety_margin.max(0.0)
        } else {
            0.0
        };
        let tol = if p.road_edge_tolerance.is_finite() {
            p.road_edge_tolerance.max(0.0)
        } else {
            0.0
        };
        let half_w = road_half_width(map);
        let (hl, hw) = (0.5 * EGO_LENGTH, 0.5 * EGO_WIDTH);
        let rel0 = st.slope0.atan();
        let (sr0, cr0) = rel0.sin_cos();
        let now_out = (st.d0 + EGO_REAR_TO_CENTRE * sr0).abs() + hl * sr0.abs() + hw * cr0.abs();
        let edge_limit = (half_w + tol).max(now_out) + 1e-4;
        let ego_radius =
            0.5 * ((EGO_LENGTH + 2.0 * margin).powi(2) + (EGO_WIDTH + 2.0 * margin).powi(2)).sqrt();

        let mut collides = false;
        let mut off_road = false;
        let mut acc2 = 0.0f32;
        let mut lat2 = 0.0f32;
        let mut outside = 0u32;
        let (mut prev_v, mut prev_yaw) = (st.v0, wrap(st.h0 + rel0));
        let mut d_end = st.d0;
        let mut ds_end = 0.0;
        for k in 0..PLAN_STEPS {
            let t = (k + 1) as f32 * PRED_DT;
            let (ds, v) = prof.at(t);
            let (d, slope) = lat.at(st.s0 + ds);
            let rel = slope.atan();
            let (x, y, h) = frenet_to_world(map, st.s0 + ds, d);
            let yaw = wrap(h + rel);
            self.cand[k] = TrajPoint {
                t,
                x,
                y,
                yaw,
                v,
                _pad: 0.0,
            };

            // Comfort.
            let a = (v - prev_v) / PRED_DT;
            let a_lat = v * wrap(yaw - prev_yaw) / PRED_DT;
            acc2 += a * a * PRED_DT;
            lat2 += a_lat * a_lat * PRED_DT;
            prev_v = v;
            prev_yaw = yaw;

            // Road edges (box in the Frenet frame, relative heading `rel`).
            let (sr, cr) = rel.sin_cos();
            let dc = d + EGO_REAR_TO_CENTRE * sr;
            if dc.abs() + hl * sr.abs() + hw * cr.abs() > edge_limit {
                off_road = true;
            }

            // Collision with predictions at the same step.
            if !collides && k < PRED_STEPS {
                let eb = ego_box(x, y, yaw, margin);
                for o in 0..self.n_obs {
                    let ob = self.obs[o * PRED_STEPS + k];
                    let (dx, dy) = (ob.x - eb.0, ob.y - eb.1);
                    let r = ego_radius + ob.radius;
                    if dx * dx + dy * dy > r * r {
                        continue;
                    }
                    if boxes_overlap(eb, (ob.x, ob.y, ob.yaw, ob.length, ob.width)) {
                        collides = true;
                        break;
                    }
                }
            }

            // Drivable mask (ego frame of this frame).
            if let Some((mask, spec)) = drivable {
                if mask.len() >= spec.nx.saturating_mul(spec.ny) {
                    let eb = ego_box(x, y, yaw, 0.0);
                    let (ex, ey) = world_to_ego(&st.ego, f64::from(eb.0), f64::from(eb.1));
                    if let Some((ix, iy)) = spec.cell(ex as f32, ey as f32) {
                        if mask.get(iy * spec.nx + ix).copied() == Some(0) {
                            outside += 1;
                        }
                    }
                }
            }
            d_end = d;
            ds_end = ds;
        }
        let lane_err = (0..map.lanes)
            .map(|i| (d_end - lane_centre(map, i)).abs())
            .fold(f32::INFINITY, f32::min);
        let cost = p.w_accel * acc2 + p.w_lat_accel * lat2 - p.w_progress * ds_end
            + p.w_lane * lane_err
            + p.w_drivable * outside as f32 * PRED_DT;
        Score {
            cost,
            collides,
            off_road,
            d_end,
        }
    }
}

/// The minimum-risk trajectory alone (also the planning stage's fallback): brake in lane to
/// a stop at `decel`. Follows the road at the ego's current lateral offset when the map is
/// usable, else a straight line along the ego heading. Writes `out[..PLAN_STEPS]`, clears
/// any further entries. A non-positive or non-finite `decel` means the default `max_decel`.
///
/// Per-frame: no allocation, no panic.
pub fn min_risk(ego: &EgoPose, map: &RoadMap, decel: f32, out: &mut [TrajPoint]) {
    let decel = positive_or(decel, PlannerParams::default().max_decel);
    let v0 = if ego.v.is_finite() {
        (ego.v as f32).max(0.0)
    } else {
        0.0
    };
    let prof = SpeedProfile {
        v0,
        target: 0.0,
        rate: decel,
    };
    let (x0, y0, yaw0) = (ego.x as f32, ego.y as f32, ego.yaw as f32);
    let (s0, d0) = if map_valid(map) {
        map_project(map, x0, y0)
    } else {
        (f32::NAN, f32::NAN)
    };
    let in_lane = s0.is_finite() && d0.is_finite();
    let n = out.len().min(PLAN_STEPS);
    for (k, o) in out[..n].iter_mut().enumerate() {
        let t = (k + 1) as f32 * PRED_DT;
        let (ds, v) = prof.at(t);
        let (x, y, yaw) = if in_lane {
            frenet_to_world(map, s0 + ds, d0)
        } else {
            let (sn, cs) = yaw0.sin_cos();
            (x0 + ds * cs, y0 + ds * sn, yaw0)
        };
        *o = TrajPoint {
            t,
            x,
            y,
            yaw,
            v,
            _pad: 0.0,
        };
    }
    for o in out.iter_mut().skip(n) {
        *o = TrajPoint::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::first_collision;
    use crate::prediction::tests::{arc_map, straight_map};
    use crate::types::{class, GtBox};

    const LANE_W: f32 = 3.5;

    fn ego(x: f64, y: f64, yaw: f64, v: f64) -> EgoPose {
        EgoPose {
            stamp_ns: 0,
            x,
            y,
            yaw,
            v,
            yaw_rate: 0.0,
        }
    }

    fn stopped_car(id: u32, x: f32, y: f32) -> PredictedPath {
        PredictedPath {
            track_id: id,
            class: class::CAR,
            length: 4.6,
            width: 1.9,
            valid: 1,
            _pad: 0,
            xy: [[x, y]; PRED_STEPS],
        }
    }

    fn gt_of(p: &PredictedPath, k: usize, yaw: f64) -> GtBox {
        GtBox {
            id: p.track_id,
            class: p.class,
            x: f64::from(p.xy[k][0]),
            y: f64::from(p.xy[k][1]),
            yaw,
            length: p.length,
            width: p.width,
            valid: 1,
            ..GtBox::default()
        }
    }

    fn plan(
        e: &EgoPose,
        map: &RoadMap,
        preds: &[PredictedPath],
    ) -> ([TrajPoint; PLAN_STEPS], PlanSummary) {
        let mut planner = Planner::new(PlannerParams::default());
        let mut out = [TrajPoint::default(); PLAN_STEPS];
        let mut sum = PlanSummary::default();
        planner.plan(e, map, preds, None, &mut out, &mut sum);
        (out, sum)
    }

    /// Every point keeps the (uninflated) ego box within the road edges + 0.2 m.
    fn assert_on_road(map: &RoadMap, traj: &[TrajPoint]) {
        let limit = road_half_width(map) + 0.2 + 1e-3;
        for (k, p) in traj.iter().enumerate() {
            let b = ego_box(p.x, p.y, p.yaw, 0.0);
            let (sn, cs) = b.2.sin_cos();
            for (fx, fy) in [(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)] {
                let cx = b.0 + fx * 0.5 * b.3 * cs - fy * 0.5 * b.4 * sn;
                let cy = b.1 + fx * 0.5 * b.3 * sn + fy * 0.5 * b.4 * cs;
                let (_, d) = map_project(map, cx, cy);
                assert!(d.abs() <= limit, "step {k}: corner at offset {d}");
            }
        }
    }

    #[test]
    fn boxes_overlap_cases() {
        let a = (0.0, 0.0, 0.0, 4.0, 2.0);
        assert!(boxes_overlap(a, (3.0, 0.0, 0.0, 4.0, 2.0)));
        assert!(!boxes_overlap(a, (4.1, 0.0, 0.0, 4.0, 2.0)));
        assert!(!boxes_overlap(a, (0.0, 2.1, 0.0, 4.0, 2.0)));
        assert!(boxes_overlap(a, (0.0, 1.9, 0.0, 4.0, 2.0)));
        // Rotated: the bounding boxes overlap, the boxes do not (a thin bar along x + y = 5).
        let bar = (3.0, 2.0, 3.0 * std::f32::consts::FRAC_PI_4, 4.0, 0.2);
        assert!(!boxes_overlap(a, bar));
        // Rotated square whose corner pokes into a.
        let diamond = (2.5, 0.0, std::f32::consts::FRAC_PI_4, 2.0, 2.0);
        assert!(boxes_overlap(a, diamond));
        assert!(boxes_overlap(diamond, a));
        // Perpendicular boxes crossing like a plus sign.
        assert!(boxes_overlap(
            a,
            (0.0, 0.0, std::f32::consts::FRAC_PI_2, 6.0, 0.5)
        ));
        // NaN is conservative.
        assert!(boxes_overlap(a, (f32::NAN, 100.0, 0.0, 1.0, 1.0)));
    }

    #[test]
    fn empty_road_keeps_lane_at_speed() {
        let map = straight_map(3, LANE_W, -50.0);
        let e = ego(0.0, 0.0, 0.0, 12.0);
        let (traj, sum) = plan(&e, &map, &[]);
        assert_eq!(sum.kind, 0);
        assert!(sum.candidates >= 12, "{}", sum.candidates);
        assert_eq!(sum.collision_free, sum.candidates);
        assert!(sum.lateral_offset.abs() < 1e-3, "{sum:?}");
        for p in &traj {
            assert!(p.y.abs() < 1e-3, "left the lane: {p:?}");
            assert!(p.v >= 12.0 - 1e-3 && p.v <= 16.0 + 1e-3, "{p:?}");
        }
        assert!(traj[PLAN_STEPS - 1].x >= 36.0 - 1e-2);
        assert_on_road(&map, &traj);
        // Deterministic.
        let (again, sum2) = plan(&e, &map, &[]);
        assert_eq!(traj, again);
        assert_eq!(sum, sum2);
    }

    #[test]
    fn curved_empty_road_stays_on_road() {
        let map = arc_map(2, LANE_W, 120.0);
        let (x, y, h) = frenet_to_world(&map, 30.0, lane_centre(&map, 0));
        let (traj, sum) = plan(
            &ego(f64::from(x), f64::from(y), f64::from(h), 14.0),
            &map,
            &[],
        );
        assert_eq!(sum.kind, 0);
        assert!(sum.lateral_offset.abs() < 1e-2, "{sum:?}");
        assert_on_road(&map, &traj);
    }

    #[test]
    fn stopped_car_ahead_is_avoided_in_closed_loop() {
        let map = straight_map(3, LANE_W, -50.0);
        let car = stopped_car(1, 30.0, 0.0);
        let mut planner = Planner::new(PlannerParams::default());
        let mut out = [TrajPoint::default(); PLAN_STEPS];
        let mut sum = PlanSummary::default();
        let mut e = ego(0.0, 0.0, 0.0, 12.0);
        let truth = |k: usize| vec![gt_of(&car, k.min(PRED_STEPS - 1), 0.0)];
        let mut changed_or_braked = false;
        for frame in 0..60 {
            planner.plan(&e, &map, &[car], None, &mut out, &mut sum);
            assert_eq!(
                first_collision(&out, &truth),
                None,
                "frame {frame}: {sum:?}"
            );
            assert_on_road(&map, &out);
            if sum.lateral_offset.abs() > 1.0 || out[PLAN_STEPS - 1].v < 6.0 {
                changed_or_braked = true;
            }
            let p = out[0];
            e = ego(
                f64::from(p.x),
                f64::from(p.y),
                f64::from(p.yaw),
                f64::from(p.v),
            );
        }
        assert!(changed_or_braked);
        // It went around: now beside or past the car, in another lane, still moving.
        assert!(e.x > 30.0 && e.y.abs() > 2.5 && e.v > 5.0, "{e:?}");
    }

    #[test]
    fn right_lane_blocked_changes_left_and_stays_on_road() {
        let map = straight_map(2, LANE_W, -50.0);
        let d_right = lane_centre(&map, 0);
        let car = stopped_car(1, 28.0, d_right);
        let (traj, sum) = plan(&ego(0.0, f64::from(d_right), 0.0, 12.0), &map, &[car]);
        assert_eq!(sum.kind, 0);
        assert!((sum.lateral_offset - LANE_W).abs() < 0.1, "{sum:?}");
        assert!(sum.collision_free < sum.candidates);
        assert_on_road(&map, &traj);
        let truth = |k: usize| vec![gt_of(&car, k, 0.0)];
        assert_eq!(first_collision(&traj, &truth), None);
    }

    #[test]
    fn all_lanes_blocked_falls_back_to_min_risk_and_stops_short() {
        let map = straight_map(3, LANE_W, -50.0);
        // Stopping at 8 m/s² from 10 m/s takes 6.25 m: the ego front ends at 9.95 m, 0.25 m
        // short of the cars' rear (10.2 m), inside the 0.5 m safety margin: every candidate
        // is forbidden, but the minimum-risk stop is physically possible.
        let cars: Vec<PredictedPath> = (0..3)
            .map(|i| stopped_car(i + 1, 12.5, lane_centre(&map, i)))
            .collect();
        let (traj, sum) = plan(&ego(0.0, 0.0, 0.0, 10.0), &map, &cars);
        assert_eq!(sum.kind, 1, "{sum:?}");
        assert_eq!(sum.chosen, sum.candidates);
        assert_eq!(traj[PLAN_STEPS - 1].v, 0.0);
        assert!(traj
            .windows(2)
            .all(|w| w[1].v <= w[0].v && w[1].x >= w[0].x));
        let truth = |k: usize| cars.iter().map(|c| gt_of(c, k, 0.0)).collect::<Vec<_>>();
        assert_eq!(first_collision(&traj, &truth), None);
        // The fallback is exactly min_risk.
        let mut mr = [TrajPoint::default(); PLAN_STEPS];
        min_risk(&ego(0.0, 0.0, 0.0, 10.0), &map, 8.0, &mut mr);
        assert_eq!(traj, mr);

        // Farther away: a sampled stop is chosen and does not collide either.
        let cars: Vec<PredictedPath> = (0..3)
            .map(|i| stopped_car(i + 1, 25.0, lane_centre(&map, i)))
            .collect();
        let (traj, sum) = plan(&ego(0.0, 0.0, 0.0, 10.0), &map, &cars);
        assert_eq!(sum.kind, 0);
        assert_eq!(sum.target_speed, 0.0);
        let truth = |k: usize| cars.iter().map(|c| gt_of(c, k, 0.0)).collect::<Vec<_>>();
        assert_eq!(first_collision(&traj, &truth), None);

        // Too close to stop: still the fallback, no panic.
        let cars: Vec<PredictedPath> = (0..3)
            .map(|i| stopped_car(i + 1, 6.0, lane_centre(&map, i)))
            .collect();
        let (_, sum) = plan(&ego(0.0, 0.0, 0.0, 10.0), &map, &cars);
        assert_eq!(sum.kind, 1);
    }

    #[test]
    fn oncoming_crossing_actor_is_respected() {
        // A pedestrian crossing the ego lane from the right at 1.5 m/s, 20 m ahead.
        let map = straight_map(2, LANE_W, -50.0);
        let mut ped = stopped_car(9, 0.0, 0.0);
        ped.class = class::PEDESTRIAN;
        ped.length = 0.6;
        ped.width = 0.6;
        for k in 0..PRED_STEPS {
            let t = (k + 1) as f32 * PRED_DT;
            ped.xy[k] = [20.0, -4.0 + 1.5 * t];
        }
        let d = lane_centre(&map, 0);
        let (traj, sum) = plan(&ego(0.0, f64::from(d), 0.0, 10.0), &map, &[ped]);
        let truth = |k: usize| vec![gt_of(&ped, k, std::f64::consts::FRAC_PI_2)];
        assert_eq!(first_collision(&traj, &truth), None, "{sum:?}");
    }

    #[test]
    fn drivable_mask_steers_the_choice() {
        // Mark the ego's own lane ahead as not drivable: the planner leaves it.
        let map = straight_map(2, LANE_W, -50.0);
        let spec = BevSpec::DEFAULT;
        let mut mask = vec![1u8; spec.nx * spec.ny];
        for iy in 0..spec.ny {
            for ix in 0..spec.nx {
                let (x, y) = spec.centre(ix, iy);
                if x > 10.0 && (-1.75..1.75).contains(&y) {
                    mask[iy * spec.nx + ix] = 0;
                }
            }
        }
        let d = lane_centre(&map, 0);
        let e = ego(0.0, f64::from(d), 0.0, 10.0);
        let mut planner = Planner::new(PlannerParams::default());
        let mut out = [TrajPoint::default(); PLAN_STEPS + 2];
        let mut sum = PlanSummary::default();
        planner.plan(&e, &map, &[], Some((&mask, &spec)), &mut out, &mut sum);
        assert_eq!(sum.kind, 0);
        assert!(sum.lateral_offset > 3.0, "{sum:?}");
        assert_eq!(out[PLAN_STEPS], TrajPoint::default());
        // Without the mask it keeps its lane.
        planner.plan(&e, &map, &[], None, &mut out, &mut sum);
        assert!(sum.lateral_offset.abs() < 1e-3);
        // A mask of the wrong size is ignored, not a panic.
        planner.plan(
            &e,
            &map,
            &[],
            Some((&mask[..10], &spec)),
            &mut out,
            &mut sum,
        );
        assert!(sum.lateral_offset.abs() < 1e-3);
    }

    #[test]
    fn garbage_inputs_give_the_fallback_without_panicking() {
        let map = straight_map(2, LANE_W, -50.0);
        let mut planner = Planner::new(PlannerParams::default());
        let mut out = [TrajPoint::default(); PLAN_STEPS];
        let mut sum = PlanSummary::default();
        planner.plan(
            &ego(f64::NAN, 0.0, 0.0, 5.0),
            &map,
            &[],
            None,
            &mut out,
            &mut sum,
        );
        assert_eq!(sum.kind, 1);
        planner.plan(
            &ego(0.0, 0.0, 0.3, 5.0),
            &RoadMap::default(),
            &[],
            None,
            &mut out,
            &mut sum,
        );
        assert_eq!(sum.kind, 1);
        // Straight braking along the heading.
        assert!((out[0].y / out[0].x - 0.3f32.tan()).abs() < 1e-3);
        let mut bad = stopped_car(1, f32::NAN, 0.0);
        bad.length = f32::INFINITY;
        planner.plan(
            &ego(0.0, 0.0, 0.0, f64::NAN),
            &map,
            &[bad; 80],
            None,
            &mut out[..3],
            &mut sum,
        );
        assert_eq!(sum.kind, 0);
        assert!(out.iter().all(|p| p.x.is_finite()));
        // A full table of obstacles far away.
        let far: Vec<PredictedPath> = (0..MAX_TRACKS as u32)
            .map(|i| stopped_car(i, 500.0 + i as f32 * 10.0, 0.0))
            .collect();
        planner.plan(
            &ego(0.0, 0.0, 0.0, 10.0),
            &map,
            &far,
            None,
            &mut out,
            &mut sum,
        );
        assert_eq!((sum.kind, sum.collision_free), (0, sum.candidates));
    }
}
