//! [`StreamFeed`]: a recorded log replayed in bounded memory — frames are read, decoded and
//! grouped by a reader thread a window ahead of the graph, and only a few windows of images
//! are ever held.
//!
//! Contract:
//! - A reader thread (I/O side: it allocates, reads and decompresses) groups the log's
//!   messages into frames (as [`crate::replay::FrameGrouper`] does) and hands them over in
//!   windows of `window` frames through a [`Mailbox`] of depth one (which blocks where
//!   std's channel spins for a sender that is mid-send, see [`crate::mailbox`]: the driver
//!   may be a real-time thread above the reader). At most four windows of
//!   images exist at once (the one the graph reads, one retired a window ago, one in the
//!   mailbox, one being filled): resident memory does not grow with the log's length
//!   (what grows: the ego pose and ground truth of frames the evaluation still needs — the
//!   driver lets the source forget the rest, [`FrameSource::forget_truth_before`] — and a
//!   few bytes of timing per published frame).
//! - [`FrameSource::advance`] (called by the driver between runs, no frame in flight) makes
//!   the next window current; [`FrameSource::frame`] then serves its frames on the hot path
//!   with two atomic loads and a bounds check. The driver times `advance`: a window that was
//!   not read in time is waiting the graph did not cause, reported as input delay.
//! - Options a `ros2 bag play` user expects: a start offset and a duration (log time,
//!   relative to the log's first message), several logs played one after another (same rig,
//!   same period), and the whole list played `loops` times. Stamps keep increasing across
//!   logs and loops (each pass is shifted to start one period after the previous ended), so
//!   stateful stages see time move forward; the ego pose jumps back as after a
//!   relocalisation.
//! - Deterministic: frames depend only on the logs and options, never on timing.
//! - Errors at open (a log that cannot be read, a rig that differs between logs) are
//!   [`FeedError`]s; damage met while reading becomes input issues, as in [`Feed`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use redline_pipeline::camera::CameraSpec;
use redline_pipeline::sensors::{FrameSource, FrameTruth, SensorFrame};
use redline_pipeline::types::RoadMap;

use crate::feed::{log_frame, Feed, FeedError, LogRig};
use crate::log::{LogReader, ReadLimits, SensorMap};
use crate::mailbox::{Mailbox, Sender};
use crate::replay::{log_period, FrameGrouper};

/// How a [`StreamFeed`] reads its logs.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamOptions {
    /// Frames per window (the read-ahead), at least 1. Default 32 (about a second at 30 Hz).
    pub window: usize,
    /// Skip this much log time from each log's first message, ns.
    pub start_ns: u64,
    /// Play at most this much log time of each log, ns (None: to its end).
    pub duration_ns: Option<u64>,
    /// Play the list of logs this many times, at least 1.
    pub loops: u32,
    /// Stop after this many frames in all (None: all).
    pub max_frames: Option<usize>,
    /// When every camera of the rig sends `CompressedImage`, pass JPEG streams to the graph
    /// to decode (its `jpeg_decode` stage: decoding is measured as part of the frame) instead of
    /// decoding them while reading. Default false.
    pub jpeg_in_graph: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            window: 32,
            start_ns: 0,
            duration_ns: None,
            loops: 1,
            max_frames: None,
            jpeg_in_graph: false,
        }
    }
}

/// What the first log says about the rig (the others must match).
struct Head {
    cameras: Vec<CameraSpec>,
    width: usize,
    height: usize,
    map: Box<RoadMap>,
    period_ns: u64,
}

/// Frames `base..base + frames.len()`, with their truth and the issues found reading them.
struct Window {
    base: usize,
    frames: Vec<SensorFrame>,
    truth: Vec<FrameTruth>,
    issues: Vec<(u64, String)>,
}

/// What the reader thread sends.
enum Message {
    Window(Window),
    /// The end of the input, with the logs' own issues (damage met while reading).
    End(Vec<(u64, String)>),
}

/// A recorded log (or several) streamed in bounded memory (see the module docs).
pub struct StreamFeed {
    cameras: Vec<CameraSpec>,
    width: usize,
    height: usize,
    period_ns: u64,
    map: Box<RoadMap>,
    source: String,
    /// Bytes a camera's JPEG stream may have (0: frames carry decoded images).
    jpeg_capacity: usize,
    /// Upper bound on the frames until the end is read, then the exact count.
    count: AtomicUsize,
    /// The window the graph reads (null before the first `advance`).
    current: AtomicPtr<Window>,
    /// The previous window, freed one `advance` later (slack for a reader of the old one).
    retired: Mutex<Option<Box<Window>>>,
    mailbox: Arc<Mailbox<Message>>,
    /// Truth of frames `truth_base..`, for evaluation (older frames forgotten on request).
    truth: Mutex<(usize, VecDeque<FrameTruth>)>,
    issues: Mutex<Vec<(u64, String)>>,
    final_issues: OnceLock<Vec<(u64, String)>>,
    /// Windows handed over so far.
    windows: AtomicU64,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for StreamFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamFeed")
            .field("source", &self.source)
            .field("cameras", &self.cameras.len())
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl StreamFeed {
    /// Opens `logs` (played in order) and starts reading the first window. Every log must
    /// have the same rig (camera names and sizes) and frame period.
    pub fn open(
        logs: &[PathBuf],
        limits: ReadLimits,
        sensors: &SensorMap,
        opts: StreamOptions,
    ) -> Result<StreamFeed, FeedError> {
        let first = logs
            .first()
            .ok_or_else(|| FeedError::Empty("(no log given)".into()))?;
        let mut readers = Vec::new();
        let mut head: Option<Head> = None;
        let mut estimate = 0usize;
        let mut all_compressed = true;
        for path in logs {
            let LogRig {
                mut reader,
                cameras,
                width,
                height,
                map,
            } = LogRig::open(path, limits, sensors)?;
            let period = log_period(&mut reader)?;
            all_compressed &= reader.cameras_compressed();
            if let Some(h0) = &head {
                let same = cameras.len() == h0.cameras.len()
                    && cameras
                        .iter()
                        .zip(&h0.cameras)
                        .all(|(a, b)| a.name == b.name)
                    && (width, height, period) == (h0.width, h0.height, h0.period_ns);
                if !same {
                    return Err(FeedError::Mismatch(format!(
                        "{} has another rig or frame period than {} (cameras, image size and period must match to play them in one run)",
                        path.display(),
                        first.display()
                    )));
                }
            } else {
                head = Some(Head {
                    cameras,
                    width,
                    height,
                    map,
                    period_ns: period,
                });
            }
            let (t0, t1) = reader.time_range();
            let span = t1.saturating_sub(t0).saturating_sub(opts.start_ns);
            let span = opts.duration_ns.map_or(span, |d| span.min(d));
            estimate += (span / period.max(1)) as usize + 2;
            readers.push(reader);
        }
        let Some(Head {
            cameras,
            width,
            height,
            map,
            period_ns,
        }) = head
        else {
            return Err(FeedError::Empty(first.display().to_string()));
        };
        let mut estimate = estimate.saturating_mul(opts.loops.max(1) as usize);
        if let Some(m) = opts.max_frames {
            estimate = estimate.min(m);
        }
        let source = if logs.len() == 1 {
            first.display().to_string()
        } else {
            format!("{} and {} more logs", first.display(), logs.len() - 1)
        };
        let source = if opts.loops > 1 {
            format!("{source}, {} loops", opts.loops)
        } else {
            source
        };
        let jpeg_capacity = if opts.jpeg_in_graph && all_compressed {
            width * height * 3
        } else {
            0
        };
        for r in &mut readers {
            r.set_keep_jpeg(jpeg_capacity > 0);
        }
        let mailbox = Arc::new(Mailbox::new());
        let job = ReadJob {
            readers,
            cams: cameras.len(),
            image_len: width * height * 3,
            jpeg_capacity,
            period_ns,
            opts,
            tx: Sender(mailbox.clone()),
        };
        let handle = std::thread::Builder::new()
            .name("redline-log-reader".into())
            .spawn(move || job.run())
            .map_err(|e| FeedError::Mismatch(format!("cannot start the log reader thread: {e}")))?;
        Ok(StreamFeed {
            cameras,
            width,
            height,
            period_ns,
            map,
            source,
            jpeg_capacity,
            count: AtomicUsize::new(estimate),
            current: AtomicPtr::new(std::ptr::null_mut()),
            retired: Mutex::new(None),
            mailbox,
            truth: Mutex::new((0, VecDeque::new())),
            issues: Mutex::new(Vec::new()),
            final_issues: OnceLock::new(),
            windows: AtomicU64::new(0),
            reader: Mutex::new(Some(handle)),
        })
    }

    /// Reads the whole input into an in-memory [`Feed`] (for what needs every frame at
    /// once, such as sensor fault injection); memory grows with the input.
    pub fn into_feed(self) -> Result<Feed, FeedError> {
        if self.jpeg_capacity > 0 {
            return Err(FeedError::Mismatch(
                "a stream that passes JPEG to the graph cannot be held in memory: open it with jpeg_in_graph false".into(),
            ));
        }
        let mut frames = Vec::new();
        while let Some(range) = self.advance() {
            for k in range {
                if let Some(f) = self.frame(k) {
                    frames.push(f.clone());
                }
            }
        }
        if frames.is_empty() {
            return Err(FeedError::Empty(self.source.clone()));
        }
        Ok(Feed {
            cameras: self.cameras.clone(),
            width: self.width,
            height: self.height,
            period_ns: self.period_ns,
            map: self.map.clone(),
            frames,
            issues: self.issues().to_vec(),
            source: self.source.clone(),
        })
    }

    fn finish(&self, log_issues: Vec<(u64, String)>) {
        let mut all = log_issues;
        if let Ok(mut v) = self.issues.lock() {
            all.append(&mut v);
        }
        let n = self.truth.lock().map_or(0, |t| t.0 + t.1.len());
        self.count.store(n, Ordering::Release);
        let _ = self.final_issues.set(all);
    }
}

impl FrameSource for StreamFeed {
    fn cameras(&self) -> &[CameraSpec] {
        &self.cameras
    }
    fn image_size(&self) -> (usize, usize) {
        (self.width, self.height)
    }
    fn period_ns(&self) -> u64 {
        self.period_ns
    }
    fn map(&self) -> &RoadMap {
        &self.map
    }
    fn frame_count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        let p = self.current.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` came from `Box::into_raw` in `advance` and is freed only by `advance`
        // two windows later (or by drop). `advance` is called only between runs, when no
        // stage holds a reference from `frame` (the trait's contract), so the window outlives
        // every reference handed out while it is current, with one window of slack.
        let w = unsafe { &*p };
        k.checked_sub(w.base).and_then(|i| w.frames.get(i))
    }
    fn issues(&self) -> &[(u64, String)] {
        self.final_issues.get().map_or(&[], Vec::as_slice)
    }
    fn describe(&self) -> &str {
        &self.source
    }
    fn streaming(&self) -> bool {
        true
    }
    fn jpeg_capacity(&self) -> usize {
        self.jpeg_capacity
    }
    fn advance(&self) -> Option<std::ops::Range<usize>> {
        if self.final_issues.get().is_some() {
            return None;
        }
        match self.mailbox.take() {
            Some(Message::Window(mut w)) => {
                let range = w.base..w.base + w.frames.len();
                if let Ok(mut t) = self.truth.lock() {
                    t.1.extend(w.truth.drain(..));
                }
                if let Ok(mut i) = self.issues.lock() {
                    i.append(&mut w.issues);
                }
                let new = Box::into_raw(Box::new(w));
                let old = self.current.swap(new, Ordering::AcqRel);
                if !old.is_null() {
                    // SAFETY: `old` came from `Box::into_raw` above and is no longer current.
                    let old = unsafe { Box::from_raw(old) };
                    if let Ok(mut r) = self.retired.lock() {
                        *r = Some(old); // frees the window retired one advance ago
                    }
                }
                self.windows.fetch_add(1, Ordering::Relaxed);
                Some(range)
            }
            Some(Message::End(log_issues)) => {
                self.finish(log_issues);
                None
            }
            None => {
                self.finish(vec![(0, "log reader thread ended early".to_string())]);
                None
            }
        }
    }
    fn truth(&self, k: usize) -> Option<FrameTruth> {
        let t = self.truth.lock().ok()?;
        t.1.get(k.checked_sub(t.0)?).cloned()
    }
    fn forget_truth_before(&self, frame: usize) {
        if let Ok(mut t) = self.truth.lock() {
            while t.0 < frame && t.1.pop_front().is_some() {
                t.0 += 1;
            }
        }
    }
}

impl Drop for StreamFeed {
    fn drop(&mut self) {
        // Unblock and end the reader: closing the mailbox makes its waiting or next put
        // fail (and hands back the window it held, dropped here).
        drop(self.mailbox.close());
        if let Some(h) = self.reader.get_mut().ok().and_then(Option::take) {
            let _ = h.join();
        }
        let p = self.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: from `Box::into_raw` in `advance`; no run is in progress during drop.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// The reader thread's work.
struct ReadJob {
    readers: Vec<LogReader>,
    cams: usize,
    image_len: usize,
    jpeg_capacity: usize,
    period_ns: u64,
    opts: StreamOptions,
    /// Hangs the mailbox up when the job ends, however it ends.
    tx: Sender<Message>,
}

/// The frames being gathered into windows.
struct Producer<'a> {
    tx: &'a Mailbox<Message>,
    cams: usize,
    image_len: usize,
    jpeg_capacity: usize,
    period_ns: u64,
    window: usize,
    limit: usize,
    cur: Window,
    /// Number of the next frame.
    next: usize,
    /// Stamp of the last frame emitted (after shifting).
    last_stamp: Option<u64>,
    /// This pass's stamp shift, fixed at its first frame.
    pass_shift: Option<u64>,
}

/// Why emitting stopped.
enum Stop {
    /// The frame limit is reached.
    Limit,
    /// The feed was dropped.
    Gone,
}

impl Producer<'_> {
    /// Adds one frame; sends the window when full.
    fn emit(&mut self, sf: &crate::replay::SensorFrame) -> Result<(), Stop> {
        let shift = *self
            .pass_shift
            .get_or_insert_with(|| match self.last_stamp {
                // A pass that would start at or before the last frame is moved to one period
                // after it, so time keeps moving forward.
                Some(prev) if sf.stamp_ns <= prev => prev + self.period_ns - sf.stamp_ns,
                _ => 0,
            });
        let mut frame = log_frame(
            sf,
            self.cams,
            self.image_len,
            self.jpeg_capacity,
            self.next as u64,
            &mut self.cur.issues,
        );
        shift_stamps(&mut frame, shift);
        self.last_stamp = Some(frame.stamp_ns);
        self.cur.truth.push(FrameTruth {
            ego: frame.ego,
            gt: frame.gt.clone(),
        });
        self.cur.frames.push(frame);
        self.next += 1;
        if self.cur.frames.len() == self.window {
            self.send()?;
        }
        if self.next >= self.limit {
            return Err(Stop::Limit);
        }
        Ok(())
    }

    /// Sends the window gathered so far (if any) and starts the next.
    fn send(&mut self) -> Result<(), Stop> {
        if self.cur.frames.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(
            &mut self.cur,
            Window {
                base: self.next,
                frames: Vec::with_capacity(self.window),
                truth: Vec::with_capacity(self.window),
                issues: Vec::new(),
            },
        );
        self.tx.put(Message::Window(full)).map_err(|_| Stop::Gone)
    }
}

impl ReadJob {
    fn run(mut self) {
        let window = self.opts.window.max(1);
        let mut p = Producer {
            tx: &self.tx.0,
            cams: self.cams,
            image_len: self.image_len,
            jpeg_capacity: self.jpeg_capacity,
            period_ns: self.period_ns,
            window,
            limit: self.opts.max_frames.unwrap_or(usize::MAX),
            cur: Window {
                base: 0,
                frames: Vec::with_capacity(window),
                truth: Vec::with_capacity(window),
                issues: Vec::new(),
            },
            next: 0,
            last_stamp: None,
            pass_shift: None,
        };
        let outcome = (|| -> Result<(), Stop> {
            for _ in 0..self.opts.loops.max(1) {
                for reader in &mut self.readers {
                    let (t0, _) = reader.time_range();
                    let start = t0.saturating_add(self.opts.start_ns);
                    let end = self
                        .opts
                        .duration_ns
                        .map_or(u64::MAX, |d| start.saturating_add(d));
                    let names = reader.cameras().iter().map(|c| c.name.clone()).collect();
                    let mut g = FrameGrouper::with_names(names, self.period_ns);
                    p.pass_shift = None;
                    for m in reader.messages(&[], start, end) {
                        if let Some(sf) = g.push(m) {
                            p.emit(&sf)?;
                        }
                        while let Some(sf) = g.next_ready() {
                            p.emit(&sf)?;
                        }
                    }
                    while let Some(sf) = g.finish() {
                        p.emit(&sf)?;
                    }
                }
            }
            Ok(())
        })();
        if matches!(outcome, Err(Stop::Gone)) || p.send().is_err() {
            return;
        }
        let mut log_issues = Vec::new();
        for r in &self.readers {
            log_issues.extend(r.issues().iter().map(|i| {
                (
                    0,
                    format!("log {}: {:?}: {}", r.path().display(), i.kind, i.detail),
                )
            }));
        }
        let _ = self.tx.0.put(Message::End(log_issues));
    }
}

/// Moves every stamp of a frame `offset` ns later.
fn shift_stamps(f: &mut SensorFrame, offset: u64) {
    if offset == 0 {
        return;
    }
    f.stamp_ns += offset;
    f.camera_stamps_ns.iter_mut().for_each(|s| *s += offset);
    f.ego.stamp_ns += offset;
}
