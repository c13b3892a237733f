//! Assembles the driving graph from a config and a frame source:
//!
//! ```text
//! sensors → preprocess → backbone → bev ─┬─> detection_head → decode ─┐
//!                                        └─> segmentation_head ───────┼─> planning
//!          (oracle: ground truth → detections, in place of decode)     │
//!                       decode → tracking → prediction ────────────────┘
//! ```
//!
//! The two heads fan out from the BEV features onto different lanes; planning fans in the
//! predictions, the segmentation, the ego pose and the map. Published: ego, detections,
//! tracks, predictions, trajectory, plan summary.

use std::path::PathBuf;
use std::sync::Arc;

use redline_models::network::{NetConfig, REG_CHANNELS};
use redline_models::weights::{QuantizedNetwork, WeightsError};
use redline_runtime::{Criticality, GraphBuilder};

use crate::camera::{project_ego, CameraSpec};
use crate::config::{stage, Perception, PipelineConfig};
use crate::models::{check_rig, load_models, ModelsError, ViewTransform};
use crate::perception::{BevProjector, Decoder, PerceptionError, TemporalCache};
use crate::sensors::{FrameSource, MAX_GT};
use crate::slowdown::{add_stage, StageHook};
use crate::stages::*;
use crate::types::{
    BevSpec, Detection, EgoPose, GtBox, PlanSummary, PredictedPath, RoadMap, TrackState, TrajPoint,
    MAX_DETECTIONS, MAX_TRACKS, PLAN_STEPS,
};

/// NMS IoU threshold.
pub const NMS_IOU: f32 = 0.3;

/// Why the driving graph could not be built: which stage failed, wrapping the cause (read
/// the whole chain, e.g. `{:#}` with anyhow, for the reason).
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// The calibrated weights file (config `weights`) could not be loaded.
    #[error(
        "cannot load the calibrated weights {path} (config `weights`); write them with \
         `redline quantize` or remove the setting to use seeded weights"
    )]
    Weights {
        /// The file.
        path: PathBuf,
        /// Cause (boxed: it is large and start-up only).
        #[source]
        source: Box<WeightsError>,
    },
    /// The models (backbone, heads) could not be loaded or do not meet the model contract.
    #[error("cannot load the perception models (config [models], or the built-in network)")]
    Models {
        /// Cause (boxed: it is large and start-up only).
        #[source]
        source: Box<ModelsError>,
    },
    /// A stage's perception kernel rejected the camera rig, image or grid sizes.
    #[error("cannot build the {stage} stage for this camera rig and network")]
    Perception {
        /// The stage (a [`stage`] name).
        stage: &'static str,
        /// Cause.
        #[source]
        source: PerceptionError,
    },
}

impl GraphError {
    fn perception(stage: &'static str) -> impl FnOnce(PerceptionError) -> Self {
        move |source| GraphError::Perception { stage, source }
    }
}

/// What the graph was built with, for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GraphInfo {
    /// Cameras.
    pub cameras: usize,
    /// Camera image size.
    pub image: (usize, usize),
    /// Network input size (w, h).
    pub net_input: (usize, usize),
    /// Backbone multiply-accumulates per frame (all cameras).
    pub backbone_macs: u64,
    /// BEV cells seen by some camera.
    pub bev_coverage: f32,
    /// The view transform's lift heights and sampling (the models' declared ones, or the
    /// config's: [`crate::models::Models::view`]).
    pub view_transform: ViewTransform,
    /// How the log's cameras differ from the rig the models declare, when the config's
    /// `check_rig = false` let them run anyway.
    pub rig_mismatch: Option<String>,
    /// Per-camera JPEG decode times, when the graph decodes JPEG (`jpeg_decode` stage).
    #[serde(skip)]
    pub jpeg_times: Option<Arc<JpegDecodeTimes>>,
}

/// The BEV view transform the driving graph runs with the models' `view` (their lift
/// heights and sampling, [`crate::models::Models::view`]) over the cameras `rig` (`image` =
/// (width, height) px) and a backbone whose features are `features` = (rows, columns,
/// channels), into the grid `bev` (the graph's is [`BevSpec::DEFAULT`]). Start-up only
/// (allocates).
pub fn view_transform(
    view: &ViewTransform,
    bev: &BevSpec,
    rig: &[CameraSpec],
    image: (usize, usize),
    features: (usize, usize, usize),
) -> Result<BevProjector, PerceptionError> {
    let (fh, fw, fc) = features;
    let project = |c: usize, x: f64, y: f64, z: f64| -> Option<(f64, f64)> {
        project_ego(&rig[c], x, y, z).map(|(u, v, _)| (u, v))
    };
    BevProjector::with_sampling(
        bev,
        rig.len(),
        image.0,
        image.1,
        fw,
        fh,
        fc,
        &view.lifts,
        view.sampling,
        &project,
    )
}

/// The names of the stages [`build`] adds for `perception`, in the order it adds them.
pub fn stage_names(perception: Perception) -> [&'static str; 10] {
    let detections = match perception {
        Perception::Network => stage::DECODE,
        Perception::Oracle => stage::ORACLE,
    };
    [
        stage::SENSORS,
        stage::PREPROCESS,
        stage::BACKBONE,
        stage::BEV,
        stage::DETECTION,
        stage::SEGMENTATION,
        detections,
        stage::TRACKING,
        stage::PREDICTION,
        stage::PLANNING,
    ]
}

/// Builds the graph (allocates the models and tables: start-up only).
pub fn build(
    cfg: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
) -> Result<(GraphBuilder, GraphInfo), GraphError> {
    build_with(cfg, feed, None)
}

/// [`build`], with the stages `hook` names wrapped by it (fault injection); stages it does
/// not name are added exactly as [`build`] adds them.
pub fn build_with(
    cfg: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
    hook: Option<&dyn StageHook>,
) -> Result<(GraphBuilder, GraphInfo), GraphError> {
    let cams = feed.cameras().len();
    let (w, h) = feed.image_size();
    let bev = BevSpec::DEFAULT;
    let net = match &cfg.weights {
        // Calibrated weights: the file fixes the network's shapes and scales.
        Some(path) => QuantizedNetwork::load(path)
            .map_err(|source| GraphError::Weights {
                path: path.clone(),
                source: Box::new(source),
            })?
            .net_config(),
        None => cfg.net_config(),
    };
    // The backbone and the heads are model files (the `[models]` table, or the built-in
    // ONNX files for `net`), each compiled by its engine; shapes and quantization are the
    // models'.
    let models_err = |source| GraphError::Models {
        source: Box::new(source),
    };
    let models = load_models(cfg, &net, cams, &bev).map_err(models_err)?;
    // A network runs only on the rig it declares it was trained on, unless the config
    // asks to run it anyway (then the report says how the rigs differ).
    let rig_mismatch = match check_rig(&models.rig, feed.cameras()) {
        Ok(()) => None,
        Err(e) if !cfg.check_rig => Some(e.to_string()),
        Err(e) => return Err(models_err(e)),
    };
    let shapes = models.shapes.clone();
    let (fh, fw, fc) = shapes.features;
    // The BEV grid: the features sampled at each lift height, concatenated per cell.
    let bev_c = fc * models.view.lifts.len();
    let feat_q = shapes.features_q;
    let backbone_macs = models.backbone.macs();
    let net = NetConfig {
        in_h: shapes.input_hw.0,
        in_w: shapes.input_hw.1,
        feat_c: fc,
        bev_c,
        ..net
    };
    let proj = view_transform(&models.view, &bev, feed.cameras(), (w, h), (fh, fw, fc))
        .map_err(GraphError::perception(stage::BEV))?;
    let coverage = proj.coverage();
    let view = models.view.clone();
    let cache = TemporalCache::new(&bev, bev_c, cfg.bev_cache_frames)
        .map_err(GraphError::perception(stage::BEV))?;
    let (heat_q, reg_q) = (shapes.heat_q, shapes.reg_q);
    let det_c = shapes.classes + REG_CHANNELS;
    let cells = bev.nx * bev.ny;
    let budget = |name: &str| cfg.budget_ns(name);

    let mut g = GraphBuilder::new();
    // A source that passes JPEG on: `sensors` copies the streams, `jpeg_decode` makes the
    // images (decoding is then part of the measured frame).
    let jpeg_cap = feed.jpeg_capacity();
    let (first, first_len, second) = if jpeg_cap > 0 {
        (buf::JPEG, cams * jpeg_cap, buf::JPEG_LEN)
    } else {
        (buf::IMAGES, cams * w * h * 3, buf::PRESENT)
    };
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::SENSORS,
        SensorsStage::new(feed.clone()),
    )
    .writes::<u8>(first, first_len)
    .writes::<u32>(second, cams)
    .writes::<EgoPose>(buf::EGO, 1)
    .writes::<GtBox>(buf::GT, MAX_GT)
    .writes::<RoadMap>(buf::MAP, 1)
    .budget_ns(budget(stage::SENSORS))
    .criticality(Criticality::Critical);
    let jpeg_times = (jpeg_cap > 0).then(|| {
        let names = feed.cameras().iter().map(|c| c.name.clone()).collect();
        Arc::new(JpegDecodeTimes::new(names))
    });
    if let Some(times) = &jpeg_times {
        add_stage(
            &mut g,
            cfg,
            hook,
            stage::JPEG_DECODE,
            JpegDecodeStage::new(cams, w, h, jpeg_cap, times.clone()),
        )
        .reads::<u8>(buf::JPEG, cams * jpeg_cap)
        .reads::<u32>(buf::JPEG_LEN, cams)
        .writes::<u8>(buf::IMAGES, cams * w * h * 3)
        .writes::<u32>(buf::PRESENT, cams)
        .budget_ns(budget(stage::JPEG_DECODE))
        .criticality(Criticality::Critical);
    }
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::PREPROCESS,
        PreprocessStage::new(feed.cameras(), w, h, &net)
            .map_err(GraphError::perception(stage::PREPROCESS))?,
    )
    .reads::<u8>(buf::IMAGES, cams * w * h * 3)
    .writes::<i8>(buf::NET_INPUT, cams * net.in_w * net.in_h * 3)
    .budget_ns(budget(stage::PREPROCESS));
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::BACKBONE,
        BackboneStage::new(models.backbone),
    )
    .reads::<i8>(buf::NET_INPUT, cams * net.in_w * net.in_h * 3)
    .writes::<i8>(buf::FEATURES, cams * fh * fw * fc)
    .budget_ns(budget(stage::BACKBONE));
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::BEV,
        BevStage::new(proj, cache, cells * bev_c, feat_q.zero_point),
    )
    .reads::<i8>(buf::FEATURES, cams * fh * fw * fc)
    .reads::<EgoPose>(buf::EGO, 1)
    .writes::<i8>(buf::BEV, cells * bev_c)
    .budget_ns(budget(stage::BEV));
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::DETECTION,
        DetectionStage::new(models.det_head, shapes.classes, shapes.det_split),
    )
    .reads::<i8>(buf::BEV, cells * bev_c)
    .writes::<i8>(buf::DET_HEAD, cells * det_c)
    .budget_ns(budget(stage::DETECTION));
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::SEGMENTATION,
        SegmentationStage::new(models.seg_head, cells, shapes.seg_classes),
    )
    .reads::<i8>(buf::BEV, cells * bev_c)
    .writes::<u8>(buf::SEG, cells)
    .budget_ns(budget(stage::SEGMENTATION))
    .criticality(Criticality::BestEffort);
    match cfg.perception {
        Perception::Network => {
            let decoder = Decoder::new(&bev, shapes.classes, cfg.detection_threshold, NMS_IOU);
            add_stage(
                &mut g,
                cfg,
                hook,
                stage::DECODE,
                DecodeStage::new(decoder, heat_q, reg_q),
            )
            .reads::<i8>(buf::DET_HEAD, cells * det_c)
            .writes::<Detection>(buf::DETECTIONS, MAX_DETECTIONS)
            .budget_ns(budget(stage::DECODE));
        }
        Perception::Oracle => {
            add_stage(&mut g, cfg, hook, stage::ORACLE, OracleStage)
                .reads::<GtBox>(buf::GT, MAX_GT)
                .reads::<EgoPose>(buf::EGO, 1)
                .writes::<Detection>(buf::DETECTIONS, MAX_DETECTIONS)
                .budget_ns(budget(stage::ORACLE));
        }
    }
    add_stage(
        &mut g,
        cfg,
        hook,
        stage::TRACKING,
        TrackingStage::with_params(crate::tracking::TrackerParams {
            min_score: cfg.track_min_scores(),
            depth_noise_from_m: cfg.track_depth_noise_from_m,
            // The oracle's detections are the ground truth: exact at every range.
            depth_noise_per_m: match cfg.perception {
                Perception::Network => cfg.track_depth_noise_per_m,
                Perception::Oracle => 0.0,
            },
            shadow_from_m: cfg.track_shadow_from_m,
            // Two ground-truth objects on one ray are two objects.
            shadow_deg: match cfg.perception {
                Perception::Network => cfg.track_shadow_deg,
                Perception::Oracle => 0.0,
            },
            ..Default::default()
        }),
    )
    .reads::<Detection>(buf::DETECTIONS, MAX_DETECTIONS)
    .reads::<EgoPose>(buf::EGO, 1)
    .writes::<TrackState>(buf::TRACKS, MAX_TRACKS)
    .budget_ns(budget(stage::TRACKING));
    add_stage(&mut g, cfg, hook, stage::PREDICTION, PredictionStage::new())
        .reads::<TrackState>(buf::TRACKS, MAX_TRACKS)
        .reads::<RoadMap>(buf::MAP, 1)
        .writes::<PredictedPath>(buf::PREDICTIONS, MAX_TRACKS)
        .budget_ns(budget(stage::PREDICTION));
    add_stage(&mut g, cfg, hook, stage::PLANNING, PlanningStage::new())
        .reads::<PredictedPath>(buf::PREDICTIONS, MAX_TRACKS)
        .reads::<EgoPose>(buf::EGO, 1)
        .reads::<RoadMap>(buf::MAP, 1)
        .reads::<u8>(buf::SEG, cells)
        .writes::<TrajPoint>(buf::TRAJECTORY, PLAN_STEPS)
        .writes::<PlanSummary>(buf::PLAN, 1)
        .budget_ns(budget(stage::PLANNING))
        .criticality(Criticality::Critical);
    for b in [
        buf::EGO,
        buf::DETECTIONS,
        buf::TRACKS,
        buf::PREDICTIONS,
        buf::TRAJECTORY,
        buf::PLAN,
        // Last, so the indices above stay; published for evaluation (the replay's output
        // hash leaves it out: see `run::RecordingPublisher`).
        buf::SEG,
    ] {
        g.publish(b);
    }
    let info = GraphInfo {
        cameras: cams,
        image: (w, h),
        net_input: (net.in_w, net.in_h),
        backbone_macs,
        bev_coverage: coverage,
        view_transform: view,
        rig_mismatch,
        jpeg_times,
    };
    Ok((g, info))
}
