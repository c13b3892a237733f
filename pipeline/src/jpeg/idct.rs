//! Integer 8×8 inverse DCT: the Loeffler–Ligtenberg–Moschytz factorisation in 13-bit fixed
//! point with 2 extra bits kept between the passes (the scheme of libjpeg's "islow" method,
//! written here from the published algorithm). Columns first, then rows; every product and
//! sum is a wrapping `i32` operation, so the result is the same on every ISA and corrupt
//! coefficients cannot overflow-panic (they give garbage pixels, as they should).
//!
//! Rounding is defined: `descale(x, n) = (x + 2^(n-1)) >> n` (arithmetic shift), then +128
//! and a clamp to 0..=255.

use std::num::Wrapping;

type W = Wrapping<i32>;

const CONST_BITS: usize = 13;
const PASS1_BITS: usize = 2;

const fn fix(x: i32) -> W {
    Wrapping(x)
}
// round(c * 2^13) for the rotation constants.
const F0_298631336: W = fix(2446);
const F0_390180644: W = fix(3196);
const F0_541196100: W = fix(4433);
const F0_765366865: W = fix(6270);
const F0_899976223: W = fix(7373);
const F1_175875602: W = fix(9633);
const F1_501321110: W = fix(12299);
const F1_847759065: W = fix(15137);
const F1_961570560: W = fix(16069);
const F2_053119869: W = fix(16819);
const F2_562915447: W = fix(20995);
const F3_072711026: W = fix(25172);

#[inline(always)]
fn descale(x: W, n: usize) -> W {
    (x + Wrapping(1 << (n - 1))) >> n
}

#[inline(always)]
fn clamp_u8(v: W) -> u8 {
    (v.0.wrapping_add(128)).clamp(0, 255) as u8
}

/// One 1-D 8-point inverse DCT on `v` (indices 0..8), returning the 8 outputs scaled by
/// 2^CONST_BITS (not yet descaled).
#[inline(always)]
fn idct_1d(v: [W; 8]) -> [W; 8] {
    // Even part.
    let z1 = (v[2] + v[6]) * F0_541196100;
    let tmp2 = z1 - v[6] * F1_847759065;
    let tmp3 = z1 + v[2] * F0_765366865;
    let tmp0 = (v[0] + v[4]) << CONST_BITS;
    let tmp1 = (v[0] - v[4]) << CONST_BITS;
    let t10 = tmp0 + tmp3;
    let t13 = tmp0 - tmp3;
    let t11 = tmp1 + tmp2;
    let t12 = tmp1 - tmp2;
    // Odd part.
    let (o0, o1, o2, o3) = (v[7], v[5], v[3], v[1]);
    let z1 = o0 + o3;
    let z2 = o1 + o2;
    let z3 = o0 + o2;
    let z4 = o1 + o3;
    let z5 = (z3 + z4) * F1_175875602;
    let z1 = -(z1 * F0_899976223);
    let z2 = -(z2 * F2_562915447);
    let z3 = z5 - z3 * F1_961570560;
    let z4 = z5 - z4 * F0_390180644;
    let o0 = o0 * F0_298631336 + z1 + z3;
    let o1 = o1 * F2_053119869 + z2 + z4;
    let o2 = o2 * F3_072711026 + z2 + z3;
    let o3 = o3 * F1_501321110 + z1 + z4;
    [
        t10 + o3,
        t11 + o2,
        t12 + o1,
        t13 + o0,
        t13 - o0,
        t12 - o1,
        t11 - o2,
        t10 - o3,
    ]
}

/// The pixel value of a block whose only non-zero coefficient is the (dequantized) DC:
/// exactly what [`idct_8x8`] computes for such a block.
#[inline]
pub(crate) fn dc_only_value(dc: i32) -> u8 {
    let w = Wrapping(dc) << PASS1_BITS;
    clamp_u8(descale(w, PASS1_BITS + 3))
}

/// Inverse DCT of the dequantized coefficients `coef` (natural order, row-major), written
/// as 8 rows of 8 pixels at `out[0..]` with `stride` bytes between rows.
/// `out` must hold `7 * stride + 8` bytes.
pub(crate) fn idct_8x8(coef: &[i32; 64], out: &mut [u8], stride: usize) {
    let mut ws = [Wrapping(0i32); 64];
    for c in 0..8 {
        let col = |r: usize| Wrapping(coef[r * 8 + c]);
        if (1..8).all(|r| coef[r * 8 + c] == 0) {
            let dc = col(0) << PASS1_BITS;
            for r in 0..8 {
                ws[r * 8 + c] = dc;
            }
            continue;
        }
        let o = idct_1d([
            col(0),
            col(1),
            col(2),
            col(3),
            col(4),
            col(5),
            col(6),
            col(7),
        ]);
        for r in 0..8 {
            ws[r * 8 + c] = descale(o[r], CONST_BITS - PASS1_BITS);
        }
    }
    for (r, row) in ws.chunks_exact(8).enumerate() {
        let dst = &mut out[r * stride..r * stride + 8];
        let mut v = [Wrapping(0i32); 8];
        v.copy_from_slice(row);
        let o = idct_1d(v);
        for (d, x) in dst.iter_mut().zip(o) {
            *d = clamp_u8(descale(x, CONST_BITS + PASS1_BITS + 3));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(coef: &[i32; 64]) -> [f64; 64] {
        let mut out = [0.0; 64];
        let c = |u: usize| {
            if u == 0 {
                std::f64::consts::FRAC_1_SQRT_2
            } else {
                1.0
            }
        };
        for y in 0..8 {
            for x in 0..8 {
                let mut s = 0.0;
                for v in 0..8 {
                    for u in 0..8 {
                        s += c(u)
                            * c(v)
                            * coef[v * 8 + u] as f64
                            * (((2 * x + 1) as f64 * u as f64 * std::f64::consts::PI) / 16.0).cos()
                            * (((2 * y + 1) as f64 * v as f64 * std::f64::consts::PI) / 16.0).cos();
                    }
                }
                out[y * 8 + x] = (s / 4.0 + 128.0).clamp(0.0, 255.0);
            }
        }
        out
    }

    #[test]
    fn matches_the_float_definition_within_one() {
        let mut seed = 0x1234_5678_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for trial in 0..300 {
            let mut coef = [0i32; 64];
            let nonzero = 1 + trial % 20;
            for _ in 0..nonzero {
                let i = (next() % 64) as usize;
                let scale = if i == 0 { 1024 } else { 300 };
                coef[i] = (next() % (2 * scale as u64)) as i32 - scale;
            }
            let mut out = [0u8; 64];
            idct_8x8(&coef, &mut out, 8);
            let want = reference(&coef);
            for i in 0..64 {
                let d = (out[i] as f64 - want[i]).abs();
                assert!(
                    d <= 1.0,
                    "trial {trial} pixel {i}: {} vs {}",
                    out[i],
                    want[i]
                );
            }
        }
    }

    #[test]
    fn dc_only_shortcut_is_exact() {
        for dc in -1100..1100 {
            let mut coef = [0i32; 64];
            coef[0] = dc;
            let mut out = [0u8; 64];
            idct_8x8(&coef, &mut out, 8);
            assert!(out.iter().all(|&p| p == dc_only_value(dc)), "dc {dc}");
        }
    }

    #[test]
    fn huge_coefficients_do_not_panic() {
        let coef = [i32::MAX; 64];
        let mut out = [0u8; 64];
        idct_8x8(&coef, &mut out, 8);
        let coef = [i32::MIN; 64];
        idct_8x8(&coef, &mut out, 8);
    }
}
