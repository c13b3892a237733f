//! The `sensors` stage: copies frame `k` of the frame source into the arena, and is the
//! pipeline's guard against stale, missing and absurd sensor data (see [`SensorsStage`]).
//!
//! Hot path: one `memcpy` per camera (or a fill with zeros), a few comparisons and, when
//! odometry cannot be used, a dead-reckoning step (two deterministic `sin_cos`); no
//! allocation, no lock, no I/O, no panic.

use std::sync::Arc;

use redline_runtime::{FrameInfo, Stage, StageError, StageIo};

use crate::camera::det;
use crate::sensors::{FrameSource, SensorFrame, MAX_GT, MAX_IMAGE_AGE_PERIODS, MAX_POSE_AGE_NS};
use crate::types::{EgoPose, GtBox, RoadMap};

const E_NO_FRAME: StageError = StageError::new("the frame source has no frame with this number");
const E_SHAPE: StageError = StageError::new("buffer size does not match the model");

/// Copies frame `k` of the frame source into the arena, checking what it copies:
///
/// - a camera whose bit is clear in [`SensorFrame::present`], or whose image is stale (taken
///   more than [`MAX_IMAGE_AGE_PERIODS`] periods before the frame: a frozen or long-delayed
///   camera), gets black pixels and its `camera_present` entry 0: the graph never sees
///   stale or undelivered bytes;
/// - the ego pose is the odometry when it is present, finite, plausible (|x|, |y| < 10^7 m,
///   |v| < 100 m/s, |yaw rate| < 10 rad/s) and not older than [`MAX_POSE_AGE_NS`] nor from
///   the future (more than half a period ahead). A usable pose more than half a period old
///   (late odometry) is dead-reckoned to the frame's stamp; otherwise the stage dead-reckons
///   the pose it published for the previous frame it ran (constant speed and yaw rate), or
///   publishes a zero pose at the frame's stamp if it has none yet. Dead-reckoning uses the
///   deterministic trigonometry of [`crate::camera::det`], so outputs stay bit-identical.
///
/// Fresh, complete data is copied unchanged, so a healthy source gives the same outputs as
/// a plain copy.
#[derive(Debug)]
pub struct SensorsStage {
    feed: Arc<dyn FrameSource>,
    /// Images older than this are stale, ns.
    max_image_age_ns: u64,
    /// Half a frame period, ns: odometry within this of the frame's stamp is used as is.
    half_period_ns: u64,
    /// The pose published for the last frame this stage ran (stamped with that frame).
    last_pose: Option<EgoPose>,
    /// Bytes per camera of the source's JPEG streams (0: the source delivers images).
    jpeg_capacity: usize,
}

impl SensorsStage {
    /// Over a frame source opened before the run.
    pub fn new(feed: Arc<dyn FrameSource>) -> Self {
        let period = feed.period_ns();
        SensorsStage {
            max_image_age_ns: (period as f64 * MAX_IMAGE_AGE_PERIODS) as u64,
            half_period_ns: period / 2,
            jpeg_capacity: feed.jpeg_capacity(),
            feed,
            last_pose: None,
        }
    }

    /// The pose for a frame stamped `stamp` (see the type's docs).
    fn pose(&self, frame: &SensorFrame) -> EgoPose {
        let stamp = frame.stamp_ns;
        let e = &frame.ego;
        let usable = frame.ego_present
            && pose_plausible(e)
            && e.stamp_ns <= stamp.saturating_add(self.half_period_ns)
            && stamp.saturating_sub(e.stamp_ns) <= MAX_POSE_AGE_NS;
        if usable {
            if stamp.saturating_sub(e.stamp_ns) <= self.half_period_ns {
                *e
            } else {
                dead_reckon(e, stamp)
            }
        } else if let Some(last) = self.last_pose.filter(|p| p.stamp_ns <= stamp) {
            dead_reckon(&last, stamp)
        } else {
            EgoPose {
                stamp_ns: stamp,
                ..EgoPose::default()
            }
        }
    }
}

/// Finite and physically plausible for a road vehicle.
fn pose_plausible(e: &EgoPose) -> bool {
    e.x.abs() < 1e7
        && e.y.abs() < 1e7
        && e.yaw.is_finite()
        && e.v.abs() < 100.0
        && e.yaw_rate.abs() < 10.0
}

/// `pose` moved to `stamp` at constant speed and yaw rate (exact arcs; a straight line when
/// the yaw rate is below 1e-9 rad/s).
fn dead_reckon(pose: &EgoPose, stamp: u64) -> EgoPose {
    let dt = stamp.saturating_sub(pose.stamp_ns) as f64 * 1e-9;
    let (s0, c0) = det::sin_cos(pose.yaw);
    let w = pose.yaw_rate;
    let yaw = pose.yaw + w * dt;
    let (dx, dy) = if w.abs() < 1e-9 {
        (pose.v * dt * c0, pose.v * dt * s0)
    } else {
        let (s1, c1) = det::sin_cos(yaw);
        (pose.v / w * (s1 - s0), pose.v / w * (c0 - c1))
    };
    EgoPose {
        stamp_ns: stamp,
        x: pose.x + dx,
        y: pose.y + dy,
        yaw,
        v: pose.v,
        yaw_rate: w,
    }
}

impl Stage for SensorsStage {
    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let frame = self.feed.frame(f.frame as usize).ok_or(E_NO_FRAME)?;
        let images = io.output::<u8>(0)?;
        let present = io.output::<u32>(1)?;
        let ego = io.output::<EgoPose>(2)?;
        let gt = io.output::<GtBox>(3)?;
        let map = io.output::<RoadMap>(4)?;
        if self.jpeg_capacity > 0 {
            // JPEG source: outputs 0 and 1 are the streams and their lengths, for `decode`.
            self.copy_streams(frame, images, present)?;
        } else {
            self.copy_images(frame, images, present)?;
        }
        let pose = self.pose(frame);
        self.last_pose = Some(pose);
        ego[0] = pose;
        let n = frame.gt.len().min(MAX_GT);
        gt[..n].copy_from_slice(&frame.gt[..n]);
        gt[n..].fill(GtBox::default());
        map[0] = *self.feed.map();
        Ok(())
    }
}

impl SensorsStage {
    /// Whether camera `c`'s data is recent enough to use.
    fn fresh(&self, frame: &SensorFrame, c: usize) -> bool {
        let stamp = frame.camera_stamps_ns.get(c).copied().unwrap_or(0);
        frame.stamp_ns.saturating_sub(stamp) <= self.max_image_age_ns
    }

    /// Each camera's JPEG stream into its `jpeg_capacity` bytes of `out`, and its length (0
    /// for a camera absent or stale) into `lens`.
    fn copy_streams(
        &self,
        frame: &SensorFrame,
        out: &mut [u8],
        lens: &mut [u32],
    ) -> Result<(), StageError> {
        let cap = self.jpeg_capacity;
        if out.len() != lens.len() * cap || frame.jpeg_len.len() != lens.len() {
            return Err(E_SHAPE);
        }
        let mut at = 0usize;
        for (c, l) in lens.iter_mut().enumerate() {
            let n = frame.jpeg_len[c] as usize;
            let src = frame.jpeg.get(at..at + n).ok_or(E_SHAPE)?;
            at += n;
            let usable = (frame.present >> c) & 1 == 1 && self.fresh(frame, c) && n <= cap;
            *l = if usable { n as u32 } else { 0 };
            if usable {
                out[c * cap..c * cap + n].copy_from_slice(src); // the one copy of the stream
            }
        }
        Ok(())
    }

    /// Each camera's image into `images` (black for a camera absent or stale), its
    /// presence into `present`.
    fn copy_images(
        &self,
        frame: &SensorFrame,
        images: &mut [u8],
        present: &mut [u32],
    ) -> Result<(), StageError> {
        let cams = present.len();
        if images.len() != frame.images.len() || cams == 0 || !images.len().is_multiple_of(cams) {
            return Err(E_SHAPE);
        }
        let len = images.len() / cams;
        for (c, p) in present.iter_mut().enumerate() {
            *p = ((frame.present >> c) & 1) * u32::from(self.fresh(frame, c));
            let (src, dst) = (
                &frame.images[c * len..(c + 1) * len],
                &mut images[c * len..(c + 1) * len],
            );
            if *p == 1 {
                dst.copy_from_slice(src); // the one copy of the camera's pixels
            } else {
                dst.fill(0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::camera::CameraSpec;
    use redline_runtime::{
        GraphBuilder, PlanConfig, Published, ReleaseMode, Runtime, RuntimeConfig,
    };

    const P: u64 = 100_000_000; // 10 Hz
    const LEN: usize = 2 * 2 * 3; // one 2x2 camera image

    #[derive(Debug)]
    struct Frames {
        cameras: Vec<CameraSpec>,
        frames: Vec<SensorFrame>,
        map: RoadMap,
    }

    impl FrameSource for Frames {
        fn cameras(&self) -> &[CameraSpec] {
            &self.cameras
        }
        fn image_size(&self) -> (usize, usize) {
            (2, 2)
        }
        fn period_ns(&self) -> u64 {
            P
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
            &[]
        }
        fn describe(&self) -> &str {
            "test frames"
        }
    }

    fn camera(name: &str) -> CameraSpec {
        CameraSpec {
            name: name.into(),
            width: 2,
            height: 2,
            fx: 1.0,
            fy: 1.0,
            cx: 1.0,
            cy: 1.0,
            x: 0.0,
            y: 0.0,
            z: 1.0,
            yaw: 0.0,
            pitch: 0.0,
            distortion: Default::default(),
        }
    }

    fn pose(k: u64) -> EgoPose {
        EgoPose {
            stamp_ns: k * P,
            x: 10.0 * k as f64 * 0.1,
            y: 5.0,
            yaw: 0.0,
            v: 10.0,
            yaw_rate: 0.0,
        }
    }

    /// Frame `k`, fresh: both cameras filled with `k + 1`, the true pose.
    fn fresh(k: u64) -> SensorFrame {
        SensorFrame {
            stamp_ns: k * P,
            images: vec![k as u8 + 1; 2 * LEN],
            present: 0b11,
            camera_stamps_ns: vec![k * P; 2],
            ego: pose(k),
            ego_present: true,
            gt: vec![],
            jpeg: Vec::new(),
            jpeg_len: Vec::new(),
        }
    }

    /// Runs the stage alone over `frames`; returns (images, present, ego) per frame.
    fn run(frames: Vec<SensorFrame>) -> Vec<(Vec<u8>, Vec<u32>, EgoPose)> {
        let n = frames.len() as u64;
        let feed: Arc<dyn FrameSource> = Arc::new(Frames {
            cameras: vec![camera("a"), camera("b")],
            frames,
            map: RoadMap::default(),
        });
        let mut g = GraphBuilder::new();
        g.stage("sensors", SensorsStage::new(feed))
            .writes::<u8>("images", 2 * LEN)
            .writes::<u32>("present", 2)
            .writes::<EgoPose>("ego", 1)
            .writes::<GtBox>("gt", MAX_GT)
            .writes::<RoadMap>("map", 1);
        for b in ["images", "present", "ego"] {
            g.publish(b);
        }
        let plan = g
            .build(&PlanConfig {
                lanes: 1,
                frame_slots: 1,
            })
            .unwrap();
        let mut rt = Runtime::new(
            plan,
            RuntimeConfig {
                release: ReleaseMode::Lockstep,
                period_ns: P,
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let mut out = Vec::new();
        rt.run(n, &mut |p: &Published<'_>| {
            out.push((
                p.outputs.get::<u8>(0).unwrap().to_vec(),
                p.outputs.get::<u32>(1).unwrap().to_vec(),
                p.outputs.get::<EgoPose>(2).unwrap()[0],
            ))
        });
        out
    }

    #[test]
    fn fresh_data_is_copied_unchanged() {
        let out = run((0..3).map(fresh).collect());
        for (k, (images, present, ego)) in out.iter().enumerate() {
            assert_eq!(images, &vec![k as u8 + 1; 2 * LEN]);
            assert_eq!(present, &vec![1, 1]);
            assert_eq!(*ego, pose(k as u64), "bit-identical when fresh");
        }
    }

    #[test]
    fn missing_and_stale_images_become_black_and_absent() {
        let mut frames: Vec<SensorFrame> = (0..4).map(fresh).collect();
        // Frame 1: camera b repeats frame 0's image (one period old): still used.
        frames[1].camera_stamps_ns[1] = 0;
        // Frame 2: camera b still repeats it (two periods old): stale. Camera a's bit is
        // clear although its bytes are not zero.
        frames[2].camera_stamps_ns[1] = 0;
        frames[2].present = 0b10;
        let out = run(frames);
        assert_eq!(out[1].1, vec![1, 1]);
        assert_eq!(out[1].0, vec![2; 2 * LEN]);
        assert_eq!(out[2].1, vec![0, 0]);
        assert_eq!(
            out[2].0,
            vec![0; 2 * LEN],
            "no stale or undelivered byte passes"
        );
        assert_eq!(out[3].1, vec![1, 1], "fresh again");
    }

    #[test]
    fn unusable_odometry_is_replaced_by_dead_reckoning() {
        let mut frames: Vec<SensorFrame> = (0..9).map(fresh).collect();
        frames[1].ego.x = f64::NAN;
        frames[2].ego_present = false;
        frames[3].ego.v = 1e6; // absurd
        frames[4].ego = pose(2); // two periods late: extrapolated from its own stamp
        frames[5].ego = pose(7); // from the future
        frames[6].ego = pose(0); // 0.6 s old: usable, extrapolated
        frames[7].ego.yaw_rate = f64::INFINITY;
        let out = run(frames);
        for (k, (_, _, ego)) in out.iter().enumerate() {
            // The true motion is a straight line at 10 m/s: dead-reckoning recovers it.
            let truth = pose(k as u64);
            assert_eq!(ego.stamp_ns, truth.stamp_ns, "frame {k}");
            assert!(
                (ego.x - truth.x).abs() < 1e-9 && ego.y == truth.y && ego.v == 10.0,
                "frame {k}: {ego:?}"
            );
        }
        // A pose with no earlier one to fall back on: zero, at the frame's stamp.
        let mut first = fresh(3);
        first.ego_present = false;
        let out = run(vec![first]);
        assert_eq!(
            out[0].2,
            EgoPose {
                stamp_ns: 3 * P,
                ..EgoPose::default()
            }
        );
    }

    #[test]
    fn dead_reckoning_follows_arcs() {
        // A quarter circle of radius 10 m at 10 m/s: pi/2 rad in pi/2 s.
        let start = EgoPose {
            stamp_ns: 0,
            x: 0.0,
            y: 0.0,
            yaw: 0.0,
            v: 10.0,
            yaw_rate: 1.0,
        };
        let t = (std::f64::consts::FRAC_PI_2 * 1e9) as u64;
        let e = dead_reckon(&start, t);
        assert!(
            (e.x - 10.0).abs() < 1e-6 && (e.y - 10.0).abs() < 1e-6,
            "{e:?}"
        );
        assert!((e.yaw - std::f64::consts::FRAC_PI_2).abs() < 1e-9);
        assert_eq!(e.stamp_ns, t);
        // A pose stamped later than asked does not move backwards.
        assert_eq!(dead_reckon(&e, 0).x, e.x);
    }
}
