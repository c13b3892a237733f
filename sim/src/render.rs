//! Software rasterizer for the synthetic surround cameras.
//!
//! Contract:
//! - [`render_scene`] / [`Renderer::render`] draw what a pinhole camera on the ego vehicle
//!   sees: a sky gradient above the horizon; the ground plane z = 0 by per-pixel ray/plane
//!   intersection (asphalt on the road, solid white edge lines, dashed white lines between
//!   lanes (3 m on, 6 m off), a light kerb band, textured grass beyond, haze with distance);
//!   actors as z-buffered 3-D boxes (faces clipped at the near plane, split into triangles,
//!   shaded per face by a wrapped Lambertian sun term in class colours: cars in six colours, pedestrians orange/red,
//!   cyclists green/yellow); then ±3 levels of per-pixel noise from `noise_seed`.
//! - Deterministic: the same inputs give the same bytes on every machine (f64 arithmetic,
//!   trigonometry from [`redline_pipeline::camera::det`], no threads, actors drawn in the given order).
//! - Allocation: `out.data` is resized to `width * height * 3` only when its size changes,
//!   and the z-buffer lives in the [`Renderer`] (for [`render_scene`], one per thread), so
//!   rendering at a fixed size allocates nothing after the first frame. No locks, no I/O,
//!   no panics on any input (non-finite actors are skipped).
//!
//! Cost: the ground costs one division per row and a few flops plus one lateral road
//! lookup (a handful of nearby road pieces) per pixel; actors farther than 120 m or
//! entirely behind the camera are skipped. About 1.5 ms per 320×192 image in release on one
//! core (see `render_timing` in `sim/tests/scenario.rs`).

use crate::camera::pose_in_world;
use redline_pipeline::camera::{det, CameraPose, NEAR_DEPTH};
use redline_runtime::rng::mix64;

use crate::scenario::Road;
use crate::types::{ActorClass, EgoState, GtObject, RgbImage};
use redline_pipeline::camera::CameraSpec;
use std::cell::RefCell;

/// Actors farther than this from the camera (horizontally) are not drawn, m.
pub const MAX_ACTOR_DISTANCE: f64 = 120.0;
/// Ground farther than this (horizontally) is drawn as uniform haze, m.
pub const GROUND_FAR: f64 = 250.0;

const SKY_HORIZON: [f32; 3] = [200.0, 214.0, 232.0];
const SKY_ZENITH: [f32; 3] = [84.0, 132.0, 205.0];
const HAZE: [f32; 3] = [186.0, 196.0, 208.0];
const GRASS: [f32; 3] = [74.0, 118.0, 54.0];
const ASPHALT: [f32; 3] = [86.0, 88.0, 93.0];
const KERB: [f32; 3] = [168.0, 166.0, 160.0];
const MARKING: [f32; 3] = [236.0, 236.0, 232.0];
const KERB_WIDTH: f64 = 0.25;
const DASH_PERIOD: f64 = 9.0;
const DASH_ON: f64 = 3.0;

const CAR_COLOURS: [[f32; 3]; 6] = [
    [196.0, 32.0, 36.0],
    [36.0, 64.0, 176.0],
    [222.0, 222.0, 226.0],
    [40.0, 40.0, 46.0],
    [150.0, 152.0, 160.0],
    [24.0, 120.0, 92.0],
];
const PEDESTRIAN_COLOURS: [[f32; 3]; 2] = [[244.0, 124.0, 24.0], [204.0, 30.0, 44.0]];
const CYCLIST_COLOURS: [[f32; 3]; 2] = [[40.0, 172.0, 64.0], [232.0, 204.0, 32.0]];

/// Sun direction (unit, world frame).
const LIGHT: [f64; 3] = [
    0.303_045_763_365_663,
    0.505_076_272_276_105,
    0.808_122_035_641_768,
];
const AMBIENT: f64 = 0.3;

/// A rasterizer that owns its z-buffer (allocated on construction or when the image size
/// grows, never per frame otherwise).
#[derive(Debug, Default, Clone)]
pub struct Renderer {
    /// 1 / depth of the nearest box drawn at each pixel (0 = nothing).
    zbuf: Vec<f32>,
}

fn lerp(a: [f32; 3], b: [f32; 3], t: f32) -> [f32; 3] {
    [
        a[0] + (b[0] - a[0]) * t,
        a[1] + (b[1] - a[1]) * t,
        a[2] + (b[2] - a[2]) * t,
    ]
}

fn put(px: &mut [u8], c: [f32; 3]) {
    // `as u8` saturates (and maps NaN to 0): never panics.
    px[0] = c[0] as u8;
    px[1] = c[1] as u8;
    px[2] = c[2] as u8;
}

/// Small brightness variation in [-amp, amp] for a ground cell.
fn cell_jitter(x: f64, y: f64, scale: f64, amp: f32) -> f32 {
    let ix = (x * scale).floor() as i64 as u64;
    let iy = (y * scale).floor() as i64 as u64;
    let h = mix64(ix.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ iy);
    ((h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
}

fn shade(c: [f32; 3], k: f32) -> [f32; 3] {
    [c[0] * k, c[1] * k, c[2] * k]
}

impl Renderer {
    /// A renderer with a z-buffer for `width × height` images.
    pub fn new(width: u32, height: u32) -> Renderer {
        Renderer {
            zbuf: vec![0.0; width as usize * height as usize],
        }
    }

    /// Renders the world seen by `cam` into `out` (see [`render_scene`]).
    pub fn render(
        &mut self,
        cam: &CameraSpec,
        ego: &EgoState,
        road: &Road,
        actors: &[GtObject],
        noise_seed: u64,
        out: &mut RgbImage,
    ) {
        let (w, h) = (cam.width as usize, cam.height as usize);
        let Some(n) = w.checked_mul(h).filter(|n| n.checked_mul(3).is_some()) else {
            out.width = 0;
            out.height = 0;
            out.data.clear();
            return;
        };
        out.width = cam.width;
        out.height = cam.height;
        out.data.resize(n * 3, 0);
        self.zbuf.resize(n, 0.0);
        self.zbuf.fill(0.0);
        if n == 0 {
            return;
        }
        let pose = pose_in_world(cam, ego);
        draw_background(cam, &pose, road, &mut out.data);
        for a in actors {
            self.draw_box(cam, &pose, a, &mut out.data);
        }
        add_noise(noise_seed, &mut out.data);
    }

    fn draw_box(&mut self, cam: &CameraSpec, pose: &CameraPose, a: &GtObject, data: &mut [u8]) {
        let vals = [a.x, a.y, a.z, a.length, a.width, a.height, a.yaw];
        if vals.iter().any(|v| !v.is_finite()) {
            return;
        }
        let dx = a.x - pose.origin[0];
        let dy = a.y - pose.origin[1];
        if dx * dx + dy * dy > MAX_ACTOR_DISTANCE * MAX_ACTOR_DISTANCE {
            return;
        }
        let (s, c) = det::sin_cos(a.yaw);
        let (hl, hw) = (0.5 * a.length.abs(), 0.5 * a.width.abs());
        let (zb, zt) = (a.z - 0.5 * a.height.abs(), a.z + 0.5 * a.height.abs());
        // Corner index: bit 2 = +x (front), bit 1 = +y (left), bit 0 = top.
        let mut world = [[0.0f64; 3]; 8];
        let mut camc = [[0.0f64; 3]; 8];
        let mut any_front = false;
        for (i, (wc, cc)) in world.iter_mut().zip(camc.iter_mut()).enumerate() {
            let lx = if i & 4 != 0 { hl } else { -hl };
            let ly = if i & 2 != 0 { hw } else { -hw };
            let z = if i & 1 != 0 { zt } else { zb };
            *wc = [a.x + c * lx - s * ly, a.y + s * lx + c * ly, z];
            *cc = pose.to_camera(*wc);
            any_front |= cc[2] >= NEAR_DEPTH;
        }
        if !any_front {
            return;
        }
        let base = match a.class {
            ActorClass::Car => CAR_COLOURS[a.id as usize % CAR_COLOURS.len()],
            ActorClass::Pedestrian => PEDESTRIAN_COLOURS[a.id as usize % 2],
            ActorClass::Cyclist => CYCLIST_COLOURS[a.id as usize % 2],
        };
        // (corner loop, outward world normal); the bottom face is never visible.
        let faces: [([usize; 4], [f64; 3]); 5] = [
            ([4, 6, 7, 5], [c, s, 0.0]),
            ([0, 2, 3, 1], [-c, -s, 0.0]),
            ([2, 6, 7, 3], [-s, c, 0.0]),
            ([0, 4, 5, 1], [s, -c, 0.0]),
            ([1, 5, 7, 3], [0.0, 0.0, 1.0]),
        ];
        for (quad, nrm) in faces {
            let p = world[quad[0]];
            let to_face = [
                p[0] - pose.origin[0],
                p[1] - pose.origin[1],
                p[2] - pose.origin[2],
            ];
            if nrm[0] * to_face[0] + nrm[1] * to_face[1] + nrm[2] * to_face[2] >= 0.0 {
                continue; // back face
            }
            // Wrapped ("half") Lambert: 0.5 + 0.5 n·L, so that the faces turned away from the
            // sun still get distinct shades instead of one flat ambient.
            let lambert = 0.5 + 0.5 * (nrm[0] * LIGHT[0] + nrm[1] * LIGHT[1] + nrm[2] * LIGHT[2]);
            let colour = shade(base, (AMBIENT + (1.0 - AMBIENT) * lambert) as f32);
            let rgb = [colour[0] as u8, colour[1] as u8, colour[2] as u8];
            // Clip the quad against the near plane (Sutherland–Hodgman).
            let mut poly = [[0.0f64; 3]; 8];
            let mut m = 0;
            for e in 0..4 {
                let p0 = camc[quad[e]];
                let p1 = camc[quad[(e + 1) % 4]];
                let in0 = p0[2] >= NEAR_DEPTH;
                let in1 = p1[2] >= NEAR_DEPTH;
                if in0 {
                    poly[m] = p0;
                    m += 1;
                }
                if in0 != in1 {
                    let t = (NEAR_DEPTH - p0[2]) / (p1[2] - p0[2]);
                    poly[m] = [
                        p0[0] + t * (p1[0] - p0[0]),
                        p0[1] + t * (p1[1] - p0[1]),
                        NEAR_DEPTH,
                    ];
                    m += 1;
                }
            }
            if m < 3 {
                continue;
            }
            let mut scr = [[0.0f64; 3]; 8];
            for (sp, pc) in scr.iter_mut().zip(&poly[..m]) {
                let iz = 1.0 / pc[2];
                *sp = [
                    cam.cx + cam.fx * pc[0] * iz,
                    cam.cy + cam.fy * pc[1] * iz,
                    iz,
                ];
            }
            for k in 1..m - 1 {
                fill_triangle(
                    &mut self.zbuf,
                    data,
                    cam.width as usize,
                    cam.height as usize,
                    [scr[0], scr[k], scr[k + 1]],
                    rgb,
                );
            }
        }
    }
}

/// Fills a screen triangle (x, y, 1/depth) with z-test on 1/depth (larger is nearer),
/// sampling pixel centres.
fn fill_triangle(
    zbuf: &mut [f32],
    data: &mut [u8],
    w: usize,
    h: usize,
    p: [[f64; 3]; 3],
    rgb: [u8; 3],
) {
    let area =
        (p[1][0] - p[0][0]) * (p[2][1] - p[0][1]) - (p[1][1] - p[0][1]) * (p[2][0] - p[0][0]);
    if area.is_nan() || area.abs() <= 1e-12 {
        return; // degenerate or non-finite
    }
    let inv = 1.0 / area;
    let lo = |a: f64, b: f64, c: f64, lim: usize| {
        (a.min(b).min(c).floor().max(0.0).min(lim as f64)) as usize
    };
    let hi = |a: f64, b: f64, c: f64, lim: usize| {
        (a.max(b).max(c).ceil().max(0.0).min(lim as f64)) as usize
    };
    let (x0, x1) = (
        lo(p[0][0], p[1][0], p[2][0], w),
        hi(p[0][0], p[1][0], p[2][0], w),
    );
    let (y0, y1) = (
        lo(p[0][1], p[1][1], p[2][1], h),
        hi(p[0][1], p[1][1], p[2][1], h),
    );
    // Barycentric weights are affine in (x, y): w_i = a_i * x + b_i * y + c_i.
    let edge = |i: usize, j: usize| {
        let (pi, pj) = (p[i], p[j]);
        // weight of the vertex opposite edge (i, j)
        let a = -(pj[1] - pi[1]) * inv;
        let b = (pj[0] - pi[0]) * inv;
        let c = -(a * pi[0] + b * pi[1]);
        (a, b, c)
    };
    let e0 = edge(1, 2);
    let e1 = edge(2, 0);
    let e2 = edge(0, 1);
    for y in y0..y1 {
        let py = y as f64 + 0.5;
        let row = y * w;
        for x in x0..x1 {
            let px = x as f64 + 0.5;
            let w0 = e0.0 * px + e0.1 * py + e0.2;
            let w1 = e1.0 * px + e1.1 * py + e1.2;
            let w2 = e2.0 * px + e2.1 * py + e2.2;
            if w0 < 0.0 || w1 < 0.0 || w2 < 0.0 {
                continue;
            }
            let iz = (w0 * p[0][2] + w1 * p[1][2] + w2 * p[2][2]) as f32;
            let i = row + x;
            if iz > zbuf[i] {
                zbuf[i] = iz;
                data[3 * i..3 * i + 3].copy_from_slice(&rgb);
            }
        }
    }
}

/// Sky, ground, road and markings for every pixel.
fn draw_background(cam: &CameraSpec, pose: &CameraPose, road: &Road, data: &mut [u8]) {
    let w = cam.width as usize;
    let (ox, oy, hc) = (pose.origin[0], pose.origin[1], pose.origin[2]);
    let (f, r, dn) = (pose.forward, pose.right, pose.down);
    let window = road.window(ox, oy, GROUND_FAR + road.half_width() + 20.0);
    let half = road.half_width();
    let lw = road.lane_width;
    let lanes = f64::from(road.lanes);
    let inv_fx = 1.0 / cam.fx;
    for (row, line) in data.chunks_exact_mut(3 * w).enumerate() {
        let b = (row as f64 + 0.5 - cam.cy) / cam.fy;
        let dr = [f[0] + b * dn[0], f[1] + b * dn[1], f[2] + b * dn[2]];
        // The camera has no roll, so `right` is horizontal and dz is constant along a row.
        let dz = dr[2];
        let dr_norm2 = dr[0] * dr[0] + dr[1] * dr[1] + dr[2] * dr[2];
        if !(dz < -1e-9 && hc > 0.0) {
            for (col, px) in line.chunks_exact_mut(3).enumerate() {
                let a = (col as f64 + 0.5 - cam.cx) * inv_fx;
                let e = dz / (dr_norm2 + a * a).sqrt();
                put(
                    px,
                    lerp(SKY_HORIZON, SKY_ZENITH, (e * 2.5).clamp(0.0, 1.0) as f32),
                );
            }
            continue;
        }
        let t = hc / -dz;
        let horiz = t * (dr[0] * dr[0] + dr[1] * dr[1]).sqrt();
        if horiz > GROUND_FAR {
            let c = lerp(GRASS, HAZE, 0.75);
            for px in line.chunks_exact_mut(3) {
                put(px, c);
            }
            continue;
        }
        let haze = ((horiz - 40.0) / 210.0).clamp(0.0, 0.75) as f32;
        // Half width of a marking: 7.5 cm, widened to about a pixel's footprint far away.
        let mark = (0.5 * t * dr_norm2.sqrt() * inv_fx).max(0.075);
        let bx = ox + t * dr[0];
        let by = oy + t * dr[1];
        let sx = t * r[0] * inv_fx;
        let sy = t * r[1] * inv_fx;
        for (col, px) in line.chunks_exact_mut(3).enumerate() {
            let du = col as f64 + 0.5 - cam.cx;
            let gx = bx + du * sx;
            let gy = by + du * sy;
            let c = match window.lateral(gx, gy) {
                Some((d, seg)) if d.abs() <= half + KERB_WIDTH => {
                    // Nearest lane boundary j (0 = right edge, lanes = left edge).
                    let j = (d / lw + 0.5 * lanes).round().clamp(0.0, lanes);
                    let dj = (j - 0.5 * lanes) * lw;
                    let on_line = (d - dj).abs() < mark;
                    if on_line
                        && (j == 0.0 || j == lanes || {
                            let s = window.arc_length(seg, gx, gy);
                            s - DASH_PERIOD * (s / DASH_PERIOD).floor() < DASH_ON
                        })
                    {
                        MARKING
                    } else if d.abs() > half {
                        KERB
                    } else {
                        let j = cell_jitter(gx, gy, 2.0, 4.0);
                        [ASPHALT[0] + j, ASPHALT[1] + j, ASPHALT[2] + j]
                    }
                }
                _ => {
                    let j = cell_jitter(gx, gy, 1.0, 10.0);
                    [GRASS[0] + j, GRASS[1] + j, GRASS[2] + j]
                }
            };
            put(px, lerp(c, HAZE, haze));
        }
    }
}

/// Adds deterministic noise in [-3, 3] to every byte.
fn add_noise(seed: u64, data: &mut [u8]) {
    let key = mix64(seed);
    for (i, px) in data.chunks_exact_mut(3).enumerate() {
        let r = mix64(key ^ i as u64);
        for (c, v) in px.iter_mut().enumerate() {
            let n = ((r >> (16 * c)) & 0xFFFF) % 7;
            *v = (i32::from(*v) + n as i32 - 3).clamp(0, 255) as u8;
        }
    }
}

thread_local! {
    static RENDERER: RefCell<Renderer> = RefCell::new(Renderer::default());
}

/// Renders the world seen by `cam` into `out` (out.width/height = cam size; data resized).
/// Ground plane z = 0: asphalt inside the road, grass/curb outside, lane markings (dashed
/// white between lanes, solid white edges); a sky gradient above the horizon; actors as 3-D
/// boxes with per-face Lambertian shading in class colours (cars in a few colours,
/// pedestrians orange/red, cyclists green/yellow), z-buffered; `noise_seed` adds
/// deterministic per-pixel noise of a few levels.
///
/// Uses a per-thread [`Renderer`] (its z-buffer is allocated on the first call and when the
/// image grows); hold your own [`Renderer`] to control that allocation.
pub fn render_scene(
    cam: &CameraSpec,
    ego: &EgoState,
    road: &Road,
    actors: &[GtObject],
    noise_seed: u64,
    out: &mut RgbImage,
) {
    let done = RENDERER
        .try_with(|r| match r.try_borrow_mut() {
            Ok(mut r) => {
                r.render(cam, ego, road, actors, noise_seed, out);
                true
            }
            Err(_) => false,
        })
        .unwrap_or(false);
    if !done {
        Renderer::default().render(cam, ego, road, actors, noise_seed, out);
    }
}
