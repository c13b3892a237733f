//! Shape arithmetic evaluated at load: `Shape` of any tensor (its static shape), and
//! `Gather`, `Concat`, `Cast`, `Slice`, `Add`, `Sub`, `Mul`, `Div`, `Equal`, `Where`,
//! `ConstantOfShape`, `Range`, `Expand`, `Tile`, `Mod`, `Sqrt`, the comparisons and logical
//! operators and the reductions (`ReduceSum`, `ReduceMax`, ...: `reduce`) of constants (YOLOv8's anchor
//! grid is `Range` and `Expand` of constants; a transformer's head split and `√d` are `Mod`
//! and `Sqrt` of its shape), as PyTorch's exporter writes
//! `x.view(x.size(0), -1)` or `x.reshape(b, c, h * w)`: `Shape → Gather → Unsqueeze →
//! Concat → Reshape`. Each such node becomes a constant (`Val::C`) that `Reshape`,
//! `Unsqueeze`, `Resize`, ... read as if the file had stored it, so a model needs no
//! onnxsim pass first.
//!
//! Subgraphs of parameters fold too: a float operator ([`FLOAT_FOLDS`]: the activations,
//! `Exp`, `Log`, `Sqrt`, arithmetic, `MatMul`, `Gemm`) whose inputs are all float
//! constants, dequantized ones (`DequantizeLinear` of an initializer) included, becomes an
//! `f32` constant (Swin-V2's logit scale `Exp(Clip(p))` and its position-bias MLP over a
//! constant coordinate table), and a dequantized constant moves through `Reshape`,
//! `Transpose`, `Gather`, `Slice`, ... keeping its integers (`Lowerer::fold_dequantized`).
//! The activations use the engine's own `f32` kernels, so a folded value has the bits a
//! computed one would; a product sums in `f32` in index order (ONNX Runtime, which computes
//! such subgraphs at every run, may round a last bit differently).
//!
//! Contract: a node folds only when every input is a constant (`Shape` only needs its
//! input's static shape); the result is what ONNX Runtime computes for those operators
//! (numpy broadcasting, integer division truncating toward zero as C does, float arithmetic
//! in `f32`). A node with a computed input is left to the engine (which refuses the
//! arithmetic ones with its usual message). Cost: load time only, proportional to the
//! constants' sizes; nothing runs per frame. Never panics: bad indices, shapes that do not
//! broadcast and types it does not handle are errors naming the node.

use super::super::graph::dtype;
use super::*;

mod params;
use params::DEQUANTIZED_FOLDS;
mod reduce;

/// Constants larger than this are not folded (they are weights, not shapes).
const MAX_FOLDED: usize = 1 << 20;

impl Lowerer<'_> {
    /// Folds `n` into a constant when it is shape arithmetic on constants (see the module
    /// docs). Returns whether it did.
    pub(super) fn fold_constant(&mut self, n: &Node) -> Result<bool, EngineError> {
        let c = match n.op.as_str() {
            "Shape" => {
                let shape = self.static_shape(n)?;
                let rank = shape.len() as i64;
                let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
                let start = clamp(n.int("start", 0)?);
                let end = clamp(n.int("end", rank)?).max(start);
                let dims: Vec<i64> = shape[start..end].iter().map(|&d| d as i64).collect();
                Const {
                    shape: vec![dims.len()],
                    data: ConstData::I64(dims),
                }
            }
            "Gather" | "Concat" | "Cast" | "Slice" | "Add" | "Sub" | "Mul" | "Div" | "Pow"
            | "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or"
            | "Not" | "Where" | "ConstantOfShape" | "Range" | "Expand" | "Mod" | "Sqrt"
            | "ScatterND" | "Transpose" | "Xor" | "Tile" | "ReduceSum" | "ReduceMax"
            | "ReduceMin" | "ReduceProd" | "ReduceMean" => {
                let dequantize = DEQUANTIZED_FOLDS.contains(&n.op.as_str());
                let Some(ins) = self.constant_inputs(n, dequantize) else {
                    return self.fold_float(n);
                };
                if ins.iter().flatten().any(|c| c.len() > MAX_FOLDED) {
                    return Ok(false);
                }
                match n.op.as_str() {
                    "Gather" => gather(n, &ins)?,
                    "Concat" => concat(n, &ins)?,
                    "Cast" => cast(n, arg(n, &ins, 0)?)?,
                    "Slice" => slice(n, &ins)?,
                    "ConstantOfShape" => constant_of_shape(n, arg(n, &ins, 0)?)?,
                    "Range" => range(n, &ins)?,
                    "Where" => where_(n, &ins)?,
                    "Expand" => expand(n, arg(n, &ins, 0)?, arg(n, &ins, 1)?)?,
                    "Sqrt" => sqrt(n, arg(n, &ins, 0)?)?,
                    "Not" => not(n, arg(n, &ins, 0)?)?,
                    "ScatterND" => scatter_nd(n, &ins)?,
                    "Transpose" => transpose(n, arg(n, &ins, 0)?)?,
                    "Tile" => reduce::tile(n, &ins)?,
                    op if op.starts_with("Reduce") => reduce::reduce(n, &ins)?,
                    op => binary(n, op, arg(n, &ins, 0)?, arg(n, &ins, 1)?)?,
                }
            }
            _ => return self.fold_float(n),
        };
        self.set(&n.outputs[0], Val::C(c));
        Ok(true)
    }

    /// The shape of `n`'s first input, whatever its kind.
    fn static_shape(&self, n: &Node) -> Result<Vec<usize>, EngineError> {
        Ok(match self.input(n, 0)? {
            Val::F32(t) | Val::Q(t) | Val::Dq(t) | Val::I { t, .. } => t.shape,
            Val::C(c) | Val::DqC { data: c, .. } => c.shape,
        })
    }

    /// Every input of `n` as a constant (`None` for an omitted optional input), or `None`
    /// when one is computed; with `dequantize`, a dequantized constant as its `f32` values.
    fn constant_inputs(&self, n: &Node, dequantize: bool) -> Option<Vec<Option<Const>>> {
        n.inputs
            .iter()
            .map(|name| {
                if name.is_empty() {
                    return Some(None);
                }
                match self.vals.get(name) {
                    Some(Val::C(c)) => Some(Some(c.clone())),
                    Some(v @ Val::DqC { .. }) if dequantize => {
                        super::float::constant_f32(v).map(Some)
                    }
                    _ => None,
                }
            })
            .collect()
    }
}

fn arg<'a>(n: &Node, ins: &'a [Option<Const>], i: usize) -> Result<&'a Const, EngineError> {
    ins.get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| n.unsupported(format!("input {i} is missing")))
}

/// A constant's values as `f64` (exact for every integer a shape holds).
fn values(c: &Const) -> Vec<f64> {
    match &c.data {
        ConstData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        ConstData::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        ConstData::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        ConstData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        ConstData::I64(v) => v.iter().map(|&x| x as f64).collect(),
    }
}

/// `c`'s elements at `idx` (in order), same type and the given shape.
fn pick(c: &Const, idx: &[usize], shape: Vec<usize>) -> Const {
    fn take<T: Copy>(v: &[T], idx: &[usize]) -> Vec<T> {
        idx.iter().map(|&i| v[i]).collect()
    }
    let data = match &c.data {
        ConstData::F32(v) => ConstData::F32(take(v, idx)),
        ConstData::I8(v) => ConstData::I8(take(v, idx)),
        ConstData::U8(v) => ConstData::U8(take(v, idx)),
        ConstData::I32(v) => ConstData::I32(take(v, idx)),
        ConstData::I64(v) => ConstData::I64(take(v, idx)),
    };
    Const { shape, data }
}

/// `axis` (possibly negative) of a rank-`rank` tensor, or an error naming the node.
fn norm_axis(n: &Node, axis: i64, rank: usize) -> Result<usize, EngineError> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if (0..rank.max(1) as i64).contains(&a) {
        Ok(a as usize)
    } else {
        Err(n.unsupported(format!("axis {axis} is out of range for rank {rank}")))
    }
}

fn gather(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let (data, idx) = (arg(n, ins, 0)?, arg(n, ins, 1)?);
    let rank = data.shape.len();
    if rank == 0 {
        return Err(n.unsupported("Gather of a scalar"));
    }
    let axis = norm_axis(n, n.int("axis", 0)?, rank)?;
    let dim = data.shape[axis];
    let indices = idx
        .to_i64()
        .ok_or_else(|| n.unsupported("Gather indices must be integers"))?;
    let indices: Vec<usize> = indices
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + dim as i64 } else { i };
            if (0..dim as i64).contains(&j) {
                Ok(j as usize)
            } else {
                Err(n.unsupported(format!("Gather index {i} is out of range for {dim}")))
            }
        })
        .collect::<Result<_, _>>()?;
    let outer: usize = data.shape[..axis].iter().product();
    let inner: usize = data.shape[axis + 1..].iter().product();
    let mut at = Vec::with_capacity(outer * indices.len() * inner);
    for o in 0..outer {
        for &i in &indices {
            at.extend((0..inner).map(|k| (o * dim + i) * inner + k));
        }
    }
    let shape = [&data.shape[..axis], &idx.shape[..], &data.shape[axis + 1..]].concat();
    Ok(pick(data, &at, shape))
}

fn concat(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let parts: Vec<&Const> = ins.iter().flatten().collect();
    let first = parts
        .first()
        .ok_or_else(|| n.unsupported("Concat of nothing"))?;
    let rank = first.shape.len();
    let axis = norm_axis(n, n.int("axis", 0)?, rank)?;
    let same = |c: &Const| {
        c.shape.len() == rank
            && std::mem::discriminant(&c.data) == std::mem::discriminant(&first.data)
            && (0..rank).all(|d| d == axis || c.shape[d] == first.shape[d])
    };
    if !parts.iter().all(|c| same(c)) {
        return Err(n.unsupported("Concat of constants of other types or shapes"));
    }
    let outer: usize = first.shape[..axis].iter().product();
    let inner: usize = first.shape[axis + 1..].iter().product();
    let mut shape = first.shape.clone();
    shape[axis] = parts.iter().map(|c| c.shape[axis]).sum();
    // One flat constant of all parts, then the indices of the concatenation into it.
    let mut offset = 0;
    let mut starts = Vec::new();
    for c in &parts {
        starts.push(offset);
        offset += c.len();
    }
    let mut at = Vec::with_capacity(offset);
    for o in 0..outer {
        for (c, s) in parts.iter().zip(&starts) {
            let block = c.shape[axis] * inner;
            at.extend((0..block).map(|k| s + o * block + k));
        }
    }
    let all = Const {
        shape: vec![offset],
        data: match &first.data {
            ConstData::F32(_) => ConstData::F32(parts.iter().flat_map(|c| c.to_f32()).collect()),
            _ => ConstData::I64(
                parts
                    .iter()
                    .flat_map(|c| c.to_i64().unwrap_or_default())
                    .collect(),
            ),
        },
    };
    let out = pick(&all, &at, shape);
    // Integer parts keep their type.
    Ok(match &first.data {
        ConstData::F32(_) | ConstData::I64(_) => out,
        _ => cast_to(n, &out, elem_code(&first.data))?,
    })
}

fn elem_code(d: &ConstData) -> i64 {
    match d {
        ConstData::F32(_) => i64::from(dtype::FLOAT),
        ConstData::I8(_) => i64::from(dtype::INT8),
        ConstData::U8(_) => i64::from(dtype::UINT8),
        ConstData::I32(_) => i64::from(dtype::INT32),
        ConstData::I64(_) => i64::from(dtype::INT64),
    }
}

fn cast(n: &Node, c: &Const) -> Result<Const, EngineError> {
    let to = n
        .attrs
        .get("to")
        .and_then(|a| match a {
            Attr::Int(v) => Some(*v),
            _ => None,
        })
        .ok_or_else(|| n.unsupported("Cast needs its `to` attribute"))?;
    cast_to(n, c, to)
}

/// `c` converted to ONNX element type `to` (float to integer truncates toward zero, as C
/// casts do; integers saturate into the narrower types' ranges).
fn cast_to(n: &Node, c: &Const, to: i64) -> Result<Const, EngineError> {
    let v = values(c);
    let data = match i32::try_from(to).unwrap_or(-1) {
        dtype::FLOAT => ConstData::F32(v.iter().map(|&x| x as f32).collect()),
        dtype::INT64 => ConstData::I64(v.iter().map(|&x| x as i64).collect()),
        dtype::INT32 => ConstData::I32(v.iter().map(|&x| x as i32).collect()),
        dtype::INT8 => ConstData::I8(v.iter().map(|&x| x as i8).collect()),
        dtype::UINT8 => ConstData::U8(v.iter().map(|&x| x as u8).collect()),
        dtype::BOOL => ConstData::U8(v.iter().map(|&x| u8::from(x != 0.0)).collect()),
        _ => {
            return Err(n.unsupported(format!(
                "Cast of a constant to element type {to} is not supported (float32, int64, \
                 int32, int8, uint8, bool)"
            )))
        }
    };
    Ok(Const {
        shape: c.shape.clone(),
        data,
    })
}

/// Numpy broadcasting of two shapes, or `None`.
pub(super) fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], d: usize| {
        let off = rank - s.len();
        if d < off {
            1
        } else {
            s[d - off]
        }
    };
    (0..rank)
        .map(|d| match (dim(a, d), dim(b, d)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The flat index into a tensor of `shape` (broadcast to `out`) of output element `i`.
pub(super) fn broadcast_index(shape: &[usize], out: &[usize], mut i: usize) -> usize {
    let (mut idx, mut stride) = (0, 1);
    for d in (0..out.len()).rev() {
        let coord = i % out[d];
        i /= out[d];
        let off = out.len() - shape.len();
        if d >= off {
            let s = shape[d - off];
            if s != 1 {
                idx += coord * stride;
            }
            stride *= s;
        }
    }
    idx
}

fn binary(n: &Node, op: &str, a: &Const, b: &Const) -> Result<Const, EngineError> {
    let fmod = n.int("fmod", 0)? != 0;
    if op == "Mod" && !fmod && matches!(a.data, ConstData::F32(_)) {
        return Err(n.unsupported("Mod of floats needs fmod = 1"));
    }
    let shape = broadcast(&a.shape, &b.shape).ok_or_else(|| {
        n.unsupported(format!(
            "shapes {:?} and {:?} do not broadcast",
            a.shape, b.shape
        ))
    })?;
    let len: usize = shape.iter().product();
    let pairs = (0..len).map(|i| {
        (
            broadcast_index(&a.shape, &shape, i),
            broadcast_index(&b.shape, &shape, i),
        )
    });
    // ONNX Runtime squares and cubes by multiplying when the exponent is one scalar.
    let scalar_exponent = b.len() == 1;
    let data = match (&a.data, &b.data) {
        (ConstData::F32(x), ConstData::F32(y)) => {
            if is_predicate(op) {
                let v = pairs.map(|(i, j)| u8::from(predicate(op, x[i], y[j])));
                ConstData::U8(v.collect())
            } else {
                let f = |p: f32, q: f32| match op {
                    "Add" => p + q,
                    "Sub" => p - q,
                    "Mul" => p * q,
                    "Div" => p / q,
                    "Pow" if scalar_exponent && q == 2.0 => p * p,
                    "Pow" if scalar_exponent && q == 3.0 => p * p * p,
                    "Pow" => redline_runtime::det_math::powf(p, q),
                    // ONNX requires fmod = 1 for floats: C's fmod, the dividend's sign.
                    _ => p % q,
                };
                ConstData::F32(pairs.map(|(i, j)| f(x[i], y[j])).collect())
            }
        }
        (ConstData::F32(_), _) | (_, ConstData::F32(_)) => {
            return Err(n.unsupported("arithmetic on a float and an integer constant"))
        }
        _ => {
            let (x, y) = (
                a.to_i64().unwrap_or_default(),
                b.to_i64().unwrap_or_default(),
            );
            if is_predicate(op) {
                let v = pairs.map(|(i, j)| u8::from(predicate(op, x[i], y[j])));
                let data = ConstData::U8(v.collect());
                return Ok(Const { shape, data });
            }
            let mut out = Vec::with_capacity(len);
            for (i, j) in pairs {
                let (p, q) = (x[i], y[j]);
                out.push(match op {
                    "Add" => p.wrapping_add(q),
                    "Sub" => p.wrapping_sub(q),
                    "Mul" => p.wrapping_mul(q),
                    "Div" => p
                        .checked_div(q)
                        .ok_or_else(|| n.unsupported("integer division by zero"))?,
                    // As ONNX Runtime: `pow` in double, converted back.
                    "Pow" => redline_runtime::det_math::powf(p as f64, q as f64) as i64,
                    // fmod = 1: the dividend's sign (C); 0: the divisor's (Python).
                    _ => {
                        let r = p
                            .checked_rem(q)
                            .ok_or_else(|| n.unsupported("integer modulo by zero"))?;
                        if fmod || r == 0 || (r < 0) == (q < 0) {
                            r
                        } else {
                            r + q
                        }
                    }
                });
            }
            let c = Const {
                shape: shape.clone(),
                data: ConstData::I64(out),
            };
            return cast_to(n, &c, elem_code(&a.data));
        }
    };
    Ok(Const { shape, data })
}

/// Whether `op` is a comparison or logical operator (its result is a bool tensor).
fn is_predicate(op: &str) -> bool {
    matches!(
        op,
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or" | "Xor"
    )
}

/// The comparison or logical operator `op` (see [`is_predicate`]) of two elements; `And`
/// and `Or` read nonzero as true.
fn predicate<T: PartialOrd + Default>(op: &str, p: T, q: T) -> bool {
    let zero = T::default();
    match op {
        "Equal" => p == q,
        "Less" => p < q,
        "Greater" => p > q,
        "LessOrEqual" => p <= q,
        "GreaterOrEqual" => p >= q,
        "And" => p != zero && q != zero,
        "Xor" => (p != zero) != (q != zero),
        _ => p != zero || q != zero,
    }
}

/// ONNX `Transpose` of a constant (`perm`, or reversed axes).
pub(super) fn transpose(n: &Node, x: &Const) -> Result<Const, EngineError> {
    let rank = x.shape.len();
    let perm = super::shape::transpose_perm(n, rank)?;
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let in_strides = row_major_strides(&x.shape);
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let at: Vec<usize> = (0..x.len())
        .map(|i| strided_offset(i, &shape, &strides))
        .collect();
    Ok(pick(x, &at, shape))
}

/// ONNX `Not` of a bool constant.
fn not(n: &Node, x: &Const) -> Result<Const, EngineError> {
    let ConstData::U8(v) = &x.data else {
        return Err(n.unsupported("Not of a constant that is not bool"));
    };
    Ok(Const {
        shape: x.shape.clone(),
        data: ConstData::U8(v.iter().map(|&b| u8::from(b == 0)).collect()),
    })
}

/// ONNX `ScatterND` of constants (a shifted-window attention's mask is written this way):
/// `data` with the slices `indices` names replaced by (or, with `reduction`, combined with)
/// `updates`, in the order the indices are listed.
fn scatter_nd(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let (data, indices, updates) = (arg(n, ins, 0)?, arg(n, ins, 1)?, arg(n, ins, 2)?);
    let reduction = n.string("reduction", "none")?;
    if std::mem::discriminant(&data.data) != std::mem::discriminant(&updates.data) {
        return Err(n.unsupported("ScatterND's data and updates differ in type"));
    }
    let idx = indices
        .to_i64()
        .ok_or_else(|| n.unsupported("ScatterND's indices must be integers"))?;
    let k = *indices
        .shape
        .last()
        .ok_or_else(|| n.unsupported("ScatterND's indices must have rank 1 or more"))?;
    let rank = data.shape.len();
    let lead = &indices.shape[..indices.shape.len() - 1];
    let expect = [lead, &data.shape[k.min(rank)..]].concat();
    if k == 0 || k > rank || updates.shape != expect {
        return Err(n.unsupported(format!(
            "ScatterND of data {:?}, indices {:?} and updates {:?}: the shapes do not fit",
            data.shape, indices.shape, updates.shape
        )));
    }
    let slice: usize = data.shape[k..].iter().product();
    // Every updated element's (destination in data, source in updates), in order.
    let mut at: Vec<usize> = (0..data.len()).collect();
    let mut writes = Vec::with_capacity(updates.len());
    for (u, tuple) in idx.chunks(k).enumerate() {
        let mut base = 0usize;
        for (d, &i) in tuple.iter().enumerate() {
            let dim = data.shape[d] as i64;
            let j = if i < 0 { i + dim } else { i };
            if !(0..dim).contains(&j) {
                return Err(n.unsupported(format!(
                    "ScatterND index {i} is out of range for dimension {d} of size {dim}"
                )));
            }
            base = base * data.shape[d] + j as usize;
        }
        for e in 0..slice {
            writes.push((base * slice + e, u * slice + e));
        }
    }
    if reduction == "none" {
        // Replacement: the last write to an element wins, as the indices are applied in order.
        for &(dst, src) in &writes {
            at[dst] = data.len() + src;
        }
        return Ok(pick(&concat_flat(data, updates), &at, data.shape.clone()));
    }
    fn reduce<T: Copy + PartialOrd + std::ops::Add<Output = T> + std::ops::Mul<Output = T>>(
        how: &str,
        v: &mut [T],
        u: &[T],
        writes: &[(usize, usize)],
    ) -> bool {
        for &(dst, src) in writes {
            let (p, q) = (v[dst], u[src]);
            v[dst] = match how {
                "add" => p + q,
                "mul" => p * q,
                "max" if q > p => q,
                "min" if q < p => q,
                "max" | "min" => p,
                _ => return false,
            };
        }
        true
    }
    let c = match (&data.data, &updates.data) {
        (ConstData::F32(v), ConstData::F32(u)) => {
            let mut v = v.clone();
            reduce(&reduction, &mut v, u, &writes).then_some(ConstData::F32(v))
        }
        _ => {
            let mut v = data.to_i64().unwrap_or_default();
            let u = updates.to_i64().unwrap_or_default();
            reduce(&reduction, &mut v, &u, &writes).then_some(ConstData::I64(v))
        }
    }
    .ok_or_else(|| n.unsupported(format!("ScatterND reduction {reduction:?}")))?;
    let c = Const {
        shape: data.shape.clone(),
        data: c,
    };
    cast_to(n, &c, elem_code(&data.data))
}

fn where_(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let (cond, x, y) = (arg(n, ins, 0)?, arg(n, ins, 1)?, arg(n, ins, 2)?);
    if std::mem::discriminant(&x.data) != std::mem::discriminant(&y.data) {
        return Err(n.unsupported("Where of constants of two types"));
    }
    let shape = broadcast(&cond.shape, &x.shape)
        .and_then(|s| broadcast(&s, &y.shape))
        .ok_or_else(|| n.unsupported("Where's shapes do not broadcast"))?;
    let c = values(cond);
    let len: usize = shape.iter().product();
    // Both branches laid end to end; pick from the first or the second.
    let both = concat_flat(x, y);
    let at: Vec<usize> = (0..len)
        .map(|i| {
            if c[broadcast_index(&cond.shape, &shape, i)] != 0.0 {
                broadcast_index(&x.shape, &shape, i)
            } else {
                x.len() + broadcast_index(&y.shape, &shape, i)
            }
        })
        .collect();
    Ok(pick(&both, &at, shape))
}

/// `x`'s and `y`'s elements (same type) in one flat constant.
fn concat_flat(x: &Const, y: &Const) -> Const {
    fn join<T: Copy>(a: &[T], b: &[T]) -> Vec<T> {
        [a, b].concat()
    }
    let data = match (&x.data, &y.data) {
        (ConstData::F32(a), ConstData::F32(b)) => ConstData::F32(join(a, b)),
        (ConstData::I8(a), ConstData::I8(b)) => ConstData::I8(join(a, b)),
        (ConstData::U8(a), ConstData::U8(b)) => ConstData::U8(join(a, b)),
        (ConstData::I32(a), ConstData::I32(b)) => ConstData::I32(join(a, b)),
        _ => ConstData::I64(
            [
                x.to_i64().unwrap_or_default(),
                y.to_i64().unwrap_or_default(),
            ]
            .concat(),
        ),
    };
    Const {
        shape: vec![x.len() + y.len()],
        data,
    }
}

/// `Slice` of a constant along any axes, positive or negative steps.
fn slice(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let data = arg(n, ins, 0)?;
    let ints = |i: usize| -> Result<Option<Vec<i64>>, EngineError> {
        ins.get(i)
            .and_then(Option::as_ref)
            .map(|c| {
                c.to_i64()
                    .ok_or_else(|| n.unsupported(format!("input {i} must hold integers")))
            })
            .transpose()
    };
    let (starts, ends) = match (ints(1)?, ints(2)?) {
        (Some(s), Some(e)) => (s, e),
        // Opset < 10: attributes.
        _ => (
            n.ints("starts")?.unwrap_or_default(),
            n.ints("ends")?.unwrap_or_default(),
        ),
    };
    let rank = data.shape.len();
    let axes = match ints(3)? {
        Some(a) => a,
        None => n
            .ints("axes")?
            .unwrap_or_else(|| (0..starts.len() as i64).collect()),
    };
    let steps = ints(4)?.unwrap_or_else(|| vec![1; starts.len()]);
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(n.unsupported("starts, ends, axes and steps differ in length"));
    }
    // Per axis: (first index, step, count).
    let mut sel: Vec<(i64, i64, usize)> = data.shape.iter().map(|&d| (0, 1, d)).collect();
    for k in 0..starts.len() {
        let a = norm_axis(n, axes[k], rank)?;
        let (dim, step) = (data.shape[a] as i64, steps[k]);
        if step == 0 {
            return Err(n.unsupported("a Slice step of 0"));
        }
        let fix = |v: i64| if v < 0 { v + dim } else { v };
        let (first, count) = if step > 0 {
            let s = fix(starts[k]).clamp(0, dim);
            let e = fix(ends[k]).clamp(0, dim);
            (s, if e > s { (e - s + step - 1) / step } else { 0 })
        } else {
            let s = fix(starts[k]).clamp(-1, dim - 1);
            let e = fix(ends[k]).clamp(-1, dim - 1);
            (
                s,
                if s > e {
                    (s - e + (-step) - 1) / (-step)
                } else {
                    0
                },
            )
        };
        sel[a] = (first, step, count as usize);
    }
    let shape: Vec<usize> = sel.iter().map(|s| s.2).collect();
    let len: usize = shape.iter().product();
    let at: Vec<usize> = (0..len)
        .map(|mut i| {
            let (mut idx, mut stride) = (0usize, 1usize);
            for d in (0..rank).rev() {
                let coord = i % shape[d];
                i /= shape[d];
                let (first, step, _) = sel[d];
                idx += (first + coord as i64 * step) as usize * stride;
                stride *= data.shape[d];
            }
            idx
        })
        .collect();
    Ok(pick(data, &at, shape))
}

/// ONNX `Sqrt` of a float constant (an attention's `√d` from the shape), in `f32`.
fn sqrt(n: &Node, x: &Const) -> Result<Const, EngineError> {
    let ConstData::F32(v) = &x.data else {
        return Err(n.unsupported("Sqrt of an integer constant"));
    };
    Ok(Const {
        shape: x.shape.clone(),
        data: ConstData::F32(v.iter().map(|v| v.sqrt()).collect()),
    })
}

/// ONNX `Expand`: `x` broadcast (both ways, as numpy) with the shape `shape` holds.
fn expand(n: &Node, x: &Const, shape: &Const) -> Result<Const, EngineError> {
    let dims = shape
        .to_i64()
        .filter(|d| d.iter().all(|&v| v >= 0))
        .ok_or_else(|| n.unsupported("Expand's shape must be non-negative integers"))?;
    let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let out = broadcast(&x.shape, &dims).ok_or_else(|| {
        n.unsupported(format!(
            "Expand of a {:?} constant to {dims:?}: the shapes do not broadcast",
            x.shape
        ))
    })?;
    let len: usize = out.iter().product();
    if len > MAX_FOLDED {
        return Err(n.unsupported(format!("a constant of {len} elements")));
    }
    let at: Vec<usize> = (0..len)
        .map(|i| broadcast_index(&x.shape, &out, i))
        .collect();
    Ok(pick(x, &at, out))
}

fn constant_of_shape(n: &Node, shape: &Const) -> Result<Const, EngineError> {
    let dims = shape
        .to_i64()
        .ok_or_else(|| n.unsupported("ConstantOfShape's shape must be integers"))?;
    if dims.iter().any(|&d| d < 0) {
        return Err(n.unsupported(format!("negative dimension in {dims:?}")));
    }
    let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let len: usize = shape.iter().product();
    if len > MAX_FOLDED {
        return Err(n.unsupported(format!("a constant of {len} elements")));
    }
    let value = match n.attrs.get("value") {
        Some(Attr::Tensor(c)) if c.len() == 1 => c.clone(),
        Some(_) => return Err(n.unsupported("the value must be one element")),
        None => Const {
            shape: vec![1],
            data: ConstData::F32(vec![0.0]),
        },
    };
    Ok(pick(&value, &vec![0; len], shape))
}

fn range(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let scalar = |i: usize| -> Result<f64, EngineError> {
        values(arg(n, ins, i)?)
            .first()
            .copied()
            .ok_or_else(|| n.unsupported(format!("input {i} is empty")))
    };
    let (start, limit, delta) = (scalar(0)?, scalar(1)?, scalar(2)?);
    if delta == 0.0 {
        return Err(n.unsupported("a Range delta of 0"));
    }
    let count = ((limit - start) / delta).ceil().max(0.0) as usize;
    if count > MAX_FOLDED {
        return Err(n.unsupported(format!("a Range of {count} elements")));
    }
    match &arg(n, ins, 0)?.data {
        // ONNX Runtime adds `delta` to a running value in the tensor's type.
        ConstData::F32(_) => {
            let (mut x, d) = (start as f32, delta as f32);
            let v = (0..count)
                .map(|_| {
                    let y = x;
                    x += d;
                    y
                })
                .collect();
            Ok(Const {
                shape: vec![count],
                data: ConstData::F32(v),
            })
        }
        d => {
            let (s, step) = (start as i64, delta as i64);
            let v = (0..count as i64).map(|i| s + i * step).collect();
            let c = Const {
                shape: vec![count],
                data: ConstData::I64(v),
            };
            cast_to(n, &c, elem_code(d))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn node(op: &str, attrs: &[(&str, Attr)]) -> Node {
        Node {
            name: format!("{op}_test"),
            op: op.to_string(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec!["y".into()],
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    fn ints(shape: &[usize], v: &[i64]) -> Option<Const> {
        Some(Const {
            shape: shape.to_vec(),
            data: ConstData::I64(v.to_vec()),
        })
    }

    pub(super) fn floats(shape: &[usize], v: &[f32]) -> Const {
        Const {
            shape: shape.to_vec(),
            data: ConstData::F32(v.to_vec()),
        }
    }

    #[test]
    fn slices_gathers_and_broadcasts_as_numpy_does() {
        // x = arange(12).reshape(3, 4); x[::-1, 3:0:-2] = [[11, 9], [7, 5], [3, 1]].
        let x = ints(&[3, 4], &(0..12).collect::<Vec<_>>());
        let s = slice(
            &node("Slice", &[]),
            &[
                x.clone(),
                ints(&[2], &[-1, 3]),
                ints(&[2], &[i64::MIN, 0]),
                ints(&[2], &[0, 1]),
                ints(&[2], &[-1, -2]),
            ],
        )
        .unwrap();
        assert_eq!(s, ints(&[3, 2], &[11, 9, 7, 5, 3, 1]).unwrap());
        // x[:, [-1, 0]] (Gather axis 1, a negative index).
        let gather_1 = node("Gather", &[("axis", Attr::Int(1))]);
        let g = gather(&gather_1, &[x.clone(), ints(&[2], &[-1, 0])]).unwrap();
        assert_eq!(g, ints(&[3, 2], &[3, 0, 7, 4, 11, 8]).unwrap());
        assert!(gather(&gather_1, &[x.clone(), ints(&[1], &[4])]).is_err());
        // [3, 1] - [4] broadcasts to [3, 4]; integer division truncates toward zero.
        let col = ints(&[3, 1], &[10, -7, 0]).unwrap();
        let row = ints(&[4], &[1, 2, 3, 4]).unwrap();
        let d = binary(&node("Div", &[]), "Div", &col, &row).unwrap();
        assert_eq!(
            d,
            ints(&[3, 4], &[10, 5, 3, 2, -7, -3, -2, -1, 0, 0, 0, 0]).unwrap()
        );
        let bad = ints(&[2], &[1, 2]).unwrap();
        assert!(binary(&node("Add", &[]), "Add", &row, &bad).is_err());
        let zero = ints(&[1], &[0]).unwrap();
        assert!(binary(&node("Div", &[]), "Div", &row, &zero).is_err());
    }

    /// `Mod` with the divisor's sign (Python, fmod = 0) and the dividend's (C, fmod = 1),
    /// `Sqrt` of floats, and `Expand` both ways, as numpy computes them.
    #[test]
    fn mod_sqrt_and_expand_as_numpy_does() {
        let p = ints(&[4], &[7, -7, 7, -7]).unwrap();
        let q = ints(&[4], &[3, 3, -3, -3]).unwrap();
        let python = binary(&node("Mod", &[]), "Mod", &p, &q).unwrap();
        assert_eq!(python, ints(&[4], &[1, 2, -2, -1]).unwrap());
        let c = binary(&node("Mod", &[("fmod", Attr::Int(1))]), "Mod", &p, &q).unwrap();
        assert_eq!(c, ints(&[4], &[1, -1, 1, -1]).unwrap());
        let zero = ints(&[1], &[0]).unwrap();
        assert!(binary(&node("Mod", &[]), "Mod", &p, &zero).is_err());
        let f = Const {
            shape: vec![2],
            data: ConstData::F32(vec![64.0, 2.0]),
        };
        assert!(
            binary(&node("Mod", &[]), "Mod", &f, &f).is_err(),
            "floats need fmod = 1"
        );
        let r = sqrt(&node("Sqrt", &[]), &f).unwrap();
        assert_eq!(r.data, ConstData::F32(vec![8.0, std::f32::consts::SQRT_2]));
        // [3, 1] expanded to [2, 1, 4]: [2, 3, 4]; a shape of 1 keeps the input's 3.
        let col = ints(&[3, 1], &[1, 2, 3]).unwrap();
        let e = expand(&node("Expand", &[]), &col, &ints(&[3], &[2, 1, 4]).unwrap()).unwrap();
        assert_eq!(e.shape, vec![2, 3, 4]);
        assert_eq!(
            e.to_i64().unwrap(),
            [[1i64; 4], [2; 4], [3; 4], [1; 4], [2; 4], [3; 4]].concat()
        );
        assert!(expand(&node("Expand", &[]), &col, &ints(&[2], &[2, 1]).unwrap()).is_err());
    }

    #[test]
    fn float_range_accumulates_and_casts_truncate() {
        let f = |v: f32| {
            Some(Const {
                shape: vec![],
                data: ConstData::F32(vec![v]),
            })
        };
        // 0.1 added nine times is not 0.9 (ONNX Runtime adds to a running value).
        let r = range(&node("Range", &[]), &[f(0.0), f(1.0), f(0.1)]).unwrap();
        let mut x = 0f32;
        let want: Vec<f32> = (0..10)
            .map(|_| {
                let y = x;
                x += 0.1;
                y
            })
            .collect();
        assert_eq!(r.data, ConstData::F32(want));
        let c = Const {
            shape: vec![3],
            data: ConstData::F32(vec![2.7, -2.7, 300.0]),
        };
        let to = |t: i32| node("Cast", &[("to", Attr::Int(i64::from(t)))]);
        assert_eq!(
            cast(&to(dtype::INT64), &c).unwrap().data,
            ConstData::I64(vec![2, -2, 300])
        );
        assert!(cast(&to(11), &c).is_err(), "float64 is not handled");
    }

    #[test]
    fn swin_mask_arithmetic_folds_as_onnx_defines_it() {
        let f = |shape: &[usize], v: &[f32]| Const {
            shape: shape.to_vec(),
            data: ConstData::F32(v.to_vec()),
        };
        // Pow: ONNX Runtime squares by multiplying; other exponents through powf.
        let p = binary(&node("Pow", &[]), "Pow", &f(&[], &[32.0]), &f(&[], &[-0.5])).unwrap();
        assert_eq!(p.data, ConstData::F32(vec![(1.0 / 32f64.sqrt()) as f32]));
        let sq = binary(
            &node("Pow", &[]),
            "Pow",
            &f(&[2], &[1.1, -3.0]),
            &f(&[], &[2.0]),
        );
        assert_eq!(sq.unwrap().data, ConstData::F32(vec![1.1 * 1.1, 9.0]));
        let ip = binary(
            &node("Pow", &[]),
            "Pow",
            &ints(&[2], &[3, -2]).unwrap(),
            &ints(&[], &[3]).unwrap(),
        );
        assert_eq!(ip.unwrap().data, ConstData::I64(vec![27, -8]));
        // Comparisons and logic give bools (one byte each); Not flips them.
        let row = ints(&[3], &[1, 2, 3]).unwrap();
        let two = ints(&[], &[2]).unwrap();
        let lt = binary(&node("Less", &[]), "Less", &row, &two).unwrap();
        assert_eq!(lt.data, ConstData::U8(vec![1, 0, 0]));
        let ge = binary(&node("GreaterOrEqual", &[]), "GreaterOrEqual", &row, &two).unwrap();
        assert_eq!(ge.data, ConstData::U8(vec![0, 1, 1]));
        let or = binary(&node("Or", &[]), "Or", &lt, &ge).unwrap();
        assert_eq!(or.data, ConstData::U8(vec![1, 1, 1]));
        assert_eq!(
            not(&node("Not", &[]), &lt).unwrap().data,
            ConstData::U8(vec![0, 1, 1])
        );
        assert!(not(&node("Not", &[]), &row).is_err(), "Not of int64");
        // Cast to bool: nonzero is true.
        let to_bool = node("Cast", &[("to", Attr::Int(i64::from(dtype::BOOL)))]);
        let b = cast(&to_bool, &f(&[3], &[0.0, -0.5, 2.0])).unwrap();
        assert_eq!(b.data, ConstData::U8(vec![0, 1, 1]));
        // Transpose: numpy's.
        let m = ints(&[2, 3], &[0, 1, 2, 3, 4, 5]).unwrap();
        let t = transpose(&node("Transpose", &[]), &m).unwrap();
        assert_eq!(
            (t.shape, t.data),
            (vec![3, 2], ConstData::I64(vec![0, 3, 1, 4, 2, 5]))
        );
        let perm = node("Transpose", &[("perm", Attr::Ints(vec![0, 0]))]);
        assert!(transpose(&perm, &m).is_err());
    }

    #[test]
    fn scatter_nd_writes_slices_in_order() {
        let data = ints(&[3, 2], &[0; 6]);
        // Rows 2 and 0 replaced (the last write of a repeated index wins), then added.
        let idx = ints(&[3, 1], &[2, 0, 2]);
        let upd = ints(&[3, 2], &[1, 2, 3, 4, 5, 6]);
        let none = node("ScatterND", &[]);
        let r = scatter_nd(&none, &[data.clone(), idx.clone(), upd.clone()]).unwrap();
        assert_eq!(r.data, ConstData::I64(vec![3, 4, 0, 0, 5, 6]));
        let add = node("ScatterND", &[("reduction", Attr::Str("add".into()))]);
        let r = scatter_nd(&add, &[data.clone(), idx.clone(), upd.clone()]).unwrap();
        assert_eq!(r.data, ConstData::I64(vec![3, 4, 0, 0, 6, 8]));
        // Element indices (k = rank).
        let one = ints(&[2, 2], &[1, 1, 0, 1]);
        let vals = ints(&[2], &[7, 9]);
        let r = scatter_nd(&none, &[data.clone(), one, vals]).unwrap();
        assert_eq!(r.data, ConstData::I64(vec![0, 9, 0, 7, 0, 0]));
        // Out of range and misshapen updates are errors.
        let bad = ints(&[1, 1], &[3]);
        assert!(scatter_nd(&none, &[data.clone(), bad, ints(&[1, 2], &[1, 2])]).is_err());
        assert!(scatter_nd(&none, &[data, idx, ints(&[3], &[1, 2, 3])]).is_err());
    }
}
