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
//! - **Loading** ([`QuantizedNetwork::load`]) checks, in
//!   this order: that the bytes are safetensors, that the metadata says `redline-int8`, the
//!   version, the config, then every tensor's presence, dtype and shape against the shapes
//!   the config implies, then the layers themselves ([`crate::conv::Conv2d::new`] and the
//!   chaining checks of [`Backbone::from_layers`] / [`crate::network::Head::from_layers`]).
//!   Each failure is a [`WeightsError`] naming the file and the problem; nothing panics.
//! - **Round trip**: save → load gives layers with bit-identical weights, scales, biases and
//!   quantization parameters, so bit-identical outputs.
//!
//! - **Layout**: this file holds the constants, [`WeightsError`] and [`QuantizedNetwork`]
//!   (building it from a calibration, saving, loading); `format` holds the file format
//!   itself: the metadata JSON, the tensor names and shapes, encoding and the checking
//!   decoder.
//!
//! # Cost
//!
//! Start-up only: saving and loading allocate and copy the whole model (tens of KiB for
//! the default network). Never per frame.

use std::path::Path;
use std::sync::Arc;

use crate::calibrate::CalibrationMethod;
use crate::conv::ModelError;
use crate::network::{
    ActQParams, Backbone, DetHead, FloatNetwork, NetConfig, SegHead, TrainedLayers,
};

mod format;

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
/// The safetensors metadata key holding the JSON metadata.
pub(super) const META_KEY: &str = "redline";

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

/// Maps a [`ModelError`] to a [`WeightsError::Model`] naming `origin` and `context`.
pub(super) fn model_err(origin: &str, context: &str) -> impl Fn(ModelError) -> WeightsError {
    let (origin, context) = (origin.to_string(), context.to_string());
    move |source| WeightsError::Model {
        origin: origin.clone(),
        context: context.clone(),
        source,
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::NetworkCalibrator;
    use redline_runtime::rng::SplitMix64;
    use safetensors::tensor::{Dtype, TensorView};
    use safetensors::SafeTensors;
    use std::collections::HashMap;

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
