//! What a [`Program`] reports about itself for `redline model info` and `profile`: every
//! step's name and multiply-accumulates, and the general kernel's share. Load and report
//! time only; never on the run path.

use super::{kernels, ConvImpl, FloatPool, NormOp, Program, Step};

/// A convolution step's name in profiles (`conv 3x3/1 64>64 56x56`; the general kernel's
/// with a star unless it runs dense per-group layers, and its groups) followed by `suffix`,
/// and its multiply-accumulates over `batch` images.
fn conv_name(
    imp: &ConvImpl,
    batch: usize,
    in_h: usize,
    in_w: usize,
    suffix: &str,
) -> (String, u64) {
    match imp {
        ConvImpl::Dense(c) => {
            let (oh, ow) = c.out_hw(in_h, in_w);
            let name = format!(
                "conv {k}x{k}/{s} {i}>{o} {oh}x{ow}{suffix}",
                k = c.k,
                s = c.stride,
                i = c.in_c,
                o = c.out_c
            );
            (name, c.macs(in_h, in_w) * batch as u64)
        }
        ConvImpl::General(g) => {
            let w = &g.win;
            // Grouped ones on the dense kernels carry no star.
            let star = if g.grouped.is_empty() { "*" } else { "" };
            let name = format!(
                "conv{star} {}x{}/{} {}>{} g{} {}x{}{suffix}",
                w.kh, w.kw, w.sh, g.in_c, g.out_c, g.groups, w.out_h, w.out_w
            );
            (name, g.macs(batch))
        }
    }
}

impl Program {
    /// Name and multiply-accumulates of every step.
    pub fn step_macs(&self) -> Vec<(String, u64)> {
        self.steps
            .iter()
            .map(|s| {
                let (name, macs) = match s {
                    Step::Input { .. } => ("input", 0),
                    Step::Output { .. } => ("output", 0),
                    Step::Quantize { .. } => ("quantize", 0),
                    Step::Conv {
                        imp,
                        batch,
                        in_h,
                        in_w,
                        residual,
                        ..
                    } => {
                        let add = if residual.is_some() { " + add" } else { "" };
                        return conv_name(imp, *batch, *in_h, *in_w, add);
                    }
                    Step::ConvFloat {
                        imp,
                        batch,
                        in_h,
                        in_w,
                        ..
                    } => return conv_name(imp, *batch, *in_h, *in_w, " float out"),
                    Step::Dequantize { .. } => ("dequantize", 0),
                    Step::FloatBinary { .. } => ("float binary", 0),
                    Step::FloatBinaryBroadcast { .. } => ("float binary broadcast", 0),
                    Step::FloatRepeat { .. } => ("float expand", 0),
                    Step::FloatReduce { .. } => ("float reduce", 0),
                    Step::FloatBinaryConst { .. } => ("float binary with a constant", 0),
                    Step::FloatPool {
                        kind: FloatPool::Max,
                        ..
                    } => ("float maxpool", 0),
                    Step::FloatPool { .. } => ("float avgpool", 0),
                    Step::FloatGlobalAvgPool { .. } => ("float global avgpool", 0),
                    Step::FloatResize { .. } => ("float resize", 0),
                    Step::FloatGridSample { .. } => ("float grid sample", 0),
                    Step::Index(s) => (s.name(), 0),
                    Step::FloatUnary { .. } => ("float unary", 0),
                    Step::PackB { .. } => ("pack matmul operand", 0),
                    Step::FloatPackB { .. } => ("pack float matmul operand", 0),
                    Step::FloatConv { plan, .. } => {
                        let d = plan.dims();
                        ("float conv (unfolded in bands)", (d.m * d.k * d.n) as u64)
                    }
                    Step::FloatMatMul { dims: d, .. } => {
                        ("float matmul", (d.batch * d.m * d.k * d.n) as u64)
                    }
                    Step::FloatGroupedConv {
                        win, dims, batch, ..
                    } => (
                        "float grouped conv",
                        (batch * win.out_h * dims.row_macs(win)) as u64,
                    ),
                    Step::MatMulDyn { dims: d, .. } => {
                        ("matmul of two tensors", (d.batch * d.m * d.k * d.n) as u64)
                    }
                    Step::FloatNorm {
                        op: NormOp::LayerNorm { .. },
                        ..
                    } => ("float layernorm", 0),
                    Step::FloatNorm { .. } => ("float softmax", 0),
                    Step::Phases { .. } => ("dilation phases", 0),
                    Step::Unfold { .. } => ("unfold taps", 0),
                    Step::MaxPool { .. } => ("maxpool", 0),
                    Step::AvgPool {
                        split: Some(split), ..
                    } => return (format!("global avgpool in {} row chunks", split.chunks), 0),
                    Step::AvgPool { win, .. } if win.covers_image() => ("global avgpool", 0),
                    Step::AvgPool { .. } => ("avgpool", 0),
                    Step::Lut { .. } => ("table", 0),
                    Step::Binary { .. } => ("binary", 0),
                    Step::Transpose { .. } => ("transpose", 0),
                    Step::Pad { .. } => ("pad", 0),
                    Step::DeconvMerge { .. } => ("deconv merge", 0),
                    Step::Resize { .. } => ("resize", 0),
                    Step::Concat { .. } => ("concat", 0),
                };
                (name.to_string(), macs)
            })
            .collect()
    }

    /// Multiply-accumulates per run of the convolutions on the general kernel (grouped
    /// ones that run per-group dense layers and depthwise ones excluded).
    pub fn general_conv_macs(&self) -> u64 {
        self.general_macs_where(|g| g.grouped.is_empty() && !g.is_depthwise())
    }

    /// Multiply-accumulates per run on the depthwise kernel (one channel per group,
    /// `GeneralConv::depthwise` prepared).
    pub fn depthwise_conv_macs(&self) -> u64 {
        self.general_macs_where(|g| g.is_depthwise())
    }

    /// Multiply-accumulates per run of the general-path convolutions `keep` selects.
    fn general_macs_where(&self, keep: impl Fn(&kernels::GeneralConv) -> bool) -> u64 {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Conv {
                    imp: ConvImpl::General(g),
                    batch,
                    ..
                }
                | Step::ConvFloat {
                    imp: ConvImpl::General(g),
                    batch,
                    ..
                } if keep(g) => g.macs(*batch),
                _ => 0,
            })
            .sum()
    }
}
