//! `redline`: the command-line front end.
//!
//! With no arguments it replays the built-in scenario (generated in memory) through the
//! driving graph in real time and prints the latency table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use redline_pipeline::config::{Perception, PipelineConfig};
use redline_pipeline::demo_cmd::{run_demo, DemoOptions};
use redline_pipeline::feed::Feed;
use redline_pipeline::generate::write_scenario_log;
use redline_pipeline::progress::{Counters, Progress};
use redline_pipeline::regress::run::{measurement_of, RunFacts};
use redline_pipeline::replay_cmd::{replay, summary_lines, write_report};
use redline_runtime::ReleaseMode;
use redline_sim::scenario::{Scenario, ScenarioConfig};

mod regress_cli;

#[derive(Parser, Debug)]
#[command(
    name = "redline",
    version,
    about = "redline: a deterministic real-time perception runtime",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand: a replay, with these options.
    #[command(flatten)]
    replay: ReplayArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a sensor log (or the built-in scenario) through the driving graph.
    Replay(ReplayArgs),
    /// Generate synthetic sensor logs.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Calibrate the INT8 network on camera frames and write its weights (safetensors).
    Quantize(QuantizeArgs),
    /// Run the runtime's 9-stage demo graph (no driving stages) and print the latency table.
    Demo(DemoArgs),
    /// Latency-jitter regression check: replay a log several times and compare with a
    /// baseline (--baseline) or another build (--against). Exit 0 pass, 1 regression,
    /// 2 cannot run.
    Regress(RegressArgs),
    /// Work with measurement files.
    #[command(subcommand)]
    Report(ReportCommand),
    /// One replay for `regress --against` (internal).
    #[command(hide = true)]
    RegressWorker(WorkerArgs),
}

#[derive(clap::Args, Debug)]
struct QuantizeArgs {
    /// MCAP log whose camera frames calibrate the network (default: the built-in scenario).
    log: Option<PathBuf>,
    /// Output weights file; load it with `weights = "FILE"` in a replay config.
    #[arg(short, long, default_value = "weights.safetensors")]
    out: PathBuf,
    /// Activation ranges: minmax, percentile (99.99) or percentile:P.
    #[arg(long, default_value = "minmax")]
    method: String,
    /// Frames to calibrate on.
    #[arg(long, default_value_t = 120)]
    frames: usize,
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Render a scenario from a seed and write it as an MCAP log (ROS 2 profile).
    Generate(GenerateArgs),
}

#[derive(clap::Args, Debug)]
struct GenerateArgs {
    /// Output file.
    #[arg(short, long, default_value = "scenario.mcap")]
    output: PathBuf,
    /// Scenario seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Length, seconds.
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Camera image width, px.
    #[arg(long, default_value_t = 256)]
    width: u32,
    /// Camera image height, px.
    #[arg(long, default_value_t = 128)]
    height: u32,
    /// Number of actors.
    #[arg(long, default_value_t = 24)]
    actors: usize,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PerceptionArg {
    /// The INT8 network and decoder.
    Network,
    /// Ground truth from the log in place of decoded detections.
    Oracle,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// MCAP log to replay (default: the built-in scenario, generated in memory).
    log: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
    /// Write report.json and trace.json (Chrome trace, opens in Perfetto) here.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// How a replay runs: shared by `replay` and `regress`.
#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    /// TOML config (lanes, budgets, modes, resolution, ...).
    #[arg(long)]
    config: Option<PathBuf>,
    /// How frames are released (default: the config's, realtime).
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Frames to replay (default: all).
    #[arg(long)]
    frames: Option<u64>,
    /// Where detections come from (default: the config's, network).
    #[arg(long, value_enum)]
    perception: Option<PerceptionArg>,
    /// Worker lanes (overrides the config).
    #[arg(long)]
    lanes: Option<usize>,
    /// Run lanes SCHED_FIFO at this priority (the scheduler and watchdog go above).
    #[arg(long)]
    fifo: Option<i32>,
    /// Lock all memory (mlockall) and the arena.
    #[arg(long)]
    mlock: bool,
}

#[derive(clap::Args, Debug)]
struct RegressArgs {
    /// MCAP log to replay (default: the built-in scenario, generated in memory).
    log: Option<PathBuf>,
    /// Baseline to compare with (JSON written by --update-baseline).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Measure and (over)write the baseline file instead of comparing.
    #[arg(long, requires = "baseline")]
    update_baseline: bool,
    /// A/B mode: a reference redline binary, run alternately with this one; the verdict
    /// uses the paired ratios.
    #[arg(long, value_name = "OTHER_BINARY", conflicts_with_all = ["baseline", "update_baseline"])]
    against: Option<PathBuf>,
    /// A/B mode: the reference side's config (default: the same as this side's).
    #[arg(long, requires = "against")]
    against_config: Option<PathBuf>,
    /// Replays (A/B: pairs) to run (default: the config's [regress] reps, 5).
    #[arg(long)]
    reps: Option<usize>,
    /// Output directory: measurement.json, verdict, latency.hlog, SVG plots.
    #[arg(long, default_value = "regress-report")]
    out: PathBuf,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
struct WorkerArgs {
    /// MCAP log to replay (default: the built-in scenario).
    log: Option<PathBuf>,
    /// TOML config.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Frames to replay.
    #[arg(long)]
    frames: Option<u64>,
    /// Label of the replay.
    #[arg(long, default_value = "candidate")]
    label: String,
    /// Where to write the measurement.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the worker protocol version and exit.
    #[arg(long)]
    protocol: bool,
}

#[derive(Subcommand, Debug)]
enum ReportCommand {
    /// Merge measurement files (baselines, regress outputs, from any machines) losslessly:
    /// histograms are added, replays concatenated.
    Merge(MergeArgs),
}

#[derive(clap::Args, Debug)]
struct MergeArgs {
    /// Measurement files (measurement.json, baselines, earlier merges).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output file.
    #[arg(short, long, default_value = "merged.json")]
    out: PathBuf,
    /// Also write percentile plots of the merged histograms into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// Time-triggered releases, one period apart.
    Realtime,
    /// Next frame as soon as a slot is free.
    Afap,
    /// Data-triggered with a virtual clock (reproducible).
    Lockstep,
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Frames to run.
    #[arg(long, default_value_t = 300)]
    frames: u64,
    /// Worker lanes (threads).
    #[arg(long, default_value_t = 2)]
    lanes: usize,
    /// Frames in flight (arena frame slots).
    #[arg(long, default_value_t = 2)]
    slots: usize,
    /// How frames are released.
    #[arg(long, value_enum, default_value_t = Mode::Realtime)]
    mode: Mode,
    /// Frame period in milliseconds.
    #[arg(long, default_value_t = 1000.0 / 30.0)]
    period_ms: f64,
    /// Elements per demo buffer (work per frame).
    #[arg(long, default_value_t = 65_536)]
    size: usize,
    /// Pin lanes to these cores, e.g. "0,1" (lane i -> core i mod n).
    #[arg(long)]
    pin: Option<String>,
    /// Run lanes SCHED_FIFO at this priority (1-97; the scheduler and watchdog go above).
    #[arg(long)]
    fifo: Option<i32>,
    /// Lock all memory (mlockall) and the arena.
    #[arg(long)]
    mlock: bool,
    /// Stall a stage: "STAGE:MS@FROM..TO", e.g. "smooth:40@100..160".
    #[arg(long)]
    stall: Option<String>,
    /// Hang a stage for ever from a frame: "STAGE@FRAME", e.g. "temporal@100".
    #[arg(long)]
    hang: Option<String>,
    /// Write report.json and trace.json (Chrome trace, opens in Perfetto) here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the compiled plan (order, lanes, arena offsets) first.
    #[arg(long)]
    show_plan: bool,
}

fn parse_stall(s: &str) -> Result<(String, f64, u64, u64)> {
    let help = || format!("--stall '{s}': expected STAGE:MS@FROM..TO, e.g. smooth:40@100..160");
    let (stage, rest) = s.split_once(':').with_context(help)?;
    let (ms, range) = rest.split_once('@').with_context(help)?;
    let (from, to) = range.split_once("..").with_context(help)?;
    Ok((
        stage.to_string(),
        ms.parse().with_context(help)?,
        from.parse().with_context(help)?,
        to.parse().with_context(help)?,
    ))
}

fn parse_hang(s: &str) -> Result<(String, u64)> {
    let help = || format!("--hang '{s}': expected STAGE@FRAME, e.g. temporal@100");
    let (stage, at) = s.split_once('@').with_context(help)?;
    Ok((stage.to_string(), at.parse().with_context(help)?))
}

fn demo(a: DemoArgs) -> Result<()> {
    let pin = match &a.pin {
        Some(p) => Some(
            p.split(',')
                .map(|c| c.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("--pin '{p}': expected core numbers like 0,1"))?,
        ),
        None => None,
    };
    if let Some(f) = a.fifo {
        if !(1..=97).contains(&f) {
            bail!(
                "--fifo {f}: use a priority from 1 to 97 (the scheduler and watchdog run above it)"
            );
        }
    }
    let o = DemoOptions {
        frames: a.frames,
        lanes: a.lanes,
        slots: a.slots,
        release: release(a.mode),
        period_ms: a.period_ms,
        size: a.size,
        pin,
        fifo: a.fifo,
        lock_memory: a.mlock,
        stall: a.stall.as_deref().map(parse_stall).transpose()?,
        hang: a.hang.as_deref().map(parse_hang).transpose()?,
        report_dir: a.report.clone(),
        show_plan: a.show_plan,
    };
    eprintln!(
        "redline demo: {} frames, {} lanes, {} slots, {:?}, period {:.3} ms",
        o.frames, o.lanes, o.slots, o.release, o.period_ms
    );
    let report = run_demo(&o)?;
    print!("{}", report.table());
    for t in &report.transitions {
        println!(
            "mode: after frame {} {} -> {}: {}",
            t.after_frame, t.from, t.to, t.reason
        );
    }
    if let Some(dir) = &a.report {
        println!(
            "wrote {0}/report.json and {0}/trace.json (open the trace in ui.perfetto.dev)",
            dir.display()
        );
    }
    Ok(())
}

fn load_config(a: &RunArgs) -> Result<PipelineConfig> {
    let mut cfg = match &a.config {
        Some(p) => PipelineConfig::load(p)?,
        None => PipelineConfig::default(),
    };
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
    if let Some(f) = a.fifo {
        if !(1..=97).contains(&f) {
            bail!(
                "--fifo {f}: use a priority from 1 to 97 (the scheduler and watchdog run above it)"
            );
        }
        cfg.rt.fifo_priority = Some(f);
    }
    if a.mlock {
        cfg.rt.lock_memory = true;
    }
    if a.frames == Some(0) {
        bail!("--frames 0: give at least 1 frame (or leave it out to replay the whole log)");
    }
    cfg.validate()?;
    Ok(cfg)
}

fn release(m: Mode) -> ReleaseMode {
    match m {
        Mode::Realtime => ReleaseMode::RealTime,
        Mode::Afap => ReleaseMode::AsFastAsPossible,
        Mode::Lockstep => ReleaseMode::Lockstep,
    }
}

/// The log at `log` (or the built-in scenario, rendered with a progress line).
fn load_feed(cfg: &PipelineConfig, log: Option<&Path>, frames: Option<usize>) -> Result<Feed> {
    match log {
        Some(path) => {
            eprintln!("reading {} ...", path.display());
            Feed::from_log(path, frames).with_context(|| format!("replaying {}", path.display()))
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

fn run_replay(a: ReplayArgs) -> Result<()> {
    let cfg = load_config(&a.run)?;
    let frames = a.run.frames.map(|f| f as usize);
    let feed = load_feed(&cfg, a.log.as_deref(), frames)?;
    let feed = Arc::new(feed);
    eprintln!(
        "replaying {} frames from {}: {} cameras {}x{}, {:?}, {} lanes, {} slots, perception {:?}",
        frames.unwrap_or(feed.frames.len()).min(feed.frames.len()),
        feed.source,
        feed.cameras.len(),
        feed.width,
        feed.height,
        cfg.release,
        cfg.lanes,
        cfg.frame_slots,
        cfg.perception
    );
    let counters = Arc::new(Counters::default());
    let total = frames.unwrap_or(feed.frames.len()).min(feed.frames.len()) as u64;
    let progress = Progress::start("redline replay", total, counters.clone());
    let (outcome, rt) = replay(&cfg, feed.clone(), a.run.frames, counters)?;
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
                cfg: &cfg,
                source: &feed.source,
                records: &outcome.records,
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

fn generate(a: GenerateArgs) -> Result<()> {
    let cfg = ScenarioConfig {
        seed: a.seed,
        seconds: a.seconds,
        actors: a.actors,
        image_width: a.width,
        image_height: a.height,
        ..ScenarioConfig::default()
    };
    let scenario = Scenario::generate(cfg)?;
    write_log(&scenario, &a.output)?;
    println!(
        "wrote {}: {} frames, {} cameras {}x{}, {} actors",
        a.output.display(),
        scenario.frame_count(),
        scenario.cameras.len(),
        a.width,
        a.height,
        a.actors
    );
    Ok(())
}

/// Renders every frame of `scenario` into an MCAP log.
fn write_log(scenario: &Scenario, path: &Path) -> Result<()> {
    let counters = Arc::new(Counters::default());
    let progress = Progress::start(
        "redline sim generate",
        scenario.frame_count() as u64,
        counters.clone(),
    );
    let stats = write_scenario_log(scenario, path, None, &mut |done| {
        counters
            .published
            .store(done as u64, std::sync::atomic::Ordering::Relaxed);
    })
    .with_context(|| format!("writing {}", path.display()))?;
    progress.finish();
    eprintln!(
        "{} messages, {:.1} MB",
        stats.messages,
        stats.bytes as f64 / 1e6
    );
    Ok(())
}

fn quantize(a: QuantizeArgs) -> Result<()> {
    use redline_models::calibrate::CalibrationMethod;
    use redline_pipeline::quantize_cmd::{run_quantize, QuantizeSource};
    let method = CalibrationMethod::parse(&a.method)?;
    let source = match a.log {
        Some(p) => QuantizeSource::Log(p),
        None => QuantizeSource::Scenario(PipelineConfig::default().scenario),
    };
    let report = run_quantize(source, &a.out, method, a.frames)?;
    print!("{}", report.table());
    println!("wrote {}", a.out.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = |r: Result<()>| match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    };
    match cli.command {
        Some(Command::Demo(a)) => done(demo(a)),
        Some(Command::Replay(a)) => done(run_replay(a)),
        Some(Command::Sim(SimCommand::Generate(a))) => done(generate(a)),
        Some(Command::Quantize(a)) => done(quantize(a)),
        // Regression checks: 0 pass, 1 regression, 2 cannot run (as a CI job expects).
        Some(Command::Regress(a)) => match regress_cli::regress(a) {
            Ok(pass) => ExitCode::from(if pass { 0 } else { 1 }),
            Err(e) => {
                eprintln!("Error: {e:#}");
                ExitCode::from(2)
            }
        },
        Some(Command::Report(ReportCommand::Merge(a))) => match regress_cli::merge(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("Error: {e:#}");
                ExitCode::from(2)
            }
        },
        Some(Command::RegressWorker(a)) => match regress_cli::worker(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("Error: {e:#}");
                ExitCode::from(2)
            }
        },
        None => done(run_replay(cli.replay)),
    }
}
