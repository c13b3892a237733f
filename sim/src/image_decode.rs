//! Decoding `sensor_msgs/CompressedImage` payloads (JPEG, PNG) to packed RGB8.
//!
//! Contract:
//! - The format is taken from the data's signature (JPEG `FF D8 FF`, PNG `89 'PNG'`), not
//!   from the message's free-form `format` string, which publishers fill inconsistently
//!   (`jpeg`, `bgr8; jpeg compressed bgr8`, `rgb8; compressed bgr8`). The output is RGB
//!   whatever the stream holds: JPEG YCbCr, grey or CMYK and PNG grey, grey+alpha, palette,
//!   RGB and RGBA (alpha dropped, 16-bit reduced to 8) are converted.
//! - An image larger than `max_side` on either side is refused from its header, before any
//!   pixel buffer is allocated; a corrupt stream is an [`ImageIssue::Undecodable`], never a
//!   panic.
//! - Decoders: JPEG with redline's own integer decoder (`redline_pipeline::jpeg`, the one the
//!   graph's `jpeg_decode` stage runs, so pixels do not depend on where a log is decoded),
//!   falling back to zune-jpeg for what it does not support (progressive, arithmetic coding,
//!   12-bit, CMYK); PNG with the png crate. All pure Rust (no system library, nothing
//!   downloaded).
//!
//! Cost: one output allocation per image plus the decoder's buffers (about 3 bytes a pixel);
//! this runs where the replay feed decodes a log, not in a real-time stage.

use redline_pipeline::jpeg::{JpegDecoder, JpegError};

use crate::msgs::{CompressedImage, ImageIssue};
use crate::types::RgbImage;

/// The container a compressed image's bytes hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// JPEG (JFIF/EXIF).
    Jpeg,
    /// PNG.
    Png,
}

impl Compression {
    /// Recognises the stream by its first bytes.
    pub fn sniff(data: &[u8]) -> Option<Compression> {
        if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Compression::Jpeg)
        } else if data.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
            Some(Compression::Png)
        } else {
            None
        }
    }
}

/// Decodes a compressed image message to RGB8 (see the module docs).
pub fn decode_compressed(msg: &CompressedImage, max_side: u32) -> Result<RgbImage, ImageIssue> {
    match Compression::sniff(&msg.data) {
        Some(Compression::Jpeg) => decode_jpeg(&msg.data, max_side),
        Some(Compression::Png) => decode_png(&msg.data, max_side),
        None => Err(ImageIssue::Undecodable {
            format: msg.format.clone(),
            why: format!(
                "the data ({} bytes) is neither JPEG nor PNG (no JPEG or PNG signature)",
                msg.data.len()
            ),
        }),
    }
}

fn undecodable(format: &str, why: impl std::fmt::Display) -> ImageIssue {
    ImageIssue::Undecodable {
        format: format.to_string(),
        why: why.to_string(),
    }
}

fn check_side(format: &str, w: usize, h: usize, max_side: u32) -> Result<(), ImageIssue> {
    if w == 0 || h == 0 || w > max_side as usize || h > max_side as usize {
        return Err(undecodable(
            format,
            format!(
                "{w}x{h} px is outside 1..={max_side} px per side (`max_image_side` in the [log] table)"
            ),
        ));
    }
    Ok(())
}

/// The (width, height) in a JPEG stream's frame header, without decoding it. A stream the
/// graph's decoder ([`JpegDecoder`]) cannot decode (progressive, arithmetic-coded, 12-bit,
/// CMYK) is an issue here, at read time, naming the feature.
pub fn jpeg_size(data: &[u8]) -> Result<(u32, u32), ImageIssue> {
    let info = JpegDecoder::peek_info(data).map_err(|e| undecodable("jpeg", e))?;
    Ok((info.width as u32, info.height as u32))
}

/// Decodes a JPEG stream to RGB8 with the graph's own decoder ([`JpegDecoder`]: integer
/// arithmetic, so a log read here gives the same pixels as the same log decoded inside the
/// graph by the `jpeg_decode` stage). A stream that decoder does not support (progressive,
/// arithmetic coding, 12-bit, CMYK: see `redline_pipeline::jpeg`) is decoded by zune-jpeg
/// instead; its pixels may differ from libjpeg's by a level or two, and such a log cannot be
/// decoded in the graph.
pub fn decode_jpeg(data: &[u8], max_side: u32) -> Result<RgbImage, ImageIssue> {
    let info = match JpegDecoder::peek_info(data) {
        Ok(info) => info,
        Err(JpegError::Unsupported { .. }) => return decode_jpeg_other(data, max_side),
        Err(e) => return Err(undecodable("jpeg", e)),
    };
    check_side("jpeg", info.width, info.height, max_side)?;
    let mut decoder = JpegDecoder::new(info.width, info.height);
    let mut out = vec![0u8; info.rgb_len()];
    match decoder.decode_into(data, &mut out) {
        Ok(_) => Ok(RgbImage {
            width: info.width as u32,
            height: info.height as u32,
            data: out,
        }),
        // A feature seen past the frame header (e.g. Adobe RGB without transform).
        Err(JpegError::Unsupported { .. }) => decode_jpeg_other(data, max_side),
        Err(e) => Err(undecodable("jpeg", e)),
    }
}

/// zune-jpeg, for the JPEG features redline's decoder does not have.
fn decode_jpeg_other(data: &[u8], max_side: u32) -> Result<RgbImage, ImageIssue> {
    use zune_jpeg::zune_core::colorspace::ColorSpace;
    use zune_jpeg::zune_core::options::DecoderOptions;
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        // The size is checked below, from the header, with redline's own message.
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut dec = zune_jpeg::JpegDecoder::new_with_options(data, options);
    dec.decode_headers().map_err(|e| undecodable("jpeg", e))?;
    let (w, h) = dec
        .dimensions()
        .ok_or_else(|| undecodable("jpeg", "no frame header"))?;
    check_side("jpeg", w, h, max_side)?;
    let mut out = vec![0u8; w * h * 3];
    dec.decode_into(&mut out)
        .map_err(|e| undecodable("jpeg", e))?;
    Ok(RgbImage {
        width: w as u32,
        height: h as u32,
        data: out,
    })
}

/// Decodes a PNG stream to RGB8.
pub fn decode_png(data: &[u8], max_side: u32) -> Result<RgbImage, ImageIssue> {
    let mut dec = png::Decoder::new(std::io::Cursor::new(data));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().map_err(|e| undecodable("png", e))?;
    let (w, h) = {
        let info = reader.info();
        (info.width as usize, info.height as usize)
    };
    check_side("png", w, h, max_side)?;
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let frame = reader
        .next_frame(&mut buf)
        .map_err(|e| undecodable("png", e))?;
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err(undecodable("png", "palette not expanded"));
        }
    };
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        let row = &buf[y * frame.line_size..][..w * channels];
        match channels {
            1 | 2 => row
                .chunks_exact(channels)
                .for_each(|p| out.extend_from_slice(&[p[0], p[0], p[0]])),
            _ => row
                .chunks_exact(channels)
                .for_each(|p| out.extend_from_slice(&p[..3])),
        }
    }
    Ok(RgbImage {
        width: w as u32,
        height: h as u32,
        data: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A smooth test picture (JPEG keeps smooth gradients within a few levels).
    fn picture(w: u32, h: u32) -> Vec<u8> {
        (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| [(x * 4) as u8, (y * 4) as u8, 128]))
            .collect()
    }

    fn jpeg(w: u16, h: u16, rgb: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, 95)
            .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        out
    }

    #[test]
    fn jpeg_decodes_to_rgb_close_to_the_source() {
        let src = picture(48, 32);
        let msg = CompressedImage {
            format: "bgr8; jpeg compressed bgr8".into(),
            data: jpeg(48, 32, &src),
            ..CompressedImage::default()
        };
        let img = decode_compressed(&msg, 8192).unwrap();
        assert_eq!((img.width, img.height), (48, 32));
        let worst = img
            .data
            .iter()
            .zip(&src)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(worst <= 12, "worst channel error {worst}");
        // too large for the limit: refused from the header
        let e = decode_compressed(&msg, 40).unwrap_err().to_string();
        assert!(e.contains("48x32") && e.contains("max_image_side"), "{e}");
    }

    #[test]
    fn baseline_jpeg_gives_the_graph_decoders_pixels_and_progressive_still_decodes() {
        let src = picture(48, 32);
        let baseline = jpeg(48, 32, &src);
        let img = decode_jpeg(&baseline, 8192).unwrap();
        // Exactly what the jpeg_decode stage's decoder writes for the same bytes.
        let mut graph = vec![0u8; 48 * 32 * 3];
        JpegDecoder::new(48, 32)
            .decode_into(&baseline, &mut graph)
            .unwrap();
        assert_eq!(img.data, graph);
        assert_eq!(jpeg_size(&baseline).unwrap(), (48, 32));

        let mut progressive = Vec::new();
        let mut enc = jpeg_encoder::Encoder::new(&mut progressive, 95);
        enc.set_progressive(true);
        enc.encode(&src, 48, 32, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        // The graph's decoder refuses it by name (so a streamed replay reports it) ...
        let e = jpeg_size(&progressive).unwrap_err().to_string();
        assert!(e.to_lowercase().contains("progressive"), "{e}");
        // ... and reading it into memory still decodes it (zune-jpeg).
        let img = decode_jpeg(&progressive, 8192).unwrap();
        let worst = img.data.iter().zip(&src).map(|(a, b)| a.abs_diff(*b)).max();
        assert!(worst.unwrap() <= 12, "worst channel error {worst:?}");
    }

    #[test]
    fn png_decodes_exactly_in_every_colour_type() {
        let (w, h) = (5u32, 3u32);
        let src = picture(w, h);
        for (ct, px) in [
            (png::ColorType::Rgb, 3usize),
            (png::ColorType::Rgba, 4),
            (png::ColorType::Grayscale, 1),
        ] {
            let data: Vec<u8> = src
                .chunks(3)
                .flat_map(|p| match px {
                    3 => p.to_vec(),
                    4 => vec![p[0], p[1], p[2], 7],
                    _ => vec![p[0]],
                })
                .collect();
            let mut bytes = Vec::new();
            {
                let mut enc = png::Encoder::new(&mut bytes, w, h);
                enc.set_color(ct);
                enc.set_depth(png::BitDepth::Eight);
                enc.write_header().unwrap().write_image_data(&data).unwrap();
            }
            let img = decode_png(&bytes, 8192).unwrap();
            let want: Vec<u8> = if px == 1 {
                src.chunks(3).flat_map(|p| [p[0], p[0], p[0]]).collect()
            } else {
                src.clone()
            };
            assert_eq!(img.data, want, "{ct:?}");
        }
    }

    #[test]
    fn garbage_and_truncated_streams_are_issues_not_panics() {
        let src = picture(16, 16);
        let good = jpeg(16, 16, &src);
        for data in [
            vec![],
            vec![1, 2, 3],
            good[..good.len() / 2].to_vec(),
            good[..4].to_vec(),
            [
                &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A][..],
                &[0; 20],
            ]
            .concat(),
        ] {
            let msg = CompressedImage {
                format: "jpeg".into(),
                data,
                ..CompressedImage::default()
            };
            // A truncated JPEG may decode with grey filling (zune-jpeg is lenient); what
            // matters is no panic and, when it fails, an Undecodable issue.
            if let Err(e) = decode_compressed(&msg, 8192) {
                assert!(matches!(e, ImageIssue::Undecodable { .. }), "{e:?}");
            }
        }
        let e = decode_compressed(
            &CompressedImage {
                format: "tiff".into(),
                data: vec![0; 8],
                ..CompressedImage::default()
            },
            8192,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tiff") && e.contains("neither JPEG nor PNG"),
            "{e}"
        );
    }
}
