//! Bad input never panics, and every readable frame is still replayed: a missing camera, an
//! image of the wrong size, an image in an unsupported encoding, a channel with an unknown
//! schema, a truncated file, a corrupted chunk, and a file that is not MCAP at all. And a
//! frame source with a bug that panics (inside the driving graph's `sensors` stage) is
//! contained by the runtime like any stage's panic: every frame is still published.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redline_pipeline::camera::CameraSpec;
use redline_pipeline::config::{Perception, PipelineConfig};
use redline_pipeline::run::replay;
use redline_pipeline::run::Counters;
use redline_pipeline::sensors::{FrameSource, SensorFrame};
use redline_pipeline::types::RoadMap;
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;
use redline_sim::log::{LogWriter, ReadLimits};
use redline_sim::msgs::{Header, Image, Time};
use redline_sim::scenario::Scenario;
use redline_sim::types::RgbImage;
use redline_tests::{small_scenario, temp_dir};

/// Writes the scenario with faults: frame 5 lacks camera 2, frame 7's camera 1 is 64x32
/// instead of 128x64, frame 9's camera 3 is "16UC1" (a depth encoding redline does not read).
fn faulty_log(scenario: &Scenario, path: &Path) {
    let mut w = LogWriter::create(path, &scenario.cameras).unwrap();
    let centre = scenario.road.sample_centre(2.0, 1024);
    w.write_map(scenario.road.lanes, scenario.road.lane_width, &centre)
        .unwrap();
    let mut img = RgbImage::default();
    for k in 0..scenario.frame_count() {
        let stamp = scenario.stamp_ns(k);
        for c in 0..scenario.cameras.len() {
            match (k, c) {
                (5, 2) => continue,
                (7, 1) => {
                    let small = RgbImage {
                        width: 64,
                        height: 32,
                        data: vec![100; 64 * 32 * 3],
                    };
                    w.write_image(c, stamp, &small).unwrap();
                }
                (9, 3) => {
                    let mono = Image {
                        header: Header {
                            stamp: Time {
                                sec: (stamp / 1_000_000_000) as i32,
                                nanosec: (stamp % 1_000_000_000) as u32,
                            },
                            frame_id: "cam_back_left".into(),
                        },
                        height: 64,
                        width: 128,
                        encoding: "16UC1".into(),
                        is_bigendian: 0,
                        step: 128,
                        data: vec![50; 128 * 64],
                    };
                    w.write_raw_image(c, stamp, &mono).unwrap();
                }
                _ => {
                    scenario.render(k, c, &mut img);
                    w.write_image(c, stamp, &img).unwrap();
                }
            }
        }
        w.write_odometry(&scenario.ego(k)).unwrap();
        w.write_ground_truth(&scenario.ground_truth(k)).unwrap();
    }
    w.finish().unwrap();
}

/// Copies `good` and adds a channel whose schema redline does not know.
fn with_unknown_schema(good: &Path, out: &Path) {
    let bytes = std::fs::read(good).unwrap();
    let file = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    let mut w = mcap::Writer::new(file).unwrap();
    for m in mcap::MessageStream::new(&bytes).unwrap() {
        w.write(&m.unwrap()).unwrap();
    }
    let schema = w
        .add_schema("foo_msgs/msg/Bar", "ros2msg", b"int32 x")
        .unwrap();
    let channel = w
        .add_channel(schema, "/foo", "cdr", &BTreeMap::new())
        .unwrap();
    for i in 0..10u32 {
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: i,
            log_time: u64::from(i) * 33_333_333,
            publish_time: u64::from(i) * 33_333_333,
        };
        w.write_to_known_channel(&header, &[0, 1, 0, 0, 1, 2, 3, 4])
            .unwrap();
    }
    w.finish().unwrap();
}

fn replay_all(feed: Feed) -> u64 {
    let feed = Arc::new(feed);
    let cfg = PipelineConfig {
        release: ReleaseMode::Lockstep,
        ..PipelineConfig::default()
    };
    let (o, _rt) = replay(&cfg, feed.clone(), None, Arc::new(Counters::default())).unwrap();
    assert_eq!(o.runtime.frames_published, feed.frames.len() as u64);
    o.runtime.frames_published
}

#[test]
fn faulty_logs_are_replayed_with_recorded_issues_and_no_panic() {
    let dir = temp_dir("bad-input");
    let scenario = Scenario::generate(small_scenario(11, 1.0)).unwrap();
    let n = scenario.frame_count();
    let faulty = dir.join("faulty.mcap");
    faulty_log(&scenario, &faulty);
    let unknown = dir.join("unknown.mcap");
    with_unknown_schema(&faulty, &unknown);

    let feed = Feed::from_log(&unknown, None).expect("a faulty log still opens");
    assert_eq!(feed.frames.len(), n, "every frame is replayed");
    let issues: Vec<String> = feed
        .issues
        .iter()
        .map(|(f, w)| format!("{f}: {w}"))
        .collect();
    let has = |frame: u64, text: &str| {
        feed.issues
            .iter()
            .any(|(f, w)| *f == frame && w.contains(text))
    };
    assert!(has(5, "missing"), "{issues:#?}");
    assert!(
        has(7, "size") || has(7, "64x32") || has(7, "Size"),
        "{issues:#?}"
    );
    assert!(has(9, "16UC1") || has(9, "ncoding"), "{issues:#?}");
    assert!(
        issues
            .iter()
            .any(|i| i.contains("foo_msgs") || i.contains("Unknown")),
        "{issues:#?}"
    );
    assert_eq!(feed.frames[5].present & (1 << 2), 0);
    assert_eq!(feed.frames[7].present & (1 << 1), 0);
    assert_eq!(feed.frames[9].present & (1 << 3), 0);
    assert_eq!(feed.frames[6].present, 0b111_1111, "all seven cameras");
    assert_eq!(replay_all(feed), n as u64);

    // The [log] limits: a feed larger than allowed is refused with the knob to turn.
    let few = ReadLimits {
        max_frames: 3,
        ..ReadLimits::default()
    };
    let e = Feed::from_log_with(&unknown, None, few)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_frames") && e.contains("--frames"), "{e}");
    assert_eq!(
        Feed::from_log_with(&unknown, Some(3), few)
            .unwrap()
            .frames
            .len(),
        3
    );
    let small = ReadLimits {
        max_feed_bytes: 1000,
        ..ReadLimits::default()
    };
    let e = Feed::from_log_with(&unknown, None, small)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_feed_bytes"), "{e}");

    // Truncated: every frame before the cut is still replayed.
    let bytes = std::fs::read(&faulty).unwrap();
    let cut = dir.join("truncated.mcap");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let feed = Feed::from_log(&cut, None).expect("a truncated log still opens");
    assert!(
        feed.frames.len() > 5 && feed.frames.len() < n,
        "{} of {n} frames",
        feed.frames.len()
    );
    assert!(
        feed.issues
            .iter()
            .any(|(_, w)| w.contains("Truncated") || w.contains("Unindexed")),
        "{:?}",
        feed.issues
    );
    replay_all(feed);

    // A corrupted chunk: its frames are lost (recorded), the others replayed.
    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    for b in &mut bad[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let corrupt = dir.join("corrupt.mcap");
    std::fs::write(&corrupt, &bad).unwrap();
    match Feed::from_log(&corrupt, None) {
        Ok(feed) => {
            assert!(!feed.issues.is_empty(), "the corruption is recorded");
            replay_all(feed);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }

    // Not an MCAP file at all: a clear error.
    let junk = dir.join("junk.mcap");
    std::fs::write(&junk, b"this is not an mcap file, just some bytes").unwrap();
    let e = Feed::from_log(&junk, None).unwrap_err().to_string();
    assert!(e.contains("junk.mcap"), "{e}");
    let e = Feed::from_log(&dir.join("missing.mcap"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.mcap"), "{e}");
}

/// A frame source with a bug: the first read of frame `panic_at` panics (the sensors stage
/// reads it; the evaluation after the replay reads it again).
#[derive(Debug)]
struct PanicsAt {
    inner: Feed,
    panic_at: usize,
    fired: AtomicBool,
}

impl FrameSource for PanicsAt {
    fn cameras(&self) -> &[CameraSpec] {
        self.inner.cameras()
    }
    fn image_size(&self) -> (usize, usize) {
        self.inner.image_size()
    }
    fn period_ns(&self) -> u64 {
        self.inner.period_ns()
    }
    fn map(&self) -> &RoadMap {
        self.inner.map()
    }
    fn frame_count(&self) -> usize {
        self.inner.frame_count()
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        if k == self.panic_at && !self.fired.swap(true, Ordering::SeqCst) {
            panic!("frame source bug at frame {k}");
        }
        self.inner.frame(k)
    }
    fn issues(&self) -> &[(u64, String)] {
        self.inner.issues()
    }
    fn describe(&self) -> &str {
        self.inner.describe()
    }
}

/// A pipeline stage that panics goes through the same stage boundary as any other: the
/// replay finishes, every frame is published, the report names the stage and the message,
/// and the critical `sensors` stage lost this way sends the ladder to its last mode.
#[test]
fn a_panicking_pipeline_stage_is_contained() {
    let inner = Feed::from_scenario(&small_scenario(3, 2.0), None, &mut |_, _| {}).unwrap();
    let n = inner.frames.len();
    let feed: Arc<dyn FrameSource> = Arc::new(PanicsAt {
        inner,
        panic_at: 20,
        fired: AtomicBool::new(false),
    });
    let cfg = PipelineConfig {
        release: ReleaseMode::Lockstep,
        perception: Perception::Oracle,
        ..PipelineConfig::default()
    };
    let (o, rt) = replay(&cfg, feed, None, Arc::new(Counters::default())).unwrap();
    let r = &o.runtime;
    assert_eq!(r.frames_published, n as u64, "{}", r.table());
    let sensors = r.stages.iter().find(|s| s.name == "sensors").unwrap();
    assert_eq!(sensors.counters.panics, 1, "{}", r.table());
    assert_eq!(sensors.counters.panic_fallbacks, (n - 21) as u64);
    assert_eq!(r.panics.len(), 1, "{:?}", r.panics);
    assert_eq!(
        (r.panics[0].stage.as_str(), r.panics[0].frame),
        ("sensors", 20)
    );
    assert_eq!(r.panics[0].message, "frame source bug at frame 20");
    assert!(r.runtime_panic.is_none());
    assert!(
        r.transitions
            .iter()
            .any(|t| t.after_frame == 20 && t.to == "safe_stop"),
        "{:#?}",
        r.transitions
    );
    assert!(rt.shutdown().is_ok());
}
