//! Road geometry: curves and sampling, projection onto the centre line and back, pieces
//! and projection beyond the ends.

use proptest::prelude::*;
use redline_runtime::det_math as dm;
use redline_sim::scenario::{Road, Scenario, ScenarioConfig, ScenarioError};

fn short(seed: u64, seconds: f64) -> ScenarioConfig {
    ScenarioConfig {
        seed,
        seconds,
        ..ScenarioConfig::default()
    }
}

#[test]
fn road_has_curves_and_samples() {
    let sc = Scenario::generate(short(5, 30.0)).expect("valid");
    let road = &sc.road;
    let mut s = 0.0;
    let mut curved = 0.0;
    let mut min_radius = f64::INFINITY;
    let mut curves = 0;
    let mut was_curved = false;
    while s < road.length() {
        let k = road.curvature_at(s);
        if k != 0.0 {
            curved += 1.0;
            min_radius = min_radius.min(1.0 / k.abs());
            if !was_curved {
                curves += 1;
            }
        }
        was_curved = k != 0.0;
        s += 1.0;
    }
    assert!(curves >= 2, "{curves} curves");
    assert!(curved > 50.0);
    assert!((150.0..=400.0).contains(&min_radius), "radius {min_radius}");
    let pts = road.sample_centre(2.0, 1024);
    assert_eq!(
        pts.len(),
        ((road.length() / 2.0).floor() as usize + 1).min(1024)
    );
    assert_eq!(pts[0], (0.0, 0.0));
    for w in pts.windows(2) {
        let step = dm::hypot(w[1].0 - w[0].0, w[1].1 - w[0].1);
        assert!((step - 2.0).abs() < 1e-3, "chord {step}");
    }
    assert_eq!(road.sample_centre(2.0, 5).len(), 5);
    assert!(road.sample_centre(0.0, 5).len() == 1);
    // Heading is continuous (joined smoothly).
    let mut prev = road.pose_at(0.0).2;
    let mut s = 0.5;
    while s < road.length() {
        let h = road.pose_at(s).2;
        assert!((h - prev).abs() < 0.01, "heading jump at {s}");
        prev = h;
        s += 0.5;
    }
}

proptest! {
    #[test]
    fn road_projection_round_trip(seed in 0u64..50, frac in 0.0f64..1.0, d in -9.0f64..9.0) {
        let road = Scenario::generate(ScenarioConfig { seed, seconds: 1.0, actors: 0, ..ScenarioConfig::default() })
            .expect("valid").road;
        let s = frac * road.length();
        let (x, y, h) = road.pose_at(s);
        let (px, py) = (x - d * dm::sin(h), y + d * dm::cos(h));
        let (s2, d2) = road.project(px, py);
        prop_assert!((s2 - s).abs() < 1e-6, "s {} -> {}", s, s2);
        prop_assert!((d2 - d).abs() < 1e-6, "d {} -> {}", d, d2);
    }
}

#[test]
fn road_pieces_and_projection_beyond_the_ends() {
    let road = Road::from_pieces(2, 3.5, &[(50.0, 0.0), (100.0, 1.0 / 200.0), (50.0, 0.0)])
        .expect("valid pieces");
    assert!((road.length() - 200.0).abs() < 1e-12);
    assert_eq!(road.lane_offset(0), -1.75);
    assert_eq!(road.lane_offset(1), 1.75);
    assert_eq!(road.pose_at(-5.0), road.pose_at(0.0));
    assert_eq!(road.pose_at(1e9), road.pose_at(200.0));
    let (s, d) = road.project(-10.0, 1.0);
    assert!((s + 10.0).abs() < 1e-9 && (d - 1.0).abs() < 1e-9);
    let (x, y, h) = road.pose_at(200.0);
    let (s, d) = road.project(x + 5.0 * dm::cos(h), y + 5.0 * dm::sin(h));
    assert!((s - 205.0).abs() < 1e-9 && d.abs() < 1e-9);
    // Arc end heading = 100 m / 200 m = 0.5 rad.
    assert!((road.pose_at(150.0).2 - 0.5).abs() < 1e-12);
    assert!(matches!(
        Road::from_pieces(2, 3.5, &[(10.0, 0.0), (-1.0, 0.0)]),
        Err(ScenarioError::RoadPiece { index: 1, .. })
    ));
}
