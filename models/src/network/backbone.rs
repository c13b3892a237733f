//! The INT8 camera backbone: three conv3x3 stride-2 ReLU layers, 3 → 16 → 32 → `feat_c`,
//! shared by every camera.
//!
//! Contract: [`Backbone::forward`] maps one `in_h × in_w × 3` image quantized with
//! [`Backbone::input_q`] to `ceil(in_h/8) × ceil(in_w/8) × feat_c` features quantized with
//! [`Backbone::output_q`], bit-identically on every machine and kernel path. Built from
//! trained layers, from a float network plus activation ranges, or seeded and calibrated
//! on a seeded random image (see the `network` module docs).
//!
//! Cost: construction allocates; `forward` costs [`Backbone::macs`] multiply-adds and
//! needs [`Backbone::scratch_len`] bytes of caller-owned scratch. Never: `forward`
//! allocates, locks, logs or panics (wrong buffer sizes are errors).

use super::config::{stream, NetConfig, IMAGE_CHANNELS};
use super::float_reference::FloatNetwork;
use super::{invalid_config, min_max, prefix};
use crate::conv::{exact_len, Conv2d, ModelError};
use crate::quant::{dequantize, QParams};
use redline_runtime::rng::SplitMix64;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::tests::{backbone_run, random_image, smooth_image, stats};

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
        assert!(
            mean > 0.0 && best <= mean,
            "timer: mean {mean} s, best {best} s"
        );
        assert!(
            out.iter().any(|&v| v != out[0]),
            "the timed backbone produced a constant output"
        );
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
