//! The measurement file: what `redline regress` measured, as JSON. The same format is a
//! baseline (`--update-baseline`), the `measurement.json` of a regression run's output
//! directory, a worker's answer in A/B mode, and the input and output of
//! `redline report merge`.
//!
//! Contract:
//! - human-diffable: per-repetition figures in nanoseconds, one field per line, stage by
//!   stage in plan order; the machine(s) and run setup(s) it was measured on;
//! - lossless: the histograms (end to end and per stage, all repetitions added) are kept
//!   whole, as HdrHistogram V2 deflate encodings in base64 (the encoding HdrHistogram's own
//!   tools read), so merged reports add histograms, never average percentiles;
//! - checked on load: a file that is not JSON, of another format, without repetitions or
//!   with a corrupt histogram is refused with a message that names the file and says how to
//!   regenerate it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redline_runtime::metrics::{LatencyHistogram, LatencySummary};
use serde::{Deserialize, Serialize};

use super::histogram::{EncodedHistogram, HistogramError};
use super::setup::{MachineInfo, RunSetup};

/// The `format` field of every measurement file this version writes and reads.
pub const FORMAT: &str = "redline-latency-measurement/1";

/// Name of the end-to-end histogram and figures (stages use their own names).
pub const END_TO_END: &str = "end_to_end";

/// Percentiles of one histogram in one replay, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Maximum.
    pub max_ns: u64,
}

impl From<&LatencySummary> for Figures {
    fn from(s: &LatencySummary) -> Self {
        Figures {
            count: s.count,
            p50_ns: s.p50_ns,
            p99_ns: s.p99_ns,
            p999_ns: s.p999_ns,
            max_ns: s.max_ns,
        }
    }
}

/// One stage's figures in one replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageFigures {
    /// Stage name.
    pub name: String,
    /// Execution time of `run`.
    #[serde(flatten)]
    pub figures: Figures,
}

/// Everything one replay measured (after its warm-up).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepFigures {
    /// Which build/side it belongs to ("baseline", "reference", "candidate", ...).
    pub label: String,
    /// Start, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Wall time of the measured frames, ms.
    pub wall_ms: f64,
    /// Frames published while measuring.
    pub frames: u64,
    /// Release → publish.
    pub end_to_end: Figures,
    /// Execution time per stage, plan order.
    pub stages: Vec<StageFigures>,
    /// Frames published as frame fallbacks.
    pub deadline_misses: u64,
    /// Frames published after their deadline.
    pub late_publishes: u64,
    /// Frames run outside the first (nominal) mode.
    pub degraded_frames: u64,
    /// Frames per mode.
    pub mode_frames: BTreeMap<String, u64>,
    /// Quality figures of the replay against ground truth, by name, each "higher is
    /// better" (e.g. `map`, `mota`, `seg_iou.drivable`; what the caller measured). Empty
    /// when none were measured, and in measurements written before quality was recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quality: BTreeMap<String, f64>,
}

/// One frame of a timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineFrame {
    /// Frame number.
    pub frame: u64,
    /// Release → publish, ns.
    pub latency_ns: u64,
    /// Published as a frame fallback.
    pub fallback: bool,
}

/// One replay frame by frame, for the timeline plot (not kept in baselines).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Deadline after release, ns.
    pub deadline_ns: u64,
    /// Every measured frame.
    pub frames: Vec<TimelineFrame>,
    /// Mode changes: (after frame, "from → to: reason").
    pub mode_changes: Vec<(u64, String)>,
}

/// A set of replays of one log: per-replay figures and the histograms of all of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Always [`FORMAT`].
    pub format: String,
    /// When written, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Machines measured on (more than one after merging reports of several machines).
    pub machines: Vec<MachineInfo>,
    /// Run setups (more than one after merging different setups).
    pub setups: Vec<RunSetup>,
    /// Every replay.
    pub reps: Vec<RepFigures>,
    /// End to end first, then each stage in plan order; every replay added.
    pub histograms: Vec<EncodedHistogram>,
    /// The last replay frame by frame (output directories only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

/// A measurement (or baseline) file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MeasurementError {
    /// Missing or unreadable.
    #[error("cannot read {path}: {cause}{hint}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        cause: std::io::Error,
        /// What to do (for a missing baseline: how to create one).
        hint: String,
    },
    /// Not JSON, or JSON of another shape.
    #[error("{path} is not a redline measurement: {message}. Regenerate it with `redline regress LOG --baseline {path} --update-baseline`")]
    Parse {
        /// File.
        path: PathBuf,
        /// What serde said (line and column).
        message: String,
    },
    /// JSON of another format or version.
    #[error("{path} has format '{found}', this redline reads '{FORMAT}'. Regenerate it with `redline regress LOG --baseline {path} --update-baseline`")]
    Format {
        /// File.
        path: PathBuf,
        /// The format it claims.
        found: String,
    },
    /// No replay in it.
    #[error("{path} holds no replay: nothing to compare with. Regenerate it with `redline regress LOG --baseline {path} --update-baseline`")]
    Empty {
        /// File.
        path: PathBuf,
    },
    /// A histogram does not decode.
    #[error("{path}: histogram '{name}' is corrupt ({why}). Regenerate the file")]
    Histogram {
        /// File.
        path: PathBuf,
        /// Histogram name.
        name: String,
        /// What is wrong.
        why: HistogramError,
    },
    /// Writing failed.
    #[error("cannot write {path}: {cause}")]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        cause: std::io::Error,
    },
    /// Nothing to merge.
    #[error("nothing to merge: give at least one measurement file")]
    NothingToMerge,
}

impl Measurement {
    /// Reads and checks a measurement file.
    pub fn load(path: &Path) -> Result<Measurement, MeasurementError> {
        let text = std::fs::read_to_string(path).map_err(|cause| MeasurementError::Read {
            path: path.to_path_buf(),
            hint: if cause.kind() == std::io::ErrorKind::NotFound {
                format!(
                    ". Create it on the reference build with `redline regress LOG --baseline {} --update-baseline`",
                    path.display()
                )
            } else {
                String::new()
            },
            cause,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks measurement JSON (`path` names it in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Measurement, MeasurementError> {
        // Read the format first, so a file of another version is named as such rather than
        // failing on whichever field changed.
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| MeasurementError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(MeasurementError::Format {
                    path: path.to_path_buf(),
                    found: other.to_string(),
                })
            }
            None => {
                return Err(MeasurementError::Parse {
                    path: path.to_path_buf(),
                    message: "no \"format\" field".into(),
                })
            }
        }
        let m: Measurement =
            serde_json::from_value(value).map_err(|e| MeasurementError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        if m.reps.is_empty() {
            return Err(MeasurementError::Empty {
                path: path.to_path_buf(),
            });
        }
        for h in &m.histograms {
            h.decode().map_err(|why| MeasurementError::Histogram {
                path: path.to_path_buf(),
                name: h.name.clone(),
                why,
            })?;
        }
        Ok(m)
    }

    /// Writes the measurement as pretty JSON (creating the parent directory).
    pub fn save(&self, path: &Path) -> Result<(), MeasurementError> {
        let write = |cause| MeasurementError::Write {
            path: path.to_path_buf(),
            cause,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(write)?;
        }
        let json =
            serde_json::to_string_pretty(self).map_err(|e| write(std::io::Error::other(e)))?;
        std::fs::write(path, json + "\n").map_err(write)
    }

    /// The decoded histogram called `name` (`end_to_end` or a stage), if present.
    pub fn histogram(&self, name: &str) -> Option<Result<LatencyHistogram, HistogramError>> {
        self.histograms
            .iter()
            .find(|h| h.name == name)
            .map(|h| h.decode())
    }

    /// Stage names in the order of the first replay.
    pub fn stage_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for r in &self.reps {
            for s in &r.stages {
                if !names.contains(&s.name) {
                    names.push(s.name.clone());
                }
            }
        }
        names
    }

    /// Merges measurements losslessly: replays concatenated, histograms of the same name
    /// added (counts summed bucket by bucket), machines and setups listed once each. The
    /// timeline of the last input that has one is kept.
    pub fn merge(parts: &[Measurement]) -> Result<Measurement, MeasurementError> {
        let first = parts.first().ok_or(MeasurementError::NothingToMerge)?;
        let mut out = Measurement {
            format: FORMAT.into(),
            created_unix_s: first.created_unix_s,
            machines: Vec::new(),
            setups: Vec::new(),
            reps: Vec::new(),
            histograms: Vec::new(),
            timeline: None,
        };
        let mut hists: Vec<(String, LatencyHistogram)> = Vec::new();
        for (i, m) in parts.iter().enumerate() {
            out.created_unix_s = out.created_unix_s.max(m.created_unix_s);
            for mi in &m.machines {
                if !out.machines.contains(mi) {
                    out.machines.push(mi.clone());
                }
            }
            for s in &m.setups {
                if !out.setups.contains(s) {
                    out.setups.push(s.clone());
                }
            }
            out.reps.extend(m.reps.iter().cloned());
            for e in &m.histograms {
                let h = e.decode().map_err(|why| MeasurementError::Histogram {
                    path: PathBuf::from(format!("input #{}", i + 1)),
                    name: e.name.clone(),
                    why,
                })?;
                match hists.iter_mut().find(|(n, _)| *n == e.name) {
                    Some((_, acc)) => acc.add(&h),
                    None => hists.push((e.name.clone(), h)),
                }
            }
            if m.timeline.is_some() {
                out.timeline = m.timeline.clone();
            }
        }
        out.histograms = hists
            .iter()
            .map(|(n, h)| EncodedHistogram::encode(n, h))
            .collect();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small measurement with `reps` replays whose end-to-end values are `values`.
    fn sample(values: &[u64], stage_values: &[u64]) -> Measurement {
        let mut e2e = LatencyHistogram::new();
        values.iter().for_each(|&v| e2e.record(v));
        let mut st = LatencyHistogram::new();
        stage_values.iter().for_each(|&v| st.record(v));
        let rep = RepFigures {
            label: "baseline".into(),
            started_unix_ms: 1,
            // Not exactly representable: the JSON round trip must still be exact.
            wall_ms: 1988.5811,
            frames: values.len() as u64,
            end_to_end: Figures::from(&e2e.summary()),
            stages: vec![StageFigures {
                name: "backbone".into(),
                figures: Figures::from(&st.summary()),
            }],
            deadline_misses: 0,
            late_publishes: 0,
            degraded_frames: 0,
            mode_frames: BTreeMap::from([("nominal".to_string(), values.len() as u64)]),
            quality: BTreeMap::new(),
        };
        Measurement {
            format: FORMAT.into(),
            created_unix_s: 1,
            machines: vec![MachineInfo::detect()],
            setups: vec![],
            reps: vec![rep],
            histograms: vec![
                EncodedHistogram::encode(END_TO_END, &e2e),
                EncodedHistogram::encode("backbone", &st),
            ],
            timeline: None,
        }
    }

    fn recorded(h: &LatencyHistogram) -> Vec<(u64, u64)> {
        h.as_hdr()
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    #[test]
    fn round_trips_through_json_losslessly() {
        let values: Vec<u64> = (1..=2000).map(|i| i * 1_337 % 5_000_000 + 10).collect();
        let m = sample(&values, &[5, 6, 7_000_000]);
        let dir = std::env::temp_dir().join(format!("redline-meas-{}", std::process::id()));
        let path = dir.join("b.json");
        m.save(&path).unwrap();
        let back = Measurement::load(&path).unwrap();
        assert_eq!(back, m);
        let mut direct = LatencyHistogram::new();
        values.iter().for_each(|&v| direct.record(v));
        let decoded = back.histogram(END_TO_END).unwrap().unwrap();
        assert_eq!(recorded(&decoded), recorded(&direct));
        assert_eq!(decoded.summary(), direct.summary());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn merge_equals_the_histogram_of_the_union() {
        let a: Vec<u64> = (0..3000).map(|i| 1_000 + (i * 7919) % 900_000).collect();
        let b: Vec<u64> = (0..500).map(|i| 2_000_000 + i * 13_001).collect();
        let c: Vec<u64> = vec![0, 1, 59_000_000_000];
        let merged = Measurement::merge(&[sample(&a, &b), sample(&b, &c), sample(&c, &a)]).unwrap();
        let mut union = LatencyHistogram::new();
        a.iter().chain(&b).chain(&c).for_each(|&v| union.record(v));
        let got = merged.histogram(END_TO_END).unwrap().unwrap();
        assert_eq!(recorded(&got), recorded(&union));
        assert_eq!(got.summary(), union.summary());
        let mut stage_union = LatencyHistogram::new();
        b.iter()
            .chain(&c)
            .chain(&a)
            .for_each(|&v| stage_union.record(v));
        let got = merged.histogram("backbone").unwrap().unwrap();
        assert_eq!(recorded(&got), recorded(&stage_union));
        assert_eq!(merged.reps.len(), 3);
        assert_eq!(merged.machines.len(), 1, "same machine listed once");
        // Percentiles of the union are not the average of the parts' percentiles.
        let avg_p99 = (merged.reps[0].end_to_end.p99_ns
            + merged.reps[1].end_to_end.p99_ns
            + merged.reps[2].end_to_end.p99_ns)
            / 3;
        assert_ne!(got.summary().p99_ns, avg_p99);
        assert!(matches!(
            Measurement::merge(&[]),
            Err(MeasurementError::NothingToMerge)
        ));
    }

    fn load_text(text: &str) -> String {
        Measurement::parse(text, Path::new("base.json"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_files_are_refused_with_what_to_do() {
        let e = Measurement::load(Path::new("/nonexistent/redline/base.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read") && e.contains("--update-baseline"),
            "{e}"
        );
        let e = load_text("not json at all");
        assert!(
            e.contains("base.json is not a redline measurement") && e.contains("line 1"),
            "{e}"
        );
        let e = load_text("{\"lanes\": 2}");
        assert!(e.contains("no \"format\" field"), "{e}");
        let e = load_text("{\"format\": \"redline-latency-measurement/0\"}");
        assert!(e.contains("format 'redline-latency-measurement/0'"), "{e}");
        let good = serde_json::to_string(&sample(&[1, 2, 3], &[4])).unwrap();
        // Truncated file.
        let e = load_text(&good[..good.len() / 2]);
        assert!(
            e.contains("not a redline measurement") && e.contains("EOF"),
            "{e}"
        );
        // No replays.
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["reps"] = serde_json::json!([]);
        let e = load_text(&v.to_string());
        assert!(e.contains("holds no replay"), "{e}");
        // A field of the wrong type names the field.
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["reps"][0]["frames"] = serde_json::json!("many");
        let e = load_text(&v.to_string());
        assert!(
            e.contains("not a redline measurement") && e.contains("invalid type"),
            "{e}"
        );
        // Corrupt histograms: bad base64, valid base64 of garbage, wrong count.
        for (bad, expect) in [("%%%", "not base64"), ("AAAAAAAA", "not an HdrHistogram")] {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            v["histograms"][0]["v2_deflate_base64"] = serde_json::json!(bad);
            let e = load_text(&v.to_string());
            assert!(
                e.contains("histogram 'end_to_end' is corrupt") && e.contains(expect),
                "{e}"
            );
        }
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["histograms"][0]["count"] = serde_json::json!(99);
        let e = load_text(&v.to_string());
        assert!(
            e.contains("holds 3 samples but the file says count = 99"),
            "{e}"
        );
    }
}
