//! Export of the reference network (backbone, detection head, segmentation head) for an
//! ONNX exporter: every layer's INT8 tensors in one `.safetensors` file plus a JSON sidecar
//! with the topology and quantization parameters, and a seeded test input with the native
//! engine's outputs for it, so that another engine (ONNX Runtime through
//! `tools/onnx/export_qdq.py` and `tools/onnx/compare.py`) can be checked value for value.
//!
//! # Contract
//!
//! [`export_network`] writes two files into a directory (created if missing):
//!
//! - [`TENSORS_FILE`] (safetensors): per layer `<graph>.<layer>.weight` (`I8`,
//!   `[out_c, k, k, in_c]`, i.e. OHWI, the native layout), `<graph>.<layer>.w_scales` (`F32`,
//!   `[out_c]`), `<graph>.<layer>.bias` (`I32`, `[out_c]`, scale `in_scale * w_scale[c]`);
//!   per graph `test.<graph>.input` and `test.<graph>.output` (`I8`, NHWC, the output being
//!   the native engine's, channel groups side by side as the native heads write them).
//! - [`META_FILE`] (JSON, [`ExportMeta`]): format version, the [`NetConfig`], and per graph
//!   its input, its outputs (with the channel range each covers in the native output), and
//!   its layers in execution order: kind, shape, `relu`, input/output [`QParams`](crate::quant::QParams), the names
//!   of the layer's input and output tensors (so a head's two output convolutions reading
//!   one hidden tensor are explicit), and the names of its safetensors entries.
//!
//! Three graphs, because the BEV view transform between the backbone and the heads is not
//! part of the ONNX model: `backbone` (batch = cameras, `in_h × in_w × 3` each),
//! `det_head` and `seg_head` (batch 1, the `ny × nx × bev_c` BEV grid). The test input of the
//! backbone is a seeded random image per camera; that of the heads a seeded random post-ReLU
//! BEV grid in the heads' input quantization (half of the values at the zero point).
//!
//! Scales are `f32` values; JSON carries them in their shortest round-trip decimal form, so
//! reading them back as `float32` gives the exact same bits.
//!
//! Layout: `meta` holds the JSON sidecar's types ([`ExportMeta`] and its parts); this
//! file builds the network, runs it and writes both files.
//!
//! # Cost
//!
//! Construction-time tooling: builds and calibrates the network, runs the native engine
//! once on the test input and writes a few hundred kB. Allocates freely; never call it per
//! frame. Deterministic: the same [`NetConfig`] and [`ExportOptions`] give byte-identical
//! files.
//!
//! # Never
//!
//! Never panics on bad input (errors are [`ExportError`] values naming the file or option at
//! fault), never writes outside `dir`, never reads the clock or spawns threads.

use crate::conv::{Conv2d, ModelError};
use crate::network::{Backbone, DetHead, NetConfig, SegHead};
use redline_runtime::rng::SplitMix64;
use safetensors::tensor::{Dtype, TensorView};
use std::path::{Path, PathBuf};

pub mod builtin;
mod meta;
pub mod onnx;
pub mod trained;

pub use meta::{ConfigMeta, ExportMeta, GraphMeta, LayerMeta, OutputMeta, QMeta};

/// Version of the file layout written by [`export_network`]; readers check it.
pub const FORMAT_VERSION: u32 = 1;
/// Name of the tensor file inside the export directory.
pub const TENSORS_FILE: &str = "network.safetensors";
/// Name of the JSON sidecar inside the export directory.
pub const META_FILE: &str = "network.json";
/// Default BEV grid `(ny, nx)`: the pipeline's default grid (80 m × 48 m at 1 m cells).
pub const DEFAULT_BEV_GRID: (usize, usize) = (48, 80);
/// Default number of cameras in the backbone's test batch (the default rig: six surround
/// cameras and the front telephoto).
pub const DEFAULT_CAMERAS: usize = 7;
/// Stream ids of the test inputs (distinct from the network's weight streams).
const TEST_IMAGES_STREAM: u64 = 0xE00;
const TEST_BEV_STREAM: u64 = 0xE01;

/// Everything that can go wrong exporting the network.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The network could not be built or run.
    #[error("cannot build or run the network to export: {0}")]
    Model(#[from] ModelError),
    /// The export options are unusable.
    #[error("invalid export options: {reason}")]
    InvalidOptions {
        /// What is wrong and what to do.
        reason: String,
    },
    /// A file or directory could not be written.
    #[error("cannot write {path}: {source} (check that the directory is writable and the disk not full)")]
    Io {
        /// The path at fault.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The safetensors file could not be encoded.
    #[error("cannot encode the safetensors file {path}: {reason}")]
    Safetensors {
        /// The path being written.
        path: PathBuf,
        /// The encoder's message.
        reason: String,
    },
    /// The JSON sidecar could not be encoded.
    #[error("cannot encode the JSON sidecar: {0}")]
    Json(#[from] serde_json::Error),
}

/// What to export besides the network configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// Cameras in the backbone's test batch (1..=64).
    pub cameras: usize,
    /// BEV grid rows of the heads (1..=4096).
    pub bev_ny: usize,
    /// BEV grid columns of the heads (1..=4096).
    pub bev_nx: usize,
    /// Seed of the test inputs.
    pub test_seed: u64,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            cameras: DEFAULT_CAMERAS,
            bev_ny: DEFAULT_BEV_GRID.0,
            bev_nx: DEFAULT_BEV_GRID.1,
            test_seed: 0x0DD5_0E1A,
        }
    }
}

impl ExportOptions {
    pub(crate) fn validate(&self) -> Result<(), ExportError> {
        if !(1..=64).contains(&self.cameras) {
            return Err(ExportError::InvalidOptions {
                reason: format!("cameras = {}: must be in 1..=64", self.cameras),
            });
        }
        if !(1..=4096).contains(&self.bev_ny) || !(1..=4096).contains(&self.bev_nx) {
            return Err(ExportError::InvalidOptions {
                reason: format!(
                    "BEV grid {}x{}: both sides must be in 1..=4096",
                    self.bev_ny, self.bev_nx
                ),
            });
        }
        Ok(())
    }
}

/// What [`export_network`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportSummary {
    /// The safetensors file.
    pub tensors_path: PathBuf,
    /// The JSON sidecar.
    pub meta_path: PathBuf,
    /// Tensors written.
    pub tensor_count: usize,
    /// The sidecar's content.
    pub meta: ExportMeta,
}

/// The network in the shape the export and the ONNX comparison use: the backbone and both
/// heads on one BEV grid, plus the seeded test inputs.
#[derive(Clone, Debug)]
pub struct ReferenceNetwork {
    /// The shared camera backbone.
    pub backbone: Backbone,
    /// The detection head.
    pub det: DetHead,
    /// The segmentation head.
    pub seg: SegHead,
    /// Test images, `cameras × in_h × in_w × 3` NHWC `i8`.
    pub test_images: Vec<i8>,
    /// Test BEV grid, `ny × nx × bev_c` NHWC `i8` in the heads' input quantization.
    pub test_bev: Vec<i8>,
    /// The options it was built with.
    pub options: ExportOptions,
}

/// Native outputs of a [`ReferenceNetwork`] on its test inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeOutputs {
    /// Backbone features, `cameras × fh × fw × feat_c`.
    pub features: Vec<i8>,
    /// Detection head output, `ny × nx × (classes + 6)`.
    pub det: Vec<i8>,
    /// Segmentation logits, `ny × nx × seg_classes`.
    pub seg: Vec<i8>,
}

impl ReferenceNetwork {
    /// Builds the seeded, calibrated network for `cfg` and the test inputs for `opts`.
    pub fn new(cfg: &NetConfig, opts: &ExportOptions) -> Result<Self, ExportError> {
        opts.validate()?;
        let backbone = Backbone::new(cfg)?;
        let q = backbone.output_q();
        let det = DetHead::with_input_q(cfg, opts.bev_ny, opts.bev_nx, q)?;
        let seg = SegHead::with_input_q(cfg, opts.bev_ny, opts.bev_nx, q)?;
        let (h, w, c) = backbone.input_shape();
        let mut rng = SplitMix64::stream(opts.test_seed, TEST_IMAGES_STREAM);
        let test_images = (0..opts.cameras * h * w * c)
            .map(|_| rng.next_i8())
            .collect();
        let mut rng = SplitMix64::stream(opts.test_seed, TEST_BEV_STREAM);
        let zp = i32::from(q.zero_point);
        let test_bev = (0..opts.bev_ny * opts.bev_nx * cfg.bev_c)
            .map(|_| {
                if rng.next_u64() & 1 == 0 {
                    q.zero_point
                } else {
                    rng.range_i32(zp, 127) as i8
                }
            })
            .collect();
        Ok(Self {
            backbone,
            det,
            seg,
            test_images,
            test_bev,
            options: *opts,
        })
    }

    /// Runs the native engine (single thread) on the test inputs.
    pub fn run_native(&self) -> Result<NativeOutputs, ExportError> {
        let (h, w, c) = self.backbone.input_shape();
        let (fh, fw, fc) = self.backbone.output_shape();
        let (in_len, out_len) = (h * w * c, fh * fw * fc);
        let mut scratch = vec![0i8; self.backbone.scratch_len()];
        let mut features = vec![0i8; self.options.cameras * out_len];
        for (img, feat) in self
            .test_images
            .chunks_exact(in_len)
            .zip(features.chunks_exact_mut(out_len))
        {
            self.backbone.forward(img, &mut scratch, feat)?;
        }
        let (ny, nx, dc) = self.det.output_shape();
        let mut det = vec![0i8; ny * nx * dc];
        let mut scratch = vec![0i8; self.det.scratch_len()];
        self.det.forward(&self.test_bev, &mut scratch, &mut det)?;
        let (ny, nx, sc) = self.seg.output_shape();
        let mut seg = vec![0i8; ny * nx * sc];
        let mut scratch = vec![0i8; self.seg.scratch_len()];
        self.seg.forward(&self.test_bev, &mut scratch, &mut seg)?;
        Ok(NativeOutputs { features, det, seg })
    }
}

/// Exports the default-option network for `cfg` into `dir` (see the module docs).
pub fn export_network(cfg: &NetConfig, dir: &Path) -> Result<ExportSummary, ExportError> {
    export_network_with(cfg, &ExportOptions::default(), dir)
}

/// [`export_network`] with explicit options (camera count, BEV grid, test seed).
pub fn export_network_with(
    cfg: &NetConfig,
    opts: &ExportOptions,
    dir: &Path,
) -> Result<ExportSummary, ExportError> {
    let net = ReferenceNetwork::new(cfg, opts)?;
    let native = net.run_native()?;
    export_reference(cfg, &net, &native, dir)
}

/// Collects tensors (name, dtype, shape, little-endian bytes) for the safetensors file.
#[derive(Default)]
struct Tensors(Vec<(String, Dtype, Vec<usize>, Vec<u8>)>);

impl Tensors {
    fn i8(&mut self, name: &str, shape: Vec<usize>, v: &[i8]) {
        let bytes = v.iter().map(|&x| x as u8).collect();
        self.0.push((name.to_owned(), Dtype::I8, shape, bytes));
    }
    fn i32(&mut self, name: &str, v: &[i32]) {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.0
            .push((name.to_owned(), Dtype::I32, vec![v.len()], bytes));
    }
    fn f32(&mut self, name: &str, v: &[f32]) {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.0
            .push((name.to_owned(), Dtype::F32, vec![v.len()], bytes));
    }
}

/// Describes one conv layer and queues its tensors.
fn layer_meta(
    t: &mut Tensors,
    graph: &str,
    name: &str,
    conv: &Conv2d,
    input: &str,
    output: &str,
) -> LayerMeta {
    let base = format!("{graph}.{name}");
    let weight = format!("{base}.weight");
    let w_scales = format!("{base}.w_scales");
    let bias = format!("{base}.bias");
    t.i8(
        &weight,
        vec![conv.out_c, conv.k, conv.k, conv.in_c],
        &conv.weights,
    );
    t.f32(&w_scales, &conv.w_scales);
    t.i32(&bias, &conv.bias);
    LayerMeta {
        name: name.to_owned(),
        kind: "conv2d".to_owned(),
        input: input.to_owned(),
        output: output.to_owned(),
        in_c: conv.in_c,
        out_c: conv.out_c,
        k: conv.k,
        stride: conv.stride,
        pad: conv.pad,
        relu: conv.relu,
        in_q: conv.in_q.into(),
        out_q: conv.out_q.into(),
        weight,
        w_scales,
        bias,
    }
}

/// A 1x1 head: hidden layer, then output layers each writing one output tensor.
fn head_meta(
    t: &mut Tensors,
    graph: &str,
    layers: &[&Conv2d],
    out_names: &[&str],
    grid: (usize, usize),
) -> Result<(Vec<LayerMeta>, Vec<OutputMeta>), ExportError> {
    let (hidden, outs) = layers.split_first().ok_or(ExportError::InvalidOptions {
        reason: format!("head {graph} has no layers"),
    })?;
    if outs.len() != out_names.len() {
        return Err(ExportError::InvalidOptions {
            reason: format!(
                "head {graph} has {} output layers but {} output names",
                outs.len(),
                out_names.len()
            ),
        });
    }
    let mut metas = vec![layer_meta(t, graph, "hidden", hidden, "input", "hidden")];
    let mut outputs = Vec::with_capacity(outs.len());
    let mut first = 0;
    for (conv, &name) in outs.iter().zip(out_names) {
        metas.push(layer_meta(t, graph, name, conv, "hidden", name));
        outputs.push(OutputMeta {
            name: name.to_owned(),
            shape: [1, grid.0, grid.1, conv.out_c],
            q: conv.out_q.into(),
            native_channels: [first, first + conv.out_c],
        });
        first += conv.out_c;
    }
    Ok((metas, outputs))
}

fn export_reference(
    cfg: &NetConfig,
    net: &ReferenceNetwork,
    native: &NativeOutputs,
    dir: &Path,
) -> Result<ExportSummary, ExportError> {
    let opts = &net.options;
    let mut t = Tensors::default();
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Io { path, source }
    };

    // Backbone: a chain conv0 → conv1 → conv2.
    let (h, w, c) = net.backbone.input_shape();
    let (fh, fw, fc) = net.backbone.output_shape();
    let bb_layers = net.backbone.layers();
    let mut layers = Vec::with_capacity(bb_layers.len());
    for (i, conv) in bb_layers.iter().enumerate() {
        let input = if i == 0 {
            "input".to_owned()
        } else {
            format!("act{i}")
        };
        let output = if i + 1 == bb_layers.len() {
            "features".to_owned()
        } else {
            format!("act{}", i + 1)
        };
        layers.push(layer_meta(
            &mut t,
            "backbone",
            &format!("conv{i}"),
            conv,
            &input,
            &output,
        ));
    }
    let bb_in = [opts.cameras, h, w, c];
    let bb_out = [opts.cameras, fh, fw, fc];
    t.i8("test.backbone.input", bb_in.to_vec(), &net.test_images);
    t.i8("test.backbone.output", bb_out.to_vec(), &native.features);
    let backbone = GraphMeta {
        name: "backbone".into(),
        input: "input".into(),
        input_shape: bb_in,
        input_q: net.backbone.input_q().into(),
        outputs: vec![OutputMeta {
            name: "features".into(),
            shape: bb_out,
            q: net.backbone.output_q().into(),
            native_channels: [0, fc],
        }],
        layers,
        test_input: "test.backbone.input".into(),
        test_output: "test.backbone.output".into(),
        test_output_shape: bb_out,
        macs: net.backbone.macs() * opts.cameras as u64,
    };

    // Heads on the BEV grid.
    let grid = (opts.bev_ny, opts.bev_nx);
    let bev_shape = [1, grid.0, grid.1, cfg.bev_c];
    t.i8("test.bev", bev_shape.to_vec(), &net.test_bev);
    let mut heads = Vec::with_capacity(2);
    let det_layers: Vec<&Conv2d> = net.det.layers().collect();
    let seg_layers: Vec<&Conv2d> = net.seg.layers().collect();
    for (name, layers, outs, in_q, out_c, macs, out) in [
        (
            "det_head",
            det_layers,
            &["heatmap", "boxes"][..],
            net.det.input_q(),
            net.det.out_channels(),
            net.det.macs(),
            &native.det,
        ),
        (
            "seg_head",
            seg_layers,
            &["logits"][..],
            net.seg.input_q(),
            net.seg.out_channels(),
            net.seg.macs(),
            &native.seg,
        ),
    ] {
        let (layers, outputs) = head_meta(&mut t, name, &layers, outs, grid)?;
        let test_output = format!("test.{name}.output");
        let out_shape = [1, grid.0, grid.1, out_c];
        t.i8(&test_output, out_shape.to_vec(), out);
        heads.push(GraphMeta {
            name: name.into(),
            input: "input".into(),
            input_shape: bev_shape,
            input_q: in_q.into(),
            outputs,
            layers,
            test_input: "test.bev".into(),
            test_output,
            test_output_shape: out_shape,
            macs,
        });
    }

    let meta = ExportMeta {
        format_version: FORMAT_VERSION,
        tensors_file: TENSORS_FILE.into(),
        config: ConfigMeta {
            in_h: cfg.in_h,
            in_w: cfg.in_w,
            feat_c: cfg.feat_c,
            bev_c: cfg.bev_c,
            classes: cfg.classes,
            seg_classes: cfg.seg_classes,
            seed: cfg.seed,
            cameras: opts.cameras,
            bev_ny: opts.bev_ny,
            bev_nx: opts.bev_nx,
        },
        graphs: std::iter::once(backbone).chain(heads).collect(),
    };

    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tensors_path = dir.join(TENSORS_FILE);
    let meta_path = dir.join(META_FILE);
    let views =
        t.0.iter()
            .map(|(name, dtype, shape, bytes)| {
                TensorView::new(*dtype, shape.clone(), bytes)
                    .map(|v| (name.as_str(), v))
                    .map_err(|e| ExportError::Safetensors {
                        path: tensors_path.clone(),
                        reason: format!("tensor {name}: {e:?}"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
    let tensor_count = views.len();
    let bytes =
        safetensors::tensor::serialize(views, &None).map_err(|e| ExportError::Safetensors {
            path: tensors_path.clone(),
            reason: format!("{e:?}"),
        })?;
    std::fs::write(&tensors_path, bytes).map_err(io_err(&tensors_path))?;
    let json = serde_json::to_vec_pretty(&meta)?;
    std::fs::write(&meta_path, json).map_err(io_err(&meta_path))?;
    Ok(ExportSummary {
        tensors_path,
        meta_path,
        tensor_count,
        meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::SafeTensors;

    fn small_cfg() -> NetConfig {
        NetConfig {
            in_h: 16,
            in_w: 24,
            feat_c: 8,
            bev_c: 8,
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

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("redline-export-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn export_round_trips_tensors_and_metadata() {
        let cfg = small_cfg();
        let opts = small_opts();
        let dir = temp_dir("roundtrip");
        let s = export_network_with(&cfg, &opts, &dir).expect("export");
        let bytes = std::fs::read(&s.tensors_path).expect("read tensors");
        let st = SafeTensors::deserialize(&bytes).expect("parse safetensors");
        assert_eq!(st.len(), s.tensor_count);
        let meta: ExportMeta =
            serde_json::from_slice(&std::fs::read(&s.meta_path).expect("read meta"))
                .expect("parse meta");
        assert_eq!(meta, s.meta);
        assert_eq!(meta.format_version, FORMAT_VERSION);
        let names: Vec<&str> = meta.graphs.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["backbone", "det_head", "seg_head"]);

        let net = ReferenceNetwork::new(&cfg, &opts).expect("net");
        let bb = &meta.graphs[0];
        assert_eq!(bb.layers.len(), 3);
        for (l, conv) in bb.layers.iter().zip(net.backbone.layers()) {
            let wt = st.tensor(&l.weight).expect("weight");
            assert_eq!(wt.dtype(), Dtype::I8);
            assert_eq!(wt.shape(), [conv.out_c, conv.k, conv.k, conv.in_c]);
            let w: Vec<i8> = wt.data().iter().map(|&b| b as i8).collect();
            assert_eq!(w, conv.weights);
            let sc: Vec<f32> = st
                .tensor(&l.w_scales)
                .expect("scales")
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_eq!(sc, conv.w_scales);
            let bias: Vec<i32> = st
                .tensor(&l.bias)
                .expect("bias")
                .data()
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_eq!(bias, conv.bias);
            assert_eq!(l.in_q.scale.to_bits(), conv.in_q.scale.to_bits());
            assert_eq!(l.out_q.scale.to_bits(), conv.out_q.scale.to_bits());
            assert_eq!(l.relu, conv.relu);
        }
        // The det head: hidden then two outputs side by side in the native tensor.
        let det = &meta.graphs[1];
        assert_eq!(det.layers.len(), 3);
        assert_eq!(det.layers[1].input, "hidden");
        assert_eq!(det.layers[2].input, "hidden");
        assert_eq!(det.outputs[0].native_channels, [0, cfg.classes]);
        assert_eq!(
            det.outputs[1].native_channels,
            [cfg.classes, cfg.classes + 6]
        );
        // Test outputs are the native engine's.
        let native = net.run_native().expect("native");
        let out = st.tensor("test.det_head.output").expect("det out");
        let got: Vec<i8> = out.data().iter().map(|&b| b as i8).collect();
        assert_eq!(got, native.det);
        let out = st.tensor("test.backbone.output").expect("bb out");
        assert_eq!(out.shape(), bb.test_output_shape);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn export_is_deterministic() {
        let (a, b) = (temp_dir("det-a"), temp_dir("det-b"));
        let sa = export_network_with(&small_cfg(), &small_opts(), &a).expect("a");
        let sb = export_network_with(&small_cfg(), &small_opts(), &b).expect("b");
        for (x, y) in [
            (&sa.tensors_path, &sb.tensors_path),
            (&sa.meta_path, &sb.meta_path),
        ] {
            assert_eq!(std::fs::read(x).expect("x"), std::fs::read(y).expect("y"));
        }
        let _ = std::fs::remove_dir_all(&a);
        let _ = std::fs::remove_dir_all(&b);
    }

    #[test]
    fn bad_options_and_paths_are_errors() {
        let bad = ExportOptions {
            cameras: 0,
            ..small_opts()
        };
        let e = export_network_with(&small_cfg(), &bad, &temp_dir("bad")).unwrap_err();
        assert!(matches!(e, ExportError::InvalidOptions { .. }), "{e}");
        let bad_cfg = NetConfig {
            bev_c: 3,
            ..small_cfg()
        };
        let e = export_network_with(&bad_cfg, &small_opts(), &temp_dir("badcfg")).unwrap_err();
        assert!(matches!(e, ExportError::Model(_)), "{e}");
        // A regular file where the directory should be.
        let file = temp_dir("file");
        std::fs::write(&file, b"x").expect("write");
        let e = export_network_with(&small_cfg(), &small_opts(), &file).unwrap_err();
        assert!(matches!(e, ExportError::Io { .. }), "{e}");
        let _ = std::fs::remove_file(&file);
    }
}
