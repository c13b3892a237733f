//! The quantized operator kernels the importer lowers a model to, as safe functions over
//! slices. Every tensor is `i8` (a `u8` tensor with zero point `z` is the `i8` tensor
//! `x ^ 0x80` with zero point `z - 128`, which is exact for every operator here).
//!
//! Contract: every kernel is a pure function of its inputs and its precomputed parameters:
//! no allocation, no clock, no panics on the sizes the lowering checked (the lowering
//! validates every geometry before a run can reach these). Work is split by the caller into
//! row ranges (`rows` = ranges of the output's outermost "row" index, as each kernel says);
//! the result never depends on the split. Rounding is `round_half_even` everywhere, in `f32`,
//! without fused multiply-add.

//!
//! The kernels live by kind: windows over images (`pool`: max and average pooling),
//! elementwise binary operators (`binary`), data movement (`layout`: transposes and
//! resizes); this file holds the shared requantization, the window geometry, the general
//! convolution, tables and `QuantizeLinear`.

use super::isa::{multiversion, Isa};
use std::ops::Range;

mod binary;
mod layout;
mod pool;
#[cfg(test)]
mod tests;

pub(crate) use binary::{dense_strides, Binary, BinaryKind};
pub(crate) use layout::{resize, transpose, Interp, Tap};
pub(crate) use pool::{avg_pool, max_pool, AvgParams};

/// `1.5 · 2^23`: adding it to `|v| <= 2^22` rounds `v` half to even to an integer `n` (exact
/// under IEEE-754 round-to-nearest-even, which Rust never changes), and the sum's bit
/// pattern is then `MAGIC.to_bits() + n`, because floats in `[2^23, 2^24)` are one apart.
const MAGIC: f32 = 12_582_912.0;

/// Saturating `i8` of `round_half_even(v) + zp`, clamped into `[lo, hi]`; NaN gives 0.
/// `v` is clamped to ±1024 first (beyond that every result saturates anyway).
///
/// All integer after one float add (the magic-number rounding read back as bits, see
/// [`MAGIC`]), so a loop of it vectorises on every ISA; `f32::round_ties_even` is a libm
/// call on baseline x86-64 and a float-to-`i8` cast is scalarised. The same integers as
/// the float formula `clamp(round(v) + zp, lo, hi) as i8` (test
/// `requant_matches_the_float_formula`).
#[inline(always)]
pub(crate) fn requant_f32(v: f32, zp: i32, lo: i8, hi: i8) -> i8 {
    let t = v.clamp(-1024.0, 1024.0) + MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) + zp;
    let q = n.max(i32::from(lo)).min(i32::from(hi)) as i8;
    if v.is_nan() {
        0
    } else {
        q
    }
}

/// `v as i8` for an integral `v` in `[-128, 127]` (NaN gives 0, as the cast does), through
/// the bits of `v + MAGIC` ([`MAGIC`]): integer code that vectorises, where the float-to-`i8`
/// cast is scalarised.
#[inline(always)]
fn integral_to_i8(v: f32) -> i8 {
    let n = ((v + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) as i8;
    if v.is_nan() {
        0
    } else {
        n
    }
}

/// Geometry of a 2-D window operator (convolution or pooling) over NHWC images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    /// Top and left padding (bottom and right are implied by `out_h`, `out_w`).
    pub pt: usize,
    pub pl: usize,
}

impl Window {
    /// Input row of output row `oy`, tap `ky` (may be outside the image).
    #[inline]
    fn iy(&self, oy: usize, ky: usize) -> isize {
        (oy * self.sh + ky * self.dh) as isize - self.pt as isize
    }
    #[inline]
    fn ix(&self, ox: usize, kx: usize) -> isize {
        (ox * self.sw + kx * self.dw) as isize - self.pl as isize
    }
}

/// A grouped / dilated / rectangular convolution with exact `i32` accumulation
/// (the general path; square dense convolutions go to [`crate::conv::Conv2d`]).
#[derive(Clone, Debug)]
pub(crate) struct GeneralConv {
    pub win: Window,
    pub in_c: usize,
    pub out_c: usize,
    pub groups: usize,
    /// `[out_c][kh][kw][in_c / groups]`.
    pub weights: Vec<i8>,
    pub bias: Vec<i32>,
    pub multipliers: Vec<f32>,
    pub x_zp: i32,
    pub y_zp: i32,
    pub lo: i8,
    pub hi: i8,
}

/// Largest ungrouped patch (`kh · kw · in_c`) [`GeneralConv::run`] gathers on the stack.
const PATCH_MAX: usize = 4608;

impl GeneralConv {
    /// Multiply-accumulates of one run over `batch` images.
    pub fn macs(&self, batch: usize) -> u64 {
        let w = &self.win;
        (batch * w.out_h * w.out_w * self.out_c * w.kh * w.kw * (self.in_c / self.groups)) as u64
    }

    /// Output rows `rows` (over `batch * out_h`) of NHWC `input` into `out` (those rows only).
    ///
    /// Ungrouped convolutions whose patch fits [`PATCH_MAX`] (dilated ones, rectangular
    /// kernels, asymmetric pads) gather each output pixel's zero-point-relative patch once
    /// (padding taps are 0) into a stack buffer and take one dot product per output
    /// channel over it, which the compiler vectorizes; the sums are the same integers as
    /// the tap-by-tap loop below, so the results are identical.
    pub fn run(&self, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let taps = self.win.kh * self.win.kw * self.in_c;
        if self.groups == 1 && taps <= PATCH_MAX {
            self.run_patches(input, out, rows);
        } else {
            self.run_taps(input, out, rows);
        }
    }

    fn run_patches(&self, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let w = &self.win;
        let c = self.in_c;
        let taps = w.kh * w.kw * c;
        let img = w.in_h * w.in_w * c;
        let mut patch = [0i16; PATCH_MAX];
        let patch = &mut patch[..taps];
        let mut o = 0;
        for r in rows {
            let (b, oy) = (r / w.out_h, r % w.out_h);
            let x = &input[b * img..(b + 1) * img];
            for ox in 0..w.out_w {
                for ky in 0..w.kh {
                    let iy = w.iy(oy, ky);
                    for kx in 0..w.kw {
                        let ix = w.ix(ox, kx);
                        let dst = &mut patch[(ky * w.kw + kx) * c..(ky * w.kw + kx + 1) * c];
                        if iy < 0 || iy >= w.in_h as isize || ix < 0 || ix >= w.in_w as isize {
                            dst.fill(0);
                        } else {
                            let base = (iy as usize * w.in_w + ix as usize) * c;
                            for (d, &v) in dst.iter_mut().zip(&x[base..base + c]) {
                                *d = (i32::from(v) - self.x_zp) as i16;
                            }
                        }
                    }
                }
                for oc in 0..self.out_c {
                    let wt = &self.weights[oc * taps..(oc + 1) * taps];
                    let dot: i32 = patch
                        .iter()
                        .zip(wt)
                        .map(|(&a, &b)| i32::from(a) * i32::from(b))
                        .sum();
                    out[o] = requant_f32(
                        (self.bias[oc] + dot) as f32 * self.multipliers[oc],
                        self.y_zp,
                        self.lo,
                        self.hi,
                    );
                    o += 1;
                }
            }
        }
    }

    fn run_taps(&self, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let w = &self.win;
        let icg = self.in_c / self.groups;
        let ocg = self.out_c / self.groups;
        let taps = w.kh * w.kw * icg;
        let img = w.in_h * w.in_w * self.in_c;
        let mut o = 0;
        for r in rows {
            let (b, oy) = (r / w.out_h, r % w.out_h);
            let x = &input[b * img..(b + 1) * img];
            for ox in 0..w.out_w {
                for oc in 0..self.out_c {
                    let g = oc / ocg;
                    let wt = &self.weights[oc * taps..(oc + 1) * taps];
                    let mut acc = self.bias[oc];
                    for ky in 0..w.kh {
                        let iy = w.iy(oy, ky);
                        if iy < 0 || iy >= w.in_h as isize {
                            continue;
                        }
                        for kx in 0..w.kw {
                            let ix = w.ix(ox, kx);
                            if ix < 0 || ix >= w.in_w as isize {
                                continue;
                            }
                            let base = (iy as usize * w.in_w + ix as usize) * self.in_c + g * icg;
                            let wrow = &wt[(ky * w.kw + kx) * icg..(ky * w.kw + kx + 1) * icg];
                            for (xv, wv) in x[base..base + icg].iter().zip(wrow) {
                                acc += (i32::from(*xv) - self.x_zp) * i32::from(*wv);
                            }
                        }
                    }
                    out[o] = requant_f32(
                        acc as f32 * self.multipliers[oc],
                        self.y_zp,
                        self.lo,
                        self.hi,
                    );
                    o += 1;
                }
            }
        }
    }
}

/// Clamps every value into `[lo, hi]`.
pub(crate) fn clamp(out: &mut [i8], lo: i8, hi: i8) {
    for v in out {
        *v = (*v).clamp(lo, hi);
    }
}

/// Maps every element through a 256-entry table indexed by `x as u8` (requantization and
/// quantized unary functions).
pub(crate) fn lut(table: &[i8; 256], input: &[i8], out: &mut [i8]) {
    for (d, s) in out.iter_mut().zip(input) {
        *d = table[*s as u8 as usize];
    }
}

multiversion! {
    /// `QuantizeLinear` of `f32` values: `saturate(round_half_even(x / scale) + zp)` (ONNX
    /// semantics, as ONNX Runtime computes it: a division, not a multiply by the reciprocal).
    pub(crate) fn quantize(input: &[f32], scale: f32, zp: i32, out: &mut [i8]) {
        for (d, s) in out.iter_mut().zip(input) {
            *d = requant_f32(*s / scale, zp, i8::MIN, i8::MAX);
        }
    }
}
