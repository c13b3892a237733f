//! Corrupt and truncated JPEG data gives an error or an image, never a panic or an
//! out-of-bounds access: random byte flips (anywhere, and concentrated in the headers),
//! random truncations, and random inserted markers, on valid files of every mode. After any
//! of them the same decoder still decodes a good file to the same bits.

mod jpeg_common;

use jpeg_common::{encode, MODES};
use jpeg_encoder::SamplingFactor;
use proptest::prelude::*;
use redline_pipeline::jpeg::JpegDecoder;
use std::sync::OnceLock;

fn files() -> &'static Vec<Vec<u8>> {
    static FILES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut v: Vec<Vec<u8>> = MODES
            .iter()
            .enumerate()
            .map(|(i, &(_, s))| encode(61, 37, i as u64, false, s, 85, (i % 2) as u16 * 3))
            .collect();
        v.push(encode(40, 24, 9, true, SamplingFactor::R_4_4_4, 80, 2));
        v
    })
}

fn reference(i: usize) -> Vec<u8> {
    let mut dec = JpegDecoder::new(64, 64);
    let mut out = vec![0u8; 64 * 64 * 3];
    let info = dec.decode_into(&files()[i], &mut out).unwrap();
    out.truncate(info.rgb_len());
    out
}

/// Decodes `data` (must not panic), then a good file with the same decoder (must match).
fn check(file: usize, data: &[u8]) {
    let mut dec = JpegDecoder::new(64, 64);
    let mut out = vec![0u8; 64 * 64 * 3];
    let _ = dec.decode_into(data, &mut out);
    let _ = JpegDecoder::peek_info(data);
    let info = dec.decode_into(&files()[file], &mut out).unwrap();
    assert_eq!(out[..info.rgb_len()], reference(file)[..]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn byte_flips_never_panic(
        file in 0usize..5,
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
    ) {
        let mut data = files()[file].clone();
        for (at, x) in flips {
            let i = at.index(data.len());
            data[i] ^= x;
        }
        check(file, &data);
    }

    #[test]
    fn header_flips_never_panic(
        file in 0usize..5,
        flips in prop::collection::vec((0usize..700, any::<u8>()), 1..4),
    ) {
        let mut data = files()[file].clone();
        for (i, v) in flips {
            if i < data.len() {
                data[i] = v;
            }
        }
        check(file, &data);
    }

    #[test]
    fn truncations_never_panic(file in 0usize..5, keep in any::<prop::sample::Index>()) {
        let data = &files()[file];
        check(file, &data[..keep.index(data.len())]);
    }

    #[test]
    fn inserted_markers_never_panic(
        file in 0usize..5,
        at in any::<prop::sample::Index>(),
        marker in any::<u8>(),
    ) {
        let mut data = files()[file].clone();
        let i = at.index(data.len());
        data.splice(i..i, [0xff, marker]);
        check(file, &data);
    }
}

#[test]
fn every_truncation_is_an_error_or_the_whole_image() {
    for (file, data) in files().iter().enumerate() {
        let mut dec = JpegDecoder::new(64, 64);
        let mut out = vec![0u8; 64 * 64 * 3];
        for keep in 0..data.len() {
            if let Ok(info) = dec.decode_into(&data[..keep], &mut out) {
                // Only a cut in the trailing EOI may still decode, and then exactly.
                assert!(
                    keep >= data.len() - 2,
                    "file {file}: {keep} of {} bytes decoded",
                    data.len()
                );
                assert_eq!(out[..info.rgb_len()], reference(file)[..]);
            }
        }
    }
}
