//! Lowering: from the ONNX graph (QDQ or QOperator form) to a [`Program`] of quantized steps.
//!
//! Every value of the graph is tracked as one of [`Val`]: a float buffer (a graph input
//! before its `QuantizeLinear`), a quantized `i8` buffer, the dequantized view of one
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

use super::graph::{Attr, Const, ConstData, Node, OnnxGraph};
use super::kernels::{AvgParams, Binary, BinaryKind, GeneralConv, Tap, Window};
use super::program::{Buffer, ConvImpl, OutKind, Program, Step};
use crate::conv::{Conv2d, ConvShape};
use crate::engine::{ElemType, EngineError, TensorSpec};
use crate::quant::QParams;
use std::collections::{HashMap, HashSet};

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
}

/// Lowers a parsed graph.
pub(crate) fn lower(g: &OnnxGraph) -> Result<Lowered, EngineError> {
    let mut l = Lowerer {
        g,
        vals: HashMap::new(),
        steps: Vec::new(),
        buffers: Vec::new(),
        done: HashSet::new(),
        consumers: HashMap::new(),
        macs: 0,
        weight_bytes: 0,
        outputs: HashSet::new(),
    };
    for (i, n) in g.nodes.iter().enumerate() {
        for name in n.inputs.iter().filter(|s| !s.is_empty()) {
            l.consumers.entry(name.clone()).or_default().push(i);
        }
    }
    for o in &g.outputs {
        l.outputs.insert(o.name.clone());
    }
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
            match dim {
                Some(v) => shape.push(*v),
                None => {
                    return Err(EngineError::Invalid {
                        reason: format!(
                            "graph input {} has a dynamic dimension {d}: the native engine \
                             compiles fixed shapes; export the model with static input shapes \
                             (e.g. torch.onnx.export without dynamic_axes) or fix it with \
                             onnxruntime.tools.make_dynamic_shape_fixed",
                            vi.name
                        ),
                    })
                }
            }
        }
        let bytes = shape.iter().product::<usize>() * elem.size();
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
    }
    let mut outputs = Vec::new();
    for (index, vo) in g.outputs.iter().enumerate() {
        let v = l.get(&vo.name, &format!("graph output {}", vo.name))?;
        let (t, kind, elem) = match (v, vo.elem) {
            (Val::Dq(t), Some(ElemType::F32) | None) => {
                let q = t.q;
                (
                    t,
                    OutKind::Dequantize {
                        scale: q.scale,
                        zp: i32::from(q.zero_point),
                    },
                    ElemType::F32,
                )
            }
            (Val::Q(t), Some(ElemType::U8)) => (t, OutKind::FlipU8, ElemType::U8),
            (Val::Q(t), Some(ElemType::I8) | None) => (t, OutKind::Copy, ElemType::I8),
            (v, e) => {
                return Err(EngineError::Invalid {
                    reason: format!(
                        "graph output {} is {} ({:?}): the native engine produces outputs that \
                         are quantized (int8/uint8) or dequantized from quantized tensors \
                         (float32); run this model with --engine onnxruntime",
                        vo.name,
                        e.map(|e| e.name()).unwrap_or("untyped"),
                        kind_name(&v)
                    ),
                })
            }
        };
        let t = l.row_major(t, 1)?;
        let n = t.shape.iter().product::<usize>();
        l.touch(t.buf);
        l.steps.push(Step::Output {
            index,
            src: t.buf,
            kind,
        });
        let _ = n;
        outputs.push(TensorSpec {
            name: vo.name.clone(),
            elem,
            shape: t.shape.clone(),
        });
    }
    let mut buffers = std::mem::take(&mut l.buffers);
    let arena_bytes = super::program::plan(&mut buffers);
    Ok(Lowered {
        program: Program {
            steps: std::mem::take(&mut l.steps),
            buffers,
            arena_bytes,
        },
        inputs,
        outputs,
        macs: l.macs,
        weight_bytes: l.weight_bytes,
    })
}

fn kind_name(v: &Val) -> &'static str {
    match v {
        Val::F32(_) => "a float tensor computed in float",
        Val::Q(_) => "a quantized tensor",
        Val::Dq(_) => "a dequantized tensor",
        Val::C(_) | Val::DqC { .. } => "a constant",
    }
}

struct Lowerer<'g> {
    g: &'g OnnxGraph,
    vals: HashMap<String, Val>,
    steps: Vec<Step>,
    buffers: Vec<Buffer>,
    done: HashSet<usize>,
    consumers: HashMap<String, Vec<usize>>,
    macs: u64,
    weight_bytes: usize,
    outputs: HashSet<String>,
}

fn invalid(reason: String) -> EngineError {
    EngineError::Invalid { reason }
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

    fn get(&self, name: &str, what: &str) -> Result<Val, EngineError> {
        self.vals.get(name).cloned().ok_or_else(|| {
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
            -128 // absent: uint8 zero point 0
        };
        if !(scale.is_finite() && scale > 0.0) {
            return Err(n.unsupported(format!("scale {scale} must be finite and positive")));
        }
        Ok(QParams::new(scale, zp.clamp(-128, 127) as i8))
    }

    fn set(&mut self, name: &str, v: Val) {
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
        Err(n.unsupported(
            "its float result does not go (through Relu/Clip only) to a QuantizeLinear: the \
             native engine runs INT8 models only; quantize this operator's output (QDQ) or run \
             the model with --engine onnxruntime",
        ))
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

    /// Converts a tensor to NHWC memory order (rank 4), inserting a copy when needed.
    fn nhwc(&mut self, t: T, elem: usize) -> Result<T, EngineError> {
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

    /// Converts to row-major memory order, inserting a copy when needed.
    fn row_major(&mut self, t: T, elem: usize) -> Result<T, EngineError> {
        if t.layout == Layout::RowMajor {
            return Ok(t);
        }
        let s = &t.shape;
        if s[1] == 1 || s[2] * s[3] == 1 {
            return Ok(T {
                layout: Layout::RowMajor,
                ..t
            });
        }
        // Physical [N,H,W,C] -> [N,C,H,W].
        let phys = T {
            shape: vec![s[0], s[2], s[3], s[1]],
            ..t.clone()
        };
        let out = self.permute_copy(&phys, &[0, 3, 1, 2], elem);
        Ok(T {
            buf: out,
            layout: Layout::RowMajor,
            ..t
        })
    }

    /// Copies the row-major tensor `t` (physical shape `t.shape`) permuted by `perm`.
    fn permute_copy(&mut self, t: &T, perm: &[usize], elem: usize) -> usize {
        let in_shape = &t.shape;
        let mut in_strides = vec![1usize; in_shape.len()];
        for d in (0..in_shape.len().saturating_sub(1)).rev() {
            in_strides[d] = in_strides[d + 1] * in_shape[d + 1];
        }
        let out_shape: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
        let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
        let bytes = out_shape.iter().product::<usize>() * elem;
        self.touch(t.buf);
        let dst = self.new_buf(bytes);
        self.steps.push(Step::Transpose {
            out_shape,
            strides,
            elem,
            src: t.buf,
            dst,
        });
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
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => self.reshape_like(n),
            "Transpose" => self.transpose(n),
            "MaxPool" => self.max_pool(n),
            "Relu" | "Clip" => self.standalone_clamp(n),
            "Conv" | "QLinearConv" => self.conv(n, i),
            "Gemm" | "MatMul" | "QLinearMatMul" | "QGemm" => self.matmul(n, i),
            "Add" | "Mul" | "QLinearAdd" | "QLinearMul" => self.binary(n, i),
            "Sigmoid" | "QLinearSigmoid" | "Tanh" | "LeakyRelu" | "QLinearLeakyRelu"
            | "HardSigmoid" => self.unary(n, i),
            "AveragePool"
            | "GlobalAveragePool"
            | "QLinearAveragePool"
            | "QLinearGlobalAveragePool" => self.avg_pool(n, i),
            "Concat" | "QLinearConcat" => self.concat(n, i),
            "Resize" | "Upsample" => self.resize(n, i),
            _ => Err(n.unsupported(
                "this operator is not in the native engine's set (Conv, Gemm/MatMul, Add, Mul, \
                 Relu, Clip, Sigmoid, MaxPool, AveragePool, GlobalAveragePool, Concat, Resize, \
                 Reshape, Flatten, Transpose, Squeeze, Unsqueeze and their QLinear forms); run \
                 the model with --engine onnxruntime",
            )),
        }
    }

    fn quantize_linear(&mut self, n: &Node) -> Result<(), EngineError> {
        if self.q_axis_per_channel(n)? {
            return Err(n.unsupported("per-channel quantization of an activation is not supported"));
        }
        let q = self.qparams(n, 1, 2)?;
        let v = match self.input(n, 0)? {
            Val::F32(t) => {
                let len = t.shape.iter().product::<usize>();
                self.touch(t.buf);
                let dst = self.new_buf(len);
                self.steps.push(Step::Quantize {
                    src: t.buf,
                    dst,
                    n: len,
                    scale: q.scale,
                    zp: i32::from(q.zero_point),
                });
                Val::Q(T { buf: dst, q, ..t })
            }
            Val::Dq(t) => Val::Q(self.requant(t, q)),
            Val::C(c) => {
                let f = c.to_f32();
                let data: Vec<i8> = f.iter().map(|&x| crate::quant::quantize(x, q)).collect();
                Val::DqC {
                    data: Const {
                        shape: c.shape.clone(),
                        data: ConstData::I8(data),
                    },
                    scales: vec![q.scale],
                    zps: vec![i32::from(q.zero_point)],
                    axis: 0,
                }
            }
            v => return Err(n.unsupported(format!("cannot quantize {}", kind_name(&v)))),
        };
        self.set(&n.outputs[0], v);
        Ok(())
    }

    /// `t` re-expressed with quantization `q` (a table step when the parameters differ).
    fn requant(&mut self, t: T, q: QParams) -> T {
        if t.q == q {
            return T { q, ..t };
        }
        let table = requant_table(t.q, q, |x| x);
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len);
        self.steps.push(Step::Lut {
            table: Box::new(table),
            n: len,
            src: t.buf,
            dst,
        });
        T { buf: dst, q, ..t }
    }

    fn dequantize_linear(&mut self, n: &Node) -> Result<(), EngineError> {
        let axis = n.int("axis", 1)?;
        let v = self.input(n, 0)?;
        let s = self.konst(n, 1)?;
        let scales = match &s.data {
            ConstData::F32(v) => v.clone(),
            _ => return Err(n.unsupported("the scale must be float32")),
        };
        let explicit_zps: Option<Vec<i32>> = if n.input(2).is_some() {
            let z = self.konst(n, 2)?;
            Some(
                (0..z.len())
                    .map(|i| zp_i8(&z.data, i).unwrap_or(0))
                    .collect(),
            )
        } else {
            None
        };
        let out = match v {
            Val::Q(t) => {
                if scales.len() != 1 {
                    return Err(n.unsupported(
                        "per-channel dequantization of an activation is not supported",
                    ));
                }
                // Without a zero point input the tensor's own type decides (uint8: -128 in
                // the i8 domain, int8: 0): the producer's zero point says which it was.
                let zp = match &explicit_zps {
                    Some(z) => z.first().copied().unwrap_or(0),
                    None => i32::from(t.q.zero_point),
                };
                Val::Dq(T {
                    q: QParams::new(scales[0], zp.clamp(-128, 127) as i8),
                    ..t
                })
            }
            Val::C(c) => {
                let rank = c.shape.len() as i64;
                let axis = if axis < 0 { axis + rank } else { axis };
                let is_u8 = matches!(c.data, ConstData::U8(_));
                // u8 constants become i8 (x ^ 0x80 with zp - 128).
                let data = match c.data {
                    ConstData::U8(v) => Const {
                        shape: c.shape.clone(),
                        data: ConstData::I8(v.iter().map(|&x| (x ^ 0x80) as i8).collect()),
                    },
                    _ => c.clone(),
                };
                let zps = explicit_zps
                    .unwrap_or_else(|| vec![if is_u8 { -128 } else { 0 }; scales.len().max(1)]);
                Val::DqC {
                    data,
                    scales,
                    zps,
                    axis: axis.max(0) as usize,
                }
            }
            v => return Err(n.unsupported(format!("cannot dequantize {}", kind_name(&v)))),
        };
        self.set(&n.outputs[0], out);
        Ok(())
    }

    fn reshape_like(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let (t, is_q) = match v {
            Val::Q(t) => (t, true),
            Val::Dq(t) => (t, false),
            Val::C(c) => {
                let shape = self.new_shape(n, &c.shape)?;
                self.set(
                    &n.outputs[0],
                    Val::C(Const {
                        shape,
                        data: c.data,
                    }),
                );
                return Ok(());
            }
            v => return Err(n.unsupported(format!("cannot reshape {}", kind_name(&v)))),
        };
        let shape = self.new_shape(n, &t.shape)?;
        let t = self.row_major(t, 1)?;
        let t = T { shape, ..t };
        self.set(&n.outputs[0], if is_q { Val::Q(t) } else { Val::Dq(t) });
        Ok(())
    }

    fn new_shape(&self, n: &Node, s: &[usize]) -> Result<Vec<usize>, EngineError> {
        let total: usize = s.iter().product();
        let rank = s.len() as i64;
        let norm = |a: i64, r: i64| if a < 0 { a + r } else { a };
        let out = match n.op.as_str() {
            "Reshape" => {
                let spec = self
                    .konst(n, 1)?
                    .to_i64()
                    .ok_or_else(|| n.unsupported("shape must be integers"))?;
                let allowzero = n.int("allowzero", 0)? != 0;
                let mut out = Vec::with_capacity(spec.len());
                let mut infer = None;
                for (i, &d) in spec.iter().enumerate() {
                    match d {
                        -1 => {
                            infer = Some(i);
                            out.push(1)
                        }
                        0 if !allowzero => {
                            out.push(*s.get(i).ok_or_else(|| {
                                n.unsupported("0 in shape beyond the input's rank")
                            })?)
                        }
                        d if d >= 0 => out.push(d as usize),
                        _ => return Err(n.unsupported(format!("bad shape entry {d}"))),
                    }
                }
                if let Some(i) = infer {
                    let known: usize = out.iter().product();
                    if known == 0 || !total.is_multiple_of(known) {
                        return Err(n.unsupported(format!(
                            "cannot infer -1 of {spec:?} for {total} elements"
                        )));
                    }
                    out[i] = total / known;
                }
                out
            }
            "Flatten" => {
                let a = norm(n.int("axis", 1)?, rank).clamp(0, rank) as usize;
                vec![s[..a].iter().product(), s[a..].iter().product()]
            }
            "Squeeze" => {
                let axes = match n.ints("axes")? {
                    Some(a) => a,
                    None if n.input(1).is_some() => self.konst(n, 1)?.to_i64().unwrap_or_default(),
                    None => (0..rank).filter(|&a| s[a as usize] == 1).collect(),
                };
                let axes: Vec<usize> = axes.iter().map(|&a| norm(a, rank) as usize).collect();
                s.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect()
            }
            _ => {
                let axes = match n.ints("axes")? {
                    Some(a) => a,
                    None => self.konst(n, 1)?.to_i64().unwrap_or_default(),
                };
                let r = rank + axes.len() as i64;
                let mut axes: Vec<usize> = axes.iter().map(|&a| norm(a, r) as usize).collect();
                axes.sort_unstable();
                let mut out: Vec<usize> = s.to_vec();
                for a in axes {
                    if a > out.len() {
                        return Err(n.unsupported("Unsqueeze axis out of range"));
                    }
                    out.insert(a, 1);
                }
                out
            }
        };
        if out.iter().product::<usize>() != total {
            return Err(n.unsupported(format!(
                "new shape {out:?} does not hold the {total} elements of {s:?}"
            )));
        }
        Ok(out)
    }

    fn transpose(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let (t, is_q) = match v {
            Val::Q(t) => (t, true),
            Val::Dq(t) => (t, false),
            v => return Err(n.unsupported(format!("cannot transpose {}", kind_name(&v)))),
        };
        let rank = t.shape.len();
        let perm: Vec<usize> = match n.ints("perm")? {
            Some(p) => p.iter().map(|&x| x as usize).collect(),
            None => (0..rank).rev().collect(),
        };
        let mut seen = perm.clone();
        seen.sort_unstable();
        if seen != (0..rank).collect::<Vec<_>>() {
            return Err(n.unsupported(format!("perm {perm:?} is not a permutation of 0..{rank}")));
        }
        let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
        let out = if rank == 4 && perm == [0, 3, 1, 2] && t.layout == Layout::RowMajor {
            // Row-major [N,H,W,C] viewed as NCHW: its memory is already NHWC.
            T {
                shape,
                layout: Layout::Nhwc,
                ..t
            }
        } else if rank == 4 && perm == [0, 2, 3, 1] && t.layout == Layout::Nhwc {
            T {
                shape,
                layout: Layout::RowMajor,
                ..t
            }
        } else {
            let t = self.row_major(t, 1)?;
            let buf = self.permute_copy(&t, &perm, 1);
            T {
                buf,
                shape,
                layout: Layout::RowMajor,
                ..t
            }
        };
        self.set(&n.outputs[0], if is_q { Val::Q(out) } else { Val::Dq(out) });
        Ok(())
    }

    /// Whether the quantized value `name` is a `uint8` tensor in the file (from its
    /// producer's zero point, following int8-transparent operators).
    fn is_u8(&self, name: &str) -> bool {
        let mut name = name.to_string();
        for _ in 0..64 {
            if let Some(vi) = self.g.inputs.iter().find(|v| v.name == name) {
                return vi.elem == Some(ElemType::U8);
            }
            let Some(p) = self
                .g
                .nodes
                .iter()
                .find(|n| n.outputs.first() == Some(&name))
            else {
                return false;
            };
            let zp_index = match p.op.as_str() {
                "QuantizeLinear" => Some(2),
                "QLinearConv" | "QLinearAdd" | "QLinearMul" | "QLinearMatMul" => Some(7),
                "QGemm" => Some(8),
                "QLinearConcat" => Some(1),
                "QLinearSigmoid"
                | "QLinearLeakyRelu"
                | "QLinearAveragePool"
                | "QLinearGlobalAveragePool" => Some(4),
                _ => None,
            };
            match zp_index {
                Some(i) => {
                    return match p.input(i).and_then(|z| self.g.consts.get(z)) {
                        Some(c) => matches!(c.data, ConstData::U8(_)),
                        None => p.op == "QuantizeLinear" && p.input(i).is_none(),
                    }
                }
                None => match p.input(0) {
                    Some(i) => name = i.to_string(),
                    None => return false,
                },
            }
        }
        false
    }

    fn window(
        &self,
        n: &Node,
        in_h: usize,
        in_w: usize,
        kh: usize,
        kw: usize,
    ) -> Result<Window, EngineError> {
        let strides = n.ints("strides")?.unwrap_or_else(|| vec![1, 1]);
        let dil = n.ints("dilations")?.unwrap_or_else(|| vec![1, 1]);
        if strides.len() != 2 || dil.len() != 2 || strides.iter().chain(&dil).any(|&v| v < 1) {
            return Err(n.unsupported("2-D strides and dilations >= 1 are required"));
        }
        let (sh, sw, dh, dw) = (
            strides[0] as usize,
            strides[1] as usize,
            dil[0] as usize,
            dil[1] as usize,
        );
        let ceil = n.int("ceil_mode", 0)? != 0;
        let auto = n.string("auto_pad", "NOTSET")?;
        let ekh = (kh - 1) * dh + 1;
        let ekw = (kw - 1) * dw + 1;
        let (pt, pl, pb, pr) = match auto.as_str() {
            "NOTSET" => {
                let p = n.ints("pads")?.unwrap_or_else(|| vec![0; 4]);
                if p.len() != 4 || p.iter().any(|&v| v < 0) {
                    return Err(n.unsupported("pads must be 4 non-negative values"));
                }
                (p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize)
            }
            "VALID" => (0, 0, 0, 0),
            "SAME_UPPER" | "SAME_LOWER" => {
                let oh = in_h.div_ceil(sh);
                let ow = in_w.div_ceil(sw);
                let ph = ((oh - 1) * sh + ekh).saturating_sub(in_h);
                let pw = ((ow - 1) * sw + ekw).saturating_sub(in_w);
                if auto == "SAME_UPPER" {
                    (ph / 2, pw / 2, ph - ph / 2, pw - pw / 2)
                } else {
                    (ph - ph / 2, pw - pw / 2, ph / 2, pw / 2)
                }
            }
            other => return Err(n.unsupported(format!("auto_pad {other} is not supported"))),
        };
        let span_h = in_h + pt + pb;
        let span_w = in_w + pl + pr;
        if span_h < ekh || span_w < ekw {
            return Err(n.unsupported(format!(
                "the {kh}x{kw} window does not fit the padded {in_h}x{in_w} input"
            )));
        }
        let out = |span: usize, ek: usize, s: usize, pad_begin: usize, input: usize| {
            let mut o = if ceil {
                (span - ek).div_ceil(s) + 1
            } else {
                (span - ek) / s + 1
            };
            // ceil mode: the last window must start inside the input or the left padding.
            if ceil && (o - 1) * s >= input + pad_begin {
                o -= 1;
            }
            o
        };
        Ok(Window {
            in_h,
            in_w,
            out_h: out(span_h, ekh, sh, pt, in_h),
            out_w: out(span_w, ekw, sw, pl, in_w),
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pt,
            pl,
        })
    }

    fn max_pool(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let (t, is_q) = match v {
            Val::Q(t) => (t, true),
            Val::Dq(t) => (t, false),
            v => return Err(n.unsupported(format!("cannot max-pool {}", kind_name(&v)))),
        };
        if n.outputs.len() > 1 && !n.outputs[1].is_empty() {
            return Err(n.unsupported("the Indices output is not supported"));
        }
        if n.int("storage_order", 0)? != 0 {
            return Err(n.unsupported("storage_order 1 is not supported"));
        }
        let k = n
            .ints("kernel_shape")?
            .ok_or_else(|| n.unsupported("kernel_shape is required"))?;
        if k.len() != 2 {
            return Err(n.unsupported("only 2-D pooling is supported"));
        }
        let t = self.nhwc(t, 1)?;
        let [b, c, h, w] = dims4(&t.shape);
        let win = self.window(n, h, w, k[0] as usize, k[1] as usize)?;
        self.touch(t.buf);
        let dst = self.new_buf(b * c * win.out_h * win.out_w);
        self.steps.push(Step::MaxPool {
            win,
            c,
            batch: b,
            src: t.buf,
            dst,
        });
        let out = T {
            buf: dst,
            shape: vec![b, c, win.out_h, win.out_w],
            layout: Layout::Nhwc,
            q: t.q,
        };
        self.set(&n.outputs[0], if is_q { Val::Q(out) } else { Val::Dq(out) });
        Ok(())
    }

    fn standalone_clamp(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let (t, is_q) = match v {
            Val::Q(t) => (t, true),
            Val::Dq(t) => (t, false),
            v => {
                return Err(n.unsupported(format!(
                    "{} of {} (not fused into a quantized operator)",
                    n.op,
                    kind_name(&v)
                )))
            }
        };
        let (lo, hi) = if n.op == "Relu" {
            (0.0, f32::INFINITY)
        } else {
            self.clip_bounds(n)?
        };
        let q = t.q;
        // Exact on the quantized grid: clamp at the quantized bounds.
        let qlo = if lo.is_finite() {
            quant_bound(lo, q)
        } else {
            -128
        };
        let qhi = if hi.is_finite() {
            quant_bound(hi, q)
        } else {
            127
        };
        let mut table = [0i8; 256];
        for (i, e) in table.iter_mut().enumerate() {
            *e = ((i as u8) as i8).clamp(qlo, qhi);
        }
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len);
        self.steps.push(Step::Lut {
            table: Box::new(table),
            n: len,
            src: t.buf,
            dst,
        });
        let out = T { buf: dst, ..t };
        self.set(&n.outputs[0], if is_q { Val::Q(out) } else { Val::Dq(out) });
        Ok(())
    }

    /// Output quantization and clamp for a float op (QDQ: the following QuantizeLinear) or
    /// a QLinear op (its y_scale / y_zero_point inputs).
    fn out_q(
        &mut self,
        n: &Node,
        qop: Option<(usize, usize)>,
    ) -> Result<(QParams, (i8, i8), String), EngineError> {
        match qop {
            Some((s, z)) => {
                let q = self.qparams(n, s, z)?;
                Ok((q, (-128, 127), n.outputs[0].clone()))
            }
            None => {
                let (q, clamp, chain, name) = self.find_q(n)?;
                self.done.extend(chain);
                Ok((q, clamp, name))
            }
        }
    }

    /// Weight tensor of a Conv / Gemm: `i8` values, per-output-channel scales (len `oc`).
    fn weights(
        &self,
        n: &Node,
        v: Val,
        oc: usize,
        axis_expected: usize,
        qop: Option<(usize, usize)>,
    ) -> Result<WeightParts, EngineError> {
        let (data, scales, zps) = match (v, qop) {
            (Val::DqC { data, scales, zps, axis }, None) => {
                if scales.len() > 1 && axis != axis_expected {
                    return Err(n.unsupported(format!("weights are quantized per channel along axis {axis}; expected axis {axis_expected} (output channels)")));
                }
                (data, scales, zps)
            }
            (Val::C(c), Some((s, z))) => {
                let sc = self.konst(n, s)?;
                let scales = match &sc.data {
                    ConstData::F32(v) => v.clone(),
                    _ => return Err(n.unsupported("weight scale must be float32")),
                };
                let zc = if n.input(z).is_some() { Some(self.konst(n, z)?) } else { None };
                let u8w = matches!(c.data, ConstData::U8(_));
                let zps: Vec<i32> = match &zc {
                    Some(zc) => (0..zc.len()).map(|i| zp_i8(&zc.data, i).unwrap_or(0)).collect(),
                    None => vec![if u8w { -128 } else { 0 }],
                };
                let data = match c.data {
                    ConstData::U8(v) => Const { shape: c.shape.clone(), data: ConstData::I8(v.iter().map(|&x| (x ^ 0x80) as i8).collect()) },
                    _ => c,
                };
                (data, scales, zps)
            }
            (Val::C(_), None) => {
                return Err(n.unsupported("float weights: the native engine needs INT8 weights (a DequantizeLinear of an int8 initializer); quantize the model (e.g. onnxruntime.quantization.quantize_static) or run it with --engine onnxruntime"))
            }
            (v, _) => return Err(n.unsupported(format!("weights are {}; they must be a constant", kind_name(&v)))),
        };
        let ConstData::I8(w) = data.data else {
            return Err(n.unsupported("weights must be int8 or uint8"));
        };
        if zps.iter().any(|&z| z != 0) {
            return Err(n.unsupported("weights have a non-zero zero point; the native engine needs symmetric weights (quantize with symmetric weights, e.g. weight_type=QInt8)"));
        }
        let scales = if scales.len() == 1 {
            vec![scales[0]; oc]
        } else {
            scales
        };
        if scales.len() != oc {
            return Err(n.unsupported(format!(
                "{} weight scales for {oc} output channels",
                scales.len()
            )));
        }
        Ok((w, scales, data.shape))
    }

    /// Bias as `i32` with scale `x_scale * w_scale[c]` (quantized from float if needed).
    fn bias(
        &self,
        n: &Node,
        idx: usize,
        oc: usize,
        x_scale: f32,
        w_scales: &[f32],
    ) -> Result<Vec<i32>, EngineError> {
        if n.input(idx).is_none() {
            return Ok(vec![0; oc]);
        }
        let v = self.input(n, idx)?;
        let b: Vec<i32> = match v {
            Val::DqC {
                data:
                    Const {
                        data: ConstData::I32(v),
                        ..
                    },
                ..
            } => v,
            Val::C(Const {
                data: ConstData::I32(v),
                ..
            }) => v,
            Val::C(
                c @ Const {
                    data: ConstData::F32(_),
                    ..
                },
            ) => c
                .to_f32()
                .iter()
                .zip(w_scales)
                .map(|(&b, &ws)| crate::quant::quantize_bias(b, x_scale, ws))
                .collect(),
            Val::DqC {
                data, scales, zps, ..
            } => {
                let f = data.to_f32();
                f.iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        let s = scales[if scales.len() == 1 { 0 } else { i }];
                        let z = zps[if zps.len() == 1 {
                            0
                        } else {
                            i.min(zps.len() - 1)
                        }];
                        crate::quant::quantize_bias(
                            (x - z as f32) * s,
                            x_scale,
                            w_scales[i.min(w_scales.len() - 1)],
                        )
                    })
                    .collect()
            }
            v => {
                return Err(
                    n.unsupported(format!("bias is {}; it must be a constant", kind_name(&v)))
                )
            }
        };
        if b.len() != oc {
            return Err(n.unsupported(format!(
                "bias has {} values for {oc} output channels",
                b.len()
            )));
        }
        Ok(b)
    }

    fn conv(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let qop = n.op == "QLinearConv";
        let x = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { x.q };
        let wv = self.input(n, if qop { 3 } else { 1 })?;
        let wshape = match &wv {
            Val::DqC { data, .. } | Val::C(data) => data.shape.clone(),
            _ => vec![],
        };
        if wshape.len() != 4 {
            return Err(n.unsupported("only 2-D convolutions (4-D weights) are supported"));
        }
        let (oc, icg, kh, kw) = (wshape[0], wshape[1], wshape[2], wshape[3]);
        let (w, w_scales, _) = self.weights(n, wv, oc, 0, if qop { Some((4, 5)) } else { None })?;
        let groups = n.int("group", 1)?.max(1) as usize;
        let x = self.nhwc(x, 1)?;
        let [b, c, h, wd] = dims4(&x.shape);
        if c != icg * groups || oc % groups != 0 {
            return Err(n.unsupported(format!(
                "{c} input channels, {groups} groups and weights {wshape:?} do not match"
            )));
        }
        let bias = self.bias(n, if qop { 8 } else { 2 }, oc, x_q.scale, &w_scales)?;
        let (y_q, (lo, hi), out_name) = self.out_q(n, if qop { Some((6, 7)) } else { None })?;
        let win = self.window(n, h, wd, kh, kw)?;
        // OIHW -> O,kh,kw,I.
        let mut packed = vec![0i8; w.len()];
        for o in 0..oc {
            for ci in 0..icg {
                for y in 0..kh {
                    for xx in 0..kw {
                        packed[((o * kh + y) * kw + xx) * icg + ci] =
                            w[((o * icg + ci) * kh + y) * kw + xx];
                    }
                }
            }
        }
        self.weight_bytes += packed.len() + bias.len() * 4;
        let macs = (b * win.out_h * win.out_w * oc * kh * kw * icg) as u64;
        self.macs += macs;
        let relu = lo == y_q.zero_point;
        let square = kh == kw
            && win.sh == win.sw
            && win.dh == 1
            && win.dw == 1
            && groups == 1
            && win.pt == win.pl
            && win.pt < kh;
        let dense = if square {
            let pad = win.pt;
            // The dense kernel pads symmetrically: its output size must equal ONNX's.
            let oh = (h + 2 * pad - kh) / win.sh + 1;
            let ow = (wd + 2 * pad - kw) / win.sw + 1;
            if oh == win.out_h && ow == win.out_w {
                Conv2d::new(
                    ConvShape {
                        in_c: c,
                        out_c: oc,
                        k: kh,
                        stride: win.sh,
                        pad,
                    },
                    packed.clone(),
                    w_scales.clone(),
                    bias.clone(),
                    x_q,
                    y_q,
                    relu,
                )
                .ok()
            } else {
                None
            }
        } else {
            None
        };
        let (imp, clamp) = match dense {
            Some(d) => {
                let floor = if relu { y_q.zero_point } else { -128 };
                let clamp = (lo > floor || hi < 127).then_some((lo, hi));
                (ConvImpl::Dense(Box::new(d)), clamp)
            }
            None => {
                let multipliers = w_scales
                    .iter()
                    .map(|&ws| crate::quant::requant_multiplier(x_q.scale, ws, y_q.scale))
                    .collect();
                (
                    ConvImpl::General(Box::new(GeneralConv {
                        win,
                        in_c: c,
                        out_c: oc,
                        groups,
                        weights: packed,
                        bias,
                        multipliers,
                        x_zp: i32::from(x_q.zero_point),
                        y_zp: i32::from(y_q.zero_point),
                        lo,
                        hi,
                    })),
                    None,
                )
            }
        };
        self.touch(x.buf);
        let dst = self.new_buf(b * win.out_h * win.out_w * oc);
        self.steps.push(Step::Conv {
            imp,
            batch: b,
            in_h: h,
            in_w: wd,
            out_h: win.out_h,
            row_len: win.out_w * oc,
            src: x.buf,
            dst,
            clamp,
        });
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape: vec![b, oc, win.out_h, win.out_w],
                layout: Layout::Nhwc,
                q: y_q,
            }),
        );
        Ok(())
    }

    fn matmul(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let qop = matches!(n.op.as_str(), "QLinearMatMul" | "QGemm");
        let x = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { x.q };
        let (w_idx, ws_idx, wz_idx, b_idx, y_idx) = match n.op.as_str() {
            "QLinearMatMul" => (3, 4, 5, usize::MAX, Some((6, 7))),
            "QGemm" => (3, 4, 5, 6, Some((7, 8))),
            "Gemm" => (1, 0, 0, 2, None),
            _ => (1, 0, 0, usize::MAX, None),
        };
        if n.op.contains("Gemm")
            && (n.int("transA", 0)? != 0
                || n.float("alpha", 1.0)? != 1.0
                || n.float("beta", 1.0)? != 1.0)
        {
            return Err(n.unsupported(
                "only transA = 0, alpha = 1, beta = 1 are supported: put a Transpose before it \
                 or fold alpha and beta into the weights and bias, or run the model with \
                 --engine onnxruntime",
            ));
        }
        let trans_b = n.op.contains("Gemm") && n.int("transB", 0)? != 0;
        let wv = self.input(n, w_idx)?;
        let wshape = match &wv {
            Val::DqC { data, .. } | Val::C(data) => data.shape.clone(),
            v => {
                return Err(n.unsupported(format!(
                    "the second operand is {}; only constant weights are supported",
                    kind_name(v)
                )))
            }
        };
        if wshape.len() != 2 {
            return Err(n.unsupported("weights must be 2-D"));
        }
        let (k, oc) = if trans_b {
            (wshape[1], wshape[0])
        } else {
            (wshape[0], wshape[1])
        };
        let (w, w_scales, _) = self.weights(
            n,
            wv,
            oc,
            if trans_b { 0 } else { 1 },
            if qop { Some((ws_idx, wz_idx)) } else { None },
        )?;
        // Rows: every leading dimension of x.
        let x = self.row_major(x, 1)?;
        let xs = x.shape.clone();
        if xs.last().copied() != Some(k) {
            return Err(n.unsupported(format!(
                "input shape {xs:?} does not end in the weights' {k} rows"
            )));
        }
        let m: usize = xs[..xs.len() - 1].iter().product();
        let bias = if b_idx == usize::MAX {
            vec![0; oc]
        } else {
            self.bias(n, b_idx, oc, x_q.scale, &w_scales)?
        };
        let (y_q, (lo, hi), out_name) = self.out_q(n, y_idx)?;
        let mut packed = vec![0i8; k * oc];
        for o in 0..oc {
            for i in 0..k {
                packed[o * k + i] = if trans_b { w[o * k + i] } else { w[i * oc + o] };
            }
        }
        self.weight_bytes += packed.len() + oc * 4;
        self.macs += (m * k * oc) as u64;
        let relu = lo == y_q.zero_point;
        let layer = Conv2d::new(
            ConvShape {
                in_c: k,
                out_c: oc,
                k: 1,
                stride: 1,
                pad: 0,
            },
            packed,
            w_scales,
            bias,
            x_q,
            y_q,
            relu,
        )
        .map_err(|e| n.unsupported(format!("{e}")))?;
        let floor = if relu { y_q.zero_point } else { -128 };
        let clamp = (lo > floor || hi < 127).then_some((lo, hi));
        self.touch(x.buf);
        let dst = self.new_buf(m * oc);
        // One image of 1 x m pixels.
        self.steps.push(Step::Conv {
            imp: ConvImpl::Dense(Box::new(layer)),
            batch: 1,
            in_h: 1,
            in_w: m,
            out_h: 1,
            row_len: m * oc,
            src: x.buf,
            dst,
            clamp,
        });
        let mut shape = xs[..xs.len() - 1].to_vec();
        shape.push(oc);
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape,
                layout: Layout::RowMajor,
                q: y_q,
            }),
        );
        Ok(())
    }

    /// An operand of a binary op: a quantized tensor or a per-tensor quantized constant.
    fn operand(
        &self,
        n: &Node,
        i: usize,
        qop_params: Option<(usize, usize)>,
    ) -> Result<(Option<T>, Option<Const>, QParams), EngineError> {
        match self.input(n, i)? {
            Val::Dq(t) => Ok((Some(t.clone()), None, t.q)),
            Val::Q(t) => {
                let q = match qop_params {
                    Some((s, z)) => self.qparams(n, s, z)?,
                    None => t.q,
                };
                Ok((Some(t), None, q))
            }
            Val::DqC {
                data, scales, zps, ..
            } if scales.len() == 1 => Ok((
                None,
                Some(data),
                QParams::new(scales[0], zps[0].clamp(-128, 127) as i8),
            )),
            Val::C(c) if qop_params.is_some() => {
                let (s, z) = qop_params.unwrap_or_default();
                let q = self.qparams(n, s, z)?;
                let data = match c.data {
                    ConstData::U8(v) => Const {
                        shape: c.shape.clone(),
                        data: ConstData::I8(v.iter().map(|&x| (x ^ 0x80) as i8).collect()),
                    },
                    _ => c,
                };
                Ok((None, Some(data), q))
            }
            v => Err(n.unsupported(format!(
                "input {i} is {}; it must be quantized per tensor",
                kind_name(&v)
            ))),
        }
    }

    fn binary(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let qop = n.op.starts_with("QLinear");
        let (a, ac, aq) = self.operand(n, 0, if qop { Some((1, 2)) } else { None })?;
        let (b, bc, bq) = self.operand(
            n,
            if qop { 3 } else { 1 },
            if qop { Some((4, 5)) } else { None },
        )?;
        let (y_q, (lo, hi), out_name) = self.out_q(n, if qop { Some((6, 7)) } else { None })?;
        let is_add = n.op.ends_with("Add");
        // Work in NHWC when any tensor operand is NHWC.
        let nhwc = [&a, &b].iter().any(|t| {
            t.as_ref()
                .map(|t| t.layout == Layout::Nhwc)
                .unwrap_or(false)
        });
        let mut ops = Vec::new();
        for (t, c) in [(a, ac), (b, bc)] {
            ops.push(match (t, c) {
                (Some(t), _) => {
                    let t = if nhwc && t.shape.len() == 4 {
                        self.nhwc(t, 1)?
                    } else {
                        self.row_major(t, 1)?
                    };
                    (t.shape.clone(), Some(t), None)
                }
                (None, Some(c)) => (c.shape.clone(), None, Some(c)),
                _ => return Err(invalid("binary operand missing".into())),
            });
        }
        let rank = ops.iter().map(|o| o.0.len()).max().unwrap_or(0);
        let pad = |s: &[usize]| {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (sa, sb) = (pad(&ops[0].0), pad(&ops[1].0));
        let mut out_shape = Vec::with_capacity(rank);
        for d in 0..rank {
            let (x, y) = (sa[d], sb[d]);
            if x != y && x != 1 && y != 1 {
                return Err(n.unsupported(format!(
                    "shapes {:?} and {:?} do not broadcast",
                    ops[0].0, ops[1].0
                )));
            }
            out_shape.push(x.max(y));
        }
        let use_nhwc = nhwc && rank == 4;
        let phys = |s: &[usize]| {
            if use_nhwc {
                vec![s[0], s[2], s[3], s[1]]
            } else {
                s.to_vec()
            }
        };
        let strides = |s: &[usize]| {
            let p = phys(s);
            let mut st = vec![0usize; rank];
            let mut acc = 1;
            for d in (0..rank).rev() {
                st[d] = if p[d] == 1 { 0 } else { acc };
                acc *= p[d];
            }
            st
        };
        let mut operands = Vec::new();
        for (o, s) in ops.iter().zip([&sa, &sb]) {
            operands.push(match (&o.1, &o.2) {
                (Some(t), _) => {
                    self.touch(t.buf);
                    super::program::Operand::Buf(t.buf)
                }
                (None, Some(c)) => {
                    let ConstData::I8(v) = &c.data else {
                        return Err(n.unsupported("constant operands must be int8 or uint8"));
                    };
                    // A rank-4 constant in NHWC work order: permute its data.
                    let v = if use_nhwc && s[1] > 1 && s[2] * s[3] > 1 {
                        let mut out = vec![0i8; v.len()];
                        let (n0, c0, h0, w0) = (s[0], s[1], s[2], s[3]);
                        for i0 in 0..n0 {
                            for ci in 0..c0 {
                                for y in 0..h0 {
                                    for x in 0..w0 {
                                        out[((i0 * h0 + y) * w0 + x) * c0 + ci] =
                                            v[((i0 * c0 + ci) * h0 + y) * w0 + x];
                                    }
                                }
                            }
                        }
                        out
                    } else {
                        v.clone()
                    };
                    super::program::Operand::Const(v)
                }
                _ => return Err(invalid("binary operand missing".into())),
            });
        }
        let op = Binary {
            kind: if is_add {
                let (ra, rb) = (aq.scale / y_q.scale, bq.scale / y_q.scale);
                let fixed = f32::from(y_q.zero_point)
                    - (ra * f32::from(aq.zero_point) + rb * f32::from(bq.zero_point));
                BinaryKind::Add { ra, rb, fixed }
            } else {
                BinaryKind::Mul
            },
            sa: aq.scale,
            sb: bq.scale,
            sy: y_q.scale,
            za: i32::from(aq.zero_point),
            zb: i32::from(bq.zero_point),
            zy: i32::from(y_q.zero_point),
            lo,
            hi,
            shape: phys(&out_shape),
            a_strides: strides(&sa),
            b_strides: strides(&sb),
        };
        let len: usize = out_shape.iter().product();
        let dst = self.new_buf(len);
        let mut it = operands.into_iter();
        let (oa, ob) = (
            it.next().unwrap_or(super::program::Operand::Buf(0)),
            it.next().unwrap_or(super::program::Operand::Buf(0)),
        );
        self.steps.push(Step::Binary {
            op: Box::new(op),
            a: oa,
            b: ob,
            n: len,
            dst,
        });
        let layout = if use_nhwc {
            Layout::Nhwc
        } else {
            Layout::RowMajor
        };
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape: out_shape,
                layout,
                q: y_q,
            }),
        );
        Ok(())
    }

    fn unary(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let qop = n.op.starts_with("QLinear");
        let t = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { t.q };
        let (y_q, (lo, hi), out_name) = self.out_q(n, if qop { Some((3, 4)) } else { None })?;
        let alpha = n.float(
            "alpha",
            if n.op.contains("HardSigmoid") {
                0.2
            } else {
                0.01
            },
        )?;
        let beta = n.float("beta", 0.5)?;
        let f: Box<dyn Fn(f32) -> f32> = match n.op.as_str() {
            "Sigmoid" | "QLinearSigmoid" => Box::new(|x: f32| 1.0 / (1.0 + (-x).exp())),
            "Tanh" => Box::new(|x: f32| x.tanh()),
            "HardSigmoid" => Box::new(move |x: f32| (alpha * x + beta).clamp(0.0, 1.0)),
            _ => Box::new(move |x: f32| if x >= 0.0 { x } else { alpha * x }),
        };
        let mut table = requant_table(x_q, y_q, f);
        for e in table.iter_mut() {
            *e = (*e).clamp(lo, hi);
        }
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len);
        self.steps.push(Step::Lut {
            table: Box::new(table),
            n: len,
            src: t.buf,
            dst,
        });
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                q: y_q,
                ..t
            }),
        );
        Ok(())
    }

    fn avg_pool(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let qop = n.op.starts_with("QLinear");
        let t = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { t.q };
        let (y_q, (lo, hi), out_name) = self.out_q(n, if qop { Some((3, 4)) } else { None })?;
        if qop && n.int("channels_last", 0)? != 0 {
            return Err(n.unsupported("channels_last = 1 is not supported"));
        }
        let t = self.nhwc(t, 1)?;
        let [b, c, h, w] = dims4(&t.shape);
        let global = n.op.contains("Global");
        let win = if global {
            Window {
                in_h: h,
                in_w: w,
                out_h: 1,
                out_w: 1,
                kh: h,
                kw: w,
                sh: 1,
                sw: 1,
                dh: 1,
                dw: 1,
                pt: 0,
                pl: 0,
            }
        } else {
            let k = n
                .ints("kernel_shape")?
                .ok_or_else(|| n.unsupported("kernel_shape is required"))?;
            if k.len() != 2 {
                return Err(n.unsupported("only 2-D pooling is supported"));
            }
            self.window(n, h, w, k[0] as usize, k[1] as usize)?
        };
        let p = AvgParams {
            x_zp: i32::from(x_q.zero_point),
            y_zp: i32::from(y_q.zero_point),
            x_scale: x_q.scale,
            y_scale: y_q.scale,
            count_include_pad: n.int("count_include_pad", 0)? != 0,
            lo,
            hi,
        };
        self.touch(t.buf);
        let dst = self.new_buf(b * c * win.out_h * win.out_w);
        self.steps.push(Step::AvgPool {
            win,
            c,
            batch: b,
            p,
            src: t.buf,
            dst,
        });
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape: vec![b, c, win.out_h, win.out_w],
                layout: Layout::Nhwc,
                q: y_q,
            }),
        );
        Ok(())
    }

    fn concat(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let qop = n.op == "QLinearConcat";
        // QLinearConcat: y_scale, y_zp, then (x, x_scale, x_zp) triples.
        let count = if qop {
            (n.inputs.len().saturating_sub(2)) / 3
        } else {
            n.inputs.len()
        };
        let mut parts = Vec::new();
        for k in 0..count {
            let idx = if qop { 2 + 3 * k } else { k };
            let (t, c, q) =
                self.operand(n, idx, if qop { Some((idx + 1, idx + 2)) } else { None })?;
            parts.push((t, c, q));
        }
        let first_shape = parts
            .first()
            .map(|p| {
                p.0.as_ref()
                    .map(|t| t.shape.clone())
                    .or_else(|| p.1.as_ref().map(|c| c.shape.clone()))
                    .unwrap_or_default()
            })
            .ok_or_else(|| n.unsupported("no inputs"))?;
        let rank = first_shape.len() as i64;
        let axis = n.int("axis", 1)?;
        let axis = if axis < 0 { axis + rank } else { axis } as usize;
        // Output quantization: QDQ with equal input scales may skip the Q (exact copy).
        let all_same = parts.windows(2).all(|w| w[0].2 == w[1].2);
        let (y_q, clamp, out_name, q_out) = if qop {
            let q = self.qparams(n, 0, 1)?;
            (q, (-128i8, 127i8), n.outputs[0].clone(), true)
        } else {
            match self.find_q(n) {
                Ok((q, clamp, chain, name)) => {
                    self.done.extend(chain);
                    (q, clamp, name, true)
                }
                Err(e) if all_same => {
                    let _ = e;
                    (parts[0].2, (-128, 127), n.outputs[0].clone(), false)
                }
                Err(e) => return Err(e),
            }
        };
        let nhwc = rank == 4
            && axis == 1
            && parts.iter().any(|p| {
                p.0.as_ref()
                    .map(|t| t.layout == Layout::Nhwc)
                    .unwrap_or(false)
            });
        let mut out_shape = first_shape.clone();
        out_shape[axis] = 0;
        let mut steps_parts = Vec::new();
        for (t, c, q) in parts {
            let (shape, operand) = match (t, c) {
                (Some(t), _) => {
                    // Conversions first; the reads are recorded just before the concat step.
                    let t = if nhwc {
                        self.nhwc(t, 1)?
                    } else {
                        self.row_major(t, 1)?
                    };
                    (t.shape.clone(), super::program::Operand::Buf(t.buf))
                }
                (None, Some(c)) => {
                    if nhwc {
                        return Err(
                            n.unsupported("constant inputs of a channel concat are not supported")
                        );
                    }
                    let ConstData::I8(v) = c.data else {
                        return Err(n.unsupported("constant inputs must be int8 or uint8"));
                    };
                    (c.shape.clone(), super::program::Operand::Const(v))
                }
                _ => return Err(invalid("concat operand missing".into())),
            };
            if shape.len() != first_shape.len()
                || shape
                    .iter()
                    .enumerate()
                    .any(|(d, &s)| d != axis && s != first_shape[d])
            {
                return Err(n.unsupported(format!(
                    "input shape {shape:?} does not match {first_shape:?} outside axis {axis}"
                )));
            }
            out_shape[axis] += shape[axis];
            let inner: usize = if nhwc {
                shape[1]
            } else {
                shape[axis..].iter().product()
            };
            let table = (q != y_q || clamp != (-128, 127)).then(|| {
                let mut t = requant_table(q, y_q, |x| x);
                for e in t.iter_mut() {
                    *e = (*e).clamp(clamp.0, clamp.1);
                }
                Box::new(t)
            });
            steps_parts.push((operand, inner, table));
        }
        for (operand, _, _) in &steps_parts {
            if let super::program::Operand::Buf(b) = operand {
                self.touch(*b);
            }
        }
        let outer: usize = if nhwc {
            out_shape[0] * out_shape[2] * out_shape[3]
        } else {
            out_shape[..axis].iter().product()
        };
        let len: usize = out_shape.iter().product();
        let dst = self.new_buf(len);
        self.steps.push(Step::Concat {
            outer,
            parts: steps_parts,
            dst,
        });
        let t = T {
            buf: dst,
            shape: out_shape,
            layout: if nhwc { Layout::Nhwc } else { Layout::RowMajor },
            q: y_q,
        };
        self.set(&out_name, if q_out { Val::Q(t) } else { Val::Dq(t) });
        Ok(())
    }

    fn resize(&mut self, n: &Node, _i: usize) -> Result<(), EngineError> {
        let t = match self.input(n, 0)? {
            Val::Dq(t) | Val::Q(t) => t,
            v => return Err(n.unsupported(format!("cannot resize {}", kind_name(&v)))),
        };
        let was_q = matches!(self.input(n, 0)?, Val::Q(_));
        let mode = n.string("mode", "nearest")?;
        let ctm = n.string(
            "coordinate_transformation_mode",
            if n.op == "Upsample" {
                "asymmetric"
            } else {
                "half_pixel"
            },
        )?;
        let nearest_mode = n.string("nearest_mode", "round_prefer_floor")?;
        if n.int("antialias", 0)? != 0 || n.ints("axes")?.is_some() {
            return Err(n.unsupported("antialias and axes are not supported"));
        }
        let t = self.nhwc(t, 1)?;
        let [b, c, h, w] = dims4(&t.shape);
        // Output size from `sizes` (input 3) or `scales` (input 2; Upsample: input 1).
        let scales_idx = if n.op == "Upsample" { 1 } else { 2 };
        let (oh, ow, sy, sx) = if n.input(3).is_some() {
            let s = self
                .konst(n, 3)?
                .to_i64()
                .ok_or_else(|| n.unsupported("sizes must be integers"))?;
            if s.len() != 4 || s[0] as usize != b || s[1] as usize != c {
                return Err(n.unsupported("sizes must keep batch and channels"));
            }
            let (oh, ow) = (s[2] as usize, s[3] as usize);
            (oh, ow, oh as f32 / h as f32, ow as f32 / w as f32)
        } else {
            let s = self.konst(n, scales_idx)?.to_f32();
            if s.len() != 4 || s[0] != 1.0 || s[1] != 1.0 {
                return Err(n.unsupported("scales must be 4 values with 1 for batch and channels"));
            }
            (
                (h as f32 * s[2]).floor() as usize,
                (w as f32 * s[3]).floor() as usize,
                s[2],
                s[3],
            )
        };
        if oh == 0 || ow == 0 {
            return Err(n.unsupported("the output would be empty"));
        }
        let linear = match mode.as_str() {
            "nearest" => false,
            "linear" | "bilinear" => true,
            m => return Err(n.unsupported(format!("mode {m} is not supported (nearest, linear)"))),
        };
        let taps = |out: usize, inp: usize, scale: f32| -> Result<Vec<Tap>, EngineError> {
            (0..out)
                .map(|o| {
                    let x = match ctm.as_str() {
                        "half_pixel" => (o as f32 + 0.5) / scale - 0.5,
                        "pytorch_half_pixel" => {
                            if out > 1 {
                                (o as f32 + 0.5) / scale - 0.5
                            } else {
                                0.0
                            }
                        }
                        "asymmetric" => o as f32 / scale,
                        "align_corners" => {
                            if out > 1 {
                                o as f32 * (inp - 1) as f32 / (out - 1) as f32
                            } else {
                                0.0
                            }
                        }
                        m => {
                            return Err(n.unsupported(format!(
                                "coordinate_transformation_mode {m} is not supported"
                            )))
                        }
                    };
                    let max = (inp - 1) as f32;
                    Ok(if linear {
                        let xc = x.clamp(0.0, max);
                        let i0 = xc.floor() as usize;
                        let i1 = (i0 + 1).min(inp - 1);
                        Tap {
                            i0,
                            i1,
                            w1: xc - i0 as f32,
                        }
                    } else {
                        let r = match nearest_mode.as_str() {
                            "round_prefer_floor" => {
                                if x.fract() == 0.5 {
                                    x.floor()
                                } else {
                                    x.round()
                                }
                            }
                            "round_prefer_ceil" => x.round(),
                            "floor" => x.floor(),
                            "ceil" => x.ceil(),
                            _ => x.round(),
                        };
                        let i = r.clamp(0.0, max) as usize;
                        Tap {
                            i0: i,
                            i1: i,
                            w1: 0.0,
                        }
                    })
                })
                .collect()
        };
        let ys = taps(oh, h, sy)?;
        let xs = taps(ow, w, sx)?;
        // Linear needs a requantization to the following Q; nearest is exact.
        let (y_q, out_name, is_q) = if linear && !was_q {
            let (q, _clamp, name) = self.out_q(n, None)?;
            (q, name, true)
        } else if linear {
            // QOperator form: ONNX Runtime resizes the int8 tensor itself, same quantization.
            (t.q, n.outputs[0].clone(), true)
        } else {
            (t.q, n.outputs[0].clone(), was_q)
        };
        self.touch(t.buf);
        let dst = self.new_buf(b * c * oh * ow);
        self.steps.push(Step::Resize {
            in_h: h,
            in_w: w,
            c,
            batch: b,
            ys,
            xs,
            linear,
            x_zp: i32::from(t.q.zero_point),
            y_zp: i32::from(y_q.zero_point),
            // ONNX Runtime's int8 linear Resize truncates the raw values: toward zero for
            // int8, which for uint8 (stored here as x ^ 0x80) is a floor.
            ratio: if linear && was_q {
                if n.input(0).map(|i| self.is_u8(i)).unwrap_or(false) {
                    -0.0
                } else {
                    0.0
                }
            } else {
                t.q.scale / y_q.scale
            },
            src: t.buf,
            dst,
        });
        let out = T {
            buf: dst,
            shape: vec![b, c, oh, ow],
            layout: Layout::Nhwc,
            q: y_q,
        };
        self.set(&out_name, if is_q { Val::Q(out) } else { Val::Dq(out) });
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
