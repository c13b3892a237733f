//! The ONNX protobuf messages (`ModelProto`, `GraphProto`, `NodeProto`, `TensorProto`, ...),
//! generated at build time from the vendored `proto/onnx.proto` by rust-protobuf.

#![allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
#![allow(unsafe_code)]

include!(concat!(env!("OUT_DIR"), "/onnx_proto/mod.rs"));
