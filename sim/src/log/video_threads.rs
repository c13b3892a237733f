//! Video cameras decoded in parallel while a log is read: one thread per camera stream
//! (`CompressedVideo` or `FFMPEGPacket` topic), fed ahead of the reader by
//! [`super::merge::Messages`]' look-ahead, so the streams of several cameras decode on as many
//! cores while the reader goes on with the rest of the log.
//!
//! Promises:
//! - The same pictures and issues, in the same order, as decoding each stream in log order on
//!   the reader's own thread: a stream's access units are decoded in order by the one thread
//!   that owns its [`VideoStream`], and each result is taken back by the message that
//!   brought it (matched by the message's key), in log order. How many threads run, and how
//!   far ahead they are, changes when a picture is ready, never what it is.
//! - A stream whose thread cannot be started (the OS refuses a thread) decodes on the
//!   reader's thread instead: slower, the same pictures.
//! - [`VideoThreads::clear`] (each read starts with it) ends every thread and drops what they
//!   decoded ahead: a read's streams start afresh.
//!
//! Cost: one thread per camera stream of the read (idle between pictures); at most
//! [`VideoThreads::AHEAD_PER_STREAM`] access units per stream in flight, so about that many
//! RGB pictures per camera held beyond the reader's own. Never: blocks except to wait for
//! the one picture the reader needs next, or panics (a decoder panic is caught inside
//! [`VideoStream`]; a thread that died anyway is an issue on that picture and is replaced).

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::decode::video_message;
use crate::msgs::ImageIssue;
use crate::types::RgbImage;
use crate::video::VideoStream;

/// What one video message gives: its picture's stamp and its picture (`None`: the unit holds
/// no picture, parameter sets alone), or why the message cannot be decoded at all.
pub(super) type VideoResult = Result<(u64, Option<Result<RgbImage, ImageIssue>>), String>;

/// One message's access unit for a stream: the message's key (to match its result), its
/// schema (`CompressedVideo` or `FFMPEGPacket`) and its CDR bytes.
struct Job {
    key: (u64, usize, usize),
    schema: String,
    cdr: Vec<u8>,
}

/// Decodes one video message with `stream`.
fn decode(stream: &mut VideoStream, schema: &str, cdr: &[u8]) -> VideoResult {
    let (stamp, format, data) = video_message(schema, cdr)?;
    Ok((stamp, stream.picture(&format, &data).transpose()))
}

/// A camera stream's decoding: on its own thread, or (when none could be started) here.
enum Lane {
    Thread {
        jobs: Option<mpsc::Sender<Job>>,
        results: mpsc::Receiver<((u64, usize, usize), VideoResult)>,
        thread: Option<JoinHandle<()>>,
    },
    Inline(Box<VideoStream>),
}

impl Lane {
    /// A thread for the stream of `topic`, or the inline lane when the OS refuses one.
    fn start(topic: &str) -> Lane {
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (res_tx, res_rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("redline video {topic}"))
            .spawn(move || {
                let mut stream = VideoStream::default();
                for job in job_rx {
                    let result = decode(&mut stream, &job.schema, &job.cdr);
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
            Err(_) => Lane::Inline(Box::default()),
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

/// One stream: its lane and the keys of the units sent ahead, oldest first (inline: their
/// results, computed when sent).
struct Stream {
    lane: Lane,
    ahead: VecDeque<(u64, usize, usize)>,
    inline_results: VecDeque<((u64, usize, usize), VideoResult)>,
}

/// The video camera streams of one read, by channel id.
#[derive(Default)]
pub(crate) struct VideoThreads {
    streams: BTreeMap<u16, Stream>,
}

impl std::fmt::Debug for VideoThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoThreads")
            .field("streams", &self.streams.len())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl VideoThreads {
    /// Access units a stream may have in flight ahead of the reader: enough to keep its
    /// thread busy while the reader catches up, few enough to hold few pictures.
    pub(super) const AHEAD_PER_STREAM: usize = 2;

    /// Ends every stream (their threads joined, what they decoded ahead dropped).
    pub(super) fn clear(&mut self) {
        self.streams.clear();
    }

    /// Units sent ahead and not yet taken back, over all streams.
    pub(super) fn in_flight(&self) -> usize {
        self.streams.values().map(|s| s.ahead.len()).sum()
    }

    /// Streams of this read so far.
    pub(super) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Sends the message `key` of channel `channel` (topic `topic`, `schema`, CDR bytes
    /// `cdr`) to its stream's thread, which starts on the stream's first unit.
    pub(super) fn send(
        &mut self,
        channel: u16,
        topic: &str,
        key: (u64, usize, usize),
        schema: &str,
        cdr: Vec<u8>,
    ) {
        let stream = self.streams.entry(channel).or_insert_with(|| Stream {
            lane: Lane::start(topic),
            ahead: VecDeque::new(),
            inline_results: VecDeque::new(),
        });
        stream.ahead.push_back(key);
        let job = Job {
            key,
            schema: schema.to_string(),
            cdr,
        };
        match &mut stream.lane {
            Lane::Thread { jobs, .. } => {
                // A thread that is gone (it cannot be, short of a bug) drops the unit:
                // `take` then finds its results closed and reports it.
                if let Some(jobs) = jobs {
                    let _ = jobs.send(job);
                }
            }
            Lane::Inline(video) => {
                let result = decode(video, &job.schema, &job.cdr);
                stream.inline_results.push_back((key, result));
            }
        }
    }

    /// Whether message `key` of `channel` was sent ahead and its result not taken yet.
    pub(super) fn was_sent(&self, channel: u16, key: (u64, usize, usize)) -> bool {
        self.streams
            .get(&channel)
            .is_some_and(|s| s.ahead.contains(&key))
    }

    /// The result of message `key` of `channel`, sent before with [`VideoThreads::send`]:
    /// waits for its stream's thread when it is not decoded yet.
    pub(super) fn take(&mut self, channel: u16, key: (u64, usize, usize)) -> VideoResult {
        let lost = || Err("its camera's video decoding thread stopped".to_string());
        let Some(stream) = self.streams.get_mut(&channel) else {
            return lost();
        };
        // Results come back in the order their units were sent; one sent before this one
        // and never taken (its message was not decoded after all) is dropped here.
        while let Some(front) = stream.ahead.pop_front() {
            let result = match &mut stream.lane {
                Lane::Thread { results, .. } => results.recv().ok(),
                Lane::Inline(_) => stream.inline_results.pop_front(),
            };
            match result {
                Some((k, r)) if k == front => {
                    if front == key {
                        return r;
                    }
                }
                _ => {
                    // The thread died (a bug): a fresh stream for the next units, which
                    // waits for a keyframe.
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

    /// What decoding on the caller's thread gives, message by message.
    fn inline(msgs: &[Vec<u8>]) -> Vec<VideoResult> {
        let mut stream = VideoStream::default();
        let schema = CompressedVideo::SCHEMA_NAME;
        msgs.iter()
            .map(|m| decode(&mut stream, schema, m))
            .collect()
    }

    #[test]
    fn threads_give_what_the_readers_own_thread_gives() {
        let msgs = messages();
        let want = inline(&msgs);
        assert!(matches!(&want[2], Ok((1_000_000_002, Some(Ok(_))))));
        let schema = CompressedVideo::SCHEMA_NAME;
        let key = |k: usize| (k as u64, 0, k);
        let mut t = VideoThreads::default();
        // All three sent ahead, then taken in order.
        for (k, m) in msgs.iter().enumerate() {
            t.send(7, "/front/video", key(k), schema, m.clone());
        }
        assert_eq!((t.streams(), t.in_flight()), (1, 3));
        assert!(t.was_sent(7, key(1)) && !t.was_sent(8, key(1)));
        for (k, want) in want.iter().enumerate() {
            assert_eq!(&t.take(7, key(k)), want, "message {k}");
        }
        assert_eq!(t.in_flight(), 0);
        // A unit sent but never taken is dropped when a later one is taken; the stream's
        // state still went through it.
        t.clear();
        for (k, m) in msgs.iter().enumerate() {
            t.send(7, "/front/video", key(k), schema, m.clone());
        }
        assert_eq!(t.take(7, key(2)), want[2]);
        // Nothing sent: the stream's thread is not there to answer.
        assert!(t.take(9, key(0)).is_err());
        // Ending a read with units in flight joins the threads.
        t.send(7, "/front/video", key(3), schema, msgs[0].clone());
        t.clear();
        assert_eq!(t.streams(), 0);
    }
}
