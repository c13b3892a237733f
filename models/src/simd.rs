//! AVX2 and AVX-512 VNNI convolution kernels, bit-exact with the scalar reference of
//! [`crate::conv`], and the run-time choice between them ([`KernelPath`]).
//!
//! # Contract
//!
//! - Every path computes exactly what the scalar kernel computes, bit for bit, for every
//!   input: the `i32` accumulator `bias + Σ (x − x_zp)·w` is formed exactly (all
//!   intermediate arithmetic is wrapping `i32`, and the true value is proven to fit in `i32`
//!   by [`crate::conv::Conv2d::new`], so the wrapped result is the exact one), then
//!   requantized with one `f32` conversion (round to nearest even, like `acc as f32`), one
//!   `f32` multiply by the same multiplier, a clamp to the output range (equivalent to the
//!   scalar clamp after rounding because both bounds are integers) and `cvtps2dq` under the
//!   default MXCSR rounding (round half to even, like `round_ties_even`).
//! - **VNNI** (`vpdpbusd`, non-saturating): activations are fed as `u8 = x ^ 0x80 = x + 128`
//!   and the accumulator starts at `bias − (128 + x_zp)·Σw`; padded taps read `x_zp + 128`,
//!   so they contribute exactly 0, as in the scalar path.
//! - **AVX2**: activations are staged as `i16 = x − x_zp` (padding 0) and multiplied with
//!   `vpmaddwd` (`_mm256_madd_epi16`, exact: each pair sum is at most `2·255·128`). The
//!   saturating `vpmaddubsw` is never used.
//! - Layout: the taps of one kernel row, `k·in_c` values, are contiguous in the NHWC input;
//!   weights are repacked at construction per kernel row into groups of 4 (VNNI) or 2 (AVX2)
//!   taps × 16 (VNNI) or 8 (AVX2) output channels, zero-filled past `k·in_c` and `out_c`.
//!   The few input bytes read past a window therefore meet zero weights.
//! - Input rows are staged (xor / widened, with the padding written out) into a fixed
//!   [`STAGE_BYTES`] stack buffer per block of output rows, so the inner loops have no
//!   border logic. A layer too wide for one staged column is reported back (`false`) and
//!   the caller runs the scalar kernel.
//!
//! # Cost
//!
//! Construction ([`Packed::new`]) allocates the packed weights (about 2.5× the weight bytes).
//! The per-frame entry [`run_rows`] never allocates, locks, logs or panics; it uses
//! [`STAGE_BYTES`] of stack. It runs no threads: row splitting stays the caller's.
//!
//! # Never
//!
//! No kernel reads outside `input`, the packed weights or its stack buffer, or writes
//! outside the requested output rows and channel slot. Results never depend on the path,
//! the row split, time or threads. On non-x86-64 targets only [`KernelPath::Scalar`] exists
//! at run time and this module's kernels compile to nothing.

use crate::conv::{ChannelSlot, ModelError};
use std::ops::Range;

/// Bytes of stack each SIMD `forward_rows` call uses to stage input rows.
pub const STAGE_BYTES: usize = 32 * 1024;

/// Bytes after the staged rows kept initialised (zero) so that the last group's overread
/// stays inside initialised memory.
const SLACK: usize = 64;

/// Which convolution kernel a layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// The portable scalar reference (always available).
    Scalar,
    /// AVX2: `i16` products with `vpmaddwd`, 8 output channels per register.
    Avx2,
    /// AVX-512 VNNI: `vpdpbusd`, 16 output channels × 4 taps per instruction.
    Avx512Vnni,
}

impl KernelPath {
    /// All paths, slowest first.
    pub const ALL: [KernelPath; 3] = [KernelPath::Scalar, KernelPath::Avx2, KernelPath::Avx512Vnni];

    /// Short name, as accepted by `REDLINE_KERNEL`: `scalar`, `avx2`, `vnni`.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512Vnni => "vnni",
        }
    }

    /// Parses a `REDLINE_KERNEL` value (`scalar`, `avx2`, `vnni`; case-insensitive).
    pub fn parse(s: &str) -> Result<KernelPath, ModelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(KernelPath::Scalar),
            "avx2" => Ok(KernelPath::Avx2),
            "vnni" | "avx512vnni" | "avx512" => Ok(KernelPath::Avx512Vnni),
            other => Err(ModelError::InvalidConfig {
                reason: format!(
                    "REDLINE_KERNEL = {other:?} is not a kernel path: use scalar, avx2 or vnni \
                     (or unset it to pick the fastest this CPU supports)"
                ),
            }),
        }
    }

    /// True if this CPU can run the path (detected at run time).
    pub fn is_available(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest available path.
    pub fn best() -> KernelPath {
        [KernelPath::Avx512Vnni, KernelPath::Avx2]
            .into_iter()
            .find(|p| p.is_available())
            .unwrap_or(KernelPath::Scalar)
    }

    /// Errors with a clear message if the path cannot run on this CPU.
    pub fn check_available(self) -> Result<KernelPath, ModelError> {
        if self.is_available() {
            Ok(self)
        } else {
            Err(ModelError::InvalidConfig {
                reason: format!(
                    "kernel path {} is not supported by this CPU: pick one of the available \
                     paths (KernelPath::is_available) or unset REDLINE_KERNEL",
                    self.name()
                ),
            })
        }
    }

    /// The path a new layer uses: `REDLINE_KERNEL` if set (an error if it names an unknown
    /// or unavailable path), else [`KernelPath::best`]. Construction time only.
    pub fn from_env() -> Result<KernelPath, ModelError> {
        match std::env::var("REDLINE_KERNEL") {
            Ok(v) if !v.trim().is_empty() => KernelPath::parse(&v)?.check_available(),
            _ => Ok(KernelPath::best()),
        }
    }
}

/// Geometry and quantization of one call, checked by the caller.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geom {
    pub in_c: usize,
    pub out_c: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_w: usize,
    pub x_zp: i8,
    pub y_zp: i8,
    pub relu: bool,
}

/// Weights repacked for the SIMD kernels, built once at construction.
#[derive(Clone, Debug, Default)]
pub(crate) struct Packed {
    /// VNNI: `[block16][ky][g4][16 oc][4 taps]` `i8` (as bytes), zero-filled.
    vnni: Vec<i8>,
    /// VNNI: `Σw` per output channel, padded to a multiple of 16 with zeros.
    vnni_wsum: Vec<i32>,
    /// AVX2: `[block8][ky][g2][8 oc][2 taps]` `i16`, zero-filled.
    avx2: Vec<i16>,
}

impl Packed {
    /// Repacks `[out_c][k][k][in_c]` weights for the paths this CPU can run. Allocates.
    pub(crate) fn new(weights: &[i8], in_c: usize, out_c: usize, k: usize) -> Packed {
        let kc = k * in_c;
        let mut p = Packed::default();
        if KernelPath::Avx512Vnni.is_available() {
            let g4 = kc.div_ceil(4);
            let blocks = out_c.div_ceil(16);
            p.vnni = vec![0i8; blocks * k * g4 * 64];
            p.vnni_wsum = vec![0i32; blocks * 16];
            for oc in 0..out_c {
                let (b, lane) = (oc / 16, oc % 16);
                for ky in 0..k {
                    for t in 0..kc {
                        let w = weights[(oc * k + ky) * kc + t];
                        let idx = ((b * k + ky) * g4 + t / 4) * 64 + lane * 4 + t % 4;
                        p.vnni[idx] = w;
                        p.vnni_wsum[oc] += i32::from(w);
                    }
                }
            }
        }
        if KernelPath::Avx2.is_available() {
            let g2 = kc.div_ceil(2);
            let blocks = out_c.div_ceil(8);
            p.avx2 = vec![0i16; blocks * k * g2 * 16];
            for oc in 0..out_c {
                let (b, lane) = (oc / 8, oc % 8);
                for ky in 0..k {
                    for t in 0..kc {
                        let idx = ((b * k + ky) * g2 + t / 2) * 16 + lane * 2 + t % 2;
                        p.avx2[idx] = i16::from(weights[(oc * k + ky) * kc + t]);
                    }
                }
            }
        }
        p
    }

    fn has(&self, path: KernelPath) -> bool {
        match path {
            KernelPath::Scalar => true,
            KernelPath::Avx2 => !self.avx2.is_empty(),
            KernelPath::Avx512Vnni => !self.vnni.is_empty(),
        }
    }
}

/// Runs output rows `rows` on `path`; `dst` holds exactly those rows (`rows.len() · out_w ·
/// slot.pixel_stride`). Returns `false` (nothing written) when the path cannot run this
/// layer (scalar path, weights not packed, or a kernel window wider than the stage buffer):
/// the caller then runs the scalar kernel. Sizes were checked by the caller.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_rows(
    path: KernelPath,
    packed: &Packed,
    g: &Geom,
    bias: &[i32],
    mult: &[f32],
    input: &[i8],
    dst: &mut [i8],
    slot: ChannelSlot,
    rows: Range<usize>,
) -> bool {
    if path == KernelPath::Scalar || !packed.has(path) || !path.is_available() {
        return false;
    }
    if bias.len() != g.out_c || mult.len() != g.out_c {
        return false;
    }
    let esize = if path == KernelPath::Avx2 { 2 } else { 1 };
    let Some(plan) = Plan::new(g, esize) else {
        return false;
    };
    if rows.is_empty() {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    {
        match path {
            // SAFETY: the path is available on this CPU (checked above), the packed weights
            // exist for it, and the caller checked every buffer size against `g`.
            KernelPath::Avx512Vnni => unsafe {
                x86::vnni_rows(&plan, packed, g, bias, mult, input, dst, slot, rows)
            },
            // SAFETY: as above, for AVX2.
            KernelPath::Avx2 => unsafe {
                x86::avx2_rows(&plan, packed, g, bias, mult, input, dst, slot, rows)
            },
            KernelPath::Scalar => return false,
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (plan, bias, mult, input, dst, slot, rows);
        false
    }
}

/// How a call is cut into staged blocks.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Plan {
    /// Output columns per column chunk.
    cols: usize,
    /// Element size of the stage (1: VNNI bytes, 2: AVX2 `i16`).
    esize: usize,
}

impl Plan {
    fn new(g: &Geom, esize: usize) -> Option<Plan> {
        let px = g.in_c.checked_mul(esize)?;
        let budget = (STAGE_BYTES - SLACK) / px.checked_mul(g.k)?;
        if budget < g.k {
            return None;
        }
        let cols = ((budget - g.k) / g.stride + 1).min(g.out_w).max(1);
        Some(Plan { cols, esize })
    }
}

// The AVX-512 intrinsics are stable since Rust 1.89: this module needs that toolchain
// (the workspace's declared rust-version, 1.80, must be raised to 1.89 for it).
#[cfg(target_arch = "x86_64")]
#[clippy::msrv = "1.89"]
// Register-blocked loops index several per-block arrays (accumulators, weights,
// multipliers, masks) in lockstep; index loops say that most plainly.
#[allow(clippy::needless_range_loop)]
mod x86 {
    use super::{Geom, Packed, Plan, SLACK, STAGE_BYTES};
    use crate::conv::ChannelSlot;
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;
    use std::ops::Range;

    /// One staged block: input columns for output columns `c0..c1`, input rows for output
    /// rows `b0..b1`.
    struct Block {
        c0: usize,
        c1: usize,
        b0: usize,
        b1: usize,
        /// Bytes of one staged row.
        row_bytes: usize,
    }

    /// The staged blocks of a call, in a fixed order (column chunks, then row blocks).
    struct Blocks<'a> {
        plan: &'a Plan,
        g: &'a Geom,
        rows: Range<usize>,
        c0: usize,
        b0: usize,
    }

    fn staged_blocks<'a>(plan: &'a Plan, g: &'a Geom, rows: &Range<usize>) -> Blocks<'a> {
        Blocks {
            plan,
            g,
            rows: rows.clone(),
            c0: 0,
            b0: rows.start,
        }
    }

    impl Iterator for Blocks<'_> {
        type Item = Block;

        fn next(&mut self) -> Option<Block> {
            let g = self.g;
            if self.rows.is_empty() || self.c0 >= g.out_w {
                return None;
            }
            let c0 = self.c0;
            let c1 = (c0 + self.plan.cols).min(g.out_w);
            let cw = (c1 - c0 - 1) * g.stride + g.k;
            let row_bytes = cw * g.in_c * self.plan.esize;
            let rows_fit = (STAGE_BYTES - SLACK) / row_bytes; // >= k by Plan::new
            let per_block = (rows_fit - g.k) / g.stride + 1;
            let b0 = self.b0;
            let b1 = (b0 + per_block).min(self.rows.end);
            if b1 >= self.rows.end {
                self.b0 = self.rows.start;
                self.c0 = c1;
            } else {
                self.b0 = b1;
            }
            Some(Block {
                c0,
                c1,
                b0,
                b1,
                row_bytes,
            })
        }
    }

    /// Writes the staged rows of `blk` into `stage` with `conv(x)` for inside values and
    /// `pad` for padded ones, then zeroes `SLACK` elements after them. Returns nothing; all
    /// indices stay inside `stage` (sized by the plan).
    #[inline(always)]
    fn stage_block<T: Copy + Default>(
        g: &Geom,
        blk: &Block,
        input: &[i8],
        stage: &mut [T],
        pad: T,
        conv: impl Fn(i8) -> T,
    ) {
        let (s, p, k, c) = (g.stride, g.pad, g.k, g.in_c);
        let cw = (blk.c1 - blk.c0 - 1) * s + k;
        let rh = (blk.b1 - blk.b0 - 1) * s + k;
        let row_elems = cw * c;
        // Staged column j is input column c0*s + j - p.
        let first = blk.c0 * s;
        let left = p.saturating_sub(first).min(cw);
        let ix0 = (first + left).saturating_sub(p);
        let inside = g.in_w.saturating_sub(ix0).min(cw - left);
        for r in 0..rh {
            let row = &mut stage[r * row_elems..(r + 1) * row_elems];
            let iy = blk.b0 * s + r;
            if iy < p || iy - p >= g.in_h {
                row.fill(pad);
                continue;
            }
            let iy = iy - p;
            row[..left * c].fill(pad);
            let src = &input[(iy * g.in_w + ix0) * c..][..inside * c];
            for (d, &x) in row[left * c..(left + inside) * c].iter_mut().zip(src) {
                *d = conv(x);
            }
            row[(left + inside) * c..].fill(pad);
        }
        let end = rh * row_elems;
        let slack = SLACK / std::mem::size_of::<T>();
        stage[end..end + slack].fill(T::default());
    }

    // ---------------------------------------------------------------- AVX-512 VNNI

    /// Per-call constants of the VNNI requantization.
    struct VnniOut {
        lo: __m512,
        hi: __m512,
        zp: __m512i,
    }

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn vnni_rows(
        plan: &Plan,
        packed: &Packed,
        g: &Geom,
        bias: &[i32],
        mult: &[f32],
        input: &[i8],
        dst: &mut [i8],
        slot: ChannelSlot,
        rows: Range<usize>,
    ) {
        // SAFETY: the caller (`run_rows`) checked that the CPU has AVX-512 F/BW/VL/VNNI and every buffer size; all pointer arithmetic below stays inside `stage` (sized by `Plan`, with `SLACK` zeroed bytes for the last group's overread), the packed weights (`blocks · k · g4 · 64` bytes, `vnni_wsum` padded to whole blocks), `bias`/`mult` (masked loads of `out_c` lanes) and the output row (masked stores inside the channel slot).
        unsafe {
            let mut stage_mem = MaybeUninit::<[u8; STAGE_BYTES]>::uninit();
            // Zero-initialise once (cheap next to the convolution); every byte read is then
            // initialised whatever the block shape.
            // Writing zeros to the whole array makes it a valid `[u8; N]`.
            std::ptr::write_bytes(stage_mem.as_mut_ptr(), 0, 1);
            let stage: &mut [u8; STAGE_BYTES] = stage_mem.assume_init_mut();
            let kc = g.k * g.in_c;
            let g4 = kc.div_ceil(4);
            let blocks = g.out_c.div_ceil(16);
            let block_stride = g.k * g4 * 64;
            let zpb = (g.x_zp as u8) ^ 0x80;
            let corr = 128 + i32::from(g.x_zp);
            let yzp = i32::from(g.y_zp);
            let out = VnniOut {
                lo: _mm512_set1_ps(if g.relu { 0.0 } else { (-128 - yzp) as f32 }),
                hi: _mm512_set1_ps((127 - yzp) as f32),
                zp: _mm512_set1_epi32(yzp),
            };
            let px_stride = g.stride * g.in_c;
            let row_len = g.out_w * slot.pixel_stride;
            for blk in staged_blocks(plan, g, &rows) {
                let blk = &blk;
                stage_block(g, blk, input, &mut stage[..], zpb, |x| (x as u8) ^ 0x80);
                let npx = blk.c1 - blk.c0;
                for oy in blk.b0..blk.b1 {
                    let srow = stage[(oy - blk.b0) * g.stride * blk.row_bytes..].as_ptr();
                    let orow = &mut dst[(oy - rows.start) * row_len..][..row_len];
                    let mut b = 0;
                    while b < blocks {
                        let ob = (blocks - b).min(4);
                        // Accumulator start, multipliers and store masks of blocks b..b+ob.
                        let mut init = [_mm512_setzero_si512(); 4];
                        let mut mv = [_mm512_setzero_ps(); 4];
                        let mut masks = [0u16; 4];
                        for j in 0..ob {
                            let oc0 = (b + j) * 16;
                            let n = (g.out_c - oc0).min(16);
                            let m: u16 = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
                            masks[j] = m;
                            let bv = _mm512_maskz_loadu_epi32(m, bias.as_ptr().add(oc0));
                            let ws = _mm512_loadu_si512(
                                packed.vnni_wsum.as_ptr().add(oc0) as *const __m512i
                            );
                            init[j] = _mm512_sub_epi32(
                                bv,
                                _mm512_mullo_epi32(ws, _mm512_set1_epi32(corr)),
                            );
                            mv[j] = _mm512_maskz_loadu_ps(m, mult.as_ptr().add(oc0));
                        }
                        let wptr = packed.vnni.as_ptr().add(b * block_stride) as *const u8;
                        let t = VnniTile {
                            srow,
                            row_bytes: blk.row_bytes,
                            px_stride,
                            g4,
                            k: g.k,
                            wptr,
                            block_stride,
                            init: &init,
                            mult: &mv,
                            masks: &masks,
                            out: &out,
                        };
                        let obase = orow
                            .as_mut_ptr()
                            .add(blk.c0 * slot.pixel_stride + slot.channel_offset + b * 16);
                        match ob {
                            1 => vnni_pixels::<1, 12>(&t, npx, obase, slot.pixel_stride),
                            2 => vnni_pixels::<2, 12>(&t, npx, obase, slot.pixel_stride),
                            3 => vnni_pixels::<3, 8>(&t, npx, obase, slot.pixel_stride),
                            _ => vnni_pixels::<4, 6>(&t, npx, obase, slot.pixel_stride),
                        }
                        b += ob;
                    }
                }
            }
        }
    }

    /// Inputs of one VNNI tile that do not depend on the pixel.
    struct VnniTile<'a> {
        srow: *const u8,
        row_bytes: usize,
        px_stride: usize,
        g4: usize,
        k: usize,
        wptr: *const u8,
        block_stride: usize,
        init: &'a [__m512i; 4],
        mult: &'a [__m512; 4],
        masks: &'a [u16; 4],
        out: &'a VnniOut,
    }

    /// All `npx` pixels of one output row for `OB` channel blocks, `NP` pixels per tile.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn vnni_pixels<const OB: usize, const NP: usize>(
        t: &VnniTile<'_>,
        npx: usize,
        obase: *mut i8,
        ops: usize,
    ) {
        // SAFETY: tiles cover pixels `0..npx` of the staged chunk; `obase` points at the first pixel's channel slot and each tile writes only its own pixels (see `vnni_rows`).
        unsafe {
            let mut x = 0;
            while x + NP <= npx {
                vnni_tile::<OB, NP>(t, x, obase.add(x * ops), ops);
                x += NP;
            }
            let rem = npx - x;
            let o = obase.add(x * ops);
            match rem {
                0 => {}
                1 => vnni_tile::<OB, 1>(t, x, o, ops),
                2 => vnni_tile::<OB, 2>(t, x, o, ops),
                3 => vnni_tile::<OB, 3>(t, x, o, ops),
                4 => vnni_tile::<OB, 4>(t, x, o, ops),
                5 => vnni_tile::<OB, 5>(t, x, o, ops),
                6 => vnni_tile::<OB, 6>(t, x, o, ops),
                7 => vnni_tile::<OB, 7>(t, x, o, ops),
                8 => vnni_tile::<OB, 8>(t, x, o, ops),
                9 => vnni_tile::<OB, 9>(t, x, o, ops),
                10 => vnni_tile::<OB, 10>(t, x, o, ops),
                _ => vnni_tile::<OB, 11>(t, x, o, ops),
            }
        }
    }

    /// `NP` consecutive output pixels starting at tile pixel `x0`, `OB` blocks of 16
    /// output channels: `k · g4 · OB` weight loads, `k · g4 · NP` broadcasts,
    /// `k · g4 · NP · OB` `vpdpbusd`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn vnni_tile<const OB: usize, const NP: usize>(
        t: &VnniTile<'_>,
        x0: usize,
        out: *mut i8,
        ops: usize,
    ) {
        // SAFETY: pixel `x0 + n < npx` reads staged bytes up to its window end plus 3 (inside the stage and its zeroed slack), weight groups `q < g4` of blocks `< OB` inside the packed weights, and writes masked lanes of its own pixel's slot (see `vnni_rows`).
        unsafe {
            let mut acc = [[_mm512_setzero_si512(); OB]; NP];
            for a in acc.iter_mut() {
                for (j, v) in a.iter_mut().enumerate() {
                    *v = t.init[j];
                }
            }
            let base = t.srow.add(x0 * t.px_stride);
            for ky in 0..t.k {
                let arow = base.add(ky * t.row_bytes);
                let wrow = t.wptr.add(ky * t.g4 * 64);
                for q in 0..t.g4 {
                    let mut w = [_mm512_setzero_si512(); OB];
                    for (j, wj) in w.iter_mut().enumerate() {
                        *wj = _mm512_loadu_si512(wrow.add(j * t.block_stride + q * 64) as *const _);
                    }
                    for (n, an) in acc.iter_mut().enumerate() {
                        let p = arow.add(n * t.px_stride + q * 4) as *const i32;
                        let a = _mm512_set1_epi32(p.read_unaligned());
                        for j in 0..OB {
                            an[j] = _mm512_dpbusd_epi32(an[j], a, w[j]);
                        }
                    }
                }
            }
            for (n, an) in acc.iter().enumerate() {
                for j in 0..OB {
                    let f = _mm512_mul_ps(_mm512_cvtepi32_ps(an[j]), t.mult[j]);
                    let f = _mm512_min_ps(_mm512_max_ps(f, t.out.lo), t.out.hi);
                    let r = _mm512_add_epi32(_mm512_cvtps_epi32(f), t.out.zp);
                    let b = _mm512_cvtepi32_epi8(r);
                    _mm_mask_storeu_epi8(out.add(n * ops + j * 16), t.masks[j], b);
                }
            }
        }
    }

    // ---------------------------------------------------------------- AVX2

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2_rows(
        plan: &Plan,
        packed: &Packed,
        g: &Geom,
        bias: &[i32],
        mult: &[f32],
        input: &[i8],
        dst: &mut [i8],
        slot: ChannelSlot,
        rows: Range<usize>,
    ) {
        // SAFETY: the caller (`run_rows`) checked that the CPU has AVX2 and every buffer size; reads stay inside `stage` (sized by `Plan`, with zeroed slack for the last pair's overread) and the packed weights (`blocks · k · g2 · 16` values), writes inside the output row's channel slot.
        unsafe {
            let mut stage = [0i16; STAGE_BYTES / 2];
            let kc = g.k * g.in_c;
            let g2 = kc.div_ceil(2);
            let blocks = g.out_c.div_ceil(8);
            let block_stride = g.k * g2 * 16; // in i16
            let xzp = i16::from(g.x_zp);
            let yzp = i32::from(g.y_zp);
            let lo = _mm256_set1_ps(if g.relu { 0.0 } else { (-128 - yzp) as f32 });
            let hi = _mm256_set1_ps((127 - yzp) as f32);
            let zp = _mm256_set1_epi32(yzp);
            let px_stride = g.stride * g.in_c; // in i16
            let row_len = g.out_w * slot.pixel_stride;
            for blk in staged_blocks(plan, g, &rows) {
                let blk = &blk;
                stage_block(g, blk, input, &mut stage[..], 0i16, |x| i16::from(x) - xzp);
                let row_elems = blk.row_bytes / 2;
                let npx = blk.c1 - blk.c0;
                for oy in blk.b0..blk.b1 {
                    let srow = stage[(oy - blk.b0) * g.stride * row_elems..].as_ptr();
                    let orow = &mut dst[(oy - rows.start) * row_len..][..row_len];
                    let mut b = 0;
                    while b < blocks {
                        let ob = (blocks - b).min(2);
                        let mut init = [_mm256_setzero_si256(); 2];
                        let mut mv = [_mm256_setzero_ps(); 2];
                        let mut valid = [0usize; 2];
                        for j in 0..ob {
                            let oc0 = (b + j) * 8;
                            let n = (g.out_c - oc0).min(8);
                            valid[j] = n;
                            let mut bb = [0i32; 8];
                            let mut mm = [0f32; 8];
                            bb[..n].copy_from_slice(&bias[oc0..oc0 + n]);
                            mm[..n].copy_from_slice(&mult[oc0..oc0 + n]);
                            init[j] = _mm256_loadu_si256(bb.as_ptr() as *const __m256i);
                            mv[j] = _mm256_loadu_ps(mm.as_ptr());
                        }
                        let t = Avx2Tile {
                            srow,
                            row_elems,
                            px_stride,
                            g2,
                            k: g.k,
                            wptr: packed.avx2.as_ptr().add(b * block_stride),
                            block_stride,
                            init: &init,
                            mult: &mv,
                            valid: &valid,
                            lo,
                            hi,
                            zp,
                        };
                        let obase = orow
                            .as_mut_ptr()
                            .add(blk.c0 * slot.pixel_stride + slot.channel_offset + b * 8);
                        if ob == 1 {
                            avx2_pixels::<1, 8>(&t, npx, obase, slot.pixel_stride);
                        } else {
                            avx2_pixels::<2, 4>(&t, npx, obase, slot.pixel_stride);
                        }
                        b += ob;
                    }
                }
            }
        }
    }

    /// Inputs of one AVX2 tile that do not depend on the pixel.
    struct Avx2Tile<'a> {
        srow: *const i16,
        row_elems: usize,
        px_stride: usize,
        g2: usize,
        k: usize,
        wptr: *const i16,
        block_stride: usize,
        init: &'a [__m256i; 2],
        mult: &'a [__m256; 2],
        valid: &'a [usize; 2],
        lo: __m256,
        hi: __m256,
        zp: __m256i,
    }

    #[target_feature(enable = "avx2")]
    unsafe fn avx2_pixels<const OB: usize, const NP: usize>(
        t: &Avx2Tile<'_>,
        npx: usize,
        obase: *mut i8,
        ops: usize,
    ) {
        // SAFETY: tiles cover pixels `0..npx` of the staged chunk, each writing only its own pixels (see `avx2_rows`).
        unsafe {
            let mut x = 0;
            while x + NP <= npx {
                avx2_tile::<OB, NP>(t, x, obase.add(x * ops), ops);
                x += NP;
            }
            let o = obase.add(x * ops);
            match npx - x {
                0 => {}
                1 => avx2_tile::<OB, 1>(t, x, o, ops),
                2 => avx2_tile::<OB, 2>(t, x, o, ops),
                3 => avx2_tile::<OB, 3>(t, x, o, ops),
                4 => avx2_tile::<OB, 4>(t, x, o, ops),
                5 => avx2_tile::<OB, 5>(t, x, o, ops),
                6 => avx2_tile::<OB, 6>(t, x, o, ops),
                _ => avx2_tile::<OB, 7>(t, x, o, ops),
            }
        }
    }

    /// `NP` output pixels × `OB` blocks of 8 output channels with `vpmaddwd` + `vpaddd`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2_tile<const OB: usize, const NP: usize>(
        t: &Avx2Tile<'_>,
        x0: usize,
        out: *mut i8,
        ops: usize,
    ) {
        // SAFETY: pixel `x0 + n < npx` reads staged values up to its window end plus 1 (inside the stage and its zeroed slack), weight pairs `q < g2` of blocks `< OB`, and writes `valid[j]` lanes of its own pixel's slot (see `avx2_rows`).
        unsafe {
            let mut acc = [[_mm256_setzero_si256(); OB]; NP];
            for a in acc.iter_mut() {
                for (j, v) in a.iter_mut().enumerate() {
                    *v = t.init[j];
                }
            }
            let base = t.srow.add(x0 * t.px_stride);
            for ky in 0..t.k {
                let arow = base.add(ky * t.row_elems);
                let wrow = t.wptr.add(ky * t.g2 * 16);
                for q in 0..t.g2 {
                    let mut w = [_mm256_setzero_si256(); OB];
                    for (j, wj) in w.iter_mut().enumerate() {
                        *wj = _mm256_loadu_si256(wrow.add(j * t.block_stride + q * 16) as *const _);
                    }
                    for (n, an) in acc.iter_mut().enumerate() {
                        let p = arow.add(n * t.px_stride + q * 2) as *const i32;
                        let a = _mm256_set1_epi32(p.read_unaligned());
                        for j in 0..OB {
                            an[j] = _mm256_add_epi32(an[j], _mm256_madd_epi16(a, w[j]));
                        }
                    }
                }
            }
            for (n, an) in acc.iter().enumerate() {
                for j in 0..OB {
                    let f = _mm256_mul_ps(_mm256_cvtepi32_ps(an[j]), t.mult[j]);
                    let f = _mm256_min_ps(_mm256_max_ps(f, t.lo), t.hi);
                    let r = _mm256_add_epi32(_mm256_cvtps_epi32(f), t.zp);
                    let mut lanes = [0i32; 8];
                    _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, r);
                    let o = out.add(n * ops + j * 8);
                    for (l, &v) in lanes.iter().enumerate().take(t.valid[j]) {
                        // Values are in -128..=127 after the clamp and zero point.
                        *o.add(l) = v as i8;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{reference_forward_i64, Conv2d, ConvShape};
    use crate::network::{Backbone, NetConfig};
    use crate::quant::QParams;
    use proptest::prelude::*;
    use redline_runtime::rng::SplitMix64;

    /// A random layer (full-range weights including -128, random zero points, scales and
    /// bias) and a random input, on the given path.
    fn random_conv(shape: ConvShape, relu: bool, seed: u64) -> Conv2d {
        crate::conv::tests::random_conv_with(&mut SplitMix64::new(seed), shape, relu)
    }

    fn run(conv: &Conv2d, path: KernelPath, input: &[i8], h: usize, w: usize) -> Vec<i8> {
        let mut c = conv.clone();
        c.set_path(path).unwrap();
        let mut out = vec![0x55i8; c.output_len(h, w).unwrap()];
        c.forward(input, h, w, &mut out).unwrap();
        out
    }

    fn available() -> Vec<KernelPath> {
        KernelPath::ALL
            .into_iter()
            .filter(|p| p.is_available())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn every_path_equals_scalar_exactly(
            in_c in 1usize..=70,
            out_c in 1usize..=70,
            k in prop_oneof![Just(1usize), Just(3)],
            stride in 1usize..=2,
            pad in 0usize..=1,
            h in 1usize..=20,
            w in 1usize..=20,
            relu in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let shape = ConvShape { in_c, out_c, k, stride, pad: pad % k };
            let conv = random_conv(shape, relu, seed);
            let (oh, ow) = conv.out_hw(h, w);
            prop_assume!(oh > 0 && ow > 0);
            let mut r = SplitMix64::new(seed ^ 0xABCD);
            let input: Vec<i8> = (0..h * w * in_c).map(|_| r.next_i8()).collect();
            let want = reference_forward_i64(&conv, &input, h, w).unwrap();
            for path in available() {
                let got = run(&conv, path, &input, h, w);
                prop_assert_eq!(&got, &want, "path {:?}", path);
            }
        }

        #[test]
        fn row_splits_and_slots_are_exact_on_every_path(
            in_c in 1usize..=20,
            out_c in 1usize..=40,
            h in 1usize..=12,
            w in 1usize..=12,
            cut in 0usize..=12,
            offset in 0usize..=3,
            seed in any::<u64>(),
        ) {
            let shape = ConvShape { in_c, out_c, k: 3, stride: 1, pad: 1 };
            let conv = random_conv(shape, seed % 2 == 0, seed);
            let (oh, ow) = conv.out_hw(h, w);
            let mut r = SplitMix64::new(seed ^ 0x1234);
            let input: Vec<i8> = (0..h * w * in_c).map(|_| r.next_i8()).collect();
            let want = reference_forward_i64(&conv, &input, h, w).unwrap();
            let cut = cut.min(oh);
            let stride = offset + out_c + 2;
            for path in available() {
                let mut c = conv.clone();
                c.set_path(path).unwrap();
                let mut out = vec![0x55i8; oh * ow * stride];
                let slot = ChannelSlot { pixel_stride: stride, channel_offset: offset };
                let (a, b) = out.split_at_mut(cut * ow * stride);
                c.forward_rows_into_slot(&input, h, w, b, slot, cut..oh).unwrap();
                c.forward_rows_into_slot(&input, h, w, a, slot, 0..cut).unwrap();
                for px in 0..oh * ow {
                    let o = &out[px * stride..(px + 1) * stride];
                    prop_assert!(o[..offset].iter().all(|&v| v == 0x55));
                    prop_assert_eq!(&o[offset..offset + out_c], &want[px * out_c..(px + 1) * out_c]);
                    prop_assert!(o[offset + out_c..].iter().all(|&v| v == 0x55));
                }
            }
        }
    }

    #[test]
    fn extreme_values_are_exact_on_every_path() {
        // Saturated inputs, -128 weights and zero points at both ends of the range, with
        // 70 channels (not a multiple of 4 or 16) and the largest allowed bias.
        for (x, x_zp, wv) in [
            (127i8, -128i8, -128i8),
            (-128, 127, 127),
            (-128, -128, -128),
        ] {
            let shape = ConvShape {
                in_c: 70,
                out_c: 17,
                k: 3,
                stride: 1,
                pad: 1,
            };
            let limit = i32::MAX - 9 * 70 * 32768;
            let conv = Conv2d::new(
                shape,
                vec![wv; 17 * 9 * 70],
                vec![0.01; 17],
                (0..17)
                    .map(|c| if c % 2 == 0 { limit } else { -limit })
                    .collect(),
                QParams::new(0.01, x_zp),
                QParams::new(1e3, 3),
                false,
            )
            .unwrap();
            let input = vec![x; 5 * 6 * 70];
            let want = reference_forward_i64(&conv, &input, 5, 6).unwrap();
            for path in available() {
                assert_eq!(run(&conv, path, &input, 5, 6), want, "{path:?}");
            }
        }
    }

    #[test]
    fn wide_layers_beyond_one_stage_chunk_are_exact() {
        // 200 columns × 64 channels × 3 rows exceeds the stage: column chunks and row
        // blocks both kick in.
        let shape = ConvShape {
            in_c: 64,
            out_c: 20,
            k: 3,
            stride: 1,
            pad: 1,
        };
        let conv = random_conv(shape, true, 77);
        let (h, w) = (9, 200);
        let mut r = SplitMix64::new(5);
        let input: Vec<i8> = (0..h * w * 64).map(|_| r.next_i8()).collect();
        let want = reference_forward_i64(&conv, &input, h, w).unwrap();
        for path in available() {
            assert_eq!(run(&conv, path, &input, h, w), want, "{path:?}");
        }
    }

    #[test]
    fn backbone_layers_are_identical_on_every_path() {
        let cfg = NetConfig::default();
        let bb = Backbone::new(&cfg).unwrap();
        let (mut h, mut w) = (cfg.in_h, cfg.in_w);
        let mut r = SplitMix64::new(99);
        for layer in bb.layers() {
            let input: Vec<i8> = (0..h * w * layer.in_c).map(|_| r.next_i8()).collect();
            let scalar = run(layer, KernelPath::Scalar, &input, h, w);
            assert_eq!(scalar, reference_forward_i64(layer, &input, h, w).unwrap());
            for path in available() {
                assert_eq!(run(layer, path, &input, h, w), scalar, "{path:?}");
            }
            (h, w) = layer.out_hw(h, w);
        }
    }

    #[test]
    fn forcing_a_path_errors_exactly_when_the_cpu_lacks_it() {
        let conv = random_conv(
            ConvShape {
                in_c: 3,
                out_c: 4,
                k: 1,
                stride: 1,
                pad: 0,
            },
            false,
            1,
        );
        for path in KernelPath::ALL {
            let mut c = conv.clone();
            let before = c.path();
            let res = c.set_path(path);
            assert_eq!(res.is_ok(), path.is_available(), "{path:?}");
            if res.is_err() {
                assert_eq!(c.path(), before, "a refused path must not change the layer");
            } else {
                assert_eq!(c.path(), path);
            }
        }
        assert!(KernelPath::Scalar.is_available());
        assert_eq!(KernelPath::parse("VNNI").unwrap(), KernelPath::Avx512Vnni);
        assert_eq!(KernelPath::parse("avx2").unwrap(), KernelPath::Avx2);
        assert_eq!(KernelPath::parse("scalar").unwrap(), KernelPath::Scalar);
        let err = KernelPath::parse("sse9").unwrap_err().to_string();
        assert!(err.contains("scalar, avx2 or vnni"), "{err}");
        assert!(KernelPath::best().is_available());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn this_machine_uses_the_fastest_path_by_default() {
        // Without REDLINE_KERNEL the best path is chosen.
        if std::env::var("REDLINE_KERNEL").is_err() {
            let conv = random_conv(
                ConvShape {
                    in_c: 8,
                    out_c: 8,
                    k: 1,
                    stride: 1,
                    pad: 0,
                },
                false,
                2,
            );
            assert_eq!(conv.path(), KernelPath::best());
        }
    }
}
