//! Watchdog detection delay: time from a stage's budget expiry to the overrun being
//! recorded by the watchdog thread. One stage busy-waits its budget plus 2 ms in every
//! frame (period 5 ms): every run is an overrun the watchdog must see, and a detection as
//! late as 2 ms is still measured (an overrun that ends before the watchdog looks is
//! counted as missed, so the percentiles are not flattered by survivors).
//!
//! `cargo bench -p redline-bench --bench watchdog [-- --frames N]`

use redline_bench::{frames_arg, us_line};
use redline_runtime::demo::EmptyStage;
use redline_runtime::{
    FrameInfo, GraphBuilder, HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig, Stage,
    StageError, StageIo,
};

struct Overrunning {
    ns: u64,
}

impl Stage for Overrunning {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let t = std::time::Instant::now();
        while (t.elapsed().as_nanos() as u64) < self.ns {
            std::hint::spin_loop();
        }
        io.output_bytes(0)?[0] = 1;
        Ok(())
    }
}

fn measure(label: &str, frames: u64, budget_us: u64, fifo: bool) -> f64 {
    let mut g = GraphBuilder::new();
    g.stage("src", EmptyStage).writes::<u8>("src", 64);
    g.stage(
        "late",
        Overrunning {
            ns: budget_us * 1500,
        },
    )
    .reads::<u8>("src", 64)
    .writes::<u8>("late", 64)
    .budget_us(budget_us);
    g.publish("late");
    let plan = g
        .build(&PlanConfig {
            lanes: 2,
            frame_slots: 2,
        })
        .expect("graph builds");
    let mut cfg = RuntimeConfig {
        release: ReleaseMode::RealTime,
        period_ns: 5_000_000,
        ..RuntimeConfig::default()
    };
    if fifo {
        cfg.rt.fifo_priority = Some(50);
        cfg.rt.lock_memory = true;
    }
    let mut rt = Runtime::new(plan, cfg).expect("runtime starts");
    let mut h = HashPublisher::default();
    rt.run(frames, &mut h);
    let r = rt.report();
    println!("{}", us_line(label, &r.watchdog_delay));
    let missed = r.stages[1]
        .counters
        .overruns
        .saturating_sub(r.watchdog_delay.count);
    println!(
        "{:<44} overruns recorded at retire: {}, seen by the watchdog while running: {} (missed: {missed})",
        "", r.stages[1].counters.overruns, r.watchdog_delay.count
    );
    r.watchdog_delay.p99_ns as f64 / 1e3
}

fn main() {
    let frames = frames_arg(2_000);
    println!("redline watchdog detection delay, {frames} frames of 5 ms per line");
    let a = measure("budget 1 ms, normal priority", frames, 1000, false);
    let b = measure("budget 1 ms, SCHED_FIFO", frames, 1000, true);
    let c = measure(
        "budget 100 us (< 250 us tick), SCHED_FIFO",
        frames,
        100,
        true,
    );
    println!(
        "target: P99 <= 1000 us: {} (normal {:.1} us, FIFO {:.1} us, short budget {:.1} us)",
        if a.max(b).max(c) <= 1000.0 {
            "met"
        } else {
            "NOT met"
        },
        a,
        b,
        c
    );
}
