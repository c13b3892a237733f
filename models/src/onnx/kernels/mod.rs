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
use crate::conv::Conv2d;
use std::ops::Range;

mod binary;
#[cfg(target_arch = "x86_64")]
mod depthwise_vnni;
pub(crate) mod float;
mod layout;
mod lut;
mod matmul;
mod pool;
#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod tests;

pub(crate) use binary::{
    add_fixed, coalesce, dense_strides, AddParams, Binary, BinaryKind, MulParams,
};
pub(crate) use layout::{
    copies_words, pad, resize, tile_rows, transpose, Interp, PadGeometry, Tap,
};
pub(crate) use lut::{copy_run, lut, lut_rows};
pub(crate) use matmul::{matmul_rows, MatMulDims, MatMulOut};

/// Packs row-major `b` (`k × n`) for the VNNI product into `out`
/// ([`packed_matmul_bytes`] bytes); nothing where there is no such kernel.
pub(crate) fn pack_matmul_b(k: usize, n: usize, b: &[i8], out: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    matmul::vnni::pack(k, n, b, out);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (k, n, b, out);
}

/// [`matmul_rows`] reading `packed` (one [`pack_matmul_b`] of each image of `b`) on the
/// AVX-512 VNNI kernel: the same bytes. Falls back to [`matmul_rows`] on `b` itself where
/// that kernel cannot run (the lowering plans packing only where it can).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_rows_packed(
    isa: Isa,
    d: MatMulDims,
    (a, b, packed): (&[i8], &[i8], &[i8]),
    zps: (i32, i32),
    how: MatMulOut,
    first: usize,
    out: &mut [i8],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let images = if d.b_batched { d.batch } else { 1 };
        let fits = a.len() >= d.batch * d.m * d.k
            && packed.len() >= images * packed_matmul_bytes(d.k, d.n)
            && d.k < 1 << 15
            && out.len().is_multiple_of((d.n * how.elem_bytes()).max(1))
            && first + out.len() / (d.n * how.elem_bytes()).max(1) <= d.batch * d.m;
        let vnni = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni");
        if fits && vnni {
            // SAFETY: the CPU reported the features just above; `fits` checked the operand
            // and output sizes `vnni::matmul_rows` requires.
            unsafe { matmul::vnni::matmul_rows(d, a, packed, zps, how, first, out) };
            return;
        }
    }
    let _ = packed;
    matmul_rows(isa, d, a, b, zps, how, first, out);
}

/// Bytes of one `k × n` matrix packed for the VNNI product (0 where there is no such
/// kernel: the step is never planned there).
pub(crate) fn packed_matmul_bytes(k: usize, n: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        matmul::vnni::packed_bytes(k, n)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, n);
        0
    }
}
pub(crate) use pool::{
    avg_pool, avg_pool_f32, global_pool_finish, global_pool_sums, max_pool, max_pool_f32, AvgFloat,
    AvgParams,
};

/// `1.5 · 2^23`: adding it to `|v| <= 2^22` rounds `v` half to even to an integer `n` (exact
/// under IEEE-754 round-to-nearest-even, which Rust never changes), and the sum's bit
/// pattern is then `MAGIC.to_bits() + n`, because floats in `[2^23, 2^24)` are one apart.
const MAGIC: f32 = 12_582_912.0;

/// `v` rounded to the nearest integer (ties to even), as `f32` and as `i32`, for
/// `|v| < 2^22` (see [`MAGIC`]). The integer is read from the bits of `v + MAGIC`, which
/// vectorises: a saturating `as i32` conversion makes LLVM convert lane by lane (it left
/// the float route's sigmoid loop about 10× slower).
#[inline(always)]
pub(crate) fn round_magic(v: f32) -> (f32, i32) {
    let t = v + MAGIC;
    (
        t - MAGIC,
        (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32),
    )
}

/// Saturating `i8` of `round_half_even(v) + zp`, clamped into `[lo, hi]`; NaN gives 0.
/// `v` is clamped to ±1024 first (beyond that every result saturates anyway).
///
/// All integer after one float add (the magic-number rounding read back as bits,
/// [`round_magic`]), so a loop of it vectorises on every ISA; `f32::round_ties_even` is a libm
/// call on baseline x86-64 and a float-to-`i8` cast is scalarised. The same integers as
/// the float formula `clamp(round(v) + zp, lo, hi) as i8` (test
/// `requant_matches_the_float_formula`).
#[inline(always)]
pub(crate) fn requant_f32(v: f32, zp: i32, lo: i8, hi: i8) -> i8 {
    requant_f32_or(v, zp, lo, hi, 0)
}

/// [`requant_f32`] with `nan` for a NaN `v` (`QuantizeLinear`'s rule: the lowest value).
#[inline(always)]
pub(super) fn requant_f32_or(v: f32, zp: i32, lo: i8, hi: i8, nan: i8) -> i8 {
    let n = round_magic(v.clamp(-1024.0, 1024.0)).1 + zp;
    let q = n.max(i32::from(lo)).min(i32::from(hi)) as i8;
    if v.is_nan() {
        nan
    } else {
        q
    }
}

/// Row-major (C order) strides of `shape`, in elements: the last dimension's is 1, each
/// other the product of the dimensions after it.
pub(crate) fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Where element `flat` (row-major over `shape`) lies in a tensor walked with `strides`:
/// `Σ index[d] · strides[d]`. Allocation-free (the kernels' scalar paths use it).
#[inline(always)]
pub(crate) fn strided_offset(mut flat: usize, shape: &[usize], strides: &[usize]) -> usize {
    let mut off = 0;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        off += (flat % n) * s;
        flat /= n;
    }
    off
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

    /// True when the one output pixel's window is the whole image from its top-left corner
    /// (a global pool's window; padding below or right of it, if any, is outside the
    /// image).
    pub(crate) fn covers_image(&self) -> bool {
        (self.out_h, self.out_w) == (1, 1)
            && (self.kh, self.kw) == (self.in_h, self.in_w)
            && (self.pt, self.pl) == (0, 0)
    }

    /// The output columns whose whole window lies inside the image's columns (empty when
    /// none does): the pixels a kernel runs without checking columns.
    pub(crate) fn inside_columns(&self) -> Range<usize> {
        let lo = self.pl.div_ceil(self.sw.max(1));
        let span = (self.kw - 1) * self.dw;
        let hi = if self.in_w + self.pl > span {
            ((self.in_w - 1 + self.pl - span) / self.sw.max(1) + 1).min(self.out_w)
        } else {
            0
        };
        lo..hi
    }

    /// Taps `ky` of output row `oy` whose input row lies inside the image.
    #[inline]
    fn rows_inside(&self, oy: usize) -> Range<usize> {
        taps_inside(oy * self.sh, self.pt, self.dh, self.kh, self.in_h)
    }

    /// Taps `kx` of output column `ox` whose input column lies inside the image.
    #[inline]
    fn cols_inside(&self, ox: usize) -> Range<usize> {
        taps_inside(ox * self.sw, self.pl, self.dw, self.kw, self.in_w)
    }

    /// The taps of output pixel (`oy`, `ox`) inside the image, row by row, as (tap
    /// `ky · kw + kx`, input pixel `iy · in_w + ix`): the window walk of every kernel that
    /// skips padding.
    #[inline]
    fn pixel_taps(&self, oy: usize, ox: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let cols = self.cols_inside(ox);
        self.rows_inside(oy).flat_map(move |ky| {
            let iy = oy * self.sh + ky * self.dh - self.pt;
            cols.clone().map(move |kx| {
                let ix = ox * self.sw + kx * self.dw - self.pl;
                (ky * self.kw + kx, iy * self.in_w + ix)
            })
        })
    }
}

/// The taps `t` in `0..k` of a window starting at `start − pad` (in padded coordinates
/// `start`) whose input index `start + t·dilation − pad` lies in `0..len`: one range, as
/// the index grows with `t`.
#[inline]
pub(crate) fn taps_inside(
    start: usize,
    pad: usize,
    dilation: usize,
    k: usize,
    len: usize,
) -> Range<usize> {
    // First t with start + t·d >= bound.
    let first = |bound: usize| {
        if start >= bound {
            0
        } else {
            (bound - start).div_ceil(dilation.max(1))
        }
    };
    first(pad).min(k)..first(pad + len).min(k)
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
    /// A depthwise convolution's weights in its kernels' layouts
    /// ([`GeneralConv::prepared`]); empty for every other convolution.
    pub depthwise: DepthwiseWeights,
    /// A grouped convolution the dense kernels can run (square window, equal strides,
    /// symmetric padding, no dilation): one dense layer per group, `in_c / groups` →
    /// `out_c / groups` channels, each reading its group's channels of the input through a
    /// channel view and writing its group's channels of the output through a channel slot
    /// ([`crate::conv::Conv2d::forward_rows_view`]). Empty otherwise (the lowering
    /// builds it; the same integer sums and requantization as the tap loop, so the same
    /// bytes).
    pub grouped: Vec<crate::conv::Conv2d>,
}

/// A depthwise convolution's weights as its two kernels read them.
#[derive(Clone, Debug, Default)]
pub(crate) struct DepthwiseWeights {
    /// Tap-major, `[kh][kw][c]` widened to `i16` ([`depthwise_rows`]); empty when the
    /// convolution is not depthwise.
    pub tap_major: Vec<i16>,
    /// The AVX-512 VNNI kernel's packing (`depthwise_vnni`), on CPUs that have it.
    #[cfg(target_arch = "x86_64")]
    pub vnni: Option<depthwise_vnni::DepthwiseVnni>,
}

/// Largest ungrouped patch (`kh · kw · in_c`) [`GeneralConv::run`] gathers on the stack.
const PATCH_MAX: usize = 4608;

/// [`Conv2d::forward_rows_groups`] or its accumulator form.
type GroupsFn<O> = fn(
    &[Conv2d],
    &[i8],
    usize,
    usize,
    &mut [O],
    Range<usize>,
) -> Result<(), crate::conv::ModelError>;

impl GeneralConv {
    /// This convolution with its depthwise weights laid out for [`depthwise_rows`] when it
    /// is depthwise (`groups == in_c == out_c`, at most [`DEPTHWISE_TAPS_MAX`] taps);
    /// unchanged otherwise. Every constructor calls it.
    pub fn prepared(mut self) -> GeneralConv {
        let (c, taps) = (self.in_c, self.win.kh * self.win.kw);
        self.depthwise = DepthwiseWeights::default();
        if runs_depthwise_kernel(c, self.out_c, self.groups, taps) {
            let mut tap_major = vec![0; taps * c];
            for ch in 0..c {
                for t in 0..taps {
                    tap_major[t * c + ch] = i16::from(self.weights[ch * taps + t]);
                }
            }
            self.depthwise.tap_major = tap_major;
            #[cfg(target_arch = "x86_64")]
            {
                self.depthwise.vnni = depthwise_vnni::DepthwiseVnni::new(&self);
            }
        }
        self
    }

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
    ///
    /// Depthwise convolutions (one input and one output channel per group, at most
    /// [`DEPTHWISE_TAPS_MAX`] taps) run the VNNI kernel (`depthwise_vnni`: `vpdpbusd` on
    /// four taps of a channel) when `isa` is AVX-512 and the CPU has VNNI, else
    /// [`depthwise_rows`] on `isa`: every output channel of a pixel at once, the channels in
    /// the vector lanes. Both give the tap loop's sums, so the same bytes.
    ///
    /// Grouped convolutions with [`GeneralConv::grouped`] layers run them over the rows of
    /// each image ([`crate::conv::Conv2d::forward_rows_groups`]: on VNNI every group in one
    /// call): the dense kernels' speed on a group's channels.
    ///
    /// Errors only when a grouped layer refuses its buffers, which the lowering's checks
    /// rule out.
    pub fn run(
        &self,
        isa: Isa,
        input: &[i8],
        out: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), crate::conv::ModelError> {
        let taps = self.win.kh * self.win.kw * self.in_c;
        if !self.grouped.is_empty() {
            return self.run_grouped(input, out, rows, Conv2d::forward_rows_groups);
        }
        if self.is_depthwise() {
            if !self.depthwise_vnni(isa, input, out, rows.clone()) {
                depthwise_rows(isa, self, input, out, rows);
            }
        } else if self.groups == 1 && taps <= PATCH_MAX {
            self.run_patches(input, out, rows);
        } else {
            self.run_taps(input, out, rows);
        }
        Ok(())
    }

    /// [`GeneralConv::run`] storing the exact accumulators (`bias + Σ (x − x_zp)·w`)
    /// instead of requantized bytes: a float-output convolution's (TensorRT-style
    /// placement). Depthwise convolutions run [`depthwise_rows_acc`] (the same vectorised
    /// loop), others the patch or tap-by-tap loop; [`GeneralConv::grouped`]'s dense layers are
    /// not used (the lowering leaves them empty for this route).
    pub fn run_acc(&self, isa: Isa, input: &[i8], out: &mut [i32], rows: Range<usize>) {
        let taps = self.win.kh * self.win.kw * self.in_c;
        if !self.grouped.is_empty() {
            // The lowering's checks rule out a refusal; the tap loop's sums are the same.
            let dense = self.run_grouped(input, out, rows.clone(), Conv2d::forward_rows_groups_acc);
            if dense.is_err() {
                self.run_taps(input, out, rows);
            }
        } else if self.is_depthwise() {
            if !self.depthwise_vnni(isa, input, out, rows.clone()) {
                depthwise_rows_acc(isa, self, input, out, rows);
            }
        } else if self.groups == 1 && taps <= PATCH_MAX {
            self.run_patches(input, out, rows);
        } else {
            self.run_taps(input, out, rows);
        }
    }

    /// True when the depthwise kernels run this convolution (one channel per group, its
    /// weights prepared for them by [`GeneralConv::prepared`]).
    pub(crate) fn is_depthwise(&self) -> bool {
        !self.depthwise.tap_major.is_empty()
    }

    /// Runs the depthwise VNNI kernel when `isa` is AVX-512 and this CPU has VNNI (the
    /// packing exists); false (nothing written) otherwise.
    #[allow(unused_variables)]
    fn depthwise_vnni<O: ConvOut>(
        &self,
        isa: Isa,
        input: &[i8],
        out: &mut [O],
        rows: Range<usize>,
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if let (true, Some(pk)) = (isa.is_avx512(), &self.depthwise.vnni) {
            let w = &self.win;
            let batch = input.len() / (w.in_h * w.in_w * self.in_c).max(1);
            if input.len() == batch * w.in_h * w.in_w * self.in_c
                && rows.end <= batch * w.out_h
                && out.len() >= rows.len() * w.out_w * self.in_c
            {
                // SAFETY: `pk` exists only on a CPU with AVX-512 F, BW and VNNI
                // (`DepthwiseVnni::new` detected them); the sizes are the ones just checked.
                unsafe { depthwise_vnni::depthwise_vnni_rows(self, pk, input, out, rows) };
                return true;
            }
        }
        false
    }

    /// [`GeneralConv::run`] (`groups` = [`Conv2d::forward_rows_groups`]) or
    /// [`GeneralConv::run_acc`] (its `_acc` form) on the per-group dense layers.
    fn run_grouped<O>(
        &self,
        input: &[i8],
        out: &mut [O],
        rows: Range<usize>,
        groups: GroupsFn<O>,
    ) -> Result<(), crate::conv::ModelError> {
        let w = &self.win;
        let img = w.in_h * w.in_w * self.in_c;
        let row_len = w.out_w * self.out_c;
        let mut r = rows.start;
        let mut o = 0;
        while r < rows.end {
            // The rows of this image in the range, every group in one call.
            let (b, oy) = (r / w.out_h, r % w.out_h);
            let n = (w.out_h - oy).min(rows.end - r);
            let x = &input[b * img..(b + 1) * img];
            let dst = &mut out[o..o + n * row_len];
            groups(&self.grouped, x, w.in_h, w.in_w, dst, oy..oy + n)?;
            r += n;
            o += n * row_len;
        }
        Ok(())
    }

    fn run_patches<O: ConvOut>(&self, input: &[i8], out: &mut [O], rows: Range<usize>) {
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
                    out[o] = O::from_acc(self.bias[oc] + dot, self.multipliers[oc], self);
                    o += 1;
                }
            }
        }
    }

    pub(crate) fn run_taps<O: ConvOut>(&self, input: &[i8], out: &mut [O], rows: Range<usize>) {
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
                    for (t, px) in w.pixel_taps(oy, ox) {
                        let base = px * self.in_c + g * icg;
                        let wrow = &wt[t * icg..(t + 1) * icg];
                        for (xv, wv) in x[base..base + icg].iter().zip(wrow) {
                            acc += (i32::from(*xv) - self.x_zp) * i32::from(*wv);
                        }
                    }
                    out[o] = O::from_acc(acc, self.multipliers[oc], self);
                    o += 1;
                }
            }
        }
    }
}

/// What a general convolution stores per output: the requantized byte (`i8`), or the exact
/// accumulator `bias + Σ (x − x_zp)·w` (`i32`: a float-output convolution's,
/// [`GeneralConv::run_acc`]).
pub(crate) trait ConvOut: Copy + Default {
    /// True for the accumulators (`i32`), false for requantized bytes (the x86-64 VNNI
    /// depthwise kernel's store).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const ACC: bool;

    /// The output of accumulator `acc` of channel multiplier `m`.
    fn from_acc(acc: i32, m: f32, conv: &GeneralConv) -> Self;
}

impl ConvOut for i8 {
    const ACC: bool = false;

    #[inline(always)]
    fn from_acc(acc: i32, m: f32, conv: &GeneralConv) -> i8 {
        requant_f32(acc as f32 * m, conv.y_zp, conv.lo, conv.hi)
    }
}

impl ConvOut for i32 {
    const ACC: bool = true;

    #[inline(always)]
    fn from_acc(acc: i32, _: f32, _: &GeneralConv) -> i32 {
        acc
    }
}

/// Channels [`depthwise_rows`] accumulates at once: 32 `i32` sums, two AVX-512 registers,
/// kept in registers over all the taps of a pixel; the channels left after the last full
/// block go in one block of 16 and one of 8 where they fill them, the rest one at a time.
const DEPTHWISE_BLOCK: usize = 32;

/// True when a convolution of `in_c` → `out_c` channels in `groups` groups with `taps`
/// (`kh · kw`) taps runs [`depthwise_rows`]: one input and one output channel per group,
/// at most [`DEPTHWISE_TAPS_MAX`] taps.
pub(crate) fn runs_depthwise_kernel(in_c: usize, out_c: usize, groups: usize, taps: usize) -> bool {
    groups == in_c && out_c == in_c && taps <= DEPTHWISE_TAPS_MAX
}

/// Most taps (`kh · kw`) a depthwise kernel may have for [`depthwise_rows`] (its tap lists are
/// on the stack); larger kernels run on the tap-by-tap loop.
pub(crate) const DEPTHWISE_TAPS_MAX: usize = 64;

/// Output pixels [`depthwise_rows`] computes together inside the image (each weight vector
/// loaded once for all of them).
const DEPTHWISE_PIXELS: usize = 4;

/// One block of `B` channels from `cb` of `P` output pixels whose windows start at input
/// offsets `origins`: `taps` are (input offset from a window's start, weight offset) of the
/// taps inside the image; writes pixel `p` at `dst[p · c + cb ..]`.
#[inline(always)]
fn depthwise_block<const B: usize, const P: usize, O: ConvOut>(
    conv: &GeneralConv,
    x: &[i8],
    taps: &[(usize, usize)],
    origins: [usize; P],
    cb: usize,
    dst: &mut [O],
) {
    // In [-128, 127]: the lowering's zero points are i8.
    let zp = conv.x_zp as i16;
    let mut acc = [[0i32; B]; P];
    for a in acc.iter_mut() {
        a.copy_from_slice(&conv.bias[cb..cb + B]);
    }
    for &(xo, wo) in taps {
        let ws = &conv.depthwise.tap_major[wo + cb..wo + cb + B];
        for (a, &origin) in acc.iter_mut().zip(&origins) {
            let xs = &x[origin + xo + cb..origin + xo + cb + B];
            for i in 0..B {
                a[i] += i32::from((i16::from(xs[i]) - zp) * ws[i]);
            }
        }
    }
    let (c, ms) = (conv.in_c, &conv.multipliers[cb..cb + B]);
    for (p, a) in acc.iter().enumerate() {
        let d = &mut dst[p * c + cb..p * c + cb + B];
        for ((d, &a), &m) in d.iter_mut().zip(a).zip(ms) {
            *d = O::from_acc(a, m, conv);
        }
    }
}

/// Channels `from..c` of one output pixel (window at input offset `origin`), one at a time:
/// the same sums as [`depthwise_block`].
#[inline(always)]
fn depthwise_tail<O: ConvOut>(
    conv: &GeneralConv,
    x: &[i8],
    taps: &[(usize, usize)],
    origin: usize,
    from: usize,
    dst: &mut [O],
) {
    for ch in from..conv.in_c {
        let mut a = conv.bias[ch];
        for &(xo, wo) in taps {
            a += (i32::from(x[origin + xo + ch]) - conv.x_zp)
                * i32::from(conv.depthwise.tap_major[wo + ch]);
        }
        dst[ch] = O::from_acc(a, conv.multipliers[ch], conv);
    }
}

/// Every channel of `P` output pixels (windows at input offsets `origins`): the full
/// [`DEPTHWISE_BLOCK`]s, the 16- and 8-channel blocks `widths` (first channel, width), then
/// the channels from `tail` one at a time.
#[inline(always)]
fn depthwise_pixels<const P: usize, O: ConvOut>(
    conv: &GeneralConv,
    x: &[i8],
    taps: &[(usize, usize)],
    origins: [usize; P],
    widths: &[(usize, usize)],
    tail: usize,
    dst: &mut [O],
) {
    let c = conv.in_c;
    for cb in (0..c / DEPTHWISE_BLOCK).map(|i| i * DEPTHWISE_BLOCK) {
        depthwise_block::<DEPTHWISE_BLOCK, P, O>(conv, x, taps, origins, cb, dst);
    }
    for &(cb, b) in widths {
        if b == 16 {
            depthwise_block::<16, P, O>(conv, x, taps, origins, cb, dst);
        } else {
            depthwise_block::<8, P, O>(conv, x, taps, origins, cb, dst);
        }
    }
    for (p, &origin) in origins.iter().enumerate() {
        depthwise_tail(conv, x, taps, origin, tail, &mut dst[p * c..]);
    }
}

/// Output rows `rows` of the depthwise convolution `conv` (its `depthwise` weights
/// prepared), NHWC `input` into `out` (those rows only).
///
/// Each output row lists its taps inside the image once (input offset, weight offset);
/// [`DEPTHWISE_PIXELS`] neighbouring pixels whose windows lie inside the image's columns
/// are computed together from that list, a pixel at the left or right edge from its own
/// shorter list. Channels go in blocks of [`DEPTHWISE_BLOCK`] whose sums stay in
/// registers over the taps, then one block of 16 and one of 8 where the channels left
/// fill them, the rest one at a time. `(x − x_zp)·w` is at most
/// 255·128 in magnitude, so the product is exact in `i16` and widened to `i32` to
/// accumulate. The same integer sums as the tap-by-tap loop (integer addition in any
/// order), the same requantization: the same bytes (test
/// `depthwise_matches_the_tap_by_tap_loop_on_every_width`).
#[inline(always)]
fn depthwise_rows_in<O: ConvOut>(
    conv: &GeneralConv,
    input: &[i8],
    out: &mut [O],
    rows: Range<usize>,
) {
    let w = &conv.win;
    let c = conv.in_c;
    let img = w.in_h * w.in_w * c;
    // Channel blocks: (first channel, width), then the channels one at a time from `tail`.
    let mut widths = [(0usize, 0usize); 3];
    let (mut nb, mut tail) = (0, c / DEPTHWISE_BLOCK * DEPTHWISE_BLOCK);
    for b in [16, 8] {
        if c - tail >= b {
            widths[nb] = (tail, b);
            nb += 1;
            tail += b;
        }
    }
    let widths = &widths[..nb];
    // Output columns whose windows lie inside the image's columns.
    let Range { start: lo, end: hi } = w.inside_columns();
    let mut o = 0;
    for r in rows {
        let (b, oy) = (r / w.out_h, r % w.out_h);
        let x = &input[b * img..(b + 1) * img];
        // Every column tap of the rows inside the image, from a window's first column.
        let mut row = [(0usize, 0usize); DEPTHWISE_TAPS_MAX];
        let mut n = 0;
        for ty in w.rows_inside(oy) {
            let iy = oy * w.sh + ty * w.dh - w.pt;
            for tx in 0..w.kw {
                row[n] = ((iy * w.in_w + tx * w.dw) * c, (ty * w.kw + tx) * c);
                n += 1;
            }
        }
        let row = &row[..n];
        let line = &mut out[o..o + w.out_w * c];
        o += w.out_w * c;
        let mut ox = 0;
        while ox < w.out_w {
            let dst = &mut line[ox * c..];
            if ox >= lo && ox + DEPTHWISE_PIXELS <= hi {
                let origins: [usize; DEPTHWISE_PIXELS] =
                    std::array::from_fn(|p| ((ox + p) * w.sw - w.pl) * c);
                depthwise_pixels(conv, x, row, origins, widths, tail, dst);
                ox += DEPTHWISE_PIXELS;
                continue;
            }
            let mut edge = [(0usize, 0usize); DEPTHWISE_TAPS_MAX];
            let (taps, origin) = if ox >= lo && ox < hi {
                (row, (ox * w.sw - w.pl) * c)
            } else {
                let mut m = 0;
                for (t, px) in w.pixel_taps(oy, ox) {
                    edge[m] = (px * c, t * c);
                    m += 1;
                }
                (&edge[..m], 0)
            };
            depthwise_pixels(conv, x, taps, [origin], widths, tail, dst);
            ox += 1;
        }
    }
}

multiversion! {
    /// [`depthwise_rows_in`] storing requantized bytes.
    pub(crate) fn depthwise_rows(conv: &GeneralConv, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        depthwise_rows_in(conv, input, out, rows)
    }
}

multiversion! {
    /// [`depthwise_rows_in`] storing the exact accumulators (a float-output convolution's).
    pub(crate) fn depthwise_rows_acc(conv: &GeneralConv, input: &[i8], out: &mut [i32], rows: Range<usize>) {
        depthwise_rows_in(conv, input, out, rows)
    }
}

/// Clamps every value into `[lo, hi]`.
pub(crate) fn clamp(out: &mut [i8], lo: i8, hi: i8) {
    for v in out {
        *v = (*v).clamp(lo, hi);
    }
}

multiversion! {
    /// `QuantizeLinear` of `f32` values: `saturate(round_half_even(x / scale) + zp)` (ONNX
    /// semantics, as ONNX Runtime computes it: a division, not a multiply by the reciprocal).
    /// NaN (a float route's `0 / 0`, a NaN in a float graph input) gives the lowest value,
    /// `-128` (`0` of a uint8 model), as ONNX Runtime's `QuantizeLinear` does (its clamp to
    /// the lower bound comes first) and as float islands do.
    pub(crate) fn quantize(input: &[f32], scale: f32, zp: i32, out: &mut [i8]) {
        for (d, s) in out.iter_mut().zip(input) {
            *d = requant_f32_or(*s / scale, zp, i8::MIN, i8::MAX, i8::MIN);
        }
    }
}
