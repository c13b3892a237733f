//! Convolution kernel throughput against this machine's INT8 dot-product peak.
//!
//! Run: `cargo bench -p redline-bench --bench kernels` (one thread; prints a table).
//!
//! 1. **Peak**: a tight loop of independent `vpdpbusd zmm` (x86-64 with VNNI) or `sdot
//!    v.4s` (aarch64 with dotprod), 12 accumulators, no memory operands, on one core,
//!    measured in this run: GMAC/s with 1 MAC = one 8-bit product (one `vpdpbusd` on zmm =
//!    64 MAC, one `sdot` = 16).
//! 2. **Layers**: every backbone and head layer of the default network, and the per-camera
//!    backbone as a whole, on every kernel path this CPU has (scalar, AVX2 and VNNI on
//!    x86-64; scalar, NEON and i8mm on aarch64): time per call (median of batches), GMAC/s
//!    (useful MACs, [`Conv2d::macs`]) and the share of the measured peak. Every path's
//!    output is checked equal to the scalar one before timing.
//! 3. **aarch64 estimate**: for the same layers, how many `sdot` (NEON dot product) and
//!    `smmla` (i8mm) instructions the aarch64 kernels issue, counted from their loop
//!    structure (`models/src/conv/neon.rs`), the share of each instruction's
//!    multiply-adds that are useful, and the time that count takes at Orin's Cortex-A78AE
//!    issue rate (2 × 128-bit `sdot` per cycle at 2.2 GHz): an estimate, printed on every
//!    machine, because no aarch64 hardware measures it here and nothing timed under qemu
//!    means anything.
//!
//! 4. **View transform**: the BEV projection of the default rig (seven 256×128 cameras,
//!    64×64×32 features at a 4 × 2 stride, the trained network's two lift heights) into
//!    the 80×48 grid, nearest against row-linear sampling ([`BevSampling`]): time per frame
//!    and the ratio, measured in this run; then the temporal fusion of that grid (the
//!    default two cached maps, the ego moving 0.5 m and turning 0.01 rad per frame).
//!
//! Costs seconds; allocates freely (it is a benchmark, not a hot path).

use redline_models::conv::{Conv2d, KernelPath};
use redline_models::network::{Backbone, DetHead, NetConfig, SegHead};
use redline_pipeline::graph::view_transform;
use redline_pipeline::models::ViewTransform;
use redline_pipeline::perception::{BevSampling, TemporalCache};
use redline_pipeline::types::{BevSpec, EgoPose};
use redline_runtime::rng::SplitMix64;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Median time per call of `f`, over batches of about 20 ms (after a warm-up).
fn time_per_call(mut f: impl FnMut()) -> Duration {
    let t = Instant::now();
    let mut n = 0u32;
    while t.elapsed() < Duration::from_millis(20) || n < 3 {
        f();
        n += 1;
    }
    let per_batch = n.max(1);
    let mut samples: Vec<Duration> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per_batch {
                f();
            }
            t.elapsed() / per_batch
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn with_path(conv: &Conv2d, path: KernelPath) -> Conv2d {
    let mut c = conv.clone();
    c.set_path(path).expect("path is available");
    c
}

fn random_i8(n: usize, seed: u64) -> Vec<i8> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| r.next_i8()).collect()
}

struct Row {
    name: String,
    macs: u64,
    times: Vec<(KernelPath, Duration)>,
}

/// The kernel paths this CPU runs, the portable one first: the table's columns.
fn paths() -> Vec<KernelPath> {
    KernelPath::ALL
        .into_iter()
        .filter(|p| p.is_available())
        .collect()
}

fn print_row(row: &Row, peak: Option<f64>) {
    let mut line = format!("{:<28} {:>9.3}", row.name, row.macs as f64 / 1e6);
    for path in paths() {
        match row.times.iter().find(|(p, _)| *p == path) {
            Some((_, t)) => {
                let gmacs = row.macs as f64 / t.as_secs_f64() / 1e9;
                let pct = peak.map_or(String::from("-"), |p| format!("{:.0}%", 100.0 * gmacs / p));
                line += &format!(
                    " | {:>9.1} {:>7.1} {:>5}",
                    t.as_secs_f64() * 1e6,
                    gmacs,
                    pct
                );
            }
            None => line += &format!(" | {:>9} {:>7} {:>5}", "n/a", "", ""),
        }
    }
    println!("{line}");
}

/// One layer's shape for the aarch64 estimate.
struct Shape {
    name: String,
    in_c: usize,
    out_c: usize,
    k: usize,
    out_h: usize,
    out_w: usize,
    macs: u64,
}

impl Shape {
    fn of(name: &str, conv: &Conv2d, h: usize, w: usize) -> Shape {
        let (out_h, out_w) = conv.out_hw(h, w);
        Shape {
            name: name.to_string(),
            in_c: conv.in_c,
            out_c: conv.out_c,
            k: conv.k,
            out_h,
            out_w,
            macs: conv.macs(h, w),
        }
    }

    /// `sdot` per call: per pixel and 16-channel block, `k` kernel rows × `⌈k·in_c/4⌉` tap
    /// groups × 4 registers of 4 channels.
    fn sdot(&self) -> u64 {
        let g4 = (self.k * self.in_c).div_ceil(4);
        (self.out_h * self.out_w * self.out_c.div_ceil(16) * self.k * g4 * 4) as u64
    }

    /// `smmla` per call: per pixel pair (an odd last pixel pairs with itself) and block,
    /// `k` × `⌈k·in_c/8⌉` × 8 channel pairs.
    fn smmla(&self) -> u64 {
        let g8 = (self.k * self.in_c).div_ceil(8);
        (self.out_h * self.out_w.div_ceil(2) * self.out_c.div_ceil(16) * self.k * g8 * 8) as u64
    }
}

/// Orin's Cortex-A78AE: two 128-bit NEON pipes that each issue one `sdot` per cycle.
const A78_SDOT_PER_NS: f64 = 2.0 * 2.2;

fn print_aarch64_estimate(shapes: &[Shape]) {
    println!();
    println!(
        "aarch64 kernels, estimated from their loop structure (not measured: no aarch64 \
         hardware here; qemu timings mean nothing)"
    );
    println!(
        "{:<28} {:>9} | {:>10} {:>7} {:>12} | {:>10} {:>7}",
        "layer", "MMAC", "sdot (M)", "useful", "A78AE us", "smmla (M)", "useful"
    );
    for s in shapes {
        let (sdot, smmla) = (s.sdot(), s.smmla());
        println!(
            "{:<28} {:>9.3} | {:>10.3} {:>6.0}% {:>12.1} | {:>10.3} {:>6.0}%",
            s.name,
            s.macs as f64 / 1e6,
            sdot as f64 / 1e6,
            100.0 * s.macs as f64 / (sdot * 16) as f64,
            sdot as f64 / A78_SDOT_PER_NS / 1e3,
            smmla as f64 / 1e6,
            100.0 * s.macs as f64 / (smmla * 32) as f64,
        );
    }
    println!(
        "(A78AE us: the sdot count alone at 2 per cycle and 2.2 GHz, a lower bound: loads, \
         requantization and staging come on top.)"
    );
}

fn bench_layer(name: String, conv: &Conv2d, h: usize, w: usize, seed: u64) -> Row {
    let input = random_i8(conv.input_len(h, w).expect("size"), seed);
    let mut reference = vec![0i8; conv.output_len(h, w).expect("size")];
    with_path(conv, KernelPath::Scalar)
        .forward(&input, h, w, &mut reference)
        .expect("scalar forward");
    let mut times = Vec::new();
    for path in paths() {
        let c = with_path(conv, path);
        let mut out = vec![0i8; reference.len()];
        c.forward(&input, h, w, &mut out).expect("forward");
        assert_eq!(out, reference, "{name}: {path:?} differs from scalar");
        let t = time_per_call(|| {
            c.forward(black_box(&input), h, w, black_box(&mut out))
                .expect("forward");
        });
        times.push((path, t));
    }
    Row {
        name,
        macs: conv.macs(h, w),
        times,
    }
}

fn main() {
    let cfg = NetConfig::default();
    let bev = BevSpec::DEFAULT;
    println!(
        "kernels benchmark: one thread, default network (camera {}x{}, BEV {}x{})",
        cfg.in_h, cfg.in_w, bev.ny, bev.nx
    );
    let peak = redline_bench::peak::int8_peak();
    match peak {
        Some((p, what)) => println!("measured {what}: {p:.1} GMAC/s per core"),
        None => println!("measured INT8 peak: n/a (this CPU has neither AVX-512 VNNI nor sdot)"),
    }
    let peak = peak.map(|(p, _)| p);
    let mut header = format!("{:<28} {:>9}", "layer", "MMAC");
    for path in paths() {
        header += &format!(
            " | {:>9} {:>7} {:>5}",
            format!("{} us", path.name()),
            "GMAC/s",
            "peak"
        );
    }
    println!("{header}");
    let backbone = Backbone::new(&cfg).expect("default backbone");
    let (mut h, mut w) = (cfg.in_h, cfg.in_w);
    let mut shapes = Vec::new();
    let mut estimate = Vec::new();
    for (i, l) in backbone.layers().iter().enumerate() {
        let name = format!(
            "backbone.{i} {}->{} k{} s{} {}x{}",
            l.in_c, l.out_c, l.k, l.stride, h, w
        );
        print_row(&bench_layer(name.clone(), l, h, w, 10 + i as u64), peak);
        estimate.push(Shape::of(&name, l, h, w));
        shapes.push((h, w));
        (h, w) = l.out_hw(h, w);
    }
    // The per-camera backbone as a whole: its layers chained on each path.
    let input = random_i8(cfg.in_h * cfg.in_w * backbone.layers()[0].in_c, 3);
    let mut times = Vec::new();
    let mut bufs: Vec<Vec<i8>> = backbone
        .layers()
        .iter()
        .zip(&shapes)
        .map(|(l, &(h, w))| vec![0i8; l.output_len(h, w).expect("size")])
        .collect();
    let mut reference = None;
    for path in paths() {
        let layers: Vec<Conv2d> = backbone
            .layers()
            .iter()
            .map(|l| with_path(l, path))
            .collect();
        let run = |bufs: &mut Vec<Vec<i8>>| {
            for (i, (l, &(h, w))) in layers.iter().zip(&shapes).enumerate() {
                let (done, rest) = bufs.split_at_mut(i);
                let src: &[i8] = if i == 0 { &input } else { &done[i - 1] };
                l.forward(src, h, w, &mut rest[0]).expect("forward");
            }
        };
        run(&mut bufs);
        let last = bufs.last().cloned().unwrap_or_default();
        match &reference {
            None => reference = Some(last),
            Some(r) => assert_eq!(&last, r, "backbone output differs on {path:?}"),
        }
        times.push((path, time_per_call(|| run(black_box(&mut bufs)))));
    }
    print_row(
        &Row {
            name: "backbone (per camera)".into(),
            macs: backbone.macs(),
            times,
        },
        peak,
    );
    let det = DetHead::new(&cfg, bev.ny, bev.nx).expect("det head");
    let seg = SegHead::new(&cfg, bev.ny, bev.nx).expect("seg head");
    for (head, layers) in [
        ("det", det.layers().collect::<Vec<_>>()),
        ("seg", seg.layers().collect::<Vec<_>>()),
    ] {
        for (i, l) in layers.into_iter().enumerate() {
            let name = format!(
                "{head}.{i} {}->{} k{} {}x{}",
                l.in_c, l.out_c, l.k, bev.ny, bev.nx
            );
            print_row(
                &bench_layer(name.clone(), l, bev.ny, bev.nx, 40 + i as u64),
                peak,
            );
            estimate.push(Shape::of(&name, l, bev.ny, bev.nx));
        }
    }
    println!(
        "note: backbone.0 (3 input channels) is lower by construction: a 3x3 kernel row has \
         k*in_c = 9 taps, padded to 12 (3 vpdpbusd groups of 4), so only 75% of each \
         vpdpbusd is useful, and with 16 output channels (one zmm block) every vpdpbusd needs \
         its own activation broadcast (load-bound: 13 loads per 12 vpdpbusd)."
    );
    print_aarch64_estimate(&estimate);
    print_view_transform();
}

/// Section 4: the view transform, nearest against row-linear.
fn print_view_transform() {
    let rig = redline_sim::camera::surround_rig(256, 128);
    let (fw, fh, c) = (64, 64, 32);
    let lifts = redline_models::export::trained::LIFTS_M;
    let bev = BevSpec::DEFAULT;
    println!(
        "view transform: {} cameras 256x128, features {fw}x{fh}x{c}, {} lift heights, BEV {}x{}",
        rig.len(),
        lifts.len(),
        bev.ny,
        bev.nx
    );
    let mut times = Vec::new();
    for sampling in [BevSampling::Nearest, BevSampling::RowLinear] {
        // The projector the driving graph builds.
        let view = ViewTransform {
            lifts: lifts.to_vec(),
            sampling,
        };
        let p = view_transform(&view, &bev, &rig, (256, 128), (fh, fw, c)).expect("projector");
        let feats = random_i8(p.feats_len(), 77);
        let mut out = vec![0i8; p.output_len()];
        let t = time_per_call(|| {
            p.project(black_box(&feats), -128, &mut out)
                .expect("projects");
            black_box(&out);
        });
        let us = t.as_secs_f64() * 1e6;
        println!("  {:<11} {us:>8.1} us per frame", sampling.name());
        times.push(us);
    }
    println!("  row_linear / nearest: {:.2}x", times[1] / times[0]);
    let c = c * lifts.len();
    let mut cache = TemporalCache::new(&bev, c, TemporalCache::DEFAULT_K).expect("cache");
    let maps: Vec<Vec<i8>> = (0..3)
        .map(|i| random_i8(bev.nx * bev.ny * c, 90 + i))
        .collect();
    let mut out = vec![0i8; maps[0].len()];
    let pose = |i: u64| EgoPose {
        stamp_ns: i * 33_333_333,
        x: 0.5 * i as f64,
        yaw: 0.01 * i as f64,
        ..EgoPose::default()
    };
    let mut frame = 0u64;
    let t = time_per_call(|| {
        frame += 1;
        let m = &maps[(frame % 3) as usize];
        cache
            .fuse(black_box(m), -128, &pose(frame), &mut out)
            .expect("fuses");
        black_box(&out);
    });
    println!(
        "  temporal fusion ({} cached maps, {c} channels): {:.1} us per frame",
        TemporalCache::DEFAULT_K,
        t.as_secs_f64() * 1e6
    );
}
