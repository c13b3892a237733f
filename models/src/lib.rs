//! redline-models: INT8 quantization, kernels and the reference network (backbone and
//! heads). Knows nothing about frames or schedules: every forward pass writes into buffers
//! its caller allocated once.

pub mod calibrate;
pub mod conv;
pub mod engine;
pub mod export;
pub mod network;
pub mod onnx;
pub mod quant;
pub mod weights;
