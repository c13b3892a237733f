//! `MatMul` of two computed tensors: a transformer's attention (`q·kᵀ`, then the softmax's
//! weights times `v`), both operands quantized (QDQ: a `DequantizeLinear` on each; QOperator:
//! `QLinearMatMul`).
//!
//! Contract: operands of rank ≥ 2, the product over their last two axes; the leading (batch)
//! axes equal, or the second operand's all 1 (one matrix for every product). The kernel
//! (`kernels::matmul_rows`) sums exactly in `i32`, the columns in the vector lanes; the
//! output is requantized as ONNX Runtime's `QLinearMatMul` does (`acc · a_scale · b_scale /
//! y_scale`, half to even, `+ y_zp`; a `Relu`/`Clip` before the `QuantizeLinear` fused as a
//! clamp), or, when no `QuantizeLinear` follows, `f32` `acc · a_scale · b_scale` for the
//! float route. Cost: `m·n·k` multiply-adds per product; on AVX-512 VNNI with `vpdpbusd`
//! after a `Step::PackB` copies `b` into the kernel's layout (`k·n` bytes per product, once
//! per run; ViT-B/16's 24 such products are 0.72 of its 17.6 GMAC). Never: a product whose
//! batch axes broadcast the first operand.

use super::*;
use crate::onnx::kernels::{MatMulDims, MatMulOut};

impl Lowerer<'_> {
    /// True when `n` is a `MatMul`/`QLinearMatMul` whose second operand is computed.
    pub(super) fn second_operand_computed(&self, n: &Node) -> bool {
        let i = if n.op == "QLinearMatMul" { 3 } else { 1 };
        matches!(n.op.as_str(), "MatMul" | "QLinearMatMul")
            && matches!(self.input(n, i), Ok(Val::Dq(_) | Val::Q(_)))
    }

    /// Lowers `n` (see the module docs).
    pub(super) fn matmul_two_tensors(&mut self, n: &Node) -> Result<(), EngineError> {
        let qop = n.op == "QLinearMatMul";
        let a = self.act(n, 0)?;
        let b = self.act(n, if qop { 3 } else { 1 })?;
        let (a_q, b_q) = if qop {
            (self.qparams(n, 1, 2)?, self.qparams(n, 4, 5)?)
        } else {
            (a.q, b.q)
        };
        let (a, b) = (self.row_major(a, 1), self.row_major(b, 1));
        let (ra, rb) = (a.shape.len(), b.shape.len());
        if ra < 2 || rb < 2 {
            return Err(n.unsupported(format!(
                "operands of shapes {:?} and {:?}: both must have at least two axes",
                a.shape, b.shape
            )));
        }
        let (m, k) = (a.shape[ra - 2], a.shape[ra - 1]);
        let (kb, nn) = (b.shape[rb - 2], b.shape[rb - 1]);
        let a_batch = &a.shape[..ra - 2];
        let b_batch = &b.shape[..rb - 2];
        let b_batched = b_batch.iter().any(|&d| d != 1);
        if kb != k || (b_batched && a_batch != b_batch) {
            return Err(n.unsupported(format!(
                "operands of shapes {:?} and {:?}: the native engine multiplies [.., m, k] by \
                 [.., k, n] with equal batch axes (or one second matrix for all); run the \
                 model with --engine onnxruntime",
                a.shape, b.shape
            )));
        }
        let batch: usize = a_batch.iter().product();
        let dims = MatMulDims {
            batch,
            m,
            k,
            n: nn,
            b_batched,
        };
        let float_out = !qop && self.find_q(n).is_err();
        let (how, y_q, name) = if float_out {
            let scale = a_q.scale * b_q.scale;
            (
                MatMulOut::Float { scale },
                QParams::new(1.0, 0),
                n.outputs[0].clone(),
            )
        } else {
            let (y_q, (lo, hi), name) = self.out_q(n, if qop { Some((6, 7)) } else { None })?;
            let mult = a_q.scale * b_q.scale / y_q.scale;
            let zp = i32::from(y_q.zero_point);
            (MatMulOut::Quantized { mult, zp, lo, hi }, y_q, name)
        };
        self.macs += (batch * m * k * nn) as u64;
        let mut shape = a.shape[..ra - 1].to_vec();
        shape.push(nn);
        // On AVX-512 VNNI, `b` packed once per run for `vpdpbusd` (`k < 2^15` keeps the
        // kernel's wrapping sums exact).
        let packed = if self.vnni && k < 1 << 15 {
            let images = if b_batched { batch } else { 1 };
            self.touch(b.buf);
            let bytes = images * crate::onnx::kernels::packed_matmul_bytes(k, nn);
            let dst = self.new_buf(bytes);
            self.steps.push(Step::PackB {
                k,
                n: nn,
                images,
                src: b.buf,
                dst,
            });
            Some(dst)
        } else {
            None
        };
        self.touch(a.buf);
        self.touch(b.buf);
        if let Some(p) = packed {
            self.touch(p);
        }
        let dst = self.new_buf(batch * m * nn * how.elem_bytes());
        self.steps.push(Step::MatMulDyn {
            dims,
            a: a.buf,
            b: b.buf,
            packed,
            zps: (i32::from(a_q.zero_point), i32::from(b_q.zero_point)),
            how,
            dst,
        });
        let out = T {
            buf: dst,
            shape,
            layout: Layout::RowMajor,
            q: y_q,
        };
        self.set(
            &name,
            if float_out {
                Val::F32(out)
            } else {
                Val::Q(out)
            },
        );
        Ok(())
    }
}
