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
//!
//! `Einsum` of two computed tensors runs here when its equation is such a product over
//! equal batch axes: `..ik,..kj->..ij`, or `..ik,..jk->..ij` (the second operand
//! transposed first, a byte copy): MaxViT's attention writes `q·kᵀ` and `p·v` so. Any other
//! equation is refused by name. Such an `Einsum` of float tensors (a float model's
//! attention) is the float route's `MatMul` (`lower::float`).

use super::*;
use crate::onnx::kernels::{MatMulDims, MatMulOut};

impl Lowerer<'_> {
    /// True when `n` is a `MatMul`/`QLinearMatMul` whose second operand is computed.
    pub(super) fn second_operand_computed(&self, n: &Node) -> bool {
        let i = if n.op == "QLinearMatMul" { 3 } else { 1 };
        matches!(n.op.as_str(), "MatMul" | "QLinearMatMul")
            && matches!(self.input(n, i), Ok(Val::Dq(_) | Val::Q(_)))
    }

    /// `Einsum` as the batched product it spells (see the module docs): the same lowering
    /// as a `MatMul` node, the second operand transposed first when the equation says so.
    pub(super) fn einsum(&mut self, n: &Node) -> Result<(), EngineError> {
        let eq = n.string("equation", "")?;
        let Some((transposed, rank)) = einsum_product(&eq) else {
            return Err(n.unsupported(format!(
                "equation {eq:?}: the native engine runs an Einsum that is a batched matrix \
                 product of two tensors (\"bhik,bhkj->bhij\" or \"bhik,bhjk->bhij\"); \
                 rewrite it as MatMul or run the model with --engine onnxruntime"
            )));
        };
        if n.inputs.len() != 2 {
            return Err(n.unsupported("an Einsum product of two inputs"));
        }
        for i in 0..2 {
            let r = match self.input(n, i)? {
                Val::Dq(t) | Val::Q(t) | Val::F32(t) | Val::I { t, .. } => t.shape.len(),
                Val::C(c) | Val::DqC { data: c, .. } => c.shape.len(),
            };
            if r != rank {
                return Err(n.unsupported(format!(
                    "equation {eq:?} names {rank} axes, input {i} has {r}"
                )));
            }
        }
        let mut mm = Node {
            op: "MatMul".to_string(),
            attrs: HashMap::new(),
            ..n.clone()
        };
        if transposed {
            let mut perm: Vec<i64> = (0..rank as i64).collect();
            perm.swap(rank - 2, rank - 1);
            let bt = format!("{}::einsum_transposed_b", n.outputs[0]);
            let t = Node {
                op: "Transpose".to_string(),
                inputs: vec![n.inputs[1].clone()],
                outputs: vec![bt.clone()],
                attrs: HashMap::from([("perm".to_string(), Attr::Ints(perm))]),
                ..n.clone()
            };
            self.transpose(&t)?;
            mm.inputs[1] = bt;
        }
        if self.is_float_product(&mm) {
            return self.float_matmul(&mm);
        }
        if !self.second_operand_computed(&mm) {
            return Err(n.unsupported(
                "an Einsum of a constant operand; export it as MatMul or run the model with \
                 --engine onnxruntime",
            ));
        }
        self.matmul_two_tensors(&mm)
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

/// Whether the `Einsum` equation `eq` is a batched matrix product of two operands over equal
/// batch axes: `Some((false, rank))` for `..ik,..kj->..ij`, `Some((true, rank))` for
/// `..ik,..jk->..ij` (the second operand transposed), `rank` the axes each term names;
/// `None` for anything else. Spaces are ignored; every index a single letter, no ellipsis.
fn einsum_product(eq: &str) -> Option<(bool, usize)> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = eq.split_once("->")?;
    let (a, b) = lhs.split_once(',')?;
    let (a, b, out): (Vec<char>, Vec<char>, Vec<char>) = (
        a.chars().collect(),
        b.chars().collect(),
        out.chars().collect(),
    );
    let r = a.len();
    if r < 2 || b.len() != r || out.len() != r || !a.iter().all(char::is_ascii_alphabetic) {
        return None;
    }
    let batch = &a[..r - 2];
    if b[..r - 2] != *batch || out[..r - 2] != *batch {
        return None;
    }
    let (i, k) = (a[r - 2], a[r - 1]);
    let j = out[r - 1];
    let distinct = {
        let mut all: Vec<char> = batch.to_vec();
        all.extend([i, j, k]);
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        all.len() == n
    };
    if !distinct || out[r - 2] != i {
        return None;
    }
    match (b[r - 2], b[r - 1]) {
        (x, y) if x == k && y == j => Some((false, r)),
        (x, y) if x == j && y == k => Some((true, r)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::einsum_product;

    #[test]
    fn einsum_products_are_recognised() {
        assert_eq!(
            einsum_product("B G H I D, B G H J D -> B G H I J"),
            Some((true, 5))
        );
        assert_eq!(
            einsum_product("B G H I J, B G H J D -> B G H I D"),
            Some((false, 5))
        );
        assert_eq!(einsum_product("ik,kj->ij"), Some((false, 2)));
        assert_eq!(einsum_product("bhid,bhjd->bhij"), Some((true, 4)));
        // A contraction over another axis, a reduction, a broadcast batch, three operands,
        // an ellipsis, a repeated index: not a product this lowering runs.
        assert_eq!(einsum_product("bik,bkj->bji"), None);
        assert_eq!(einsum_product("bik,bkj->bi"), None);
        assert_eq!(einsum_product("bik,ckj->bij"), None);
        assert_eq!(einsum_product("ij,jk,kl->il"), None);
        assert_eq!(einsum_product("...ik,...kj->...ij"), None);
        assert_eq!(einsum_product("iik,ikj->iij"), None);
        assert_eq!(einsum_product("ij,jk"), None);
    }
}
