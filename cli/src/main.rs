//! `redline`: the command-line front end, one module per subcommand.
//!
//! With no arguments it replays the built-in scenario (generated in memory) through the
//! driving graph in real time and prints the latency table.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod common;
mod config;
mod demo;
mod engine;
mod eval;
mod generate;
mod log_info;
mod measure;
mod model;
mod progress;
mod quantize;
mod record;
mod regress;
mod replay;
mod report;
mod shard;

use demo::DemoArgs;
use eval::EvalArgs;
use generate::SimCommand;
use log_info::LogCommand;
use model::ModelCommand;
use quantize::QuantizeArgs;
use regress::{RegressArgs, WorkerArgs};
use replay::ReplayArgs;
use report::ReportCommand;

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
    /// Replay sensor logs (or the built-in scenario) through the driving graph.
    Replay(ReplayArgs),
    /// Quality against ground truth (detection AP/mAP, segmentation IoU, MOTA/AMOTA,
    /// planner): replay logs in lockstep, print per log and pooled, optionally as JSON.
    Eval(EvalArgs),
    /// Inspect a recorded log: `info` (topics, types, counts, rates, a `[sensors]` table).
    #[command(subcommand)]
    Log(LogCommand),
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
    /// Your own ONNX model: `info` (contents, which engine can run it) and `bench`
    /// (latency, GMAC/s, against another engine).
    #[command(subcommand)]
    Model(ModelCommand),
    /// TensorRT engines: `build` them ahead of time on this machine (feature `tensorrt`).
    #[command(subcommand)]
    Engine(engine::EngineCommand),
    /// One replay for `regress --against` (internal).
    #[command(hide = true)]
    RegressWorker(WorkerArgs),
}

/// What the CLI prints for an error: the message and each cause, joined by ": " (what
/// anyhow's `{:#}` gives), except that a cause whose text the message so far already
/// quotes is not repeated. Library errors often do both — a `#[error("... {source}")]`
/// message and the same error as their `source()` — and a user would read the OS error
/// twice ("No such file or directory (os error 2); check the path ...: No such file or
/// directory (os error 2)").
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = |r: anyhow::Result<()>| match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    };
    match cli.command {
        Some(Command::Demo(a)) => done(demo::run(a)),
        Some(Command::Replay(a)) => done(replay::run(a)),
        Some(Command::Eval(a)) => done(eval::run(a)),
        Some(Command::Sim(SimCommand::Generate(a))) => done(generate::run(a)),
        Some(Command::Sim(SimCommand::Dataset(a))) => done(generate::dataset(a)),
        Some(Command::Quantize(a)) => done(quantize::run(a)),
        Some(Command::Model(c)) => done(model::run(c)),
        Some(Command::Engine(c)) => done(engine::run(c)),
        Some(Command::Log(c)) => done(log_info::run(c)),
        // Regression checks: 0 pass, 1 regression, 2 cannot run (as a CI job expects).
        Some(Command::Regress(a)) => match regress::regress(a) {
            Ok(pass) => ExitCode::from(if pass { 0 } else { 1 }),
            Err(e) => {
                eprintln!("Error: {}", error_text(&e));
                ExitCode::from(2)
            }
        },
        Some(Command::Report(ReportCommand::Merge(a))) => match report::merge(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("Error: {}", error_text(&e));
                ExitCode::from(2)
            }
        },
        Some(Command::RegressWorker(a)) => match regress::worker(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("Error: {}", error_text(&e));
                ExitCode::from(2)
            }
        },
        None => done(replay::run(cli.replay)),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::{error_text, Cli};

    /// clap's own consistency checks over every subcommand and argument (conflicts,
    /// requirements and defaults that name real arguments, no duplicate flags).
    #[test]
    fn argument_parser_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The parser accepts what the README shows.
    #[test]
    fn readme_command_lines_parse() {
        for line in [
            "redline",
            "redline replay --mode lockstep --frames 300 --lanes 4",
            "redline replay drive.mcap --config c.toml --perception oracle --fifo 50 --mlock",
            "redline replay --no-rt --frames 300",
            "redline sim generate -o drive.mcap --seed 7 --seconds 30",
            "redline quantize -o w.safetensors --method percentile:99.9 --frames 10",
            "redline demo --frames 10 --stall smooth:40@100..160",
            "redline regress --baseline b.json --update-baseline",
            "redline eval a.mcap b.mcap --perception oracle --json q.json",
            "redline eval drive.mcap --config c.toml --frames 300",
            "redline report merge a.json b.json -o m.json",
            "redline model info m.onnx --json",
            "redline log info bag.mcap",
            "redline replay bag.mcap --config bag.toml --mode lockstep",
            "redline replay a.mcap b.mcap --start 10 --duration 30 --loop 3 --rate 2",
            "redline replay drive.mcap --read-ahead 8 --in-memory",
            "redline replay a.mcap b.mcap c.mcap --shard 1/3 --report out",
            "redline replay a.mcap b.mcap --shard auto --mode lockstep",
            "redline log info bag.mcap --json",
            "redline model bench m.onnx --threads 4 --against onnxruntime --iters 200",
            "redline model bench m.onnx --engine ort --input a.bin --json",
            "redline model bench m.onnx --engine cuda --against native",
            "redline model bench m.onnx --engine cuda-staged --against cuda-stream",
            "redline model bench m.onnx --engine tensorrt",
            "redline model profile m.onnx --reps 10 --top 12 --no-tensor-cores",
            "redline engine build m.onnx --precision fp16 --cache /tmp/trt",
        ] {
            let args = line.split_whitespace();
            if let Err(e) = <Cli as clap::Parser>::try_parse_from(args) {
                panic!("{line}: {e}");
            }
        }
        assert!(<Cli as clap::Parser>::try_parse_from(["redline", "replay", "--lanes"]).is_err());
        assert!(
            <Cli as clap::Parser>::try_parse_from(["redline", "replay", "--no-rt", "--fifo", "40"])
                .is_err(),
            "--no-rt and --fifo contradict each other"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open {path}: {source}; check the path")]
    struct Quoting {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn error_text_joins_the_chain_but_never_repeats_a_quoted_cause() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        // The message quotes its source: printed once.
        let e = anyhow::Error::new(Quoting {
            path: "a.mcap".into(),
            source: io(),
        })
        .context("replaying a.mcap");
        assert_eq!(
            error_text(&e),
            "replaying a.mcap: cannot open a.mcap: no such file; check the path"
        );
        // A cause the message does not quote is appended, as `{:#}` would.
        let e = anyhow::Error::new(io()).context("reading a.mcap");
        assert_eq!(error_text(&e), "reading a.mcap: no such file");
        assert_eq!(error_text(&e), format!("{e:#}"));
    }
}
