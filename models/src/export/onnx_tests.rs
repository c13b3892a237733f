//! Tests of the ONNX writer: bit-exact with the native network through the importer,
//! deterministic, the committed built-in files current, `onnx.checker` clean.

use super::*;
use crate::engine::io_quant::io_quant;
use crate::engine::Inline;
use crate::export::builtin;
use crate::onnx::NativeEngine;
use redline_runtime::rng::SplitMix64;

fn small_cfg() -> NetConfig {
    NetConfig {
        in_h: 16,
        in_w: 24,
        feat_c: 8,
        bev_c: 8,
        seed: 11,
        ..NetConfig::default()
    }
}

fn small_opts() -> ExportOptions {
    ExportOptions {
        cameras: 2,
        bev_ny: 4,
        bev_nx: 5,
        ..ExportOptions::default()
    }
}

fn bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

fn run(model: &[u8], name: &str, inputs: &[&[u8]]) -> Vec<Vec<i8>> {
    let mut e = NativeEngine::from_bytes(model, name).expect("the importer compiles the model");
    let outs = crate::engine::run_once(&mut e, inputs, &Inline).expect("run");
    outs.into_iter()
        .map(|v| v.into_iter().map(|x| x as i8).collect())
        .collect()
}

/// Written models run by the importer equal the native network, output for output.
fn check_bit_exact(cfg: &NetConfig, opts: &ExportOptions) {
    let m = onnx_models(cfg, opts).expect("write");
    let bb = Backbone::new(cfg).expect("backbone");
    let det = DetHead::new(cfg, opts.bev_ny, opts.bev_nx).expect("det");
    let seg = SegHead::new(cfg, opts.bev_ny, opts.bev_nx).expect("seg");

    let (h, w, c) = bb.input_shape();
    let mut rng = SplitMix64::stream(0xB17E, 0);
    let images: Vec<i8> = (0..opts.cameras * h * w * c)
        .map(|_| rng.next_i8())
        .collect();
    let (fh, fw, fc) = bb.output_shape();
    let mut want = vec![0i8; opts.cameras * fh * fw * fc];
    let mut scratch = vec![0i8; bb.scratch_len()];
    for (img, out) in images
        .chunks_exact(h * w * c)
        .zip(want.chunks_exact_mut(fh * fw * fc))
    {
        bb.forward(img, &mut scratch, out).expect("native backbone");
    }
    let got = run(&m.backbone, "backbone", &[&bytes(&images)]);
    assert_eq!(got.len(), 1);
    assert!(
        got[0] == want,
        "backbone: importer output differs from the native backbone"
    );

    let q = bb.output_q();
    let bev: Vec<i8> = (0..opts.bev_ny * opts.bev_nx * cfg.bev_c)
        .map(|_| {
            if rng.next_u64() & 1 == 0 {
                q.zero_point
            } else {
                rng.next_i8().max(q.zero_point)
            }
        })
        .collect();
    let (ny, nx, dc) = det.output_shape();
    let mut want = vec![0i8; ny * nx * dc];
    let mut scratch = vec![0i8; det.scratch_len()];
    det.forward(&bev, &mut scratch, &mut want)
        .expect("native det");
    let got = run(&m.det_head, "det_head", &[&bytes(&bev)]);
    assert_eq!(got.len(), 2, "det head: heatmap and boxes");
    let k = det.classes();
    let mut fused = Vec::with_capacity(want.len());
    for (hm, bx) in got[0].chunks_exact(k).zip(got[1].chunks_exact(dc - k)) {
        fused.extend_from_slice(hm);
        fused.extend_from_slice(bx);
    }
    assert!(
        fused == want,
        "det head: importer output differs from the native head"
    );

    let (ny, nx, sc) = seg.output_shape();
    let mut want = vec![0i8; ny * nx * sc];
    let mut scratch = vec![0i8; seg.scratch_len()];
    seg.forward(&bev, &mut scratch, &mut want)
        .expect("native seg");
    let got = run(&m.seg_head, "seg_head", &[&bytes(&bev)]);
    assert!(
        got.len() == 1 && got[0] == want,
        "seg head: importer output differs"
    );

    // The quantization the pipeline needs is readable from the graphs.
    let io = io_quant(&m.backbone, "backbone").expect("parse");
    assert_eq!(io.input(0), Some(bb.input_q()));
    assert_eq!(io.output(0), Some(bb.output_q()));
    let io = io_quant(&m.det_head, "det_head").expect("parse");
    assert_eq!(io.input(0), Some(det.input_q()));
    assert_eq!(io.output(0), Some(det.heat_q()));
    assert_eq!(io.output(1), Some(det.reg_q()));
    let io = io_quant(&m.seg_head, "seg_head").expect("parse");
    assert_eq!(io.output(0), Some(seg.logit_q()));
}

#[test]
fn written_models_are_bit_exact_with_the_native_network() {
    check_bit_exact(&small_cfg(), &small_opts());
    check_bit_exact(
        &NetConfig {
            seed: 99,
            in_h: 32,
            in_w: 40,
            ..small_cfg()
        },
        &ExportOptions {
            cameras: 1,
            bev_ny: 3,
            bev_nx: 7,
            ..small_opts()
        },
    );
}

#[test]
fn the_builtin_network_is_bit_exact_through_the_importer() {
    check_bit_exact(&builtin::net_config(), &builtin::options());
}

#[test]
fn writing_is_deterministic() {
    let a = onnx_models(&small_cfg(), &small_opts()).expect("a");
    let b = onnx_models(&small_cfg(), &small_opts()).expect("b");
    assert_eq!(a, b);
    let other = onnx_models(
        &NetConfig {
            seed: 12,
            ..small_cfg()
        },
        &small_opts(),
    )
    .expect("c");
    assert_ne!(
        a.backbone, other.backbone,
        "positive control: other weights, other bytes"
    );
}

#[test]
fn builtin_files_match_the_writer() {
    let now = onnx_models(&builtin::net_config(), &builtin::options()).expect("write");
    for ((name, committed), (_, fresh)) in builtin::models().files().iter().zip(now.files()) {
        assert!(
            *committed == fresh,
            "models/builtin/{name} differs from what the writer produces now; regenerate with \
             `cargo run -p redline-models --example write_builtin_models` and commit it"
        );
    }
    // Small enough to commit and embed.
    let total: usize = now.files().iter().map(|f| f.1.len()).sum();
    assert!(total < 256 * 1024, "built-in models are {total} bytes");
}

#[test]
fn onnx_checker_accepts_the_written_models() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import onnx"])
        .output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        eprintln!("SKIPPED: onnx_checker_accepts_the_written_models: python3 with the `onnx` package is not available (pip install onnx)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("redline-onnx-check-{}", std::process::id()));
    let paths = write_onnx_models(&small_cfg(), &small_opts(), &dir).expect("write");
    for p in &paths {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys, onnx; m = onnx.load(sys.argv[1]); onnx.checker.check_model(m, full_check=True)",
            ])
            .arg(p)
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "onnx.checker rejects {}: {}",
            p.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_are_errors() {
    let e = onnx_models(
        &small_cfg(),
        &ExportOptions {
            cameras: 0,
            ..small_opts()
        },
    )
    .unwrap_err();
    assert!(matches!(e, ExportError::InvalidOptions { .. }), "{e}");
    let e = io_quant(b"\xff\xff\xff", "junk").unwrap_err();
    assert!(e.to_string().contains("junk"), "{e}");
}
