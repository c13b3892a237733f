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
use crate::onnx::graph::{input_quant_inputs, output_quant_inputs, ConstData, Node, OnnxGraph};
use crate::quant::QParams;
use std::collections::HashMap;
use std::path::Path;

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

/// Reads the quantization of every input and output of the ONNX model in `bytes` (`name`
/// is used in messages).
pub fn io_quant(bytes: &[u8], name: &str) -> Result<IoQuant, EngineError> {
    let g = OnnxGraph::parse(bytes, Path::new(name))?;
    let mut producer: HashMap<&str, &Node> = HashMap::new();
    let mut consumers: HashMap<&str, Vec<&Node>> = HashMap::new();
    for n in &g.nodes {
        for o in &n.outputs {
            producer.insert(o.as_str(), n);
        }
        // Only data input 0 matters for the walks.
        if let Some(i) = n.inputs.first() {
            consumers.entry(i.as_str()).or_default().push(n);
        }
    }
    let q_of = |n: &Node, (s, z): (usize, usize)| -> Option<QParams> {
        let scale = match &g.constant(n.input(s)?)?.data {
            ConstData::F32(v) if v.len() == 1 => v[0],
            _ => return None,
        };
        let zp = match n.input(z) {
            Some(zn) => match &g.constant(zn)?.data {
                ConstData::I8(v) if v.len() == 1 => v[0],
                _ => return None,
            },
            None => 0,
        };
        (scale.is_finite() && scale > 0.0).then(|| QParams::new(scale, zp))
    };
    let output_q = |name: &str| -> Option<QParams> {
        let mut cur = name;
        for _ in 0..g.nodes.len() + 1 {
            let n = producer.get(cur)?;
            if let Some(yi) = output_quant_inputs(&n.op) {
                return q_of(n, yi);
            }
            if !PASS.contains(&n.op.as_str()) {
                return None;
            }
            cur = n.inputs.first()?.as_str();
        }
        None
    };
    let input_q = |name: &str| -> Option<QParams> {
        let mut cur = name;
        for _ in 0..g.nodes.len() + 1 {
            let n = consumers.get(cur)?.first()?;
            if let Some(xi) = input_quant_inputs(&n.op) {
                return q_of(n, xi);
            }
            if !PASS.contains(&n.op.as_str()) {
                return None;
            }
            cur = n.outputs.first()?.as_str();
        }
        None
    };
    let inputs = g
        .inputs
        .iter()
        .map(|v| (v.name.clone(), input_q(&v.name)))
        .collect();
    let outputs = g
        .outputs
        .iter()
        .map(|v| (v.name.clone(), output_q(&v.name)))
        .collect();
    Ok(IoQuant { inputs, outputs })
}
