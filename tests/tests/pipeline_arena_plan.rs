//! The driving graph's arena, pinned, as TFLite Micro's planner test does for a real model:
//! the default driving graph (network perception, `PlanConfig::default()`) over a small
//! scenario feed, compiled, and its buffer table checked.
//!
//! - No two buffers whose lifetimes conflict share a byte. The conflict rule is the plan's
//!   happens-before rule (DESIGN.md, Arena), re-derived here from the plan's public table:
//!   buffer `a` is done with before `b` is written when every stage that touches `a` (its
//!   producer and consumers) is a strict ancestor of `b`'s producer and `a` is not
//!   published; two buffers conflict unless one is done with before the other is written.
//!   The overlap check has a positive control: moving one buffer onto a conflicting one
//!   must be reported.
//! - Reuse happens: the arena per frame slot (`peak_bytes`) is below the sum of the
//!   buffer sizes.
//! - The exact peak is pinned, and it does not depend on the lane count.

use std::sync::Arc;

use redline_pipeline::config::PipelineConfig;
use redline_pipeline::graph;
use redline_pipeline::sensors::FrameSource;
use redline_runtime::{Plan, PlanConfig};
use redline_sim::feed::Feed;
use redline_tests::small_scenario;

/// Bytes per frame slot of the default driving graph over `small_scenario` (the default
/// rig's 7 cameras of 128 x 64 px). Buffer sizes are integer products of the config's shapes, so the same on
/// every platform. If a deliberate change to the graph's buffers or to the planner changes
/// it, the failure message prints the new value and the buffer table: check the table,
/// paste the value here and say in the commit why the arena changed. 2026-11-26:
/// 401 520 -> 991 344 bytes, the shipped network takes the cameras at 256 x 128 (net_input
/// 589 824 B, features 393 216 B; were 147 456 and 98 304). 2026-11-26: 991 344 ->
/// 1 155 184 bytes, the default rig's seventh camera (the telephoto): one more camera's
/// network input (98 304 B) and features (65 536 B). 2026-11-27: 1 155 184 -> 1 613 936
/// bytes, the 4 x 2-stride network's features have twice the rows (7 x 64 x 64 x 32 =
/// 917 504 B, were 458 752).
const PINNED_PEAK_BYTES: usize = 1_613_936;

fn feed() -> Arc<dyn FrameSource> {
    Arc::new(Feed::from_scenario(&small_scenario(1, 0.5), None, &mut |_, _| {}).expect("feed"))
}

fn driving_plan(feed: &Arc<dyn FrameSource>, config: &PlanConfig) -> Plan {
    let (g, _) = graph::build(&PipelineConfig::default(), feed).expect("driving graph builds");
    g.build(config).expect("driving graph plans")
}

/// `conflicts[a][b]`: buffers `a` and `b` must not share bytes (the plan's happens-before
/// rule, from the public stage and buffer tables).
fn conflict_matrix(plan: &Plan) -> Vec<Vec<bool>> {
    let stages = plan.stages();
    assert!(stages.len() <= 64, "u64 masks need at most 64 stages");
    // Strict ancestors as bit masks; plan order is topological.
    let mut ancestors = vec![0u64; stages.len()];
    for (i, s) in stages.iter().enumerate() {
        for &p in &s.predecessors {
            assert!(p < i, "plan order is not topological: {p} before {i}");
            ancestors[i] |= ancestors[p] | (1u64 << p);
        }
    }
    let buffers = plan.buffers();
    let accessors: Vec<u64> = buffers
        .iter()
        .map(|b| {
            b.consumers
                .iter()
                .fold(1u64 << b.producer, |m, &c| m | (1u64 << c))
        })
        .collect();
    let done_before = |a: usize, b: usize| {
        !buffers[a].published && accessors[a] & !ancestors[buffers[b].producer] == 0
    };
    (0..buffers.len())
        .map(|a| {
            (0..buffers.len())
                .map(|b| a != b && !done_before(a, b) && !done_before(b, a))
                .collect()
        })
        .collect()
}

/// Pairs of conflicting buffers whose byte ranges `(offset, bytes)` overlap.
fn overlapping_conflicts(table: &[(usize, usize)], conflicts: &[Vec<bool>]) -> Vec<(usize, usize)> {
    let mut bad = Vec::new();
    for a in 0..table.len() {
        for b in a + 1..table.len() {
            let ((oa, sa), (ob, sb)) = (table[a], table[b]);
            if conflicts[a][b] && oa < ob + sb && ob < oa + sa {
                bad.push((a, b));
            }
        }
    }
    bad
}

#[test]
fn driving_graph_arena_is_sound_reuses_memory_and_is_pinned() {
    let feed = feed();
    let plan = driving_plan(&feed, &PlanConfig::default());
    let describe = plan.describe();
    let buffers = plan.buffers();
    let layout = plan.layout();
    let table: Vec<(usize, usize)> = buffers.iter().map(|b| (b.offset, b.bytes)).collect();
    assert!(buffers.len() >= 10, "{describe}");

    // Every buffer inside the slot, cache-line aligned, where the layout says.
    for (b, &off) in buffers.iter().zip(&layout.offsets) {
        assert_eq!(b.offset, off, "{}: table and layout disagree", b.name);
        assert_eq!(b.offset % 64, 0, "{} not cache-line aligned", b.name);
        assert!(
            b.offset + b.bytes <= layout.peak_bytes,
            "{} past the slot",
            b.name
        );
    }
    let end = table.iter().map(|&(o, s)| o + s).max().unwrap();
    assert_eq!(
        layout.peak_bytes, end,
        "peak is not the end of the last buffer"
    );

    // No conflicting pair shares bytes.
    let conflicts = conflict_matrix(&plan);
    let bad = overlapping_conflicts(&table, &conflicts);
    let names = |(a, b): (usize, usize)| format!("{} / {}", buffers[a].name, buffers[b].name);
    assert!(
        bad.is_empty(),
        "conflicting buffers share bytes: {:?}\n{describe}",
        bad.into_iter().map(names).collect::<Vec<_>>()
    );
    // Positive control: put one buffer on top of a buffer it conflicts with; the check
    // must report exactly that pair.
    let (a, b) = (0..buffers.len())
        .flat_map(|a| (a + 1..buffers.len()).map(move |b| (a, b)))
        .find(|&(a, b)| conflicts[a][b])
        .expect("some buffers conflict (a producer's input and output do)");
    let mut moved = table.clone();
    moved[b].0 = moved[a].0;
    assert_eq!(
        overlapping_conflicts(&moved, &conflicts),
        vec![(a, b)],
        "the overlap check misses {} moved onto {}",
        buffers[b].name,
        buffers[a].name
    );

    // Reuse: some buffers that never conflict do share bytes, and the slot is smaller
    // than the buffers laid end to end.
    let sum: usize = buffers.iter().map(|b| b.bytes).sum();
    let shared = (0..buffers.len())
        .flat_map(|a| (a + 1..buffers.len()).map(move |b| (a, b)))
        .filter(|&(a, b)| {
            let ((oa, sa), (ob, sb)) = (table[a], table[b]);
            oa < ob + sb && ob < oa + sa
        })
        .count();
    assert!(shared > 0, "no two buffers share bytes\n{describe}");
    assert!(
        layout.peak_bytes < sum && layout.peak_bytes <= layout.sum_of_buffers,
        "peak {} B is not below the sum of the buffers {sum} B\n{describe}",
        layout.peak_bytes
    );

    // The exact peak.
    assert_eq!(
        layout.peak_bytes,
        PINNED_PEAK_BYTES,
        "the driving graph's arena changed: {} bytes per slot, pinned {PINNED_PEAK_BYTES}. \
         If the change is deliberate, check the table below and set PINNED_PEAK_BYTES in {} \
         to {}\n{describe}",
        layout.peak_bytes,
        file!(),
        layout.peak_bytes
    );

    // The layout depends on the graph, not on the lanes.
    for lanes in [1, 4] {
        let other = driving_plan(
            &feed,
            &PlanConfig {
                lanes,
                ..PlanConfig::default()
            },
        );
        assert_eq!(
            other.layout(),
            layout,
            "lanes={lanes} changed the arena layout"
        );
    }
}
