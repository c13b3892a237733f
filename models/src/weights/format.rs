//! The weights file format: the metadata JSON ([`Meta`]), the tensor names and shapes a
//! config implies, the deterministic encoder ([`QuantizedNetwork::to_bytes`]) and the
//! checking decoder ([`QuantizedNetwork::from_bytes`]).
//!
//! Contract: the format described in the `weights` module docs, bit for bit; decoding
//! checks everything in the documented order and reports the first problem as a
//! [`WeightsError`] naming the file. Cost: allocates and copies the whole model; start-up
//! only. Never: panics on a malformed file.

use std::collections::HashMap;
use std::sync::Arc;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use super::{
    model_err, QuantizedNetwork, WeightsError, FLOAT_LAYER_NAMES, FORMAT, FORMAT_VERSION,
    LAYER_NAMES, META_KEY,
};
use crate::calibrate::CalibrationMethod;
use crate::conv::{Conv2d, ConvShape};
use crate::network::{
    Backbone, DetHead, FloatConv, FloatHead, FloatNetwork, NetConfig, SegHead, TrainedLayers,
    DET_HIDDEN, REG_CHANNELS, SEG_HIDDEN,
};
use crate::quant::QParams;

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
    /// The quantized layers in [`LAYER_NAMES`] order.
    pub(super) fn ordered_layers(&self) -> Vec<&Conv2d> {
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
    pub(super) fn to_bytes(&self) -> Result<Vec<u8>, WeightsError> {
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

    /// Parses and checks safetensors bytes; `origin` names them in errors.
    pub(super) fn from_bytes(bytes: &[u8], origin: &str) -> Result<Self, WeightsError> {
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
