//! The built-in network as shipped: the three ONNX files in `models/builtin/`, written by
//! [`super::onnx`] for [`net_config`] and [`options`] and embedded in the binary (so a run
//! works from any directory). The pipeline loads these through the importer when its
//! configuration names no models and its network is this one.
//!
//! Regenerate after changing the network or the writer:
//! `cargo run -p redline-models --example write_builtin_models` (a test fails while the
//! committed files differ from what the writer produces).

use super::onnx::OnnxModels;
use super::ExportOptions;
use crate::network::NetConfig;

/// Directory of the committed files (in the source tree).
pub const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/builtin");
/// `backbone.onnx`, embedded.
pub const BACKBONE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/builtin/backbone.onnx"
));
/// `det_head.onnx`, embedded.
pub const DET_HEAD: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/builtin/det_head.onnx"
));
/// `seg_head.onnx`, embedded.
pub const SEG_HEAD: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/builtin/seg_head.onnx"
));

/// The network the built-in files hold: the pipeline's default (`net_input = [128, 256]`,
/// `feature_channels = 128`, `weights_seed = 1`, three detection and three segmentation
/// classes). The pipeline tests that its default config gives exactly this.
pub fn net_config() -> NetConfig {
    NetConfig {
        in_h: 128,
        in_w: 256,
        feat_c: 128,
        bev_c: 128,
        seed: 1,
        ..NetConfig::default()
    }
}

/// Seven cameras (the default rig), the default 48 × 80 BEV grid.
pub fn options() -> ExportOptions {
    ExportOptions::default()
}

/// The embedded files.
pub fn models() -> OnnxModels {
    OnnxModels {
        backbone: BACKBONE.to_vec(),
        det_head: DET_HEAD.to_vec(),
        seg_head: SEG_HEAD.to_vec(),
    }
}
