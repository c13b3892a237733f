//! Which frames a fault hits: frame numbers and ranges (`"3, 10..20, 40..=45, 100.."`),
//! and/or a rate (each frame independently, with a seeded, stateless draw).
//!
//! Contract: [`FrameSet::contains`] is pure, allocation free and O(log ranges): it runs on
//! the hot path (stage faults ask it every frame). The rate draw for frame `k` is
//! `mix64(key ^ k·φ)` ([`redline_runtime::rng::mix64`], the project's one generator), so
//! the same seed, rule and frame always give the same answer, on any machine, in any order,
//! for any number of lanes, and for frames past the end of a log (a looped drive).

use redline_runtime::rng::mix64;

/// How a frame list is written, for messages.
pub const FRAMES_SYNTAX: &str =
    "frame numbers and ranges separated by commas, e.g. \"7, 10..20, 40..=45, 100..\"";

/// The frames one fault rule hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameSet {
    /// Half-open `[start, end)` ranges, sorted, disjoint, not touching.
    ranges: Vec<(u64, u64)>,
    /// A frame is drawn when its 53 random bits are below this (0: no rate; 2^53: all).
    threshold: u64,
    /// Per rule and seed.
    key: u64,
}

impl FrameSet {
    /// The frames of `frames` (see [`FRAMES_SYNTAX`]; none when `None`) plus, with `rate`,
    /// each other frame with probability `rate` (drawn with `key`). The error says what is
    /// wrong with the list or the rate.
    pub fn new(frames: Option<&str>, rate: Option<f64>, key: u64) -> Result<FrameSet, String> {
        let ranges = match frames {
            Some(spec) => parse_ranges(spec)?,
            None => Vec::new(),
        };
        let threshold = match rate {
            None => 0,
            Some(r) if (0.0..=1.0).contains(&r) => (r * (1u64 << 53) as f64).round() as u64,
            Some(r) => return Err(format!("rate = {r}: give a probability from 0.0 to 1.0")),
        };
        Ok(FrameSet {
            ranges,
            threshold,
            key,
        })
    }

    /// Whether the fault hits `frame`. Hot path: no allocation, no lock.
    #[inline]
    pub fn contains(&self, frame: u64) -> bool {
        let i = self.ranges.partition_point(|&(_, end)| end <= frame);
        if i < self.ranges.len() && self.ranges[i].0 <= frame {
            return true;
        }
        self.threshold > 0
            && (mix64(self.key ^ frame.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 11) < self.threshold
    }

    /// Whether the set can hit no frame at all (no range and a zero rate).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.threshold == 0
    }
}

/// Parses [`FRAMES_SYNTAX`] into sorted, merged, half-open ranges.
fn parse_ranges(spec: &str) -> Result<Vec<(u64, u64)>, String> {
    let number = |s: &str, item: &str| -> Result<u64, String> {
        s.trim().parse::<u64>().map_err(|_| {
            format!(
                "frames = \"{spec}\": `{item}` is not a frame or a range; write {FRAMES_SYNTAX}"
            )
        })
    };
    let mut ranges = Vec::new();
    for item in spec.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!(
                "frames = \"{spec}\": an empty item; write {FRAMES_SYNTAX}"
            ));
        }
        let (start, end) = if let Some((a, b)) = item.split_once("..=") {
            let b = number(b, item)?;
            (number(a, item)?, b.saturating_add(1))
        } else if let Some((a, b)) = item.split_once("..") {
            let end = if b.trim().is_empty() {
                u64::MAX
            } else {
                number(b, item)?
            };
            (number(a, item)?, end)
        } else {
            let k = number(item, item)?;
            (k, k.saturating_add(1))
        };
        if start >= end {
            return Err(format!(
                "frames = \"{spec}\": `{item}` holds no frame (the end of `a..b` is excluded; \
                 `a..=b` includes it)"
            ));
        }
        ranges.push((start, end));
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(set: &FrameSet, n: u64) -> Vec<u64> {
        (0..n).filter(|&k| set.contains(k)).collect()
    }

    #[test]
    fn lists_and_ranges() {
        let s = FrameSet::new(Some(" 7, 10..13,2..=3, 12..15 "), None, 0).unwrap();
        assert_eq!(hits(&s, 30), vec![2, 3, 7, 10, 11, 12, 13, 14]);
        let open = FrameSet::new(Some("25.."), None, 0).unwrap();
        assert_eq!(hits(&open, 30), vec![25, 26, 27, 28, 29]);
        assert!(open.contains(u64::MAX - 1));
        assert!(FrameSet::new(Some("0..=18446744073709551615"), None, 0)
            .unwrap()
            .contains(u64::MAX - 1));
        assert!(FrameSet::new(None, None, 0).unwrap().is_empty());
    }

    #[test]
    fn mistakes_are_explained() {
        for (spec, needle) in [
            ("5, x", "`x`"),
            ("3..1", "holds no frame"),
            ("4..4", "holds no frame"),
            ("1,,2", "empty item"),
            ("-1", "`-1`"),
            ("1..2..3", "`1..2..3`"),
        ] {
            let e = FrameSet::new(Some(spec), None, 0).unwrap_err();
            assert!(e.contains(needle) && e.contains(spec), "{spec}: {e}");
        }
        for r in [-0.1, 1.5, f64::NAN] {
            let e = FrameSet::new(None, Some(r), 0).unwrap_err();
            assert!(e.contains("probability"), "{e}");
        }
    }

    #[test]
    fn rates_are_seeded_stateless_and_about_right() {
        let a = FrameSet::new(None, Some(0.1), 42).unwrap();
        let n = 20_000;
        let got = hits(&a, n);
        let share = got.len() as f64 / n as f64;
        assert!((0.09..0.11).contains(&share), "{share}");
        // Same key: the same frames, asked in any order.
        let again = FrameSet::new(None, Some(0.1), 42).unwrap();
        assert!(got.iter().rev().all(|&k| again.contains(k)));
        // Another key: other frames.
        let other = FrameSet::new(None, Some(0.1), 43).unwrap();
        assert_ne!(hits(&other, n), got);
        assert_eq!(
            hits(&FrameSet::new(None, Some(1.0), 1).unwrap(), 100).len(),
            100
        );
        assert!(hits(&FrameSet::new(None, Some(0.0), 1).unwrap(), 1000).is_empty());
        // A list and a rate: the union.
        let both = FrameSet::new(Some("5"), Some(0.1), 42).unwrap();
        assert!(both.contains(5) && got.iter().all(|&k| both.contains(k)));
    }
}
