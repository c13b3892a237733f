//! ONNX `GridSample` over NHWC `f32` images (BEV view transforms, deformable attention's
//! sampling, a temporal feature cache warped by the ego motion, optical-flow warping).
//!
//! Contract: ONNX's definition (opset 16 and later, 2-D): output pixel `(oy, ox)` of image
//! `b` reads the normalized location `(gx, gy)` at `grid[b, oy, ox]`, denormalized with
//! `align_corners` as ONNX Runtime's CPU kernel does (`(g + 1) / 2 · (len − 1)`, or
//! `((g + 1) · len − 1) / 2`); `linear` (`bilinear`) interpolates the four pixels around it
//! in ONNX Runtime's two orders: `w11 · p11 + w12 · p12 + w21 · p21 + w22 · p22` (`w11 =
//! dy2 · dx2`, ...) with zeros padding and `align_corners` off, `dy2 · (dx2 · p11 + dx1 ·
//! p12) + dy1 · (dx2 · p21 + dx1 · p22)` otherwise; `nearest` rounds half to even; a pixel outside the image is `0` (`zeros`), the nearest edge pixel
//! (`border`) or the reflected one (`reflection`). The same `f32` operations in the same
//! order for every channel, pixel, row split and ISA (scalar `f32`, never fused), so the
//! same bits everywhere. Cost: one pass over the output, four reads of `c` contiguous
//! floats per output pixel. Never allocates or panics (a `NaN` location reads zeros).

use std::ops::Range;

/// Interpolation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GridMode {
    Linear,
    Nearest,
}

/// What a location outside the image reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// A `GridSample`'s shape and attributes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GridSampleDims {
    pub c: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub mode: GridMode,
    pub padding: GridPadding,
    pub align_corners: bool,
}

impl GridSampleDims {
    /// A normalized coordinate `g` on an axis of `len` pixels, in pixels.
    fn denormalize(&self, g: f32, len: usize) -> f32 {
        let len = len as f32;
        if self.align_corners {
            (g + 1.0) / 2.0 * (len - 1.0)
        } else {
            ((g + 1.0) * len - 1.0) / 2.0
        }
    }

    /// The bounds a reflection reflects at on an axis of `len` pixels.
    fn bounds(&self, len: usize) -> (f32, f32) {
        if self.align_corners {
            (0.0, len as f32 - 1.0)
        } else {
            (-0.5, len as f32 - 0.5)
        }
    }

    /// Pixel index `i` on an axis of `len` pixels as the padding mode reads it: `None` for
    /// a zero.
    fn index(&self, i: i64, len: usize) -> Option<usize> {
        let last = len as i64 - 1;
        match self.padding {
            GridPadding::Zeros => (0..=last).contains(&i).then_some(i as usize),
            GridPadding::Border => Some(i.clamp(0, last.max(0)) as usize),
            GridPadding::Reflection => {
                let (lo, hi) = self.bounds(len);
                // Reflected as a float, truncated back to an index, clamped for safety
                // (a reflection lands inside `lo..=hi`, so the clamp only guards rounding).
                let r = reflect(i as f32, lo, hi);
                Some((r as i64).clamp(0, last.max(0)) as usize)
            }
        }
    }
}

/// `x` reflected at `lo` and `hi` until it lies between them (ONNX Runtime's formula:
/// whole ranges off, then the remainder from the nearer border).
fn reflect(x: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (dx, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / range) as i64;
    let r = dx - n as f32 * range;
    match (n % 2 == 0, from_lo) {
        (true, true) | (false, false) => lo + r,
        _ => hi - r,
    }
}

/// Output rows `rows` (of `batch · out_h`; `out` holds exactly those rows, NHWC) of the
/// `GridSample` of NHWC images `x` at locations `grid` (`[batch, out_h, out_w, 2]`, `x`
/// then `y`).
pub(crate) fn grid_sample_rows(
    d: &GridSampleDims,
    x: &[f32],
    grid: &[f32],
    out: &mut [f32],
    rows: Range<usize>,
) {
    let (c, out_h, out_w) = (d.c, d.out_h.max(1), d.out_w);
    let image_len = d.in_h * d.in_w * c;
    if c == 0 || out_w == 0 {
        return;
    }
    if d.in_h == 0 || d.in_w == 0 {
        // An empty image: every location reads padding (zeros; no edge to repeat).
        out.fill(0.0);
        return;
    }
    for (r, orow) in rows.zip(out.chunks_exact_mut(out_w * c)) {
        let b = r / out_h;
        let image = &x[b * image_len..(b + 1) * image_len];
        let g = &grid[r * out_w * 2..(r + 1) * out_w * 2];
        for (pixel, loc) in orow.chunks_exact_mut(c).zip(g.chunks_exact(2)) {
            let fx = d.denormalize(loc[0], d.in_w);
            let fy = d.denormalize(loc[1], d.in_h);
            let at = |iy: i64, ix: i64| -> Option<&[f32]> {
                let (y, x) = (d.index(iy, d.in_h)?, d.index(ix, d.in_w)?);
                Some(&image[(y * d.in_w + x) * c..][..c])
            };
            if !(fx.is_finite() && fy.is_finite()) {
                pixel.fill(0.0);
                continue;
            }
            match d.mode {
                GridMode::Nearest => {
                    let (ix, iy) = (fx.round_ties_even() as i64, fy.round_ties_even() as i64);
                    match at(iy, ix) {
                        Some(p) => pixel.copy_from_slice(p),
                        None => pixel.fill(0.0),
                    }
                }
                GridMode::Linear => {
                    let (x1, y1) = (fx.floor() as i64, fy.floor() as i64);
                    let (x2, y2) = (x1 + 1, y1 + 1);
                    let (dx2, dx1) = (x2 as f32 - fx, fx - x1 as f32);
                    let (dy2, dy1) = (y2 as f32 - fy, fy - y1 as f32);
                    let taps = [at(y1, x1), at(y1, x2), at(y2, x1), at(y2, x2)];
                    // ONNX Runtime weighs the four taps first where the padding is zeros and
                    // align_corners is off (its fast path), row by row otherwise.
                    let blend = if d.padding == GridPadding::Zeros && !d.align_corners {
                        Blend::Weights([dy2 * dx2, dy2 * dx1, dy1 * dx2, dy1 * dx1])
                    } else {
                        Blend::Rows { dx2, dx1, dy2, dy1 }
                    };
                    match taps {
                        [Some(a), Some(b), Some(e), Some(f)] => blend.all(a, b, e, f, pixel),
                        _ => {
                            for (j, o) in pixel.iter_mut().enumerate() {
                                let v = |t: Option<&[f32]>| t.map_or(0.0, |p| p[j]);
                                *o = blend.one(v(taps[0]), v(taps[1]), v(taps[2]), v(taps[3]));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How a bilinear sample combines its four taps (top-left, top-right, bottom-left,
/// bottom-right), as ONNX Runtime does in each case.
#[derive(Clone, Copy)]
enum Blend {
    /// `w11·p11 + w12·p12 + w21·p21 + w22·p22`, left to right.
    Weights([f32; 4]),
    /// `dy2·(dx2·p11 + dx1·p12) + dy1·(dx2·p21 + dx1·p22)`.
    Rows {
        dx2: f32,
        dx1: f32,
        dy2: f32,
        dy1: f32,
    },
}

impl Blend {
    fn one(self, p11: f32, p12: f32, p21: f32, p22: f32) -> f32 {
        match self {
            Blend::Weights([w11, w12, w21, w22]) => w11 * p11 + w12 * p12 + w21 * p21 + w22 * p22,
            Blend::Rows { dx2, dx1, dy2, dy1 } => {
                dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22)
            }
        }
    }

    /// [`Self::one`] over every channel of four whole taps (the vectorised case).
    fn all(self, a: &[f32], b: &[f32], e: &[f32], f: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (a, b, e, f) = (&a[..n], &b[..n], &e[..n], &f[..n]);
        for j in 0..n {
            out[j] = self.one(a[j], b[j], e[j], f[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(mode: GridMode, padding: GridPadding, align_corners: bool) -> GridSampleDims {
        GridSampleDims {
            c: 2,
            in_h: 3,
            in_w: 4,
            out_h: 1,
            out_w: 1,
            mode,
            padding,
            align_corners,
        }
    }

    /// Channel `j` of pixel `(y, x)`: `10·y + x + 100·j`.
    fn image() -> Vec<f32> {
        (0..3)
            .flat_map(|y| {
                (0..4).flat_map(move |x| (0..2).map(move |j| (10 * y + x + 100 * j) as f32))
            })
            .collect()
    }

    fn sample(d: &GridSampleDims, gx: f32, gy: f32) -> Vec<f32> {
        let mut out = vec![f32::NAN; d.c];
        grid_sample_rows(d, &image(), &[gx, gy], &mut out, 0..1);
        out
    }

    #[test]
    fn corners_centres_and_padding_read_what_onnx_defines() {
        use GridMode::*;
        use GridPadding::*;
        // align_corners: -1 and 1 are the first and last pixels' centres.
        let d = dims(Linear, Zeros, true);
        assert_eq!(sample(&d, -1.0, -1.0), [0.0, 100.0]);
        assert_eq!(sample(&d, 1.0, 1.0), [23.0, 123.0]);
        // Halfway between pixels (1, 1) and (1, 2): x = 1.5, y = 1.
        assert_eq!(sample(&d, 0.0, 0.0), [11.5, 111.5]);
        // Without align_corners, -1 is the first pixel's outer edge: half of it is padding.
        let d = dims(Linear, Zeros, false);
        assert_eq!(sample(&d, -1.0, -1.0), [0.0, 25.0]);
        let d = dims(Linear, Border, false);
        assert_eq!(sample(&d, -1.0, -1.0), [0.0, 100.0]);
        // Far outside: zeros, the edge, or the reflection of the location.
        assert_eq!(sample(&dims(Nearest, Zeros, true), 3.0, 0.0), [0.0, 0.0]);
        assert_eq!(
            sample(&dims(Nearest, Border, true), 3.0, 0.0),
            [13.0, 113.0]
        );
        // x = (3 + 1) / 2 · 3 = 6 reflects at 3 to 0, y = 1.
        assert_eq!(
            sample(&dims(Nearest, Reflection, true), 3.0, 0.0),
            [10.0, 110.0]
        );
        // Nearest rounds half to even: x = 1.5 → 2.
        assert_eq!(sample(&dims(Nearest, Zeros, true), 0.0, 0.0), [12.0, 112.0]);
        // A NaN location reads zeros.
        assert_eq!(
            sample(&dims(Linear, Border, true), f32::NAN, 0.0),
            [0.0, 0.0]
        );
    }

    #[test]
    fn reflection_folds_into_the_range() {
        assert_eq!(reflect(-1.0, 0.0, 3.0), 1.0);
        assert_eq!(reflect(4.0, 0.0, 3.0), 2.0);
        assert_eq!(reflect(7.0, 0.0, 3.0), 1.0);
        assert_eq!(reflect(-0.75, -0.5, 3.5), -0.25);
        assert_eq!(reflect(1.0, 0.0, 0.0), 0.0);
    }
}
