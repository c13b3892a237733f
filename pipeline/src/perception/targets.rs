//! Training targets: the inverse of [`Decoder::decode`](super::Decoder::decode) — boxes in
//! the ego frame → the INT8 head tensor a perfect network would output.
//!
//! Contract: [`encode_targets`] writes every element of its output or, on a size or
//! parameter error, nothing. It is deterministic and allocation free, but it is not on the
//! per-frame path: today only tests use it (to build heads the decoder must recover), so it
//! is compiled for tests only.
//!
//! Cost: O(cells · (classes + 6)) to clear the tensor plus O(boxes).

use redline_models::network::REG_CHANNELS;
use redline_runtime::det_math as dm;

use super::{check_scale, check_size, sat_i8, PerceptionError};
use crate::types::{BevSpec, Detection};

/// Logit `encode_targets` writes where there is no object.
pub(crate) const BACKGROUND_LOGIT: f32 = -10.0;

/// Quantizes a real value: `clamp(round_half_away(v / scale) + zp)`. NaN maps to `zp`.
#[inline]
fn quantize(v: f32, scale: f32, zp: i8) -> i8 {
    let q = (v / scale).round();
    if q.is_nan() {
        return zp;
    }
    let q = q.clamp(-1024.0, 1024.0) as i64;
    sat_i8(q + zp as i64)
}

/// Writes head targets for `boxes` (ego frame) so that [`Decoder::decode`] recovers them:
/// the inverse of decoding, for tests and training. Layout and quantization as in
/// [`Decoder`]. Every heat logit starts at [`BACKGROUND_LOGIT`], every regression value at
/// 0; each valid box inside the grid (class `< classes`, finite, positive size) sets its
/// class logit at the cell containing its centre to `logit(score)` (score 0 — the ground
/// truth default — means 1; scores are clamped so logits saturate instead of overflowing),
/// keeping the higher of two boxes of one class in one cell. The regression channels are
/// shared by the classes of a cell: the highest-logit box in a cell writes them. On a size
/// or parameter error nothing is written and the error is returned. Returns the number of
/// boxes encoded.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_targets(
    bev: &BevSpec,
    classes: usize,
    boxes: &[Detection],
    heat_scale: f32,
    heat_zp: i8,
    reg_scale: f32,
    reg_zp: i8,
    out: &mut [i8],
) -> Result<usize, PerceptionError> {
    if classes == 0 {
        return Err(PerceptionError::BadParam {
            what: "classes",
            value: 0.0,
        });
    }
    check_scale("heat_scale", heat_scale)?;
    check_scale("reg_scale", reg_scale)?;
    let stride = classes + REG_CHANNELS;
    check_size(
        "detection head targets",
        out.len(),
        bev.nx * bev.ny * stride,
    )?;
    let bg = quantize(BACKGROUND_LOGIT, heat_scale, heat_zp);
    for cell in out.chunks_exact_mut(stride) {
        cell[..classes].fill(bg);
        cell[classes..].fill(reg_zp);
    }
    let mut encoded = 0;
    for b in boxes {
        let finite = b.x.is_finite()
            && b.y.is_finite()
            && b.yaw.is_finite()
            && b.length.is_finite()
            && b.width.is_finite();
        if b.valid == 0
            || b.class as usize >= classes
            || !finite
            || b.length <= 0.0
            || b.width <= 0.0
        {
            continue;
        }
        let Some((ix, iy)) = bev.cell(b.x, b.y) else {
            continue;
        };
        let score = if b.score > 0.0 && b.score.is_finite() {
            b.score.min(1.0)
        } else {
            1.0
        };
        let s = (score as f64).clamp(1e-6, 1.0 - 1e-6);
        let logit = dm::ln(s / (1.0 - s)) as f32;
        let q = quantize(logit, heat_scale, heat_zp);
        let base = (iy * bev.nx + ix) * stride;
        let cell = &mut out[base..base + stride];
        let cell_max = cell[..classes].iter().copied().max().unwrap_or(bg);
        let slot = &mut cell[b.class as usize];
        if q > *slot {
            *slot = q;
        }
        if q >= cell_max {
            let (cx, cy) = bev.centre(ix, iy);
            let vals = [
                (b.x - cx) / bev.res,
                (b.y - cy) / bev.res,
                dm::ln(b.length),
                dm::ln(b.width),
                dm::sin(b.yaw),
                dm::cos(b.yaw),
            ];
            for (d, v) in cell[classes..].iter_mut().zip(vals) {
                *d = quantize(v, reg_scale, reg_zp);
            }
        }
        encoded += 1;
    }
    Ok(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perception::test_support::det;

    const HS: f32 = 1.0 / 16.0;
    const RS: f32 = 1.0 / 32.0;

    #[test]
    fn background_everywhere_and_one_cell_per_box() {
        let bev = BevSpec::DEFAULT;
        let k = 2;
        let stride = k + REG_CHANNELS;
        let mut out = vec![7i8; bev.nx * bev.ny * stride];
        let boxes = [
            det(10.3, 0.4, 0.5, 4.0, 2.0, 0.9, 1),
            // Invalid ones are skipped: class out of range, zero size, outside the grid.
            det(10.3, 0.4, 0.5, 4.0, 2.0, 0.9, 2),
            det(20.3, 0.4, 0.5, 0.0, 2.0, 0.9, 0),
            det(1000.0, 0.4, 0.5, 4.0, 2.0, 0.9, 0),
        ];
        let n = encode_targets(&bev, k, &boxes, HS, 0, RS, 0, &mut out).unwrap();
        assert_eq!(n, 1);
        let bg = quantize(BACKGROUND_LOGIT, HS, 0);
        let (ix, iy) = bev.cell(10.3, 0.4).unwrap();
        let hit = iy * bev.nx + ix;
        for (c, cell) in out.chunks_exact(stride).enumerate() {
            if c == hit {
                assert_eq!(cell[0], bg);
                assert!(cell[1] > 0, "{cell:?}"); // logit(0.9) > 0
                assert_ne!(&cell[k..], &[0; REG_CHANNELS]);
            } else {
                assert_eq!(&cell[..k], &[bg; 2]);
                assert_eq!(&cell[k..], &[0; REG_CHANNELS]);
            }
        }
    }

    #[test]
    fn errors_write_nothing() {
        let bev = BevSpec::DEFAULT;
        let len = bev.nx * bev.ny * (1 + REG_CHANNELS);
        let b = [det(10.3, 0.4, 0.5, 4.0, 2.0, 0.9, 0)];
        let mut out = vec![5i8; len];
        assert!(matches!(
            encode_targets(&bev, 0, &b, HS, 0, RS, 0, &mut out),
            Err(PerceptionError::BadParam {
                what: "classes",
                ..
            })
        ));
        assert!(encode_targets(&bev, 1, &b, 0.0, 0, RS, 0, &mut out).is_err());
        assert!(encode_targets(&bev, 1, &b, HS, 0, f32::NAN, 0, &mut out).is_err());
        assert!(matches!(
            encode_targets(&bev, 1, &b, HS, 0, RS, 0, &mut out[1..]),
            Err(PerceptionError::BadSize { .. })
        ));
        assert!(out.iter().all(|&v| v == 5));
    }
}
