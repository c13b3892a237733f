//! The aarch64 INT8 kernels, bit-exact with the scalar kernel:
//!
//! - **`neon`** (Armv8.2-A dot product: Orin's Cortex-A78AE, Graviton 2+, Apple M1+): `sdot`
//!   by element, 4 output channels × 4 taps per instruction;
//! - **`i8mm`** (Armv8.6-A int8 matrix multiply: Neoverse V1/V2, Graviton 3+, Grace, Thor's
//!   cores; not Orin): `smmla`, a 2 pixels × 2 channels tile over 8 taps per instruction,
//!   twice the multiply-adds of an `sdot`.
//!
//! # Contract
//!
//! - Activations are staged as they are (`i8`); padded taps are staged as `x_zp`. The
//!   accumulator starts at `bias − x_zp·Σw`, so after `Σ x·w` it holds `bias + Σ (x − x_zp)·w`
//!   and a padded tap contributes exactly 0, as in the scalar path. Both instructions
//!   multiply signed bytes by signed bytes without saturation and all intermediate
//!   arithmetic is wrapping `i32`; the true value fits in `i32` ([`super::Conv2d::new`]
//!   proves it), so the result is exact.
//! - A kernel row above or below the image (padding for every pixel of the output row) is
//!   skipped, and the start gets its taps' `x_zp·Σw` back (`Packed::tap_sums`): the same
//!   accumulator, fewer multiply-adds (a 3×3 layer on a 7×7 map: 2 of 21 kernel rows).
//! - Output: requantized bytes, or (`i32` output, [`super::Conv2d::forward_rows_acc`]) those
//!   accumulators themselves, stored before any requantization ([`NeonOutElem`]).
//! - `sdot` weights: the 4-tap layout the VNNI kernel reads (`[block16][ky][g4][16 oc][4
//!   taps]`, [`super::packing`]): one tap group of a 16-channel block is four 128-bit
//!   registers, lane `l` of register `r` holding channel `4r + l`'s four taps. One 16-byte
//!   load per pixel covers four tap groups; `sdot vd.4s, vn.16b, vm.4b[i]` multiplies group
//!   `i` of the pixel by each channel's four taps.
//! - `smmla` weights: the 8-tap layout (`[block16][ky][g8][16 oc][8 taps]`): one register
//!   per channel pair (a 2×8 matrix). The activations of two pixels' 8 taps are the other
//!   2×8 matrix; the 2×2 result is unzipped into per-pixel channel order before
//!   requantization. An odd last pixel is paired with itself.
//! - A window's last load may read past its taps (up to 15 bytes for `sdot`, 7 for
//!   `smmla`), inside the stage, which is zeroed once; those bytes are never multiplied
//!   (`sdot`: lanes of absent groups are not used) or meet zero weights (`smmla`), so they
//!   never reach a sum.
//! - Requantization: `scvtf` (round to nearest even under the default FPCR, like `acc as
//!   f32`), one `fmul` by the layer's multiplier (no fused multiply-add), a clamp to the
//!   output range (equivalent to the scalar clamp after rounding because both bounds are
//!   integers), `fcvtns` (round half to even, like `round_ties_even`), `+ y_zp`, and
//!   saturating narrows to `i8` (the value is already in range).
//! - Register blocking: one block of 16 output channels × up to 4 pixels per tile: 16
//!   accumulators, plus 4 activation and 4 weight registers (`sdot`) or 2 and 8 (`smmla`),
//!   of the 32.
//!
//! # Cost
//!
//! Per tile of 4 pixels × 16 channels and kernel row: `sdot`: `16·⌈k·in_c/4⌉` instructions
//! (16 multiply-adds each), `4·⌈k·in_c/4⌉` weight and `4·⌈k·in_c/16⌉` activation loads;
//! `smmla`: `16·⌈k·in_c/8⌉` instructions (32 multiply-adds each), `8·⌈k·in_c/8⌉` weight and
//! `4·⌈k·in_c/8⌉` activation loads. [`super::STAGE_BYTES`] of stack per call; no
//! allocation, no lock, no panic.
//!
//! # Never
//!
//! Reads outside the stage buffer, the packed weights, `bias` or `mult`, or writes outside
//! the requested output rows' channel slot. Every `unsafe` block below names the bound it
//! relies on; the bounds are checked with `debug_assert!` where they are established.
//!
//! `vdotq_laneq_s32` and `vmmlaq_s32` are still unstable in Rust, so the two instructions
//! that need the extensions are written with `asm!`; everything else is stable NEON
//! intrinsics.

// Register-blocked loops index per-register arrays (accumulators, weights, multipliers) in
// lockstep; index loops say that most plainly.
#![allow(clippy::needless_range_loop)]

use super::dispatch::Geom;
use super::packing::Packed;
use super::staging::{stage_block, stage_elems, staged_blocks, zeroed_stage, Plan, STAGE_BYTES};
use super::ChannelSlot;
use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

/// Pixels per full tile.
const NP: usize = 4;

/// Which instruction a call multiplies with (one per [`super::KernelPath`] on aarch64).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `sdot` (the `dotprod` extension) on the 4-tap weights: the `neon` path.
    Dot,
    /// `smmla` (the `i8mm` extension) on the 8-tap weights: the `i8mm` path.
    I8mm,
}

/// Runs output rows `rows` of one layer on the NEON path `kind` into `dst`: the staging and
/// block loop both kernels share; the pixel loops carry each extension's target feature.
///
/// # Safety
///
/// - The CPU supports NEON and the extension `kind` needs (`dotprod` for [`Kind::Dot`],
///   `i8mm` for [`Kind::I8mm`]).
/// - `packed` was built by `Packed::new` for this layer (`in_c`, `out_c`, `k` of `g`) with
///   the weights `kind` reads (`taps4`, `taps8`) and `wsum`, and `plan` is
///   `Plan::new(g, 1)`.
/// - `bias.len() == mult.len() == g.out_c`; `input.len() == in_h · in_w · in_view.pixel_stride` with
///   `in_view.channel_offset + in_c <= in_view.pixel_stride`;
///   `rows ⊆ 0..out_h`; `slot.channel_offset + out_c <= slot.pixel_stride`; and
///   `dst.len() == rows.len() · out_w · slot.pixel_stride`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon")]
pub(super) unsafe fn neon_rows<E: NeonOutElem>(
    kind: Kind,
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
    let kc = g.k * g.in_c;
    let (g4, g8) = (kc.div_ceil(4), kc.div_ceil(8));
    let blocks = g.out_c.div_ceil(16);
    let block_stride = match kind {
        Kind::Dot => g.k * g4 * 64,
        Kind::I8mm => g.k * g8 * 128,
    };
    debug_assert_eq!(
        match kind {
            Kind::Dot => packed.taps4.len(),
            Kind::I8mm => packed.taps8.len(),
        },
        blocks * block_stride
    );
    debug_assert!(bias.len() == g.out_c && mult.len() == g.out_c);
    debug_assert_eq!(packed.wsum.len(), blocks * 16);
    debug_assert_eq!(packed.tap_sums.len(), blocks * g.k * g.k * 16);
    debug_assert_eq!(input.len(), g.in_h * g.in_w * g.in_view.pixel_stride);
    debug_assert!(g.in_view.channel_offset + g.in_c <= g.in_view.pixel_stride);
    debug_assert!(slot.channel_offset + g.out_c <= slot.pixel_stride);
    debug_assert_eq!(dst.len(), rows.len() * g.out_w * slot.pixel_stride);
    debug_assert_eq!(plan.esize, 1);
    // Only the part of the stage this call's blocks use, zeroed once: every byte a load
    // touches is then initialised whatever the block shape.
    let mut stage_buf = std::mem::MaybeUninit::<[i8; STAGE_BYTES]>::uninit();
    let stage = zeroed_stage(&mut stage_buf, stage_elems(plan, g, &rows));
    let corr = i32::from(g.x_zp);
    let yzp = i32::from(g.y_zp);
    let out = NeonOut {
        lo: vdupq_n_f32(if g.relu { 0.0 } else { (-128 - yzp) as f32 }),
        hi: vdupq_n_f32((127 - yzp) as f32),
        zp: vdupq_n_s32(yzp),
    };
    let px_stride = g.stride * g.in_c;
    let row_len = g.out_w * slot.pixel_stride;
    for blk in staged_blocks(plan, g, &rows) {
        let blk = &blk;
        stage_block(g, blk, input, stage, g.x_zp, |x| x);
        let npx = blk.c1 - blk.c0;
        for oy in blk.b0..blk.b1 {
            let srow = &stage[(oy - blk.b0) * g.stride * blk.row_bytes..];
            let orow = &mut dst[(oy - rows.start) * row_len..][..row_len];
            // The kernel rows inside the image (the others are padding for every pixel).
            let top = oy * g.stride;
            let ky_lo = g.pad.saturating_sub(top).min(g.k);
            let ky_hi = (g.in_h + g.pad - top).min(g.k).max(ky_lo);
            for b in 0..blocks {
                let oc0 = b * 16;
                let n = (g.out_c - oc0).min(16);
                // Accumulator start and multipliers of the block's 16 channels (0 past
                // `out_c`: those lanes are computed and never stored).
                let mut init = [0i32; 16];
                let mut mv = [0f32; 16];
                for l in 0..n {
                    init[l] = bias[oc0 + l].wrapping_sub(corr.wrapping_mul(packed.wsum[oc0 + l]));
                    mv[l] = mult[oc0 + l];
                    // The kernel rows in the padding are skipped: their taps' `x_zp·Σw`
                    // (which the start subtracted with the others') comes back here.
                    for ky in (0..ky_lo).chain(ky_hi..g.k) {
                        for kx in 0..g.k {
                            let ts = packed.tap_sums[(b * g.k * g.k + ky * g.k + kx) * 16 + l];
                            init[l] = init[l].wrapping_add(corr.wrapping_mul(ts));
                        }
                    }
                }
                let t = NeonTile {
                    srow,
                    row_bytes: blk.row_bytes,
                    px_stride,
                    g4,
                    g8,
                    k: g.k,
                    ky: ky_lo..ky_hi,
                    // SAFETY: each load reads 4 values at `4r`, `r < 4`, inside the array
                    // of 16.
                    mult: unsafe { std::array::from_fn(|r| vld1q_f32(mv.as_ptr().add(4 * r))) },
                    channels: n,
                    out: &out,
                };
                let obase = &mut orow[blk.c0 * slot.pixel_stride + slot.channel_offset + oc0..];
                // SAFETY: (both arms) the pixel loops' preconditions: this CPU has NEON and
                // the extension (ours); the `npx` windows of this chunk, `k` staged rows
                // from `srow`, lie in the stage (`Plan`/`Blocks` sizing: the staged rows
                // plus `SLACK` fit `STAGE_BYTES`, and a window's last load ends at most 15
                // bytes past its last staged row); `w` is this block's weights
                // (`block_stride` bytes); pixel `x`'s channels `oc0..oc0 + n` of the slot
                // start at `obase[x · pixel_stride]` inside `orow`.
                unsafe {
                    match kind {
                        Kind::Dot => {
                            // SAFETY: 4 values at `4r`, `r < 4`, inside the array of 16.
                            let init = std::array::from_fn(|r| vld1q_s32(init.as_ptr().add(4 * r)));
                            let w = &packed.taps4[b * block_stride..][..block_stride];
                            dot_pixels(&t, w, init, npx, obase, slot.pixel_stride)
                        }
                        Kind::I8mm => {
                            // Channel pair `j`'s start, as the 2×2 tile `smmla` accumulates:
                            // [pixel 0: 2j, 2j + 1, pixel 1: 2j, 2j + 1].
                            let mut pairs = [0i32; 32];
                            for j in 0..8 {
                                pairs[4 * j..4 * j + 4].copy_from_slice(&[
                                    init[2 * j],
                                    init[2 * j + 1],
                                    init[2 * j],
                                    init[2 * j + 1],
                                ]);
                            }
                            // SAFETY: 4 values at `4j`, `j < 8`, inside the array of 32.
                            let init =
                                std::array::from_fn(|j| vld1q_s32(pairs.as_ptr().add(4 * j)));
                            let w = &packed.taps8[b * block_stride..][..block_stride];
                            mm_pixels(&t, w, init, npx, obase, slot.pixel_stride)
                        }
                    }
                }
            }
        }
    }
}

/// What the NEON kernels store for one pixel's 16 accumulators: requantized bytes (`i8`)
/// or the accumulators themselves (`i32`: [`super::Conv2d::forward_rows_acc`]).
pub(super) trait NeonOutElem: Copy {
    /// Stores `t.channels` outputs of one pixel at the start of `dst`.
    fn store_pixel(t: &NeonTile<'_>, acc: &[int32x4_t; 4], dst: &mut [Self]);
}

impl NeonOutElem for i8 {
    #[inline(always)]
    fn store_pixel(t: &NeonTile<'_>, acc: &[int32x4_t; 4], dst: &mut [i8]) {
        // SAFETY: `requant_store` needs NEON, which every aarch64 target has (baseline).
        unsafe { t.requant_store(acc, dst) }
    }
}

impl NeonOutElem for i32 {
    #[inline(always)]
    fn store_pixel(t: &NeonTile<'_>, acc: &[int32x4_t; 4], dst: &mut [i32]) {
        // The accumulators `bias + Σ (x − x_zp)·w`, not requantized.
        let mut tmp = [0i32; 16];
        for (r, a) in acc.iter().enumerate() {
            // SAFETY: 4 values at `4r`, `r < 4`, inside the array of 16.
            unsafe { vst1q_s32(tmp.as_mut_ptr().add(4 * r), *a) };
        }
        dst[..t.channels].copy_from_slice(&tmp[..t.channels]);
    }
}

/// Per-call constants of the requantization.
struct NeonOut {
    lo: float32x4_t,
    hi: float32x4_t,
    zp: int32x4_t,
}

/// Inputs of one tile that do not depend on the pixel.
pub(super) struct NeonTile<'a> {
    /// The staged rows from this output row's first input row to the end of the stage.
    srow: &'a [i8],
    row_bytes: usize,
    px_stride: usize,
    g4: usize,
    g8: usize,
    k: usize,
    /// The kernel rows inside the image for this output row (`⊆ 0..k`): the others are
    /// skipped, and the start already holds what their taps would add.
    ky: Range<usize>,
    mult: [float32x4_t; 4],
    /// Output channels of this block that exist (`1..=16`).
    channels: usize,
    out: &'a NeonOut,
}

impl NeonTile<'_> {
    /// One past the highest staged byte pixel `x` (of this row) loads on the `sdot` path:
    /// its last kernel row at `(k − 1) · row_bytes`, its window at `x · px_stride`, 16
    /// bytes per 4 groups of 4 taps.
    fn dot_read_end(&self, x: usize) -> usize {
        (self.k - 1) * self.row_bytes + x * self.px_stride + self.g4.div_ceil(4) * 16
    }

    /// The same on the `smmla` path: 8 bytes per group of 8 taps.
    fn mm_read_end(&self, x: usize) -> usize {
        (self.k - 1) * self.row_bytes + x * self.px_stride + self.g8 * 8
    }

    /// Requantizes one pixel's 16 accumulators (4 registers of 4 channels) and stores its
    /// `channels` bytes at the start of `dst`.
    #[inline]
    #[target_feature(enable = "neon")]
    fn requant_store(&self, acc: &[int32x4_t; 4], dst: &mut [i8]) {
        let mut r32 = [vdupq_n_s32(0); 4];
        for r in 0..4 {
            let f = vmulq_f32(vcvtq_f32_s32(acc[r]), self.mult[r]);
            let f = vminq_f32(vmaxq_f32(f, self.out.lo), self.out.hi);
            r32[r] = vaddq_s32(vcvtnq_s32_f32(f), self.out.zp);
        }
        let h0 = vcombine_s16(vqmovn_s32(r32[0]), vqmovn_s32(r32[1]));
        let h1 = vcombine_s16(vqmovn_s32(r32[2]), vqmovn_s32(r32[3]));
        let bytes = vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1));
        let dst = &mut dst[..self.channels];
        if self.channels == 16 {
            // SAFETY: 16 bytes into `dst`, which holds exactly 16.
            unsafe { vst1q_s8(dst.as_mut_ptr(), bytes) };
        } else {
            let mut tmp = [0i8; 16];
            // SAFETY: 16 bytes into `tmp`, which holds 16.
            unsafe { vst1q_s8(tmp.as_mut_ptr(), bytes) };
            dst.copy_from_slice(&tmp[..self.channels]);
        }
    }
}

/// All `npx` pixels of one output row for one block of 16 channels on `sdot`, [`NP`] per
/// tile.
///
/// # Safety
///
/// The CPU supports NEON and dotprod; `t.dot_read_end(npx − 1) <= t.srow.len()`;
/// `w.len() == k · g4 · 64`; and `out[x · ops + l]` is inside `out` for every pixel
/// `x < npx` and channel `l < t.channels`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_pixels<E: NeonOutElem>(
    t: &NeonTile<'_>,
    w: &[i8],
    init: [int32x4_t; 4],
    npx: usize,
    out: &mut [E],
    ops: usize,
) {
    let mut x = 0;
    while x + NP <= npx {
        // SAFETY: pixels `x..x + NP` are `< npx`, so this function's bounds cover them.
        unsafe { dot_tile::<E, NP>(t, w, init, x, &mut out[x * ops..], ops) };
        x += NP;
    }
    if x == npx {
        return;
    }
    let o = &mut out[x * ops..];
    // SAFETY: pixels `x..npx` (fewer than `NP`), covered by this function's bounds.
    unsafe {
        match npx - x {
            1 => dot_tile::<E, 1>(t, w, init, x, o, ops),
            2 => dot_tile::<E, 2>(t, w, init, x, o, ops),
            _ => dot_tile::<E, 3>(t, w, init, x, o, ops),
        }
    }
}

/// `acc += w · a.group[L]`, lane by lane: `sdot vd.4s, vn.16b, vm.4b[L]` (each of the 4
/// lanes adds the dot product of its 4 weight bytes with the 4 bytes of group `L` of `a`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_lane<const L: i32>(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction (no memory, no flags, no stack); the function's
    // `dotprod` feature is what makes it exist, and callers only run on CPUs that have it.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc += a · bᵀ` on 2×8 `i8` matrices: `smmla vd.4s, vn.16b, vm.16b` (lane `2i + j`
/// adds the dot product of row `i` of `a`, bytes `8i..8i + 8`, with row `j` of `b`).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction (no memory, no flags, no stack); the function's
    // `i8mm` feature is what makes it exist, and callers only run on CPUs that have it.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Tap group `q4 + L` of kernel row `wrow` into every accumulator of the tile.
///
/// # Safety
///
/// `wrow + (q4 + L + 1) · 64 <= w.len()`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_group<const L: i32, const P: usize>(
    w: &[i8],
    acc: &mut [[int32x4_t; 4]; P],
    a: &[int8x16_t; P],
    wrow: usize,
    q4: usize,
) {
    let wp = wrow + (q4 + L as usize) * 64;
    debug_assert!(wp + 64 <= w.len());
    // SAFETY: 64 bytes at `wp`, inside `w` by this function's precondition.
    let wv: [int8x16_t; 4] =
        unsafe { std::array::from_fn(|r| vld1q_s8(w.as_ptr().add(wp + 16 * r))) };
    for n in 0..P {
        for r in 0..4 {
            acc[n][r] = sdot_lane::<L>(acc[n][r], wv[r], a[n]);
        }
    }
}

/// `P` consecutive output pixels starting at row pixel `x0`, the block's 16 channels, on
/// `sdot`. `out` starts at pixel `x0`'s first channel of the block.
///
/// # Safety
///
/// The CPU supports NEON and dotprod; `t.dot_read_end(x0 + P − 1) <= t.srow.len()`;
/// `w.len() == k · g4 · 64`; and `out[n · ops + l]` is inside `out` for every `n < P` and
/// `l < t.channels`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_tile<E: NeonOutElem, const P: usize>(
    t: &NeonTile<'_>,
    w: &[i8],
    init: [int32x4_t; 4],
    x0: usize,
    out: &mut [E],
    ops: usize,
) {
    debug_assert!(t.dot_read_end(x0 + P - 1) <= t.srow.len());
    debug_assert_eq!(w.len(), t.k * t.g4 * 64);
    debug_assert!((P - 1) * ops + t.channels <= out.len());
    let mut acc = [init; P];
    let base = x0 * t.px_stride;
    for ky in t.ky.clone() {
        let arow = base + ky * t.row_bytes;
        let wrow = ky * t.g4 * 64;
        let mut q4 = 0;
        while q4 < t.g4 {
            // SAFETY: 16 bytes at `(x0 + n)·px_stride + ky·row_bytes + q4·4` with `q4 <
            // g4` a multiple of 4: they end at most at `dot_read_end(x0 + P − 1) <=
            // srow.len()` (n < P, ky < k).
            let a: [int8x16_t; P] = unsafe {
                std::array::from_fn(|n| {
                    vld1q_s8(t.srow.as_ptr().add(arow + n * t.px_stride + q4 * 4))
                })
            };
            let left = t.g4 - q4;
            // SAFETY: (each call) group `q4 + L < g4` of kernel row `ky < k`, so its 64
            // bytes end at most at `k · g4 · 64 == w.len()`.
            unsafe {
                dot_group::<0, P>(w, &mut acc, &a, wrow, q4);
                if left > 1 {
                    dot_group::<1, P>(w, &mut acc, &a, wrow, q4);
                }
                if left > 2 {
                    dot_group::<2, P>(w, &mut acc, &a, wrow, q4);
                }
                if left > 3 {
                    dot_group::<3, P>(w, &mut acc, &a, wrow, q4);
                }
            }
            q4 += 4;
        }
    }
    for (n, an) in acc.iter().enumerate() {
        E::store_pixel(t, an, &mut out[n * ops..]);
    }
}

/// All `npx` pixels of one output row for one block of 16 channels on `smmla`, 4 pixels
/// (2 pairs) per tile; an odd last pixel is paired with itself and its twin discarded.
///
/// # Safety
///
/// The CPU supports NEON and i8mm; `t.mm_read_end(npx − 1) <= t.srow.len()`;
/// `w.len() == k · g8 · 128`; and `out[x · ops + l]` is inside `out` for every pixel
/// `x < npx` and channel `l < t.channels`.
#[target_feature(enable = "neon,i8mm")]
unsafe fn mm_pixels<E: NeonOutElem>(
    t: &NeonTile<'_>,
    w: &[i8],
    init: [int32x4_t; 8],
    npx: usize,
    out: &mut [E],
    ops: usize,
) {
    let mut x = 0;
    while x + 4 <= npx {
        // SAFETY: pixels `x..x + 4` are `< npx`, so this function's bounds cover them.
        unsafe { mm_tile::<E, 2>(t, w, init, x, 4, &mut out[x * ops..], ops) };
        x += 4;
    }
    if x == npx {
        return;
    }
    let rem = npx - x;
    let o = &mut out[x * ops..];
    // SAFETY: pixels `x..npx` (`rem < 4` of them), covered by this function's bounds.
    unsafe {
        if rem <= 2 {
            mm_tile::<E, 1>(t, w, init, x, rem, o, ops);
        } else {
            mm_tile::<E, 2>(t, w, init, x, rem, o, ops);
        }
    }
}

/// `np` (`2·PP − 1` or `2·PP`) consecutive output pixels starting at row pixel `x0`, the
/// block's 16 channels, on `smmla`: `PP` pixel pairs × 8 channel pairs of 2×2 tiles.
/// `out` starts at pixel `x0`'s first channel of the block.
///
/// # Safety
///
/// The CPU supports NEON and i8mm; `t.mm_read_end(x0 + np − 1) <= t.srow.len()`;
/// `w.len() == k · g8 · 128`; and `out[n · ops + l]` is inside `out` for every `n < np`
/// and `l < t.channels`.
#[inline]
#[target_feature(enable = "neon,i8mm")]
unsafe fn mm_tile<E: NeonOutElem, const PP: usize>(
    t: &NeonTile<'_>,
    w: &[i8],
    init: [int32x4_t; 8],
    x0: usize,
    np: usize,
    out: &mut [E],
    ops: usize,
) {
    debug_assert!(np + 1 >= 2 * PP && np <= 2 * PP);
    debug_assert!(t.mm_read_end(x0 + np - 1) <= t.srow.len());
    debug_assert_eq!(w.len(), t.k * t.g8 * 128);
    debug_assert!((np - 1) * ops + t.channels <= out.len());
    let mut acc = [init; PP];
    // Row offsets of each pair's two pixels (a missing second pixel repeats the first).
    let second = |i: usize| (2 * i + 1).min(np - 1);
    let base = x0 * t.px_stride;
    for ky in t.ky.clone() {
        let arow = base + ky * t.row_bytes;
        let wrow = ky * t.g8 * 128;
        for q in 0..t.g8 {
            // SAFETY: 8 bytes at `(x0 + p)·px_stride + ky·row_bytes + q·8` for pixels `p <
            // np`: they end at most at `mm_read_end(x0 + np − 1) <= srow.len()`.
            let a: [int8x16_t; PP] = unsafe {
                std::array::from_fn(|i| {
                    let at = |p: usize| t.srow.as_ptr().add(arow + p * t.px_stride + q * 8);
                    vcombine_s8(vld1_s8(at(2 * i)), vld1_s8(at(second(i))))
                })
            };
            // SAFETY: 128 bytes at `wrow + q·128`, `q < g8`, `ky < k`: inside `w`.
            let wv: [int8x16_t; 8] = unsafe {
                std::array::from_fn(|j| vld1q_s8(w.as_ptr().add(wrow + q * 128 + 16 * j)))
            };
            for i in 0..PP {
                for j in 0..8 {
                    acc[i][j] = smmla(acc[i][j], a[i], wv[j]);
                }
            }
        }
    }
    for (i, ai) in acc.iter().enumerate() {
        for half in 0..2 {
            let n = 2 * i + half;
            if n >= np {
                break;
            }
            // Pixel `half` of the pair: channels 4r..4r + 4 are the `half` rows of channel
            // pairs 2r and 2r + 1.
            let px: [int32x4_t; 4] = std::array::from_fn(|r| {
                let (lo, hi) = (
                    vreinterpretq_s64_s32(ai[2 * r]),
                    vreinterpretq_s64_s32(ai[2 * r + 1]),
                );
                vreinterpretq_s32_s64(if half == 0 {
                    vzip1q_s64(lo, hi)
                } else {
                    vzip2q_s64(lo, hi)
                })
            });
            E::store_pixel(t, &px, &mut out[n * ops..]);
        }
    }
}

#[cfg(test)]
mod dot_tests {
    kernel_tests!(crate::conv::KernelPath::NeonDot);
}

#[cfg(test)]
mod i8mm_tests {
    kernel_tests!(crate::conv::KernelPath::NeonI8mm);
}
