//! `redline sim generate`: renders a scenario and writes it as an MCAP log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use redline_pipeline::run::Counters;
use redline_sim::generate::write_scenario_log;
use redline_sim::scenario::{Scenario, ScenarioConfig};

use crate::progress::Progress;

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Render a scenario from a seed and write it as an MCAP log (ROS 2 profile).
    Generate(GenerateArgs),
}

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// Output file.
    #[arg(short, long, default_value = "scenario.mcap")]
    pub output: PathBuf,
    /// Scenario seed.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Length, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Camera image width, px.
    #[arg(long, default_value_t = 256)]
    pub width: u32,
    /// Camera image height, px.
    #[arg(long, default_value_t = 128)]
    pub height: u32,
    /// Number of actors.
    #[arg(long, default_value_t = 24)]
    pub actors: usize,
}

pub fn run(a: GenerateArgs) -> Result<()> {
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
pub fn write_log(scenario: &Scenario, path: &Path) -> Result<()> {
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
