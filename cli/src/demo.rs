//! `redline demo`: runs the runtime's 9-stage demo graph (fan-out, fan-in, a stateful
//! stage, a `parallel_for` stage) and prints the latency table; optional stall and hang
//! injection show the watchdog, the fallbacks and the degradation ladder at work.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redline_runtime::demo::{demo_graph, demo_ladder, ids, Faults};
use redline_runtime::rt::RtRequest;
use redline_runtime::{
    FrameStatus, PlanConfig, Published, ReleaseMode, Report, Runtime, RuntimeConfig,
};

use anyhow::{bail, Context, Result};
use redline_pipeline::run::Counters;

use crate::common::{release, Mode};
use crate::progress::Progress;

/// Everything `redline demo` can be told.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Frames to run.
    pub frames: u64,
    /// Worker lanes.
    pub lanes: usize,
    /// Frames in flight.
    pub slots: usize,
    /// Release mode.
    pub release: ReleaseMode,
    /// Period, ms.
    pub period_ms: f64,
    /// Elements per demo buffer (work per frame).
    pub size: usize,
    /// Pin lane i to core cores[i % len].
    pub pin: Option<Vec<usize>>,
    /// SCHED_FIFO priority for the lanes.
    pub fifo: Option<i32>,
    /// mlockall + locked arena.
    pub lock_memory: bool,
    /// Stall: (stage, extra ms, first frame, last frame).
    pub stall: Option<(String, f64, u64, u64)>,
    /// Hang: (stage, frame).
    pub hang: Option<(String, u64)>,
    /// Directory for report.json and trace.json.
    pub report_dir: Option<PathBuf>,
    /// Print the plan before running.
    pub show_plan: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            frames: 300,
            lanes: 2,
            slots: 2,
            release: ReleaseMode::RealTime,
            period_ms: 1000.0 / 30.0,
            size: 65_536,
            pin: None,
            fifo: None,
            lock_memory: false,
            stall: None,
            hang: None,
            report_dir: None,
            show_plan: false,
        }
    }
}

/// What went wrong before or after the run (the run itself never fails).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A stage name not in the demo graph.
    #[error("unknown stage '{0}': the demo graph's stages are {names}", names = ids::NAMES.join(", "))]
    UnknownStage(String),
    /// Bad numbers.
    #[error("{0}")]
    Invalid(String),
    /// The graph or runtime could not be built.
    #[error(transparent)]
    Plan(#[from] redline_runtime::PlanError),
    /// The runtime could not start.
    #[error(transparent)]
    Runtime(#[from] redline_runtime::RuntimeError),
    /// Writing the report failed.
    #[error("cannot write {path}: {error}")]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        error: std::io::Error,
    },
}

fn stage_id(name: &str) -> Result<usize, DemoError> {
    ids::NAMES
        .iter()
        .position(|n| *n == name)
        .ok_or_else(|| DemoError::UnknownStage(name.to_string()))
}

/// Runs the demo and returns its report (and writes report.json / trace.json if asked).
pub fn run_demo(o: &DemoOptions) -> Result<Report, DemoError> {
    if o.frames == 0 {
        return Err(DemoError::Invalid("--frames must be at least 1".into()));
    }
    if !(o.period_ms > 0.0 && o.period_ms.is_finite()) {
        return Err(DemoError::Invalid(format!(
            "--period-ms {} must be > 0",
            o.period_ms
        )));
    }
    if o.size == 0 {
        return Err(DemoError::Invalid("--size must be at least 1".into()));
    }
    let stall = match &o.stall {
        Some((name, ms, from, to)) => {
            if *ms <= 0.0 || from > to {
                return Err(DemoError::Invalid(
                    "--stall needs a positive duration and FROM <= TO".into(),
                ));
            }
            Some((stage_id(name)?, (*ms * 1e6) as u64, *from, *to))
        }
        None => None,
    };
    let hang = match &o.hang {
        Some((name, at)) => Some((stage_id(name)?, *at)),
        None => None,
    };
    let faults = Faults::new();
    let plan = demo_graph(o.size, &faults).build(&PlanConfig {
        lanes: o.lanes,
        frame_slots: o.slots,
    })?;
    if o.show_plan {
        println!("{}", plan.describe());
    }
    let cfg = RuntimeConfig {
        release: o.release,
        period_ns: (o.period_ms * 1e6) as u64,
        ladder: demo_ladder(2, 30, 60),
        rt: RtRequest {
            pin_cores: o.pin.clone(),
            auto_pin: false,
            fifo_priority: o.fifo,
            lock_memory: o.lock_memory,
        },
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg)?;
    let counters = Arc::new(Counters::default());
    let progress = Progress::start("redline demo", o.frames, counters.clone());
    let c = counters.clone();
    let mut publisher = move |p: &Published<'_>| {
        c.published.fetch_add(1, Ordering::Relaxed);
        if matches!(p.status, FrameStatus::Fallback(_)) {
            c.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
    };
    // Fault windows split the run into segments; frame numbering carries on.
    let mut marks: Vec<u64> = vec![0, o.frames];
    if let Some((_, _, from, to)) = stall {
        marks.extend([from.min(o.frames), (to + 1).min(o.frames)]);
    }
    if let Some((_, at)) = hang {
        marks.push(at.min(o.frames));
    }
    marks.sort_unstable();
    marks.dedup();
    for w in marks.windows(2) {
        let (start, end) = (w[0], w[1]);
        if let Some((id, ns, from, to)) = stall {
            faults.stall(id, if start >= from && start <= to { ns } else { 0 });
        }
        if let Some((id, at)) = hang {
            if start == at {
                faults.hang(id);
            }
        }
        rt.run(end - start, &mut publisher);
    }
    progress.finish();
    faults.release_hang();
    let report = rt.report();
    if let Some(dir) = &o.report_dir {
        redline_pipeline::run::write_report_files(dir, &report, &rt)
            .map_err(|(path, error)| DemoError::Write { path, error })?;
    }
    Ok(report)
}

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Frames to run.
    #[arg(long, default_value_t = 300)]
    pub frames: u64,
    /// Worker lanes (threads).
    #[arg(long, default_value_t = 2)]
    pub lanes: usize,
    /// Frames in flight (arena frame slots).
    #[arg(long, default_value_t = 2)]
    pub slots: usize,
    /// How frames are released.
    #[arg(long, value_enum, default_value_t = Mode::Realtime)]
    pub mode: Mode,
    /// Frame period in milliseconds.
    #[arg(long, default_value_t = 1000.0 / 30.0)]
    pub period_ms: f64,
    /// Elements per demo buffer (work per frame).
    #[arg(long, default_value_t = 65_536)]
    pub size: usize,
    /// Pin lanes to these cores, e.g. "0,1" (lane i -> core i mod n).
    #[arg(long)]
    pub pin: Option<String>,
    /// Run lanes SCHED_FIFO at this priority (1-97; the scheduler and watchdog go above).
    #[arg(long)]
    pub fifo: Option<i32>,
    /// Lock all memory (mlockall) and the arena.
    #[arg(long)]
    pub mlock: bool,
    /// Stall a stage: "STAGE:MS@FROM..TO", e.g. "smooth:40@100..160".
    #[arg(long)]
    pub stall: Option<String>,
    /// Hang a stage for ever from a frame: "STAGE@FRAME", e.g. "temporal@100".
    #[arg(long)]
    pub hang: Option<String>,
    /// Write report.json and trace.json (Chrome trace, opens in Perfetto) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Print the compiled plan (order, lanes, arena offsets) first.
    #[arg(long)]
    pub show_plan: bool,
}

pub fn parse_stall(s: &str) -> Result<(String, f64, u64, u64)> {
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

pub fn parse_hang(s: &str) -> Result<(String, u64)> {
    let help = || format!("--hang '{s}': expected STAGE@FRAME, e.g. temporal@100");
    let (stage, at) = s.split_once('@').with_context(help)?;
    Ok((stage.to_string(), at.parse().with_context(help)?))
}

pub fn run(a: DemoArgs) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockstep_demo_runs_and_writes_its_report() {
        let dir = std::env::temp_dir().join(format!("redline-demo-{}", std::process::id()));
        let o = DemoOptions {
            frames: 50,
            release: ReleaseMode::Lockstep,
            size: 1024,
            report_dir: Some(dir.clone()),
            ..DemoOptions::default()
        };
        let r = run_demo(&o).unwrap();
        assert_eq!(r.frames_published, 50);
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap())
                .unwrap();
        assert_eq!(json["frames_published"], 50);
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap())
                .unwrap();
        assert!(trace["traceEvents"].as_array().unwrap().len() > 50 * 9);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn bad_options_are_clear_errors() {
        let o = DemoOptions {
            stall: Some(("nope".into(), 5.0, 0, 10)),
            ..DemoOptions::default()
        };
        let e = run_demo(&o).unwrap_err().to_string();
        assert!(
            e.contains("unknown stage 'nope'") && e.contains("smooth"),
            "{e}"
        );
        let o = DemoOptions {
            frames: 0,
            ..DemoOptions::default()
        };
        assert!(run_demo(&o).unwrap_err().to_string().contains("--frames"));
        let o = DemoOptions {
            lanes: 0,
            ..DemoOptions::default()
        };
        assert!(run_demo(&o).unwrap_err().to_string().contains("lanes"));
    }
}
