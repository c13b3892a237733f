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

use super::isa::{multiversion, Isa};
use std::ops::Range;

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

multiversion! {
    /// Max pooling over NHWC `c`-channel images; rows over `batch * out_h`. Padded taps are
    /// ignored (ONNX semantics); a window with no tap inside the image yields `i8::MIN`.
    ///
    /// Separable: for each output row, the maximum over the kernel's input rows is taken
    /// first, across whole rows (long contiguous loops), into a stack buffer of
    /// [`POOL_SCRATCH`] bytes, then over the kernel's columns pixel by pixel; the output
    /// columns are taken in runs whose input columns fit that buffer. Max is associative,
    /// so this is the same result as tap by tap.
    pub(crate) fn max_pool(win: &Window, c: usize, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let img = win.in_h * win.in_w * c;
        let row_bytes = win.in_w * c;
        // Input columns one output column's window spans.
        let span = (win.kw - 1) * win.dw + 1;
        let run = if span * c <= POOL_SCRATCH {
            // Output columns per run: their input columns (clipped to the image) fit.
            (POOL_SCRATCH / c - span) / win.sw + 1
        } else {
            0
        };
        let mut cols = [i8::MIN; POOL_SCRATCH];
        let mut o = 0;
        for r in rows {
            let (b, oy) = (r / win.out_h, r % win.out_h);
            let x = &input[b * img..(b + 1) * img];
            if run == 0 {
                // A window wider than the buffer: tap by tap.
                for ox in 0..win.out_w {
                    let dst = &mut out[o..o + c];
                    dst.fill(i8::MIN);
                    for ky in 0..win.kh {
                        let iy = win.iy(oy, ky);
                        if iy < 0 || iy >= win.in_h as isize {
                            continue;
                        }
                        for kx in 0..win.kw {
                            let ix = win.ix(ox, kx);
                            if ix < 0 || ix >= win.in_w as isize {
                                continue;
                            }
                            let base = (iy as usize * win.in_w + ix as usize) * c;
                            for (d, s) in dst.iter_mut().zip(&x[base..base + c]) {
                                *d = (*d).max(*s);
                            }
                        }
                    }
                    o += c;
                }
                continue;
            }
            let mut ox0 = 0;
            while ox0 < win.out_w {
                let ox1 = (ox0 + run).min(win.out_w);
                // Input columns [x0, x1) of these output columns, clipped to the image.
                let x0 = win.ix(ox0, 0).max(0) as usize;
                let x1 = (win.ix(ox1 - 1, win.kw - 1) + 1).clamp(0, win.in_w as isize) as usize;
                let x1 = x1.max(x0);
                let col = &mut cols[..(x1 - x0) * c];
                col.fill(i8::MIN);
                for ky in 0..win.kh {
                    let iy = win.iy(oy, ky);
                    if iy < 0 || iy >= win.in_h as isize {
                        continue;
                    }
                    let src = &x[iy as usize * row_bytes + x0 * c..iy as usize * row_bytes + x1 * c];
                    for (d, s) in col.iter_mut().zip(src) {
                        *d = (*d).max(*s);
                    }
                }
                for ox in ox0..ox1 {
                    let dst = &mut out[o..o + c];
                    dst.fill(i8::MIN);
                    for kx in 0..win.kw {
                        let ix = win.ix(ox, kx);
                        if ix < 0 || ix >= win.in_w as isize {
                            continue;
                        }
                        let base = (ix as usize - x0) * c;
                        for (d, s) in dst.iter_mut().zip(&col[base..base + c]) {
                            *d = (*d).max(*s);
                        }
                    }
                    o += c;
                }
                ox0 = ox1;
            }
        }
    }
}

/// Stack bytes [`max_pool`] keeps the column maxima of one run of output columns in.
const POOL_SCRATCH: usize = 8192;

/// Average pooling parameters: `y = requant(Σ (x - x_zp) as f32 * (x_scale / (y_scale *
/// count)))`, the multiplier computed in that order (ONNX Runtime's global average pooling).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvgParams {
    pub x_zp: i32,
    pub y_zp: i32,
    pub x_scale: f32,
    pub y_scale: f32,
    pub count_include_pad: bool,
    pub lo: i8,
    pub hi: i8,
}

/// Average pooling over NHWC images (also global average pooling: a window the size of the
/// image). Rows over `batch * out_h`. Channels are summed in blocks of 64 in a stack array.
pub(crate) fn avg_pool(
    win: &Window,
    c: usize,
    p: &AvgParams,
    input: &[i8],
    out: &mut [i8],
    rows: Range<usize>,
) {
    const BLOCK: usize = 64;
    let img = win.in_h * win.in_w * c;
    let mut acc = [0i32; BLOCK];
    let mut o = 0;
    for r in rows {
        let (b, oy) = (r / win.out_h, r % win.out_h);
        let x = &input[b * img..(b + 1) * img];
        for ox in 0..win.out_w {
            // Count the taps once per output pixel.
            let (mut inside, mut padded) = (0u32, 0u32);
            for ky in 0..win.kh {
                let iy = win.iy(oy, ky);
                let in_pad_y = iy >= -(win.pt as isize) && iy < (win.in_h + win.pt) as isize;
                for kx in 0..win.kw {
                    let ix = win.ix(ox, kx);
                    if iy < 0 || iy >= win.in_h as isize || ix < 0 || ix >= win.in_w as isize {
                        // Taps past the explicit padding (ceil mode) never count.
                        let in_pad_x =
                            ix >= -(win.pl as isize) && ix < (win.in_w + win.pl) as isize;
                        if in_pad_y && in_pad_x {
                            padded += 1;
                        }
                    } else {
                        inside += 1;
                    }
                }
            }
            let count = if p.count_include_pad {
                inside + padded
            } else {
                inside
            }
            .max(1);
            let scale = p.x_scale / (p.y_scale * count as f32);
            let mut c0 = 0;
            while c0 < c {
                let n = (c - c0).min(BLOCK);
                let acc = &mut acc[..n];
                acc.fill(0);
                for ky in 0..win.kh {
                    let iy = win.iy(oy, ky);
                    if iy < 0 || iy >= win.in_h as isize {
                        continue;
                    }
                    for kx in 0..win.kw {
                        let ix = win.ix(ox, kx);
                        if ix < 0 || ix >= win.in_w as isize {
                            continue;
                        }
                        let base = (iy as usize * win.in_w + ix as usize) * c + c0;
                        for (a, s) in acc.iter_mut().zip(&x[base..base + n]) {
                            *a += i32::from(*s) - p.x_zp;
                        }
                    }
                }
                for (d, a) in out[o + c0..o + c0 + n].iter_mut().zip(acc.iter()) {
                    *d = requant_f32(*a as f32 * scale, p.y_zp, p.lo, p.hi);
                }
                c0 += n;
            }
            o += c;
        }
    }
}

/// Maps every element through a 256-entry table indexed by `x as u8` (requantization and
/// quantized unary functions).
pub(crate) fn lut(table: &[i8; 256], input: &[i8], out: &mut [i8]) {
    for (d, s) in out.iter_mut().zip(input) {
        *d = table[*s as u8 as usize];
    }
}

/// An elementwise binary operator over broadcast operands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum BinaryKind {
    /// `y = (fixed + a ra) + b rb` with `ra = sa / sy`, `rb = sb / sy`, `fixed = zy - (ra za
    /// + rb zb)`, on the raw integers (ONNX Runtime's x86 QLinearAdd, operation for
    /// operation), then rounded half to even and saturated (the output zero point is inside
    /// `fixed`).
    Add { ra: f32, rb: f32, fixed: f32 },
    /// `y = ((a - za) sa * (b - zb) sb) / sy`.
    Mul,
}

/// Parameters of a binary operator: zero points, clamp, and the broadcast strides of both
/// operands over the output's (physical, row-major) shape, outermost first.
#[derive(Clone, Debug)]
pub(crate) struct Binary {
    pub kind: BinaryKind,
    pub sa: f32,
    pub sb: f32,
    pub sy: f32,
    pub za: i32,
    pub zb: i32,
    pub zy: i32,
    pub lo: i8,
    pub hi: i8,
    /// Output shape (physical order).
    pub shape: Vec<usize>,
    pub a_strides: Vec<usize>,
    pub b_strides: Vec<usize>,
}

impl Binary {
    #[inline(always)]
    fn one(&self, a: i8, b: i8) -> i8 {
        match self.kind {
            BinaryKind::Add { ra, rb, fixed } => add_one(ra, rb, fixed, self.lo, self.hi, a, b),
            BinaryKind::Mul => mul_one(self, a, b),
        }
    }

    /// `n` contiguous elements of both operands (a row, or the whole tensor), on `isa`.
    fn contiguous(&self, isa: Isa, a: &[i8], b: &[i8], out: &mut [i8]) {
        match self.kind {
            BinaryKind::Add { ra, rb, fixed } => {
                add_contiguous(isa, ra, rb, fixed, self.lo, self.hi, a, b, out)
            }
            BinaryKind::Mul => mul_contiguous(isa, self, a, b, out),
        }
    }

    /// Elements `range` of the output (flat index, physical order).
    pub fn run(&self, isa: Isa, a: &[i8], b: &[i8], out: &mut [i8], range: Range<usize>) {
        let n: usize = self.shape.iter().product();
        if a.len() == n
            && b.len() == n
            && dense_strides(&self.a_strides, &self.shape)
            && dense_strides(&self.b_strides, &self.shape)
        {
            // Same shape, both contiguous: one flat loop, vectorised for `isa`.
            self.contiguous(isa, &a[range.clone()], &b[range], out);
            return;
        }
        let rank = self.shape.len();
        let inner = self.shape.last().copied().unwrap_or(1).max(1);
        let (sa, sb) = (
            self.a_strides.last().copied().unwrap_or(0),
            self.b_strides.last().copied().unwrap_or(0),
        );
        let mut i = range.start;
        let mut o = 0;
        while i < range.end {
            // Offsets of the row containing flat index i.
            let mut rem = i / inner;
            let (mut oa, mut ob) = (0usize, 0usize);
            for d in (0..rank.saturating_sub(1)).rev() {
                let idx = rem % self.shape[d];
                rem /= self.shape[d];
                oa += idx * self.a_strides[d];
                ob += idx * self.b_strides[d];
            }
            let col = i % inner;
            let n = (inner - col).min(range.end - i);
            if sa == 1 && sb == 1 {
                let (a, b) = (&a[oa + col..oa + col + n], &b[ob + col..ob + col + n]);
                self.contiguous(isa, a, b, &mut out[o..o + n]);
            } else {
                for k in 0..n {
                    out[o + k] = self.one(a[oa + (col + k) * sa], b[ob + (col + k) * sb]);
                }
            }
            i += n;
            o += n;
        }
    }
}

impl Binary {
    /// This `Add` in place: `conv` holds one operand (the first when `conv_is_a`) and
    /// receives the sum; `other` holds the other operand's same elements. The same
    /// operations in the same order as [`Binary::run`]. Does nothing for `Mul`.
    pub fn add_in_place(&self, isa: Isa, conv_is_a: bool, conv: &mut [i8], other: &[i8]) {
        if let BinaryKind::Add { ra, rb, fixed } = self.kind {
            add_in_place(isa, ra, rb, fixed, self.lo, self.hi, conv_is_a, conv, other);
        }
    }
}

multiversion! {
    /// [`add_one`] with one operand read from and the sum written to `acc`.
    fn add_in_place(
        ra: f32,
        rb: f32,
        fixed: f32,
        lo: i8,
        hi: i8,
        acc_is_a: bool,
        acc: &mut [i8],
        other: &[i8],
    ) {
        if acc_is_a {
            for (d, y) in acc.iter_mut().zip(other) {
                *d = add_one(ra, rb, fixed, lo, hi, *d, *y);
            }
        } else {
            for (d, x) in acc.iter_mut().zip(other) {
                *d = add_one(ra, rb, fixed, lo, hi, *x, *d);
            }
        }
    }
}

/// One `Add` element ([`BinaryKind::Add`]).
#[inline(always)]
fn add_one(ra: f32, rb: f32, fixed: f32, lo: i8, hi: i8, a: i8, b: i8) -> i8 {
    let v = (fixed + f32::from(a) * ra) + f32::from(b) * rb;
    requant_f32(v, 0, lo, hi)
}

/// One `Mul` element ([`BinaryKind::Mul`]).
#[inline(always)]
fn mul_one(p: &Binary, a: i8, b: i8) -> i8 {
    let (a, b) = (i32::from(a) - p.za, i32::from(b) - p.zb);
    let v = (a as f32 * p.sa * (b as f32 * p.sb)) / p.sy;
    requant_f32(v, p.zy, p.lo, p.hi)
}

multiversion! {
    /// [`add_one`] over equally long contiguous slices.
    fn add_contiguous(ra: f32, rb: f32, fixed: f32, lo: i8, hi: i8, a: &[i8], b: &[i8], out: &mut [i8]) {
        for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
            *d = add_one(ra, rb, fixed, lo, hi, *x, *y);
        }
    }
}

multiversion! {
    /// [`mul_one`] over equally long contiguous slices.
    fn mul_contiguous(p: &Binary, a: &[i8], b: &[i8], out: &mut [i8]) {
        for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
            *d = mul_one(p, *x, *y);
        }
    }
}

/// True when `strides` are the row-major strides of `shape` (a dimension of extent 1 may
/// have any stride: its index is always 0), so an operand's element `i` is the output's `i`.
pub(crate) fn dense_strides(strides: &[usize], shape: &[usize]) -> bool {
    let mut acc = 1;
    strides.len() == shape.len()
        && strides.iter().zip(shape).rev().all(|(&st, &d)| {
            let ok = st == acc || d == 1;
            acc *= d;
            ok
        })
}

/// Permutes a row-major tensor of bytes: output element at multi-index
/// `j` (over `out_shape`) is the input element whose index is `j` scattered through `perm`
/// (`in_strides_permuted[d]` = the input stride of output dimension `d`). Rows are ranges of
/// the flat output index.
pub(crate) fn transpose(
    isa: Isa,
    out_shape: &[usize],
    in_strides_permuted: &[usize],
    input: &[i8],
    out: &mut [i8],
    range: Range<usize>,
) {
    let rank = out_shape.len();
    if rank >= 2 {
        // Walk the output by rows of the last dimension. Whole rows are taken in runs along
        // the second-to-last dimension and copied column by column, so a short last
        // dimension (NCHW to NHWC: 3 channels) costs one index decomposition per run, not
        // per row, and reads its input contiguously. A partial row (a chunk boundary) is
        // gathered on its own.
        let inner = out_shape[rank - 1];
        let step = in_strides_permuted[rank - 1];
        let mid = out_shape[rank - 2];
        let mid_step = in_strides_permuted[rank - 2];
        let mut i = range.start;
        let mut o = 0;
        while i < range.end {
            let col = i % inner;
            let mut rem = i / inner;
            let y = rem % mid;
            let mut off = col * step;
            for d in (0..rank - 1).rev() {
                off += (rem % out_shape[d]) * in_strides_permuted[d];
                rem /= out_shape[d];
            }
            let rows = if col == 0 {
                (mid - y).min((range.end - i) / inner.max(1))
            } else {
                0
            };
            if rows > 0 {
                let dst = &mut out[o..o + rows * inner];
                if mid_step == 1 && inner == 3 && interleave3(isa, input, off, step, dst) {
                    i += rows * inner;
                    o += rows * inner;
                    continue;
                }
                for k in 0..inner {
                    let src = off + k * step;
                    for (r, d) in dst[k..].iter_mut().step_by(inner).enumerate() {
                        *d = input[src + r * mid_step];
                    }
                }
                i += rows * inner;
                o += rows * inner;
                continue;
            }
            let n = (inner - col).min(range.end - i);
            for k in 0..n {
                out[o + k] = input[off + k * step];
            }
            i += n;
            o += n;
        }
        return;
    }
    for (o, i) in range.enumerate() {
        let mut rem = i;
        let mut off = 0;
        for d in (0..rank).rev() {
            off += (rem % out_shape[d]) * in_strides_permuted[d];
            rem /= out_shape[d];
        }
        out[o] = input[off];
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

/// Three channel planes starting at `input[off]`, `step` apart, interleaved into `dst`
/// (`dst.len() / 3` pixels): NCHW to NHWC for a 3-channel image. False (nothing written)
/// when the planes do not fit `input`.
fn interleave3(isa: Isa, input: &[i8], off: usize, step: usize, dst: &mut [i8]) -> bool {
    let n = dst.len() / 3;
    let plane = |k: usize| input.get(off + k * step..off + k * step + n);
    let (Some(p0), Some(p1), Some(p2)) = (plane(0), plane(1), plane(2)) else {
        return false;
    };
    interleave3_bytes(isa, p0, p1, p2, dst);
    true
}

multiversion! {
    /// `out[3p + c] = plane_c[p]`.
    fn interleave3_bytes(p0: &[i8], p1: &[i8], p2: &[i8], out: &mut [i8]) {
        for (((d, a), b), c) in out.chunks_exact_mut(3).zip(p0).zip(p1).zip(p2) {
            d[0] = *a;
            d[1] = *b;
            d[2] = *c;
        }
    }
}

/// One output coordinate of a resize along one axis: the two source indices and the weight
/// of the second (`0` for nearest).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tap {
    pub i0: usize,
    pub i1: usize,
    pub w1: f32,
}

/// How [`resize`] computes an output value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Interp {
    /// Copy the nearest input (exact).
    Nearest,
    /// Interpolate `(x - x_zp)` in `f32` (`(1 - wx)(1 - wy) a + ...` in a fixed order) and
    /// requantize with `ratio = x_scale / y_scale` to `y_zp` (QDQ form).
    Linear { x_zp: i32, y_zp: i32, ratio: f32 },
    /// ONNX Runtime's int8 `Resize` (QOperator form): the raw values interpolated in `f32`,
    /// same quantization, truncated toward zero; `floor` for `uint8` tensors (stored here
    /// as `x ^ 0x80`, where ORT's truncation of non-negative values is a floor).
    Raw { floor: bool },
}

multiversion! {
    /// Resize of NHWC images: `ys`/`xs` hold one [`Tap`] per output row / column; `mode` says
    /// how a value is computed. Rows over `batch * out_h`.
    pub(crate) fn resize(
        in_h: usize,
        in_w: usize,
        c: usize,
        ys: &[Tap],
        xs: &[Tap],
        mode: Interp,
        input: &[i8],
        out: &mut [i8],
        rows: Range<usize>,
    ) {
        let out_h = ys.len();
        let img = in_h * in_w * c;
        let mut o = 0;
        for r in rows {
            let (b, oy) = (r / out_h, r % out_h);
            let x = &input[b * img..(b + 1) * img];
            let ty = ys[oy];
            for tx in xs {
                let dst = &mut out[o..o + c];
                let p00 = (ty.i0 * in_w + tx.i0) * c;
                let p01 = (ty.i0 * in_w + tx.i1) * c;
                let p10 = (ty.i1 * in_w + tx.i0) * c;
                let p11 = (ty.i1 * in_w + tx.i1) * c;
                let (wy1, wx1) = (ty.w1, tx.w1);
                let (wy0, wx0) = (1.0 - wy1, 1.0 - wx1);
                match mode {
                    Interp::Nearest => dst.copy_from_slice(&x[p00..p00 + c]),
                    Interp::Raw { floor } => {
                        // The four corners as slices of `c`: no per-element bounds checks,
                        // so the channel loop vectorises.
                        let (a, b) = (&x[p00..p00 + c], &x[p01..p01 + c]);
                        let (e, f) = (&x[p10..p10 + c], &x[p11..p11 + c]);
                        let corners = a.iter().zip(b).zip(e.iter().zip(f));
                        for (d, ((a, b), (e, f))) in dst.iter_mut().zip(corners) {
                            let v = |q: &i8| f32::from(*q);
                            let f = v(a) * wx0 * wy0
                                + v(b) * wx1 * wy0
                                + v(e) * wx0 * wy1
                                + v(f) * wx1 * wy1;
                            let r = if floor { f.floor() } else { f.trunc() };
                            *d = integral_to_i8(r.clamp(-128.0, 127.0));
                        }
                    }
                    Interp::Linear { x_zp, y_zp, ratio } => {
                        let (a, b) = (&x[p00..p00 + c], &x[p01..p01 + c]);
                        let (e, f) = (&x[p10..p10 + c], &x[p11..p11 + c]);
                        let corners = a.iter().zip(b).zip(e.iter().zip(f));
                        for (d, ((a, b), (e, f))) in dst.iter_mut().zip(corners) {
                            let v = |q: &i8| (i32::from(*q) - x_zp) as f32;
                            let top = v(a) * wx0 + v(b) * wx1;
                            let bot = v(e) * wx0 + v(f) * wx1;
                            *d = requant_f32((top * wy0 + bot * wy1) * ratio, y_zp, i8::MIN, i8::MAX);
                        }
                    }
                }
                o += c;
            }
        }
    }
}

#[cfg(test)]
mod stride_tests {
    use super::dense_strides;

    #[test]
    fn dense_strides_are_recognised() {
        assert!(dense_strides(&[12, 4, 1], &[2, 3, 4]));
        // A broadcast operand (stride 0 over a real dimension) is not dense...
        assert!(!dense_strides(&[0, 4, 1], &[2, 3, 4]));
        // ...but any stride over an extent-1 dimension is.
        assert!(dense_strides(&[99, 4, 1], &[1, 3, 4]));
        assert!(!dense_strides(&[1, 3], &[3, 4]));
    }
}

/// Every vector width against the portable build, and the rewritten kernels against their
/// plain formulas.
#[cfg(test)]
mod isa_tests {
    use super::*;
    use redline_runtime::rng::SplitMix64;

    /// The float formula `requant_f32` replaced: round in float, clamp in float, cast.
    fn requant_float_formula(v: f32, zp: i32, lo: i8, hi: i8) -> i8 {
        let r = ((v.clamp(-1024.0, 1024.0) + MAGIC) - MAGIC) + zp as f32;
        r.clamp(f32::from(lo), f32::from(hi)) as i8
    }

    #[test]
    fn requant_matches_the_float_formula() {
        let mut g = SplitMix64::stream(11, 0);
        let mut values = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e30,
            -1e30,
            1024.0,
            -1024.0,
            1024.5,
        ];
        // Every half step in ±300 (the ties), and random values of every magnitude.
        values.extend((-600..=600).map(|i| i as f32 * 0.5));
        values.extend((0..20_000).map(|_| g.uniform(-2000.0, 2000.0)));
        values.extend((0..2_000).map(|_| g.uniform(-1.0, 1.0)));
        for &v in &values {
            for (zp, lo, hi) in [(0, -128, 127), (-128, -128, 127), (17, 0, 127), (3, -5, 9)] {
                assert_eq!(
                    requant_f32(v, zp, lo, hi),
                    requant_float_formula(v, zp, lo, hi),
                    "v {v}, zp {zp}, [{lo}, {hi}]"
                );
            }
        }
    }

    fn bytes(g: &mut SplitMix64, n: usize) -> Vec<i8> {
        (0..n).map(|_| g.next_i8()).collect()
    }

    #[test]
    fn elementwise_loops_give_the_same_bytes_on_every_width() {
        let isas = Isa::available();
        eprintln!(
            "widths compared: {:?}",
            isas.iter().map(|i| i.name()).collect::<Vec<_>>()
        );
        let mut g = SplitMix64::stream(12, 0);
        for n in [1usize, 15, 16, 17, 63, 64, 65, 1000, 4099] {
            let (a, b) = (bytes(&mut g, n), bytes(&mut g, n));
            let f: Vec<f32> = (0..n).map(|_| g.uniform(-40.0, 40.0)).collect();
            let mul = Binary {
                kind: BinaryKind::Mul,
                sa: 0.031,
                sb: 0.007,
                sy: 0.013,
                za: 3,
                zb: -9,
                zy: 1,
                lo: -128,
                hi: 127,
                shape: vec![n],
                a_strides: vec![1],
                b_strides: vec![1],
            };
            let run = |isa: Isa| {
                let mut add = vec![0i8; n];
                add_contiguous(isa, 0.71, 1.37, -3.25, -128, 127, &a, &b, &mut add);
                let mut relu_add = vec![0i8; n];
                add_contiguous(isa, 0.5, 0.5, 0.5, 0, 127, &a, &b, &mut relu_add);
                let mut m = vec![0i8; n];
                mul_contiguous(isa, &mul, &a, &b, &mut m);
                let mut q = vec![0i8; n];
                quantize(isa, &f, 0.173, -7, &mut q);
                (add, relu_add, m, q)
            };
            let want = run(Isa::PORTABLE);
            // The portable build is the scalar formula, element by element.
            for i in 0..n {
                assert_eq!(want.0[i], add_one(0.71, 1.37, -3.25, -128, 127, a[i], b[i]));
                assert_eq!(want.2[i], mul_one(&mul, a[i], b[i]));
                assert_eq!(want.3[i], requant_f32(f[i] / 0.173, -7, -128, 127));
            }
            for &isa in &isas[1..] {
                assert_eq!(
                    run(isa),
                    want,
                    "{} differs from portable, n {n}",
                    isa.name()
                );
            }
        }
    }

    #[test]
    fn max_pool_gives_the_same_bytes_on_every_width() {
        let mut g = SplitMix64::stream(13, 0);
        // (h, w, c, k, stride, pad, dilation): one run per row, several runs per row (600
        // channels), and the tap-by-tap fallback (a window wider than the buffer).
        for (h, w, c, k, s, p, dl) in [
            (9, 7, 64, 3, 2, 1, 1),
            (5, 6, 3, 2, 1, 0, 1),
            (8, 8, 17, 3, 1, 1, 1),
            (7, 9, 5, 3, 1, 2, 2),
            (4, 30, 600, 3, 2, 1, 1),
            (3, 4, 3000, 3, 1, 1, 1),
        ] {
            let out_h = (h + 2 * p - (k - 1) * dl - 1) / s + 1;
            let out_w = (w + 2 * p - (k - 1) * dl - 1) / s + 1;
            let win = Window {
                in_h: h,
                in_w: w,
                out_h,
                out_w,
                kh: k,
                kw: k,
                sh: s,
                sw: s,
                dh: dl,
                dw: dl,
                pt: p,
                pl: p,
            };
            let x = bytes(&mut g, 2 * h * w * c);
            let mut want = vec![0i8; 2 * out_h * out_w * c];
            max_pool(Isa::PORTABLE, &win, c, &x, &mut want, 0..2 * out_h);
            // Against the definition, output by output.
            for (i, &v) in want.iter().enumerate() {
                let (ch, px) = (i % c, i / c);
                let (b, oy, ox) = (px / (out_h * out_w), px / out_w % out_h, px % out_w);
                let mut m = i8::MIN;
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * s + ky * dl) as isize - p as isize;
                        let ix = (ox * s + kx * dl) as isize - p as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                            m = m.max(x[((b * h + iy as usize) * w + ix as usize) * c + ch]);
                        }
                    }
                }
                assert_eq!(v, m, "output {i} of case {h}x{w}x{c} k{k}");
            }
            for isa in Isa::available() {
                let mut got = vec![0i8; want.len()];
                max_pool(isa, &win, c, &x, &mut got, 0..2 * out_h);
                assert_eq!(got, want, "{}", isa.name());
            }
        }
    }

    #[test]
    fn resize_gives_the_same_bytes_on_every_width() {
        let mut g = SplitMix64::stream(15, 0);
        let (in_h, in_w, c) = (5, 7, 37);
        let x = bytes(&mut g, 2 * in_h * in_w * c);
        // Upsampling taps with uneven weights, the last ones clamped at the edge.
        let taps = |n_in: usize, n_out: usize| -> Vec<Tap> {
            (0..n_out)
                .map(|o| {
                    let f = (o as f32 + 0.5) * n_in as f32 / n_out as f32 - 0.5;
                    let f = f.max(0.0);
                    let i0 = (f as usize).min(n_in - 1);
                    let i1 = (i0 + 1).min(n_in - 1);
                    Tap {
                        i0,
                        i1,
                        w1: f - i0 as f32,
                    }
                })
                .collect()
        };
        let (ys, xs) = (taps(in_h, 11), taps(in_w, 13));
        let modes = [
            Interp::Linear {
                x_zp: -3,
                y_zp: 5,
                ratio: 0.83,
            },
            Interp::Raw { floor: true },
            Interp::Raw { floor: false },
            Interp::Nearest,
        ];
        for mode in modes {
            let n = 2 * ys.len() * xs.len() * c;
            let mut want = vec![0i8; n];
            resize(
                Isa::PORTABLE,
                in_h,
                in_w,
                c,
                &ys,
                &xs,
                mode,
                &x,
                &mut want,
                0..2 * ys.len(),
            );
            // Against the formula, element by element.
            for (i, &v) in want.iter().enumerate() {
                let (ch, px) = (i % c, i / c);
                let (b, oy, ox) = (
                    px / (ys.len() * xs.len()),
                    px / xs.len() % ys.len(),
                    px % xs.len(),
                );
                let (ty, tx) = (ys[oy], xs[ox]);
                let at = |y: usize, xx: usize| x[((b * in_h + y) * in_w + xx) * c + ch];
                let (wy1, wx1) = (ty.w1, tx.w1);
                let (wy0, wx0) = (1.0 - wy1, 1.0 - wx1);
                let expect = match mode {
                    Interp::Nearest => at(ty.i0, tx.i0),
                    Interp::Raw { floor } => {
                        let q = |y, xx| f32::from(at(y, xx));
                        let f = q(ty.i0, tx.i0) * wx0 * wy0
                            + q(ty.i0, tx.i1) * wx1 * wy0
                            + q(ty.i1, tx.i0) * wx0 * wy1
                            + q(ty.i1, tx.i1) * wx1 * wy1;
                        let r = if floor { f.floor() } else { f.trunc() };
                        r.clamp(-128.0, 127.0) as i8
                    }
                    Interp::Linear { x_zp, y_zp, ratio } => {
                        let q = |y, xx| (i32::from(at(y, xx)) - x_zp) as f32;
                        let top = q(ty.i0, tx.i0) * wx0 + q(ty.i0, tx.i1) * wx1;
                        let bot = q(ty.i1, tx.i0) * wx0 + q(ty.i1, tx.i1) * wx1;
                        requant_float_formula((top * wy0 + bot * wy1) * ratio, y_zp, -128, 127)
                    }
                };
                assert_eq!(v, expect, "{mode:?}: element {i}");
            }
            for isa in Isa::available() {
                let mut got = vec![0i8; n];
                resize(
                    isa,
                    in_h,
                    in_w,
                    c,
                    &ys,
                    &xs,
                    mode,
                    &x,
                    &mut got,
                    0..2 * ys.len(),
                );
                assert_eq!(got, want, "{mode:?} on {}", isa.name());
            }
        }
    }

    /// The plain definition: output element `j` is the input element at `j`'s index
    /// scattered through the permuted strides.
    fn transpose_reference(out_shape: &[usize], strides: &[usize], x: &[i8]) -> Vec<i8> {
        let n: usize = out_shape.iter().product();
        (0..n)
            .map(|j| {
                let (mut rem, mut off) = (j, 0);
                for d in (0..out_shape.len()).rev() {
                    off += (rem % out_shape[d]) * strides[d];
                    rem /= out_shape[d];
                }
                x[off]
            })
            .collect()
    }

    #[test]
    fn transpose_matches_its_definition_for_any_split() {
        let mut g = SplitMix64::stream(14, 0);
        let isas = Isa::available();
        // Random ranks, shapes and permutations (Fisher-Yates), then NCHW to NHWC of
        // 3-channel images (the interleaving fast path) of several sizes.
        let mut cases: Vec<(Vec<usize>, Vec<usize>)> = (0..300)
            .map(|_| {
                let rank = 1 + g.below(5) as usize;
                let shape: Vec<usize> = (0..rank).map(|_| 1 + g.below(6) as usize).collect();
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, g.below(i as u64 + 1) as usize);
                }
                (shape, perm)
            })
            .collect();
        for (b, h, w) in [(1, 7, 9), (2, 5, 33), (1, 31, 67)] {
            cases.push((vec![b, 3, h, w], vec![0, 2, 3, 1]));
        }
        for (case, (shape, perm)) in cases.iter().enumerate() {
            let rank = shape.len();
            let mut in_strides = vec![1usize; rank];
            for d in (0..rank.saturating_sub(1)).rev() {
                in_strides[d] = in_strides[d + 1] * shape[d + 1];
            }
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
            let n: usize = shape.iter().product();
            let x = bytes(&mut g, n);
            let want = transpose_reference(&out_shape, &strides, &x);
            for &isa in &isas {
                let what = format!("case {case} ({}): {shape:?} perm {perm:?}", isa.name());
                // The whole tensor, then a random split into chunks at any element.
                let mut got = vec![0i8; n];
                transpose(isa, &out_shape, &strides, &x, &mut got, 0..n);
                assert_eq!(got, want, "{what}");
                let mut got = vec![0i8; n];
                let mut start = 0;
                while start < n {
                    let end = (start + 1 + g.below(n as u64) as usize).min(n);
                    let part = &mut got[start..end];
                    transpose(isa, &out_shape, &strides, &x, part, start..end);
                    start = end;
                }
                assert_eq!(got, want, "{what}, split");
            }
        }
    }
}
