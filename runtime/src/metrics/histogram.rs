//! Fixed-bounds nanosecond latency histogram (see the module docs of [`crate::metrics`]).

use hdrhistogram::Histogram;

/// Lowest discernible value, in ns.
pub const LOWEST_NS: u64 = 1;
/// Highest trackable value, in ns (60 s). Larger values are clamped to this.
pub const HIGHEST_NS: u64 = 60_000_000_000;
/// Significant decimal digits kept by the histogram.
pub const SIGFIG: u8 = 3;

/// Latency histogram in nanoseconds.
///
/// Bounds are fixed at construction (1 ns ..= 60 s, 3 significant digits) and auto-resize is
/// off, so [`record`](Self::record) never allocates. Values above 60 s are clamped to 60 s and
/// counted in [`saturated`](Self::saturated).
///
/// A value of 0 ns is recorded as exactly 0 (hdrhistogram's first bucket holds every value below
/// its sub-bucket count, 0 included); values below 2048 ns are exact, larger ones keep 3
/// significant digits. Reported values (percentiles, max) are hdrhistogram's "highest equivalent"
/// value of the bucket, so they may exceed the recorded value by up to 0.1 %.
#[derive(Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    saturated: u64,
}

impl std::fmt::Debug for LatencyHistogram {
    // Hand-written: the derived form would print every one of the ~28k counters.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("saturated", &self.saturated)
            .field("min_ns", &self.hist.min())
            .field("max_ns", &self.hist.max())
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// Creates an empty histogram; allocates its counters (about 230 KiB) here, once.
    pub fn new() -> Self {
        let mut hist = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG)
            .expect("constant histogram bounds are valid");
        hist.auto(false);
        Self { hist, saturated: 0 }
    }

    /// Records one latency. Hot path: never allocates, never panics.
    ///
    /// Values above [`HIGHEST_NS`] are clamped to it and counted in [`saturated`](Self::saturated).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let ns = if ns > HIGHEST_NS {
            self.saturated = self.saturated.saturating_add(1);
            HIGHEST_NS
        } else {
            ns
        };
        // Cannot fail: 0..=HIGHEST_NS is always in range (auto-resize is off, so nothing grows).
        let _ = self.hist.record(ns);
    }

    /// Percentile summary. Not for the hot path (scans the counters).
    pub fn summary(&self) -> LatencySummary {
        let h = &self.hist;
        let count = h.len();
        if count == 0 {
            return LatencySummary::default();
        }
        let p50 = h.value_at_quantile(0.5);
        let p99 = h.value_at_quantile(0.99);
        LatencySummary {
            count,
            min_ns: h.min(),
            p50_ns: p50,
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: p99,
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean(),
            p99_over_p50: if p50 == 0 {
                0.0
            } else {
                p99 as f64 / p50 as f64
            },
        }
    }

    /// Adds every recorded value (and the saturation count) of `other` into `self`.
    ///
    /// Lossless: both histograms have the same bounds, so the counters line up one to one.
    /// Never panics and never allocates.
    pub fn add(&mut self, other: &LatencyHistogram) {
        // Cannot fail: `other` has the same bounds (the inner histogram is never handed out
        // mutably), so every one of its values fits in `self`.
        let _ = self.hist.add(&other.hist);
        self.saturated = self.saturated.saturating_add(other.saturated);
    }

    /// Number of recorded values (saturated ones included).
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Number of recorded values that were above [`HIGHEST_NS`] and clamped to it.
    pub fn saturated(&self) -> u64 {
        self.saturated
    }

    /// Forgets every recorded value; keeps the allocation.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.saturated = 0;
    }

    /// A histogram holding every value of `hdr` (e.g. one read back from a file) and
    /// `saturated` clamped values. Off the hot path (allocates).
    ///
    /// Errors when a value of `hdr` lies outside this type's fixed bounds
    /// (0 ..= [`HIGHEST_NS`]), so nothing is ever silently dropped or clamped.
    pub fn try_from_hdr(hdr: &Histogram<u64>, saturated: u64) -> Result<Self, OutOfRange> {
        let mut h = Self::new();
        if hdr.is_empty() {
            h.saturated = saturated;
            return Ok(h);
        }
        if hdr.max() > HIGHEST_NS {
            return Err(OutOfRange { max: hdr.max() });
        }
        h.hist.add(hdr).map_err(|_| OutOfRange { max: hdr.max() })?;
        h.saturated = saturated;
        Ok(h)
    }

    /// The underlying hdrhistogram, e.g. for serialization or custom iteration.
    pub fn as_hdr(&self) -> &Histogram<u64> {
        &self.hist
    }
}

/// A histogram's values do not fit a [`LatencyHistogram`] (1 ns ..= 60 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "histogram holds values up to {max} ns, above the {HIGHEST_NS} ns a latency histogram keeps"
)]
pub struct OutOfRange {
    /// Largest value of the histogram that did not fit.
    pub max: u64,
}

/// Summary of a [`LatencyHistogram`]; all values in nanoseconds.
///
/// All fields are 0 when `count == 0`. `p99_over_p50` is also 0 when `p50_ns == 0`
/// (so the value is always finite and survives JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Number of recorded values.
    pub count: u64,
    /// Lowest recorded value (bucket's lowest equivalent).
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Highest recorded value (bucket's highest equivalent).
    pub max_ns: u64,
    /// Mean, from bucket midpoints.
    pub mean_ns: f64,
    /// Tail ratio `p99_ns / p50_ns`; 0 when `count == 0` or `p50_ns == 0`.
    pub p99_over_p50: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn within(actual: u64, expected: u64) -> bool {
        // 3 significant digits: relative error at most 1/1000 (plus one for rounding).
        let tol = expected / 1000 + 1;
        actual.abs_diff(expected) <= tol
    }

    #[test]
    fn empty_summary_is_zero() {
        let h = LatencyHistogram::new();
        assert_eq!(h.count(), 0);
        assert_eq!(h.summary(), LatencySummary::default());
    }

    #[test]
    fn uniform_microseconds_percentiles() {
        let mut h = LatencyHistogram::default();
        for us in 1..=1000u64 {
            h.record(us * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert!(within(s.min_ns, 1_000), "{s:?}");
        assert!(within(s.p50_ns, 500_000), "{s:?}");
        assert!(within(s.p90_ns, 900_000), "{s:?}");
        assert!(within(s.p99_ns, 990_000), "{s:?}");
        assert!(within(s.p999_ns, 999_000), "{s:?}");
        assert!(within(s.max_ns, 1_000_000), "{s:?}");
        assert!((s.mean_ns - 500_500.0).abs() < 500.0, "{s:?}");
        assert!((s.p99_over_p50 - 1.98).abs() < 0.01, "{s:?}");
        assert_eq!(h.saturated(), 0);
    }

    #[test]
    fn zero_and_small_values_are_exact() {
        let mut h = LatencyHistogram::new();
        h.record(0);
        h.record(0);
        h.record(7);
        let s = h.summary();
        assert_eq!(s.count, 3);
        assert_eq!(s.min_ns, 0);
        assert_eq!(s.p50_ns, 0);
        assert_eq!(s.max_ns, 7);
        assert_eq!(s.p99_over_p50, 0.0);
    }

    #[test]
    fn saturation_clamps_and_counts() {
        let mut h = LatencyHistogram::new();
        h.record(5);
        h.record(HIGHEST_NS);
        h.record(HIGHEST_NS + 1);
        h.record(u64::MAX);
        assert_eq!(h.count(), 4);
        assert_eq!(h.saturated(), 2);
        let s = h.summary();
        assert!(within(s.max_ns, HIGHEST_NS), "{s:?}");
        assert_eq!(h.as_hdr().count_at(HIGHEST_NS), 3);
        h.reset();
        assert_eq!(h.count(), 0);
        assert_eq!(h.saturated(), 0);
        assert_eq!(h.summary(), LatencySummary::default());
    }

    #[test]
    fn add_empty_and_into_empty() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        b.record(1234);
        b.record(u64::MAX);
        a.add(&LatencyHistogram::new());
        assert_eq!(a.count(), 0);
        a.add(&b);
        assert_eq!(a.summary(), b.summary());
        assert_eq!(a.saturated(), 1);
    }

    #[test]
    fn summary_serde_round_trip() {
        let mut h = LatencyHistogram::new();
        for v in [10, 20, 30_000, 4_000_000] {
            h.record(v);
        }
        let s = h.summary();
        let json = serde_json::to_string(&s).unwrap();
        let back: LatencySummary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    proptest! {
        #[test]
        fn merge_equals_histogram_of_union(
            a in proptest::collection::vec(0u64..=HIGHEST_NS + 1_000_000, 0..200),
            b in proptest::collection::vec(prop_oneof![0u64..5_000, 0u64..u64::MAX], 0..200),
        ) {
            let mut ha = LatencyHistogram::new();
            let mut hb = LatencyHistogram::new();
            let mut all = LatencyHistogram::new();
            for &v in &a { ha.record(v); all.record(v); }
            for &v in &b { hb.record(v); all.record(v); }
            ha.add(&hb);
            prop_assert_eq!(ha.summary(), all.summary());
            prop_assert_eq!(ha.count(), all.count());
            prop_assert_eq!(ha.saturated(), all.saturated());
        }
    }
}
