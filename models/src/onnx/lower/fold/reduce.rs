//! Reductions and `Tile` of constants (see the parent module's docs): an anchor generator
//! written as tensor code (RT-DETR's valid-anchor mask is `ReduceSum` of comparisons of a
//! constant grid; a batch offset is `Tile` of a `Range`) folds at load like the rest of the
//! shape arithmetic. Load time only; errors name the node; never panics.

use super::*;

/// ONNX `ReduceSum`, `ReduceMax`, `ReduceMin`, `ReduceProd` and `ReduceMean` of a constant
/// (`axes` from the attribute, or from input 1 since opset 18; `keepdims`;
/// `noop_with_empty_axes`). A float constant reduces in `f32`, its elements in index
/// order; an integer one in `i64` (wrapping, as ONNX Runtime's integer kernels do), cast
/// back to its type. `ReduceMean` of integers is refused (ONNX Runtime divides in its own
/// integer convention).
pub(super) fn reduce(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let x = arg(n, ins, 0)?;
    let rank = x.shape.len();
    let axes = match ins.get(1).and_then(Option::as_ref) {
        Some(c) => Some(
            c.to_i64()
                .ok_or_else(|| n.unsupported("the axes input must hold integers"))?,
        ),
        None => n.ints("axes")?,
    };
    let axes = match axes {
        Some(a) if !a.is_empty() => a,
        _ if n.int("noop_with_empty_axes", 0)? != 0 => return Ok(x.clone()),
        _ => (0..rank as i64).collect(),
    };
    let mut reduced = vec![false; rank];
    for &a in &axes {
        reduced[norm_axis(n, a, rank)?] = true;
    }
    let keep = n.int("keepdims", 1)? != 0;
    let kept: Vec<usize> = (0..rank)
        .map(|d| if reduced[d] { 1 } else { x.shape[d] })
        .collect();
    let out_len: usize = kept.iter().product();
    // Output element of each input element, in input order.
    let strides = row_major_strides(&kept);
    let target = |mut i: usize| {
        let mut o = 0;
        for d in (0..rank).rev() {
            let coord = i % x.shape[d];
            i /= x.shape[d];
            if !reduced[d] {
                o += coord * strides[d];
            }
        }
        o
    };
    let count = x.len() / out_len.max(1);
    let op = n.op.as_str();
    let data = match &x.data {
        ConstData::F32(v) => {
            let (init, f): (f32, fn(f32, f32) -> f32) = match op {
                "ReduceSum" | "ReduceMean" => (0.0, |a, b| a + b),
                "ReduceProd" => (1.0, |a, b| a * b),
                "ReduceMax" => (f32::NEG_INFINITY, f32::max),
                _ => (f32::INFINITY, f32::min),
            };
            let mut out = vec![init; out_len];
            for (i, &e) in v.iter().enumerate() {
                let o = &mut out[target(i)];
                *o = f(*o, e);
            }
            if op == "ReduceMean" {
                out.iter_mut().for_each(|o| *o /= count as f32);
            }
            ConstData::F32(out)
        }
        _ if op == "ReduceMean" => {
            return Err(n.unsupported(
                "ReduceMean of an integer constant (only float constants are averaged at load)",
            ))
        }
        _ => {
            let v = x.to_i64().unwrap_or_default();
            let (init, f): (i64, fn(i64, i64) -> i64) = match op {
                "ReduceSum" => (0, i64::wrapping_add),
                "ReduceProd" => (1, i64::wrapping_mul),
                "ReduceMax" => (i64::MIN, i64::max),
                _ => (i64::MAX, i64::min),
            };
            let mut out = vec![init; out_len];
            for (i, &e) in v.iter().enumerate() {
                let o = &mut out[target(i)];
                *o = f(*o, e);
            }
            ConstData::I64(out)
        }
    };
    let shape = if keep {
        kept
    } else {
        (0..rank)
            .filter(|&d| !reduced[d])
            .map(|d| x.shape[d])
            .collect()
    };
    let c = Const { shape, data };
    match x.data {
        ConstData::F32(_) | ConstData::I64(_) => Ok(c),
        ref d => cast_to(n, &c, elem_code(d)),
    }
}

/// ONNX `Tile` of a constant: `repeats[d]` copies along each axis `d`.
pub(super) fn tile(n: &Node, ins: &[Option<Const>]) -> Result<Const, EngineError> {
    let (x, repeats) = (arg(n, ins, 0)?, arg(n, ins, 1)?);
    let reps = repeats
        .to_i64()
        .filter(|r| r.len() == x.shape.len() && r.iter().all(|&v| v >= 0))
        .ok_or_else(|| {
            n.unsupported(format!(
                "Tile's repeats must be {} non-negative integers, one per axis",
                x.shape.len()
            ))
        })?;
    let shape: Vec<usize> = x
        .shape
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    let len: usize = shape.iter().product();
    if len > MAX_FOLDED {
        return Err(n.unsupported(format!("a constant of {len} elements")));
    }
    let strides = row_major_strides(&x.shape);
    let at: Vec<usize> = (0..len)
        .map(|mut i| {
            let mut idx = 0;
            for d in (0..shape.len()).rev() {
                let coord = i % shape[d];
                i /= shape[d];
                idx += (coord % x.shape[d].max(1)) * strides[d];
            }
            idx
        })
        .collect();
    Ok(pick(x, &at, shape))
}

#[cfg(test)]
mod tests {
    use super::super::tests::node;
    use super::*;

    fn ints(shape: &[usize], v: &[i64]) -> Option<Const> {
        Some(Const {
            shape: shape.to_vec(),
            data: ConstData::I64(v.to_vec()),
        })
    }

    #[test]
    fn reductions_follow_axes_and_keepdims() {
        let x = ints(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let sum = reduce(&node("ReduceSum", &[]), &[x.clone(), ints(&[1], &[1])]).unwrap();
        assert_eq!(
            (sum.shape.clone(), sum.to_i64()),
            (vec![2, 1], Some(vec![6, 15]))
        );
        let keep0 = [("keepdims", Attr::Int(0)), ("axes", Attr::Ints(vec![0]))];
        let max = reduce(&node("ReduceMax", &keep0), std::slice::from_ref(&x)).unwrap();
        assert_eq!(
            (max.shape.clone(), max.to_i64()),
            (vec![3], Some(vec![4, 5, 6]))
        );
        let all = reduce(&node("ReduceProd", &[]), &[x]).unwrap();
        assert_eq!(all.to_i64(), Some(vec![720]));
        let f = Some(Const {
            shape: vec![4],
            data: ConstData::F32(vec![1.0, 2.0, 3.0, 6.0]),
        });
        let mean = reduce(&node("ReduceMean", &[]), &[f]).unwrap();
        assert_eq!(mean.to_f32(), vec![3.0]);
        let bad = reduce(
            &node("ReduceSum", &[("axes", Attr::Ints(vec![2]))]),
            &[ints(&[2], &[1, 2])],
        );
        assert!(bad.is_err());
    }

    #[test]
    fn tile_repeats_each_axis() {
        let x = ints(&[2, 1], &[7, 8]);
        let t = tile(&node("Tile", &[]), &[x.clone(), ints(&[2], &[2, 3])]).unwrap();
        assert_eq!(t.shape, vec![4, 3]);
        assert_eq!(t.to_i64(), Some(vec![7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8]));
        assert!(tile(&node("Tile", &[]), &[x, ints(&[1], &[2])]).is_err());
    }
}
