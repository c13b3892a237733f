//! The CUDA engine's launch plan: the native engine's compiled [`Program`] translated, step
//! for step, into kernel launches over two device regions. Pure host code (no CUDA needed),
//! so the plan is built and checked on any machine.
//!
//! # Contract
//!
//! - **Same program, same arena.** The plan is made from the program the native engine runs
//!   (same lowering, same buffer offsets): every intermediate tensor lives at the native
//!   arena's planned offset inside the *frame* region, and the graph's inputs and outputs
//!   get their own staging slots after the arena (so a frame's upload never races a kernel
//!   that reads the arena). Weights, biases, multipliers, tables and constant operands go
//!   into the *constant* region, each at a 256-byte aligned offset.
//! - **One launch per step** (a concatenation: one per input; `Input`/`Output`: one copy
//!   kernel each), in step order on one stream: a step's inputs were written by earlier
//!   launches, so stream order is the only synchronisation needed.
//! - **Addresses are relocatable.** Each parameter struct starts with its device pointers;
//!   the plan stores them as region-tagged offsets ([`Addr`]) and
//!   [`LaunchPlan::relocate`] turns them into device addresses once the regions exist.
//!   A null pointer (an absent table) stays 0.
//! - Every shape that reaches a kernel fits its `i32` parameters (checked here; a larger
//!   model is an [`EngineError::Unsupported`] naming the step, never a wrong result).
//!
//! The parameter structs themselves (kernels.cu's, mirrored) are in `params`; the 32-bit
//! shape checks and grids in `launch/fit.rs`; the float route's steps in `launch/float.rs`.

// Without the `cuda` feature only this module's tests use it.
#![cfg_attr(not(redline_cuda), allow(dead_code))]

pub use super::params::*;

// Shape checks and grids; the float route's steps (TensorRT-style Q/DQ placement).
mod fit;
mod float;
use crate::engine::{EngineError, TensorSpec};
use crate::onnx::kernels::{dense_strides, BinaryKind, Interp, Window};
use crate::onnx::program::{ConvImpl, Operand, OutKind, PhaseDir, Step};
use crate::onnx::Lowered;
pub(super) use fit::{grid_for, grid_for_runs};
use fit::{i32_of, rank_arrays, win_of};

/// Threads per block of every element-wise kernel.
pub const BLOCK: u32 = 256;
/// Threads (output pixels) per block of `conv_dp4a`.
pub const CONV_BLOCK: u32 = 128;
/// Output channels per thread of `conv_dp4a` (kernels.cu's `OCT`).
pub const CONV_OCT: usize = 8;
/// Pixels x channels per block of `conv_mma` (kernels.cu's `MMA_BM`, `MMA_BN`); 128 threads.
pub const MMA_TILE: usize = 64;
/// Smallest reduction (`kh·kw·in_c`, `in_c` rounded up to 4) worth the tensor cores when
/// `in_c` is not a multiple of 16 (the gather then reads 4-byte taps; a 3-channel stem is
/// first padded to 4 channels).
pub const MMA_MIN_K: usize = 32;
/// Alignment of every constant and staging slot.
pub const DEVICE_ALIGN: usize = 256;

/// Which region an [`Addr`] points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The per-frame region: the arena, then the input and output staging slots.
    Frame,
    /// The constants uploaded once at load.
    Const,
    /// Scratch at the end of the frame region (channel-padded convolution inputs), reused
    /// by every step that needs it (stream order keeps the uses apart).
    Scratch,
}

const TAG_FRAME: u64 = 1 << 62;
const TAG_CONST: u64 = 2 << 62;
const TAG_SCRATCH: u64 = 3 << 62;
const TAG_MASK: u64 = 3 << 62;

/// A region-tagged offset as stored in a parameter struct before relocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addr(pub u64);

impl Addr {
    fn new(region: Region, offset: usize) -> Addr {
        let tag = match region {
            Region::Frame => TAG_FRAME,
            Region::Const => TAG_CONST,
            Region::Scratch => TAG_SCRATCH,
        };
        Addr(tag | offset as u64)
    }

    /// The region and offset, or `None` for a null pointer.
    pub fn decode(v: u64) -> Option<(Region, usize)> {
        let off = (v & !TAG_MASK) as usize;
        match v & TAG_MASK {
            TAG_FRAME => Some((Region::Frame, off)),
            TAG_CONST => Some((Region::Const, off)),
            TAG_SCRATCH => Some((Region::Scratch, off)),
            _ => None,
        }
    }
}

/// One kernel launch.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The program step it belongs to (read by the plan's tests and in debug output).
    #[allow(dead_code)]
    pub step: usize,
    pub kernel: Kernel,
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub params: Params,
}

/// A graph input or output's staging slot: its offset in the frame region and in the
/// pinned host buffer, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoSlot {
    pub frame_offset: usize,
    pub host_offset: usize,
    pub bytes: usize,
}

/// The whole plan: launches in stream order, region sizes, constants and staging slots.
#[derive(Debug)]
pub struct LaunchPlan {
    pub launches: Vec<Launch>,
    /// Bytes of the frame region (arena + staging), a multiple of [`DEVICE_ALIGN`].
    pub frame_bytes: usize,
    /// The native arena's size (the first `arena_bytes` of the frame region).
    pub arena_bytes: usize,
    /// The constant region's contents.
    pub consts: Vec<u8>,
    pub inputs: Vec<IoSlot>,
    pub outputs: Vec<IoSlot>,
    /// Bytes of the pinned staging buffer (inputs then outputs).
    pub host_bytes: usize,
    /// Bytes of the pinned inputs (the first part of the staging buffer).
    pub host_in_bytes: usize,
    /// Offset and size of the scratch area at the end of the frame region (the size is
    /// included in `frame_bytes`; read by the tests).
    pub scratch_offset: usize,
    #[allow(dead_code)]
    pub scratch_bytes: usize,
    /// The program's name of every step (`conv 3x3/1 64>64 ...`), for profiles.
    pub step_names: Vec<String>,
}

fn align(n: usize) -> usize {
    n.div_ceil(DEVICE_ALIGN) * DEVICE_ALIGN
}

/// Channels per thread of the max-pooling kernel: 16 or 4 when the channel count and both
/// buffers' offsets (hence addresses: regions are [`DEVICE_ALIGN`]-aligned) are multiples of
/// it, so each thread loads and stores whole aligned words; else 1.
pub(super) fn max_pool_vector(channels: usize, src_offset: usize, dst_offset: usize) -> usize {
    [16, 4]
        .into_iter()
        .find(|&v| {
            [channels, src_offset, dst_offset]
                .iter()
                .all(|x| x.is_multiple_of(v))
        })
        .unwrap_or(1)
}

/// Threads per block of the global average pool (kernels.cu `GAP_BLOCK`): one block per
/// image and group of channels shares out the image's pixels.
pub const GAP_BLOCK: u32 = 256;

/// Output bytes per thread of the transpose kernel (kernels.cu `TRANS_RUN`).
pub const TRANS_RUN: usize = 16;

/// Builds the constant region.
#[derive(Default)]
struct Consts {
    bytes: Vec<u8>,
}

impl Consts {
    fn push(&mut self, data: &[u8]) -> u64 {
        let off = align(self.bytes.len());
        self.bytes.resize(off, 0);
        self.bytes.extend_from_slice(data);
        Addr::new(Region::Const, off).0
    }
    fn push_i8(&mut self, v: &[i8]) -> u64 {
        let b: Vec<u8> = v.iter().map(|&x| x as u8).collect();
        self.push(&b)
    }
    fn push_i32(&mut self, v: &[i32]) -> u64 {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.push(&b)
    }
    fn push_f32(&mut self, v: &[f32]) -> u64 {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.push(&b)
    }
}

impl LaunchPlan {
    /// Translates the lowered model's program (its inputs' and outputs' sizes give the
    /// staging slots). `tensor_cores`: ungrouped convolutions go to `conv_mma` (needs sm_80+) when
    /// `in_c % 16 == 0` or their reduction is at least [`MMA_MIN_K`] (an `in_c` that is not
    /// a multiple of 4 is padded first, `pad_channels`); the others to
    /// `conv_dp4a` (`in_c % 4 == 0`) or `conv_generic`.
    pub fn new(model: &Lowered, tensor_cores: bool) -> Result<LaunchPlan, EngineError> {
        let program = &model.program;
        let in_bytes: Vec<usize> = model.inputs.iter().map(TensorSpec::byte_len).collect();
        let out_bytes: Vec<usize> = model.outputs.iter().map(TensorSpec::byte_len).collect();
        let arena_bytes = align(program.arena_bytes);
        let mut off = arena_bytes;
        let mut host = 0;
        let mut slot = |bytes: usize| {
            let s = IoSlot {
                frame_offset: off,
                host_offset: host,
                bytes,
            };
            off += align(bytes.max(1));
            host += align(bytes.max(1));
            s
        };
        let inputs: Vec<IoSlot> = in_bytes.iter().map(|&b| slot(b)).collect();
        let host_in_bytes = inputs.iter().map(|s| align(s.bytes.max(1))).sum();
        let outputs: Vec<IoSlot> = out_bytes.iter().map(|&b| slot(b)).collect();
        let (frame_bytes, host_bytes) = (off, host);

        let buf = |i: usize| Addr::new(Region::Frame, program.buffers[i].offset).0;
        let mut c = Consts::default();
        let mut scratch = 0usize;
        let mut launches = Vec::new();
        for (si, step) in program.steps.iter().enumerate() {
            let mut push = |kernel: Kernel, grid: (u32, u32, u32), block: u32, params: Params| {
                launches.push(Launch {
                    step: si,
                    kernel,
                    grid,
                    block,
                    params,
                });
            };
            match step {
                Step::Input { index, dst, flip } => {
                    let s = inputs[*index];
                    let p = CopyP {
                        x: Addr::new(Region::Frame, s.frame_offset).0,
                        y: buf(*dst),
                        n: i32_of(s.bytes, si, "input")?,
                        mode: i32::from(*flip),
                        zp: 0,
                        scale: 0.0,
                    };
                    push(
                        Kernel::CopyIo,
                        grid_for(s.bytes, si, "input")?,
                        BLOCK,
                        Params::Copy(p),
                    );
                }
                Step::Output { index, src, kind } => {
                    let s = outputs[*index];
                    let (mode, n, zp, scale) = match *kind {
                        OutKind::Copy => (0, s.bytes, 0, 0.0),
                        OutKind::FlipU8 => (1, s.bytes, 0, 0.0),
                        OutKind::Dequantize { scale, zp } => (2, s.bytes / 4, zp, scale),
                    };
                    let p = CopyP {
                        x: buf(*src),
                        y: Addr::new(Region::Frame, s.frame_offset).0,
                        n: i32_of(n, si, "output")?,
                        mode,
                        zp,
                        scale,
                    };
                    push(
                        Kernel::CopyIo,
                        grid_for(n, si, "output")?,
                        BLOCK,
                        Params::Copy(p),
                    );
                }
                // `input` is set only by the native engine's fusion: this program has none.
                Step::Quantize {
                    src,
                    dst,
                    n,
                    scale,
                    zp,
                    input: _,
                } => {
                    let p = QuantP {
                        x: buf(*src),
                        y: buf(*dst),
                        n: i32_of(*n, si, "quantize")?,
                        zp: *zp,
                        scale: *scale,
                    };
                    push(
                        Kernel::Quantize,
                        grid_for(*n, si, "quantize")?,
                        BLOCK,
                        Params::Quant(p),
                    );
                }
                Step::Conv { .. } | Step::ConvFloat { .. } => {
                    // Both output kinds share the kernels: a float-output convolution
                    // (TensorRT-style Q/DQ placement) stores `acc · scale + bias` as f32.
                    let (imp, batch, in_h, in_w, src, dst, clamp, float_out) = match step {
                        Step::Conv {
                            imp,
                            batch,
                            in_h,
                            in_w,
                            src,
                            dst,
                            clamp,
                            residual,
                            ..
                        } => {
                            // The CUDA engine compiles the unfused program
                            // (`onnx::lower_graph`); a fused residual add here would be a
                            // bug in the caller.
                            if residual.is_some() {
                                return Err(EngineError::Invalid {
                                    reason: "the CUDA engine runs unfused programs: a \
                                             convolution with a fused residual add reached it"
                                        .into(),
                                });
                            }
                            (imp, batch, in_h, in_w, src, dst, *clamp, None)
                        }
                        Step::ConvFloat {
                            imp,
                            batch,
                            in_h,
                            in_w,
                            scales,
                            bias,
                            src,
                            dst,
                            ..
                        } => (imp, batch, in_h, in_w, src, dst, None, Some((scales, bias))),
                        _ => {
                            return Err(EngineError::Invalid {
                                reason: format!("step {si}: not a convolution"),
                            })
                        }
                    };
                    let (clo, chi) =
                        clamp.map_or((-128, 127), |(l, h)| (i32::from(l), i32::from(h)));
                    let mut p = match imp {
                        ConvImpl::Dense(cv) => {
                            let (oh, ow) = cv.out_hw(*in_h, *in_w);
                            let w = Window {
                                in_h: *in_h,
                                in_w: *in_w,
                                out_h: oh,
                                out_w: ow,
                                kh: cv.k,
                                kw: cv.k,
                                sh: cv.stride,
                                sw: cv.stride,
                                dh: 1,
                                dw: 1,
                                pt: cv.pad,
                                pl: cv.pad,
                            };
                            let y_zp = i32::from(cv.out_q.zero_point);
                            ConvP {
                                w: c.push_i8(&cv.weights),
                                bias: c.push_i32(&cv.bias),
                                mult: c.push_f32(cv.multipliers()),
                                wsum: c.push_i32(&weight_sums(&cv.weights, cv.out_c)),
                                win: win_of(&w, si)?,
                                in_c: i32_of(cv.in_c, si, "conv")?,
                                out_c: i32_of(cv.out_c, si, "conv")?,
                                groups: 1,
                                x_zp: i32::from(cv.in_q.zero_point),
                                y_zp,
                                lo: if cv.relu { y_zp } else { -128 },
                                hi: 127,
                                ..ConvP::default()
                            }
                        }
                        ConvImpl::General(g) => ConvP {
                            w: c.push_i8(&g.weights),
                            bias: c.push_i32(&g.bias),
                            mult: c.push_f32(&g.multipliers),
                            wsum: c.push_i32(&weight_sums(&g.weights, g.out_c)),
                            win: win_of(&g.win, si)?,
                            in_c: i32_of(g.in_c, si, "conv")?,
                            out_c: i32_of(g.out_c, si, "conv")?,
                            groups: i32_of(g.groups, si, "conv")?,
                            x_zp: g.x_zp,
                            y_zp: g.y_zp,
                            lo: i32::from(g.lo),
                            hi: i32::from(g.hi),
                            ..ConvP::default()
                        },
                    };
                    p.x = buf(*src);
                    p.y = buf(*dst);
                    p.batch = i32_of(*batch, si, "conv")?;
                    p.clo = clo;
                    p.chi = chi;
                    if let Some((scales, bias)) = float_out {
                        // The integer bias is zero on this route; the scales replace the
                        // requantization multipliers.
                        p.mult = c.push_f32(scales);
                        p.fbias = c.push_f32(bias);
                        p.out_f32 = 1;
                    }
                    let pixels = batch * p.win.out_h as usize * p.win.out_w as usize;
                    let out_c = p.out_c as usize;
                    let k4 = (p.win.kh * p.win.kw) as usize * (p.in_c as usize).div_ceil(4) * 4;
                    let mma =
                        tensor_cores && p.groups == 1 && (p.in_c % 16 == 0 || k4 >= MMA_MIN_K);
                    if mma && p.in_c % 4 != 0 {
                        // A stem (3 channels): pad the input to a multiple of 4 channels
                        // (x_zp) and the weights with zeros, so the gather reads 4-byte
                        // taps; the sums are the same integers.
                        let (c_in, c4) = (p.in_c as usize, (p.in_c as usize).div_ceil(4) * 4);
                        let in_pixels = batch * p.win.in_h as usize * p.win.in_w as usize;
                        let w = match imp {
                            ConvImpl::Dense(cv) => &cv.weights,
                            ConvImpl::General(g) => &g.weights,
                        };
                        let taps = (p.win.kh * p.win.kw) as usize;
                        let mut padded = vec![0i8; out_c * taps * c4];
                        for (src, dst) in w.chunks_exact(c_in).zip(padded.chunks_exact_mut(c4)) {
                            dst[..c_in].copy_from_slice(src);
                        }
                        let pad = PadP {
                            x: p.x,
                            y: Addr::new(Region::Scratch, 0).0,
                            pixels: i32_of(in_pixels, si, "conv")?,
                            c_in: p.in_c,
                            c_out: i32_of(c4, si, "conv")?,
                            fill: p.x_zp,
                        };
                        push(
                            Kernel::PadChannels,
                            grid_for(in_pixels, si, "conv")?,
                            BLOCK,
                            Params::Pad(pad),
                        );
                        scratch = scratch.max(in_pixels * c4);
                        p.x = pad.y;
                        p.w = c.push_i8(&padded);
                        p.in_c = pad.c_out;
                    }
                    if mma {
                        let gx = u32::try_from(pixels.div_ceil(MMA_TILE).max(1)).map_err(|_| {
                            EngineError::Invalid {
                                reason: format!("step {si}: too many output pixels"),
                            }
                        })?;
                        let gy = out_c.div_ceil(MMA_TILE) as u32;
                        push(Kernel::ConvMma, (gx, gy, 1), 128, Params::Conv(p));
                    } else if p.groups == 1 && p.in_c % 4 == 0 {
                        let gx = u32::try_from(pixels.div_ceil(CONV_BLOCK as usize).max(1))
                            .map_err(|_| EngineError::Invalid {
                                reason: format!("step {si}: too many output pixels"),
                            })?;
                        let gy = out_c.div_ceil(CONV_OCT) as u32;
                        push(Kernel::ConvDp4a, (gx, gy, 1), CONV_BLOCK, Params::Conv(p));
                    } else {
                        let n = pixels * out_c;
                        i32_of(n, si, "conv")?;
                        push(
                            Kernel::ConvGeneric,
                            grid_for(n, si, "conv")?,
                            BLOCK,
                            Params::Conv(p),
                        );
                    }
                }
                Step::Phases {
                    phases,
                    dir,
                    c: ch,
                    batch,
                    src,
                    dst,
                } => {
                    let (split, fill) = match dir {
                        PhaseDir::Split { fill } => (1, i32::from(*fill)),
                        PhaseDir::Merge => (0, 0),
                    };
                    let n = if split == 1 {
                        batch * phases.count() * phases.ph() * phases.pw() * ch
                    } else {
                        batch * phases.h * phases.w * ch
                    };
                    i32_of(n, si, "dilation phases")?;
                    let p = PhaseP {
                        x: buf(*src),
                        y: buf(*dst),
                        dh: i32_of(phases.dh, si, "dilation phases")?,
                        dw: i32_of(phases.dw, si, "dilation phases")?,
                        h: i32_of(phases.h, si, "dilation phases")?,
                        w: i32_of(phases.w, si, "dilation phases")?,
                        c: i32_of(*ch, si, "dilation phases")?,
                        batch: i32_of(*batch, si, "dilation phases")?,
                        split,
                        fill,
                    };
                    push(
                        Kernel::Phases,
                        grid_for(n, si, "dilation phases")?,
                        BLOCK,
                        Params::Phase(p),
                    );
                }
                Step::MaxPool {
                    win,
                    c: ch,
                    batch,
                    src,
                    dst,
                } => {
                    let n = batch * win.out_h * win.out_w * ch;
                    let vec = max_pool_vector(
                        *ch,
                        program.buffers[*src].offset,
                        program.buffers[*dst].offset,
                    );
                    i32_of(n, si, "maxpool")?;
                    let p = PoolP {
                        x: buf(*src),
                        y: buf(*dst),
                        win: win_of(win, si)?,
                        c: i32_of(*ch, si, "maxpool")?,
                        batch: i32_of(*batch, si, "maxpool")?,
                        avg: 0,
                        vec: vec as i32,
                        ..PoolP::default()
                    };
                    push(
                        Kernel::Pool,
                        grid_for(n / vec, si, "maxpool")?,
                        BLOCK,
                        Params::Pool(p),
                    );
                }
                Step::AvgPool {
                    win,
                    c: ch,
                    batch,
                    p: ap,
                    src,
                    dst,
                    split: _,
                } => {
                    let n = batch * win.out_h * win.out_w * ch;
                    i32_of(n, si, "avgpool")?;
                    // A global pool on the integer formula: a block per image and group of
                    // channels (`global_avg_pool`), not one thread walking a whole image
                    // per output (EfficientNet-B0's 112x112 squeeze-and-excitation pools took
                    // 2.6 ms that way on an H200).
                    let global = win.covers_image() && ap.float.is_none();
                    let vec = if global {
                        i32_of(win.in_h * win.in_w * ch, si, "global avgpool")?;
                        max_pool_vector(*ch, program.buffers[*src].offset, 0)
                    } else {
                        1
                    };
                    let p = PoolP {
                        x: buf(*src),
                        y: buf(*dst),
                        win: win_of(win, si)?,
                        c: i32_of(*ch, si, "avgpool")?,
                        batch: i32_of(*batch, si, "avgpool")?,
                        avg: 1,
                        x_zp: ap.x_zp,
                        y_zp: ap.y_zp,
                        lo: i32::from(ap.lo),
                        hi: i32::from(ap.hi),
                        count_include_pad: i32::from(ap.count_include_pad),
                        x_scale: ap.x_scale,
                        y_scale: ap.y_scale,
                        vec: vec as i32,
                        float_sum: i32::from(ap.float.is_some()),
                        offset: ap.float.map_or(0, |f| f.offset),
                        stored_zp: ap.float.map_or(0.0, |f| f.stored_zp),
                    };
                    if global {
                        let groups = (*ch / vec) as u32;
                        let images = u32::try_from(*batch)
                            .ok()
                            .filter(|&b| b <= 65_535)
                            .ok_or_else(|| EngineError::Unsupported {
                                node: format!("step {si}"),
                                op: "GlobalAveragePool".to_string(),
                                reason: "more than 65,535 images in one pool".to_string(),
                            })?;
                        push(
                            Kernel::GlobalAvgPool,
                            (groups, images, 1),
                            GAP_BLOCK,
                            Params::Pool(p),
                        );
                    } else {
                        push(
                            Kernel::Pool,
                            grid_for(n, si, "avgpool")?,
                            BLOCK,
                            Params::Pool(p),
                        );
                    }
                }
                Step::Lut { table, n, src, dst } => {
                    let p = LutP {
                        x: buf(*src),
                        y: buf(*dst),
                        table: c.push_i8(&table[..]),
                        n: i32_of(*n, si, "table")?,
                    };
                    push(
                        Kernel::Lut,
                        grid_for(*n, si, "table")?,
                        BLOCK,
                        Params::Lut(p),
                    );
                }
                Step::Binary { op, a, b, n, dst } => {
                    let mut operand = |o: &Operand| match o {
                        Operand::Buf(i) => buf(*i),
                        Operand::Const(v) => c.push_i8(v),
                    };
                    let (pa, pb) = (operand(a), operand(b));
                    let (mul, ra, rb, fixed, off) = match op.kind {
                        BinaryKind::Add(p) => (0, p.ra, p.rb, p.fixed, p.off),
                        BinaryKind::Mul(m) => (2, m.ratio, 0.0, m.zy_stored, m.off as f32),
                        BinaryKind::MulDequantized => (1, 0.0, 0.0, 0.0, 0.0),
                        BinaryKind::Div => (3, 0.0, 0.0, 0.0, 0.0),
                        BinaryKind::Sub => (4, 0.0, 0.0, 0.0, 0.0),
                    };
                    // Only the shape's extent matters for a dimension of size 1: its index is
                    // always 0, whatever its stride.
                    let p = BinP {
                        a: pa,
                        b: pb,
                        y: buf(*dst),
                        n: i32_of(*n, si, "binary")?,
                        rank: op.shape.len() as i32,
                        mul,
                        ra,
                        rb,
                        fixed,
                        off,
                        sa: op.sa,
                        sb: op.sb,
                        sy: op.sy,
                        za: op.za,
                        zb: op.zb,
                        zy: op.zy,
                        lo: i32::from(op.lo),
                        hi: i32::from(op.hi),
                        dense_a: i32::from(dense_strides(&op.a_strides, &op.shape)),
                        dense_b: i32::from(dense_strides(&op.b_strides, &op.shape)),
                        shape: rank_arrays(&op.shape, si, "binary")?,
                        a_strides: rank_arrays(&op.a_strides, si, "binary")?,
                        b_strides: rank_arrays(&op.b_strides, si, "binary")?,
                    };
                    push(
                        Kernel::Binary,
                        grid_for(*n, si, "binary")?,
                        BLOCK,
                        Params::Bin(p),
                    );
                }
                Step::Dequantize { .. }
                | Step::FloatBinary { .. }
                | Step::FloatBinaryConst { .. }
                | Step::FloatBinaryBroadcast { .. }
                | Step::FloatUnary { .. }
                | Step::FloatPool { .. }
                | Step::FloatGlobalAvgPool { .. }
                | Step::FloatRepeat { .. }
                | Step::FloatReduce { .. }
                | Step::FloatResize { .. }
                | Step::FloatNorm { .. } => {
                    let (kernel, grid, block, params) = float::launch(step, si, &buf, &mut c)?;
                    push(kernel, grid, block, params);
                }
                Step::FloatPackB { .. }
                | Step::FloatConv { .. }
                | Step::FloatMatMul { .. }
                | Step::FloatGroupedConv { .. } => {
                    return Err(EngineError::Unsupported {
                        node: format!("step {si}"),
                        op: "float step".to_string(),
                        reason: "a MatMul, Gemm or Conv in float (weights left unquantized, \
                                 or attention computed in float) is not on the CUDA engine \
                                 yet; run the model on the native engine or with --engine \
                                 onnxruntime"
                            .to_string(),
                    })
                }
                Step::Index(s) => {
                    return Err(EngineError::Unsupported {
                        node: format!("step {si} ({})", s.name()),
                        op: "integer step".to_string(),
                        reason: "integer tensors computed at run time (TopK's indices, the \
                                 arithmetic on them, Gather/GatherElements by them) are not on \
                                 the CUDA engine yet; run the model on the native engine or \
                                 with --engine onnxruntime"
                            .to_string(),
                    })
                }
                Step::FloatGridSample { .. } => {
                    return Err(EngineError::Unsupported {
                        node: format!("step {si}"),
                        op: "GridSample".to_string(),
                        reason: "GridSample is not on the CUDA engine yet; run the model on \
                                 the native engine or with --engine onnxruntime"
                            .to_string(),
                    })
                }
                Step::PackB { .. } | Step::MatMulDyn { .. } => {
                    return Err(EngineError::Unsupported {
                        node: format!("step {si}"),
                        op: "MatMul of two computed tensors".to_string(),
                        reason: "a product of two computed tensors (attention) is not on the \
                                 CUDA engine yet; run the model on the native engine or with \
                                 --engine onnxruntime"
                            .to_string(),
                    })
                }
                Step::Unfold { .. } => {
                    // The CUDA engine's program is lowered without unfolds
                    // (`onnx::lower_graph`): its convolution kernel runs any window.
                    return Err(EngineError::Invalid {
                        reason: "the CUDA engine runs convolutions directly: an unfolded \
                                 convolution reached it"
                            .into(),
                    });
                }
                Step::Pad { geom, src, dst } => {
                    let rank = geom.out_shape.len();
                    if rank == 0 || geom.elem > 4 {
                        return Err(EngineError::Unsupported {
                            node: format!("step {si}"),
                            op: "Pad".to_string(),
                            reason: format!(
                                "a Pad of rank {rank} with {}-byte elements is not on the CUDA \
                                 engine; run the model on the native engine",
                                geom.elem
                            ),
                        });
                    }
                    let n: usize = geom.out_shape.iter().product();
                    i32_of(n * geom.elem, si, "pad")?;
                    i32_of(program.buffers[*src].bytes, si, "pad")?;
                    let mut maps = Vec::new();
                    let mut map_at = Vec::with_capacity(rank);
                    for m in &geom.maps {
                        map_at.push(maps.len());
                        maps.extend_from_slice(m);
                    }
                    let mut fill = [0u8; 4];
                    for (f, &b) in fill.iter_mut().zip(&geom.fill) {
                        *f = b as u8;
                    }
                    let p = PadAnyP {
                        x: buf(*src),
                        y: buf(*dst),
                        maps: c.push_i32(&maps),
                        n: i32_of(n, si, "pad")?,
                        rank: rank as i32,
                        elem: geom.elem as i32,
                        fill: i32::from_le_bytes(fill),
                        shape: rank_arrays(&geom.out_shape, si, "pad")?,
                        in_strides: rank_arrays(&geom.in_strides, si, "pad")?,
                        map_at: rank_arrays(&map_at, si, "pad")?,
                    };
                    push(
                        Kernel::PadAny,
                        grid_for(n, si, "pad")?,
                        BLOCK,
                        Params::PadAny(p),
                    );
                }
                Step::DeconvMerge {
                    geom: m,
                    phases,
                    dst,
                } => {
                    // One launch per phase image, each writing the output pixels it owns.
                    i32_of(m.batch * m.out_h * m.out_w * m.c, si, "deconv merge")?;
                    for (k, &src) in phases.iter().enumerate() {
                        let n = m.batch * m.ph * m.pw * m.c;
                        let f = |v: usize| i32_of(v, si, "deconv merge");
                        let p = DeconvP {
                            x: buf(src),
                            y: buf(*dst),
                            batch: f(m.batch)?,
                            c: f(m.c)?,
                            sh: f(m.sh)?,
                            sw: f(m.sw)?,
                            ry: f(k / m.sw)?,
                            rx: f(k % m.sw)?,
                            pt: f(m.pt)?,
                            pl: f(m.pl)?,
                            ph: f(m.ph)?,
                            pw: f(m.pw)?,
                            out_h: f(m.out_h)?,
                            out_w: f(m.out_w)?,
                        };
                        push(
                            Kernel::DeconvPhase,
                            grid_for(n, si, "deconv merge")?,
                            BLOCK,
                            Params::Deconv(p),
                        );
                    }
                }
                Step::Transpose {
                    out_shape,
                    strides,
                    offset,
                    src,
                    dst,
                } => {
                    let n: usize = out_shape.iter().product();
                    let p = TransP {
                        x: Addr::new(Region::Frame, program.buffers[*src].offset + offset).0,
                        y: buf(*dst),
                        n: i32_of(n, si, "transpose")?,
                        rank: out_shape.len() as i32,
                        shape: rank_arrays(out_shape, si, "transpose")?,
                        strides: rank_arrays(strides, si, "transpose")?,
                    };
                    push(
                        Kernel::Transpose,
                        grid_for_runs(n, TRANS_RUN, si, "transpose")?,
                        BLOCK,
                        Params::Trans(p),
                    );
                }
                Step::Resize {
                    in_h,
                    in_w,
                    c: ch,
                    batch,
                    ys,
                    xs,
                    mode,
                    src,
                    dst,
                } => {
                    let taps = |t: &[crate::onnx::kernels::Tap]| -> Result<Vec<u8>, EngineError> {
                        let mut b = Vec::with_capacity(t.len() * 12);
                        for tap in t {
                            b.extend_from_slice(&i32_of(tap.i0, si, "resize")?.to_le_bytes());
                            b.extend_from_slice(&i32_of(tap.i1, si, "resize")?.to_le_bytes());
                            b.extend_from_slice(&tap.w1.to_le_bytes());
                        }
                        Ok(b)
                    };
                    let (m, floor, x_zp, y_zp, x_scale, y_scale, lo, hi) = match *mode {
                        Interp::Nearest => (0, 0, 0, 0, 1.0, 1.0, -128, 127),
                        Interp::Linear {
                            x_zp,
                            x_scale,
                            y_zp,
                            y_scale,
                            lo,
                            hi,
                        } => (
                            1,
                            0,
                            x_zp,
                            y_zp,
                            x_scale,
                            y_scale,
                            i32::from(lo),
                            i32::from(hi),
                        ),
                        Interp::Raw { floor } => (2, i32::from(floor), 0, 0, 1.0, 1.0, -128, 127),
                    };
                    let n = batch * ys.len() * xs.len() * ch;
                    i32_of(n, si, "resize")?;
                    let p = ResizeP {
                        x: buf(*src),
                        y: buf(*dst),
                        ys: c.push(&taps(ys)?),
                        xs: c.push(&taps(xs)?),
                        in_h: i32_of(*in_h, si, "resize")?,
                        in_w: i32_of(*in_w, si, "resize")?,
                        c: i32_of(*ch, si, "resize")?,
                        batch: i32_of(*batch, si, "resize")?,
                        out_h: i32_of(ys.len(), si, "resize")?,
                        out_w: i32_of(xs.len(), si, "resize")?,
                        mode: m,
                        floor,
                        x_zp,
                        y_zp,
                        x_scale,
                        y_scale,
                        lo,
                        hi,
                    };
                    push(
                        Kernel::Resize,
                        grid_for(n, si, "resize")?,
                        BLOCK,
                        Params::Resize(p),
                    );
                }
                Step::Concat { outer, parts, dst } => {
                    let block: usize = parts.iter().map(|p| p.1).sum();
                    let mut col = 0;
                    for (src, inner, table) in parts {
                        let x = match src {
                            Operand::Buf(i) => buf(*i),
                            Operand::Const(v) => c.push_i8(v),
                        };
                        let t = table.as_ref().map_or(0, |t| c.push_i8(&t[..]));
                        let n = outer * inner;
                        i32_of(n, si, "concat")?;
                        let p = CatP {
                            x,
                            y: buf(*dst),
                            table: t,
                            outer: i32_of(*outer, si, "concat")?,
                            inner: i32_of(*inner, si, "concat")?,
                            block: i32_of(block, si, "concat")?,
                            col: i32_of(col, si, "concat")?,
                        };
                        if n > 0 {
                            push(
                                Kernel::ConcatPart,
                                grid_for(n, si, "concat")?,
                                BLOCK,
                                Params::Cat(p),
                            );
                        }
                        col += inner;
                    }
                }
            }
        }
        let consts = c.bytes;
        let scratch_offset = frame_bytes;
        let frame_bytes = frame_bytes + align(scratch);
        let step_names = program.step_macs().into_iter().map(|(n, _)| n).collect();
        Ok(LaunchPlan {
            launches,
            frame_bytes,
            scratch_offset,
            scratch_bytes: scratch,
            step_names,
            arena_bytes,
            consts,
            inputs,
            outputs,
            host_bytes,
            host_in_bytes,
        })
    }

    /// Replaces every tagged pointer by `frame_base` / `const_base` plus its offset.
    pub fn relocate(&mut self, frame_base: u64, const_base: u64) {
        let scratch_offset = self.scratch_offset;
        for l in &mut self.launches {
            for p in l.params.pointers_mut() {
                if let Some((region, off)) = Addr::decode(*p) {
                    *p = match region {
                        Region::Frame => frame_base + off as u64,
                        Region::Const => const_base + off as u64,
                        Region::Scratch => frame_base + (scratch_offset + off) as u64,
                    };
                }
            }
        }
    }
}

/// `Σ w` over all taps of each output channel (`conv_dp4a` subtracts `x_zp · Σw` once).
fn weight_sums(w: &[i8], out_c: usize) -> Vec<i32> {
    let taps = w.len() / out_c.max(1);
    w.chunks_exact(taps.max(1))
        .map(|ch| ch.iter().map(|&v| i32::from(v)).sum())
        .collect()
}
