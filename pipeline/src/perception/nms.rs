//! Class-wise greedy non-maximum suppression of decoded boxes, with rotated-box BEV IoU
//! ([`crate::geometry::bev_iou`]).
//!
//! Contract: [`nms`] works in place on a caller's slice, never allocates, locks or panics,
//! and is deterministic: a stable insertion sort by score (NaN scores last), then a greedy
//! pass in that order.
//!
//! Cost: O(n²) IoU tests for `n` boxes (`n <= MAX_DETECTIONS`).

use crate::geometry::bev_iou;
use crate::types::Detection;

/// Class-wise greedy non-maximum suppression, in place, on `dets[..n]` (`n` is clamped to
/// `dets.len()`). Entries with `valid == 0` are dropped; the rest are ordered by score,
/// best first (stable: equal scores keep their input order; NaN scores sort last); a box is
/// suppressed when its rotated-box IoU ([`bev_iou`]) with an already kept box of the same
/// class is strictly greater than `iou_threshold` (so `1.0` keeps everything). The kept
/// boxes end up in `dets[..kept]`, `dets[kept..n]` are cleared. Returns `kept`.
/// No allocation; O(n²).
pub(super) fn nms(dets: &mut [Detection], n: usize, iou_threshold: f32) -> usize {
    let n = n.min(dets.len());
    // Compact valid entries, preserving order.
    let mut m = 0;
    for i in 0..n {
        if dets[i].valid != 0 {
            dets[m] = dets[i];
            m += 1;
        }
    }
    let key = |d: &Detection| {
        if d.score.is_nan() {
            f32::NEG_INFINITY
        } else {
            d.score
        }
    };
    // Stable insertion sort, best score first.
    for i in 1..m {
        let d = dets[i];
        let mut j = i;
        while j > 0 && key(&dets[j - 1]) < key(&d) {
            dets[j] = dets[j - 1];
            j -= 1;
        }
        dets[j] = d;
    }
    let mut kept = 0;
    for i in 0..m {
        let d = dets[i];
        let suppressed = dets[..kept]
            .iter()
            .any(|k| k.class == d.class && bev_iou(k, &d) > iou_threshold);
        if !suppressed {
            dets[kept] = d;
            kept += 1;
        }
    }
    dets[kept..n].fill(Detection::default());
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perception::test_support::det;

    #[test]
    fn nms_is_stable_drops_invalid_and_clears_the_tail() {
        // nms() on its own: stable order for equal scores, invalid entries dropped,
        // the tail cleared.
        let a = det(0.0, 0.0, 0.0, 4.0, 2.0, 0.5, 0);
        let b = det(20.0, 0.0, 0.0, 4.0, 2.0, 0.5, 0);
        let c = det(0.3, 0.1, 0.1, 4.0, 2.0, 0.6, 0);
        let mut v = [a, b, Detection::default(), c];
        let kept = nms(&mut v, 4, 0.5);
        assert_eq!(kept, 2);
        assert_eq!(v[0], c);
        assert_eq!(v[1], b);
        assert!(v[2..].iter().all(|d| d.valid == 0));
        assert_eq!(nms(&mut v, 100, 0.5), 2); // n clamped, no panic
    }

    #[test]
    fn nms_suppresses_only_within_a_class() {
        let a = det(0.0, 0.0, 0.0, 4.0, 2.0, 0.9, 0);
        let b = det(0.2, 0.0, 0.0, 4.0, 2.0, 0.8, 0);
        let c = det(0.2, 0.0, 0.0, 4.0, 2.0, 0.7, 1);
        let mut v = [a, b, c];
        assert_eq!(nms(&mut v, 3, 0.5), 2);
        assert_eq!(v[0], a);
        assert_eq!(v[1], c);
        assert_eq!(v[2], Detection::default());
        // Threshold 1 keeps everything.
        let mut v = [a, b, c];
        assert_eq!(nms(&mut v, 3, 1.0), 3);
    }
}
