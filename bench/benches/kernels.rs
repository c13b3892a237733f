fn main() { eprintln!("kernels benchmark: not written yet"); }
