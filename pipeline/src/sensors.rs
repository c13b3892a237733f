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
//!   [`SensorFrame::present`] (its bytes are then ignored);
//! - [`FrameSource::frame`] is called from the `sensors` stage on the hot path: it must not
//!   allocate, block or do I/O — return a view of a frame that is already in memory (the
//!   stage copies it into the arena, one `memcpy` per camera);
//! - calibration ([`CameraSpec`]) and the map do not change during a run.

use crate::camera::CameraSpec;
use crate::types::{class, EgoPose, GtBox, RoadMap};

/// Ground-truth boxes a frame can carry into the arena.
pub const MAX_GT: usize = 128;

/// One frame of sensor data.
#[derive(Clone, Debug)]
pub struct SensorFrame {
    /// Sensor timestamp, ns.
    pub stamp_ns: u64,
    /// All cameras, rig order, each `width × height × 3` bytes.
    pub images: Vec<u8>,
    /// Bit `c` set when camera `c` delivered a usable image.
    pub present: u32,
    /// Ego pose (zero when odometry is missing: the source reports it as an issue).
    pub ego: EgoPose,
    /// Ground truth, world frame (empty when the source has none), at most [`MAX_GT`].
    pub gt: Vec<GtBox>,
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
    /// Frames available.
    fn frame_count(&self) -> usize;
    /// Frame `k` (None past the end). Hot path: no allocation, no I/O.
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
