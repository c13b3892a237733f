//! Plane geometry shared by the driving stages: the world ↔ ego frame transforms, angle
//! wrapping, and oriented boxes (the ego vehicle's box, the box-overlap test of planning and
//! evaluation, the rotated-box BEV IoU of detection NMS).
//!
//! Contract: every function is pure, allocation free, lock free and panic free on any input
//! (NaN and infinities included: each documents what it returns for them), and runs one
//! code path, so outputs are bit-identical on every machine. Frames: **world** (x east,
//! y north) and **ego** (x forward, y left, origin at the rear axle, heading `EgoPose::yaw`).
//!
//! Two angle wrappers live here on purpose, one per float type, because the stages that use
//! them were tuned (and their outputs hashed) with these exact operations:
//! [`wrap_angle`] (f64, tracking: non-finite → 0, result in (−π, π]) and [`wrap_angle_f32`]
//! (f32, prediction and planning: NaN stays NaN, result in [−π, π)). They must not be merged.
//! The camera model's `camera::det::wrap_angle` (deterministic trig, non-finite passes
//! through) is a third, separate rule that belongs to that module.
//!
//! Cost: O(1) each; [`bev_iou`] clips two quadrilaterals (at most 4 × 8 edge tests).

use crate::types::{Detection, EgoPose, EGO_LENGTH, EGO_REAR_TO_CENTRE, EGO_WIDTH};
use redline_runtime::det_math as dm;

// ---------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------

/// Ego-frame point → world frame (f64).
pub fn ego_to_world(ego: &EgoPose, x: f64, y: f64) -> (f64, f64) {
    let (s, c) = dm::sin_cos(ego.yaw);
    (ego.x + c * x - s * y, ego.y + s * x + c * y)
}

/// World point → ego frame (f64); the inverse of [`ego_to_world`].
pub fn world_to_ego(ego: &EgoPose, x: f64, y: f64) -> (f64, f64) {
    let (s, c) = dm::sin_cos(ego.yaw);
    let (dx, dy) = (x - ego.x, y - ego.y);
    (c * dx + s * dy, -s * dx + c * dy)
}

// ---------------------------------------------------------------------------------------
// Angles
// ---------------------------------------------------------------------------------------

/// Wraps an angle into (−π, π] (f64). A non-finite angle gives 0.
pub fn wrap_angle(a: f64) -> f64 {
    if !a.is_finite() {
        return 0.0;
    }
    let two_pi = std::f64::consts::TAU;
    let r = a.rem_euclid(two_pi);
    if r > std::f64::consts::PI {
        r - two_pi
    } else {
        r
    }
}

/// Wraps an angle into [−π, π) (f32) as `(a + π) mod 2π − π`. NaN gives NaN. Not the same
/// operations as [`wrap_angle`]: see the module docs.
pub fn wrap_angle_f32(a: f32) -> f32 {
    let r = (a + std::f32::consts::PI).rem_euclid(std::f32::consts::TAU);
    r - std::f32::consts::PI
}

// ---------------------------------------------------------------------------------------
// Oriented boxes
// ---------------------------------------------------------------------------------------

/// An oriented box `(cx, cy, yaw, length, width)`: centre, heading (rad, along the length),
/// full length and width, m.
pub type OrientedBox = (f32, f32, f32, f32, f32);

/// The ego box for a trajectory point (rear-axle position and heading), inflated by
/// `margin` on every side.
pub fn ego_box(x: f32, y: f32, yaw: f32, margin: f32) -> OrientedBox {
    ego_box_reaching(x, y, yaw, margin, 0.0)
}

/// [`ego_box`], its front reaching `ahead` metres further forward (the planner's following
/// gap): one `sin_cos` for both.
pub fn ego_box_reaching(x: f32, y: f32, yaw: f32, margin: f32, ahead: f32) -> OrientedBox {
    let (s, c) = dm::sin_cos(yaw);
    (
        x + EGO_REAR_TO_CENTRE * c + 0.5 * ahead * c,
        y + EGO_REAR_TO_CENTRE * s + 0.5 * ahead * s,
        yaw,
        EGO_LENGTH + 2.0 * margin + ahead,
        EGO_WIDTH + 2.0 * margin,
    )
}

/// Oriented-box overlap test, separating axis theorem (f32). Touching boxes overlap. A box
/// with a NaN field overlaps everything (conservative).
pub fn boxes_overlap(a: OrientedBox, b: OrientedBox) -> bool {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (sa, ca) = dm::sin_cos(a.2);
    let (sb, cb) = dm::sin_cos(b.2);
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

/// Corners of a box, counter-clockwise.
fn corners(d: &Detection) -> [[f64; 2]; 4] {
    let (s, c) = dm::sin_cos(d.yaw as f64);
    let (hl, hw) = (d.length as f64 / 2.0, d.width as f64 / 2.0);
    let (x, y) = (d.x as f64, d.y as f64);
    let (ux, uy) = (c * hl, s * hl);
    let (vx, vy) = (-s * hw, c * hw);
    [
        [x + ux - vx, y + uy - vy],
        [x + ux + vx, y + uy + vy],
        [x - ux + vx, y - uy + vy],
        [x - ux - vx, y - uy - vy],
    ]
}

#[inline]
fn cross(o: [f64; 2], a: [f64; 2], b: [f64; 2]) -> f64 {
    (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
}

/// Bird's-eye-view IoU of two boxes as **rotated rectangles** (exact polygon intersection by
/// Sutherland–Hodgman clipping, in f64). Boxes with non-finite fields or non-positive sizes
/// give 0. Identical boxes give 1 (up to rounding), disjoint ones exactly 0.
pub fn bev_iou(a: &Detection, b: &Detection) -> f32 {
    let ok = |d: &Detection| {
        d.x.is_finite()
            && d.y.is_finite()
            && d.yaw.is_finite()
            && d.length.is_finite()
            && d.width.is_finite()
            && d.length > 0.0
            && d.width > 0.0
    };
    if !ok(a) || !ok(b) {
        return 0.0;
    }
    // Quick reject by circumscribed circles.
    let (ra, rb) = (
        dm::hypot(a.length as f64, a.width as f64) / 2.0,
        dm::hypot(b.length as f64, b.width as f64) / 2.0,
    );
    let (dx, dy) = (a.x as f64 - b.x as f64, a.y as f64 - b.y as f64);
    if dm::hypot(dx, dy) >= ra + rb {
        return 0.0;
    }
    let pa = corners(a);
    let pb = corners(b);
    let mut poly = [[0.0f64; 2]; 16];
    let mut len = 4;
    poly[..4].copy_from_slice(&pa);
    let mut next = [[0.0f64; 2]; 16];
    for e in 0..4 {
        let (ea, eb) = (pb[e], pb[(e + 1) % 4]);
        let mut nlen = 0;
        for i in 0..len {
            let s = poly[i];
            let t = poly[(i + 1) % len];
            let ds = cross(ea, eb, s);
            let dt = cross(ea, eb, t);
            let s_in = ds >= 0.0;
            let t_in = dt >= 0.0;
            if s_in && nlen < next.len() {
                next[nlen] = s;
                nlen += 1;
            }
            if s_in != t_in && nlen < next.len() {
                let f = ds / (ds - dt);
                next[nlen] = [s[0] + f * (t[0] - s[0]), s[1] + f * (t[1] - s[1])];
                nlen += 1;
            }
        }
        poly = next;
        len = nlen;
        if len < 3 {
            return 0.0;
        }
    }
    let mut area2 = 0.0;
    for i in 0..len {
        let (p, q) = (poly[i], poly[(i + 1) % len]);
        area2 += p[0] * q[1] - q[0] * p[1];
    }
    let inter = area2.abs() / 2.0;
    let union = a.length as f64 * a.width as f64 + b.length as f64 * b.width as f64 - inter;
    if union.is_nan() || union <= 0.0 {
        return 0.0;
    }
    (inter / union).clamp(0.0, 1.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perception::test_support::det;

    fn pose(x: f64, y: f64, yaw: f64) -> EgoPose {
        EgoPose {
            x,
            y,
            yaw,
            ..EgoPose::default()
        }
    }

    #[test]
    fn frame_transforms_round_trip() {
        let ego = pose(10.0, -5.0, 0.7);
        let (wx, wy) = ego_to_world(&ego, 3.0, 1.0);
        let (x, y) = world_to_ego(&ego, wx, wy);
        assert!((x - 3.0).abs() < 1e-12 && (y - 1.0).abs() < 1e-12);
        let ego = pose(1.0, 2.0, std::f64::consts::FRAC_PI_2);
        let (wx, wy) = ego_to_world(&ego, 1.0, 0.0);
        assert!((wx - 1.0).abs() < 1e-12 && (wy - 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_two_angle_wrappers_keep_their_own_rules() {
        use std::f64::consts::PI;
        assert_eq!(wrap_angle(0.5), 0.5);
        assert!((wrap_angle(3.0 * PI / 2.0) + PI / 2.0).abs() < 1e-12);
        assert!((wrap_angle(-7.0) - (-7.0 + 2.0 * PI)).abs() < 1e-12);
        // (−π, π]: π stays π, −π becomes π; non-finite is 0.
        assert_eq!(wrap_angle(PI), PI);
        assert_eq!(wrap_angle(-PI), PI);
        assert_eq!(wrap_angle(f64::NAN), 0.0);
        assert_eq!(wrap_angle(f64::INFINITY), 0.0);

        use std::f32::consts::PI as PI32;
        assert_eq!(wrap_angle_f32(0.5), 0.5);
        assert!((wrap_angle_f32(3.0 * PI32 / 2.0) + PI32 / 2.0).abs() < 1e-6);
        // [−π, π): π becomes −π; NaN stays NaN.
        assert_eq!(wrap_angle_f32(PI32), -PI32);
        assert!(wrap_angle_f32(f32::NAN).is_nan());
    }

    #[test]
    fn ego_box_is_centred_ahead_of_the_rear_axle() {
        let (cx, cy, yaw, l, w) = ego_box(1.0, 2.0, 0.0, 0.5);
        assert_eq!((cx, cy, yaw), (1.0 + EGO_REAR_TO_CENTRE, 2.0, 0.0));
        assert_eq!((l, w), (EGO_LENGTH + 1.0, EGO_WIDTH + 1.0));
        let (cx, cy, ..) = ego_box(0.0, 0.0, std::f32::consts::FRAC_PI_2, 0.0);
        assert!(cx.abs() < 1e-6 && (cy - EGO_REAR_TO_CENTRE).abs() < 1e-6);
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
    fn bev_iou_identical_disjoint_and_rotated() {
        let a = det(3.0, -2.0, 0.7, 4.6, 1.9, 0.9, 0);
        assert!((bev_iou(&a, &a) - 1.0).abs() < 1e-5);
        let far = det(30.0, 10.0, 0.7, 4.6, 1.9, 0.9, 0);
        assert_eq!(bev_iou(&a, &far), 0.0);
        // Touching-only neighbours along x.
        let b = det(0.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0);
        let c = det(2.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0);
        assert!(bev_iou(&b, &c).abs() < 1e-6);
        // Half overlap: 2 / (4 + 4 - 2) = 1/3.
        let d = det(1.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0);
        assert!((bev_iou(&b, &d) - 1.0 / 3.0).abs() < 1e-5);
        // A square rotated 45° inside... a 2x2 square vs the same rotated by 45°:
        // intersection is a regular octagon of area 8(√2 − 1).
        let r = det(0.0, 0.0, std::f32::consts::FRAC_PI_4, 2.0, 2.0, 1.0, 0);
        let oct = 8.0 * (2f32.sqrt() - 1.0);
        assert!((bev_iou(&b, &r) - oct / (8.0 - oct)).abs() < 1e-5);
        // Symmetric; a box rotated by π is the same box.
        assert_eq!(bev_iou(&b, &r), bev_iou(&r, &b));
        let flipped = Detection {
            yaw: a.yaw + std::f32::consts::PI,
            ..a
        };
        assert!((bev_iou(&a, &flipped) - 1.0).abs() < 1e-5);
        // Degenerate input is 0, not NaN.
        let nan = Detection { x: f32::NAN, ..a };
        assert_eq!(bev_iou(&a, &nan), 0.0);
        let flat = Detection { width: 0.0, ..a };
        assert_eq!(bev_iou(&a, &flat), 0.0);
    }
}
