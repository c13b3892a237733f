//! Class-wise greedy non-maximum suppression of decoded boxes, with rotated-box BEV IoU
//! ([`crate::geometry::bev_iou`]) and, optionally, along camera rays far away
//! ([`RaySuppression`]).
//!
//! Contract: [`nms`] works in place on a caller's slice, never allocates, locks or panics,
//! and is deterministic: a stable insertion sort by score (NaN scores last), then a greedy
//! pass in that order.
//!
//! Cost: O(n²) IoU tests for `n` boxes (`n <= MAX_DETECTIONS`).

use redline_runtime::det_math as dm;

use crate::geometry::bev_iou;
use crate::types::Detection;

/// Suppression along viewing rays, far from the ego: a camera places a far object on the
/// right bearing but at an uncertain range, and a network can then put two peaks of one
/// object on its ray a few metres apart. A box at least `from_m` from the ego origin is
/// suppressed when an already kept box of its class, also that far, lies within
/// `half_angle_deg` of its bearing (seen from the ego origin). `half_angle_deg = 0` (the
/// default) turns it off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RaySuppression {
    /// Range from the ego origin where it starts, m.
    pub from_m: f32,
    /// Largest bearing difference suppressed, degrees.
    pub half_angle_deg: f32,
}

impl RaySuppression {
    /// Off.
    pub const OFF: RaySuppression = RaySuppression {
        from_m: 0.0,
        half_angle_deg: 0.0,
    };

    /// True if `a` and `b` are both beyond `from_m` and within the bearing window.
    fn covers(&self, a: &Detection, b: &Detection) -> bool {
        if self.half_angle_deg <= 0.0 {
            return false;
        }
        let (ra, rb) = (dm::hypot(a.x, a.y), dm::hypot(b.x, b.y));
        if !(ra >= self.from_m && rb >= self.from_m) {
            return false;
        }
        // Bearing difference without wrap-around trouble: the angle between the two
        // direction vectors, atan2(|cross|, dot).
        let cross = a.x * b.y - a.y * b.x;
        let dot = a.x * b.x + a.y * b.y;
        let diff = dm::atan2(cross.abs(), dot);
        diff <= self.half_angle_deg.to_radians()
    }
}

impl Default for RaySuppression {
    fn default() -> Self {
        Self::OFF
    }
}

/// Class-wise greedy non-maximum suppression, in place, on `dets[..n]` (`n` is clamped to
/// `dets.len()`). Entries with `valid == 0` are dropped; the rest are ordered by score,
/// best first (stable: equal scores keep their input order; NaN scores sort last); a box is
/// suppressed when its rotated-box IoU ([`bev_iou`]) with an already kept box of the same
/// class is strictly greater than `iou_threshold` (so `1.0` keeps everything), or when
/// `ray` covers the two (see [`RaySuppression`]). The kept boxes end up in `dets[..kept]`,
/// `dets[kept..n]` are cleared. Returns `kept`. No allocation; O(n²).
pub(super) fn nms(
    dets: &mut [Detection],
    n: usize,
    iou_threshold: f32,
    ray: &RaySuppression,
) -> usize {
    let n = n.min(dets.len());
    // Compact valid entries, preserving order.
    let mut m = 0;
    for i in 0..n {
        if dets[i].valid != 0 {
            dets[m] = dets[i];
            m += 1;
        }
    }
    let key = |d: &Detection| {
        if d.score.is_nan() {
            f32::NEG_INFINITY
        } else {
            d.score
        }
    };
    // Stable insertion sort, best score first.
    for i in 1..m {
        let d = dets[i];
        let mut j = i;
        while j > 0 && key(&dets[j - 1]) < key(&d) {
            dets[j] = dets[j - 1];
            j -= 1;
        }
        dets[j] = d;
    }
    let mut kept = 0;
    for i in 0..m {
        let d = dets[i];
        let suppressed = dets[..kept]
            .iter()
            .any(|k| k.class == d.class && (bev_iou(k, &d) > iou_threshold || ray.covers(k, &d)));
        if !suppressed {
            dets[kept] = d;
            kept += 1;
        }
    }
    dets[kept..n].fill(Detection::default());
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perception::test_support::det;

    #[test]
    fn nms_is_stable_drops_invalid_and_clears_the_tail() {
        // nms() on its own: stable order for equal scores, invalid entries dropped,
        // the tail cleared.
        let a = det(0.0, 0.0, 0.0, 4.0, 2.0, 0.5, 0);
        let b = det(20.0, 0.0, 0.0, 4.0, 2.0, 0.5, 0);
        let c = det(0.3, 0.1, 0.1, 4.0, 2.0, 0.6, 0);
        let mut v = [a, b, Detection::default(), c];
        let kept = nms(&mut v, 4, 0.5, &RaySuppression::OFF);
        assert_eq!(kept, 2);
        assert_eq!(v[0], c);
        assert_eq!(v[1], b);
        assert!(v[2..].iter().all(|d| d.valid == 0));
        assert_eq!(nms(&mut v, 100, 0.5, &RaySuppression::OFF), 2); // n clamped, no panic
    }

    #[test]
    fn nms_suppresses_only_within_a_class() {
        let a = det(0.0, 0.0, 0.0, 4.0, 2.0, 0.9, 0);
        let b = det(0.2, 0.0, 0.0, 4.0, 2.0, 0.8, 0);
        let c = det(0.2, 0.0, 0.0, 4.0, 2.0, 0.7, 1);
        let mut v = [a, b, c];
        assert_eq!(nms(&mut v, 3, 0.5, &RaySuppression::OFF), 2);
        assert_eq!(v[0], a);
        assert_eq!(v[1], c);
        assert_eq!(v[2], Detection::default());
        // Threshold 1 keeps everything.
        let mut v = [a, b, c];
        assert_eq!(nms(&mut v, 3, 1.0, &RaySuppression::OFF), 3);
    }

    #[test]
    fn ray_suppression_drops_a_weaker_peak_on_the_same_far_ray_only() {
        let ray = RaySuppression {
            from_m: 40.0,
            half_angle_deg: 2.0,
        };
        // One car 50 m ahead and a weaker second peak 6 m behind it on its ray (0.5 degree
        // off): IoU 0, so plain NMS keeps both; the ray drops the weaker.
        let lead = det(50.0, 0.0, 0.0, 4.5, 1.9, 0.6, 0);
        let ghost = det(56.0, 0.5, 0.0, 4.5, 1.9, 0.4, 0);
        let mut v = [ghost, lead];
        assert_eq!(nms(&mut v, 2, 0.3, &RaySuppression::OFF), 2);
        let mut v = [ghost, lead];
        assert_eq!(nms(&mut v, 2, 0.3, &ray), 1);
        assert_eq!(v[0], lead);
        // Another class on that ray, a car 3 degrees off (the next lane at 55 m), and the
        // same pair nearer than `from_m` are kept.
        let ped = det(56.0, 0.5, 0.0, 0.6, 0.6, 0.4, 1);
        let beside = det(55.0, 2.9, 0.0, 4.5, 1.9, 0.4, 0);
        let near_lead = det(30.0, 0.0, 0.0, 4.5, 1.9, 0.6, 0);
        let near_ghost = det(36.0, 0.3, 0.0, 4.5, 1.9, 0.4, 0);
        let mut v = [lead, ped, beside];
        assert_eq!(nms(&mut v, 3, 0.3, &ray), 3);
        let mut v = [near_lead, near_ghost];
        assert_eq!(nms(&mut v, 2, 0.3, &ray), 2);
        // Behind the ego the bearing is measured the same way (no wrap-around at 180
        // degrees): -50 m, +0.5 m and -56 m, -0.5 m are 1 degree apart.
        let back = det(-50.0, 0.5, 0.0, 4.5, 1.9, 0.6, 0);
        let back_ghost = det(-56.0, -0.5, 0.0, 4.5, 1.9, 0.4, 0);
        let mut v = [back, back_ghost];
        assert_eq!(nms(&mut v, 2, 0.3, &ray), 1);
        // A zero half-angle is off.
        let off = RaySuppression {
            from_m: 40.0,
            half_angle_deg: 0.0,
        };
        let same_bearing = det(60.0, 0.0, 0.0, 4.5, 1.9, 0.4, 0);
        let mut v = [lead, same_bearing];
        assert_eq!(nms(&mut v, 2, 0.3, &off), 2);
        assert_eq!(RaySuppression::default(), RaySuppression::OFF);
    }
}
