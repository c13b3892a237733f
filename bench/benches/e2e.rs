//! The driving graph end to end, before and after the fast INT8 work, in one run on the same
//! machine and the same frames: real-time replay of the built-in scenario with
//! - **before**: the original network (64×128 input, 64 feature channels) on the scalar
//!   reference kernels (`REDLINE_KERNEL=scalar`);
//! - **after**: the default network (128×256 input, 128 feature channels, 5.7× the backbone
//!   MACs) on the fastest kernels this CPU has.
//!
//! `cargo bench -p redline-bench --bench e2e [-- --frames N]` (default 300 frames per run:
//! 10 s each in real time).

use std::sync::Arc;

use redline_bench::frames_arg;
use redline_pipeline::config::PipelineConfig;
use redline_pipeline::run::replay;
use redline_pipeline::run::Counters;
use redline_sim::feed::Feed;
use redline_sim::scenario::ScenarioConfig;

fn run(
    label: &str,
    cfg: &PipelineConfig,
    kernel: Option<&str>,
    feed: &Arc<Feed>,
    frames: u64,
) -> (f64, f64) {
    match kernel {
        Some(k) => std::env::set_var("REDLINE_KERNEL", k),
        None => std::env::remove_var("REDLINE_KERNEL"),
    }
    let (o, _rt) = replay(
        cfg,
        feed.clone(),
        Some(frames),
        Arc::new(Counters::default()),
    )
    .expect("replay runs");
    std::env::remove_var("REDLINE_KERNEL");
    println!(
        "== {label}: backbone {:.1} MMAC/frame, kernels {}",
        o.graph.backbone_macs as f64 / 1e6,
        kernel.unwrap_or("best available")
    );
    print!("{}", o.runtime.table());
    let e = &o.runtime.end_to_end;
    (e.p50_ns as f64 / 1e6, e.p99_ns as f64 / 1e6)
}

fn main() {
    let frames = frames_arg(300);
    let base = PipelineConfig::default();
    let feed = Arc::new(
        Feed::from_scenario(
            &ScenarioConfig::default_drive(),
            Some(frames as usize),
            &mut |_, _| {},
        )
        .expect("scenario renders"),
    );
    let before_cfg = PipelineConfig {
        net_input: [64, 128],
        feature_channels: 64,
        ..PipelineConfig::default()
    };
    let before = run(
        "before (64x128x64 network, scalar kernels)",
        &before_cfg,
        Some("scalar"),
        &feed,
        frames,
    );
    let after = run(
        "after (128x256x128 network, fastest kernels)",
        &base,
        None,
        &feed,
        frames,
    );
    println!(
        "end to end P50 {:.2} ms -> {:.2} ms ({:.2}x), P99 {:.2} ms -> {:.2} ms ({:.2}x), with 5.7x the backbone work",
        before.0,
        after.0,
        before.0 / after.0,
        before.1,
        after.1,
        before.1 / after.1
    );
}
