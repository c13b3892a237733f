//! `redline sim generate`: renders a scenario and writes it as an MCAP log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use redline_pipeline::perception::BevSampling;
use redline_pipeline::run::Counters;
use redline_sim::camera::DEFAULT_TELE_HFOV_DEG;
use redline_sim::generate::write_scenario_log;
use redline_sim::scenario::{parse_tele_hfov, Scenario, ScenarioConfig};

use crate::progress::Progress;

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Render a scenario from a seed and write it as an MCAP log (ROS 2 profile).
    Generate(GenerateArgs),
    /// Render many varied drives as a training dataset for the driving network (network
    /// inputs as the runtime preprocesses them, ground-truth boxes and BEV segmentation,
    /// and the runtime's BEV and temporal tables; see tools/train/README.md).
    Dataset(DatasetArgs),
}

#[derive(clap::Args, Debug)]
pub struct DatasetArgs {
    /// Output directory.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Number of drives (seeds `seed`, `seed + 1`, ...; actors, lanes and lane width vary).
    #[arg(long, default_value_t = 32)]
    pub drives: usize,
    /// First seed.
    #[arg(long, default_value_t = 1000)]
    pub seed: u64,
    /// Length of each drive, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Camera image width, px (the pipeline's default rig renders 256).
    #[arg(long, default_value_t = 256)]
    pub width: u32,
    /// Camera image height, px.
    #[arg(long, default_value_t = 128)]
    pub height: u32,
    /// Network input width, px.
    #[arg(long, default_value_t = 128)]
    pub net_width: usize,
    /// Network input height, px.
    #[arg(long, default_value_t = 64)]
    pub net_height: usize,
    /// Backbone feature strides to export BEV view-transform tables for: `4` (the feature
    /// map a quarter of the input's width and height) or `4x2` (a quarter of its width,
    /// half its height).
    #[arg(long, value_delimiter = ',', default_values = ["4", "8"])]
    pub strides: Vec<redline_sim::dataset::FeatureStride>,
    /// Temporal history length (the pipeline's `bev_cache_frames`).
    #[arg(long, default_value_t = 2)]
    pub history: usize,
    /// Heights (m) at which BEV cells sample camera features (the pipeline's
    /// `bev_lift_m`): one view-transform table per height, the first named
    /// `bev_sources_s{S}.npy`, the others `bev_sources_s{S}_lift{i}.npy`.
    #[arg(long, value_delimiter = ',', default_values = ["0.5"])]
    pub lifts: Vec<f32>,
    /// How BEV cells read the feature maps (the pipeline's `bev_sampling`): `nearest`, or
    /// `row-linear`, which also writes each table's taps and weights, `bev_taps_s{S}*.npy`.
    #[arg(long, value_enum, default_value = "nearest")]
    pub bev_sampling: SamplingArg,
    #[command(flatten)]
    pub rig: RigArgs,
}

/// `--bev-sampling` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SamplingArg {
    /// The feature-map cell containing the point.
    Nearest,
    /// Linear between the two rows around it.
    RowLinear,
}

pub fn dataset(a: DatasetArgs) -> Result<()> {
    let mut drives =
        redline_sim::dataset::varied_drives(a.drives, a.seed, a.seconds, a.width, a.height);
    for d in &mut drives {
        a.rig.apply(d);
    }
    let spec = redline_sim::dataset::DatasetSpec {
        drives,
        net_w: a.net_width,
        net_h: a.net_height,
        strides: a.strides.clone(),
        history: a.history,
        lifts_m: a.lifts.clone(),
        sampling: match a.bev_sampling {
            SamplingArg::Nearest => BevSampling::Nearest,
            SamplingArg::RowLinear => BevSampling::RowLinear,
        },
    };
    let counters = Arc::new(Counters::default());
    let total: usize = spec
        .drives
        .iter()
        .map(|d| (d.seconds * d.fps).round() as usize)
        .sum();
    let progress = Progress::start("redline sim dataset", total as u64, counters.clone());
    let n = redline_sim::dataset::write_dataset(&a.output, &spec, &mut |done, _| {
        counters
            .published
            .store(done as u64, std::sync::atomic::Ordering::Relaxed);
    })
    .with_context(|| format!("writing the dataset to {}", a.output.display()))?;
    progress.finish();
    println!(
        "wrote {}: {} drives, {} frames, network input {}x{}",
        a.output.display(),
        a.drives,
        n,
        a.net_width,
        a.net_height
    );
    Ok(())
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
    #[command(flatten)]
    pub rig: RigArgs,
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let mut cfg = ScenarioConfig {
        seed: a.seed,
        seconds: a.seconds,
        actors: a.actors,
        image_width: a.width,
        image_height: a.height,
        ..ScenarioConfig::default()
    };
    a.rig.apply(&mut cfg);
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

/// The camera rig's flags, shared by `sim generate` and `sim dataset`.
#[derive(clap::Args, Debug)]
pub struct RigArgs {
    /// The front camera's horizontal field of view, degrees (40 to 120; the other five
    /// cameras keep theirs).
    #[arg(long, default_value_t = redline_sim::camera::DEFAULT_FRONT_HFOV_DEG)]
    pub front_hfov: f64,
    /// The forward telephoto camera's horizontal field of view, degrees (10 up to the front
    /// camera's), or `off` for the six-camera rig.
    #[arg(long, default_value_t = Tele(Some(DEFAULT_TELE_HFOV_DEG)), value_parser = parse_tele)]
    pub tele_hfov: Tele,
}

impl RigArgs {
    /// Sets the scenario's rig fields (validated when the scenario is generated).
    fn apply(&self, cfg: &mut ScenarioConfig) {
        cfg.front_hfov_deg = self.front_hfov;
        cfg.tele_hfov_deg = self.tele_hfov.0;
    }
}

/// `--tele-hfov`: degrees, or `off` (no telephoto camera).
#[derive(Clone, Copy, Debug)]
pub struct Tele(pub Option<f64>);

impl std::fmt::Display for Tele {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{d}"),
            None => f.write_str("off"),
        }
    }
}

fn parse_tele(s: &str) -> Result<Tele, String> {
    parse_tele_hfov(s).map(Tele)
}
