//! The pipeline's input contract: what a frame of sensor data is, and the trait anything
//! that delivers frames implements.
//!
//! The driving graph links no simulator and no log reader: it reads frames through
//! [`FrameSource`]. The simulator (`redline-sim`) implements it from recorded MCAP logs and
//! from its built-in scenario; an in-vehicle build implements it from camera and
//! localisation drivers.
//!
//! Contract for implementors:
//! - every camera of [`FrameSource::cameras`] delivers images of
//!   [`FrameSource::image_size`], packed RGB8, rig order, `width × height × 3` bytes each;
//!   a camera that delivered nothing usable for a frame has its bit cleared in
//!   [`SensorFrame::present`] (its bytes are then ignored: the `sensors` stage hands the
//!   graph black pixels for it);
//! - each camera's image carries its own stamp ([`SensorFrame::camera_stamps_ns`]): a late or
//!   repeated image keeps the older stamp it was taken at, so the graph can tell stale data
//!   from fresh (an image older than [`MAX_IMAGE_AGE_PERIODS`] periods is not used);
//! - odometry that is missing has [`SensorFrame::ego_present`] false; a pose that is
//!   missing, not finite, implausible or older than [`MAX_POSE_AGE_NS`] is not used: the
//!   `sensors` stage dead-reckons the last pose it published instead (see
//!   [`crate::stages::SensorsStage`]);
//! - [`FrameSource::frame`] is called from the `sensors` stage on the hot path: it must not
//!   allocate, block or do I/O — return a view of a frame that is already in memory (the
//!   stage copies it into the arena, one `memcpy` per camera);
//! - calibration ([`CameraSpec`]) and the map do not change during a run.

use crate::camera::CameraSpec;
use crate::types::{class, EgoPose, GtBox, RoadMap};

/// Ground-truth boxes a frame can carry into the arena.
pub const MAX_GT: usize = 128;

/// A camera image older than this many frame periods (frame stamp − image stamp) is stale:
/// the `sensors` stage treats the camera as missing. 1.5: the previous frame's image (a
/// camera one frame late) is still used, anything older is not.
pub const MAX_IMAGE_AGE_PERIODS: f64 = 1.5;

/// Odometry older than this (frame stamp − pose stamp) is not used, ns: dead-reckoning a
/// pose further than this is a guess, so the stage keeps extrapolating the pose it last
/// published instead (one period at a time).
pub const MAX_POSE_AGE_NS: u64 = 1_000_000_000;

/// One frame of sensor data.
#[derive(Clone, Debug)]
pub struct SensorFrame {
    /// Sensor timestamp, ns.
    pub stamp_ns: u64,
    /// All cameras, rig order, each `width × height × 3` bytes.
    pub images: Vec<u8>,
    /// Bit `c` set when camera `c` delivered a usable image.
    pub present: u32,
    /// Per camera, rig order: when its image was taken, ns (`stamp_ns` for an image of this
    /// frame; older for a late or repeated one). Meaningful only where `present` is set.
    pub camera_stamps_ns: Vec<u64>,
    /// Ego pose from odometry (its own `stamp_ns` says when it was measured).
    pub ego: EgoPose,
    /// Whether `ego` came from odometry; false when odometry is missing (the source reports
    /// it as an issue, and `ego` is ignored).
    pub ego_present: bool,
    /// Ground truth, world frame (empty when the source has none), at most [`MAX_GT`].
    pub gt: Vec<GtBox>,
    /// A source whose cameras deliver JPEG ([`FrameSource::jpeg_capacity`] > 0): every
    /// camera's JPEG stream, rig order, back to back (`images` is then unused). Empty
    /// otherwise.
    pub jpeg: Vec<u8>,
    /// Bytes of each camera's stream in `jpeg` (0: none this frame). Empty when the source
    /// delivers decoded images.
    pub jpeg_len: Vec<u32>,
}

/// Anything that delivers sensor frames to the driving graph.
pub trait FrameSource: Send + Sync + std::fmt::Debug {
    /// Camera rig, in image order.
    fn cameras(&self) -> &[CameraSpec];
    /// Size of every camera image, (width, height) px.
    fn image_size(&self) -> (usize, usize);
    /// Frame period, ns.
    fn period_ns(&self) -> u64;
    /// The road map (zeroed when the source has none).
    fn map(&self) -> &RoadMap;
    /// Frames available (a streaming source: at most this many, exact once it has been read
    /// to the end).
    fn frame_count(&self) -> usize;
    /// Frame `k` (None past the end, and for a streaming source outside the window
    /// [`FrameSource::advance`] made available). Hot path: no allocation, no I/O.
    fn frame(&self, k: usize) -> Option<&SensorFrame>;
    /// (frame, what) for everything that was wrong with the input.
    fn issues(&self) -> &[(u64, String)];
    /// Where the frames come from, for reports.
    fn describe(&self) -> &str;

    /// Bytes of one camera image.
    fn image_len(&self) -> usize {
        let (w, h) = self.image_size();
        w * h * 3
    }

    /// Largest JPEG stream per camera, bytes, when this source's frames carry their cameras
    /// as JPEG for the graph to decode (the `jpeg_decode` stage: decoding is then part of the
    /// measured frame); 0 (the default) when frames carry decoded RGB images.
    fn jpeg_capacity(&self) -> usize {
        0
    }

    /// Whether frames come in windows read while the graph runs (bounded memory) rather than
    /// all at once: the driver then runs the graph one window at a time, calling
    /// [`FrameSource::advance`] between runs.
    fn streaming(&self) -> bool {
        false
    }

    /// A streaming source: makes the next window of frames available and returns their
    /// numbers (blocking until it is read); `None` at the end of the input. Call it only
    /// between runs, when no frame is in flight: references from [`FrameSource::frame`] into
    /// the previous window must no longer be in use. A source held in memory returns `None`.
    fn advance(&self) -> Option<std::ops::Range<usize>> {
        None
    }

    /// The driver will not ask for the truth of frames before `frame` again: a streaming
    /// source may forget it (so what it keeps per frame does not grow with the input).
    fn forget_truth_before(&self, _frame: usize) {}

    /// Frame `k`'s ego pose and ground truth, for evaluation after a run (a streaming
    /// source keeps them for every frame it read; images it does not keep). Allocates.
    fn truth(&self, k: usize) -> Option<FrameTruth> {
        self.frame(k).map(|f| FrameTruth {
            ego: f.ego,
            gt: f.gt.clone(),
        })
    }
}

/// What evaluation needs of a frame once its images are gone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameTruth {
    /// The frame's ego pose (from odometry).
    pub ego: EgoPose,
    /// Ground truth, world frame (empty when the source has none).
    pub gt: Vec<GtBox>,
}

/// A shared source is a source (so wrappers such as the simulator's fault injection can
/// hold an `Arc<dyn FrameSource>`).
impl<T: FrameSource + ?Sized> FrameSource for std::sync::Arc<T> {
    fn cameras(&self) -> &[CameraSpec] {
        (**self).cameras()
    }
    fn image_size(&self) -> (usize, usize) {
        (**self).image_size()
    }
    fn period_ns(&self) -> u64 {
        (**self).period_ns()
    }
    fn map(&self) -> &RoadMap {
        (**self).map()
    }
    fn frame_count(&self) -> usize {
        (**self).frame_count()
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        (**self).frame(k)
    }
    fn issues(&self) -> &[(u64, String)] {
        (**self).issues()
    }
    fn describe(&self) -> &str {
        (**self).describe()
    }
    fn streaming(&self) -> bool {
        (**self).streaming()
    }
    fn jpeg_capacity(&self) -> usize {
        (**self).jpeg_capacity()
    }
    fn advance(&self) -> Option<std::ops::Range<usize>> {
        (**self).advance()
    }
    fn truth(&self, k: usize) -> Option<FrameTruth> {
        (**self).truth(k)
    }
    fn forget_truth_before(&self, frame: usize) {
        (**self).forget_truth_before(frame)
    }
}

/// Whether a ground-truth box is inside the region the pipeline perceives and is
/// evaluated on: the BEV grid around the ego.
pub fn in_perception_range(ego: &EgoPose, gt: &GtBox) -> bool {
    let bev = crate::types::BevSpec::DEFAULT;
    let (x, y) = crate::geometry::world_to_ego(ego, gt.x, gt.y);
    let margin = 1.0;
    gt.valid == 1
        && gt.class < class::COUNT as u32
        && x >= (bev.x0 + margin) as f64
        && x < (bev.x0 + bev.nx as f32 * bev.res - margin) as f64
        && y >= (bev.y0 + margin) as f64
        && y < (bev.y0 + bev.ny as f32 * bev.res - margin) as f64
}
