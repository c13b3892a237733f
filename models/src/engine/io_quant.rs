//! The quantization of a model's `int8` inputs and outputs, read from its ONNX graph, so
//! that the code around an engine (preprocessing, the BEV transform, the decoder) uses the
//! scales the model was built with, whatever engine runs it.
//!
//! # Contract
//!
//! - An **output**'s quantization is the `y_scale` / `y_zero_point` of the node that
//!   produces it, found by walking back from the output through operators that do not
//!   change quantized values' meaning (`Transpose`, `Reshape`, `Flatten`, `Squeeze`,
//!   `Unsqueeze`, `Identity`, `Relu`, `Clip`, `MaxPool`) to a quantizing node:
//!   `QuantizeLinear`, `QLinearConv`, `QLinearMatMul`, `QGemm`, `QLinearAdd`, `QLinearMul`,
//!   `QLinearSigmoid`, `QLinearLeakyRelu`, `QLinearAveragePool`,
//!   `QLinearGlobalAveragePool` or `QLinearConcat`.
//! - An **input**'s quantization is that of the first node reading it (through the same
//!   layout operators, walking forward) that dequantizes it: `DequantizeLinear` (`x_scale`,
//!   `x_zero_point`) or a QOperator node's `x_scale` / `x_zero_point`.
//! - Scales and zero points must be scalar (one-element) constants: initializers or
//!   `Constant` nodes; `int8` zero points (a `uint8` one is reported as not found: the
//!   model contract asks for `int8`). A tensor whose quantization cannot be found this way
//!   is `None`; the caller decides whether that is an error.
//!
//! Construction-time only: parses the file and allocates freely. Never panics on any byte
//! string (a bad file is an [`EngineError::Parse`]).

use super::EngineError;
use crate::onnx::proto::onnx as pb;
use crate::quant::QParams;
use protobuf::Message;
use std::collections::HashMap;
use std::path::PathBuf;

/// Quantization of each graph input and output, in file order (`None`: not found).
#[derive(Clone, Debug, PartialEq)]
pub struct IoQuant {
    /// `(name, quantization)` of each graph input that is not an initializer.
    pub inputs: Vec<(String, Option<QParams>)>,
    /// `(name, quantization)` of each graph output.
    pub outputs: Vec<(String, Option<QParams>)>,
}

impl IoQuant {
    /// Quantization of output `i`, if found.
    pub fn output(&self, i: usize) -> Option<QParams> {
        self.outputs.get(i).and_then(|o| o.1)
    }

    /// Quantization of input `i`, if found.
    pub fn input(&self, i: usize) -> Option<QParams> {
        self.inputs.get(i).and_then(|o| o.1)
    }
}

/// Operators that pass quantized values through unchanged in meaning (data input 0).
const PASS: [&str; 9] = [
    "Transpose",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Relu",
    "Clip",
    "MaxPool",
];

/// `(scale input, zero point input)` of a node's output quantization.
fn y_inputs(op: &str) -> Option<(usize, usize)> {
    Some(match op {
        "QuantizeLinear" => (1, 2),
        "QLinearConv" | "QLinearMatMul" | "QLinearAdd" | "QLinearMul" => (6, 7),
        "QGemm" => (7, 8),
        "QLinearSigmoid"
        | "QLinearLeakyRelu"
        | "QLinearAveragePool"
        | "QLinearGlobalAveragePool" => (3, 4),
        "QLinearConcat" => (0, 1),
        _ => return None,
    })
}

/// `(scale input, zero point input)` of a node's quantization of its input 0.
fn x_inputs(op: &str) -> Option<(usize, usize)> {
    Some(match op {
        "DequantizeLinear"
        | "QLinearConv"
        | "QLinearMatMul"
        | "QGemm"
        | "QLinearAdd"
        | "QLinearMul"
        | "QLinearSigmoid"
        | "QLinearLeakyRelu"
        | "QLinearAveragePool"
        | "QLinearGlobalAveragePool" => (1, 2),
        _ => return None,
    })
}

/// Reads the quantization of every input and output of the ONNX model in `bytes` (`name`
/// is used in messages).
pub fn io_quant(bytes: &[u8], name: &str) -> Result<IoQuant, EngineError> {
    let m = pb::ModelProto::parse_from_bytes(bytes).map_err(|e| EngineError::Parse {
        path: PathBuf::from(name),
        reason: format!("not an ONNX protobuf: {e}"),
    })?;
    let g = m.graph.as_ref().ok_or_else(|| EngineError::Parse {
        path: PathBuf::from(name),
        reason: "the model has no graph".into(),
    })?;
    // Scalar constants: initializers and Constant nodes.
    let mut consts: HashMap<&str, &pb::TensorProto> = HashMap::new();
    for t in &g.initializer {
        consts.insert(t.name(), t);
    }
    let mut producer: HashMap<&str, &pb::NodeProto> = HashMap::new();
    let mut consumers: HashMap<&str, Vec<&pb::NodeProto>> = HashMap::new();
    for n in &g.node {
        if n.op_type() == "Constant" {
            if let (Some(out), Some(a)) = (
                n.output.first(),
                n.attribute.iter().find(|a| a.name() == "value"),
            ) {
                if let Some(t) = a.t.as_ref() {
                    consts.insert(out.as_str(), t);
                }
            }
        }
        for o in &n.output {
            producer.insert(o.as_str(), n);
        }
        for (k, i) in n.input.iter().enumerate() {
            // Only data input 0 matters for the walks.
            if k == 0 {
                consumers.entry(i.as_str()).or_default().push(n);
            }
        }
    }
    let q_of = |n: &pb::NodeProto, (s, z): (usize, usize)| -> Option<QParams> {
        let scale = scalar_f32(consts.get(n.input.get(s)?.as_str())?)?;
        let zp = match n.input.get(z).filter(|s| !s.is_empty()) {
            Some(zn) => scalar_i8(consts.get(zn.as_str())?)?,
            None => 0,
        };
        (scale.is_finite() && scale > 0.0).then(|| QParams::new(scale, zp))
    };
    let output_q = |name: &str| -> Option<QParams> {
        let mut cur = name;
        for _ in 0..g.node.len() + 1 {
            let n = producer.get(cur)?;
            if let Some(yi) = y_inputs(n.op_type()) {
                return q_of(n, yi);
            }
            if !PASS.contains(&n.op_type()) {
                return None;
            }
            cur = n.input.first()?.as_str();
        }
        None
    };
    let input_q = |name: &str| -> Option<QParams> {
        let mut cur = name;
        for _ in 0..g.node.len() + 1 {
            let next = consumers.get(cur)?;
            let n = next.first()?;
            if let Some(xi) = x_inputs(n.op_type()) {
                return q_of(n, xi);
            }
            if !PASS.contains(&n.op_type()) {
                return None;
            }
            cur = n.output.first()?.as_str();
        }
        None
    };
    let inputs = g
        .input
        .iter()
        .filter(|v| !consts.contains_key(v.name()))
        .map(|v| (v.name().to_owned(), input_q(v.name())))
        .collect();
    let outputs = g
        .output
        .iter()
        .map(|v| (v.name().to_owned(), output_q(v.name())))
        .collect();
    Ok(IoQuant { inputs, outputs })
}

fn scalar_f32(t: &pb::TensorProto) -> Option<f32> {
    if t.data_type() != pb::tensor_proto::DataType::FLOAT as i32 {
        return None;
    }
    if t.has_raw_data() {
        let b = t.raw_data();
        (b.len() == 4).then(|| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    } else {
        (t.float_data.len() == 1).then(|| t.float_data[0])
    }
}

fn scalar_i8(t: &pb::TensorProto) -> Option<i8> {
    if t.data_type() != pb::tensor_proto::DataType::INT8 as i32 {
        return None;
    }
    if t.has_raw_data() {
        let b = t.raw_data();
        (b.len() == 1).then(|| b[0] as i8)
    } else {
        (t.int32_data.len() == 1).then(|| t.int32_data[0] as i8)
    }
}
