//! `redline report merge`: adds measurement files (baselines, regress outputs, replays,
//! from any machine) losslessly and prints the merged percentiles.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use redline_bench::regress::measurement::END_TO_END;
use redline_bench::regress::plot::percentile::{percentile_svg, Series};
use redline_bench::regress::Measurement;

use crate::regress::histogram_table;

#[derive(Subcommand, Debug)]
pub enum ReportCommand {
    /// Merge measurement files (baselines, regress outputs, from any machines) losslessly:
    /// histograms are added, replays concatenated.
    Merge(MergeArgs),
}

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Measurement files (measurement.json, baselines, earlier merges).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output file.
    #[arg(short, long, default_value = "merged.json")]
    pub out: PathBuf,
    /// Also write percentile plots of the merged histograms into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
}

/// `redline report merge`.
pub fn merge(a: MergeArgs) -> Result<()> {
    let parts = a
        .files
        .iter()
        .map(|p| Measurement::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = Measurement::merge(&parts)?;
    if merged.setups.len() > 1 {
        let d = merged.setups[0].differences(&merged.setups[1]);
        eprintln!(
            "WARNING: merging {} different run setups (e.g. {}): the merged histograms mix them",
            merged.setups.len(),
            d.join("; ")
        );
    }
    merged.save(&a.out)?;
    print!("{}", histogram_table(&merged));
    println!(
        "wrote {}: {} files, {} replays, {} machine(s)",
        a.out.display(),
        parts.len(),
        merged.reps.len(),
        merged.machines.len()
    );
    if let Some(dir) = &a.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut names = vec![END_TO_END.to_string()];
        names.extend(merged.stage_names());
        for name in names {
            if let Some(Ok(h)) = merged.histogram(&name) {
                let svg = percentile_svg(
                    &format!("{name}: latency by percentile (merged)"),
                    &[Series {
                        label: "merged",
                        hist: &h,
                    }],
                    None,
                );
                let p = dir.join(format!("percentiles_{name}.svg"));
                std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
            }
        }
        println!("wrote percentile plots into {}", dir.display());
    }
    Ok(())
}
