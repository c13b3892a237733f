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
//!   `Σ (x + 128)·w − (128 + x_zp)·Σ w` is its exact sum ([`DepthwiseVnni::base`] holds
//!   `bias − (128 + x_zp)·Σ w` per channel). `|Σ| ≤ 64 · 255 · 128`: no `i32` overflow.
//! - Four taps' bytes of one channel are interleaved in registers (two rounds of byte and
//!   word unpacking of four 64-channel loads), which leaves the 64 channels of a block in
//!   the order `16·lane + 4·j + i` across the four accumulators `j`; the weights are packed
//!   in that order at load ([`DepthwiseVnni::new`]), and a 4×4 transpose of 128-bit lanes
//!   puts the sums back in channel order before the bias and the store.
//! - A block of fewer than 64 channels (the last one) loads and stores through byte masks:
//!   nothing outside the input's and the output's channels is read or written.
//!
//! # Cost
//!
//! Per output pixel and 64 channels, for each group of four taps: four loads, four `xor`,
//! eight unpacks and four `vpdpbusd` (256 multiply-adds); weights are loaded once for
//! [`PIXELS`] neighbouring pixels. Padding taps cost as much as inside ones. No
//! allocation (one 64-byte stack vector), no lock, no panic.
//!
//! # Never
//!
//! Reads outside `input` or the packed weights, or writes outside the requested rows of
//! `out`. Every `unsafe` block names the bound it relies on.

use super::GeneralConv;
use std::arch::x86_64::*;
use std::ops::Range;

/// Most groups of four taps: [`super::DEPTHWISE_TAPS_MAX`] taps.
const GROUPS_MAX: usize = super::DEPTHWISE_TAPS_MAX.div_ceil(4);

/// A depthwise convolution's weights and per-channel constants in the VNNI kernel's layout.
#[derive(Clone, Debug)]
pub(crate) struct DepthwiseVnni {
    /// Groups of four taps (`⌈kh · kw / 4⌉`; the last one's missing taps have weight 0).
    groups: usize,
    /// Blocks of 64 channels (`⌈c / 64⌉`).
    blocks: usize,
    /// `weights[((b · groups + g) · 4 + j) · 64 + 16·l + 4·i + t]` = the weight of tap
    /// `4·g + t` of channel `64·b + 16·l + 4·j + i` (0 past the taps or the channels).
    weights: Vec<i8>,
    /// `bias − (128 + x_zp) · Σ_taps w` per channel, padded with 0 to `64 · blocks`.
    base: Vec<i32>,
    /// The multipliers, padded with 0 to `64 · blocks`.
    mult: Vec<f32>,
    /// `64 · blocks` bytes of `x_zp`: what a tap in the padding reads.
    zp_row: Vec<i8>,
}

impl DepthwiseVnni {
    /// The packed form of depthwise `conv` (one channel per group, at most
    /// [`super::DEPTHWISE_TAPS_MAX`] taps), or `None` when this CPU lacks AVX-512 F, BW or
    /// VNNI.
    pub(crate) fn new(conv: &GeneralConv) -> Option<DepthwiseVnni> {
        let detected = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni");
        if !detected {
            return None;
        }
        let (c, taps) = (conv.in_c, conv.win.kh * conv.win.kw);
        let (groups, blocks) = (taps.div_ceil(4), c.div_ceil(64));
        let w = |ch: usize, t: usize| -> i8 {
            if ch < c && t < taps {
                conv.weights[ch * taps + t]
            } else {
                0
            }
        };
        let mut weights = vec![0i8; blocks * groups * 256];
        for b in 0..blocks {
            for g in 0..groups {
                for j in 0..4 {
                    for l in 0..4 {
                        for i in 0..4 {
                            for t in 0..4 {
                                let ch = 64 * b + 16 * l + 4 * j + i;
                                weights[((b * groups + g) * 4 + j) * 64 + 16 * l + 4 * i + t] =
                                    w(ch, 4 * g + t);
                            }
                        }
                    }
                }
            }
        }
        let pad = (128 + conv.x_zp) as i64;
        let mut base = vec![0i32; blocks * 64];
        let mut mult = vec![0f32; blocks * 64];
        for ch in 0..c {
            let sum: i64 = (0..taps).map(|t| i64::from(w(ch, t))).sum();
            // |bias − pad · Σw| stays well inside i32: the lowering proves the whole sum does.
            base[ch] = (i64::from(conv.bias[ch]) - pad * sum) as i32;
            mult[ch] = conv.multipliers[ch];
        }
        Some(DepthwiseVnni {
            groups,
            blocks,
            weights,
            base,
            mult,
            zp_row: vec![conv.x_zp as i8; blocks * 64],
        })
    }
}

/// What the kernel stores: requantized bytes (`i8`) or the accumulators (`i32`).
pub(crate) trait DwOut: Copy {
    /// True for the accumulators.
    const ACC: bool;
}

impl DwOut for i8 {
    const ACC: bool = false;
}

impl DwOut for i32 {
    const ACC: bool = true;
}

/// The requantization's per-call constants (the zero-point-relative clamp and the zero
/// point).
struct Requant {
    lo: __m512,
    hi: __m512,
    zp: __m512i,
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
pub(crate) unsafe fn depthwise_vnni_rows<O: DwOut>(
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
    let q = Requant {
        lo: _mm512_set1_ps((i32::from(conv.lo) - conv.y_zp) as f32),
        hi: _mm512_set1_ps((i32::from(conv.hi) - conv.y_zp) as f32),
        zp: _mm512_set1_epi32(conv.y_zp),
    };
    // Output columns whose windows lie inside the image's columns: `lo..hi`.
    let lo = w.pl.div_ceil(w.sw.max(1));
    let span = (w.kw - 1) * w.dw;
    let hi = if w.in_w + w.pl > span {
        ((w.in_w - 1 + w.pl - span) / w.sw.max(1) + 1).min(w.out_w)
    } else {
        0
    };
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
/// zero-point row `zp`), pixel `p` stored at `dst + p · c`.
///
/// # Safety
///
/// AVX-512 F, BW and VNNI; an inside slot has `c` readable bytes at `x + origin + off` for
/// every pixel, `zp` has `64 · blocks`; `dst` has room for `P · c` values;
/// `slots.len() == 4 · pk.groups`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn pixels<const P: usize, O: DwOut>(
    pk: &DepthwiseVnni,
    x: *const i8,
    zp: *const i8,
    slots: &[(usize, bool)],
    origins: [usize; P],
    dst: *mut O,
    c: usize,
    q: &Requant,
) {
    let flip = _mm512_set1_epi8(i8::MIN);
    for b in 0..pk.blocks {
        let cb = 64 * b;
        let n = (c - cb).min(64);
        let load_mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
        let mut acc = [[_mm512_setzero_si512(); 4]; P];
        for (g, four) in slots.chunks_exact(4).enumerate() {
            // SAFETY: `weights` holds `blocks · groups · 256` bytes; this group's start at
            // `(b · groups + g) · 256`.
            let wv = unsafe {
                let wp = pk.weights.as_ptr().add((b * pk.groups + g) * 256);
                [
                    _mm512_loadu_si512(wp.cast()),
                    _mm512_loadu_si512(wp.add(64).cast()),
                    _mm512_loadu_si512(wp.add(128).cast()),
                    _mm512_loadu_si512(wp.add(192).cast()),
                ]
            };
            for p in 0..P {
                // SAFETY: lanes `0..n` of channels `cb..cb + n <= c` behind an inside slot
                // or of the zero-point row; masked lanes are not read.
                let ld = |t: usize| unsafe {
                    let (off, inside) = four[t];
                    let src = if inside { x.add(origins[p] + off) } else { zp };
                    _mm512_xor_si512(_mm512_maskz_loadu_epi8(load_mask, src.add(cb)), flip)
                };
                let (x0, x1, x2, x3) = (ld(0), ld(1), ld(2), ld(3));
                let p01l = _mm512_unpacklo_epi8(x0, x1);
                let p01h = _mm512_unpackhi_epi8(x0, x1);
                let p23l = _mm512_unpacklo_epi8(x2, x3);
                let p23h = _mm512_unpackhi_epi8(x2, x3);
                let a = &mut acc[p];
                a[0] = _mm512_dpbusd_epi32(a[0], _mm512_unpacklo_epi16(p01l, p23l), wv[0]);
                a[1] = _mm512_dpbusd_epi32(a[1], _mm512_unpackhi_epi16(p01l, p23l), wv[1]);
                a[2] = _mm512_dpbusd_epi32(a[2], _mm512_unpacklo_epi16(p01h, p23h), wv[2]);
                a[3] = _mm512_dpbusd_epi32(a[3], _mm512_unpackhi_epi16(p01h, p23h), wv[3]);
            }
        }
        for (p, acc) in acc.iter().enumerate() {
            // SAFETY: pixel `p < P` of the `P · c` values at `dst`.
            let dst = unsafe { dst.add(p * c) };
            // Lane `l` of accumulator `j` holds channels `16·l + 4·j ..`: a 4×4 transpose of
            // 128-bit lanes gives vector `m` = channels `16·m .. 16·m + 16`.
            let t0 = _mm512_shuffle_i32x4::<0x44>(acc[0], acc[1]);
            let t1 = _mm512_shuffle_i32x4::<0x44>(acc[2], acc[3]);
            let t2 = _mm512_shuffle_i32x4::<0xEE>(acc[0], acc[1]);
            let t3 = _mm512_shuffle_i32x4::<0xEE>(acc[2], acc[3]);
            let sums = [
                _mm512_shuffle_i32x4::<0x88>(t0, t1),
                _mm512_shuffle_i32x4::<0xDD>(t0, t1),
                _mm512_shuffle_i32x4::<0x88>(t2, t3),
                _mm512_shuffle_i32x4::<0xDD>(t2, t3),
            ];
            for (m, s) in sums.iter().enumerate() {
                if 16 * m >= n {
                    break;
                }
                let k = (n - 16 * m).min(16);
                let mask: __mmask16 = if k == 16 { !0 } else { (1u16 << k) - 1 };
                // SAFETY: `base` and `mult` hold `64 · blocks` values; channel `cb + 16·m`
                // starts 16 of them.
                let (base, mult) = unsafe {
                    (
                        _mm512_loadu_si512(pk.base.as_ptr().add(cb + 16 * m).cast()),
                        _mm512_loadu_ps(pk.mult.as_ptr().add(cb + 16 * m)),
                    )
                };
                let v = _mm512_add_epi32(*s, base);
                // SAFETY: lanes `0..k` are channels `cb + 16·m .. < c`, inside the `c` values
                // at `dst`.
                unsafe {
                    let at = dst.add(cb + 16 * m);
                    if O::ACC {
                        _mm512_mask_storeu_epi32(at.cast(), mask, v);
                    } else {
                        let f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), mult);
                        let f = _mm512_min_ps(_mm512_max_ps(f, q.lo), q.hi);
                        let r = _mm512_add_epi32(_mm512_cvtps_epi32(f), q.zp);
                        _mm512_mask_cvtepi32_storeu_epi8(at.cast(), mask, r);
                    }
                }
            }
        }
    }
}
