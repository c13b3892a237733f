//! Arena planning and the one start-up allocation every per-frame buffer lives in.
//!
//! # What this module promises
//!
//! * **No sharing between conflicting buffers.** [`plan_with_conflicts`] gives every
//!   buffer an offset such that two buffers that conflict (`conflicts(i, j)` true; the
//!   tests also use intersecting `[first, last]` lifetimes as the relation) never share
//!   a byte. Buffers that do not conflict may share memory: that is the
//!   point of planning.
//! * **Alignment.** `offsets[i]` is a multiple of `requests[i].align` (a power of two,
//!   at most 4096). An [`Arena`] slot base is 4096-aligned, so the absolute address
//!   `slot_base + offsets[i]` has the same alignment.
//! * **Never worse than no reuse.** `peak_bytes <= sum_of_buffers`, where
//!   `sum_of_buffers` is Σ size rounded up to its alignment. The planner is greedy by
//!   size (like TFLite Micro's `GreedyMemoryPlanner`): buffers in order of size
//!   descending (ties: lower index first, so the result is deterministic), each placed
//!   at the lowest aligned offset that does not overlap an already-placed conflicting
//!   buffer. With mixed alignments the padding that greedy placement inserts can make
//!   its peak exceed the no-reuse sum; in that case the planner falls back to a
//!   sequential no-reuse layout ordered by alignment descending. That layout has no
//!   padding gaps (each size is rounded up to its power-of-two alignment, so every
//!   running total is a multiple of the next, smaller-or-equal, alignment) and its
//!   peak is exactly `sum_of_buffers`.
//! * **Deterministic.** The same requests (and conflict relation) always give the same
//!   layout.
//!
//! # What it costs
//!
//! * Planning is O(n² log n) time and O(n) memory for n buffers (the conflict
//!   relation is queried O(n²) times). It runs once, at start-up, and may allocate.
//! * [`Arena::new`] makes exactly one allocation (`slots * slot_stride` bytes,
//!   4096-aligned, zeroed) and optionally one `mlock(2)`. Drop frees it.
//!
//! # What it must never do
//!
//! * Allocate after start-up. Nothing here is called on the hot path: per-frame code
//!   only uses the pointers an [`Arena`] handed out, at offsets from an
//!   [`ArenaLayout`] computed before the first frame.
//! * Fail because memory locking was refused: the outcome is recorded in
//!   [`MemoryLock`] and reported, never turned into an error.
//!
//! The arena hands out raw pointers only. Who may touch which bytes when is decided by
//! the plan (happens-before between stages), not by this module.

use std::alloc::Layout;
use std::ptr::NonNull;

/// Largest alignment a buffer may ask for: one page. Slot bases are aligned to this.
pub const MAX_ALIGN: usize = 4096;

/// One buffer to place. `first..=last` is its lifetime in plan order (stage positions), inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRequest {
    /// Size in bytes; must be at least 1.
    pub size: usize,
    /// Alignment in bytes; a power of two no larger than [`MAX_ALIGN`].
    pub align: usize,
    /// First stage position (inclusive) at which the buffer is live.
    pub first: usize,
    /// Last stage position (inclusive) at which the buffer is live.
    pub last: usize,
}

/// Where each buffer lives inside one frame slot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ArenaLayout {
    /// `offsets[i]` is the byte offset of `requests[i]`, a multiple of `requests[i].align`.
    pub offsets: Vec<usize>,
    /// `max(offset + size)` over all buffers: the bytes one frame slot needs (0 if no buffers).
    pub peak_bytes: usize,
    /// Σ size rounded up to its alignment: what a layout without reuse would need.
    pub sum_of_buffers: usize,
}

/// Why a plan or an arena could not be made.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ArenaError {
    /// A buffer asked for zero bytes.
    #[error(
        "buffer {index} has size 0: every planned buffer needs at least one byte; \
         remove the buffer from the graph or give it its real size"
    )]
    ZeroSize {
        /// Index of the offending request.
        index: usize,
    },
    /// A buffer's alignment is not a power of two, or is larger than a page.
    #[error(
        "buffer {index} asks for alignment {align}, which is not a power of two in 1..=4096; \
         use a power of two no larger than the 4096-byte page"
    )]
    BadAlignment {
        /// Index of the offending request.
        index: usize,
        /// The alignment it asked for.
        align: usize,
    },
    /// A buffer's lifetime ends before it starts.
    #[error(
        "buffer {index} has lifetime first={first} > last={last}: its first use must come \
         no later than its last use in plan order; check the producer/consumer positions"
    )]
    BadLifetime {
        /// Index of the offending request.
        index: usize,
        /// First stage position given.
        first: usize,
        /// Last stage position given.
        last: usize,
    },
    /// Rounding or summing buffer sizes overflowed `usize`.
    #[error(
        "buffer {index} (size {size}, align {align}) makes the total arena size overflow usize; \
         the buffer sizes are not plausible, check how they were computed"
    )]
    SizeOverflow {
        /// Index of the request at which the running total overflowed.
        index: usize,
        /// Its size.
        size: usize,
        /// Its alignment.
        align: usize,
    },
    /// `slots * slot_stride` does not fit in a valid allocation size.
    #[error(
        "an arena of {slots} slots of {slot_bytes} bytes (each rounded up to 4096) is larger \
         than the address space allows; reduce the number of frame slots or the buffer sizes"
    )]
    ArenaTooLarge {
        /// Bytes one slot was asked to hold.
        slot_bytes: usize,
        /// Number of frame slots asked for.
        slots: usize,
    },
    /// The allocator returned null.
    #[error(
        "allocating the {bytes}-byte arena failed: the system is out of memory; \
         free memory, reduce the number of frame slots, or reduce buffer sizes"
    )]
    AllocationFailed {
        /// Bytes that could not be allocated.
        bytes: usize,
    },
}

/// Rounds `value` up to a multiple of `align` (a power of two); `None` on overflow.
fn align_up(value: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    Some(value.checked_add(align - 1)? & !(align - 1))
}

/// Checks every request and returns each one's size rounded up to its alignment,
/// together with their sum.
fn validate(requests: &[BufferRequest]) -> Result<(Vec<usize>, usize), ArenaError> {
    let mut rounded = Vec::with_capacity(requests.len());
    let mut sum = 0usize;
    for (index, r) in requests.iter().enumerate() {
        if r.size == 0 {
            return Err(ArenaError::ZeroSize { index });
        }
        if !r.align.is_power_of_two() || r.align > MAX_ALIGN {
            return Err(ArenaError::BadAlignment {
                index,
                align: r.align,
            });
        }
        if r.first > r.last {
            return Err(ArenaError::BadLifetime {
                index,
                first: r.first,
                last: r.last,
            });
        }
        let overflow = ArenaError::SizeOverflow {
            index,
            size: r.size,
            align: r.align,
        };
        let size = align_up(r.size, r.align).ok_or_else(|| overflow.clone())?;
        sum = sum.checked_add(size).ok_or(overflow)?;
        rounded.push(size);
    }
    Ok((rounded, sum))
}

/// Greedy-by-size placement. Returns the offsets and the peak, or `None` if some
/// offset overflowed `usize` (the caller then uses the sequential layout).
fn place_greedy(
    requests: &[BufferRequest],
    conflicts: &dyn Fn(usize, usize) -> bool,
) -> Option<(Vec<usize>, usize)> {
    let n = requests.len();
    let mut order: Vec<usize> = (0..n).collect();
    // Stable sort: ties keep the lower index first.
    order.sort_by(|&a, &b| requests[b].size.cmp(&requests[a].size));

    let mut offsets = vec![0usize; n];
    let mut placed: Vec<usize> = Vec::with_capacity(n);
    // (offset, end) of placed buffers that conflict with the one being placed.
    let mut busy: Vec<(usize, usize)> = Vec::with_capacity(n);
    let mut peak = 0usize;

    for &i in &order {
        let r = requests[i];
        busy.clear();
        busy.extend(
            placed
                .iter()
                .filter(|&&j| conflicts(i, j) || conflicts(j, i))
                .map(|&j| (offsets[j], offsets[j] + requests[j].size)),
        );
        busy.sort_unstable();

        // Lowest aligned candidate that fits in a gap between busy ranges.
        let mut candidate = 0usize;
        for &(start, end) in &busy {
            if candidate.checked_add(r.size)? <= start {
                break;
            }
            if end > candidate {
                candidate = align_up(end, r.align)?;
            }
        }
        let end = candidate.checked_add(r.size)?;
        offsets[i] = candidate;
        peak = peak.max(end);
        placed.push(i);
    }
    Some((offsets, peak))
}

/// Sequential no-reuse layout, alignment descending (ties: lower index first).
/// Has no padding gaps, so its peak is exactly `sum`.
fn place_sequential(requests: &[BufferRequest], rounded: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| requests[b].align.cmp(&requests[a].align));
    let mut offsets = vec![0usize; requests.len()];
    let mut cursor = 0usize;
    for &i in &order {
        // Every earlier buffer's rounded size is a multiple of an alignment >= this
        // one's (powers of two), so `cursor` is already aligned.
        debug_assert_eq!(cursor % requests[i].align, 0);
        offsets[i] = cursor;
        // Cannot overflow: the total of all rounded sizes was checked in `validate`.
        cursor += rounded[i];
    }
    offsets
}

/// Greedy-by-size placement under an arbitrary conflict relation (the graph
/// uses happens-before, not intervals, because stages on different lanes run
/// concurrently). `conflicts(i, j)` true means buffers `i` and `j` must not share
/// bytes. The relation is treated as symmetric: a pair conflicts if either
/// `conflicts(i, j)` or `conflicts(j, i)` is true. It is never called with `i == j`.
///
/// Lifetimes (`first`, `last`) are validated but otherwise ignored here.
pub fn plan_with_conflicts(
    requests: &[BufferRequest],
    conflicts: &dyn Fn(usize, usize) -> bool,
) -> Result<ArenaLayout, ArenaError> {
    let (rounded, sum_of_buffers) = validate(requests)?;
    let (offsets, peak_bytes) = match place_greedy(requests, conflicts) {
        Some((offsets, peak)) if peak <= sum_of_buffers => (offsets, peak),
        _ => {
            let offsets = place_sequential(requests, &rounded);
            let peak = offsets
                .iter()
                .zip(requests)
                .map(|(&o, r)| o + r.size)
                .max()
                .unwrap_or(0);
            (offsets, peak)
        }
    };
    Ok(ArenaLayout {
        offsets,
        peak_bytes,
        sum_of_buffers,
    })
}

/// What happened to a request to lock the arena into RAM.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemoryLock {
    /// The arena was created with `lock_memory = false`.
    NotRequested,
    /// `mlock(2)` succeeded (or there was nothing to lock): the arena cannot be paged out.
    Locked,
    /// `mlock(2)` was refused; the arena works but may be paged out.
    Refused {
        /// The OS error and what to do about it.
        reason: String,
    },
}

/// A 4096-aligned type, used only to make a well-aligned dangling pointer for an
/// arena that allocates nothing.
#[repr(C, align(4096))]
struct Page([u8; MAX_ALIGN]);

/// The one allocation every per-frame buffer lives in: `slots` frame slots of
/// `slot_stride` bytes each, base aligned to 4096, zeroed at creation.
#[derive(Debug)]
pub struct Arena {
    base: NonNull<u8>,
    /// `None` when nothing was allocated (zero total bytes).
    layout: Option<Layout>,
    slots: usize,
    slot_stride: usize,
    memory_lock: MemoryLock,
}

// SAFETY: `Arena` owns its allocation exclusively and only hands out raw pointers; it
// never reads or writes the memory itself after creation. Sending it to another
// thread moves ownership of a plain heap block, which is sound.
unsafe impl Send for Arena {}
// SAFETY: every `&self` method only reads immutable fields (no interior mutability);
// aliasing of the bytes behind the handed-out raw pointers is the caller's (the
// plan's) responsibility, which raw pointers already require.
unsafe impl Sync for Arena {}

impl Arena {
    /// Allocates `slots` frame slots able to hold `slot_bytes` each (the layout's
    /// `peak_bytes`). The stride is `slot_bytes` rounded up to 4096 (0 if `slot_bytes`
    /// is 0, in which case nothing is allocated). The base is 4096-aligned and the
    /// memory zeroed. If `lock_memory`, the region is `mlock(2)`ed and the outcome
    /// recorded in [`Arena::memory_lock`]; a refusal is never an error.
    ///
    /// Start-up only: this is the one allocation.
    pub fn new(slot_bytes: usize, slots: usize, lock_memory: bool) -> Result<Arena, ArenaError> {
        let too_large = ArenaError::ArenaTooLarge { slot_bytes, slots };
        let slot_stride = align_up(slot_bytes, MAX_ALIGN).ok_or_else(|| too_large.clone())?;
        let total = slot_stride
            .checked_mul(slots)
            .ok_or_else(|| too_large.clone())?;

        if total == 0 {
            return Ok(Arena {
                base: NonNull::<Page>::dangling().cast(),
                layout: None,
                slots,
                slot_stride,
                memory_lock: if lock_memory {
                    MemoryLock::Locked
                } else {
                    MemoryLock::NotRequested
                },
            });
        }

        let layout = Layout::from_size_align(total, MAX_ALIGN).map_err(|_| too_large)?;
        // SAFETY: `layout` has a non-zero size (`total > 0` checked above) and a valid
        // power-of-two alignment, as `alloc_zeroed` requires.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).ok_or(ArenaError::AllocationFailed { bytes: total })?;
        let memory_lock = if lock_memory {
            lock_region(base, total)
        } else {
            MemoryLock::NotRequested
        };
        Ok(Arena {
            base,
            layout: Some(layout),
            slots,
            slot_stride,
            memory_lock,
        })
    }

    /// Number of frame slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Bytes between consecutive slot bases: a multiple of 4096.
    pub fn slot_stride(&self) -> usize {
        self.slot_stride
    }

    /// Total bytes allocated: `slots * slot_stride`.
    pub fn total_bytes(&self) -> usize {
        self.slots * self.slot_stride
    }

    /// Raw base pointer of a slot (4096-aligned), or `None` if `slot >= slots`.
    /// The `slot_stride` bytes behind it are valid for reads and writes for as long
    /// as the arena lives; who may access them when is the caller's discipline.
    pub fn slot_base(&self, slot: usize) -> Option<NonNull<u8>> {
        if slot >= self.slots {
            return None;
        }
        // SAFETY: `slot < slots`, so `slot * slot_stride <= total - slot_stride`, which
        // does not overflow (`total` was computed with checked arithmetic) and stays
        // within the allocation. When nothing was allocated the stride is 0 and the
        // offset is 0, which is valid for any pointer.
        let ptr = unsafe { self.base.as_ptr().add(slot * self.slot_stride) };
        NonNull::new(ptr)
    }

    /// What happened to the `mlock` request.
    pub fn memory_lock(&self) -> &MemoryLock {
        &self.memory_lock
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let Some(layout) = self.layout else {
            return;
        };
        if self.memory_lock == MemoryLock::Locked {
            unlock_region(self.base, layout.size());
        }
        // SAFETY: `base` was returned by `alloc_zeroed(layout)` with this exact
        // `layout` and has not been freed (Drop runs once).
        unsafe { std::alloc::dealloc(self.base.as_ptr(), layout) };
    }
}

#[cfg(unix)]
fn lock_region(base: NonNull<u8>, len: usize) -> MemoryLock {
    // SAFETY: `base..base + len` is a live allocation we own; mlock only changes
    // paging of those pages and does not touch their contents.
    let rc = unsafe { libc::mlock(base.as_ptr().cast::<libc::c_void>(), len) };
    if rc == 0 {
        MemoryLock::Locked
    } else {
        let err = std::io::Error::last_os_error();
        MemoryLock::Refused {
            reason: format!(
                "mlock of {len} bytes failed: {err}; raise RLIMIT_MEMLOCK (ulimit -l) \
                 or grant CAP_IPC_LOCK to keep the arena out of swap"
            ),
        }
    }
}

#[cfg(not(unix))]
fn lock_region(_base: NonNull<u8>, len: usize) -> MemoryLock {
    MemoryLock::Refused {
        reason: format!("mlock of {len} bytes is not supported on this platform"),
    }
}

#[cfg(unix)]
fn unlock_region(base: NonNull<u8>, len: usize) {
    // SAFETY: the region was successfully mlocked by `lock_region` and is still
    // allocated; munlock only changes paging. Its result is irrelevant because the
    // memory is freed right after.
    unsafe {
        libc::munlock(base.as_ptr().cast::<libc::c_void>(), len);
    }
}

#[cfg(not(unix))]
fn unlock_region(_base: NonNull<u8>, _len: usize) {}

#[cfg(test)]
mod tests;
