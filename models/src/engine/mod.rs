//! The engine trait: a model compiled once from a file into an object with fixed input and
//! output tensors, run many times on caller-provided buffers.
//!
//! # Contract
//!
//! - **Compiled once.** A backend's constructor (e.g. `onnx::NativeEngine::load`,
//!   `onnxruntime::OrtEngine::load`) reads the model, checks it, packs weights and sizes
//!   every buffer it needs. After that the shapes and element types of its inputs and
//!   outputs ([`Engine::inputs`], [`Engine::outputs`]) never change.
//! - **Caller-provided buffers.** [`Engine::run`] reads the inputs from and writes the
//!   outputs into slices the caller owns, one per tensor, in the order of the specs, each of
//!   exactly [`TensorSpec::byte_len`] bytes (element type and layout as the spec says,
//!   row-major over the spec's shape, little-endian).
//! - **No allocation, no threads of its own** (native): `run` allocates nothing and never
//!   spawns or blocks on a thread. It may split its work over the caller's lanes through
//!   [`Lanes`], with a static partition (the same chunks whatever the lane count), so the
//!   outputs are bit-identical on any number of lanes. Backends that wrap a foreign runtime
//!   (ONNX Runtime) say in their docs what they cannot promise.
//! - **Costs are reported**: [`Engine::macs`] (multiply-accumulates of one run) and
//!   [`Engine::scratch_bytes`] (the engine's own working memory, allocated at load).
//! - **Errors, not panics**: a wrong buffer length or a failed run is an [`EngineError`];
//!   per-run variants carry only numbers and static strings (no allocation on the error
//!   path either).
//!
//! # Never
//!
//! An engine never reads the clock, never logs, never depends on hash order, and never
//! writes outside the output slices it was given.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

pub mod cuda;
pub mod io_quant;
pub mod load;
pub mod onnxruntime;
pub mod tensorrt;

pub use load::{load_engine, load_engine_bytes};

/// Element type of an engine's input or output tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// 32-bit IEEE float.
    F32,
    /// Signed 8-bit integer (quantized activations).
    I8,
    /// Unsigned 8-bit integer (quantized activations).
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
}

impl ElemType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 => 1,
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::I64 => 8,
        }
    }

    /// ONNX-style lower-case name (`float32`, `int8`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "float32",
            ElemType::I8 => "int8",
            ElemType::U8 => "uint8",
            ElemType::I32 => "int32",
            ElemType::I64 => "int64",
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One input or output of a compiled model: name, element type and fixed shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name in the model file.
    pub name: String,
    /// Element type.
    pub elem: ElemType,
    /// Fixed shape (row-major); every dimension is known at load.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of bytes a buffer for this tensor must have.
    pub fn byte_len(&self) -> usize {
        self.elements() * self.elem.size()
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}{:?}", self.name, self.elem, self.shape)
    }
}

/// Which backend compiled a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum EngineKind {
    /// redline's own INT8 engine (`onnx::NativeEngine`).
    #[default]
    Native,
    /// ONNX Runtime's CPU provider through `ort`, loaded at run time
    /// (`engine::onnxruntime::OrtEngine`).
    OnnxRuntime,
    /// redline's INT8 kernels on an NVIDIA GPU (`cuda::CudaEngine`, feature `cuda`),
    /// bit-identical to `Native`.
    Cuda,
    /// ONNX Runtime's TensorRT execution provider (`tensorrt`, feature `tensorrt`): engines
    /// built on the target and cached.
    TensorRt,
}

impl EngineKind {
    /// Every backend, in the order `redline model info` lists them.
    pub const ALL: [EngineKind; 4] = [
        EngineKind::Native,
        EngineKind::OnnxRuntime,
        EngineKind::Cuda,
        EngineKind::TensorRt,
    ];

    /// The name used in configs and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            EngineKind::Native => "native",
            EngineKind::OnnxRuntime => "onnxruntime",
            EngineKind::Cuda => "cuda",
            EngineKind::TensorRt => "tensorrt",
        }
    }

    /// Parses a name as written in configs (`native`, `onnxruntime`, `cuda`, `tensorrt`;
    /// `ort` and `trt` are accepted).
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "native" => Some(EngineKind::Native),
            "onnxruntime" | "ort" => Some(EngineKind::OnnxRuntime),
            "cuda" => Some(EngineKind::Cuda),
            "tensorrt" | "trt" => Some(EngineKind::TensorRt),
            _ => None,
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model file could not be read.
    #[error("cannot read model {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a model this backend can parse (bad protobuf, no graph, ...).
    #[error("{path}: not a usable ONNX model: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A node uses an operator, attribute or type the backend cannot run.
    #[error("node {node:?} (op {op}): {reason}")]
    Unsupported {
        /// The node's name (or its first output when unnamed).
        node: String,
        /// The operator type.
        op: String,
        /// What is not supported and what to do.
        reason: String,
    },
    /// The model is well-formed but cannot be compiled (dynamic shape, inconsistent
    /// quantization, ...).
    #[error("cannot compile the model: {reason}")]
    Invalid {
        /// What is wrong and what to do.
        reason: String,
    },
    /// The backend's library is missing or unusable (e.g. no `libonnxruntime`).
    #[error("{0}")]
    Backend(String),
    /// `run` got the wrong number of buffers.
    #[error("run got {got} {what} buffers but the model has {expected}")]
    BufferCount {
        /// `"input"` or `"output"`.
        what: &'static str,
        /// Tensors in the model.
        expected: usize,
        /// Buffers given.
        got: usize,
    },
    /// A buffer has the wrong number of bytes.
    #[error("{what} buffer {index} has {got} bytes but the tensor needs {expected}")]
    BufferSize {
        /// `"input"` or `"output"`.
        what: &'static str,
        /// Position of the tensor.
        index: usize,
        /// Required bytes.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// The run itself failed (a foreign runtime reported an error, a kernel rejected a
    /// buffer).
    #[error("run failed: {0}")]
    Run(&'static str),
}

/// How an engine spreads a run over the caller's lanes: a static partition of `0..items`
/// into `chunks` contiguous ranges ([`redline_runtime::parallel::chunk_range`]), each handed
/// to `f` exactly once, possibly on another thread, returning when all have run. The
/// partition must not depend on the number of lanes or on timing.
pub trait Lanes {
    /// Runs `f` on every chunk of `0..items` split into `chunks` (at least 1) ranges.
    fn for_each_chunk(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_));

    /// How many threads may run chunks at once, the caller's included. A cost hint only:
    /// an engine may make fewer chunks of a step whose chunks each re-read something large
    /// (a convolution whose weights outgrow L2 streams them once per chunk), never change
    /// an output by it.
    fn width(&self) -> usize {
        1
    }
}

/// No parallelism: every chunk runs on the calling thread, in order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inline;

impl Lanes for Inline {
    fn for_each_chunk(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
        let chunks = chunks.max(1);
        for i in 0..chunks {
            let r = redline_runtime::parallel::chunk_range(items, chunks, i);
            if !r.is_empty() {
                f(r);
            }
        }
    }
}

impl Lanes for redline_runtime::StageIo<'_> {
    fn for_each_chunk(&self, items: usize, chunks: usize, f: &(dyn Fn(Range<usize>) + Sync + '_)) {
        self.parallel_for(items, chunks, f);
    }

    fn width(&self) -> usize {
        self.lane_count()
    }
}

/// A compiled model. See the module docs for the contract.
pub trait Engine: Send + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> EngineKind;
    /// The model's inputs, in the order `run` takes them.
    fn inputs(&self) -> &[TensorSpec];
    /// The model's outputs, in the order `run` writes them.
    fn outputs(&self) -> &[TensorSpec];
    /// Multiply-accumulates of one run (convolutions and matrix products).
    fn macs(&self) -> u64;
    /// Bytes of working memory the engine allocated at load (intermediate tensors and
    /// packed weights not counted separately by the backend are included where known).
    fn scratch_bytes(&self) -> usize;
    /// Runs the model once: `inputs[i]` holds tensor `inputs()[i]`, `outputs[j]` receives
    /// tensor `outputs()[j]` (raw little-endian bytes, row-major).
    fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        lanes: &dyn Lanes,
    ) -> Result<(), EngineError>;
}

/// One zeroed buffer per tensor of `specs`, each `byte_len()` bytes: the outputs of a run.
/// Allocates: for set-up, tools and tests, never for the frame loop.
pub fn output_buffers(specs: &[TensorSpec]) -> Vec<Vec<u8>> {
    specs.iter().map(|s| vec![0u8; s.byte_len()]).collect()
}

/// Runs `engine` once on `inputs` into freshly allocated output buffers and returns them
/// ([`output_buffers`]). Allocates: for tools, tests and checks, not for the frame loop,
/// which keeps its buffers and calls [`Engine::run`].
pub fn run_once<E: Engine + ?Sized, I: AsRef<[u8]>>(
    engine: &mut E,
    inputs: &[I],
    lanes: &dyn Lanes,
) -> Result<Vec<Vec<u8>>, EngineError> {
    let mut outs = output_buffers(engine.outputs());
    let ins: Vec<&[u8]> = inputs.iter().map(AsRef::as_ref).collect();
    let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    engine.run(&ins, &mut refs, lanes)?;
    Ok(outs)
}

/// Checks buffer counts and sizes against the specs (every backend calls this first).
pub fn check_buffers(
    in_specs: &[TensorSpec],
    out_specs: &[TensorSpec],
    inputs: &[&[u8]],
    outputs: &[&mut [u8]],
) -> Result<(), EngineError> {
    if inputs.len() != in_specs.len() {
        return Err(EngineError::BufferCount {
            what: "input",
            expected: in_specs.len(),
            got: inputs.len(),
        });
    }
    if outputs.len() != out_specs.len() {
        return Err(EngineError::BufferCount {
            what: "output",
            expected: out_specs.len(),
            got: outputs.len(),
        });
    }
    for (index, (spec, buf)) in in_specs.iter().zip(inputs).enumerate() {
        if buf.len() != spec.byte_len() {
            return Err(EngineError::BufferSize {
                what: "input",
                index,
                expected: spec.byte_len(),
                got: buf.len(),
            });
        }
    }
    for (index, (spec, buf)) in out_specs.iter().zip(outputs.iter()).enumerate() {
        if buf.len() != spec.byte_len() {
            return Err(EngineError::BufferSize {
                what: "output",
                index,
                expected: spec.byte_len(),
                got: buf.len(),
            });
        }
    }
    Ok(())
}
