//! The float route's grouped convolution, depthwise included: a `Conv` with `group > 1`
//! whose weights a model leaves unquantized (a float model's MobileNet, EfficientNet,
//! ConvNeXt, RegNet or ShuffleNet blocks; a mixed-precision network's excluded depthwise
//! layer), on NHWC `f32` images.
//!
//! Contract: output channel `o` of group `g = o / (oc / groups)` at output pixel `(oy, ox)`
//! is `acc = 0; for each tap (ky, kx) inside the image, rows then columns; for j in
//! 0..c/groups { acc = fma(x[iy, ix, g·(c/groups) + j], w[o, j, ky, kx], acc) }`, then
//! `acc + bias[o]` when there is a bias. Taps in the padding are skipped (the product's
//! `fma(0, w, acc)` would leave `acc` as it is, up to the sign of a zero), so with one group
//! the result is the float product's over the unfolded image (`gemm`, taps in `(ky, kx, ci)`
//! order) value for value. Each output's chain depends on nothing but its own pixel and
//! channel, never on the channel block, the rows a lane runs or the vector width: the same
//! bits on every ISA and lane count. ONNX Runtime's float `Conv` sums in its own order, so
//! the two may differ in the last bits.
//!
//! Layout: the weights are packed at load as rows `(tap, j)` of `oc` floats, row
//! `(ky·kw + kx)·(c/groups) + j` holding `w[o, j, ky, kx]` at `o` ([`pack`]), so a pixel's
//! output channels read one contiguous slice per term. The output row is the accumulator:
//! each tap runs over the pixels that read inside the image with no per-pixel window test.
//! A depthwise convolution (one input channel per output channel) reads its input channels
//! as contiguous slices too; other groupings broadcast each input value over the group's
//! outputs. Cost: `out pixels · oc · taps · c/groups` fused multiply-adds, the output row
//! read and written once per term. Never allocates or panics on consistent sizes.

use super::super::super::isa::multiversion;
use super::super::Window;
use std::ops::Range;

/// The channels of a grouped convolution: `c` input and `oc` output channels in `groups`
/// groups (each a divisor of both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GroupedConvDims {
    pub c: usize,
    pub oc: usize,
    pub groups: usize,
}

impl GroupedConvDims {
    /// Input channels per group.
    pub(crate) fn in_per_group(&self) -> usize {
        self.c / self.groups
    }

    /// Output channels per group.
    pub(crate) fn out_per_group(&self) -> usize {
        self.oc / self.groups
    }

    /// Fused multiply-adds of one output row of window `win` (`out_w · oc · taps ·
    /// c/groups`, the padding's included).
    pub(crate) fn row_macs(&self, win: &Window) -> usize {
        win.out_w * self.oc * win.kh * win.kw * self.in_per_group()
    }
}

/// Floats of the packed weights of a convolution with `taps` kernel taps.
pub(crate) fn packed_len(dims: GroupedConvDims, taps: usize) -> usize {
    taps * dims.in_per_group() * dims.oc
}

/// Packs OIHW weights (`oc × c/groups × taps`, `taps = kh·kw` in row-major order) into
/// `out` ([`packed_len`] floats): row `tap·(c/groups) + j` holds `w[o, j, tap]` at `o`.
pub(crate) fn pack(dims: GroupedConvDims, taps: usize, w: &[f32], out: &mut [f32]) {
    let (icg, oc) = (dims.in_per_group(), dims.oc);
    for (o, wo) in w.chunks_exact(icg * taps).enumerate().take(oc) {
        for (j, wj) in wo.chunks_exact(taps).enumerate() {
            for (t, &v) in wj.iter().enumerate() {
                out[(t * icg + j) * oc + o] = v;
            }
        }
    }
}

multiversion! {
    /// Output rows `rows` (of `batch · out_h`; `out` holds exactly those rows, `out_w · oc`
    /// floats each) of the grouped convolution of NHWC `input` (`batch` images of
    /// `in_h · in_w · c` floats) by packed `w` ([`pack`]) plus `bias` (`oc` values, or
    /// empty for none); see the module's contract. Each output row is its own accumulator:
    /// zeroed, then tap by tap (rows, then columns) every pixel the tap reads inside the
    /// image, so the per-tap work is a run of pixels with no window tests.
    pub(crate) fn grouped_conv_rows(
        win: &Window,
        dims: GroupedConvDims,
        input: &[f32],
        w: &[f32],
        bias: &[f32],
        out: &mut [f32],
        rows: Range<usize>,
    ) {
        let (c, oc) = (dims.c, dims.oc);
        let (icg, ocg) = (dims.in_per_group(), dims.out_per_group());
        let img = win.in_h * win.in_w * c;
        for (r, y) in rows.zip(out.chunks_exact_mut((win.out_w * oc).max(1))) {
            let (b, oy) = (r / win.out_h, r % win.out_h);
            let x = &input[b * img..(b + 1) * img];
            y.fill(0.0);
            for ky in win.rows_inside(oy) {
                let iy = oy * win.sh + ky * win.dh - win.pt;
                let xrow = &x[iy * win.in_w * c..(iy + 1) * win.in_w * c];
                for kx in 0..win.kw {
                    let t = ky * win.kw + kx;
                    let wt = &w[t * icg * oc..(t + 1) * icg * oc];
                    for ox in out_columns_of_tap(win, kx) {
                        let ix = ox * win.sw + kx * win.dw - win.pl;
                        let xp = &xrow[ix * c..(ix + 1) * c];
                        let yp = &mut y[ox * oc..(ox + 1) * oc];
                        if icg == 1 && ocg == 1 {
                            // Depthwise: output channel o reads input channel o.
                            fma_slices(yp, xp, wt);
                        } else {
                            group_terms(dims, yp, xp, wt);
                        }
                    }
                }
            }
            if !bias.is_empty() {
                for yp in y.chunks_exact_mut(oc) {
                    for (a, &b) in yp.iter_mut().zip(bias) {
                        *a += b;
                    }
                }
            }
        }
    }
}

/// One tap's terms at one pixel, group by group: each of the group's input values `xp`
/// times its weight row of `wt` (the tap's `c/groups` rows of `oc`) over the group's
/// outputs `yp`.
#[inline(always)]
fn group_terms(dims: GroupedConvDims, yp: &mut [f32], xp: &[f32], wt: &[f32]) {
    let (oc, icg, ocg) = (dims.oc, dims.in_per_group(), dims.out_per_group());
    for ((yg, xg), g) in yp.chunks_exact_mut(ocg).zip(xp.chunks_exact(icg)).zip(0..) {
        for (j, &xv) in xg.iter().enumerate() {
            let row = &wt[j * oc + g * ocg..j * oc + (g + 1) * ocg];
            for (a, &wv) in yg.iter_mut().zip(row) {
                *a = xv.mul_add(wv, *a);
            }
        }
    }
}

/// `y[i] = fma(x[i], w[i], y[i])` over `y`'s length (`x` and `w` at least as long).
#[inline(always)]
fn fma_slices(y: &mut [f32], x: &[f32], w: &[f32]) {
    let n = y.len();
    let (x, w) = (&x[..n], &w[..n]);
    for i in 0..n {
        y[i] = x[i].mul_add(w[i], y[i]);
    }
}

/// The output columns whose tap `kx` reads a column inside the image: `ox` with
/// `0 <= ox·sw + kx·dw − pl < in_w`, one range (empty when none does).
#[inline(always)]
fn out_columns_of_tap(win: &Window, kx: usize) -> Range<usize> {
    let (off, sw) = (kx * win.dw, win.sw.max(1));
    let lo = win.pl.saturating_sub(off).div_ceil(sw);
    if win.in_w + win.pl <= off {
        return 0..0;
    }
    let hi = ((win.in_w - 1 + win.pl - off) / sw + 1).min(win.out_w);
    lo.min(hi)..hi
}

#[cfg(test)]
mod tests {
    use super::super::super::tests::test_window;
    use super::super::gemm;
    use super::*;
    use crate::onnx::isa::Isa;
    use redline_runtime::rng::SplitMix64;

    /// The contract's formula, one output at a time, from OIHW weights and NHWC input.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        win: &Window,
        dims: GroupedConvDims,
        batch: usize,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
    ) -> Vec<f32> {
        let (c, oc, icg, ocg) = (dims.c, dims.oc, dims.in_per_group(), dims.out_per_group());
        let mut y = Vec::new();
        for b in 0..batch {
            for oy in 0..win.out_h {
                for ox in 0..win.out_w {
                    for o in 0..oc {
                        let g = o / ocg;
                        let mut acc = 0.0f32;
                        for ky in 0..win.kh {
                            for kx in 0..win.kw {
                                let iy = (oy * win.sh + ky * win.dh) as isize - win.pt as isize;
                                let ix = (ox * win.sw + kx * win.dw) as isize - win.pl as isize;
                                if iy < 0
                                    || ix < 0
                                    || iy >= win.in_h as isize
                                    || ix >= win.in_w as isize
                                {
                                    continue;
                                }
                                let px = (b * win.in_h + iy as usize) * win.in_w + ix as usize;
                                for j in 0..icg {
                                    let xv = x[px * c + g * icg + j];
                                    let wv = w[((o * icg + j) * win.kh + ky) * win.kw + kx];
                                    acc = xv.mul_add(wv, acc);
                                }
                            }
                        }
                        y.push(match bias.get(o) {
                            Some(&b) => acc + b,
                            None => acc,
                        });
                    }
                }
            }
        }
        y
    }

    /// Runs the kernel over `rows` split in `split` parts.
    #[allow(clippy::too_many_arguments)]
    fn run(
        isa: Isa,
        win: &Window,
        dims: GroupedConvDims,
        batch: usize,
        x: &[f32],
        packed: &[f32],
        bias: &[f32],
        split: usize,
    ) -> Vec<f32> {
        let row = win.out_w * dims.oc;
        let rows = batch * win.out_h;
        let mut got = vec![f32::NAN; rows * row];
        let mut first = 0;
        for part in 0..split {
            let end = rows * (part + 1) / split;
            let out = &mut got[first * row..end * row];
            grouped_conv_rows(isa, win, dims, x, packed, bias, out, first..end);
            first = end;
        }
        got
    }

    /// Depthwise, depthwise with a channel multiplier, grouped with groups wider and
    /// narrower than the channel block, one group; strides, dilations, padding wider than
    /// the kernel: the bits of the contract's formula on every width and split.
    #[test]
    fn grouped_convolutions_are_the_formula_on_every_width_and_split() {
        let mut rng = SplitMix64::new(11);
        // (c, oc, groups, in h×w, kernel, stride, dilation, pads t,l,b,r, bias)
        for &(c, oc, groups, (in_h, in_w), (kh, kw), s, d, (pt, pl, pb, pr), with_bias) in &[
            (32, 32, 32, (7, 9), (3, 3), 1, 1, (1, 1, 1, 1), true),
            (96, 96, 96, (8, 8), (5, 5), 2, 1, (2, 2, 2, 2), false),
            (70, 70, 70, (5, 6), (7, 7), 1, 1, (3, 3, 3, 3), true),
            (8, 24, 8, (6, 5), (3, 3), 1, 2, (2, 2, 2, 2), true),
            (48, 48, 6, (6, 7), (3, 3), 2, 1, (1, 0, 1, 2), true),
            (160, 200, 2, (4, 4), (3, 3), 1, 1, (1, 1, 1, 1), false),
            (12, 9, 3, (3, 3), (2, 3), 3, 1, (0, 5, 1, 6), true),
        ] {
            let (out_h, out_w) = (
                (in_h + pt + pb - d * (kh - 1) - 1) / s + 1,
                (in_w + pl + pr - d * (kw - 1) - 1) / s + 1,
            );
            let win = test_window((in_h, in_w), (out_h, out_w), (kh, kw), s, d, (pt, pl));
            let dims = GroupedConvDims { c, oc, groups };
            let batch = 2;
            let x: Vec<f32> = (0..batch * in_h * in_w * c)
                .map(|_| rng.uniform(-2.0, 2.0))
                .collect();
            let w: Vec<f32> = (0..oc * dims.in_per_group() * kh * kw)
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect();
            let bias: Vec<f32> = if with_bias {
                (0..oc).map(|_| rng.uniform(-1.0, 1.0)).collect()
            } else {
                Vec::new()
            };
            let mut packed = vec![f32::NAN; packed_len(dims, kh * kw)];
            pack(dims, kh * kw, &w, &mut packed);
            let want = reference(&win, dims, batch, &x, &w, &bias);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for isa in Isa::available() {
                for split in [1, 2, 5] {
                    let got = run(isa, &win, dims, batch, &x, &packed, &bias, split);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{dims:?} {win:?} {} {split}",
                        isa.name()
                    );
                }
            }
        }
    }

    /// With one group the kernel is the float product over the unfolded image, value for
    /// value (padding is skipped here and multiplied by `0.0` there).
    #[test]
    fn one_group_is_the_product_over_the_unfolded_image() {
        let mut rng = SplitMix64::new(3);
        let (c, oc, in_h, in_w, k) = (5, 40, 6, 7, 3);
        let win = test_window((in_h, in_w), (in_h, in_w), (k, k), 1, 1, (1, 1));
        let dims = GroupedConvDims { c, oc, groups: 1 };
        let x: Vec<f32> = (0..in_h * in_w * c)
            .map(|_| rng.uniform(-2.0, 2.0))
            .collect();
        let w: Vec<f32> = (0..oc * c * k * k)
            .map(|_| rng.uniform(-1.0, 1.0))
            .collect();
        let bias: Vec<f32> = (0..oc).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let mut packed = vec![0f32; packed_len(dims, k * k)];
        pack(dims, k * k, &w, &mut packed);
        // The unfold in (ky, kx, ci) order and the weights as its [k·k·c, oc] matrix, whose
        // rows are exactly the packed rows here.
        let kk = k * k * c;
        let mut unfolded = Vec::with_capacity(in_h * in_w * kk);
        for oy in 0..in_h {
            for ox in 0..in_w {
                for ky in 0..k {
                    for kx in 0..k {
                        let (iy, ix) = ((oy + ky) as isize - 1, (ox + kx) as isize - 1);
                        for ci in 0..c {
                            let inside = (0..in_h as isize).contains(&iy)
                                && (0..in_w as isize).contains(&ix);
                            unfolded.push(if inside {
                                x[(iy as usize * in_w + ix as usize) * c + ci]
                            } else {
                                0.0
                            });
                        }
                    }
                }
            }
        }
        let mut b = vec![0f32; gemm::packed_len(kk, oc)];
        gemm::pack(kk, oc, &packed, &mut b);
        let mdims = gemm::FloatMatMulDims {
            batch: 1,
            m: in_h * in_w,
            k: kk,
            n: oc,
            b_batched: false,
        };
        let epilogue = gemm::Epilogue {
            alpha: 1.0,
            bias: &bias,
        };
        for isa in Isa::available() {
            let mut want = vec![0f32; in_h * in_w * oc];
            gemm::matmul_rows(isa, mdims, &unfolded, &b, epilogue, 0, &mut want);
            let got = run(isa, &win, dims, 1, &x, &packed, &bias, 1);
            assert_eq!(got, want, "{}", isa.name());
        }
    }
}
