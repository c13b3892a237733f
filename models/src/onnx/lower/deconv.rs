//! `ConvTranspose` on the dense kernels: one convolution per output phase and a merge.
//!
//! Output `o` of a transposed convolution (stride `s`, kernel `k`, leading pad `p`) is
//! `Σ x[i] · w[t]` over `o + p = i · s + t`. Writing `o + p = q · s + r`, phase `r` takes
//! taps `t = r + j · s` (`j = 0, 1, …` while `t < k`) at `x[q − j]`: an ordinary convolution
//! of `x` with that phase's taps reversed, `K = ⌈k / s⌉` taps (the missing ones zero) and
//! `K − 1` padding before. So the lowering emits `s_h · s_w` dense `K × K` convolutions of
//! the input, stride 1 and symmetric padding `K − 1` (`(h + K − 1) × (w + K − 1)` outputs
//! each, the extra ones unused or bias only), and one merge step that puts output `(o_y, o_x)`
//! together from phase `((o_y + p_t) mod s_h, (o_x + p_l) mod s_w)` at
//! `((o_y + p_t) / s_h, (o_x + p_l) / s_w)`.
//!
//! Each output is one exact integer sum requantized once, as for `Conv`: exact where ONNX
//! Runtime (which runs `ConvTranspose` in float after dequantizing) rounds its float sum.
//! Multiply-adds: `s_h · s_w · K² · (h + K − 1)(w + K − 1)` per output channel and input
//! channel, the transposed convolution's own count when `s` divides `k` (CenterNet's and
//! U-Net's 4×4/2 and 2×2/2), up to `(K·s / k)²` more otherwise. Supported: 2-D, one group,
//! no dilation, explicit pads, `output_padding`; anything else is an error that says so.

use super::*;

/// Most output phases (`s_h · s_w`) a transposed convolution may have.
pub(crate) const DECONV_PHASES_MAX: usize = 16;

/// The phase decomposition of one `ConvTranspose` (see the module's docs): sizes checked,
/// shared by the quantized and the float route.
#[derive(Clone, Copy, Debug)]
pub(in crate::onnx::lower) struct DeconvPlan {
    /// Input channels (the weights' first axis) and output channels.
    pub ic: usize,
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    /// Strides: the output phases are `sh × sw`.
    pub sh: usize,
    pub sw: usize,
    /// Taps per phase along each axis (the square kernel every phase gets).
    pub k: usize,
    /// The merge's sizes (phase images `ph × pw`, output `out_h × out_w`, pads).
    pub geom: DeconvGeom,
}

impl DeconvPlan {
    /// Checks `n`'s attributes against weights of shape `wshape` and an input of
    /// `[batch, c, h, w]`; errors name the node and what to do.
    pub(in crate::onnx::lower) fn of(
        n: &Node,
        wshape: &[usize],
        x: [usize; 4],
    ) -> Result<Self, EngineError> {
        if wshape.len() != 4 {
            return Err(n.unsupported(format!(
                "a {}-D transposed convolution ({}-D weights): the native engine runs 2-D \
                 ones (4-D weights); run the model with --engine onnxruntime",
                wshape.len().saturating_sub(2),
                wshape.len()
            )));
        }
        let (ic, oc, kh, kw) = (wshape[0], wshape[1], wshape[2], wshape[3]);
        if n.int("group", 1)? != 1 {
            return Err(n.unsupported(
                "grouped transposed convolutions are not supported; run the model with \
                 --engine onnxruntime",
            ));
        }
        let two = |name: &str, default: i64| -> Result<Vec<usize>, EngineError> {
            let v = n.ints(name)?.unwrap_or_else(|| vec![default; 2]);
            if v.len() != 2 || v.iter().any(|&d| d < 0) {
                return Err(n.unsupported(format!("{name} must be two non-negative values")));
            }
            Ok(v.iter().map(|&d| d as usize).collect())
        };
        if two("dilations", 1)? != [1, 1] {
            return Err(n.unsupported(
                "dilated transposed convolutions are not supported; run the model with \
                 --engine onnxruntime",
            ));
        }
        let strides = two("strides", 1)?;
        let (sh, sw) = (strides[0], strides[1]);
        let out_pad = two("output_padding", 0)?;
        if sh == 0 || sw == 0 || out_pad[0] >= sh.max(1) || out_pad[1] >= sw.max(1) {
            return Err(n.unsupported(format!(
                "strides {strides:?} with output_padding {out_pad:?}: strides must be at \
                 least 1 and output_padding smaller than them"
            )));
        }
        if sh * sw > DECONV_PHASES_MAX {
            return Err(n.unsupported(format!(
                "strides {sh}x{sw}: at most {DECONV_PHASES_MAX} output phases are supported; \
                 run the model with --engine onnxruntime"
            )));
        }
        if n.string("auto_pad", "NOTSET")? != "NOTSET" || n.ints("output_shape")?.is_some() {
            return Err(n.unsupported(
                "auto_pad and output_shape are not supported: export explicit pads (PyTorch \
                 does), or run the model with --engine onnxruntime",
            ));
        }
        let (pt, pl, pb, pr) = super::window::explicit_pads(n)?;
        let pads = [pt, pl, pb, pr];
        let [batch, c, h, wd] = x;
        if c != ic {
            return Err(n.unsupported(format!(
                "{c} input channels, weights {wshape:?} expect {ic}"
            )));
        }
        if kh == 0 || kw == 0 || oc == 0 {
            return Err(n.unsupported(format!("empty weights {wshape:?}")));
        }
        let full_h = (h - 1) * sh + kh + out_pad[0];
        let full_w = (wd - 1) * sw + kw + out_pad[1];
        let (out_h, out_w) = match (full_h.checked_sub(pt + pb), full_w.checked_sub(pl + pr)) {
            (Some(oh), Some(ow)) if oh > 0 && ow > 0 => (oh, ow),
            _ => {
                return Err(
                    n.unsupported(format!("pads {pads:?} leave no output of a {h}x{wd} input"))
                )
            }
        };
        let k = kh.div_ceil(sh).max(kw.div_ceil(sw));
        let (ph, pw) = (h + k - 1, wd + k - 1);
        if (out_h - 1 + pt) / sh >= ph || (out_w - 1 + pl) / sw >= pw {
            return Err(n.unsupported(format!(
                "output_padding {out_pad:?} with pads {pads:?} reaches past the last input \
                 the kernel touches; run the model with --engine onnxruntime"
            )));
        }
        let geom = DeconvGeom {
            batch,
            c: oc,
            sh,
            sw,
            pt,
            pl,
            ph,
            pw,
            out_h,
            out_w,
        };
        Ok(Self {
            ic,
            oc,
            kh,
            kw,
            sh,
            sw,
            k,
            geom,
        })
    }

    /// Phase `(ry, rx)`'s `K × K` kernel in OHWI order (`[oc, K, K, ic]`) from the
    /// transposed convolution's `[ic, oc, kh, kw]` weights: its tap `(a, b)` is the
    /// transposed convolution's tap `(ry + (K−1−a)·sh, rx + (K−1−b)·sw)`, zero past the
    /// kernel.
    pub(in crate::onnx::lower) fn phase_weights<E: Copy + Default>(
        &self,
        w: &[E],
        ry: usize,
        rx: usize,
    ) -> Vec<E> {
        let (k, ic, oc, kh, kw) = (self.k, self.ic, self.oc, self.kh, self.kw);
        let mut out = vec![E::default(); oc * k * k * ic];
        for o in 0..oc {
            for a in 0..k {
                let ty = ry + (k - 1 - a) * self.sh;
                for b in 0..k {
                    let tx = rx + (k - 1 - b) * self.sw;
                    if ty >= kh || tx >= kw {
                        continue;
                    }
                    for i in 0..ic {
                        out[((o * k + a) * k + b) * ic + i] = w[((i * oc + o) * kh + ty) * kw + tx];
                    }
                }
            }
        }
        out
    }
}

impl Lowerer<'_> {
    pub(super) fn conv_transpose(&mut self, n: &Node) -> Result<(), EngineError> {
        let x = self.act(n, 0)?;
        let x_q = x.q;
        let wv = self.input(n, 1)?;
        let wshape = match &wv {
            Val::DqC { data, .. } | Val::C(data) => data.shape.clone(),
            _ => vec![],
        };
        let x = self.nhwc(x)?;
        let plan = DeconvPlan::of(n, &wshape, dims4(&x.shape))?;
        let (ic, oc, sh, sw, k) = (plan.ic, plan.oc, plan.sh, plan.sw, plan.k);
        let DeconvGeom {
            batch: b,
            ph,
            pw,
            out_h,
            out_w,
            ..
        } = plan.geom;
        let [_, _, h, wd] = dims4(&x.shape);
        let (w, w_scales, _) = self.weights(n, wv, oc, 1, None)?;
        let bias = self.bias(n, 2, oc, x_q.scale, &w_scales)?;
        let (y_q, (lo, hi), out_name) = self.out_q(n, None)?;
        let relu = lo == y_q.zero_point;
        let floor = if relu { y_q.zero_point } else { -128 };
        let clamp = (lo > floor || hi < 127).then_some((lo, hi));
        let macs = (b * sh * sw * ph * pw * oc * k * k * ic) as u64;
        self.macs += macs;
        self.touch(x.buf);
        let mut phases = Vec::with_capacity(sh * sw);
        for ry in 0..sh {
            for rx in 0..sw {
                let pw8 = plan.phase_weights(&w, ry, rx);
                self.weight_bytes += pw8.len();
                let shape = ConvShape {
                    in_c: ic,
                    out_c: oc,
                    k,
                    stride: 1,
                    pad: k - 1,
                };
                let layer = Conv2d::new(shape, pw8, w_scales.clone(), bias.clone(), x_q, y_q, relu)
                    .map_err(|e| n.unsupported(format!("phase ({ry}, {rx}): {e}")))?;
                let dst = self.new_buf(b * ph * pw * oc);
                self.steps.push(Step::Conv {
                    imp: ConvImpl::Dense(Box::new(layer)),
                    batch: b,
                    in_h: h,
                    in_w: wd,
                    out_h: ph,
                    row_len: pw * oc,
                    src: x.buf,
                    dst,
                    clamp,
                    residual: None,
                });
                phases.push(dst);
            }
        }
        self.weight_bytes += bias.len() * 4;
        for &p in &phases {
            self.touch(p);
        }
        let dst = self.new_buf(b * out_h * out_w * oc);
        self.steps.push(Step::DeconvMerge {
            geom: plan.geom,
            phases,
            dst,
        });
        self.set(
            &out_name,
            Val::Q(T {
                buf: dst,
                shape: vec![b, oc, out_h, out_w],
                layout: Layout::Nhwc,
                q: y_q,
            }),
        );
        Ok(())
    }
}
