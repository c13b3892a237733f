//! `redline model bench`'s engines: loading an engine by its command-line name
//! ([`load_engine`]) and the runners that time it: on the calling thread ([`InlineRunner`]),
//! as the one stage of a redline runtime with N lanes ([`RuntimeRunner`], the native engine
//! with `--threads N`), or on the CUDA engine's own pinned staging ([`StagedRunner`],
//! `--engine cuda-staged`).

use super::{BenchArgs, EngineArg};
use anyhow::{anyhow, bail, Result};
use redline_models::engine::cuda::{CudaEngine, CudaOptions};
use redline_models::engine::load::load_engine_with;
use redline_models::engine::onnxruntime::OrtOptions;
use redline_models::engine::{Engine, EngineKind, Inline, TensorSpec};
use redline_runtime::{
    FrameInfo, FrameStatus, GraphBuilder, PlanConfig, Published, ReleaseMode, Runtime,
    RuntimeConfig, Stage, StageError, StageIo,
};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Loads `path` on the engine `arg` names; ONNX Runtime with `ort` (its `threads` are its
/// intra-op pool; the native engine's threads are the caller's lanes, so `ort` is not used
/// for it; the CUDA engine runs on GPU 0, with graph replay unless `arg` is `cuda-stream`).
pub fn load_engine(arg: EngineArg, path: &Path, ort: &OrtOptions) -> Result<Box<dyn Engine>> {
    let kind = EngineKind::from(arg);
    let who = match arg {
        EngineArg::Native => "the native engine",
        EngineArg::Onnxruntime => "onnxruntime",
        EngineArg::Cuda | EngineArg::CudaStream | EngineArg::CudaStaged => "the CUDA engine",
        EngineArg::Tensorrt => "TensorRT (ONNX Runtime's provider)",
    };
    let loaded = match arg {
        EngineArg::Cuda | EngineArg::CudaStream | EngineArg::CudaStaged => {
            let opts = CudaOptions {
                graphs: arg == EngineArg::Cuda,
                ..CudaOptions::default()
            };
            CudaEngine::load(path, &opts).map(|e| Box::new(e) as Box<dyn Engine>)
        }
        _ => load_engine_with(path, kind, ort),
    };
    loaded.map_err(|e| anyhow!("{who} cannot run {}: {e}", path.display()))
}

/// One engine ready to time: runs blocks of iterations, recording each run's time.
pub(super) trait Runner {
    fn label(&self) -> String;
    fn engine_kind(&self) -> EngineKind;
    fn macs(&self) -> u64;
    fn outputs_spec(&self) -> Vec<TensorSpec>;
    /// Runs `n` iterations, pushing each one's time (ns) when `samples` is given.
    fn block(&mut self, n: u64, samples: Option<&mut Vec<u64>>) -> Result<()>;
    /// The outputs of one more run.
    fn outputs(&mut self) -> Result<Vec<Vec<u8>>>;
}

/// `n` runs of `once` (each returns its own time), pushing each time (ns) when `samples`
/// is given: [`Runner::block`] for the runners that time one run at a time.
fn time_runs(
    n: u64,
    mut samples: Option<&mut Vec<u64>>,
    mut once: impl FnMut() -> Result<Duration>,
) -> Result<()> {
    for _ in 0..n {
        let d = once()?;
        if let Some(s) = samples.as_deref_mut() {
            s.push(d.as_nanos() as u64);
        }
    }
    Ok(())
}

/// An engine run on the calling thread (native with 1 thread, or ONNX Runtime).
struct InlineRunner {
    engine: Box<dyn Engine>,
    inputs: Arc<Vec<Vec<u8>>>,
    outs: Vec<Vec<u8>>,
    threads: usize,
    /// As named on the command line (tells `cuda` from `cuda-stream`).
    arg: EngineArg,
}

impl InlineRunner {
    fn run_once(&mut self) -> Result<Duration> {
        let ins: Vec<&[u8]> = self.inputs.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = self.outs.iter_mut().map(Vec::as_mut_slice).collect();
        let t0 = Instant::now();
        self.engine.run(&ins, &mut outs, &Inline)?;
        Ok(t0.elapsed())
    }
}

impl Runner for InlineRunner {
    fn label(&self) -> String {
        match self.engine.kind() {
            EngineKind::Native => "native, 1 thread (inline, calling thread)".into(),
            EngineKind::Cuda if self.arg == EngineArg::CudaStream => format!(
                "cuda-stream, GPU 0 (every launch issued each run; {} sync)",
                cuda_sync()
            ),
            EngineKind::Cuda => format!(
                "cuda, GPU 0 (one CUDA-graph replay per run; {} sync)",
                cuda_sync()
            ),
            EngineKind::TensorRt => "tensorrt, GPU 0 (ONNX Runtime's TensorRT provider)".into(),
            EngineKind::OnnxRuntime => format!(
                "onnxruntime, {} intra-op thread{}",
                self.threads,
                if self.threads == 1 { "" } else { "s" }
            ),
        }
    }
    fn engine_kind(&self) -> EngineKind {
        self.engine.kind()
    }
    fn macs(&self) -> u64 {
        self.engine.macs()
    }
    fn outputs_spec(&self) -> Vec<TensorSpec> {
        self.engine.outputs().to_vec()
    }
    fn block(&mut self, n: u64, samples: Option<&mut Vec<u64>>) -> Result<()> {
        time_runs(n, samples, || self.run_once())
    }
    fn outputs(&mut self) -> Result<Vec<Vec<u8>>> {
        self.run_once()?;
        Ok(self.outs.clone())
    }
}

/// The one stage of the bench runtime: runs the engine on its lanes, writes the model's
/// outputs and the run's time (ns) into its published buffers.
struct EngineStage {
    engine: Box<dyn Engine>,
    inputs: Arc<Vec<Vec<u8>>>,
    error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for EngineStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineStage")
            .field("engine", &self.engine)
            .finish()
    }
}

impl Stage for EngineStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let n = self.engine.outputs().len();
        let mut outs: Vec<&mut [u8]> = Vec::with_capacity(n);
        for j in 0..n {
            outs.push(
                io.output::<u8>(j)
                    .map_err(|_| StageError::new("model output port"))?,
            );
        }
        let time = io
            .output::<u64>(n)
            .map_err(|_| StageError::new("timing port"))?;
        let ins: Vec<&[u8]> = self.inputs.iter().map(Vec::as_slice).collect();
        let t0 = Instant::now();
        let r = self.engine.run(&ins, &mut outs, &*io);
        time[0] = t0.elapsed().as_nanos() as u64;
        if let Err(e) = r {
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
            return Err(StageError::new("model run failed"));
        }
        Ok(())
    }
}

/// The native engine as the one stage of a redline runtime with `lanes` lanes.
struct RuntimeRunner {
    rt: Runtime,
    lanes: usize,
    macs: u64,
    out_specs: Vec<TensorSpec>,
    error: Arc<Mutex<Option<String>>>,
}

/// A redline runtime of `lanes` lanes for the one-stage graph `g` (`what` names it in an
/// error): frames released as fast as possible, one at a time, never a deadline fallback (a
/// minute per frame, each frame being one run of a model).
fn one_stage_runtime(g: GraphBuilder, lanes: usize, what: &str) -> Result<Runtime> {
    let plan = g
        .build(&PlanConfig {
            lanes,
            frame_slots: 1,
        })
        .map_err(|e| anyhow!("{what} graph: {e}"))?;
    let cfg = RuntimeConfig {
        release: ReleaseMode::AsFastAsPossible,
        period_ns: 60_000_000_000,
        ..RuntimeConfig::default()
    };
    Runtime::new(plan, cfg).map_err(|e| anyhow!("runtime: {e}"))
}

impl RuntimeRunner {
    fn new(engine: Box<dyn Engine>, inputs: Arc<Vec<Vec<u8>>>, lanes: usize) -> Result<Self> {
        let macs = engine.macs();
        let out_specs = engine.outputs().to_vec();
        let error = Arc::new(Mutex::new(None));
        let mut g = GraphBuilder::new();
        let names: Vec<String> = (0..out_specs.len()).map(|j| format!("out{j}")).collect();
        {
            let mut s = g.stage(
                "model",
                EngineStage {
                    engine,
                    inputs,
                    error: error.clone(),
                },
            );
            for (name, spec) in names.iter().zip(&out_specs) {
                s = s.writes::<u8>(name, spec.byte_len());
            }
            let _ = s.writes::<u64>("engine_ns", 1);
        }
        for name in &names {
            g.publish(name);
        }
        g.publish("engine_ns");
        let rt = one_stage_runtime(g, lanes, "bench")?;
        Ok(RuntimeRunner {
            rt,
            lanes,
            macs,
            out_specs,
            error,
        })
    }

    fn failed(&self, bad: u64) -> anyhow::Error {
        let why = self
            .error
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| "a frame did not complete".into());
        anyhow!("{bad} native runs failed: {why}")
    }
}

impl Runner for RuntimeRunner {
    fn label(&self) -> String {
        format!(
            "native, {} threads (redline runtime, {} lanes, parallel_for)",
            self.lanes, self.lanes
        )
    }
    fn engine_kind(&self) -> EngineKind {
        EngineKind::Native
    }
    fn macs(&self) -> u64 {
        self.macs
    }
    fn outputs_spec(&self) -> Vec<TensorSpec> {
        self.out_specs.clone()
    }
    fn block(&mut self, n: u64, samples: Option<&mut Vec<u64>>) -> Result<()> {
        let t = self.out_specs.len();
        let mut bad = 0u64;
        let mut got: Vec<u64> = Vec::with_capacity(n as usize);
        let mut publisher = |p: &Published<'_>| {
            let ns = p
                .outputs
                .get::<u64>(t)
                .ok()
                .and_then(|s| s.first().copied());
            match (&p.status, ns) {
                (FrameStatus::Complete, Some(ns)) if got.len() < got.capacity() => got.push(ns),
                (FrameStatus::Complete, Some(_)) => {}
                _ => bad += 1,
            }
        };
        self.rt.run(n, &mut publisher);
        if bad > 0 {
            return Err(self.failed(bad));
        }
        if let Some(s) = samples {
            s.extend_from_slice(&got);
        }
        Ok(())
    }
    fn outputs(&mut self) -> Result<Vec<Vec<u8>>> {
        let mut outs = redline_models::engine::output_buffers(&self.out_specs);
        let mut bad = 0u64;
        let mut publisher = |p: &Published<'_>| {
            if !matches!(p.status, FrameStatus::Complete) {
                bad += 1;
                return;
            }
            for (j, o) in outs.iter_mut().enumerate() {
                match p.outputs.get::<u8>(j) {
                    Ok(s) if s.len() == o.len() => o.copy_from_slice(s),
                    _ => bad += 1,
                }
            }
        };
        self.rt.run(1, &mut publisher);
        if bad > 0 {
            return Err(self.failed(bad));
        }
        Ok(outs)
    }
}

/// How the CUDA engine waits (`REDLINE_CUDA_SYNC`), for labels.
fn cuda_sync() -> String {
    std::env::var("REDLINE_CUDA_SYNC").unwrap_or_else(|_| "block".into())
}

/// The CUDA engine run on its own pinned staging (`--engine cuda-staged`): the inputs are
/// written into it once, each timed run is `run_staged` alone.
struct StagedRunner {
    engine: CudaEngine,
}

impl Runner for StagedRunner {
    fn label(&self) -> String {
        format!(
            "cuda-staged, GPU 0 (input in the pinned staging, no host copies; graph replay; {} sync)",
            self.engine.sync_mode()
        )
    }
    fn engine_kind(&self) -> EngineKind {
        EngineKind::Cuda
    }
    fn macs(&self) -> u64 {
        self.engine.macs()
    }
    fn outputs_spec(&self) -> Vec<TensorSpec> {
        self.engine.outputs().to_vec()
    }
    fn block(&mut self, n: u64, samples: Option<&mut Vec<u64>>) -> Result<()> {
        time_runs(n, samples, || {
            let t0 = Instant::now();
            self.engine.run_staged()?;
            Ok(t0.elapsed())
        })
    }
    fn outputs(&mut self) -> Result<Vec<Vec<u8>>> {
        self.engine.run_staged()?;
        Ok((0..self.engine.outputs().len())
            .filter_map(|j| self.engine.output_staging(j).map(<[u8]>::to_vec))
            .collect())
    }
}

/// Loads the engine `arg` names and wraps it for timing. `cuda-staged` copies `inputs`
/// into the engine's pinned staging here, once.
pub(super) fn open_runner(
    arg: EngineArg,
    a: &BenchArgs,
    inputs: &Arc<Vec<Vec<u8>>>,
) -> Result<Box<dyn Runner>> {
    if arg == EngineArg::CudaStaged {
        let mut e = CudaEngine::load(&a.model, &CudaOptions::default())
            .map_err(|e| anyhow!("the CUDA engine cannot run {}: {e}", a.model.display()))?;
        for (i, x) in inputs.iter().enumerate() {
            match e.input_staging(i) {
                Some(s) if s.len() == x.len() => s.copy_from_slice(x),
                _ => bail!("input {i} does not fit the CUDA engine's staging"),
            }
        }
        return Ok(Box::new(StagedRunner { engine: e }));
    }
    let e = load_engine(arg, &a.model, &a.ort_options())?;
    make_runner(e, arg, a.threads as usize, inputs)
}

pub(super) fn make_runner(
    engine: Box<dyn Engine>,
    arg: EngineArg,
    threads: usize,
    inputs: &Arc<Vec<Vec<u8>>>,
) -> Result<Box<dyn Runner>> {
    Ok(match (engine.kind(), threads) {
        (EngineKind::Native, n) if n > 1 => {
            Box::new(RuntimeRunner::new(engine, inputs.clone(), n)?) as Box<dyn Runner>
        }
        _ => Box::new(InlineRunner {
            outs: redline_models::engine::output_buffers(engine.outputs()),
            engine,
            inputs: inputs.clone(),
            threads,
            arg,
        }),
    })
}

/// The one stage of [`profile_steps_on_lanes`]'s runtime: each frame runs every step of
/// the native engine in program order over the stage's lanes, timing each step, and adds
/// the times (seconds) of the frames after the warm-up into `secs`.
struct StepTimer {
    engine: redline_models::onnx::NativeEngine,
    inputs: Arc<Vec<Vec<u8>>>,
    warmup: u64,
    frames: u64,
    own: Vec<f64>,
    secs: Arc<Mutex<Vec<f64>>>,
    error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for StepTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepTimer").finish_non_exhaustive()
    }
}

impl Stage for StepTimer {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let ins: Vec<&[u8]> = self.inputs.iter().map(Vec::as_slice).collect();
        let counted = self.frames >= self.warmup;
        self.frames += 1;
        for (k, s) in self.own.iter_mut().enumerate() {
            let t = Instant::now();
            if let Err(e) = self.engine.run_step(k, &ins, &*io) {
                if let Ok(mut slot) = self.error.lock() {
                    slot.get_or_insert_with(|| e.to_string());
                }
                return Err(StageError::new("model step failed"));
            }
            if counted {
                *s += t.elapsed().as_secs_f64();
            }
        }
        if let Ok(mut total) = self.secs.lock() {
            total.copy_from_slice(&self.own);
        }
        Ok(())
    }
}

/// Seconds each step of `engine` took, summed over `reps` whole runs in program order (after
/// `warmup` runs), every step spread over a redline runtime's `lanes` lanes exactly as
/// `redline model bench --threads N` runs it (`parallel_for` inside one stage).
pub(super) fn profile_steps_on_lanes(
    engine: redline_models::onnx::NativeEngine,
    inputs: Arc<Vec<Vec<u8>>>,
    lanes: usize,
    warmup: u64,
    reps: u64,
) -> Result<Vec<f64>> {
    let steps = engine.step_macs().len();
    let secs = Arc::new(Mutex::new(vec![0f64; steps]));
    let error = Arc::new(Mutex::new(None));
    let mut g = GraphBuilder::new();
    let _ = g
        .stage(
            "profile",
            StepTimer {
                engine,
                inputs,
                warmup,
                frames: 0,
                own: vec![0f64; steps],
                secs: secs.clone(),
                error: error.clone(),
            },
        )
        .writes::<u8>("done", 1);
    g.publish("done");
    let mut rt = one_stage_runtime(g, lanes, "profile")?;
    let mut bad = 0u64;
    rt.run(warmup + reps, &mut |p: &Published<'_>| {
        if !matches!(p.status, FrameStatus::Complete) {
            bad += 1;
        }
    });
    if bad > 0 {
        let why = error
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| "a frame did not complete".into());
        bail!("{bad} profiled runs failed: {why}");
    }
    let secs = secs
        .lock()
        .map_err(|_| anyhow!("profile times poisoned"))?
        .clone();
    Ok(secs)
}
