//! How a SIMD call stages its input: the call is cut into blocks (column chunks, then row
//! blocks) whose input rows are copied, converted (VNNI: `x ^ 0x80`; AVX2: `x − x_zp` as
//! `i16`) and padded (with the value that contributes 0) into one fixed stack buffer of
//! [`STAGE_BYTES`], so the kernels' inner loops have no border logic.
//!
//! Contract: every element a kernel reads lies inside the staged rows or the [`SLACK`]
//! zeroed elements after them (the last tap group of a window may read up to 3 bytes past
//! it, which meet zero weights). A layer whose kernel window does not fit is refused
//! ([`Plan::new`] returns `None`). The blocks come in a fixed order and each output row is
//! computed from its own staged rows only, so the split never changes a result.
//!
//! The input may be a channel view ([`Geom::in_view`]): the layer's `in_c` channels out of
//! wider pixels (one group of a grouped convolution); staging gathers them, so the kernels
//! see dense pixels either way.
//!
//! Cost: one pass over the input rows per block; no allocation. Never: reads outside
//! `input` or writes outside the stage buffer it is given.

use super::dispatch::Geom;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use std::ops::Range;

/// Bytes of stack each SIMD `forward_rows` call uses to stage input rows.
pub const STAGE_BYTES: usize = 32 * 1024;

/// Bytes after the staged rows kept initialised (zero) so that the last group's overread
/// stays inside initialised memory.
pub(super) const SLACK: usize = 64;

/// How a call is cut into staged blocks.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(super) struct Plan {
    /// Output columns per column chunk.
    pub(super) cols: usize,
    /// Element size of the stage (1: VNNI bytes, 2: AVX2 `i16`).
    pub(super) esize: usize,
}

impl Plan {
    /// The plan for `g` with `esize`-byte staged elements, or `None` when one kernel
    /// window (`k` rows of `k·in_c` elements) does not fit the stage: the caller then runs
    /// the scalar kernel.
    pub(super) fn new(g: &Geom, esize: usize) -> Option<Plan> {
        let px = g.in_c.checked_mul(esize)?;
        let budget = (STAGE_BYTES - SLACK) / px.checked_mul(g.k)?;
        if budget < g.k {
            return None;
        }
        let cols = ((budget - g.k) / g.stride + 1).min(g.out_w).max(1);
        Some(Plan { cols, esize })
    }
}

/// One staged block: input columns for output columns `c0..c1`, input rows for output
/// rows `b0..b1`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) struct Block {
    pub(super) c0: usize,
    pub(super) c1: usize,
    pub(super) b0: usize,
    pub(super) b1: usize,
    /// Bytes of one staged row.
    pub(super) row_bytes: usize,
}

/// The staged blocks of a call, in a fixed order (column chunks, then row blocks).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) struct Blocks<'a> {
    plan: &'a Plan,
    g: &'a Geom,
    rows: Range<usize>,
    c0: usize,
    b0: usize,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn staged_blocks<'a>(plan: &'a Plan, g: &'a Geom, rows: &Range<usize>) -> Blocks<'a> {
    Blocks {
        plan,
        g,
        rows: rows.clone(),
        c0: 0,
        b0: rows.start,
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl Iterator for Blocks<'_> {
    type Item = Block;

    fn next(&mut self) -> Option<Block> {
        let g = self.g;
        if self.rows.is_empty() || self.c0 >= g.out_w {
            return None;
        }
        let c0 = self.c0;
        let c1 = (c0 + self.plan.cols).min(g.out_w);
        let cw = (c1 - c0 - 1) * g.stride + g.k;
        let row_bytes = cw * g.in_c * self.plan.esize;
        let rows_fit = (STAGE_BYTES - SLACK) / row_bytes; // >= k by Plan::new
        let per_block = (rows_fit - g.k) / g.stride + 1;
        let b0 = self.b0;
        let b1 = (b0 + per_block).min(self.rows.end);
        if b1 >= self.rows.end {
            self.b0 = self.rows.start;
            self.c0 = c1;
        } else {
            self.b0 = b1;
        }
        Some(Block {
            c0,
            c1,
            b0,
            b1,
            row_bytes,
        })
    }
}

/// Elements of the stage the blocks of a call over `rows` use: the largest block's staged
/// rows and the [`SLACK`] after them (at most `STAGE_BYTES / esize`, by [`Plan::new`]).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn stage_elems(plan: &Plan, g: &Geom, rows: &Range<usize>) -> usize {
    staged_blocks(plan, g, rows)
        .map(|b| {
            let rh = (b.b1 - b.b0 - 1) * g.stride + g.k;
            (rh * b.row_bytes + SLACK) / plan.esize
        })
        .max()
        .unwrap_or(0)
}

/// The integer types a stage holds: all-zero bytes are a valid value of each.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) trait StageElem: Copy + Default {}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl StageElem for u8 {}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl StageElem for i8 {}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl StageElem for i16 {}

/// The first `len` elements of `buf` (at most `N`), zeroed: the stage one call uses. The
/// rest of `buf` stays uninitialised and is never referenced, so a call over a few narrow
/// rows (one group of a grouped convolution) does not pay for clearing the whole buffer.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn zeroed_stage<T: StageElem, const N: usize>(
    buf: &mut std::mem::MaybeUninit<[T; N]>,
    len: usize,
) -> &mut [T] {
    let len = len.min(N);
    let p = buf.as_mut_ptr().cast::<T>();
    // SAFETY: `p` points to `N` elements of `T` (the array `buf` holds) and `len <= N`;
    // `T` is an integer type (`StageElem`) for which all-zero bytes are a valid value, so
    // the `len` elements are initialised before the slice over them is made; the slice
    // borrows `buf` mutably for its lifetime.
    unsafe {
        std::ptr::write_bytes(p, 0, len);
        std::slice::from_raw_parts_mut(p, len)
    }
}

/// Writes the staged rows of `blk` into `stage` with `conv(x)` for inside values and
/// `pad` for padded ones, then zeroes `SLACK` elements after them. Returns nothing; all
/// indices stay inside `stage` (sized by the plan).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
pub(super) fn stage_block<T: Copy + Default>(
    g: &Geom,
    blk: &Block,
    input: &[i8],
    stage: &mut [T],
    pad: T,
    conv: impl Fn(i8) -> T,
) {
    let (s, p, k, c) = (g.stride, g.pad, g.k, g.in_c);
    let cw = (blk.c1 - blk.c0 - 1) * s + k;
    let rh = (blk.b1 - blk.b0 - 1) * s + k;
    let row_elems = cw * c;
    // Staged column j is input column c0*s + j - p.
    let first = blk.c0 * s;
    let left = p.saturating_sub(first).min(cw);
    let ix0 = (first + left).saturating_sub(p);
    let inside = g.in_w.saturating_sub(ix0).min(cw - left);
    for r in 0..rh {
        let row = &mut stage[r * row_elems..(r + 1) * row_elems];
        let iy = blk.b0 * s + r;
        if iy < p || iy - p >= g.in_h {
            row.fill(pad);
            continue;
        }
        let iy = iy - p;
        row[..left * c].fill(pad);
        let dst = &mut row[left * c..(left + inside) * c];
        let (stride, off) = (g.in_view.pixel_stride, g.in_view.channel_offset);
        let src0 = (iy * g.in_w + ix0) * stride + off;
        if stride == c {
            // Dense pixels: one contiguous run.
            for (d, &x) in dst.iter_mut().zip(&input[src0..][..inside * c]) {
                *d = conv(x);
            }
        } else {
            // A channel view: `c` channels out of every `stride`, converted 8 at a time
            // (fixed-size chunks the compiler vectorises; a loop over a runtime `c` of 8
            // or 16 stayed scalar, and was most of a grouped layer's time).
            for (j, d) in dst.chunks_exact_mut(c).enumerate() {
                let (s8, s_rest) = input[src0 + j * stride..][..c].as_chunks::<8>();
                let (d8, d_rest) = d.as_chunks_mut::<8>();
                for (d, s) in d8.iter_mut().zip(s8) {
                    *d = s.map(&conv);
                }
                for (d, &x) in d_rest.iter_mut().zip(s_rest) {
                    *d = conv(x);
                }
            }
        }
        row[(left + inside) * c..].fill(pad);
    }
    let end = rh * row_elems;
    let slack = SLACK / std::mem::size_of::<T>();
    stage[end..end + slack].fill(T::default());
}
