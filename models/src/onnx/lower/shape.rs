//! The shape operators (`Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Transpose`): views
//! of the same bytes where the memory order allows, a copy where it does not.

use super::*;

impl Lowerer<'_> {
    pub(super) fn reshape_like(&mut self, n: &Node) -> Result<(), EngineError> {
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
            // A float tensor (TensorRT-style placement: a pooled feature before the
            // classifier, a head's map flattened): in row-major order (a relabelling when it
            // already is, as NHWC with 1×1 pixels; else one transpose), then relabelled.
            Val::F32(t) if t.layout == Layout::RowMajor || t.shape.len() == 4 => {
                let shape = self.new_shape(n, &t.shape)?;
                let t = T {
                    shape,
                    ..self.row_major(t, 4)
                };
                self.set(&n.outputs[0], Val::F32(t));
                return Ok(());
            }
            v => return Err(n.unsupported(format!("cannot reshape {}", kind_name(&v)))),
        };
        let shape = self.new_shape(n, &t.shape)?;
        let t = self.row_major(t, 1);
        let t = T { shape, ..t };
        self.set(&n.outputs[0], if is_q { Val::Q(t) } else { Val::Dq(t) });
        Ok(())
    }

    pub(super) fn new_shape(&self, n: &Node, s: &[usize]) -> Result<Vec<usize>, EngineError> {
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

    pub(super) fn transpose(&mut self, n: &Node) -> Result<(), EngineError> {
        // Dequantized weights transposed before their reader (a `Linear` layer as the dynamo
        // exporter writes it: `DequantizeLinear(W[out, in]) → Transpose → MatMul`): the
        // integers transposed at load, the per-channel axis moved with them.
        if let Val::DqC {
            data,
            scales,
            zps,
            axis,
        } = self.input(n, 0)?
        {
            let perm = transpose_perm(n, data.shape.len())?;
            let moved = perm.iter().position(|&p| p == axis).unwrap_or(0);
            let v = Val::DqC {
                data: super::fold::transpose(n, &data)?,
                axis: if scales.len() > 1 { moved } else { 0 },
                scales,
                zps,
            };
            self.set(&n.outputs[0], v);
            return Ok(());
        }
        let (t, kind) = self.movable(n, "transpose")?;
        let rank = t.shape.len();
        let perm = transpose_perm(n, rank)?;
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
            let t = self.row_major(t, kind.elem_bytes());
            let buf = self.permute_copy(&t, &perm, kind.elem_bytes());
            T {
                buf,
                shape,
                layout: Layout::RowMajor,
                ..t
            }
        };
        self.set(&n.outputs[0], kind.wrap(out));
        Ok(())
    }

    /// ONNX `Slice` (starts, ends and optional axes and steps as constants; positive steps)
    /// as one strided copy.
    pub(super) fn slice(&mut self, n: &Node) -> Result<(), EngineError> {
        let (t, kind) = self.movable(n, "slice")?;
        let ints = |s: &Self, i: usize, what: &str| -> Result<Option<Vec<i64>>, EngineError> {
            if n.input(i).is_none() {
                return Ok(None);
            }
            s.konst(n, i)?
                .to_i64()
                .map(Some)
                .ok_or_else(|| n.unsupported(format!("{what} must be integers")))
        };
        let (Some(starts), Some(ends)) = (ints(self, 1, "starts")?, ints(self, 2, "ends")?) else {
            return Err(n.unsupported(
                "Slice needs starts and ends as inputs (opset 10+); re-export the model with \
                 opset 13 or newer",
            ));
        };
        let axes = ints(self, 3, "axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = ints(self, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(n.unsupported("starts, ends, axes and steps differ in length"));
        }
        let mut sel: Vec<(usize, usize, usize, usize)> = Vec::new();
        for (((&s0, &e0), &a), &k) in starts.iter().zip(&ends).zip(&axes).zip(&steps) {
            let a = axis_index(n, a, t.shape.len())?;
            if sel.iter().any(|&(b, ..)| b == a) {
                return Err(n.unsupported(format!(
                    "axis {a} is sliced twice: the model is malformed (ONNX Runtime refuses \
                     it too); re-export it"
                )));
            }
            if k < 1 {
                return Err(n.unsupported(format!(
                    "step {k}: only positive steps are supported (a reversing slice is not); \
                     run the model with --engine onnxruntime"
                )));
            }
            let dim = t.shape[a] as i64;
            let clampi = |v: i64| (if v < 0 { v + dim } else { v }).clamp(0, dim);
            let (s1, e1) = (clampi(s0), clampi(e0));
            let count = if e1 > s1 { (e1 - s1 + k - 1) / k } else { 0 };
            if count == 0 {
                return Err(n.unsupported(format!(
                    "the slice of axis {a} is empty (start {s0}, end {e0} of {dim}): empty \
                     tensors are not supported"
                )));
            }
            sel.push((a, s1 as usize, k as usize, count as usize));
        }
        let out = self.strided_part(&t, &sel, kind.elem_bytes());
        self.set(&n.outputs[0], kind.wrap(out));
        Ok(())
    }

    /// ONNX `Gather` of a computed tensor with constant indices that step evenly forward:
    /// one strided copy of that axis, which then takes the indices' shape (a scalar index
    /// drops it: a transformer taking q, k and v from one packed tensor, or its class
    /// token; `torch.as_strided` exported as a Gather of `0..n` shaped `[1, n, 1, 1]`).
    /// Other indices (repeated, backwards, uneven) are refused by name.
    pub(super) fn gather(&mut self, n: &Node) -> Result<(), EngineError> {
        let (t, kind) = self.movable(n, "gather")?;
        let a = axis_index(n, n.int("axis", 0)?, t.shape.len())?;
        let idx = self.konst(n, 1)?;
        let dim = t.shape[a] as i64;
        let Some(values) = idx.to_i64() else {
            return Err(n.unsupported("the indices must be integers"));
        };
        let mut picked = Vec::with_capacity(values.len());
        for &v in &values {
            let i = if v < 0 { v + dim } else { v };
            if !(0..dim).contains(&i) {
                return Err(n.unsupported(format!("index {v} is outside an axis of {dim}")));
            }
            picked.push(i as usize);
        }
        // Indices that step evenly forward (one index, or `as_strided` written as a Gather
        // of `0..n`): one strided copy, the axis then relabelled as the indices' shape.
        let step = match picked.as_slice() {
            [_] => 1,
            [a0, a1, ..] if a1 > a0 => a1 - a0,
            _ => 0,
        };
        let even = step > 0 && picked.windows(2).all(|w| w[1] == w[0] + step);
        if !even {
            return Err(n.unsupported(
                "only constant indices that step evenly forward are supported (a computed \
                 tensor is gathered as a strided slice); run the model with --engine \
                 onnxruntime",
            ));
        }
        let relabel = idx.shape.len() != 1;
        // Changing the axes of an NHWC tensor changes its meaning: row-major first.
        let t = if relabel {
            self.row_major(t, kind.elem_bytes())
        } else {
            t
        };
        let sel = [(a, picked[0], step, picked.len())];
        let mut out = self.strided_part(&t, &sel, kind.elem_bytes());
        if relabel {
            out.shape.splice(a..=a, idx.shape.iter().copied());
        }
        self.set(&n.outputs[0], kind.wrap(out));
        Ok(())
    }

    /// ONNX `Split` (sizes from the `split` input, the `split` attribute before opset 13,
    /// or equal parts, the last one smaller when `num_outputs` does not divide the axis):
    /// one strided copy per output.
    pub(super) fn split(&mut self, n: &Node) -> Result<(), EngineError> {
        let (t, kind) = self.movable(n, "split")?;
        let a = axis_index(n, n.int("axis", 0)?, t.shape.len())?;
        let dim = t.shape[a];
        let parts = n.outputs.len();
        let sizes: Vec<usize> = match (n.input(1), n.ints("split")?) {
            (Some(_), _) => self
                .konst(n, 1)?
                .to_i64()
                .ok_or_else(|| n.unsupported("split sizes must be integers"))?
                .iter()
                .map(|&v| v.max(0) as usize)
                .collect(),
            (None, Some(v)) => v.iter().map(|&v| v.max(0) as usize).collect(),
            (None, None) => {
                let each = dim.div_ceil(parts.max(1));
                (0..parts)
                    .map(|i| each.min(dim.saturating_sub(i * each)))
                    .collect()
            }
        };
        if sizes.len() != parts || sizes.iter().sum::<usize>() != dim || sizes.contains(&0) {
            return Err(n.unsupported(format!(
                "split sizes {sizes:?} do not cut axis {a} of {dim} into {parts} non-empty \
                 parts: the model is malformed (ONNX Runtime refuses it too); re-export it"
            )));
        }
        let mut start = 0;
        for (name, &len) in n.outputs.iter().zip(&sizes) {
            // An omitted output is not copied.
            if !name.is_empty() {
                let out = self.strided_part(&t, &[(a, start, 1, len)], kind.elem_bytes());
                self.set(name, kind.wrap(out));
            }
            start += len;
        }
        Ok(())
    }

    /// The tensor a data-movement operator takes (quantized, dequantized, or a float route's
    /// `f32`) and its kind; anything else is an error saying the node cannot `what` it.
    pub(super) fn movable(&self, n: &Node, what: &str) -> Result<(T, Moved), EngineError> {
        match self.input(n, 0)? {
            Val::Q(t) => Ok((t, Moved::Q)),
            Val::Dq(t) => Ok((t, Moved::Dq)),
            Val::F32(t) => Ok((t, Moved::F32)),
            v => Err(n.unsupported(format!("cannot {what} {}", kind_name(&v)))),
        }
    }

    /// A copy of the part of `t` that `sel` picks, as (logical axis, first index, step,
    /// count) per cut axis, in `t`'s own memory layout (NHWC stays NHWC): one strided
    /// copy step of `elem`-byte elements (their bytes an innermost axis of the copy).
    fn strided_part(&mut self, t: &T, sel: &[(usize, usize, usize, usize)], elem: usize) -> T {
        let nhwc = t.layout == Layout::Nhwc && t.shape.len() == 4;
        // Logical axis -> physical dimension.
        let phys = |a: usize| if nhwc { [0, 3, 1, 2][a] } else { a };
        let mut pshape: Vec<usize> = if nhwc {
            let s = &t.shape;
            vec![s[0], s[2], s[3], s[1]]
        } else {
            t.shape.clone()
        };
        let mut strides = row_major_strides(&pshape);
        let mut shape = t.shape.clone();
        let mut offset = 0;
        for &(a, first, step, count) in sel {
            let p = phys(a);
            offset += first * strides[p];
            strides[p] *= step;
            pshape[p] = count;
            shape[a] = count;
        }
        if elem > 1 {
            strides.iter_mut().for_each(|s| *s *= elem);
            offset *= elem;
            pshape.push(elem);
            strides.push(1);
        }
        self.touch(t.buf);
        let dst = self.new_buf(pshape.iter().product());
        self.steps
            .push(Step::strided_copy(pshape, strides, offset, t.buf, dst));
        T {
            buf: dst,
            shape,
            ..t.clone()
        }
    }
}

/// Axis `a` of a rank-`rank` tensor (negative counts from the end), or an error naming it.
/// `Transpose`'s permutation of `rank` axes (its `perm`, negative axes counted from the end,
/// or the axes reversed), or an error naming the node when it is not one.
pub(super) fn transpose_perm(n: &Node, rank: usize) -> Result<Vec<usize>, EngineError> {
    let perm: Vec<usize> = match n.ints("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| axis_index(n, a, rank))
            .collect::<Result<_, _>>()?,
        None => (0..rank).rev().collect(),
    };
    let mut seen = perm.clone();
    seen.sort_unstable();
    if seen != (0..rank).collect::<Vec<_>>() {
        return Err(n.unsupported(format!("perm {perm:?} is not a permutation of 0..{rank}")));
    }
    Ok(perm)
}

pub(super) fn axis_index(n: &Node, a: i64, rank: usize) -> Result<usize, EngineError> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(n.unsupported(format!("axis {a} is outside rank {rank}")))
    }
}

/// What kind of tensor a data-movement operator moves ([`Lowerer::movable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moved {
    /// Quantized bytes (a `QuantizeLinear`'s output).
    Q,
    /// A dequantized view of quantized bytes.
    Dq,
    /// A float route's `f32` tensor.
    F32,
}

impl Moved {
    /// Bytes per element.
    pub(super) fn elem_bytes(self) -> usize {
        if self == Moved::F32 {
            4
        } else {
            1
        }
    }

    /// `t` as a value of this kind.
    pub(super) fn wrap(self, t: T) -> Val {
        match self {
            Moved::Q => Val::Q(t),
            Moved::Dq => Val::Dq(t),
            Moved::F32 => Val::F32(t),
        }
    }
}
