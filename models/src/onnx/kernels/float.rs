//! The `f32` loops of the float route (`lower::float`: a convolution's float output going on
//! unquantized): its accumulators to `f32`, dequantize, elementwise binaries, clamps and the
//! logistic sigmoid, global average pooling and bilinear resize.
//!
//! Contract: each loop is the same IEEE-754 operations in the same order on every width
//! (compiled again for AVX2 and AVX-512 by `multiversion!`; Rust never fuses `a * b + c`),
//! so the same bits on every ISA, lane count and machine. The sigmoid's `exp` is
//! [`exp_poly`]: pure `f32` arithmetic (no library call), so that it vectorises; accurate to
//! a few ulp, and not the bits of `det_math::exp` (which the quantized Sigmoid table uses).
//! Cost: one pass over the tensor. Never allocates or panics.
//!
//! Layout: this file, the elementwise loops, pooling and resize; `sums`, the loops that
//! sum a row (normalizations and reductions) in the one canonical order; `gemm`, the
//! matrix product (fused multiply-adds in index order).

use super::super::isa::multiversion;
use super::{round_magic, Tap};
use crate::onnx::program::{FloatBinaryOp, FloatUnaryOp};
#[cfg(test)]
use crate::onnx::program::{NormOp, ReduceOp};
use std::ops::Range;

mod gemm;
mod grid_sample;
mod grouped;
mod sums;
pub(crate) use gemm::{
    matmul_rows, pack as pack_matmul_b, packed_len as packed_matmul_len, unfold_nchw, Epilogue,
    FloatMatMulDims,
};
pub(crate) use grid_sample::{grid_sample_rows, GridMode, GridPadding, GridSampleDims};
pub(crate) use grouped::{
    grouped_conv_rows, pack as pack_grouped_conv, packed_len as grouped_conv_packed_len,
    GroupedConvDims,
};
pub(crate) use sums::{normalize, reduce};

/// `e^x` in `f32` from basic operations only: `x = n·ln2 + r` (`n` rounded to nearest with
/// [`round_magic`], `ln2` split in a high part exact in `f32` and a low part), `e^r` by a
/// degree-6 Taylor polynomial in Horner form on `|r| <= ln2/2`, then `·2^n` through the
/// exponent bits. `x` is clamped to `[-87, 88]` (the result then stays a normal `f32`;
/// `e^-87` against the sigmoid's `1` is far below half an ulp). A few ulp from the
/// correctly rounded result; NaN in gives NaN out.
#[inline(always)]
pub(crate) fn exp_poly(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75; // 0x3f317200: 16 significant bits, n·LN2_HI exact
    const LN2_LO: f32 = 1.428_606_8e-6; // ln 2 − LN2_HI
    let nan = x.is_nan();
    let x = x.clamp(-87.0, 88.0);
    // round(x · log2 e), exact, in [-126, 127].
    let (n, n_int) = round_magic(x * LOG2E);
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    // 2^n for n in [-126, 127]: the exponent field n + 127.
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    if nan {
        f32::NAN
    } else {
        p * scale
    }
}

/// The float route's sigmoid: `1 / (1 + e^−x)` with [`exp_poly`].
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp_poly(-x))
}

/// `ln(1 + e^x)` (ONNX `Softplus`) as `max(x, 0) + ln(1 + e^−|x|)`: no overflow, and the
/// last term (in `(0, ln 2]`) by a series without cancellation.
#[inline(always)]
pub(crate) fn softplus(x: f32) -> f32 {
    let y = exp_poly(-x.abs());
    // ln(1 + y) for y in (0, 1] as 2·atanh(t), t = y / (2 + y) <= 1/3, by its odd series to
    // t^17 (no bit manipulation of e^−|x|, which kept LLVM from vectorising the loop).
    let t = y / (2.0 + y);
    let t2 = t * t;
    let p = 2.0 / 17.0;
    let p = p * t2 + 2.0 / 15.0;
    let p = p * t2 + 2.0 / 13.0;
    let p = p * t2 + 2.0 / 11.0;
    let p = p * t2 + 2.0 / 9.0;
    let p = p * t2 + 2.0 / 7.0;
    let p = p * t2 + 2.0 / 5.0;
    let p = p * t2 + 2.0 / 3.0;
    let p = p * t2 + 2.0;
    x.max(0.0) + t * p
}

/// `x · tanh(softplus(x))` (ONNX `Mish`) as `x · a / (a + 2)` with `a = n(n + 2)`,
/// `n = e^x` (the identity `tanh(ln(1 + n)) = ((1 + n)^2 − 1) / ((1 + n)^2 + 1)`): one
/// [`exp_poly`] and one division; `x` itself above 20, where the factor is 1 in `f32`.
#[inline(always)]
pub(crate) fn mish(x: f32) -> f32 {
    let n = exp_poly(x.min(20.0));
    let a = n * (n + 2.0);
    let m = x * (a / (a + 2.0));
    if x > 20.0 {
        x
    } else {
        m
    }
}

/// `erf x` below `|x| = 1`: `x · P(x²)`, `P` (degree 7) a least-squares fit of `erf(x)/x`
/// (relative error 3e-11 in `f64`); a few ulp in `f32`. [`erf_tail`] takes over from 1.
#[inline(always)]
pub(crate) fn erf_small(x: f32) -> f32 {
    let z = x * x;
    let p = -9.634_991e-6;
    let p = p * z + 1.125_464_04e-4;
    let p = p * z - 8.482_507_5e-4;
    let p = p * z + 5.220_923e-3;
    let p = p * z - 2.686_539_3e-2;
    let p = p * z + 1.128_378_2e-1;
    let p = p * z - 3.761_263_8e-1;
    let p = p * z + std::f32::consts::FRAC_2_SQRT_PI; // the fit gave this f32 too
    x * p
}

/// `erf x` from `|x| = 1` on: `1 − e^−x² · Q(1/|x|)` up to 4 with the sign put back, `±1`
/// beyond (`erfc 4` is below half an ulp of 1); `Q` (degree 9) a least-squares fit of
/// `erfc(x)·e^x²` (relative error 2e-8 in `f64`); within about 1e-7 in `f32`. Below 1 it
/// is not `erf`.
#[inline(always)]
pub(crate) fn erf_tail(x: f32) -> f32 {
    let a = x.abs();
    let u = 1.0 / a.clamp(1.0, 4.0);
    let q = 2.967_723_6e-2;
    let q = q * u - 1.740_014_4e-1;
    let q = q * u + 4.245_884_4e-1;
    let q = q * u - 5.183_95e-1;
    let q = q * u + 2.225_583e-1;
    let q = q * u + 2.390_853_8e-1;
    let q = q * u - 3.789_607_6e-1;
    let q = q * u + 2.122_417_3e-2;
    let q = q * u + 5.616_815e-1;
    let q = q * u + 1.257_577_8e-4;
    let y = 1.0 - exp_poly(-(a * a).min(16.0)) * q;
    let y = if a >= 4.0 { 1.0 } else { y };
    if x < 0.0 {
        -y
    } else {
        y
    }
}

/// `erf x` (GELU's): [`erf_small`] below `|x| = 1`, [`erf_tail`] from there; what the `Erf`
/// step computes, which runs the two as separate passes over the tensor (one loop with
/// both stayed scalar: 2.6 ms a million elements on AVX-512 against 0.8 for the two).
#[cfg(test)]
fn erf_poly(x: f32) -> f32 {
    if x.abs() < 1.0 || x.is_nan() {
        erf_small(x)
    } else {
        erf_tail(x)
    }
}

/// `Gelu`'s `√(2/π)` and `0.044715·√(2/π)` (`approximate="tanh"`), as ONNX Runtime's CPU
/// kernel writes them in `f32`.
const GELU_B: f32 = 0.797_884_6;
const GELU_C: f32 = 0.035_677_407;

/// ONNX's `Gelu` in ONNX Runtime's CPU kernel's order: `t = x · (1/√2)` and `erf t`
/// ([`erf_small`] below `|t| = 1`, [`erf_tail`] from there), or with `tanh`
/// (`approximate="tanh"`) `t = x · (C·x·x + B)` and [`tanh_poly`]; then
/// `0.5 · x · (f(t) + 1)`. The `Gelu` step runs the erf form as passes over the tensor
/// (as `Erf`'s); this scalar form is the island tables' and the tests'.
#[inline(always)]
pub(crate) fn gelu(x: f32, tanh: bool) -> f32 {
    let f = if tanh {
        tanh_poly(x * (GELU_C * x * x + GELU_B))
    } else {
        let t = x * std::f32::consts::FRAC_1_SQRT_2;
        if t.abs() >= 1.0 {
            erf_tail(t)
        } else {
            erf_small(t)
        }
    };
    0.5 * x * (f + 1.0)
}

/// `tanh x`: below `|x| = 0.625` an odd polynomial (Cephes' `tanhf` coefficients), above it
/// `1 − 2/(e^2|x| + 1)` with [`exp_poly`], the sign put back (`|x|` capped at 20, where it is `±1`). A few
/// ulp from the correctly rounded result.
#[inline(always)]
pub(crate) fn tanh_poly(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = (((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1)
        * z
        - 3.333_328e-1;
    let small = small * z * x + x;
    let large = 1.0 - 2.0 / (exp_poly(2.0 * a.min(20.0)) + 1.0);
    let large = if x < 0.0 { -large } else { large };
    if a < 0.625 || x.is_nan() {
        small
    } else {
        large
    }
}

/// `clamp(alpha · x + beta, 0, 1)`: the quantized route's formula (`lower::activation`),
/// so both routes give the same value (NaN stays NaN).
#[inline(always)]
fn hard_sigmoid(alpha: f32, beta: f32, x: f32) -> f32 {
    (alpha * x + beta).clamp(0.0, 1.0)
}

multiversion! {
    /// A float-output convolution's NHWC accumulators, in place, to the `f32` bits of
    /// `acc · scales[c] + bias[c]` (`c` = element index mod the channel count).
    pub(crate) fn acc_to_f32(acc: &mut [i32], scales: &[f32], bias: &[f32]) {
        for px in acc.chunks_exact_mut(scales.len().max(1)) {
            for ((e, &s), &b) in px.iter_mut().zip(scales).zip(bias) {
                *e = ((*e as f32) * s + b).to_bits() as i32;
            }
        }
    }
}

multiversion! {
    /// `out[i] = (x[i] − zp) · scale` (ONNX `DequantizeLinear`).
    pub(crate) fn dequantize(x: &[i8], scale: f32, zp: i32, out: &mut [f32]) {
        for (d, &v) in out.iter_mut().zip(x) {
            *d = (i32::from(v) - zp) as f32 * scale;
        }
    }
}

multiversion! {
    /// `out[i] = op(a[i], b[i])`.
    pub(crate) fn binary(op: FloatBinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
        match op {
            FloatBinaryOp::Add => out.iter_mut().zip(a).zip(b).for_each(|((d, &u), &v)| *d = u + v),
            FloatBinaryOp::Sub => out.iter_mut().zip(a).zip(b).for_each(|((d, &u), &v)| *d = u - v),
            FloatBinaryOp::Mul => out.iter_mut().zip(a).zip(b).for_each(|((d, &u), &v)| *d = u * v),
            FloatBinaryOp::Div => out.iter_mut().zip(a).zip(b).for_each(|((d, &u), &v)| *d = u / v),
        }
    }
}

multiversion! {
    /// `out[i] = op(x[i], k)`, or `op(k, x[i])` unless `x_is_a`.
    pub(crate) fn binary_scalar(op: FloatBinaryOp, x: &[f32], k: f32, x_is_a: bool, out: &mut [f32]) {
        let each = out.iter_mut().zip(x);
        // IEEE addition and multiplication commute bit for bit; subtraction and division
        // keep the operands' order.
        match (op, x_is_a) {
            (FloatBinaryOp::Add, _) => each.for_each(|(d, &u)| *d = u + k),
            (FloatBinaryOp::Mul, _) => each.for_each(|(d, &u)| *d = u * k),
            (FloatBinaryOp::Sub, true) => each.for_each(|(d, &u)| *d = u - k),
            (FloatBinaryOp::Sub, false) => each.for_each(|(d, &u)| *d = k - u),
            (FloatBinaryOp::Div, true) => each.for_each(|(d, &u)| *d = u / k),
            (FloatBinaryOp::Div, false) => each.for_each(|(d, &u)| *d = k / u),
        }
    }
}

multiversion! {
    /// Elements `first..first + out.len()` of the per-image, per-channel means of the NHWC
    /// tensor `x` (`c` channels, `hw` pixels an image; element `e` is image `e / c`,
    /// channel `e % c`): each channel summed over the image's pixels in pixel order (the
    /// same order on every width: the vector lanes are channels), then divided once by
    /// `hw`.
    pub(crate) fn global_avg_pool(c: usize, hw: usize, x: &[f32], first: usize, out: &mut [f32]) {
        let c = c.max(1);
        let end = first + out.len();
        let mut e = first;
        while e < end {
            let (img, c0) = (e / c, e % c);
            let c1 = (c0 + (end - e)).min(c);
            let y = &mut out[e - first..e - first + (c1 - c0)];
            y.fill(0.0);
            for p in 0..hw {
                let at = (img * hw + p) * c;
                for (d, &v) in y.iter_mut().zip(&x[at + c0..at + c1]) {
                    *d += v;
                }
            }
            let n = hw as f32;
            for d in y.iter_mut() {
                *d /= n;
            }
            e += c1 - c0;
        }
    }
}

multiversion! {
    /// Rows `rows` (over `batch * ys.len()`) of the bilinear resize of the NHWC `f32` images
    /// `x` (`in_h × in_w`, `c` channels), with ONNX Runtime's float formula: along each axis
    /// the weights of the two taps are `1 − w1` and `w1`, or `0.5` and `0.5` where both taps
    /// are the same pixel (the clamped border), and each output is
    /// `wx0·wy0·a + wx1·wy0·b + wx0·wy1·e + wx1·wy1·f` (`a`, `b` the top row's taps, `e`,
    /// `f` the bottom row's), products and sums left to right. The lanes are channels.
    pub(crate) fn resize_linear(
        in_h: usize,
        in_w: usize,
        c: usize,
        ys: &[Tap],
        xs: &[Tap],
        x: &[f32],
        out: &mut [f32],
        rows: Range<usize>,
    ) {
        let (out_h, img) = (ys.len(), in_h * in_w * c);
        let mut o = 0;
        for r in rows {
            let (b, ty) = (r / out_h, ys[r % out_h]);
            let x = &x[b * img..(b + 1) * img];
            let (wy0, wy1) = ty.weights();
            for tx in xs {
                let (wx0, wx1) = tx.weights();
                let (w00, w01, w10, w11) = (wx0 * wy0, wx1 * wy0, wx0 * wy1, wx1 * wy1);
                let at = |yi: usize, xi: usize| &x[(yi * in_w + xi) * c..(yi * in_w + xi + 1) * c];
                let (a, b) = (at(ty.i0, tx.i0), at(ty.i0, tx.i1));
                let (e, f) = (at(ty.i1, tx.i0), at(ty.i1, tx.i1));
                let corners = a.iter().zip(b).zip(e.iter().zip(f));
                for (d, ((a, b), (e, f))) in out[o..o + c].iter_mut().zip(corners) {
                    *d = w00 * a + w01 * b + w10 * e + w11 * f;
                }
                o += c;
            }
        }
    }
}

multiversion! {
    /// `out[i] = op(x[i])`.
    pub(crate) fn unary(op: FloatUnaryOp, x: &[f32], out: &mut [f32]) {
        match op {
            FloatUnaryOp::Clamp { lo, hi } => {
                out.iter_mut().zip(x).for_each(|(d, &v)| *d = v.max(lo).min(hi))
            }
            FloatUnaryOp::Sigmoid => out.iter_mut().zip(x).for_each(|(d, &v)| *d = sigmoid(v)),
            FloatUnaryOp::HardSigmoid { alpha, beta } => out
                .iter_mut()
                .zip(x)
                .for_each(|(d, &v)| *d = hard_sigmoid(alpha, beta, v)),
            FloatUnaryOp::HardSwish => out
                .iter_mut()
                .zip(x)
                .for_each(|(d, &v)| *d = v * hard_sigmoid(1.0 / 6.0, 0.5, v)),
            FloatUnaryOp::LeakyRelu { alpha } => out
                .iter_mut()
                .zip(x)
                .for_each(|(d, &v)| *d = if v >= 0.0 { v } else { alpha * v }),
            FloatUnaryOp::Neg => out.iter_mut().zip(x).for_each(|(d, &v)| *d = -v),
            FloatUnaryOp::Exp => out.iter_mut().zip(x).for_each(|(d, &v)| *d = exp_poly(v)),
            FloatUnaryOp::Tanh => out.iter_mut().zip(x).for_each(|(d, &v)| *d = tanh_poly(v)),
            FloatUnaryOp::Softplus => out.iter_mut().zip(x).for_each(|(d, &v)| *d = softplus(v)),
            FloatUnaryOp::Mish => out.iter_mut().zip(x).for_each(|(d, &v)| *d = mish(v)),
            FloatUnaryOp::Sqrt => out.iter_mut().zip(x).for_each(|(d, &v)| *d = v.sqrt()),
            FloatUnaryOp::Reciprocal => out.iter_mut().zip(x).for_each(|(d, &v)| *d = 1.0 / v),
            FloatUnaryOp::Abs => out.iter_mut().zip(x).for_each(|(d, &v)| *d = v.abs()),
            FloatUnaryOp::Log => out
                .iter_mut()
                .zip(x)
                .for_each(|(d, &v)| *d = redline_runtime::det_math::ln(v)),
            FloatUnaryOp::Sin => out
                .iter_mut()
                .zip(x)
                .for_each(|(d, &v)| *d = redline_runtime::det_math::sin(v)),
            FloatUnaryOp::Cos => out
                .iter_mut()
                .zip(x)
                .for_each(|(d, &v)| *d = redline_runtime::det_math::cos(v)),
            FloatUnaryOp::Square => out.iter_mut().zip(x).for_each(|(d, &v)| *d = v * v),
            FloatUnaryOp::Gelu { tanh: true } => {
                out.iter_mut().zip(x).for_each(|(d, &v)| *d = gelu(v, true))
            }
            FloatUnaryOp::Gelu { tanh: false } => {
                // `gelu(v, false)` in three passes, each of which vectorises.
                let t = |v: f32| v * std::f32::consts::FRAC_1_SQRT_2;
                out.iter_mut().zip(x).for_each(|(d, &v)| *d = erf_small(t(v)));
                out.iter_mut().zip(x).for_each(|(d, &v)| {
                    if t(v).abs() >= 1.0 {
                        *d = erf_tail(t(v));
                    }
                });
                out.iter_mut().zip(x).for_each(|(d, &v)| *d = 0.5 * v * (*d + 1.0));
            }
            FloatUnaryOp::Erf => {
                out.iter_mut().zip(x).for_each(|(d, &v)| *d = erf_small(v));
                out.iter_mut().zip(x).for_each(|(d, &v)| {
                    let t = erf_tail(v);
                    if v.abs() >= 1.0 {
                        *d = t;
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::isa::Isa;
    use redline_runtime::rng::SplitMix64;

    /// Every reduction of a `[blocks, len, inner]` tensor: the same bits whether its values
    /// are strided (`inner` results a block) or contiguous (the tensor transposed so each
    /// result's values are a row), on every width; sums within rounding of an `f64` sum;
    /// Max and Min exact; a NaN reaches Max's and Min's result.
    #[test]
    fn reductions_give_the_same_bits_strided_or_contiguous_on_every_width() {
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::SumSquare,
            ReduceOp::L1,
            ReduceOp::L2,
            ReduceOp::Max,
            ReduceOp::Min,
        ];
        let mut r = SplitMix64::new(47);
        for (blocks, len, inner) in [
            (1, 1, 1),
            (2, 7, 3),
            (3, 33, 17),
            (1, 100, 40),
            (5, 8, 1),
            (40, 12, 2),
            (3, 32, 7),
        ] {
            let x: Vec<f32> = (0..blocks * len * inner)
                .map(|_| r.uniform(-3.0, 3.0))
                .collect();
            // The same values with each result's `len` values contiguous.
            let mut rows = vec![0f32; x.len()];
            for b in 0..blocks {
                for j in 0..len {
                    for i in 0..inner {
                        rows[(b * inner + i) * len + j] = x[(b * len + j) * inner + i];
                    }
                }
            }
            for op in ops {
                let mut want = vec![0f32; blocks * inner];
                reduce(Isa::PORTABLE, op, len, inner, &x, 0, &mut want);
                for isa in Isa::available() {
                    let mut strided = vec![0f32; blocks * inner];
                    reduce(isa, op, len, inner, &x, 0, &mut strided);
                    let mut contiguous = vec![0f32; blocks * inner];
                    reduce(isa, op, len, 1, &rows, 0, &mut contiguous);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&strided), bits(&want), "{op:?} {}", isa.name());
                    assert_eq!(bits(&contiguous), bits(&want), "{op:?} {}", isa.name());
                }
                // Blocks from the second on (a lane's share) give that block's results.
                if blocks > 1 {
                    let mut tail = vec![0f32; (blocks - 1) * inner];
                    reduce(Isa::PORTABLE, op, len, inner, &x, 1, &mut tail);
                    assert_eq!(tail, want[inner..], "{op:?}: from block 1");
                }
                for (k, &got) in want.iter().enumerate() {
                    let (b, i) = (k / inner, k % inner);
                    let vals = (0..len).map(|j| f64::from(x[(b * len + j) * inner + i]));
                    let exact = match op {
                        ReduceOp::Sum => vals.sum::<f64>(),
                        ReduceOp::Mean => vals.sum::<f64>() / len as f64,
                        ReduceOp::SumSquare => vals.map(|v| v * v).sum(),
                        ReduceOp::L1 => vals.map(f64::abs).sum(),
                        ReduceOp::L2 => vals.map(|v| v * v).sum::<f64>().sqrt(),
                        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
                        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
                    };
                    let tol = match op {
                        ReduceOp::Max | ReduceOp::Min => 0.0,
                        _ => 1e-5 * (len as f64) * 9.0,
                    };
                    assert!(
                        (f64::from(got) - exact).abs() <= tol,
                        "{op:?} [{b}, {i}]: {got} against {exact}"
                    );
                }
            }
        }
        let mut x = vec![1.0f32; 20];
        x[13] = f32::NAN;
        for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum] {
            let mut y = [0f32; 1];
            reduce(Isa::PORTABLE, op, 20, 1, &x, 0, &mut y);
            assert!(y[0].is_nan(), "{op:?} of a row holding NaN is {}", y[0]);
        }
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
    fn exp_poly_is_within_a_few_ulp_of_f64() {
        let mut r = SplitMix64::new(41);
        let mut worst = 0f64;
        for _ in 0..200_000 {
            let x = r.uniform(-87.0, 88.0);
            let want = f64::from(x).exp();
            let got = f64::from(exp_poly(x));
            let ulp = f64::from(f32::EPSILON) * want;
            worst = worst.max((got - want).abs() / ulp);
        }
        assert!(worst <= 4.0, "exp_poly is {worst} ulp off");
        assert!(exp_poly(f32::NAN).is_nan());
        assert_eq!(exp_poly(0.0), 1.0);
        assert!(exp_poly(-1000.0) > 0.0 && exp_poly(1000.0).is_finite());
        assert!(sigmoid(-1000.0) < 1e-37);
        assert_eq!(sigmoid(1000.0), 1.0);
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
    fn tanh_softplus_and_mish_are_within_a_few_ulp_of_f64() {
        let mut r = SplitMix64::new(43);
        let ulps = |got: f32, want: f64| {
            let ulp = f64::from(f32::EPSILON) * want.abs().max(f64::from(f32::MIN_POSITIVE));
            (f64::from(got) - want).abs() / ulp
        };
        let (mut th, mut sp, mut mi) = (0f64, 0f64, 0f64);
        for _ in 0..200_000 {
            let x = r.uniform(-12.0, 12.0);
            th = th.max(ulps(tanh_poly(x), f64::from(x).tanh()));
            sp = sp.max(ulps(softplus(x), f64::from(x).exp().ln_1p()));
            let xd = f64::from(x);
            mi = mi.max(ulps(mish(x), xd * xd.exp().ln_1p().tanh()));
        }
        assert!(th <= 4.0, "tanh_poly is {th} ulp off");
        // Two functions of a few ulp each.
        assert!(sp <= 6.0, "softplus is {sp} ulp off");
        assert!(mi <= 8.0, "mish is {mi} ulp off");
        // erf: relative below |x| = 1, absolute above (its value tends to ±1).
        let (mut er_small, mut er_large) = (0f64, 0f64);
        for _ in 0..200_000 {
            let x = r.uniform(-6.0, 6.0);
            let (got, want) = (erf_poly(x), libm::erf(f64::from(x)));
            if x.abs() < 1.0 {
                er_small = er_small.max(ulps(got, want));
            } else {
                er_large = er_large.max((f64::from(got) - want).abs());
            }
        }
        assert!(er_small <= 4.0, "erf_poly is {er_small} ulp off below 1");
        // Gelu, both forms, against their f64 formulas: within 4e-7 absolute where the
        // value is below 1 in magnitude (it passes through 0, and tends to 0 for negative
        // x, where `f + 1` cancels), within 4e-7 relative above.
        let (mut ge, mut gt) = (0f64, 0f64);
        for _ in 0..200_000 {
            let x = r.uniform(-8.0, 8.0);
            let xd = f64::from(x);
            let exact = 0.5 * xd * (1.0 + libm::erf(xd / std::f64::consts::SQRT_2));
            let tanh_form = 0.5
                * xd
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            let err =
                |got: f32, want: f64| (f64::from(got) - want).abs() / (4e-7 * want.abs().max(1.0));
            ge = ge.max(err(gelu(x, false), exact));
            gt = gt.max(err(gelu(x, true), tanh_form));
        }
        assert!(
            ge <= 1.0 && gt <= 1.0,
            "gelu off by {ge} / {gt} of the bound"
        );
        assert!(gelu(f32::NAN, false).is_nan() && gelu(f32::NAN, true).is_nan());
        assert_eq!((gelu(0.0, false), gelu(10.0, true)), (0.0, 10.0));
        assert!(er_large <= 1.5e-7, "erf_poly is {er_large} off above 1");
        assert_eq!(
            (erf_poly(0.0), erf_poly(5.0), erf_poly(-5.0)),
            (0.0, 1.0, -1.0)
        );
        assert!(erf_poly(f32::NAN).is_nan());
        assert_eq!(tanh_poly(0.0), 0.0);
        assert_eq!(tanh_poly(50.0), 1.0);
        assert_eq!(tanh_poly(-50.0), -1.0);
        assert!(
            tanh_poly(f32::NAN).is_nan() && softplus(f32::NAN).is_nan() && mish(f32::NAN).is_nan()
        );
        assert_eq!(mish(30.0), 30.0);
        assert_eq!(softplus(100.0), 100.0);
        // exp_poly's clamp: below x = −87 the result stays e^−87 (far below any
        // quantization step).
        assert!(softplus(-100.0) > 0.0 && softplus(-100.0) < 1e-37);
    }

    #[test]
    fn round_magic_rounds_to_nearest_even_and_its_integer_is_that_value() {
        let mut r = SplitMix64::new(5);
        let check = |v: f32| {
            let (f, i) = round_magic(v);
            assert_eq!(f, v.round_ties_even(), "{v}");
            assert_eq!(i, f as i32, "{v}");
        };
        for v in [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            126.96,
            -125.5,
            4_194_303.0,
        ] {
            check(v);
        }
        for _ in 0..100_000 {
            check(r.uniform(-130.0, 130.0));
            check(r.uniform(-4_194_303.0, 4_194_303.0));
        }
    }

    #[test]
    fn float_loops_give_the_same_bits_on_every_width() {
        let mut g = SplitMix64::new(7);
        for n in [1usize, 15, 16, 17, 1000, 4099] {
            let a: Vec<f32> = (0..n).map(|_| g.uniform(-30.0, 30.0)).collect();
            let b: Vec<f32> = (0..n).map(|_| g.uniform(-3.0, 3.0)).collect();
            let q: Vec<i8> = (0..n).map(|_| g.next_i8()).collect();
            let run = |isa: Isa| {
                let mut outs = vec![vec![0f32; n]; 7];
                dequantize(isa, &q, 0.037, -5, &mut outs[0]);
                for (k, op) in [
                    FloatBinaryOp::Add,
                    FloatBinaryOp::Sub,
                    FloatBinaryOp::Mul,
                    FloatBinaryOp::Div,
                ]
                .into_iter()
                .enumerate()
                {
                    binary(isa, op, &a, &b, &mut outs[1 + k]);
                }
                unary(isa, FloatUnaryOp::Sigmoid, &a, &mut outs[5]);
                let clamp = FloatUnaryOp::Clamp { lo: 0.0, hi: 6.0 };
                unary(isa, clamp, &a, &mut outs[6]);
                // Three channels' scale and bias over whole pixels.
                let mut acc: Vec<i32> = q.iter().map(|&v| i32::from(v) * 977).collect();
                let px = n - n % 3;
                acc_to_f32(isa, &mut acc[..px], &[0.5, 1e-3, 7.25], &[0.0, -2.5, 1e3]);
                outs.push(acc.iter().map(|&e| f32::from_bits(e as u32)).collect());
                for op in [
                    FloatUnaryOp::HardSigmoid {
                        alpha: 0.2,
                        beta: 0.5,
                    },
                    FloatUnaryOp::HardSwish,
                    FloatUnaryOp::LeakyRelu { alpha: 0.1 },
                    FloatUnaryOp::Exp,
                    FloatUnaryOp::Tanh,
                    FloatUnaryOp::Softplus,
                    FloatUnaryOp::Mish,
                    FloatUnaryOp::Erf,
                    FloatUnaryOp::Gelu { tanh: false },
                    FloatUnaryOp::Gelu { tanh: true },
                ] {
                    let mut y = vec![0f32; n];
                    unary(isa, op, &a, &mut y);
                    outs.push(y);
                }
                outs.iter()
                    .map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            };
            let want = run(Isa::PORTABLE);
            // The portable build is the scalar formula, element by element.
            for i in 0..n - n % 3 {
                let (s, b) = ([0.5, 1e-3, 7.25][i % 3], [0.0, -2.5, 1e3][i % 3]);
                let acc = i32::from(q[i]) * 977;
                assert_eq!(want[7][i], (acc as f32 * s + b).to_bits());
            }
            for i in 0..n {
                assert_eq!(want[5][i], sigmoid(a[i]).to_bits());
                assert_eq!(want[4][i], (a[i] / b[i]).to_bits());
                // The quantized route's formulas (their tables), element by element.
                let act = |op| crate::onnx::lower::activation(op, 0.2, 0.5, a[i]).unwrap();
                assert_eq!(want[8][i], act("HardSigmoid").to_bits());
                assert_eq!(want[9][i], act("HardSwish").to_bits());
                let leaky = crate::onnx::lower::activation("LeakyRelu", 0.1, 0.0, a[i]).unwrap();
                assert_eq!(want[10][i], leaky.to_bits());
                assert_eq!(want[11][i], exp_poly(a[i]).to_bits());
                assert_eq!(want[12][i], tanh_poly(a[i]).to_bits());
                assert_eq!(want[13][i], softplus(a[i]).to_bits());
                assert_eq!(want[14][i], mish(a[i]).to_bits());
                assert_eq!(want[15][i], erf_poly(a[i]).to_bits());
                // The Gelu step's passes are the scalar formula.
                assert_eq!(want[16][i], gelu(a[i], false).to_bits());
                assert_eq!(want[17][i], gelu(a[i], true).to_bits());
            }
            for isa in Isa::available() {
                assert_eq!(
                    run(isa),
                    want,
                    "{} differs from portable, n {n}",
                    isa.name()
                );
            }
        }
    }

    /// Softmax, LogSoftmax and LayerNormalization rows: the same bits whether a row is
    /// contiguous or strided across neighbouring rows (the block path), on every vector
    /// width, and close to an `f64` reference.
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn normalize_rows_are_layout_and_width_independent_and_accurate() {
        let mut g = SplitMix64::new(11);
        let (len, rows) = (37usize, 21usize);
        // Row-major [rows, len] and its transpose [len, rows] (rows strided `rows` apart).
        let x: Vec<f32> = (0..rows * len).map(|_| g.uniform(-12.0, 12.0)).collect();
        let xt: Vec<f32> = (0..rows * len)
            .map(|i| x[(i % rows) * len + i / rows])
            .collect();
        let scale: Vec<f32> = (0..len).map(|_| g.uniform(0.5, 1.5)).collect();
        let bias: Vec<f32> = (0..len).map(|_| g.uniform(-0.3, 0.3)).collect();
        let ops = [
            NormOp::Softmax,
            NormOp::LogSoftmax,
            NormOp::LayerNorm {
                eps: 1e-5,
                scale: scale.clone(),
                bias: Some(bias.clone()),
            },
            NormOp::LayerNorm {
                eps: 1e-5,
                scale: scale.clone(),
                bias: None,
            },
        ];
        for op in &ops {
            let mut want = vec![0f32; rows * len];
            normalize(Isa::PORTABLE, op, len, 1, &x, 0, &mut want);
            for isa in Isa::available() {
                // Contiguous rows, in two calls (blocks 0..5 and 5..).
                let mut y = vec![0f32; rows * len];
                let (a, b) = y.split_at_mut(5 * len);
                normalize(isa, op, len, 1, &x, 0, a);
                normalize(isa, op, len, 1, &x, 5, b);
                assert_eq!(bits(&y), bits(&want), "{op:?} contiguous on {}", isa.name());
                // The same rows strided: one block of `rows` rows.
                let mut yt = vec![0f32; rows * len];
                normalize(isa, op, len, rows, &xt, 0, &mut yt);
                let back: Vec<f32> = (0..rows * len)
                    .map(|i| yt[(i % len) * rows + i / len])
                    .collect();
                assert_eq!(bits(&back), bits(&want), "{op:?} strided on {}", isa.name());
            }
            // Against f64.
            for r in 0..rows {
                let row: Vec<f64> = x[r * len..(r + 1) * len]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let m = row.iter().cloned().fold(f64::MIN, f64::max);
                let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                let mean = row.iter().sum::<f64>() / len as f64;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / len as f64;
                for (j, &v) in row.iter().enumerate() {
                    let exact = match op {
                        NormOp::Softmax => (v - m).exp() / s,
                        NormOp::LogSoftmax => (v - m) - s.ln(),
                        NormOp::LayerNorm { bias, .. } => {
                            (v - mean) / (var + 1e-5).sqrt() * f64::from(scale[j])
                                + bias.as_ref().map_or(0.0, |b| f64::from(b[j]))
                        }
                    };
                    let got = f64::from(want[r * len + j]);
                    assert!(
                        (got - exact).abs() <= 1e-5 * exact.abs().max(1.0),
                        "{op:?} row {r} [{j}]: {got} against {exact}"
                    );
                }
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
}
