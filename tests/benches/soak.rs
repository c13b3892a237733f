//! Soak: the built-in drive looped for 100,000 frames (lockstep, so every stage runs every
//! frame whatever the machine's load; the default config otherwise, network perception),
//! with resident memory sampled every 1,000 frames and heap allocations counted on every
//! thread: memory must be flat after warm-up.
//!
//! Not part of CI: it runs for a long time (about 25 ms a frame on a busy 2-core
//! development machine, so some 45 minutes). A bench target without the libtest harness (so
//! that nothing but the runtime runs while allocations are counted):
//!
//! ```sh
//! cargo bench -p redline-tests --bench soak               # 100,000 frames
//! REDLINE_SOAK_FRAMES=20000 cargo bench -p redline-tests --bench soak
//! REDLINE_SOAK_PERCEPTION=oracle cargo bench -p redline-tests --bench soak   # ~15x faster
//! ```
//!
//! `REDLINE_SOAK_PERCEPTION=oracle` replaces the network (preprocess, INT8 backbone, heads,
//! decode) by the ground-truth oracle: every other stage, the runtime, the arena and the
//! recording still run every frame, so a leak anywhere but in the network path still shows,
//! in a few minutes instead of most of an hour.
//!
//! It prints the resident set size (VmRSS of `/proc/self/status`) at 1k frames and every
//! 10k, and asserts that after warm-up (10,000 frames, or half a shorter run) the RSS never
//! rises more than [`RSS_SLACK_KB`] above its value then, and that
//! the runtime allocated nothing on the heap in all those frames. Positive control of the
//! allocation count: `pipeline_zero_alloc.rs` (same allocator, same graph).

use std::sync::Arc;

use redline_pipeline::config::{Perception, PipelineConfig};
use redline_pipeline::run::{start_runtime, Counters, RecordingPublisher};
use redline_pipeline::sensors::FrameSource;
use redline_runtime::ReleaseMode;
use redline_sim::feed::{Feed, Looped};
use redline_sim::scenario::ScenarioConfig;
use redline_tests::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

/// Frames between samples.
const CHUNK: u64 = 1_000;
/// Largest rise of the RSS after warm-up, kB: room for the allocator's and the kernel's
/// page-level noise, far below one leaked frame per chunk (a camera rig's frame is 590 kB).
const RSS_SLACK_KB: u64 = 4 * 1024;

/// Resident set size, kB (VmRSS of /proc/self/status; 0 where there is none).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let frames: u64 = std::env::var("REDLINE_SOAK_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let frames = frames.div_ceil(CHUNK).max(2) * CHUNK;
    // The first frames touch the pages of preallocated rings for the first time (the trace's
    // span ring holds 65,536 spans: about 6,000 frames of this graph), so the RSS may still
    // rise then without any allocation: flat is asserted after 10,000 frames (or half a
    // shorter run).
    let warm_up = ((frames / 2).min(10_000) / CHUNK).max(1) * CHUNK;
    let drive = Feed::from_scenario(&ScenarioConfig::default_drive(), None, &mut |_, _| {})
        .expect("the built-in drive renders");
    let looped: Arc<dyn FrameSource> = Arc::new(Looped::new(drive, frames as usize));
    let perception = match std::env::var("REDLINE_SOAK_PERCEPTION").as_deref() {
        Ok("oracle") => Perception::Oracle,
        Ok("network") | Err(_) => Perception::Network,
        Ok(other) => {
            eprintln!("soak: REDLINE_SOAK_PERCEPTION={other}: use network (default) or oracle");
            std::process::exit(2);
        }
    };
    eprintln!("soak: {frames} frames, {perception:?} perception, lockstep");
    let cfg = PipelineConfig {
        release: ReleaseMode::Lockstep,
        perception,
        // Lockstep has no frame guard; the deadline only sets when the watchdog writes a
        // stage off as hung (four deadlines of wall time): no stage hangs here, but a busy
        // machine must not get one written off.
        deadline_ms: 10_000.0,
        ..PipelineConfig::default()
    };
    let (mut rt, _) = start_runtime(&cfg, &looped).expect("the driving graph starts");
    // Records only for the last chunk's frames would need a ring: keep none (the
    // publisher stops recording once its capacity is reached, never growing).
    let mut publisher = RecordingPublisher::new(0, Arc::new(Counters::default()));
    let start = std::time::Instant::now();
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut allocs = (0u64, 0u64);
    let mut done = 0;
    while done < frames {
        let counting = done >= warm_up;
        if counting {
            ALLOC.start();
        }
        rt.run(CHUNK, &mut publisher);
        if counting {
            let (n, b) = ALLOC.stop();
            allocs = (allocs.0 + n, allocs.1 + b);
        }
        done += CHUNK;
        samples.push((done, rss_kb()));
        if done == CHUNK || done % 10_000 == 0 || done == frames {
            let r = rt.report();
            eprintln!(
                "soak: {done} frames, RSS {:.1} MB, {:.0} s, {} published, {} deadline misses",
                rss_kb() as f64 / 1024.0,
                start.elapsed().as_secs_f64(),
                r.frames_published,
                r.deadline_misses
            );
        }
    }
    let at_warm = samples
        .iter()
        .find(|(f, _)| *f == warm_up)
        .map(|s| s.1)
        .expect("a sample at the end of warm-up");
    let (worst_frame, worst) = samples
        .iter()
        .filter(|(f, _)| *f >= warm_up)
        .max_by_key(|(_, r)| *r)
        .copied()
        .unwrap_or((warm_up, at_warm));
    let last = samples.last().map(|s| s.1).unwrap_or(0);
    eprintln!(
        "soak: RSS after warm-up ({warm_up} frames) {:.1} MB, highest {:.1} MB (at {worst_frame}), \
         at the end ({frames}) {:.1} MB; {} allocations ({} bytes) after warm-up",
        at_warm as f64 / 1024.0,
        worst as f64 / 1024.0,
        last as f64 / 1024.0,
        allocs.0,
        allocs.1
    );
    assert!(at_warm > 0, "no /proc/self/status here: cannot measure RSS");
    assert_eq!(rt.report().frames_published, frames);
    assert_eq!(allocs, (0, 0), "heap allocations after warm-up");
    assert!(
        worst <= at_warm + RSS_SLACK_KB,
        "RSS grew by {} kB after warm-up (at frame {worst_frame}); samples (frame, kB): {samples:?}",
        worst - at_warm
    );
    eprintln!("soak: passed");
}
