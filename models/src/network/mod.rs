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
//!   min-max ([`QParams::from_min_max`](crate::quant::QParams::from_min_max)) of each layer's float output on a seeded random
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
//!
//! # Layout
//!
//! - `config`: [`NetConfig`], the layer-width constants, [`TrainedLayers`] and the
//!   activation quantization of a calibrated network ([`ActQParams`], [`HeadQParams`]).
//! - `float_reference`: the `f32` network ([`FloatConv`], [`FloatHead`], [`FloatNetwork`])
//!   and its seeded weights.
//! - `backbone`: the INT8 camera backbone ([`Backbone`], [`bev_q`]).
//! - `heads`: the INT8 BEV heads ([`Head`], [`DetHead`], [`SegHead`]).
//! - this file: the re-exports (every public item keeps its `network::` path) and the small
//!   helpers the parts share.

mod backbone;
mod config;
mod float_reference;
mod heads;

pub use backbone::{bev_q, Backbone};
pub use config::{
    ActQParams, HeadQParams, NetConfig, TrainedLayers, BACKBONE_HIDDEN, DET_HIDDEN, IMAGE_CHANNELS,
    REG_CHANNELS, SEG_HIDDEN,
};
pub use float_reference::{FloatConv, FloatHead, FloatNetwork};
pub use heads::{argmax_classes, Det, DetHead, Head, HeadKind, Seg, SegHead};

use crate::conv::{ConvShape, ModelError};

fn invalid_config(reason: String) -> ModelError {
    ModelError::InvalidConfig { reason }
}

/// Smallest and largest value of a tensor (`(+inf, -inf)` when empty).
fn min_max(v: &[f32]) -> (f32, f32) {
    v.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
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

#[cfg(test)]
pub(crate) mod tests {
    //! Test helpers shared by the network's parts, and the tests that cover several parts
    //! at once (seeding, buffer checks, trained layers).
    use super::*;
    use crate::conv::Conv2d;
    use crate::quant::QParams;
    use redline_runtime::rng::SplitMix64;
    use std::sync::Arc;

    pub(crate) fn random_image(seed: u64, len: usize) -> Vec<i8> {
        let mut r = SplitMix64::new(seed);
        (0..len).map(|_| r.next_i8()).collect()
    }

    /// A smooth synthetic "road scene": gradients plus a few bright blobs, to check that
    /// calibration on noise also suits structured images.
    pub(crate) fn smooth_image(h: usize, w: usize) -> Vec<i8> {
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
                    redline_runtime::det_math::sin(fx * 9.0) * 0.5 - blob,
                ];
                img.extend(rgb.iter().map(|&v| crate::quant::quantize(v, q)));
            }
        }
        img
    }

    pub(crate) fn backbone_run(b: &Backbone, img: &[i8]) -> Vec<i8> {
        let (h, w, c) = b.output_shape();
        let mut scratch = vec![0i8; b.scratch_len()];
        let mut out = vec![0i8; h * w * c];
        b.forward(img, &mut scratch, &mut out).unwrap();
        out
    }

    /// Mean, standard deviation, fraction saturated at 127, fraction at `zp`.
    pub(crate) fn stats(v: &[i8], zp: i8) -> (f64, f64, f64, f64) {
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
    pub(crate) fn bev_from_backbone(b: &Backbone, ny: usize, nx: usize, seed: u64) -> Vec<i8> {
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
}
