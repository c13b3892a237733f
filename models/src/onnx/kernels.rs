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

use std::ops::Range;

/// Rounds half to even for `|v| <= 2^22` with the "magic number" addition (exact under
/// IEEE-754 round-to-nearest-even, which Rust never changes): `f32::round_ties_even` is a
/// libm call on baseline x86-64 and would keep these loops scalar. Callers clamp first.
#[inline(always)]
fn round_even_small(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (v + MAGIC) - MAGIC
}

/// Saturating `i8` from a rounded float plus a zero point, clamped into `[lo, hi]`.
/// Values beyond ±1024 saturate either way, so they are clamped before rounding (NaN stays
/// NaN and becomes 0 through the saturating cast, as before).
#[inline]
pub(crate) fn requant_f32(v: f32, zp: i32, lo: i8, hi: i8) -> i8 {
    let r = round_even_small(v.clamp(-1024.0, 1024.0)) + zp as f32;
    r.clamp(f32::from(lo), f32::from(hi)) as i8
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

/// Max pooling over NHWC `c`-channel images; rows over `batch * out_h`. Padded taps are
/// ignored (ONNX semantics); a window with no tap inside the image yields `i8::MIN`.
pub(crate) fn max_pool(win: &Window, c: usize, input: &[i8], out: &mut [i8], rows: Range<usize>) {
    let img = win.in_h * win.in_w * c;
    let mut o = 0;
    for r in rows {
        let (b, oy) = (r / win.out_h, r % win.out_h);
        let x = &input[b * img..(b + 1) * img];
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
    }
}

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
    #[inline]
    fn one(&self, a: i8, b: i8) -> i8 {
        match self.kind {
            BinaryKind::Add { ra, rb, fixed } => {
                let v = (fixed + f32::from(a) * ra) + f32::from(b) * rb;
                requant_f32(v, 0, self.lo, self.hi)
            }
            BinaryKind::Mul => {
                let (a, b) = (i32::from(a) - self.za, i32::from(b) - self.zb);
                let v = (a as f32 * self.sa * (b as f32 * self.sb)) / self.sy;
                requant_f32(v, self.zy, self.lo, self.hi)
            }
        }
    }

    /// Elements `range` of the output (flat index, physical order).
    pub fn run(&self, a: &[i8], b: &[i8], out: &mut [i8], range: Range<usize>) {
        let n: usize = self.shape.iter().product();
        if a.len() == n
            && b.len() == n
            && dense_strides(&self.a_strides, &self.shape)
            && dense_strides(&self.b_strides, &self.shape)
        {
            // Same shape, both contiguous: one flat loop the compiler vectorises.
            for ((d, x), y) in out.iter_mut().zip(&a[range.clone()]).zip(&b[range]) {
                *d = self.one(*x, *y);
            }
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
            for k in 0..n {
                out[o + k] = self.one(a[oa + (col + k) * sa], b[ob + (col + k) * sb]);
            }
            i += n;
            o += n;
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

/// Permutes a row-major tensor of 1-byte or 4-byte elements: output element at multi-index
/// `j` (over `out_shape`) is the input element whose index is `j` scattered through `perm`
/// (`in_strides_permuted[d]` = the input stride of output dimension `d`). Rows are ranges of
/// the flat output index.
pub(crate) fn transpose<T: Copy>(
    out_shape: &[usize],
    in_strides_permuted: &[usize],
    input: &[T],
    out: &mut [T],
    range: Range<usize>,
) {
    let rank = out_shape.len();
    if rank >= 2 {
        // Walk the output row by row: one index decomposition per row, then a strided
        // gather along the last output dimension.
        let inner = out_shape[rank - 1];
        let step = in_strides_permuted[rank - 1];
        let mut i = range.start;
        let mut o = 0;
        while i < range.end {
            let col = i % inner;
            let mut rem = i / inner;
            let mut off = col * step;
            for d in (0..rank - 1).rev() {
                off += (rem % out_shape[d]) * in_strides_permuted[d];
                rem /= out_shape[d];
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

/// `QuantizeLinear` of `f32` values: `saturate(round_half_even(x / scale) + zp)` (ONNX
/// semantics, as ONNX Runtime computes it: a division, not a multiply by the reciprocal).
pub(crate) fn quantize(input: &[f32], scale: f32, zp: i32, out: &mut [i8]) {
    for (d, s) in out.iter_mut().zip(input) {
        *d = requant_f32(*s / scale, zp, i8::MIN, i8::MAX);
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

/// Resize of NHWC images: `ys`/`xs` hold one [`Tap`] per output row / column; `mode` says
/// how a value is computed. Rows over `batch * out_h`.
#[allow(clippy::too_many_arguments)]
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
                    for (ch, d) in dst.iter_mut().enumerate() {
                        let v = |p: usize| f32::from(x[p + ch]);
                        let f = v(p00) * wx0 * wy0
                            + v(p01) * wx1 * wy0
                            + v(p10) * wx0 * wy1
                            + v(p11) * wx1 * wy1;
                        let r = if floor { f.floor() } else { f.trunc() };
                        *d = r.clamp(-128.0, 127.0) as i8;
                    }
                }
                Interp::Linear { x_zp, y_zp, ratio } => {
                    for (ch, d) in dst.iter_mut().enumerate() {
                        let v = |p: usize| (i32::from(x[p + ch]) - x_zp) as f32;
                        let top = v(p00) * wx0 + v(p01) * wx1;
                        let bot = v(p10) * wx0 + v(p11) * wx1;
                        *d = requant_f32((top * wy0 + bot * wy1) * ratio, y_zp, i8::MIN, i8::MAX);
                    }
                }
            }
            o += c;
        }
    }
}

/// The dilation phases of an `h × w` image for dilation `dh × dw` (rows × columns): phase
/// `(a, b)` is the sub-image of pixels `(a + dh·Y, b + dw·X)`, padded to the common size
/// [`Phases::ph`] × [`Phases::pw`] (`⌈h/dh⌉ × ⌈w/dw⌉`) with the input's zero point.
///
/// Why: a stride-1 convolution with dilation `dh × dw` and "same" padding `dh·(k/2)`,
/// `dw·(k/2)` computes output pixel `(a + dh·Y, b + dw·X)` from input pixels
/// `(a + dh·(Y + i), b + dw·(X + j))`, `i, j ∈ −k/2..=k/2` — phase `(a, b)` only, at unit
/// spacing. So it equals the dense
/// (dilation 1) convolution with padding `k/2` of each phase image, whose output phases
/// are merged back. A tap beyond a phase's real end is an image pixel beyond the edge, i.e.
/// padding, which is what the fill and the dense kernel's own padding give: the result is
/// bit-identical to the direct dilated convolution (tested against the general kernel).
/// Cost: one copy of the input and one of the output, against `k·k·in_c` multiply-adds per
/// output value on kernels 5–15× faster than the general one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Phases {
    /// Dilation of the rows (`>= 1`).
    pub dh: usize,
    /// Dilation of the columns (`>= 1`).
    pub dw: usize,
    /// Image height.
    pub h: usize,
    /// Image width.
    pub w: usize,
}

impl Phases {
    /// Rows of every phase image.
    pub fn ph(&self) -> usize {
        self.h.div_ceil(self.dh)
    }

    /// Columns of every phase image.
    pub fn pw(&self) -> usize {
        self.w.div_ceil(self.dw)
    }

    /// Phase images per image, `dh · dw`.
    pub fn count(&self) -> usize {
        self.dh * self.dw
    }

    /// Phase images from NHWC images of `c` channels: `rows` are rows of the output, which
    /// holds `batch · dh · dw` phase images (image `(b·dh + a)·dw + bx` is phase `(a, bx)`
    /// of image `b`) of `ph` rows of `pw · c` bytes; `out` holds exactly those rows.
    pub fn split(&self, c: usize, fill: i8, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let (dh, dw, ph) = (self.dh, self.dw, self.ph());
        for (r, orow) in rows.zip(out.chunks_exact_mut(self.pw() * c)) {
            let (img, py) = (r / ph, r % ph);
            let (b, phase) = (img / self.count(), img % self.count());
            let (a, bx) = (phase / dw, phase % dw);
            let y = a + dh * py;
            if y >= self.h {
                orow.fill(fill);
                continue;
            }
            let irow = &input[(b * self.h + y) * self.w * c..][..self.w * c];
            for (px, o) in orow.chunks_exact_mut(c).enumerate() {
                let x = bx + dw * px;
                if x < self.w {
                    o.copy_from_slice(&irow[x * c..(x + 1) * c]);
                } else {
                    o.fill(fill);
                }
            }
        }
    }

    /// NHWC images of `c` channels from their phase images (the layout `split` writes):
    /// `rows` are image rows (`batch · h` in all) of `w · c` bytes; `out` holds those rows.
    pub fn merge(&self, c: usize, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let (dh, dw, ph, pw) = (self.dh, self.dw, self.ph(), self.pw());
        for (r, orow) in rows.zip(out.chunks_exact_mut(self.w * c)) {
            let (b, y) = (r / self.h, r % self.h);
            let (a, py) = (y % dh, y / dh);
            for (x, o) in orow.chunks_exact_mut(c).enumerate() {
                let img = (b * dh + a) * dw + x % dw;
                let at = ((img * ph + py) * pw + x / dw) * c;
                o.copy_from_slice(&input[at..at + c]);
            }
        }
    }
}

/// A convolution that keeps the rows and strides the columns by `s` (stride `1 × s`),
/// folded onto the dense kernels: the NHWC input `[h, w, c]` read as `[h, w/s, s·c]`
/// (column `s·X + p`, channel `ci` is folded column `X`, channel `p·c + ci`: the same
/// bytes, no copy) convolved at stride 1 with a square `k × k` kernel whose taps are the
/// original ones moved to where their columns fell.
///
/// Why: output column `X` reads input columns `s·X + t`, `t = kx − pad_left`; with
/// `t = s·o + p` (`p ∈ 0..s`) that is folded column `X + o`, channel block `p`. A tap beyond
/// the edge falls beyond the folded image's edge, where the dense kernel pads with the zero
/// point as ONNX does, and the taps no original tap lands on are zero weights: the result
/// is bit-identical to the direct convolution (tested against the general kernel).
/// Cost: `k·k·s·c` multiply-adds per output value, `s·k/kw` times the direct count (2× for a
/// 3×3 kernel at stride 1 × 2), on kernels 5–15× faster than the general one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ColumnFold {
    /// Column stride (`>= 2`).
    pub s: usize,
    /// Square kernel size of the folded convolution (the original kernel's height).
    pub k: usize,
    /// The original kernel's width and left padding.
    pub kw: usize,
    pub pl: usize,
}

impl ColumnFold {
    /// The fold of a convolution over `h × w` images, if it has one: kernel height `kh` odd,
    /// stride `1 × s` (`s >= 2` dividing `w`), no dilation, one group, "same" padding of the
    /// rows (`kh/2`), `w/s` output columns, and every tap's column within `kh/2` folded
    /// columns of the output's.
    pub fn of(win: &Window, h: usize, w: usize, groups: usize) -> Option<Self> {
        let (k, s) = (win.kh, win.sw);
        let fold = Self {
            s,
            k,
            kw: win.kw,
            pl: win.pl,
        };
        let reach = (0..win.kw).all(|kx| fold.offset(kx).unsigned_abs() <= k / 2);
        (k % 2 == 1
            && win.sh == 1
            && s >= 2
            && w.is_multiple_of(s)
            && win.dh == 1
            && win.dw == 1
            && groups == 1
            && win.pt == k / 2
            && win.out_h == h
            && win.out_w == w / s
            && reach)
            .then_some(fold)
    }

    /// Folded column offset of tap `kx` (may be negative).
    fn offset(&self, kx: usize) -> isize {
        (kx as isize - self.pl as isize).div_euclid(self.s as isize)
    }

    /// The folded weights, `[out_c, k, k, s·in_c]`, from `[out_c, k, kw, in_c]` (packed
    /// O, kh, kw, I as the dense kernels take them).
    pub fn weights(&self, w: &[i8], out_c: usize, in_c: usize) -> Vec<i8> {
        let (k, s, kw) = (self.k, self.s, self.kw);
        let mut out = vec![0i8; out_c * k * k * s * in_c];
        for o in 0..out_c {
            for ky in 0..k {
                for kx in 0..kw {
                    let t = kx as isize - self.pl as isize;
                    let col = (self.offset(kx) + (k / 2) as isize) as usize;
                    let block = t.rem_euclid(s as isize) as usize;
                    let from = ((o * k + ky) * kw + kx) * in_c;
                    let to = ((o * k + ky) * k + col) * s * in_c + block * in_c;
                    out[to..to + in_c].copy_from_slice(&w[from..from + in_c]);
                }
            }
        }
        out
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

#[cfg(test)]
mod phase_tests {
    use super::*;
    use crate::conv::{Conv2d, ConvShape};
    use crate::quant::{requant_multiplier, QParams};
    use proptest::prelude::*;
    use redline_runtime::rng::SplitMix64;

    /// A random convolution case: input, weights, bias, quantization and the general
    /// kernel's direct result for `win` (NHWC, `batch` images).
    struct Case {
        input: Vec<i8>,
        weights: Vec<i8>,
        bias: Vec<i32>,
        w_scales: Vec<f32>,
        x_q: QParams,
        y_q: QParams,
        direct: Vec<i8>,
    }

    fn case(
        win: Window,
        (in_c, out_c, batch): (usize, usize, usize),
        seed: u64,
        relu: bool,
    ) -> Case {
        let mut rng = SplitMix64::new(seed);
        let mut bytes = |n: usize| -> Vec<i8> { (0..n).map(|_| rng.next_i8()).collect() };
        let input = bytes(batch * win.in_h * win.in_w * in_c);
        let weights = bytes(out_c * win.kh * win.kw * in_c);
        let extra = bytes(out_c + 2);
        let bias: Vec<i32> = extra[..out_c].iter().map(|&v| i32::from(v) * 97).collect();
        let x_q = QParams {
            scale: 0.02,
            zero_point: extra[out_c] / 4,
        };
        let y_q = QParams {
            scale: 0.9,
            zero_point: extra[out_c + 1] / 4,
        };
        let w_scales: Vec<f32> = (0..out_c).map(|o| 0.01 + 0.002 * o as f32).collect();
        let general = GeneralConv {
            win,
            in_c,
            out_c,
            groups: 1,
            weights: weights.clone(),
            bias: bias.clone(),
            multipliers: w_scales
                .iter()
                .map(|&ws| requant_multiplier(x_q.scale, ws, y_q.scale))
                .collect(),
            x_zp: i32::from(x_q.zero_point),
            y_zp: i32::from(y_q.zero_point),
            lo: if relu { y_q.zero_point } else { -128 },
            hi: 127,
        };
        let mut direct = vec![0i8; batch * win.out_h * win.out_w * out_c];
        general.run(&input, &mut direct, 0..batch * win.in_h);
        Case {
            input,
            weights,
            bias,
            w_scales,
            x_q,
            y_q,
            direct,
        }
    }

    /// The direct dilated convolution (the general kernel) and the phase route (split,
    /// dense kernel on every phase image, merge) give the same bytes.
    fn check(
        (d, k, h, w, in_c, out_c, batch): (usize, usize, usize, usize, usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        check_rect((d, d), (k, h, w, in_c, out_c, batch), seed, relu);
    }

    /// [`check`] with dilation `dh × dw`.
    fn check_rect(
        (dh, dw): (usize, usize),
        (k, h, w, in_c, out_c, batch): (usize, usize, usize, usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        let win = Window {
            in_h: h,
            in_w: w,
            out_h: h,
            out_w: w,
            kh: k,
            kw: k,
            sh: 1,
            sw: 1,
            dh,
            dw,
            pt: dh * (k / 2),
            pl: dw * (k / 2),
        };
        let Case {
            input,
            weights,
            bias,
            w_scales,
            x_q,
            y_q,
            direct,
        } = case(win, (in_c, out_c, batch), seed, relu);
        let shape = ConvShape {
            in_c,
            out_c,
            k,
            stride: 1,
            pad: k / 2,
        };
        let dense = Conv2d::new(shape, weights, w_scales, bias, x_q, y_q, relu).unwrap();
        let p = Phases { dh, dw, h, w };
        let (ph, pw) = (p.ph(), p.pw());
        let images = batch * p.count();
        let mut split = vec![0i8; images * ph * pw * in_c];
        // Split in two uneven row ranges: the result must not depend on the split.
        let rows = images * ph;
        let cut = rows / 3;
        let (first, rest) = split.split_at_mut(cut * pw * in_c);
        p.split(in_c, x_q.zero_point, &input, first, 0..cut);
        p.split(in_c, x_q.zero_point, &input, rest, cut..rows);
        let mut phase_out = vec![0i8; images * ph * pw * out_c];
        let (img_in, img_out) = (ph * pw * in_c, ph * pw * out_c);
        for i in 0..images {
            dense
                .forward(
                    &split[i * img_in..(i + 1) * img_in],
                    ph,
                    pw,
                    &mut phase_out[i * img_out..(i + 1) * img_out],
                )
                .unwrap();
        }
        let mut merged = vec![0i8; batch * h * w * out_c];
        let cut = (batch * h) / 2;
        let (first, rest) = merged.split_at_mut(cut * w * out_c);
        p.merge(out_c, &phase_out, first, 0..cut);
        p.merge(out_c, &phase_out, rest, cut..batch * h);
        assert_eq!(
            merged, direct,
            "d {dh}x{dw} k {k} {h}x{w} {in_c}->{out_c} batch {batch}"
        );
    }

    #[test]
    fn phases_of_the_shipped_shapes() {
        // The trained dilated network's layers: 48 channels at 16x32 (d 2, 4), the BEV
        // grid 48x80 (d 2); and sizes the dilation does not divide.
        check((2, 3, 16, 32, 48, 48, 6), 1, true);
        check((4, 3, 16, 32, 48, 48, 2), 2, true);
        check((2, 3, 48, 80, 48, 48, 1), 3, false);
        check((3, 3, 13, 11, 5, 7, 1), 4, false);
        check((4, 5, 7, 9, 3, 17, 2), 5, true);
        check((5, 3, 2, 3, 4, 4, 1), 6, false);
    }

    /// The direct convolution at stride `1 × s` (the general kernel) and its column fold on
    /// the dense kernel give the same bytes.
    fn check_fold(
        (s, k, kw, pl): (usize, usize, usize, usize),
        (h, w, in_c, out_c, batch): (usize, usize, usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        let win = Window {
            in_h: h,
            in_w: w,
            out_h: h,
            out_w: w / s,
            kh: k,
            kw,
            sh: 1,
            sw: s,
            dh: 1,
            dw: 1,
            pt: k / 2,
            pl,
        };
        let fold = ColumnFold::of(&win, h, w, 1).expect("a foldable convolution");
        let Case {
            input,
            weights,
            bias,
            w_scales,
            x_q,
            y_q,
            direct,
        } = case(win, (in_c, out_c, batch), seed, relu);
        let shape = ConvShape {
            in_c: s * in_c,
            out_c,
            k,
            stride: 1,
            pad: k / 2,
        };
        let folded = fold.weights(&weights, out_c, in_c);
        let dense = Conv2d::new(shape, folded, w_scales, bias, x_q, y_q, relu).unwrap();
        let mut got = vec![0i8; batch * h * (w / s) * out_c];
        let (img_in, img_out) = (h * w * in_c, h * (w / s) * out_c);
        for i in 0..batch {
            dense
                .forward(
                    &input[i * img_in..(i + 1) * img_in],
                    h,
                    w / s,
                    &mut got[i * img_out..(i + 1) * img_out],
                )
                .unwrap();
        }
        assert_eq!(
            got, direct,
            "s {s} k {k}x{kw} pl {pl} {h}x{w} {in_c}->{out_c} batch {batch}"
        );
    }

    #[test]
    fn column_folds_of_strided_columns() {
        // The 4x2-stride backbone's third layer (3x3, stride 1x2, 32 -> 48 channels at 64x128),
        // then other strides, kernels and paddings.
        check_fold((2, 3, 3, 1), (64, 128, 32, 48, 1), 11, true);
        check_fold((2, 3, 3, 1), (5, 6, 3, 5, 2), 12, false);
        check_fold((3, 3, 3, 1), (4, 9, 7, 3, 1), 13, true);
        check_fold((2, 5, 5, 2), (6, 10, 4, 9, 1), 14, false);
        check_fold((2, 3, 1, 0), (3, 8, 5, 4, 2), 15, true);
        check_fold((4, 3, 3, 1), (3, 8, 2, 3, 1), 16, false);
    }

    #[test]
    fn convolutions_without_a_column_fold_are_refused() {
        let win = |sh, sw, dh, pt, pl, out_h, out_w| Window {
            in_h: 8,
            in_w: 8,
            out_h,
            out_w,
            kh: 3,
            kw: 3,
            sh,
            sw,
            dh,
            dw: 1,
            pt,
            pl,
        };
        assert!(ColumnFold::of(&win(1, 2, 1, 1, 1, 8, 4), 8, 8, 1).is_some());
        // Strided rows, dilation, groups, a stride that does not divide the width, padding
        // that is not "same" on the rows, or a tap out of the folded kernel's reach.
        assert!(ColumnFold::of(&win(2, 2, 1, 1, 1, 4, 4), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 2, 2, 1, 8, 4), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 1, 1, 1, 8, 4), 8, 8, 2).is_none());
        assert!(ColumnFold::of(&win(1, 3, 1, 1, 1, 8, 2), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 1, 0, 1, 6, 4), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 1, 1, 4, 8, 4), 8, 8, 1).is_none());
    }

    #[test]
    fn phases_of_rectangular_dilations() {
        // The 4x2-stride backbone ("dilated_pos_r2"): rows dilated twice as far as columns,
        // 48 channels at 64x64; and a column-only dilation on odd sizes.
        check_rect((2, 1), (3, 64, 64, 48, 48, 1), 7, true);
        check_rect((4, 2), (3, 64, 64, 48, 48, 1), 8, true);
        check_rect((8, 4), (3, 64, 64, 48, 48, 1), 9, true);
        check_rect((1, 3), (3, 7, 11, 5, 9, 2), 10, false);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn phases_equal_the_direct_dilated_convolution(
            dh in 1usize..6,
            dw in 1usize..6,
            k in prop::sample::select(vec![1usize, 3, 5]),
            h in 1usize..15,
            w in 1usize..15,
            in_c in 1usize..40,
            out_c in 1usize..40,
            batch in 1usize..3,
            seed in any::<u64>(),
            relu in any::<bool>(),
        ) {
            check_rect((dh, dw), (k, h, w, in_c, out_c, batch), seed, relu);
        }

        #[test]
        fn column_folds_equal_the_direct_strided_convolution(
            s in 2usize..5,
            k in prop::sample::select(vec![1usize, 3, 5]),
            kw_pl in 0usize..9,
            h in 1usize..9,
            cols in 1usize..6,
            in_c in 1usize..24,
            out_c in 1usize..24,
            batch in 1usize..3,
            seed in any::<u64>(),
            relu in any::<bool>(),
        ) {
            // Any kernel width 1..=k and left padding whose taps the fold reaches.
            let kw = 1 + kw_pl % k;
            let pl = (kw_pl / 3).min(kw - 1);
            let w = s * cols;
            let win = Window { in_h: h, in_w: w, out_h: h, out_w: cols, kh: k, kw, sh: 1, sw: s, dh: 1, dw: 1, pt: k / 2, pl };
            prop_assume!(ColumnFold::of(&win, h, w, 1).is_some());
            check_fold((s, k, kw, pl), (h, w, in_c, out_c, batch), seed, relu);
        }
    }
}
