//! `redline eval LOG...`: the quality of the driving graph on recorded logs — detection
//! AP/mAP, segmentation IoU, tracking (MOTA, MOTP, ID switches, AMOTA) and the planner's
//! collision-free share — per log and pooled over all of them.
//!
//! Contract: every log is replayed in lockstep (virtual clock, no timing decision: the
//! figures are bit-reproducible on any machine and lane count) with the given config and
//! perception; a config with `[faults]` is refused (evaluate a clean pipeline; inject
//! faults with `redline replay`). The aggregate is computed over the pooled raw material
//! ([`redline_pipeline::eval::QualityEval::merge`]): AP over all logs' detections, IoU over
//! all cells, tracking with each log its own sequence — never an average of per-log
//! figures. Every path is checked before the first replay; a log that cannot be read stops
//! the run with its name. One progress line per log on stderr; the figures on stdout;
//! `--json FILE` writes them all.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use redline_pipeline::eval::{Quality, QualityEval};
use redline_pipeline::run::{collisions_line, replay, Counters, PlannerCollision};
use redline_pipeline::sensors::FrameSource;
use redline_runtime::ReleaseMode;
use serde::Serialize;

use crate::common::{load_config, load_feed, RunArgs};

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// MCAP logs or ROS 2 bag directories with ground truth (e.g. written by `redline sim
    /// generate`).
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
    /// TOML config (network, weights, budgets, ...); the release mode is always lockstep.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where detections come from (default: the config's, network).
    #[arg(long, value_enum)]
    pub perception: Option<crate::common::PerceptionArg>,
    /// Frames per log (default: all).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Worker lanes (the figures do not depend on it).
    #[arg(long)]
    pub lanes: Option<usize>,
    /// Also write every figure, per log and pooled, to this JSON file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// One log's figures, as `--json` writes them.
#[derive(Serialize)]
struct LogQuality {
    log: String,
    frames: u64,
    output_hash: String,
    quality: Quality,
    /// The first plans that met an actor's true future (where to look in the log).
    planner_collisions: Vec<PlannerCollision>,
    /// How the log's cameras differ from the rig the models declare (`check_rig = false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    rig_mismatch: Option<String>,
}

/// The `--json` file.
#[derive(Serialize)]
struct EvalReport<'a> {
    perception: String,
    config: Option<String>,
    logs: &'a [LogQuality],
    /// Pooled over every log.
    aggregate: &'a Quality,
}

/// The quality lines of `q`, as the replay table prints them.
fn lines(q: &Quality) -> Vec<String> {
    let planner = match q.collision_free {
        Some(f) => format!(
            "planner: {:.2}% of {} trajectories collision-free against the true futures, {} minimum-risk frames",
            f * 100.0,
            q.planner_frames_checked,
            q.min_risk_frames
        ),
        None => format!(
            "planner: no trajectory could be checked (no 3 s of true future), {} minimum-risk frames",
            q.min_risk_frames
        ),
    };
    vec![
        q.detection_line(),
        q.detection_range_line(),
        q.segmentation_line(),
        q.tracking_line(),
        q.tracking_range_line(),
        planner,
    ]
}

/// `redline eval`.
pub fn run(a: EvalArgs) -> Result<()> {
    let mut file = load_config(&RunArgs {
        config: a.config.clone(),
        mode: Some(crate::common::Mode::Lockstep),
        frames: a.frames,
        rate: None,
        perception: a.perception,
        lanes: a.lanes,
        fifo: None,
        mlock: false,
        no_rt: false,
    })?;
    file.pipeline.release = ReleaseMode::Lockstep;
    if !file.faults.is_empty() {
        bail!(
            "the config has a [faults] table: `redline eval` measures the pipeline without faults; inject faults with `redline replay --config FILE`, or remove [faults]"
        );
    }
    for log in &a.logs {
        if !log.exists() {
            bail!(
                "log {} does not exist: give MCAP logs (or ROS 2 bag directories) with ground truth (e.g. from `redline sim generate -o drive.mcap`)",
                log.display()
            );
        }
    }
    let cfg = &file.pipeline;
    let n = a.logs.len();
    let mut pooled = QualityEval::new();
    let mut per_log = Vec::with_capacity(n);
    for (i, log) in a.logs.iter().enumerate() {
        let t0 = Instant::now();
        let feed: Arc<dyn FrameSource> = Arc::new(
            load_feed(&file, Some(log), a.frames.map(|f| f as usize))
                .with_context(|| format!("log {} of {n}", i + 1))?,
        );
        let (outcome, _rt) = replay(cfg, feed, a.frames, Arc::new(Counters::default()))
            .with_context(|| format!("replaying {}", log.display()))?;
        let q = &outcome.quality;
        eprintln!(
            "[{}/{n}] {}: {} frames, mAP {}, MOTA {:.3}, AMOTA {:.3} ({:.1} s)",
            i + 1,
            log.display(),
            q.frames,
            q.map.map_or("n/a".into(), |v| format!("{v:.3}")),
            q.mota,
            q.amota,
            t0.elapsed().as_secs_f64()
        );
        println!(
            "{} ({} frames, perception {:?}, output hash {}):",
            log.display(),
            q.frames,
            cfg.perception,
            outcome.output_hash
        );
        if !q.has_ground_truth() {
            println!("  WARNING: no ground truth in this log: its figures mean nothing");
        }
        if let Some(m) = &outcome.graph.rig_mismatch {
            println!("  WARNING: this log's rig is NOT the models' (check_rig = false): {m}");
        }
        for line in lines(q) {
            println!("  {line}");
        }
        if let Some(line) = collisions_line(&outcome.evaluation) {
            println!("  {line}");
        }
        pooled.merge(&outcome.quality_eval);
        per_log.push(LogQuality {
            log: log.display().to_string(),
            frames: q.frames,
            output_hash: outcome.output_hash.clone(),
            quality: q.clone(),
            planner_collisions: outcome.evaluation.collisions.clone(),
            rig_mismatch: outcome.graph.rig_mismatch.clone(),
        });
    }
    let aggregate = pooled.summary();
    println!(
        "all {n} log(s), pooled ({} frames; AP over all detections, IoU over all cells):",
        aggregate.frames
    );
    for line in lines(&aggregate) {
        println!("  {line}");
    }
    if let Some(path) = &a.json {
        let report = EvalReport {
            perception: format!("{:?}", cfg.perception),
            config: a.config.as_ref().map(|p| p.display().to_string()),
            logs: &per_log,
            aggregate: &aggregate,
        };
        let text = serde_json::to_string_pretty(&report).context("encoding the JSON")?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
