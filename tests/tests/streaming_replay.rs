//! Streaming replay (`redline_sim::stream::StreamFeed`): a log replayed window by window in
//! bounded memory gives exactly the outputs of the same log held in memory (lockstep, any
//! window size); start/duration, several logs and loops give the frames they promise, with
//! stamps that keep increasing.

use std::sync::Arc;

use redline_pipeline::config::PipelineConfig;
use redline_pipeline::run::{replay, Counters};
use redline_pipeline::sensors::FrameSource;
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;
use redline_sim::log::{ReadLimits, SensorMap};
use redline_sim::stream::{StreamFeed, StreamOptions};
use redline_tests::{scenario_log, small_scenario, temp_dir};

fn lockstep() -> PipelineConfig {
    PipelineConfig {
        release: ReleaseMode::Lockstep,
        deadline_ms: 10_000.0,
        ..PipelineConfig::default()
    }
}

fn stream(logs: &[std::path::PathBuf], opts: StreamOptions) -> StreamFeed {
    StreamFeed::open(logs, ReadLimits::default(), &SensorMap::default(), opts).expect("opens")
}

#[test]
fn a_streamed_log_gives_the_outputs_of_the_log_in_memory() {
    let dir = temp_dir("stream");
    let log = dir.join("drive.mcap");
    scenario_log(small_scenario(3, 2.0), &log);
    let cfg = lockstep();
    let in_memory: Arc<dyn FrameSource> = Arc::new(Feed::from_log(&log, None).unwrap());
    let n = in_memory.frame_count();
    let (want, _) = replay(&cfg, in_memory, None, Arc::new(Counters::default())).unwrap();
    for window in [1, 7, 64] {
        let feed: Arc<dyn FrameSource> = Arc::new(stream(
            std::slice::from_ref(&log),
            StreamOptions {
                window,
                ..StreamOptions::default()
            },
        ));
        assert!(feed.frame_count() >= n, "the estimate is an upper bound");
        let (got, _) = replay(&cfg, feed.clone(), None, Arc::new(Counters::default())).unwrap();
        assert_eq!(feed.frame_count(), n, "exact once read to the end");
        assert_eq!(got.runtime.frames_published, n as u64);
        assert_eq!(got.output_hash, want.output_hash, "window {window}");
        assert_eq!(
            got.quality, want.quality,
            "window {window}: evaluation from kept truth"
        );
        let w = got.input_wait.expect("streamed");
        assert_eq!(w.windows, n.div_ceil(window) as u64, "window {window}");
    }
    // Positive control: a different log gives a different hash through the same path.
    let other = dir.join("other.mcap");
    scenario_log(small_scenario(4, 2.0), &other);
    let feed: Arc<dyn FrameSource> = Arc::new(stream(&[other], StreamOptions::default()));
    let (got, _) = replay(&cfg, feed, None, Arc::new(Counters::default())).unwrap();
    assert_ne!(got.output_hash, want.output_hash);
}

/// Frames of a stream, read to the end: (stamp, ego x) per frame.
fn drain(feed: &StreamFeed) -> Vec<(u64, f64)> {
    let mut v = Vec::new();
    while let Some(r) = feed.advance() {
        for k in r {
            let f = feed.frame(k).expect("in the window");
            v.push((f.stamp_ns, f.ego.x));
        }
    }
    v
}

#[test]
fn start_duration_several_logs_and_loops() {
    let dir = temp_dir("stream-opts");
    let log = dir.join("drive.mcap");
    let scenario = scenario_log(small_scenario(3, 2.0), &log);
    let n = scenario.frame_count();
    let period = scenario.period_ns();
    let all = drain(&stream(
        std::slice::from_ref(&log),
        StreamOptions::default(),
    ));
    assert_eq!(all.len(), n);

    // --start 0.5 --duration 1.0: the frames stamped in [0.5 s, 1.5 s) of log time.
    let part = drain(&stream(
        std::slice::from_ref(&log),
        StreamOptions {
            window: 5,
            start_ns: 500_000_000,
            duration_ns: Some(1_000_000_000),
            ..StreamOptions::default()
        },
    ));
    let want: Vec<(u64, f64)> = all
        .iter()
        .copied()
        .filter(|(t, _)| (500_000_000..1_500_000_000).contains(&(t - all[0].0)))
        .collect();
    assert_eq!(part, want);

    // two logs and two loops: four passes, stamps always increasing, poses repeating
    let twice = stream(
        &[log.clone(), log.clone()],
        StreamOptions {
            window: 9,
            loops: 2,
            ..StreamOptions::default()
        },
    );
    let frames = drain(&twice);
    assert_eq!(frames.len(), 4 * n);
    assert!(
        frames.windows(2).all(|w| w[1].0 > w[0].0),
        "stamps increase"
    );
    assert_eq!(
        frames[n].0,
        frames[n - 1].0 + period,
        "a pass starts one period on"
    );
    for pass in 0..4 {
        assert_eq!(
            frames[pass * n].1,
            all[0].1,
            "pass {pass} starts at the drive's start"
        );
    }
    assert_eq!(twice.frame_count(), 4 * n);
    assert!(twice.truth(4 * n - 1).is_some() && twice.truth(4 * n).is_none());

    // max frames, and reading everything into memory
    let few = stream(
        std::slice::from_ref(&log),
        StreamOptions {
            max_frames: Some(10),
            ..StreamOptions::default()
        },
    );
    let feed = few.into_feed().unwrap();
    assert_eq!(feed.frames.len(), 10);
}
