//! The dense routes a convolution's lowering takes besides the direct dense kernel (see
//! the parent module): its taps unfolded into channels for a pointwise dense layer
//! ([`Unfold`]), and a dilated "same" convolution as dense convolutions of its dilation
//! phases ([`Phases`]). Each emits its steps and returns what the convolution's step reads
//! or the output buffer; the unfold returns `None`, emitting nothing, to leave the
//! convolution to the general kernel.

use super::*;

impl Lowerer<'_> {
    /// Emits an ungrouped convolution as an unfold of its taps into channels and a pointwise
    /// dense convolution of the unfolded image ([`Unfold`]), when the unfolded image is
    /// small enough and the dense layer can be built (its accumulator bound holds); returns
    /// the output buffer (`batch × out_h × out_w × out_c`, NHWC), or `None` to leave the
    /// convolution to the general kernel. `packed`: `[out_c, kh, kw, in_c]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn unfolded_conv(
        &mut self,
        packed: &[i8],
        win: &Window,
        (batch, in_c, out_c, groups): (usize, usize, usize, usize),
        src: usize,
        (w_scales, bias): (&[f32], &[i32]),
        (x_q, y_q, relu): (QParams, QParams, bool),
        clamp: Option<(i8, i8)>,
    ) -> Option<usize> {
        let (layer, unfolded) = self.unfold(
            packed,
            win,
            (batch, in_c, out_c, groups),
            src,
            (w_scales, bias),
            (x_q, y_q, relu),
        )?;
        self.touch(unfolded);
        let dst = self.new_buf(batch * win.out_h * win.out_w * out_c);
        self.steps.push(Step::Conv {
            imp: ConvImpl::Dense(Box::new(layer)),
            batch,
            in_h: win.out_h,
            in_w: win.out_w,
            out_h: win.out_h,
            row_len: win.out_w * out_c,
            src: unfolded,
            dst,
            clamp,
            residual: None,
        });
        Some(dst)
    }

    /// The float route's [`Self::unfolded_conv`]: emits the unfold of `x` and returns the
    /// pointwise dense layer over it (bias 0: the float bias comes after the integer sum)
    /// with the unfolded image as a tensor, or `None` (nothing emitted) when the image is
    /// too large or the layer cannot be built.
    pub(super) fn unfold_for_float(
        &mut self,
        packed: &[i8],
        win: &Window,
        (batch, in_c, out_c, groups): (usize, usize, usize, usize),
        x: &T,
        w_scales: &[f32],
        x_q: QParams,
    ) -> Option<(Conv2d, T)> {
        let bias = vec![0; out_c];
        let (layer, unfolded) = self.unfold(
            packed,
            win,
            (batch, in_c, out_c, groups),
            x.buf,
            (w_scales, &bias),
            (x_q, x_q, false),
        )?;
        let t = T {
            buf: unfolded,
            shape: vec![batch, layer.in_c, win.out_h, win.out_w],
            layout: Layout::Nhwc,
            q: x_q,
        };
        Some((layer, t))
    }

    /// The pointwise dense layer over `win`'s unfolded taps (`kh · kw · in_c` channels) and
    /// the `Step::Unfold` that writes its input from `src`; returns the layer and the
    /// unfolded buffer, or `None`, emitting nothing, when this lowering does not unfold
    /// ([`lower`]'s `unfold_convs`), the convolution is grouped or its unfolded image would
    /// be too large ([`Unfold::of`]), or the layer cannot be built (its accumulator bound).
    pub(super) fn unfold(
        &mut self,
        packed: &[i8],
        win: &Window,
        (batch, in_c, out_c, groups): (usize, usize, usize, usize),
        src: usize,
        (w_scales, bias): (&[f32], &[i32]),
        (x_q, y_q, relu): (QParams, QParams, bool),
    ) -> Option<(Conv2d, usize)> {
        if !self.unfold_convs {
            return None;
        }
        let unfold = Unfold::of(win, in_c, batch, groups)?;
        let shape = unfold.pointwise(in_c, out_c);
        let (w, b) = (packed.to_vec(), bias.to_vec());
        let layer = Conv2d::new(shape, w, w_scales.to_vec(), b, x_q, y_q, relu).ok()?;
        self.touch(src);
        let unfolded = self.new_buf(batch * win.out_h * win.out_w * unfold.channels(in_c));
        self.steps.push(Step::Unfold {
            unfold,
            c: in_c,
            batch,
            fill: x_q.zero_point,
            src,
            dst: unfolded,
        });
        Some((layer, unfolded))
    }

    /// Emits a dilated convolution as three steps (see [`Phases`]): split the input into
    /// its `dh·dw` dilation phases, run `layer` (the same weights, dilation 1) on the
    /// `batch·dh·dw` phase images with the dense kernels, merge the phase outputs. Returns the
    /// output buffer (`batch × h × w × out_c`, NHWC).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn phased_conv(
        &mut self,
        layer: Conv2d,
        phases: Phases,
        batch: usize,
        in_c: usize,
        out_c: usize,
        src: usize,
        x_q: QParams,
        clamp: Option<(i8, i8)>,
    ) -> usize {
        let images = batch * phases.count();
        self.touch(src);
        let split = self.new_buf(images * phases.ph() * phases.pw() * in_c);
        self.steps.push(Step::Phases {
            phases,
            dir: PhaseDir::Split {
                fill: x_q.zero_point,
            },
            c: in_c,
            batch,
            src,
            dst: split,
        });
        self.touch(split);
        let conv_out = self.new_buf(images * phases.ph() * phases.pw() * out_c);
        self.steps.push(Step::Conv {
            imp: ConvImpl::Dense(Box::new(layer)),
            batch: images,
            in_h: phases.ph(),
            in_w: phases.pw(),
            out_h: phases.ph(),
            row_len: phases.pw() * out_c,
            src: split,
            dst: conv_out,
            clamp,
            residual: None,
        });
        self.touch(conv_out);
        let dst = self.new_buf(batch * phases.h * phases.w * out_c);
        self.steps.push(Step::Phases {
            phases,
            dir: PhaseDir::Merge,
            c: out_c,
            batch,
            src: conv_out,
            dst,
        });
        dst
    }
}
