//! ONNX import into the native INT8 engine: [`NativeEngine`] compiles a quantized ONNX model
//! (QDQ or QOperator form) once and runs it with no allocation; [`inspect`] reports what a
//! model holds and which engine can run it.
//!
//! # Contract
//!
//! - **Input**: an `.onnx` file (protobuf read by rust-protobuf from the vendored ONNX schema)
//!   with static shapes, its tensors stored inside it or, for a model loaded by path, in
//!   external data files (`save_as_external_data=True`: `location` relative to the model's
//!   folder, never outside it; `offset`, `length`; each file read once, at load). Models
//!   quantized by ONNX Runtime's
//!   `quantize_static` (QDQ or QOperator, `int8` or `uint8` activations, per-channel or
//!   per-tensor symmetric `int8` weights) or by PyTorch's exporter (QDQ) are the intended
//!   input, and so is NVIDIA's TensorRT-oriented placement (Q/DQ on convolution inputs
//!   only, a convolution's output going on in float into `Add`, `Sigmoid`, ...): such a
//!   convolution writes `f32` from its exact integer sums and the float operators after it
//!   run in `f32` up to the next `QuantizeLinear` (`lower::float`). Weights may be `int8`
//!   initializers read by a `DequantizeLinear`, or float initializers with a
//!   `QuantizeLinear` → `DequantizeLinear` pair (per tensor or per channel along any axis,
//!   as PyTorch's QAT export, pytorch-quantization and ModelOpt write them): that
//!   `QuantizeLinear` runs once at load, with ONNX Runtime's rounding, so both forms give
//!   the same integers and the same outputs (`lower::quant`).
//! - **Tensor types**: float32, int8, uint8, int32, int64 and bool constants are read as
//!   they are; 4-bit weights (`int4`/`uint4` initializers, as `quantize_static` writes
//!   them with `weight_type=QInt4`/`QUInt4`, or a `QuantizeLinear` of float weights with a
//!   4-bit zero point) are read widened to 8 bits (a `uint4` one as `x − 8`, its zero point
//!   alike), so they run on the INT8 kernels with the same integer sums: bit-exact against
//!   ONNX Runtime's integer kernels on the same weights stored in 8 bits (ONNX Runtime
//!   itself runs 4-bit weights in float). A quantization *to* 4 bits of a computed tensor
//!   is refused (activations stay 8-bit). Constants of any other type (`float16`, the
//!   16-bit quantization of `QuantType.QUInt16`/`QInt16`, `float64`, ...) do not make the
//!   file unreadable: [`inspect`] reports the model, and the node that reads one is refused
//!   naming the tensor and its type (`lower::check_types`).
//! - **Duplicate quantizers**: `QuantizeLinear`s of one tensor with equal parameters (ONNX
//!   Runtime's `DedicatedQDQPair` option gives each reader its own) are merged into one
//!   before lowering (`graph::merge_duplicate_quantizers`), so the tensor is quantized once
//!   and the operator before it keeps its integer path.
//! - **Operators**: Conv (any kernel, stride, padding incl. `auto_pad`, dilation, groups incl.
//!   depthwise), ConvTranspose (one group, no dilation, explicit pads, `output_padding`: one
//!   dense convolution per output phase and a merge, `lower::deconv`), Gemm/MatMul with constant weights,
//!   MatMul, Gemm, Conv (grouped and depthwise too) and ConvTranspose **in float** where the weights have no Q/DQ pair or
//!   an input is a float tensor (mixed precision: `quantize_static`'s `nodes_to_exclude`;
//!   PT2E's float attention projections; float models): `f32` products with fused
//!   multiply-adds in index order (`lower::float::product`), Relu, Clip, Add and Mul with broadcasting,
//!   Div and Sub (float between the dequantized operands, as ONNX Runtime runs them),
//!   Sigmoid (and Tanh, LeakyRelu, HardSigmoid, HardSwish, Softplus, Mish, through a
//!   256-entry table), float islands (chains of elementwise float operators, Exp, Log, Erf,
//!   Pow, ... included, on one dequantized tensor and scalar constants, ending in one
//!   `QuantizeLinear`: one table, `lower::island`), MaxPool, AveragePool, GlobalAveragePool, Concat, Resize / Upsample
//!   (nearest; linear), Reshape, Flatten, Transpose (also of dequantized weights, at load:
//!   a `Linear` as the dynamo exporter writes it), Squeeze, Unsqueeze, Slice (constant
//!   starts/ends/axes, positive steps), Gather of constant indices stepping evenly forward
//!   and Split (strided copies in the tensor's own layout), Gelu (opset 20, both forms), Pad (`lower::pad`: every mode, in the tensor's own layout, exact on quantized
//!   tensors), Softmax, LogSoftmax, LayerNormalization, a MatMul of two computed tensors
//!   (attention), shape and mask arithmetic evaluated at load (`Shape` of any tensor;
//!   `Gather`, `Concat`, `Cast`, `Slice`, `Add`, `Sub`, `Mul`, `Div`, `Mod`, `Pow`, `Sqrt`,
//!   comparisons, `And`/`Or`/`Not`, `Where`, `ConstantOfShape`, `Range`, `Expand`,
//!   `ScatterND` and `Transpose` of constants: `lower::fold`), Identity, Constant,
//!   QuantizeLinear,
//!   DequantizeLinear, and the QOperator forms QLinearConv, QLinearMatMul, QGemm,
//!   QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
//!   QLinearGlobalAveragePool, QLinearConcat. Anything else, a float operator whose result is
//!   not quantized (other than the float route's), an unnamed dynamic input dimension or a
//!   convolution other than 2-D is an [`EngineError`] naming the node, the operator and
//!   what to do (usually: quantize it, or run with `--engine onnxruntime`).
//! - **Shapes**: fixed at load. A *named* symbolic input dimension (`dim_param`, the batch
//!   axis `torch.onnx.export` writes for `dynamic_axes`) is 1, as the onnxruntime backend
//!   fixes it; every shape after it, computed ones included, follows from the inputs
//!   ([`ModelInfo::named_dims`] lists them).
//! - **Semantics**: ONNX's, in the integer form ONNX Runtime runs after its QDQ fusions:
//!   `y = saturate(round_half_even(acc * x_scale * w_scale / y_scale) + y_zp)` for
//!   convolutions and matrix products with exact `i32` accumulation (bit-exact with ONNX
//!   Runtime's integer kernels where those are exact); `Relu`/`Clip` before a
//!   `QuantizeLinear` are clamps on the quantized output. `Add` and `Mul` compute ONNX
//!   Runtime's x86 `QLinearAdd` and `QLinearMul` formulas operation for operation where ONNX
//!   Runtime fuses them (`kernels::binary`), else the float operator on the dequantized
//!   values as it runs it; average pooling follows ONNX Runtime's `QLinearAveragePool` to
//!   the bit (`kernels::AvgFloat`: dequantized taps summed in `f32`, its divisor, its
//!   rounding; a window over the whole unpadded image as its integer global pool), a
//!   QOperator linear `Resize` its integer bilinear kernel (10-bit weights), a QDQ one its
//!   float formula; the table operators compute in `f32` from the dequantized integers and
//!   round half to even. Where ONNX Runtime departs from the ONNX formula, the native
//!   engine keeps the formula: its table-based `QLinearSoftmax` multiplies by
//!   `floor(1 / y_scale)`, so a quantized softmax may differ from it by one step in some
//!   elements (the agreement tests count them).
//! - **Which kernel a convolution runs on**: square kernels with equal strides, symmetric
//!   padding below the kernel size and one group run on the dense SIMD kernels of
//!   [`crate::conv::Conv2d`]. A dilated "same" convolution (odd square kernel, dilation
//!   `dh × dw` other than 1 × 1, the two may differ, stride 1, one group, padding
//!   `dh·(k/2)`, `dw·(k/2)`) runs there too: its input is split into its `dh·dw` dilation
//!   phases, each phase is convolved densely (dilation 1) and the phase outputs are merged
//!   back (`dense_routes::Phases`; bit-identical, one extra copy of the input and output). So
//!   does one that keeps the rows and strides the columns (stride `1 × s`, `s` dividing the
//!   width, odd kernel height, "same" rows): its columns are folded into channels, the same
//!   bytes read as `[h, w/s, s·c]`, and convolved at stride 1 with the taps moved to where
//!   their columns fell (`dense_routes::ColumnFold`; bit-identical, no copy, `s·k/kw` times the
//!   multiply-adds: 2× for 3×3 at 1 × 2). Depthwise convolutions (one channel per group,
//!   any stride, padding and dilation, up to 64 taps) run a kernel of their own that keeps
//!   32-channel blocks of four neighbouring pixels' sums in registers over the taps
//!   (`kernels::depthwise_rows`, multiversioned like the elementwise steps; 28–35 GMAC/s on
//!   MobileNetV2's layers on the newer EPYC, 1.6–3.6× the general loop, the most on the
//!   narrow early layers; the same integer sums, so the same bytes). Grouped convolutions with a square window
//!   (RegNet's X blocks) run one dense layer per group, each reading its group's channels
//!   through a channel view of the input and writing its channels through a channel slot
//!   (`GeneralConv::grouped`; on VNNI every group in one call,
//!   `Conv2d::forward_rows_groups`; RegNetX-200MF 15.4 → 1.16 ms on the newer EPYC, 0.51×
//!   ONNX Runtime's u8 variant). Everything else (grouped with rectangular kernels, asymmetric
//!   pads or dilation, rectangular kernels, asymmetrically padded, strided-and-dilated,
//!   row-strided rectangular) runs on the general kernel, 5–15× slower per multiply-add
//!   than the dense kernels; `redline model info` counts the MACs either way and
//!   [`NativeEngine::step_macs`] names general-kernel steps (depthwise ones included)
//!   `conv*`.
//! - **Fusion**: Relu/Clip and requantization run inside the producing step; an `Add` whose
//!   operand is computed by the convolution just before it and read by nothing else (a
//!   residual add) runs inside that convolution, on each chunk of its rows
//!   ([`NativeOptions::fuse_residual_adds`]; same operations, same bits). Elementwise
//!   steps that are a function of one byte (`x · c`, `x + c` with a scalar constant, a
//!   table of a table, SiLU's `x · sigmoid(x)`) become one table
//!   ([`NativeOptions::fuse_tables`]; each entry from the steps' own formulas, the same
//!   bits); tables run on AVX-512 VBMI (`vpermi2b`) or NEON (`tbl`/`tbx`) where the CPU
//!   has them. A strided copy that reads another is composed with it into one copy of the
//!   first one's source when the composed map is strided (checked on every element) and
//!   the arena does not grow ([`NativeOptions::fuse_transposes`]; the same bytes moved).
//! - **Elementwise steps** (`Add`, `Mul`, `QuantizeLinear`, max pooling, `Resize`, the
//!   3-channel NCHW-to-NHWC transpose): portable
//!   Rust, compiled again for AVX2 and AVX-512 on x86-64 (`isa`), the width chosen at load
//!   with the convolutions' kernel path (`REDLINE_KERNEL=scalar` keeps them on baseline
//!   code). The same IEEE-754 operations in the same order on every width, so the same bits.
//! - **Memory**: every intermediate tensor lives in one arena planned at load from the
//!   tensors' lifetimes (largest first, lowest free offset); weights are packed once at
//!   load. [`NativeEngine::run`] allocates nothing.
//! - **Parallelism**: each step splits its rows into a fixed number of chunks that depends
//!   only on its shape ([`crate::engine::Lanes`]), so the outputs are bit-identical on any
//!   number of lanes. A convolution whose weights outgrow L2 (over 256 KiB) takes at most
//!   four chunks: each chunk streams all its weights through the cache once.
//!
//! # Cost
//!
//! Loading parses the file, repacks the weights (OIHW to OHWI, plus the SIMD layouts of
//! [`crate::conv::Conv2d`]) and plans the arena: construction time, allocates. A run costs
//! [`Engine::macs`] multiply-accumulates plus one pass over each intermediate tensor for the
//! boundary copies and the non-convolution steps.
//!
//! # Never
//!
//! Never panics on a malformed file (every check returns an error), never reads the clock,
//! never allocates or locks in `run`.

use crate::engine::{check_buffers, Engine, EngineError, EngineKind, Lanes, TensorSpec};
use std::collections::BTreeMap;
use std::path::Path;

pub(crate) mod dense_routes;
pub mod fuzzing;
pub(crate) mod graph;
pub(crate) mod isa;
pub(crate) mod kernels;
mod lift;
mod lower;
pub(crate) mod program;
pub mod proto;
pub mod reference;

use graph::OnnxGraph;
pub(crate) use lower::Lowered;
use program::Program;

/// Lowers a parsed graph to the program the CUDA engine's launch plan is made from: the
/// native engine's, except that convolutions off the dense routes stay direct (no
/// [`dense_routes::Unfold`]: the CUDA convolution kernel takes any window).
#[cfg_attr(not(any(redline_cuda, test)), allow(dead_code))]
pub(crate) fn lower_graph(g: &OnnxGraph) -> Result<Lowered, EngineError> {
    lower::lower(g, false)
}

/// The native INT8 engine running one imported model.
#[derive(Debug)]
pub struct NativeEngine {
    program: Program,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    macs: u64,
    weight_bytes: usize,
    /// See [`NativeSummary::rescaled_biases`].
    rescaled_biases: usize,
    /// The arena, over-allocated by one alignment unit so that a 64-byte aligned window of
    /// `arena_bytes` fits.
    arena: Vec<u8>,
}

/// How [`NativeEngine`] compiles a model. Every setting keeps the outputs bit-identical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeOptions {
    /// Fold each `Add` whose operand is computed by the convolution just before it (and read
    /// by nothing else: ResNet's residual adds) into that convolution: the sum is taken on
    /// each chunk of rows while it is in cache, and the convolution's output buffer leaves
    /// the arena. Default `true`; `false` runs the `Add` as its own step.
    pub fuse_residual_adds: bool,
    /// Turn elementwise steps that are a function of one byte (`x · c`, `x + c`, SiLU's
    /// `x · sigmoid(x)`, a table of a table) into single table lookups
    /// (the same bytes: each entry comes from the steps' own formulas). Default `true`.
    pub fuse_tables: bool,
    /// Run each ungrouped convolution the dense kernels cannot take directly (rectangular,
    /// strided and dilated, asymmetrically padded: Inception's 1×7 and 7×1) as an unfold of
    /// its taps into channels and a pointwise dense convolution
    /// (`dense_routes::Unfold`: the same integer sums; arena grows by the unfolded image,
    /// 16 MiB at most). Default `true`; `false` runs them on the general kernel.
    pub unfold_convs: bool,
    /// Compose strided copies that read another strided copy (layout changes, transposes,
    /// slices and split parts) into one copy of the first one's source when the composed
    /// map is strided (checked on every element): ShuffleNet's channel shuffle is one pass
    /// per branch instead of five. The same bytes. Default `true`.
    pub fuse_transposes: bool,
    /// Quantize a float graph input straight from the caller's buffer instead of copying it
    /// into the arena first (an input not 4-byte aligned is still copied). The same bytes.
    /// Default `true`.
    pub fuse_input_quantize: bool,
}

impl Default for NativeOptions {
    fn default() -> Self {
        NativeOptions {
            fuse_residual_adds: true,
            fuse_tables: true,
            unfold_convs: true,
            fuse_transposes: true,
            fuse_input_quantize: true,
        }
    }
}

impl NativeEngine {
    /// Reads and compiles a model file with the default [`NativeOptions`].
    pub fn load(path: &Path) -> Result<NativeEngine, EngineError> {
        Self::load_with(path, &NativeOptions::default())
    }

    /// Reads and compiles a model file.
    pub fn load_with(path: &Path, opts: &NativeOptions) -> Result<NativeEngine, EngineError> {
        let g = OnnxGraph::load(path)?;
        Self::from_graph(&g, opts)
    }

    /// Compiles a model from the bytes of an `.onnx` file (`name` is used in messages).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<NativeEngine, EngineError> {
        let g = OnnxGraph::parse(bytes, Path::new(name))?;
        Self::from_graph(&g, &NativeOptions::default())
    }

    fn from_graph(g: &OnnxGraph, opts: &NativeOptions) -> Result<NativeEngine, EngineError> {
        let mut l = lower::lower(g, opts.unfold_convs)?;
        if opts.fuse_tables {
            program::fuse_tables(&mut l.program);
        }
        if opts.fuse_residual_adds {
            program::fuse_residual_adds(&mut l.program);
        }
        if opts.fuse_transposes {
            program::fuse_transposes(&mut l.program);
        }
        if opts.fuse_input_quantize {
            program::fuse_input_quantize(&mut l.program);
        }
        let arena = vec![0u8; l.program.arena_bytes + program::ALIGN];
        Ok(NativeEngine {
            program: l.program,
            inputs: l.inputs,
            outputs: l.outputs,
            macs: l.macs,
            weight_bytes: l.weight_bytes,
            rescaled_biases: l.rescaled_biases,
            arena,
        })
    }

    /// Bytes of packed weights and biases.
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Number of steps the model compiled to.
    pub fn steps(&self) -> usize {
        self.program.steps.len()
    }

    /// Per-step name and multiply-accumulates, in execution order (for per-layer reports).
    pub fn step_macs(&self) -> Vec<(String, u64)> {
        self.program.step_macs()
    }

    /// The kernels the compiled program runs, e.g. `vnni convolutions, avx512 elementwise`:
    /// the dense convolutions' [`crate::conv::KernelPath`] (none when every convolution is on
    /// the general kernel) and the elementwise steps' vector width.
    pub fn kernel_name(&self) -> String {
        let conv = self.program.steps.iter().find_map(|s| match s {
            program::Step::Conv {
                imp: program::ConvImpl::Dense(c),
                ..
            } => Some(c.path().name()),
            _ => None,
        });
        format!(
            "{} convolutions, {} elementwise",
            conv.unwrap_or("general"),
            self.program.isa.name()
        )
    }

    /// Runs only step `i` (for per-layer timing; the steps before it must have run since the
    /// inputs were last written, e.g. by a full [`Engine::run`]). `inputs`: the graph
    /// inputs, for the steps that read them (copied in or quantized straight from them),
    /// checked as [`Engine::run`] checks them; with none those steps do nothing. No graph
    /// output is written.
    pub fn run_step(
        &mut self,
        i: usize,
        inputs: &[&[u8]],
        lanes: &dyn Lanes,
    ) -> Result<(), EngineError> {
        if !inputs.is_empty() {
            crate::engine::check_buffers(&self.inputs, &[], inputs, &[])?;
        }
        let off = self.arena.as_ptr().align_offset(program::ALIGN);
        let arena = &mut self.arena[off..];
        self.program
            .run_range(arena, inputs, &mut [], lanes, i..i + 1)
    }
}

impl Engine for NativeEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Native
    }

    fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    fn macs(&self) -> u64 {
        self.macs
    }

    fn scratch_bytes(&self) -> usize {
        self.arena.len()
    }

    fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        lanes: &dyn Lanes,
    ) -> Result<(), EngineError> {
        check_buffers(&self.inputs, &self.outputs, inputs, outputs)?;
        let off = self.arena.as_ptr().align_offset(program::ALIGN);
        let arena = &mut self.arena[off..];
        self.program
            .run_range(arena, inputs, outputs, lanes, 0..self.program.steps.len())
    }
}

/// What [`inspect`] found in a model file.
#[derive(Debug)]
pub struct ModelInfo {
    /// Producer named in the file (e.g. `onnx.quantize 0.1.0`, `pytorch 2.5`).
    pub producer: String,
    /// Default-domain opset.
    pub opset: i64,
    /// Graph inputs as declared (`None` dimensions are dynamic).
    pub inputs: Vec<(String, String, Vec<Option<usize>>)>,
    /// Graph outputs as declared.
    pub outputs: Vec<(String, String, Vec<Option<usize>>)>,
    /// The names of the inputs' named symbolic dimensions (`dim_param`, e.g. a batch axis),
    /// each once in order of appearance: every engine fixes them to 1.
    pub named_dims: Vec<String>,
    /// Operator histogram (`domain.op` for non-default domains).
    pub ops: BTreeMap<String, usize>,
    /// Nodes in the graph.
    pub nodes: usize,
    /// Initializer bytes.
    pub initializer_bytes: usize,
    /// The model's `metadata_props` (key, value), in file order.
    pub metadata: Vec<(String, String)>,
    /// The native engine's verdict: compiled (its MACs, arena and weight bytes, steps) or
    /// the reason it cannot run the model.
    pub native: Result<NativeSummary, EngineError>,
}

/// Numbers of a model the native engine compiled.
#[derive(Debug, Clone)]
pub struct NativeSummary {
    /// Multiply-accumulates per run.
    pub macs: u64,
    /// Arena bytes.
    pub arena_bytes: usize,
    /// Packed weight bytes.
    pub weight_bytes: usize,
    /// Steps.
    pub steps: usize,
    /// Multiply-accumulates per run on the general convolution kernel (the convolutions
    /// neither the dense SIMD kernels nor the depthwise kernel run: grouped with a
    /// non-square window, a float output, too large to unfold, ...).
    pub general_macs: u64,
    /// Multiply-accumulates per run on the depthwise kernel (MobileNet's 3×3 and 5×5:
    /// one channel per group; `vpdpbusd` on four taps of a channel on AVX-512 VNNI).
    pub depthwise_macs: u64,
    /// Convolutions and matrix products whose dequantized `int32` bias is stored with a
    /// scale other than `x_scale · w_scale` (a torch export sharing one bias tensor between
    /// layers, as it does the all-zero biases of an untrained network, quantized once for
    /// its first reader): the native engine requantizes the bias and keeps the exact integer
    /// sums; ONNX Runtime may compute such a layer in float (measured: ResNet-50's 47 such
    /// convolutions ran in float, most of EfficientNet-B0's 59 were fused into its integer
    /// kernels), so the two may differ in rare roundings there.
    pub rescaled_biases: usize,
    /// Fixed input specs.
    pub inputs: Vec<TensorSpec>,
    /// Fixed output specs.
    pub outputs: Vec<TensorSpec>,
}

/// Reads a model and reports its contents and whether the native engine compiles it.
/// Fails only when the file cannot be read or parsed.
pub fn inspect(path: &Path) -> Result<ModelInfo, EngineError> {
    let g = OnnxGraph::load(path)?;
    let mut ops = BTreeMap::new();
    for n in &g.nodes {
        *ops.entry(n.op_label()).or_insert(0) += 1;
    }
    let vi = |v: &graph::ValueInfo| {
        let ty = v
            .elem
            .map(|e| e.name().to_string())
            .unwrap_or_else(|| graph::type_name(v.raw_type).to_string());
        (v.name.clone(), ty, v.dims.clone())
    };
    let native = NativeEngine::from_graph(&g, &NativeOptions::default()).map(|e| NativeSummary {
        macs: e.macs,
        arena_bytes: e.arena.len(),
        weight_bytes: e.weight_bytes,
        steps: e.program.steps.len(),
        general_macs: e.program.general_conv_macs(),
        depthwise_macs: e.program.depthwise_conv_macs(),
        rescaled_biases: e.rescaled_biases,
        inputs: e.inputs.clone(),
        outputs: e.outputs.clone(),
    });
    Ok(ModelInfo {
        producer: g.producer.clone(),
        opset: g.opset,
        inputs: g.inputs.iter().map(vi).collect(),
        outputs: g.outputs.iter().map(vi).collect(),
        named_dims: {
            let mut names: Vec<String> = Vec::new();
            for n in g.inputs.iter().flat_map(|v| v.dim_names.iter().flatten()) {
                if !names.contains(n) {
                    names.push(n.clone());
                }
            }
            names
        },
        ops,
        nodes: g.nodes.len(),
        initializer_bytes: g
            .consts
            .iter()
            .map(|(name, c)| match g.four_bit.contains_key(name) {
                true => c.len().div_ceil(2),
                false => c.len() * c.elem().size(),
            })
            .chain(g.unreadable.values().map(|u| u.bytes))
            .sum(),
        metadata: g.metadata.clone(),
        native,
    })
}

/// The `metadata_props` (key, value) of the ONNX model in `bytes`, in file order, without
/// decoding its tensors (`path` names the model in errors). Construction time only.
pub fn metadata_props(bytes: &[u8], path: &Path) -> Result<Vec<(String, String)>, EngineError> {
    use protobuf::Message;
    let model =
        proto::onnx::ModelProto::parse_from_bytes(bytes).map_err(|e| EngineError::Parse {
            path: path.to_path_buf(),
            reason: format!("not an ONNX protobuf ({e}); is this really an .onnx file?"),
        })?;
    Ok(graph::metadata_of(&model))
}

/// Multiply-accumulates of a model as the native importer counts them (convolutions and
/// matrix products), or the reason it cannot compile the model.
pub fn count_macs(path: &Path) -> Result<u64, EngineError> {
    NativeEngine::load(path).map(|e| e.macs)
}
