//! The CUDA engine's device side in a build without CUDA (no `cuda` or `cuda-13` feature):
//! the interface of `device.rs`, every entry point an error that says how to rebuild. No
//! [`Gpu`] can exist, so its methods are never reached.

use super::{CudaOptions, DeviceInfo};
use crate::engine::EngineError;
use crate::onnx::Lowered;

fn no_cuda() -> EngineError {
    EngineError::Backend(
        "this redline was built without CUDA support: rebuild with `--features cuda` \
         (cargo build --release --features cuda)"
            .into(),
    )
}

pub(super) fn probe(_ordinal: usize) -> Result<DeviceInfo, EngineError> {
    Err(no_cuda())
}

pub(super) fn sync_mode() -> &'static str {
    "none"
}

pub(super) fn nvrtc_version() -> Result<(i32, i32), EngineError> {
    Err(no_cuda())
}

pub(super) fn compile_ptx(_cc: u32) -> Result<String, EngineError> {
    Err(no_cuda())
}

/// Uninhabited: without CUDA no model is ever on a GPU.
#[derive(Debug)]
pub(super) enum Gpu {}

impl Gpu {
    pub(super) fn new(
        _model: &Lowered,
        _info: DeviceInfo,
        _opts: &CudaOptions,
    ) -> Result<Gpu, EngineError> {
        Err(no_cuda())
    }

    pub(super) fn info(&self) -> &DeviceInfo {
        match *self {}
    }

    pub(super) fn uses_graph(&self) -> bool {
        match *self {}
    }

    pub(super) fn launches(&self) -> usize {
        match *self {}
    }

    pub(super) fn bytes(&self) -> usize {
        match *self {}
    }

    pub(super) fn input_staging(&mut self, _i: usize) -> Option<&mut [u8]> {
        match *self {}
    }

    pub(super) fn output_staging(&self, _j: usize) -> Option<&[u8]> {
        match *self {}
    }

    pub(super) fn run(
        &mut self,
        _inputs: &[&[u8]],
        _outputs: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        match *self {}
    }

    pub(super) fn run_staged(&mut self) -> Result<(), EngineError> {
        match *self {}
    }

    pub(super) fn profile(&mut self, _reps: usize) -> Result<Vec<(String, f32)>, EngineError> {
        match *self {}
    }
}
