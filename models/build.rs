//! Generates the ONNX protobuf bindings (`onnx.proto`, the schema of ONNX 1.23 as shipped in
//! the `onnx` Python package, vendored under `proto/`) with rust-protobuf's pure-Rust
//! parser: no `protoc`, nothing downloaded. The generated module is included by
//! `src/onnx/proto.rs`.

fn main() {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .input("proto/onnx.proto")
        .cargo_out_dir("onnx_proto")
        .run_from_script();
}
