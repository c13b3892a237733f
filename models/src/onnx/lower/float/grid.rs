//! `GridSample` (ONNX opset 16 and later, 2-D) on the float route: the image a float or
//! dequantized tensor moved to NHWC, the locations a constant (a precomputed view
//! transform) or a tensor computed this run (a flow field, deformable attention's offsets,
//! the ego-motion warp of a BEV feature cache), one [`Step::FloatGridSample`]
//! (`kernels::float::grid_sample_rows`: ONNX's formula, the same bits everywhere). Linear
//! and nearest interpolation with zeros, border and reflection padding; cubic and N-D
//! sampling are refused by name. Load time only; errors name the node.

use super::*;
use crate::onnx::kernels::float::{GridMode, GridPadding, GridSampleDims};
use crate::onnx::program::FloatOperand;

impl Lowerer<'_> {
    /// Lowers a `GridSample` node (see the module docs).
    pub(in crate::onnx::lower) fn grid_sample(&mut self, n: &Node) -> Result<(), EngineError> {
        let mode = match n.string("mode", "linear")?.as_str() {
            "linear" | "bilinear" => GridMode::Linear,
            "nearest" => GridMode::Nearest,
            m => {
                return Err(n.unsupported(format!(
                    "mode {m:?}: the native engine samples with \"linear\" (\"bilinear\") and \
                     \"nearest\"; run the model with --engine onnxruntime"
                )))
            }
        };
        let padding = match n.string("padding_mode", "zeros")?.as_str() {
            "zeros" => GridPadding::Zeros,
            "border" => GridPadding::Border,
            "reflection" => GridPadding::Reflection,
            p => return Err(n.unsupported(format!("padding_mode {p:?} is not an ONNX one"))),
        };
        let align_corners = n.int("align_corners", 0)? != 0;
        // `float_operand` gives a 4-D tensor in the layout asked for.
        let x = self.float_operand(n, 0, Layout::Nhwc)?;
        if x.shape.len() != 4 {
            return Err(n.unsupported(format!(
                "an input of shape {:?}: the native engine samples 4-D (NCHW) images; run the \
                 model with --engine onnxruntime",
                x.shape
            )));
        }
        let [batch, c, in_h, in_w] = dims4(&x.shape);
        let (grid, shape) = match self.input(n, 1)? {
            Val::C(k) => match k.data {
                ConstData::F32(v) => (FloatOperand::Const(v), k.shape),
                _ => return Err(n.unsupported("a grid that is not float32")),
            },
            _ => {
                let g = self.float_operand(n, 1, Layout::RowMajor)?;
                (FloatOperand::Buf(g.buf), g.shape)
            }
        };
        let [gb, out_h, out_w, two] = shape[..] else {
            return Err(n.unsupported(format!(
                "a grid of shape {shape:?}: it must be [N, H_out, W_out, 2]"
            )));
        };
        if gb != batch || two != 2 {
            return Err(n.unsupported(format!(
                "a grid of shape {shape:?} for images of shape {:?}: it must be [{batch}, \
                 H_out, W_out, 2]",
                x.shape
            )));
        }
        if let FloatOperand::Buf(g) = grid {
            self.touch(g);
        }
        self.touch(x.buf);
        let dst = self.new_buf(batch * out_h * out_w * c * 4);
        self.steps.push(Step::FloatGridSample {
            dims: GridSampleDims {
                c,
                in_h,
                in_w,
                out_h,
                out_w,
                mode,
                padding,
                align_corners,
            },
            batch,
            grid,
            src: x.buf,
            dst,
        });
        self.set_nhwc_f32(n, dst, vec![batch, c, out_h, out_w]);
        Ok(())
    }
}
