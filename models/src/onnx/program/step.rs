//! What a step of a [`Program`](super::Program) is: [`Step`] and the operand, operator
//! and geometry types its variants hold. Data only: lowering (`onnx::lower`) builds them,
//! [`Program::run_range`](super::Program::run_range) executes them, the fusion passes
//! rewrite them.

use super::super::dense_routes::{Phases, Unfold};
use super::super::kernels::float::{FloatMatMulDims, GridSampleDims, GroupedConvDims};
use super::super::kernels::{
    AvgParams, Binary, GeneralConv, Interp, MatMulDims, MatMulOut, PadGeometry, Tap, Window,
};
use super::index::IndexStep;
use crate::conv::Conv2d;
use std::ops::Range;

/// The square dense fast path or the general convolution.
#[derive(Clone, Debug)]
pub(crate) enum ConvImpl {
    Dense(Box<Conv2d>),
    General(Box<GeneralConv>),
}

/// How a global average pool of one image is shared among the lanes: image rows
/// `chunk_range(h, chunks, i)` are summed per channel by chunk `i` into `i32`s
/// `i · c .. (i + 1) · c` of the arena buffer `partials` (planned for this step alone), and the
/// calling lane adds the chunks' sums up, in chunk order, and requantizes. Integer sums, so
/// the same `i32` as one pass over the image and the same bytes, whatever the lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolSplit {
    pub chunks: usize,
    pub partials: usize,
}

/// A float convolution run as a product over its unfolded image, the unfold made a band of
/// output pixels at a time into scratch the step owns ([`Step::FloatConv`]).
///
/// The output's `batch · out_h · out_w` pixels are split into `chunks` chunks (fixed at
/// load by the product's shape, like every step's); chunk `i` unfolds `band` pixels at a
/// time into floats `i · band · k .. (i + 1) · band · k` of `scratch` (planned for this
/// step alone) and multiplies them by the packed weights before the next band. Each
/// output is the product's chain over the same `k` values in the same order as over a
/// whole unfolded image, so the band, the chunks and the lanes change no bit. Cost: the
/// scratch, `chunks · band · k` floats (about [`FloatConvPlan::BAND_BYTES`] a chunk),
/// instead of the whole unfolded image, which stays in the cache as it is multiplied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FloatConvPlan {
    pub unfold: FloatUnfold,
    /// Output channels.
    pub n: usize,
    pub chunks: usize,
    /// Pixels unfolded at a time by a chunk.
    pub band: usize,
    pub scratch: usize,
}

/// What a float convolution unfolds: `batch` images of `c` channels for window `win`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FloatUnfold {
    pub win: Window,
    pub c: usize,
    pub batch: usize,
    /// A row-major NCHW input, taps in `(ci, ky, kx)` order
    /// (`kernels::float::unfold_nchw`); else NHWC, taps in `(ky, kx, ci)` order.
    pub nchw: bool,
}

impl FloatUnfold {
    /// A pixel's unfolded values, `kh · kw · c`.
    pub fn k(&self) -> usize {
        self.win.kh * self.win.kw * self.c
    }

    /// Output pixels, `batch · out_h · out_w`.
    pub fn pixels(&self) -> usize {
        self.batch * self.win.out_h * self.win.out_w
    }

    /// Unfolds output pixels `pixels` of `x` into `out` (exactly those pixels' `k` values).
    pub fn run(&self, x: &[f32], out: &mut [f32], pixels: Range<usize>) {
        if self.nchw {
            super::super::kernels::float::unfold_nchw(&self.win, self.c, x, out, pixels);
        } else {
            // The unfold of `c` floats a pixel is the byte unfold of `4·c` bytes, a padded
            // tap all-zero bytes: `0.0`.
            let (x, out) = (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(out));
            Unfold { win: self.win }.run_pixels(4 * self.c, 0, x, out, pixels);
        }
    }
}

impl FloatConvPlan {
    /// The unfolded band a chunk aims at (bytes): a quarter of a 512 KiB–1 MiB L2, so that
    /// the band and a panel of the weights stay there while they are multiplied.
    pub const BAND_BYTES: usize = 128 << 10;

    /// The product's shape: `pixels × k` times `k × n`.
    pub fn dims(&self) -> FloatMatMulDims {
        FloatMatMulDims {
            batch: 1,
            m: self.unfold.pixels(),
            k: self.unfold.k(),
            n: self.n,
            b_batched: false,
        }
    }

    /// The band for `pixels` output pixels of `k` unfolded values split into `chunks`:
    /// [`Self::BAND_BYTES`] of them (at least 8 pixels, whole blocks of 4 rows), never
    /// more than a chunk holds.
    pub fn band_for(pixels: usize, k: usize, chunks: usize) -> usize {
        let band = (Self::BAND_BYTES / (k.max(1) * 4))
            .max(8)
            .next_multiple_of(4);
        band.min(pixels.div_ceil(chunks.max(1))).max(1)
    }

    /// Scratch bytes: a band for each chunk.
    pub fn scratch_bytes(&self) -> usize {
        self.chunks * self.band * self.unfold.k() * 4
    }
}

/// An `f32` operand: an arena buffer computed this run, or a constant the step holds.
#[derive(Clone, Debug)]
pub(crate) enum FloatOperand {
    Buf(usize),
    Const(Vec<f32>),
}

/// The second operand of a [`Step::FloatMatMul`]: constant weights packed at load, or the
/// arena buffer a [`Step::FloatPackB`] packed this run.
#[derive(Clone, Debug)]
pub(crate) enum FloatMatMulB {
    Packed(Vec<f32>),
    Buffer(usize),
}

/// One step of the program. `src`/`dst` are buffer indices.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Copy graph input `index` into `dst`; `flip` turns `u8` into the internal `i8` form.
    Input {
        index: usize,
        dst: usize,
        flip: bool,
    },
    /// Write `src` into graph output `index`: as is, flipped to `u8`, or dequantized to f32.
    Output {
        index: usize,
        src: usize,
        kind: OutKind,
    },
    /// `QuantizeLinear` of `n` floats of `src` into `dst`.
    Quantize {
        src: usize,
        dst: usize,
        n: usize,
        scale: f32,
        zp: i32,
        /// Graph input `index` read in place of `src`, whose copy step was fused away
        /// ([`super::fuse_input_quantize`]; native engine only). `src` is then written only
        /// for an input that is not 4-byte aligned, copied there first.
        input: Option<usize>,
    },
    Conv {
        imp: ConvImpl,
        batch: usize,
        in_h: usize,
        in_w: usize,
        out_h: usize,
        row_len: usize,
        src: usize,
        dst: usize,
        clamp: Option<(i8, i8)>,
        /// A residual `Add` of the convolution's output and another tensor, applied to each
        /// chunk of rows as soon as they are computed ([`fuse_residual_adds`]); `dst` then
        /// holds the sum.
        residual: Option<Residual>,
    },
    /// A convolution whose float output goes on unquantized (TensorRT-style Q/DQ placement):
    /// `dst` (`f32`, NHWC) gets `acc · scales[c] + bias[c]`, `acc` the exact integer sum
    /// ([`Conv2d::forward_rows_acc`]) and `scales[c] = x_scale · w_scale[c]`; ONNX Runtime
    /// runs the same convolution in float on the dequantized values.
    ConvFloat {
        /// The dense kernel ([`Conv2d::forward_rows_acc`]) or the general one
        /// ([`GeneralConv::run_acc`]: depthwise, grouped, rectangular), integer bias zero.
        imp: ConvImpl,
        batch: usize,
        in_h: usize,
        in_w: usize,
        out_h: usize,
        /// Elements per output row (`out_w · out_c`).
        row_len: usize,
        scales: Vec<f32>,
        bias: Vec<f32>,
        src: usize,
        dst: usize,
    },
    /// `dst[i] = (src[i] − zp) · scale` (`i8` to `f32`): a dequantized tensor read by a float
    /// operator.
    Dequantize {
        src: usize,
        dst: usize,
        n: usize,
        scale: f32,
        zp: i32,
    },
    /// An elementwise float operator on `f32` tensors of one shape (`n` elements each).
    FloatBinary {
        op: FloatBinaryOp,
        a: usize,
        b: usize,
        n: usize,
        dst: usize,
    },
    /// An elementwise float operator between an `f32` tensor `x` (`n` elements) and a
    /// constant broadcast to its shape, stored as one period of `konst.len()` elements that
    /// repeats along `x`'s memory (one value: a scalar; `C` values on an NHWC tensor: a
    /// per-channel constant; `n`: a whole tensor); `x` is the first operand when `x_is_a`.
    FloatBinaryConst {
        op: FloatBinaryOp,
        x: usize,
        konst: Vec<f32>,
        x_is_a: bool,
        n: usize,
        dst: usize,
    },
    /// An elementwise float operator between an `f32` tensor `full` (`outer · times ·
    /// inner` elements in memory order) and `part` (`outer · inner`), `part` repeated
    /// along the `times` axis: `dst[o][t][i] = op(full[o][t][i], part[o][i])`, `full` the
    /// operator's first operand when `full_is_a`. An NHWC map and its `[N, C, 1, 1]`
    /// squeeze-and-excitation gate (`outer` images, `times` pixels, `inner` channels); a
    /// row and its own statistic, `[.., D]` and `[.., 1]` (`inner` 1).
    FloatBinaryBroadcast {
        op: FloatBinaryOp,
        full: usize,
        part: usize,
        full_is_a: bool,
        outer: usize,
        times: usize,
        inner: usize,
        dst: usize,
    },
    /// `Expand` of an `f32` tensor: `dst[o][t][i] = src[o][i]` (`outer · inner` elements
    /// repeated `times` times along one run of axes).
    FloatRepeat {
        src: usize,
        outer: usize,
        times: usize,
        inner: usize,
        dst: usize,
    },
    /// A reduction over one run of axes of an `f32` tensor: `blocks` blocks of
    /// `len · inner` elements, each giving `inner` results, result `i` reducing the `len`
    /// values strided `inner` apart (`kernels::float::reduce`).
    FloatReduce {
        op: ReduceOp,
        blocks: usize,
        len: usize,
        inner: usize,
        src: usize,
        dst: usize,
    },
    /// A float function of one `f32` tensor (`n` elements).
    FloatUnary {
        op: FloatUnaryOp,
        src: usize,
        dst: usize,
        n: usize,
    },
    /// A normalization over one axis of an `f32` tensor (a float route's `Softmax`,
    /// `LogSoftmax`, `LayerNormalization`): `blocks` blocks of `len · inner` elements, each
    /// `inner` rows of `len` values strided `inner` apart, every row normalized on its own
    /// (`kernels::float::normalize`).
    FloatNorm {
        op: NormOp,
        blocks: usize,
        len: usize,
        inner: usize,
        src: usize,
        dst: usize,
    },
    /// `images` row-major `k × n` `i8` matrices of `src` packed for the VNNI product
    /// (`kernels::matmul::vnni::pack`, `packed_bytes(k, n)` bytes each) into `dst`.
    PackB {
        k: usize,
        n: usize,
        images: usize,
        src: usize,
        dst: usize,
    },
    /// The matrix product of two computed `i8` tensors (`kernels::matmul_rows`): `a` row-major
    /// `[batch, m, k]`, `b` row-major `[batch or 1, k, n]`; `dst` `[batch, m, n]`, `i8` or
    /// `f32` as `how` says. With `packed` (a [`Step::PackB`] of `b`), the AVX-512 VNNI
    /// kernel reads that instead: the same bytes.
    MatMulDyn {
        dims: MatMulDims,
        a: usize,
        b: usize,
        packed: Option<usize>,
        zps: (i32, i32),
        how: MatMulOut,
        dst: usize,
    },
    /// `images` row-major `k × n` `f32` matrices of `src` packed into column panels for the
    /// float product (`kernels::float::pack_matmul_b`, `packed_matmul_len(k, n)` floats each)
    /// into `dst`.
    FloatPackB {
        k: usize,
        n: usize,
        images: usize,
        src: usize,
        dst: usize,
    },
    /// A float convolution as a product over its unfolded image, unfolded a band at a time
    /// ([`FloatConvPlan`]): `src` `batch` `f32` images (NHWC, or row-major NCHW), `b` the
    /// `[k, n]` weights packed at load (`kernels::float::pack_matmul_b`), `bias` one value
    /// per output channel or empty; `dst` NHWC `f32`, `n` channels.
    FloatConv {
        plan: FloatConvPlan,
        b: Vec<f32>,
        bias: Vec<f32>,
        src: usize,
        dst: usize,
    },
    /// A float matrix product (`kernels::float::matmul_rows`): `a` row-major `f32`
    /// `[batch, m, k]` times `b`, packed weights held by the step or a [`Step::FloatPackB`]
    /// of a computed tensor; `dst` `f32` `[batch, m, n]`, each sum times `alpha` (when not
    /// 1) plus `bias[column]` (when not empty).
    FloatMatMul {
        dims: FloatMatMulDims,
        a: usize,
        b: FloatMatMulB,
        alpha: f32,
        bias: Vec<f32>,
        dst: usize,
    },
    /// A grouped (depthwise included) convolution in float
    /// (`kernels::float::grouped_conv_rows`): `batch` NHWC `f32` images of `dims.c`
    /// channels in `src`, weights packed at load (`kernels::float::pack_grouped_conv`),
    /// `bias` one value per output channel or empty; `dst` NHWC `f32`, `dims.oc` channels.
    FloatGroupedConv {
        win: Window,
        dims: GroupedConvDims,
        batch: usize,
        w: Vec<f32>,
        bias: Vec<f32>,
        src: usize,
        dst: usize,
    },
    /// A dilated convolution's input split into its dilation phases, or its phase outputs
    /// merged back ([`Phases`]).
    Phases {
        phases: Phases,
        dir: PhaseDir,
        c: usize,
        batch: usize,
        src: usize,
        dst: usize,
    },
    /// A convolution's taps gathered into channels for the pointwise dense convolution
    /// after it ([`Unfold`]): `batch` NHWC images of `c` channels in, `batch · out_h` rows
    /// of `out_w · kh · kw · c` bytes out, padding filled with `fill` (the zero point).
    Unfold {
        unfold: Unfold,
        c: usize,
        batch: usize,
        fill: i8,
        src: usize,
        dst: usize,
    },
    /// Max or average pooling of an `f32` NHWC tensor (a float route's `MaxPool`,
    /// `AveragePool`).
    FloatPool {
        kind: FloatPool,
        win: Window,
        c: usize,
        batch: usize,
        src: usize,
        dst: usize,
    },
    /// Bilinear resize of `f32` NHWC images (a float route's linear `Resize`), with ONNX
    /// Runtime's float formula (`kernels::float::resize_linear`); rows over
    /// `batch * ys.len()`. A float nearest resize is a [`Step::Resize`] of 4-byte elements.
    FloatResize {
        in_h: usize,
        in_w: usize,
        c: usize,
        batch: usize,
        ys: Vec<Tap>,
        xs: Vec<Tap>,
        src: usize,
        dst: usize,
    },
    /// ONNX `GridSample` of `batch` NHWC `f32` images in `src` at the locations of `grid`
    /// (`[batch, out_h, out_w, 2]` row-major `f32`: constant, or a buffer computed this
    /// run) (`kernels::float::grid_sample_rows`); `dst` NHWC `f32`, rows over
    /// `batch · out_h`.
    FloatGridSample {
        dims: GridSampleDims,
        batch: usize,
        grid: FloatOperand,
        src: usize,
        dst: usize,
    },
    /// A step over integer tensors computed at run time (`TopK`'s indices, the arithmetic
    /// on them, the gathers they drive: [`super::index`]); on the calling lane.
    Index(Box<IndexStep>),
    /// The mean over each image's `hw` pixels of an `f32` NHWC tensor, per channel (a float
    /// route's `GlobalAveragePool`): a sum in pixel order, then one division by `hw`.
    FloatGlobalAvgPool {
        c: usize,
        hw: usize,
        batch: usize,
        src: usize,
        dst: usize,
    },
    MaxPool {
        win: Window,
        c: usize,
        batch: usize,
        src: usize,
        dst: usize,
    },
    AvgPool {
        win: Window,
        c: usize,
        batch: usize,
        p: AvgParams,
        src: usize,
        dst: usize,
        /// A global pool of one image large enough to share: its rows cut into chunks whose
        /// `i32` channel sums land in a scratch buffer, then added up ([`PoolSplit`]).
        split: Option<PoolSplit>,
    },
    Lut {
        table: Box<[i8; 256]>,
        n: usize,
        src: usize,
        dst: usize,
    },
    Binary {
        op: Box<Binary>,
        a: Operand,
        b: Operand,
        n: usize,
        dst: usize,
    },
    /// The output of a `ConvTranspose` put together from its phase convolutions
    /// (`lower::deconv`): output pixel `(o_y, o_x)` of image `n` is pixel
    /// `((o_y + pt) / sh, (o_x + pl) / sw)` of image `n` of phase
    /// `((o_y + pt) mod sh) · sw + (o_x + pl) mod sw`.
    DeconvMerge {
        geom: DeconvGeom,
        phases: Vec<usize>,
        dst: usize,
    },
    /// A strided copy: output element `j` (row-major over `out_shape`) is input element
    /// `offset + Σ j_d · strides[d]` (a transpose, a slice, a split part).
    Transpose {
        out_shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
        src: usize,
        dst: usize,
    },
    /// ONNX `Pad` of a tensor in its own memory layout (`kernels::pad`): rows of the
    /// output over the lanes.
    Pad {
        geom: Box<PadGeometry>,
        src: usize,
        dst: usize,
    },
    Resize {
        in_h: usize,
        in_w: usize,
        c: usize,
        batch: usize,
        ys: Vec<Tap>,
        xs: Vec<Tap>,
        mode: Interp,
        src: usize,
        dst: usize,
    },
    /// Concatenation: `outer` blocks; input `i` contributes `inner[i]` contiguous bytes per
    /// block (mapped through its table when it has one). The blocks (a channel concat's
    /// pixels) are the rows split over the lanes; each chunk writes its blocks part by part.
    Concat {
        outer: usize,
        parts: Vec<ConcatPart>,
        dst: usize,
    },
}

/// The operator of a [`Step::FloatBinary`]: IEEE `f32` `+ − × ÷`, as ONNX Runtime's float
/// kernels compute them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatBinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Which pooling a [`Step::FloatPool`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatPool {
    /// The byte kernel's body on `f32` (`kernels::max_pool_f32`).
    Max,
    /// Window sums in window order, one division (`kernels::avg_pool_f32`).
    Avg { count_include_pad: bool },
}

/// The function of a [`Step::FloatUnary`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum FloatUnaryOp {
    /// `min(max(x, lo), hi)` (Relu: `lo = 0`, `hi = +inf`).
    Clamp { lo: f32, hi: f32 },
    /// `1 / (1 + exp(−x))` with a vectorisable `exp` of basic `f32` operations
    /// ([`kernels::float::exp_poly`]; the same bits on every ISA).
    Sigmoid,
    /// `clamp(alpha · x + beta, 0, 1)`.
    HardSigmoid { alpha: f32, beta: f32 },
    /// `x · clamp(x · (1/6) + 0.5, 0, 1)` (MobileNetV3's activation).
    HardSwish,
    /// `x` where `x >= 0`, else `alpha · x`.
    LeakyRelu { alpha: f32 },
    /// `−x`.
    Neg,
    /// `e^x` ([`kernels::float::exp_poly`]).
    Exp,
    /// `tanh x` ([`kernels::float::tanh_poly`]).
    Tanh,
    /// `ln(1 + e^x)` ([`kernels::float::softplus`]).
    Softplus,
    /// `x · tanh(softplus(x))` (YOLOv4's activation; [`kernels::float::mish`]).
    Mish,
    /// `erf x` (GELU's; [`kernels::float::erf_poly`]).
    Erf,
    /// ONNX's `Gelu` (opset 20; `tanh`: `approximate="tanh"`), in ONNX Runtime's operation
    /// order ([`kernels::float::gelu`]).
    Gelu { tanh: bool },
    /// `√x` (IEEE, correctly rounded).
    Sqrt,
    /// `1 / x` (IEEE).
    Reciprocal,
    /// `|x|`.
    Abs,
    /// `ln x` (`det_math::ln`: the same bits on every machine).
    Log,
    /// `sin x` (`det_math::sin`).
    Sin,
    /// `cos x` (`det_math::cos`).
    Cos,
    /// `x · x` (`Pow` with the exponent 2, as ONNX Runtime computes it).
    Square,
}

/// The reduction of a [`Step::FloatReduce`]: its sums in the canonical order of
/// `kernels::float` (partial sums `j mod 8`, then a fixed tree), so a result has the same
/// bits on every ISA, lane count and layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduceOp {
    /// `Σ x`.
    Sum,
    /// `(Σ x) / len`.
    Mean,
    /// `Σ x²`.
    SumSquare,
    /// `Σ |x|`.
    L1,
    /// `√(Σ x²)`.
    L2,
    /// The largest value (NaN if any is).
    Max,
    /// The smallest value (NaN if any is).
    Min,
}

/// The normalization of a [`Step::FloatNorm`] row (`kernels::float::normalize`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum NormOp {
    /// `e^(x − max) / Σ e^(x − max)`, the exponentials by [`kernels::float::exp_poly`].
    Softmax,
    /// `(x − max) − ln Σ e^(x − max)`.
    LogSoftmax,
    /// `(x − mean) / √(variance + eps) · scale (+ bias)`, `scale` and `bias` one value per
    /// row element.
    LayerNorm {
        eps: f32,
        scale: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
}

/// Sizes of a [`Step::DeconvMerge`]: `batch` images of `out_h × out_w × c` from `sh · sw`
/// phase images of `ph × pw × c`, offset by the leading pads `pt`, `pl`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeconvGeom {
    pub batch: usize,
    pub c: usize,
    pub sh: usize,
    pub sw: usize,
    pub pt: usize,
    pub pl: usize,
    pub ph: usize,
    pub pw: usize,
    pub out_h: usize,
    pub out_w: usize,
}

/// A residual `Add` fused into the convolution that computes one of its operands.
#[derive(Clone, Debug)]
pub(crate) struct Residual {
    /// The `Add` (its operands dense, the shape of the convolution's output).
    pub op: Box<Binary>,
    /// The other operand's buffer.
    pub other: usize,
    /// True when the convolution's output is the `Add`'s first operand.
    pub conv_is_a: bool,
}

/// Which way a [`Step::Phases`] copies.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PhaseDir {
    /// Image to phase images ([`Phases::split`]), padding with `fill` (the input's zero point).
    Split { fill: i8 },
    /// Phase images to image ([`Phases::merge`]).
    Merge,
}

/// One input of a concatenation: its data, the bytes it contributes per outer block, and
/// the requantization table when its quantization differs from the output's.
pub(crate) type ConcatPart = (Operand, usize, Option<Box<[i8; 256]>>);

/// How a graph output is written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum OutKind {
    Copy,
    FlipU8,
    Dequantize { scale: f32, zp: i32 },
}

/// An operand: a buffer, or a constant held by the program.
#[derive(Clone, Debug)]
pub(crate) enum Operand {
    Buf(usize),
    Const(Vec<i8>),
}

impl Step {
    /// A [`Step::Transpose`] copying `out_shape` (bytes) from input strides `strides` at
    /// `offset`, its axes simplified: axes of size 1 dropped and each axis merged into the
    /// one before it where the two read the input as one axis (`strides[d] = out_shape[d+1]
    /// · strides[d+1]`). The same copy, byte for byte, in fewer and longer runs (a float
    /// tensor's 4 bytes join the row they belong to, a channel shuffle copies whole planes).
    pub(crate) fn strided_copy(
        out_shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
        src: usize,
        dst: usize,
    ) -> Step {
        let (mut shape, mut steps): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        for (n, s) in out_shape.into_iter().zip(strides) {
            if n == 1 {
                continue;
            }
            if let (Some(ln), Some(ls)) = (shape.last_mut(), steps.last_mut()) {
                if *ls == n * s {
                    *ln *= n;
                    *ls = s;
                    continue;
                }
            }
            shape.push(n);
            steps.push(s);
        }
        if shape.is_empty() {
            (shape, steps) = (vec![1], vec![1]);
        }
        Step::Transpose {
            out_shape: shape,
            strides: steps,
            offset,
            src,
            dst,
        }
    }

    /// The buffers this step reads (every variant named, so a new one must say). Load time
    /// only: allocates.
    pub(crate) fn reads(&self) -> Vec<usize> {
        let buf = |o: &Operand| match o {
            Operand::Buf(b) => Some(*b),
            Operand::Const(_) => None,
        };
        match self {
            Step::Input { .. } => vec![],
            Step::Output { src, .. }
            | Step::Quantize { src, .. }
            | Step::ConvFloat { src, .. }
            | Step::Dequantize { src, .. }
            | Step::FloatRepeat { src, .. }
            | Step::FloatReduce { src, .. }
            | Step::FloatUnary { src, .. }
            | Step::FloatNorm { src, .. }
            | Step::PackB { src, .. }
            | Step::FloatPackB { src, .. }
            | Step::FloatConv { src, .. }
            | Step::FloatGroupedConv { src, .. }
            | Step::Phases { src, .. }
            | Step::Unfold { src, .. }
            | Step::FloatPool { src, .. }
            | Step::FloatResize { src, .. }
            | Step::FloatGlobalAvgPool { src, .. }
            | Step::MaxPool { src, .. }
            | Step::AvgPool { src, .. }
            | Step::Lut { src, .. }
            | Step::Transpose { src, .. }
            | Step::Pad { src, .. }
            | Step::Resize { src, .. } => vec![*src],
            Step::FloatBinaryConst { x, .. } => vec![*x],
            Step::Index(s) => s.reads(),
            Step::FloatGridSample { src, grid, .. } => match grid {
                FloatOperand::Buf(g) => vec![*src, *g],
                FloatOperand::Const(_) => vec![*src],
            },
            Step::Conv { src, residual, .. } => std::iter::once(*src)
                .chain(residual.as_ref().map(|r| r.other))
                .collect(),
            Step::FloatBinary { a, b, .. } => vec![*a, *b],
            Step::FloatMatMul { a, b, .. } => match b {
                FloatMatMulB::Buffer(b) => vec![*a, *b],
                FloatMatMulB::Packed(_) => vec![*a],
            },
            Step::FloatBinaryBroadcast { full, part, .. } => vec![*full, *part],
            Step::MatMulDyn { a, b, packed, .. } => [Some(*a), Some(*b), *packed]
                .into_iter()
                .flatten()
                .collect(),
            Step::Binary { a, b, .. } => [buf(a), buf(b)].into_iter().flatten().collect(),
            Step::DeconvMerge { phases, .. } => phases.clone(),
            Step::Concat { parts, .. } => parts.iter().filter_map(|(o, _, _)| buf(o)).collect(),
        }
    }

    /// The buffer this step writes (none for a graph output).
    pub(crate) fn writes(&self) -> Option<usize> {
        match self {
            Step::Output { .. } => None,
            Step::Index(s) => Some(s.writes()),
            Step::Input { dst, .. }
            | Step::Quantize { dst, .. }
            | Step::Conv { dst, .. }
            | Step::ConvFloat { dst, .. }
            | Step::Dequantize { dst, .. }
            | Step::FloatBinary { dst, .. }
            | Step::FloatBinaryConst { dst, .. }
            | Step::FloatBinaryBroadcast { dst, .. }
            | Step::FloatRepeat { dst, .. }
            | Step::FloatReduce { dst, .. }
            | Step::FloatUnary { dst, .. }
            | Step::FloatNorm { dst, .. }
            | Step::PackB { dst, .. }
            | Step::FloatPackB { dst, .. }
            | Step::FloatConv { dst, .. }
            | Step::FloatMatMul { dst, .. }
            | Step::FloatGroupedConv { dst, .. }
            | Step::MatMulDyn { dst, .. }
            | Step::Phases { dst, .. }
            | Step::Unfold { dst, .. }
            | Step::FloatPool { dst, .. }
            | Step::FloatResize { dst, .. }
            | Step::FloatGridSample { dst, .. }
            | Step::FloatGlobalAvgPool { dst, .. }
            | Step::MaxPool { dst, .. }
            | Step::AvgPool { dst, .. }
            | Step::Lut { dst, .. }
            | Step::Binary { dst, .. }
            | Step::DeconvMerge { dst, .. }
            | Step::Transpose { dst, .. }
            | Step::Pad { dst, .. }
            | Step::Resize { dst, .. }
            | Step::Concat { dst, .. } => Some(*dst),
        }
    }
}
