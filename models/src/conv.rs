//! The scalar INT8 2-D convolution (ONNX `QLinearConv` semantics) and its references.
//!
//! # Contract
//!
//! - Tensors are `i8`, NHWC (batch 1), contiguous: element `(y, x, c)` of an `h × w × c`
//!   tensor is at `(y * w + x) * c + c`.
//! - Weights are `i8`, symmetric per output channel (zero point 0, scale `w_scales[oc]`),
//!   laid out `[out_c][k][k][in_c]`, so that for one output channel and one kernel row the
//!   taps of consecutive kernel columns are contiguous and line up with consecutive input
//!   pixels: the inner loop is one contiguous `i8 × i8 → i32` dot product (the compiler
//!   auto-vectorises it; no `unsafe`, no intrinsics). Pixels whose taps are all inside the
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
//! - **Kernel paths** ([`KernelPath`]): the scalar kernel in this file, and the AVX2 and
//!   AVX-512 VNNI kernels of [`crate::simd`], bit-exact with it for every input (the exact
//!   `i64` reference [`reference_forward_i64`] is the oracle for all three). The path is
//!   chosen once in [`Conv2d::new`]: `REDLINE_KERNEL=scalar|avx2|vnni` if set (an unknown
//!   or unsupported value is a construction error), else the fastest one the CPU supports
//!   (`is_x86_feature_detected!`); [`Conv2d::set_path`] forces one and errors if the CPU
//!   lacks it. The weights are repacked for the SIMD paths at construction; after changing
//!   a public field, rebuild the layer. A SIMD path falls back to the scalar kernel only for
//!   layers whose kernel window does not fit its stage buffer (same results either way).
//!
//! # Cost
//!
//! `forward*` cost `out_h · out_w · out_c · k · k · in_c` multiply-adds ([`Conv2d::macs`])
//! plus one `f32` multiply per output; the SIMD paths use [`crate::simd::STAGE_BYTES`] of
//! stack per call. They never allocate, lock, log or panic: every size
//! is checked first and a mismatch is returned as a [`ModelError`].
//!
//! # Never
//!
//! The kernels never read outside the given input, never write outside the requested output
//! rows (and channel slot), and never depend on time, threads or hash order. The reference
//! functions at the bottom ([`reference_forward_i64`], [`reference_conv_f32`],
//! [`reference_forward_f32`]) allocate and are slow: tests and calibration only.

use crate::quant::{dequantize, quantize, requant_multiplier, requantize, QParams};
use crate::simd::{self, KernelPath, Packed};
use std::ops::Range;

/// Everything that can go wrong building or running a model. Variants raised by per-frame
/// calls carry only numbers (no allocation on the hot path).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A layer's parameters are inconsistent (construction time).
    #[error("invalid layer: {reason}")]
    InvalidLayer {
        /// What is wrong and what to do.
        reason: String,
    },
    /// A network configuration is unusable (construction time).
    #[error("invalid network config: {reason}")]
    InvalidConfig {
        /// What is wrong and what to do.
        reason: String,
    },
    /// A buffer has the wrong number of elements.
    #[error(
        "{what} has {got} elements but must have exactly {expected}: size it from the layer \
         (Conv2d::out_hw, Backbone::output_shape, ...), not by hand"
    )]
    BufferSize {
        /// Which buffer.
        what: &'static str,
        /// Required length.
        expected: usize,
        /// Length given.
        got: usize,
    },
    /// A scratch buffer is too small.
    #[error(
        "{what} has {got} elements but needs at least {needed}: allocate it once with the \
         model's scratch_len()"
    )]
    BufferTooSmall {
        /// Which buffer.
        what: &'static str,
        /// Minimum length.
        needed: usize,
        /// Length given.
        got: usize,
    },
    /// A row range is not inside `0..out_h`.
    #[error(
        "output rows {start}..{end} are not a range inside 0..{out_h}: split 0..out_h into \
         ordered, non-empty-or-empty sub-ranges"
    )]
    RowsOutOfRange {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// Number of output rows.
        out_h: usize,
    },
    /// The input is too small (or empty) for the kernel.
    #[error(
        "input {in_h}x{in_w} is too small for a {k}x{k} kernel with padding {pad}: it must \
         have at least one row and column and (size + 2*pad) >= k"
    )]
    InputTooSmall {
        /// Input height.
        in_h: usize,
        /// Input width.
        in_w: usize,
        /// Kernel size.
        k: usize,
        /// Padding.
        pad: usize,
    },
    /// A tensor size does not fit in `usize`.
    #[error("the size of {what} overflows usize: use a smaller input")]
    SizeOverflow {
        /// Which tensor.
        what: &'static str,
    },
    /// The layer was modified after construction so that its arrays no longer match.
    #[error(
        "the layer's weights/bias/scales no longer match its shape (a public field was \
         changed after Conv2d::new): rebuild it with Conv2d::new"
    )]
    LayerModified,
}

/// `dims` multiplied, or [`ModelError::SizeOverflow`] naming `what`.
pub(crate) fn checked_len(dims: &[usize], what: &'static str) -> Result<usize, ModelError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(ModelError::SizeOverflow { what })
}

/// `Ok` when a buffer of `got` elements has the `expected` length, else
/// [`ModelError::BufferSize`] naming `what`.
pub(crate) fn exact_len(got: usize, expected: usize, what: &'static str) -> Result<(), ModelError> {
    if got == expected {
        Ok(())
    } else {
        Err(ModelError::BufferSize {
            what,
            expected,
            got,
        })
    }
}

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

/// Accumulator growth bound per tap: `|(x - x_zp) * w| <= 255 * 128`, and the interior
/// path's partial sums `-x_zp Σw + Σ x w` grow by at most `128 * 128 + 128 * 128` per tap.
const MAX_TERM: i64 = 2 * 128 * 128;

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
        let max_bias = bias.iter().map(|b| i64::from(*b).abs()).max().unwrap_or(0);
        let worst = i64::try_from(taps)
            .ok()
            .and_then(|t| t.checked_mul(MAX_TERM))
            .and_then(|t| t.checked_add(max_bias));
        if worst.is_none_or(|w| w > i64::from(i32::MAX)) {
            return Err(invalid(format!(
                "the i32 accumulator could overflow: {taps} taps * {MAX_TERM} + max|bias| \
                 {max_bias} > {}; use fewer input channels per layer or a smaller bias",
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
    pub fn set_out_q(&mut self, out_q: QParams) -> Result<(), ModelError> {
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
    /// (`scalar`, `avx2`, `vnni`) if set, else the fastest path this CPU supports.
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
        let (out_h, out_w) = self.check_input(input, in_h, in_w)?;
        let expected = checked_len(&[out_h, out_w, self.out_c], "output")?;
        exact_len(out.len(), expected, "conv output")?;
        check_rows(&rows, out_h)?;
        let row_len = out_w * self.out_c;
        let dst = &mut out[rows.start * row_len..rows.end * row_len];
        self.run_rows(input, in_h, in_w, out_w, dst, self.dense_slot(), rows);
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
        let (out_h, out_w) = self.check_input(input, in_h, in_w)?;
        check_rows(&rows, out_h)?;
        if slot
            .channel_offset
            .checked_add(self.out_c)
            .is_none_or(|end| end > slot.pixel_stride)
        {
            return Err(ModelError::BufferSize {
                what: "channel slot (pixel_stride vs channel_offset + out_c)",
                expected: slot.channel_offset.saturating_add(self.out_c),
                got: slot.pixel_stride,
            });
        }
        let expected = checked_len(&[rows.end - rows.start, out_w, slot.pixel_stride], "output")?;
        exact_len(out_rows.len(), expected, "conv output rows")?;
        self.run_rows(input, in_h, in_w, out_w, out_rows, slot, rows);
        Ok(())
    }

    fn dense_slot(&self) -> ChannelSlot {
        ChannelSlot {
            pixel_stride: self.out_c,
            channel_offset: 0,
        }
    }

    /// Checks the layer's own arrays and the input; returns `(out_h, out_w)`.
    fn check_input(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
    ) -> Result<(usize, usize), ModelError> {
        let taps = self.k * self.k * self.in_c;
        if self.weights.len() != taps * self.out_c
            || self.bias.len() != self.out_c
            || self.multipliers.len() != self.out_c
            || self.w_sums.len() != self.out_c
        {
            return Err(ModelError::LayerModified);
        }
        self.check_input_len(input.len(), in_h, in_w, "conv input")
    }

    /// Checks that an input of `len` elements is an `in_h × in_w × in_c` image this layer
    /// can convolve; returns `(out_h, out_w)`. Shared by the kernels and the references.
    fn check_input_len(
        &self,
        len: usize,
        in_h: usize,
        in_w: usize,
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
        let expected = self
            .input_len(in_h, in_w)
            .ok_or(ModelError::SizeOverflow { what: "input" })?;
        exact_len(len, expected, what)?;
        Ok((out_h, out_w))
    }

    /// The kernel. All sizes were checked by the caller: `input` is `in_h*in_w*in_c`,
    /// `dst` is `rows.len() * out_w * slot.pixel_stride`, `rows ⊆ 0..out_h`, the slot fits.
    #[allow(clippy::too_many_arguments)]
    fn run_rows(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_w: usize,
        dst: &mut [i8],
        slot: ChannelSlot,
        rows: Range<usize>,
    ) {
        let geom = simd::Geom {
            in_c: self.in_c,
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
        };
        let (bias, mult) = (&self.bias[..], &self.multipliers[..]);
        if simd::run_rows(
            self.path,
            &self.packed,
            &geom,
            bias,
            mult,
            input,
            dst,
            slot,
            rows.clone(),
        ) {
            return;
        }
        self.run_rows_scalar(input, in_h, in_w, out_w, dst, slot, rows);
    }

    /// The scalar reference kernel (same contract as `run_rows`).
    #[allow(clippy::too_many_arguments)]
    fn run_rows_scalar(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_w: usize,
        dst: &mut [i8],
        slot: ChannelSlot,
        rows: Range<usize>,
    ) {
        let (in_c, k, s, p) = (self.in_c, self.k, self.stride, self.pad);
        let x_zp = i32::from(self.in_q.zero_point);
        let y_zp = self.out_q.zero_point;
        let relu = self.relu;
        let per_oc = k * k * in_c;
        let row_len = out_w * slot.pixel_stride;
        for (oy, out_row) in rows.zip(dst.chunks_exact_mut(row_len)) {
            // Valid kernel rows: 0 <= oy*s + ky - p < in_h.
            let y_origin = oy * s; // input row of ky = p
            let ky0 = p.saturating_sub(y_origin);
            let ky1 = k.min((in_h + p).saturating_sub(y_origin));
            for (ox, px) in out_row.chunks_exact_mut(slot.pixel_stride).enumerate() {
                let x_origin = ox * s;
                let kx0 = p.saturating_sub(x_origin);
                let kx1 = k.min((in_w + p).saturating_sub(x_origin));
                // Taps of one kernel row: kx0..kx1, contiguous in input and weights.
                let span = (kx1 - kx0) * in_c;
                let first_col = x_origin + kx0 - p;
                let out_px = &mut px[slot.channel_offset..slot.channel_offset + self.out_c];
                let interior = ky0 == 0 && ky1 == k && kx0 == 0 && kx1 == k;
                for (oc, o) in out_px.iter_mut().enumerate() {
                    let w_oc = &self.weights[oc * per_oc..(oc + 1) * per_oc];
                    let mut acc = self.bias[oc];
                    if interior {
                        // Every tap is inside: subtract x_zp * Σw once (same exact sum).
                        acc -= x_zp * self.w_sums[oc];
                        for ky in 0..k {
                            let iy = y_origin + ky - p;
                            let xs = &input[(iy * in_w + first_col) * in_c..][..span];
                            let ws = &w_oc[ky * k * in_c..][..span];
                            acc += dot(xs, ws);
                        }
                    } else {
                        for ky in ky0..ky1 {
                            let iy = y_origin + ky - p;
                            let xs = &input[(iy * in_w + first_col) * in_c..][..span];
                            let ws = &w_oc[(ky * k + kx0) * in_c..][..span];
                            acc += dot_zp(xs, ws, x_zp);
                        }
                    }
                    *o = requantize(acc, self.multipliers[oc], y_zp, relu);
                }
            }
        }
    }
}

/// `Σ (x - x_zp) * w` over two equally long slices, in `i32` (cannot overflow: the caller's
/// layer passed the accumulator bound). Written as a plain zip/map/sum so it vectorises.
#[inline(always)]
fn dot_zp(xs: &[i8], ws: &[i8], x_zp: i32) -> i32 {
    xs.iter()
        .zip(ws)
        .map(|(&x, &w)| (i32::from(x) - x_zp) * i32::from(w))
        .sum()
}

/// `Σ x * w` over two equally long slices; each `i8 × i8` product fits in `i16`, and pairs
/// of them are summed in `i32` (the `pmaddwd` pattern).
#[inline(always)]
fn dot(xs: &[i8], ws: &[i8]) -> i32 {
    xs.iter()
        .zip(ws)
        .map(|(&x, &w)| i32::from(i16::from(x) * i16::from(w)))
        .sum()
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

/// Exact reference of [`Conv2d::forward`]: a straightforward loop over every output, every
/// kernel tap (padded taps read `x_zp` explicitly) and every input channel, accumulating in
/// `i64`, then the requantization rule written out independently (`M = x_scale * w_scale /
/// y_scale` in `f32`, `round_ties_even`, add `y_zp`, clamp). The oracle every kernel must
/// equal bit for bit. Allocates; tests only.
pub fn reference_forward_i64(
    conv: &Conv2d,
    input: &[i8],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<i8>, ModelError> {
    let (oh, ow) = conv.check_input(input, in_h, in_w)?;
    let (ic_n, oc_n, k) = (conv.in_c, conv.out_c, conv.k);
    let x_zp = i64::from(conv.in_q.zero_point);
    let y_zp = i64::from(conv.out_q.zero_point);
    let mut out = vec![0i8; oh * ow * oc_n];
    for oy in 0..oh {
        for ox in 0..ow {
            for oc in 0..oc_n {
                let mut acc = i64::from(conv.bias[oc]);
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * conv.stride + ky) as i64 - conv.pad as i64;
                        let ix = (ox * conv.stride + kx) as i64 - conv.pad as i64;
                        let inside =
                            iy >= 0 && ix >= 0 && (iy as usize) < in_h && (ix as usize) < in_w;
                        for ic in 0..ic_n {
                            let x = if inside {
                                i64::from(input[((iy as usize) * in_w + ix as usize) * ic_n + ic])
                            } else {
                                x_zp
                            };
                            let w = i64::from(conv.weights[((oc * k + ky) * k + kx) * ic_n + ic]);
                            acc += (x - x_zp) * w;
                        }
                    }
                }
                let acc = i32::try_from(acc).map_err(|_| {
                    invalid(format!("reference accumulator {acc} does not fit in i32"))
                })?;
                let m = conv.in_q.scale * conv.w_scales[oc] / conv.out_q.scale;
                let r = (acc as f32 * m).round_ties_even() as i64 + y_zp;
                let lo = if conv.relu { y_zp } else { -128 };
                out[(oy * ow + ox) * oc_n + oc] = r.clamp(lo, 127) as i8;
            }
        }
    }
    Ok(out)
}

/// Float reference of the layer on real-valued activations: weights dequantized
/// (`w * w_scale[oc]`), bias dequantized (`bias * in_scale * w_scale[oc]`), zero padding,
/// `f64` accumulation, ReLU as `max(0, y)`. Returns real outputs (`out_h*out_w*out_c`),
/// not quantized; `out_q` is not used. Used by calibration (min-max of the result) and by
/// [`reference_forward_f32`]. Allocates; construction time and tests only.
pub fn reference_conv_f32(
    conv: &Conv2d,
    input: &[f32],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<f32>, ModelError> {
    let (oh, ow) = conv.check_input_len(input.len(), in_h, in_w, "f32 reference input")?;
    if conv.weights.len() != conv.k * conv.k * conv.in_c * conv.out_c
        || conv.bias.len() != conv.out_c
        || conv.w_scales.len() != conv.out_c
    {
        return Err(ModelError::LayerModified);
    }
    let (ic_n, oc_n, k) = (conv.in_c, conv.out_c, conv.k);
    let mut out = vec![0f32; oh * ow * oc_n];
    for oy in 0..oh {
        for ox in 0..ow {
            for oc in 0..oc_n {
                let ws = f64::from(conv.w_scales[oc]);
                let mut acc = f64::from(conv.bias[oc]) * f64::from(conv.in_q.scale) * ws;
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * conv.stride + ky) as i64 - conv.pad as i64;
                        let ix = (ox * conv.stride + kx) as i64 - conv.pad as i64;
                        if iy < 0 || ix < 0 || iy as usize >= in_h || ix as usize >= in_w {
                            continue;
                        }
                        let base = ((iy as usize) * in_w + ix as usize) * ic_n;
                        let wbase = ((oc * k + ky) * k + kx) * ic_n;
                        for ic in 0..ic_n {
                            let w = f64::from(conv.weights[wbase + ic]) * ws;
                            acc += f64::from(input[base + ic]) * w;
                        }
                    }
                }
                let y = acc as f32;
                out[(oy * ow + ox) * oc_n + oc] = if conv.relu { y.max(0.0) } else { y };
            }
        }
    }
    Ok(out)
}

/// The float reference of [`Conv2d::forward`] on quantized tensors: dequantize the input,
/// [`reference_conv_f32`], quantize with `out_q` (same round-half-to-even rule). Differs
/// from the integer kernel by at most 1 LSB, only where the exact value is within float
/// rounding of a tie. Allocates; tests only.
pub fn reference_forward_f32(
    conv: &Conv2d,
    input: &[i8],
    in_h: usize,
    in_w: usize,
) -> Result<Vec<i8>, ModelError> {
    let x: Vec<f32> = input.iter().map(|&v| dequantize(v, conv.in_q)).collect();
    let y = reference_conv_f32(conv, &x, in_h, in_w)?;
    Ok(y.iter().map(|&v| quantize(v, conv.out_q)).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::quant::{quantize_bias, quantize_weights_per_channel};
    use proptest::prelude::*;
    use redline_runtime::rng::SplitMix64;

    /// A random layer: full-range weights (including -128), random zero points, scales and
    /// biases; the input is random over the whole i8 range.
    #[derive(Debug, Clone)]
    struct Case {
        conv: Conv2d,
        input: Vec<i8>,
        in_h: usize,
        in_w: usize,
    }

    /// A random layer: full-range weights including -128, random zero points and scales,
    /// and a bias and output scale chosen so that most outputs are in range and some
    /// saturate. Shared with the SIMD tests.
    pub(crate) fn random_conv_with(r: &mut SplitMix64, shape: ConvShape, relu: bool) -> Conv2d {
        let n_w = shape.out_c * shape.k * shape.k * shape.in_c;
        let weights: Vec<i8> = (0..n_w).map(|_| r.next_i8()).collect();
        let w_scales: Vec<f32> = (0..shape.out_c).map(|_| r.uniform(1e-3, 2e-2)).collect();
        // The accumulator's spread is about sqrt(taps) * 100 * 74; pick the output scale so
        // that it spans 20..150 output steps: most outputs in range, some saturated.
        let spread = 7400.0 * ((shape.k * shape.k * shape.in_c) as f32).sqrt();
        let b = (spread * 0.5) as i32;
        let bias: Vec<i32> = (0..shape.out_c).map(|_| r.range_i32(-b, b)).collect();
        let in_q = QParams::new(r.uniform(1e-3, 5e-2), r.next_i8());
        let out_q = QParams::new(
            in_q.scale * 1e-2 * spread / r.uniform(20.0, 150.0),
            r.next_i8(),
        );
        Conv2d::new(shape, weights, w_scales, bias, in_q, out_q, relu).unwrap()
    }

    fn random_case(shape: ConvShape, in_h: usize, in_w: usize, relu: bool, seed: u64) -> Case {
        let mut r = SplitMix64::new(seed);
        let conv = random_conv_with(&mut r, shape, relu);
        let input = (0..in_h * in_w * shape.in_c).map(|_| r.next_i8()).collect();
        Case {
            conv,
            input,
            in_h,
            in_w,
        }
    }

    fn shape_strategy() -> impl Strategy<Value = (ConvShape, usize, usize, bool, u64)> {
        (
            1usize..=9,
            1usize..=9,
            prop_oneof![Just(1usize), Just(2), Just(3), Just(5)],
            1usize..=3,
            0usize..5,
            1usize..=11,
            1usize..=11,
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(|(in_c, out_c, k, stride, pad, h, w, relu, seed)| {
                let shape = ConvShape {
                    in_c,
                    out_c,
                    k,
                    stride,
                    pad: pad % k,
                };
                (shape, h, w, relu, seed)
            })
    }

    fn forward_all(c: &Case) -> Vec<i8> {
        let mut out = vec![0i8; c.conv.output_len(c.in_h, c.in_w).unwrap()];
        c.conv.forward(&c.input, c.in_h, c.in_w, &mut out).unwrap();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn kernel_equals_exact_i64_reference((shape, h, w, relu, seed) in shape_strategy()) {
            let c = random_case(shape, h, w, relu, seed);
            let (oh, ow) = c.conv.out_hw(h, w);
            prop_assume!(oh > 0 && ow > 0);
            let got = forward_all(&c);
            let want = reference_forward_i64(&c.conv, &c.input, h, w).unwrap();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn any_static_row_split_equals_forward(
            (shape, h, w, relu, seed) in shape_strategy(),
            cuts in proptest::collection::vec(0usize..=12, 0..5),
        ) {
            let c = random_case(shape, h, w, relu, seed);
            let (oh, ow) = c.conv.out_hw(h, w);
            prop_assume!(oh > 0 && ow > 0);
            let whole = forward_all(&c);
            let mut bounds: Vec<usize> = cuts.iter().map(|&v| v.min(oh)).collect();
            bounds.push(0);
            bounds.push(oh);
            bounds.sort_unstable();
            // Run the chunks in reverse order to show order does not matter.
            let mut split = vec![0x55i8; whole.len()];
            for pair in bounds.windows(2).rev() {
                c.conv.forward_rows(&c.input, h, w, &mut split, pair[0]..pair[1]).unwrap();
            }
            prop_assert_eq!(&split, &whole);
            // The same split through disjoint row slices.
            let row = ow * c.conv.out_c;
            let mut sliced = vec![0x55i8; whole.len()];
            for pair in bounds.windows(2) {
                let dst = &mut sliced[pair[0] * row..pair[1] * row];
                c.conv.forward_rows_into(&c.input, h, w, dst, pair[0]..pair[1]).unwrap();
            }
            prop_assert_eq!(&sliced, &whole);
        }
    }

    #[test]
    fn rows_outside_the_range_are_untouched() {
        let shape = ConvShape {
            in_c: 4,
            out_c: 5,
            k: 3,
            stride: 1,
            pad: 1,
        };
        let c = random_case(shape, 7, 6, false, 7);
        let whole = forward_all(&c);
        let mut out = vec![0x55i8; whole.len()];
        c.conv.forward_rows(&c.input, 7, 6, &mut out, 2..5).unwrap();
        let row = 6 * 5;
        assert!(out[..2 * row].iter().all(|&v| v == 0x55));
        assert!(out[5 * row..].iter().all(|&v| v == 0x55));
        assert_eq!(&out[2 * row..5 * row], &whole[2 * row..5 * row]);
    }

    #[test]
    fn channel_slot_writes_only_its_channels() {
        let shape = ConvShape {
            in_c: 3,
            out_c: 2,
            k: 1,
            stride: 1,
            pad: 0,
        };
        let c = random_case(shape, 3, 4, true, 9);
        let whole = forward_all(&c);
        let slot = ChannelSlot {
            pixel_stride: 5,
            channel_offset: 2,
        };
        let mut out = vec![0x55i8; 3 * 4 * 5];
        c.conv
            .forward_rows_into_slot(&c.input, 3, 4, &mut out, slot, 0..3)
            .unwrap();
        for px in 0..12 {
            assert_eq!(&out[px * 5..px * 5 + 2], &[0x55, 0x55]);
            assert_eq!(&out[px * 5 + 2..px * 5 + 4], &whole[px * 2..px * 2 + 2]);
            assert_eq!(out[px * 5 + 4], 0x55);
        }
        let bad = ChannelSlot {
            pixel_stride: 3,
            channel_offset: 2,
        };
        assert!(c
            .conv
            .forward_rows_into_slot(&c.input, 3, 4, &mut out, bad, 0..3)
            .is_err());
    }

    #[test]
    fn padding_reads_the_input_zero_point() {
        // One 3x3 all-ones filter over a 1x1 image whose only pixel is the zero point + 1:
        // with zero-point padding only the centre tap contributes.
        let zp = -7i8;
        let conv = Conv2d::new(
            ConvShape {
                in_c: 1,
                out_c: 1,
                k: 3,
                stride: 1,
                pad: 1,
            },
            vec![1; 9],
            vec![1.0],
            vec![0],
            QParams::new(1.0, zp),
            QParams::new(1.0, 0),
            false,
        )
        .unwrap();
        let mut out = [0i8; 1];
        conv.forward(&[zp + 1], 1, 1, &mut out).unwrap();
        assert_eq!(out, [1]);
    }

    #[test]
    fn quantized_kernel_matches_the_dequantized_f32_reference() {
        // Across many random layers: never more than 1 LSB apart, and almost always equal.
        let (mut total, mut diff_sum, mut max_diff) = (0usize, 0i64, 0i64);
        for seed in 0..40u64 {
            let shape = ConvShape {
                in_c: 8,
                out_c: 6,
                k: 3,
                stride: 1 + (seed as usize % 2),
                pad: 1,
            };
            let c = random_case(shape, 9, 10, seed % 3 == 0, seed);
            let got = forward_all(&c);
            let want = reference_forward_f32(&c.conv, &c.input, 9, 10).unwrap();
            for (a, b) in got.iter().zip(&want) {
                let d = (i64::from(*a) - i64::from(*b)).abs();
                diff_sum += d;
                max_diff = max_diff.max(d);
                total += 1;
            }
        }
        let mean = diff_sum as f64 / total as f64;
        assert!(max_diff <= 1, "max diff {max_diff} LSB");
        assert!(mean < 0.01, "mean abs diff {mean} LSB");
    }

    #[test]
    fn int8_layer_tracks_the_unquantized_float_layer() {
        // Float weights, inputs and bias; quantize everything the way the network does and
        // compare the dequantized int8 output with the float conv of the original values.
        let mut r = SplitMix64::new(42);
        let shape = ConvShape {
            in_c: 16,
            out_c: 8,
            k: 3,
            stride: 2,
            pad: 1,
        };
        let (h, w) = (12, 14);
        let fan_in = 9 * 16;
        let a = (6.0 / fan_in as f32).sqrt();
        let wf: Vec<f32> = (0..8 * fan_in).map(|_| r.uniform(-a, a)).collect();
        let bf: Vec<f32> = (0..8).map(|_| r.uniform(-0.05, 0.05)).collect();
        let xf: Vec<f32> = (0..h * w * 16).map(|_| r.uniform(-1.0, 1.0)).collect();
        let in_q = QParams::from_min_max(-1.0, 1.0);
        let (wq, ws) = quantize_weights_per_channel(&wf, 8);
        let bias: Vec<i32> = (0..8)
            .map(|c| quantize_bias(bf[c], in_q.scale, ws[c]))
            .collect();
        // The float layer, on the original weights (no quantization anywhere).
        let float_conv = |x: &[f32]| -> Vec<f32> {
            let (oh, ow) = (6, 7);
            let mut y = vec![0f32; oh * ow * 8];
            for oy in 0..oh {
                for ox in 0..ow {
                    for oc in 0..8 {
                        let mut acc = f64::from(bf[oc]);
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let iy = (oy * 2 + ky) as i64 - 1;
                                let ix = (ox * 2 + kx) as i64 - 1;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                for ic in 0..16 {
                                    acc += f64::from(x[(iy as usize * w + ix as usize) * 16 + ic])
                                        * f64::from(wf[((oc * 3 + ky) * 3 + kx) * 16 + ic]);
                                }
                            }
                        }
                        y[(oy * ow + ox) * 8 + oc] = acc as f32;
                    }
                }
            }
            y
        };
        let yf = float_conv(&xf);
        let (lo, hi) = yf
            .iter()
            .fold((0f32, 0f32), |(l, u), &v| (l.min(v), u.max(v)));
        let out_q = QParams::from_min_max(lo, hi);
        let conv = Conv2d::new(shape, wq, ws, bias, in_q, out_q, false).unwrap();
        let xq: Vec<i8> = xf.iter().map(|&v| quantize(v, in_q)).collect();
        let mut yq = vec![0i8; yf.len()];
        conv.forward(&xq, h, w, &mut yq).unwrap();
        let mean_err = yq
            .iter()
            .zip(&yf)
            .map(|(&q, &f)| f64::from((dequantize(q, out_q) - f).abs() / out_q.scale))
            .sum::<f64>()
            / yf.len() as f64;
        assert!(
            mean_err < 1.0,
            "mean abs error {mean_err} LSB of the output"
        );
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
    fn extreme_values_at_the_accumulator_bound_stay_exact() {
        let shape = ConvShape {
            in_c: 2,
            out_c: 2,
            k: 3,
            stride: 1,
            pad: 1,
        };
        let limit = i32::MAX - 18 * 32768;
        for (x, x_zp, w, bias) in [
            (127i8, -128i8, 127i8, limit),
            (-128, 127, 127, -limit),
            (127, -128, -128, -limit),
            (-128, -128, -128, limit),
            (-128, 127, -128, limit),
        ] {
            let conv = Conv2d::new(
                shape,
                vec![w; 36],
                vec![0.01, 0.02],
                vec![bias, -bias],
                QParams::new(0.01, x_zp),
                QParams::new(1e3, 3),
                false,
            )
            .unwrap();
            let input = vec![x; 4 * 4 * 2];
            let mut out = vec![0i8; 4 * 4 * 2];
            conv.forward(&input, 4, 4, &mut out).unwrap();
            assert_eq!(out, reference_forward_i64(&conv, &input, 4, 4).unwrap());
        }
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
