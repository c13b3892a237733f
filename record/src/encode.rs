//! One recorded frame as Foxglove messages (writer thread only: allocates freely).
//!
//! Frames of reference: [`MAP_FRAME`] is the pipeline's world frame (x, y in metres, z up);
//! [`EGO_FRAME`] is the ego frame (x forward, y left, origin under the rear axle). Every
//! frame with an ego pose gets a `FrameTransform` map → base_link, so boxes in the ego
//! frame (detections, the BEV grid) and paths in the world frame (tracks, predictions, the
//! plan) draw in place. Each `SceneUpdate` first deletes everything on its topic, so
//! objects that vanished do not linger; entity ids are stable (`track/<id>`), so a track
//! keeps its identity from frame to frame.

use foxglove::messages::{
    line_primitive, packed_element_field, scene_entity_deletion, Color, CubePrimitive,
    FrameTransform, Grid, KeyValuePair, LinePrimitive, PackedElementField, Point3, Pose,
    Quaternion, SceneEntity, SceneEntityDeletion, SceneUpdate, TextPrimitive, Timestamp, Vector2,
    Vector3,
};
use redline_pipeline::types::{class, BevSpec, EGO_LENGTH, EGO_REAR_TO_CENTRE, EGO_WIDTH, PRED_DT};
use redline_runtime::det_math as dm;
use serde::Serialize;

use crate::frame::OutputRecord;

/// The world frame's id.
pub const MAP_FRAME: &str = "map";
/// The ego frame's id.
pub const EGO_FRAME: &str = "base_link";

/// Channel topics, one per kind of output.
pub mod topic {
    /// `foxglove.FrameTransform`: map → base_link from the ego pose.
    pub const TF: &str = "/tf";
    /// `foxglove.SceneUpdate`: detected boxes (ego frame) with class and score.
    pub const DETECTIONS: &str = "/redline/detections";
    /// `foxglove.SceneUpdate`: confirmed tracks (world frame), labelled `<class> #<id>`.
    pub const TRACKS: &str = "/redline/tracks";
    /// `foxglove.SceneUpdate`: each track's predicted path (world frame).
    pub const PREDICTIONS: &str = "/redline/predictions";
    /// `foxglove.SceneUpdate`: the planned trajectory (world frame) and the ego box.
    pub const PLAN: &str = "/redline/plan";
    /// `foxglove.Grid`: the BEV segmentation, one `class` byte per cell (ego frame).
    pub const SEGMENTATION: &str = "/redline/bev_segmentation";
    /// JSON [`FrameStats`](super::FrameStats): latency, mode, deadline miss per frame.
    pub const FRAME: &str = "/redline/frame";
    /// Every topic, in the order the writer creates them.
    pub const ALL: [&str; 7] = [
        TF,
        DETECTIONS,
        TRACKS,
        PREDICTIONS,
        PLAN,
        SEGMENTATION,
        FRAME,
    ];
}

/// Per-frame facts on [`topic::FRAME`], numeric where the Plot panel charts them.
#[derive(Clone, Debug, Serialize)]
pub struct FrameStats {
    /// Frame number.
    pub frame: u64,
    /// Release to publish, ms.
    pub latency_ms: f64,
    /// Mode index (0 = nominal).
    pub mode: u32,
    /// Mode name.
    pub mode_name: String,
    /// 1 when the frame missed its deadline (published the frame-level fallback), else 0.
    pub deadline_miss: u32,
    /// complete / degraded / fallback:...
    pub status: &'static str,
    /// Frame the outputs were computed for; -1 when none finished yet.
    pub held_from: i64,
    /// Valid detections.
    pub detections: u32,
    /// Valid tracks.
    pub tracks: u32,
    /// 0 = a sampled candidate, 1 = the minimum-risk trajectory.
    pub plan_kind: u32,
}

/// The JSON schema of [`FrameStats`] (MCAP schema encoding `jsonschema`).
pub const FRAME_STATS_SCHEMA: &str = r#"{
  "title": "redline.FrameStats",
  "type": "object",
  "properties": {
    "frame": {"type": "integer"},
    "latency_ms": {"type": "number"},
    "mode": {"type": "integer"},
    "mode_name": {"type": "string"},
    "deadline_miss": {"type": "integer"},
    "status": {"type": "string"},
    "held_from": {"type": "integer"},
    "detections": {"type": "integer"},
    "tracks": {"type": "integer"},
    "plan_kind": {"type": "integer"}
  }
}"#;

/// `ns` since the epoch as a protobuf timestamp (saturating past 2106).
pub fn timestamp(ns: u64) -> Timestamp {
    let sec = (ns / 1_000_000_000).min(u64::from(u32::MAX)) as u32;
    Timestamp::new(sec, (ns % 1_000_000_000) as u32)
}

fn yaw_pose(x: f64, y: f64, z: f64, yaw: f64) -> Pose {
    Pose {
        position: Some(Vector3 { x, y, z }),
        orientation: Some(Quaternion {
            x: 0.0,
            y: 0.0,
            z: dm::sin(yaw / 2.0),
            w: dm::cos(yaw / 2.0),
        }),
    }
}

fn rgba(r: f64, g: f64, b: f64, a: f64) -> Color {
    Color { r, g, b, a }
}

/// Box colour and height of a class.
fn class_style(c: u32) -> (Color, f64) {
    match c {
        class::CAR => (rgba(0.2, 0.5, 1.0, 0.6), 1.5),
        class::PEDESTRIAN => (rgba(1.0, 0.6, 0.1, 0.7), 1.75),
        class::CYCLIST => (rgba(0.2, 0.9, 0.3, 0.7), 1.7),
        _ => (rgba(0.7, 0.7, 0.7, 0.6), 1.5),
    }
}

fn class_name(c: u32) -> &'static str {
    class::NAMES.get(c as usize).copied().unwrap_or("unknown")
}

fn kv(key: &str, value: String) -> KeyValuePair {
    KeyValuePair {
        key: key.to_string(),
        value,
    }
}

#[allow(clippy::too_many_arguments)]
fn boxed(
    frame_id: &str,
    id: String,
    t: Timestamp,
    (x, y, yaw): (f64, f64, f64),
    (length, width): (f64, f64),
    cls: u32,
    label: String,
    metadata: Vec<KeyValuePair>,
) -> SceneEntity {
    let (color, h) = class_style(cls);
    SceneEntity {
        timestamp: Some(t),
        frame_id: frame_id.to_string(),
        id,
        cubes: vec![CubePrimitive {
            pose: Some(yaw_pose(x, y, h / 2.0, yaw)),
            size: Some(Vector3 {
                x: length,
                y: width,
                z: h,
            }),
            color: Some(color),
        }],
        texts: vec![TextPrimitive {
            pose: Some(yaw_pose(x, y, h + 0.5, 0.0)),
            billboard: true,
            font_size: 14.0,
            scale_invariant: true,
            color: Some(rgba(1.0, 1.0, 1.0, 1.0)),
            text: label,
        }],
        metadata,
        ..Default::default()
    }
}

fn delete_all(t: Timestamp) -> Vec<SceneEntityDeletion> {
    vec![SceneEntityDeletion {
        timestamp: Some(t),
        r#type: scene_entity_deletion::Type::All as i32,
        id: String::new(),
    }]
}

fn strip(
    points: impl Iterator<Item = (f64, f64)>,
    z: f64,
    color: Color,
    width: f64,
) -> LinePrimitive {
    LinePrimitive {
        r#type: line_primitive::Type::LineStrip as i32,
        pose: Some(yaw_pose(0.0, 0.0, 0.0, 0.0)),
        thickness: width,
        scale_invariant: false,
        points: points.map(|(x, y)| Point3 { x, y, z }).collect(),
        color: Some(color),
        ..Default::default()
    }
}

/// map → base_link from the record's ego pose (None: no pose published).
pub fn transform(r: &OutputRecord, t: Timestamp) -> Option<FrameTransform> {
    let e = r.ego?;
    let p = yaw_pose(e.x, e.y, 0.0, e.yaw);
    Some(FrameTransform {
        timestamp: Some(t),
        parent_frame_id: MAP_FRAME.to_string(),
        child_frame_id: EGO_FRAME.to_string(),
        translation: p.position,
        rotation: p.orientation,
    })
}

/// The valid detections as labelled boxes, ego frame.
pub fn detections(r: &OutputRecord, t: Timestamp) -> SceneUpdate {
    let entities = r
        .detections
        .iter()
        .enumerate()
        .filter(|(_, d)| d.valid == 1)
        .map(|(i, d)| {
            boxed(
                EGO_FRAME,
                format!("det/{i}"),
                t,
                (f64::from(d.x), f64::from(d.y), f64::from(d.yaw)),
                (f64::from(d.length), f64::from(d.width)),
                d.class,
                format!("{} {:.2}", class_name(d.class), d.score),
                vec![
                    kv("class", class_name(d.class).to_string()),
                    kv("score", format!("{:.3}", d.score)),
                ],
            )
        })
        .collect();
    SceneUpdate {
        deletions: delete_all(t),
        entities,
    }
}

/// The valid tracks as boxes labelled `<class> #<id>`, world frame; entity id
/// `track/<id>`.
pub fn tracks(r: &OutputRecord, t: Timestamp) -> SceneUpdate {
    let entities = r
        .tracks
        .iter()
        .filter(|k| k.valid == 1)
        .map(|k| {
            boxed(
                MAP_FRAME,
                format!("track/{}", k.id),
                t,
                (f64::from(k.x), f64::from(k.y), f64::from(k.yaw)),
                (f64::from(k.length), f64::from(k.width)),
                k.class,
                format!("{} #{}", class_name(k.class), k.id),
                vec![
                    kv("track_id", k.id.to_string()),
                    kv("class", class_name(k.class).to_string()),
                    kv("age", k.age.to_string()),
                    kv("speed", format!("{:.2}", f64::from(dm::hypot(k.vx, k.vy)))),
                ],
            )
        })
        .collect();
    SceneUpdate {
        deletions: delete_all(t),
        entities,
    }
}

/// Each valid predicted path as a line strip, world frame; entity id `prediction/<id>`.
pub fn predictions(r: &OutputRecord, t: Timestamp) -> SceneUpdate {
    let entities = r
        .predictions
        .iter()
        .filter(|p| p.valid == 1)
        .map(|p| {
            let (mut color, _) = class_style(p.class);
            color.a = 1.0;
            SceneEntity {
                timestamp: Some(t),
                frame_id: MAP_FRAME.to_string(),
                id: format!("prediction/{}", p.track_id),
                lines: vec![strip(
                    p.xy.iter().map(|&[x, y]| (f64::from(x), f64::from(y))),
                    0.1,
                    color,
                    0.15,
                )],
                metadata: vec![
                    kv("track_id", p.track_id.to_string()),
                    kv("horizon_s", format!("{:.1}", p.xy.len() as f32 * PRED_DT)),
                ],
                ..Default::default()
            }
        })
        .collect();
    SceneUpdate {
        deletions: delete_all(t),
        entities,
    }
}

/// The planned trajectory (green: a sampled candidate; red: the minimum-risk one), world
/// frame, and the ego box, ego frame.
pub fn plan(r: &OutputRecord, t: Timestamp) -> SceneUpdate {
    let mut entities = vec![SceneEntity {
        timestamp: Some(t),
        frame_id: EGO_FRAME.to_string(),
        id: "ego".to_string(),
        cubes: vec![CubePrimitive {
            pose: Some(yaw_pose(f64::from(EGO_REAR_TO_CENTRE), 0.0, 0.75, 0.0)),
            size: Some(Vector3 {
                x: f64::from(EGO_LENGTH),
                y: f64::from(EGO_WIDTH),
                z: 1.5,
            }),
            color: Some(rgba(0.9, 0.9, 0.9, 0.5)),
        }],
        ..Default::default()
    }];
    if r.has_trajectory && r.ego.is_some() {
        let color = if r.plan.kind == 1 {
            rgba(1.0, 0.2, 0.2, 1.0)
        } else {
            rgba(0.1, 1.0, 0.4, 1.0)
        };
        let start = r.ego.map(|e| (e.x, e.y));
        let path = start.into_iter().chain(
            r.trajectory
                .iter()
                .map(|p| (f64::from(p.x), f64::from(p.y))),
        );
        entities.push(SceneEntity {
            timestamp: Some(t),
            frame_id: MAP_FRAME.to_string(),
            id: "plan".to_string(),
            lines: vec![strip(path, 0.05, color, 0.4)],
            metadata: vec![
                kv(
                    "kind",
                    if r.plan.kind == 1 {
                        "minimum_risk"
                    } else {
                        "sampled"
                    }
                    .into(),
                ),
                kv("cost", format!("{:.3}", r.plan.cost)),
                kv("target_speed", format!("{:.2}", r.plan.target_speed)),
                kv("candidates", r.plan.candidates.to_string()),
                kv("collision_free", r.plan.collision_free.to_string()),
            ],
            ..Default::default()
        });
    }
    SceneUpdate {
        deletions: delete_all(t),
        entities,
    }
}

/// The BEV segmentation as a `Grid` in the ego frame: columns along x (forward), rows
/// along y (left), one `class` byte per cell (`seg_class`: 0 other, 1 drivable,
/// 2 lane marking). None when the frame published no grid.
pub fn segmentation(r: &OutputRecord, t: Timestamp, bev: &BevSpec) -> Option<Grid> {
    if !r.has_segmentation {
        return None;
    }
    Some(Grid {
        timestamp: Some(t),
        frame_id: EGO_FRAME.to_string(),
        pose: Some(yaw_pose(f64::from(bev.x0), f64::from(bev.y0), 0.0, 0.0)),
        column_count: bev.nx as u32,
        cell_size: Some(Vector2 {
            x: f64::from(bev.res),
            y: f64::from(bev.res),
        }),
        row_stride: bev.nx as u32,
        cell_stride: 1,
        fields: vec![PackedElementField {
            name: "class".to_string(),
            offset: 0,
            r#type: packed_element_field::NumericType::Uint8 as i32,
        }],
        data: r.segmentation.to_vec().into(),
    })
}

/// The per-frame facts of `r`.
pub fn frame_stats(r: &OutputRecord, mode_names: &[String]) -> FrameStats {
    FrameStats {
        frame: r.frame,
        latency_ms: r.latency_ns as f64 / 1e6,
        mode: u32::from(r.mode),
        mode_name: mode_names
            .get(usize::from(r.mode))
            .cloned()
            .unwrap_or_else(|| format!("mode {}", r.mode)),
        deadline_miss: u32::from(r.deadline_miss()),
        status: r.status.label(),
        held_from: r.held_from.map_or(-1, |f| f as i64),
        detections: r.detections.iter().filter(|d| d.valid == 1).count() as u32,
        tracks: r.tracks.iter().filter(|k| k.valid == 1).count() as u32,
        plan_kind: r.plan.kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_pipeline::types::{Detection, EgoPose, TrackState};

    fn record() -> OutputRecord {
        let mut r = OutputRecord::empty();
        r.ego = Some(EgoPose {
            stamp_ns: 5_000_000_000,
            x: 10.0,
            y: -2.0,
            yaw: std::f64::consts::FRAC_PI_2,
            ..EgoPose::default()
        });
        r.detections[3] = Detection {
            x: 8.0,
            y: 1.0,
            length: 4.0,
            width: 2.0,
            score: 0.75,
            class: class::CAR,
            valid: 1,
            ..Detection::default()
        };
        r.tracks[7] = TrackState {
            id: 42,
            class: class::PEDESTRIAN,
            x: 3.0,
            y: 4.0,
            yaw: std::f32::consts::PI,
            length: 0.6,
            width: 0.6,
            valid: 1,
            ..TrackState::default()
        };
        r
    }

    #[test]
    fn boxes_carry_frame_pose_and_labels() {
        let r = record();
        let t = timestamp(5_000_000_001);
        assert_eq!((t.sec(), t.nsec()), (5, 1));
        let d = detections(&r, t);
        assert_eq!(d.entities.len(), 1, "only valid entries");
        let e = &d.entities[0];
        assert_eq!((e.frame_id.as_str(), e.id.as_str()), (EGO_FRAME, "det/3"));
        assert_eq!(e.texts[0].text, "car 0.75");
        let k = tracks(&r, t);
        let e = &k.entities[0];
        assert_eq!(
            (e.frame_id.as_str(), e.id.as_str()),
            (MAP_FRAME, "track/42")
        );
        assert_eq!(e.texts[0].text, "pedestrian #42");
        let q = e.cubes[0]
            .pose
            .as_ref()
            .unwrap()
            .orientation
            .as_ref()
            .unwrap();
        assert!(
            (q.z - 1.0).abs() < 1e-6 && q.w.abs() < 1e-6,
            "yaw pi about z: {q:?}"
        );
        assert_eq!(
            k.deletions[0].r#type,
            scene_entity_deletion::Type::All as i32,
            "vanished tracks are cleared"
        );
    }

    #[test]
    fn the_transform_places_base_link_at_the_ego_pose() {
        let tf = transform(&record(), timestamp(0)).unwrap();
        assert_eq!(
            (tf.parent_frame_id.as_str(), tf.child_frame_id.as_str()),
            ("map", "base_link")
        );
        let p = tf.translation.unwrap();
        assert_eq!((p.x, p.y), (10.0, -2.0));
        assert!(transform(&OutputRecord::empty(), timestamp(0)).is_none());
    }

    #[test]
    fn grid_cells_are_where_the_bev_spec_puts_them() {
        let bev = BevSpec::DEFAULT;
        let mut r = record();
        r.has_segmentation = true;
        let (ix, iy) = bev.cell(20.3, -5.2).unwrap();
        r.segmentation[iy * bev.nx + ix] = 2;
        let g = segmentation(&r, timestamp(0), &bev).unwrap();
        let o = g.pose.as_ref().unwrap().position.as_ref().unwrap();
        let cell = g.cell_size.as_ref().unwrap();
        // Foxglove: cell (column c, row r) covers origin + (c, r) × cell size.
        let (c, row) = (
            ((20.3 - o.x) / cell.x).floor() as usize,
            ((-5.2 - o.y) / cell.y).floor() as usize,
        );
        assert_eq!(
            g.data[row * g.row_stride as usize + c * g.cell_stride as usize],
            2
        );
        assert_eq!(
            g.column_count as usize * (g.data.len() / g.row_stride as usize),
            bev.nx * bev.ny
        );
        r.has_segmentation = false;
        assert!(segmentation(&r, timestamp(0), &bev).is_none());
    }

    #[test]
    fn frame_stats_name_the_mode_and_count_outputs() {
        let mut r = record();
        r.mode = 1;
        r.latency_ns = 12_500_000;
        let s = frame_stats(&r, &["nominal".into(), "reduced".into()]);
        assert_eq!((s.mode, s.mode_name.as_str()), (1, "reduced"));
        assert_eq!((s.latency_ms, s.detections, s.tracks), (12.5, 1, 1));
        r.mode = 9;
        assert_eq!(frame_stats(&r, &[]).mode_name, "mode 9");
    }
}
