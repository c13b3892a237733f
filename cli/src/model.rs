//! `redline model`: what a model file holds and which engine can run it (`info`), and how
//! fast each engine runs it on the same input (`bench`), redline's trtexec.
//!
//! `bench` runs the model on seeded random input (float32: normal(0, 1) clipped to ±3,
//! the spread of a normalised image; int8/uint8: uniform) or on raw little-endian files,
//! warm-up first, then `iters` timed runs; with `--against`, the two engines alternate in
//! blocks of 10 runs on the same input and thread count, so both see the same machine
//! state, and their outputs are compared element by element. Times are wall-clock
//! (`Instant`) around `Engine::run` only.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use redline_models::engine::onnxruntime::{OrtEngine, OrtOptions};
use redline_models::engine::{ElemType, Engine, EngineKind, Inline};
use redline_models::onnx::{inspect, reference, NativeEngine};
use redline_runtime::rng::SplitMix64;

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Inputs, outputs, operators, MACs, and which engine can run the model (and why not).
    Info(InfoArgs),
    /// Latency of one engine on the model, optionally alternated with another engine.
    Bench(BenchArgs),
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The model (.onnx).
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The model (.onnx).
    pub model: PathBuf,
    /// Engine to measure: native or onnxruntime.
    #[arg(long, default_value = "native")]
    pub engine: String,
    /// Engine to alternate with and compare against.
    #[arg(long)]
    pub against: Option<String>,
    /// Threads (onnxruntime: intra-op threads; native: 1, see the docs).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Timed runs per engine.
    #[arg(long, default_value_t = 100)]
    pub iters: usize,
    /// Untimed runs per engine first.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Raw little-endian input files, one per model input (default: seeded random input).
    #[arg(long)]
    pub input: Vec<PathBuf>,
    /// Seed of the random input.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Let ONNX Runtime fuse int8 QDQ groups on x86 (session.qdqisint8allowed = 1).
    #[arg(long)]
    pub ort_qdq_int8: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

fn dims(d: &[Option<usize>]) -> String {
    let v: Vec<String> = d
        .iter()
        .map(|x| x.map(|v| v.to_string()).unwrap_or_else(|| "?".into()))
        .collect();
    format!("[{}]", v.join(", "))
}

pub fn info(a: InfoArgs) -> Result<()> {
    let m = inspect(&a.model).with_context(|| format!("reading {}", a.model.display()))?;
    let ort = match OrtEngine::load(&a.model, &OrtOptions::default()) {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    if a.json {
        let io = |v: &[(String, String, Vec<Option<usize>>)]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|(n, t, d)| serde_json::json!({"name": n, "type": t, "shape": d}))
                .collect()
        };
        let native = match &m.native {
            Ok(s) => {
                serde_json::json!({"ok": true, "macs": s.macs, "arena_bytes": s.arena_bytes, "weight_bytes": s.weight_bytes, "steps": s.steps})
            }
            Err(e) => serde_json::json!({"ok": false, "reason": e.to_string()}),
        };
        let ortj = match &ort {
            Ok(()) => serde_json::json!({"ok": true}),
            Err(e) => serde_json::json!({"ok": false, "reason": e}),
        };
        let v = serde_json::json!({
            "model": a.model.display().to_string(), "producer": m.producer, "opset": m.opset,
            "nodes": m.nodes, "initializer_bytes": m.initializer_bytes,
            "inputs": io(&m.inputs), "outputs": io(&m.outputs), "ops": m.ops,
            "engines": {"native": native, "onnxruntime": ortj},
        });
        println!("{v}");
        return Ok(());
    }
    println!("model      {}", a.model.display());
    println!(
        "producer   {}  (opset {})",
        if m.producer.is_empty() {
            "-"
        } else {
            &m.producer
        },
        m.opset
    );
    println!(
        "nodes      {}, initializers {:.2} MB",
        m.nodes,
        m.initializer_bytes as f64 / 1e6
    );
    for (n, t, d) in &m.inputs {
        println!("input      {n}: {t} {}", dims(d));
    }
    for (n, t, d) in &m.outputs {
        println!("output     {n}: {t} {}", dims(d));
    }
    let ops: Vec<String> = m.ops.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("operators  {}", ops.join(", "));
    match &m.native {
        Ok(s) => println!(
            "native     yes: {:.3} GMAC, {} steps, arena {:.2} MB, weights {:.2} MB",
            s.macs as f64 / 1e9,
            s.steps,
            s.arena_bytes as f64 / 1e6,
            s.weight_bytes as f64 / 1e6
        ),
        Err(e) => println!("native     no: {e}"),
    }
    match &ort {
        Ok(()) => println!("onnxruntime yes"),
        Err(e) => println!("onnxruntime no: {e}"),
    }
    Ok(())
}

fn load(kind: EngineKind, path: &Path, threads: usize, qdq_int8: bool) -> Result<Box<dyn Engine>> {
    Ok(match kind {
        EngineKind::Native => {
            if threads != 1 {
                bail!(
                    "--threads {threads} with the native engine: `redline model bench` runs the native engine on \
                     the calling thread only (in the pipeline it splits each model over the runtime's lanes); \
                     use --threads 1, or the benchmark `cargo bench -p redline-tests --bench model_race`"
                );
            }
            Box::new(NativeEngine::load(path)?)
        }
        EngineKind::OnnxRuntime => {
            let mut e = OrtEngine::load(
                path,
                &OrtOptions {
                    threads,
                    qdq_int8_allowed: qdq_int8,
                },
            )?;
            if let Ok(m) = redline_models::onnx::count_macs(path) {
                e.set_macs(m);
            }
            Box::new(e)
        }
    })
}

fn kind(s: &str) -> Result<EngineKind> {
    EngineKind::parse(s).with_context(|| format!("unknown engine {s:?}: use native or onnxruntime"))
}

fn random_input(e: ElemType, n: usize, rng: &mut SplitMix64) -> Vec<u8> {
    match e {
        ElemType::F32 => (0..n)
            .flat_map(|_| {
                // Box-Muller from two uniforms, clipped to ±3.
                let (u1, u2) = (rng.next_f64().max(1e-12), rng.next_f64());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (z.clamp(-3.0, 3.0) as f32).to_le_bytes()
            })
            .collect(),
        ElemType::I8 | ElemType::U8 => (0..n).map(|_| rng.next_u64() as u8).collect(),
        ElemType::I32 => (0..n)
            .flat_map(|_| ((rng.next_u64() % 256) as i32 - 128).to_le_bytes())
            .collect(),
        ElemType::I64 => (0..n)
            .flat_map(|_| ((rng.next_u64() % 256) as i64 - 128).to_le_bytes())
            .collect(),
    }
}

struct Timed {
    engine: Box<dyn Engine>,
    samples: Vec<f64>,
    outputs: Vec<Vec<u8>>,
}

impl Timed {
    fn run(&mut self, inputs: &[Vec<u8>], timed: bool) -> Result<()> {
        let i: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let mut o: Vec<&mut [u8]> = self.outputs.iter_mut().map(Vec::as_mut_slice).collect();
        let t = Instant::now();
        self.engine.run(&i, &mut o, &Inline)?;
        if timed {
            self.samples.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    }

    fn pct(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return f64::NAN;
        }
        s[((s.len() - 1) as f64 * p).round() as usize]
    }
}

pub fn bench(a: BenchArgs) -> Result<()> {
    let main_kind = kind(&a.engine)?;
    let mut runs = vec![Timed {
        engine: load(main_kind, &a.model, a.threads, a.ort_qdq_int8)?,
        samples: vec![],
        outputs: vec![],
    }];
    if let Some(k) = &a.against {
        runs.push(Timed {
            engine: load(kind(k)?, &a.model, a.threads, a.ort_qdq_int8)?,
            samples: vec![],
            outputs: vec![],
        });
    }
    let specs = runs[0].engine.inputs().to_vec();
    if runs.len() == 2
        && (runs[1].engine.inputs() != specs.as_slice()
            || runs[1].engine.outputs() != runs[0].engine.outputs())
    {
        bail!("the two engines see different inputs or outputs for this model");
    }
    let inputs: Vec<Vec<u8>> = if a.input.is_empty() {
        let mut rng = SplitMix64::new(a.seed);
        specs
            .iter()
            .map(|s| random_input(s.elem, s.elements(), &mut rng))
            .collect()
    } else {
        if a.input.len() != specs.len() {
            bail!(
                "{} --input files for {} model inputs ({})",
                a.input.len(),
                specs.len(),
                specs
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let mut v = Vec::new();
        for (f, s) in a.input.iter().zip(&specs) {
            let b = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            if b.len() != s.byte_len() {
                bail!(
                    "{} has {} bytes but input {s} needs {}",
                    f.display(),
                    b.len(),
                    s.byte_len()
                );
            }
            v.push(b);
        }
        v
    };
    for r in &mut runs {
        r.outputs = r
            .engine
            .outputs()
            .iter()
            .map(|s| vec![0u8; s.byte_len()])
            .collect();
        for _ in 0..a.warmup {
            r.run(&inputs, false)?;
        }
    }
    // Alternate in blocks of 10 runs (the order flips every block).
    let mut done = 0;
    let mut block = 0;
    while done < a.iters {
        let n = (a.iters - done).min(10);
        let order: Vec<usize> = if block % 2 == 0 {
            (0..runs.len()).collect()
        } else {
            (0..runs.len()).rev().collect()
        };
        for &k in &order {
            for _ in 0..n {
                runs[k].run(&inputs, true)?;
            }
        }
        done += n;
        block += 1;
        if !a.json && done % 50 == 0 && done < a.iters {
            eprintln!("  {done}/{} runs", a.iters);
        }
    }
    let macs = runs[0]
        .engine
        .macs()
        .max(runs.get(1).map(|r| r.engine.macs()).unwrap_or(0));
    let r0 = &runs[0];
    let (p50, p99, max) = (r0.pct(0.5), r0.pct(0.99), r0.pct(1.0));
    let gmacs = if macs > 0 {
        macs as f64 / 1e6 / p50
    } else {
        f64::NAN
    };
    let mut json = serde_json::json!({
        "model": a.model.display().to_string(), "engine": main_kind.name(), "threads": a.threads,
        "iters": a.iters, "p50_ms": p50, "p99_ms": p99, "max_ms": max, "macs": macs, "gmacs": gmacs,
    });
    if !a.json {
        println!(
            "{:<12} {:>9} {:>9} {:>9} {:>8}",
            "engine", "P50 ms", "P99 ms", "max ms", "GMAC/s"
        );
        println!(
            "{:<12} {p50:>9.3} {p99:>9.3} {max:>9.3} {gmacs:>8.1}",
            main_kind.name()
        );
    }
    if let Some(r1) = runs.get(1) {
        let (q50, q99, qmax) = (r1.pct(0.5), r1.pct(0.99), r1.pct(1.0));
        let (mut differing, mut total, mut max_abs) = (0usize, 0usize, 0f64);
        for ((spec, x), y) in r0.engine.outputs().iter().zip(&r0.outputs).zip(&r1.outputs) {
            let c = reference::compare(&spec.name, spec.elem, x, y);
            differing += c.differing;
            total += c.total;
            max_abs = max_abs.max(c.max_abs_diff);
        }
        let obj = json.as_object_mut().expect("object");
        obj.insert("against_engine".into(), r1.engine.kind().name().into());
        obj.insert("against_p50_ms".into(), q50.into());
        obj.insert("against_p99_ms".into(), q99.into());
        obj.insert("ratio_p50".into(), (p50 / q50).into());
        obj.insert("ratio_p99".into(), (p99 / q99).into());
        obj.insert("differing_elements".into(), differing.into());
        obj.insert("total_elements".into(), total.into());
        obj.insert("max_abs_diff".into(), max_abs.into());
        if !a.json {
            let g1 = if macs > 0 {
                macs as f64 / 1e6 / q50
            } else {
                f64::NAN
            };
            println!(
                "{:<12} {q50:>9.3} {q99:>9.3} {qmax:>9.3} {g1:>8.1}",
                r1.engine.kind().name()
            );
            println!(
                "ratio        P50 {:.2}x  P99 {:.2}x  ({} / {})",
                p50 / q50,
                p99 / q99,
                main_kind.name(),
                r1.engine.kind().name()
            );
            println!(
                "outputs      {differing} of {total} elements differ, max |diff| {max_abs:.6}"
            );
        }
    }
    if a.json {
        println!("{json}");
    }
    Ok(())
}
