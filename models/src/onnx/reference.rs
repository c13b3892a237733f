//! Checking the native engine against reference outputs written by another engine: the
//! manifests of `tools/onnx/qref.py` (`<stem>.json` next to `<stem>.onnx`, raw
//! little-endian inputs and ONNX Runtime's outputs).
//!
//! Contract: [`check_manifest`] loads the model, runs it once on the manifest's inputs with
//! the given lanes and compares every output element by element (exact equality of the
//! bytes' values; for `float32` outputs also the largest absolute difference). It never
//! panics on a bad manifest: every problem is an [`EngineError`]. Test tooling: allocates.

use crate::engine::{ElemType, Engine, EngineError, Lanes};
use std::path::{Path, PathBuf};

#[derive(serde::Deserialize)]
struct TensorEntry {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    file: String,
}

#[derive(serde::Deserialize)]
struct Manifest {
    model: String,
    inputs: Vec<TensorEntry>,
    outputs: Vec<TensorEntry>,
}

/// Agreement of one output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputAgreement {
    /// Output name.
    pub name: String,
    /// Elements compared.
    pub total: usize,
    /// Elements whose values differ.
    pub differing: usize,
    /// Largest absolute difference (as `f64` of the element values).
    pub max_abs_diff: f64,
    /// For dequantized (float) outputs: the largest difference in quantization steps,
    /// estimated as `max_abs_diff / smallest nonzero |reference value step|`; 0 when equal.
    pub max_steps: f64,
}

/// The result of one manifest.
#[derive(Clone, Debug)]
pub struct Agreement {
    /// The model file.
    pub model: PathBuf,
    /// Per output.
    pub outputs: Vec<OutputAgreement>,
}

impl Agreement {
    /// True when every output is bit-identical.
    pub fn exact(&self) -> bool {
        self.outputs.iter().all(|o| o.differing == 0)
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> EngineError {
    EngineError::Parse {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn elem(dtype: &str) -> Option<ElemType> {
    match dtype {
        "float32" => Some(ElemType::F32),
        "int8" => Some(ElemType::I8),
        "uint8" => Some(ElemType::U8),
        "int32" => Some(ElemType::I32),
        "int64" => Some(ElemType::I64),
        _ => None,
    }
}

fn values(e: ElemType, bytes: &[u8]) -> Vec<f64> {
    match e {
        ElemType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        ElemType::I8 => bytes.iter().map(|&b| f64::from(b as i8)).collect(),
        ElemType::U8 => bytes.iter().map(|&b| f64::from(b)).collect(),
        ElemType::I32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        ElemType::I64 => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64)
            .collect(),
    }
}

/// Compares two outputs of the same spec.
pub fn compare(name: &str, e: ElemType, ours: &[u8], reference: &[u8]) -> OutputAgreement {
    let a = values(e, ours);
    let b = values(e, reference);
    let mut differing = 0;
    let mut max_abs: f64 = 0.0;
    for (x, y) in a.iter().zip(&b) {
        if x != y {
            differing += 1;
            max_abs = max_abs.max((x - y).abs());
        }
    }
    differing += a.len().abs_diff(b.len());
    // The grid step of a dequantized output: the smallest gap between distinct values.
    let mut sorted: Vec<f64> = b.clone();
    sorted.sort_by(|p, q| p.total_cmp(q));
    sorted.dedup();
    let step = sorted
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::INFINITY, f64::min);
    let max_steps = if max_abs == 0.0 {
        0.0
    } else if step.is_finite() && step > 0.0 {
        (max_abs / step).round()
    } else {
        f64::NAN
    };
    OutputAgreement {
        name: name.to_string(),
        total: a.len().max(b.len()),
        differing,
        max_abs_diff: max_abs,
        max_steps,
    }
}

/// The first `k` differing elements: (flat index, ours, reference).
pub fn first_differences(
    e: ElemType,
    ours: &[u8],
    reference: &[u8],
    k: usize,
) -> Vec<(usize, f64, f64)> {
    values(e, ours)
        .into_iter()
        .zip(values(e, reference))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .take(k)
        .map(|(i, (a, b))| (i, a, b))
        .collect()
}

/// Loads `manifest` (a `<stem>.json`), runs the model on the native engine and compares.
pub fn check_manifest(manifest: &Path, lanes: &dyn Lanes) -> Result<Agreement, EngineError> {
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(manifest).map_err(|source| EngineError::Io {
        path: manifest.to_path_buf(),
        source,
    })?;
    let m: Manifest =
        serde_json::from_str(&text).map_err(|e| bad(manifest, format!("bad manifest: {e}")))?;
    let model = dir.join(&m.model);
    let mut engine = super::NativeEngine::load(&model)?;
    let read = |t: &TensorEntry| -> Result<(ElemType, Vec<u8>), EngineError> {
        let e =
            elem(&t.dtype).ok_or_else(|| bad(manifest, format!("unknown dtype {}", t.dtype)))?;
        let p = dir.join(&t.file);
        let bytes = std::fs::read(&p).map_err(|source| EngineError::Io {
            path: p.clone(),
            source,
        })?;
        let want = t.shape.iter().product::<usize>() * e.size();
        if bytes.len() != want {
            return Err(bad(
                &p,
                format!("{} bytes, shape {:?} needs {want}", bytes.len(), t.shape),
            ));
        }
        Ok((e, bytes))
    };
    let mut ins = Vec::new();
    for (i, t) in m.inputs.iter().enumerate() {
        let spec = engine
            .inputs()
            .get(i)
            .ok_or_else(|| bad(manifest, "more inputs than the model"))?;
        if spec.name != t.name {
            return Err(bad(
                manifest,
                format!(
                    "input {i} is {} in the manifest, {} in the model",
                    t.name, spec.name
                ),
            ));
        }
        ins.push(read(t)?.1);
    }
    let outs = crate::engine::run_once(&mut engine, &ins, lanes)?;
    let mut outputs = Vec::new();
    for (j, t) in m.outputs.iter().enumerate() {
        let (e, reference) = read(t)?;
        let ours = outs
            .get(j)
            .ok_or_else(|| bad(manifest, "more outputs than the model"))?;
        if std::env::var_os("REDLINE_ONNX_DEBUG").is_some() {
            eprintln!(
                "{}: first differences {:?}",
                t.name,
                first_differences(e, ours, &reference, 8)
            );
        }
        outputs.push(compare(&t.name, e, ours, &reference));
    }
    Ok(Agreement { model, outputs })
}
