//! Byte tables and short copies: [`lut`] maps every byte through a 256-entry table
//! (requantization, quantized unary functions, fused element chains), [`lut_rows`] does it
//! for the rows of a channel concat's part, [`copy_run`] copies such a part's short runs.
//!
//! Contract: a lookup is exact, so every path (AVX-512 VBMI, NEON, scalar) gives the same
//! bytes; nothing is read or written outside the slices given. Cost: no allocation, no lock.

use super::Isa;

/// `dst.copy_from_slice(src)` for the short runs a channel concat copies per pixel (16 to
/// 256 bytes): whole 16-byte pieces as fixed-size copies (vector moves, no call), the rest
/// with `copy_from_slice`; longer runs in one `copy_from_slice`. The same bytes either way.
/// `dst` and `src` have the same length (as `copy_from_slice` requires).
#[inline]
pub(crate) fn copy_run(dst: &mut [i8], src: &[i8]) {
    if dst.len() > 256 {
        dst.copy_from_slice(src);
        return;
    }
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (a, b) in (&mut d).zip(&mut s) {
        a.copy_from_slice(b);
    }
    let (a, b) = (d.into_remainder(), s.remainder());
    if !a.is_empty() {
        a.copy_from_slice(b);
    }
}

/// Maps every element through a 256-entry table indexed by `x as u8` (requantization and
/// quantized unary functions).
///
/// On `isa` AVX-512 with VBMI (x86-64) 64 bytes take two `vpermi2b` (each looks up 128
/// entries) and a blend on the top bit; on aarch64 16 bytes take four `tbl`/`tbx` of 64
/// entries; elsewhere one load per byte. A lookup is exact, so every path gives the same
/// bytes.
pub(crate) fn lut(isa: Isa, table: &[i8; 256], input: &[i8], out: &mut [i8]) {
    let n = input.len().min(out.len());
    let (input, out) = (&input[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() && std::arch::is_x86_feature_detected!("avx512vbmi") {
        // SAFETY: an AVX-512 `Isa` exists only after avx512f/bw/vl were detected, and
        // avx512vbmi was detected just above; `input` and `out` have the same length.
        unsafe { lut_vbmi(table, input, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = isa;
        // SAFETY: NEON is part of the aarch64 baseline; `input` and `out` have the same
        // length.
        unsafe { lut_neon(table, input, out) };
        return;
    }
    #[allow(unreachable_code)]
    {
        let _ = isa;
        lut_scalar(table, input, out);
    }
}

/// [`lut`] on the rows of `input`, `inner` bytes each, row `k` (at `k · inner`) into
/// `out[k · stride..k · stride + inner]`: a channel concat's requantized part, one pixel's
/// channels per row, with the table loaded once for all of them (the AVX-512 VBMI path; the
/// others run [`lut`] row by row). Rows that do not fit whole in `input` or `out` are left
/// out; `stride >= inner`. The same bytes as [`lut`] on each row.
pub(crate) fn lut_rows(
    isa: Isa,
    table: &[i8; 256],
    input: &[i8],
    out: &mut [i8],
    inner: usize,
    stride: usize,
) {
    if inner == 0 || stride < inner || out.len() < inner {
        return;
    }
    let rows = (input.len() / inner).min((out.len() - inner) / stride + 1);
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() && std::arch::is_x86_feature_detected!("avx512vbmi") {
        // SAFETY: an AVX-512 `Isa` exists only after avx512f/bw/vl were detected, and
        // avx512vbmi was detected just above; `rows · inner <= input.len()` and, with
        // `rows >= 1`, `(rows − 1) · stride + inner <= out.len()` (both by `rows`' bound).
        unsafe { lut_vbmi_rows(table, input, out, inner, stride, rows) };
        return;
    }
    for k in 0..rows {
        lut(
            isa,
            table,
            &input[k * inner..(k + 1) * inner],
            &mut out[k * stride..k * stride + inner],
        );
    }
}

/// [`lut`] one byte at a time.
fn lut_scalar(table: &[i8; 256], input: &[i8], out: &mut [i8]) {
    for (d, s) in out.iter_mut().zip(input) {
        *d = table[*s as u8 as usize];
    }
}

/// [`lut`] with AVX-512 VBMI.
///
/// # Safety
///
/// The CPU supports AVX-512 F, BW and VBMI; `input.len() == out.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lut_vbmi(table: &[i8; 256], input: &[i8], out: &mut [i8]) {
    debug_assert_eq!(input.len(), out.len());
    let n = input.len();
    // SAFETY: one row of `n` bytes, inside both slices (the same length: our precondition).
    unsafe { lut_vbmi_rows(table, input, out, n, n, 1) }
}

/// [`lut_rows`] with AVX-512 VBMI: the table in four registers, each row in 64-byte
/// pieces and one masked piece.
///
/// # Safety
///
/// The CPU supports AVX-512 F, BW and VBMI; `rows · inner <= input.len()`; when `rows >
/// 0`, `(rows − 1) · stride + inner <= out.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lut_vbmi_rows(
    table: &[i8; 256],
    input: &[i8],
    out: &mut [i8],
    inner: usize,
    stride: usize,
    rows: usize,
) {
    use std::arch::x86_64::*;
    debug_assert!(rows * inner <= input.len());
    debug_assert!(rows == 0 || (rows - 1) * stride + inner <= out.len());
    let t = table.as_ptr();
    // SAFETY: four 64-byte loads inside the 256-byte table.
    let (t0, t1, t2, t3) = unsafe {
        (
            _mm512_loadu_si512(t as *const _),
            _mm512_loadu_si512(t.add(64) as *const _),
            _mm512_loadu_si512(t.add(128) as *const _),
            _mm512_loadu_si512(t.add(192) as *const _),
        )
    };
    let look = |x: __m512i| {
        // Entries 0..128 and 128..256 by the low 7 bits, then the top bit picks.
        let lo = _mm512_permutex2var_epi8(t0, x, t1);
        let hi = _mm512_permutex2var_epi8(t2, x, t3);
        _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi)
    };
    for k in 0..rows {
        // SAFETY: row `k < rows` starts at `k · inner` of `input` and `k · stride` of
        // `out`, and its `inner` bytes lie inside both (our precondition).
        let (src, dst) = unsafe {
            (
                input.as_ptr().add(k * inner),
                out.as_mut_ptr().add(k * stride),
            )
        };
        let mut i = 0;
        while i + 64 <= inner {
            // SAFETY: 64 bytes at `i` of the row, `i + 64 <= inner`.
            unsafe {
                let x = _mm512_loadu_si512(src.add(i) as *const _);
                _mm512_storeu_si512(dst.add(i) as *mut _, look(x));
            }
            i += 64;
        }
        let rest = inner - i;
        if rest > 0 {
            let m: __mmask64 = (1u64 << rest) - 1;
            // SAFETY: the mask enables the `rest < 64` bytes left in the row only.
            unsafe {
                let x = _mm512_maskz_loadu_epi8(m, src.add(i));
                _mm512_mask_storeu_epi8(dst.add(i), m, look(x));
            }
        }
    }
}

/// [`lut`] with NEON `tbl`/`tbx` over the four 64-byte quarters of the table.
///
/// # Safety
///
/// `input.len() == out.len()` (NEON is baseline on aarch64).
#[cfg(target_arch = "aarch64")]
unsafe fn lut_neon(table: &[i8; 256], input: &[i8], out: &mut [i8]) {
    use std::arch::aarch64::*;
    debug_assert_eq!(input.len(), out.len());
    let t = table.as_ptr() as *const u8;
    // SAFETY: sixteen 16-byte loads inside the 256-byte table.
    let q = |k: usize| unsafe {
        uint8x16x4_t(
            vld1q_u8(t.add(64 * k)),
            vld1q_u8(t.add(64 * k + 16)),
            vld1q_u8(t.add(64 * k + 32)),
            vld1q_u8(t.add(64 * k + 48)),
        )
    };
    let (q0, q1, q2, q3) = (q(0), q(1), q(2), q(3));
    let mut i = 0;
    while i + 16 <= input.len() {
        // SAFETY: 16 bytes at `i` of each slice, `i + 16 <= len` of both. `tbl` gives 0
        // and `tbx` keeps the lane for an index past 63, so each byte takes exactly the
        // quarter its index (wrapped by the subtraction) falls in.
        unsafe {
            let x = vld1q_u8(input.as_ptr().add(i) as *const u8);
            let mut r = vqtbl4q_u8(q0, x);
            r = vqtbx4q_u8(r, q1, vsubq_u8(x, vdupq_n_u8(64)));
            r = vqtbx4q_u8(r, q2, vsubq_u8(x, vdupq_n_u8(128)));
            r = vqtbx4q_u8(r, q3, vsubq_u8(x, vdupq_n_u8(192)));
            vst1q_u8(out.as_mut_ptr().add(i) as *mut u8, r);
        }
        i += 16;
    }
    lut_scalar(table, &input[i..], &mut out[i..]);
}
