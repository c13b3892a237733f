//! Elementary functions with the same bits on every ISA, CPU and C library: the float half
//! of the determinism rule (same log + config + seed → bit-identical outputs).
//!
//! `f64::sin`, `exp`, `atan2`, ... call the platform's C math library: glibc picks FMA or
//! non-FMA code for some of them at load time by CPU, and aarch64, musl and macOS each
//! have their own implementations, none promising correct rounding. The same input can
//! then give results one ulp apart on two machines, and one ulp in a heading moves a
//! box, flips a tie in tracking and changes the output hash. The functions here are the
//! pure-Rust [`libm`] crate (a port of musl's), compiled by rustc, which never contracts
//! `a * b + c` into a fused multiply-add: the same code and the same operations on every
//! target, so the same results. `+ - * /`, `sqrt`, `abs`, `floor`, `round` and conversions
//! are exact under IEEE 754 and need nothing from here; `powi` is compiler-builtins' own
//! loop on every target.
//!
//! Contract: each function is generic over `f32` and `f64` ([`DetFloat`]), accurate to
//! within about 1 ulp (musl's bounds), and a pure function of its arguments. Cost: a
//! library call, like std's. Never allocates, locks or panics (NaN in, NaN out).
//!
//! The workspace's `clippy.toml` forbids std's versions (`disallowed-methods`), so new code
//! meets this module through the lint. Test-only comparisons with std say
//! `#[allow(clippy::disallowed_methods)]`.
//!
//! ```
//! use redline_runtime::det_math as dm;
//! let (s, c) = dm::sin_cos(0.5f32);
//! assert!((s - 0.479_425_55).abs() < 1e-6 && (c - 0.877_582_6).abs() < 1e-6);
//! assert_eq!(dm::atan2(1.0f64, 1.0), std::f64::consts::FRAC_PI_4);
//! ```

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The float types the functions take: `f32` (libm's `*f` functions) and `f64`.
pub trait DetFloat: sealed::Sealed + Copy {
    #[doc(hidden)]
    fn d_sin(self) -> Self;
    #[doc(hidden)]
    fn d_cos(self) -> Self;
    #[doc(hidden)]
    fn d_sin_cos(self) -> (Self, Self);
    #[doc(hidden)]
    fn d_tan(self) -> Self;
    #[doc(hidden)]
    fn d_atan(self) -> Self;
    #[doc(hidden)]
    fn d_atan2(self, x: Self) -> Self;
    #[doc(hidden)]
    fn d_exp(self) -> Self;
    #[doc(hidden)]
    fn d_ln(self) -> Self;
    #[doc(hidden)]
    fn d_log10(self) -> Self;
    #[doc(hidden)]
    fn d_powf(self, e: Self) -> Self;
    #[doc(hidden)]
    fn d_hypot(self, y: Self) -> Self;
    #[doc(hidden)]
    fn d_tanh(self) -> Self;
    #[doc(hidden)]
    fn d_erf(self) -> Self;
}

macro_rules! impl_det {
    ($t:ty, $sin:ident, $cos:ident, $sincos:ident, $tan:ident, $atan:ident, $atan2:ident,
     $exp:ident, $ln:ident, $log10:ident, $pow:ident, $hypot:ident, $tanh:ident, $erf:ident) => {
        impl DetFloat for $t {
            fn d_sin(self) -> Self {
                libm::$sin(self)
            }
            fn d_cos(self) -> Self {
                libm::$cos(self)
            }
            fn d_sin_cos(self) -> (Self, Self) {
                libm::$sincos(self)
            }
            fn d_tan(self) -> Self {
                libm::$tan(self)
            }
            fn d_atan(self) -> Self {
                libm::$atan(self)
            }
            fn d_atan2(self, x: Self) -> Self {
                libm::$atan2(self, x)
            }
            fn d_exp(self) -> Self {
                libm::$exp(self)
            }
            fn d_ln(self) -> Self {
                libm::$ln(self)
            }
            fn d_log10(self) -> Self {
                libm::$log10(self)
            }
            fn d_powf(self, e: Self) -> Self {
                libm::$pow(self, e)
            }
            fn d_hypot(self, y: Self) -> Self {
                libm::$hypot(self, y)
            }
            fn d_tanh(self) -> Self {
                libm::$tanh(self)
            }
            fn d_erf(self) -> Self {
                libm::$erf(self)
            }
        }
    };
}

impl_det!(
    f32, sinf, cosf, sincosf, tanf, atanf, atan2f, expf, logf, log10f, powf, hypotf, tanhf, erff
);
impl_det!(f64, sin, cos, sincos, tan, atan, atan2, exp, log, log10, pow, hypot, tanh, erf);

/// Sine of `x` (radians).
#[inline]
pub fn sin<T: DetFloat>(x: T) -> T {
    x.d_sin()
}

/// Cosine of `x` (radians).
#[inline]
pub fn cos<T: DetFloat>(x: T) -> T {
    x.d_cos()
}

/// `(sin x, cos x)`.
#[inline]
pub fn sin_cos<T: DetFloat>(x: T) -> (T, T) {
    x.d_sin_cos()
}

/// Tangent of `x` (radians).
#[inline]
pub fn tan<T: DetFloat>(x: T) -> T {
    x.d_tan()
}

/// Arctangent of `x`, in `[-π/2, π/2]`.
#[inline]
pub fn atan<T: DetFloat>(x: T) -> T {
    x.d_atan()
}

/// The angle of `(x, y)`, in `[-π, π]` (std's `y.atan2(x)`).
#[inline]
pub fn atan2<T: DetFloat>(y: T, x: T) -> T {
    y.d_atan2(x)
}

/// `e^x`.
#[inline]
pub fn exp<T: DetFloat>(x: T) -> T {
    x.d_exp()
}

/// Natural logarithm of `x` (std's `x.ln()`).
#[inline]
pub fn ln<T: DetFloat>(x: T) -> T {
    x.d_ln()
}

/// Base-10 logarithm of `x`.
#[inline]
pub fn log10<T: DetFloat>(x: T) -> T {
    x.d_log10()
}

/// `x^e` for a float exponent (std's `x.powf(e)`; integer powers: `powi` is deterministic).
#[inline]
pub fn powf<T: DetFloat>(x: T, e: T) -> T {
    x.d_powf(e)
}

/// `sqrt(x² + y²)` without undue overflow (std's `x.hypot(y)`).
#[inline]
pub fn hypot<T: DetFloat>(x: T, y: T) -> T {
    x.d_hypot(y)
}

/// Hyperbolic tangent of `x`.
#[inline]
pub fn tanh<T: DetFloat>(x: T) -> T {
    x.d_tanh()
}

/// The error function `erf(x) = 2/√π ∫₀ˣ e^(−t²) dt` (GELU's).
#[inline]
pub fn erf<T: DetFloat>(x: T) -> T {
    x.d_erf()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Bit patterns of the functions on fixed inputs, computed once on x86-64: the same
    /// test runs on aarch64 under qemu (`tools/aarch64/run.sh`), so a platform that
    /// computed one of them differently fails here, not in a replay's hash.
    #[test]
    fn results_are_the_same_bits_on_every_platform() {
        let mut r = SplitMix64::new(2026);
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut mix = |v: u64| {
            h ^= v;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        };
        for _ in 0..20_000 {
            let x = (r.next_f64() - 0.5) * 40.0;
            let y = (r.next_f64() - 0.5) * 40.0;
            let (s, c) = sin_cos(x);
            for v in [
                sin(x),
                cos(x),
                s,
                c,
                tan(x),
                atan(x),
                atan2(y, x),
                exp(x),
                ln(x.abs()),
                log10(x.abs()),
                powf(x.abs(), y / 8.0),
                hypot(x, y),
                tanh(x),
                erf(x / 8.0),
            ] {
                mix(v.to_bits());
            }
            let (xf, yf) = (x as f32, y as f32);
            let (sf, cf) = sin_cos(xf);
            for v in [
                sin(xf),
                cos(xf),
                sf,
                cf,
                tan(xf),
                atan(xf),
                atan2(yf, xf),
                exp(xf),
                ln(xf.abs()),
                log10(xf.abs()),
                powf(xf.abs(), yf / 8.0),
                hypot(xf, yf),
                tanh(xf),
                erf(xf / 8.0),
            ] {
                mix(u64::from(v.to_bits()));
            }
        }
        assert_eq!(h, 0x2484_369e_583d_c9bd, "det_math digest {h:#018x}");
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
    fn results_are_within_an_ulp_or_two_of_std() {
        let mut r = SplitMix64::new(5);
        for _ in 0..10_000 {
            let x = (r.next_f64() - 0.5) * 20.0;
            let close = |a: f64, b: f64| (a - b).abs() <= 4.0 * f64::EPSILON * b.abs().max(1e-300);
            assert!(close(sin(x), x.sin()), "sin {x}");
            assert!(close(cos(x), x.cos()), "cos {x}");
            assert!(close(exp(x), x.exp()), "exp {x}");
            assert!(close(atan2(x, 1.5), x.atan2(1.5)), "atan2 {x}");
            assert!(close(ln(x.abs()), x.abs().ln()), "ln {x}");
            assert!(close(hypot(x, 3.0), x.hypot(3.0)), "hypot {x}");
        }
        assert!(sin(f64::NAN).is_nan() && exp(f32::NAN).is_nan());
        // erf has no std counterpart: reference values to 16 digits.
        for (x, e) in [
            (0.5f64, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (-2.0, -0.995_322_265_018_952_7),
        ] {
            assert!((erf(x) - e).abs() <= 4.0 * f64::EPSILON, "erf {x}");
            assert!(
                (erf(x as f32) - e as f32).abs() <= 2.0 * f32::EPSILON,
                "erf {x} (f32)"
            );
        }
    }
}
