//! redline-models: tensors, INT8 quantization, kernels, networks, engines (filled by the INT8 issues).
