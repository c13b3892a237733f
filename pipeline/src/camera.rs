//! The camera model: pinhole projection between the ego frame and camera pixels, with
//! deterministic trigonometry.
//!
//! This is what the BEV view transform needs (the pipeline's calibration contract); the
//! simulator's renderer uses the same model from here, adding the world frame.
//!
//! Contract:
//! - [`project_ego`] maps an ego-frame point to `(u, v, depth)` in continuous pixel
//!   coordinates (pixel `(i, j)` covers `[i, i + 1) × [j, j + 1)`), `None` when the point is
//!   not at least [`NEAR_DEPTH`] in front of the camera; [`pixel_ray_ego`] is its inverse.
//! - All trigonometry goes through [`det`], plain `+ - * /` and `sqrt` (IEEE exact), so the
//!   results are bit-identical on every platform and CPU, unlike the system libm.
//!
//! Cost: a handful of flops per call; nothing here allocates. Never panics, whatever the
//! input (non-finite input gives non-finite or `None` output).

use serde::{Deserialize, Serialize};

/// A pinhole camera mounted on the ego vehicle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CameraSpec {
    /// Short name, e.g. "front"; topics are `/cam/<name>/image_raw` and `/cam/<name>/camera_info`.
    pub name: String,
    /// Image width, px.
    pub width: u32,
    /// Image height, px.
    pub height: u32,
    /// Focal length, px.
    pub fx: f64,
    /// Focal length, px.
    pub fy: f64,
    /// Principal point, px.
    pub cx: f64,
    /// Principal point, px.
    pub cy: f64,
    /// Mount position in the ego frame, m.
    pub x: f64,
    /// Mount position in the ego frame, m.
    pub y: f64,
    /// Mount position in the ego frame, m.
    pub z: f64,
    /// Mount heading in the ego frame (0 = looking forward, +pi/2 = left), rad.
    pub yaw: f64,
    /// Mount pitch (positive looks down), rad.
    pub pitch: f64,
    /// The lens's distortion: how its images differ from the pinhole above. Preprocessing
    /// undistorts them ([`crate::perception::Preprocess::for_camera`]); everything after it sees an
    /// ideal pinhole with these intrinsics. Absent from serialized specs when none.
    #[serde(default, skip_serializing_if = "Distortion::is_none")]
    pub distortion: Distortion,
}

/// Lens distortion, in OpenCV's (and ROS `camera_info`'s) models, on normalized image
/// coordinates `(x, y) = ((u − cx) / fx, (v − cy) / fy)` of the ideal pinhole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum Distortion {
    /// An ideal pinhole.
    #[default]
    None,
    /// ROS `plumb_bob` (k4 = k5 = k6 = 0) and `rational_polynomial`: with `r² = x² + y²`,
    /// `radial = (1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r² + k5 r⁴ + k6 r⁶)` and
    /// `x' = x radial + 2 p1 x y + p2 (r² + 2x²)`, `y' = y radial + p1 (r² + 2y²) + 2 p2 x y`.
    Polynomial {
        /// k1 … k6.
        k: [f64; 6],
        /// p1, p2 (tangential).
        p: [f64; 2],
    },
    /// ROS `equidistant` (a fisheye): `θ = atan r`,
    /// `θd = θ (1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)`, `(x', y') = (θd / r) (x, y)`.
    Equidistant {
        /// k1 … k4.
        k: [f64; 4],
    },
}

impl Distortion {
    /// The ROS `camera_info` form of this lens: the model's name and its coefficients in
    /// `camera_info` order (`plumb_bob`: k1, k2, p1, p2, k3; `rational_polynomial` adds
    /// k4, k5, k6; `equidistant`: k1 … k4). An ideal pinhole is `plumb_bob` with zeros.
    pub fn ros_model(&self) -> (&'static str, Vec<f64>) {
        match self {
            Distortion::None => ("plumb_bob", vec![0.0; 5]),
            Distortion::Polynomial { k, p } if k[3..] == [0.0; 3] => {
                ("plumb_bob", vec![k[0], k[1], p[0], p[1], k[2]])
            }
            Distortion::Polynomial { k, p } => (
                "rational_polynomial",
                vec![k[0], k[1], p[0], p[1], k[2], k[3], k[4], k[5]],
            ),
            Distortion::Equidistant { k } => ("equidistant", k.to_vec()),
        }
    }

    /// The model of a ROS `camera_info` (`distortion_model`, `d`): `Ok(None)` for an ideal
    /// pinhole (every coefficient zero, except for `equidistant`, which is never a pinhole),
    /// `Err` naming the model when it is not one of the three above and has coefficients.
    pub fn from_ros(model: &str, d: &[f64]) -> Result<Distortion, String> {
        let c = |i: usize| d.get(i).copied().unwrap_or(0.0);
        let zero = d.iter().all(|&v| v == 0.0);
        match model {
            "equidistant" => Ok(Distortion::Equidistant {
                k: [c(0), c(1), c(2), c(3)],
            }),
            _ if zero => Ok(Distortion::None),
            "plumb_bob" | "rational_polynomial" => Ok(Distortion::Polynomial {
                k: [c(0), c(1), c(4), c(5), c(6), c(7)],
                p: [c(2), c(3)],
            }),
            other => Err(format!(
                "distortion model {other:?} (coefficients {d:?}) is not one redline knows \
                 (plumb_bob, rational_polynomial, equidistant)"
            )),
        }
    }

    /// Whether this is an ideal pinhole.
    pub fn is_none(&self) -> bool {
        *self == Distortion::None
    }

    /// Where the lens puts the ray of ideal normalized coordinates `(x, y)`: plain
    /// arithmetic and [`det::atan2`], bit-identical on every platform.
    pub fn distort(&self, x: f64, y: f64) -> (f64, f64) {
        match self {
            Distortion::None => (x, y),
            Distortion::Polynomial { k, p } => {
                let r2 = x * x + y * y;
                let radial = (1.0 + r2 * (k[0] + r2 * (k[1] + r2 * k[2])))
                    / (1.0 + r2 * (k[3] + r2 * (k[4] + r2 * k[5])));
                (
                    x * radial + 2.0 * p[0] * x * y + p[1] * (r2 + 2.0 * x * x),
                    y * radial + p[0] * (r2 + 2.0 * y * y) + 2.0 * p[1] * x * y,
                )
            }
            Distortion::Equidistant { k } => {
                let r = (x * x + y * y).sqrt();
                if r == 0.0 {
                    return (x, y);
                }
                let t = det::atan2(r, 1.0);
                let t2 = t * t;
                let td = t * (1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3]))));
                (x * td / r, y * td / r)
            }
        }
    }
}

impl CameraSpec {
    /// The rotation `(x, y, z, w)` of this camera's ROS optical frame (z forward, x right,
    /// y down) in the ego frame (x forward, y left, z up): yaw about z, then pitch about the
    /// new y (positive looks down), then the optical axes. Deterministic ([`det`]).
    pub fn optical_rotation(&self) -> [f64; 4] {
        type Q = [f64; 4];
        let mul = |a: Q, b: Q| -> Q {
            [
                a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1],
                a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0],
                a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3],
                a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2],
            ]
        };
        let (sy, cy) = det::sin_cos(0.5 * self.yaw);
        let (sp, cp) = det::sin_cos(0.5 * self.pitch);
        const OPTICAL_TO_BODY: Q = [-0.5, 0.5, -0.5, 0.5];
        mul(mul([0.0, 0.0, sy, cy], [0.0, sp, 0.0, cp]), OPTICAL_TO_BODY)
    }

    /// Horizontal field of view, degrees: `2 atan(width / (2 fx))` (deterministic; a
    /// non-positive focal length gives 180).
    pub fn hfov_deg(&self) -> f64 {
        let half = if self.fx > 0.0 {
            det::atan2(0.5 * f64::from(self.width), self.fx)
        } else {
            0.5 * std::f64::consts::PI
        };
        (2.0 * half).to_degrees()
    }

    /// Mount heading, degrees (0 = forward, +90 = left).
    pub fn yaw_deg(&self) -> f64 {
        self.yaw.to_degrees()
    }
}

/// Minimum depth (along the optical axis) of a projectable point, m.
pub const NEAR_DEPTH: f64 = 0.1;

/// Deterministic elementary functions: same bits on every machine (no libm, no FMA).
///
/// Accurate to a few ulp for |x| < 1e6 rad (the range reduction is exact there).
pub mod det {
    use std::f64::consts::{FRAC_2_PI, FRAC_PI_2, FRAC_PI_4, PI};

    // pi/2 split as in fdlibm: the first two parts have 33 significant bits, so `k * part`
    // is exact for |k| < 2^20.
    const PIO2_1: f64 = 1.570_796_326_734_125_6;
    const PIO2_2: f64 = 6.077_100_506_303_966e-11;
    const PIO2_2T: f64 = 2.022_266_248_795_950_6e-21;

    /// `(sin x, cos x)`.
    pub fn sin_cos(x: f64) -> (f64, f64) {
        if !x.is_finite() {
            return (f64::NAN, f64::NAN);
        }
        let k = (x * FRAC_2_PI).round();
        let r = ((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_2T;
        let r2 = r * r;
        // Taylor series on |r| <= pi/4 (truncation error < 1e-17).
        let s = r
            * (1.0
                + r2 * (-1.0 / 6.0
                    + r2 * (1.0 / 120.0
                        + r2 * (-1.0 / 5040.0
                            + r2 * (1.0 / 362_880.0
                                + r2 * (-1.0 / 39_916_800.0
                                    + r2 * (1.0 / 6_227_020_800.0
                                        + r2 * (-1.0 / 1_307_674_368_000.0
                                            + r2 * (1.0 / 355_687_428_096_000.0)))))))));
        let c = 1.0
            + r2 * (-0.5
                + r2 * (1.0 / 24.0
                    + r2 * (-1.0 / 720.0
                        + r2 * (1.0 / 40_320.0
                            + r2 * (-1.0 / 3_628_800.0
                                + r2 * (1.0 / 479_001_600.0
                                    + r2 * (-1.0 / 87_178_291_200.0
                                        + r2 * (1.0 / 20_922_789_888_000.0))))))));
        // `k` is integral; the quadrant is k mod 4 (saturating cast never panics).
        match (k as i64).rem_euclid(4) {
            0 => (s, c),
            1 => (c, -s),
            2 => (-s, -c),
            _ => (-c, s),
        }
    }

    /// `sin x`.
    pub fn sin(x: f64) -> f64 {
        sin_cos(x).0
    }

    /// `cos x`.
    pub fn cos(x: f64) -> f64 {
        sin_cos(x).1
    }

    /// `tan x`.
    pub fn tan(x: f64) -> f64 {
        let (s, c) = sin_cos(x);
        s / c
    }

    /// atan on [0, 1].
    fn atan01(t: f64) -> f64 {
        // tan(pi/8)
        let (base, z) = if t > 0.414_213_562_373_095_03 {
            (FRAC_PI_4, (t - 1.0) / (t + 1.0))
        } else {
            (0.0, t)
        };
        // atan(z) = 2 atan(z / (1 + sqrt(1 + z^2))), |u| <= 0.2
        let u = z / (1.0 + (1.0 + z * z).sqrt());
        let u2 = u * u;
        let mut sum = 0.0;
        let mut n = 23.0;
        while n > 0.0 {
            sum = 1.0 / n - u2 * sum;
            n -= 2.0;
        }
        base + 2.0 * u * sum
    }

    /// `atan2(y, x)` in (-pi, pi]; `atan2(0, 0) = 0`; NaN in, NaN out.
    pub fn atan2(y: f64, x: f64) -> f64 {
        if x.is_nan() || y.is_nan() {
            return f64::NAN;
        }
        let ax = x.abs();
        let ay = y.abs();
        if ax == 0.0 && ay == 0.0 {
            return if x.is_sign_negative() { PI } else { 0.0 };
        }
        let mut a = if ay > ax {
            FRAC_PI_2 - atan01(if ay.is_infinite() { 0.0 } else { ax / ay })
        } else {
            atan01(if ax.is_infinite() { 0.0 } else { ay / ax })
        };
        if x < 0.0 {
            a = PI - a;
        }
        if y < 0.0 {
            -a
        } else {
            a
        }
    }

    /// Wraps an angle into (-pi, pi].
    pub fn wrap_angle(a: f64) -> f64 {
        if !a.is_finite() {
            return a;
        }
        let two_pi = 2.0 * PI;
        let mut r = a - two_pi * (a / two_pi).round();
        if r <= -PI {
            r += two_pi;
        } else if r > PI {
            r -= two_pi;
        }
        r
    }
}

type V3 = [f64; 3];

fn dot(a: V3, b: V3) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Orientation and position of a camera: its optical axes (right = +x, down = +y,
/// forward = +z of the ROS optical frame) expressed in some parent frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraPose {
    /// Optical centre, m.
    pub origin: [f64; 3],
    /// Unit vector of the optical axis (camera +z).
    pub forward: [f64; 3],
    /// Unit vector of the image's +u direction (camera +x).
    pub right: [f64; 3],
    /// Unit vector of the image's +v direction (camera +y).
    pub down: [f64; 3],
}

impl CameraPose {
    /// The camera's pose in the ego frame.
    pub fn in_ego(cam: &CameraSpec) -> CameraPose {
        let (sy, cy) = det::sin_cos(cam.yaw);
        let (sp, cp) = det::sin_cos(cam.pitch);
        CameraPose {
            origin: [cam.x, cam.y, cam.z],
            forward: [cp * cy, cp * sy, -sp],
            right: [sy, -cy, 0.0],
            // forward × right
            down: [-sp * cy, -sp * sy, -cp],
        }
    }

    /// Point (same frame as the pose) to camera optical coordinates `(x, y, z)`.
    pub fn to_camera(&self, p: [f64; 3]) -> [f64; 3] {
        let q = [
            p[0] - self.origin[0],
            p[1] - self.origin[1],
            p[2] - self.origin[2],
        ];
        [dot(q, self.right), dot(q, self.down), dot(q, self.forward)]
    }
}

/// Pixel coordinates of a point in camera optical coordinates, if it is at least
/// [`NEAR_DEPTH`] in front.
fn pinhole(cam: &CameraSpec, pc: [f64; 3]) -> Option<(f64, f64, f64)> {
    // `>` is false for NaN, so non-finite input gives None.
    if pc[2] > NEAR_DEPTH {
        Some((
            cam.cx + cam.fx * pc[0] / pc[2],
            cam.cy + cam.fy * pc[1] / pc[2],
            pc[2],
        ))
    } else {
        None
    }
}

/// Ray of pixel `(u, v)` in the ego frame: (origin, unit direction). Used by the lead to
/// build the BEV projection table. `(u, v)` are continuous coordinates (pixel centres at
/// `i + 0.5`); the inverse of [`project_ego`].
pub fn pixel_ray_ego(cam: &CameraSpec, u: f64, v: f64) -> ([f64; 3], [f64; 3]) {
    let p = CameraPose::in_ego(cam);
    let a = (u - cam.cx) / cam.fx;
    let b = (v - cam.cy) / cam.fy;
    let d = [
        p.forward[0] + a * p.right[0] + b * p.down[0],
        p.forward[1] + a * p.right[1] + b * p.down[1],
        p.forward[2] + a * p.right[2] + b * p.down[2],
    ];
    let n = dot(d, d).sqrt();
    (p.origin, [d[0] / n, d[1] / n, d[2] / n])
}

/// Ego-frame point to camera pixel `(u, v, depth)` (None when not at least 0.1 m in front
/// of the camera).
pub fn project_ego(cam: &CameraSpec, x: f64, y: f64, z: f64) -> Option<(f64, f64, f64)> {
    let pc = CameraPose::in_ego(cam).to_camera([x, y, z]);
    pinhole(cam, pc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point in the ego frame, moved into the optical frame by the inverse of
    /// [`CameraSpec::optical_rotation`] and the mount position, projects through `K` to the
    /// pixel [`project_ego`] gives: a viewer drawing with the recorded mount and calibration
    /// puts boxes where redline sees them.
    #[test]
    fn optical_rotation_agrees_with_the_projection() {
        for (yaw, pitch) in [(0.0, 0.0), (1.2, 0.1), (-2.5, -0.05), (3.0, 0.3)] {
            let cam = CameraSpec {
                name: "c".into(),
                width: 256,
                height: 128,
                fx: 150.0,
                fy: 140.0,
                cx: 128.0,
                cy: 60.0,
                x: 1.2,
                y: -0.3,
                z: 1.6,
                yaw,
                pitch,
                distortion: Distortion::None,
            };
            let [qx, qy, qz, qw] = cam.optical_rotation();
            // Rotate by the conjugate: v' = q* v q, written out for a unit quaternion.
            let rot_inv = |v: [f64; 3]| {
                let (x, y, z, w) = (-qx, -qy, -qz, qw);
                let t = [
                    2.0 * (y * v[2] - z * v[1]),
                    2.0 * (z * v[0] - x * v[2]),
                    2.0 * (x * v[1] - y * v[0]),
                ];
                [
                    v[0] + w * t[0] + (y * t[2] - z * t[1]),
                    v[1] + w * t[1] + (z * t[0] - x * t[2]),
                    v[2] + w * t[2] + (x * t[1] - y * t[0]),
                ]
            };
            // 20 m along the mount's heading, a little off its axis.
            let (sin, cos) = det::sin_cos(yaw);
            let p = [cam.x + 20.0 * cos + 1.0, cam.y + 20.0 * sin - 0.5, 0.4];
            let c = rot_inv([p[0] - cam.x, p[1] - cam.y, p[2] - cam.z]);
            let (u, v) = (cam.cx + cam.fx * c[0] / c[2], cam.cy + cam.fy * c[1] / c[2]);
            let (pu, pv, depth) = project_ego(&cam, p[0], p[1], p[2]).unwrap();
            assert!(
                (u - pu).abs() < 1e-9 && (v - pv).abs() < 1e-9,
                "{yaw} {pitch}: ({u}, {v}) vs ({pu}, {pv})"
            );
            assert!((c[2] - depth).abs() < 1e-9);
        }
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // compares with std on purpose
    fn det_trig_matches_std() {
        let mut x: f64 = -20.0;
        while x < 20.0 {
            let (s, c) = det::sin_cos(x);
            assert!((s - x.sin()).abs() < 1e-15, "sin {x}");
            assert!(
                (c - x.cos()).abs() < 1e-15,
                "cos {x}: {c} vs {} ({:e})",
                x.cos(),
                c - x.cos()
            );
            x += 0.001_37;
        }
        let mut a: f64 = -3.1;
        while a < 3.1 {
            for r in [1e-3, 0.5, 1.0, 1e3] {
                let (y, xx) = (r * a.sin(), r * a.cos());
                let got = det::atan2(y, xx);
                assert!((got - y.atan2(xx)).abs() < 1e-14, "atan2 {y} {xx}: {got}");
            }
            a += 0.0071;
        }
        assert_eq!(det::atan2(0.0, 0.0), 0.0);
        assert!(det::atan2(f64::NAN, 1.0).is_nan());
        assert!((det::wrap_angle(7.0) - (7.0 - 2.0 * std::f64::consts::PI)).abs() < 1e-15);
    }
}
