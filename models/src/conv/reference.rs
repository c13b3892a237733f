//! The references the kernels are checked against (tests only): the exact `i64` loop
//! ([`reference_forward_i64`], the oracle every kernel path must equal bit for bit) and the
//! float layer on dequantized weights ([`reference_conv_f32`], [`reference_forward_f32`]).
//!
//! Contract: written independently of the kernels (straight loops over every tap, padded
//! taps read `x_zp` explicitly, the requantization rule written out again). Cost: allocate
//! and are slow. Never: compiled into the library; only `cargo test` builds them.

use super::{invalid, Conv2d, ModelError};
use crate::quant::{dequantize, quantize};

/// Exact accumulators `bias + Σ (x − x_zp)·w` of every output (`out_h·out_w·out_c`,
/// NHWC): a straightforward loop over every kernel tap (padded taps read `x_zp`
/// explicitly) and every input channel in `i64`, then checked to fit `i32`. The oracle of
/// [`Conv2d::forward_rows_acc`] and the first half of [`reference_forward_i64`]. Allocates;
/// tests only.
pub(crate) fn reference_acc_i64(
    conv: &Conv2d,
    input: &[i8],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<i32>, ModelError> {
    let (oh, ow) = conv.check_input(input, in_h, in_w, conv.in_c)?;
    let (ic_n, oc_n, k) = (conv.in_c, conv.out_c, conv.k);
    let x_zp = i64::from(conv.in_q.zero_point);
    let mut out = vec![0i32; oh * ow * oc_n];
    for oy in 0..oh {
        for ox in 0..ow {
            for oc in 0..oc_n {
                let mut acc = i64::from(conv.bias[oc]);
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * conv.stride + ky) as i64 - conv.pad as i64;
                        let ix = (ox * conv.stride + kx) as i64 - conv.pad as i64;
                        let inside =
                            iy >= 0 && ix >= 0 && (iy as usize) < in_h && (ix as usize) < in_w;
                        for ic in 0..ic_n {
                            let x = if inside {
                                i64::from(input[((iy as usize) * in_w + ix as usize) * ic_n + ic])
                            } else {
                                x_zp
                            };
                            let w = i64::from(conv.weights[((oc * k + ky) * k + kx) * ic_n + ic]);
                            acc += (x - x_zp) * w;
                        }
                    }
                }
                out[(oy * ow + ox) * oc_n + oc] = i32::try_from(acc).map_err(|_| {
                    invalid(format!("reference accumulator {acc} does not fit in i32"))
                })?;
            }
        }
    }
    Ok(out)
}

/// Exact reference of [`Conv2d::forward`]: the exact accumulators ([`reference_acc_i64`]),
/// then the requantization rule written out independently (`M = x_scale * w_scale /
/// y_scale` in `f32`, `round_ties_even`, add `y_zp`, clamp). The oracle every kernel must
/// equal bit for bit. Allocates; tests only.
pub(crate) fn reference_forward_i64(
    conv: &Conv2d,
    input: &[i8],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<i8>, ModelError> {
    let accs = reference_acc_i64(conv, input, in_h, in_w)?;
    let oc_n = conv.out_c;
    let y_zp = i64::from(conv.out_q.zero_point);
    let lo = if conv.relu { y_zp } else { -128 };
    Ok(accs
        .iter()
        .enumerate()
        .map(|(i, &acc)| {
            let oc = i % oc_n;
            let m = conv.in_q.scale * conv.w_scales[oc] / conv.out_q.scale;
            let r = (acc as f32 * m).round_ties_even() as i64 + y_zp;
            r.clamp(lo, 127) as i8
        })
        .collect())
}

/// Float reference of the layer on real-valued activations: weights dequantized
/// (`w * w_scale[oc]`), bias dequantized (`bias * in_scale * w_scale[oc]`), zero padding,
/// `f64` accumulation, ReLU as `max(0, y)`. Returns real outputs (`out_h*out_w*out_c`),
/// not quantized; `out_q` is not used. Used by [`reference_forward_f32`] and by
/// the float network's tests. Allocates; construction time and tests only.
pub(crate) fn reference_conv_f32(
    conv: &Conv2d,
    input: &[f32],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<f32>, ModelError> {
    let (oh, ow) =
        conv.check_input_len(input.len(), in_h, in_w, conv.in_c, "f32 reference input")?;
    if conv.weights.len() != conv.k * conv.k * conv.in_c * conv.out_c
        || conv.bias.len() != conv.out_c
        || conv.w_scales.len() != conv.out_c
    {
        return Err(ModelError::LayerModified);
    }
    let (ic_n, oc_n, k) = (conv.in_c, conv.out_c, conv.k);
    let mut out = vec![0f32; oh * ow * oc_n];
    for oy in 0..oh {
        for ox in 0..ow {
            for oc in 0..oc_n {
                let ws = f64::from(conv.w_scales[oc]);
                let mut acc = f64::from(conv.bias[oc]) * f64::from(conv.in_q.scale) * ws;
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * conv.stride + ky) as i64 - conv.pad as i64;
                        let ix = (ox * conv.stride + kx) as i64 - conv.pad as i64;
                        if iy < 0 || ix < 0 || iy as usize >= in_h || ix as usize >= in_w {
                            continue;
                        }
                        let base = ((iy as usize) * in_w + ix as usize) * ic_n;
                        let wbase = ((oc * k + ky) * k + kx) * ic_n;
                        for ic in 0..ic_n {
                            let w = f64::from(conv.weights[wbase + ic]) * ws;
                            acc += f64::from(input[base + ic]) * w;
                        }
                    }
                }
                let y = acc as f32;
                out[(oy * ow + ox) * oc_n + oc] = if conv.relu { y.max(0.0) } else { y };
            }
        }
    }
    Ok(out)
}

/// The float reference of [`Conv2d::forward`] on quantized tensors: dequantize the input,
/// [`reference_conv_f32`], quantize with `out_q` (same round-half-to-even rule). Differs
/// from the integer kernel by at most 1 LSB, only where the exact value is within float
/// rounding of a tie. Allocates; tests only.
pub(crate) fn reference_forward_f32(
    conv: &Conv2d,
    input: &[i8],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<i8>, ModelError> {
    let x: Vec<f32> = input.iter().map(|&v| dequantize(v, conv.in_q)).collect();
    let y = reference_conv_f32(conv, &x, in_h, in_w)?;
    Ok(y.iter().map(|&v| quantize(v, conv.out_q)).collect())
}

#[cfg(test)]
mod tests {
    use super::super::kernel_tests::{forward_all, random_case};
    use super::*;
    use crate::conv::ConvShape;
    use crate::quant::{quantize_bias, quantize_weights_per_channel, QParams};
    use redline_runtime::rng::SplitMix64;

    #[test]
    fn quantized_kernel_matches_the_dequantized_f32_reference() {
        // Across many random layers: never more than 1 LSB apart, and almost always equal.
        let (mut total, mut diff_sum, mut max_diff) = (0usize, 0i64, 0i64);
        for seed in 0..40u64 {
            let shape = ConvShape {
                in_c: 8,
                out_c: 6,
                k: 3,
                stride: 1 + (seed as usize % 2),
                pad: 1,
            };
            let c = random_case(shape, 9, 10, seed % 3 == 0, seed);
            let got = forward_all(&c);
            let want = reference_forward_f32(&c.conv, &c.input, 9, 10).unwrap();
            for (a, b) in got.iter().zip(&want) {
                let d = (i64::from(*a) - i64::from(*b)).abs();
                diff_sum += d;
                max_diff = max_diff.max(d);
                total += 1;
            }
        }
        let mean = diff_sum as f64 / total as f64;
        assert!(max_diff <= 1, "max diff {max_diff} LSB");
        assert!(mean < 0.01, "mean abs diff {mean} LSB");
    }

    #[test]
    fn int8_layer_tracks_the_unquantized_float_layer() {
        // Float weights, inputs and bias; quantize everything the way the network does and
        // compare the dequantized int8 output with the float conv of the original values.
        let mut r = SplitMix64::new(42);
        let shape = ConvShape {
            in_c: 16,
            out_c: 8,
            k: 3,
            stride: 2,
            pad: 1,
        };
        let (h, w) = (12, 14);
        let fan_in = 9 * 16;
        let a = (6.0 / fan_in as f32).sqrt();
        let wf: Vec<f32> = (0..8 * fan_in).map(|_| r.uniform(-a, a)).collect();
        let bf: Vec<f32> = (0..8).map(|_| r.uniform(-0.05, 0.05)).collect();
        let xf: Vec<f32> = (0..h * w * 16).map(|_| r.uniform(-1.0, 1.0)).collect();
        let in_q = QParams::from_min_max(-1.0, 1.0);
        let (wq, ws) = quantize_weights_per_channel(&wf, 8);
        let bias: Vec<i32> = (0..8)
            .map(|c| quantize_bias(bf[c], in_q.scale, ws[c]))
            .collect();
        // The float layer, on the original weights (no quantization anywhere).
        let float_conv = |x: &[f32]| -> Vec<f32> {
            let (oh, ow) = (6, 7);
            let mut y = vec![0f32; oh * ow * 8];
            for oy in 0..oh {
                for ox in 0..ow {
                    for oc in 0..8 {
                        let mut acc = f64::from(bf[oc]);
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let iy = (oy * 2 + ky) as i64 - 1;
                                let ix = (ox * 2 + kx) as i64 - 1;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                for ic in 0..16 {
                                    acc += f64::from(x[(iy as usize * w + ix as usize) * 16 + ic])
                                        * f64::from(wf[((oc * 3 + ky) * 3 + kx) * 16 + ic]);
                                }
                            }
                        }
                        y[(oy * ow + ox) * 8 + oc] = acc as f32;
                    }
                }
            }
            y
        };
        let yf = float_conv(&xf);
        let (lo, hi) = yf
            .iter()
            .fold((0f32, 0f32), |(l, u), &v| (l.min(v), u.max(v)));
        let out_q = QParams::from_min_max(lo, hi);
        let conv = Conv2d::new(shape, wq, ws, bias, in_q, out_q, false).unwrap();
        let xq: Vec<i8> = xf.iter().map(|&v| quantize(v, in_q)).collect();
        let mut yq = vec![0i8; yf.len()];
        conv.forward(&xq, h, w, &mut yq).unwrap();
        let mean_err = yq
            .iter()
            .zip(&yf)
            .map(|(&q, &f)| f64::from((dequantize(q, out_q) - f).abs() / out_q.scale))
            .sum::<f64>()
            / yf.len() as f64;
        assert!(
            mean_err < 1.0,
            "mean abs error {mean_err} LSB of the output"
        );
    }
}
