//! Multi-object tracking: constant-velocity Kalman filters, gated optimal assignment, a
//! fixed-capacity track table with tentative → confirmed → deleted life cycle.
//!
//! Contract:
//! - [`Tracker::step`] takes one frame of detections in the **ego** frame and the frame's
//!   ego pose, and keeps its tracks in the **world** frame, so ego motion is compensated:
//!   a static object seen from a moving ego stays where it is.
//! - Association is optimal (Hungarian, [`crate::assignment`]) on the distance between a
//!   track's predicted position and a detection, gated at `gate_m`: pairs farther apart are
//!   never matched. The distance is Euclidean, except that with depth noise (below) its
//!   component along the detection's viewing ray is divided by how much less certain the
//!   detection is along the ray than across it.
//! - Depth noise: a camera places a far object on the right bearing but at an uncertain
//!   range, and the error grows with range. Beyond `depth_noise_from_m` from the ego, a
//!   detection's position variance along its ray (from the ego to the detection) grows by
//!   `(depth_noise_per_m · (range − depth_noise_from_m))²`; the Kalman update and a new
//!   track's covariance use it ([`Cv2d::update_along`]), so a far track follows its
//!   detections' bearing at once and their range slowly. `depth_noise_per_m = 0` (the
//!   default of [`TrackerParams`]) is the isotropic tracker, bit for bit.
//! - Life cycle: an unmatched detection births a **tentative** track; it is **confirmed**
//!   after `birth_hits` consecutive matched frames (counting the birth frame). A tentative
//!   track dies on its first miss; a confirmed one coasts (prediction only) and is deleted
//!   once it has missed more than `max_misses` consecutive frames. Track ids start at 1,
//!   increase by one per birth and are never reused (until `reset`).
//! - A track's class is the class its detections voted for most often (ties: the latest).
//!   Its size and heading follow the latest matched detection.
//! - Shadows along the ray: far away a camera network can put a second, weaker peak of one
//!   object a few metres along its ray. With `shadow_deg > 0`, a detection at least
//!   `shadow_from_m` from the ego is ignored when a better-scoring detection of its class
//!   (ties: the earlier one), also that far, lies within `shadow_deg` of its bearing (seen
//!   from the ego origin). Only tracking ignores it: the published detections keep it.
//!   `shadow_deg = 0` (the default of [`TrackerParams`]) is off, bit for bit.
//! - Detections with `valid == 0`, a non-finite position, an unknown class, or a score below
//!   their class's `min_score` are ignored;
//!   at most `MAX_DETECTIONS` per frame are used (the rest are ignored and counted). When the
//!   table is full, births are refused (and counted); existing tracks are never evicted.
//! - `dt` is taken from consecutive `EgoPose::stamp_ns`; the first call, a stamp that does not
//!   increase, or a gap over [`MAX_PREDICT_DT`] seconds (clamped) never predicts backwards.
//!
//! Hot path: `step` and `write` never allocate, lock, log or panic, whatever the input
//! (NaN, empty, full); every buffer is allocated in [`Tracker::new`]. Determinism: tracks
//! live in birth order in a `heapless::Vec`, the solver breaks ties in a fixed order, and no
//! hash maps or clocks are read.
//!
//! Cost: `O(T·D)` for the cost matrix plus one `O(n³)` assignment, `n = max(T, D) <= 64`,
//! and `O(D²)` for the shadows (when on).
//!
//! Layout: this file holds the parameters, the table's data and [`Tracker::step`] (frame
//! clock, detections → world frame, prediction); `association` builds the gated cost
//! matrix and solves it; `track_table` updates, ages, deletes and births tracks.

use heapless::Vec as HVec;

mod association;
mod track_table;

use crate::assignment::Assignment;
use crate::geometry::{ego_to_world, wrap_angle};
use crate::kalman::Cv2d;
use crate::types::{class, Detection, EgoPose, TrackState, MAX_DETECTIONS, MAX_TRACKS};
use redline_runtime::det_math as dm;

/// Longest prediction step, s: a longer gap between frames is clamped to this.
pub const MAX_PREDICT_DT: f64 = 1.0;

/// Tuning of the tracker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackerParams {
    /// Association gate: a detection farther than this from a track's prediction is not
    /// matched to it, m.
    pub gate_m: f32,
    /// Consecutive matched frames (counting the birth frame) to confirm a track.
    pub birth_hits: u32,
    /// Consecutive misses a confirmed track survives; one more deletes it.
    pub max_misses: u32,
    /// Detection position variance, m².
    pub meas_var: f64,
    /// Process noise: white acceleration variance, (m/s²)².
    pub accel_noise: f64,
    /// Detections scoring below their class's entry (class id order) are ignored.
    pub min_score: [f32; class::COUNT],
    /// Range from the ego beyond which depth noise grows, m (see the module docs).
    pub depth_noise_from_m: f64,
    /// Growth of the added along-ray standard deviation per metre of range beyond
    /// `depth_noise_from_m` (m/m; it adds in variance to `meas_var`); 0 turns depth
    /// noise off.
    pub depth_noise_per_m: f64,
    /// Range from the ego beyond which a detection shadowed along its ray by a better one
    /// is ignored, m (see the module docs).
    pub shadow_from_m: f32,
    /// Largest bearing difference of such a shadow, degrees; 0 turns it off.
    pub shadow_deg: f32,
}

impl Default for TrackerParams {
    fn default() -> Self {
        Self {
            gate_m: 3.0,
            birth_hits: 2,
            max_misses: 5,
            meas_var: 0.25,
            accel_noise: 9.0,
            min_score: [0.3; class::COUNT],
            depth_noise_from_m: 0.0,
            depth_noise_per_m: 0.0,
            shadow_from_m: 0.0,
            shadow_deg: 0.0,
        }
    }
}

/// True if `dets[i]` is far (at least `shadow_from_m`) and a better-scoring valid detection
/// of its class (ties: the earlier), also that far, lies within `shadow_deg` of its bearing
/// from the ego origin. `O(len)`; false when `shadow_deg <= 0`. No allocation, no panic.
fn shadowed(dets: &[Detection], i: usize, p: &TrackerParams) -> bool {
    // Off at 0, and at NaN (never greater than 0).
    if p.shadow_deg.is_nan() || p.shadow_deg <= 0.0 {
        return false;
    }
    let d = &dets[i];
    let far = |e: &Detection| dm::hypot(e.x, e.y) >= p.shadow_from_m;
    if !far(d) {
        return false;
    }
    let max = p.shadow_deg.to_radians();
    dets.iter().enumerate().any(|(j, e)| {
        let better = e.score > d.score || (e.score == d.score && j < i);
        j != i
            && e.valid != 0
            && e.class == d.class
            && better
            && e.x.is_finite()
            && e.y.is_finite()
            && far(e)
            // The angle between the two directions, atan2(|cross|, dot): no wrap-around.
            && dm::atan2((d.x * e.y - d.y * e.x).abs(), d.x * e.x + d.y * e.y) <= max
    })
}

/// Tracker counters (for reports and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Frames stepped.
    pub frames: u64,
    /// Tracks born.
    pub births: u64,
    /// Births refused because the table was full.
    pub births_refused: u64,
    /// Detections ignored because more than `MAX_DETECTIONS` were usable in a frame.
    pub detections_dropped: u64,
    /// Detections ignored as invalid (non-finite, low score).
    pub detections_rejected: u64,
}

#[derive(Debug, Clone, Copy)]
struct Track {
    id: u32,
    kf: Cv2d,
    votes: [u32; class::COUNT],
    class: u32,
    yaw: f32,
    length: f32,
    width: f32,
    age: u32,
    hits: u32,
    misses: u32,
    confirmed: bool,
}

/// A usable detection of this frame, world frame.
#[derive(Debug, Clone, Copy)]
struct WorldDet {
    x: f64,
    y: f64,
    yaw: f32,
    length: f32,
    width: f32,
    class: u32,
    /// Unit vector from the ego to the detection (world frame); zero at the ego.
    ray: [f64; 2],
    /// Extra position variance along `ray`, m² (depth noise; 0 when off or near).
    ray_var: f64,
}

impl TrackerParams {
    /// The extra along-ray variance of a detection `range` m from the ego, m² (0 for
    /// non-finite settings).
    pub fn ray_var(&self, range: f64) -> f64 {
        let k = self.depth_noise_per_m;
        let beyond = range - self.depth_noise_from_m;
        if !(k.is_finite() && k > 0.0 && beyond.is_finite() && beyond > 0.0) {
            return 0.0;
        }
        let sd = k * beyond;
        sd * sd
    }
}

/// The multi-object tracker (see the module docs).
#[derive(Debug)]
pub struct Tracker {
    params: TrackerParams,
    tracks: HVec<Track, MAX_TRACKS>,
    dets: HVec<WorldDet, MAX_DETECTIONS>,
    det_used: [bool; MAX_DETECTIONS],
    cost: Box<[f32]>,
    row_to_col: [i32; MAX_TRACKS],
    solver: Assignment,
    next_id: u32,
    last_stamp: Option<u64>,
    stats: TrackerStats,
}

fn finite_or(v: f32, d: f32) -> f32 {
    if v.is_finite() {
        v
    } else {
        d
    }
}

impl Tracker {
    /// A tracker with room for `MAX_TRACKS` tracks and `MAX_DETECTIONS` detections a frame.
    /// Allocates everything it will use.
    pub fn new(params: TrackerParams) -> Self {
        Self {
            params,
            tracks: HVec::new(),
            dets: HVec::new(),
            det_used: [false; MAX_DETECTIONS],
            cost: vec![0.0; MAX_TRACKS * MAX_DETECTIONS].into_boxed_slice(),
            row_to_col: [-1; MAX_TRACKS],
            solver: Assignment::new(MAX_TRACKS, MAX_DETECTIONS),
            next_id: 1,
            last_stamp: None,
            stats: TrackerStats::default(),
        }
    }

    /// Counters since `new` / `reset`.
    pub fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// Tracks held (tentative and confirmed).
    pub fn len(&self) -> usize {
        self.tracks.len()
    }

    /// True if no track is held.
    pub fn is_empty(&self) -> bool {
        self.tracks.is_empty()
    }

    /// Forget every track, the clock and the id counter (ids restart at 1).
    pub fn reset(&mut self) {
        self.tracks.clear();
        self.dets.clear();
        self.next_id = 1;
        self.last_stamp = None;
        self.stats = TrackerStats::default();
    }

    /// One frame: detections in the EGO frame (entries with valid == 0 ignored), the ego
    /// pose of the frame; dt from the previous call's stamp (first call: no predict).
    /// Transforms detections to the world frame, predicts tracks, associates by gated
    /// distance (Euclidean, depth noise discounted along the ray) with the Hungarian solver, updates matched, ages unmatched (delete
    /// after max_misses), births new tentative tracks for unmatched detections (confirmed
    /// after birth_hits consecutive hits). Track ids increase from 1 and are never reused.
    ///
    /// Per-frame: no allocation, no panic.
    pub fn step(&mut self, detections: &[Detection], ego: &EgoPose) {
        self.stats.frames += 1;
        let p = self.params;

        // 1. Time step.
        let dt = match self.last_stamp {
            Some(prev) if ego.stamp_ns > prev => {
                ((ego.stamp_ns - prev) as f64 * 1e-9).min(MAX_PREDICT_DT)
            }
            _ => 0.0,
        };
        self.last_stamp = Some(match self.last_stamp {
            Some(prev) => prev.max(ego.stamp_ns),
            None => ego.stamp_ns,
        });

        // 2. Usable detections → world frame.
        self.dets.clear();
        let ego_ok = ego.x.is_finite() && ego.y.is_finite() && ego.yaw.is_finite();
        for (i, d) in detections.iter().enumerate().filter(|(_, d)| d.valid != 0) {
            let usable = ego_ok
                && d.x.is_finite()
                && d.y.is_finite()
                && p.min_score
                    .get(d.class as usize)
                    .is_some_and(|&min| d.score >= min)
                && !shadowed(detections, i, &p);
            if !usable {
                self.stats.detections_rejected += 1;
                continue;
            }
            let (wx, wy) = ego_to_world(ego, f64::from(d.x), f64::from(d.y));
            let (ex, ey) = (f64::from(d.x), f64::from(d.y));
            let range = (ex * ex + ey * ey).sqrt();
            let ray = if range > 0.0 {
                [(wx - ego.x) / range, (wy - ego.y) / range]
            } else {
                [0.0, 0.0]
            };
            let w = WorldDet {
                ray,
                ray_var: p.ray_var(range),
                x: wx,
                y: wy,
                yaw: wrap_angle(f64::from(finite_or(d.yaw, 0.0)) + ego.yaw) as f32,
                length: finite_or(d.length, 0.0).max(0.0),
                width: finite_or(d.width, 0.0).max(0.0),
                class: d.class,
            };
            if self.dets.push(w).is_err() {
                self.stats.detections_dropped += 1;
            }
        }

        // 3. Predict.
        if dt > 0.0 {
            for t in self.tracks.iter_mut() {
                t.kf.predict(dt, p.accel_noise);
            }
        }

        // 4. Associate.
        self.associate();

        // 5. Update matched, age unmatched.
        self.update_matched();

        // 6. Births.
        self.births();
    }

    /// Writes confirmed tracks (world frame) into `out` (valid = 1), clears the remaining
    /// entries; returns how many. Tracks beyond `out.len()` are left out (birth order).
    ///
    /// Per-frame: no allocation, no panic.
    pub fn write(&self, out: &mut [TrackState]) -> usize {
        let mut n = 0;
        for t in self.tracks.iter().filter(|t| t.confirmed) {
            let Some(slot) = out.get_mut(n) else { break };
            let (x, y) = t.kf.position();
            let (vx, vy) = t.kf.velocity();
            *slot = TrackState {
                id: t.id,
                class: t.class,
                x: x as f32,
                y: y as f32,
                vx: vx as f32,
                vy: vy as f32,
                yaw: t.yaw,
                length: t.length,
                width: t.width,
                age: t.age,
                misses: t.misses,
                valid: 1,
            };
            n += 1;
        }
        for slot in out.iter_mut().skip(n) {
            *slot = TrackState::default();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::world_to_ego;
    use crate::types::GtBox;

    const DT_NS: u64 = 100_000_000;

    pub(super) fn ego_at(k: u64, x: f64, y: f64, yaw: f64) -> EgoPose {
        EgoPose {
            stamp_ns: k * DT_NS,
            x,
            y,
            yaw,
            v: 0.0,
            yaw_rate: 0.0,
        }
    }

    /// A detection in the ego frame of the world point (wx, wy).
    pub(super) fn det(ego: &EgoPose, wx: f64, wy: f64, cls: u32) -> Detection {
        let (x, y) = world_to_ego(ego, wx, wy);
        Detection {
            x: x as f32,
            y: y as f32,
            yaw: 0.0,
            length: 4.5,
            width: 1.8,
            score: 0.9,
            class: cls,
            valid: 1,
        }
    }

    pub(super) fn gt(id: u32, x: f64, y: f64) -> GtBox {
        GtBox {
            id,
            class: class::CAR,
            x,
            y,
            length: 4.5,
            width: 1.8,
            valid: 1,
            ..GtBox::default()
        }
    }

    pub(super) fn out_buf() -> Vec<TrackState> {
        vec![TrackState::default(); MAX_TRACKS]
    }

    #[test]
    fn each_class_has_its_own_minimum_score() {
        let mut tr = Tracker::new(TrackerParams {
            min_score: [0.4, 0.35, 0.4],
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let ego = ego_at(1, 0.0, 0.0, 0.0);
        let scored = |x: f64, cls: u32, score: f32| Detection {
            score,
            ..det(&ego, x, 0.0, cls)
        };
        let dets = [
            scored(10.0, class::PEDESTRIAN, 0.36),
            scored(20.0, class::CAR, 0.36),
            scored(30.0, class::CYCLIST, 0.39),
            scored(40.0, class::CAR, 0.41),
            // An unknown class is ignored whatever its score.
            scored(50.0, 7, 0.99),
        ];
        tr.step(&dets, &ego);
        let mut out = out_buf();
        let n = tr.write(&mut out);
        let kept: Vec<(u32, f32)> = out[..n].iter().map(|t| (t.class, t.x)).collect();
        assert_eq!(kept, vec![(class::PEDESTRIAN, 10.0), (class::CAR, 40.0)]);
        assert_eq!(tr.stats().detections_rejected, 3);
    }

    /// A car 50 m ahead with a weaker second peak 6 m along its ray (half a degree off):
    /// with shadows on, tracking ignores the peak; a car of the next lane (3 degrees off),
    /// a pedestrian on the ray and the same pair at 30 m are kept; off, everything is kept.
    #[test]
    fn far_detections_shadowed_along_their_ray_by_a_better_one_are_ignored() {
        let ego = ego_at(1, 0.0, 0.0, 0.0);
        let at = |x: f64, y: f64, cls: u32, score: f32| Detection {
            score,
            ..det(&ego, x, y, cls)
        };
        let dets = [
            at(56.0, 0.5, class::CAR, 0.5),
            at(50.0, 0.0, class::CAR, 0.6),
            at(55.0, 2.9, class::CAR, 0.5),
            at(57.0, 0.3, class::PEDESTRIAN, 0.5),
            at(36.0, 0.3, class::CAR, 0.5),
            at(30.0, 0.0, class::CAR, 0.6),
            // Behind the ego: measured the same way (no wrap-around at 180 degrees).
            at(-50.0, 0.5, class::CAR, 0.6),
            at(-56.0, -0.5, class::CAR, 0.5),
        ];
        let run = |shadow_deg: f32| {
            let mut tr = Tracker::new(TrackerParams {
                birth_hits: 1,
                min_score: [0.3; class::COUNT],
                shadow_from_m: 45.0,
                shadow_deg,
                ..TrackerParams::default()
            });
            tr.step(&dets, &ego);
            let mut out = out_buf();
            let n = tr.write(&mut out);
            let mut xs: Vec<i32> = out[..n].iter().map(|t| t.x.round() as i32).collect();
            xs.sort();
            (xs, tr.stats().detections_rejected)
        };
        assert_eq!(run(2.0), (vec![-50, 30, 36, 50, 55, 57], 2));
        assert_eq!(run(0.0), (vec![-56, -50, 30, 36, 50, 55, 56, 57], 0));
        // Equal scores: the earlier detection shadows the later.
        let twins = [
            at(50.0, 0.0, class::CAR, 0.5),
            at(56.0, 0.5, class::CAR, 0.5),
        ];
        let mut tr = Tracker::new(TrackerParams {
            birth_hits: 1,
            shadow_from_m: 45.0,
            shadow_deg: 2.0,
            ..TrackerParams::default()
        });
        tr.step(&twins, &ego);
        let mut out = out_buf();
        assert_eq!(tr.write(&mut out), 1);
        assert_eq!(out[0].x.round(), 50.0);
    }

    #[test]
    fn ego_motion_is_compensated() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        let statics = [(30.0, 3.0), (45.0, -4.0), (60.0, 0.5)];
        for k in 0..40u64 {
            // Ego drives at 15 m/s and turns slowly.
            let t = k as f64 * 0.1;
            let ego = ego_at(k, 15.0 * t, 0.2 * t * t, 0.04 * t);
            let dets: Vec<Detection> = statics
                .iter()
                .map(|&(x, y)| det(&ego, x, y, class::CAR))
                .collect();
            tr.step(&dets, &ego);
        }
        let n = tr.write(&mut out);
        assert_eq!(n, 3);
        for (t, &(x, y)) in out[..n].iter().zip(statics.iter()) {
            assert!(
                (f64::from(t.x) - x).abs() < 0.05 && (f64::from(t.y) - y).abs() < 0.05,
                "{t:?}"
            );
            assert!(
                t.vx.abs() < 0.05 && t.vy.abs() < 0.05,
                "static object moves: {t:?}"
            );
        }
        assert_eq!(
            out[..n].iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn garbage_detections_do_not_panic() {
        for per_m in [0.0, 0.1, f64::NAN, f64::INFINITY] {
            garbage_detections_do_not_panic_with(TrackerParams {
                depth_noise_from_m: 20.0,
                depth_noise_per_m: per_m,
                ..TrackerParams::default()
            });
        }
        for shadow_deg in [2.0, f32::NAN, f32::INFINITY] {
            garbage_detections_do_not_panic_with(TrackerParams {
                shadow_from_m: 0.0,
                shadow_deg,
                ..TrackerParams::default()
            });
        }
    }

    fn garbage_detections_do_not_panic_with(params: TrackerParams) {
        let mut tr = Tracker::new(params);
        let mut out = out_buf();
        let bad = [
            Detection {
                x: f32::NAN,
                y: 1.0,
                score: 1.0,
                valid: 1,
                ..Detection::default()
            },
            Detection {
                x: f32::INFINITY,
                y: 1.0,
                score: 1.0,
                valid: 1,
                ..Detection::default()
            },
            Detection {
                x: 1.0,
                y: 1.0,
                score: f32::NAN,
                valid: 1,
                ..Detection::default()
            },
            Detection {
                x: 1.0,
                y: 1.0,
                score: 1.0,
                class: 99,
                valid: 1,
                ..Detection::default()
            },
            Detection {
                x: 1e30,
                y: -1e30,
                yaw: f32::NAN,
                length: f32::NAN,
                width: -3.0,
                score: 1.0,
                valid: 7,
                class: 0,
            },
        ];
        for k in 0..5u64 {
            tr.step(&bad, &ego_at(k, 0.0, 0.0, 0.0));
            // Bad ego poses and stamps going backwards too.
            tr.step(&bad, &ego_at(0, f64::NAN, 0.0, f64::INFINITY));
            let n = tr.write(&mut out);
            for t in &out[..n] {
                assert!(!t.x.is_nan() && !t.y.is_nan() && !t.vx.is_nan(), "{t:?}");
                assert!(!t.length.is_nan() && t.width >= 0.0);
            }
        }
        // Output shorter than the track count, and an empty output.
        tr.write(&mut out[..0]);
        assert!(tr.stats().detections_rejected >= 4);
    }
}
