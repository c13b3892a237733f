//! `redline replay` (and `redline` with no subcommand): replays a log or the built-in
//! scenario through the driving graph and prints the latency and quality table.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use redline_bench::regress::measure::{measurement_of, RunFacts};
use redline_pipeline::graph::stage_names;
use redline_pipeline::run::ReplayOutcome;
use redline_pipeline::run::{replay_tapped, summary_lines, write_report_files, Counters};
use redline_pipeline::sensors::FrameSource;
use redline_record::RecordSummary;
use redline_sim::faults::{FaultReport, FaultyFeed, StageFaults};
use serde::Serialize;

use crate::common::{load_config, load_feed, RunArgs};
use crate::measure::{setup_facts, timeline_of};
use crate::progress::Progress;
use crate::record::OutputRecording;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// MCAP log to replay (default: the built-in scenario, generated in memory).
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
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

pub fn run(a: ReplayArgs) -> Result<()> {
    let file = load_config(&a.run)?;
    let cfg = &file.pipeline;
    let frames = a.run.frames.map(|f| f as usize);
    let faults = &file.faults;
    // Stage names are checked before the (slow) feed is built; camera names need the rig.
    let stage_faults = StageFaults::new(faults, &stage_names(cfg.perception))?;
    let faulty = Arc::new(FaultyFeed::new(
        load_feed(&file, a.log.as_deref(), frames)?,
        faults,
    )?);
    let feed: Arc<dyn FrameSource> = faulty.clone();
    eprintln!(
        "replaying {} frames from {}: {} cameras {}x{}, {:?}, {} lanes, {} slots, perception {:?}",
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
            faulty.records().to_vec(),
            stage_faults.records(&outcome.runtime),
        )
    });
    print!("{}", outcome.runtime.table());
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
                timeline: &timeline_of(&outcome.records),
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
