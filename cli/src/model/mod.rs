//! `redline model`: the project's trtexec. `info` reports what an ONNX model holds and which
//! engine can run it; `bench` times one engine (optionally against another) on seeded random
//! or given input.
//!
//! Contract:
//!
//! - **Engines**: `native` (redline's INT8 engine, `onnx::NativeEngine`), `onnxruntime`
//!   (ONNX Runtime's CPU provider, `engine::onnxruntime::OrtEngine`, its own thread pool),
//!   `cuda` / `cuda-stream` / `cuda-staged` (`engine::cuda::CudaEngine` with graph replay,
//!   plain launches, or its pinned staging written once) and `tensorrt`. All are built by
//!   [`load_engine`] (`runners.rs`, with the runners that time them); `profile` takes one
//!   run apart: the CUDA engine launch by launch (GPU events), or with `--engine native` the
//!   native engine's compiled steps, each timed alone on the calling thread after a full run
//!   (so every step reads what a real run left; caches are warmer than in a whole run).
//! - **Threads**: the native engine with `--threads 1` runs on the calling thread
//!   (`engine::Inline`); with N > 1 it runs as the one stage of a redline runtime with N lanes and
//!   one frame slot, frames released as fast as possible, the engine splitting its rows over
//!   the lanes with `parallel_for`: what the pipeline does. ONNX Runtime gets N intra-op
//!   threads, which stop spinning at the end of each run unless `--ort-spin-after-run`
//!   (`OrtOptions::spin_after_run`: spinning on, they slow the other engine's next runs).
//! - **Timing**: each sample is one `Engine::run`, timed with `Instant` around the call only
//!   (inside the stage for the runtime route: the release/publish overhead is not counted).
//!   Warm-up iterations are not recorded. With `--against`, the two engines alternate in
//!   blocks of `--block` iterations, the order flipping every round, on the same input and
//!   thread count, so both see the same machine state.
//! - **Random input** (`--seed`): `float32` inputs are normal(0, 1) clipped to [-3, 3] (the
//!   range of a normalised image), `int8`/`uint8` uniform over the whole type, `int32`/`int64`
//!   uniform in 0..16. `--input` files are raw little-endian tensors, one per input in the
//!   model's order, each exactly the tensor's byte size.
//! - **Agreement** (`--against`): after timing, each engine runs once more on the same input
//!   and every output is compared element by element (`onnx::reference::compare`).
//! - **Outputs** (`--save-outputs DIR`): each engine's outputs of one more run, raw
//!   little-endian as `--input` reads them, `DIR/<output>.<engine>.bin`.

use redline_runtime::det_math as dm;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use redline_models::engine::cuda::{CudaEngine, CudaOptions};
use redline_models::engine::onnxruntime::{OrtEngine, OrtOptions};
use redline_models::engine::{ElemType, Engine, EngineKind, TensorSpec};
use redline_models::onnx::{inspect, reference};
use redline_runtime::rng::SplitMix64;
use serde_json::{json, Value};

mod runners;
pub use runners::load_engine;
use runners::{make_runner, open_runner, Runner};

/// Tensor specs as one comma-separated line.
fn list(s: &[TensorSpec]) -> String {
    s.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// What an ONNX model holds (inputs, outputs, operators, MACs) and which engines can run it.
    Info(InfoArgs),
    /// Time an engine on a model (P50/P99/max, GMAC/s), optionally against another engine.
    Bench(BenchArgs),
    /// Where a frame's time goes: every kernel launch of the CUDA engine (default), or every
    /// step of the native engine on one thread (`--engine native`).
    Profile(ProfileArgs),
}

/// Which engine `redline model profile` takes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileEngine {
    /// The CUDA engine: upload, every kernel launch, download (GPU events).
    Cuda,
    /// The native INT8 engine on one thread: every step of the compiled program.
    Native,
}

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Engine to profile.
    #[arg(long, value_enum, default_value_t = ProfileEngine::Cuda)]
    pub engine: ProfileEngine,
    /// Frames averaged (after 3 warm-up frames).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub reps: u64,
    /// Launches listed (the slowest first).
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// Convolutions on the dp4a kernel instead of the tensor cores.
    #[arg(long)]
    pub no_tensor_cores: bool,
    /// Native engine: time every step in program order, run after run, as a real run meets
    /// the caches (a step's weights and inputs no hotter than the steps before it leave
    /// them), instead of each step repeated alone (the CUDA profile always runs in order).
    #[arg(long)]
    pub in_sequence: bool,
    /// Native engine: lanes each step is spread over, as `redline model bench --threads N`
    /// runs it (a redline runtime, `parallel_for`); more than 1 implies `--in-sequence`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,
    /// Seed of the random input.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
}

/// An engine as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// redline's native INT8 engine.
    Native,
    /// ONNX Runtime's CPU provider.
    #[value(alias = "ort")]
    Onnxruntime,
    /// redline's INT8 kernels on an NVIDIA GPU, each run one CUDA-graph replay (build with
    /// `--features cuda`).
    Cuda,
    /// The same CUDA engine issuing every kernel launch on its stream each run (no graph):
    /// `--engine cuda --against cuda-stream` measures what graph replay saves.
    CudaStream,
    /// The CUDA engine with the input written once into its pinned staging and the outputs
    /// read there (`CudaEngine::run_staged`): no host copies, as when a camera driver writes
    /// into the engine's buffers.
    CudaStaged,
    /// ONNX Runtime's TensorRT execution provider (build with `--features tensorrt`;
    /// engines built on first use and cached, see `redline engine build`).
    #[value(alias = "trt")]
    Tensorrt,
}

impl From<EngineArg> for EngineKind {
    fn from(e: EngineArg) -> EngineKind {
        match e {
            EngineArg::Native => EngineKind::Native,
            EngineArg::Onnxruntime => EngineKind::OnnxRuntime,
            EngineArg::Cuda | EngineArg::CudaStream | EngineArg::CudaStaged => EngineKind::Cuda,
            EngineArg::Tensorrt => EngineKind::TensorRt,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Engine to time.
    #[arg(long, value_enum, default_value = "native")]
    pub engine: EngineArg,
    /// Threads (native: runtime lanes; onnxruntime: intra-op threads).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,
    /// Also time this engine (alternating blocks, same input and threads) and compare outputs.
    #[arg(long, value_enum)]
    pub against: Option<EngineArg>,
    /// Timed iterations per engine.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,
    /// Untimed iterations per engine before timing.
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    /// Iterations per block when alternating with --against.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub block: u64,
    /// Raw little-endian input tensors, one per model input in order (default: seeded random).
    #[arg(long, num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// Seed of the random input.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// onnxruntime: let ORT run int8 QDQ groups with its integer kernels on x86
    /// (`session.qdqisint8allowed`, as the reference files do); `false` is ORT's default.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub ort_qdq_int8: bool,
    /// onnxruntime: let its intra-op workers spin on after each run, as ORT's own default
    /// does. Off by default: spinning workers take the cores from the other engine's next
    /// run when the two alternate (`session.force_spinning_stop`).
    #[arg(long)]
    pub ort_spin_after_run: bool,
    /// Print one JSON object instead of the text report (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write every output of a run on the (last) input to DIR as raw little-endian bytes,
    /// `<output>.<engine>.bin` (the `--against` engine's too): the format `--input` reads,
    /// e.g. `numpy.fromfile(path, dtype).reshape(shape)`.
    #[arg(long, value_name = "DIR")]
    pub save_outputs: Option<PathBuf>,
}

impl BenchArgs {
    /// The ONNX Runtime session these flags ask for (the CPU provider).
    pub fn ort_options(&self) -> OrtOptions {
        OrtOptions {
            threads: self.threads.max(1) as usize,
            qdq_int8_allowed: self.ort_qdq_int8,
            spin_after_run: self.ort_spin_after_run,
            ..OrtOptions::default()
        }
    }
}

pub fn run(c: ModelCommand) -> Result<()> {
    match c {
        ModelCommand::Info(a) => info(a),
        ModelCommand::Bench(a) => bench(a),
        ModelCommand::Profile(a) => profile(a),
    }
}

// ---------------------------------------------------------------------------------------
// info

fn dims(d: &[Option<usize>]) -> String {
    let v: Vec<String> = d
        .iter()
        .map(|x| x.map_or_else(|| "?".to_string(), |n| n.to_string()))
        .collect();
    format!("[{}]", v.join(", "))
}

/// What a model's biases stored with another scale mean for a comparison with ONNX Runtime.
fn rescaled_biases_note(n: usize) -> String {
    format!(
        "{n} convolution(s) or matrix product(s) with a bias stored at another scale than \
         x_scale * w_scale (a torch export sharing one bias tensor, e.g. an untrained \
         network's zero biases): native keeps their exact integer sums, ONNX Runtime may \
         compute them in float (it does where its graph optimizer does not fuse them into \
         integer kernels), so the two may differ in rare roundings"
    )
}

fn fmt_macs(m: u64) -> String {
    if m >= 1_000_000_000 {
        format!("{:.3} GMAC", m as f64 / 1e9)
    } else {
        format!("{:.3} MMAC", m as f64 / 1e6)
    }
}

fn info(a: InfoArgs) -> Result<()> {
    // The error names the file; flattened so the OS error is not printed twice.
    let m = inspect(&a.model).map_err(|e| anyhow!("{e}"))?;
    let ort = OrtEngine::load(
        &a.model,
        &OrtOptions {
            threads: 1,
            qdq_int8_allowed: true,
            ..OrtOptions::default()
        },
    );
    // The CUDA engine: loaded on GPU 0 when this build and machine have one; otherwise the
    // error says what is missing (the feature, the driver, a device, NVRTC).
    let cuda = CudaEngine::load(&a.model, &CudaOptions::default()).map(|e| {
        let gpu = e.device_info().name.clone();
        (e.launches(), gpu)
    });
    let macs = m.native.as_ref().ok().map(|s| s.macs);
    if a.json {
        let tensors = |v: &[(String, String, Vec<Option<usize>>)]| -> Value {
            v.iter()
                .map(|(n, t, d)| json!({ "name": n, "type": t, "shape": d }))
                .collect()
        };
        let native = match &m.native {
            Ok(s) => json!({
                "ok": true, "steps": s.steps, "arena_bytes": s.arena_bytes,
                "weight_bytes": s.weight_bytes, "general_conv_macs": s.general_macs,
                "depthwise_conv_macs": s.depthwise_macs,
                "rescaled_biases": s.rescaled_biases,
            }),
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        };
        let onnxruntime = match &ort {
            Ok(_) => json!({ "ok": true }),
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        };
        let cuda = match &cuda {
            Ok((launches, gpu)) => json!({ "ok": true, "launches": launches, "gpu": gpu }),
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        };
        let v = json!({
            "model": a.model.display().to_string(),
            "producer": m.producer,
            "opset": m.opset,
            "nodes": m.nodes,
            "initializer_bytes": m.initializer_bytes,
            "inputs": tensors(&m.inputs),
            "outputs": tensors(&m.outputs),
            "named_dims_fixed_to_1": m.named_dims,
            "ops": m.ops,
            "metadata": m.metadata.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "macs": macs,
            "engines": { "native": native, "onnxruntime": onnxruntime, "cuda": cuda },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("model:    {}", a.model.display());
    println!(
        "producer: {}",
        if m.producer.is_empty() {
            "(none)"
        } else {
            &m.producer
        }
    );
    println!("opset:    {}", m.opset);
    println!(
        "graph:    {} nodes, {} initializer bytes",
        m.nodes, m.initializer_bytes
    );
    println!("inputs:");
    for (n, t, d) in &m.inputs {
        println!("  {n}: {t} {}", dims(d));
    }
    if !m.named_dims.is_empty() {
        println!(
            "  (named dimensions {}: every engine fixes them to 1)",
            m.named_dims.join(", ")
        );
    }
    println!("outputs:");
    for (n, t, d) in &m.outputs {
        println!("  {n}: {t} {}", dims(d));
    }
    if !m.metadata.is_empty() {
        println!("metadata:");
        for (k, v) in &m.metadata {
            println!("  {k} = {v}");
        }
    }
    println!("operators:");
    let width = m.ops.keys().map(String::len).max().unwrap_or(0);
    for (op, n) in &m.ops {
        println!("  {op:<width$}  {n}");
    }
    match macs {
        Some(x) => println!("MACs:     {x} ({} per run)", fmt_macs(x)),
        None => println!(
            "MACs:     unknown (counted by the native importer, which cannot compile this model)"
        ),
    }
    println!("engines:");
    match &m.native {
        Ok(s) => {
            println!(
                "  native:      yes ({} steps, {:.1} MiB arena, {:.1} MiB packed weights)",
                s.steps,
                s.arena_bytes as f64 / (1 << 20) as f64,
                s.weight_bytes as f64 / (1 << 20) as f64
            );
            if s.depthwise_macs > 0 {
                println!(
                    "               depthwise kernel: {} per run (one channel per group)",
                    fmt_macs(s.depthwise_macs)
                );
            }
            if s.general_macs > 0 {
                println!(
                    "               general kernel: {} per run (grouped with a non-square \
                     window or a float output, or too large to unfold: 5-15x slower per MAC \
                     than the dense kernels)",
                    fmt_macs(s.general_macs)
                );
            }
            if s.rescaled_biases > 0 {
                println!("               {}", rescaled_biases_note(s.rescaled_biases));
            }
        }
        Err(e) => println!("  native:      no: {e}"),
    }
    match &ort {
        Ok(_) => println!("  onnxruntime: yes"),
        Err(e) => println!("  onnxruntime: no: {e}"),
    }
    match &cuda {
        Ok((launches, gpu)) => {
            println!("  cuda:        yes ({launches} kernel launches per run on {gpu})")
        }
        Err(e) => println!("  cuda:        no: {e}"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// input

/// Seeded random bytes for one tensor (see the module docs for the distributions).
pub fn random_tensor(spec: &TensorSpec, seed: u64, index: u64) -> Vec<u8> {
    let mut g = SplitMix64::stream(seed, index);
    let n = spec.elements();
    let mut out = Vec::with_capacity(spec.byte_len());
    match spec.elem {
        ElemType::F32 => {
            for _ in 0..n {
                // Box-Muller on two uniforms in (0, 1].
                let u1 = 1.0 - g.next_f64();
                let u2 = g.next_f64();
                let z = (-2.0 * dm::ln(u1)).sqrt() * dm::cos(std::f64::consts::TAU * u2);
                out.extend_from_slice(&(z.clamp(-3.0, 3.0) as f32).to_le_bytes());
            }
        }
        ElemType::I8 | ElemType::U8 => {
            for _ in 0..n {
                out.push(g.next_u64() as u8);
            }
        }
        ElemType::I32 => {
            for _ in 0..n {
                out.extend_from_slice(&(g.below(16) as i32).to_le_bytes());
            }
        }
        ElemType::I64 => {
            for _ in 0..n {
                out.extend_from_slice(&(g.below(16) as i64).to_le_bytes());
            }
        }
    }
    out
}

fn read_inputs(files: &[PathBuf], specs: &[TensorSpec], seed: u64) -> Result<Vec<Vec<u8>>> {
    if files.is_empty() {
        return Ok(specs
            .iter()
            .enumerate()
            .map(|(i, s)| random_tensor(s, seed, i as u64))
            .collect());
    }
    if files.len() != specs.len() {
        bail!(
            "{} --input files given but the model has {} inputs: {}",
            files.len(),
            specs.len(),
            list(specs)
        );
    }
    files
        .iter()
        .zip(specs)
        .map(|(f, s)| {
            let b = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            if b.len() != s.byte_len() {
                bail!(
                    "{}: {} bytes, but input {} needs {} (raw little-endian, row-major)",
                    f.display(),
                    b.len(),
                    s,
                    s.byte_len()
                );
            }
            Ok(b)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// bench

#[derive(Debug, Clone, Copy)]
struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

/// Nearest-rank percentiles of `ns` samples, in ms.
fn stats(ns: &mut [u64]) -> Stats {
    ns.sort_unstable();
    let n = ns.len().max(1);
    let at = |q: f64| {
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        ns.get(rank - 1).copied().unwrap_or(0) as f64 / 1e6
    };
    let mean = ns.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1e6;
    Stats {
        p50: at(0.50),
        p99: at(0.99),
        max: ns.last().copied().unwrap_or(0) as f64 / 1e6,
        mean,
    }
}

/// A progress line on stderr (only when it is a terminal, at most every 250 ms).
struct Progress {
    on: bool,
    last: Instant,
    drawn: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            on: std::io::stderr().is_terminal(),
            last: Instant::now(),
            drawn: false,
        }
    }
    fn tick(&mut self, done: u64, total: u64) {
        if self.on && self.last.elapsed() > Duration::from_millis(250) {
            self.last = Instant::now();
            self.drawn = true;
            let mut e = std::io::stderr();
            let _ = write!(e, "\rbench: {done}/{total} timed runs   ");
            let _ = e.flush();
        }
    }
    fn clear(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r{:40}\r", "");
        }
    }
}

fn profile(a: ProfileArgs) -> Result<()> {
    if a.engine == ProfileEngine::Native {
        return profile_native(&a);
    }
    let opts = CudaOptions {
        tensor_cores: !a.no_tensor_cores,
        ..CudaOptions::default()
    };
    let mut e = CudaEngine::load(&a.model, &opts)
        .map_err(|e| anyhow!("the CUDA engine cannot run {}: {e}", a.model.display()))?;
    let inputs = read_inputs(&[], e.inputs(), a.seed)?;
    for (i, x) in inputs.iter().enumerate() {
        match e.input_staging(i) {
            Some(s) if s.len() == x.len() => s.copy_from_slice(x),
            _ => bail!("input {i} does not fit the CUDA engine's staging"),
        }
    }
    e.profile(3)?;
    let mut steps = e.profile(a.reps as usize)?;
    let total: f32 = steps.iter().map(|s| s.1).sum();
    println!(
        "profile: {} on {} ({} launches, tensor cores {}), mean of {} frames run launch by launch",
        a.model.display(),
        e.device_info().name,
        e.launches(),
        !a.no_tensor_cores,
        a.reps
    );
    println!("total {total:.3} ms (upload + kernels + download, one event pair per launch)");
    steps.sort_by(|x, y| y.1.total_cmp(&x.1));
    println!("{:>9} {:>6}  what", "ms", "share");
    for (what, ms) in steps.iter().take(a.top) {
        println!("{ms:9.3} {:5.1}%  {what}", 100.0 * ms / total.max(1e-9));
    }
    Ok(())
}

/// Runs `r` once more and writes each of its outputs to `dir/<output>.<engine>.bin` (the
/// output's name with every character but letters, digits, `-`, `_` and `.` made `_`);
/// the paths written.
fn save_outputs(dir: &Path, r: &mut dyn Runner) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output folder {}", dir.display()))?;
    let outs = r.outputs()?;
    let engine = r.engine_kind().name();
    let mut paths = Vec::new();
    for (s, bytes) in r.outputs_spec().iter().zip(&outs) {
        let name: String = s
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{name}.{engine}.bin"));
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        paths.push(path.display().to_string());
    }
    Ok(paths)
}

/// `redline model profile --engine native`: three full runs, then each step of the compiled
/// program timed alone `reps` times on the calling thread (its inputs are what the full run
/// left in the arena), or with `--in-sequence` every step timed in program order over
/// `reps` whole runs; listed slowest first with its multiply-accumulates.
fn profile_native(a: &ProfileArgs) -> Result<()> {
    use redline_models::engine::Inline;
    use redline_models::onnx::NativeEngine;
    let mut e = NativeEngine::load(&a.model)
        .map_err(|e| anyhow!("the native engine cannot run {}: {e}", a.model.display()))?;
    let inputs = read_inputs(&[], e.inputs(), a.seed)?;
    for _ in 0..3 {
        redline_models::engine::run_once(&mut e, &inputs, &Inline)?;
    }
    let ins: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let step_macs = e.step_macs();
    // Seconds per step: each step `reps` times in a row, or every step in program order,
    // `reps` whole runs.
    let mut secs = vec![0f64; step_macs.len()];
    let in_sequence = a.in_sequence || a.threads > 1;
    let macs = e.macs();
    let kernels = e.kernel_name();
    if a.threads > 1 {
        let inputs = Arc::new(inputs);
        secs = runners::profile_steps_on_lanes(e, inputs, a.threads as usize, 3, a.reps)?;
    } else if in_sequence {
        for _ in 0..a.reps {
            for (k, s) in secs.iter_mut().enumerate() {
                let t = Instant::now();
                e.run_step(k, &ins, &Inline)?;
                *s += t.elapsed().as_secs_f64();
            }
        }
    } else {
        for (k, s) in secs.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..a.reps {
                e.run_step(k, &ins, &Inline)?;
            }
            *s = t.elapsed().as_secs_f64();
        }
    }
    let mut steps = Vec::new();
    for (k, ((name, macs), s)) in step_macs.into_iter().zip(secs).enumerate() {
        steps.push((k, name, macs, s * 1e3 / a.reps as f64));
    }
    let total: f64 = steps.iter().map(|s| s.3).sum();
    // `+ 0.0`: an empty float sum is -0.0, which would print as "-0.000".
    let conv: f64 = steps.iter().filter(|s| s.2 > 0).map(|s| s.3).sum::<f64>() + 0.0;
    println!(
        "profile: {} on the native engine ({} kernels), {}, {} steps, {}, mean of {} runs",
        a.model.display(),
        kernels,
        if a.threads > 1 {
            format!("{} threads (redline runtime, parallel_for)", a.threads)
        } else {
            "one thread".to_string()
        },
        steps.len(),
        if in_sequence {
            "timed in sequence (whole runs, as the caches meet them)"
        } else {
            "each timed alone"
        },
        a.reps
    );
    println!(
        "total {total:.3} ms: steps with multiply-accumulates {conv:.3} ms ({:.1} GMAC/s), the rest {:.3} ms",
        macs as f64 / 1e6 / conv.max(1e-9),
        total - conv
    );
    steps.sort_by(|x, y| y.3.total_cmp(&x.3));
    println!(
        "{:>9} {:>6} {:>8} {:>5}  what",
        "ms", "share", "GMAC/s", "step"
    );
    for (k, name, macs, ms) in steps.iter().take(a.top) {
        let g = if *macs > 0 {
            format!("{:.1}", *macs as f64 / 1e6 / ms.max(1e-9))
        } else {
            "-".into()
        };
        println!(
            "{ms:9.3} {:5.1}% {g:>8} {k:>5}  {name}",
            100.0 * ms / total.max(1e-9)
        );
    }
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    let threads = a.threads as usize;
    let e_main = load_engine(a.engine, &a.model, &a.ort_options())?;
    let in_specs = e_main.inputs().to_vec();
    let e_other = match a.against {
        Some(k) => {
            let e = load_engine(k, &a.model, &a.ort_options())?;
            if e.inputs() != in_specs.as_slice() || e.outputs() != e_main.outputs() {
                bail!(
                    "the engines disagree on the model's tensors: {} -> {} vs {} -> {}",
                    list(&in_specs),
                    list(e_main.outputs()),
                    list(e.inputs()),
                    list(e.outputs())
                );
            }
            Some(e)
        }
        None => None,
    };
    let inputs = Arc::new(read_inputs(&a.input, &in_specs, a.seed)?);
    // A staged CUDA engine is loaded again with its inputs in place (the one above only
    // checked the tensors).
    let mut main = if a.engine == EngineArg::CudaStaged {
        drop(e_main);
        open_runner(a.engine, &a, &inputs)?
    } else {
        make_runner(e_main, a.engine, threads, &inputs)?
    };
    let mut other = match (e_other, a.against) {
        (Some(_), Some(EngineArg::CudaStaged)) => {
            Some(open_runner(EngineArg::CudaStaged, &a, &inputs)?)
        }
        (Some(e), Some(k)) => Some(make_runner(e, k, threads, &inputs)?),
        _ => None,
    };
    let macs = main.macs();
    let input_desc = if a.input.is_empty() {
        format!(
            "seeded random (seed {}: float32 normal(0,1) clipped to [-3,3], int8/uint8 uniform)",
            a.seed
        )
    } else {
        "from --input files".to_string()
    };
    eprintln!(
        "bench: {} — {}{}; {} warm-up + {} timed iterations{}",
        a.model.display(),
        main.label(),
        other
            .as_ref()
            .map(|o| format!(" against {}", o.label()))
            .unwrap_or_default(),
        a.warmup,
        a.iters,
        if other.is_some() {
            format!(" each, alternating blocks of {}", a.block)
        } else {
            String::new()
        }
    );

    // Warm-up, then timed blocks (alternating, order flipped every round).
    main.block(a.warmup, None)?;
    if let Some(o) = other.as_mut() {
        o.block(a.warmup, None)?;
    }
    let mut s_main = Vec::with_capacity(a.iters as usize);
    let mut s_other = Vec::with_capacity(a.iters as usize);
    let mut progress = Progress::new();
    let total = a.iters * if other.is_some() { 2 } else { 1 };
    let t0 = Instant::now();
    let mut round = 0u64;
    while (s_main.len() as u64) < a.iters {
        let n = a.block.min(a.iters - s_main.len() as u64);
        match other.as_mut() {
            None => main.block(n, Some(&mut s_main))?,
            Some(o) => {
                if round.is_multiple_of(2) {
                    main.block(n, Some(&mut s_main))?;
                    o.block(n, Some(&mut s_other))?;
                } else {
                    o.block(n, Some(&mut s_other))?;
                    main.block(n, Some(&mut s_main))?;
                }
            }
        }
        round += 1;
        progress.tick((s_main.len() + s_other.len()) as u64, total);
    }
    progress.clear();
    let wall = t0.elapsed().as_secs_f64();
    let st = stats(&mut s_main);
    let gmacs = if st.p50 > 0.0 {
        macs as f64 / (st.p50 * 1e-3) / 1e9
    } else {
        0.0
    };

    let mut v = json!({
        "model": a.model.display().to_string(),
        "engine": main.engine_kind().name(),
        "label": main.label(),
        "threads": threads,
        "iters": a.iters,
        "warmup": a.warmup,
        "seed": if a.input.is_empty() { Some(a.seed) } else { None },
        "macs": macs,
        "p50_ms": st.p50,
        "p99_ms": st.p99,
        "max_ms": st.max,
        "mean_ms": st.mean,
        "gmacs": gmacs,
        "wall_s": wall,
        "ort_spin_after_run": a.ort_spin_after_run,
    });
    let mut text = vec![format!(
        "{:<12} {:>10} {:>10} {:>10} {:>10}",
        "engine", "P50 ms", "P99 ms", "max ms", "GMAC/s"
    )];
    text.push(format!(
        "{:<12} {:>10.3} {:>10.3} {:>10.3} {:>10.1}",
        main.engine_kind().name(),
        st.p50,
        st.p99,
        st.max,
        gmacs
    ));
    if let Some(o) = other.as_mut() {
        let so = stats(&mut s_other);
        let og = if so.p50 > 0.0 {
            macs as f64 / (so.p50 * 1e-3) / 1e9
        } else {
            0.0
        };
        text.push(format!(
            "{:<12} {:>10.3} {:>10.3} {:>10.3} {:>10.1}",
            o.engine_kind().name(),
            so.p50,
            so.p99,
            so.max,
            og
        ));
        let (r50, r99) = (st.p50 / so.p50, st.p99 / so.p99);
        text.push(format!(
            "ratio {}/{}: P50 {r50:.3}, P99 {r99:.3}",
            main.engine_kind().name(),
            o.engine_kind().name()
        ));
        // Agreement on the same input.
        let ours = main.outputs()?;
        let theirs = o.outputs()?;
        let spec = main.outputs_spec();
        let (mut differing, mut total_el, mut max_abs) = (0usize, 0usize, 0f64);
        let mut per = Vec::new();
        for ((s, x), y) in spec.iter().zip(&ours).zip(&theirs) {
            let ag = reference::compare(&s.name, s.elem, x, y);
            differing += ag.differing;
            total_el += ag.total;
            max_abs = max_abs.max(ag.max_abs_diff);
            text.push(format!(
                "  output {} {}{:?}: {} of {} elements differ, max abs diff {}",
                s.name, s.elem, s.shape, ag.differing, ag.total, ag.max_abs_diff
            ));
            per.push(json!({
                "name": s.name, "differing": ag.differing, "total": ag.total,
                "max_abs_diff": ag.max_abs_diff,
            }));
        }
        text.push(format!(
            "outputs: {differing} of {total_el} elements differ, max abs diff {max_abs}"
        ));
        // Why native and ONNX Runtime may disagree on this model (read again only then).
        let pair = [main.engine_kind(), o.engine_kind()];
        if differing > 0
            && pair.contains(&EngineKind::Native)
            && pair.contains(&EngineKind::OnnxRuntime)
        {
            if let Ok(Ok(s)) = inspect(&a.model).map(|i| i.native) {
                if s.rescaled_biases > 0 {
                    text.push(format!(
                        "  note: {}",
                        rescaled_biases_note(s.rescaled_biases)
                    ));
                }
            }
        }
        let obj = v.as_object_mut().ok_or_else(|| anyhow!("json"))?;
        obj.insert("against_engine".into(), json!(o.engine_kind().name()));
        obj.insert("against_label".into(), json!(o.label()));
        obj.insert("against_p50_ms".into(), json!(so.p50));
        obj.insert("against_p99_ms".into(), json!(so.p99));
        obj.insert("against_max_ms".into(), json!(so.max));
        obj.insert("against_gmacs".into(), json!(og));
        obj.insert("ratio_p50".into(), json!(r50));
        obj.insert("ratio_p99".into(), json!(r99));
        obj.insert("differing_elements".into(), json!(differing));
        obj.insert("total_elements".into(), json!(total_el));
        obj.insert("max_abs_diff".into(), json!(max_abs));
        obj.insert("outputs".into(), Value::Array(per));
    }
    if let Some(dir) = &a.save_outputs {
        let mut saved = Vec::new();
        for r in std::iter::once(&mut main).chain(other.as_mut()) {
            saved.extend(save_outputs(dir, r.as_mut())?);
        }
        let obj = v.as_object_mut().ok_or_else(|| anyhow!("json"))?;
        obj.insert("saved_outputs".into(), json!(saved));
        if !a.json {
            for f in &saved {
                eprintln!("saved {f}");
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "model: {}, {} per run; input {input_desc}",
            a.model.display(),
            fmt_macs(macs)
        );
        println!(
            "{}{}; {} timed iterations after {} warm-up ({wall:.1} s)",
            main.label(),
            other
                .as_ref()
                .map(|o| format!(" vs {}", o.label()))
                .unwrap_or_default(),
            a.iters,
            a.warmup
        );
        for l in text {
            println!("{l}");
        }
    }
    Ok(())
}
