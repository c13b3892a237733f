//! The pixel encodings of `sensor_msgs/msg/Image` that redline converts to 8-bit RGB, and the
//! conversions themselves — the same pixels `cv_bridge::toCvCopy(msg, "rgb8")` gives a ROS
//! user.
//!
//! Read (ROS `sensor_msgs/image_encodings` names):
//! - interleaved 8-bit: `rgb8`, `bgr8`, `rgba8`, `bgra8`, `mono8` (and its alias `8UC1`);
//! - interleaved 16-bit: `rgb16`, `bgr16`, `rgba16`, `bgra16`, `mono16`, little or big endian
//!   as `is_bigendian` says;
//! - raw sensor mosaics: `bayer_rggb8`, `bayer_bggr8`, `bayer_gbrg8`, `bayer_grbg8` and their
//!   16-bit forms (`bayer_rggb16`, ...);
//! - YUV 4:2:2, two pixels in four bytes: `yuv422` and `uyvy` (U Y0 V Y1), `yuv422_yuy2` and
//!   `yuyv` (Y0 U Y1 V);
//! - YUV 4:2:0 semi-planar: `nv21` and `nv12` — `height` rows of luma (one byte per pixel,
//!   `step` bytes per row), then `height / 2` rows of chroma pairs, one pair per 2×2 pixels,
//!   V U (`nv21`) or U V (`nv12`), with the same `step`; width and height even.
//!
//! Not read: the generic `16UC1` (usually a depth image in millimetres, not a picture),
//! `8UC3`/`8UC4` (no channel order), float and signed types, `nv24` (4:4:4, which OpenCV
//! has no conversion for). They stay an [`ImageIssue::WrongEncoding`] that names what is
//! read.
//!
//! How (each matches cv_bridge, which runs OpenCV; `tests/python/pixel_encoding_fixture.py`
//! writes OpenCV's answers into the test fixture, and the tests compare every pixel):
//! - 16 → 8 bits: `round(v · 255 / 65535)`, cv_bridge's `convertTo` scale, computed exactly
//!   as `(2v + 257) / 514`; after demosaicing for the 16-bit mosaics, as cv_bridge does;
//! - Bayer: OpenCV's bilinear demosaic (`COLOR_Bayer*2RGB`): the pixel's own sample, the mean
//!   of its two same-colour neighbours (`(a + b + 1) >> 1`) or of its four
//!   (`(a + b + c + d + 2) >> 2`); the outermost rows and columns copy their inner
//!   neighbour. Images narrower or shorter than 3 pixels have no interior: each pixel is its
//!   own sample, grey;
//! - YUV 4:2:2: ITU-R BT.601 with video-range luma in OpenCV's 20-bit fixed point
//!   (`COLOR_YUV2RGB_UYVY` / `_YUY2`): `y = max(0, Y − 16) · 1220542`, then
//!   `R = (y + 1673527 (V − 128) + 2¹⁹) >> 20`, `G = (y − 852492 (V − 128) − 409993 (U − 128)
//!   + 2¹⁹) >> 20`, `B = (y + 2116026 (U − 128) + 2¹⁹) >> 20`, each clamped to 0..=255;
//! - YUV 4:2:0 (`COLOR_YUV2RGB_NV21` / `_NV12`): the same formulas, each pixel with its own
//!   luma and its 2×2 block's chroma pair (no chroma interpolation, as OpenCV).
//!
//! Promises: any `width`, `height`, `step` and data length either convert or give an
//! [`ImageIssue`] (never a panic, never a read past the data); the layout is checked by
//! [`super::Image`] before a conversion starts. Cost: one pass over the pixels into a fresh
//! `3 · width · height` buffer; the mosaics first widen their samples into a `width · height`
//! plane of `u16` (one more pass and buffer). Runs where the log is read, never in a stage.

use super::ImageIssue;

/// Which colour the top-left sample of a Bayer mosaic is, row by row: `Rggb` is R G / G B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BayerPattern {
    /// R G / G B.
    Rggb,
    /// B G / G R.
    Bggr,
    /// G B / R G.
    Gbrg,
    /// G R / B G.
    Grbg,
}

impl BayerPattern {
    /// The colour (0 = R, 1 = G, 2 = B) of the sample at row parity `py`, column parity `px`.
    fn colour(self, py: usize, px: usize) -> usize {
        let cells = match self {
            BayerPattern::Rggb => [[0, 1], [1, 2]],
            BayerPattern::Bggr => [[2, 1], [1, 0]],
            BayerPattern::Gbrg => [[1, 2], [0, 1]],
            BayerPattern::Grbg => [[1, 0], [2, 1]],
        };
        cells[py & 1][px & 1]
    }
}

/// A pixel encoding redline converts to RGB (see the module docs for the list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelEncoding {
    /// Interleaved samples: `channels` per pixel, the source channel of R, G and B in `rgb`,
    /// `sample_bytes` (1 or 2) per sample.
    Interleaved {
        /// Samples per pixel (1, 3 or 4).
        channels: u8,
        /// Index of the R, G and B sample within a pixel (grey: all 0).
        rgb: [u8; 3],
        /// Bytes per sample: 1 or 2.
        sample_bytes: u8,
    },
    /// A raw colour-filter mosaic, one sample per pixel.
    Bayer {
        /// The colours of the top-left 2×2 cell.
        pattern: BayerPattern,
        /// Bytes per sample: 1 or 2.
        sample_bytes: u8,
    },
    /// YUV 4:2:2, two pixels in four bytes sharing one U and one V.
    Yuv422 {
        /// U Y0 V Y1 (`yuv422`, `uyvy`) when true; Y0 U Y1 V (`yuv422_yuy2`, `yuyv`) when false.
        uyvy: bool,
    },
    /// YUV 4:2:0 semi-planar: a luma plane, then a plane of chroma pairs for 2×2 pixels each.
    Yuv420sp {
        /// V U pairs (`nv21`) when true; U V (`nv12`) when false.
        vu: bool,
    },
}

/// The encodings [`PixelEncoding::parse`] accepts, for error messages.
pub const READ_ENCODINGS: &str = "rgb8, bgr8, rgba8, bgra8, mono8, their 16-bit forms (rgb16, \
     ..., mono16), bayer_rggb8/bggr8/gbrg8/grbg8 and their 16-bit forms, yuv422 (uyvy), \
     yuv422_yuy2 (yuyv), nv21 and nv12";

impl PixelEncoding {
    /// The encoding named `name` (a ROS `image_encodings` string), or `None` if redline does
    /// not read it.
    pub fn parse(name: &str) -> Option<PixelEncoding> {
        let interleaved = |channels, rgb, sample_bytes| PixelEncoding::Interleaved {
            channels,
            rgb,
            sample_bytes,
        };
        let bayer = |pattern, sample_bytes| PixelEncoding::Bayer {
            pattern,
            sample_bytes,
        };
        const RGB: [u8; 3] = [0, 1, 2];
        const BGR: [u8; 3] = [2, 1, 0];
        const GREY: [u8; 3] = [0, 0, 0];
        Some(match name {
            "rgb8" => interleaved(3, RGB, 1),
            "bgr8" => interleaved(3, BGR, 1),
            "rgba8" => interleaved(4, RGB, 1),
            "bgra8" => interleaved(4, BGR, 1),
            "mono8" | "8UC1" => interleaved(1, GREY, 1),
            "rgb16" => interleaved(3, RGB, 2),
            "bgr16" => interleaved(3, BGR, 2),
            "rgba16" => interleaved(4, RGB, 2),
            "bgra16" => interleaved(4, BGR, 2),
            "mono16" => interleaved(1, GREY, 2),
            "bayer_rggb8" => bayer(BayerPattern::Rggb, 1),
            "bayer_bggr8" => bayer(BayerPattern::Bggr, 1),
            "bayer_gbrg8" => bayer(BayerPattern::Gbrg, 1),
            "bayer_grbg8" => bayer(BayerPattern::Grbg, 1),
            "bayer_rggb16" => bayer(BayerPattern::Rggb, 2),
            "bayer_bggr16" => bayer(BayerPattern::Bggr, 2),
            "bayer_gbrg16" => bayer(BayerPattern::Gbrg, 2),
            "bayer_grbg16" => bayer(BayerPattern::Grbg, 2),
            "yuv422" | "uyvy" => PixelEncoding::Yuv422 { uyvy: true },
            "yuv422_yuy2" | "yuyv" => PixelEncoding::Yuv422 { uyvy: false },
            "nv21" => PixelEncoding::Yuv420sp { vu: true },
            "nv12" => PixelEncoding::Yuv420sp { vu: false },
            _ => return None,
        })
    }

    /// Rows of `step` bytes an image of `height` rows holds (4:2:0: its luma rows, then half
    /// as many chroma rows).
    pub fn data_rows(self, height: u64) -> u64 {
        match self {
            PixelEncoding::Yuv420sp { .. } => height + height / 2,
            _ => height,
        }
    }

    /// Bytes per pixel in a row (a YUV 4:2:2 pair of pixels takes four; a 4:2:0 image's
    /// rows count its luma bytes).
    pub fn bytes_per_pixel(self) -> usize {
        match self {
            PixelEncoding::Interleaved {
                channels,
                sample_bytes,
                ..
            } => channels as usize * sample_bytes as usize,
            PixelEncoding::Bayer { sample_bytes, .. } => sample_bytes as usize,
            PixelEncoding::Yuv422 { .. } => 2,
            PixelEncoding::Yuv420sp { .. } => 1,
        }
    }
}

/// One image's geometry and bytes, already checked: every row `y < data_rows(height)` has
/// `width · bytes_per_pixel` bytes at `data[y · step..]`.
pub(super) struct RawImage<'a> {
    pub width: usize,
    pub height: usize,
    pub step: usize,
    pub big_endian: bool,
    pub data: &'a [u8],
}

impl RawImage<'_> {
    fn row(&self, y: usize, bytes: usize) -> &[u8] {
        &self.data[y * self.step..][..bytes]
    }
}

/// A 16-bit value as cv_bridge scales it to 8 bits: `round(v · 255 / 65535)`.
fn scale16(v: u16) -> u8 {
    // v · 255 / 65535 = v / 257, never exactly halfway: round-to-nearest is (2v + 257) / 514.
    ((2 * v as u32 + 257) / 514) as u8
}

/// Converts `img` (checked layout, encoding `enc`) to tightly packed 8-bit RGB.
pub(super) fn to_rgb8(enc: PixelEncoding, img: &RawImage<'_>) -> Result<Vec<u8>, ImageIssue> {
    let (w, h) = (img.width, img.height);
    if let PixelEncoding::Yuv422 { uyvy } = enc {
        if !w.is_multiple_of(2) {
            return Err(ImageIssue::OddWidth {
                encoding: if uyvy { "yuv422" } else { "yuv422_yuy2" }.to_string(),
                width: img.width as u32,
            });
        }
    }
    if let PixelEncoding::Yuv420sp { vu } = enc {
        if !w.is_multiple_of(2) || !h.is_multiple_of(2) {
            return Err(ImageIssue::OddSize {
                encoding: if vu { "nv21" } else { "nv12" }.to_string(),
                width: img.width as u32,
                height: img.height as u32,
            });
        }
    }
    let mut out = vec![0u8; w * h * 3];
    if w == 0 {
        return Ok(out);
    }
    match enc {
        PixelEncoding::Interleaved {
            channels,
            rgb,
            sample_bytes,
        } => {
            let ch = channels as usize;
            let [r, g, b] = rgb.map(usize::from);
            for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
                let row = img.row(y, w * ch * sample_bytes as usize);
                if sample_bytes == 1 {
                    if rgb == [0, 1, 2] && ch == 3 {
                        dst.copy_from_slice(row);
                    } else {
                        for (d, p) in dst.chunks_exact_mut(3).zip(row.chunks_exact(ch)) {
                            d.copy_from_slice(&[p[r], p[g], p[b]]);
                        }
                    }
                } else {
                    let s = |p: &[u8], c: usize| scale16(sample16(img.big_endian, p, c));
                    for (d, p) in dst.chunks_exact_mut(3).zip(row.chunks_exact(2 * ch)) {
                        d.copy_from_slice(&[s(p, r), s(p, g), s(p, b)]);
                    }
                }
            }
        }
        PixelEncoding::Bayer {
            pattern,
            sample_bytes,
        } => {
            let mut plane = vec![0u16; w * h];
            for (y, dst) in plane.chunks_exact_mut(w).enumerate() {
                let row = img.row(y, w * sample_bytes as usize);
                if sample_bytes == 1 {
                    dst.iter_mut().zip(row).for_each(|(d, &v)| *d = v as u16);
                } else {
                    for (x, d) in dst.iter_mut().enumerate() {
                        *d = sample16(img.big_endian, row, x);
                    }
                }
            }
            if sample_bytes == 1 {
                demosaic(&plane, w, h, pattern, &mut out, |v| v as u8);
            } else {
                demosaic(&plane, w, h, pattern, &mut out, scale16);
            }
        }
        PixelEncoding::Yuv422 { uyvy } => {
            for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
                yuv422_row(img.row(y, w * 2), uyvy, &YuvMatrix::OPENCV_BT601, dst);
            }
        }
        PixelEncoding::Yuv420sp { vu } => {
            // Each row as U Y0 V Y1 pairs (its luma, its block row's chroma), then the 4:2:2
            // row conversion: the same formulas.
            let (ou, ov) = if vu { (1, 0) } else { (0, 1) };
            yuv420_rows(w, &mut out, &YuvMatrix::OPENCV_BT601, |y, pairs| {
                let (luma, chroma) = (img.row(y, w), img.row(h + y / 2, w));
                for ((q, l), c) in pairs
                    .chunks_exact_mut(4)
                    .zip(luma.chunks_exact(2))
                    .zip(chroma.chunks_exact(2))
                {
                    q.copy_from_slice(&[c[ou], l[0], c[ov], l[1]]);
                }
            });
        }
    }
    Ok(out)
}

/// A planar YUV 4:2:0 picture (I420: `y` of `width · height` bytes, `u` and `v` of
/// `width/2 · height/2`; `width` and `height` even, the planes that long) converted to 8-bit
/// RGB with the formulas of `matrix` (OpenCV's `COLOR_YUV2RGB_I420` for
/// [`YuvMatrix::OPENCV_BT601`], as `nv12`): a decoded video frame. `None` when the sizes do
/// not hold.
pub(crate) fn i420_to_rgb8(
    width: usize,
    height: usize,
    [y, u, v]: [&[u8]; 3],
    matrix: &YuvMatrix,
) -> Option<Vec<u8>> {
    let (cw, ch) = (width / 2, height / 2);
    if !width.is_multiple_of(2)
        || !height.is_multiple_of(2)
        || y.len() != width * height
        || u.len() != cw * ch
        || v.len() != cw * ch
    {
        return None;
    }
    let mut out = vec![0u8; width * height * 3];
    yuv420_rows(width, &mut out, matrix, |row, pairs| {
        let (luma, c) = (&y[row * width..][..width], (row / 2) * cw);
        for (i, (q, l)) in pairs
            .chunks_exact_mut(4)
            .zip(luma.chunks_exact(2))
            .enumerate()
        {
            q.copy_from_slice(&[u[c + i], l[0], v[c + i], l[1]]);
        }
    });
    Some(out)
}

/// Converts a 4:2:0 picture of width `w` into `out` (RGB) row by row: `row_pairs(y, pairs)`
/// writes row `y`'s pixel pairs as U Y0 V Y1 (its own luma, its 2×2 blocks' chroma), which
/// the 4:2:2 row conversion turns into RGB with the same formulas.
fn yuv420_rows(
    w: usize,
    out: &mut [u8],
    matrix: &YuvMatrix,
    mut row_pairs: impl FnMut(usize, &mut [u8]),
) {
    let mut pairs = vec![0u8; w * 2];
    for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
        row_pairs(y, &mut pairs);
        yuv422_row(&pairs, true, matrix, dst);
    }
}

/// Sample `i` of a row of 16-bit samples, in the message's byte order.
fn sample16(big_endian: bool, row: &[u8], i: usize) -> u16 {
    let b = [row[2 * i], row[2 * i + 1]];
    if big_endian {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

const YUV_SHIFT: u32 = 20;

/// A YUV → RGB conversion in 20-bit fixed point: `y = max(0, Y − y0) · cy`, then
/// `R = (y + cvr (V − 128) + 2¹⁹) >> 20`, `G = (y + cvg (V − 128) + cug (U − 128) + 2¹⁹) >> 20`,
/// `B = (y + cub (U − 128) + 2¹⁹) >> 20`, each clamped to 0..=255.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct YuvMatrix {
    y0: i32,
    cy: i32,
    cvr: i32,
    cvg: i32,
    cug: i32,
    cub: i32,
}

impl YuvMatrix {
    /// OpenCV's BT.601 video range (`COLOR_YUV2RGB_*`): its own rounded coefficients.
    pub(crate) const OPENCV_BT601: YuvMatrix = YuvMatrix {
        y0: 16,
        cy: 1_220_542,
        cvr: 1_673_527,
        cvg: -852_492,
        cug: -409_993,
        cub: 2_116_026,
    };

    /// The conversion a video stream signals (H.264/H.265 VUI): `matrix_coefficients` 1
    /// (BT.709), 5 or 6 (BT.601), 9 (BT.2020 non-constant luminance), else (2,
    /// unspecified, or one redline does not convert) BT.601; video range (luma 16..=235,
    /// chroma 16..=240) unless `full_range`. BT.601 video range is OpenCV's
    /// ([`YuvMatrix::OPENCV_BT601`], what raw YUV images get); the others are the standards'
    /// `Kr`/`Kb` definitions rounded to 20 bits.
    pub(crate) fn for_video(matrix_coefficients: u8, full_range: bool) -> YuvMatrix {
        let (kr, kb) = match matrix_coefficients {
            1 => (0.2126, 0.0722),
            9 => (0.2627, 0.0593),
            _ if !full_range => return YuvMatrix::OPENCV_BT601,
            _ => (0.299, 0.114),
        };
        let kg = 1.0 - kr - kb;
        // Video range scales luma by 255/219 and chroma by 255/224.
        let (y0, sy, sc) = if full_range {
            (0, 1.0, 1.0)
        } else {
            (16, 255.0 / 219.0, 255.0 / 224.0)
        };
        // IEEE arithmetic and rounding only: the same constants on every machine.
        let fixed = |c: f64| (c * f64::from(1 << YUV_SHIFT)).round() as i32;
        YuvMatrix {
            y0,
            cy: fixed(sy),
            cvr: fixed(2.0 * (1.0 - kr) * sc),
            cvg: fixed(-2.0 * (1.0 - kr) * kr / kg * sc),
            cug: fixed(-2.0 * (1.0 - kb) * kb / kg * sc),
            cub: fixed(2.0 * (1.0 - kb) * sc),
        }
    }
}

/// Pairs converted per block of [`yuv422_row`].
const YUV_BLOCK: usize = 32;

/// Converts one row of YUV 4:2:2 pairs (`src`: four bytes per pair) to RGB (`dst`: six
/// bytes per pair). Blocks of [`YUV_BLOCK`] pairs are split into planes, converted with
/// branch-free arithmetic the compiler vectorizes, and interleaved back.
fn yuv422_row(src: &[u8], uyvy: bool, m: &YuvMatrix, dst: &mut [u8]) {
    // Byte offsets of U, Y0, V, Y1 within a four-byte pair.
    let [ou, oy0, ov, oy1] = if uyvy { [0, 1, 2, 3] } else { [1, 0, 3, 2] };
    for (src, dst) in src.chunks(4 * YUV_BLOCK).zip(dst.chunks_mut(6 * YUV_BLOCK)) {
        let n = src.len() / 4;
        let (mut luma, mut u, mut v) =
            ([0i32; 2 * YUV_BLOCK], [0i32; YUV_BLOCK], [0i32; YUV_BLOCK]);
        for (i, q) in src.chunks_exact(4).enumerate() {
            luma[2 * i] = q[oy0] as i32;
            luma[2 * i + 1] = q[oy1] as i32;
            u[i] = q[ou] as i32 - 128;
            v[i] = q[ov] as i32 - 128;
        }
        // Planar, element-wise arithmetic over the block (the compiler's vector loops): the
        // chroma terms per pair, then each channel per pixel.
        let half = 1 << (YUV_SHIFT - 1);
        let (mut cr, mut cg, mut cb) = (
            [0i32; 2 * YUV_BLOCK],
            [0i32; 2 * YUV_BLOCK],
            [0i32; 2 * YUV_BLOCK],
        );
        for i in 0..YUV_BLOCK {
            let (r, g, b) = (
                half + m.cvr * v[i],
                half + m.cvg * v[i] + m.cug * u[i],
                half + m.cub * u[i],
            );
            (cr[2 * i], cr[2 * i + 1]) = (r, r);
            (cg[2 * i], cg[2 * i + 1]) = (g, g);
            (cb[2 * i], cb[2 * i + 1]) = (b, b);
        }
        let mut rgb = [[0u8; 3]; 2 * YUV_BLOCK];
        for j in 0..2 * YUV_BLOCK {
            // |yy| ≤ 255 · 1.17 · 2²⁰ and each chroma term ≤ 128 · 2.12 · 2²⁰ + 2¹⁹: every
            // sum fits an i32.
            let yy = (luma[j] - m.y0).max(0) * m.cy;
            let clamp = |t: i32| (t >> YUV_SHIFT).clamp(0, 255) as u8;
            rgb[j] = [clamp(yy + cr[j]), clamp(yy + cg[j]), clamp(yy + cb[j])];
        }
        for (d, px) in dst.chunks_exact_mut(3).zip(&rgb[..2 * n]) {
            d.copy_from_slice(px);
        }
    }
}

/// What a mosaic sample is, for the demosaic.
#[derive(Clone, Copy)]
enum Site {
    Red,
    Blue,
    GreenInRedRow,
    GreenInBlueRow,
}

/// Bilinear demosaic of `plane` (`w · h` samples) into `out` (`3 · w · h`), each channel value
/// passed through `to8`. See the module docs for the formulas and the border rule.
fn demosaic(
    plane: &[u16],
    w: usize,
    h: usize,
    pattern: BayerPattern,
    out: &mut [u8],
    to8: impl Fn(u16) -> u8,
) {
    if w < 3 || h < 3 {
        for (px, &v) in out.chunks_exact_mut(3).zip(plane) {
            px.fill(to8(v));
        }
        return;
    }
    for y in 1..h - 1 {
        let up = &plane[(y - 1) * w..][..w];
        let mid = &plane[y * w..][..w];
        let down = &plane[(y + 1) * w..][..w];
        let dst = &mut out[y * w * 3..][..w * 3];
        // What each column parity holds in this row: its own colour, and for a green site
        // whether red lies left and right of it (else above and below).
        let kind = |x: usize| match pattern.colour(y, x) {
            0 => Site::Red,
            2 => Site::Blue,
            _ if pattern.colour(y, x + 1) == 0 => Site::GreenInRedRow,
            _ => Site::GreenInBlueRow,
        };
        let kinds = [kind(0), kind(1)];
        for x in 1..w - 1 {
            let own = mid[x] as u32;
            let cross =
                || (up[x] as u32 + down[x] as u32 + mid[x - 1] as u32 + mid[x + 1] as u32 + 2) >> 2;
            let diag = || {
                (up[x - 1] as u32 + up[x + 1] as u32 + down[x - 1] as u32 + down[x + 1] as u32 + 2)
                    >> 2
            };
            let horiz = || (mid[x - 1] as u32 + mid[x + 1] as u32 + 1) >> 1;
            let vert = || (up[x] as u32 + down[x] as u32 + 1) >> 1;
            let rgb = match kinds[x & 1] {
                Site::Red => [own, cross(), diag()],
                Site::Blue => [diag(), cross(), own],
                Site::GreenInRedRow => [horiz(), own, vert()],
                Site::GreenInBlueRow => [vert(), own, horiz()],
            };
            // Every value is a rounded mean of u16 samples: it fits a u16.
            dst[x * 3..x * 3 + 3].copy_from_slice(&rgb.map(|v| to8(v as u16)));
        }
        // The first and last pixel of the row copy their inner neighbour.
        let row = &mut out[y * w * 3..][..w * 3];
        row.copy_within(3..6, 0);
        row.copy_within((w - 2) * 3..(w - 1) * 3, (w - 1) * 3);
    }
    // The first and last rows copy their inner neighbour.
    out.copy_within(w * 3..2 * w * 3, 0);
    out.copy_within((h - 2) * w * 3..(h - 1) * w * 3, (h - 1) * w * 3);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::Image;
    use proptest::prelude::*;

    /// The video matrices against the standards' definitions in `f64` (BT.709, BT.601 and
    /// BT.2020; video and full range): every (Y, U, V) on a grid within 1 of the exactly
    /// rounded value; the codes map to the matrices; unspecified video range is OpenCV's.
    #[test]
    fn video_matrices_follow_their_definitions() {
        for (code, kr, kb) in [
            (1u8, 0.2126, 0.0722),
            (6, 0.299, 0.114),
            (9, 0.2627, 0.0593),
        ] {
            for full in [false, true] {
                let m = YuvMatrix::for_video(code, full);
                if code == 6 && !full {
                    assert_eq!(m, YuvMatrix::OPENCV_BT601);
                    continue;
                }
                let kg = 1.0 - kr - kb;
                for y in (0..=255).step_by(5) {
                    for u in (0..=255).step_by(15) {
                        for v in (0..=255).step_by(15) {
                            let mut got = vec![0u8; 6];
                            yuv422_row(&[u, y, v, y], true, &m, &mut got);
                            let (yf, uf, vf) = if full {
                                (f64::from(y), f64::from(u) - 128.0, f64::from(v) - 128.0)
                            } else {
                                let s = 255.0 / 224.0;
                                (
                                    (f64::from(y) - 16.0).max(0.0) * 255.0 / 219.0,
                                    (f64::from(u) - 128.0) * s,
                                    (f64::from(v) - 128.0) * s,
                                )
                            };
                            let want = [
                                yf + 2.0 * (1.0 - kr) * vf,
                                yf - 2.0 * (1.0 - kr) * kr / kg * vf
                                    - 2.0 * (1.0 - kb) * kb / kg * uf,
                                yf + 2.0 * (1.0 - kb) * uf,
                            ];
                            for c in 0..3 {
                                let w = want[c].clamp(0.0, 255.0);
                                let d = (f64::from(got[c]) - w).abs();
                                assert!(
                                    d <= 1.0,
                                    "{code} {full} yuv {y} {u} {v}: {got:?} {want:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
        for code in [2u8, 5, 6, 0, 200] {
            assert_eq!(
                YuvMatrix::for_video(code, false),
                YuvMatrix::OPENCV_BT601,
                "{code}"
            );
        }
        assert_eq!(YuvMatrix::for_video(2, true), YuvMatrix::for_video(6, true));
        assert_ne!(YuvMatrix::for_video(1, false), YuvMatrix::OPENCV_BT601);
    }

    const NAMES: [&str; 25] = [
        "rgb8",
        "bgr8",
        "rgba8",
        "bgra8",
        "mono8",
        "8UC1",
        "rgb16",
        "bgr16",
        "rgba16",
        "bgra16",
        "mono16",
        "bayer_rggb8",
        "bayer_bggr8",
        "bayer_gbrg8",
        "bayer_grbg8",
        "bayer_rggb16",
        "bayer_bggr16",
        "bayer_gbrg16",
        "bayer_grbg16",
        "yuv422",
        "uyvy",
        "yuv422_yuy2",
        "yuyv",
        "nv21",
        "nv12",
    ];

    proptest! {
        /// Any geometry, stride, byte order and data length, in every read encoding: an RGB
        /// image of the message's size or an issue, never a panic.
        #[test]
        fn any_layout_converts_or_is_an_issue(enc in 0..NAMES.len(), width in 0u32..12,
                                              height in 0u32..9, step in 0u32..60,
                                              len in 0usize..600, be in any::<u8>(),
                                              seed in any::<u8>()) {
            let msg = Image {
                encoding: NAMES[enc].to_string(),
                width,
                height,
                step,
                is_bigendian: be,
                data: (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect(),
                ..Image::default()
            };
            match msg.to_rgb() {
                Ok(img) => prop_assert_eq!(img.data.len(), width as usize * height as usize * 3),
                Err(e) => {
                    let layout = matches!(e, ImageIssue::BadLayout { .. } | ImageIssue::OddWidth { .. } | ImageIssue::OddSize { .. });
                    prop_assert!(layout, "{}", e);
                }
            }
        }
    }

    fn raw(width: usize, height: usize, bpp: usize, data: &[u8]) -> RawImage<'_> {
        RawImage {
            width,
            height,
            step: width * bpp,
            big_endian: false,
            data,
        }
    }

    /// Every case of the OpenCV fixture (`tests/python/pixel_encoding_fixture.py`): the
    /// same RGB bytes as cv_bridge, every pixel, borders included.
    #[test]
    fn every_encoding_matches_opencv_pixel_for_pixel() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join("fixtures")
            .join("pixel_encodings");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        let cases = manifest["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 36);
        let mut encodings = std::collections::BTreeSet::new();
        for case in cases {
            let name = case["encoding"].as_str().unwrap();
            let field = |k: &str| case[k].as_u64().unwrap() as usize;
            let (w, h) = (field("width"), field("height"));
            let input = std::fs::read(dir.join(case["input"].as_str().unwrap())).unwrap();
            let want = std::fs::read(dir.join(case["rgb"].as_str().unwrap())).unwrap();
            let enc = PixelEncoding::parse(name).unwrap();
            let img = RawImage {
                width: w,
                height: h,
                step: w * enc.bytes_per_pixel(),
                big_endian: field("is_bigendian") != 0,
                data: &input,
            };
            let got = to_rgb8(enc, &img).unwrap();
            let differing: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
            assert!(
                differing.is_empty(),
                "{name} {w}x{h}: {} of {} bytes differ from OpenCV, first at pixel ({}, {})",
                differing.len(),
                want.len(),
                differing[0] / 3 % w,
                differing[0] / 3 / w
            );
            encodings.insert(name);
        }
        // 5 interleaved 16-bit, 8 mosaics, 2 YUV 4:2:2 orders, 2 YUV 4:2:0 ones.
        assert_eq!(encodings.len(), 17, "{encodings:?}");
    }

    #[test]
    fn sixteen_bits_scale_as_cv_bridge_rounds() {
        // round(v · 255 / 65535) computed in f64 for every value.
        for v in 0..=u16::MAX {
            let want = (v as f64 * 255.0 / 65535.0).round() as u8;
            assert_eq!(scale16(v), want, "{v}");
        }
    }

    #[test]
    fn a_flat_colour_survives_every_mosaic_exactly() {
        // A uniform colour mosaiced by each pattern demosaics to that colour at every pixel,
        // borders included (the means of equal samples are the sample).
        let colour = [200u16, 90, 17];
        for pattern in [
            BayerPattern::Rggb,
            BayerPattern::Bggr,
            BayerPattern::Gbrg,
            BayerPattern::Grbg,
        ] {
            let (w, h) = (7, 5);
            let mosaic: Vec<u8> = (0..h)
                .flat_map(|y| (0..w).map(move |x| colour[pattern.colour(y, x)] as u8))
                .collect();
            let enc = PixelEncoding::Bayer {
                pattern,
                sample_bytes: 1,
            };
            let out = to_rgb8(enc, &raw(w, h, 1, &mosaic)).unwrap();
            assert!(
                out.chunks(3).all(|p| p == [200, 90, 17]),
                "{pattern:?}: {out:?}"
            );
        }
    }

    #[test]
    fn tiny_mosaics_are_grey_not_a_panic() {
        for (w, h) in [(0, 0), (1, 1), (2, 5), (5, 2), (0, 3)] {
            let data: Vec<u8> = (0..w * h).map(|i| i as u8).collect();
            let enc = PixelEncoding::parse("bayer_grbg8").unwrap();
            let out = to_rgb8(enc, &raw(w, h, 1, &data)).unwrap();
            assert_eq!(out.len(), w * h * 3);
            assert!(out.chunks(3).zip(&data).all(|(p, &v)| p == [v, v, v]));
        }
    }

    #[test]
    fn yuv_greys_and_extremes() {
        // Grey chroma: R = G = B = round(1.164 (Y - 16)), clamped.
        for y in [0u8, 16, 17, 128, 235, 255] {
            let uyvy = [128, y, 128, y];
            let out = to_rgb8(PixelEncoding::parse("uyvy").unwrap(), &raw(2, 1, 2, &uyvy)).unwrap();
            let want = ((y.max(16) as f64 - 16.0) * 255.0 / 219.0)
                .round()
                .min(255.0) as u8;
            assert!(out.iter().all(|&c| c.abs_diff(want) <= 1), "{y}: {out:?}");
            // The same pixels in YUYV order.
            let yuyv = [y, 128, y, 128];
            let out2 = to_rgb8(
                PixelEncoding::parse("yuv422_yuy2").unwrap(),
                &raw(2, 1, 2, &yuyv),
            )
            .unwrap();
            assert_eq!(out, out2);
        }
        // Extreme chroma clamps instead of wrapping.
        let out = to_rgb8(
            PixelEncoding::parse("yuv422").unwrap(),
            &raw(2, 1, 2, &[255, 255, 255, 0]),
        )
        .unwrap();
        assert_eq!(&out[..3], &[255, 125, 255]);
        assert_eq!(&out[3..], &[203, 0, 255]);
        // An odd width cannot pair its pixels.
        assert_eq!(
            to_rgb8(
                PixelEncoding::parse("yuyv").unwrap(),
                &raw(3, 1, 2, &[0; 6])
            ),
            Err(ImageIssue::OddWidth {
                encoding: "yuv422_yuy2".into(),
                width: 3
            })
        );
    }

    #[test]
    fn sixteen_bit_samples_follow_is_bigendian() {
        let little = [0x00, 0xff, 0x80, 0x00, 0x01, 0x02]; // 0xff00, 0x0080, 0x0201
        let enc = PixelEncoding::parse("rgb16").unwrap();
        let le = to_rgb8(enc, &raw(1, 1, 6, &little)).unwrap();
        assert_eq!(le, vec![scale16(0xff00), scale16(0x0080), scale16(0x0201)]);
        let be = to_rgb8(
            enc,
            &RawImage {
                big_endian: true,
                ..raw(1, 1, 6, &little)
            },
        )
        .unwrap();
        assert_eq!(be, vec![scale16(0x00ff), scale16(0x8000), scale16(0x0102)]);
    }

    #[test]
    fn parse_knows_the_ros_names_and_refuses_the_rest() {
        for name in NAMES {
            assert!(PixelEncoding::parse(name).is_some(), "{name}");
        }
        for name in ["16UC1", "8UC3", "32FC1", "nv24", "RGB8", "jpeg", ""] {
            assert_eq!(PixelEncoding::parse(name), None, "{name}");
        }
    }

    #[test]
    fn an_odd_sized_four_two_zero_image_is_an_issue_not_a_panic() {
        for (w, h) in [(3, 2), (2, 3), (1, 1)] {
            let data = vec![128u8; w * h * 2];
            let enc = PixelEncoding::parse("nv21").unwrap();
            let e = to_rgb8(enc, &raw(w, h, 1, &data)).unwrap_err();
            assert!(
                matches!(e, ImageIssue::OddSize { .. }) && e.to_string().contains("not even"),
                "{w}x{h}: {e}"
            );
        }
    }

    #[test]
    fn i420_converts_as_nv12_with_the_chroma_planes_interleaved() {
        let (w, h) = (6usize, 4usize);
        let y: Vec<u8> = (0..w * h).map(|i| (i * 37 % 256) as u8).collect();
        let u: Vec<u8> = (0..w * h / 4).map(|i| (i * 91 % 256) as u8).collect();
        let v: Vec<u8> = (0..w * h / 4).map(|i| (255 - i * 53 % 256) as u8).collect();
        let mut nv12 = y.clone();
        for (a, b) in u.iter().zip(&v) {
            nv12.extend([*a, *b]);
        }
        let want = to_rgb8(PixelEncoding::parse("nv12").unwrap(), &raw(w, h, 1, &nv12)).unwrap();
        let m = &YuvMatrix::OPENCV_BT601;
        assert_eq!(i420_to_rgb8(w, h, [&y, &u, &v], m).unwrap(), want);
        assert!(i420_to_rgb8(w, h, [&y[1..], &u, &v], m).is_none());
        assert!(i420_to_rgb8(5, 4, [&y[..20], &u, &v], m).is_none());
    }
}
