//! The transposes (strided copies of bytes and of 4-byte words) against their definition.

use super::*;
use crate::onnx::program::Step;
use std::ops::Range;

/// `count` random shapes (ranks in `ranks`, each axis 1 to `max_dim`) with a random
/// permutation of their axes each (Fisher-Yates).
fn random_permutations(
    g: &mut SplitMix64,
    count: usize,
    ranks: Range<usize>,
    max_dim: u64,
) -> Vec<(Vec<usize>, Vec<usize>)> {
    (0..count)
        .map(|_| {
            let rank = ranks.start + g.below((ranks.end - ranks.start) as u64) as usize;
            let shape: Vec<usize> = (0..rank).map(|_| 1 + g.below(max_dim) as usize).collect();
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                perm.swap(i, g.below(i as u64 + 1) as usize);
            }
            (shape, perm)
        })
        .collect()
}

/// The plain definition: output element `j` is the input element at `j`'s index
/// scattered through the permuted strides.
fn transpose_reference(out_shape: &[usize], strides: &[usize], x: &[i8]) -> Vec<i8> {
    let n: usize = out_shape.iter().product();
    (0..n)
        .map(|j| {
            let (mut rem, mut off) = (j, 0);
            for d in (0..out_shape.len()).rev() {
                off += (rem % out_shape[d]) * strides[d];
                rem /= out_shape[d];
            }
            x[off]
        })
        .collect()
}

#[test]
fn transpose_matches_its_definition_for_any_split() {
    let mut g = SplitMix64::stream(14, 0);
    let isas = Isa::available();
    // Random ranks, shapes and permutations (Fisher-Yates), then NCHW to NHWC of
    // 3-channel images (the interleaving fast path) of several sizes.
    let mut cases = random_permutations(&mut g, 300, 1..6, 6);
    for (b, h, w) in [(1, 7, 9), (2, 5, 33), (1, 31, 67)] {
        cases.push((vec![b, 3, h, w], vec![0, 2, 3, 1]));
    }
    // 2-D transposes in whole 16 x 16 tiles and ragged edges (an attention's kᵀ), and
    // contiguous runs moved whole (a head split).
    cases.push((vec![37, 50], vec![1, 0]));
    cases.push((vec![2, 3, 33, 70], vec![0, 1, 3, 2]));
    cases.push((vec![1, 12, 197, 64], vec![0, 1, 3, 2]));
    cases.push((vec![16, 16], vec![1, 0]));
    cases.push((vec![197, 12, 64], vec![1, 0, 2]));
    cases.push((vec![1, 12, 197, 64], vec![2, 0, 1, 3]));
    for (case, (shape, perm)) in cases.iter().enumerate() {
        let in_strides = row_major_strides(shape);
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
        let n: usize = shape.iter().product();
        let x = bytes(&mut g, n);
        let want = transpose_reference(&out_shape, &strides, &x);
        for &isa in &isas {
            let what = format!("case {case} ({}): {shape:?} perm {perm:?}", isa.name());
            // The whole tensor, then a random split into chunks at any element.
            let mut got = vec![0i8; n];
            transpose(isa, &out_shape, &strides, &x, &mut got, 0..n);
            assert_eq!(got, want, "{what}");
            let mut got = vec![0i8; n];
            let mut start = 0;
            while start < n {
                let end = (start + 1 + g.below(n as u64) as usize).min(n);
                let part = &mut got[start..end];
                transpose(isa, &out_shape, &strides, &x, part, start..end);
                start = end;
            }
            assert_eq!(got, want, "{what}, split");
        }
    }
}

/// Copies of 4-byte elements (a float tensor's transposes: the element's bytes a last axis
/// of 4) from 4-byte aligned buffers, whole and split at element boundaries (the word path)
/// or anywhere (the byte path), give the definition's bytes.
#[test]
fn transposes_of_four_byte_elements_match_their_definition() {
    let mut g = SplitMix64::stream(16, 0);
    let mut cases = random_permutations(&mut g, 200, 2..6, 7);
    // NCHW to NHWC and back of float maps (whole tiles and edges), a channel shuffle.
    cases.push((vec![1, 116, 14, 14], vec![0, 2, 3, 1]));
    cases.push((vec![1, 14, 14, 116], vec![0, 3, 1, 2]));
    cases.push((vec![1, 2, 58, 7, 7], vec![0, 2, 1, 3, 4]));
    // A segmentation head's 21 classes back to NCHW (a whole and a part row tile), two
    // images of 40 channels.
    cases.push((vec![1, 40, 30, 21], vec![0, 3, 1, 2]));
    cases.push((vec![2, 9, 13, 40], vec![0, 3, 1, 2]));
    let mut tiled = 0;
    for (case, (shape, perm)) in cases.iter().enumerate() {
        let mut bshape = shape.clone();
        bshape.push(4);
        let mut bperm = perm.clone();
        bperm.push(shape.len());
        let in_strides = row_major_strides(&bshape);
        let out_shape: Vec<usize> = bperm.iter().map(|&p| bshape[p]).collect();
        let strides: Vec<usize> = bperm.iter().map(|&p| in_strides[p]).collect();
        let n: usize = bshape.iter().product();
        let words: Vec<u32> = (0..n / 4).map(|_| g.next_u64() as u32).collect();
        let x: &[i8] = bytemuck::cast_slice(&words);
        let want = transpose_reference(&out_shape, &strides, x);
        for isa in Isa::available() {
            let what = format!("case {case} ({}): {shape:?} perm {perm:?}", isa.name());
            for at_elements in [true, false] {
                let mut got_words = vec![0u32; n / 4];
                let got: &mut [i8] = bytemuck::cast_slice_mut(&mut got_words);
                let mut start = 0;
                while start < n {
                    let mut end = (start + 1 + g.below(n as u64) as usize).min(n);
                    if at_elements {
                        end = (end.div_ceil(4) * 4).min(n);
                    }
                    transpose(
                        isa,
                        &out_shape,
                        &strides,
                        x,
                        &mut got[start..end],
                        start..end,
                    );
                    start = end;
                }
                assert_eq!(got, &want[..], "{what}, split at elements {at_elements}");
            }
            // Split as the program splits a transpose of whole tiles, its axes merged as
            // the program merges them: whole output rows.
            let Step::Transpose {
                out_shape: ms,
                strides: mst,
                ..
            } = Step::strided_copy(out_shape.clone(), strides.clone(), 0, 0, 0)
            else {
                unreachable!("strided_copy makes a Transpose step")
            };
            if let Some((rows, row, chunks)) = tile_rows(&ms, &mst) {
                tiled += 1;
                assert!((1..=16).contains(&chunks) && rows >= 16 * chunks);
                let mut got_words = vec![0u32; n / 4];
                let got: &mut [i8] = bytemuck::cast_slice_mut(&mut got_words);
                for i in 0..chunks {
                    let r = redline_runtime::parallel::chunk_range(rows, chunks, i);
                    let part = &mut got[r.start * row..r.end * row];
                    transpose(isa, &ms, &mst, x, part, r.start * row..r.end * row);
                }
                assert_eq!(got, &want[..], "{what}, whole output rows");
            }
        }
    }
    assert!(tiled >= 2, "the NCHW cases are transposes of whole tiles");
}
