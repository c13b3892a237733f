//! Faults: an injected stall (watchdog records the overrun, the frame publishes its
//! fallback before its deadline, the ladder degrades and recovers), a hung stage (later
//! frames still published on time), lanes lost one after another to stages slowed far past
//! their budgets (1, 2 and 4 lanes, also on 64 KiB stacks: no job lost or run twice, frame
//! order kept, every frame published), panics (a stage's contained, a publisher's or a
//! timing model's re-raised by `run` instead of hanging), and a modeled-timing replay whose
//! mode sequence and outputs are reproducible on any lane count.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use redline_runtime::demo::{demo_graph, demo_ladder, ids, Faults};
use redline_runtime::modes::TransitionReason;
use redline_runtime::rt::RtRequest;
use redline_runtime::{
    Fallback, FallbackReason, FrameInfo, FrameStatus, GraphBuilder, LadderConfig, PlanConfig,
    Published, ReleaseMode, Runtime, RuntimeConfig, RuntimeError, Stage, StageError, StageIo,
};

const PERIOD: u64 = 20_000_000;

/// The real-time tests measure wall-clock deadlines: run them one at a time, and with
/// SCHED_FIFO where the OS grants it (it does for root, as in CI here; otherwise the
/// report says so and the tests run at normal priority).
static SERIAL: Mutex<()> = Mutex::new(());

fn ladder() -> LadderConfig {
    demo_ladder(2, 10, 20)
}

fn realtime(faults: &Arc<Faults>, hang_after_ns: u64) -> Runtime {
    let plan = demo_graph(4096, faults)
        .build(&PlanConfig {
            lanes: 2,
            frame_slots: 2,
        })
        .unwrap();
    let cfg = RuntimeConfig {
        release: ReleaseMode::RealTime,
        period_ns: PERIOD,
        publish_margin_ns: 4_000_000,
        hang_after_ns,
        ladder: ladder(),
        rt: redline_runtime::rt::RtRequest {
            pin_cores: None,
            auto_pin: false,
            fifo_priority: Some(40),
            lock_memory: true,
        },
        ..RuntimeConfig::default()
    };
    Runtime::new(plan, cfg).unwrap()
}

/// Records what a test needs to check about every published frame.
#[derive(Default)]
struct Seen {
    frames: Vec<u64>,
    statuses: Vec<FrameStatus>,
    late: Vec<(u64, u64, FrameStatus)>,
}

impl Seen {
    fn publisher(&mut self) -> impl FnMut(&Published<'_>) + Send + '_ {
        move |p: &Published<'_>| {
            self.frames.push(p.info.frame);
            self.statuses.push(p.status);
            if p.latency_ns >= PERIOD {
                self.late.push((p.info.frame, p.latency_ns, p.status));
            }
        }
    }
}

#[test]
fn stall_is_detected_published_as_fallback_degrades_and_recovers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let mut rt = realtime(&faults, 500_000_000);
    let mut seen = Seen::default();
    rt.run(40, &mut seen.publisher()); // warm-up, no fault
    faults.stall(ids::SMOOTH, 25_000_000); // 25 ms: past its budget and the 20 ms deadline
    rt.run(40, &mut seen.publisher());
    faults.stall(ids::SMOOTH, 0);
    rt.run(120, &mut seen.publisher());
    let r = rt.report();

    // Every frame published, in order, none after its deadline.
    assert_eq!(seen.frames, (0..200).collect::<Vec<u64>>());
    assert!(
        seen.late.is_empty(),
        "frames published after their deadline: {:?}",
        seen.late
    );
    assert_eq!(r.late_publishes, 0);
    // The watchdog saw the overrun and the scheduler recorded it with its size.
    let smooth = &r.stages[ids::SMOOTH];
    assert!(smooth.counters.overruns > 0, "{}", r.table());
    assert!(r
        .overruns
        .iter()
        .any(|o| o.stage == ids::SMOOTH && o.over_by_ns > 20_000_000));
    assert!(r.watchdog_delay.count > 0);
    // Frames that could not finish published their fallback (held outputs).
    assert!(r.misses_deadline_guard > 0);
    assert!(seen
        .statuses
        .iter()
        .any(|s| matches!(s, FrameStatus::Fallback(_))));
    // The ladder went down, and came back to nominal once the stall stopped.
    assert!(r.transitions.iter().any(|t| t.after_frame >= 40
        && t.after_frame < 80
        && t.from == "nominal"
        && t.to == "reduced"));
    let last = r.transitions.last().expect("transitions recorded");
    assert_eq!(last.to, "nominal", "{:#?}", r.transitions);
    assert_eq!(rt.mode(), 0);
    // The last 40 frames ran complete.
    assert!(seen.statuses[160..]
        .iter()
        .all(|s| *s == FrameStatus::Complete));
}

#[test]
fn hung_stage_is_written_off_and_later_frames_are_published_on_time() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let mut rt = realtime(&faults, 60_000_000);
    let mut seen = Seen::default();
    rt.run(20, &mut seen.publisher());
    faults.hang(ids::TEMPORAL);
    rt.run(100, &mut seen.publisher());
    let r = rt.report();
    faults.release_hang();

    assert_eq!(seen.frames, (0..120).collect::<Vec<u64>>());
    if !seen.late.is_empty() {
        let _ = rt.write_chrome_trace(std::fs::File::create("/tmp/hung_trace.json").unwrap());
    }
    assert!(
        seen.late.is_empty(),
        "frames published after their deadline: {:?}\n{}",
        seen.late,
        r.table()
    );
    assert_eq!(r.late_publishes, 0);
    assert_eq!(r.lost_stages.len(), 1, "{:#?}", r.lost_stages);
    assert_eq!(r.lost_stages[0].stage, "temporal");
    // After the loss, the stage's fallback stands in and frames complete degraded.
    assert!(r.stages[ids::TEMPORAL].counters.lost_fallbacks > 50);
    assert!(
        seen.statuses[80..]
            .iter()
            .all(|s| *s == FrameStatus::Degraded),
        "{:?}",
        &seen.statuses[80..]
    );
}

/// Every lane lost: with one lane, the hung stage takes the only lane with it. Jobs
/// dispatched to the lost lane must neither recurse (this overflowed the stack before)
/// nor vanish: frames are published on fallback while nothing can run, with the reason
/// (no live lane) in their status and in the report; the run returns although the stage
/// is still stuck; the lane comes back when the written-off stage returns and runs the
/// queued work. All under 64 KiB stacks (the run's thread and the lane), to prove the
/// redirect path is bounded.
#[test]
fn losing_every_lane_still_publishes_every_frame_within_a_small_stack() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let plan = demo_graph(4096, &faults)
        .build(&PlanConfig {
            lanes: 1,
            frame_slots: 2,
        })
        .unwrap();
    let cfg = RuntimeConfig {
        release: ReleaseMode::RealTime,
        period_ns: PERIOD,
        publish_margin_ns: 4_000_000,
        hang_after_ns: 30_000_000,
        ladder: ladder(),
        lane_stack_bytes: 64 * 1024,
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg).unwrap();
    let f = faults.clone();
    let (seen, during, after) = std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut seen = Vec::new();
            let mut publisher = |p: &Published<'_>| seen.push((p.info.frame, p.status));
            rt.run(10, &mut publisher);
            f.hang(ids::TEMPORAL);
            // The stage never returns during this run: the run must end anyway.
            rt.run(30, &mut publisher);
            let during = rt.report();
            f.release_hang();
            std::thread::sleep(Duration::from_millis(50));
            rt.run(20, &mut publisher);
            (seen, during, rt.report())
        })
        .unwrap()
        .join()
        .expect("the run thread returned (no stack overflow, no panic)");
    faults.release_hang();
    let frames: Vec<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(frames, (0..60).collect::<Vec<u64>>(), "{}", during.table());
    assert_eq!(during.lost_stages.len(), 1, "{}", during.table());
    // Every lane lost: the report says so and why, and so do the frames.
    assert_eq!(during.lanes_live, 0, "{}", during.table());
    assert!(during.misses_no_live_lane > 0, "{}", during.table());
    assert!(
        during.table().contains("NO LIVE LANE"),
        "{}",
        during.table()
    );
    assert!(seen
        .iter()
        .any(|s| s.1 == FrameStatus::Fallback(FallbackReason::NoLiveLane)));
    // The stage returned: its lane is back and frames finish again (degraded: the
    // written-off stage's fallback stands in for it).
    assert_eq!(after.lanes_live, 1, "{}", after.table());
    assert_eq!(after.returned_stages, 1, "{}", after.table());
    assert!(
        seen[50..].iter().all(|s| s.1 == FrameStatus::Degraded),
        "{:?}\n{}",
        &seen[40..],
        after.table()
    );
}

/// Stages of the lost-lanes test: 6 stages over 4 lanes (`lane(i)`, modulo the lane count)
/// with fan-out and fan-in. `src → {a, b, d}`, `{a, b} → c`, `{c, d} → sink`.
const RECORDED: [(&str, &[&str]); 6] = [
    ("src", &[]),
    ("a", &["src"]),
    ("b", &["src"]),
    ("c", &["a", "b"]),
    ("d", &["src"]),
    ("sink", &["c", "d"]),
];
const MAX_FRAMES: usize = 256;

/// What every stage of the lost-lanes test did, per frame: entries into `run` and into the
/// fallback, and per-stage frame order. Stage `s` sleeps `slow_ns` in its first run at
/// frame `slow_from[s]` or later (once), far past its budget and past `hang_after`.
struct Book {
    runs: Vec<AtomicU32>,
    fallbacks: Vec<AtomicU32>,
    /// Per stage: 1 + the last frame it entered (run or fallback), 0 = none yet.
    last: Vec<AtomicU64>,
    out_of_order: AtomicU64,
    slow_from: [u64; 6],
    slowed: Vec<AtomicBool>,
    slow_ns: u64,
}

impl Book {
    fn new(slow_from: [u64; 6], slow_ns: u64) -> Arc<Book> {
        let n = RECORDED.len() * MAX_FRAMES;
        Arc::new(Book {
            runs: (0..n).map(|_| AtomicU32::new(0)).collect(),
            fallbacks: (0..n).map(|_| AtomicU32::new(0)).collect(),
            last: (0..RECORDED.len()).map(|_| AtomicU64::new(0)).collect(),
            out_of_order: AtomicU64::new(0),
            slow_from,
            slowed: (0..RECORDED.len())
                .map(|_| AtomicBool::new(false))
                .collect(),
            slow_ns,
        })
    }

    fn enter(&self, stage: usize, frame: u64, fallback: bool) {
        let cell = stage * MAX_FRAMES + frame as usize;
        let counts = if fallback {
            &self.fallbacks
        } else {
            &self.runs
        };
        counts[cell].fetch_add(1, Ordering::SeqCst);
        if self.last[stage].swap(frame + 1, Ordering::SeqCst) > frame {
            self.out_of_order.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn executed(&self, stage: usize, frame: usize) -> u32 {
        let cell = stage * MAX_FRAMES + frame;
        self.runs[cell].load(Ordering::SeqCst) + self.fallbacks[cell].load(Ordering::SeqCst)
    }

    fn total(&self, counts: &[AtomicU32], stage: usize) -> u64 {
        counts[stage * MAX_FRAMES..(stage + 1) * MAX_FRAMES]
            .iter()
            .map(|c| u64::from(c.load(Ordering::SeqCst)))
            .sum()
    }
}

struct Recorded {
    id: usize,
    book: Arc<Book>,
}

impl Stage for Recorded {
    fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let b = &self.book;
        b.enter(self.id, f.frame, false);
        if f.frame >= b.slow_from[self.id] && !b.slowed[self.id].swap(true, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_nanos(b.slow_ns));
        }
        io.output::<u64>(0)?[0] = f.frame;
        Ok(())
    }

    fn make_fallback(&self) -> Box<dyn Fallback> {
        Box::new(RecordedFallback {
            id: self.id,
            book: self.book.clone(),
        })
    }
}

struct RecordedFallback {
    id: usize,
    book: Arc<Book>,
}

impl Fallback for RecordedFallback {
    fn fallback(&mut self, f: &FrameInfo, out: &mut StageIo<'_>) {
        self.book.enter(self.id, f.frame, true);
        if let Ok(o) = out.output::<u64>(0) {
            o[0] = u64::MAX;
        }
    }
}

/// Drives the lost-lanes scenario on `lanes` lanes; `small_stacks` runs the scheduler and
/// the lanes on 64 KiB stacks. Returns the book, what was published and the report.
fn lose_lanes(
    lanes: usize,
    small_stacks: bool,
) -> (Arc<Book>, Vec<(u64, FrameStatus)>, redline_runtime::Report) {
    const HANG_AFTER: u64 = 30_000_000;
    // Stage s is slowed to 100 ms (its budget is 2 ms; written off after 30 ms) in its
    // first run at frame 10 + 4 s or later: one after another, every stage is written off,
    // so every lane count loses all its lanes at least once.
    let book = Book::new([10, 14, 18, 22, 26, 30], 100_000_000);
    let mut g = GraphBuilder::new();
    for (i, (name, reads)) in RECORDED.iter().enumerate() {
        let mut s = g
            .stage(
                name,
                Recorded {
                    id: i,
                    book: book.clone(),
                },
            )
            .budget_us(2_000)
            .lane(i);
        for r in reads.iter() {
            s = s.reads::<u64>(r, 1);
        }
        s.writes::<u64>(name, 1);
    }
    g.publish("sink");
    let plan = g
        .build(&PlanConfig {
            lanes,
            frame_slots: 2,
        })
        .unwrap();
    let cfg = RuntimeConfig {
        release: ReleaseMode::RealTime,
        period_ns: 10_000_000,
        publish_margin_ns: 2_000_000,
        hang_after_ns: HANG_AFTER,
        // SCHED_FIFO where granted, as the other real-time tests here: on a machine shared
        // with other real-time processes a normal-priority watchdog can be starved past
        // the slowed stages' return, and then nothing is written off.
        rt: RtRequest {
            pin_cores: None,
            fifo_priority: Some(40),
            lock_memory: false,
            auto_pin: false,
        },
        lane_stack_bytes: if small_stacks { 64 * 1024 } else { 0 },
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg).unwrap();
    let mut body = move || {
        let mut seen = Vec::with_capacity(MAX_FRAMES);
        let mut publisher = |p: &Published<'_>| seen.push((p.info.frame, p.status));
        rt.run(130, &mut publisher);
        // Let the last slowed stage return, then run on so that every slot is retired
        // and every stage turn is in the report's counters.
        std::thread::sleep(Duration::from_millis(150));
        rt.run(20, &mut publisher);
        (seen, rt.report())
    };
    let (seen, report) = if small_stacks {
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(body)
            .unwrap()
            .join()
            .expect("the run thread returned on a 64 KiB stack")
    } else {
        body()
    };
    (book, seen, report)
}

/// Lanes lost for real, one stage after another, on 1, 2 and 4 lanes, with default and
/// with 64 KiB stacks: every frame published in order (on fallback when no lane could run
/// it, with that reason in the report); no stage turn run twice or lost (each turn the
/// report accounts for is one real entry into `run` or the fallback, and every frame that
/// finished ran each stage exactly once); each stage sees frames in order.
#[test]
fn lanes_lost_to_slow_stages_lose_no_job_run_none_twice_and_publish_every_frame() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for lanes in [1, 2, 4] {
        for small_stacks in [false, true] {
            let what = format!("{lanes} lanes, small stacks {small_stacks}");
            let (book, seen, r) = lose_lanes(lanes, small_stacks);
            let table = r.table();
            let frames: Vec<u64> = seen.iter().map(|s| s.0).collect();
            assert_eq!(frames, (0..150).collect::<Vec<u64>>(), "{what}\n{table}");
            assert_eq!(r.frames_published, 150, "{what}");
            // Every stage was written off once, and at some point no lane was left.
            assert_eq!(r.lost_stages.len(), RECORDED.len(), "{what}\n{table}");
            assert!(r.misses_no_live_lane > 0, "{what}\n{table}");
            assert!(table.contains("NO LIVE LANE"), "{what}\n{table}");
            assert!(r.lanes_live >= 1, "{what}: a lane came back\n{table}");
            // Frame order per stage, and no stage turn executed twice.
            assert_eq!(book.out_of_order.load(Ordering::SeqCst), 0, "{what}");
            for (s, recorded) in RECORDED.iter().enumerate() {
                for f in 0..150 {
                    assert!(
                        book.executed(s, f) <= 1,
                        "{what}: stage {} executed {} times in frame {f}",
                        recorded.0,
                        book.executed(s, f)
                    );
                }
            }
            // A frame that finished (not a frame fallback) ran every stage exactly once.
            for &(f, status) in &seen {
                if matches!(status, FrameStatus::Complete | FrameStatus::Degraded) {
                    for (s, recorded) in RECORDED.iter().enumerate() {
                        assert_eq!(
                            book.executed(s, f as usize),
                            1,
                            "{what}: stage {} in finished frame {f}",
                            recorded.0
                        );
                    }
                }
            }
            // The report's accounting matches what really ran: every turn once, and the
            // same number of turns for every stage (one per frame that had a slot).
            let mut turns = Vec::new();
            for (s, st) in r.stages.iter().enumerate() {
                let c = &st.counters;
                assert_eq!(c.hung, 1, "{what}: {}", st.name);
                assert_eq!(
                    book.total(&book.runs, s),
                    c.runs + c.errors + c.hung,
                    "{what}: runs of {}",
                    st.name
                );
                assert_eq!(
                    book.total(&book.fallbacks, s),
                    c.lost_fallbacks + c.skipped,
                    "{what}: fallbacks of {}",
                    st.name
                );
                turns.push(c.runs + c.errors + c.hung + c.lost_fallbacks + c.skipped + c.cancelled);
            }
            assert!(
                turns.iter().all(|&t| t == turns[0]) && turns[0] > 0,
                "{what}: turns per stage {turns:?}\n{table}"
            );
            // At the end every stage is on its fallback and frames finish again (none
            // complete: every stage is written off; a frame may still miss its deadline
            // on a loaded machine, but not for want of a lane).
            let tail = &seen[140..];
            assert!(
                tail.iter().any(|s| s.1 == FrameStatus::Degraded)
                    && tail.iter().all(|s| s.1 != FrameStatus::Complete
                        && s.1 != FrameStatus::Fallback(FallbackReason::NoLiveLane)),
                "{what}: {tail:?}\n{table}"
            );
        }
    }
}

/// Runs `body` on its own thread and waits at most `secs` for it: a hang fails the test
/// instead of blocking it. Returns what the body returned.
fn within<T: Send + 'static>(secs: u64, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("no answer within {secs} s: the runtime hung"))
}

/// A stage that panics (a bug in user code) is contained: the panic is caught at the stage
/// boundary, its message is in the report, its fallback stands in from then on, every
/// frame is still published on time, and no lane is lost. `gradient` panics at the start
/// of `run`; `smooth` inside its `parallel_chunks_mut` closure, possibly on a helper lane.
#[test]
fn a_panicking_stage_is_contained_and_its_fallback_stands_in_from_then_on() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for stage in [ids::GRADIENT, ids::SMOOTH] {
        let name = ids::NAMES[stage];
        let faults = Faults::new();
        let mut rt = realtime(&faults, 500_000_000);
        let mut seen = Seen::default();
        rt.run(20, &mut seen.publisher());
        faults.panic_at(stage, 30);
        rt.run(60, &mut seen.publisher());
        let r = rt.report();
        let table = r.table();

        assert_eq!(
            seen.frames,
            (0..80).collect::<Vec<u64>>(),
            "{name}\n{table}"
        );
        assert!(
            seen.late.is_empty(),
            "{name}: frames published after their deadline: {:?}\n{table}",
            seen.late
        );
        assert_eq!(r.late_publishes, 0, "{name}");
        let c = &r.stages[stage].counters;
        assert_eq!(c.panics, 1, "{name}\n{table}");
        assert!(c.runs <= 30, "{name}: never run after its panic\n{table}");
        assert!(c.panic_fallbacks >= 40, "{name}\n{table}");
        assert_eq!(r.panics.len(), 1, "{name}: {:?}", r.panics);
        let p = &r.panics[0];
        assert_eq!(p.stage, name);
        assert!(p.frame >= 30 && !p.in_fallback && !p.written_off, "{p:?}");
        assert!(
            p.message.starts_with(&format!(
                "injected panic: demo stage {name} at frame {}",
                p.frame
            )),
            "{p:?}"
        );
        assert!(
            table.contains(&format!("PANIC: stage '{name}' run panicked")),
            "{table}"
        );
        // Contained: no lane lost, the runtime not poisoned.
        assert_eq!(r.lanes_live, 2, "{name}\n{table}");
        assert!(r.lost_stages.is_empty(), "{name}");
        assert!(r.runtime_panic.is_none(), "{name}");
        // From the frame after the panic on, the fallback stands in: frames are degraded.
        let after = (p.frame + 1) as usize;
        assert!(
            seen.statuses[after..]
                .iter()
                .all(|s| *s == FrameStatus::Degraded),
            "{name}: {:?}",
            &seen.statuses[after..]
        );
        assert!(
            rt.shutdown().is_ok(),
            "{name}: a contained panic is no shutdown error"
        );
    }
}

/// A critical stage that panics is lost for good, like one that hangs: the ladder goes to
/// its last mode at once and stays there; frames are still published. The loss is noticed
/// even when the panic hook (a backtrace under `RUST_BACKTRACE=1`, as in CI) holds the
/// frame past its deadline and the frame is published on the deadline guard first.
#[test]
fn a_panicking_critical_stage_sends_the_ladder_to_its_last_mode() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let mut rt = realtime(&faults, 500_000_000);
    let mut seen = Seen::default();
    rt.run(10, &mut seen.publisher());
    faults.panic_at(ids::SUMMARY, 15);
    rt.run(30, &mut seen.publisher());
    let r = rt.report();
    assert_eq!(seen.frames, (0..40).collect::<Vec<u64>>());
    assert_eq!(r.stages[ids::SUMMARY].counters.panics, 1, "{}", r.table());
    let t = r
        .transitions
        .iter()
        .find(|t| t.raw.reason == TransitionReason::CriticalLost)
        .unwrap_or_else(|| panic!("no critical loss: {:#?}", r.transitions));
    assert!(t.after_frame >= 15 && t.to == "minimal", "{t:?}");
    // Lost for good: nothing after it, whatever the frames that follow look like.
    assert_eq!(
        r.transitions.last().map(|l| l.raw),
        Some(t.raw),
        "{:#?}",
        r.transitions
    );
}

/// What a test learns from a run that was expected to panic.
struct Escaped {
    first_panic: String,
    frames: Vec<u64>,
    second_run_panic: String,
    report_says: Option<String>,
    shutdown: Result<(), String>,
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Runs `frames` frames of `rt` with a publisher that panics at frame `panic_at` (if any),
/// catching what `run` raises, then tries a second run and shuts down.
fn run_expecting_a_panic(mut rt: Runtime, frames: u64, panic_at: Option<u64>) -> Escaped {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut publisher = move |p: &Published<'_>| {
        if Some(p.info.frame) == panic_at {
            panic!("publisher bug at frame {}", p.info.frame);
        }
        s.lock().unwrap().push(p.info.frame);
    };
    let first = catch_unwind(AssertUnwindSafe(|| rt.run(frames, &mut publisher)))
        .expect_err("run re-raises the panic");
    let second = catch_unwind(AssertUnwindSafe(|| rt.run(5, &mut |_: &Published<'_>| {})))
        .expect_err("a poisoned runtime refuses to run");
    let report_says = rt.report().runtime_panic;
    let shutdown = rt.shutdown().map_err(|e| match e {
        RuntimeError::Panicked { place, message } => format!("{place}: {message}"),
        other => format!("unexpected error {other}"),
    });
    let frames = seen.lock().unwrap().clone();
    Escaped {
        first_panic: panic_text(first),
        frames,
        second_run_panic: panic_text(second),
        report_says,
        shutdown,
    }
}

/// A publisher that panics: `run` returns by re-raising its panic (original payload) on the
/// caller's thread after releasing the scheduling token, whichever thread was publishing;
/// it never hangs. The runtime is poisoned: a second `run` panics at once naming the first,
/// the report and `shutdown` say what happened, and dropping it joins every thread.
#[test]
fn a_panicking_publisher_makes_run_re_raise_the_panic_instead_of_hanging() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for release in [ReleaseMode::RealTime, ReleaseMode::AsFastAsPossible] {
        let e = within(30, move || {
            let faults = Faults::new();
            let plan = demo_graph(4096, &faults)
                .build(&PlanConfig {
                    lanes: 2,
                    frame_slots: 2,
                })
                .unwrap();
            let cfg = RuntimeConfig {
                release,
                period_ns: 5_000_000,
                hang_after_ns: 10_000_000_000,
                ..RuntimeConfig::default()
            };
            run_expecting_a_panic(Runtime::new(plan, cfg).unwrap(), 100, Some(25))
        });
        assert_eq!(e.first_panic, "publisher bug at frame 25", "{release:?}");
        assert_eq!(e.frames, (0..25).collect::<Vec<u64>>(), "{release:?}");
        let place = "the publisher or the scheduling step: publisher bug at frame 25";
        assert!(
            e.second_run_panic.contains("poisoned") && e.second_run_panic.contains(place),
            "{release:?}: {}",
            e.second_run_panic
        );
        assert_eq!(e.report_says.as_deref(), Some(place), "{release:?}");
        assert_eq!(e.shutdown, Err(place.to_string()), "{release:?}");
    }
}

/// A panic in the scheduling step itself (here a timing model, user code the step calls in
/// lockstep) is handled like a publisher's: `run` re-raises it and does not hang.
#[test]
fn a_panic_in_the_scheduling_step_makes_run_re_raise_it_instead_of_hanging() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let e = within(30, || {
        let faults = Faults::new();
        let plan = demo_graph(1024, &faults)
            .build(&PlanConfig {
                lanes: 2,
                frame_slots: 2,
            })
            .unwrap();
        let cfg = RuntimeConfig {
            release: ReleaseMode::Lockstep,
            ..RuntimeConfig::default()
        };
        let mut rt = Runtime::new(plan, cfg).unwrap();
        rt.set_timing_model(Box::new(|_stage: usize, frame: u64, _fb: bool| {
            if frame == 12 {
                panic!("timing model bug at frame 12");
            }
            100_000
        }));
        run_expecting_a_panic(rt, 40, None)
    });
    assert_eq!(e.first_panic, "timing model bug at frame 12");
    assert_eq!(e.frames, (0..12).collect::<Vec<u64>>());
    assert!(e.shutdown.is_err());
}

/// The output hash (`HashPublisher`) of the modeled-timing run below: 200 lockstep frames of
/// `demo_graph(2048)` whose summaries carry the mode each frame ran in, with the fallback
/// frames of the overload. Integer arithmetic and a modeled clock, so the same on every
/// platform. If a deliberate change to the demo stages, the ladder or `HashPublisher`
/// changes it, the failure message prints the new value: paste it here and say in the
/// commit why the outputs changed.
const PINNED_MODELED_HASH: u64 = 0x7a6b_3d26_081f_c9bb;

fn modeled(lanes: usize) -> (u64, Vec<(u64, String, String)>, Vec<u64>) {
    let faults = Faults::new();
    let plan = demo_graph(2048, &faults)
        .build(&PlanConfig {
            lanes,
            frame_slots: 2,
        })
        .unwrap();
    let cfg = RuntimeConfig {
        release: ReleaseMode::Lockstep,
        ladder: ladder(),
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(plan, cfg).unwrap();
    // smooth takes 40 ms in frames 50..=80 (over the 33 ms deadline), everything else
    // 100 us (inside every budget).
    rt.set_timing_model(Box::new(|stage: usize, frame: u64, fallback: bool| {
        if fallback {
            10_000
        } else if stage == ids::SMOOTH && (50..=80).contains(&frame) {
            40_000_000
        } else {
            100_000
        }
    }));
    let mut h = redline_runtime::HashPublisher::default();
    rt.run(200, &mut h);
    let r = rt.report();
    let transitions = r
        .transitions
        .iter()
        .map(|t| (t.after_frame, t.from.clone(), t.to.clone()))
        .collect();
    let residency = r.mode_residency.iter().map(|m| m.frames).collect();
    (h.hash, transitions, residency)
}

#[test]
fn modeled_timing_gives_the_same_modes_and_outputs_on_any_lane_count() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (hash, transitions, residency) = modeled(1);
    assert!(
        transitions.iter().any(|t| t.2 == "reduced"),
        "the modeled overload must degrade: {transitions:?}"
    );
    assert_eq!(transitions.last().map(|t| t.2.as_str()), Some("nominal"));
    assert_eq!(
        hash,
        PINNED_MODELED_HASH,
        "the modeled run's outputs changed: hash {hash:#018x}, pinned \
         {PINNED_MODELED_HASH:#018x}. If the change is deliberate, set PINNED_MODELED_HASH in \
         {} to {hash:#018x}",
        file!()
    );
    for lanes in [1, 2, 4] {
        let (h2, t2, r2) = modeled(lanes);
        assert_eq!(t2, transitions, "lanes={lanes}");
        assert_eq!(r2, residency, "lanes={lanes}");
        assert_eq!(h2, hash, "lanes={lanes}");
    }
}

/// Budget overruns while frames still publish with slack (issue 10): recorded and reported
/// every time, and the only move they make is shedding the non-critical stage that keeps
/// overrunning, to the first mode that disables it. A stage no mode sheds (`fuse`, only in
/// no mode; `summary`, critical) moves nothing, and nothing reaches the last rung without
/// deadline misses.
#[test]
fn overruns_with_slack_are_reported_and_shed_only_the_overrunning_stage() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for stage in [ids::FUSE, ids::SUMMARY, ids::SMOOTH] {
        let name = ids::NAMES[stage];
        let faults = Faults::new();
        let mut rt = realtime(&faults, 500_000_000);
        let mut frames = 0u64;
        let mut count = |_: &Published<'_>| frames += 1;
        rt.run(20, &mut count);
        // 3 ms per run: several times the stage's sub-millisecond budget, far inside the
        // 16 ms guard of a 20 ms frame.
        faults.stall(stage, 3_000_000);
        rt.run(60, &mut count);
        faults.stall(stage, 0);
        let r = rt.report();
        let table = r.table();
        assert_eq!(frames, 80);
        // Every run overran (smooth only runs while it is not shed).
        let runs = r.stages[stage].counters.runs;
        assert!(runs >= if stage == ids::SMOOTH { 4 } else { 60 }, "{table}");
        assert!(
            r.stages[stage].counters.overruns + 20 >= runs,
            "{name}: the overruns are recorded\n{table}"
        );
        assert_eq!(
            r.overruns.iter().filter(|o| o.stage == stage).count() as u64,
            r.stages[stage].counters.overruns
        );
        let sheds: Vec<&str> = r
            .transitions
            .iter()
            .filter(|t| t.reason.contains("overran its budget"))
            .map(|t| t.reason.as_str())
            .collect();
        assert!(
            sheds.iter().all(|s| s.contains("stage 'smooth'")),
            "{name}: only smooth can be shed on overruns: {sheds:?}"
        );
        if stage == ids::SMOOTH {
            assert!(
                r.transitions.iter().any(|t| t.from == "nominal"
                    && t.to == "reduced"
                    && t.reason.contains("stage 'smooth' overran its budget")),
                "smooth keeps overrunning: shed to reduced\n{table}\n{:#?}",
                r.transitions
            );
        }
        let last = r.mode_residency.last().unwrap();
        assert_eq!(last.mode, "minimal");
        if r.deadline_misses == 0 {
            assert_eq!(
                last.frames, 0,
                "{name}: overruns alone never reach the last rung"
            );
            if stage != ids::SMOOTH {
                assert!(
                    r.transitions.is_empty(),
                    "{name}: nothing to shed, no risk: {:#?}",
                    r.transitions
                );
            }
        } else {
            eprintln!(
                "{name}: {} deadline misses on this machine: the ladder may move on them\n{table}",
                r.deadline_misses
            );
        }
    }
}
