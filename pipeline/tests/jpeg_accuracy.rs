//! The hot-path JPEG decoder against zune-jpeg on the same files: every chroma mode, grey,
//! restart intervals, sizes that are not multiples of the MCU, qualities 75 to 95. The
//! outputs differ only by rounding (integer IDCT, upsampling and colour conversion), so
//! the bound is PSNR above 40 dB and a small largest difference away from the last two
//! columns (where zune-jpeg's horizontal upsampling weighs the wrong sample: see
//! `compare_interior`); and both decoders are equally close to the original picture.
//! `cargo test -p redline-pipeline --test jpeg_accuracy -- --nocapture` prints the table.

mod jpeg_common;

use jpeg_common::{compare, compare_interior, encode, natural_grey, natural_rgb, zune_rgb, MODES};
use jpeg_encoder::SamplingFactor;
use redline_pipeline::jpeg::{JpegDecoder, JpegError, JpegInfo};

const SIZES: [(usize, usize); 5] = [(640, 480), (333, 217), (17, 9), (1, 1), (64, 8)];

fn ours(dec: &mut JpegDecoder, data: &[u8]) -> (JpegInfo, Vec<u8>) {
    let info = JpegDecoder::peek_info(data).expect("peek_info");
    let mut out = vec![0u8; info.rgb_len()];
    let got = dec.decode_into(data, &mut out).expect("decode_into");
    assert_eq!(got, info);
    (info, out)
}

#[test]
fn matches_zune_jpeg_in_every_mode() {
    let mut dec = JpegDecoder::new(1920, 1080);
    let mut modes: Vec<(&str, bool, SamplingFactor)> =
        MODES.iter().map(|&(n, s)| (n, false, s)).collect();
    modes.push(("grey", true, SamplingFactor::R_4_4_4));
    println!(
        "mode   quality restart  size       max|diff| (interior)  PSNR dB   PSNR vs original: ours zune"
    );
    for (name, grey, sampling) in modes {
        let mut worst_psnr = f64::INFINITY;
        let mut worst_max = 0;
        let mut worst_interior = 0;
        let mut worst_gap = 0f64;
        for (si, &(w, h)) in SIZES.iter().enumerate() {
            for quality in [75u8, 90, 95] {
                for restart in [0u16, 7] {
                    let data = encode(w, h, si as u64 + 1, grey, sampling, quality, restart);
                    let (info, got) = ours(&mut dec, &data);
                    assert_eq!((info.width, info.height), (w, h));
                    assert_eq!(info.components, if grey { 1 } else { 3 });
                    let want = zune_rgb(&data);
                    let (max, psnr) = compare(&got, &want);
                    let (max_in, _) = compare_interior(&got, &want, w);
                    let original = if grey {
                        natural_grey(w, h, si as u64 + 1)
                            .iter()
                            .flat_map(|&l| [l, l, l])
                            .collect()
                    } else {
                        natural_rgb(w, h, si as u64 + 1)
                    };
                    let (_, ours_psnr) = compare(&got, &original);
                    let (_, zune_psnr) = compare(&want, &original);
                    if w >= 333 {
                        println!(
                            "{name:6} {quality:7} {restart:7}  {w:4}x{h:<4}  {max:9} ({max_in:3})     \
                             {psnr:7.1}   {ours_psnr:7.2} {zune_psnr:7.2}"
                        );
                    }
                    assert!(
                        psnr > 40.0 && max_in <= 12,
                        "{name} q{quality} rst{restart} {w}x{h}: max {max_in} (interior), \
                         PSNR {psnr:.1} dB"
                    );
                    assert!(
                        ours_psnr == zune_psnr || (ours_psnr - zune_psnr).abs() < 0.1,
                        "{name} q{quality} rst{restart} {w}x{h}: PSNR against the original \
                         {ours_psnr:.2} dB (ours) vs {zune_psnr:.2} dB (zune-jpeg)"
                    );
                    worst_psnr = worst_psnr.min(psnr);
                    worst_max = worst_max.max(max);
                    worst_interior = worst_interior.max(max_in);
                    if ours_psnr.is_finite() {
                        worst_gap = worst_gap.max(zune_psnr - ours_psnr);
                    }
                }
            }
        }
        println!(
            "{name:6} worst over all sizes: max|diff| {worst_max} (interior {worst_interior}), \
             PSNR {worst_psnr:.1} dB; PSNR vs original at most {worst_gap:.3} dB below zune-jpeg's"
        );
    }
}

#[test]
fn full_hd_420_matches_zune_jpeg() {
    let mut dec = JpegDecoder::new(1920, 1080);
    let data = encode(1920, 1080, 7, false, SamplingFactor::R_4_2_0, 90, 0);
    let (_, got) = ours(&mut dec, &data);
    let want = zune_rgb(&data);
    let (max, psnr) = compare(&got, &want);
    let (max_in, _) = compare_interior(&got, &want, 1920);
    println!("1920x1080 4:2:0 q90: max|diff| {max} (interior {max_in}), PSNR {psnr:.1} dB");
    assert!(psnr > 40.0 && max_in <= 12, "max {max_in}, PSNR {psnr:.1}");
    // Decoding again with the same decoder gives the same bits (no state leaks).
    let small = encode(640, 480, 3, true, SamplingFactor::R_4_4_4, 80, 3);
    ours(&mut dec, &small);
    let (_, again) = ours(&mut dec, &data);
    assert_eq!(got, again);
}

#[test]
fn too_large_and_short_output_are_errors_naming_sizes() {
    let data = encode(640, 480, 1, false, SamplingFactor::R_4_2_0, 90, 0);
    let mut small = JpegDecoder::new(320, 480);
    let mut out = vec![0u8; 640 * 480 * 3];
    let e = small.decode_into(&data, &mut out).unwrap_err();
    assert_eq!(
        e,
        JpegError::TooLarge {
            width: 640,
            height: 480,
            max_width: 320,
            max_height: 480
        }
    );
    assert!(e.to_string().contains("640x480") && e.to_string().contains("320x480"));
    let mut dec = JpegDecoder::new(640, 480);
    let e = dec.decode_into(&data, &mut out[..100]).unwrap_err();
    assert!(
        matches!(
            e,
            JpegError::OutputTooSmall {
                needed: 921600,
                got: 100,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        dec.decode_into(b"\x89PNG....", &mut out),
        Err(JpegError::NotJpeg)
    );
}

fn unsupported(data: &[u8]) -> &'static str {
    let mut dec = JpegDecoder::new(640, 480);
    let mut out = vec![0u8; 640 * 480 * 3];
    match dec.decode_into(data, &mut out) {
        Err(JpegError::Unsupported { what }) => what,
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// Position of the first `FF m` marker.
fn marker_at(data: &[u8], m: u8) -> usize {
    data.windows(2)
        .position(|p| p == [0xff, m])
        .expect("marker present")
}

#[test]
fn unsupported_features_are_named() {
    let mut prog = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut prog, 90);
    enc.set_progressive(true);
    enc.encode(
        &jpeg_common::natural_rgb(64, 48, 1),
        64,
        48,
        jpeg_encoder::ColorType::Rgb,
    )
    .unwrap();
    assert!(unsupported(&prog).contains("progressive"));
    assert!(JpegDecoder::peek_info(&prog).is_err());

    let mut cmyk = Vec::new();
    jpeg_encoder::Encoder::new(&mut cmyk, 90)
        .encode(&[128u8; 64 * 48 * 4], 64, 48, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
    assert!(unsupported(&cmyk).contains("CMYK"));

    let base = encode(64, 48, 1, false, SamplingFactor::R_4_2_0, 90, 0);
    let sof = marker_at(&base, 0xc0);
    let mut twelve = base.clone();
    twelve[sof + 4] = 12;
    assert!(unsupported(&twelve).contains("12-bit"));
    let mut arith = base.clone();
    arith[sof + 1] = 0xc9;
    assert!(unsupported(&arith).contains("arithmetic"));
    let mut lossless = base.clone();
    lossless[sof + 1] = 0xc3;
    assert!(unsupported(&lossless).contains("lossless"));
    // SOF1 (extended sequential, 8-bit) decodes like SOF0.
    let mut sof1 = base.clone();
    sof1[sof + 1] = 0xc1;
    let mut dec = JpegDecoder::new(64, 48);
    let (a, b) = (ours(&mut dec, &base).1, ours(&mut dec, &sof1).1);
    assert_eq!(a, b);
}

#[test]
fn fill_bytes_comments_and_app_segments_change_nothing() {
    let data = encode(96, 64, 4, false, SamplingFactor::R_4_2_0, 90, 2);
    let mut dec = JpegDecoder::new(96, 64);
    let want = ours(&mut dec, &data).1;
    let mut padded = vec![0xff, 0xd8];
    // A comment, an unknown APP segment, and fill bytes before the next marker.
    padded.extend_from_slice(&[0xff, 0xfe, 0x00, 0x05, b'h', b'i', b'!']);
    padded.extend_from_slice(&[0xff, 0xe7, 0x00, 0x04, 0xff, 0xd9, 0xff, 0xff]);
    let mut rst = 0;
    let mut i = 2;
    while i < data.len() {
        // An extra fill byte before every restart marker.
        if data[i] == 0xff && (0xd0..=0xd7).contains(&data.get(i + 1).copied().unwrap_or(0)) {
            padded.push(0xff);
            rst += 1;
        }
        padded.push(data[i]);
        i += 1;
    }
    assert!(rst > 10, "{rst} restart markers");
    assert_eq!(ours(&mut dec, &padded).1, want);
    // A restart marker out of order is an error, not a wrong image.
    let at = data.windows(2).position(|p| p == [0xff, 0xd3]).unwrap();
    let mut swapped = data.clone();
    swapped[at + 1] = 0xd5;
    let mut out = vec![0u8; 96 * 64 * 3];
    assert!(matches!(
        dec.decode_into(&swapped, &mut out),
        Err(JpegError::Corrupt { what }) if what.contains("restart")
    ));
}

/// `data` without its DHT segments (as motion-JPEG cameras send frames).
fn without_dht(data: &[u8]) -> Vec<u8> {
    let mut out = data[..2].to_vec();
    let mut i = 2;
    loop {
        let (m, len) = (
            data[i + 1],
            ((data[i + 2] as usize) << 8) | data[i + 3] as usize,
        );
        if m == 0xda {
            out.extend_from_slice(&data[i..]);
            return out;
        }
        if m != 0xc4 {
            out.extend_from_slice(&data[i..i + 2 + len]);
        }
        i += 2 + len;
    }
}

#[test]
fn streams_without_huffman_tables_use_the_standard_ones() {
    for (grey, sampling) in [
        (false, SamplingFactor::R_4_2_0),
        (true, SamplingFactor::R_4_4_4),
    ] {
        let data = encode(80, 48, 5, grey, sampling, 85, 0);
        let stripped = without_dht(&data);
        assert!(stripped.len() < data.len() && !stripped.windows(2).any(|p| p == [0xff, 0xc4]));
        let mut dec = JpegDecoder::new(80, 48);
        assert_eq!(ours(&mut dec, &stripped).1, ours(&mut dec, &data).1);
    }
    // With optimised tables the stream is only right with its own DHT; without it, the
    // standard tables misread it: an error or a different image, never a panic.
    let mut opt = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut opt, 85);
    enc.set_optimized_huffman_tables(true);
    enc.encode(
        &jpeg_common::natural_rgb(80, 48, 5),
        80,
        48,
        jpeg_encoder::ColorType::Rgb,
    )
    .unwrap();
    let mut dec = JpegDecoder::new(80, 48);
    let want = ours(&mut dec, &opt).1;
    let mut out = vec![0u8; 80 * 48 * 3];
    if dec.decode_into(&without_dht(&opt), &mut out).is_ok() {
        assert_ne!(out, want);
    }
}

/// A minimal baseline encoder for flat 8×8 blocks (DC only, quantizer 1, the Annex K
/// luminance tables): lets the test write layouts jpeg-encoder does not, here one scan per
/// component (non-interleaved).
mod flat_blocks {
    struct Bits {
        out: Vec<u8>,
        acc: u32,
        n: u32,
    }

    impl Bits {
        fn put(&mut self, code: u32, len: u32) {
            for i in (0..len).rev() {
                self.acc = (self.acc << 1) | ((code >> i) & 1);
                self.n += 1;
                if self.n == 8 {
                    self.out.push(self.acc as u8);
                    if self.acc == 0xff {
                        self.out.push(0);
                    }
                    (self.acc, self.n) = (0, 0);
                }
            }
        }
        fn flush(mut self) -> Vec<u8> {
            while self.n != 0 {
                self.put(1, 1);
            }
            self.out
        }
    }

    const DHT_HEX: &str = concat!(
        "0000010501010101010100000000000000000102030405060708090a0b",
        "100002010303020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9fa"
    );

    /// Annex K luminance DC codes by category (lengths 2, 3 x5, 4..9).
    const DC: [(u32, u32); 12] = [
        (0b00, 2),
        (0b010, 3),
        (0b011, 3),
        (0b100, 3),
        (0b101, 3),
        (0b110, 3),
        (0b1110, 4),
        (0b11110, 5),
        (0b111110, 6),
        (0b1111110, 7),
        (0b11111110, 8),
        (0b111111110, 9),
    ];

    /// Entropy-codes blocks (DC values) of the given components, interleaved per MCU.
    fn scan(blocks: &[&[i32]]) -> Vec<u8> {
        let mut b = Bits {
            out: Vec::new(),
            acc: 0,
            n: 0,
        };
        let mut preds = vec![0i32; blocks.len()];
        for i in 0..blocks[0].len() {
            for (c, comp) in blocks.iter().enumerate() {
                let diff = comp[i] - preds[c];
                preds[c] = comp[i];
                let cat = 32 - diff.unsigned_abs().leading_zeros();
                b.put(DC[cat as usize].0, DC[cat as usize].1);
                let bits = if diff < 0 { diff - 1 } else { diff } as u32;
                b.put(bits & ((1 << cat) - 1), cat);
                b.put(0b1010, 4); // AC EOB
            }
        }
        b.flush()
    }

    /// A 3-component 4:4:4 image of flat blocks (`y`, `cb`, `cr`: one sample per block,
    /// `bw`×`bh` blocks), as one interleaved scan or one scan per component.
    pub fn encode(bw: usize, bh: usize, ycc: [&[u8]; 3], interleaved: bool) -> Vec<u8> {
        let (w, h) = (bw * 8, bh * 8);
        let mut out = vec![0xff, 0xd8, 0xff, 0xdb, 0, 67, 0];
        out.extend_from_slice(&[1u8; 64]);
        // DHT: Annex K luminance DC (class 0) and AC (class 1) tables, slot 0.
        let dht: Vec<u8> = (0..DHT_HEX.len() / 2)
            .map(|i| u8::from_str_radix(&DHT_HEX[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        out.extend_from_slice(&[0xff, 0xc4, 0, 2 + dht.len() as u8]);
        out.extend_from_slice(&dht);
        out.extend_from_slice(&[0xff, 0xc0, 0, 17, 8]);
        out.extend_from_slice(&[(h >> 8) as u8, h as u8, (w >> 8) as u8, w as u8, 3]);
        for id in 1..=3 {
            out.extend_from_slice(&[id, 0x11, 0]);
        }
        let dc: Vec<Vec<i32>> = ycc
            .iter()
            .map(|p| p.iter().map(|&v| 8 * (v as i32 - 128)).collect())
            .collect();
        let sos = |out: &mut Vec<u8>, ids: &[u8]| {
            out.extend_from_slice(&[0xff, 0xda, 0, 6 + 2 * ids.len() as u8, ids.len() as u8]);
            for &id in ids {
                out.extend_from_slice(&[id, 0x00]);
            }
            out.extend_from_slice(&[0, 63, 0]);
        };
        if interleaved {
            sos(&mut out, &[1, 2, 3]);
            out.extend(scan(&[&dc[0], &dc[1], &dc[2]]));
        } else {
            for (id, plane) in (1u8..).zip(&dc) {
                sos(&mut out, &[id]);
                out.extend(scan(&[plane]));
            }
        }
        out.extend_from_slice(&[0xff, 0xd9]);
        out
    }
}

#[test]
fn non_interleaved_scans_decode_like_interleaved_ones() {
    let (bw, bh) = (7, 5);
    let plane = |seed: u32| -> Vec<u8> {
        (0..bw * bh)
            .map(|i| ((i as u32 * 37 + seed * 101) % 256) as u8)
            .collect()
    };
    let (y, cb, cr) = (plane(1), plane(2), plane(3));
    let one = flat_blocks::encode(bw, bh, [&y, &cb, &cr], true);
    let three = flat_blocks::encode(bw, bh, [&y, &cb, &cr], false);
    let mut dec = JpegDecoder::new(64, 64);
    let a = ours(&mut dec, &one).1;
    let b = ours(&mut dec, &three).1;
    assert_eq!(a, b);
    // Flat blocks decode exactly to their samples, converted to RGB as zune-jpeg does.
    let (max, _) = compare(&a, &zune_rgb(&one));
    assert!(max <= 1, "max {max}");
    // The last scan missing: an error, not an image with a blank component.
    let cut = three.windows(2).rposition(|p| p == [0xff, 0xda]).unwrap();
    let mut partial = three[..cut].to_vec();
    partial.extend_from_slice(&[0xff, 0xd9]);
    let mut out = vec![0u8; 56 * 40 * 3];
    assert!(matches!(
        dec.decode_into(&partial, &mut out),
        Err(JpegError::Corrupt { what }) if what.contains("no scan")
    ));
}
