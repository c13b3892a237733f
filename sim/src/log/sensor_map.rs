//! Which topics of a log are the rig's sensors: the `[sensors]` table of the config, and the
//! calibration file used where a log has no `camera_info` or `/tf_static`.
//!
//! Contract:
//! - [`SensorMap::default`] is redline's own layout: cameras discovered from
//!   `/cam/<name>/camera_info`, images on `/cam/<name>/image_raw`, odometry on `/ego/odom`,
//!   static transforms on `/tf_static`. Logs that redline writes need no `[sensors]` table.
//! - With cameras listed, exactly those cameras are read, in the listed order (the rig order):
//!   each from its image topic (`sensor_msgs/msg/Image` in 8- or 16-bit RGB, BGR or grey, a
//!   Bayer mosaic or YUV 4:2:2 or 4:2:0 — see [`crate::msgs::PixelEncoding`] —,
//!   `sensor_msgs/msg/CompressedImage` in JPEG or PNG, or H.264 or H.265 video, see [`crate::video`]).
//!   Intrinsics come from the camera's
//!   `camera_info` topic when the log has a readable one, else from the calibration file; the
//!   mount comes from the log's static transforms (the chain `base_link` → … → the camera's
//!   frame, composed), else from the calibration file. A camera with neither is an error that
//!   says which and what to add.
//! - A calibration file ([`Rig`], TOML) describes cameras as pinholes mounted on `base_link`:
//!
//!   ```toml
//!   [[camera]]
//!   name = "front"          # the name in [[sensors.cameras]]
//!   width = 1920            # px
//!   height = 1080
//!   fx = 1000.0             # px
//!   fy = 1000.0
//!   cx = 960.0
//!   cy = 540.0
//!   x = 1.5                 # m, base_link (x forward, y left, z up)
//!   y = 0.0
//!   z = 1.6
//!   yaw_deg = 0.0           # heading, + = left
//!   pitch_deg = 5.0         # + = looking down
//!   ```
//!
//! Cost: parsing and lookups at open; nothing here runs per frame.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redline_pipeline::camera::{CameraSpec, Distortion};
use serde::{Deserialize, Serialize};

use super::{TOPIC_GROUND_TRUTH, TOPIC_MAP, TOPIC_ODOM, TOPIC_TF_STATIC};
use crate::msgs::{Quaternion, TransformStamped, Vector3};

/// The frame every camera mount is expressed in.
pub const BASE_FRAME: &str = "base_link";

/// The `[sensors]` table: which topics are the rig (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SensorMap {
    /// Odometry topic (`nav_msgs/msg/Odometry`); default `/ego/odom`. A localiser's pose
    /// topic (`geometry_msgs/msg/PoseWithCovarianceStamped` or `PoseStamped`) also serves,
    /// and so does a transform tree topic (`tf2_msgs/msg/TFMessage`, `/tf`): `base_link`'s
    /// transform composed up its chain of latest parent transforms (`odom`, `map`, ...; the
    /// static transforms count too, e.g. `base_footprint` → `base_link`).
    /// Speed and yaw rate then come from consecutive poses (0 for the log's first, and after
    /// a gap of more than 1 s; a read from later in the log first reads the
    /// [`super::EGO_PREROLL_NS`] before its start).
    pub odometry: Option<String>,
    /// Static transforms topic (`tf2_msgs/msg/TFMessage`); default `/tf_static`.
    pub tf_static: Option<String>,
    /// Ground-truth topic (redline's own); default `/ground_truth`.
    pub ground_truth: Option<String>,
    /// Road map topic (redline's own); default `/map`.
    pub map: Option<String>,
    /// A [`Rig`] file for cameras whose calibration the log lacks (relative paths are
    /// resolved against the config file's folder by the CLI).
    pub calibration: Option<PathBuf>,
    /// The cameras, rig order; empty: discover `/cam/<name>/camera_info` (redline's layout).
    pub cameras: Vec<CameraTopics>,
    /// Which time places a camera image, odometry or ground-truth message in a frame: its
    /// header stamp (default), or the time the recorder logged it (`"log_time"`: for logs
    /// whose drivers leave header stamps zero, or stamp each sensor on its own clock).
    pub stamps: Stamps,
}

/// The time that places a sensor message in a frame (the `stamps` key of `[sensors]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stamps {
    /// `header.stamp`, as the sensor (or its driver) stamped it.
    #[default]
    Header,
    /// The MCAP log time: when the recorder received the message.
    LogTime,
}

/// One camera of the `[sensors]` table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CameraTopics {
    /// The camera's name (reports, faults, the calibration file).
    pub name: String,
    /// Its image topic (`Image`, `CompressedImage` or `foxglove_msgs/msg/CompressedVideo`).
    pub image: String,
    /// Its `camera_info` topic, if the log has one.
    pub camera_info: Option<String>,
    /// Its TF frame (for the mount); default: the `camera_info`'s `header.frame_id`.
    pub frame_id: Option<String>,
}

impl SensorMap {
    /// The odometry topic.
    pub fn odometry_topic(&self) -> &str {
        self.odometry.as_deref().unwrap_or(TOPIC_ODOM)
    }

    /// The static transforms topic.
    pub fn tf_static_topic(&self) -> &str {
        self.tf_static.as_deref().unwrap_or(TOPIC_TF_STATIC)
    }

    /// The ground-truth topic.
    pub fn ground_truth_topic(&self) -> &str {
        self.ground_truth.as_deref().unwrap_or(TOPIC_GROUND_TRUTH)
    }

    /// The road map topic.
    pub fn map_topic(&self) -> &str {
        self.map.as_deref().unwrap_or(TOPIC_MAP)
    }

    /// Checks names and topics (no empty or duplicate camera names or image topics; at most
    /// 32 cameras).
    pub fn validate(&self) -> Result<(), String> {
        if self.cameras.len() > 32 {
            return Err(format!(
                "[sensors] lists {} cameras; at most 32 are supported",
                self.cameras.len()
            ));
        }
        for (i, c) in self.cameras.iter().enumerate() {
            if c.name.is_empty() || c.image.is_empty() {
                return Err(format!(
                    "[[sensors.cameras]] entry {} needs both `name` and `image` (its image topic)",
                    i + 1
                ));
            }
            if self.cameras[..i].iter().any(|o| o.name == c.name) {
                return Err(format!("[sensors] names camera {:?} twice", c.name));
            }
            if self.cameras[..i].iter().any(|o| o.image == c.image) {
                return Err(format!(
                    "[sensors] gives image topic {} to two cameras",
                    c.image
                ));
            }
        }
        Ok(())
    }
}

/// A calibration file: pinhole cameras mounted on `base_link` (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rig {
    /// The cameras.
    #[serde(default)]
    pub camera: Vec<RigCamera>,
}

/// One camera of a [`Rig`] file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RigCamera {
    /// Name, as in `[[sensors.cameras]]`.
    pub name: String,
    /// Image width, px.
    pub width: u32,
    /// Image height, px.
    pub height: u32,
    /// Focal length, px.
    pub fx: f64,
    /// Focal length, px.
    pub fy: f64,
    /// Principal point, px.
    pub cx: f64,
    /// Principal point, px.
    pub cy: f64,
    /// Mount position, m (`base_link`).
    #[serde(default)]
    pub x: f64,
    /// Mount position, m.
    #[serde(default)]
    pub y: f64,
    /// Mount position, m.
    #[serde(default)]
    pub z: f64,
    /// Mount heading, degrees (+ = left).
    #[serde(default)]
    pub yaw_deg: f64,
    /// Mount pitch, degrees (+ = looking down).
    #[serde(default)]
    pub pitch_deg: f64,
    /// Lens distortion model as in a ROS `camera_info`: `plumb_bob`, `rational_polynomial`
    /// or `equidistant` (default: none, an ideal pinhole).
    #[serde(default)]
    pub distortion_model: String,
    /// Its coefficients, in `camera_info` order (`plumb_bob`: k1, k2, p1, p2, k3).
    #[serde(default)]
    pub d: Vec<f64>,
}

/// A calibration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RigError {
    /// Unreadable.
    #[error("cannot read calibration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML or unknown keys.
    #[error("calibration file {path}: {message} (see `redline_sim::log::sensor_map` for the format: [[camera]] tables with name, width, height, fx, fy, cx, cy, x, y, z, yaw_deg, pitch_deg)")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// Values that make no camera.
    #[error("calibration file {path}: camera {name:?}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The camera.
        name: String,
        /// What is wrong.
        why: String,
    },
}

impl Rig {
    /// Reads and checks a calibration file.
    pub fn load(path: &Path) -> Result<Rig, RigError> {
        let text = std::fs::read_to_string(path).map_err(|source| RigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks calibration TOML (`path` names it in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Rig, RigError> {
        let rig: Rig = toml::from_str(text).map_err(|e| RigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        for c in &rig.camera {
            let invalid = |why: String| RigError::Invalid {
                path: path.to_path_buf(),
                name: c.name.clone(),
                why,
            };
            if c.width == 0 || c.height == 0 || c.width > 8192 || c.height > 8192 {
                return Err(invalid(format!(
                    "size {}x{} must be within 1..=8192 px",
                    c.width, c.height
                )));
            }
            let values = [
                c.fx,
                c.fy,
                c.cx,
                c.cy,
                c.x,
                c.y,
                c.z,
                c.yaw_deg,
                c.pitch_deg,
            ];
            if values.iter().chain(&c.d).any(|v| !v.is_finite()) || c.fx <= 0.0 || c.fy <= 0.0 {
                return Err(invalid(
                    "every value must be finite and fx, fy positive".into(),
                ));
            }
            Distortion::from_ros(&c.distortion_model, &c.d).map_err(|why| {
                invalid(format!(
                    "{why}; give one of those, or no distortion_model and d"
                ))
            })?;
        }
        Ok(rig)
    }

    /// The camera named `name`, as a [`CameraSpec`].
    pub fn spec(&self, name: &str) -> Option<CameraSpec> {
        self.camera
            .iter()
            .find(|c| c.name == name)
            .map(|c| CameraSpec {
                name: c.name.clone(),
                width: c.width,
                height: c.height,
                fx: c.fx,
                fy: c.fy,
                cx: c.cx,
                cy: c.cy,
                x: c.x,
                y: c.y,
                z: c.z,
                yaw: c.yaw_deg.to_radians(),
                pitch: c.pitch_deg.to_radians(),
                // Checked by `parse`.
                distortion: Distortion::from_ros(&c.distortion_model, &c.d).unwrap_or_default(),
            })
    }
}

/// Rotates `v` by the unit quaternion `q`.
fn rotate(q: Quaternion, v: Vector3) -> Vector3 {
    let p = Quaternion {
        x: v.x,
        y: v.y,
        z: v.z,
        w: 0.0,
    };
    let r = q * p * q.conjugate();
    Vector3 {
        x: r.x,
        y: r.y,
        z: r.z,
    }
}

/// The pose of `frame` in [`BASE_FRAME`] composed along the static transform tree (parent →
/// child edges; at most 32 hops, so a cycle ends). `None` when no chain connects them.
pub fn mount_in_base(tfs: &[TransformStamped], frame: &str) -> Option<(Vector3, Quaternion)> {
    let parent_of: BTreeMap<&str, &TransformStamped> = tfs
        .iter()
        .map(|t| (t.child_frame_id.trim_start_matches('/'), t))
        .collect();
    // Walk up from the camera to base_link, then compose from the top down.
    let mut chain = Vec::new();
    let mut at = frame.trim_start_matches('/');
    while at != BASE_FRAME {
        let t = parent_of.get(at)?;
        chain.push(*t);
        at = t.header.frame_id.trim_start_matches('/');
        if chain.len() > 32 {
            return None;
        }
    }
    let mut pos = Vector3::default();
    let mut rot = Quaternion::IDENTITY;
    for t in chain.iter().rev() {
        let d = rotate(rot, t.transform.translation);
        pos = Vector3 {
            x: pos.x + d.x,
            y: pos.y + d.y,
            z: pos.z + d.z,
        };
        rot = rot * t.transform.rotation;
    }
    Some((pos, rot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::{Header, Transform};

    fn tf(parent: &str, child: &str, t: (f64, f64, f64), q: Quaternion) -> TransformStamped {
        TransformStamped {
            header: Header::new(0, parent),
            child_frame_id: child.into(),
            transform: Transform {
                translation: Vector3 {
                    x: t.0,
                    y: t.1,
                    z: t.2,
                },
                rotation: q,
            },
        }
    }

    #[test]
    fn a_chain_of_static_transforms_composes_to_the_camera_mount() {
        // base_link -> sensor_kit (1 m forward, 2 m up, turned 90 deg left)
        //   -> camera_link (0.5 m along the kit's x) -> optical frame.
        let yaw = 20f64.to_radians();
        let pitch = 5f64.to_radians();
        let tfs = vec![
            tf(
                "camera_link",
                "camera_optical",
                (0.0, 0.0, 0.0),
                Quaternion::camera_mount(yaw, pitch),
            ),
            tf(
                "base_link",
                "sensor_kit",
                (1.0, 0.0, 2.0),
                Quaternion::from_yaw(std::f64::consts::FRAC_PI_2),
            ),
            tf(
                "sensor_kit",
                "camera_link",
                (0.5, 0.0, 0.0),
                Quaternion::IDENTITY,
            ),
        ];
        let (p, q) = mount_in_base(&tfs, "camera_optical").unwrap();
        assert!(
            (p.x - 1.0).abs() < 1e-12 && (p.y - 0.5).abs() < 1e-12 && (p.z - 2.0).abs() < 1e-12
        );
        let (y, pt) = q.camera_mount_angles();
        assert!(
            (y - (yaw + std::f64::consts::FRAC_PI_2)).abs() < 1e-12,
            "{y}"
        );
        assert!((pt - pitch).abs() < 1e-12, "{pt}");
        assert!(mount_in_base(&tfs, "lidar").is_none());
        // a cycle ends
        let cyc = vec![
            tf("a", "b", (0.0, 0.0, 0.0), Quaternion::IDENTITY),
            tf("b", "a", (0.0, 0.0, 0.0), Quaternion::IDENTITY),
        ];
        assert!(mount_in_base(&cyc, "a").is_none());
    }

    #[test]
    fn rig_files_parse_and_bad_values_are_named() {
        let ok = "[[camera]]\nname = \"front\"\nwidth = 640\nheight = 480\nfx = 500.0\nfy = 500.0\ncx = 320.0\ncy = 240.0\nz = 1.5\npitch_deg = 10.0\n";
        let rig = Rig::parse(ok, Path::new("rig.toml")).unwrap();
        let s = rig.spec("front").unwrap();
        assert_eq!((s.width, s.height, s.z), (640, 480, 1.5));
        assert!((s.pitch - 10f64.to_radians()).abs() < 1e-15);
        assert!(rig.spec("rear").is_none());
        let e = Rig::parse(&ok.replace("fx = 500.0", "fx = -1.0"), Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"front\"") && e.contains("fx"), "{e}");
        let e = Rig::parse("[[camera]]\nname = \"x\"\nwidht = 3\n", Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("r.toml") && e.contains("widht"), "{e}");
        // Lens distortion, as in a camera_info.
        assert!(s.distortion.is_none());
        let lens =
            format!("{ok}distortion_model = \"plumb_bob\"\nd = [-0.28, 0.07, 0.001, 0.0, 0.0]\n");
        let s = Rig::parse(&lens, Path::new("r.toml"))
            .unwrap()
            .spec("front")
            .unwrap();
        assert_eq!(
            s.distortion,
            Distortion::Polynomial {
                k: [-0.28, 0.07, 0.0, 0.0, 0.0, 0.0],
                p: [0.001, 0.0]
            }
        );
        let e = Rig::parse(&lens.replace("plumb_bob", "fov"), Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"fov\"") && e.contains("plumb_bob"), "{e}");
    }

    #[test]
    fn sensor_maps_are_checked() {
        let cam = |n: &str, t: &str| CameraTopics {
            name: n.into(),
            image: t.into(),
            ..CameraTopics::default()
        };
        let mut m = SensorMap {
            cameras: vec![cam("front", "/a"), cam("rear", "/b")],
            ..SensorMap::default()
        };
        assert!(m.validate().is_ok());
        assert_eq!(m.odometry_topic(), TOPIC_ODOM);
        m.cameras.push(cam("front", "/c"));
        assert!(m.validate().unwrap_err().contains("twice"));
        m.cameras[2] = cam("side", "/a");
        assert!(m.validate().unwrap_err().contains("/a"));
        m.cameras[2] = cam("", "/c");
        assert!(m.validate().unwrap_err().contains("name"));
    }
}
