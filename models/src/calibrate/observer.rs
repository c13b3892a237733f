//! One activation tensor's statistics over every calibration input:
//! [`ActivationObserver`].
//!
//! Contract: exact minimum and maximum, a count of non-finite values (otherwise ignored),
//! and a histogram of [`HIST_BINS`] bins over `[-R, R]`, `R` a power of two that doubles
//! (merging bin pairs, exactly) whenever a value falls outside; percentiles are read from
//! bin edges rounded outwards and clamped to `[min, max]`. The same inputs in the same
//! order give the same statistics on every machine.
//!
//! Cost: `HIST_BINS · 8` bytes per observer, fixed whatever the number of inputs; two
//! passes over each observed tensor. Never: panics on NaN, empty or all-zero tensors.

use super::CalibrationMethod;
use crate::quant::QParams;

/// Bins of an observer's histogram (even, so that range doubling merges bins exactly).
pub const HIST_BINS: usize = 2048;
/// Smallest histogram half-range `R` (a power of two).
const MIN_RANGE: f32 = 1.0 / (1u32 << 20) as f32;
/// Statistics of one activation tensor over every input observed: exact min/max and a
/// fixed-size histogram (see the module docs).
#[derive(Clone, Debug)]
pub struct ActivationObserver {
    min: f32,
    max: f32,
    count: u64,
    non_finite: u64,
    /// Half-range `R` of the histogram; 0 until a non-zero value is seen.
    range: f32,
    bins: Vec<u64>,
}

impl Default for ActivationObserver {
    fn default() -> Self {
        Self::new()
    }
}

impl ActivationObserver {
    /// An empty observer (allocates its histogram once).
    pub fn new() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            count: 0,
            non_finite: 0,
            range: 0.0,
            bins: vec![0; HIST_BINS],
        }
    }

    /// Records every finite value of `x`.
    pub(super) fn observe(&mut self, x: &[f32]) {
        let mut max_abs = 0f32;
        for &v in x {
            if v.is_finite() {
                self.min = self.min.min(v);
                self.max = self.max.max(v);
                max_abs = max_abs.max(v.abs());
            } else {
                self.non_finite += 1;
            }
        }
        self.grow_to(max_abs);
        if self.range == 0.0 {
            // Every value so far is 0: keep them in the count, binned once a range exists.
            let zeros = x.iter().filter(|v| v.is_finite()).count() as u64;
            self.count += zeros;
            return;
        }
        let w = 2.0 * self.range / HIST_BINS as f32;
        for &v in x.iter().filter(|v| v.is_finite()) {
            let i = ((v + self.range) / w).floor();
            let i = (i.max(0.0) as usize).min(HIST_BINS - 1);
            self.bins[i] += 1;
            self.count += 1;
        }
    }

    /// Doubles the range until `|v| <= R` for `max_abs`, merging bin pairs.
    fn grow_to(&mut self, max_abs: f32) {
        if max_abs == 0.0 {
            return;
        }
        if self.range == 0.0 {
            let mut r = MIN_RANGE;
            while r < max_abs {
                r *= 2.0;
            }
            self.range = r;
            // Values observed while the range was 0 were exact zeros: bin them now.
            let zeros = self.count;
            self.bins[HIST_BINS / 2] += zeros;
            return;
        }
        while self.range < max_abs {
            let mut merged = vec![0u64; HIST_BINS];
            for (i, &c) in self.bins.iter().enumerate() {
                merged[HIST_BINS / 4 + i / 2] += c;
            }
            self.bins = merged;
            self.range *= 2.0;
        }
    }

    /// Finite values observed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Non-finite values seen (and ignored).
    pub fn non_finite(&self) -> u64 {
        self.non_finite
    }

    /// Observed minimum (`+inf` before any value).
    pub fn min(&self) -> f32 {
        self.min
    }

    /// Observed maximum (`-inf` before any value).
    pub fn max(&self) -> f32 {
        self.max
    }

    /// The `(100 - p)`-th and `p`-th percentiles (`p` in `(50, 100]`), as histogram bin
    /// edges rounded outwards and clamped to `[min, max]`. `(0, 0)` before any value.
    pub fn percentile_range(&self, p: f32) -> (f32, f32) {
        if self.count == 0 {
            return (0.0, 0.0);
        }
        if self.range == 0.0 {
            return (0.0, 0.0);
        }
        let tail = ((1.0 - f64::from(p) / 100.0).max(0.0) * self.count as f64).floor() as u64;
        let w = 2.0 * self.range / HIST_BINS as f32;
        let edge = |i: usize| -self.range + i as f32 * w;
        // Lowest bin whose cumulative count exceeds the lower tail.
        let mut cum = 0u64;
        let mut lo_bin = 0;
        for (i, &c) in self.bins.iter().enumerate() {
            cum += c;
            if cum > tail {
                lo_bin = i;
                break;
            }
        }
        // Highest bin whose cumulative count from the top exceeds the upper tail.
        let mut cum = 0u64;
        let mut hi_bin = HIST_BINS - 1;
        for (i, &c) in self.bins.iter().enumerate().rev() {
            cum += c;
            if cum > tail {
                hi_bin = i;
                break;
            }
        }
        let lo = edge(lo_bin).max(self.min);
        let hi = edge(hi_bin + 1).min(self.max);
        (lo, hi)
    }

    /// The activation parameters `method` chooses (a valid scale even with no data).
    pub fn qparams(&self, method: CalibrationMethod) -> QParams {
        match method {
            CalibrationMethod::MinMax => QParams::from_min_max(self.min, self.max),
            CalibrationMethod::Percentile(p) => {
                let (lo, hi) = self.percentile_range(p);
                QParams::from_min_max(lo, hi)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_runtime::rng::SplitMix64;

    #[test]
    fn min_max_is_exact_over_batches() {
        let mut o = ActivationObserver::new();
        o.observe(&[0.5, -0.25, 3.0]);
        o.observe(&[]);
        o.observe(&[7.75, f32::NAN, -1.5, f32::INFINITY]);
        assert_eq!(o.min(), -1.5);
        assert_eq!(o.max(), 7.75);
        assert_eq!(o.count(), 5);
        assert_eq!(o.non_finite(), 2);
        assert_eq!(
            o.qparams(CalibrationMethod::MinMax),
            QParams::from_min_max(-1.5, 7.75)
        );
        // The histogram grew to hold 7.75 and kept every value.
        assert_eq!(o.bins.iter().sum::<u64>(), 5);
        assert_eq!(o.range, 8.0);
    }

    #[test]
    fn zeros_then_values_are_all_binned() {
        let mut o = ActivationObserver::new();
        o.observe(&[0.0; 10]);
        assert_eq!(o.qparams(CalibrationMethod::Percentile(99.0)).scale, 1.0);
        o.observe(&[1.0; 10]);
        assert_eq!(o.bins.iter().sum::<u64>(), 20);
        assert_eq!(o.percentile_range(100.0), (0.0, 1.0));
    }

    #[test]
    fn percentile_of_uniform_distribution() {
        let mut o = ActivationObserver::new();
        let n = 1_000_000;
        // Fed in growing batches so the histogram range doubles several times.
        let v: Vec<f32> = (0..n).map(|i| i as f32 / n as f32 * 100.0).collect();
        for chunk in [&v[..10], &v[10..1000], &v[1000..100_000], &v[100_000..]] {
            o.observe(chunk);
        }
        let w = 2.0 * o.range / HIST_BINS as f32;
        let (lo, hi) = o.percentile_range(99.0);
        assert!((hi - 99.0).abs() <= w, "p99 {hi} (bin {w})");
        assert!((lo - 1.0).abs() <= w, "p1 {lo} (bin {w})");
        let (lo, hi) = o.percentile_range(100.0);
        assert_eq!((lo, hi), (0.0, o.max()));
    }

    #[test]
    fn percentile_ignores_rare_outliers_min_max_does_not() {
        let mut o = ActivationObserver::new();
        let mut r = SplitMix64::new(3);
        let body: Vec<f32> = (0..999_950).map(|_| r.uniform(0.0, 1.0)).collect();
        o.observe(&body);
        o.observe(&[1000.0; 50]); // 0.005 % outliers
        let mm = o.qparams(CalibrationMethod::MinMax);
        let pc = o.qparams(CalibrationMethod::Percentile(99.99));
        assert!((mm.scale - 1000.0 / 255.0).abs() < 1e-3);
        assert!(
            pc.scale < 1.01 / 255.0 * 1.01,
            "percentile scale {}",
            pc.scale
        );
        assert!(pc.scale > 0.99 / 255.0, "percentile scale {}", pc.scale);
        // Gaussian-like: the sum of 4 uniforms, p99.9 close to the known quantile.
        let mut g = ActivationObserver::new();
        let x: Vec<f32> = (0..400_000)
            .map(|_| (0..4).map(|_| r.uniform(-1.0, 1.0)).sum::<f32>())
            .collect();
        g.observe(&x);
        let (lo, hi) = g.percentile_range(99.9);
        let mut sorted = x.clone();
        sorted.sort_by(f32::total_cmp);
        let exact_hi = sorted[(0.999 * sorted.len() as f64) as usize];
        let exact_lo = sorted[(0.001 * sorted.len() as f64) as usize];
        let w = 2.0 * g.range / HIST_BINS as f32;
        assert!(
            hi >= exact_hi - w && hi <= exact_hi + 2.0 * w,
            "{hi} vs {exact_hi}"
        );
        assert!(
            lo <= exact_lo + w && lo >= exact_lo - 2.0 * w,
            "{lo} vs {exact_lo}"
        );
    }
}
