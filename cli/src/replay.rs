//! `redline replay` (and `redline` with no subcommand): replays a log or the built-in
//! scenario through the driving graph and prints the latency and quality table.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use redline_bench::regress::measure::{measurement_of, RunFacts};
use redline_pipeline::run::{replay, summary_lines, write_report, Counters};
use redline_pipeline::sensors::FrameSource;

use crate::common::{load_config, load_feed, RunArgs};
use crate::measure::{setup_facts, timeline_of};
use crate::progress::Progress;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// MCAP log to replay (default: the built-in scenario, generated in memory).
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Write report.json and trace.json (Chrome trace, opens in Perfetto) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub fn run(a: ReplayArgs) -> Result<()> {
    let file = load_config(&a.run)?;
    let cfg = &file.pipeline;
    let frames = a.run.frames.map(|f| f as usize);
    let feed: Arc<dyn FrameSource> = Arc::new(load_feed(&file, a.log.as_deref(), frames)?);
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
    let (outcome, rt) = replay(cfg, feed.clone(), a.run.frames, counters)?;
    progress.finish();
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
    if let Some(dir) = &a.report {
        write_report(dir, &outcome, &rt)?;
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
        m.save(&dir.join("measurement.json"))?;
        println!(
            "wrote {0}/report.json, {0}/measurement.json (`redline report merge`) and {0}/trace.json (open the trace in ui.perfetto.dev)",
            dir.display()
        );
    }
    Ok(())
}
