//! Routes onto the dense convolution kernels ([`crate::conv::Conv2d`]) for convolutions
//! those kernels do not take as they are: dilated "same" convolutions as dilation phases
//! ([`Phases`]: split, a dense convolution of each phase image, merge), column-strided
//! ones with their columns read as channels ([`ColumnFold`]), and any other ungrouped one
//! (rectangular, strided and dilated, asymmetrically padded) with its taps gathered into
//! channels ([`Unfold`]: a pointwise convolution of the gathered image). All are
//! bit-identical to the direct convolution of the general kernel
//! ([`super::kernels::GeneralConv`], tested below) and, like every kernel in
//! [`super::kernels`], pure functions of their inputs that never allocate after the
//! lowering built them.

use std::ops::Range;

use super::kernels::Window;

/// The dilation phases of an `h × w` image for dilation `dh × dw` (rows × columns): phase
/// `(a, b)` is the sub-image of pixels `(a + dh·Y, b + dw·X)`, padded to the common size
/// [`Phases::ph`] × [`Phases::pw`] (`⌈h/dh⌉ × ⌈w/dw⌉`) with the input's zero point.
///
/// Why: a stride-1 convolution with dilation `dh × dw` and "same" padding `dh·(k/2)`,
/// `dw·(k/2)` computes output pixel `(a + dh·Y, b + dw·X)` from input pixels
/// `(a + dh·(Y + i), b + dw·(X + j))`, `i, j ∈ −k/2..=k/2` — phase `(a, b)` only, at unit
/// spacing. So it equals the dense
/// (dilation 1) convolution with padding `k/2` of each phase image, whose output phases
/// are merged back. A tap beyond a phase's real end is an image pixel beyond the edge, i.e.
/// padding, which is what the fill and the dense kernel's own padding give: the result is
/// bit-identical to the direct dilated convolution (tested against the general kernel).
/// Cost: one copy of the input and one of the output, against `k·k·in_c` multiply-adds per
/// output value on kernels 5–15× faster than the general one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Phases {
    /// Dilation of the rows (`>= 1`).
    pub dh: usize,
    /// Dilation of the columns (`>= 1`).
    pub dw: usize,
    /// Image height.
    pub h: usize,
    /// Image width.
    pub w: usize,
}

impl Phases {
    /// Rows of every phase image.
    pub fn ph(&self) -> usize {
        self.h.div_ceil(self.dh)
    }

    /// Columns of every phase image.
    pub fn pw(&self) -> usize {
        self.w.div_ceil(self.dw)
    }

    /// Phase images per image, `dh · dw`.
    pub fn count(&self) -> usize {
        self.dh * self.dw
    }

    /// Phase images from NHWC images of `c` channels: `rows` are rows of the output, which
    /// holds `batch · dh · dw` phase images (image `(b·dh + a)·dw + bx` is phase `(a, bx)`
    /// of image `b`) of `ph` rows of `pw · c` bytes; `out` holds exactly those rows.
    pub fn split(&self, c: usize, fill: i8, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let (dh, dw, ph) = (self.dh, self.dw, self.ph());
        for (r, orow) in rows.zip(out.chunks_exact_mut(self.pw() * c)) {
            let (img, py) = (r / ph, r % ph);
            let (b, phase) = (img / self.count(), img % self.count());
            let (a, bx) = (phase / dw, phase % dw);
            let y = a + dh * py;
            if y >= self.h {
                orow.fill(fill);
                continue;
            }
            let irow = &input[(b * self.h + y) * self.w * c..][..self.w * c];
            for (px, o) in orow.chunks_exact_mut(c).enumerate() {
                let x = bx + dw * px;
                if x < self.w {
                    copy_pixel(o, &irow[x * c..(x + 1) * c]);
                } else {
                    o.fill(fill);
                }
            }
        }
    }

    /// NHWC images of `c` channels from their phase images (the layout `split` writes):
    /// `rows` are image rows (`batch · h` in all) of `w · c` bytes; `out` holds those rows.
    pub fn merge(&self, c: usize, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let (dh, dw, ph, pw) = (self.dh, self.dw, self.ph(), self.pw());
        for (r, orow) in rows.zip(out.chunks_exact_mut(self.w * c)) {
            let (b, y) = (r / self.h, r % self.h);
            let (a, py) = (y % dh, y / dh);
            for (x, o) in orow.chunks_exact_mut(c).enumerate() {
                let img = (b * dh + a) * dw + x % dw;
                let at = ((img * ph + py) * pw + x / dw) * c;
                copy_pixel(o, &input[at..at + c]);
            }
        }
    }
}

/// Copies one pixel's channels. Pixels are tens of bytes: 16-byte moves inline, where
/// `copy_from_slice` of a run-time length calls `memcpy` once per pixel.
#[inline(always)]
fn copy_pixel(dst: &mut [i8], src: &[i8]) {
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (a, b) in (&mut d).zip(&mut s) {
        let b: &[i8; 16] = b.try_into().unwrap_or(&[0; 16]);
        a.copy_from_slice(b);
    }
    let (a, b) = (d.into_remainder(), s.remainder());
    for (x, y) in a.iter_mut().zip(b) {
        *x = *y;
    }
}

/// A convolution that keeps the rows and strides the columns by `s` (stride `1 × s`),
/// folded onto the dense kernels: the NHWC input `[h, w, c]` read as `[h, w/s, s·c]`
/// (column `s·X + p`, channel `ci` is folded column `X`, channel `p·c + ci`: the same
/// bytes, no copy) convolved at stride 1 with a square `k × k` kernel whose taps are the
/// original ones moved to where their columns fell.
///
/// Why: output column `X` reads input columns `s·X + t`, `t = kx − pad_left`; with
/// `t = s·o + p` (`p ∈ 0..s`) that is folded column `X + o`, channel block `p`. A tap beyond
/// the edge falls beyond the folded image's edge, where the dense kernel pads with the zero
/// point as ONNX does, and the taps no original tap lands on are zero weights: the result
/// is bit-identical to the direct convolution (tested against the general kernel).
/// Cost: `k·k·s·c` multiply-adds per output value, `s·k/kw` times the direct count (2× for a
/// 3×3 kernel at stride 1 × 2), on kernels 5–15× faster than the general one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ColumnFold {
    /// Column stride (`>= 2`).
    pub s: usize,
    /// Square kernel size of the folded convolution (the original kernel's height).
    pub k: usize,
    /// The original kernel's width and left padding.
    pub kw: usize,
    pub pl: usize,
}

impl ColumnFold {
    /// The fold of a convolution over `h × w` images, if it has one: kernel height `kh` odd,
    /// stride `1 × s` (`s >= 2` dividing `w`), no dilation, one group, "same" padding of the
    /// rows (`kh/2`), `w/s` output columns, and every tap's column within `kh/2` folded
    /// columns of the output's.
    pub fn of(win: &Window, h: usize, w: usize, groups: usize) -> Option<Self> {
        let (k, s) = (win.kh, win.sw);
        let fold = Self {
            s,
            k,
            kw: win.kw,
            pl: win.pl,
        };
        let reach = (0..win.kw).all(|kx| fold.offset(kx).unsigned_abs() <= k / 2);
        (k % 2 == 1
            && win.sh == 1
            && s >= 2
            && w.is_multiple_of(s)
            && win.dh == 1
            && win.dw == 1
            && groups == 1
            && win.pt == k / 2
            && win.out_h == h
            && win.out_w == w / s
            && reach)
            .then_some(fold)
    }

    /// Folded column offset of tap `kx` (may be negative).
    fn offset(&self, kx: usize) -> isize {
        (kx as isize - self.pl as isize).div_euclid(self.s as isize)
    }

    /// The folded weights, `[out_c, k, k, s·in_c]`, from `[out_c, k, kw, in_c]` (packed
    /// O, kh, kw, I as the dense kernels take them).
    pub fn weights(&self, w: &[i8], out_c: usize, in_c: usize) -> Vec<i8> {
        let (k, s, kw) = (self.k, self.s, self.kw);
        let mut out = vec![0i8; out_c * k * k * s * in_c];
        for o in 0..out_c {
            for ky in 0..k {
                for kx in 0..kw {
                    let t = kx as isize - self.pl as isize;
                    let col = (self.offset(kx) + (k / 2) as isize) as usize;
                    let block = t.rem_euclid(s as isize) as usize;
                    let from = ((o * k + ky) * kw + kx) * in_c;
                    let to = ((o * k + ky) * k + col) * s * in_c + block * in_c;
                    out[to..to + in_c].copy_from_slice(&w[from..from + in_c]);
                }
            }
        }
        out
    }
}

/// Any ungrouped convolution as a pointwise one: each output pixel's taps gathered into
/// the channels of one pixel of an "unfolded" image (`[batch, out_h, out_w, kh·kw·c]`, tap
/// `(ky, kx)` in channel block `ky·kw + kx`; a tap in the padding holds the input's zero
/// point), which a 1×1 dense convolution of `kh·kw·c` input channels turns into the output.
/// The packed weights `[out_c, kh, kw, c]` are already that convolution's `[out_c, kh·kw·c]`.
///
/// Why: the general kernel gathers each patch and sums it at 5–15× fewer multiply-adds per
/// second than the dense kernels (Inception's 1×7 and 7×1 convolutions: about 7 GMAC/s
/// against 150–200 on VNNI). Exact: the same integer sums (a padded tap is `x_zp − x_zp = 0`
/// as in the direct convolution) and the same requantization, so the same bytes (tested
/// against the general kernel). Cost: one write of the unfolded image, `kh·kw` times the
/// output's pixels times `c` bytes, held in the arena ([`Unfold::MAX_BYTES`] at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unfold {
    pub win: Window,
}

impl Unfold {
    /// The largest unfolded image taken (bytes): beyond it the arena would grow by more
    /// than the convolution is worth on a small board; the general kernel runs it.
    pub const MAX_BYTES: usize = 16 << 20;

    /// The unfold of an ungrouped convolution of `batch` images of `c` channels, unless its
    /// unfolded image would exceed [`Self::MAX_BYTES`].
    pub fn of(win: &Window, c: usize, batch: usize, groups: usize) -> Option<Self> {
        let bytes = batch
            .checked_mul(win.out_h)?
            .checked_mul(win.out_w)?
            .checked_mul(win.kh * win.kw)?
            .checked_mul(c)?;
        (groups == 1 && bytes > 0 && bytes <= Self::MAX_BYTES).then_some(Self { win: *win })
    }

    /// Channels of an unfolded pixel, `kh · kw · c`.
    pub fn channels(&self, c: usize) -> usize {
        self.win.kh * self.win.kw * c
    }

    /// The pointwise dense convolution of the unfolded image (`c` channels in the original
    /// image, `out_c` out): 1×1, stride 1, no padding.
    pub fn pointwise(&self, c: usize, out_c: usize) -> crate::conv::ConvShape {
        crate::conv::ConvShape {
            in_c: self.channels(c),
            out_c,
            k: 1,
            stride: 1,
            pad: 0,
        }
    }

    /// Unfolded rows from NHWC images of `c` channels: `rows` are output rows (`batch ·
    /// out_h` in all) of `out_w · kh · kw · c` bytes; `out` holds exactly those rows.
    pub fn run(&self, c: usize, fill: i8, input: &[i8], out: &mut [i8], rows: Range<usize>) {
        let w = self.win.out_w;
        self.run_pixels(c, fill, input, out, rows.start * w..rows.end * w);
    }

    /// Unfolded pixels from NHWC images of `c` channels: `pixels` index the output's
    /// `batch · out_h · out_w` pixels in row-major order (any range, whole rows or not),
    /// `kh · kw · c` bytes each; `out` holds exactly those pixels.
    pub fn run_pixels(
        &self,
        c: usize,
        fill: i8,
        input: &[i8],
        out: &mut [i8],
        pixels: Range<usize>,
    ) {
        let w = &self.win;
        if w.out_w == 0 || w.out_h == 0 {
            return;
        }
        for (p, pixel) in pixels.zip(out.chunks_exact_mut(self.channels(c))) {
            let (row, ox) = (p / w.out_w, p % w.out_w);
            let (b, oy) = (row / w.out_h, row % w.out_h);
            let image = &input[b * w.in_h * w.in_w * c..][..w.in_h * w.in_w * c];
            let mut taps = pixel.chunks_exact_mut(c);
            for ky in 0..w.kh {
                let iy = (oy * w.sh + ky * w.dh)
                    .checked_sub(w.pt)
                    .filter(|&y| y < w.in_h);
                for kx in 0..w.kw {
                    let Some(tap) = taps.next() else { return };
                    let ix = (ox * w.sw + kx * w.dw)
                        .checked_sub(w.pl)
                        .filter(|&x| x < w.in_w);
                    match (iy, ix) {
                        (Some(y), Some(x)) => {
                            copy_pixel(tap, &image[(y * w.in_w + x) * c..][..c]);
                        }
                        _ => tap.fill(fill),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod phase_tests {
    use super::*;
    use crate::conv::{Conv2d, ConvShape};
    use crate::onnx::isa::Isa;
    use crate::onnx::kernels::GeneralConv;
    use crate::quant::{requant_multiplier, QParams};
    use proptest::prelude::*;
    use redline_runtime::rng::SplitMix64;

    /// A random convolution case: input, weights, bias, quantization and the general
    /// kernel's direct result for `win` (NHWC, `batch` images).
    struct Case {
        input: Vec<i8>,
        weights: Vec<i8>,
        bias: Vec<i32>,
        w_scales: Vec<f32>,
        x_q: QParams,
        y_q: QParams,
        direct: Vec<i8>,
    }

    impl Case {
        /// The dense stride-1 "same" layer of `k × k` kernels over `in_c` channels with
        /// this case's bias and quantization and the given packed weights.
        fn dense(&self, in_c: usize, k: usize, weights: Vec<i8>, relu: bool) -> Conv2d {
            let shape = ConvShape {
                in_c,
                out_c: self.bias.len(),
                k,
                stride: 1,
                pad: k / 2,
            };
            let (w_scales, bias) = (self.w_scales.clone(), self.bias.clone());
            Conv2d::new(shape, weights, w_scales, bias, self.x_q, self.y_q, relu).unwrap()
        }
    }

    fn case(
        win: Window,
        (in_c, out_c, batch): (usize, usize, usize),
        seed: u64,
        relu: bool,
    ) -> Case {
        let mut rng = SplitMix64::new(seed);
        let mut bytes = |n: usize| -> Vec<i8> { (0..n).map(|_| rng.next_i8()).collect() };
        let input = bytes(batch * win.in_h * win.in_w * in_c);
        let weights = bytes(out_c * win.kh * win.kw * in_c);
        let extra = bytes(out_c + 2);
        let bias: Vec<i32> = extra[..out_c].iter().map(|&v| i32::from(v) * 97).collect();
        let x_q = QParams {
            scale: 0.02,
            zero_point: extra[out_c] / 4,
        };
        let y_q = QParams {
            scale: 0.9,
            zero_point: extra[out_c + 1] / 4,
        };
        let w_scales: Vec<f32> = (0..out_c).map(|o| 0.01 + 0.002 * o as f32).collect();
        let general = GeneralConv {
            win,
            in_c,
            out_c,
            groups: 1,
            weights: weights.clone(),
            bias: bias.clone(),
            multipliers: w_scales
                .iter()
                .map(|&ws| requant_multiplier(x_q.scale, ws, y_q.scale))
                .collect(),
            x_zp: i32::from(x_q.zero_point),
            y_zp: i32::from(y_q.zero_point),
            lo: if relu { y_q.zero_point } else { -128 },
            hi: 127,
            depthwise: Default::default(),
            grouped: Vec::new(),
        }
        .prepared();
        let mut direct = vec![0i8; batch * win.out_h * win.out_w * out_c];
        general
            .run(Isa::PORTABLE, &input, &mut direct, 0..batch * win.out_h)
            .unwrap();
        Case {
            input,
            weights,
            bias,
            w_scales,
            x_q,
            y_q,
            direct,
        }
    }

    /// The direct dilated convolution (the general kernel) and the phase route (split,
    /// dense kernel on every phase image, merge) give the same bytes.
    fn check(
        (d, k, h, w, in_c, out_c, batch): (usize, usize, usize, usize, usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        check_rect((d, d), (k, h, w, in_c, out_c, batch), seed, relu);
    }

    /// [`check`] with dilation `dh × dw`.
    fn check_rect(
        (dh, dw): (usize, usize),
        (k, h, w, in_c, out_c, batch): (usize, usize, usize, usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        let win = Window {
            in_h: h,
            in_w: w,
            out_h: h,
            out_w: w,
            kh: k,
            kw: k,
            sh: 1,
            sw: 1,
            dh,
            dw,
            pt: dh * (k / 2),
            pl: dw * (k / 2),
        };
        let c = case(win, (in_c, out_c, batch), seed, relu);
        let dense = c.dense(in_c, k, c.weights.clone(), relu);
        let (input, x_q, direct) = (c.input, c.x_q, c.direct);
        let p = Phases { dh, dw, h, w };
        let (ph, pw) = (p.ph(), p.pw());
        let images = batch * p.count();
        let mut split = vec![0i8; images * ph * pw * in_c];
        // Split in two uneven row ranges: the result must not depend on the split.
        let rows = images * ph;
        let cut = rows / 3;
        let (first, rest) = split.split_at_mut(cut * pw * in_c);
        p.split(in_c, x_q.zero_point, &input, first, 0..cut);
        p.split(in_c, x_q.zero_point, &input, rest, cut..rows);
        let mut phase_out = vec![0i8; images * ph * pw * out_c];
        let (img_in, img_out) = (ph * pw * in_c, ph * pw * out_c);
        for i in 0..images {
            dense
                .forward(
                    &split[i * img_in..(i + 1) * img_in],
                    ph,
                    pw,
                    &mut phase_out[i * img_out..(i + 1) * img_out],
                )
                .unwrap();
        }
        let mut merged = vec![0i8; batch * h * w * out_c];
        let cut = (batch * h) / 2;
        let (first, rest) = merged.split_at_mut(cut * w * out_c);
        p.merge(out_c, &phase_out, first, 0..cut);
        p.merge(out_c, &phase_out, rest, cut..batch * h);
        assert_eq!(
            merged, direct,
            "d {dh}x{dw} k {k} {h}x{w} {in_c}->{out_c} batch {batch}"
        );
    }

    #[test]
    fn phases_of_the_shipped_shapes() {
        // The trained dilated network's layers: 48 channels at 16x32 (d 2, 4), the BEV
        // grid 48x80 (d 2); and sizes the dilation does not divide.
        check((2, 3, 16, 32, 48, 48, 6), 1, true);
        check((4, 3, 16, 32, 48, 48, 2), 2, true);
        check((2, 3, 48, 80, 48, 48, 1), 3, false);
        check((3, 3, 13, 11, 5, 7, 1), 4, false);
        check((4, 5, 7, 9, 3, 17, 2), 5, true);
        check((5, 3, 2, 3, 4, 4, 1), 6, false);
    }

    /// The direct convolution at stride `1 × s` (the general kernel) and its column fold on
    /// the dense kernel give the same bytes.
    fn check_fold(
        (s, k, kw, pl): (usize, usize, usize, usize),
        (h, w, in_c, out_c, batch): (usize, usize, usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        let win = Window {
            in_h: h,
            in_w: w,
            out_h: h,
            out_w: w / s,
            kh: k,
            kw,
            sh: 1,
            sw: s,
            dh: 1,
            dw: 1,
            pt: k / 2,
            pl,
        };
        let fold = ColumnFold::of(&win, h, w, 1).expect("a foldable convolution");
        let c = case(win, (in_c, out_c, batch), seed, relu);
        let dense = c.dense(s * in_c, k, fold.weights(&c.weights, out_c, in_c), relu);
        let (input, direct) = (c.input, c.direct);
        let mut got = vec![0i8; batch * h * (w / s) * out_c];
        let (img_in, img_out) = (h * w * in_c, h * (w / s) * out_c);
        for i in 0..batch {
            dense
                .forward(
                    &input[i * img_in..(i + 1) * img_in],
                    h,
                    w / s,
                    &mut got[i * img_out..(i + 1) * img_out],
                )
                .unwrap();
        }
        assert_eq!(
            got, direct,
            "s {s} k {k}x{kw} pl {pl} {h}x{w} {in_c}->{out_c} batch {batch}"
        );
    }

    #[test]
    fn column_folds_of_strided_columns() {
        // The 4x2-stride backbone's third layer (3x3, stride 1x2, 32 -> 48 channels at 64x128),
        // then other strides, kernels and paddings.
        check_fold((2, 3, 3, 1), (64, 128, 32, 48, 1), 11, true);
        check_fold((2, 3, 3, 1), (5, 6, 3, 5, 2), 12, false);
        check_fold((3, 3, 3, 1), (4, 9, 7, 3, 1), 13, true);
        check_fold((2, 5, 5, 2), (6, 10, 4, 9, 1), 14, false);
        check_fold((2, 3, 1, 0), (3, 8, 5, 4, 2), 15, true);
        check_fold((4, 3, 3, 1), (3, 8, 2, 3, 1), 16, false);
    }

    /// The direct convolution over `win` (the general kernel) and its unfold followed by the
    /// pointwise dense convolution give the same bytes.
    fn check_unfold(
        win: Window,
        (in_c, out_c, batch): (usize, usize, usize),
        seed: u64,
        relu: bool,
    ) {
        let unfold = Unfold::of(&win, in_c, batch, 1).expect("an unfoldable convolution");
        let c = case(win, (in_c, out_c, batch), seed, relu);
        let shape = unfold.pointwise(in_c, out_c);
        let (w_scales, bias) = (c.w_scales.clone(), c.bias.clone());
        let dense =
            Conv2d::new(shape, c.weights.clone(), w_scales, bias, c.x_q, c.y_q, relu).unwrap();
        let rows = batch * win.out_h;
        let row_len = win.out_w * unfold.channels(in_c);
        let mut unfolded = vec![0i8; rows * row_len];
        // In two uneven row ranges: the result must not depend on the split.
        let cut = rows / 3;
        let (first, rest) = unfolded.split_at_mut(cut * row_len);
        unfold.run(in_c, c.x_q.zero_point, &c.input, first, 0..cut);
        unfold.run(in_c, c.x_q.zero_point, &c.input, rest, cut..rows);
        // By pixels, cut inside rows: the same bytes.
        let pixels = rows * win.out_w;
        let mut by_pixels = vec![0i8; rows * row_len];
        let mut first = 0;
        for part in 1..=3 {
            let end = pixels * part / 3 + usize::from(part < 3);
            let end = end.min(pixels);
            let out = &mut by_pixels[first * unfold.channels(in_c)..end * unfold.channels(in_c)];
            unfold.run_pixels(in_c, c.x_q.zero_point, &c.input, out, first..end);
            first = end;
        }
        assert_eq!(by_pixels, unfolded, "{win:?} by pixels");
        let mut got = vec![0i8; rows * win.out_w * out_c];
        dense.forward(&unfolded, rows, win.out_w, &mut got).unwrap();
        assert_eq!(got, c.direct, "{win:?} {in_c}->{out_c} batch {batch}");
    }

    /// A window over `h × w` with the output size ONNX gives for pads `(top, left, bottom,
    /// right)`.
    fn window(
        (h, w): (usize, usize),
        (kh, kw): (usize, usize),
        (sh, sw): (usize, usize),
        (dh, dw): (usize, usize),
        (pt, pl, pb, pr): (usize, usize, usize, usize),
    ) -> Window {
        let out = |n: usize, k: usize, s: usize, d: usize, a: usize, b: usize| {
            (n + a + b - (d * (k - 1) + 1)) / s + 1
        };
        Window {
            in_h: h,
            in_w: w,
            out_h: out(h, kh, sh, dh, pt, pb),
            out_w: out(w, kw, sw, dw, pl, pr),
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pt,
            pl,
        }
    }

    #[test]
    fn unfolds_of_rectangular_strided_dilated_and_asymmetric_convolutions() {
        // Inception's factorized 1x7 and 7x1 layers (192 channels at 12x12), then 3x1 and
        // 1x3 with dilation (ERFNet's non-bottleneck-1D), a strided dilated 3x3, a 7x7
        // stride-2 stem with asymmetric pads, and a batch of two.
        check_unfold(
            window((12, 12), (1, 7), (1, 1), (1, 1), (0, 3, 0, 3)),
            (192, 160, 1),
            21,
            true,
        );
        check_unfold(
            window((12, 12), (7, 1), (1, 1), (1, 1), (3, 0, 3, 0)),
            (160, 192, 1),
            22,
            false,
        );
        check_unfold(
            window((9, 13), (3, 1), (1, 1), (4, 1), (4, 0, 4, 0)),
            (16, 16, 2),
            23,
            true,
        );
        check_unfold(
            window((9, 13), (1, 3), (1, 1), (1, 8), (0, 8, 0, 8)),
            (16, 16, 1),
            24,
            false,
        );
        check_unfold(
            window((11, 10), (3, 3), (2, 2), (2, 2), (2, 2, 2, 2)),
            (5, 7, 2),
            25,
            true,
        );
        check_unfold(
            window((15, 17), (7, 7), (2, 2), (1, 1), (2, 3, 3, 2)),
            (3, 8, 1),
            26,
            false,
        );
    }

    #[test]
    fn unfolds_too_large_or_grouped_are_refused() {
        let win = window((64, 64), (1, 7), (1, 1), (1, 1), (0, 3, 0, 3));
        assert!(Unfold::of(&win, 512, 1, 1).is_some());
        assert!(Unfold::of(&win, 512, 1, 2).is_none());
        // 64 x 64 pixels x 7 taps x 8192 channels: 224 MiB.
        assert!(Unfold::of(&win, 8192, 1, 1).is_none());
    }

    #[test]
    fn convolutions_without_a_column_fold_are_refused() {
        let win = |sh, sw, dh, pt, pl, out_h, out_w| Window {
            in_h: 8,
            in_w: 8,
            out_h,
            out_w,
            kh: 3,
            kw: 3,
            sh,
            sw,
            dh,
            dw: 1,
            pt,
            pl,
        };
        assert!(ColumnFold::of(&win(1, 2, 1, 1, 1, 8, 4), 8, 8, 1).is_some());
        // Strided rows, dilation, groups, a stride that does not divide the width, padding
        // that is not "same" on the rows, or a tap out of the folded kernel's reach.
        assert!(ColumnFold::of(&win(2, 2, 1, 1, 1, 4, 4), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 2, 2, 1, 8, 4), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 1, 1, 1, 8, 4), 8, 8, 2).is_none());
        assert!(ColumnFold::of(&win(1, 3, 1, 1, 1, 8, 2), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 1, 0, 1, 6, 4), 8, 8, 1).is_none());
        assert!(ColumnFold::of(&win(1, 2, 1, 1, 4, 8, 4), 8, 8, 1).is_none());
    }

    #[test]
    fn phases_of_rectangular_dilations() {
        // The 4x2-stride backbone ("dilated_pos_r2"): rows dilated twice as far as columns,
        // 48 channels at 64x64; and a column-only dilation on odd sizes.
        check_rect((2, 1), (3, 64, 64, 48, 48, 1), 7, true);
        check_rect((4, 2), (3, 64, 64, 48, 48, 1), 8, true);
        check_rect((8, 4), (3, 64, 64, 48, 48, 1), 9, true);
        check_rect((1, 3), (3, 7, 11, 5, 9, 2), 10, false);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn phases_equal_the_direct_dilated_convolution(
            dh in 1usize..6,
            dw in 1usize..6,
            k in prop::sample::select(vec![1usize, 3, 5]),
            h in 1usize..15,
            w in 1usize..15,
            in_c in 1usize..40,
            out_c in 1usize..40,
            batch in 1usize..3,
            seed in any::<u64>(),
            relu in any::<bool>(),
        ) {
            check_rect((dh, dw), (k, h, w, in_c, out_c, batch), seed, relu);
        }

        #[test]
        fn unfolds_equal_the_direct_convolution(
            kh in 1usize..6,
            kw in 1usize..6,
            sh in 1usize..4,
            sw in 1usize..4,
            dh in 1usize..4,
            dw in 1usize..4,
            pads in prop::array::uniform4(0usize..4),
            h in 1usize..12,
            w in 1usize..12,
            in_c in 1usize..24,
            out_c in 1usize..24,
            batch in 1usize..3,
            seed in any::<u64>(),
            relu in any::<bool>(),
        ) {
            // Skip windows larger than the padded image (no output).
            let (pt, pl, pb, pr) = (pads[0], pads[1], pads[2], pads[3]);
            prop_assume!(h + pt + pb > dh * (kh - 1) && w + pl + pr > dw * (kw - 1));
            let win = window((h, w), (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr));
            check_unfold(win, (in_c, out_c, batch), seed, relu);
        }

        #[test]
        fn column_folds_equal_the_direct_strided_convolution(
            s in 2usize..5,
            k in prop::sample::select(vec![1usize, 3, 5]),
            kw_pl in 0usize..9,
            h in 1usize..9,
            cols in 1usize..6,
            in_c in 1usize..24,
            out_c in 1usize..24,
            batch in 1usize..3,
            seed in any::<u64>(),
            relu in any::<bool>(),
        ) {
            // Any kernel width 1..=k and left padding whose taps the fold reaches.
            let kw = 1 + kw_pl % k;
            let pl = (kw_pl / 3).min(kw - 1);
            let w = s * cols;
            let win = Window { in_h: h, in_w: w, out_h: h, out_w: cols, kh: k, kw, sh: 1, sw: s, dh: 1, dw: 1, pt: k / 2, pl };
            prop_assume!(ColumnFold::of(&win, h, w, 1).is_some());
            check_fold((s, k, kw, pl), (h, w, in_c, out_c, batch), seed, relu);
        }
    }
}
