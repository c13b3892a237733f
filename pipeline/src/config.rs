//! The pipeline's configuration: its part of the one TOML file (`redline replay --config
//! FILE`), every field optional, defaults that hold the 33 ms budget on a 2-core
//! development machine. The `[scenario]` table of the same file belongs to the simulator
//! and is split off by the `redline` tool before this struct parses the rest.
//!
//! ```toml
//! lanes = 2
//! frame_slots = 2
//! release = "realtime"          # realtime | as_fast_as_possible | lockstep
//! perception = "network"        # network | oracle
//! network = "trained"           # trained (the shipped models) | seeded (untrained, any shape)
//! bev_cache_frames = 2
//! bev_lift_m = [0.5]            # heights BEV cells sample features at (the models' own)
//! bev_sampling = "nearest"      # nearest | row_linear: how they read them (the models' own)
//! check_rig = true              # refuse logs from another rig than the models declare
//! detection_threshold = 0.15    # decoder: heatmap peaks kept at sigmoid >= this
//! track_min_score = 0.45        # tracking: detections below this score are ignored
//! track_min_score_by_class = { pedestrian = 0.35 }   # per class (the default)
//! track_depth_noise_from_m = 20.0   # tracking: detections beyond this range are less sure
//! track_depth_noise_per_m = 0.1     #   in depth: along-ray sd grows this much per metre
//! track_shadow_deg = 2.0        # tracking: ignore a far detection within 2° of a better one
//! track_shadow_from_m = 45.0    #   of its class beyond 45 m (its ray's second peak)
//! weights = "net.safetensors"  # calibrated INT8 weights from `redline quantize` (optional)
//!
//! [models]                      # ONNX models and the engine that runs each (optional; see
//! backbone = { path = "bb.onnx", engine = "native" }   # "Bringing your own model" in the
//! det_head = { path = "det.onnx" }                     # README); a model not named here
//! seg_head = { path = "seg.onnx" }                     # is the built-in one
//!
//! [scenario]                    # (the simulator's: the built-in scenario, `sim generate`)
//! seed = 7
//! seconds = 30.0
//! image_width = 256
//! image_height = 128
//!
//! [budgets_ms]                  # per-stage WCET allowances
//! backbone = 12.0
//!
//! [ladder]                      # degradation: modes and thresholds
//! degrade_after = 3             # frames at deadline risk within `window` → one rung down
//! window = 30
//! risk_slack_fraction = 0.1     # published with < 10 % of the deadline left: at risk
//! shed_after = 10               # overruns of one non-critical stage → the mode shedding it
//! recover_after = 90            # consecutive frames with >= slack_fraction left → one up
//! slack_fraction = 0.2
//! [[ladder.modes]]
//! name = "nominal"
//!
//! [rt]                          # no [rt] table: see "Real time by default" below
//! fifo_priority = 40
//! auto_pin = true
//! lock_memory = true
//!
//! [slowdown.backbone]           # testing the regression harness: make a stage slower
//! percent = 20.0                # busy-wait 20% of each run's own time after it
//! busy_ms = 0.0                 # and/or a fixed busy time per run
//!
//! [regress]                     # (the `redline` tool's: `redline regress` tolerances)
//! reps = 5
//! ```
//!
//! Unknown keys are rejected with the key's name, so a typo never silently does nothing.
//!
//! **Real time by default.** Without an `[rt]` table (`rt = None`, also the built-in
//! default) a run whose frames are released in real time — the default release — asks for
//! [`RtRequest::realtime`]: `SCHED_FIFO` lanes, automatic pinning to the cores this process
//! may use, `mlockall` ([`PipelineConfig::rt_request`]). What the OS granted or refused
//! (with the reason) is in the report and the printed table; a refusal is never an error.
//! As-fast-as-possible and lockstep runs ask for nothing unless an `[rt]` table says so:
//! they have no deadline to protect (lockstep's clock is virtual) and granted `SCHED_FIFO`
//! lanes running flat out would hold every core at real-time priority — on a shared
//! machine, or in a test suite that runs many replays in parallel, they starve everything
//! else. An empty `[rt]` table asks for nothing at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::types::class;
use redline_models::engine::EngineKind;
use redline_runtime::modes::{LadderConfig, ModeSpec};
use redline_runtime::rt::RtRequest;
use redline_runtime::ReleaseMode;
use serde::{Deserialize, Serialize};

/// Stage names, as they appear in budgets, modes, reports and traces.
pub mod stage {
    /// Copies the frame's sensor data into the arena.
    pub const SENSORS: &str = "sensors";
    /// Resize, normalise, quantise each camera image.
    pub const PREPROCESS: &str = "preprocess";
    /// Shared INT8 backbone over all cameras.
    pub const BACKBONE: &str = "backbone";
    /// BEV view transform and temporal cache.
    pub const BEV: &str = "bev";
    /// Detection head.
    pub const DETECTION: &str = "detection_head";
    /// Segmentation head.
    pub const SEGMENTATION: &str = "segmentation_head";
    /// Heatmap peaks, boxes, NMS.
    pub const DECODE: &str = "decode";
    /// JPEG camera streams to RGB images (only for a source that passes JPEG on).
    pub const JPEG_DECODE: &str = "jpeg_decode";
    /// Ground truth in place of decoded detections (`--perception oracle`).
    pub const ORACLE: &str = "oracle";
    /// Kalman filter + assignment.
    pub const TRACKING: &str = "tracking";
    /// Multi-second trajectories per track.
    pub const PREDICTION: &str = "prediction";
    /// Sampled candidate trajectories.
    pub const PLANNING: &str = "planning";
}

/// Every stage name, for messages.
const STAGE_LIST: &str = "sensors, jpeg_decode, preprocess, backbone, bev, detection_head, segmentation_head, decode, oracle, tracking, prediction, planning";

/// Where tracking's detections come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Perception {
    /// The INT8 network and the decoder.
    #[default]
    Network,
    /// The log's ground truth (tests the back half on its own).
    Oracle,
}

/// Which built-in models a `[models]` entry without `path` means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The trained network shipped in `models/trained/` (tools/train; the README's model
    /// card): fixed shapes (six cameras, its own input size), so `net_input`,
    /// `feature_channels` and `weights_seed` do not apply to it.
    #[default]
    Trained,
    /// The seeded, untrained reference network written by the Rust exporter for
    /// `net_input`, `feature_channels` and `weights_seed` (or `weights`): timing studies at
    /// any size; its detections are noise.
    Seeded,
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

fn is_true(v: &bool) -> bool {
    *v
}

/// Everything `redline replay` can be configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Worker lanes.
    pub lanes: usize,
    /// Frames in flight.
    pub frame_slots: usize,
    /// How frames are released.
    pub release: ReleaseMode,
    /// Real-time replay speed: frames are released every input period / `rate` (2: twice as
    /// fast as recorded). The input's own stamps (staleness, motion) are not changed. 1 in
    /// the vehicle; written to a config file only when not 1.
    #[serde(skip_serializing_if = "is_one")]
    pub rate: f64,
    /// Detections from the network or the ground truth.
    pub perception: Perception,
    /// The built-in models: trained (default) or seeded.
    pub network: Network,
    /// Previous BEV maps fused by the temporal cache (1..=4).
    pub bev_cache_frames: usize,
    /// Heights (m, ego frame) at which BEV cells sample the camera features, in the order
    /// the heads take them: the BEV grid has `len · C` channels (see
    /// [`crate::perception::BevProjector`]). Must be what the models were trained with:
    /// models that declare their heights (ONNX metadata `redline.bev_lift_m`, see
    /// [`crate::models`]) refuse another value. Left out (the default): the models'
    /// declared heights (the shipped trained models declare theirs); for models that
    /// declare none, one height, 0.5 m. Written to a config file only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bev_lift_m: Option<Vec<f32>>,
    /// How BEV cells read the camera feature maps (see
    /// [`crate::perception::BevSampling`]): `nearest` or `row_linear`. Must be what the
    /// models were trained with: models that declare it (ONNX metadata
    /// `redline.bev_sampling`) refuse another value. Left out (the default): the models'
    /// declared sampling (the shipped trained models declare theirs); for models that
    /// declare none, `nearest`. Written to a config file only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bev_sampling: Option<crate::perception::BevSampling>,
    /// Refuse a log whose cameras are not the rig the models declare they were trained on
    /// (ONNX metadata `redline.camera_hfov_deg` / `redline.camera_yaw_deg`, see
    /// [`crate::models::check_rig`]). `false` runs them anyway (to measure how a network
    /// does on another rig); the replay summary then says how the rigs differ. Default
    /// true. Written to a config file only when false.
    #[serde(skip_serializing_if = "is_true")]
    pub check_rig: bool,
    /// Heatmap score (sigmoid of the logit) at which the decoder keeps a peak, in (0, 1).
    /// Lower finds more objects (recall, AP) at the price of more false detections, which
    /// tracking's confirmation filters. Default 0.15 (chosen on the trained network on two
    /// validation drives, seeds 11 and 12: see the README's model card).
    pub detection_threshold: f32,
    /// Detection score below which tracking ignores a detection, in [0, 1]. Above
    /// `detection_threshold` it lets tracking see only the surer detections while the
    /// published detections (and detection AP) keep the rest. Default 0.45, chosen for the shipped
    /// network on the validation drives (README model card).
    pub track_min_score: f32,
    /// Per-class `track_min_score`, by class name (`car`, `pedestrian`, `cyclist`); a class
    /// not named here uses `track_min_score`. Writing the table replaces the default,
    /// `{ pedestrian = 0.35 }`: a far pedestrian can score 0.35-0.4 for many frames before
    /// he is near, and tracking him is what keeps the plan clear of one who crosses; chosen
    /// with the prediction's speed cap ([`crate::prediction::MAX_PREDICTED_SPEED`]) on the
    /// validation drives (README model card).
    pub track_min_score_by_class: BTreeMap<String, f32>,
    /// Range from the ego, m, beyond which tracking takes a detection's position to be less
    /// certain along its viewing ray than across it (a camera's depth error grows with
    /// range; see [`crate::tracking`]). Default 20.
    pub track_depth_noise_from_m: f64,
    /// How fast that along-ray uncertainty grows: its standard deviation gains this many
    /// metres per metre of range beyond `track_depth_noise_from_m`. 0 turns it off (an
    /// isotropic 0.5 m everywhere; the oracle perception, exact, always has it off).
    /// Default 0.1, chosen with `track_depth_noise_from_m` on
    /// the validation drives (README model card), where the shipped network's detections
    /// measure about that: a robust along-ray spread of 0.6 m at 20-25 m, 1.3 m at 35-40 m,
    /// 2.4-2.7 m at 40-55 m.
    pub track_depth_noise_per_m: f64,
    /// Range from the ego, m, beyond which tracking ignores a detection shadowed along its
    /// ray: one within `track_shadow_deg` of the bearing of a better-scoring detection of
    /// its class, also this far (a far object's second peak; see [`crate::tracking`]). The
    /// published detections keep it. Default 45.
    pub track_shadow_from_m: f32,
    /// Bearing window of that shadow, degrees, in [0, 45]; 0 turns it off (the oracle
    /// perception always has it off). Default 2, chosen on the validation drives (README
    /// model card).
    pub track_shadow_deg: f32,
    /// Seed of the network's weights (until trained weights exist).
    pub weights_seed: u64,
    /// Network input per camera, [height, width] px (multiples of 8).
    pub net_input: [usize; 2],
    /// Backbone output = BEV feature channels.
    pub feature_channels: usize,
    /// Calibrated INT8 weights written by `redline quantize` (a `.safetensors` file). When
    /// set, the backbone and both heads are built from this file (its network shapes and
    /// calibrated scales) and `weights_seed` is ignored; a missing, corrupt or mismatched
    /// file stops the graph from being built, with the reason. Default: none (seeded
    /// weights).
    pub weights: Option<PathBuf>,
    /// Per-stage budgets, ms (stages not listed keep their defaults).
    pub budgets_ms: BTreeMap<String, f64>,
    /// Deadline after release, ms (0 = one period).
    pub deadline_ms: f64,
    /// The fallback is published this long before the deadline, ms.
    pub publish_margin_ms: f64,
    /// Degradation ladder.
    pub ladder: LadderConfig,
    /// Pinning, SCHED_FIFO, memory locking: the `[rt]` table. `None` (no table): what
    /// [`PipelineConfig::rt_request`] says, real time for real-time release.
    pub rt: Option<RtRequest>,
    /// Extra busy time added to named stages, to test the regression harness (empty:
    /// nothing added).
    pub slowdown: BTreeMap<String, Slowdown>,
    /// The `[models]` table: ONNX files for the backbone and the heads and the engine that
    /// runs each (default: the built-in models on the native engine). Left out of the
    /// serialized config while it is the default, so existing configs keep their hash.
    #[serde(skip_serializing_if = "ModelsConfig::is_default")]
    pub models: ModelsConfig,
}

/// The `[models]` table: one entry per model of the driving network.
///
/// ```toml
/// [models]
/// backbone = { path = "models/backbone.onnx", engine = "native" }
/// det_head = { path = "models/det_head.onnx" }
/// seg_head = { path = "models/seg_head.onnx", engine = "onnxruntime" }   # or "cuda", "tensorrt"
/// ```
///
/// A model without `path` is the built-in one (the ONNX files in `models/builtin/`,
/// embedded in the binary, or written in memory by the same exporter when `net_input`,
/// `feature_channels`, `weights_seed`, `weights` or the camera count differ from the
/// built-in network). With a `path`, the model's own shapes replace `net_input` and
/// `feature_channels`, and its quantization is read from the file; the contract each file
/// must meet is in `redline_pipeline::models` and the README ("Bringing your own model").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelsConfig {
    /// The shared camera backbone.
    pub backbone: ModelRef,
    /// The detection head.
    pub det_head: ModelRef,
    /// The segmentation head.
    pub seg_head: ModelRef,
}

impl ModelsConfig {
    /// True when nothing is configured (built-in models, native engine).
    pub fn is_default(&self) -> bool {
        *self == ModelsConfig::default()
    }

    /// `(config key, entry)` for the three models.
    pub fn entries(&self) -> [(&'static str, &ModelRef); 3] {
        [
            ("backbone", &self.backbone),
            ("det_head", &self.det_head),
            ("seg_head", &self.seg_head),
        ]
    }
}

/// One model: its ONNX file and the engine that runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelRef {
    /// The `.onnx` file (relative paths: to the working directory). `None`: built-in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// `native` (default), `onnxruntime`, `cuda` (a build with `--features cuda`: the same
    /// outputs on an NVIDIA GPU) or `tensorrt` (`--features tensorrt`).
    pub engine: String,
}

impl Default for ModelRef {
    fn default() -> Self {
        ModelRef {
            path: None,
            engine: EngineKind::Native.name().to_string(),
        }
    }
}

impl ModelRef {
    /// The engine, parsed (validated configs always parse).
    pub fn engine_kind(&self) -> Result<EngineKind, ConfigError> {
        EngineKind::parse(&self.engine).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "engine = \"{}\": use \"native\", \"onnxruntime\", \"cuda\" or \"tensorrt\"",
                self.engine
            ))
        })
    }
}

/// A slowdown injected into one stage (the `[slowdown.STAGE]` table): after each `run`,
/// the stage busy-waits `percent` of that run's own duration plus `busy_ms`. A busy-wait,
/// not a sleep, so the stage keeps its core exactly as a slower implementation would.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Slowdown {
    /// Extra time as a share of the run's own duration, percent (20.0 = 20 % slower).
    pub percent: f64,
    /// Extra fixed time per run, ms.
    pub busy_ms: f64,
}

/// `+P% +B ms`: how a measurement names the slowdown it ran with.
impl std::fmt::Display for Slowdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "+{}% +{} ms", self.percent, self.busy_ms)
    }
}

/// A range from the ego, m: finite and >= 0, else an error naming `key` and an example.
fn range_m(key: &str, v: f64, example: u32) -> Result<(), ConfigError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "{key} = {v}: use a range in metres >= 0, e.g. {example}"
        )))
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            lanes: 2,
            frame_slots: 2,
            release: ReleaseMode::RealTime,
            rate: 1.0,
            perception: Perception::Network,
            network: Network::Trained,
            bev_cache_frames: 2,
            bev_lift_m: None,
            bev_sampling: None,
            check_rig: true,
            detection_threshold: 0.15,
            track_min_score: 0.45,
            track_min_score_by_class: BTreeMap::from([("pedestrian".to_string(), 0.35)]),
            track_depth_noise_from_m: 20.0,
            track_depth_noise_per_m: 0.1,
            track_shadow_from_m: 45.0,
            track_shadow_deg: 2.0,
            weights_seed: 1,
            net_input: [128, 256],
            feature_channels: 128,
            weights: None,
            budgets_ms: BTreeMap::new(),
            deadline_ms: 0.0,
            publish_margin_ms: 1.0,
            ladder: default_ladder(),
            rt: None,
            slowdown: BTreeMap::new(),
            models: ModelsConfig::default(),
        }
    }
}

/// Default budgets, ms, for the default resolution on a 2-core x86 machine; the sum along
/// the critical path (sensors, preprocess, backbone, bev, detection, decode, tracking,
/// prediction, planning: 32.5 ms) stays inside the 33.3 ms frame. The backbone's 17 ms
/// covers the shipped trained network's 3.3 GMAC per frame of seven cameras at the 4 x 2
/// feature stride (P50 8.8 ms, P99 15.9 ms, max 16.6 ms in a default replay on the 2-core
/// VM with VNNI); the other stages' budgets are 2-10x their P99 there.
pub fn default_budget_ms(stage_name: &str) -> f64 {
    match stage_name {
        stage::SENSORS => 1.5,
        stage::JPEG_DECODE => 8.0,
        stage::PREPROCESS => 1.5,
        stage::BACKBONE => 17.0,
        stage::BEV => 2.0,
        stage::DETECTION => 4.0,
        stage::SEGMENTATION => 4.0,
        stage::DECODE => 1.0,
        stage::ORACLE => 0.5,
        stage::TRACKING => 1.5,
        stage::PREDICTION => 1.5,
        stage::PLANNING => 2.5,
        _ => 0.0,
    }
}

/// Nominal → reduced (no segmentation) → minimal (no segmentation, constant-velocity
/// prediction) → safe_stop (the planner's minimum-risk trajectory).
///
/// One rung down on 3 frames at deadline risk within 30 (a miss, a fallback, or less than
/// 10 % = 3.3 ms of the deadline left at publish); straight to `minimal` when `prediction`
/// overran its budget in 10 of 30 frames (the only stage a non-terminal mode sheds on
/// overruns: `segmentation_head` is best-effort, the others are shed by no mode but
/// `safe_stop` or are critical); back up one rung after 90 consecutive frames with at
/// least 20 % of the deadline left. `safe_stop` only on a lost critical stage or frames
/// still at risk in `minimal`.
pub fn default_ladder() -> LadderConfig {
    let mode = ModeSpec::new;
    LadderConfig {
        modes: vec![
            mode("nominal", &[]),
            mode("reduced", &[stage::SEGMENTATION]),
            mode("minimal", &[stage::SEGMENTATION, stage::PREDICTION]),
            mode(
                "safe_stop",
                &[stage::SEGMENTATION, stage::PREDICTION, stage::PLANNING],
            ),
        ],
        degrade_after: 3,
        window: 30,
        recover_after: 90,
        slack_fraction: 0.2,
        risk_slack_fraction: 0.1,
        shed_after: 10,
    }
}

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("config {path}: {message}")]
    Parse {
        /// File.
        path: String,
        /// What toml said (names the key and line).
        message: String,
    },
    /// A value out of range.
    #[error("config: {0}")]
    Invalid(String),
}

impl PipelineConfig {
    /// Reads and checks a TOML file.
    pub fn load(path: &Path) -> Result<PipelineConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks TOML text (`origin` names it in messages).
    pub fn parse(text: &str, origin: &str) -> Result<PipelineConfig, ConfigError> {
        let cfg: PipelineConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Range checks that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.rate.is_finite() && (0.01..=100.0).contains(&self.rate)) {
            return Err(ConfigError::Invalid(format!(
                "rate = {}: use a replay speed from 0.01 to 100 (1 = as recorded)",
                self.rate
            )));
        }
        if !(1..=64).contains(&self.lanes) {
            return Err(ConfigError::Invalid(format!(
                "lanes = {}: use 1 to 64",
                self.lanes
            )));
        }
        if !(1..=16).contains(&self.frame_slots) {
            return Err(ConfigError::Invalid(format!(
                "frame_slots = {}: use 1 to 16",
                self.frame_slots
            )));
        }
        if !(self.detection_threshold > 0.0 && self.detection_threshold < 1.0) {
            return Err(ConfigError::Invalid(format!(
                "detection_threshold = {}: use a score in (0, 1), e.g. 0.15",
                self.detection_threshold
            )));
        }
        range_m(
            "track_shadow_from_m",
            f64::from(self.track_shadow_from_m),
            45,
        )?;
        if !(0.0..=45.0).contains(&self.track_shadow_deg) {
            return Err(ConfigError::Invalid(format!(
                "track_shadow_deg = {}: use 0 (off) to 45 degrees, e.g. 2",
                self.track_shadow_deg
            )));
        }
        if !(0.0..=1.0).contains(&self.track_min_score) {
            return Err(ConfigError::Invalid(format!(
                "track_min_score = {}: use a score in [0, 1], e.g. 0.3",
                self.track_min_score
            )));
        }
        for (name, score) in &self.track_min_score_by_class {
            if !class::NAMES.contains(&name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "track_min_score_by_class.{name}: no such class (classes: {})",
                    class::NAMES.join(", ")
                )));
            }
            if !(0.0..=1.0).contains(score) {
                return Err(ConfigError::Invalid(format!(
                    "track_min_score_by_class.{name} = {score}: use a score in [0, 1], e.g. 0.35"
                )));
            }
        }
        range_m(
            "track_depth_noise_from_m",
            self.track_depth_noise_from_m,
            20,
        )?;
        if !(0.0..=1.0).contains(&self.track_depth_noise_per_m) {
            return Err(ConfigError::Invalid(format!(
                "track_depth_noise_per_m = {}: use 0 (off) to 1 m per m, e.g. 0.1",
                self.track_depth_noise_per_m
            )));
        }
        if let Some(lifts) = &self.bev_lift_m {
            let max = crate::perception::MAX_LIFTS;
            if lifts.is_empty() || lifts.len() > max || lifts.iter().any(|h| !h.is_finite()) {
                return Err(ConfigError::Invalid(format!(
                    "bev_lift_m = {lifts:?}: give 1 to {max} finite heights in metres, e.g. \
                     [0.5] (the heights the models were trained with)"
                )));
            }
        }
        if !(1..=4).contains(&self.bev_cache_frames) {
            return Err(ConfigError::Invalid(format!(
                "bev_cache_frames = {}: use 1 to 4",
                self.bev_cache_frames
            )));
        }
        for (name, ms) in &self.budgets_ms {
            if default_budget_ms(name) == 0.0 {
                return Err(ConfigError::Invalid(format!(
                    "budgets_ms.{name}: no such stage (stages: {STAGE_LIST})"
                )));
            }
            if !(ms.is_finite() && *ms >= 0.0) {
                return Err(ConfigError::Invalid(format!(
                    "budgets_ms.{name} = {ms}: must be >= 0"
                )));
            }
        }
        for (name, sd) in &self.slowdown {
            if default_budget_ms(name) == 0.0 {
                return Err(ConfigError::Invalid(format!(
                    "slowdown.{name}: no such stage (stages: {STAGE_LIST})"
                )));
            }
            if !(sd.percent.is_finite() && sd.percent >= 0.0 && sd.percent <= 1000.0) {
                return Err(ConfigError::Invalid(format!(
                    "slowdown.{name}.percent = {}: use 0 to 1000",
                    sd.percent
                )));
            }
            if !(sd.busy_ms.is_finite() && sd.busy_ms >= 0.0 && sd.busy_ms <= 1000.0) {
                return Err(ConfigError::Invalid(format!(
                    "slowdown.{name}.busy_ms = {}: use 0 to 1000",
                    sd.busy_ms
                )));
            }
        }
        let [nh, nw] = self.net_input;
        if nh % 8 != 0 || nw % 8 != 0 || nh < 16 || nw < 16 || nh > 1024 || nw > 2048 {
            return Err(ConfigError::Invalid(format!(
                "net_input = [{nh}, {nw}]: use multiples of 8 between 16 and 1024 x 2048"
            )));
        }
        if !(8..=512).contains(&self.feature_channels) {
            return Err(ConfigError::Invalid(format!(
                "feature_channels = {}: use 8 to 512",
                self.feature_channels
            )));
        }
        for (key, m) in self.models.entries() {
            m.engine_kind().map_err(|e| {
                ConfigError::Invalid(format!(
                    "models.{key}.{}",
                    e.to_string().trim_start_matches("config: ")
                ))
            })?;
            if m.path.is_some() && self.weights.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "models.{key}.path and weights are both set: a model file carries its own \
                     weights; remove one of them"
                )));
            }
        }
        self.ladder
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if !(self.deadline_ms >= 0.0 && self.publish_margin_ms >= 0.0) {
            return Err(ConfigError::Invalid(
                "deadline_ms and publish_margin_ms must be >= 0".into(),
            ));
        }
        Ok(())
    }

    /// The network this config runs when no weights file is given.
    pub fn net_config(&self) -> redline_models::network::NetConfig {
        redline_models::network::NetConfig {
            in_h: self.net_input[0],
            in_w: self.net_input[1],
            feat_c: self.feature_channels,
            bev_c: self.feature_channels,
            seed: self.weights_seed,
            ..redline_models::network::NetConfig::default()
        }
    }

    /// The BEV lift heights of this config before the models are read: `bev_lift_m` when
    /// set, else `[0.5]`. The run's are [`crate::models::Models::view`]: heights the models
    /// declare win over the default (and a config that sets others is refused).
    pub fn bev_lifts(&self) -> Vec<f32> {
        self.bev_lift_m.clone().unwrap_or_else(|| vec![0.5])
    }

    /// How BEV cells read the features, before the models are read: `bev_sampling` when
    /// set, else nearest. The run's is [`crate::models::Models::view`]: a sampling the
    /// models declare wins over the default (and a config that sets another is refused).
    pub fn bev_sampling(&self) -> crate::perception::BevSampling {
        self.bev_sampling
            .unwrap_or(crate::perception::BevSampling::Nearest)
    }

    /// Tracking's minimum detection score per class id (`class::NAMES` order):
    /// `track_min_score_by_class` where it names the class, else `track_min_score`.
    pub fn track_min_scores(&self) -> [f32; class::COUNT] {
        std::array::from_fn(|c| {
            self.track_min_score_by_class
                .get(class::NAMES[c])
                .copied()
                .unwrap_or(self.track_min_score)
        })
    }

    /// What to ask of the OS: the `[rt]` table when there is one; otherwise
    /// [`RtRequest::realtime`] when frames are released in real time, nothing for
    /// as-fast-as-possible and lockstep runs (see the module docs).
    pub fn rt_request(&self) -> RtRequest {
        match (&self.rt, self.release) {
            (Some(rt), _) => rt.clone(),
            (None, ReleaseMode::RealTime) => RtRequest::realtime(),
            (None, _) => RtRequest::default(),
        }
    }

    /// Budget of a stage, ns.
    pub fn budget_ns(&self, stage_name: &str) -> u64 {
        let ms = self
            .budgets_ms
            .get(stage_name)
            .copied()
            .unwrap_or_else(|| default_budget_ms(stage_name));
        (ms * 1e6) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_round_trip_through_toml() {
        let d = PipelineConfig::default();
        d.validate().unwrap();
        let text = toml::to_string(&d).unwrap();
        let back = PipelineConfig::parse(&text, "round-trip").unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn the_default_asks_for_real_time_in_real_time_runs_only() {
        let d = PipelineConfig::default();
        assert_eq!(d.release, ReleaseMode::RealTime);
        assert_eq!(d.rt_request(), RtRequest::realtime());
        let c = PipelineConfig::parse("lanes = 1\n", "t").unwrap();
        assert_eq!(c.rt_request(), RtRequest::realtime(), "a file without [rt]");
        for release in ["lockstep", "as_fast_as_possible"] {
            let c = PipelineConfig::parse(&format!("release = \"{release}\"\n"), "t").unwrap();
            assert!(!c.rt_request().asks_anything(), "{release}");
        }
        // An [rt] table is taken as written, whatever the release mode.
        let c = PipelineConfig::parse("[rt]\n", "t").unwrap();
        assert!(!c.rt_request().asks_anything());
        let c = PipelineConfig::parse("release = \"lockstep\"\n[rt]\nfifo_priority = 30\n", "t")
            .unwrap();
        assert_eq!(c.rt_request().fifo_priority, Some(30));
        assert!(!c.rt_request().auto_pin && !c.rt_request().lock_memory);
    }

    #[test]
    fn ladder_numbers_are_checked_when_the_file_is_read() {
        let e = PipelineConfig::parse("[ladder]\nrisk_slack_fraction = 0.5\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("risk_slack_fraction = 0.5"), "{e}");
        let c = PipelineConfig::parse("[ladder]\nshed_after = 0\n", "f").unwrap();
        assert_eq!(c.ladder.shed_after, 0);
    }

    #[test]
    fn tracking_scores_per_class_default_and_override() {
        let d = PipelineConfig::default();
        assert_eq!(d.track_min_scores(), [0.45, 0.35, 0.45]);
        let c = PipelineConfig::parse(
            "track_min_score = 0.5\ntrack_min_score_by_class = { cyclist = 0.3 }\n",
            "t",
        )
        .unwrap();
        // The table replaces the default: pedestrians fall back to track_min_score.
        assert_eq!(c.track_min_scores(), [0.5, 0.5, 0.3]);
        let e = PipelineConfig::parse("track_min_score_by_class = { truck = 0.3 }\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("truck") && e.contains("car, pedestrian, cyclist"),
            "{e}"
        );
        let e = PipelineConfig::parse("track_min_score_by_class = { car = 1.5 }\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("car = 1.5"), "{e}");
    }

    #[test]
    fn tracking_depth_noise_default_override_and_rejections() {
        let d = PipelineConfig::default();
        assert_eq!(
            (d.track_depth_noise_from_m, d.track_depth_noise_per_m),
            (20.0, 0.1)
        );
        let c = PipelineConfig::parse(
            "track_depth_noise_per_m = 0.0
",
            "t",
        )
        .unwrap();
        assert_eq!(
            (c.track_depth_noise_from_m, c.track_depth_noise_per_m),
            (20.0, 0.0)
        );
        for (text, says) in [
            (
                "track_depth_noise_per_m = -0.1\n",
                "track_depth_noise_per_m = -0.1",
            ),
            (
                "track_depth_noise_per_m = 2.0\n",
                "track_depth_noise_per_m = 2",
            ),
            (
                "track_depth_noise_from_m = -5.0\n",
                "track_depth_noise_from_m = -5",
            ),
            (
                "track_depth_noise_from_m = inf\n",
                "track_depth_noise_from_m = inf",
            ),
            ("track_shadow_from_m = -1.0\n", "track_shadow_from_m = -1"),
            ("track_shadow_deg = 50.0\n", "track_shadow_deg = 50"),
        ] {
            let e = PipelineConfig::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("e.g."), "{text}: {e}");
        }
    }

    #[test]
    fn bev_lift_heights_default_override_and_rejections() {
        let d = PipelineConfig::default();
        assert_eq!(d.bev_lift_m, None);
        // The shipped models declare theirs (crate::models' tests); the config's own
        // default is for models that declare none.
        assert_eq!(d.bev_lifts(), [0.5]);
        // Left out of the written config while unset (existing configs keep their hash).
        assert!(!toml::to_string(&d).unwrap().contains("bev_lift_m"));
        let seeded = PipelineConfig::parse("network = \"seeded\"\n", "t").unwrap();
        assert_eq!(seeded.bev_lifts(), [0.5]);
        let files =
            PipelineConfig::parse("[models]\nbackbone = { path = \"b.onnx\" }\n", "t").unwrap();
        assert_eq!(files.bev_lifts(), [0.5]);
        let set = PipelineConfig::parse("bev_lift_m = [0.0, 0.5, 1.0]\n", "t").unwrap();
        assert_eq!(set.bev_lifts(), [0.0, 0.5, 1.0]);
        assert!(toml::to_string(&set).unwrap().contains("bev_lift_m"));
        for text in [
            "bev_lift_m = []\n",
            "bev_lift_m = [0, 0, 0, 0, 0, 0, 0, 0, 0]\n",
            "bev_lift_m = [0.5, nan]\n",
        ] {
            let e = PipelineConfig::parse(text, "t").unwrap_err().to_string();
            assert!(
                e.contains("bev_lift_m") && e.contains("e.g."),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn check_rig_defaults_to_true_and_is_written_only_when_false() {
        let d = PipelineConfig::default();
        assert!(d.check_rig);
        assert!(!toml::to_string(&d).unwrap().contains("check_rig"));
        let off = PipelineConfig::parse("check_rig = false\n", "t").unwrap();
        assert!(!off.check_rig);
        assert!(toml::to_string(&off).unwrap().contains("check_rig = false"));
    }

    #[test]
    fn bev_sampling_defaults_and_parses_its_names() {
        use crate::perception::BevSampling;
        let d = PipelineConfig::default();
        assert_eq!(d.bev_sampling, None);
        assert_eq!(d.bev_sampling(), BevSampling::Nearest);
        assert!(!toml::to_string(&d).unwrap().contains("bev_sampling"));
        let seeded = PipelineConfig::parse("network = \"seeded\"\n", "t").unwrap();
        assert_eq!(seeded.bev_sampling(), BevSampling::Nearest);
        let files =
            PipelineConfig::parse("[models]\nbackbone = { path = \"b.onnx\" }\n", "t").unwrap();
        assert_eq!(files.bev_sampling(), BevSampling::Nearest);
        for s in [BevSampling::Nearest, BevSampling::RowLinear] {
            let text = format!("network = \"seeded\"\nbev_sampling = \"{}\"\n", s.name());
            let c = PipelineConfig::parse(&text, "t").unwrap();
            assert_eq!(c.bev_sampling(), s);
            assert!(toml::to_string(&c).unwrap().contains(s.name()));
        }
        let e = PipelineConfig::parse("bev_sampling = \"bilinear\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("row_linear"), "{e}");
    }

    #[test]
    fn partial_files_keep_defaults() {
        let c = PipelineConfig::parse(
            "lanes = 1\nperception = \"oracle\"\n[budgets_ms]\nbackbone = 20.0\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.lanes, 1);
        assert_eq!(c.perception, Perception::Oracle);
        assert_eq!(c.budget_ns(stage::BACKBONE), 20_000_000);
        assert_eq!(c.budget_ns(stage::PLANNING), 2_500_000);
        assert_eq!(c.frame_slots, 2);
    }

    #[test]
    fn the_models_table_names_files_and_engines() {
        let c = PipelineConfig::parse(
            "[models]\nbackbone = { path = \"bb.onnx\" }\nseg_head = { path = \"s.onnx\", engine = \"onnxruntime\" }\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            c.models.backbone.path.as_deref(),
            Some(Path::new("bb.onnx"))
        );
        assert_eq!(c.models.backbone.engine_kind().unwrap(), EngineKind::Native);
        assert_eq!(
            c.models.seg_head.engine_kind().unwrap(),
            EngineKind::OnnxRuntime
        );
        assert!(c.models.det_head.path.is_none());
        // Round trip; the default table is left out of the text (config hashes unchanged).
        let back = PipelineConfig::parse(&toml::to_string(&c).unwrap(), "rt").unwrap();
        assert_eq!(back, c);
        assert!(!toml::to_string(&PipelineConfig::default())
            .unwrap()
            .contains("models"));
        let e = PipelineConfig::parse("[models.det_head]\nengine = \"tensorflow\"\n", "f")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("models.det_head.engine") && e.contains("tensorflow"),
            "{e}"
        );
        let e = PipelineConfig::parse("[models.det_head]\nfile = \"x\"\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("file"), "{e}");
        let e = PipelineConfig::parse(
            "weights = \"w.safetensors\"\n[models.backbone]\npath = \"b.onnx\"\n",
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("models.backbone.path and weights"), "{e}");
    }

    #[test]
    fn mistakes_are_named() {
        let e = PipelineConfig::parse("lanez = 2\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lanez") && e.contains("f.toml"), "{e}");
        let e = PipelineConfig::parse("[budgets_ms]\nbackbon = 1.0\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("backbon"), "{e}");
        let e = PipelineConfig::parse("lanes = 0\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lanes = 0"), "{e}");
        let e = PipelineConfig::parse("release = \"sometimes\"\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sometimes") || e.contains("release"), "{e}");
    }
}
