//! The AVX2 kernel for 7-bit weights: `vpmaddubsw` (32 u8×s8 products into 16 `i16` pair
//! sums) then `vpmaddwd` by ones into `i32`, 8 output channels × 4 taps per step,
//! bit-exact with the scalar kernel, about twice the MACs per instruction of the `i16` path.
//!
//! # Contract
//!
//! - Used by the AVX2 path only for layers whose weights all lie in `-64..=64` (what
//!   ONNX Runtime's `reduce_range` quantization writes, recommended for CPUs without VNNI):
//!   then every `vpmaddubsw` pair sum `x₁w₁ + x₂w₂` with `x ∈ 0..=255` is at most
//!   `255 · 128 = 32 640` in magnitude, inside `i16`, so the saturating instruction never
//!   saturates and the result is exact. Layers with wider weights take the `i16` kernel.
//! - Activations are staged as `u8 = x + 128` (padding: `x_zp + 128`); the accumulator
//!   starts at `bias − (128 + x_zp)·Σw`, as in the VNNI kernel, whose packed weights
//!   (`[block16][ky][g4][16 oc][4 taps]`) it reads, 8 channels (one 32-byte half) at a time.
//! - Requantization: the same four steps as the other SIMD kernels.
//!
//! # Cost
//!
//! `k · ⌈k·in_c/4⌉ · NP · OB` (`vpmaddubsw` + `vpmaddwd` + `vpaddd`) per tile;
//! [`super::STAGE_BYTES`] of stack per call; no allocation, no lock, no panic.
//!
//! # Never
//!
//! Reads outside the stage buffer (staged rows and their zeroed slack) or the packed
//! weights, or writes outside the requested output rows' channel slot. Every `unsafe`
//! block names the bound it relies on.

// Register-blocked loops index several per-block arrays (accumulators, weights,
// multipliers, lane counts) in lockstep; index loops say that most plainly.
#![allow(clippy::needless_range_loop)]

use super::avx2::Avx2OutElem;
use super::dispatch::Geom;
use super::packing::Packed;
use super::staging::{
    stage_block, stage_elems, staged_blocks, zeroed_stage, Plan, SLACK, STAGE_BYTES,
};
use super::ChannelSlot;
use std::arch::x86_64::*;
use std::ops::Range;

/// Runs output rows `rows` of one 7-bit-weight layer on AVX2 into `dst`.
///
/// # Safety
///
/// - The CPU supports AVX2.
/// - `packed` was built by `Packed::new` for this layer (`in_c`, `out_c`, `k` of `g`) with
///   its 4-tap (VNNI-layout) weights present and `seven_bit` set, and `plan` is
///   `Plan::new(g, 1)`.
/// - `bias.len() == mult.len() == g.out_c`; `input.len() == in_h · in_w · in_view.pixel_stride` with
///   `in_view.channel_offset + in_c <= in_view.pixel_stride`;
///   `rows ⊆ 0..out_h`; `slot.channel_offset + out_c <= slot.pixel_stride`; and
///   `dst.len() == rows.len() · out_w · slot.pixel_stride`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn avx2_u7_rows<E: Avx2OutElem>(
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
    let mut stage_buf = std::mem::MaybeUninit::<[u8; STAGE_BYTES]>::uninit();
    let stage = zeroed_stage(&mut stage_buf, stage_elems(plan, g, &rows));
    let kc = g.k * g.in_c;
    let g4 = kc.div_ceil(4);
    let blocks = g.out_c.div_ceil(8);
    let block16_stride = g.k * g4 * 64; // bytes per block of 16 channels
    debug_assert!(bias.len() == g.out_c && mult.len() == g.out_c);
    debug_assert_eq!(packed.taps4.len(), g.out_c.div_ceil(16) * block16_stride);
    debug_assert_eq!(packed.wsum.len(), g.out_c.div_ceil(16) * 16);
    debug_assert!(packed.seven_bit);
    debug_assert_eq!(input.len(), g.in_h * g.in_w * g.in_view.pixel_stride);
    debug_assert!(g.in_view.channel_offset + g.in_c <= g.in_view.pixel_stride);
    debug_assert!(slot.channel_offset + g.out_c <= slot.pixel_stride);
    debug_assert_eq!(dst.len(), rows.len() * g.out_w * slot.pixel_stride);
    debug_assert_eq!(plan.esize, 1);
    let zpb = (g.x_zp as u8) ^ 0x80;
    let corr = 128 + i32::from(g.x_zp);
    let yzp = i32::from(g.y_zp);
    let lo = _mm256_set1_ps(if g.relu { 0.0 } else { (-128 - yzp) as f32 });
    let hi = _mm256_set1_ps((127 - yzp) as f32);
    let zp = _mm256_set1_epi32(yzp);
    let px_stride = g.stride * g.in_c;
    let row_len = g.out_w * slot.pixel_stride;
    // Offset of 8-channel block `b` in the 16-channel packed layout: its 32-byte half.
    let wofs = |b: usize| (b / 2) * block16_stride + (b % 2) * 32;
    for blk in staged_blocks(plan, g, &rows) {
        let blk = &blk;
        stage_block(g, blk, input, stage, zpb, |x| (x as u8) ^ 0x80);
        let row_elems = blk.row_bytes;
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
                    for l in 0..n {
                        bb[l] = bias[oc0 + l] - corr * packed.wsum[oc0 + l];
                    }
                    mm[..n].copy_from_slice(&mult[oc0..oc0 + n]);
                    // SAFETY: `bb` and `mm` are 8-lane arrays, exactly one 256-bit load each.
                    unsafe {
                        init[j] = _mm256_loadu_si256(bb.as_ptr() as *const __m256i);
                        mv[j] = _mm256_loadu_ps(mm.as_ptr());
                    }
                }
                let t = U7Tile {
                    srow,
                    row_elems,
                    px_stride,
                    g4,
                    k: g.k,
                    w: &packed.taps4,
                    wofs: [wofs(b), wofs(b + ob - 1)],
                    init: &init,
                    mult: &mv,
                    valid: &valid,
                    lo,
                    hi,
                    zp,
                };
                let obase = &mut orow[blk.c0 * slot.pixel_stride + slot.channel_offset + b * 8..];
                // SAFETY: `u7_pixels`' preconditions: this CPU has AVX2 (ours); the `npx`
                // windows of this chunk, `k` staged rows from `srow`, lie in the stage with
                // its zeroed slack (`Plan`/`Blocks` sizing, asserted above); the blocks'
                // weight offsets `wofs` plus `(k − 1)·g4·64 + (g4 − 1)·64 + 32` lie inside
                // `packed.taps4` (blocks `< out_c.div_ceil(8)`, the packed size asserted
                // above); pixel `x`'s channels `b·8..out_c` of the slot start at
                // `obase[x · pixel_stride]` inside `orow`.
                unsafe {
                    if ob == 1 {
                        u7_pixels::<E, 1, 8>(&t, npx, obase, slot.pixel_stride);
                    } else {
                        u7_pixels::<E, 2, 4>(&t, npx, obase, slot.pixel_stride);
                    }
                }
                b += ob;
            }
        }
    }
}

/// Inputs of one 7-bit tile that do not depend on the pixel.
struct U7Tile<'a> {
    /// The staged rows from this output row's first input row to the end of the stage.
    srow: &'a [u8],
    row_elems: usize,
    px_stride: usize,
    g4: usize,
    k: usize,
    /// All packed weights (4-tap layout).
    w: &'a [i8],
    /// Offset of each of the tile's (up to 2) 8-channel blocks in `w`.
    wofs: [usize; 2],
    init: &'a [__m256i; 2],
    mult: &'a [__m256; 2],
    valid: &'a [usize; 2],
    lo: __m256,
    hi: __m256,
    zp: __m256i,
}

impl U7Tile<'_> {
    /// One past the highest staged byte pixel `x` (of this row) reads: its last kernel row
    /// at `(k − 1) · row_elems`, its window at `x · px_stride`, 4 bytes per tap group.
    fn read_end(&self, x: usize) -> usize {
        (self.k - 1) * self.row_elems + x * self.px_stride + self.g4 * 4
    }
}

/// All `npx` pixels of one output row for `OB` channel blocks, `NP` pixels per tile.
///
/// # Safety
///
/// The CPU supports AVX2; `t.read_end(npx − 1) <= t.srow.len()`; for every block `j <
/// OB`, `t.wofs[j] + (k − 1)·g4·64 + (g4 − 1)·64 + 32 <= t.w.len()`; and
/// `out[x · ops + j · 8 + l]` is inside `out` for every pixel `x < npx`, block `j < OB`
/// and lane `l < t.valid[j]`.
#[target_feature(enable = "avx2")]
unsafe fn u7_pixels<E: Avx2OutElem, const OB: usize, const NP: usize>(
    t: &U7Tile<'_>,
    npx: usize,
    out: &mut [E],
    ops: usize,
) {
    let mut x = 0;
    while x + NP <= npx {
        // SAFETY: pixels `x..x + NP` are `< npx`, so this function's bounds cover them.
        unsafe { u7_tile::<E, OB, NP>(t, x, &mut out[x * ops..], ops) };
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
            1 => u7_tile::<E, OB, 1>(t, x, o, ops),
            2 => u7_tile::<E, OB, 2>(t, x, o, ops),
            3 => u7_tile::<E, OB, 3>(t, x, o, ops),
            4 => u7_tile::<E, OB, 4>(t, x, o, ops),
            5 => u7_tile::<E, OB, 5>(t, x, o, ops),
            6 => u7_tile::<E, OB, 6>(t, x, o, ops),
            _ => u7_tile::<E, OB, 7>(t, x, o, ops),
        }
    }
}

/// `NP` output pixels starting at row pixel `x0` × `OB` blocks of 8 output channels with
/// `vpmaddubsw` + `vpmaddwd` + `vpaddd`. `out` starts at pixel `x0`'s first channel of the
/// tile.
///
/// # Safety
///
/// The CPU supports AVX2; `t.read_end(x0 + NP − 1) <= t.srow.len()`; for every block
/// `j < OB`, `t.wofs[j] + (k − 1)·g4·64 + (g4 − 1)·64 + 32 <= t.w.len()`; and
/// `out[n · ops + j · 8 + l]` is inside `out` for every `n < NP`, `j < OB` and
/// `l < t.valid[j]`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn u7_tile<E: Avx2OutElem, const OB: usize, const NP: usize>(
    t: &U7Tile<'_>,
    x0: usize,
    out: &mut [E],
    ops: usize,
) {
    debug_assert!(t.read_end(x0 + NP - 1) <= t.srow.len());
    debug_assert!((0..OB).all(|j| t.wofs[j] + (t.k * t.g4 - 1) * 64 + 32 <= t.w.len()));
    debug_assert!((NP - 1) * ops + (OB - 1) * 8 + t.valid[OB - 1] <= out.len());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); OB]; NP];
    for a in acc.iter_mut() {
        for (j, v) in a.iter_mut().enumerate() {
            *v = t.init[j];
        }
    }
    let base = x0 * t.px_stride;
    for ky in 0..t.k {
        let arow = base + ky * t.row_elems;
        let wrow = ky * t.g4 * 64;
        for q in 0..t.g4 {
            let mut w = [_mm256_setzero_si256(); OB];
            for (j, wj) in w.iter_mut().enumerate() {
                // SAFETY: 32 bytes at `wofs[j] + ky·g4·64 + q·64`, which end at most at
                // `wofs[j] + (k − 1)·g4·64 + (g4 − 1)·64 + 32 <= w.len()` (ky < k, q < g4).
                *wj = unsafe {
                    _mm256_loadu_si256(t.w.as_ptr().add(t.wofs[j] + wrow + q * 64) as *const _)
                };
            }
            for (n, an) in acc.iter_mut().enumerate() {
                // SAFETY: 4 bytes at `(x0 + n)·px_stride + ky·row_elems + q·4`, which end
                // at most at `read_end(x0 + NP − 1) <= srow.len()` (n < NP, ky < k, q < g4).
                let a = unsafe {
                    let p = t.srow.as_ptr().add(arow + n * t.px_stride + q * 4) as *const i32;
                    _mm256_set1_epi32(p.read_unaligned())
                };
                for j in 0..OB {
                    // Exact: |x₁w₁ + x₂w₂| <= 255 · 128 < 2^15 for 7-bit weights.
                    let pairs = _mm256_maddubs_epi16(a, w[j]);
                    an[j] = _mm256_add_epi32(an[j], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
    }
    let q = super::avx2::Requant8 {
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

#[cfg(test)]
mod tests {
    seven_bit_kernel_tests!(crate::conv::KernelPath::Avx2);

    #[test]
    fn only_weights_within_seven_bits_take_this_kernel() {
        use super::super::packing::Packed;
        let narrow: Vec<i8> = (0..5 * 3 * 3 * 7).map(|i| ((i % 129) - 64) as i8).collect();
        let p = Packed::new(&narrow, 5, 7, 3);
        assert!(p.seven_bit);
        if crate::conv::KernelPath::Avx2.is_available() {
            assert!(
                !p.taps4.is_empty(),
                "7-bit layers get the 4-tap layout on AVX2"
            );
        }
        // One weight of 65 (or -65) sends the layer back to the i16 kernel.
        for bad in [65i8, -65] {
            let mut wide = narrow.clone();
            wide[17] = bad;
            assert!(!Packed::new(&wide, 5, 7, 3).seven_bit, "{bad}");
        }
    }
}
