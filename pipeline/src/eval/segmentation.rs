//! Segmentation IoU per class against the ground truth of [`super::seg_truth`].
//!
//! Contract: [`SegEval::frame`] adds one frame's per-class intersection and union cell
//! counts (prediction and truth, one class per cell, same grid); IoU of a class =
//! `Σ intersection / Σ union` over all frames added (the dataset-level IoU, so a frame
//! with few cells of a class weighs what it contains); a class with an empty union has no
//! IoU (`None`), and the mean IoU averages the classes that have one. Cells whose class
//! is out of range count for no class. Which frames to add is the caller's choice (the
//! replay adds only frames where the segmentation head ran). Deterministic; off the hot
//! path.
//!
//! The **drivable area** IoU ([`SegSummary::drivable_area`]) scores the road surface as
//! one region: a cell is drivable area when its class is drivable or lane marking (the
//! markings are painted on the road; nuScenes' drivable-area class includes them). It is
//! the figure the project's segmentation target refers to; the per-class IoUs also score
//! the 1 m marking bands, which a 1 m grid resolves only roughly.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::types::seg_class;

/// Accumulated intersection / union counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SegEval {
    frames: u64,
    inter: [u64; seg_class::COUNT],
    union: [u64; seg_class::COUNT],
    /// Road surface (drivable or lane marking): intersection, union.
    area: [u64; 2],
}

/// Segmentation figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SegSummary {
    /// Frames evaluated.
    pub frames: u64,
    /// Class name → IoU (None: the class appears in neither prediction nor truth).
    pub iou: BTreeMap<String, Option<f64>>,
    /// Mean IoU over the classes that have one.
    pub miou: Option<f64>,
    /// IoU of the road surface (drivable or lane marking, as one region).
    pub drivable_area: Option<f64>,
}

impl SegEval {
    /// An empty evaluator.
    pub fn new() -> Self {
        Self::default()
    }

    /// One frame: predicted and true class per cell (same length; extra cells of the
    /// longer one are ignored).
    pub fn frame(&mut self, pred: &[u8], truth: &[u8]) {
        self.frames += 1;
        let road =
            |c: usize| c == seg_class::DRIVABLE as usize || c == seg_class::LANE_MARKING as usize;
        for (&p, &t) in pred.iter().zip(truth) {
            let (p, t) = (usize::from(p), usize::from(t));
            let (pr, tr) = (road(p), road(t));
            self.area[0] += u64::from(pr && tr);
            self.area[1] += u64::from(pr || tr);
            if p == t {
                if p < seg_class::COUNT {
                    self.inter[p] += 1;
                    self.union[p] += 1;
                }
            } else {
                if p < seg_class::COUNT {
                    self.union[p] += 1;
                }
                if t < seg_class::COUNT {
                    self.union[t] += 1;
                }
            }
        }
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &SegEval) {
        self.frames += other.frames;
        for c in 0..seg_class::COUNT {
            self.inter[c] += other.inter[c];
            self.union[c] += other.union[c];
        }
        self.area[0] += other.area[0];
        self.area[1] += other.area[1];
    }

    /// The figures so far.
    pub fn summary(&self) -> SegSummary {
        let mut s = SegSummary {
            frames: self.frames,
            ..SegSummary::default()
        };
        let mut have = Vec::new();
        for (c, name) in seg_class::NAMES.iter().enumerate() {
            let iou = (self.union[c] > 0).then(|| self.inter[c] as f64 / self.union[c] as f64);
            have.extend(iou);
            s.iou.insert(name.to_string(), iou);
        }
        s.miou = (!have.is_empty()).then(|| have.iter().sum::<f64>() / have.len() as f64);
        s.drivable_area = (self.area[1] > 0).then(|| self.area[0] as f64 / self.area[1] as f64);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_built_grids() {
        let truth = [0, 0, 1, 1, 1, 2, 2, 0];
        let pred = [0, 1, 1, 1, 0, 2, 0, 0];
        let mut ev = SegEval::new();
        ev.frame(&pred, &truth);
        let s = ev.summary();
        // other: I = {0, 7} = 2; U = {0, 1, 4, 6, 7} = 5. drivable: I = {2, 3}; U = {1, 2,
        // 3, 4} = 4. marking: I = {5}; U = {5, 6} = 2.
        assert_eq!(s.iou["other"], Some(2.0 / 5.0));
        assert_eq!(s.iou["drivable"], Some(0.5));
        assert_eq!(s.iou["lane_marking"], Some(0.5));
        assert!((s.miou.unwrap() - 1.4 / 3.0).abs() < 1e-12);
        // Road surface (1 or 2): truth {2, 3, 4, 5, 6}, prediction {1, 2, 3, 5}: I 3, U 6.
        assert_eq!(s.drivable_area, Some(0.5));
        assert_eq!(s.frames, 1);
    }

    #[test]
    fn perfect_absent_and_pooled() {
        let g = [1u8, 1, 0, 0];
        let mut ev = SegEval::new();
        ev.frame(&g, &g);
        let s = ev.summary();
        assert_eq!(s.iou["drivable"], Some(1.0));
        assert_eq!(s.iou["lane_marking"], None);
        assert_eq!(s.miou, Some(1.0));
        // Pooled over frames: counts add (not a mean of per-frame IoUs).
        let mut other = SegEval::new();
        other.frame(&[0, 0, 0, 0], &[1, 0, 0, 0]); // drivable I 0, U 1
        ev.merge(&other);
        let s = ev.summary();
        assert_eq!(s.iou["drivable"], Some(2.0 / 3.0));
        assert_eq!(s.frames, 2);
        // Out-of-range classes count for nothing.
        let mut ev = SegEval::new();
        ev.frame(&[9, 9], &[1, 9]);
        assert_eq!(ev.summary().iou["drivable"], Some(0.0));
        assert_eq!(ev.summary().iou["other"], None);
    }
}
