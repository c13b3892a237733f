//! Integer tensors computed at run time: `TopK` and what a model does with its indices.
//!
//! A detection transformer (RT-DETR, DINO, Deformable DETR) picks its queries with `TopK`
//! over the encoder's scores and gathers their features and anchors by the indices; its
//! post-processing splits a flat class-major index into query and label with integer
//! floor division (PyTorch exports `//` as `Div`, `Mod`, `Less`, `Xor`, `Where`, ...).
//! This module lowers those into [`IndexStep`]s over `i64` buffers ([`Val::I`]):
//!
//! - `TopK` of a float or dequantized tensor (`k` a constant; any axis; `largest`) into its
//!   indices ([`IndexStep::TopK`]) and its values (a [`IndexStep::GatherElements`] of the
//!   input by them: the same values, one code path);
//! - `Add`, `Sub`, `Mul`, `Div`, `Mod`, `Min`, `Max`, the comparisons, `And`, `Or`, `Xor`,
//!   `Not`, `Where` and `Expand` of integer tensors and integer or bool constants (numpy
//!   broadcasting) ([`IndexStep::Map`]);
//! - `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Identity` (a relabelling, no step);
//!   `Cast` to `int64` (nothing), `int32` (wrapped), `bool`, and `float` ([`IndexStep::ToFloat`]);
//! - `Gather` and `GatherElements` of a float, dequantized, quantized, integer tensor or a
//!   constant table by integer indices, computed or constant ([`IndexStep::Gather`],
//!   [`IndexStep::GatherElements`]); a quantized tensor stays quantized (bytes move).
//! - `ArgMax`/`ArgMin` of a float, dequantized or quantized tensor (a segmentation head's
//!   class map; [`IndexStep::ArgExtreme`]): quantized codes compared as they are, channels
//!   of an NHWC tensor read in place;
//! - a graph output that is an integer tensor: its `int64` values.
//!
//! Contract: results are ONNX Runtime's, bit for bit: the steps move values or do exact
//! integer arithmetic, and `TopK` breaks ties as ONNX Runtime does (`program::index`). Any
//! other operator reading an integer tensor is refused naming it. Costs: load time builds
//! the steps; each runs on one lane (see `program::index`), allocation-free.

use super::*;
use crate::onnx::program::{GatherSrc, IndexStep, IntArg, IntOp, IntSrc};

impl Lowerer<'_> {
    /// Lowers `n` when it is `TopK`, `ArgMax`, `ArgMin`, `GatherElements` or reads an
    /// integer tensor computed at run time (see the module docs). Returns whether it did.
    pub(super) fn index_node(&mut self, n: &Node) -> Result<bool, EngineError> {
        let reads_int = n
            .inputs
            .iter()
            .any(|name| matches!(self.vals.get(name), Some(Val::I { .. })));
        let own = ["TopK", "GatherElements", "ArgMax", "ArgMin"];
        if n.op == "Shape" || (!reads_int && !own.contains(&n.op.as_str())) {
            return Ok(false);
        }
        match n.op.as_str() {
            "TopK" => self.top_k(n)?,
            "ArgMax" | "ArgMin" => self.arg_extreme(n)?,
            "Gather" | "GatherElements" => self.gather_by_index(n)?,
            "Identity" => {
                let v = self.input(n, 0)?;
                self.set(&n.outputs[0], v);
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Expand" | "Slice"
                if !matches!(
                    n.input(0).and_then(|i| self.vals.get(i)),
                    Some(Val::I { .. })
                ) =>
            {
                return Err(n.unsupported(
                    "its shape or extents are an integer tensor computed at run time (from \
                     TopK's indices): the native engine compiles fixed shapes; run the model \
                     with --engine onnxruntime",
                ));
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
                let (t, boolean) = self.int_input(n, 0)?;
                let t = T {
                    shape: self.new_shape(n, &t.shape)?,
                    ..t
                };
                self.set(&n.outputs[0], Val::I { t, boolean });
            }
            "Cast" => self.int_cast(n)?,
            op => {
                let Some(op) = int_op(op, n)? else {
                    return Err(n.unsupported(
                        "it reads an integer tensor computed at run time (TopK's indices or \
                         arithmetic on them); the native engine runs only Reshape, Flatten, \
                         Squeeze, Unsqueeze, Cast, Add, Sub, Mul, Div, Mod, Min, Max, the \
                         comparisons, And, Or, Xor, Not, Where, Expand, Gather and \
                         GatherElements on those; run the model with --engine onnxruntime",
                    ));
                };
                self.int_map(n, op)?;
            }
        }
        Ok(true)
    }

    /// Input `i` of `n` as an integer tensor computed at run time, or an error.
    fn int_input(&self, n: &Node, i: usize) -> Result<(T, bool), EngineError> {
        match self.input(n, i)? {
            Val::I { t, boolean } => Ok((t, boolean)),
            v => Err(n.unsupported(format!(
                "input {i} is {}, not an integer tensor computed at run time",
                kind_name(&v)
            ))),
        }
    }

    /// Input `i` of `n` as an integer operand (a computed integer tensor, or an integer or
    /// bool constant): its values, shape and whether it is bool.
    fn int_operand(&self, n: &Node, i: usize) -> Result<(IntSrc, Vec<usize>, bool), EngineError> {
        match self.input(n, i)? {
            Val::I { t, boolean } => Ok((IntSrc::Buf(t.buf), t.shape, boolean)),
            Val::C(c) => match c.to_i64() {
                Some(v) => Ok((
                    IntSrc::Const(v),
                    c.shape.clone(),
                    matches!(c.data, ConstData::U8(_)),
                )),
                None => Err(n.unsupported(format!(
                    "input {i} is a float constant where an integer tensor computed at run \
                     time meets it; ONNX needs both of one type (cast one first)"
                ))),
            },
            v => Err(n.unsupported(format!(
                "input {i} is {} where an integer tensor computed at run time meets it; the \
                 native engine computes on integer tensors only with integer tensors and \
                 constants (a Cast to float makes the integers float first); run the model \
                 with --engine onnxruntime",
                kind_name(&v)
            ))),
        }
    }

    /// One [`IndexStep::Map`] of `n`'s inputs (or of its input and `Expand`'s shape).
    fn int_map(&mut self, n: &Node, op: IntOp) -> Result<(), EngineError> {
        let mut operands = Vec::new();
        for i in 0..op.arity() {
            operands.push(self.int_operand(n, i)?);
        }
        let mut dims: Vec<usize> = vec![];
        for (_, shape, _) in &operands {
            dims = super::fold::broadcast(&dims, shape).ok_or_else(|| {
                n.unsupported(format!("shapes {dims:?} and {shape:?} do not broadcast"))
            })?;
        }
        if n.op == "Expand" {
            let target = self
                .konst(n, 1)?
                .to_i64()
                .filter(|d| d.iter().all(|&v| v >= 0))
                .ok_or_else(|| n.unsupported("Expand's shape must be non-negative integers"))?;
            let target: Vec<usize> = target.iter().map(|&d| d as usize).collect();
            dims = super::fold::broadcast(&dims, &target).ok_or_else(|| {
                n.unsupported(format!("Expand of {dims:?} to {target:?}: no broadcast"))
            })?;
        }
        let len = elements_within(&dims)
            .ok_or_else(|| n.unsupported(format!("an integer tensor of shape {dims:?}")))?;
        let boolean = op.is_bool() || (op == IntOp::Where && operands[1].2 && operands[2].2);
        let mut args = Vec::with_capacity(operands.len());
        for (src, shape, _) in operands {
            if let IntSrc::Buf(b) = src {
                self.touch(b);
            }
            args.push(IntArg {
                src,
                strides: broadcast_strides(&shape, &dims),
            });
        }
        let dst = self.new_buf(len * 8);
        self.steps.push(Step::Index(Box::new(IndexStep::Map {
            op,
            args,
            dims: dims.clone(),
            dst,
        })));
        let t = self.int_tensor(dst, dims);
        self.set(&n.outputs[0], Val::I { t, boolean });
        Ok(())
    }

    /// A row-major tensor of `shape` in buffer `buf`.
    fn int_tensor(&self, buf: usize, shape: Vec<usize>) -> T {
        T {
            buf,
            shape,
            layout: Layout::RowMajor,
            q: QParams::new(1.0, 0),
        }
    }

    /// `Cast` of an integer tensor: to `int64` nothing, to `int32` wrapped, to `bool`
    /// nonzero, to `float` converted.
    fn int_cast(&mut self, n: &Node) -> Result<(), EngineError> {
        let (t, boolean) = self.int_input(n, 0)?;
        let to = i32::try_from(n.int("to", 0)?).unwrap_or(-1);
        use super::super::graph::dtype;
        let op = match to {
            dtype::INT64 => {
                self.set(&n.outputs[0], Val::I { t, boolean });
                return Ok(());
            }
            dtype::FLOAT => {
                let len: usize = t.shape.iter().product();
                self.touch(t.buf);
                let dst = self.new_buf(len * 4);
                self.steps.push(Step::Index(Box::new(IndexStep::ToFloat {
                    src: t.buf,
                    dst,
                    n: len,
                })));
                let t = self.int_tensor(dst, t.shape);
                self.set(&n.outputs[0], Val::F32(t));
                return Ok(());
            }
            dtype::INT32 => IntOp::Wrap32,
            dtype::BOOL => IntOp::NonZero,
            _ => {
                return Err(n.unsupported(format!(
                    "a cast of an integer tensor computed at run time to {}: the native engine \
                     casts those to int64, int32, bool and float only; run the model with \
                     --engine onnxruntime",
                    super::super::graph::type_name(to)
                )))
            }
        };
        self.int_map(n, op)
    }

    /// `TopK` of a float or dequantized tensor: its indices, then its values gathered by
    /// them.
    fn top_k(&mut self, n: &Node) -> Result<(), EngineError> {
        let x = self.float_operand(n, 0, Layout::RowMajor)?;
        let rank = x.shape.len();
        let k = match n.input(1) {
            Some(_) => self
                .konst(n, 1)?
                .to_i64()
                .and_then(|v| (v.len() == 1).then(|| v[0]))
                .ok_or_else(|| n.unsupported("K must be one integer"))?,
            None => n.int("k", -1)?,
        };
        let axis = n.int("axis", -1)?;
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if !(0..rank as i64).contains(&a) {
            return Err(n.unsupported(format!("axis {axis} is out of range for rank {rank}")));
        }
        let axis = a as usize;
        let len = x.shape[axis];
        if k < 1 || k as usize > len {
            return Err(n.unsupported(format!(
                "K = {k} for an axis of {len}: K must lie in 1..={len} (a larger K is invalid \
                 ONNX; K = 0, an empty result, is not supported by the native engine)"
            )));
        }
        let k = k as usize;
        let outer: usize = x.shape[..axis].iter().product();
        let inner: usize = x.shape[axis + 1..].iter().product();
        let mut shape = x.shape.clone();
        shape[axis] = k;
        self.touch(x.buf);
        let scratch = self.new_buf(len * 4);
        let dst = self.new_buf(outer * k * inner * 8);
        self.steps.push(Step::Index(Box::new(IndexStep::TopK {
            src: x.buf,
            outer,
            len,
            inner,
            k,
            largest: n.int("largest", 1)? != 0,
            scratch,
            dst,
        })));
        let values = self.push_gather_elements(
            GatherSrc::Buf(x.buf),
            4,
            x.shape.clone(),
            axis,
            IntSrc::Buf(dst),
            shape.clone(),
        );
        self.set(
            &n.outputs[0],
            Val::F32(self.int_tensor(values, shape.clone())),
        );
        if let Some(name) = n.outputs.get(1) {
            let t = self.int_tensor(dst, shape);
            self.set(name, Val::I { t, boolean: false });
        }
        Ok(())
    }

    /// `ArgMax`/`ArgMin` of a float, dequantized or quantized tensor (a segmentation head's
    /// class map): a quantized tensor's codes compared as they are (they order as its
    /// values), an NHWC one along channels read in place.
    fn arg_extreme(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let rank = match &v {
            Val::F32(t) | Val::Q(t) | Val::Dq(t) => t.shape.len(),
            v => {
                return Err(n.unsupported(format!(
                    "input 0 is {}; the native engine takes ArgMax/ArgMin of float or \
                     quantized tensors; run the model with --engine onnxruntime",
                    kind_name(v)
                )))
            }
        };
        let axis = n.int("axis", 0)?;
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if !(0..rank as i64).contains(&a) {
            return Err(n.unsupported(format!("axis {axis} is out of range for rank {rank}")));
        }
        let axis = a as usize;
        // The tensor in the order it is read, and whether it is `i8` codes.
        let (t, codes) = match v {
            Val::Q(t) | Val::Dq(t) if t.q.scale > 0.0 && t.layout == Layout::Nhwc && axis == 1 => {
                (t, true)
            }
            Val::Q(t) | Val::Dq(t) if t.q.scale > 0.0 => (self.row_major(t, 1), true),
            Val::F32(t) if t.layout == Layout::Nhwc && axis == 1 => (t, false),
            _ => (self.float_operand(n, 0, Layout::RowMajor)?, false),
        };
        let shape = t.shape.clone();
        let (outer, len, inner) = if t.layout == Layout::Nhwc && axis == 1 && rank == 4 {
            // Pixels in order, each one's channels contiguous.
            (shape[0] * shape[2] * shape[3], shape[1], 1)
        } else {
            let outer: usize = shape[..axis].iter().product();
            (outer, shape[axis], shape[axis + 1..].iter().product())
        };
        if len == 0 {
            return Err(n.unsupported("ArgMax/ArgMin over an empty axis"));
        }
        self.touch(t.buf);
        let dst = self.new_buf(outer * inner * 8);
        self.steps.push(Step::Index(Box::new(IndexStep::ArgExtreme {
            src: t.buf,
            codes,
            outer,
            len,
            inner,
            max: n.op == "ArgMax",
            last: n.int("select_last_index", 0)? != 0,
            dst,
        })));
        let out_shape = if n.int("keepdims", 1)? != 0 {
            let mut s = shape;
            s[axis] = 1;
            s
        } else {
            [&shape[..axis], &shape[axis + 1..]].concat()
        };
        let t = self.int_tensor(dst, out_shape);
        self.set(&n.outputs[0], Val::I { t, boolean: false });
        Ok(())
    }

    /// One [`IndexStep::GatherElements`]; returns its output buffer.
    fn push_gather_elements(
        &mut self,
        data: GatherSrc,
        elem: usize,
        data_dims: Vec<usize>,
        axis: usize,
        indices: IntSrc,
        dims: Vec<usize>,
    ) -> usize {
        for b in [data.buf(), indices.buf()].into_iter().flatten() {
            self.touch(b);
        }
        let dst = self.new_buf(dims.iter().product::<usize>() * elem);
        self.steps
            .push(Step::Index(Box::new(IndexStep::GatherElements {
                data,
                elem,
                data_dims,
                axis,
                indices,
                dims,
                dst,
            })));
        dst
    }

    /// `Gather` or `GatherElements` by integer indices (computed or constant) of any
    /// tensor or constant table: the data's bytes move, its kind stays.
    fn gather_by_index(&mut self, n: &Node) -> Result<(), EngineError> {
        let (indices, idx_shape, _) = self.int_operand(n, 1)?;
        // The data: its bytes, element size, shape and what the result is.
        let (data, elem, shape, wrap): (GatherSrc, usize, Vec<usize>, Wrap) =
            match self.input(n, 0)? {
                Val::Q(t) => {
                    let t = self.row_major(t, 1);
                    (GatherSrc::Buf(t.buf), 1, t.shape.clone(), Wrap::Q(t.q))
                }
                Val::I { t, boolean } => (GatherSrc::Buf(t.buf), 8, t.shape, Wrap::I(boolean)),
                Val::F32(_) | Val::Dq(_) => {
                    let t = self.float_operand(n, 0, Layout::RowMajor)?;
                    (GatherSrc::Buf(t.buf), 4, t.shape, Wrap::F32)
                }
                v @ (Val::C(_) | Val::DqC { .. }) => {
                    let c = match &v {
                        Val::C(c) if c.to_i64().is_some() => c.clone(),
                        _ => super::float::constant_f32(&v)
                            .ok_or_else(|| n.unsupported("a constant with bad parameters"))?,
                    };
                    match &c.data {
                        ConstData::F32(f) => {
                            let bytes = f.iter().flat_map(|x| x.to_le_bytes()).collect();
                            (GatherSrc::Bytes(bytes), 4, c.shape.clone(), Wrap::F32)
                        }
                        d => {
                            let v = c.to_i64().unwrap_or_default();
                            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                            let boolean = matches!(d, ConstData::U8(_));
                            (
                                GatherSrc::Bytes(bytes),
                                8,
                                c.shape.clone(),
                                Wrap::I(boolean),
                            )
                        }
                    }
                }
            };
        let rank = shape.len();
        let axis = n.int("axis", 0)?;
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if rank == 0 || !(0..rank as i64).contains(&a) {
            return Err(n.unsupported(format!("axis {axis} is out of range for rank {rank}")));
        }
        let axis = a as usize;
        let (dst, out_shape) = if n.op == "Gather" {
            let out_shape = [&shape[..axis], &idx_shape[..], &shape[axis + 1..]].concat();
            let count: usize = idx_shape.iter().product();
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            for b in [data.buf(), indices.buf()].into_iter().flatten() {
                self.touch(b);
            }
            let dst = self.new_buf(outer * count * inner * elem);
            self.steps.push(Step::Index(Box::new(IndexStep::Gather {
                data,
                elem,
                outer,
                axis_len: shape[axis],
                inner,
                indices,
                count,
                dst,
            })));
            (dst, out_shape)
        } else {
            let fits =
                idx_shape.len() == rank && (0..rank).all(|d| d == axis || idx_shape[d] <= shape[d]);
            if !fits {
                return Err(n.unsupported(format!(
                    "GatherElements of data {shape:?} by indices {idx_shape:?}: the indices \
                     must have the data's rank and fit inside it off the axis"
                )));
            }
            let dst =
                self.push_gather_elements(data, elem, shape, axis, indices, idx_shape.clone());
            (dst, idx_shape)
        };
        if elements_within(&out_shape).is_none() {
            return Err(n.unsupported(format!("a result of shape {out_shape:?}")));
        }
        let t = self.int_tensor(dst, out_shape);
        let v = match wrap {
            Wrap::F32 => Val::F32(t),
            Wrap::Q(q) => Val::Q(T { q, ..t }),
            Wrap::I(boolean) => Val::I { t, boolean },
        };
        self.set(&n.outputs[0], v);
        Ok(())
    }
}

/// What a gathered tensor is.
enum Wrap {
    F32,
    Q(QParams),
    I(bool),
}

/// The [`IntOp`] of an elementwise ONNX operator on integers, `None` for another operator.
fn int_op(op: &str, n: &Node) -> Result<Option<IntOp>, EngineError> {
    Ok(Some(match op {
        "Add" => IntOp::Add,
        "Sub" => IntOp::Sub,
        "Mul" => IntOp::Mul,
        "Div" => IntOp::Div,
        "Mod" => IntOp::Mod {
            fmod: n.int("fmod", 0)? != 0,
        },
        "Min" if n.inputs.len() == 2 => IntOp::Min,
        "Max" if n.inputs.len() == 2 => IntOp::Max,
        "Equal" => IntOp::Equal,
        "Less" => IntOp::Less,
        "Greater" => IntOp::Greater,
        "LessOrEqual" => IntOp::LessOrEqual,
        "GreaterOrEqual" => IntOp::GreaterOrEqual,
        "And" => IntOp::And,
        "Or" => IntOp::Or,
        "Xor" => IntOp::Xor,
        "Not" => IntOp::Not,
        "Where" => IntOp::Where,
        "Expand" => IntOp::Copy,
        _ => return Ok(None),
    }))
}

/// The strides of a row-major tensor of `shape` read as one of `dims` (numpy broadcasting:
/// `shape` right-aligned; 0 along an axis it has size 1 on or lacks).
fn broadcast_strides(shape: &[usize], dims: &[usize]) -> Vec<usize> {
    let own = row_major_strides(shape);
    let off = dims.len() - shape.len().min(dims.len());
    (0..dims.len())
        .map(|d| match d.checked_sub(off) {
            Some(i) if shape[i] != 1 => own[i],
            _ => 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_strides_right_align() {
        assert_eq!(broadcast_strides(&[3], &[2, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), vec![1, 0]);
        assert_eq!(broadcast_strides(&[], &[2, 3]), vec![0, 0]);
        assert_eq!(broadcast_strides(&[4, 2, 3], &[4, 2, 3]), vec![6, 3, 1]);
    }
}
