//! Scoring of planning candidates: the table of predicted obstacle boxes (built once per
//! frame) and the cost of one candidate — collision with a predicted box at the same step
//! (inflated ego box, bounding-circle pre-check, then [`boxes_overlap`]), leaving the road
//! edges, comfort, progress, lane keeping and time outside the BEV drivable mask.
//!
//! Contract: no allocation (the obstacle table is allocated by [`Planner::new`]), no lock,
//! no panic on any input; one f32 code path in a fixed order, so costs are bit-identical.
//!
//! Cost: `PLAN_STEPS` × obstacles bounding-circle tests per candidate, a box test only
//! where circles meet.

use super::candidates::{Lateral, SpeedProfile};
use super::{Planner, Start};
use crate::geometry::{boxes_overlap, ego_box, ego_box_reaching, world_to_ego, wrap_angle_f32};
use crate::prediction::{
    frenet_to_world, lane_centre, map_pose, map_project, map_valid, road_half_width,
};
use crate::types::{
    BevSpec, PredictedPath, RoadMap, TrajPoint, EGO_LENGTH, EGO_REAR_TO_CENTRE, EGO_WIDTH,
    MAX_TRACKS, PLAN_STEPS, PRED_DT, PRED_STEPS,
};
use redline_runtime::det_math as dm;

/// One predicted box at one step: centre, heading, length, width, bounding radius.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ObsBox {
    x: f32,
    y: f32,
    yaw: f32,
    length: f32,
    width: f32,
    radius: f32,
}
/// Scores of one candidate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Score {
    pub(super) cost: f32,
    pub(super) collides: bool,
    pub(super) off_road: bool,
    pub(super) d_end: f32,
}
impl Planner {
    /// Precompute every predicted box at every step.
    pub(super) fn load_obstacles(&mut self, map: &RoadMap, predictions: &[PredictedPath]) {
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
            let overall = dm::atan2(last[1] - first[1], last[0] - first[0]);
            let mut still_yaw = None;
            let mut heading_known = true;
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
                    heading_known = false;
                }
            }
            let rate = |v: f32| if v.is_finite() && v > 0.0 { v } else { 0.0 };
            let [along, across] = self
                .params
                .prediction_spread
                .get(pred.class as usize)
                .map_or([0.0; 2], |s| [rate(s[0]), rate(s[1])]);
            // A box of unknown heading (the square) grows alike in every direction.
            let (along, across) = if heading_known {
                (along, across)
            } else {
                (along.max(across), along.max(across))
            };
            let base = self.n_obs * PRED_STEPS;
            for k in 0..PRED_STEPS {
                let t = (k + 1) as f32 * PRED_DT;
                let (l, w) = (l + 2.0 * along * t, w + 2.0 * across * t);
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
                            dm::atan2(dy, dx)
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
    pub(super) fn candidate(
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
        let rel0 = dm::atan(st.slope0);
        let (sr0, cr0) = dm::sin_cos(rel0);
        let now_out = (st.d0 + EGO_REAR_TO_CENTRE * sr0).abs() + hl * sr0.abs() + hw * cr0.abs();
        let edge_limit = (half_w + tol).max(now_out) + 1e-4;
        let gap = if p.time_gap.is_finite() {
            p.time_gap.max(0.0)
        } else {
            0.0
        };

        let mut collides = false;
        let mut off_road = false;
        let mut acc2 = 0.0f32;
        let mut lat2 = 0.0f32;
        let mut outside = 0u32;
        let (mut prev_v, mut prev_yaw) = (st.v0, wrap_angle_f32(st.h0 + rel0));
        let mut d_end = st.d0;
        let mut ds_end = 0.0;
        for k in 0..PLAN_STEPS {
            let t = (k + 1) as f32 * PRED_DT;
            let (ds, v) = prof.at(t);
            let (d, slope) = lat.at(st.s0 + ds);
            let rel = dm::atan(slope);
            let (x, y, h) = frenet_to_world(map, st.s0 + ds, d);
            let yaw = wrap_angle_f32(h + rel);
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
            let a_lat = v * wrap_angle_f32(yaw - prev_yaw) / PRED_DT;
            acc2 += a * a * PRED_DT;
            lat2 += a_lat * a_lat * PRED_DT;
            prev_v = v;
            prev_yaw = yaw;

            // Road edges (box in the Frenet frame, relative heading `rel`).
            let (sr, cr) = dm::sin_cos(rel);
            let dc = d + EGO_REAR_TO_CENTRE * sr;
            if dc.abs() + hl * sr.abs() + hw * cr.abs() > edge_limit {
                off_road = true;
            }

            // Collision with predictions at the same step.
            if !collides && k < PRED_STEPS {
                // The inflated ego box, reaching `v · time_gap` further forward.
                let eb = ego_box_reaching(x, y, yaw, margin, v.max(0.0) * gap);
                let ego_radius = 0.5 * (eb.3 * eb.3 + eb.4 * eb.4).sqrt();
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

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::PlannerParams;
    use super::*;
    use crate::eval::first_collision;
    use crate::prediction::tests::straight_map;
    use crate::types::{class, PlanSummary};

    #[test]
    fn obstacle_table_skips_bad_paths_and_orients_still_boxes() {
        let map = straight_map(2, LANE_W, -50.0);
        let exact = PlannerParams {
            prediction_spread: [[0.0; 2]; class::COUNT],
            ..PlannerParams::default()
        };
        let mut planner = Planner::new(exact);
        let mut moving = stopped_car(2, 0.0, 0.0);
        for (k, xy) in moving.xy.iter_mut().enumerate() {
            *xy = [k as f32, 0.5 * k as f32];
        }
        let mut nan = stopped_car(3, 1.0, 1.0);
        nan.xy[4][1] = f32::NAN;
        let mut invalid = stopped_car(4, 1.0, 1.0);
        invalid.valid = 0;
        let far_off_road = stopped_car(5, 10.0, 40.0);
        let preds = [
            stopped_car(1, 10.0, 1.75),
            moving,
            nan,
            invalid,
            far_off_road,
        ];
        planner.load_obstacles(&map, &preds);
        assert_eq!(planner.n_obs, 3);
        let still = planner.obs[0];
        assert_eq!((still.yaw, still.length, still.width), (0.0, 4.6, 1.9));
        let m = planner.obs[PRED_STEPS];
        assert!((m.yaw - dm::atan2(0.5f32, 1.0)).abs() < 1e-6, "{m:?}");
        // Off the road and still: heading unknown, a square of the longer side.
        let sq = planner.obs[2 * PRED_STEPS];
        assert_eq!((sq.length, sq.width), (4.6, 4.6));
        assert!((sq.radius - 0.5 * (2.0f32 * 4.6 * 4.6).sqrt()).abs() < 1e-6);

        // With the default spread (cars 0.5 m/s along, 0.2 across) the boxes grow with
        // look-ahead: at 3 s by 3 m along and 1.2 m across; the square alike in both.
        let mut planner = Planner::new(PlannerParams::default());
        planner.load_obstacles(&map, &preds);
        let last = PRED_STEPS - 1;
        let still = planner.obs[last];
        assert!((still.length - 7.6).abs() < 1e-4 && (still.width - 3.1).abs() < 1e-4);
        let sq = planner.obs[2 * PRED_STEPS + last];
        assert!(
            (sq.length - 7.6).abs() < 1e-4 && (sq.width - 7.6).abs() < 1e-4,
            "{sq:?}"
        );
        assert!(
            (planner.obs[0].length - 4.7).abs() < 1e-4,
            "grows from the first step"
        );
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
}
