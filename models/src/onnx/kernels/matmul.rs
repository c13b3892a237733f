//! The matrix product of two computed `i8` tensors (a transformer's `q·kᵀ` and
//! `softmax·v`): exact `i32` sums of `(a − a_zp)·(b − b_zp)`, then the convolutions'
//! requantization (`acc · (a_scale · b_scale / y_scale)` rounded half to even, `+ y_zp`,
//! clamped; ONNX Runtime's `QLinearMatMul`) or the float value `acc · a_scale · b_scale`.
//!
//! Contract: both operands row-major as the model holds them; integer sums are exact, so
//! the same bytes on every ISA, kernel and lane count. Cost: `m·n·k` multiply-adds per
//! product, on the compiler's vectorised widening loop ([`matmul_rows`]) or, on AVX-512
//! VNNI, with `vpdpbusd` ([`vnni`]) after `b` is packed once per run (`k·n` bytes moved per
//! product, a step of its own). Never allocates or panics on the sizes the step was planned
//! with.

use super::super::isa::multiversion;
use super::requant_f32;

/// How a [`matmul_rows`] product leaves its exact sums.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum MatMulOut {
    /// `i8` of `round_half_even(acc · mult) + zp`, clamped to `[lo, hi]`.
    Quantized { mult: f32, zp: i32, lo: i8, hi: i8 },
    /// `f32` of `acc · scale`.
    Float { scale: f32 },
}

impl MatMulOut {
    /// Bytes of one output element: 1 (`i8`) or 4 (`f32`).
    pub(crate) fn elem_bytes(self) -> usize {
        match self {
            MatMulOut::Quantized { .. } => 1,
            MatMulOut::Float { .. } => 4,
        }
    }
}

/// Sizes of one [`matmul_rows`] call's products: `batch` products of an `m × k` matrix by a
/// `k × n` one; `b_batched` false when every product takes the same `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MatMulDims {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub b_batched: bool,
}

/// Output columns computed at once: their `i32` sums live on the stack.
const COLS: usize = 32;

/// Output rows computed at once (sharing each loaded row of `b`).
const ROWS: usize = 4;

multiversion! {
    /// Output rows `first..` (over `batch · m`, as many as `out` holds `n` elements of
    /// `elem` bytes for) of `a · b`, `a` row-major `[batch, m, k]`, `b` row-major
    /// `[batch or 1, k, n]`; `out` is `i8` or little-endian `f32` bytes. For each row and
    /// block of [`COLS`] columns, the sums run over `k` with the columns in the vector lanes.
    pub(crate) fn matmul_rows(
        d: MatMulDims,
        a: &[i8],
        b: &[i8],
        zps: (i32, i32),
        how: MatMulOut,
        first: usize,
        out: &mut [i8],
    ) {
        let (k, n) = (d.k, d.n);
        let row_bytes = (n * how.elem_bytes()).max(1);
        let rows = out.len() / row_bytes;
        let mut r = 0;
        while r < rows {
            let row = first + r;
            let img = if d.b_batched { row / d.m.max(1) } else { 0 };
            let b_img = &b[img * k * n..(img + 1) * k * n];
            // Four rows of one image at once share each loaded row of `b`.
            let group = if r + ROWS <= rows && (!d.b_batched || (row + ROWS - 1) / d.m.max(1) == img) {
                ROWS
            } else {
                1
            };
            let a_rows = &a[row * k..(row + group) * k];
            let mut j0 = 0;
            while j0 < n {
                let w = COLS.min(n - j0);
                let mut acc = [[0i32; COLS]; ROWS];
                if w == COLS && group == ROWS {
                    // Full blocks: fixed sizes, so the sums stay in registers.
                    acc = row_block(a_rows, b_img, k, n, j0, zps);
                } else {
                    for (g, acc) in acc[..group].iter_mut().enumerate() {
                        for (kk, &x) in a_rows[g * k..(g + 1) * k].iter().enumerate() {
                            let av = i32::from(x) - zps.0;
                            let b_row = &b_img[kk * n + j0..kk * n + j0 + w];
                            for (s, &v) in acc[..w].iter_mut().zip(b_row) {
                                *s += av * (i32::from(v) - zps.1);
                            }
                        }
                    }
                }
                let elem = how.elem_bytes();
                for (g, acc) in acc[..group].iter().enumerate() {
                    let y = &mut out[(r + g) * row_bytes..(r + g + 1) * row_bytes];
                    store_sums(how, &acc[..w], &mut y[j0 * elem..(j0 + w) * elem]);
                }
                j0 += w;
            }
            r += group;
        }
    }
}

/// A product's output from its exact sums `sums` into `y` (`sums.len()` elements of
/// `how.elem_bytes()` bytes): every kernel's epilogue, so every kernel's bytes.
#[inline(always)]
fn store_sums(how: MatMulOut, sums: &[i32], y: &mut [i8]) {
    match how {
        MatMulOut::Quantized { mult, zp, lo, hi } => {
            for (o, &s) in y.iter_mut().zip(sums) {
                *o = requant_f32(s as f32 * mult, zp, lo, hi);
            }
        }
        MatMulOut::Float { scale } => {
            for (o, &s) in y.chunks_exact_mut(4).zip(sums) {
                for (b, v) in o.iter_mut().zip((s as f32 * scale).to_le_bytes()) {
                    *b = v as i8;
                }
            }
        }
    }
}

/// The sums of columns `j0..j0 + COLS` of [`ROWS`] output rows (`a_rows`, `k` values each,
/// times `b_img`, `n` columns a row): each row of `b` loaded and widened once for all of them.
#[inline(always)]
fn row_block(
    a_rows: &[i8],
    b_img: &[i8],
    k: usize,
    n: usize,
    j0: usize,
    zps: (i32, i32),
) -> [[i32; COLS]; ROWS] {
    let mut acc = [[0i32; COLS]; ROWS];
    for kk in 0..k {
        let Some(b_row) = b_img
            .get(kk * n + j0..kk * n + j0 + COLS)
            .and_then(|r| <&[i8; COLS]>::try_from(r).ok())
        else {
            continue;
        };
        let mut bv = [0i32; COLS];
        for c in 0..COLS {
            bv[c] = i32::from(b_row[c]) - zps.1;
        }
        for (g, acc) in acc.iter_mut().enumerate() {
            let av = a_rows.get(g * k + kk).map_or(0, |&x| i32::from(x) - zps.0);
            for c in 0..COLS {
                acc[c] += av * bv[c];
            }
        }
    }
    acc
}

/// The AVX-512 VNNI product: `b` packed per run ([`vnni::pack`], a `Step::PackB` of its
/// own), then 4 rows × 64 columns of sums per register tile.
///
/// `vpdpbusd` multiplies unsigned by signed bytes: `a` is read as `a_u = a + 128` (`a ^
/// 0x80`) and `b` as it is, so a tile's accumulators hold `Σ a_u·b`; the exact
/// `Σ (a − a_zp)(b − b_zp)` is that minus `b_zp·Σ a_u` (per row), minus `(128 + a_zp)·Σ b`
/// (per column, summed while packing), plus `k·(128 + a_zp)·b_zp`, all in wrapping `i32`
/// (the true value fits: `|a − a_zp|, |b − b_zp| ≤ 255` and `k < 2^15`, checked at load).
/// The epilogue is [`matmul_rows`]'s (`store_sums`), so the bytes are the same.
#[cfg(target_arch = "x86_64")]
pub(crate) mod vnni {
    use super::{store_sums, MatMulDims, MatMulOut};
    use std::arch::x86_64::*;

    /// Columns per packed block (one `zmm` of `i32` sums).
    const BLOCK: usize = 16;

    /// Bytes of one packed `k × n` matrix: `⌈n/16⌉` blocks of `⌈k/4⌉` 64-byte quads (block
    /// `cb`, quad `q`: byte `4c + t` is `b[4q + t][16cb + c]`, 0 beyond `k` or `n`), then
    /// the blocks' column sums (16 `i32` each, little-endian).
    pub(crate) fn packed_bytes(k: usize, n: usize) -> usize {
        let blocks = n.div_ceil(BLOCK);
        blocks * k.div_ceil(4) * 64 + blocks * BLOCK * 4
    }

    /// Packs row-major `b` (`k × n`) into `out` (`packed_bytes(k, n)` bytes), see
    /// [`packed_bytes`]. Portable code: `k·n` byte moves and adds.
    pub(crate) fn pack(k: usize, n: usize, b: &[i8], out: &mut [i8]) {
        let (quads, blocks) = (k.div_ceil(4), n.div_ceil(BLOCK));
        let (body, sums_out) = out.split_at_mut(blocks * quads * 64);
        for (cb, (blk, sums_out)) in body
            .chunks_exact_mut((quads * 64).max(1))
            .zip(sums_out.chunks_exact_mut(BLOCK * 4))
            .enumerate()
        {
            // One block of 16 columns: its rows of `b` read 16 bytes at a time, each byte
            // put at its (column, k mod 4) place in its quad, its column summed.
            let j0 = cb * BLOCK;
            let w = BLOCK.min(n - j0);
            blk.fill(0);
            let mut sums = [0i32; BLOCK];
            for (kk, row) in b.chunks_exact(n).take(k).enumerate() {
                let quad = &mut blk[(kk / 4) * 64..(kk / 4) * 64 + 64];
                let t = kk % 4;
                for (c, &v) in row[j0..j0 + w].iter().enumerate() {
                    quad[4 * c + t] = v;
                    sums[c] += i32::from(v);
                }
            }
            for (o, s) in sums_out.chunks_exact_mut(4).zip(sums) {
                for (byte, v) in o.iter_mut().zip(s.to_le_bytes()) {
                    *byte = v as i8;
                }
            }
        }
    }

    /// [`super::matmul_rows`] with `b` packed: the same arguments, `packed` holding one
    /// packed matrix per image of `b` (one when `!d.b_batched`), and the same output bytes.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX-512 F, BW, VL and VNNI; `a.len() >= d.batch · d.m · d.k`;
    /// `packed.len() >= images · packed_bytes(d.k, d.n)`; `out` holds whole rows of `d.n`
    /// elements starting at row `first`, all below `d.batch · d.m`; `d.k < 2^15`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(crate) unsafe fn matmul_rows(
        d: MatMulDims,
        a: &[i8],
        packed: &[i8],
        zps: (i32, i32),
        how: MatMulOut,
        first: usize,
        out: &mut [i8],
    ) {
        let (k, n, m) = (d.k, d.n, d.m.max(1));
        let (quads, blocks) = (k.div_ceil(4), n.div_ceil(BLOCK));
        let img_bytes = packed_bytes(k, n);
        let elem = how.elem_bytes();
        let row_bytes = (n * elem).max(1);
        let rows = out.len() / row_bytes;
        // k·(128 + a_zp)·b_zp, and −(128 + a_zp) for the column sums.
        let a_off = 128 + zps.0;
        let fixed = (k as i32).wrapping_mul(a_off).wrapping_mul(zps.1);
        let mut r = 0;
        while r < rows {
            let row = first + r;
            let img = if d.b_batched { row / m } else { 0 };
            let pk = &packed[img * img_bytes..(img + 1) * img_bytes];
            let group = if r + 4 <= rows && (!d.b_batched || (row + 3) / m == img) {
                4
            } else {
                1
            };
            let a_rows = &a[row * k..(row + group) * k];
            let mut row_fix = [0i32; 4];
            for (g, f) in row_fix[..group].iter_mut().enumerate() {
                let sum_u: i32 = a_rows[g * k..(g + 1) * k]
                    .iter()
                    .map(|&x| i32::from(x) + 128)
                    .sum();
                *f = fixed.wrapping_sub(zps.1.wrapping_mul(sum_u));
            }
            let mut cb = 0;
            while cb < blocks {
                let nb = if cb + 4 <= blocks { 4 } else { 1 };
                let mut tile = [[0i32; 4 * BLOCK]; 4];
                let sums_at = blocks * quads * 64;
                let t = Tile {
                    a_rows,
                    k,
                    quads,
                    pk,
                    sums_at,
                    cb,
                    a_off,
                    row_fix,
                };
                // SAFETY: the caller's CPU features; `a_rows` holds `group` rows of `k`,
                // `pk` one packed matrix with blocks `cb..cb + nb` (nb ≤ blocks − cb).
                unsafe {
                    match (group, nb) {
                        (4, 4) => t.run::<4, 4>(&mut tile),
                        (4, _) => t.run::<4, 1>(&mut tile),
                        (_, 4) => t.run::<1, 4>(&mut tile),
                        _ => t.run::<1, 1>(&mut tile),
                    }
                }
                let j0 = cb * BLOCK;
                let w = (nb * BLOCK).min(n - j0);
                for (g, sums) in tile[..group].iter().enumerate() {
                    let y = &mut out[(r + g) * row_bytes..(r + g + 1) * row_bytes];
                    store_sums(how, &sums[..w], &mut y[j0 * elem..(j0 + w) * elem]);
                }
                cb += nb;
            }
            r += group;
        }
    }

    /// One register tile's inputs: rows `a_rows` (`k` bytes each) against blocks `cb..`
    /// of the packed matrix `pk`.
    struct Tile<'a> {
        a_rows: &'a [i8],
        k: usize,
        quads: usize,
        pk: &'a [i8],
        /// Where the column sums start in `pk`.
        sums_at: usize,
        cb: usize,
        a_off: i32,
        row_fix: [i32; 4],
    }

    impl Tile<'_> {
        /// The exact sums of `R` rows × `NB` blocks of 16 columns into `tile[row][col]`.
        ///
        /// # Safety
        ///
        /// AVX-512 F, BW, VL and VNNI; `a_rows.len() >= R · k`; `pk` holds
        /// `packed_bytes(k, n)` bytes with at least `cb + NB` blocks.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn run<const R: usize, const NB: usize>(&self, tile: &mut [[i32; 4 * BLOCK]; 4]) {
            let (k, quads) = (self.k, self.quads);
            let full = k / 4;
            let mut acc = [[_mm512_setzero_si512(); NB]; R];
            let base = self.pk.as_ptr();
            for q in 0..quads {
                let mut bq = [_mm512_setzero_si512(); NB];
                for (nb, v) in bq.iter_mut().enumerate() {
                    let at = ((self.cb + nb) * quads + q) * 64;
                    debug_assert!(at + 64 <= self.pk.len());
                    // SAFETY: block cb + nb < blocks and q < quads: inside the packed body.
                    *v = unsafe { _mm512_loadu_si512(base.add(at).cast()) };
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let word = if q < full {
                        let at = r * k + 4 * q;
                        debug_assert!(at + 4 <= self.a_rows.len());
                        // SAFETY: 4q + 4 <= k, so the four bytes lie in row r.
                        unsafe { self.a_rows.as_ptr().add(at).cast::<i32>().read_unaligned() }
                    } else {
                        // The last, partial quad: bytes beyond k are 0 (packed b is 0 there).
                        let mut w = [0u8; 4];
                        for (t, x) in w.iter_mut().enumerate().take(k - 4 * q) {
                            *x = self.a_rows[r * k + 4 * q + t] as u8;
                        }
                        i32::from_le_bytes(w)
                    };
                    let av = _mm512_set1_epi32(word ^ 0x8080_8080u32 as i32);
                    for (s, b) in acc.iter_mut().zip(&bq) {
                        *s = _mm512_dpbusd_epi32(*s, av, *b);
                    }
                }
            }
            for nb in 0..NB {
                let at = self.sums_at + (self.cb + nb) * BLOCK * 4;
                debug_assert!(at + 64 <= self.pk.len());
                // SAFETY: the column sums follow the body, 64 bytes per block.
                let cs = unsafe { _mm512_loadu_si512(base.add(at).cast()) };
                let col_fix = _mm512_mullo_epi32(cs, _mm512_set1_epi32(-self.a_off));
                for r in 0..R {
                    let v = _mm512_add_epi32(
                        _mm512_add_epi32(acc[r][nb], col_fix),
                        _mm512_set1_epi32(self.row_fix[r]),
                    );
                    // SAFETY: tile[r] holds 64 i32, nb < 4.
                    unsafe {
                        _mm512_storeu_si512(tile[r][nb * BLOCK..].as_mut_ptr().cast(), v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::isa::Isa;
    use redline_runtime::rng::SplitMix64;

    /// Against the sums written out, on every width, split into two calls.
    #[test]
    fn products_are_exact_sums_on_every_width() {
        let mut g = SplitMix64::new(3);
        let d = MatMulDims {
            batch: 3,
            m: 5,
            k: 37,
            n: 70,
            b_batched: true,
        };
        let a: Vec<i8> = (0..d.batch * d.m * d.k).map(|_| g.next_i8()).collect();
        let b: Vec<i8> = (0..d.batch * d.k * d.n).map(|_| g.next_i8()).collect();
        let zps = (-3, 5);
        let how = MatMulOut::Quantized {
            mult: 0.0007,
            zp: -9,
            lo: -128,
            hi: 127,
        };
        let mut want = vec![0i8; d.batch * d.m * d.n];
        for (row, y) in want.chunks_exact_mut(d.n).enumerate() {
            let img = row / d.m;
            for (j, o) in y.iter_mut().enumerate() {
                let acc: i64 = (0..d.k)
                    .map(|i| {
                        i64::from(i32::from(a[row * d.k + i]) - zps.0)
                            * i64::from(i32::from(b[(img * d.k + i) * d.n + j]) - zps.1)
                    })
                    .sum();
                let r = (acc as f32 * 0.0007).round_ties_even() as i64 - 9;
                *o = r.clamp(-128, 127) as i8;
            }
        }
        for isa in Isa::available() {
            let mut y = vec![0i8; want.len()];
            let (p, q) = y.split_at_mut(4 * d.n);
            matmul_rows(isa, d, &a, &b, zps, how, 0, p);
            matmul_rows(isa, d, &a, &b, zps, how, 4, q);
            assert_eq!(y, want, "{}", isa.name());
            let mut f = vec![0i8; want.len() * 4];
            matmul_rows(
                isa,
                d,
                &a,
                &b,
                zps,
                MatMulOut::Float { scale: 0.5 },
                0,
                &mut f,
            );
            let acc0: i32 = (0..d.k)
                .map(|i| (i32::from(a[i]) - zps.0) * (i32::from(b[i * d.n]) - zps.1))
                .sum();
            let bytes: Vec<u8> = f[..4].iter().map(|&b| b as u8).collect();
            assert_eq!(
                f32::from_le_bytes(bytes.try_into().unwrap()),
                acc0 as f32 * 0.5
            );
        }
    }

    /// The VNNI kernel on packed `b` against the portable one: the same bytes, for shapes
    /// with every tail (rows not a multiple of 4, columns not of 16 or 64, `k` not of 4),
    /// one `b` for all products or one per product, split into two calls mid-image.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vnni_products_on_packed_b_are_the_portable_bytes() {
        if !(std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl"))
        {
            eprintln!("SKIPPED: this CPU has no AVX-512 VNNI; the packed kernel did not run");
            return;
        }
        let mut g = SplitMix64::new(5);
        for (batch, m, k, n, b_batched) in [
            (3, 5, 37, 70, true),
            (2, 197, 64, 197, true),
            (2, 9, 197, 64, true),
            (4, 7, 3, 129, false),
            (1, 4, 1, 16, true),
            (2, 13, 130, 63, false),
        ] {
            let d = MatMulDims {
                batch,
                m,
                k,
                n,
                b_batched,
            };
            let images = if b_batched { batch } else { 1 };
            let a: Vec<i8> = (0..batch * m * k).map(|_| g.next_i8()).collect();
            let b: Vec<i8> = (0..images * k * n).map(|_| g.next_i8()).collect();
            let bytes = vnni::packed_bytes(k, n);
            let mut packed = vec![0x55i8; images * bytes];
            for (i, o) in packed.chunks_exact_mut(bytes).enumerate() {
                vnni::pack(k, n, &b[i * k * n..(i + 1) * k * n], o);
            }
            for (zps, how) in [
                (
                    (-3, 5),
                    MatMulOut::Quantized {
                        mult: 0.0007,
                        zp: -9,
                        lo: -128,
                        hi: 127,
                    },
                ),
                ((127, -128), MatMulOut::Float { scale: 0.25 }),
            ] {
                let row = n * how.elem_bytes();
                let mut want = vec![0i8; batch * m * row];
                matmul_rows(Isa::PORTABLE, d, &a, &b, zps, how, 0, &mut want);
                let mut got = vec![0x11i8; want.len()];
                let cut = (m / 2 + 1).min(batch * m);
                let (p, q) = got.split_at_mut(cut * row);
                // SAFETY: the CPU features were checked above; the sizes are the kernel's.
                unsafe {
                    vnni::matmul_rows(d, &a, &packed, zps, how, 0, p);
                    vnni::matmul_rows(d, &a, &packed, zps, how, cut, q);
                }
                assert_eq!(got, want, "{d:?} {how:?}");
            }
        }
    }
}
