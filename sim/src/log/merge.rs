//! The log-time merge of a log's blocks: [`RawIter`] reads the selected blocks (MCAP chunks,
//! loose messages, `.db3` leaf pages) in order of their start time and releases their raw
//! messages in log-time order (ties: block order, then position), holding at most
//! `max_buffered_bytes` of overlapping blocks; [`Messages`] decodes what it releases.
//!
//! Cost: the messages of the blocks that overlap in time, held until released. Never
//! panics on bad data (a block that cannot be read is an issue on the reader).

use std::collections::{BTreeSet, VecDeque};

use super::reader::{LogReader, RawMsg};
use super::{LogIssueKind, LogMessage};

/// Merges raw messages of the selected blocks in log-time order.
pub(super) struct RawIter<'r> {
    pub(super) reader: &'r mut LogReader,
    wanted: BTreeSet<u16>,
    start: u64,
    end: u64,
    order: Vec<usize>,
    next: usize,
    /// Sorted by key, descending: `pop` yields the earliest.
    pending: Vec<RawMsg>,
    /// Message bytes in `pending`.
    pending_bytes: u64,
}

impl<'r> RawIter<'r> {
    pub(super) fn new(
        reader: &'r mut LogReader,
        wanted: BTreeSet<u16>,
        start: u64,
        end: u64,
    ) -> Self {
        let order = reader
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                !b.skip
                    && b.end_ns >= start
                    && b.start_ns < end
                    && match &b.channels {
                        Some(c) => c.iter().any(|id| wanted.contains(id)),
                        None => true,
                    }
            })
            .map(|(i, _)| i)
            .collect();
        RawIter {
            reader,
            wanted,
            start,
            end,
            order,
            next: 0,
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    pub(super) fn next_raw(&mut self) -> Option<RawMsg> {
        loop {
            while self.next < self.order.len() {
                let bi = self.order[self.next];
                let earliest = self.pending.last().map(|m| m.key.0);
                if earliest.is_some_and(|t| self.reader.blocks[bi].start_ns > t) {
                    break;
                }
                let limit = self.reader.limits.max_buffered_bytes;
                if self.pending_bytes >= limit {
                    // Chunks overlapping in time hold more than the limit: release what is
                    // held before reading on, at the cost of log-time order.
                    let at = self.reader.blocks[bi].offset;
                    self.reader.issue(
                        LogIssueKind::OverLimit,
                        format!("chunks overlapping in time hold more than {limit} bytes of messages (ReadLimits::max_buffered_bytes, `max_buffered_bytes` in the config's [log] table) before the chunk at byte {at}; messages from there on may come out of log-time order"),
                    );
                    break;
                }
                let before = self.pending.len();
                self.reader.load_block(
                    bi,
                    self.next,
                    &self.wanted,
                    self.start,
                    self.end,
                    &mut self.pending,
                );
                self.next += 1;
                let added: u64 = self.pending[before..]
                    .iter()
                    .map(|m| m.data.len() as u64)
                    .sum();
                self.pending_bytes += added;
                if self.pending.len() != before {
                    self.pending
                        .sort_unstable_by_key(|m| std::cmp::Reverse(m.key));
                }
            }
            if let Some(m) = self.pending.pop() {
                self.pending_bytes -= m.data.len() as u64;
                return Some(m);
            }
            if self.next >= self.order.len() {
                return None;
            }
        }
    }
}

/// The iterator returned by [`LogReader::messages`]. It reads raw messages ahead of the one
/// it decodes, so that each camera's next images are already decoding on the camera's thread
/// (`camera_threads`) when their turn comes: at most `CameraThreads::AHEAD_PER_STREAM`
/// images per camera topic, [`Messages::AHEAD_MESSAGES`] messages and
/// [`Messages::AHEAD_BYTES`] bytes ahead. The messages come out in the same order, decoded
/// the same way.
pub(super) struct Messages<'r> {
    raw: RawIter<'r>,
    /// Raw messages read ahead, in log-time order (a camera one's bytes already sent).
    ahead: VecDeque<RawMsg>,
    /// Bytes held in `ahead`.
    ahead_bytes: usize,
    /// The raw iterator is exhausted.
    done: bool,
}

impl<'r> Messages<'r> {
    /// Messages read ahead at most (a log's fast topics, e.g. an IMU, between two pictures).
    const AHEAD_MESSAGES: usize = 1024;
    /// Bytes of raw messages held ahead at most.
    const AHEAD_BYTES: usize = 64 << 20;

    pub(super) fn new(raw: RawIter<'r>) -> Self {
        Messages {
            raw,
            ahead: VecDeque::new(),
            ahead_bytes: 0,
            done: false,
        }
    }

    /// Reads ahead: at least the next message, and more while camera threads can take images
    /// (a read without cameras reads one message at a time, as it decodes them).
    fn read_ahead(&mut self) {
        while !self.done {
            let threads = &self.raw.reader.camera_threads;
            let room = threads.in_flight()
                < threads.streams() * super::camera_threads::CameraThreads::AHEAD_PER_STREAM;
            let more = room
                && self.ahead.len() < Self::AHEAD_MESSAGES
                && self.ahead_bytes < Self::AHEAD_BYTES;
            if !self.ahead.is_empty() && !more {
                return;
            }
            let Some(mut raw) = self.raw.next_raw() else {
                self.done = true;
                return;
            };
            if self.raw.reader.camera_channel(raw.channel) {
                self.raw.reader.send_camera_ahead(&mut raw);
            }
            self.ahead_bytes += raw.data.len();
            self.ahead.push_back(raw);
        }
    }
}

impl Iterator for Messages<'_> {
    type Item = LogMessage;

    fn next(&mut self) -> Option<LogMessage> {
        loop {
            self.read_ahead();
            let raw = self.ahead.pop_front()?;
            self.ahead_bytes -= raw.data.len();
            if let Some(m) = self.raw.reader.decode(raw) {
                return Some(m);
            }
        }
    }
}
