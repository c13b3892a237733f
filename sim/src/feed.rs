//! The replay feed: every frame of a replay, decoded into memory before the run starts, as
//! the pipeline's [`FrameSource`].
//!
//! Contract: building a [`Feed`] does all decoding and rendering (it allocates, reads files,
//! reports progress); during the run the `sensors` stage only copies frame `k` out of it
//! (one `memcpy` per camera, written where it happens), so replay timing measures the
//! pipeline, not the log reader. The cost is memory: frames × cameras × width × height × 3
//! bytes (900 frames of the default rig's seven 256×128 cameras: 619 MB). A camera missing
//! from a frame, late, or of the wrong size or encoding is recorded in [`Feed::issues`] and
//! its pixels are zero with its bit cleared in [`SensorFrame::present`]; the frame still
//! runs. Every camera's image carries the frame's stamp (a log's images are grouped by
//! stamp), and a frame without odometry has [`SensorFrame::ego_present`] false.
//!
//! [`Looped`] plays any source in a loop, for soak runs longer than the drive.

use std::path::Path;

use redline_pipeline::camera::CameraSpec;
use redline_pipeline::sensors::{FrameSource, SensorFrame, MAX_GT};
use redline_pipeline::types::{EgoPose, GtBox, RoadMap, MAP_POINTS, MAP_SPACING};

use crate::log::{LogReader, ReadLimits, SensorMap};
use crate::replay::{read_frames, FrameIssue};
use crate::scenario::{Scenario, ScenarioConfig};
use crate::types::{EgoState, GroundTruth, RgbImage};

/// All frames of a replay.
#[derive(Debug)]
pub struct Feed {
    /// Camera rig, in image order.
    pub cameras: Vec<CameraSpec>,
    /// Image width, px.
    pub width: usize,
    /// Image height, px.
    pub height: usize,
    /// Frame period, ns.
    pub period_ns: u64,
    /// The road map (zeroed when the log has none).
    pub map: Box<RoadMap>,
    /// Frames, in order.
    pub frames: Vec<SensorFrame>,
    /// (frame, what) for everything that was wrong with the input.
    pub issues: Vec<(u64, String)>,
    /// Where the frames came from, for reports.
    pub source: String,
}

/// Why a feed could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The scenario config is invalid.
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    /// The log cannot be read at all.
    #[error(transparent)]
    Log(#[from] crate::log::LogError),
    /// The log holds no frame.
    #[error("{0}: the log holds no complete frame (no odometry or no camera images): check the topics with `redline replay --help`")]
    Empty(String),
    /// Cameras of different sizes that the reader could not resize to one (a side outside
    /// what the resize takes).
    #[error(
        "{0}: cameras have different image sizes ({1}) that cannot be resized to one (sides \
         must be 1..=16384 px): list cameras of one size in [sensors]"
    )]
    MixedSizes(String, String),
    /// Logs that cannot be played together, or a reader that cannot start.
    #[error("{0}")]
    Mismatch(String),
    /// The log holds more than the limits allow the feed to keep in memory.
    #[error(
        "{log}: frame {frames} would make the replay feed hold {bytes} bytes of images \
         (limits: {max_frames} frames, {max_bytes} bytes: `max_frames` / `max_feed_bytes` in \
         the config's [log] table): replay fewer frames with --frames or raise the limits"
    )]
    TooLarge {
        /// The log.
        log: String,
        /// Frames that would be held.
        frames: u64,
        /// Bytes that would be held.
        bytes: u64,
        /// The frame limit.
        max_frames: u64,
        /// The byte limit.
        max_bytes: u64,
    },
}

pub(crate) fn ego_pose(e: &EgoState) -> EgoPose {
    EgoPose {
        stamp_ns: e.stamp_ns,
        x: e.x,
        y: e.y,
        yaw: e.yaw,
        v: e.v,
        yaw_rate: e.yaw_rate,
    }
}

pub(crate) fn gt_boxes(gt: &GroundTruth) -> Vec<GtBox> {
    gt.objects
        .iter()
        .take(MAX_GT)
        .map(|o| GtBox {
            id: o.id,
            class: o.class as u32,
            x: o.x,
            y: o.y,
            yaw: o.yaw,
            vx: o.vx,
            vy: o.vy,
            length: o.length as f32,
            width: o.width as f32,
            valid: 1,
            _pad: 0,
        })
        .collect()
}

/// The road map a log of `scenario` carries (its centre line sampled every
/// [`MAP_SPACING`] m, lanes, lane width): what replays and training labels read.
pub(crate) fn scenario_map(scenario: &Scenario) -> Box<RoadMap> {
    let centre = scenario.road.sample_centre(MAP_SPACING as f64, MAP_POINTS);
    road_map(scenario.road.lanes, scenario.road.lane_width, &centre)
}

fn road_map(lanes: u32, lane_width: f64, centre: &[(f64, f64)]) -> Box<RoadMap> {
    let mut m: Box<RoadMap> = Box::default();
    m.lanes = lanes;
    m.lane_width = lane_width as f32;
    let n = centre.len().min(MAP_POINTS);
    m.points = n as u32;
    for (dst, &(x, y)) in m.centre.iter_mut().zip(centre.iter().take(n)) {
        *dst = [x as f32, y as f32];
    }
    m
}

impl Feed {
    /// Renders the built-in scenario (`frames` at most, all when None); `progress` is
    /// called with (done, total) as frames are rendered.
    pub fn from_scenario(
        cfg: &ScenarioConfig,
        frames: Option<usize>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Feed, FeedError> {
        let scenario = Scenario::generate(cfg.clone())?;
        let n = frames.map_or(scenario.frame_count(), |f| f.min(scenario.frame_count()));
        let cams = scenario.cameras.len();
        let (w, h) = (cfg.image_width as usize, cfg.image_height as usize);
        let mut img = RgbImage::default();
        let mut out = Vec::with_capacity(n);
        for k in 0..n {
            let mut images = vec![0u8; cams * w * h * 3];
            for c in 0..cams {
                scenario.render(k, c, &mut img);
                images[c * w * h * 3..(c + 1) * w * h * 3].copy_from_slice(&img.data);
            }
            out.push(SensorFrame {
                stamp_ns: scenario.stamp_ns(k),
                images,
                present: (1u32 << cams) - 1,
                camera_stamps_ns: vec![scenario.stamp_ns(k); cams],
                ego: ego_pose(&scenario.ego(k)),
                ego_present: true,
                gt: gt_boxes(&scenario.ground_truth(k)),
                jpeg: Vec::new(),
                jpeg_len: Vec::new(),
            });
            progress(k + 1, n);
        }
        Ok(Feed {
            cameras: scenario.cameras.clone(),
            width: w,
            height: h,
            period_ns: scenario.period_ns(),
            map: scenario_map(&scenario),
            frames: out,
            issues: Vec::new(),
            source: format!("built-in scenario (seed {})", cfg.seed),
        })
    }

    /// Reads a recorded MCAP log (every readable frame; problems become issues).
    pub fn from_log(path: &Path, frames: Option<usize>) -> Result<Feed, FeedError> {
        Self::from_log_with(path, frames, ReadLimits::default())
    }

    /// [`Feed::from_log`] with explicit [`ReadLimits`] (the config's `[log]` table): the
    /// reader checks every length in the file against them, and the feed refuses to hold
    /// more than `max_frames` frames or `max_feed_bytes` of decoded images (checked before
    /// each frame is allocated).
    pub fn from_log_with(
        path: &Path,
        frames: Option<usize>,
        limits: ReadLimits,
    ) -> Result<Feed, FeedError> {
        Self::from_log_mapped(path, frames, limits, &SensorMap::default())
    }

    /// [`Feed::from_log_with`] for a log whose sensors are named by a `[sensors]` table
    /// ([`SensorMap`]): other topics, compressed images, calibration from a file.
    pub fn from_log_mapped(
        path: &Path,
        frames: Option<usize>,
        limits: ReadLimits,
        sensors: &SensorMap,
    ) -> Result<Feed, FeedError> {
        let name = path.display().to_string();
        let LogRig {
            mut reader,
            cameras,
            width: w,
            height: h,
            map,
        } = LogRig::open(path, limits, sensors)?;
        let sensor_frames = read_frames(&mut reader, None)?;
        // After reading: the reader records what it met on the way (unknown schemas,
        // corrupt chunks), not only what it saw when opening.
        let mut issues: Vec<(u64, String)> = reader
            .issues()
            .iter()
            .map(|i| (0, format!("log: {:?}: {}", i.kind, i.detail)))
            .collect();
        let cams = cameras.len();
        let limit = frames.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let mut period_ns = 33_333_333;
        let mut last_stamp: Option<u64> = None;
        let frame_bytes = (cams * w * h * 3) as u64;
        for sf in sensor_frames.into_iter().take(limit) {
            let k = out.len() as u64;
            let held = (k + 1).saturating_mul(frame_bytes);
            if k + 1 > limits.max_frames || held > limits.max_feed_bytes {
                return Err(FeedError::TooLarge {
                    log: name,
                    frames: k + 1,
                    bytes: held,
                    max_frames: limits.max_frames,
                    max_bytes: limits.max_feed_bytes,
                });
            }
            let frame = log_frame(&sf, cams, w * h * 3, 0, k, &mut issues);
            if let Some(prev) = last_stamp {
                if sf.stamp_ns > prev && k == 1 {
                    period_ns = sf.stamp_ns - prev;
                }
            }
            last_stamp = Some(sf.stamp_ns);
            out.push(frame);
        }
        if out.is_empty() {
            return Err(FeedError::Empty(name));
        }
        Ok(Feed {
            cameras,
            width: w,
            height: h,
            period_ns,
            map,
            frames: out,
            issues,
            source: name,
        })
    }
}

/// A log opened for replay: its reader and rig (every camera the same size) and map.
pub(crate) struct LogRig {
    pub reader: LogReader,
    pub cameras: Vec<CameraSpec>,
    pub width: usize,
    pub height: usize,
    pub map: Box<RoadMap>,
}

impl LogRig {
    pub(crate) fn open(
        path: &Path,
        limits: ReadLimits,
        sensors: &SensorMap,
    ) -> Result<LogRig, FeedError> {
        let name = path.display().to_string();
        let reader = LogReader::open_mapped(path, limits, sensors)?;
        let cameras = reader.cameras().to_vec();
        let (w, h) = match cameras.first() {
            Some(c) => (c.width as usize, c.height as usize),
            None => return Err(FeedError::Empty(name)),
        };
        if cameras
            .iter()
            .any(|c| c.width as usize != w || c.height as usize != h)
        {
            let sizes: Vec<String> = cameras
                .iter()
                .map(|c| format!("{} {}x{}", c.name, c.width, c.height))
                .collect();
            return Err(FeedError::MixedSizes(name, sizes.join(", ")));
        }
        let map = match reader.map() {
            Some(m) => road_map(m.lanes, m.lane_width, &m.centre),
            None => Box::default(),
        };
        Ok(LogRig {
            reader,
            cameras,
            width: w,
            height: h,
            map,
        })
    }
}

/// One grouped frame of a log (`sf`, frame number `k`) as the pipeline's frame: `cams`
/// images of `image_len` bytes (a missing or unusable camera is black with its bit clear),
/// or, with `jpeg_capacity` > 0, the cameras' JPEG streams (a stream over the capacity is
/// an issue and the camera is missing); what was wrong is appended to `issues` as issues
/// of frame `k`.
pub(crate) fn log_frame(
    sf: &crate::replay::SensorFrame,
    cams: usize,
    image_len: usize,
    jpeg_capacity: usize,
    k: u64,
    issues: &mut Vec<(u64, String)>,
) -> SensorFrame {
    let mut present = 0u32;
    let mut images = Vec::new();
    let mut jpeg = Vec::new();
    let mut jpeg_len = Vec::new();
    if jpeg_capacity > 0 {
        jpeg_len = vec![0u32; cams];
        for (c, data) in sf.jpegs.iter().enumerate().take(cams) {
            match data {
                Some(d) if d.len() <= jpeg_capacity => {
                    jpeg.extend_from_slice(d);
                    jpeg_len[c] = d.len() as u32;
                    present |= 1 << c;
                }
                Some(d) => issues.push((
                    k,
                    format!(
                        "camera {c}: JPEG of {} bytes is over the {jpeg_capacity} bytes a camera may send (width x height x 3); not used",
                        d.len()
                    ),
                )),
                None => {}
            }
        }
    } else {
        images = vec![0u8; cams * image_len];
        for (c, img) in sf.images.iter().enumerate().take(cams) {
            if let Some(img) = img {
                if img.data.len() == image_len {
                    images[c * image_len..(c + 1) * image_len].copy_from_slice(&img.data);
                    present |= 1 << c;
                }
            }
        }
    }
    for issue in &sf.issues {
        let what = match issue {
            FrameIssue::MissingCamera { cam } => format!("camera {cam} missing"),
            FrameIssue::LateCamera { cam, late_by_ns } => {
                format!(
                    "camera {cam} late by {:.1} ms (not used)",
                    *late_by_ns as f64 / 1e6
                )
            }
            FrameIssue::BadImage { cam, why } => format!("camera {cam}: {why}"),
            FrameIssue::MissingOdometry => {
                "odometry missing (the last pose is extrapolated)".to_string()
            }
            FrameIssue::Stale {
                topic,
                frame,
                late_by_ns,
            } => format!(
                "{topic} for frame {frame} arrived {:.1} ms late, after that frame ran: dropped",
                *late_by_ns as f64 / 1e6
            ),
            FrameIssue::Gap { frames_skipped } => {
                format!("the log skips {frames_skipped} frame periods before this frame")
            }
        };
        issues.push((k, what));
    }
    SensorFrame {
        stamp_ns: sf.stamp_ns,
        images,
        present,
        camera_stamps_ns: vec![sf.stamp_ns; cams],
        ego: sf.ego.as_ref().map(ego_pose).unwrap_or_default(),
        ego_present: sf.ego.is_some(),
        gt: sf.gt.as_ref().map(gt_boxes).unwrap_or_default(),
        jpeg,
        jpeg_len,
    }
}

impl FrameSource for Feed {
    fn cameras(&self) -> &[CameraSpec] {
        &self.cameras
    }
    fn image_size(&self) -> (usize, usize) {
        (self.width, self.height)
    }
    fn period_ns(&self) -> u64 {
        self.period_ns
    }
    fn map(&self) -> &RoadMap {
        &self.map
    }
    fn frame_count(&self) -> usize {
        self.frames.len()
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        self.frames.get(k)
    }
    fn issues(&self) -> &[(u64, String)] {
        &self.issues
    }
    fn describe(&self) -> &str {
        &self.source
    }
}

/// A frame source played in a loop: frame `k` is the inner source's frame `k mod n`, for
/// `frames` frames in all (a soak test runs the built-in drive for as long as it likes).
///
/// Each pass starts over with the inner source's stamps and poses (the ego jumps back to the
/// start of the drive; stateful stages see a discontinuity, as after a relocalisation).
/// Hot path: one modulo; nothing copied.
#[derive(Debug)]
pub struct Looped<F: FrameSource> {
    inner: F,
    frames: usize,
    source: String,
}

impl<F: FrameSource> Looped<F> {
    /// `inner` played until `frames` frames have been delivered (none if it has no frame).
    pub fn new(inner: F, frames: usize) -> Self {
        let frames = if inner.frame_count() == 0 { 0 } else { frames };
        let source = format!("{}, looped to {frames} frames", inner.describe());
        Looped {
            inner,
            frames,
            source,
        }
    }
}

impl<F: FrameSource> FrameSource for Looped<F> {
    fn cameras(&self) -> &[CameraSpec] {
        self.inner.cameras()
    }
    fn image_size(&self) -> (usize, usize) {
        self.inner.image_size()
    }
    fn period_ns(&self) -> u64 {
        self.inner.period_ns()
    }
    fn map(&self) -> &RoadMap {
        self.inner.map()
    }
    fn frame_count(&self) -> usize {
        self.frames
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        if k >= self.frames {
            return None;
        }
        self.inner.frame(k % self.inner.frame_count().max(1))
    }
    fn issues(&self) -> &[(u64, String)] {
        self.inner.issues()
    }
    fn describe(&self) -> &str {
        &self.source
    }
}
