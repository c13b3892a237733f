//! Scenario → log (`redline sim generate`): renders a scenario and records it as an MCAP sensor log (ROS 2
//! profile: camera images and infos, odometry, static transforms, ground truth, road map).

use std::path::Path;

use redline_pipeline::types::{MAP_POINTS, MAP_SPACING};

use crate::log::{LogError, LogStats, LogWriter};
use crate::scenario::Scenario;
use crate::types::RgbImage;

/// Renders every frame (at most `frames`) of `scenario` into a log at `path`; `progress`
/// is called with the number of frames written.
pub fn write_scenario_log(
    scenario: &Scenario,
    path: &Path,
    frames: Option<usize>,
    progress: &mut dyn FnMut(usize),
) -> Result<LogStats, LogError> {
    let mut w = LogWriter::create(path, &scenario.cameras)?;
    let centre = scenario.road.sample_centre(MAP_SPACING as f64, MAP_POINTS);
    w.write_map(scenario.road.lanes, scenario.road.lane_width, &centre)?;
    let n = frames.map_or(scenario.frame_count(), |f| f.min(scenario.frame_count()));
    let mut img = RgbImage::default();
    for k in 0..n {
        let stamp = scenario.stamp_ns(k);
        for c in 0..scenario.cameras.len() {
            scenario.render(k, c, &mut img);
            w.write_image(c, stamp, &img)?;
        }
        w.write_odometry(&scenario.ego(k))?;
        w.write_ground_truth(&scenario.ground_truth(k))?;
        progress(k + 1);
    }
    w.finish()
}
