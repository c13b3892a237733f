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
//!   onto `i8` ([`QParams::from_min_max`]); [`CalibrationMethod::Percentile`]`(p)` clips the
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
//! valid [`QParams`] and are visible in the statistics.

use crate::conv::{exact_len, ModelError};
use crate::network::{ActQParams, Backbone, DetHead, FloatNetwork, HeadQParams, SegHead};
use crate::quant::{dequantize, QParams};

/// Bins of an observer's histogram (even, so that range doubling merges bins exactly).
pub const HIST_BINS: usize = 2048;
/// Smallest histogram half-range `R` (a power of two).
const MIN_RANGE: f32 = 1.0 / (1u32 << 20) as f32;
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

/// Statistics of one activation tensor over every input observed: exact min/max and a
/// fixed-size histogram (see the module docs).
#[derive(Clone, Debug)]
pub struct ActivationObserver {
    min: f32,
    max: f32,
    count: u64,
    non_finite: u64,
    /// Half-range `R` of the histogram; 0 until a non-zero value is seen.
    range: f32,
    bins: Vec<u64>,
}

impl Default for ActivationObserver {
    fn default() -> Self {
        Self::new()
    }
}

impl ActivationObserver {
    /// An empty observer (allocates its histogram once).
    pub fn new() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            count: 0,
            non_finite: 0,
            range: 0.0,
            bins: vec![0; HIST_BINS],
        }
    }

    /// Records every finite value of `x`.
    pub fn observe(&mut self, x: &[f32]) {
        let mut max_abs = 0f32;
        for &v in x {
            if v.is_finite() {
                self.min = self.min.min(v);
                self.max = self.max.max(v);
                max_abs = max_abs.max(v.abs());
            } else {
                self.non_finite += 1;
            }
        }
        self.grow_to(max_abs);
        if self.range == 0.0 {
            // Every value so far is 0: keep them in the count, binned once a range exists.
            let zeros = x.iter().filter(|v| v.is_finite()).count() as u64;
            self.count += zeros;
            return;
        }
        let w = 2.0 * self.range / HIST_BINS as f32;
        for &v in x.iter().filter(|v| v.is_finite()) {
            let i = ((v + self.range) / w).floor();
            let i = (i.max(0.0) as usize).min(HIST_BINS - 1);
            self.bins[i] += 1;
            self.count += 1;
        }
    }

    /// Doubles the range until `|v| <= R` for `max_abs`, merging bin pairs.
    fn grow_to(&mut self, max_abs: f32) {
        if max_abs == 0.0 {
            return;
        }
        if self.range == 0.0 {
            let mut r = MIN_RANGE;
            while r < max_abs {
                r *= 2.0;
            }
            self.range = r;
            // Values observed while the range was 0 were exact zeros: bin them now.
            let zeros = self.count;
            self.bins[HIST_BINS / 2] += zeros;
            return;
        }
        while self.range < max_abs {
            let mut merged = vec![0u64; HIST_BINS];
            for (i, &c) in self.bins.iter().enumerate() {
                merged[HIST_BINS / 4 + i / 2] += c;
            }
            self.bins = merged;
            self.range *= 2.0;
        }
    }

    /// Finite values observed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Non-finite values seen (and ignored).
    pub fn non_finite(&self) -> u64 {
        self.non_finite
    }

    /// Observed minimum (`+inf` before any value).
    pub fn min(&self) -> f32 {
        self.min
    }

    /// Observed maximum (`-inf` before any value).
    pub fn max(&self) -> f32 {
        self.max
    }

    /// The `(100 - p)`-th and `p`-th percentiles (`p` in `(50, 100]`), as histogram bin
    /// edges rounded outwards and clamped to `[min, max]`. `(0, 0)` before any value.
    pub fn percentile_range(&self, p: f32) -> (f32, f32) {
        if self.count == 0 {
            return (0.0, 0.0);
        }
        if self.range == 0.0 {
            return (0.0, 0.0);
        }
        let tail = ((1.0 - f64::from(p) / 100.0).max(0.0) * self.count as f64).floor() as u64;
        let w = 2.0 * self.range / HIST_BINS as f32;
        let edge = |i: usize| -self.range + i as f32 * w;
        // Lowest bin whose cumulative count exceeds the lower tail.
        let mut cum = 0u64;
        let mut lo_bin = 0;
        for (i, &c) in self.bins.iter().enumerate() {
            cum += c;
            if cum > tail {
                lo_bin = i;
                break;
            }
        }
        // Highest bin whose cumulative count from the top exceeds the upper tail.
        let mut cum = 0u64;
        let mut hi_bin = HIST_BINS - 1;
        for (i, &c) in self.bins.iter().enumerate().rev() {
            cum += c;
            if cum > tail {
                hi_bin = i;
                break;
            }
        }
        let lo = edge(lo_bin).max(self.min);
        let hi = edge(hi_bin + 1).min(self.max);
        (lo, hi)
    }

    /// The activation parameters `method` chooses (a valid scale even with no data).
    pub fn qparams(&self, method: CalibrationMethod) -> QParams {
        match method {
            CalibrationMethod::MinMax => QParams::from_min_max(self.min, self.max),
            CalibrationMethod::Percentile(p) => {
                let (lo, hi) = self.percentile_range(p);
                QParams::from_min_max(lo, hi)
            }
        }
    }
}

/// Signal and noise energies of one tensor: SQNR in dB (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SqnrAccumulator {
    /// `Σ x²` of the reference.
    pub signal: f64,
    /// `Σ (x − x̂)²`.
    pub noise: f64,
    /// Elements compared.
    pub count: u64,
}

impl SqnrAccumulator {
    /// Adds a reference tensor and its approximation, element by element (extra elements
    /// of the longer one are ignored).
    pub fn add(&mut self, reference: &[f32], approx: &[f32]) {
        for (&x, &y) in reference.iter().zip(approx) {
            let (x, y) = (f64::from(x), f64::from(y));
            self.signal += x * x;
            self.noise += (x - y) * (x - y);
            self.count += 1;
        }
    }

    /// Adds a reference and the dequantized `i8` tensor `q` in `qp`.
    pub fn add_quantized(&mut self, reference: &[f32], q: &[i8], qp: QParams) {
        for (&x, &v) in reference.iter().zip(q) {
            let (x, y) = (f64::from(x), f64::from(dequantize(v, qp)));
            self.signal += x * x;
            self.noise += (x - y) * (x - y);
            self.count += 1;
        }
    }

    /// `10 · log10(signal / noise)` dB ([`sqnr_db`]).
    pub fn db(&self) -> f64 {
        sqnr_db(self.signal, self.noise)
    }
}

/// `10 · log10(signal / noise)`: `+inf` when `noise` is 0, `-inf` when `signal` is 0 and
/// `noise` is not.
pub fn sqnr_db(signal: f64, noise: f64) -> f64 {
    if noise <= 0.0 {
        f64::INFINITY
    } else if signal <= 0.0 {
        f64::NEG_INFINITY
    } else {
        10.0 * (signal / noise).log10()
    }
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

    fn index(self) -> usize {
        self as usize
    }
}

/// Channels `first..first + n` of every pixel of an NHWC tensor with `c` channels.
fn channel_group(x: &[f32], c: usize, first: usize, n: usize) -> Vec<f32> {
    x.chunks_exact(c)
        .flat_map(|px| px[first..first + n].iter().copied())
        .collect()
}

fn channel_group_i8(x: &[i8], c: usize, first: usize, n: usize) -> Vec<i8> {
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

    /// Camera images and BEV grids observed so far.
    pub fn inputs_seen(&self) -> (u64, u64) {
        (self.backbone_inputs, self.head_inputs)
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

/// SQNR of every activation tensor of an INT8 network against its float reference,
/// accumulated over inputs.
#[derive(Clone, Debug, Default)]
pub struct NetworkSqnr {
    acc: [SqnrAccumulator; 8],
}

impl NetworkSqnr {
    /// Empty accumulators.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the INT8 backbone on `input` (the quantized image) and compares its three
    /// activations with the float ones (`float_acts`, from
    /// [`FloatNetwork::backbone_forward`] on the dequantized image). Returns the INT8
    /// features.
    pub fn add_backbone(
        &mut self,
        backbone: &Backbone,
        input: &[i8],
        float_acts: &[Vec<f32>],
    ) -> Result<Vec<i8>, ModelError> {
        let (h, w, c) = backbone.output_shape();
        let mut scratch = vec![0i8; backbone.scratch_len()];
        let mut out = vec![0i8; h * w * c];
        backbone.forward(input, &mut scratch, &mut out)?;
        let layers = backbone.layers();
        let (hw1, hw2) = (
            backbone.act_hw(1).unwrap_or((0, 0)),
            backbone.act_hw(2).unwrap_or((0, 0)),
        );
        let n1 = hw1.0 * hw1.1 * layers[0].out_c;
        let n2 = hw2.0 * hw2.1 * layers[1].out_c;
        let (a1, rest) = scratch.split_at(n1);
        let a2 = &rest[..n2];
        let q: [(&[i8], QParams); 3] = [
            (a1, layers[0].out_q),
            (a2, layers[1].out_q),
            (&out, layers[2].out_q),
        ];
        for (i, ((qa, qp), fa)) in q.iter().zip(float_acts).enumerate() {
            exact_len(fa.len(), qa.len(), "float reference activation")?;
            self.acc[i].add_quantized(fa, qa, *qp);
        }
        Ok(out)
    }

    /// Runs both INT8 heads on `bev` (the quantized BEV grid) and both float heads on
    /// `float_bev` (the float grid), and compares every activation.
    pub fn add_heads(
        &mut self,
        float: &FloatNetwork,
        det: &DetHead,
        seg: &SegHead,
        bev: &[i8],
        float_bev: &[f32],
    ) -> Result<(), ModelError> {
        let (ny, nx, dc) = det.output_shape();
        let cells = ny * nx;
        let mut scratch = vec![0i8; det.scratch_len().max(seg.scratch_len())];
        let mut out = vec![0i8; cells * dc];
        det.forward(bev, &mut scratch, &mut out)?;
        let (fh, fo) = float.det.forward(float_bev, cells)?;
        let hq = det.act_qparams();
        let classes = det.classes();
        let nh = det.scratch_len();
        self.acc[Tensor::DetHidden.index()].add_quantized(&fh, &scratch[..nh], hq.hidden);
        self.acc[Tensor::DetHeat.index()].add_quantized(
            &channel_group(&fo, dc, 0, classes),
            &channel_group_i8(&out, dc, 0, classes),
            det.heat_q(),
        );
        self.acc[Tensor::DetReg.index()].add_quantized(
            &channel_group(&fo, dc, classes, dc - classes),
            &channel_group_i8(&out, dc, classes, dc - classes),
            det.reg_q(),
        );
        let sc = seg.out_channels();
        let mut logits = vec![0i8; cells * sc];
        seg.forward(bev, &mut scratch, &mut logits)?;
        let (fh, fo) = float.seg.forward(float_bev, cells)?;
        let ns = seg.scratch_len();
        self.acc[Tensor::SegHidden.index()].add_quantized(
            &fh,
            &scratch[..ns],
            seg.act_qparams().hidden,
        );
        self.acc[Tensor::SegLogits.index()].add_quantized(&fo, &logits, seg.logit_q());
        Ok(())
    }

    /// The accumulator of tensor `t`.
    pub fn get(&self, t: Tensor) -> SqnrAccumulator {
        self.acc[t.index()]
    }

    /// `(tensor name, SQNR dB)` for every tensor, in network order.
    pub fn table(&self) -> Vec<(&'static str, f64)> {
        Tensor::ALL
            .iter()
            .map(|&t| (t.name(), self.get(t).db()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetConfig;
    use crate::quant::quantize;
    use redline_runtime::rng::SplitMix64;

    #[test]
    fn min_max_is_exact_over_batches() {
        let mut o = ActivationObserver::new();
        o.observe(&[0.5, -0.25, 3.0]);
        o.observe(&[]);
        o.observe(&[7.75, f32::NAN, -1.5, f32::INFINITY]);
        assert_eq!(o.min(), -1.5);
        assert_eq!(o.max(), 7.75);
        assert_eq!(o.count(), 5);
        assert_eq!(o.non_finite(), 2);
        assert_eq!(
            o.qparams(CalibrationMethod::MinMax),
            QParams::from_min_max(-1.5, 7.75)
        );
        // The histogram grew to hold 7.75 and kept every value.
        assert_eq!(o.bins.iter().sum::<u64>(), 5);
        assert_eq!(o.range, 8.0);
    }

    #[test]
    fn zeros_then_values_are_all_binned() {
        let mut o = ActivationObserver::new();
        o.observe(&[0.0; 10]);
        assert_eq!(o.qparams(CalibrationMethod::Percentile(99.0)).scale, 1.0);
        o.observe(&[1.0; 10]);
        assert_eq!(o.bins.iter().sum::<u64>(), 20);
        assert_eq!(o.percentile_range(100.0), (0.0, 1.0));
    }

    #[test]
    fn percentile_of_uniform_distribution() {
        let mut o = ActivationObserver::new();
        let n = 1_000_000;
        // Fed in growing batches so the histogram range doubles several times.
        let v: Vec<f32> = (0..n).map(|i| i as f32 / n as f32 * 100.0).collect();
        for chunk in [&v[..10], &v[10..1000], &v[1000..100_000], &v[100_000..]] {
            o.observe(chunk);
        }
        let w = 2.0 * o.range / HIST_BINS as f32;
        let (lo, hi) = o.percentile_range(99.0);
        assert!((hi - 99.0).abs() <= w, "p99 {hi} (bin {w})");
        assert!((lo - 1.0).abs() <= w, "p1 {lo} (bin {w})");
        let (lo, hi) = o.percentile_range(100.0);
        assert_eq!((lo, hi), (0.0, o.max()));
    }

    #[test]
    fn percentile_ignores_rare_outliers_min_max_does_not() {
        let mut o = ActivationObserver::new();
        let mut r = SplitMix64::new(3);
        let body: Vec<f32> = (0..999_950).map(|_| r.uniform(0.0, 1.0)).collect();
        o.observe(&body);
        o.observe(&[1000.0; 50]); // 0.005 % outliers
        let mm = o.qparams(CalibrationMethod::MinMax);
        let pc = o.qparams(CalibrationMethod::Percentile(99.99));
        assert!((mm.scale - 1000.0 / 255.0).abs() < 1e-3);
        assert!(
            pc.scale < 1.01 / 255.0 * 1.01,
            "percentile scale {}",
            pc.scale
        );
        assert!(pc.scale > 0.99 / 255.0, "percentile scale {}", pc.scale);
        // Gaussian-like: the sum of 4 uniforms, p99.9 close to the known quantile.
        let mut g = ActivationObserver::new();
        let x: Vec<f32> = (0..400_000)
            .map(|_| (0..4).map(|_| r.uniform(-1.0, 1.0)).sum::<f32>())
            .collect();
        g.observe(&x);
        let (lo, hi) = g.percentile_range(99.9);
        let mut sorted = x.clone();
        sorted.sort_by(f32::total_cmp);
        let exact_hi = sorted[(0.999 * sorted.len() as f64) as usize];
        let exact_lo = sorted[(0.001 * sorted.len() as f64) as usize];
        let w = 2.0 * g.range / HIST_BINS as f32;
        assert!(
            hi >= exact_hi - w && hi <= exact_hi + 2.0 * w,
            "{hi} vs {exact_hi}"
        );
        assert!(
            lo <= exact_lo + w && lo >= exact_lo - 2.0 * w,
            "{lo} vs {exact_lo}"
        );
    }

    #[test]
    fn sqnr_of_a_known_error() {
        // Signal energy 4 * 100 = 400, noise 4 * 0.01 = 0.04: 10 * log10(1e4) = 40 dB.
        let x = [10.0f32, -10.0, 10.0, -10.0];
        let y = [10.1f32, -10.1, 9.9, -9.9];
        let mut a = SqnrAccumulator::default();
        a.add(&x, &y);
        assert!((a.db() - 40.0).abs() < 1e-3, "{}", a.db());
        a.add(&x, &x);
        assert!((a.db() - 43.0103).abs() < 1e-3, "{}", a.db());
        assert_eq!(sqnr_db(1.0, 0.0), f64::INFINITY);
        assert_eq!(sqnr_db(0.0, 1.0), f64::NEG_INFINITY);
        // Quantization of a uniform signal: about 6.02 dB per bit + 1.76 dB (full scale sine)
        // — for a uniform full-scale signal the SQNR of 8 bits is 20*log10(256) = 48.2 dB.
        let q = QParams::new(2.0 / 256.0, 0);
        let xs: Vec<f32> = (0..100_000)
            .map(|i| -1.0 + 2.0 * (i as f32 + 0.5) / 1e5)
            .collect();
        let qs: Vec<i8> = xs.iter().map(|&v| quantize(v, q)).collect();
        let mut b = SqnrAccumulator::default();
        b.add_quantized(&xs, &qs, q);
        assert!((b.db() - 48.16).abs() < 0.3, "{}", b.db());
    }

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
                            + (x as f32 / 9.0).sin() * 0.3
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
