//! Scoring a replay against the source's ground truth, one published frame at a time.
//!
//! Contract: [`Scorer`] takes the records in publish order and keeps only what it still
//! needs (the records whose planned trajectory waits for its true future, at most the
//! planner's horizon in frames), so a streamed replay is scored in bounded memory; the
//! figures are exactly those of scoring all records at once ([`evaluate`],
//! [`evaluate_quality`]): the same frames in the same order. Runs after frames are
//! published, off the hot path (it allocates).
//!
//! - Tracking (MOTA): the frame's ground truth [`in_perception_range`] against its valid
//!   tracks.
//! - Planner: a frame's trajectory is checked against the true future boxes of the next
//!   planning horizon (3 s); frames whose horizon runs past the end of the input, or
//!   without ground truth, are not checked. A colliding plan is reported
//!   ([`super::PlannerCollision`]): plans that meet the same actor in frames at most
//!   [`COLLISION_EVENT_GAP_FRAMES`] apart are one encounter; the first
//!   [`MAX_COLLISIONS_KEPT`] encounters are kept, later ones only counted.
//! - Detection AP: ground truth = the frame's boxes in range; detections = the published
//!   valid ones of a known class inside the same region (ego frame), turned into the world
//!   frame with the pose the outputs were computed for (the record's `ego`, so that oracle
//!   detections map back onto their boxes exactly).
//! - Segmentation IoU: only frames whose status is `complete` (every stage ran, so the
//!   segmentation head did: a shed or failed head publishes its zero fallback and a
//!   fallback frame re-publishes an older frame's) against [`seg_ground_truth`] of the
//!   source's map around the record's `ego`.

use redline_runtime::det_math;
use std::collections::VecDeque;

use super::{
    Evaluation, FrameRecord, PlannerCollision, COLLISION_EVENT_GAP_FRAMES, MAX_COLLISIONS_KEPT,
};
use crate::eval::quality::QualityEval;
use crate::eval::{
    first_collision_with, range_band, range_band_from, seg_ground_truth, EvalDet, EvalGt, MotEval,
};
use crate::geometry::ego_to_world;
use crate::sensors::{in_perception_range, FrameSource};
use crate::types::{class, BevSpec, GtBox, TrackState, PLAN_STEPS, PRED_DT};

use super::SEG_CELLS;

/// The tracking metric's match distance, m (also whether a collision's actor was tracked).
const TRACK_MATCH_M: f32 = 2.0;

/// A planned trajectory waiting for its true future, with what perception knew when it
/// was made (for the collision report).
struct Pending {
    frame: u64,
    trajectory: [crate::types::TrajPoint; PLAN_STEPS],
    minimum_risk: bool,
    /// World positions of the frame's valid published tracks.
    tracks: Vec<(f64, f64)>,
}

/// Online scorer of a replay (see the module docs).
pub struct Scorer {
    mot: MotEval,
    dets: u64,
    frames: u64,
    min_risk: u64,
    checked: u64,
    free: u64,
    collisions: Vec<PlannerCollision>,
    pending: VecDeque<Pending>,
    quality: QualityEval,
    truth_grid: Vec<u8>,
    horizon_frames: usize,
    period_s: f64,
}

impl std::fmt::Debug for Scorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scorer")
            .field("frames", &self.frames)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Scorer {
    /// A scorer for frames of `feed` (its period sets the planner's horizon in frames).
    pub fn new(feed: &dyn FrameSource) -> Scorer {
        let period_s = feed.period_ns() as f64 / 1e9;
        Scorer {
            mot: MotEval::new(TRACK_MATCH_M),
            dets: 0,
            frames: 0,
            min_risk: 0,
            checked: 0,
            free: 0,
            collisions: Vec::new(),
            pending: VecDeque::new(),
            quality: QualityEval::new(),
            truth_grid: vec![0u8; SEG_CELLS],
            horizon_frames: ((PLAN_STEPS as f64 * PRED_DT as f64) / period_s).round() as usize,
            period_s,
        }
    }

    /// The first frame whose truth the scorer may still ask for: the oldest trajectory
    /// waiting for its future, else the frame after the last added (`next`).
    pub fn needs_truth_from(&self, next: usize) -> usize {
        self.pending.front().map_or(next, |p| p.frame as usize)
    }

    /// Scores the next published frame.
    pub fn add(&mut self, feed: &dyn FrameSource, r: &FrameRecord) {
        self.frames += 1;
        self.dets += u64::from(r.detections);
        if r.plan.kind == 1 {
            self.min_risk += 1;
        }
        if let Some(f) = feed.truth(r.frame as usize) {
            let gt: Vec<GtBox> =
                f.gt.iter()
                    .copied()
                    .filter(|g| in_perception_range(&f.ego, g))
                    .collect();
            let tracks: Vec<TrackState> =
                r.tracks.iter().copied().filter(|t| t.valid == 1).collect();
            self.mot.frame(&gt, &tracks);
            self.score_quality(feed, r, &gt);
        }
        if feed
            .truth(r.frame as usize)
            .is_some_and(|f| !f.gt.is_empty())
        {
            self.pending.push_back(Pending {
                frame: r.frame,
                trajectory: r.trajectory,
                minimum_risk: r.plan.kind == 1,
                tracks: r
                    .tracks
                    .iter()
                    .filter(|t| t.valid == 1)
                    .map(|t| (f64::from(t.x), f64::from(t.y)))
                    .collect(),
            });
        }
        // Check every trajectory whose whole horizon has been read.
        while let Some(p) = self.pending.front() {
            let last = p.frame as usize + self.horizon_frames;
            if feed.truth(last).is_none() {
                break;
            }
            if let Some(p) = self.pending.pop_front() {
                self.check_plan(feed, &p, last + 1);
            }
        }
    }

    fn score_quality(&mut self, feed: &dyn FrameSource, r: &FrameRecord, gt: &[GtBox]) {
        let q = &mut self.quality;
        q.frames += 1;
        let egt: Vec<EvalGt> = gt
            .iter()
            .map(|g| EvalGt {
                x: g.x,
                y: g.y,
                class: g.class,
            })
            .collect();
        let gt_band: Vec<Option<usize>> = egt
            .iter()
            .map(|g| range_band_from(&r.ego, g.x, g.y))
            .collect();
        let (dets, det_band): (Vec<EvalDet>, Vec<Option<usize>>) = r
            .detection_list
            .iter()
            .filter(|d| d.valid == 1 && d.class < class::COUNT as u32 && in_eval_region(d.x, d.y))
            .map(|d| {
                let (x, y) = ego_to_world(&r.ego, f64::from(d.x), f64::from(d.y));
                let det = EvalDet {
                    x,
                    y,
                    class: d.class,
                    score: d.score,
                };
                (
                    det,
                    range_band(det_math::hypot(f64::from(d.x), f64::from(d.y))),
                )
            })
            .unzip();
        q.detection.frame(&egt, &dets);
        // AP by distance band: each band sees only its own boxes and detections.
        for (band, ev) in q.detection_by_range.iter_mut().enumerate() {
            ev.frame(
                &in_band(&egt, &gt_band, band),
                &in_band(&dets, &det_band, band),
            );
        }
        q.tracking.frame_at(&r.ego, gt, &r.tracks);
        if r.status == "complete"
            && r.has_segmentation
            && seg_ground_truth(feed.map(), &r.ego, &BevSpec::DEFAULT, &mut self.truth_grid).is_ok()
        {
            q.segmentation.frame(&r.segmentation, &self.truth_grid);
        }
    }

    /// Checks `p`'s trajectory against the truth of the next frames (`n`: frames known).
    fn check_plan(&mut self, feed: &dyn FrameSource, p: &Pending, n: usize) {
        let k = p.frame as usize;
        if k + self.horizon_frames >= n {
            return;
        }
        let period_s = self.period_s;
        let future = |j: usize| -> Vec<GtBox> {
            let dt = (j + 1) as f64 * PRED_DT as f64;
            let idx = k + (dt / period_s).round() as usize;
            feed.truth(idx.min(n - 1)).map(|f| f.gt).unwrap_or_default()
        };
        self.checked += 1;
        match first_collision_with(&p.trajectory, &future) {
            None => self.free += 1,
            Some((step, met)) => {
                let c = collision_report(feed, p, step, &met);
                let same_event = self.collisions.iter().rposition(|e| {
                    e.actor_id == c.actor_id && c.frame <= e.last_frame + COLLISION_EVENT_GAP_FRAMES
                });
                match same_event {
                    Some(i) => self.collisions[i].extend(&c),
                    None if self.collisions.len() < MAX_COLLISIONS_KEPT => self.collisions.push(c),
                    None => {}
                }
            }
        }
    }

    /// The figures, once every frame was added (`feed` read to its end).
    pub fn finish(mut self, feed: &dyn FrameSource) -> (Evaluation, QualityEval) {
        let n = feed.frame_count();
        while let Some(p) = self.pending.pop_front() {
            self.check_plan(feed, &p, n);
        }
        let evaluation = Evaluation {
            tracking: self.mot.summary(),
            planner_frames_checked: self.checked,
            planner_collision_free: self.free,
            planner_collision_free_rate: if self.checked == 0 {
                0.0
            } else {
                self.free as f64 / self.checked as f64
            },
            minimum_risk_frames: self.min_risk,
            collisions: self.collisions,
            mean_detections: if self.frames == 0 {
                0.0
            } else {
                self.dets as f64 / self.frames as f64
            },
        };
        let mut q = self.quality;
        q.tracking.end_sequence();
        q.planner_checked = evaluation.planner_frames_checked;
        q.planner_collision_free = evaluation.planner_collision_free;
        q.min_risk_frames = evaluation.minimum_risk_frames;
        (evaluation, q)
    }
}

/// The items whose band (in `bands`, one per item) is `band`.
fn in_band<T: Copy>(items: &[T], bands: &[Option<usize>], band: usize) -> Vec<T> {
    items
        .iter()
        .zip(bands)
        .filter(|(_, b)| **b == Some(band))
        .map(|(item, _)| *item)
        .collect()
}

/// Whether an ego-frame point lies in the evaluated region (the BEV grid less a 1 m
/// margin: the rule of [`in_perception_range`]).
fn in_eval_region(x: f32, y: f32) -> bool {
    let b = BevSpec::DEFAULT;
    let m = 1.0;
    x >= b.x0 + m
        && x < b.x0 + b.nx as f32 * b.res - m
        && y >= b.y0 + m
        && y < b.y0 + b.ny as f32 * b.res - m
}

/// Scores recorded frames against the feed's ground truth (all at once).
pub fn evaluate(feed: &dyn FrameSource, records: &[FrameRecord]) -> Evaluation {
    score_all(feed, records).0
}

/// The quality evaluation of recorded frames against the feed's ground truth (see the
/// module docs); the planner figures are copied from `evaluation`.
pub fn evaluate_quality(
    feed: &dyn FrameSource,
    records: &[FrameRecord],
    evaluation: &Evaluation,
) -> QualityEval {
    let mut q = score_all(feed, records).1;
    q.planner_checked = evaluation.planner_frames_checked;
    q.planner_collision_free = evaluation.planner_collision_free;
    q.min_risk_frames = evaluation.minimum_risk_frames;
    q
}

fn score_all(feed: &dyn FrameSource, records: &[FrameRecord]) -> (Evaluation, QualityEval) {
    let mut s = Scorer::new(feed);
    for r in records {
        s.add(feed, r);
    }
    s.finish(feed)
}

/// What the report says about `p`'s collision at `step` with `met`: the actor as the plan's
/// frame saw it (distance from the ego, whether a published track was within the tracking
/// metric's 2 m of it).
fn collision_report(
    feed: &dyn FrameSource,
    p: &Pending,
    step: usize,
    met: &GtBox,
) -> PlannerCollision {
    let then = feed.truth(p.frame as usize);
    let seen = then.as_ref().and_then(|f| {
        f.gt.iter()
            .find(|g| g.valid != 0 && g.id == met.id)
            .map(|g| (f, g))
    });
    let distance = seen.map(|(f, g)| det_math::hypot(g.x - f.ego.x, g.y - f.ego.y));
    let tracked = seen.is_some_and(|(_, g)| {
        p.tracks
            .iter()
            .any(|&(x, y)| det_math::hypot(x - g.x, y - g.y) <= f64::from(TRACK_MATCH_M))
    });
    PlannerCollision {
        frame: p.frame,
        last_frame: p.frame,
        plans: 1,
        t_s: (step + 1) as f64 * f64::from(PRED_DT),
        actor_id: met.id,
        class: class::NAMES
            .get(met.class as usize)
            .copied()
            .unwrap_or("unknown"),
        distance_m: distance,
        last_distance_m: distance,
        tracked_plans: u64::from(tracked),
        minimum_risk_plans: u64::from(p.minimum_risk),
    }
}
