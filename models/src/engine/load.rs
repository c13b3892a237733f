//! One place that turns a model file and an engine name into a running engine:
//! [`load_engine`] (a file) and [`load_engine_bytes`] (bytes already in memory, e.g. the
//! built-in models embedded in the binary). A new backend is one more arm here.
//!
//! Contract: construction time only (reads, compiles, allocates the engine's buffers);
//! errors are [`EngineError`]s that name the file and, for a backend this build lacks,
//! say what to use instead.

use super::cuda::{CudaEngine, CudaOptions};
use super::onnxruntime::{OrtEngine, OrtOptions};
use super::{Engine, EngineError, EngineKind};
use crate::onnx::NativeEngine;
use std::path::Path;

/// ONNX Runtime in the pipeline: one intra-op thread (the runtime's lanes run the other
/// stages), ORT's integer QDQ fusions allowed, MACs counted by the native importer when it
/// can compile the model.
fn ort(
    engine: Result<OrtEngine, EngineError>,
    macs: Option<u64>,
) -> Result<Box<dyn Engine>, EngineError> {
    let mut e = engine?;
    if let Some(m) = macs {
        e.set_macs(m);
    }
    Ok(Box::new(e))
}

fn ort_options() -> OrtOptions {
    OrtOptions {
        threads: 1,
        qdq_int8_allowed: true,
        ..OrtOptions::default()
    }
}

/// Reads and compiles the model at `path` with the backend `kind` (ONNX Runtime with the
/// pipeline's options: one intra-op thread, integer QDQ fusions allowed).
pub fn load_engine(path: &Path, kind: EngineKind) -> Result<Box<dyn Engine>, EngineError> {
    load_engine_with(path, kind, &ort_options())
}

/// [`load_engine`] with ONNX Runtime's options given (the native engine has none: its
/// threads are the caller's lanes).
pub fn load_engine_with(
    path: &Path,
    kind: EngineKind,
    ort_opts: &OrtOptions,
) -> Result<Box<dyn Engine>, EngineError> {
    match kind {
        EngineKind::Native => Ok(Box::new(NativeEngine::load(path)?)),
        EngineKind::OnnxRuntime => ort(
            OrtEngine::load(path, ort_opts),
            crate::onnx::count_macs(path).ok(),
        ),
        EngineKind::Cuda => Ok(Box::new(CudaEngine::load(path, &CudaOptions::default())?)),
        EngineKind::TensorRt => Ok(Box::new(
            super::tensorrt::load(path, &Default::default())?.0,
        )),
    }
}

/// Compiles the model whose `.onnx` bytes are `bytes` (`name` is used in messages) with
/// the backend `kind`.
pub fn load_engine_bytes(
    bytes: &[u8],
    name: &str,
    kind: EngineKind,
) -> Result<Box<dyn Engine>, EngineError> {
    match kind {
        EngineKind::Native => Ok(Box::new(NativeEngine::from_bytes(bytes, name)?)),
        EngineKind::OnnxRuntime => ort(
            OrtEngine::from_bytes(bytes, Path::new(name), &ort_options()),
            NativeEngine::from_bytes(bytes, name).ok().map(|e| e.macs()),
        ),
        EngineKind::Cuda => Ok(Box::new(CudaEngine::from_bytes(
            bytes,
            name,
            &CudaOptions::default(),
        )?)),
        EngineKind::TensorRt => Ok(Box::new(
            super::tensorrt::load_bytes(bytes, Path::new(name), &Default::default())?.0,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_load_the_builtin_backbone_and_name_missing_files() {
        let bytes = crate::export::builtin::BACKBONE;
        let native = load_engine_bytes(bytes, "backbone.onnx", EngineKind::Native).unwrap();
        assert_eq!(native.kind(), EngineKind::Native);
        match load_engine_bytes(bytes, "backbone.onnx", EngineKind::OnnxRuntime) {
            Ok(e) => {
                assert_eq!(e.inputs(), native.inputs());
                assert_eq!(e.outputs(), native.outputs());
                assert_eq!(e.macs(), native.macs());
            }
            Err(EngineError::Backend(m)) => {
                eprintln!("SKIPPED: ONNX Runtime is not available: {m}")
            }
            Err(e) => panic!("{e}"),
        }
        for kind in EngineKind::ALL {
            let e = load_engine(Path::new("/nonexistent/x.onnx"), kind).unwrap_err();
            assert!(e.to_string().contains("x.onnx"), "{kind}: {e}");
        }
    }
}
