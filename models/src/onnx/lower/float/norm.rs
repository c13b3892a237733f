//! `Softmax`, `LogSoftmax` and `LayerNormalization` of float or dequantized tensors, and
//! ONNX Runtime's `QLinearSoftmax` (see the parent module's docs): one [`Step::FloatNorm`]
//! each. Load time only; errors name the node.

use super::*;

impl Lowerer<'_> {
    /// `Softmax`, `LogSoftmax` or `LayerNormalization` of a float tensor (a convolution's
    /// float output, or a dequantized tensor, as `quantize_static` leaves a softmax between
    /// `DequantizeLinear` and `QuantizeLinear`): one [`Step::FloatNorm`] over the axes the
    /// operator normalizes, in the tensor's own layout when those axes are one run of its
    /// memory order (channels of an NHWC tensor, trailing axes of a row-major one), else
    /// after one copy to row-major order.
    ///
    /// Axes: `Softmax`/`LogSoftmax` from opset 13 the one axis `axis` (default −1); before,
    /// every axis from `axis` (default 1) on, as one row. `LayerNormalization`: every axis
    /// from `axis` (default −1) on, with `Scale` and optional `B` constants that broadcast
    /// to those axes (expanded at load to one value per row element).
    pub(in crate::onnx::lower) fn float_norm(&mut self, n: &Node) -> Result<(), EngineError> {
        let layout = match self.input(n, 0)? {
            Val::F32(t) | Val::Dq(t) => t.layout,
            v => {
                return Err(n.unsupported(format!(
                    "input 0 is {}; the native engine runs {} on float or dequantized tensors \
                     (QDQ); run the model with --engine onnxruntime",
                    kind_name(&v),
                    n.op
                )))
            }
        };
        let x = self.float_operand(n, 0, layout)?;
        let y = self.norm_of(n, x, self.g.opset)?;
        self.set(&n.outputs[0], Val::F32(y));
        Ok(())
    }

    /// ONNX Runtime's `com.microsoft.QLinearSoftmax` (`quantize_static`'s QOperator form of
    /// a softmax): the input dequantized with its `X_scale`/`x_zero_point`, the float
    /// softmax of [`Lowerer::float_norm`] (axes as the node's `opset` attribute says), then
    /// quantized with `Y_scale`/`y_zero_point` — ONNX's softmax, not ONNX Runtime's table
    /// (which scales by `floor(1 / Y_scale)`).
    pub(in crate::onnx::lower) fn qlinear_softmax(&mut self, n: &Node) -> Result<(), EngineError> {
        let t = self.act(n, 0)?;
        let (x_q, y_q) = (self.qparams(n, 1, 2)?, self.qparams(n, 3, 4)?);
        let x = self.dequantized(T { q: x_q, ..t });
        let y = self.norm_of(n, x, n.int("opset", 13)?)?;
        let y = self.quantized(y, y_q);
        self.set(&n.outputs[0], Val::Q(y));
        Ok(())
    }

    /// The normalization `n` (Softmax, LogSoftmax — `opset` says which axes — or
    /// LayerNormalization) of the float tensor `x`: one [`Step::FloatNorm`].
    fn norm_of(&mut self, n: &Node, x: T, opset: i64) -> Result<T, EngineError> {
        let rank = x.shape.len() as i64;
        let layer_norm = n.op == "LayerNormalization";
        let default_axis = if layer_norm || opset >= 13 { -1 } else { 1 };
        let axis = n.int("axis", default_axis)?;
        let a0 = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&a0) {
            return Err(n.unsupported(format!("axis {axis} is outside a tensor of rank {rank}")));
        }
        let a0 = a0 as usize;
        let a1 = if layer_norm || opset < 13 {
            rank as usize
        } else {
            a0 + 1
        };
        let (x, (blocks, len, inner)) = self.axes_run(x, a0, a1)?;
        let op = match n.op.as_str() {
            "Softmax" | "QLinearSoftmax" => NormOp::Softmax,
            "LogSoftmax" => NormOp::LogSoftmax,
            _ => {
                if n.int("stash_type", 1)? != 1 {
                    return Err(n.unsupported(
                        "stash_type other than 1 (float32 statistics) is not supported",
                    ));
                }
                let axes = &x.shape[a0..];
                let param = |i: usize, what: &str| -> Result<Option<Vec<f32>>, EngineError> {
                    if n.input(i).is_none() {
                        return Ok(None);
                    }
                    constant_f32(&self.input(n, i)?)
                        .and_then(|c| per_row_element(&c, axes))
                        .map(Some)
                        .ok_or_else(|| {
                            n.unsupported(format!(
                                "its {what} must be a constant that broadcasts to the \
                                 normalized axes {axes:?}"
                            ))
                        })
                };
                let Some(scale) = param(1, "scale")? else {
                    return Err(n.unsupported("its scale input is missing"));
                };
                NormOp::LayerNorm {
                    eps: n.float("epsilon", 1e-5)?,
                    scale,
                    bias: param(2, "bias")?,
                }
            }
        };
        let read = |o: &String| self.consumers.contains_key(o) || self.outputs.contains(o);
        if n.outputs.iter().skip(1).any(|o| !o.is_empty() && read(o)) {
            return Err(n.unsupported(
                "its mean and inverse standard deviation outputs are read; the native engine \
                 computes the normalized output only",
            ));
        }
        self.touch(x.buf);
        let dst = self.new_buf(blocks * len * inner * 4);
        self.steps.push(Step::FloatNorm {
            op,
            blocks,
            len,
            inner,
            src: x.buf,
            dst,
        });
        Ok(T { buf: dst, ..x })
    }
}

/// The float constant `c` as one value per element of a row over `axes` (their product,
/// in row-major order), broadcast as numpy does; leading axes of 1 beyond the normalized
/// ones (`[1, 1, C]`) allowed. `None` when it does not broadcast or is not `f32`.
fn per_row_element(c: &Const, axes: &[usize]) -> Option<Vec<f32>> {
    let ConstData::F32(v) = &c.data else {
        return None;
    };
    let extra = c.shape.len().saturating_sub(axes.len());
    let shape = &c.shape[extra..];
    if c.shape[..extra].iter().any(|&d| d != 1)
        || fold::broadcast(shape, axes).as_deref() != Some(axes)
    {
        return None;
    }
    let len: usize = axes.iter().product();
    Some(
        (0..len)
            .map(|j| v[fold::broadcast_index(shape, axes, j)])
            .collect(),
    )
}
