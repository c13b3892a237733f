//! The publisher side of the recorder: copies what a frame published into a ring slot.
//!
//! Contract: [`RecordPublisher::publish`] runs on the thread that publishes the frame (hot
//! path). It claims a free slot of the preallocated ring, copies the frame's facts and its
//! published buffers (ego, detections, tracks, predictions, trajectory, plan summary,
//! segmentation: about 27 KiB, the one copy on this path, written here) into it and hands it
//! to the writer thread. When no slot is free it counts a drop and returns at once. It never
//! allocates, locks, blocks, performs I/O or panics; buffers it cannot find (by name) or
//! whose type or length differs are recorded as absent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redline_pipeline::run::SEG_CELLS;
use redline_pipeline::stages::buf;
use redline_pipeline::types::{
    Detection, EgoPose, PlanSummary, PredictedPath, TrackState, TrajPoint, MAX_DETECTIONS,
    MAX_TRACKS, PLAN_STEPS,
};
use redline_runtime::publish::Outputs;
use redline_runtime::stage::Element;
use redline_runtime::{FrameStatus, Published, Publisher};

use crate::ring::SlotRing;

/// Everything one published frame carries, as plain values (one ring slot).
#[derive(Clone, Copy, Debug)]
pub struct OutputRecord {
    /// Frame number.
    pub frame: u64,
    /// Release time, ns on the runtime's clock.
    pub release_ns: u64,
    /// Absolute deadline, ns on the same clock.
    pub deadline_ns: u64,
    /// Mode index the frame ran in (0 = nominal).
    pub mode: u8,
    /// Complete, degraded or a fallback.
    pub status: FrameStatus,
    /// Frame the outputs were computed for (None: nothing finished yet).
    pub held_from: Option<u64>,
    /// Release to publish, ns.
    pub latency_ns: u64,
    /// Ego pose the outputs were computed for (`None`: not published).
    pub ego: Option<EgoPose>,
    /// Detections, ego frame (`valid == 0` entries are empty).
    pub detections: [Detection; MAX_DETECTIONS],
    /// Tracks, world frame.
    pub tracks: [TrackState; MAX_TRACKS],
    /// Predicted paths, world frame.
    pub predictions: [PredictedPath; MAX_TRACKS],
    /// Planned trajectory, world frame (all zero when not published).
    pub trajectory: [TrajPoint; PLAN_STEPS],
    /// Whether `trajectory` holds a published trajectory.
    pub has_trajectory: bool,
    /// Planner summary.
    pub plan: PlanSummary,
    /// BEV segmentation, one class per cell, row-major by iy.
    pub segmentation: [u8; SEG_CELLS],
    /// Whether `segmentation` holds a published grid.
    pub has_segmentation: bool,
}

impl OutputRecord {
    /// An empty record (start-up).
    pub fn empty() -> Self {
        OutputRecord {
            frame: 0,
            release_ns: 0,
            deadline_ns: 0,
            mode: 0,
            status: FrameStatus::Complete,
            held_from: None,
            latency_ns: 0,
            ego: None,
            detections: [Detection::default(); MAX_DETECTIONS],
            tracks: [TrackState::default(); MAX_TRACKS],
            predictions: [PredictedPath::default(); MAX_TRACKS],
            trajectory: [TrajPoint::default(); PLAN_STEPS],
            has_trajectory: false,
            plan: PlanSummary::default(),
            segmentation: [0; SEG_CELLS],
            has_segmentation: false,
        }
    }

    /// Whether the frame missed its deadline (published the frame-level fallback).
    pub fn deadline_miss(&self) -> bool {
        matches!(self.status, FrameStatus::Fallback(_))
    }

    /// Overwrites this record with frame `p` (hot path: copies only).
    pub fn fill(&mut self, p: &Published<'_>) {
        self.frame = p.info.frame;
        self.release_ns = p.info.release_ns;
        self.deadline_ns = p.info.deadline_ns;
        self.mode = p.info.mode;
        self.status = p.status;
        self.held_from = p.held_from;
        self.latency_ns = p.latency_ns;
        let o = &p.outputs;
        self.ego = find::<EgoPose>(o, buf::EGO).and_then(|e| e.first().copied());
        copy_into(&mut self.detections, find(o, buf::DETECTIONS));
        copy_into(&mut self.tracks, find(o, buf::TRACKS));
        copy_into(&mut self.predictions, find(o, buf::PREDICTIONS));
        self.has_trajectory = copy_into(&mut self.trajectory, find(o, buf::TRAJECTORY));
        self.plan = find::<PlanSummary>(o, buf::PLAN)
            .and_then(|s| s.first().copied())
            .unwrap_or_default();
        self.has_segmentation = copy_into(&mut self.segmentation, find(o, buf::SEG));
    }
}

/// The published buffer named `name` as `T`s (None: not published, or another type).
fn find<'a, T: Element>(o: &Outputs<'a>, name: &str) -> Option<&'a [T]> {
    (0..o.len())
        .find(|&i| o.name(i) == Some(name))
        .and_then(|i| o.get::<T>(i).ok())
}

/// Copies `src` into `dst` when the lengths agree; otherwise clears `dst` to zeroes.
/// Returns whether it copied.
fn copy_into<T: Copy + Default>(dst: &mut [T], src: Option<&[T]>) -> bool {
    match src {
        Some(s) if s.len() == dst.len() => {
            dst.copy_from_slice(s);
            true
        }
        _ => {
            dst.fill(T::default());
            false
        }
    }
}

/// Counts shared by the publisher, the writer thread and the caller.
#[derive(Debug, Default)]
pub struct RecordCounters {
    /// Frames offered to the recorder.
    pub offered: AtomicU64,
    /// Frames not recorded because the ring was full.
    pub dropped: AtomicU64,
    /// Frames written to the file.
    pub written: AtomicU64,
}

/// The recorder's [`Publisher`]: one per recorder, used by the runtime's publishing
/// thread (see the module docs for what it does per frame).
pub struct RecordPublisher {
    ring: Arc<SlotRing<OutputRecord>>,
    counters: Arc<RecordCounters>,
}

impl std::fmt::Debug for RecordPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordPublisher")
            .field("ring", &self.ring)
            .field("counters", &self.counters)
            .finish()
    }
}

/// The consumer end of the ring: takes recorded frames in publish order. The recorder's
/// writer thread holds it; tests hold it to drain without encoding.
pub struct RecordReader {
    ring: Arc<SlotRing<OutputRecord>>,
    counters: Arc<RecordCounters>,
}

impl std::fmt::Debug for RecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordReader")
            .field("ring", &self.ring)
            .finish()
    }
}

impl RecordReader {
    /// Calls `f` with the oldest recorded frame not yet read, then frees its slot; false when
    /// there is none. Does not count it as written (the caller decides).
    pub fn next(&mut self, f: impl FnOnce(&OutputRecord)) -> bool {
        let Some(t) = self.ring.take() else {
            return false;
        };
        f(self.ring.read(&t));
        self.ring.release(t);
        true
    }

    /// The counts shared with the publisher.
    pub fn counters(&self) -> &RecordCounters {
        &self.counters
    }

    /// Ring slots.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

/// A ring of `slots` records (allocated here, at start-up) and its two ends.
pub fn record_ring(slots: usize) -> (RecordPublisher, RecordReader) {
    let ring = Arc::new(SlotRing::new(slots, OutputRecord::empty));
    let counters = Arc::new(RecordCounters::default());
    (
        RecordPublisher {
            ring: ring.clone(),
            counters: counters.clone(),
        },
        RecordReader { ring, counters },
    )
}

impl RecordPublisher {
    /// The counts so far.
    pub fn counters(&self) -> &RecordCounters {
        &self.counters
    }

    pub(crate) fn shared_counters(&self) -> Arc<RecordCounters> {
        self.counters.clone()
    }
}

impl Publisher for RecordPublisher {
    fn publish(&mut self, p: &Published<'_>) {
        self.counters.offered.fetch_add(1, Ordering::Relaxed);
        let Some(mut claim) = self.ring.claim() else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.ring.slot(&mut claim).fill(p);
        self.ring.commit(claim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_the_size_the_docs_say() {
        let kib = std::mem::size_of::<OutputRecord>() as f64 / 1024.0;
        assert!((26.0..28.0).contains(&kib), "{kib:.1} KiB: update the docs");
    }
}
