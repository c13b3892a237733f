//! Window operators over NHWC images: max pooling (separable, vectorised) and average
//! pooling (also global). Rows over `batch · out_h`; see the parent module's contract.

use super::{requant_f32, round_magic, Window};
use crate::onnx::isa::multiversion;
use crate::onnx::isa::Isa;
use std::ops::Range;

/// Max pooling over NHWC `c`-channel images; rows over `batch * out_h`. Padded taps are
/// ignored (ONNX semantics); a window with no tap inside the image yields the lowest
/// value (`i8::MIN`, `-inf`).
///
/// Separable: for each output row, the maximum over the kernel's input rows is taken
/// first, across whole rows (long contiguous loops), into a stack buffer of
/// [`POOL_SCRATCH`] bytes (`cols`), then over the kernel's columns pixel by pixel; the output
/// columns are taken in runs whose input columns fit that buffer. Max is associative,
/// so this is the same result as tap by tap.
#[inline(always)]
fn max_pool_in<T: PoolElem>(
    win: &Window,
    c: usize,
    input: &[T],
    out: &mut [T],
    rows: Range<usize>,
    cols: &mut [T],
) {
    let img = win.in_h * win.in_w * c;
    let row_bytes = win.in_w * c;
    // Input columns one output column's window spans.
    let span = (win.kw - 1) * win.dw + 1;
    let run = if span * c <= cols.len() {
        // Output columns per run: their input columns (clipped to the image) fit.
        (cols.len() / c - span) / win.sw + 1
    } else {
        0
    };
    let mut o = 0;
    for r in rows {
        let (b, oy) = (r / win.out_h, r % win.out_h);
        let x = &input[b * img..(b + 1) * img];
        if run == 0 {
            // A window wider than the buffer: tap by tap.
            for ox in 0..win.out_w {
                let dst = &mut out[o..o + c];
                dst.fill(T::LOWEST);
                for (_, px) in win.pixel_taps(oy, ox) {
                    for (d, s) in dst.iter_mut().zip(&x[px * c..(px + 1) * c]) {
                        *d = (*d).maxv(*s);
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
            col.fill(T::LOWEST);
            for ky in win.rows_inside(oy) {
                let iy = win.iy(oy, ky) as usize;
                let src = &x[iy * row_bytes + x0 * c..iy * row_bytes + x1 * c];
                for (d, s) in col.iter_mut().zip(src) {
                    *d = (*d).maxv(*s);
                }
            }
            for ox in ox0..ox1 {
                let dst = &mut out[o..o + c];
                dst.fill(T::LOWEST);
                for kx in win.cols_inside(ox) {
                    let base = (win.ix(ox, kx) as usize - x0) * c;
                    for (d, s) in dst.iter_mut().zip(&col[base..base + c]) {
                        *d = (*d).maxv(*s);
                    }
                }
                o += c;
            }
            ox0 = ox1;
        }
    }
}

/// What [`max_pool_in`] pools: bytes, or `f32` (a float route's tensor).
trait PoolElem: Copy {
    /// The value of a window with no tap inside the image.
    const LOWEST: Self;
    /// The larger of `self` and `x`.
    fn maxv(self, x: Self) -> Self;
}

impl PoolElem for i8 {
    const LOWEST: i8 = i8::MIN;
    #[inline(always)]
    fn maxv(self, x: i8) -> i8 {
        self.max(x)
    }
}

impl PoolElem for f32 {
    const LOWEST: f32 = f32::NEG_INFINITY;
    #[inline(always)]
    fn maxv(self, x: f32) -> f32 {
        // `f32::max`: a NaN operand gives the other one.
        self.max(x)
    }
}

multiversion! {
    /// [`max_pool_in`] on bytes.
    pub(crate) fn max_pool(win: &Window, c: usize, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let mut cols = [i8::MIN; POOL_SCRATCH];
        max_pool_in(win, c, input, out, rows, &mut cols)
    }
}

multiversion! {
    /// [`max_pool_in`] on `f32` (TensorRT-style placement: a convolution's float output
    /// max-pooled), the same stack budget.
    pub(crate) fn max_pool_f32(win: &Window, c: usize, input: &[f32], out: &mut [f32], rows: Range<usize>) {
        let mut cols = [f32::NEG_INFINITY; POOL_SCRATCH / 4];
        max_pool_in(win, c, input, out, rows, &mut cols)
    }
}

/// Stack bytes [`max_pool`] keeps the column maxima of one run of output columns in.
const POOL_SCRATCH: usize = 8192;

/// Average pooling parameters. Two formulas, as ONNX Runtime's two kernels:
///
/// - integer (`float: None`; its global average pooling, also an `AveragePool` whose window
///   is the whole unpadded image): `y = requant(Σ (x - x_zp) as f32 * (x_scale / (y_scale *
///   count)))`, the multiplier computed in that order;
/// - float ([`AvgFloat`]; its `QLinearAveragePool` for any other window, the kernel a QDQ
///   `AveragePool` fuses into): see there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvgParams {
    pub x_zp: i32,
    pub y_zp: i32,
    pub x_scale: f32,
    pub y_scale: f32,
    pub count_include_pad: bool,
    pub lo: i8,
    pub hi: i8,
    pub float: Option<AvgFloat>,
}

/// ONNX Runtime's `QLinearAveragePool` arithmetic, followed to the bit: each tap dequantized
/// (`x_scale · (x - x_zp)`, one rounding), summed in `f32` in window order (rows, then
/// columns; taps inside the image only), divided by the count (the whole kernel's size with
/// `count_include_pad`, else the taps inside), then `y / y_scale + zero point` in `f32` and
/// rounded half to even. The zero point is added before rounding, so it must be the one the
/// file stores: a `uint8` output's, not the shifted `i8` one the engine keeps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvgFloat {
    /// The output zero point as the file stores it.
    pub stored_zp: f32,
    /// 128 for a `uint8` output (stored value − 128 is the engine's `i8`), else 0.
    pub offset: i32,
}

/// The divisor of output pixel `(oy, ox)`'s average: its taps inside the image, plus those
/// on the explicit padding when `count_include_pad` (taps past it, in ceil mode, never
/// count); at least 1.
fn avg_count(win: &Window, oy: usize, ox: usize, count_include_pad: bool) -> u32 {
    let (mut inside, mut padded) = (0u32, 0u32);
    for ky in 0..win.kh {
        let iy = win.iy(oy, ky);
        let in_pad_y = iy >= -(win.pt as isize) && iy < (win.in_h + win.pt) as isize;
        for kx in 0..win.kw {
            let ix = win.ix(ox, kx);
            if iy < 0 || iy >= win.in_h as isize || ix < 0 || ix >= win.in_w as isize {
                let in_pad_x = ix >= -(win.pl as isize) && ix < (win.in_w + win.pl) as isize;
                if in_pad_y && in_pad_x {
                    padded += 1;
                }
            } else {
                inside += 1;
            }
        }
    }
    if count_include_pad {
        inside + padded
    } else {
        inside
    }
    .max(1)
}

multiversion! {
    /// Average pooling of `f32` NHWC images (a float route's `AveragePool`): each output
    /// channel the sum of its window's taps inside the image in window order (rows, then
    /// columns), divided once by [`avg_count`]'s divisor. The lanes are channels, so every
    /// width adds in the same order. Rows over `batch * out_h`.
    pub(crate) fn avg_pool_f32(
        win: &Window,
        c: usize,
        count_include_pad: bool,
        input: &[f32],
        out: &mut [f32],
        rows: Range<usize>,
    ) {
        let img = win.in_h * win.in_w * c;
        let mut o = 0;
        for r in rows {
            let (b, oy) = (r / win.out_h, r % win.out_h);
            let x = &input[b * img..(b + 1) * img];
            for ox in 0..win.out_w {
                let n = avg_count(win, oy, ox, count_include_pad) as f32;
                let y = &mut out[o..o + c];
                y.fill(0.0);
                for (_, px) in win.pixel_taps(oy, ox) {
                    for (d, v) in y.iter_mut().zip(&x[px * c..px * c + c]) {
                        *d += v;
                    }
                }
                for d in y.iter_mut() {
                    *d /= n;
                }
                o += c;
            }
        }
    }
}

/// Average pooling over NHWC images (also global average pooling: a window the size of the
/// image). Rows over `batch * out_h`. Channels are summed in blocks of 64 in a stack array.
/// [`AvgParams::float`] selects [`avg_pool_float`].
pub(crate) fn avg_pool(
    isa: Isa,
    win: &Window,
    c: usize,
    p: &AvgParams,
    input: &[i8],
    out: &mut [i8],
    rows: Range<usize>,
) {
    if let Some(f) = p.float {
        return avg_pool_float(isa, win, c, p, f, input, out, rows);
    }
    if win.covers_image() {
        let count = avg_count(win, 0, 0, p.count_include_pad);
        return global_avg_pool(isa, win.in_h * win.in_w, count, c, p, input, out, rows);
    }
    const BLOCK: usize = 64;
    let img = win.in_h * win.in_w * c;
    let mut acc = [0i32; BLOCK];
    let mut o = 0;
    for r in rows {
        let (b, oy) = (r / win.out_h, r % win.out_h);
        let x = &input[b * img..(b + 1) * img];
        for ox in 0..win.out_w {
            let count = avg_count(win, oy, ox, p.count_include_pad);
            let scale = p.x_scale / (p.y_scale * count as f32);
            let mut c0 = 0;
            while c0 < c {
                let n = (c - c0).min(BLOCK);
                let acc = &mut acc[..n];
                acc.fill(0);
                for (_, px) in win.pixel_taps(oy, ox) {
                    let base = px * c + c0;
                    for (a, s) in acc.iter_mut().zip(&x[base..base + n]) {
                        *a += i32::from(*s) - p.x_zp;
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

/// Channels [`global_avg_pool`] sums at once, in a stack array.
const GLOBAL_BLOCK: usize = 256;

multiversion! {
    /// [`avg_pool`]'s integer formula over whole images of `hw` pixels (one output pixel
    /// per image, its divisor `count`; `rows` are images): per block of [`GLOBAL_BLOCK`]
    /// channels, `Σ x` over the pixels in order, then `Σ (x − x_zp) = Σ x − hw · x_zp`, the
    /// same `i32` as tap by tap (`hw · 255` fits), the same requantization. Streams each
    /// image once per block.
    fn global_avg_pool(
        hw: usize,
        count: u32,
        c: usize,
        p: &AvgParams,
        input: &[i8],
        out: &mut [i8],
        rows: Range<usize>,
    ) {
        let mut acc = [0i32; GLOBAL_BLOCK];
        for (o, b) in rows.enumerate() {
            let x = &input[b * hw * c..(b + 1) * hw * c];
            let mut c0 = 0;
            while c0 < c {
                let n = (c - c0).min(GLOBAL_BLOCK);
                let acc = &mut acc[..n];
                sum_pixels(c, c0, x, acc);
                for (d, a) in out[o * c + c0..o * c + c0 + n].iter_mut().zip(acc.iter()) {
                    *d = global_mean(p, hw, count, *a);
                }
                c0 += n;
            }
        }
    }
}

/// One channel of [`global_avg_pool`]'s result from its plain sum `Σ x` over `hw` pixels:
/// `Σ (x − x_zp) = Σ x − hw · x_zp`, times `x_scale / (y_scale · count)`, requantized.
#[inline(always)]
fn global_mean(p: &AvgParams, hw: usize, count: u32, sum: i32) -> i8 {
    let scale = p.x_scale / (p.y_scale * count as f32);
    requant_f32(
        (sum - hw as i32 * p.x_zp) as f32 * scale,
        p.y_zp,
        p.lo,
        p.hi,
    )
}

multiversion! {
    /// Per-channel plain sums `Σ x` of the whole pixels in `x` (`c` channels each) into
    /// `sums` (`c` of them): one chunk of a shared global pool ([`global_pool_finish`] adds
    /// the chunks up). Pixels in order, `i32` (a whole image's sum fits, as in
    /// [`global_avg_pool`]).
    pub(crate) fn global_pool_sums(c: usize, x: &[i8], sums: &mut [i32]) {
        sum_pixels(c, 0, x, &mut sums[..c]);
    }
}

/// Channels `c0 .. c0 + sums.len()` of the whole pixels in `x` (`c` channels each) summed
/// into `sums` (overwritten): the loop of [`global_avg_pool`] and [`global_pool_sums`],
/// inlined into each width. Blocks of 64, 32, 16 and 8 channels keep their sums in
/// registers ([`sum_block`]), the channels left one at a time. Integer sums, exact in any
/// order.
#[inline(always)]
fn sum_pixels(c: usize, c0: usize, x: &[i8], sums: &mut [i32]) {
    let n = sums.len();
    let mut k = 0;
    while n - k >= 64 {
        sum_block::<64>(c, c0 + k, x, &mut sums[k..k + 64]);
        k += 64;
    }
    if n - k >= 32 {
        sum_block::<32>(c, c0 + k, x, &mut sums[k..k + 32]);
        k += 32;
    }
    if n - k >= 16 {
        sum_block::<16>(c, c0 + k, x, &mut sums[k..k + 16]);
        k += 16;
    }
    if n - k >= 8 {
        sum_block::<8>(c, c0 + k, x, &mut sums[k..k + 8]);
        k += 8;
    }
    for (j, s) in sums.iter_mut().enumerate().skip(k) {
        *s = x.chunks_exact(c).map(|px| i32::from(px[c0 + j])).sum();
    }
}

/// Pixels summed per block of [`sum_block`]'s `i16` sums: `256 · 128 = 32,768` is the
/// largest magnitude they reach (`i8` values), and `i16` holds `−32,768..=32,512`.
const I16_PIXELS: usize = 256;

/// Channels `c0 .. c0 + N` of the whole pixels in `x` (`c` channels each, `c0 + N <= c`)
/// summed into `sums` (`N` of them, overwritten): `i16` sums over runs of [`I16_PIXELS`]
/// pixels (exact: see there), each run's added into `i32`. `N` fixed, so both stay in
/// vector registers: one widening add per 32 channels per pixel on AVX-512.
#[inline(always)]
fn sum_block<const N: usize>(c: usize, c0: usize, x: &[i8], sums: &mut [i32]) {
    let mut total = [0i32; N];
    for run in x.chunks(I16_PIXELS * c.max(1)) {
        let mut part = [0i16; N];
        for px in run.chunks_exact(c) {
            for (p, v) in part.iter_mut().zip(&px[c0..c0 + N]) {
                *p = p.wrapping_add(i16::from(*v));
            }
        }
        for (t, p) in total.iter_mut().zip(part) {
            *t += i32::from(p);
        }
    }
    sums.copy_from_slice(&total);
}

/// A shared global pool's result (one image over `win`, `c` channels) from its chunks'
/// sums ([`global_pool_sums`], `c` per chunk, in chunk order): the same `i32` sums as one
/// pass over the image, so the same bytes as [`avg_pool`].
pub(crate) fn global_pool_finish(
    win: &Window,
    c: usize,
    p: &AvgParams,
    partials: &[i32],
    out: &mut [i8],
) {
    let hw = win.in_h * win.in_w;
    let count = avg_count(win, 0, 0, p.count_include_pad);
    for (ch, d) in out.iter_mut().enumerate().take(c) {
        let sum = partials
            .iter()
            .skip(ch)
            .step_by(c.max(1))
            .fold(0i32, |s, v| s.wrapping_add(*v));
        *d = global_mean(p, hw, count, sum);
    }
}

multiversion! {
    /// [`avg_pool`] in [`AvgFloat`]'s arithmetic. The lanes are channels (blocks of 64 in a
    /// stack array), so every width adds in the same order.
    fn avg_pool_float(
        win: &Window,
        c: usize,
        p: &AvgParams,
        f: AvgFloat,
        input: &[i8],
        out: &mut [i8],
        rows: Range<usize>,
    ) {
        const BLOCK: usize = 64;
        let img = win.in_h * win.in_w * c;
        let mut acc = [0f32; BLOCK];
        let mut o = 0;
        for r in rows {
            let (b, oy) = (r / win.out_h, r % win.out_h);
            let x = &input[b * img..(b + 1) * img];
            for ox in 0..win.out_w {
                let count = if p.count_include_pad {
                    (win.kh * win.kw) as f32
                } else {
                    avg_count(win, oy, ox, false) as f32
                };
                let mut c0 = 0;
                while c0 < c {
                    let n = (c - c0).min(BLOCK);
                    let acc = &mut acc[..n];
                    acc.fill(0.0);
                    for (_, px) in win.pixel_taps(oy, ox) {
                        let base = px * c + c0;
                        for (a, s) in acc.iter_mut().zip(&x[base..base + n]) {
                            *a += p.x_scale * (i32::from(*s) - p.x_zp) as f32;
                        }
                    }
                    for (d, a) in out[o + c0..o + c0 + n].iter_mut().zip(acc.iter()) {
                        let v = (*a / count / p.y_scale + f.stored_zp).clamp(-1024.0, 1024.0);
                        let q = round_magic(v).1 - f.offset;
                        *d = q.clamp(i32::from(p.lo), i32::from(p.hi)) as i8;
                    }
                    c0 += n;
                }
                o += c;
            }
        }
    }
}
