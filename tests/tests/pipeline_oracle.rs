//! Oracle perception on the default scenario (seed 7, 30 s, 24 actors; small images since
//! the oracle does not look at pixels, but no smaller than the default network's feature
//! map, 64 x 64 per camera: the view transform refuses features finer than the image):
//! tracking MOTA >= 0.9 against ground truth, and the
//! planner's trajectories collision-free against the actors' true futures in >= 99 % of
//! frames.

use std::sync::Arc;

use redline_pipeline::config::{Perception, PipelineConfig};
use redline_pipeline::run::replay;
use redline_pipeline::run::Counters;
use redline_runtime::ReleaseMode;
use redline_sim::feed::Feed;
use redline_sim::scenario::ScenarioConfig;

#[test]
fn oracle_tracking_and_planning_meet_their_bars() {
    let scenario = ScenarioConfig {
        image_width: 128,
        image_height: 64,
        ..ScenarioConfig::default()
    };
    let feed = Arc::new(Feed::from_scenario(&scenario, None, &mut |_, _| {}).unwrap());
    assert!(feed.frames.len() >= 900);
    let cfg = PipelineConfig {
        release: ReleaseMode::Lockstep,
        perception: Perception::Oracle,
        ..PipelineConfig::default()
    };
    let (o, _rt) = replay(&cfg, feed, None, Arc::new(Counters::default())).unwrap();
    let t = &o.evaluation.tracking;
    let e = &o.evaluation;
    println!("{:#?}", e);
    assert!(
        t.gt_objects > 1000,
        "the scenario should keep objects in range: {t:?}"
    );
    assert!(t.mota >= 0.9, "MOTA {:.3} < 0.9: {t:?}", t.mota);
    assert!(e.planner_frames_checked >= 800, "{e:?}");
    assert!(
        e.planner_collision_free_rate >= 0.99,
        "collision-free {:.4} < 0.99; first collisions {:?}",
        e.planner_collision_free_rate,
        e.collisions
    );
}
