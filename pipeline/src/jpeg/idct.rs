//! Integer 8×8 inverse DCT: the Loeffler–Ligtenberg–Moschytz factorisation in 13-bit fixed
//! point with 2 extra bits kept between the passes (the scheme of libjpeg's "islow" method,
//! written here from the published algorithm). Rows (horizontal) first, then columns, so
//! that one transpose suffices (libjpeg goes columns first: results can differ from it by
//! one level in rare pixels, never from the float definition by more than one); every product and
//! sum is a wrapping `i32` operation, so the result is the same on every ISA and corrupt
//! coefficients cannot overflow-panic (they give garbage pixels, as they should).
//!
//! Rounding is defined: `descale(x, n) = (x + 2^(n-1)) >> n` (arithmetic shift), then +128
//! and a clamp to 0..=255. The passes run on 8 lanes at once (`V8`), element by element,
//! so the compiler vectorises them on any target without changing a bit of the result.

use std::ops::{Add, Neg, Sub};

const CONST_BITS: u32 = 13;
const PASS1_BITS: u32 = 2;

// round(c * 2^13) for the rotation constants.
const F0_298631336: i32 = 2446;
const F0_390180644: i32 = 3196;
const F0_541196100: i32 = 4433;
const F0_765366865: i32 = 6270;
const F0_899976223: i32 = 7373;
const F1_175875602: i32 = 9633;
const F1_501321110: i32 = 12299;
const F1_847759065: i32 = 15137;
const F1_961570560: i32 = 16069;
const F2_053119869: i32 = 16819;
const F2_562915447: i32 = 20995;
const F3_072711026: i32 = 25172;

/// Eight lanes of wrapping `i32`: the 1-D transform runs on 8 columns (or rows) at once,
/// element by element, which the compiler turns into SIMD on any target. Every lane does
/// exactly the scalar arithmetic, so the result does not depend on the vector width.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct V8([i32; 8]);

impl V8 {
    #[inline(always)]
    fn map(self, f: impl Fn(i32) -> i32) -> V8 {
        let mut o = [0; 8];
        for (o, a) in o.iter_mut().zip(self.0) {
            *o = f(a);
        }
        V8(o)
    }
    #[inline(always)]
    fn zip(self, b: V8, f: impl Fn(i32, i32) -> i32) -> V8 {
        let mut o = [0; 8];
        for ((o, a), b) in o.iter_mut().zip(self.0).zip(b.0) {
            *o = f(a, b);
        }
        V8(o)
    }
    #[inline(always)]
    fn mulc(self, c: i32) -> V8 {
        self.map(|a| a.wrapping_mul(c))
    }
    #[inline(always)]
    fn shl(self, n: u32) -> V8 {
        self.map(|a| a.wrapping_shl(n))
    }
    /// `(x + 2^(n-1)) >> n`, arithmetic shift.
    #[inline(always)]
    fn descale(self, n: u32) -> V8 {
        self.map(|a| a.wrapping_add(1 << (n - 1)) >> n)
    }
}

impl Add for V8 {
    type Output = V8;
    #[inline(always)]
    fn add(self, b: V8) -> V8 {
        self.zip(b, i32::wrapping_add)
    }
}

impl Sub for V8 {
    type Output = V8;
    #[inline(always)]
    fn sub(self, b: V8) -> V8 {
        self.zip(b, i32::wrapping_sub)
    }
}

impl Neg for V8 {
    type Output = V8;
    #[inline(always)]
    fn neg(self) -> V8 {
        self.map(i32::wrapping_neg)
    }
}

#[inline(always)]
fn transpose(m: &[V8; 8]) -> [V8; 8] {
    let mut t = [V8::default(); 8];
    for (i, row) in m.iter().enumerate() {
        for (j, &x) in row.0.iter().enumerate() {
            t[j].0[i] = x;
        }
    }
    t
}

/// One 1-D 8-point inverse DCT of the inputs `v[0..8]` (each a vector of 8 independent
/// lanes), returning the 8 outputs scaled by 2^CONST_BITS (not yet descaled).
#[inline(always)]
fn idct_1d(v: &[V8; 8]) -> [V8; 8] {
    // Even part.
    let z1 = (v[2] + v[6]).mulc(F0_541196100);
    let tmp2 = z1 - v[6].mulc(F1_847759065);
    let tmp3 = z1 + v[2].mulc(F0_765366865);
    let tmp0 = (v[0] + v[4]).shl(CONST_BITS);
    let tmp1 = (v[0] - v[4]).shl(CONST_BITS);
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
    let z5 = (z3 + z4).mulc(F1_175875602);
    let z1 = -z1.mulc(F0_899976223);
    let z2 = -z2.mulc(F2_562915447);
    let z3 = z5 - z3.mulc(F1_961570560);
    let z4 = z5 - z4.mulc(F0_390180644);
    let o0 = o0.mulc(F0_298631336) + z1 + z3;
    let o1 = o1.mulc(F2_053119869) + z2 + z4;
    let o2 = o2.mulc(F3_072711026) + z2 + z3;
    let o3 = o3.mulc(F1_501321110) + z1 + z4;
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

#[inline(always)]
fn to_pixel(x: i32) -> u8 {
    x.wrapping_add(128).clamp(0, 255) as u8
}

/// The pixel value of a block whose only non-zero coefficient is the (dequantized) DC:
/// exactly what [`idct_8x8`] computes for such a block.
#[inline]
pub(crate) fn dc_only_value(dc: i32) -> u8 {
    let w = dc.wrapping_shl(PASS1_BITS);
    to_pixel(w.wrapping_add(1 << (PASS1_BITS + 2)) >> (PASS1_BITS + 3))
}

/// Inverse DCT of the dequantized coefficients `coef`, stored **transposed**
/// (`coef[u * 8 + v]` is horizontal frequency `u`, vertical frequency `v`), written
/// as 8 rows of 8 pixels at `out[0..]` with `stride` bytes between rows.
/// `out` must hold `7 * stride + 8` bytes.
///
/// On x86-64 CPUs with AVX2 the same code is compiled a second time with AVX2 enabled
/// (8 × i32 multiplies in one instruction; SSE2, the baseline, has none) and chosen at run
/// time; integer arithmetic, so both give the same bits.
#[inline]
pub(crate) fn idct_8x8(coef: &[i32; 64], out: &mut [u8], stride: usize) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: `idct_8x8_avx2` only requires the CPU to support AVX2, checked just above.
        unsafe { idct_8x8_avx2(coef, out, stride) };
        return;
    }
    idct_8x8_any(coef, out, stride);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn idct_8x8_avx2(coef: &[i32; 64], out: &mut [u8], stride: usize) {
    idct_8x8_with(coef, out, stride, |m| avx2::transpose(m));
}

fn idct_8x8_any(coef: &[i32; 64], out: &mut [u8], stride: usize) {
    idct_8x8_with(coef, out, stride, transpose);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::V8;
    use std::arch::x86_64::*;

    /// [`super::transpose`] in 24 AVX2 shuffles (the portable one compiles to inserts).
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn transpose(m: &[V8; 8]) -> [V8; 8] {
        let mut r = [_mm256_setzero_si256(); 8];
        for (r, v) in r.iter_mut().zip(m) {
            // SAFETY: `[i32; 8]` and `__m256i` are both 32 plain bytes; every bit pattern
            // is valid for each.
            *r = unsafe { std::mem::transmute::<[i32; 8], __m256i>(v.0) };
        }
        let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
        let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
        let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
        let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
        let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        let o = [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ];
        let mut t = [V8::default(); 8];
        for (t, o) in t.iter_mut().zip(o) {
            // SAFETY: as above, the other way round.
            t.0 = unsafe { std::mem::transmute::<__m256i, [i32; 8]>(o) };
        }
        t
    }
}

#[inline(always)]
fn idct_8x8_with(
    coef: &[i32; 64],
    out: &mut [u8],
    stride: usize,
    transpose: impl Fn(&[V8; 8]) -> [V8; 8],
) {
    // `coef` is transposed, so row `u` holds horizontal frequency `u` of every vertical
    // frequency: the horizontal transform runs on all 8 coefficient rows at once.
    let mut freq = [V8::default(); 8];
    for (r, c) in freq.iter_mut().zip(coef.chunks_exact(8)) {
        r.0.copy_from_slice(c);
    }
    // Pass 1 (horizontal). A block with no horizontal detail (rows 1..8 of the transposed
    // coefficients zero) gives row 0 scaled everywhere: exactly what the full pass computes.
    let mut ws = [freq[0].shl(PASS1_BITS); 8];
    if freq[1..].iter().any(|r| r.0 != [0; 8]) {
        let o = idct_1d(&freq);
        for (w, o) in ws.iter_mut().zip(o) {
            *w = o.descale(CONST_BITS - PASS1_BITS);
        }
    }
    // `ws[x]` holds column x for every vertical frequency; transposed, row `v` holds
    // vertical frequency `v` of every column, and pass 2 (vertical) yields pixel rows.
    let rows = idct_1d(&transpose(&ws));
    for (r, o) in rows.iter().enumerate() {
        let p = o.descale(CONST_BITS + PASS1_BITS + 3);
        let dst = &mut out[r * stride..r * stride + 8];
        for (d, &x) in dst.iter_mut().zip(p.0.iter()) {
            *d = to_pixel(x);
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
                            * redline_runtime::det_math::cos(
                                ((2 * x + 1) as f64 * u as f64 * std::f64::consts::PI) / 16.0,
                            )
                            * redline_runtime::det_math::cos(
                                ((2 * y + 1) as f64 * v as f64 * std::f64::consts::PI) / 16.0,
                            );
                    }
                }
                out[y * 8 + x] = (s / 4.0 + 128.0).clamp(0.0, 255.0);
            }
        }
        out
    }

    fn transposed(c: &[i32; 64]) -> [i32; 64] {
        let mut t = [0; 64];
        for v in 0..8 {
            for u in 0..8 {
                t[u * 8 + v] = c[v * 8 + u];
            }
        }
        t
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
            idct_8x8(&transposed(&coef), &mut out, 8);
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
    fn every_code_path_gives_the_same_bits() {
        let mut seed = 0x9876_5432_u64;
        for trial in 0..2000 {
            let mut coef = [0i32; 64];
            for c in coef.iter_mut().take(1 + trial % 64) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *c = (seed % 4096) as i32 - 2048;
            }
            let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
            idct_8x8(&coef, &mut a, 8);
            idct_8x8_any(&coef, &mut b, 8);
            assert_eq!(a, b, "trial {trial}");
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
