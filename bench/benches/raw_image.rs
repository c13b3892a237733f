//! Raw camera image conversion cost per image: what the log reader spends turning one
//! `sensor_msgs/msg/Image` into the graph's 8-bit RGB (`Image::to_rgb`, the same pixels as
//! cv_bridge's `rgb8`), for every kind of encoding redline reads, against a plain copy of
//! the same RGB bytes (the memory system's floor for a conversion that writes its output
//! once) measured in the same run.
//!
//! Run: `cargo bench -p redline-bench --bench raw_image` (one thread; prints two tables).
//!
//! The second table is the preprocess stage's cost per camera (area-average resize to the
//! network input and quantize): an ideal pinhole (the separable path) against a camera with
//! lens distortion (each output pixel's box placed where the lens put its ray), alternated
//! on the same image.
//!
//! Images: 1920×1080 and 640×480 of seeded random samples (the cost does not depend on the
//! values). Each conversion runs `RUNS` times after a warm-up, alternating with the copy; the
//! table gives P50 and P99 of one conversion, output MB/s at the P50, and the P50 as a
//! multiple of the copy's. Each conversion allocates its output (as the reader does); the
//! copy writes into a preallocated buffer. The reader runs these off the graph's lanes: a
//! camera's conversions must fit its frame period, with the other cameras' beside it.

use redline_pipeline::camera::{CameraSpec, Distortion};
use redline_pipeline::perception::Preprocess;
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
    conversions();
    preprocess();
}

/// The preprocess stage per camera: the pinhole path against the undistorting one.
fn preprocess() {
    println!(
        "\npreprocess per camera image to a 256x128 network input, {RUNS} runs each, one thread: \
         pinhole (separable boxes) vs plumb_bob k1 = -0.3 (boxes where the lens put each ray)"
    );
    println!(
        "{:<10} | {:>9} {:>9} | {:>9} {:>9} | {:>6}",
        "camera", "pinhole", "P99 ms", "undistort", "P99 ms", "ratio"
    );
    for (w, h) in [(1920u32, 1080u32), (640, 480)] {
        let cam = |distortion| CameraSpec {
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
            distortion,
        };
        let pinhole = Preprocess::for_camera(&cam(Distortion::None), 256, 128).expect("sizes");
        let lens = Distortion::Polynomial {
            k: [-0.3, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0; 2],
        };
        let undistort = Preprocess::for_camera(&cam(lens), 256, 128).expect("sizes");
        let rgb: Vec<u8> = (0..pinhole.input_len())
            .map(|i| (i * 131 % 251) as u8)
            .collect();
        let mut out = vec![0i8; pinhole.output_len()];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for run in 0..WARM_UP + RUNS {
            let t = Instant::now();
            pinhole.run(black_box(&rgb), &mut out).expect("runs");
            let da = t.elapsed();
            black_box(&mut out);
            let t = Instant::now();
            undistort.run(black_box(&rgb), &mut out).expect("runs");
            let db = t.elapsed();
            black_box(&mut out);
            if run >= WARM_UP {
                a.push(da);
                b.push(db);
            }
        }
        let ((a50, a99), (b50, b99)) = (percentiles(a), percentiles(b));
        println!(
            "{:<10} | {a50:>9.3} {a99:>9.3} | {b50:>9.3} {b99:>9.3} | {:>6.2}",
            format!("{w}x{h}"),
            b50 / a50
        );
    }
}

/// Raw image conversions against a copy.
fn conversions() {
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
        "nv21",
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
            let enc = PixelEncoding::parse(name).expect("a read encoding");
            let bpp = enc.bytes_per_pixel();
            let rows = enc.data_rows(h as u64) as usize;
            let data: Vec<u8> = (0..w * rows * bpp)
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
