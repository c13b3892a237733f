//! Evaluation against ground truth: CLEAR-MOT tracking metrics and a collision check of
//! planned trajectories against the true future of the actors.
//!
//! Contract:
//! - [`MotEval`] implements the CLEAR-MOT procedure (Bernardin & Stiefelhagen, 2008) with a
//!   centre-distance threshold in the world frame: per frame, a ground-truth object keeps
//!   last frame's track if that track is still present and within the threshold; the
//!   remaining objects and tracks are matched optimally (Hungarian, [`crate::assignment`]) by
//!   distance, gated at the threshold. An object matched to a different track than the
//!   last one it was matched to (in any earlier frame) counts one ID switch.
//!   `MOTA = 1 − (misses + false positives + ID switches) / ground-truth objects`
//!   (`1 − errors` when no ground truth was seen: so an empty sequence scores 1 and false
//!   positives alone still lower it); `MOTP` is the mean distance of matched pairs, m.
//! - By distance ([`MotEval::frame_in_bands`]): the matching is the one above, over the
//!   whole frame; each count is then charged to a band of [`RANGE_BANDS_M`] — a match, miss
//!   or ID switch to its object's band, a false positive to its track's — so the bands'
//!   counts add up to the totals (an item without a band, e.g. a non-finite position, is
//!   in the totals only) and a band's MOTA is its errors over its objects.
//! - Entries with `valid == 0` are ignored on both sides. Deterministic (ordered maps only).
//! - This runs after publishing, off the hot path: it may allocate.
//!
//! [`seg_truth`] rasterises the ground-truth BEV segmentation from the road map.
//!
//! [`first_collision`] checks a planned trajectory with the ego box exactly as the planner
//! places it ([`crate::geometry::ego_box`], no inflation) against ground-truth boxes;
//! [`first_collision_with`] also names the box it met.

pub mod detection;
pub mod quality;
pub mod seg_truth;
pub mod segmentation;
pub mod tracking;

pub use detection::{
    range_band, range_band_from, DetectionEval, DetectionSummary, EvalDet, EvalGt, RANGE_BANDS_M,
    RANGE_BAND_NAMES,
};
pub use quality::{Quality, QualityEval};
pub use seg_truth::{seg_ground_truth, SegTruthError, MARKING_HALF_WIDTH_M};
pub use segmentation::{SegEval, SegSummary};
pub use tracking::{track_confidence, TrackingEval, TrackingSummary};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::assignment::Assignment;
use crate::geometry::{boxes_overlap, ego_box};
use crate::types::{GtBox, TrackState, TrajPoint};

/// Accumulated CLEAR-MOT figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MotSummary {
    /// Frames evaluated.
    pub frames: u64,
    /// Ground-truth objects summed over frames.
    pub gt_objects: u64,
    /// Matched (object, track) pairs summed over frames.
    pub matches: u64,
    /// Ground-truth objects without a track (false negatives).
    pub misses: u64,
    /// Tracks without a ground-truth object.
    pub false_positives: u64,
    /// Objects whose track changed.
    pub id_switches: u64,
    /// Multiple-object tracking accuracy.
    pub mota: f64,
    /// Multiple-object tracking precision: mean matched distance, m.
    pub motp_m: f64,
}

impl MotSummary {
    /// These counts with `mota` and `motp_m` computed (`dist_sum`: the matched distances' sum).
    fn with_ratios(mut self, dist_sum: f64) -> MotSummary {
        let errors = (self.misses + self.false_positives + self.id_switches) as f64;
        self.mota = 1.0 - errors / (self.gt_objects.max(1)) as f64;
        self.motp_m = if self.matches > 0 {
            dist_sum / self.matches as f64
        } else {
            0.0
        };
        self
    }
}

/// CLEAR-MOT evaluator (see the module docs).
#[derive(Debug)]
pub struct MotEval {
    match_dist_m: f32,
    /// gt id → track id matched in the previous frame.
    prev: BTreeMap<u32, u32>,
    /// gt id → track id of its last match ever (for ID switches).
    last: BTreeMap<u32, u32>,
    sum: MotSummary,
    dist_sum: f64,
    /// Per distance band: the counts charged to it and its matched distance sum.
    bands: [(MotSummary, f64); RANGE_BANDS_M.len()],
}

impl MotEval {
    /// An evaluator that matches objects and tracks whose centres are within
    /// `match_dist_m` metres (typically 2.0).
    pub fn new(match_dist_m: f32) -> Self {
        Self {
            match_dist_m,
            prev: BTreeMap::new(),
            last: BTreeMap::new(),
            sum: MotSummary::default(),
            dist_sum: 0.0,
            bands: Default::default(),
        }
    }

    /// One frame: ground-truth boxes (world) within the evaluation region, and the
    /// published tracks (world). CLEAR-MOT: keep last frame's gt→track correspondences if
    /// still within distance, then Hungarian on remaining pairs by distance; counts
    /// matches, misses (FN), false positives, ID switches. Returns the ids of the matched
    /// tracks.
    pub fn frame(&mut self, gt: &[GtBox], tracks: &[TrackState]) -> Vec<u32> {
        self.frame_in_bands(gt, tracks, &|_, _| None)
    }

    /// [`MotEval::frame`], also charging each count to the distance band `band(x, y)` gives
    /// for its object's (matches, misses, ID switches) or track's (false positives) world
    /// position (see the module docs; [`MotEval::summary_by_band`] reads them).
    pub fn frame_in_bands(
        &mut self,
        gt: &[GtBox],
        tracks: &[TrackState],
        band: &dyn Fn(f64, f64) -> Option<usize>,
    ) -> Vec<u32> {
        let gts: Vec<&GtBox> = gt.iter().filter(|g| g.valid != 0).collect();
        let trs: Vec<&TrackState> = tracks.iter().filter(|t| t.valid != 0).collect();
        let thr = f64::from(self.match_dist_m);
        let dist = |g: &GtBox, t: &TrackState| -> f64 {
            let d = ((g.x - f64::from(t.x)).powi(2) + (g.y - f64::from(t.y)).powi(2)).sqrt();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d
            }
        };

        let mut gt_match: Vec<Option<usize>> = vec![None; gts.len()];
        let mut tr_used = vec![false; trs.len()];
        // 1. Keep last frame's correspondences.
        for (gi, g) in gts.iter().enumerate() {
            let Some(&tid) = self.prev.get(&g.id) else {
                continue;
            };
            if let Some(ti) = trs.iter().position(|t| t.id == tid) {
                if !tr_used[ti] && dist(g, trs[ti]) <= thr {
                    gt_match[gi] = Some(ti);
                    tr_used[ti] = true;
                }
            }
        }
        // 2. Hungarian on the rest.
        let rows: Vec<usize> = (0..gts.len()).filter(|&i| gt_match[i].is_none()).collect();
        let cols: Vec<usize> = (0..trs.len()).filter(|&j| !tr_used[j]).collect();
        if !rows.is_empty() && !cols.is_empty() {
            let mut cost = Vec::with_capacity(rows.len() * cols.len());
            for &gi in &rows {
                for &tj in &cols {
                    let d = dist(gts[gi], trs[tj]);
                    cost.push(if d <= thr { d as f32 } else { f32::INFINITY });
                }
            }
            let mut solver = Assignment::new(rows.len(), cols.len());
            let mut r2c = vec![-1i32; rows.len()];
            if solver
                .solve(&cost, rows.len(), cols.len(), f32::INFINITY, &mut r2c)
                .is_ok()
            {
                for (ri, &c) in r2c.iter().enumerate() {
                    if let Ok(c) = usize::try_from(c) {
                        gt_match[rows[ri]] = Some(cols[c]);
                        tr_used[cols[c]] = true;
                    }
                }
            }
        }
        // 3. Count.
        self.prev.clear();
        let mut matched = Vec::with_capacity(gts.len());
        for (gi, g) in gts.iter().enumerate() {
            let mut charged = band(g.x, g.y).and_then(|b| self.bands.get_mut(b));
            if let Some((s, _)) = charged.as_mut() {
                s.gt_objects += 1;
            }
            match gt_match[gi] {
                Some(ti) => {
                    let t = trs[ti];
                    let d = dist(g, t);
                    self.sum.matches += 1;
                    self.dist_sum += d;
                    let switched = self.last.get(&g.id).is_some_and(|&old| old != t.id);
                    if switched {
                        self.sum.id_switches += 1;
                    }
                    if let Some((s, dsum)) = charged {
                        s.matches += 1;
                        *dsum += d;
                        s.id_switches += u64::from(switched);
                    }
                    self.last.insert(g.id, t.id);
                    self.prev.insert(g.id, t.id);
                    matched.push(t.id);
                }
                None => {
                    self.sum.misses += 1;
                    if let Some((s, _)) = charged {
                        s.misses += 1;
                    }
                }
            }
        }
        for (t, _) in trs.iter().zip(&tr_used).filter(|(_, used)| !**used) {
            self.sum.false_positives += 1;
            if let Some((s, _)) =
                band(f64::from(t.x), f64::from(t.y)).and_then(|b| self.bands.get_mut(b))
            {
                s.false_positives += 1;
            }
        }
        self.sum.gt_objects += gts.len() as u64;
        self.sum.frames += 1;
        for (s, _) in &mut self.bands {
            s.frames += 1;
        }
        matched
    }

    /// Ends a sequence (a log): the next frame starts without correspondences or match
    /// history, so ids of different logs never meet. The counts carry on.
    pub fn end_sequence(&mut self) {
        self.prev.clear();
        self.last.clear();
    }

    /// The figures so far.
    pub fn summary(&self) -> MotSummary {
        self.sum.with_ratios(self.dist_sum)
    }

    /// The figures of each distance band of [`RANGE_BANDS_M`] (the counts
    /// [`MotEval::frame_in_bands`] charged to it; all zero after [`MotEval::frame`] only).
    pub fn summary_by_band(&self) -> [MotSummary; RANGE_BANDS_M.len()] {
        self.bands.map(|(s, dsum)| s.with_ratios(dsum))
    }
}

/// Collision check of a planned trajectory against the TRUE future of the actors:
/// `future(k)` returns the ground-truth boxes at time (k+1)*PRED_DT; ego box as in the
/// planner (no inflation). Returns the first colliding step, if any.
pub fn first_collision(traj: &[TrajPoint], future: &dyn Fn(usize) -> Vec<GtBox>) -> Option<usize> {
    first_collision_with(traj, future).map(|(k, _)| k)
}

/// [`first_collision`], with the true box the ego met at that step (the first in
/// `future(k)`'s order when several overlap).
pub fn first_collision_with(
    traj: &[TrajPoint],
    future: &dyn Fn(usize) -> Vec<GtBox>,
) -> Option<(usize, GtBox)> {
    traj.iter().enumerate().find_map(|(k, p)| {
        let ego = ego_box(p.x, p.y, p.yaw, 0.0);
        future(k)
            .into_iter()
            .filter(|g| g.valid != 0)
            .find(|g| {
                boxes_overlap(
                    ego,
                    (g.x as f32, g.y as f32, g.yaw as f32, g.length, g.width),
                )
            })
            .map(|g| (k, g))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gt(id: u32, x: f64) -> GtBox {
        GtBox {
            id,
            x,
            y: 0.0,
            length: 4.0,
            width: 2.0,
            valid: 1,
            ..GtBox::default()
        }
    }

    fn tr(id: u32, x: f32) -> TrackState {
        TrackState {
            id,
            x,
            y: 0.0,
            valid: 1,
            ..TrackState::default()
        }
    }

    #[test]
    fn counts_are_charged_to_the_object_or_track_band() {
        // Band by x alone: 0-20, 20-40, 40+ (the ego at the origin, facing +x).
        let band = |x: f64, _y: f64| range_band(x.abs());
        let mut ev = MotEval::new(2.0);
        // Frame 1: object 1 at 10 m tracked by 7; object 2 at 30 m missed; object 3 at 50 m
        // tracked by 9; a false track at 45 m.
        ev.frame_in_bands(
            &[gt(1, 10.0), gt(2, 30.0), gt(3, 50.0)],
            &[tr(7, 10.5), tr(9, 50.0), tr(11, 45.0)],
            &band,
        );
        // Frame 2: object 3 (still 50 m) now tracked by 12: an ID switch, in the far band;
        // object 1 at 19.5 m matched by a track at 20.5 m: its band is the object's.
        ev.frame_in_bands(
            &[gt(1, 19.5), gt(3, 50.0)],
            &[tr(7, 20.5), tr(12, 50.0)],
            &band,
        );
        let [near, mid, far] = ev.summary_by_band();
        assert_eq!(
            (
                near.gt_objects,
                near.matches,
                near.misses,
                near.false_positives,
                near.id_switches
            ),
            (2, 2, 0, 0, 0)
        );
        assert_eq!((mid.gt_objects, mid.misses, mid.false_positives), (1, 1, 0));
        assert_eq!(mid.mota, 0.0);
        assert_eq!(
            (
                far.gt_objects,
                far.matches,
                far.false_positives,
                far.id_switches
            ),
            (2, 2, 1, 1)
        );
        assert_eq!(far.mota, 0.0);
        assert!((near.motp_m - 0.75).abs() < 1e-12, "{}", near.motp_m);
        // The bands add up to the totals.
        let all = ev.summary();
        let sum = |f: fn(&MotSummary) -> u64| [near, mid, far].iter().map(f).sum::<u64>();
        assert_eq!(sum(|m| m.gt_objects), all.gt_objects);
        assert_eq!(sum(|m| m.matches), all.matches);
        assert_eq!(sum(|m| m.misses), all.misses);
        assert_eq!(sum(|m| m.false_positives), all.false_positives);
        assert_eq!(sum(|m| m.id_switches), all.id_switches);
        // Without bands nothing is charged, and the totals are the same.
        let mut plain = MotEval::new(2.0);
        plain.frame(
            &[gt(1, 10.0), gt(2, 30.0), gt(3, 50.0)],
            &[tr(7, 10.5), tr(9, 50.0), tr(11, 45.0)],
        );
        plain.frame(&[gt(1, 19.5), gt(3, 50.0)], &[tr(7, 20.5), tr(12, 50.0)]);
        assert_eq!(plain.summary(), all);
        assert!(plain
            .summary_by_band()
            .iter()
            .all(|m| m.gt_objects == 0 && m.false_positives == 0));
    }

    #[test]
    fn perfect_sequence() {
        let mut ev = MotEval::new(2.0);
        for k in 0..5 {
            let x = k as f64;
            ev.frame(
                &[gt(1, x), gt(2, x + 20.0)],
                &[tr(7, x as f32 + 0.5), tr(9, x as f32 + 20.0)],
            );
        }
        let s = ev.summary();
        assert_eq!((s.frames, s.gt_objects, s.matches), (5, 10, 10));
        assert_eq!((s.misses, s.false_positives, s.id_switches), (0, 0, 0));
        assert_eq!(s.mota, 1.0);
        assert!((s.motp_m - 0.25).abs() < 1e-9);
    }

    #[test]
    fn miss_false_positive_and_id_switch() {
        let mut ev = MotEval::new(2.0);
        // Frame 1: both matched.
        ev.frame(&[gt(1, 0.0), gt(2, 10.0)], &[tr(1, 0.0), tr(2, 10.0)]);
        // Frame 2: gt 2 missed (its track is 5 m off: also a false positive).
        ev.frame(&[gt(1, 0.0), gt(2, 10.0)], &[tr(1, 0.0), tr(2, 15.0)]);
        // Frame 3: gt 1 now covered by track 3 (track 1 gone): an ID switch; gt 2 back on 2.
        ev.frame(&[gt(1, 0.0), gt(2, 10.0)], &[tr(3, 0.5), tr(2, 10.0)]);
        // Frame 4: a false positive far away, ground truth empty except gt 1.
        ev.frame(&[gt(1, 0.0)], &[tr(3, 0.0), tr(4, 50.0)]);
        let s = ev.summary();
        assert_eq!(s.frames, 4);
        assert_eq!(s.gt_objects, 7);
        assert_eq!(s.matches, 6);
        assert_eq!(s.misses, 1);
        assert_eq!(s.false_positives, 2);
        assert_eq!(s.id_switches, 1);
        assert!((s.mota - (1.0 - 4.0 / 7.0)).abs() < 1e-12, "{}", s.mota);
    }

    #[test]
    fn previous_correspondence_wins_over_a_closer_track() {
        let mut ev = MotEval::new(2.0);
        ev.frame(&[gt(1, 0.0)], &[tr(1, 0.0)]);
        // Track 2 is closer now, but track 1 is still within 2 m: no switch.
        ev.frame(&[gt(1, 0.0)], &[tr(1, 1.5), tr(2, 0.1)]);
        let s = ev.summary();
        assert_eq!(s.id_switches, 0);
        assert_eq!(s.false_positives, 1);
    }

    #[test]
    fn invalid_entries_ignored_and_empty_is_fine() {
        let mut ev = MotEval::new(2.0);
        let mut g = gt(1, 0.0);
        g.valid = 0;
        let mut t = tr(1, 0.0);
        t.valid = 0;
        ev.frame(&[g], &[t]);
        ev.frame(&[], &[]);
        let s = ev.summary();
        assert_eq!((s.gt_objects, s.matches, s.false_positives), (0, 0, 0));
        assert_eq!(s.mota, 1.0);
        assert!(serde_json::to_string(&s).unwrap().contains("\"mota\":1.0"));
    }

    #[test]
    fn first_collision_finds_the_step() {
        // Ego drives +x at 10 m/s from x = 0; a box sits at x = 20.
        let traj: Vec<TrajPoint> = (0..30)
            .map(|k| {
                let t = (k + 1) as f32 * 0.1;
                TrajPoint {
                    t,
                    x: 10.0 * t,
                    y: 0.0,
                    yaw: 0.0,
                    v: 10.0,
                    _pad: 0.0,
                }
            })
            .collect();
        let obstacle = |_k: usize| vec![gt(1, 20.0)];
        // Ego front = x + 1.4 + 2.3 touches the box rear (18.0) when x > 14.3: t = 1.5 s → k = 14.
        assert_eq!(first_collision(&traj, &obstacle), Some(14));
        let far = |_k: usize| vec![gt(1, 60.0)];
        assert_eq!(first_collision(&traj, &far), None);
        let beside = |_k: usize| {
            let mut g = gt(1, 20.0);
            g.y = 3.5;
            vec![g]
        };
        assert_eq!(first_collision(&traj, &beside), None);
        // Two boxes in the way: the one met first, and at its step.
        let two = |k: usize| {
            let mut near = gt(7, 20.0);
            near.valid = u32::from(k >= 10);
            vec![gt(3, 30.0), near]
        };
        let (k, g) = first_collision_with(&traj, &two).expect("a collision");
        assert_eq!((k, g.id), (14, 7));
    }
}
