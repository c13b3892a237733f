fn main() { eprintln!("onnx_compare benchmark: not written yet"); }
