//! The driving stages as runtime stages: each wraps one algorithm, owns every buffer it
//! needs from construction, and in `run` only reads its input slices and writes its output
//! slices (no allocation, no lock, no I/O; bad data is a `StageError`, which makes the
//! runtime use the stage's fallback for that frame).
//!
//! Per-camera and per-row work is split with `io.parallel_for` over a static partition
//! (cameras, or BEV rows), so outputs are identical on any number of lanes.

use redline_models::engine::Engine;
use redline_models::network::{argmax_classes, NetConfig, REG_CHANNELS};
use redline_models::quant::QParams;
use redline_runtime::{Fallback, FrameInfo, Stage, StageError, StageIo};

use crate::camera::CameraSpec;
use crate::geometry::world_to_ego;
use crate::perception::{BevProjector, Decoder, PerceptionError, Preprocess, TemporalCache};
use crate::planning::{min_risk, Planner, PlannerParams};
use crate::prediction::Predictor;
use crate::sensors::in_perception_range;
use crate::tracking::{Tracker, TrackerParams};
use crate::types::{
    BevSpec, Detection, EgoPose, GtBox, PlanSummary, PredictedPath, RoadMap, TrackState, TrajPoint,
    PRED_DT, PRED_STEPS,
};

/// Buffer names (the graph's edges).
pub mod buf {
    /// All camera images, u8.
    pub const IMAGES: &str = "images";
    /// Each camera's JPEG stream (`jpeg_capacity` bytes per camera), for `jpeg_decode`.
    pub const JPEG: &str = "camera_jpeg";
    /// Bytes of each camera's JPEG stream (0: none).
    pub const JPEG_LEN: &str = "camera_jpeg_len";
    /// Per camera: 1 if its image is present, u32.
    pub const PRESENT: &str = "camera_present";
    /// `EgoPose[1]`.
    pub const EGO: &str = "ego";
    /// `GtBox[MAX_GT]`.
    pub const GT: &str = "ground_truth";
    /// `RoadMap[1]`.
    pub const MAP: &str = "map";
    /// Network input, i8.
    pub const NET_INPUT: &str = "net_input";
    /// Backbone features, i8.
    pub const FEATURES: &str = "features";
    /// Fused BEV features, i8.
    pub const BEV: &str = "bev_features";
    /// Detection head output, i8.
    pub const DET_HEAD: &str = "detection_head";
    /// Segmentation classes per BEV cell, u8.
    pub const SEG: &str = "segmentation";
    /// `Detection[MAX_DETECTIONS]`.
    pub const DETECTIONS: &str = "detections";
    /// `TrackState[MAX_TRACKS]`.
    pub const TRACKS: &str = "tracks";
    /// `PredictedPath[MAX_TRACKS]`.
    pub const PREDICTIONS: &str = "predictions";
    /// `TrajPoint[PLAN_STEPS]`.
    pub const TRAJECTORY: &str = "trajectory";
    /// `PlanSummary[1]`.
    pub const PLAN: &str = "plan";
}

mod jpeg_decode;
mod sensors;
pub use jpeg_decode::{CameraDecodeCost, JpegDecodeStage, JpegDecodeTimes};
pub use sensors::SensorsStage;

const E_SHAPE: StageError = StageError::new("buffer size does not match the model");

/// Resize, normalise and quantise every camera image, undoing each camera's lens
/// distortion ([`Preprocess::for_camera`]).
#[derive(Debug)]
pub struct PreprocessStage {
    /// One per camera, rig order (they differ only where a lens is distorted).
    pre: Vec<Preprocess>,
    src_len: usize,
    dst_len: usize,
}

impl PreprocessStage {
    /// `cameras`' images (`src_w × src_h` each) to the network's input size; fails when a
    /// size is out of range, or when a camera with lens distortion declares another image
    /// size than `src_w × src_h` (its intrinsics would not fit the images).
    pub fn new(
        cameras: &[CameraSpec],
        src_w: usize,
        src_h: usize,
        net: &NetConfig,
    ) -> Result<Self, PerceptionError> {
        let mut pre = Vec::with_capacity(cameras.len());
        for cam in cameras {
            if cam.distortion.is_none() {
                pre.push(Preprocess::new(src_w, src_h, net.in_w, net.in_h)?);
                continue;
            }
            if (cam.width as usize, cam.height as usize) != (src_w, src_h) {
                return Err(PerceptionError::BadConfig(format!(
                    "camera {} has lens distortion for {}x{} images, but the images are \
                     {src_w}x{src_h}: its calibration does not match its images",
                    cam.name, cam.width, cam.height
                )));
            }
            pre.push(Preprocess::for_camera(cam, net.in_w, net.in_h)?);
        }
        Ok(PreprocessStage {
            pre,
            src_len: src_w * src_h * 3,
            dst_len: net.in_w * net.in_h * 3,
        })
    }
}

impl Stage for PreprocessStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let images = io.input::<u8>(0)?;
        let out = io.output::<i8>(0)?;
        let cams = self.pre.len();
        if images.len() != cams * self.src_len || out.len() != cams * self.dst_len {
            return Err(E_SHAPE);
        }
        let (pre, src_len) = (&self.pre, self.src_len);
        let failed = std::sync::atomic::AtomicBool::new(false);
        // One chunk per camera: chunk `c` is camera c's `dst_len` elements of `out`.
        io.parallel_chunks_mut(out, cams, &|c, dst| {
            if pre[c]
                .run(&images[c * src_len..(c + 1) * src_len], dst)
                .is_err()
            {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        if failed.into_inner() {
            return Err(StageError::new("preprocess failed on a camera image"));
        }
        Ok(())
    }
}

/// The shared backbone: one model run over all cameras (`[cameras, H, W, 3]` in,
/// `[cameras, h, w, C]` out), on whatever engine loaded it; the engine splits its work over
/// the lanes with a static partition.
#[derive(Debug)]
pub struct BackboneStage {
    engine: Box<dyn Engine>,
}

impl BackboneStage {
    /// Runs `engine` (checked against the model contract by
    /// [`crate::models::load_models`]).
    pub fn new(engine: Box<dyn Engine>) -> Self {
        BackboneStage { engine }
    }
}

impl Stage for BackboneStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let input = io.input::<i8>(0)?;
        let out = io.output::<i8>(0)?;
        let mut outs = [bytemuck::cast_slice_mut::<i8, u8>(out)];
        self.engine
            .run(&[bytemuck::cast_slice(input)], &mut outs, &*io)
            .map_err(|_| StageError::new("backbone model run failed (buffer size or engine)"))
    }
}

/// BEV view transform (table built at init) and temporal cache.
#[derive(Debug)]
pub struct BevStage {
    proj: BevProjector,
    cache: TemporalCache,
    current: Vec<i8>,
    zp: i8,
}

impl BevStage {
    /// Builds the projection table for the rig.
    pub fn new(proj: BevProjector, cache: TemporalCache, bev_len: usize, zp: i8) -> Self {
        BevStage {
            proj,
            cache,
            current: vec![0; bev_len],
            zp,
        }
    }
}

impl Stage for BevStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let feats = io.input::<i8>(0)?;
        let ego = io.input::<EgoPose>(1)?;
        let out = io.output::<i8>(0)?;
        self.proj
            .project(feats, self.zp, &mut self.current)
            .map_err(|_| StageError::new("BEV projection: bad feature size"))?;
        self.cache
            .fuse(&self.current, self.zp, &ego[0], out)
            .map_err(|_| StageError::new("BEV temporal fusion: bad size"))?;
        Ok(())
    }
}

/// Detection head (runs beside the segmentation head, on another lane). A head with two
/// outputs (heatmap, boxes) runs into two buffers owned by the stage, which are then
/// interleaved per cell into the `classes + 6`-channel output the decoder reads; a head
/// with one fused output writes it directly.
#[derive(Debug)]
pub struct DetectionStage {
    engine: Box<dyn Engine>,
    classes: usize,
    /// Heatmap and boxes of a two-output head (empty for a fused one).
    heat: Vec<u8>,
    boxes: Vec<u8>,
}

impl DetectionStage {
    /// Runs `engine`; `split`: it has two outputs (heatmap, then boxes).
    pub fn new(engine: Box<dyn Engine>, classes: usize, split: bool) -> Self {
        let (heat, boxes) = match (split, engine.outputs()) {
            (true, [h, b]) => (vec![0; h.byte_len()], vec![0; b.byte_len()]),
            _ => (Vec::new(), Vec::new()),
        };
        DetectionStage {
            engine,
            classes,
            heat,
            boxes,
        }
    }
}

const E_DET: StageError =
    StageError::new("detection head model run failed (buffer size or engine)");

impl Stage for DetectionStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let bev = io.input::<i8>(0)?;
        let out = io.output::<i8>(0)?;
        let input = [bytemuck::cast_slice::<i8, u8>(bev)];
        if self.heat.is_empty() {
            let mut outs = [bytemuck::cast_slice_mut::<i8, u8>(out)];
            return self.engine.run(&input, &mut outs, &*io).map_err(|_| E_DET);
        }
        let mut outs = [self.heat.as_mut_slice(), self.boxes.as_mut_slice()];
        self.engine
            .run(&input, &mut outs, &*io)
            .map_err(|_| E_DET)?;
        let (k, r) = (self.classes, REG_CHANNELS);
        if k == 0 || out.len() != (self.heat.len() / k) * (k + r) {
            return Err(E_SHAPE);
        }
        // Copy: the two outputs interleaved per cell (heatmap channels, then box channels).
        for ((cell, h), b) in out
            .chunks_exact_mut(k + r)
            .zip(self.heat.chunks_exact(k))
            .zip(self.boxes.chunks_exact(r))
        {
            let (ch, cb) = cell.split_at_mut(k);
            for (d, &s) in ch.iter_mut().zip(h) {
                *d = s as i8;
            }
            for (d, &s) in cb.iter_mut().zip(b) {
                *d = s as i8;
            }
        }
        Ok(())
    }
}

/// Segmentation head and per-cell class (the index of the largest logit; ties: the
/// lowest index — one per-tensor scale, so the `i8` argmax is the real-valued argmax).
#[derive(Debug)]
pub struct SegmentationStage {
    engine: Box<dyn Engine>,
    classes: usize,
    logits: Vec<u8>,
}

impl SegmentationStage {
    /// Runs `engine` (one output of `cells × classes` logits).
    pub fn new(engine: Box<dyn Engine>, cells: usize, classes: usize) -> Self {
        SegmentationStage {
            engine,
            classes,
            logits: vec![0; cells * classes],
        }
    }
}

impl Stage for SegmentationStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let bev = io.input::<i8>(0)?;
        let out = io.output::<u8>(0)?;
        let mut outs = [self.logits.as_mut_slice()];
        self.engine
            .run(&[bytemuck::cast_slice(bev)], &mut outs, &*io)
            .map_err(|_| {
                StageError::new("segmentation head model run failed (buffer size or engine)")
            })?;
        argmax_classes(bytemuck::cast_slice(&self.logits), self.classes, out)
            .map_err(|_| StageError::new("segmentation argmax: bad size"))
    }
}

/// Heatmap peaks, boxes, NMS.
#[derive(Debug)]
pub struct DecodeStage {
    decoder: Decoder,
    heat_q: QParams,
    reg_q: QParams,
}

impl DecodeStage {
    /// With the head's output quantisation.
    pub fn new(decoder: Decoder, heat_q: QParams, reg_q: QParams) -> Self {
        DecodeStage {
            decoder,
            heat_q,
            reg_q,
        }
    }
}

impl Stage for DecodeStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let head = io.input::<i8>(0)?;
        let out = io.output::<Detection>(0)?;
        self.decoder
            .decode(
                head,
                self.heat_q.scale,
                self.heat_q.zero_point,
                self.reg_q.scale,
                self.reg_q.zero_point,
                out,
            )
            .map_err(|_| StageError::new("decode: bad head size or quantisation parameters"))?;
        Ok(())
    }
}

/// Ground truth as detections (ego frame), for `--perception oracle`.
#[derive(Debug, Default)]
pub struct OracleStage;

impl Stage for OracleStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let gt = io.input::<GtBox>(0)?;
        let ego = io.input::<EgoPose>(1)?;
        let out = io.output::<Detection>(0)?;
        let ego = ego[0];
        let mut n = 0;
        for g in gt.iter().filter(|g| in_perception_range(&ego, g)) {
            if n == out.len() {
                break;
            }
            let (x, y) = world_to_ego(&ego, g.x, g.y);
            out[n] = Detection {
                x: x as f32,
                y: y as f32,
                yaw: (g.yaw - ego.yaw) as f32,
                length: g.length,
                width: g.width,
                score: 1.0,
                class: g.class,
                valid: 1,
            };
            n += 1;
        }
        out[n..].fill(Detection::default());
        Ok(())
    }
}

/// Kalman filter + optimal assignment.
#[derive(Debug)]
pub struct TrackingStage {
    tracker: Tracker,
}

impl TrackingStage {
    /// With default parameters.
    pub fn new() -> Self {
        Self::with_params(TrackerParams::default())
    }

    /// With the given parameters.
    pub fn with_params(p: TrackerParams) -> Self {
        TrackingStage {
            tracker: Tracker::new(p),
        }
    }
}

impl Default for TrackingStage {
    fn default() -> Self {
        Self::new()
    }
}

impl Stage for TrackingStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let dets = io.input::<Detection>(0)?;
        let ego = io.input::<EgoPose>(1)?;
        let out = io.output::<TrackState>(0)?;
        self.tracker.step(dets, &ego[0]);
        self.tracker.write(out);
        Ok(())
    }
}

/// Lane-aware prediction; fallback: constant velocity.
#[derive(Debug)]
pub struct PredictionStage {
    predictor: Predictor,
}

impl PredictionStage {
    /// A predictor.
    pub fn new() -> Self {
        PredictionStage {
            predictor: Predictor::new(),
        }
    }
}

impl Default for PredictionStage {
    fn default() -> Self {
        Self::new()
    }
}

impl Stage for PredictionStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let tracks = io.input::<TrackState>(0)?;
        let map = io.input::<RoadMap>(1)?;
        let out = io.output::<PredictedPath>(0)?;
        self.predictor.predict(tracks, &map[0], out);
        Ok(())
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        Box::new(ConstantVelocity)
    }
}

/// The prediction fallback (mode `minimal`): every track keeps its velocity (at most its
/// class's [`crate::prediction::MAX_PREDICTED_SPEED`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ConstantVelocity;

impl Fallback for ConstantVelocity {
    fn fallback(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) {
        let (Ok(tracks), Ok(out)) = (io.input::<TrackState>(0), io.output::<PredictedPath>(0))
        else {
            return;
        };
        for (i, o) in out.iter_mut().enumerate() {
            *o = PredictedPath::default();
            let Some(t) = tracks.get(i).filter(|t| t.valid == 1) else {
                continue;
            };
            o.track_id = t.id;
            o.class = t.class;
            o.length = t.length;
            o.width = t.width;
            o.valid = 1;
            let (vx, vy) = crate::prediction::predicted_velocity(t.class, t.vx, t.vy);
            for (k, p) in o.xy.iter_mut().enumerate().take(PRED_STEPS) {
                let dt = (k + 1) as f32 * PRED_DT;
                *p = [t.x + vx * dt, t.y + vy * dt];
            }
        }
    }
}

/// Sampled-trajectory planner; fallback: the minimum-risk trajectory.
#[derive(Debug)]
pub struct PlanningStage {
    planner: Planner,
}

impl PlanningStage {
    /// With default parameters.
    pub fn new() -> Self {
        PlanningStage {
            planner: Planner::new(PlannerParams::default()),
        }
    }
}

impl Default for PlanningStage {
    fn default() -> Self {
        Self::new()
    }
}

impl Stage for PlanningStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let preds = io.input::<PredictedPath>(0)?;
        let ego = io.input::<EgoPose>(1)?;
        let map = io.input::<RoadMap>(2)?;
        let seg = io.input::<u8>(3)?;
        let traj = io.output::<TrajPoint>(0)?;
        let summary = io.output::<PlanSummary>(1)?;
        let bev = BevSpec::DEFAULT;
        let drivable = if seg.len() == bev.nx * bev.ny {
            Some((seg, &bev))
        } else {
            None
        };
        self.planner
            .plan(&ego[0], &map[0], preds, drivable, traj, &mut summary[0]);
        Ok(())
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        Box::new(MinimumRisk)
    }
}

/// The planning fallback (mode `safe_stop`, or a failed run): brake in lane.
#[derive(Debug, Default, Clone, Copy)]
pub struct MinimumRisk;

impl Fallback for MinimumRisk {
    fn fallback(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) {
        let (Ok(ego), Ok(map)) = (io.input::<EgoPose>(1), io.input::<RoadMap>(2)) else {
            return;
        };
        if let Ok(traj) = io.output::<TrajPoint>(0) {
            min_risk(
                &ego[0],
                &map[0],
                PlannerParams::default().comfort_decel,
                traj,
            );
        }
        if let Ok(summary) = io.output::<PlanSummary>(1) {
            summary[0] = PlanSummary {
                kind: 1,
                ..PlanSummary::default()
            };
        }
    }
}
