//! End-to-end lockstep replay of a generated MCAP log: bit-identical outputs across runs and
//! for 1, 2 and 4 lanes, equal to a pinned output hash (so a change to any output fails the
//! test even when all runs agree), every frame published, the log's frames all replayed.
//! Negative controls: the seeded network, and its weights one bit apart, give other hashes.

use std::sync::Arc;

use redline_models::engine::EngineKind;
use redline_pipeline::config::{Network, PipelineConfig};
use redline_pipeline::run::replay;
use redline_pipeline::run::Counters;
use redline_sim::feed::Feed;
use redline_tests::{lockstep_config, scenario_log, small_scenario, temp_dir};

/// The output hash (`ReplayOutcome::output_hash`) of the lockstep replay of
/// `small_scenario(3, 2.0)` with the default config. Integer INT8 arithmetic and float code
/// with one code path on every CPU, so the same on every platform (see DESIGN.md,
/// Determinism). If a deliberate change to the scenario, the network or any stage changes
/// it, the failure message prints the new value: paste it here and say in the commit why
/// the outputs changed.
const PINNED_OUTPUT_HASH: &str = "138a82c9d5df7633";

fn run(feed: &Arc<Feed>, lanes: usize, weights_seed: u64) -> String {
    run_with(
        feed,
        lanes,
        weights_seed,
        EngineKind::Native,
        Network::Trained,
    )
}

fn run_with(
    feed: &Arc<Feed>,
    lanes: usize,
    weights_seed: u64,
    engine: EngineKind,
    network: Network,
) -> String {
    let cfg = lockstep_config(lanes, weights_seed, engine, network);
    let (outcome, _rt) =
        replay(&cfg, feed.clone(), None, Arc::new(Counters::default())).expect("replay runs");
    assert_eq!(outcome.runtime.frames_published, feed.frames.len() as u64);
    let r = &outcome.runtime;
    assert_eq!(
        r.deadline_misses,
        0,
        "lanes={lanes} seed={weights_seed}: lockstep without a timing model never misses; \
         lost stages {:?}\n{}",
        r.lost_stages,
        r.table()
    );
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
    assert_eq!(
        feed.cameras.len(),
        7,
        "the default rig: six around and the telephoto"
    );
    let seed = PipelineConfig::default().weights_seed;
    let one = run(&feed, 1, seed);
    assert_eq!(
        one,
        PINNED_OUTPUT_HASH,
        "the driving graph's outputs changed: output hash {one}, pinned {PINNED_OUTPUT_HASH}. \
         If the change is deliberate, set PINNED_OUTPUT_HASH in {} to \"{one}\"",
        file!()
    );
    let two = run(&feed, 2, seed);
    let four = run(&feed, 4, seed);
    let again = run(&feed, 2, seed);
    assert_eq!(one, two, "1 and 2 lanes differ");
    assert_eq!(one, four, "1 and 4 lanes differ");
    assert_eq!(two, again, "two runs differ");
    // The same models on ONNX Runtime (the built-in files are QLinearConv graphs, whose
    // integer path ONNX Runtime computes exactly): the same outputs, bit for bit.
    if redline_models::engine::onnxruntime::find_library().is_ok() {
        let ort = run_with(&feed, 2, seed, EngineKind::OnnxRuntime, Network::Trained);
        assert_eq!(
            ort, one,
            "the built-in models on onnxruntime give other outputs"
        );
    } else {
        eprintln!("SKIPPED: ONNX Runtime is not available: the onnxruntime replay did not run");
    }
    // Negative controls: the seeded network instead of the trained one; and the seeded
    // network with weights seeded one bit apart.
    let seeded = run_with(&feed, 2, seed, EngineKind::Native, Network::Seeded);
    assert_ne!(
        seeded, one,
        "the trained and the seeded network give the same hash"
    );
    let perturbed = run_with(&feed, 2, seed ^ 2, EngineKind::Native, Network::Seeded);
    assert_ne!(
        perturbed,
        seeded,
        "weights_seed {seed} and {}: same output hash, so the hash ignores the outputs",
        seed ^ 2
    );
}
