//! The log-time merge of a log's blocks: [`RawIter`] reads the selected blocks (MCAP chunks,
//! loose messages, `.db3` leaf pages) in order of their start time and releases their raw
//! messages in log-time order (ties: block order, then position), holding at most
//! `max_buffered_bytes` of overlapping blocks; [`Messages`] decodes what it releases.
//!
//! Cost: the messages of the blocks that overlap in time, held until released. Never
//! panics on bad data (a block that cannot be read is an issue on the reader).

use std::collections::BTreeSet;

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

/// The iterator returned by [`LogReader::messages`].
pub(super) struct Messages<'r> {
    pub(super) raw: RawIter<'r>,
}

impl Iterator for Messages<'_> {
    type Item = LogMessage;

    fn next(&mut self) -> Option<LogMessage> {
        loop {
            let raw = self.raw.next_raw()?;
            if let Some(m) = self.raw.reader.decode(raw) {
                return Some(m);
            }
        }
    }
}
