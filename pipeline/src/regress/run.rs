//! Running a regression check's replays, and writing its output directory.
//!
//! - In process ([`measure_replay`], [`measure_in_process`]): a fresh runtime per replay
//!   (start-up is not measured), `warmup_frames` run and then forgotten
//!   (`Runtime::reset_metrics`), then the rest of the log measured.
//! - In worker processes ([`run_ab`]): `BINARY regress-worker [LOG] --config FILE --out
//!   FILE` runs one such replay and writes its [`Measurement`]. A/B mode runs both builds
//!   this way, this build included, so both sides pay the same process start-up and see
//!   the same cache state; the order alternates (reference, candidate, candidate,
//!   reference, ...) so that drift of the machine over the session falls on both sides.
//!   A binary that does not answer `regress-worker --protocol` with [`WORKER_PROTOCOL`] is
//!   refused before anything runs.
//! - [`write_outputs`]: the output directory (see [`Outputs`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use redline_runtime::metrics::LatencyHistogram;

use super::hlog::{write_hlog, Interval};
use super::measurement::{
    fnv1a_hex, unix_now_ms, EncodedHistogram, Figures, MachineInfo, Measurement, MeasurementError,
    RepFigures, RunSetup, StageFigures, Timeline, TimelineFrame, END_TO_END, FORMAT,
};
use super::plot;
use super::verdict::Verdict;
use crate::config::PipelineConfig;
use crate::run::Counters;
use crate::run::{start_runtime, RecordingPublisher, ReplayError};
use crate::sensors::FrameSource;
use redline_runtime::Runtime;

/// What `regress-worker --protocol` prints: the version of the worker interface.
pub const WORKER_PROTOCOL: &str = "redline-regress-worker/1";

/// One replay of `feed` (`frames` at most, warm-up included), measured.
pub fn measure_replay(
    cfg: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
    frames: Option<u64>,
    label: &str,
    counters: Arc<Counters>,
) -> Result<Measurement, ReplayError> {
    let (mut rt, _info) = start_runtime(cfg, feed)?;
    let n = frames
        .unwrap_or(feed.frame_count() as u64)
        .min(feed.frame_count() as u64);
    Ok(measure_runtime(
        &mut rt,
        cfg,
        feed.describe(),
        n,
        label,
        counters,
    ))
}

/// Runs `frames` frames (warm-up included) of a freshly started runtime and measures
/// them as a regression check does: the first `warmup_frames` (at most half) run and are
/// then forgotten (`Runtime::reset_metrics`), the rest is the measurement. `cfg` is the
/// config the runtime was built from (its setup and slowdowns are recorded), `source`
/// what it replays. [`measure_replay`] does this for the driving graph; any graph can be
/// measured the same way (the harness's own tests use a calibrated one).
pub fn measure_runtime(
    rt: &mut Runtime,
    cfg: &PipelineConfig,
    source: &str,
    frames: u64,
    label: &str,
    counters: Arc<Counters>,
) -> Measurement {
    // Never let the warm-up eat more than half of a short log.
    let warm = cfg.regress.warmup_frames.min(frames / 2);
    let mut publisher = RecordingPublisher::new(frames as usize, counters);
    rt.run(warm, &mut publisher);
    let residency_before = rt.ladder().residency().to_vec();
    rt.reset_metrics();
    let started_unix_ms = unix_now_ms();
    let t0 = Instant::now();
    rt.run(frames - warm, &mut publisher);
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    measurement_of(
        rt,
        &RunFacts {
            cfg,
            source,
            records: &publisher.records,
            frames,
            warmup: warm,
            residency_before: &residency_before,
            label,
            started_unix_ms,
            wall_ms,
        },
    )
}

/// What [`measurement_of`] needs to know about a finished run besides the runtime.
#[derive(Debug)]
pub struct RunFacts<'a> {
    /// The config it ran with.
    pub cfg: &'a PipelineConfig,
    /// What it replayed (the feed's source: a log path or the built-in scenario).
    pub source: &'a str,
    /// What every frame published.
    pub records: &'a [crate::run::FrameRecord],
    /// Frames run, warm-up included.
    pub frames: u64,
    /// Warm-up frames (metrics reset after them).
    pub warmup: u64,
    /// Ladder residency when the metrics were reset (empty: none).
    pub residency_before: &'a [u64],
    /// Label of the replay.
    pub label: &'a str,
    /// When the measured frames started, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Their wall time, ms.
    pub wall_ms: f64,
}

/// The measurement of a finished run (one replay): figures, whole histograms, timeline,
/// machine and setup. `redline replay --report` writes it too, so plain replays merge.
pub fn measurement_of(rt: &Runtime, f: &RunFacts<'_>) -> Measurement {
    let (cfg, warm) = (f.cfg, f.warmup);
    let report = rt.report();

    let mut hists: Vec<(String, &LatencyHistogram)> = vec![(END_TO_END.into(), rt.end_to_end())];
    let mut stages = Vec::new();
    for (i, s) in report.stages.iter().enumerate() {
        if let Some(h) = rt.stage_execution(i) {
            hists.push((s.name.clone(), h));
        }
        stages.push(StageFigures {
            name: s.name.clone(),
            figures: Figures::from(&s.execution),
        });
    }
    let ladder = rt.ladder();
    let mut mode_frames = std::collections::BTreeMap::new();
    let mut degraded_frames = 0;
    for (i, &after) in ladder.residency().iter().enumerate() {
        let frames = after - f.residency_before.get(i).copied().unwrap_or(0);
        mode_frames.insert(ladder.mode_name(i).to_string(), frames);
        if i > 0 {
            degraded_frames += frames;
        }
    }
    let rep = RepFigures {
        label: f.label.to_string(),
        started_unix_ms: f.started_unix_ms,
        wall_ms: f.wall_ms,
        frames: report.frames_published,
        end_to_end: Figures::from(&report.end_to_end),
        stages,
        deadline_misses: report.deadline_misses,
        late_publishes: report.late_publishes,
        degraded_frames,
        mode_frames,
    };
    let timeline = Timeline {
        deadline_ns: report.deadline_ns,
        frames: f
            .records
            .iter()
            .filter(|r| r.frame >= warm)
            .map(|r| TimelineFrame {
                frame: r.frame,
                latency_ns: r.latency_ns,
                fallback: r.status.starts_with("fallback"),
            })
            .collect(),
        mode_changes: report
            .transitions
            .iter()
            .filter(|t| t.after_frame >= warm)
            .map(|t| {
                (
                    t.after_frame,
                    format!("{} → {}: {}", t.from, t.to, t.reason),
                )
            })
            .collect(),
    };
    let setup = RunSetup {
        redline_version: env!("CARGO_PKG_VERSION").into(),
        config_hash: fnv1a_hex(&cfg.measured_toml()),
        release: format!("{:?}", cfg.release),
        lanes: cfg.lanes,
        frame_slots: cfg.frame_slots,
        perception: format!("{:?}", cfg.perception),
        slowdown: cfg
            .slowdown
            .iter()
            .map(|(k, s)| format!("{k}: +{}% +{} ms", s.percent, s.busy_ms))
            .collect(),
        source: f.source.to_string(),
        frames_per_rep: f.frames,
        warmup_frames: warm,
        deadline_ns: report.deadline_ns,
        budgets_ns: report
            .stages
            .iter()
            .map(|s| (s.name.clone(), s.budget_ns))
            .collect(),
    };
    Measurement {
        format: FORMAT.into(),
        created_unix_s: unix_now_ms() / 1000,
        machines: vec![MachineInfo::detect()],
        setups: vec![setup],
        reps: vec![rep],
        histograms: hists
            .iter()
            .map(|(n, h)| EncodedHistogram::encode(n, h))
            .collect(),
        timeline: Some(timeline),
    }
}

/// `reps` replays in this process; `on_rep(i, m)` after each (progress).
pub fn measure_in_process(
    cfg: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
    frames: Option<u64>,
    reps: usize,
    label: &str,
    on_rep: &mut dyn FnMut(usize, &Measurement),
) -> Result<Vec<Measurement>, ReplayError> {
    let mut out = Vec::with_capacity(reps);
    for i in 0..reps {
        let m = measure_replay(cfg, feed, frames, label, Arc::new(Counters::default()))?;
        on_rep(i, &m);
        out.push(m);
    }
    Ok(out)
}

/// Which side of an A/B comparison a replay measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The reference (baseline build or config).
    Reference,
    /// The candidate (the build or config under test).
    Candidate,
}

/// `pairs` pairs of replays in ABBA order: the reference first on even pairs, the
/// candidate first on odd ones, so drift of the machine's speed during the session falls
/// on both sides alike. `run(side, pair)` measures one replay; `on_pair(pair, reference,
/// candidate)` is called after each pair (progress). Stops at the first error. Returns
/// (reference, candidate) results, in pair order. Every A/B comparison here runs through
/// this: [`measure_alternating`], [`run_ab`] and the harness's own tests.
pub fn alternate<T, E>(
    pairs: usize,
    mut run: impl FnMut(Side, usize) -> Result<T, E>,
    mut on_pair: impl FnMut(usize, &T, &T),
) -> Result<(Vec<T>, Vec<T>), E> {
    let (mut refs, mut cands) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
    for i in 0..pairs {
        let (r, c) = if i % 2 == 0 {
            let r = run(Side::Reference, i)?;
            (r, run(Side::Candidate, i)?)
        } else {
            let c = run(Side::Candidate, i)?;
            (run(Side::Reference, i)?, c)
        };
        on_pair(i, &r, &c);
        refs.push(r);
        cands.push(c);
    }
    Ok((refs, cands))
}

/// A/B in this process: `reps` pairs of replays of `reference` and `candidate` configs,
/// in [`alternate`]'s order. Used to compare two configs of one build (the CLI compares
/// builds with [`run_ab`]).
pub fn measure_alternating(
    reference: &PipelineConfig,
    candidate: &PipelineConfig,
    feed: &Arc<dyn FrameSource>,
    frames: Option<u64>,
    reps: usize,
) -> Result<(Vec<Measurement>, Vec<Measurement>), ReplayError> {
    alternate(
        reps,
        |side, _| {
            let (cfg, label) = match side {
                Side::Reference => (reference, "reference"),
                Side::Candidate => (candidate, "candidate"),
            };
            measure_replay(cfg, feed, frames, label, Arc::new(Counters::default()))
        },
        |_, _, _| {},
    )
}

/// A worker process could not give a measurement.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// It could not be started.
    #[error("cannot run {binary}: {cause}. Give the path of a built redline binary, e.g. target/release/redline of the other checkout")]
    Spawn {
        /// Binary.
        binary: PathBuf,
        /// Cause.
        cause: std::io::Error,
    },
    /// It does not speak the worker protocol.
    #[error("{binary} is not a redline build with `regress` support (`regress-worker --protocol` answered {answer:?}, expected {WORKER_PROTOCOL:?}): build the reference from a checkout that has `redline regress`")]
    Protocol {
        /// Binary.
        binary: PathBuf,
        /// What it printed.
        answer: String,
    },
    /// It ran and failed.
    #[error("{binary} failed ({status}) replaying for A/B mode; its last output:\n{stderr}")]
    Failed {
        /// Binary.
        binary: PathBuf,
        /// Exit status.
        status: String,
        /// Tail of its stderr.
        stderr: String,
    },
    /// Its output file was unusable.
    #[error(transparent)]
    Output(#[from] MeasurementError),
}

/// One side of an A/B comparison.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// The redline binary.
    pub binary: PathBuf,
    /// The config file it replays with.
    pub config: PathBuf,
    /// "reference" or "candidate".
    pub label: String,
}

/// Checks that `binary` is a redline build with the worker protocol.
pub fn check_worker(binary: &Path) -> Result<(), WorkerError> {
    let out = Command::new(binary)
        .args(["regress-worker", "--protocol"])
        .output()
        .map_err(|cause| WorkerError::Spawn {
            binary: binary.to_path_buf(),
            cause,
        })?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || answer != WORKER_PROTOCOL {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(WorkerError::Protocol {
            binary: binary.to_path_buf(),
            answer: if answer.is_empty() {
                stderr.lines().next().unwrap_or("").to_string()
            } else {
                answer
            },
        });
    }
    Ok(())
}

/// Runs one replay in a worker process and reads its measurement from `out`.
pub fn run_worker(
    spec: &WorkerSpec,
    log: Option<&Path>,
    frames: Option<u64>,
    out: &Path,
) -> Result<Measurement, WorkerError> {
    let mut cmd = Command::new(&spec.binary);
    cmd.arg("regress-worker");
    if let Some(l) = log {
        cmd.arg(l);
    }
    cmd.arg("--config")
        .arg(&spec.config)
        .arg("--label")
        .arg(&spec.label)
        .arg("--out")
        .arg(out);
    if let Some(f) = frames {
        cmd.arg("--frames").arg(f.to_string());
    }
    let _ = std::fs::remove_file(out);
    let o = cmd.output().map_err(|cause| WorkerError::Spawn {
        binary: spec.binary.clone(),
        cause,
    })?;
    if !o.status.success() {
        let stderr = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        return Err(WorkerError::Failed {
            binary: spec.binary.clone(),
            status: o.status.to_string(),
            stderr: lines[lines.len().saturating_sub(10)..].join("\n"),
        });
    }
    Ok(Measurement::load(out)?)
}

/// A/B: `reps` pairs, alternating which side runs first; `on_pair(i, reference,
/// candidate)` after each pair. Worker files go to `work_dir`.
pub fn run_ab(
    reference: &WorkerSpec,
    candidate: &WorkerSpec,
    log: Option<&Path>,
    frames: Option<u64>,
    reps: usize,
    work_dir: &Path,
    on_pair: &mut dyn FnMut(usize, &Measurement, &Measurement),
) -> Result<(Vec<Measurement>, Vec<Measurement>), WorkerError> {
    check_worker(&reference.binary)?;
    check_worker(&candidate.binary)?;
    std::fs::create_dir_all(work_dir).map_err(|e| {
        WorkerError::Output(MeasurementError::Write {
            path: work_dir.to_path_buf(),
            cause: e,
        })
    })?;
    alternate(
        reps,
        |side, i| {
            let s = match side {
                Side::Reference => reference,
                Side::Candidate => candidate,
            };
            run_worker(
                s,
                log,
                frames,
                &work_dir.join(format!("{}-{i}.json", s.label)),
            )
        },
        on_pair,
    )
}

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
#[error("cannot write {path}: {cause}")]
pub struct OutputError {
    /// File.
    pub path: PathBuf,
    /// Cause.
    pub cause: std::io::Error,
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
        move |cause: std::io::Error| OutputError { path, cause }
    };
    std::fs::create_dir_all(o.dir).map_err(err(o.dir))?;
    let mut written = Vec::new();
    let now = o.now;
    let save = |m: &Measurement, name: &str, written: &mut Vec<PathBuf>| {
        let p = o.dir.join(name);
        m.save(&p).map_err(|e| OutputError {
            path: p.clone(),
            cause: std::io::Error::other(e.to_string()),
        })?;
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
        let json = serde_json::to_string_pretty(v).map_err(|e| OutputError {
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
        let series: Vec<plot::Series<'_>> = owned
            .iter()
            .map(|(label, hist)| plot::Series { label, hist })
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
        let svg = plot::percentile_svg(&format!("{name}: latency by percentile"), &series, limit);
        let p = o.dir.join(format!("percentiles_{name}.svg"));
        std::fs::write(&p, svg).map_err(err(&p))?;
        written.push(p);
    }
    if let Some(t) = &now.timeline {
        let frames: Vec<plot::TimelineFrame> = t
            .frames
            .iter()
            .map(|f| plot::TimelineFrame {
                frame: f.frame,
                latency_ns: f.latency_ns,
                fallback: f.fallback,
            })
            .collect();
        let marks: Vec<plot::ModeMark> = t
            .mode_changes
            .iter()
            .map(|(after_frame, label)| plot::ModeMark {
                after_frame: *after_frame,
                label: label.clone(),
            })
            .collect();
        let svg = plot::timeline_svg(
            &format!("end to end per frame ({}, last replay)", o.now_label),
            &frames,
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
    use super::*;

    #[test]
    fn alternate_runs_abba_and_keeps_pair_order() {
        let mut order = Vec::new();
        let mut pairs_seen = Vec::new();
        let (r, c) = alternate(
            4,
            |side, i| {
                order.push((side, i));
                Ok::<_, ()>((side, i))
            },
            |i, r, c| pairs_seen.push((i, r.1, c.1)),
        )
        .unwrap();
        use Side::{Candidate as C, Reference as R};
        assert_eq!(
            order,
            [
                (R, 0),
                (C, 0),
                (C, 1),
                (R, 1),
                (R, 2),
                (C, 2),
                (C, 3),
                (R, 3)
            ]
        );
        assert_eq!(r, [(R, 0), (R, 1), (R, 2), (R, 3)]);
        assert_eq!(c, [(C, 0), (C, 1), (C, 2), (C, 3)]);
        assert_eq!(pairs_seen, [(0, 0, 0), (1, 1, 1), (2, 2, 2), (3, 3, 3)]);
    }

    #[test]
    fn alternate_stops_at_the_first_error() {
        let mut runs = 0;
        let e = alternate(
            5,
            |side, i| {
                runs += 1;
                if side == Side::Candidate && i == 1 {
                    Err(format!("pair {i} failed"))
                } else {
                    Ok(())
                }
            },
            |_, _, _| {},
        )
        .unwrap_err();
        assert_eq!(e, "pair 1 failed");
        assert_eq!(runs, 3, "pair 0 (two runs) and the candidate of pair 1");
    }
}
