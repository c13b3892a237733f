//! Writes the built-in network's ONNX files (`models/builtin/backbone.onnx`,
//! `det_head.onnx`, `seg_head.onnx`) with the project's own exporter
//! (`redline_models::export::onnx`), for the network the pipeline runs by default.
//!
//! `cargo run -p redline-models --example write_builtin_models [DIR]` (default: the
//! committed `models/builtin/`). Run it after changing the network or the writer; the test
//! `builtin_files_match_the_writer` fails until you do.

use redline_models::export::{builtin, onnx};
use std::path::PathBuf;

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from(builtin::DIR), PathBuf::from);
    match onnx::write_onnx_models(&builtin::net_config(), &builtin::options(), &dir) {
        Ok(paths) => {
            for p in paths {
                let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                println!("{}: {len} bytes", p.display());
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
