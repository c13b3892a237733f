//! The `redline regress` and `redline regress-worker` commands: the driving graph
//! ([`crate::measure`]) measured and judged by the harness ([`redline_bench::regress`]).
//!
//! Exit status of `regress`: 0 pass, 1 regression, 2 cannot run (the caller maps an `Err`
//! to 2): what a CI job needs to tell a slower build from a broken setup.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use redline_bench::regress::outputs::{write_outputs, Outputs};
use redline_bench::regress::worker::{run_ab, WorkerSpec, WORKER_PROTOCOL};
use redline_bench::regress::{Measurement, Verdict};
use redline_pipeline::sensors::FrameSource;

use crate::common::{load_config, load_feed, RunArgs};
use crate::config::RedlineConfig;
use crate::measure::{measure_in_process, measure_replay};
use crate::shard;

#[derive(clap::Args, Debug)]
pub struct RegressArgs {
    /// MCAP logs to replay, each `--reps` times (default: the built-in scenario, generated
    /// in memory). The measurement pools them (histograms added).
    pub logs: Vec<PathBuf>,
    /// Measure only this shard of the logs: INDEX/COUNT (log j goes to shard j mod COUNT),
    /// or `auto` for the index Bazel, a Slurm array or a Kubernetes Indexed Job puts in the
    /// environment. Output goes to OUT/shard-INDEX-of-COUNT/; merge the shards'
    /// measurement.json with `redline report merge` and judge the result with --judge.
    #[arg(long, value_name = "INDEX/COUNT|auto")]
    pub shard: Option<String>,
    /// Judge this measurement file (e.g. merged shards) against --baseline, without replaying.
    #[arg(long, value_name = "MEASUREMENT", requires = "baseline", conflicts_with_all = ["logs", "shard", "update_baseline", "against"])]
    pub judge: Option<PathBuf>,
    /// Baseline to compare with (JSON written by --update-baseline).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Measure and (over)write the baseline file instead of comparing.
    #[arg(long, requires = "baseline")]
    pub update_baseline: bool,
    /// A/B mode: a reference redline binary, run alternately with this one; the verdict
    /// uses the paired ratios.
    #[arg(long, value_name = "OTHER_BINARY", conflicts_with_all = ["baseline", "update_baseline"])]
    pub against: Option<PathBuf>,
    /// A/B mode: the reference side's config (default: the same as this side's).
    #[arg(long, requires = "against")]
    pub against_config: Option<PathBuf>,
    /// Replays (A/B: pairs) to run (default: the config's [regress] reps, 5).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Output directory: measurement.json, verdict, latency.hlog, SVG plots.
    #[arg(long, default_value = "regress-report")]
    pub out: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// MCAP log to replay (default: the built-in scenario).
    pub log: Option<PathBuf>,
    /// TOML config.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Frames to replay.
    #[arg(long)]
    pub frames: Option<u64>,
    /// Label of the replay.
    #[arg(long, default_value = "candidate")]
    pub label: String,
    /// Where to write the measurement.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the worker protocol version and exit.
    #[arg(long)]
    pub protocol: bool,
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// One progress line per replay, on stderr.
fn rep_line(what: &str, m: &Measurement) -> String {
    match m.reps.first() {
        Some(r) => format!(
            "{what}: end to end p50 {} p99 {} max {}, {} misses, {} frames outside nominal ({:.1} s)",
            ms(r.end_to_end.p50_ns),
            ms(r.end_to_end.p99_ns),
            ms(r.end_to_end.max_ns),
            r.deadline_misses,
            r.degraded_frames,
            r.wall_ms / 1e3
        ),
        None => format!("{what}: no replay"),
    }
}

/// Percentiles of every merged histogram of `m`, one line each.
pub fn histogram_table(m: &Measurement) -> String {
    let mut out = format!(
        "{:<22} {:>9} {:>12} {:>12} {:>12} {:>12}\n",
        "histogram", "samples", "p50", "p99", "p99.9", "max"
    );
    for e in &m.histograms {
        match e.decode() {
            Ok(h) => {
                let s = h.summary();
                out.push_str(&format!(
                    "{:<22} {:>9} {:>12} {:>12} {:>12} {:>12}\n",
                    e.name,
                    s.count,
                    ms(s.p50_ns),
                    ms(s.p99_ns),
                    ms(s.p999_ns),
                    ms(s.max_ns)
                ));
            }
            Err(why) => out.push_str(&format!("{:<22} corrupt: {why}\n", e.name)),
        }
    }
    out
}

/// A replay that measured no frame cannot be judged (a passing verdict over nothing would
/// be a lie).
fn ensure_frames(reps: &[Measurement]) -> Result<()> {
    for m in reps {
        if let (Some(r), Some(s)) = (m.reps.first(), m.setups.first()) {
            if r.frames == 0 {
                bail!(
                    "{}: no frame measured ({} frames replayed, {} of them warm-up): give a longer log or more --frames",
                    s.source,
                    s.frames_per_rep,
                    s.warmup_frames
                );
            }
        }
    }
    Ok(())
}

/// A regression check measures the healthy pipeline: faults would make its figures
/// meaningless (and `[slowdown]` is the knob that tests the check itself).
fn refuse_faults(file: &RedlineConfig) -> Result<()> {
    if !file.faults.is_empty() {
        bail!(
            "the config has a [faults] table: `redline regress` measures the pipeline without              faults; inject faults with `redline replay --config FILE`, or remove [faults]              (to slow a stage down for the check itself, use [slowdown.STAGE])"
        );
    }
    Ok(())
}

/// `redline regress`: Ok(true) pass, Ok(false) regression, Err cannot run.
pub fn regress(mut a: RegressArgs) -> Result<bool> {
    let mut file = load_config(&a.run)?;
    refuse_faults(&file)?;
    if let Some(r) = a.reps {
        file.regress.reps = r;
        file.validate()?;
    }
    if let (Some(measured), Some(baseline)) = (&a.judge, &a.baseline) {
        return judge(&a, &file, measured, baseline);
    }
    for log in &a.logs {
        if !log.exists() {
            bail!(
                "log {} does not exist: give the MCAP logs to replay (e.g. one written by `redline sim generate -o drive.mcap`), or no log for the built-in scenario",
                log.display()
            );
        }
    }
    if let Some(spec) = &a.shard {
        if a.logs.is_empty() {
            bail!("--shard splits a list of logs: give the logs (every shard the same list, in the same order)");
        }
        let Some((logs, dir)) = shard::take(spec, &a.logs)? else {
            return Ok(true);
        };
        a.logs = logs;
        a.out = a.out.join(dir);
    }
    let cfg = &file.pipeline;
    let reps = file.regress.reps;
    let frames = a.run.frames;
    // A bad baseline stops the run before any replay.
    let baseline = match (&a.baseline, a.update_baseline) {
        (Some(path), false) => Some(Measurement::load(path)?),
        _ => None,
    };
    if let Some(other) = &a.against {
        if a.logs.len() > 1 {
            bail!(
                "--against compares two builds on one log ({} given): run one A/B check per log",
                a.logs.len()
            );
        }
        return ab(&a, &file, other);
    }
    let label = if a.update_baseline { "baseline" } else { "now" };
    let sources: Vec<Option<&Path>> = if a.logs.is_empty() {
        vec![None]
    } else {
        a.logs.iter().map(|l| Some(l.as_path())).collect()
    };
    let mut now_reps = Vec::new();
    for (k, log) in sources.iter().enumerate() {
        let feed: Arc<dyn FrameSource> =
            Arc::new(load_feed(&file, *log, frames.map(|f| f as usize))?);
        let of = if sources.len() > 1 {
            format!(" (log {}/{})", k + 1, sources.len())
        } else {
            String::new()
        };
        eprintln!(
            "redline regress: {reps} replays of {}{of} ({} frames, {} warm-up each), {:?}, {} lanes",
            feed.describe(),
            frames
                .unwrap_or(feed.frame_count() as u64)
                .min(feed.frame_count() as u64),
            file.regress.warmup_frames,
            cfg.release,
            cfg.lanes
        );
        let reps_of_log = measure_in_process(&file, &feed, frames, reps, label, &mut |i, m| {
            eprintln!("{}", rep_line(&format!("replay {}/{reps}{of}", i + 1), m));
        })?;
        ensure_frames(&reps_of_log)?;
        now_reps.extend(reps_of_log);
    }
    let now_merged = Measurement::merge(&now_reps)?;
    let verdict = baseline
        .as_ref()
        .map(|b| Verdict::against_baseline(b, &now_merged, &file.regress));
    let written = write_outputs(&Outputs {
        dir: &a.out,
        now_label: label,
        now_reps: &now_reps,
        now: &now_merged,
        reference: baseline.as_ref().map(|b| ("baseline", &[][..], b)),
        verdict: verdict.as_ref(),
    })?;
    if let (true, Some(path)) = (a.update_baseline, &a.baseline) {
        let mut stored = now_merged.clone();
        stored.timeline = None;
        stored.save(path)?;
        print!("{}", histogram_table(&stored));
        println!(
            "wrote baseline {} ({} replays on {})",
            path.display(),
            stored.reps.len(),
            stored.machines.first().map_or("?".into(), |m| m.describe())
        );
    }
    println!("wrote {} files into {}", written.len(), a.out.display());
    match verdict {
        Some(v) => {
            print!("{}", v.table());
            for line in v.summary_lines() {
                println!("{line}");
            }
            Ok(v.passed())
        }
        None => {
            if !a.update_baseline {
                print!("{}", histogram_table(&now_merged));
                println!(
                    "no --baseline or --against given: measured only (compare later with --baseline, or keep {}/measurement.json as one)",
                    a.out.display()
                );
            }
            Ok(true)
        }
    }
}

/// `--judge`: a measurement made elsewhere (merged shards) against the baseline.
fn judge(a: &RegressArgs, file: &RedlineConfig, measured: &Path, baseline: &Path) -> Result<bool> {
    let now = Measurement::load(measured)?;
    let base = Measurement::load(baseline)?;
    let verdict = Verdict::against_baseline(&base, &now, &file.regress);
    let written = write_outputs(&Outputs {
        dir: &a.out,
        now_label: "now",
        now_reps: &[],
        now: &now,
        reference: Some(("baseline", &[][..], &base)),
        verdict: Some(&verdict),
    })?;
    println!(
        "judged {} ({} replays) against {}; wrote {} files into {}",
        measured.display(),
        now.reps.len(),
        baseline.display(),
        written.len(),
        a.out.display()
    );
    print!("{}", verdict.table());
    for line in verdict.summary_lines() {
        println!("{line}");
    }
    Ok(verdict.passed())
}

/// A/B mode.
fn ab(a: &RegressArgs, file: &RedlineConfig, other: &Path) -> Result<bool> {
    if !other.exists() {
        bail!(
            "--against {}: no such file; give the path of the reference build's redline binary (e.g. ../main-before/target/release/redline)",
            other.display()
        );
    }
    let this = std::env::current_exe().context("locating this redline binary")?;
    let work = a.out.join("ab");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    // Each side replays with a config file written here (the CLI overrides applied).
    let write_cfg = |c: &RedlineConfig, name: &str| -> Result<std::path::PathBuf> {
        let p = work.join(name);
        std::fs::write(&p, c.to_toml().context("writing the config as TOML")?)
            .with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    };
    let reference_cfg = match &a.against_config {
        Some(p) => {
            let mut run = a.run.clone();
            run.config = Some(p.clone());
            load_config(&run)?
        }
        None => file.clone(),
    };
    let candidate = WorkerSpec {
        binary: this,
        config: write_cfg(file, "candidate.toml")?,
        label: "candidate".into(),
    };
    let reference = WorkerSpec {
        binary: other.to_path_buf(),
        config: write_cfg(&reference_cfg, "reference.toml")?,
        label: "reference".into(),
    };
    let reps = file.regress.reps;
    eprintln!(
        "redline regress A/B: {reps} pairs, reference {} vs candidate {} (this build), alternating",
        reference.binary.display(),
        candidate.binary.display()
    );
    let (refs, cands) = run_ab(
        &reference,
        &candidate,
        a.logs.first().map(PathBuf::as_path),
        a.run.frames,
        reps,
        &work,
        &mut |i, r, c| {
            eprintln!(
                "{}",
                rep_line(&format!("pair {}/{reps} reference", i + 1), r)
            );
            eprintln!(
                "{}",
                rep_line(&format!("pair {}/{reps} candidate", i + 1), c)
            );
        },
    )?;
    ensure_frames(&refs)?;
    ensure_frames(&cands)?;
    let reference_merged = Measurement::merge(&refs)?;
    let candidate_merged = Measurement::merge(&cands)?;
    let verdict = Verdict::paired(&reference_merged, &candidate_merged, &file.regress);
    let written = write_outputs(&Outputs {
        dir: &a.out,
        now_label: "candidate",
        now_reps: &cands,
        now: &candidate_merged,
        reference: Some(("reference", &refs, &reference_merged)),
        verdict: Some(&verdict),
    })?;
    println!("wrote {} files into {}", written.len(), a.out.display());
    print!("{}", verdict.table());
    for line in verdict.summary_lines() {
        println!("{line}");
    }
    Ok(verdict.passed())
}

/// `redline regress-worker`: one replay, its measurement written to `--out`.
pub fn worker(a: WorkerArgs) -> Result<()> {
    if a.protocol {
        println!("{WORKER_PROTOCOL}");
        return Ok(());
    }
    let Some(out) = &a.out else {
        bail!("regress-worker needs --out FILE (it is run by `redline regress --against`)");
    };
    let file = RedlineConfig::load_or_default(a.config.as_deref())?;
    refuse_faults(&file)?;
    let feed: Arc<dyn FrameSource> = Arc::new(load_feed(
        &file,
        a.log.as_deref(),
        a.frames.map(|f| f as usize),
    )?);
    let m = measure_replay(&file, &feed, a.frames, &a.label)?;
    m.save(out)?;
    Ok(())
}
