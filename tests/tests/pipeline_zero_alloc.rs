//! Zero heap allocations per frame after warm-up for the whole driving graph (network and
//! oracle perception, with the `[slowdown]` knob wrapping stages, with JPEG cameras decoded
//! in the graph by `jpeg_decode`, damaged streams included, and with distorted lenses that
//! preprocess undoes), 2 lanes, 2 frames in flight, counted on every thread.
//!
//! Positive control: the graph carries one extra stage ([`AllocProbe`]) that allocates in
//! `run` when its switch is on. It is off while the count must be zero; for the drive's last
//! frames it is switched on, on the same runtime and allocator, and the count must rise by
//! at least one allocation per run of the probe, proving that the counter sees the lanes.

use std::sync::Arc;

use redline_pipeline::camera::{CameraSpec, Distortion};
use redline_pipeline::config::{Perception, PipelineConfig, Slowdown};
use redline_pipeline::graph;
use redline_pipeline::run::Counters;
use redline_pipeline::run::RecordingPublisher;
use redline_pipeline::sensors::{FrameSource, SensorFrame};
use redline_pipeline::types::RoadMap;
use redline_runtime::{PlanConfig, ReleaseMode, Runtime, RuntimeConfig};
use redline_sim::feed::Feed;
use redline_tests::{small_scenario, AllocProbe, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

/// Frames run before counting, and frames at the end of the drive run with the probe on.
const WARM_UP: u64 = 20;
const CONTROL_FRAMES: u64 = 10;

#[test]
fn driving_graph_allocates_nothing_per_frame() {
    let feed: Arc<dyn FrameSource> =
        Arc::new(Feed::from_scenario(&small_scenario(5, 3.0), None, &mut |_, _| {}).unwrap());
    let frames = feed.frame_count() as u64;
    assert!(frames > WARM_UP + CONTROL_FRAMES + 20, "{frames} frames");
    let jpeg: Arc<dyn FrameSource> = Arc::new(JpegFeed::new(feed.clone()));
    // The same drive through lenses with barrel distortion: preprocess undistorts.
    let mut lens_feed = Feed::from_scenario(&small_scenario(5, 3.0), None, &mut |_, _| {}).unwrap();
    for cam in &mut lens_feed.cameras {
        cam.distortion = Distortion::Polynomial {
            k: [-0.2, 0.05, 0.0, 0.0, 0.0, 0.0],
            p: [0.0; 2],
        };
    }
    let lens: Arc<dyn FrameSource> = Arc::new(lens_feed);
    let slowed = |percent: f64, busy_ms: f64| Slowdown { percent, busy_ms };
    for (feed, perception, slowdown) in [
        (&feed, Perception::Network, vec![]),
        (&feed, Perception::Oracle, vec![]),
        (&jpeg, Perception::Network, vec![]),
        (&lens, Perception::Network, vec![]),
        (
            &feed,
            Perception::Network,
            vec![
                ("backbone", slowed(20.0, 0.0)),
                ("tracking", slowed(0.0, 0.1)),
            ],
        ),
    ] {
        let mut cfg = PipelineConfig {
            perception,
            ..PipelineConfig::default()
        };
        for (stage, sd) in slowdown {
            cfg.slowdown.insert(stage.to_string(), sd);
        }
        let (mut g, info) = graph::build(&cfg, feed).unwrap();
        let probe = AllocProbe::add_to(&mut g);
        let plan = g
            .build(&PlanConfig {
                lanes: 2,
                frame_slots: 2,
            })
            .unwrap();
        let mut rt = Runtime::new(
            plan,
            RuntimeConfig {
                release: ReleaseMode::AsFastAsPossible,
                period_ns: feed.period_ns(),
                // No stage here hangs; a loaded CI machine must not get one written off
                // (the default is four 33 ms deadlines).
                hang_after_ns: 10_000_000_000,
                ..RuntimeConfig::default()
            },
        )
        .unwrap();
        let mut publisher =
            RecordingPublisher::new(feed.frame_count(), Arc::new(Counters::default()));
        rt.run(WARM_UP, &mut publisher);
        ALLOC.start();
        rt.run(frames - WARM_UP - CONTROL_FRAMES, &mut publisher);
        let (allocs, bytes) = ALLOC.stop();
        probe.switch_on();
        ALLOC.start();
        rt.run(CONTROL_FRAMES, &mut publisher);
        let (control_allocs, control_bytes) = ALLOC.stop();
        assert_eq!(publisher.records.len(), feed.frame_count());
        assert_eq!(
            allocs,
            0,
            "{perception:?}, slowdown {:?}, jpeg {}: {allocs} allocations ({bytes} bytes) after \
             warm-up",
            cfg.slowdown,
            feed.jpeg_capacity()
        );
        if let Some(times) = &info.jpeg_times {
            // the decoder really ran, on good and on damaged streams
            let cams = times.summary();
            assert!(cams.iter().all(|c| c.decoded > 0), "{cams:?}");
            assert!(cams[1].failed > 0, "{cams:?}");
        }
        let probe_runs = probe.allocating_runs();
        assert!(
            probe_runs > 0,
            "the probe never ran in {CONTROL_FRAMES} frames"
        );
        assert!(
            control_allocs >= probe_runs && control_bytes >= probe_runs * 64,
            "{perception:?}, slowdown {:?}: the positive control allocated 64 bytes in each of \
             {probe_runs} runs but the counter saw {control_allocs} allocations \
             ({control_bytes} bytes): the counting allocator is not counting, so the zero above \
             proves nothing",
            cfg.slowdown
        );
    }
}

/// A frame source whose cameras deliver JPEG (the scenario's images encoded at quality 90;
/// every fifth frame's camera 1 cut off halfway, a damaged stream): the graph gets a
/// `jpeg_decode` stage.
#[derive(Debug)]
struct JpegFeed {
    inner: Arc<dyn FrameSource>,
    frames: Vec<SensorFrame>,
}

impl JpegFeed {
    fn new(inner: Arc<dyn FrameSource>) -> Self {
        let (w, h) = inner.image_size();
        let (len, cams) = (inner.image_len(), inner.cameras().len());
        let frames = (0..inner.frame_count())
            .map(|k| {
                let mut f = inner.frame(k).unwrap().clone();
                // the streams one after another, as the log feed packs them
                f.jpeg = Vec::new();
                f.jpeg_len = vec![0; cams];
                for c in 0..cams {
                    let mut stream = Vec::new();
                    jpeg_encoder::Encoder::new(&mut stream, 90)
                        .encode(
                            &f.images[c * len..][..len],
                            w as u16,
                            h as u16,
                            jpeg_encoder::ColorType::Rgb,
                        )
                        .unwrap();
                    if k % 5 == 0 && c == 1 {
                        stream.truncate(stream.len() / 2);
                    }
                    f.jpeg_len[c] = stream.len() as u32;
                    f.jpeg.extend_from_slice(&stream);
                }
                f.images.clear();
                f
            })
            .collect();
        JpegFeed { inner, frames }
    }
}

impl FrameSource for JpegFeed {
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
        self.frames.len()
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        self.frames.get(k)
    }
    fn issues(&self) -> &[(u64, String)] {
        self.inner.issues()
    }
    fn describe(&self) -> &str {
        "scenario as JPEG"
    }
    fn jpeg_capacity(&self) -> usize {
        self.inner.image_len()
    }
}
