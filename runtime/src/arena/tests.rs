//! Unit tests of [`super`] (`arena.rs`), kept in their own file so the module stays short.

use super::*;

/// Liveness-based placement: two buffers conflict iff their `[first, last]` intervals
/// intersect (the relation TFLite Micro's planner uses).
fn plan_intervals(requests: &[BufferRequest]) -> Result<ArenaLayout, ArenaError> {
    plan_with_conflicts(requests, &|i, j| {
        let (a, b) = (&requests[i], &requests[j]);
        a.first <= b.last && b.first <= a.last
    })
}
use proptest::prelude::*;

fn req(size: usize, align: usize, first: usize, last: usize) -> BufferRequest {
    BufferRequest {
        size,
        align,
        first,
        last,
    }
}

fn intervals_intersect(a: &BufferRequest, b: &BufferRequest) -> bool {
    a.first <= b.last && b.first <= a.last
}

/// Checks every planner property against an explicit conflict predicate.
fn check_layout(
    requests: &[BufferRequest],
    layout: &ArenaLayout,
    conflicts: impl Fn(usize, usize) -> bool,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(layout.offsets.len(), requests.len());
    for (i, r) in requests.iter().enumerate() {
        prop_assert_eq!(layout.offsets[i] % r.align, 0, "buffer {} misaligned", i);
    }
    for i in 0..requests.len() {
        for j in (i + 1)..requests.len() {
            if conflicts(i, j) {
                let (ai, bi) = (layout.offsets[i], layout.offsets[i] + requests[i].size);
                let (aj, bj) = (layout.offsets[j], layout.offsets[j] + requests[j].size);
                prop_assert!(
                    bi <= aj || bj <= ai,
                    "conflicting buffers {} [{}, {}) and {} [{}, {}) overlap",
                    i,
                    ai,
                    bi,
                    j,
                    aj,
                    bj
                );
            }
        }
    }
    let expected_sum: usize = requests
        .iter()
        .map(|r| r.size.div_ceil(r.align) * r.align)
        .sum();
    prop_assert_eq!(layout.sum_of_buffers, expected_sum);
    prop_assert!(layout.peak_bytes <= layout.sum_of_buffers);
    let max_end = requests
        .iter()
        .zip(&layout.offsets)
        .map(|(r, &o)| o + r.size)
        .max()
        .unwrap_or(0);
    prop_assert_eq!(layout.peak_bytes, max_end);
    Ok(())
}

fn request_strategy() -> impl Strategy<Value = BufferRequest> {
    (
        1usize..100_000,
        prop::sample::select(vec![1usize, 2, 4, 8, 16, 32, 64, 128, 4096]),
        0usize..20,
        0usize..20,
    )
        .prop_map(|(size, align, a, b)| req(size, align, a.min(b), a.max(b)))
}

proptest! {
    #[test]
    fn intervals_plan_is_sound(requests in prop::collection::vec(request_strategy(), 1..40)) {
        let layout = plan_intervals(&requests).unwrap();
        check_layout(&requests, &layout, |i, j| intervals_intersect(&requests[i], &requests[j]))?;
    }

    #[test]
    fn conflict_plan_is_sound(
        requests in prop::collection::vec(request_strategy(), 1..40),
        bits in prop::collection::vec(any::<bool>(), 40 * 40),
    ) {
        let n = requests.len();
        // Symmetric matrix from the upper triangle.
        let matrix = |i: usize, j: usize| {
            let (a, b) = (i.min(j), i.max(j));
            bits[a * n + b]
        };
        let layout = plan_with_conflicts(&requests, &|i, j| matrix(i, j)).unwrap();
        check_layout(&requests, &layout, matrix)?;
    }

    #[test]
    fn planning_is_deterministic(requests in prop::collection::vec(request_strategy(), 1..40)) {
        prop_assert_eq!(plan_intervals(&requests).unwrap(), plan_intervals(&requests).unwrap());
    }
}

#[test]
fn chain_reuses_memory() {
    // A→B→C→D: each buffer is live from its producer to its consumer.
    let requests: Vec<_> = (0..4).map(|k| req(1000, 64, k, k + 1)).collect();
    let layout = plan_intervals(&requests).unwrap();
    assert_eq!(layout.sum_of_buffers, 4 * 1024);
    assert_eq!(layout.peak_bytes, 1024 + 1000);
    // Equal sizes, index order: A at 0, B above it, C reuses A, D reuses B.
    assert_eq!(layout.offsets, vec![0, 1024, 0, 1024]);
}

#[test]
fn fully_overlapping_buffers_do_not_share() {
    let requests = vec![req(4096, 4096, 0, 3), req(512, 64, 0, 3), req(256, 8, 1, 2)];
    let layout = plan_intervals(&requests).unwrap();
    assert_eq!(layout.peak_bytes, layout.sum_of_buffers);
    assert_eq!(layout.peak_bytes, 4096 + 512 + 256);
}

#[test]
fn mixed_alignment_falls_back_to_sequential() {
    // Greedy: A (10 bytes) at 0, B (8 bytes, align 8) at 16 → peak 24 > sum 18.
    let requests = vec![req(10, 1, 0, 1), req(8, 8, 0, 1)];
    let layout = plan_intervals(&requests).unwrap();
    assert_eq!(layout.sum_of_buffers, 18);
    assert_eq!(layout.peak_bytes, 18);
    assert_eq!(layout.offsets, vec![8, 0]);
}

#[test]
fn empty_plan() {
    let layout = plan_intervals(&[]).unwrap();
    assert_eq!(
        layout,
        ArenaLayout {
            offsets: vec![],
            peak_bytes: 0,
            sum_of_buffers: 0
        }
    );
}

#[test]
fn no_conflicts_means_full_sharing() {
    let requests = vec![req(100, 4, 0, 0), req(300, 4, 0, 0), req(200, 4, 0, 0)];
    let layout = plan_with_conflicts(&requests, &|_, _| false).unwrap();
    assert_eq!(layout.offsets, vec![0, 0, 0]);
    assert_eq!(layout.peak_bytes, 300);
}

#[test]
fn conflicts_are_never_queried_with_same_index() {
    let requests = vec![req(8, 8, 0, 0); 5];
    plan_with_conflicts(&requests, &|i, j| {
        assert_ne!(i, j);
        true
    })
    .unwrap();
}

#[test]
fn errors_name_the_buffer() {
    let ok = req(16, 8, 0, 1);
    let cases = [
        (req(0, 8, 0, 1), ArenaError::ZeroSize { index: 1 }),
        (
            req(16, 3, 0, 1),
            ArenaError::BadAlignment { index: 1, align: 3 },
        ),
        (
            req(16, 0, 0, 1),
            ArenaError::BadAlignment { index: 1, align: 0 },
        ),
        (
            req(16, 8192, 0, 1),
            ArenaError::BadAlignment {
                index: 1,
                align: 8192,
            },
        ),
        (
            req(16, 8, 3, 1),
            ArenaError::BadLifetime {
                index: 1,
                first: 3,
                last: 1,
            },
        ),
        (
            req(usize::MAX - 2, 8, 0, 1),
            ArenaError::SizeOverflow {
                index: 1,
                size: usize::MAX - 2,
                align: 8,
            },
        ),
    ];
    for (bad, expected) in cases {
        let err = plan_intervals(&[ok, bad]).unwrap_err();
        assert_eq!(err, expected);
        assert!(
            err.to_string().contains("buffer 1"),
            "message does not name the buffer: {err}"
        );
        let err2 = plan_with_conflicts(&[ok, bad], &|_, _| true).unwrap_err();
        assert_eq!(err2, expected);
    }
    // Sum overflow (each size fine on its own).
    let big = req(usize::MAX / 2 + 1, 1, 0, 0);
    let err = plan_intervals(&[big, big]).unwrap_err();
    assert!(matches!(err, ArenaError::SizeOverflow { index: 1, .. }));
    assert!(err.to_string().contains("buffer 1"));
}

#[test]
fn arena_errors_say_what_to_do() {
    let err = Arena::new(usize::MAX, 1, false).unwrap_err();
    assert!(matches!(err, ArenaError::ArenaTooLarge { .. }));
    let err = Arena::new(1 << 40, 1 << 40, false).unwrap_err();
    assert!(err.to_string().contains("reduce"));
    let msg = ArenaError::AllocationFailed { bytes: 123 }.to_string();
    assert!(msg.contains("123") && msg.contains("reduce"));
}

#[test]
fn arena_slots_are_aligned_and_zeroed() {
    let arena = Arena::new(5000, 3, false).unwrap();
    assert_eq!(arena.slots(), 3);
    assert_eq!(arena.slot_stride(), 8192);
    assert_eq!(arena.slot_stride() % 4096, 0);
    assert_eq!(arena.total_bytes(), 3 * 8192);
    assert_eq!(arena.memory_lock(), &MemoryLock::NotRequested);
    for slot in 0..arena.slots() {
        let base = arena.slot_base(slot).unwrap();
        assert_eq!(base.as_ptr() as usize % 4096, 0);
        // SAFETY: the slot base points at `slot_stride` bytes of the live, zeroed
        // allocation; nothing else accesses it during the test.
        let bytes = unsafe { std::slice::from_raw_parts(base.as_ptr(), arena.slot_stride()) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
    let s0 = arena.slot_base(0).unwrap().as_ptr() as usize;
    let s2 = arena.slot_base(2).unwrap().as_ptr() as usize;
    assert_eq!(s2 - s0, 2 * 8192);
    assert_eq!(arena.slot_base(3), None);
    assert_eq!(arena.slot_base(usize::MAX), None);
}

#[test]
fn arena_slot_is_writable() {
    let layout = plan_intervals(&[req(100, 64, 0, 1), req(200, 64, 1, 2)]).unwrap();
    let arena = Arena::new(layout.peak_bytes, 2, false).unwrap();
    for slot in 0..2 {
        let base = arena.slot_base(slot).unwrap();
        // SAFETY: offset + size <= peak_bytes <= slot_stride, inside the slot; no
        // other reference to these bytes exists.
        unsafe {
            base.as_ptr()
                .add(layout.offsets[1])
                .write_bytes(0xAB + slot as u8, 200);
        }
    }
    // Each slot kept its own bytes: the slots do not overlap.
    for slot in 0..2 {
        let base = arena.slot_base(slot).unwrap();
        // SAFETY: the same 200 bytes written above, initialised, no writer left.
        let bytes =
            unsafe { std::slice::from_raw_parts(base.as_ptr().add(layout.offsets[1]), 200) };
        assert!(bytes.iter().all(|&b| b == 0xAB + slot as u8), "slot {slot}");
    }
}

#[test]
fn arena_stride_rounding() {
    assert_eq!(Arena::new(1, 1, false).unwrap().slot_stride(), 4096);
    assert_eq!(Arena::new(4096, 1, false).unwrap().slot_stride(), 4096);
    assert_eq!(Arena::new(4097, 1, false).unwrap().slot_stride(), 8192);
}

#[test]
fn empty_arena_is_valid() {
    let arena = Arena::new(0, 2, true).unwrap();
    assert_eq!(arena.total_bytes(), 0);
    assert_eq!(arena.slot_stride(), 0);
    let base = arena.slot_base(1).unwrap();
    assert_eq!(base.as_ptr() as usize % 4096, 0);
    assert_eq!(arena.slot_base(2), None);
    assert_ne!(arena.memory_lock(), &MemoryLock::NotRequested);

    let none = Arena::new(4096, 0, false).unwrap();
    assert_eq!(none.total_bytes(), 0);
    assert_eq!(none.slot_base(0), None);
}

#[test]
fn lock_memory_reports_an_outcome() {
    let arena = Arena::new(10_000, 2, true).unwrap();
    match arena.memory_lock() {
        MemoryLock::NotRequested => panic!("lock was requested"),
        MemoryLock::Locked => {}
        MemoryLock::Refused { reason } => assert!(!reason.is_empty()),
    }
    drop(arena);
}

#[test]
fn arena_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Arena>();
}

#[test]
fn types_serialize() {
    let layout = plan_intervals(&[req(8, 8, 0, 0)]).unwrap();
    let json = serde_json::to_string(&layout).unwrap();
    assert!(json.contains("peak_bytes"));
    let lock = serde_json::to_string(&MemoryLock::Refused {
        reason: "EPERM".into(),
    })
    .unwrap();
    assert!(lock.contains("EPERM"));
}
