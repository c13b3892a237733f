//! The compiled form of a model: a list of quantized steps over buffers of one planned
//! arena, and how [`Program::run`] executes it.
//!
//! Contract: buffer offsets come from [`plan`]: two buffers whose lifetimes (first write to
//! last read, in step order) overlap never share a byte, so a step's inputs and its output
//! are always disjoint. A step splits its output rows into a fixed number of chunks that
//! depends only on its shape, so the result is the same on any number of lanes.
//!
//! Files: this one holds the run loop; `step` what a step is (`Step` and its operand
//! types); `arena` the plan of the buffers; `chunks` how a step
//! splits its rows into chunks over the lanes (the static partition, the arena pointer the
//! lanes share); `fusion` the passes that rewrite a lowered program (a residual `Add` into
//! its convolution, elementwise steps into one table); `report` the names and
//! multiply-accumulates of the steps (`model info`, `profile`).

use super::isa::Isa;
use super::kernels::{self, BinaryKind};
use crate::engine::{EngineError, Lanes};
use std::ops::Range;

mod arena;
mod chunks;
mod fusion;
mod index;
mod report;
mod step;
pub(crate) use arena::{plan, Buffer, ALIGN};
pub(crate) use chunks::{chunks_for, global_pool_chunks};
use chunks::{
    conv_chunks, elementwise, image_rows, split_rows, split_rows_f32, split_rows_f32_in,
    split_rows_in, window_rows, SendPtr,
};
pub(crate) use fusion::{fuse_input_quantize, fuse_residual_adds, fuse_tables, fuse_transposes};
pub(crate) use index::{GatherSrc, IndexStep, IntArg, IntOp, IntSrc};
pub(crate) use step::{
    ConvImpl, DeconvGeom, FloatBinaryOp, FloatConvPlan, FloatMatMulB, FloatOperand, FloatPool,
    FloatUnaryOp, FloatUnfold, NormOp, Operand, OutKind, PhaseDir, PoolSplit, ReduceOp, Residual,
    Step,
};

/// The compiled model.
#[derive(Debug)]
pub(crate) struct Program {
    pub steps: Vec<Step>,
    pub buffers: Vec<Buffer>,
    pub arena_bytes: usize,
    /// The vector width of the elementwise steps (chosen at load, as the convolutions'
    /// kernel path is).
    pub isa: Isa,
}

impl Program {
    /// Runs every step. `arena` has at least `arena_bytes` bytes and a 64-byte aligned base.
    /// Only the steps in `range` run (all of them for a whole run); `Input`/`Output` steps
    /// outside a whole run are skipped.
    pub fn run_range(
        &self,
        arena: &mut [u8],
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        lanes: &dyn Lanes,
        range: Range<usize>,
    ) -> Result<(), EngineError> {
        if arena.len() < self.arena_bytes {
            return Err(EngineError::Run("arena smaller than planned"));
        }
        let base = SendPtr(arena.as_mut_ptr());
        let bufs = &self.buffers;
        let isa = self.isa;
        // Shared views of a buffer (read by the current step). They capture the `Sync`
        // `SendPtr`, so a step's chunks on other lanes may call them too.
        let view = |i: usize| -> &[i8] {
            let b = &bufs[i];
            // SAFETY: the buffer lies inside the arena (plan() sized it); the step reading it
            // writes only its own `dst`, planned disjoint from every buffer live at the step.
            unsafe { base.elems::<i8>(b.offset, b.bytes) }
        };
        let view_f32 = |i: usize| -> &[f32] {
            let b = &bufs[i];
            // SAFETY: as `view`; f32 buffers are sized in multiples of 4 bytes and start at
            // 64-byte aligned offsets of the 64-byte aligned arena.
            unsafe { base.elems::<f32>(b.offset, b.bytes / 4) }
        };
        let steps = self.steps.get(range).unwrap_or(&[]);
        for step in steps {
            match step {
                Step::Input { index, dst, flip } => {
                    let Some(src) = inputs.get(*index) else {
                        continue;
                    };
                    let d = &bufs[*dst];
                    // SAFETY: `dst` is a planned buffer of `d.bytes` bytes inside the arena,
                    // written only by this step.
                    let out: &mut [u8] = unsafe { base.elems_mut(d.offset, 0, d.bytes) };
                    out.copy_from_slice(src);
                    if *flip {
                        out.iter_mut().for_each(|v| *v ^= 0x80);
                    }
                }
                Step::Output { index, src, kind } => {
                    let Some(out) = outputs.get_mut(*index) else {
                        continue;
                    };
                    let out = &mut **out;
                    match kind {
                        OutKind::Copy => {
                            for (d, s) in out.iter_mut().zip(view(*src)) {
                                *d = *s as u8;
                            }
                        }
                        OutKind::FlipU8 => {
                            for (d, s) in out.iter_mut().zip(view(*src)) {
                                *d = (*s as u8) ^ 0x80;
                            }
                        }
                        OutKind::Dequantize { scale, zp } => {
                            for (d, s) in out.chunks_exact_mut(4).zip(view(*src)) {
                                let v = (i32::from(*s) - zp) as f32 * scale;
                                d.copy_from_slice(&v.to_le_bytes());
                            }
                        }
                    }
                }
                Step::Quantize {
                    src,
                    dst,
                    n,
                    scale,
                    zp,
                    input,
                } => {
                    let x = match input {
                        None => view_f32(*src),
                        Some(i) => {
                            // A run without inputs (`run_step`) leaves the arena as it is.
                            let Some(raw) = inputs.get(*i) else {
                                continue;
                            };
                            // SAFETY: every bit pattern is an `f32`; `align_to` hands out only
                            // the aligned middle of the bytes.
                            let (head, floats, tail) = unsafe { raw.align_to::<f32>() };
                            if head.is_empty() && tail.is_empty() {
                                floats
                            } else {
                                // Not 4-byte aligned: copied into `src` first (its buffer
                                // is still planned), as the fused-away input step did.
                                let d = &bufs[*src];
                                // SAFETY: `src` is a planned buffer of `d.bytes` bytes inside
                                // the arena, written only by this step now.
                                let buf: &mut [u8] =
                                    unsafe { base.elems_mut(d.offset, 0, d.bytes) };
                                buf.copy_from_slice(raw);
                                view_f32(*src)
                            }
                        }
                    };
                    split_rows(lanes, base, &bufs[*dst], *n, 1, 4, &|r, out| {
                        kernels::quantize(isa, &x[r], *scale, *zp, out);
                    });
                }
                Step::ConvFloat {
                    imp,
                    batch,
                    in_h,
                    in_w,
                    out_h,
                    row_len,
                    scales,
                    bias,
                    src,
                    dst,
                } => {
                    let x = view(*src);
                    let img_in = x.len() / batch.max(&1);
                    let failed = std::sync::atomic::AtomicBool::new(false);
                    let per_row = match imp {
                        ConvImpl::Dense(c) => c.macs(*in_h, *in_w) as usize / out_h.max(&1),
                        ConvImpl::General(g) => g.macs(1) as usize / out_h.max(&1),
                    };
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        batch * out_h,
                        row_len * 4,
                        per_row,
                        &|r, out| {
                            let Ok(acc) = bytemuck::try_cast_slice_mut::<i8, i32>(out) else {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                return;
                            };
                            match imp {
                                ConvImpl::Dense(conv) => {
                                    for (b, oy, o) in image_rows(r.clone(), *out_h) {
                                        let img = &x[b * img_in..(b + 1) * img_in];
                                        let rows_out = &mut acc[o.start * row_len..o.end * row_len];
                                        if conv
                                            .forward_rows_acc(img, *in_h, *in_w, rows_out, oy)
                                            .is_err()
                                        {
                                            failed
                                                .store(true, std::sync::atomic::Ordering::Relaxed);
                                        }
                                    }
                                }
                                ConvImpl::General(g) => g.run_acc(isa, x, acc, r.clone()),
                            }
                            kernels::float::acc_to_f32(isa, acc, scales, bias);
                        },
                    );
                    if failed.into_inner() {
                        return Err(EngineError::Run("convolution rejected its buffers"));
                    }
                }
                Step::Dequantize {
                    src,
                    dst,
                    n,
                    scale,
                    zp,
                } => {
                    let x = view(*src);
                    split_rows_f32(lanes, base, &bufs[*dst], elementwise(*n), &|r, y| {
                        kernels::float::dequantize(isa, &x[r], *scale, *zp, y);
                    })?;
                }
                Step::Index(s) => s.run(base, bufs)?,
                Step::FloatBinary { op, a, b, n, dst } => {
                    let (xa, xb) = (view_f32(*a), view_f32(*b));
                    split_rows_f32(lanes, base, &bufs[*dst], elementwise(*n), &|r, y| {
                        kernels::float::binary(isa, *op, &xa[r.clone()], &xb[r], y);
                    })?;
                }
                Step::FloatBinaryConst {
                    op,
                    x,
                    konst,
                    x_is_a,
                    n,
                    dst,
                } => {
                    let x = view_f32(*x);
                    let (op, x_is_a, period) = (*op, *x_is_a, konst.len().max(1));
                    if period == 1 {
                        let k = konst.first().copied().unwrap_or(0.0);
                        split_rows_f32(lanes, base, &bufs[*dst], elementwise(*n), &|r, y| {
                            kernels::float::binary_scalar(isa, op, &x[r], k, x_is_a, y);
                        })?;
                    } else {
                        let rows = (n / period, period, period);
                        split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                            for (row, y) in r.zip(y.chunks_exact_mut(period)) {
                                let u = &x[row * period..(row + 1) * period];
                                let (a, b) = if x_is_a {
                                    (u, &konst[..])
                                } else {
                                    (&konst[..], u)
                                };
                                kernels::float::binary(isa, op, a, b, y);
                            }
                        })?;
                    }
                }
                Step::FloatBinaryBroadcast {
                    op,
                    full,
                    part,
                    full_is_a,
                    outer,
                    times,
                    inner,
                    dst,
                } => {
                    let (xf, xp) = (view_f32(*full), view_f32(*part));
                    let (op, full_is_a) = (*op, *full_is_a);
                    let (times, inner) = ((*times).max(1), (*inner).max(1));
                    if inner == 1 {
                        // One value of `part` per run of `times` elements of `full`.
                        let rows = (*outer, times, times);
                        split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                            for (o, y) in r.zip(y.chunks_exact_mut(times)) {
                                let u = &xf[o * times..(o + 1) * times];
                                kernels::float::binary_scalar(isa, op, u, xp[o], full_is_a, y);
                            }
                        })?;
                    } else {
                        let rows = (outer * times, inner, inner);
                        split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                            for (row, y) in r.zip(y.chunks_exact_mut(inner)) {
                                let o = row / times;
                                let u = &xf[row * inner..(row + 1) * inner];
                                let v = &xp[o * inner..(o + 1) * inner];
                                let (a, b) = if full_is_a { (u, v) } else { (v, u) };
                                kernels::float::binary(isa, op, a, b, y);
                            }
                        })?;
                    }
                }
                Step::FloatRepeat {
                    src,
                    outer,
                    times,
                    inner,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let (times, inner) = ((*times).max(1), (*inner).max(1));
                    if inner == 1 {
                        // One value filling each run of `times`.
                        let rows = (*outer, times, times);
                        split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                            for (o, y) in r.zip(y.chunks_exact_mut(times)) {
                                y.fill(x[o]);
                            }
                        })?;
                    } else {
                        let rows = (outer * times, inner, inner);
                        split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                            for (row, y) in r.zip(y.chunks_exact_mut(inner)) {
                                let o = row / times;
                                y.copy_from_slice(&x[o * inner..(o + 1) * inner]);
                            }
                        })?;
                    }
                }
                Step::FloatReduce {
                    op,
                    blocks,
                    len,
                    inner,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let (len, inner) = (*len, (*inner).max(1));
                    let rows = (*blocks, inner, len * inner);
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                        kernels::float::reduce(isa, *op, len, inner, x, r.start, y);
                    })?;
                }
                Step::FloatPool {
                    kind,
                    win,
                    c,
                    batch,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let rows = window_rows(win, *c, *batch);
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| match *kind {
                        FloatPool::Max => kernels::max_pool_f32(isa, win, *c, x, y, r),
                        FloatPool::Avg { count_include_pad } => {
                            kernels::avg_pool_f32(isa, win, *c, count_include_pad, x, y, r)
                        }
                    })?;
                }
                Step::FloatGlobalAvgPool {
                    c,
                    hw,
                    batch,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let (c, hw) = (*c, *hw);
                    split_rows_f32(lanes, base, &bufs[*dst], elementwise(batch * c), &|r, y| {
                        kernels::float::global_avg_pool(isa, c, hw, x, r.start, y);
                    })?;
                }
                Step::FloatResize {
                    in_h,
                    in_w,
                    c,
                    batch,
                    ys,
                    xs,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let row_len = xs.len() * c;
                    let rows = (batch * ys.len(), row_len, row_len * 4);
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                        kernels::float::resize_linear(isa, *in_h, *in_w, *c, ys, xs, x, y, r)
                    })?;
                }
                Step::FloatGridSample {
                    dims,
                    batch,
                    grid,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let grid = match grid {
                        FloatOperand::Buf(b) => view_f32(*b),
                        FloatOperand::Const(v) => v.as_slice(),
                    };
                    let rows = (
                        batch * dims.out_h,
                        dims.out_w * dims.c,
                        dims.out_w * dims.c * 4,
                    );
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                        kernels::float::grid_sample_rows(dims, x, grid, y, r);
                    })?;
                }
                Step::FloatUnary { op, src, dst, n } => {
                    let x = view_f32(*src);
                    split_rows_f32(lanes, base, &bufs[*dst], elementwise(*n), &|r, y| {
                        kernels::float::unary(isa, *op, &x[r], y);
                    })?;
                }
                Step::PackB {
                    k,
                    n,
                    images,
                    src,
                    dst,
                } => {
                    let (k, n, b) = (*k, *n, view(*src));
                    let bytes = kernels::packed_matmul_bytes(k, n);
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        *images,
                        bytes,
                        k * n,
                        &|r, out| {
                            for (i, o) in r.zip(out.chunks_exact_mut(bytes.max(1))) {
                                kernels::pack_matmul_b(k, n, &b[i * k * n..(i + 1) * k * n], o);
                            }
                        },
                    );
                }
                Step::FloatPackB {
                    k,
                    n,
                    images,
                    src,
                    dst,
                } => {
                    let (k, n) = (*k, *n);
                    let b = view_f32(*src);
                    let len = kernels::float::packed_matmul_len(k, n);
                    split_rows_f32(
                        lanes,
                        base,
                        &bufs[*dst],
                        (*images, len, k * n),
                        &|r, out| {
                            for (i, o) in r.zip(out.chunks_exact_mut(len.max(1))) {
                                kernels::float::pack_matmul_b(
                                    k,
                                    n,
                                    &b[i * k * n..(i + 1) * k * n],
                                    o,
                                );
                            }
                        },
                    )?;
                }
                Step::FloatConv {
                    plan,
                    b,
                    bias,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let scratch = &bufs[plan.scratch];
                    let (k, n, band) = (plan.unfold.k(), plan.n, plan.band);
                    let epilogue = kernels::float::Epilogue { alpha: 1.0, bias };
                    let pixels = plan.unfold.pixels();
                    let stray = std::sync::atomic::AtomicBool::new(false);
                    let rows = (pixels, n);
                    split_rows_f32_in(lanes, base, &bufs[*dst], rows, plan.chunks, &|r, out| {
                        // This chunk's own band of the scratch: chunk `i` is the call whose
                        // rows are `chunk_range(pixels, chunks, i)`.
                        let Some(i) = (0..plan.chunks).find(|&i| {
                            redline_runtime::parallel::chunk_range(pixels, plan.chunks, i) == r
                        }) else {
                            stray.store(true, std::sync::atomic::Ordering::Relaxed);
                            return;
                        };
                        debug_assert!(plan.scratch_bytes() <= scratch.bytes);
                        // SAFETY: floats `i·band·k .. (i+1)·band·k` of `scratch` lie inside it
                        // (`scratch_bytes() <= bytes`, planned at load) at a 64-byte aligned
                        // offset; `for_each_chunk` runs each chunk once, so only this call
                        // holds chunk `i`'s band, and the planner keeps `scratch` (made for
                        // this step alone) apart from `src` and `dst`.
                        let a: &mut [f32] =
                            unsafe { base.elems_mut(scratch.offset, i * band * k, band * k) };
                        let mut p = r.start;
                        while p < r.end {
                            let len = band.min(r.end - p);
                            let a = &mut a[..len * k];
                            plan.unfold.run(x, a, p..p + len);
                            let dims = kernels::float::FloatMatMulDims {
                                m: len,
                                ..plan.dims()
                            };
                            let y = &mut out[(p - r.start) * n..(p - r.start + len) * n];
                            kernels::float::matmul_rows(isa, dims, a, b, epilogue, 0, y);
                            p += len;
                        }
                    })?;
                    if stray.into_inner() {
                        return Err(EngineError::Run(
                            "a float convolution's chunk is not one of its planned chunks",
                        ));
                    }
                }
                Step::FloatMatMul {
                    dims,
                    a,
                    b,
                    alpha,
                    bias,
                    dst,
                } => {
                    let a = view_f32(*a);
                    let b = match b {
                        FloatMatMulB::Packed(w) => &w[..],
                        FloatMatMulB::Buffer(p) => view_f32(*p),
                    };
                    let epilogue = kernels::float::Epilogue {
                        alpha: *alpha,
                        bias,
                    };
                    let rows = (dims.batch * dims.m, dims.n, dims.n * dims.k);
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, out| {
                        kernels::float::matmul_rows(isa, *dims, a, b, epilogue, r.start, out);
                    })?;
                }
                Step::FloatGroupedConv {
                    win,
                    dims,
                    batch,
                    w,
                    bias,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let rows = (batch * win.out_h, win.out_w * dims.oc, dims.row_macs(win));
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                        kernels::float::grouped_conv_rows(isa, win, *dims, x, w, bias, y, r);
                    })?;
                }
                Step::MatMulDyn {
                    dims,
                    a,
                    b,
                    packed,
                    zps,
                    how,
                    dst,
                } => {
                    let (a, b) = (view(*a), view(*b));
                    let packed = packed.map(view);
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        dims.batch * dims.m,
                        dims.n * how.elem_bytes(),
                        dims.n * dims.k,
                        &|r, out| match packed {
                            Some(p) => kernels::matmul_rows_packed(
                                isa,
                                *dims,
                                (a, b, p),
                                *zps,
                                *how,
                                r.start,
                                out,
                            ),
                            None => {
                                kernels::matmul_rows(isa, *dims, a, b, *zps, *how, r.start, out)
                            }
                        },
                    );
                }
                Step::FloatNorm {
                    op,
                    blocks,
                    len,
                    inner,
                    src,
                    dst,
                } => {
                    let x = view_f32(*src);
                    let (len, inner) = (*len, *inner);
                    let rows = (*blocks, len * inner, len * inner * 8);
                    split_rows_f32(lanes, base, &bufs[*dst], rows, &|r, y| {
                        kernels::float::normalize(isa, op, len, inner, x, r.start, y);
                    })?;
                }
                Step::Conv {
                    imp,
                    batch,
                    in_h,
                    in_w,
                    out_h,
                    row_len,
                    src,
                    dst,
                    clamp,
                    residual,
                } => {
                    let x = view(*src);
                    let residual_other = residual.as_ref().map(|r| view(r.other));
                    let per_row = match imp {
                        ConvImpl::Dense(c) => c.macs(*in_h, *in_w) as usize / out_h.max(&1),
                        ConvImpl::General(_) => row_len * 64,
                    };
                    let img_in = x.len() / batch.max(&1);
                    let failed = std::sync::atomic::AtomicBool::new(false);
                    let d = &bufs[*dst];
                    let weight_bytes = match imp {
                        ConvImpl::Dense(c) => c.weights.len(),
                        ConvImpl::General(g) => g.weights.len(),
                    };
                    // A pointwise convolution of too few rows to share (a transformer's
                    // Linear layers: one row of 197 or 3136 tokens) splits over pixels, not
                    // rows: each chunk of pixels is convolved as a one-row image of its own
                    // (pixels are independent, so the same bytes). Images of 8 rows or more
                    // split by rows, as every other convolution.
                    let pointwise = match imp {
                        ConvImpl::Dense(c) => {
                            c.k == 1 && c.stride == 1 && c.pad == 0 && batch * out_h < 8
                        }
                        ConvImpl::General(_) => false,
                    };
                    let (units, unit_len, per_unit) = if pointwise {
                        let pixels = batch * in_h * in_w;
                        (pixels, row_len / in_w.max(&1), per_row / in_w.max(&1))
                    } else {
                        (batch * out_h, *row_len, per_row)
                    };
                    let chunks = conv_chunks(units, per_unit, weight_bytes, lanes.width());
                    split_rows_in(lanes, base, d, units, unit_len, chunks, &|r, out| {
                        match imp {
                            ConvImpl::Dense(c) if pointwise => {
                                let px = &x[r.start * c.in_c..r.end * c.in_c];
                                if c.forward_rows_into(px, 1, r.len(), out, 0..1).is_err() {
                                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                }
                            }
                            ConvImpl::Dense(c) => {
                                for (b, oy, o) in image_rows(r.clone(), *out_h) {
                                    let img = &x[b * img_in..(b + 1) * img_in];
                                    let rows_out = &mut out[o.start * row_len..o.end * row_len];
                                    if c.forward_rows_into(img, *in_h, *in_w, rows_out, oy)
                                        .is_err()
                                    {
                                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                    }
                                }
                            }
                            ConvImpl::General(g) => {
                                if g.run(isa, x, out, r.clone()).is_err() {
                                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                }
                            }
                        }
                        if let Some((lo, hi)) = clamp {
                            kernels::clamp(out, *lo, *hi);
                        }
                        if let (Some(res), Some(other)) = (residual, residual_other) {
                            let other = &other[r.start * unit_len..r.end * unit_len];
                            res.op.add_in_place(isa, res.conv_is_a, out, other);
                        }
                    });
                    if failed.into_inner() {
                        return Err(EngineError::Run("convolution rejected its buffers"));
                    }
                }
                Step::Phases {
                    phases,
                    dir,
                    c,
                    batch,
                    src,
                    dst,
                } => {
                    let x = view(*src);
                    let (rows, row_len) = match dir {
                        PhaseDir::Split { .. } => {
                            (batch * phases.count() * phases.ph(), phases.pw() * c)
                        }
                        PhaseDir::Merge => (batch * phases.h, phases.w * c),
                    };
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        rows,
                        row_len,
                        row_len,
                        &|r, out| match dir {
                            PhaseDir::Split { fill } => phases.split(*c, *fill, x, out, r),
                            PhaseDir::Merge => phases.merge(*c, x, out, r),
                        },
                    );
                }
                Step::Unfold {
                    unfold,
                    c,
                    batch,
                    fill,
                    src,
                    dst,
                } => {
                    let x = view(*src);
                    let rows = batch * unfold.win.out_h;
                    let row_len = unfold.win.out_w * unfold.channels(*c);
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        rows,
                        row_len,
                        row_len,
                        &|r, out| unfold.run(*c, *fill, x, out, r),
                    );
                }
                Step::MaxPool {
                    win,
                    c,
                    batch,
                    src,
                    dst,
                } => {
                    let x = view(*src);
                    let (rows, row_len, cost) = window_rows(win, *c, *batch);
                    split_rows(lanes, base, &bufs[*dst], rows, row_len, cost, &|r, out| {
                        kernels::max_pool(isa, win, *c, x, out, r);
                    });
                }
                Step::AvgPool {
                    win,
                    c,
                    p,
                    src,
                    dst,
                    split: Some(split),
                    ..
                } => {
                    // Each chunk sums its image rows into its own `c` partial sums; then
                    // this lane adds them up and requantizes ([`PoolSplit`]).
                    let x = view(*src);
                    let row = win.in_w * c;
                    let sums = &bufs[split.partials];
                    let failed = std::sync::atomic::AtomicBool::new(false);
                    split_rows_in(
                        lanes,
                        base,
                        sums,
                        split.chunks,
                        c * 4,
                        split.chunks,
                        &|r, out| {
                            let Ok(out) = bytemuck::try_cast_slice_mut::<i8, i32>(out) else {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                return;
                            };
                            for (i, part) in r.zip(out.chunks_exact_mut(*c)) {
                                let rows = redline_runtime::parallel::chunk_range(
                                    win.in_h,
                                    split.chunks,
                                    i,
                                );
                                kernels::global_pool_sums(
                                    isa,
                                    *c,
                                    &x[rows.start * row..rows.end * row],
                                    part,
                                );
                            }
                        },
                    );
                    let partials = &view(split.partials)[..split.chunks * c * 4];
                    let (false, Ok(partials)) = (
                        failed.into_inner(),
                        bytemuck::try_cast_slice::<i8, i32>(partials),
                    ) else {
                        // Never: planned buffers start at 64-byte aligned offsets.
                        return Err(EngineError::Run(
                            "a pool's partial sums are not 4-byte aligned",
                        ));
                    };
                    let d = &bufs[*dst];
                    // SAFETY: `dst` is a planned buffer of `d.bytes >= c` bytes (one image)
                    // inside the arena, written only by this step and disjoint from
                    // `partials` and `src`, which the planner keeps apart (all live here).
                    let out: &mut [i8] = unsafe { base.elems_mut(d.offset, 0, *c) };
                    kernels::global_pool_finish(win, *c, p, partials, out);
                }
                Step::AvgPool {
                    win,
                    c,
                    batch,
                    p,
                    src,
                    dst,
                    split: None,
                } => {
                    let x = view(*src);
                    let (rows, row_len, cost) = window_rows(win, *c, *batch);
                    split_rows(lanes, base, &bufs[*dst], rows, row_len, cost, &|r, out| {
                        kernels::avg_pool(isa, win, *c, p, x, out, r);
                    });
                }
                Step::Lut { table, n, src, dst } => {
                    let x = view(*src);
                    split_rows(lanes, base, &bufs[*dst], *n, 1, 1, &|r, out| {
                        kernels::lut(isa, table, &x[r], out);
                    });
                }
                Step::Binary { op, a, b, n, dst } => {
                    let ra = match a {
                        Operand::Buf(i) => view(*i),
                        Operand::Const(v) => v.as_slice(),
                    };
                    let rb = match b {
                        Operand::Buf(i) => view(*i),
                        Operand::Const(v) => v.as_slice(),
                    };
                    split_rows(lanes, base, &bufs[*dst], *n, 1, 2, &|r, out| {
                        op.run(isa, ra, rb, out, r);
                    });
                }
                Step::DeconvMerge {
                    geom: m,
                    phases,
                    dst,
                } => {
                    // The phase images, without allocating (at most DECONV_PHASES_MAX).
                    let mut srcs: [&[i8]; crate::onnx::lower::DECONV_PHASES_MAX] =
                        [&[]; crate::onnx::lower::DECONV_PHASES_MAX];
                    for (s, &p) in srcs.iter_mut().zip(phases) {
                        *s = view(p);
                    }
                    let row_len = m.out_w * m.c;
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        m.batch * m.out_h,
                        row_len,
                        row_len,
                        &|r, out| {
                            for (k, row) in r.zip(out.chunks_exact_mut(row_len)) {
                                let (b, oy) = (k / m.out_h, k % m.out_h);
                                let (qy, ry) = ((oy + m.pt) / m.sh, (oy + m.pt) % m.sh);
                                for (ox, px) in row.chunks_exact_mut(m.c).enumerate() {
                                    let (qx, rx) = ((ox + m.pl) / m.sw, (ox + m.pl) % m.sw);
                                    let at = ((b * m.ph + qy) * m.pw + qx) * m.c;
                                    px.copy_from_slice(&srcs[ry * m.sw + rx][at..at + m.c]);
                                }
                            }
                        },
                    );
                }
                Step::Transpose {
                    out_shape,
                    strides,
                    offset,
                    src,
                    dst,
                } => {
                    let x = &view(*src)[*offset..];
                    let n: usize = out_shape.iter().product();
                    // A 2-D transpose of whole tiles in chunks of whole output rows; any
                    // other copy in chunks of whole elements (a float tensor's split
                    // between lanes at 4-byte boundaries only).
                    let (rows, row, chunks) = kernels::tile_rows(out_shape, strides)
                        .unwrap_or_else(|| {
                            let e = if kernels::copies_words(out_shape, strides) {
                                4
                            } else {
                                1
                            };
                            (n / e, e, chunks_for(n / e, 2 * e))
                        });
                    split_rows_in(lanes, base, &bufs[*dst], rows, row, chunks, &|r, out| {
                        kernels::transpose(
                            isa,
                            out_shape,
                            strides,
                            x,
                            out,
                            r.start * row..r.end * row,
                        );
                    });
                }
                Step::Pad { geom, src, dst } => {
                    let x = view(*src);
                    let (rows, row_bytes) = (geom.rows(), geom.row_bytes());
                    split_rows(
                        lanes,
                        base,
                        &bufs[*dst],
                        rows,
                        row_bytes,
                        row_bytes,
                        &|r, out| {
                            kernels::pad(geom, x, out, r);
                        },
                    );
                }
                Step::Resize {
                    in_h,
                    in_w,
                    c,
                    batch,
                    ys,
                    xs,
                    mode,
                    src,
                    dst,
                } => {
                    let x = view(*src);
                    let row_len = xs.len() * c;
                    let d = &bufs[*dst];
                    split_rows(
                        lanes,
                        base,
                        d,
                        batch * ys.len(),
                        row_len,
                        row_len * 4,
                        &|r, out| {
                            kernels::resize(isa, *in_h, *in_w, *c, ys, xs, *mode, x, out, r);
                        },
                    );
                }
                Step::Concat { outer, parts, dst } => {
                    // Output rows (one per `outer` index: a pixel of an NHWC channel concat)
                    // over the lanes, each row part by part: every byte written once, by
                    // the same copy or table whatever the split.
                    let block: usize = parts.iter().map(|p| p.1).sum();
                    if block == 0 {
                        continue;
                    }
                    split_rows(lanes, base, &bufs[*dst], *outer, block, block, &|r, out| {
                        let mut col = 0;
                        for (src, inner, table) in parts.iter().filter(|p| p.1 > 0) {
                            let x = match src {
                                Operand::Buf(i) => view(*i),
                                Operand::Const(v) => v.as_slice(),
                            };
                            let x = &x[r.start * inner..r.end * inner];
                            match table {
                                Some(tb) => {
                                    kernels::lut_rows(isa, tb, x, &mut out[col..], *inner, block)
                                }
                                None => {
                                    let rows =
                                        out.chunks_exact_mut(block).zip(x.chunks_exact(*inner));
                                    for (t, s) in rows {
                                        kernels::copy_run(&mut t[col..col + inner], s);
                                    }
                                }
                            }
                            col += inner;
                        }
                    });
                }
            }
        }
        Ok(())
    }
}
