//! Calibrated INT8 weights on disk: the quantized network (and its float reference) as one
//! safetensors file that `redline quantize` writes and the pipeline loads.
//!
//! # Contract
//!
//! - **Tensors**, for each quantized layer `L` in [`LAYER_NAMES`] (`backbone.0`, ...,
//!   `seg.logits`): `L.weight` (`I8`, `[out_c, k, k, in_c]`, symmetric per output channel),
//!   `L.weight_scale` (`F32`, `[out_c]`), `L.bias` (`I32`, `[out_c]`, scale `in_scale *
//!   weight_scale`) and `L.qparams` (`F32`, `[4]`: input scale, input zero point, output
//!   scale, output zero point). For each float layer `F` in [`FLOAT_LAYER_NAMES`]:
//!   `float.F.weight` and `float.F.bias` (`F32`), the reference the INT8 layers were
//!   quantized from. Values are little-endian and stored bit for bit.
//! - **Metadata**: one key, `redline`, whose value is a JSON object: `format`
//!   (`"redline-int8"`), `format_version` ([`FORMAT_VERSION`]), `net_config` (the shape
//!   fields of [`NetConfig`] and its seed), `calibration` (a [`CalibrationMethod`] label)
//!   and `frames` (calibration frames used). One key keeps the file bytes deterministic.
//! - **Loading** ([`QuantizedNetwork::load`], [`QuantizedNetwork::from_bytes`]) checks, in
//!   this order: that the bytes are safetensors, that the metadata says `redline-int8`, the
//!   version, the config, then every tensor's presence, dtype and shape against the shapes
//!   the config implies, then the layers themselves ([`crate::conv::Conv2d::new`] and the
//!   chaining checks of [`Backbone::from_layers`] / [`crate::network::Head::from_layers`]).
//!   Each failure is a [`WeightsError`] naming the file and the problem; nothing panics.
//! - **Round trip**: save → load gives layers with bit-identical weights, scales, biases and
//!   quantization parameters, so bit-identical outputs.
//!
//! # Cost
//!
//! Start-up only: saving and loading allocate and copy the whole model (tens of KiB for
//! the default network). Never per frame.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use crate::calibrate::CalibrationMethod;
use crate::conv::{Conv2d, ConvShape, ModelError};
use crate::network::{
    ActQParams, Backbone, DetHead, FloatConv, FloatHead, FloatNetwork, NetConfig, SegHead,
    TrainedLayers, DET_HIDDEN, REG_CHANNELS, SEG_HIDDEN,
};
use crate::quant::QParams;

/// The `format` the metadata must name.
pub const FORMAT: &str = "redline-int8";
/// The file layout version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Quantized layers, in network order.
pub const LAYER_NAMES: [&str; 8] = [
    "backbone.0",
    "backbone.1",
    "backbone.2",
    "det.hidden",
    "det.heat",
    "det.reg",
    "seg.hidden",
    "seg.logits",
];
/// Float reference layers, in network order.
pub const FLOAT_LAYER_NAMES: [&str; 7] = [
    "backbone.0",
    "backbone.1",
    "backbone.2",
    "det.hidden",
    "det.out",
    "seg.hidden",
    "seg.out",
];
const META_KEY: &str = "redline";

/// Why a weights file could not be written or used.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// Reading or writing the file failed.
    #[error("cannot {action} weights file {path}: {source}")]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The bytes are not a safetensors file.
    #[error(
        "{origin} is not a safetensors file ({reason}): give the .safetensors file written \
         by `redline quantize`"
    )]
    NotSafetensors {
        /// File name.
        origin: String,
        /// Parser message.
        reason: String,
    },
    /// A safetensors file, but not a redline INT8 model.
    #[error(
        "{origin} is a safetensors file but not a redline INT8 model ({reason}): write one \
         with `redline quantize`"
    )]
    WrongFile {
        /// File name.
        origin: String,
        /// What is missing.
        reason: String,
    },
    /// Written by another version of the format.
    #[error(
        "{origin} has weights format version {found}, this build reads version {expected}: \
         re-run `redline quantize` with this build"
    )]
    Version {
        /// File name.
        origin: String,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// The metadata is malformed.
    #[error("{origin}: bad metadata: {reason}")]
    BadMetadata {
        /// File name.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// A required tensor is absent.
    #[error(
        "{origin}: missing tensor '{name}': the file is incomplete; re-run `redline quantize`"
    )]
    MissingTensor {
        /// File name.
        origin: String,
        /// Tensor name.
        name: String,
    },
    /// A tensor has the wrong element type.
    #[error("{origin}: tensor '{name}' has dtype {found}, expected {expected}")]
    WrongDtype {
        /// File name.
        origin: String,
        /// Tensor name.
        name: String,
        /// Dtype in the file.
        found: String,
        /// Required dtype.
        expected: String,
    },
    /// A tensor's shape does not match the network config.
    #[error(
        "{origin}: tensor '{name}' has shape {found:?}, but the network config in the file \
         implies {expected:?}: the file is inconsistent or was edited"
    )]
    WrongShape {
        /// File name.
        origin: String,
        /// Tensor name.
        name: String,
        /// Shape in the file.
        found: Vec<usize>,
        /// Shape required.
        expected: Vec<usize>,
    },
    /// The layers are not a valid network.
    #[error("{origin}: {context}: {source}")]
    Model {
        /// File name (or "calibration" while building).
        origin: String,
        /// Which layer or part.
        context: String,
        /// The model error.
        source: ModelError,
    },
    /// Serialization failed.
    #[error("cannot encode the weights as safetensors: {0}")]
    Encode(String),
}

/// The JSON stored under the metadata key `redline`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    format: String,
    format_version: u32,
    net_config: ConfigMeta,
    calibration: String,
    frames: usize,
}

/// The serializable fields of [`NetConfig`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigMeta {
    in_h: usize,
    in_w: usize,
    feat_c: usize,
    bev_c: usize,
    classes: usize,
    seg_classes: usize,
    seed: u64,
}

impl From<&NetConfig> for ConfigMeta {
    fn from(c: &NetConfig) -> Self {
        Self {
            in_h: c.in_h,
            in_w: c.in_w,
            feat_c: c.feat_c,
            bev_c: c.bev_c,
            classes: c.classes,
            seg_classes: c.seg_classes,
            seed: c.seed,
        }
    }
}

impl From<&ConfigMeta> for NetConfig {
    fn from(m: &ConfigMeta) -> Self {
        NetConfig {
            in_h: m.in_h,
            in_w: m.in_w,
            feat_c: m.feat_c,
            bev_c: m.bev_c,
            classes: m.classes,
            seg_classes: m.seg_classes,
            seed: m.seed,
            trained: None,
        }
    }
}

/// A calibrated INT8 network with its float reference: what a weights file holds.
#[derive(Clone, Debug)]
pub struct QuantizedNetwork {
    /// The float weights (and the config, with `trained` unset).
    pub float: FloatNetwork,
    /// The INT8 layers.
    pub layers: Arc<TrainedLayers>,
    /// How the activation ranges were chosen.
    pub method: CalibrationMethod,
    /// Calibration frames used.
    pub frames: usize,
}

fn model_err(origin: &str, context: &str) -> impl Fn(ModelError) -> WeightsError {
    let (origin, context) = (origin.to_string(), context.to_string());
    move |source| WeightsError::Model {
        origin: origin.clone(),
        context: context.clone(),
        source,
    }
}

/// `(name, shape, relu)` of every quantized layer `cfg` implies, in [`LAYER_NAMES`] order.
fn layer_specs(cfg: &NetConfig) -> Vec<(&'static str, ConvShape, bool)> {
    let one = |in_c, out_c| ConvShape {
        in_c,
        out_c,
        k: 1,
        stride: 1,
        pad: 0,
    };
    let b = cfg.backbone_shapes();
    let shapes = [
        (b[0], true),
        (b[1], true),
        (b[2], true),
        (one(cfg.bev_c, DET_HIDDEN), true),
        (one(DET_HIDDEN, cfg.classes), false),
        (one(DET_HIDDEN, REG_CHANNELS), false),
        (one(cfg.bev_c, SEG_HIDDEN), true),
        (one(SEG_HIDDEN, cfg.seg_classes), false),
    ];
    LAYER_NAMES
        .iter()
        .zip(shapes)
        .map(|(&n, (s, r))| (n, s, r))
        .collect()
}

/// `(name, shape, relu)` of every float layer, in [`FLOAT_LAYER_NAMES`] order.
fn float_specs(cfg: &NetConfig) -> Vec<(&'static str, ConvShape, bool)> {
    let q = layer_specs(cfg);
    let merged = |a: ConvShape, b: ConvShape| ConvShape {
        out_c: a.out_c + b.out_c,
        ..a
    };
    let shapes = [
        (q[0].1, true),
        (q[1].1, true),
        (q[2].1, true),
        (q[3].1, true),
        (merged(q[4].1, q[5].1), false),
        (q[6].1, true),
        (q[7].1, false),
    ];
    FLOAT_LAYER_NAMES
        .iter()
        .zip(shapes)
        .map(|(&n, (s, r))| (n, s, r))
        .collect()
}

fn weight_shape(s: ConvShape) -> Vec<usize> {
    vec![s.out_c, s.k, s.k, s.in_c]
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl QuantizedNetwork {
    /// Quantizes `float` with the calibrated activation parameters `act`.
    pub fn from_calibration(
        float: FloatNetwork,
        act: &ActQParams,
        method: CalibrationMethod,
        frames: usize,
    ) -> Result<Self, WeightsError> {
        let e = |what: &str| model_err("calibration", what);
        let backbone = Backbone::from_float(&float, &act.backbone).map_err(e("backbone"))?;
        let det = DetHead::from_float(&float, act, 1, 1).map_err(e("detection head"))?;
        let seg = SegHead::from_float(&float, act, 1, 1).map_err(e("segmentation head"))?;
        let layers = TrainedLayers {
            backbone: backbone.layers().to_vec(),
            det: det.layers().cloned().collect(),
            seg: seg.layers().cloned().collect(),
        };
        Ok(Self {
            float,
            layers: Arc::new(layers),
            method,
            frames,
        })
    }

    /// The network config of the file (shapes and seed), without the trained layers.
    pub fn config(&self) -> &NetConfig {
        &self.float.config
    }

    /// The config to build the INT8 network from these weights: [`Backbone::new`],
    /// [`DetHead::new`] and [`SegHead::new`] then use the loaded layers.
    pub fn net_config(&self) -> NetConfig {
        NetConfig {
            trained: Some(self.layers.clone()),
            ..self.float.config.clone()
        }
    }

    /// The quantized layers in [`LAYER_NAMES`] order.
    fn ordered_layers(&self) -> Vec<&Conv2d> {
        self.layers
            .backbone
            .iter()
            .chain(&self.layers.det)
            .chain(&self.layers.seg)
            .collect()
    }

    fn ordered_float(&self) -> Vec<&FloatConv> {
        let f = &self.float;
        f.backbone
            .iter()
            .chain([&f.det.hidden, &f.det.out, &f.seg.hidden, &f.seg.out])
            .collect()
    }

    /// The safetensors bytes (deterministic: same network, same bytes).
    pub fn to_bytes(&self) -> Result<Vec<u8>, WeightsError> {
        let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        let layers = self.ordered_layers();
        if layers.len() != LAYER_NAMES.len() {
            return Err(WeightsError::Encode(format!(
                "{} quantized layers, expected {}",
                layers.len(),
                LAYER_NAMES.len()
            )));
        }
        for (name, l) in LAYER_NAMES.iter().zip(layers) {
            owned.push((
                format!("{name}.weight"),
                Dtype::I8,
                weight_shape(l.shape()),
                l.weights.iter().map(|&w| w as u8).collect(),
            ));
            owned.push((
                format!("{name}.weight_scale"),
                Dtype::F32,
                vec![l.out_c],
                f32_bytes(&l.w_scales),
            ));
            owned.push((
                format!("{name}.bias"),
                Dtype::I32,
                vec![l.out_c],
                l.bias.iter().flat_map(|b| b.to_le_bytes()).collect(),
            ));
            let q = [
                l.in_q.scale,
                f32::from(l.in_q.zero_point),
                l.out_q.scale,
                f32::from(l.out_q.zero_point),
            ];
            owned.push((
                format!("{name}.qparams"),
                Dtype::F32,
                vec![4],
                f32_bytes(&q),
            ));
        }
        for (name, l) in FLOAT_LAYER_NAMES.iter().zip(self.ordered_float()) {
            owned.push((
                format!("float.{name}.weight"),
                Dtype::F32,
                weight_shape(l.shape),
                f32_bytes(&l.weights),
            ));
            owned.push((
                format!("float.{name}.bias"),
                Dtype::F32,
                vec![l.shape.out_c],
                f32_bytes(&l.bias),
            ));
        }
        let meta = Meta {
            format: FORMAT.to_string(),
            format_version: FORMAT_VERSION,
            net_config: ConfigMeta::from(self.config()),
            calibration: self.method.label(),
            frames: self.frames,
        };
        let json = serde_json::to_string(&meta).map_err(|e| WeightsError::Encode(e.to_string()))?;
        let mut views = Vec::with_capacity(owned.len());
        for (name, dtype, shape, data) in &owned {
            let v = TensorView::new(*dtype, shape.clone(), data)
                .map_err(|e| WeightsError::Encode(format!("{name}: {e:?}")))?;
            views.push((name.clone(), v));
        }
        let info = Some(HashMap::from([(META_KEY.to_string(), json)]));
        safetensors::serialize(views, &info).map_err(|e| WeightsError::Encode(format!("{e:?}")))
    }

    /// Writes the file.
    pub fn save(&self, path: &Path) -> Result<(), WeightsError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| WeightsError::Io {
            action: "write",
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads and checks a file (see the module docs for the checks).
    pub fn load(path: &Path) -> Result<Self, WeightsError> {
        let bytes = std::fs::read(path).map_err(|source| WeightsError::Io {
            action: "read",
            path: path.display().to_string(),
            source,
        })?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// Parses and checks safetensors bytes; `origin` names them in errors.
    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<Self, WeightsError> {
        let o = || origin.to_string();
        let st = SafeTensors::deserialize(bytes).map_err(|e| WeightsError::NotSafetensors {
            origin: o(),
            reason: format!("{e:?}"),
        })?;
        let (_, header) =
            SafeTensors::read_metadata(bytes).map_err(|e| WeightsError::NotSafetensors {
                origin: o(),
                reason: format!("{e:?}"),
            })?;
        let json = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get(META_KEY))
            .ok_or_else(|| WeightsError::WrongFile {
                origin: o(),
                reason: format!("no '{META_KEY}' metadata"),
            })?;
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| WeightsError::BadMetadata {
                origin: o(),
                reason: format!("'{META_KEY}' is not JSON: {e}"),
            })?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(WeightsError::WrongFile {
                origin: o(),
                reason: format!("metadata format is not '{FORMAT}'"),
            });
        }
        let version = value.get("format_version").and_then(|v| v.as_u64());
        if version != Some(u64::from(FORMAT_VERSION)) {
            return Err(WeightsError::Version {
                origin: o(),
                found: version.map_or(0, |v| v.min(u64::from(u32::MAX)) as u32),
                expected: FORMAT_VERSION,
            });
        }
        let meta: Meta = serde_json::from_value(value).map_err(|e| WeightsError::BadMetadata {
            origin: o(),
            reason: e.to_string(),
        })?;
        let method =
            CalibrationMethod::parse(&meta.calibration).map_err(|e| WeightsError::BadMetadata {
                origin: o(),
                reason: e.to_string(),
            })?;
        let cfg = NetConfig::from(&meta.net_config);
        cfg.validate()
            .map_err(model_err(origin, "network config"))?;

        let get = |name: &str, dtype: Dtype, shape: &[usize]| -> Result<Vec<u8>, WeightsError> {
            let t = st.tensor(name).map_err(|_| WeightsError::MissingTensor {
                origin: o(),
                name: name.to_string(),
            })?;
            if t.dtype() != dtype {
                return Err(WeightsError::WrongDtype {
                    origin: o(),
                    name: name.to_string(),
                    found: format!("{:?}", t.dtype()),
                    expected: format!("{dtype:?}"),
                });
            }
            if t.shape() != shape {
                return Err(WeightsError::WrongShape {
                    origin: o(),
                    name: name.to_string(),
                    found: t.shape().to_vec(),
                    expected: shape.to_vec(),
                });
            }
            Ok(t.data().to_vec())
        };
        let f32s = |b: Vec<u8>| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };

        let mut convs = Vec::with_capacity(LAYER_NAMES.len());
        for (name, s, relu) in layer_specs(&cfg) {
            let w: Vec<i8> = get(&format!("{name}.weight"), Dtype::I8, &weight_shape(s))?
                .into_iter()
                .map(|b| b as i8)
                .collect();
            let ws = f32s(get(
                &format!("{name}.weight_scale"),
                Dtype::F32,
                &[s.out_c],
            )?);
            let bias: Vec<i32> = get(&format!("{name}.bias"), Dtype::I32, &[s.out_c])?
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let q = f32s(get(&format!("{name}.qparams"), Dtype::F32, &[4])?);
            let zp = |v: f32| -> Result<i8, WeightsError> {
                if v.fract() == 0.0 && (-128.0..=127.0).contains(&v) {
                    Ok(v as i8)
                } else {
                    Err(WeightsError::BadMetadata {
                        origin: o(),
                        reason: format!("{name}.qparams: zero point {v} is not an i8"),
                    })
                }
            };
            let in_q = QParams::new(q[0], zp(q[1])?);
            let out_q = QParams::new(q[2], zp(q[3])?);
            let conv = Conv2d::new(s, w, ws, bias, in_q, out_q, relu)
                .map_err(model_err(origin, &format!("layer {name}")))?;
            convs.push(conv);
        }
        let seg = convs.split_off(6);
        let det = convs.split_off(3);
        let layers = TrainedLayers {
            backbone: convs,
            det,
            seg,
        };

        let mut floats = Vec::with_capacity(FLOAT_LAYER_NAMES.len());
        for (name, s, relu) in float_specs(&cfg) {
            let w = f32s(get(
                &format!("float.{name}.weight"),
                Dtype::F32,
                &weight_shape(s),
            )?);
            let b = f32s(get(&format!("float.{name}.bias"), Dtype::F32, &[s.out_c])?);
            floats.push(
                FloatConv::new(s, w, b, relu)
                    .map_err(model_err(origin, &format!("float layer {name}")))?,
            );
        }
        let mut it = floats.into_iter();
        let mut next = |what: &str| {
            it.next().ok_or_else(|| WeightsError::MissingTensor {
                origin: o(),
                name: what.to_string(),
            })
        };
        let backbone = vec![
            next("float.backbone.0")?,
            next("float.backbone.1")?,
            next("float.backbone.2")?,
        ];
        let det_f = FloatHead {
            hidden: next("float.det.hidden")?,
            out: next("float.det.out")?,
            groups: vec![cfg.classes, REG_CHANNELS],
        };
        let seg_f = FloatHead {
            hidden: next("float.seg.hidden")?,
            out: next("float.seg.out")?,
            groups: vec![cfg.seg_classes],
        };
        let float = FloatNetwork {
            config: cfg.clone(),
            backbone,
            det: det_f,
            seg: seg_f,
        };
        float
            .check_shapes()
            .map_err(model_err(origin, "float network"))?;
        // The chaining checks (each layer's input parameters are the previous output's).
        Backbone::from_layers(&cfg, layers.backbone.clone())
            .map_err(model_err(origin, "backbone"))?;
        DetHead::from_layers(&cfg, layers.det.clone(), 1, 1)
            .map_err(model_err(origin, "detection head"))?;
        SegHead::from_layers(&cfg, layers.seg.clone(), 1, 1)
            .map_err(model_err(origin, "segmentation head"))?;
        let bq = layers.backbone[2].out_q;
        for (part, l) in [
            ("detection", &layers.det[0]),
            ("segmentation", &layers.seg[0]),
        ] {
            if l.in_q != bq {
                return Err(WeightsError::BadMetadata {
                    origin: o(),
                    reason: format!(
                        "the {part} head's input quantization {:?} is not the backbone \
                         output's {bq:?}",
                        l.in_q
                    ),
                });
            }
        }
        Ok(Self {
            float,
            layers: Arc::new(layers),
            method,
            frames: meta.frames,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::NetworkCalibrator;
    use redline_runtime::rng::SplitMix64;

    fn small_cfg() -> NetConfig {
        NetConfig {
            in_h: 16,
            in_w: 32,
            feat_c: 8,
            bev_c: 8,
            ..NetConfig::default()
        }
    }

    fn calibrated() -> QuantizedNetwork {
        let cfg = small_cfg();
        let float = FloatNetwork::seeded(&cfg).unwrap();
        let mut cal = NetworkCalibrator::new();
        let mut r = SplitMix64::new(5);
        for _ in 0..3 {
            let img: Vec<f32> = (0..16 * 32 * 3).map(|_| r.uniform(-1.0, 1.0)).collect();
            let f = cal.observe_backbone(&float, &img).unwrap();
            cal.observe_heads(&float, &f, f.len() / 8).unwrap();
        }
        let m = CalibrationMethod::Percentile(99.9);
        let act = cal.act_qparams(m).unwrap();
        QuantizedNetwork::from_calibration(float, &act, m, 3).unwrap()
    }

    fn outputs(cfg: &NetConfig) -> (Vec<i8>, Vec<i8>, Vec<i8>) {
        let b = Backbone::new(cfg).unwrap();
        let mut r = SplitMix64::new(77);
        let img: Vec<i8> = (0..16 * 32 * 3).map(|_| r.next_i8()).collect();
        let mut s = vec![0i8; b.scratch_len()];
        let (h, w, c) = b.output_shape();
        let mut f = vec![0i8; h * w * c];
        b.forward(&img, &mut s, &mut f).unwrap();
        let det = DetHead::new(cfg, h, w).unwrap();
        let seg = SegHead::new(cfg, h, w).unwrap();
        let mut s = vec![0i8; det.scratch_len().max(seg.scratch_len())];
        let mut d = vec![0i8; h * w * det.out_channels()];
        det.forward(&f, &mut s, &mut d).unwrap();
        let mut g = vec![0i8; h * w * seg.out_channels()];
        seg.forward(&f, &mut s, &mut g).unwrap();
        (f, d, g)
    }

    #[test]
    fn save_load_round_trip_is_bit_identical() {
        let q = calibrated();
        let bytes = q.to_bytes().unwrap();
        assert_eq!(
            bytes,
            q.to_bytes().unwrap(),
            "serialization is deterministic"
        );
        let back = QuantizedNetwork::from_bytes(&bytes, "mem").unwrap();
        assert_eq!(back.method, q.method);
        assert_eq!(back.frames, 3);
        assert_eq!(back.float, q.float);
        for (a, b) in q.ordered_layers().iter().zip(back.ordered_layers()) {
            assert_eq!(a.weights, b.weights);
            assert_eq!(a.bias, b.bias);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a.w_scales), bits(&b.w_scales));
            assert_eq!(a.in_q.scale.to_bits(), b.in_q.scale.to_bits());
            assert_eq!(a.out_q.scale.to_bits(), b.out_q.scale.to_bits());
            assert_eq!(
                (a.in_q.zero_point, a.out_q.zero_point),
                (b.in_q.zero_point, b.out_q.zero_point)
            );
        }
        let o1 = outputs(&q.net_config());
        let o2 = outputs(&back.net_config());
        assert_eq!(o1, o2);
        // The loaded network is not the seeded one.
        assert_ne!(o1.0, outputs(&small_cfg()).0);
        // Through a file too.
        let dir = std::env::temp_dir().join(format!("redline-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("net.safetensors");
        q.save(&p).unwrap();
        let back = QuantizedNetwork::load(&p).unwrap();
        assert_eq!(outputs(&back.net_config()), o1);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Rewrites the file with `edit` applied to its tensors and metadata.
    fn rewrite(
        bytes: &[u8],
        edit: impl Fn(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>, &mut String),
    ) -> Vec<u8> {
        let st = SafeTensors::deserialize(bytes).unwrap();
        let (_, h) = SafeTensors::read_metadata(bytes).unwrap();
        let mut meta = h.metadata().as_ref().unwrap()[META_KEY].clone();
        let mut ts: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
            .tensors()
            .into_iter()
            .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
            .collect();
        ts.sort_by(|a, b| a.0.cmp(&b.0));
        edit(&mut ts, &mut meta);
        let views: Vec<(String, TensorView)> = ts
            .iter()
            .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, &Some(HashMap::from([(META_KEY.to_string(), meta)]))).unwrap()
    }

    #[test]
    fn bad_files_are_errors_naming_the_problem() {
        let good = calibrated().to_bytes().unwrap();
        let err = |b: &[u8]| QuantizedNetwork::from_bytes(b, "x.safetensors").unwrap_err();

        let e = err(b"not a model at all");
        assert!(matches!(e, WeightsError::NotSafetensors { .. }), "{e}");
        assert!(e.to_string().contains("x.safetensors"));
        let e = err(&good[..good.len() / 2]);
        assert!(matches!(e, WeightsError::NotSafetensors { .. }), "{e}");

        let other = safetensors::serialize(
            [(
                "x",
                TensorView::new(Dtype::F32, vec![1], &[0u8; 4]).unwrap(),
            )],
            &None,
        )
        .unwrap();
        assert!(matches!(err(&other), WeightsError::WrongFile { .. }));

        let v2 = rewrite(&good, |_, m| {
            *m = m.replace("\"format_version\":1", "\"format_version\":2")
        });
        let e = err(&v2);
        assert!(matches!(e, WeightsError::Version { found: 2, .. }), "{e}");
        assert!(e.to_string().contains("re-run"));

        let missing = rewrite(&good, |t, _| t.retain(|x| x.0 != "det.reg.bias"));
        let e = err(&missing);
        assert!(e.to_string().contains("det.reg.bias"), "{e}");
        assert!(matches!(e, WeightsError::MissingTensor { .. }));

        let shaped = rewrite(&good, |t, _| {
            for x in t.iter_mut().filter(|x| x.0 == "backbone.1.weight") {
                x.2 = vec![x.2[0], 3, 3, x.2[3], 1];
            }
        });
        let e = err(&shaped);
        assert!(matches!(e, WeightsError::WrongShape { .. }), "{e}");
        assert!(e.to_string().contains("backbone.1.weight"));

        let dtype = rewrite(&good, |t, _| {
            for x in t.iter_mut().filter(|x| x.0 == "seg.logits.bias") {
                x.1 = Dtype::F32;
            }
        });
        assert!(matches!(err(&dtype), WeightsError::WrongDtype { .. }));

        // A config that disagrees with the tensors.
        let cfg = rewrite(&good, |_, m| {
            *m = m
                .replace("\"feat_c\":8", "\"feat_c\":16")
                .replace("\"bev_c\":8", "\"bev_c\":16")
        });
        assert!(matches!(err(&cfg), WeightsError::WrongShape { .. }));

        // A zero scale is rejected by the layer checks.
        let scale = rewrite(&good, |t, _| {
            for x in t.iter_mut().filter(|x| x.0 == "backbone.0.weight_scale") {
                x.3[..4].copy_from_slice(&0f32.to_le_bytes());
            }
        });
        let e = err(&scale);
        assert!(e.to_string().contains("backbone.0"), "{e}");

        let e = QuantizedNetwork::load(Path::new("/nonexistent/net.safetensors")).unwrap_err();
        assert!(matches!(e, WeightsError::Io { .. }));
    }
}
