//! The comparison: figure by figure, reference vs now, with the threshold each must stay
//! under, and the table a CI log shows.
//!
//! Figures: end to end and every stage, each at P50, P99, P99.9 and max (ns), then the
//! counts: deadline misses, late publishes and frames outside the first mode (all per
//! replay), then the quality figures ([`RepFigures::quality`]: mAP, MOTA, IoU, ...; higher
//! is better), each failing when it drops by more than `quality_drop` (absolute). A
//! quality figure on one side only is not judged (a warning names it); a reference without
//! any (recorded before quality was measured) skips the quality check with a warning. See the [module docs](super) for the two methods (medians over repetitions
//! against a baseline; medians of paired ratios in A/B mode) and the threshold rule.
//!
//! A stage present on one side only is not judged and is named in the warnings, as is any
//! difference of machine kind or run setup between the two sides.

use serde::Serialize;

use super::config::{RegressConfig, Tolerance};
use super::measurement::{Figures, Measurement, RepFigures, END_TO_END};

/// What a row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Latency, ns.
    Nanoseconds,
    /// Frames per replay.
    Count,
    /// A quality score (higher is better): the threshold is the lowest passing value.
    Score,
}

/// One judged figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// e.g. `backbone p99` or `deadline misses`.
    pub figure: String,
    /// The stage, `end_to_end`, or None for counts.
    pub stage: Option<String>,
    /// Unit of `reference`, `now` and `threshold`.
    pub unit: Unit,
    /// Median over the reference replays.
    pub reference: f64,
    /// Median over the replays judged.
    pub now: f64,
    /// now / reference (baseline mode) or the median paired ratio (A/B mode); None when
    /// the reference is 0.
    pub ratio: Option<f64>,
    /// The largest passing value (the lowest for a [`Unit::Score`]; in A/B mode, shown
    /// for the reference median).
    pub threshold: f64,
    /// Within tolerance.
    pub pass: bool,
}

/// All rows of one comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// "baseline" or "a/b".
    pub method: String,
    /// Replays on the reference side.
    pub reference_reps: usize,
    /// Replays on the judged side.
    pub now_reps: usize,
    /// Every figure, end to end first.
    pub rows: Vec<Row>,
    /// Things that make the comparison questionable (different machine, config, stages).
    pub warnings: Vec<String>,
}

type Getter = Box<dyn Fn(&RepFigures) -> Option<f64>>;

/// A percentile column: its name, tolerance and how to read it from [`Figures`].
type Percentile = (&'static str, Tolerance, fn(&Figures) -> u64);

/// One figure to judge: name, stage, rule, how to read it from a replay.
type FigureSpec = (String, Option<String>, Rule, Getter);

/// How a figure is judged.
enum Rule {
    Latency(Tolerance),
    Count(f64),
    /// Allowed drop of a higher-is-better figure.
    Quality(f64),
}

fn figures_of(rep: &RepFigures, stage: &str) -> Option<Figures> {
    if stage == END_TO_END {
        return Some(rep.end_to_end);
    }
    rep.stages
        .iter()
        .find(|s| s.name == stage)
        .map(|s| s.figures)
}

/// Every figure to judge: (name, stage, rule, getter).
fn figure_list(
    stages: &[String],
    quality: &[String],
    tol: &RegressConfig,
) -> Vec<(String, Option<String>, Rule, Getter)> {
    let mut v: Vec<FigureSpec> = Vec::new();
    let mut names = vec![END_TO_END.to_string()];
    names.extend(stages.iter().cloned());
    for name in names {
        let pcts: [Percentile; 4] = [
            ("p50", tol.p50, |f| f.p50_ns),
            ("p99", tol.p99, |f| f.p99_ns),
            ("p99.9", tol.p999, |f| f.p999_ns),
            ("max", tol.max, |f| f.max_ns),
        ];
        for (pct, t, pick) in pcts {
            let stage = name.clone();
            v.push((
                format!("{name} {pct}"),
                Some(name.clone()),
                Rule::Latency(t),
                Box::new(move |r: &RepFigures| {
                    figures_of(r, &stage)
                        .filter(|f| f.count > 0)
                        .map(|f| pick(&f) as f64)
                }),
            ));
        }
    }
    v.push((
        "deadline misses".into(),
        None,
        Rule::Count(tol.deadline_misses),
        Box::new(|r: &RepFigures| Some(r.deadline_misses as f64)),
    ));
    v.push((
        "late publishes".into(),
        None,
        Rule::Count(tol.late_publishes),
        Box::new(|r: &RepFigures| Some(r.late_publishes as f64)),
    ));
    v.push((
        "frames outside nominal".into(),
        None,
        Rule::Count(tol.degraded_frames),
        Box::new(|r: &RepFigures| Some(r.degraded_frames as f64)),
    ));
    for name in quality {
        let key = name.clone();
        v.push((
            format!("quality {name}"),
            None,
            Rule::Quality(tol.quality_drop),
            Box::new(move |r: &RepFigures| r.quality.get(&key).copied().filter(|x| x.is_finite())),
        ));
    }
    v
}

/// Quality figure names of both sides, and warnings for one-sided ones (or a reference
/// without quality figures at all).
fn quality_and_warnings(reference: &Measurement, now: &Measurement) -> (Vec<String>, Vec<String>) {
    let names = |m: &Measurement| -> std::collections::BTreeSet<String> {
        m.reps
            .iter()
            .flat_map(|r| r.quality.keys().cloned())
            .collect()
    };
    let (rn, nn) = (names(reference), names(now));
    let mut warnings = Vec::new();
    if rn.is_empty() && !nn.is_empty() {
        warnings.push(
            "the reference has no quality figures (recorded before quality was measured): quality not judged; re-record it (--update-baseline) to judge mAP, MOTA, IoU too"
                .to_string(),
        );
        return (Vec::new(), warnings);
    }
    for n in rn.symmetric_difference(&nn) {
        let side = if rn.contains(n) {
            "reference"
        } else {
            "this run"
        };
        warnings.push(format!(
            "quality figure '{n}' only in the {side}: not judged"
        ));
    }
    (rn.intersection(&nn).cloned().collect(), warnings)
}

/// Median of `v` (mean of the middle two for an even count); 0 for none.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Stage names of both sides (reference order first), and warnings for one-sided ones.
fn stages_and_warnings(reference: &Measurement, now: &Measurement) -> (Vec<String>, Vec<String>) {
    let rs = reference.stage_names();
    let ns = now.stage_names();
    let mut warnings = Vec::new();
    let mut both = Vec::new();
    for s in &rs {
        if ns.contains(s) {
            both.push(s.clone());
        } else {
            warnings.push(format!(
                "stage '{s}' is in the reference but not in this run: not judged"
            ));
        }
    }
    for s in &ns {
        if !rs.contains(s) {
            warnings.push(format!(
                "stage '{s}' is not in the reference: not judged (re-record the baseline to include it)"
            ));
        }
    }
    for rm in &reference.machines {
        for nm in &now.machines {
            if !rm.same_kind(nm) {
                warnings.push(format!(
                    "DIFFERENT MACHINE: the reference was measured on {}, this run on {}: latencies are not comparable across machines; record the baseline on the machine kind that runs the check",
                    rm.describe(),
                    nm.describe()
                ));
            }
        }
    }
    // Setups are matched as sets (a measurement pooling several logs has one per log): a
    // setup of this run with no identical one in the reference is compared with the
    // reference's setup of the same source (else its first); a source only the reference
    // measured is named.
    for nsu in &now.setups {
        if reference
            .setups
            .iter()
            .any(|r| r.differences(nsu).is_empty())
        {
            continue;
        }
        let closest = reference
            .setups
            .iter()
            .find(|r| r.source == nsu.source)
            .or(reference.setups.first());
        if let Some(rsu) = closest {
            warnings.push(format!(
                "DIFFERENT SETUP: the reference and this run differ in {}",
                rsu.differences(nsu).join("; ")
            ));
        }
    }
    for rsu in &reference.setups {
        if !now.setups.iter().any(|n| n.source == rsu.source) {
            warnings.push(format!(
                "DIFFERENT SETUP: the reference measured {}, this run did not",
                rsu.source
            ));
        }
    }
    (both, warnings)
}

fn ratio(now: f64, reference: f64) -> Option<f64> {
    (reference > 0.0).then(|| now / reference)
}

impl Verdict {
    /// Baseline mode: medians over the replays of each side.
    pub fn against_baseline(
        baseline: &Measurement,
        now: &Measurement,
        tol: &RegressConfig,
    ) -> Verdict {
        let (stages, mut warnings) = stages_and_warnings(baseline, now);
        let (quality, qw) = quality_and_warnings(baseline, now);
        warnings.extend(qw);
        let rows = figure_list(&stages, &quality, tol)
            .into_iter()
            .filter_map(|(figure, stage, rule, get)| {
                let r: Vec<f64> = baseline.reps.iter().filter_map(&get).collect();
                let n: Vec<f64> = now.reps.iter().filter_map(&get).collect();
                if r.is_empty() || n.is_empty() {
                    return None;
                }
                let (reference, now) = (median(&r), median(&n));
                let (unit, threshold) = match rule {
                    Rule::Latency(t) => (Unit::Nanoseconds, t.threshold(reference)),
                    Rule::Count(extra) => (Unit::Count, reference + extra),
                    Rule::Quality(drop) => (Unit::Score, reference - drop),
                };
                let pass = match unit {
                    Unit::Score => now >= threshold,
                    _ => now <= threshold,
                };
                Some(Row {
                    figure,
                    stage,
                    unit,
                    reference,
                    now,
                    ratio: ratio(now, reference),
                    threshold,
                    pass,
                })
            })
            .collect();
        Verdict {
            method: "baseline".into(),
            reference_reps: baseline.reps.len(),
            now_reps: now.reps.len(),
            rows,
            warnings,
        }
    }

    /// A/B mode: replay i of `candidate` is paired with replay i of `reference` (they ran
    /// back to back); a latency fails when the median paired ratio exceeds
    /// `1 + relative` and the median paired difference exceeds the floor; a count fails
    /// when the median paired difference exceeds the allowed extra.
    pub fn paired(
        reference: &Measurement,
        candidate: &Measurement,
        tol: &RegressConfig,
    ) -> Verdict {
        let (stages, mut warnings) = stages_and_warnings(reference, candidate);
        let (quality, qw) = quality_and_warnings(reference, candidate);
        warnings.extend(qw);
        let pairs = reference.reps.len().min(candidate.reps.len());
        if reference.reps.len() != candidate.reps.len() {
            warnings.push(format!(
                "{} reference and {} candidate replays: only the first {pairs} pairs are judged",
                reference.reps.len(),
                candidate.reps.len()
            ));
        }
        let rows = figure_list(&stages, &quality, tol)
            .into_iter()
            .filter_map(|(figure, stage, rule, get)| {
                let mut r = Vec::new();
                let mut c = Vec::new();
                let mut ratios = Vec::new();
                let mut diffs = Vec::new();
                for i in 0..pairs {
                    if let (Some(a), Some(b)) = (get(&reference.reps[i]), get(&candidate.reps[i])) {
                        r.push(a);
                        c.push(b);
                        diffs.push(b - a);
                        ratios.push(if a > 0.0 {
                            b / a
                        } else if b > 0.0 {
                            f64::INFINITY
                        } else {
                            1.0
                        });
                    }
                }
                if r.is_empty() {
                    return None;
                }
                let (reference, now) = (median(&r), median(&c));
                let (mr, md) = (median(&ratios), median(&diffs));
                let (unit, threshold, pass) = match rule {
                    Rule::Latency(t) => (
                        Unit::Nanoseconds,
                        t.threshold(reference),
                        !(mr > 1.0 + t.relative && md > t.floor_us * 1e3),
                    ),
                    Rule::Count(extra) => (Unit::Count, reference + extra, md <= extra),
                    Rule::Quality(drop) => (Unit::Score, reference - drop, md >= -drop),
                };
                Some(Row {
                    figure,
                    stage,
                    unit,
                    reference,
                    now,
                    ratio: (reference > 0.0).then_some(mr),
                    threshold,
                    pass,
                })
            })
            .collect();
        Verdict {
            method: "a/b".into(),
            reference_reps: reference.reps.len(),
            now_reps: candidate.reps.len(),
            rows,
            warnings,
        }
    }

    /// No figure failed.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.pass)
    }

    /// The failing rows.
    pub fn failures(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| !r.pass)
    }

    /// The verdict table: figure, reference, now, ratio, threshold, pass/FAIL.
    pub fn table(&self) -> String {
        let (ref_name, now_name) = if self.method == "a/b" {
            ("reference", "candidate")
        } else {
            ("baseline", "now")
        };
        let mut out = format!(
            "{:<30} {:>12} {:>12} {:>8} {:>12}  {}\n",
            "figure", ref_name, now_name, "ratio", "threshold", "verdict"
        );
        for r in &self.rows {
            let v = |x: f64| match r.unit {
                Unit::Nanoseconds => format!("{:.3} ms", x / 1e6),
                Unit::Count => format!("{x:.1}"),
                Unit::Score => format!("{x:.4}"),
            };
            out.push_str(&format!(
                "{:<30} {:>12} {:>12} {:>8} {:>12}  {}\n",
                r.figure,
                v(r.reference),
                v(r.now),
                r.ratio.map_or("-".to_string(), |x| format!("{x:.3}")),
                v(r.threshold),
                if r.pass { "pass" } else { "FAIL" }
            ));
        }
        out
    }

    /// One line per failure (or one PASS line), for the end of a CI log.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .warnings
            .iter()
            .map(|w| format!("WARNING: {w}"))
            .collect();
        let fails: Vec<&Row> = self.failures().collect();
        let how = if self.method == "a/b" {
            format!(
                "median of {} paired ratios",
                self.reference_reps.min(self.now_reps)
            )
        } else {
            format!(
                "medians of {} replays vs {} baseline replays",
                self.now_reps, self.reference_reps
            )
        };
        if fails.is_empty() {
            v.push(format!(
                "PASS: all {} figures within tolerance ({how})",
                self.rows.len()
            ));
        } else {
            v.push(format!(
                "REGRESSION: {} of {} figures worse than allowed ({how}):",
                fails.len(),
                self.rows.len()
            ));
            for r in fails {
                let what = match r.unit {
                    Unit::Nanoseconds => format!(
                        "{:.3} ms -> {:.3} ms{} (allowed up to {:.3} ms)",
                        r.reference / 1e6,
                        r.now / 1e6,
                        r.ratio
                            .map_or(String::new(), |x| format!(", {:+.1}%", (x - 1.0) * 100.0)),
                        r.threshold / 1e6
                    ),
                    Unit::Count => format!(
                        "{:.1} -> {:.1} per replay (allowed up to {:.1})",
                        r.reference, r.now, r.threshold
                    ),
                    Unit::Score => format!(
                        "{:.4} -> {:.4} (allowed down to {:.4})",
                        r.reference, r.now, r.threshold
                    ),
                };
                v.push(format!("  {}: {what}", r.figure));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regress::measurement::{StageFigures, FORMAT};
    use crate::regress::setup::MachineInfo;
    use std::collections::BTreeMap;

    fn figs(p50: u64) -> Figures {
        Figures {
            count: 300,
            p50_ns: p50,
            p99_ns: p50 * 12 / 10,
            p999_ns: p50 * 14 / 10,
            max_ns: p50 * 15 / 10,
        }
    }

    /// Replays with stage `backbone` at `backbone_ns` and `tracking` at 250 µs, each
    /// replay scaled by one of `noise` (multiplicative jitter).
    fn meas(backbone_ns: u64, noise: &[f64], misses: u64) -> Measurement {
        let reps = noise
            .iter()
            .map(|&k| {
                let s = |ns: u64| figs((ns as f64 * k) as u64);
                RepFigures {
                    label: "x".into(),
                    started_unix_ms: 0,
                    wall_ms: 1.0,
                    frames: 300,
                    end_to_end: s(backbone_ns + 2_000_000),
                    stages: vec![
                        StageFigures {
                            name: "backbone".into(),
                            figures: s(backbone_ns),
                        },
                        StageFigures {
                            name: "tracking".into(),
                            figures: s(250_000),
                        },
                    ],
                    deadline_misses: misses,
                    late_publishes: 0,
                    degraded_frames: 0,
                    mode_frames: BTreeMap::new(),
                    quality: BTreeMap::new(),
                }
            })
            .collect();
        Measurement {
            format: FORMAT.into(),
            created_unix_s: 0,
            machines: vec![MachineInfo::detect()],
            setups: vec![],
            reps,
            histograms: vec![],
            timeline: None,
        }
    }

    const NOISE: [f64; 5] = [1.0, 1.03, 0.98, 1.6, 1.01];

    #[test]
    fn same_figures_pass() {
        let tol = RegressConfig::default();
        let v =
            Verdict::against_baseline(&meas(850_000, &NOISE, 0), &meas(850_000, &NOISE, 0), &tol);
        assert!(v.passed(), "{}", v.table());
        assert_eq!(v.rows.len(), 3 * 4 + 3);
        assert!(v.summary_lines().last().unwrap().starts_with("PASS"));
        let v = Verdict::paired(&meas(850_000, &NOISE, 0), &meas(850_000, &NOISE, 0), &tol);
        assert!(v.passed(), "{}", v.table());
    }

    #[test]
    fn one_noisy_replay_does_not_decide() {
        // One replay of five 60 % slower (a disturbed machine): medians ignore it.
        let tol = RegressConfig::default();
        let quiet = [1.0, 1.01, 0.99, 1.0, 1.02];
        let v =
            Verdict::against_baseline(&meas(850_000, &quiet, 0), &meas(850_000, &NOISE, 0), &tol);
        assert!(v.passed(), "{}", v.table());
    }

    #[test]
    fn a_twenty_percent_slower_stage_fails_by_name() {
        let tol = RegressConfig::default();
        let base = meas(850_000, &NOISE, 0);
        let slow = meas(1_020_000, &NOISE, 0);
        for v in [
            Verdict::against_baseline(&base, &slow, &tol),
            Verdict::paired(&base, &slow, &tol),
        ] {
            assert!(!v.passed());
            let failed: Vec<&str> = v.failures().map(|r| r.figure.as_str()).collect();
            assert!(failed.contains(&"backbone p50"), "{failed:?}");
            assert!(
                v.failures().all(|r| r.stage.as_deref() != Some("tracking")),
                "{failed:?}"
            );
            let s = v.summary_lines().join("\n");
            assert!(
                s.contains("REGRESSION")
                    && s.contains("backbone p50: 0.859 ms -> 1.030 ms, +20.0%"),
                "{s}"
            );
            assert!(v.table().contains("FAIL"));
        }
    }

    #[test]
    fn floors_absorb_tiny_absolute_changes() {
        // A 5 µs stage doubling is 5 µs: under the 20 µs P50 floor.
        let tol = RegressConfig::default();
        let v = Verdict::against_baseline(&meas(5_000, &NOISE, 0), &meas(10_000, &NOISE, 0), &tol);
        assert!(
            v.failures().all(|r| r.stage.as_deref() != Some("backbone")),
            "{}",
            v.table()
        );
    }

    #[test]
    fn more_misses_fail() {
        let tol = RegressConfig::default();
        let v =
            Verdict::against_baseline(&meas(850_000, &NOISE, 0), &meas(850_000, &NOISE, 2), &tol);
        let failed: Vec<&str> = v.failures().map(|r| r.figure.as_str()).collect();
        assert_eq!(failed, ["deadline misses"]);
        let v = Verdict::paired(&meas(850_000, &NOISE, 0), &meas(850_000, &NOISE, 2), &tol);
        let failed: Vec<&str> = v.failures().map(|r| r.figure.as_str()).collect();
        assert_eq!(failed, ["deadline misses"]);
    }

    #[test]
    fn one_sided_stages_and_other_machines_are_warned_about() {
        let tol = RegressConfig::default();
        let base = meas(850_000, &NOISE, 0);
        let mut now = meas(850_000, &NOISE, 0);
        for r in &mut now.reps {
            r.stages[1].name = "oracle".into();
        }
        now.machines[0].cpu = "Some Other CPU".into();
        let v = Verdict::against_baseline(&base, &now, &tol);
        let w = v.warnings.join("\n");
        assert!(
            w.contains("stage 'tracking' is in the reference but not in this run"),
            "{w}"
        );
        assert!(w.contains("stage 'oracle' is not in the reference"), "{w}");
        assert!(
            w.contains("DIFFERENT MACHINE") && w.contains("Some Other CPU"),
            "{w}"
        );
        assert!(v.rows.iter().all(|r| r.stage.as_deref() != Some("oracle")));
    }

    fn with_quality(mut m: Measurement, q: &[(&str, f64)]) -> Measurement {
        for r in &mut m.reps {
            r.quality = q.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        }
        m
    }

    #[test]
    fn a_quality_drop_fails_like_a_latency_regression() {
        let tol = RegressConfig::default();
        let base = with_quality(meas(850_000, &NOISE, 0), &[("map", 0.60), ("mota", 0.90)]);
        // Within the drop (0.02): pass; a rise always passes.
        let ok = with_quality(meas(850_000, &NOISE, 0), &[("map", 0.585), ("mota", 0.95)]);
        let v = Verdict::against_baseline(&base, &ok, &tol);
        assert!(v.passed(), "{}", v.table());
        assert_eq!(v.rows.len(), 3 * 4 + 3 + 2);
        // MOTA 0.90 -> 0.85: fails by name, in both methods.
        let bad = with_quality(meas(850_000, &NOISE, 0), &[("map", 0.60), ("mota", 0.85)]);
        for v in [
            Verdict::against_baseline(&base, &bad, &tol),
            Verdict::paired(&base, &bad, &tol),
        ] {
            let fails: Vec<&str> = v.failures().map(|r| r.figure.as_str()).collect();
            assert_eq!(fails, ["quality mota"], "{}", v.table());
            let row = v.failures().next().unwrap();
            assert_eq!(row.unit, Unit::Score);
            assert!((row.threshold - 0.88).abs() < 1e-12);
            let lines = v.summary_lines().join("\n");
            assert!(lines.contains("REGRESSION") && lines.contains("allowed down to 0.8800"));
        }
    }

    #[test]
    fn an_old_reference_without_quality_skips_the_check_with_a_note() {
        let tol = RegressConfig::default();
        let old = meas(850_000, &NOISE, 0);
        let now = with_quality(meas(850_000, &NOISE, 0), &[("map", 0.0)]);
        let v = Verdict::against_baseline(&old, &now, &tol);
        assert!(v.passed());
        assert_eq!(v.rows.len(), 3 * 4 + 3);
        assert!(
            v.warnings.iter().any(|w| w.contains("no quality figures")),
            "{:?}",
            v.warnings
        );
        // An old measurement file (no "quality" key) still loads.
        let mut json = serde_json::to_value(&old).unwrap();
        assert!(json["reps"][0].get("quality").is_none());
        json["reps"][0].as_object_mut().unwrap().remove("quality");
        let back: Measurement = serde_json::from_value(json).unwrap();
        assert!(back.reps[0].quality.is_empty());
        // One-sided figures are named, not judged.
        let a = with_quality(meas(850_000, &NOISE, 0), &[("map", 0.5), ("ap.car", 0.4)]);
        let b = with_quality(meas(850_000, &NOISE, 0), &[("map", 0.5)]);
        let v = Verdict::against_baseline(&a, &b, &tol);
        assert!(v.passed());
        assert!(v
            .warnings
            .iter()
            .any(|w| w.contains("'ap.car' only in the reference")));
    }

    #[test]
    fn median_is_the_middle() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
