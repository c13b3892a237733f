//! Agent behaviour and the fixed-step traffic simulation: IDM car following in lateral
//! corridors, gap-checked lane changes, cyclists, roadside walkers and crossing pedestrians.
//!
//! Promises: collision-free for the validated config range (see the parent module's contract);
//! deterministic: agents are stepped in index order, decisions depend only on the state and
//! the step number, arithmetic is f64 with [`redline_pipeline::camera::det`] trigonometry. Cost: each
//! step searches leaders over all agent pairs (`actors²`); no allocation after `Sim` is built.
//! Must never change the order of floating-point operations or of agents: ground truth and
//! images are checked bit for bit.

use super::road::Road;
use super::ScenarioStats;
use crate::types::ActorClass;
use redline_pipeline::camera::det;
use std::f64::consts::PI;

/// What drives an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(super) struct Idm {
    /// Maximum acceleration, m/s².
    pub(super) a: f64,
    /// Comfortable deceleration, m/s².
    pub(super) b: f64,
    /// Time headway, s.
    pub(super) t: f64,
    /// Standstill gap, m.
    pub(super) s0: f64,
}

pub(super) const EGO_IDM: Idm = Idm {
    a: 1.4,
    b: 2.0,
    t: 1.5,
    s0: 3.0,
};
pub(super) const CYCLIST_IDM: Idm = Idm {
    a: 1.0,
    b: 2.0,
    t: 1.0,
    s0: 1.5,
};
pub(super) const WALKER_IDM: Idm = Idm {
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
pub(super) struct LaneChange {
    pub(super) from_d: f64,
    pub(super) to_d: f64,
    pub(super) to_lane: u32,
    pub(super) tau: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cross {
    /// On a kerb, until `cross_time` and a clear road.
    Waiting,
    /// Walking to `cross_to`.
    Crossing,
}

#[derive(Clone, Debug)]
pub(super) struct Agent {
    pub(super) id: u32,
    pub(super) class: ActorClass,
    pub(super) kind: Kind,
    pub(super) length: f64,
    pub(super) width: f64,
    pub(super) height: f64,
    /// Arc length of the box centre, m.
    pub(super) s: f64,
    /// Lateral offset of the box centre, m.
    pub(super) d: f64,
    /// Lateral speed, m/s (lane changes and crossings).
    pub(super) d_dot: f64,
    /// Speed along the road, m/s (>= 0).
    pub(super) v: f64,
    /// +1 along the road, -1 against (roadside pedestrians only).
    pub(super) dir: f64,
    pub(super) v0: f64,
    pub(super) idm: Idm,
    pub(super) lane: u32,
    pub(super) lc: Option<LaneChange>,
    pub(super) lc_duration: f64,
    pub(super) cooldown_until: f64,
    /// A scheduled lane change: earliest time and direction (+1 left, -1 right).
    pub(super) desire: Option<(f64, i32)>,
    pub(super) cross: Cross,
    pub(super) cross_time: f64,
    /// Wait on the far kerb before crossing back, s.
    pub(super) cross_pause: f64,
    pub(super) cross_speed: f64,
    pub(super) cross_to: f64,
}

impl Agent {
    /// Half extent along the road, m.
    pub(super) fn half_len(&self) -> f64 {
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
    pub(super) fn interval(&self, half_road: f64) -> (f64, f64) {
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

pub(super) fn overlaps(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.1 + CORRIDOR_MARGIN && b.0 < a.1 + CORRIDOR_MARGIN
}

pub(super) struct Sim<'r> {
    pub(super) road: &'r Road,
    pub(super) agents: Vec<Agent>,
    pub(super) acc: Vec<f64>,
    pub(super) half: f64,
    pub(super) dt: f64,
    pub(super) stats: ScenarioStats,
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

    pub(super) fn step(&mut self, step: usize) {
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
    pub(super) fn world_pose(&self, a: &Agent) -> (f64, f64, f64) {
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
