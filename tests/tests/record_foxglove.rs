//! The output recorder through the library API (`redline_record`), read back in Rust:
//!
//! - a lockstep replay recorded gives the output hash of the same replay not recorded;
//! - the file (read with the `mcap` crate, an MCAP reader independent of the writer's)
//!   has the seven channels with their Foxglove schema names and encodings, one message per
//!   channel per frame, log times in frame order; the tracks, detections and per-frame
//!   facts decoded with the Foxglove SDK's message types equal what the replay recorded;
//! - a ring nobody drains fills, then drops and counts every further frame without
//!   blocking the run, and keeps the frames it holds intact and in order.

use std::collections::BTreeSet;
use std::sync::Arc;

use redline_pipeline::config::PipelineConfig;
use redline_pipeline::run::{replay_tapped, replay_with, start_runtime, Counters};
use redline_pipeline::sensors::FrameSource;
use redline_record::foxglove::messages::SceneUpdate;
use redline_record::foxglove::Decode;
use redline_record::{encode::topic, record_ring, Recorder, RecorderConfig};
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;
use redline_tests::{small_scenario, temp_dir};

fn feed() -> Arc<dyn FrameSource> {
    Arc::new(Feed::from_scenario(&small_scenario(3, 2.0), None, &mut |_, _| {}).unwrap())
}

fn lockstep() -> PipelineConfig {
    PipelineConfig {
        lanes: 2,
        release: ReleaseMode::Lockstep,
        // No stage hangs here; a loaded machine must not get one written off.
        deadline_ms: 10_000.0,
        ..PipelineConfig::default()
    }
}

fn modes(cfg: &PipelineConfig) -> Vec<String> {
    cfg.ladder.modes.iter().map(|m| m.name.clone()).collect()
}

#[test]
fn a_recorded_replay_reads_back_with_foxglove_schemas_and_the_same_hash() {
    let feed = feed();
    let cfg = lockstep();
    let frames = feed.frame_count();
    let (plain, _) = replay_with(
        &cfg,
        feed.clone(),
        None,
        Arc::new(Counters::default()),
        None,
    )
    .expect("plain replay");
    let dir = temp_dir("record-foxglove");
    let path = dir.join("out.mcap");
    let (recorder, mut publisher) =
        Recorder::start(RecorderConfig::new(&path, modes(&cfg))).expect("recorder starts");
    let (recorded, _) = replay_tapped(
        &cfg,
        feed.clone(),
        None,
        Arc::new(Counters::default()),
        None,
        &mut publisher,
    )
    .expect("recorded replay");
    drop(publisher);
    let summary = recorder.finish().expect("recording finishes");
    assert_eq!(
        plain.output_hash, recorded.output_hash,
        "recording changed the outputs"
    );
    assert_eq!(
        (
            summary.frames_offered,
            summary.frames_written,
            summary.frames_dropped
        ),
        (frames as u64, frames as u64, 0)
    );

    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(summary.bytes, bytes.len() as u64);
    let expected = [
        (topic::TF, "foxglove.FrameTransform", "protobuf"),
        (topic::DETECTIONS, "foxglove.SceneUpdate", "protobuf"),
        (topic::TRACKS, "foxglove.SceneUpdate", "protobuf"),
        (topic::PREDICTIONS, "foxglove.SceneUpdate", "protobuf"),
        (topic::PLAN, "foxglove.SceneUpdate", "protobuf"),
        (topic::SEGMENTATION, "foxglove.Grid", "protobuf"),
        (topic::FRAME, "redline.FrameStats", "json"),
    ];
    let mut counts = vec![0usize; expected.len()];
    let mut last_time = vec![0u64; expected.len()];
    let mut stats_frame = 0usize;
    for m in mcap::MessageStream::new(&bytes).expect("an MCAP file") {
        let m = m.expect("a readable message");
        let c = &m.channel;
        let i = expected
            .iter()
            .position(|e| e.0 == c.topic)
            .unwrap_or_else(|| panic!("unexpected topic {}", c.topic));
        let schema = c.schema.as_ref().expect("every channel has a schema");
        assert_eq!(
            (schema.name.as_str(), c.message_encoding.as_str()),
            (expected[i].1, expected[i].2),
            "{}",
            c.topic
        );
        assert!(
            m.log_time >= last_time[i],
            "{}: log time went back",
            c.topic
        );
        last_time[i] = m.log_time;
        let k = counts[i];
        counts[i] += 1;
        let rec = &recorded.records[k];
        if c.topic == topic::TRACKS {
            let u = SceneUpdate::decode(&m.data[..]).expect("a SceneUpdate");
            let got: BTreeSet<String> = u.entities.iter().map(|e| e.id.clone()).collect();
            let want: BTreeSet<String> = rec
                .tracks
                .iter()
                .filter(|t| t.valid == 1)
                .map(|t| format!("track/{}", t.id))
                .collect();
            assert_eq!(got, want, "frame {k}: track ids");
        }
        if c.topic == topic::DETECTIONS {
            let u = SceneUpdate::decode(&m.data[..]).expect("a SceneUpdate");
            assert_eq!(u.entities.len() as u32, rec.detections, "frame {k}");
            assert!(u.entities.iter().all(|e| e.frame_id == "base_link"));
        }
        if c.topic == topic::FRAME {
            let v: serde_json::Value = serde_json::from_slice(&m.data).expect("JSON");
            assert_eq!(v["frame"], serde_json::json!(rec.frame));
            let ms = v["latency_ms"].as_f64().unwrap();
            assert!((ms * 1e6 - rec.latency_ns as f64).abs() < 1.0, "frame {k}");
            assert_eq!(v["mode_name"], serde_json::json!("nominal"));
            assert_eq!(v["deadline_miss"], serde_json::json!(0));
            stats_frame += 1;
        }
    }
    assert_eq!(
        counts,
        vec![frames; expected.len()],
        "one message per topic per frame"
    );
    assert_eq!(stats_frame, frames);
    let s = mcap::Summary::read(&bytes)
        .unwrap()
        .expect("a summary section");
    assert_eq!(s.channels.len(), expected.len());
}

#[test]
fn a_full_ring_drops_and_counts_without_blocking_the_run() {
    let feed = feed();
    let cfg = PipelineConfig {
        release: ReleaseMode::AsFastAsPossible,
        ..lockstep()
    };
    let (mut rt, _) = start_runtime(&cfg, &feed).unwrap();
    let (mut publisher, mut reader) = record_ring(3);
    // Nobody drains: the ring holds the first three frames, the rest are dropped.
    rt.run(10, &mut publisher);
    let c = publisher.counters();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        (c.offered.load(Relaxed), c.dropped.load(Relaxed)),
        (10, 7),
        "offered, dropped"
    );
    let mut held = Vec::new();
    while reader.next(|r| held.push((r.frame, r.ego.map(|e| e.stamp_ns)))) {}
    let period = feed.period_ns();
    let first = held[0].1.unwrap();
    assert_eq!(
        held,
        (0..3)
            .map(|k| (k, Some(first + k * period)))
            .collect::<Vec<_>>(),
        "the held frames, in order, with their own ego pose"
    );
    // Drained, the ring takes frames again.
    rt.run(2, &mut publisher);
    let mut more = Vec::new();
    while reader.next(|r| more.push(r.frame)) {}
    assert_eq!(more, vec![10, 11]);
}
