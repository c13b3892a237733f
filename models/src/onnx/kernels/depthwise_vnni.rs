//! The AVX-512 VNNI depthwise convolution: `vpdpbusd` on four taps of one channel at a time.
//!
//! # Contract
//!
//! - The same `i32` sums as the tap-by-tap loop, `bias + Σ (x − x_zp)·w`, so the same bytes
//!   (or accumulators) for every input: integer addition in any order is exact, and the
//!   requantization is the scalar one's steps (convert, multiply by the channel's
//!   multiplier, clamp to the zero-point-relative output range, round half to even under
//!   the default MXCSR, add the zero point; the clamp before rounding equals the scalar clamp
//!   after it because both bounds are integers). Test
//!   `depthwise_matches_the_tap_by_tap_loop_on_every_width`.
//! - The input is read as `u8 = x ^ 0x80 = x + 128`; a tap outside the image reads `x_zp`
//!   (a 64-byte vector of it), so every pixel sums all `kh · kw` taps and
//!   `Σ (x + 128)·w − (128 + x_zp)·Σ w` is its exact sum (the accumulators start at
//!   `bias − (128 + x_zp)·Σ w`, [`Block::start`]). `|Σ| ≤ 64 · 255 · 128`: no `i32`
//!   overflow.
//! - Four taps' bytes of one channel are interleaved in registers (two rounds of byte and
//!   word unpacking of four 64-channel loads), which leaves the 64 channels of a block in
//!   the order `16·lane + 4·j + i` across the four accumulators `j`; the weights and the
//!   starting sums are packed in that order at load ([`DepthwiseVnni::new`]). For bytes,
//!   each accumulator is requantized with its lanes' multipliers (packed in the same order)
//!   and the four are packed `i32 → i16 → i8`, which puts them back in channel order: one
//!   (masked) 64-byte store ([`packed_bytes`]). The accumulator output (a float-output
//!   convolution's) takes a 4×4 transpose of 128-bit lanes instead.
//! - A block of fewer than 64 channels (the last one) loads and stores through byte masks:
//!   nothing outside the input's and the output's channels is read or written. When it has
//!   at most 32 channels, two neighbouring pixels share its vectors (bytes `0..32` the
//!   first pixel's, `32..64` the second's: [`DepthwiseVnni::pair`]), so a 32-channel layer
//!   fills them.
//!
//! # Cost
//!
//! Per output pixel and 64 channels, for each group of four taps: four loads, four `xor`,
//! eight unpacks and four `vpdpbusd` (256 multiply-adds); weights are loaded once for two
//! neighbouring pixels. Then, for bytes, four requantizations, three packs and one store.
//! Padding taps cost as much as inside ones. No allocation, no lock, no panic.
//!
//! # Never
//!
//! Reads outside `input` or the packed weights, or writes outside the requested rows of
//! `out`. Every `unsafe` block names the bound it relies on.

use super::{ConvOut, GeneralConv};
use crate::conv::VnniOut;
use std::arch::x86_64::*;
use std::ops::Range;

/// Most groups of four taps: [`super::DEPTHWISE_TAPS_MAX`] taps.
const GROUPS_MAX: usize = super::DEPTHWISE_TAPS_MAX.div_ceil(4);

/// One block of 64 lanes: which channel each lane computes, packed.
#[derive(Clone, Debug)]
struct Block {
    /// `weights[(g · 4 + j) · 64 + 16·l + 4·i + t]` = the weight of tap `4·g + t` of lane
    /// `16·l + 4·j + i`'s channel (0 past the taps, or for a lane with no channel).
    weights: Vec<i8>,
    /// The accumulators' starting values in the same order (`[j][16·l + 4·i]`): `bias −
    /// (128 + x_zp) · Σ_taps w` of the lane's channel.
    start: [i32; 64],
    /// The lanes' multipliers in the accumulators' order (as `start`): the byte store
    /// requantizes before it packs ([`packed_bytes`]).
    mult: [f32; 64],
}

impl Block {
    /// The block whose lane `v` computes channel `channel(v)` (`None`: an idle lane).
    fn new(conv: &GeneralConv, groups: usize, channel: impl Fn(usize) -> Option<usize>) -> Block {
        let taps = conv.win.kh * conv.win.kw;
        let w = |v: usize, t: usize| -> i8 {
            match channel(v) {
                Some(ch) if t < taps => conv.weights[ch * taps + t],
                _ => 0,
            }
        };
        let mut weights = vec![0i8; groups * 256];
        let (mut start, mut mult) = ([0i32; 64], [0f32; 64]);
        let pad = (128 + conv.x_zp) as i64;
        for j in 0..4 {
            for l in 0..4 {
                for i in 0..4 {
                    let v = 16 * l + 4 * j + i;
                    for g in 0..groups {
                        for t in 0..4 {
                            weights[(g * 4 + j) * 64 + 16 * l + 4 * i + t] = w(v, 4 * g + t);
                        }
                    }
                    if let Some(ch) = channel(v) {
                        let sum: i64 = (0..taps).map(|t| i64::from(w(v, t))).sum();
                        // Wrapping is exact: the final sum fits i32 (the lowering proves it).
                        start[j * 16 + 4 * l + i] = (i64::from(conv.bias[ch]) - pad * sum) as i32;
                        mult[j * 16 + 4 * l + i] = conv.multipliers[ch];
                    }
                }
            }
        }
        Block {
            weights,
            start,
            mult,
        }
    }
}

/// A depthwise convolution's weights and per-channel constants in the VNNI kernel's layout.
#[derive(Clone, Debug)]
pub(crate) struct DepthwiseVnni {
    /// Groups of four taps (`⌈kh · kw / 4⌉`; the last one's missing taps have weight 0).
    groups: usize,
    /// Channels `64·b ..` (the last block possibly partial).
    blocks: Vec<Block>,
    /// The last block for two pixels at once, when it has at most 32 channels: lanes
    /// `q·32 + k` compute its channel `k` of pixel `q`.
    pair: Option<Block>,
    /// `64 · blocks` bytes of `x_zp`: what a tap in the padding reads.
    zp_row: Vec<i8>,
}

impl DepthwiseVnni {
    /// The packed form of depthwise `conv` (one channel per group, at most
    /// [`super::DEPTHWISE_TAPS_MAX`] taps), or `None` when this CPU cannot run the dense
    /// VNNI kernel (AVX-512 F, BW, VL and VNNI).
    pub(crate) fn new(conv: &GeneralConv) -> Option<DepthwiseVnni> {
        // The dense VNNI kernel's detection (F, BW, VL and VNNI: a superset of ours).
        if !crate::conv::KernelPath::Avx512Vnni.is_available() {
            return None;
        }
        let (c, taps) = (conv.in_c, conv.win.kh * conv.win.kw);
        let groups = taps.div_ceil(4);
        let nb = c.div_ceil(64);
        let blocks = (0..nb)
            .map(|b| Block::new(conv, groups, |v| (64 * b + v < c).then_some(64 * b + v)))
            .collect();
        let (last, rest) = (64 * (nb - 1), c - 64 * (nb - 1));
        let pair = (rest <= 32)
            .then(|| Block::new(conv, groups, |v| (v % 32 < rest).then_some(last + v % 32)));
        Some(DepthwiseVnni {
            groups,
            blocks,
            pair,
            zp_row: vec![conv.x_zp as i8; nb * 64],
        })
    }
}

/// Output rows `rows` (over `batch · out_h`) of depthwise `conv` with its packed form `pk`,
/// NHWC `input` into `out` (those rows only).
///
/// # Safety
///
/// The CPU supports AVX-512 F, BW and VNNI (`pk` exists only where it does);
/// `input.len() == batch · in_h · in_w · c`, `rows ⊆ 0..batch · out_h` and
/// `out.len() >= rows.len() · out_w · c` (the caller checks them).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn depthwise_vnni_rows<O: ConvOut>(
    conv: &GeneralConv,
    pk: &DepthwiseVnni,
    input: &[i8],
    out: &mut [O],
    rows: Range<usize>,
) {
    let w = &conv.win;
    let c = conv.in_c;
    let img = w.in_h * w.in_w * c;
    let slots = 4 * pk.groups;
    let q = VnniOut::new(i32::from(conv.lo), i32::from(conv.hi), conv.y_zp);
    // Output columns whose windows lie inside the image's columns.
    let Range { start: lo, end: hi } = w.inside_columns();
    let zp = pk.zp_row.as_ptr();
    let mut o = 0;
    for r in rows {
        let (b, oy) = (r / w.out_h, r % w.out_h);
        let x = &input[b * img..(b + 1) * img];
        let line = &mut out[o..o + w.out_w * c];
        o += w.out_w * c;
        // The row's tap slots: offset from a window's first column, and whether the tap's
        // row is in the image (else, and past the last tap, the slot reads the zero-point
        // row).
        let mut row = [(0usize, false); 4 * GROUPS_MAX];
        for ky in 0..w.kh {
            let iy = (oy * w.sh + ky * w.dh) as isize - w.pt as isize;
            if iy >= 0 && (iy as usize) < w.in_h {
                for kx in 0..w.kw {
                    row[ky * w.kw + kx] = ((iy as usize * w.in_w + kx * w.dw) * c, true);
                }
            }
        }
        let row = &row[..slots];
        let mut ox = 0;
        while ox < w.out_w {
            if ox >= lo && ox + 2 <= hi {
                let origins = [(ox * w.sw - w.pl) * c, ((ox + 1) * w.sw - w.pl) * c];
                // SAFETY: an inside slot of these pixels reads `origin + off .. + c <=
                // x.len()` (its row and column are in the image); pixels `ox, ox + 1 <
                // hi <= out_w` have their values in `line`.
                unsafe {
                    pixels::<2, O>(
                        pk,
                        x.as_ptr(),
                        zp,
                        row,
                        origins,
                        line[ox * c..].as_mut_ptr(),
                        c,
                        &q,
                    )
                };
                ox += 2;
                continue;
            }
            // A pixel at the left or right edge (or the last one): its own slots.
            let mut edge = [(0usize, false); 4 * GROUPS_MAX];
            for (t, &(off, inside)) in row.iter().enumerate().take(w.kh * w.kw) {
                let ix = (ox * w.sw + (t % w.kw) * w.dw) as isize - w.pl as isize;
                if inside && ix >= 0 && (ix as usize) < w.in_w {
                    edge[t] = (off + ix as usize * c - (t % w.kw) * w.dw * c, true);
                }
            }
            // SAFETY: as above, origin 0 and absolute offsets.
            unsafe {
                pixels::<1, O>(
                    pk,
                    x.as_ptr(),
                    zp,
                    &edge[..slots],
                    [0],
                    line[ox * c..].as_mut_ptr(),
                    c,
                    &q,
                )
            };
            ox += 1;
        }
    }
}

/// Every channel of `P` output pixels of one row (windows at `x + origins[p]`; tap slots
/// `slots`: offset from the origin and whether the tap is in the image, else it reads the
/// zero-point row `zp`), pixel `p` stored at `dst + p · c`. With two pixels, a last block
/// of at most 32 channels runs once for both ([`DepthwiseVnni::pair`]).
///
/// # Safety
///
/// AVX-512 F, BW and VNNI; an inside slot has `c` readable bytes at `x + origin + off` for
/// every pixel, `zp` has `64 · blocks`; `dst` has room for `P · c` values;
/// `slots.len() == 4 · pk.groups`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn pixels<const P: usize, O: ConvOut>(
    pk: &DepthwiseVnni,
    x: *const i8,
    zp: *const i8,
    slots: &[(usize, bool)],
    origins: [usize; P],
    dst: *mut O,
    c: usize,
    q: &VnniOut,
) {
    let flip = _mm512_set1_epi8(i8::MIN);
    let nb = pk.blocks.len();
    for (b, block) in pk.blocks.iter().enumerate() {
        let cb = 64 * b;
        let n = (c - cb).min(64);
        if let (true, Some(pair)) = (P == 2 && b + 1 == nb, &pk.pair) {
            // Bytes `0..n` from the first pixel, `32..32 + n` from the second (`n <= 32`).
            let first: __mmask64 = (1u64 << n) - 1;
            let second: __mmask64 = first << 32;
            let mut acc = start(pair);
            for (wg, four) in pair.weights.chunks_exact(256).zip(slots.chunks_exact(4)) {
                let wv = group_weights(wg);
                // SAFETY: lanes `0..n` of channels `cb..cb + n <= c` behind an inside slot
                // of either pixel, or of the zero-point row; the second pixel's bytes are
                // read from 32 bytes before its channels, through lanes `32..32 + n` only
                // (masked lanes are not read; the pointer itself is never dereferenced).
                let ld = |t: usize| unsafe {
                    let (off, inside) = four[t];
                    let (a, b) = if inside {
                        (x.add(origins[0] + off), x.add(origins[P - 1] + off))
                    } else {
                        (zp, zp)
                    };
                    let v = _mm512_maskz_loadu_epi8(first, a.add(cb));
                    let v = _mm512_mask_loadu_epi8(v, second, b.add(cb).wrapping_sub(32));
                    _mm512_xor_si512(v, flip)
                };
                dot_group(&mut acc, [ld(0), ld(1), ld(2), ld(3)], &wv);
            }
            if !O::ACC {
                let bytes = packed_bytes(&acc, &pair.mult, q);
                let d = dst.cast::<i8>();
                // SAFETY: bytes `0..n` go to pixel 0's channels `cb..cb + n <= c`, bytes
                // `32..32 + n` to pixel 1's (through a pointer 32 bytes before them; masked
                // lanes are not written): inside the `2 · c` values at `dst`.
                unsafe {
                    _mm512_mask_storeu_epi8(d.wrapping_add(cb), first, bytes);
                    _mm512_mask_storeu_epi8(d.wrapping_add(c + cb).wrapping_sub(32), second, bytes);
                }
                continue;
            }
            // Lanes `16·m ..` go to pixel `m / 2`, channels `cb + 16·(m % 2) ..`.
            let count = |m: usize| n.saturating_sub(16 * (m % 2)).min(16);
            // SAFETY: pixel `m / 2 < P = 2`, channels `cb + 16·(m % 2) .. cb + n <= c`:
            // inside the `P · c` values at `dst` (`wrapping_add`: a count of 0 stores
            // nothing).
            unsafe {
                let to = std::array::from_fn(|m| dst.wrapping_add((m / 2) * c + cb + 16 * (m % 2)));
                finish(&acc, to, std::array::from_fn(count))
            };
            continue;
        }
        let load_mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
        let mut acc = [start(block); P];
        for (wg, four) in block.weights.chunks_exact(256).zip(slots.chunks_exact(4)) {
            let wv = group_weights(wg);
            for (p, acc) in acc.iter_mut().enumerate() {
                // SAFETY: lanes `0..n` of channels `cb..cb + n <= c` behind an inside slot
                // or of the zero-point row; masked lanes are not read.
                let ld = |t: usize| unsafe {
                    let (off, inside) = four[t];
                    let src = if inside { x.add(origins[p] + off) } else { zp };
                    _mm512_xor_si512(_mm512_maskz_loadu_epi8(load_mask, src.add(cb)), flip)
                };
                dot_group(acc, [ld(0), ld(1), ld(2), ld(3)], &wv);
            }
        }
        if !O::ACC {
            for (p, acc) in acc.iter().enumerate() {
                let bytes = packed_bytes(acc, &block.mult, q);
                // SAFETY: bytes `0..n` are pixel `p < P`'s channels `cb..cb + n <= c`,
                // inside the `P · c` values at `dst`; masked lanes are not written.
                unsafe {
                    _mm512_mask_storeu_epi8(dst.cast::<i8>().add(p * c + cb), load_mask, bytes)
                };
            }
            continue;
        }
        for (p, acc) in acc.iter().enumerate() {
            let count = |m: usize| n.saturating_sub(16 * m).min(16);
            // SAFETY: lanes `16·m ..` go to pixel `p < P`, channels `cb + 16·m .. cb + n <=
            // c`: inside the `P · c` values at `dst` (`wrapping_add`: a count of 0 stores
            // nothing).
            unsafe {
                let to = std::array::from_fn(|m| dst.wrapping_add(p * c + cb + 16 * m));
                finish(acc, to, std::array::from_fn(count))
            };
        }
    }
}

/// The four accumulators' starting values of `block`.
#[inline]
#[target_feature(enable = "avx512f")]
fn start(block: &Block) -> [__m512i; 4] {
    // SAFETY: `start` holds 64 values, 16 per accumulator.
    std::array::from_fn(|j| unsafe { _mm512_loadu_si512(block.start.as_ptr().add(16 * j).cast()) })
}

/// A group's four weight vectors: its 256 bytes (`Block::weights` in `chunks_exact(256)`).
#[inline]
#[target_feature(enable = "avx512f")]
fn group_weights(wg: &[i8]) -> [__m512i; 4] {
    let wg: &[i8; 256] = wg.try_into().expect("a group's weights are 256 bytes");
    // SAFETY: 64 bytes at `64·j < 256` of the 256-byte array.
    std::array::from_fn(|j| unsafe { _mm512_loadu_si512(wg.as_ptr().add(64 * j).cast()) })
}

/// Four taps `xs` (as `u8`, 64 lanes each) interleaved per lane and multiplied into `acc`
/// with the group's weights `wv`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_group(acc: &mut [__m512i; 4], xs: [__m512i; 4], wv: &[__m512i; 4]) {
    let p01l = _mm512_unpacklo_epi8(xs[0], xs[1]);
    let p01h = _mm512_unpackhi_epi8(xs[0], xs[1]);
    let p23l = _mm512_unpacklo_epi8(xs[2], xs[3]);
    let p23h = _mm512_unpackhi_epi8(xs[2], xs[3]);
    acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_unpacklo_epi16(p01l, p23l), wv[0]);
    acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_unpackhi_epi16(p01l, p23l), wv[1]);
    acc[2] = _mm512_dpbusd_epi32(acc[2], _mm512_unpacklo_epi16(p01h, p23h), wv[2]);
    acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_unpackhi_epi16(p01h, p23h), wv[3]);
}

/// The block's sums as bytes in lane order: each accumulator requantized with its lanes'
/// multipliers (`mult`, in the accumulators' order), then packed, `i32` to `i16` to
/// `i8`. Within each 128-bit lane `l` the two packs put accumulator `j`'s dwords `i` at byte
/// `16·l + 4·j + i`, which is the lane that accumulator lane holds: the packs undo the
/// unpacks' order, so no transpose is needed. The requantized values are inside `[-128,
/// 127]`, so neither pack saturates.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn packed_bytes(acc: &[__m512i; 4], mult: &[f32; 64], q: &VnniOut) -> __m512i {
    let r: [__m512i; 4] = std::array::from_fn(|j| {
        // SAFETY: 16 values at `16·j < 64` of the 64 in `mult`.
        let m = unsafe { _mm512_loadu_ps(mult.as_ptr().add(16 * j)) };
        q.requant(acc[j], m)
    });
    _mm512_packs_epi16(
        _mm512_packs_epi32(r[0], r[1]),
        _mm512_packs_epi32(r[2], r[3]),
    )
}

/// The block's accumulators (the `i32` output: [`super::ConvOut::ACC`]) put back in lane
/// order (lane `l` of accumulator `j` holds lanes `16·l + 4·j ..`: a 4×4 transpose of
/// 128-bit lanes) and stored 16 lanes at a time: lanes `16·m ..` at `to[m]`, the first
/// `counts[m]` of them (at most 16; 0 stores nothing).
///
/// # Safety
///
/// AVX-512 F and BW; `O` is `i32`; `to[m]` has room for `counts[m]` values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn finish<O: ConvOut>(acc: &[__m512i; 4], to: [*mut O; 4], counts: [usize; 4]) {
    debug_assert!(O::ACC);
    let t0 = _mm512_shuffle_i32x4::<0x44>(acc[0], acc[1]);
    let t1 = _mm512_shuffle_i32x4::<0x44>(acc[2], acc[3]);
    let t2 = _mm512_shuffle_i32x4::<0xEE>(acc[0], acc[1]);
    let t3 = _mm512_shuffle_i32x4::<0xEE>(acc[2], acc[3]);
    let lanes = [
        _mm512_shuffle_i32x4::<0x88>(t0, t1),
        _mm512_shuffle_i32x4::<0xDD>(t0, t1),
        _mm512_shuffle_i32x4::<0x88>(t2, t3),
        _mm512_shuffle_i32x4::<0xDD>(t2, t3),
    ];
    for ((v, at), k) in lanes.into_iter().zip(to).zip(counts) {
        if k == 0 {
            continue;
        }
        let mask: __mmask16 = if k >= 16 { !0 } else { (1u16 << k) - 1 };
        // SAFETY: the caller's: `at` has room for the `k` `i32` lanes stored.
        unsafe { _mm512_mask_storeu_epi32(at.cast(), mask, v) };
    }
}
