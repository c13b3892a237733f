//! Camera images decoded in parallel while a log is read: one thread per camera topic
//! (raw `Image`, `CompressedImage`, or a video message: `CompressedVideo`, `FFMPEGPacket`,
//! `h264_msgs/msg/Packet`), fed ahead of the
//! reader by [`super::merge::Messages`]' look-ahead, so the images of several cameras decode
//! (raw conversion, JPEG/PNG, H.264/H.265 video, resize) on as many cores while the reader
//! goes on with the rest of the log.
//!
//! Promises:
//! - The same payloads and issues, in the same order, as decoding each message in log order
//!   on the reader's own thread: a topic's messages are decoded in order by the one thread
//!   that owns its state (the [`VideoStream`] of a video camera), and each result is taken
//!   back by the message that brought it (matched by the message's key), in log order. How
//!   many threads run, and how far ahead they are, changes when an image is ready, never
//!   what it is.
//!   (What the look-ahead changes is when blocks are read: an issue of a damaged chunk may
//!   be recorded before the decoding issues of messages before it, and a read stopped early
//!   may have met one more chunk.)
//! - A topic whose thread cannot be started (the OS refuses a thread) decodes on the
//!   reader's thread instead: slower, the same images.
//! - [`CameraThreads::clear`] (each read starts with it) ends every thread and drops what
//!   they decoded ahead: a read's video streams start afresh.
//!
//! Cost: one thread per camera topic of the read (idle between images); at most
//! [`CameraThreads::AHEAD_PER_STREAM`] messages per topic in flight, so about that many
//! decoded images per camera held beyond the reader's own. Never: blocks except to wait for
//! the one image the reader needs next, or panics (a video decoder's panic is caught inside
//! [`VideoStream`]; a thread that died anyway is an issue on that message and is replaced).

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::decode::{decode_image, CameraTopic};
use super::{LogIssueKind, Payload};
use crate::video::VideoStream;

/// What one camera message gives: its stamp and payload, or the issue that skips it.
pub(super) type ImageResult = Result<(u64, Payload), (LogIssueKind, String)>;

/// A message's key (log time, block, position): matches a result to its message.
type Key = (u64, usize, usize);

/// One message for a topic's thread: its key and its CDR bytes.
struct Job {
    key: Key,
    cdr: Vec<u8>,
}

/// A topic's decoding state: how its images decode and its video stream.
struct Decoder {
    topic: CameraTopic,
    video: VideoStream,
}

impl Decoder {
    fn new(topic: CameraTopic) -> Decoder {
        Decoder {
            video: VideoStream::with_max_side(topic.max_image_side),
            topic,
        }
    }

    fn decode(&mut self, job: &Job) -> ImageResult {
        decode_image(&self.topic, &mut self.video, job.key.0, &job.cdr)
    }
}

/// A camera topic's decoding: on its own thread, or (when none could be started) here, each
/// result computed when its message is sent.
enum Lane {
    Thread {
        jobs: Option<mpsc::Sender<Job>>,
        results: mpsc::Receiver<(Key, ImageResult)>,
        thread: Option<JoinHandle<()>>,
    },
    Inline {
        decoder: Box<Decoder>,
        results: VecDeque<(Key, ImageResult)>,
    },
}

impl Lane {
    /// A thread for `topic`, or the inline lane when the OS refuses one.
    fn start(topic: CameraTopic) -> Lane {
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (res_tx, res_rx) = mpsc::channel();
        // Named by the camera, not the topic: a log's topic may hold a NUL byte, which a
        // thread name cannot (`Builder::spawn` would panic).
        let name = format!("redline cam {}", topic.cam);
        let mut decoder = Decoder::new(topic.clone());
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            for job in job_rx {
                let result = decoder.decode(&job);
                if res_tx.send((job.key, result)).is_err() {
                    break;
                }
            }
        });
        match spawned {
            Ok(thread) => Lane::Thread {
                jobs: Some(job_tx),
                results: res_rx,
                thread: Some(thread),
            },
            // (The closure, and the decoder in it, went with the refusal: a fresh one.)
            Err(_) => Lane::Inline {
                decoder: Box::new(Decoder::new(topic)),
                results: VecDeque::new(),
            },
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Lane::Thread { jobs, thread, .. } = self {
            // Closing the queue ends the thread's loop after the unit in hand.
            jobs.take();
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// One topic: its lane and the keys of the messages sent ahead, oldest first.
struct Stream {
    lane: Lane,
    ahead: VecDeque<Key>,
}

/// The camera topics of one read, by channel id.
#[derive(Default)]
pub(crate) struct CameraThreads {
    streams: BTreeMap<u16, Stream>,
}

impl std::fmt::Debug for CameraThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CameraThreads")
            .field("streams", &self.streams.len())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl CameraThreads {
    /// Messages a topic may have in flight ahead of the reader: enough to keep its thread
    /// busy while the reader catches up, few enough to hold few pictures.
    pub(super) const AHEAD_PER_STREAM: usize = 2;

    /// Ends every topic's thread (joined; what they decoded ahead dropped).
    pub(super) fn clear(&mut self) {
        self.streams.clear();
    }

    /// Messages sent ahead and not yet taken back, over all topics.
    pub(super) fn in_flight(&self) -> usize {
        self.streams.values().map(|s| s.ahead.len()).sum()
    }

    /// Camera topics of this read so far.
    pub(super) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Whether `channel`'s thread has started in this read.
    pub(super) fn has(&self, channel: u16) -> bool {
        self.streams.contains_key(&channel)
    }

    /// Starts `channel`'s thread, decoding as `topic` says (replacing one already there).
    pub(super) fn start(&mut self, channel: u16, topic: CameraTopic) {
        let stream = Stream {
            lane: Lane::start(topic),
            ahead: VecDeque::new(),
        };
        self.streams.insert(channel, stream);
    }

    /// Sends the message `key` of channel `channel` (CDR bytes `cdr`) to its topic's
    /// thread ([`CameraThreads::start`]; without one the message is dropped and `take`
    /// reports it).
    pub(super) fn send(&mut self, channel: u16, key: Key, cdr: Vec<u8>) {
        let Some(stream) = self.streams.get_mut(&channel) else {
            return;
        };
        stream.ahead.push_back(key);
        let job = Job { key, cdr };
        match &mut stream.lane {
            Lane::Thread { jobs, .. } => {
                // A thread that is gone (it cannot be, short of a bug) drops the unit:
                // `take` then finds its results closed and reports it.
                if let Some(jobs) = jobs {
                    let _ = jobs.send(job);
                }
            }
            Lane::Inline { decoder, results } => results.push_back((key, decoder.decode(&job))),
        }
    }

    /// Whether message `key` of `channel` was sent ahead and its result not taken yet.
    pub(super) fn was_sent(&self, channel: u16, key: Key) -> bool {
        self.streams
            .get(&channel)
            .is_some_and(|s| s.ahead.contains(&key))
    }

    /// The result of message `key` of `channel`, sent before with [`CameraThreads::send`]:
    /// waits for its topic's thread when it is not decoded yet.
    pub(super) fn take(&mut self, channel: u16, key: Key) -> ImageResult {
        let lost = || {
            Err((
                LogIssueKind::UndecodableMessage,
                format!(
                    "message at {} ns: its camera's decoding thread stopped; skipped",
                    key.0
                ),
            ))
        };
        let Some(stream) = self.streams.get_mut(&channel) else {
            return lost();
        };
        // Results come back in the order their units were sent; one sent before this one
        // and never taken (its message was not decoded after all) is dropped here.
        while let Some(front) = stream.ahead.pop_front() {
            let result = match &mut stream.lane {
                Lane::Thread { results, .. } => results.recv().ok(),
                Lane::Inline { results, .. } => results.pop_front(),
            };
            match result {
                Some((k, r)) if k == front => {
                    if front == key {
                        return r;
                    }
                }
                _ => {
                    // The thread died (a bug): a fresh one for the next messages (a video
                    // stream then waits for a keyframe).
                    self.streams.remove(&channel);
                    return lost();
                }
            }
        }
        lost()
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::Kind;
    use super::*;
    use crate::msgs::{CompressedVideo, RosMessage, Time};

    /// The three flat H.265 pictures of `video.rs`' fixture as `CompressedVideo` messages.
    fn messages() -> Vec<Vec<u8>> {
        let stream = include_bytes!("../video_fixtures/flat_64x48.h265");
        (crate::fuzzing::h265_access_units(stream)
            .into_iter()
            .enumerate())
        .map(|(k, au)| {
            CompressedVideo {
                timestamp: Time {
                    sec: 1,
                    nanosec: k as u32,
                },
                frame_id: "front".into(),
                data: au,
                format: "h265".into(),
            }
            .to_cdr()
        })
        .collect()
    }

    fn topic() -> CameraTopic {
        CameraTopic {
            topic: "/front/video".into(),
            schema: CompressedVideo::SCHEMA_NAME.into(),
            kind: Kind::CompressedVideo,
            cam: 0,
            want: (64, 48),
            resizer: None,
            max_image_side: 8192,
            keep_jpeg: false,
        }
    }

    /// What decoding on the caller's thread gives, message by message.
    fn inline(msgs: &[Vec<u8>]) -> Vec<ImageResult> {
        let mut d = Decoder::new(topic());
        let job = |k: usize, cdr: &Vec<u8>| Job {
            key: (k as u64, 0, k),
            cdr: cdr.clone(),
        };
        (msgs.iter().enumerate())
            .map(|(k, m)| d.decode(&job(k, m)))
            .collect()
    }

    /// Results compared by what they hold (payloads have no `PartialEq`).
    fn same(a: &ImageResult, b: &ImageResult) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    #[test]
    fn threads_give_what_the_readers_own_thread_gives() {
        let msgs = messages();
        let want = inline(&msgs);
        assert!(matches!(
            &want[2],
            Ok((
                1_000_000_002,
                Payload::Image {
                    cam: 0,
                    image: Ok(_)
                }
            ))
        ));
        let key = |k: usize| (k as u64, 0, k);
        let mut t = CameraThreads::default();
        // All three sent ahead, then taken in order.
        t.start(7, topic());
        for (k, m) in msgs.iter().enumerate() {
            t.send(7, key(k), m.clone());
        }
        assert_eq!((t.streams(), t.in_flight()), (1, 3));
        assert!(t.was_sent(7, key(1)) && !t.was_sent(8, key(1)));
        for (k, want) in want.iter().enumerate() {
            assert!(same(&t.take(7, key(k)), want), "message {k}");
        }
        assert_eq!(t.in_flight(), 0);
        // A message sent but never taken is dropped when a later one is taken; the
        // stream's state still went through it.
        t.clear();
        t.start(7, topic());
        for (k, m) in msgs.iter().enumerate() {
            t.send(7, key(k), m.clone());
        }
        assert!(same(&t.take(7, key(2)), &want[2]));
        // No thread for the channel: the message is reported, not lost silently.
        t.send(9, key(0), msgs[0].clone());
        let e = t.take(9, key(0)).unwrap_err();
        assert!(e.1.contains("decoding thread stopped"), "{e:?}");
        // A topic name with a NUL byte (a hostile log) still gets its thread.
        let mut nul = CameraThreads::default();
        nul.start(
            1,
            CameraTopic {
                topic: "/front\0/video".into(),
                ..topic()
            },
        );
        nul.send(1, key(0), msgs[0].clone());
        assert!(same(&nul.take(1, key(0)), &want[0]));
        // Ending a read with messages in flight joins the threads.
        t.send(7, key(3), msgs[0].clone());
        t.clear();
        assert_eq!(t.streams(), 0);
    }
}
