//! Detection average precision per class and mAP, with nuScenes' centre-distance matching
//! (Caesar et al., 2020; the devkit's `accumulate` and `calc_ap`).
//!
//! Contract:
//! - Per class and per distance threshold in [`DIST_THRESHOLDS_M`]: every detection of the
//!   class, over all frames, in descending score order (ties: earlier frame, then lower
//!   index within the frame — deterministic), is matched to the nearest ground-truth box
//!   of its class in the same frame not matched yet (ties: the lower box index), if that
//!   box's centre is closer than the threshold in the BEV plane (`distance < threshold`,
//!   as the devkit); otherwise it is a false positive. Because a box can only be taken by
//!   a detection of its own frame, the greedy order within each frame is all that matters:
//!   [`DetectionEval::frame`] matches a frame at once and keeps (score, true positive) per
//!   detection.
//! - The precision/recall curve is the cumulative one in that global order; precision is
//!   sampled at the 101 recall points 0, 0.01, …, 1 exactly as `numpy.interp(recalls,
//!   recall, precision, right=0)` does (linear between the neighbouring curve points;
//!   left of the first point its precision; right of the highest recall 0). AP drops the
//!   samples at recall ≤ [`MIN_RECALL`] (the devkit's current `calc_ap` also drops the
//!   0.1 bin itself) and averages `max(p − MIN_PRECISION, 0) / (1 − MIN_PRECISION)` over
//!   the other 90. No detections with ground truth present: AP 0.
//! - AP of a class = the mean over the four thresholds; a class without ground truth has no
//!   AP (`None`) and mAP is the mean over the classes that have ground truth (`None` when
//!   none has).
//! - Inputs are world frame; entries with `valid == 0` or a class outside `class::COUNT`
//!   are ignored; a non-finite position never matches. Deterministic (ordered data only).
//!   Off the hot path: allocates.

use redline_runtime::det_math as dm;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::geometry::world_to_ego;
use crate::types::{class, EgoPose};

/// The nuScenes centre-distance thresholds, m.
pub const DIST_THRESHOLDS_M: [f64; 4] = [0.5, 1.0, 2.0, 4.0];
/// Recall at and below which precision samples are ignored.
pub const MIN_RECALL: f64 = 0.1;
/// Precision below which a sample counts as zero.
pub const MIN_PRECISION: f64 = 0.1;

/// Distance bands from the ego (BEV plane, m) for AP by range: detections and ground truth
/// are each assigned to the band of their own distance and every band is an evaluation of
/// its own (as the nuScenes devkit filters by class range). A box near a band edge can
/// thus be a miss in one band and its detection a false positive in the next.
pub const RANGE_BANDS_M: [(f64, f64); 3] = [(0.0, 20.0), (20.0, 40.0), (40.0, f64::INFINITY)];
/// Names of [`RANGE_BANDS_M`] (keys of `Quality::ap_by_range`).
pub const RANGE_BAND_NAMES: [&str; 3] = ["0-20m", "20-40m", "40m+"];

/// The band of [`RANGE_BANDS_M`] a distance falls in (None: not finite or negative).
pub fn range_band(distance_m: f64) -> Option<usize> {
    RANGE_BANDS_M
        .iter()
        .position(|&(lo, hi)| distance_m >= lo && distance_m < hi)
}

/// The band of [`RANGE_BANDS_M`] of the world point `(x, y)` seen from `ego` (its
/// distance in the ego frame).
pub fn range_band_from(ego: &EgoPose, x: f64, y: f64) -> Option<usize> {
    let (ex, ey) = world_to_ego(ego, x, y);
    range_band(dm::hypot(ex, ey))
}

/// A detection to evaluate: world-frame centre, class and score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalDet {
    /// Centre, m.
    pub x: f64,
    /// Centre, m.
    pub y: f64,
    /// `class::*`.
    pub class: u32,
    /// Confidence.
    pub score: f32,
}

/// A ground-truth box to evaluate against: world-frame centre and class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalGt {
    /// Centre, m.
    pub x: f64,
    /// Centre, m.
    pub y: f64,
    /// `class::*`.
    pub class: u32,
}

/// One scored detection of one class at one threshold: (score, frame, index, true positive).
type Scored = (f32, u64, u32, bool);

/// Accumulates frames; [`DetectionEval::summary`] computes the APs.
#[derive(Debug, Clone, Default)]
pub struct DetectionEval {
    /// Frames seen (the frame key of the next frame).
    frames: u64,
    /// Ground-truth boxes per class.
    npos: [u64; class::COUNT],
    /// Per class, per threshold.
    scored: [[Vec<Scored>; DIST_THRESHOLDS_M.len()]; class::COUNT],
}

/// Detection figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DetectionSummary {
    /// Frames evaluated.
    pub frames: u64,
    /// Mean AP over the classes with ground truth (None: no ground truth at all).
    pub map: Option<f64>,
    /// Class name → AP (mean over the thresholds); None for a class without ground truth.
    pub ap: BTreeMap<String, Option<f64>>,
    /// Class name → AP per threshold, in [`DIST_THRESHOLDS_M`] order.
    pub ap_per_threshold: BTreeMap<String, Option<[f64; 4]>>,
    /// The distance thresholds, m.
    pub thresholds_m: [f64; 4],
    /// Class name → ground-truth boxes.
    pub gt_boxes: BTreeMap<String, u64>,
    /// Class name → detections.
    pub detections: BTreeMap<String, u64>,
}

impl DetectionEval {
    /// An empty evaluator.
    pub fn new() -> Self {
        Self::default()
    }

    /// One frame: its ground truth and detections, world frame.
    pub fn frame(&mut self, gt: &[EvalGt], dets: &[EvalDet]) {
        let key = self.frames;
        self.frames += 1;
        for c in 0..class::COUNT as u32 {
            let g: Vec<(f64, f64)> = gt
                .iter()
                .filter(|b| b.class == c)
                .map(|b| (b.x, b.y))
                .collect();
            self.npos[c as usize] += g.len() as u64;
            // This frame's detections of the class in the global order: score descending,
            // then index.
            let mut d: Vec<(u32, &EvalDet)> = dets
                .iter()
                .enumerate()
                .filter(|(_, d)| d.class == c)
                .map(|(i, d)| (i as u32, d))
                .collect();
            d.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
            for (t, &thr) in DIST_THRESHOLDS_M.iter().enumerate() {
                let mut taken = vec![false; g.len()];
                for &(i, det) in &d {
                    let mut best: Option<(f64, usize)> = None;
                    for (gi, &(gx, gy)) in g.iter().enumerate() {
                        if taken[gi] {
                            continue;
                        }
                        let dist = dm::hypot(gx - det.x, gy - det.y);
                        if dist.is_finite() && best.is_none_or(|(bd, _)| dist < bd) {
                            best = Some((dist, gi));
                        }
                    }
                    let tp = match best {
                        Some((dist, gi)) if dist < thr => {
                            taken[gi] = true;
                            true
                        }
                        _ => false,
                    };
                    self.scored[c as usize][t].push((det.score, key, i, tp));
                }
            }
        }
    }

    /// Appends `other`'s frames after this evaluator's (pooling several logs).
    pub fn merge(&mut self, other: &DetectionEval) {
        let off = self.frames;
        self.frames += other.frames;
        for c in 0..class::COUNT {
            self.npos[c] += other.npos[c];
            for t in 0..DIST_THRESHOLDS_M.len() {
                self.scored[c][t].extend(
                    other.scored[c][t]
                        .iter()
                        .map(|&(s, f, i, tp)| (s, f + off, i, tp)),
                );
            }
        }
    }

    /// The figures so far.
    pub fn summary(&self) -> DetectionSummary {
        let mut s = DetectionSummary {
            frames: self.frames,
            thresholds_m: DIST_THRESHOLDS_M,
            ..DetectionSummary::default()
        };
        let mut aps = Vec::new();
        for (c, name) in class::NAMES.iter().enumerate() {
            let name = name.to_string();
            s.gt_boxes.insert(name.clone(), self.npos[c]);
            s.detections
                .insert(name.clone(), self.scored[c][0].len() as u64);
            if self.npos[c] == 0 {
                s.ap.insert(name.clone(), None);
                s.ap_per_threshold.insert(name, None);
                continue;
            }
            let mut per = [0.0; 4];
            for (t, p) in per.iter_mut().enumerate() {
                let mut v = self.scored[c][t].clone();
                v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
                let tps: Vec<bool> = v.iter().map(|e| e.3).collect();
                *p = average_precision(&tps, self.npos[c]);
            }
            let ap = per.iter().sum::<f64>() / per.len() as f64;
            aps.push(ap);
            s.ap.insert(name.clone(), Some(ap));
            s.ap_per_threshold.insert(name, Some(per));
        }
        s.map = (!aps.is_empty()).then(|| aps.iter().sum::<f64>() / aps.len() as f64);
        s
    }
}

/// nuScenes AP of detections in descending score order (`true` = a true positive) against
/// `npos` ground-truth boxes (see the module docs). 0 when `npos` is 0 or nothing was
/// detected.
pub fn average_precision(tps: &[bool], npos: u64) -> f64 {
    if npos == 0 || tps.is_empty() {
        return 0.0;
    }
    let mut rec = Vec::with_capacity(tps.len());
    let mut prec = Vec::with_capacity(tps.len());
    let (mut tp, mut fp) = (0u64, 0u64);
    for &t in tps {
        if t {
            tp += 1;
        } else {
            fp += 1;
        }
        rec.push(tp as f64 / npos as f64);
        prec.push(tp as f64 / (tp + fp) as f64);
    }
    let first = (100.0 * MIN_RECALL).round() as usize + 1;
    let sum: f64 = (first..=100)
        .map(|k| (interp(k as f64 / 100.0, &rec, &prec) - MIN_PRECISION).max(0.0))
        .sum();
    // At most 1 mathematically; the float sum of 90 equal terms can land an ulp above.
    (sum / (101 - first) as f64 / (1.0 - MIN_PRECISION)).min(1.0)
}

/// `numpy.interp(x, xp, fp, right=0)` for non-decreasing `xp` (non-empty): the last
/// index `j` with `xp[j] <= x` decides; exact hits and the last point take `fp[j]`,
/// otherwise linear towards `j + 1`; left of `xp[0]`: `fp[0]`; right of the end: 0.
pub(crate) fn interp(x: f64, xp: &[f64], fp: &[f64]) -> f64 {
    let n = xp.len();
    if x < xp[0] {
        return fp[0];
    }
    if x > xp[n - 1] {
        return 0.0;
    }
    // Last j with xp[j] <= x.
    let j = xp.partition_point(|&v| v <= x) - 1;
    if j == n - 1 || xp[j] == x {
        return fp[j];
    }
    let slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
    slope * (x - xp[j]) + fp[j]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(x: f64, class: u32, score: f32) -> EvalDet {
        EvalDet {
            x,
            y: 0.0,
            class,
            score,
        }
    }

    fn gt(x: f64, class: u32) -> EvalGt {
        EvalGt { x, y: 0.0, class }
    }

    #[test]
    fn perfect_detections_score_one() {
        let mut ev = DetectionEval::new();
        for f in 0..10 {
            let x = f as f64;
            ev.frame(
                &[gt(x, 0), gt(x + 10.0, 0), gt(x + 20.0, 1)],
                &[det(x, 0, 0.9), det(x + 10.1, 0, 0.8), det(x + 20.0, 1, 0.5)],
            );
        }
        let s = ev.summary();
        assert_eq!(s.frames, 10);
        assert_eq!(s.ap["car"], Some(1.0));
        assert_eq!(s.ap["pedestrian"], Some(1.0));
        assert_eq!(s.ap["cyclist"], None, "no cyclist ground truth");
        assert_eq!(s.map, Some(1.0));
        assert_eq!(s.gt_boxes["car"], 20);
        assert_eq!(s.detections["pedestrian"], 10);
    }

    #[test]
    fn false_positives_below_every_true_positive_cost_only_the_last_sample() {
        // N true positives, then N false positives with lower scores: precision is 1 up to
        // recall 1, where the curve ends at precision 0.5. Samples 0.11 … 0.99 are 1, the
        // sample at recall 1.0 is 0.5: AP = (89 × 0.9 + 0.4) / 90 / 0.9 = 80.5 / 81.
        let tps: Vec<bool> = (0..20).map(|i| i < 10).collect();
        let ap = average_precision(&tps, 10);
        assert!((ap - 80.5 / 81.0).abs() < 1e-12, "{ap}");
        // The same through the evaluator (false positives far from any box).
        let mut ev = DetectionEval::new();
        for f in 0..10 {
            ev.frame(&[gt(0.0, 2)], &[det(0.0, 2, 0.9), det(50.0, 2, 0.1)]);
            let _ = f;
        }
        let s = ev.summary();
        assert!((s.ap["cyclist"].unwrap() - 80.5 / 81.0).abs() < 1e-12);
    }

    #[test]
    fn recall_limits_and_the_min_recall_bin() {
        // One box of 10 found: recall 0.1 only; the 0.1 bin is dropped, every later sample
        // lies right of the curve (0): AP 0. Two found: samples 0.11 … 0.2 are 1: AP 1/9.
        assert_eq!(average_precision(&[true], 10), 0.0);
        assert!((average_precision(&[true, true], 10) - 1.0 / 9.0).abs() < 1e-12);
        // A false positive first: precision 0 left of recall 0.1, then 0.5 at 0.1, rising
        // linearly to 2/3 at recall 0.2: the samples 0.11 … 0.2 are 0.5 + k/60 (k = 1 …
        // 10) minus 0.1: AP = Σ (0.4 + k/60) / 90 / 0.9.
        let want: f64 = (1..=10).map(|k| 0.4 + k as f64 / 60.0).sum::<f64>() / 90.0 / 0.9;
        let got = average_precision(&[false, true, true], 10);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        // Half the boxes never detected: recall stops at 0.5 (samples above it are 0):
        // samples 0.11 … 0.5 are 1 (40 of them): AP = 40 × 0.9 / 90 / 0.9 = 4/9.
        let tps = vec![true; 5];
        assert!((average_precision(&tps, 10) - 40.0 / 90.0).abs() < 1e-12);
        assert_eq!(average_precision(&[], 10), 0.0);
        assert_eq!(average_precision(&[false, false], 10), 0.0);
    }

    #[test]
    fn thresholds_matching_and_ties() {
        // A detection 1.5 m off: a match at 2 and 4 m, a false positive (and a miss) at 0.5
        // and 1 m: AP = (0 + 0 + 1 + 1) / 4.
        let mut ev = DetectionEval::new();
        ev.frame(&[gt(0.0, 0)], &[det(1.5, 0, 0.7)]);
        let s = ev.summary();
        assert_eq!(s.ap_per_threshold["car"], Some([0.0, 0.0, 1.0, 1.0]));
        assert_eq!(s.ap["car"], Some(0.5));
        // Exactly at the threshold is not a match (devkit: distance < threshold).
        let mut ev = DetectionEval::new();
        ev.frame(&[gt(0.0, 0)], &[det(2.0, 0, 0.7)]);
        assert_eq!(
            ev.summary().ap_per_threshold["car"],
            Some([0.0, 0.0, 0.0, 1.0])
        );
        // The higher score takes the box; the other is a false positive even though it is
        // closer. Wrong class never matches.
        let mut ev = DetectionEval::new();
        ev.frame(
            &[gt(0.0, 0)],
            &[det(0.3, 0, 0.9), det(0.0, 0, 0.5), det(0.0, 1, 1.0)],
        );
        let s = ev.summary();
        // Car at 0.5 m: TP (0.3 m) then FP: AP = 1 (precision 1 up to recall 1, then the
        // FP at recall 1 makes the last sample 0.5).
        assert!((s.ap_per_threshold["car"].unwrap()[0] - 80.5 / 81.0).abs() < 1e-12);
        assert_eq!(s.ap["pedestrian"], None);
        assert_eq!(s.detections["pedestrian"], 1);
    }

    #[test]
    fn range_bands_cover_every_distance_once() {
        assert_eq!(range_band(0.0), Some(0));
        assert_eq!(range_band(19.999), Some(0));
        assert_eq!(range_band(20.0), Some(1));
        assert_eq!(range_band(39.999), Some(1));
        assert_eq!(range_band(40.0), Some(2));
        assert_eq!(range_band(1e9), Some(2));
        assert_eq!(range_band(f64::NAN), None);
        assert_eq!(range_band(-1.0), None);
        assert_eq!(RANGE_BAND_NAMES.len(), RANGE_BANDS_M.len());
    }

    #[test]
    fn merge_pools_frames_and_equals_one_long_run() {
        let frames: Vec<(Vec<EvalGt>, Vec<EvalDet>)> = (0..6)
            .map(|f| {
                let x = f as f64;
                (
                    vec![gt(x, 0), gt(x + 5.0, 1)],
                    vec![
                        det(x + 0.2 * f as f64, 0, 0.1 * f as f32),
                        det(x + 5.0, 1, 0.5),
                        det(x + 30.0, 0, 0.35),
                    ],
                )
            })
            .collect();
        let mut all = DetectionEval::new();
        for (g, d) in &frames {
            all.frame(g, d);
        }
        let (mut a, mut b) = (DetectionEval::new(), DetectionEval::new());
        for (g, d) in &frames[..3] {
            a.frame(g, d);
        }
        for (g, d) in &frames[3..] {
            b.frame(g, d);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
        let s = all.summary();
        assert!(s.map.unwrap() > 0.0 && s.map.unwrap() < 1.0, "{:?}", s.map);
    }

    #[test]
    fn interp_matches_numpy() {
        let xp = [0.1, 0.2, 0.2, 0.5];
        let fp = [1.0, 0.8, 0.6, 0.4];
        assert_eq!(interp(0.0, &xp, &fp), 1.0); // left
        assert_eq!(interp(0.2, &xp, &fp), 0.6); // last duplicate
        assert!((interp(0.35, &xp, &fp) - 0.5).abs() < 1e-12); // 0.6 → 0.4
        assert_eq!(interp(0.5, &xp, &fp), 0.4);
        assert_eq!(interp(0.6, &xp, &fp), 0.0); // right
    }
}
