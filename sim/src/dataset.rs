//! Training data for the driving network, written by the simulator: every frame of a set of
//! drives as the network sees it, with ground truth, plus the view-transform and temporal
//! tables the runtime uses, so that training code computes exactly what redline computes.
//!
//! # What is written (`DIR/`)
//!
//! - `meta.json`: the layout below (camera count, network input size, BEV grid, classes,
//!   temporal history length K, the drives and their scenario configs).
//! - `bev_sources_s{S}.npy`, `int32 [cells, 2]`, for each feature stride `S` asked for
//!   ([`FeatureStride`]: `4`, or `4x2` for a feature map a quarter of the input's width and
//!   half its height): the runtime's BEV view transform ([`view_transform`]'s
//!   `source_pixels`) for a backbone whose feature map is the network input divided by `S`:
//!   per BEV cell (row-major, `iy · nx + ix`), the stacked feature-map pixel
//!   `(cam · fh + row) · fw + col` of up to two sources, `-1` when absent. The runtime
//!   averages the two sources (one: copies it; none: zero). The table samples each cell at
//!   the first lift height of [`DatasetSpec::lifts_m`] (`meta.json` `lift_m`); each
//!   further height `i` (`lifts_m[i]`, `i >= 1`) has its own table,
//!   `bev_sources_s{S}_lift{i}.npy`, and a network that samples several heights
//!   concatenates their features in that order (the runtime's `bev_lift_m`).
//! - `bev_taps_s{S}.npy` (and `_lift{i}`), `int32 [cells, 4, 2]`, only when the spec's
//!   [`DatasetSpec::sampling`] is row-linear (`meta.json` `bev_sampling`, `"nearest"` or
//!   `"row_linear"`): the whole table then (its `source_taps`), per cell up to four taps
//!   `(pixel, weight in 1/256)`, `(-1, 0)` unused; the runtime writes
//!   `zp + round_half_away(Σ w (q − zp) / Σ w)`. `bev_sources_*` stay the nearest tables.
//! - `drive_NNN/input.npy`, `int8 [frames, cams, H, W, 3]`: the preprocessed, quantized
//!   network input of every frame, computed by the runtime's own [`Preprocess`] from the
//!   rendered images (`q = pixel − 128`, scale 1/128).
//! - `drive_NNN/ego.npy`, `float64 [frames, 4]`: x, y, yaw (world) and stamp (s).
//! - `drive_NNN/boxes.npy`, `float32 [frames, MAX_BOXES, 8]`: the ground-truth boxes inside
//!   the perception range ([`in_perception_range`]) in the **ego** frame: valid (1/0), class
//!   (0 car, 1 pedestrian, 2 cyclist), x, y, length, width, yaw, actor id.
//! - `drive_NNN/seg.npy`, `uint8 [frames, ny, nx]`: the BEV segmentation ground truth
//!   (0 other, 1 drivable, 2 lane marking): the evaluation's own
//!   [`seg_ground_truth`] of the road map the drive's log carries.
//! - `drive_NNN/warp.npy`, `int32 [frames, K, cells]`: the temporal cache's warp
//!   ([`TemporalCache::warp_sources`]): for history map `j` (the frame `t − 1 − j`), the
//!   cell of that frame's grid each current cell reads, `-1` outside the grid or before the
//!   first frame. The runtime fuses `(2 · current + Σ_j warped_j) / (2 + m)` with `m =
//!   min(t, K)` maps cached (outside cells contribute zero, but count).
//!
//! Deterministic: the same arguments give the same bytes. Cost: rendering and
//! preprocessing each frame (≈ 5 ms for six 256×128 cameras, split over the machine's
//! cores), `frames · cams · H · W · 3` bytes of input per drive; allocates freely (tooling,
//! not the frame path).

use std::io::Write;
use std::path::{Path, PathBuf};

use redline_pipeline::camera::CameraSpec;
use redline_pipeline::eval::seg_ground_truth;
use redline_pipeline::geometry::{world_to_ego, wrap_angle};
use redline_pipeline::graph::view_transform;
use redline_pipeline::models::ViewTransform;
use redline_pipeline::perception::{BevSampling, Preprocess, TemporalCache};
use redline_pipeline::sensors::in_perception_range;
use redline_pipeline::types::{BevSpec, EgoPose};
use serde::Serialize;

use crate::feed::{ego_pose, gt_boxes, scenario_map};
use crate::scenario::{Scenario, ScenarioConfig, ScenarioError};
use crate::types::RgbImage;

/// Most ground-truth boxes stored per frame (the rest are dropped and counted).
pub const MAX_BOXES: usize = 64;
/// Height at which BEV cells sample camera features (the runtime's, `graph.rs`), m.
pub const BEV_LIFT_M: f32 = 0.5;

/// What to write.
#[derive(Clone, Debug)]
pub struct DatasetSpec {
    /// One scenario per drive.
    pub drives: Vec<ScenarioConfig>,
    /// Network input width and height, px.
    pub net_w: usize,
    /// Network input height, px.
    pub net_h: usize,
    /// Feature strides to export view-transform tables for.
    pub strides: Vec<FeatureStride>,
    /// Temporal history length K (the runtime's `bev_cache_frames`).
    pub history: usize,
    /// Heights at which BEV cells sample camera features, m (the runtime's `bev_lift_m`):
    /// one view-transform table per height and stride. Default `[BEV_LIFT_M]`.
    pub lifts_m: Vec<f32>,
    /// How BEV cells read the feature maps (the runtime's `bev_sampling`).
    pub sampling: BevSampling,
}

/// A backbone's feature stride: its feature map is the network input's width divided by
/// `x` and its height divided by `y`. Written and parsed as `4` (both 4) or `4x2` (width
/// stride 4, height stride 2: twice the rows, which is twice the range resolution of the
/// view transform far ahead, where a ground point moves a fraction of a pixel per metre).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureStride {
    /// Horizontal stride (input width / feature width).
    pub x: usize,
    /// Vertical stride (input height / feature height).
    pub y: usize,
}

impl FeatureStride {
    /// The same stride in both directions.
    pub const fn square(s: usize) -> Self {
        Self { x: s, y: s }
    }
}

impl std::fmt::Display for FeatureStride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.x == self.y {
            write!(f, "{}", self.x)
        } else {
            write!(f, "{}x{}", self.x, self.y)
        }
    }
}

/// A square stride as a number (`4`), another as its name (`"4x2"`): readers of the
/// datasets written before there were other strides, which had only numbers, still read it.
impl Serialize for FeatureStride {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        if self.x == self.y {
            ser.serialize_u64(self.x as u64)
        } else {
            ser.collect_str(self)
        }
    }
}

impl std::str::FromStr for FeatureStride {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("feature stride {s:?}: write one number (4) or width x height (4x2), each >= 1")
        };
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(bad)
        };
        match s.split_once('x') {
            Some((x, y)) => Ok(Self {
                x: num(x)?,
                y: num(y)?,
            }),
            None => num(s).map(Self::square),
        }
    }
}

/// Why a dataset could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A scenario config is invalid.
    #[error("drive {drive}: {source}")]
    Scenario {
        /// Index of the drive.
        drive: usize,
        /// Why.
        source: ScenarioError,
    },
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A size or table could not be built.
    #[error("{0}")]
    Config(String),
}

#[derive(Serialize)]
struct Meta<'a> {
    format: u32,
    cams: usize,
    net_w: usize,
    net_h: usize,
    image_w: u32,
    image_h: u32,
    bev: BevMeta,
    classes: [&'static str; 3],
    seg_classes: [&'static str; 3],
    history: usize,
    lift_m: f32,
    lifts_m: &'a [f32],
    bev_sampling: &'static str,
    strides: &'a [FeatureStride],
    max_boxes: usize,
    box_fields: [&'static str; 8],
    input_scale: f32,
    /// The rig, in the network's camera order: each camera's calibration and its
    /// horizontal field of view and heading in degrees (what `tools/train/export.py`
    /// declares in the models' metadata, `redline.camera_hfov_deg` / `_yaw_deg`).
    cameras: Vec<CameraMeta<'a>>,
    drives: Vec<DriveMeta>,
}

#[derive(Serialize)]
struct CameraMeta<'a> {
    #[serde(flatten)]
    spec: &'a CameraSpec,
    hfov_deg: f64,
    yaw_deg: f64,
}

#[derive(Serialize)]
struct BevMeta {
    nx: usize,
    ny: usize,
    res: f32,
    x0: f32,
    y0: f32,
}

#[derive(Serialize)]
struct DriveMeta {
    dir: String,
    frames: usize,
    dropped_boxes: usize,
    scenario: ScenarioConfig,
}

/// Writes the dataset described by `spec` into `dir` (created). `progress(done, total)`
/// is called as frames are written. Returns the total frame count.
pub fn write_dataset(
    dir: &Path,
    spec: &DatasetSpec,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize, DatasetError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DatasetError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let bev = BevSpec::DEFAULT;
    let cells = bev.nx * bev.ny;
    if !(1..=redline_pipeline::perception::MAX_TEMPORAL_K).contains(&spec.history) {
        return Err(DatasetError::Config(format!(
            "history {} must be 1..={}",
            spec.history,
            redline_pipeline::perception::MAX_TEMPORAL_K
        )));
    }
    let first = spec
        .drives
        .first()
        .ok_or_else(|| DatasetError::Config("no drives to write".into()))?;
    let (img_w, img_h) = (first.image_width, first.image_height);
    if spec
        .drives
        .iter()
        .any(|d| (d.image_width, d.image_height) != (img_w, img_h))
    {
        return Err(DatasetError::Config(
            "every drive must use the same camera image size".into(),
        ));
    }
    let scenarios: Vec<Scenario> = spec
        .drives
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Scenario::generate(c.clone())
                .map_err(|source| DatasetError::Scenario { drive: i, source })
        })
        .collect::<Result<_, _>>()?;
    let rig = scenarios[0].cameras.clone();
    // The view-transform tables are exported once, from the first drive's rig: every
    // drive's cameras must be those (whatever rig setting made them differ).
    if scenarios.iter().any(|sc| sc.cameras != rig) {
        return Err(DatasetError::Config(
            "every drive must use the same camera rig (front_hfov_deg, tele_hfov_deg): the \
             dataset's view-transform tables are the first drive's"
                .into(),
        ));
    }
    let cams = rig.len();
    if spec.lifts_m.is_empty() || spec.lifts_m.iter().any(|h| !h.is_finite()) {
        return Err(DatasetError::Config(format!(
            "lift heights {:?}: give at least one finite height in metres, e.g. 0.5",
            spec.lifts_m
        )));
    }
    for &s in &spec.strides {
        if s.x == 0
            || s.y == 0
            || !spec.net_w.is_multiple_of(s.x)
            || !spec.net_h.is_multiple_of(s.y)
        {
            return Err(DatasetError::Config(format!(
                "stride {s} must divide the network input {}x{}",
                spec.net_w, spec.net_h
            )));
        }
        // The projector the driving graph builds, at one channel per pixel (the tables
        // index pixels).
        let projector = |sampling| {
            let view = ViewTransform {
                lifts: spec.lifts_m.clone(),
                sampling,
            };
            let image = (img_w as usize, img_h as usize);
            let features = (spec.net_h / s.y, spec.net_w / s.x, 1);
            view_transform(&view, &bev, &rig, image, features)
                .map_err(|e| DatasetError::Config(e.to_string()))
        };
        // `bev_sources_*` are always the nearest tables (earlier training stages read
        // them); the row-linear taps come from their own projector.
        let nearest = projector(BevSampling::Nearest)?;
        let linear = match spec.sampling {
            BevSampling::RowLinear => Some(projector(BevSampling::RowLinear)?),
            BevSampling::Nearest => None,
        };
        for i in 0..spec.lifts_m.len() {
            let lift = match i {
                0 => String::new(),
                _ => format!("_lift{i}"),
            };
            let flat: Vec<i32> = nearest.source_pixels(i).into_iter().flatten().collect();
            let path = dir.join(format!("bev_sources_s{s}{lift}.npy"));
            write_npy(
                &path,
                "<i4",
                &[cells, 2],
                &le_bytes(&flat, i32::to_le_bytes),
            )
            .map_err(io(&path))?;
            if let Some(linear) = &linear {
                let taps: Vec<i32> = linear
                    .source_taps(i)
                    .into_iter()
                    .flatten()
                    .flat_map(|(pixel, w)| [pixel, i32::from(w)])
                    .collect();
                let path = dir.join(format!("bev_taps_s{s}{lift}.npy"));
                write_npy(
                    &path,
                    "<i4",
                    &[cells, 4, 2],
                    &le_bytes(&taps, i32::to_le_bytes),
                )
                .map_err(io(&path))?;
            }
        }
    }
    let pre = Preprocess::new(img_w as usize, img_h as usize, spec.net_w, spec.net_h)
        .map_err(|e| DatasetError::Config(e.to_string()))?;
    let total: usize = scenarios.iter().map(|s| s.frame_count()).sum();
    let mut done = 0usize;
    let mut drives = Vec::new();
    for (d, sc) in scenarios.iter().enumerate() {
        let name = format!("drive_{d:03}");
        let ddir = dir.join(&name);
        std::fs::create_dir_all(&ddir).map_err(io(&ddir))?;
        let frames = sc.frame_count();
        let in_len = cams * spec.net_w * spec.net_h * 3;
        let mut input = vec![0i8; frames * in_len];
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = frames.div_ceil(threads).max(1);
        let failed = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (i, chunk) in input.chunks_mut(per * in_len).enumerate() {
                let (pre, failed) = (&pre, &failed);
                scope.spawn(move || {
                    let mut img = RgbImage::default();
                    let cam_len = spec.net_w * spec.net_h * 3;
                    for (k, frame) in chunk.chunks_mut(in_len).enumerate() {
                        let f = i * per + k;
                        for (c, out) in frame.chunks_mut(cam_len).enumerate() {
                            sc.render(f, c, &mut img);
                            if pre.run(&img.data, out).is_err() {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        if failed.into_inner() {
            return Err(DatasetError::Config(format!(
                "drive {d}: a rendered image did not match the preprocess size"
            )));
        }
        let path = ddir.join("input.npy");
        write_npy(
            &path,
            "|i1",
            &[frames, cams, spec.net_h, spec.net_w, 3],
            &le_bytes(&input, i8::to_le_bytes),
        )
        .map_err(io(&path))?;
        drop(input);

        let map = scenario_map(sc);
        let egos: Vec<EgoPose> = (0..frames).map(|f| ego_pose(&sc.ego(f))).collect();
        let mut ego = Vec::with_capacity(frames * 4);
        let mut boxes = vec![0f32; frames * MAX_BOXES * 8];
        let mut seg = vec![0u8; frames * cells];
        let mut warp = vec![-1i32; frames * spec.history * cells];
        let mut dropped = 0usize;
        for f in 0..frames {
            let e = egos[f];
            ego.extend_from_slice(&[e.x, e.y, e.yaw, e.stamp_ns as f64 * 1e-9]);
            let gts = gt_boxes(&sc.ground_truth(f));
            let mut n = 0;
            for g in gts.iter().filter(|g| in_perception_range(&e, g)) {
                if n == MAX_BOXES {
                    dropped += 1;
                    continue;
                }
                let (x, y) = world_to_ego(&e, g.x, g.y);
                let yaw = wrap_angle(g.yaw - e.yaw);
                let o = (f * MAX_BOXES + n) * 8;
                boxes[o..o + 8].copy_from_slice(&[
                    1.0,
                    g.class as f32,
                    x as f32,
                    y as f32,
                    g.length,
                    g.width,
                    yaw as f32,
                    g.id as f32,
                ]);
                n += 1;
            }
            seg_ground_truth(&map, &e, &bev, &mut seg[f * cells..(f + 1) * cells])
                .map_err(|e| DatasetError::Config(e.to_string()))?;
            for j in 0..spec.history {
                if f > j {
                    let w = TemporalCache::warp_sources(&bev, &egos[f - 1 - j], &e);
                    let o = (f * spec.history + j) * cells;
                    warp[o..o + cells].copy_from_slice(&w);
                }
            }
            done += 1;
            progress(done, total);
        }
        let path = ddir.join("ego.npy");
        write_npy(
            &path,
            "<f8",
            &[frames, 4],
            &le_bytes(&ego, f64::to_le_bytes),
        )
        .map_err(io(&path))?;
        let path = ddir.join("boxes.npy");
        write_npy(
            &path,
            "<f4",
            &[frames, MAX_BOXES, 8],
            &le_bytes(&boxes, f32::to_le_bytes),
        )
        .map_err(io(&path))?;
        let path = ddir.join("seg.npy");
        write_npy(&path, "|u1", &[frames, bev.ny, bev.nx], &seg).map_err(io(&path))?;
        let path = ddir.join("warp.npy");
        write_npy(
            &path,
            "<i4",
            &[frames, spec.history, cells],
            &le_bytes(&warp, i32::to_le_bytes),
        )
        .map_err(io(&path))?;
        drives.push(DriveMeta {
            dir: name,
            frames,
            dropped_boxes: dropped,
            scenario: sc.config.clone(),
        });
    }
    let meta = Meta {
        format: 1,
        cams,
        net_w: spec.net_w,
        net_h: spec.net_h,
        image_w: img_w,
        image_h: img_h,
        bev: BevMeta {
            nx: bev.nx,
            ny: bev.ny,
            res: bev.res,
            x0: bev.x0,
            y0: bev.y0,
        },
        classes: ["car", "pedestrian", "cyclist"],
        seg_classes: ["other", "drivable", "lane_marking"],
        history: spec.history,
        lift_m: spec.lifts_m[0],
        lifts_m: &spec.lifts_m,
        bev_sampling: spec.sampling.name(),
        strides: &spec.strides,
        max_boxes: MAX_BOXES,
        box_fields: ["valid", "class", "x", "y", "length", "width", "yaw", "id"],
        input_scale: 1.0 / 128.0,
        cameras: rig
            .iter()
            .map(|spec| CameraMeta {
                spec,
                hfov_deg: spec.hfov_deg(),
                yaw_deg: spec.yaw_deg(),
            })
            .collect(),
        drives,
    };
    let path = dir.join("meta.json");
    let json =
        serde_json::to_string_pretty(&meta).map_err(|e| DatasetError::Config(e.to_string()))?;
    std::fs::write(&path, json).map_err(io(&path))?;
    Ok(total)
}

/// Writes a NumPy `.npy` file (format 1.0, C order) holding `data` (little-endian bytes
/// of `descr` elements in `shape`).
pub fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) -> std::io::Result<()> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n', padded to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    f.write_all(data)?;
    f.flush()
}

fn le_bytes<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

/// `n` drives whose settings vary with a seeded stream: seeds `seed, seed + 1, ...` (road
/// shape and curvature, actor placement, image noise), 8–48 actors, 2–4 lanes of 3.0–4.0 m,
/// `seconds` long, at the given image size. Deterministic in its arguments.
pub fn varied_drives(
    n: usize,
    seed: u64,
    seconds: f64,
    width: u32,
    height: u32,
) -> Vec<ScenarioConfig> {
    let mut rng = redline_runtime::rng::SplitMix64::stream(seed, 0x7261_696e_6461_7461);
    (0..n)
        .map(|i| {
            let mut pick = |lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo + 1);
            let actors = pick(8, 48) as usize;
            let lanes = pick(2, 4) as u32;
            let lane_width = 3.0 + pick(0, 10) as f64 * 0.1;
            ScenarioConfig {
                seed: seed.wrapping_add(i as u64),
                seconds,
                actors,
                lanes,
                lane_width,
                image_width: width,
                image_height: height,
                ..ScenarioConfig::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_npy(path: &Path) -> (String, Vec<u8>) {
        let b = std::fs::read(path).unwrap();
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hl) % 64, 0, "header padded to 64 bytes");
        (
            String::from_utf8(b[10..10 + hl].to_vec()).unwrap(),
            b[10 + hl..].to_vec(),
        )
    }

    /// A 32x16 network input, strides 4 and 4x2, history 2, over `drives`.
    fn tiny_spec(drives: Vec<ScenarioConfig>) -> DatasetSpec {
        DatasetSpec {
            drives,
            net_w: 32,
            net_h: 16,
            strides: vec![FeatureStride::square(4), FeatureStride { x: 4, y: 2 }],
            history: 2,
            lifts_m: vec![BEV_LIFT_M, 0.0],
            sampling: BevSampling::Nearest,
        }
    }

    #[test]
    fn writes_a_small_dataset_the_runtime_would_compute() {
        let dir = std::env::temp_dir().join(format!("redline-dataset-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spec = tiny_spec(varied_drives(1, 11, 0.2, 64, 32));
        let mut calls = 0;
        let n = write_dataset(&dir, &spec, &mut |_, _| calls += 1).unwrap();
        assert_eq!(n, 6);
        assert_eq!(calls, 6);
        let (h, input) = read_npy(&dir.join("drive_000/input.npy"));
        // 6 frames of the default rig's 7 cameras (the telephoto last).
        assert!(h.contains("'shape': (6, 7, 16, 32, 3)"), "{h}");
        assert_eq!(input.len(), 6 * 7 * 16 * 32 * 3);
        // Frame 3, cameras 2 and 6 (the telephoto): the runtime's preprocessing of the
        // rendered image.
        let sc = Scenario::generate(spec.drives[0].clone()).unwrap();
        assert_eq!(sc.cameras[6].name, "front_tele");
        for c in [2, 6] {
            let mut img = RgbImage::default();
            sc.render(3, c, &mut img);
            let mut want = vec![0i8; 16 * 32 * 3];
            Preprocess::new(64, 32, 32, 16)
                .unwrap()
                .run(&img.data, &mut want)
                .unwrap();
            let cam = 16 * 32 * 3;
            let o = (3 * 7 + c) * cam;
            assert!(input[o..o + cam]
                .iter()
                .zip(&want)
                .all(|(&a, &b)| a as i8 == b));
        }
        let (h, warp) = read_npy(&dir.join("drive_000/warp.npy"));
        assert!(h.contains("'shape': (6, 2, 3840)"), "{h}");
        let w: Vec<i32> = warp
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        // Frame 0 has no history; frame 2 has two maps, mostly inside the grid.
        assert!(w[..2 * 3840].iter().all(|&v| v == -1));
        assert!(
            w[(2 * 2 + 1) * 3840..(2 * 2 + 2) * 3840]
                .iter()
                .filter(|&&v| v >= 0)
                .count()
                > 3000
        );
        let (h, seg) = read_npy(&dir.join("drive_000/seg.npy"));
        assert!(h.contains("'shape': (6, 48, 80)"), "{h}");
        for class in 0..3u8 {
            assert!(seg.contains(&class), "class {class} appears");
        }
        let table = |name: &str| {
            let (h, t) = read_npy(&dir.join(name));
            assert!(h.contains("'shape': (3840, 2)"), "{h}");
            t.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<i32>>()
        };
        // The 4x2 table has twice the rows (8x8 feature maps of 7 cameras) and picks the
        // same views: halving its row gives the stride-4 table (floor(v/4) =
        // floor(floor(v/2)/2)), and it tells apart cells the stride-4 table does not.
        let (s4, s4x2) = (table("bev_sources_s4.npy"), table("bev_sources_s4x2.npy"));
        let halved: Vec<i32> = s4x2
            .iter()
            .map(|&p| {
                if p < 0 {
                    return p;
                }
                let (cam, row, col) = (p / 64, p % 64 / 8, p % 8);
                (cam * 4 + row / 2) * 8 + col
            })
            .collect();
        assert_eq!(halved, s4);
        let distinct = |t: &[i32]| t.chunks(2).collect::<std::collections::BTreeSet<_>>().len();
        assert!(
            distinct(&s4x2) > distinct(&s4),
            "{} {}",
            distinct(&s4x2),
            distinct(&s4)
        );
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["strides"], serde_json::json!([4, "4x2"]));
        // The second lift height (the ground) has its own table per stride.
        let ground = table("bev_sources_s4x2_lift1.npy");
        assert_ne!(ground, s4x2);
        assert!(dir.join("bev_sources_s4_lift1.npy").exists());
        assert_eq!(meta["lift_m"], serde_json::json!(0.5));
        assert_eq!(meta["lifts_m"], serde_json::json!([0.5, 0.0]));
        assert_eq!(meta["bev_sampling"], "nearest");
        // The rig, in camera order, with each camera's field of view and heading.
        let cams = meta["cameras"].as_array().expect("cameras");
        assert_eq!(cams.len(), meta["cams"].as_u64().unwrap() as usize);
        assert_eq!(cams[0]["name"], "front");
        assert!((cams[0]["hfov_deg"].as_f64().unwrap() - 40.0).abs() < 1e-9);
        assert_eq!(cams.last().unwrap()["name"], "front_tele");
        assert!((cams.last().unwrap()["hfov_deg"].as_f64().unwrap() - 20.0).abs() < 1e-9);
        assert!(cams[1]["fx"].as_f64().unwrap() > 0.0);
        assert!(!dir.join("bev_taps_s4x2.npy").exists());
        assert_eq!(meta["cams"], 7);
        assert_eq!(meta["drives"][0]["frames"], 6);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn row_linear_datasets_carry_the_whole_tap_table() {
        let dir = std::env::temp_dir().join(format!("redline-dataset-lin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut spec = tiny_spec(varied_drives(1, 11, 0.1, 64, 32));
        spec.sampling = BevSampling::RowLinear;
        write_dataset(&dir, &spec, &mut |_, _| ()).unwrap();
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["bev_sampling"], "row_linear");
        // The nearest tables are written as for a nearest dataset.
        let near = dir.with_extension("near");
        let _ = std::fs::remove_dir_all(&near);
        spec.sampling = BevSampling::Nearest;
        write_dataset(&near, &spec, &mut |_, _| ()).unwrap();
        for name in ["bev_sources_s4x2.npy", "bev_sources_s4x2_lift1.npy"] {
            assert_eq!(
                read_npy(&dir.join(name)),
                read_npy(&near.join(name)),
                "{name}"
            );
        }
        std::fs::remove_dir_all(&near).unwrap();
        for lift in ["", "_lift1"] {
            let (h, t) = read_npy(&dir.join(format!("bev_taps_s4x2{lift}.npy")));
            assert!(h.contains("'shape': (3840, 4, 2)"), "{h}");
            let t: Vec<i32> = t
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let mut interpolated = 0;
            for cell in t.chunks_exact(8) {
                let w: i32 = cell.iter().skip(1).step_by(2).sum();
                assert!([0, 256, 512].contains(&w), "{cell:?}");
                let used = cell.chunks(2).filter(|tap| tap[1] > 0).count();
                interpolated += usize::from(used > w as usize / 256);
                assert!(cell.chunks(2).all(|tap| (tap[0] >= 0) == (tap[1] > 0)));
            }
            assert!(interpolated > 1000, "{lift}: {interpolated}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn feature_strides_read_and_write_as_one_number_or_width_x_height() {
        for (text, x, y) in [("4", 4, 4), ("4x2", 4, 2), ("8x8", 8, 8)] {
            let s: FeatureStride = text.parse().unwrap();
            assert_eq!((s.x, s.y), (x, y), "{text}");
        }
        assert_eq!(FeatureStride { x: 4, y: 2 }.to_string(), "4x2");
        assert_eq!(FeatureStride { x: 8, y: 8 }.to_string(), "8");
        for bad in ["", "0", "4x0", "x2", "4x2x1", "four"] {
            let e = bad.parse::<FeatureStride>().unwrap_err();
            assert!(e.contains("width x height (4x2)"), "{bad}: {e}");
        }
        // A stride that does not divide the network input is refused before anything is
        // written.
        let dir = std::env::temp_dir().join(format!("redline-dataset-div-{}", std::process::id()));
        let mut spec = tiny_spec(varied_drives(1, 11, 0.2, 64, 32));
        spec.strides = vec![FeatureStride { x: 4, y: 3 }];
        let e = write_dataset(&dir, &spec, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("stride 4x3 must divide the network input 32x16"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn drives_with_different_rigs_are_refused() {
        let dir = std::env::temp_dir().join(format!("redline-dataset-rig-{}", std::process::id()));
        let mut drives = varied_drives(2, 11, 0.2, 64, 32);
        drives[1].front_hfov_deg = 70.0;
        let e = write_dataset(&dir, &tiny_spec(drives.clone()), &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("same camera rig (front_hfov_deg, tele_hfov_deg)"),
            "{e}"
        );
        // A drive without the telephoto camera is another rig too.
        drives[1].front_hfov_deg = drives[0].front_hfov_deg;
        drives[1].tele_hfov_deg = None;
        let e = write_dataset(&dir, &tiny_spec(drives), &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("same camera rig"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
