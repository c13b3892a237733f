//! Upsampling and colour conversion, one output row at a time, straight into the caller's
//! RGB8 buffer.
//!
//! **Upsampling** is the triangle ("fancy") filter of libjpeg, in integers: each output
//! sample weighs its nearest input sample 3/4 and the next nearest 1/4, per direction, with
//! edges replicated:
//!
//! - 2:1 horizontal only: `(3·near + far + 1) >> 2` for even columns, `+ 2` for odd ones;
//! - 2:1 vertical only: `(3·near + far + 2) >> 2`;
//! - 2:1 both: column sums `3·near + far` of rows, then `(3·this + neighbour + 8) >> 4`
//!   (even columns) or `+ 7` (odd columns).
//!
//! **Colour conversion** is JFIF's YCbCr → RGB in 16-bit fixed point with round-half-up:
//! `R = Y + ((91881·Cr' + 2^15) >> 16)`, `G = Y + ((−22554·Cb' − 46802·Cr' + 2^15) >> 16)`,
//! `B = Y + ((116130·Cb' + 2^15) >> 16)` with `Cb' = Cb − 128`, `Cr' = Cr − 128`, clamped to
//! 0..=255. Grey images give `R = G = B = Y`. Integer only: the same bits on every ISA.

use super::markers::{Component, Frame};

/// Per-row scratch, sized for the widest image at construction.
#[derive(Debug)]
pub(crate) struct RowScratch {
    rows: [Vec<u8>; 3],
    colsum: Vec<u16>,
}

impl RowScratch {
    pub(crate) fn new(max_width: usize) -> Self {
        let n = max_width + 32;
        RowScratch {
            rows: [vec![0; n], vec![0; n], vec![0; n]],
            colsum: vec![0; n],
        }
    }
}

/// Output rows that can be converted now: every component has decoded the sample rows they
/// need, including the next row that vertical upsampling reads.
pub(crate) fn rows_ready(frame: &Frame) -> usize {
    let mut ready = frame.height;
    for c in &frame.comps[..frame.ncomp] {
        if c.rows_done >= c.height {
            continue;
        }
        let r = if c.ratio_v == 2 {
            (2 * c.rows_done).saturating_sub(2)
        } else {
            c.rows_done
        };
        ready = ready.min(r);
    }
    ready
}

/// Converts output rows `y0..y1` into `out` (packed RGB8, `frame.width * 3` bytes a row).
/// The caller checked that `out` holds the whole image and the planes hold every component.
/// Compiled a second time with AVX2 on x86-64 and chosen at run time (same bits).
pub(crate) fn convert_rows(
    frame: &Frame,
    planes: &[u8],
    y0: usize,
    y1: usize,
    out: &mut [u8],
    scratch: &mut RowScratch,
) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: `convert_rows_avx2` only requires the CPU to support AVX2, checked above.
        unsafe { convert_rows_avx2(frame, planes, y0, y1, out, scratch) };
        return;
    }
    convert_rows_any(frame, planes, y0, y1, out, scratch);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn convert_rows_avx2(
    frame: &Frame,
    planes: &[u8],
    y0: usize,
    y1: usize,
    out: &mut [u8],
    scratch: &mut RowScratch,
) {
    convert_rows_any(frame, planes, y0, y1, out, scratch);
}

#[inline(always)]
fn convert_rows_any(
    frame: &Frame,
    planes: &[u8],
    y0: usize,
    y1: usize,
    out: &mut [u8],
    scratch: &mut RowScratch,
) {
    let w = frame.width;
    let RowScratch {
        rows: [s0, s1, s2],
        colsum,
    } = scratch;
    for (y, out_row) in out[y0 * w * 3..y1 * w * 3]
        .chunks_exact_mut(w * 3)
        .enumerate()
    {
        let y = y0 + y;
        if frame.ncomp == 1 {
            let luma = sample_row(&frame.comps[0], planes, y, w, s0, colsum);
            for (px, &l) in out_row.chunks_exact_mut(3).zip(luma) {
                px.copy_from_slice(&[l, l, l]);
            }
        } else {
            let luma = sample_row(&frame.comps[0], planes, y, w, s0, colsum);
            let cb = sample_row(&frame.comps[1], planes, y, w, s1, colsum);
            let cr = sample_row(&frame.comps[2], planes, y, w, s2, colsum);
            ycc_to_rgb(luma, cb, cr, out_row);
        }
    }
}

#[inline(always)]
/// Component `c`'s samples for output row `y`, upsampled to `w` columns (a view of the
/// plane when the component is not subsampled).
fn sample_row<'a>(
    c: &Component,
    planes: &'a [u8],
    y: usize,
    w: usize,
    dst: &'a mut [u8],
    colsum: &mut [u16],
) -> &'a [u8] {
    let plane = &planes[c.offset..c.offset + c.stride * c.rows];
    let row = |r: usize| &plane[r * c.stride..r * c.stride + c.width];
    let dst = &mut dst[..w];
    match (c.ratio_h, c.ratio_v) {
        (1, 1) => &row(y)[..w],
        (2, 1) => {
            let cs = &mut colsum[..c.width];
            for (s, &v) in cs.iter_mut().zip(row(y)) {
                *s = 4 * v as u16;
            }
            triangle_h(cs, dst, 4, 8);
            dst
        }
        (rh, _) => {
            let near = y / 2;
            let far = if y.is_multiple_of(2) {
                near.saturating_sub(1)
            } else {
                (near + 1).min(c.height - 1)
            };
            let cs = &mut colsum[..c.width];
            for ((s, &n), &f) in cs.iter_mut().zip(row(near)).zip(row(far)) {
                *s = 3 * n as u16 + f as u16;
            }
            if rh == 2 {
                triangle_h(cs, dst, 8, 7);
            } else {
                for (d, &s) in dst.iter_mut().zip(cs.iter()) {
                    *d = ((s + 2) >> 2) as u8;
                }
            }
            dst
        }
    }
}

/// Horizontal 2:1 triangle filter on column sums (each 4× a sample): output `2i` is
/// `(3·cs[i] + cs[i−1] + even_bias) >> 4`, output `2i+1` is
/// `(3·cs[i] + cs[i+1] + odd_bias) >> 4`, indices clamped to the row.
#[inline(always)]
fn triangle_h(cs: &[u16], out: &mut [u8], even_bias: u16, odd_bias: u16) {
    let n = cs.len();
    let w = out.len();
    let pair = |i: usize, out: &mut [u8]| {
        let c = 3 * cs[i];
        let l = cs[i.saturating_sub(1)];
        let r = cs[(i + 1).min(n - 1)];
        if let Some(o) = out.get_mut(2 * i) {
            *o = ((c + l + even_bias) >> 4) as u8;
        }
        if let Some(o) = out.get_mut(2 * i + 1) {
            *o = ((c + r + odd_bias) >> 4) as u8;
        }
    };
    if n == 0 {
        return;
    }
    pair(0, out);
    if n >= 3 {
        let interior = &mut out[2..(2 * (n - 1)).min(w)];
        for (o, win) in interior.chunks_exact_mut(2).zip(cs.windows(3)) {
            let c = 3 * win[1];
            o[0] = ((c + win[0] + even_bias) >> 4) as u8;
            o[1] = ((c + win[2] + odd_bias) >> 4) as u8;
        }
    }
    if n >= 2 {
        pair(n - 1, out);
    }
}

#[inline(always)]
fn clamp(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

/// JFIF YCbCr → RGB for one row (see the module docs for the arithmetic).
#[inline(always)]
fn ycc_to_rgb(luma: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) {
    for (((px, &y), &cb), &cr) in out.chunks_exact_mut(3).zip(luma).zip(cb).zip(cr) {
        let (y, cb, cr) = (y as i32, cb as i32 - 128, cr as i32 - 128);
        px[0] = clamp(y + ((91881 * cr + 32768) >> 16));
        px[1] = clamp(y + ((-22554 * cb - 46802 * cr + 32768) >> 16));
        px[2] = clamp(y + ((116130 * cb + 32768) >> 16));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triangle_filter_replicates_edges_and_weighs_neighbours() {
        // h2v1 form: column sums are 4x the samples.
        let samples = [0u16, 100, 200];
        let cs: Vec<u16> = samples.iter().map(|s| 4 * s).collect();
        let mut out = [0u8; 6];
        triangle_h(&cs, &mut out, 4, 8);
        // (3a + b + 1) >> 2 / (3a + c + 2) >> 2 with edges clamped.
        assert_eq!(out, [0, 25, 75, 125, 175, 200]);
        // Odd output width drops the last odd column.
        let mut out5 = [0u8; 5];
        triangle_h(&cs, &mut out5, 4, 8);
        assert_eq!(out5, [0, 25, 75, 125, 175]);
        let mut one = [0u8; 1];
        triangle_h(&[400], &mut one, 4, 8);
        assert_eq!(one, [100]);
    }

    /// The AVX2 build of the conversion gives the portable build's bits (4:2:0, 4:2:2,
    /// 4:4:0, odd sizes).
    #[test]
    fn every_code_path_gives_the_same_bits() {
        for hv in [[0x22u8, 0x11, 0x11], [0x21, 0x11, 0x11], [0x12, 0x11, 0x11]] {
            let (w, h) = (37usize, 21usize);
            let mut sof = vec![8, 0, h as u8, 0, w as u8, 3];
            for (i, f) in hv.iter().enumerate() {
                sof.extend_from_slice(&[i as u8 + 1, *f, 0]);
            }
            let frame = super::super::markers::parse_sof(&sof).unwrap();
            let mut planes = vec![0u8; super::super::markers::planes_capacity(w, h)];
            let mut seed = 0x2545_f491_4f6c_dd1d_u64;
            for p in planes.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *p = seed as u8;
            }
            let mut scratch = RowScratch::new(w);
            let (mut a, mut b) = (vec![0u8; w * h * 3], vec![0u8; w * h * 3]);
            convert_rows(&frame, &planes, 0, h, &mut a, &mut scratch);
            convert_rows_any(&frame, &planes, 0, 7, &mut b, &mut scratch);
            convert_rows_any(&frame, &planes, 7, h, &mut b, &mut scratch);
            assert_eq!(a, b, "sampling {hv:x?}");
        }
    }

    #[test]
    fn grey_chroma_gives_grey_rgb() {
        let mut out = [0u8; 6];
        ycc_to_rgb(&[0, 200], &[128, 128], &[128, 128], &mut out);
        assert_eq!(out, [0, 0, 0, 200, 200, 200]);
        ycc_to_rgb(&[76, 29], &[85, 255], &[255, 107], &mut out);
        // Pure red and pure blue within rounding.
        assert!(out[0] >= 253 && out[1] <= 2 && out[2] <= 2, "{out:?}");
        assert!(out[3] <= 2 && out[4] <= 2 && out[5] >= 253, "{out:?}");
    }
}
