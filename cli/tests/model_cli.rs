//! `redline model info` and `redline model bench` on the tiny committed models of
//! `tests/fixtures/` (written by `tests/fixtures/make_fixtures.py`): the reports, the JSON
//! keys, exit codes and messages. Plumbing only: no assertion on any time.
//!
//! The onnxruntime parts need ONNX Runtime (`ORT_DYLIB_PATH` or the Python wheel); without
//! it they print a SKIPPED line instead of failing.

mod common;
use common::redline;

use std::path::{Path, PathBuf};
use std::process::Output;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn run(args: &[&str]) -> Output {
    redline().args(args).output().expect("start redline")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ort_missing(stderr: &str) -> bool {
    stderr.contains("ONNX Runtime library not found")
        || stderr.contains("ORT_DYLIB_PATH")
        || stderr.contains("libonnxruntime")
}

#[test]
fn info_reports_a_quantized_model() {
    let m = fixture("tiny_qdq_s8.onnx");
    let o = run(&["model", "info", m.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    for want in [
        "producer: redline-fixtures 1",
        "opset:    17",
        "image: float32 [1, 3, 8, 8]",
        "features: float32 [1, 4, 8, 8]",
        "Conv",
        "DequantizeLinear  4",
        "MACs:     6912",
        "native:      yes",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }

    let o = run(&["model", "info", m.to_str().unwrap(), "--json"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("info --json is one JSON object");
    assert_eq!(v["opset"], 17);
    assert_eq!(v["macs"], 6912);
    assert_eq!(v["ops"]["QuantizeLinear"], 2);
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([1, 3, 8, 8]));
    assert_eq!(v["engines"]["native"]["ok"], true);
    assert_eq!(v["engines"]["native"]["general_conv_macs"], 0);
    assert!(v["engines"]["onnxruntime"]["ok"].is_boolean());
    // No GPU in this build or on this machine: the CUDA entry says why, never a panic.
    let cuda = &v["engines"]["cuda"];
    if cuda["ok"] == false {
        let e = cuda["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("--features cuda") || e.contains("driver") || e.contains("NVRTC"),
            "{e}"
        );
    }
}

#[test]
fn info_shows_the_view_transform_a_shipped_model_declares() {
    let m = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/trained/det_head.onnx");
    let o = run(&["model", "info", m.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    for want in [
        "metadata:",
        "redline.role = det_head",
        "redline.bev_lift_m = ",
        "redline.bev_sampling = ",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let o = run(&["model", "info", m.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&o).0).expect("one JSON object");
    assert_eq!(v["metadata"]["redline.role"], "det_head");
    assert!(v["metadata"]["redline.bev_sampling"].is_string(), "{v}");
    // A model without metadata shows no metadata section.
    let o = run(&[
        "model",
        "info",
        fixture("tiny_qdq_s8.onnx").to_str().unwrap(),
    ]);
    assert!(!text(&o).0.contains("metadata:"));
}

#[test]
fn info_says_why_native_cannot_run_a_float_model() {
    let m = fixture("tiny_float_conv.onnx");
    let o = run(&["model", "info", m.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("native:"))
        .unwrap_or_else(|| panic!("no native line in:\n{out}"));
    assert!(line.contains("no:"), "{line}");
    assert!(
        line.contains("\"conv\"") && line.contains("Conv") && line.contains("a 3-D convolution"),
        "the reason names the node, the op and what it cannot run: {line}"
    );
    assert!(out.contains("MACs:     unknown"), "{out}");

    // The named dynamic batch dimension `N` is shown as `?` and listed as fixed to 1 (by
    // every engine); native then refuses the 3-D convolution, not the shape.
    let m = fixture("tiny_dynamic_batch.onnx");
    let o = run(&["model", "info", m.to_str().unwrap(), "--json"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["inputs"][0]["shape"],
        serde_json::json!([null, 3, 4, 8, 8])
    );
    assert_eq!(v["named_dims_fixed_to_1"], serde_json::json!(["N"]));
    assert_eq!(v["engines"]["native"]["ok"], false);
    let why = v["engines"]["native"]["error"].as_str().unwrap();
    assert!(why.contains("3-D") && !why.contains("dynamic"), "{why}");
    let o = run(&["model", "info", m.to_str().unwrap()]);
    let out = text(&o).0;
    assert!(out.contains("image: float32 [?, 3, 4, 8, 8]"), "{out}");
    assert!(
        out.contains("named dimensions N: every engine fixes them to 1"),
        "{out}"
    );

    // `bench` on it fails with the same reason, no panic.
    let m = fixture("tiny_float_conv.onnx");
    let o = run(&["model", "bench", m.to_str().unwrap(), "--iters", "3"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains("native engine cannot run") && err.contains("3-D convolution"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// The fixture `name` runs on the native engine (`model info` says so) and, timed against
/// ONNX Runtime (`model bench --against onnxruntime --json`), gives this JSON object; `None`
/// (after a loud SKIPPED) when ONNX Runtime is not installed.
fn native_against_onnx_runtime(name: &str) -> Option<serde_json::Value> {
    let m = fixture(name);
    let o = run(&["model", "info", m.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{name}: {out}\n{err}");
    assert!(out.contains("native:      yes"), "{name}: {out}");
    let o = run(&[
        "model",
        "bench",
        m.to_str().unwrap(),
        "--iters",
        "3",
        "--against",
        "onnxruntime",
        "--json",
    ]);
    let (out, err) = text(&o);
    if !o.status.success() && ort_missing(&err) {
        eprintln!("SKIPPED: ONNX Runtime is not available: {err}");
        return None;
    }
    assert!(o.status.success(), "{name}: {out}\n{err}");
    Some(serde_json::from_str(&out).expect("one JSON object"))
}

/// A float network (depthwise convolution, ReLU, transposed convolution, no Q/DQ) runs on
/// the native engine in `f32`; against ONNX Runtime its outputs agree within float
/// rounding.
#[test]
fn a_float_network_runs_natively() {
    let Some(v) = native_against_onnx_runtime("tiny_float_net.onnx") else {
        return;
    };
    assert_eq!(v["total_elements"], 2 * 16 * 16);
    let diff = v["max_abs_diff"].as_f64().unwrap();
    assert!(diff <= 1e-5, "native and ONNX Runtime differ by {diff}");
}

/// A quantized 1-D network (Conv1d and MaxPool1d over a `[1, 3, 16]` sequence, lifted to
/// 2-D at load), a `GridSample` warp and a TopK query selection (with an int64 output) run
/// on the native engine and give ONNX Runtime's outputs to the bit.
#[test]
fn sequences_grid_samples_and_query_selection_run_natively_and_match_onnx_runtime() {
    for (name, elements) in [
        ("tiny_sequence_qdq.onnx", 4 * 8),
        ("tiny_grid_warp.onnx", 2 * 4 * 7),
        ("tiny_query_select.onnx", 6 * 3 + 6),
    ] {
        let Some(v) = native_against_onnx_runtime(name) else {
            return;
        };
        assert_eq!(v["total_elements"], elements, "{name}");
        assert_eq!(v["differing_elements"], 0, "{name}: {v}");
    }
}

#[test]
fn info_on_a_file_that_is_not_onnx_fails_cleanly() {
    let d = std::env::temp_dir().join(format!("redline-model-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("notes.onnx");
    std::fs::write(&f, "this is not a protobuf\n").unwrap();
    for extra in [&[][..], &["--json"][..]] {
        let mut args = vec!["model", "info", f.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = run(&args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
        assert!(err.contains("not a usable ONNX model"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.is_empty(), "nothing on stdout: {out}");
    }
    let o = run(&["model", "info", d.join("missing.onnx").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("cannot read model"));
    let _ = std::fs::remove_dir_all(&d);
}

fn bench_json(args: &[&str]) -> Result<serde_json::Value, String> {
    let m = fixture("tiny_qdq_s8.onnx");
    let mut all = vec!["model", "bench", m.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let o = run(&all);
    let (out, err) = text(&o);
    if !o.status.success() {
        return Err(err);
    }
    assert_eq!(out.lines().count(), 1, "one JSON line on stdout:\n{out}");
    Ok(serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")))
}

#[test]
fn bench_json_has_the_keys() {
    for threads in ["1", "2"] {
        let v = bench_json(&["--iters", "3", "--warmup", "1", "--threads", threads]).unwrap();
        for k in [
            "p50_ms", "p99_ms", "max_ms", "gmacs", "engine", "threads", "iters",
        ] {
            assert!(v.get(k).is_some(), "missing {k}: {v}");
        }
        assert_eq!(v["engine"], "native");
        assert_eq!(v["threads"].to_string(), threads);
        assert_eq!(v["iters"], 3);
        assert_eq!(v["macs"], 6912);
        let (p50, p99, max) = (
            v["p50_ms"].as_f64().unwrap(),
            v["p99_ms"].as_f64().unwrap(),
            v["max_ms"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{v}");
    }
}

#[test]
fn bench_reads_input_files_and_checks_their_size() {
    let d = std::env::temp_dir().join(format!("redline-model-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let good = d.join("image.bin");
    let bad = d.join("short.bin");
    let bytes: Vec<u8> = (0..3 * 8 * 8)
        .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
        .collect();
    std::fs::write(&good, &bytes).unwrap();
    std::fs::write(&bad, &bytes[..100]).unwrap();
    let v = bench_json(&["--iters", "2", "--input", good.to_str().unwrap()]).unwrap();
    assert_eq!(v["seed"], serde_json::Value::Null);
    let err = bench_json(&["--iters", "2", "--input", bad.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("100 bytes") && err.contains("768"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `--save-outputs` writes each output of a run as raw bytes, named after the output and
/// the engine; one and two lanes write the same bytes, and the JSON lists the files.
#[test]
fn bench_saves_outputs_as_raw_files() {
    let d = std::env::temp_dir().join(format!("redline-model-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let mut saved = Vec::new();
    for threads in ["1", "2"] {
        let dir = d.join(threads);
        let v = bench_json(&[
            "--iters",
            "2",
            "--threads",
            threads,
            "--save-outputs",
            dir.to_str().unwrap(),
        ])
        .unwrap();
        let files = v["saved_outputs"].as_array().unwrap().clone();
        assert!(!files.is_empty(), "{v}");
        let mut bytes = Vec::new();
        for f in &files {
            let f = PathBuf::from(f.as_str().unwrap());
            assert!(f.starts_with(&dir), "{}", f.display());
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            assert!(name.ends_with(".native.bin"), "{name}");
            bytes.push(std::fs::read(&f).unwrap());
        }
        // The tiny model's one output: 256 elements.
        assert!(bytes.iter().map(Vec::len).sum::<usize>() >= 256, "{v}");
        saved.push(bytes);
    }
    assert_eq!(
        saved[0], saved[1],
        "one and two lanes saved different outputs"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bench_against_onnxruntime_compares_outputs() {
    let v = match bench_json(&[
        "--iters",
        "4",
        "--warmup",
        "1",
        "--block",
        "2",
        "--threads",
        "2",
        "--against",
        "onnxruntime",
    ]) {
        Ok(v) => v,
        Err(e) if ort_missing(&e) => {
            eprintln!("SKIPPED: ONNX Runtime is not available: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    for k in [
        "against_engine",
        "against_p50_ms",
        "against_p99_ms",
        "ratio_p50",
        "ratio_p99",
        "differing_elements",
        "max_abs_diff",
        "total_elements",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["against_engine"], "onnxruntime");
    assert_eq!(v["total_elements"], 256);
    // Counted, not judged: bit-exactness with ORT is the importer's tests' business (ORT's
    // kernels differ between CPUs).
    assert!(v["differing_elements"].as_u64().unwrap() <= 256, "{v}");
    assert!(v["max_abs_diff"].as_f64().unwrap() >= 0.0, "{v}");
    let r = v["ratio_p50"].as_f64().unwrap();
    let want = v["p50_ms"].as_f64().unwrap() / v["against_p50_ms"].as_f64().unwrap();
    assert!((r - want).abs() < 1e-9, "{v}");
    // ORT's workers stop spinning after each run unless asked to keep on.
    assert_eq!(v["ort_spin_after_run"], false, "{v}");
    let v = bench_json(&[
        "--iters",
        "2",
        "--warmup",
        "1",
        "--threads",
        "2",
        "--engine",
        "onnxruntime",
        "--ort-spin-after-run",
    ])
    .unwrap();
    assert_eq!(v["ort_spin_after_run"], true, "{v}");
}

#[test]
fn profile_lists_the_native_engines_steps() {
    let m = fixture("tiny_qdq_s8.onnx");
    // Each step alone, then (`--in-sequence`) every step in order, run after run.
    // `--threads 2`: in sequence, each step spread over two lanes of a redline runtime.
    for (extra, how) in [
        (vec![], "each timed alone"),
        (vec!["--in-sequence"], "timed in sequence"),
        (
            vec!["--threads", "2"],
            "2 threads (redline runtime, parallel_for), 5 steps, timed in sequence",
        ),
    ] {
        let mut args = vec![
            "model",
            "profile",
            m.to_str().unwrap(),
            "--engine",
            "native",
            "--reps",
            "3",
        ];
        args.extend(extra);
        let o = run(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(out.contains("on the native engine ("), "{out}");
        assert!(out.contains("convolutions, "), "names the kernels: {out}");
        assert!(out.contains(how), "{out}");
        assert!(out.contains("mean of 3 runs"), "{out}");
        // The fixture's one convolution (6912 MACs) and its quantize step are listed.
        assert!(out.contains("conv 3x3/1 3>4 8x8"), "{out}");
        assert!(out.contains("quantize"), "{out}");
    }

    // A model the native engine cannot compile is an error naming it, not a panic.
    let f = fixture("tiny_float_conv.onnx");
    let o = run(&[
        "model",
        "profile",
        f.to_str().unwrap(),
        "--engine",
        "native",
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(err.contains("the native engine cannot run"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
