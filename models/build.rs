//! Generates the ONNX protobuf bindings (`onnx.proto`, the schema of ONNX 1.23 as shipped in
//! the `onnx` Python package, vendored under `proto/`) with rust-protobuf's pure-Rust
//! parser: no `protoc`, nothing downloaded. The generated module is included by
//! `src/onnx/proto.rs`.
//!
//! Also sets `cfg(redline_cuda)` when either CUDA feature is on (`cuda`: CUDA 12.2 bindings,
//! `cuda-13`: CUDA 13 bindings; cudarc takes exactly one version, so the two are separate
//! features and the code tests this one cfg).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(redline_cuda)");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some()
        || std::env::var_os("CARGO_FEATURE_CUDA_13").is_some()
    {
        println!("cargo:rustc-cfg=redline_cuda");
    }
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .input("proto/onnx.proto")
        .cargo_out_dir("onnx_proto")
        .run_from_script();
}
