//! `redline replay --record out.mcap`: the output recording around a replay. Wraps
//! `redline_record` for the CLI: starts the recorder before the run (file, channels, ring,
//! writer thread), is the replay's extra publisher during it (a copy into the ring per
//! frame, nothing else), and finishes the file after it.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use redline_pipeline::config::PipelineConfig;
use redline_pipeline::sensors::FrameSource;
use redline_record::{FeedImages, RecordPublisher, RecordSummary, Recorder, RecorderConfig};
use redline_runtime::{Published, Publisher};

/// A recording in progress, or none (no `--record`).
#[derive(Debug, Default)]
pub struct OutputRecording {
    recorder: Option<Recorder>,
    publisher: Option<RecordPublisher>,
}

impl OutputRecording {
    /// Starts recording to `path` when given; with `images`, the camera images of `feed`
    /// too.
    pub fn start(
        path: Option<&Path>,
        images: bool,
        cfg: &PipelineConfig,
        feed: &Arc<dyn FrameSource>,
    ) -> Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let mut modes: Vec<String> = cfg.ladder.modes.iter().map(|m| m.name.clone()).collect();
        if modes.is_empty() {
            modes.push("nominal".into());
        }
        let mut rc = RecorderConfig::new(path, modes);
        if images && feed.streaming() {
            // The writer thread reads a frame's images after the frame ran; a streamed
            // source frees its windows as the replay moves on.
            anyhow::bail!(
                "--record-images needs the frames in memory: add --in-memory (a streamed log's \
                 frames are freed as the replay moves on, before the recorder could read them)"
            );
        }
        if images {
            rc.images = Some(Box::new(FeedImages(feed.clone())));
        }
        let (recorder, publisher) =
            Recorder::start(rc).with_context(|| format!("--record {}", path.display()))?;
        Ok(OutputRecording {
            recorder: Some(recorder),
            publisher: Some(publisher),
        })
    }

    /// Writes what is left, closes the file and returns the counts (None: not recording).
    pub fn finish(self) -> Result<Option<RecordSummary>> {
        let OutputRecording {
            recorder,
            publisher,
        } = self;
        drop(publisher);
        recorder
            .map(|r| {
                let path = r.path().display().to_string();
                r.finish().with_context(|| format!("--record {path}"))
            })
            .transpose()
    }
}

impl Publisher for OutputRecording {
    fn publish(&mut self, p: &Published<'_>) {
        if let Some(r) = self.publisher.as_mut() {
            r.publish(p);
        }
    }
}

/// The terminal line about a finished recording.
pub fn summary_line(s: &RecordSummary) -> String {
    let images = s
        .images
        .map(|i| {
            format!(
                ", {} camera images ({} frames no longer held, {} not encodable)",
                i.images_written, i.frames_missing, i.encode_failures
            )
        })
        .unwrap_or_default();
    format!(
        "recorded {} frames to {} ({:.1} MiB, {} topics{images}; open it in Foxglove or Lichtblick), {} dropped (ring of {} frames full)",
        s.frames_written,
        s.path,
        s.bytes as f64 / (1024.0 * 1024.0),
        s.topics.len(),
        s.frames_dropped,
        s.ring_slots
    )
}
