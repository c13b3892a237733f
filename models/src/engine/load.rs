//! One place that turns a model file and an engine name into a running engine:
//! [`load_engine`] (a file) and [`load_engine_bytes`] (bytes already in memory, e.g. the
//! built-in models embedded in the binary). A new backend is one more arm here.
//!
//! Contract: construction time only (reads, compiles, allocates the engine's buffers);
//! errors are [`EngineError`]s that name the file and, for a backend this build lacks,
//! say what to use instead.

use super::{Engine, EngineError, EngineKind};
use crate::onnx::NativeEngine;
use std::path::Path;

/// The message for a backend this build cannot run.
fn unavailable(kind: EngineKind) -> EngineError {
    EngineError::Backend(format!(
        "engine {kind} is not available in this build yet; use engine = \"native\""
    ))
}

/// Reads and compiles the model at `path` with the backend `kind`.
pub fn load_engine(path: &Path, kind: EngineKind) -> Result<Box<dyn Engine>, EngineError> {
    match kind {
        EngineKind::Native => Ok(Box::new(NativeEngine::load(path)?)),
        EngineKind::OnnxRuntime => Err(unavailable(kind)),
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
        EngineKind::OnnxRuntime => Err(unavailable(kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnxruntime_is_a_clear_error_until_its_backend_lands() {
        let e = load_engine(Path::new("x.onnx"), EngineKind::OnnxRuntime).unwrap_err();
        assert!(
            e.to_string()
                .contains("engine onnxruntime is not available in this build yet"),
            "{e}"
        );
        let e = load_engine_bytes(b"", "x", EngineKind::OnnxRuntime).unwrap_err();
        assert!(e.to_string().contains("onnxruntime"), "{e}");
        // The native arm does try to load (and names the file).
        let e = load_engine(Path::new("/nonexistent/x.onnx"), EngineKind::Native).unwrap_err();
        assert!(e.to_string().contains("x.onnx"), "{e}");
    }
}
