//! End-to-end lockstep replay of a generated MCAP log: bit-identical outputs across runs and
//! for 1 and 2 lanes, every frame published, the log's frames all replayed.

use std::sync::Arc;

use redline_pipeline::config::PipelineConfig;
use redline_pipeline::run::replay;
use redline_pipeline::run::Counters;
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;
use redline_tests::{scenario_log, small_scenario, temp_dir};

fn run(feed: &Arc<Feed>, lanes: usize) -> String {
    let cfg = PipelineConfig {
        lanes,
        release: ReleaseMode::Lockstep,
        ..PipelineConfig::default()
    };
    let (outcome, _rt) =
        replay(&cfg, feed.clone(), None, Arc::new(Counters::default())).expect("replay runs");
    assert_eq!(outcome.runtime.frames_published, feed.frames.len() as u64);
    assert_eq!(outcome.runtime.deadline_misses, 0);
    outcome.output_hash
}

#[test]
fn lockstep_replay_of_a_generated_log_is_bit_identical_across_runs_and_lanes() {
    let dir = temp_dir("replay");
    let log = dir.join("drive.mcap");
    let scenario = scenario_log(small_scenario(3, 2.0), &log);
    let feed = Arc::new(Feed::from_log(&log, None).expect("log reads back"));
    assert_eq!(feed.frames.len(), scenario.frame_count());
    assert!(feed.issues.is_empty(), "{:?}", feed.issues);
    assert_eq!(feed.cameras.len(), 6);
    let one = run(&feed, 1);
    let two = run(&feed, 2);
    let again = run(&feed, 2);
    assert_eq!(one, two, "1 and 2 lanes differ");
    assert_eq!(two, again, "two runs differ");
    let _ = std::fs::remove_dir_all(dir);
}
