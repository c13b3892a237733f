//! Association of a frame's detections with the tracks: the cost matrix of distances
//! between each track's predicted position and each detection (world frame), gated at
//! `gate_m` (farther pairs are forbidden), solved optimally by the Hungarian solver
//! ([`crate::assignment`]). The distance is Euclidean for a detection without depth noise;
//! with it, the offset's component along the detection's ray is scaled by
//! `sqrt(meas_var / (meas_var + ray_var))` (the offset measured in the detection's own
//! standard deviations, times the across-ray one), so a far detection several metres
//! off in range but on the track's bearing still matches it.
//!
//! Contract: fills `Tracker::row_to_col` (track row → detection column, −1 = unmatched);
//! never allocates (the matrix and the solver are sized in [`Tracker::new`]), locks or
//! panics; a non-finite gate matches nothing farther than 0 m. Deterministic: the solver
//! breaks ties in a fixed order. Cost: `O(T·D)` distances plus one `O(n³)` solve.

use super::Tracker;
use crate::types::MAX_TRACKS;

impl Tracker {
    /// Step 4 of [`Tracker::step`]: gated cost matrix and optimal assignment.
    pub(super) fn associate(&mut self) {
        let p = self.params;
        let rows = self.tracks.len();
        let cols = self.dets.len();
        let gate = if p.gate_m.is_finite() {
            p.gate_m.max(0.0)
        } else {
            0.0
        };
        // Gated-out pairs carry +inf, which the solver never assigns.
        let forbidden = f32::INFINITY;
        for (i, t) in self.tracks.iter().enumerate() {
            let (tx, ty) = t.kf.position();
            for (j, d) in self.dets.iter().enumerate() {
                let (ox, oy) = (d.x - tx, d.y - ty);
                let dist = if d.ray_var > 0.0 {
                    let along = ox * d.ray[0] + oy * d.ray[1];
                    let across = -ox * d.ray[1] + oy * d.ray[0];
                    let shrink = along_scale(p.meas_var, d.ray_var);
                    ((along * shrink).powi(2) + across.powi(2)).sqrt() as f32
                } else {
                    (ox.powi(2) + oy.powi(2)).sqrt() as f32
                };
                self.cost[i * cols + j] = if dist <= gate { dist } else { f32::INFINITY };
            }
        }
        self.row_to_col = [-1; MAX_TRACKS];
        if rows > 0 && cols > 0 {
            // Capacities match the table sizes, so this cannot fail; on error nothing matches.
            if self
                .solver
                .solve(
                    &self.cost[..rows * cols],
                    rows,
                    cols,
                    forbidden,
                    &mut self.row_to_col,
                )
                .is_err()
            {
                self.row_to_col = [-1; MAX_TRACKS];
            }
        }
    }
}

/// `sqrt(v / (v + ray_var))` with `v` the measurement variance as the Kalman filter
/// floors it: the factor that turns an along-ray offset into "across-ray metres".
fn along_scale(meas_var: f64, ray_var: f64) -> f64 {
    let v = crate::kalman::var(meas_var);
    (v / (v + ray_var)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{det, ego_at, gt, out_buf};
    use super::super::TrackerParams;
    use super::*;
    use crate::eval::MotEval;
    use crate::types::class;

    #[test]
    fn crossing_objects_keep_their_ids() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut ev = MotEval::new(2.0);
        let mut out = out_buf();
        // A moves +x, B moves +y; they pass the origin 0.15 s apart.
        for k in 0..60u64 {
            let t = k as f64 * 0.1 - 3.0;
            let ego = ego_at(k, -20.0, -20.0, 0.3);
            let (ax, ay) = (10.0 * t, 0.0);
            let (bx, by) = (0.0, 10.0 * (t - 0.15));
            // Small deterministic jitter.
            let j = ((k * 7919) % 11) as f64 * 0.02 - 0.1;
            let dets = [
                det(&ego, ax + j, ay - j, class::CAR),
                det(&ego, bx - j, by + j, class::CAR),
            ];
            tr.step(&dets, &ego);
            let n = tr.write(&mut out);
            if k >= 1 {
                assert_eq!(n, 2, "frame {k}");
                ev.frame(&[gt(1, ax, ay), gt(2, bx, by)], &out[..n]);
            }
        }
        let s = ev.summary();
        assert_eq!(s.id_switches, 0);
        assert_eq!(s.misses, 0);
        assert_eq!(s.false_positives, 0);
        assert_eq!(s.mota, 1.0);
        assert!(s.motp_m < 0.3, "motp {}", s.motp_m);
        // Velocities were learned.
        let a = out.iter().find(|t| t.id == 1).unwrap();
        assert!((a.vx - 10.0).abs() < 1.0 && a.vy.abs() < 1.0, "{a:?}");
    }

    /// A stationary car 50 m ahead, seen on the right bearing at ranges scattered by
    /// ±3.5 m (a far camera detection): with depth noise one track follows it, at about
    /// its mean range; without, the jumps beyond the 3 m gate birth new tracks. Across the
    /// ray the gate is as tight as ever.
    #[test]
    fn depth_noise_keeps_one_track_on_a_far_object_whose_range_jumps() {
        let ranges = [50.0, 53.5, 47.0, 52.5, 46.5, 53.0, 48.0, 51.0, 46.8, 53.2];
        let (sin_b, cos_b) = crate::camera::det::sin_cos(0.2);
        let run = |per_m: f64| {
            let mut tr = Tracker::new(TrackerParams {
                depth_noise_from_m: 20.0,
                depth_noise_per_m: per_m,
                ..TrackerParams::default()
            });
            for (k, r) in ranges.iter().cycle().take(40).enumerate() {
                let ego = ego_at(k as u64, 0.0, 0.0, 0.0);
                let (x, y) = (r * cos_b, r * sin_b);
                tr.step(&[det(&ego, x, y, class::CAR)], &ego);
            }
            let mut out = out_buf();
            let n = tr.write(&mut out);
            (tr.stats().births, out[..n].to_vec())
        };
        let (births_off, _) = run(0.0);
        assert!(births_off > 5, "isotropic: {births_off} births");
        let (births_on, tracks) = run(0.1);
        assert_eq!(births_on, 1);
        assert_eq!(tracks.len(), 1);
        let t = tracks[0];
        let mean = ranges.iter().sum::<f64>() / ranges.len() as f64;
        let (tx, ty) = (f64::from(t.x), f64::from(t.y));
        let range = (tx * tx + ty * ty).sqrt();
        assert!((range - mean).abs() < 1.5, "range {range} vs mean {mean}");
        let off_bearing = (ty * cos_b - tx * sin_b).abs();
        assert!(off_bearing < 0.3, "{off_bearing} m off the bearing: {t:?}");
        // A detection 3.5 m across the ray from the track is still beyond the gate.
        let mut tr = Tracker::new(TrackerParams {
            depth_noise_from_m: 20.0,
            depth_noise_per_m: 0.1,
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let e0 = ego_at(0, 0.0, 0.0, 0.0);
        tr.step(&[det(&e0, 50.0, 0.0, class::CAR)], &e0);
        let e1 = ego_at(1, 0.0, 0.0, 0.0);
        tr.step(&[det(&e1, 50.0, 3.5, class::CAR)], &e1);
        assert_eq!(tr.stats().births, 2);
        // ... and one 3.5 m along it is not.
        let e2 = ego_at(2, 0.0, 0.0, 0.0);
        tr.step(&[det(&e2, 46.5, 0.0, class::CAR)], &e2);
        assert_eq!(tr.stats().births, 2);
    }

    #[test]
    fn detections_beyond_the_gate_are_not_matched() {
        let mut tr = Tracker::new(TrackerParams {
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let mut out = out_buf();
        let e0 = ego_at(0, 0.0, 0.0, 0.0);
        tr.step(&[det(&e0, 10.0, 0.0, class::CAR)], &e0);
        // 5 m away with a 3 m gate: the track misses and a new one is born.
        let e1 = ego_at(1, 0.0, 0.0, 0.0);
        tr.step(&[det(&e1, 15.0, 0.0, class::CAR)], &e1);
        assert_eq!(tr.stats().births, 2);
        assert_eq!(tr.write(&mut out), 2);
        assert_eq!((out[0].id, out[0].misses), (1, 1));
        assert_eq!((out[1].id, out[1].misses), (2, 0));
        // Within the gate of track 2: matched, no birth; track 1 keeps coasting.
        let e2 = ego_at(2, 0.0, 0.0, 0.0);
        tr.step(&[det(&e2, 15.2, 0.0, class::CAR)], &e2);
        assert_eq!(tr.stats().births, 2);
        assert_eq!(tr.write(&mut out), 2);
        assert_eq!((out[0].misses, out[1].misses), (2, 0));
    }
}
