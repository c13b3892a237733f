//! Lowering: from the ONNX graph (QDQ or QOperator form) to a [`Program`] of quantized steps.
//!
//! Every value of the graph is tracked as one of [`Val`]: a float buffer (a graph input
//! before its `QuantizeLinear`, or a tensor of the float route after a convolution whose
//! output is not quantized), a quantized `i8` buffer, the dequantized view of one
//! (`DequantizeLinear` output: no buffer, no work), or a constant. Float operators whose
//! inputs are dequantized views and whose output reaches a `QuantizeLinear` (through
//! optional `Relu`/`Clip`) are fused into one quantized step with that quantization; the
//! QOperator forms (`QLinearConv`, `com.microsoft.QLinearAdd`, ...) lower to the same steps.
//! Operators that are exact on quantized values (`MaxPool`, nearest `Resize`, the shape
//! operators, `Concat` of equally quantized inputs) run directly on the `i8` data.
//!
//! Layout: 4-D activations between window operators are kept NHWC in memory
//! ([`Layout::Nhwc`]; their logical ONNX shape stays NCHW); a `Transpose` between NHWC and
//! NCHW is free when it only relabels, and a real copy is inserted where an operator needs
//! the other order.
//!
//! Files: this one holds the value tracking, the fusion search (`find_q`), the layout
//! conversions and the dispatch by operator; `quant` (Quantize/DequantizeLinear), `shape`
//! (the shape operators), `conv` (convolutions and matrix products), `elementwise` (Add,
//! Mul, table operators, Concat), `island` (chains of elementwise float operators on one
//! quantized tensor, as one table), `float` (a convolution's float output going on
//! unquantized: TensorRT-style placement) and `window` (pooling, Resize) lower one family
//! each.

use super::dense_routes::{ColumnFold, Phases, Unfold};
use super::graph::{Attr, Const, ConstData, Node, OnnxGraph};
use super::isa::Isa;
use super::kernels::{
    add_fixed, row_major_strides, strided_offset, AddParams, AvgFloat, AvgParams, Binary,
    BinaryKind, GeneralConv, Interp, MulParams, Tap, Window,
};
use super::program::{
    global_pool_chunks, Buffer, ConvImpl, DeconvGeom, FloatPool, OutKind, PhaseDir, PoolSplit,
    Program, Step,
};
use crate::conv::{Conv2d, ConvShape, KernelPath};
use crate::engine::{ElemType, EngineError, TensorSpec};
use crate::quant::QParams;
use std::collections::{HashMap, HashSet};

mod conv;
mod deconv;
use deconv::DeconvPlan;
pub(crate) use deconv::DECONV_PHASES_MAX;
mod elementwise;
#[cfg(test)]
pub(crate) use elementwise::activation;
mod float;
mod fold;
mod index;
mod island;
mod matmul;
mod pad;
mod quant;
mod shape;
mod window;

/// What follows a float operator up to its `QuantizeLinear`: the output quantization, the
/// clamp range (`i8` domain) of the `Relu`/`Clip` nodes on the way, those nodes and the
/// `QuantizeLinear` (consumed by the fusion), and the name of the quantized value.
type QuantTail = (QParams, (i8, i8), Vec<usize>, String);

/// Weights of a convolution or matrix product: `i8` values, one scale per output channel,
/// and the stored shape.
type WeightParts = (Vec<i8>, Vec<f32>, Vec<usize>);

/// Memory order of a rank-4 activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Row-major over the logical shape.
    RowMajor,
    /// Logical `[N, C, H, W]` stored as `[N, H, W, C]`.
    Nhwc,
}

/// A tensor held in a buffer.
#[derive(Clone, Debug)]
pub(crate) struct T {
    pub buf: usize,
    pub shape: Vec<usize>,
    pub layout: Layout,
    /// Quantization (for `i8` buffers; `QParams::new(1.0, 0)` for float buffers).
    pub q: QParams,
}

/// What a value of the graph is.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// `f32` buffer (row-major).
    F32(T),
    /// `i8` buffer with its quantization.
    Q(T),
    /// Dequantized view of an `i8` buffer: `(x - q.zero_point) * q.scale`.
    Dq(T),
    /// `i64` buffer computed at run time, row-major: `TopK`'s indices and the integer
    /// arithmetic, comparisons and logic on them (`index`); `boolean` when it holds the
    /// 0/1 result of a comparison or logical operator.
    I { t: T, boolean: bool },
    /// Constant.
    C(Const),
    /// `DequantizeLinear` of an integer constant: values, scales and zero points (one per
    /// slice along `axis`, or one for all).
    DqC {
        data: Const,
        scales: Vec<f32>,
        zps: Vec<i32>,
        axis: usize,
    },
}

/// Lowering result, with the numbers `redline model info` prints.
#[derive(Debug)]
pub(crate) struct Lowered {
    pub program: Program,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub macs: u64,
    pub weight_bytes: usize,
    /// Convolutions and matrix products whose dequantized `int32` bias has a scale other
    /// than `x_scale · w_scale`, requantized at load (`Lowerer::bias`): ONNX Runtime may
    /// run those in float.
    pub rescaled_biases: usize,
}

/// Lowers a parsed graph; `unfold_convs`: ungrouped convolutions the dense kernels cannot
/// take directly run as an unfold and a pointwise dense convolution
/// ([`super::dense_routes::Unfold`]; the native engine) instead of on the general kernel
/// (the CUDA engine, whose convolution kernel takes any window).
pub(crate) fn lower(g: &OnnxGraph, unfold_convs: bool) -> Result<Lowered, EngineError> {
    let lifted = super::lift::lift_1d_windows(g);
    let g = lifted.as_ref().unwrap_or(g);
    let merged = super::graph::merge_duplicate_quantizers(g);
    let g = merged.as_ref().unwrap_or(g);
    let path = KernelPath::from_env().map_err(|e| EngineError::Invalid {
        reason: e.to_string(),
    })?;
    let mut l = Lowerer {
        g,
        vnni: path == KernelPath::Avx512Vnni,
        unfold_convs,
        vals: HashMap::new(),
        steps: Vec::new(),
        buffers: Vec::new(),
        done: HashSet::new(),
        consumers: HashMap::new(),
        macs: 0,
        weight_bytes: 0,
        rescaled_biases: 0,
        outputs: HashSet::new(),
        oversized: None,
    };
    for (i, n) in g.nodes.iter().enumerate() {
        for name in n.inputs.iter().filter(|s| !s.is_empty()) {
            l.consumers.entry(name.clone()).or_default().push(i);
        }
    }
    for o in &g.outputs {
        l.outputs.insert(o.name.clone());
    }
    check_types(g)?;
    for (name, c) in &g.consts {
        l.vals.insert(name.clone(), Val::C(c.clone()));
    }
    let mut inputs = Vec::new();
    for (index, vi) in g.inputs.iter().enumerate() {
        let Some(elem) = vi.elem else {
            return Err(EngineError::Invalid {
                reason: format!(
                    "graph input {} has type {} ({}): the native engine takes float32, int8 \
                     or uint8 inputs",
                    vi.name,
                    vi.raw_type,
                    super::graph::type_name(vi.raw_type)
                ),
            });
        };
        let mut shape = Vec::new();
        for (d, dim) in vi.dims.iter().enumerate() {
            match (dim, vi.dim_names.get(d).and_then(Option::as_ref)) {
                (Some(v), _) => shape.push(*v),
                // A named symbolic dimension (`dim_param`, a batch `N` as torch.onnx.export
                // writes for `dynamic_axes`) is 1, as the onnxruntime backend fixes it.
                (None, Some(_)) => shape.push(1),
                (None, None) => {
                    return Err(EngineError::Invalid {
                        reason: format!(
                            "graph input {} has an unnamed dynamic dimension {d}: the native \
                             engine compiles fixed shapes; export the model with static input \
                             shapes (e.g. torch.onnx.export without dynamic_axes) or fix it \
                             with onnxruntime.tools.make_dynamic_shape_fixed",
                            vi.name
                        ),
                    })
                }
            }
        }
        let Some(elements) = elements_within(&shape).filter(|&e| e > 0) else {
            return Err(EngineError::Invalid {
                reason: format!(
                    "graph input {} of shape {shape:?} is empty or has more than 2^28 \
                     elements, more than the native engine plans for one tensor: check its \
                     dimensions",
                    vi.name
                ),
            });
        };
        let bytes = elements * elem.size();
        let buf = l.new_buf(bytes);
        l.steps.push(Step::Input {
            index,
            dst: buf,
            flip: elem == ElemType::U8,
        });
        let t = T {
            buf,
            shape: shape.clone(),
            layout: Layout::RowMajor,
            q: QParams::new(1.0, 0),
        };
        let v = match elem {
            ElemType::F32 => Val::F32(t),
            // A raw int8/uint8 input: quantized with unknown parameters until a
            // DequantizeLinear gives them (the i8 domain is the same either way).
            ElemType::I8 => Val::Q(t),
            ElemType::U8 => Val::Q(T {
                q: QParams::new(1.0, -128),
                ..t
            }),
            _ => {
                return Err(EngineError::Invalid {
                    reason: format!(
                        "graph input {} is {elem}: use float32, int8 or uint8",
                        vi.name
                    ),
                })
            }
        };
        l.vals.insert(vi.name.clone(), v);
        inputs.push(TensorSpec {
            name: vi.name.clone(),
            elem,
            shape,
        });
    }
    for i in 0..g.nodes.len() {
        if l.done.contains(&i) {
            continue;
        }
        l.node(i)?;
        if let Some(shape) = l.oversized.take() {
            return Err(too_large(&g.nodes[i], &shape));
        }
    }
    let mut outputs = Vec::new();
    for (index, vo) in g.outputs.iter().enumerate() {
        let v = l.get(&vo.name, &format!("graph output {}", vo.name))?;
        // `elem_bytes`: bytes of one element of the buffer the output reads.
        let (t, kind, elem, elem_bytes) = match (v, vo.elem) {
            (Val::Dq(t), Some(ElemType::F32) | None) => {
                let q = t.q;
                (
                    t,
                    OutKind::Dequantize {
                        scale: q.scale,
                        zp: i32::from(q.zero_point),
                    },
                    ElemType::F32,
                    1,
                )
            }
            // A float tensor (a convolution's or matrix product's float output, or what
            // the float route made of it): its bytes.
            (Val::F32(t), Some(ElemType::F32) | None) => (t, OutKind::Copy, ElemType::F32, 4),
            // An integer tensor computed at run time (`index`): its `int64` values.
            (Val::I { t, boolean: false }, Some(ElemType::I64) | None) => {
                (t, OutKind::Copy, ElemType::I64, 8)
            }
            (Val::Q(t), Some(ElemType::U8)) => (t, OutKind::FlipU8, ElemType::U8, 1),
            (Val::Q(t), Some(ElemType::I8) | None) => (t, OutKind::Copy, ElemType::I8, 1),
            (v, e) => {
                return Err(EngineError::Invalid {
                    reason: format!(
                        "graph output {} is {} ({:?}): the native engine produces outputs that \
                         are quantized (int8/uint8), dequantized from quantized tensors, \
                         computed in float (float32) or integer indices (int64); run this \
                         model with --engine onnxruntime",
                        vo.name,
                        e.map(|e| e.name()).unwrap_or("untyped"),
                        kind_name(&v)
                    ),
                })
            }
        };
        let t = l.row_major(t, elem_bytes);
        l.touch(t.buf);
        l.steps.push(Step::Output {
            index,
            src: t.buf,
            kind,
        });
        outputs.push(TensorSpec {
            name: vo.name.clone(),
            elem,
            shape: t.shape.clone(),
        });
    }
    let mut buffers = std::mem::take(&mut l.buffers);
    let isa = Isa::for_path(path);
    let arena_bytes = super::program::plan(&mut buffers);
    Ok(Lowered {
        program: Program {
            steps: std::mem::take(&mut l.steps),
            buffers,
            arena_bytes,
            isa,
        },
        inputs,
        outputs,
        macs: l.macs,
        weight_bytes: l.weight_bytes,
        rescaled_biases: l.rescaled_biases,
    })
}

fn kind_name(v: &Val) -> &'static str {
    match v {
        Val::F32(_) => "a float tensor computed in float",
        Val::Q(_) => "a quantized tensor",
        Val::Dq(_) => "a dequantized tensor",
        Val::I { boolean: false, .. } => "an integer tensor computed at run time",
        Val::I { boolean: true, .. } => "a bool tensor computed at run time",
        Val::C(_) | Val::DqC { .. } => "a constant",
    }
}

struct Lowerer<'g> {
    g: &'g OnnxGraph,
    /// The AVX-512 VNNI kernels run (chosen once, `KernelPath::from_env`): a product of two
    /// computed tensors packs its second operand for them.
    vnni: bool,
    /// Ungrouped convolutions off the dense routes run unfolded ([`lower`]).
    unfold_convs: bool,
    vals: HashMap<String, Val>,
    steps: Vec<Step>,
    buffers: Vec<Buffer>,
    done: HashSet<usize>,
    consumers: HashMap<String, Vec<usize>>,
    macs: u64,
    weight_bytes: usize,
    /// Biases requantized from another scale ([`Lowered::rescaled_biases`]).
    rescaled_biases: usize,
    outputs: HashSet<String>,
    /// The shape of a computed tensor over [`MAX_ELEMENTS`], or empty, that the node being
    /// lowered made (`set`), refused after it.
    oversized: Option<Vec<usize>>,
}

/// The most elements one computed tensor may have: 2^28, a GiB as `f32` (a 64-channel map
/// of 2048 × 2048 pixels is 2^28). A larger one comes from a broken shape or attribute (a
/// pad, a scale, a graph input's dimension), and is refused by name before anything is
/// sized by it, instead of an allocation the machine cannot make.
pub(super) const MAX_ELEMENTS: usize = 1 << 28;

/// The element count of `shape` when it is at most [`MAX_ELEMENTS`].
pub(super) fn elements_within(shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
}

/// The error for a tensor of `shape` over [`MAX_ELEMENTS`] (or empty), made by node `n`.
pub(super) fn too_large(n: &Node, shape: &[usize]) -> EngineError {
    if shape.contains(&0) {
        return n.unsupported(format!(
            "its output of shape {shape:?} is empty: the native engine runs tensors with at \
             least one element; check the model's shapes and the node's attributes"
        ));
    }
    n.unsupported(format!(
        "its output of shape {shape:?} has more than 2^28 elements (1 GiB as float32), more \
         than the native engine plans for one tensor: check the model's shapes and the node's \
         attributes (pads, scales, strides)"
    ))
}

fn invalid(reason: String) -> EngineError {
    EngineError::Invalid { reason }
}

/// Refuses, naming the node, what the native engine cannot compute as the file says: a
/// node reading a constant of a type the importer does not read (float16, 16-bit
/// quantization, ...), and a quantization *to* 4 bits of anything but a constant (the
/// engine keeps activations in 8 bits; 4-bit weights are read widened, exactly).
fn check_types(g: &OnnxGraph) -> Result<(), EngineError> {
    for n in &g.nodes {
        let quantized = super::graph::input_quant_inputs(&n.op).is_some()
            || super::graph::output_quant_inputs(&n.op).is_some();
        let shifted = n
            .inputs
            .iter()
            .find(|i| g.four_bit.get(i.as_str()) == Some(&super::graph::dtype::UINT4));
        if let (Some(name), false) = (shifted, quantized) {
            return Err(n.unsupported(format!(
                "it reads {name}, a uint4 tensor, other than to (de)quantize it: the native \
                 engine reads 4-bit constants as quantized weights and zero points only; run \
                 the model with --engine onnxruntime"
            )));
        }
        // `output_dtype` 0 (unset: uint8), uint8 or int8.
        let known = [0, super::graph::dtype::UINT8, super::graph::dtype::INT8].map(i64::from);
        if n.op == "QuantizeLinear"
            && n.input(2).is_none()
            && !known.contains(&n.int("output_dtype", 0)?)
        {
            return Err(n.unsupported(
                "an output_dtype other than uint8 or int8 without a zero point: give the zero point \
                 (its type says the output's), as quantization tools write it",
            ));
        }
        let unreadable = n
            .inputs
            .iter()
            .find_map(|i| g.unreadable.get_key_value(i.as_str()));
        if let Some((name, u)) = unreadable {
            return Err(n.unsupported(format!(
                "it reads {name}, a tensor of type {}: the native engine reads float32, int8, uint8, \
                 int4, uint4, int32, int64 and bool constants (16-bit quantization and float16 \
                 are not run natively); run the model with --engine onnxruntime",
                super::graph::type_name(u.code)
            )));
        }
        let Some((_, zp)) = super::graph::output_quant_inputs(&n.op) else {
            continue;
        };
        if n.input(zp).is_some_and(|z| g.four_bit.contains_key(z)) {
            let of_constant =
                n.op == "QuantizeLinear" && n.input(0).is_some_and(|x| g.constant(x).is_some());
            if !of_constant {
                return Err(n.unsupported(
                    "it quantizes a computed tensor to 4 bits: the native engine keeps \
                     activations in 8 bits (4-bit weights, a DequantizeLinear of an int4 or \
                     uint4 initializer, it reads); quantize activations to int8/uint8 or run \
                     the model with --engine onnxruntime",
                ));
            }
        }
    }
    Ok(())
}

/// The zero point of a quantization whose node gives none, in the `i8` domain: uint8's 0
/// (-128), or int8's 0 for a `QuantizeLinear` with `output_dtype` int8 (opset 21).
fn absent_zero_point(n: &Node) -> i32 {
    let int8 = i64::from(super::graph::dtype::INT8);
    let to_int8 = matches!(n.attrs.get("output_dtype"), Some(Attr::Int(v)) if *v == int8);
    if n.op == "QuantizeLinear" && to_int8 {
        0
    } else {
        -128
    }
}

/// Converts a stored zero point to the `i8` domain.
fn zp_i8(c: &ConstData, i: usize) -> Option<i32> {
    match c {
        ConstData::I8(v) => v.get(i).map(|&x| i32::from(x)),
        ConstData::U8(v) => v.get(i).map(|&x| i32::from(x) - 128),
        ConstData::I32(v) => v.get(i).copied(),
        _ => None,
    }
}

impl<'g> Lowerer<'g> {
    fn new_buf(&mut self, bytes: usize) -> usize {
        let step = self.steps.len();
        self.buffers.push(Buffer {
            bytes,
            offset: 0,
            first: step,
            last: step,
        });
        self.buffers.len() - 1
    }

    /// Marks a buffer as read by the step about to be pushed.
    fn touch(&mut self, buf: usize) {
        let step = self.steps.len();
        let b = &mut self.buffers[buf];
        b.last = b.last.max(step);
    }

    /// The value `name`: what an earlier node, initializer or input defined, or a
    /// `Constant` node's value even before that node's turn (a fusion that looks ahead
    /// reads the parameters of a later node, which PyTorch's exporter writes as `Constant`
    /// nodes just before it).
    fn get(&self, name: &str, what: &str) -> Result<Val, EngineError> {
        if let Some(v) = self.vals.get(name) {
            return Ok(v.clone());
        }
        self.g
            .constant(name)
            .map(|c| Val::C(c.clone()))
            .ok_or_else(|| {
                invalid(format!(
                    "{what} reads {name:?}, which no earlier node, initializer or input defines \
                 (the graph must be topologically sorted)"
                ))
            })
    }

    fn input(&self, n: &Node, i: usize) -> Result<Val, EngineError> {
        match n.input(i) {
            Some(name) => self.get(name, &format!("node {}", n.name)),
            None => Err(n.unsupported(format!("input {i} is missing"))),
        }
    }

    fn konst(&self, n: &Node, i: usize) -> Result<Const, EngineError> {
        match self.input(n, i)? {
            Val::C(c) => Ok(c),
            _ => Err(n.unsupported(format!(
                "input {i} must be a constant (initializer); computed shapes and parameters \
                 are not supported: fold constants first (onnxsim or onnxruntime's offline \
                 optimizer)"
            ))),
        }
    }

    /// Scale and zero point from inputs `si`, `zi` (per tensor, `i8` domain).
    fn qparams(&self, n: &Node, si: usize, zi: usize) -> Result<QParams, EngineError> {
        let s = self.konst(n, si)?;
        let scale = match &s.data {
            ConstData::F32(v) if v.len() == 1 => v[0],
            _ => {
                return Err(n.unsupported(format!(
                    "input {si} must be one float32 scale (per-tensor quantization of activations)"
                )))
            }
        };
        let zp = if n.input(zi).is_some() {
            let z = self.konst(n, zi)?;
            if z.len() != 1 {
                return Err(n.unsupported(format!("input {zi} must be one zero point")));
            }
            zp_i8(&z.data, 0).ok_or_else(|| n.unsupported("zero point must be int8 or uint8"))?
        } else {
            absent_zero_point(n)
        };
        if !(scale.is_finite() && scale > 0.0) {
            return Err(n.unsupported(format!("scale {scale} must be finite and positive")));
        }
        Ok(QParams::new(scale, zp.clamp(-128, 127) as i8))
    }

    fn set(&mut self, name: &str, v: Val) {
        if let Val::F32(t) | Val::Q(t) | Val::Dq(t) | Val::I { t, .. } = &v {
            let bad = elements_within(&t.shape).is_none_or(|n| n == 0);
            if bad && self.oversized.is_none() {
                self.oversized = Some(t.shape.clone());
            }
        }
        self.vals.insert(name.to_string(), v);
    }

    /// The only consumer of `value`, if it has exactly one and is not a graph output.
    fn sole_consumer(&self, value: &str) -> Option<usize> {
        if self.outputs.contains(value) {
            return None;
        }
        match self.consumers.get(value).map(Vec::as_slice) {
            Some([one]) => Some(*one),
            _ => None,
        }
    }

    /// True when `n`'s result is never quantized: followed through `Relu` / `Clip` it
    /// reaches no `QuantizeLinear` but a float operator, several readers or a graph output
    /// (a detector's float tail, which quantize_static leaves in float: an oriented-box
    /// head's `rb − lt`). Such an operator runs in float on its dequantized inputs.
    fn result_stays_float(&self, n: &Node) -> bool {
        let mut value = n.outputs.first().cloned().unwrap_or_default();
        // Nodes are in topological order (checked at parse), so the chain ends; the bound
        // only makes that plain.
        for _ in 0..self.g.nodes.len() {
            match self.sole_consumer(&value).map(|c| &self.g.nodes[c]) {
                Some(m) if matches!(m.op.as_str(), "Relu" | "Clip") => {
                    value = m.outputs.first().cloned().unwrap_or_default();
                }
                Some(m) => return m.op != "QuantizeLinear",
                None => return true,
            }
        }
        true
    }

    /// Follows `value` through `Relu` / `Clip` nodes to a `QuantizeLinear`: returns the
    /// output quantization, the clamp range in the `i8` domain, the nodes used and the name
    /// of the quantized value.
    fn find_q(&self, n: &Node) -> Result<QuantTail, EngineError> {
        let mut value = n.outputs.first().cloned().unwrap_or_default();
        let mut chain = Vec::new();
        let (mut lo_real, mut hi_real) = (f32::NEG_INFINITY, f32::INFINITY);
        while let Some(c) = self.sole_consumer(&value) {
            let m = &self.g.nodes[c];
            match m.op.as_str() {
                "Relu" => lo_real = lo_real.max(0.0),
                "Clip" => {
                    let (lo, hi) = self.clip_bounds(m)?;
                    lo_real = lo_real.max(lo);
                    hi_real = hi_real.min(hi);
                }
                "QuantizeLinear" => {
                    let q = self.qparams(m, 1, 2)?;
                    if self.q_axis_per_channel(m)? {
                        return Err(m.unsupported("per-channel quantization of an activation"));
                    }
                    chain.push(c);
                    let lo = if lo_real.is_finite() {
                        quant_bound(lo_real, q)
                    } else {
                        -128
                    };
                    let hi = if hi_real.is_finite() {
                        quant_bound(hi_real, q)
                    } else {
                        127
                    };
                    return Ok((q, (lo, hi), chain, m.outputs[0].clone()));
                }
                _ => break,
            }
            chain.push(c);
            value = m.outputs.first().cloned().unwrap_or_default();
        }
        // Where the float value went instead: named, so a user sees which edge lacks its
        // quantization.
        let went = match self.consumers.get(&value).map(Vec::as_slice) {
            _ if self.outputs.contains(&value) => format!(" (it is the graph output {value:?})"),
            Some([one]) => {
                let m = &self.g.nodes[*one];
                format!(" (it goes to node {:?}, op {}, in float)", m.name, m.op)
            }
            Some(many) if many.len() > 1 => {
                format!(" (it is read by {} nodes, in float)", many.len())
            }
            _ => String::new(),
        };
        // TensorRT-oriented tools quantize the inputs of convolutions only and leave their
        // outputs in float into Add, Sigmoid, MaxPool, ...
        let trt_hint = if matches!(n.op.as_str(), "Conv" | "ConvTranspose" | "Gemm" | "MatMul")
            && !went.is_empty()
        {
            format!(
                ". Q/DQ on convolution inputs only is how TensorRT-oriented tools (NVIDIA's \
                 pytorch-quantization, ModelOpt) place it; the native engine takes a \
                 convolution's float output on only into {}, and \
                 onnxruntime.quantization.quantize_static (QDQ) quantizes every operator's \
                 output. Quantize",
                float::float_readers()
            )
        } else {
            "; quantize".to_string()
        };
        Err(n.unsupported(format!(
            "its float result does not go (through Relu/Clip only) to a QuantizeLinear{went}: \
             the native engine runs INT8 models only{trt_hint} this operator's output (QDQ) or \
             run the model with --engine onnxruntime",
        )))
    }

    fn q_axis_per_channel(&self, m: &Node) -> Result<bool, EngineError> {
        Ok(m.input(1)
            .and_then(|s| self.g.consts.get(s))
            .map(|c| c.len() > 1)
            .unwrap_or(false))
    }

    fn clip_bounds(&self, m: &Node) -> Result<(f32, f32), EngineError> {
        let mut lo = m.float("min", f32::NEG_INFINITY)?;
        let mut hi = m.float("max", f32::INFINITY)?;
        for (i, slot) in [(1, &mut lo), (2, &mut hi)] {
            if m.input(i).is_some() {
                let c = match self.input(m, i)? {
                    Val::C(c) => c.to_f32(),
                    Val::DqC {
                        data, scales, zps, ..
                    } => {
                        let v = data.to_f32();
                        vec![(v[0] - zps[0] as f32) * scales[0]]
                    }
                    _ => return Err(m.unsupported("Clip bounds must be constants")),
                };
                *slot = *c.first().ok_or_else(|| m.unsupported("empty Clip bound"))?;
            }
        }
        Ok((lo, hi))
    }

    /// An activation input as a quantized tensor: `Dq` views and `Q` tensors (with the
    /// given params for QOperator nodes).
    fn act(&self, n: &Node, i: usize) -> Result<T, EngineError> {
        match self.input(n, i)? {
            Val::Dq(t) | Val::Q(t) => Ok(t),
            v => Err(n.unsupported(format!(
                "input {i} is {}; the native engine runs INT8 models only and needs it \
                 quantized (a DequantizeLinear of an int8/uint8 tensor): quantize the model \
                 (e.g. onnxruntime.quantization.quantize_static) or run it with --engine \
                 onnxruntime",
                kind_name(&v)
            ))),
        }
    }

    /// Converts a tensor of bytes to NHWC memory order (rank 4), inserting a copy when
    /// needed.
    fn nhwc(&mut self, t: T) -> Result<T, EngineError> {
        self.nhwc_of(t, 1)
    }

    /// Converts a tensor of `elem`-byte elements to NHWC memory order (rank 4), inserting a
    /// copy when needed.
    fn nhwc_of(&mut self, t: T, elem: usize) -> Result<T, EngineError> {
        if t.shape.len() != 4 {
            return Err(invalid(format!(
                "expected a 4-D activation, got shape {:?}",
                t.shape
            )));
        }
        if t.layout == Layout::Nhwc {
            return Ok(t);
        }
        let s = &t.shape;
        if s[1] == 1 || s[2] * s[3] == 1 {
            return Ok(T {
                layout: Layout::Nhwc,
                ..t
            });
        }
        // Physical [N,C,H,W] -> [N,H,W,C].
        let out = self.permute_copy(&t, &[0, 2, 3, 1], elem);
        Ok(T {
            buf: out,
            layout: Layout::Nhwc,
            ..t
        })
    }

    /// Converts to row-major memory order, inserting a copy when needed (a byte transpose;
    /// `elem` bytes an element, 4 for a float route's `f32` tensor: its bytes an innermost
    /// axis of the copy).
    fn row_major(&mut self, t: T, elem: usize) -> T {
        let s = &t.shape;
        if t.layout == Layout::RowMajor || s.len() != 4 || s[1] == 1 || s[2] * s[3] == 1 {
            return T {
                layout: Layout::RowMajor,
                ..t
            };
        }
        // Physical [N,H,W,C] -> [N,C,H,W].
        let phys = T {
            shape: vec![s[0], s[2], s[3], s[1]],
            ..t.clone()
        };
        let out = self.permute_copy(&phys, &[0, 3, 1, 2], elem);
        T {
            buf: out,
            layout: Layout::RowMajor,
            ..t
        }
    }

    /// Copies the row-major tensor `t` (physical shape `t.shape`, `elem` bytes an element)
    /// permuted by `perm`: one byte transpose, an element's bytes its innermost axis when
    /// `elem > 1`. A permutation that moves only axes of size 1 (a transformer's
    /// `[T, 1, C]` to `[1, T, C]`) keeps the bytes in their order: `t`'s own buffer, no step.
    fn permute_copy(&mut self, t: &T, perm: &[usize], elem: usize) -> usize {
        let moved = perm.iter().filter(|&&p| t.shape[p] != 1);
        if moved.clone().zip(moved.skip(1)).all(|(a, b)| a < b) {
            return t.buf;
        }
        let mut in_shape = t.shape.clone();
        let mut perm = perm.to_vec();
        if elem > 1 {
            perm.push(in_shape.len());
            in_shape.push(elem);
        }
        let in_strides = row_major_strides(&in_shape);
        let out_shape: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
        let strides = perm.iter().map(|&p| in_strides[p]).collect();
        self.touch(t.buf);
        let dst = self.new_buf(out_shape.iter().product());
        self.steps
            .push(Step::strided_copy(out_shape, strides, 0, t.buf, dst));
        dst
    }

    fn node(&mut self, i: usize) -> Result<(), EngineError> {
        let n = &self.g.nodes[i];
        let op = n.op.as_str();
        let domain_ok = n.domain.is_empty() || n.domain == "ai.onnx" || n.domain == "com.microsoft";
        if !domain_ok {
            return Err(n.unsupported(format!(
                "operators of domain {:?} are not supported; run the model with --engine onnxruntime",
                n.domain
            )));
        }
        if n.outputs.iter().all(|o| self.g.unreadable.contains_key(o)) {
            // A `Constant` of a type not read: every reader was refused (`check_types`).
            return Ok(());
        }
        if self.index_node(n)? || self.float_island(i)? || self.fold_constant(n)? {
            return Ok(());
        }
        match op {
            "Constant" => {
                let c = match n.attrs.get("value") {
                    Some(Attr::Tensor(c)) => c.clone(),
                    _ => match (
                        n.attrs.get("value_float"),
                        n.attrs.get("value_int"),
                        n.attrs.get("value_ints"),
                    ) {
                        (Some(Attr::Float(f)), _, _) => Const {
                            shape: vec![],
                            data: ConstData::F32(vec![*f]),
                        },
                        (_, Some(Attr::Int(v)), _) => Const {
                            shape: vec![],
                            data: ConstData::I64(vec![*v]),
                        },
                        (_, _, Some(Attr::Ints(v))) => Const {
                            shape: vec![v.len()],
                            data: ConstData::I64(v.clone()),
                        },
                        _ => {
                            return Err(n.unsupported(
                                "only tensor, float, int and ints constants are supported",
                            ))
                        }
                    },
                };
                self.set(&n.outputs[0], Val::C(c));
                Ok(())
            }
            "QuantizeLinear" => self.quantize_linear(n),
            "DequantizeLinear" => self.dequantize_linear(n),
            "Identity" => {
                let v = self.input(n, 0)?;
                self.set(&n.outputs[0], v);
                Ok(())
            }
            "Cast" => self.cast(n),
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => self.reshape_like(n),
            "Transpose" => self.transpose(n),
            "Slice" => self.slice(n),
            "Gather" => self.gather(n),
            "Split" => self.split(n),
            "Pad" => self.pad(n),
            "MaxPool" => self.max_pool(n),
            "Relu" | "Clip" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "LeakyRelu" | "Tanh"
            | "Softplus" | "Mish"
                if self.reads_float_tensor(n) || self.result_stays_float(n) =>
            {
                self.float_unary(n)
            }
            // No quantized kernel: in float, of a float tensor or a dequantized one's values.
            "Neg" | "Exp" | "Erf" | "Gelu" | "Sqrt" | "Reciprocal" | "Abs" | "Log" | "Sin"
            | "Cos" => self.float_unary(n),
            "Add" | "Mul" | "Div" | "Sub"
                if self.reads_float_tensor(n)
                    || self.reads_float_constant(n)
                    || self.result_stays_float(n) =>
            {
                self.float_binary(n)
            }
            "Concat" if self.reads_float_tensor(n) => self.float_concat(n),
            "BatchNormalization" => self.float_batch_norm(n),
            "Softmax" | "LogSoftmax" | "LayerNormalization" => self.float_norm(n),
            "QLinearSoftmax" => self.qlinear_softmax(n),
            "ReduceMean" if self.is_spatial_mean(n)? => self.reduce_mean(n),
            "ReduceMean" | "ReduceSum" | "ReduceSumSquare" | "ReduceL1" | "ReduceL2"
            | "ReduceMax" | "ReduceMin" => self.float_reduce(n),
            "Pow" => self.float_pow(n),
            "Expand" => self.float_expand(n),
            "GlobalAveragePool" if self.reads_float_tensor(n) || self.find_q(n).is_err() => {
                self.float_global_avg_pool(n)
            }
            "Relu" | "Clip" => self.standalone_clamp(n),
            "Conv" if self.is_float_conv(n) => self.float_conv(n),
            "Conv" | "QLinearConv" => self.conv(n),
            "ConvTranspose" if self.is_float_conv(n) => self.float_conv_transpose(n),
            "ConvTranspose" => self.conv_transpose(n),
            "MatMul" | "Gemm" if self.is_float_product(n) => self.float_matmul(n),
            "MatMul" | "QLinearMatMul" if self.second_operand_computed(n) => {
                self.matmul_two_tensors(n)
            }
            "Gemm" | "MatMul" | "QLinearMatMul" | "QGemm" => self.matmul(n),
            "Einsum" => self.einsum(n),
            "Add" | "Mul" | "Div" | "Sub" | "QLinearAdd" | "QLinearMul" => self.binary(n),
            "Sigmoid" | "QLinearSigmoid" | "Tanh" | "LeakyRelu" | "QLinearLeakyRelu"
            | "HardSigmoid" | "HardSwish" | "Softplus" | "Mish" => self.unary(n),
            "AveragePool"
            | "GlobalAveragePool"
            | "QLinearAveragePool"
            | "QLinearGlobalAveragePool" => self.avg_pool(n),
            "Concat" | "QLinearConcat" => self.concat(n),
            "Resize" | "Upsample" => self.resize(n),
            "GridSample" => self.grid_sample(n),
            _ if island::is_island_op(op) => Err(n.unsupported(
                "the native engine runs this operator only inside a float island: elementwise \
                 float operators whose only non-constant input is one dequantized tensor, with \
                 scalar constants, ending in one QuantizeLinear (lowered to one table); here it \
                 reads another tensor, a per-channel constant, or its result leaves the group \
                 unquantized. Quantize around it (QDQ) or run the model with --engine onnxruntime",
            )),
            _ => Err(n.unsupported(
                "this operator is not in the native engine's set (Conv, ConvTranspose, Gemm/MatMul, \
                 Add, Mul, \
                 Relu, Clip, Sigmoid, Tanh, LeakyRelu, HardSigmoid, HardSwish, Softplus, Mish, \
                 MaxPool, AveragePool, GlobalAveragePool, Concat, Resize, Reshape, Flatten, \
                 Transpose, Squeeze, Unsqueeze, Slice, Split, Pad and their QLinear forms, \
                 Einsum products, BatchNormalization after a float convolution, Softmax, \
                 LogSoftmax, LayerNormalization, ReduceSum/Mean/Max/Min/L1/L2/SumSquare, \
                 Expand, Sqrt, Reciprocal, Abs, Log, Sin, Cos, Exp, Erf, Gelu, Pow 2 and \
                 GridSample of float or dequantized tensors, Cast to the same type, TopK \
                 with integer arithmetic, Where, Gather and GatherElements on its indices, \
                 and arithmetic on constants; 1-D windows as 2-D ones); run the model \
                 with --engine onnxruntime",
            )),
        }
    }
}

impl Lowerer<'_> {
    /// `Cast` of a computed tensor (a constant's is folded, `fold`): only to the type it
    /// already has, which changes nothing. PyTorch's export of a quantized model writes one
    /// between each `QuantizeLinear` and the `DequantizeLinear` after it (`uint8` to
    /// `uint8`); a float tensor (computed in float or dequantized) cast to `float32` is
    /// the same. Any other cast changes values the native engine keeps quantized: an error
    /// that names both types.
    fn cast(&mut self, n: &Node) -> Result<(), EngineError> {
        let to = n.int("to", 0)?;
        let v = self.input(n, 0)?;
        let from = match &v {
            Val::Q(_) if self.is_u8(&n.inputs[0]) => super::graph::dtype::UINT8,
            Val::Q(_) => super::graph::dtype::INT8,
            Val::F32(_) | Val::Dq(_) => super::graph::dtype::FLOAT,
            Val::I { boolean: true, .. } => super::graph::dtype::BOOL,
            Val::I { .. } => super::graph::dtype::INT64,
            Val::C(_) | Val::DqC { .. } => {
                return Err(n.unsupported("a cast of a constant that could not be folded"))
            }
        };
        if i64::from(from) != to {
            return Err(n.unsupported(format!(
                "a cast of {} ({}) to {}: the native engine keeps this tensor as it is and \
                 runs only casts to the same type; remove the cast or run the model with \
                 --engine onnxruntime",
                kind_name(&v),
                super::graph::type_name(from),
                i32::try_from(to).map_or("an unknown type", super::graph::type_name)
            )));
        }
        self.set(&n.outputs[0], v);
        Ok(())
    }
}

fn dims4(s: &[usize]) -> [usize; 4] {
    [s[0], s[1], s[2], s[3]]
}

/// The quantized value of a real clamp bound (rounded, saturated).
fn quant_bound(x: f32, q: QParams) -> i8 {
    crate::quant::quantize(x, q)
}

/// `table[x as u8] = Q_out(f(DQ_in(x)))` for every `i8` x.
fn requant_table(inq: QParams, outq: QParams, f: impl Fn(f32) -> f32) -> [i8; 256] {
    let mut t = [0i8; 256];
    for (i, e) in t.iter_mut().enumerate() {
        let x = (i as u8) as i8;
        *e = crate::quant::quantize(f(crate::quant::dequantize(x, inq)), outq);
    }
    t
}
