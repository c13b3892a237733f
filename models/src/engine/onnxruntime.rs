//! The `onnxruntime` backend (ONNX Runtime's CPU provider through `ort`, loaded at run
//! time). Being written: see issue 11.
