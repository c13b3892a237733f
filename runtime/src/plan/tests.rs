//! Unit tests of [`super`] (`plan.rs`), kept in their own file so the module stays short.

use super::*;
use crate::demo::{demo_graph, empty_graph, EmptyStage, Faults};
use crate::graph::GraphBuilder;

fn cfg(lanes: usize) -> PlanConfig {
    PlanConfig {
        lanes,
        frame_slots: 2,
    }
}

fn err(g: GraphBuilder) -> String {
    match g.build(&cfg(2)) {
        Ok(_) => panic!("the graph should have been rejected"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn cycle_is_rejected_with_the_stages_named() {
    let mut g = GraphBuilder::new();
    g.stage("src", EmptyStage).writes::<u8>("s", 1);
    g.stage("a", EmptyStage)
        .reads::<u8>("s", 1)
        .reads::<u8>("c", 1)
        .writes::<u8>("a", 1);
    g.stage("b", EmptyStage)
        .reads::<u8>("a", 1)
        .writes::<u8>("b", 1);
    g.stage("c", EmptyStage)
        .reads::<u8>("b", 1)
        .writes::<u8>("c", 1);
    let m = err(g);
    assert!(m.contains("cycle"), "{m}");
    for s in ["a", "b", "c"] {
        assert!(
            m.contains(&format!("{s} ->")) || m.contains(&format!("-> {s}")),
            "{m}"
        );
    }
    assert!(!m.contains("src"), "{m}");
}

#[test]
fn self_loop_is_a_cycle() {
    let mut g = GraphBuilder::new();
    g.stage("loop", EmptyStage)
        .reads::<u8>("x", 1)
        .writes::<u8>("x", 1);
    assert!(err(g).contains("loop -> loop"));
}

#[test]
fn missing_producer_names_stage_and_buffer() {
    let mut g = GraphBuilder::new();
    g.stage("detect", EmptyStage)
        .reads::<f32>("features", 8)
        .writes::<u8>("d", 1);
    let m = err(g);
    assert!(
        m.contains("'detect'") && m.contains("'features'") && m.contains("no stage writes"),
        "{m}"
    );
}

#[test]
fn two_producers_name_both() {
    let mut g = GraphBuilder::new();
    g.stage("cam_a", EmptyStage).writes::<u8>("image", 4);
    g.stage("cam_b", EmptyStage).writes::<u8>("image", 4);
    let m = err(g);
    assert!(
        m.contains("'image'") && m.contains("'cam_a'") && m.contains("'cam_b'"),
        "{m}"
    );
}

#[test]
fn type_and_length_mismatches_name_both_sides() {
    let mut g = GraphBuilder::new();
    g.stage("pre", EmptyStage).writes::<i8>("img", 16);
    g.stage("net", EmptyStage)
        .reads::<f32>("img", 16)
        .writes::<u8>("o", 1);
    let m = err(g);
    assert!(
        m.contains("'net'") && m.contains("'pre'") && m.contains("f32[16]") && m.contains("i8[16]"),
        "{m}"
    );
    let mut g = GraphBuilder::new();
    g.stage("pre", EmptyStage).writes::<i8>("img", 16);
    g.stage("net", EmptyStage)
        .reads::<i8>("img", 8)
        .writes::<u8>("o", 1);
    let m = err(g);
    assert!(m.contains("i8[8]") && m.contains("i8[16]"), "{m}");
}

#[test]
fn other_errors_have_messages() {
    assert!(err(GraphBuilder::new()).contains("no stages"));
    let mut g = GraphBuilder::new();
    g.stage("a", EmptyStage).writes::<u8>("x", 1);
    g.stage("a", EmptyStage).writes::<u8>("y", 1);
    assert!(err(g).contains("two stages are named 'a'"));
    let mut g = GraphBuilder::new();
    g.stage("a", EmptyStage).writes::<u8>("x", 1);
    g.publish("nothing");
    assert!(err(g).contains("'nothing' is published"));
    let mut g = GraphBuilder::new();
    g.stage("a", EmptyStage).writes::<u8>("x", 0);
    assert!(err(g).contains("0 elements"));
    let mut g = GraphBuilder::new();
    for i in 0..=MAX_STAGES {
        g.stage(&format!("s{i}"), EmptyStage)
            .writes::<u8>(&format!("b{i}"), 1);
    }
    assert!(err(g).contains("at most 64"));
    let e = empty_graph()
        .build(&PlanConfig {
            lanes: 0,
            frame_slots: 2,
        })
        .unwrap_err();
    assert!(e.to_string().contains("lanes = 0"));
}

#[test]
fn order_is_topological_and_fan_out_spreads_over_lanes() {
    let p = empty_graph().build(&cfg(2)).unwrap();
    for (i, s) in p.stages().iter().enumerate() {
        assert!(s.predecessors.iter().all(|&q| q < i), "{}", p.describe());
    }
    let lanes: std::collections::BTreeSet<usize> =
        p.stages()[1..5].iter().map(|s| s.lane).collect();
    assert_eq!(
        lanes.len(),
        2,
        "fan-out a0..a3 should use both lanes:\n{}",
        p.describe()
    );
    let one = empty_graph().build(&cfg(1)).unwrap();
    assert!(one.stages().iter().all(|s| s.lane == 0));
}

/// Concurrent stages never share bytes: two buffers overlap only if every access to one
/// happens before the write of the other.
#[test]
fn overlapping_buffers_are_ordered_by_happens_before() {
    let faults = Faults::new();
    for g in [demo_graph(1000, &faults), empty_graph()] {
        let p = g.build(&cfg(2)).unwrap();
        let n = p.stages().len();
        let mut anc = vec![0u64; n];
        for i in 0..n {
            for &q in &p.stages()[i].predecessors {
                anc[i] |= anc[q] | (1 << q);
            }
        }
        let bufs = p.buffers();
        let access = |b: &BufferPlan| {
            b.consumers
                .iter()
                .fold(1u64 << b.producer, |m, &c| m | (1 << c))
        };
        for (i, a) in bufs.iter().enumerate() {
            for b in bufs.iter().skip(i + 1) {
                let overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
                if !overlap {
                    continue;
                }
                let a_before_b = !a.published && access(a) & !anc[b.producer] == 0;
                let b_before_a = !b.published && access(b) & !anc[a.producer] == 0;
                assert!(
                    a_before_b || b_before_a,
                    "{} and {} overlap:\n{}",
                    a.name,
                    b.name,
                    p.describe()
                );
            }
        }
        assert!(p.layout().peak_bytes <= p.layout().sum_of_buffers);
    }
    // The demo graph's chain reuses memory.
    let p = demo_graph(1000, &faults).build(&cfg(2)).unwrap();
    assert!(
        p.layout().peak_bytes < p.layout().sum_of_buffers,
        "{}",
        p.describe()
    );
}
