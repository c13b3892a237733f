//! Scenario generator: determinism, scenario content, collision freedom (seeds, small and
//! dense configs, pedestrians crossing), invalid configs. Road geometry is tested in
//! `road.rs`, the camera rig and the rasterizer in `render.rs`.

use redline_runtime::det_math as dm;
use redline_sim::scenario::{
    Road, Scenario, ScenarioConfig, EGO_LENGTH, EGO_REAR_TO_CENTRE, EGO_WIDTH,
};
use redline_sim::types::{ActorClass, EgoState, GtObject, RgbImage};
use std::f64::consts::PI;

fn short(seed: u64, seconds: f64) -> ScenarioConfig {
    ScenarioConfig {
        seed,
        seconds,
        ..ScenarioConfig::default()
    }
}

/// Ground-plane oriented box: centre, half extents, yaw.
#[derive(Clone, Copy, Debug)]
struct Obb {
    cx: f64,
    cy: f64,
    hl: f64,
    hw: f64,
    yaw: f64,
}

impl Obb {
    fn of(o: &GtObject) -> Obb {
        Obb {
            cx: o.x,
            cy: o.y,
            hl: 0.5 * o.length,
            hw: 0.5 * o.width,
            yaw: o.yaw,
        }
    }
    fn of_ego(e: &EgoState) -> Obb {
        Obb {
            cx: e.x + EGO_REAR_TO_CENTRE * dm::cos(e.yaw),
            cy: e.y + EGO_REAR_TO_CENTRE * dm::sin(e.yaw),
            hl: 0.5 * EGO_LENGTH,
            hw: 0.5 * EGO_WIDTH,
            yaw: e.yaw,
        }
    }
    fn axes(&self) -> [[f64; 2]; 2] {
        let (s, c) = dm::sin_cos(self.yaw);
        [[c, s], [-s, c]]
    }
    /// Half projection of the box on unit axis `n`.
    fn radius(&self, n: [f64; 2]) -> f64 {
        let [u, v] = self.axes();
        self.hl * (u[0] * n[0] + u[1] * n[1]).abs() + self.hw * (v[0] * n[0] + v[1] * n[1]).abs()
    }
    /// Separating-axis test (touching counts as not overlapping).
    fn overlaps(&self, o: &Obb) -> bool {
        let d = [o.cx - self.cx, o.cy - self.cy];
        let reach = dm::hypot(self.hl, self.hw) + dm::hypot(o.hl, o.hw);
        if d[0] * d[0] + d[1] * d[1] > reach * reach {
            return false;
        }
        for n in self.axes().into_iter().chain(o.axes()) {
            let dist = (d[0] * n[0] + d[1] * n[1]).abs();
            if dist >= self.radius(n) + o.radius(n) {
                return false;
            }
        }
        true
    }
}

#[test]
fn obb_test_itself_works() {
    let a = Obb {
        cx: 0.0,
        cy: 0.0,
        hl: 2.0,
        hw: 1.0,
        yaw: 0.0,
    };
    let mut b = Obb { cx: 3.9, ..a };
    assert!(a.overlaps(&b));
    b.cx = 4.1;
    assert!(!a.overlaps(&b));
    // Rotated 45°: the corner reaches sqrt(2)*... closer.
    let c = Obb {
        cx: 3.0,
        cy: 0.0,
        hl: 1.0,
        hw: 1.0,
        yaw: PI / 4.0,
    };
    assert!(a.overlaps(&c));
}

#[test]
fn same_seed_same_output_and_different_seed_differs() {
    let a = Scenario::generate(short(11, 6.0)).expect("valid config");
    let b = Scenario::generate(short(11, 6.0)).expect("valid config");
    let c = Scenario::generate(short(12, 6.0)).expect("valid config");
    assert_eq!(a.frame_count(), 180);
    let mut gt_differs = false;
    for f in 0..a.frame_count() {
        assert_eq!(a.ground_truth(f), b.ground_truth(f), "frame {f}");
        assert_eq!(a.ego(f), b.ego(f), "frame {f}");
        gt_differs |= a.ground_truth(f) != c.ground_truth(f);
    }
    assert!(gt_differs, "seed 12 gave the same ground truth as seed 11");
    let (mut ia, mut ib, mut ic) = (
        RgbImage::default(),
        RgbImage::default(),
        RgbImage::default(),
    );
    let mut img_differs = false;
    for f in [0, 90, 179] {
        for cam in 0..6 {
            a.render(f, cam, &mut ia);
            b.render(f, cam, &mut ib);
            c.render(f, cam, &mut ic);
            assert!(ia.data == ib.data, "frame {f} cam {cam}: images differ");
            img_differs |= ia.data != ic.data;
        }
    }
    assert!(img_differs);
    // Noise differs between frames and cameras even for the same view content.
    let mut i0 = RgbImage::default();
    let mut i1 = RgbImage::default();
    a.render(3, 0, &mut i0);
    a.render(3, 1, &mut i1);
    assert_ne!(i0.data, i1.data);
}

/// Lane index of a lateral offset, if near a lane centre.
fn lane_of(road: &Road, d: f64) -> Option<u32> {
    (0..road.lanes).find(|&l| (road.lane_offset(l) - d).abs() < 0.3)
}

#[test]
fn default_scenario_has_all_classes_a_lane_change_and_a_crossing() {
    let sc = Scenario::generate(ScenarioConfig::default()).expect("default config is valid");
    assert_eq!(sc.frame_count(), 900);
    assert_eq!(sc.period_ns(), 33_333_333);
    assert_eq!(sc.stamp_ns(3), 99_999_999);
    let gt = sc.ground_truth(0);
    assert!(gt.objects.len() >= 20);
    for class in [ActorClass::Car, ActorClass::Pedestrian, ActorClass::Cyclist] {
        assert!(
            gt.objects.iter().any(|o| o.class == class),
            "no {class:?} in the default scenario"
        );
    }
    let road = &sc.road;
    assert!(road.length() > 400.0, "road {} m", road.length());
    let half = road.half_width();
    let mut lane_changes = 0;
    let mut crossings = 0;
    for (j, o0) in gt.objects.iter().enumerate() {
        let mut lanes_seen = Vec::new();
        let mut sides = Vec::new();
        for f in 0..sc.frame_count() {
            let o = sc.objects(f)[j];
            assert_eq!(o.id, o0.id, "ids are stable");
            let (_, d) = road.project(o.x, o.y);
            if let Some(l) = lane_of(road, d) {
                if lanes_seen.last() != Some(&l) {
                    lanes_seen.push(l);
                }
            }
            if d.abs() > half {
                let side = d > 0.0;
                if sides.last() != Some(&side) {
                    sides.push(side);
                }
            }
        }
        if o0.class == ActorClass::Car {
            lane_changes += lanes_seen.len().saturating_sub(1);
        }
        if o0.class == ActorClass::Pedestrian {
            crossings += sides.len().saturating_sub(1);
        }
    }
    let stats = sc.stats();
    println!("{stats:?}; seen in GT: {lane_changes} lane changes, {crossings} crossings");
    assert!(lane_changes >= 1, "no lane change seen");
    assert!(crossings >= 1, "no road crossing seen");
    assert!(stats.lane_changes >= lane_changes);
    assert!(stats.crossings >= crossings);
    assert_eq!(stats.cars + stats.cyclists + stats.pedestrians, 24);
}

#[test]
fn no_overlaps_and_ego_collision_free_for_seeds_1_to_5() {
    for seed in 1..=5 {
        let sc = Scenario::generate(ScenarioConfig {
            seed,
            ..ScenarioConfig::default()
        })
        .expect("valid");
        let mut min_ego_gap = f64::INFINITY;
        for f in 0..sc.frame_count() {
            let objs = sc.objects(f);
            let ego = sc.ego(f);
            assert!(
                (0.0..=20.0).contains(&ego.v),
                "seed {seed} frame {f}: ego speed {}",
                ego.v
            );
            let eb = Obb::of_ego(&ego);
            let boxes: Vec<Obb> = objs.iter().map(Obb::of).collect();
            for (i, a) in boxes.iter().enumerate() {
                assert!(
                    !a.overlaps(&eb),
                    "seed {seed} frame {f}: actor {} hits the ego ({:?} vs {:?})",
                    objs[i].id,
                    objs[i],
                    ego
                );
                let g = dm::hypot(a.cx - eb.cx, a.cy - eb.cy);
                min_ego_gap = min_ego_gap.min(g);
                for (j, b) in boxes.iter().enumerate().skip(i + 1) {
                    assert!(
                        !a.overlaps(b),
                        "seed {seed} frame {f}: actors {} and {} overlap: {:?} {:?}",
                        objs[i].id,
                        objs[j].id,
                        objs[i],
                        objs[j]
                    );
                }
            }
        }
        println!(
            "seed {seed}: {:?}, closest centre to ego {min_ego_gap:.2} m",
            sc.stats()
        );
    }
}

#[test]
fn ego_drives_its_lane_and_velocities_match_positions() {
    let sc = Scenario::generate(short(3, 20.0)).expect("valid");
    let dt = 1.0 / sc.config.fps;
    let lane = sc.road.lane_offset(sc.config.lanes / 2);
    let e0 = sc.ego(0);
    let (s0, _) = sc.road.project(e0.x, e0.y);
    assert!((s0 - 20.0).abs() < 1e-6, "ego starts at s = {s0}");
    let mut moved = 0.0;
    for f in 1..sc.frame_count() - 1 {
        let (e, prev, next) = (sc.ego(f), sc.ego(f - 1), sc.ego(f + 1));
        let c = Obb::of_ego(&e);
        let (_, d) = sc.road.project(c.cx, c.cy);
        assert!((d - lane).abs() < 0.05, "frame {f}: ego off its lane ({d})");
        // Speed consistent with positions.
        let v_fd = dm::hypot(next.x - prev.x, next.y - prev.y) / (2.0 * dt);
        assert!((v_fd - e.v).abs() < 0.25, "frame {f}: v {} vs {v_fd}", e.v);
        let yr_fd = (next.yaw - prev.yaw) / (2.0 * dt);
        assert!((yr_fd - e.yaw_rate).abs() < 1e-9);
        moved += dm::hypot(e.x - prev.x, e.y - prev.y);
        // Actor velocities consistent with a forward difference.
        for (o, o1) in sc.objects(f).iter().zip(sc.objects(f + 1)) {
            let (vx, vy) = ((o1.x - o.x) / dt, (o1.y - o.y) / dt);
            assert!(
                (vx - o.vx).abs() < 0.3 && (vy - o.vy).abs() < 0.3,
                "frame {f} actor {}: v ({}, {}) vs ({vx}, {vy})",
                o.id,
                o.vx,
                o.vy
            );
        }
    }
    assert!(moved > 150.0, "the ego only drove {moved} m in 20 s");
    assert!(sc.ego(10_000) == sc.ego(sc.frame_count() - 1));
}

#[test]
fn invalid_configs_are_errors_naming_the_field() {
    let cases: Vec<(ScenarioConfig, &str)> = vec![
        (
            ScenarioConfig {
                fps: 0.0,
                ..Default::default()
            },
            "fps",
        ),
        (
            ScenarioConfig {
                fps: f64::NAN,
                ..Default::default()
            },
            "fps",
        ),
        (
            ScenarioConfig {
                seconds: -1.0,
                ..Default::default()
            },
            "seconds",
        ),
        (
            ScenarioConfig {
                seconds: 0.001,
                ..Default::default()
            },
            "frames",
        ),
        (
            ScenarioConfig {
                lanes: 0,
                ..Default::default()
            },
            "lanes",
        ),
        (
            ScenarioConfig {
                front_hfov_deg: 30.0,
                ..Default::default()
            },
            "front_hfov_deg = 30",
        ),
        (
            ScenarioConfig {
                front_hfov_deg: f64::NAN,
                ..Default::default()
            },
            "front_hfov_deg",
        ),
        (
            ScenarioConfig {
                tele_hfov_deg: Some(5.0),
                ..Default::default()
            },
            "tele_hfov_deg = 5",
        ),
        (
            // Wider than the front camera it is meant to see further than.
            ScenarioConfig {
                tele_hfov_deg: Some(50.0),
                ..Default::default()
            },
            "up to the front camera's 40",
        ),
        (
            ScenarioConfig {
                tele_hfov_deg: Some(f64::INFINITY),
                ..Default::default()
            },
            "tele_hfov_deg",
        ),
        (
            ScenarioConfig {
                front_hfov_deg: 150.0,
                ..Default::default()
            },
            "40 to 120 degrees",
        ),
        (
            ScenarioConfig {
                lane_width: 1.0,
                ..Default::default()
            },
            "lane_width",
        ),
        (
            ScenarioConfig {
                image_width: 0,
                ..Default::default()
            },
            "image_width",
        ),
        (
            ScenarioConfig {
                image_height: 5000,
                ..Default::default()
            },
            "image_height",
        ),
        (
            ScenarioConfig {
                actors: 100_000,
                ..Default::default()
            },
            "actors",
        ),
    ];
    for (cfg, field) in cases {
        let err = Scenario::generate(cfg.clone()).expect_err("invalid config accepted");
        let msg = err.to_string();
        assert!(
            msg.contains(field),
            "{cfg:?}: message {msg:?} does not name {field}"
        );
    }
    // Few actors are fine, and so is a one-lane road.
    let sc = Scenario::generate(ScenarioConfig {
        actors: 0,
        lanes: 1,
        seconds: 2.0,
        ..Default::default()
    })
    .expect("valid");
    assert!(sc.ground_truth(0).objects.is_empty());
    // Defaults from JSON with missing fields.
    let cfg: ScenarioConfig = serde_json::from_str(r#"{"seed": 3}"#).expect("json");
    assert_eq!(
        cfg,
        ScenarioConfig {
            seed: 3,
            ..Default::default()
        }
    );
    // The six-camera rig: no telephoto camera (JSON null), the surround cameras as they were.
    let six: ScenarioConfig =
        serde_json::from_str(r#"{"seed": 3, "seconds": 1.0, "tele_hfov_deg": null}"#)
            .expect("json");
    assert_eq!(six.tele_hfov_deg, None);
    let sc6 = Scenario::generate(six.clone()).expect("valid");
    let sc7 = Scenario::generate(ScenarioConfig {
        tele_hfov_deg: Some(20.0),
        ..six
    })
    .expect("valid");
    assert_eq!(sc6.cameras.len(), 6);
    assert_eq!(
        (sc7.cameras.len(), sc7.cameras[6].name.as_str()),
        (7, "front_tele")
    );
    assert_eq!(sc6.cameras[..], sc7.cameras[..6]);
    for off in [r#""off""#, "false"] {
        let c: ScenarioConfig =
            serde_json::from_str(&format!(r#"{{"tele_hfov_deg": {off}}}"#)).expect("json");
        assert_eq!(c.tele_hfov_deg, None, "{off}");
    }
    let c: ScenarioConfig = serde_json::from_str(r#"{"tele_hfov_deg": 25}"#).expect("json");
    assert_eq!(c.tele_hfov_deg, Some(25.0));
    let e = serde_json::from_str::<ScenarioConfig>(r#"{"tele_hfov_deg": "wide"}"#)
        .expect_err("not degrees");
    assert!(e.to_string().contains("\"off\""), "{e}");
}

#[test]
fn small_and_dense_configs_stay_collision_free() {
    for cfg in [
        ScenarioConfig {
            actors: 60,
            seconds: 20.0,
            ..Default::default()
        },
        ScenarioConfig {
            lanes: 1,
            actors: 10,
            seconds: 20.0,
            ..Default::default()
        },
        ScenarioConfig {
            lanes: 2,
            lane_width: 2.5,
            seconds: 20.0,
            seed: 9,
            ..Default::default()
        },
    ] {
        let sc = Scenario::generate(cfg.clone()).expect("valid");
        for f in 0..sc.frame_count() {
            let boxes: Vec<Obb> = sc.objects(f).iter().map(Obb::of).collect();
            let eb = Obb::of_ego(&sc.ego(f));
            for (i, a) in boxes.iter().enumerate() {
                assert!(
                    !a.overlaps(&eb),
                    "{cfg:?} frame {f}: actor {i} hits the ego"
                );
                for b in &boxes[i + 1..] {
                    assert!(!a.overlaps(b), "{cfg:?} frame {f}: actors overlap");
                }
            }
        }
    }
}

#[test]
fn the_ego_stops_for_pedestrians_crossing_ahead() {
    let mut seeds_with_stop = 0;
    for seed in 1..=5 {
        let sc = Scenario::generate(ScenarioConfig {
            seed,
            ..ScenarioConfig::default()
        })
        .expect("valid");
        let half = sc.road.half_width();
        let stopped_for_ped = (0..sc.frame_count()).any(|f| {
            let e = sc.ego(f);
            if e.v > 3.0 {
                return false;
            }
            let (se, _) = sc.road.project(e.x, e.y);
            sc.objects(f).iter().any(|o| {
                let (s, d) = sc.road.project(o.x, o.y);
                o.class == ActorClass::Pedestrian && d.abs() < half && s > se && s < se + 60.0
            })
        });
        seeds_with_stop += usize::from(stopped_for_ped);
    }
    assert!(
        seeds_with_stop >= 4,
        "the ego stopped for a crossing pedestrian in only {seeds_with_stop} of 5 seeds"
    );
}
