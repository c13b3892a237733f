//! Test images for the JPEG decoder's tests (and its benchmark, which includes this file):
//! a deterministic natural-ish picture (smooth shading, texture, hard edges, a little noise),
//! encoded by jpeg-encoder and decoded by zune-jpeg as the reference.

#![allow(dead_code)]

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use redline_runtime::det_math as dm;

/// Chroma subsampling modes the tests cover.
pub const MODES: [(&str, SamplingFactor); 4] = [
    ("4:4:4", SamplingFactor::R_4_4_4),
    ("4:2:2", SamplingFactor::R_4_2_2),
    ("4:2:0", SamplingFactor::R_4_2_0),
    ("4:4:0", SamplingFactor::R_4_4_0),
];

/// A `w`×`h` RGB8 picture: a sky gradient, a textured road, boxes and discs with sharp
/// edges, and low-amplitude noise, all from `seed`.
pub fn natural_rgb(w: usize, h: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let shapes: Vec<(f32, f32, f32, [f32; 3], bool)> = (0..12)
        .map(|_| {
            let cx = (rnd() % 1000) as f32 / 1000.0 * w as f32;
            let cy = (rnd() % 1000) as f32 / 1000.0 * h as f32;
            let r = (0.03 + (rnd() % 100) as f32 / 1000.0) * w.min(h).max(8) as f32;
            let c = [
                (rnd() % 256) as f32,
                (rnd() % 256) as f32,
                (rnd() % 256) as f32,
            ];
            (cx, cy, r, c, rnd() % 2 == 0)
        })
        .collect();
    let mut img = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
            let mut c = if fy < 0.45 {
                [90.0 + 80.0 * fy, 140.0 + 60.0 * fy, 230.0 - 40.0 * fx]
            } else {
                let t = 100.0 + 25.0 * (dm::sin(x as f32 * 0.31) * dm::cos(y as f32 * 0.17));
                [t, t * 0.97, t * 0.9]
            };
            for &(cx, cy, r, col, square) in &shapes {
                let (dx, dy) = (x as f32 - cx, y as f32 - cy);
                let inside = if square {
                    dx.abs() < r && dy.abs() < r * 0.6
                } else {
                    dx * dx + dy * dy < r * r
                };
                if inside {
                    c = col;
                }
            }
            let n = (rnd() % 9) as f32 - 4.0;
            for k in 0..3 {
                img[(y * w + x) * 3 + k] = (c[k] + n).clamp(0.0, 255.0) as u8;
            }
        }
    }
    img
}

/// The luma of [`natural_rgb`].
pub fn natural_grey(w: usize, h: usize, seed: u64) -> Vec<u8> {
    natural_rgb(w, h, seed)
        .chunks_exact(3)
        .map(|p| ((77 * p[0] as u32 + 150 * p[1] as u32 + 29 * p[2] as u32) >> 8) as u8)
        .collect()
}

/// Encodes with jpeg-encoder: 3 components (YCbCr with `sampling`) or 1 (grey).
pub fn encode(
    w: usize,
    h: usize,
    seed: u64,
    grey: bool,
    sampling: SamplingFactor,
    quality: u8,
    restart: u16,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = Encoder::new(&mut out, quality);
    enc.set_sampling_factor(sampling);
    if restart > 0 {
        enc.set_restart_interval(restart);
    }
    if grey {
        enc.encode(
            &natural_grey(w, h, seed),
            w as u16,
            h as u16,
            ColorType::Luma,
        )
    } else {
        enc.encode(&natural_rgb(w, h, seed), w as u16, h as u16, ColorType::Rgb)
    }
    .expect("jpeg-encoder encodes the test image");
    out
}

/// zune-jpeg's RGB8 decode of `data` (the reference).
pub fn zune_rgb(data: &[u8]) -> Vec<u8> {
    use zune_jpeg::zune_core::colorspace::ColorSpace;
    use zune_jpeg::zune_core::options::DecoderOptions;
    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut dec = zune_jpeg::JpegDecoder::new_with_options(data, options);
    let pixels = dec.decode().expect("zune-jpeg decodes the test image");
    let (w, h) = dec.dimensions().expect("dimensions after decode");
    if pixels.len() == w * h {
        // Grey images come back as one channel whatever the colour space asked for.
        pixels.iter().flat_map(|&l| [l, l, l]).collect()
    } else {
        pixels
    }
}

/// Largest absolute difference and PSNR (dB) between two images of equal length.
pub fn compare(a: &[u8], b: &[u8]) -> (u8, f64) {
    assert_eq!(a.len(), b.len());
    let mut max = 0u8;
    let mut se = 0f64;
    for (&x, &y) in a.iter().zip(b) {
        let d = x.abs_diff(y);
        max = max.max(d);
        se += (d as f64) * (d as f64);
    }
    let mse = se / a.len() as f64;
    let psnr = if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * dm::log10(255.0 * 255.0 / mse)
    };
    (max, psnr)
}

/// [`compare`] without the last two columns of each row: zune-jpeg's horizontal triangle
/// filter weighs the last-but-one output column from the wrong input sample (its centre is
/// input `n-2` instead of `n-1`), so those columns differ by more than rounding.
pub fn compare_interior(a: &[u8], b: &[u8], w: usize) -> (u8, f64) {
    if w <= 2 {
        return compare(a, b);
    }
    let keep = |img: &[u8]| -> Vec<u8> {
        img.chunks_exact(w * 3)
            .flat_map(|row| row[..(w - 2) * 3].iter().copied())
            .collect()
    };
    compare(&keep(a), &keep(b))
}
