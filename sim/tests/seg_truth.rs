//! The pipeline's ground-truth segmentation (`redline_pipeline::eval::seg_ground_truth`,
//! rasterised from the road map a log carries) agrees with the simulator's road, which the
//! renderer paints: same centre line (the road centre), same side for the lanes, same
//! boundary offsets.

use redline_pipeline::eval::{seg_ground_truth, MARKING_HALF_WIDTH_M};
use redline_pipeline::geometry::ego_to_world;
use redline_pipeline::types::{seg_class, BevSpec, EgoPose, RoadMap, MAP_POINTS, MAP_SPACING};
use redline_sim::scenario::{Road, Scenario, ScenarioConfig};

/// The map exactly as `redline_sim::feed` builds it from the road.
fn map_of(road: &Road) -> Box<RoadMap> {
    let centre = road.sample_centre(f64::from(MAP_SPACING), MAP_POINTS);
    let mut m: Box<RoadMap> = Box::default();
    m.lanes = road.lanes;
    m.lane_width = road.lane_width as f32;
    m.points = centre.len().min(MAP_POINTS) as u32;
    for (dst, &(x, y)) in m.centre.iter_mut().zip(&centre) {
        *dst = [x as f32, y as f32];
    }
    m
}

/// The class the renderer's road geometry gives a world point (`Road::project`), with
/// the ground truth's rules, or None within 5 cm of a class border (where the 2 m map
/// chords may legitimately disagree with the exact arcs).
fn class_from_road(road: &Road, x: f64, y: f64) -> Option<u8> {
    let (s, d) = road.project(x, y);
    if s < 0.0 || s > road.length() {
        return Some(seg_class::OTHER);
    }
    let lanes = f64::from(road.lanes);
    let lw = road.lane_width;
    let half = road.half_width();
    let tol = 0.05;
    let mut borders = vec![half, -half];
    for j in 0..=road.lanes {
        let dj = (f64::from(j) - 0.5 * lanes) * lw;
        borders.push(dj - MARKING_HALF_WIDTH_M);
        borders.push(dj + MARKING_HALF_WIDTH_M);
    }
    if borders.iter().any(|b| (d - b).abs() < tol) {
        return None;
    }
    let j = (d / lw + 0.5 * lanes).round().clamp(0.0, lanes);
    let dj = (j - 0.5 * lanes) * lw;
    Some(if (d - dj).abs() <= MARKING_HALF_WIDTH_M {
        seg_class::LANE_MARKING
    } else if d.abs() <= half {
        seg_class::DRIVABLE
    } else {
        seg_class::OTHER
    })
}

#[test]
fn ground_truth_segmentation_matches_the_simulated_road() {
    let sc = Scenario::generate(ScenarioConfig::default_drive()).unwrap();
    let map = map_of(&sc.road);
    let bev = BevSpec::DEFAULT;
    let mut out = vec![0u8; bev.nx * bev.ny];
    let (mut compared, mut counts) = (0usize, [0usize; 3]);
    for k in (0..sc.frame_count()).step_by(60) {
        let e = sc.ego(k);
        let ego = EgoPose {
            x: e.x,
            y: e.y,
            yaw: e.yaw,
            ..EgoPose::default()
        };
        seg_ground_truth(&map, &ego, &bev, &mut out).unwrap();
        for iy in 0..bev.ny {
            for ix in 0..bev.nx {
                let (cx, cy) = bev.centre(ix, iy);
                let (wx, wy) = ego_to_world(&ego, f64::from(cx), f64::from(cy));
                let Some(want) = class_from_road(&sc.road, wx, wy) else {
                    continue;
                };
                let got = out[iy * bev.nx + ix];
                assert_eq!(
                    got, want,
                    "frame {k}, cell ({ix}, {iy}), world ({wx}, {wy})"
                );
                compared += 1;
                counts[usize::from(got)] += 1;
            }
        }
    }
    // Positive control: the drive shows every class in quantity.
    assert!(compared > 10_000, "{compared}");
    assert!(counts.iter().all(|&c| c > 1000), "{counts:?}");
}
