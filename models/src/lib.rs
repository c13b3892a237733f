//! redline-models: INT8 quantization, kernels and the reference network (backbone and
//! heads). Knows nothing about frames or schedules: every forward pass writes into buffers
//! its caller allocated once.

pub mod conv;
pub mod network;
pub mod quant;
