//! The one property-test suite every kernel path runs (tests only).
//!
//! Each kernel file instantiates it for its own path with `kernel_tests!(path)` (the way
//! tract's linalg instantiates its kernel tests), so the scalar, AVX2 and VNNI kernels are
//! held to the same properties: bit-exact with the exact `i64` reference on random layers
//! (odd channel counts that leave tails in every register block and pixel tile, kernels
//! 1/2/3/5, strides 1..=3, padding), any static row split and channel slot, the
//! accumulator's extreme values, layers wider than one stage chunk and the backbone's own
//! layers. A path this CPU lacks is skipped with a printed message.
//!
//! Contract: the suite only forces paths with [`Conv2d::set_path`]; it never reads
//! `REDLINE_KERNEL`. Cost: a few seconds per path with the dev profile.

use super::reference::{reference_acc_i64, reference_forward_i64};
use super::{ChannelSlot, Conv2d, ConvShape, KernelPath};
use crate::network::{Backbone, NetConfig};
use crate::quant::QParams;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use redline_runtime::rng::SplitMix64;

/// Generates one `#[test]` per property of the suite for the kernel path `$path` (an
/// expression of type [`KernelPath`]).
macro_rules! kernel_tests {
    ($path:expr) => {
        kernel_tests!(@each $path;
            equals_the_exact_reference_on_random_layers,
            row_splits_and_channel_slots_are_exact,
            rows_outside_the_range_are_untouched,
            padding_reads_the_input_zero_point,
            extreme_values_are_exact,
            layers_wider_than_one_stage_chunk_are_exact,
            backbone_layers_equal_the_reference,
            full_channel_groups_in_a_slot_are_exact,
            saturated_outputs_of_whole_channel_blocks_are_exact,
            input_channel_views_equal_the_dense_copy,
            grouped_calls_equal_the_groups_one_by_one,
            accumulators_equal_the_exact_sums
        );
    };
    (@each $path:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                if let Some(path) = crate::conv::kernel_tests::available($path) {
                    crate::conv::kernel_tests::$name(path);
                }
            }
        )*
    };
}

/// The suite again with every layer's weights in `-64..=64` (halved): the layers the AVX2
/// path runs on its exact `vpmaddubsw` kernel.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_macros))]
macro_rules! seven_bit_kernel_tests {
    ($path:expr) => {
        seven_bit_kernel_tests!(@each $path;
            equals_the_exact_reference_on_random_layers,
            row_splits_and_channel_slots_are_exact,
            rows_outside_the_range_are_untouched,
            padding_reads_the_input_zero_point,
            layers_wider_than_one_stage_chunk_are_exact,
            input_channel_views_equal_the_dense_copy,
            accumulators_equal_the_exact_sums
        );
    };
    (@each $path:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                if let Some(path) = crate::conv::kernel_tests::available($path) {
                    crate::conv::kernel_tests::SEVEN_BIT.with(|s| s.set(true));
                    crate::conv::kernel_tests::$name(path);
                }
            }
        )*
    };
}

thread_local! {
    /// Set by `seven_bit_kernel_tests!`: random layers get weights in `-64..=64`.
    pub(crate) static SEVEN_BIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A random layer and input of one test case.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) conv: Conv2d,
    pub(crate) input: Vec<i8>,
    pub(crate) in_h: usize,
    pub(crate) in_w: usize,
}

/// A random layer: full-range weights including -128, random zero points and scales,
/// and a bias and output scale chosen so that most outputs are in range and some
/// saturate.
pub(crate) fn random_conv_with(r: &mut SplitMix64, shape: ConvShape, relu: bool) -> Conv2d {
    let n_w = shape.out_c * shape.k * shape.k * shape.in_c;
    let seven = SEVEN_BIT.with(|s| s.get());
    let weights: Vec<i8> = (0..n_w)
        .map(|_| {
            let w = r.next_i8();
            if seven {
                w / 2
            } else {
                w
            }
        })
        .collect();
    let w_scales: Vec<f32> = (0..shape.out_c).map(|_| r.uniform(1e-3, 2e-2)).collect();
    // The accumulator's spread is about sqrt(taps) * 100 * 74; pick the output scale so
    // that it spans 20..150 output steps: most outputs in range, some saturated.
    let spread = 7400.0 * ((shape.k * shape.k * shape.in_c) as f32).sqrt();
    let b = (spread * 0.5) as i32;
    let bias: Vec<i32> = (0..shape.out_c).map(|_| r.range_i32(-b, b)).collect();
    let in_q = QParams::new(r.uniform(1e-3, 5e-2), r.next_i8());
    let out_q = QParams::new(
        in_q.scale * 1e-2 * spread / r.uniform(20.0, 150.0),
        r.next_i8(),
    );
    Conv2d::new(shape, weights, w_scales, bias, in_q, out_q, relu).unwrap()
}

/// [`random_conv_with`] on its own generator seeded with `seed`.
pub(crate) fn random_conv(shape: ConvShape, relu: bool, seed: u64) -> Conv2d {
    random_conv_with(&mut SplitMix64::new(seed), shape, relu)
}

/// A random layer and a random `in_h × in_w` input over the whole `i8` range.
pub(crate) fn random_case(
    shape: ConvShape,
    in_h: usize,
    in_w: usize,
    relu: bool,
    seed: u64,
) -> Case {
    let mut r = SplitMix64::new(seed);
    let conv = random_conv_with(&mut r, shape, relu);
    let input = (0..in_h * in_w * shape.in_c).map(|_| r.next_i8()).collect();
    Case {
        conv,
        input,
        in_h,
        in_w,
    }
}

/// The whole output of `c` on the layer's own path.
pub(crate) fn forward_all(c: &Case) -> Vec<i8> {
    let mut out = vec![0i8; c.conv.output_len(c.in_h, c.in_w).unwrap()];
    c.conv.forward(&c.input, c.in_h, c.in_w, &mut out).unwrap();
    out
}

/// `path` if this CPU can run it; else prints why the suite skips it.
pub(crate) fn available(path: KernelPath) -> Option<KernelPath> {
    if path.is_available() {
        Some(path)
    } else {
        println!(
            "skipped: this CPU cannot run the {} kernel path",
            path.name()
        );
        None
    }
}

/// A copy of `conv` forced onto `path`.
fn on_path(conv: &Conv2d, path: KernelPath) -> Conv2d {
    let mut c = conv.clone();
    c.set_path(path).unwrap();
    c
}

/// The whole output of `conv` on `path` (pre-filled with `0x55`).
fn run(conv: &Conv2d, path: KernelPath, input: &[i8], h: usize, w: usize) -> Vec<i8> {
    let c = on_path(conv, path);
    let mut out = vec![0x55i8; c.output_len(h, w).unwrap()];
    c.forward(input, h, w, &mut out).unwrap();
    out
}

/// Runs a property over `cases` random cases; panics with the minimal failing input.
fn check<S: Strategy>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases));
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

/// Random shapes with odd channel counts (tails of the 2/4-tap groups, the 8/16-channel
/// blocks and the pixel tiles), kernels 1/2/3/5, strides 1..=3 and any valid padding.
fn layer_strategy(
    max_c: usize,
    max_hw: usize,
) -> impl Strategy<Value = (ConvShape, usize, usize, bool, u64)> {
    (
        1usize..=max_c,
        1usize..=max_c,
        prop_oneof![Just(1usize), Just(2), Just(3), Just(5)],
        1usize..=3,
        0usize..5,
        1usize..=max_hw,
        1usize..=max_hw,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(in_c, out_c, k, stride, pad, h, w, relu, seed)| {
            let shape = ConvShape {
                in_c,
                out_c,
                k,
                stride,
                pad: pad % k,
            };
            (shape, h, w, relu, seed)
        })
}

/// Every output equals the exact `i64` reference, bit for bit.
pub(crate) fn equals_the_exact_reference_on_random_layers(path: KernelPath) {
    check(192, layer_strategy(70, 20), |(shape, h, w, relu, seed)| {
        let c = random_case(shape, h, w, relu, seed);
        let (oh, ow) = c.conv.out_hw(h, w);
        prop_assume!(oh > 0 && ow > 0);
        let want = reference_forward_i64(&c.conv, &c.input, h, w).unwrap();
        prop_assert_eq!(run(&c.conv, path, &c.input, h, w), want);
        Ok(())
    });
}

/// `forward_rows_acc` (a float-output convolution's exact sums, no requantization) equals
/// the exact `i64` accumulators on random layers, for a row split at a random row.
pub(crate) fn accumulators_equal_the_exact_sums(path: KernelPath) {
    check(
        96,
        (layer_strategy(70, 16), 0usize..=16),
        |((shape, h, w, relu, seed), cut)| {
            let c = random_case(shape, h, w, relu, seed);
            let (oh, ow) = c.conv.out_hw(h, w);
            prop_assume!(oh > 0 && ow > 0);
            let want = reference_acc_i64(&c.conv, &c.input, h, w).unwrap();
            let conv = on_path(&c.conv, path);
            let cut = cut.min(oh);
            let mut got = vec![0x5555_5555i32; oh * ow * shape.out_c];
            let (top, bottom) = got.split_at_mut(cut * ow * shape.out_c);
            conv.forward_rows_acc(&c.input, h, w, top, 0..cut).unwrap();
            conv.forward_rows_acc(&c.input, h, w, bottom, cut..oh)
                .unwrap();
            prop_assert_eq!(got, want);
            Ok(())
        },
    );
}

/// Any static split of the output rows, run in any order through `forward_rows` (whole
/// output) or `forward_rows_into_slot` (row chunks written into a wider channel slot),
/// gives the reference tensor and touches nothing else.
pub(crate) fn row_splits_and_channel_slots_are_exact(path: KernelPath) {
    let strategy = (
        layer_strategy(40, 12),
        proptest::collection::vec(0usize..=12, 0..5),
        0usize..=3,
    );
    check(
        128,
        strategy,
        |((shape, h, w, relu, seed), cuts, offset)| {
            let c = random_case(shape, h, w, relu, seed);
            let (oh, ow) = c.conv.out_hw(h, w);
            prop_assume!(oh > 0 && ow > 0);
            let conv = on_path(&c.conv, path);
            let want = reference_forward_i64(&conv, &c.input, h, w).unwrap();
            let mut bounds: Vec<usize> = cuts.iter().map(|&v| v.min(oh)).collect();
            bounds.extend([0, oh]);
            bounds.sort_unstable();
            // Chunks in reverse order, into the whole output.
            let mut split = vec![0x55i8; want.len()];
            for pair in bounds.windows(2).rev() {
                conv.forward_rows(&c.input, h, w, &mut split, pair[0]..pair[1])
                    .unwrap();
            }
            prop_assert_eq!(&split, &want);
            // Disjoint row chunks of a wider tensor, this layer's channels at `offset`.
            let out_c = shape.out_c;
            let stride = offset + out_c + 2;
            let slot = ChannelSlot {
                pixel_stride: stride,
                channel_offset: offset,
            };
            let mut out = vec![0x55i8; oh * ow * stride];
            let row = ow * stride;
            for pair in bounds.windows(2) {
                let dst = &mut out[pair[0] * row..pair[1] * row];
                conv.forward_rows_into_slot(&c.input, h, w, dst, slot, pair[0]..pair[1])
                    .unwrap();
            }
            for px in 0..oh * ow {
                let o = &out[px * stride..(px + 1) * stride];
                prop_assert!(o[..offset].iter().all(|&v| v == 0x55));
                prop_assert_eq!(
                    &o[offset..offset + out_c],
                    &want[px * out_c..(px + 1) * out_c]
                );
                prop_assert!(o[offset + out_c..].iter().all(|&v| v == 0x55));
            }
            Ok(())
        },
    );
}

/// A layer reading its `in_c` channels at an offset inside wider input pixels
/// (`forward_rows_view`, one group of a grouped convolution) gives the exact reference of
/// those channels copied out densely, on any row split; a view that does not fit is an
/// error.
pub(crate) fn input_channel_views_equal_the_dense_copy(path: KernelPath) {
    let strategy = (layer_strategy(24, 12), 0usize..=9, 0usize..=5, 0usize..=12);
    check(
        96,
        strategy,
        |((shape, h, w, relu, seed), before, after, cut)| {
            let c = random_case(shape, h, w, relu, seed);
            let (oh, ow) = c.conv.out_hw(h, w);
            prop_assume!(oh > 0 && ow > 0);
            let conv = on_path(&c.conv, path);
            let want = reference_forward_i64(&conv, &c.input, h, w).unwrap();
            // The dense input's channels inside pixels of `before + in_c + after` channels,
            // the others filled with values that would show if read.
            let in_c = shape.in_c;
            let stride = before + in_c + after;
            let mut wide = vec![0x7fi8; h * w * stride];
            for px in 0..h * w {
                wide[px * stride + before..][..in_c].copy_from_slice(&c.input[px * in_c..][..in_c]);
            }
            let view = ChannelSlot {
                pixel_stride: stride,
                channel_offset: before,
            };
            let dense = ChannelSlot {
                pixel_stride: shape.out_c,
                channel_offset: 0,
            };
            let mut out = vec![0x55i8; want.len()];
            let row = ow * shape.out_c;
            let cut = cut.min(oh);
            for r in [0..cut, cut..oh] {
                let dst = &mut out[r.start * row..r.end * row];
                conv.forward_rows_view(&wide, h, w, view, dst, dense, r)
                    .unwrap();
            }
            prop_assert_eq!(&out, &want);
            let too_wide = ChannelSlot {
                pixel_stride: stride,
                channel_offset: before + after + 1,
            };
            prop_assert!(conv
                .forward_rows_view(&wide, h, w, too_wide, &mut out, dense, 0..oh)
                .is_err());
            Ok(())
        },
    );
}

/// The groups of a grouped convolution in one call (`forward_rows_groups`) give the exact
/// reference of each group on its own channels, on any row split; groups that differ are
/// an error.
pub(crate) fn grouped_calls_equal_the_groups_one_by_one(path: KernelPath) {
    let strategy = (layer_strategy(12, 10), 1usize..=5, 0usize..=10);
    check(64, strategy, |((shape, h, w, relu, seed), groups, cut)| {
        let mut r = SplitMix64::new(seed);
        let layers: Vec<Conv2d> = (0..groups)
            .map(|_| on_path(&random_conv_with(&mut r, shape, relu), path))
            .collect();
        // One input quantization and zero points for every group, as a grouped layer has.
        let layers: Vec<Conv2d> = layers
            .iter()
            .map(|l| {
                let mut c = Conv2d::new(
                    shape,
                    l.weights.clone(),
                    l.w_scales.clone(),
                    l.bias.clone(),
                    layers[0].in_q,
                    layers[0].out_q,
                    relu,
                )
                .unwrap();
                c.set_path(path).unwrap();
                c
            })
            .collect();
        let (oh, ow) = layers[0].out_hw(h, w);
        prop_assume!(oh > 0 && ow > 0);
        let (ic, oc) = (shape.in_c, shape.out_c);
        let input: Vec<i8> = (0..h * w * ic * groups).map(|_| r.next_i8()).collect();
        let mut got = vec![0x55i8; oh * ow * oc * groups];
        let row = ow * oc * groups;
        let cut = cut.min(oh);
        for rr in [0..cut, cut..oh] {
            let dst = &mut got[rr.start * row..rr.end * row];
            Conv2d::forward_rows_groups(&layers, &input, h, w, dst, rr).unwrap();
        }
        for (g, l) in layers.iter().enumerate() {
            let dense: Vec<i8> = (0..h * w)
                .flat_map(|px| input[(px * groups + g) * ic..][..ic].to_vec())
                .collect();
            let want = reference_forward_i64(l, &dense, h, w).unwrap();
            for px in 0..oh * ow {
                prop_assert_eq!(
                    &got[(px * groups + g) * oc..][..oc],
                    &want[px * oc..(px + 1) * oc],
                    "group {} of {}",
                    g,
                    groups
                );
            }
        }
        if groups > 1 {
            let mut odd = layers.clone();
            odd[1].relu = !relu;
            prop_assert!(Conv2d::forward_rows_groups(&odd, &input, h, w, &mut got, 0..oh).is_err());
        }
        Ok(())
    });
}

/// `forward_rows` writes exactly the requested rows of the whole output.
pub(crate) fn rows_outside_the_range_are_untouched(path: KernelPath) {
    let shape = ConvShape {
        in_c: 4,
        out_c: 5,
        k: 3,
        stride: 1,
        pad: 1,
    };
    let c = random_case(shape, 7, 6, false, 7);
    let conv = on_path(&c.conv, path);
    let whole = reference_forward_i64(&conv, &c.input, 7, 6).unwrap();
    let mut out = vec![0x55i8; whole.len()];
    conv.forward_rows(&c.input, 7, 6, &mut out, 2..5).unwrap();
    let row = 6 * 5;
    assert!(out[..2 * row].iter().all(|&v| v == 0x55));
    assert!(out[5 * row..].iter().all(|&v| v == 0x55));
    assert_eq!(&out[2 * row..5 * row], &whole[2 * row..5 * row]);
}

/// Padded taps read the input zero point, so they contribute exactly 0.
pub(crate) fn padding_reads_the_input_zero_point(path: KernelPath) {
    // One 3x3 all-ones filter over a 1x1 image whose only pixel is the zero point + 1:
    // with zero-point padding only the centre tap contributes.
    let zp = -7i8;
    let conv = Conv2d::new(
        ConvShape {
            in_c: 1,
            out_c: 1,
            k: 3,
            stride: 1,
            pad: 1,
        },
        vec![1; 9],
        vec![1.0],
        vec![0],
        QParams::new(1.0, zp),
        QParams::new(1.0, 0),
        false,
    )
    .unwrap();
    assert_eq!(run(&conv, path, &[zp + 1], 1, 1), [1]);
}

/// Saturated inputs, -128 weights, zero points at both ends of the range and the largest
/// bias the accumulator bound allows stay exact.
pub(crate) fn extreme_values_are_exact(path: KernelPath) {
    // 70 input channels (not a multiple of 2, 4 or 16) and 17 output channels.
    for (x, x_zp, wv) in [
        (127i8, -128i8, -128i8),
        (-128, 127, 127),
        (-128, -128, -128),
    ] {
        let shape = ConvShape {
            in_c: 70,
            out_c: 17,
            k: 3,
            stride: 1,
            pad: 1,
        };
        let limit = i32::MAX - 9 * 70 * 32768;
        let conv = Conv2d::new(
            shape,
            vec![wv; 17 * 9 * 70],
            vec![0.01; 17],
            (0..17)
                .map(|c| if c % 2 == 0 { limit } else { -limit })
                .collect(),
            QParams::new(0.01, x_zp),
            QParams::new(1e3, 3),
            false,
        )
        .unwrap();
        let input = vec![x; 5 * 6 * 70];
        let want = reference_forward_i64(&conv, &input, 5, 6).unwrap();
        assert_eq!(
            run(&conv, path, &input, 5, 6),
            want,
            "x {x} x_zp {x_zp} w {wv}"
        );
    }
    // Two channels at exactly the accumulator bound, every sign combination.
    let shape = ConvShape {
        in_c: 2,
        out_c: 2,
        k: 3,
        stride: 1,
        pad: 1,
    };
    let limit = i32::MAX - 18 * 32768;
    for (x, x_zp, w, bias) in [
        (127i8, -128i8, 127i8, limit),
        (-128, 127, 127, -limit),
        (127, -128, -128, -limit),
        (-128, -128, -128, limit),
        (-128, 127, -128, limit),
    ] {
        let conv = Conv2d::new(
            shape,
            vec![w; 36],
            vec![0.01, 0.02],
            vec![bias, -bias],
            QParams::new(0.01, x_zp),
            QParams::new(1e3, 3),
            false,
        )
        .unwrap();
        let input = vec![x; 4 * 4 * 2];
        let want = reference_forward_i64(&conv, &input, 4, 4).unwrap();
        assert_eq!(run(&conv, path, &input, 4, 4), want);
    }
}

/// Outputs far outside `i8` (and `i16`) in layers of 64 and 128 output channels, the
/// whole register blocks the VNNI kernel clamps on integers when every `acc · mult` stays
/// below `2^31` and on floats when not: both sides of that bound (multipliers 10 and 1000
/// against biases near `±10^8`), with and without ReLU and a zero point at either end.
pub(crate) fn saturated_outputs_of_whole_channel_blocks_are_exact(path: KernelPath) {
    let mut r = SplitMix64::new(64);
    for (out_c, y_scale, relu, y_zp) in [
        (64, 0.1, false, 3),
        (64, 0.1, true, -128),
        (128, 0.1, true, 120),
        (64, 1e-3, false, -100),
        (64, 1e-3, true, 127),
        (128, 1.0, false, 0),
    ] {
        let shape = ConvShape {
            in_c: 8,
            out_c,
            k: 3,
            stride: 1,
            pad: 1,
        };
        let weights: Vec<i8> = (0..out_c * 9 * 8).map(|_| r.next_i8()).collect();
        let bias: Vec<i32> = (0..out_c)
            .map(|_| r.range_i32(-100_000_000, 100_000_000))
            .collect();
        let conv = Conv2d::new(
            shape,
            weights,
            vec![1.0; out_c],
            bias,
            QParams::new(1.0, r.next_i8()),
            QParams::new(y_scale, y_zp),
            relu,
        )
        .unwrap();
        let input: Vec<i8> = (0..5 * 7 * 8).map(|_| r.next_i8()).collect();
        let want = reference_forward_i64(&conv, &input, 5, 7).unwrap();
        assert_eq!(
            run(&conv, path, &input, 5, 7),
            want,
            "out_c {out_c}, y_scale {y_scale}, relu {relu}, y_zp {y_zp}"
        );
        // Clamped at both ends (or at the zero point with ReLU): the case tests saturation.
        let lo = if relu { y_zp } else { -128 };
        assert!(want.contains(&lo) && want.contains(&127) || lo == 127);
    }
}

/// 200 columns × 64 channels × 9 rows exceed one stage: column chunks and row blocks both
/// kick in on the SIMD paths.
pub(crate) fn layers_wider_than_one_stage_chunk_are_exact(path: KernelPath) {
    let shape = ConvShape {
        in_c: 64,
        out_c: 20,
        k: 3,
        stride: 1,
        pad: 1,
    };
    let conv = random_conv(shape, true, 77);
    let (h, w) = (9, 200);
    let mut r = SplitMix64::new(5);
    let input: Vec<i8> = (0..h * w * 64).map(|_| r.next_i8()).collect();
    let want = reference_forward_i64(&conv, &input, h, w).unwrap();
    assert_eq!(run(&conv, path, &input, h, w), want);
}

/// Layers with whole groups of 64 output channels (VNNI packs four full blocks into one
/// store) plus a partial group, written into a wider channel slot and as a whole output,
/// for 1×1 and 3×3 kernels, with and without ReLU: the reference bytes, and nothing outside
/// the slot touched.
pub(crate) fn full_channel_groups_in_a_slot_are_exact(path: KernelPath) {
    for (i, (in_c, out_c, k, relu)) in [(32, 64, 1, true), (24, 144, 3, false), (64, 128, 1, false)]
        .into_iter()
        .enumerate()
    {
        let shape = ConvShape {
            in_c,
            out_c,
            k,
            stride: 1,
            pad: k / 2,
        };
        let conv = on_path(&random_conv(shape, relu, 40 + i as u64), path);
        let (h, w) = (5, 13);
        let mut r = SplitMix64::new(6 + i as u64);
        let input: Vec<i8> = (0..h * w * in_c).map(|_| r.next_i8()).collect();
        let want = reference_forward_i64(&conv, &input, h, w).unwrap();
        assert_eq!(run(&conv, path, &input, h, w), want, "layer {i}");
        let (offset, stride) = (3, out_c + 7);
        let slot = ChannelSlot {
            pixel_stride: stride,
            channel_offset: offset,
        };
        let mut out = vec![0x55i8; h * w * stride];
        conv.forward_rows_into_slot(&input, h, w, &mut out, slot, 0..h)
            .unwrap();
        for px in 0..h * w {
            let o = &out[px * stride..(px + 1) * stride];
            assert!(o[..offset].iter().all(|&v| v == 0x55), "layer {i} px {px}");
            assert_eq!(
                &o[offset..offset + out_c],
                &want[px * out_c..(px + 1) * out_c]
            );
            assert!(
                o[offset + out_c..].iter().all(|&v| v == 0x55),
                "layer {i} px {px}"
            );
        }
    }
}

/// The default backbone's layers, on random inputs of their real sizes.
pub(crate) fn backbone_layers_equal_the_reference(path: KernelPath) {
    let cfg = NetConfig::default();
    let bb = Backbone::new(&cfg).unwrap();
    let (mut h, mut w) = (cfg.in_h, cfg.in_w);
    let mut r = SplitMix64::new(99);
    for layer in bb.layers() {
        let input: Vec<i8> = (0..h * w * layer.in_c).map(|_| r.next_i8()).collect();
        let want = reference_forward_i64(layer, &input, h, w).unwrap();
        assert_eq!(run(layer, path, &input, h, w), want);
        (h, w) = layer.out_hw(h, w);
    }
}
