//! `redline`: the command-line front end.
//!
//! With no arguments it runs the default job: today the runtime's demo graph in real time
//! at 30 Hz, printing the latency table (the driving pipeline replaces it when it lands).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use redline_pipeline::demo_cmd::{run_demo, DemoOptions};
use redline_runtime::ReleaseMode;

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
    /// With no subcommand: the demo, with these options.
    #[command(flatten)]
    demo: DemoArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the runtime's 9-stage demo graph and print the latency table.
    Demo(DemoArgs),
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
        release: match a.mode {
            Mode::Realtime => ReleaseMode::RealTime,
            Mode::Afap => ReleaseMode::AsFastAsPossible,
            Mode::Lockstep => ReleaseMode::Lockstep,
        },
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

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Demo(a)) => demo(a),
        None => demo(cli.demo),
    }
}
