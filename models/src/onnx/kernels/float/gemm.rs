//! The float route's matrix product: `MatMul`/`Gemm` of `f32` operands (weights a model
//! leaves unquantized, a transformer's attention computed in float).
//!
//! Contract: every output element is `acc = 0; for k in 0..K { acc = fma(a[k], b[k], acc) }`
//! in index order (one correctly rounded fused multiply-add per term: an instruction on
//! AVX2, AVX-512 and NEON, `fmaf` on x86-64's baseline build), then `acc · alpha` when
//! `alpha ≠ 1`, then `+ bias[j]` when there is a bias. Each element's operations depend on
//! nothing but its own row and column, never on the row blocking, the chunk a lane runs or
//! the vector width: the same bits on every ISA and lane count. ONNX Runtime's `sgemm` adds
//! its terms in blocks of `K`, so the two differ in the last bits (the agreement tests
//! count it).
//!
//! Layout: `b` (`k × n`) is read from column panels of [`PANEL`] columns ([`pack`]): panel
//! `p` is `k` rows of columns `p·PANEL ..`, zero past `n`, so a block of [`ROWS`] output
//! rows and one panel keeps its `ROWS × PANEL` sums in registers (8 AVX-512 vectors) while
//! `k` runs. Constant weights are packed once at load; a computed second operand once per
//! run (`Step::FloatPackB`). Cost: `m·k·n` fused multiply-adds per product, plus the pack.
//! Never allocates or panics on consistent sizes.

use super::super::super::isa::multiversion;
use super::super::Window;
use std::ops::Range;

/// Columns of `b` per packed panel.
pub(crate) const PANEL: usize = 32;

/// Output rows a block keeps in registers.
const ROWS: usize = 4;

/// Floats of a `k × n` matrix packed into [`PANEL`]-column panels.
pub(crate) fn packed_len(k: usize, n: usize) -> usize {
    n.div_ceil(PANEL) * k * PANEL
}

/// Packs row-major `b` (`k × n`) into `out` ([`packed_len`] floats): panel `p`, row `r`
/// holds `b[r][p·PANEL ..]`, zeros past column `n`.
pub(crate) fn pack(k: usize, n: usize, b: &[f32], out: &mut [f32]) {
    for (p, panel) in out.chunks_exact_mut(k * PANEL).enumerate() {
        let (c0, w) = (p * PANEL, PANEL.min(n - p * PANEL));
        for (r, dst) in panel.chunks_exact_mut(PANEL).enumerate() {
            dst[..w].copy_from_slice(&b[r * n + c0..r * n + c0 + w]);
            dst[w..].fill(0.0);
        }
    }
}

/// The shape of a float matrix product: `batch` products of `[m, k]` by `[k, n]`, the
/// second operand one matrix for all (`b_batched` false) or one per product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FloatMatMulDims {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub b_batched: bool,
}

/// What is applied to each sum: `· alpha` (when not 1) and `+ bias[column]` (when not
/// empty; `n` values).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epilogue<'a> {
    pub alpha: f32,
    pub bias: &'a [f32],
}

multiversion! {
    /// Output rows `first .. first + out.len() / n` (rows counted over all products) of the
    /// product of row-major `a` (`[batch, m, k]`) and packed `b` ([`pack`]; one matrix, or
    /// `batch` of them one after the other); see the module's contract.
    pub(crate) fn matmul_rows(
        dims: FloatMatMulDims,
        a: &[f32],
        b: &[f32],
        epilogue: Epilogue<'_>,
        first: usize,
        out: &mut [f32],
    ) {
        let FloatMatMulDims { m, k, n, b_batched, .. } = dims;
        if n == 0 || m == 0 {
            return;
        }
        let rows = out.len() / n;
        let mut r = 0;
        // Runs of rows of one product (one `b`), panel by panel, blocks of ROWS rows.
        while r < rows {
            let row = first + r;
            let run = (m - row % m).min(rows - r);
            let bi = if b_batched { row / m } else { 0 };
            let b = &b[bi * packed_len(k, n)..(bi + 1) * packed_len(k, n)];
            let a = &a[row * k..(row + run) * k];
            let out = &mut out[r * n..(r + run) * n];
            for (p, panel) in b.chunks_exact(k * PANEL).enumerate() {
                let mut i = 0;
                while i + ROWS <= run {
                    block::<ROWS>(k, n, &a[i * k..], panel, p, epilogue, &mut out[i * n..]);
                    i += ROWS;
                }
                match run - i {
                    3 => block::<3>(k, n, &a[i * k..], panel, p, epilogue, &mut out[i * n..]),
                    2 => block::<2>(k, n, &a[i * k..], panel, p, epilogue, &mut out[i * n..]),
                    1 => block::<1>(k, n, &a[i * k..], panel, p, epilogue, &mut out[i * n..]),
                    _ => {}
                }
            }
            r += run;
        }
    }
}

/// `R` output rows (`a`'s rows from its start, `k` floats each) times panel `p`, written
/// to `out`'s rows (`n` floats each) at columns `p·PANEL ..` (at most `n`).
#[inline(always)]
fn block<const R: usize>(
    k: usize,
    n: usize,
    a: &[f32],
    panel: &[f32],
    p: usize,
    epilogue: Epilogue<'_>,
    out: &mut [f32],
) {
    let mut acc = [[0.0f32; PANEL]; R];
    let rows: [&[f32]; R] = std::array::from_fn(|r| &a[r * k..(r + 1) * k]);
    for (kk, bv) in panel.chunks_exact(PANEL).enumerate() {
        for (acc, row) in acc.iter_mut().zip(&rows) {
            let av = row[kk];
            for (s, &bw) in acc.iter_mut().zip(bv) {
                *s = av.mul_add(bw, *s);
            }
        }
    }
    // The sums are read with constant indices only (a whole panel, then `w` columns
    // stored), so they stay in registers through the loop above; the epilogue runs on
    // whole vectors: `· alpha`, then `+ bias` slice by slice.
    let (c0, w) = (p * PANEL, PANEL.min(n - p * PANEL));
    let bias = epilogue.bias.get(c0..c0 + w);
    for (r, acc) in acc.iter().enumerate() {
        let mut y = *acc;
        if epilogue.alpha != 1.0 {
            for v in &mut y {
                *v *= epilogue.alpha;
            }
        }
        let dst = &mut out[r * n + c0..r * n + c0 + w];
        match bias {
            Some(b) => {
                for ((d, &v), &b) in dst.iter_mut().zip(&y).zip(b) {
                    *d = v + b;
                }
            }
            None => dst.copy_from_slice(&y[..w]),
        }
    }
}

/// Output pixels `pixels` (of the `batch · out_h · out_w` in row-major order, any range;
/// `out` holds exactly those pixels) of the unfold of row-major NCHW `f32` images of `c`
/// channels for a convolution as a float product: each output pixel's `c · kh · kw` input
/// values, tap `(ci, ky, kx)` at `(ci · kh + ky) · kw + kx` (the order of the weights' own
/// OIHW layout), `0.0` where the tap falls in the padding. Reads the image as it is: no
/// transpose to NHWC first.
pub(crate) fn unfold_nchw(
    win: &Window,
    c: usize,
    input: &[f32],
    out: &mut [f32],
    pixels: Range<usize>,
) {
    let taps = win.kh * win.kw;
    let plane = win.in_h * win.in_w;
    if win.out_w == 0 || win.out_h == 0 {
        return;
    }
    for (p, pixel) in pixels.zip(out.chunks_exact_mut(c * taps)) {
        let (r, ox) = (p / win.out_w, p % win.out_w);
        let (b, oy) = (r / win.out_h, r % win.out_h);
        let image = &input[b * c * plane..(b + 1) * c * plane];
        let x0 = ox * win.sw;
        for (channel, window) in image.chunks_exact(plane).zip(pixel.chunks_exact_mut(taps)) {
            for (ky, trow) in window.chunks_exact_mut(win.kw).enumerate() {
                let iy = (oy * win.sh + ky * win.dh).checked_sub(win.pt);
                let Some(row) = iy.and_then(|y| channel.get(y * win.in_w..(y + 1) * win.in_w))
                else {
                    trow.fill(0.0);
                    continue;
                };
                if win.dw == 1 {
                    // Taps `lo..hi` inside the row, one copy; zeros on either side.
                    let start = x0 as isize - win.pl as isize;
                    let lo = (-start).clamp(0, win.kw as isize) as usize;
                    let hi =
                        (win.in_w as isize - start).clamp(lo as isize, win.kw as isize) as usize;
                    if hi == lo {
                        trow.fill(0.0);
                        continue;
                    }
                    let from = (start + lo as isize) as usize;
                    trow[..lo].fill(0.0);
                    trow[lo..hi].copy_from_slice(&row[from..from + hi - lo]);
                    trow[hi..].fill(0.0);
                    continue;
                }
                for (kx, t) in trow.iter_mut().enumerate() {
                    let ix = (x0 + kx * win.dw).checked_sub(win.pl);
                    *t = ix.and_then(|x| row.get(x)).copied().unwrap_or(0.0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::tests::test_window;
    use super::*;
    use crate::onnx::isa::Isa;
    use redline_runtime::rng::SplitMix64;

    /// The NCHW unfold of random images is, element for element, the input value each tap
    /// reads or `0.0` in the padding, for strides, dilations and pads wider than the kernel
    /// (a window wholly in the padding), over any split of the rows.
    #[test]
    fn nchw_unfold_reads_each_tap_or_zero() {
        let mut rng = SplitMix64::new(9);
        for &(c, in_h, in_w, kh, kw, s, d, pt, pl, pb, pr) in &[
            (3, 9, 11, 7, 7, 2, 1, 3, 3, 3, 3),
            (2, 5, 6, 3, 3, 1, 2, 2, 1, 2, 3),
            (1, 4, 4, 1, 1, 1, 1, 0, 0, 0, 0),
            (2, 3, 3, 2, 3, 3, 1, 0, 5, 1, 6),
        ] {
            let (out_h, out_w) = (
                (in_h + pt + pb - d * (kh - 1) - 1) / s + 1,
                (in_w + pl + pr - d * (kw - 1) - 1) / s + 1,
            );
            let win = test_window((in_h, in_w), (out_h, out_w), (kh, kw), s, d, (pt, pl));
            let batch = 2;
            let x: Vec<f32> = (0..batch * c * in_h * in_w)
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect();
            let k = c * kh * kw;
            let mut want = Vec::new();
            for b in 0..batch {
                for oy in 0..out_h {
                    for ox in 0..out_w {
                        for ci in 0..c {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * s + ky * d) as isize - pt as isize;
                                    let ix = (ox * s + kx * d) as isize - pl as isize;
                                    let inside = (0..in_h as isize).contains(&iy)
                                        && (0..in_w as isize).contains(&ix);
                                    want.push(if inside {
                                        x[((b * c + ci) * in_h + iy as usize) * in_w + ix as usize]
                                    } else {
                                        0.0
                                    });
                                }
                            }
                        }
                    }
                }
            }
            // Splits at whole rows and anywhere inside them.
            let pixels = batch * out_h * out_w;
            for split in [1, 3, 7] {
                let mut got = vec![f32::NAN; want.len()];
                let mut first = 0;
                for part in 0..split {
                    let end = pixels * (part + 1) / split;
                    let out = &mut got[first * k..end * k];
                    unfold_nchw(&win, c, &x, out, first..end);
                    first = end;
                }
                assert_eq!(got, want, "{win:?} split {split}");
            }
        }
    }

    /// Every shape (row counts around the block, widths around the panel, batched and
    /// shared `b`), every width and every way of splitting the rows gives the bits of the
    /// contract's formula, computed here one element at a time.
    #[test]
    fn products_are_the_formula_on_every_width_and_split() {
        let mut rng = SplitMix64::new(5);
        for &(batch, m, k, n, b_batched, alpha, with_bias) in &[
            (1, 1, 1, 1, false, 1.0, false),
            (1, 5, 7, 33, false, 1.0, true),
            (3, 6, 16, 31, true, 0.5, false),
            (2, 9, 40, 64, false, 2.0, true),
            (4, 3, 5, 70, true, 1.0, true),
        ] {
            let a: Vec<f32> = (0..batch * m * k).map(|_| rng.uniform(-2.0, 2.0)).collect();
            let images = if b_batched { batch } else { 1 };
            let b: Vec<f32> = (0..images * k * n)
                .map(|_| rng.uniform(-2.0, 2.0))
                .collect();
            let bias: Vec<f32> = if with_bias {
                (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
            } else {
                Vec::new()
            };
            let mut packed = vec![f32::NAN; images * packed_len(k, n)];
            for (src, dst) in b
                .chunks_exact(k * n)
                .zip(packed.chunks_exact_mut(packed_len(k, n)))
            {
                pack(k, n, src, dst);
            }
            let mut want = vec![0f32; batch * m * n];
            for (row, y) in want.chunks_exact_mut(n).enumerate() {
                let bi = if b_batched { row / m } else { 0 };
                for (j, y) in y.iter_mut().enumerate() {
                    let mut acc = 0.0f32;
                    for kk in 0..k {
                        acc = a[row * k + kk].mul_add(b[bi * k * n + kk * n + j], acc);
                    }
                    if alpha != 1.0 {
                        acc *= alpha;
                    }
                    *y = match bias.get(j) {
                        Some(&b) => acc + b,
                        None => acc,
                    };
                }
            }
            let dims = FloatMatMulDims {
                batch,
                m,
                k,
                n,
                b_batched,
            };
            let epilogue = Epilogue { alpha, bias: &bias };
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for isa in Isa::available() {
                for split in [1, 2, 5] {
                    let mut got = vec![0f32; batch * m * n];
                    let rows = batch * m;
                    let mut first = 0;
                    for c in 0..split {
                        let end = rows * (c + 1) / split;
                        let out = &mut got[first * n..end * n];
                        matmul_rows(isa, dims, &a, &packed, epilogue, first, out);
                        first = end;
                    }
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{dims:?} {} split {split}",
                        isa.name()
                    );
                }
            }
        }
    }
}
