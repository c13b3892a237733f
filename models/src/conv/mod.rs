//! The INT8 2-D convolution layer (ONNX `QLinearConv` semantics), [`Conv2d`], and the
//! choice of the kernel that runs it.
//!
//! # Contract
//!
//! - Tensors are `i8`, NHWC (batch 1), contiguous: element `(y, x, c)` of an `h × w × c`
//!   tensor is at `(y * w + x) * c + c`.
//! - Weights are `i8`, symmetric per output channel (zero point 0, scale `w_scales[oc]`),
//!   laid out `[out_c][k][k][in_c]`, so that for one output channel and one kernel row the
//!   taps of consecutive kernel columns are contiguous and line up with consecutive input
//!   pixels: the inner loop is one contiguous `i8 × i8 → i32` dot product (the compiler
//!   auto-vectorises it; no `unsafe`, no intrinsics; see `scalar`). Pixels whose taps are all inside the
//!   image compute the same exact sum as `Σ x·w − x_zp·Σw` (precomputed `Σw`, products in
//!   `i16`); border pixels skip the padded taps.
//! - Bias is `i32` per output channel with scale `in_scale * w_scales[oc]`.
//! - `acc = bias[oc] + Σ (x - x_zp) * w` in `i32`, exactly; padded positions hold `x_zp` and so
//!   contribute 0. Then `y = requantize(acc, M[oc], y_zp, relu)` with `M[oc] =
//!   requant_multiplier(x_scale, w_scales[oc], y_scale)` computed once at construction (see
//!   [`crate::quant`]: round half to even, saturate, fused ReLU clamps at `y_zp`).
//! - [`Conv2d::new`] proves the `i32` accumulator cannot overflow for any input
//!   (`k·k·in_c · 2·128·128 + max|bias| ≤ i32::MAX`, covering every partial sum) and rejects layers where it could.
//! - Output row `oy` depends only on the input and the layer, never on which other rows are
//!   computed in the same call: any static split of `0..out_h` over [`Conv2d::forward_rows`]
//!   calls (in any order, on any thread) gives a bit-identical tensor.
//! - **Kernel paths** ([`KernelPath`]): the scalar kernel (`scalar`), the x86-64 AVX2
//!   (`avx2`) and AVX-512 VNNI (`vnni`) kernels and the aarch64 NEON dot-product (`neon`)
//!   and int8 matrix-multiply (`i8mm`) kernels, bit-exact with it for every input (the
//!   exact `i64` reference of `reference` is the oracle for all of them, and one test
//!   suite, `kernel_tests!`, runs on every path; the aarch64 ones under qemu,
//!   `tools/aarch64/run.sh`). The path is chosen once in [`Conv2d::new`]:
//!   `REDLINE_KERNEL=scalar|avx2|vnni|neon|i8mm` if set (an unknown or unsupported value is
//!   a construction error), else the fastest one the CPU supports
//!   (`is_x86_feature_detected!`, `is_aarch64_feature_detected!`);
//!   [`Conv2d::set_path`] forces one and errors if the CPU
//!   lacks it. The weights are repacked for the SIMD paths at construction; after changing
//!   a public field, rebuild the layer. A SIMD path falls back to the scalar kernel only for
//!   layers whose kernel window does not fit its stage buffer (same results either way).
//!
//! # Cost
//!
//! `forward*` cost `out_h · out_w · out_c · k · k · in_c` multiply-adds ([`Conv2d::macs`])
//! plus one `f32` multiply per output; the SIMD paths use [`STAGE_BYTES`] of
//! stack per call. They never allocate, lock, log or panic: every size
//! is checked first and a mismatch is returned as a [`ModelError`].
//!
//! # Never
//!
//! The kernels never read outside the given input, never write outside the requested output
//! rows (and channel slot), and never depend on time, threads or hash order.
//!
//! # Layout
//!
//! - this file: [`ConvShape`], [`ChannelSlot`], [`Conv2d`] (construction, size checks,
//!   the `forward*` entry points) and the hand-off to the chosen kernel;
//! - `error`: [`ModelError`], the crate's error type, and the buffer-length checks;
//! - `dispatch`: [`KernelPath`] (`REDLINE_KERNEL`, run-time CPU detection) and the entry
//!   to the SIMD kernels;
//! - `scalar`: the portable kernel; `avx2`, `avx2_u7`, `vnni`: the x86-64 SIMD kernels;
//!   `neon`: the aarch64 ones (`sdot` and `smmla`);
//! - `packing`: the weights repacked for the SIMD kernels; `staging`: how a SIMD call
//!   stages its input rows ([`STAGE_BYTES`] of stack);
//! - `reference` (tests only): the exact `i64` and the float references;
//! - `kernel_tests` (tests only): the property suite every kernel path runs.
//!
//! The requantization (`f32` multiply, clamp, round half to even) is not a module of its
//! own: the scalar kernel calls [`crate::quant::requantize`], and each SIMD kernel inlines
//! the same four steps on its own register width inside its output loop.

use crate::quant::{requant_multiplier, QParams};
use std::ops::Range;

mod dispatch;
mod error;
mod packing;
mod staging;

#[cfg(test)]
#[macro_use]
mod kernel_tests;
#[cfg(test)]
pub(crate) mod reference;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_u7;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod vnni;

pub use dispatch::KernelPath;
use dispatch::{run_simd_rows, Geom, KernelOut};
pub use error::ModelError;
pub(crate) use error::{checked_len, exact_len};
use packing::Packed;
pub use staging::STAGE_BYTES;
#[cfg(target_arch = "x86_64")]
pub(crate) use vnni::{store_packed64, VnniOut};

/// The shape of a convolution: channels, square kernel size, stride and zero padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// Kernel size (square), e.g. 1 or 3.
    pub k: usize,
    /// Stride in both directions, e.g. 1 or 2.
    pub stride: usize,
    /// Zero padding (in the quantized domain: `x_zp`) on each side; must be `< k`.
    pub pad: usize,
}

/// Where a convolution writes its channels inside a wider output pixel: output channel
/// `oc` goes to `pixel * pixel_stride + channel_offset + oc`. Lets two layers write
/// side-by-side channel groups of one tensor (a fused `Concat` on the channel axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelSlot {
    /// Channels per output pixel in the destination tensor (`>= channel_offset + out_c`).
    pub pixel_stride: usize,
    /// First destination channel of this layer's outputs.
    pub channel_offset: usize,
}

impl ChannelSlot {
    /// `Ok` when `channels` channels from `channel_offset` fit in `pixel_stride`; else the
    /// [`ModelError::BufferSize`] that says so (`what` names the slot).
    fn check_fits(&self, channels: usize, what: &'static str) -> Result<(), ModelError> {
        match self.channel_offset.checked_add(channels) {
            Some(end) if end <= self.pixel_stride => Ok(()),
            _ => Err(ModelError::BufferSize {
                what,
                expected: self.channel_offset.saturating_add(channels),
                got: self.pixel_stride,
            }),
        }
    }
}

/// Accumulator growth bound per tap: `|(x - x_zp) * w| <= 255 * 128`, and the interior
/// path's partial sums `-x_zp Σw + Σ x w` grow by at most `128 * 128 + 128 * 128` per tap.
pub(crate) const MAX_TERM: i64 = 2 * 128 * 128;

/// Whether `taps` terms of at most [`MAX_TERM`] each plus the largest `|bias|` stay within
/// `i32`, the bound every integer convolution here proves before it runs (its sums are
/// exact only below it); `Err(max |bias|)` when they may not.
pub(crate) fn accumulator_fits(taps: usize, bias: &[i32]) -> Result<(), i64> {
    let max_bias = bias.iter().map(|b| i64::from(*b).abs()).max().unwrap_or(0);
    let worst = i64::try_from(taps)
        .ok()
        .and_then(|t| t.checked_mul(MAX_TERM))
        .and_then(|t| t.checked_add(max_bias));
    match worst {
        Some(w) if w <= i64::from(i32::MAX) => Ok(()),
        _ => Err(max_bias),
    }
}

/// One quantized convolution layer (ONNX `QLinearConv`, optionally with a fused ReLU).
///
/// The fields are public for inspection and export; after changing any of them, build a new
/// layer with [`Conv2d::new`] (the precomputed multipliers would be stale otherwise; changed
/// array lengths are detected and reported as [`ModelError::LayerModified`]).
#[derive(Clone, Debug)]
pub struct Conv2d {
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// Kernel size (square).
    pub k: usize,
    /// Stride.
    pub stride: usize,
    /// Padding on each side.
    pub pad: usize,
    /// `i8` weights, `[out_c][k][k][in_c]`, symmetric per output channel.
    pub weights: Vec<i8>,
    /// Weight scale per output channel.
    pub w_scales: Vec<f32>,
    /// `i32` bias per output channel, scale `in_q.scale * w_scales[oc]`.
    pub bias: Vec<i32>,
    /// Input quantization.
    pub in_q: QParams,
    /// Output quantization.
    pub out_q: QParams,
    /// Fused ReLU (clamp below at `out_q.zero_point`).
    pub relu: bool,
    /// `requant_multiplier(in_q.scale, w_scales[oc], out_q.scale)` per output channel.
    multipliers: Vec<f32>,
    /// `Σ w` over all taps of each output channel: interior pixels use
    /// `Σ (x - x_zp) w = Σ x w - x_zp Σ w`, whose `i8 × i8` products fit in `i16`.
    w_sums: Vec<i32>,
    /// The kernel `forward*` runs (chosen at construction, see [`Conv2d::set_path`]).
    path: KernelPath,
    /// Weights repacked for the SIMD paths this CPU supports.
    packed: Packed,
}

fn invalid(reason: String) -> ModelError {
    ModelError::InvalidLayer { reason }
}

impl Conv2d {
    /// Builds and validates a layer: positive channel counts, `k >= 1`, `stride >= 1`,
    /// `pad < k`, `weights.len() == out_c * k * k * in_c`, one scale and one bias per output
    /// channel, finite positive scales and multipliers, and an `i32` accumulator that cannot
    /// overflow. Precomputes the requantization multipliers.
    pub fn new(
        shape: ConvShape,
        weights: Vec<i8>,
        w_scales: Vec<f32>,
        bias: Vec<i32>,
        in_q: QParams,
        out_q: QParams,
        relu: bool,
    ) -> Result<Conv2d, ModelError> {
        let ConvShape {
            in_c,
            out_c,
            k,
            stride,
            pad,
        } = shape;
        if in_c == 0 || out_c == 0 {
            return Err(invalid(format!(
                "in_c = {in_c}, out_c = {out_c}: both must be at least 1"
            )));
        }
        if k == 0 || stride == 0 {
            return Err(invalid(format!(
                "k = {k}, stride = {stride}: both must be at least 1"
            )));
        }
        if pad >= k {
            return Err(invalid(format!(
                "pad = {pad} with k = {k}: padding must be smaller than the kernel"
            )));
        }
        let taps = k
            .checked_mul(k)
            .and_then(|v| v.checked_mul(in_c))
            .ok_or_else(|| invalid(format!("k*k*in_c overflows (k = {k}, in_c = {in_c})")))?;
        let expected_w = taps
            .checked_mul(out_c)
            .ok_or_else(|| invalid(format!("weight count overflows (out_c = {out_c})")))?;
        if weights.len() != expected_w {
            return Err(invalid(format!(
                "{} weights given, expected out_c*k*k*in_c = {out_c}*{k}*{k}*{in_c} = \
                 {expected_w} (layout [out_c][k][k][in_c])",
                weights.len()
            )));
        }
        if w_scales.len() != out_c || bias.len() != out_c {
            return Err(invalid(format!(
                "{} weight scales and {} biases given, expected one of each per output \
                 channel ({out_c})",
                w_scales.len(),
                bias.len()
            )));
        }
        if !in_q.is_valid() || !out_q.is_valid() {
            return Err(invalid(format!(
                "input scale {} / output scale {}: scales must be finite and > 0",
                in_q.scale, out_q.scale
            )));
        }
        if let Some((c, s)) = w_scales
            .iter()
            .enumerate()
            .find(|(_, s)| !(s.is_finite() && **s > 0.0))
        {
            return Err(invalid(format!(
                "weight scale of channel {c} is {s}: scales must be finite and > 0"
            )));
        }
        if let Err(max_bias) = accumulator_fits(taps, &bias) {
            return Err(invalid(format!(
                "the i32 accumulator could overflow: {taps} taps * {MAX_TERM} + max|bias| \
                 {max_bias} > {}; use fewer input channels per layer or a smaller bias (a \
                 quantized bias near the int32 limit means a calibration that gave this \
                 layer's input a tiny scale), or run the model on another engine \
                 (`--engine onnxruntime`)",
                i32::MAX
            )));
        }
        let w_sums = weights
            .chunks_exact(taps)
            .map(|ch| ch.iter().map(|&w| i32::from(w)).sum())
            .collect();
        let mut conv = Conv2d {
            in_c,
            out_c,
            k,
            stride,
            pad,
            weights,
            w_scales,
            bias,
            in_q,
            out_q,
            relu,
            multipliers: Vec::new(),
            w_sums,
            path: KernelPath::Scalar,
            packed: Packed::default(),
        };
        conv.path = KernelPath::from_env()?;
        conv.packed = Packed::new(&conv.weights, in_c, out_c, k);
        conv.set_out_q(out_q)?;
        Ok(conv)
    }

    /// The layer's shape.
    pub fn shape(&self) -> ConvShape {
        ConvShape {
            in_c: self.in_c,
            out_c: self.out_c,
            k: self.k,
            stride: self.stride,
            pad: self.pad,
        }
    }

    /// Replaces the output quantization (e.g. after calibration) and recomputes the
    /// multipliers. Construction time only (allocates).
    fn set_out_q(&mut self, out_q: QParams) -> Result<(), ModelError> {
        if !out_q.is_valid() {
            return Err(invalid(format!(
                "output scale {}: scales must be finite and > 0",
                out_q.scale
            )));
        }
        let mut multipliers = Vec::with_capacity(self.out_c);
        for (c, &ws) in self.w_scales.iter().enumerate() {
            let m = requant_multiplier(self.in_q.scale, ws, out_q.scale);
            if !(m.is_finite() && m > 0.0) {
                return Err(invalid(format!(
                    "requantization multiplier of channel {c} is {m} (x_scale {} * w_scale \
                     {ws} / y_scale {}): rescale the layer so it is a normal positive f32",
                    self.in_q.scale, out_q.scale
                )));
            }
            multipliers.push(m);
        }
        self.out_q = out_q;
        self.multipliers = multipliers;
        Ok(())
    }

    /// The kernel path `forward*` uses. Chosen at construction: `REDLINE_KERNEL`
    /// (`scalar`, `avx2`, `vnni`, `neon`, `i8mm`) if set, else the fastest path this CPU supports.
    pub fn path(&self) -> KernelPath {
        self.path
    }

    /// Forces a kernel path (all paths give bit-identical results; this changes speed
    /// only). Errors, leaving the path unchanged, if this CPU cannot run it.
    pub fn set_path(&mut self, path: KernelPath) -> Result<(), ModelError> {
        self.path = path.check_available()?;
        Ok(())
    }

    /// The precomputed requantization multipliers `M[oc]`, one per output channel.
    pub fn multipliers(&self) -> &[f32] {
        &self.multipliers
    }

    /// Output height and width for an `in_h × in_w` input: `(in + 2·pad − k) / stride + 1`,
    /// or 0 in a dimension where the padded input is smaller than the kernel (or empty).
    pub fn out_hw(&self, in_h: usize, in_w: usize) -> (usize, usize) {
        let dim = |n: usize| {
            if n == 0 {
                return 0;
            }
            match n.checked_add(2 * self.pad) {
                Some(p) if p >= self.k => (p - self.k) / self.stride + 1,
                _ => 0,
            }
        };
        (dim(in_h), dim(in_w))
    }

    /// Multiply-accumulates of one forward pass over an `in_h × in_w` input (padded taps
    /// included, as is usual for MAC counts).
    pub fn macs(&self, in_h: usize, in_w: usize) -> u64 {
        let (oh, ow) = self.out_hw(in_h, in_w);
        [oh, ow, self.out_c, self.k, self.k, self.in_c]
            .iter()
            .fold(1u64, |acc, &v| acc.saturating_mul(v as u64))
    }

    /// Number of elements of the input tensor for an `in_h × in_w` image.
    pub fn input_len(&self, in_h: usize, in_w: usize) -> Option<usize> {
        in_h.checked_mul(in_w)?.checked_mul(self.in_c)
    }

    /// Number of elements of the output tensor for an `in_h × in_w` image.
    pub fn output_len(&self, in_h: usize, in_w: usize) -> Option<usize> {
        let (oh, ow) = self.out_hw(in_h, in_w);
        oh.checked_mul(ow)?.checked_mul(self.out_c)
    }

    /// Whole-tensor forward pass: `out` is `out_h * out_w * out_c`. No allocation.
    pub fn forward(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out: &mut [i8],
    ) -> Result<(), ModelError> {
        let (out_h, _) = self.out_hw(in_h, in_w);
        self.forward_rows(input, in_h, in_w, out, 0..out_h)
    }

    /// Computes output rows `rows` (a sub-range of `0..out_h`) into `out`, the WHOLE output
    /// tensor (`out_h * out_w * out_c`); rows outside the range are untouched. No allocation.
    /// A caller can split a layer by rows with a static partition and get identical results.
    pub fn forward_rows(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        let (out_h, out_w) = self.check_input(input, in_h, in_w, self.in_c)?;
        let expected = checked_len(&[out_h, out_w, self.out_c], "output")?;
        exact_len(out.len(), expected, "conv output")?;
        check_rows(&rows, out_h)?;
        let row_len = out_w * self.out_c;
        let dst = &mut out[rows.start * row_len..rows.end * row_len];
        let (slot, view) = (self.dense_slot(), self.dense_view());
        self.run_rows(input, in_h, in_w, out_w, dst, slot, view, rows);
        Ok(())
    }

    /// Like [`Conv2d::forward_rows`], but `out_rows` holds ONLY the requested rows
    /// (`rows.len() * out_w * out_c` elements, row `rows.start` first). Lets a caller hand
    /// disjoint row chunks of one output to different threads as disjoint slices.
    pub fn forward_rows_into(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_rows: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        self.forward_rows_into_slot(input, in_h, in_w, out_rows, self.dense_slot(), rows)
    }

    /// Like [`Conv2d::forward_rows_into`], writing output channel `oc` of each pixel to
    /// `pixel * slot.pixel_stride + slot.channel_offset + oc` of `out_rows`
    /// (`rows.len() * out_w * slot.pixel_stride` elements). Other channels are untouched.
    pub fn forward_rows_into_slot(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_rows: &mut [i8],
        slot: ChannelSlot,
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        let dense = self.dense_view();
        self.forward_rows_view(input, in_h, in_w, dense, out_rows, slot, rows)
    }

    /// Like [`Conv2d::forward_rows_into_slot`], reading input channel `c` of each pixel
    /// from `pixel * in_view.pixel_stride + in_view.channel_offset + c` of `input`
    /// (`in_h * in_w * in_view.pixel_stride` elements): this layer convolves `in_c`
    /// channels out of wider pixels, as one group of a grouped convolution does. The same
    /// results as the layer run on those channels copied out densely.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_rows_view(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        in_view: ChannelSlot,
        out_rows: &mut [i8],
        slot: ChannelSlot,
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        let geom = (in_h, in_w, in_view, slot);
        self.checked_rows(input, geom, out_rows, rows, "conv output rows")
    }

    /// The exact accumulators `bias + Σ (x − x_zp)·w` of output rows `rows`, not
    /// requantized, into `out_rows` (`rows.len() · out_w · out_c` values, row `rows.start`
    /// first): for a convolution whose float output goes on unquantized (a TensorRT-style
    /// Q/DQ placement), `acc · x_scale · w_scale` is that output. On the layer's kernel path
    /// (every SIMD kernel stores either form); the same integers on every path.
    pub fn forward_rows_acc(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_rows: &mut [i32],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        let geom = (in_h, in_w, self.dense_view(), self.dense_slot());
        self.checked_rows(input, geom, out_rows, rows, "conv accumulator rows")
    }

    /// Checks a call of [`Conv2d::forward_rows_view`] or [`Conv2d::forward_rows_acc`]
    /// (`geom`: input height and width, input view, output slot) and runs it: bytes or
    /// accumulators, the same checks.
    fn checked_rows<E: KernelOut>(
        &self,
        input: &[i8],
        (in_h, in_w, in_view, slot): (usize, usize, ChannelSlot, ChannelSlot),
        out_rows: &mut [E],
        rows: Range<usize>,
        what: &'static str,
    ) -> Result<(), ModelError> {
        in_view.check_fits(
            self.in_c,
            "input channel view (pixel_stride vs channel_offset + in_c)",
        )?;
        let (out_h, out_w) = self.check_input(input, in_h, in_w, in_view.pixel_stride)?;
        check_rows(&rows, out_h)?;
        slot.check_fits(
            self.out_c,
            "channel slot (pixel_stride vs channel_offset + out_c)",
        )?;
        let expected = checked_len(&[rows.end - rows.start, out_w, slot.pixel_stride], "output")?;
        exact_len(out_rows.len(), expected, what)?;
        self.run_rows(input, in_h, in_w, out_w, out_rows, slot, in_view, rows);
        Ok(())
    }

    fn dense_slot(&self) -> ChannelSlot {
        ChannelSlot {
            pixel_stride: self.out_c,
            channel_offset: 0,
        }
    }

    fn dense_view(&self) -> ChannelSlot {
        ChannelSlot {
            pixel_stride: self.in_c,
            channel_offset: 0,
        }
    }

    /// Checks the layer's own arrays and the input (`pixel_stride` elements per pixel);
    /// returns `(out_h, out_w)`.
    fn check_input(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        pixel_stride: usize,
    ) -> Result<(usize, usize), ModelError> {
        let taps = self.k * self.k * self.in_c;
        if self.weights.len() != taps * self.out_c
            || self.bias.len() != self.out_c
            || self.multipliers.len() != self.out_c
            || self.w_sums.len() != self.out_c
        {
            return Err(ModelError::LayerModified);
        }
        self.check_input_len(input.len(), in_h, in_w, pixel_stride, "conv input")
    }

    /// Checks that an input of `len` elements is an `in_h × in_w` image of `pixel_stride`
    /// channels per pixel (`in_c` for a dense one) this layer can convolve; returns
    /// `(out_h, out_w)`. Shared by the kernels and the references.
    fn check_input_len(
        &self,
        len: usize,
        in_h: usize,
        in_w: usize,
        pixel_stride: usize,
        what: &'static str,
    ) -> Result<(usize, usize), ModelError> {
        let (out_h, out_w) = self.out_hw(in_h, in_w);
        if out_h == 0 || out_w == 0 {
            return Err(ModelError::InputTooSmall {
                in_h,
                in_w,
                k: self.k,
                pad: self.pad,
            });
        }
        let expected = in_h
            .checked_mul(in_w)
            .and_then(|v| v.checked_mul(pixel_stride))
            .ok_or(ModelError::SizeOverflow { what: "input" })?;
        exact_len(len, expected, what)?;
        Ok((out_h, out_w))
    }

    /// The kernel. All sizes were checked by the caller: `input` is
    /// `in_h*in_w*in_view.pixel_stride` and the view fits, `dst` is `rows.len() * out_w *
    /// slot.pixel_stride`, `rows ⊆ 0..out_h`, the slot fits.
    #[allow(clippy::too_many_arguments)]
    fn run_rows<E: KernelOut>(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_w: usize,
        dst: &mut [E],
        slot: ChannelSlot,
        in_view: ChannelSlot,
        rows: Range<usize>,
    ) {
        let geom = self.geom(in_h, in_w, out_w, in_view);
        let one = std::slice::from_ref(self);
        if run_simd_rows(self.path, one, &geom, input, dst, slot, rows.clone()) {
            return;
        }
        self.run_rows_scalar(input, in_h, in_w, out_w, dst, slot, in_view, rows);
    }

    /// The geometry of one call of this layer.
    fn geom(&self, in_h: usize, in_w: usize, out_w: usize, in_view: ChannelSlot) -> Geom {
        Geom {
            in_c: self.in_c,
            in_view,
            out_c: self.out_c,
            k: self.k,
            stride: self.stride,
            pad: self.pad,
            in_h,
            in_w,
            out_w,
            x_zp: self.in_q.zero_point,
            y_zp: self.out_q.zero_point,
            relu: self.relu,
        }
    }

    /// The groups of a grouped convolution, `layers[i]` reading input channels
    /// `i · in_c ..` of every pixel of `input` (`in_h · in_w · layers.len() · in_c`) and
    /// writing output channels `i · out_c ..` of `out_rows` (`rows.len() · out_w ·
    /// layers.len() · out_c`). The same bytes as [`Conv2d::forward_rows_view`] layer by
    /// layer; on the VNNI path the groups share one call (one stage, zeroed once), which
    /// matters when the groups are narrow (RegNet's 8 channels). The layers must share
    /// channel counts, kernel, stride, padding, zero points, ReLU and kernel path.
    pub fn forward_rows_groups(
        layers: &[Conv2d],
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_rows: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        Self::groups_rows(layers, input, in_h, in_w, out_rows, rows)
    }

    /// [`Conv2d::forward_rows_groups`] storing each group's exact accumulators (`bias +
    /// Σ (x − x_zp)·w`, as [`Conv2d::forward_rows_acc`]) instead of requantized bytes: a
    /// grouped convolution whose float output goes on unquantized.
    pub fn forward_rows_groups_acc(
        layers: &[Conv2d],
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_rows: &mut [i32],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        Self::groups_rows(layers, input, in_h, in_w, out_rows, rows)
    }

    /// The groups' checks and run, bytes or accumulators.
    fn groups_rows<E: KernelOut>(
        layers: &[Conv2d],
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_rows: &mut [E],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        let Some(first) = layers.first() else {
            return Ok(());
        };
        let same = |l: &Conv2d| {
            l.in_c == first.in_c
                && l.out_c == first.out_c
                && l.k == first.k
                && l.stride == first.stride
                && l.pad == first.pad
                && l.in_q.zero_point == first.in_q.zero_point
                && l.out_q.zero_point == first.out_q.zero_point
                && l.relu == first.relu
                && l.path == first.path
        };
        if !layers.iter().all(same) {
            return Err(ModelError::InvalidConfig {
                reason: "the groups of a grouped convolution differ in shape, zero points, \
                         ReLU or kernel path"
                    .into(),
            });
        }
        let groups = layers.len();
        let view = ChannelSlot {
            pixel_stride: checked_len(&[groups, first.in_c], "grouped input channels")?,
            channel_offset: 0,
        };
        let slot = ChannelSlot {
            pixel_stride: checked_len(&[groups, first.out_c], "grouped output channels")?,
            channel_offset: 0,
        };
        for l in &layers[1..] {
            l.check_input(input, in_h, in_w, view.pixel_stride)?;
        }
        let (out_h, out_w) = first.check_input(input, in_h, in_w, view.pixel_stride)?;
        check_rows(&rows, out_h)?;
        let expected = checked_len(&[rows.end - rows.start, out_w, slot.pixel_stride], "output")?;
        exact_len(out_rows.len(), expected, "grouped conv output rows")?;
        let geom = first.geom(in_h, in_w, out_w, view);
        if run_simd_rows(
            first.path,
            layers,
            &geom,
            input,
            out_rows,
            slot,
            rows.clone(),
        ) {
            return Ok(());
        }
        for (i, l) in layers.iter().enumerate() {
            let view = ChannelSlot {
                channel_offset: i * l.in_c,
                ..view
            };
            let slot = ChannelSlot {
                channel_offset: i * l.out_c,
                ..slot
            };
            l.run_rows(input, in_h, in_w, out_w, out_rows, slot, view, rows.clone());
        }
        Ok(())
    }
}

fn check_rows(rows: &Range<usize>, out_h: usize) -> Result<(), ModelError> {
    if rows.start > rows.end || rows.end > out_h {
        return Err(ModelError::RowsOutOfRange {
            start: rows.start,
            end: rows.end,
            out_h,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::kernel_tests::random_case;
    use super::*;

    #[test]
    fn a_channel_slot_too_narrow_is_an_error() {
        // Writing into a slot is covered on every kernel path by `kernel_tests!`.
        let shape = ConvShape {
            in_c: 3,
            out_c: 2,
            k: 1,
            stride: 1,
            pad: 0,
        };
        let c = random_case(shape, 3, 4, true, 9);
        let mut out = vec![0x55i8; 3 * 4 * 5];
        let bad = ChannelSlot {
            pixel_stride: 3,
            channel_offset: 2,
        };
        assert!(c
            .conv
            .forward_rows_into_slot(&c.input, 3, 4, &mut out, bad, 0..3)
            .is_err());
        assert!(out.iter().all(|&v| v == 0x55));
    }

    #[test]
    fn wrong_sizes_are_errors_not_panics() {
        let shape = ConvShape {
            in_c: 2,
            out_c: 3,
            k: 3,
            stride: 2,
            pad: 1,
        };
        let c = random_case(shape, 5, 5, false, 1);
        let (oh, ow) = c.conv.out_hw(5, 5);
        assert_eq!((oh, ow), (3, 3));
        let mut out = vec![0i8; oh * ow * 3];
        assert!(matches!(
            c.conv.forward(&c.input[1..], 5, 5, &mut out),
            Err(ModelError::BufferSize { .. })
        ));
        assert!(matches!(
            c.conv.forward(&c.input, 5, 5, &mut out[1..]),
            Err(ModelError::BufferSize { .. })
        ));
        assert!(matches!(
            c.conv.forward_rows(&c.input, 5, 5, &mut out, 2..4),
            Err(ModelError::RowsOutOfRange { .. })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 2..1;
        assert!(c
            .conv
            .forward_rows(&c.input, 5, 5, &mut out, backwards)
            .is_err());
        assert!(matches!(
            c.conv.forward(&[], 0, 5, &mut out),
            Err(ModelError::InputTooSmall { .. })
        ));
        assert!(c.conv.forward(&c.input, usize::MAX, 5, &mut out).is_err());
        let mut rows = vec![0i8; ow * 3];
        assert!(c
            .conv
            .forward_rows_into(&c.input, 5, 5, &mut rows, 0..2)
            .is_err());
        assert!(c
            .conv
            .forward_rows_into(&c.input, 5, 5, &mut rows, 1..2)
            .is_ok());
        // A layer whose public fields were changed after construction.
        let mut broken = c.conv.clone();
        broken.bias.pop();
        assert_eq!(
            broken.forward(&c.input, 5, 5, &mut out),
            Err(ModelError::LayerModified)
        );
    }

    #[test]
    fn construction_validates() {
        let q = QParams::new(0.1, 0);
        let s = |in_c, out_c, k, stride, pad| ConvShape {
            in_c,
            out_c,
            k,
            stride,
            pad,
        };
        let mk = |shape: ConvShape, n_w: usize, scales: Vec<f32>, bias: Vec<i32>, out_q| {
            Conv2d::new(shape, vec![1; n_w], scales, bias, q, out_q, false)
        };
        assert!(mk(s(2, 1, 3, 1, 1), 18, vec![0.1], vec![0], q).is_ok());
        assert!(mk(s(2, 1, 3, 1, 1), 17, vec![0.1], vec![0], q).is_err());
        assert!(mk(s(2, 1, 3, 1, 3), 18, vec![0.1], vec![0], q).is_err()); // pad >= k
        assert!(mk(s(2, 1, 3, 0, 1), 18, vec![0.1], vec![0], q).is_err()); // stride 0
        assert!(mk(s(0, 1, 3, 1, 1), 0, vec![0.1], vec![0], q).is_err());
        assert!(mk(s(2, 1, 3, 1, 1), 18, vec![0.0], vec![0], q).is_err()); // zero scale
        assert!(mk(s(2, 1, 3, 1, 1), 18, vec![f32::NAN], vec![0], q).is_err());
        assert!(mk(s(2, 1, 3, 1, 1), 18, vec![0.1, 0.1], vec![0], q).is_err());
        assert!(mk(
            s(2, 1, 3, 1, 1),
            18,
            vec![0.1],
            vec![0],
            QParams::new(-1.0, 0)
        )
        .is_err());
        // Accumulator bound: 18 taps * 32768 + bias must fit in i32.
        assert!(mk(
            s(2, 1, 3, 1, 1),
            18,
            vec![0.1],
            vec![i32::MAX - 18 * 32768],
            q
        )
        .is_ok());
        assert!(mk(
            s(2, 1, 3, 1, 1),
            18,
            vec![0.1],
            vec![i32::MAX - 18 * 32768 + 1],
            q
        )
        .is_err());
        let wide = 65_536; // 65_536 * 32_768 > i32::MAX
        assert!(mk(s(wide, 1, 1, 1, 0), wide, vec![0.1], vec![0], q).is_err());
        // Multiplier underflow.
        assert!(mk(
            s(2, 1, 3, 1, 1),
            18,
            vec![1e-30],
            vec![0],
            QParams::new(1e30, 0)
        )
        .is_err());
    }

    #[test]
    fn out_hw_and_macs() {
        let shape = ConvShape {
            in_c: 3,
            out_c: 16,
            k: 3,
            stride: 2,
            pad: 1,
        };
        let c = random_case(shape, 1, 1, true, 3);
        assert_eq!(c.conv.out_hw(64, 128), (32, 64));
        assert_eq!(c.conv.out_hw(63, 127), (32, 64));
        assert_eq!(c.conv.out_hw(0, 5), (0, 3));
        assert_eq!(c.conv.macs(64, 128), 32 * 64 * 16 * 27);
        let one = ConvShape {
            in_c: 4,
            out_c: 2,
            k: 3,
            stride: 1,
            pad: 0,
        };
        let c = random_case(one, 3, 3, true, 3);
        assert_eq!(c.conv.out_hw(2, 3), (0, 1));
    }
}
