//! The minimum-risk trajectory: brake in lane to a stop. It is the planner's answer when no
//! candidate is allowed and the planning stage's fallback when the planner fails or the
//! mode ladder asks for a safe stop.
//!
//! Contract: writes `PLAN_STEPS` points on any input — in lane along the road at the ego's
//! current lateral offset when the map is usable, else straight along the ego heading —
//! and never allocates, locks or panics. Cost: `PLAN_STEPS` map poses.

use super::candidates::SpeedProfile;
use super::{positive_or, PlannerParams};
use crate::prediction::{frenet_to_world, map_project, map_valid};
use crate::types::{EgoPose, RoadMap, TrajPoint, PLAN_STEPS, PRED_DT};
use redline_runtime::det_math as dm;

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
            let (sn, cs) = dm::sin_cos(yaw0);
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
    use super::super::tests::{ego, LANE_W};
    use super::*;
    use crate::prediction::tests::straight_map;

    #[test]
    fn brakes_in_lane_to_a_stop() {
        let map = straight_map(2, LANE_W, -50.0);
        let mut out = [TrajPoint::default(); PLAN_STEPS + 3];
        out[PLAN_STEPS + 1].x = 5.0;
        min_risk(&ego(0.0, 1.75, 0.1, 8.0), &map, 4.0, &mut out);
        // 8 m/s at 4 m/s² stops after 2 s, 8 m; it keeps the lateral offset.
        let last = out[PLAN_STEPS - 1];
        assert_eq!(last.v, 0.0);
        assert!(
            (last.x - 8.0).abs() < 1e-3 && (last.y - 1.75).abs() < 1e-3,
            "{last:?}"
        );
        assert!(out[..PLAN_STEPS].windows(2).all(|w| w[1].v <= w[0].v));
        assert!(out[PLAN_STEPS..].iter().all(|p| *p == TrajPoint::default()));
    }

    #[test]
    fn off_the_map_it_brakes_straight_and_bad_decel_means_the_default() {
        let mut a = [TrajPoint::default(); PLAN_STEPS];
        let mut b = [TrajPoint::default(); PLAN_STEPS];
        let e = ego(3.0, 4.0, 0.3, 10.0);
        min_risk(&e, &RoadMap::default(), f32::NAN, &mut a);
        min_risk(
            &e,
            &RoadMap::default(),
            PlannerParams::default().max_decel,
            &mut b,
        );
        assert_eq!(a, b);
        assert!(((a[0].y - 4.0) / (a[0].x - 3.0) - dm::tan(0.3f32)).abs() < 1e-3);
        assert!(a.iter().all(|p| p.yaw == 0.3));
        // A short buffer and NaN speed: no panic.
        min_risk(
            &ego(0.0, 0.0, 0.0, f64::NAN),
            &RoadMap::default(),
            8.0,
            &mut a[..2],
        );
        assert_eq!(a[1].v, 0.0);
    }
}
