//! The `cuda` engine: an imported model run on an NVIDIA GPU with redline's own INT8 kernels,
//! **bit-identical to the native CPU engine** (cargo feature `cuda`; CUDA 12.2+ driver API
//! through cudarc, loaded at run time; `cuda-13` selects CUDA 13 bindings).
//!
//! # Contract
//!
//! - **Same model, same numbers.** The model is lowered by the native importer (same
//!   constant folding and requantization parameters) and every step runs
//!   a kernel of `kernels.cu` that mirrors its CPU kernel operation for operation (exact
//!   integer sums; each float step one IEEE operation in the CPU's order; NVRTC with
//!   `--fmad=false`, IEEE division, no flush-to-zero). Tests compare outputs byte for byte
//!   with the native engine (`tests/tests/cuda_engine.rs`, on a GPU).
//! - **Probed, never a panic.** [`probe`] and [`CudaEngine::load`] check for the driver
//!   library, a device and NVRTC before anything calls into them; each missing piece is an
//!   [`EngineError::Backend`] saying what to install or set. A build without the feature
//!   says to rebuild with `--features cuda`.
//! - **Memory.** One device allocation holds every per-frame buffer (the native arena's
//!   planned offsets, then the input and output staging slots, then a scratch area for
//!   channel-padded stem inputs); one holds the constants
//!   (weights, biases, multipliers, tables), uploaded at load; one pinned host buffer
//!   (page-locked, not write-combined) stages inputs and outputs. Nothing is allocated per
//!   run, on the host or the device.
//! - **Launches.** One stream per engine; the frame's work (upload, one kernel per step, download)
//!   is captured once at load as a CUDA graph and replayed by every run
//!   ([`CudaOptions::graphs`]; off: the same launches are issued on the stream each run).
//!   `run` waits with blocking synchronisation: the calling lane sleeps, it does not spin
//!   (`REDLINE_CUDA_SYNC=spin` trades that for latency; process-wide).
//! - **Staged I/O.** `run` copies the caller's inputs into the pinned staging and the
//!   outputs out of it; a producer that writes straight into
//!   [`CudaEngine::input_staging`] and reads [`CudaEngine::output_staging`] calls
//!   [`CudaEngine::run_staged`] and saves both copies (large camera frames: milliseconds).
//! - **Kernels.** Ungrouped convolutions run on the tensor cores (`mma.sync` int8, sm_80+;
//!   [`CudaOptions::tensor_cores`]) or with `dp4a`, grouped ones on a generic kernel; a
//!   3-channel stem is padded to 4 channels (zero-point input, zero weights) first. Every
//!   path gives the same bytes (exact integer sums). A global average pool runs a block per
//!   image and channel group (exact integer sums in shared memory).
//! - **The float route** (TensorRT-style Q/DQ placement: a convolution's float output going
//!   on unquantized to the next QuantizeLinear): float-output convolutions (the same
//!   kernels, an f32 epilogue `acc · scale + bias`), dequantization, float binaries (two
//!   tensors, a repeating constant, a broadcast gate), activations (clamp, sigmoid and exp
//!   through the CPU's `exp_poly` step for step, hard sigmoid/swish, leaky relu, neg, abs,
//!   sqrt, reciprocal, square), max pooling and global average pooling (each channel summed
//!   in pixel order by one thread, as the CPU sums it). One IEEE operation per CPU
//!   operation, so the same bits; NaN payloads may differ (the GPU's NaN is canonical), which
//!   no quantized output can show.
//! - **Errors at run time** are [`EngineError::Run`] with a static message (no allocation).
//! - **Diagnostics.** [`CudaEngine::profile`] times every launch with events (allocates;
//!   not for the hot path).
//!
//! # Costs
//!
//! Load: NVRTC compiles the kernels once per process and architecture (on the dev VM with
//! NVRTC 12.2, the PTX test compiles two architectures in about 1 s), the driver loads the
//! module once per process and device, then allocation, constant upload and graph capture
//! per engine. Run: two host copies of the I/O bytes, one
//! graph launch, one wait.
//!
//! # Not here yet
//!
//! The rest of the float route (average pools, resize, reductions, `Expand`, LayerNorm,
//! Softmax, tanh, softplus, mish, erf, log, sin, cos) and MatMul of two computed tensors
//! (attention): the plan refuses them with [`EngineError::Unsupported`] naming the step, so
//! such a model loads on `native` only.
//! One engine is one stream: the driving graph's detection ∥ segmentation heads run as two
//! engines on two streams only because they run on two lanes; a device-resident hand-off
//! between models (features stay on the GPU) and GPU preprocessing are not built.

use crate::engine::{check_buffers, Engine, EngineError, EngineKind, Lanes, TensorSpec};
use std::path::Path;

#[cfg(any(redline_cuda, test))]
pub(crate) mod launch;
#[cfg(any(redline_cuda, test))]
pub(crate) mod params;

// The device side: the CUDA driver in a CUDA build, errors saying how to rebuild otherwise.
#[cfg(redline_cuda)]
mod device;
#[cfg(not(redline_cuda))]
#[path = "no_device.rs"]
mod device;

/// The kernels' CUDA C source (compiled at run time by NVRTC).
pub const KERNELS_CU: &str = include_str!("kernels.cu");

/// How a [`CudaEngine`] runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Device ordinal.
    pub device: usize,
    /// Capture the frame once as a CUDA graph and replay it (default), or issue every
    /// launch on the stream each run.
    pub graphs: bool,
    /// Run ungrouped convolutions on the tensor cores (`mma.sync` s8, sm_80+; ignored on
    /// older GPUs) rather than the `dp4a` kernel. Same results either way.
    pub tensor_cores: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            device: 0,
            graphs: true,
            tensor_cores: true,
        }
    }
}

/// A GPU as [`probe`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// Device memory in bytes.
    pub memory_bytes: usize,
    /// The driver's CUDA version (`cuDriverGetVersion`, e.g. 13000).
    pub driver_version: i32,
}

/// Finds GPU `ordinal`: the driver library, a device, its properties. An error says what is
/// missing.
pub fn probe(ordinal: usize) -> Result<DeviceInfo, EngineError> {
    device::probe(ordinal)
}

/// NVRTC's version (major, minor), or why it cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32), EngineError> {
    device::nvrtc_version()
}

/// Compiles the kernels to PTX for `compute_{cc}` (e.g. 87 for Orin, 90 for Hopper) with
/// NVRTC alone: no driver or GPU needed (CI checks every target this way).
pub fn compile_ptx(cc: u32) -> Result<String, EngineError> {
    device::compile_ptx(cc)
}

/// A model compiled for a GPU. See the module docs.
#[derive(Debug)]
pub struct CudaEngine {
    gpu: device::Gpu,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    macs: u64,
}

impl CudaEngine {
    /// Loads an ONNX model onto GPU `opts.device`.
    pub fn load(path: &Path, opts: &CudaOptions) -> Result<CudaEngine, EngineError> {
        let g = crate::onnx::graph::OnnxGraph::load(path)?;
        Self::from_graph(&g, opts)
    }

    /// Loads a model held in memory (`name` is used in messages).
    pub fn from_bytes(
        bytes: &[u8],
        name: &str,
        opts: &CudaOptions,
    ) -> Result<CudaEngine, EngineError> {
        let g = crate::onnx::graph::OnnxGraph::parse(bytes, Path::new(name))?;
        Self::from_graph(&g, opts)
    }

    /// The GPU first (a build without CUDA, a machine without a GPU: that error before any
    /// about the model), then the native importer's lowering, then the device plan.
    fn from_graph(
        g: &crate::onnx::graph::OnnxGraph,
        opts: &CudaOptions,
    ) -> Result<CudaEngine, EngineError> {
        let info = device::probe(opts.device)?;
        let l = crate::onnx::lower_graph(g)?;
        let gpu = device::Gpu::new(&l, info, opts)?;
        Ok(CudaEngine {
            gpu,
            inputs: l.inputs,
            outputs: l.outputs,
            macs: l.macs,
        })
    }

    /// The GPU this engine runs on.
    pub fn device_info(&self) -> &DeviceInfo {
        self.gpu.info()
    }

    /// True when each run replays a captured CUDA graph.
    pub fn uses_graph(&self) -> bool {
        self.gpu.uses_graph()
    }

    /// The pinned staging bytes of input `i`: a producer (a camera driver, a preprocessing
    /// stage) can write a frame here and call [`CudaEngine::run_staged`], saving the host
    /// copy `run` makes. `None` past the last input.
    pub fn input_staging(&mut self, i: usize) -> Option<&mut [u8]> {
        self.gpu.input_staging(i)
    }

    /// The pinned staging bytes of output `j`, as the last run left them.
    pub fn output_staging(&self, j: usize) -> Option<&[u8]> {
        self.gpu.output_staging(j)
    }

    /// Runs one frame on what the input staging holds; the outputs are left in the output
    /// staging. Same results as [`Engine::run`] on the same bytes, without its two host
    /// copies.
    pub fn run_staged(&mut self) -> Result<(), EngineError> {
        self.gpu.run_staged()
    }

    /// How runs wait for the GPU (`REDLINE_CUDA_SYNC`: `block`, `spin` or `yield`).
    pub fn sync_mode(&self) -> &'static str {
        device::sync_mode()
    }

    /// Where a frame's device time goes: `(what, mean ms)` for the upload, every launch
    /// (named by its program step and kernel) and the download, over `reps` frames run
    /// launch by launch with events (on the staged inputs). Diagnostics: allocates, and
    /// adds an event per launch, so the sum exceeds a graph replay's time slightly.
    pub fn profile(&mut self, reps: usize) -> Result<Vec<(String, f32)>, EngineError> {
        self.gpu.profile(reps)
    }

    /// Kernel launches per run.
    pub fn launches(&self) -> usize {
        self.gpu.launches()
    }
}

impl Engine for CudaEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Cuda
    }

    fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    fn macs(&self) -> u64 {
        self.macs
    }

    /// Device bytes (frame region + constants) and pinned host bytes.
    fn scratch_bytes(&self) -> usize {
        self.gpu.bytes()
    }

    fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        _lanes: &dyn Lanes,
    ) -> Result<(), EngineError> {
        check_buffers(&self.inputs, &self.outputs, inputs, outputs)?;
        self.gpu.run(inputs, outputs)
    }
}

#[cfg(test)]
mod tests;
