//! Runs the driving graph over a [`FrameSource`] (`redline replay` feeds it a recorded log
//! or the built-in scenario), records what every frame published, then evaluates it against the
//! ground truth: tracking quality (MOTA, ID switches) and whether each planned trajectory
//! stays clear of the actors' true futures ([`Evaluation`]), and the [`Quality`] figures
//! (detection AP/mAP, segmentation IoU, AMOTA, ...: see [`evaluate_quality`]).
//!
//! The publisher only copies each frame's outputs (detections, tracks, trajectory, plan,
//! segmentation) into records preallocated for the whole run (no allocation, no I/O);
//! evaluation and reports happen after the run. The output hash covers every published
//! buffer except the segmentation, which is published for evaluation only (the hash
//! predates it, and the determinism tests pin it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redline_runtime::{
    FrameStatus, HashPublisher, PlanConfig, Published, Publisher, Report, Runtime, RuntimeConfig,
};
use serde::Serialize;

use crate::config::{Perception, PipelineConfig};
use crate::eval::quality::{Quality, QualityEval};
use crate::eval::{first_collision, seg_ground_truth, EvalDet, EvalGt, MotEval, MotSummary};
use crate::geometry::ego_to_world;
use crate::graph::{self, GraphInfo};
use crate::sensors::{in_perception_range, FrameSource};
use crate::slowdown::StageHook;
use crate::stages::buf;
use crate::types::{
    class, BevSpec, Detection, EgoPose, GtBox, PlanSummary, TrackState, TrajPoint, MAX_DETECTIONS,
    MAX_TRACKS, PLAN_STEPS, PRED_DT,
};

/// Cells of the BEV grid the driving graph uses ([`BevSpec::DEFAULT`]): the size of a
/// record's segmentation.
pub const SEG_CELLS: usize = BevSpec::DEFAULT.nx * BevSpec::DEFAULT.ny;

/// Index of the published segmentation among the graph's outputs (published last).
const OUT_SEG: usize = 6;

/// Shared counters the publisher bumps.
#[derive(Debug, Default)]
pub struct Counters {
    /// Frames published.
    pub published: AtomicU64,
    /// Frames published as fallbacks.
    pub fallbacks: AtomicU64,
}

/// What one frame published, kept for evaluation.
#[derive(Clone, Copy, Debug)]
pub struct FrameRecord {
    /// Frame number.
    pub frame: u64,
    /// complete / degraded / fallback:...
    pub status: &'static str,
    /// Ego pose the outputs were computed for.
    pub ego: EgoPose,
    /// Valid detections.
    pub detections: u32,
    /// The published detections (ego frame of `ego`), `valid == 0` entries included.
    pub detection_list: [Detection; MAX_DETECTIONS],
    /// The published segmentation, one class per BEV cell ([`SEG_CELLS`], row-major by iy).
    pub segmentation: [u8; SEG_CELLS],
    /// Whether `segmentation` was published with the expected size.
    pub has_segmentation: bool,
    /// Tracks (world frame).
    pub tracks: [TrackState; MAX_TRACKS],
    /// Planned trajectory (world frame).
    pub trajectory: [TrajPoint; PLAN_STEPS],
    /// Planner summary.
    pub plan: PlanSummary,
    /// Release → publish, ns.
    pub latency_ns: u64,
}

/// Copies the published outputs of every frame into preallocated records and hashes them.
#[derive(Debug)]
pub struct RecordingPublisher {
    /// One record per published frame.
    pub records: Vec<FrameRecord>,
    /// Hash of every published byte and status.
    pub hash: HashPublisher,
    counters: Arc<Counters>,
}

impl RecordingPublisher {
    /// Room for `frames` records (allocated here, not while running).
    pub fn new(frames: usize, counters: Arc<Counters>) -> Self {
        RecordingPublisher {
            records: Vec::with_capacity(frames),
            hash: HashPublisher::default(),
            counters,
        }
    }
}

impl Publisher for RecordingPublisher {
    fn publish(&mut self, p: &Published<'_>) {
        self.hash.publish_filtered(p, |name| name != buf::SEG);
        self.counters.published.fetch_add(1, Ordering::Relaxed);
        if matches!(p.status, FrameStatus::Fallback(_)) {
            self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        if self.records.len() == self.records.capacity() {
            return; // never grow on the hot path
        }
        let o = &p.outputs;
        let mut r = FrameRecord {
            frame: p.info.frame,
            status: p.status.label(),
            ego: EgoPose::default(),
            detections: 0,
            detection_list: [Detection::default(); MAX_DETECTIONS],
            segmentation: [0; SEG_CELLS],
            has_segmentation: false,
            tracks: [TrackState::default(); MAX_TRACKS],
            trajectory: [TrajPoint::default(); PLAN_STEPS],
            plan: PlanSummary::default(),
            latency_ns: p.latency_ns,
        };
        if let Ok(e) = o.get::<EgoPose>(0) {
            r.ego = e[0];
        }
        if let Ok(d) = o.get::<Detection>(1) {
            r.detections = d.iter().filter(|d| d.valid == 1).count() as u32;
            let n = d.len().min(MAX_DETECTIONS);
            r.detection_list[..n].copy_from_slice(&d[..n]);
        }
        if let Ok(t) = o.get::<TrackState>(2) {
            r.tracks.copy_from_slice(&t[..MAX_TRACKS]);
        }
        if let Ok(t) = o.get::<TrajPoint>(4) {
            r.trajectory.copy_from_slice(&t[..PLAN_STEPS]);
        }
        if let Ok(s) = o.get::<PlanSummary>(5) {
            r.plan = s[0];
        }
        if let Ok(s) = o.get::<u8>(OUT_SEG) {
            if s.len() == SEG_CELLS && o.name(OUT_SEG) == Some(buf::SEG) {
                r.segmentation.copy_from_slice(s);
                r.has_segmentation = true;
            }
        }
        self.records.push(r);
    }
}

/// Evaluation against ground truth.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluation {
    /// Tracking quality over the perception range.
    pub tracking: MotSummary,
    /// Frames whose trajectory could be checked against a full 3 s of true future.
    pub planner_frames_checked: u64,
    /// Of which, collision-free.
    pub planner_collision_free: u64,
    /// planner_collision_free / planner_frames_checked.
    pub planner_collision_free_rate: f64,
    /// Frames that published the minimum-risk trajectory.
    pub minimum_risk_frames: u64,
    /// First colliding frames (frame, step), at most 20.
    pub collisions: Vec<(u64, usize)>,
    /// Mean valid detections per frame.
    pub mean_detections: f64,
}

/// The whole outcome of a replay.
#[derive(Debug, Serialize)]
pub struct ReplayOutcome {
    /// Where the frames came from.
    pub source: String,
    /// Network or oracle.
    pub perception: Perception,
    /// What the graph was built with.
    pub graph: GraphInfo,
    /// Runtime figures.
    pub runtime: Report,
    /// Against ground truth.
    pub evaluation: Evaluation,
    /// Quality figures against ground truth (detection AP, segmentation IoU, tracking,
    /// planner): see [`evaluate_quality`].
    pub quality: Quality,
    /// Input problems (frame, what), first 200.
    pub input_issues: Vec<(u64, String)>,
    /// Input problems in all.
    pub input_issue_count: usize,
    /// Hash of every published output (determinism).
    pub output_hash: String,
    /// When the run started, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Wall time of the run, ms.
    pub wall_ms: f64,
    /// What every frame published (for measurements; not in the JSON report).
    #[serde(skip)]
    pub records: Vec<FrameRecord>,
    /// The accumulated quality evaluation (for pooling logs; not in the JSON report).
    #[serde(skip)]
    pub quality_eval: QualityEval,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The graph could not be built.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// The plan was rejected.
    #[error(transparent)]
    Plan(#[from] redline_runtime::PlanError),
    /// The runtime did not start.
    #[error(transparent)]
    Runtime(#[from] redline_runtime::RuntimeError),
    /// Writing outputs failed.
    #[error("cannot write {path}: {error}")]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        error: std::io::Error,
    },
}

/// Builds the driving graph for `feed` and starts a runtime on it (start-up: allocates
/// the models, the arena and the lanes).
pub fn start_runtime(
    cfg: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
) -> Result<(Runtime, GraphInfo), ReplayError> {
    start_runtime_with(cfg, feed, None)
}

/// [`start_runtime`] with the stages `hook` names wrapped by it (see
/// [`graph::build_with`]).
pub fn start_runtime_with(
    cfg: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
    hook: Option<&dyn StageHook>,
) -> Result<(Runtime, GraphInfo), ReplayError> {
    let (g, info) = graph::build_with(cfg, feed, hook)?;
    let plan = g.build(&PlanConfig {
        lanes: cfg.lanes,
        frame_slots: cfg.frame_slots,
    })?;
    let rcfg = RuntimeConfig {
        period_ns: feed.period_ns(),
        deadline_ns: (cfg.deadline_ms * 1e6) as u64,
        publish_margin_ns: (cfg.publish_margin_ms * 1e6) as u64,
        release: cfg.release,
        rt: cfg.rt_request(),
        ladder: cfg.ladder.clone(),
        ..RuntimeConfig::default()
    };
    Ok((Runtime::new(plan, rcfg)?, info))
}

/// Now, ms since the Unix epoch (0 if the clock is before it).
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs `frames` frames (all when None) of `feed` and evaluates them.
pub fn replay(
    cfg: &PipelineConfig,
    feed: Arc<dyn FrameSource>,
    frames: Option<u64>,
    counters: Arc<Counters>,
) -> Result<(ReplayOutcome, Runtime), ReplayError> {
    replay_with(cfg, feed, frames, counters, None)
}

/// [`replay`] with the stages `hook` names wrapped by it (fault injection: see
/// [`graph::build_with`]).
pub fn replay_with(
    cfg: &PipelineConfig,
    feed: Arc<dyn FrameSource>,
    frames: Option<u64>,
    counters: Arc<Counters>,
    hook: Option<&dyn StageHook>,
) -> Result<(ReplayOutcome, Runtime), ReplayError> {
    replay_tapped(cfg, feed, frames, counters, hook, &mut |_: &Published<
        '_,
    >| {})
}

/// [`replay_with`], with every published frame also handed to `tap`, after the replay's
/// own recording publisher and on the same (hot-path) thread: an output recorder, for
/// example. `tap` sees the frames exactly as published and cannot change them or the
/// output hash; it must follow the [`Publisher`] rules (no blocking, no allocation).
pub fn replay_tapped(
    cfg: &PipelineConfig,
    feed: Arc<dyn FrameSource>,
    frames: Option<u64>,
    counters: Arc<Counters>,
    hook: Option<&dyn StageHook>,
    tap: &mut (dyn Publisher + Send),
) -> Result<(ReplayOutcome, Runtime), ReplayError> {
    let (mut rt, info) = start_runtime_with(cfg, &feed, hook)?;
    let n = frames
        .unwrap_or(feed.frame_count() as u64)
        .min(feed.frame_count() as u64);
    let mut publisher = RecordingPublisher::new(n as usize, counters);
    let started_unix_ms = unix_now_ms();
    let t0 = std::time::Instant::now();
    let mut both = |p: &Published<'_>| {
        publisher.publish(p);
        tap.publish(p);
    };
    rt.run(n, &mut both);
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let evaluation = evaluate(feed.as_ref(), &publisher.records);
    let quality_eval = evaluate_quality(feed.as_ref(), &publisher.records, &evaluation);
    let outcome = ReplayOutcome {
        source: feed.describe().to_string(),
        perception: cfg.perception,
        graph: info,
        runtime: rt.report(),
        evaluation,
        quality: quality_eval.summary(),
        input_issues: feed.issues().iter().take(200).cloned().collect(),
        input_issue_count: feed.issues().len(),
        output_hash: format!("{:016x}", publisher.hash.hash),
        started_unix_ms,
        wall_ms,
        records: publisher.records,
        quality_eval,
    };
    Ok((outcome, rt))
}

/// Scores recorded frames against the feed's ground truth.
pub fn evaluate(feed: &dyn FrameSource, records: &[FrameRecord]) -> Evaluation {
    let mut mot = MotEval::new(2.0);
    let mut dets = 0u64;
    for r in records {
        let Some(f) = feed.frame(r.frame as usize) else {
            continue;
        };
        let gt: Vec<GtBox> =
            f.gt.iter()
                .copied()
                .filter(|g| in_perception_range(&f.ego, g))
                .collect();
        let tracks: Vec<TrackState> = r.tracks.iter().copied().filter(|t| t.valid == 1).collect();
        mot.frame(&gt, &tracks);
        dets += u64::from(r.detections);
    }
    let period_s = feed.period_ns() as f64 / 1e9;
    let horizon_frames = ((PLAN_STEPS as f64 * PRED_DT as f64) / period_s).round() as usize;
    let (mut checked, mut free, mut min_risk) = (0u64, 0u64, 0u64);
    let mut collisions = Vec::new();
    for r in records {
        if r.plan.kind == 1 {
            min_risk += 1;
        }
        let k = r.frame as usize;
        let n = feed.frame_count();
        if k + horizon_frames >= n || feed.frame(k).is_none_or(|f| f.gt.is_empty()) {
            continue;
        }
        let future = |j: usize| -> Vec<GtBox> {
            let dt = (j + 1) as f64 * PRED_DT as f64;
            let idx = k + (dt / period_s).round() as usize;
            feed.frame(idx.min(n - 1))
                .map(|f| f.gt.clone())
                .unwrap_or_default()
        };
        checked += 1;
        match first_collision(&r.trajectory, &future) {
            None => free += 1,
            Some(step) => {
                if collisions.len() < 20 {
                    collisions.push((r.frame, step));
                }
            }
        }
    }
    Evaluation {
        tracking: mot.summary(),
        planner_frames_checked: checked,
        planner_collision_free: free,
        planner_collision_free_rate: if checked == 0 {
            0.0
        } else {
            free as f64 / checked as f64
        },
        minimum_risk_frames: min_risk,
        collisions,
        mean_detections: if records.is_empty() {
            0.0
        } else {
            dets as f64 / records.len() as f64
        },
    }
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

/// The quality evaluation of recorded frames against the feed's ground truth.
///
/// - Detection AP: ground truth = the frame's boxes [`in_perception_range`]; detections =
///   the published valid ones of a known class inside the same region (ego frame), turned
///   into the world frame with the pose the outputs were computed for (the record's
///   `ego`, so that oracle detections map back onto their boxes exactly).
/// - Segmentation IoU: only frames whose status is `complete` (every stage ran, so the
///   segmentation head did: a shed or failed head publishes its zero fallback and a
///   fallback frame re-publishes an older frame's) against [`seg_ground_truth`] of the
///   feed's map around the record's `ego`.
/// - Tracking (MOTA, AMOTA): as [`evaluate`], over the same ground truth.
/// - Planner figures: copied from `evaluation`.
pub fn evaluate_quality(
    feed: &dyn FrameSource,
    records: &[FrameRecord],
    evaluation: &Evaluation,
) -> QualityEval {
    let mut q = QualityEval::new();
    let bev = BevSpec::DEFAULT;
    let mut truth = vec![0u8; SEG_CELLS];
    for r in records {
        let Some(f) = feed.frame(r.frame as usize) else {
            continue;
        };
        q.frames += 1;
        let gt: Vec<GtBox> =
            f.gt.iter()
                .copied()
                .filter(|g| in_perception_range(&f.ego, g))
                .collect();
        let egt: Vec<EvalGt> = gt
            .iter()
            .map(|g| EvalGt {
                x: g.x,
                y: g.y,
                class: g.class,
            })
            .collect();
        let dets: Vec<EvalDet> = r
            .detection_list
            .iter()
            .filter(|d| d.valid == 1 && d.class < class::COUNT as u32 && in_eval_region(d.x, d.y))
            .map(|d| {
                let (x, y) = ego_to_world(&r.ego, f64::from(d.x), f64::from(d.y));
                EvalDet {
                    x,
                    y,
                    class: d.class,
                    score: d.score,
                }
            })
            .collect();
        q.detection.frame(&egt, &dets);
        q.tracking.frame(&gt, &r.tracks);
        if r.status == "complete"
            && r.has_segmentation
            && seg_ground_truth(feed.map(), &r.ego, &bev, &mut truth).is_ok()
        {
            q.segmentation.frame(&r.segmentation, &truth);
        }
    }
    q.tracking.end_sequence();
    q.planner_checked = evaluation.planner_frames_checked;
    q.planner_collision_free = evaluation.planner_collision_free;
    q.min_risk_frames = evaluation.minimum_risk_frames;
    q
}

/// Writes `report` as `report.json` and the runtime's spans as `trace.json` (Chrome
/// trace-event format) into `dir`, creating it.
pub fn write_report_files<T: Serialize>(
    dir: &Path,
    report: &T,
    rt: &Runtime,
) -> Result<(), (PathBuf, std::io::Error)> {
    std::fs::create_dir_all(dir).map_err(|e| (dir.to_path_buf(), e))?;
    let path = dir.join("report.json");
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| (path.clone(), std::io::Error::other(e)))?;
    std::fs::write(&path, json).map_err(|e| (path.clone(), e))?;
    let path = dir.join("trace.json");
    let file = std::fs::File::create(&path).map_err(|e| (path.clone(), e))?;
    rt.write_chrome_trace(std::io::BufWriter::new(file))
        .map_err(|e| (path, e))
}

/// Writes `report.json` and `trace.json` into `dir`.
pub fn write_report(dir: &Path, outcome: &ReplayOutcome, rt: &Runtime) -> Result<(), ReplayError> {
    write_report_files(dir, outcome, rt).map_err(|(path, error)| ReplayError::Write { path, error })
}

/// The terminal summary below the latency table.
pub fn summary_lines(o: &ReplayOutcome) -> Vec<String> {
    let e = &o.evaluation;
    let t = &e.tracking;
    let mut v = vec![
        format!(
            "input: {} ({} issues); perception: {:?}; backbone {:.1} MMAC/frame; BEV coverage {:.0}%",
            o.source,
            o.input_issue_count,
            o.perception,
            o.graph.backbone_macs as f64 / 1e6,
            o.graph.bev_coverage * 100.0
        ),
        format!(
            "tracking vs ground truth: MOTA {:.3}, {} ID switches, {} misses, {} false positives over {} objects; {:.1} detections/frame",
            t.mota, t.id_switches, t.misses, t.false_positives, t.gt_objects, e.mean_detections
        ),
        o.quality.tracking_line(),
        o.quality.detection_line(),
        o.quality.segmentation_line(),
        format!(
            "planner: {}/{} trajectories collision-free against the true futures ({:.2}%), {} minimum-risk frames",
            e.planner_collision_free,
            e.planner_frames_checked,
            e.planner_collision_free_rate * 100.0,
            e.minimum_risk_frames
        ),
        format!("output hash {}", o.output_hash),
    ];
    for (frame, what) in o.input_issues.iter().take(5) {
        v.push(format!("input issue: frame {frame}: {what}"));
    }
    v
}
