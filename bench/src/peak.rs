//! This machine's INT8 multiply-accumulate peaks, measured (one core): the figures the
//! kernel benchmarks compare against.
//!
//! - [`vnni_peak_gmacs`]: `vpdpbusd` (AVX-512 VNNI, 64 u8×s8 MACs per instruction into
//!   `i32`, exact), when the CPU has it.
//! - [`avx2_madd_peak_gmacs`]: `vpmaddwd` (AVX2, 16 i16×i16 MACs per instruction into
//!   `i32`, exact): the ceiling of the exact AVX2 kernel on CPUs without VNNI (which also
//!   spends an add per `vpmaddwd`, so about 80 % of it is the practical limit).
//!
//! Each runs 12 independent accumulator chains of register-only instructions for a few
//! tens of milliseconds, five times, and keeps the best. Never call them on a hot path.

use std::hint::black_box;
use std::time::Instant;

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
