//! `cargo run -p redline-models --example onnx_check -- MANIFEST.json...`: runs each model
//! of a reference manifest (tools/onnx/qref.py) on the native engine and prints agreement.
fn main() {
    let mut failed = false;
    for a in std::env::args().skip(1) {
        match redline_models::onnx::reference::check_manifest(
            std::path::Path::new(&a),
            &redline_models::engine::Inline,
        ) {
            Ok(r) => {
                for o in &r.outputs {
                    println!(
                        "{a}: {} differing {}/{} max_abs {:.6} steps {}",
                        o.name, o.differing, o.total, o.max_abs_diff, o.max_steps
                    );
                }
            }
            Err(e) => {
                failed = true;
                println!("{a}: ERROR {e}");
            }
        }
    }
    std::process::exit(i32::from(failed));
}
