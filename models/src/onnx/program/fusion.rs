//! Passes over a lowered [`Program`] that fuse steps without changing a single output
//! byte: a residual `Add` into the convolution before it ([`fuse_residual_adds`]), and
//! elementwise steps that are functions of one byte into one table ([`fuse_tables`]).
//! Load time only: they allocate, and run before the arena is planned for the last time.

use super::*;

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
/// - a table `y = T(x)` read only by the next step, when that step is a table of `y` or a
///   dense `Binary` of `x` and `y` (SiLU's `x · sigmoid(x)`, Swish, `x + f(x)`), becomes one
///   table of `x`, and `y` leaves the arena.
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
    let mut i = 1;
    while i < p.steps.len() {
        let Some((table, y, z)) = table_pair_at(p, i) else {
            i += 1;
            continue;
        };
        if let Step::Lut {
            table: t, dst: d, ..
        } = &mut p.steps[i - 1]
        {
            *t = table;
            *d = z;
        }
        remove_fused_step(p, i, y);
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

/// The table of `x` that step `i − 1` (a table `y = T(x)`) and step `i` compute together,
/// if step `i` is the only reader of `y` and a table of `y` or a dense `Binary` of `x`
/// and `y`; with `y` and step `i`'s output buffer `z`.
fn table_pair_at(p: &Program, i: usize) -> Option<(Box<[i8; 256]>, usize, usize)> {
    let Step::Lut {
        table: t,
        n,
        src: x,
        dst: y,
    } = &p.steps[i - 1]
    else {
        return None;
    };
    // Read by step i only (it is written at i − 1).
    if p.buffers[*y].last != i || p.buffers[*y].bytes != *n || p.buffers[*x].bytes != *n {
        return None;
    }
    let mut table = [0i8; 256];
    let z = match &p.steps[i] {
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
    Some((Box::new(table), *y, z))
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
