//! The kernel parameter structs: `#[repr(C)]` mirrors of kernels.cu's structs, field for
//! field (device pointers first, then 4-byte fields, 8-byte aligned), and the [`Kernel`]
//! names. Change both sides together; `tests.rs` checks the layouts.

// Without the `cuda` feature only the tests use them.
#![cfg_attr(not(redline_cuda), allow(dead_code))]

/// Largest tensor rank the broadcast and transpose kernels take (kernels.cu's `MAX_RANK`).
pub const MAX_RANK: usize = 8;

/// kernels.cu `Win`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Win {
    pub in_h: i32,
    pub in_w: i32,
    pub out_h: i32,
    pub out_w: i32,
    pub kh: i32,
    pub kw: i32,
    pub sh: i32,
    pub sw: i32,
    pub dh: i32,
    pub dw: i32,
    pub pt: i32,
    pub pl: i32,
}

/// kernels.cu `ConvP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvP {
    pub x: u64,
    pub y: u64,
    pub w: u64,
    pub bias: u64,
    pub mult: u64,
    pub wsum: u64,
    /// Float-output convolutions only (`out_f32`): the f32 bias added after the scale.
    pub fbias: u64,
    pub win: Win,
    pub in_c: i32,
    pub out_c: i32,
    pub groups: i32,
    pub batch: i32,
    pub x_zp: i32,
    pub y_zp: i32,
    pub lo: i32,
    pub hi: i32,
    pub clo: i32,
    pub chi: i32,
    /// 1: f32 outputs `acc · mult[oc] + fbias[oc]` (a float-output convolution).
    pub out_f32: i32,
}

/// kernels.cu `FBinP`: a float binary of two tensors (`mode` 0), of a tensor and a
/// repeating constant (1) or of a tensor and one broadcast along an axis (2); `op` 0 add,
/// 1 sub, 2 mul, 3 div.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FBinP {
    pub a: u64,
    pub b: u64,
    pub y: u64,
    pub n: i32,
    pub op: i32,
    pub swap: i32,
    pub mode: i32,
    pub period: i32,
    pub inner: i32,
}

/// kernels.cu `FUnP`: a float function of one tensor (`op`: launch.rs `unary_code`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FUnP {
    pub x: u64,
    pub y: u64,
    pub n: i32,
    pub op: i32,
    pub a: f32,
    pub b: f32,
}

/// kernels.cu `FGapP`: per-image, per-channel means of an f32 NHWC tensor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FGapP {
    pub x: u64,
    pub y: u64,
    pub n: i32,
    pub c: i32,
    pub hw: i32,
}

/// kernels.cu `CopyP` (`mode` 0 copy, 1 flip to/from `u8`, 2 dequantize to `f32`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyP {
    pub x: u64,
    pub y: u64,
    pub n: i32,
    pub mode: i32,
    pub zp: i32,
    pub scale: f32,
}

/// kernels.cu `PadP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PadP {
    pub x: u64,
    pub y: u64,
    pub pixels: i32,
    pub c_in: i32,
    pub c_out: i32,
    pub fill: i32,
}

/// kernels.cu `QuantP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantP {
    pub x: u64,
    pub y: u64,
    pub n: i32,
    pub zp: i32,
    pub scale: f32,
}

/// kernels.cu `LutP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LutP {
    pub x: u64,
    pub y: u64,
    pub table: u64,
    pub n: i32,
}

/// kernels.cu `PoolP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolP {
    pub x: u64,
    pub y: u64,
    pub win: Win,
    pub c: i32,
    pub batch: i32,
    pub avg: i32,
    pub x_zp: i32,
    pub y_zp: i32,
    pub lo: i32,
    pub hi: i32,
    pub count_include_pad: i32,
    pub x_scale: f32,
    pub y_scale: f32,
    /// Max pooling's channels per thread: 16, 4 or 1.
    pub vec: i32,
    /// Average pooling in ONNX Runtime's float formula (`kernels::AvgFloat`): 1 or 0.
    pub float_sum: i32,
    /// `AvgFloat::offset`.
    pub offset: i32,
    /// `AvgFloat::stored_zp`.
    pub stored_zp: f32,
}

/// kernels.cu `BinP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BinP {
    pub a: u64,
    pub b: u64,
    pub y: u64,
    pub n: i32,
    pub rank: i32,
    pub mul: i32,
    pub ra: f32,
    pub rb: f32,
    pub fixed: f32,
    pub off: f32,
    pub sa: f32,
    pub sb: f32,
    pub sy: f32,
    pub za: i32,
    pub zb: i32,
    pub zy: i32,
    pub lo: i32,
    pub hi: i32,
    pub dense_a: i32,
    pub dense_b: i32,
    pub shape: [i32; MAX_RANK],
    pub a_strides: [i32; MAX_RANK],
    pub b_strides: [i32; MAX_RANK],
}

/// kernels.cu `TransP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TransP {
    pub x: u64,
    pub y: u64,
    pub n: i32,
    pub rank: i32,
    pub shape: [i32; MAX_RANK],
    pub strides: [i32; MAX_RANK],
}

/// kernels.cu `CatP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CatP {
    pub x: u64,
    pub y: u64,
    pub table: u64,
    pub outer: i32,
    pub inner: i32,
    pub block: i32,
    pub col: i32,
}

/// kernels.cu `PhaseP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseP {
    pub x: u64,
    pub y: u64,
    pub dh: i32,
    pub dw: i32,
    pub h: i32,
    pub w: i32,
    pub c: i32,
    pub batch: i32,
    pub split: i32,
    pub fill: i32,
}

/// kernels.cu `PadAnyP`: ONNX `Pad` through per-dimension coordinate maps.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PadAnyP {
    pub x: u64,
    pub y: u64,
    pub maps: u64,
    pub n: i32,
    pub rank: i32,
    pub elem: i32,
    pub fill: i32,
    pub shape: [i32; MAX_RANK],
    pub in_strides: [i32; MAX_RANK],
    pub map_at: [i32; MAX_RANK],
}

/// kernels.cu `DeconvP`: one phase image of a `ConvTranspose` put in place.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeconvP {
    pub x: u64,
    pub y: u64,
    pub batch: i32,
    pub c: i32,
    pub sh: i32,
    pub sw: i32,
    pub ry: i32,
    pub rx: i32,
    pub pt: i32,
    pub pl: i32,
    pub ph: i32,
    pub pw: i32,
    pub out_h: i32,
    pub out_w: i32,
}

/// kernels.cu `ResizeP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ResizeP {
    pub x: u64,
    pub y: u64,
    pub ys: u64,
    pub xs: u64,
    pub in_h: i32,
    pub in_w: i32,
    pub c: i32,
    pub batch: i32,
    pub out_h: i32,
    pub out_w: i32,
    pub mode: i32,
    pub floor: i32,
    pub x_zp: i32,
    pub y_zp: i32,
    pub x_scale: f32,
    pub y_scale: f32,
    pub lo: i32,
    pub hi: i32,
}

/// A kernel of kernels.cu.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    ConvMma,
    ConvDp4a,
    ConvGeneric,
    CopyIo,
    Quantize,
    Lut,
    Pool,
    Binary,
    Transpose,
    ConcatPart,
    Phases,
    Resize,
    PadChannels,
    GlobalAvgPool,
    DeconvPhase,
    PadAny,
    FloatBinary,
    FloatMaxPool,
    FloatUnary,
    FloatGlobalAvgPool,
}

impl Kernel {
    /// Every kernel (the functions loaded from the module).
    pub const ALL: [Kernel; 20] = [
        Kernel::ConvMma,
        Kernel::ConvDp4a,
        Kernel::ConvGeneric,
        Kernel::CopyIo,
        Kernel::Quantize,
        Kernel::Lut,
        Kernel::Pool,
        Kernel::Binary,
        Kernel::Transpose,
        Kernel::ConcatPart,
        Kernel::Phases,
        Kernel::Resize,
        Kernel::PadChannels,
        Kernel::GlobalAvgPool,
        Kernel::DeconvPhase,
        Kernel::PadAny,
        Kernel::FloatBinary,
        Kernel::FloatMaxPool,
        Kernel::FloatUnary,
        Kernel::FloatGlobalAvgPool,
    ];

    /// The `extern "C"` name in kernels.cu.
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::ConvMma => "conv_mma",
            Kernel::ConvDp4a => "conv_dp4a",
            Kernel::ConvGeneric => "conv_generic",
            Kernel::CopyIo => "copy_io",
            Kernel::Quantize => "quantize",
            Kernel::Lut => "lut",
            Kernel::Pool => "pool",
            Kernel::Binary => "binary",
            Kernel::Transpose => "transpose",
            Kernel::ConcatPart => "concat_part",
            Kernel::Phases => "phases",
            Kernel::Resize => "resize",
            Kernel::PadChannels => "pad_channels",
            Kernel::GlobalAvgPool => "global_avg_pool",
            Kernel::DeconvPhase => "deconv_phase",
            Kernel::PadAny => "pad_any",
            Kernel::FloatBinary => "float_binary",
            Kernel::FloatMaxPool => "float_max_pool",
            Kernel::FloatUnary => "float_unary",
            Kernel::FloatGlobalAvgPool => "float_global_avg_pool",
        }
    }
}

/// The parameters of one launch (passed by value as the kernel's only argument).
#[derive(Clone, Copy, Debug)]
pub enum Params {
    Conv(ConvP),
    Copy(CopyP),
    Quant(QuantP),
    Lut(LutP),
    Pool(PoolP),
    Bin(BinP),
    Trans(TransP),
    Cat(CatP),
    Phase(PhaseP),
    Resize(ResizeP),
    Pad(PadP),
    Deconv(DeconvP),
    PadAny(PadAnyP),
    FBin(FBinP),
    FUn(FUnP),
    FGap(FGapP),
}

impl Params {
    /// The leading device pointers of the struct.
    pub fn pointers_mut(&mut self) -> &mut [u64] {
        match self {
            Params::Conv(p) => bytemuck_ptrs(p, 7),
            Params::Copy(p) => bytemuck_ptrs(p, 2),
            Params::Quant(p) => bytemuck_ptrs(p, 2),
            Params::Lut(p) => bytemuck_ptrs(p, 3),
            Params::Pool(p) => bytemuck_ptrs(p, 2),
            Params::Bin(p) => bytemuck_ptrs(p, 3),
            Params::Trans(p) => bytemuck_ptrs(p, 2),
            Params::Cat(p) => bytemuck_ptrs(p, 3),
            Params::Phase(p) => bytemuck_ptrs(p, 2),
            Params::Resize(p) => bytemuck_ptrs(p, 4),
            Params::Pad(p) => bytemuck_ptrs(p, 2),
            Params::Deconv(p) => bytemuck_ptrs(p, 2),
            Params::PadAny(p) => bytemuck_ptrs(p, 3),
            Params::FBin(p) => bytemuck_ptrs(p, 3),
            Params::FUn(p) => bytemuck_ptrs(p, 2),
            Params::FGap(p) => bytemuck_ptrs(p, 2),
        }
    }

    /// A pointer to the struct, as `cuLaunchKernel` takes a by-value argument.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            Params::Conv(p) => (p as *const ConvP).cast(),
            Params::Copy(p) => (p as *const CopyP).cast(),
            Params::Quant(p) => (p as *const QuantP).cast(),
            Params::Lut(p) => (p as *const LutP).cast(),
            Params::Pool(p) => (p as *const PoolP).cast(),
            Params::Bin(p) => (p as *const BinP).cast(),
            Params::Trans(p) => (p as *const TransP).cast(),
            Params::Cat(p) => (p as *const CatP).cast(),
            Params::Phase(p) => (p as *const PhaseP).cast(),
            Params::Resize(p) => (p as *const ResizeP).cast(),
            Params::Pad(p) => (p as *const PadP).cast(),
            Params::Deconv(p) => (p as *const DeconvP).cast(),
            Params::PadAny(p) => (p as *const PadAnyP).cast(),
            Params::FBin(p) => (p as *const FBinP).cast(),
            Params::FUn(p) => (p as *const FUnP).cast(),
            Params::FGap(p) => (p as *const FGapP).cast(),
        }
    }
}

/// The first `n` `u64` fields of a `#[repr(C)]` parameter struct.
fn bytemuck_ptrs<T>(p: &mut T, n: usize) -> &mut [u64] {
    assert!(n * 8 <= std::mem::size_of::<T>() && std::mem::align_of::<T>() == 8);
    // SAFETY: every parameter struct is `#[repr(C)]` with 8-byte alignment and begins with
    // at least `n` `u64` fields (checked by the assertion for size/alignment and by the
    // struct definitions above, which `pointer_fields_lead_every_struct` tests); the slice
    // borrows `p` mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut((p as *mut T).cast::<u64>(), n) }
}
