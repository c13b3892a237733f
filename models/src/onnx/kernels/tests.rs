//! Every vector width against the portable build, and the rewritten kernels against their
//! plain formulas.

use super::binary::{
    add_contiguous, add_into, add_one, mul_contiguous, mul_one, qlinear_mul_contiguous,
    qlinear_mul_one, AddParams, MulParams,
};

/// An `Add` on `int8` tensors (`off` 0) with scale ratios that round often.
const ADD: AddParams = AddParams {
    ra: 0.71,
    rb: 1.37,
    fixed: -3.25,
    off: 0.0,
};
use super::*;
use redline_runtime::rng::SplitMix64;

mod transpose;

/// The float formula `requant_f32` replaced: round in float, clamp in float, cast.
pub(super) fn requant_float_formula(v: f32, zp: i32, lo: i8, hi: i8) -> i8 {
    let r = ((v.clamp(-1024.0, 1024.0) + MAGIC) - MAGIC) + zp as f32;
    r.clamp(f32::from(lo), f32::from(hi)) as i8
}

#[test]
fn requant_matches_the_float_formula() {
    let mut g = SplitMix64::stream(11, 0);
    let mut values = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e30,
        -1e30,
        1024.0,
        -1024.0,
        1024.5,
    ];
    // Every half step in ±300 (the ties), and random values of every magnitude.
    values.extend((-600..=600).map(|i| i as f32 * 0.5));
    values.extend((0..20_000).map(|_| g.uniform(-2000.0, 2000.0)));
    values.extend((0..2_000).map(|_| g.uniform(-1.0, 1.0)));
    for &v in &values {
        for (zp, lo, hi) in [(0, -128, 127), (-128, -128, 127), (17, 0, 127), (3, -5, 9)] {
            assert_eq!(
                requant_f32(v, zp, lo, hi),
                requant_float_formula(v, zp, lo, hi),
                "v {v}, zp {zp}, [{lo}, {hi}]"
            );
        }
    }
}

pub(super) fn bytes(g: &mut SplitMix64, n: usize) -> Vec<i8> {
    (0..n).map(|_| g.next_i8()).collect()
}

/// A binary operator with fixed, unround scales and zero points over `shape`.
fn test_binary(
    kind: BinaryKind,
    shape: Vec<usize>,
    a_strides: Vec<usize>,
    b_strides: Vec<usize>,
) -> Binary {
    Binary {
        kind,
        sa: 0.031,
        sb: 0.007,
        sy: 0.013,
        za: 3,
        zb: -9,
        zy: 1,
        lo: -128,
        hi: 127,
        shape,
        a_strides,
        b_strides,
    }
}

#[test]
fn elementwise_loops_give_the_same_bytes_on_every_width() {
    let isas = Isa::available();
    eprintln!(
        "widths compared: {:?}",
        isas.iter().map(|i| i.name()).collect::<Vec<_>>()
    );
    let mut g = SplitMix64::stream(12, 0);
    for n in [1usize, 15, 16, 17, 63, 64, 65, 1000, 4099] {
        let (a, b) = (bytes(&mut g, n), bytes(&mut g, n));
        // Every 7th value NaN or infinite (a float route's 0 / 0 and x / 0).
        let f: Vec<f32> = (0..n)
            .map(|i| match i % 21 {
                6 => f32::NAN,
                13 => f32::INFINITY,
                20 => f32::NEG_INFINITY,
                _ => g.uniform(-40.0, 40.0),
            })
            .collect();
        let mul = test_binary(BinaryKind::MulDequantized, vec![n], vec![1], vec![1]);
        let qmul = MulParams::new(0.031, 0.007, 0.0013, 1, true);
        // Stored `uint8` operands (`off`): the relu'd one.
        const ADD_U8: AddParams = AddParams {
            ra: 0.5,
            rb: 0.5,
            fixed: 0.5,
            off: 128.0,
        };
        let run = |isa: Isa| {
            let mut add = vec![0i8; n];
            add_contiguous(isa, ADD, -128, 127, &a, &b, &mut add);
            let mut relu_add = vec![0i8; n];
            add_contiguous(isa, ADD_U8, 0, 127, &a, &b, &mut relu_add);
            let mut m = vec![0i8; n];
            mul_contiguous(isa, &mul, &a, &b, &mut m);
            let mut qm = vec![0i8; n];
            qlinear_mul_contiguous(isa, qmul, (3, -9, -128, 127), &a, &b, &mut qm);
            m.extend(qm);
            let mut q = vec![0i8; n];
            quantize(isa, &f, 0.173, -7, &mut q);
            (add, relu_add, m, q)
        };
        let want = run(Isa::PORTABLE);
        // The portable build is the scalar formula, element by element.
        for i in 0..n {
            assert_eq!(want.0[i], add_one(ADD, -128, 127, a[i], b[i]));
            assert_eq!(want.1[i], add_one(ADD_U8, 0, 127, a[i], b[i]));
            assert_eq!(want.2[i], mul_one(&mul, a[i], b[i]));
            let q = qlinear_mul_one(qmul, 3, -9, -128, 127, a[i], b[i]);
            assert_eq!(want.2[n + i], q);
            // NaN quantizes to the lowest value, as ONNX Runtime's QuantizeLinear.
            let q = if f[i].is_nan() {
                -128
            } else {
                requant_f32(f[i] / 0.173, -7, -128, 127)
            };
            assert_eq!(want.3[i], q, "{}", f[i]);
        }
        for &isa in &isas[1..] {
            assert_eq!(
                run(isa),
                want,
                "{} differs from portable, n {n}",
                isa.name()
            );
        }
    }
}

#[test]
fn div_and_sub_follow_the_float_formula_and_a_zero_divisor_saturates() {
    // test_binary: za = 3, zb = -9, zy = 1.
    let mut div = test_binary(BinaryKind::Div, vec![1], vec![1], vec![1]);
    let sub = test_binary(BinaryKind::Sub, vec![1], vec![1], vec![1]);
    let (sa, sb, sy) = (div.sa, div.sb, div.sy);
    for (a, b) in [(10i8, 20i8), (-100, 5), (127, -128), (3, 7)] {
        let (x, y) = (
            (i32::from(a) - 3) as f32 * sa,
            (i32::from(b) + 9) as f32 * sb,
        );
        assert_eq!(
            div.one(a, b),
            requant_f32(x / y / sy, 1, -128, 127),
            "{a} / {b}"
        );
        assert_eq!(
            sub.one(a, b),
            requant_f32((x - y) / sy, 1, -128, 127),
            "{a} - {b}"
        );
    }
    // b == zb: x / 0 saturates by sign, 0 / 0 (NaN) is the lowest byte, as ONNX Runtime's
    // QuantizeLinear gives it.
    assert_eq!(div.one(50, -9), 127);
    assert_eq!(div.one(-50, -9), -128);
    assert_eq!(div.one(3, -9), -128);
    div.lo = 1; // a fused Relu: its byte of 0
    assert_eq!(div.one(3, -9), 1);
}

/// ONNX Runtime's `QLinearMul` where it and the dequantized product round apart: Swin-T's
/// q·d^-0.5 (`uint8`, stored zero points 127, 0, 125; code 163 times code 255 gives 162, the
/// dequantized product 161), and ONNX Runtime's overflow behaviour (`cvtps2dq` gives
/// `i32::MIN`, which saturates to the lowest code).
#[test]
fn qlinear_mul_is_onnx_runtimes_formula() {
    let [sa, sb, sy] = [1005026095u32, 976599726, 983658642].map(f32::from_bits);
    let (za, zb, zy) = (127 - 128, -128, 125 - 128);
    let m = MulParams::new(sa, sb, sy, zy, true);
    let (a, b) = ((163 - 128) as i8, 127i8);
    assert_eq!(
        qlinear_mul_one(m, za, zb, -128, 127, a, b),
        (162 - 128) as i8
    );
    let dequantized = Binary {
        kind: BinaryKind::MulDequantized,
        sa,
        sb,
        sy,
        za,
        zb,
        zy,
        lo: -128,
        hi: 127,
        shape: vec![1],
        a_strides: vec![1],
        b_strides: vec![1],
    };
    assert_eq!(dequantized.one(a, b), (161 - 128) as i8);
    // The same bytes read as int8 (`off` 0: the zero point added as -3, not 125) round the
    // other way: the stored domain matters (the mul_ties op models check int8 against ONNX
    // Runtime).
    let m8 = MulParams::new(sa, sb, sy, zy, false);
    assert_eq!(qlinear_mul_one(m8, za, zb, -128, 127, a, b), 33);
    // A ratio so large the product leaves the i32 range: the lowest code, as ONNX Runtime;
    // a merely large one saturates high.
    let huge = MulParams::new(1.0e6, 1.0e6, 1.0, 0, true);
    assert_eq!(qlinear_mul_one(huge, 0, 0, -128, 127, 100, 100), -128);
    let large = MulParams::new(1.0, 1.0, 1.0, 0, true);
    assert_eq!(qlinear_mul_one(large, 0, 0, -128, 127, 100, 100), 127);
    // The fused clamp applies after the stored range.
    assert_eq!(qlinear_mul_one(large, 0, 0, 0, 50, 100, 100), 50);
    // The contiguous loop (its bounded fast path, or not) gives `qlinear_mul_one`'s byte for
    // every pair of codes, on every width.
    let a: Vec<i8> = (0..65_536).map(|i| (i >> 8) as u8 as i8).collect();
    let b: Vec<i8> = (0..65_536).map(|i| i as u8 as i8).collect();
    for (m, (za, zb, lo, hi)) in [
        (m, (za, zb, -128, 127)),
        (m8, (za, zb, -20, 90)),
        (
            MulParams::new(0.02, 0.03, 0.001, 7, false),
            (3, -5, -128, 127),
        ),
        (
            MulParams::new(0.5, 0.25, 0.0001, -9, true),
            (0, 0, -128, 127),
        ),
        (huge, (0, 0, -128, 127)),
        (large, (1, -1, 0, 50)),
    ] {
        let want: Vec<i8> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| qlinear_mul_one(m, za, zb, lo, hi, x, y))
            .collect();
        for isa in Isa::available() {
            let mut got = vec![0i8; want.len()];
            qlinear_mul_contiguous(isa, m, (za, zb, lo, hi), &a, &b, &mut got);
            assert_eq!(got, want, "{} {m:?} bounded {}", isa.name(), m.bounded());
        }
    }
    assert!(m.bounded() && !huge.bounded());
}

/// The add loops (contiguous and in place, their bounded fast path or not) give
/// [`add_one`]'s byte for every pair of codes, on every width: ratios that round often, a
/// `uint8` offset, a fused clamp, and ratios so extreme that the sums leave the `i32`
/// range or are NaN (`inf · 0`), which only the unbounded path handles.
#[test]
fn add_loops_give_add_ones_byte_for_every_pair_of_codes() {
    let a: Vec<i8> = (0..65_536).map(|i| (i >> 8) as u8 as i8).collect();
    let b: Vec<i8> = (0..65_536).map(|i| i as u8 as i8).collect();
    let u8_add = AddParams {
        ra: 0.37,
        rb: 1.91,
        fixed: add_fixed(0.37, 1.91, 131.0, 97.0, 140.0),
        off: 128.0,
    };
    let huge = AddParams {
        ra: 3.0e4,
        rb: 2.0e4,
        fixed: 0.5,
        off: 0.0,
    };
    let nan = AddParams {
        ra: f32::INFINITY,
        rb: 0.5,
        fixed: 0.0,
        off: 128.0,
    };
    for (p, lo, hi) in [
        (ADD, -128, 127),
        (u8_add, -128, 127),
        (u8_add, -60, 90),
        (huge, -128, 127),
        (nan, -128, 127),
    ] {
        let want: Vec<i8> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| add_one(p, lo, hi, x, y))
            .collect();
        for isa in Isa::available() {
            let what = format!("{} {p:?} [{lo}, {hi}] bounded {}", isa.name(), p.bounded());
            let mut got = vec![0i8; want.len()];
            add_contiguous(isa, p, lo, hi, &a, &b, &mut got);
            assert_eq!(got, want, "contiguous {what}");
            let mut acc = a.clone();
            add_into(isa, p, lo, hi, true, &mut acc, &b);
            assert_eq!(acc, want, "in place, the first operand {what}");
            let mut acc = b.clone();
            add_into(isa, p, lo, hi, false, &mut acc, &a);
            assert_eq!(acc, want, "in place, the second operand {what}");
        }
    }
    assert!(ADD.bounded() && u8_add.bounded() && !huge.bounded() && !nan.bounded());
}

/// `op` element by element from its definition: output index `i` of `shape` reads each
/// operand at the dot product of `i`'s coordinates with that operand's strides.
fn binary_reference(op: &Binary, a: &[i8], b: &[i8]) -> Vec<i8> {
    let n: usize = op.shape.iter().product();
    (0..n)
        .map(|i| {
            let (mut rem, mut ia, mut ib) = (i, 0, 0);
            for d in (0..op.shape.len()).rev() {
                let idx = rem % op.shape[d];
                rem /= op.shape[d];
                ia += idx * op.a_strides[d];
                ib += idx * op.b_strides[d];
            }
            op.one(a[ia], b[ib])
        })
        .collect()
}

#[test]
fn broadcast_binaries_follow_their_strides_for_any_split() {
    let mut g = SplitMix64::stream(13, 0);
    // A per-channel row (NHWC), a scalar, a per-row column, and a dense operand; then rows
    // longer than the per-row column's stack piece (attention scores by a per-head scale).
    // (output shape, [(the other operand's strides, its length)]).
    type Case = (Vec<usize>, Vec<(Vec<usize>, usize)>);
    let cases: [Case; 3] = [
        (
            vec![2, 5, 7, 13],
            vec![
                (vec![0, 0, 0, 1], 13),
                (vec![0, 0, 0, 0], 1),
                (vec![0, 7, 1, 0], 35),
                (vec![5 * 7 * 13, 7 * 13, 13, 1], 2 * 5 * 7 * 13),
            ],
        ),
        (
            vec![1, 2, 3, 600],
            vec![(vec![0, 1, 0, 0], 2), (vec![0, 3, 1, 0], 6)],
        ),
        // A squeeze-and-excitation gate: 24 channels against a map many 1024-element tiles
        // long (the repeated block's stack tile, whole and cut).
        (vec![1, 9, 31, 24], vec![(vec![0, 0, 0, 1], 24)]),
    ];
    for (shape, others) in &cases {
        let dense: Vec<usize> = (0..shape.len())
            .map(|d| shape[d + 1..].iter().product())
            .collect();
        let shape = shape.clone();
        let n: usize = shape.iter().product();
        for (kind, (strides, len)) in [
            BinaryKind::Mul(MulParams::new(0.031, 0.007, 0.0013, 1, false)),
            BinaryKind::MulDequantized,
            BinaryKind::Div,
            BinaryKind::Sub,
            BinaryKind::Add(ADD),
        ]
        .into_iter()
        .flat_map(|k| others.iter().map(move |o| (k, o)))
        {
            for other_is_a in [false, true] {
                let (a_strides, b_strides) = if other_is_a {
                    (strides.clone(), dense.clone())
                } else {
                    (dense.clone(), strides.clone())
                };
                let (la, lb) = if other_is_a { (*len, n) } else { (n, *len) };
                let (a, b) = (bytes(&mut g, la), bytes(&mut g, lb));
                let op = test_binary(kind, shape.clone(), a_strides, b_strides);
                let want = binary_reference(&op, &a, &b);
                for isa in Isa::available() {
                    // Split mid-row, as the lanes may.
                    for cut in [0, 6, 13, 500, n.min(1700), n] {
                        let mut got = vec![0x55i8; n];
                        let (lo, hi) = got.split_at_mut(cut);
                        op.run(isa, &a, &b, lo, 0..cut);
                        op.run(isa, &a, &b, hi, cut..n);
                        assert_eq!(
                            got,
                            want,
                            "{} {kind:?} strides {strides:?} cut {cut}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn table_lookups_give_the_table_entry_on_every_width() {
    let mut g = SplitMix64::stream(12, 0);
    let table: [i8; 256] = std::array::from_fn(|_| g.next_i8());
    // Every byte value, then random bytes; lengths around the 16- and 64-byte vectors.
    let all: Vec<i8> = (0..=255u8).map(|v| v as i8).collect();
    let mut inputs = vec![all];
    for n in [0, 1, 15, 16, 17, 63, 64, 65, 127, 200, 1000] {
        inputs.push(bytes(&mut g, n));
    }
    for x in &inputs {
        let want: Vec<i8> = x.iter().map(|&v| table[v as u8 as usize]).collect();
        for isa in Isa::available() {
            let mut got = vec![0x55i8; x.len()];
            lut(isa, &table, x, &mut got);
            assert_eq!(got, want, "{} on {} bytes", isa.name(), x.len());
        }
    }
}

#[test]
fn row_table_lookups_and_run_copies_write_only_their_rows() {
    // A channel concat's part: rows of `inner` bytes into every `stride`-th run of `out`,
    // the bytes between the runs (the other parts' channels) untouched.
    let mut g = SplitMix64::stream(13, 0);
    let table: [i8; 256] = std::array::from_fn(|_| g.next_i8());
    for (inner, stride, rows) in [
        (16, 32, 9),
        (16, 16, 5),
        (1, 3, 7),
        (17, 40, 3),
        (64, 100, 4),
        (65, 65, 2),
        (130, 300, 3),
        (300, 301, 2),
        (5, 9, 0),
    ] {
        let x = bytes(&mut g, rows * inner);
        let len = if rows == 0 {
            0
        } else {
            (rows - 1) * stride + inner
        };
        let mut want_lut = vec![0x55i8; len];
        let mut want_copy = vec![0x55i8; len];
        for k in 0..rows {
            for j in 0..inner {
                let v = x[k * inner + j];
                want_lut[k * stride + j] = table[v as u8 as usize];
                want_copy[k * stride + j] = v;
            }
        }
        for isa in Isa::available() {
            let mut got = vec![0x55i8; len];
            lut_rows(isa, &table, &x, &mut got, inner, stride);
            assert_eq!(got, want_lut, "{} rows of {inner} at {stride}", isa.name());
        }
        let mut got = vec![0x55i8; len];
        for k in 0..rows {
            copy_run(
                &mut got[k * stride..k * stride + inner],
                &x[k * inner..(k + 1) * inner],
            );
        }
        assert_eq!(got, want_copy, "copies of {inner} at {stride}");
    }
}

#[test]
fn resize_gives_the_same_bytes_on_every_width() {
    // 37 channels: two vectors and an overlapping third; 16: one; 3: below a vector.
    for c in [37, 16, 3] {
        resize_case(c);
    }
}

fn resize_case(c: usize) {
    let mut g = SplitMix64::stream(15, c as u64);
    let (in_h, in_w) = (5, 7);
    let x = bytes(&mut g, 2 * in_h * in_w * c);
    // Upsampling taps with uneven weights, the last ones clamped at the edge.
    let taps = |n_in: usize, n_out: usize| -> Vec<Tap> {
        (0..n_out)
            .map(|o| {
                let f = (o as f32 + 0.5) * n_in as f32 / n_out as f32 - 0.5;
                let f = f.max(0.0);
                let i0 = (f as usize).min(n_in - 1);
                let i1 = (i0 + 1).min(n_in - 1);
                Tap {
                    i0,
                    i1,
                    w1: f - i0 as f32,
                }
            })
            .collect()
    };
    let (ys, xs) = (taps(in_h, 11), taps(in_w, 13));
    let modes = [
        Interp::Linear {
            x_zp: -3,
            x_scale: 0.061,
            y_zp: 5,
            y_scale: 0.0735,
            lo: -120,
            hi: 127,
        },
        Interp::Raw { floor: true },
        Interp::Raw { floor: false },
        Interp::Nearest,
    ];
    for mode in modes {
        // Both images resized on `isa`.
        let run = |isa: Isa| {
            let mut out = vec![0i8; 2 * ys.len() * xs.len() * c];
            resize(
                isa,
                in_h,
                in_w,
                c,
                &ys,
                &xs,
                mode,
                &x,
                &mut out,
                0..2 * ys.len(),
            );
            out
        };
        let want = run(Isa::PORTABLE);
        // Against the formula, element by element.
        for (i, &v) in want.iter().enumerate() {
            let (ch, px) = (i % c, i / c);
            let (b, oy, ox) = (
                px / (ys.len() * xs.len()),
                px / xs.len() % ys.len(),
                px % xs.len(),
            );
            let (ty, tx) = (ys[oy], xs[ox]);
            let at = |y: usize, xx: usize| x[((b * in_h + y) * in_w + xx) * c + ch];
            let expect = match mode {
                Interp::Nearest => at(ty.i0, tx.i0),
                Interp::Raw { floor } => {
                    // ONNX Runtime's integer bilinear: 1/1024ths a tap (floor, or 512 and
                    // 512 where both taps are one pixel), the sum over 2^20.
                    let s10 = |t: &Tap| -> (i64, i64) {
                        if t.i0 == t.i1 {
                            (512, 512)
                        } else {
                            let d = (t.w1 * 1024.0).floor() as i64;
                            (1024 - d, d)
                        }
                    };
                    let ((ax0, ax1), (ay0, ay1)) = (s10(&tx), s10(&ty));
                    let q = |y, xx| i64::from(at(y, xx));
                    let sum = q(ty.i0, tx.i0) * ax0 * ay0
                        + q(ty.i0, tx.i1) * ax1 * ay0
                        + q(ty.i1, tx.i0) * ax0 * ay1
                        + q(ty.i1, tx.i1) * ax1 * ay1;
                    let r = if floor {
                        sum.div_euclid(1 << 20)
                    } else {
                        sum / (1 << 20)
                    };
                    r as i8
                }
                Interp::Linear {
                    x_zp,
                    x_scale,
                    y_zp,
                    y_scale,
                    lo,
                    hi,
                } => {
                    // DequantizeLinear, ONNX Runtime's float bilinear formula (0.5 and 0.5
                    // where both taps are one pixel), QuantizeLinear (`v / y_scale`).
                    let w = |t: &Tap| {
                        if t.i0 == t.i1 {
                            (0.5f32, 0.5f32)
                        } else {
                            (1.0 - t.w1, t.w1)
                        }
                    };
                    let ((wx0, wx1), (wy0, wy1)) = (w(&tx), w(&ty));
                    let q = |y, xx| (i32::from(at(y, xx)) - x_zp) as f32 * x_scale;
                    let r = wx0 * wy0 * q(ty.i0, tx.i0)
                        + wx1 * wy0 * q(ty.i0, tx.i1)
                        + wx0 * wy1 * q(ty.i1, tx.i0)
                        + wx1 * wy1 * q(ty.i1, tx.i1);
                    requant_float_formula(r / y_scale, y_zp, lo, hi)
                }
            };
            assert_eq!(v, expect, "{mode:?}: element {i}");
        }
        for isa in Isa::available() {
            assert_eq!(run(isa), want, "{mode:?} on {}", isa.name());
        }
    }
}

#[test]
fn float_linear_resize_is_onnx_runtimes_formula_on_every_width_and_split() {
    let mut g = SplitMix64::stream(16, 0);
    let (in_h, in_w, c) = (4, 6, 21);
    let x: Vec<f32> = (0..2 * in_h * in_w * c)
        .map(|_| g.uniform(-5.0, 5.0))
        .collect();
    // Half-pixel upsampling taps: clamped at both edges (the last ones on one pixel twice,
    // where ONNX Runtime weighs both halves), uneven weights between.
    let taps = |n_in: usize, n_out: usize| -> Vec<Tap> {
        (0..n_out)
            .map(|o| {
                let f = ((o as f32 + 0.5) * n_in as f32 / n_out as f32 - 0.5)
                    .clamp(0.0, (n_in - 1) as f32);
                let i0 = f as usize;
                let i1 = (i0 + 1).min(n_in - 1);
                Tap {
                    i0,
                    i1,
                    w1: f - i0 as f32,
                }
            })
            .collect()
    };
    let (ys, xs) = (taps(in_h, 9), taps(in_w, 13));
    assert!(ys.iter().chain(&xs).any(|t| t.i0 == t.i1) && ys.iter().any(|t| t.w1 > 0.0));
    let rows = 2 * ys.len();
    let row_len = xs.len() * c;
    let mut want = vec![0f32; rows * row_len];
    // ONNX Runtime's UpsampleBilinear: dx1 = |x - x1|, dx2 = |x - x2| (0.5 each where
    // x1 == x2), dx2·dy2·X11 + dx1·dy2·X21 + dx2·dy1·X12 + dx1·dy1·X22 left to right.
    for (i, w) in want.iter_mut().enumerate() {
        let (ch, px) = (i % c, i / c);
        let (b, oy, ox) = (
            px / (ys.len() * xs.len()),
            px / xs.len() % ys.len(),
            px % xs.len(),
        );
        let (ty, tx) = (ys[oy], xs[ox]);
        let d = |t: Tap| {
            if t.i0 == t.i1 {
                (0.5, 0.5)
            } else {
                (t.w1, 1.0 - t.w1)
            }
        };
        let ((dx1, dx2), (dy1, dy2)) = (d(tx), d(ty));
        let at = |y: usize, xx: usize| x[((b * in_h + y) * in_w + xx) * c + ch];
        *w = dx2 * dy2 * at(ty.i0, tx.i0)
            + dx1 * dy2 * at(ty.i0, tx.i1)
            + dx2 * dy1 * at(ty.i1, tx.i0)
            + dx1 * dy1 * at(ty.i1, tx.i1);
    }
    for isa in Isa::available() {
        let mut got = vec![0f32; want.len()];
        let (a, b) = got.split_at_mut(5 * row_len);
        float::resize_linear(isa, in_h, in_w, c, &ys, &xs, &x, a, 0..5);
        float::resize_linear(isa, in_h, in_w, c, &ys, &xs, &x, b, 5..rows);
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{}",
            isa.name()
        );
    }
}

#[test]
fn depthwise_matches_the_tap_by_tap_loop_on_every_width() {
    let mut g = SplitMix64::stream(15, 0);
    // (h, w, c, kh, kw, stride, pads t/l/b/r, dilation): MobileNet's 3x3 at stride 1 and 2,
    // odd channel counts around the vector widths, 5x5, rectangular, asymmetric padding,
    // dilation, a 1x1, more channels than one pass of registers holds, and rows wide enough
    // for several groups of pixels computed together.
    let cases = [
        (9, 7, 32, 3, 3, 1, [1, 1, 1, 1], 1),
        (10, 9, 96, 3, 3, 2, [1, 1, 1, 1], 1),
        (6, 5, 17, 3, 3, 1, [1, 1, 1, 1], 1),
        (7, 8, 1, 3, 3, 1, [1, 1, 1, 1], 1),
        (8, 8, 65, 5, 5, 2, [2, 2, 2, 2], 1),
        (7, 6, 33, 3, 1, 1, [1, 0, 1, 0], 1),
        (9, 9, 24, 3, 3, 2, [0, 0, 1, 1], 1),
        (9, 9, 40, 3, 3, 1, [2, 2, 2, 2], 2),
        (4, 5, 7, 1, 1, 1, [0, 0, 0, 0], 1),
        (3, 4, 960, 3, 3, 1, [1, 1, 1, 1], 1),
        (5, 23, 48, 3, 3, 1, [1, 1, 1, 1], 1),
        (6, 29, 16, 7, 7, 2, [3, 3, 3, 3], 1),
        (11, 13, 130, 8, 8, 1, [3, 4, 4, 3], 1),
        (7, 40, 72, 3, 3, 1, [1, 1, 1, 1], 1),
    ];
    for (h, w, c, kh, kw, s, [pt, pl, pb, pr], dl) in cases {
        let out_h = (h + pt + pb - (kh - 1) * dl - 1) / s + 1;
        let out_w = (w + pl + pr - (kw - 1) * dl - 1) / s + 1;
        let win = test_window((h, w), (out_h, out_w), (kh, kw), s, dl, (pt, pl));
        // -128 among the weights (the taps one by one) or not (the taps in pairs).
        for (x_zp, y_zp, lo, hi, extreme) in [
            (-128, -128, -128, 127, true),
            (127, 3, 3, 90, false),
            (-7, 12, -128, 127, false),
            (-128, -128, -128, 127, false),
            (127, 3, 3, 90, true),
        ] {
            let conv = GeneralConv {
                win,
                in_c: c,
                out_c: c,
                groups: c,
                // Extreme weights included: -128 against inputs 255 from the zero point.
                weights: (0..c * kh * kw)
                    .map(|i| match (extreme, i % 11 == 0) {
                        (true, true) => -128,
                        (false, true) => -127,
                        _ => g.next_i8().max(-127),
                    })
                    .collect(),
                bias: (0..c).map(|_| g.below(20_001) as i32 - 10_000).collect(),
                multipliers: (0..c).map(|_| g.uniform(1e-4, 4e-3)).collect(),
                x_zp,
                y_zp,
                lo,
                hi,
                depthwise: Default::default(),
                grouped: Vec::new(),
            }
            .prepared();
            assert_eq!(
                conv.depthwise.tap_major.len(),
                c * kh * kw,
                "{c} channels are depthwise"
            );
            // On a VNNI CPU the AVX-512 width runs the VNNI kernel: it must be there.
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                conv.depthwise.vnni.is_some(),
                std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx512bw"),
                "{c} channels: the VNNI packing"
            );
            let x: Vec<i8> = (0..2 * h * w * c)
                .map(|i| if i % 13 == 0 { -128 } else { g.next_i8() })
                .collect();
            let rows = 2 * out_h;
            let mut want = vec![0i8; rows * out_w * c];
            conv.run_taps(&x, &mut want, 0..rows);
            assert!(
                want.iter().any(|&v| v != want[0]),
                "case {h}x{w}x{c}: a constant output would compare nothing"
            );
            for isa in Isa::available() {
                // In two row ranges, as the lanes split it.
                let mut got = vec![0i8; want.len()];
                let split = rows / 2 * out_w * c;
                let (a, b) = got.split_at_mut(split);
                conv.run(isa, &x, a, 0..rows / 2).unwrap();
                conv.run(isa, &x, b, rows / 2..rows).unwrap();
                assert_eq!(got, want, "{} on {h}x{w}x{c} {kh}x{kw}/{s}", isa.name());
            }
            // The accumulators (a float-output convolution's): the tap loop's sums, which
            // requantize to its bytes, on every width and split.
            let mut want_acc = vec![0i32; want.len()];
            conv.run_taps(&x, &mut want_acc, 0..rows);
            let requantized: Vec<i8> = want_acc
                .iter()
                .enumerate()
                .map(|(i, &a)| <i8 as ConvOut>::from_acc(a, conv.multipliers[i % c], &conv))
                .collect();
            assert_eq!(requantized, want, "{h}x{w}x{c}: the sums behind the bytes");
            for isa in Isa::available() {
                let mut got = vec![0i32; want.len()];
                let split = rows / 2 * out_w * c;
                let (a, b) = got.split_at_mut(split);
                conv.run_acc(isa, &x, a, 0..rows / 2);
                conv.run_acc(isa, &x, b, rows / 2..rows);
                assert_eq!(got, want_acc, "{} accumulators on {h}x{w}x{c}", isa.name());
            }
        }
    }
}

#[test]
fn grouped_dense_accumulators_equal_the_tap_loop() {
    // A float-output grouped convolution (RegNet's, as ModelOpt exports it) on its per-group
    // dense layers: the same exact sums as the tap loop, on the layers' kernel path and the
    // scalar one, over two row ranges; a batch of two images.
    use crate::conv::{ConvShape, KernelPath};
    use crate::quant::QParams;
    let mut g = SplitMix64::stream(17, 0);
    for (icg, ocg, groups, k, s) in [(8, 8, 3, 3, 2), (8, 16, 2, 3, 1), (5, 3, 4, 1, 1)] {
        let (h, w, pad) = (7, 6, k / 2);
        let (c, oc) = (icg * groups, ocg * groups);
        let out_h = (h + 2 * pad - k) / s + 1;
        let out_w = (w + 2 * pad - k) / s + 1;
        let win = test_window((h, w), (out_h, out_w), (k, k), s, 1, (pad, pad));
        let weights: Vec<i8> = (0..oc * k * k * icg).map(|_| g.next_i8()).collect();
        let bias: Vec<i32> = (0..oc).map(|_| g.below(2001) as i32 - 1000).collect();
        let x_q = QParams::new(0.02, -3);
        for path in [KernelPath::best(), KernelPath::Scalar] {
            let per_group = ocg * k * k * icg;
            let shape = ConvShape {
                in_c: icg,
                out_c: ocg,
                k,
                stride: s,
                pad,
            };
            let grouped: Vec<Conv2d> = (0..groups)
                .map(|gi| {
                    let oc_range = gi * ocg..(gi + 1) * ocg;
                    let mut l = Conv2d::new(
                        shape,
                        weights[gi * per_group..(gi + 1) * per_group].to_vec(),
                        vec![0.01; ocg],
                        bias[oc_range].to_vec(),
                        x_q,
                        x_q,
                        false,
                    )
                    .unwrap();
                    l.set_path(path).unwrap();
                    l
                })
                .collect();
            let conv = GeneralConv {
                win,
                in_c: c,
                out_c: oc,
                groups,
                weights: weights.clone(),
                bias: bias.clone(),
                multipliers: vec![1.0; oc],
                x_zp: i32::from(x_q.zero_point),
                y_zp: 0,
                lo: -128,
                hi: 127,
                depthwise: Default::default(),
                grouped,
            }
            .prepared();
            let x: Vec<i8> = (0..2 * h * w * c).map(|_| g.next_i8()).collect();
            let rows = 2 * out_h;
            let n = rows * out_w * oc;
            let mut want = vec![0i32; n];
            conv.run_taps(&x, &mut want, 0..rows);
            let mut got = vec![0i32; n];
            let (a, b) = got.split_at_mut(3 * out_w * oc);
            conv.run_acc(Isa::PORTABLE, &x, a, 0..3);
            conv.run_acc(Isa::PORTABLE, &x, b, 3..rows);
            assert_eq!(
                got, want,
                "{groups} groups of {icg}>{ocg} {k}x{k}/{s} on {path:?}"
            );
        }
    }
}

#[test]
fn general_accumulators_are_the_sums_behind_the_bytes() {
    // Not depthwise: a rectangular kernel with asymmetric pads (the patch loop) and a
    // grouped one (the tap loop), each against its own bytes, over two row ranges.
    let mut g = SplitMix64::stream(16, 0);
    for (c, oc, groups, kh, kw, s) in [(5, 7, 1, 3, 2, 1), (8, 12, 4, 3, 3, 2)] {
        let (h, w, pt, pl) = (7, 6, 1, 0);
        let out_h = (h + 2 * pt - kh) / s + 1;
        let out_w = (w + pl - kw) / s + 1;
        let win = test_window((h, w), (out_h, out_w), (kh, kw), s, 1, (pt, pl));
        let conv = GeneralConv {
            win,
            in_c: c,
            out_c: oc,
            groups,
            weights: (0..oc * kh * kw * c / groups)
                .map(|_| g.next_i8())
                .collect(),
            bias: (0..oc).map(|_| g.below(2001) as i32 - 1000).collect(),
            multipliers: (0..oc).map(|_| g.uniform(1e-4, 4e-3)).collect(),
            x_zp: -3,
            y_zp: 5,
            lo: -128,
            hi: 127,
            depthwise: Default::default(),
            grouped: Vec::new(),
        }
        .prepared();
        assert!(!conv.is_depthwise());
        let x: Vec<i8> = (0..h * w * c).map(|_| g.next_i8()).collect();
        let n = out_h * out_w * oc;
        let mut bytes = vec![0i8; n];
        conv.run(Isa::PORTABLE, &x, &mut bytes, 0..out_h).unwrap();
        let mut acc = vec![0i32; n];
        let (a, b) = acc.split_at_mut(out_h / 2 * out_w * oc);
        conv.run_acc(Isa::PORTABLE, &x, a, 0..out_h / 2);
        conv.run_acc(Isa::PORTABLE, &x, b, out_h / 2..out_h);
        let requantized: Vec<i8> = acc
            .iter()
            .enumerate()
            .map(|(i, &a)| <i8 as ConvOut>::from_acc(a, conv.multipliers[i % oc], &conv))
            .collect();
        assert_eq!(requantized, bytes, "{c}>{oc} /{groups} {kh}x{kw}");
        let mut taps = vec![0i32; n];
        conv.run_taps(&x, &mut taps, 0..out_h);
        assert_eq!(acc, taps, "{c}>{oc} /{groups} {kh}x{kw}");
        assert!(acc.iter().any(|&v| v != acc[0]));
    }
}

/// A window over an `h × w` input with equal strides and dilations in both directions.
pub(super) fn test_window(
    (in_h, in_w): (usize, usize),
    (out_h, out_w): (usize, usize),
    (kh, kw): (usize, usize),
    s: usize,
    dl: usize,
    (pt, pl): (usize, usize),
) -> Window {
    Window {
        in_h,
        in_w,
        out_h,
        out_w,
        kh,
        kw,
        sh: s,
        sw: s,
        dh: dl,
        dw: dl,
        pt,
        pl,
    }
}
