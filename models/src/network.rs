//! The reference network in two forms, float and INT8: a shared camera backbone and the
//! detection and segmentation heads that run on the bird's-eye-view (BEV) grid. Weights are
//! drawn from a seeded PRNG until trained weights exist, or loaded from a calibrated
//! safetensors file ([`crate::weights`]) through [`NetConfig::trained`].
//!
//! # Contract
//!
//! - **Backbone** (shared over cameras), per camera `in_h × in_w × 3` NHWC `i8` →
//!   `ceil(in_h/8) × ceil(in_w/8) × feat_c`: conv3x3 s2 p1 3→16 ReLU, conv3x3 s2 p1 16→32 ReLU,
//!   conv3x3 s2 p1 32→feat_c ReLU (64×128 → 8×16×64 with the default config). Its input is
//!   quantized with [`Backbone::input_q`] = `{ scale: 1/128, zero_point: 0 }`, i.e.
//!   `pixel / 255 * 2 - 1` in `[-1, 1)` (1.0 saturates to 127).
//! - **Heads** are one generic type, [`Head`], parametrised by its [`HeadKind`] (hidden
//!   width, output channel groups, seed streams): [`DetHead`] = `Head<Det>` and
//!   [`SegHead`] = `Head<Seg>`.
//!   - Detection, on BEV features `ny × nx × bev_c` (quantized with the backbone's output
//!     parameters, see [`bev_q`]): conv1x1 bev_c→32 ReLU, then conv1x1 32→`classes`
//!     heatmap logits ([`DetHead::heat_q`]) and conv1x1 32→6 box regression channels `dx,
//!     dy, log_length, log_width, sin_yaw, cos_yaw` ([`DetHead::reg_q`]), written side by
//!     side into one `ny × nx × (classes + 6)` tensor, heatmap channels first. In an ONNX
//!     export they are two `QLinearConv` nodes with their own output scales.
//!   - Segmentation: conv1x1 bev_c→16 ReLU, conv1x1 16→`seg_classes` logits (0 = other,
//!     1 = drivable, 2 = lane marking), one output scale ([`SegHead::logit_q`]), and
//!     [`SegHead::argmax`] (ties go to the lowest class index).
//! - **Float reference**: [`FloatNetwork`] holds the `f32` weights and biases of every layer
//!   ([`FloatConv`], layout `[out_c][k][k][in_c]`, NHWC activations) and runs the same
//!   network in `f32` ([`FloatConv::forward`], one fixed summation order). The INT8 network
//!   is built from it and per-tensor activation parameters ([`ActQParams`]) by
//!   [`Backbone::from_float`] / [`Head::from_float`]: weights symmetric per output channel
//!   ([`crate::quant::quantize_weights_per_channel`]), biases
//!   ([`crate::quant::quantize_bias`]) with scale `in_scale * w_scale[c]`.
//! - **Seeded weights**: for each layer, `f32` weights uniform in `±sqrt(6 / fan_in)` (He
//!   uniform) and a small bias (`±0.05`) drawn from a [`SplitMix64`](redline_runtime::rng::SplitMix64) stream derived from
//!   [`NetConfig::seed`] and the layer.
//! - **Built-in calibration** (construction time, used when no trained weights are given):
//!   min-max ([`QParams::from_min_max`]) of each layer's float output on a seeded random
//!   input (backbone: a uniform random image; heads: 1024 random BEV feature vectors, half of
//!   the channels at 0, the rest uniform over the positive range of the input quantization),
//!   propagated through the float network. Calibration on real frames is
//!   [`crate::calibrate`]'s job.
//! - **Determinism**: the same [`NetConfig`] gives bit-identical weights, quantization
//!   parameters and outputs on every run and machine (integer PRNG, fixed-order float sums,
//!   the integer kernel of [`crate::conv`]).
//! - **Rows**: the heads are 1x1 convolutions, so BEV row `r` of the output depends only on
//!   BEV row `r` of the input: `forward_rows` over any static split of `0..ny` gives the
//!   same tensor as `forward`, and a chunk needs scratch only for its own rows.
//!
//! # Cost
//!
//! Construction allocates and runs the float network once (milliseconds). `forward*`,
//! `forward_rows*` and `argmax` of the INT8 network are per-frame calls: no allocation, no
//! lock, no logging, no panic (wrong buffer sizes are returned as [`ModelError`]); they cost
//! [`Backbone::macs`] / [`Head::macs`] multiply-adds of the scalar kernel. The float forward
//! passes ([`FloatConv::forward`], [`FloatNetwork::backbone_forward`], ...) allocate: they
//! are for calibration, tests and reports, never for the frame loop.
//!
//! # Never
//!
//! Nothing here owns threads, reads the clock or keeps state between calls: a network is
//! immutable after construction and can be shared by reference across lanes.

use crate::conv::{checked_len, exact_len, ChannelSlot, Conv2d, ConvShape, ModelError};
use crate::quant::{dequantize, quantize_bias, try_quantize_weights_per_channel, QParams};
use redline_runtime::rng::SplitMix64;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

/// Input channels of the backbone (RGB).
pub const IMAGE_CHANNELS: usize = 3;
/// Box regression channels of the detection head: `dx, dy, log_length, log_width,
/// sin_yaw, cos_yaw`.
pub const REG_CHANNELS: usize = 6;
/// Hidden channels of the detection head.
pub const DET_HIDDEN: usize = 32;
/// Hidden channels of the segmentation head.
pub const SEG_HIDDEN: usize = 16;
/// Channels of the backbone's intermediate activations.
pub const BACKBONE_HIDDEN: [usize; 2] = [16, 32];
/// Feature vectors used to calibrate a head.
const HEAD_CALIB_PIXELS: usize = 1024;
/// Bias range of the seeded layers (real units).
const BIAS_RANGE: f32 = 0.05;

/// Quantized layers loaded from a calibrated weights file ([`crate::weights`]): when
/// [`NetConfig::trained`] holds them, [`Backbone::new`], [`DetHead::new`] and
/// [`SegHead::new`] use these layers instead of the seeded ones.
#[derive(Clone, Debug)]
pub struct TrainedLayers {
    /// The three backbone layers, first to last.
    pub backbone: Vec<Conv2d>,
    /// Detection head: hidden, heatmap, regression.
    pub det: Vec<Conv2d>,
    /// Segmentation head: hidden, logits.
    pub seg: Vec<Conv2d>,
}

/// Configuration of the reference network.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Camera image height fed to the backbone (default 64).
    pub in_h: usize,
    /// Camera image width fed to the backbone (default 128).
    pub in_w: usize,
    /// Backbone output channels (default 64).
    pub feat_c: usize,
    /// BEV feature channels; must equal `feat_c` (default 64).
    pub bev_c: usize,
    /// Detection classes (heatmap channels, default 3).
    pub classes: usize,
    /// Segmentation classes (default 3: other, drivable, lane marking).
    pub seg_classes: usize,
    /// Seed of every weight and calibration stream (ignored when `trained` is set).
    pub seed: u64,
    /// Calibrated INT8 layers to use instead of the seeded ones (default `None`). Set it from
    /// [`crate::weights::QuantizedNetwork::net_config`], which also sets the shape fields
    /// to the file's.
    pub trained: Option<Arc<TrainedLayers>>,
}

impl PartialEq for NetConfig {
    /// Field by field; trained layers compare by identity (the same loaded file).
    fn eq(&self, o: &Self) -> bool {
        self.in_h == o.in_h
            && self.in_w == o.in_w
            && self.feat_c == o.feat_c
            && self.bev_c == o.bev_c
            && self.classes == o.classes
            && self.seg_classes == o.seg_classes
            && self.seed == o.seed
            && match (&self.trained, &o.trained) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            in_h: 64,
            in_w: 128,
            feat_c: 64,
            bev_c: 64,
            classes: 3,
            seg_classes: 3,
            seed: 0x5EED_2ED1_14E0,
            trained: None,
        }
    }
}

impl NetConfig {
    /// Checks the configuration: image sides in `1..=4096`, `feat_c` in `1..=1024`,
    /// `bev_c == feat_c`, `classes` in `1..=64`, `seg_classes` in `1..=255`.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |reason: String| Err(ModelError::InvalidConfig { reason });
        if !(1..=4096).contains(&self.in_h) || !(1..=4096).contains(&self.in_w) {
            return bad(format!(
                "image {}x{}: in_h and in_w must be in 1..=4096",
                self.in_h, self.in_w
            ));
        }
        if !(1..=1024).contains(&self.feat_c) {
            return bad(format!("feat_c = {}: must be in 1..=1024", self.feat_c));
        }
        if self.bev_c != self.feat_c {
            return bad(format!(
                "bev_c = {} but feat_c = {}: the BEV grid carries the backbone features, set \
                 bev_c = feat_c",
                self.bev_c, self.feat_c
            ));
        }
        if !(1..=64).contains(&self.classes) {
            return bad(format!("classes = {}: must be in 1..=64", self.classes));
        }
        if !(1..=255).contains(&self.seg_classes) {
            return bad(format!(
                "seg_classes = {}: must be in 1..=255 (argmax writes u8)",
                self.seg_classes
            ));
        }
        Ok(())
    }

    /// The shapes of the three backbone layers for this config.
    pub fn backbone_shapes(&self) -> [ConvShape; 3] {
        let chans = [
            IMAGE_CHANNELS,
            BACKBONE_HIDDEN[0],
            BACKBONE_HIDDEN[1],
            self.feat_c,
        ];
        std::array::from_fn(|i| ConvShape {
            in_c: chans[i],
            out_c: chans[i + 1],
            k: 3,
            stride: 2,
            pad: 1,
        })
    }
}

/// Stream ids of the seeded layers (stable: changing them changes every model).
mod stream {
    pub const BACKBONE: u64 = 0x100;
    pub const BACKBONE_CALIB: u64 = 0x1FF;
    pub const DET: u64 = 0x200;
    pub const DET_CALIB: u64 = 0x2FF;
    pub const SEG: u64 = 0x300;
    pub const SEG_CALIB: u64 = 0x3FF;
}

fn invalid_config(reason: String) -> ModelError {
    ModelError::InvalidConfig { reason }
}

/// One `f32` convolution layer: the float reference of a [`Conv2d`] (NHWC activations,
/// weights `[out_c][k][k][in_c]`, zero padding, optional ReLU).
#[derive(Clone, Debug, PartialEq)]
pub struct FloatConv {
    /// Channels, kernel, stride, padding.
    pub shape: ConvShape,
    /// `f32` weights, `[out_c][k][k][in_c]`.
    pub weights: Vec<f32>,
    /// `f32` bias per output channel.
    pub bias: Vec<f32>,
    /// ReLU after the bias.
    pub relu: bool,
}

impl FloatConv {
    /// Builds and checks a float layer (non-zero channels, `k, stride >= 1`, `pad < k`,
    /// `out_c * k * k * in_c` finite weights and `out_c` finite biases).
    pub fn new(
        shape: ConvShape,
        weights: Vec<f32>,
        bias: Vec<f32>,
        relu: bool,
    ) -> Result<Self, ModelError> {
        let ConvShape {
            in_c,
            out_c,
            k,
            stride,
            pad,
        } = shape;
        let bad = |reason: String| Err(ModelError::InvalidLayer { reason });
        if in_c == 0 || out_c == 0 || k == 0 || stride == 0 || pad >= k {
            return bad(format!(
                "float layer {shape:?}: channels, k and stride must be >= 1 and pad < k"
            ));
        }
        let n = out_c
            .checked_mul(k * k)
            .and_then(|v| v.checked_mul(in_c))
            .unwrap_or(usize::MAX);
        if weights.len() != n || bias.len() != out_c {
            return bad(format!(
                "float layer {shape:?}: {} weights and {} biases given, expected {n} \
                 (layout [out_c][k][k][in_c]) and {out_c}",
                weights.len(),
                bias.len()
            ));
        }
        if weights.iter().chain(&bias).any(|v| !v.is_finite()) {
            return bad(format!(
                "float layer {shape:?}: weights and biases must be finite"
            ));
        }
        Ok(Self {
            shape,
            weights,
            bias,
            relu,
        })
    }

    /// Output height and width for an `in_h × in_w` input (the rule of [`Conv2d::out_hw`]).
    pub fn out_hw(&self, in_h: usize, in_w: usize) -> (usize, usize) {
        let s = self.shape;
        let dim = |n: usize| {
            if n == 0 || n + 2 * s.pad < s.k {
                0
            } else {
                (n + 2 * s.pad - s.k) / s.stride + 1
            }
        };
        (dim(in_h), dim(in_w))
    }

    /// The float forward pass over an `in_h × in_w × in_c` NHWC input: one fixed summation
    /// order (bias, then taps row by row, channels in order), so the result is the same on
    /// every machine. Allocates the output: calibration and tests only.
    pub fn forward(&self, input: &[f32], in_h: usize, in_w: usize) -> Result<Vec<f32>, ModelError> {
        let s = self.shape;
        let (oh, ow) = self.out_hw(in_h, in_w);
        if oh == 0 || ow == 0 {
            return Err(ModelError::InputTooSmall {
                in_h,
                in_w,
                k: s.k,
                pad: s.pad,
            });
        }
        let expected = checked_len(&[in_h, in_w, s.in_c], "input")?;
        exact_len(input.len(), expected, "float layer input")?;
        let taps = s.k * s.k * s.in_c;
        let mut out = vec![0f32; oh * ow * s.out_c];
        for oy in 0..oh {
            for ox in 0..ow {
                let o = &mut out[(oy * ow + ox) * s.out_c..(oy * ow + ox + 1) * s.out_c];
                o.copy_from_slice(&self.bias);
                for ky in 0..s.k {
                    let iy = (oy * s.stride + ky) as isize - s.pad as isize;
                    if iy < 0 || iy as usize >= in_h {
                        continue;
                    }
                    for kx in 0..s.k {
                        let ix = (ox * s.stride + kx) as isize - s.pad as isize;
                        if ix < 0 || ix as usize >= in_w {
                            continue;
                        }
                        let base = (iy as usize * in_w + ix as usize) * s.in_c;
                        let x = &input[base..base + s.in_c];
                        let woff = (ky * s.k + kx) * s.in_c;
                        for (oc, acc) in o.iter_mut().enumerate() {
                            let w = &self.weights[oc * taps + woff..oc * taps + woff + s.in_c];
                            let mut sum = 0f32;
                            for (a, b) in x.iter().zip(w) {
                                sum += a * b;
                            }
                            *acc += sum;
                        }
                    }
                }
                if self.relu {
                    o.iter_mut().for_each(|v| *v = v.max(0.0));
                }
            }
        }
        Ok(out)
    }

    /// Quantizes this layer for input parameters `in_q`: symmetric per-channel weights and
    /// `i32` biases, the output channels split into consecutive `groups` (summing to
    /// `out_c`), one [`Conv2d`] per group with output parameters `out_qs[g]`.
    pub fn quantize(
        &self,
        in_q: QParams,
        groups: &[usize],
        out_qs: &[QParams],
    ) -> Result<Vec<Conv2d>, ModelError> {
        let s = self.shape;
        if groups.iter().sum::<usize>() != s.out_c || groups.len() != out_qs.len() {
            return Err(ModelError::InvalidLayer {
                reason: format!(
                    "output groups {groups:?} with {} output parameters do not split the \
                     {} output channels: give one group size per output parameter, summing \
                     to out_c",
                    out_qs.len(),
                    s.out_c
                ),
            });
        }
        let taps = s.k * s.k * s.in_c;
        let (wq, ws) = try_quantize_weights_per_channel(&self.weights, s.out_c)?;
        let mut layers = Vec::with_capacity(groups.len());
        let mut first = 0;
        for (&n, &out_q) in groups.iter().zip(out_qs) {
            let oc = first..first + n;
            let bias = oc
                .clone()
                .map(|c| quantize_bias(self.bias[c], in_q.scale, ws[c]))
                .collect();
            layers.push(Conv2d::new(
                ConvShape { out_c: n, ..s },
                wq[oc.start * taps..oc.end * taps].to_vec(),
                ws[oc].to_vec(),
                bias,
                in_q,
                out_q,
                self.relu,
            )?);
            first += n;
        }
        Ok(layers)
    }

    /// Draws a seeded He-uniform layer: weights `±sqrt(6 / fan_in)`, then biases `±0.05`.
    fn seeded(rng: &mut SplitMix64, shape: ConvShape, relu: bool) -> Result<Self, ModelError> {
        let fan_in = shape.k * shape.k * shape.in_c;
        let a = (6.0 / fan_in as f32).sqrt();
        let w = (0..fan_in * shape.out_c)
            .map(|_| rng.uniform(-a, a))
            .collect();
        let b = (0..shape.out_c)
            .map(|_| rng.uniform(-BIAS_RANGE, BIAS_RANGE))
            .collect();
        Self::new(shape, w, b, relu)
    }
}

/// Smallest and largest value of a tensor (`(+inf, -inf)` when empty).
fn min_max(v: &[f32]) -> (f32, f32) {
    v.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// What distinguishes the heads: hidden width, output channel groups, seed streams.
pub trait HeadKind: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Name in messages and weight files (`"det"`, `"seg"`).
    const NAME: &'static str;
    /// Hidden channels.
    const HIDDEN: usize;
    /// Weight and calibration seed streams.
    const STREAMS: (u64, u64);
    /// Output channel groups, each a layer with its own output scale.
    fn groups(cfg: &NetConfig) -> Vec<usize>;
    /// This head's layers in trained weights.
    fn trained(t: &TrainedLayers) -> &[Conv2d];
}

/// Marker of the detection head: groups `[classes, 6]` (heatmap, box regression).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Det;

/// Marker of the segmentation head: one group of `seg_classes` logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg;

impl HeadKind for Det {
    const NAME: &'static str = "det";
    const HIDDEN: usize = DET_HIDDEN;
    const STREAMS: (u64, u64) = (stream::DET, stream::DET_CALIB);
    fn groups(cfg: &NetConfig) -> Vec<usize> {
        vec![cfg.classes, REG_CHANNELS]
    }
    fn trained(t: &TrainedLayers) -> &[Conv2d] {
        &t.det
    }
}

impl HeadKind for Seg {
    const NAME: &'static str = "seg";
    const HIDDEN: usize = SEG_HIDDEN;
    const STREAMS: (u64, u64) = (stream::SEG, stream::SEG_CALIB);
    fn groups(cfg: &NetConfig) -> Vec<usize> {
        vec![cfg.seg_classes]
    }
    fn trained(t: &TrainedLayers) -> &[Conv2d] {
        &t.seg
    }
}

/// The float form of one head: hidden 1x1 conv + ReLU, output 1x1 conv whose channels are
/// split into `groups`.
#[derive(Clone, Debug, PartialEq)]
pub struct FloatHead {
    /// Hidden layer.
    pub hidden: FloatConv,
    /// Output layer (all groups).
    pub out: FloatConv,
    /// Output channel groups (each its own quantized layer and output scale).
    pub groups: Vec<usize>,
}

impl FloatHead {
    fn seeded<K: HeadKind>(cfg: &NetConfig) -> Result<Self, ModelError> {
        let mut rng = SplitMix64::stream(cfg.seed, K::STREAMS.0);
        let groups = K::groups(cfg);
        let out_c = groups.iter().sum();
        let hidden = FloatConv::seeded(&mut rng, one_by_one(cfg.bev_c, K::HIDDEN), true)?;
        let out = FloatConv::seeded(&mut rng, one_by_one(K::HIDDEN, out_c), false)?;
        Ok(Self {
            hidden,
            out,
            groups,
        })
    }

    /// Float forward over `n` feature vectors (`n * bev_c`): (hidden, output) activations.
    pub fn forward(&self, bev: &[f32], n: usize) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        let h = self.hidden.forward(bev, n, 1)?;
        let o = self.out.forward(&h, n, 1)?;
        Ok((h, o))
    }
}

fn one_by_one(in_c: usize, out_c: usize) -> ConvShape {
    ConvShape {
        in_c,
        out_c,
        k: 1,
        stride: 1,
        pad: 0,
    }
}

/// The whole network in `f32`: the weights the INT8 network is quantized from.
#[derive(Clone, Debug, PartialEq)]
pub struct FloatNetwork {
    /// The configuration the shapes follow (`trained` is always `None` here).
    pub config: NetConfig,
    /// The three backbone layers.
    pub backbone: Vec<FloatConv>,
    /// Detection head.
    pub det: FloatHead,
    /// Segmentation head.
    pub seg: FloatHead,
}

impl FloatNetwork {
    /// The seeded float network of `cfg` (the weights [`Backbone::new`] and the heads
    /// quantize when no trained layers are given).
    pub fn seeded(cfg: &NetConfig) -> Result<Self, ModelError> {
        cfg.validate()?;
        let config = NetConfig {
            trained: None,
            ..cfg.clone()
        };
        Ok(Self {
            backbone: seeded_backbone(&config)?,
            det: FloatHead::seeded::<Det>(&config)?,
            seg: FloatHead::seeded::<Seg>(&config)?,
            config,
        })
    }

    /// Checks that every layer has the shape `config` implies (after loading from a file).
    pub fn check_shapes(&self) -> Result<(), ModelError> {
        let cfg = &self.config;
        cfg.validate()?;
        let want = cfg.backbone_shapes();
        let bad = |what: String| Err(invalid_config(what));
        if self.backbone.len() != 3 {
            return bad(format!(
                "float backbone has {} layers, expected 3",
                self.backbone.len()
            ));
        }
        for (i, (l, s)) in self.backbone.iter().zip(want).enumerate() {
            if l.shape != s || !l.relu {
                return bad(format!(
                    "float backbone layer {i} is {:?} (relu {}), expected {s:?} with relu",
                    l.shape, l.relu
                ));
            }
        }
        for (name, h, hidden, groups) in [
            ("det", &self.det, DET_HIDDEN, Det::groups(cfg)),
            ("seg", &self.seg, SEG_HIDDEN, Seg::groups(cfg)),
        ] {
            let out_c = groups.iter().sum();
            if h.hidden.shape != one_by_one(cfg.bev_c, hidden)
                || h.out.shape != one_by_one(hidden, out_c)
                || h.groups != groups
                || !h.hidden.relu
                || h.out.relu
            {
                return bad(format!(
                    "float {name} head has layers {:?} -> {:?} (groups {:?}), expected 1x1 \
                     {} -> {hidden} ReLU -> {out_c} (groups {groups:?})",
                    h.hidden.shape, h.out.shape, h.groups, cfg.bev_c
                ));
            }
        }
        Ok(())
    }

    /// Float backbone over one camera image (`in_h × in_w × 3`, real values): the three
    /// layer outputs, first to last. Allocates.
    pub fn backbone_forward(&self, image: &[f32]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (mut h, mut w) = (self.config.in_h, self.config.in_w);
        let mut acts: Vec<Vec<f32>> = Vec::with_capacity(3);
        for l in &self.backbone {
            let y = l.forward(acts.last().map_or(image, |v| v.as_slice()), h, w)?;
            (h, w) = l.out_hw(h, w);
            acts.push(y);
        }
        Ok(acts)
    }

    /// Feature shape `(h, w, c)` of the backbone.
    pub fn backbone_output_shape(&self) -> (usize, usize, usize) {
        let (mut h, mut w) = (self.config.in_h, self.config.in_w);
        for l in &self.backbone {
            (h, w) = l.out_hw(h, w);
        }
        (h, w, self.config.feat_c)
    }
}

fn seeded_backbone(cfg: &NetConfig) -> Result<Vec<FloatConv>, ModelError> {
    cfg.backbone_shapes()
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let mut rng = SplitMix64::stream(cfg.seed, stream::BACKBONE + i as u64);
            FloatConv::seeded(&mut rng, s, true)
        })
        .collect()
}

/// Activation quantization of one head: hidden output, then one per output group.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadQParams {
    /// Hidden activation (post-ReLU).
    pub hidden: QParams,
    /// Output groups, in order.
    pub outs: Vec<QParams>,
}

/// Per-tensor activation quantization of the whole network (the calibration result).
/// The backbone input is fixed ([`Backbone::input_q`]); the heads' input is the
/// backbone's output.
#[derive(Clone, Debug, PartialEq)]
pub struct ActQParams {
    /// Output of each backbone layer.
    pub backbone: [QParams; 3],
    /// Detection head.
    pub det: HeadQParams,
    /// Segmentation head.
    pub seg: HeadQParams,
}

/// Splits `buf` into the first `len` elements, or reports it too small.
fn prefix<'a>(
    buf: &'a mut [i8],
    len: usize,
    what: &'static str,
) -> Result<&'a mut [i8], ModelError> {
    let got = buf.len();
    buf.get_mut(..len).ok_or(ModelError::BufferTooSmall {
        what,
        needed: len,
        got,
    })
}

/// The shared camera backbone: three conv3x3 stride-2 ReLU layers, 3 → 16 → 32 → `feat_c`.
#[derive(Clone, Debug)]
pub struct Backbone {
    layers: [Conv2d; 3],
    /// Input, then each layer's output spatial size.
    hw: [(usize, usize); 4],
}

impl Backbone {
    /// The backbone for `cfg`: its trained layers when [`NetConfig::trained`] is set, else
    /// the seeded float network quantized with the built-in calibration (module docs).
    pub fn new(cfg: &NetConfig) -> Result<Self, ModelError> {
        cfg.validate()?;
        if let Some(t) = &cfg.trained {
            return Self::from_layers(cfg, t.backbone.clone());
        }
        let float = FloatNetwork::seeded(cfg)?;
        let mut calib_rng = SplitMix64::stream(cfg.seed, stream::BACKBONE_CALIB);
        let q_in = Self::input_q_const();
        let image: Vec<f32> = (0..cfg.in_h * cfg.in_w * IMAGE_CHANNELS)
            .map(|_| dequantize(calib_rng.next_i8(), q_in))
            .collect();
        let acts = float.backbone_forward(&image)?;
        let act: [QParams; 3] = std::array::from_fn(|i| {
            let (lo, hi) = min_max(&acts[i]);
            QParams::from_min_max(lo, hi)
        });
        Self::from_float(&float, &act)
    }

    /// Quantizes the float backbone of `float` with the activation parameters `act` (the
    /// output of each layer).
    pub fn from_float(float: &FloatNetwork, act: &[QParams; 3]) -> Result<Self, ModelError> {
        float.check_shapes()?;
        let mut q = Self::input_q_const();
        let mut layers = Vec::with_capacity(3);
        for (l, &out_q) in float.backbone.iter().zip(act) {
            let conv = l
                .quantize(q, &[l.shape.out_c], &[out_q])?
                .pop()
                .ok_or_else(|| invalid_config("backbone layer quantized to nothing".into()))?;
            q = out_q;
            layers.push(conv);
        }
        Self::from_layers(&float.config, layers)
    }

    /// Assembles the backbone from quantized layers, checking their shapes against `cfg`,
    /// the input quantization and that each layer's input parameters are the previous
    /// layer's output parameters.
    pub fn from_layers(cfg: &NetConfig, layers: Vec<Conv2d>) -> Result<Self, ModelError> {
        cfg.validate()?;
        let shapes = cfg.backbone_shapes();
        let layers: [Conv2d; 3] = layers.try_into().map_err(|l: Vec<Conv2d>| {
            invalid_config(format!(
                "backbone has {} layers, expected 3 (conv3x3 s2 3->16->32->feat_c)",
                l.len()
            ))
        })?;
        let mut q = Self::input_q_const();
        let mut hw = [(cfg.in_h, cfg.in_w); 4];
        for (i, (l, s)) in layers.iter().zip(shapes).enumerate() {
            if l.shape() != s || !l.relu {
                return Err(invalid_config(format!(
                    "backbone layer {i} is {:?} (relu {}), expected {s:?} with ReLU for \
                     feat_c = {}",
                    l.shape(),
                    l.relu,
                    cfg.feat_c
                )));
            }
            if l.in_q != q {
                return Err(invalid_config(format!(
                    "backbone layer {i} input quantization {:?} is not the previous \
                     tensor's {q:?}",
                    l.in_q
                )));
            }
            q = l.out_q;
            hw[i + 1] = l.out_hw(hw[i].0, hw[i].1);
        }
        Ok(Self { layers, hw })
    }

    const fn input_q_const() -> QParams {
        QParams::new(1.0 / 128.0, 0)
    }

    /// What preprocessing must produce: scale 1/128, zero point 0 (`pixel / 255 * 2 - 1`,
    /// quantized with [`crate::quant::quantize`]).
    pub fn input_q(&self) -> QParams {
        Self::input_q_const()
    }

    /// Input shape `(in_h, in_w, 3)`.
    pub fn input_shape(&self) -> (usize, usize, usize) {
        (self.hw[0].0, self.hw[0].1, IMAGE_CHANNELS)
    }

    /// Feature shape `(h, w, c)`: `(ceil(in_h/8), ceil(in_w/8), feat_c)`.
    pub fn output_shape(&self) -> (usize, usize, usize) {
        (self.hw[3].0, self.hw[3].1, self.layers[2].out_c)
    }

    /// Quantization of the output features (post-ReLU, calibrated).
    pub fn output_q(&self) -> QParams {
        self.layers[2].out_q
    }

    /// The three layers, first to last (for export and for other kernels to check against).
    pub fn layers(&self) -> &[Conv2d] {
        &self.layers
    }

    /// Spatial size `(h, w)` of the input (`i = 0`) or of layer `i`'s output (`1..=3`).
    pub fn act_hw(&self, i: usize) -> Option<(usize, usize)> {
        self.hw.get(i).copied()
    }

    fn act_len(&self, i: usize) -> usize {
        self.hw[i].0 * self.hw[i].1 * self.layers[i - 1].out_c
    }

    /// Elements (bytes) of scratch one forward pass needs: the two intermediate activations.
    pub fn scratch_len(&self) -> usize {
        self.act_len(1) + self.act_len(2)
    }

    /// Multiply-adds of one forward pass (one camera).
    pub fn macs(&self) -> u64 {
        self.layers
            .iter()
            .zip(&self.hw)
            .map(|(l, &(h, w))| l.macs(h, w))
            .sum()
    }

    /// One camera: `input` (`in_h × in_w × 3` NHWC `i8`) → `out` (`output_shape` elements).
    /// `scratch` must hold at least [`Backbone::scratch_len`] elements; afterwards its first
    /// [`Backbone::scratch_len`] elements hold layer 1's then layer 2's output. Zero
    /// allocation.
    pub fn forward(
        &self,
        input: &[i8],
        scratch: &mut [i8],
        out: &mut [i8],
    ) -> Result<(), ModelError> {
        let (h, w, c) = self.input_shape();
        exact_len(input.len(), h * w * c, "backbone input")?;
        let (oh, ow, oc) = self.output_shape();
        exact_len(out.len(), oh * ow * oc, "backbone output")?;
        let need = self.scratch_len();
        let scratch = prefix(scratch, need, "backbone scratch")?;
        let (a1, a2) = scratch.split_at_mut(self.act_len(1));
        self.layers[0].forward(input, h, w, a1)?;
        self.layers[1].forward(a1, self.hw[1].0, self.hw[1].1, a2)?;
        self.layers[2].forward(a2, self.hw[2].0, self.hw[2].1, out)
    }
}

/// The quantization of the BEV features the heads expect: the backbone's output
/// parameters (the view transform carries features without rescaling them). Builds the
/// backbone once (construction time).
pub fn bev_q(cfg: &NetConfig) -> Result<QParams, ModelError> {
    Ok(Backbone::new(cfg)?.output_q())
}

/// Random post-ReLU feature vectors in `q`: each element is `zero_point` (real 0) with
/// probability 1/2, else uniform over `zero_point..=127`.
fn head_calibration_input(rng: &mut SplitMix64, c: usize, q: QParams) -> Vec<i8> {
    let zp = i32::from(q.zero_point);
    (0..HEAD_CALIB_PIXELS * c)
        .map(|_| {
            if rng.next_u64() & 1 == 0 {
                q.zero_point
            } else {
                rng.range_i32(zp, 127) as i8
            }
        })
        .collect()
}

/// A 1x1 two-layer head on the BEV grid: hidden conv + ReLU, then one or more output convs
/// writing consecutive channel groups of one output tensor. `K` says which head
/// ([`Det`], [`Seg`]); use the aliases [`DetHead`] and [`SegHead`].
#[derive(Clone, Debug)]
pub struct Head<K: HeadKind> {
    hidden: Conv2d,
    outs: Vec<Conv2d>,
    ny: usize,
    nx: usize,
    out_c: usize,
    kind: PhantomData<K>,
}

/// The detection head: conv1x1 bev_c→32 ReLU, conv1x1 32→(`classes` heatmap logits + 6 box
/// regression channels), on a `ny × nx` BEV grid.
pub type DetHead = Head<Det>;

/// The segmentation head: conv1x1 bev_c→16 ReLU, conv1x1 16→`seg_classes` logits.
pub type SegHead = Head<Seg>;

fn check_grid(ny: usize, nx: usize) -> Result<(), ModelError> {
    if ny == 0 || nx == 0 || ny > 4096 || nx > 4096 {
        return Err(invalid_config(format!(
            "BEV grid {ny}x{nx}: both sides must be in 1..=4096"
        )));
    }
    Ok(())
}

impl<K: HeadKind> Head<K> {
    /// The head for a `ny × nx` grid whose features use [`bev_q`]`(cfg)`: trained layers
    /// when [`NetConfig::trained`] is set, else seeded and calibrated (module docs).
    pub fn new(cfg: &NetConfig, ny: usize, nx: usize) -> Result<Self, ModelError> {
        if let Some(t) = &cfg.trained {
            check_grid(ny, nx)?;
            return Self::from_layers(cfg, K::trained(t).to_vec(), ny, nx);
        }
        Self::with_input_q(cfg, ny, nx, bev_q(cfg)?)
    }

    /// The seeded head for BEV features quantized with `in_q` (calibrated on seeded random
    /// features in `in_q`). With [`NetConfig::trained`] set, the trained layers, whose input
    /// parameters must then equal `in_q`.
    pub fn with_input_q(
        cfg: &NetConfig,
        ny: usize,
        nx: usize,
        in_q: QParams,
    ) -> Result<Self, ModelError> {
        cfg.validate()?;
        check_grid(ny, nx)?;
        if !in_q.is_valid() {
            return Err(invalid_config(format!(
                "BEV input scale {}: must be finite and > 0",
                in_q.scale
            )));
        }
        if let Some(t) = &cfg.trained {
            let head = Self::from_layers(cfg, K::trained(t).to_vec(), ny, nx)?;
            if head.input_q() != in_q {
                return Err(invalid_config(format!(
                    "the trained {} head expects BEV input {:?}, not {in_q:?}",
                    K::NAME,
                    head.input_q()
                )));
            }
            return Ok(head);
        }
        let float = FloatHead::seeded::<K>(cfg)?;
        let mut calib_rng = SplitMix64::stream(cfg.seed, K::STREAMS.1);
        let x: Vec<f32> = head_calibration_input(&mut calib_rng, cfg.bev_c, in_q)
            .iter()
            .map(|&v| dequantize(v, in_q))
            .collect();
        let (h, o) = float.forward(&x, HEAD_CALIB_PIXELS)?;
        let (lo, hi) = min_max(&h);
        let hidden = QParams::from_min_max(lo, hi);
        let out_c = float.out.shape.out_c;
        let mut outs = Vec::with_capacity(float.groups.len());
        let mut first = 0;
        for &n in &float.groups {
            let (lo, hi) = o
                .chunks_exact(out_c)
                .flat_map(|px| &px[first..first + n])
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
            outs.push(QParams::from_min_max(lo, hi));
            first += n;
        }
        Self::from_float_head(cfg, &float, in_q, &HeadQParams { hidden, outs }, ny, nx)
    }

    /// Quantizes a float head: BEV input `in_q`, activations `act`.
    pub fn from_float_head(
        cfg: &NetConfig,
        float: &FloatHead,
        in_q: QParams,
        act: &HeadQParams,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        let hidden = float
            .hidden
            .quantize(in_q, &[float.hidden.shape.out_c], &[act.hidden])?;
        let outs = float.out.quantize(act.hidden, &float.groups, &act.outs)?;
        Self::from_layers(cfg, hidden.into_iter().chain(outs).collect(), ny, nx)
    }

    /// Assembles the head from quantized layers (hidden, then the output groups), checking
    /// their shapes against `cfg` and the chaining of their quantization parameters.
    pub fn from_layers(
        cfg: &NetConfig,
        layers: Vec<Conv2d>,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        cfg.validate()?;
        check_grid(ny, nx)?;
        let groups = K::groups(cfg);
        let mut it = layers.into_iter();
        let hidden = it
            .next()
            .ok_or_else(|| invalid_config(format!("{} head has no layers", K::NAME)))?;
        let outs: Vec<Conv2d> = it.collect();
        let got: Vec<usize> = outs.iter().map(|c| c.out_c).collect();
        let shape_ok = hidden.shape() == one_by_one(cfg.bev_c, K::HIDDEN)
            && hidden.relu
            && got == groups
            && outs
                .iter()
                .all(|c| c.shape() == one_by_one(K::HIDDEN, c.out_c) && !c.relu);
        if !shape_ok {
            return Err(invalid_config(format!(
                "{} head layers do not match the config: expected 1x1 {} -> {} ReLU, then \
                 output groups {groups:?} without ReLU; got {:?} then groups {got:?}",
                K::NAME,
                cfg.bev_c,
                K::HIDDEN,
                hidden.shape()
            )));
        }
        if let Some(c) = outs.iter().find(|c| c.in_q != hidden.out_q) {
            return Err(invalid_config(format!(
                "{} head output layer input quantization {:?} is not the hidden output's {:?}",
                K::NAME,
                c.in_q,
                hidden.out_q
            )));
        }
        Ok(Self {
            hidden,
            outs,
            ny,
            nx,
            out_c: groups.iter().sum(),
            kind: PhantomData,
        })
    }

    /// Quantization of the BEV input.
    pub fn input_q(&self) -> QParams {
        self.hidden.in_q
    }

    /// Channels per BEV cell of the output.
    pub fn out_channels(&self) -> usize {
        self.out_c
    }

    /// Output shape `(ny, nx, out_channels)`.
    pub fn output_shape(&self) -> (usize, usize, usize) {
        (self.ny, self.nx, self.out_c)
    }

    /// Scratch elements a whole-grid forward pass needs (`ny * nx * hidden`).
    pub fn scratch_len(&self) -> usize {
        self.scratch_len_rows(self.ny)
    }

    /// Scratch elements a `forward_rows*` call over `rows` BEV rows needs.
    pub fn scratch_len_rows(&self, rows: usize) -> usize {
        rows * self.nx * self.hidden.out_c
    }

    /// Multiply-adds of one whole-grid forward pass.
    pub fn macs(&self) -> u64 {
        let px = (self.ny * self.nx) as u64;
        px * (self.hidden.in_c * self.hidden.out_c + self.hidden.out_c * self.out_c) as u64
    }

    /// The layers: hidden, then the output groups.
    pub fn layers(&self) -> impl Iterator<Item = &Conv2d> {
        std::iter::once(&self.hidden).chain(&self.outs)
    }

    /// Quantization of the hidden activation and of each output group.
    pub fn act_qparams(&self) -> HeadQParams {
        HeadQParams {
            hidden: self.hidden.out_q,
            outs: self.outs.iter().map(|c| c.out_q).collect(),
        }
    }

    fn check_common(&self, bev: &[i8], rows: &Range<usize>) -> Result<(), ModelError> {
        exact_len(
            bev.len(),
            self.ny * self.nx * self.hidden.in_c,
            "BEV feature input",
        )?;
        if rows.start > rows.end || rows.end > self.ny {
            return Err(ModelError::RowsOutOfRange {
                start: rows.start,
                end: rows.end,
                out_h: self.ny,
            });
        }
        Ok(())
    }

    /// Like [`Head::forward_rows`], but `out_rows` holds only the requested rows
    /// (`rows.len() * nx * out_channels` elements): disjoint chunks for parallel lanes.
    /// Afterwards the first [`Head::scratch_len_rows`] elements of `scratch` hold the hidden
    /// activation of these rows. No allocation.
    pub fn forward_rows_into(
        &self,
        bev: &[i8],
        scratch: &mut [i8],
        out_rows: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        self.check_common(bev, &rows)?;
        let n = rows.end - rows.start;
        exact_len(out_rows.len(), n * self.nx * self.out_c, "head output rows")?;
        if n == 0 {
            return Ok(());
        }
        let hid = prefix(scratch, self.scratch_len_rows(n), "head scratch")?;
        let row_in = self.nx * self.hidden.in_c;
        let bev_rows = &bev[rows.start * row_in..rows.end * row_in];
        // 1x1 stride-1 convolutions are row-local: the chunk is an n-row image of its own.
        self.hidden.forward(bev_rows, n, self.nx, hid)?;
        let mut offset = 0;
        for conv in &self.outs {
            let slot = ChannelSlot {
                pixel_stride: self.out_c,
                channel_offset: offset,
            };
            conv.forward_rows_into_slot(hid, n, self.nx, out_rows, slot, 0..n)?;
            offset += conv.out_c;
        }
        Ok(())
    }

    /// Computes BEV rows `rows` of `out` (the whole `ny * nx * out_channels` tensor; other
    /// rows untouched) from `bev` (the whole `ny * nx * bev_c` grid). `scratch` needs at
    /// least [`Head::scratch_len_rows`]`(rows.len())` elements. No allocation.
    pub fn forward_rows(
        &self,
        bev: &[i8],
        scratch: &mut [i8],
        out: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        self.check_common(bev, &rows)?;
        exact_len(out.len(), self.ny * self.nx * self.out_c, "head output")?;
        let row_out = self.nx * self.out_c;
        let dst = &mut out[rows.start * row_out..rows.end * row_out];
        self.forward_rows_into(bev, scratch, dst, rows)
    }

    /// The whole grid. No allocation.
    pub fn forward(
        &self,
        bev: &[i8],
        scratch: &mut [i8],
        out: &mut [i8],
    ) -> Result<(), ModelError> {
        self.forward_rows(bev, scratch, out, 0..self.ny)
    }
}

impl Head<Det> {
    /// Quantizes the float detection head of `float` for a `ny × nx` grid: BEV input
    /// quantized like the backbone output (`act.backbone[2]`).
    pub fn from_float(
        float: &FloatNetwork,
        act: &ActQParams,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        float.check_shapes()?;
        Self::from_float_head(&float.config, &float.det, act.backbone[2], &act.det, ny, nx)
    }

    /// Quantization of the heatmap logits (channels `0..classes`).
    pub fn heat_q(&self) -> QParams {
        self.outs[0].out_q
    }

    /// Quantization of the box regression channels (`classes..classes + 6`).
    pub fn reg_q(&self) -> QParams {
        self.outs[1].out_q
    }

    /// Heatmap classes.
    pub fn classes(&self) -> usize {
        self.outs[0].out_c
    }
}

impl Head<Seg> {
    /// Quantizes the float segmentation head of `float` for a `ny × nx` grid.
    pub fn from_float(
        float: &FloatNetwork,
        act: &ActQParams,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        float.check_shapes()?;
        Self::from_float_head(&float.config, &float.seg, act.backbone[2], &act.seg, ny, nx)
    }

    /// Quantization of the logits.
    pub fn logit_q(&self) -> QParams {
        self.outs[0].out_q
    }

    /// Per-cell class: the index of the largest logit (ties: the lowest index). `logits` is
    /// `n * seg_classes` for any `n` cells (whole grid or a row chunk), `out_class` is `n`.
    /// One per-tensor scale, so the `i8` argmax is the real-valued argmax. No allocation.
    pub fn argmax(&self, logits: &[i8], out_class: &mut [u8]) -> Result<(), ModelError> {
        let c = self.out_c;
        exact_len(
            logits.len(),
            out_class.len().saturating_mul(c),
            "segmentation logits (cells * seg_classes)",
        )?;
        for (cell, o) in logits.chunks_exact(c).zip(out_class.iter_mut()) {
            let mut best = 0usize;
            for (i, &v) in cell.iter().enumerate().skip(1) {
                if v > cell[best] {
                    best = i;
                }
            }
            *o = best as u8;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn random_image(seed: u64, len: usize) -> Vec<i8> {
        let mut r = SplitMix64::new(seed);
        (0..len).map(|_| r.next_i8()).collect()
    }

    /// A smooth synthetic "road scene": gradients plus a few bright blobs, to check that
    /// calibration on noise also suits structured images.
    fn smooth_image(h: usize, w: usize) -> Vec<i8> {
        let q = QParams::new(1.0 / 128.0, 0);
        let mut img = Vec::with_capacity(h * w * 3);
        for y in 0..h {
            for x in 0..w {
                let (fy, fx) = (y as f32 / h as f32, x as f32 / w as f32);
                let blob = if ((fx - 0.3).powi(2) + (fy - 0.6).powi(2)) < 0.01 {
                    0.8
                } else {
                    0.0
                };
                let rgb = [
                    fy * 1.6 - 0.8 + blob,
                    fx - 0.5,
                    (fx * 9.0).sin() * 0.5 - blob,
                ];
                img.extend(rgb.iter().map(|&v| crate::quant::quantize(v, q)));
            }
        }
        img
    }

    fn backbone_run(b: &Backbone, img: &[i8]) -> Vec<i8> {
        let (h, w, c) = b.output_shape();
        let mut scratch = vec![0i8; b.scratch_len()];
        let mut out = vec![0i8; h * w * c];
        b.forward(img, &mut scratch, &mut out).unwrap();
        out
    }

    /// Mean, standard deviation, fraction saturated at 127, fraction at `zp`.
    fn stats(v: &[i8], zp: i8) -> (f64, f64, f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        let sat = v.iter().filter(|&&x| x == 127).count() as f64 / n;
        let at_zp = v.iter().filter(|&&x| x == zp).count() as f64 / n;
        (mean, var.sqrt(), sat, at_zp)
    }

    /// BEV features built from real backbone outputs: each BEV cell takes the feature vector
    /// of a pseudo-random backbone cell.
    fn bev_from_backbone(b: &Backbone, ny: usize, nx: usize, seed: u64) -> Vec<i8> {
        let (h, w, c) = b.input_shape();
        let feats = backbone_run(b, &random_image(seed, h * w * c));
        let c = b.output_shape().2;
        let cells = feats.len() / c;
        let mut r = SplitMix64::new(seed ^ 1);
        let mut bev = Vec::with_capacity(ny * nx * c);
        for _ in 0..ny * nx {
            let src = (r.next_u64() % cells as u64) as usize;
            bev.extend_from_slice(&feats[src * c..(src + 1) * c]);
        }
        bev
    }

    #[test]
    fn backbone_shapes_and_costs_are_as_documented() {
        let b = Backbone::new(&NetConfig::default()).unwrap();
        assert_eq!(b.input_shape(), (64, 128, 3));
        assert_eq!(b.output_shape(), (8, 16, 64));
        assert_eq!(b.input_q(), QParams::new(1.0 / 128.0, 0));
        assert_eq!(b.scratch_len(), 32 * 64 * 16 + 16 * 32 * 32);
        assert_eq!(
            b.macs(),
            32 * 64 * 16 * 27 + 16 * 32 * 32 * 144 + 8 * 16 * 64 * 288
        );
        let odd = NetConfig {
            in_h: 37,
            in_w: 50,
            feat_c: 8,
            bev_c: 8,
            ..NetConfig::default()
        };
        let b = Backbone::new(&odd).unwrap();
        assert_eq!(b.output_shape(), (5, 7, 8));
        let out = backbone_run(&b, &random_image(3, 37 * 50 * 3));
        assert_eq!(out.len(), 5 * 7 * 8);
    }

    #[test]
    fn same_seed_same_network_and_outputs_other_seed_differs() {
        let cfg = NetConfig::default();
        let (a, b) = (Backbone::new(&cfg).unwrap(), Backbone::new(&cfg).unwrap());
        for (la, lb) in a.layers().iter().zip(b.layers()) {
            assert_eq!(la.weights, lb.weights);
            assert_eq!(la.bias, lb.bias);
            assert_eq!(
                la.w_scales.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
                lb.w_scales.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
            );
            assert_eq!(la.out_q.scale.to_bits(), lb.out_q.scale.to_bits());
            assert_eq!(la.out_q.zero_point, lb.out_q.zero_point);
        }
        let img = random_image(77, 64 * 128 * 3);
        assert_eq!(backbone_run(&a, &img), backbone_run(&b, &img));

        let other = Backbone::new(&NetConfig {
            seed: cfg.seed + 1,
            ..cfg.clone()
        })
        .unwrap();
        assert_ne!(a.layers()[0].weights, other.layers()[0].weights);
        assert_ne!(backbone_run(&a, &img), backbone_run(&other, &img));

        let (d1, d2) = (
            DetHead::new(&cfg, 6, 5).unwrap(),
            DetHead::new(&cfg, 6, 5).unwrap(),
        );
        let bev = bev_from_backbone(&a, 6, 5, 4);
        let run = |d: &DetHead| {
            let mut s = vec![0i8; d.scratch_len()];
            let mut o = vec![0i8; 6 * 5 * d.out_channels()];
            d.forward(&bev, &mut s, &mut o).unwrap();
            o
        };
        assert_eq!(run(&d1), run(&d2));
        let d3 = DetHead::new(
            &NetConfig {
                seed: 9,
                ..cfg.clone()
            },
            6,
            5,
        )
        .unwrap();
        let bev9 = bev_from_backbone(
            &Backbone::new(&NetConfig { seed: 9, ..cfg }).unwrap(),
            6,
            5,
            4,
        );
        let mut s = vec![0i8; d3.scratch_len()];
        let mut o = vec![0i8; 6 * 5 * d3.out_channels()];
        d3.forward(&bev9, &mut s, &mut o).unwrap();
        assert_ne!(o, run(&d1));
    }

    #[test]
    fn backbone_outputs_have_spread() {
        let b = Backbone::new(&NetConfig::default()).unwrap();
        let zp = b.output_q().zero_point;
        for img in [random_image(1234, 64 * 128 * 3), smooth_image(64, 128)] {
            let out = backbone_run(&b, &img);
            let (_, std, sat, at_zp) = stats(&out, zp);
            assert!(std > 8.0, "feature std {std} LSB");
            assert!(sat < 0.05, "{:.1}% of features saturated", sat * 100.0);
            assert!(at_zp < 0.9, "{:.1}% of features are 0", at_zp * 100.0);
        }
        // Every intermediate layer too.
        let img = random_image(99, 64 * 128 * 3);
        let mut scratch = vec![0i8; b.scratch_len()];
        let mut out = vec![0i8; 8 * 16 * 64];
        b.forward(&img, &mut scratch, &mut out).unwrap();
        let (a1, a2) = scratch.split_at(32 * 64 * 16);
        for (act, layer) in [(a1, &b.layers()[0]), (a2, &b.layers()[1])] {
            let (_, std, sat, at_zp) = stats(act, layer.out_q.zero_point);
            assert!(
                std > 8.0 && sat < 0.05 && at_zp < 0.9,
                "std {std} sat {sat} zero {at_zp}"
            );
        }
    }

    #[test]
    fn heads_have_documented_shapes_and_spread() {
        let cfg = NetConfig::default();
        let b = Backbone::new(&cfg).unwrap();
        let (ny, nx) = (20, 24);
        let bev = bev_from_backbone(&b, ny, nx, 11);
        let det = DetHead::new(&cfg, ny, nx).unwrap();
        assert_eq!(det.input_q(), b.output_q());
        assert_eq!(det.out_channels(), 3 + 6);
        assert_eq!(det.output_shape(), (ny, nx, 9));
        assert_eq!(det.scratch_len(), ny * nx * DET_HIDDEN);
        assert_eq!(det.macs(), (ny * nx * (64 * 32 + 32 * 9)) as u64);
        let mut s = vec![0i8; det.scratch_len()];
        let mut o = vec![0i8; ny * nx * 9];
        det.forward(&bev, &mut s, &mut o).unwrap();
        let heat: Vec<i8> = o.chunks_exact(9).flat_map(|c| c[..3].to_vec()).collect();
        let reg: Vec<i8> = o.chunks_exact(9).flat_map(|c| c[3..].to_vec()).collect();
        for (name, v, q) in [("heat", heat, det.heat_q()), ("reg", reg, det.reg_q())] {
            let (_, std, sat, _) = stats(&v, q.zero_point);
            assert!(std > 5.0, "{name} std {std}");
            assert!(sat < 0.05, "{name} saturated {sat}");
        }
        assert_ne!(det.heat_q(), det.reg_q());

        let seg = SegHead::new(&cfg, ny, nx).unwrap();
        assert_eq!(seg.output_shape(), (ny, nx, 3));
        assert_eq!(seg.scratch_len(), ny * nx * SEG_HIDDEN);
        let mut s = vec![0i8; seg.scratch_len()];
        let mut logits = vec![0i8; ny * nx * 3];
        seg.forward(&bev, &mut s, &mut logits).unwrap();
        let (_, std, sat, _) = stats(&logits, seg.logit_q().zero_point);
        assert!(std > 5.0 && sat < 0.05, "seg std {std} sat {sat}");
        let mut cls = vec![0u8; ny * nx];
        seg.argmax(&logits, &mut cls).unwrap();
        // More than one class appears.
        let mut seen = [false; 3];
        cls.iter().for_each(|&c| seen[c as usize] = true);
        assert!(
            seen.iter().filter(|&&s| s).count() >= 2,
            "classes seen {seen:?}"
        );
    }

    #[test]
    fn argmax_ties_go_to_the_lowest_class() {
        let seg =
            SegHead::with_input_q(&NetConfig::default(), 1, 4, QParams::new(0.05, -128)).unwrap();
        let logits = [5, 5, 1, -3, 7, 7, 0, 0, 0, 1, 2, 3];
        let mut cls = [9u8; 4];
        seg.argmax(&logits, &mut cls).unwrap();
        assert_eq!(cls, [0, 1, 0, 2]);
        assert!(seg.argmax(&logits[1..], &mut cls).is_err());
        assert!(seg.argmax(&logits, &mut cls[1..]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn head_row_splits_equal_forward(cuts in proptest::collection::vec(0usize..=9, 0..4), seed in any::<u64>()) {
            let cfg = NetConfig { feat_c: 16, bev_c: 16, ..NetConfig::default() };
            let (ny, nx) = (9, 7);
            let q = QParams::new(0.02, -128);
            let det = DetHead::with_input_q(&cfg, ny, nx, q).unwrap();
            let seg = SegHead::with_input_q(&cfg, ny, nx, q).unwrap();
            let mut r = SplitMix64::new(seed);
            let bev: Vec<i8> = (0..ny * nx * 16).map(|_| r.next_i8()).collect();
            let mut bounds: Vec<usize> = cuts.clone();
            bounds.extend([0, ny]);
            bounds.sort_unstable();
            for (oc, scratch_rows, fwd, rows_fn, into_fn) in [
                (det.out_channels(), det.scratch_len_rows(ny),
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8]| det.forward(b, s, o)) as &dyn Fn(&[i8], &mut [i8], &mut [i8]) -> Result<(), ModelError>,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| det.forward_rows(b, s, o, r)) as &dyn Fn(&[i8], &mut [i8], &mut [i8], Range<usize>) -> Result<(), ModelError>,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| det.forward_rows_into(b, s, o, r)) as &dyn Fn(&[i8], &mut [i8], &mut [i8], Range<usize>) -> Result<(), ModelError>),
                (seg.out_channels(), seg.scratch_len_rows(ny),
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8]| seg.forward(b, s, o)) as _,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| seg.forward_rows(b, s, o, r)) as _,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| seg.forward_rows_into(b, s, o, r)) as _),
            ] {
                let mut scratch = vec![0i8; scratch_rows];
                let mut whole = vec![0i8; ny * nx * oc];
                fwd(&bev, &mut scratch, &mut whole).unwrap();
                let mut split = vec![0x33i8; whole.len()];
                for p in bounds.windows(2).rev() {
                    rows_fn(&bev, &mut scratch, &mut split, p[0]..p[1]).unwrap();
                }
                prop_assert_eq!(&split, &whole);
                let row = nx * oc;
                let mut sliced = vec![0x33i8; whole.len()];
                for p in bounds.windows(2) {
                    // Each chunk gets only the scratch its own rows need.
                    let n = p[1] - p[0];
                    let mut small = vec![0i8; n * nx * if oc == 9 { DET_HIDDEN } else { SEG_HIDDEN }];
                    into_fn(&bev, &mut small, &mut sliced[p[0] * row..p[1] * row], p[0]..p[1]).unwrap();
                }
                prop_assert_eq!(&sliced, &whole);
            }
        }
    }

    #[test]
    fn wrong_buffer_sizes_are_errors_not_panics() {
        let cfg = NetConfig {
            in_h: 16,
            in_w: 16,
            feat_c: 8,
            bev_c: 8,
            ..NetConfig::default()
        };
        let b = Backbone::new(&cfg).unwrap();
        let img = random_image(5, 16 * 16 * 3);
        let mut scratch = vec![0i8; b.scratch_len()];
        let mut out = vec![0i8; 2 * 2 * 8];
        assert!(b.forward(&img, &mut scratch, &mut out).is_ok());
        assert!(matches!(
            b.forward(&img[1..], &mut scratch, &mut out),
            Err(ModelError::BufferSize { .. })
        ));
        assert!(matches!(
            b.forward(&img, &mut scratch[1..], &mut out),
            Err(ModelError::BufferTooSmall { .. })
        ));
        let mut big = vec![0i8; b.scratch_len() + 100];
        assert!(b.forward(&img, &mut big, &mut out).is_ok());
        assert!(b.forward(&img, &mut scratch, &mut out[..31]).is_err());

        let q = b.output_q();
        let det = DetHead::with_input_q(&cfg, 4, 3, q).unwrap();
        let bev = vec![0i8; 4 * 3 * 8];
        let mut s = vec![0i8; det.scratch_len()];
        let mut o = vec![0i8; 4 * 3 * 9];
        assert!(det.forward(&bev, &mut s, &mut o).is_ok());
        assert!(det.forward(&bev[1..], &mut s, &mut o).is_err());
        assert!(det.forward(&bev, &mut s[..10], &mut o).is_err());
        assert!(det.forward(&bev, &mut s, &mut o[1..]).is_err());
        assert!(matches!(
            det.forward_rows(&bev, &mut s, &mut o, 3..5),
            Err(ModelError::RowsOutOfRange { .. })
        ));
        assert!(det.forward_rows_into(&bev, &mut s, &mut o, 0..2).is_err());
        let seg = SegHead::with_input_q(&cfg, 4, 3, q).unwrap();
        let mut so = vec![0i8; 4 * 3 * 2];
        assert!(seg.forward(&bev, &mut s, &mut so).is_err());
    }

    #[test]
    fn bad_configs_are_rejected_with_reasons() {
        let d = NetConfig::default();
        for cfg in [
            NetConfig {
                in_h: 0,
                ..d.clone()
            },
            NetConfig {
                in_w: 5000,
                ..d.clone()
            },
            NetConfig {
                bev_c: 32,
                ..d.clone()
            },
            NetConfig {
                feat_c: 0,
                bev_c: 0,
                ..d.clone()
            },
            NetConfig {
                classes: 0,
                ..d.clone()
            },
            NetConfig {
                seg_classes: 300,
                ..d.clone()
            },
        ] {
            let err = Backbone::new(&cfg)
                .err()
                .or_else(|| DetHead::with_input_q(&cfg, 2, 2, QParams::new(0.1, 0)).err())
                .or_else(|| SegHead::with_input_q(&cfg, 2, 2, QParams::new(0.1, 0)).err());
            assert!(
                matches!(err, Some(ModelError::InvalidConfig { .. })),
                "{cfg:?}: {err:?}"
            );
        }
        assert!(DetHead::with_input_q(&d, 0, 3, QParams::new(0.1, 0)).is_err());
        assert!(SegHead::with_input_q(&d, 3, 3, QParams::new(0.0, 0)).is_err());
    }

    #[test]
    fn float_layers_and_their_quantized_form_agree() {
        let cfg = NetConfig {
            in_h: 16,
            in_w: 24,
            feat_c: 8,
            bev_c: 8,
            ..NetConfig::default()
        };
        let float = FloatNetwork::seeded(&cfg).unwrap();
        float.check_shapes().unwrap();
        let b = Backbone::new(&cfg).unwrap();
        // The float conv equals the f64 reference of its quantized layer up to weight
        // rounding (< 1 % of the output range here).
        let mut r = SplitMix64::new(4);
        let x: Vec<f32> = (0..16 * 24 * 3).map(|_| r.uniform(-1.0, 1.0)).collect();
        let yf = float.backbone[0].forward(&x, 16, 24).unwrap();
        let yq = crate::conv::reference_conv_f32(&b.layers()[0], &x, 16, 24).unwrap();
        let peak = yf.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = yf
            .iter()
            .zip(&yq)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst < 0.01 * peak, "worst {worst} of {peak}");
        // Rebuilding from (float weights, the built-in activation ranges) is bit-identical.
        let act = [
            b.layers()[0].out_q,
            b.layers()[1].out_q,
            b.layers()[2].out_q,
        ];
        let again = Backbone::from_float(&float, &act).unwrap();
        for (a, c) in b.layers().iter().zip(again.layers()) {
            assert_eq!(a.weights, c.weights);
            assert_eq!(a.bias, c.bias);
            assert_eq!(a.out_q, c.out_q);
        }
    }

    #[test]
    fn trained_layers_are_used_and_checked() {
        let cfg = NetConfig {
            in_h: 16,
            in_w: 16,
            feat_c: 8,
            bev_c: 8,
            ..NetConfig::default()
        };
        let b = Backbone::new(&cfg).unwrap();
        let det = DetHead::new(&cfg, 2, 2).unwrap();
        let seg = SegHead::new(&cfg, 2, 2).unwrap();
        // Trained layers from another seed replace the seeded ones.
        let other = NetConfig {
            seed: 99,
            ..cfg.clone()
        };
        let ob = Backbone::new(&other).unwrap();
        let trained = NetConfig {
            trained: Some(Arc::new(TrainedLayers {
                backbone: ob.layers().to_vec(),
                det: DetHead::new(&other, 1, 1)
                    .unwrap()
                    .layers()
                    .cloned()
                    .collect(),
                seg: SegHead::new(&other, 1, 1)
                    .unwrap()
                    .layers()
                    .cloned()
                    .collect(),
            })),
            ..cfg.clone()
        };
        let tb = Backbone::new(&trained).unwrap();
        assert_eq!(tb.layers()[1].weights, ob.layers()[1].weights);
        assert_ne!(tb.layers()[1].weights, b.layers()[1].weights);
        let td = DetHead::new(&trained, 3, 4).unwrap();
        assert_eq!(td.output_shape(), (3, 4, 9));
        assert_ne!(td.heat_q(), det.heat_q());
        assert!(SegHead::new(&trained, 3, 4).is_ok());
        // The trained head refuses a BEV quantization it was not calibrated for.
        let e = SegHead::with_input_q(&trained, 2, 2, QParams::new(0.5, 3)).unwrap_err();
        assert!(e.to_string().contains("trained seg head"), "{e}");
        // Wrong layer counts, shapes or chaining are errors, not panics.
        assert!(Backbone::from_layers(&cfg, b.layers()[..2].to_vec()).is_err());
        let swapped = vec![
            b.layers()[0].clone(),
            b.layers()[2].clone(),
            b.layers()[1].clone(),
        ];
        assert!(Backbone::from_layers(&cfg, swapped).is_err());
        let mut unchained: Vec<Conv2d> = seg.layers().cloned().collect();
        let l = &unchained[1];
        unchained[1] = Conv2d::new(
            l.shape(),
            l.weights.clone(),
            l.w_scales.clone(),
            l.bias.clone(),
            QParams::new(l.in_q.scale * 2.0, l.in_q.zero_point),
            l.out_q,
            false,
        )
        .unwrap();
        let e = SegHead::from_layers(&cfg, unchained, 2, 2).unwrap_err();
        assert!(e.to_string().contains("input quantization"), "{e}");
        let det_layers: Vec<Conv2d> = det.layers().cloned().collect();
        assert!(SegHead::from_layers(&cfg, det_layers, 2, 2).is_err());
        assert_eq!(trained, trained.clone());
        assert_ne!(trained, cfg);
    }

    /// Release-mode timing of the scalar backbone:
    /// `cargo test -p redline-models --release --lib -- --ignored --nocapture bench_backbone`.
    #[test]
    #[ignore]
    fn bench_backbone() {
        let b = Backbone::new(&NetConfig::default()).unwrap();
        let img = random_image(1, 64 * 128 * 3);
        let mut scratch = vec![0i8; b.scratch_len()];
        let mut out = vec![0i8; 8 * 16 * 64];
        for _ in 0..20 {
            b.forward(&img, &mut scratch, &mut out).unwrap();
        }
        let n = 200;
        let mut best = f64::INFINITY;
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            let t = std::time::Instant::now();
            b.forward(std::hint::black_box(&img), &mut scratch, &mut out)
                .unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let mean = t0.elapsed().as_secs_f64() / f64::from(n);
        let gmacs = b.macs() as f64 / mean / 1e9;
        println!(
            "backbone 64x128 -> 8x16x64: {} MMAC, mean {:.3} ms, best {:.3} ms per camera, {:.2} GMAC/s",
            b.macs() as f64 / 1e6,
            mean * 1e3,
            best * 1e3,
            gmacs
        );
        for (i, l) in b.layers().iter().enumerate() {
            let (h, w) = b.hw[i];
            let mut o = vec![0i8; l.output_len(h, w).unwrap()];
            let inp = if i == 0 {
                img.clone()
            } else {
                vec![1i8; l.input_len(h, w).unwrap()]
            };
            let t = std::time::Instant::now();
            for _ in 0..n {
                l.forward(std::hint::black_box(&inp), h, w, &mut o).unwrap();
            }
            let dt = t.elapsed().as_secs_f64() / f64::from(n);
            println!(
                "  layer {i}: {}x{}x{} -> {}x{}: {:.3} ms, {:.2} GMAC/s",
                h,
                w,
                l.in_c,
                l.out_c,
                l.k,
                dt * 1e3,
                l.macs(h, w) as f64 / dt / 1e9
            );
        }
    }
}
