//! The JSON sidecar of an export ([`ExportMeta`]): graphs, their inputs and outputs, and
//! each layer's shape, quantization and tensor names.
//!
//! Contract: plain serde types; field names are the file format (readers such as
//! `tools/onnx/export_qdq.py` depend on them), and `f32` scales round-trip bit for bit
//! through their shortest decimal form. Cost: none beyond the data. Never: holds logic.

use crate::quant::QParams;
use serde::{Deserialize, Serialize};

/// Quantization parameters as written to JSON.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QMeta {
    /// Scale (an `f32`, shortest round-trip decimal).
    pub scale: f32,
    /// Zero point.
    pub zero_point: i8,
}

impl From<QParams> for QMeta {
    fn from(q: QParams) -> Self {
        Self {
            scale: q.scale,
            zero_point: q.zero_point,
        }
    }
}

/// One layer of a graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerMeta {
    /// Unique name inside the graph, e.g. `conv0`.
    pub name: String,
    /// Layer kind; only `"conv2d"` (NHWC, OHWI weights, symmetric padding) so far.
    pub kind: String,
    /// Name of the tensor the layer reads (the graph input or another layer's output).
    pub input: String,
    /// Name of the tensor the layer writes.
    pub output: String,
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// Square kernel size.
    pub k: usize,
    /// Stride (both axes).
    pub stride: usize,
    /// Zero padding (all sides), filled with the input zero point.
    pub pad: usize,
    /// Fused ReLU: the output is clamped below at `out_q.zero_point`.
    pub relu: bool,
    /// Input quantization.
    pub in_q: QMeta,
    /// Output quantization.
    pub out_q: QMeta,
    /// Safetensors entry of the `i8` weights `[out_c, k, k, in_c]`.
    pub weight: String,
    /// Safetensors entry of the `f32` per-output-channel weight scales `[out_c]`.
    pub w_scales: String,
    /// Safetensors entry of the `i32` bias `[out_c]`.
    pub bias: String,
}

/// One output of a graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputMeta {
    /// Tensor name (a layer's `output`).
    pub name: String,
    /// NHWC shape.
    pub shape: [usize; 4],
    /// Quantization.
    pub q: QMeta,
    /// Channel range `[start, end)` this output occupies in the graph's native test output.
    pub native_channels: [usize; 2],
}

/// One exported graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphMeta {
    /// `backbone`, `det_head` or `seg_head`.
    pub name: String,
    /// Name of the graph input tensor.
    pub input: String,
    /// NHWC input shape (batch first).
    pub input_shape: [usize; 4],
    /// Input quantization.
    pub input_q: QMeta,
    /// Outputs, in the order of their channels in the native output.
    pub outputs: Vec<OutputMeta>,
    /// Layers in execution order.
    pub layers: Vec<LayerMeta>,
    /// Safetensors entry of the test input (`i8`, `input_shape`).
    pub test_input: String,
    /// Safetensors entry of the native output for it (`i8`, NHWC, all channel groups).
    pub test_output: String,
    /// NHWC shape of `test_output`.
    pub test_output_shape: [usize; 4],
    /// Multiply-adds of one run on the test input.
    pub macs: u64,
}

/// The JSON sidecar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportMeta {
    /// [`FORMAT_VERSION`](super::FORMAT_VERSION).
    pub format_version: u32,
    /// Name of the tensor file next to the sidecar.
    pub tensors_file: String,
    /// Network configuration (`in_h, in_w, feat_c, bev_c, classes, seg_classes, seed`).
    pub config: ConfigMeta,
    /// The graphs: backbone, det_head, seg_head.
    pub graphs: Vec<GraphMeta>,
}

/// [`NetConfig`](crate::network::NetConfig) as written to JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigMeta {
    /// Camera image height.
    pub in_h: usize,
    /// Camera image width.
    pub in_w: usize,
    /// Backbone output channels.
    pub feat_c: usize,
    /// BEV channels.
    pub bev_c: usize,
    /// Detection classes.
    pub classes: usize,
    /// Segmentation classes.
    pub seg_classes: usize,
    /// Weight seed.
    pub seed: u64,
    /// Cameras in the test batch.
    pub cameras: usize,
    /// BEV grid rows.
    pub bev_ny: usize,
    /// BEV grid columns.
    pub bev_nx: usize,
}
