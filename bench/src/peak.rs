//! This machine's INT8 multiply-accumulate peaks, measured (one core): the figures the
//! kernel benchmarks compare against.
//!
//! - [`vnni_peak_gmacs`]: `vpdpbusd` (AVX-512 VNNI, 64 u8×s8 MACs per instruction into
//!   `i32`, exact), when the CPU has it.
//! - [`avx2_madd_peak_gmacs`]: `vpmaddwd` (AVX2, 16 i16×i16 MACs per instruction into
//!   `i32`, exact): the ceiling of the exact AVX2 kernel on CPUs without VNNI (which also
//!   spends an add per `vpmaddwd`, so about 80 % of it is the practical limit).
//! - [`sdot_peak_gmacs`]: `sdot` (aarch64 with the dot-product extension, 128-bit: 16
//!   s8×s8 MACs per instruction into `i32`, exact), the ceiling of the NEON kernel.
//! - [`int8_peak`]: whichever of VNNI and `sdot` this CPU has, with its description.
//!
//! Each runs 12 independent accumulator chains of register-only instructions for a few
//! tens of milliseconds, five times, and keeps the best. Never call them on a hot path.

use std::hint::black_box;
use std::time::Instant;

#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
fn best_of_five(macs_per_iter: u64, iters: u64, f: impl Fn(u64) -> i32) -> f64 {
    black_box(f(1000));
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        black_box(f(iters));
        best = best.min(t.elapsed().as_secs_f64());
    }
    (iters * macs_per_iter) as f64 / best / 1e9
}

/// Measured `vpdpbusd` peak of one core in GMAC/s, if the CPU has AVX-512 VNNI.
pub fn vnni_peak_gmacs() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let ok = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni");
        if !ok {
            return None;
        }
        // SAFETY: AVX-512 F/BW/VL/VNNI were detected just above.
        Some(best_of_five(12 * 64, 4_000_000, |n| unsafe {
            vnni_loop(n)
        }))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// Measured `vpmaddwd` (256-bit) peak of one core in GMAC/s, if the CPU has AVX2.
pub fn avx2_madd_peak_gmacs() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return None;
        }
        // SAFETY: AVX2 was detected just above.
        Some(best_of_five(12 * 16, 4_000_000, |n| unsafe {
            madd_loop(n)
        }))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// Measured `sdot` (128-bit vector form) peak of one core in GMAC/s, if the CPU has the
/// Armv8.2-A dot-product extension.
pub fn sdot_peak_gmacs() -> Option<f64> {
    #[cfg(target_arch = "aarch64")]
    {
        if !std::arch::is_aarch64_feature_detected!("dotprod") {
            return None;
        }
        // SAFETY: NEON (baseline on aarch64) and dotprod were detected just above.
        Some(best_of_five(12 * 16, 4_000_000, |n| unsafe {
            sdot_loop(n)
        }))
    }
    #[cfg(not(target_arch = "aarch64"))]
    None
}

/// The INT8 dot-product peak of this CPU (VNNI on x86-64, `sdot` on aarch64) with a line
/// saying what was measured, or `None` when it has neither.
pub fn int8_peak() -> Option<(f64, &'static str)> {
    if let Some(p) = vnni_peak_gmacs() {
        return Some((p, "VNNI peak (12 independent vpdpbusd zmm, 64 MAC each)"));
    }
    sdot_peak_gmacs().map(|p| (p, "sdot peak (12 independent sdot v.4s, 16 MAC each)"))
}

/// `iters` × 12 independent `sdot`; returns a value that depends on every accumulator.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sdot_loop(iters: u64) -> i32 {
    use std::arch::aarch64::*;
    let a = vreinterpretq_s8_s32(vdupq_n_s32(black_box(0x0102_0304)));
    let b = vdupq_n_s8(black_box(1));
    let mut acc = [vdupq_n_s32(0); 12];
    for (i, v) in acc.iter_mut().enumerate() {
        *v = vdupq_n_s32(i as i32);
    }
    for _ in 0..iters {
        for v in acc.iter_mut() {
            // SAFETY: a register-only instruction; dotprod is enabled for this function and
            // detected by its caller.
            unsafe {
                std::arch::asm!(
                    "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                    acc = inout(vreg) *v,
                    a = in(vreg) a,
                    b = in(vreg) b,
                    options(pure, nomem, nostack, preserves_flags)
                );
            }
        }
    }
    let mut s = vdupq_n_s32(0);
    for v in acc {
        s = vaddq_s32(s, v);
    }
    vaddvq_s32(s)
}

/// `iters` × 12 independent `vpdpbusd`; returns a value that depends on every accumulator.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn vnni_loop(iters: u64) -> i32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_epi32(black_box(0x0102_0304));
    let b = _mm512_set1_epi32(black_box(0x0101_0101));
    let mut acc = [_mm512_setzero_si512(); 12];
    for (i, v) in acc.iter_mut().enumerate() {
        *v = _mm512_set1_epi32(i as i32);
    }
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_dpbusd_epi32(*v, a, b);
        }
    }
    let mut s = _mm512_setzero_si512();
    for v in acc {
        s = _mm512_add_epi32(s, v);
    }
    _mm512_reduce_add_epi32(s)
}

/// `iters` × 12 independent chains of `vpmaddwd` (each result fed back as the next
/// operand, so nothing can be hoisted); returns a value that depends on every chain.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn madd_loop(iters: u64) -> i32 {
    use std::arch::x86_64::*;
    let b = _mm256_set1_epi16(black_box(1));
    let mut acc = [_mm256_setzero_si256(); 12];
    for (i, v) in acc.iter_mut().enumerate() {
        *v = _mm256_set1_epi32(i as i32);
    }
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_madd_epi16(*v, b);
        }
    }
    let mut s = _mm256_setzero_si256();
    for v in acc {
        s = _mm256_add_epi32(s, v);
    }
    let mut out = [0i32; 8];
    // SAFETY: `out` holds exactly 32 bytes, the width of one unaligned 256-bit store.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), s) };
    out.iter().fold(0i32, |x, y| x.wrapping_add(*y))
}
