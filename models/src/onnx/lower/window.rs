//! Window operators over NHWC images: padding and output size (`window`), `MaxPool`,
//! `AveragePool` / `GlobalAveragePool` and `Resize`.

use super::*;

impl Lowerer<'_> {
    pub(super) fn window(
        &self,
        n: &Node,
        in_h: usize,
        in_w: usize,
        kh: usize,
        kw: usize,
    ) -> Result<Window, EngineError> {
        let strides = n.ints("strides")?.unwrap_or_else(|| vec![1, 1]);
        let dil = n.ints("dilations")?.unwrap_or_else(|| vec![1, 1]);
        if strides.len() != 2 || dil.len() != 2 || strides.iter().chain(&dil).any(|&v| v < 1) {
            return Err(n.unsupported("2-D strides and dilations >= 1 are required"));
        }
        let (sh, sw, dh, dw) = (
            strides[0] as usize,
            strides[1] as usize,
            dil[0] as usize,
            dil[1] as usize,
        );
        let ceil = n.int("ceil_mode", 0)? != 0;
        let auto = n.string("auto_pad", "NOTSET")?;
        if kh == 0 || kw == 0 {
            return Err(n.unsupported(format!("a {kh}x{kw} window: kernels need one tap or more")));
        }
        // The dilated window's extent; absurd kernels, dilations or pads (a damaged file)
        // are refused here rather than overflowing below.
        let extent = |k: usize, d: usize| (k - 1).checked_mul(d).and_then(|e| e.checked_add(1));
        let (Some(ekh), Some(ekw)) = (extent(kh, dh), extent(kw, dw)) else {
            return Err(n.unsupported("the dilated window is larger than any image"));
        };
        let (pt, pl, pb, pr) = match auto.as_str() {
            "NOTSET" => explicit_pads(n)?,
            "VALID" => (0, 0, 0, 0),
            "SAME_UPPER" | "SAME_LOWER" => {
                let oh = in_h.div_ceil(sh);
                let ow = in_w.div_ceil(sw);
                let ph = ((oh - 1) * sh).saturating_add(ekh).saturating_sub(in_h);
                let pw = ((ow - 1) * sw).saturating_add(ekw).saturating_sub(in_w);
                if auto == "SAME_UPPER" {
                    (ph / 2, pw / 2, ph - ph / 2, pw - pw / 2)
                } else {
                    (ph - ph / 2, pw - pw / 2, ph / 2, pw / 2)
                }
            }
            other => return Err(n.unsupported(format!("auto_pad {other} is not supported"))),
        };
        let span = |a: usize, b: usize, c: usize| a.checked_add(b).and_then(|v| v.checked_add(c));
        let (Some(span_h), Some(span_w)) = (span(in_h, pt, pb), span(in_w, pl, pr)) else {
            return Err(n.unsupported("the pads are larger than any image"));
        };
        if span_h < ekh || span_w < ekw {
            return Err(n.unsupported(format!(
                "the {kh}x{kw} window does not fit the padded {in_h}x{in_w} input"
            )));
        }
        let out = |span: usize, ek: usize, s: usize, pad_begin: usize, input: usize| {
            let mut o = if ceil {
                (span - ek).div_ceil(s) + 1
            } else {
                (span - ek) / s + 1
            };
            // ceil mode: the last window must start inside the input or the left padding.
            if ceil && (o - 1) * s >= input + pad_begin {
                o -= 1;
            }
            o
        };
        let (out_h, out_w) = (
            out(span_h, ekh, sh, pt, in_h),
            out(span_w, ekw, sw, pl, in_w),
        );
        if elements_within(&[out_h, out_w]).is_none() {
            return Err(too_large(n, &[out_h, out_w]));
        }
        Ok(Window {
            in_h,
            in_w,
            out_h,
            out_w,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pt,
            pl,
        })
    }

    /// The window of a 2-D pooling node (its `kernel_shape`, strides, pads, ...) over an
    /// `h × w` input.
    fn pool_window(&self, n: &Node, h: usize, w: usize) -> Result<Window, EngineError> {
        let k = n
            .ints("kernel_shape")?
            .ok_or_else(|| n.unsupported("kernel_shape is required"))?;
        if k.len() != 2 {
            return Err(n.unsupported("only 2-D pooling is supported"));
        }
        let k: Vec<usize> = k.iter().map(|&v| usize::try_from(v).unwrap_or(0)).collect();
        self.window(n, h, w, k[0], k[1])
    }

    pub(super) fn max_pool(&mut self, n: &Node) -> Result<(), EngineError> {
        // A float tensor (TensorRT-style placement) pools as `f32` (`FloatPool`), a
        // quantized one as bytes.
        let (t, float, is_q) = match self.input(n, 0)? {
            Val::F32(t) if t.shape.len() == 4 => (self.nhwc_of(t, 4)?, true, false),
            _ => {
                let (t, kind) = self.movable(n, "max-pool")?;
                (t, false, kind == shape::Moved::Q)
            }
        };
        if n.outputs.len() > 1 && !n.outputs[1].is_empty() {
            return Err(n.unsupported("the Indices output is not supported"));
        }
        if n.int("storage_order", 0)? != 0 {
            return Err(n.unsupported("storage_order 1 is not supported"));
        }
        let t = if float { t } else { self.nhwc(t)? };
        let [b, c, h, w] = dims4(&t.shape);
        let win = self.pool_window(n, h, w)?;
        self.touch(t.buf);
        let len = b * c * win.out_h * win.out_w;
        let dst = self.new_buf(if float { len * 4 } else { len });
        let src = t.buf;
        self.steps.push(if float {
            Step::FloatPool {
                kind: FloatPool::Max,
                win,
                c,
                batch: b,
                src,
                dst,
            }
        } else {
            Step::MaxPool {
                win,
                c,
                batch: b,
                src,
                dst,
            }
        });
        let out = T {
            buf: dst,
            shape: vec![b, c, win.out_h, win.out_w],
            layout: Layout::Nhwc,
            q: t.q,
        };
        let out = match (float, is_q) {
            (true, _) => Val::F32(out),
            (false, true) => Val::Q(out),
            (false, false) => Val::Dq(out),
        };
        self.set(&n.outputs[0], out);
        Ok(())
    }

    pub(super) fn avg_pool(&mut self, n: &Node) -> Result<(), EngineError> {
        let qop = n.op.starts_with("QLinear");
        match self.input(n, 0)? {
            Val::F32(t) => return self.float_avg_pool(n, t),
            // A quantized tensor pooled into a float operator (Q/DQ on convolution inputs
            // only: no QuantizeLinear after the pool): dequantized, then pooled in float.
            Val::Dq(_) if !qop && !n.op.contains("Global") && self.find_q(n).is_err() => {
                let t = self.float_operand(n, 0, Layout::Nhwc)?;
                return self.float_avg_pool(n, t);
            }
            _ => {}
        }
        let t = self.act(n, 0)?;
        let x_q = if qop { self.qparams(n, 1, 2)? } else { t.q };
        let (y_q, (lo, hi), out_name) = self.out_q(n, if qop { Some((3, 4)) } else { None })?;
        if qop && n.int("channels_last", 0)? != 0 {
            return Err(n.unsupported("channels_last = 1 is not supported"));
        }
        let t = self.nhwc(t)?;
        let [b, c, h, w] = dims4(&t.shape);
        let global = n.op.contains("Global");
        let win = if global {
            Window {
                in_h: h,
                in_w: w,
                out_h: 1,
                out_w: 1,
                kh: h,
                kw: w,
                sh: 1,
                sw: 1,
                dh: 1,
                dw: 1,
                pt: 0,
                pl: 0,
            }
        } else {
            self.pool_window(n, h, w)?
        };
        // ONNX Runtime pools in integers only globally: `GlobalAveragePool`, or a window
        // that is the whole image with no padding; any other window in float (`AvgFloat`).
        let whole_image =
            win.covers_image() && n.ints("pads")?.is_none_or(|p| p.iter().all(|&v| v == 0));
        let float = (!global && !whole_image).then(|| {
            let offset = if self.is_u8(&out_name) { 128 } else { 0 };
            AvgFloat {
                stored_zp: (i32::from(y_q.zero_point) + offset) as f32,
                offset,
            }
        });
        let p = AvgParams {
            x_zp: i32::from(x_q.zero_point),
            y_zp: i32::from(y_q.zero_point),
            x_scale: x_q.scale,
            y_scale: y_q.scale,
            count_include_pad: n.int("count_include_pad", 0)? != 0,
            lo,
            hi,
            float,
        };
        self.touch(t.buf);
        let dst = self.new_buf(b * c * win.out_h * win.out_w);
        // One image pooled whole in integers: its rows shared among the lanes.
        let chunks = global_pool_chunks(h, w, c);
        let split =
            (b == 1 && win.covers_image() && p.float.is_none() && chunks > 1).then(|| PoolSplit {
                chunks,
                partials: self.new_buf(chunks * c * 4),
            });
        self.steps.push(Step::AvgPool {
            win,
            c,
            batch: b,
            p,
            src: t.buf,
            dst,
            split,
        });
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape: vec![b, c, win.out_h, win.out_w],
                layout: Layout::Nhwc,
                q: y_q,
            }),
        );
        Ok(())
    }

    /// `AveragePool` of a float tensor (TensorRT-style placement: a convolution's float
    /// output pooled, or a dequantized tensor whose pool is not quantized):
    /// [`Step::FloatPool`], the output in float.
    fn float_avg_pool(&mut self, n: &Node, t: T) -> Result<(), EngineError> {
        if t.shape.len() != 4 {
            return Err(n.unsupported(format!(
                "an input of shape {:?}: the native engine pools 4-D (NCHW) tensors",
                t.shape
            )));
        }
        // A row-major float tensor (an elementwise result kept in the graph's order)
        // is moved to NHWC first.
        let t = self.nhwc_of(t, 4)?;
        let [b, c, h, w] = dims4(&t.shape);
        let win = self.pool_window(n, h, w)?;
        self.touch(t.buf);
        let dst = self.new_buf(b * c * win.out_h * win.out_w * 4);
        self.steps.push(Step::FloatPool {
            kind: FloatPool::Avg {
                count_include_pad: n.int("count_include_pad", 0)? != 0,
            },
            win,
            c,
            batch: b,
            src: t.buf,
            dst,
        });
        let out = T {
            buf: dst,
            shape: vec![b, c, win.out_h, win.out_w],
            ..t
        };
        self.set(&n.outputs[0], Val::F32(out));
        Ok(())
    }

    pub(super) fn resize(&mut self, n: &Node) -> Result<(), EngineError> {
        // A float tensor (TensorRT-style placement: a convolution's float output upsampled)
        // resizes as `f32` pixels: nearest as 4 bytes an element through the same copy, so
        // exactly the values ONNX Runtime picks; linear with ONNX Runtime's float formula
        // (`Step::FloatResize`).
        let (t, float) = match self.input(n, 0)? {
            Val::Dq(t) | Val::Q(t) => (t, false),
            Val::F32(t) if t.layout == Layout::Nhwc && t.shape.len() == 4 => (t, true),
            v => return Err(n.unsupported(format!("cannot resize {}", kind_name(&v)))),
        };
        let was_q = matches!(self.input(n, 0)?, Val::Q(_));
        let mode = n.string("mode", "nearest")?;
        let ctm = n.string(
            "coordinate_transformation_mode",
            if n.op == "Upsample" {
                "asymmetric"
            } else {
                "half_pixel"
            },
        )?;
        let nearest_mode = n.string("nearest_mode", "round_prefer_floor")?;
        if n.int("antialias", 0)? != 0 || n.ints("axes")?.is_some() {
            return Err(n.unsupported("antialias and axes are not supported"));
        }
        let t = if float { t } else { self.nhwc(t)? };
        let [b, c, h, w] = dims4(&t.shape);
        // Output size from `sizes` (input 3) or `scales` (input 2; Upsample: input 1).
        let scales_idx = if n.op == "Upsample" { 1 } else { 2 };
        let (oh, ow, sy, sx) = if n.input(3).is_some() {
            let s = self
                .konst(n, 3)?
                .to_i64()
                .ok_or_else(|| n.unsupported("sizes must be integers"))?;
            if s.len() != 4 || s[0] as usize != b || s[1] as usize != c {
                return Err(n.unsupported("sizes must keep batch and channels"));
            }
            let (oh, ow) = (s[2] as usize, s[3] as usize);
            (oh, ow, oh as f32 / h as f32, ow as f32 / w as f32)
        } else {
            let s = self.konst(n, scales_idx)?.to_f32();
            if s.len() != 4 || s[0] != 1.0 || s[1] != 1.0 {
                return Err(n.unsupported("scales must be 4 values with 1 for batch and channels"));
            }
            (
                (h as f32 * s[2]).floor() as usize,
                (w as f32 * s[3]).floor() as usize,
                s[2],
                s[3],
            )
        };
        if oh == 0 || ow == 0 {
            return Err(n.unsupported("the output would be empty"));
        }
        if elements_within(&[b, c, oh, ow]).is_none() {
            return Err(too_large(n, &[b, c, oh, ow]));
        }
        let linear = match mode.as_str() {
            "nearest" => false,
            "linear" | "bilinear" => true,
            m => {
                return Err(n.unsupported(format!(
                    "mode {m} is not supported (nearest, linear): export the model with one of \
                     those or run it with --engine onnxruntime"
                )))
            }
        };
        let taps = |out: usize, inp: usize, scale: f32| -> Result<Vec<Tap>, EngineError> {
            (0..out)
                .map(|o| {
                    let x = match ctm.as_str() {
                        "half_pixel" => (o as f32 + 0.5) / scale - 0.5,
                        "pytorch_half_pixel" => {
                            if out > 1 {
                                (o as f32 + 0.5) / scale - 0.5
                            } else {
                                0.0
                            }
                        }
                        "asymmetric" => o as f32 / scale,
                        "align_corners" => {
                            if out > 1 {
                                o as f32 * (inp - 1) as f32 / (out - 1) as f32
                            } else {
                                0.0
                            }
                        }
                        m => {
                            return Err(n.unsupported(format!(
                                "coordinate_transformation_mode {m} is not supported"
                            )))
                        }
                    };
                    let max = (inp - 1) as f32;
                    Ok(if linear {
                        let xc = x.clamp(0.0, max);
                        let i0 = xc.floor() as usize;
                        let i1 = (i0 + 1).min(inp - 1);
                        Tap {
                            i0,
                            i1,
                            w1: xc - i0 as f32,
                        }
                    } else {
                        let r = match nearest_mode.as_str() {
                            "round_prefer_floor" => {
                                if x.fract() == 0.5 {
                                    x.floor()
                                } else {
                                    x.round()
                                }
                            }
                            "round_prefer_ceil" => x.round(),
                            "floor" => x.floor(),
                            "ceil" => x.ceil(),
                            _ => x.round(),
                        };
                        let i = r.clamp(0.0, max) as usize;
                        Tap {
                            i0: i,
                            i1: i,
                            w1: 0.0,
                        }
                    })
                })
                .collect()
        };
        let ys = taps(oh, h, sy)?;
        let xs = taps(ow, w, sx)?;
        if float {
            // Linear: ONNX Runtime's float formula; nearest: the byte copy of 4-byte elements.
            self.touch(t.buf);
            let (src, dst) = (t.buf, self.new_buf(b * c * oh * ow * 4));
            self.steps.push(if linear {
                Step::FloatResize {
                    in_h: h,
                    in_w: w,
                    c,
                    batch: b,
                    ys,
                    xs,
                    src,
                    dst,
                }
            } else {
                Step::Resize {
                    in_h: h,
                    in_w: w,
                    c: c * 4,
                    batch: b,
                    ys,
                    xs,
                    mode: Interp::Nearest,
                    src,
                    dst,
                }
            });
            let out = T {
                buf: dst,
                shape: vec![b, c, oh, ow],
                ..t
            };
            self.set(&n.outputs[0], Val::F32(out));
            return Ok(());
        }
        // Linear needs a requantization to the following Q; nearest is exact.
        let full = (i8::MIN, i8::MAX);
        let (y_q, out_name, is_q, clamp) = if linear && !was_q {
            let (q, clamp, name) = self.out_q(n, None)?;
            (q, name, true, clamp)
        } else if linear {
            // QOperator form: ONNX Runtime resizes the int8 tensor itself, same quantization.
            (t.q, n.outputs[0].clone(), true, full)
        } else {
            (t.q, n.outputs[0].clone(), was_q, full)
        };
        self.touch(t.buf);
        let dst = self.new_buf(b * c * oh * ow);
        self.steps.push(Step::Resize {
            in_h: h,
            in_w: w,
            c,
            batch: b,
            ys,
            xs,
            mode: if !linear {
                Interp::Nearest
            } else if was_q {
                // QOperator: ONNX Runtime resizes the stored integers themselves.
                Interp::Raw {
                    floor: n.input(0).map(|i| self.is_u8(i)).unwrap_or(false),
                }
            } else {
                Interp::Linear {
                    x_zp: i32::from(t.q.zero_point),
                    x_scale: t.q.scale,
                    y_zp: i32::from(y_q.zero_point),
                    y_scale: y_q.scale,
                    lo: clamp.0,
                    hi: clamp.1,
                }
            },
            src: t.buf,
            dst,
        });
        let out = T {
            buf: dst,
            shape: vec![b, c, oh, ow],
            layout: Layout::Nhwc,
            q: y_q,
        };
        self.set(&out_name, if is_q { Val::Q(out) } else { Val::Dq(out) });
        Ok(())
    }
}

/// The `pads` attribute of a 2-D window (begin top/left, end bottom/right; zeros when
/// absent), or an error unless it is 4 non-negative values.
pub(super) fn explicit_pads(n: &Node) -> Result<(usize, usize, usize, usize), EngineError> {
    let p = n.ints("pads")?.unwrap_or_else(|| vec![0; 4]);
    if p.len() != 4 || p.iter().any(|&v| v < 0) {
        return Err(n.unsupported("pads must be 4 non-negative values"));
    }
    Ok((p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize))
}
