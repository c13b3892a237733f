//! The pooling kernels (max, average in both quantized formulas and in float, global
//! average in float, the shared global pool's chunk sums) against their definitions, on
//! every vector width and row split.

use super::tests::{bytes, requant_float_formula, test_window};
use super::*;
use redline_runtime::rng::SplitMix64;

#[test]
fn float_average_pool_is_its_definition_on_every_width_and_split() {
    let mut g = SplitMix64::stream(17, 0);
    // (h, w, c, k, stride, pad, dilation, ceil mode): padded windows, one hanging past the
    // padding in ceil mode (those taps never count), dilation, many channels.
    for (h, w, c, k, s, p, dl, ceil) in [
        (9, 7, 37, 3, 2, 1, 1, false),
        (5, 7, 6, 2, 2, 0, 1, true),
        (8, 8, 17, 3, 1, 1, 2, false),
        (4, 30, 600, 3, 2, 1, 1, true),
    ] {
        let span = |n: usize| n + 2 * p - (k - 1) * dl - 1;
        let out = |n: usize| {
            if ceil {
                span(n).div_ceil(s) + 1
            } else {
                span(n) / s + 1
            }
        };
        let (out_h, out_w) = (out(h), out(w));
        let win = test_window((h, w), (out_h, out_w), (k, k), s, dl, (p, p));
        let x: Vec<f32> = (0..2 * h * w * c).map(|_| g.uniform(-5.0, 5.0)).collect();
        for include_pad in [false, true] {
            // The definition: the taps inside the image summed in window order, divided by
            // their count (plus the padded taps' when they count).
            let mut want = vec![0f32; 2 * out_h * out_w * c];
            for (i, v) in want.iter_mut().enumerate() {
                let (ch, px) = (i % c, i / c);
                let (b, oy, ox) = (px / (out_h * out_w), px / out_w % out_h, px % out_w);
                let (mut sum, mut n) = (0f32, 0u32);
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * s + ky * dl) as isize - p as isize;
                        let ix = (ox * s + kx * dl) as isize - p as isize;
                        let inside = |v: isize, len: usize| v >= 0 && (v as usize) < len;
                        let padded =
                            |v: isize, len: usize| v >= -(p as isize) && v < (len + p) as isize;
                        if inside(iy, h) && inside(ix, w) {
                            sum += x[((b * h + iy as usize) * w + ix as usize) * c + ch];
                            n += 1;
                        } else if include_pad && padded(iy, h) && padded(ix, w) {
                            n += 1;
                        }
                    }
                }
                *v = sum / n.max(1) as f32;
            }
            for isa in Isa::available() {
                let mut got = vec![0f32; want.len()];
                let cut = out_h / 2 * out_w * c;
                let (lo, hi) = got.split_at_mut(cut);
                avg_pool_f32(isa, &win, c, include_pad, &x, lo, 0..out_h / 2);
                avg_pool_f32(isa, &win, c, include_pad, &x, hi, out_h / 2..2 * out_h);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{} {h}x{w}x{c} k{k} s{s} p{p} d{dl} ceil {ceil} include_pad {include_pad}",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn quantized_average_pooling_follows_onnx_runtimes_two_formulas() {
    let mut g = SplitMix64::stream(17, 0);
    // (h, w, c, k, stride, pad, ceil): padding on both sides, ceil mode (a window past the
    // padding), more channels than one 64-channel block.
    for (h, w, c, k, s, p, ceil) in [
        (9, 7, 5, 3, 2, 1, false),
        (6, 6, 70, 2, 2, 0, true),
        (7, 9, 3, 3, 1, 1, false),
        (5, 8, 16, 3, 2, 1, true),
        // Windows over the whole image (the integer formula's global path), one channel
        // block and more than one.
        (5, 5, 70, 5, 1, 0, false),
        (4, 4, 300, 4, 1, 0, false),
    ] {
        let span = |n: usize| n + 2 * p - k;
        let out = |n: usize| {
            if ceil {
                span(n).div_ceil(s) + 1
            } else {
                span(n) / s + 1
            }
        };
        let (out_h, out_w) = (out(h), out(w));
        let win = test_window((h, w), (out_h, out_w), (k, k), s, 1, (p, p));
        let x = bytes(&mut g, 2 * h * w * c);
        for (include_pad, float) in
            [(false, None), (true, None)]
                .into_iter()
                .chain([false, true].into_iter().flat_map(|pad| {
                    [0, 128].map(|offset| {
                        let stored_zp = (3 + offset) as f32;
                        (pad, Some(AvgFloat { stored_zp, offset }))
                    })
                }))
        {
            let p_avg = AvgParams {
                x_zp: -7,
                y_zp: 3,
                x_scale: 0.0371,
                y_scale: 0.0293,
                count_include_pad: include_pad,
                lo: -120,
                hi: 127,
                float,
            };
            // Independently: the taps inside the image, the padded ones counted where they
            // count (integer formula) or the whole kernel (ONNX Runtime's float kernel).
            let mut want = vec![0i8; 2 * out_h * out_w * c];
            for (i, v) in want.iter_mut().enumerate() {
                let (ch, px) = (i % c, i / c);
                let (b, oy, ox) = (px / (out_h * out_w), px / out_w % out_h, px % out_w);
                let (mut isum, mut fsum, mut inside, mut padded) = (0i32, 0f32, 0u32, 0u32);
                for ky in 0..k {
                    for kx in 0..k {
                        let iy = (oy * s + ky) as isize - p as isize;
                        let ix = (ox * s + kx) as isize - p as isize;
                        let is_in = |v: isize, len: usize| v >= 0 && (v as usize) < len;
                        let in_pad =
                            |v: isize, len: usize| v >= -(p as isize) && v < (len + p) as isize;
                        if is_in(iy, h) && is_in(ix, w) {
                            let q =
                                i32::from(x[((b * h + iy as usize) * w + ix as usize) * c + ch]);
                            isum += q - p_avg.x_zp;
                            fsum += p_avg.x_scale * (q - p_avg.x_zp) as f32;
                            inside += 1;
                        } else if in_pad(iy, h) && in_pad(ix, w) {
                            padded += 1;
                        }
                    }
                }
                *v = match float {
                    None => {
                        let n = if include_pad { inside + padded } else { inside }.max(1);
                        let scale = p_avg.x_scale / (p_avg.y_scale * n as f32);
                        requant_float_formula(isum as f32 * scale, p_avg.y_zp, -120, 127)
                    }
                    Some(f) => {
                        let n = if include_pad {
                            (k * k) as u32
                        } else {
                            inside.max(1)
                        };
                        let stored = fsum / n as f32 / p_avg.y_scale + f.stored_zp;
                        let q = stored.round_ties_even() as i32 - f.offset;
                        q.clamp(-120, 127) as i8
                    }
                };
            }
            for isa in Isa::available() {
                let mut got = vec![0i8; want.len()];
                let cut = out_h / 2 * out_w * c;
                let (lo, hi) = got.split_at_mut(cut);
                avg_pool(isa, &win, c, &p_avg, &x, lo, 0..out_h / 2);
                avg_pool(isa, &win, c, &p_avg, &x, hi, out_h / 2..2 * out_h);
                assert_eq!(
                    got,
                    want,
                    "{} {h}x{w}x{c} k{k} s{s} p{p} ceil {ceil} include_pad {include_pad} {float:?}",
                    isa.name()
                );
                // A whole-image pool shared among lanes: each chunk of rows sums its own
                // pixels, the finish adds the chunks up; every chunk count, each image.
                if win.covers_image() && float.is_none() {
                    let img = h * w * c;
                    for chunks in 1..=h {
                        let mut partials = vec![i32::MIN; chunks * c];
                        for b in 0..2 {
                            let image = &x[b * img..(b + 1) * img];
                            for (i, part) in partials.chunks_exact_mut(c).enumerate() {
                                let r = redline_runtime::parallel::chunk_range(h, chunks, i);
                                global_pool_sums(
                                    isa,
                                    c,
                                    &image[r.start * w * c..r.end * w * c],
                                    part,
                                );
                            }
                            let mut shared = vec![0i8; c];
                            global_pool_finish(&win, c, &p_avg, &partials, &mut shared);
                            assert_eq!(
                                shared,
                                want[b * c..(b + 1) * c],
                                "{} {h}x{w}x{c} in {chunks} chunks, image {b}",
                                isa.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn max_pool_gives_the_same_bytes_on_every_width() {
    let mut g = SplitMix64::stream(13, 0);
    // (h, w, c, k, stride, pad, dilation): one run per row, several runs per row (600
    // channels), and the tap-by-tap fallback (a window wider than the buffer).
    for (h, w, c, k, s, p, dl) in [
        (9, 7, 64, 3, 2, 1, 1),
        (5, 6, 3, 2, 1, 0, 1),
        (8, 8, 17, 3, 1, 1, 1),
        (7, 9, 5, 3, 1, 2, 2),
        (4, 30, 600, 3, 2, 1, 1),
        (3, 4, 3000, 3, 1, 1, 1),
    ] {
        let out_h = (h + 2 * p - (k - 1) * dl - 1) / s + 1;
        let out_w = (w + 2 * p - (k - 1) * dl - 1) / s + 1;
        let win = test_window((h, w), (out_h, out_w), (k, k), s, dl, (p, p));
        let x = bytes(&mut g, 2 * h * w * c);
        let mut want = vec![0i8; 2 * out_h * out_w * c];
        max_pool(Isa::PORTABLE, &win, c, &x, &mut want, 0..2 * out_h);
        // Against the definition, output by output.
        for (i, &v) in want.iter().enumerate() {
            let (ch, px) = (i % c, i / c);
            let (b, oy, ox) = (px / (out_h * out_w), px / out_w % out_h, px % out_w);
            let mut m = i8::MIN;
            for ky in 0..k {
                for kx in 0..k {
                    let iy = (oy * s + ky * dl) as isize - p as isize;
                    let ix = (ox * s + kx * dl) as isize - p as isize;
                    if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                        m = m.max(x[((b * h + iy as usize) * w + ix as usize) * c + ch]);
                    }
                }
            }
            assert_eq!(v, m, "output {i} of case {h}x{w}x{c} k{k}");
        }
        for isa in Isa::available() {
            let mut got = vec![0i8; want.len()];
            max_pool(isa, &win, c, &x, &mut got, 0..2 * out_h);
            assert_eq!(got, want, "{}", isa.name());
        }
        // The f32 pool (a float route's) on the same values scaled: an increasing map
        // commutes with max, so it gives the bytes' maxima scaled, on every width and in
        // two row ranges.
        let xf: Vec<f32> = x.iter().map(|&v| f32::from(v) * 0.37).collect();
        let wantf: Vec<f32> = want.iter().map(|&v| f32::from(v) * 0.37).collect();
        for isa in Isa::available() {
            let mut got = vec![0f32; want.len()];
            let (a, b) = got.split_at_mut(out_h * out_w * c);
            max_pool_f32(isa, &win, c, &xf, a, 0..out_h);
            max_pool_f32(isa, &win, c, &xf, b, out_h..2 * out_h);
            assert_eq!(got, wantf, "f32 on {}", isa.name());
        }
    }
}

#[test]
fn float_global_average_pool_is_the_sum_in_pixel_order_over_hw() {
    let mut g = SplitMix64::stream(17, 0);
    for (batch, hw, c) in [(1, 49, 64), (2, 7, 17), (3, 1, 5), (2, 12, 40)] {
        let x: Vec<f32> = (0..batch * hw * c).map(|_| g.uniform(-5.0, 5.0)).collect();
        let want: Vec<f32> = (0..batch * c)
            .map(|e| {
                let (img, ch) = (e / c, e % c);
                let mut s = 0f32;
                for p in 0..hw {
                    s += x[(img * hw + p) * c + ch];
                }
                s / hw as f32
            })
            .collect();
        for isa in Isa::available() {
            // Whole, and split at an element inside an image's channels.
            let mut got = vec![0f32; want.len()];
            crate::onnx::kernels::float::global_avg_pool(isa, c, hw, &x, 0, &mut got);
            assert_eq!(got, want, "{} {batch}x{hw}x{c}", isa.name());
            let cut = c / 2 + c * (batch - 1);
            let (a, b) = got.split_at_mut(cut);
            a.fill(0.0);
            b.fill(0.0);
            crate::onnx::kernels::float::global_avg_pool(isa, c, hw, &x, 0, a);
            crate::onnx::kernels::float::global_avg_pool(isa, c, hw, &x, cut, b);
            assert_eq!(got, want, "{} split {batch}x{hw}x{c}", isa.name());
        }
    }
}

#[test]
fn global_pool_sums_are_exact_over_many_pixels_of_extreme_bytes() {
    // Past the 256-pixel runs of the `i16` sums, with every value at an end of the `i8`
    // range and a random mix; channel counts through every block width and the rest.
    let mut g = SplitMix64::stream(18, 0);
    for c in [1, 7, 8, 24, 64, 123, 200] {
        let px = 41 * 37;
        for fill in [Some(-128i8), Some(127), None] {
            let x: Vec<i8> = (0..px * c)
                .map(|_| fill.unwrap_or_else(|| g.next_i8()))
                .collect();
            let want: Vec<i32> = (0..c)
                .map(|ch| x.iter().skip(ch).step_by(c).map(|&v| i32::from(v)).sum())
                .collect();
            for isa in Isa::available() {
                let mut got = vec![i32::MIN; c];
                global_pool_sums(isa, c, &x, &mut got);
                assert_eq!(got, want, "{} {c} channels, fill {fill:?}", isa.name());
            }
        }
    }
}
