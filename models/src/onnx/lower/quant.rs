//! `QuantizeLinear` / `DequantizeLinear`: quantized values, dequantized views and
//! requantization tables; and which stored tensors are `uint8`.

use super::*;

impl Lowerer<'_> {
    pub(super) fn quantize_linear(&mut self, n: &Node) -> Result<(), EngineError> {
        // A constant, or a dequantized one quantized again (PyTorch's exporter shares equal
        // parameters, so one bias can be a convolution's int32 bias and an `Add`'s operand).
        if let Some(c) = super::float::constant_f32(&self.input(n, 0)?) {
            let v = self.quantize_constant(n, &c)?;
            self.set(&n.outputs[0], v);
            return Ok(());
        }
        if self.q_axis_per_channel(n)? {
            return Err(n.unsupported(
                "per-channel quantization of a computed activation is not supported (only \
                 of constant weights): quantize activations per tensor",
            ));
        }
        let q = self.qparams(n, 1, 2)?;
        let v = match self.input(n, 0)? {
            Val::F32(t) => Val::Q(self.quantized(t, q)),
            Val::Dq(t) => Val::Q(self.requant(t, q)),
            v => return Err(n.unsupported(format!("cannot quantize {}", kind_name(&v)))),
        };
        self.set(&n.outputs[0], v);
        Ok(())
    }

    /// The `f32` tensor `t` quantized with `q` ([`Step::Quantize`]).
    pub(super) fn quantized(&mut self, t: T, q: QParams) -> T {
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len);
        self.steps.push(Step::Quantize {
            src: t.buf,
            dst,
            n: len,
            scale: q.scale,
            zp: i32::from(q.zero_point),
            input: None,
        });
        T { buf: dst, q, ..t }
    }

    /// `QuantizeLinear` of a constant, computed at load: float weights with a Q/DQ pair (as
    /// PyTorch's QAT export, pytorch-quantization and ModelOpt write them), per tensor or per
    /// slice along `axis`. The integers are `kernels::quantize`'s (ONNX Runtime's, NaN
    /// included); they are kept in the `i8` domain (a `uint8` zero point becomes `zp - 128`
    /// and the values `x ^ 0x80`) with their parameters, which a `QLinear*` node reads and a
    /// `DequantizeLinear` replaces with its own.
    fn quantize_constant(&self, n: &Node, c: &Const) -> Result<Val, EngineError> {
        let s = self.konst(n, 1)?;
        let ConstData::F32(scales) = &s.data else {
            return Err(n.unsupported("the scale must be float32"));
        };
        if let Some(bad) = scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(n.unsupported(format!("scale {bad} must be finite and positive")));
        }
        let zps: Vec<i32> = match n.input(2) {
            Some(_) => {
                let z = self.konst(n, 2)?;
                (0..z.len())
                    .map(|i| zp_i8(&z.data, i))
                    .collect::<Option<_>>()
                    .ok_or_else(|| n.unsupported("the zero point must be int8 or uint8"))?
            }
            None => vec![super::absent_zero_point(n); scales.len()],
        };
        if zps.len() != scales.len() {
            return Err(n.unsupported(format!(
                "{} scales but {} zero points",
                scales.len(),
                zps.len()
            )));
        }
        let rank = c.shape.len() as i64;
        let axis = n.int("axis", 1)?;
        let axis = if axis < 0 { axis + rank } else { axis };
        let (channels, inner) = if scales.len() == 1 {
            (1, c.len().max(1))
        } else if (0..rank).contains(&axis) && c.shape[axis as usize] == scales.len() {
            let a = axis as usize;
            (scales.len(), c.shape[a + 1..].iter().product::<usize>())
        } else {
            return Err(n.unsupported(format!(
                "{} scales do not match axis {axis} of a constant of shape {:?}",
                scales.len(),
                c.shape
            )));
        };
        // To 4 bits (`check_types` lets only a constant through): the 8-bit result clamped
        // to the 4-bit range, the same saturation as the 4-bit one since the range is inside.
        // (A uint4 one is held as `x - 8` with its zero point shifted alike: the same range.)
        let (lo, hi) = match n.input(2).is_some_and(|z| self.g.four_bit.contains_key(z)) {
            true => (-8, 7),
            false => (-128, 127),
        };
        let values = c.to_f32();
        let mut data = vec![0i8; values.len()];
        for (i, (x, d)) in values.iter().zip(data.iter_mut()).enumerate() {
            let ch = (i / inner) % channels;
            super::super::kernels::quantize(
                Isa::PORTABLE,
                std::slice::from_ref(x),
                scales[ch],
                zps[ch],
                std::slice::from_mut(d),
            );
            *d = (*d).clamp(lo, hi);
        }
        Ok(Val::DqC {
            data: Const {
                shape: c.shape.clone(),
                data: ConstData::I8(data),
            },
            scales: scales.clone(),
            zps,
            axis: if channels == 1 { 0 } else { axis as usize },
        })
    }

    /// `t` re-expressed with quantization `q` (a table step when the parameters differ).
    pub(super) fn requant(&mut self, t: T, q: QParams) -> T {
        if t.q == q {
            return T { q, ..t };
        }
        let table = requant_table(t.q, q, |x| x);
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len);
        self.steps.push(Step::Lut {
            table: Box::new(table),
            n: len,
            src: t.buf,
            dst,
        });
        T { buf: dst, q, ..t }
    }

    pub(super) fn dequantize_linear(&mut self, n: &Node) -> Result<(), EngineError> {
        let axis = n.int("axis", 1)?;
        let v = self.input(n, 0)?;
        let s = self.konst(n, 1)?;
        let scales = match &s.data {
            ConstData::F32(v) => v.clone(),
            _ => return Err(n.unsupported("the scale must be float32")),
        };
        let explicit_zps: Option<Vec<i32>> = if n.input(2).is_some() {
            let z = self.konst(n, 2)?;
            Some(
                (0..z.len())
                    .map(|i| zp_i8(&z.data, i).unwrap_or(0))
                    .collect(),
            )
        } else {
            None
        };
        let out = match v {
            Val::Q(t) => {
                if scales.len() != 1 {
                    return Err(n.unsupported(
                        "per-channel dequantization of an activation is not supported",
                    ));
                }
                // Without a zero point input the tensor's own type decides (uint8: -128 in
                // the i8 domain, int8: 0): the producer's zero point says which it was.
                let zp = match &explicit_zps {
                    Some(z) => z.first().copied().unwrap_or(0),
                    None => i32::from(t.q.zero_point),
                };
                Val::Dq(T {
                    q: QParams::new(scales[0], zp.clamp(-128, 127) as i8),
                    ..t
                })
            }
            Val::C(c) => {
                let rank = c.shape.len() as i64;
                let axis = if axis < 0 { axis + rank } else { axis };
                let is_u8 = matches!(c.data, ConstData::U8(_));
                // u8 constants become i8 (x ^ 0x80 with zp - 128).
                let data = match c.data {
                    ConstData::U8(v) => Const {
                        shape: c.shape.clone(),
                        data: ConstData::I8(v.iter().map(|&x| (x ^ 0x80) as i8).collect()),
                    },
                    _ => c.clone(),
                };
                // Absent, a uint4 zero point 0 is -8 as held (`graph::dtype::UINT4`).
                let uint4 =
                    self.g.four_bit.get(&n.inputs[0]) == Some(&super::super::graph::dtype::UINT4);
                let default_zp = match (is_u8, uint4) {
                    (true, _) => -128,
                    (false, true) => -8,
                    (false, false) => 0,
                };
                let zps = explicit_zps.unwrap_or_else(|| vec![default_zp; scales.len().max(1)]);
                Val::DqC {
                    data,
                    scales,
                    zps,
                    axis: axis.max(0) as usize,
                }
            }
            // A Q/DQ pair on a constant (fake-quantized weights): the quantized integers
            // with this node's parameters (those of its QuantizeLinear, as exporters write
            // them). Without a zero point the integers' type decides, as above.
            Val::DqC { data, .. } => {
                let rank = data.shape.len() as i64;
                let axis = if axis < 0 { axis + rank } else { axis };
                let zps = explicit_zps.unwrap_or_else(|| {
                    let zp = if self.is_u8(&n.inputs[0]) { -128 } else { 0 };
                    vec![zp; scales.len().max(1)]
                });
                Val::DqC {
                    data,
                    scales,
                    zps,
                    axis: axis.max(0) as usize,
                }
            }
            v => return Err(n.unsupported(format!("cannot dequantize {}", kind_name(&v)))),
        };
        self.set(&n.outputs[0], out);
        Ok(())
    }

    /// Whether the quantized value `name` is a `uint8` tensor in the file (from its
    /// producer's zero point, following int8-transparent operators).
    pub(super) fn is_u8(&self, name: &str) -> bool {
        let mut name = name.to_string();
        for _ in 0..64 {
            if let Some(vi) = self.g.inputs.iter().find(|v| v.name == name) {
                return vi.elem == Some(ElemType::U8);
            }
            let Some(p) = self
                .g
                .nodes
                .iter()
                .find(|n| n.outputs.first() == Some(&name))
            else {
                return false;
            };
            let zp_index = super::super::graph::output_quant_inputs(&p.op).map(|(_, z)| z);
            match zp_index {
                Some(i) => {
                    return match p.input(i).and_then(|z| self.g.constant(z)) {
                        Some(c) => matches!(c.data, ConstData::U8(_)),
                        None => {
                            p.op == "QuantizeLinear"
                                && p.input(i).is_none()
                                && super::absent_zero_point(p) == -128
                        }
                    }
                }
                None => match p.input(0) {
                    Some(i) => name = i.to_string(),
                    None => return false,
                },
            }
        }
        false
    }
}
