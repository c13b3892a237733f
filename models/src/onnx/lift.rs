//! 1-D windows lifted to 2-D before lowering: a `Conv`, `ConvTranspose`, `QLinearConv`,
//! `MaxPool`, `AveragePool` or `QLinearAveragePool` over `[N, C, L]` tensors (a temporal
//! encoder over agent histories, a radar or audio front end, as PyTorch's `Conv1d`,
//! `ConvTranspose1d`, `MaxPool1d` and `AvgPool1d` export) becomes the same operator over
//! `[N, C, 1, L]`, which the lowering runs as any 2-D one.
//!
//! Contract: the rewritten graph computes the same values, bit for bit: a 1-D window of
//! kernel `k`, stride `s`, dilation `d` and pads `(b, e)` is the 2-D window `(1, k)`,
//! `(1, s)`, `(1, d)`, pads `(0, b, 0, e)` over a height of 1, which reads the same
//! elements in the same order; weights `[a, b, k]` are the same values as `[a, b, 1, k]`.
//! The 3-D input is read through an `Unsqueeze` (axis 2) and the 4-D output given back
//! through a `Squeeze`; where the operator's input is dequantized (`DequantizeLinear` of a
//! computed tensor) or its output quantized (one `QuantizeLinear` reads it), the
//! `Unsqueeze` goes before the `DequantizeLinear` and the `Squeeze` after the
//! `QuantizeLinear`, so the quantized operator keeps its integer path; a per-axis
//! quantization's axis follows its axis. Between two lifted operators no tensor goes back
//! to 3-D: an `Unsqueeze` of a tensor this pass squeezed reads the 4-D tensor itself, and
//! so do the unary elementwise operators, same-shape `Add`/`Sub`/`Mul`/`Div`, `Flatten`,
//! the global pools and the quantizers between them; a `Squeeze` nobody reads is dropped.
//! Weights that are neither a constant nor the `DequantizeLinear` of one leave the node as
//! it is (the lowering then refuses it by name). Construction time only (clones the graph);
//! `None` when the graph has no 1-D window; never panics on a malformed node (it is left
//! for the lowering to refuse).

use super::graph::{Attr, Const, Node, OnnxGraph};
use std::collections::{HashMap, HashSet};

/// Unary elementwise operators that commute with adding or removing a unit axis.
const UNARY: &[&str] = &[
    "Relu",
    "LeakyRelu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Elu",
    "Gelu",
    "Erf",
    "Exp",
    "Neg",
    "Softplus",
    "Mish",
    "Identity",
];

/// The graph with its 1-D windows lifted to 2-D (see the module docs), or `None` when it has
/// none.
pub(crate) fn lift_1d_windows(g: &OnnxGraph) -> Option<OnnxGraph> {
    if !g.nodes.iter().any(|n| is_1d_window(g, n)) {
        return None;
    }
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for x in n.inputs.iter().filter(|x| !x.is_empty()) {
            readers.entry(x.as_str()).or_default().push(i);
        }
    }
    let graph_outputs: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut lift = Lift {
        g,
        consts: g.consts.clone(),
        nodes: Vec::with_capacity(g.nodes.len() * 2),
        flat: HashMap::new(),
        replaced_q: HashSet::new(),
        lifted_weights: HashSet::new(),
        squeezed: HashSet::new(),
    };
    for (i, n) in g.nodes.iter().enumerate() {
        if lift.replaced_q.contains(&i) {
            continue;
        }
        if is_1d_window(g, n) {
            // One QuantizeLinear reads the output: the Squeeze goes after it.
            let q = match readers.get(n.outputs[0].as_str()).map(Vec::as_slice) {
                Some(&[j])
                    if g.nodes[j].op == "QuantizeLinear"
                        && g.nodes[j].input(0) == n.outputs.first().map(String::as_str)
                        && g.nodes[j].outputs.len() == 1
                        && !graph_outputs.contains(n.outputs[0].as_str()) =>
                {
                    Some(j)
                }
                _ => None,
            };
            lift.window(n, q.map(|j| &g.nodes[j]));
            if let Some(j) = q {
                lift.replaced_q.insert(j);
            }
        } else if !lift.carry(n) {
            lift.nodes.push(n.clone());
        }
    }
    // Squeezes nobody reads (every reader took the 4-D tensor) are dropped.
    let mut read: HashSet<String> = graph_outputs.iter().map(|s| s.to_string()).collect();
    for n in &lift.nodes {
        read.extend(n.inputs.iter().cloned());
    }
    let squeezed = lift.squeezed;
    let nodes = lift
        .nodes
        .into_iter()
        .filter(|n| {
            n.outputs
                .first()
                .is_none_or(|o| !squeezed.contains(o) || read.contains(o))
        })
        .collect();
    Some(OnnxGraph {
        nodes,
        consts: lift.consts,
        ..g.clone()
    })
}

/// Whether `n` is a window operator over 3-D tensors this pass lifts.
fn is_1d_window(g: &OnnxGraph, n: &Node) -> bool {
    if n.outputs.is_empty() || n.input(0).is_none() {
        return false;
    }
    match n.op.as_str() {
        "Conv" | "ConvTranspose" => weights_3d(g, n, 1).is_some(),
        "QLinearConv" => weights_3d(g, n, 3).is_some(),
        "MaxPool" | "AveragePool" | "QLinearAveragePool" => {
            matches!(n.attrs.get("kernel_shape"), Some(Attr::Ints(k)) if k.len() == 1)
                && n.outputs.len() == 1
        }
        // The lowering pools 4-D tensors only: a 3-D one is lifted when its shape is known
        // to be 3-D, i.e. it is the output of a lifted operator (handled in `carry`).
        _ => false,
    }
}

/// The 3-D weights of `n`'s input `i`: a constant, or a `DequantizeLinear` of one (its
/// node); `None` otherwise.
fn weights_3d<'g>(g: &'g OnnxGraph, n: &Node, i: usize) -> Option<(&'g Const, Option<&'g Node>)> {
    let w = n.input(i)?;
    if let Some(c) = g.constant(w) {
        return (c.shape.len() == 3).then_some((c, None));
    }
    let dq = g
        .nodes
        .iter()
        .find(|m| m.op == "DequantizeLinear" && m.outputs.first().map(String::as_str) == Some(w))?;
    let c = g.constant(dq.input(0)?)?;
    (c.shape.len() == 3).then_some((c, Some(dq)))
}

struct Lift<'g> {
    g: &'g OnnxGraph,
    consts: HashMap<String, Const>,
    nodes: Vec<Node>,
    /// 3-D tensor name → the 4-D (`[N, C, 1, L]`) tensor it was squeezed from.
    flat: HashMap<String, String>,
    /// QuantizeLinear nodes (by index) rewritten together with the operator before them.
    replaced_q: HashSet<usize>,
    /// Weights dequantized in 4-D by a node this pass added.
    lifted_weights: HashSet<String>,
    /// The 3-D outputs of the `Squeeze`s this pass added.
    squeezed: HashSet<String>,
}

impl Lift<'_> {
    /// A node `name`d after `base` with a suffix, of `op`, inputs and outputs, attributes.
    fn node(
        base: &Node,
        suffix: &str,
        op: &str,
        inputs: Vec<String>,
        outputs: Vec<String>,
    ) -> Node {
        Node {
            name: format!("{}::{suffix}", base.name),
            op: op.to_string(),
            domain: String::new(),
            inputs,
            outputs,
            attrs: HashMap::new(),
        }
    }

    /// The 4-D form of the 3-D tensor `x` read by `n`: the tensor this pass squeezed it
    /// from, or a new `Unsqueeze` (before a `DequantizeLinear` of a computed tensor).
    fn lifted_input(&mut self, n: &Node, x: &str) -> String {
        if let Some(four) = self.flat.get(x) {
            return four.clone();
        }
        let dq = self.g.nodes.iter().find(|m| {
            m.op == "DequantizeLinear"
                && m.outputs.first().map(String::as_str) == Some(x)
                && m.input(0).is_some_and(|q| self.g.constant(q).is_none())
        });
        if let Some(dq) = dq {
            let q4 = self.lifted_input(n, &dq.inputs[0].clone());
            let out = format!("{x}::lift_4d");
            self.push_lifted_dq(dq, q4, out.clone());
            self.flat.insert(x.to_string(), out.clone());
            return out;
        }
        let out = format!("{x}::lift_4d");
        let mut u = Self::node(
            n,
            &format!("lift_unsqueeze_{x}"),
            "Unsqueeze",
            vec![x.to_string()],
            vec![out.clone()],
        );
        u.attrs.insert("axes".to_string(), Attr::Ints(vec![2]));
        self.nodes.push(u);
        self.flat.insert(x.to_string(), out.clone());
        out
    }

    /// A copy of the `DequantizeLinear` `dq` reading the 4-D `input` into `output`, its
    /// per-axis quantization's axis moved with the lift.
    fn push_lifted_dq(&mut self, dq: &Node, input: String, output: String) {
        let mut d = dq.clone();
        d.name = format!("{}::lift", dq.name);
        d.inputs[0] = input;
        d.outputs = vec![output];
        shift_axis(&mut d);
        self.nodes.push(d);
    }

    /// Gives back the 4-D tensor `four` as the 3-D `name` (a `Squeeze`, dropped at the end
    /// if nobody reads it) and records the pair.
    fn squeeze_to(&mut self, base: &Node, four: String, name: &str) {
        let suffix = format!("lift_squeeze_{name}");
        let mut s = Self::node(
            base,
            &suffix,
            "Squeeze",
            vec![four.clone()],
            vec![name.to_string()],
        );
        s.attrs.insert("axes".to_string(), Attr::Ints(vec![2]));
        self.nodes.push(s);
        self.squeezed.insert(name.to_string());
        self.flat.insert(name.to_string(), four);
    }

    /// Lifts the window operator `n` (and the `QuantizeLinear` `q` reading its output).
    fn window(&mut self, n: &Node, q: Option<&Node>) {
        let mut m = n.clone();
        m.inputs[0] = self.lifted_input(n, &n.inputs[0]);
        let w_input = match n.op.as_str() {
            "Conv" | "ConvTranspose" => Some(1),
            "QLinearConv" => Some(3),
            _ => None,
        };
        if let Some(i) = w_input {
            m.inputs[i] = self.lifted_weights(n, i);
        }
        for (attr, v) in m.attrs.iter_mut() {
            let Attr::Ints(v) = v else { continue };
            let lifted = match (attr.as_str(), v.len()) {
                ("kernel_shape" | "strides" | "dilations" | "output_shape", 1) => vec![1, v[0]],
                ("output_padding", 1) => vec![0, v[0]],
                ("pads", 2) => vec![0, v[0], 0, v[1]],
                _ => continue,
            };
            *v = lifted;
        }
        let y = n.outputs[0].clone();
        let y4 = format!("{y}::lift_4d");
        m.outputs[0] = y4.clone();
        self.nodes.push(m);
        match q {
            Some(q) => {
                let mut q4 = q.clone();
                q4.inputs[0] = y4;
                let out = q.outputs[0].clone();
                let out4 = format!("{out}::lift_4d");
                q4.outputs[0] = out4.clone();
                shift_axis(&mut q4);
                self.nodes.push(q4);
                self.squeeze_to(q, out4, &out);
            }
            None => self.squeeze_to(n, y4, &y),
        }
    }

    /// The 4-D weights for `n`'s 3-D input `i`: a new constant (or a new
    /// `DequantizeLinear` of one); the input itself when it is neither.
    fn lifted_weights(&mut self, n: &Node, i: usize) -> String {
        let name = n.inputs[i].clone();
        let to = format!("{name}::lift_4d");
        if self.consts.contains_key(&to) || self.lifted_weights.contains(&to) {
            return to; // another reader of the same weights lifted them
        }
        let Some((c, dq)) = weights_3d(self.g, n, i) else {
            return name;
        };
        let four = Const {
            shape: vec![c.shape[0], c.shape[1], 1, c.shape[2]],
            ..c.clone()
        };
        match dq {
            None => {
                self.consts.insert(to.clone(), four);
            }
            Some(dq) => {
                let qname = format!("{}::lift_4d", dq.inputs[0]);
                self.consts.insert(qname.clone(), four);
                self.push_lifted_dq(dq, qname, to.clone());
                self.lifted_weights.insert(to.clone());
            }
        }
        to
    }

    /// Rewrites `n` to read and write 4-D tensors when every tensor it computes on was
    /// squeezed by this pass (unary elementwise operators, same-shape binary ones,
    /// `Flatten`, quantizers, global pools); true when it did.
    fn carry(&mut self, n: &Node) -> bool {
        let Some(x) = n.input(0) else { return false };
        if !self.flat.contains_key(x) || n.outputs.len() != 1 {
            return false;
        }
        let op = n.op.as_str();
        let data_inputs = match op {
            "Add" | "Sub" | "Mul" | "Div" => 2,
            "QuantizeLinear" | "DequantizeLinear" => 1,
            "Flatten" | "GlobalAveragePool" | "GlobalMaxPool" | "QLinearGlobalAveragePool" => 1,
            _ if UNARY.contains(&op) => 1,
            _ => return false,
        };
        if data_inputs == 2 && !n.input(1).is_some_and(|b| self.flat.contains_key(b)) {
            return false;
        }
        let mut m = n.clone();
        for x in m.inputs.iter_mut().take(data_inputs) {
            *x = self.flat[x.as_str()].clone();
        }
        match op {
            "QuantizeLinear" | "DequantizeLinear" => shift_axis(&mut m),
            "Flatten" => {
                // Flatten at axis a of [N, C, L] is Flatten at a of [N, C, 1, L] for a in
                // 0..=2 (negative axes counted from the 3-D rank).
                let Ok(a) = n.int("axis", 1) else {
                    return false;
                };
                let a = if a < 0 { a + 3 } else { a };
                if !(0..=2).contains(&a) {
                    return false;
                }
                m.attrs.insert("axis".to_string(), Attr::Int(a));
                m.name = format!("{}::lift", n.name);
                self.nodes.push(m);
                return true;
            }
            _ => {}
        }
        let y = n.outputs[0].clone();
        let y4 = format!("{y}::lift_4d");
        m.outputs[0] = y4.clone();
        self.nodes.push(m);
        self.squeeze_to(n, y4, &y);
        true
    }
}

/// A quantizer's `axis` on a 3-D tensor moved to the same axis of the lifted 4-D one:
/// `N` and `C` (0, 1) stay, `L` (2) becomes 3; negative axes are counted from the 3-D
/// rank first.
fn shift_axis(n: &mut Node) {
    if let Some(Attr::Int(a)) = n.attrs.get("axis").cloned() {
        let a = if a < 0 { a + 3 } else { a };
        n.attrs
            .insert("axis".to_string(), Attr::Int(if a == 2 { 3 } else { a }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::graph::ConstData;

    fn node(op: &str, inputs: &[&str], output: &str, attrs: &[(&str, Attr)]) -> Node {
        Node {
            name: format!("{op}:{output}"),
            op: op.to_string(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.to_string()],
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    fn graph(nodes: Vec<Node>, consts: &[(&str, Vec<usize>)]) -> OnnxGraph {
        OnnxGraph {
            opset: 17,
            producer: String::new(),
            nodes,
            consts: consts
                .iter()
                .map(|(n, shape)| {
                    let len = shape.iter().product();
                    let c = Const {
                        shape: shape.clone(),
                        data: ConstData::I8(vec![1; len]),
                    };
                    (n.to_string(), c)
                })
                .collect(),
            unreadable: HashMap::new(),
            four_bit: HashMap::new(),
            inputs: Vec::new(),
            outputs: vec![crate::onnx::graph::ValueInfo {
                name: "y".to_string(),
                elem: None,
                dims: Vec::new(),
                dim_names: Vec::new(),
                raw_type: 1,
            }],
            metadata: Vec::new(),
        }
    }

    fn ops(g: &OnnxGraph) -> Vec<&str> {
        g.nodes.iter().map(|n| n.op.as_str()).collect()
    }

    /// Two quantized Conv1d in a row: the Unsqueeze goes before the first DequantizeLinear,
    /// the 4-D tensor flows from the first QuantizeLinear to the second convolution's
    /// DequantizeLinear (the Squeeze between them nobody reads is dropped), weights and
    /// window attributes gain a unit height, a per-channel axis on L moves to the last axis.
    #[test]
    fn quantized_conv1d_chains_stay_four_d_between_lifted_operators() {
        let ints = |v: &[i64]| Attr::Ints(v.to_vec());
        let g = graph(
            vec![
                node("QuantizeLinear", &["x", "s", "z"], "xq", &[]),
                node("DequantizeLinear", &["xq", "s", "z"], "xd", &[]),
                node(
                    "DequantizeLinear",
                    &["w1", "ws"],
                    "w1d",
                    &[("axis", Attr::Int(0))],
                ),
                node(
                    "Conv",
                    &["xd", "w1d"],
                    "c1",
                    &[
                        ("kernel_shape", ints(&[3])),
                        ("strides", ints(&[2])),
                        ("dilations", ints(&[1])),
                        ("pads", ints(&[1, 0])),
                    ],
                ),
                node("QuantizeLinear", &["c1", "s", "z"], "c1q", &[]),
                node(
                    "DequantizeLinear",
                    &["c1q", "s", "z"],
                    "c1d",
                    &[("axis", Attr::Int(2))],
                ),
                node("Conv", &["c1d", "w2"], "y", &[("kernel_shape", ints(&[1]))]),
            ],
            &[
                ("w1", vec![4, 3, 3]),
                ("w2", vec![5, 4, 1]),
                ("ws", vec![4]),
                ("s", vec![]),
                ("z", vec![]),
            ],
        );
        let l = lift_1d_windows(&g).expect("the graph has 1-D convolutions");
        assert_eq!(
            ops(&l),
            [
                "QuantizeLinear",
                "DequantizeLinear",
                "DequantizeLinear",
                "Unsqueeze",
                "DequantizeLinear",
                "DequantizeLinear",
                "Conv",
                "QuantizeLinear",
                "DequantizeLinear",
                "Conv",
                "Squeeze",
            ],
            "{:#?}",
            l.nodes
        );
        let conv = &l.nodes[6];
        assert_eq!(conv.attrs["kernel_shape"], ints(&[1, 3]));
        assert_eq!(conv.attrs["strides"], ints(&[1, 2]));
        assert_eq!(conv.attrs["pads"], ints(&[0, 1, 0, 0]));
        assert_eq!(l.consts["w1::lift_4d"].shape, [4, 3, 1, 3]);
        assert_eq!(l.consts["w2::lift_4d"].shape, [5, 4, 1, 1]);
        assert_eq!(
            l.nodes[3].inputs,
            ["xq"],
            "unsqueezed before the dequantization"
        );
        assert_eq!(
            l.nodes[8].inputs[0], l.nodes[7].outputs[0],
            "no Squeeze between"
        );
        assert_eq!(l.nodes[8].attrs["axis"], Attr::Int(3));
        assert_eq!(l.nodes[10].outputs, ["y"]);
        // Nothing 1-D: no rewrite.
        let flat = graph(vec![node("Relu", &["x"], "y", &[])], &[]);
        assert!(lift_1d_windows(&flat).is_none());
    }
}
