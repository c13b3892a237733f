//! The quality figures of a replay with ground truth, all in one place: detection AP/mAP,
//! segmentation IoU, tracking (MOTA, MOTP, ID switches, AMOTA) and the planner's
//! collision-free share. [`QualityEval`] accumulates (and pools logs with
//! [`QualityEval::merge`]); [`Quality`] is what `report.json`'s `quality` object,
//! `redline eval` and the regression harness carry.
//!
//! Contract: pooling is over the raw material, never an average of per-log figures: AP
//! over the pooled detections (frames of different logs never match each other), IoU over
//! summed cell counts, tracking over the logs as separate sequences, collision-free over
//! the summed checked frames. Off the hot path; deterministic (ordered maps).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    DetectionEval, DetectionSummary, SegEval, SegSummary, TrackingEval, TrackingSummary,
    RANGE_BANDS_M, RANGE_BAND_NAMES,
};

/// Accumulates everything [`Quality`] reports.
#[derive(Debug, Clone)]
pub struct QualityEval {
    /// Detection AP.
    pub detection: DetectionEval,
    /// Detection AP per distance band ([`super::RANGE_BANDS_M`]).
    pub detection_by_range: [DetectionEval; RANGE_BANDS_M.len()],
    /// Segmentation IoU.
    pub segmentation: SegEval,
    /// Tracking.
    pub tracking: TrackingEval,
    /// Frames whose trajectory was checked against the true futures.
    pub planner_checked: u64,
    /// Of which, collision-free.
    pub planner_collision_free: u64,
    /// Frames that published the minimum-risk trajectory.
    pub min_risk_frames: u64,
    /// Frames evaluated.
    pub frames: u64,
}

impl Default for QualityEval {
    fn default() -> Self {
        QualityEval {
            detection: DetectionEval::new(),
            detection_by_range: Default::default(),
            segmentation: SegEval::new(),
            tracking: TrackingEval::new(2.0),
            planner_checked: 0,
            planner_collision_free: 0,
            min_risk_frames: 0,
            frames: 0,
        }
    }
}

/// The quality of one replay (or of several, pooled).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Quality {
    /// Frames evaluated.
    pub frames: u64,
    /// Detection mAP (nuScenes, centre distance) over the classes with ground truth.
    pub map: Option<f64>,
    /// Class name → AP.
    pub ap: BTreeMap<String, Option<f64>>,
    /// Segmentation class name → IoU.
    pub seg_iou: BTreeMap<String, Option<f64>>,
    /// Mean IoU over the classes that have one.
    pub seg_miou: Option<f64>,
    /// IoU of the road surface (drivable or lane marking as one region).
    pub drivable_area_iou: Option<f64>,
    /// Frames whose segmentation was evaluated (those where the head ran).
    pub seg_frames: u64,
    /// CLEAR-MOT accuracy.
    pub mota: f64,
    /// CLEAR-MOT precision: mean matched distance, m.
    pub motp: f64,
    /// ID switches.
    pub id_switches: u64,
    /// nuScenes AMOTA.
    pub amota: f64,
    /// Share of checked trajectories clear of the true futures (None: none checked).
    pub collision_free: Option<f64>,
    /// Trajectories checked.
    pub planner_frames_checked: u64,
    /// Frames that published the minimum-risk trajectory.
    pub min_risk_frames: u64,
    /// Distance band (`0-20m`, `20-40m`, `40m+` from the ego) → mAP of that band alone.
    pub map_by_range: BTreeMap<String, Option<f64>>,
    /// Distance band → class name → AP of that band alone.
    pub ap_by_range: BTreeMap<String, BTreeMap<String, Option<f64>>>,
    /// Distance band → MOTA of the tracking counts charged to it (None: no ground truth
    /// there; the counts are in `tracking.mot_by_range`).
    pub mota_by_range: BTreeMap<String, Option<f64>>,
    /// Detection details: AP per threshold, box and detection counts.
    pub detection: DetectionSummary,
    /// Tracking details.
    pub tracking: TrackingSummary,
}

impl QualityEval {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `other` (another log) after this one.
    pub fn merge(&mut self, other: &QualityEval) {
        self.detection.merge(&other.detection);
        for (band, o) in self
            .detection_by_range
            .iter_mut()
            .zip(&other.detection_by_range)
        {
            band.merge(o);
        }
        self.segmentation.merge(&other.segmentation);
        self.tracking.merge(&other.tracking);
        self.planner_checked += other.planner_checked;
        self.planner_collision_free += other.planner_collision_free;
        self.min_risk_frames += other.min_risk_frames;
        self.frames += other.frames;
    }

    /// The figures.
    pub fn summary(&self) -> Quality {
        let d = self.detection.summary();
        let s: SegSummary = self.segmentation.summary();
        let t = self.tracking.summary();
        let (mut map_by_range, mut ap_by_range) = (BTreeMap::new(), BTreeMap::new());
        for (name, band) in RANGE_BAND_NAMES.iter().zip(&self.detection_by_range) {
            let b = band.summary();
            map_by_range.insert(name.to_string(), b.map);
            ap_by_range.insert(name.to_string(), b.ap);
        }
        let mota_by_range = t
            .mot_by_range
            .iter()
            .map(|(band, m)| (band.clone(), (m.gt_objects > 0).then_some(m.mota)))
            .collect();
        Quality {
            map_by_range,
            ap_by_range,
            mota_by_range,
            frames: self.frames,
            map: d.map,
            ap: d.ap.clone(),
            seg_iou: s.iou,
            seg_miou: s.miou,
            drivable_area_iou: s.drivable_area,
            seg_frames: s.frames,
            mota: t.mot.mota,
            motp: t.mot.motp_m,
            id_switches: t.mot.id_switches,
            amota: t.amota,
            collision_free: (self.planner_checked > 0)
                .then(|| self.planner_collision_free as f64 / self.planner_checked as f64),
            planner_frames_checked: self.planner_checked,
            min_risk_frames: self.min_risk_frames,
            detection: d,
            tracking: t,
        }
    }
}

impl Quality {
    /// Whether any ground truth was seen (a log without it has no meaningful quality).
    pub fn has_ground_truth(&self) -> bool {
        self.tracking.mot.gt_objects > 0 || self.detection.gt_boxes.values().any(|&n| n > 0)
    }

    /// The headline figures by name, all "higher is better", for regression checks:
    /// `map`, `ap.<class>`, `seg_miou`, `seg_iou.<class>`, `drivable_area_iou`, `mota`, `amota`,
    /// `collision_free` (figures that are undefined for this run are left out; none at all
    /// without ground truth).
    pub fn headline(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        if !self.has_ground_truth() {
            return m;
        }
        if let Some(v) = self.map {
            m.insert("map".to_string(), v);
        }
        for (k, v) in &self.ap {
            if let Some(v) = v {
                m.insert(format!("ap.{k}"), *v);
            }
        }
        if let Some(v) = self.seg_miou {
            m.insert("seg_miou".to_string(), v);
        }
        for (k, v) in &self.seg_iou {
            if let Some(v) = v {
                m.insert(format!("seg_iou.{k}"), *v);
            }
        }
        if let Some(v) = self.drivable_area_iou {
            m.insert("drivable_area_iou".to_string(), v);
        }
        m.insert("mota".to_string(), self.mota);
        m.insert("amota".to_string(), self.amota);
        if let Some(v) = self.collision_free {
            m.insert("collision_free".to_string(), v);
        }
        m
    }

    /// The table's line of detection AP by distance from the ego.
    pub fn detection_range_line(&self) -> String {
        let bands: Vec<String> = RANGE_BAND_NAMES
            .iter()
            .map(|band| {
                let map = self.map_by_range.get(*band).copied().flatten();
                let ap = self
                    .ap_by_range
                    .get(*band)
                    .map(|ap| {
                        ap.iter()
                            .map(|(k, v)| format!("{k} {}", fmt_opt(*v)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                format!("{band} {} ({ap})", fmt_opt(map))
            })
            .collect();
        format!(
            "detection by distance from the ego: mAP {}",
            bands.join("; ")
        )
    }

    /// The table's line of tracking by distance from the ego: each band's MOTA and what
    /// it is made of.
    pub fn tracking_range_line(&self) -> String {
        let bands: Vec<String> = RANGE_BAND_NAMES
            .iter()
            .map(|band| match self.tracking.mot_by_range.get(*band) {
                Some(m) if m.gt_objects > 0 => format!(
                    "{band} {:.3} ({} objects: {} missed, {} false tracks, {} ID switches)",
                    m.mota, m.gt_objects, m.misses, m.false_positives, m.id_switches
                ),
                Some(m) => format!("{band} n/a ({} false tracks)", m.false_positives),
                None => format!("{band} n/a"),
            })
            .collect();
        format!(
            "tracking by distance from the ego: MOTA {}",
            bands.join("; ")
        )
    }

    /// The table's detection line.
    pub fn detection_line(&self) -> String {
        let per: Vec<String> = self
            .ap
            .iter()
            .map(|(k, v)| format!("{k} {}", fmt_opt(*v)))
            .collect();
        format!(
            "detection vs ground truth: mAP {} (AP {}; nuScenes centre distance 0.5/1/2/4 m) over {} frames",
            fmt_opt(self.map),
            per.join(", "),
            self.frames
        )
    }

    /// The table's segmentation line.
    pub fn segmentation_line(&self) -> String {
        let per: Vec<String> = self
            .seg_iou
            .iter()
            .map(|(k, v)| format!("{k} {}", fmt_opt(*v)))
            .collect();
        format!(
            "segmentation vs ground truth: drivable area IoU {}, mIoU {} (IoU {}) over {} frames where the head ran",
            fmt_opt(self.drivable_area_iou),
            fmt_opt(self.seg_miou),
            per.join(", "),
            self.seg_frames
        )
    }

    /// The table's tracking-quality line (AMOTA and MOTP, next to the MOTA line).
    pub fn tracking_line(&self) -> String {
        format!(
            "tracking quality: AMOTA {:.3} ({} of 40 recall levels reached), MOTA {:.3}, MOTP {:.2} m, {} ID switches",
            self.amota, self.tracking.amota_levels_reached, self.mota, self.motp, self.id_switches
        )
    }
}

/// `0.123`, or `n/a` for a figure without ground truth.
fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}"))
}
