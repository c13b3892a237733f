//! What several subcommands share: the options of a replay (`replay`, `regress`), the
//! release modes, loading the config file, and opening a frame source (a log or the
//! built-in scenario, with a progress line).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use redline_pipeline::config::Perception;
use redline_pipeline::run::Counters;
use redline_runtime::rt::RtRequest;
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;

use crate::config::RedlineConfig;
use crate::progress::Progress;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PerceptionArg {
    /// The INT8 network and decoder.
    Network,
    /// Ground truth from the log in place of decoded detections.
    Oracle,
}

/// How a replay runs: shared by `replay` and `regress`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// TOML config (lanes, budgets, modes, resolution, ...).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// How frames are released (default: the config's, realtime).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Frames to replay (default: all).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Real-time replay speed (2: twice as fast as recorded; overrides the config's `rate`).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Where detections come from (default: the config's, network).
    #[arg(long, value_enum)]
    pub perception: Option<PerceptionArg>,
    /// Worker lanes (overrides the config).
    #[arg(long)]
    pub lanes: Option<usize>,
    /// Run lanes SCHED_FIFO at this priority (the scheduler and watchdog go above).
    #[arg(long)]
    pub fifo: Option<i32>,
    /// Lock all memory (mlockall) and the arena.
    #[arg(long)]
    pub mlock: bool,
    /// Ask the OS for nothing: no SCHED_FIFO, no pinning, no memory lock (without an `[rt]`
    /// table, real-time runs ask for all three and report what they got).
    #[arg(long, conflicts_with_all = ["fifo", "mlock"])]
    pub no_rt: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// Time-triggered releases, one period apart.
    Realtime,
    /// Next frame as soon as a slot is free.
    Afap,
    /// Data-triggered with a virtual clock (reproducible).
    Lockstep,
}

pub fn load_config(a: &RunArgs) -> Result<RedlineConfig> {
    let mut file = RedlineConfig::load_or_default(a.config.as_deref())?;
    let cfg = &mut file.pipeline;
    if let Some(m) = a.mode {
        cfg.release = release(m);
    }
    if let Some(p) = a.perception {
        cfg.perception = match p {
            PerceptionArg::Network => Perception::Network,
            PerceptionArg::Oracle => Perception::Oracle,
        };
    }
    if let Some(l) = a.lanes {
        cfg.lanes = l;
    }
    if let Some(r) = a.rate {
        cfg.rate = r;
    }
    if a.no_rt {
        cfg.rt = Some(RtRequest::default());
    }
    if let Some(f) = a.fifo {
        if !(1..=97).contains(&f) {
            bail!(
                "--fifo {f}: use a priority from 1 to 97 (the scheduler and watchdog run above it)"
            );
        }
        let mut rt = cfg.rt_request();
        rt.fifo_priority = Some(f);
        cfg.rt = Some(rt);
    }
    if a.mlock {
        let mut rt = cfg.rt_request();
        rt.lock_memory = true;
        cfg.rt = Some(rt);
    }
    if a.frames == Some(0) {
        bail!("--frames 0: give at least 1 frame (or leave it out to replay the whole log)");
    }
    file.validate()?;
    Ok(file)
}

pub fn release(m: Mode) -> ReleaseMode {
    match m {
        Mode::Realtime => ReleaseMode::RealTime,
        Mode::Afap => ReleaseMode::AsFastAsPossible,
        Mode::Lockstep => ReleaseMode::Lockstep,
    }
}

/// Says on stderr which files of the log at `path` are compressed whole (a file-compressed
/// ROS 2 bag) and decompressed into the temporary directory before it is read: opening it
/// takes a pass over them and their decompressed size on disk there. Returns them, with
/// their compressed sizes.
pub fn announce_unpacking(path: &Path) -> Vec<(PathBuf, u64)> {
    let files = redline_sim::log::compressed_files(path);
    if files.is_empty() {
        return files;
    }
    let bytes: u64 = files.iter().map(|(_, len)| len).sum();
    eprintln!(
        "decompressing {} zstd-compressed bag file{} ({:.1} MB) into {} (TMPDIR) before reading ...",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        bytes as f64 / 1e6,
        std::env::temp_dir().display()
    );
    files
}

/// The log at `log` (or the built-in scenario, rendered with a progress line).
pub fn load_feed(cfg: &RedlineConfig, log: Option<&Path>, frames: Option<usize>) -> Result<Feed> {
    match log {
        Some(path) => {
            eprintln!("reading {} ...", path.display());
            let _ = announce_unpacking(path);
            Feed::from_log_mapped(path, frames, cfg.log, &cfg.sensors)
                .with_context(|| format!("replaying {}", path.display()))
        }
        None => {
            let counters = Arc::new(Counters::default());
            let total =
                frames.unwrap_or((cfg.scenario.seconds * cfg.scenario.fps).round() as usize);
            let progress = Progress::start(
                "rendering the built-in scenario",
                total as u64,
                counters.clone(),
            );
            let feed = Feed::from_scenario(&cfg.scenario, frames, &mut |done, _| {
                counters
                    .published
                    .store(done as u64, std::sync::atomic::Ordering::Relaxed);
            })?;
            progress.finish();
            Ok(feed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> RunArgs {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = std::iter::once("redline").chain(line.split_whitespace());
        <P as clap::Parser>::try_parse_from(argv).unwrap().run
    }

    fn rt_of(line: &str) -> RtRequest {
        load_config(&args(line)).unwrap().pipeline.rt_request()
    }

    #[test]
    fn real_time_flags_build_on_what_the_run_would_ask_for() {
        // Real-time release (the default): SCHED_FIFO, automatic pinning, mlockall.
        assert_eq!(rt_of(""), RtRequest::realtime());
        assert_eq!(
            rt_of("--fifo 30"),
            RtRequest {
                fifo_priority: Some(30),
                ..RtRequest::realtime()
            }
        );
        // --no-rt: nothing at all.
        assert!(!rt_of("--no-rt").asks_anything());
        assert!(!rt_of("--no-rt --mode realtime").asks_anything());
        // afap / lockstep ask for nothing unless told.
        assert!(!rt_of("--mode afap").asks_anything());
        assert!(!rt_of("--mode lockstep").asks_anything());
        assert_eq!(
            rt_of("--mode afap --fifo 40 --mlock"),
            RtRequest {
                fifo_priority: Some(40),
                lock_memory: true,
                ..RtRequest::default()
            }
        );
    }
}
