//! Vector widths for the native engine's elementwise steps (`Add`, `Mul`, `QuantizeLinear`,
//! max pooling, the boundary copies): each such loop is written once as portable scalar
//! Rust and compiled again inside `#[target_feature]` wrappers, so LLVM vectorizes the same
//! code for AVX2 and AVX-512 on x86-64 ([`multiversion!`]).
//!
//! Contract: the wide builds run the *same* IEEE-754 operations in the same order as the
//! portable one (Rust never contracts to FMA and never reassociates float arithmetic; an
//! explicit `mul_add` is one correctly rounded operation on every build, an instruction on
//! the wide ones and `fmaf` on SSE2), so every path gives the same bits; the tests compare them on random data. An [`Isa`] other
//! than the portable one exists only on a CPU that reported its features at run time, which
//! is what makes calling the wrappers sound. Cost: one `match` per call. Never: reads the
//! environment after construction, or depends on which width ran.

use crate::conv::KernelPath;

/// The vector width an elementwise loop is compiled for; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Isa(Width);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Width {
    /// Baseline code of the target (SSE2 on x86-64, NEON on aarch64).
    Portable,
    /// x86-64 with AVX2 and FMA (detected: an explicit `mul_add` is one instruction).
    Avx2,
    /// x86-64 with AVX-512 F, BW and VL (detected).
    Avx512,
}

impl Isa {
    /// The baseline build, valid everywhere.
    pub(crate) const PORTABLE: Isa = Isa(Width::Portable);

    /// The widest build the CPU runs that does not go past the convolution kernel `path`
    /// (so `REDLINE_KERNEL=scalar` keeps every step on baseline code, `avx2` stays on AVX2).
    pub(crate) fn for_path(path: KernelPath) -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl");
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            match path {
                KernelPath::Avx512Vnni if avx512 => return Isa(Width::Avx512),
                KernelPath::Avx512Vnni | KernelPath::Avx2 if avx2 => return Isa(Width::Avx2),
                _ => {}
            }
        }
        let _ = path;
        Isa::PORTABLE
    }

    /// Every build this CPU can run (tests compare them).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        let mut v = vec![Isa::PORTABLE];
        for p in [KernelPath::Avx2, KernelPath::Avx512Vnni] {
            let isa = Isa::for_path(p);
            if !v.contains(&isa) {
                v.push(isa);
            }
        }
        v
    }

    /// Short name (`portable`, `avx2`, `avx512`).
    pub(crate) fn name(self) -> &'static str {
        match self.0 {
            Width::Portable => "portable",
            Width::Avx2 => "avx2",
            Width::Avx512 => "avx512",
        }
    }

    /// True for the AVX2 build (only ever constructed after detection).
    #[inline]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn is_avx2(self) -> bool {
        self.0 == Width::Avx2
    }

    /// True for the AVX-512 build (only ever constructed after detection).
    #[inline]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn is_avx512(self) -> bool {
        self.0 == Width::Avx512
    }
}

/// Defines `fn NAME(isa: Isa, args...)` that runs `body` compiled for `isa`: the body is an
/// `#[inline(always)]` inner function, instantiated inside an AVX2 and an AVX-512 wrapper on
/// x86-64 and called directly elsewhere. The body must be safe code over its arguments.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name(isa: $crate::onnx::isa::Isa, $($arg: $ty),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body($($arg: $ty),*) $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            fn avx2($($arg: $ty),*) {
                body($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
            #[allow(clippy::too_many_arguments)]
            fn avx512($($arg: $ty),*) {
                body($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            {
                if isa.is_avx512() {
                    // SAFETY: an AVX-512 `Isa` is only constructed by `Isa::for_path` after
                    // `is_x86_feature_detected!` reported avx512f, avx512bw and avx512vl.
                    return unsafe { avx512($($arg),*) };
                }
                if isa.is_avx2() {
                    // SAFETY: an AVX2 `Isa` is only constructed after `avx2` and `fma` were
                    // detected.
                    return unsafe { avx2($($arg),*) };
                }
            }
            let _ = isa;
            body($($arg),*)
        }
    };
}
pub(crate) use multiversion;
