//! Steps over integer tensors computed at run time: `TopK`'s indices and what a model does
//! with them (a detection transformer's query selection: integer arithmetic, comparisons,
//! `Where`, then `Gather`/`GatherElements` of feature rows by those indices).
//!
//! Contract: an integer tensor is `i64` values, row-major, in a planned buffer (a bool one
//! holds 0 or 1). Every step here runs on the calling lane, in index order: these tensors
//! are a few hundred to a few hundred thousand elements, where a split over lanes costs
//! more than it saves, and one order is one result on any lane count. No step allocates
//! (`TopK` orders a planned `u32` scratch in place), locks or panics: an index out of
//! range, or an integer division by zero, ends the run with an error naming it (ONNX
//! Runtime also refuses both), never a read outside a buffer.
//!
//! `TopK` orders by value, then by index (the smaller index first among equal values, as
//! ONNX Runtime's CPU kernel breaks ties), on a total order: `-0.0` ranks as `+0.0`, a NaN
//! above every number for `largest` (below for smallest) — ONNX leaves NaN's rank open.
//! `sorted = 0` returns the same sorted order (the spec allows any order).

use super::chunks::SendPtr;
use super::Buffer;
use crate::engine::EngineError;

/// An integer operand: an `i64` buffer, or values the step holds.
#[derive(Clone, Debug)]
pub(crate) enum IntSrc {
    Buf(usize),
    Const(Vec<i64>),
}

impl IntSrc {
    /// Its buffer, if it reads one.
    pub(crate) fn buf(&self) -> Option<usize> {
        match self {
            IntSrc::Buf(b) => Some(*b),
            IntSrc::Const(_) => None,
        }
    }
}

/// An operand of [`IndexStep::Map`] read through `strides` over the output's dimensions
/// (0 along an axis it is broadcast over).
#[derive(Clone, Debug)]
pub(crate) struct IntArg {
    pub src: IntSrc,
    pub strides: Vec<usize>,
}

/// The data a gather reads: a buffer, or bytes the step holds (a constant table).
#[derive(Clone, Debug)]
pub(crate) enum GatherSrc {
    Buf(usize),
    Bytes(Vec<u8>),
}

impl GatherSrc {
    /// Its buffer, if it reads one.
    pub(crate) fn buf(&self) -> Option<usize> {
        match self {
            GatherSrc::Buf(b) => Some(*b),
            GatherSrc::Bytes(_) => None,
        }
    }
}

/// The elementwise operator of [`IndexStep::Map`] (ONNX semantics on `i64`; comparisons
/// and logical operators write 0 or 1, and read nonzero as true).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum IntOp {
    /// The operand, broadcast (`Expand`).
    Copy,
    /// `x != 0` (`Cast` to bool).
    NonZero,
    /// The low 32 bits, sign-extended (`Cast` to int32).
    Wrap32,
    Not,
    Add,
    Sub,
    Mul,
    /// Truncating toward zero (C); a zero divisor is a run error.
    Div,
    /// `fmod = 0`: the remainder takes the divisor's sign (Python's `%`); `fmod = 1`: the
    /// dividend's (C's). A zero divisor is a run error.
    Mod {
        fmod: bool,
    },
    Min,
    Max,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    /// `args[0] != 0 ? args[1] : args[2]`.
    Where,
}

impl IntOp {
    /// How many operands it reads.
    pub(crate) fn arity(self) -> usize {
        match self {
            IntOp::Copy | IntOp::NonZero | IntOp::Wrap32 | IntOp::Not => 1,
            IntOp::Where => 3,
            _ => 2,
        }
    }

    /// Whether its result is bool (0 or 1).
    pub(crate) fn is_bool(self) -> bool {
        matches!(
            self,
            IntOp::NonZero
                | IntOp::Not
                | IntOp::Equal
                | IntOp::Less
                | IntOp::Greater
                | IntOp::LessOrEqual
                | IntOp::GreaterOrEqual
                | IntOp::And
                | IntOp::Or
                | IntOp::Xor
        )
    }

    /// `op` of `a`, `b`, `c` (the unused ones ignored), or `None` for a zero divisor.
    fn apply(self, a: i64, b: i64, c: i64) -> Option<i64> {
        let t = |v: bool| i64::from(v);
        Some(match self {
            IntOp::Copy => a,
            IntOp::NonZero => t(a != 0),
            IntOp::Wrap32 => i64::from(a as i32),
            IntOp::Not => t(a == 0),
            IntOp::Add => a.wrapping_add(b),
            IntOp::Sub => a.wrapping_sub(b),
            IntOp::Mul => a.wrapping_mul(b),
            IntOp::Div if b == 0 => return None,
            IntOp::Div => a.wrapping_div(b),
            IntOp::Mod { .. } if b == 0 => return None,
            IntOp::Mod { fmod } => {
                let r = a.wrapping_rem(b);
                if fmod || r == 0 || (r < 0) == (b < 0) {
                    r
                } else {
                    r + b
                }
            }
            IntOp::Min => a.min(b),
            IntOp::Max => a.max(b),
            IntOp::Equal => t(a == b),
            IntOp::Less => t(a < b),
            IntOp::Greater => t(a > b),
            IntOp::LessOrEqual => t(a <= b),
            IntOp::GreaterOrEqual => t(a >= b),
            IntOp::And => t(a != 0 && b != 0),
            IntOp::Or => t(a != 0 || b != 0),
            IntOp::Xor => t((a != 0) != (b != 0)),
            IntOp::Where => {
                if a != 0 {
                    b
                } else {
                    c
                }
            }
        })
    }
}

/// One step over integer tensors (see the module docs).
#[derive(Clone, Debug)]
pub(crate) enum IndexStep {
    /// `op` of `args` (as many as `op.arity()`), each read through its broadcast strides,
    /// into `dst`: `i64` row-major `[dims]`.
    Map {
        op: IntOp,
        args: Vec<IntArg>,
        dims: Vec<usize>,
        dst: usize,
    },
    /// `n` `i64` of `src` as `f32` into `dst` (`Cast`; rounded to nearest, as C converts).
    ToFloat { src: usize, dst: usize, n: usize },
    /// `TopK`: for each of the `outer · inner` lines of `src` (`f32` `[outer, len, inner]`),
    /// the indices of its `k` largest (`largest`) or smallest values, in rank order, into
    /// `dst` (`i64` `[outer, k, inner]`); `scratch` holds `len` `u32`. The values are a
    /// [`IndexStep::GatherElements`] of `src` by these indices after it.
    TopK {
        src: usize,
        outer: usize,
        len: usize,
        inner: usize,
        k: usize,
        largest: bool,
        scratch: usize,
        dst: usize,
    },
    /// `ArgMax` (`max`) or `ArgMin`: for each of the `outer · inner` lines of `src`
    /// (`[outer, len, inner]`, `f32`, or `i8` codes when `codes`: a quantized tensor, whose
    /// codes order as its values do), the index of its first (or, `last`, its last)
    /// extreme value, into `dst` (`i64` `[outer, inner]`).
    ArgExtreme {
        src: usize,
        codes: bool,
        outer: usize,
        len: usize,
        inner: usize,
        max: bool,
        last: bool,
        dst: usize,
    },
    /// `Gather`: `data` (`[outer, axis_len, inner]` elements of `elem` bytes) at the
    /// `count` indices of `indices` (negative ones count from the end) along its middle
    /// axis, into `dst` (`[outer, count, inner]`).
    Gather {
        data: GatherSrc,
        elem: usize,
        outer: usize,
        axis_len: usize,
        inner: usize,
        indices: IntSrc,
        count: usize,
        dst: usize,
    },
    /// `GatherElements`: output element `p` (coordinates over `dims`, the indices' shape)
    /// is the element of `data` (`data_dims`, elements of `elem` bytes) at `p`'s
    /// coordinates with the one along `axis` replaced by index `p` of `indices`.
    GatherElements {
        data: GatherSrc,
        elem: usize,
        data_dims: Vec<usize>,
        axis: usize,
        indices: IntSrc,
        dims: Vec<usize>,
        dst: usize,
    },
}

impl IndexStep {
    /// The buffers it reads. Load time only: allocates.
    pub(crate) fn reads(&self) -> Vec<usize> {
        match self {
            IndexStep::Map { args, .. } => args.iter().filter_map(|a| a.src.buf()).collect(),
            IndexStep::ToFloat { src, .. }
            | IndexStep::TopK { src, .. }
            | IndexStep::ArgExtreme { src, .. } => vec![*src],
            IndexStep::Gather {
                data: d, indices, ..
            }
            | IndexStep::GatherElements {
                data: d, indices, ..
            } => [d.buf(), indices.buf()].into_iter().flatten().collect(),
        }
    }

    /// The buffer it writes.
    pub(crate) fn writes(&self) -> usize {
        match self {
            IndexStep::Map { dst, .. }
            | IndexStep::ToFloat { dst, .. }
            | IndexStep::TopK { dst, .. }
            | IndexStep::ArgExtreme { dst, .. }
            | IndexStep::Gather { dst, .. }
            | IndexStep::GatherElements { dst, .. } => *dst,
        }
    }

    /// A name for `model profile`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            IndexStep::Map { .. } => "integer elementwise",
            IndexStep::ToFloat { .. } => "integer to float",
            IndexStep::TopK { .. } => "top-k",
            IndexStep::ArgExtreme { max: true, .. } => "argmax",
            IndexStep::ArgExtreme { .. } => "argmin",
            IndexStep::Gather { .. } => "gather",
            IndexStep::GatherElements { .. } => "gather elements",
        }
    }

    /// Runs the step on the calling lane.
    pub(super) fn run(&self, base: SendPtr, bufs: &[Buffer]) -> Result<(), EngineError> {
        // SAFETY (every view below): each buffer lies inside the arena (`plan` sized it) at
        // a 64-byte aligned offset, so aligned for `i64`, `f32` and `u32`; a step's `dst`
        // and `scratch` are planned apart from every buffer live at the step (its inputs
        // included), and this call is the only code touching the arena while it runs.
        let base = &base;
        let ints = |b: usize| -> &[i64] {
            // SAFETY: as above; an `i64` buffer this step reads.
            unsafe { base.elems(bufs[b].offset, bufs[b].bytes / 8) }
        };
        let src_of = |s| int_src(s, base, bufs);
        let out_bytes = |b: usize| -> &mut [u8] {
            // SAFETY: as above; `b` is this step's own output.
            unsafe { base.elems_mut(bufs[b].offset, 0, bufs[b].bytes) }
        };
        match self {
            IndexStep::Map {
                op,
                args,
                dims,
                dst,
            } => {
                let out: &mut [i64] =
                    // SAFETY: as above; `dst` holds `i64` values.
                    unsafe { base.elems_mut(bufs[*dst].offset, 0, bufs[*dst].bytes / 8) };
                let arg = |i: usize| args.get(i).map(|a| (src_of(&a.src), &a.strides[..]));
                let (a, b, c) = (arg(0), arg(1), arg(2));
                let read = |x: Option<(&[i64], &[usize])>, p: usize| -> Option<i64> {
                    match x {
                        Some((v, s)) => v.get(offset(p, dims, s)).copied(),
                        None => Some(0),
                    }
                };
                for (p, o) in out.iter_mut().enumerate() {
                    let (Some(x), Some(y), Some(z)) = (read(a, p), read(b, p), read(c, p)) else {
                        return Err(EngineError::Run("integer operand shorter than planned"));
                    };
                    *o = op
                        .apply(x, y, z)
                        .ok_or(EngineError::Run("integer division or modulo by zero"))?;
                }
            }
            IndexStep::ToFloat { src, dst, n } => {
                let x = ints(*src);
                // SAFETY: as above; `dst` holds `n` `f32`.
                let y: &mut [f32] = unsafe { base.elems_mut(bufs[*dst].offset, 0, *n) };
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = x as f32;
                }
            }
            IndexStep::TopK {
                src,
                outer,
                len,
                inner,
                k,
                largest,
                scratch,
                dst,
            } => {
                let (len, inner, k) = (*len, *inner, *k);
                // SAFETY: as above; `src` holds `outer · len · inner` `f32`.
                let x: &[f32] = unsafe { base.elems(bufs[*src].offset, outer * len * inner) };
                // SAFETY: as above; `scratch` holds `len` `u32`, this step's alone.
                let order: &mut [u32] = unsafe { base.elems_mut(bufs[*scratch].offset, 0, len) };
                // SAFETY: as above; `dst` holds `outer · k · inner` `i64`.
                let out: &mut [i64] =
                    unsafe { base.elems_mut(bufs[*dst].offset, 0, outer * k * inner) };
                if k == 0 || k > len {
                    return Err(EngineError::Run("TopK's k outside its axis"));
                }
                for o in 0..*outer {
                    for i in 0..inner {
                        let value = |j: u32| x[(o * len + j as usize) * inner + i] + 0.0;
                        let rank = |a: &u32, b: &u32| {
                            let by_value = if *largest {
                                value(*b).total_cmp(&value(*a))
                            } else {
                                value(*a).total_cmp(&value(*b))
                            };
                            by_value.then(a.cmp(b))
                        };
                        for (j, e) in order.iter_mut().enumerate() {
                            *e = j as u32;
                        }
                        if k < len {
                            order.select_nth_unstable_by(k - 1, rank);
                        }
                        order[..k].sort_unstable_by(rank);
                        for (r, &j) in order[..k].iter().enumerate() {
                            out[(o * k + r) * inner + i] = i64::from(j);
                        }
                    }
                }
            }
            IndexStep::ArgExtreme {
                src,
                codes,
                outer,
                len,
                inner,
                max,
                last,
                dst,
            } => {
                let (n, out_len) = (outer * len * inner, outer * inner);
                // SAFETY: as above; `dst` holds `outer · inner` `i64`.
                let out: &mut [i64] = unsafe { base.elems_mut(bufs[*dst].offset, 0, out_len) };
                if *codes {
                    // SAFETY: as above; `src` holds `n` `i8` codes.
                    let x: &[i8] = unsafe { base.elems(bufs[*src].offset, n) };
                    arg_extreme(x, *len, *inner, *max, *last, out);
                } else {
                    // SAFETY: as above; `src` holds `n` `f32`.
                    let x: &[f32] = unsafe { base.elems(bufs[*src].offset, n) };
                    arg_extreme(x, *len, *inner, *max, *last, out);
                }
            }
            IndexStep::Gather {
                data,
                elem,
                outer,
                axis_len,
                inner,
                indices,
                count,
                dst,
            } => {
                let (data, idx) = (gather_src(data, base, bufs), src_of(indices));
                let out = out_bytes(*dst);
                let run = inner * elem;
                let rows = out.chunks_exact_mut(run.max(1)).take(outer * count);
                for (r, y) in rows.enumerate() {
                    let (o, j) = (r / count.max(&1), r % count.max(&1));
                    let at = resolve(idx.get(j).copied(), *axis_len)
                        .ok_or(EngineError::Run("Gather index out of range"))?;
                    let from = (o * axis_len + at) * run;
                    let x = data
                        .get(from..from + run)
                        .ok_or(EngineError::Run("Gather data shorter than planned"))?;
                    y.copy_from_slice(x);
                }
            }
            IndexStep::GatherElements {
                data,
                elem,
                data_dims,
                axis,
                indices,
                dims,
                dst,
            } => {
                let (data, idx) = (gather_src(data, base, bufs), src_of(indices));
                let out = out_bytes(*dst);
                for (p, y) in out.chunks_exact_mut((*elem).max(1)).enumerate() {
                    let at = resolve(idx.get(p).copied(), data_dims[*axis])
                        .ok_or(EngineError::Run("GatherElements index out of range"))?;
                    // `p`'s coordinates over `dims`, placed in `data` with `at` on `axis`.
                    let (mut rest, mut from, mut stride) = (p, 0, 1);
                    for d in (0..dims.len()).rev() {
                        let coord = rest % dims[d].max(1);
                        rest /= dims[d].max(1);
                        from += if d == *axis { at } else { coord } * stride;
                        stride *= data_dims[d];
                    }
                    let x = data
                        .get(from * elem..(from + 1) * elem)
                        .ok_or(EngineError::Run("GatherElements data shorter than planned"))?;
                    y.copy_from_slice(x);
                }
            }
        }
        Ok(())
    }
}

/// For each line of `x` (`[outer, len, inner]`; `out` `[outer, inner]`), the index of its
/// first (`last`: last) largest (`max`) or smallest value. A line's values are compared
/// with `>`/`<` as they come (ONNX Runtime's rule: a NaN never replaces the current
/// extreme, and one first in its line stays). Lines across `inner` (a class map's pixels)
/// are scanned a tile of 1024 at a time, each of the `len` rows of a tile read in order,
/// their current extremes on the stack.
fn arg_extreme<T: Lane>(x: &[T], len: usize, inner: usize, max: bool, last: bool, out: &mut [i64]) {
    // One monomorphized scan per rule, so the tile loop's compare and blends vectorise.
    match (max, last) {
        (true, false) => scan(x, len, inner, out, |v, b| v > b),
        (true, true) => scan(x, len, inner, out, |v, b| v >= b),
        (false, false) => scan(x, len, inner, out, |v, b| v < b),
        (false, true) => scan(x, len, inner, out, |v, b| v <= b),
    }
}

/// [`arg_extreme`] with `better(v, best)` the rule that replaces the current extreme.
fn scan<T: Lane>(
    x: &[T],
    len: usize,
    inner: usize,
    out: &mut [i64],
    better: impl Fn(T, T) -> bool + Copy,
) {
    const TILE: usize = 1024;
    let inner = inner.max(1);
    for (block, out) in x.chunks_exact(len * inner).zip(out.chunks_exact_mut(inner)) {
        if inner == 1 {
            let mut arg = 0;
            for (j, &v) in block.iter().enumerate().skip(1) {
                if better(v, block[arg]) {
                    arg = j;
                }
            }
            out[0] = arg as i64;
            continue;
        }
        for (t, out) in out.chunks_mut(TILE).enumerate() {
            let (first, w) = (t * TILE, out.len());
            let mut best = [T::default(); TILE];
            let mut args = [0u32; TILE];
            best[..w].copy_from_slice(&block[first..first + w]);
            for j in 1..len {
                let row = &block[j * inner + first..j * inner + first + w];
                for ((b, a), &v) in best.iter_mut().zip(args.iter_mut()).zip(row) {
                    // Bit-mask blends, not branches: the compare and both blends vectorise
                    // (a branch on random scores mispredicts half the time).
                    let keep = u32::from(better(v, *b)).wrapping_sub(1);
                    *b = T::from_bits((v.to_bits() & !keep) | (b.to_bits() & keep));
                    *a = (j as u32 & !keep) | (*a & keep);
                }
            }
            for (o, &a) in out.iter_mut().zip(&args) {
                *o = i64::from(a);
            }
        }
    }
}

/// An element [`arg_extreme`] compares: ordered as its values, blended through its bits.
trait Lane: Copy + Default + PartialOrd {
    fn to_bits(self) -> u32;
    fn from_bits(bits: u32) -> Self;
}

impl Lane for f32 {
    fn to_bits(self) -> u32 {
        f32::to_bits(self)
    }
    fn from_bits(bits: u32) -> Self {
        f32::from_bits(bits)
    }
}

impl Lane for i8 {
    fn to_bits(self) -> u32 {
        u32::from(self as u8)
    }
    fn from_bits(bits: u32) -> Self {
        bits as u8 as i8
    }
}

/// The values of `s`: its buffer's (see [`IndexStep::run`]'s safety note) or its own.
fn int_src<'a>(s: &'a IntSrc, base: &'a SendPtr, bufs: &[Buffer]) -> &'a [i64] {
    match s {
        // SAFETY: as in `IndexStep::run`: a planned buffer, aligned, not written while read.
        IntSrc::Buf(b) => unsafe { base.elems(bufs[*b].offset, bufs[*b].bytes / 8) },
        IntSrc::Const(v) => v,
    }
}

/// The bytes a gather reads: its buffer's (see [`IndexStep::run`]'s safety note) or its own.
fn gather_src<'a>(s: &'a GatherSrc, base: &'a SendPtr, bufs: &[Buffer]) -> &'a [u8] {
    match s {
        // SAFETY: as in `IndexStep::run`: a planned buffer, not written while read.
        GatherSrc::Buf(b) => unsafe { base.elems(bufs[*b].offset, bufs[*b].bytes) },
        GatherSrc::Bytes(v) => v,
    }
}

/// Index `i` (negative counts from the end) into an axis of `len`, or `None` outside it.
fn resolve(i: Option<i64>, len: usize) -> Option<usize> {
    let i = i?;
    let j = if i < 0 { i + len as i64 } else { i };
    (0..len as i64).contains(&j).then_some(j as usize)
}

/// The offset, through `strides`, of element `p` of a row-major tensor of `dims`.
fn offset(mut p: usize, dims: &[usize], strides: &[usize]) -> usize {
    let mut at = 0;
    for (d, s) in dims.iter().zip(strides).rev() {
        at += (p % d.max(&1)) * s;
        p /= d.max(&1);
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_operators_follow_onnx() {
        let f = |op: IntOp, a, b| op.apply(a, b, 0);
        assert_eq!(f(IntOp::Div, -7, 2), Some(-3));
        assert_eq!(f(IntOp::Mod { fmod: false }, -7, 3), Some(2));
        assert_eq!(f(IntOp::Mod { fmod: true }, -7, 3), Some(-1));
        assert_eq!(f(IntOp::Div, 1, 0), None);
        assert_eq!(f(IntOp::Div, i64::MIN, -1), Some(i64::MIN));
        assert_eq!(f(IntOp::Xor, 2, 0), Some(1));
        assert_eq!(f(IntOp::Wrap32, 1 << 32 | 5, 0), Some(5));
        assert_eq!(IntOp::Where.apply(0, 4, 9), Some(9));
    }

    #[test]
    fn arg_extremes_pick_the_first_or_last_tie() {
        // Two lines along the middle axis: [3, 1, 3] and [0, 2, 2] (inner 2, interleaved).
        let x = [3.0f32, 0.0, 1.0, 2.0, 3.0, 2.0];
        let mut out = [0i64; 2];
        arg_extreme(&x, 3, 2, true, false, &mut out);
        assert_eq!(out, [0, 1]);
        arg_extreme(&x, 3, 2, true, true, &mut out);
        assert_eq!(out, [2, 2]);
        arg_extreme(&x, 3, 2, false, false, &mut out);
        assert_eq!(out, [1, 0]);
        let codes = [-5i8, 7, 7, -128];
        let mut one = [0i64; 1];
        arg_extreme(&codes, 4, 1, true, false, &mut one);
        assert_eq!(one, [1]);
    }

    #[test]
    fn broadcast_offsets_skip_stride_zero_axes() {
        // [2, 3] output reading a [3] row (strides [0, 1]) and a [2, 1] column ([1, 0]).
        let dims = [2, 3];
        let row: Vec<usize> = (0..6).map(|p| offset(p, &dims, &[0, 1])).collect();
        let col: Vec<usize> = (0..6).map(|p| offset(p, &dims, &[1, 0])).collect();
        assert_eq!(row, vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(col, vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(resolve(Some(-1), 4), Some(3));
        assert_eq!(resolve(Some(4), 4), None);
    }
}
