//! The run report: what a user reads after a replay, as JSON (serde) and as a terminal table.
//!
//! Built from the runtime's histograms and counters after `run` (allocates; never on the
//! hot path). Contains per-stage execution and queueing P50/P90/P99/P99.9/max, end to end
//! (release → publish), P99/P50, deadline misses by reason, late publishes, overruns (stage,
//! frame, by how much), mode residency and transitions with reasons, the watchdog's
//! detection delay, what the OS granted, and the faults the runtime contained: stages
//! written off as hung, stages that panicked (with the message), frames published on
//! fallback because no lane was live, and a panic outside any stage that poisoned the
//! runtime.

use serde::{Deserialize, Serialize};

use crate::arena::MemoryLock;
use crate::metrics::{LatencyHistogram, LatencySummary};
use crate::modes::{Ladder, ModeTransition};
use crate::plan::StagePlan;
use crate::rt::OsGrants;
use crate::runtime::{ReleaseMode, RuntimeConfig};
use crate::stage::Criticality;

/// Per-stage counters kept by the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageCounters {
    /// `run` returned Ok.
    pub runs: u64,
    /// `run` returned Err (fallback published in its place).
    pub errors: u64,
    /// Disabled by the mode (fallback).
    pub skipped: u64,
    /// Fallback because the stage is lost.
    pub lost_fallbacks: u64,
    /// Not run: the frame was abandoned first.
    pub cancelled: u64,
    /// Times the stage hung and was written off.
    pub hung: u64,
    /// Times `run` panicked (caught; the fallback wrote that frame's outputs). At most 1:
    /// a stage that panicked is never run again.
    #[serde(default)]
    pub panics: u64,
    /// Fallback because the stage panicked in an earlier frame.
    #[serde(default)]
    pub panic_fallbacks: u64,
    /// Runs longer than the budget.
    pub overruns: u64,
    /// Largest excess over the budget, ns.
    pub worst_overrun_ns: u64,
}

/// One overrun.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrunRecord {
    /// Plan stage index.
    pub stage: usize,
    /// Frame.
    pub frame: u64,
    /// Budget, ns.
    pub budget_ns: u64,
    /// Measured execution, ns.
    pub exec_ns: u64,
    /// Excess, ns.
    pub over_by_ns: u64,
}

/// One stage in the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    /// Name.
    pub name: String,
    /// Lane.
    pub lane: usize,
    /// Budget, ns.
    pub budget_ns: u64,
    /// Criticality.
    pub criticality: Criticality,
    /// Execution time of `run`.
    pub execution: LatencySummary,
    /// Ready (inputs complete) to start.
    pub queueing: LatencySummary,
    /// Counters.
    #[serde(flatten)]
    pub counters: StageCounters,
}

/// Frames spent in one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeResidency {
    /// Mode name.
    pub mode: String,
    /// Frames.
    pub frames: u64,
}

/// A transition with mode names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransitionReport {
    /// After this frame's outcome.
    pub after_frame: u64,
    /// From mode.
    pub from: String,
    /// To mode.
    pub to: String,
    /// Why, in words.
    pub reason: String,
    /// Raw record.
    pub raw: ModeTransition,
}

/// A stage written off as hung.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostStage {
    /// Name.
    pub stage: String,
    /// Frame it hung in.
    pub frame: u64,
}

/// A panic caught at a stage boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePanic {
    /// Stage name.
    pub stage: String,
    /// Frame it was running.
    pub frame: u64,
    /// The stage's fallback panicked (zero-fill stands in for it from then on), rather
    /// than its `run` (the fallback stands in from then on).
    pub in_fallback: bool,
    /// The stage had already been written off as hung when its `run` panicked.
    pub written_off: bool,
    /// The panic message (at most 256 bytes).
    pub message: String,
}

/// A runtime thread that ended in a panic (found when it was joined).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPanic {
    /// Which thread.
    pub thread: String,
    /// The panic message.
    pub message: String,
}

/// Everything a run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Release mode.
    pub release: ReleaseMode,
    /// Durations from a timing model (lockstep) rather than measured.
    pub modeled_timing: bool,
    /// Period, ns.
    pub period_ns: u64,
    /// Deadline, ns.
    pub deadline_ns: u64,
    /// Lanes.
    pub lanes: usize,
    /// Frame slots.
    pub frame_slots: usize,
    /// Arena bytes (all slots).
    pub arena_bytes: usize,
    /// Arena memory lock.
    pub arena_lock: MemoryLock,
    /// Frames released (including dropped).
    pub frames_released: u64,
    /// Frames published.
    pub frames_published: u64,
    /// Published complete.
    pub frames_complete: u64,
    /// Published degraded (some stage on its fallback).
    pub frames_degraded: u64,
    /// Published as frame fallbacks.
    pub deadline_misses: u64,
    /// Of which: abandoned at the guard time.
    pub misses_deadline_guard: u64,
    /// Of which: no free slot.
    pub misses_no_free_slot: u64,
    /// Of which: late in modeled time.
    pub misses_modeled_late: u64,
    /// Of which: every lane was lost (each one's stage written off), so nothing could run.
    #[serde(default)]
    pub misses_no_live_lane: u64,
    /// Lanes live when the report was built (lanes minus those lost).
    #[serde(default)]
    pub lanes_live: usize,
    /// Frames published after their deadline (should be 0: a real-time failure).
    pub late_publishes: u64,
    /// Release → publish.
    pub end_to_end: LatencySummary,
    /// Budget expiry → overrun seen by the watchdog.
    pub watchdog_delay: LatencySummary,
    /// Per stage, plan order.
    pub stages: Vec<StageReport>,
    /// Overruns (first 4096).
    pub overruns: Vec<OverrunRecord>,
    /// Overruns not kept.
    pub overruns_dropped: u64,
    /// Frames per mode.
    pub mode_residency: Vec<ModeResidency>,
    /// Mode changes.
    pub transitions: Vec<TransitionReport>,
    /// Stages written off as hung.
    pub lost_stages: Vec<LostStage>,
    /// Lost stages that came back later.
    pub returned_stages: u64,
    /// Panics caught at a stage boundary (first of each stage's `run` and fallback).
    #[serde(default)]
    pub panics: Vec<StagePanic>,
    /// A panic outside any stage (publisher, scheduling step, lane or watchdog thread)
    /// that poisoned the runtime: where, and its message.
    #[serde(default)]
    pub runtime_panic: Option<String>,
    /// Scheduler events dropped (queue full; should be 0).
    pub events_dropped: u64,
    /// Trace spans overwritten by the ring.
    pub spans_overwritten: u64,
    /// What the OS granted.
    pub os: OsGrants,
}

pub(crate) struct ReportInputs<'a> {
    pub stages: &'a [StagePlan],
    pub cfg: &'a RuntimeConfig,
    pub lanes: usize,
    pub frame_slots: usize,
    pub arena_bytes: usize,
    pub arena_lock: MemoryLock,
    pub ladder: &'a Ladder,
    pub e2e: &'a LatencyHistogram,
    pub exec: &'a [LatencyHistogram],
    pub queue: &'a [LatencyHistogram],
    pub watchdog_delay: &'a LatencyHistogram,
    pub counters: &'a [StageCounters],
    pub overruns: &'a [OverrunRecord],
    pub overruns_dropped: u64,
    pub frames_released: u64,
    pub frames_published: u64,
    pub frames_complete: u64,
    pub frames_degraded: u64,
    pub deadline_misses: u64,
    pub misses_by_reason: [u64; 4],
    pub late_publishes: u64,
    pub lost_stages: &'a [(usize, u64)],
    pub returned_stages: u64,
    pub nodes: &'a [crate::exec::Node],
    pub runtime_panic: Option<String>,
    pub live_lanes: usize,
    pub events_dropped: u64,
    pub spans_overwritten: u64,
    pub os: &'a OsGrants,
    pub modeled: bool,
}

impl Report {
    pub(crate) fn build(r: ReportInputs<'_>) -> Report {
        let stages = r
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| StageReport {
                name: s.name.clone(),
                lane: s.lane,
                budget_ns: s.budget_ns,
                criticality: s.criticality,
                execution: r.exec[i].summary(),
                queueing: r.queue[i].summary(),
                counters: r.counters[i],
            })
            .collect();
        let mode_residency = r
            .ladder
            .residency()
            .iter()
            .enumerate()
            .map(|(i, &frames)| ModeResidency {
                mode: r.ladder.mode_name(i).to_string(),
                frames,
            })
            .collect();
        let transitions = r
            .ladder
            .transitions()
            .iter()
            .map(|t| TransitionReport {
                after_frame: t.after_frame,
                from: r.ladder.mode_name(t.from as usize).to_string(),
                to: r.ladder.mode_name(t.to as usize).to_string(),
                reason: r.ladder.describe(&t.reason),
                raw: *t,
            })
            .collect();
        let mut panics = Vec::new();
        for (i, node) in r.nodes.iter().enumerate() {
            for (note, in_fallback) in [
                (node.panics.run.get(), false),
                (node.panics.fallback.get(), true),
            ] {
                if let Some(n) = note {
                    panics.push(StagePanic {
                        stage: r.stages[i].name.clone(),
                        frame: n.frame,
                        in_fallback,
                        written_off: n.written_off,
                        message: n.message.clone(),
                    });
                }
            }
        }
        Report {
            release: r.cfg.release,
            modeled_timing: r.modeled,
            period_ns: r.cfg.period_ns,
            deadline_ns: r.cfg.deadline_len_ns(),
            lanes: r.lanes,
            frame_slots: r.frame_slots,
            arena_bytes: r.arena_bytes,
            arena_lock: r.arena_lock,
            frames_released: r.frames_released,
            frames_published: r.frames_published,
            frames_complete: r.frames_complete,
            frames_degraded: r.frames_degraded,
            deadline_misses: r.deadline_misses,
            misses_deadline_guard: r.misses_by_reason[0],
            misses_no_free_slot: r.misses_by_reason[1],
            misses_modeled_late: r.misses_by_reason[2],
            misses_no_live_lane: r.misses_by_reason[3],
            lanes_live: r.live_lanes,
            late_publishes: r.late_publishes,
            end_to_end: r.e2e.summary(),
            watchdog_delay: r.watchdog_delay.summary(),
            stages,
            overruns: r.overruns.to_vec(),
            overruns_dropped: r.overruns_dropped,
            mode_residency,
            transitions,
            lost_stages: r
                .lost_stages
                .iter()
                .map(|&(i, frame)| LostStage {
                    stage: r.stages[i].name.clone(),
                    frame,
                })
                .collect(),
            returned_stages: r.returned_stages,
            panics,
            runtime_panic: r.runtime_panic,
            events_dropped: r.events_dropped,
            spans_overwritten: r.spans_overwritten,
            os: r.os.clone(),
        }
    }

    /// The latency table a user reads on the terminal.
    pub fn table(&self) -> String {
        fn ms(ns: u64) -> String {
            format!("{:.3}", ns as f64 / 1e6)
        }
        let mut out = String::new();
        out.push_str(&format!(
            "{:<22} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}\n",
            "stage",
            "lane",
            "budget",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "overrun",
            "fallbk",
            "cancel"
        ));
        for s in &self.stages {
            out.push_str(&format!(
                "{:<22} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}\n",
                s.name,
                s.lane,
                if s.budget_ns == 0 {
                    "-".to_string()
                } else {
                    ms(s.budget_ns)
                },
                ms(s.execution.p50_ns),
                ms(s.execution.p99_ns),
                ms(s.execution.p999_ns),
                ms(s.execution.max_ns),
                s.counters.overruns,
                s.counters.skipped + s.counters.errors + s.counters.lost_fallbacks,
                s.counters.cancelled,
            ));
        }
        let e = &self.end_to_end;
        out.push_str(&format!(
            "{:<22} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "end to end",
            "",
            ms(self.deadline_ns),
            ms(e.p50_ns),
            ms(e.p99_ns),
            ms(e.p999_ns),
            ms(e.max_ns)
        ));
        out.push_str(&format!(
            "frames: {} published ({} complete, {} degraded, {} fallback); P99/P50 {:.2}\n",
            self.frames_published,
            self.frames_complete,
            self.frames_degraded,
            self.deadline_misses,
            e.p99_over_p50
        ));
        out.push_str(&format!(
            "deadline misses: {} (guard {}, no slot {}, modeled {}, no live lane {}); late \
             publishes: {}\n",
            self.deadline_misses,
            self.misses_deadline_guard,
            self.misses_no_free_slot,
            self.misses_modeled_late,
            self.misses_no_live_lane,
            self.late_publishes
        ));
        let modes: Vec<String> = self
            .mode_residency
            .iter()
            .map(|m| format!("{} {}", m.mode, m.frames))
            .collect();
        out.push_str(&format!(
            "modes: {}; {} transitions\n",
            modes.join(", "),
            self.transitions.len()
        ));
        if self.watchdog_delay.count > 0 {
            out.push_str(&format!(
                "watchdog: {} overruns seen, detection delay p50 {:.1} us, p99 {:.1} us, max {:.1} us\n",
                self.watchdog_delay.count,
                self.watchdog_delay.p50_ns as f64 / 1e3,
                self.watchdog_delay.p99_ns as f64 / 1e3,
                self.watchdog_delay.max_ns as f64 / 1e3
            ));
        }
        for l in &self.lost_stages {
            out.push_str(&format!(
                "LOST: stage '{}' hung in frame {}\n",
                l.stage, l.frame
            ));
        }
        if self.misses_no_live_lane > 0 {
            out.push_str(&format!(
                "NO LIVE LANE: {} frames published on fallback because every lane was lost \
                 (each one's stage written off as hung; see LOST); {} of {} lanes live now\n",
                self.misses_no_live_lane, self.lanes_live, self.lanes
            ));
        }
        for p in &self.panics {
            let (what, then) = if p.in_fallback {
                ("fallback", "zero-fill stands in for it")
            } else {
                ("run", "its fallback stands in for it")
            };
            out.push_str(&format!(
                "PANIC: stage '{}' {what} panicked in frame {}{} ({then} from then on): {}\n",
                p.stage,
                p.frame,
                if p.written_off {
                    ", after it was written off as hung"
                } else {
                    ""
                },
                p.message
            ));
        }
        if let Some(what) = &self.runtime_panic {
            out.push_str(&format!(
                "RUNTIME PANIC (the runtime is poisoned): {what}\n"
            ));
        }
        for line in self.os.summary_lines() {
            out.push_str(&format!("os: {line}\n"));
        }
        out
    }
}
