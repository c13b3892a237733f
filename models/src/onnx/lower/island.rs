//! Float islands: a group of elementwise float operators whose only non-constant input is
//! one quantized tensor and whose result one `QuantizeLinear` quantizes, lowered to one
//! 256-entry table.
//!
//! PyTorch writes several activations as chains of float operators (below opset 18 Mish is
//! `x · tanh(softplus(x))`; GELU is `x · 0.5 · (1 + erf(x / √2))`; SiLU may come as
//! `x / (1 + exp(−x))`), and `quantize_static` leaves the operators it does not know
//! (`Softplus`, `Erf`, `Exp`, `Div`, ...) in float. Between a `DequantizeLinear` and the next
//! `QuantizeLinear` such a group computes a function of one quantized byte, so it is exactly
//! a table: `table[x] = Q(f(DQ(x)))`.
//!
//! # Contract
//!
//! - **When**: an island operator ([`is_island_op`]) whose non-constant inputs are all the same
//!   dequantized tensor starts an island when the operators of the native set cannot
//!   lower it (its float result does not reach a `QuantizeLinear` through `Relu`/`Clip`
//!   only, or it is an operator only islands run: `Div`, `Sub`, `Exp`, `Erf`, ...). The
//!   island grows over the later island operators (graph order) that read at least one
//!   island value and otherwise only that tensor or constants. It is lowered when exactly
//!   one of its values is read outside it, by exactly one per-tensor `QuantizeLinear`,
//!   and none is a graph output; otherwise the node lowers as before (and its error names
//!   it).
//! - **Constants**: scalars only (one element, rank at most the tensor's; plain or
//!   `DequantizeLinear` of an integer constant). A per-channel constant would need one table
//!   per channel: not an island.
//! - **Semantics**: each operator in `f32` as ONNX defines it, in graph order, with
//!   [`redline_runtime::det_math`]'s `exp`, `ln`, `tanh`, `powf`, `erf` (the same bits on
//!   every platform); then `QuantizeLinear` (round half to even, saturate; NaN to the lowest
//!   byte, as ONNX Runtime's `max(v, lo)` clamp does). ONNX Runtime runs
//!   the same operators with its own vectorised `exp`/`tanh`/`erf`, which may differ in the
//!   last bits, so an output byte may differ from it by one step in rare elements (the op
//!   models `mish_decomposed`, `gelu_erf`, `silu_exp_div`, `hardswish_decomposed` count them).
//!
//! # Cost
//!
//! Load: 256 evaluations of the island. Run: one table lookup per element ([`Step::Lut`],
//! vectorised where the CPU has byte permutes), whatever the island's length.
//!
//! # Never
//!
//! Changes how a node the native set already lowers is lowered; starts an island from a
//! `Relu`/`Clip` (those lower on the quantized grid on their own).

use super::*;
use redline_runtime::det_math as dm;

/// Island operators the native set also lowers on their own (when their result is
/// quantized): an island starts at one of these only when that lowering cannot apply.
const LOWERED_ALONE: &[&str] = &[
    "Identity",
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "Softplus",
    "Mish",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Add",
    "Mul",
];

/// Island operators outside the quantized set (`Div` and `Sub` of two quantized tensors
/// lower as binaries when they are not an island).
const ISLAND_ONLY: &[&str] = &[
    "Softsign",
    "Elu",
    "Exp",
    "Log",
    "Sin",
    "Cos",
    "Erf",
    "Gelu",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Sub",
    "Div",
    "Pow",
    "Max",
    "Min",
];

/// True for the elementwise float operators an island may hold (one or two inputs, or
/// `Clip`'s bounds): [`LOWERED_ALONE`] and [`ISLAND_ONLY`].
pub(super) fn is_island_op(op: &str) -> bool {
    LOWERED_ALONE.contains(&op) || ISLAND_ONLY.contains(&op)
}

/// What an island reads: the tensor, or a scalar constant.
#[derive(Clone, Copy)]
enum Arg {
    /// The dequantized source tensor.
    Source,
    /// The value of island node `i` (index into the island's node list).
    Node(usize),
    /// A scalar constant.
    Scalar(f32),
    /// An absent optional input (`Clip`'s bounds).
    Absent,
}

/// One island node, ready to evaluate.
struct IslandNode {
    op: String,
    args: Vec<Arg>,
    /// `alpha`, `beta` attributes (`LeakyRelu`, `HardSigmoid`, `Elu`; `Clip`'s attribute
    /// bounds for opset < 11 in `alpha`/`beta`).
    alpha: f32,
    beta: f32,
}

impl Lowerer<'_> {
    /// Lowers node `i` as the first node of a float island when it is one (see the module
    /// contract). `Ok(false)`: not an island, nothing changed.
    pub(super) fn float_island(&mut self, i: usize) -> Result<bool, EngineError> {
        let n = &self.g.nodes[i];
        let op = n.op.as_str();
        if !is_island_op(op) || matches!(op, "Relu" | "Clip" | "Identity") {
            return Ok(false);
        }
        if LOWERED_ALONE.contains(&op) && self.find_q(n).is_ok() {
            return Ok(false);
        }
        // The source: the one dequantized tensor among the first node's inputs.
        let mut source: Option<T> = None;
        for name in n.inputs.iter().filter(|s| !s.is_empty()) {
            match self.vals.get(name) {
                Some(Val::Dq(t)) => match &source {
                    Some(s) if !same_tensor(s, t) => return Ok(false),
                    _ => source = Some(t.clone()),
                },
                Some(v) if scalar(v).is_some() => {}
                _ => return Ok(false),
            }
        }
        let Some(src) = source else {
            return Ok(false);
        };
        let reads_ok = |name: &String| name.is_empty() || self.is_source_or_scalar(name, &src);
        if !n.inputs.iter().all(reads_ok) {
            return Ok(false);
        }
        // Grow over later nodes in graph order (topological): a node joins when it reads an
        // island value and otherwise the source or scalars.
        let mut members = vec![i];
        let mut produced: HashMap<&str, usize> = HashMap::new();
        for o in &n.outputs {
            produced.insert(o.as_str(), 0);
        }
        const MAX_NODES: usize = 64;
        for j in i + 1..self.g.nodes.len() {
            if members.len() >= MAX_NODES {
                break;
            }
            let m = &self.g.nodes[j];
            if self.done.contains(&j) || !is_island_op(&m.op) {
                continue;
            }
            let mut reads_island = false;
            let mut ok = true;
            for name in m.inputs.iter().filter(|s| !s.is_empty()) {
                if produced.contains_key(name.as_str()) {
                    reads_island = true;
                } else if !self.is_source_or_scalar(name, &src) {
                    ok = false;
                }
            }
            if ok && reads_island {
                let k = members.len();
                members.push(j);
                for o in &m.outputs {
                    produced.insert(o.as_str(), k);
                }
            }
        }
        // Exactly one value leaves the island, into one per-tensor QuantizeLinear.
        let mut exit: Option<(usize, usize)> = None; // (island node, quantize node)
        for (k, &j) in members.iter().enumerate() {
            for o in &self.g.nodes[j].outputs {
                if self.outputs.contains(o) {
                    return Ok(false);
                }
                for &c in self.consumers.get(o).map(Vec::as_slice).unwrap_or(&[]) {
                    if members.contains(&c) {
                        continue;
                    }
                    if exit.is_some() || self.g.nodes[c].op != "QuantizeLinear" {
                        return Ok(false);
                    }
                    exit = Some((k, c));
                }
            }
        }
        let Some((last, qnode)) = exit else {
            return Ok(false);
        };
        let qn = &self.g.nodes[qnode];
        let y_q = self.qparams(qn, 1, 2)?;
        if self.q_axis_per_channel(qn)? {
            return Ok(false);
        }
        // The nodes, ready to evaluate.
        let mut island = Vec::with_capacity(members.len());
        for &j in &members {
            let m = &self.g.nodes[j];
            let mut args = Vec::with_capacity(m.inputs.len());
            for name in &m.inputs {
                let a = if name.is_empty() {
                    Arg::Absent
                } else if let Some(&k) = produced.get(name.as_str()) {
                    Arg::Node(k)
                } else if let Some(v) = self.vals.get(name).and_then(scalar) {
                    Arg::Scalar(v)
                } else {
                    Arg::Source
                };
                args.push(a);
            }
            let (alpha, beta) = match m.op.as_str() {
                "HardSigmoid" => (m.float("alpha", 0.2)?, m.float("beta", 0.5)?),
                "LeakyRelu" => (m.float("alpha", 0.01)?, 0.0),
                "Elu" => (m.float("alpha", 1.0)?, 0.0),
                // `alpha` 1 for the tanh form.
                "Gelu" => (f32::from(u8::from(super::float::gelu_is_tanh(m)?)), 0.0),
                "Clip" => (
                    m.float("min", f32::NEG_INFINITY)?,
                    m.float("max", f32::INFINITY)?,
                ),
                _ => (0.0, 0.0),
            };
            if !arity_ok(&m.op, &args) {
                return Err(m.unsupported(format!(
                    "{} inputs: not a valid {} node",
                    args.len(),
                    m.op
                )));
            }
            island.push(IslandNode {
                op: m.op.clone(),
                args,
                alpha,
                beta,
            });
        }
        let mut table = [0i8; 256];
        let mut vals = vec![0f32; island.len()];
        for (b, e) in table.iter_mut().enumerate() {
            let x = crate::quant::dequantize((b as u8) as i8, src.q);
            for k in 0..island.len() {
                vals[k] = eval(&island[k], x, &vals[..k]);
            }
            // NaN (0/0, the log or square root of a negative value) quantizes to the lowest
            // byte, as ONNX Runtime's QuantizeLinear does (its `max(v, lo)` clamp comes first).
            let v = vals[last];
            *e = if v.is_nan() {
                -128
            } else {
                crate::quant::quantize(v, y_q)
            };
        }
        let len = src.shape.iter().product::<usize>();
        self.touch(src.buf);
        let dst = self.new_buf(len);
        self.steps.push(Step::Lut {
            table: Box::new(table),
            n: len,
            src: src.buf,
            dst,
        });
        self.done.extend(members.iter().copied());
        self.done.insert(qnode);
        let out_name = qn.outputs[0].clone();
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                q: y_q,
                ..src
            }),
        );
        Ok(true)
    }

    /// True when `name` is the island's source tensor (any dequantized view of it) or a
    /// scalar constant.
    fn is_source_or_scalar(&self, name: &str, src: &T) -> bool {
        match self.vals.get(name) {
            Some(Val::Dq(t)) => same_tensor(t, src),
            Some(v) => scalar(v).is_some_and(|_| const_rank(v) <= src.shape.len()),
            None => false,
        }
    }
}

fn same_tensor(a: &T, b: &T) -> bool {
    a.buf == b.buf && a.q == b.q && a.shape == b.shape && a.layout == b.layout
}

/// The value of a one-element constant (plain, or dequantized from an integer constant).
fn scalar(v: &Val) -> Option<f32> {
    match super::float::constant_f32(v)?.data {
        ConstData::F32(x) if x.len() == 1 => x.first().copied(),
        _ => None,
    }
}

fn const_rank(v: &Val) -> usize {
    match v {
        Val::C(c) | Val::DqC { data: c, .. } => c.shape.len(),
        _ => usize::MAX,
    }
}

/// Input counts ONNX allows for each island operator (`Clip`: 1 to 3, binaries: 2, the
/// rest: 1).
fn arity_ok(op: &str, args: &[Arg]) -> bool {
    match op {
        "Clip" => (1..=3).contains(&args.len()),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" => args.len() == 2,
        _ => args.len() == 1,
    }
}

/// One island node's value for the source value `x`, earlier nodes' values in `prev`.
fn eval(node: &IslandNode, x: f32, prev: &[f32]) -> f32 {
    let arg = |i: usize| match node.args.get(i) {
        Some(Arg::Source) => Some(x),
        Some(Arg::Node(k)) => prev.get(*k).copied(),
        Some(Arg::Scalar(v)) => Some(*v),
        Some(Arg::Absent) | None => None,
    };
    let a = arg(0).unwrap_or(f32::NAN);
    let b = arg(1).unwrap_or(f32::NAN);
    // The table operators: the same formula as their own tables.
    if let Some(v) = super::elementwise::activation(&node.op, node.alpha, node.beta, a) {
        return v;
    }
    match node.op.as_str() {
        "Identity" => a,
        "Relu" => a.max(0.0),
        "Clip" => {
            let lo = arg(1).unwrap_or(node.alpha);
            let hi = arg(2).unwrap_or(node.beta);
            a.max(lo).min(hi)
        }
        "Softsign" => a / (1.0 + a.abs()),
        "Elu" => {
            if a >= 0.0 {
                a
            } else {
                node.alpha * (dm::exp(a) - 1.0)
            }
        }
        "Exp" => dm::exp(a),
        "Log" => dm::ln(a),
        "Sin" => dm::sin(a),
        "Cos" => dm::cos(a),
        "Erf" => dm::erf(a),
        "Gelu" => crate::onnx::kernels::float::gelu(a, node.alpha == 1.0),
        "Neg" => -a,
        "Abs" => a.abs(),
        "Sqrt" => a.sqrt(),
        "Reciprocal" => 1.0 / a,
        "Add" => a + b,
        "Sub" => a - b,
        "Mul" => a * b,
        "Div" => a / b,
        "Pow" => dm::powf(a, b),
        "Max" => a.max(b),
        "Min" => a.min(b),
        _ => f32::NAN,
    }
}
