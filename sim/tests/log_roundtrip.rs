//! Sensor-log round trips: write a synthetic 2-camera log, read it back through the summary,
//! by time range and topic, with the reference Python MCAP stack, and from damaged copies.

use std::path::{Path, PathBuf};

use redline_sim::log::{
    LogError, LogIssueKind, LogMessage, LogOptions, LogReader, LogStats, LogWriter, Payload,
    RoadMapData, TOPIC_GROUND_TRUTH, TOPIC_MAP, TOPIC_ODOM,
};
use redline_sim::msgs::{CameraInfo, Image, ImageIssue, Odometry, Quaternion};
use redline_sim::replay::{read_frames, FrameIssue};
use redline_sim::types::{ActorClass, CameraSpec, EgoState, GroundTruth, GtObject, RgbImage};

const P: u64 = 33_333_333;
const FRAMES: u64 = 10;
const W: u32 = 160;
const H: u32 = 96;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redline-sim-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn rig() -> Vec<CameraSpec> {
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
    };
    vec![cam("front", 0.0, 0.05, 0.0), cam("left", 1.2, 0.1, 0.4)]
}

/// A known pattern per camera and frame, with some pseudo-random texture.
fn pattern(cam: usize, frame: u64, w: u32, h: u32) -> RgbImage {
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

fn ego(k: u64) -> EgoState {
    EgoState {
        stamp_ns: k * P,
        x: k as f64 * 0.5,
        y: 0.01 * k as f64,
        yaw: 0.02 * k as f64 - 0.05,
        v: 15.0,
        yaw_rate: 0.02,
    }
}

fn gt(k: u64) -> GroundTruth {
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

fn centre() -> Vec<(f64, f64)> {
    (0..50)
        .map(|i| (i as f64 * 2.0, (i as f64 * 0.1).sin()))
        .collect()
}

/// Small chunks so that a 10-frame log spans many of them.
fn small_chunks() -> LogOptions {
    LogOptions {
        chunk_size: 64 * 1024,
        ..LogOptions::default()
    }
}

fn write_log(path: &Path) -> LogStats {
    write_log_with(path, small_chunks())
}

/// The test drive (map, then per frame every camera, odometry and ground truth).
fn write_log_with(path: &Path, options: LogOptions) -> LogStats {
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

fn assert_ego_eq(a: &EgoState, b: &EgoState) {
    assert_eq!(
        (a.stamp_ns, a.x, a.y, a.v, a.yaw_rate),
        (b.stamp_ns, b.x, b.y, b.v, b.yaw_rate)
    );
    assert!((a.yaw - b.yaw).abs() < 1e-12, "yaw {} vs {}", a.yaw, b.yaw);
}

/// The messages the writer wrote, in log-time order.
fn expected_messages() -> Vec<(String, u64)> {
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

fn check_payload(m: &LogMessage) {
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
        Payload::CameraInfo | Payload::Tf => {}
    }
}

#[test]
fn log_reads_back_identical_through_the_summary() {
    let path = tmp("roundtrip.mcap");
    let stats = write_log(&path);
    assert_eq!(stats.messages, 4 + 4 * FRAMES);
    assert_eq!(stats.bytes, std::fs::metadata(&path).unwrap().len());
    assert!(stats.per_topic.contains(&("/ego/odom".to_string(), FRAMES)));

    let mut r = LogReader::open(&path).unwrap();
    assert!(r.is_indexed());
    assert!(r.issues().is_empty(), "{:?}", r.issues());
    assert!(
        r.chunk_count() > 4,
        "expected several chunks, got {}",
        r.chunk_count()
    );
    assert_eq!(r.time_range(), (0, (FRAMES - 1) * P));
    assert_eq!(
        r.map(),
        Some(&RoadMapData {
            lanes: 3,
            lane_width: 3.5,
            centre: centre()
        })
    );
    let want = rig();
    assert_eq!(r.cameras().len(), 2);
    for (got, want) in r.cameras().iter().zip(&want) {
        assert_eq!(
            (&got.name, got.width, got.height, got.fx, got.fy, got.cx, got.cy),
            (
                &want.name,
                want.width,
                want.height,
                want.fx,
                want.fy,
                want.cx,
                want.cy
            )
        );
        assert_eq!((got.x, got.y, got.z), (want.x, want.y, want.z));
        assert!((got.yaw - want.yaw).abs() < 1e-12 && (got.pitch - want.pitch).abs() < 1e-12);
    }

    let msgs: Vec<LogMessage> = r.messages(&[], 0, u64::MAX).collect();
    let got: Vec<(String, u64)> = msgs
        .iter()
        .map(|m| (m.topic.clone(), m.log_time_ns))
        .collect();
    assert_eq!(got, expected_messages());
    for m in &msgs {
        check_payload(m);
    }
    assert!(r.issues().is_empty(), "{:?}", r.issues());

    // Frames
    let frames = read_frames(&mut r, None).unwrap();
    assert_eq!(frames.len(), FRAMES as usize);
    for (k, f) in frames.iter().enumerate() {
        let k = k as u64;
        assert_eq!((f.index, f.stamp_ns), (k, k * P));
        assert!(f.issues.is_empty(), "frame {k}: {:?}", f.issues);
        for (c, img) in f.images.iter().enumerate() {
            assert_eq!(img.as_ref().unwrap(), &pattern(c, k, W, H));
        }
        assert_ego_eq(f.ego.as_ref().unwrap(), &ego(k));
        assert_eq!(f.gt.as_ref().unwrap(), &gt(k));
    }
}

#[test]
fn writing_is_deterministic() {
    let (a, b) = (tmp("det_a.mcap"), tmp("det_b.mcap"));
    write_log(&a);
    write_log(&b);
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
}

#[test]
fn time_range_and_topic_filter() {
    let path = tmp("range.mcap");
    write_log(&path);
    let mut r = LogReader::open(&path).unwrap();
    let after_open = r.chunks_read();

    let msgs: Vec<LogMessage> = r.messages(&[], 3 * P, 6 * P).collect();
    let got: Vec<(String, u64)> = msgs
        .iter()
        .map(|m| (m.topic.clone(), m.log_time_ns))
        .collect();
    let want: Vec<(String, u64)> = expected_messages()
        .into_iter()
        .filter(|(_, t)| (3 * P..6 * P).contains(t))
        .collect();
    assert_eq!(got, want);
    assert_eq!(msgs.len(), 12);
    msgs.iter().for_each(check_payload);
    let range_chunks = r.chunks_read() - after_open;
    assert!(
        (range_chunks as usize) < r.chunk_count(),
        "a time range read {range_chunks} of {} chunks: no seeking",
        r.chunk_count()
    );

    // End is exclusive, start inclusive.
    assert_eq!(r.messages(&[TOPIC_ODOM], 2 * P, 2 * P + 1).count(), 1);
    assert_eq!(r.messages(&[TOPIC_ODOM], 2 * P + 1, 3 * P).count(), 0);

    let odo: Vec<LogMessage> = r.messages(&[TOPIC_ODOM], 0, u64::MAX).collect();
    assert_eq!(odo.len(), FRAMES as usize);
    for (k, m) in odo.iter().enumerate() {
        assert_eq!(m.topic, TOPIC_ODOM);
        assert_eq!(m.log_time_ns, k as u64 * P);
    }
    let two: Vec<String> = r
        .messages(&["/cam/left/image_raw", TOPIC_MAP], 0, 2 * P)
        .map(|m| m.topic)
        .collect();
    assert_eq!(
        two,
        vec![TOPIC_MAP, "/cam/left/image_raw", "/cam/left/image_raw"]
    );
    assert_eq!(r.messages(&["/no/such/topic"], 0, u64::MAX).count(), 0);
    assert!(r.issues().is_empty());
}

#[test]
fn python_reference_reader_agrees() {
    let path = tmp("python.mcap");
    let stats = write_log(&path);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/check_mcap.py");
    let in_ci = std::env::var_os("CI").is_some();
    let skip = |why: String| {
        if in_ci {
            panic!("python checker unavailable in CI: {why}");
        }
        eprintln!("\n==== SKIPPED: python_reference_reader_agrees: {why} ====\n");
    };
    let out = match std::process::Command::new("python3")
        .arg(&script)
        .arg(&path)
        .output()
    {
        Ok(o) => o,
        Err(e) => return skip(format!("cannot run python3 ({e})")),
    };
    if out.status.code() == Some(3) {
        return skip(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    assert!(
        out.status.success(),
        "check_mcap.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["profile"], "ros2");
    assert_eq!(j["messages"], stats.messages);
    for (topic, n) in &stats.per_topic {
        assert_eq!(j["topics"][topic].as_u64().unwrap_or(0), *n, "{topic}");
    }
    let close = |v: &serde_json::Value, want: f64| {
        let got = v.as_f64().unwrap_or(f64::NAN);
        assert!(
            (got - want).abs() <= 1e-12 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    };
    let img = &j["first"]["/cam/front/image_raw"];
    let want = pattern(0, 0, W, H);
    assert_eq!(img["width"], W);
    assert_eq!(img["height"], H);
    assert_eq!(img["encoding"], "rgb8");
    assert_eq!(img["frame_id"], "cam_front");
    assert_eq!(img["data_len"], want.data.len());
    let head: Vec<u8> = img["data_head"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(head, want.data[..12]);

    let odo = &j["first"]["/ego/odom"];
    let m = Odometry::from_ego(&ego(0));
    assert_eq!(odo["frame_id"], "map");
    assert_eq!(odo["child_frame_id"], "base_link");
    close(&odo["x"], m.pose.pose.position.x);
    close(&odo["y"], m.pose.pose.position.y);
    close(&odo["qz"], m.pose.pose.orientation.z);
    close(&odo["qw"], m.pose.pose.orientation.w);

    let g = &j["first"][TOPIC_GROUND_TRUTH];
    let want = gt(0);
    assert_eq!(g["count"], want.objects.len());
    assert_eq!(g["id"], want.objects[0].id);
    assert_eq!(g["class"], want.objects[0].class as u8);
    close(&g["x"], want.objects[0].x);
    close(&g["y"], want.objects[0].y);

    let map = &j["first"][TOPIC_MAP];
    assert_eq!(map["lanes"], 3);
    close(&map["first_centre"][0], centre()[0].0);
    close(&map["first_centre"][1], centre()[0].1);

    let ci = &j["first"]["/cam/left/camera_info"];
    let k = CameraInfo::from_spec(&rig()[1]).k;
    for (i, want) in k.iter().enumerate() {
        close(&ci["k"][i], *want);
    }
    assert_eq!(
        j["first"]["/tf_static"]["children"],
        serde_json::json!(["cam_front", "cam_left"])
    );
}

/// Chunk layout of an intact log: (start offset, end offset, messages in it).
fn chunk_layout(bytes: &[u8]) -> Vec<(u64, u64, usize)> {
    let s = mcap::Summary::read(bytes).unwrap().unwrap();
    let mut v: Vec<(u64, u64, usize)> = s
        .chunk_indexes
        .iter()
        .map(|ci| {
            let n = s
                .read_message_indexes(bytes, ci)
                .unwrap()
                .values()
                .map(|e| e.len())
                .sum();
            (
                ci.chunk_start_offset,
                ci.chunk_start_offset + ci.chunk_length,
                n,
            )
        })
        .collect();
    v.sort();
    v
}

/// Opens `bytes[..cut]` and checks that it yields a prefix of the log's messages, at least all
/// those of chunks complete before the cut. Returns how many it recovered beyond those.
fn check_cut(bytes: &[u8], layout: &[(u64, u64, usize)], cut: usize) -> usize {
    let all = expected_messages();
    let p = tmp(&format!("cut_{}_{cut}.mcap", bytes.len()));
    std::fs::write(&p, &bytes[..cut]).unwrap();
    let mut r = LogReader::open(&p).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
    assert!(!r.is_indexed());
    assert!(
        r.issues().iter().any(|i| matches!(
            i.kind,
            LogIssueKind::Truncated | LogIssueKind::UnindexedFile
        )),
        "cut {cut}: {:?}",
        r.issues()
    );
    assert_eq!(r.cameras().len(), 2);
    let msgs: Vec<LogMessage> = r.messages(&[], 0, u64::MAX).collect();
    let got: Vec<(String, u64)> = msgs
        .iter()
        .map(|m| (m.topic.clone(), m.log_time_ns))
        .collect();
    assert_eq!(got[..], all[..got.len()], "cut {cut}: not a prefix");
    msgs.iter().for_each(check_payload);
    let whole: usize = layout
        .iter()
        .filter(|c| c.1 as usize <= cut)
        .map(|c| c.2)
        .sum();
    assert!(got.len() >= whole, "cut {cut}: {} < {whole}", got.len());
    // Frames from a damaged log: in order, nothing panics.
    let frames = read_frames(&mut r, Some(P)).unwrap();
    assert!(frames.windows(2).all(|w| w[1].index == w[0].index + 1));
    got.len() - whole
}

#[test]
fn truncated_copies_yield_every_message_before_the_cut() {
    // Many small chunks: cuts between and inside chunks.
    let path = tmp("full.mcap");
    write_log(&path);
    let bytes = std::fs::read(&path).unwrap();
    let layout = chunk_layout(&bytes);
    let first_chunk_end = layout[0].1 as usize;
    for cut in [
        first_chunk_end,
        first_chunk_end + 100,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() * 4 / 5,
        layout.last().unwrap().1 as usize + 10,
        bytes.len() - 1,
    ] {
        check_cut(&bytes, &layout, cut);
    }
    // Cut before any chunk is complete: nothing readable, a clear error.
    let p = tmp("cut_head.mcap");
    std::fs::write(&p, &bytes[..layout[0].0 as usize + 20]).unwrap();
    assert!(matches!(
        LogReader::open(&p),
        Err(LogError::NoCameras { .. })
    ));

    // One big (default 4 MiB) chunk: the messages at the start of a cut chunk are recovered.
    let path = tmp("one_chunk.mcap");
    write_log_with(&path, LogOptions::default());
    let bytes = std::fs::read(&path).unwrap();
    let layout = chunk_layout(&bytes);
    assert_eq!(layout.len(), 1);
    let (start, end, _) = layout[0];
    let mut recovered = Vec::new();
    for f in [0.3, 0.6, 0.9] {
        let cut = start as usize + ((end - start) as f64 * f) as usize;
        recovered.push(check_cut(&bytes, &layout, cut));
    }
    assert!(
        recovered.windows(2).all(|w| w[0] <= w[1]) && recovered[2] > 4,
        "{recovered:?}"
    );
}

#[test]
fn corrupt_chunk_is_skipped_and_reported() {
    let path = tmp("corrupt_src.mcap");
    write_log(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let layout = chunk_layout(&bytes);
    let victim = layout.len() / 2;
    let (start, end, lost) = layout[victim];
    let mid = ((start + end) / 2) as usize;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0x5a;
    }
    let p = tmp("corrupt.mcap");
    std::fs::write(&p, &bytes).unwrap();
    let mut r = LogReader::open(&p).unwrap();
    let msgs: Vec<LogMessage> = r.messages(&[], 0, u64::MAX).collect();
    assert_eq!(msgs.len(), expected_messages().len() - lost);
    msgs.iter().for_each(check_payload);
    let corrupt: Vec<_> = r
        .issues()
        .iter()
        .filter(|i| i.kind == LogIssueKind::CorruptChunk)
        .collect();
    assert_eq!(corrupt.len(), 1, "{:?}", r.issues());
    assert!(corrupt[0].detail.contains(&start.to_string()));
    // The frames it hit report missing data instead of failing.
    let frames = read_frames(&mut r, Some(P)).unwrap();
    assert_eq!(frames.len(), FRAMES as usize);
    assert!(frames.iter().any(|f| !f.issues.is_empty()));

    // Same damage without a summary: the linear scan skips the chunk too.
    let cut = tmp("corrupt_cut.mcap");
    std::fs::write(&cut, &bytes[..layout.last().unwrap().1 as usize]).unwrap();
    let mut r = LogReader::open(&cut).unwrap();
    let n = r.messages(&[], 0, u64::MAX).count();
    assert_eq!(n, expected_messages().len() - lost);
    assert!(r
        .issues()
        .iter()
        .any(|i| i.kind == LogIssueKind::CorruptChunk));
}

#[test]
fn not_an_mcap_file_is_a_clear_error() {
    let p = tmp("random.bin");
    let mut s = 12345u64;
    let junk: Vec<u8> = (0..5000)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    std::fs::write(&p, &junk).unwrap();
    let e = LogReader::open(&p).unwrap_err();
    assert!(matches!(e, LogError::NotMcap { .. }), "{e}");
    assert!(e.to_string().contains("not an MCAP file"));
    std::fs::write(&p, b"").unwrap();
    assert!(matches!(LogReader::open(&p), Err(LogError::NotMcap { .. })));
    // MCAP magic followed by garbage: opens nothing, errors, does not panic.
    let mut m = b"\x89MCAP0\r\n".to_vec();
    m.extend_from_slice(&junk);
    std::fs::write(&p, &m).unwrap();
    assert!(LogReader::open(&p).is_err());
    assert!(matches!(
        LogReader::open(&tmp("does-not-exist.mcap")),
        Err(LogError::Io { .. })
    ));
}

#[test]
fn bad_images_late_and_missing_cameras_become_issues() {
    let path = tmp("faults.mcap");
    let cams = rig();
    let mut w = LogWriter::create_with(&path, &cams, small_chunks()).unwrap();
    for k in 0..8u64 {
        let t = k * P;
        for c in 0..2 {
            match (k, c) {
                (2, 1) => w.write_image(c, t, &pattern(c, k, W / 2, H)).unwrap(),
                (3, 0) => {
                    let mut m = Image::from_rgb(&pattern(c, k, W, H), t, "cam_front");
                    m.encoding = "bgr8".into();
                    w.write_raw_image(c, t, &m).unwrap();
                }
                (4, 1) => {}
                (5, 0) => {} // written late, below
                _ => w.write_image(c, t, &pattern(c, k, W, H)).unwrap(),
            }
        }
        w.write_odometry(&ego(k)).unwrap();
        w.write_ground_truth(&gt(k)).unwrap();
        if k == 5 {
            let m = Image::from_rgb(&pattern(0, 5, W, H), t, "cam_front");
            w.write_raw_image(0, t + P * 7 / 10, &m).unwrap();
        }
    }
    assert!(matches!(
        w.write_image(9, 0, &pattern(0, 0, W, H)),
        Err(LogError::NoSuchCamera { cam: 9, cameras: 2 })
    ));
    let mut broken = pattern(0, 0, W, H);
    broken.data.pop();
    assert!(matches!(
        w.write_image(0, 0, &broken),
        Err(LogError::BadImage { .. })
    ));
    w.finish().unwrap();

    let mut r = LogReader::open(&path).unwrap();
    let imgs: Vec<LogMessage> = r
        .messages(
            &["/cam/front/image_raw", "/cam/left/image_raw"],
            0,
            u64::MAX,
        )
        .collect();
    let wrong_size = imgs
        .iter()
        .find(|m| m.stamp_ns == 2 * P && m.topic.contains("left"));
    assert!(matches!(
        wrong_size.map(|m| &m.payload),
        Some(Payload::Image {
            cam: 1,
            image: Err(ImageIssue::WrongSize {
                got: (80, 96),
                want: (160, 96)
            })
        })
    ));
    let wrong_enc = imgs
        .iter()
        .find(|m| m.stamp_ns == 3 * P && m.topic.contains("front"));
    assert!(matches!(
        wrong_enc.map(|m| &m.payload),
        Some(Payload::Image { cam: 0, image: Err(ImageIssue::WrongEncoding { got }) }) if got == "bgr8"
    ));

    let frames = read_frames(&mut r, None).unwrap();
    assert_eq!(frames.len(), 8);
    let only = |k: usize| &frames[k].issues;
    assert!(only(0).is_empty() && only(1).is_empty() && only(6).is_empty() && only(7).is_empty());
    assert!(
        matches!(&only(2)[..], [FrameIssue::BadImage { cam, why }] if cam == "left" && why.contains("80x96"))
    );
    assert!(frames[2].images[0].is_some() && frames[2].images[1].is_none());
    assert!(frames[2].ego.is_some() && frames[2].gt.is_some());
    assert!(
        matches!(&only(3)[..], [FrameIssue::BadImage { cam, why }] if cam == "front" && why.contains("bgr8"))
    );
    assert!(frames[3].images[1].is_some());
    assert_eq!(
        only(4),
        &vec![FrameIssue::MissingCamera { cam: "left".into() }]
    );
    assert_eq!(
        only(5),
        &vec![FrameIssue::LateCamera {
            cam: "front".into(),
            late_by_ns: P * 7 / 10
        }]
    );
    assert!(frames[5].images[0].is_none() && frames[5].images[1].is_some());
}

#[test]
fn log_without_map_opens_cleanly() {
    // A log whose writer never wrote a map: map() is None, and the mount pose comes from tf.
    let path = tmp("nomap.mcap");
    let mut w = LogWriter::create(&path, &rig()).unwrap();
    assert!(matches!(
        w.write_map(1, 3.0, &[]),
        Err(LogError::EmptyMap(0))
    ));
    w.write_odometry(&ego(0)).unwrap();
    w.finish().unwrap();
    let r = LogReader::open(&path).unwrap();
    assert!(r.map().is_none());
    assert!(r.issues().is_empty());
    // The optical-frame convention survives the file: camera "left" looks along +y-ish.
    let q = Quaternion::camera_mount(rig()[1].yaw, rig()[1].pitch);
    let (yaw, _) = q.camera_mount_angles();
    assert!((r.cameras()[1].yaw - yaw).abs() < 1e-12);
}

/// Write and read throughput at the lead's scale (6 cameras of 320x192). Run with
/// `cargo test --release -p redline-sim --test log_roundtrip -- --ignored --nocapture`.
/// `REDLINE_LOG_BENCH_FRAMES` sets the frame count (default 150).
#[test]
#[ignore]
fn throughput() {
    let frames: u64 = std::env::var("REDLINE_LOG_BENCH_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let (w, h) = (320u32, 192u32);
    let cams: Vec<CameraSpec> = (0..6)
        .map(|i| CameraSpec {
            name: format!("c{i}"),
            width: w,
            height: h,
            ..rig()[0].clone()
        })
        .collect();
    let path = tmp("throughput.mcap");
    let mut writer = LogWriter::create(&path, &cams).unwrap();
    let mut spent = std::time::Duration::ZERO;
    for k in 0..frames {
        let imgs: Vec<RgbImage> = (0..6).map(|c| pattern(c, k, w, h)).collect();
        let t = std::time::Instant::now();
        for (c, img) in imgs.iter().enumerate() {
            writer.write_image(c, k * P, img).unwrap();
        }
        writer.write_odometry(&ego(k)).unwrap();
        writer.write_ground_truth(&gt(k)).unwrap();
        spent += t.elapsed();
    }
    let t = std::time::Instant::now();
    let stats = writer.finish().unwrap();
    spent += t.elapsed();
    let raw = (frames * 6 * (w * h * 3) as u64) as f64 / 1e6;
    let t = std::time::Instant::now();
    let mut r = LogReader::open(&path).unwrap();
    let n = read_frames(&mut r, None).unwrap().len();
    let read = t.elapsed();
    assert_eq!(n as u64, frames);
    eprintln!(
        "throughput: {frames} frames x 6 cams, {raw:.0} MB raw -> {:.1} MB file ({:.1}x); \
         write {:.0} MB/s raw ({:.2} s), read+group {:.0} MB/s raw ({:.2} s)",
        stats.bytes as f64 / 1e6,
        raw * 1e6 / stats.bytes as f64,
        raw / spent.as_secs_f64(),
        spent.as_secs_f64(),
        raw / read.as_secs_f64(),
        read.as_secs_f64()
    );
    std::fs::remove_file(&path).ok();
}
