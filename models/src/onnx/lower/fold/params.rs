//! Folding of parameter subgraphs (see the parent module's docs): a float operator whose
//! inputs are all float constants, dequantized initializers included ([`FLOAT_FOLDS`]),
//! becomes an `f32` constant computed with the engine's own kernels; a dequantized constant
//! moves through data-movement operators keeping its integers; comparisons, logic,
//! reductions and `Concat` read it as its `f32` values ([`DEQUANTIZED_FOLDS`]). Load time
//! only; errors name the node.

use super::*;
use crate::onnx::lower::float::{FLOAT_ARITHMETIC, FLOAT_UNARY_OPS};

/// Operators folded on dequantized constants too, as their `f32` values (ONNX Runtime
/// computes them on `DequantizeLinear`'s output): quantize_static puts Q/DQ pairs inside a
/// constant subgraph (RT-DETR's anchor grid: `Concat` of quantized constants, compared,
/// masked, reduced). The data-movement operators keep a dequantized constant's integers
/// instead (`fold_dequantized`), and arithmetic folds through `fold_float`.
pub(super) const DEQUANTIZED_FOLDS: &[&str] = &[
    "Concat",
    "Cast",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Where",
    "Tile",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceMean",
];

/// Float operators folded when every input is a float constant ([`Lowerer::fold_float`]),
/// besides the unary ones ([`FLOAT_UNARY_OPS`]) and the arithmetic ([`FLOAT_ARITHMETIC`]).
const FLOAT_FOLDS: &[&str] = &["Pow", "MatMul", "Gemm"];

impl Lowerer<'_> {
    /// Moves a dequantized constant (`Val::DqC`: input 0; every other input a plain
    /// constant) through a data-movement operator (`Reshape`, `Flatten`, `Squeeze`,
    /// `Unsqueeze`, `Transpose`, `Gather`, `Slice`, `Expand`): a per-tensor one keeps its
    /// integers and parameters (the operator moves integers), a per-axis one through
    /// `Transpose` too (its axis moved with the permutation); any other becomes its `f32`
    /// values first. A Swin-V2 position-bias table is gathered and reshaped this way.
    fn fold_dequantized(&mut self, n: &Node) -> Result<bool, EngineError> {
        const MOVES: &[&str] = &[
            "Reshape",
            "Flatten",
            "Squeeze",
            "Unsqueeze",
            "Transpose",
            "Gather",
            "Slice",
            "Expand",
        ];
        if !MOVES.contains(&n.op.as_str()) {
            return Ok(false);
        }
        let Some(Val::DqC {
            data,
            scales,
            zps,
            axis,
        }) = n.input(0).and_then(|name| self.vals.get(name)).cloned()
        else {
            return Ok(false);
        };
        let mut ins = vec![None];
        for name in &n.inputs[1..] {
            match self.vals.get(name) {
                _ if name.is_empty() => ins.push(None),
                Some(Val::C(c)) => ins.push(Some(c.clone())),
                _ => return Ok(false),
            }
        }
        let per_tensor = scales.len() <= 1;
        let transposed_axis = if n.op == "Transpose" && !per_tensor {
            let perm = super::shape::transpose_perm(n, data.shape.len())?;
            perm.iter().position(|&p| p == axis)
        } else {
            None
        };
        let keep = per_tensor || transposed_axis.is_some();
        ins[0] = Some(if keep {
            data.clone()
        } else {
            let dq = Val::DqC {
                data,
                scales: scales.clone(),
                zps: zps.clone(),
                axis,
            };
            super::float::constant_f32(&dq)
                .ok_or_else(|| n.unsupported("a dequantized constant with bad parameters"))?
        });
        if ins.iter().flatten().any(|c| c.len() > MAX_FOLDED) {
            return Ok(false);
        }
        let x = arg(n, &ins, 0)?;
        let c = match n.op.as_str() {
            "Transpose" => transpose(n, x)?,
            "Gather" => gather(n, &ins)?,
            "Slice" => slice(n, &ins)?,
            "Expand" => expand(n, x, arg(n, &ins, 1)?)?,
            _ => Const {
                shape: self.new_shape(n, &x.shape)?,
                data: x.data.clone(),
            },
        };
        let v = if keep {
            Val::DqC {
                data: c,
                scales,
                zps,
                axis: transposed_axis.unwrap_or(0),
            }
        } else {
            Val::C(c)
        };
        self.set(&n.outputs[0], v);
        Ok(true)
    }

    /// Folds `n` into an `f32` constant when it is a float operator (see [`FLOAT_FOLDS`])
    /// whose inputs are all float constants, dequantized ones included: the logit scale,
    /// position-bias MLP or anchor arithmetic an export leaves as a subgraph of
    /// parameters. Integer constants are left alone (the shape arithmetic above owns them),
    /// as are constants too large to be anything but weights.
    pub(super) fn fold_float(&mut self, n: &Node) -> Result<bool, EngineError> {
        let op = n.op.as_str();
        if self.fold_dequantized(n)? {
            return Ok(true);
        }
        if ![FLOAT_UNARY_OPS, FLOAT_ARITHMETIC, FLOAT_FOLDS]
            .iter()
            .any(|l| l.contains(&op))
        {
            return Ok(false);
        }
        let mut ins = Vec::with_capacity(n.inputs.len());
        for (i, name) in n.inputs.iter().enumerate() {
            if name.is_empty() {
                ins.push(None);
                continue;
            }
            let v = self.input(n, i)?;
            let float = match &v {
                Val::DqC { .. } => true,
                Val::C(c) => matches!(c.data, ConstData::F32(_)),
                _ => return Ok(false),
            };
            // Clip's bounds may be of any type; every other input must be a float.
            if !(float || (op == "Clip" && i > 0)) {
                return Ok(false);
            }
            match super::float::constant_f32(&v) {
                Some(c) if c.len() <= MAX_FOLDED => ins.push(Some(c)),
                _ => return Ok(false),
            }
        }
        let c = match op {
            "MatMul" => matmul(n, arg(n, &ins, 0)?, arg(n, &ins, 1)?)?,
            "Gemm" => gemm(n, &ins)?,
            "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
                binary(n, op, arg(n, &ins, 0)?, arg(n, &ins, 1)?)?
            }
            _ => {
                let Some(f) = self.float_unary_op(n)? else {
                    return Ok(false);
                };
                let x = arg(n, &ins, 0)?;
                let v = x.to_f32();
                let mut out = vec![0f32; v.len()];
                // The engine's own kernel, so a folded constant has the bits a computed
                // tensor would (the same on every ISA).
                crate::onnx::kernels::float::unary(Isa::PORTABLE, f, &v, &mut out);
                Const {
                    shape: x.shape.clone(),
                    data: ConstData::F32(out),
                }
            }
        };
        self.set(&n.outputs[0], Val::C(c));
        Ok(true)
    }
}

/// ONNX `MatMul` of two float constants (numpy's: a 1-D operand promoted to a matrix and
/// back, batch dimensions broadcast), each dot product summed in `f32` in `k` order.
pub(super) fn matmul(n: &Node, a: &Const, b: &Const) -> Result<Const, EngineError> {
    let (ConstData::F32(x), ConstData::F32(y)) = (&a.data, &b.data) else {
        return Err(n.unsupported("MatMul of constants that are not float"));
    };
    let (mut sa, mut sb) = (a.shape.clone(), b.shape.clone());
    if sa.is_empty() || sb.is_empty() {
        return Err(n.unsupported("MatMul of a scalar"));
    }
    let (a1, b1) = (sa.len() == 1, sb.len() == 1);
    if a1 {
        sa.insert(0, 1);
    }
    if b1 {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, nn) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    let batch = broadcast(&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let Some(batch) = batch.filter(|_| k == k2) else {
        return Err(n.unsupported(format!(
            "MatMul of constants of shapes {:?} and {:?}: they do not multiply",
            a.shape, b.shape
        )));
    };
    let images: usize = batch.iter().product();
    if images * m * nn > MAX_FOLDED {
        return Err(n.unsupported(format!(
            "MatMul of constants with {} outputs",
            images * m * nn
        )));
    }
    let mut out = Vec::with_capacity(images * m * nn);
    for i in 0..images {
        let ia = broadcast_index(&sa[..sa.len() - 2], &batch, i) * m * k;
        let ib = broadcast_index(&sb[..sb.len() - 2], &batch, i) * k * nn;
        for r in 0..m {
            for c in 0..nn {
                let mut acc = 0f32;
                for j in 0..k {
                    acc += x[ia + r * k + j] * y[ib + j * nn + c];
                }
                out.push(acc);
            }
        }
    }
    let mut shape = batch;
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(nn);
    }
    Ok(Const {
        shape,
        data: ConstData::F32(out),
    })
}

/// ONNX `Gemm` of float constants: `alpha · A' · B' + beta · C` (`'`: transposed when
/// `transA`/`transB`), `C` broadcast to the product's shape.
pub(super) fn gemm(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let two_d = |c: &Const, t: i64| -> Result<Const, EngineError> {
        if c.shape.len() != 2 {
            return Err(n.unsupported(format!("Gemm of a {:?} constant", c.shape)));
        }
        if t == 0 {
            return Ok(c.clone());
        }
        let (r, k) = (c.shape[0], c.shape[1]);
        let v = c.to_f32();
        Ok(Const {
            shape: vec![k, r],
            data: ConstData::F32((0..r * k).map(|i| v[(i % r) * k + i / r]).collect()),
        })
    };
    let a = two_d(arg(n, ins, 0)?, n.int("transA", 0)?)?;
    let b = two_d(arg(n, ins, 1)?, n.int("transB", 0)?)?;
    let (alpha, beta) = (n.float("alpha", 1.0)?, n.float("beta", 1.0)?);
    let mut y = matmul(n, &a, &b)?;
    let ConstData::F32(v) = &mut y.data else {
        return Err(n.unsupported("Gemm of constants that are not float"));
    };
    if alpha != 1.0 {
        v.iter_mut().for_each(|e| *e *= alpha);
    }
    if let Some(c) = ins.get(2).and_then(Option::as_ref) {
        if broadcast(&c.shape, &y.shape).as_deref() != Some(&y.shape[..]) {
            return Err(n.unsupported(format!(
                "Gemm's C of shape {:?} does not broadcast to {:?}",
                c.shape, y.shape
            )));
        }
        let cv = c.to_f32();
        for (i, e) in v.iter_mut().enumerate() {
            *e += beta * cv[broadcast_index(&c.shape, &y.shape, i)];
        }
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{floats, node};
    use super::*;

    /// numpy's `matmul`: batch dimensions broadcast, a 1-D operand promoted and its
    /// dimension dropped again; Gemm's transposes, alpha, beta and a broadcast C.
    #[test]
    fn constant_products_are_numpys() {
        let mm = node("MatMul", &[]);
        // [2, 1, 2, 3] x [4, 3, 1]: batch [2, 4], each a 2x1 result.
        let a: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let b: Vec<f32> = (0..12).map(|v| (v % 5) as f32 - 2.0).collect();
        let y = matmul(&mm, &floats(&[2, 1, 2, 3], &a), &floats(&[4, 3, 1], &b)).unwrap();
        assert_eq!(y.shape, vec![2, 4, 2, 1]);
        let yv = y.to_f32();
        for i in 0..2 {
            for j in 0..4 {
                for r in 0..2 {
                    let want: f32 = (0..3).map(|k| a[i * 6 + r * 3 + k] * b[j * 3 + k]).sum();
                    assert_eq!(yv[(i * 4 + j) * 2 + r], want, "[{i}, {j}, {r}]");
                }
            }
        }
        // [3] x [3, 2] -> [2]; [2, 3] x [3] -> [2].
        let v = floats(&[3], &[1.0, 2.0, 3.0]);
        let m = floats(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        assert_eq!(matmul(&mm, &v, &m).unwrap(), floats(&[2], &[4.0, 5.0]));
        let m23 = floats(&[2, 3], &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
        assert_eq!(matmul(&mm, &m23, &v).unwrap(), floats(&[2], &[4.0, 2.0]));
        assert!(matmul(&mm, &v, &m23).is_err(), "3 against 2 rows");
        // Gemm: alpha · Aᵀ · Bᵀ + beta · C, C a row broadcast over the rows.
        let gemm_node = node(
            "Gemm",
            &[
                ("transA", Attr::Int(1)),
                ("transB", Attr::Int(1)),
                ("alpha", Attr::Float(2.0)),
                ("beta", Attr::Float(0.5)),
            ],
        );
        let at = floats(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]); // A = [[1,2,3],[4,5,6]]
        let bt = floats(&[2, 3], &[1.0, 0.0, 0.0, 0.0, 1.0, 1.0]); // B = [[1,0],[0,1],[0,1]]
        let c = floats(&[2], &[10.0, 20.0]);
        let y = gemm(&gemm_node, &[Some(at), Some(bt), Some(c)]).unwrap();
        // A·B = [[1, 5], [4, 11]]; 2·that + 0.5·[10, 20].
        assert_eq!(y, floats(&[2, 2], &[7.0, 20.0, 13.0, 32.0]));
    }
}
