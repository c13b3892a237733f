//! The road: a seeded centre line of straight and constant-curvature pieces with parallel
//! lanes, in arc-length / lateral-offset coordinates (`s`, `d`).
//!
//! Promises: [`Road::pose_at`], [`Road::point_at`] and [`Road::project`] are consistent with
//! each other and use only the platform-independent trigonometry of [`redline_pipeline::camera::det`], so
//! the geometry is bit-identical on every machine; arc lengths outside the road are clamped,
//! never a panic. Cost: a projection scans every piece (a road has a few dozen);
//! [`RoadWindow`] (for the renderer's per-pixel lookups) is a fixed-capacity array, no
//! allocation. Must never consume random numbers except in `Road::random`, in the order
//! scenarios were generated with.

use super::{Rng, ScenarioError};
use redline_pipeline::camera::det;
use std::f64::consts::PI;

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
    pub(super) fn random(lanes: u32, lane_width: f64, min_length: f64, rng: &mut Rng) -> Road {
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
