//! The weights repacked for the SIMD kernels, once, at layer construction.
//!
//! Contract: for each block of output channels (16 for the 4- and 8-tap layouts, 8 for
//! AVX2) and each kernel row, the `k·in_c` taps of that row are stored in groups of 8
//! (`i8`), 4 (`i8`) or 2 (AVX2, widened to `i16`) taps × the block's output channels, the
//! layouts `smmla` (NEON i8mm), `vpdpbusd` (VNNI), `sdot` (NEON dot product) and
//! `vpmaddwd` (AVX2) consume; everything past `k·in_c` taps and past `out_c` channels is
//! zero, so a kernel reading a whole group past a window's end multiplies by 0. With the 4-
//! or 8-tap layout comes `Σw` per output channel (padded to whole blocks) for the
//! zero-point correction. Only the paths this CPU can run are packed; the 4-tap layout is
//! packed for VNNI, for NEON dot product, and for AVX2 when every weight fits 7 bits (the
//! `avx2_u7` kernel reads it).
//!
//! Cost: allocates about 2.5× the weight bytes, at construction only. Never: touched by
//! the per-frame path except to read.

use super::KernelPath;

/// Weights repacked for the SIMD kernels, built once at construction.
#[derive(Clone, Debug, Default)]
pub(super) struct Packed {
    /// VNNI, NEON dot product and AVX2 with 7-bit weights: `[block16][ky][g4][16 oc][4
    /// taps]` `i8`, zero-filled.
    pub(super) taps4: Vec<i8>,
    /// NEON with i8mm (`smmla`): `[block16][ky][g8][16 oc][8 taps]` `i8`, zero-filled:
    /// each 16 bytes are one channel pair's 8 taps, the 2×8 matrix `smmla` reads.
    pub(super) taps8: Vec<i8>,
    /// With `taps4` or `taps8`: `Σw` per output channel, padded to a multiple of 16 with
    /// zeros (the zero-point correction).
    pub(super) wsum: Vec<i32>,
    /// With `taps4` or `taps8`: `Σw` of each tap over the input channels, `[block16][ky][kx][16 oc]`,
    /// zero past `out_c`: what a kernel adds back (times the zero-point correction) for
    /// the padded taps it skips instead of multiplying.
    pub(super) tap_sums: Vec<i32>,
    /// With `taps4`: `Σ|w|` per output channel, padded to a multiple of 16 with zeros:
    /// with the bias it bounds the accumulator (`|acc| <= |bias| + 255·Σ|w|`), which tells
    /// the VNNI kernel when its integer clamp is exact (`super::vnni`).
    pub(super) abs_wsum: Vec<i32>,
    /// AVX2: `[block8][ky][g2][8 oc][2 taps]` `i16`, zero-filled.
    pub(super) avx2: Vec<i16>,
    /// Every weight lies in `-64..=64`: the AVX2 path runs the exact `vpmaddubsw` kernel
    /// (`avx2_u7`) on the 4-tap layout above, which is then packed on AVX2-only CPUs too.
    pub(super) seven_bit: bool,
}

/// `[out_c][k][kc]` weights as `[⌈out_c/block⌉][k][⌈kc/taps⌉][block oc][taps]`, each
/// weight through `conv`, zero past `kc` taps and past `out_c` channels: the layout of
/// every SIMD path (`block` output channels per register block, `taps` per group).
fn interleave<T: Copy + Default>(
    weights: &[i8],
    out_c: usize,
    k: usize,
    kc: usize,
    block: usize,
    taps: usize,
    conv: impl Fn(i8) -> T,
) -> Vec<T> {
    let groups = kc.div_ceil(taps);
    let mut out = vec![T::default(); out_c.div_ceil(block) * k * groups * block * taps];
    for oc in 0..out_c {
        let (b, lane) = (oc / block, oc % block);
        for ky in 0..k {
            for t in 0..kc {
                let idx =
                    ((b * k + ky) * groups + t / taps) * block * taps + lane * taps + t % taps;
                out[idx] = conv(weights[(oc * k + ky) * kc + t]);
            }
        }
    }
    out
}

impl Packed {
    /// Repacks `[out_c][k][k][in_c]` weights for the paths this CPU can run. Allocates.
    pub(super) fn new(weights: &[i8], in_c: usize, out_c: usize, k: usize) -> Packed {
        let kc = k * in_c;
        let mut p = Packed {
            seven_bit: weights.iter().all(|&w| (-64..=64).contains(&w)),
            ..Packed::default()
        };
        let blocks16 = out_c.div_ceil(16);
        let pack4 = KernelPath::Avx512Vnni.is_available()
            || KernelPath::NeonDot.is_available()
            || (p.seven_bit && KernelPath::Avx2.is_available());
        let pack8 = KernelPath::NeonI8mm.is_available();
        if pack4 || pack8 {
            p.wsum = vec![0i32; blocks16 * 16];
            for (oc, s) in p.wsum.iter_mut().take(out_c).enumerate() {
                *s = weights[oc * k * kc..(oc + 1) * k * kc]
                    .iter()
                    .map(|&w| i32::from(w))
                    .sum();
            }
            p.tap_sums = vec![0i32; blocks16 * k * k * 16];
            for oc in 0..out_c {
                for tap in 0..k * k {
                    let w = &weights[(oc * k * k + tap) * in_c..][..in_c];
                    p.tap_sums[((oc / 16) * k * k + tap) * 16 + oc % 16] =
                        w.iter().map(|&w| i32::from(w)).sum();
                }
            }
        }
        if pack4 {
            p.taps4 = interleave(weights, out_c, k, kc, 16, 4, |w| w);
            p.abs_wsum = vec![0i32; blocks16 * 16];
            for (oc, s) in p.abs_wsum.iter_mut().take(out_c).enumerate() {
                *s = weights[oc * k * kc..(oc + 1) * k * kc]
                    .iter()
                    .map(|&w| i32::from(w).abs())
                    .sum();
            }
        }
        if pack8 {
            p.taps8 = interleave(weights, out_c, k, kc, 16, 8, |w| w);
        }
        if KernelPath::Avx2.is_available() {
            p.avx2 = interleave(weights, out_c, k, kc, 8, 2, i16::from);
        }
        p
    }

    /// True if the weights were packed for `path` (the scalar path needs none).
    pub(super) fn has(&self, path: KernelPath) -> bool {
        match path {
            KernelPath::Scalar => true,
            KernelPath::Avx2 => !self.avx2.is_empty(),
            KernelPath::Avx512Vnni | KernelPath::NeonDot => !self.taps4.is_empty(),
            KernelPath::NeonI8mm => !self.taps8.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_runtime::rng::SplitMix64;

    #[test]
    fn packed_layouts_hold_every_weight_once_and_zeros_elsewhere() {
        // 5 input channels, k = 3 (15 taps per kernel row: not a multiple of 2 or 4) and 19
        // output channels (not a multiple of 8 or 16).
        let (in_c, out_c, k) = (5, 19, 3);
        let kc = k * in_c;
        let mut r = SplitMix64::new(8);
        let weights: Vec<i8> = (0..out_c * k * kc).map(|_| r.next_i8()).collect();
        let p = Packed::new(&weights, in_c, out_c, k);
        assert!(p.has(KernelPath::Scalar));
        if p.has(KernelPath::Avx512Vnni) {
            let g4 = kc.div_ceil(4);
            assert_eq!(p.taps4.len(), out_c.div_ceil(16) * k * g4 * 64);
            let sum: i64 = p.taps4.iter().map(|&w| i64::from(w)).sum();
            assert_eq!(sum, weights.iter().map(|&w| i64::from(w)).sum::<i64>());
            for oc in 0..out_c.div_ceil(16) * 16 {
                let want: i32 = if oc < out_c {
                    weights[oc * k * kc..(oc + 1) * k * kc]
                        .iter()
                        .map(|&w| i32::from(w))
                        .sum()
                } else {
                    0
                };
                assert_eq!(p.wsum[oc], want, "channel {oc}");
                let abs: i32 = if oc < out_c {
                    weights[oc * k * kc..(oc + 1) * k * kc]
                        .iter()
                        .map(|&w| i32::from(w).abs())
                        .sum()
                } else {
                    0
                };
                assert_eq!(p.abs_wsum[oc], abs, "channel {oc}");
            }
            assert_eq!(p.tap_sums.len(), out_c.div_ceil(16) * k * k * 16);
            for oc in 0..out_c.div_ceil(16) * 16 {
                let per_tap: i32 = (0..k * k)
                    .map(|tap| p.tap_sums[((oc / 16) * k * k + tap) * 16 + oc % 16])
                    .sum();
                assert_eq!(
                    per_tap, p.wsum[oc],
                    "channel {oc}: the taps' sums add up to Σw"
                );
            }
            // Tap (2, 1) of output channel 17 (block 1, lane 1): its 5 input channels.
            let (oc, tap) = (17, 2 * k + 1);
            let want: i32 = (0..in_c)
                .map(|c| i32::from(weights[(oc * k * k + tap) * in_c + c]))
                .sum();
            assert_eq!(p.tap_sums[((oc / 16) * k * k + tap) * 16 + oc % 16], want);
            // The last tap of output channel 18, kernel row 2.
            let (oc, ky, t) = (18, 2, kc - 1);
            let idx = ((oc / 16 * k + ky) * g4 + t / 4) * 64 + oc % 16 * 4 + t % 4;
            assert_eq!(p.taps4[idx], weights[(oc * k + ky) * kc + t]);
            assert_eq!(p.taps4[idx + 1], 0, "the group's tail past k*in_c is zero");
        }
        if p.has(KernelPath::NeonI8mm) {
            let g8 = kc.div_ceil(8);
            assert_eq!(p.taps8.len(), out_c.div_ceil(16) * k * g8 * 128);
            let sum: i64 = p.taps8.iter().map(|&w| i64::from(w)).sum();
            assert_eq!(sum, weights.iter().map(|&w| i64::from(w)).sum::<i64>());
            let (oc, ky, t) = (18, 2, kc - 1);
            let idx = ((oc / 16 * k + ky) * g8 + t / 8) * 128 + oc % 16 * 8 + t % 8;
            assert_eq!(p.taps8[idx], weights[(oc * k + ky) * kc + t]);
            assert_eq!(p.taps8[idx + 1], 0, "the group's tail past k*in_c is zero");
        }
        if p.has(KernelPath::Avx2) {
            let g2 = kc.div_ceil(2);
            assert_eq!(p.avx2.len(), out_c.div_ceil(8) * k * g2 * 16);
            let sum: i64 = p.avx2.iter().map(|&w| i64::from(w)).sum();
            assert_eq!(sum, weights.iter().map(|&w| i64::from(w)).sum::<i64>());
            let (oc, ky, t) = (18, 1, kc - 1);
            let idx = ((oc / 8 * k + ky) * g2 + t / 2) * 16 + oc % 8 * 2 + t % 2;
            assert_eq!(p.avx2[idx], i16::from(weights[(oc * k + ky) * kc + t]));
            assert_eq!(p.avx2[idx + 1], 0, "the pair's tail past k*in_c is zero");
        }
    }
}
