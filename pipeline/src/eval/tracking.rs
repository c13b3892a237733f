//! Tracking quality over whole sequences: CLEAR-MOT (via [`MotEval`]) and nuScenes' AMOTA
//! (Weng et al., 2020; the nuScenes tracking devkit's `TrackingEvaluation`).
//!
//! Contract:
//! - Frames are added in order with [`TrackingEval::frame`]; [`TrackingEval::end_sequence`]
//!   separates logs (ID state is not carried from one sequence into the next, so pooled
//!   logs score as the sum of their sequences).
//! - MOTA, MOTP and ID switches: [`MotEval`] over every published track; by distance from
//!   the ego (the bands of [`RANGE_BANDS_M`](super::RANGE_BANDS_M), charged as
//!   [`MotEval::frame_in_bands`] says) for the frames added with their ego pose
//!   ([`TrackingEval::frame_at`]).
//! - AMOTA: nuScenes ranks tracks by a confidence score; our tracks carry none, so the
//!   confidence is [`track_confidence`] = `age / (1 + misses)` — frames since birth, divided
//!   down while the track coasts without detections (an established, currently observed
//!   track is trusted most). As the devkit: one run over all tracks gives the confidences
//!   of the matched tracks; sorted descending, the `k`-th gives recall `k / objects`; for
//!   each of the [`AMOTA_THRESHOLDS`] recall levels `linspace(0.1, 1, 40)` the confidence
//!   threshold is `numpy.interp(level, recalls, confidences, right=0)` (a level above the
//!   highest recall reached has none); the sequences are then scored again with only the
//!   tracks at or above the threshold, giving
//!   `MOTAR = max(0, 1 − (misses + ID switches + false positives − (1 − r)·objects) / (r·objects))`
//!   with `r` = that run's recall (matches / objects). AMOTA is the mean over the 40
//!   levels, a level without a threshold (or with `r = 0`) scoring 0, the devkit's worst
//!   value. Integer ages make many thresholds coincide; each distinct one is scored once.
//! - Off the hot path: stores every frame's boxes and tracks, allocates. Deterministic.

use std::collections::BTreeMap;

use serde::Serialize;

use super::detection::interp;
use super::{range_band_from, MotEval, MotSummary, RANGE_BAND_NAMES};
use crate::types::{EgoPose, GtBox, TrackState};

/// Recall levels AMOTA averages over (the devkit's `num_thresholds`).
pub const AMOTA_THRESHOLDS: usize = 40;
/// The lowest recall level (the devkit's `min_recall`).
pub const AMOTA_MIN_RECALL: f64 = 0.1;

/// The confidence AMOTA ranks a track by: `age / (1 + misses)` (see the module docs).
pub fn track_confidence(t: &TrackState) -> f64 {
    f64::from(t.age) / (1.0 + f64::from(t.misses))
}

/// Tracking figures over all sequences.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrackingSummary {
    /// CLEAR-MOT over every track.
    pub mot: MotSummary,
    /// Average MOTA over recall levels (nuScenes), in [0, 1].
    pub amota: f64,
    /// Recall levels (of 40) the tracks reached.
    pub amota_levels_reached: u32,
    /// Distance band (`0-20m`, `20-40m`, `40m+` from the ego) → CLEAR-MOT of the counts
    /// charged to it (over the frames added with [`TrackingEval::frame_at`]).
    pub mot_by_range: BTreeMap<String, MotSummary>,
}

/// One frame as evaluated: ground truth in range, the valid tracks and, when known, the
/// ego pose (for the distance bands).
type Frame = (Vec<GtBox>, Vec<TrackState>, Option<EgoPose>);

/// Accumulates sequences of frames (see the module docs).
#[derive(Debug, Clone)]
pub struct TrackingEval {
    match_dist_m: f32,
    sequences: Vec<Vec<Frame>>,
}

impl TrackingEval {
    /// Matching within `match_dist_m` metres (2.0, as nuScenes' tracking benchmark).
    pub fn new(match_dist_m: f32) -> Self {
        TrackingEval {
            match_dist_m,
            sequences: vec![Vec::new()],
        }
    }

    /// One frame of the current sequence: ground truth (world) in the evaluated region and
    /// the published tracks (world); entries with `valid == 0` are dropped. Counts in no
    /// distance band (see [`TrackingEval::frame_at`]).
    pub fn frame(&mut self, gt: &[GtBox], tracks: &[TrackState]) {
        self.push(gt, tracks, None);
    }

    /// [`TrackingEval::frame`] of a frame whose ego pose was `ego`: its counts are also
    /// charged to the distance bands.
    pub fn frame_at(&mut self, ego: &EgoPose, gt: &[GtBox], tracks: &[TrackState]) {
        self.push(gt, tracks, Some(*ego));
    }

    fn push(&mut self, gt: &[GtBox], tracks: &[TrackState], ego: Option<EgoPose>) {
        let g = gt.iter().copied().filter(|g| g.valid != 0).collect();
        let t = tracks.iter().copied().filter(|t| t.valid != 0).collect();
        if let Some(seq) = self.sequences.last_mut() {
            seq.push((g, t, ego));
        }
    }

    /// Ends the current sequence (the next frame starts a new one).
    pub fn end_sequence(&mut self) {
        if self.sequences.last().is_some_and(|s| !s.is_empty()) {
            self.sequences.push(Vec::new());
        }
    }

    /// Appends `other`'s sequences after this one's.
    pub fn merge(&mut self, other: &TrackingEval) {
        self.end_sequence();
        self.sequences.pop_if(|s| s.is_empty());
        self.sequences
            .extend(other.sequences.iter().filter(|s| !s.is_empty()).cloned());
        self.sequences.push(Vec::new());
    }

    /// The CLEAR-MOT evaluator over the tracks with confidence ≥ `min_conf` (all with
    /// `None`; only that run charges the distance bands), and the confidences of the
    /// matched tracks.
    fn run(&self, min_conf: Option<f64>) -> (MotEval, Vec<f64>) {
        let mut ev = MotEval::new(self.match_dist_m);
        let mut matched = Vec::new();
        let mut kept = Vec::new();
        for seq in &self.sequences {
            for (g, t, ego) in seq {
                kept.clear();
                kept.extend(
                    t.iter()
                        .copied()
                        .filter(|t| min_conf.is_none_or(|m| track_confidence(t) >= m)),
                );
                let banded = ego.as_ref().filter(|_| min_conf.is_none());
                let band = |x: f64, y: f64| range_band_from(banded?, x, y);
                for id in ev.frame_in_bands(g, &kept, &band) {
                    if let Some(tr) = kept.iter().find(|t| t.id == id) {
                        matched.push(track_confidence(tr));
                    }
                }
            }
            ev.end_sequence();
        }
        (ev, matched)
    }

    /// The figures so far.
    pub fn summary(&self) -> TrackingSummary {
        let (ev, mut scores) = self.run(None);
        let mot = ev.summary();
        let mut s = TrackingSummary {
            mot,
            mot_by_range: RANGE_BAND_NAMES
                .iter()
                .map(|name| name.to_string())
                .zip(ev.summary_by_band())
                .collect(),
            ..TrackingSummary::default()
        };
        let objects = mot.gt_objects as f64;
        if scores.is_empty() || mot.gt_objects == 0 {
            return s;
        }
        scores.sort_by(|a, b| b.total_cmp(a));
        let rec: Vec<f64> = (1..=scores.len()).map(|k| k as f64 / objects).collect();
        let max_rec = rec[rec.len() - 1];
        let mut cache: BTreeMap<u64, f64> = BTreeMap::new();
        let mut total = 0.0;
        for i in 0..AMOTA_THRESHOLDS {
            let level = AMOTA_MIN_RECALL
                + (1.0 - AMOTA_MIN_RECALL) * i as f64 / (AMOTA_THRESHOLDS - 1) as f64;
            let level = (level * 1e12).round() / 1e12;
            if level > max_rec {
                continue; // unreached: scores 0
            }
            s.amota_levels_reached += 1;
            let thr = interp(level, &rec, &scores);
            let motar = *cache.entry(thr.to_bits()).or_insert_with(|| {
                let m = self.run(Some(thr)).0.summary();
                motar(&m)
            });
            total += motar;
        }
        s.amota = total / AMOTA_THRESHOLDS as f64;
        s
    }
}

/// nuScenes' MOTAR of one thresholded run (0 when nothing matched).
fn motar(m: &MotSummary) -> f64 {
    let objects = m.gt_objects as f64;
    let recall = m.matches as f64 / objects.max(1.0);
    let denom = recall * objects;
    if denom <= 0.0 {
        return 0.0;
    }
    let errors = (m.misses + m.id_switches + m.false_positives) as f64;
    (1.0 - (errors - (1.0 - recall) * objects) / denom).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gt(id: u32, x: f64) -> GtBox {
        GtBox {
            id,
            x,
            valid: 1,
            ..GtBox::default()
        }
    }

    fn tr(id: u32, x: f32, age: u32) -> TrackState {
        TrackState {
            id,
            x,
            age,
            valid: 1,
            ..TrackState::default()
        }
    }

    #[test]
    fn perfect_tracking_scores_one() {
        let mut ev = TrackingEval::new(2.0);
        for k in 0..20 {
            let x = k as f64;
            ev.frame(
                &[gt(1, x), gt(2, x + 10.0)],
                &[tr(5, x as f32, k), tr(6, x as f32 + 10.0, k)],
            );
        }
        let s = ev.summary();
        assert_eq!(s.mot.mota, 1.0);
        assert!((s.amota - 1.0).abs() < 1e-12, "{}", s.amota);
        assert_eq!(s.amota_levels_reached, 40);
    }

    #[test]
    fn young_false_positives_are_thresholded_away() {
        // One object tracked perfectly (old track) and, every frame, a fresh false track
        // (age 0). MOTA = 1 − 1 = 0, but every recall level is reached by the old track
        // alone (confidence ≥ 1 for k ≥ 1): MOTAR is 1 at thresholds above 0. The first
        // frame's true track also has age 0, so the levels up to recall 1/20 … need
        // threshold 0 — none here, as 1/20 < 0.1. AMOTA = 1.
        let mut ev = TrackingEval::new(2.0);
        for k in 0..20 {
            ev.frame(&[gt(1, 0.0)], &[tr(1, 0.0, k + 1), tr(100 + k, 50.0, 0)]);
        }
        let s = ev.summary();
        assert_eq!(s.mot.false_positives, 20);
        assert_eq!(s.mot.mota, 0.0);
        assert!((s.amota - 1.0).abs() < 1e-12, "{}", s.amota);
    }

    #[test]
    fn half_recall_reaches_half_the_levels() {
        // Two objects, one never tracked: recall 0.5 at best. Levels 0.1 … 0.5 reached
        // (0.1 + 0.9·i/39 ≤ 0.5 for i ≤ 17: 18 levels). At each, the run keeps the one
        // track: r = 0.5, misses = objects/2, MOTAR = 1 − (N/2 − N/2)/(N/2) = 1.
        // AMOTA = 18/40.
        let mut ev = TrackingEval::new(2.0);
        for k in 0..10 {
            ev.frame(&[gt(1, 0.0), gt(2, 30.0)], &[tr(1, 0.0, k)]);
        }
        let s = ev.summary();
        assert_eq!(s.amota_levels_reached, 18);
        assert!((s.amota - 18.0 / 40.0).abs() < 1e-12, "{}", s.amota);
        // No tracks at all: AMOTA 0.
        let mut ev = TrackingEval::new(2.0);
        ev.frame(&[gt(1, 0.0)], &[]);
        assert_eq!(ev.summary().amota, 0.0);
    }

    #[test]
    fn sequences_do_not_share_ids_and_merge_appends() {
        // Same gt id and different track ids in two logs: no ID switch across the border.
        let mut a = TrackingEval::new(2.0);
        a.frame(&[gt(1, 0.0)], &[tr(1, 0.0, 3)]);
        let mut b = TrackingEval::new(2.0);
        b.frame(&[gt(1, 0.0)], &[tr(9, 0.0, 3)]);
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.mot.id_switches, 0);
        assert_eq!(s.mot.matches, 2);
        // Without the sequence break it would be a switch.
        let mut c = TrackingEval::new(2.0);
        c.frame(&[gt(1, 0.0)], &[tr(1, 0.0, 3)]);
        c.frame(&[gt(1, 0.0)], &[tr(9, 0.0, 3)]);
        assert_eq!(c.summary().mot.id_switches, 1);
    }

    #[test]
    fn bands_are_distances_from_the_frames_ego() {
        // The ego at (100, 0) facing -x: an object at x = 70 is 30 m ahead (20-40 m), one at
        // x = 95 is 5 m ahead; a false track at x = 40 is 60 m ahead. Frames added without
        // an ego count in the totals only.
        let ego = EgoPose {
            x: 100.0,
            yaw: std::f64::consts::PI,
            ..EgoPose::default()
        };
        let mut ev = TrackingEval::new(2.0);
        ev.frame_at(
            &ego,
            &[gt(1, 70.0), gt(2, 95.0)],
            &[tr(5, 95.0, 3), tr(6, 40.0, 3)],
        );
        ev.frame(&[gt(1, 70.0)], &[]);
        let s = ev.summary();
        let band = |b: &str| s.mot_by_range[b];
        assert_eq!((band("0-20m").gt_objects, band("0-20m").matches), (1, 1));
        assert_eq!((band("20-40m").gt_objects, band("20-40m").misses), (1, 1));
        assert_eq!(
            (band("40m+").gt_objects, band("40m+").false_positives),
            (0, 1)
        );
        assert_eq!(
            (s.mot.gt_objects, s.mot.misses, s.mot.false_positives),
            (3, 2, 1)
        );
    }

    #[test]
    fn confidence_is_age_over_misses() {
        let mut t = tr(1, 0.0, 10);
        assert_eq!(track_confidence(&t), 10.0);
        t.misses = 4;
        assert_eq!(track_confidence(&t), 2.0);
    }
}
