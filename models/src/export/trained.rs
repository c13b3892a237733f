//! The trained driving network as shipped: the three ONNX files in `models/trained/`,
//! trained on simulator drives and quantized by `tools/train` (QDQ form, per-channel INT8
//! weights, per-tensor INT8 activations), embedded in the binary. The pipeline loads these
//! through the importer when its configuration names no models and `network = "trained"`
//! (the default). The README's model card says how they were made and how well they do;
//! `tools/train/README.md` reproduces them.
//!
//! Fixed shapes: the default seven-camera rig (the six surround cameras and the front
//! telephoto, `[7, H, W, 3]` in), the default 48 × 80 BEV grid; `H`, `W`, the feature size and the quantization are read from the files.

use super::onnx::OnnxModels;

/// Directory of the committed files (in the source tree).
pub const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trained");
/// Cameras the trained backbone takes (its input's first dimension).
pub const CAMERAS: usize = 7;
/// Heights (m) at which the view transform samples the trained network's features, in
/// the order its heads take them. The pipeline runs what the files declare (ONNX metadata
/// `redline.bev_lift_m`); this restates it for code that builds the view transform without
/// loading the models (the kernels bench), and a pipeline test checks the two agree.
pub const LIFTS_M: &[f32] = &[0.5, 0.0];
/// Whether the view transform reads the trained network's feature maps linearly between
/// rows (`row_linear`) rather than at the nearest cell: what the files declare
/// (`redline.bev_sampling`), restated like [`LIFTS_M`].
pub const ROW_LINEAR: bool = true;
/// `backbone.onnx`, embedded.
pub const BACKBONE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/trained/backbone.onnx"
));
/// `det_head.onnx`, embedded.
pub const DET_HEAD: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/trained/det_head.onnx"
));
/// `seg_head.onnx`, embedded.
pub const SEG_HEAD: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/trained/seg_head.onnx"
));

/// The embedded files.
pub fn models() -> OnnxModels {
    OnnxModels {
        backbone: BACKBONE.to_vec(),
        det_head: DET_HEAD.to_vec(),
        seg_head: SEG_HEAD.to_vec(),
    }
}
