//! The portable scalar kernel: the reference every SIMD path must equal bit for bit, and
//! the path used where the CPU has no SIMD path (or a layer is too wide for one).
//!
//! Contract: `acc = bias + Σ (x − x_zp)·w` formed exactly in `i32` (interior pixels as
//! `Σ x·w − x_zp·Σw`, border pixels over their in-image taps only), then
//! [`crate::quant::requantize`]. Plain safe slice code that the compiler auto-vectorises.
//!
//! The input may be a channel view (`in_view`: `in_c` channels out of wider pixels), read
//! one pixel's channels at a time.
//!
//! Cost: `k·k·in_c` multiply-adds per output; no allocation, no stack buffer. Never: reads
//! outside the input or writes outside the requested rows and channel slot.

use super::{ChannelSlot, Conv2d};
use crate::quant::requantize;
use std::ops::Range;

/// What the scalar kernel stores for one output: the requantized byte (`i8`), or the exact
/// accumulator itself (`i32`: a convolution whose float output goes on unquantized).
pub(super) trait ScalarOut: Copy {
    fn from_acc(layer: &Conv2d, oc: usize, acc: i32) -> Self;
}

impl ScalarOut for i8 {
    #[inline(always)]
    fn from_acc(layer: &Conv2d, oc: usize, acc: i32) -> i8 {
        requantize(
            acc,
            layer.multipliers[oc],
            layer.out_q.zero_point,
            layer.relu,
        )
    }
}

impl ScalarOut for i32 {
    #[inline(always)]
    fn from_acc(_: &Conv2d, _: usize, acc: i32) -> i32 {
        acc
    }
}

impl Conv2d {
    /// The scalar reference kernel (same contract as `Conv2d::run_rows`), storing bytes or
    /// accumulators ([`ScalarOut`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_rows_scalar<O: ScalarOut>(
        &self,
        input: &[i8],
        in_h: usize,
        in_w: usize,
        out_w: usize,
        dst: &mut [O],
        slot: ChannelSlot,
        in_view: ChannelSlot,
        rows: Range<usize>,
    ) {
        let (in_c, k, s, p) = (self.in_c, self.k, self.stride, self.pad);
        let (px_stride, px_off) = (in_view.pixel_stride, in_view.channel_offset);
        let x_zp = i32::from(self.in_q.zero_point);
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
                // Taps of one kernel row: kx0..kx1, contiguous in the weights; in the input
                // one run for a dense input, `in_c` channels per pixel for a channel view.
                let span = (kx1 - kx0) * in_c;
                let (piece, step) = if px_stride == in_c {
                    (span.max(1), 0)
                } else {
                    (in_c, px_stride)
                };
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
                            let first = (iy * in_w + first_col) * px_stride + px_off;
                            let ws = &w_oc[ky * k * in_c..][..span];
                            for (j, ws) in ws.chunks(piece).enumerate() {
                                acc += dot(&input[first + j * step..][..ws.len()], ws);
                            }
                        }
                    } else {
                        for ky in ky0..ky1 {
                            let iy = y_origin + ky - p;
                            let first = (iy * in_w + first_col) * px_stride + px_off;
                            let ws = &w_oc[(ky * k + kx0) * in_c..][..span];
                            for (j, ws) in ws.chunks(piece).enumerate() {
                                acc += dot_zp(&input[first + j * step..][..ws.len()], ws, x_zp);
                            }
                        }
                    }
                    *o = O::from_acc(self, oc, acc);
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

#[cfg(test)]
mod tests {
    kernel_tests!(crate::conv::KernelPath::Scalar);
}
