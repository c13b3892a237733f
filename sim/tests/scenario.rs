//! Scenario generator, camera rig and rasterizer: determinism, scenario content, collision
//! freedom, road and camera geometry, rendering.

use proptest::prelude::*;
use redline_pipeline::camera::{pixel_ray_ego, project_ego};
use redline_sim::camera::{project_world, surround_rig};
use redline_sim::render::{render_scene, Renderer};
use redline_sim::scenario::{
    Road, Scenario, ScenarioConfig, ScenarioError, EGO_LENGTH, EGO_REAR_TO_CENTRE, EGO_WIDTH,
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
            cx: e.x + EGO_REAR_TO_CENTRE * e.yaw.cos(),
            cy: e.y + EGO_REAR_TO_CENTRE * e.yaw.sin(),
            hl: 0.5 * EGO_LENGTH,
            hw: 0.5 * EGO_WIDTH,
            yaw: e.yaw,
        }
    }
    fn axes(&self) -> [[f64; 2]; 2] {
        let (s, c) = self.yaw.sin_cos();
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
        let reach = self.hl.hypot(self.hw) + o.hl.hypot(o.hw);
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
                let g = (a.cx - eb.cx).hypot(a.cy - eb.cy);
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
        let v_fd = (next.x - prev.x).hypot(next.y - prev.y) / (2.0 * dt);
        assert!((v_fd - e.v).abs() < 0.25, "frame {f}: v {} vs {v_fd}", e.v);
        let yr_fd = (next.yaw - prev.yaw) / (2.0 * dt);
        assert!((yr_fd - e.yaw_rate).abs() < 1e-9);
        moved += (e.x - prev.x).hypot(e.y - prev.y);
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
        let step = (w[1].0 - w[0].0).hypot(w[1].1 - w[0].1);
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
        let (px, py) = (x - d * h.sin(), y + d * h.cos());
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
    let (s, d) = road.project(x + 5.0 * h.cos(), y + 5.0 * h.sin());
    assert!((s - 205.0).abs() < 1e-9 && d.abs() < 1e-9);
    // Arc end heading = 100 m / 200 m = 0.5 rad.
    assert!((road.pose_at(150.0).2 - 0.5).abs() < 1e-12);
    assert!(matches!(
        Road::from_pieces(2, 3.5, &[(10.0, 0.0), (-1.0, 0.0)]),
        Err(ScenarioError::RoadPiece { index: 1, .. })
    ));
}

#[test]
fn optical_axis_projects_to_principal_point_and_rays_point_back() {
    for cam in surround_rig(320, 192) {
        let (sy, cy) = cam.yaw.sin_cos();
        let (sp, cp) = cam.pitch.sin_cos();
        let dist = 17.0;
        let p = [
            cam.x + dist * cp * cy,
            cam.y + dist * cp * sy,
            cam.z - dist * sp,
        ];
        let (u, v, depth) = project_ego(&cam, p[0], p[1], p[2]).expect("in front");
        assert!(
            (u - cam.cx).abs() < 1e-9 && (v - cam.cy).abs() < 1e-9,
            "{}: ({u}, {v})",
            cam.name
        );
        assert!((depth - dist).abs() < 1e-9);
        // Behind the camera: None.
        assert!(project_ego(
            &cam,
            2.0 * cam.x - p[0],
            2.0 * cam.y - p[1],
            2.0 * cam.z - p[2]
        )
        .is_none());
        // An off-axis point: the pixel's ray passes through it.
        let q = [
            cam.x + 12.0 * cy - 3.0 * sy,
            cam.y + 12.0 * sy + 3.0 * cy,
            0.4,
        ];
        let (u, v, _) = project_ego(&cam, q[0], q[1], q[2]).expect("in front");
        let (o, dir) = pixel_ray_ego(&cam, u, v);
        assert!(((dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]).sqrt() - 1.0).abs() < 1e-12);
        let w = [q[0] - o[0], q[1] - o[1], q[2] - o[2]];
        let t = w[0] * dir[0] + w[1] * dir[1] + w[2] * dir[2];
        let miss = [w[0] - t * dir[0], w[1] - t * dir[1], w[2] - t * dir[2]];
        let miss = (miss[0] * miss[0] + miss[1] * miss[1] + miss[2] * miss[2]).sqrt();
        assert!(t > 0.0 && miss < 1e-9, "{}: ray misses by {miss}", cam.name);
    }
    // World projection = ego projection after the ego transform.
    let cam = &surround_rig(320, 192)[0];
    let ego = EgoState {
        x: 100.0,
        y: 50.0,
        yaw: PI / 2.0,
        ..EgoState::default()
    };
    let (u, v, _) = project_world(cam, &ego, 100.0, 70.0, 1.6).expect("ahead");
    let (u2, v2, _) = project_ego(cam, 20.0, 0.0, 1.6).expect("ahead");
    assert!((u - u2).abs() < 1e-9 && (v - v2).abs() < 1e-9);
}

#[test]
fn rig_covers_360_degrees() {
    let rig = surround_rig(320, 192);
    let names: Vec<&str> = rig.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "front",
            "front_left",
            "front_right",
            "back_left",
            "back_right",
            "back"
        ]
    );
    for c in &rig {
        assert!((c.z - 1.6).abs() < 0.2 && c.pitch > 0.0 && c.pitch < 0.2);
    }
    for deg in 0..720 {
        let a = deg as f64 * PI / 360.0;
        // A point 30 m away at 1 m height, in every horizontal direction.
        let (x, y) = (1.2 + 30.0 * a.cos(), 30.0 * a.sin());
        let seen = rig.iter().any(|c| {
            project_ego(c, x, y, 1.0).is_some_and(|(u, v, _)| {
                u >= 0.0 && u < f64::from(c.width) && v >= 0.0 && v < f64::from(c.height)
            })
        });
        assert!(seen, "direction {}° is not covered", deg as f64 / 2.0);
    }
}

fn straight_road() -> Road {
    Road::from_pieces(3, 3.5, &[(400.0, 0.0)]).expect("valid")
}

fn car_at(x: f64, y: f64) -> GtObject {
    GtObject {
        id: 1,
        class: ActorClass::Car,
        x,
        y,
        z: 0.75,
        length: 4.5,
        width: 1.9,
        height: 1.5,
        yaw: 0.0,
        vx: 0.0,
        vy: 0.0,
    }
}

#[test]
fn a_car_ahead_shows_in_the_front_camera_only() {
    let road = straight_road();
    let ego = EgoState {
        x: 50.0,
        y: 0.0,
        ..EgoState::default()
    };
    let car = car_at(50.0 + 15.0, 0.0);
    let rig = surround_rig(320, 192);
    let mut empty = RgbImage::default();
    let mut with = RgbImage::default();
    // Front: pixels inside the projected box differ from the empty scene.
    render_scene(&rig[0], &ego, &road, &[], 5, &mut empty);
    render_scene(&rig[0], &ego, &road, &[car], 5, &mut with);
    let (mut u0, mut u1, mut v0, mut v1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for i in 0..8 {
        let dx = if i & 1 == 0 { -2.25 } else { 2.25 };
        let dy = if i & 2 == 0 { -0.95 } else { 0.95 };
        let z = if i & 4 == 0 { 0.0 } else { 1.5 };
        let (u, v, _) = project_world(&rig[0], &ego, car.x + dx, dy, z).expect("ahead");
        u0 = u0.min(u);
        u1 = u1.max(u);
        v0 = v0.min(v);
        v1 = v1.max(v);
    }
    assert!(
        u1 - u0 > 20.0 && v1 - v0 > 10.0,
        "box {u0}..{u1} x {v0}..{v1}"
    );
    let (mut inside, mut changed, mut outside_changed) = (0, 0, 0);
    for y in 0..192usize {
        for x in 0..320usize {
            let i = 3 * (y * 320 + x);
            let diff = empty.data[i..i + 3] != with.data[i..i + 3];
            let (fx, fy) = (x as f64 + 0.5, y as f64 + 0.5);
            // Shrink by 2 px: the box's outline is not exactly its bounding rectangle.
            let in_core = fx > u0 + 2.0 && fx < u1 - 2.0 && fy > v0 + 2.0 && fy < v1 - 2.0;
            let in_rect = fx >= u0 - 1.0 && fx <= u1 + 1.0 && fy >= v0 - 1.0 && fy <= v1 + 1.0;
            if in_core {
                inside += 1;
                changed += usize::from(diff);
            } else if !in_rect && diff {
                outside_changed += 1;
            }
        }
    }
    assert!(inside > 100);
    assert!(
        changed * 10 >= inside * 8,
        "only {changed} of {inside} pixels in the car's box changed"
    );
    assert_eq!(outside_changed, 0, "pixels outside the car's box changed");
    // Back camera: identical with and without the car.
    render_scene(&rig[5], &ego, &road, &[], 5, &mut empty);
    render_scene(&rig[5], &ego, &road, &[car], 5, &mut with);
    assert_eq!(empty, with);
    // A car behind shows in the back camera.
    let behind = car_at(50.0 - 12.0, 0.0);
    render_scene(&rig[5], &ego, &road, &[behind], 5, &mut with);
    assert_ne!(empty, with);
}

#[test]
fn the_ground_shows_road_markings_and_sky() {
    let road = straight_road();
    let ego = EgoState {
        x: 50.0,
        y: 0.0,
        ..EgoState::default()
    };
    let cam = &surround_rig(320, 192)[0];
    let mut img = RgbImage::default();
    render_scene(cam, &ego, &road, &[], 0, &mut img);
    let px = |x: f64, y: f64| {
        let (u, v, _) = project_world(cam, &ego, x, y, 0.0).expect("ahead");
        assert!(
            (0.0..320.0).contains(&u) && (0.0..192.0).contains(&v),
            "({x}, {y}) not in view"
        );
        let i = 3 * (v as usize * 320 + u as usize);
        [img.data[i], img.data[i + 1], img.data[i + 2]]
    };
    let asphalt = px(60.0, -1.7); // between the lane-0/lane-1 line and the lane centre
    let edge = px(60.0, -5.25); // right edge line
    let grass = px(70.0, -7.0);
    assert!(edge[0] > 200 && edge[1] > 200, "edge line {edge:?}");
    assert!(asphalt[0] < 110 && (i32::from(asphalt[0]) - i32::from(asphalt[2])).abs() < 15);
    assert!(grass[1] > grass[0] + 20, "grass {grass:?}");
    // Top row is sky (blue-ish).
    assert!(img.data[2] > img.data[0]);
}

#[test]
fn images_have_the_requested_size() {
    let sc = Scenario::generate(ScenarioConfig {
        seconds: 1.0,
        image_width: 160,
        image_height: 96,
        ..ScenarioConfig::default()
    })
    .expect("valid");
    let mut img = RgbImage {
        width: 3,
        height: 3,
        data: vec![1; 27],
    };
    for cam in 0..6 {
        sc.render(5, cam, &mut img);
        assert_eq!((img.width, img.height), (160, 96));
        assert_eq!(img.data.len(), 160 * 96 * 3);
    }
    sc.render(5, 6, &mut img);
    assert_eq!((img.width, img.height, img.data.len()), (0, 0, 0));
    // An own renderer gives the same bytes as the per-thread one.
    let mut a = RgbImage::default();
    let mut b = RgbImage::default();
    sc.render(7, 2, &mut a);
    let spec = &sc.cameras[2];
    let mut r = Renderer::new(160, 96);
    // Same inputs except the noise seed is private: compare structure, not noise.
    r.render(spec, &sc.ego(7), &sc.road, sc.objects(7), 1, &mut b);
    let close = a
        .data
        .iter()
        .zip(&b.data)
        .filter(|(x, y)| (i32::from(**x) - i32::from(**y)).abs() <= 6)
        .count();
    assert_eq!(close, a.data.len());
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

/// `cargo test -p redline-sim --release --test scenario -- --ignored --nocapture render_timing`
#[test]
#[ignore = "timing; run in release"]
fn render_timing() {
    let t0 = std::time::Instant::now();
    let sc = Scenario::generate(ScenarioConfig::default()).expect("valid");
    let gen = t0.elapsed();
    let mut img = RgbImage::default();
    let frames = sc.frame_count();
    let t1 = std::time::Instant::now();
    for f in 0..frames {
        for cam in 0..6 {
            sc.render(f, cam, &mut img);
        }
    }
    let el = t1.elapsed();
    let per = el.as_secs_f64() * 1e3 / (frames * 6) as f64;
    println!(
        "generate: {:.1} ms; render: {} images in {:.2} s = {per:.3} ms per 320x192 image",
        gen.as_secs_f64() * 1e3,
        frames * 6,
        el.as_secs_f64()
    );
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
