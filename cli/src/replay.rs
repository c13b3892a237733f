//! `redline replay` (and `redline` with no subcommand): replays a log or the built-in
//! scenario through the driving graph and prints the latency and quality table.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use redline_bench::regress::measure::{measurement_of, RunFacts};
use redline_pipeline::graph::stage_names;
use redline_pipeline::run::ReplayOutcome;
use redline_pipeline::run::{replay_tapped, summary_lines, write_report_files, Counters};
use redline_pipeline::sensors::FrameSource;
use redline_record::RecordSummary;
use redline_sim::faults::{FaultReport, FaultyFeed, StageFaults};
use redline_sim::stream::{StreamFeed, StreamOptions};
use serde::Serialize;

use crate::common::{announce_unpacking, load_config, load_feed, RunArgs};
use crate::measure::{setup_facts, timeline_of};
use crate::progress::Progress;
use crate::record::OutputRecording;
use crate::shard;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// MCAP logs, ROS 2 SQLite bag files (.db3) or ROS 2 bag directories (a split bag's files read as one log) to replay,
    /// one after another (default: the built-in scenario, generated in memory). Logs are
    /// streamed: read and decoded a window ahead, in bounded memory.
    pub logs: Vec<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Start this many seconds into each log (log time from its first message).
    #[arg(long, value_name = "SECONDS")]
    pub start: Option<f64>,
    /// Play at most this many seconds of each log.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Play the logs this many times (stamps keep increasing; the ego jumps back).
    #[arg(long = "loop", value_name = "N", default_value_t = 1)]
    pub loops: u32,
    /// Frames read ahead of the graph (the streaming window).
    #[arg(long, value_name = "FRAMES", default_value_t = 32)]
    pub read_ahead: usize,
    /// Read the whole input into memory before the run instead of streaming it (memory
    /// grows with the log; sensor faults always do this).
    #[arg(long)]
    pub in_memory: bool,
    /// Replay only this shard of the logs: INDEX/COUNT (0-based; log j goes to shard
    /// j mod COUNT), or `auto` for the index a Kubernetes Indexed Job, a Slurm array or Bazel
    /// puts in the environment. With --report, files go to REPORT/shard-INDEX-of-COUNT/.
    #[arg(long, value_name = "INDEX/COUNT|auto", requires = "logs")]
    pub shard: Option<String>,
    /// Write report.json and trace.json (Chrome trace, opens in Perfetto) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Record what the graph published, per frame, to this MCAP file (opens in Foxglove or
    /// Lichtblick: boxes, tracks, predictions, plan, BEV grid, latency and mode).
    #[arg(long, value_name = "OUT.mcap")]
    pub record: Option<PathBuf>,
    /// With --record: the camera images too, JPEG-compressed (larger files; encoded on the
    /// recorder's own thread).
    #[arg(long, requires = "record")]
    pub record_images: bool,
}

/// `report.json`: the replay's outcome and, when faults were injected, what they were.
#[derive(Serialize)]
struct ReplayReport<'a> {
    #[serde(flatten)]
    outcome: &'a ReplayOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    faults: Option<&'a FaultReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<&'a RecordSummary>,
}

pub fn run(mut a: ReplayArgs) -> Result<()> {
    if let Some(spec) = &a.shard {
        let Some((logs, dir)) = shard::take(spec, &a.logs)? else {
            return Ok(());
        };
        a.logs = logs;
        if let Some(report) = &mut a.report {
            *report = report.join(dir);
        }
    }
    let file = load_config(&a.run)?;
    let cfg = &file.pipeline;
    let frames = a.run.frames.map(|f| f as usize);
    let faults = &file.faults;
    // Stage names are checked before the (slow) feed is built; camera names need the rig.
    let stage_faults = StageFaults::new(faults, &stage_names(cfg.perception))?;
    let seconds = |s: Option<f64>, what: &str| -> Result<Option<u64>> {
        match s {
            Some(v) if !(v.is_finite() && v >= 0.0) => {
                anyhow::bail!("--{what} {v}: give a number of seconds >= 0")
            }
            Some(v) => Ok(Some((v * 1e9) as u64)),
            None => Ok(None),
        }
    };
    let opts = StreamOptions {
        window: a.read_ahead.max(1),
        start_ns: seconds(a.start, "start")?.unwrap_or(0),
        duration_ns: seconds(a.duration, "duration")?,
        loops: a.loops.max(1),
        max_frames: frames,
        // A streamed log whose cameras are all JPEG is decoded in the frame (the
        // `jpeg_decode` stage, measured); in memory, images are decoded when read.
        jpeg_in_graph: true,
    };
    if a.logs.is_empty() && (a.start.is_some() || a.duration.is_some() || a.loops > 1) {
        anyhow::bail!("--start, --duration and --loop apply to logs: give the logs to replay (the built-in scenario is set in the config's [scenario] table)");
    }
    let streaming = !a.logs.is_empty() && faults.sensor.is_empty() && !a.in_memory;
    let mut faulty = None;
    let feed: Arc<dyn FrameSource> = if streaming {
        eprintln!("streaming {} ...", a.logs[0].display());
        a.logs.iter().for_each(|l| drop(announce_unpacking(l)));
        let sf = StreamFeed::open(&a.logs, file.log, &file.sensors, opts)
            .with_context(|| format!("replaying {}", a.logs[0].display()))?;
        Arc::new(sf)
    } else {
        let inner = if a.logs.is_empty() {
            load_feed(&file, None, frames)?
        } else {
            eprintln!("reading {} into memory ...", a.logs[0].display());
            a.logs.iter().for_each(|l| drop(announce_unpacking(l)));
            let opts = StreamOptions {
                jpeg_in_graph: false,
                ..opts
            };
            StreamFeed::open(&a.logs, file.log, &file.sensors, opts)
                .and_then(StreamFeed::into_feed)
                .with_context(|| format!("replaying {}", a.logs[0].display()))?
        };
        let f = Arc::new(FaultyFeed::new(inner, faults)?);
        faulty = Some(f.clone());
        f
    };
    eprintln!(
        "replaying {}{} frames from {}: {} cameras {}x{}, {:?}, {} lanes, {} slots, perception {:?}",
        if streaming { "up to " } else { "" },
        frames.unwrap_or(feed.frame_count()).min(feed.frame_count()),
        feed.describe(),
        feed.cameras().len(),
        feed.image_size().0,
        feed.image_size().1,
        cfg.release,
        cfg.lanes,
        cfg.frame_slots,
        cfg.perception
    );
    let counters = Arc::new(Counters::default());
    let total = frames.unwrap_or(feed.frame_count()).min(feed.frame_count()) as u64;
    let progress = Progress::start("redline replay", total, counters.clone());
    let hook = (!stage_faults.is_empty()).then_some(&stage_faults as _);
    let mut recording = OutputRecording::start(a.record.as_deref(), a.record_images, cfg, &feed)?;
    let (outcome, rt) = replay_tapped(
        cfg,
        feed.clone(),
        a.run.frames,
        counters,
        hook,
        &mut recording,
    )?;
    progress.finish();
    let record = recording.finish()?;
    let fault_report = (!faults.is_empty()).then(|| {
        FaultReport::new(
            faults.seed,
            faulty
                .as_ref()
                .map_or_else(Vec::new, |f| f.records().to_vec()),
            stage_faults.records(&outcome.runtime),
        )
    });
    print!("{}", redline_pipeline::run::latency_table(&outcome));
    for t in &outcome.runtime.transitions {
        println!(
            "mode: after frame {} {} -> {}: {}",
            t.after_frame, t.from, t.to, t.reason
        );
    }
    for line in summary_lines(&outcome) {
        println!("{line}");
    }
    for line in fault_report.iter().flat_map(FaultReport::summary_lines) {
        println!("{line}");
    }
    if let Some(s) = &record {
        println!("{}", crate::record::summary_line(s));
    }
    if let Some(dir) = &a.report {
        let report = ReplayReport {
            outcome: &outcome,
            faults: fault_report.as_ref(),
            record: record.as_ref(),
        };
        write_report_files(dir, &report, &rt)
            .map_err(|(path, e)| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        // The same measurement file `redline regress` writes, so replays merge too.
        let m = measurement_of(
            &rt,
            &RunFacts {
                setup: &setup_facts(&file, feed.describe()),
                timeline: &timeline_of(&outcome.timing),
                frames: outcome.runtime.frames_released,
                warmup: 0,
                residency_before: &[],
                label: "replay",
                started_unix_ms: outcome.started_unix_ms,
                wall_ms: outcome.wall_ms,
            },
        );
        let mut m = m;
        for r in &mut m.reps {
            r.quality = outcome.quality.headline();
        }
        m.save(&dir.join("measurement.json"))?;
        println!(
            "wrote {0}/report.json, {0}/measurement.json (`redline report merge`) and {0}/trace.json (open the trace in ui.perfetto.dev)",
            dir.display()
        );
    }
    // A stage still blocked in an injected hang would hold up the runtime's shutdown.
    stage_faults.release_hangs();
    Ok(())
}
