//! Scheduler overhead per frame: the 12-stage graph of empty stages (fan-out 4, fan-in 4)
//! on 2 lanes. With one frame slot, a frame's end-to-end latency (release → publish) is
//! pure runtime overhead: release, 12 dispatches across lanes, completions, in-order
//! publish, metrics. Also: a 17-stage single-lane chain, the shape copper-rs publishes
//! (218 ns mean for 17 tasks on one thread), and pipelined throughput with 2 slots.
//!
//! `cargo bench -p redline-bench --bench scheduler [-- --frames N]`

use redline_bench::{frames_arg, us_line};
use redline_runtime::demo::{empty_graph, EmptyStage};
use redline_runtime::{
    GraphBuilder, HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig,
};

fn chain(n: usize) -> GraphBuilder {
    let mut g = GraphBuilder::new();
    g.stage("t0", EmptyStage).writes::<u8>("b0", 64);
    for i in 1..n {
        g.stage(&format!("t{i}"), EmptyStage)
            .reads::<u8>(&format!("b{}", i - 1), 64)
            .writes::<u8>(&format!("b{i}"), 64);
    }
    g.publish(&format!("b{}", n - 1));
    g
}

fn measure(
    label: &str,
    g: GraphBuilder,
    lanes: usize,
    slots: usize,
    frames: u64,
    fifo: bool,
) -> f64 {
    let plan = g
        .build(&PlanConfig {
            lanes,
            frame_slots: slots,
        })
        .expect("graph builds");
    let mut cfg = RuntimeConfig {
        release: ReleaseMode::AsFastAsPossible,
        ..RuntimeConfig::default()
    };
    if fifo {
        cfg.rt.fifo_priority = Some(50);
        cfg.rt.lock_memory = true;
    }
    let mut rt = Runtime::new(plan, cfg).expect("runtime starts");
    let mut h = HashPublisher::default();
    rt.run(frames / 10, &mut h); // warm-up, not in the figures
    rt.reset_metrics();
    let t = std::time::Instant::now();
    rt.run(frames, &mut h);
    let wall = t.elapsed().as_secs_f64();
    let s = rt.end_to_end().summary();
    assert_eq!(s.count, frames);
    if std::env::var("REDLINE_BENCH_TABLE").is_ok() {
        let r = rt.report();
        for st in &r.stages {
            println!("   {:<6} lane {} exec p50 {:>7.2} us p99 {:>7.2} | queue p50 {:>7.2} us p99 {:>7.2}", st.name, st.lane,
                st.execution.p50_ns as f64 / 1e3, st.execution.p99_ns as f64 / 1e3, st.queueing.p50_ns as f64 / 1e3, st.queueing.p99_ns as f64 / 1e3);
        }
    }
    println!("{}", us_line(label, &s));
    println!(
        "{:<44} mean {:.2} us/frame end to end, throughput {:.0} frames/s{}",
        "",
        s.mean_ns / 1e3,
        frames as f64 / wall,
        if fifo {
            format!(" ({})", rt.os_grants().summary_lines().join("; "))
        } else {
            String::new()
        }
    );
    s.p99_ns as f64 / 1e3
}

fn main() {
    let frames = frames_arg(20_000);
    println!(
        "redline scheduler overhead, {frames} frames per line (after {} warm-up frames)",
        frames / 10
    );
    let p99 = measure(
        "12 empty stages, 2 lanes, 1 slot",
        empty_graph(),
        2,
        1,
        frames,
        false,
    );
    let p99_fifo = measure(
        "12 empty stages, 2 lanes, 1 slot, SCHED_FIFO",
        empty_graph(),
        2,
        1,
        frames,
        true,
    );
    measure(
        "12 empty stages, 2 lanes, 2 slots (pipelined)",
        empty_graph(),
        2,
        2,
        frames,
        false,
    );
    measure(
        "17-stage chain, 1 lane, 1 slot (copper-rs shape)",
        chain(17),
        1,
        1,
        frames,
        false,
    );
    println!(
        "target: P99 <= 20 us per frame for the 12-stage graph on 2 lanes: {} (normal priority {:.2} us, SCHED_FIFO {:.2} us)",
        if p99.min(p99_fifo) <= 20.0 { "met" } else { "NOT met" },
        p99,
        p99_fifo
    );
}
