//! A regression run's output directory: the measurements, the verdict, the interval log
//! and the plots (see [`write_outputs`] for the file list).
//!
//! Contract: writes only inside the directory it is given (created if missing), returns
//! every file it wrote, and stops at the first file it cannot write, naming it. Runs after
//! the replays: it allocates, decodes histograms and writes files.

use std::path::{Path, PathBuf};

use redline_runtime::metrics::LatencyHistogram;

use super::hlog::{write_hlog, Interval};
use super::measurement::{Measurement, MeasurementError, END_TO_END};
use super::plot::percentile::{percentile_svg, Series};
use super::plot::timeline::{timeline_svg, ModeMark};
use super::verdict::Verdict;

/// What goes into a regression run's output directory.
#[derive(Debug)]
pub struct Outputs<'a> {
    /// The directory (created).
    pub dir: &'a Path,
    /// Label of the judged side ("now", "candidate", "baseline").
    pub now_label: &'a str,
    /// Its replays, one measurement each.
    pub now_reps: &'a [Measurement],
    /// The same replays merged ([`Measurement::merge`]).
    pub now: &'a Measurement,
    /// Label, replays (may be empty: a stored baseline) and merged measurement of the
    /// reference side, if any.
    pub reference: Option<(&'a str, &'a [Measurement], &'a Measurement)>,
    /// The comparison, if any.
    pub verdict: Option<&'a Verdict>,
}

/// Could not write an output.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file or the directory could not be written.
    #[error("cannot write {path}: {cause}")]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        cause: std::io::Error,
    },
    /// A measurement file could not be written (the error names it).
    #[error(transparent)]
    Measurement(#[from] MeasurementError),
}

/// Writes the output directory and returns the files written:
///
/// - `measurement.json`: the judged replays merged (the format of a baseline; feed it to
///   `redline report merge` or `--baseline`), with the last replay's timeline;
/// - `reference.json` (A/B mode): the reference build's replays merged;
/// - `verdict.txt`, `verdict.json`: the table and every row;
/// - `latency.hlog`: HdrHistogram interval log, one interval per replay and histogram;
/// - `percentiles_<name>.svg`: percentile distribution of `end_to_end` and each stage,
///   reference and now overlaid, with the deadline or the stage's budget;
/// - `timeline.svg`: end-to-end latency per frame of the last replay, deadline, mode
///   changes.
pub fn write_outputs(o: &Outputs<'_>) -> Result<Vec<PathBuf>, OutputError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |cause: std::io::Error| OutputError::Write { path, cause }
    };
    std::fs::create_dir_all(o.dir).map_err(err(o.dir))?;
    let mut written = Vec::new();
    let now = o.now;
    let save = |m: &Measurement, name: &str, written: &mut Vec<PathBuf>| {
        let p = o.dir.join(name);
        m.save(&p)?;
        written.push(p);
        Ok::<(), OutputError>(())
    };
    save(now, "measurement.json", &mut written)?;
    if let Some((_, reps, merged)) = o.reference {
        if !reps.is_empty() {
            save(merged, "reference.json", &mut written)?;
        }
    }
    if let Some(v) = o.verdict {
        let p = o.dir.join("verdict.txt");
        let text = format!("{}{}\n", v.table(), v.summary_lines().join("\n"));
        std::fs::write(&p, text).map_err(err(&p))?;
        written.push(p);
        let p = o.dir.join("verdict.json");
        let json = serde_json::to_string_pretty(v).map_err(|e| OutputError::Write {
            path: p.clone(),
            cause: std::io::Error::other(e),
        })?;
        std::fs::write(&p, json + "\n").map_err(err(&p))?;
        written.push(p);
    }

    // Interval log: every replay of both sides.
    let mut decoded: Vec<(String, u64, f64, LatencyHistogram)> = Vec::new();
    let mut sides: Vec<(&str, &[Measurement])> = vec![(o.now_label, o.now_reps)];
    if let Some((label, reps, _)) = o.reference {
        sides.push((label, reps));
    }
    let prefix_tags = o.reference.is_some_and(|(_, reps, _)| !reps.is_empty());
    for (label, reps) in sides {
        for m in reps {
            let Some(rep) = m.reps.first() else { continue };
            for e in &m.histograms {
                if let Ok(h) = e.decode() {
                    let tag = if prefix_tags {
                        format!("{label}.{}", e.name)
                    } else {
                        e.name.clone()
                    };
                    decoded.push((tag, rep.started_unix_ms, rep.wall_ms, h));
                }
            }
        }
    }
    let mut intervals: Vec<Interval<'_>> = decoded
        .iter()
        .map(|(tag, start, wall, h)| Interval {
            tag: tag.clone(),
            start_unix_ms: *start,
            duration_ms: *wall,
            hist: h,
        })
        .collect();
    let p = o.dir.join("latency.hlog");
    write_hlog(
        &p,
        &mut intervals,
        "redline regress: one interval per replay and histogram (tag = histogram)",
    )
    .map_err(err(&p))?;
    written.push(p);

    // Percentile plots, reference and now overlaid.
    let setup = now.setups.first();
    let mut names = vec![END_TO_END.to_string()];
    names.extend(now.stage_names());
    for name in &names {
        let mut owned: Vec<(String, LatencyHistogram)> = Vec::new();
        if let Some((label, _, merged)) = o.reference {
            if let Some(Ok(h)) = merged.histogram(name) {
                owned.push((label.to_string(), h));
            }
        }
        if let Some(Ok(h)) = now.histogram(name) {
            owned.push((o.now_label.to_string(), h));
        }
        let series: Vec<Series<'_>> = owned
            .iter()
            .map(|(label, hist)| Series { label, hist })
            .collect();
        let limit = setup.and_then(|s| {
            if name == END_TO_END {
                Some(("deadline", s.deadline_ns))
            } else {
                s.budgets_ns
                    .get(name)
                    .filter(|&&b| b > 0)
                    .map(|&b| ("budget", b))
            }
        });
        let svg = percentile_svg(&format!("{name}: latency by percentile"), &series, limit);
        let p = o.dir.join(format!("percentiles_{name}.svg"));
        std::fs::write(&p, svg).map_err(err(&p))?;
        written.push(p);
    }
    if let Some(t) = &now.timeline {
        let marks: Vec<ModeMark> = t
            .mode_changes
            .iter()
            .map(|(after_frame, label)| ModeMark {
                after_frame: *after_frame,
                label: label.clone(),
            })
            .collect();
        let svg = timeline_svg(
            &format!("end to end per frame ({}, last replay)", o.now_label),
            &t.frames,
            t.deadline_ns,
            &marks,
        );
        let p = o.dir.join("timeline.svg");
        std::fs::write(&p, svg).map_err(err(&p))?;
        written.push(p);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::regress::config::RegressConfig;
    use crate::regress::histogram::EncodedHistogram;
    use crate::regress::measurement::{Figures, RepFigures, StageFigures, Timeline, FORMAT};
    use crate::regress::setup::MachineInfo;

    /// One replay whose end to end and `backbone` hold 10, 20, ... `10 n` µs.
    fn replay(label: &str, n: u64, started_unix_ms: u64) -> Measurement {
        let mut h = LatencyHistogram::new();
        (1..=n).for_each(|i| h.record(i * 10_000));
        let figures = Figures::from(&h.summary());
        Measurement {
            format: FORMAT.into(),
            created_unix_s: 1,
            machines: vec![MachineInfo::detect()],
            setups: vec![],
            reps: vec![RepFigures {
                label: label.into(),
                started_unix_ms,
                wall_ms: 500.0,
                frames: n,
                end_to_end: figures,
                stages: vec![StageFigures {
                    name: "backbone".into(),
                    figures,
                }],
                deadline_misses: 0,
                late_publishes: 0,
                degraded_frames: 0,
                mode_frames: BTreeMap::new(),
                quality: BTreeMap::new(),
            }],
            histograms: vec![
                EncodedHistogram::encode(END_TO_END, &h),
                EncodedHistogram::encode("backbone", &h),
            ],
            timeline: Some(Timeline {
                deadline_ns: 33_333_333,
                frames: vec![],
                mode_changes: vec![],
            }),
        }
    }

    #[test]
    fn the_output_directory_holds_every_file_it_lists() {
        let dir = std::env::temp_dir().join(format!("redline-outputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let refs = [
            replay("reference", 100, 1_000),
            replay("reference", 100, 3_000),
        ];
        let cands = [
            replay("candidate", 200, 2_000),
            replay("candidate", 200, 4_000),
        ];
        let (r, c) = (
            Measurement::merge(&refs).unwrap(),
            Measurement::merge(&cands).unwrap(),
        );
        let verdict = Verdict::paired(&r, &c, &RegressConfig::default());
        let written = write_outputs(&Outputs {
            dir: &dir,
            now_label: "candidate",
            now_reps: &cands,
            now: &c,
            reference: Some(("reference", &refs, &r)),
            verdict: Some(&verdict),
        })
        .unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "measurement.json",
                "reference.json",
                "verdict.txt",
                "verdict.json",
                "latency.hlog",
                "percentiles_end_to_end.svg",
                "percentiles_backbone.svg",
                "timeline.svg",
            ]
        );
        assert!(written.iter().all(|p| p.is_file() && p.starts_with(&dir)));
        assert_eq!(Measurement::load(&written[0]).unwrap(), c);
        let table = std::fs::read_to_string(&written[2]).unwrap();
        assert!(
            table.contains("REGRESSION") && table.contains("backbone p50"),
            "{table}"
        );
        // Both sides' replays in the interval log, tagged by side.
        let hlog = std::fs::read_to_string(&written[4]).unwrap();
        assert_eq!(hlog.matches("Tag=reference.").count(), 4, "{hlog}");
        assert_eq!(hlog.matches("Tag=candidate.").count(), 4, "{hlog}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_unwritable_directory_is_named() {
        let m = replay("now", 10, 1);
        let e = write_outputs(&Outputs {
            dir: Path::new("/proc/redline-cannot-write-here"),
            now_label: "now",
            now_reps: std::slice::from_ref(&m),
            now: &m,
            reference: None,
            verdict: None,
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot write /proc/redline-cannot-write-here"),
            "{e}"
        );
    }
}
