//! The recorder: a writer thread (not a lane) that drains the ring, encodes each frame as
//! Foxglove messages and writes the MCAP file.
//!
//! Contract:
//! - [`Recorder::start`] creates the file, the channels and the ring (all allocation and the
//!   first I/O happen here, before any frame runs) and returns the [`RecordPublisher`] to
//!   give the runtime (alone or teed with other publishers).
//! - The writer thread polls the ring every millisecond when it is empty; it writes frames
//!   in publish order. Encoding and file I/O happen only on this thread.
//! - [`Recorder::finish`], called after the run (the publisher no longer used), writes what
//!   is still in the ring, closes the file (summary and index included) and returns the
//!   counts. Every offered frame is either written or counted as dropped.
//! - Log times: a message's log time (and the timestamps inside it) is the frame's release
//!   time moved onto the sensor clock by one offset for the whole run, fixed by the first
//!   recorded frame: `ego.stamp_ns − release_ns` when that frame published its own outputs
//!   (the usual case: the timeline then runs with the log's time), else `−release_ns` (the
//!   timeline starts at 0). So log times never go backwards within a run.
//! - Written uncompressed (the `foxglove` crate without its zstd/lz4 features).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use foxglove::messages::{CameraCalibration, CompressedImage, FrameTransform, Grid, SceneUpdate};
use foxglove::{
    Channel, ChannelBuilder, Context, McapWriter, McapWriterHandle, PartialMetadata, RawChannel,
    Schema,
};
use redline_pipeline::types::BevSpec;
use serde::Serialize;

use crate::encode::{self, topic, FRAME_STATS_SCHEMA};
use crate::frame::{record_ring, OutputRecord, RecordCounters, RecordPublisher, RecordReader};
use crate::images::{self, ImageSource, ImageStats};
use crate::RecordError;

/// Ring slots by default: 64 frames (about 2 s at 30 Hz; ~1.7 MiB).
pub const DEFAULT_SLOTS: usize = 64;

/// How to record.
#[derive(Debug)]
pub struct RecorderConfig {
    /// The MCAP file to write (created or truncated).
    pub path: PathBuf,
    /// Ring slots (frames the writer may fall behind by before records are dropped).
    pub slots: usize,
    /// Mode names, by index (for the `mode_name` field).
    pub mode_names: Vec<String>,
    /// Geometry of the published segmentation grid.
    pub bev: BevSpec,
    /// Camera images to record with the outputs (see [`crate::images`]); None: no images.
    pub images: Option<Box<dyn ImageSource>>,
}

impl RecorderConfig {
    /// Defaults for `path`: [`DEFAULT_SLOTS`], the default grid, mode names as given.
    pub fn new(path: impl Into<PathBuf>, mode_names: Vec<String>) -> Self {
        RecorderConfig {
            path: path.into(),
            slots: DEFAULT_SLOTS,
            mode_names,
            bev: BevSpec::DEFAULT,
            images: None,
        }
    }
}

/// What a recording wrote (in `report.json` under `record`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordSummary {
    /// The file.
    pub path: String,
    /// Frames offered by the runtime.
    pub frames_offered: u64,
    /// Frames written (one message per topic per frame, where the frame has that output).
    pub frames_written: u64,
    /// Frames dropped because the ring was full.
    pub frames_dropped: u64,
    /// Ring slots.
    pub ring_slots: usize,
    /// File size, bytes.
    pub bytes: u64,
    /// Topics written.
    pub topics: Vec<String>,
    /// Camera images, when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageStats>,
}

struct Channels {
    tf: Channel<FrameTransform>,
    detections: Channel<SceneUpdate>,
    tracks: Channel<SceneUpdate>,
    predictions: Channel<SceneUpdate>,
    plan: Channel<SceneUpdate>,
    segmentation: Channel<Grid>,
    frame: Arc<RawChannel>,
}

impl Channels {
    fn new(ctx: &Arc<Context>) -> Result<Self, RecordError> {
        let frame = ChannelBuilder::new(topic::FRAME)
            .context(ctx)
            .message_encoding("json")
            .schema(Schema::new(
                "redline.FrameStats",
                "jsonschema",
                FRAME_STATS_SCHEMA.as_bytes(),
            ))
            .build_raw()
            .map_err(|e| RecordError::Foxglove {
                what: "create the /redline/frame channel",
                source: Box::new(e),
            })?;
        Ok(Channels {
            tf: ChannelBuilder::new(topic::TF).context(ctx).build(),
            detections: ChannelBuilder::new(topic::DETECTIONS).context(ctx).build(),
            tracks: ChannelBuilder::new(topic::TRACKS).context(ctx).build(),
            predictions: ChannelBuilder::new(topic::PREDICTIONS).context(ctx).build(),
            plan: ChannelBuilder::new(topic::PLAN).context(ctx).build(),
            segmentation: ChannelBuilder::new(topic::SEGMENTATION)
                .context(ctx)
                .build(),
            frame,
        })
    }
}

struct Writer {
    reader: RecordReader,
    stop: Arc<AtomicBool>,
    handle: McapWriterHandle<BufWriter<File>>,
    out: Output,
}

/// Encodes records onto the channels.
struct Output {
    channels: Channels,
    mode_names: Vec<String>,
    bev: BevSpec,
    clock_offset: Option<i128>,
    /// Channels and the sink hold the context weakly: it must outlive the writing.
    _context: Arc<Context>,
    images: Option<Images>,
}

/// The image source, one channel per camera, and a reused encoding buffer.
struct Images {
    source: Box<dyn ImageSource>,
    channels: Vec<Channel<CompressedImage>>,
    /// Per camera, its calibration channel and message (built once; each frame only sets
    /// the timestamp); empty when the source has no calibrations.
    calibrations: Vec<(Channel<CameraCalibration>, CameraCalibration)>,
    /// The mounts' channel and every camera's mount message, likewise.
    mounts: Option<(Channel<FrameTransform>, Vec<FrameTransform>)>,
    frame_ids: Vec<String>,
    jpeg: Vec<u8>,
    stats: ImageStats,
}

impl Images {
    fn new(source: Box<dyn ImageSource>, ctx: &Arc<Context>) -> Self {
        let names = source.cameras();
        let specs = source.specs();
        let t0 = foxglove::messages::Timestamp::default();
        Images {
            channels: names
                .iter()
                .map(|n| ChannelBuilder::new(images::topic(n)).context(ctx).build())
                .collect(),
            calibrations: specs
                .iter()
                .map(|s| {
                    let ch = ChannelBuilder::new(images::calibration_topic(&s.name))
                        .context(ctx)
                        .build();
                    (ch, images::calibration(s, t0))
                })
                .collect(),
            mounts: (!specs.is_empty()).then(|| {
                let ch = ChannelBuilder::new(images::MOUNTS_TOPIC)
                    .context(ctx)
                    .build();
                (ch, specs.iter().map(|s| images::mount(s, t0)).collect())
            }),
            frame_ids: names.iter().map(|n| format!("cam_{n}")).collect(),
            source,
            jpeg: Vec::new(),
            stats: ImageStats::default(),
        }
    }

    fn write(&mut self, frame: u64, t: foxglove::messages::Timestamp, ns: u64) {
        let (w, h) = self.source.size();
        let Images {
            source,
            channels,
            calibrations,
            mounts,
            frame_ids,
            jpeg,
            stats,
        } = self;
        // The calibrations and mounts beside every frame's images, so that a player that
        // seeks finds them (each a few hundred bytes).
        if let Some((ch, msgs)) = mounts {
            for m in msgs.iter_mut() {
                m.timestamp = Some(t);
                ch.log_with_time(m, ns);
            }
        }
        for (ch, c) in calibrations.iter_mut() {
            c.timestamp = Some(t);
            ch.log_with_time(c, ns);
        }
        let found = source.images(frame, &mut |c, rgb| {
            let Some(ch) = channels.get(c) else {
                return;
            };
            if images::encode_jpeg(rgb, w, h, jpeg).is_err() {
                stats.encode_failures += 1;
                return;
            }
            let msg = CompressedImage {
                timestamp: Some(t),
                frame_id: frame_ids[c].clone(),
                data: jpeg.clone().into(),
                format: "jpeg".to_string(),
            };
            ch.log_with_time(&msg, ns);
            stats.images_written += 1;
        });
        if !found {
            stats.frames_missing += 1;
        }
    }
}

impl Writer {
    fn run(mut self) -> Result<Option<ImageStats>, RecordError> {
        loop {
            // Read before draining: every commit made before `finish` set the flag is then
            // visible to the drain below.
            let stopping = self.stop.load(Ordering::Acquire);
            let mut any = false;
            while self.reader.next(|r| self.out.write(r)) {
                let c = self.reader.counters();
                c.written.fetch_add(1, Ordering::Relaxed);
                any = true;
            }
            if stopping {
                break;
            }
            if !any {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.handle.close().map_err(|e| RecordError::Foxglove {
            what: "finish the MCAP file",
            source: Box::new(e),
        })?;
        Ok(self.out.images.map(|i| i.stats))
    }
}

impl Output {
    fn log_time(&mut self, r: &OutputRecord) -> u64 {
        // One offset for the whole run, fixed by the first record: times never go back.
        let offset = *self.clock_offset.get_or_insert_with(|| {
            let release = i128::from(r.release_ns);
            match r.ego {
                Some(e) if r.held_from == Some(r.frame) => i128::from(e.stamp_ns) - release,
                _ => -release,
            }
        });
        (i128::from(r.release_ns) + offset).clamp(0, i128::from(u64::MAX)) as u64
    }

    fn write(&mut self, r: &OutputRecord) {
        let ns = self.log_time(r);
        let t = encode::timestamp(ns);
        let c = &self.channels;
        if let Some(tf) = encode::transform(r, t) {
            c.tf.log_with_time(&tf, ns);
        }
        c.detections.log_with_time(&encode::detections(r, t), ns);
        c.tracks.log_with_time(&encode::tracks(r, t), ns);
        c.predictions.log_with_time(&encode::predictions(r, t), ns);
        c.plan.log_with_time(&encode::plan(r, t), ns);
        if let Some(g) = encode::segmentation(r, t, &self.bev) {
            c.segmentation.log_with_time(&g, ns);
        }
        let stats = encode::frame_stats(r, &self.mode_names);
        // FrameStats has no map with non-string keys and no non-finite floats that fail:
        // serde_json writes NaN as null rather than failing.
        if let Ok(json) = serde_json::to_vec(&stats) {
            c.frame
                .log_with_meta(&json, PartialMetadata { log_time: Some(ns) });
        }
        if let Some(images) = self.images.as_mut() {
            images.write(r.frame, t, ns);
        }
    }
}

/// A running recording: the writer thread and the counts.
pub struct Recorder {
    path: PathBuf,
    slots: usize,
    topics: Vec<String>,
    stop: Arc<AtomicBool>,
    counters: Arc<RecordCounters>,
    thread: Option<JoinHandle<Result<Option<ImageStats>, RecordError>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("slots", &self.slots)
            .field("counters", &self.counters)
            .finish()
    }
}

impl Recorder {
    /// Creates the file and the ring and starts the writer thread (start-up only).
    pub fn start(cfg: RecorderConfig) -> Result<(Recorder, RecordPublisher), RecordError> {
        let file = File::create(&cfg.path).map_err(|source| RecordError::Create {
            path: cfg.path.clone(),
            source,
        })?;
        let ctx = Context::new();
        let handle = McapWriter::new()
            .context(&ctx)
            .create(BufWriter::with_capacity(1 << 20, file))
            .map_err(|e| RecordError::Foxglove {
                what: "start the MCAP file",
                source: Box::new(e),
            })?;
        let channels = Channels::new(&ctx)?;
        let images = cfg.images.map(|source| Images::new(source, &ctx));
        let mut topics: Vec<String> = topic::ALL.iter().map(|t| t.to_string()).collect();
        if let Some(i) = &images {
            topics.extend(i.channels.iter().map(|c| c.topic().to_string()));
        }
        let (publisher, reader) = record_ring(cfg.slots);
        let counters = publisher.shared_counters();
        let slots = reader.capacity();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            reader,
            stop: stop.clone(),
            handle,
            out: Output {
                channels,
                mode_names: cfg.mode_names,
                bev: cfg.bev,
                clock_offset: None,
                _context: ctx,
                images,
            },
        };
        let thread = std::thread::Builder::new()
            .name("redline-record".into())
            .spawn(move || writer.run())
            .map_err(|source| RecordError::Thread { source })?;
        Ok((
            Recorder {
                path: cfg.path,
                slots,
                topics,
                stop,
                counters,
                thread: Some(thread),
            },
            publisher,
        ))
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes what is left in the ring, closes the file and returns the counts. Call it
    /// after the run, once the publisher is no longer used.
    pub fn finish(mut self) -> Result<RecordSummary, RecordError> {
        self.stop.store(true, Ordering::Release);
        let joined = self.thread.take().map(JoinHandle::join);
        let images = match joined {
            Some(Ok(result)) => result?,
            Some(Err(_)) => return Err(RecordError::WriterPanicked),
            None => None,
        };
        let bytes = std::fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|source| RecordError::Create {
                path: self.path.clone(),
                source,
            })?;
        let c = &self.counters;
        Ok(RecordSummary {
            path: self.path.display().to_string(),
            frames_offered: c.offered.load(Ordering::Relaxed),
            frames_written: c.written.load(Ordering::Relaxed),
            frames_dropped: c.dropped.load(Ordering::Relaxed),
            ring_slots: self.slots,
            bytes,
            topics: self.topics.clone(),
            images,
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Not finished (an error path): stop the writer and let it close the file.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
