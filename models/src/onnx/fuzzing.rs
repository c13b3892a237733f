//! Entry point for the coverage-guided fuzzer (`fuzz/`, AFL++ through `cargo-afl`) and for
//! the regression tests of what it finds: arbitrary bytes as an `.onnx` file through the
//! native engine.
//!
//! Contract: [`model_bytes`] parses the bytes, compiles them as [`NativeEngine::from_bytes`]
//! does for `redline model bench` or the pipeline, and runs a compiled model once on zeroed
//! inputs (when its arena and inputs are under [`RUN_LIMIT`] bytes) on one lane. It returns
//! normally for every input: errors are expected and ignored; a panic, an abort or an
//! allocation failure is a bug the fuzzer reports as a crash. Not for production use.

use super::NativeEngine;
use crate::engine::{run_once, Engine, Inline};

/// Models needing more working memory than this are compiled but not run (the fuzzer's
/// memory is finite; a run's size is the model's, not a bug).
pub const RUN_LIMIT: usize = 64 << 20;

/// What became of one input (for the regression tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Refused by the parser or the compiler (an `EngineError`).
    Refused,
    /// Compiled; not run (over [`RUN_LIMIT`]).
    Compiled,
    /// Compiled and run; `true` when the run returned `Ok`.
    Ran(bool),
}

/// Runs `data` through the native engine's load path, and one run (see the module docs).
pub fn model_bytes(data: &[u8]) -> Outcome {
    let Ok(mut e) = NativeEngine::from_bytes(data, "fuzz.onnx") else {
        return Outcome::Refused;
    };
    let in_bytes: usize = e.inputs().iter().map(|s| s.byte_len()).sum();
    if e.scratch_bytes().saturating_add(in_bytes) > RUN_LIMIT {
        return Outcome::Compiled;
    }
    let inputs: Vec<Vec<u8>> = e.inputs().iter().map(|s| vec![0; s.byte_len()]).collect();
    Outcome::Ran(run_once(&mut e, &inputs, &Inline).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness runs a good model, refuses garbage, and takes every prefix of a good model
    /// (a truncated download) without a panic.
    #[test]
    fn good_models_run_and_damaged_ones_are_refused() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../cli/tests/fixtures/tiny_qdq_s8.onnx"
        );
        let good = std::fs::read(path).unwrap();
        assert_eq!(model_bytes(&good), Outcome::Ran(true));
        assert_eq!(model_bytes(b"not an onnx file \xff\xff"), Outcome::Refused);
        for cut in (0..good.len()).step_by(7) {
            let _ = model_bytes(&good[..cut]);
        }
    }
}
