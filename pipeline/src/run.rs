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
use crate::eval::MotSummary;
use crate::graph::{self, GraphInfo};
use crate::sensors::FrameSource;
use crate::slowdown::StageHook;
use crate::stages::{buf, CameraDecodeCost};
use crate::types::{
    BevSpec, Detection, EgoPose, PlanSummary, TrackState, TrajPoint, MAX_DETECTIONS, MAX_TRACKS,
    PLAN_STEPS,
};

mod scoring;
pub use scoring::{evaluate, evaluate_quality, Scorer};

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

impl FrameRecord {
    /// Frame `frame` with status `status` and nothing published yet: no detections,
    /// tracks, trajectory or segmentation, default pose and plan, zero latency.
    pub fn empty(frame: u64, status: &'static str) -> FrameRecord {
        FrameRecord {
            frame,
            status,
            ego: EgoPose::default(),
            detections: 0,
            detection_list: [Detection::default(); MAX_DETECTIONS],
            segmentation: [0; SEG_CELLS],
            has_segmentation: false,
            tracks: [TrackState::default(); MAX_TRACKS],
            trajectory: [TrajPoint::default(); PLAN_STEPS],
            plan: PlanSummary::default(),
            latency_ns: 0,
        }
    }
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
            latency_ns: p.latency_ns,
            ..FrameRecord::empty(p.info.frame, p.status.label())
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

/// How many [`PlannerCollision`]s (encounters) a replay keeps: the first ones.
pub const MAX_COLLISIONS_KEPT: usize = 20;

/// Plans that met the same actor's true future in frames at most this far apart (1 s at
/// 30 Hz) are one encounter, one [`PlannerCollision`].
pub const COLLISION_EVENT_GAP_FRAMES: u64 = 30;

/// Published plans that met one actor's true future, in frames close together (one
/// encounter: each frame re-plans into the same actor): where to look (`frame` … `last_frame`) and
/// what perception knew (`distance_m`, `tracked_plans`), to tell a perception miss from a
/// planning mistake.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannerCollision {
    /// The first frame whose plan met the actor.
    pub frame: u64,
    /// The last one (gaps of at most [`COLLISION_EVENT_GAP_FRAMES`]).
    pub last_frame: u64,
    /// Plans that met it.
    pub plans: u64,
    /// The soonest meeting, seconds into a plan.
    pub t_s: f64,
    /// The actor's id in the log's ground truth.
    pub actor_id: u32,
    /// Its class (`car`, `pedestrian`, `cyclist`).
    pub class: &'static str,
    /// Its distance from the ego at the first plan, m; `None` when it was not in that
    /// frame's ground truth (it appeared later).
    pub distance_m: Option<f64>,
    /// The same at the last plan.
    pub last_distance_m: Option<f64>,
    /// Plans made while a published track was within 2 m of it (the tracking metric's
    /// match distance): 0 means perception never had it.
    pub tracked_plans: u64,
    /// Plans that were the minimum-risk trajectory (every candidate was blocked).
    pub minimum_risk_plans: u64,
}

impl PlannerCollision {
    /// Adds a later plan that met the same actor.
    pub fn extend(&mut self, later: &PlannerCollision) {
        self.last_frame = later.frame;
        self.plans += later.plans;
        self.t_s = self.t_s.min(later.t_s);
        self.last_distance_m = later.last_distance_m;
        self.tracked_plans += later.tracked_plans;
        self.minimum_risk_plans += later.minimum_risk_plans;
    }
}

impl std::fmt::Display for PlannerCollision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dist =
            |d: Option<f64>| d.map_or("not yet in view".to_string(), |d| format!("{d:.1} m"));
        write!(f, "{} {}, frame {}", self.class, self.actor_id, self.frame)?;
        if self.last_frame != self.frame {
            write!(f, "-{} ({} plans)", self.last_frame, self.plans)?;
        }
        write!(f, ", +{:.1} s, {} away", self.t_s, dist(self.distance_m))?;
        if self.last_frame != self.frame {
            write!(f, " -> {}", dist(self.last_distance_m))?;
        }
        write!(f, ", tracked in {} of {}", self.tracked_plans, self.plans)?;
        if self.minimum_risk_plans > 0 {
            write!(f, ", {} minimum-risk", self.minimum_risk_plans)?;
        }
        Ok(())
    }
}

/// The line naming the first planner collisions of `e` (`None` when there were none).
pub fn collisions_line(e: &Evaluation) -> Option<String> {
    let total = e.planner_frames_checked - e.planner_collision_free;
    if total == 0 || e.collisions.is_empty() {
        return None;
    }
    let shown: Vec<String> = e.collisions.iter().take(5).map(|c| c.to_string()).collect();
    Some(format!(
        "planner collisions ({total} plans, {}{} encounters; the first {}): {}",
        e.collisions.len(),
        if e.collisions.len() == MAX_COLLISIONS_KEPT {
            "+"
        } else {
            ""
        },
        shown.len(),
        shown.join("; ")
    ))
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
    /// The first encounters of plans with an actor's true future, at most
    /// [`MAX_COLLISIONS_KEPT`].
    pub collisions: Vec<PlannerCollision>,
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
    /// A streamed input: how often the graph waited for the reader (None: held in memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_wait: Option<InputWait>,
    /// Each camera's JPEG decode cost, when the graph decoded JPEG (`jpeg_decode` stage).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jpeg_decode: Vec<CameraDecodeCost>,
    /// What every frame published (for measurements; not in the JSON report). Empty for a
    /// streamed input, whose records are scored window by window (see `timing`).
    #[serde(skip)]
    pub records: Vec<FrameRecord>,
    /// Latency and fallback of every published frame, in order (not in the JSON report).
    #[serde(skip)]
    pub timing: Vec<FrameTiming>,
    /// The accumulated quality evaluation (for pooling logs; not in the JSON report).
    #[serde(skip)]
    pub quality_eval: QualityEval,
}

/// When one frame was published, and whether on its fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTiming {
    /// Frame number.
    pub frame: u64,
    /// Release → publish, ns.
    pub latency_ns: u64,
    /// Published on a fallback.
    pub fallback: bool,
}

impl FrameTiming {
    /// The timing of a record.
    pub fn of(r: &FrameRecord) -> FrameTiming {
        FrameTiming {
            frame: r.frame,
            latency_ns: r.latency_ns,
            fallback: r.status.starts_with("fallback"),
        }
    }
}

/// How a streamed replay waited for its input between windows. In real time a wait is a
/// pause the graph did not cause: every frame of a window that had to be waited for
/// started late because of the reader, and is counted here, never in stage times.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct InputWait {
    /// Windows the graph ran.
    pub windows: u64,
    /// Windows that were not read yet when the graph wanted them (waits over 1 ms).
    pub waited_windows: u64,
    /// Frames in those windows (delayed by input).
    pub frames_delayed_by_input: u64,
    /// Longest wait, ms.
    pub max_wait_ms: f64,
    /// All waits, ms.
    pub total_wait_ms: f64,
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
        // The release period; the input's stamps keep the recorded period.
        period_ns: ((feed.period_ns() as f64 / cfg.rate).round() as u64).max(1),
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
    let mut no_tap = |_: &Published<'_>| {};
    replay_tapped(cfg, feed, frames, counters, hook, &mut no_tap)
}

/// Hands each frame to the replay's own publisher, then to a tap.
struct Tee<'a>(&'a mut RecordingPublisher, &'a mut (dyn Publisher + Send));

impl Publisher for Tee<'_> {
    fn publish(&mut self, p: &Published<'_>) {
        self.0.publish(p);
        self.1.publish(p);
    }
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
    let streaming = feed.streaming();
    // A streamed input keeps one window of records (scored and cleared after each window);
    // one held in memory keeps them all.
    let capacity = if streaming { 0 } else { n as usize };
    let mut publisher = RecordingPublisher::new(capacity, counters);
    let mut scorer = Scorer::new(feed.as_ref());
    let mut timing = Vec::new();
    let started_unix_ms = unix_now_ms();
    let t0 = std::time::Instant::now();
    let mut input_wait = None;
    if streaming {
        // One run per window the source reads ahead; the runtime keeps its state (tracks,
        // temporal cache, ladder, histograms) across runs, and no frame is in flight while
        // the source moves to the next window.
        let mut w = InputWait::default();
        let mut done = 0u64;
        while done < n {
            let asked = std::time::Instant::now();
            let Some(window) = feed.advance() else {
                break;
            };
            let waited_ms = asked.elapsed().as_secs_f64() * 1e3;
            let len = (window.len() as u64).min(n - done);
            w.windows += 1;
            // The first window is read before the run starts, as a log opens.
            if w.windows > 1 && waited_ms > 1.0 {
                w.waited_windows += 1;
                w.frames_delayed_by_input += len;
                w.total_wait_ms += waited_ms;
                w.max_wait_ms = w.max_wait_ms.max(waited_ms);
            }
            // Room for this window's records, allocated now, not while frames run.
            publisher.records.reserve(len as usize);
            rt.run(len, &mut Tee(&mut publisher, &mut *tap));
            done += len;
            for r in &publisher.records {
                scorer.add(feed.as_ref(), r);
                timing.push(FrameTiming::of(r));
            }
            publisher.records.clear();
            feed.forget_truth_before(scorer.needs_truth_from(done as usize));
        }
        input_wait = Some(w);
    } else {
        rt.run(n, &mut Tee(&mut publisher, &mut *tap));
        for r in &publisher.records {
            scorer.add(feed.as_ref(), r);
            timing.push(FrameTiming::of(r));
        }
    }
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let (evaluation, quality_eval) = scorer.finish(feed.as_ref());
    let jpeg_decode = info.jpeg_times.as_ref().map_or(Vec::new(), |t| t.summary());
    let outcome = ReplayOutcome {
        source: feed.describe().to_string(),
        perception: cfg.perception,
        jpeg_decode,
        graph: info,
        runtime: rt.report(),
        evaluation,
        quality: quality_eval.summary(),
        input_issues: feed.issues().iter().take(200).cloned().collect(),
        input_issue_count: feed.issues().len(),
        output_hash: format!("{:016x}", publisher.hash.hash),
        started_unix_ms,
        wall_ms,
        input_wait,
        records: publisher.records,
        timing,
        quality_eval,
    };
    Ok((outcome, rt))
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

/// The runtime's latency table with, under the `jpeg_decode` row (the slowest lane's share
/// of the cameras), one row per camera: what decoding one of its images costs.
pub fn latency_table(o: &ReplayOutcome) -> String {
    let table = o.runtime.table();
    if o.jpeg_decode.is_empty() {
        return table;
    }
    let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
    let mut out = String::with_capacity(table.len() + 80 * o.jpeg_decode.len());
    for line in table.lines() {
        out.push_str(line);
        out.push('\n');
        if line.split_whitespace().next() == Some(crate::config::stage::JPEG_DECODE) {
            for c in &o.jpeg_decode {
                out.push_str(&format!(
                    "{:<22} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                    format!("  per image: {}", c.camera),
                    "",
                    "",
                    ms(c.time.p50_ns),
                    ms(c.time.p99_ns),
                    ms(c.time.p999_ns),
                    ms(c.time.max_ns)
                ));
            }
        }
    }
    out
}

/// The terminal summary below the latency table.
pub fn summary_lines(o: &ReplayOutcome) -> Vec<String> {
    let e = &o.evaluation;
    let t = &e.tracking;
    let mut v = vec![format!(
        "input: {} ({} issues); perception: {:?}; backbone {:.1} MMAC/frame; BEV coverage {:.0}% (heights {:?} m, {} sampling)",
        o.source,
        o.input_issue_count,
        o.perception,
        o.graph.backbone_macs as f64 / 1e6,
        o.graph.bev_coverage * 100.0,
        o.graph.view_transform.lifts,
        o.graph.view_transform.sampling.name()
    )];
    if let Some(m) = &o.graph.rig_mismatch {
        v.push(format!(
            "rig: NOT the models' (check_rig = false runs them anyway; quality is unknown): {m}"
        ));
    }
    if o.quality.has_ground_truth() {
        v.extend([
            format!(
                "tracking vs ground truth: MOTA {:.3}, {} ID switches, {} misses, {} false positives over {} objects; {:.1} detections/frame",
                t.mota, t.id_switches, t.misses, t.false_positives, t.gt_objects, e.mean_detections
            ),
            o.quality.tracking_line(),
            o.quality.tracking_range_line(),
            o.quality.detection_line(),
            o.quality.detection_range_line(),
            o.quality.segmentation_line(),
            format!(
                "planner: {}/{} trajectories collision-free against the true futures ({:.2}%), {} minimum-risk frames",
                e.planner_collision_free,
                e.planner_frames_checked,
                e.planner_collision_free_rate * 100.0,
                e.minimum_risk_frames
            ),
        ]);
        v.extend(collisions_line(e));
    } else {
        // A recorded drive without ground truth: what the graph did, no quality figures.
        v.push(format!(
            "no ground truth in the input: no quality figures ({:.1} detections/frame, {} minimum-risk frames)",
            e.mean_detections, e.minimum_risk_frames
        ));
    }
    if !o.jpeg_decode.is_empty() {
        let (w, h) = o.graph.image;
        let failed: u64 = o.jpeg_decode.iter().map(|c| c.failed).sum();
        let images: u64 = o.jpeg_decode.iter().map(|c| c.time.count).sum();
        let mean = o
            .jpeg_decode
            .iter()
            .map(|c| c.time.mean_ns * c.time.count as f64)
            .sum::<f64>()
            / images.max(1) as f64;
        v.push(format!(
            "jpeg decode: {} cameras of {w}x{h} decoded in the frame, {:.3} ms per image on average; {failed} of {images} images unusable (camera counted missing that frame)",
            o.jpeg_decode.len(),
            mean / 1e6
        ));
    }
    if let Some(w) = &o.input_wait {
        v.push(format!(
            "input: streamed in {} windows; the graph waited for the reader before {} of them ({} frames delayed by input, longest wait {:.1} ms)",
            w.windows, w.waited_windows, w.frames_delayed_by_input, w.max_wait_ms
        ));
    }
    v.push(format!("output hash {}", o.output_hash));
    for (frame, what) in o.input_issues.iter().take(5) {
        v.push(format!("input issue: frame {frame}: {what}"));
    }
    v
}
