//! Ground-truth BEV segmentation rasterised from the road map and the ego pose: the target
//! the segmentation head is scored against (and a training label).
//!
//! Contract:
//! - [`seg_ground_truth`] writes one [`seg_class`] per BEV cell, row-major by `iy` (cell
//!   `(ix, iy)` at `out[iy * nx + ix]`, as [`BevSpec`] documents), sampled at the cell centre.
//! - Geometry follows the simulator's renderer (`redline_sim::render`) and road
//!   (`redline_sim::scenario::road`): the map's centre line is the **road centre** (not a
//!   lane centre); `lanes` lanes of `lane_width` extend symmetrically, lane `i` (0 = the
//!   rightmost) centred `(i + 0.5 − lanes/2) · lane_width` left of it; lane boundary `j`
//!   (0 = right edge, `lanes` = left edge, the rest dividers) lies at
//!   `(j − lanes/2) · lane_width`. A point's lateral offset `d` (left positive) is measured
//!   to the nearest point of the centre polyline; points whose nearest point is an end of
//!   the polyline, beyond it, are off the map (the renderer draws grass past the road's
//!   ends too).
//! - Classes, in priority order:
//!   1. [`seg_class::LANE_MARKING`] when `|d − d_j| ≤` [`MARKING_HALF_WIDTH_M`] for the
//!      nearest boundary `j` — road edges **and the whole of every divider line**: the
//!      renderer dashes dividers (3 m on, 6 m off) but a 1 m grid cannot resolve dashes
//!      (a cell centre would hit a 3 m dash on about a third of the cells along it, and
//!      the map carries no dash phase), so the gaps count as marking too;
//!   2. [`seg_class::DRIVABLE`] when `|d| ≤ lanes · lane_width / 2` (the paved surface
//!      between the edge lines);
//!   3. [`seg_class::OTHER`] otherwise (the kerb band, grass, off the map).
//! - Marking half width: the renderer paints lines 0.15 m wide (7.5 cm half width), far
//!   narrower than a 1 m cell, so a centre-sampled grid would almost never hit one. We use
//!   0.5 m, half a default cell: every line marks the one-cell-wide strip of cells it
//!   passes through (two cells where it runs along a cell border).
//! - A degenerate map (fewer than 2 points, no lanes, a non-positive or non-finite lane
//!   width) or a non-finite pose gives all [`seg_class::OTHER`]. Never panics.
//! - Allocation: a list of the map segments near the ego (off the hot path: evaluation and
//!   dataset generation). Cost: O(map points + cells × nearby segments) — about 60 nearby
//!   segments on the default grid and 2 m map spacing.

use crate::geometry::ego_to_world;
use crate::types::{seg_class, BevSpec, EgoPose, RoadMap, MAP_POINTS};
use redline_runtime::det_math as dm;

/// Half width of a lane-marking line in the ground truth, m (see the module docs).
pub const MARKING_HALF_WIDTH_M: f64 = 0.5;

/// The output buffer does not fit the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("segmentation buffer has {got} cells, the BEV grid {nx} × {ny} needs {}", nx * ny)]
pub struct SegTruthError {
    /// Cells in the buffer.
    pub got: usize,
    /// Grid cells along x.
    pub nx: usize,
    /// Grid cells along y.
    pub ny: usize,
}

/// Rasterises the ground-truth segmentation of `bev` around `ego` from `map` into `out`
/// (`bev.nx * bev.ny` cells; see the module docs for the classes).
pub fn seg_ground_truth(
    map: &RoadMap,
    ego: &EgoPose,
    bev: &BevSpec,
    out: &mut [u8],
) -> Result<(), SegTruthError> {
    let cells = bev.nx.saturating_mul(bev.ny);
    if out.len() != cells {
        return Err(SegTruthError {
            got: out.len(),
            nx: bev.nx,
            ny: bev.ny,
        });
    }
    out.fill(seg_class::OTHER);
    let n = (map.points as usize).min(MAP_POINTS);
    let lw = f64::from(map.lane_width);
    let lanes = f64::from(map.lanes);
    let pose_ok = [ego.x, ego.y, ego.yaw].iter().all(|v| v.is_finite());
    if n < 2 || map.lanes == 0 || !(lw.is_finite() && lw > 0.0) || !pose_ok {
        return Ok(());
    }
    let pts: Vec<(f64, f64)> = map.centre[..n]
        .iter()
        .map(|p| (f64::from(p[0]), f64::from(p[1])))
        .collect();
    let half = 0.5 * lanes * lw;
    // Segments that can be nearest to some cell: within the grid's reach of the ego, plus
    // the road's half width and a margin.
    let corners = [
        (bev.x0, bev.y0),
        (bev.x0 + bev.nx as f32 * bev.res, bev.y0),
        (bev.x0, bev.y0 + bev.ny as f32 * bev.res),
        (
            bev.x0 + bev.nx as f32 * bev.res,
            bev.y0 + bev.ny as f32 * bev.res,
        ),
    ];
    let reach = corners
        .iter()
        .map(|&(x, y)| dm::hypot(f64::from(x), f64::from(y)))
        .fold(0.0, f64::max)
        + half
        + 2.0 * MARKING_HALF_WIDTH_M;
    let near: Vec<usize> = (0..n - 1)
        .filter(|&i| segment_distance((ego.x, ego.y), pts[i], pts[i + 1]).0 <= reach)
        .collect();
    if near.is_empty() {
        return Ok(());
    }
    for iy in 0..bev.ny {
        for ix in 0..bev.nx {
            let (cx, cy) = bev.centre(ix, iy);
            let p = ego_to_world(ego, f64::from(cx), f64::from(cy));
            out[iy * bev.nx + ix] = classify(&pts, &near, p, lanes, lw, half);
        }
    }
    Ok(())
}

/// Class of world point `p` given the candidate segments `near` of polyline `pts`.
fn classify(
    pts: &[(f64, f64)],
    near: &[usize],
    p: (f64, f64),
    lanes: f64,
    lw: f64,
    half: f64,
) -> u8 {
    // Nearest segment (first on ties: deterministic).
    let mut best: Option<(f64, usize, f64)> = None;
    for &i in near {
        let (dist, t) = segment_distance(p, pts[i], pts[i + 1]);
        if best.is_none_or(|(bd, _, _)| dist < bd) {
            best = Some((dist, i, t));
        }
    }
    let Some((dist, i, t)) = best else {
        return seg_class::OTHER;
    };
    let last = pts.len() - 2;
    if (i == 0 && t <= 0.0) || (i == last && t >= 1.0) || !dist.is_finite() {
        return seg_class::OTHER; // beyond an end of the map
    }
    // Sign: left of the segment's direction is positive.
    let (a, b) = (pts[i], pts[i + 1]);
    let cross = (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0);
    let d = if cross < 0.0 { -dist } else { dist };
    let j = (d / lw + 0.5 * lanes).round().clamp(0.0, lanes);
    let dj = (j - 0.5 * lanes) * lw;
    if (d - dj).abs() <= MARKING_HALF_WIDTH_M {
        seg_class::LANE_MARKING
    } else if d.abs() <= half {
        seg_class::DRIVABLE
    } else {
        seg_class::OTHER
    }
}

/// Distance from `p` to segment `a`–`b` and the unclamped foot parameter `t` (0 at `a`,
/// 1 at `b`; 0 for a zero-length segment).
fn segment_distance(p: (f64, f64), a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let (ux, uy) = (b.0 - a.0, b.1 - a.1);
    let len2 = ux * ux + uy * uy;
    let t = if len2 > 0.0 {
        ((p.0 - a.0) * ux + (p.1 - a.1) * uy) / len2
    } else {
        0.0
    };
    let tc = t.clamp(0.0, 1.0);
    let (fx, fy) = (a.0 + tc * ux, a.1 + tc * uy);
    (dm::hypot(p.0 - fx, p.1 - fy), t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A straight road along +x from x = −100 to x = 100 (2 m spacing).
    fn straight(lanes: u32, lane_width: f32) -> Box<RoadMap> {
        let mut m: Box<RoadMap> = Box::default();
        m.lanes = lanes;
        m.lane_width = lane_width;
        m.points = 101;
        for (i, p) in m.centre.iter_mut().take(101).enumerate() {
            *p = [-100.0 + 2.0 * i as f32, 0.0];
        }
        m
    }

    fn grid(map: &RoadMap, ego: &EgoPose) -> Vec<u8> {
        let bev = BevSpec::DEFAULT;
        let mut out = vec![9u8; bev.nx * bev.ny];
        seg_ground_truth(map, ego, &bev, &mut out).unwrap();
        out
    }

    /// The class of each BEV row (iy) at column `ix`.
    fn column(g: &[u8], ix: usize) -> Vec<u8> {
        let bev = BevSpec::DEFAULT;
        (0..bev.ny).map(|iy| g[iy * bev.nx + ix]).collect()
    }

    #[test]
    fn straight_road_ego_on_the_centre_line() {
        // Two 3.5 m lanes: boundaries at y = −3.5, 0, +3.5. Cell centres at y = −23.5 …
        // 23.5 (iy = y + 23.5 + ...): centre y of row iy is iy − 23.5.
        let map = straight(2, 3.5);
        let g = grid(&map, &EgoPose::default());
        let bev = BevSpec::DEFAULT;
        for ix in 0..bev.nx {
            let col = column(&g, ix);
            for (iy, &c) in col.iter().enumerate() {
                let y = iy as f64 - 23.5;
                let want = if [-3.5f64, 0.0, 3.5].iter().any(|b| (y - b).abs() <= 0.5) {
                    seg_class::LANE_MARKING
                } else if y.abs() <= 3.5 {
                    seg_class::DRIVABLE
                } else {
                    seg_class::OTHER
                };
                assert_eq!(c, want, "ix {ix} iy {iy} (y {y})");
            }
        }
        // Rows: y = −3.5 is at iy 20 (centre −3.5), the divider y = ±0.5 at iy 23 and 24
        // (centres −0.5, 0.5), the left edge at iy 27.
        let col = column(&g, 40);
        assert_eq!(&col[19..29], &[0, 2, 1, 1, 2, 2, 1, 1, 2, 0]);
        let count = |k: u8| g.iter().filter(|&&c| c == k).count();
        assert_eq!(count(seg_class::LANE_MARKING), 4 * 80);
        assert_eq!(count(seg_class::DRIVABLE), 4 * 80);
        assert_eq!(count(seg_class::OTHER), 40 * 80);
    }

    #[test]
    fn ego_pose_moves_and_turns_the_road_in_the_grid() {
        let map = straight(3, 3.0);
        // Ego 3 m left of the centre line, heading +x: the road appears 3 m to its right.
        let shifted = grid(
            &map,
            &EgoPose {
                y: 3.0,
                ..EgoPose::default()
            },
        );
        let base = grid(&map, &EgoPose::default());
        let bev = BevSpec::DEFAULT;
        for iy in 3..bev.ny {
            for ix in 0..bev.nx {
                assert_eq!(
                    shifted[(iy - 3) * bev.nx + ix],
                    base[iy * bev.nx + ix],
                    "({ix}, {iy})"
                );
            }
        }
        // Ego heading +y (yaw π/2) at the origin: the road runs across the grid (along the
        // ego's y axis), so the row through the ego is all road, the columns far ahead are
        // not.
        let turned = grid(
            &map,
            &EgoPose {
                yaw: std::f64::consts::FRAC_PI_2,
                ..EgoPose::default()
            },
        );
        let ahead = 16 + 20; // x = 20.5 m ahead
        assert!((0..bev.ny).all(|iy| turned[iy * bev.nx + ahead] == seg_class::OTHER));
        let at_ego = 16; // x = 0.5
        assert!((0..bev.ny).all(|iy| turned[iy * bev.nx + at_ego] != seg_class::OTHER));
    }

    #[test]
    fn past_the_end_of_the_map_is_other() {
        // The road ends at x = 100; the ego at x = 90 sees 10 m of it ahead, then grass.
        let map = straight(2, 3.5);
        let g = grid(
            &map,
            &EgoPose {
                x: 90.0,
                ..EgoPose::default()
            },
        );
        let bev = BevSpec::DEFAULT;
        let mid = 24 * bev.nx; // row y = 0.5: the divider
        let row: Vec<u8> = g[mid..mid + bev.nx].to_vec();
        // Cell centres x = 90 − 15.5 … ; x < 100 is road (marking here), beyond is other.
        for (ix, &c) in row.iter().enumerate() {
            let x = 90.0 - 15.5 + ix as f64;
            let want = if x < 100.0 {
                seg_class::LANE_MARKING
            } else {
                seg_class::OTHER
            };
            assert_eq!(c, want, "x {x}");
        }
    }

    #[test]
    fn degenerate_inputs_are_other_and_a_wrong_buffer_is_an_error() {
        let bev = BevSpec::DEFAULT;
        let mut out = vec![7u8; bev.nx * bev.ny];
        seg_ground_truth(&RoadMap::default(), &EgoPose::default(), &bev, &mut out).unwrap();
        assert!(out.iter().all(|&c| c == seg_class::OTHER));
        let mut map = straight(2, 3.5);
        map.lane_width = f32::NAN;
        out.fill(7);
        seg_ground_truth(&map, &EgoPose::default(), &bev, &mut out).unwrap();
        assert!(out.iter().all(|&c| c == seg_class::OTHER));
        let nan_pose = EgoPose {
            x: f64::NAN,
            ..EgoPose::default()
        };
        seg_ground_truth(&straight(2, 3.5), &nan_pose, &bev, &mut out).unwrap();
        assert!(out.iter().all(|&c| c == seg_class::OTHER));
        let mut short = vec![0u8; 10];
        let e = seg_ground_truth(&map, &EgoPose::default(), &bev, &mut short).unwrap_err();
        assert_eq!((e.got, e.nx, e.ny), (10, 80, 48));
        assert!(e.to_string().contains("3840"), "{e}");
    }

    #[test]
    fn a_curve_keeps_the_lateral_offset() {
        // A left arc of radius 100 m around (0, 100), starting at the origin heading +x:
        // points at radius 100 − d are d left of the centre line.
        let mut m: Box<RoadMap> = Box::default();
        m.lanes = 2;
        m.lane_width = 3.5;
        m.points = 100;
        for (i, p) in m.centre.iter_mut().take(100).enumerate() {
            let a = (i as f64 * 2.0 - 60.0) / 100.0; // arc angle, rad
            *p = [
                (100.0 * dm::sin(a)) as f32,
                (100.0 - 100.0 * dm::cos(a)) as f32,
            ];
        }
        let bev = BevSpec::DEFAULT;
        let mut out = vec![0u8; bev.nx * bev.ny];
        seg_ground_truth(&m, &EgoPose::default(), &bev, &mut out).unwrap();
        for iy in 0..bev.ny {
            for ix in 0..bev.nx {
                let (x, y) = bev.centre(ix, iy);
                let d = 100.0 - dm::hypot(f64::from(x), 100.0 - f64::from(y));
                // Away from class borders (the 2 m chords sag 5 mm), the class follows d.
                let near_border = [-3.5f64, 0.0, 3.5]
                    .iter()
                    .any(|b| ((d - b).abs() - 0.5).abs() < 0.01);
                if near_border {
                    continue;
                }
                let want = if [-3.5f64, 0.0, 3.5].iter().any(|b| (d - b).abs() <= 0.5) {
                    seg_class::LANE_MARKING
                } else if d.abs() <= 3.5 {
                    seg_class::DRIVABLE
                } else {
                    seg_class::OTHER
                };
                assert_eq!(out[iy * bev.nx + ix], want, "({ix}, {iy}) d {d}");
            }
        }
    }
}
