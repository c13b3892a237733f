//! The float route's steps as CUDA launches: what a TensorRT-style Q/DQ placement leaves
//! between a float-output convolution and the next QuantizeLinear (dequantization, float
//! binaries, activations, max and global average pooling). One launch per step, each kernel
//! one IEEE operation per CPU operation (kernels.cu's "Float steps"), so the same bits as
//! `kernels::float`. The float steps without a kernel yet are refused by name (`float
//! step`), never approximated.

use super::fit::{grid_for, i32_of, win_of};
use super::{Consts, BLOCK};
use crate::engine::cuda::params::{CopyP, FBinP, FGapP, FUnP, Kernel, Params, PoolP};
use crate::engine::EngineError;
use crate::onnx::program::{FloatBinaryOp, FloatPool, FloatUnaryOp, Step};

/// One launch: kernel, grid, block, parameters.
pub(super) type Launch1 = (Kernel, (u32, u32, u32), u32, Params);

/// The launch of float-route step `si`, or its refusal. `buf` maps a buffer to its
/// region-tagged address; constants go to `c`.
pub(super) fn launch(
    step: &Step,
    si: usize,
    buf: &dyn Fn(usize) -> u64,
    c: &mut Consts,
) -> Result<Launch1, EngineError> {
    // A one-dimensional grid over `n` outputs, one per thread.
    let elementwise = |kernel: Kernel, n: usize, what: &str, params: Params| {
        Ok((kernel, grid_for(n, si, what)?, BLOCK, params))
    };
    let refuse = |reason: String| EngineError::Unsupported {
        node: format!("step {si}"),
        op: "float step".to_string(),
        reason,
    };
    match step {
        Step::Dequantize {
            src,
            dst,
            n,
            scale,
            zp,
        } => {
            // `(x − zp) · scale`: the output copy's dequantizing mode.
            let p = CopyP {
                x: buf(*src),
                y: buf(*dst),
                n: i32_of(*n, si, "dequantize")?,
                mode: 2,
                zp: *zp,
                scale: *scale,
            };
            elementwise(Kernel::CopyIo, *n, "dequantize", Params::Copy(p))
        }
        Step::FloatBinary { op, a, b, n, dst } => {
            let p = FBinP {
                a: buf(*a),
                b: buf(*b),
                y: buf(*dst),
                n: i32_of(*n, si, "float binary")?,
                op: float_op(*op),
                ..FBinP::default()
            };
            elementwise(Kernel::FloatBinary, *n, "float binary", Params::FBin(p))
        }
        Step::FloatBinaryConst {
            op,
            x,
            konst,
            x_is_a,
            n,
            dst,
        } => {
            let k: &[f32] = if konst.is_empty() { &[0.0] } else { konst };
            let p = FBinP {
                a: buf(*x),
                b: c.push_f32(k),
                y: buf(*dst),
                n: i32_of(*n, si, "float binary")?,
                op: float_op(*op),
                swap: i32::from(!*x_is_a),
                mode: 1,
                period: i32_of(k.len(), si, "float binary")?,
                inner: 0,
            };
            elementwise(Kernel::FloatBinary, *n, "float binary", Params::FBin(p))
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
            let (times, inner) = ((*times).max(1), (*inner).max(1));
            let n = outer * times * inner;
            let what = "float binary broadcast";
            let p = FBinP {
                a: buf(*full),
                b: buf(*part),
                y: buf(*dst),
                n: i32_of(n, si, what)?,
                op: float_op(*op),
                swap: i32::from(!*full_is_a),
                mode: 2,
                period: i32_of(times * inner, si, what)?,
                inner: i32_of(inner, si, what)?,
            };
            elementwise(Kernel::FloatBinary, n, what, Params::FBin(p))
        }
        Step::FloatUnary { op, src, dst, n } => {
            let Some((code, a, b)) = unary_code(*op) else {
                return Err(refuse(format!(
                    "the float function {op:?} is not on the CUDA engine yet; run the model \
                     on the native engine or with --engine onnxruntime"
                )));
            };
            let p = FUnP {
                x: buf(*src),
                y: buf(*dst),
                n: i32_of(*n, si, "float unary")?,
                op: code,
                a,
                b,
            };
            elementwise(Kernel::FloatUnary, *n, "float unary", Params::FUn(p))
        }
        Step::FloatPool {
            kind: FloatPool::Max,
            win,
            c: ch,
            batch,
            src,
            dst,
        } => {
            let n = batch * win.out_h * win.out_w * ch;
            i32_of(n, si, "float maxpool")?;
            let p = PoolP {
                x: buf(*src),
                y: buf(*dst),
                win: win_of(win, si)?,
                c: i32_of(*ch, si, "float maxpool")?,
                batch: i32_of(*batch, si, "float maxpool")?,
                ..PoolP::default()
            };
            elementwise(Kernel::FloatMaxPool, n, "float maxpool", Params::Pool(p))
        }
        Step::FloatGlobalAvgPool {
            c: ch,
            hw,
            batch,
            src,
            dst,
        } => {
            let n = batch * ch;
            let what = "float global avgpool";
            i32_of(batch * ch * hw, si, what)?;
            let p = FGapP {
                x: buf(*src),
                y: buf(*dst),
                n: i32_of(n, si, what)?,
                c: i32_of((*ch).max(1), si, what)?,
                hw: i32_of(*hw, si, what)?,
            };
            elementwise(Kernel::FloatGlobalAvgPool, n, what, Params::FGap(p))
        }
        Step::FloatRepeat { .. }
        | Step::FloatReduce { .. }
        | Step::FloatPool { .. }
        | Step::FloatResize { .. }
        | Step::FloatNorm { .. } => Err(refuse(
            "this step computed in float (a float average pool, resize, reduction, Expand, \
             LayerNorm or Softmax between a float-output convolution and its QuantizeLinear) \
             is not on the CUDA engine yet; run the model on the native engine or with \
             --engine onnxruntime"
                .to_string(),
        )),
        _ => Err(EngineError::Invalid {
            reason: format!("step {si}: not a float-route step"),
        }),
    }
}

/// kernels.cu `float_unary`'s operator code and its two parameters, for the functions it
/// has (None: the step is refused).
fn unary_code(op: FloatUnaryOp) -> Option<(i32, f32, f32)> {
    Some(match op {
        FloatUnaryOp::Clamp { lo, hi } => (0, lo, hi),
        FloatUnaryOp::Sigmoid => (1, 0.0, 0.0),
        FloatUnaryOp::HardSigmoid { alpha, beta } => (2, alpha, beta),
        FloatUnaryOp::HardSwish => (3, 0.0, 0.0),
        FloatUnaryOp::LeakyRelu { alpha } => (4, alpha, 0.0),
        FloatUnaryOp::Neg => (5, 0.0, 0.0),
        FloatUnaryOp::Exp => (6, 0.0, 0.0),
        FloatUnaryOp::Sqrt => (7, 0.0, 0.0),
        FloatUnaryOp::Reciprocal => (8, 0.0, 0.0),
        FloatUnaryOp::Abs => (9, 0.0, 0.0),
        FloatUnaryOp::Square => (10, 0.0, 0.0),
        FloatUnaryOp::Tanh
        | FloatUnaryOp::Softplus
        | FloatUnaryOp::Mish
        | FloatUnaryOp::Erf
        | FloatUnaryOp::Gelu { .. }
        | FloatUnaryOp::Log
        | FloatUnaryOp::Sin
        | FloatUnaryOp::Cos => return None,
    })
}

/// kernels.cu `float_binary`'s operator code.
fn float_op(op: FloatBinaryOp) -> i32 {
    match op {
        FloatBinaryOp::Add => 0,
        FloatBinaryOp::Sub => 1,
        FloatBinaryOp::Mul => 2,
        FloatBinaryOp::Div => 3,
    }
}
