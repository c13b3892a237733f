//! Which kernel a layer runs: [`KernelPath`] (chosen once at construction from
//! `REDLINE_KERNEL` or the CPU's features) and the hand-off from [`super::Conv2d`] to the
//! SIMD kernels.
//!
//! Contract: a path is only ever run on a CPU that reports its features at run time
//! (`is_x86_feature_detected!`, `is_aarch64_feature_detected!`); [`run_simd_rows`] returns
//! `false`, writing nothing, when the SIMD path cannot take the call, and the caller then
//! runs the scalar kernel (same results). Cost: feature detection is cached by `std`; no
//! allocation on the per-frame path. Never: reads the environment after construction, or
//! depends on which path runs.

use super::staging::Plan;
use super::{ChannelSlot, Conv2d, ModelError};
use std::ops::Range;

/// Which convolution kernel a layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// The portable scalar reference (always available).
    Scalar,
    /// AVX2: `i16` products with `vpmaddwd`, 8 output channels per register.
    Avx2,
    /// AVX-512 VNNI: `vpdpbusd`, 16 output channels × 4 taps per instruction.
    Avx512Vnni,
    /// Armv8.2-A NEON with the dot-product extension (aarch64): `sdot` by element, 4 output
    /// channels × 4 taps per instruction.
    NeonDot,
    /// Armv8.6-A NEON with the int8 matrix-multiply extension (aarch64: Neoverse V1/V2,
    /// Graviton 3+, Grace, Thor's cores; not Orin's A78AE): `smmla`, 2 pixels × 2 output
    /// channels × 8 taps per instruction.
    NeonI8mm,
}

impl KernelPath {
    /// All paths, the portable one first (a CPU runs at most one of each ISA's).
    pub const ALL: [KernelPath; 5] = [
        KernelPath::Scalar,
        KernelPath::Avx2,
        KernelPath::Avx512Vnni,
        KernelPath::NeonDot,
        KernelPath::NeonI8mm,
    ];

    /// Short name, as accepted by `REDLINE_KERNEL`: `scalar`, `avx2`, `vnni`, `neon`,
    /// `i8mm`.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512Vnni => "vnni",
            KernelPath::NeonDot => "neon",
            KernelPath::NeonI8mm => "i8mm",
        }
    }

    /// Parses a `REDLINE_KERNEL` value (`scalar`, `avx2`, `vnni`, `neon`, `i8mm`;
    /// case-insensitive).
    pub fn parse(s: &str) -> Result<KernelPath, ModelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(KernelPath::Scalar),
            "avx2" => Ok(KernelPath::Avx2),
            "vnni" | "avx512vnni" | "avx512" => Ok(KernelPath::Avx512Vnni),
            "neon" | "dotprod" | "sdot" => Ok(KernelPath::NeonDot),
            "i8mm" | "smmla" => Ok(KernelPath::NeonI8mm),
            other => Err(ModelError::InvalidConfig {
                reason: format!(
                    "REDLINE_KERNEL = {other:?} is not a kernel path: use scalar, avx2, vnni \
                     (x86-64), neon or i8mm (aarch64) \
                     (or unset it to pick the fastest this CPU supports)"
                ),
            }),
        }
    }

    /// True if this CPU can run the path (detected at run time).
    pub fn is_available(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            KernelPath::NeonDot => std::arch::is_aarch64_feature_detected!("dotprod"),
            #[cfg(target_arch = "aarch64")]
            KernelPath::NeonI8mm => std::arch::is_aarch64_feature_detected!("i8mm"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The fastest available path.
    pub fn best() -> KernelPath {
        [
            KernelPath::Avx512Vnni,
            KernelPath::Avx2,
            KernelPath::NeonI8mm,
            KernelPath::NeonDot,
        ]
        .into_iter()
        .find(|p| p.is_available())
        .unwrap_or(KernelPath::Scalar)
    }

    /// Errors with a clear message if the path cannot run on this CPU.
    pub(super) fn check_available(self) -> Result<KernelPath, ModelError> {
        if self.is_available() {
            Ok(self)
        } else {
            Err(ModelError::InvalidConfig {
                reason: format!(
                    "kernel path {} is not supported by this CPU: pick one of the available \
                     paths (KernelPath::is_available) or unset REDLINE_KERNEL",
                    self.name()
                ),
            })
        }
    }

    /// The path a new layer uses: `REDLINE_KERNEL` if set (an error if it names an unknown
    /// or unavailable path), else [`KernelPath::best`]. Construction time only.
    pub fn from_env() -> Result<KernelPath, ModelError> {
        match std::env::var("REDLINE_KERNEL") {
            Ok(v) if !v.trim().is_empty() => KernelPath::parse(&v)?.check_available(),
            _ => Ok(KernelPath::best()),
        }
    }
}

/// Geometry and quantization of one call, checked by the caller.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geom {
    /// Channels the layer convolves (its `in_c`).
    pub in_c: usize,
    /// Where they lie in each input pixel: `input[pixel · view.pixel_stride +
    /// view.channel_offset + c]` (`pixel_stride == in_c`, offset 0 for a dense input).
    pub in_view: ChannelSlot,
    pub out_c: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_w: usize,
    pub x_zp: i8,
    pub y_zp: i8,
    pub relu: bool,
}

/// What a kernel stores: requantized bytes (`i8`) or the exact accumulators (`i32`,
/// [`super::Conv2d::forward_rows_acc`]); every kernel of this target stores both.
#[cfg(target_arch = "x86_64")]
pub(super) trait KernelOut:
    super::scalar::ScalarOut + super::vnni::VnniOutElem + super::avx2::Avx2OutElem
{
}
/// What a kernel stores (see the x86-64 definition).
#[cfg(target_arch = "aarch64")]
pub(super) trait KernelOut: super::scalar::ScalarOut + super::neon::NeonOutElem {}
/// What a kernel stores (the scalar kernel only on this target).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) trait KernelOut: super::scalar::ScalarOut {}

impl KernelOut for i8 {}
impl KernelOut for i32 {}

/// Runs output rows `rows` of `layers` on `path`; `dst` holds exactly those rows
/// (`rows.len() · out_w · slot.pixel_stride`). One layer, or the groups of a grouped
/// convolution: layer `i` reads input channels `g.in_view.channel_offset + i · in_c` on and
/// writes output channels `slot.channel_offset + i · out_c` on (VNNI only; other paths
/// return `false` for several layers). Returns `false` (nothing written) when the path
/// cannot run them (scalar path, weights not packed, or a kernel window wider than the
/// stage buffer): the caller then runs them one by one. Sizes were checked by the caller,
/// and every layer has the geometry `g` describes. `E`: bytes, or the exact `i32`
/// accumulators (a float-output convolution's, one layer).
pub(super) fn run_simd_rows<E: KernelOut>(
    path: KernelPath,
    layers: &[Conv2d],
    g: &Geom,
    input: &[i8],
    dst: &mut [E],
    slot: ChannelSlot,
    rows: Range<usize>,
) -> bool {
    let Some(first) = layers.first() else {
        return false;
    };
    if path == KernelPath::Scalar || !path.is_available() {
        return false;
    }
    if layers.len() > 1 && path != KernelPath::Avx512Vnni {
        return false;
    }
    let fits = |l: &Conv2d| {
        l.packed.has(path) && l.bias.len() == g.out_c && l.multipliers.len() == g.out_c
    };
    if !layers.iter().all(fits) {
        return false;
    }
    let (packed, bias, mult) = (&first.packed, &first.bias[..], &first.multipliers[..]);
    // 7-bit weights on AVX2: the exact `vpmaddubsw` kernel on the 4-tap layout (bytes).
    let u7 = path == KernelPath::Avx2 && packed.seven_bit && !packed.taps4.is_empty();
    let esize = if path == KernelPath::Avx2 && !u7 {
        2
    } else {
        1
    };
    let Some(plan) = Plan::new(g, esize) else {
        return false;
    };
    if rows.is_empty() {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    {
        match path {
            // SAFETY: `vnni_rows`' preconditions hold: the CPU has AVX-512 F/BW/VL/VNNI
            // (`is_available` above), `packed` holds VNNI weights (`has` above) built for
            // this layer, `bias` and `mult` have `out_c` entries (checked above), `plan` is
            // `Plan::new(g, 1)`, and the caller (`Conv2d::run_rows`, after
            // `forward_rows_into_slot`'s checks) guarantees `input` is `in_h·in_w·in_c`,
            // `dst` is `rows.len()·out_w·pixel_stride`, the slot fits and `rows ⊆ 0..out_h`.
            //
            // For several layers (`layers`, each checked above): their channels lie inside
            // the input view and the output slot (the caller, `Conv2d::forward_rows_groups`,
            // checked `offset + layers · channels <= pixel_stride` for both).
            KernelPath::Avx512Vnni => unsafe {
                super::vnni::vnni_rows(&plan, layers, g, input, dst, slot, rows)
            },
            // SAFETY: as above for `avx2_u7_rows`: AVX2 detected, the 4-tap weights packed
            // with `seven_bit` set (`u7`), `plan` is `Plan::new(g, 1)`, the same sizes.
            KernelPath::Avx2 if u7 => unsafe {
                super::avx2_u7::avx2_u7_rows(&plan, packed, g, bias, mult, input, dst, slot, rows)
            },
            // SAFETY: as above for `avx2_rows`: AVX2 detected, AVX2 weights packed,
            // `plan` is `Plan::new(g, 2)`, the same buffer sizes.
            KernelPath::Avx2 => unsafe {
                super::avx2::avx2_rows(&plan, packed, g, bias, mult, input, dst, slot, rows)
            },
            KernelPath::Scalar | KernelPath::NeonDot | KernelPath::NeonI8mm => return false,
        }
        true
    }
    #[cfg(target_arch = "aarch64")]
    {
        let kind = match path {
            KernelPath::NeonDot => super::neon::Kind::Dot,
            KernelPath::NeonI8mm => super::neon::Kind::I8mm,
            _ => return false,
        };
        // SAFETY: `neon_rows`' preconditions hold: the CPU has NEON and the path's
        // extension (`is_available` above: dotprod for `neon`, i8mm for `i8mm`), `packed`
        // holds that path's weights (`has` above) built for this layer, `bias` and
        // `mult` have `out_c` entries (checked above), `plan` is `Plan::new(g, 1)`
        // (`esize` is 1 for every path but AVX2), and the caller (`Conv2d::run_rows`,
        // after `forward_rows_into_slot`'s checks) guarantees `input` is
        // `in_h·in_w·in_c`, `dst` is `rows.len()·out_w·pixel_stride`, the slot fits and
        // `rows ⊆ 0..out_h`.
        unsafe {
            super::neon::neon_rows(kind, &plan, packed, g, bias, mult, input, dst, slot, rows)
        };
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (plan, bias, mult, input, dst, slot, rows);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernel_tests::random_conv;
    use super::*;
    use crate::conv::ConvShape;

    #[test]
    fn forcing_a_path_errors_exactly_when_the_cpu_lacks_it() {
        let conv = random_conv(
            ConvShape {
                in_c: 3,
                out_c: 4,
                k: 1,
                stride: 1,
                pad: 0,
            },
            false,
            1,
        );
        for path in KernelPath::ALL {
            let mut c = conv.clone();
            let before = c.path();
            let res = c.set_path(path);
            assert_eq!(res.is_ok(), path.is_available(), "{path:?}");
            if res.is_err() {
                assert_eq!(c.path(), before, "a refused path must not change the layer");
            } else {
                assert_eq!(c.path(), path);
            }
        }
        assert!(KernelPath::Scalar.is_available());
        assert_eq!(KernelPath::parse("VNNI").unwrap(), KernelPath::Avx512Vnni);
        assert_eq!(KernelPath::parse("avx2").unwrap(), KernelPath::Avx2);
        assert_eq!(KernelPath::parse("scalar").unwrap(), KernelPath::Scalar);
        let err = KernelPath::parse("sse9").unwrap_err().to_string();
        assert!(
            err.contains("scalar, avx2, vnni (x86-64), neon or i8mm (aarch64)"),
            "{err}"
        );
        assert_eq!(KernelPath::parse("I8MM").unwrap(), KernelPath::NeonI8mm);
        assert_eq!(KernelPath::parse("neon").unwrap(), KernelPath::NeonDot);
        assert!(KernelPath::best().is_available());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn this_machine_uses_the_fastest_path_by_default() {
        // Without REDLINE_KERNEL the best path is chosen.
        if std::env::var("REDLINE_KERNEL").is_err() {
            let conv = random_conv(
                ConvShape {
                    in_c: 8,
                    out_c: 8,
                    k: 1,
                    stride: 1,
                    pad: 0,
                },
                false,
                2,
            );
            assert_eq!(conv.path(), KernelPath::best());
        }
    }
}
