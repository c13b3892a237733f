//! Passes over a lowered [`Program`] that fuse steps without changing a single output
//! byte: a residual `Add` into the convolution before it ([`fuse_residual_adds`]), and
//! elementwise steps that are functions of one byte into one table ([`fuse_tables`]).
//! Load time only: they allocate, and run before the arena is planned for the last time.
//! Also: strided copies that read another strided copy composed into one copy of the
//! first one's source ([`fuse_transposes`]: the same bytes moved, fewer passes), and a
//! float graph input quantized straight from the caller's buffer ([`fuse_input_quantize`]).

use super::*;
use crate::onnx::kernels::strided_offset;

/// Folds each `Add` whose operand is the output of the convolution just before it, read by
/// nothing else, into that convolution ([`Step::Conv`]'s `residual`), then plans the arena
/// again. Each chunk of the convolution's rows is then summed while it is still in cache,
/// and the convolution's own output buffer is gone. The sum is the same operations on the
/// same values as the separate step (bit-identical). Native engine only: the CUDA engine
/// runs the unfused program.
pub(crate) fn fuse_residual_adds(p: &mut Program) {
    let mut i = 1;
    while i < p.steps.len() {
        let Some((fused, sum)) = residual_at(p, i) else {
            i += 1;
            continue;
        };
        let Step::Conv {
            dst, residual: r, ..
        } = &mut p.steps[i - 1]
        else {
            i += 1;
            continue;
        };
        let conv_out = std::mem::replace(dst, sum);
        *r = Some(fused);
        remove_fused_step(p, i, conv_out);
    }
    p.arena_bytes = plan(&mut p.buffers);
}

/// Lets each `QuantizeLinear` of a float graph input read the caller's buffer: the step
/// that copied the input into the arena (read by that quantization alone) goes. ResNet-18's
/// 224×224 image: 0.6 MB less to copy per run; the copy step took 0.047 ms of about 8.5 on
/// one thread (timed per step in a temporary build), less than the run-to-run noise of
/// `redline model bench`. The quantization reads the same floats, so the same bytes. The
/// input's arena buffer stays planned: an input that is not 4-byte aligned is still copied
/// there first (the arena never grows, and a caller's odd buffer still runs). Native engine
/// only, like [`fuse_residual_adds`].
pub(crate) fn fuse_input_quantize(p: &mut Program) {
    let mut i = 0;
    while i < p.steps.len() {
        let Step::Input {
            index,
            dst,
            flip: false,
        } = p.steps[i]
        else {
            i += 1;
            continue;
        };
        let quantize = match readers_of(p, dst)[..] {
            [j] => match &mut p.steps[j] {
                Step::Quantize {
                    src,
                    input: q @ None,
                    ..
                } if *src == dst => Some(q),
                _ => None,
            },
            _ => None,
        };
        let Some(q) = quantize else {
            i += 1;
            continue;
        };
        *q = Some(index);
        p.steps.remove(i);
        // The steps after `i` move up one; the input's buffer is now first written (for an
        // unaligned input) by the quantization, which is at or after `i`.
        for b in p.buffers.iter_mut() {
            for at in [&mut b.first, &mut b.last] {
                if *at > i {
                    *at -= 1;
                }
            }
        }
    }
}

/// The steps that read buffer `b`, in program order.
fn readers_of(p: &Program, b: usize) -> Vec<usize> {
    (0..p.steps.len())
        .filter(|&j| p.steps[j].reads().contains(&b))
        .collect()
}

/// Removes step `i` (folded into step `i − 1`) and buffer `freed`, which no step writes or
/// reads any more; the steps after `i` move up one in every buffer's lifetime.
fn remove_fused_step(p: &mut Program, i: usize, freed: usize) {
    p.steps.remove(i);
    for b in p.buffers.iter_mut() {
        for at in [&mut b.first, &mut b.last] {
            if *at >= i {
                *at -= 1;
            }
        }
    }
    p.buffers[freed].bytes = 0;
}

/// Turns elementwise steps that are a function of one byte of one tensor into tables, and
/// folds a table into the step right after it when that step is another function of the
/// same byte, then plans the arena again:
/// - a `Binary` with one operand a tensor `x` and the other a scalar constant (`x · c`,
///   `x + c`) becomes a table of `x`;
/// - a table `y = T(x)` read by one step only, when that step is a table of `y` or a
///   dense `Binary` of `x` and `y` (SiLU's `x · sigmoid(x)`, Swish, `x + f(x)`), becomes one
///   table of `x` in the table's place, the reader's step goes, and `y` leaves the arena.
///   The reader need not come right after the table: a graph whose file lists two
///   branches' operators interleaved (`Conv, Conv, Sigmoid, Sigmoid, Mul, Mul`: a C2f
///   block's two halves) fuses both. The reader's output is then written earlier, which is
///   sound because it reads only `x` and `y` (both written before the table's step ends)
///   and no step in between touches its output.
///
/// Each entry of a new table is the old steps' own element function on that byte
/// ([`Binary::one`], the tables), so the outputs are the same bytes; a SiLU costs one
/// table pass instead of a table pass and a float multiply pass. Native engine only, like
/// [`fuse_residual_adds`].
pub(crate) fn fuse_tables(p: &mut Program) {
    for step in p.steps.iter_mut() {
        if let Some(lut) = scalar_binary_as_table(step, &p.buffers) {
            *step = lut;
        }
    }
    let mut t = 0;
    while t < p.steps.len() {
        let Some((table, x, y, r, z)) = table_pair_at(p, t) else {
            t += 1;
            continue;
        };
        if let Step::Lut { table: tb, dst, .. } = &mut p.steps[t] {
            *tb = table;
            *dst = z;
        }
        // Step `r` goes: the steps after it move up one; its output is now written at `t`,
        // and `x` may have been last read there.
        let x_last_was_r = p.buffers[x].last == r;
        p.steps.remove(r);
        for b in p.buffers.iter_mut() {
            for at in [&mut b.first, &mut b.last] {
                if *at > r {
                    *at -= 1;
                }
            }
        }
        p.buffers[z].first = t;
        if x_last_was_r {
            p.buffers[x].last = readers_of(p, x).last().copied().unwrap_or(t).max(t);
        }
        p.buffers[y].bytes = 0;
        // Stay at `t`: the new table may fuse with its own reader.
    }
    p.arena_bytes = plan(&mut p.buffers);
}

/// `step` as a table when it is a `Binary` of a dense tensor and a one-element constant.
fn scalar_binary_as_table(step: &Step, buffers: &[Buffer]) -> Option<Step> {
    let Step::Binary { op, a, b, n, dst } = step else {
        return None;
    };
    let (x, c, x_is_a) = match (a, b) {
        (Operand::Buf(x), Operand::Const(c)) => (*x, c, true),
        (Operand::Const(c), Operand::Buf(x)) => (*x, c, false),
        _ => return None,
    };
    let x_strides = if x_is_a { &op.a_strides } else { &op.b_strides };
    let dense = c.len() == 1
        && op.shape.iter().product::<usize>() == *n
        && buffers[x].bytes == *n
        && kernels::dense_strides(x_strides, &op.shape);
    if !dense {
        return None;
    }
    let c = c[0];
    let mut table = [0i8; 256];
    for (v, e) in table.iter_mut().enumerate() {
        let v = v as u8 as i8;
        *e = if x_is_a { op.one(v, c) } else { op.one(c, v) };
    }
    Some(Step::Lut {
        table: Box::new(table),
        n: *n,
        src: x,
        dst: *dst,
    })
}

/// What step `ti` (a table `y = T(x)`) and the one step `r` that reads `y` compute
/// together, if `r` is a table of `y` or a dense `Binary` of `x` and `y`, `r`'s output `z`
/// is first written by `r`, and no step between them reads or writes `z`, `x` or `y`
/// (so `r` may run at `ti` instead): the table of `x`, with `x`, `y`, `r` and `z`.
#[allow(clippy::type_complexity)]
fn table_pair_at(p: &Program, ti: usize) -> Option<(Box<[i8; 256]>, usize, usize, usize, usize)> {
    let Step::Lut {
        table: t,
        n,
        src: x,
        dst: y,
    } = &p.steps[ti]
    else {
        return None;
    };
    let r = match readers_of(p, *y)[..] {
        [r] if r > ti && p.buffers[*y].last == r => r,
        _ => return None,
    };
    if p.buffers[*y].bytes != *n || p.buffers[*x].bytes != *n || x == y {
        return None;
    }
    let mut table = [0i8; 256];
    let z = match &p.steps[r] {
        Step::Lut {
            table: t2,
            n: n2,
            src,
            dst,
        } if src == y && n2 == n => {
            for (v, e) in table.iter_mut().enumerate() {
                *e = t2[t[v] as u8 as usize];
            }
            *dst
        }
        Step::Binary {
            op,
            a: Operand::Buf(ba),
            b: Operand::Buf(bb),
            n: n2,
            dst,
        } if n2 == n
            && op.shape.iter().product::<usize>() == *n
            && kernels::dense_strides(&op.a_strides, &op.shape)
            && kernels::dense_strides(&op.b_strides, &op.shape)
            && ((ba == x && bb == y) || (ba == y && bb == x)) =>
        {
            for (v, e) in table.iter_mut().enumerate() {
                let (xv, yv) = (v as u8 as i8, t[v]);
                *e = if ba == x {
                    op.one(xv, yv)
                } else {
                    op.one(yv, xv)
                };
            }
            *dst
        }
        _ => return None,
    };
    let touched =
        |s: &Step| s.writes().is_some_and(|w| [z, *x, *y].contains(&w)) || s.reads().contains(&z);
    if z == *x || p.buffers[z].first != r || p.steps[ti + 1..r].iter().any(touched) {
        return None;
    }
    Some((Box::new(table), *x, *y, r, z))
}

/// The fusion of step `i` (an `Add`) into step `i − 1` (a convolution), if it applies: the
/// fused `Add` and the buffer of its sum.
fn residual_at(p: &Program, i: usize) -> Option<(Residual, usize)> {
    let Step::Binary { op, a, b, n, dst } = &p.steps[i] else {
        return None;
    };
    let Step::Conv {
        batch,
        out_h,
        row_len,
        dst: c,
        residual: None,
        ..
    } = &p.steps[i - 1]
    else {
        return None;
    };
    let (Operand::Buf(ba), Operand::Buf(bb)) = (a, b) else {
        return None;
    };
    let dense = matches!(op.kind, BinaryKind::Add { .. })
        && op.shape.iter().product::<usize>() == *n
        && kernels::dense_strides(&op.a_strides, &op.shape)
        && kernels::dense_strides(&op.b_strides, &op.shape);
    let conv_is_a = *ba == *c;
    let other = if conv_is_a { *bb } else { *ba };
    // The convolution's output is read by the `Add` only (it is written at `i − 1`).
    let only_reader = p.buffers[*c].last == i;
    let sizes = batch * out_h * row_len == *n
        && p.buffers[*c].bytes == *n
        && p.buffers[*dst].bytes == *n
        && p.buffers[other].bytes >= *n;
    let one_operand = conv_is_a != (*bb == *c);
    (dense && one_operand && only_reader && sizes).then(|| {
        let fused = Residual {
            op: op.clone(),
            other,
            conv_is_a,
        };
        (fused, *dst)
    })
}

/// A strided copy: output element `j` (row-major over `shape`) is source element
/// `offset + Σ j_d · strides[d]` ([`Step::Transpose`]'s map).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Strided {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

impl Strided {
    /// The map of a [`Step::Transpose`], with its source and output buffers.
    fn of(step: &Step) -> Option<(Strided, usize, usize)> {
        let Step::Transpose {
            out_shape,
            strides,
            offset,
            src,
            dst,
        } = step
        else {
            return None;
        };
        let map = Strided {
            shape: out_shape.clone(),
            strides: strides.clone(),
            offset: *offset,
        };
        Some((map, *src, *dst))
    }

    /// The source index of output element `flat`.
    fn at(&self, flat: usize) -> usize {
        self.offset + strided_offset(flat, &self.shape, &self.strides)
    }

    /// The same map with dimensions of size 1 dropped and runs of dimensions that walk
    /// memory as one merged (`strides[d] == strides[d + 1] · shape[d + 1]`).
    fn simplified(self) -> Strided {
        let mut shape: Vec<usize> = Vec::new();
        let mut strides: Vec<usize> = Vec::new();
        for (n, s) in self.shape.into_iter().zip(self.strides) {
            if n == 1 {
                continue;
            }
            match (shape.last_mut(), strides.last_mut()) {
                (Some(pn), Some(ps)) if *ps == s * n => {
                    *pn *= n;
                    *ps = s;
                }
                _ => {
                    shape.push(n);
                    strides.push(s);
                }
            }
        }
        if shape.is_empty() {
            shape.push(1);
            strides.push(1);
        }
        Strided {
            shape,
            strides,
            offset: self.offset,
        }
    }
}

/// Elements above which two copies are not composed (the check walks every element).
const COMPOSE_MAX_ELEMENTS: usize = 1 << 24;

/// Copy `b` (reading the output of copy `a`) as one strided copy of `a`'s source, if
/// there is one. Each dimension of `b` is split into the factors along which the composed
/// index moves by a constant step (ShuffleNet's channel shuffle: the channels of one
/// dimension step through two groups); the result is then checked on every element, so a
/// map that is not strided is refused, never approximated.
fn compose(a: &Strided, b: &Strided) -> Option<Strided> {
    let total: usize = b.shape.iter().product();
    if total > COMPOSE_MAX_ELEMENTS || total == 0 {
        return None;
    }
    let f = |i: usize| a.at(i);
    let base = f(b.offset);
    let (mut shape, mut strides) = (Vec::new(), Vec::new());
    for (&n, &s) in b.shape.iter().zip(&b.strides) {
        // v[t]: how far the composed index moves for t steps along this dimension.
        let v: Vec<usize> = (0..n)
            .map(|t| f(b.offset + t * s).checked_sub(base))
            .collect::<Option<_>>()?;
        let mut factors: Vec<(usize, usize)> = Vec::new(); // (size, stride), innermost first
        let mut period = 1;
        while period < n {
            let step = v[period];
            let rest = n / period;
            // The largest m dividing what is left for which the first `period · m` moves
            // are the first period's plus whole steps.
            let m = (2..=rest)
                .rev()
                .filter(|m| rest % m == 0)
                .find(|&m| (0..period * m).all(|t| v[t] == v[t % period] + (t / period) * step))?;
            factors.push((m, step));
            period *= m;
        }
        for (m, st) in factors.into_iter().rev() {
            shape.push(m);
            strides.push(st);
        }
    }
    let c = Strided {
        shape,
        strides,
        offset: base,
    }
    .simplified();
    (0..total).all(|k| c.at(k) == f(b.at(k))).then_some(c)
}

/// Composes every [`Step::Transpose`] whose source is the output of another one with it:
/// the reader copies straight from the first copy's source, and the intermediate buffer
/// and its step leave the program (ShuffleNet's channel shuffle, lowered as a layout
/// change, a 5-D transpose, a split and a layout change back, becomes one strided copy per
/// branch). Applies when every reader of the intermediate is such a copy, nothing else
/// writes it, the source is not written again before the last reader (its lifetime grows
/// to reach it), and the arena does not grow. The same bytes end in the same places. Load
/// time: each candidate plans the arena once more.
pub(crate) fn fuse_transposes(p: &mut Program) {
    let mut arena = plan(&mut p.buffers);
    let mut i = 0;
    while i < p.steps.len() {
        let Some((x, d, composed)) = transpose_readers_at(p, i) else {
            i += 1;
            continue;
        };
        // Kept only if the arena does not grow (the source now lives until the last
        // reader): the same memory, fewer passes.
        let (old_step, old_buffers) = (p.steps[i].clone(), p.buffers.clone());
        let old_readers: Vec<(usize, Step)> = composed
            .iter()
            .map(|(j, _)| (*j, p.steps[*j].clone()))
            .collect();
        let mut last = p.buffers[x].last;
        for (j, c) in composed {
            if let Step::Transpose {
                out_shape,
                strides,
                offset,
                src,
                ..
            } = &mut p.steps[j]
            {
                *out_shape = c.shape;
                *strides = c.strides;
                *offset = c.offset;
                *src = x;
            }
            last = last.max(j);
        }
        p.buffers[x].last = last;
        remove_fused_step(p, i, d);
        let fused = plan(&mut p.buffers);
        if fused <= arena {
            arena = fused;
            continue;
        }
        p.steps.insert(i, old_step);
        for (j, step) in old_readers {
            p.steps[j] = step;
        }
        p.buffers = old_buffers;
        i += 1;
    }
    // The buffers hold the plan of `arena`: the last fusion kept, or restored with it.
    p.arena_bytes = arena;
}

/// When step `i` is a strided copy `x → d` whose every reader is a strided copy it composes
/// with: `x`, `d` and each reader's index with its composed copy.
#[allow(clippy::type_complexity)]
fn transpose_readers_at(p: &Program, i: usize) -> Option<(usize, usize, Vec<(usize, Strided)>)> {
    let (a, x, d) = Strided::of(&p.steps[i])?;
    if x == d {
        return None;
    }
    // A strided copy reads only its source, so step `i` (`x ≠ d`) is not among them.
    let readers = readers_of(p, d);
    let last = *readers.last()?;
    let sole_writer = (0..p.steps.len()).all(|j| j == i || p.steps[j].writes() != Some(d));
    let source_kept = (i + 1..=last).all(|j| p.steps[j].writes() != Some(x));
    if !sole_writer || !source_kept || readers.iter().any(|&j| j < i) {
        return None;
    }
    let mut composed = Vec::with_capacity(readers.len());
    for &j in &readers {
        let (b, _, _) = Strided::of(&p.steps[j])?;
        composed.push((j, compose(&a, &b)?));
    }
    Some((x, d, composed))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::onnx::kernels::row_major_strides as dense;

    /// `shape` permuted by `perm`, as a copy of a dense source.
    fn permute(shape: &[usize], perm: &[usize]) -> Strided {
        let s = dense(shape);
        Strided {
            shape: perm.iter().map(|&p| shape[p]).collect(),
            strides: perm.iter().map(|&p| s[p]).collect(),
            offset: 0,
        }
    }

    /// Applies a copy to a source.
    fn apply(c: &Strided, src: &[u32]) -> Vec<u32> {
        (0..c.shape.iter().product())
            .map(|k| src[c.at(k)])
            .collect()
    }

    #[test]
    fn a_channel_shuffle_and_a_split_compose_into_one_copy_each() {
        // NHWC [1, 5, 3, 12] to NCHW, viewed as [1, 2, 6, 5, 3], channels' groups swapped
        // (ShuffleNet's shuffle), then split in halves along the 12 channels and each half
        // back to NHWC: the chain as lowering writes it, against one composed copy.
        let (h, w, c) = (5, 3, 12);
        let src: Vec<u32> = (0..(h * w * c) as u32).map(|v| v * 7 + 1).collect();
        let to_nchw = permute(&[1, h, w, c], &[0, 3, 1, 2]);
        let shuffle = permute(&[1, 2, c / 2, h, w], &[0, 2, 1, 3, 4]);
        let nchw = dense(&[1, c, h, w]);
        let halves: Vec<Strided> = (0..2)
            .map(|half| Strided {
                // NHWC order of channels half·6 .. half·6 + 6 of the shuffled NCHW tensor.
                shape: vec![1, h, w, c / 2],
                strides: vec![nchw[0], nchw[2], nchw[3], nchw[1]],
                offset: half * (c / 2) * nchw[1],
            })
            .collect();
        let t1 = apply(&to_nchw, &src);
        let t2 = apply(&shuffle, &t1);
        let first = compose(&to_nchw, &shuffle).expect("a permutation after a permutation");
        assert_eq!(apply(&first, &src), t2);
        for half in &halves {
            let one = compose(&first, half).expect("a split part of a shuffle is strided");
            assert_eq!(apply(&one, &src), apply(half, &t2));
            // Pixels, then 3 channel pairs... whatever the factoring: at most 4 dimensions
            // (pixel, channel within group, group) once merged.
            assert!(one.shape.len() <= 3, "{one:?}");
        }
    }

    #[test]
    fn maps_that_are_not_strided_are_refused() {
        // A [3, 2] copy of a dense source walked column-major: output 0..6 is source
        // 0, 3, 1, 4, 2, 5.
        let zigzag = Strided {
            shape: vec![3, 2],
            strides: vec![1, 3],
            offset: 0,
        };
        let read = |offset, stride| Strided {
            shape: vec![3],
            strides: vec![stride],
            offset,
        };
        // Its outputs 1, 3, 5 are source 3, 4, 5: one strided copy.
        let odd = compose(&zigzag, &read(1, 2)).expect("strided");
        assert_eq!((odd.offset, odd.strides.clone()), (3, vec![1]));
        // Its outputs 0, 2, 4 are source 0, 1, 2.
        assert_eq!(
            apply(&compose(&zigzag, &read(0, 2)).unwrap(), &[0, 1, 2, 3, 4, 5]),
            vec![0, 1, 2]
        );
        // Its outputs 2, 3, 4 are source 1, 4, 2: no strided copy gives that; refused.
        assert_eq!(compose(&zigzag, &read(2, 1)), None);
    }
}
