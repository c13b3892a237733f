//! Native engine vs ONNX Runtime on real CNNs (issue 11 item 6): same model file, same
//! input, same thread count, alternated in one run.
//!
//! `cargo bench -p redline-bench --bench model_race [-- --iters 20 --blocks 6 --threads 1,2]`
//!
//! - **Models**: `tools/onnx/zoo.py` writes a ResNet-18-class classifier (1×3×224×224) and a
//!   CenterNet-style detector with an upsampling neck (1×3×256×448) and a MobileNetV2
//!   classifier (1×3×224×224, depthwise and 1×1 convolutions) and a RegNetX-200MF
//!   classifier (1×3×224×224, grouped 3×3 convolutions of 8 channels per group) and an
//!   EfficientNet-B0 classifier (SiLU, depthwise, squeeze-and-excitation) and a
//!   YOLOv5n-style detector (1×3×384×640: C3 blocks, SPPF, PAN neck) as float ONNX and
//!   quantizes them with ONNX Runtime's `quantize_static` (per-channel int8 weights, QDQ,
//!   int8 and uint8 activations). The pipeline's own models (backbone over 6 cameras,
//!   detection and segmentation heads) come from `export_network` + `tools/onnx/export_qdq.py`.
//! - **Native**: the model's `NativeEngine` inside a one-stage redline runtime with N lanes
//!   (released as fast as possible), so rows are split over the lanes exactly as in the
//!   pipeline; the time is `Engine::run` measured inside the stage.
//! - **ONNX Runtime**: the same file through the in-process `onnxruntime` backend, N
//!   intra-op threads, its default session options (all optimisations; on x86 its default
//!   keeps `session.qdqisint8allowed` off). The figure is `Engine::run` (copies in and out
//!   included, as for native).
//! - **Protocol**: warm-up, then `blocks` rounds of `iters` runs of each engine, the order
//!   flipping every round. P50 / P99 per engine, the ratio native / ORT, and the ratio to
//!   ONNX Runtime's faster variant of the model (int8 or uint8 activations), which is the
//!   issue's target (≤ 0.8). Outputs are compared once (elements that differ).
//! - **7-bit weights**: the same networks quantized with `reduce_range` (rows `_w7`), where
//!   ONNX Runtime's uint8 kernel is exact and redline runs its `vpmaddubsw` kernel.
//! - **Per layer**: every step of the ResNet-18 int8 model (8-bit and 7-bit weights) on one lane, GMAC/s against the
//!   measured peaks of this core (`redline_bench::peak`: `vpmaddwd` for the exact AVX2
//!   kernel, `vpdpbusd` where the CPU has VNNI).
//!
//! A benchmark never asserts on time. Without python3 + onnx + onnxruntime it prints SKIPPED.
//! Under `cargo test` (no `--bench`) it runs one block of 2 iterations on ResNet-18 only.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use redline_models::engine::onnxruntime::{OrtEngine, OrtOptions};
use redline_models::engine::{output_buffers, run_once, Engine, Inline};
use redline_models::onnx::{reference, NativeEngine};
use redline_runtime::rng::SplitMix64;
use redline_runtime::{
    FrameInfo, GraphBuilder, PlanConfig, Published, ReleaseMode, Runtime, RuntimeConfig, Stage,
    StageError, StageIo,
};

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args();
    while let Some(a) = args.next() {
        if a == name {
            return args.next();
        }
    }
    None
}

fn python_ok() -> bool {
    Command::new("python3")
        .args(["-c", "import numpy, onnx, onnxruntime, safetensors"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Run times of the stage, written by the stage, read after the runtime stops.
struct Samples {
    ns: Vec<AtomicU64>,
    next: AtomicUsize,
}

struct EngineStage {
    engine: NativeEngine,
    inputs: Vec<Vec<u8>>,
    outputs: Vec<Vec<u8>>,
    samples: Arc<Samples>,
}

impl Stage for EngineStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        // Two small slice vectors per run: bench scaffolding, negligible next to the model.
        let i: Vec<&[u8]> = self.inputs.iter().map(Vec::as_slice).collect();
        let mut o: Vec<&mut [u8]> = self.outputs.iter_mut().map(Vec::as_mut_slice).collect();
        let t = Instant::now();
        let r = self.engine.run(&i, &mut o, &*io);
        let ns = t.elapsed().as_nanos() as u64;
        r.map_err(|_| StageError::new("native engine run failed"))?;
        let k = self.samples.next.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = self.samples.ns.get(k) {
            s.store(ns, Ordering::Relaxed);
        }
        io.output::<u8>(0)?[0] = o.first().and_then(|b| b.first()).copied().unwrap_or(0);
        Ok(())
    }
}

struct NativeRun {
    rt: Runtime,
    samples: Arc<Samples>,
}

impl NativeRun {
    fn new(
        model: &Path,
        inputs: &[Vec<u8>],
        lanes: usize,
        capacity: usize,
    ) -> Result<Self, String> {
        let engine = NativeEngine::load(model).map_err(|e| e.to_string())?;
        let outputs = output_buffers(engine.outputs());
        let samples = Arc::new(Samples {
            ns: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicUsize::new(0),
        });
        let mut g = GraphBuilder::new();
        g.stage(
            "model",
            EngineStage {
                engine,
                inputs: inputs.to_vec(),
                outputs,
                samples: samples.clone(),
            },
        )
        .writes::<u8>("done", 1);
        g.publish("done");
        let plan = g
            .build(&PlanConfig {
                lanes,
                frame_slots: 1,
            })
            .map_err(|e| e.to_string())?;
        let cfg = RuntimeConfig {
            release: ReleaseMode::AsFastAsPossible,
            period_ns: 10_000_000_000,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::new(plan, cfg).map_err(|e| e.to_string())?;
        Ok(NativeRun { rt, samples })
    }

    fn block(&mut self, n: u64, out: &mut Vec<f64>) {
        let start = self.samples.next.load(Ordering::Relaxed);
        self.rt.run(n, &mut |_p: &Published<'_>| {});
        let end = self
            .samples
            .next
            .load(Ordering::Relaxed)
            .min(self.samples.ns.len());
        out.extend(
            self.samples.ns[start..end]
                .iter()
                .map(|a| a.load(Ordering::Relaxed) as f64 / 1e6),
        );
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn random_inputs(e: &dyn Engine, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::new(seed);
    e.inputs()
        .iter()
        .map(|s| match s.elem {
            redline_models::engine::ElemType::F32 => (0..s.elements())
                .flat_map(|_| (((rng.next_f64() * 2.0 - 1.0) * 2.0) as f32).to_le_bytes())
                .collect(),
            _ => (0..s.byte_len()).map(|_| rng.next_u64() as u8).collect(),
        })
        .collect()
}

struct Race {
    name: String,
    threads: usize,
    native: (f64, f64),
    ort: (f64, f64),
    differing: usize,
    total: usize,
}

fn race(model: &Path, threads: usize, iters: u64, blocks: u64) -> Result<Race, String> {
    let mut ort = OrtEngine::load(
        model,
        &OrtOptions {
            threads,
            ..OrtOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let inputs = random_inputs(&ort, 7);
    let mut native = NativeRun::new(model, &inputs, threads, ((blocks + 1) * iters + 8) as usize)?;
    // Outputs once, on one lane.
    let mut check = NativeEngine::load(model).map_err(|e| e.to_string())?;
    let ours = run_once(&mut check, &inputs, &Inline).map_err(|e| e.to_string())?;
    let theirs = run_once(&mut ort, &inputs, &Inline).map_err(|e| e.to_string())?;
    let i: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let (mut differing, mut total) = (0, 0);
    for ((spec, a), b) in check.outputs().iter().zip(&ours).zip(&theirs) {
        let c = reference::compare(&spec.name, spec.elem, a, b);
        differing += c.differing;
        total += c.total;
    }
    let mut ort_run = |n: u64, out: &mut Vec<f64>| -> Result<(), String> {
        let mut o = output_buffers(ort.outputs());
        for _ in 0..n {
            let mut os: Vec<&mut [u8]> = o.iter_mut().map(Vec::as_mut_slice).collect();
            let t = Instant::now();
            ort.run(&i, &mut os, &Inline).map_err(|e| e.to_string())?;
            out.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    };
    let (mut ns, mut os, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
    native.block(iters.min(5), &mut scratch);
    ort_run(iters.min(5), &mut scratch)?;
    for b in 0..blocks {
        // ORT's pool threads spin for a while after a run; let them stop before the next
        // block so that neither engine starts on a core the other one still holds.
        std::thread::sleep(std::time::Duration::from_millis(100));
        if b % 2 == 0 {
            native.block(iters, &mut ns);
            std::thread::sleep(std::time::Duration::from_millis(100));
            ort_run(iters, &mut os)?;
        } else {
            ort_run(iters, &mut os)?;
            std::thread::sleep(std::time::Duration::from_millis(100));
            native.block(iters, &mut ns);
        }
    }
    Ok(Race {
        name: model
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default(),
        threads,
        native: (pct(&ns, 0.5), pct(&ns, 0.99)),
        ort: (pct(&os, 0.5), pct(&os, 0.99)),
        differing,
        total,
    })
}

fn per_layer(model: &Path, label: &str) -> Result<(), String> {
    let mut e = NativeEngine::load(model).map_err(|e| e.to_string())?;
    let inputs = random_inputs(&e, 3);
    run_once(&mut e, &inputs, &Inline).map_err(|e| e.to_string())?;
    let ins: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let madd = redline_bench::peak::avx2_madd_peak_gmacs();
    let vnni = redline_bench::peak::vnni_peak_gmacs();
    println!(
        "\nper layer, {label} on one lane (peaks of this core: vpmaddwd {} GMAC/s, vpdpbusd {}):",
        madd.map_or("-".into(), |p| format!("{p:.1}")),
        vnni.map_or("not available".into(), |p| format!("{p:.1} GMAC/s"))
    );
    println!(
        "{:>4} {:<14} {:>9} {:>9} {:>8} {:>10} {:>10}",
        "step", "kind", "MMAC", "ms", "GMAC/s", "% madd pk", "% vnni pk"
    );
    let (mut conv_macs, mut conv_ms) = (0u64, 0f64);
    for (k, (name, macs)) in e.step_macs().into_iter().enumerate() {
        let reps = 10;
        let t = Instant::now();
        for _ in 0..reps {
            e.run_step(k, &ins, &Inline).map_err(|e| e.to_string())?;
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        if macs == 0 {
            if ms > 0.05 {
                println!("{k:>4} {name:<14} {:>9} {ms:>9.3}", "-");
            }
            continue;
        }
        conv_macs += macs;
        conv_ms += ms;
        let g = macs as f64 / 1e6 / ms;
        println!(
            "{k:>4} {name:<14} {:>9.1} {ms:>9.3} {g:>8.1} {:>10} {:>10}",
            macs as f64 / 1e6,
            madd.map_or("-".into(), |p| format!("{:.0}%", 100.0 * g / p)),
            vnni.map_or("-".into(), |p| format!("{:.0}%", 100.0 * g / p)),
        );
    }
    let g = conv_macs as f64 / 1e6 / conv_ms;
    println!(
        "all convolutions: {:.3} GMAC in {conv_ms:.2} ms = {g:.1} GMAC/s ({} of the vpmaddwd peak, {} of the vpdpbusd peak)",
        conv_macs as f64 / 1e9,
        madd.map_or("-".into(), |p| format!("{:.0}%", 100.0 * g / p)),
        vnni.map_or("-".into(), |p| format!("{:.0}%", 100.0 * g / p))
    );
    Ok(())
}

fn pipeline_models(dir: &Path) -> Result<Vec<PathBuf>, String> {
    use redline_models::export::{export_network_with, ExportOptions};
    use redline_models::network::NetConfig;
    export_network_with(&NetConfig::default(), &ExportOptions::default(), dir)
        .map_err(|e| e.to_string())?;
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/onnx");
    let out = Command::new("python3")
        .arg(tools.join("export_qdq.py"))
        .arg(dir)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "export_qdq.py: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(["backbone", "det_head", "seg_head"]
        .iter()
        .map(|n| dir.join(format!("{n}.onnx")))
        .collect())
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("model_race: error: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<(), String> {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let iters: u64 = arg("--iters")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode { 20 } else { 2 });
    let blocks: u64 = arg("--blocks")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode { 6 } else { 1 });
    let threads: Vec<usize> = arg("--threads")
        .unwrap_or_else(|| if bench_mode { "1,2".into() } else { "1".into() })
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    if !python_ok() {
        println!("model_race: SKIPPED: python3 with numpy, onnx, onnxruntime and safetensors is not available (python3 -m pip install numpy onnx onnxruntime safetensors)");
        return Ok(());
    }
    if let Err(e) = redline_models::engine::onnxruntime::find_library() {
        println!("model_race: SKIPPED: {e}");
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("redline-model-race-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/onnx");
    let mut zoo_args = vec!["--only", "resnet18"];
    if bench_mode {
        zoo_args.push("centernet");
        zoo_args.push("mobilenetv2");
        zoo_args.push("regnetx");
        zoo_args.push("efficientnet");
        zoo_args.push("yolo");
    }
    eprintln!(
        "model_race: building the models (tools/onnx/zoo.py {})...",
        zoo_args.join(" ")
    );
    let out = Command::new("python3")
        .arg(tools.join("zoo.py"))
        .arg(&dir)
        .args(&zoo_args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("zoo.py: {}", String::from_utf8_lossy(&out.stderr)));
    }
    // The same networks quantized with 7-bit weights (`reduce_range`, ONNX Runtime's advice
    // for CPUs without VNNI): its uint8 kernel is then exact, and so is redline's
    // `vpmaddubsw` kernel.
    let rr = dir.join("rr");
    let out = Command::new("python3")
        .arg(tools.join("zoo.py"))
        .arg(&rr)
        .args(&zoo_args)
        .arg("--reduce-range")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "zoo.py --reduce-range: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut models: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for m in zoo_args.iter().skip(1) {
        for (family, d) in [(m.to_string(), &dir), (format!("{m} 7-bit"), &rr)] {
            models.push((
                family,
                vec![
                    d.join(format!("{m}_qdq_s8.onnx")),
                    d.join(format!("{m}_qdq_u8.onnx")),
                ],
            ));
        }
    }
    if bench_mode {
        models.push(("pipeline".into(), pipeline_models(&dir.join("pipeline"))?));
    }
    println!(
        "model_race: native vs ONNX Runtime (CPU provider) in-process, alternated: {blocks} blocks x {iters} runs each, same input"
    );
    println!(
        "{:<22} {:>3} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>14}",
        "model",
        "thr",
        "native P50",
        "native P99",
        "ORT P50",
        "ORT P99",
        "P50 x",
        "P99 x",
        "x ORT best",
        "differ"
    );
    let mut json = Vec::new();
    for (family, files) in &models {
        for &t in &threads {
            let mut rows = Vec::new();
            for f in files {
                rows.push(race(f, t, iters, blocks)?);
            }
            // The target compares with ORT's faster variant of the same network.
            let best_ort_p50 = if family == "pipeline" {
                f64::NAN
            } else {
                rows.iter().map(|r| r.ort.0).fold(f64::INFINITY, f64::min)
            };
            let best_ort_p99 = if family == "pipeline" {
                f64::NAN
            } else {
                rows.iter().map(|r| r.ort.1).fold(f64::INFINITY, f64::min)
            };
            for mut r in rows {
                if family.ends_with("7-bit") {
                    r.name.push_str("_w7");
                }
                println!(
                    "{:<22} {:>3} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>8.2} {:>10} {:>14}",
                    r.name,
                    r.threads,
                    r.native.0,
                    r.native.1,
                    r.ort.0,
                    r.ort.1,
                    r.native.0 / r.ort.0,
                    r.native.1 / r.ort.1,
                    if best_ort_p50.is_nan() { "-".to_string() } else { format!("{:.2}/{:.2}", r.native.0 / best_ort_p50, r.native.1 / best_ort_p99) },
                    format!("{}/{}", r.differing, r.total)
                );
                json.push(serde_json::json!({
                    "model": r.name, "threads": r.threads, "native_p50_ms": r.native.0, "native_p99_ms": r.native.1,
                    "ort_p50_ms": r.ort.0, "ort_p99_ms": r.ort.1, "ratio_p50": r.native.0 / r.ort.0, "ratio_p99": r.native.1 / r.ort.1,
                    "ratio_p50_vs_ort_best": r.native.0 / best_ort_p50, "differing_elements": r.differing, "total_elements": r.total,
                }));
            }
        }
    }
    println!("(x ORT best: native P50/P99 over ONNX Runtime's faster variant of the same network, s8 or u8 activations; target <= 0.8)");
    // The kernel the native engine picks on this CPU (VNNI where present; on AVX2-only
    // CPUs `vpmaddwd`, or `vpmaddubsw` for 7-bit weights).
    let best = redline_models::conv::KernelPath::best();
    let kernel = |seven_bit: bool| match best {
        redline_models::conv::KernelPath::Avx2 if seven_bit => "avx2: vpmaddubsw".to_string(),
        redline_models::conv::KernelPath::Avx2 => "avx2: vpmaddwd".to_string(),
        p => p.name().to_string(),
    };
    per_layer(
        &dir.join("resnet18_qdq_s8.onnx"),
        &format!("ResNet-18 int8, 8-bit weights ({} kernel)", kernel(false)),
    )?;
    per_layer(
        &rr.join("resnet18_qdq_s8.onnx"),
        &format!("ResNet-18 int8, 7-bit weights ({} kernel)", kernel(true)),
    )?;
    println!("{}", serde_json::json!({ "model_race": json }));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
