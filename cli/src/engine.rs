//! `redline engine build`: builds a model's TensorRT engines ahead of time on this machine
//! (ONNX Runtime's TensorRT execution provider; feature `tensorrt`) and prints where they
//! are cached. The cache folder is keyed by GPU, compute capability, TensorRT version,
//! precision and model hash (`redline_models::engine::tensorrt::cache_key`), so a later
//! `engine = "tensorrt"` run on the same machine reuses them and any change rebuilds.
//! Without TensorRT, the error says which piece is missing.

use anyhow::{anyhow, Result};
use redline_models::engine::tensorrt::{load, Precision, TensorRtOptions};
use redline_models::engine::Engine;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Subcommand, Debug)]
pub enum EngineCommand {
    /// Build (or find in the cache) a model's TensorRT engines.
    Build(BuildArgs),
}

#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Build precision: int8 (from the model's Q/DQ nodes), fp16 or fp32.
    #[arg(long, default_value = "int8", value_parser = ["int8", "fp16", "fp32"])]
    pub precision: String,
    /// Cache root (default: REDLINE_TRT_CACHE, else ~/.cache/redline/tensorrt).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

pub fn run(c: EngineCommand) -> Result<()> {
    match c {
        EngineCommand::Build(a) => build(a),
    }
}

fn build(a: BuildArgs) -> Result<()> {
    let opts = TensorRtOptions {
        device: a.device,
        precision: Precision::parse(&a.precision)
            .ok_or_else(|| anyhow!("unknown precision {}", a.precision))?,
        cache_root: a.cache,
    };
    let t0 = Instant::now();
    let (engine, dir) = load(&a.model, &opts).map_err(|e| {
        anyhow!(
            "cannot build TensorRT engines for {}: {e}",
            a.model.display()
        )
    })?;
    println!(
        "{}: TensorRT engines ready in {:.1} s ({} inputs, {} outputs), cached in {}",
        a.model.display(),
        t0.elapsed().as_secs_f64(),
        engine.inputs().len(),
        engine.outputs().len(),
        dir.display()
    );
    Ok(())
}
