//! The float loops that sum along a row: softmax, log-softmax and layer normalization
//! ([`normalize`]) and the reductions ([`reduce`]), all in one canonical order (8 partial
//! sums, `j mod 8`, then a fixed tree), so a row gives the same bits contiguous or strided,
//! on every ISA; see the parent module's contract.

use super::super::super::isa::multiversion;
use super::exp_poly;
use crate::onnx::program::{NormOp, ReduceOp};

/// Partial sums per row: element `j` of a row goes into partial sum `j mod SUM_WAYS`, in
/// index order, and the partials meet in [`sum_partials`]'s fixed tree. The same operations
/// whether a row is contiguous (the partials a vector) or strided (one row per lane): the
/// same bits on every ISA and layout, and a row's latency `len / 8` dependent adds, not
/// `len`.
const SUM_WAYS: usize = 8;

/// The row sum from its [`SUM_WAYS`] partial sums: `((p0 + p4) + (p2 + p6)) + ((p1 + p5) +
/// (p3 + p7))`.
#[inline(always)]
fn sum_partials(p: &[f32; SUM_WAYS]) -> f32 {
    ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]))
}

/// `f(v)` summed over `x` in the canonical order ([`SUM_WAYS`]).
#[inline(always)]
fn row_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut p = [0.0f32; SUM_WAYS];
    let mut chunks = x.chunks_exact(SUM_WAYS);
    for c in &mut chunks {
        for (p, &v) in p.iter_mut().zip(c) {
            *p += f(v);
        }
    }
    for (p, &v) in p.iter_mut().zip(chunks.remainder()) {
        *p += f(v);
    }
    sum_partials(&p)
}

/// Normalizes the contiguous row `x` into `out` (same length): what a row of a
/// [`Step::FloatNorm`](crate::onnx::program::Step::FloatNorm) computes, every sum over the
/// row in the canonical order ([`SUM_WAYS`]).
///
/// - Softmax: `m = max`, `e_j = exp_poly(x_j − m)`, `s = Σ e_j`, `y_j = e_j · (1/s)` (ONNX
///   Runtime's order: its MLAS kernel also multiplies by the reciprocal).
/// - LogSoftmax: `y_j = (x_j − m) − ln s` (`ln` from `det_math`, once a row).
/// - LayerNormalization: ONNX Runtime's CPU formula in `f32`: `μ = (Σ x_j) / n`,
///   `σ = √((Σ x_j²) / n − μ² + ε)`, `y_j = (x_j − μ) / σ · γ_j (+ β_j)`.
#[inline(always)]
fn norm_row(op: &NormOp, x: &[f32], out: &mut [f32]) {
    match op {
        NormOp::Softmax | NormOp::LogSoftmax => {
            // The maximum by partial maxima (exact in any order, so it may vectorise).
            let mut pm = [f32::NEG_INFINITY; SUM_WAYS];
            let mut chunks = x.chunks_exact(SUM_WAYS);
            for c in &mut chunks {
                for (p, &v) in pm.iter_mut().zip(c) {
                    *p = p.max(v);
                }
            }
            let m = pm
                .iter()
                .chain(chunks.remainder())
                .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            // The exponentials in one pass (it vectorises), their sum in another.
            for (y, &v) in out.iter_mut().zip(x) {
                *y = exp_poly(v - m);
            }
            let s = row_sum(out, |e| e);
            if matches!(op, NormOp::Softmax) {
                let r = 1.0 / s;
                out.iter_mut().for_each(|y| *y *= r);
            } else {
                let l = redline_runtime::det_math::ln(s);
                for (y, &v) in out.iter_mut().zip(x) {
                    *y = (v - m) - l;
                }
            }
        }
        NormOp::LayerNorm { eps, scale, bias } => {
            let sum = row_sum(x, |v| v);
            let sq = row_sum(x, |v| v * v);
            let n = x.len() as f32;
            let mean = sum / n;
            let sd = (sq / n - mean * mean + eps).sqrt();
            let ys = out.iter_mut().zip(x).zip(scale);
            match bias {
                Some(b) => ys
                    .zip(b)
                    .for_each(|(((y, &v), &g), &b)| *y = (v - mean) / sd * g + b),
                None => ys.for_each(|((y, &v), &g)| *y = (v - mean) / sd * g),
            }
        }
    }
}

/// Lanes of a strided row block: [`normalize`] normalizes this many neighbouring rows at
/// once, one per vector lane.
const NORM_BLOCK: usize = 16;

/// Each lane's row sum from its [`SUM_WAYS`] partial sums, [`sum_partials`]'s tree.
#[inline(always)]
fn lane_sums(parts: &[[f32; NORM_BLOCK]; SUM_WAYS]) -> [f32; NORM_BLOCK] {
    let mut s = [0.0f32; NORM_BLOCK];
    for (k, s) in s.iter_mut().enumerate() {
        let mut p = [0.0f32; SUM_WAYS];
        for (p, part) in p.iter_mut().zip(parts) {
            *p = part[k];
        }
        *s = sum_partials(&p);
    }
    s
}

/// [`norm_row`] for the `w <= NORM_BLOCK` neighbouring rows starting at `x[0]`, each row's
/// `len` elements `inner` apart: the same operations in the same order per row, with the
/// rows in the vector lanes.
#[inline(always)]
fn norm_block(op: &NormOp, len: usize, inner: usize, w: usize, x: &[f32], out: &mut [f32]) {
    let row = |j: usize| j * inner..j * inner + w;
    match op {
        NormOp::Softmax | NormOp::LogSoftmax => {
            let mut m = [f32::NEG_INFINITY; NORM_BLOCK];
            for j in 0..len {
                for (m, &v) in m.iter_mut().zip(&x[row(j)]) {
                    *m = m.max(v);
                }
            }
            let mut parts = [[0.0f32; NORM_BLOCK]; SUM_WAYS];
            for j in 0..len {
                let (xs, ys) = (&x[row(j)], &mut out[row(j)]);
                let p = &mut parts[j % SUM_WAYS];
                for ((s, y), (&v, &m)) in p.iter_mut().zip(ys).zip(xs.iter().zip(&m)) {
                    let e = exp_poly(v - m);
                    *y = e;
                    *s += e;
                }
            }
            let s = lane_sums(&parts);
            if matches!(op, NormOp::Softmax) {
                let mut r = [0.0f32; NORM_BLOCK];
                for (r, &s) in r.iter_mut().zip(&s) {
                    *r = 1.0 / s;
                }
                for j in 0..len {
                    for (y, &r) in out[row(j)].iter_mut().zip(&r) {
                        *y *= r;
                    }
                }
            } else {
                let mut l = [0.0f32; NORM_BLOCK];
                for (l, &s) in l[..w].iter_mut().zip(&s) {
                    *l = redline_runtime::det_math::ln(s);
                }
                for j in 0..len {
                    let (xs, ys) = (&x[row(j)], &mut out[row(j)]);
                    for ((y, &v), (&m, &l)) in ys.iter_mut().zip(xs).zip(m.iter().zip(&l)) {
                        *y = (v - m) - l;
                    }
                }
            }
        }
        NormOp::LayerNorm { eps, scale, bias } => {
            let mut sum_parts = [[0.0f32; NORM_BLOCK]; SUM_WAYS];
            let mut sq_parts = [[0.0f32; NORM_BLOCK]; SUM_WAYS];
            for j in 0..len {
                let (s, q) = (&mut sum_parts[j % SUM_WAYS], &mut sq_parts[j % SUM_WAYS]);
                for ((s, q), &v) in s.iter_mut().zip(q.iter_mut()).zip(&x[row(j)]) {
                    *s += v;
                    *q += v * v;
                }
            }
            let (sum, sq) = (lane_sums(&sum_parts), lane_sums(&sq_parts));
            let n = len as f32;
            let (mut mean, mut sd) = ([0.0f32; NORM_BLOCK], [0.0f32; NORM_BLOCK]);
            for k in 0..NORM_BLOCK {
                mean[k] = sum[k] / n;
                sd[k] = (sq[k] / n - mean[k] * mean[k] + eps).sqrt();
            }
            for j in 0..len {
                let (g, b) = (scale[j], bias.as_ref().map(|b| b[j]));
                let (xs, ys) = (&x[row(j)], &mut out[row(j)]);
                for ((y, &v), (&mu, &sd)) in ys.iter_mut().zip(xs).zip(mean.iter().zip(&sd)) {
                    let t = (v - mu) / sd * g;
                    *y = match b {
                        Some(b) => t + b,
                        None => t,
                    };
                }
            }
        }
    }
}

multiversion! {
    /// Blocks `first..` of a [`Step::FloatNorm`](crate::onnx::program::Step::FloatNorm)
    /// (each block `len · inner` elements: `inner` rows of `len` values strided `inner`
    /// apart), as many as `out` holds. Contiguous rows (`inner == 1`) go one at a time
    /// ([`norm_row`]: their exponentials and partial sums vectorise); strided ones
    /// [`NORM_BLOCK`] at a time, one per lane ([`norm_block`]). Both give each row's bits of
    /// [`norm_row`].
    pub(crate) fn normalize(op: &NormOp, len: usize, inner: usize, x: &[f32], first: usize, out: &mut [f32]) {
        let block = (len * inner).max(1);
        for (b, y) in out.chunks_exact_mut(block).enumerate() {
            let xb = &x[(first + b) * block..(first + b + 1) * block];
            if inner == 1 {
                norm_row(op, xb, y);
                continue;
            }
            let mut i = 0;
            while i < inner {
                let w = NORM_BLOCK.min(inner - i);
                norm_block(op, len, inner, w, &xb[i..], &mut y[i..]);
                i += w;
            }
        }
    }
}

/// `a` and `b` combined by a reduction's pairwise rule: the larger or smaller (NaN wins,
/// so a NaN anywhere in a row reaches its result whatever the order), else the sum.
#[inline(always)]
fn reduce_pair(op: ReduceOp, a: f32, b: f32) -> f32 {
    match op {
        ReduceOp::Max if a.is_nan() || b.is_nan() => f32::NAN,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min if a.is_nan() || b.is_nan() => f32::NAN,
        ReduceOp::Min => a.min(b),
        _ => a + b,
    }
}

/// Contiguous rows up to this long reduce [`NORM_BLOCK`] rows at a time, one per lane.
const SHORT_ROW: usize = 32;

/// What a reduction sums for one value (`x`, `x²` or `|x|`); Max and Min take `x`.
#[inline(always)]
fn reduce_term(op: ReduceOp, v: f32) -> f32 {
    match op {
        ReduceOp::SumSquare | ReduceOp::L2 => v * v,
        ReduceOp::L1 => v.abs(),
        _ => v,
    }
}

/// The row's value from its [`SUM_WAYS`] partials: [`sum_partials`]' tree with the
/// reduction's own pairwise rule.
#[inline(always)]
fn reduce_tree(op: ReduceOp, p: &[f32; SUM_WAYS]) -> f32 {
    let pair = |a: f32, b: f32| reduce_pair(op, a, b);
    pair(
        pair(pair(p[0], p[4]), pair(p[2], p[6])),
        pair(pair(p[1], p[5]), pair(p[3], p[7])),
    )
}

/// A reduction's result from its combined value over `len` elements.
#[inline(always)]
fn reduce_finish(op: ReduceOp, s: f32, len: usize) -> f32 {
    match op {
        ReduceOp::Mean => s / len as f32,
        ReduceOp::L2 => s.sqrt(),
        _ => s,
    }
}

/// The value a reduction starts from.
#[inline(always)]
fn reduce_start(op: ReduceOp) -> f32 {
    match op {
        ReduceOp::Max => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
        _ => 0.0,
    }
}

multiversion! {
    /// Blocks `first..` of a [`Step::FloatReduce`](crate::onnx::program::Step::FloatReduce)
    /// (each block `len · inner` elements), `inner` results each, as many blocks as `out`
    /// holds. Every result combines its values in the canonical order ([`SUM_WAYS`]
    /// partials `j mod 8` in index order, then [`sum_partials`]' tree), whether the values
    /// are contiguous (`inner == 1`) or strided (results in the lanes): the same bits
    /// either way, on every ISA.
    pub(crate) fn reduce(op: ReduceOp, len: usize, inner: usize, x: &[f32], first: usize, out: &mut [f32]) {
        let inner = inner.max(1);
        let block = len * inner;
        if inner == 1 && len <= SHORT_ROW {
            // Short contiguous rows (a deformable attention's sum over its 12 sampling
            // points): NORM_BLOCK rows at a time, one row per lane, each row's partials
            // filled in its index order as below, so the same bits without a row's setup.
            for (g, y) in out.chunks_mut(NORM_BLOCK).enumerate() {
                let w = y.len();
                let rows = &x[(first + g * NORM_BLOCK) * len..(first + g * NORM_BLOCK + w) * len];
                let mut parts = [[reduce_start(op); NORM_BLOCK]; SUM_WAYS];
                for j in 0..len {
                    let p = &mut parts[j % SUM_WAYS];
                    for (r, p) in p[..w].iter_mut().enumerate() {
                        *p = reduce_pair(op, *p, reduce_term(op, rows[r * len + j]));
                    }
                }
                for (k, y) in y.iter_mut().enumerate() {
                    let mut p = [0.0f32; SUM_WAYS];
                    for (p, part) in p.iter_mut().zip(&parts) {
                        *p = part[k];
                    }
                    *y = reduce_finish(op, reduce_tree(op, &p), len);
                }
            }
            return;
        }
        for (b, y) in out.chunks_exact_mut(inner).enumerate() {
            let xb = &x[(first + b) * block..(first + b + 1) * block];
            if inner == 1 {
                // A contiguous row: the partials are a vector.
                let mut p = [reduce_start(op); SUM_WAYS];
                let mut chunks = xb.chunks_exact(SUM_WAYS);
                for c in &mut chunks {
                    for (p, &v) in p.iter_mut().zip(c) {
                        *p = reduce_pair(op, *p, reduce_term(op, v));
                    }
                }
                for (p, &v) in p.iter_mut().zip(chunks.remainder()) {
                    *p = reduce_pair(op, *p, reduce_term(op, v));
                }
                y[0] = reduce_finish(op, reduce_tree(op, &p), len);
                continue;
            }
            let mut i = 0;
            while i < inner {
                let w = NORM_BLOCK.min(inner - i);
                let mut parts = [[reduce_start(op); NORM_BLOCK]; SUM_WAYS];
                for j in 0..len {
                    let p = &mut parts[j % SUM_WAYS];
                    for (p, &v) in p[..w].iter_mut().zip(&xb[j * inner + i..j * inner + i + w]) {
                        *p = reduce_pair(op, *p, reduce_term(op, v));
                    }
                }
                for (k, y) in y[i..i + w].iter_mut().enumerate() {
                    let mut p = [0.0f32; SUM_WAYS];
                    for (p, part) in p.iter_mut().zip(&parts) {
                        *p = part[k];
                    }
                    *y = reduce_finish(op, reduce_tree(op, &p), len);
                }
                i += w;
            }
        }
    }
}
