//! Image preprocessing: resize an RGB8 camera image by exact area averaging and quantize
//! it to the network input (INT8, scale 1/128, zero point 0 on `pixel / 128 − 1`).
//!
//! Contract: [`Preprocess::new`] validates the sizes and builds integer weight tables (the
//! only allocation); [`Preprocess::run`] is integer only, allocation free, lock free and
//! panic free, and bit-identical on every machine: `q = round_half_away(avg − 128)`, the
//! division by the source area done by an exact multiply-shift reciprocal.
//!
//! Lens distortion ([`Preprocess::for_camera`]): each output pixel averages the same
//! `src/dst`-sized box of source pixels, with exact integer area weights, but centred where
//! the lens put that pixel's ray ([`Distortion::distort`](crate::camera::Distortion::distort) of the ideal pinhole's ray) instead
//! of where the pinhole puts it; the output is then an ideal pinhole image with the camera's
//! intrinsics, which is what the BEV projection assumes. The box positions are computed once
//! at construction (f64 arithmetic and deterministic trigonometry: the same table on every
//! machine) and quantized to `1/dst` of a source pixel; a box that would leave the image is
//! moved inside it (the edge pixels stand in for what the lens did not see). Without
//! distortion every box is the separable path's, and the bytes are identical to it.
//!
//! Each box's first and last source pixel along an axis overlap it partly; the pixels
//! between overlap it wholly, so a row of the box is summed first and weighted once (exact:
//! the same integers as weighting every pixel).
//!
//! Cost: O(source pixels + destination pixels) per image: one pass over the source, one
//! add per source pixel and channel. Per 1920×1080 camera to 256×128 on the 2-core Zen 4
//! VM (`cargo bench -p redline-bench --bench raw_image`, second table): 2.6 ms, 3.1 ms
//! undistorting (whose box starts are an 8-byte table entry per output pixel); before the
//! whole-pixel sums (per-pixel weights): 4.3 ms.

use super::{check_size, sat_i8, PerceptionError};
use crate::camera::CameraSpec;

/// Largest image side [`Preprocess`] accepts, pixels.
pub const MAX_IMAGE_SIDE: usize = 16384;

/// Numerators [`Recip`] divides exactly are below `2^RECIP_BITS`.
const RECIP_BITS: u32 = 40;

/// Exact floor division of `n < 2^RECIP_BITS` by a constant `d` (`1 <= d <= 2^28`) by
/// multiply and shift (Granlund–Montgomery): `m = ceil(2^s / d)`,
/// `s = RECIP_BITS + ceil(log2 d)`; then `m·d − 2^s < d <= 2^(s − RECIP_BITS)`, which makes
/// `(n·m) >> s == n / d` for every such `n`. Replaces a hardware divide per output element.
#[derive(Clone, Copy, Debug)]
struct Recip {
    m: u128,
    s: u32,
}

impl Recip {
    fn new(d: u64) -> Self {
        let d = d.max(1);
        let s = RECIP_BITS + (64 - (d - 1).leading_zeros());
        let m = (1u128 << s).div_ceil(d as u128);
        Self { m, s }
    }

    #[inline]
    fn div(self, n: u64) -> u64 {
        ((n as u128 * self.m) >> self.s) as u64
    }
}

/// Resizes an RGB8 image by exact area averaging and quantizes it to the network input.
///
/// Output is NHWC `(dst_h, dst_w, 3)` INT8 with `q = round_half_away(avg − 128)` where `avg`
/// is the area-weighted mean of the covered source pixels (scale 1/128, zero point 0 on
/// `pixel / 128 − 1`). The weights are integer tables built in [`Preprocess::new`]; `run`
/// is integer only and allocation free. Works for down- and up-sampling.
#[derive(Debug, Clone)]
pub struct Preprocess {
    src_w: usize,
    src_h: usize,
    dst_w: usize,
    dst_h: usize,
    /// The pinhole path's boxes: output column `dx` covers `[dx·src_w, (dx + 1)·src_w)` in
    /// units of `1/dst_w` source pixels, row `dy` likewise.
    x_spans: Vec<BoxSpan>,
    y_spans: Vec<BoxSpan>,
    /// Division by `src_w · src_h`.
    recip: Recip,
    /// Undistorting: per output pixel (row major), the start of its source box in units of
    /// `1/dst_w` (x) and `1/dst_h` (y) source pixels. `None`: the separable path.
    boxes: Option<Vec<[u32; 2]>>,
}

impl Preprocess {
    /// Builds the resize tables. Every side must be in `1..=MAX_IMAGE_SIDE`.
    pub fn new(
        src_w: usize,
        src_h: usize,
        dst_w: usize,
        dst_h: usize,
    ) -> Result<Self, PerceptionError> {
        for (what, v) in [
            ("src_w", src_w),
            ("src_h", src_h),
            ("dst_w", dst_w),
            ("dst_h", dst_h),
        ] {
            if v == 0 || v > MAX_IMAGE_SIDE {
                return Err(PerceptionError::BadConfig(format!(
                    "preprocess {what} = {v} must be in 1..={MAX_IMAGE_SIDE} pixels; check the \
                     camera resolution and the network input size"
                )));
            }
        }
        Ok(Self {
            src_w,
            src_h,
            dst_w,
            dst_h,
            x_spans: (0..dst_w)
                .map(|d| BoxSpan::new(d * src_w, src_w, dst_w))
                .collect(),
            y_spans: (0..dst_h)
                .map(|d| BoxSpan::new(d * src_h, src_h, dst_h))
                .collect(),
            recip: Recip::new((src_w * src_h) as u64),
            boxes: None,
        })
    }

    /// [`Preprocess::new`] for `cam`'s images (`cam.width × cam.height`) that also undoes
    /// its lens distortion (see the module docs); without distortion it is
    /// [`Preprocess::new`].
    pub fn for_camera(
        cam: &CameraSpec,
        dst_w: usize,
        dst_h: usize,
    ) -> Result<Self, PerceptionError> {
        let (src_w, src_h) = (cam.width as usize, cam.height as usize);
        let mut pre = Self::new(src_w, src_h, dst_w, dst_h)?;
        if !cam.distortion.is_none() {
            pre.boxes = Some(box_starts(cam, dst_w, dst_h));
        }
        Ok(pre)
    }

    /// Bytes `run` expects in `rgb`: `src_w · src_h · 3`.
    pub fn input_len(&self) -> usize {
        self.src_w * self.src_h * 3
    }

    /// Input (width, height), pixels.
    pub fn input_size(&self) -> (usize, usize) {
        (self.src_w, self.src_h)
    }

    /// Output (width, height), pixels.
    pub fn output_size(&self) -> (usize, usize) {
        (self.dst_w, self.dst_h)
    }

    /// Elements `run` writes to `out`: `dst_w · dst_h · 3`.
    pub fn output_len(&self) -> usize {
        self.dst_w * self.dst_h * 3
    }

    /// Resizes and quantizes `rgb` (row-major RGB8) into `out` (NHWC INT8). No allocation.
    pub fn run(&self, rgb: &[u8], out: &mut [i8]) -> Result<(), PerceptionError> {
        check_size("preprocess input image (RGB8)", rgb.len(), self.input_len())?;
        check_size("preprocess output tensor", out.len(), self.output_len())?;
        if let Some(boxes) = &self.boxes {
            self.run_boxes(boxes, rgb, out);
            return Ok(());
        }
        if self.src_w == self.dst_w && self.src_h == self.dst_h {
            // Same size: the area average of one pixel is the pixel itself, so this is the
            // general path's result (pixel - 128), without the tables.
            for (q, &p) in out.iter_mut().zip(rgb) {
                *q = (i16::from(p) - 128) as i8;
            }
            return Ok(());
        }
        for (y, row) in self
            .y_spans
            .iter()
            .zip(out.chunks_exact_mut(self.dst_w * 3))
        {
            for (x, q) in self.x_spans.iter().zip(row.chunks_exact_mut(3)) {
                self.average(rgb, x, y, q);
            }
        }
        Ok(())
    }

    /// The undistorting path: output pixel `i` averages the box that starts at `boxes[i]`
    /// (see [`Preprocess::for_camera`]). Sizes are checked by the caller.
    fn run_boxes(&self, boxes: &[[u32; 2]], rgb: &[u8], out: &mut [i8]) {
        let (sw, sh, dw, dh) = (self.src_w, self.src_h, self.dst_w, self.dst_h);
        for (&[lo_x, lo_y], q) in boxes.iter().zip(out.chunks_exact_mut(3)) {
            let x = BoxSpan::new(lo_x as usize, sw, dw);
            let y = BoxSpan::new(lo_y as usize, sh, dh);
            self.average(rgb, &x, &y, q);
        }
    }

    /// Writes to `q` (3 elements) the quantized area average of the box `x × y` of `rgb`:
    /// source pixel `(sx, sy)` weighs `x.weight(sx) · y.weight(sy)`, the weights sum to
    /// `src_w · src_h`, and `q = round_half_away(Σ weight · pixel / (src_w · src_h) − 128)`.
    #[inline]
    fn average(&self, rgb: &[u8], x: &BoxSpan, y: &BoxSpan, q: &mut [i8]) {
        let row_stride = self.src_w * 3;
        let mut acc = [0u64; 3];
        for sy in y.first..=y.last {
            let row = &rgb[sy * row_stride..][..row_stride];
            // Σ weights over a row is src_w <= 2^14, so 255 · 2^14 fits u32.
            let weighted = |sx: usize, w: u32| {
                let px = &row[sx * 3..sx * 3 + 3];
                [w * px[0] as u32, w * px[1] as u32, w * px[2] as u32]
            };
            let mut racc = weighted(x.first, x.first_weight);
            if x.last > x.first {
                // The whole pixels between: summed, then weighted once (by dst).
                let mut mid = [0u32; 3];
                for px in row[(x.first + 1) * 3..x.last * 3].chunks_exact(3) {
                    mid[0] += px[0] as u32;
                    mid[1] += px[1] as u32;
                    mid[2] += px[2] as u32;
                }
                let (d, last) = (x.dst as u32, weighted(x.last, x.last_weight));
                for c in 0..3 {
                    racc[c] += d * mid[c] + last[c];
                }
            }
            let wy = y.weight(sy) as u64;
            acc[0] += wy * racc[0] as u64;
            acc[1] += wy * racc[1] as u64;
            acc[2] += wy * racc[2] as u64;
        }
        // q = round_half_away(acc / total - 128), as div_round(acc - mid, total).
        let total = (self.src_w * self.src_h) as u64;
        let (mid, half) = (128 * total, total / 2);
        for (q, &a) in q.iter_mut().zip(acc.iter()) {
            let v = if a >= mid {
                self.recip.div(a - mid + half) as i64
            } else {
                -(self.recip.div(mid - a + half) as i64)
            };
            *q = sat_i8(v);
        }
    }
}

/// The source pixels one box covers along an axis, in units of `1/dst` source pixels:
/// `[lo, lo + src)` overlaps pixel `first` by `first_weight`, pixel `last` by `last_weight`
/// and every pixel between wholly (`dst`).
#[derive(Clone, Copy, Debug)]
struct BoxSpan {
    first: usize,
    last: usize,
    first_weight: u32,
    last_weight: u32,
    dst: usize,
}

impl BoxSpan {
    fn new(lo: usize, src: usize, dst: usize) -> Self {
        let hi = lo + src;
        let (first, last) = (lo / dst, (hi - 1) / dst);
        BoxSpan {
            first,
            last,
            first_weight: (hi.min((first + 1) * dst) - lo) as u32,
            last_weight: (hi - (last * dst).max(lo)) as u32,
            dst,
        }
    }

    /// The overlap of source pixel `s` (`first..=last`).
    fn weight(&self, s: usize) -> u32 {
        if s == self.first {
            self.first_weight
        } else if s == self.last {
            self.last_weight
        } else {
            self.dst as u32
        }
    }
}

/// Where each output pixel's source box starts (see [`Preprocess::for_camera`]): the
/// output pixel's centre is a ray of the ideal pinhole (`cam`'s intrinsics, scaled to the
/// output), `cam`'s lens moves it, and the `src/dst` box is centred there, in units of
/// `1/dst` source pixels, clamped into the image. Deterministic: plain f64 arithmetic,
/// [`Distortion::distort`](crate::camera::Distortion::distort) and round-to-nearest.
fn box_starts(cam: &CameraSpec, dst_w: usize, dst_h: usize) -> Vec<[u32; 2]> {
    let lens = &cam.distortion;
    let (sw, sh) = (cam.width as f64, cam.height as f64);
    let (dw, dh) = (dst_w as f64, dst_h as f64);
    // The largest start that keeps the box inside: src·dst − src, in 1/dst units.
    let (max_x, max_y) = (
        (cam.width as i64) * (dst_w as i64 - 1),
        (cam.height as i64) * (dst_h as i64 - 1),
    );
    let mut boxes = Vec::with_capacity(dst_w * dst_h);
    for dy in 0..dst_h {
        for dx in 0..dst_w {
            // The output pixel's centre in source pixel coordinates (pixel i covers [i, i + 1)).
            let u = (dx as f64 + 0.5) * sw / dw;
            let v = (dy as f64 + 0.5) * sh / dh;
            let (xd, yd) = lens.distort((u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy);
            let (ud, vd) = (cam.cx + cam.fx * xd, cam.cy + cam.fy * yd);
            // Box start (centre − src/(2 dst)) in units of 1/dst source pixels; a non-finite
            // position (a lens model that diverges there) saturates and is clamped.
            let lo_x = ((ud * dw - sw / 2.0).round() as i64).clamp(0, max_x);
            let lo_y = ((vd * dh - sh / 2.0).round() as i64).clamp(0, max_y);
            boxes.push([lo_x as u32, lo_y as u32]);
        }
    }
    boxes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::camera::Distortion;

    #[test]
    fn preprocess_constant_image_gives_constant_output() {
        let p = Preprocess::new(64, 48, 16, 12).unwrap();
        for (pixel, want) in [(200u8, 72i8), (0, -128), (255, 127), (128, 0), (1, -127)] {
            let rgb = vec![pixel; p.input_len()];
            let mut out = vec![0i8; p.output_len()];
            p.run(&rgb, &mut out).unwrap();
            assert!(out.iter().all(|&q| q == want), "pixel {pixel}");
        }
    }

    #[test]
    fn preprocess_checker_downsample_averages() {
        // 4x4 checker of single pixels -> 2x2: every output averages 0 and 255 twice
        // = 127.5 -> 127.5 - 128 = -0.5 -> rounds away from zero to -1.
        let p = Preprocess::new(4, 4, 2, 2).unwrap();
        let mut rgb = vec![0u8; p.input_len()];
        for y in 0..4 {
            for x in 0..4 {
                let v = if (x + y) % 2 == 0 { 0 } else { 255 };
                rgb[(y * 4 + x) * 3..(y * 4 + x) * 3 + 3].fill(v);
            }
        }
        let mut out = vec![0i8; p.output_len()];
        p.run(&rgb, &mut out).unwrap();
        assert!(out.iter().all(|&q| q == -1), "{out:?}");

        // 2x2 checker of 2x2 blocks of distinct values, downsampled 4x4 -> 2x2: each output
        // is its block's value; channels stay separate.
        let mut rgb = vec![0u8; 4 * 4 * 3];
        for y in 0..4 {
            for x in 0..4 {
                let block = (y / 2) * 2 + x / 2;
                let px = &mut rgb[(y * 4 + x) * 3..(y * 4 + x) * 3 + 3];
                px.copy_from_slice(&[10 + block as u8 * 50, 100, 255 - block as u8 * 20]);
            }
        }
        p.run(&rgb, &mut out).unwrap();
        for block in 0..4 {
            assert_eq!(
                &out[block * 3..block * 3 + 3],
                &[
                    (10 + block as i32 * 50 - 128) as i8,
                    -28,
                    (127 - block as i32 * 20) as i8
                ]
            );
        }
    }

    #[test]
    fn preprocess_fractional_ratio_uses_exact_area_weights() {
        // 3 -> 2 columns: dst 0 = (2·p0 + p1) / 3, dst 1 = (p1 + 2·p2) / 3.
        let p = Preprocess::new(3, 1, 2, 1).unwrap();
        let rgb = [0u8, 0, 0, 90, 90, 90, 180, 180, 180];
        let mut out = [0i8; 6];
        p.run(&rgb, &mut out).unwrap();
        assert_eq!(out, [-98, -98, -98, 22, 22, 22]);
        // Upsampling 1 -> 3 replicates.
        let up = Preprocess::new(1, 1, 3, 2).unwrap();
        let mut out = [0i8; 18];
        up.run(&[10, 20, 30], &mut out).unwrap();
        for px in out.chunks(3) {
            assert_eq!(px, &[-118, -108, -98]);
        }
    }

    #[test]
    fn recip_matches_hardware_division() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for d in [
            1u64,
            2,
            3,
            7,
            16,
            255,
            12_345_677,
            1280 * 720,
            (1 << 28) - 1,
            1 << 28,
        ] {
            let r = Recip::new(d);
            let top = (1u64 << RECIP_BITS) - 1;
            for n in [0, 1, d - 1, d, d + 1, top - 1, top] {
                assert_eq!(r.div(n), n / d, "n {n} d {d}");
            }
            for _ in 0..2000 {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let n = (seed >> 24) & top;
                assert_eq!(r.div(n), n / d, "n {n} d {d}");
            }
        }
    }

    /// Independent reference: 2-D exact area overlap over every source pixel, i128.
    fn preprocess_reference(rgb: &[u8], sw: usize, sh: usize, dw: usize, dh: usize) -> Vec<i8> {
        let boxes: Vec<[u32; 2]> = (0..dh)
            .flat_map(|dy| (0..dw).map(move |dx| [(dx * sw) as u32, (dy * sh) as u32]))
            .collect();
        boxes_reference(rgb, sw, sh, dw, dh, &boxes)
    }

    /// Independent reference for arbitrary boxes: output pixel `i` averages
    /// `[lo_x, lo_x + sw) × [lo_y, lo_y + sh)` (units of 1/dst source pixels), every source
    /// pixel weighed by its overlap, in i128.
    fn boxes_reference(
        rgb: &[u8],
        sw: usize,
        sh: usize,
        dw: usize,
        dh: usize,
        boxes: &[[u32; 2]],
    ) -> Vec<i8> {
        let overlap = |lo: u32, s: usize, src: usize, dst: usize| -> i128 {
            let (lo, hi) = (lo as i128, lo as i128 + src as i128);
            let (s_lo, s_hi) = ((s * dst) as i128, ((s + 1) * dst) as i128);
            (hi.min(s_hi) - lo.max(s_lo)).max(0)
        };
        let mut out = Vec::new();
        for &[lx, ly] in boxes {
            for c in 0..3 {
                let mut num = 0i128;
                for sy in 0..sh {
                    for sx in 0..sw {
                        let w = overlap(lx, sx, sw, dw) * overlap(ly, sy, sh, dh);
                        num += w * rgb[(sy * sw + sx) * 3 + c] as i128;
                    }
                }
                let den = (sw * sh) as i128;
                let n = num - 128 * den;
                // round half away from zero of n / den
                let q = if n >= 0 {
                    (2 * n + den) / (2 * den)
                } else {
                    -((-2 * n + den) / (2 * den))
                };
                out.push(q as i8);
            }
        }
        out
    }

    #[test]
    fn preprocess_matches_brute_force_reference() {
        for (sw, sh, dw, dh) in [
            (7, 5, 3, 2),
            (5, 3, 8, 7),
            (16, 9, 4, 3),
            (13, 11, 13, 11),
            (67, 41, 9, 5),
            (120, 64, 16, 8),
        ] {
            let rgb: Vec<u8> = (0..sw * sh * 3).map(|i| (i * 97 % 256) as u8).collect();
            let p = Preprocess::new(sw, sh, dw, dh).unwrap();
            let mut out = vec![0i8; p.output_len()];
            p.run(&rgb, &mut out).unwrap();
            assert_eq!(
                out,
                preprocess_reference(&rgb, sw, sh, dw, dh),
                "{sw}x{sh}->{dw}x{dh}"
            );
        }
    }

    /// Boxes anywhere in the image (any start, in 1/dst units, that keeps the box inside),
    /// as a lens places them: the same bytes as the brute-force overlap sum.
    #[test]
    fn shifted_boxes_match_brute_force() {
        for (sw, sh, dw, dh) in [
            (67usize, 41usize, 9usize, 5usize),
            (20, 10, 33, 17),
            (9, 7, 4, 3),
        ] {
            let rgb: Vec<u8> = (0..sw * sh * 3).map(|i| (i * 89 % 253) as u8).collect();
            let mut p = Preprocess::new(sw, sh, dw, dh).unwrap();
            let (max_x, max_y) = (sw * (dw - 1), sh * (dh - 1));
            let mut seed = 12345u64;
            let boxes: Vec<[u32; 2]> = (0..dw * dh)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let (a, b) = ((seed >> 20) as usize, (seed >> 42) as usize);
                    [(a % (max_x + 1)) as u32, (b % (max_y + 1)) as u32]
                })
                .collect();
            p.boxes = Some(boxes.clone());
            let mut out = vec![0i8; p.output_len()];
            p.run(&rgb, &mut out).unwrap();
            assert_eq!(
                out,
                boxes_reference(&rgb, sw, sh, dw, dh, &boxes),
                "{sw}x{sh}->{dw}x{dh}"
            );
        }
    }

    #[test]
    fn preprocess_sizes_are_checked() {
        assert!(matches!(
            Preprocess::new(0, 4, 2, 2),
            Err(PerceptionError::BadConfig(_))
        ));
        assert!(Preprocess::new(4, 4, 2, MAX_IMAGE_SIDE + 1).is_err());
        let p = Preprocess::new(4, 4, 2, 2).unwrap();
        let mut out = vec![0i8; p.output_len()];
        let err = p.run(&[0u8; 47], &mut out).unwrap_err();
        assert!(matches!(
            err,
            PerceptionError::BadSize {
                got: 47,
                want: 48,
                ..
            }
        ));
        assert!(err.to_string().contains("47"));
        let mut short = vec![0i8; 11];
        assert!(p.run(&[0u8; 48], &mut short).is_err());
    }

    fn camera(w: u32, h: u32, lens: Distortion) -> CameraSpec {
        CameraSpec {
            name: "front".into(),
            width: w,
            height: h,
            fx: 0.6 * w as f64,
            fy: 0.6 * w as f64,
            cx: w as f64 / 2.0,
            cy: h as f64 / 2.0,
            x: 0.0,
            y: 0.0,
            z: 0.0,
            yaw: 0.0,
            pitch: 0.0,
            distortion: lens,
        }
    }

    /// The undistorting path with a lens that moves nothing (zero coefficients) gives the
    /// separable path's bytes, down and up, even and odd ratios: its boxes and weights are
    /// exact.
    #[test]
    fn boxes_of_a_straight_lens_are_the_separable_path() {
        let straight = Distortion::Polynomial {
            k: [0.0; 6],
            p: [0.0; 2],
        };
        for (sw, sh, dw, dh) in [
            (64, 48, 16, 12),
            (67, 41, 16, 10),
            (20, 10, 33, 17),
            (9, 7, 9, 7),
        ] {
            let cam = camera(sw, sh, straight.clone());
            let boxed = Preprocess::for_camera(&cam, dw, dh).unwrap();
            assert!(boxed.boxes.is_some());
            let plain = Preprocess::new(sw as usize, sh as usize, dw, dh).unwrap();
            let rgb: Vec<u8> = (0..plain.input_len())
                .map(|i| (i * 131 % 251) as u8)
                .collect();
            let (mut a, mut b) = (vec![0i8; plain.output_len()], vec![0i8; plain.output_len()]);
            boxed.run(&rgb, &mut a).unwrap();
            plain.run(&rgb, &mut b).unwrap();
            assert_eq!(a, b, "{sw}x{sh} -> {dw}x{dh}");
        }
        let none = Preprocess::for_camera(&camera(64, 48, Distortion::None), 16, 12).unwrap();
        assert!(none.boxes.is_none(), "no lens: the separable path");
    }

    /// A barrel-distorted picture of a smooth scene comes out as the pinhole picture of that
    /// scene: far closer to it than the distorted picture averaged as is.
    #[test]
    fn a_distorted_picture_is_undistorted() {
        let lens = Distortion::Polynomial {
            k: [-0.3, 0.08, 0.0, 0.0, 0.0, 0.0],
            p: [0.001, -0.002],
        };
        let (sw, sh, dw, dh) = (640u32, 320u32, 128usize, 64usize);
        let cam = camera(sw, sh, lens.clone());
        // The scene, on ideal normalized coordinates: smooth stripes and a ramp.
        let scene = |x: f64, y: f64| -> [u8; 3] {
            let s = |t: f64| (127.5 + 120.0 * crate::camera::det::sin(t)) as u8;
            [s(6.0 * x), s(5.0 * y + 1.0), s(4.0 * (x + y))]
        };
        // Pixel centre → ideal normalized coordinates, inverting the lens by fixed-point
        // iteration (as OpenCV's undistortPoints does).
        let undistort = |xd: f64, yd: f64| {
            let (mut x, mut y) = (xd, yd);
            for _ in 0..50 {
                let (ex, ey) = lens.distort(x, y);
                x += xd - ex;
                y += yd - ey;
            }
            (x, y)
        };
        let render = |distorted: bool| -> Vec<u8> {
            let mut img = Vec::with_capacity((sw * sh * 3) as usize);
            for j in 0..sh {
                for i in 0..sw {
                    let (x, y) = (
                        (i as f64 + 0.5 - cam.cx) / cam.fx,
                        (j as f64 + 0.5 - cam.cy) / cam.fy,
                    );
                    let (x, y) = if distorted { undistort(x, y) } else { (x, y) };
                    img.extend_from_slice(&scene(x, y));
                }
            }
            img
        };
        let (ideal, distorted) = (render(false), render(true));
        let plain = Preprocess::new(sw as usize, sh as usize, dw, dh).unwrap();
        let fixed = Preprocess::for_camera(&cam, dw, dh).unwrap();
        let mut want = vec![0i8; plain.output_len()];
        plain.run(&ideal, &mut want).unwrap();
        let (mut got, mut as_is) = (want.clone(), want.clone());
        fixed.run(&distorted, &mut got).unwrap();
        plain.run(&distorted, &mut as_is).unwrap();
        let mad = |a: &[i8]| {
            a.iter()
                .zip(&want)
                .map(|(&p, &q)| (p as f64 - q as f64).abs())
                .sum::<f64>()
                / a.len() as f64
        };
        let (fixed_err, as_is_err) = (mad(&got), mad(&as_is));
        // Measured: 0.05 against 20.5 levels (of 256).
        assert!(fixed_err < 0.5, "undistorted: mean |diff| {fixed_err}");
        assert!(
            as_is_err > 8.0 * fixed_err,
            "as is {as_is_err}, undistorted {fixed_err}"
        );
    }

    #[test]
    fn same_size_fast_path_equals_the_area_average() {
        let (w, h) = (7usize, 5usize);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 37 % 256) as u8).collect();
        let fast = Preprocess::new(w, h, w, h).unwrap();
        let mut a = vec![0i8; w * h * 3];
        fast.run(&rgb, &mut a).unwrap();
        // The general path on a 2x upsample then a 2x downsample is not the same thing, so
        // compare with the definition: one source pixel per output pixel.
        for (q, &p) in a.iter().zip(&rgb) {
            assert_eq!(i16::from(*q), i16::from(p) - 128);
        }
    }
}
