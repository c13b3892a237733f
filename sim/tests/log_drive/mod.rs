//! The test drive shared by the sensor-log tests (`log_roundtrip`, `log_damaged`): a synthetic
//! 2-camera rig, a known image pattern per camera and frame, ego and ground-truth sequences,
//! the writer of the 10-frame log, and checks that a message read back is the one written.

use redline_runtime::det_math as dm;
use std::path::Path;

use redline_pipeline::camera::CameraSpec;
use redline_sim::log::{
    LogMessage, LogOptions, LogStats, LogWriter, Payload, TOPIC_GROUND_TRUTH, TOPIC_MAP, TOPIC_ODOM,
};
use redline_sim::types::{ActorClass, EgoState, GroundTruth, GtObject, RgbImage};

/// Frame period, ns.
pub const P: u64 = 33_333_333;
/// Frames in the test drive.
pub const FRAMES: u64 = 10;
/// Image width, px.
pub const W: u32 = 160;
/// Image height, px.
pub const H: u32 = 96;

/// A path `redline-sim-log-{pid}-{name}` in the temporary directory; the file written there
/// is removed when the returned path is dropped.
pub fn tmp(name: &str) -> tempfile::TempPath {
    tempfile::TempPath::try_from_path(
        std::env::temp_dir().join(format!("redline-sim-log-{}-{name}", std::process::id())),
    )
    .expect("an absolute temporary path")
}

pub fn rig() -> Vec<CameraSpec> {
    let cam = |name: &str, yaw: f64, pitch: f64, y: f64| CameraSpec {
        name: name.into(),
        width: W,
        height: H,
        fx: 120.0,
        fy: 121.5,
        cx: 80.0,
        cy: 47.5,
        x: 1.5,
        y,
        z: 1.6,
        yaw,
        pitch,
        distortion: Default::default(),
    };
    vec![cam("front", 0.0, 0.05, 0.0), cam("left", 1.2, 0.1, 0.4)]
}

/// A known pattern per camera and frame, with some pseudo-random texture.
pub fn pattern(cam: usize, frame: u64, w: u32, h: u32) -> RgbImage {
    let mut data = Vec::with_capacity((w * h * 3) as usize);
    let mut s = 0x9e37_79b9u32 ^ (cam as u32 * 7919 + frame as u32 * 104_729);
    for y in 0..h {
        for x in 0..w {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            for c in 0..3u32 {
                let v = x * 7 + y * 13 + cam as u32 * 50 + frame as u32 * 3 + c * 85 + (s & 7);
                data.push(v as u8);
            }
        }
    }
    RgbImage {
        width: w,
        height: h,
        data,
    }
}

pub fn ego(k: u64) -> EgoState {
    EgoState {
        stamp_ns: k * P,
        x: k as f64 * 0.5,
        y: 0.01 * k as f64,
        yaw: 0.02 * k as f64 - 0.05,
        v: 15.0,
        yaw_rate: 0.02,
    }
}

pub fn gt(k: u64) -> GroundTruth {
    GroundTruth {
        stamp_ns: k * P,
        objects: (0..(k % 3 + 1) as u32)
            .map(|i| GtObject {
                id: 10 + i,
                class: [ActorClass::Car, ActorClass::Pedestrian, ActorClass::Cyclist][i as usize],
                x: 20.0 + k as f64 + i as f64,
                y: -3.5 * i as f64,
                z: 0.8,
                length: 4.5,
                width: 1.9,
                height: 1.6,
                yaw: 0.1 * i as f64,
                vx: 10.0,
                vy: -0.5,
            })
            .collect(),
    }
}

pub fn centre() -> Vec<(f64, f64)> {
    (0..50)
        .map(|i| (i as f64 * 2.0, dm::sin(i as f64 * 0.1)))
        .collect()
}

/// Small chunks so that a 10-frame log spans many of them.
pub fn small_chunks() -> LogOptions {
    LogOptions {
        chunk_size: 64 * 1024,
        ..LogOptions::default()
    }
}

pub fn write_log(path: &Path) -> LogStats {
    write_log_with(path, small_chunks())
}

/// The test drive (map, then per frame every camera, odometry and ground truth).
pub fn write_log_with(path: &Path, options: LogOptions) -> LogStats {
    let cams = rig();
    let mut w = LogWriter::create_with(path, &cams, options).unwrap();
    w.write_map(3, 3.5, &centre()).unwrap();
    for k in 0..FRAMES {
        for c in 0..cams.len() {
            w.write_image(c, k * P, &pattern(c, k, W, H)).unwrap();
        }
        w.write_odometry(&ego(k)).unwrap();
        w.write_ground_truth(&gt(k)).unwrap();
    }
    w.finish().unwrap()
}

pub fn assert_ego_eq(a: &EgoState, b: &EgoState) {
    assert_eq!(
        (a.stamp_ns, a.x, a.y, a.v, a.yaw_rate),
        (b.stamp_ns, b.x, b.y, b.v, b.yaw_rate)
    );
    assert!((a.yaw - b.yaw).abs() < 1e-12, "yaw {} vs {}", a.yaw, b.yaw);
}

/// The messages the writer wrote, in log-time order.
pub fn expected_messages() -> Vec<(String, u64)> {
    let mut v = vec![
        ("/cam/front/camera_info".to_string(), 0),
        ("/cam/left/camera_info".to_string(), 0),
        ("/tf_static".to_string(), 0),
        (TOPIC_MAP.to_string(), 0),
    ];
    for k in 0..FRAMES {
        v.push(("/cam/front/image_raw".into(), k * P));
        v.push(("/cam/left/image_raw".into(), k * P));
        v.push((TOPIC_ODOM.into(), k * P));
        v.push((TOPIC_GROUND_TRUTH.into(), k * P));
    }
    v
}

pub fn check_payload(m: &LogMessage) {
    let k = m.stamp_ns / P;
    match &m.payload {
        Payload::Image { cam, image } => {
            assert_eq!(
                image.as_ref().unwrap(),
                &pattern(*cam, k, W, H),
                "{} {}",
                m.topic,
                k
            )
        }
        Payload::Odometry(e) => assert_ego_eq(e, &ego(k)),
        Payload::GroundTruth(g) => assert_eq!(g, &gt(k)),
        Payload::Map(map) => assert_eq!(map.centre, centre()),
        Payload::CameraInfo | Payload::Tf | Payload::Unused | Payload::Jpeg { .. } => {}
    }
}
