//! Constant-velocity Kalman filter in the plane: state `[x, y, vx, vy]`, position measured.
//!
//! Contract:
//! - `f64` arithmetic on fixed-size arrays: no allocation, no locks, no panics, one code path
//!   (bit-identical results for the same inputs).
//! - Process model: white acceleration noise of variance `accel_noise` ((m/s²)²) per axis
//!   (the discrete white-noise-acceleration model, `Q = q·[[dt⁴/4, dt³/2], [dt³/2, dt²]]`).
//! - Measurement: position `(zx, zy)` with variance `meas_var` (m²) in every direction, plus,
//!   with [`Cv2d::update_along`], `ray_var` more along one unit direction (a camera's depth
//!   error grows along its viewing ray, not across it): `R = meas_var·I + ray_var·u·uᵀ`.
//!   With `ray_var = 0` the result is bit-identical to the isotropic [`Cv2d::update`].
//! - The covariance is kept symmetric (Joseph form update), so it stays positive definite.
//! - Non-finite or non-positive inputs never corrupt the state: `predict` ignores a
//!   non-finite or negative `dt`, `update` ignores a non-finite measurement, and variances
//!   are clamped to a small positive floor.
//!
//! Cost: a few hundred floating-point operations per call.

/// Smallest variance used anywhere (m², (m/s)²), so no matrix becomes singular.
const VAR_FLOOR: f64 = 1e-9;

/// A constant-velocity Kalman filter (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cv2d {
    /// State mean `[x, y, vx, vy]` (m, m, m/s, m/s).
    pub x: [f64; 4],
    /// State covariance.
    pub p: [[f64; 4]; 4],
}

/// `v` floored at the filter's smallest variance (non-finite: the floor). Association
/// uses it too, so that its along-ray scaling and the filter agree on `meas_var`.
pub(crate) fn var(v: f64) -> f64 {
    if v.is_finite() {
        v.max(VAR_FLOOR)
    } else {
        VAR_FLOOR
    }
}

impl Cv2d {
    /// A filter at `(x, y)` with zero velocity, position variance `pos_var` and velocity
    /// variance `vel_var` (diagonal covariance).
    pub fn new(x: f64, y: f64, pos_var: f64, vel_var: f64) -> Self {
        let (pv, vv) = (var(pos_var), var(vel_var));
        let mut p = [[0.0; 4]; 4];
        p[0][0] = pv;
        p[1][1] = pv;
        p[2][2] = vv;
        p[3][3] = vv;
        Self {
            x: [x, y, 0.0, 0.0],
            p,
        }
    }

    /// As [`Cv2d::new`], the position covariance widened by `ray_var` along the unit vector
    /// `ray` (the covariance of a measurement made along that ray, see
    /// [`Cv2d::update_along`]). Non-finite or negative `ray_var`, or a non-finite `ray`,
    /// count as 0.
    pub fn new_along(
        x: f64,
        y: f64,
        pos_var: f64,
        ray: [f64; 2],
        ray_var: f64,
        vel_var: f64,
    ) -> Self {
        let mut f = Self::new(x, y, pos_var, vel_var);
        let (u, e) = clean_ray(ray, ray_var);
        f.p[0][0] += e * u[0] * u[0];
        f.p[0][1] += e * u[0] * u[1];
        f.p[1][0] += e * u[1] * u[0];
        f.p[1][1] += e * u[1] * u[1];
        f
    }

    /// Position `(x, y)`.
    pub fn position(&self) -> (f64, f64) {
        (self.x[0], self.x[1])
    }

    /// Velocity `(vx, vy)`.
    pub fn velocity(&self) -> (f64, f64) {
        (self.x[2], self.x[3])
    }

    /// Advance the state by `dt` seconds: mean moves by `v·dt`, covariance grows by
    /// `F P Fᵀ + Q`. A non-finite or negative `dt` is ignored.
    pub fn predict(&mut self, dt: f64, accel_noise: f64) {
        if !dt.is_finite() || dt < 0.0 {
            return;
        }
        let q = if accel_noise.is_finite() {
            accel_noise.max(0.0)
        } else {
            0.0
        };
        self.x[0] += self.x[2] * dt;
        self.x[1] += self.x[3] * dt;
        // F = [[I, dt I], [0, I]]. P' = F P Fᵀ.
        let p = self.p;
        let mut fp = p;
        for c in 0..4 {
            fp[0][c] = p[0][c] + dt * p[2][c];
            fp[1][c] = p[1][c] + dt * p[3][c];
        }
        let mut n = fp;
        for row in n.iter_mut() {
            row[0] += dt * row[2];
            row[1] += dt * row[3];
        }
        let (dt2, dt3, dt4) = (dt * dt, dt * dt * dt, dt * dt * dt * dt);
        for a in 0..2 {
            n[a][a] += q * dt4 / 4.0;
            n[a][a + 2] += q * dt3 / 2.0;
            n[a + 2][a] += q * dt3 / 2.0;
            n[a + 2][a + 2] += q * dt2;
        }
        self.p = symmetrize(n);
    }

    /// Innovation `z - Hx` and its covariance `S = H P Hᵀ + R` (2×2) and inverse, with
    /// `R = r·I + e·u·uᵀ` (`r`, `e` already floored / cleaned).
    fn innovation(
        &self,
        zx: f64,
        zy: f64,
        r: f64,
        u: [f64; 2],
        e: f64,
    ) -> ([f64; 2], [[f64; 2]; 2], [[f64; 2]; 2]) {
        let y = [zx - self.x[0], zy - self.x[1]];
        // `e = 0` adds exact zeros: the isotropic case is unchanged bit for bit.
        let s = [
            [
                self.p[0][0] + r + e * u[0] * u[0],
                self.p[0][1] + e * u[0] * u[1],
            ],
            [
                self.p[1][0] + e * u[1] * u[0],
                self.p[1][1] + r + e * u[1] * u[1],
            ],
        ];
        let det = s[0][0] * s[1][1] - s[0][1] * s[1][0];
        let det = if det.is_finite() && det > VAR_FLOOR * VAR_FLOOR {
            det
        } else {
            VAR_FLOOR * VAR_FLOOR
        };
        let si = [
            [s[1][1] / det, -s[0][1] / det],
            [-s[1][0] / det, s[0][0] / det],
        ];
        (y, s, si)
    }

    /// Correct the state with a position measurement of variance `meas_var`: the mean moves
    /// toward the measurement and the covariance shrinks. Non-finite measurements are ignored.
    pub fn update(&mut self, zx: f64, zy: f64, meas_var: f64) {
        self.update_along(zx, zy, meas_var, [0.0, 0.0], 0.0);
    }

    /// [`Cv2d::update`] with `ray_var` more variance along the unit vector `ray` (see the
    /// module docs): the state moves toward the measurement less along the ray than across
    /// it. Non-finite or negative `ray_var`, or a non-finite `ray`, count as 0.
    pub fn update_along(&mut self, zx: f64, zy: f64, meas_var: f64, ray: [f64; 2], ray_var: f64) {
        if !zx.is_finite() || !zy.is_finite() {
            return;
        }
        let r = var(meas_var);
        let (u, e) = clean_ray(ray, ray_var);
        let (y, _s, si) = self.innovation(zx, zy, r, u, e);
        // K = P Hᵀ S⁻¹ (4×2); P Hᵀ = first two columns of P.
        let mut k = [[0.0; 2]; 4];
        for (i, ki) in k.iter_mut().enumerate() {
            for (j, kij) in ki.iter_mut().enumerate() {
                *kij = self.p[i][0] * si[0][j] + self.p[i][1] * si[1][j];
            }
        }
        for (i, ki) in k.iter().enumerate() {
            self.x[i] += ki[0] * y[0] + ki[1] * y[1];
        }
        // Joseph form: P = (I - KH) P (I - KH)ᵀ + K R Kᵀ.
        let mut a = [[0.0; 4]; 4]; // I - KH
        for (i, ai) in a.iter_mut().enumerate() {
            ai[i] = 1.0;
            ai[0] -= k[i][0];
            ai[1] -= k[i][1];
        }
        let ap = mul4(&a, &self.p);
        let mut n = [[0.0; 4]; 4];
        for i in 0..4 {
            for j in 0..4 {
                let mut acc = 0.0;
                for t in 0..4 {
                    acc += ap[i][t] * a[j][t];
                }
                let (ku_i, ku_j) = (
                    k[i][0] * u[0] + k[i][1] * u[1],
                    k[j][0] * u[0] + k[j][1] * u[1],
                );
                n[i][j] = acc + r * (k[i][0] * k[j][0] + k[i][1] * k[j][1]) + e * ku_i * ku_j;
            }
        }
        self.p = symmetrize(n);
    }
}

/// The ray and its added variance as the filter uses them: a non-finite ray, or a
/// non-finite or non-positive variance, is no added variance (`[0, 0]`, 0: exact zeros).
fn clean_ray(ray: [f64; 2], ray_var: f64) -> ([f64; 2], f64) {
    if ray[0].is_finite() && ray[1].is_finite() && ray_var.is_finite() && ray_var > 0.0 {
        (ray, ray_var)
    } else {
        ([0.0, 0.0], 0.0)
    }
}

fn mul4(a: &[[f64; 4]; 4], b: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    let mut c = [[0.0; 4]; 4];
    for i in 0..4 {
        for j in 0..4 {
            let mut acc = 0.0;
            for t in 0..4 {
                acc += a[i][t] * b[t][j];
            }
            c[i][j] = acc;
        }
    }
    c
}

/// Average `p` with its transpose and floor the diagonal (NaN becomes the floor).
#[allow(clippy::needless_range_loop)] // index pairs (i, j) and (j, i) read clearer as loops
fn symmetrize(mut p: [[f64; 4]; 4]) -> [[f64; 4]; 4] {
    for i in 0..4 {
        for j in (i + 1)..4 {
            let m = 0.5 * (p[i][j] + p[j][i]);
            p[i][j] = m;
            p[j][i] = m;
        }
        if p[i][i].is_nan() || p[i][i] < VAR_FLOOR {
            p[i][i] = VAR_FLOOR;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predict_moves_by_v_dt_and_grows_covariance() {
        let mut f = Cv2d::new(1.0, 2.0, 0.5, 1.0);
        f.x[2] = 3.0;
        f.x[3] = -1.0;
        let p0 = f.p;
        f.predict(0.5, 1.0);
        assert!((f.x[0] - 2.5).abs() < 1e-12);
        assert!((f.x[1] - 1.5).abs() < 1e-12);
        for (i, (row, row0)) in f.p.iter().zip(p0.iter()).enumerate() {
            assert!(row[i] > row0[i], "variance {i} did not grow");
        }
        // Position variance grows by dt²·vel_var + q dt⁴/4.
        assert!((f.p[0][0] - (0.5 + 0.25 * 1.0 + 0.0625 / 4.0)).abs() < 1e-12);
        // Bad dt is ignored.
        let before = f;
        f.predict(f64::NAN, 1.0);
        f.predict(-1.0, 1.0);
        assert_eq!(f, before);
    }

    #[test]
    fn update_pulls_toward_measurement_and_shrinks_covariance() {
        let mut f = Cv2d::new(0.0, 0.0, 4.0, 1.0);
        let p0 = f.p;
        f.update(2.0, -2.0, 4.0);
        // Equal variances: halfway.
        assert!((f.x[0] - 1.0).abs() < 1e-12);
        assert!((f.x[1] + 1.0).abs() < 1e-12);
        assert!(f.p[0][0] < p0[0][0] && f.p[1][1] < p0[1][1]);
        assert!((f.p[0][0] - 2.0).abs() < 1e-12);
        let before = f;
        f.update(f64::NAN, 1.0, 1.0);
        assert_eq!(f, before);
    }

    #[test]
    fn update_along_trusts_the_measurement_less_along_its_ray() {
        // No added variance: bit-identical to the isotropic update, whatever the ray.
        let start = {
            let mut f = Cv2d::new(1.0, -2.0, 0.7, 3.0);
            f.predict(0.1, 2.0);
            f
        };
        let (mut a, mut b) = (start, start);
        a.update(3.0, 1.5, 0.25);
        b.update_along(3.0, 1.5, 0.25, [0.6, 0.8], 0.0);
        assert_eq!(a, b);
        // Ray along +x with 15 m² more variance there: the state moves toward a measurement
        // 2 m off in x and 2 m off in y much less in x than in y.
        let mut f = Cv2d::new(0.0, 0.0, 1.0, 1.0);
        f.update_along(2.0, 2.0, 1.0, [1.0, 0.0], 15.0);
        assert!(
            (f.x[1] - 1.0).abs() < 1e-12,
            "across the ray: halfway, {}",
            f.x[1]
        );
        assert!(
            (f.x[0] - 2.0 / 17.0).abs() < 1e-12,
            "along the ray: 1/17, {}",
            f.x[0]
        );
        assert!(f.p[0][0] > f.p[1][1]);
        // A bad ray or variance is no added variance.
        let (mut c, mut d) = (start, start);
        c.update_along(3.0, 1.5, 0.25, [f64::NAN, 0.0], 9.0);
        d.update_along(3.0, 1.5, 0.25, [1.0, 0.0], f64::INFINITY);
        assert_eq!((c, d), (a, a));
        // A filter born from such a measurement is as uncertain along the ray.
        let g = Cv2d::new_along(5.0, 0.0, 0.25, [0.0, 1.0], 4.0, 100.0);
        assert_eq!((g.p[0][0], g.p[1][1], g.p[0][1]), (0.25, 4.25, 0.0));
        let plain = Cv2d::new(5.0, 0.0, 0.25, 100.0);
        assert_eq!(
            Cv2d::new_along(5.0, 0.0, 0.25, [f64::NAN, 1.0], 4.0, 100.0),
            plain
        );
        assert_eq!(
            Cv2d::new_along(5.0, 0.0, 0.25, [0.0, 1.0], -4.0, 100.0),
            plain
        );
    }

    #[test]
    fn converges_on_constant_velocity_target_with_noise() {
        // Deterministic pseudo-noise (xorshift), std ~0.3 m.
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut noise = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1.0
        };
        let (vx, vy) = (8.0, -3.0);
        let mut f = Cv2d::new(0.0, 0.0, 1.0, 100.0);
        let dt = 0.1;
        for k in 1..=100 {
            f.predict(dt, 0.5);
            let t = k as f64 * dt;
            f.update(vx * t + noise(), vy * t + noise(), 0.09);
        }
        let t = 10.0;
        assert!((f.x[0] - vx * t).abs() < 0.3, "x {}", f.x[0]);
        assert!((f.x[1] - vy * t).abs() < 0.3, "y {}", f.x[1]);
        assert!((f.x[2] - vx).abs() < 0.5, "vx {}", f.x[2]);
        assert!((f.x[3] - vy).abs() < 0.5, "vy {}", f.x[3]);
        assert!(
            f.p[0][0] < 0.09,
            "position variance did not settle: {}",
            f.p[0][0]
        );
    }
}
