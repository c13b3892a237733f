//! The `f32` form of the network: the weights the INT8 network is quantized from, and a
//! float forward pass for calibration, export checks and tests.
//!
//! Contract: [`FloatConv::forward`] sums in one fixed order (bias, then taps row by row,
//! channels in order), so the same weights give the same floats on every machine; the
//! seeded weights ([`FloatNetwork::seeded`]) are He-uniform draws from one
//! [`SplitMix64`] stream per layer, derived from [`NetConfig::seed`].
//! [`FloatConv::quantize`] turns a float layer into [`Conv2d`]s (per-channel symmetric
//! weights, `i32` bias).
//!
//! Cost: every forward pass allocates its output. Never: used in the frame loop; it is for
//! construction, calibration, tests and reports only.

use super::config::{stream, NetConfig, DET_HIDDEN, SEG_HIDDEN};
use super::heads::{Det, HeadKind, Seg};
use super::{invalid_config, one_by_one};
use crate::conv::{checked_len, exact_len, Conv2d, ConvShape, ModelError};
use crate::quant::{quantize_bias, try_quantize_weights_per_channel, QParams};
use redline_runtime::rng::SplitMix64;

/// Bias range of the seeded layers (real units).
const BIAS_RANGE: f32 = 0.05;

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
    /// The seeded float head of kind `K` for `cfg` (its own seed stream).
    pub(super) fn seeded<K: HeadKind>(cfg: &NetConfig) -> Result<Self, ModelError> {
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
    /// The seeded float network of `cfg` (the weights [`Backbone::new`](super::Backbone::new) and the heads
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::Backbone;

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
        let yq = crate::conv::reference::reference_conv_f32(&b.layers()[0], &x, 16, 24).unwrap();
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
}
