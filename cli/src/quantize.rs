//! `redline quantize`: calibrates the INT8 network on real camera frames (a recorded log or
//! the built-in scenario) and writes the weights file the pipeline loads
//! (`weights = "FILE"` in the config).
//!
//! # Contract
//!
//! - The network is the float form of the pipeline's default network
//!   ([`FloatNetwork::seeded`] with the default `weights_seed`), at the default input size.
//! - Calibration (pass 1): for each of the first `frames` frames, every camera image goes
//!   through the pipeline's preprocessing ([`Preprocess`], so the INT8 and float networks see
//!   the same quantized pixels), then the float backbone; the float features are projected
//!   to the BEV grid with the same projection table as the graph ([`BevProjector`], built as
//!   in [`redline_pipeline::graph::build`]: sources averaged, unseen cells 0), then the float heads.
//!   Every activation tensor is observed ([`NetworkCalibrator`]). The temporal cache is not
//!   run: it fuses convex combinations of BEV maps, which stay inside the observed range.
//! - Evaluation (pass 2, same frames): the INT8 networks built with min-max and with
//!   percentile ranges run beside the float network; per-layer SQNR (dB) of each is
//!   reported ([`QuantizeReport::table`]).
//! - The file written uses `method`; it records the method and the number of frames.
//! - Deterministic: same source, method and frame count give the same file, byte for byte.
//!
//! # Cost
//!
//! Offline tool: runs the float network twice and the INT8 network twice per frame and
//! camera, and keeps the preprocessed frames in memory (`frames · cameras · in_h · in_w · 3`
//! bytes). Never part of the frame loop.

use std::path::{Path, PathBuf};

use anyhow::Result;
use redline_models::calibrate::{
    CalibrateError, CalibrationMethod, NetworkCalibrator, NetworkSqnr, Tensor, DEFAULT_PERCENTILE,
};
use redline_models::conv::ModelError;
use redline_models::network::{Backbone, DetHead, FloatNetwork, SegHead};
use redline_models::quant::dequantize;
use redline_models::weights::{QuantizedNetwork, WeightsError};
use redline_pipeline::camera::project_ego;
use redline_pipeline::config::PipelineConfig;
use redline_pipeline::perception::{BevProjector, Preprocess};
use redline_pipeline::types::BevSpec;
use redline_sim::feed::Feed;
use redline_sim::scenario::ScenarioConfig;
use serde::Serialize;

/// Where the calibration frames come from.
#[derive(Clone, Debug)]
pub enum QuantizeSource {
    /// A recorded MCAP log.
    Log(PathBuf),
    /// The built-in scenario.
    Scenario(ScenarioConfig),
}

/// Why quantization failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// The frames could not be read or rendered.
    #[error("reading calibration frames from {source_name}: {message}")]
    Feed {
        /// Log path or "scenario".
        source_name: String,
        /// Cause.
        message: String,
    },
    /// No frames to calibrate on.
    #[error(
        "no calibration frames: {0} has no frames (or --frames is 0); give a log or \
         scenario with at least one frame"
    )]
    NoFrames(String),
    /// Preprocessing or BEV projection could not be set up for this camera rig.
    #[error("setting up {what} for the rig: {message}")]
    Setup {
        /// Which part.
        what: &'static str,
        /// Cause.
        message: String,
    },
    /// A network pass failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Calibration failed.
    #[error(transparent)]
    Calibrate(#[from] CalibrateError),
    /// The weights could not be built or written.
    #[error(transparent)]
    Weights(#[from] WeightsError),
}

/// One activation tensor's ranges and quantization error under both methods.
#[derive(Clone, Debug, Serialize)]
pub struct LayerSqnr {
    /// Tensor name (`backbone.0`, ..., `seg.logits`).
    pub tensor: &'static str,
    /// Observed `[min, max]`.
    pub min_max_range: (f32, f32),
    /// Percentile range.
    pub percentile_range: (f32, f32),
    /// SQNR with min-max ranges, dB.
    pub min_max_db: f64,
    /// SQNR with percentile ranges, dB.
    pub percentile_db: f64,
}

/// What `redline quantize` did.
#[derive(Clone, Debug, Serialize)]
pub struct QuantizeReport {
    /// Log path or scenario description.
    pub source: String,
    /// Frames calibrated on.
    pub frames: usize,
    /// Cameras per frame.
    pub cameras: usize,
    /// Method written to the file (label).
    pub method: String,
    /// Percentile compared in the table.
    pub percentile: f32,
    /// The file written.
    pub output: PathBuf,
    /// Per tensor, in network order.
    pub layers: Vec<LayerSqnr>,
}

impl QuantizeReport {
    /// The per-layer table for the terminal.
    pub fn table(&self) -> String {
        let mut s = format!(
            "calibrated on {} frames x {} cameras from {}; wrote {} ({})\n",
            self.frames,
            self.cameras,
            self.source,
            self.output.display(),
            self.method
        );
        s.push_str(&format!(
            "{:<12} {:>22} {:>22} {:>12} {:>12}\n",
            "tensor",
            "min-max range",
            format!("p{} range", self.percentile),
            "SQNR mm dB",
            "SQNR pct dB"
        ));
        for l in &self.layers {
            s.push_str(&format!(
                "{:<12} {:>22} {:>22} {:>12.2} {:>12.2}\n",
                l.tensor,
                format!("[{:.3}, {:.3}]", l.min_max_range.0, l.min_max_range.1),
                format!("[{:.3}, {:.3}]", l.percentile_range.0, l.percentile_range.1),
                l.min_max_db,
                l.percentile_db
            ));
        }
        s
    }
}

/// Float BEV projection through the graph's table: each cell averages its (up to two)
/// source feature vectors; unseen cells are 0.
fn project_float(
    proj: &BevProjector,
    bev: &BevSpec,
    feats: &[f32],
    (fh, fw, fc): (usize, usize, usize),
) -> Vec<f32> {
    let mut out = vec![0f32; bev.ny * bev.nx * fc];
    for iy in 0..bev.ny {
        for ix in 0..bev.nx {
            let dst = &mut out[(iy * bev.nx + ix) * fc..(iy * bev.nx + ix + 1) * fc];
            let src: Vec<&[f32]> = proj
                .sources(ix, iy)
                .iter()
                .flatten()
                .map(|s| {
                    let o = ((s.cam * fh + s.row) * fw + s.col) * fc;
                    &feats[o..o + fc]
                })
                .collect();
            match src.as_slice() {
                [a] => dst.copy_from_slice(a),
                [a, b] => {
                    for ((d, x), y) in dst.iter_mut().zip(*a).zip(*b) {
                        *d = (x + y) * 0.5;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Calibrates over `frames` frames of `source`, reports per-layer SQNR for min-max and
/// percentile ranges, and writes the INT8 weights calibrated with `method` to `out`.
pub fn run_quantize(
    source: QuantizeSource,
    out: &Path,
    method: CalibrationMethod,
    frames: usize,
) -> Result<QuantizeReport, QuantizeError> {
    method.validate()?;
    let (feed, name) = match &source {
        QuantizeSource::Log(p) => (Feed::from_log(p, Some(frames)), p.display().to_string()),
        QuantizeSource::Scenario(c) => (
            Feed::from_scenario(c, Some(frames), &mut |_, _| {}),
            format!("scenario seed {}", c.seed),
        ),
    };
    let feed = feed.map_err(|e| QuantizeError::Feed {
        source_name: name.clone(),
        message: e.to_string(),
    })?;
    let n = feed.frames.len().min(frames);
    if n == 0 {
        return Err(QuantizeError::NoFrames(name));
    }
    let net = PipelineConfig::default().net_config();
    let float = FloatNetwork::seeded(&net)?;
    let cams = feed.cameras.len();
    let (w, h) = (feed.width, feed.height);
    let pre = Preprocess::new(w, h, net.in_w, net.in_h).map_err(|e| QuantizeError::Setup {
        what: "preprocessing",
        message: e.to_string(),
    })?;
    let fshape = float.backbone_output_shape();
    let (fh, fw, fc) = fshape;
    let bev = BevSpec::DEFAULT;
    let rig = feed.cameras.clone();
    let project = move |c: usize, x: f64, y: f64, z: f64| -> Option<(f64, f64)> {
        project_ego(&rig[c], x, y, z).map(|(u, v, _)| (u, v))
    };
    // The seeded network samples one height, 0.5 m (the pipeline's `bev_lifts` for it).
    let proj = BevProjector::new(&bev, cams, w, h, fw, fh, fc, &[0.5], &project).map_err(|e| {
        QuantizeError::Setup {
            what: "the BEV projection",
            message: e.to_string(),
        }
    })?;
    let cells = bev.nx * bev.ny;
    let in_q = Backbone::new(&net)?.input_q();
    let img_len = net.in_h * net.in_w * 3;

    // Pass 1: observe the float network.
    let mut inputs: Vec<Vec<i8>> = Vec::with_capacity(n);
    let mut cal = NetworkCalibrator::new();
    for frame in &feed.frames[..n] {
        let mut q = vec![0i8; cams * img_len];
        let mut feats = Vec::with_capacity(cams * fh * fw * fc);
        for c in 0..cams {
            let dst = &mut q[c * img_len..(c + 1) * img_len];
            pre.run(&frame.images[c * w * h * 3..(c + 1) * w * h * 3], dst)
                .map_err(|e| QuantizeError::Setup {
                    what: "preprocessing",
                    message: e.to_string(),
                })?;
            let x: Vec<f32> = dst.iter().map(|&v| dequantize(v, in_q)).collect();
            feats.extend(cal.observe_backbone(&float, &x)?);
        }
        let fbev = project_float(&proj, &bev, &feats, fshape);
        cal.observe_heads(&float, &fbev, cells)?;
        inputs.push(q);
    }

    // Pass 2: SQNR of both methods against the float network.
    let p = match method {
        CalibrationMethod::Percentile(p) => p,
        CalibrationMethod::MinMax => DEFAULT_PERCENTILE,
    };
    let methods = [CalibrationMethod::MinMax, CalibrationMethod::Percentile(p)];
    let mut nets = Vec::with_capacity(2);
    for m in methods {
        let act = cal.act_qparams(m)?;
        let bb = Backbone::from_float(&float, &act.backbone)?;
        let det = DetHead::from_float(&float, &act, bev.ny, bev.nx)?;
        let seg = SegHead::from_float(&float, &act, bev.ny, bev.nx)?;
        nets.push((bb, det, seg, NetworkSqnr::new()));
    }
    for q in &inputs {
        let mut float_feats = Vec::with_capacity(cams * fh * fw * fc);
        let mut int_feats: Vec<Vec<i8>> = (0..2)
            .map(|_| Vec::with_capacity(cams * fh * fw * fc))
            .collect();
        for c in 0..cams {
            let img = &q[c * img_len..(c + 1) * img_len];
            let x: Vec<f32> = img.iter().map(|&v| dequantize(v, in_q)).collect();
            let acts = float.backbone_forward(&x)?;
            for ((bb, _, _, s), f) in nets.iter_mut().zip(int_feats.iter_mut()) {
                f.extend(s.add_backbone(bb, img, &acts)?);
            }
            float_feats.extend_from_slice(acts.last().map_or(&[][..], |v| v.as_slice()));
        }
        let fbev = project_float(&proj, &bev, &float_feats, fshape);
        for ((bb, det, seg, s), f) in nets.iter_mut().zip(&int_feats) {
            let mut qbev = vec![0i8; cells * fc];
            proj.project(f, bb.output_q().zero_point, &mut qbev)
                .map_err(|e| QuantizeError::Setup {
                    what: "the BEV projection",
                    message: e.to_string(),
                })?;
            s.add_heads(&float, det, seg, &qbev, &fbev)?;
        }
    }

    let act = cal.act_qparams(method)?;
    let qnet = QuantizedNetwork::from_calibration(float, &act, method, n)?;
    qnet.save(out)?;

    let layers = Tensor::ALL
        .iter()
        .map(|&t| {
            let o = cal.observer(t);
            LayerSqnr {
                tensor: t.name(),
                min_max_range: (o.min(), o.max()),
                percentile_range: o.percentile_range(p),
                min_max_db: nets[0].3.get(t).db(),
                percentile_db: nets[1].3.get(t).db(),
            }
        })
        .collect();
    Ok(QuantizeReport {
        source: name,
        frames: n,
        cameras: cams,
        method: method.label(),
        percentile: p,
        output: out.to_path_buf(),
        layers,
    })
}

#[derive(clap::Args, Debug)]
pub struct QuantizeArgs {
    /// MCAP log whose camera frames calibrate the network (default: the built-in scenario).
    pub log: Option<PathBuf>,
    /// Output weights file; load it with `weights = "FILE"` in a replay config.
    #[arg(short, long, default_value = "weights.safetensors")]
    pub out: PathBuf,
    /// Activation ranges: minmax, percentile (99.99) or percentile:P.
    #[arg(long, default_value = "minmax")]
    pub method: String,
    /// Frames to calibrate on.
    #[arg(long, default_value_t = 120)]
    pub frames: usize,
}

pub fn run(a: QuantizeArgs) -> Result<()> {
    use redline_models::calibrate::CalibrationMethod;
    let method = CalibrationMethod::parse(&a.method)?;
    let source = match a.log {
        Some(p) => QuantizeSource::Log(p),
        None => QuantizeSource::Scenario(ScenarioConfig::default_drive()),
    };
    let report = run_quantize(source, &a.out, method, a.frames)?;
    print!("{}", report.table());
    println!("wrote {}", a.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_pipeline::run::{replay, Counters};
    use redline_pipeline::sensors::FrameSource;
    use redline_runtime::ReleaseMode;
    use std::sync::Arc;

    fn small_scenario() -> ScenarioConfig {
        ScenarioConfig {
            seconds: 1.0,
            ..ScenarioConfig::default_drive()
        }
    }

    #[test]
    fn quantize_writes_weights_the_pipeline_loads() {
        let dir = std::env::temp_dir().join(format!("redline-quantize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("net.safetensors");
        let sc = small_scenario();
        let method = CalibrationMethod::Percentile(99.99);
        let report = run_quantize(QuantizeSource::Scenario(sc.clone()), &path, method, 10).unwrap();
        println!("{}", report.table());
        assert_eq!(report.frames, 10);
        assert_eq!(report.layers.len(), 8);
        let bb = &report.layers[2];
        assert_eq!(bb.tensor, "backbone.2");
        assert!(
            bb.min_max_db > 20.0,
            "backbone min-max SQNR {}",
            bb.min_max_db
        );
        assert!(
            bb.percentile_db > 20.0,
            "backbone pct SQNR {}",
            bb.percentile_db
        );
        // Both methods must keep every layer usable; which one is better depends on the
        // shape of the activations (percentile clipping loses when tails are light), so
        // the report shows both rather than the test ranking them.
        for l in &report.layers {
            assert!(
                l.percentile_db > 20.0 && l.min_max_db > 20.0,
                "{}: percentile {} dB, min-max {} dB",
                l.tensor,
                l.percentile_db,
                l.min_max_db
            );
        }
        assert!(report.table().contains("seg.logits"));

        // Deterministic file.
        let bytes = std::fs::read(&path).unwrap();
        let again = dir.join("again.safetensors");
        run_quantize(QuantizeSource::Scenario(sc.clone()), &again, method, 10).unwrap();
        assert_eq!(bytes, std::fs::read(&again).unwrap());
        let loaded = QuantizedNetwork::load(&path).unwrap();
        assert_eq!(loaded.frames, 10);
        assert_eq!(loaded.method, method);

        // The pipeline runs with the file, in lockstep, twice with the same result.
        let feed: Arc<dyn FrameSource> =
            Arc::new(Feed::from_scenario(&sc, Some(6), &mut |_, _| {}).unwrap());
        let cfg = PipelineConfig {
            weights: Some(path.clone()),
            release: ReleaseMode::Lockstep,
            ..PipelineConfig::default()
        };
        let run = |cfg: &PipelineConfig| {
            replay(cfg, feed.clone(), None, Arc::new(Counters::default())).map(|(o, _)| o)
        };
        let a = run(&cfg).unwrap();
        assert_eq!(a.runtime.frames_published, 6);
        let b = run(&cfg).unwrap();
        assert_eq!(a.output_hash, b.output_hash);

        // A broken file stops the graph with the reason.
        let bad = dir.join("bad.safetensors");
        std::fs::write(&bad, &bytes[..bytes.len() / 3]).unwrap();
        let err = run(&PipelineConfig {
            weights: Some(bad),
            ..cfg.clone()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("bad.safetensors"), "{err}");
        let err = run(&PipelineConfig {
            weights: Some(dir.join("missing.safetensors")),
            ..cfg
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("missing.safetensors"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The per-layer SQNR table on 120 frames of the default scenario:
    /// `cargo test -p redline-pipeline --lib -- --ignored --nocapture sqnr_table`.
    #[test]
    #[ignore]
    fn sqnr_table_on_the_default_scenario() {
        let out = std::env::temp_dir().join(format!("redline-sqnr-{}.st", std::process::id()));
        let r = run_quantize(
            QuantizeSource::Scenario(ScenarioConfig::default_drive()),
            &out,
            CalibrationMethod::Percentile(DEFAULT_PERCENTILE),
            120,
        )
        .unwrap();
        println!("{}", r.table());
        std::fs::remove_file(&out).ok();
        assert!(r.layers.iter().all(|l| l.min_max_db > 20.0));
    }

    #[test]
    fn bad_sources_are_errors() {
        let out = std::env::temp_dir().join("redline-never-written.safetensors");
        let e = run_quantize(
            QuantizeSource::Log(PathBuf::from("/nonexistent/log.mcap")),
            &out,
            CalibrationMethod::MinMax,
            5,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/log.mcap"), "{e}");
        let e = run_quantize(
            QuantizeSource::Scenario(small_scenario()),
            &out,
            CalibrationMethod::MinMax,
            0,
        )
        .unwrap_err();
        assert!(matches!(e, QuantizeError::NoFrames(_)), "{e}");
        let e = run_quantize(
            QuantizeSource::Scenario(small_scenario()),
            &out,
            CalibrationMethod::Percentile(10.0),
            3,
        )
        .unwrap_err();
        assert!(e.to_string().contains("percentile"), "{e}");
        assert!(!out.exists());
    }
}
