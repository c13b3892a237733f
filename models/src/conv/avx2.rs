//! The AVX2 kernel: `i16` products with `vpmaddwd`, 8 output channels per register,
//! bit-exact with the scalar kernel.
//!
//! # Contract
//!
//! - Activations are staged as `i16 = x − x_zp` (padding 0) and multiplied with
//!   `vpmaddwd` (`_mm256_madd_epi16`, exact: each pair sum is at most `2·255·128`), added
//!   in wrapping `i32` onto the bias; the true sum fits in `i32` ([`super::Conv2d::new`]
//!   proves it), so the result is exact. The saturating `vpmaddubsw` is never used.
//! - Requantization: the same four steps as the VNNI kernel (`f32` conversion, multiply,
//!   clamp, `cvtps2dq` rounding half to even, `+ y_zp`), on 8 lanes; only the layer's
//!   channels are written back.
//! - Register blocking: up to 2 blocks of 8 output channels × up to 8 pixels per tile.
//!
//! # Cost
//!
//! `k · ⌈k·in_c/2⌉ · NP · OB` `vpmaddwd` per tile; [`super::STAGE_BYTES`] of stack per
//! call; no allocation, no lock, no panic.
//!
//! # Never
//!
//! Reads outside the stage buffer (staged rows and their zeroed slack) or the packed
//! weights, or writes outside the requested output rows' channel slot. Every `unsafe`
//! block below names the bound it relies on; the bounds are checked with `debug_assert!`
//! where they are established.

// Register-blocked loops index several per-block arrays (accumulators, weights,
// multipliers, lane counts) in lockstep; index loops say that most plainly.
#![allow(clippy::needless_range_loop)]

use super::dispatch::Geom;
use super::packing::Packed;
use super::staging::{
    stage_block, stage_elems, staged_blocks, zeroed_stage, Plan, SLACK, STAGE_BYTES,
};
use super::ChannelSlot;
use std::arch::x86_64::*;
use std::ops::Range;

/// Runs output rows `rows` of one layer on the AVX2 path into `dst`.
///
/// # Safety
///
/// - The CPU supports AVX2.
/// - `packed` was built by `Packed::new` for this layer (`in_c`, `out_c`, `k` of `g`) with
///   its AVX2 weights present, and `plan` is `Plan::new(g, 2)`.
/// - `bias.len() == mult.len() == g.out_c`; `input.len() == in_h · in_w · in_view.pixel_stride` with
///   `in_view.channel_offset + in_c <= in_view.pixel_stride`;
///   `rows ⊆ 0..out_h`; `slot.channel_offset + out_c <= slot.pixel_stride`; and
///   `dst.len() == rows.len() · out_w · slot.pixel_stride`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn avx2_rows<E: Avx2OutElem>(
    plan: &Plan,
    packed: &Packed,
    g: &Geom,
    bias: &[i32],
    mult: &[f32],
    input: &[i8],
    dst: &mut [E],
    slot: ChannelSlot,
    rows: Range<usize>,
) {
    let mut stage_buf = std::mem::MaybeUninit::<[i16; STAGE_BYTES / 2]>::uninit();
    let stage = zeroed_stage(&mut stage_buf, stage_elems(plan, g, &rows));
    let kc = g.k * g.in_c;
    let g2 = kc.div_ceil(2);
    let blocks = g.out_c.div_ceil(8);
    let block_stride = g.k * g2 * 16; // in i16
    debug_assert!(bias.len() == g.out_c && mult.len() == g.out_c);
    debug_assert_eq!(packed.avx2.len(), blocks * block_stride);
    debug_assert_eq!(input.len(), g.in_h * g.in_w * g.in_view.pixel_stride);
    debug_assert!(g.in_view.channel_offset + g.in_c <= g.in_view.pixel_stride);
    debug_assert!(slot.channel_offset + g.out_c <= slot.pixel_stride);
    debug_assert_eq!(dst.len(), rows.len() * g.out_w * slot.pixel_stride);
    debug_assert_eq!(plan.esize, 2);
    let xzp = i16::from(g.x_zp);
    let yzp = i32::from(g.y_zp);
    let lo = _mm256_set1_ps(if g.relu { 0.0 } else { (-128 - yzp) as f32 });
    let hi = _mm256_set1_ps((127 - yzp) as f32);
    let zp = _mm256_set1_epi32(yzp);
    let px_stride = g.stride * g.in_c; // in i16
    let row_len = g.out_w * slot.pixel_stride;
    for blk in staged_blocks(plan, g, &rows) {
        let blk = &blk;
        stage_block(g, blk, input, stage, 0i16, |x| i16::from(x) - xzp);
        let row_elems = blk.row_bytes / 2;
        let npx = blk.c1 - blk.c0;
        let rh = (blk.b1 - blk.b0 - 1) * g.stride + g.k;
        debug_assert!(rh * blk.row_bytes + SLACK <= STAGE_BYTES);
        for oy in blk.b0..blk.b1 {
            let srow = &stage[(oy - blk.b0) * g.stride * row_elems..];
            let orow = &mut dst[(oy - rows.start) * row_len..][..row_len];
            let mut b = 0;
            while b < blocks {
                let ob = (blocks - b).min(2);
                let mut init = [_mm256_setzero_si256(); 2];
                let mut mv = [_mm256_setzero_ps(); 2];
                let mut valid = [0usize; 2];
                for j in 0..ob {
                    let oc0 = (b + j) * 8;
                    let n = (g.out_c - oc0).min(8);
                    valid[j] = n;
                    let mut bb = [0i32; 8];
                    let mut mm = [0f32; 8];
                    bb[..n].copy_from_slice(&bias[oc0..oc0 + n]);
                    mm[..n].copy_from_slice(&mult[oc0..oc0 + n]);
                    // SAFETY: `bb` and `mm` are 8-lane arrays, exactly one 256-bit load each.
                    unsafe {
                        init[j] = _mm256_loadu_si256(bb.as_ptr() as *const __m256i);
                        mv[j] = _mm256_loadu_ps(mm.as_ptr());
                    }
                }
                let t = Avx2Tile {
                    srow,
                    row_elems,
                    px_stride,
                    g2,
                    k: g.k,
                    w: &packed.avx2[b * block_stride..],
                    block_stride,
                    init: &init,
                    mult: &mv,
                    valid: &valid,
                    lo,
                    hi,
                    zp,
                };
                let obase = &mut orow[blk.c0 * slot.pixel_stride + slot.channel_offset + b * 8..];
                // SAFETY: `avx2_pixels`' preconditions: this CPU has AVX2 (ours); the `npx`
                // windows of this chunk, `k` staged rows from `srow`, lie in the stage with
                // its zeroed slack (`Plan`/`Blocks` sizing, asserted above); `w` holds
                // blocks `b..b + ob` (`b + ob <= blocks`); pixel `x`'s channels
                // `b·8..out_c` of the slot start at `obase[x · pixel_stride]` inside `orow`.
                unsafe {
                    if ob == 1 {
                        avx2_pixels::<E, 1, 8>(&t, npx, obase, slot.pixel_stride);
                    } else {
                        avx2_pixels::<E, 2, 4>(&t, npx, obase, slot.pixel_stride);
                    }
                }
                b += ob;
            }
        }
    }
}

/// Inputs of one AVX2 tile that do not depend on the pixel.
struct Avx2Tile<'a> {
    /// The staged rows from this output row's first input row to the end of the stage.
    srow: &'a [i16],
    row_elems: usize,
    px_stride: usize,
    g2: usize,
    k: usize,
    /// The packed weights from this tile's first channel block on.
    w: &'a [i16],
    block_stride: usize,
    init: &'a [__m256i; 2],
    mult: &'a [__m256; 2],
    valid: &'a [usize; 2],
    lo: __m256,
    hi: __m256,
    zp: __m256i,
}

impl Avx2Tile<'_> {
    /// One past the highest staged element pixel `x` (of this row) reads: its last kernel
    /// row at `(k − 1) · row_elems`, its window at `x · px_stride`, 2 values per tap pair.
    fn read_end(&self, x: usize) -> usize {
        (self.k - 1) * self.row_elems + x * self.px_stride + self.g2 * 2
    }
}

/// All `npx` pixels of one output row for `OB` channel blocks, `NP` pixels per tile.
///
/// # Safety
///
/// The CPU supports AVX2; `t.read_end(npx − 1) <= t.srow.len()`;
/// `OB · t.block_stride <= t.w.len()`; and `out[x · ops + j · 8 + l]` is inside `out` for
/// every pixel `x < npx`, block `j < OB` and lane `l < t.valid[j]`.
#[target_feature(enable = "avx2")]
unsafe fn avx2_pixels<E: Avx2OutElem, const OB: usize, const NP: usize>(
    t: &Avx2Tile<'_>,
    npx: usize,
    out: &mut [E],
    ops: usize,
) {
    let mut x = 0;
    while x + NP <= npx {
        // SAFETY: pixels `x..x + NP` are `< npx`, so this function's bounds cover them.
        unsafe { avx2_tile::<E, OB, NP>(t, x, &mut out[x * ops..], ops) };
        x += NP;
    }
    let rem = npx - x;
    if rem == 0 {
        return;
    }
    let o = &mut out[x * ops..];
    // SAFETY: pixels `x..npx` (`rem < NP` of them), covered by this function's bounds.
    unsafe {
        match rem {
            1 => avx2_tile::<E, OB, 1>(t, x, o, ops),
            2 => avx2_tile::<E, OB, 2>(t, x, o, ops),
            3 => avx2_tile::<E, OB, 3>(t, x, o, ops),
            4 => avx2_tile::<E, OB, 4>(t, x, o, ops),
            5 => avx2_tile::<E, OB, 5>(t, x, o, ops),
            6 => avx2_tile::<E, OB, 6>(t, x, o, ops),
            _ => avx2_tile::<E, OB, 7>(t, x, o, ops),
        }
    }
}

/// `NP` output pixels starting at row pixel `x0` × `OB` blocks of 8 output channels with
/// `vpmaddwd` + `vpaddd`. `out` starts at pixel `x0`'s first channel of the tile.
///
/// # Safety
///
/// The CPU supports AVX2; `t.read_end(x0 + NP − 1) <= t.srow.len()`;
/// `OB · t.block_stride <= t.w.len()`; and `out[n · ops + j · 8 + l]` is inside `out` for
/// every `n < NP`, `j < OB` and `l < t.valid[j]`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn avx2_tile<E: Avx2OutElem, const OB: usize, const NP: usize>(
    t: &Avx2Tile<'_>,
    x0: usize,
    out: &mut [E],
    ops: usize,
) {
    debug_assert!(t.read_end(x0 + NP - 1) <= t.srow.len());
    debug_assert!(OB * t.block_stride <= t.w.len());
    debug_assert!((NP - 1) * ops + (OB - 1) * 8 + t.valid[OB - 1] <= out.len());
    let mut acc = [[_mm256_setzero_si256(); OB]; NP];
    for a in acc.iter_mut() {
        for (j, v) in a.iter_mut().enumerate() {
            *v = t.init[j];
        }
    }
    let base = x0 * t.px_stride;
    for ky in 0..t.k {
        let arow = base + ky * t.row_elems;
        let wrow = ky * t.g2 * 16;
        for q in 0..t.g2 {
            let mut w = [_mm256_setzero_si256(); OB];
            for (j, wj) in w.iter_mut().enumerate() {
                // SAFETY: 16 values at `j·block_stride + ky·g2·16 + q·16`, which end at
                // most at `OB · block_stride <= w.len()` (j < OB, ky < k, q < g2).
                *wj = unsafe {
                    _mm256_loadu_si256(
                        t.w.as_ptr().add(j * t.block_stride + wrow + q * 16) as *const _
                    )
                };
            }
            for (n, an) in acc.iter_mut().enumerate() {
                // SAFETY: 2 values at `(x0 + n)·px_stride + ky·row_elems + q·2`, which end
                // at most at `read_end(x0 + NP − 1) <= srow.len()` (n < NP, ky < k, q < g2).
                let a = unsafe {
                    let p = t.srow.as_ptr().add(arow + n * t.px_stride + q * 2) as *const i32;
                    _mm256_set1_epi32(p.read_unaligned())
                };
                for j in 0..OB {
                    an[j] = _mm256_add_epi32(an[j], _mm256_madd_epi16(a, w[j]));
                }
            }
        }
    }
    let q = Requant8 {
        lo: t.lo,
        hi: t.hi,
        zp: t.zp,
    };
    for (n, an) in acc.iter().enumerate() {
        for j in 0..OB {
            let o = n * ops + j * 8;
            // SAFETY: the CPU supports AVX2 (this function's precondition).
            unsafe { E::store8(&q, an[j], t.mult[j], &mut out[o..o + t.valid[j]]) };
        }
    }
}

/// What the AVX2 kernels store for 8 accumulator lanes: requantized bytes (`i8`) or the
/// accumulators themselves (`i32`: [`super::Conv2d::forward_rows_acc`]).
pub(super) trait Avx2OutElem: Copy {
    /// Stores the first `out.len()` (at most 8) lanes of `acc`.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2.
    unsafe fn store8(q: &Requant8, acc: __m256i, mult: __m256, out: &mut [Self]);
}

impl Avx2OutElem for i8 {
    #[inline(always)]
    unsafe fn store8(q: &Requant8, acc: __m256i, mult: __m256, out: &mut [i8]) {
        // SAFETY: the CPU supports AVX2 (this function's precondition).
        unsafe { q.store(acc, mult, out) }
    }
}

impl Avx2OutElem for i32 {
    #[inline(always)]
    unsafe fn store8(_: &Requant8, acc: __m256i, _: __m256, out: &mut [i32]) {
        // The accumulators `bias + Σ (x − x_zp)·w`, not requantized.
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` is an 8-lane `i32` array, exactly one 256-bit store; the CPU
        // supports AVX2 (this function's precondition).
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, acc) };
        for (d, &v) in out.iter_mut().zip(&lanes) {
            *d = v;
        }
    }
}

/// The requantization of 8 `i32` accumulator lanes shared by the AVX2 kernels: `f32`
/// conversion, multiply, clamp to the output range, `cvtps2dq` (round half to even), `+ y_zp`.
#[derive(Clone, Copy)]
pub(super) struct Requant8 {
    pub(super) lo: __m256,
    pub(super) hi: __m256,
    pub(super) zp: __m256i,
}

impl Requant8 {
    /// Requantizes `acc` with the per-lane multipliers `mult` and writes the first
    /// `out.len()` (at most 8) lanes as `i8`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn store(&self, acc: __m256i, mult: __m256, out: &mut [i8]) {
        let f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), mult);
        let f = _mm256_min_ps(_mm256_max_ps(f, self.lo), self.hi);
        let r = _mm256_add_epi32(_mm256_cvtps_epi32(f), self.zp);
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` is an 8-lane `i32` array, exactly one 256-bit store.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, r) };
        // Values are in -128..=127 after the clamp and the zero point.
        for (d, &v) in out.iter_mut().zip(&lanes) {
            *d = v as i8;
        }
    }
}

#[cfg(test)]
mod tests {
    kernel_tests!(crate::conv::KernelPath::Avx2);
}
