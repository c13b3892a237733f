//! Initial placement of the ego and the actors in road coordinates.
//!
//! Promises: the ego is agent 0 at [`EGO_START_S`](super::EGO_START_S) in its lane; actors get
//! ids `1..=actors` and start with gaps that the simulation can keep collision-free. The
//! random numbers come from the caller's placement stream in a fixed order: changing that order
//! changes every scenario. Cost: one vector of `actors + 1` agents.

use super::traffic::{overlaps, Agent, Cross, Idm, Kind, CYCLIST_IDM, EGO_IDM, WALKER_IDM};
use super::{
    Rng, ScenarioConfig, EGO_HEIGHT, EGO_LENGTH, EGO_REAR_TO_CENTRE, EGO_START_S, EGO_TARGET_SPEED,
    EGO_WIDTH,
};
use crate::types::ActorClass;

/// Places the ego (index 0) and `config.actors` actors in road coordinates.
pub(super) fn place_agents(config: &ScenarioConfig, rng: &mut Rng) -> Vec<Agent> {
    let lanes = config.lanes;
    let w = config.lane_width;
    let half = 0.5 * f64::from(lanes) * w;
    let lane_offset = |lane: u32| (f64::from(lane) + 0.5 - 0.5 * f64::from(lanes)) * w;
    let ego_lane = lanes / 2;
    let ego_s = EGO_START_S + EGO_REAR_TO_CENTRE;
    let template = Agent {
        id: 0,
        class: ActorClass::Car,
        kind: Kind::Ego,
        length: EGO_LENGTH,
        width: EGO_WIDTH,
        height: EGO_HEIGHT,
        s: ego_s,
        d: lane_offset(ego_lane),
        d_dot: 0.0,
        v: 10.0,
        dir: 1.0,
        v0: EGO_TARGET_SPEED,
        idm: EGO_IDM,
        lane: ego_lane,
        lc: None,
        lc_duration: 4.0,
        cooldown_until: 0.0,
        desire: None,
        cross: Cross::Waiting,
        cross_time: 0.0,
        cross_pause: 0.0,
        cross_speed: 0.0,
        cross_to: 0.0,
    };
    let mut agents = vec![template.clone()];

    let n = config.actors;
    let n_cars = (0.6 * n as f64).round() as usize;
    let n_cyc = ((0.2 * n as f64).round() as usize).min(n - n_cars);
    let n_ped = n - n_cars - n_cyc;
    let n_cross = n_ped.div_ceil(2);
    let n_walk = n_ped - n_cross;

    // The stretch the ego drives through, where actors are spread.
    let route_end = ego_s + EGO_TARGET_SPEED * config.seconds;
    let s_lo = 4.0;
    let s_hi = (route_end + 60.0).max(s_lo + 100.0);

    let fits = |agents: &[Agent], c: &Agent| {
        agents.iter().all(|p| {
            if !overlaps(c.interval(half), p.interval(half)) {
                return true;
            }
            let gap = (c.s - p.s).abs() - c.half_len() - p.half_len();
            let dv = c.v - p.v;
            gap >= 3.0 + 1.5 * c.v.max(p.v) + dv * dv / 3.0
        })
    };
    let place = |agents: &mut Vec<Agent>, mut c: Agent, lo: f64, hi: f64, rng: &mut Rng| {
        c.id = agents.len() as u32;
        c.s = rng.range_f64(lo, hi);
        let mut tries = 0;
        while !fits(agents, &c) && tries < 100_000 {
            c.s += 4.0;
            tries += 1;
        }
        agents.push(c);
    };

    for _ in 0..n_cars {
        let v0 = rng.range_f64(8.0, 16.0);
        let lane = rng.below(u64::from(lanes)) as u32;
        let desire = if lanes > 1 && rng.chance(0.4) {
            let when = rng.range_f64(2.0, (0.7 * config.seconds).max(2.5));
            let dl = if lane == 0 {
                1
            } else if lane + 1 == lanes || rng.chance(0.5) {
                -1
            } else {
                1
            };
            Some((when, dl))
        } else {
            None
        };
        let c = Agent {
            class: ActorClass::Car,
            kind: Kind::Car,
            length: rng.range_f64(4.2, 4.8),
            width: rng.range_f64(1.8, 2.0),
            height: rng.range_f64(1.4, 1.6),
            d: lane_offset(lane),
            v: v0,
            v0,
            idm: Idm {
                a: rng.range_f64(1.2, 1.8),
                b: 2.0,
                t: rng.range_f64(1.2, 1.6),
                s0: 2.0,
            },
            lane,
            lc_duration: rng.range_f64(3.0, 5.0),
            desire,
            ..template.clone()
        };
        place(&mut agents, c, s_lo, s_hi, rng);
    }
    for _ in 0..n_cyc {
        let v0 = rng.range_f64(4.0, 6.0);
        let c = Agent {
            class: ActorClass::Cyclist,
            kind: Kind::Cyclist,
            length: rng.range_f64(1.7, 1.9),
            width: 0.6,
            height: rng.range_f64(1.6, 1.8),
            d: -half + 0.6,
            v: v0,
            v0,
            idm: CYCLIST_IDM,
            lane: 0,
            ..template.clone()
        };
        place(&mut agents, c, s_lo, s_hi, rng);
    }
    for _ in 0..n_walk {
        let v0 = rng.range_f64(1.0, 1.6);
        let side = if rng.chance(0.5) { 1.0 } else { -1.0 };
        let forward = rng.chance(0.5);
        let c = Agent {
            class: ActorClass::Pedestrian,
            kind: Kind::Walker,
            length: rng.range_f64(0.55, 0.65),
            width: rng.range_f64(0.55, 0.65),
            height: rng.range_f64(1.6, 1.9),
            d: side * (half + if forward { 1.5 } else { 2.4 }),
            v: v0,
            v0,
            dir: if forward { 1.0 } else { -1.0 },
            idm: WALKER_IDM,
            ..template.clone()
        };
        let lo = if forward { s_lo } else { 60.0 };
        place(&mut agents, c, lo, s_hi.max(lo + 50.0), rng);
    }
    let cross_lo = 60.0;
    let cross_hi = (ego_s + 0.85 * EGO_TARGET_SPEED * config.seconds).max(cross_lo + 40.0);
    let first_crosser = agents.len();
    for _ in 0..n_cross {
        let side = if rng.chance(0.5) { 1.0 } else { -1.0 };
        let mut s = rng.range_f64(cross_lo, cross_hi);
        let mut tries = 0;
        while agents[first_crosser..]
            .iter()
            .any(|p| (p.s - s).abs() < 12.0)
            && tries < 100_000
        {
            s += 13.0;
            tries += 1;
        }
        // The ego averages about 11 m/s; a crossing is scheduled 6–8.5 s before it would arrive, so
        // the ego (and traffic) must slow down for it when it can.
        let arrival = (s - ego_s) / 11.0;
        let c = Agent {
            id: agents.len() as u32,
            class: ActorClass::Pedestrian,
            kind: Kind::Crosser,
            length: rng.range_f64(0.55, 0.65),
            width: rng.range_f64(0.55, 0.65),
            height: rng.range_f64(1.6, 1.9),
            s,
            d: side * (half + 0.4),
            v: 0.0,
            v0: 0.0,
            cross: Cross::Waiting,
            cross_time: (arrival - rng.range_f64(6.0, 8.5)).max(0.5),
            cross_pause: rng.range_f64(3.0, 8.0),
            cross_speed: rng.range_f64(1.2, 1.5),
            cross_to: -side * (half + 0.4),
            ..template.clone()
        };
        agents.push(c);
    }
    agents
}
