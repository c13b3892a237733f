//! Publishing: how a frame's outputs leave the runtime.
//!
//! Every released frame is published exactly once, in frame order, on the scheduler
//! thread, with a [`FrameStatus`]:
//!
//! - `Complete`: every stage ran; the outputs are this frame's.
//! - `Degraded`: the frame finished in time but some stage ran its fallback (disabled by
//!   the mode, failed, or lost); the outputs are this frame's.
//! - `Fallback`: the frame could not finish in time (abandoned at its guard time, no free
//!   slot, late in modeled time, or no live lane left to run it). The outputs are the *held* outputs of the last frame
//!   that did finish (`held_from`), the runtime's frame-level fallback: a consumer such as
//!   a controller keeps following the last valid plan, knowing it is stale. They are
//!   published before the frame's deadline.
//!
//! The held copy is made at every normal publish: one `memcpy` of each published buffer
//! into a separate, preallocated region (the one copy on this path, written here). The
//! publisher gets views that are valid only during the call; it must not block.

use std::ptr::NonNull;

use crate::stage::{Element, FrameInfo, PortError, PortView};

/// Why a frame published its fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    /// The frame was not finished at its guard time (deadline minus publish margin).
    DeadlineGuard,
    /// No frame slot was free at release time: the frame never ran.
    NoFreeSlot,
    /// With modeled timing, the frame would have finished after its deadline.
    ModeledLate,
    /// Every lane was lost (each one's stage written off as hung), so no stage could run:
    /// the frame was abandoned or found no free slot for that reason.
    NoLiveLane,
}

/// What a published frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameStatus {
    /// All stages ran.
    Complete,
    /// Finished in time with some stage on its fallback.
    Degraded,
    /// The frame-level fallback: held outputs of an earlier frame.
    Fallback(FallbackReason),
}

impl FrameStatus {
    /// Short label, for tables and hashes.
    pub fn label(&self) -> &'static str {
        match self {
            FrameStatus::Complete => "complete",
            FrameStatus::Degraded => "degraded",
            FrameStatus::Fallback(FallbackReason::DeadlineGuard) => "fallback:deadline",
            FrameStatus::Fallback(FallbackReason::NoFreeSlot) => "fallback:no-slot",
            FrameStatus::Fallback(FallbackReason::ModeledLate) => "fallback:modeled-late",
            FrameStatus::Fallback(FallbackReason::NoLiveLane) => "fallback:no-live-lane",
        }
    }
}

/// Read-only views of the published buffers.
#[derive(Clone, Copy)]
pub struct Outputs<'a> {
    base: NonNull<u8>,
    views: &'a [PortView],
    names: &'a [String],
}

impl std::fmt::Debug for Outputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outputs")
            .field("names", &self.names)
            .finish()
    }
}

impl<'a> Outputs<'a> {
    /// # Safety
    /// `base` with `views` must describe initialised memory that nobody writes during `'a`.
    pub(crate) unsafe fn new(
        base: NonNull<u8>,
        views: &'a [PortView],
        names: &'a [String],
    ) -> Self {
        Outputs { base, views, names }
    }

    /// Number of published buffers.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// True when nothing is published.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// Name of published buffer `i`.
    pub fn name(&self, i: usize) -> Option<&'a str> {
        self.names.get(i).map(String::as_str)
    }

    /// Published buffer `i` as typed elements.
    pub fn get<T: Element>(&self, i: usize) -> Result<&'a [T], PortError> {
        let v = *self.views.get(i).ok_or(PortError::NoSuchPort {
            dir: "published",
            index: i,
            count: self.views.len(),
        })?;
        if v.elem.id != std::any::TypeId::of::<T>() {
            return Err(PortError::TypeMismatch {
                dir: "published",
                index: i,
                declared: v.elem.name,
                asked: std::any::type_name::<T>(),
            });
        }
        // SAFETY: `new`'s contract; offsets are 64-byte aligned inside a page-aligned region.
        Ok(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(v.offset).cast::<T>(), v.len)
        })
    }

    /// Published buffer `i` as bytes.
    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        let v = self.views.get(i)?;
        // SAFETY: as in `get`; u8 has alignment 1.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(v.offset), v.len * v.elem.size)
        })
    }
}

/// One published frame.
#[derive(Clone, Copy, Debug)]
pub struct Published<'a> {
    /// The frame.
    pub info: FrameInfo,
    /// What the outputs are.
    pub status: FrameStatus,
    /// Frame the outputs were computed for (differs from `info.frame` for fallbacks;
    /// None when no frame has finished yet and the outputs are all zero).
    pub held_from: Option<u64>,
    /// Release to publish, wall clock, ns.
    pub latency_ns: u64,
    /// The published buffers.
    pub outputs: Outputs<'a>,
}

/// Receives every frame, in order, on the scheduler thread. Must not block or allocate.
pub trait Publisher {
    /// One frame.
    fn publish(&mut self, frame: &Published<'_>);
}

impl<F: FnMut(&Published<'_>)> Publisher for F {
    fn publish(&mut self, frame: &Published<'_>) {
        self(frame)
    }
}

/// A publisher that folds every frame into a 64-bit FNV-1a hash: status, held-from frame
/// and output bytes. The determinism tests compare these.
#[derive(Clone, Copy, Debug)]
pub struct HashPublisher {
    /// Running hash.
    pub hash: u64,
    /// Frames seen.
    pub frames: u64,
    /// Frames published as fallbacks.
    pub fallbacks: u64,
}

/// The FNV-1a offset basis: the hash of no bytes.
pub const FNV1A_START: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a of `bytes`, continuing from `hash` ([`FNV1A_START`] for a new hash). The
/// hash of the output hashes ([`HashPublisher`]) and of model files (engine cache keys).
pub fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Default for HashPublisher {
    fn default() -> Self {
        HashPublisher {
            hash: FNV1A_START,
            frames: 0,
            fallbacks: 0,
        }
    }
}

impl HashPublisher {
    fn eat(&mut self, bytes: &[u8]) {
        self.hash = fnv1a(self.hash, bytes);
    }
}

impl HashPublisher {
    /// [`Publisher::publish`] over only the outputs whose buffer name `include` accepts
    /// (frame, status and held-from are always hashed). A graph that publishes an extra
    /// buffer for evaluation keeps the hash of its other outputs this way. No allocation.
    pub fn publish_filtered(&mut self, p: &Published<'_>, include: impl Fn(&str) -> bool) {
        self.publish_where(p, |name| name.is_some_and(&include));
    }

    /// Hashes the frame, its status, held-from and the outputs whose (optional) name
    /// `include` accepts.
    fn publish_where(&mut self, p: &Published<'_>, include: impl Fn(Option<&str>) -> bool) {
        self.frames += 1;
        if matches!(p.status, FrameStatus::Fallback(_)) {
            self.fallbacks += 1;
        }
        self.eat(&p.info.frame.to_le_bytes());
        self.eat(p.status.label().as_bytes());
        self.eat(&p.held_from.unwrap_or(u64::MAX).to_le_bytes());
        for i in 0..p.outputs.len() {
            if !include(p.outputs.name(i)) {
                continue;
            }
            if let Some(b) = p.outputs.bytes(i) {
                self.eat(b);
            }
        }
    }
}

impl Publisher for HashPublisher {
    fn publish(&mut self, p: &Published<'_>) {
        self.publish_where(p, |_| true);
    }
}
