//! AFL++ target: arbitrary bytes as an `.onnx` file through the native engine's load path
//! and one run (`redline_models::onnx::fuzzing::model_bytes`).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        redline_models::onnx::fuzzing::model_bytes(data);
    });
}
