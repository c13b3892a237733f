//! The driving graph wired to the regression harness ([`redline_bench::regress`]): one
//! measured replay of a frame source, repetitions in this process, and the facts about a
//! run that only the config file knows (config hash, release mode, slowdowns, ...).
//!
//! Contract: a replay measured here runs exactly as `redline replay` runs it (a fresh
//! runtime from [`start_runtime`], the same recording publisher); start-up is not
//! measured, the config's `[regress] warmup_frames` are run and forgotten. Off the hot
//! path apart from the replay itself.

use std::sync::Arc;

use redline_bench::regress::measure::{measure_runtime, SetupFacts};
use redline_bench::regress::measurement::TimelineFrame;
use redline_bench::regress::Measurement;
use redline_pipeline::run::{
    evaluate, evaluate_quality, start_runtime, Counters, FrameTiming, RecordingPublisher,
    ReplayError,
};
use redline_pipeline::sensors::FrameSource;

use crate::config::RedlineConfig;

/// How a replay of `source` with `file` is configured, as a measurement records it.
pub fn setup_facts(file: &RedlineConfig, source: &str) -> SetupFacts {
    let cfg = &file.pipeline;
    SetupFacts {
        config_hash: file.config_hash(),
        release: format!("{:?}", cfg.release),
        lanes: cfg.lanes,
        frame_slots: cfg.frame_slots,
        perception: format!("{:?}", cfg.perception),
        slowdown: cfg
            .slowdown
            .iter()
            .map(|(stage, s)| format!("{stage}: {s}"))
            .collect(),
        source: source.to_string(),
    }
}

/// Each published frame's number, latency and whether it was a fallback.
pub fn timeline_of(timing: &[FrameTiming]) -> Vec<TimelineFrame> {
    timing
        .iter()
        .map(|t| TimelineFrame {
            frame: t.frame,
            latency_ns: t.latency_ns,
            fallback: t.fallback,
        })
        .collect()
}

/// One replay of `feed` (`frames` at most, warm-up included), measured, with its quality
/// figures against the ground truth ([`redline_pipeline::eval::Quality::headline`], over
/// every frame replayed, warm-up included: quality does not warm up) in each repetition.
/// A log without ground truth records none.
pub fn measure_replay(
    file: &RedlineConfig,
    feed: &Arc<dyn FrameSource>,
    frames: Option<u64>,
    label: &str,
) -> Result<Measurement, ReplayError> {
    let (mut rt, _info) = start_runtime(&file.pipeline, feed)?;
    let n = frames
        .unwrap_or(feed.frame_count() as u64)
        .min(feed.frame_count() as u64);
    let mut publisher = RecordingPublisher::new(n as usize, Arc::new(Counters::default()));
    let mut m = measure_runtime(
        &mut rt,
        &setup_facts(file, feed.describe()),
        n,
        file.regress.warmup_frames,
        label,
        &mut publisher,
    );
    let ev = evaluate(feed.as_ref(), &publisher.records);
    let quality = evaluate_quality(feed.as_ref(), &publisher.records, &ev)
        .summary()
        .headline();
    for r in &mut m.reps {
        r.quality = quality.clone();
    }
    Ok(m)
}

/// `reps` replays in this process; `on_rep(i, m)` after each (progress).
pub fn measure_in_process(
    file: &RedlineConfig,
    feed: &Arc<dyn FrameSource>,
    frames: Option<u64>,
    reps: usize,
    label: &str,
    on_rep: &mut dyn FnMut(usize, &Measurement),
) -> Result<Vec<Measurement>, ReplayError> {
    let mut out = Vec::with_capacity(reps);
    for i in 0..reps {
        let m = measure_replay(file, feed, frames, label)?;
        on_rep(i, &m);
        out.push(m);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_pipeline::config::Slowdown;

    #[test]
    fn setup_facts_name_the_slowdowns_and_the_config() {
        let mut file = RedlineConfig::default();
        file.pipeline.slowdown.insert(
            "backbone".into(),
            Slowdown {
                percent: 20.0,
                busy_ms: 1.5,
            },
        );
        let s = setup_facts(&file, "drive.mcap");
        assert_eq!(s.slowdown, ["backbone: +20% +1.5 ms"]);
        assert_eq!(s.config_hash, file.config_hash());
        assert_eq!(
            (s.release.as_str(), s.lanes, s.perception.as_str()),
            ("RealTime", 2, "Network")
        );
        assert_eq!(s.source, "drive.mcap");
    }
}
