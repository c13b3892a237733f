//! Data movement: transposes (with the 3-channel NCHW-to-NHWC interleave) and resizes of
//! NHWC images; see the parent module's contract.

use super::{requant_f32_or, strided_offset, Isa};
use crate::onnx::isa::multiversion;
use std::ops::Range;

/// Permutes a row-major tensor of bytes: output element at multi-index
/// `j` (over `out_shape`) is the input element whose index is `j` scattered through `perm`
/// (`in_strides_permuted[d]` = the input stride of output dimension `d`). Rows are ranges of
/// the flat output index. A copy of 4-byte elements (a last axis of 4 contiguous bytes,
/// every other stride a multiple of 4, the range and both buffers 4-byte aligned: a float
/// tensor's transpose) moves whole elements; the same bytes either way.
pub(crate) fn transpose(
    isa: Isa,
    out_shape: &[usize],
    in_strides_permuted: &[usize],
    input: &[i8],
    out: &mut [i8],
    range: Range<usize>,
) {
    if transpose_words(
        isa,
        out_shape,
        in_strides_permuted,
        input,
        out,
        range.clone(),
    ) {
        return;
    }
    let interleave = |input: &[i8], off: usize, step: usize, dst: &mut [i8]| {
        interleave3(isa, input, off, step, dst)
    };
    transpose_in(
        isa,
        out_shape,
        in_strides_permuted,
        input,
        out,
        range,
        &interleave,
        transpose_tiles,
    );
}

/// Most axes of a copy [`transpose_words`] takes (besides the element's bytes).
const WORD_RANK_MAX: usize = 8;

/// True when a [`transpose`] copies whole 4-byte elements: a last axis of 4 contiguous
/// bytes, every other stride a multiple of 4, at most [`WORD_RANK_MAX`] other axes. Its
/// rows are then split between lanes at element boundaries.
pub(crate) fn copies_words(out_shape: &[usize], in_strides_permuted: &[usize]) -> bool {
    let rank = out_shape.len();
    (2..=WORD_RANK_MAX + 1).contains(&rank)
        && (out_shape[rank - 1], in_strides_permuted[rank - 1]) == (4, 1)
        && in_strides_permuted[..rank - 1]
            .iter()
            .all(|s| s.is_multiple_of(4))
}

/// How a [`transpose`] whose two innermost output axes transpose whole tiles (each output
/// row reads the input down a column: the row's next element one input row further, the
/// next output row one element further; both at least [`TILE`] long) is best split: by
/// whole output rows, at least [`TILE`] a chunk, so that every chunk moves whole tiles
/// (split anywhere, a chunk of a few rows gathers element by element and reads each input
/// cache line once per row: an NHWC map's last transpose back to NCHW). (rows, bytes a
/// row, chunks), fixed by the shape; `None` for every other copy, which splits its output
/// anywhere. Either split gives the same bytes.
pub(crate) fn tile_rows(
    out_shape: &[usize],
    in_strides_permuted: &[usize],
) -> Option<(usize, usize, usize)> {
    let words = copies_words(out_shape, in_strides_permuted);
    let (e, rank) = if words {
        (4, out_shape.len() - 1)
    } else {
        (1, out_shape.len())
    };
    if rank < 2 {
        return None;
    }
    let (inner, mid) = (out_shape[rank - 1], out_shape[rank - 2]);
    let (step, mid_step) = (
        in_strides_permuted[rank - 1] / e,
        in_strides_permuted[rank - 2] / e,
    );
    if mid_step != 1 || step <= 1 || inner < TILE || mid < TILE {
        return None;
    }
    let rows: usize = out_shape[..rank - 1].iter().product();
    Some((rows, inner * e, (rows / TILE).clamp(1, 16)))
}

/// [`transpose`] of 4-byte elements as `u32` words; false (nothing written) when the copy
/// is not one of whole, aligned 4-byte elements.
fn transpose_words(
    isa: Isa,
    out_shape: &[usize],
    in_strides_permuted: &[usize],
    input: &[i8],
    out: &mut [i8],
    range: Range<usize>,
) -> bool {
    let rank = out_shape.len();
    if !copies_words(out_shape, in_strides_permuted)
        || !range.start.is_multiple_of(4)
        || !range.end.is_multiple_of(4)
    {
        return false;
    }
    let (Ok(input), Ok(out)) = (
        bytemuck::try_cast_slice::<i8, u32>(&input[..input.len() / 4 * 4]),
        bytemuck::try_cast_slice_mut::<i8, u32>(out),
    ) else {
        return false;
    };
    let mut strides = [0usize; WORD_RANK_MAX];
    for (w, &s) in strides.iter_mut().zip(&in_strides_permuted[..rank - 1]) {
        *w = s / 4;
    }
    let no_interleave = |_: &[u32], _: usize, _: usize, _: &mut [u32]| false;
    transpose_in(
        isa,
        &out_shape[..rank - 1],
        &strides[..rank - 1],
        input,
        out,
        range.start / 4..range.end / 4,
        &no_interleave,
        transpose_tiles_words,
    );
    true
}

/// A tile transpose of elements `E`, compiled for the machine's ISA.
type Tiles<E> = fn(Isa, &[E], usize, usize, usize, usize, &mut [E]);

/// A three-plane interleave of elements `E` (`input`, offset, plane step, output); false
/// when it did not run.
type Interleave<'a, E> = &'a dyn Fn(&[E], usize, usize, &mut [E]) -> bool;

/// [`transpose`]'s walk over elements `E` (bytes, or 4-byte words): `interleave` may take a
/// run of three planes (bytes only), `tiles` moves whole square tiles.
#[allow(clippy::too_many_arguments)]
fn transpose_in<E: Copy + Default>(
    isa: Isa,
    out_shape: &[usize],
    in_strides_permuted: &[usize],
    input: &[E],
    out: &mut [E],
    range: Range<usize>,
    interleave: Interleave<'_, E>,
    tiles: Tiles<E>,
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
            let rem = i / inner;
            let y = rem % mid;
            let off = col * step
                + strided_offset(
                    rem,
                    &out_shape[..rank - 1],
                    &in_strides_permuted[..rank - 1],
                );
            let rows = if col == 0 {
                (mid - y).min((range.end - i) / inner.max(1))
            } else {
                0
            };
            if rows > 0 {
                let dst = &mut out[o..o + rows * inner];
                if mid_step == 1 && inner == 3 && interleave(input, off, step, dst) {
                    i += rows * inner;
                    o += rows * inner;
                    continue;
                }
                if step == 1 {
                    // Rows contiguous in the input too (a head split moving runs of 64
                    // features): one copy a row.
                    for (r, d) in dst.chunks_exact_mut(inner.max(1)).enumerate() {
                        let at = off + r * mid_step;
                        d.copy_from_slice(&input[at..at + inner]);
                    }
                    i += rows * inner;
                    o += rows * inner;
                    continue;
                }
                if mid_step == 1 && step > 1 && rows >= TILE && inner >= TILE {
                    // A 2-D transpose (each input row of `rows` bytes becomes a column of
                    // `dst`): tiles of whole columns at a time, the ragged columns below.
                    tiles(isa, input, off, step, rows, inner, dst);
                    for k in inner / TILE * TILE..inner {
                        let src = off + k * step;
                        for r in 0..rows {
                            dst[r * inner + k] = input[src + r];
                        }
                    }
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
        out[o] = input[strided_offset(i, out_shape, in_strides_permuted)];
    }
}

/// Side of the square tiles [`transpose_tiles`] moves.
const TILE: usize = 16;

multiversion! {
    /// [`tiles_in`] on bytes.
    fn transpose_tiles(input: &[i8], off: usize, step: usize, rows: usize, inner: usize, dst: &mut [i8]) {
        tiles_in(input, off, step, rows, inner, dst)
    }
}

multiversion! {
    /// [`tiles_in`] on 4-byte words.
    fn transpose_tiles_words(input: &[u32], off: usize, step: usize, rows: usize, inner: usize, dst: &mut [u32]) {
        tiles_in(input, off, step, rows, inner, dst)
    }
}

/// The tiles of a 2-D transpose over whole [`TILE`]s of columns: `dst[r · inner + k] =
/// input[off + k · step + r]` for every `r < rows` and `k < inner / TILE · TILE`. Each tile
/// (`TILE` columns by up to `TILE` rows: the last row tile may be shorter) is read as `TILE`
/// contiguous input runs into a fixed-size block and written out as contiguous output rows.
#[inline(always)]
fn tiles_in<E: Copy + Default>(
    input: &[E],
    off: usize,
    step: usize,
    rows: usize,
    inner: usize,
    dst: &mut [E],
) {
    for k0 in (0..inner / TILE * TILE).step_by(TILE) {
        for r0 in (0..rows).step_by(TILE) {
            let h = TILE.min(rows - r0);
            let mut tile = [[E::default(); TILE]; TILE];
            for (k, t) in tile.iter_mut().enumerate() {
                let at = off + (k0 + k) * step + r0;
                if h == TILE {
                    // The whole-tile case as fixed-size copies.
                    if let Some(src) = input.get(at..at + TILE) {
                        t.copy_from_slice(src);
                    }
                } else if let Some(src) = input.get(at..at + h) {
                    t[..h].copy_from_slice(src);
                }
            }
            let mut turned = [[E::default(); TILE]; TILE];
            for (k, row) in tile.iter().enumerate() {
                for (r, &v) in row.iter().enumerate() {
                    turned[r][k] = v;
                }
            }
            for (r, row) in turned[..h].iter().enumerate() {
                let at = (r0 + r) * inner + k0;
                if let Some(d) = dst.get_mut(at..at + TILE) {
                    d.copy_from_slice(row);
                }
            }
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

impl Tap {
    /// The second tap's weight in 1/1024ths, as ONNX Runtime's integer bilinear resize
    /// computes it: `floor(w1 · 1024)` (`w1` is the coordinate minus `i0`, exact), or 512
    /// where both taps are one pixel (a clamped border).
    #[inline(always)]
    pub(crate) fn weight_s10(&self) -> i32 {
        if self.i0 == self.i1 {
            512
        } else {
            (self.w1 * 1024.0) as i32
        }
    }

    /// The two taps' weights in ONNX Runtime's float bilinear formula: `1 − w1` and `w1`,
    /// or `0.5` and `0.5` where both taps are one pixel (a clamped border).
    #[inline(always)]
    pub(crate) fn weights(&self) -> (f32, f32) {
        if self.i0 == self.i1 {
            (0.5, 0.5)
        } else {
            (1.0 - self.w1, self.w1)
        }
    }
}

/// How [`resize`] computes an output value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Interp {
    /// Copy the nearest input (exact).
    Nearest,
    /// QDQ form, as ONNX Runtime runs it (`DequantizeLinear`, its float `Resize`,
    /// `QuantizeLinear`), operation for operation: each corner dequantized `(x − x_zp)·x_scale`,
    /// the float formula of [`super::float::resize_linear`] (weights `0.5`, `0.5` where both
    /// taps are one pixel, products summed left to right), then `v / y_scale` rounded half
    /// to even, `+ y_zp`, clamped to `[lo, hi]` (a `Relu`/`Clip` before the quantization).
    Linear {
        x_zp: i32,
        x_scale: f32,
        y_zp: i32,
        y_scale: f32,
        lo: i8,
        hi: i8,
    },
    /// ONNX Runtime's integer `Resize` (QOperator form, the stored values themselves, same
    /// quantization): weights of 10 fractional bits a tap ([`Tap::weight_s10`]), the four
    /// products summed in `i32` and divided by 2^20 truncating toward zero; `floor` for `uint8`
    /// tensors (stored here as `x ^ 0x80`: ORT's truncation of non-negative values is a floor,
    /// and the weights sum to exactly 2^20, so the shift by 128 passes through).
    Raw { floor: bool },
}

/// Channels the QDQ linear resize computes as one fixed-length vector (16 `f32`: one
/// AVX-512 register).
const LANES: usize = 16;

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
                match mode {
                    Interp::Nearest => dst.copy_from_slice(&x[p00..p00 + c]),
                    Interp::Raw { floor } => {
                        // ONNX Runtime's integer weights: 10 fractional bits a tap, their
                        // products 20 bits, summing to exactly 2^20.
                        let (dx, dy) = (tx.weight_s10(), ty.weight_s10());
                        let (w00, w01) = ((1024 - dx) * (1024 - dy), dx * (1024 - dy));
                        let (w10, w11) = ((1024 - dx) * dy, dx * dy);
                        // The four corners as slices of `c`: no per-element bounds checks,
                        // so the channel loop vectorises.
                        let (a, b) = (&x[p00..p00 + c], &x[p01..p01 + c]);
                        let (e, f) = (&x[p10..p10 + c], &x[p11..p11 + c]);
                        let corners = a.iter().zip(b).zip(e.iter().zip(f));
                        for (d, ((a, b), (e, f))) in dst.iter_mut().zip(corners) {
                            let v = |q: &i8| i32::from(*q);
                            let sum = w00 * v(a) + w01 * v(b) + w10 * v(e) + w11 * v(f);
                            // |sum| <= 128 · 2^20: the quotient is in -128..=127.
                            *d = if floor { sum >> 20 } else { sum / (1 << 20) } as i8;
                        }
                    }
                    Interp::Linear {
                        x_zp,
                        x_scale,
                        y_zp,
                        y_scale,
                        lo,
                        hi,
                    } => {
                        let ((wx0, wx1), (wy0, wy1)) = (tx.weights(), ty.weights());
                        let (w00, w01, w10, w11) = (wx0 * wy0, wx1 * wy0, wx0 * wy1, wx1 * wy1);
                        let v = |q: i8| (i32::from(q) - x_zp) as f32 * x_scale;
                        let one = |a: i8, b: i8, e: i8, f: i8| {
                            let r = w00 * v(a) + w01 * v(b) + w10 * v(e) + w11 * v(f);
                            requant_f32_or(r / y_scale, y_zp, lo, hi, lo)
                        };
                        if c < LANES {
                            for ch in 0..c {
                                dst[ch] = one(x[p00 + ch], x[p01 + ch], x[p10 + ch], x[p11 + ch]);
                            }
                        } else {
                            // Whole vectors of LANES channels; the last one ends at `c` and
                            // overlaps the one before (its channels computed twice, the same
                            // bytes), so no channel goes through a scalar tail.
                            let mut from = 0;
                            loop {
                                let at = from.min(c - LANES);
                                let corner = |p: usize| -> [i8; LANES] {
                                    let mut r = [0i8; LANES];
                                    r.copy_from_slice(&x[p + at..p + at + LANES]);
                                    r
                                };
                                let (a, b, e, f) = (corner(p00), corner(p01), corner(p10), corner(p11));
                                let mut o = [0i8; LANES];
                                for i in 0..LANES {
                                    o[i] = one(a[i], b[i], e[i], f[i]);
                                }
                                dst[at..at + LANES].copy_from_slice(&o);
                                if at + LANES >= c {
                                    break;
                                }
                                from += LANES;
                            }
                        }
                    }
                }
                o += c;
            }
        }
    }
}

/// Where each output element of a padded tensor comes from, per dimension in memory order
/// (an ONNX `Pad`): `maps[d][o]` is the input coordinate of output coordinate `o` along
/// dimension `d`, or `-1` where the output holds the fill value. Built at load; the kernel
/// only reads it.
#[derive(Clone, Debug)]
pub(crate) struct PadGeometry {
    /// Output size of each dimension (memory order); the last is the row.
    pub out_shape: Vec<usize>,
    /// Input coordinate (or `-1`) per output coordinate, per dimension.
    pub maps: Vec<Vec<i32>>,
    /// Input stride of each dimension, in bytes (the last is `elem`: rows are contiguous).
    pub in_strides: Vec<usize>,
    /// Bytes per element.
    pub elem: usize,
    /// One element of the fill value (`elem` bytes).
    pub fill: Vec<i8>,
    /// The longest run of the last dimension copied in order: (first output element,
    /// first input element, length); the rest of a row goes element by element.
    pub run: (usize, usize, usize),
}

impl PadGeometry {
    /// Output rows (every dimension but the last).
    pub(crate) fn rows(&self) -> usize {
        self.out_shape[..self.out_shape.len().saturating_sub(1)]
            .iter()
            .product()
    }

    /// Bytes per output row.
    pub(crate) fn row_bytes(&self) -> usize {
        self.out_shape.last().copied().unwrap_or(1) * self.elem
    }
}

/// Output rows `rows` of the padded tensor `g` describes (`out` holds exactly those rows).
pub(crate) fn pad(g: &PadGeometry, input: &[i8], out: &mut [i8], rows: Range<usize>) {
    let rank = g.out_shape.len();
    let elem = g.elem;
    let row_bytes = g.row_bytes();
    let last = rank.saturating_sub(1);
    let (run_out, run_in, run_len) = g.run;
    for (r, row) in rows.zip(out.chunks_exact_mut(row_bytes.max(1))) {
        // The input offset of this row's outer coordinates, or `None` where one of them
        // is padding (the whole row is fill).
        let mut rem = r;
        let mut base = Some(0usize);
        for d in (0..last).rev() {
            let c = rem % g.out_shape[d];
            rem /= g.out_shape[d];
            let m = g.maps[d][c];
            base = base.and_then(|b| (m >= 0).then(|| b + m as usize * g.in_strides[d]));
        }
        let Some(base) = base else {
            for e in row.chunks_exact_mut(elem) {
                e.copy_from_slice(&g.fill);
            }
            continue;
        };
        // The row's elements are contiguous in the input (its stride is `elem`).
        let from = base + run_in * elem;
        row[run_out * elem..(run_out + run_len) * elem]
            .copy_from_slice(&input[from..from + run_len * elem]);
        let map = g.maps.get(last).map_or(&[0][..], Vec::as_slice);
        for (o, e) in row.chunks_exact_mut(elem).enumerate() {
            if (run_out..run_out + run_len).contains(&o) {
                continue;
            }
            match map[o] {
                m if m >= 0 => {
                    let at = base + m as usize * elem;
                    e.copy_from_slice(&input[at..at + elem]);
                }
                _ => e.copy_from_slice(&g.fill),
            }
        }
    }
}
