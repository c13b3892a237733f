//! JPEG decode cost per camera image: redline's hot-path decoder
//! (`redline_pipeline::jpeg::JpegDecoder`, no allocation per decode, scalar integer code)
//! against zune-jpeg (allocates per decode; AVX2 paths where the CPU has them), on the same
//! files in the same run.
//!
//! Run: `cargo bench -p redline-bench --bench jpeg` (one thread; prints a table).
//! `cargo bench -p redline-bench --bench jpeg -- FILE.jpg ...` also times your own camera
//! images (a row per file; a file either decoder refuses is reported and skipped).
//!
//! Images: the synthetic road picture of `pipeline/tests/jpeg_common` encoded by
//! jpeg-encoder at quality 90, 1920×1080 and 640×480, 4:2:0 (what cameras and
//! `image_transport` send), plus 4:4:4, 4:2:2 and grey rows. Each decoder decodes each file
//! `RUNS` times after a warm-up, the two alternating; P50 and P99 of the single-decode times, the ratio of the
//! P50s (ours / zune-jpeg; below 1 is faster), and output megabytes (RGB8) per second at
//! our P50. Both decode into a preallocated RGB8 buffer; outputs are checked to agree
//! (PSNR > 40 dB) before timing. Allocates freely (it is a benchmark, not a hot path).

#[path = "../../pipeline/tests/jpeg_common/mod.rs"]
mod jpeg_common;

use jpeg_common::{compare, encode};
use jpeg_encoder::SamplingFactor;
use redline_pipeline::jpeg::JpegDecoder;
use std::hint::black_box;
use std::time::{Duration, Instant};
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

const RUNS: usize = 100;
const WARM_UP: usize = 5;

fn percentiles(mut t: Vec<Duration>) -> (f64, f64) {
    t.sort_unstable();
    let at = |p: f64| t[((t.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.50), at(0.99))
}

/// P50/P99 (ms) of `ours` and of `theirs`, run alternately so that both see the same
/// machine (this one is shared: load changes during a run).
fn time_pair(mut ours: impl FnMut(), mut theirs: impl FnMut()) -> ((f64, f64), (f64, f64)) {
    for _ in 0..WARM_UP {
        ours();
        theirs();
    }
    let (mut a, mut b) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
    for _ in 0..RUNS {
        let t = Instant::now();
        ours();
        a.push(t.elapsed());
        let t = Instant::now();
        theirs();
        b.push(t.elapsed());
    }
    (percentiles(a), percentiles(b))
}

fn zune_decode(data: &[u8], out: &mut [u8]) {
    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut dec = zune_jpeg::JpegDecoder::new_with_options(data, options);
    dec.decode_into(out)
        .expect("zune-jpeg decodes the bench image");
}

fn main() {
    let cases: [(usize, usize, &str, bool, SamplingFactor); 8] = [
        (1920, 1080, "4:2:0", false, SamplingFactor::R_4_2_0),
        (640, 480, "4:2:0", false, SamplingFactor::R_4_2_0),
        (1920, 1080, "4:2:2", false, SamplingFactor::R_4_2_2),
        (640, 480, "4:2:2", false, SamplingFactor::R_4_2_2),
        (1920, 1080, "4:4:4", false, SamplingFactor::R_4_4_4),
        (640, 480, "4:4:4", false, SamplingFactor::R_4_4_4),
        (1920, 1080, "grey", true, SamplingFactor::R_4_4_4),
        (640, 480, "grey", true, SamplingFactor::R_4_4_4),
    ];
    println!(
        "JPEG decode per image, quality 90, {RUNS} decodes each (after {WARM_UP} warm-up), \
         one thread"
    );
    println!(
        "{:<16} {:>7} | {:>8} {:>8} | {:>8} {:>8} | {:>6} | {:>7}",
        "image", "KiB", "ours P50", "P99 ms", "zune P50", "P99 ms", "ratio", "MB/s"
    );
    for (w, h, mode, grey, sampling) in cases {
        let data = encode(w, h, 1, grey, sampling, 90, 0);
        time_file(&format!("{w}x{h} {mode}"), &data);
    }
    // Arguments that are files (cargo bench passes `--bench` too): the user's own images.
    for path in std::env::args().skip(1).filter(|a| !a.starts_with("--")) {
        match std::fs::read(&path) {
            Ok(data) => time_file(&path, &data),
            Err(e) => println!("{path}: cannot read ({e})"),
        }
    }
}

/// Times both decoders on one JPEG file and prints its row.
fn time_file(name: &str, data: &[u8]) {
    let info = match JpegDecoder::peek_info(data) {
        Ok(i) => i,
        Err(e) => return println!("{name}: skipped, redline's decoder refuses it: {e}"),
    };
    let (w, h, grey) = (info.width, info.height, info.components == 1);
    let mut dec = JpegDecoder::new(w, h);
    let mut ours = vec![0u8; w * h * 3];
    let mut theirs = vec![0u8; w * h * 3];
    if let Err(e) = dec.decode_into(data, &mut ours) {
        return println!("{name}: skipped, redline's decoder refuses it: {e}");
    }
    theirs.copy_from_slice(&jpeg_common::zune_rgb(data));
    let (_, psnr) = compare(&ours, &theirs);
    assert!(psnr > 40.0, "{name}: outputs disagree ({psnr:.1} dB)");
    let mut luma = vec![0u8; w * h];
    let ((o50, o99), (z50, z99)) = time_pair(
        || {
            dec.decode_into(black_box(data), &mut ours)
                .expect("decodes");
        },
        || {
            if grey {
                // zune-jpeg gives grey as one channel (we write RGB8): time that.
                zune_decode(black_box(data), &mut luma)
            } else {
                zune_decode(black_box(data), &mut theirs)
            }
        },
    );
    let mbs = (w * h * 3) as f64 / 1e6 / (o50 / 1e3);
    println!(
        "{:<16} {:>7.0} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>6.2} | {:>7.0}",
        name,
        data.len() as f64 / 1024.0,
        o50,
        o99,
        z50,
        z99,
        o50 / z50,
        mbs
    );
}
