//! Float tensors after a convolution: TensorRT-style Q/DQ placement.
//!
//! NVIDIA's TensorRT-oriented tools (pytorch-quantization, ModelOpt) quantize the inputs of
//! convolutions only: a ResNet block is `Conv → Add(float, DQ(identity)) → Relu → Q` and a
//! SiLU is `Conv → Sigmoid → Mul → Q`. The convolution's output is never quantized, so it
//! cannot be a quantized step.
//!
//! # Contract
//!
//! - **When**: a `Conv` (QDQ form) whose result does not reach a `QuantizeLinear` through
//!   `Relu`/`Clip` and every reader of which is a float reader ([`is_float_reader`]; a
//!   `QuantizeLinear` among other readers is one: PT2E exports quantize a ConvNeXt block's
//!   output for the next layer and add it in float, so the float output is quantized by a
//!   step of its own). One
//!   with a square window, equal strides, symmetric padding and one group (ResNet's,
//!   RegNet's and YOLO's convolutions) runs on its dense kernel; any other (EfficientNet's
//!   and MobileNetV3's depthwise ones, grouped, rectangular, dilated, asymmetrically padded) on the general
//!   kernel ([`GeneralConv::run_acc`]: depthwise through its vectorised loop, grouped ones
//!   with a square window through one dense layer per group storing its exact sums
//!   (`Conv2d::forward_rows_groups_acc`), the rest through the patch or tap loop).
//! - **Semantics**: the convolution writes `f32` = `acc · x_scale · w_scale[c] + bias[c]`,
//!   `acc` the exact integer sum ([`Step::ConvFloat`]; `bias` in float as the model stores
//!   it). After it, in `f32`:
//!   - `Add`, `Sub`, `Mul`, `Div` of two float tensors of one shape or of a float tensor
//!     and a dequantized one (dequantized first: [`Step::Dequantize`]),
//!     [`Step::FloatBinary`]; of two tensors one of which repeats along one run of the
//!     other's axes (an `[N, C, H, W]` map and its `[N, C, 1, 1]` squeeze-and-excitation
//!     gate; a `[.., D]` row and its `[.., 1]` statistic), [`Step::FloatBinaryBroadcast`];
//!     of a float tensor and a constant (float or dequantized; a scalar as in a decomposed
//!     hard-swish, per channel, or any shape that broadcasts), [`Step::FloatBinaryConst`]
//!     (the constant broadcast at load to one repeating period of the tensor's memory);
//!   - `BatchNormalization` in inference mode (ModelOpt leaves it after each convolution
//!     for TensorRT to fold): per channel `x·s + t`, `s` and `t` computed at load as ONNX
//!     Runtime's CPU kernel computes them, two [`Step::FloatBinaryConst`]; `Cast` to
//!     `float32`: nothing;
//!   - `Relu`, `Clip`, `Sigmoid`, `HardSigmoid`, `HardSwish` and `LeakyRelu` (MobileNetV3's
//!     and YOLOv3's activations), `Neg`, `Exp`, `Tanh`, `Softplus`, `Mish` (YOLOv4's),
//!     `Erf` and opset 20's `Gelu` (both forms, ONNX Runtime's order of operations)
//!     (vectorisable `f32` formulas within a few ulp: `exp`, `tanh` and `erf`
//!     polynomials, a `ln(1 + y)` series, Mish in closed form with one `exp`;
//!     `kernels::float`), `Sqrt`, `Reciprocal`, `Abs` (IEEE, exact), `Log`, `Sin`, `Cos` (`det_math`: an
//!     oriented-box head's angle)
//!     and `Pow` with the exponent 2 (`x · x`, as ONNX Runtime squares),
//!     [`Step::FloatUnary`] (also of a dequantized tensor outside a float island: `Sqrt`,
//!     `Exp`, ... have no quantized kernel);
//!   - `ReduceSum`, `ReduceMean`, `ReduceSumSquare`, `ReduceL1`, `ReduceL2`, `ReduceMax` and
//!     `ReduceMin` over one run of axes ([`Step::FloatReduce`]: the canonical sum order, so
//!     the same bits strided or contiguous; ONNX Runtime sums in its own order) and `Expand`
//!     along one run ([`Step::FloatRepeat`]): with the row broadcast above, `F.normalize`
//!     and a layer norm written out by an opset-13 export run as exported;
//!   - `Concat` (channels of NHWC tensors, any axis of row-major ones; a constant input,
//!     such as a CoordConv-style position map, as `f32` bytes the step holds) and nearest
//!     `Resize`:
//!     the byte steps copying 4-byte elements; linear `Resize` ([`Step::FloatResize`], ONNX
//!     Runtime's float formula and order: bit-exact with it on the `trt_*resize_bilinear*`
//!     op models);
//!   - `MaxPool` and `AveragePool` ([`Step::FloatPool`]: the byte max-pool kernel's body
//!     on `f32`; window sums in window order, one division; average pooling bit-exact with
//!     ONNX Runtime on the `trt_avgpool*` op models; also of a dequantized tensor whose pool
//!     is not quantized) and
//!     `GlobalAveragePool` ([`Step::FloatGlobalAvgPool`]: a sum in pixel order, then one
//!     division; ONNX Runtime sums in its own order, so a last bit may move a quantized
//!     value by one step);
//!   - `Flatten`/`Reshape` (a relabelling of a tensor already in row-major order, as 1×1
//!     pixels are; else one transpose to it first), `Transpose`, `Slice` and `Split`: the
//!     byte steps' strided copies with each element's 4 bytes as an innermost axis;
//!   - `Shape` (and the shape arithmetic after it, `lower::fold`);
//!   - `MatMul` and `Gemm` of float or dequantized tensors with float weights (no Q/DQ
//!     pair) or with a second computed tensor (attention in float), and `Conv` and
//!     `ConvTranspose` likewise ([`Step::FloatMatMul`], `product`: fused multiply-adds in
//!     index order; a convolution through its unfolded image, made a band at a time
//!     ([`Step::FloatConv`]: no image-sized unfold is held), a grouped one by
//!     [`Step::FloatGroupedConv`], a transposed one as one product per output phase).
//!     These also start a float route where
//!     no convolution does: a float graph input, a layer `quantize_static` was told to
//!     leave in float;
//!   - `Softmax`, `LogSoftmax` and `LayerNormalization` of a float or dequantized tensor
//!     ([`Step::FloatNorm`]; [`Lowerer::float_norm`]): every row normalized on its own, its
//!     sums in index order (the same bits on every ISA and lane count, and whether the row
//!     is contiguous or strided across channels); the softmax's `exp` is `exp_poly`, the
//!     layer norm ONNX Runtime's CPU formula in `f32`. ONNX Runtime fuses a quantized
//!     softmax (`DequantizeLinear → Softmax → QuantizeLinear`) into its table-based
//!     `QLinearSoftmax`, which multiplies by `floor(1 / y_scale)` (254 for a 1/255 scale):
//!     native's result, the float softmax quantized, is one step above it in some elements.
//!     `com.microsoft.QLinearSoftmax` (the QOperator form) runs the same way between a
//!     dequantize and a quantize step ([`Lowerer::qlinear_softmax`]).
//!
//!   The `QuantizeLinear` at the end is the graph-input quantize step. ONNX Runtime runs the
//!   convolution in float on the dequantized values (another summation order) and its Sigmoid with
//!   its own `exp`, so a quantized result may differ from it by one step in rare elements (the
//!   `trt_*` models of the agreement test count them); after many such layers more: EfficientNet-B0
//!   (49 SiLUs in float) up to two steps in a third of its logits.
//! - **Cost**: the convolution runs on its dense kernel (VNNI, AVX2, NEON or scalar), which
//!   stores the exact accumulators instead of requantized bytes; every float tensor is 4
//!   bytes per element in the arena, and each float operator is one vectorised pass over it
//!   (`kernels::float`). One thread on the AVX-512 VM: ResNet-18 in this placement (the QDQ
//!   model with the 11 Q/DQ pairs on convolution outputs that feed its residual Adds
//!   removed) 4.2 ms against ONNX Runtime's 13.5 ms (u8; 63.5 ms s8), which runs those
//!   convolutions in float, 103 of 1000 logits one step apart; the YOLOv5n-style detector
//!   (57 SiLUs in float) 8.1 ms against 24–26 ms; EfficientNet-B0 (its 16 depthwise
//!   convolutions on the general kernel's depthwise loop, 20–25 GMAC/s as in its quantized
//!   form) 6.5 ms against 19.2 ms.
//!
//! # Never
//!
//! Changes the lowering of a convolution whose output is quantized.
//!
//! Cost of the normalizations: one pass to reduce and one to write per row; a contiguous
//! row's sums are sequential (latency-bound: ConvNeXt-Tiny's 56×56×96 LayerNorm 0.25 ms on
//! one Zen 4 core), strided rows run 16 to the vector.

use super::*;
use crate::onnx::program::{FloatBinaryOp, FloatUnaryOp, NormOp, Operand};

mod grid;
mod norm;
mod product;
mod reduce;

/// The elementwise operators [`Lowerer::float_unary_op`] runs in float (keep the two in
/// step): float-convolution readers ([`is_float_reader`]) and, on constants, folded at load.
pub(super) const FLOAT_UNARY_OPS: &[&str] = &[
    "Relu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Neg",
    "Exp",
    "Tanh",
    "Softplus",
    "Mish",
    "Erf",
    "Gelu",
    "Sqrt",
    "Reciprocal",
    "Abs",
    "Log",
    "Sin",
    "Cos",
];

/// The float arithmetic of two operands (`float_binary_op`): float-convolution readers,
/// and folded at load on constants.
pub(super) const FLOAT_ARITHMETIC: &[&str] = &["Add", "Sub", "Mul", "Div"];

/// The operators other than [`FLOAT_ARITHMETIC`] and [`FLOAT_UNARY_OPS`] a float
/// convolution output may feed.
const FLOAT_OTHER_READERS: &[&str] = &[
    "Concat",
    "Resize",
    "Upsample",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Flatten",
    "Reshape",
    "Shape",
    "Slice",
    "Split",
    "Transpose",
    "Pad",
    "BatchNormalization",
    "Cast",
    "Softmax",
    "LogSoftmax",
    "LayerNormalization",
    "ReduceMean",
    // One reader among others that quantizes the float output (ConvNeXt's and Swin's
    // residual branch: the same output quantized for the next layer and added in float).
    "QuantizeLinear",
];

/// Every operator a float convolution output may feed, in the order messages list them.
fn float_reader_lists() -> [&'static [&'static str]; 3] {
    [FLOAT_ARITHMETIC, FLOAT_UNARY_OPS, FLOAT_OTHER_READERS]
}

/// Whether a float convolution output may feed operator `op`.
pub(super) fn is_float_reader(op: &str) -> bool {
    float_reader_lists().iter().any(|l| l.contains(&op))
}

/// Every operator a float convolution output may feed, for messages.
pub(super) fn float_readers() -> String {
    float_reader_lists().concat().join(", ")
}

impl Lowerer<'_> {
    /// True when convolution or matrix product `n`'s float output takes the float route:
    /// it is not quantized (through `Relu`/`Clip`), and every reader is a float operator;
    /// or it is a graph output (a classifier's logits, a detection head's maps, as NVIDIA's
    /// toolkits export them: the output is then `float32` from the exact sums).
    pub(super) fn conv_output_goes_on_in_float(&self, n: &Node) -> bool {
        let Some(out) = n.outputs.first() else {
            return false;
        };
        if self.find_q(n).is_ok() {
            return false;
        }
        let readers = self.consumers.get(out).map(Vec::as_slice).unwrap_or(&[]);
        let float_readers = readers
            .iter()
            .all(|&c| is_float_reader(&self.g.nodes[c].op));
        float_readers && (!readers.is_empty() || self.outputs.contains(out))
    }

    /// The float bias of a convolution with `oc` output channels: none (zeros), float, or
    /// dequantized from integers (per output channel or one for all).
    pub(super) fn float_bias(
        &self,
        n: &Node,
        idx: usize,
        oc: usize,
        x_scale: f32,
        w_scales: &[f32],
    ) -> Result<Vec<f32>, EngineError> {
        if n.input(idx).is_none() {
            return Ok(vec![0.0; oc]);
        }
        let b: Vec<f32> = match self.input(n, idx)? {
            Val::C(
                c @ Const {
                    data: ConstData::F32(_),
                    ..
                },
            ) => c.to_f32(),
            // Integers without their own scale: the convention x_scale · w_scale.
            Val::C(c) => c
                .to_f32()
                .iter()
                .enumerate()
                .map(|(i, &q)| q * (x_scale * super::conv::per_channel(w_scales, i)))
                .collect(),
            Val::DqC {
                data, scales, zps, ..
            } => {
                let zf: Vec<f32> = zps.iter().map(|&z| z as f32).collect();
                data.to_f32()
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| {
                        let z = if zf.is_empty() {
                            0.0
                        } else {
                            super::conv::per_channel(&zf, i)
                        };
                        (q - z) * super::conv::per_channel(&scales, i)
                    })
                    .collect()
            }
            v => return Err(super::conv::bias_not_constant(n, &v)),
        };
        super::conv::check_bias_len(n, b.len(), oc)?;
        Ok(b)
    }

    /// Pushes the float-output convolution `imp` (its integer bias zero) of NHWC input `x`
    /// and returns its output `f32` tensor (NHWC `[b, oc, out_h, out_w]`).
    pub(super) fn conv_float(
        &mut self,
        imp: ConvImpl,
        x: &T,
        [b, h, w]: [usize; 3],
        [oc, out_h, out_w]: [usize; 3],
        scales: Vec<f32>,
        bias: Vec<f32>,
    ) -> T {
        self.touch(x.buf);
        let dst = self.new_buf(b * out_h * out_w * oc * 4);
        self.steps.push(Step::ConvFloat {
            imp,
            batch: b,
            in_h: h,
            in_w: w,
            out_h,
            row_len: out_w * oc,
            scales,
            bias,
            src: x.buf,
            dst,
        });
        T {
            buf: dst,
            shape: vec![b, oc, out_h, out_w],
            layout: Layout::Nhwc,
            q: QParams::new(1.0, 0),
        }
    }

    /// True when one of `n`'s inputs is a float tensor computed in the engine (the float
    /// route's `Add`, `Relu`, ... rather than the quantized ones).
    pub(super) fn reads_float_tensor(&self, n: &Node) -> bool {
        n.inputs
            .iter()
            .any(|name| matches!(self.vals.get(name), Some(Val::F32(_))))
    }

    /// True when an input of `n` is a float constant (quantize_static leaves a `Div`'s or
    /// `Sub`'s unquantized) or one dequantized per channel: no quantized operator takes
    /// one, ONNX Runtime included (it runs such an operator in float between
    /// `DequantizeLinear` and `QuantizeLinear`), so the float route does, the same way.
    pub(super) fn reads_float_constant(&self, n: &Node) -> bool {
        n.inputs.iter().any(|name| match self.get(name, "") {
            Ok(Val::DqC { scales, .. }) => scales.len() > 1,
            Ok(Val::C(c)) => matches!(c.data, ConstData::F32(_)),
            _ => false,
        })
    }

    /// Input `i` of `n` as an `f32` tensor in `layout`: a float tensor as it is, a
    /// dequantized one through a [`Step::Dequantize`].
    pub(super) fn float_operand(
        &mut self,
        n: &Node,
        i: usize,
        layout: Layout,
    ) -> Result<T, EngineError> {
        match self.input(n, i)? {
            Val::F32(t) if t.layout == layout || t.shape.len() != 4 => Ok(t),
            // A float tensor in the other layout (ShuffleNet's shuffled half, row-major after
            // its Reshape/Transpose/Reshape, concatenated with a convolution's NHWC output):
            // one copy into this layout.
            Val::F32(t) => match layout {
                Layout::Nhwc => self.nhwc_of(t, 4),
                Layout::RowMajor => Ok(self.row_major(t, 4)),
            },
            Val::Dq(t) => {
                let t = match layout {
                    Layout::Nhwc if t.shape.len() == 4 => self.nhwc(t)?,
                    _ => self.row_major(t, 1),
                };
                Ok(self.dequantized(t))
            }
            v => Err(n.unsupported(format!(
                "input {i} is {}; a float operator after a convolution whose output is not \
                 quantized (TensorRT-style Q/DQ placement) reads float or dequantized \
                 tensors only; run the model with --engine onnxruntime",
                kind_name(&v)
            ))),
        }
    }

    /// One [`Step::FloatUnary`] of `t`.
    fn push_unary(&mut self, op: FloatUnaryOp, t: T) -> T {
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len * 4);
        self.steps.push(Step::FloatUnary {
            op,
            src: t.buf,
            dst,
            n: len,
        });
        T { buf: dst, ..t }
    }

    /// The quantized tensor `t` as `f32` in its own layout ([`Step::Dequantize`]).
    pub(super) fn dequantized(&mut self, t: T) -> T {
        let len = t.shape.iter().product::<usize>();
        self.touch(t.buf);
        let dst = self.new_buf(len * 4);
        self.steps.push(Step::Dequantize {
            src: t.buf,
            dst,
            n: len,
            scale: t.q.scale,
            zp: i32::from(t.q.zero_point),
        });
        T {
            buf: dst,
            q: QParams::new(1.0, 0),
            ..t
        }
    }

    /// `BatchNormalization` in inference mode on a float route's tensor (a convolution's
    /// float output, as NVIDIA's ModelOpt exports a network whose BatchNorm it leaves to
    /// TensorRT to fold; or a dequantized one): per channel `y = x·s + t` with `s = γ ·
    /// (1 / √(var + ε))` and `t = β − mean·s`, computed at load in `f32` in that order, then
    /// two steps (a multiply and an add by per-channel constants): ONNX Runtime's CPU kernel
    /// to the bit (0 of 16,384 outputs differ on a test tensor; `(x − mean)·…` orders and a
    /// fused multiply-add each differed in a third to a half).
    pub(super) fn float_batch_norm(&mut self, n: &Node) -> Result<(), EngineError> {
        if n.int("training_mode", 0)? != 0 {
            return Err(
                n.unsupported("training mode (batch statistics): export the model in eval mode")
            );
        }
        if n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(n.unsupported(
                "running mean and variance outputs (training mode): export in eval mode",
            ));
        }
        let layout = match self.input(n, 0)? {
            Val::F32(t) | Val::Dq(t) if t.shape.len() == 4 => t.layout,
            _ => Layout::RowMajor,
        };
        let x = self.float_operand(n, 0, layout)?;
        let c = x.shape.get(1).copied().unwrap_or(0);
        let param = |i: usize, what: &str| -> Result<Vec<f32>, EngineError> {
            let v = self.input(n, i)?;
            match constant_f32(&v) {
                Some(Const {
                    data: ConstData::F32(v),
                    ..
                }) if v.len() == c => Ok(v),
                _ => Err(n.unsupported(format!(
                    "its {what} must be a constant of {c} values (one per channel)"
                ))),
            }
        };
        let (gamma, beta) = (param(1, "scale")?, param(2, "bias")?);
        let (mean, var) = (param(3, "mean")?, param(4, "variance")?);
        let eps = n.float("epsilon", 1e-5)?;
        let scale: Vec<f32> = (0..c)
            .map(|k| 1.0 / (var[k] + eps).sqrt() * gamma[k])
            .collect();
        let shift: Vec<f32> = (0..c).map(|k| beta[k] - mean[k] * scale[k]).collect();
        // Per-channel constants shaped to broadcast along axis 1.
        let mut shape = vec![1; x.shape.len()];
        shape[1] = c;
        let mut cur = x;
        for (op, values) in [(FloatBinaryOp::Mul, scale), (FloatBinaryOp::Add, shift)] {
            let konst = Const {
                shape: shape.clone(),
                data: ConstData::F32(values),
            };
            let konst = broadcast_constant(n, &konst, &cur)?;
            cur = self.push_binary_const(op, cur, konst, true);
        }
        self.set(&n.outputs[0], Val::F32(cur));
        Ok(())
    }

    /// Pushes `x op konst` (`konst op x` unless `x_is_a`; `konst` one repeating period of
    /// `x`'s memory, [`broadcast_constant`]) and returns the result's tensor.
    fn push_binary_const(&mut self, op: FloatBinaryOp, x: T, konst: Vec<f32>, x_is_a: bool) -> T {
        let len = x.shape.iter().product::<usize>();
        self.touch(x.buf);
        let dst = self.new_buf(len * 4);
        self.steps.push(Step::FloatBinaryConst {
            op,
            x: x.buf,
            konst,
            x_is_a,
            n: len,
            dst,
        });
        T { buf: dst, ..x }
    }

    /// `Add`, `Sub`, `Mul` or `Div` with a float operand: in `f32`, same shapes only.
    pub(super) fn float_binary(&mut self, n: &Node) -> Result<(), EngineError> {
        let layout = [0, 1]
            .iter()
            .find_map(|&i| match n.input(i).and_then(|s| self.vals.get(s)) {
                Some(Val::F32(t)) => Some(t.layout),
                _ => None,
            })
            .unwrap_or(Layout::RowMajor);
        // A constant operand (`x + 3`, `x * 0.5`, a per-channel scale): broadcast to the
        // other operand's shape at load.
        for (ci, xi) in [(1, 0), (0, 1)] {
            if let Some(c) = n
                .input(ci)
                .and_then(|_| self.input(n, ci).ok())
                .and_then(|v| constant_f32(&v))
            {
                let x = self.float_operand(n, xi, layout)?;
                let konst = broadcast_constant(n, &c, &x)?;
                let y = self.push_binary_const(float_binary_op(n), x, konst, xi == 0);
                self.set(&n.outputs[0], Val::F32(y));
                return Ok(());
            }
        }
        let a = self.float_operand(n, 0, layout)?;
        let b = self.float_operand(n, 1, layout)?;
        // One operand repeated along a run of the other's axes: an `[N, C, 1, 1]`
        // squeeze-and-excitation gate over an NHWC map's pixels, a row's own statistic
        // (`[.., 1]` against `[.., D]`: a decomposed layer norm, `F.normalize`).
        for (full, part, full_is_a) in [(&a, &b, true), (&b, &a, false)] {
            if let Some((outer, times, inner)) = broadcast_run(&part.shape, &full.shape, layout) {
                self.touch(full.buf);
                self.touch(part.buf);
                let dst = self.new_buf(outer * times * inner * 4);
                self.steps.push(Step::FloatBinaryBroadcast {
                    op: float_binary_op(n),
                    full: full.buf,
                    part: part.buf,
                    full_is_a,
                    outer,
                    times,
                    inner,
                    dst,
                });
                let out = T {
                    buf: dst,
                    ..full.clone()
                };
                self.set(&n.outputs[0], Val::F32(out));
                return Ok(());
            }
        }
        if a.shape != b.shape {
            return Err(n.unsupported(format!(
                "float operands of shapes {:?} and {:?}: after a convolution whose output is \
                 not quantized, the native engine runs float operators on equal shapes, or an \
                 [N, C, H, W] tensor with an [N, C, 1, 1] one, only; run the model with \
                 --engine onnxruntime",
                a.shape, b.shape
            )));
        }
        let op = float_binary_op(n);
        let len = a.shape.iter().product::<usize>();
        self.touch(a.buf);
        self.touch(b.buf);
        let dst = self.new_buf(len * 4);
        self.steps.push(Step::FloatBinary {
            op,
            a: a.buf,
            b: b.buf,
            n: len,
            dst,
        });
        self.set(&n.outputs[0], Val::F32(T { buf: dst, ..a }));
        Ok(())
    }

    /// `Relu`, `Clip`, `Sigmoid`, `HardSigmoid`, `HardSwish` or `LeakyRelu` of a float
    /// tensor, in `f32` (the last three with the quantized route's formulas,
    /// `elementwise::activation`).
    pub(super) fn float_unary(&mut self, n: &Node) -> Result<(), EngineError> {
        let t = match self.input(n, 0)? {
            Val::F32(t) => t,
            Val::Dq(t) => self.float_operand(n, 0, t.layout)?,
            v => {
                return Err(n.unsupported(format!(
                    "input 0 is {}; expected a float or dequantized tensor",
                    kind_name(&v)
                )))
            }
        };
        let Some(op) = self.float_unary_op(n)? else {
            return Err(n.unsupported(
                "after a convolution whose output is not quantized (TensorRT-style Q/DQ \
                 placement), the native engine runs Add, Sub, Mul, Div, Relu, Clip, \
                 Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Neg, Exp, Tanh, Softplus, Mish, Erf, Gelu \
                 in float; run the model with --engine onnxruntime",
            ));
        };
        let y = self.push_unary(op, t);
        self.set(&n.outputs[0], Val::F32(y));
        Ok(())
    }

    /// The [`FloatUnaryOp`] of a `Relu`, `Clip`, `Sigmoid`, ... node (its attributes and
    /// constant bounds read), or `None` for an operator that is not one.
    pub(super) fn float_unary_op(&self, n: &Node) -> Result<Option<FloatUnaryOp>, EngineError> {
        // The list the float route admits (every one a float reader); an operator the
        // match below also names but the list lacks stays off the float route.
        if !FLOAT_UNARY_OPS.contains(&n.op.as_str()) {
            return Ok(None);
        }
        Ok(Some(match n.op.as_str() {
            "Relu" => FloatUnaryOp::Clamp {
                lo: 0.0,
                hi: f32::INFINITY,
            },
            "Clip" => {
                let (lo, hi) = self.clip_bounds(n)?;
                FloatUnaryOp::Clamp { lo, hi }
            }
            "Sigmoid" => FloatUnaryOp::Sigmoid,
            "HardSigmoid" => FloatUnaryOp::HardSigmoid {
                alpha: n.float("alpha", 0.2)?,
                beta: n.float("beta", 0.5)?,
            },
            "HardSwish" => FloatUnaryOp::HardSwish,
            "LeakyRelu" => FloatUnaryOp::LeakyRelu {
                alpha: n.float("alpha", 0.01)?,
            },
            "Neg" => FloatUnaryOp::Neg,
            "Exp" => FloatUnaryOp::Exp,
            "Tanh" => FloatUnaryOp::Tanh,
            "Softplus" => FloatUnaryOp::Softplus,
            "Mish" => FloatUnaryOp::Mish,
            "Erf" => FloatUnaryOp::Erf,
            "Gelu" => FloatUnaryOp::Gelu {
                tanh: gelu_is_tanh(n)?,
            },
            "Sqrt" => FloatUnaryOp::Sqrt,
            "Reciprocal" => FloatUnaryOp::Reciprocal,
            "Abs" => FloatUnaryOp::Abs,
            "Log" => FloatUnaryOp::Log,
            "Sin" => FloatUnaryOp::Sin,
            "Cos" => FloatUnaryOp::Cos,
            _ => return Ok(None),
        }))
    }

    /// `Concat` with a float input: every input as `f32` (dequantized ones first), in the
    /// layout of the first float one, copied by the concat step as 4-byte elements with no
    /// requantization (the values ONNX Runtime concatenates). NHWC tensors concatenate along
    /// channels only; row-major ones along any axis.
    pub(super) fn float_concat(&mut self, n: &Node) -> Result<(), EngineError> {
        // NHWC when the first float input is and the concatenation is along channels;
        // along another axis of a 4-D tensor (a deformable attention's sampling points),
        // row-major (an NHWC input is moved to it first).
        let layout = n
            .inputs
            .iter()
            .find_map(|i| match self.vals.get(i) {
                Some(Val::F32(t)) => {
                    let axis = n.int("axis", 1).ok()?;
                    let along_c = axis == 1 || axis == -3;
                    Some(if along_c { t.layout } else { Layout::RowMajor })
                }
                _ => None,
            })
            .unwrap_or(Layout::RowMajor);
        // Each input's shape and operand: a float or dequantized tensor's buffer, or a
        // constant (a CoordConv-style position map) as `f32` bytes held by the step.
        let mut parts = Vec::new();
        for i in 0..n.inputs.len() {
            let konst = n
                .input(i)
                .and_then(|_| self.input(n, i).ok())
                .and_then(|v| constant_f32(&v));
            parts.push(match konst {
                Some(c) => (c.shape.clone(), Err(c)),
                None => {
                    let t = self.float_operand(n, i, layout)?;
                    (t.shape.clone(), Ok(t.buf))
                }
            });
        }
        let first = parts[0].0.clone();
        let rank = first.len() as i64;
        let axis = n.int("axis", 1)?;
        let axis = if axis < 0 { axis + rank } else { axis } as usize;
        let nhwc = layout == Layout::Nhwc && rank == 4;
        if axis >= first.len() || (nhwc && axis != 1) {
            return Err(n.unsupported(format!(
                "a float Concat along axis {axis} of {first:?} tensors; after a convolution \
                 whose output is not quantized the native engine concatenates float tensors \
                 along channels (NHWC) only; run the model with --engine onnxruntime"
            )));
        }
        let mut out_shape = first.clone();
        out_shape[axis] = 0;
        let mut steps_parts = Vec::new();
        for (shape, part) in &parts {
            let inner = super::elementwise::concat_inner(n, shape, &first, axis, nhwc)?;
            out_shape[axis] += shape[axis];
            let operand = match part {
                Ok(buf) => Operand::Buf(*buf),
                Err(c) => {
                    let ConstData::F32(v) = &c.data else {
                        return Err(invalid("a float constant holds float32".into()));
                    };
                    // NCHW in the file, NHWC in the work order: permuted once, here.
                    let v = if nhwc {
                        super::elementwise::nchw_to_nhwc(v, shape)
                    } else {
                        v.clone()
                    };
                    Operand::Const(
                        v.iter()
                            .flat_map(|x| x.to_le_bytes())
                            .map(|b| b as i8)
                            .collect(),
                    )
                }
            };
            steps_parts.push((operand, inner * 4, None));
        }
        for (_, part) in &parts {
            if let Ok(buf) = part {
                self.touch(*buf);
            }
        }
        let outer = super::elementwise::concat_outer(&out_shape, axis, nhwc);
        let len: usize = out_shape.iter().product();
        let dst = self.new_buf(len * 4);
        self.steps.push(Step::Concat {
            outer,
            parts: steps_parts,
            dst,
        });
        let out = T {
            buf: dst,
            shape: out_shape,
            layout,
            q: QParams::new(1.0, 0),
        };
        self.set(&n.outputs[0], Val::F32(out));
        Ok(())
    }

    /// `GlobalAveragePool` of a 4-D float tensor: the per-channel mean in `f32`
    /// ([`Step::FloatGlobalAvgPool`]).
    pub(super) fn float_global_avg_pool(&mut self, n: &Node) -> Result<(), EngineError> {
        let t = match self.input(n, 0)? {
            // A row-major one (an elementwise result kept in the graph's order) is moved to
            // NHWC first.
            Val::F32(t) if t.shape.len() == 4 => self.nhwc_of(t, 4)?,
            // A dequantized tensor whose average is not quantized again (ModelOpt's
            // classifier head: DQ → GlobalAveragePool → Flatten → Q): dequantized first.
            Val::Dq(t) if t.shape.len() == 4 => {
                let t = self.float_operand(n, 0, Layout::Nhwc)?;
                self.nhwc_of(t, 4)?
            }
            v => {
                return Err(n.unsupported(format!(
                    "cannot average {}: the native engine averages 4-D (NCHW) tensors",
                    kind_name(&v)
                )))
            }
        };
        let [b, c, h, w] = dims4(&t.shape);
        self.touch(t.buf);
        let dst = self.new_buf(b * c * 4);
        self.steps.push(Step::FloatGlobalAvgPool {
            c,
            hw: h * w,
            batch: b,
            src: t.buf,
            dst,
        });
        let out = T {
            buf: dst,
            shape: vec![b, c, 1, 1],
            ..t
        };
        self.set(&n.outputs[0], Val::F32(out));
        Ok(())
    }
}

impl Lowerer<'_> {
    /// The float tensor `x` and the `(blocks, len, inner)` of its axes `a0..a1`
    /// ([`norm_geometry`]): in its own layout when those axes are one run of its memory
    /// order, else after one copy to row-major order (where they always are).
    fn axes_run(
        &mut self,
        x: T,
        a0: usize,
        a1: usize,
    ) -> Result<(T, (usize, usize, usize)), EngineError> {
        if let Some(g) = norm_geometry(&x, a0, a1) {
            return Ok((x, g));
        }
        let x = self.row_major(x, 4);
        let g = norm_geometry(&x, a0, a1)
            .ok_or_else(|| invalid(format!("no row-major geometry for {:?}", x.shape)))?;
        Ok((x, g))
    }
}

/// `(blocks, len, inner)` of a normalization over logical axes `a0..a1` of `t`: the axes
/// must be one run of its memory order, in order (any run of a row-major tensor; for an
/// NHWC one: `C`, `H`, `W`, `H..W` or `N`); `None` otherwise.
fn norm_geometry(t: &T, a0: usize, a1: usize) -> Option<(usize, usize, usize)> {
    let s = &t.shape;
    let (phys, p0, p1) = if t.layout == Layout::Nhwc && s.len() == 4 {
        // Logical axis -> physical position in [N, H, W, C].
        let pos = [0, 3, 1, 2];
        let (p0, p1) = (pos[a0], pos[a1 - 1] + 1);
        if (a0..a1).any(|a| pos[a] != p0 + (a - a0)) {
            return None;
        }
        (vec![s[0], s[2], s[3], s[1]], p0, p1)
    } else {
        (s.clone(), a0, a1)
    };
    let prod = |r: &[usize]| r.iter().product::<usize>();
    Some((prod(&phys[..p0]), prod(&phys[p0..p1]), prod(&phys[p1..])))
}

/// How a tensor of shape `part` repeats to `full` (both in `layout`; `part` of lower rank
/// read with leading 1s, as numpy does) when the axes where they differ (`part`'s 1s) form
/// one run of the memory order: `(outer, times, inner)` of `full`'s memory around that run.
/// `None` when the shapes are equal, do not broadcast that way, or `full` itself would
/// have to repeat.
fn broadcast_run(part: &[usize], full: &[usize], layout: Layout) -> Option<(usize, usize, usize)> {
    if part == full || part.len() > full.len() {
        return None;
    }
    let mut p = vec![1; full.len() - part.len()];
    p.extend_from_slice(part);
    let mut f = full.to_vec();
    if layout == Layout::Nhwc && f.len() == 4 {
        if part.len() != 4 {
            return None;
        }
        // Memory order [N, H, W, C].
        p = vec![p[0], p[2], p[3], p[1]];
        f = vec![f[0], f[2], f[3], f[1]];
    }
    if p.iter().zip(&f).any(|(&p, &f)| p != f && p != 1) {
        return None;
    }
    let differs = |d: usize| p[d] != f[d];
    let first = (0..f.len()).find(|&d| differs(d))?;
    let last = (0..f.len()).rev().find(|&d| differs(d))?;
    // Between the first and the last differing axis every axis must repeat too, or be 1.
    if (first..=last).any(|d| !differs(d) && f[d] != 1) {
        return None;
    }
    let prod = |r: &[usize]| r.iter().product::<usize>();
    Some((
        prod(&f[..first]),
        prod(&f[first..=last]),
        prod(&f[last + 1..]),
    ))
}

/// The float operator of an `Add`, `Sub`, `Mul` or `Div` node.
/// A constant's `f32` values: a float or integer initializer as it is, a dequantized integer
/// one as ONNX Runtime's `DequantizeLinear` computes it (`(q − zp) · scale` per slice along
/// its axis); `None` for a computed value.
pub(super) fn constant_f32(v: &Val) -> Option<Const> {
    match v {
        Val::C(c) => Some(Const {
            shape: c.shape.clone(),
            data: ConstData::F32(c.to_f32()),
        }),
        Val::DqC {
            data,
            scales,
            zps,
            axis,
        } => {
            let q = data.to_f32();
            let (slices, inner) = if scales.len() > 1 && *axis < data.shape.len() {
                (
                    scales.len(),
                    data.shape[axis + 1..].iter().product::<usize>(),
                )
            } else {
                (1, q.len().max(1))
            };
            let values = q
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let s = (i / inner) % slices;
                    Some((x - zps.get(s).copied().unwrap_or(0) as f32) * *scales.get(s)?)
                })
                .collect::<Option<Vec<f32>>>()?;
            Some(Const {
                shape: data.shape.clone(),
                data: ConstData::F32(values),
            })
        }
        _ => None,
    }
}

/// The float constant `c` broadcast to `x`'s shape, in `x`'s memory order, as one period
/// of the smallest repeat that tiles it (a suffix of the physical dimensions: one value for a
/// scalar, `C` for a per-channel constant on an NHWC tensor, else more).
fn broadcast_constant(n: &Node, c: &Const, x: &T) -> Result<Vec<f32>, EngineError> {
    let ConstData::F32(values) = &c.data else {
        return Err(n.unsupported("a float operator's constant operand must be float32"));
    };
    if fold::broadcast(&c.shape, &x.shape).as_deref() != Some(&x.shape[..]) {
        return Err(n.unsupported(format!(
            "a constant of shape {:?} does not broadcast to the tensor's {:?}",
            c.shape, x.shape
        )));
    }
    // Physical dimensions, and each physical position's logical index.
    let nhwc = x.layout == Layout::Nhwc && x.shape.len() == 4;
    let phys: Vec<usize> = if nhwc {
        let s = &x.shape;
        vec![s[0], s[2], s[3], s[1]]
    } else {
        x.shape.clone()
    };
    let len: usize = phys.iter().product();
    let logical = |p: usize| {
        if nhwc {
            let [_, c_, h, w] = dims4(&x.shape);
            let (ch, px) = (p % c_, p / c_);
            let (b, y, xx) = (px / (h * w), px / w % h, px % w);
            ((b * c_ + ch) * h + y) * w + xx
        } else {
            p
        }
    };
    let mut period = 1;
    for d in std::iter::once(1).chain(phys.iter().rev().copied()) {
        period *= d;
        let at = |p: usize| values[fold::broadcast_index(&c.shape, &x.shape, logical(p))];
        if period > 0 && (period..len).all(|p| at(p).to_bits() == at(p % period).to_bits()) {
            return Ok((0..period).map(at).collect());
        }
    }
    Ok((0..len)
        .map(|p| values[fold::broadcast_index(&c.shape, &x.shape, logical(p))])
        .collect())
}

fn float_binary_op(n: &Node) -> FloatBinaryOp {
    match n.op.as_str() {
        "Add" => FloatBinaryOp::Add,
        "Sub" => FloatBinaryOp::Sub,
        "Mul" => FloatBinaryOp::Mul,
        _ => FloatBinaryOp::Div,
    }
}

/// Whether a `Gelu` node is the `approximate="tanh"` form (`"none"`, the default, is the erf
/// one); any other value is refused by name.
pub(super) fn gelu_is_tanh(n: &Node) -> Result<bool, EngineError> {
    match n.string("approximate", "none")?.as_str() {
        "none" => Ok(false),
        "tanh" => Ok(true),
        other => Err(n.unsupported(format!(
            "approximate={other:?}: ONNX defines \"none\" and \"tanh\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A convolution's float output may go into every elementwise operator the float
    /// route runs (TensorRT-placed models: `Sqrt`, `Reciprocal`, `Abs`, `Log`, `Sin` and
    /// `Cos` were refused while `float_unary_op` ran them), each named once.
    #[test]
    fn float_readers_are_the_unary_ops_and_the_others_once_each() {
        for op in [
            "Sqrt",
            "Reciprocal",
            "Abs",
            "Log",
            "Sin",
            "Cos",
            "Relu",
            "Add",
            "Concat",
        ] {
            assert!(is_float_reader(op), "{op} is not a float reader");
        }
        assert!(!is_float_reader("Conv"));
        let all = float_reader_lists().concat();
        for (i, op) in all.iter().enumerate() {
            assert!(!all[..i].contains(op), "{op} is listed twice");
        }
        let listed = float_readers();
        assert!(
            listed.starts_with("Add, Sub, Mul, Div, Relu, Clip,"),
            "{listed}"
        );
        assert_eq!(listed.split(", ").count(), all.len());
    }

    /// Which operand pairs one [`Step::FloatBinaryBroadcast`] (or `FloatRepeat`) runs, and
    /// with what geometry: one run of repeated axes in memory order, any rank difference
    /// read as numpy's leading 1s, NHWC tensors in their memory order.
    #[test]
    fn broadcast_runs_are_one_run_of_memory_axes() {
        let rm = Layout::RowMajor;
        // A row's statistic: [2, 5, 1] over [2, 5, 7].
        assert_eq!(broadcast_run(&[2, 5, 1], &[2, 5, 7], rm), Some((10, 7, 1)));
        // A per-channel vector over rows, with a lower rank: [7] over [2, 5, 7].
        assert_eq!(broadcast_run(&[7], &[2, 5, 7], rm), Some((1, 10, 7)));
        // A middle run, extent-1 axes inside it allowed: [2, 1, 1, 3] over [2, 4, 1, 3].
        assert_eq!(
            broadcast_run(&[2, 1, 1, 3], &[2, 4, 1, 3], rm),
            Some((2, 4, 3))
        );
        // NHWC: a squeeze-and-excitation gate [N, C, 1, 1] repeats over H·W pixels; a
        // per-pixel statistic [N, 1, H, W] over the channels.
        let nhwc = Layout::Nhwc;
        assert_eq!(
            broadcast_run(&[1, 8, 1, 1], &[1, 8, 4, 5], nhwc),
            Some((1, 20, 8))
        );
        assert_eq!(
            broadcast_run(&[1, 1, 4, 5], &[1, 8, 4, 5], nhwc),
            Some((20, 8, 1))
        );
        // Two separate runs, both operands repeating, unequal extents, equal shapes: none.
        assert_eq!(broadcast_run(&[1, 5, 1], &[2, 5, 7], rm), None);
        assert_eq!(broadcast_run(&[2, 1], &[1, 7], rm), None);
        assert_eq!(broadcast_run(&[3, 1], &[2, 7], rm), None);
        assert_eq!(broadcast_run(&[2, 7], &[2, 7], rm), None);
        assert_eq!(broadcast_run(&[1, 2, 7], &[2, 7], rm), None);
    }
}
