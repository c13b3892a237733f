//! The checks that every shape reaching a kernel fits its 32-bit parameters (an
//! [`EngineError::Unsupported`] naming the step otherwise, never a wrong result), and the
//! launch grids they bound.

use super::BLOCK;
use crate::engine::cuda::params::{Win, MAX_RANK};
use crate::engine::EngineError;
use crate::onnx::kernels::Window;

/// `v` as a kernel's `int` parameter, or the step's refusal.
pub(in crate::engine::cuda) fn i32_of(
    v: usize,
    step: usize,
    what: &str,
) -> Result<i32, EngineError> {
    i32::try_from(v).map_err(|_| EngineError::Unsupported {
        node: format!("step {step}"),
        op: what.to_string(),
        reason: format!(
            "{v} does not fit the CUDA kernels' 32-bit indices; split the model or run it \
             on the native engine"
        ),
    })
}

/// A one-dimensional grid over `n` elements, `run` consecutive ones per thread, in blocks of
/// [`BLOCK`]. Kernels compute a thread's first element, `thread × run`, in a 32-bit `int`,
/// so it must fit an i32 for every thread of the grid, the last block's spare ones included.
pub(in crate::engine::cuda) fn grid_for_runs(
    n: usize,
    run: usize,
    step: usize,
    what: &str,
) -> Result<(u32, u32, u32), EngineError> {
    let blocks = n.div_ceil(run).div_ceil(BLOCK as usize).max(1);
    let last_first = (blocks.saturating_mul(BLOCK as usize) - 1).saturating_mul(run);
    i32_of(last_first, step, what)?;
    // Fits: the check above bounds `blocks` by 2^31 / BLOCK.
    Ok((blocks as u32, 1, 1))
}

/// [`grid_for_runs`] with one element per thread.
pub(in crate::engine::cuda) fn grid_for(
    n: usize,
    step: usize,
    what: &str,
) -> Result<(u32, u32, u32), EngineError> {
    grid_for_runs(n, 1, step, what)
}

/// A window as the kernels' `Win`.
pub(in crate::engine::cuda) fn win_of(w: &Window, step: usize) -> Result<Win, EngineError> {
    let f = |v: usize| i32_of(v, step, "window");
    Ok(Win {
        in_h: f(w.in_h)?,
        in_w: f(w.in_w)?,
        out_h: f(w.out_h)?,
        out_w: f(w.out_w)?,
        kh: f(w.kh)?,
        kw: f(w.kw)?,
        sh: f(w.sh)?,
        sw: f(w.sw)?,
        dh: f(w.dh)?,
        dw: f(w.dw)?,
        pt: f(w.pt)?,
        pl: f(w.pl)?,
    })
}

/// A shape or stride list as the kernels' fixed-rank `int` arrays (zero past its rank).
pub(in crate::engine::cuda) fn rank_arrays(
    v: &[usize],
    step: usize,
    what: &str,
) -> Result<[i32; MAX_RANK], EngineError> {
    if v.len() > MAX_RANK {
        return Err(EngineError::Unsupported {
            node: format!("step {step}"),
            op: what.to_string(),
            reason: format!(
                "rank {} is above the CUDA kernels' {MAX_RANK}; reshape the model or run it \
                 on the native engine",
                v.len()
            ),
        });
    }
    let mut a = [0i32; MAX_RANK];
    for (d, &x) in a.iter_mut().zip(v) {
        *d = i32_of(x, step, what)?;
    }
    Ok(a)
}
