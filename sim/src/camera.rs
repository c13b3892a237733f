//! The simulator's camera side: the surround rig it renders and the world frame.
//!
//! The camera model itself (pinhole projection, deterministic trigonometry) is the
//! pipeline's, [`redline_pipeline::camera`]; this module adds what only a simulator knows:
//! where the cameras are mounted ([`surround_rig`]: six surround cameras, tested to cover
//! 360°, and a forward telephoto camera for the far field, [`tele_camera`]) and where the
//! ego vehicle is in the world ([`world_to_ego`], [`pose_in_world`], [`project_world`]).
//!
//! Cost: a handful of flops per call; nothing here allocates except the rig builders (one
//! name per camera). Never panics.

use redline_pipeline::camera::det;
use redline_pipeline::camera::{project_ego, CameraPose, CameraSpec};

use crate::types::EgoState;

type V3 = [f64; 3];

/// The camera's pose in the world frame for the ego pose `ego` (flat ground: the ego
/// frame is the world frame rotated by `ego.yaw` about z and shifted to `(ego.x, ego.y, 0)`).
pub fn pose_in_world(cam: &CameraSpec, ego: &EgoState) -> CameraPose {
    let p = CameraPose::in_ego(cam);
    let (s, c) = det::sin_cos(ego.yaw);
    let rot = |v: V3| [c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]];
    let o = rot(p.origin);
    CameraPose {
        origin: [o[0] + ego.x, o[1] + ego.y, o[2]],
        forward: rot(p.forward),
        right: rot(p.right),
        down: rot(p.down),
    }
}

/// One mount of the rig: name, x, y (ego frame, m), yaw, horizontal FOV, pitch (degrees).
type Mount<'a> = (&'a str, f64, f64, f64, f64, f64);

/// The six surround cameras' mounts.
const MOUNTS: [Mount<'static>; 6] = [
    ("front", 1.9, 0.0, 0.0, 70.0, 5.0),
    ("front_left", 1.5, 0.75, 55.0, 80.0, 8.0),
    ("front_right", 1.5, -0.75, -55.0, 80.0, 8.0),
    ("back_left", 0.9, 0.75, 110.0, 80.0, 8.0),
    ("back_right", 0.9, -0.75, -110.0, 80.0, 8.0),
    ("back", 0.5, 0.0, 180.0, 70.0, 5.0),
];

/// Roof height of the camera mounts, m.
pub const MOUNT_HEIGHT: f64 = 1.6;

/// The front camera's horizontal FOV in the default rig, degrees: a narrow, long-range
/// front camera (as many production rigs have) rather than nuScenes' 70°. At the network's
/// 256x128 input a car 50 m ahead is about 13 pixels wide at 40° against 7 at 70°; with the
/// shipped model trained for it, the six unseen drives' mAP is 0.679 against 0.592 and MOTA
/// 0.607 against 0.468 (README model card). Still overlaps the front-left/right views by 5°.
pub const DEFAULT_FRONT_HFOV_DEG: f64 = 40.0;

/// The narrowest front camera the rig accepts, degrees: the front-left and front-right
/// views start 15° off the axis, so 40° keeps 5° of overlap on each side (as every other
/// pair of neighbours has at least).
pub const MIN_FRONT_HFOV_DEG: f64 = 40.0;

/// The widest front camera the rig accepts, degrees.
pub const MAX_FRONT_HFOV_DEG: f64 = 120.0;

/// The default rig's seventh camera, a forward telephoto view for the far field, degrees of
/// horizontal FOV (`None` in [`crate::scenario::ScenarioConfig::tele_hfov_deg`] leaves it
/// out). Mounted at the front camera's place, pitched [`TELE_PITCH_DEG`] down so that the
/// horizon sits near its top edge: at 20° and 256 px a car 60 m ahead (1.9 m wide) is
/// about 24 px wide (11 through the 40° front camera), and the ground from ~15 m ahead to
/// beyond the BEV range spans its lower 90 rows. Where it sees a BEV cell it is one of the
/// (at most two) views the view transform averages there (`BevProjector`).
pub const DEFAULT_TELE_HFOV_DEG: f64 = 20.0;

/// The narrowest telephoto camera the rig accepts, degrees.
pub const MIN_TELE_HFOV_DEG: f64 = 10.0;

/// The telephoto camera's downward pitch, degrees.
pub const TELE_PITCH_DEG: f64 = 2.0;

/// The default rig: six surround cameras (front, front_left, front_right, back_left,
/// back_right, back — in this order, [`surround_rig_with`]) and then the forward telephoto
/// camera, `front_tele` ([`tele_camera`] at [`DEFAULT_TELE_HFOV_DEG`]). The surround
/// cameras are mounted on the roof (z = 1.6 m), pitched 5° (front/back) or 8° (sides) down,
/// horizontal FOV [`DEFAULT_FRONT_HFOV_DEG`] (40°) front, 70° back and 80° sides at yaws 0°,
/// ±55°, ±110°, 180°, so that neighbouring views overlap by 5–20° and together cover 360°.
/// Square pixels, principal point at the image centre. A zero size is treated as 1 px for
/// the focal length.
pub fn surround_rig(width: u32, height: u32) -> Vec<CameraSpec> {
    rig(
        width,
        height,
        DEFAULT_FRONT_HFOV_DEG,
        Some(DEFAULT_TELE_HFOV_DEG),
    )
}

/// A rig as a scenario configures it: the six surround cameras with the front camera at
/// `front_hfov_deg` ([`surround_rig_with`]), then the telephoto camera at `tele_hfov_deg`
/// ([`tele_camera`]) unless it is `None`. The caller keeps both FOVs in range
/// ([`crate::scenario::ScenarioConfig::validate`] does).
pub fn rig(
    width: u32,
    height: u32,
    front_hfov_deg: f64,
    tele_hfov_deg: Option<f64>,
) -> Vec<CameraSpec> {
    let mut rig = surround_rig_with(width, height, front_hfov_deg);
    if let Some(tele) = tele_hfov_deg {
        rig.push(tele_camera(width, height, tele));
    }
    rig
}

/// The forward telephoto camera (`front_tele`) at `hfov_deg` ([`DEFAULT_TELE_HFOV_DEG`]):
/// mounted where the front camera is, pitched [`TELE_PITCH_DEG`] down. The caller keeps
/// `hfov_deg` within [`MIN_TELE_HFOV_DEG`] and the front camera's FOV
/// ([`crate::scenario::ScenarioConfig::validate`] does).
pub fn tele_camera(width: u32, height: u32, hfov_deg: f64) -> CameraSpec {
    let (_, x, y, yaw_deg, _, _) = MOUNTS[0];
    mount(
        width,
        height,
        ("front_tele", x, y, yaw_deg, hfov_deg, TELE_PITCH_DEG),
    )
}

/// The camera at `mount` with `width x height` pixels.
fn mount(width: u32, height: u32, mount: Mount<'_>) -> CameraSpec {
    let (name, x, y, yaw_deg, hfov_deg, pitch_deg) = mount;
    let deg = std::f64::consts::PI / 180.0;
    let f = 0.5 * f64::from(width.max(1)) / det::tan(0.5 * hfov_deg * deg);
    CameraSpec {
        name: name.to_string(),
        width,
        height,
        fx: f,
        fy: f,
        cx: 0.5 * f64::from(width),
        cy: 0.5 * f64::from(height),
        x,
        y,
        z: MOUNT_HEIGHT,
        yaw: if yaw_deg == 180.0 {
            std::f64::consts::PI
        } else {
            yaw_deg * deg
        },
        pitch: pitch_deg * deg,
        distortion: Default::default(),
    }
}

/// The six surround cameras of [`surround_rig`] (no telephoto) with the front camera's
/// horizontal FOV set to `front_hfov_deg`: a narrower front camera (as production rigs
/// carry for the far field) puts more pixels on the road ahead at the same image size: 40°
/// has 1.9× the focal length of 70°. The
/// caller keeps it within [`MIN_FRONT_HFOV_DEG`]..=[`MAX_FRONT_HFOV_DEG`]
/// ([`crate::scenario::ScenarioConfig::validate`] does) for the rig to cover 360°.
pub fn surround_rig_with(width: u32, height: u32, front_hfov_deg: f64) -> Vec<CameraSpec> {
    MOUNTS
        .iter()
        .map(|&(name, x, y, yaw_deg, hfov_deg, pitch_deg)| {
            let hfov_deg = if name == "front" {
                front_hfov_deg
            } else {
                hfov_deg
            };
            mount(width, height, (name, x, y, yaw_deg, hfov_deg, pitch_deg))
        })
        .collect()
}

/// World point to ego frame (x forward, y left, z up; flat ground).
pub fn world_to_ego(ego: &EgoState, x: f64, y: f64, z: f64) -> [f64; 3] {
    let (s, c) = det::sin_cos(ego.yaw);
    let dx = x - ego.x;
    let dy = y - ego.y;
    [c * dx + s * dy, -s * dx + c * dy, z]
}

/// Ego-frame point to world frame (inverse of [`world_to_ego`]).
pub fn ego_to_world(ego: &EgoState, x: f64, y: f64, z: f64) -> [f64; 3] {
    let (s, c) = det::sin_cos(ego.yaw);
    [ego.x + c * x - s * y, ego.y + s * x + c * y, z]
}

/// Projects a world point into camera `cam` given the ego pose: `Some((u, v, depth))` when
/// in front of the camera (depth > 0.1 m); pixel coordinates may be outside the image.
pub fn project_world(
    cam: &CameraSpec,
    ego: &EgoState,
    x: f64,
    y: f64,
    z: f64,
) -> Option<(f64, f64, f64)> {
    let p = world_to_ego(ego, x, y, z);
    project_ego(cam, p[0], p[1], p[2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EgoState;

    #[test]
    fn ego_world_round_trip() {
        let ego = EgoState {
            x: 10.0,
            y: -3.0,
            yaw: 0.7,
            ..EgoState::default()
        };
        let w = ego_to_world(&ego, 5.0, 2.0, 1.0);
        let e = world_to_ego(&ego, w[0], w[1], w[2]);
        assert!((e[0] - 5.0).abs() < 1e-12 && (e[1] - 2.0).abs() < 1e-12);
    }
}
