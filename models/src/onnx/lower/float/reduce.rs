//! Reductions, `Expand` and `Pow` of float or dequantized tensors (see the parent module's
//! docs): [`Step::FloatReduce`] over one run of axes in the canonical summation order,
//! [`Step::FloatRepeat`], a square as [`Step::FloatUnary`]; a spatial `ReduceMean` stays a
//! global average pool. Load time only; errors name the node.

use super::*;
use crate::onnx::program::ReduceOp;

impl Lowerer<'_> {
    /// `Pow` of a float or dequantized tensor: with the constant exponent 2 (a decomposed
    /// layer norm's variance), `x · x` as ONNX Runtime computes it; other exponents are
    /// refused.
    pub(in crate::onnx::lower) fn float_pow(&mut self, n: &Node) -> Result<(), EngineError> {
        let e = match self.input(n, 1)? {
            v @ (Val::C(_) | Val::DqC { .. }) => constant_f32(&v).map(|c| c.to_f32()),
            _ => None,
        };
        if e.as_deref() != Some(&[2.0]) {
            return Err(n.unsupported(
                "Pow of a computed tensor runs with the constant exponent 2 only; run the model \
                 with --engine onnxruntime",
            ));
        }
        let layout = match self.input(n, 0)? {
            Val::F32(t) | Val::Dq(t) => t.layout,
            v => return Err(n.unsupported(format!("cannot raise {} to a power", kind_name(&v)))),
        };
        let t = self.float_operand(n, 0, layout)?;
        let y = self.push_unary(FloatUnaryOp::Square, t);
        self.set(&n.outputs[0], Val::F32(y));
        Ok(())
    }

    /// `ReduceSum`, `ReduceMean`, `ReduceSumSquare`, `ReduceL1`, `ReduceL2`, `ReduceMax`
    /// or `ReduceMin` of a float or dequantized tensor over one run of its axes (in its
    /// memory order: any run of a row-major tensor; channels, or height and width, of an
    /// NHWC one; else it is made row-major first), one [`Step::FloatReduce`]. `keepdims`
    /// keeps the layout (the result's bytes are the reduced tensor's in that order);
    /// without it the result is row-major. `F.normalize`'s `ReduceL2`, a decomposed layer
    /// norm's `ReduceMean`. A rank-4 `ReduceMean` over `[2, 3]` stays a global average pool
    /// ([`Lowerer::reduce_mean`]).
    pub(in crate::onnx::lower) fn float_reduce(&mut self, n: &Node) -> Result<(), EngineError> {
        let (rank, layout) = match self.input(n, 0)? {
            Val::F32(t) | Val::Dq(t) => (t.shape.len(), t.layout),
            v => {
                return Err(n.unsupported(format!(
                    "input 0 is {}; the native engine reduces float or dequantized tensors \
                     (QDQ) only; run the model with --engine onnxruntime",
                    kind_name(&v)
                )))
            }
        };
        let mut axes: Vec<usize> = match self.reduce_axes(n)? {
            Some(a) if !a.is_empty() => a
                .iter()
                .map(|&a| super::shape::axis_index(n, a, rank))
                .collect::<Result<_, _>>()?,
            _ if rank == 0 => {
                return Err(n.unsupported(
                    "a reduction of a scalar: the native engine reduces tensors of rank 1 or \
                     more; run the model with --engine onnxruntime",
                ))
            }
            _ if n.int("noop_with_empty_axes", 0)? != 0 => {
                // No axes and the no-op flag: the input as it is (as float).
                let t = self.float_operand(n, 0, layout)?;
                self.set(&n.outputs[0], Val::F32(t));
                return Ok(());
            }
            _ => (0..rank).collect(),
        };
        axes.sort_unstable();
        axes.dedup();
        let (a0, a1) = (axes[0], axes[axes.len() - 1] + 1);
        if a1 - a0 != axes.len() {
            return Err(n.unsupported(format!(
                "a reduction over axes {axes:?}: the native engine reduces one run of \
                 neighbouring axes; run the model with --engine onnxruntime"
            )));
        }
        let keep = n.int("keepdims", 1)? != 0;
        let op = match n.op.as_str() {
            "ReduceSum" => ReduceOp::Sum,
            "ReduceMean" => ReduceOp::Mean,
            "ReduceSumSquare" => ReduceOp::SumSquare,
            "ReduceL1" => ReduceOp::L1,
            "ReduceL2" => ReduceOp::L2,
            "ReduceMax" => ReduceOp::Max,
            _ => ReduceOp::Min,
        };
        let x = self.float_operand(n, 0, layout)?;
        // Without keepdims the result is row-major: reduce a row-major tensor.
        let x = if keep { x } else { self.row_major(x, 4) };
        let (x, (blocks, len, inner)) = self.axes_run(x, a0, a1)?;
        let mut shape = x.shape.clone();
        for a in (a0..a1).rev() {
            if keep {
                shape[a] = 1;
            } else {
                shape.remove(a);
            }
        }
        self.touch(x.buf);
        let dst = self.new_buf(blocks * inner * 4);
        self.steps.push(Step::FloatReduce {
            op,
            blocks,
            len,
            inner,
            src: x.buf,
            dst,
        });
        let layout = if keep && shape.len() == 4 {
            x.layout
        } else {
            Layout::RowMajor
        };
        let y = T {
            buf: dst,
            shape,
            layout,
            ..x
        };
        self.set(&n.outputs[0], Val::F32(y));
        Ok(())
    }

    /// `Expand` of a float or dequantized tensor: its values repeated along one run of
    /// axes ([`Step::FloatRepeat`]); a target shape it already has is nothing. `F.normalize`
    /// expands a row's norm to the row before dividing.
    pub(in crate::onnx::lower) fn float_expand(&mut self, n: &Node) -> Result<(), EngineError> {
        let layout = match self.input(n, 0)? {
            Val::F32(t) | Val::Dq(t) => t.layout,
            v => return Err(n.unsupported(format!("cannot expand {}", kind_name(&v)))),
        };
        let dims = self
            .konst(n, 1)?
            .to_i64()
            .filter(|d| d.iter().all(|&v| v >= 0))
            .ok_or_else(|| n.unsupported("Expand's shape must be non-negative integers"))?;
        let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let x = self.float_operand(n, 0, layout)?;
        let out = fold::broadcast(&x.shape, &dims).ok_or_else(|| {
            n.unsupported(format!(
                "Expand of a {:?} tensor to {dims:?}: the shapes do not broadcast",
                x.shape
            ))
        })?;
        // A rank change keeps the bytes only in row-major order.
        let x = if out.len() == x.shape.len() {
            x
        } else {
            self.row_major(x, 4)
        };
        if out == x.shape {
            self.set(&n.outputs[0], Val::F32(x));
            return Ok(());
        }
        let Some((outer, times, inner)) = broadcast_run(&x.shape, &out, x.layout) else {
            return Err(n.unsupported(format!(
                "Expand of a {:?} tensor to {out:?}: the native engine repeats a tensor along \
                 one run of neighbouring axes; run the model with --engine onnxruntime",
                x.shape
            )));
        };
        self.touch(x.buf);
        let dst = self.new_buf(outer * times * inner * 4);
        self.steps.push(Step::FloatRepeat {
            src: x.buf,
            outer,
            times,
            inner,
            dst,
        });
        let y = T {
            buf: dst,
            shape: out,
            ..x
        };
        self.set(&n.outputs[0], Val::F32(y));
        Ok(())
    }

    /// Whether `n` (a `ReduceMean`) averages a rank-4 tensor over its spatial axes
    /// `[2, 3]`: a global average pool ([`Lowerer::reduce_mean`]); any other mean is a
    /// [`Lowerer::float_reduce`].
    pub(in crate::onnx::lower) fn is_spatial_mean(&self, n: &Node) -> Result<bool, EngineError> {
        let rank = match self.input(n, 0)? {
            Val::F32(t) | Val::Dq(t) => t.shape.len() as i64,
            _ => return Ok(false),
        };
        let mut axes: Vec<i64> = self
            .reduce_axes(n)?
            .unwrap_or_default()
            .iter()
            .map(|&a| if a < 0 { a + rank } else { a })
            .collect();
        axes.sort_unstable();
        Ok(rank == 4 && axes == [2, 3])
    }

    /// A reduction's axes: its `axes` attribute (before opset 18) or its second input
    /// (from opset 18, and `ReduceSum` from 13); `None` when it gives none.
    fn reduce_axes(&self, n: &Node) -> Result<Option<Vec<i64>>, EngineError> {
        if let Some(a) = n.ints("axes")? {
            return Ok(Some(a));
        }
        if n.input(1).is_none() {
            return Ok(None);
        }
        let a = self.konst(n, 1)?.to_i64();
        a.map(Some)
            .ok_or_else(|| n.unsupported("axes must be integers"))
    }

    /// `ReduceMean` over the two spatial axes of a 4-D float or dequantized tensor
    /// (`x.mean((2, 3))`, ShuffleNetV2's and MNASNet's classifier pooling, a squeeze-and-
    /// excitation's squeeze; [`Lowerer::is_spatial_mean`] chose it): a global average pool
    /// in `f32` ([`Step::FloatGlobalAvgPool`]), `[N, C]` without `keepdims`.
    pub(in crate::onnx::lower) fn reduce_mean(&mut self, n: &Node) -> Result<(), EngineError> {
        self.float_global_avg_pool(n)?;
        if n.int("keepdims", 1)? == 0 {
            if let Some(Val::F32(t)) = self.vals.get(&n.outputs[0]).cloned() {
                let shape = t.shape[..2].to_vec();
                // 1×1 pixels: NHWC and row-major are the same bytes.
                let t = T {
                    shape,
                    layout: Layout::RowMajor,
                    ..t
                };
                self.set(&n.outputs[0], Val::F32(t));
            }
        }
        Ok(())
    }
}
