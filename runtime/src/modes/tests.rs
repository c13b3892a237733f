//! Unit tests of [`super`] (`modes.rs`): one per rule of the ladder policy.

use super::*;
use crate::demo::{demo_graph, ids, Faults};
use crate::plan::PlanConfig;

fn plan() -> Plan {
    demo_graph(64, &Faults::new())
        .build(&PlanConfig::default())
        .unwrap()
}

/// nominal → reduced (no smooth) → safe_stop (no smooth, gradient).
fn cfg() -> LadderConfig {
    LadderConfig {
        modes: vec![
            ModeSpec::new("nominal", &[]),
            ModeSpec::new("reduced", &["smooth"]),
            ModeSpec::new("safe_stop", &["smooth", "gradient"]),
        ],
        degrade_after: 3,
        window: 10,
        recover_after: 5,
        slack_fraction: 0.2,
        risk_slack_fraction: 0.05,
        shed_after: 4,
    }
}

/// nominal → reduced (no smooth) → minimal (no smooth, gradient) → safe_stop (also no
/// fuse, energy).
fn four_rungs() -> LadderConfig {
    LadderConfig {
        modes: vec![
            ModeSpec::new("nominal", &[]),
            ModeSpec::new("reduced", &["smooth"]),
            ModeSpec::new("minimal", &["smooth", "gradient"]),
            ModeSpec::new("safe_stop", &["smooth", "gradient", "fuse", "energy"]),
        ],
        ..cfg()
    }
}

/// A frame of deadline 100 ns with `slack_ns` left (a miss when `miss`).
fn frame(frame: u64, miss: bool, slack_ns: u64) -> FrameOutcome {
    FrameOutcome {
        frame,
        deadline_miss: miss,
        overrun_mask: 0,
        critical_lost: false,
        slack_ns,
        deadline_len_ns: 100,
    }
}

/// An on-time frame with plenty of slack in which the stages of `mask` overran.
fn overran(f: u64, mask: u64) -> FrameOutcome {
    FrameOutcome {
        overrun_mask: mask,
        ..frame(f, false, 50)
    }
}

const fn bit(stage: usize) -> u64 {
    1 << stage
}

#[test]
fn degrades_on_misses_in_window_and_recovers_with_hysteresis() {
    let mut l = Ladder::new(cfg(), &plan()).unwrap();
    assert_eq!(l.disabled_mask(), 0);
    // Two misses: not enough.
    assert!(!l.observe(&frame(0, true, 0)));
    assert!(!l.observe(&frame(1, true, 0)));
    for f in 2..11 {
        assert!(!l.observe(&frame(f, false, 50)));
    }
    // The first two misses left the 10-frame window: a third miss alone does not degrade.
    assert!(!l.observe(&frame(11, true, 0)));
    assert!(!l.observe(&frame(12, true, 0)));
    assert!(l.observe(&frame(13, true, 0)));
    assert_eq!(l.mode(), 1);
    assert_eq!(
        l.disabled_mask(),
        bit(ids::SMOOTH),
        "reduced disables smooth (plan index 2)"
    );
    // Frames between the risk margin (5 %) and the recovery slack (20 %) neither
    // degrade nor count towards recovery: the hysteresis band.
    for f in 14..30 {
        assert!(!l.observe(&frame(f, false, 10)));
    }
    assert_eq!(l.mode(), 1);
    for f in 30..34 {
        assert!(!l.observe(&frame(f, false, 50)));
    }
    // One band frame restarts the run of good frames.
    assert!(!l.observe(&frame(34, false, 19)));
    for f in 35..39 {
        assert!(!l.observe(&frame(f, false, 20)));
    }
    assert!(l.observe(&frame(39, false, 20)));
    assert_eq!(l.mode(), 0);
    let t = l.transitions();
    assert_eq!(t.len(), 2);
    assert_eq!((t[0].from, t[0].to, t[0].after_frame), (0, 1, 13));
    assert_eq!(
        t[0].reason,
        TransitionReason::DeadlineRisk {
            misses: 3,
            low_slack: 0,
            window: 10
        }
    );
    assert_eq!(t[1].reason, TransitionReason::Recovered { good: 5 });
    let words = l.describe(&t[0].reason);
    assert!(
        words.contains("3 frames at deadline risk") && words.contains("3 published on fallback"),
        "{words}"
    );
    assert_eq!(l.residency().iter().sum::<u64>(), 40);
}

#[test]
fn one_burst_moves_one_rung_and_critical_loss_jumps_to_the_last() {
    let mut l = Ladder::new(cfg(), &plan()).unwrap();
    for f in 0..5 {
        l.observe(&frame(f, true, 0));
    }
    assert_eq!(l.mode(), 1, "the window restarts after a transition");
    let mut lost = frame(5, false, 50);
    lost.critical_lost = true;
    assert!(l.observe(&lost));
    assert_eq!(l.mode(), 2);
    assert_eq!(
        l.transitions().last().unwrap().reason,
        TransitionReason::CriticalLost
    );
}

#[test]
fn a_critical_loss_pins_the_last_mode_even_when_the_ladder_is_already_there() {
    let mut l = Ladder::new(cfg(), &plan()).unwrap();
    // Misses take the ladder to the last rung first (as when a panicking stage holds its
    // frame past the deadline before the loss is known).
    for f in 0..20 {
        l.observe(&frame(f, true, 0));
    }
    assert_eq!(l.mode(), 2);
    let before = l.transitions().len();
    let mut lost = frame(20, false, 50);
    lost.critical_lost = true;
    assert!(!l.observe(&lost), "already in the last mode");
    assert_eq!(l.transitions().len(), before + 1, "the loss is logged");
    let t = *l.transitions().last().unwrap();
    assert_eq!(
        (t.from, t.to, t.reason),
        (2, 2, TransitionReason::CriticalLost)
    );
    // No number of good frames brings a lost critical stage back.
    for f in 21..200 {
        assert!(!l.observe(&frame(f, false, 90)));
    }
    assert_eq!(l.mode(), 2);
}

#[test]
fn overruns_alone_never_reach_safe_stop() {
    // Every stage, critical ones included, overruns in every frame, but every frame is
    // published with slack: the only move allowed is shedding a non-critical stage.
    for c in [cfg(), four_rungs()] {
        let last = c.modes.len() - 1;
        let mut l = Ladder::new(c, &plan()).unwrap();
        for f in 0..1000 {
            l.observe(&overran(f, u64::MAX));
            assert_ne!(l.mode(), last, "frame {f}: {:?}", l.transitions());
        }
        assert!(l.transitions().iter().all(|t| matches!(
            t.reason,
            TransitionReason::StageOverruns { .. } | TransitionReason::Recovered { .. }
        )));
        assert!(!l.transitions().is_empty(), "smooth is shed");
    }
    // With no mode but the last disabling anything, overruns never move the ladder.
    let c = LadderConfig {
        modes: vec![
            ModeSpec::new("nominal", &[]),
            ModeSpec::new("safe_stop", &["smooth", "gradient"]),
        ],
        ..cfg()
    };
    let mut l = Ladder::new(c, &plan()).unwrap();
    for f in 0..1000 {
        assert!(!l.observe(&overran(f, u64::MAX)));
    }
    assert!(l.transitions().is_empty());
}

#[test]
fn misses_degrade_rung_by_rung_down_to_safe_stop() {
    let mut l = Ladder::new(four_rungs(), &plan()).unwrap();
    let mut f = 0;
    for rung in 1..=3 {
        for _ in 0..3 {
            l.observe(&frame(f, true, 0));
            f += 1;
        }
        assert_eq!(l.mode(), rung, "three misses per rung");
    }
    let t = l.transitions();
    assert_eq!(t.len(), 3);
    assert!(t.iter().all(|t| t.to == t.from + 1));
    // Misses persisting in the last-but-one rung are what enters safe_stop.
    assert_eq!((t[2].from, t[2].to), (2, 3));
    assert_eq!(
        t[2].reason,
        TransitionReason::CriticalChainMisses {
            misses: 3,
            window: 10
        }
    );
    assert!(l
        .describe(&t[2].reason)
        .contains("critical chain cannot meet"));
}

#[test]
fn low_slack_sheds_load_but_only_misses_stop_the_car() {
    let mut l = Ladder::new(four_rungs(), &plan()).unwrap();
    let mut f = 0;
    for rung in 1..=2 {
        for _ in 0..3 {
            l.observe(&frame(f, false, 1));
            f += 1;
        }
        assert_eq!(
            l.mode(),
            rung,
            "low slack steps down while something can be shed"
        );
    }
    // In minimal, frames at risk by slack alone, however many, do not reach safe_stop.
    for _ in 0..200 {
        assert!(!l.observe(&frame(f, false, 1)));
        f += 1;
    }
    // Two misses among them are not enough either; a third within the window is.
    assert!(!l.observe(&frame(f, true, 0)));
    assert!(!l.observe(&frame(f + 1, true, 0)));
    assert!(!l.observe(&frame(f + 2, false, 1)));
    assert!(l.observe(&frame(f + 3, true, 0)));
    assert_eq!(l.mode(), 3);
}

#[test]
fn slack_below_the_margin_counts_as_risk() {
    let mut l = Ladder::new(cfg(), &plan()).unwrap();
    // 5 ns of a 100 ns deadline is exactly the margin: not at risk.
    for f in 0..10 {
        assert!(!l.observe(&frame(f, false, 5)));
    }
    assert!(!l.observe(&frame(10, false, 4)));
    assert!(!l.observe(&frame(11, false, 0)));
    assert!(l.observe(&frame(12, true, 0)));
    assert_eq!(
        l.transitions()[0].reason,
        TransitionReason::DeadlineRisk {
            misses: 1,
            low_slack: 2,
            window: 10
        }
    );
    // No timing decision (lockstep without a model: unlimited slack) is never at risk,
    // and a zero deadline length (no deadline known) neither.
    let mut l = Ladder::new(cfg(), &plan()).unwrap();
    for f in 0..100 {
        assert!(!l.observe(&frame(f, false, u64::MAX)));
        let mut o = frame(f, false, 0);
        o.deadline_len_ns = 0;
        assert!(!l.observe(&o));
    }
    // A zero margin counts misses only.
    let mut l = Ladder::new(
        LadderConfig {
            risk_slack_fraction: 0.0,
            ..cfg()
        },
        &plan(),
    )
    .unwrap();
    for f in 0..100 {
        assert!(!l.observe(&frame(f, false, 0)));
    }
}

#[test]
fn a_non_critical_overrun_streak_sheds_only_that_stage() {
    let plan = plan();
    let mut l = Ladder::new(four_rungs(), &plan).unwrap();
    assert_eq!(l.shed_mode(ids::SMOOTH), Some(1));
    assert_eq!(l.shed_mode(ids::GRADIENT), Some(2));
    assert_eq!(
        l.shed_mode(ids::FUSE),
        None,
        "only the last rung disables it"
    );
    assert_eq!(l.shed_mode(ids::ENERGY), None, "best-effort");
    assert_eq!(l.shed_mode(ids::SOURCE), None, "critical");
    // Overruns of stages that cannot be shed, and fewer than `shed_after` (4) of one
    // that can, within the window: nothing.
    let unshed = bit(ids::FUSE) | bit(ids::ENERGY) | bit(ids::SOURCE) | bit(ids::SUMMARY);
    for f in 0..30 {
        let g = if f % 4 == 0 && f < 20 {
            bit(ids::GRADIENT)
        } else {
            0
        };
        assert!(!l.observe(&overran(f, unshed | g)), "frame {f}");
    }
    // gradient overruns 4 times in 10 frames: straight to minimal, the first mode that
    // disables it, skipping reduced.
    for f in 30..33 {
        assert!(!l.observe(&overran(f, bit(ids::GRADIENT))));
    }
    assert!(l.observe(&overran(33, bit(ids::GRADIENT))));
    assert_eq!(l.mode(), 2);
    let t = *l.transitions().last().unwrap();
    assert_eq!(
        t.reason,
        TransitionReason::StageOverruns {
            stage: ids::GRADIENT as u8,
            overruns: 4,
            window: 10
        }
    );
    let words = l.describe(&t.reason);
    assert!(
        words.contains("'gradient'") && words.contains("4 of the last 10"),
        "{words}"
    );
    // However long every running stage keeps overrunning, the ladder moves between
    // shedding and recovering, never to safe_stop.
    for f in 34..500 {
        l.observe(&overran(f, !l.disabled_mask()));
        assert!(l.mode() < 3, "frame {f}");
    }

    // Two stages overrunning together: the shallowest shed wins (smooth → reduced).
    let mut l = Ladder::new(four_rungs(), &plan).unwrap();
    for f in 0..4 {
        l.observe(&overran(f, bit(ids::SMOOTH) | bit(ids::GRADIENT)));
    }
    assert_eq!(l.mode(), 1);
    assert!(matches!(
        l.transitions()[0].reason,
        TransitionReason::StageOverruns { stage, .. } if stage == ids::SMOOTH as u8
    ));
    // gradient keeps overrunning: after another `shed_after` frames, minimal.
    for f in 4..8 {
        l.observe(&overran(f, bit(ids::GRADIENT)));
    }
    assert_eq!(l.mode(), 2);

    // shed_after = 0: overruns never shed.
    let mut l = Ladder::new(
        LadderConfig {
            shed_after: 0,
            ..four_rungs()
        },
        &plan,
    )
    .unwrap();
    for f in 0..100 {
        assert!(!l.observe(&overran(f, u64::MAX)));
    }
}

#[test]
fn a_shed_stage_comes_back_after_the_recovery_hysteresis() {
    let mut l = Ladder::new(four_rungs(), &plan()).unwrap();
    for f in 0..4 {
        l.observe(&overran(f, bit(ids::SMOOTH)));
    }
    assert_eq!(l.mode(), 1);
    // Four good frames: not yet (recover_after = 5); overruns of a stage that is not
    // disabled and cannot be shed do not hold recovery back.
    for f in 4..8 {
        assert!(!l.observe(&overran(f, bit(ids::FUSE))));
    }
    assert!(l.observe(&frame(8, false, 50)));
    assert_eq!(l.mode(), 0);
    assert_eq!(
        l.transitions()[1].reason,
        TransitionReason::Recovered { good: 5 }
    );
}

#[test]
fn bad_configs_are_rejected_with_messages() {
    let mut c = cfg();
    c.modes[1].disable.push("no_such_stage".into());
    let e = Ladder::new(c, &plan()).unwrap_err().to_string();
    assert!(
        e.contains("'reduced'") && e.contains("'no_such_stage'") && e.contains("smooth"),
        "{e}"
    );
    let mut c = cfg();
    c.window = 0;
    assert!(Ladder::new(c, &plan())
        .unwrap_err()
        .to_string()
        .contains("window"));
    let mut c = cfg();
    c.degrade_after = 11;
    assert!(Ladder::new(c, &plan()).is_err());
    let mut c = cfg();
    c.slack_fraction = 1.5;
    assert!(Ladder::new(c, &plan()).is_err());
    let mut c = cfg();
    c.risk_slack_fraction = 0.3;
    let e = Ladder::new(c, &plan()).unwrap_err().to_string();
    assert!(e.contains("risk_slack_fraction = 0.3"), "{e}");
    let mut c = cfg();
    c.risk_slack_fraction = -0.1;
    assert!(Ladder::new(c, &plan()).is_err());
    let mut c = cfg();
    c.shed_after = 11;
    let e = Ladder::new(c, &plan()).unwrap_err().to_string();
    assert!(e.contains("shed_after = 11"), "{e}");
    LadderConfig::default().validate().unwrap();
}
