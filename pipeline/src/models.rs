//! The driving network as model files: loads the backbone and the two heads (the
//! `[models]` table, or the built-in ONNX files), each with its configured engine, checks
//! them against the model contract, and reads from them the quantization the stages around
//! them need.
//!
//! # The model contract
//!
//! All tensors are `int8`, NHWC, with static shapes; quantization is per tensor and is read
//! from the graph ([`redline_models::engine::io_quant`]: the QOperator node or
//! `QuantizeLinear` producing an output, the QOperator node or `DequantizeLinear` reading
//! an input).
//!
//! | model | input | outputs |
//! |---|---|---|
//! | backbone | `[cameras, H, W, 3]`, scale 1/128, zero point 0 (`pixel / 255 · 2 − 1`, RGB) | one: `[cameras, h, w, C]` features |
//! | det_head | `[1, ny, nx, C]` BEV grid, in the backbone output's quantization | `heatmap [1, ny, nx, classes]` then `boxes [1, ny, nx, 6]`, or one `[1, ny, nx, classes + 6]` tensor |
//! | seg_head | as det_head | `[1, ny, nx, seg_classes]` logits |
//!
//! A model may also declare, in its ONNX `metadata_props`, what it was trained with that its
//! shapes cannot say: the view transform between the backbone and the heads and the camera
//! rig ([`metadata`]'s contract). Declared values are the run's ([`Models::view`]), and a
//! log from another rig is refused ([`check_rig`]).
//!
//! `cameras` is the rig's camera count, `ny × nx` the BEV grid (`BevSpec::DEFAULT`: 48 ×
//! 80 cells of 1 m), `classes` = 3 heatmap channels (car, pedestrian, cyclist: the class ids
//! of detections), the 6 box channels `dx, dy, log length, log width, sin yaw, cos yaw`
//! (the decoder's), `seg_classes` = 3 (other, drivable, lane marking). `H`, `W`, `h`, `w`
//! and `C` are the model's own. The BEV transform carries features without rescaling, so
//! the heads' input quantization must equal the backbone's output quantization.
//!
//! # Which bytes
//!
//! A model with a `path` is read from that file. Otherwise it is a built-in one:
//! - `network = "trained"` (the default, and no `weights` file): the shipped trained
//!   models, `models/trained/*.onnx` (embedded; six cameras and the default grid, else a
//!   [`ModelsError::TrainedRig`] that says what to do);
//! - `network = "seeded"` (or a `weights` file): the committed `models/builtin/*.onnx`
//!   (embedded) when the network config is the built-in seeded network's and the rig and
//!   grid match, else the same exporter's output for this config, written in memory.
//!
//! Either way the run goes through the importer.
//!
//! Construction time only (reads, compiles, allocates); errors name the model, the tensor
//! and what was expected.

use std::path::{Path, PathBuf};

use redline_models::engine::io_quant::{io_quant, IoQuant};
use redline_models::engine::{load_engine_bytes, ElemType, Engine, EngineError, TensorSpec};
use redline_models::export::onnx::{onnx_models, OnnxModels};
use redline_models::export::{builtin, trained, ExportError, ExportOptions};
use redline_models::network::NetConfig;
use redline_models::network::REG_CHANNELS;
use redline_models::onnx::metadata_props;
use redline_models::quant::QParams;

use crate::config::{ConfigError, Network, PipelineConfig};
use crate::types::BevSpec;

pub mod metadata;
pub use metadata::{
    check_rig, DeclaredRig, ViewTransform, META_BEV_LIFT_M, META_BEV_SAMPLING,
    META_CAMERA_HFOV_DEG, META_CAMERA_YAW_DEG, RIG_TOLERANCE_DEG,
};
use metadata::{declared_rig, resolve_view};

/// Why the models could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// The `[models]` table is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A model file could not be read.
    #[error("cannot read the {model} model {path} (config models.{model}.path): {source}")]
    Read {
        /// `backbone`, `det_head` or `seg_head`.
        model: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The built-in models could not be written for this network config.
    #[error("cannot write the built-in models for this network configuration")]
    Export(#[source] ExportError),
    /// The shipped trained models do not fit this rig or grid.
    #[error(
        "the shipped trained network takes {want} cameras (the default rig: six surround \
         cameras and the front telephoto, as `redline sim generate` records them) and the \
         default 48 x 80 BEV grid, but this log has {cams} cameras{grid}: set network = \
         \"seeded\" in the config (an untrained network of any shape), or give your own \
         models in the [models] table"
    )]
    TrainedRig {
        /// Cameras of the log.
        cams: usize,
        /// Cameras the trained backbone takes.
        want: usize,
        /// ", and another grid" when the grid differs.
        grid: &'static str,
    },
    /// An engine could not load a model.
    #[error("cannot load the {model} model {name} with engine {engine}")]
    Engine {
        /// `backbone`, `det_head` or `seg_head`.
        model: &'static str,
        /// The file (or `builtin:<file>`).
        name: String,
        /// The engine's name.
        engine: &'static str,
        /// Cause (boxed: it is large and start-up only).
        #[source]
        source: Box<EngineError>,
    },
    /// The config sets a key to another value than the models declare in their metadata
    /// (`bev_lift_m`, `bev_sampling`), or two models declare different values of a key.
    #[error("{reason}")]
    Metadata {
        /// Both values, where each comes from, and what to do.
        reason: String,
    },
    /// The log's cameras are not the rig the models declare they were trained on.
    #[error("{reason}")]
    Rig {
        /// The camera, both values, and what to do.
        reason: String,
    },
    /// A model does not meet the contract (module docs).
    #[error("{model} model {name}: {reason}")]
    Contract {
        /// `backbone`, `det_head` or `seg_head`.
        model: &'static str,
        /// The file (or `builtin:<file>`).
        name: String,
        /// Which tensor is wrong and what was expected.
        reason: String,
    },
}

/// What the stages around the models need to know, read from the models.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShapes {
    /// Backbone input `(H, W)` per camera.
    pub input_hw: (usize, usize),
    /// Backbone output `(h, w, C)` per camera.
    pub features: (usize, usize, usize),
    /// Quantization of the features (and so of the BEV grid).
    pub features_q: QParams,
    /// Heatmap channels.
    pub classes: usize,
    /// Quantization of the heatmap channels.
    pub heat_q: QParams,
    /// Quantization of the box channels.
    pub reg_q: QParams,
    /// The detection head writes heatmap and boxes as two outputs (else one fused one).
    pub det_split: bool,
    /// Segmentation classes.
    pub seg_classes: usize,
}

/// The three compiled models and their shapes.
#[derive(Debug)]
pub struct Models {
    /// Backbone engine.
    pub backbone: Box<dyn Engine>,
    /// Detection head engine.
    pub det_head: Box<dyn Engine>,
    /// Segmentation head engine.
    pub seg_head: Box<dyn Engine>,
    /// Shapes and quantization.
    pub shapes: ModelShapes,
    /// The view transform between the backbone and the heads.
    pub view: ViewTransform,
    /// The rig the models declare they were trained on ([`check_rig`]).
    pub rig: DeclaredRig,
}

/// Loads the models of `cfg` for `cams` cameras on the `bev` grid; `net` is the network
/// config of the built-in models (seeded or from `weights`). The view transform is the
/// models' declared one, checked against the config's (module docs); the heads must take
/// its `lifts · C` channels. See the module docs.
pub fn load_models(
    cfg: &PipelineConfig,
    net: &NetConfig,
    cams: usize,
    bev: &BevSpec,
) -> Result<Models, ModelsError> {
    let opts = ExportOptions {
        cameras: cams,
        bev_ny: bev.ny,
        bev_nx: bev.nx,
        ..builtin::options()
    };
    let mut generated: Option<OnnxModels> = None;
    let mut load = |model: &'static str, idx: usize| -> Result<Loaded, ModelsError> {
        let entry = cfg.models.entries()[idx].1;
        let kind = entry.engine_kind()?;
        let (name, bytes) = match &entry.path {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|source| ModelsError::Read {
                    model,
                    path: path.clone(),
                    source,
                })?;
                (path.display().to_string(), bytes)
            }
            None => {
                let models = match &generated {
                    Some(m) => m,
                    None => generated.insert(
                        if cfg.network == Network::Trained && cfg.weights.is_none() {
                            // The trained models were trained on this grid's view transform.
                            let grid_ok = *bev == BevSpec::DEFAULT;
                            if cams != trained::CAMERAS || !grid_ok {
                                return Err(ModelsError::TrainedRig {
                                    cams,
                                    want: trained::CAMERAS,
                                    grid: if grid_ok { "" } else { ", and another grid" },
                                });
                            }
                            trained::models()
                        } else if *net == builtin::net_config() && opts == builtin::options() {
                            builtin::models()
                        } else {
                            onnx_models(net, &opts).map_err(ModelsError::Export)?
                        },
                    ),
                };
                let (file, bytes) = models.files()[idx];
                (format!("builtin:{file}"), bytes.to_vec())
            }
        };
        let engine =
            load_engine_bytes(&bytes, &name, kind).map_err(|source| ModelsError::Engine {
                model,
                name: name.clone(),
                engine: kind.name(),
                source: Box::new(source),
            })?;
        let engine_err = |source| ModelsError::Engine {
            model,
            name: name.clone(),
            engine: kind.name(),
            source: Box::new(source),
        };
        let quant = io_quant(&bytes, &name).map_err(engine_err)?;
        let metadata = metadata_props(&bytes, Path::new(&name)).map_err(engine_err)?;
        Ok(Loaded {
            model,
            name,
            engine,
            quant,
            metadata,
        })
    };
    let backbone = load("backbone", 0)?;
    let det = load("det_head", 1)?;
    let seg = load("seg_head", 2)?;
    let view = resolve_view(cfg, [&backbone, &det, &seg])?;
    let shapes = check_contract(&backbone, &det, &seg, cams, bev, view.lifts.len(), net)?;
    let rig = declared_rig([&backbone, &det, &seg])?;
    Ok(Models {
        backbone: backbone.engine,
        det_head: det.engine,
        seg_head: seg.engine,
        shapes,
        view,
        rig,
    })
}

/// A loaded model before the contract check.
struct Loaded {
    model: &'static str,
    name: String,
    engine: Box<dyn Engine>,
    quant: IoQuant,
    /// The file's `metadata_props`.
    metadata: Vec<(String, String)>,
}

impl Loaded {
    fn err(&self, reason: String) -> ModelsError {
        ModelsError::Contract {
            model: self.model,
            name: self.name.clone(),
            reason,
        }
    }

    /// The single input, `int8` rank 4.
    fn input(&self, expected: &str) -> Result<&TensorSpec, ModelsError> {
        match self.engine.inputs() {
            [t] if t.elem == ElemType::I8 && t.shape.len() == 4 => Ok(t),
            [t] => Err(self.err(format!("input {t} must be int8 {expected}"))),
            ins => Err(self.err(format!(
                "has {} inputs; expected one, int8 {expected}",
                ins.len()
            ))),
        }
    }

    /// Output `i` must be `int8 [1, ny, nx, c]` for some `c`; returns `c`.
    fn grid_output(&self, t: &TensorSpec, bev: &BevSpec, what: &str) -> Result<usize, ModelsError> {
        match t.shape[..] {
            [1, ny, nx, c] if t.elem == ElemType::I8 && ny == bev.ny && nx == bev.nx => Ok(c),
            _ => Err(self.err(format!(
                "output {t} must be int8 [1, {}, {}, {what}] (the BEV grid, NHWC)",
                bev.ny, bev.nx
            ))),
        }
    }

    fn output_q(&self, i: usize) -> Result<QParams, ModelsError> {
        self.quant.output(i).ok_or_else(|| {
            self.err(format!(
                "cannot find the quantization of output {}: it must come from a QLinear* node \
                 or a QuantizeLinear with constant scalar scale and int8 zero point",
                self.engine.outputs()[i].name
            ))
        })
    }

    fn input_q(&self) -> Result<QParams, ModelsError> {
        self.quant.input(0).ok_or_else(|| {
            self.err(format!(
                "cannot find the quantization of input {}: its first reader must be a \
                 DequantizeLinear or QLinear* node with constant scalar scale and int8 zero point",
                self.engine.inputs()[0].name
            ))
        })
    }
}

fn check_contract(
    bb: &Loaded,
    det: &Loaded,
    seg: &Loaded,
    cams: usize,
    bev: &BevSpec,
    lifts: usize,
    net: &NetConfig,
) -> Result<ModelShapes, ModelsError> {
    // Backbone: [cams, H, W, 3] in → [cams, h, w, C] out.
    let t = bb.input(&format!("[{cams}, H, W, 3] (cameras, NHWC)"))?;
    let (in_h, in_w) = match t.shape[..] {
        [n, h, w, 3] if n == cams && h > 0 && w > 0 => (h, w),
        _ => {
            return Err(bb.err(format!(
                "input {t} must be int8 [{cams}, H, W, 3] (one image per camera of the rig, \
                 NHWC; a batch axis exported as dynamic runs as 1: export the backbone with a \
                 static batch of {cams})"
            )))
        }
    };
    let want_in = QParams::new(1.0 / 128.0, 0);
    let in_q = bb.input_q()?;
    if in_q != want_in {
        return Err(bb.err(format!(
            "input {} is quantized with scale {} zero point {}; preprocessing writes scale \
             1/128 zero point 0 (pixel / 255 * 2 - 1)",
            t.name, in_q.scale, in_q.zero_point
        )));
    }
    let features = match bb.engine.outputs() {
        [o] => match o.shape[..] {
            [n, h, w, c] if o.elem == ElemType::I8 && n == cams && h * w * c > 0 => (h, w, c),
            _ => {
                return Err(bb.err(format!(
                    "output {o} must be int8 [{cams}, h, w, C] (features per camera, NHWC)"
                )))
            }
        },
        outs => {
            return Err(bb.err(format!(
                "has {} outputs; expected one, int8 [{cams}, h, w, C]",
                outs.len()
            )))
        }
    };
    let features_q = bb.output_q(0)?;
    let c = features.2;

    // Heads: [1, ny, nx, lifts · C] in the features' quantization.
    let bev_c = lifts * c;
    for head in [det, seg] {
        let want = format!(
            "[1, {}, {}, {bev_c}] (the BEV grid, NHWC: {lifts} lift height(s) x {c} feature \
             channels)",
            bev.ny, bev.nx
        );
        let t = head.input(&want)?;
        if t.shape[..] != [1, bev.ny, bev.nx, bev_c] {
            let hint = match t.shape[..] {
                [1, ny, nx, got] if (ny, nx) == (bev.ny, bev.nx) && got % c == 0 => {
                    let n = got / c;
                    format!(
                        "; it takes {n} lift height(s): set bev_lift_m to the {n} heights the \
                         model was trained with"
                    )
                }
                _ => String::new(),
            };
            return Err(head.err(format!("input {t} must be int8 {want}{hint}")));
        }
        let q = head.input_q()?;
        if q != features_q {
            return Err(head.err(format!(
                "input {} is quantized with scale {} zero point {}, but the backbone's features \
                 (and so the BEV grid) use scale {} zero point {}",
                t.name, q.scale, q.zero_point, features_q.scale, features_q.zero_point
            )));
        }
    }
    let classes = net.classes;
    let (heat_q, reg_q, det_split) = match det.engine.outputs() {
        [h, b] => {
            if det.grid_output(h, bev, &classes.to_string())? != classes {
                return Err(det.err(format!(
                    "output {h} must have {classes} heatmap channels (one per class)"
                )));
            }
            if det.grid_output(b, bev, &REG_CHANNELS.to_string())? != REG_CHANNELS {
                return Err(det.err(format!(
                    "output {b} must have {REG_CHANNELS} box channels (dx, dy, log l, log w, sin, cos)"
                )));
            }
            (det.output_q(0)?, det.output_q(1)?, true)
        }
        [f] => {
            let want = classes + REG_CHANNELS;
            if det.grid_output(f, bev, &want.to_string())? != want {
                return Err(det.err(format!(
                    "output {f} must have {classes} heatmap + {REG_CHANNELS} box channels"
                )));
            }
            let q = det.output_q(0)?;
            (q, q, false)
        }
        outs => {
            return Err(det.err(format!(
                "has {} outputs; expected heatmap [1, ny, nx, {classes}] and boxes [1, ny, nx, \
                 {REG_CHANNELS}], or one [1, ny, nx, {}]",
                outs.len(),
                classes + REG_CHANNELS
            )))
        }
    };
    let seg_classes = net.seg_classes;
    match seg.engine.outputs() {
        [o] => {
            if seg.grid_output(o, bev, &seg_classes.to_string())? != seg_classes {
                return Err(seg.err(format!("output {o} must have {seg_classes} class logits")));
            }
        }
        outs => {
            return Err(seg.err(format!(
                "has {} outputs; expected one, logits [1, ny, nx, {seg_classes}]",
                outs.len()
            )))
        }
    }
    Ok(ModelShapes {
        input_hw: (in_h, in_w),
        features,
        features_q,
        classes,
        heat_q,
        reg_q,
        det_split,
        seg_classes,
    })
}

#[cfg(test)]
mod tests {
    use super::metadata::parse_lifts;
    use super::*;
    use crate::config::ModelRef;
    use crate::perception::BevSampling;

    /// `bytes` in a temporary file named `redline-models-XXXXXX-{name}`, removed when the
    /// returned path is dropped.
    fn write(name: &str, bytes: &[u8]) -> tempfile::TempPath {
        let mut f = tempfile::Builder::new()
            .prefix("redline-models-")
            .suffix(&format!("-{name}"))
            .tempfile()
            .expect("temp file");
        std::io::Write::write_all(&mut f, bytes).expect("write");
        f.into_temp_path()
    }

    /// `load_models` for `cfg` on `cams` cameras and the default grid.
    fn load_for(cfg: &PipelineConfig, cams: usize) -> Result<Models, ModelsError> {
        load_models(cfg, &cfg.net_config(), cams, &BevSpec::DEFAULT)
    }

    /// `bytes` (an ONNX model) with the metadata `props` set (replacing those keys).
    fn with_metadata(bytes: &[u8], props: &[(&str, &str)]) -> Vec<u8> {
        use protobuf::Message;
        use redline_models::onnx::proto::onnx as pb;
        let mut m = pb::ModelProto::parse_from_bytes(bytes).expect("an ONNX model");
        m.metadata_props
            .retain(|p| !props.iter().any(|(k, _)| p.key() == *k));
        for (k, v) in props {
            let mut e = pb::StringStringEntryProto::new();
            e.set_key(k.to_string());
            e.set_value(v.to_string());
            m.metadata_props.push(e);
        }
        m.write_to_bytes().expect("encodes")
    }

    /// A seeded-network config whose three models are the built-in files with `props`
    /// (one slice per model: backbone, det_head, seg_head) in their metadata.
    fn seeded_files(
        tag: &str,
        props: [&[(&str, &str)]; 3],
    ) -> (PipelineConfig, Vec<tempfile::TempPath>) {
        let mut cfg = PipelineConfig {
            network: Network::Seeded,
            ..PipelineConfig::default()
        };
        let files = [builtin::BACKBONE, builtin::DET_HEAD, builtin::SEG_HEAD];
        let refs = [
            &mut cfg.models.backbone,
            &mut cfg.models.det_head,
            &mut cfg.models.seg_head,
        ];
        let mut written = Vec::new();
        for (i, (r, bytes)) in refs.into_iter().zip(files).enumerate() {
            let name = format!("{tag}-{i}.onnx");
            let file = write(&name, &with_metadata(bytes, props[i]));
            r.path = Some(file.to_path_buf());
            written.push(file);
        }
        (cfg, written)
    }

    #[test]
    fn the_shipped_models_declare_the_view_transform_they_were_trained_with() {
        let want_lifts = trained::LIFTS_M
            .iter()
            .map(|h| format!("{h:?}"))
            .collect::<Vec<_>>()
            .join(",");
        let want_sampling = if trained::ROW_LINEAR {
            BevSampling::RowLinear
        } else {
            BevSampling::Nearest
        };
        for (file, bytes) in trained::models().files() {
            let props = metadata_props(bytes, Path::new(file)).expect("parses");
            let get = |k: &str| props.iter().find(|(key, _)| key == k).map(|(_, v)| v);
            let lifts = get(META_BEV_LIFT_M).unwrap_or_else(|| panic!("{file}: no lifts"));
            assert_eq!(
                parse_lifts(lifts),
                parse_lifts(&want_lifts),
                "{file}: {lifts}"
            );
            let sampling = get(META_BEV_SAMPLING).unwrap_or_else(|| panic!("{file}: no sampling"));
            assert_eq!(
                BevSampling::from_name(sampling),
                Some(want_sampling),
                "{file}"
            );
        }
        let m = load_for(&PipelineConfig::default(), trained::CAMERAS).expect("loads");
        assert_eq!(m.view.lifts, trained::LIFTS_M);
        assert_eq!(m.view.sampling, want_sampling);
        // A config that names the models' own values runs; another value is refused with
        // both values and what to do.
        let same = PipelineConfig {
            bev_lift_m: Some(trained::LIFTS_M.to_vec()),
            bev_sampling: Some(want_sampling),
            ..PipelineConfig::default()
        };
        assert_eq!(
            load_for(&same, trained::CAMERAS).expect("loads").view,
            m.view
        );
        let other = BevSampling::ALL
            .into_iter()
            .find(|&s| s != want_sampling)
            .unwrap();
        let cfg = PipelineConfig {
            bev_sampling: Some(other),
            ..PipelineConfig::default()
        };
        let msg = load_for(&cfg, trained::CAMERAS).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("bev_sampling = \"{}\"", other.name()))
                && msg.contains(want_sampling.name())
                && msg.contains("remove bev_sampling"),
            "{msg}"
        );
        let cfg = PipelineConfig {
            bev_lift_m: Some(vec![1.0]),
            ..PipelineConfig::default()
        };
        let msg = load_for(&cfg, trained::CAMERAS).unwrap_err().to_string();
        assert!(
            msg.contains("bev_lift_m = [1.0]") && msg.contains("remove bev_lift_m"),
            "{msg}"
        );
    }

    #[test]
    fn the_shipped_models_declare_the_default_rig() {
        let m = load_for(&PipelineConfig::default(), trained::CAMERAS).expect("loads");
        let hfov = m.rig.hfov_deg.expect("declares the fields of view");
        let yaw = m.rig.yaw_deg.expect("declares the headings");
        assert_eq!(
            (hfov.len(), yaw.len()),
            (trained::CAMERAS, trained::CAMERAS)
        );
        // A bad declaration names the model and the key.
        let bad: &[(&str, &str)] = &[(META_CAMERA_HFOV_DEG, "40,eighty")];
        let msg = load_for(&seeded_files("rig", [bad, &[], &[]]).0, trained::CAMERAS)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("backbone model") && msg.contains(META_CAMERA_HFOV_DEG),
            "{msg}"
        );
    }

    #[test]
    fn declared_view_transforms_win_over_defaults_and_must_be_valid_and_agree() {
        let row: &[(&str, &str)] = &[
            (META_BEV_SAMPLING, "row_linear"),
            (META_BEV_LIFT_M, " 0.5 "),
        ];
        // Declared by the files, not set in the config: the files' (the seeded network's
        // default would be nearest).
        let (cfg, _files) = seeded_files("declared", [row, row, row]);
        let m = load_for(&cfg, trained::CAMERAS).expect("loads");
        assert_eq!(m.view.lifts, [0.5]);
        assert_eq!(m.view.sampling, BevSampling::RowLinear);
        // Declared by one model only: still the run's.
        let (cfg, _files) = seeded_files("one", [&[], row, &[]]);
        assert_eq!(
            load_for(&cfg, trained::CAMERAS).expect("loads").view,
            m.view
        );
        // Nothing declared: the config's defaults.
        let (cfg, _files) = seeded_files("none", [&[], &[], &[]]);
        let v = load_for(&cfg, trained::CAMERAS).expect("loads").view;
        assert_eq!((v.lifts, v.sampling), (vec![0.5], BevSampling::Nearest));
        // Two models that disagree.
        let near: &[(&str, &str)] = &[(META_BEV_SAMPLING, "nearest")];
        let msg = load_for(&seeded_files("split", [row, near, row]).0, trained::CAMERAS)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("backbone model")
                && msg.contains("det_head model")
                && msg.contains("one training run"),
            "{msg}"
        );
        // Values that do not parse name the model, the key and what is expected.
        for (key, bad) in [
            (META_BEV_SAMPLING, "bilinear"),
            (META_BEV_LIFT_M, "0.5,x"),
            (META_BEV_LIFT_M, ""),
            (META_BEV_LIFT_M, "0,0,0,0,0,0,0,0,0"),
            (META_BEV_LIFT_M, "nan"),
        ] {
            let props: &[(&str, &str)] = &[(key, bad)];
            let msg = load_for(&seeded_files("bad", [&[], &[], props]).0, trained::CAMERAS)
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("seg_head model") && msg.contains(key) && msg.contains("must be"),
                "{msg}"
            );
        }
        // Declared heights the heads do not take: the channel check says how many they do.
        let two: &[(&str, &str)] = &[(META_BEV_LIFT_M, "0.5,0")];
        let msg = load_for(&seeded_files("two", [two, two, two]).0, trained::CAMERAS)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("it takes 1 lift height(s)"), "{msg}");
    }

    #[test]
    fn the_default_config_runs_the_shipped_trained_models() {
        let cfg = PipelineConfig::default();
        assert_eq!(cfg.network, Network::Trained);
        let m = load_for(&cfg, trained::CAMERAS).expect("trained models load");
        assert_eq!(m.backbone.inputs()[0].shape[0], trained::CAMERAS);
        assert!(m.shapes.det_split);
        assert_eq!((m.shapes.classes, m.shapes.seg_classes), (3, 3));
        // Another rig: the trained backbone takes seven cameras; the error says what to do.
        let msg = load_for(&cfg, 2).unwrap_err().to_string();
        assert!(
            msg.contains("takes 7 cameras") && msg.contains("network = \"seeded\""),
            "{msg}"
        );
    }

    #[test]
    fn heads_that_take_another_number_of_lift_heights_are_refused_with_the_count() {
        // The seeded network's heads take one height's channels.
        let cfg = PipelineConfig {
            network: Network::Seeded,
            bev_lift_m: Some(vec![0.5, 0.0]),
            ..PipelineConfig::default()
        };
        let msg = load_for(&cfg, 6).unwrap_err().to_string();
        assert!(
            msg.contains("it takes 1 lift height(s)") && msg.contains("bev_lift_m"),
            "{msg}"
        );
    }

    #[test]
    fn the_seeded_network_runs_the_committed_builtin_files() {
        let cfg = PipelineConfig {
            network: Network::Seeded,
            ..PipelineConfig::default()
        };
        assert!(
            cfg.net_config() == builtin::net_config(),
            "the built-in files must hold the default network"
        );
        let bev = BevSpec::DEFAULT;
        assert_eq!(
            (bev.ny, bev.nx),
            (builtin::options().bev_ny, builtin::options().bev_nx)
        );
        let m = load_for(&cfg, 6).expect("built-in models load");
        assert_eq!(m.shapes.input_hw, (128, 256));
        assert_eq!(m.shapes.features, (16, 32, 128));
        assert!(m.shapes.det_split);
        // Another rig size: the same exporter's bytes, written in memory.
        let m = load_for(&cfg, 2).expect("generated models load");
        assert_eq!(m.backbone.inputs()[0].shape, [2, 128, 256, 3]);
    }

    #[test]
    fn a_model_that_breaks_the_contract_is_named_with_the_shape_expected() {
        let mut cfg = PipelineConfig {
            network: Network::Seeded,
            ..PipelineConfig::default()
        };
        // A detection head where the backbone belongs.
        let file = write("det-as-backbone.onnx", builtin::DET_HEAD);
        cfg.models.backbone = ModelRef {
            path: Some(file.to_path_buf()),
            ..ModelRef::default()
        };
        let e = load_for(&cfg, trained::CAMERAS).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("backbone model") && msg.contains("[7, H, W, 3]") && msg.contains("input"),
            "{msg}"
        );
        // Heads swapped: the segmentation head has one output of 3 channels.
        let mut cfg = PipelineConfig {
            network: Network::Seeded,
            ..PipelineConfig::default()
        };
        let file = write("seg-as-det.onnx", builtin::SEG_HEAD);
        cfg.models.det_head.path = Some(file.to_path_buf());
        let msg = load_for(&cfg, trained::CAMERAS).unwrap_err().to_string();
        assert!(
            msg.contains("det_head model") && msg.contains("heatmap + 6 box channels"),
            "{msg}"
        );
        // Built-in heads after another network's backbone: quantization / channels differ.
        let mut cfg = PipelineConfig {
            network: Network::Seeded,
            ..PipelineConfig::default()
        };
        let other = onnx_models(
            &NetConfig {
                feat_c: 64,
                bev_c: 64,
                ..builtin::net_config()
            },
            &builtin::options(),
        )
        .expect("write");
        let file = write("bb64.onnx", &other.backbone);
        cfg.models.backbone.path = Some(file.to_path_buf());
        let msg = load_for(&cfg, trained::CAMERAS).unwrap_err().to_string();
        assert!(
            msg.contains("det_head model") && msg.contains("[1, 48, 80, 64]"),
            "{msg}"
        );
        // A missing file names the config key.
        let mut cfg = PipelineConfig {
            network: Network::Seeded,
            ..PipelineConfig::default()
        };
        cfg.models.seg_head.path = Some(PathBuf::from("/nonexistent/seg.onnx"));
        let msg = load_for(&cfg, trained::CAMERAS).unwrap_err().to_string();
        assert!(msg.contains("models.seg_head.path"), "{msg}");
    }

    #[test]
    fn gpu_engines_are_accepted_by_name_and_fail_clearly_without_a_gpu() {
        for engine in ["cuda", "tensorrt"] {
            let text = format!("[models.det_head]\nengine = \"{engine}\"\n");
            let cfg = PipelineConfig::parse(&text, "t").expect("the config accepts the engine");
            match load_for(&cfg, trained::CAMERAS) {
                Ok(_) => {
                    eprintln!("{engine}: a GPU is present here; the error path is not reached")
                }
                Err(e) => {
                    let chain = format!(
                        "{e}: {}",
                        std::error::Error::source(&e)
                            .map(|s| s.to_string())
                            .unwrap_or_default()
                    );
                    let clear = [
                        "--features",
                        "driver",
                        "TensorRT",
                        "NVRTC",
                        "ORT_DYLIB_PATH",
                    ]
                    .iter()
                    .any(|w| chain.contains(w));
                    assert!(clear, "{engine}: unclear error: {chain}");
                    assert!(
                        chain.contains("det_head"),
                        "{engine}: the model is not named: {chain}"
                    );
                }
            }
        }
    }

    #[test]
    fn onnxruntime_is_accepted_by_name_and_runs_the_builtin_head() {
        let cfg = PipelineConfig::parse("[models.det_head]\nengine = \"onnxruntime\"\n", "t")
            .expect("the config accepts the engine");
        match load_for(&cfg, trained::CAMERAS) {
            Ok(m) => assert_eq!(
                m.det_head.kind(),
                redline_models::engine::EngineKind::OnnxRuntime
            ),
            Err(e) => {
                let chain = format!(
                    "{e}: {}",
                    std::error::Error::source(&e)
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                );
                assert!(chain.contains("ORT_DYLIB_PATH"), "{chain}");
                eprintln!("SKIPPED: ONNX Runtime is not available: {chain}");
            }
        }
    }
}
