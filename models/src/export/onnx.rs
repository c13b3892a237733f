//! The built-in network as ONNX files, written by Rust: [`onnx_models`] turns the backbone
//! and both heads of a [`NetConfig`] into three QOperator ONNX models (`backbone.onnx`,
//! `det_head.onnx`, `seg_head.onnx`), the files the pipeline loads by default (see
//! `models/builtin/` and [`super::builtin`]).
//!
//! # Contract (the same graph contract as `tools/onnx/export_qdq.py`)
//!
//! - ONNX IR version [`IR_VERSION`], default-domain opset [`OPSET`], producer
//!   [`PRODUCER`]; every tensor stored inside the file (`raw_data`, little-endian).
//! - **Input** `input`: `int8`, NHWC — backbone `[cameras, in_h, in_w, 3]` quantized with
//!   scale 1/128, zero point 0 (what preprocessing writes); heads `[1, ny, nx, bev_c]` in the
//!   backbone's output quantization (the BEV grid). A `Transpose` (perm `[0, 3, 1, 2]`)
//!   turns it into NCHW.
//! - **Layers**: one `QLinearConv` per convolution: `int8` input with its per-tensor scale
//!   and zero point, `int8` weights OIHW, symmetric per output channel (per-axis scale,
//!   zero points 0), `int32` bias with scale `x_scale * w_scale[c]`, `int8` output with its
//!   scale and zero point. A fused ReLU is a `Clip(min = y_zp)` after the convolution
//!   unless `y_zp == -128` (then saturation already clamps there).
//! - **Outputs**: `int8` NHWC, each behind a `Transpose` (perm `[0, 2, 3, 1]`). Backbone:
//!   `features [cameras, h, w, feat_c]`. Detection head: two outputs, in the order of the
//!   native head's channel groups: `heatmap [1, ny, nx, classes]` then `boxes
//!   [1, ny, nx, 6]`, each with its own quantization (a channel `Concat` would need one
//!   quantization for both, so the groups stay separate outputs and the detection stage
//!   interleaves them into its `classes + 6`-channel buffer). Segmentation head:
//!   `logits [1, ny, nx, seg_classes]`.
//! - **Metadata**: `metadata_props` `redline.role` = `backbone` | `det_head` | `seg_head`
//!   (informative; nothing reads quantization from metadata — it is in the graph).
//! - Running a written model with [`crate::onnx::NativeEngine`] gives outputs bit-identical
//!   to [`Backbone::forward`], [`DetHead::forward`] (the two outputs interleaved) and
//!   [`SegHead::forward`] (tested below).
//!
//! # Cost
//!
//! Construction-time tooling: builds the network (seeded and calibrated, or from trained
//! layers) and encodes a few hundred kB. Deterministic: the same [`NetConfig`] and
//! [`ExportOptions`] give byte-identical files (no timestamps, no versions, fixed order).
//!
//! # Never
//!
//! Never panics on bad options (errors are [`ExportError`]s), never writes outside `dir`.

use super::{ExportError, ExportOptions};
use crate::conv::Conv2d;
use crate::network::{Backbone, DetHead, NetConfig, SegHead};
use crate::onnx::proto::onnx as pb;
use crate::quant::QParams;
use protobuf::Message;
use std::path::{Path, PathBuf};

/// ONNX IR version of the written models.
pub const IR_VERSION: i64 = 8;
/// Default-domain opset of the written models.
pub const OPSET: i64 = 17;
/// `producer_name` of the written models.
pub const PRODUCER: &str = "redline-models export::onnx";
/// File name of the backbone model.
pub const BACKBONE_FILE: &str = "backbone.onnx";
/// File name of the detection head model.
pub const DET_HEAD_FILE: &str = "det_head.onnx";
/// File name of the segmentation head model.
pub const SEG_HEAD_FILE: &str = "seg_head.onnx";

const INT8: i32 = pb::tensor_proto::DataType::INT8 as i32;
const INT32: i32 = pb::tensor_proto::DataType::INT32 as i32;
const FLOAT: i32 = pb::tensor_proto::DataType::FLOAT as i32;

/// The encoded bytes of the three models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnnxModels {
    /// `backbone.onnx`.
    pub backbone: Vec<u8>,
    /// `det_head.onnx`.
    pub det_head: Vec<u8>,
    /// `seg_head.onnx`.
    pub seg_head: Vec<u8>,
}

impl OnnxModels {
    /// `(file name, bytes)` of each model, in the order backbone, det head, seg head.
    pub fn files(&self) -> [(&'static str, &[u8]); 3] {
        [
            (BACKBONE_FILE, &self.backbone),
            (DET_HEAD_FILE, &self.det_head),
            (SEG_HEAD_FILE, &self.seg_head),
        ]
    }
}

/// Builds the network for `cfg` (trained layers when set, else seeded and calibrated;
/// heads on the `opts.bev_ny × opts.bev_nx` grid, backbone batch `opts.cameras`) and
/// encodes the three models.
pub fn onnx_models(cfg: &NetConfig, opts: &ExportOptions) -> Result<OnnxModels, ExportError> {
    opts.validate()?;
    let backbone = Backbone::new(cfg)?;
    let det = DetHead::new(cfg, opts.bev_ny, opts.bev_nx)?;
    let seg = SegHead::new(cfg, opts.bev_ny, opts.bev_nx)?;
    onnx_models_from(&backbone, &det, &seg, opts.cameras)
}

/// Encodes already-built networks (backbone batch `cameras`; the heads' grid is theirs).
pub fn onnx_models_from(
    backbone: &Backbone,
    det: &DetHead,
    seg: &SegHead,
    cameras: usize,
) -> Result<OnnxModels, ExportError> {
    if !(1..=64).contains(&cameras) {
        return Err(ExportError::InvalidOptions {
            reason: format!("cameras = {cameras}: must be in 1..=64"),
        });
    }
    // Backbone: conv0 → act1 → conv1 → act2 → conv2 → features.
    let (h, w, c) = backbone.input_shape();
    let (fh, fw, fc) = backbone.output_shape();
    let mut g = GraphBuilder::new("backbone", "input", [cameras, h, w, c]);
    let layers = backbone.layers();
    for (i, conv) in layers.iter().enumerate() {
        let src = if i == 0 {
            "input".to_owned()
        } else {
            format!("act{i}")
        };
        let dst = if i + 1 == layers.len() {
            "features".to_owned()
        } else {
            format!("act{}", i + 1)
        };
        g.conv(&format!("conv{i}"), conv, &src, &dst);
    }
    g.output("features", [cameras, fh, fw, fc]);
    let backbone_bytes = g.finish()?;

    let head = |name: &str, layers: Vec<&Conv2d>, outs: &[&str], grid: (usize, usize)| {
        let (hidden, convs) = layers.split_first().ok_or(ExportError::InvalidOptions {
            reason: format!("head {name} has no layers"),
        })?;
        let mut g = GraphBuilder::new(name, "input", [1, grid.0, grid.1, hidden.in_c]);
        g.conv("hidden", hidden, "input", "hidden");
        for (conv, &out) in convs.iter().zip(outs) {
            g.conv(out, conv, "hidden", out);
        }
        for (conv, &out) in convs.iter().zip(outs) {
            g.output(out, [1, grid.0, grid.1, conv.out_c]);
        }
        g.finish()
    };
    let (ny, nx, _) = det.output_shape();
    let det_bytes = head(
        "det_head",
        det.layers().collect(),
        &["heatmap", "boxes"],
        (ny, nx),
    )?;
    let (ny, nx, _) = seg.output_shape();
    let seg_bytes = head("seg_head", seg.layers().collect(), &["logits"], (ny, nx))?;
    Ok(OnnxModels {
        backbone: backbone_bytes,
        det_head: det_bytes,
        seg_head: seg_bytes,
    })
}

/// Writes [`onnx_models`]`(cfg, opts)` into `dir` (created if missing) as
/// [`BACKBONE_FILE`], [`DET_HEAD_FILE`] and [`SEG_HEAD_FILE`]; returns the paths written.
pub fn write_onnx_models(
    cfg: &NetConfig,
    opts: &ExportOptions,
    dir: &Path,
) -> Result<Vec<PathBuf>, ExportError> {
    let models = onnx_models(cfg, opts)?;
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut written = Vec::with_capacity(3);
    for (name, bytes) in models.files() {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(io_err(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// Accumulates the nodes and initializers of one model.
struct GraphBuilder {
    name: String,
    input: pb::ValueInfoProto,
    outputs: Vec<pb::ValueInfoProto>,
    nodes: Vec<pb::NodeProto>,
    inits: Vec<pb::TensorProto>,
}

impl GraphBuilder {
    fn new(name: &str, input: &str, shape: [usize; 4]) -> Self {
        let mut g = GraphBuilder {
            name: name.to_owned(),
            input: value_info(input, shape),
            outputs: Vec::new(),
            nodes: Vec::new(),
            inits: Vec::new(),
        };
        g.node(
            "Transpose",
            "input_to_nchw",
            &[input],
            &format!("{input}_nchw"),
            vec![ints("perm", &[0, 3, 1, 2])],
        );
        g
    }

    fn node(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        output: &str,
        attrs: Vec<pb::AttributeProto>,
    ) {
        let mut n = pb::NodeProto::new();
        n.set_op_type(op.to_owned());
        n.set_name(name.to_owned());
        n.input = inputs.iter().map(|s| (*s).to_owned()).collect();
        n.output = vec![output.to_owned()];
        n.attribute = attrs;
        self.nodes.push(n);
    }

    fn init(&mut self, name: &str, data_type: i32, dims: &[usize], raw: Vec<u8>) {
        let mut t = pb::TensorProto::new();
        t.set_name(name.to_owned());
        t.set_data_type(data_type);
        t.dims = dims.iter().map(|&d| d as i64).collect();
        t.set_raw_data(raw);
        self.inits.push(t);
    }

    fn qparams(&mut self, scale_name: &str, zp_name: &str, q: QParams) {
        self.init(scale_name, FLOAT, &[], q.scale.to_le_bytes().to_vec());
        self.init(zp_name, INT8, &[], vec![q.zero_point as u8]);
    }

    /// One `QLinearConv` (plus `Clip` for a ReLU whose floor saturation does not give),
    /// reading `<src>_nchw` and writing `<dst>_nchw`; initializers named `<graph>.<layer>.*`.
    fn conv(&mut self, layer: &str, conv: &Conv2d, src: &str, dst: &str) {
        let p = format!("{}.{layer}", self.name);
        let names = [
            "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias",
        ]
        .map(|s| format!("{p}.{s}"));
        self.qparams(&names[0], &names[1], conv.in_q);
        // OHWI (native) → OIHW (ONNX).
        let (oc, k, ic) = (conv.out_c, conv.k, conv.in_c);
        let mut w = vec![0u8; conv.weights.len()];
        for o in 0..oc {
            for y in 0..k {
                for x in 0..k {
                    for i in 0..ic {
                        w[((o * ic + i) * k + y) * k + x] =
                            conv.weights[((o * k + y) * k + x) * ic + i] as u8;
                    }
                }
            }
        }
        self.init(&names[2], INT8, &[oc, ic, k, k], w);
        let scales = conv.w_scales.iter().flat_map(|s| s.to_le_bytes()).collect();
        self.init(&names[3], FLOAT, &[oc], scales);
        self.init(&names[4], INT8, &[oc], vec![0; oc]);
        self.qparams(&names[5], &names[6], conv.out_q);
        let bias = conv.bias.iter().flat_map(|b| b.to_le_bytes()).collect();
        self.init(&names[7], INT32, &[oc], bias);
        let dst = format!("{dst}_nchw");
        let clip = conv.relu && conv.out_q.zero_point != -128;
        let conv_out = if clip {
            format!("{dst}_pre_relu")
        } else {
            dst.clone()
        };
        let (k, s, pad) = (conv.k as i64, conv.stride as i64, conv.pad as i64);
        let src_nchw = format!("{src}_nchw");
        let mut ins: Vec<&str> = vec![&src_nchw];
        ins.extend(names.iter().map(String::as_str));
        self.node(
            "QLinearConv",
            &p,
            &ins,
            &conv_out,
            vec![
                ints("kernel_shape", &[k, k]),
                ints("strides", &[s, s]),
                ints("pads", &[pad, pad, pad, pad]),
                ints("dilations", &[1, 1]),
                int("group", 1),
            ],
        );
        if clip {
            let min = format!("{p}.relu_min");
            self.init(&min, INT8, &[], vec![conv.out_q.zero_point as u8]);
            self.node(
                "Clip",
                &format!("{p}.relu"),
                &[&conv_out, &min],
                &dst,
                Vec::new(),
            );
        }
    }

    fn output(&mut self, name: &str, shape: [usize; 4]) {
        self.node(
            "Transpose",
            &format!("{name}_to_nhwc"),
            &[&format!("{name}_nchw")],
            name,
            vec![ints("perm", &[0, 2, 3, 1])],
        );
        self.outputs.push(value_info(name, shape));
    }

    fn finish(self) -> Result<Vec<u8>, ExportError> {
        let mut g = pb::GraphProto::new();
        g.set_name(format!("redline_{}", self.name));
        g.node = self.nodes;
        g.initializer = self.inits;
        g.input = vec![self.input];
        g.output = self.outputs;
        let mut m = pb::ModelProto::new();
        m.set_ir_version(IR_VERSION);
        m.set_producer_name(PRODUCER.to_owned());
        let mut opset = pb::OperatorSetIdProto::new();
        opset.set_domain(String::new());
        opset.set_version(OPSET);
        m.opset_import = vec![opset];
        let mut role = pb::StringStringEntryProto::new();
        role.set_key("redline.role".to_owned());
        role.set_value(self.name.clone());
        m.metadata_props = vec![role];
        m.graph = protobuf::MessageField::some(g);
        m.write_to_bytes().map_err(|e| ExportError::InvalidOptions {
            reason: format!("cannot encode the {} model: {e}", self.name),
        })
    }
}

fn value_info(name: &str, shape: [usize; 4]) -> pb::ValueInfoProto {
    let mut s = pb::TensorShapeProto::new();
    s.dim = shape
        .iter()
        .map(|&d| {
            let mut dim = pb::tensor_shape_proto::Dimension::new();
            dim.set_dim_value(d as i64);
            dim
        })
        .collect();
    let mut tt = pb::type_proto::Tensor::new();
    tt.set_elem_type(INT8);
    tt.shape = protobuf::MessageField::some(s);
    let mut ty = pb::TypeProto::new();
    ty.value = Some(pb::type_proto::Value::TensorType(tt));
    let mut v = pb::ValueInfoProto::new();
    v.set_name(name.to_owned());
    v.type_ = protobuf::MessageField::some(ty);
    v
}

fn ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    let mut a = pb::AttributeProto::new();
    a.set_name(name.to_owned());
    a.set_type(pb::attribute_proto::AttributeType::INTS);
    a.ints = v.to_vec();
    a
}

fn int(name: &str, v: i64) -> pb::AttributeProto {
    let mut a = pb::AttributeProto::new();
    a.set_name(name.to_owned());
    a.set_type(pb::attribute_proto::AttributeType::INT);
    a.set_i(v);
    a
}

#[cfg(test)]
#[path = "onnx_tests.rs"]
mod tests;
