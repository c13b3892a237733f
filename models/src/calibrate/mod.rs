//! Calibration: activation statistics over many inputs, the per-tensor activation
//! quantization they imply, and the quantization error of the INT8 network against its
//! float reference (SQNR per layer).
//!
//! # Contract
//!
//! - [`ActivationObserver`] records, for one activation tensor, its exact minimum and
//!   maximum and a histogram of [`HIST_BINS`] bins over a symmetric range `[-R, R]`, `R` a
//!   power of two that doubles (merging bin pairs, exactly) whenever a value falls outside.
//!   Its memory is fixed whatever the number of inputs. Non-finite values are counted in
//!   [`ActivationObserver::non_finite`] and otherwise ignored.
//! - [`CalibrationMethod::MinMax`] maps the observed `[min, max]` (widened to include 0)
//!   onto `i8` ([`QParams::from_min_max`](crate::quant::QParams::from_min_max)); [`CalibrationMethod::Percentile`]`(p)` clips the
//!   range to the `(100 - p)`-th and `p`-th percentiles of the histogram (bin edges, rounded
//!   outwards, never beyond the observed min/max): outliers no longer stretch the scale.
//! - Weights are quantized symmetric per output channel by
//!   [`crate::quant::quantize_weights_per_channel`] (through
//!   [`crate::network::FloatConv::quantize`]); calibration only chooses activation
//!   parameters.
//! - SQNR of a tensor is `10 · log10(Σ x² / Σ (x − x̂)²)` in dB, with `x` the float
//!   reference activation and `x̂` the dequantized INT8 activation, both summed in `f64`
//!   over every element of every calibration input ([`SqnrAccumulator`]). No error gives
//!   `+inf`.
//! - [`NetworkCalibrator`] and [`NetworkSqnr`] do this for every activation tensor of the
//!   reference network ([`Tensor`]); everything is deterministic (fixed iteration orders,
//!   no hashing, no clock).
//! - Layout: `observer` holds [`ActivationObserver`] (one tensor's statistics), `sqnr`
//!   holds [`SqnrAccumulator`] and [`NetworkSqnr`] (quantization error), this file the
//!   method, the errors, the tensor names and [`NetworkCalibrator`].
//!
//! # Cost
//!
//! An observer is `HIST_BINS · 8` bytes; observing costs two passes over the tensor. The
//! network-level helpers run the float network and allocate: this is offline tooling
//! (`redline quantize`), never called per frame.
//!
//! # Never
//!
//! Nothing here panics on bad data (NaN, empty tensors, zero ranges): such cases give
//! valid [`QParams`](crate::quant::QParams) and are visible in the statistics.

use crate::conv::ModelError;
use crate::network::{ActQParams, FloatNetwork, HeadQParams};

mod observer;
mod sqnr;

pub use observer::{ActivationObserver, HIST_BINS};
pub use sqnr::{NetworkSqnr, SqnrAccumulator};

/// The percentile `redline quantize` uses unless told otherwise.
pub const DEFAULT_PERCENTILE: f32 = 99.99;

/// How activation ranges are chosen from the observed statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CalibrationMethod {
    /// The observed minimum and maximum.
    MinMax,
    /// The `(100 - p)`-th and `p`-th percentiles, `p` in `(50, 100]` (e.g. 99.99).
    Percentile(f32),
}

impl CalibrationMethod {
    /// Parses `minmax` / `min-max` or `percentile` / `percentile:P` (e.g.
    /// `percentile:99.9`).
    pub fn parse(s: &str) -> Result<Self, CalibrateError> {
        let t = s.trim().to_ascii_lowercase();
        let m = match t.as_str() {
            "minmax" | "min-max" | "min_max" => Self::MinMax,
            "percentile" => Self::Percentile(DEFAULT_PERCENTILE),
            _ => match t.strip_prefix("percentile:").map(str::parse::<f32>) {
                Some(Ok(p)) => Self::Percentile(p),
                _ => {
                    return Err(CalibrateError::BadMethod {
                        given: s.to_string(),
                    })
                }
            },
        };
        m.validate()?;
        Ok(m)
    }

    /// Checks the percentile is in `(50, 100]`.
    pub fn validate(&self) -> Result<(), CalibrateError> {
        match *self {
            Self::Percentile(p) if !(p > 50.0 && p <= 100.0) => Err(CalibrateError::BadMethod {
                given: format!("percentile:{p}"),
            }),
            _ => Ok(()),
        }
    }

    /// The text [`CalibrationMethod::parse`] reads back (`minmax`, `percentile:99.99`).
    pub fn label(&self) -> String {
        match self {
            Self::MinMax => "minmax".to_string(),
            Self::Percentile(p) => format!("percentile:{p}"),
        }
    }
}

/// Calibration errors.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// An unknown or out-of-range calibration method.
    #[error(
        "calibration method '{given}' is not understood: use 'minmax', 'percentile' or \
         'percentile:P' with P in (50, 100], e.g. 'percentile:99.99'"
    )]
    BadMethod {
        /// What was given.
        given: String,
    },
    /// No calibration data was observed.
    #[error("no calibration data was observed: feed at least one frame before building")]
    NoData,
    /// A network pass failed (shapes).
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// The activation tensors of the reference network, in network order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tensor {
    /// Backbone layer 0 output (16 channels).
    Backbone0,
    /// Backbone layer 1 output (32 channels).
    Backbone1,
    /// Backbone output features.
    Backbone2,
    /// Detection head hidden activation.
    DetHidden,
    /// Detection heatmap logits.
    DetHeat,
    /// Detection box regression.
    DetReg,
    /// Segmentation head hidden activation.
    SegHidden,
    /// Segmentation logits.
    SegLogits,
}

impl Tensor {
    /// Every tensor, in network order.
    pub const ALL: [Tensor; 8] = [
        Tensor::Backbone0,
        Tensor::Backbone1,
        Tensor::Backbone2,
        Tensor::DetHidden,
        Tensor::DetHeat,
        Tensor::DetReg,
        Tensor::SegHidden,
        Tensor::SegLogits,
    ];

    /// Name in reports (`backbone.0`, `det.heat`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Tensor::Backbone0 => "backbone.0",
            Tensor::Backbone1 => "backbone.1",
            Tensor::Backbone2 => "backbone.2",
            Tensor::DetHidden => "det.hidden",
            Tensor::DetHeat => "det.heat",
            Tensor::DetReg => "det.reg",
            Tensor::SegHidden => "seg.hidden",
            Tensor::SegLogits => "seg.logits",
        }
    }

    /// Position in [`Tensor::ALL`] (the index of its observer and accumulator).
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Channels `first..first + n` of every pixel of an NHWC tensor with `c` channels.
pub(super) fn channel_group(x: &[f32], c: usize, first: usize, n: usize) -> Vec<f32> {
    x.chunks_exact(c)
        .flat_map(|px| px[first..first + n].iter().copied())
        .collect()
}

/// [`channel_group`] of an `i8` tensor.
pub(super) fn channel_group_i8(x: &[i8], c: usize, first: usize, n: usize) -> Vec<i8> {
    x.chunks_exact(c)
        .flat_map(|px| px[first..first + n].iter().copied())
        .collect()
}

/// Observers for every activation tensor of the reference network, fed by the float
/// network over calibration inputs.
#[derive(Clone, Debug)]
pub struct NetworkCalibrator {
    observers: Vec<ActivationObserver>,
    backbone_inputs: u64,
    head_inputs: u64,
}

impl Default for NetworkCalibrator {
    fn default() -> Self {
        Self::new()
    }
}

impl NetworkCalibrator {
    /// Empty observers for every [`Tensor`].
    pub fn new() -> Self {
        Self {
            observers: Tensor::ALL
                .iter()
                .map(|_| ActivationObserver::new())
                .collect(),
            backbone_inputs: 0,
            head_inputs: 0,
        }
    }

    /// The observer of tensor `t`.
    pub fn observer(&self, t: Tensor) -> &ActivationObserver {
        &self.observers[t.index()]
    }

    /// Runs the float backbone on one camera image (`in_h × in_w × 3`, real values), records
    /// its three activations and returns the output features.
    pub fn observe_backbone(
        &mut self,
        float: &FloatNetwork,
        image: &[f32],
    ) -> Result<Vec<f32>, ModelError> {
        let mut acts = float.backbone_forward(image)?;
        for (t, a) in [Tensor::Backbone0, Tensor::Backbone1, Tensor::Backbone2]
            .iter()
            .zip(&acts)
        {
            self.observers[t.index()].observe(a);
        }
        self.backbone_inputs += 1;
        Ok(acts.pop().unwrap_or_default())
    }

    /// Runs both float heads on `cells` BEV feature vectors (`cells × bev_c`, real values)
    /// and records their activations (each output group separately).
    pub fn observe_heads(
        &mut self,
        float: &FloatNetwork,
        bev: &[f32],
        cells: usize,
    ) -> Result<(), ModelError> {
        let (h, o) = float.det.forward(bev, cells)?;
        self.observers[Tensor::DetHidden.index()].observe(&h);
        let c = float.det.out.shape.out_c;
        let classes = float.det.groups[0];
        self.observers[Tensor::DetHeat.index()].observe(&channel_group(&o, c, 0, classes));
        self.observers[Tensor::DetReg.index()].observe(&channel_group(&o, c, classes, c - classes));
        let (h, o) = float.seg.forward(bev, cells)?;
        self.observers[Tensor::SegHidden.index()].observe(&h);
        self.observers[Tensor::SegLogits.index()].observe(&o);
        self.head_inputs += 1;
        Ok(())
    }

    /// The activation parameters of every tensor under `method`. Errors when no backbone
    /// input or no BEV grid was observed.
    pub fn act_qparams(&self, method: CalibrationMethod) -> Result<ActQParams, CalibrateError> {
        method.validate()?;
        if self.backbone_inputs == 0 || self.head_inputs == 0 {
            return Err(CalibrateError::NoData);
        }
        let q = |t: Tensor| self.observer(t).qparams(method);
        Ok(ActQParams {
            backbone: [
                q(Tensor::Backbone0),
                q(Tensor::Backbone1),
                q(Tensor::Backbone2),
            ],
            det: HeadQParams {
                hidden: q(Tensor::DetHidden),
                outs: vec![q(Tensor::DetHeat), q(Tensor::DetReg)],
            },
            seg: HeadQParams {
                hidden: q(Tensor::SegHidden),
                outs: vec![q(Tensor::SegLogits)],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{Backbone, DetHead, NetConfig, SegHead};
    use crate::quant::{dequantize, quantize, QParams};
    use redline_runtime::rng::SplitMix64;

    #[test]
    fn methods_parse_and_print() {
        assert_eq!(
            CalibrationMethod::parse("minmax").unwrap(),
            CalibrationMethod::MinMax
        );
        assert_eq!(
            CalibrationMethod::parse("percentile").unwrap(),
            CalibrationMethod::Percentile(DEFAULT_PERCENTILE)
        );
        let p = CalibrationMethod::Percentile(99.9);
        assert_eq!(CalibrationMethod::parse(&p.label()).unwrap(), p);
        for bad in [
            "entropy",
            "percentile:30",
            "percentile:abc",
            "percentile:101",
        ] {
            let e = CalibrationMethod::parse(bad).unwrap_err().to_string();
            assert!(e.contains("minmax") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn no_data_is_an_error() {
        let c = NetworkCalibrator::new();
        assert!(matches!(
            c.act_qparams(CalibrationMethod::MinMax),
            Err(CalibrateError::NoData)
        ));
    }

    /// Calibrating on the inputs and measuring on them: a high SQNR everywhere, and
    /// percentile no worse than min-max by much.
    #[test]
    fn calibrated_network_tracks_its_float_reference() {
        let cfg = NetConfig {
            in_h: 32,
            in_w: 64,
            feat_c: 16,
            bev_c: 16,
            ..NetConfig::default()
        };
        let float = FloatNetwork::seeded(&cfg).unwrap();
        let mut r = SplitMix64::new(11);
        let q_in = QParams::new(1.0 / 128.0, 0);
        // Smooth images (gradients + noise), like camera frames.
        let images: Vec<Vec<i8>> = (0..4)
            .map(|k| {
                (0..32 * 64 * 3)
                    .map(|i| {
                        let (y, x) = (i / (64 * 3), (i / 3) % 64);
                        let v = (y as f32 / 32.0 - 0.5) * (k as f32 * 0.3 + 0.5)
                            + redline_runtime::det_math::sin(x as f32 / 9.0) * 0.3
                            + r.uniform(-0.1, 0.1);
                        quantize(v, q_in)
                    })
                    .collect()
            })
            .collect();
        let mut cal = NetworkCalibrator::new();
        let mut bevs = Vec::new();
        for img in &images {
            let x: Vec<f32> = img.iter().map(|&v| dequantize(v, q_in)).collect();
            let f = cal.observe_backbone(&float, &x).unwrap();
            cal.observe_heads(&float, &f, f.len() / 16).unwrap();
            bevs.push((x, f));
        }
        let mut dbs = Vec::new();
        for m in [
            CalibrationMethod::MinMax,
            CalibrationMethod::Percentile(99.99),
        ] {
            let act = cal.act_qparams(m).unwrap();
            let bb = Backbone::from_float(&float, &act.backbone).unwrap();
            let (fh, fw, _) = bb.output_shape();
            let det = DetHead::from_float(&float, &act, fh, fw).unwrap();
            let seg = SegHead::from_float(&float, &act, fh, fw).unwrap();
            let mut s = NetworkSqnr::new();
            for (img, (x, _)) in images.iter().zip(&bevs) {
                let acts = float.backbone_forward(x).unwrap();
                let q = s.add_backbone(&bb, img, &acts).unwrap();
                s.add_heads(&float, &det, &seg, &q, &acts[2]).unwrap();
            }
            for (name, db) in s.table() {
                assert!(db > 20.0, "{m:?}: {name} SQNR {db:.1} dB");
            }
            dbs.push(s.get(Tensor::Backbone2).db());
        }
        assert!(
            dbs[1] > dbs[0] - 3.0,
            "percentile {} vs min-max {}",
            dbs[1],
            dbs[0]
        );
    }
}
