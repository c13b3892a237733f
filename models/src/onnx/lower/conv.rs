//! Convolutions and matrix products (`Conv`, `QLinearConv`, `Gemm`, `MatMul`,
//! `QLinearMatMul`, `QGemm`): weights, bias, output quantization and the kernel choice.

use super::*;
use crate::onnx::kernels::taps_inside;

mod routes;

impl Lowerer<'_> {
    /// Output quantization and clamp for a float op (QDQ: the following QuantizeLinear) or
    /// a QLinear op (its y_scale / y_zero_point inputs).
    pub(super) fn out_q(
        &mut self,
        n: &Node,
        qop: Option<(usize, usize)>,
    ) -> Result<(QParams, (i8, i8), String), EngineError> {
        match qop {
            Some((s, z)) => {
                let q = self.qparams(n, s, z)?;
                Ok((q, (-128, 127), n.outputs[0].clone()))
            }
            None => {
                let (q, clamp, chain, name) = self.find_q(n)?;
                self.done.extend(chain);
                Ok((q, clamp, name))
            }
        }
    }

    /// Weight tensor of a Conv / Gemm: `i8` values, per-output-channel scales (len `oc`).
    pub(super) fn weights(
        &self,
        n: &Node,
        v: Val,
        oc: usize,
        axis_expected: usize,
        qop: Option<(usize, usize)>,
    ) -> Result<WeightParts, EngineError> {
        let (data, scales, zps) = match (v, qop) {
            (Val::DqC { data, scales, zps, axis }, None) => {
                if scales.len() > 1 && axis != axis_expected {
                    return Err(n.unsupported(format!("weights are quantized per channel along axis {axis}; expected axis {axis_expected} (output channels)")));
                }
                (data, scales, zps)
            }
            (Val::C(c), Some((s, z))) => {
                let sc = self.konst(n, s)?;
                let scales = match &sc.data {
                    ConstData::F32(v) => v.clone(),
                    _ => return Err(n.unsupported("weight scale must be float32")),
                };
                let zc = if n.input(z).is_some() { Some(self.konst(n, z)?) } else { None };
                let u8w = matches!(c.data, ConstData::U8(_));
                let zps: Vec<i32> = match &zc {
                    Some(zc) => (0..zc.len()).map(|i| zp_i8(&zc.data, i).unwrap_or(0)).collect(),
                    None => vec![if u8w { -128 } else { 0 }],
                };
                let data = match c.data {
                    ConstData::U8(v) => Const { shape: c.shape.clone(), data: ConstData::I8(v.iter().map(|&x| (x ^ 0x80) as i8).collect()) },
                    _ => c,
                };
                (data, scales, zps)
            }
            (Val::C(_), None) => {
                return Err(n.unsupported("float weights: the native engine needs INT8 weights (a DequantizeLinear of an int8 initializer); quantize the model (e.g. onnxruntime.quantization.quantize_static) or run it with --engine onnxruntime"))
            }
            (v, _) => return Err(n.unsupported(format!("weights are {}; they must be a constant", kind_name(&v)))),
        };
        let ConstData::I8(w) = data.data else {
            return Err(n.unsupported("weights must be int8 or uint8"));
        };
        // Weights with a zero point (ONNX Runtime's quantize_static quantizes a weight that
        // reaches its MatMul through an Identity as an activation, uint8 around 127): the
        // same values as `code - zero point`, symmetric, when every one fits in int8.
        let w = if zps.iter().any(|&z| z != 0) {
            symmetric_weights(&w, &data.shape, &zps, axis_expected).ok_or_else(|| {
                n.unsupported(
                    "weights have a zero point and codes more than 128 below or 127 above it, \
                     which no symmetric int8 weight holds; quantize with symmetric weights (e.g. \
                     weight_type=QInt8) or run the model with --engine onnxruntime",
                )
            })?
        } else {
            w
        };
        let scales = if scales.len() == 1 {
            vec![scales[0]; oc]
        } else {
            scales
        };
        if scales.len() != oc {
            return Err(n.unsupported(format!(
                "{} weight scales for {oc} output channels",
                scales.len()
            )));
        }
        Ok((w, scales, data.shape))
    }

    /// Whether input 1 of `n` is a dequantized constant with a zero point that
    /// [`symmetric_weights`] cannot remove (a code 128 or more above it): such weights run
    /// on the float route (dequantized at load) instead of being refused.
    pub(super) fn unshiftable_weights(&self, n: &Node) -> bool {
        let Some(Val::DqC {
            data:
                Const {
                    data: ConstData::I8(w),
                    shape,
                },
            zps,
            axis,
            ..
        }) = n.input(1).and_then(|name| self.vals.get(name))
        else {
            return false;
        };
        zps.iter().any(|&z| z != 0) && symmetric_weights(w, shape, zps, *axis).is_none()
    }

    /// Bias as `i32` with scale `x_scale * w_scale[c]` (quantized from float if needed).
    ///
    /// A dequantized `int32` bias is taken as it is stored only when its scale is that
    /// product (within `f32` rounding) and its zero point 0, as quantizers write it; ONNX
    /// Runtime then fuses the convolution into its integer kernel with those integers.
    /// Otherwise (a torch export that shares one bias tensor between convolutions through
    /// `Identity`, quantized once with the first one's scale) its values are
    /// `(q - zero_point) · scale`, requantized to `x_scale · w_scale[c]` like a float bias,
    /// as ONNX's semantics say (ONNX Runtime 1.32 computes such a convolution in float when
    /// its bias is not zero: the `bias_scales` op models; an all-zero one it may fuse).
    pub(super) fn bias(
        &mut self,
        n: &Node,
        idx: usize,
        oc: usize,
        x_scale: f32,
        w_scales: &[f32],
    ) -> Result<Vec<i32>, EngineError> {
        if n.input(idx).is_none() {
            return Ok(vec![0; oc]);
        }
        let b: Vec<i32> = match self.input(n, idx)? {
            Val::DqC {
                data:
                    Const {
                        data: ConstData::I32(v),
                        ..
                    },
                scales,
                zps,
                ..
            } if bias_scale_is_product(&scales, &zps, x_scale, w_scales, v.len()) => v,
            Val::C(Const {
                data: ConstData::I32(v),
                ..
            }) => v,
            v @ (Val::C(Const {
                data: ConstData::F32(_),
                ..
            })
            | Val::DqC { .. }) => {
                if let Val::DqC {
                    data:
                        Const {
                            data: ConstData::I32(_),
                            ..
                        },
                    ..
                } = v
                {
                    self.rescaled_biases += 1;
                }
                // Its float values, quantized to `x_scale · w_scale[c]`.
                self.float_bias(n, idx, oc, x_scale, w_scales)?
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| {
                        crate::quant::quantize_bias(b, x_scale, per_channel(w_scales, i))
                    })
                    .collect()
            }
            v => return Err(bias_not_constant(n, &v)),
        };
        check_bias_len(n, b.len(), oc)?;
        Ok(b)
    }

    pub(super) fn conv(&mut self, n: &Node) -> Result<(), EngineError> {
        let qop = n.op == "QLinearConv";
        let x = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { x.q };
        let wv = self.input(n, if qop { 3 } else { 1 })?;
        let wshape = match &wv {
            Val::DqC { data, .. } | Val::C(data) => data.shape.clone(),
            _ => vec![],
        };
        if wshape.len() != 4 {
            return Err(n.unsupported(format!(
                "a {}-D convolution ({}-D weights): the native engine runs 2-D ones (4-D \
                 weights); run the model with --engine onnxruntime",
                wshape.len().saturating_sub(2),
                wshape.len()
            )));
        }
        let (oc, icg, kh, kw) = (wshape[0], wshape[1], wshape[2], wshape[3]);
        let (w, w_scales, _) = self.weights(n, wv, oc, 0, if qop { Some((4, 5)) } else { None })?;
        let groups = n.int("group", 1)?.max(1) as usize;
        let x = self.nhwc(x)?;
        let [b, c, h, wd] = dims4(&x.shape);
        if c != icg * groups || oc % groups != 0 {
            return Err(n.unsupported(format!(
                "{c} input channels, {groups} groups and weights {wshape:?} do not match"
            )));
        }
        let float_out = !qop && self.conv_output_goes_on_in_float(n);
        let bias = if float_out {
            vec![0; oc] // the float route adds the float bias after the integer sum
        } else {
            self.bias(n, if qop { 8 } else { 2 }, oc, x_q.scale, &w_scales)?
        };
        let (y_q, (lo, hi), out_name) = if float_out {
            (QParams::new(1.0, 0), (-128, 127), n.outputs[0].clone())
        } else {
            self.out_q(n, if qop { Some((6, 7)) } else { None })?
        };
        let win = self.window(n, h, wd, kh, kw)?;
        // OIHW -> O,kh,kw,I.
        let mut packed = vec![0i8; w.len()];
        for o in 0..oc {
            for ci in 0..icg {
                for y in 0..kh {
                    for xx in 0..kw {
                        packed[((o * kh + y) * kw + xx) * icg + ci] =
                            w[((o * icg + ci) * kh + y) * kw + xx];
                    }
                }
            }
        }
        let (win, packed) = trim_dead_taps(win, packed, oc, icg);
        let (kh, kw) = (win.kh, win.kw);
        self.weight_bytes += packed.len() + bias.len() * 4;
        let macs = (b * win.out_h * win.out_w * oc * kh * kw * icg) as u64;
        self.macs += macs;
        let relu = lo == y_q.zero_point;
        let square_window = kh == kw
            && win.sh == win.sw
            // Dilation does not change a 1x1 kernel.
            && (win.dh == 1 && win.dw == 1 || kh == 1)
            && win.pt == win.pl
            && win.pt < kh
            // The dense kernel pads symmetrically: its output size must equal ONNX's
            // (asymmetric pads can make `in + 2·pad` smaller than the kernel).
            && (h + 2 * win.pt).checked_sub(kh).map(|v| v / win.sh + 1) == Some(win.out_h)
            && (wd + 2 * win.pt).checked_sub(kw).map(|v| v / win.sw + 1) == Some(win.out_w);
        if float_out {
            let scales = w_scales.iter().map(|&ws| x_q.scale * ws).collect();
            let fbias = self.float_bias(n, 2, oc, x_q.scale, &w_scales)?;
            // Square windows run directly on the dense kernels; any other ungrouped one
            // unfolded onto them (native engine: the pointwise layer reads the unfolded
            // image); the rest on the general kernel.
            let direct = square_window && groups == 1;
            let unfolded = if direct {
                None
            } else {
                self.unfold_for_float(&packed, &win, (b, c, oc, groups), &x, &w_scales, x_q)
            };
            let (imp, x_in, in_hw) = if direct {
                let shape = ConvShape {
                    in_c: c,
                    out_c: oc,
                    k: kh,
                    stride: win.sh,
                    pad: win.pt,
                };
                let layer = Conv2d::new(shape, packed, w_scales.clone(), bias, x_q, y_q, false)
                    .map_err(|e| n.unsupported(format!("cannot run this convolution: {e}")))?;
                (ConvImpl::Dense(Box::new(layer)), x, [h, wd])
            } else if let Some((layer, unfolded)) = unfolded {
                (
                    ConvImpl::Dense(Box::new(layer)),
                    unfolded,
                    [win.out_h, win.out_w],
                )
            } else {
                // Depthwise (its vectorised kernel), grouped, or an ungrouped one not
                // unfolded: the general kernel's exact sums. Requantization
                // settings are unused on this route. Grouped with a square window: one
                // dense layer per group, storing its exact sums (RegNetX-200MF as ModelOpt
                // exports it: 14.4 -> 1.8 ms on one thread against the tap loop).
                general_sums_fit(n, &win, icg, &bias)?;
                let grouped = grouped_layers(
                    &packed,
                    square_window,
                    groups,
                    oc,
                    icg,
                    kh,
                    win.sh,
                    win.pt,
                    &w_scales,
                    &bias,
                    x_q,
                    x_q,
                    false,
                );
                let general = ConvImpl::General(Box::new(
                    GeneralConv {
                        win,
                        in_c: c,
                        out_c: oc,
                        groups,
                        weights: packed,
                        bias,
                        multipliers: vec![1.0; oc],
                        x_zp: i32::from(x_q.zero_point),
                        y_zp: 0,
                        lo: -128,
                        hi: 127,
                        depthwise: Default::default(),
                        grouped,
                    }
                    .prepared(),
                ));
                (general, x, [h, wd])
            };
            let y = self.conv_float(
                imp,
                &x_in,
                [b, in_hw[0], in_hw[1]],
                [oc, win.out_h, win.out_w],
                scales,
                fbias,
            );
            self.set(&n.outputs[0], Val::F32(y));
            return Ok(());
        }
        // The dense kernels run square convolutions directly, dilated "same" ones as
        // dilation phases (a dense convolution of each phase image), and stride-1 x s ones
        // with their columns folded into channels (the same bytes read as `s` times fewer,
        // wider pixels; see `ColumnFold`).
        let pad = win.pt;
        let route = if square_window && groups == 1 {
            Some(DenseRoute::Direct)
        } else if let Some(p) = dilation_phases(&win, h, wd, groups) {
            Some(DenseRoute::Phases(p))
        } else {
            ColumnFold::of(&win, h, wd, groups).map(DenseRoute::Fold)
        };
        let dense = route.and_then(|route| {
            let (stride, pad, in_c, weights) = match route {
                DenseRoute::Direct => (win.sh, pad, c, packed.clone()),
                DenseRoute::Phases(_) => (1, kh / 2, c, packed.clone()),
                DenseRoute::Fold(f) => (1, kh / 2, c * f.s, f.weights(&packed, oc, c)),
            };
            let shape = ConvShape {
                in_c,
                out_c: oc,
                k: kh,
                stride,
                pad,
            };
            let layer = Conv2d::new(
                shape,
                weights,
                w_scales.clone(),
                bias.clone(),
                x_q,
                y_q,
                relu,
            );
            layer.ok().map(|l| (l, route))
        });
        let floor = if relu { y_q.zero_point } else { -128 };
        let dense_clamp = (lo > floor || hi < 127).then_some((lo, hi));
        // Off the dense routes, an ungrouped convolution runs unfolded on the dense kernels
        // (native engine), a grouped one or one too large to unfold on the general kernel.
        if dense.is_none() {
            if let Some(dst) = self.unfolded_conv(
                &packed,
                &win,
                (b, c, oc, groups),
                x.buf,
                (&w_scales, &bias),
                (x_q, y_q, relu),
                dense_clamp,
            ) {
                return self.set_conv_output(&out_name, dst, [b, oc, win.out_h, win.out_w], y_q);
            }
        }
        // The width the step's kernel reads its input as (the fold's is `s` times narrower).
        let mut in_w = wd;
        let (imp, clamp) = match dense {
            Some((layer, DenseRoute::Phases(phases))) => {
                let dst = self.phased_conv(layer, phases, b, c, oc, x.buf, x_q, dense_clamp);
                return self.set_conv_output(&out_name, dst, [b, oc, h, wd], y_q);
            }
            Some((layer, route)) => {
                if let DenseRoute::Fold(f) = route {
                    in_w = wd / f.s;
                }
                (ConvImpl::Dense(Box::new(layer)), dense_clamp)
            }
            None => {
                general_sums_fit(n, &win, icg, &bias)?;
                let multipliers = w_scales
                    .iter()
                    .map(|&ws| crate::quant::requant_multiplier(x_q.scale, ws, y_q.scale))
                    .collect();
                let grouped = grouped_layers(
                    &packed,
                    square_window,
                    groups,
                    oc,
                    icg,
                    kh,
                    win.sh,
                    pad,
                    &w_scales,
                    &bias,
                    x_q,
                    y_q,
                    relu,
                );
                let clamp = if grouped.is_empty() {
                    None
                } else {
                    dense_clamp
                };
                (
                    ConvImpl::General(Box::new(
                        GeneralConv {
                            win,
                            in_c: c,
                            out_c: oc,
                            groups,
                            weights: packed,
                            bias,
                            multipliers,
                            x_zp: i32::from(x_q.zero_point),
                            y_zp: i32::from(y_q.zero_point),
                            lo,
                            hi,
                            depthwise: Default::default(),
                            grouped,
                        }
                        .prepared(),
                    )),
                    clamp,
                )
            }
        };
        self.touch(x.buf);
        let dst = self.new_buf(b * win.out_h * win.out_w * oc);
        self.steps.push(Step::Conv {
            imp,
            batch: b,
            in_h: h,
            in_w,
            out_h: win.out_h,
            row_len: win.out_w * oc,
            src: x.buf,
            dst,
            clamp,
            residual: None,
        });
        self.set_conv_output(&out_name, dst, [b, oc, win.out_h, win.out_w], y_q)
    }

    /// Names a convolution's output: buffer `buf`, NHWC, logical shape `[n, c, h, w]`.
    fn set_conv_output(
        &mut self,
        name: &str,
        buf: usize,
        [n, c, h, w]: [usize; 4],
        q: QParams,
    ) -> Result<(), EngineError> {
        self.set(
            name,
            Val::Q(T {
                buf,
                shape: vec![n, c, h, w],
                layout: Layout::Nhwc,
                q,
            }),
        );
        Ok(())
    }

    pub(super) fn matmul(&mut self, n: &Node) -> Result<(), EngineError> {
        let qop = matches!(n.op.as_str(), "QLinearMatMul" | "QGemm");
        let x = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { x.q };
        let (w_idx, ws_idx, wz_idx, b_idx, y_idx) = match n.op.as_str() {
            "QLinearMatMul" => (3, 4, 5, usize::MAX, Some((6, 7))),
            "QGemm" => (3, 4, 5, 6, Some((7, 8))),
            "Gemm" => (1, 0, 0, 2, None),
            _ => (1, 0, 0, usize::MAX, None),
        };
        if n.op.contains("Gemm")
            && (n.int("transA", 0)? != 0
                || n.float("alpha", 1.0)? != 1.0
                || n.float("beta", 1.0)? != 1.0)
        {
            return Err(n.unsupported(
                "only transA = 0, alpha = 1, beta = 1 are supported: put a Transpose before it \
                 or fold alpha and beta into the weights and bias, or run the model with \
                 --engine onnxruntime",
            ));
        }
        let trans_b = n.op.contains("Gemm") && n.int("transB", 0)? != 0;
        let wv = self.input(n, w_idx)?;
        let wshape = match &wv {
            Val::DqC { data, .. } | Val::C(data) => data.shape.clone(),
            v => {
                return Err(n.unsupported(format!(
                    "the second operand is {}; only constant weights are supported",
                    kind_name(v)
                )))
            }
        };
        if wshape.len() != 2 {
            return Err(n.unsupported("weights must be 2-D"));
        }
        let (k, oc) = if trans_b {
            (wshape[1], wshape[0])
        } else {
            (wshape[0], wshape[1])
        };
        let (w, w_scales, _) = self.weights(
            n,
            wv,
            oc,
            if trans_b { 0 } else { 1 },
            if qop { Some((ws_idx, wz_idx)) } else { None },
        )?;
        // Rows: every leading dimension of x.
        let x = self.row_major(x, 1);
        let xs = x.shape.clone();
        if xs.last().copied() != Some(k) {
            return Err(n.unsupported(format!(
                "input shape {xs:?} does not end in the weights' {k} rows"
            )));
        }
        let m: usize = xs[..xs.len() - 1].iter().product();
        let mut packed = vec![0i8; k * oc];
        for o in 0..oc {
            for i in 0..k {
                packed[o * k + i] = if trans_b { w[o * k + i] } else { w[i * oc + o] };
            }
        }
        self.weight_bytes += packed.len() + oc * 4;
        self.macs += (m * k * oc) as u64;
        let mut out_shape = xs[..xs.len() - 1].to_vec();
        out_shape.push(oc);
        if !qop && self.conv_output_goes_on_in_float(n) {
            // Float output (the float route's convolution on one image of 1 x m pixels):
            // `acc · x_scale · w_scale + bias`, the bias in float as the model stores it.
            let scales = w_scales.iter().map(|&ws| x_q.scale * ws).collect();
            let fbias = if b_idx == usize::MAX {
                vec![0.0; oc]
            } else {
                self.float_bias(n, b_idx, oc, x_q.scale, &w_scales)?
            };
            let shape = ConvShape {
                in_c: k,
                out_c: oc,
                k: 1,
                stride: 1,
                pad: 0,
            };
            let layer = Conv2d::new(shape, packed, w_scales, vec![0; oc], x_q, x_q, false)
                .map_err(|e| n.unsupported(format!("{e}")))?;
            let imp = ConvImpl::Dense(Box::new(layer));
            let y = self.conv_float(imp, &x, [1, 1, m], [oc, 1, m], scales, fbias);
            // NHWC `[1, oc, 1, m]` is row-major `[.., oc]`: the same bytes.
            let y = T {
                shape: out_shape,
                layout: Layout::RowMajor,
                ..y
            };
            self.set(&n.outputs[0], Val::F32(y));
            return Ok(());
        }
        let bias = if b_idx == usize::MAX {
            vec![0; oc]
        } else {
            self.bias(n, b_idx, oc, x_q.scale, &w_scales)?
        };
        let (y_q, (lo, hi), out_name) = self.out_q(n, y_idx)?;
        let relu = lo == y_q.zero_point;
        let layer = Conv2d::new(
            ConvShape {
                in_c: k,
                out_c: oc,
                k: 1,
                stride: 1,
                pad: 0,
            },
            packed,
            w_scales,
            bias,
            x_q,
            y_q,
            relu,
        )
        .map_err(|e| n.unsupported(format!("{e}")))?;
        let floor = if relu { y_q.zero_point } else { -128 };
        let clamp = (lo > floor || hi < 127).then_some((lo, hi));
        self.touch(x.buf);
        let dst = self.new_buf(m * oc);
        // One image of 1 x m pixels.
        self.steps.push(Step::Conv {
            imp: ConvImpl::Dense(Box::new(layer)),
            batch: 1,
            in_h: 1,
            in_w: m,
            out_h: 1,
            row_len: m * oc,
            src: x.buf,
            dst,
            clamp,
            residual: None,
        });
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape: out_shape,
                layout: Layout::RowMajor,
                q: y_q,
            }),
        );
        Ok(())
    }
}

/// How a convolution runs on the dense kernels.
#[derive(Clone, Copy)]
enum DenseRoute {
    /// As it is: square kernel, equal strides, symmetric padding.
    Direct,
    /// As a dense convolution of each dilation phase image.
    Phases(Phases),
    /// With its columns folded into channels.
    Fold(ColumnFold),
}

/// One dense layer per group of a grouped convolution (see [`GeneralConv::grouped`]):
/// group `g` takes output channels `g·ocg..(g + 1)·ocg` of `weights` (`[oc][k][k][icg]`, so
/// one contiguous run per group), their scales and biases. Empty, and the step keeps the
/// tap loop, unless the convolution is grouped with a square window (`square_window`) and
/// not depthwise (that has a kernel of its own), or when a group's layer is refused (its
/// accumulator bound).
#[allow(clippy::too_many_arguments)]
fn grouped_layers(
    weights: &[i8],
    square_window: bool,
    groups: usize,
    oc: usize,
    icg: usize,
    k: usize,
    stride: usize,
    pad: usize,
    w_scales: &[f32],
    bias: &[i32],
    x_q: QParams,
    y_q: QParams,
    relu: bool,
) -> Vec<Conv2d> {
    let depthwise = crate::onnx::kernels::runs_depthwise_kernel(icg * groups, oc, groups, k * k);
    if groups <= 1 || depthwise || !square_window {
        return Vec::new();
    }
    let ocg = oc / groups;
    let per_group = ocg * k * k * icg;
    let shape = ConvShape {
        in_c: icg,
        out_c: ocg,
        k,
        stride,
        pad,
    };
    (0..groups)
        .map(|g| {
            let oc_range = g * ocg..(g + 1) * ocg;
            Conv2d::new(
                shape,
                weights[g * per_group..(g + 1) * per_group].to_vec(),
                w_scales[oc_range.clone()].to_vec(),
                bias[oc_range].to_vec(),
                x_q,
                y_q,
                relu,
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_default()
}

/// `win` and its weights `packed` — `planes` blocks of `kh × kw × inner` elements: `O,kh,kw,I`
/// bytes (`oc` planes of `icg` inputs) or float `OIHW` (`oc · icg` planes of 1) — without
/// the kernel rows and columns at its edges that read padding only, for every output pixel:
/// a dilation as large as the image (DeepLabV3's ASPP at rates 24 and 36 on a 20×20 map)
/// leaves only the centre tap, a 1×1 convolution. A padding tap adds nothing to the exact
/// sum (it reads `x − zp = 0`; the float route's `0.0 · w`), so the outputs are the same;
/// the multiply-adds and the dilation-phase images of such a layer are not. Unchanged when
/// nothing is dead, or when dropping would need a negative padding.
pub(super) fn trim_dead_taps<E: Copy>(
    win: Window,
    packed: Vec<E>,
    planes: usize,
    inner: usize,
) -> (Window, Vec<E>) {
    // The taps of a `k`-tap axis that some output reads inside `0..len` (each output's
    // are one range, `taps_inside`, as the kernels skip the rest).
    let live = |k: usize, d: usize, s: usize, pad: usize, len: usize, out: usize| {
        let (mut first, mut end) = (k, 0);
        for o in 0..out {
            let r = taps_inside(o * s, pad, d, k, len);
            if !r.is_empty() {
                first = first.min(r.start);
                end = end.max(r.end);
            }
        }
        (first < end && first * d <= pad).then(|| (first, end - 1))
    };
    let rows = live(win.kh, win.dh, win.sh, win.pt, win.in_h, win.out_h);
    let cols = live(win.kw, win.dw, win.sw, win.pl, win.in_w, win.out_w);
    let (Some((r0, r1)), Some((c0, c1))) = (rows, cols) else {
        return (win, packed);
    };
    if (r0, r1, c0, c1) == (0, win.kh - 1, 0, win.kw - 1) {
        return (win, packed);
    }
    let (kh, kw) = (r1 - r0 + 1, c1 - c0 + 1);
    let mut out = Vec::with_capacity(planes * kh * kw * inner);
    for o in 0..planes {
        for y in r0..=r1 {
            let at = ((o * win.kh + y) * win.kw + c0) * inner;
            out.extend_from_slice(&packed[at..at + kw * inner]);
        }
    }
    let trimmed = Window {
        kh,
        kw,
        pt: win.pt - r0 * win.dh,
        pl: win.pl - c0 * win.dw,
        // One tap left on an axis: its dilation no longer matters.
        dh: if kh == 1 { 1 } else { win.dh },
        dw: if kw == 1 { 1 } else { win.dw },
        ..win
    };
    (trimmed, out)
}

/// The dilation phases of a convolution that can run on the dense kernels that way: a
/// square odd kernel, dilation `dh × dw` other than 1 × 1 (the two may differ), stride 1,
/// one group and "same" zero padding (`dh · (k / 2)` above and below, `dw · (k / 2)` left
/// and right, so the output has the input's size). Other dilated convolutions keep the
/// general kernel.
fn dilation_phases(win: &Window, h: usize, w: usize, groups: usize) -> Option<Phases> {
    let (dh, dw) = (win.dh, win.dw);
    (win.kh == win.kw
        && win.kh % 2 == 1
        && (dh > 1 || dw > 1)
        && win.sh == 1
        && win.sw == 1
        && groups == 1
        && win.pt == dh * (win.kh / 2)
        && win.pl == dw * (win.kw / 2)
        && win.out_h == h
        && win.out_w == w)
        .then_some(Phases { dh, dw, h, w })
}

/// True when a dequantized bias of `len` values has zero points 0 and, for each value,
/// the scale `x_scale · w_scale[c]` (relative difference at most 1e-6: the quantizer's own
/// `f32` product, whatever order it multiplied in).
fn bias_scale_is_product(
    scales: &[f32],
    zps: &[i32],
    x_scale: f32,
    w_scales: &[f32],
    len: usize,
) -> bool {
    zps.iter().all(|&z| z == 0)
        && !scales.is_empty()
        && !w_scales.is_empty()
        && (0..len).all(|i| {
            let want = x_scale * per_channel(w_scales, i);
            (per_channel(scales, i) - want).abs() <= 1e-6 * want.abs()
        })
}

/// Channel `i`'s value of a per-channel parameter, or the one value of a per-tensor one (the
/// last when `v` is shorter; `v` must not be empty).
pub(super) fn per_channel<T: Copy>(v: &[T], i: usize) -> T {
    v[i.min(v.len() - 1)]
}

/// A convolution's bias input that is not a constant.
pub(super) fn bias_not_constant(n: &Node, v: &Val) -> EngineError {
    n.unsupported(format!("bias is {}; it must be a constant", kind_name(v)))
}

/// A bias must have one value per output channel.
pub(super) fn check_bias_len(n: &Node, len: usize, oc: usize) -> Result<(), EngineError> {
    if len != oc {
        return Err(n.unsupported(format!("bias has {len} values for {oc} output channels")));
    }
    Ok(())
}

/// Refuses a convolution for the general kernel whose `i32` sums could overflow:
/// `kh·kw·icg` taps of at most `2·128·128` each (a zero-point-relative input times a weight)
/// plus the largest `|bias|` above `i32::MAX`, the bound `Conv2d::new` puts on a dense one.
/// (A bias near the `int32` limit is a broken calibration; the kernels' sums are exact
/// only below it.)
fn general_sums_fit(n: &Node, win: &Window, icg: usize, bias: &[i32]) -> Result<(), EngineError> {
    use crate::conv::MAX_TERM;
    let taps = win.kh * win.kw * icg;
    if let Err(max_bias) = crate::conv::accumulator_fits(taps, bias) {
        return Err(n.unsupported(format!(
            "its int32 sums could overflow: {taps} taps * {MAX_TERM} + max|bias| {max_bias} > \
             {}; a quantized bias near the int32 limit means a calibration that gave this \
             layer's input a tiny scale: calibrate again, or run the model with --engine \
             onnxruntime",
            i32::MAX
        )));
    }
    Ok(())
}

/// `w - zero point` for every weight (`zps` one for all, or one per index along `axis` of
/// `shape`), or `None` when one falls outside int8: the same dequantized values with
/// symmetric weights, so the same exact integer sums (the zero point folded in at load).
pub(super) fn symmetric_weights(
    w: &[i8],
    shape: &[usize],
    zps: &[i32],
    axis: usize,
) -> Option<Vec<i8>> {
    let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    w.iter()
        .enumerate()
        .map(|(i, &v)| {
            let zp = if zps.len() == 1 {
                zps[0]
            } else {
                *zps.get((i / inner.max(1)) % channels)?
            };
            i8::try_from(i32::from(v) - zp).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(k: usize, d: (usize, usize), pad: (usize, usize), (h, w): (usize, usize)) -> Window {
        Window {
            in_h: h,
            in_w: w,
            out_h: h + 2 * pad.0 - d.0 * (k - 1),
            out_w: w + 2 * pad.1 - d.1 * (k - 1),
            kh: k,
            kw: k,
            sh: 1,
            sw: 1,
            dh: d.0,
            dw: d.1,
            pt: pad.0,
            pl: pad.1,
        }
    }

    /// A 3×3 kernel dilated past a 20×20 map keeps its centre tap only, a 1×1 layer with
    /// those weights; past the rows only, its middle row; a dilation that reaches the image
    /// keeps everything.
    #[test]
    fn taps_that_read_padding_only_are_dropped() {
        let (oc, icg) = (2, 3);
        let packed: Vec<i8> = (0..oc * 9 * icg).map(|v| v as i8).collect();
        let (w, p) = trim_dead_taps(
            window(3, (36, 36), (36, 36), (20, 20)),
            packed.clone(),
            oc,
            icg,
        );
        assert_eq!(
            (w.kh, w.kw, w.pt, w.pl, w.dh, w.dw, w.out_h),
            (1, 1, 0, 0, 1, 1, 20)
        );
        // Output channel o's centre tap: (o·9 + 4)·icg ...
        let centre: Vec<i8> = (0..oc)
            .flat_map(|o| (0..icg).map(move |c| ((o * 9 + 4) * icg + c) as i8))
            .collect();
        assert_eq!(p, centre);
        let (w, p) = trim_dead_taps(
            window(3, (24, 2), (24, 2), (20, 20)),
            packed.clone(),
            oc,
            icg,
        );
        assert_eq!((w.kh, w.kw, w.pt, w.pl, w.dh, w.dw), (1, 3, 0, 2, 1, 2));
        assert_eq!(p.len(), oc * 3 * icg);
        assert_eq!(
            &p[..3 * icg],
            &packed[3 * icg..6 * icg],
            "row 1 of output channel 0"
        );
        let (w, p) = trim_dead_taps(
            window(3, (12, 12), (12, 12), (20, 20)),
            packed.clone(),
            oc,
            icg,
        );
        assert_eq!((w.kh, w.kw, w.pt), (3, 3, 12));
        assert_eq!(p, packed);
        // The float route's OIHW weights: one plane of 3×3 taps per (o, i).
        let oihw: Vec<f32> = (0..oc * icg * 9).map(|v| v as f32).collect();
        let (w, p) = trim_dead_taps(window(3, (36, 36), (36, 36), (20, 20)), oihw, oc * icg, 1);
        assert_eq!((w.kh, w.kw), (1, 1));
        let centres: Vec<f32> = (0..oc * icg).map(|p| (p * 9 + 4) as f32).collect();
        assert_eq!(p, centres);
    }
}
