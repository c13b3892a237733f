//! The replay's collision report (`Evaluation::collisions`, the `planner collisions` line):
//! a plan that drives into an actor's true future is reported with the frame, the time into
//! the plan, the actor and what perception knew, and the plans of one encounter are one
//! entry. Scored directly (the scorer the replay uses) on a drive whose ground truth and
//! published outputs are set by hand: the ego drives straight along +x at 10 m/s and a
//! pedestrian stands in its lane 40 m ahead of the start; it is tracked only from frame 40.

use redline_pipeline::run::{collisions_line, FrameRecord, Scorer};
use redline_pipeline::types::{
    class, EgoPose, GtBox, TrackState, TrajPoint, MAX_TRACKS, PLAN_STEPS, PRED_DT,
};
use redline_sim::feed::Feed;
use redline_sim::scenario::ScenarioConfig;

const SPEED: f64 = 10.0;
const PEDESTRIAN_X: f64 = 40.0;
const TRACKED_FROM: u64 = 40;

fn pedestrian() -> GtBox {
    GtBox {
        id: 99,
        class: class::PEDESTRIAN,
        x: PEDESTRIAN_X,
        length: 0.5,
        width: 0.5,
        valid: 1,
        ..GtBox::default()
    }
}

#[test]
fn a_pedestrian_driven_into_is_one_encounter_with_what_perception_knew() {
    let scenario = ScenarioConfig {
        image_width: 64,
        image_height: 32,
        seconds: 5.0,
        ..ScenarioConfig::default()
    };
    let mut feed = Feed::from_scenario(&scenario, None, &mut |_, _| {}).expect("renders");
    let period_s = 1.0 / 30.0;
    for (k, f) in feed.frames.iter_mut().enumerate() {
        f.ego = EgoPose {
            stamp_ns: f.stamp_ns,
            x: SPEED * k as f64 * period_s,
            v: SPEED,
            ..EgoPose::default()
        };
        f.gt = vec![pedestrian()];
    }
    let mut scorer = Scorer::new(&feed);
    for (k, f) in feed.frames.iter().enumerate() {
        let k = k as u64;
        let mut trajectory = [TrajPoint::default(); PLAN_STEPS];
        for (i, p) in trajectory.iter_mut().enumerate() {
            let t = (i + 1) as f32 * PRED_DT;
            *p = TrajPoint {
                t,
                x: (f.ego.x + SPEED * f64::from(t)) as f32,
                v: SPEED as f32,
                ..TrajPoint::default()
            };
        }
        let mut tracks = [TrackState::default(); MAX_TRACKS];
        if k >= TRACKED_FROM {
            tracks[0] = TrackState {
                id: 1,
                x: PEDESTRIAN_X as f32 + 0.5,
                valid: 1,
                ..TrackState::default()
            };
        }
        let record = FrameRecord {
            ego: f.ego,
            tracks,
            trajectory,
            ..FrameRecord::empty(k, "complete")
        };
        scorer.add(&feed, &record);
    }
    let (e, _) = scorer.finish(&feed);
    let colliding = e.planner_frames_checked - e.planner_collision_free;
    assert!(colliding > 0, "{e:?}");
    assert_eq!(e.collisions.len(), 1, "one encounter: {:?}", e.collisions);
    let c = &e.collisions[0];
    assert_eq!((c.actor_id, c.class), (99, "pedestrian"));
    assert_eq!(
        c.plans, colliding,
        "every colliding plan is in the encounter"
    );
    // Every plan from the first colliding one on meets the pedestrian (the checked plans
    // end before the ego reaches it): the frames run on without a gap.
    assert_eq!(c.last_frame - c.frame + 1, c.plans);
    // The ego box's front (3.7 m ahead of its position) meets the pedestrian's back edge
    // 3 s into the plan first: from x = 40 - 0.25 - 3.7 - 30 = 6.05 m, frame 19.
    assert_eq!(c.frame, 19);
    assert!(c.t_s <= 3.0 + 1e-6 && c.t_s > 0.0, "{c:?}");
    let first_distance = PEDESTRIAN_X - SPEED * c.frame as f64 * period_s;
    assert!(
        (c.distance_m.unwrap() - first_distance).abs() < 1e-6,
        "{c:?}"
    );
    assert!(c.last_distance_m.unwrap() < c.distance_m.unwrap());
    assert_eq!(c.tracked_plans, c.last_frame + 1 - TRACKED_FROM, "{c:?}");
    assert_eq!(c.minimum_risk_plans, 0);
    let line = collisions_line(&e).expect("a line when plans collided");
    assert!(
        line.contains("pedestrian 99, frame 19-"),
        "the line names the actor and the frames: {line}"
    );
}
