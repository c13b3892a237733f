//! Multi-object tracking: constant-velocity Kalman filters, gated optimal assignment, a
//! fixed-capacity track table with tentative → confirmed → deleted life cycle.
//!
//! Contract:
//! - [`Tracker::step`] takes one frame of detections in the **ego** frame and the frame's
//!   ego pose, and keeps its tracks in the **world** frame, so ego motion is compensated:
//!   a static object seen from a moving ego stays where it is.
//! - Association is optimal (Hungarian, [`crate::assignment`]) on the Euclidean distance
//!   between a track's predicted position and a detection, gated at `gate_m`: pairs farther
//!   apart are never matched.
//! - Life cycle: an unmatched detection births a **tentative** track; it is **confirmed**
//!   after `birth_hits` consecutive matched frames (counting the birth frame). A tentative
//!   track dies on its first miss; a confirmed one coasts (prediction only) and is deleted
//!   once it has missed more than `max_misses` consecutive frames. Track ids start at 1,
//!   increase by one per birth and are never reused (until `reset`).
//! - A track's class is the class its detections voted for most often (ties: the latest).
//!   Its size and heading follow the latest matched detection.
//! - Detections with `valid == 0`, a non-finite position, or `score < min_score` are ignored;
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
//! Cost: `O(T·D)` for the cost matrix plus one `O(n³)` assignment, `n = max(T, D) <= 64`.

use heapless::Vec as HVec;

use crate::assignment::Assignment;
use crate::geometry::{ego_to_world, wrap_angle};
use crate::kalman::Cv2d;
use crate::types::{class, Detection, EgoPose, TrackState, MAX_DETECTIONS, MAX_TRACKS};

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
    /// Detections scoring below this are ignored.
    pub min_score: f32,
}

impl Default for TrackerParams {
    fn default() -> Self {
        Self {
            gate_m: 3.0,
            birth_hits: 2,
            max_misses: 5,
            meas_var: 0.25,
            accel_noise: 9.0,
            min_score: 0.3,
        }
    }
}

/// Initial velocity variance of a new track, (m/s)² (it starts at rest, speed unknown).
const BIRTH_VEL_VAR: f64 = 100.0;

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

    /// The parameters.
    pub fn params(&self) -> &TrackerParams {
        &self.params
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
    /// Euclidean cost with the Hungarian solver, updates matched, ages unmatched (delete
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
        for d in detections.iter().filter(|d| d.valid != 0) {
            let usable = ego_ok
                && d.x.is_finite()
                && d.y.is_finite()
                && d.score >= p.min_score
                && (d.class as usize) < class::COUNT;
            if !usable {
                self.stats.detections_rejected += 1;
                continue;
            }
            let (wx, wy) = ego_to_world(ego, f64::from(d.x), f64::from(d.y));
            let w = WorldDet {
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
                let dist = ((d.x - tx).powi(2) + (d.y - ty).powi(2)).sqrt() as f32;
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

        // 5. Update matched, age unmatched.
        self.det_used = [false; MAX_DETECTIONS];
        for (i, t) in self.tracks.iter_mut().enumerate() {
            t.age = t.age.saturating_add(1);
            let j = self.row_to_col[i];
            match self.dets.get(usize::try_from(j).unwrap_or(usize::MAX)) {
                Some(d) => {
                    self.det_used[j as usize] = true;
                    t.kf.update(d.x, d.y, p.meas_var);
                    t.hits = t.hits.saturating_add(1);
                    t.misses = 0;
                    if let Some(v) = t.votes.get_mut(d.class as usize) {
                        *v = v.saturating_add(1);
                    }
                    t.class = majority(&t.votes, d.class);
                    t.yaw = d.yaw;
                    t.length = d.length;
                    t.width = d.width;
                    if t.hits >= p.birth_hits {
                        t.confirmed = true;
                    }
                }
                None => {
                    t.hits = 0;
                    t.misses = t.misses.saturating_add(1);
                }
            }
        }
        let max_misses = p.max_misses;
        self.tracks
            .retain(|t| t.misses == 0 || (t.confirmed && t.misses <= max_misses));

        // 6. Births.
        let birth_hits = p.birth_hits;
        for (j, d) in self.dets.iter().enumerate() {
            if self.det_used[j] {
                continue;
            }
            if self.tracks.is_full() {
                self.stats.births_refused += 1;
                continue;
            }
            let mut votes = [0u32; class::COUNT];
            if let Some(v) = votes.get_mut(d.class as usize) {
                *v = 1;
            }
            let track = Track {
                id: self.next_id,
                kf: Cv2d::new(d.x, d.y, p.meas_var, BIRTH_VEL_VAR),
                votes,
                class: d.class,
                yaw: d.yaw,
                length: d.length,
                width: d.width,
                age: 0,
                hits: 1,
                misses: 0,
                confirmed: birth_hits <= 1,
            };
            // Cannot fail: checked is_full above.
            let _ = self.tracks.push(track);
            self.next_id = self.next_id.checked_add(1).unwrap_or(1);
            self.stats.births += 1;
        }
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

/// The class with most votes; ties go to `latest` if it is among the best, else the lowest.
fn majority(votes: &[u32; class::COUNT], latest: u32) -> u32 {
    let best = votes.iter().copied().max().unwrap_or(0);
    if votes.get(latest as usize).copied() == Some(best) {
        return latest;
    }
    votes.iter().position(|&v| v == best).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::MotEval;
    use crate::geometry::world_to_ego;
    use crate::types::GtBox;

    const DT_NS: u64 = 100_000_000;

    fn ego_at(k: u64, x: f64, y: f64, yaw: f64) -> EgoPose {
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
    fn det(ego: &EgoPose, wx: f64, wy: f64, cls: u32) -> Detection {
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

    fn gt(id: u32, x: f64, y: f64) -> GtBox {
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

    fn out_buf() -> Vec<TrackState> {
        vec![TrackState::default(); MAX_TRACKS]
    }

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

    #[test]
    fn dropped_detections_do_not_kill_a_track() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        for k in 0..20u64 {
            let ego = ego_at(k, 0.0, 0.0, 0.0);
            let x = 10.0 + 5.0 * k as f64 * 0.1;
            let dets = [det(&ego, x, 2.0, class::CAR)];
            let seen: &[Detection] = if k == 8 || k == 9 { &[] } else { &dets };
            tr.step(seen, &ego);
            let n = tr.write(&mut out);
            if k >= 1 {
                assert_eq!(n, 1, "frame {k}");
                assert_eq!(out[0].id, 1, "frame {k}");
                let expect_misses = match k {
                    8 => 1,
                    9 => 2,
                    _ => 0,
                };
                assert_eq!(out[0].misses, expect_misses);
            }
        }
        // After max_misses + 1 misses it is deleted.
        for k in 20..27u64 {
            tr.step(&[], &ego_at(k, 0.0, 0.0, 0.0));
        }
        assert_eq!(tr.write(&mut out), 0);
        assert!(tr.is_empty());
        assert!(out.iter().all(|t| t.valid == 0));
    }

    #[test]
    fn spurious_single_detection_is_never_confirmed() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        for k in 0..10u64 {
            let ego = ego_at(k, 0.0, 0.0, 0.0);
            // A clutter blip at a different place every frame, far from the others.
            let dets = [det(&ego, 5.0 + 10.0 * k as f64, -8.0, class::PEDESTRIAN)];
            tr.step(&dets, &ego);
            assert_eq!(tr.write(&mut out), 0, "frame {k}");
        }
        assert_eq!(tr.stats().births, 10);
        // Ids are never reused: the next track gets id 11.
        let ego = ego_at(10, 0.0, 0.0, 0.0);
        tr.step(&[det(&ego, 50.0, 50.0, class::CAR)], &ego);
        let ego = ego_at(11, 0.0, 0.0, 0.0);
        tr.step(&[det(&ego, 50.0, 50.0, class::CAR)], &ego);
        assert_eq!(tr.write(&mut out), 1);
        assert_eq!(out[0].id, 11);
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
        let mut tr = Tracker::new(TrackerParams::default());
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

    #[test]
    fn capacity_overflow_is_handled() {
        let mut tr = Tracker::new(TrackerParams {
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let mut out = out_buf();
        let grid =
            |ego: &EgoPose, i: usize| det(ego, (i % 10) as f64 * 10.0, (i / 10) as f64 * 10.0, 0);
        // 100 detections on a grid 10 m apart: only MAX_DETECTIONS are used.
        let ego = ego_at(0, 0.0, 0.0, 0.0);
        let many: Vec<Detection> = (0..100).map(|i| grid(&ego, i)).collect();
        tr.step(&many, &ego);
        assert_eq!(tr.len(), MAX_DETECTIONS.min(MAX_TRACKS));
        assert_eq!(tr.stats().detections_dropped, 100 - MAX_DETECTIONS as u64);
        // Next frame: half of them are seen again, plus 32 new ones far away. The table is
        // full of confirmed (coasting) tracks, so the newcomers find no room.
        let ego = ego_at(1, 0.0, 0.0, 0.0);
        let mut next: Vec<Detection> = (0..32).map(|i| grid(&ego, i)).collect();
        next.extend((0..32).map(|i| det(&ego, 500.0 + i as f64 * 10.0, 500.0, 0)));
        tr.step(&next, &ego);
        assert_eq!(tr.stats().births_refused, 32);
        assert_eq!(tr.write(&mut out), MAX_TRACKS);
        assert_eq!(out.iter().filter(|t| t.misses == 1).count(), 32);
        // A small output buffer gets the first tracks only.
        let mut small = [TrackState::default(); 3];
        assert_eq!(tr.write(&mut small), 3);
        assert_eq!(small.map(|t| t.id), [1, 2, 3]);
    }

    #[test]
    fn class_follows_majority_of_detections() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        let classes = [
            class::CYCLIST,
            class::PEDESTRIAN,
            class::CYCLIST,
            class::PEDESTRIAN,
            class::PEDESTRIAN,
        ];
        for (k, &c) in classes.iter().enumerate() {
            let ego = ego_at(k as u64, 0.0, 0.0, 0.0);
            tr.step(&[det(&ego, 8.0, 1.0, c)], &ego);
        }
        tr.write(&mut out);
        assert_eq!(out[0].class, class::PEDESTRIAN);
        assert_eq!(majority(&[2, 2, 0], 1), 1);
        assert_eq!(majority(&[2, 2, 0], 2), 0);
    }

    #[test]
    fn reset_restarts_ids() {
        let mut tr = Tracker::new(TrackerParams {
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let mut out = out_buf();
        let ego = ego_at(0, 0.0, 0.0, 0.0);
        tr.step(&[det(&ego, 5.0, 0.0, 0)], &ego);
        assert_eq!(tr.write(&mut out), 1);
        tr.reset();
        assert_eq!(tr.write(&mut out), 0);
        tr.step(&[det(&ego, 5.0, 0.0, 0)], &ego);
        tr.write(&mut out);
        assert_eq!(out[0].id, 1);
    }
}
