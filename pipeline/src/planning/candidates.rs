//! The shapes a planning candidate is made of: a speed profile in time (move toward a
//! target speed at a constant rate, then hold) and a lateral manoeuvre in arc length (a
//! quintic from the current offset and heading to a target offset, then hold).
//!
//! Contract: pure f32 functions of their parameters, one code path, no allocation, lock or
//! panic; a zero or negative rate is clamped to 1e-3 m/s². A manoeuvre's length must be
//! positive (the planner makes it at least `MIN_LANE_CHANGE_M`). Cost: O(1) per evaluation.

/// Speed profile: move toward `target` at `rate` (m/s²), then hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpeedProfile {
    pub(super) v0: f32,
    pub(super) target: f32,
    pub(super) rate: f32,
}

impl SpeedProfile {
    /// (distance travelled, speed) at time t.
    pub(super) fn at(&self, t: f32) -> (f32, f32) {
        let dv = self.target - self.v0;
        let rate = self.rate.max(1e-3);
        let t1 = dv.abs() / rate;
        let a = if dv >= 0.0 { rate } else { -rate };
        if t <= t1 {
            (self.v0 * t + 0.5 * a * t * t, self.v0 + a * t)
        } else {
            let s1 = self.v0 * t1 + 0.5 * a * t1 * t1;
            (s1 + self.target * (t - t1), self.target)
        }
    }
}
/// A lateral manoeuvre: the quintic of [`lateral`] anchored at arc length `s_start`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lateral {
    pub(super) d0: f32,
    pub(super) slope0: f32,
    pub(super) d1: f32,
    pub(super) len: f32,
    pub(super) s_start: f32,
}

impl Lateral {
    /// `(d, dd/ds)` at absolute arc length `s`.
    pub(super) fn at(&self, s: f32) -> (f32, f32) {
        lateral(self.d0, self.slope0, self.d1, self.len, s - self.s_start)
    }
}

/// Lateral offset as a quintic in arc length `ds` over `[0, len]`: starts at `d0` with slope
/// `slope0` (dd/ds) and zero curvature, ends at `d1` with zero slope and curvature, then
/// holds `d1`. Returns `(d, dd/ds)`.
fn lateral(d0: f32, slope0: f32, d1: f32, len: f32, ds: f32) -> (f32, f32) {
    let u = ds / len;
    if u >= 1.0 {
        return (d1, 0.0);
    }
    let u = u.max(0.0);
    let b = slope0 * len;
    let a = d1 - d0 - b;
    let (c3, c4, c5) = (10.0 * a + 4.0 * b, -15.0 * a - 7.0 * b, 6.0 * a + 3.0 * b);
    let u2 = u * u;
    let u3 = u2 * u;
    let d = d0 + b * u + u3 * (c3 + u * (c4 + u * c5));
    let dd = b + u2 * (3.0 * c3 + u * (4.0 * c4 + u * 5.0 * c5));
    (d, dd / len)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_profile_ramps_then_holds() {
        let p = SpeedProfile {
            v0: 10.0,
            target: 4.0,
            rate: 2.0,
        };
        // 3 s to slow down; distance 10·3 − 0.5·2·9 = 21 m.
        assert_eq!(p.at(1.0), (9.0, 8.0));
        assert_eq!(p.at(3.0), (21.0, 4.0));
        assert_eq!(p.at(5.0), (29.0, 4.0));
        // A zero rate never divides by zero.
        let z = SpeedProfile { rate: 0.0, ..p };
        assert!(z.at(1.0).0.is_finite());
    }

    #[test]
    fn lateral_quintic_meets_its_end_conditions() {
        let m = Lateral {
            d0: -1.75,
            slope0: 0.05,
            d1: 1.75,
            len: 30.0,
            s_start: 100.0,
        };
        let (d, slope) = m.at(100.0);
        assert!((d + 1.75).abs() < 1e-6 && (slope - 0.05).abs() < 1e-6);
        let (d, slope) = m.at(130.0);
        assert_eq!((d, slope), (1.75, 0.0));
        assert_eq!(m.at(200.0), (1.75, 0.0));
        // Before the start it holds the start offset.
        assert_eq!(m.at(90.0), m.at(100.0));
        // Monotone from one lane to the other when it starts straight.
        let straight = Lateral { slope0: 0.0, ..m };
        let ds: Vec<f32> = (0..=30).map(|i| straight.at(100.0 + i as f32).0).collect();
        assert!(ds.windows(2).all(|w| w[1] >= w[0]), "{ds:?}");
    }
}
