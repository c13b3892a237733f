//! Camera rig and rasterizer: projection and rays, 360° coverage, what the renderer draws
//! where, image sizes, and (ignored) rendering time.

use redline_pipeline::camera::{pixel_ray_ego, project_ego};
use redline_runtime::det_math as dm;
use redline_sim::camera::{
    project_world, surround_rig, surround_rig_with, tele_camera, DEFAULT_FRONT_HFOV_DEG,
    DEFAULT_TELE_HFOV_DEG, MAX_FRONT_HFOV_DEG, MIN_FRONT_HFOV_DEG,
};
use redline_sim::render::{render_scene, Renderer};
use redline_sim::scenario::{Road, Scenario, ScenarioConfig};
use redline_sim::types::{ActorClass, EgoState, GtObject, RgbImage};
use std::f64::consts::PI;

#[test]
fn optical_axis_projects_to_principal_point_and_rays_point_back() {
    for cam in surround_rig(320, 192) {
        let (sy, cy) = dm::sin_cos(cam.yaw);
        let (sp, cp) = dm::sin_cos(cam.pitch);
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
    assert_eq!(rig.len(), 7);
    assert_eq!(rig[6], tele_camera(320, 192, DEFAULT_TELE_HFOV_DEG));
    rig_covers_360_degrees_with(rig[..6].to_vec());
    // The narrowest and widest front cameras the scenario accepts keep the coverage.
    for fov in [MIN_FRONT_HFOV_DEG, 55.0, MAX_FRONT_HFOV_DEG] {
        rig_covers_360_degrees_with(surround_rig_with(320, 192, fov));
    }
}

#[test]
fn a_narrow_front_camera_has_the_longer_focal_length_and_the_rest_stay() {
    let wide = surround_rig_with(256, 128, 70.0);
    let narrow = surround_rig(256, 128);
    // The default rig's front camera is the narrow one.
    assert_eq!(DEFAULT_FRONT_HFOV_DEG, 40.0);
    assert_eq!(
        narrow[..6],
        surround_rig_with(256, 128, DEFAULT_FRONT_HFOV_DEG)
    );
    // f = (w / 2) / tan(fov / 2): 128 / tan(20°) = 351.7 px against 128 / tan(35°) = 182.8.
    assert!((narrow[0].fx - 351.68).abs() < 0.01, "{}", narrow[0].fx);
    assert!((wide[0].fx - 182.80).abs() < 0.01, "{}", wide[0].fx);
    assert_eq!(narrow[0].fx, narrow[0].fy);
    assert_eq!(narrow[1..6], wide[1..]);
    // A car-sized object 50 m ahead spans 1.9x the pixels.
    let width_px = |c: &redline_pipeline::camera::CameraSpec| {
        let (u0, _, _) = project_ego(c, 50.0, -0.95, 0.8).expect("ahead");
        let (u1, _, _) = project_ego(c, 50.0, 0.95, 0.8).expect("ahead");
        (u0 - u1).abs()
    };
    let ratio = width_px(&narrow[0]) / width_px(&wide[0]);
    assert!((ratio - 1.924).abs() < 0.01, "{ratio}");
    // The telephoto (20°) has 2.06x the front camera's focal length: 128 / tan(10°).
    let tele = &narrow[6];
    assert_eq!(DEFAULT_TELE_HFOV_DEG, 20.0);
    assert!((tele.fx - 725.92).abs() < 0.01, "{}", tele.fx);
    let ratio = width_px(tele) / width_px(&narrow[0]);
    assert!((ratio - 2.064).abs() < 0.01, "{ratio}");
    // Pitched less than the front camera: the horizon 39 px from its top edge, the ground
    // from about 15 m ahead.
    assert!(tele.pitch > 0.0 && tele.pitch < narrow[0].pitch);
    let (_, v_far, _) = project_ego(tele, 200.0, 0.0, 0.0).expect("ahead");
    let (_, v_near, _) = project_ego(tele, 16.0, 0.0, 0.0).expect("ahead");
    let (_, v_out, _) = project_ego(tele, 14.0, 0.0, 0.0).expect("ahead");
    assert!(v_far > 39.0 && v_far < 50.0, "{v_far}");
    assert!(
        v_near > 100.0 && v_near < 128.0 && v_out > 128.0,
        "{v_near} {v_out}"
    );
}

fn rig_covers_360_degrees_with(rig: Vec<redline_pipeline::camera::CameraSpec>) {
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
        let (x, y) = (1.2 + 30.0 * dm::cos(a), 30.0 * dm::sin(a));
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
    // A 70° front camera: the edge lines 10-20 m ahead are in its view.
    let cam = &surround_rig_with(320, 192, 70.0)[0];
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
    for cam in 0..7 {
        sc.render(5, cam, &mut img);
        assert_eq!((img.width, img.height), (160, 96));
        assert_eq!(img.data.len(), 160 * 96 * 3);
    }
    sc.render(5, 7, &mut img);
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
    assert!(
        frames > 0 && per > 0.0,
        "{frames} frames, {per} ms per image"
    );
    assert!(
        img.data.iter().any(|&v| v != img.data[0]),
        "the last rendered image is blank"
    );
    println!(
        "generate: {:.1} ms; render: {} images in {:.2} s = {per:.3} ms per 320x192 image",
        gen.as_secs_f64() * 1e3,
        frames * 6,
        el.as_secs_f64()
    );
}
