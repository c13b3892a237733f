//! The crate's error type, [`ModelError`], and the two buffer-length checks every layer
//! and network uses.
//!
//! Contract: variants raised by per-frame calls carry only numbers and `&'static str`s, so
//! reporting an error on the hot path never allocates; construction-time variants carry a
//! message saying what is wrong and what to do. Never: no panics, no I/O.

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
