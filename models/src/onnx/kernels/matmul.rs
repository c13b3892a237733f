//! The matrix product of two computed `i8` tensors (a transformer's `q·kᵀ` and
//! `softmax·v`): exact `i32` sums of `(a − a_zp)·(b − b_zp)`, then the convolutions'
//! requantization (`acc · (a_scale · b_scale / y_scale)` rounded half to even, `+ y_zp`,
//! clamped; ONNX Runtime's `QLinearMatMul`) or the float value `acc · a_scale · b_scale`.
//!
//! Contract: both operands row-major as the model holds them; integer sums are exact, so
//! the same bytes on every ISA and lane count. Cost: `m·n·k` multiply-adds per product on the
//! compiler's vectorised widening loop (no VNNI packing: `b` is not known before the run).
//! Never allocates or panics on the sizes the step was planned with.

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
                for (g, acc) in acc[..group].iter().enumerate() {
                    let y = &mut out[(r + g) * row_bytes..(r + g + 1) * row_bytes];
                    for (j, &s) in acc[..w].iter().enumerate() {
                        match how {
                            MatMulOut::Quantized { mult, zp, lo, hi } => {
                                y[j0 + j] = requant_f32(s as f32 * mult, zp, lo, hi);
                            }
                            MatMulOut::Float { scale } => {
                                let v = (s as f32 * scale).to_le_bytes();
                                let at = (j0 + j) * 4;
                                for (o, byte) in y[at..at + 4].iter_mut().zip(v) {
                                    *o = byte as i8;
                                }
                            }
                        }
                    }
                }
                j0 += w;
            }
            r += group;
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
}
