//! The AVX-512 VNNI kernel: `vpdpbusd`, 16 output channels × 4 taps per instruction,
//! bit-exact with the scalar kernel.
//!
//! # Contract
//!
//! - Activations are staged as `u8 = x ^ 0x80 = x + 128`; the accumulator starts at
//!   `bias − (128 + x_zp)·Σw`, so after `Σ (x + 128)·w` it holds `bias + Σ (x − x_zp)·w`;
//!   padded taps are staged as `x_zp + 128` and contribute exactly 0, as in the scalar path.
//! - Padded taps are skipped where whole tap groups are padding: a kernel row above or below
//!   the image for every pixel of an output row, and (when `in_c` is a multiple of 4, so a
//!   tap column is whole groups) a tap column left or right of the image for the pixels of a
//!   tile at an edge. The start then gets back `(128 + x_zp)·Σw` of each skipped tap
//!   (`Packed::tap_sums`), so the accumulator is the same `i32`: skipping changes no bit, only
//!   the work (ResNet-18's 7×7 maps: 18 % of a 3×3 layer's multiply-adds are padding).
//!   `vpdpbusd` does not saturate and all intermediate arithmetic is wrapping `i32`; the
//!   true value fits in `i32` ([`super::Conv2d::new`] proves it), so the result is exact.
//! - Requantization: one `f32` conversion (round to nearest even, like `acc as f32`), one
//!   `f32` multiply by the layer's multiplier, a clamp to the output range (equivalent to
//!   the scalar clamp after rounding because both bounds are integers) and `cvtps2dq` under
//!   the default MXCSR rounding (round half to even, like `round_ties_even`), then `+ y_zp`.
//!   Four whole blocks of 16 channels whose products `acc · mult` provably stay below
//!   `2^31` (`|acc| <= |bias| + 255·Σ|w|`, checked per block group and call) are clamped on
//!   integers after the conversion instead ([`VnniOut::requant_packed64`]): the same bytes
//!   with 20 vector instructions per 64 outputs instead of 28. It shows where a pixel takes
//!   few `vpdpbusd`: ResNet-18's 7×7 stem (168 per pixel) 2–4 % faster, the whole network
//!   8.63 -> 8.57 ms (P50 medians of eight alternated runs of 200, one thread).
//! - Register blocking: up to 4 blocks of 16 output channels × up to 12 pixels per tile;
//!   the last block is masked to the layer's channels.
//! - Weights of the next block group are prefetched into L2 (`prefetcht1`, one cache line
//!   per tap group) while a group runs: a layer wider than 64 channels otherwise starts each
//!   group by streaming its weights from memory (ResNet-18's 512-channel groups: 295 KB
//!   each). Measured where the previous layers have evicted the weights (`redline model
//!   bench`, 200 runs, P50, eight runs alternated with the build before): ResNet-18 on one
//!   thread 8.57 -> 8.42 ms (medians); timed alone (`redline model profile`, weights
//!   cached), no change. Prefetching the next convolution's first group during a layer's
//!   last one, and the first group again before a second staged block, measured no
//!   further change (8.41): not kept.
//! - Output: requantized bytes, or (`i32` output, [`super::Conv2d::forward_rows_acc`]) the
//!   accumulators themselves, `bias + Σ (x − x_zp)·w`, stored before any requantization.
//!
//! # Cost
//!
//! At most `k · ⌈k·in_c/4⌉ · NP · OB` `vpdpbusd` per tile (fewer at the edges); [`super::STAGE_BYTES`] of stack per
//! call; no allocation, no lock, no panic.
//!
//! # Never
//!
//! Reads outside the stage buffer (staged rows and their zeroed slack), the packed
//! weights, `bias` or `mult`, or writes outside the requested output rows' channel slot.
//! Every `unsafe` block below names the bound it relies on; the bounds are checked with
//! `debug_assert!` where they are established.

// Register-blocked loops index several per-block arrays (accumulators, weights,
// multipliers, masks) in lockstep; index loops say that most plainly.
#![allow(clippy::needless_range_loop)]

use super::dispatch::Geom;
use super::staging::{
    stage_block, stage_elems, staged_blocks, zeroed_stage, Plan, SLACK, STAGE_BYTES,
};
use super::{ChannelSlot, Conv2d};
use std::arch::x86_64::*;
use std::ops::Range;

/// What the VNNI kernel stores: requantized bytes (`i8`) or the accumulators themselves
/// (`i32`: [`super::Conv2d::forward_rows_acc`]).
pub(super) trait VnniOutElem: Copy {
    /// The output as `i32` accumulators, when that is what this element type is.
    fn as_acc_ptr(p: *mut Self) -> Option<*mut i32>;
    /// The output as requantized bytes, when that is what this element type is.
    fn as_byte_ptr(p: *mut Self) -> Option<*mut i8>;
}

impl VnniOutElem for i8 {
    #[inline(always)]
    fn as_acc_ptr(_: *mut i8) -> Option<*mut i32> {
        None
    }
    #[inline(always)]
    fn as_byte_ptr(p: *mut i8) -> Option<*mut i8> {
        Some(p)
    }
}

impl VnniOutElem for i32 {
    #[inline(always)]
    fn as_acc_ptr(p: *mut i32) -> Option<*mut i32> {
        Some(p)
    }
    #[inline(always)]
    fn as_byte_ptr(_: *mut i32) -> Option<*mut i8> {
        None
    }
}

/// Per-call constants of the VNNI requantization (also the depthwise VNNI kernel's,
/// `onnx::kernels::depthwise_vnni`).
pub(crate) struct VnniOut {
    lo: __m512,
    hi: __m512,
    zp: __m512i,
    /// The integer clamp's bounds, `lo` and `hi` in every byte, and the zero point in
    /// every `i16` lane ([`VnniOut::requant_packed64`]).
    lo8: __m512i,
    hi8: __m512i,
    zp16: __m512i,
}

impl VnniOut {
    /// Outputs clamped to the codes `lo..=hi`, zero point `zp` (the clamp is kept relative
    /// to the zero point, before rounding: [`VnniOut::requant`]).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn new(lo: i32, hi: i32, zp: i32) -> VnniOut {
        VnniOut {
            lo: _mm512_set1_ps((lo - zp) as f32),
            hi: _mm512_set1_ps((hi - zp) as f32),
            zp: _mm512_set1_epi32(zp),
            // `lo`, `hi` and `zp` are `i8` codes (`-128..=127`) here, so the casts keep them.
            lo8: _mm512_set1_epi8(lo as i8),
            hi8: _mm512_set1_epi8(hi as i8),
            zp16: _mm512_set1_epi16(zp as i16),
        }
    }

    /// 16 accumulators requantized (the contract's steps: convert, multiply, clamp,
    /// round half to even, add the zero point), as `i32` in `[-128, 127]`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn requant(&self, acc: __m512i, mult: __m512) -> __m512i {
        let f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), mult);
        let f = _mm512_min_ps(_mm512_max_ps(f, self.lo), self.hi);
        _mm512_add_epi32(_mm512_cvtps_epi32(f), self.zp)
    }

    /// [`VnniOut::requant`] of four vectors of accumulators, stored as 64 bytes in order
    /// (as [`store_packed64`] stores them), with the clamp done on integers: 20 vector
    /// instructions instead of 28, for layers whose products `acc · mult` all stay below
    /// `2^31` in magnitude (the caller checks the bound: `vcvtps2dq` then converts without
    /// overflow). Exact: with `r = round_half_even(acc · mult)`, both give
    /// `clamp(r + zp, lo, hi)`, since clamping to integer bounds commutes with rounding;
    /// here `r` saturates to `i16` (`vpackssdw`), `zp` is added with `i16` saturation, the
    /// sum saturates to `i8` (`vpacksswb`) and is clamped to `lo..=hi` (`-128 <= lo <= hi
    /// <= 127`): each saturation only moves values that lie beyond `i8` after the zero point
    /// the same side of `lo..=hi` they already were.
    ///
    /// # Safety
    ///
    /// AVX-512 F and BW; 64 bytes writable at `out`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) unsafe fn requant_packed64(
        &self,
        out: *mut i8,
        acc: &[__m512i; 4],
        mult: &[__m512; 4],
    ) {
        let r: [__m512i; 4] = std::array::from_fn(|j| {
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), mult[j]))
        });
        let w01 = _mm512_adds_epi16(_mm512_packs_epi32(r[0], r[1]), self.zp16);
        let w23 = _mm512_adds_epi16(_mm512_packs_epi32(r[2], r[3]), self.zp16);
        let bytes = _mm512_min_epi8(
            _mm512_max_epi8(_mm512_packs_epi16(w01, w23), self.lo8),
            self.hi8,
        );
        // SAFETY: the caller's: 64 bytes at `out`.
        unsafe { store_lane_packed64(out, bytes) };
    }
}

/// The magnitude below which every product `acc · mult` of a tile lets
/// [`VnniOut::requant_packed64`] convert without overflow: `2^31` less a margin far wider
/// than the rounding of the bound's own `f32` arithmetic.
const INT_CLAMP_LIMIT: f32 = 2.0e9;

/// Four vectors of 16 `i32`, each already inside `[-128, 127]`, stored as 64 bytes in order
/// (elements `16·k ..` of `r[k]` at bytes `16·k ..`): two `vpackssdw` and a `vpacksswb`,
/// which interleave 4-byte groups within 128-bit lanes (no saturation: the values fit),
/// one `vpermd` to put the groups back, one store.
///
/// # Safety
///
/// AVX-512 F and BW; 64 bytes writable at `out`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn store_packed64(out: *mut i8, r: [__m512i; 4]) {
    let bytes = _mm512_packs_epi16(
        _mm512_packs_epi32(r[0], r[1]),
        _mm512_packs_epi32(r[2], r[3]),
    );
    // SAFETY: the caller's: 64 bytes at `out`.
    unsafe { store_lane_packed64(out, bytes) };
}

/// Stores 64 bytes packed from four vectors of 16 `i32` by `vpackssdw` and `vpacksswb`
/// (4-byte groups interleaved within 128-bit lanes) in the vectors' order: one `vpermd` puts
/// the groups back, one store.
///
/// # Safety
///
/// AVX-512 F; 64 bytes writable at `out`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store_lane_packed64(out: *mut i8, bytes: __m512i) {
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    // SAFETY: the caller's: 64 bytes at `out`.
    unsafe { _mm512_storeu_si512(out.cast(), _mm512_permutexvar_epi32(order, bytes)) };
}

/// Runs output rows `rows` of `layers` on the VNNI path into `dst`: one layer, or the
/// groups of a grouped convolution, layer `i` reading input channels
/// `g.in_view.channel_offset + i · in_c ..` and writing output channels
/// `slot.channel_offset + i · out_c ..`. The groups share one call: one stage, zeroed once,
/// each block of rows staged and run group by group.
///
/// # Safety
///
/// - The CPU supports AVX-512 F, BW, VL and VNNI.
/// - Every layer has the geometry of `g` (`in_c`, `out_c`, `k`, stride, pad, zero points,
///   ReLU), its `packed` weights were built by `Packed::new` with the VNNI layout present,
///   and its bias and multipliers have `out_c` entries; `plan` is `Plan::new(g, 1)`.
/// - `input.len() == in_h · in_w · in_view.pixel_stride` with
///   `in_view.channel_offset + layers.len() · in_c <= in_view.pixel_stride`;
///   `rows ⊆ 0..out_h`; `slot.channel_offset + layers.len() · out_c <= slot.pixel_stride`;
///   and `dst.len() == rows.len() · out_w · slot.pixel_stride`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn vnni_rows<E: VnniOutElem>(
    plan: &Plan,
    layers: &[Conv2d],
    g: &Geom,
    input: &[i8],
    dst: &mut [E],
    slot: ChannelSlot,
    rows: Range<usize>,
) {
    let kc = g.k * g.in_c;
    let g4 = kc.div_ceil(4);
    let blocks = g.out_c.div_ceil(16);
    let block_stride = g.k * g4 * 64;
    debug_assert_eq!(input.len(), g.in_h * g.in_w * g.in_view.pixel_stride);
    debug_assert!(g.in_view.channel_offset + layers.len() * g.in_c <= g.in_view.pixel_stride);
    debug_assert!(slot.channel_offset + layers.len() * g.out_c <= slot.pixel_stride);
    debug_assert_eq!(dst.len(), rows.len() * g.out_w * slot.pixel_stride);
    debug_assert_eq!(plan.esize, 1);
    // Only the part of the stage this call's blocks use, zeroed once: every byte a load
    // touches is then initialised whatever the block shape.
    let mut stage_buf = std::mem::MaybeUninit::<[u8; STAGE_BYTES]>::uninit();
    let stage = zeroed_stage(&mut stage_buf, stage_elems(plan, g, &rows));
    let zpb = (g.x_zp as u8) ^ 0x80;
    let corr = 128 + i32::from(g.x_zp);
    let yzp = i32::from(g.y_zp);
    let out = VnniOut::new(if g.relu { yzp } else { -128 }, 127, yzp);
    let px_stride = g.stride * g.in_c;
    let row_len = g.out_w * slot.pixel_stride;
    let kk = g.k * g.k;
    let corr_v = _mm512_set1_epi32(corr);
    // Padded columns are skipped tap column by tap column, which needs a tap column to be
    // whole tap groups: `in_c` a multiple of 4 (else they are multiplied, as staged).
    let cols = (g.in_c.is_multiple_of(4) && g.pad > 0).then_some(ColumnSkip {
        groups: g.in_c / 4,
        stride: g.stride,
        pad: g.pad,
        in_w: g.in_w,
    });
    for blk in staged_blocks(plan, g, &rows) {
        let blk = &blk;
        for (gi, layer) in layers.iter().enumerate() {
            let (packed, bias, mult) = (&layer.packed, &layer.bias[..], &layer.multipliers[..]);
            debug_assert!(bias.len() == g.out_c && mult.len() == g.out_c);
            debug_assert_eq!(packed.taps4.len(), blocks * block_stride);
            debug_assert_eq!(packed.wsum.len(), blocks * 16);
            debug_assert_eq!(packed.abs_wsum.len(), blocks * 16);
            debug_assert_eq!(packed.tap_sums.len(), blocks * kk * 16);
            // This group's input channels, staged as dense pixels.
            let view = ChannelSlot {
                channel_offset: g.in_view.channel_offset + gi * g.in_c,
                ..g.in_view
            };
            let gg = Geom {
                in_view: view,
                ..*g
            };
            stage_block(&gg, blk, input, stage, zpb, |x| (x as u8) ^ 0x80);
            let out_off = slot.channel_offset + gi * g.out_c;
            let npx = blk.c1 - blk.c0;
            let rh = (blk.b1 - blk.b0 - 1) * g.stride + g.k;
            debug_assert!(rh * blk.row_bytes + SLACK <= STAGE_BYTES);
            // Channel blocks outermost, then the block's output rows: one pass over a block's
            // weights serves every staged row (a wide layer's weights outgrow L2; row by row they
            // were streamed from L3 once per output row).
            let mut b = 0;
            while b < blocks {
                let ob = (blocks - b).min(4);
                // Accumulator start, multipliers and store masks of blocks b..b+ob.
                let mut init = [_mm512_setzero_si512(); 4];
                let mut mv = [_mm512_setzero_ps(); 4];
                let mut masks = [0u16; 4];
                // Lanes whose `acc · mult` provably stays below `2^31` (the integer clamp's
                // condition): `|acc| <= |bias| + 255·Σ|w|` (`|x − x_zp| <= 255`).
                let mut fits = 0xFFFFu16;
                for j in 0..ob {
                    let oc0 = (b + j) * 16;
                    let n = (g.out_c - oc0).min(16);
                    let m: u16 = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
                    masks[j] = m;
                    debug_assert!(oc0 + n <= bias.len() && oc0 + 16 <= packed.wsum.len());
                    // SAFETY: the mask `m` enables lanes `0..n` only, and `oc0 + n <=
                    // out_c == bias.len()`; `wsum` and `abs_wsum` hold `blocks · 16` values
                    // and `oc0 + 16 <= blocks · 16`.
                    let (bv, ws, aw) = unsafe {
                        (
                            _mm512_maskz_loadu_epi32(m, bias.as_ptr().add(oc0)),
                            _mm512_loadu_si512(packed.wsum.as_ptr().add(oc0) as *const __m512i),
                            _mm512_loadu_si512(packed.abs_wsum.as_ptr().add(oc0) as *const __m512i),
                        )
                    };
                    init[j] = _mm512_sub_epi32(bv, _mm512_mullo_epi32(ws, _mm512_set1_epi32(corr)));
                    // SAFETY: lanes `0..n` only, `oc0 + n <= out_c == mult.len()`.
                    mv[j] = unsafe { _mm512_maskz_loadu_ps(m, mult.as_ptr().add(oc0)) };
                    let bound = _mm512_add_ps(
                        _mm512_abs_ps(_mm512_cvtepi32_ps(bv)),
                        _mm512_mul_ps(_mm512_cvtepi32_ps(aw), _mm512_set1_ps(255.0)),
                    );
                    let prod = _mm512_mul_ps(bound, mv[j]);
                    fits &= _mm512_cmp_ps_mask::<_CMP_LT_OQ>(prod, _mm512_set1_ps(INT_CLAMP_LIMIT));
                }
                let four_full = ob == 4 && masks.iter().all(|&m| m == 0xFFFF);
                let int_clamp = four_full && fits == 0xFFFF;
                let tap_sums = &packed.tap_sums[b * kk * 16..];
                // The next block group's weights, pulled into L2 a cache line per tap group
                // while this group runs (`VnniTile::prefetch_next`).
                let next_w = if b + ob < blocks {
                    let nb = (blocks - b - ob).min(4);
                    &packed.taps4[(b + ob) * block_stride..(b + ob + nb) * block_stride]
                } else {
                    &[][..]
                };
                let pf = std::cell::Cell::new(0usize);
                for oy in blk.b0..blk.b1 {
                    let srow = &stage[(oy - blk.b0) * g.stride * blk.row_bytes..];
                    let orow = &mut dst[(oy - rows.start) * row_len..][..row_len];
                    // The kernel rows inside the image; the others are padding, skipped,
                    // and their taps' `(128 + x_zp)·Σw` added back to the start.
                    let top = oy * g.stride;
                    let ky_lo = g.pad.saturating_sub(top).min(g.k);
                    let ky_hi = (g.in_h + g.pad - top).min(g.k).max(ky_lo);
                    let mut row_init = init;
                    for ky in (0..ky_lo).chain(ky_hi..g.k) {
                        for (j, ri) in row_init.iter_mut().enumerate().take(ob) {
                            for kx in 0..g.k {
                                // SAFETY: `tap_sums` holds `blocks · k · k · 16` values
                                // from block 0; this reads block `b + j < blocks`, tap
                                // `ky · k + kx < k · k`, 16 lanes.
                                let ts = unsafe {
                                    _mm512_loadu_si512(
                                        tap_sums.as_ptr().add((j * kk + ky * g.k + kx) * 16)
                                            as *const __m512i,
                                    )
                                };
                                *ri = _mm512_add_epi32(*ri, _mm512_mullo_epi32(ts, corr_v));
                            }
                        }
                    }
                    let t = VnniTile {
                        srow,
                        row_bytes: blk.row_bytes,
                        px_stride,
                        g4,
                        k: g.k,
                        w: &packed.taps4[b * block_stride..],
                        block_stride,
                        ky: ky_lo..ky_hi,
                        cols,
                        col0: blk.c0,
                        tap_sums,
                        corr: corr_v,
                        init: &row_init,
                        mult: &mv,
                        masks: &masks,
                        four_full,
                        int_clamp,
                        out: &out,
                        next_w,
                        pf: &pf,
                    };
                    let obase = &mut orow[blk.c0 * slot.pixel_stride + out_off + b * 16..];
                    // SAFETY: `vnni_pixels`' preconditions: this CPU has the features (ours);
                    // the `npx` windows of this chunk, `k` staged rows from `srow`, lie in the
                    // stage with its zeroed slack (`Plan`/`Blocks` sizing, asserted above);
                    // `w` holds blocks `b..b + ob` (`b + ob <= blocks`), and `tap_sums` their
                    // `k · k` tap sums (asserted above); `ky_lo <= ky_hi <= k`; pixel `x`'s channels
                    // `b·16..out_c` of group `gi` start at `obase[x · pixel_stride]` inside
                    // `orow` (`out_off + out_c <= pixel_stride` by this function's contract).
                    unsafe {
                        match ob {
                            1 => vnni_pixels::<E, 1, 12>(&t, npx, obase, slot.pixel_stride),
                            2 => vnni_pixels::<E, 2, 12>(&t, npx, obase, slot.pixel_stride),
                            3 => vnni_pixels::<E, 3, 8>(&t, npx, obase, slot.pixel_stride),
                            _ => vnni_pixels::<E, 4, 6>(&t, npx, obase, slot.pixel_stride),
                        }
                    }
                }
                b += ob;
            }
        }
    }
}

/// Inputs of one VNNI tile that do not depend on the pixel.
struct VnniTile<'a> {
    /// The staged rows from this output row's first input row to the end of the stage.
    srow: &'a [u8],
    row_bytes: usize,
    px_stride: usize,
    g4: usize,
    k: usize,
    /// The packed weights from this tile's first channel block on.
    w: &'a [i8],
    block_stride: usize,
    /// The kernel rows inside the image for this output row (the others are skipped;
    /// `init` already holds what their taps would add).
    ky: Range<usize>,
    /// How padded tap columns are skipped, when they can be.
    cols: Option<ColumnSkip>,
    /// Output column of the row's pixel 0 (the staged block's first column).
    col0: usize,
    /// `[block][ky][kx][16]` tap sums from this tile's first channel block on.
    tap_sums: &'a [i32],
    /// `128 + x_zp` in every lane: what a skipped tap's `Σw` is multiplied by.
    corr: __m512i,
    init: &'a [__m512i; 4],
    mult: &'a [__m512; 4],
    masks: &'a [u16; 4],
    /// Four blocks, every lane stored: the tile packs its outputs into one 64-byte store.
    four_full: bool,
    /// With `four_full`: every `acc · mult` of the tile stays below `2^31` in magnitude, so
    /// the outputs are clamped on integers ([`VnniOut::requant_packed64`]).
    int_clamp: bool,
    out: &'a VnniOut,
    /// The weights to pull into L2 while this tile runs (the next block group's).
    next_w: &'a [i8],
    /// How far into `next_w` the prefetches have got, shared by the group's tiles.
    pf: &'a std::cell::Cell<usize>,
}

/// The geometry that says which tap columns of an output pixel fall in the padding.
#[derive(Clone, Copy)]
struct ColumnSkip {
    /// Tap groups (4 input channels each) per tap column: `in_c / 4`.
    groups: usize,
    stride: usize,
    pad: usize,
    in_w: usize,
}

impl ColumnSkip {
    /// The tap columns of output column `ox` that lie inside the image.
    #[inline(always)]
    fn inside(&self, ox: usize, k: usize) -> (usize, usize) {
        let left = ox * self.stride;
        let lo = self.pad.saturating_sub(left).min(k);
        (lo, (self.in_w + self.pad - left).min(k).max(lo))
    }
}

impl VnniTile<'_> {
    /// Prefetches the next cache line of `next_w` into L2, until all of it is.
    #[inline(always)]
    fn prefetch_next(&self) {
        let p = self.pf.get();
        if p < self.next_w.len() {
            // SAFETY: `p < next_w.len()`: the address is inside `next_w` (a prefetch never
            // faults in any case, and reads nothing the program sees).
            unsafe { _mm_prefetch::<_MM_HINT_T1>(self.next_w.as_ptr().add(p)) };
            self.pf.set(p + 64);
        }
    }

    /// One past the highest staged byte pixel `x` (of this row) reads: its last kernel row
    /// at `(k − 1) · row_bytes`, its window at `x · px_stride`, 4 bytes per tap group.
    fn read_end(&self, x: usize) -> usize {
        (self.k - 1) * self.row_bytes + x * self.px_stride + self.g4 * 4
    }
}

/// All `npx` pixels of one output row for `OB` channel blocks, `NP` pixels per tile.
///
/// # Safety
///
/// The CPU supports AVX-512 F/BW/VL/VNNI; `t.read_end(npx − 1) <= t.srow.len()`;
/// `OB · t.block_stride <= t.w.len()`; `OB · k · k · 16 <= t.tap_sums.len()`; `t.ky ⊆
/// 0..k`; and `out[x · ops + j · 16 + l]` is inside `out` for
/// every pixel `x < npx`, block `j < OB` and lane `l` set in `t.masks[j]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn vnni_pixels<E: VnniOutElem, const OB: usize, const NP: usize>(
    t: &VnniTile<'_>,
    npx: usize,
    out: &mut [E],
    ops: usize,
) {
    // Tiles as equal as possible: ⌈npx / NP⌉ of them, `npx / tiles` pixels each or one
    // more. A short remainder tile (7 = 6 + 1) loads a tap group's weights for one or two
    // pixels, more bytes per cycle than L2 delivers once a layer's weights outgrow L1;
    // 7 = 4 + 3 keeps every tile near full speed. The split changes no arithmetic.
    let tiles = npx.div_ceil(NP);
    if tiles == 0 {
        return;
    }
    let (base, extra) = (npx / tiles, npx % tiles);
    let mut x = 0;
    for i in 0..tiles {
        // `n <= NP`: `npx <= tiles · NP`, so `base <= NP`, and `base < NP` when `extra > 0`.
        let n = base + usize::from(i < extra);
        let o = &mut out[x * ops..];
        // SAFETY: pixels `x..x + n` are `< npx`, so this function's bounds cover them.
        unsafe {
            match n {
                n if n == NP => vnni_tile::<E, OB, NP>(t, x, o, ops),
                1 => vnni_tile::<E, OB, 1>(t, x, o, ops),
                2 => vnni_tile::<E, OB, 2>(t, x, o, ops),
                3 => vnni_tile::<E, OB, 3>(t, x, o, ops),
                4 => vnni_tile::<E, OB, 4>(t, x, o, ops),
                5 => vnni_tile::<E, OB, 5>(t, x, o, ops),
                6 => vnni_tile::<E, OB, 6>(t, x, o, ops),
                7 => vnni_tile::<E, OB, 7>(t, x, o, ops),
                8 => vnni_tile::<E, OB, 8>(t, x, o, ops),
                9 => vnni_tile::<E, OB, 9>(t, x, o, ops),
                10 => vnni_tile::<E, OB, 10>(t, x, o, ops),
                _ => vnni_tile::<E, OB, 11>(t, x, o, ops),
            }
        }
        x += n;
    }
}

/// `NP` consecutive output pixels starting at row pixel `x0`, `OB` blocks of 16 output
/// channels: `k · g4 · OB` weight loads, `k · g4 · NP` broadcasts, `k · g4 · NP · OB`
/// `vpdpbusd`. `out` starts at pixel `x0`'s first channel of the tile.
///
/// # Safety
///
/// The CPU supports AVX-512 F/BW/VL/VNNI; `t.read_end(x0 + NP − 1) <= t.srow.len()`;
/// `OB · t.block_stride <= t.w.len()`; `OB · k · k · 16 <= t.tap_sums.len()`; `t.ky ⊆
/// 0..k`; and `out[n · ops + j · 16 + l]` is inside `out` for
/// every `n < NP`, `j < OB` and lane `l` set in `t.masks[j]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn vnni_tile<E: VnniOutElem, const OB: usize, const NP: usize>(
    t: &VnniTile<'_>,
    x0: usize,
    out: &mut [E],
    ops: usize,
) {
    debug_assert!(t.read_end(x0 + NP - 1) <= t.srow.len());
    debug_assert!(OB * t.block_stride <= t.w.len());
    debug_assert!(OB * t.k * t.k * 16 <= t.tap_sums.len() && t.ky.end <= t.k);
    debug_assert!(
        (NP - 1) * ops + (OB - 1) * 16 + t.masks[OB - 1].count_ones() as usize <= out.len()
    );
    let mut acc = [[_mm512_setzero_si512(); OB]; NP];
    for a in acc.iter_mut() {
        for (j, v) in a.iter_mut().enumerate() {
            *v = t.init[j];
        }
    }
    let base = x0 * t.px_stride;
    // One tap group `q` of kernel row `ky` (its weights for the `OB` blocks, one broadcast
    // and `OB` `vpdpbusd` per pixel for which `$on(n)` holds).
    macro_rules! tap_group {
        ($ky:expr, $q:expr, $on:expr) => {{
            let (ky, q) = ($ky, $q);
            let arow = base + ky * t.row_bytes;
            let mut w = [_mm512_setzero_si512(); OB];
            for (j, wj) in w.iter_mut().enumerate() {
                // SAFETY: 64 bytes at `j·block_stride + ky·g4·64 + q·64`, which ends at
                // most at `OB · block_stride <= w.len()` (j < OB, ky < k, q < g4).
                *wj = unsafe {
                    _mm512_loadu_si512(
                        t.w.as_ptr().add(j * t.block_stride + (ky * t.g4 + q) * 64) as *const _
                    )
                };
            }
            for (n, an) in acc.iter_mut().enumerate() {
                if $on(n) {
                    // SAFETY: 4 bytes at `(x0 + n)·px_stride + ky·row_bytes + q·4`, which
                    // end at most at `read_end(x0 + NP − 1) <= srow.len()` (n < NP,
                    // ky < k, q < g4).
                    let a = unsafe {
                        let p = t.srow.as_ptr().add(arow + n * t.px_stride + q * 4) as *const i32;
                        _mm512_set1_epi32(p.read_unaligned())
                    };
                    for j in 0..OB {
                        an[j] = _mm512_dpbusd_epi32(an[j], a, w[j]);
                    }
                }
            }
            t.prefetch_next();
        }};
    }
    // A tile with a pixel whose window crosses the left or right edge skips the padded tap
    // columns pixel by pixel (and adds their `(128 + x_zp)·Σw` back); others run whole rows.
    let edge = t.cols.filter(|c| {
        c.inside(t.col0 + x0, t.k).0 > 0 || c.inside(t.col0 + x0 + NP - 1, t.k).1 < t.k
    });
    match edge {
        None => {
            for ky in t.ky.clone() {
                for q in 0..t.g4 {
                    tap_group!(ky, q, |_| true);
                }
            }
        }
        Some(c) => {
            let inside: [(usize, usize); NP] =
                std::array::from_fn(|n| c.inside(t.col0 + x0 + n, t.k));
            let kk = t.k * t.k;
            for ky in t.ky.clone() {
                for kx in 0..t.k {
                    let on: [bool; NP] =
                        std::array::from_fn(|n| (inside[n].0..inside[n].1).contains(&kx));
                    for q in kx * c.groups..(kx + 1) * c.groups {
                        tap_group!(ky, q, |n: usize| on[n]);
                    }
                    if on.iter().all(|&o| o) {
                        continue;
                    }
                    // The skipped tap `(ky, kx)` of the pixels outside: its `Σw` times
                    // `128 + x_zp`, which the start subtracted with every other tap's.
                    let mut ts = [_mm512_setzero_si512(); OB];
                    for (j, v) in ts.iter_mut().enumerate() {
                        // SAFETY: `tap_sums` holds `OB` blocks of `k · k · 16` values from
                        // this tile's first block (the precondition); tap `ky · k + kx <
                        // k · k`.
                        *v = unsafe {
                            _mm512_loadu_si512(
                                t.tap_sums.as_ptr().add((j * kk + ky * t.k + kx) * 16)
                                    as *const __m512i,
                            )
                        };
                        *v = _mm512_mullo_epi32(*v, t.corr);
                    }
                    for (n, an) in acc.iter_mut().enumerate() {
                        if !on[n] {
                            for j in 0..OB {
                                an[j] = _mm512_add_epi32(an[j], ts[j]);
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(p) = E::as_acc_ptr(out.as_mut_ptr()) {
        // Accumulator output: `bias + Σ (x − x_zp)·w` per lane, as the contract says the
        // accumulator holds it, stored without requantization.
        for (n, an) in acc.iter().enumerate() {
            for j in 0..OB {
                // SAFETY: stores only the lanes set in `masks[j]`, at element
                // `n·ops + j·16 + l` of `out` (an `i32` slice here), inside it by this
                // function's precondition (n < NP, j < OB).
                unsafe { _mm512_mask_storeu_epi32(p.add(n * ops + j * 16), t.masks[j], an[j]) };
            }
        }
        return;
    }
    // The byte output (the only other element type).
    let Some(out) = E::as_byte_ptr(out.as_mut_ptr()) else {
        return;
    };
    if OB == 4 && t.four_full {
        // Four full blocks: 64 contiguous output bytes per pixel. Pack the four vectors of
        // i32 (each already in [-128, 127], so neither pack saturates) to bytes with two
        // `vpackssdw` and one `vpacksswb`, put the 4-byte groups back in channel order with
        // one `vpermd` and store once: a third of the instructions of four `vpmovdb` and
        // four masked stores. The same bytes.
        if t.int_clamp {
            for (n, an) in acc.iter().enumerate() {
                let an: [__m512i; 4] = std::array::from_fn(|j| an[j]);
                // SAFETY: as below: 64 bytes at `n·ops` inside `out`.
                unsafe { t.out.requant_packed64(out.add(n * ops), &an, t.mult) };
            }
            return;
        }
        for (n, an) in acc.iter().enumerate() {
            let r: [__m512i; 4] = std::array::from_fn(|j| t.out.requant(an[j], t.mult[j]));
            // SAFETY: 64 bytes at `n·ops`: `four_full` says lanes `0..16` of blocks `0..4`
            // are all set in `masks`, so `n·ops + 3·16 + 15` is inside `out` by this function's precondition.
            unsafe { store_packed64(out.add(n * ops), r) };
        }
        return;
    }
    for (n, an) in acc.iter().enumerate() {
        for j in 0..OB {
            let b = _mm512_cvtepi32_epi8(t.out.requant(an[j], t.mult[j]));
            // SAFETY: stores only the lanes set in `masks[j]`, at `n·ops + j·16 + l`,
            // inside `out` by this function's precondition (n < NP, j < OB).
            unsafe { _mm_mask_storeu_epi8(out.add(n * ops + j * 16), t.masks[j], b) };
        }
    }
}

#[cfg(test)]
mod tests {
    kernel_tests!(crate::conv::KernelPath::Avx512Vnni);
}
