//! `redline log info LOG`: what a recorded log holds (topics, types, counts, rates, time
//! range, damage), as `ros2 bag info` prints it, and a `[sensors]` table to start from.
//!
//! The suggestion is a guess from topic names and types: every image topic
//! (`sensor_msgs/msg/Image`, `CompressedImage`, `foxglove_msgs/msg/CompressedVideo`,
//! `ffmpeg_image_transport_msgs/msg/FFMPEGPacket` or `h264_msgs/msg/Packet`) becomes a camera
//! named after its topic
//! (`/sensing/camera/front/image_raw/compressed` → `front`; a camera with both a raw and a
//! compressed or video topic gets the latter), paired with the `camera_info` topic beside it;
//! the odometry topic is the first `nav_msgs/msg/Odometry` one (a name with
//! `kinematic_state` or `odom` first), else the first `geometry_msgs` pose topic
//! (`PoseWithCovarianceStamped`, then `PoseStamped`; a name with `localization` or `pose`
//! first), else the first dynamic transform topic (`/tf`). Cameras without `camera_info` get a comment asking
//! for a calibration file. Reads the whole log once (counts come from the messages).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, Result};
use redline_sim::log::{ChannelStats, LogReader, ReadLimits};
use serde_json::json;

#[derive(clap::Subcommand, Debug)]
pub enum LogCommand {
    /// Topics, types, message counts, rates and time range of a log, and a suggested
    /// `[sensors]` table for replaying it.
    Info(LogInfoArgs),
}

#[derive(clap::Args, Debug)]
pub struct LogInfoArgs {
    /// The log: an MCAP file (from ros2 bag or redline), a ROS 2 SQLite bag file (.db3) or a ROS 2 bag directory.
    pub log: PathBuf,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
}

const IMAGE: &str = "sensor_msgs/msg/Image";
const COMPRESSED: &str = "sensor_msgs/msg/CompressedImage";
const VIDEO: &str = "foxglove_msgs/msg/CompressedVideo";
const FFMPEG: &str = "ffmpeg_image_transport_msgs/msg/FFMPEGPacket";
const H264_PACKET: &str = "h264_msgs/msg/Packet";
const CAMERA_INFO: &str = "sensor_msgs/msg/CameraInfo";
const ODOMETRY: &str = "nav_msgs/msg/Odometry";
const POSE_COV: &str = "geometry_msgs/msg/PoseWithCovarianceStamped";
const POSE: &str = "geometry_msgs/msg/PoseStamped";
const TF: &str = "tf2_msgs/msg/TFMessage";

pub fn run(cmd: LogCommand) -> Result<()> {
    match cmd {
        LogCommand::Info(a) => info(a),
    }
}

fn info(a: LogInfoArgs) -> Result<()> {
    let compressed = crate::common::announce_unpacking(&a.log);
    let compressed_bytes: u64 = compressed.iter().map(|(_, len)| len).sum();
    let mut reader = LogReader::open_any(&a.log, ReadLimits::default())
        .with_context(|| format!("reading {}", a.log.display()))?;
    let stats = reader.channel_stats();
    let samples = reader.camera_samples();
    let bytes = reader.total_bytes();
    let files: Vec<String> = reader
        .files()
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    let messages: u64 = stats.iter().map(|c| c.count).sum();
    let first = stats
        .iter()
        .filter(|c| c.count > 0)
        .map(|c| c.first_ns)
        .min()
        .unwrap_or(0);
    let last = stats.iter().map(|c| c.last_ns).max().unwrap_or(0);
    let issues: Vec<String> = reader
        .issues()
        .iter()
        .map(|i| format!("{:?}: {}", i.kind, i.detail))
        .collect();
    let unstamped = samples.iter().any(|c| c.unstamped);
    let mut suggestion = suggest_sensors(&stats);
    if unstamped {
        // After `[sensors]`'s first line: a key of that table.
        suggestion = suggestion.replacen(
            "[sensors]\n",
            "[sensors]\nstamps = \"log_time\"   # the camera images' header stamps are zero: place messages by log time\n",
            1,
        );
    }
    if a.json {
        let topics: Vec<_> = stats
            .iter()
            .map(|c| {
                json!({"topic": c.topic, "type": c.schema, "encoding": c.encoding,
                       "count": c.count, "hz": rate(c)})
            })
            .collect();
        let v = json!({
            "log": a.log.display().to_string(), "files": files, "bytes": bytes, "indexed": reader.is_indexed(),
            "zstd_files": compressed.len(), "zstd_bytes": compressed_bytes,
            "messages": messages, "start_ns": first, "end_ns": last,
            "duration_s": last.saturating_sub(first) as f64 / 1e9,
            "topics": topics, "issues": issues, "suggested_sensors": suggestion,
            "camera_topics": samples.iter().map(|c| json!({
                "topic": c.topic, "type": c.schema, "format": c.format,
                "width": c.width, "height": c.height, "problem": c.problem,
                "unstamped": c.unstamped,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("log:       {}", a.log.display());
    if files.len() > 1 || files.first().map(String::as_str) != a.log.to_str() {
        // A ROS 2 bag directory: the files read, in recording order.
        println!("files:     {}", files.join(", "));
    }
    println!(
        "size:      {:.1} MiB ({}){}",
        bytes as f64 / (1 << 20) as f64,
        if reader.is_indexed() {
            "indexed"
        } else {
            "no usable index: read by a linear scan"
        },
        match compressed.len() {
            0 => String::new(),
            n => format!(
                "; decompressed from {n} zstd-compressed file{} of {:.1} MiB",
                if n == 1 { "" } else { "s" },
                compressed_bytes as f64 / (1 << 20) as f64
            ),
        }
    );
    println!(
        "duration:  {:.3} s (log time {first} .. {last} ns)",
        last.saturating_sub(first) as f64 / 1e9
    );
    println!("messages:  {messages}");
    let w = stats
        .iter()
        .map(|c| c.topic.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let tw = stats
        .iter()
        .map(|c| c.schema.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<w$}  {:<tw$}  {:>8}  {:>7}",
        "topic", "type", "count", "Hz"
    );
    for c in &stats {
        println!(
            "{:<w$}  {:<tw$}  {:>8}  {:>7.2}",
            c.topic,
            c.schema,
            c.count,
            rate(c)
        );
    }
    if !samples.is_empty() {
        // What each camera topic's first message holds, and whether redline can use it.
        println!("\ncamera topics (first message):");
        let tw = samples.iter().map(|c| c.topic.len()).max().unwrap_or(5);
        for c in &samples {
            let kind = c.schema.rsplit('/').next().unwrap_or(&c.schema);
            let size = format!("{}x{}", c.width, c.height);
            let mut verdict = c.problem.clone().unwrap_or_else(|| "ok".to_string());
            if c.unstamped {
                verdict.push_str("; header stamp 0 (see stamps below)");
            }
            println!(
                "{:<tw$}  {kind:<15}  {:<12}  {size:>9}  {verdict}",
                c.topic, c.format
            );
        }
        let sizes: BTreeSet<(u32, u32)> = samples
            .iter()
            .filter(|c| c.schema != CAMERA_INFO && c.width > 0)
            .map(|c| (c.width, c.height))
            .collect();
        let smallest = sizes
            .iter()
            .min_by_key(|&&(w, h)| u64::from(w) * u64::from(h));
        if let (true, Some((w, h))) = (sizes.len() > 1, smallest) {
            println!(
                "note: the cameras have {} image sizes; a replay resizes the larger ones to the smallest camera's ({w}x{h}, as listed in [sensors]) when reading",
                sizes.len()
            );
        }
    }
    for i in &issues {
        println!("issue: {i}");
    }
    println!(
        "\nsuggested config table (check it, then put it in the file you pass with --config):\n"
    );
    print!("{suggestion}");
    Ok(())
}

/// Messages per second over the channel's own time range.
fn rate(c: &ChannelStats) -> f64 {
    let span = c.last_ns.saturating_sub(c.first_ns);
    if c.count < 2 || span == 0 {
        0.0
    } else {
        (c.count - 1) as f64 / (span as f64 / 1e9)
    }
}

/// A camera's name from its image topic.
fn camera_name(topic: &str) -> String {
    let mut t = topic.trim_end_matches('/');
    for suffix in [
        "/h264",
        "/hevc",
        "/h265",
        "/video",
        "/compressed_video",
        "/ffmpeg",
        "/compressed",
        "/image_raw",
        "/image_rect_color",
        "/image_rect",
        "/image_color",
        "/image",
    ] {
        t = t.strip_suffix(suffix).unwrap_or(t);
    }
    let last = t.rsplit('/').find(|s| !s.is_empty()).unwrap_or("camera");
    last.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The folder of a topic (`/a/b/c` → `/a/b`).
fn parent(topic: &str) -> &str {
    topic.rsplit_once('/').map_or("", |(p, _)| p)
}

/// A `[sensors]` table for these channels (TOML text; see the module docs).
fn suggest_sensors(stats: &[ChannelStats]) -> String {
    let of = |schema: &str| -> Vec<&ChannelStats> {
        stats
            .iter()
            .filter(|c| c.schema == schema && c.count > 0)
            .collect()
    };
    let infos = of(CAMERA_INFO);
    // name -> (image topic, compressed?)
    let mut cams: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for c in stats.iter().filter(|c| {
        [IMAGE, COMPRESSED, VIDEO, FFMPEG, H264_PACKET].contains(&c.schema.as_str()) && c.count > 0
    }) {
        let compressed = c.schema != IMAGE;
        let name = camera_name(&c.topic);
        match cams.get(&name) {
            Some((_, true)) => continue,
            Some((_, false)) if !compressed => continue,
            Some(_) => {}
            None => order.push(name.clone()),
        }
        cams.insert(name, (c.topic.clone(), compressed));
    }
    let mut odoms = of(ODOMETRY);
    odoms.sort_by_key(|c| {
        (
            !(c.topic.contains("kinematic_state") || c.topic.contains("odom")),
            c.topic.clone(),
        )
    });
    // Without odometry, a localiser's pose (speed and yaw rate are then differenced).
    let mut poses = of(POSE_COV);
    poses.extend(of(POSE));
    poses.sort_by_key(|c| {
        (
            !(c.topic.contains("localization") || c.topic.contains("pose")),
            c.topic.clone(),
        )
    });
    let mut s = String::from("[sensors]\n");
    match (odoms.first(), poses.first()) {
        (Some(o), _) => s.push_str(&format!("odometry = {:?}\n", o.topic)),
        (None, Some(p)) => s.push_str(&format!(
            "odometry = {:?}   # a pose without velocity: speed and yaw rate from consecutive poses\n",
            p.topic
        )),
        (None, None) => match of(TF).iter().find(|c| !c.topic.ends_with("tf_static")) {
            Some(t) => s.push_str(&format!(
                "odometry = {:?}   # no odometry or pose topic: base_link's pose from the transform tree, if it carries one\n",
                t.topic
            )),
            None => s.push_str(
                "# no nav_msgs/msg/Odometry, geometry_msgs pose or /tf topic in this log: the ego pose will be missing\n",
            ),
        },
    }
    match of(TF).iter().find(|c| c.topic.ends_with("tf_static")) {
        Some(t) => s.push_str(&format!("tf_static = {:?}\n", t.topic)),
        None => s.push_str(
            "# no /tf_static in this log: camera mounts come from the calibration file\n",
        ),
    }
    let mut needs_file = false;
    let mut body = String::new();
    for name in &order {
        let (image, _) = &cams[name];
        body.push_str(&format!(
            "[[sensors.cameras]]\nname = {name:?}\nimage = {image:?}\n"
        ));
        // The camera_info beside the image topic (same folder, or one level up).
        let dir = parent(image);
        let info = infos.iter().find(|i| {
            let p = parent(&i.topic);
            !p.is_empty() && (p == dir || p == parent(dir))
        });
        match info {
            Some(i) => body.push_str(&format!("camera_info = {:?}\n", i.topic)),
            None => {
                needs_file = true;
                body.push_str(
                    "# no camera_info found for it: give its intrinsics in the calibration file\n",
                );
            }
        }
    }
    if order.is_empty() {
        body.push_str(
            "# no sensor_msgs/msg/Image or CompressedImage topic in this log: nothing to replay\n",
        );
    }
    if needs_file {
        s.push_str("calibration = \"rig.toml\"   # [[camera]] name, width, height, fx, fy, cx, cy, x, y, z, yaw_deg, pitch_deg\n");
    }
    s.push_str(&body);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(topic: &str, schema: &str) -> ChannelStats {
        ChannelStats {
            topic: topic.into(),
            schema: schema.into(),
            encoding: "cdr".into(),
            count: 10,
            first_ns: 0,
            last_ns: 9_000_000_000,
        }
    }

    #[test]
    fn names_come_from_topics() {
        assert_eq!(
            camera_name("/sensing/camera/front/image_raw/compressed"),
            "front"
        );
        assert_eq!(camera_name("/cam/rear_left/image_raw"), "rear_left");
        assert_eq!(camera_name("/camera0/image"), "camera0");
        assert_eq!(camera_name("/sensing/camera/front/video"), "front");
        assert_eq!(camera_name("/cam/left/image_raw/h264"), "left");
        assert_eq!(camera_name("/"), "camera");
    }

    #[test]
    fn an_autoware_style_log_gets_a_sensors_table_that_parses() {
        let stats = vec![
            ch("/sensing/camera/front/image_raw", IMAGE),
            ch("/sensing/camera/front/image_raw/compressed", COMPRESSED),
            ch("/sensing/camera/front/camera_info", CAMERA_INFO),
            ch("/sensing/camera/rear/image_raw/compressed", COMPRESSED),
            ch("/localization/twist", ODOMETRY),
            ch("/localization/kinematic_state", ODOMETRY),
            ch("/tf_static", TF),
        ];
        let s = suggest_sensors(&stats);
        let c = crate::config::RedlineConfig::parse(&s, "suggestion").unwrap();
        let m = c.sensors;
        assert_eq!(m.odometry_topic(), "/localization/kinematic_state");
        assert_eq!(m.tf_static_topic(), "/tf_static");
        assert_eq!(m.cameras.len(), 2);
        assert_eq!(m.cameras[0].name, "front");
        assert_eq!(
            m.cameras[0].image,
            "/sensing/camera/front/image_raw/compressed"
        );
        assert_eq!(
            m.cameras[0].camera_info.as_deref(),
            Some("/sensing/camera/front/camera_info")
        );
        assert_eq!(m.cameras[1].camera_info, None);
        assert!(m.calibration.is_some(), "{s}");
        assert!((rate(&stats[0]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn video_topics_of_each_type_become_cameras_over_raw_ones() {
        let stats = vec![
            ch("/cam/left/image_raw", IMAGE),
            ch("/cam/left/image_raw/h264", H264_PACKET),
            ch("/cam/right/ffmpeg", FFMPEG),
            ch("/cam/rear/video", VIDEO),
        ];
        let s = suggest_sensors(&stats);
        let m = crate::config::RedlineConfig::parse(&s, "suggestion")
            .unwrap()
            .sensors;
        let cams: Vec<_> = m
            .cameras
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_str()))
            .collect();
        assert_eq!(
            cams,
            [
                ("left", "/cam/left/image_raw/h264"),
                ("right", "/cam/right/ffmpeg"),
                ("rear", "/cam/rear/video")
            ],
            "{s}"
        );
    }
}
