//! Elementwise binary operators (`Add`, `Mul`) over broadcast operands, and the `Add`
//! fused into a convolution's output; see the parent module's contract.

use super::{requant_f32, round_magic, Isa};
use crate::onnx::isa::multiversion;
use std::ops::Range;

/// An elementwise binary operator over broadcast operands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum BinaryKind {
    /// ONNX Runtime's x86 `QLinearAdd`, operation for operation ([`AddParams`]).
    Add(AddParams),
    /// ONNX Runtime's `QLinearMul` on x86-64 (MLAS), operation for operation
    /// ([`MulParams`]): what it runs for a `QLinearMul` and for a QDQ `Mul` whose operands
    /// and output share one type.
    Mul(MulParams),
    /// `y = ((a - za) sa * (b - zb) sb) / sy`: float `Mul` between dequantized operands, as
    /// ONNX Runtime runs a QDQ `Mul` it does not fuse (operands of two types).
    MulDequantized,
    /// `y = ((a - za) sa / ((b - zb) sb)) / sy`: ONNX Runtime has no quantized `Div` and
    /// runs `DequantizeLinear → Div → QuantizeLinear` in float, these operations in this
    /// order. A zero divisor gives ±inf (saturated) or, for `0 / 0`, NaN, which quantizes
    /// to the lowest byte (`lo`), as in ONNX Runtime.
    Div,
    /// `y = ((a - za) sa - (b - zb) sb) / sy`: float `Sub` between dequantized operands, as
    /// ONNX Runtime runs it (no quantized `Sub` either).
    Sub,
}

/// `y = fma(a + off, ra, fma(b + off, rb, fixed))`, rounded half to even, minus `off`,
/// then clamped to the operator's `[lo, hi]`: ONNX Runtime's `QLinearAdd` on x86-64 with
/// AVX2 (MLAS), operation for operation, on the integers as the file stores them. `ra = sa
/// / sy`, `rb = sb / sy` and `fixed = zy - fma(ra, za, rb·zb)` ([`add_fixed`]) with the
/// stored zero points, so the output zero point is inside `fixed`. `off` is 128 for `uint8`
/// tensors, which the engine holds as `x - 128` (`x ^ 0x80`): adding it back is exact. 0
/// for `int8`. Checked against ONNX Runtime 1.32 on every residual add of ResNet-18 (8 adds,
/// 3 inputs: 0 of 2.1 M sums differ); with separate multiplies and adds 8 did, and without
/// `off` a PyTorch-exported ResNet-18 had 6 of 200,704 in its first block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AddParams {
    pub ra: f32,
    pub rb: f32,
    pub fixed: f32,
    pub off: f32,
}

impl AddParams {
    /// True when every `y` of two codes (`|code + off| <= 255`) is finite and inside
    /// ±3,900,000 (bounded in `f64`, far from `f32` rounding): [`add_one_bounded`] then
    /// gives [`add_one`]'s byte without the clamp before rounding and the NaN test, which
    /// only extreme scale ratios need (nearly every model's adds are bounded).
    pub(crate) fn bounded(&self) -> bool {
        let code = 128.0 + f64::from(self.off).abs();
        let bound = (f64::from(self.ra).abs() + f64::from(self.rb).abs()) * code
            + f64::from(self.fixed).abs();
        bound.is_finite() && bound < 3_900_000.0
    }
}

/// `y = sat(round_even((a - za)(b - zb) · ratio + zy_stored)) − off`, then clamped to the
/// operator's `[lo, hi]`: ONNX Runtime's `MlasQLinearMul` on x86-64. The product of the
/// two debiased integers is exact (16 × 16 bits); `ratio = (sa · sb) / sy` is one `f32`;
/// the multiply and the add round separately (no fused multiply-add); the conversion
/// rounds half to even and gives `i32::MIN` outside the `i32` range (`cvtps2dq`); the result
/// saturates to `i16`, then to the stored type's range. `zy_stored` is the stored
/// zero point and `off` 128 for `uint8` tensors (held as `x − 128`), 0 for `int8`: adding
/// the zero point in the stored domain keeps the float sum's rounding ONNX Runtime's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct MulParams {
    pub ratio: f32,
    pub zy_stored: f32,
    pub off: i32,
}

impl MulParams {
    /// True when `|w| < 4,000,000` for every product of two zero-point-relative codes
    /// (`|prod| <= 255²`): [`qlinear_mul_contiguous`] then skips the clamps that only
    /// extreme scale ratios need.
    pub(crate) fn bounded(&self) -> bool {
        self.ratio.is_finite() && self.ratio.abs() * 65_025.0 + self.zy_stored.abs() < 3_900_000.0
    }

    /// The parameters for scales `sa`, `sb`, `sy`, the output's internal zero point `zy`,
    /// and whether the tensors are stored as `uint8`.
    pub(crate) fn new(sa: f32, sb: f32, sy: f32, zy: i32, stored_u8: bool) -> Self {
        let off = if stored_u8 { 128 } else { 0 };
        Self {
            ratio: sa * sb / sy,
            zy_stored: (zy + off) as f32,
            off,
        }
    }
}

/// Parameters of a binary operator: zero points, clamp, and the broadcast strides of both
/// operands over the output's (physical, row-major) shape, outermost first.
#[derive(Clone, Debug)]
pub(crate) struct Binary {
    pub kind: BinaryKind,
    pub sa: f32,
    pub sb: f32,
    pub sy: f32,
    pub za: i32,
    pub zb: i32,
    pub zy: i32,
    pub lo: i8,
    pub hi: i8,
    /// Output shape (physical order).
    pub shape: Vec<usize>,
    pub a_strides: Vec<usize>,
    pub b_strides: Vec<usize>,
}

impl Binary {
    /// One output element from one element of each operand: the function every path of
    /// [`Binary::run`] applies (so a table of it gives the same bytes).
    #[inline(always)]
    pub(crate) fn one(&self, a: i8, b: i8) -> i8 {
        match self.kind {
            BinaryKind::Add(p) => add_one(p, self.lo, self.hi, a, b),
            BinaryKind::Mul(m) => qlinear_mul_one(m, self.za, self.zb, self.lo, self.hi, a, b),
            BinaryKind::MulDequantized => mul_one(self, a, b),
            BinaryKind::Div => div_one(self, a, b),
            BinaryKind::Sub => sub_one(self, a, b),
        }
    }

    /// `n` contiguous elements of both operands (a row, or the whole tensor), on `isa`.
    fn contiguous(&self, isa: Isa, a: &[i8], b: &[i8], out: &mut [i8]) {
        match self.kind {
            BinaryKind::Add(p) => add_contiguous(isa, p, self.lo, self.hi, a, b, out),
            BinaryKind::Mul(m) => {
                let (za, zb, lo, hi) = (self.za, self.zb, self.lo, self.hi);
                qlinear_mul_contiguous(isa, m, (za, zb, lo, hi), a, b, out)
            }
            BinaryKind::MulDequantized => mul_contiguous(isa, self, a, b, out),
            // Rare in models (no quantizer fuses them): the portable loop.
            BinaryKind::Div | BinaryKind::Sub => {
                for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
                    *d = self.one(*x, *y);
                }
            }
        }
    }

    /// Elements `range` of the output (flat index, physical order).
    pub fn run(&self, isa: Isa, a: &[i8], b: &[i8], out: &mut [i8], range: Range<usize>) {
        let n: usize = self.shape.iter().product();
        if a.len() == n
            && b.len() == n
            && dense_strides(&self.a_strides, &self.shape)
            && dense_strides(&self.b_strides, &self.shape)
        {
            // Same shape, both contiguous: one flat loop, vectorised for `isa`.
            self.contiguous(isa, &a[range.clone()], &b[range], out);
            return;
        }
        let rank = self.shape.len();
        let inner = self.shape.last().copied().unwrap_or(1).max(1);
        // One operand dense, the other a block of `period` elements repeated (a per-channel
        // vector against an NHWC tensor: squeeze-and-excitation's scale; a window
        // attention's position bias, one [heads, 49, 49] block for every window): runs of
        // the block, no index arithmetic.
        let a_dense = a.len() == n && dense_strides(&self.a_strides, &self.shape);
        let b_dense = b.len() == n && dense_strides(&self.b_strides, &self.shape);
        let b_period = if a_dense {
            repeat_period(&self.b_strides, &self.shape, b.len())
        } else {
            None
        };
        let a_period = if b_dense {
            repeat_period(&self.a_strides, &self.shape, a.len())
        } else {
            None
        };
        // (Short blocks that are not whole rows, a scalar among them, go element by element
        // below: runs of a few elements cost more than they save.)
        let long = |p: &usize| *p == inner || *p >= 64;
        let (b_period, a_period) = (b_period.filter(long), a_period.filter(long));
        if let Some(period) = b_period.or(a_period) {
            // A short block is repeated into a stack tile of whole blocks first, so the
            // runs from a block's start are `TILE`-long, not one block (a 32-channel gate
            // against a 112×112 map: 12,544 calls of 32 elements otherwise).
            const TILE: usize = 1024;
            let block = if b_period.is_some() {
                &b[..period]
            } else {
                &a[..period]
            };
            let mut tile = [0i8; TILE];
            let tiled = if period < TILE {
                let len = TILE / period * period;
                for chunk in tile[..len].chunks_exact_mut(period) {
                    chunk.copy_from_slice(block);
                }
                len
            } else {
                0
            };
            let (mut i, mut o) = (range.start, 0);
            while i < range.end {
                let col = i % period;
                let (rep, m) = if col == 0 && tiled > 0 {
                    let m = tiled.min(range.end - i);
                    (&tile[..m], m)
                } else {
                    let m = (period - col).min(range.end - i);
                    (&block[col..col + m], m)
                };
                let (ra, rb) = if b_period.is_some() {
                    (&a[i..i + m], rep)
                } else {
                    (rep, &b[i..i + m])
                };
                self.contiguous(isa, ra, rb, &mut out[o..o + m]);
                i += m;
                o += m;
            }
            return;
        }
        let (sa, sb) = (
            self.a_strides.last().copied().unwrap_or(0),
            self.b_strides.last().copied().unwrap_or(0),
        );
        let mut i = range.start;
        let mut o = 0;
        while i < range.end {
            // Offsets of the row containing flat index i.
            let mut rem = i / inner;
            let (mut oa, mut ob) = (0usize, 0usize);
            for d in (0..rank.saturating_sub(1)).rev() {
                let idx = rem % self.shape[d];
                rem /= self.shape[d];
                oa += idx * self.a_strides[d];
                ob += idx * self.b_strides[d];
            }
            let col = i % inner;
            let n = (inner - col).min(range.end - i);
            if sa == 1 && sb == 1 {
                let (a, b) = (&a[oa + col..oa + col + n], &b[ob + col..ob + col + n]);
                self.contiguous(isa, a, b, &mut out[o..o + n]);
            } else if (sa, sb) == (1, 0) || (sa, sb) == (0, 1) {
                // One operand's row, the other's one value along it (a per-head scale of
                // attention logits): that value repeated in a stack row, so the row runs
                // through the vectorised contiguous loop, in pieces of `SPLAT`.
                const SPLAT: usize = 256;
                let (row, v, row_is_a) = if sa == 1 {
                    (&a[oa + col..oa + col + n], b[ob], true)
                } else {
                    (&b[ob + col..ob + col + n], a[oa], false)
                };
                let splat = [v; SPLAT];
                for (k, piece) in row.chunks(SPLAT).enumerate() {
                    let dst = &mut out[o + k * SPLAT..o + k * SPLAT + piece.len()];
                    let other = &splat[..piece.len()];
                    if row_is_a {
                        self.contiguous(isa, piece, other, dst);
                    } else {
                        self.contiguous(isa, other, piece, dst);
                    }
                }
            } else {
                for k in 0..n {
                    out[o + k] = self.one(a[oa + (col + k) * sa], b[ob + (col + k) * sb]);
                }
            }
            i += n;
            o += n;
        }
    }

    /// This `Add` in place: `conv` holds one operand (the first when `conv_is_a`) and
    /// receives the sum; `other` holds the other operand's same elements. The same
    /// operations in the same order as [`Binary::run`]. Does nothing for `Mul`.
    pub fn add_in_place(&self, isa: Isa, conv_is_a: bool, conv: &mut [i8], other: &[i8]) {
        if let BinaryKind::Add(p) = self.kind {
            add_into(isa, p, self.lo, self.hi, conv_is_a, conv, other);
        }
    }
}

/// [`add_one`] with one operand read from and the sum written to `acc`. Bounded
/// parameters on AVX-512 run [`add_bounded_avx512`] in place; the rest
/// [`add_into_loop`].
pub(super) fn add_into(
    isa: Isa,
    p: AddParams,
    lo: i8,
    hi: i8,
    acc_is_a: bool,
    acc: &mut [i8],
    other: &[i8],
) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() && p.bounded() {
        let n = acc.len().min(other.len());
        // One pointer for both the read and the write of `acc`.
        let acc = acc.as_mut_ptr();
        let (a, b) = if acc_is_a {
            (acc.cast_const(), other.as_ptr())
        } else {
            (other.as_ptr(), acc.cast_const())
        };
        // SAFETY: an AVX-512 `Isa` exists only after avx512f/bw/vl were detected; the
        // parameters are bounded; `a`, `b` and `acc` hold at least `n` elements each, and
        // `acc` is read at each element before that element is written.
        unsafe { add_bounded_avx512(p, lo, hi, a, b, acc, n) };
        return;
    }
    add_into_loop(isa, p, lo, hi, acc_is_a, acc, other)
}

multiversion! {
    /// [`add_one`] with one operand read from and the sum written to `acc`.
    fn add_into_loop(
        p: AddParams,
        lo: i8,
        hi: i8,
        acc_is_a: bool,
        acc: &mut [i8],
        other: &[i8],
    ) {
        if p.bounded() {
            add_into_with(|a, b| add_one_bounded(p, lo, hi, a, b), acc_is_a, acc, other);
        } else {
            add_into_with(|a, b| add_one(p, lo, hi, a, b), acc_is_a, acc, other);
        }
    }
}

/// `acc[i] = add(acc[i], other[i])`, or `add(other[i], acc[i])` when `acc` is the second
/// operand; inlined into each width of [`add_into`] with its element function.
#[inline(always)]
fn add_into_with(add: impl Fn(i8, i8) -> i8, acc_is_a: bool, acc: &mut [i8], other: &[i8]) {
    if acc_is_a {
        for (d, y) in acc.iter_mut().zip(other) {
            *d = add(*d, *y);
        }
    } else {
        for (d, x) in acc.iter_mut().zip(other) {
            *d = add(*x, *d);
        }
    }
}

/// One `Add` element ([`BinaryKind::Add`]).
#[inline(always)]
pub(super) fn add_one(p: AddParams, lo: i8, hi: i8, a: i8, b: i8) -> i8 {
    let v = (f32::from(a) + p.off).mul_add(p.ra, (f32::from(b) + p.off).mul_add(p.rb, p.fixed));
    requant_f32(v, -(p.off as i32), lo, hi)
}

/// [`add_one`] for [`AddParams::bounded`] parameters: `y` is finite and `|y| < 2^22`, so
/// rounding it unclamped ([`round_magic`]) and clamping the integer gives the same byte
/// (beyond ±1024 both saturate to `lo` or `hi`). Four vector operations fewer per 16 sums.
#[inline(always)]
pub(super) fn add_one_bounded(p: AddParams, lo: i8, hi: i8, a: i8, b: i8) -> i8 {
    let v = (f32::from(a) + p.off).mul_add(p.ra, (f32::from(b) + p.off).mul_add(p.rb, p.fixed));
    (round_magic(v).1 - p.off as i32).clamp(i32::from(lo), i32::from(hi)) as i8
}

/// `fixed` of [`AddParams`] for ratios `ra`, `rb` and the stored zero points `za`, `zb`,
/// `zy`: `zy - fma(ra, za, rb·zb)`, as ONNX Runtime's compiler contracts its
/// `zy - (ra·za + rb·zb)`.
pub(crate) fn add_fixed(ra: f32, rb: f32, za: f32, zb: f32, zy: f32) -> f32 {
    zy - ra.mul_add(za, rb * zb)
}

/// One `QLinearMul` element ([`BinaryKind::Mul`]): `a`, `b` and the result in the
/// engine's `i8` form, `za`, `zb` internal zero points.
#[inline(always)]
pub(super) fn qlinear_mul_one(m: MulParams, za: i32, zb: i32, lo: i8, hi: i8, a: i8, b: i8) -> i8 {
    let prod = (i32::from(a) - za) * (i32::from(b) - zb);
    let w = prod as f32 * m.ratio + m.zy_stored;
    // `cvtps2dq` rounds half to even and gives `i32::MIN` for NaN and values outside the
    // `i32` range; `packs_epi32` then saturates to `i16`, and `packus_epi16` (uint8) or
    // `packs_epi16` (int8) to the stored range: so `i32::MIN` is the lowest code, and any
    // `|w| >= 2^22` saturates, which lets the rounding be `round_magic`'s (it vectorises).
    let (s_lo, s_hi) = (-128 + m.off, 127 + m.off);
    let r = round_magic(w.clamp(-4_000_000.0, 4_000_000.0))
        .1
        .clamp(s_lo, s_hi);
    let stored = if (-2_147_483_648.0..2_147_483_648.0).contains(&w) {
        r
    } else {
        s_lo
    };
    ((stored - m.off) as i8).clamp(lo, hi)
}

/// One dequantized `Mul` element ([`BinaryKind::MulDequantized`]).
#[inline(always)]
pub(super) fn mul_one(p: &Binary, a: i8, b: i8) -> i8 {
    let (a, b) = (i32::from(a) - p.za, i32::from(b) - p.zb);
    let v = (a as f32 * p.sa * (b as f32 * p.sb)) / p.sy;
    requant_f32(v, p.zy, p.lo, p.hi)
}

/// One `Div` element ([`BinaryKind::Div`]).
#[inline(always)]
pub(super) fn div_one(p: &Binary, a: i8, b: i8) -> i8 {
    let (a, b) = (i32::from(a) - p.za, i32::from(b) - p.zb);
    let v = (a as f32 * p.sa / (b as f32 * p.sb)) / p.sy;
    if v.is_nan() {
        // 0 / 0: ONNX Runtime's QuantizeLinear clamps with `max(v, lo)` first, which gives
        // `lo` for NaN (and a fused Relu's `max(v, 0)` gives 0, whose byte is `lo` too).
        return p.lo;
    }
    requant_f32(v, p.zy, p.lo, p.hi)
}

/// One `Sub` element ([`BinaryKind::Sub`]).
#[inline(always)]
pub(super) fn sub_one(p: &Binary, a: i8, b: i8) -> i8 {
    let (a, b) = (i32::from(a) - p.za, i32::from(b) - p.zb);
    let v = (a as f32 * p.sa - b as f32 * p.sb) / p.sy;
    requant_f32(v, p.zy, p.lo, p.hi)
}

/// [`add_one`] over equally long contiguous slices. Bounded parameters on AVX-512 run
/// [`add_bounded_avx512`]; the rest [`add_contiguous_loop`].
pub(super) fn add_contiguous(
    isa: Isa,
    p: AddParams,
    lo: i8,
    hi: i8,
    a: &[i8],
    b: &[i8],
    out: &mut [i8],
) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() && p.bounded() {
        let n = a.len().min(b.len()).min(out.len());
        // SAFETY: an AVX-512 `Isa` exists only after avx512f/bw/vl were detected; the
        // parameters are bounded; the three slices hold at least `n` elements and `out`
        // overlaps neither input (a `&mut` borrow).
        unsafe { add_bounded_avx512(p, lo, hi, a.as_ptr(), b.as_ptr(), out.as_mut_ptr(), n) };
        return;
    }
    add_contiguous_loop(isa, p, lo, hi, a, b, out)
}

/// [`add_one_bounded`] on `n` elements in AVX-512, 64 a step: per 16, the two widening
/// loads, `+ off` and the two fused multiply-adds of the formula in its order (exact
/// conversions, then `fma(a + off, ra, fma(b + off, rb, fixed))`), `cvtps2dq` (round half
/// to even under the default MXCSR: [`round_magic`]'s result for `|y| < 2^22`, which
/// [`AddParams::bounded`] guarantees), `off` off and the clamp to `[lo, hi]`; the four
/// stored as 64 bytes ([`crate::conv::store_packed64`]). The tail through the scalar
/// formula. The same bytes as [`add_one_bounded`] (and so [`add_one`]).
///
/// # Safety
///
/// The CPU supports AVX-512 F and BW; `p.bounded()`; `a`, `b` and `out` point to `n`
/// elements each; `out` may be `a` or `b` (each 64-byte step reads before it writes) but
/// overlaps them in no other way.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn add_bounded_avx512(
    p: AddParams,
    lo: i8,
    hi: i8,
    a: *const i8,
    b: *const i8,
    out: *mut i8,
    n: usize,
) {
    use std::arch::x86_64::*;
    debug_assert!(p.bounded());
    let (ra, rb, fixed) = (
        _mm512_set1_ps(p.ra),
        _mm512_set1_ps(p.rb),
        _mm512_set1_ps(p.fixed),
    );
    let offf = _mm512_set1_ps(p.off);
    let off = _mm512_set1_epi32(p.off as i32);
    let (vlo, vhi) = (
        _mm512_set1_epi32(i32::from(lo)),
        _mm512_set1_epi32(i32::from(hi)),
    );
    let lanes = move |x: __m512i, y: __m512i| {
        let xf = _mm512_add_ps(_mm512_cvtepi32_ps(x), offf);
        let yf = _mm512_add_ps(_mm512_cvtepi32_ps(y), offf);
        let v = _mm512_fmadd_ps(xf, ra, _mm512_fmadd_ps(yf, rb, fixed));
        let q = _mm512_sub_epi32(_mm512_cvtps_epi32(v), off);
        _mm512_max_epi32(_mm512_min_epi32(q, vhi), vlo)
    };
    // SAFETY: the caller's: `n` elements at each pointer, `out` only `a` or `b` if either.
    unsafe { packed_binary_avx512(a, b, out, n, lanes, |x, y| add_one_bounded(p, lo, hi, x, y)) }
}

multiversion! {
    /// [`add_one`] over equally long contiguous slices.
    fn add_contiguous_loop(p: AddParams, lo: i8, hi: i8, a: &[i8], b: &[i8], out: &mut [i8]) {
        if p.bounded() {
            for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
                *d = add_one_bounded(p, lo, hi, *x, *y);
            }
            return;
        }
        for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
            *d = add_one(p, lo, hi, *x, *y);
        }
    }
}

/// [`qlinear_mul_one`] over equally long contiguous slices; `z` is (za, zb, lo, hi). The
/// bounded loop on AVX-512 is [`qlinear_mul_bounded_avx512`]; the rest the compiler's
/// vectorisation of the formula ([`qlinear_mul_loop`]).
pub(super) fn qlinear_mul_contiguous(
    isa: Isa,
    m: MulParams,
    z: (i32, i32, i8, i8),
    a: &[i8],
    b: &[i8],
    out: &mut [i8],
) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() && m.bounded() {
        let n = a.len().min(b.len()).min(out.len());
        // SAFETY: an AVX-512 `Isa` exists only after avx512f/bw/vl were detected; the
        // parameters are bounded; the three slices hold `n` elements each.
        unsafe { qlinear_mul_bounded_avx512(m, z, &a[..n], &b[..n], &mut out[..n]) };
        return;
    }
    qlinear_mul_loop(isa, m, z, a, b, out)
}

multiversion! {
    /// [`qlinear_mul_one`] over equally long contiguous slices; `z` is (za, zb, lo, hi).
    fn qlinear_mul_loop(
        m: MulParams,
        z: (i32, i32, i8, i8),
        a: &[i8],
        b: &[i8],
        out: &mut [i8],
    ) {
        let (za, zb, lo, hi) = z;
        if m.bounded() {
            // Every `w` is finite and inside ±4,000,000: the clamp before rounding and the
            // `i32`-range test of [`qlinear_mul_one`] cannot change it, and the stored
            // range's clamp is inside the fused one's `[lo, hi]` shifted by `off`.
            let (lo, hi) = (i32::from(lo), i32::from(hi));
            for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
                let prod = (i32::from(*x) - za) * (i32::from(*y) - zb);
                let w = prod as f32 * m.ratio + m.zy_stored;
                *d = (round_magic(w).1 - m.off).clamp(lo, hi) as i8;
            }
            return;
        }
        for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
            *d = qlinear_mul_one(m, za, zb, lo, hi, *x, *y);
        }
    }
}

/// [`qlinear_mul_loop`]'s bounded loop in AVX-512, 64 elements per step: per 16, the
/// two widening loads, the zero points off, the exact `i32` product, its `f32` times
/// `ratio` plus `zy_stored` (two roundings, no fused multiply-add, as MLAS), `cvtps2dq`
/// (round half to even under the default MXCSR: [`round_magic`]'s result for `|w| < 2^22`,
/// which [`MulParams::bounded`] guarantees), `off` off and the clamp to `[lo, hi]`; the four
/// results stored as 64 bytes ([`crate::conv::store_packed64`]).
/// The tail goes through the scalar formula. The same bytes as [`qlinear_mul_one`].
///
/// # Safety
///
/// The CPU supports AVX-512 F and BW; `m.bounded()`; `a`, `b` and `out` have one length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn qlinear_mul_bounded_avx512(
    m: MulParams,
    z: (i32, i32, i8, i8),
    a: &[i8],
    b: &[i8],
    out: &mut [i8],
) {
    use std::arch::x86_64::*;
    debug_assert!(m.bounded() && a.len() == b.len() && a.len() == out.len());
    let (za, zb, lo, hi) = z;
    let (vza, vzb) = (_mm512_set1_epi32(za), _mm512_set1_epi32(zb));
    let (ratio, zy) = (_mm512_set1_ps(m.ratio), _mm512_set1_ps(m.zy_stored));
    let off = _mm512_set1_epi32(m.off);
    let (vlo, vhi) = (
        _mm512_set1_epi32(i32::from(lo)),
        _mm512_set1_epi32(i32::from(hi)),
    );
    let lanes = move |x: __m512i, y: __m512i| {
        let prod = _mm512_mullo_epi32(_mm512_sub_epi32(x, vza), _mm512_sub_epi32(y, vzb));
        let w = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(prod), ratio), zy);
        let q = _mm512_sub_epi32(_mm512_cvtps_epi32(w), off);
        _mm512_max_epi32(_mm512_min_epi32(q, vhi), vlo)
    };
    let one = |x, y| qlinear_mul_one(m, za, zb, lo, hi, x, y);
    // SAFETY: the three slices hold `a.len()` elements each (our precondition), and `out`,
    // a `&mut` borrow, overlaps neither input.
    unsafe {
        packed_binary_avx512(
            a.as_ptr(),
            b.as_ptr(),
            out.as_mut_ptr(),
            a.len(),
            lanes,
            one,
        )
    }
}

/// The loop of the bounded AVX-512 `Add` and `Mul`: 64 elements a step, each operand's 16
/// at a time widened to `i32` and mapped by `lanes` to 16 results already inside `[-128,
/// 127]`, the four stored as 64 bytes ([`crate::conv::store_packed64`]); the tail through
/// `one`, the scalar formula of the same element.
///
/// # Safety
///
/// AVX-512 F and BW; `a`, `b` and `out` point to `n` elements each; `out` may be `a` or
/// `b` (each step reads its 64 elements before it writes them) but overlaps them in no other
/// way.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn packed_binary_avx512(
    a: *const i8,
    b: *const i8,
    out: *mut i8,
    n: usize,
    lanes: impl Fn(std::arch::x86_64::__m512i, std::arch::x86_64::__m512i) -> std::arch::x86_64::__m512i,
    one: impl Fn(i8, i8) -> i8,
) {
    use std::arch::x86_64::*;
    let mut i = 0;
    while i + 64 <= n {
        let r: [__m512i; 4] = std::array::from_fn(|k| {
            // SAFETY: 16 bytes at `i + 16·k`, inside `a` and `b` (`i + 64 <= n`).
            let (x, y) = unsafe {
                (
                    _mm512_cvtepi8_epi32(_mm_loadu_si128(a.add(i + 16 * k).cast())),
                    _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(i + 16 * k).cast())),
                )
            };
            lanes(x, y)
        });
        // SAFETY: 64 bytes at `i + 64 <= n` of `out`, after this step's reads.
        unsafe { crate::conv::store_packed64(out.add(i), r) };
        i += 64;
    }
    while i < n {
        // SAFETY: element `i < n` of each; read before it is written.
        unsafe { *out.add(i) = one(*a.add(i), *b.add(i)) };
        i += 1;
    }
}

multiversion! {
    /// [`mul_one`] over equally long contiguous slices.
    pub(super) fn mul_contiguous(p: &Binary, a: &[i8], b: &[i8], out: &mut [i8]) {
        for ((d, x), y) in out.iter_mut().zip(a).zip(b) {
            *d = mul_one(p, *x, *y);
        }
    }
}

/// `Some(len)` when an operand of `len` elements with `strides` over `shape` is one block
/// repeated: strides 0 (or extent 1) on the outer dimensions, the row-major strides of the
/// inner ones, whose extents multiply to `len`; output element `i` then reads element
/// `i % len`.
pub(crate) fn repeat_period(strides: &[usize], shape: &[usize], len: usize) -> Option<usize> {
    let mut inner = 1;
    let mut d = shape.len();
    // The inner, dense part.
    while d > 0 && (strides[d - 1] == inner || shape[d - 1] == 1) && inner < len {
        inner *= shape[d - 1];
        d -= 1;
    }
    let outer_zero = (0..d).all(|e| strides[e] == 0 || shape[e] == 1);
    (inner == len && len > 0 && outer_zero).then_some(len)
}

/// `shape` and both operands' strides with dimensions of extent 1 dropped and each
/// dimension merged into the one before it where both operands read the two as one
/// (`strides[d] = shape[d+1] · strides[d+1]` for both; a broadcast pair, strides 0 and 0,
/// too): the same elements in the same order in fewer, longer rows (a deformable
/// attention's `[heads, C, queries, points]` values times its `[heads, 1, queries,
/// points]` weights: rows of `queries · points`, not of `points`).
pub(crate) fn coalesce(
    shape: &[usize],
    a: &[usize],
    b: &[usize],
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (mut s, mut sa, mut sb): (Vec<usize>, Vec<usize>, Vec<usize>) = (vec![], vec![], vec![]);
    for d in 0..shape.len() {
        let (n, x, y) = (shape[d], a[d], b[d]);
        if n == 1 {
            continue;
        }
        if let (Some(ln), Some(lx), Some(ly)) = (s.last_mut(), sa.last_mut(), sb.last_mut()) {
            if *lx == x * n && *ly == y * n {
                *ln *= n;
                (*lx, *ly) = (x, y);
                continue;
            }
        }
        s.push(n);
        sa.push(x);
        sb.push(y);
    }
    if s.is_empty() {
        return (vec![1], vec![1], vec![1]);
    }
    (s, sa, sb)
}

/// True when `strides` are the row-major strides of `shape` (a dimension of extent 1 may
/// have any stride: its index is always 0), so an operand's element `i` is the output's `i`.
pub(crate) fn dense_strides(strides: &[usize], shape: &[usize]) -> bool {
    let mut acc = 1;
    strides.len() == shape.len()
        && strides.iter().zip(shape).rev().all(|(&st, &d)| {
            let ok = st == acc || d == 1;
            acc *= d;
            ok
        })
}

#[cfg(test)]
mod stride_tests {
    use super::dense_strides;

    #[test]
    fn coalesced_dimensions_read_the_same_elements() {
        use super::coalesce;
        // [8, 32, 300, 12] values times [8, 1, 300, 12] weights.
        let (s, a, b) = coalesce(&[8, 32, 300, 12], &[115200, 3600, 12, 1], &[3600, 0, 12, 1]);
        assert_eq!(
            (s, a, b),
            (vec![8, 32, 3600], vec![115200, 3600, 1], vec![3600, 0, 1])
        );
        // A scalar against a tensor: one dimension; extent-1 dimensions dropped.
        let (s, a, b) = coalesce(&[2, 1, 3], &[3, 9, 1], &[0, 0, 0]);
        assert_eq!((s, a, b), (vec![6], vec![1], vec![0]));
        assert_eq!(coalesce(&[1, 1], &[1, 1], &[0, 0]).0, vec![1]);
    }

    #[test]
    fn dense_strides_are_recognised() {
        assert!(dense_strides(&[12, 4, 1], &[2, 3, 4]));
        // A broadcast operand (stride 0 over a real dimension) is not dense...
        assert!(!dense_strides(&[0, 4, 1], &[2, 3, 4]));
        // ...but any stride over an extent-1 dimension is.
        assert!(dense_strides(&[99, 4, 1], &[1, 3, 4]));
        assert!(!dense_strides(&[1, 3], &[3, 4]));
    }

    #[test]
    fn repeated_blocks_are_recognised() {
        use super::repeat_period;
        // A [heads, 49, 49] bias over [windows, heads, 49, 49].
        let shape = [64, 3, 49, 49];
        assert_eq!(
            repeat_period(&[0, 49 * 49, 49, 1], &shape, 3 * 2401),
            Some(7203)
        );
        // A per-channel row; a scalar.
        assert_eq!(repeat_period(&[0, 0, 0, 1], &shape, 49), Some(49));
        assert_eq!(repeat_period(&[0, 0, 0, 0], &shape, 1), Some(1));
        // A per-row column repeats no block.
        assert_eq!(repeat_period(&[0, 0, 1, 0], &shape, 49), None);
        // Inner strides that are not dense.
        assert_eq!(repeat_period(&[0, 0, 98, 2], &shape, 4802), None);
    }
}
