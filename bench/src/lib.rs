//! redline-bench: the latency regression harness as a library ([`regress`]: measurement,
//! verdicts, HdrHistogram logs, plots, merge), and the helpers of the project's
//! benchmarks.
//!
//! The library depends on `redline-runtime` only: it measures any runtime, whatever its
//! graph computes (the `redline` tool wires the driving graph to it). Benchmarks (in
//! `benches/`, which may use every crate) print figures measured in one run (ratios
//! against a peer or the machine's peak where a target asks for them); they never assert
//! on time. Run them with `cargo bench -p redline-bench --bench NAME`.

use redline_runtime::metrics::LatencySummary;

pub mod peak;
pub mod regress;

/// Formats a latency summary in microseconds: p50 / p90 / p99 / p99.9 / max.
pub fn us_line(label: &str, s: &LatencySummary) -> String {
    format!(
        "{label:<44} n={:<7} p50 {:>8.2} us  p90 {:>8.2} us  p99 {:>8.2} us  p99.9 {:>8.2} us  max {:>9.2} us",
        s.count,
        s.p50_ns as f64 / 1e3,
        s.p90_ns as f64 / 1e3,
        s.p99_ns as f64 / 1e3,
        s.p999_ns as f64 / 1e3,
        s.max_ns as f64 / 1e3
    )
}

/// Reads `--frames N` / `REDLINE_BENCH_FRAMES` (default `default`), so CI can run a short version.
pub fn frames_arg(default: u64) -> u64 {
    let mut args = std::env::args();
    while let Some(a) = args.next() {
        if a == "--frames" {
            if let Some(v) = args.next().and_then(|v| v.parse().ok()) {
                return v;
            }
        }
    }
    std::env::var("REDLINE_BENCH_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
