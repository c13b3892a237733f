//! Raw camera image conversion cost per image: what the log reader spends turning one
//! `sensor_msgs/msg/Image` into the graph's 8-bit RGB (`Image::to_rgb`, the same pixels as
//! cv_bridge's `rgb8`), for every kind of encoding redline reads, against a plain copy of
//! the same RGB bytes (the memory system's floor for a conversion that writes its output
//! once) measured in the same run.
//!
//! Run: `cargo bench -p redline-bench --bench raw_image` (one thread; prints a table).
//!
//! Images: 1920×1080 and 640×480 of seeded random samples (the cost does not depend on the
//! values). Each conversion runs `RUNS` times after a warm-up, alternating with the copy; the
//! table gives P50 and P99 of one conversion, output MB/s at the P50, and the P50 as a
//! multiple of the copy's. Each conversion allocates its output (as the reader does); the
//! copy writes into a preallocated buffer. The reader runs these off the graph's lanes: a
//! camera's conversions must fit its frame period, with the other cameras' beside it.

use redline_sim::msgs::{Header, Image, PixelEncoding};
use std::hint::black_box;
use std::time::{Duration, Instant};

const RUNS: usize = 60;
const WARM_UP: usize = 5;

fn percentiles(mut t: Vec<Duration>) -> (f64, f64) {
    t.sort_unstable();
    let at = |p: f64| t[((t.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    (at(0.50), at(0.99))
}

fn main() {
    let encodings = [
        "rgb8",
        "bgr8",
        "bgra8",
        "mono8",
        "rgb16",
        "mono16",
        "bayer_rggb8",
        "bayer_rggb16",
        "yuv422",
        "yuv422_yuy2",
    ];
    println!(
        "raw image -> RGB8 per image, {RUNS} conversions each (after {WARM_UP} warm-up), one \
         thread, alternating with a copy of the RGB8 bytes"
    );
    println!(
        "{:<14} {:>9} | {:>8} {:>8} | {:>8} | {:>7} | {:>7}",
        "encoding", "size", "P50 ms", "P99 ms", "copy P50", "x copy", "MB/s"
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for (w, h) in [(1920usize, 1080usize), (640, 480)] {
        for name in encodings {
            let bpp = PixelEncoding::parse(name)
                .expect("a read encoding")
                .bytes_per_pixel();
            let data: Vec<u8> = (0..w * h * bpp)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let msg = Image {
                header: Header::new(0, "cam"),
                height: h as u32,
                width: w as u32,
                encoding: name.to_string(),
                is_bigendian: 0,
                step: (w * bpp) as u32,
                data,
            };
            let src = msg.to_rgb().expect("converts").data;
            let mut dst = vec![0u8; src.len()];
            let (mut conv, mut copy) = (Vec::new(), Vec::new());
            for run in 0..WARM_UP + RUNS {
                let t = Instant::now();
                let rgb = black_box(&msg).to_rgb().expect("converts");
                let dt = t.elapsed();
                black_box(rgb);
                let t = Instant::now();
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
                let dc = t.elapsed();
                if run >= WARM_UP {
                    conv.push(dt);
                    copy.push(dc);
                }
            }
            let ((p50, p99), (c50, _)) = (percentiles(conv), percentiles(copy));
            println!(
                "{:<14} {:>9} | {:>8.3} {:>8.3} | {:>8.3} | {:>7.1} | {:>7.0}",
                name,
                format!("{w}x{h}"),
                p50,
                p99,
                c50,
                p50 / c50,
                (w * h * 3) as f64 / 1e6 / (p50 / 1e3)
            );
        }
    }
}
