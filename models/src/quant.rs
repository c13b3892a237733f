//! INT8 quantization: the one rounding rule every kernel in this crate uses.
//!
//! # Contract
//!
//! The semantics are those of ONNX `QuantizeLinear` / `DequantizeLinear` / `QLinearConv`
//! (QDQ models) as ONNX Runtime's reference kernels implement them, so that a model run here
//! and on ONNX Runtime or TensorRT can be compared value for value:
//!
//! - **Activations** are `i8`, quantized per tensor with [`QParams`] `{ scale, zero_point }`:
//!   `real = (q - zero_point) * scale`.
//! - **Weights** are `i8`, symmetric per output channel (zero point 0, one `scale` per output
//!   channel), in the range `-127..=127` (the symmetric range TensorRT requires; `-128` is
//!   never produced by [`quantize_weights_per_channel`]).
//! - **Bias** is `i32` per output channel, with scale `in_scale * w_scale[c]` (ONNX
//!   `QLinearConv` convention): see [`quantize_bias`].
//! - **Rounding**: round half to even (`round_half_even`, C's `nearbyintf` in the default
//!   rounding mode), then saturate to `i8`.
//! - **Requantization** of an `i32` accumulator:
//!   `y = saturate_i8(round_half_even(acc as f32 * M) + y_zp)`, where `M = x_scale * w_scale[c] / y_scale` is computed once per channel in
//!   `f32`, in that order of operations ([`requant_multiplier`]). Fused ReLU clamps the result
//!   below at `y_zp` (the quantized real zero). This is one `f32` multiply per output and is
//!   exact and deterministic on every IEEE-754 machine (no FMA, no fast-math). Note that
//!   `acc as f32` rounds accumulators beyond `2^24` in magnitude: that is part of the rule
//!   (ONNX Runtime does the same) and every kernel must reproduce it.
//!
//! # Cost and limits
//!
//! [`quantize`], [`dequantize`], [`requantize`] and `round_half_even` are branch-light,
//! allocation-free scalar functions that never panic (a NaN input quantizes to 0, through
//! Rust's saturating float-to-int cast).
//! [`quantize_weights_per_channel`] and [`QParams::from_min_max`] are construction-time
//! helpers: they allocate and must never be called per frame.

use crate::conv::ModelError;

/// Per-tensor affine quantization parameters of an `i8` tensor: `real = (q - zero_point) *
/// scale`. `scale` must be finite and positive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QParams {
    /// Real value of one quantization step.
    pub scale: f32,
    /// The `i8` value that represents real 0.
    pub zero_point: i8,
}

impl QParams {
    /// Creates quantization parameters. Does not validate; see [`QParams::is_valid`].
    pub const fn new(scale: f32, zero_point: i8) -> Self {
        Self { scale, zero_point }
    }

    /// True if `scale` is finite and strictly positive (the only scales a kernel accepts).
    pub fn is_valid(&self) -> bool {
        self.scale.is_finite() && self.scale > 0.0
    }

    /// Asymmetric min-max calibration: the parameters that map the observed real range
    /// `[min, max]`, widened to include 0 (so real 0 is exactly representable, as ONNX
    /// requires), onto the full `i8` range `-128..=127`.
    ///
    /// `scale = (max - min) / 255`, `zero_point = saturate_i8(round_half_even(-128 - min /
    /// scale))`. An empty, degenerate or non-finite range gives `{ scale: 1.0, zero_point:
    /// -128 }` when it is `[0, 0]`-like, so a calibrated layer always has a valid scale.
    pub fn from_min_max(min: f32, max: f32) -> Self {
        let lo = if min.is_finite() { min.min(0.0) } else { 0.0 };
        let hi = if max.is_finite() { max.max(0.0) } else { 0.0 };
        let range = hi - lo;
        let scale = if range.is_finite() && range > 0.0 {
            range / 255.0
        } else {
            1.0
        };
        let zp = round_half_even(-128.0 - lo / scale).clamp(-128.0, 127.0) as i8;
        Self {
            scale,
            zero_point: zp,
        }
    }
}

/// Rounds to the nearest integer, ties to even (`0.5 → 0`, `1.5 → 2`, `-2.5 → -2`): the
/// rounding of C's `nearbyintf` in the default mode, which ONNX Runtime uses.
#[inline]
fn round_half_even(x: f32) -> f32 {
    x.round_ties_even()
}

/// Quantizes one real value: `saturate_i8(round_half_even(x / scale) + zero_point)`
/// (ONNX `QuantizeLinear`).
#[inline]
pub fn quantize(x: f32, q: QParams) -> i8 {
    let v = round_half_even(x / q.scale) + f32::from(q.zero_point);
    // `as` saturates and maps NaN to 0; the clamp makes the saturation explicit.
    v.clamp(-128.0, 127.0) as i8
}

/// Dequantizes one value: `(v - zero_point) * scale` (ONNX `DequantizeLinear`).
#[inline]
pub fn dequantize(v: i8, q: QParams) -> f32 {
    (i32::from(v) - i32::from(q.zero_point)) as f32 * q.scale
}

/// The requantization multiplier of one output channel, `x_scale * w_scale / y_scale`,
/// computed in `f32` in exactly this order (as ONNX Runtime's `QLinearConv` does). Every
/// kernel must use this function so that all paths agree bit for bit.
#[inline]
pub fn requant_multiplier(x_scale: f32, w_scale: f32, y_scale: f32) -> f32 {
    x_scale * w_scale / y_scale
}

/// Requantizes an `i32` accumulator to `i8`: `saturate_i8(round_half_even(acc as f32 *
/// multiplier) + out_zp)`; with `relu`, the result is clamped below at `out_zp` (real 0).
///
/// This is THE rounding rule of the crate. Clamping happens on the rounded value before the
/// zero point is added, which is the same as clamping after because both bounds are integers.
#[inline]
pub fn requantize(acc: i32, multiplier: f32, out_zp: i8, relu: bool) -> i8 {
    let zp = i32::from(out_zp);
    let lo = if relu { 0 } else { -128 - zp };
    let hi = 127 - zp;
    let r = round_half_even(acc as f32 * multiplier);
    // Bounds are small integers, exactly representable in f32; NaN (impossible for finite
    // multipliers) would map to 0 through the saturating cast.
    let r = r.clamp(lo as f32, hi as f32) as i32;
    (r + zp) as i8
}

/// Quantizes a bias value to `i32` with scale `in_scale * w_scale` (ONNX `QLinearConv`),
/// rounding half to even and saturating to the `i32` range.
#[inline]
pub fn quantize_bias(b: f32, in_scale: f32, w_scale: f32) -> i32 {
    let v = round_half_even(b / (in_scale * w_scale));
    // `as` saturates: values beyond the i32 range become i32::MIN / i32::MAX, NaN becomes 0.
    v as i32
}

/// Symmetric per-output-channel weight quantization from `f32` weights laid out
/// `[out_c][kh][kw][in_c]`: returns (int8 weights in the same layout, one scale per output
/// channel). `scale[c] = max|w[c]| / 127`, `q = clamp(round_half_even(w / scale[c]), -127,
/// 127)`; an all-zero (or non-finite) channel gets scale 1.0 and zero weights.
///
/// Invalid shapes (`out_c == 0`, or `w.len()` not a multiple of `out_c`) return two empty
/// vectors, which [`crate::conv::Conv2d::new`] rejects with a clear error; use
/// [`try_quantize_weights_per_channel`] to get the error here. Construction-time only
/// (allocates).
pub fn quantize_weights_per_channel(w: &[f32], out_c: usize) -> (Vec<i8>, Vec<f32>) {
    try_quantize_weights_per_channel(w, out_c).unwrap_or_default()
}

/// [`quantize_weights_per_channel`], with invalid shapes reported as an error.
pub fn try_quantize_weights_per_channel(
    w: &[f32],
    out_c: usize,
) -> Result<(Vec<i8>, Vec<f32>), ModelError> {
    if out_c == 0 || w.is_empty() || !w.len().is_multiple_of(out_c) {
        return Err(ModelError::InvalidLayer {
            reason: format!(
                "cannot quantize {} weights into {out_c} output channels: the weight count \
                 must be a non-zero multiple of out_c (layout [out_c][kh][kw][in_c])",
                w.len()
            ),
        });
    }
    let per = w.len() / out_c;
    let mut q = Vec::with_capacity(w.len());
    let mut scales = Vec::with_capacity(out_c);
    for ch in w.chunks_exact(per) {
        let max_abs = ch
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = if max_abs > 0.0 { max_abs / 127.0 } else { 1.0 };
        scales.push(scale);
        q.extend(
            ch.iter()
                .map(|&v| round_half_even(v / scale).clamp(-127.0, 127.0) as i8),
        );
    }
    Ok((q, scales))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_half_even_ties() {
        let cases = [
            (0.5, 0.0),
            (1.5, 2.0),
            (2.5, 2.0),
            (-0.5, -0.0),
            (-1.5, -2.0),
            (-2.5, -2.0),
            (2.4999, 2.0),
            (2.5001, 3.0),
            (-3.7, -4.0),
        ];
        for (x, want) in cases {
            assert_eq!(round_half_even(x), want, "round_half_even({x})");
        }
    }

    #[test]
    fn requantize_rounds_half_to_even() {
        // acc * 0.5 lands exactly on .5 ties.
        assert_eq!(requantize(1, 0.5, 0, false), 0); // 0.5 -> 0
        assert_eq!(requantize(3, 0.5, 0, false), 2); // 1.5 -> 2
        assert_eq!(requantize(5, 0.5, 0, false), 2); // 2.5 -> 2
        assert_eq!(requantize(-1, 0.5, 0, false), 0); // -0.5 -> 0
        assert_eq!(requantize(-3, 0.5, 0, false), -2); // -1.5 -> -2
        assert_eq!(requantize(-5, 0.5, 0, false), -2); // -2.5 -> -2
        assert_eq!(requantize(7, 0.5, 10, false), 14); // 3.5 -> 4, + 10
        assert_eq!(requantize(10, 0.25, 0, false), 2); // 2.5 -> 2
        assert_eq!(requantize(14, 0.25, 0, false), 4); // 3.5 -> 4
    }

    #[test]
    fn requantize_saturates() {
        assert_eq!(requantize(1_000_000, 0.01, 0, false), 127);
        assert_eq!(requantize(-1_000_000, 0.01, 0, false), -128);
        assert_eq!(requantize(i32::MAX, 1.0, -5, false), 127);
        assert_eq!(requantize(i32::MIN, 1.0, 5, false), -128);
        // The zero point shifts the saturation point: 120 + 10 saturates at 127.
        assert_eq!(requantize(120, 1.0, 10, false), 127);
        assert_eq!(requantize(-120, 1.0, -10, false), -128);
        assert_eq!(requantize(117, 1.0, 10, false), 127);
        assert_eq!(requantize(116, 1.0, 10, false), 126);
    }

    #[test]
    fn requantize_relu_clamps_at_zero_point() {
        assert_eq!(requantize(-50, 1.0, 3, true), 3);
        assert_eq!(requantize(-50, 1.0, -128, true), -128);
        assert_eq!(requantize(-50, 1.0, 3, false), -47);
        assert_eq!(requantize(50, 1.0, 3, true), 53);
        assert_eq!(requantize(-1, 0.5, 3, true), 3); // -0.5 rounds to 0: exactly at zp
        assert_eq!(requantize(1_000, 1.0, 100, true), 127);
    }

    #[test]
    fn quantize_dequantize_roundtrip_and_saturation() {
        let q = QParams::new(0.1, -3);
        for v in -128i8..=127 {
            assert_eq!(quantize(dequantize(v, q), q), v);
        }
        assert_eq!(quantize(1e9, q), 127);
        assert_eq!(quantize(-1e9, q), -128);
        assert_eq!(quantize(0.0, q), -3);
        assert_eq!(quantize(0.25, QParams::new(0.5, 0)), 0); // 0.5 -> 0 (tie to even)
        assert_eq!(quantize(0.75, QParams::new(0.5, 0)), 2); // 1.5 -> 2
        assert_eq!(quantize(f32::NAN, QParams::new(1.0, 0)), 0);
    }

    #[test]
    fn min_max_includes_zero_and_covers_range() {
        let q = QParams::from_min_max(0.0, 6.0);
        assert_eq!(q.zero_point, -128);
        assert!((q.scale - 6.0 / 255.0).abs() < 1e-9);
        assert_eq!(quantize(6.0, q), 127);
        // An asymmetric range: the zero point is rounded, so the ends are covered to
        // within one step.
        for (lo, hi) in [(-1.0, 1.0), (-0.3, 2.7), (-5.0, 0.1)] {
            let q = QParams::from_min_max(lo, hi);
            assert_eq!(quantize(0.0, q), q.zero_point);
            assert_eq!(dequantize(q.zero_point, q), 0.0);
            for x in [lo, hi] {
                let back = dequantize(quantize(x, q), q);
                assert!(
                    (back - x).abs() <= q.scale * 1.0001,
                    "{x} -> {back} ({q:?})"
                );
            }
        }
        let q = QParams::from_min_max(2.0, 3.0); // widened to [0, 3]
        assert_eq!(q.zero_point, -128);
        let q = QParams::from_min_max(0.0, 0.0);
        assert!(q.is_valid());
        let q = QParams::from_min_max(f32::NAN, f32::INFINITY);
        assert!(q.is_valid());
    }

    #[test]
    fn per_channel_weights_are_symmetric() {
        // 2 output channels of 3 weights each.
        // Max |w| = 127 gives scale exactly 1.0, so the ties below are exact.
        let w = [63.5, -127.0, 62.5, 0.0, 0.0, 0.0];
        let (q, s) = quantize_weights_per_channel(&w, 2);
        assert_eq!(s, vec![1.0, 1.0]);
        assert_eq!(q, vec![64, -127, 62, 0, 0, 0]); // 63.5 -> 64, 62.5 -> 62 (ties to even)
        let (q, s) = quantize_weights_per_channel(&[0.5, -0.25], 1);
        assert_eq!(q, vec![127, round_half_even(-0.25 / s[0]) as i8]);
        assert!((s[0] - 0.5 / 127.0).abs() < 1e-9);
        for (i, &v) in q.iter().enumerate() {
            assert!(v >= -127, "weight {i} is {v}");
        }
    }

    #[test]
    fn per_channel_rejects_bad_shapes() {
        assert!(try_quantize_weights_per_channel(&[1.0; 5], 2).is_err());
        assert!(try_quantize_weights_per_channel(&[1.0; 4], 0).is_err());
        let (q, s) = quantize_weights_per_channel(&[1.0; 5], 2);
        assert!(q.is_empty() && s.is_empty());
    }

    #[test]
    fn bias_quantization() {
        assert_eq!(quantize_bias(1.0, 0.5, 0.25), 8);
        assert_eq!(quantize_bias(-0.3125, 0.5, 0.25), -2); // -2.5 -> -2
        assert_eq!(quantize_bias(1e30, 1e-6, 1e-6), i32::MAX);
    }
}
