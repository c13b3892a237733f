//! Unit tests of [`super`] (`rt.rs`), kept in their own file so the module stays short.

use super::*;

/// `true` only for [`Grant::Granted`].
fn is_granted(g: &Grant) -> bool {
    matches!(g, Grant::Granted)
}

fn granted_or_explained(g: &Grant) {
    match g {
        Grant::Granted => {}
        Grant::Refused { reason } => assert!(!reason.trim().is_empty()),
        Grant::NotRequested => panic!("expected Granted or Refused, got NotRequested"),
    }
}

fn refused(g: &Grant) -> &str {
    match g {
        Grant::Refused { reason } => {
            assert!(!reason.trim().is_empty());
            reason
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[test]
fn pin_then_restore_affinity() {
    std::thread::spawn(|| {
        let Some(original) = current_thread_affinity() else {
            // Unknown affinity (non-Linux): pinning is refused with a reason.
            granted_or_explained(&pin_current_thread(0));
            return;
        };
        assert!(!original.is_empty());
        // Core 0 unless the cpuset excludes it.
        let core = original[0];
        let g = pin_current_thread(core);
        granted_or_explained(&g);
        if is_granted(&g) {
            assert_eq!(current_thread_affinity(), Some(vec![core]));
        }
        let r = set_current_thread_affinity(&original);
        granted_or_explained(&r);
        if is_granted(&r) {
            assert_eq!(current_thread_affinity(), Some(original));
        }
    })
    .join()
    .unwrap();
}

#[test]
fn invalid_core_is_refused() {
    let before = current_thread_affinity();
    let reason = refused(&pin_current_thread(100_000)).to_owned();
    assert!(reason.contains("100000"), "{reason}");
    refused(&pin_current_thread(usize::MAX));
    refused(&set_current_thread_affinity(&[]));
    assert_eq!(
        current_thread_affinity(),
        before,
        "refusal must not change affinity"
    );
}

#[test]
fn out_of_range_priority_is_refused() {
    for p in [0, 100, -1, i32::MIN, i32::MAX] {
        let g = set_current_thread_fifo(p);
        refused(&g);
    }
}

#[test]
fn fifo_then_back_to_normal() {
    std::thread::spawn(|| {
        let g = set_current_thread_fifo(10);
        granted_or_explained(&g);
        let r = reset_current_thread_to_normal();
        assert!(is_granted(&r), "returning to SCHED_OTHER must work: {r:?}");
        #[cfg(target_os = "linux")]
        {
            // SAFETY: sched_getscheduler(0) only queries the calling thread's policy.
            let policy = unsafe { libc::sched_getscheduler(0) };
            assert_eq!(policy, libc::SCHED_OTHER);
        }
    })
    .join()
    .unwrap();
}

#[test]
fn lock_then_unlock_memory() {
    let g = lock_all_memory();
    unlock_all_memory();
    granted_or_explained(&g);
}

#[test]
fn apply_request_to_lane_thread() {
    std::thread::spawn(|| {
        let original = current_thread_affinity();
        let core = original.as_ref().map_or(0, |o| o[0]);
        let req = RtRequest {
            pin_cores: Some(vec![100_000, core]),
            fifo_priority: Some(5),
            ..RtRequest::default()
        };
        let t = apply_to_current_thread("lane 1", 1, &req);
        assert_eq!(t.thread, "lane 1");
        assert_eq!(t.core, Some(core));
        assert_eq!(t.fifo_priority, Some(5));
        granted_or_explained(&t.pinning);
        granted_or_explained(&t.priority);
        // Lane 0 maps to the invalid core and must be refused, not crash.
        let t0 = apply_to_current_thread("lane 0", 0, &req);
        assert_eq!(t0.core, Some(100_000));
        refused(&t0.pinning);

        let none = apply_to_current_thread("lane 2", 2, &RtRequest::default());
        assert_eq!(none.core, None);
        assert_eq!(none.pinning, Grant::NotRequested);
        assert_eq!(none.priority, Grant::NotRequested);
        let empty = RtRequest {
            pin_cores: Some(vec![]),
            ..RtRequest::default()
        };
        refused(&apply_to_current_thread("lane 3", 3, &empty).pinning);

        let _ = reset_current_thread_to_normal();
        if let Some(o) = original {
            let _ = set_current_thread_affinity(&o);
        }
    })
    .join()
    .unwrap();
}

fn sample_grants() -> OsGrants {
    OsGrants {
        memory_lock: Grant::Granted,
        threads: vec![
            ThreadGrant {
                thread: "lane 0".into(),
                core: Some(0),
                pinning: Grant::Granted,
                fifo_priority: Some(80),
                priority: Grant::Granted,
            },
            ThreadGrant {
                thread: "lane 1".into(),
                core: Some(1),
                pinning: Grant::Granted,
                fifo_priority: Some(80),
                priority: Grant::Refused {
                    reason: "EPERM: run as root or grant CAP_SYS_NICE \"quoted\"".into(),
                },
            },
            ThreadGrant {
                thread: "watchdog".into(),
                core: None,
                pinning: Grant::NotRequested,
                fifo_priority: None,
                priority: Grant::NotRequested,
            },
        ],
        rt_throttling: Some("950000/1000000 us".into()),
    }
}

#[test]
fn summary_lines_mention_each_thread() {
    let g = sample_grants();
    let lines = g.summary_lines();
    assert!(
        lines.iter().any(|l| l == "memory lock: granted"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("950000/1000000 us")),
        "{lines:?}"
    );
    for t in &g.threads {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{}:", t.thread))),
            "{lines:?}"
        );
    }
    assert!(lines.contains(&"lane 0: core 0 pinned, SCHED_FIFO 80 granted".to_owned()));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("lane 1: core 1 pinned, SCHED_FIFO 80 refused (EPERM")));
    assert!(lines.contains(&"watchdog: not pinned, SCHED_OTHER".to_owned()));
    assert!(!g.all_granted());
    let mut ok = g.clone();
    ok.threads[1].priority = Grant::Granted;
    assert!(ok.all_granted());
    assert!(OsGrants::default().all_granted());
    assert_eq!(OsGrants::default().memory_lock, Grant::NotRequested);
}

#[test]
fn os_grants_serde_round_trip() {
    let g = sample_grants();
    let json = serde_json::to_string(&g).unwrap();
    let back: OsGrants = serde_json::from_str(&json).unwrap();
    assert_eq!(back, g);
    let req = RtRequest {
        pin_cores: Some(vec![2, 3]),
        auto_pin: true,
        fifo_priority: Some(80),
        lock_memory: true,
    };
    let back: RtRequest = serde_json::from_str(&serde_json::to_string(&req).unwrap()).unwrap();
    assert_eq!(back, req);
}

/// Diagnostic: shows what this machine grants (`cargo test rt -- --nocapture`).
#[test]
fn report_what_the_os_grants() {
    std::thread::spawn(|| {
        let original = current_thread_affinity();
        let req = RtRequest {
            pin_cores: Some(original.clone().unwrap_or_else(|| vec![0])),
            fifo_priority: Some(10),
            ..RtRequest::default()
        };
        let grants = OsGrants {
            memory_lock: Grant::NotRequested,
            threads: vec![apply_to_current_thread("lane 0", 0, &req)],
            rt_throttling: read_rt_throttling(),
        };
        let _ = reset_current_thread_to_normal();
        if let Some(o) = original {
            let _ = set_current_thread_affinity(&o);
        }
        for line in grants.summary_lines() {
            eprintln!("rt: {line}");
        }
        assert_eq!(grants.summary_lines().len(), 3);
    })
    .join()
    .unwrap();
}

#[test]
fn rt_throttling_and_online_cores() {
    assert!(online_cores() >= 1);
    if let Some(t) = read_rt_throttling() {
        assert!(t.ends_with("us") || t.ends_with("(unthrottled)"), "{t}");
        assert!(t.contains('/'), "{t}");
    }
    #[cfg(target_os = "linux")]
    {
        assert_eq!(
            imp::parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(imp::parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(imp::parse_cpu_list("3-1"), None);
        assert_eq!(imp::parse_cpu_list("x"), None);
    }
}

#[test]
fn automatic_pinning_adapts_to_the_allowed_cores() {
    let auto = RtRequest::realtime();
    assert!(auto.auto_pin && auto.pin_cores.is_none() && auto.asks_anything());
    assert!(!RtRequest::default().asks_anything());
    // Two lanes on a 2-core machine: one core each.
    let (r, why) = resolve_pinning(&auto, 2, Some(&[0, 1]));
    assert_eq!((r.pin_cores.as_deref(), why), (Some(&[0, 1][..]), None));
    // More cores than lanes: the last ones (the first take more interrupts).
    let (r, why) = resolve_pinning(&auto, 2, Some(&[0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!((r.pin_cores.as_deref(), why), (Some(&[6, 7][..]), None));
    // A cpuset (taskset -c 2,5,9): only those.
    let (r, _) = resolve_pinning(&auto, 2, Some(&[2, 5, 9]));
    assert_eq!(r.pin_cores.as_deref(), Some(&[5, 9][..]));
    // Fewer cores than lanes, or unknown: nothing pinned, and the reason says why.
    let (r, why) = resolve_pinning(&auto, 4, Some(&[0, 1]));
    assert_eq!(r.pin_cores, None);
    let why = why.expect("a reason");
    assert!(why.contains("4 lanes") && why.contains("[0, 1]"), "{why}");
    let (r, why) = resolve_pinning(&auto, 2, None);
    assert!(r.pin_cores.is_none() && why.is_some_and(|w| w.contains("pin_cores")));
    // Explicit cores, or no auto pinning: untouched.
    let explicit = RtRequest {
        pin_cores: Some(vec![3]),
        ..RtRequest::realtime()
    };
    assert_eq!(
        resolve_pinning(&explicit, 2, Some(&[0, 1])),
        (explicit, None)
    );
    let off = RtRequest::default();
    assert_eq!(resolve_pinning(&off, 2, Some(&[0, 1])), (off, None));
    // This machine: lanes up to the allowed core count get pinned.
    if let Some(allowed) = allowed_cores() {
        let (r, why) = resolve_pinning(&auto, allowed.len(), Some(&allowed));
        assert_eq!((r.pin_cores, why), (Some(allowed), None));
    }
}

#[test]
fn memory_lock_is_not_attempted_where_later_allocations_would_fail() {
    // Unlimited, or CAP_IPC_LOCK: go ahead (the kernel decides).
    assert_eq!(memlock_precheck(None, false), None);
    assert_eq!(memlock_precheck(Some(8 << 20), true), None);
    // An unprivileged user with the usual 8 MiB limit: refused up front, with what to do.
    let reason = refused(&memlock_precheck(Some(8 << 20), false).expect("refused")).to_owned();
    assert!(
        reason.contains("8192 KiB")
            && reason.contains("CAP_IPC_LOCK")
            && reason.contains("ulimit -l"),
        "{reason}"
    );
}

#[test]
fn a_refused_request_reads_as_one_clear_line_per_thread() {
    // What an unprivileged user sees for the default request (the EPERM texts are the
    // ones `set_fifo` and `set_affinity` produce).
    let g = OsGrants {
        memory_lock: memlock_precheck(Some(8 << 20), false).unwrap(),
        threads: vec![ThreadGrant {
            thread: "redline-lane-0".into(),
            core: Some(0),
            pinning: Grant::Granted,
            fifo_priority: Some(40),
            priority: Grant::Refused {
                reason: "EPERM (Operation not permitted): run as root or grant CAP_SYS_NICE".into(),
            },
        }],
        rt_throttling: Some("950000/1000000 us".into()),
    };
    let lines = g.summary_lines();
    assert!(
        lines[0].starts_with("memory lock: refused (not attempted: RLIMIT_MEMLOCK"),
        "{lines:?}"
    );
    assert_eq!(
        lines[2],
        "redline-lane-0: core 0 pinned, SCHED_FIFO 40 refused (EPERM (Operation not permitted): \
         run as root or grant CAP_SYS_NICE)"
    );
    assert!(!g.all_granted());
}

#[test]
fn automatic_pinning_is_skipped_without_sched_fifo() {
    std::thread::spawn(|| {
        let before = current_thread_affinity();
        let core = before.as_ref().map_or(0, |o| o[0]);
        // Priority 0 is refused without asking the kernel (out of range): not pinned.
        let req = RtRequest {
            pin_cores: Some(vec![core]),
            auto_pin: true,
            fifo_priority: Some(0),
            lock_memory: false,
        };
        let t = apply_to_current_thread("lane 0", 0, &req);
        refused(&t.priority);
        assert!(
            refused(&t.pinning).contains("SCHED_FIFO was not granted"),
            "{t:?}"
        );
        assert_eq!(current_thread_affinity(), before, "nothing was pinned");
        // No SCHED_FIFO asked: not pinned either.
        let t = apply_to_current_thread(
            "lane 0",
            0,
            &RtRequest {
                fifo_priority: None,
                ..req.clone()
            },
        );
        assert!(refused(&t.pinning).contains("automatic pinning skipped"));
        assert!(t
            .summary_line()
            .contains("pinning refused (automatic pinning skipped"));
        // Explicit cores are pinned whatever the priority.
        let t = apply_to_current_thread(
            "lane 0",
            0,
            &RtRequest {
                auto_pin: false,
                ..req
            },
        );
        granted_or_explained(&t.pinning);
        if let Some(b) = before {
            let _ = set_current_thread_affinity(&b);
        }
    })
    .join()
    .unwrap();
}
