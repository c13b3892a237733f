//! Elementwise operators (`Add`, `Mul`, the table operators, `Relu`/`Clip` on their own)
//! and `Concat`.

use super::*;
use crate::onnx::program::Operand;
use redline_runtime::det_math as dm;

impl Lowerer<'_> {
    pub(super) fn standalone_clamp(&mut self, n: &Node) -> Result<(), EngineError> {
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

    /// An operand of a binary op: a quantized tensor or a per-tensor quantized constant.
    pub(super) fn operand(
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

    pub(super) fn binary(&mut self, n: &Node) -> Result<(), EngineError> {
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
                        self.nhwc(t)?
                    } else {
                        self.row_major(t, 1)
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
                    Operand::Buf(t.buf)
                }
                (None, Some(c)) => {
                    let ConstData::I8(v) = &c.data else {
                        return Err(n.unsupported("constant operands must be int8 or uint8"));
                    };
                    // A rank-4 constant in NHWC work order: permute its data.
                    let v = if use_nhwc {
                        nchw_to_nhwc(v, s)
                    } else {
                        v.clone()
                    };
                    Operand::Const(v)
                }
                _ => return Err(invalid("binary operand missing".into())),
            });
        }
        // Which of the operands and the output the file stores as `uint8`: ONNX Runtime's
        // quantized Add and Mul work on the stored integers.
        let [a_u8, b_u8] = [n.input(0), n.input(if qop { 3 } else { 1 })]
            .map(|i| i.is_some_and(|i| self.is_u8(i)));
        let out_u8 = self.is_u8(&out_name);
        // Fewer, longer rows for the kernel: the same elements in the same order.
        let (shape, a_strides, b_strides) =
            super::super::kernels::coalesce(&phys(&out_shape), &strides(&sa), &strides(&sb));
        let op = Binary {
            kind: if is_add {
                // `uint8` stored integers when both operands and the output are
                // (`AddParams::off`), with `uint8` zero points.
                let off: i16 = if a_u8 && b_u8 && out_u8 { 128 } else { 0 };
                let stored = |z: i8| f32::from(i16::from(z) + off);
                let (ra, rb) = (aq.scale / y_q.scale, bq.scale / y_q.scale);
                let fixed = add_fixed(
                    ra,
                    rb,
                    stored(aq.zero_point),
                    stored(bq.zero_point),
                    stored(y_q.zero_point),
                );
                BinaryKind::Add(AddParams {
                    ra,
                    rb,
                    fixed,
                    off: f32::from(off),
                })
            } else {
                match n.op.as_str() {
                    "Div" => BinaryKind::Div,
                    "Sub" => BinaryKind::Sub,
                    _ => {
                        // ONNX Runtime runs a `QLinearMul` for the operator, and for a QDQ
                        // `Mul` whose operands and output are of one type; else it
                        // multiplies the dequantized values in float.
                        if qop || (a_u8 == out_u8 && b_u8 == out_u8) {
                            BinaryKind::Mul(MulParams::new(
                                aq.scale,
                                bq.scale,
                                y_q.scale,
                                i32::from(y_q.zero_point),
                                out_u8,
                            ))
                        } else {
                            BinaryKind::MulDequantized
                        }
                    }
                }
            },
            sa: aq.scale,
            sb: bq.scale,
            sy: y_q.scale,
            za: i32::from(aq.zero_point),
            zb: i32::from(bq.zero_point),
            zy: i32::from(y_q.zero_point),
            lo,
            hi,
            shape,
            a_strides,
            b_strides,
        };
        let len: usize = out_shape.iter().product();
        let dst = self.new_buf(len);
        let mut it = operands.into_iter();
        let (oa, ob) = (
            it.next().unwrap_or(Operand::Buf(0)),
            it.next().unwrap_or(Operand::Buf(0)),
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

    pub(super) fn unary(&mut self, n: &Node) -> Result<(), EngineError> {
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
        let op = n.op.as_str();
        let f = |x: f32| activation(op, alpha, beta, x).unwrap_or(f32::NAN);
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

    pub(super) fn concat(&mut self, n: &Node) -> Result<(), EngineError> {
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
        let rank = first_shape.len();
        let axis = super::shape::axis_index(n, n.int("axis", 1)?, rank)?;
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
                        self.nhwc(t)?
                    } else {
                        self.row_major(t, 1)
                    };
                    (t.shape.clone(), Operand::Buf(t.buf))
                }
                (None, Some(c)) => {
                    let ConstData::I8(v) = c.data else {
                        return Err(n.unsupported("constant inputs must be int8 or uint8"));
                    };
                    (c.shape.clone(), Operand::Const(v))
                }
                _ => return Err(invalid("concat operand missing".into())),
            };
            let inner = concat_inner(n, &shape, &first_shape, axis, nhwc)?;
            // A constant of a channel concat in NHWC work order (e.g. a CoordConv-style
            // position map beside the features), NCHW in the file (4-D: checked above), is
            // permuted once here, at load.
            let operand = match operand {
                Operand::Const(v) if nhwc => Operand::Const(nchw_to_nhwc(&v, &shape)),
                o => o,
            };
            out_shape[axis] += shape[axis];
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
            if let Operand::Buf(b) = operand {
                self.touch(*b);
            }
        }
        let outer = concat_outer(&out_shape, axis, nhwc);
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
}

/// The elements one input of shape `shape` contributes to each block of a concat along
/// `axis` (`nhwc`: a channel concat of NHWC tensors, blocks of one pixel), after checking
/// that it matches the first input's shape `first` outside `axis`.
pub(super) fn concat_inner(
    n: &Node,
    shape: &[usize],
    first: &[usize],
    axis: usize,
    nhwc: bool,
) -> Result<usize, EngineError> {
    if shape.len() != first.len() || (0..shape.len()).any(|d| d != axis && shape[d] != first[d]) {
        return Err(n.unsupported(format!(
            "input shape {shape:?} does not match {first:?} outside axis {axis}"
        )));
    }
    Ok(if nhwc {
        shape[1]
    } else {
        shape[axis..].iter().product()
    })
}

/// The blocks of a concat along `axis` with output shape `out_shape` (see [`concat_inner`]).
pub(super) fn concat_outer(out_shape: &[usize], axis: usize, nhwc: bool) -> usize {
    if nhwc {
        out_shape[0] * out_shape[2] * out_shape[3]
    } else {
        out_shape[..axis].iter().product()
    }
}

/// `v`, a rank-4 tensor of shape `s` in NCHW order, in NHWC order (a copy; load time only).
pub(super) fn nchw_to_nhwc<E: Copy + Default>(v: &[E], s: &[usize]) -> Vec<E> {
    let (n0, c0, h0, w0) = (s[0], s[1], s[2], s[3]);
    if c0 == 1 || h0 * w0 == 1 {
        return v.to_vec();
    }
    let mut out = vec![E::default(); v.len()];
    for i0 in 0..n0 {
        for ci in 0..c0 {
            for y in 0..h0 {
                for x in 0..w0 {
                    out[((i0 * h0 + y) * w0 + x) * c0 + ci] = v[((i0 * c0 + ci) * h0 + y) * w0 + x];
                }
            }
        }
    }
    out
}

/// ONNX `Softplus`: `ln(1 + exp(x))`, with the deterministic `exp` and `ln`.
fn softplus(x: f32) -> f32 {
    dm::ln(1.0 + dm::exp(x))
}

/// The table activations' formulas (ONNX's, with the deterministic `exp`, `ln`, `tanh`),
/// shared by their tables and by float islands (`island`) so that both give the same bits;
/// `None` for another operator. `alpha`/`beta`: `LeakyRelu`'s and `HardSigmoid`'s.
pub(crate) fn activation(op: &str, alpha: f32, beta: f32, x: f32) -> Option<f32> {
    Some(match op {
        "Sigmoid" | "QLinearSigmoid" => 1.0 / (1.0 + dm::exp(-x)),
        "Tanh" => dm::tanh(x),
        "HardSigmoid" => (alpha * x + beta).clamp(0.0, 1.0),
        // ONNX: x · max(0, min(1, x / 6 + 0.5)) (MobileNetV3's activation).
        "HardSwish" => x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0),
        "Softplus" => softplus(x),
        // ONNX (opset 18): x · tanh(softplus(x)) (YOLOv4's activation).
        "Mish" => x * dm::tanh(softplus(x)),
        "LeakyRelu" | "QLinearLeakyRelu" => {
            if x >= 0.0 {
                x
            } else {
                alpha * x
            }
        }
        _ => return None,
    })
}
