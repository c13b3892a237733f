//! `MatMul`, `Gemm` and `Conv` in float (see the parent module's docs): weights a model
//! leaves unquantized (PyTorch's x86 PT2E quantizer keeps ViT's and Swin's attention
//! projections in float; `quantize_static` with `nodes_to_exclude` keeps a network's first
//! convolution or last layer in float, as mixed-precision deployments do), a transformer's
//! attention computed in float (`q·kᵀ`, softmax, `·v` between float tensors), and float
//! models. One [`Step::FloatMatMul`] each (`kernels::float`'s product: fused multiply-adds
//! in index order, the same bits on every ISA and lane count; ONNX Runtime's `sgemm` sums
//! in its own blocks, so the two may differ in the last bits). A convolution is that
//! product over its unfolded image, `[pixels, kh·kw·c] × [kh·kw·c, out_c]`, one
//! [`Step::FloatConv`] that unfolds a band of pixels at a time into its own scratch and
//! multiplies it while it is in the cache (none for a 1×1, stride-1, unpadded convolution:
//! a [`Step::FloatMatMul`] of the image itself): of an NHWC input taps in `(ky, kx, ci)`
//! order (a tap's channels its 4-byte elements, padding `0.0`); of a row-major NCHW input (a
//! float graph input: a mixed-precision network's first convolution) taps in `(ci, ky, kx)`
//! order, with no transpose first. The whole unfolded image is never held, so a float
//! convolution of any image size runs. A
//! grouped convolution (depthwise included) is one [`Step::FloatGroupedConv`] over the
//! NHWC image (`kernels::float`'s grouped kernel: the same chains, in the same order, as the
//! product over the unfold would compute with one group). Load time only; errors name the
//! node.
use super::super::conv::trim_dead_taps;
use super::*;
use crate::onnx::kernels::float::{
    grouped_conv_packed_len, pack_grouped_conv, pack_matmul_b, packed_matmul_len, FloatMatMulDims,
    GroupedConvDims,
};
use crate::onnx::program::{chunks_for, FloatConvPlan, FloatMatMulB, FloatUnfold};

/// The second operand of a float product, as lowered.
enum Second {
    /// Weights, row-major `k × n` (`transB` already undone).
    Weights(Vec<f32>),
    /// A computed `f32` tensor, row-major `[.., k, n]`.
    Tensor(T),
}

impl Lowerer<'_> {
    /// True when `n` is a `MatMul` or `Gemm` the float route runs: an operand is a float
    /// tensor, or the weights are a float constant without a Q/DQ pair.
    pub(in crate::onnx::lower) fn is_float_product(&self, n: &Node) -> bool {
        matches!(n.op.as_str(), "MatMul" | "Gemm")
            && (self.is_float_tensor(n, 0)
                || self.is_float_tensor(n, 1)
                || self.float_weights(n)
                || self.unshiftable_weights(n))
    }

    /// Whether input `i` of `n` is a float tensor.
    fn is_float_tensor(&self, n: &Node, i: usize) -> bool {
        matches!(self.input(n, i), Ok(Val::F32(_)))
    }

    /// Whether `n`'s weights (input 1) are a float constant without a Q/DQ pair.
    fn float_weights(&self, n: &Node) -> bool {
        matches!(self.input(n, 1), Ok(Val::C(c)) if matches!(c.data, ConstData::F32(_)))
    }

    /// A float `MatMul` (operands of rank ≥ 2, the product over the last two axes; the
    /// second operand one matrix for all, constant or computed, or a computed one per
    /// product with the first's batch axes) or `Gemm` (`transA` 0; `transB`, `alpha`,
    /// `beta` and a bias `C` of one value or one per column). A dequantized operand is
    /// dequantized first ([`Step::Dequantize`]); a dequantized constant at load.
    pub(in crate::onnx::lower) fn float_matmul(&mut self, n: &Node) -> Result<(), EngineError> {
        let gemm = n.op == "Gemm";
        let (alpha, beta, trans_b) = if gemm {
            if n.int("transA", 0)? != 0 {
                return Err(n.unsupported(
                    "transA = 1 on a float Gemm: put a Transpose before it or run the model \
                     with --engine onnxruntime",
                ));
            }
            (
                n.float("alpha", 1.0)?,
                n.float("beta", 1.0)?,
                n.int("transB", 0)? != 0,
            )
        } else {
            (1.0, 1.0, false)
        };
        let a = self.float_operand(n, 0, Layout::RowMajor)?;
        let a = self.row_major(a, 4);
        let ra = a.shape.len();
        if ra < 2 || (gemm && ra != 2) {
            return Err(n.unsupported(format!(
                "a first operand of shape {:?}: the native engine multiplies [.., m, k] \
                 (Gemm: [m, k]); run the model with --engine onnxruntime",
                a.shape
            )));
        }
        let (m, k) = (a.shape[ra - 2], a.shape[ra - 1]);
        let a_batch: usize = a.shape[..ra - 2].iter().product();
        let bv = self.input(n, 1)?;
        let (second, b_shape) = match constant_f32(&bv) {
            Some(c) => {
                let ConstData::F32(values) = c.data else {
                    return Err(invalid("a float constant is not float32".to_string()));
                };
                let s = &c.shape;
                if s.len() < 2 || s[..s.len() - 2].iter().any(|&d| d != 1) {
                    return Err(n.unsupported(format!(
                        "constant weights of shape {s:?}: the native engine takes one \
                         [k, n] matrix; run the model with --engine onnxruntime"
                    )));
                }
                let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
                let w = if trans_b {
                    (0..r * c).map(|i| values[(i % r) * c + i / r]).collect()
                } else {
                    values
                };
                let shape = if trans_b { vec![c, r] } else { vec![r, c] };
                (Second::Weights(w), shape)
            }
            None => {
                if trans_b {
                    return Err(n.unsupported(
                        "transB = 1 with a computed second operand: transpose it before the \
                         Gemm (a MatMul) or run the model with --engine onnxruntime",
                    ));
                }
                let b = self.float_operand(n, 1, Layout::RowMajor)?;
                let b = self.row_major(b, 4);
                let shape = b.shape.clone();
                (Second::Tensor(b), shape)
            }
        };
        let rb = b_shape.len();
        if rb < 2 {
            return Err(n.unsupported(format!(
                "a second operand of shape {b_shape:?}: it must have at least two axes; run \
                 the model with --engine onnxruntime"
            )));
        }
        let (kb, nn) = (b_shape[rb - 2], b_shape[rb - 1]);
        let b_batch = &b_shape[..rb - 2];
        let b_batched = b_batch.iter().any(|&d| d != 1);
        if kb != k || (b_batched && a.shape[..ra - 2] != *b_batch) {
            return Err(n.unsupported(format!(
                "operands of shapes {:?} and {b_shape:?}: the native engine multiplies \
                 [.., m, k] by [.., k, n] with equal batch axes (or one second matrix for \
                 all); run the model with --engine onnxruntime",
                a.shape
            )));
        }
        if k == 0 || nn == 0 {
            return Err(n.unsupported(format!("an empty product ([.., {m}, {k}] by [{kb}, {nn}])")));
        }
        let bias = self.gemm_bias(n, gemm, beta, m, nn)?;
        // One second matrix for all: every row of `a` one long product.
        let (batch, rows) = if b_batched {
            (a_batch, m)
        } else {
            (1, a_batch * m)
        };
        let dims = FloatMatMulDims {
            batch,
            m: rows,
            k,
            n: nn,
            b_batched,
        };
        let b = match second {
            Second::Weights(w) => self.packed_weights(k, nn, &w),
            Second::Tensor(t) => {
                self.touch(t.buf);
                let dst = self.new_buf(batch * packed_matmul_len(k, nn) * 4);
                self.steps.push(Step::FloatPackB {
                    k,
                    n: nn,
                    images: batch,
                    src: t.buf,
                    dst,
                });
                FloatMatMulB::Buffer(dst)
            }
        };
        let dst = self.push_float_matmul(dims, a.buf, b, alpha, bias);
        let mut shape = a.shape[..ra - 1].to_vec();
        shape.push(nn);
        let out = T {
            buf: dst,
            shape,
            layout: Layout::RowMajor,
            q: QParams::new(1.0, 0),
        };
        self.set(&n.outputs[0], Val::F32(out));
        Ok(())
    }

    /// True when `n` is a `Conv` or `ConvTranspose` the float route runs: its input is a
    /// float tensor, or its weights are a float constant without a Q/DQ pair.
    pub(in crate::onnx::lower) fn is_float_conv(&self, n: &Node) -> bool {
        matches!(n.op.as_str(), "Conv" | "ConvTranspose")
            && (self.is_float_tensor(n, 0) || self.float_weights(n) || self.unshiftable_weights(n))
    }

    /// A `Conv` in float (any kernel, stride, padding incl. `auto_pad`, dilation, groups):
    /// the input (float, or dequantized first) in NHWC order; ungrouped, unfolded unless
    /// the convolution is pointwise, times the weights (float, or dequantized at load) as a
    /// `[kh·kw·c, out_c]` matrix, plus the bias; grouped (depthwise included), one
    /// [`Step::FloatGroupedConv`] on the image itself. The output an NHWC `f32` tensor.
    pub(in crate::onnx::lower) fn float_conv(&mut self, n: &Node) -> Result<(), EngineError> {
        let w = constant_f32(&self.input(n, 1)?).ok_or_else(|| {
            n.unsupported("computed weights: a convolution takes constant weights")
        })?;
        let ConstData::F32(wv) = w.data else {
            return Err(invalid("a float constant is not float32".to_string()));
        };
        if w.shape.len() != 4 {
            return Err(n.unsupported(format!(
                "a {}-D convolution ({}-D weights): the native engine runs 2-D ones (4-D \
                 weights); run the model with --engine onnxruntime",
                w.shape.len().saturating_sub(2),
                w.shape.len()
            )));
        }
        let (oc, icg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
        let groups = n.int("group", 1)?;
        let groups = usize::try_from(groups)
            .ok()
            .filter(|&g| g >= 1)
            .ok_or_else(|| n.unsupported(format!("group = {groups}: it must be at least 1")))?;
        // A row-major float input (the graph's NCHW image) is unfolded as it is, taps in
        // the weights' (ci, ky, kx) order; anything else in NHWC order, taps (ky, kx, ci).
        let nchw = groups == 1
            && matches!(self.input(n, 0)?, Val::F32(t) if t.layout == Layout::RowMajor && t.shape.len() == 4);
        let x = self.float_operand(n, 0, if nchw { Layout::RowMajor } else { Layout::Nhwc })?;
        let x = if nchw { x } else { self.nhwc_of(x, 4)? };
        let [batch, c, h, wd] = dims4(&x.shape);
        if c != icg * groups || oc % groups != 0 {
            return Err(n.unsupported(format!(
                "{c} input channels in {groups} groups and weights {:?} do not match (each \
                 group's input channels times the groups must be the input's, and the output \
                 channels a multiple of the groups)",
                w.shape
            )));
        }
        let win = self.window(n, h, wd, kh, kw)?;
        if c * kh * kw == 0 || oc == 0 {
            return Err(n.unsupported(format!("empty weights {:?}", w.shape)));
        }
        let bias = self.float_conv_bias(n, oc)?;
        // Kernel rows and columns that multiply padding at every output pixel are dropped
        // (the window and the pads shrink with them): each output's chain loses only terms
        // `0 · w`, which add nothing.
        let (win, wv) = trim_dead_taps(win, wv, oc * icg, 1);
        let (kh, kw) = (win.kh, win.kw);
        let pointwise = kh == 1
            && kw == 1
            && (win.sh, win.sw, win.pt, win.pl) == (1, 1, 0, 0)
            && (win.out_h, win.out_w) == (h, wd);
        // A pointwise convolution of a row-major image reads it transposed to NHWC (one
        // copy) rather than through the NCHW unfold (the same values, a tap at a time).
        let (x, nchw) = if nchw && pointwise {
            (self.nhwc_of(x, 4)?, false)
        } else {
            (x, nchw)
        };
        if groups > 1 {
            let dims = GroupedConvDims { c, oc, groups };
            let mut packed = vec![0f32; grouped_conv_packed_len(dims, kh * kw)];
            pack_grouped_conv(dims, kh * kw, &wv, &mut packed);
            self.macs += (batch * win.out_h * dims.row_macs(&win)) as u64;
            self.weight_bytes += (packed.len() + bias.len()) * 4;
            self.touch(x.buf);
            let dst = self.new_buf(batch * win.out_h * win.out_w * oc * 4);
            self.steps.push(Step::FloatGroupedConv {
                win,
                dims,
                batch,
                w: packed,
                bias,
                src: x.buf,
                dst,
            });
            self.set_nhwc_f32(n, dst, vec![batch, oc, win.out_h, win.out_w]);
            return Ok(());
        }
        // Each output channel's weights in the order its unfold lays out a pixel's taps:
        // (ci, ky, kx) for the NCHW one, the weights' own OIHW order; (ky, kx, ci) for the
        // NHWC one.
        let k = kh * kw * c;
        let ohwi;
        let rows = if nchw {
            &wv
        } else {
            ohwi = (0..oc * k)
                .map(|i| {
                    let (o, t, ci) = (i / k, (i % k) / c, i % c);
                    wv[(o * c + ci) * kh * kw + t]
                })
                .collect::<Vec<f32>>();
            &ohwi
        };
        let pixels = batch * win.out_h * win.out_w;
        let dst = if pointwise && !nchw {
            self.push_conv_product(pixels, x.buf, rows, oc, bias)
        } else {
            let unfold = FloatUnfold {
                win,
                c,
                batch,
                nchw,
            };
            self.push_banded_conv(x.buf, unfold, rows, oc, bias)
        };
        self.set_nhwc_f32(n, dst, vec![batch, oc, win.out_h, win.out_w]);
        Ok(())
    }

    /// A float `ConvTranspose` (a float input, or float weights without a Q/DQ pair): the
    /// quantized route's phase decomposition ([`DeconvPlan`]: `sh · sw` phases, each a
    /// `K × K` stride-1 convolution padded by `K − 1`), each phase a float product over the
    /// input's unfold for that window, made a band at a time by the phase's own
    /// [`Step::FloatConv`] (when `K` is 1, a [`Step::FloatMatMul`] of the image itself), merged
    /// by [`Step::DeconvMerge`] moving 4-byte pixels. Every output is one chain of fused
    /// multiply-adds over its phase's taps (the kernel's missing taps multiply zeros), then
    /// the bias; ONNX Runtime scatters the products in its own order, so the two may differ
    /// in the last bits. The output an NHWC `f32` tensor.
    pub(in crate::onnx::lower) fn float_conv_transpose(
        &mut self,
        n: &Node,
    ) -> Result<(), EngineError> {
        let w = constant_f32(&self.input(n, 1)?).ok_or_else(|| {
            n.unsupported("computed weights: a transposed convolution takes constant weights")
        })?;
        let ConstData::F32(wv) = w.data else {
            return Err(invalid("a float constant is not float32".to_string()));
        };
        let x = self.float_operand(n, 0, Layout::Nhwc)?;
        let x = self.nhwc_of(x, 4)?;
        let plan = DeconvPlan::of(n, &w.shape, dims4(&x.shape))?;
        let bias = self.float_conv_bias(n, plan.oc)?;
        let (ic, oc, k, g) = (plan.ic, plan.oc, plan.k, plan.geom);
        let [_, _, h, wd] = dims4(&x.shape);
        let pixels = g.batch * g.ph * g.pw;
        // Each phase a product over the input (K = 1) or over its unfold for the phase's
        // K × K stride-1 window padded by K − 1, unfolded in bands by the phase's own step.
        let win = Window {
            in_h: h,
            in_w: wd,
            out_h: g.ph,
            out_w: g.pw,
            kh: k,
            kw: k,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            pt: k - 1,
            pl: k - 1,
        };
        let unfold = FloatUnfold {
            win,
            c: ic,
            batch: g.batch,
            nchw: false,
        };
        let mut phases = Vec::with_capacity(plan.sh * plan.sw);
        for ry in 0..plan.sh {
            for rx in 0..plan.sw {
                // The phase's [oc, K, K, ic] kernel: taps in the NHWC unfold's order.
                let ohwi = plan.phase_weights(&wv, ry, rx);
                phases.push(if k == 1 {
                    self.push_conv_product(pixels, x.buf, &ohwi, oc, bias.clone())
                } else {
                    self.push_banded_conv(x.buf, unfold, &ohwi, oc, bias.clone())
                });
            }
        }
        for &p in &phases {
            self.touch(p);
        }
        let dst = self.new_buf(g.batch * g.out_h * g.out_w * oc * 4);
        self.steps.push(Step::DeconvMerge {
            geom: DeconvGeom { c: 4 * oc, ..g },
            phases,
            dst,
        });
        self.set_nhwc_f32(n, dst, vec![g.batch, oc, g.out_h, g.out_w]);
        Ok(())
    }

    /// Pushes the [`Step::FloatConv`] of the images in `src` (`unfold`: their window,
    /// channels, count and layout) times `rows` (`oc` output channels' weights in the order
    /// the unfold lays out a pixel's taps) plus `bias`, counting its multiply-adds, weights
    /// and bias; returns its output buffer (NHWC `f32`, `oc` channels). Its scratch (a band
    /// for each chunk, [`FloatConvPlan`]) is planned for this step alone.
    fn push_banded_conv(
        &mut self,
        src: usize,
        unfold: FloatUnfold,
        rows: &[f32],
        oc: usize,
        bias: Vec<f32>,
    ) -> usize {
        let b = self.packed_conv_weights(rows, oc);
        let (k, pixels) = (unfold.k(), unfold.pixels());
        let chunks = chunks_for(pixels, k * oc);
        let mut plan = FloatConvPlan {
            unfold,
            n: oc,
            chunks,
            band: FloatConvPlan::band_for(pixels, k, chunks),
            scratch: 0,
        };
        self.macs += (pixels * k * oc) as u64;
        self.weight_bytes += bias.len() * 4;
        self.touch(src);
        plan.scratch = self.new_buf(plan.scratch_bytes());
        let dst = self.new_buf(pixels * oc * 4);
        self.steps.push(Step::FloatConv {
            plan,
            b,
            bias,
            src,
            dst,
        });
        dst
    }

    /// A convolution as one float product: `pixels` rows of `a` (the unfolded image, or the
    /// image itself for a pointwise one) times `rows` (`oc` output channels' weights, `k`
    /// each, in the order `a` lays out a pixel's taps), plus `bias`; its output buffer.
    fn push_conv_product(
        &mut self,
        pixels: usize,
        a: usize,
        rows: &[f32],
        oc: usize,
        bias: Vec<f32>,
    ) -> usize {
        let k = rows.len() / oc;
        let b = FloatMatMulB::Packed(self.packed_conv_weights(rows, oc));
        let dims = FloatMatMulDims {
            batch: 1,
            m: pixels,
            k,
            n: oc,
            b_batched: false,
        };
        self.push_float_matmul(dims, a, b, 1.0, bias)
    }

    /// Sets `n`'s output to the NHWC `f32` tensor in `buf` of (logical NCHW) `shape`.
    pub(in crate::onnx::lower) fn set_nhwc_f32(&mut self, n: &Node, buf: usize, shape: Vec<usize>) {
        let out = T {
            buf,
            shape,
            layout: Layout::Nhwc,
            q: QParams::new(1.0, 0),
        };
        self.set(&n.outputs[0], Val::F32(out));
    }

    /// A float convolution's bias (input 2): `oc` constant values, or none.
    fn float_conv_bias(&self, n: &Node, oc: usize) -> Result<Vec<f32>, EngineError> {
        if n.input(2).is_none() {
            return Ok(Vec::new());
        }
        let b = constant_f32(&self.input(n, 2)?)
            .ok_or_else(|| n.unsupported("a computed bias: it must be a constant"))?;
        match b.data {
            ConstData::F32(v) if v.len() == oc => Ok(v),
            _ => Err(n.unsupported(format!(
                "a bias of shape {:?} for {oc} output channels",
                b.shape
            ))),
        }
    }

    /// Row-major `k × n` float weights packed for the product, counted as weights.
    fn packed_weights(&mut self, k: usize, n: usize, w: &[f32]) -> FloatMatMulB {
        FloatMatMulB::Packed(self.packed_matrix(k, n, w))
    }

    /// [`Self::packed_weights`]' packed matrix.
    fn packed_matrix(&mut self, k: usize, n: usize, w: &[f32]) -> Vec<f32> {
        let mut packed = vec![0f32; packed_matmul_len(k, n)];
        pack_matmul_b(k, n, w, &mut packed);
        self.weight_bytes += packed.len() * 4;
        packed
    }

    /// `oc` output channels' weights (`rows`, `k` each, in the order the product's rows lay
    /// out a pixel's taps) as the product's packed `[k, oc]` matrix, counted as weights.
    fn packed_conv_weights(&mut self, rows: &[f32], oc: usize) -> Vec<f32> {
        let k = rows.len() / oc;
        let mut wk = vec![0f32; k * oc];
        for (o, taps) in rows.chunks_exact(k).enumerate() {
            for (r, &v) in taps.iter().enumerate() {
                wk[r * oc + o] = v;
            }
        }
        self.packed_matrix(k, oc, &wk)
    }

    /// Pushes the [`Step::FloatMatMul`] of `a` (row-major `f32`) and `b`, counting its
    /// multiply-adds and its bias; returns its output buffer (`f32` `[batch, m, n]`).
    fn push_float_matmul(
        &mut self,
        dims: FloatMatMulDims,
        a: usize,
        b: FloatMatMulB,
        alpha: f32,
        bias: Vec<f32>,
    ) -> usize {
        let FloatMatMulDims { batch, m, k, n, .. } = dims;
        self.macs += (batch * m * k * n) as u64;
        self.weight_bytes += bias.len() * 4;
        self.touch(a);
        if let FloatMatMulB::Buffer(p) = b {
            self.touch(p);
        }
        let dst = self.new_buf(batch * m * n * 4);
        self.steps.push(Step::FloatMatMul {
            dims,
            a,
            b,
            alpha,
            bias,
            dst,
        });
        dst
    }

    /// A float `Gemm`'s `C` times `beta`, one value per output column (`n`): none, or a
    /// constant of one value or of `n` values along the last axis.
    fn gemm_bias(
        &self,
        n: &Node,
        gemm: bool,
        beta: f32,
        m: usize,
        cols: usize,
    ) -> Result<Vec<f32>, EngineError> {
        if !gemm || n.input(2).is_none() {
            return Ok(Vec::new());
        }
        let c = constant_f32(&self.input(n, 2)?).ok_or_else(|| {
            n.unsupported("a computed bias C: the native engine takes a constant one")
        })?;
        let ConstData::F32(values) = c.data else {
            return Err(invalid("a float constant is not float32".to_string()));
        };
        let per_column = c.shape.iter().rev().skip(1).all(|&d| d == 1);
        let row: Vec<f32> = match values.len() {
            1 => vec![values[0]; cols],
            len if len == cols && per_column => values,
            _ => {
                return Err(n.unsupported(format!(
                    "a bias C of shape {:?} for an [{m}, {cols}] output: the native engine \
                     takes one value or one per column; run the model with --engine \
                     onnxruntime",
                    c.shape
                )))
            }
        };
        Ok(if beta == 1.0 {
            row
        } else {
            row.iter().map(|&v| v * beta).collect()
        })
    }
}
