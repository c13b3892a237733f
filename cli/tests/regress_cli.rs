//! `redline regress` and `redline report merge` as a CI job runs them: exit codes (0 pass,
//! 1 regression, 2 cannot run), messages, the output directory, baselines on disk, A/B
//! mode with worker processes, merging, and the interval log read by HdrHistogram's own
//! Python reader.
//!
//! These tests check the plumbing, never the timing of the real workload (a busy machine
//! must not flip them; the statistics are tested in `redline-bench` and, on a calibrated
//! graph, in tests/tests/regress.rs):
//!
//! - merging runs on stored measurements with known histograms, so its result is exact;
//! - the replays that must pass are judged with tolerances no machine's noise reaches
//!   ([`WIDE`]);
//! - the replays that must fail add 8 ms of busy time to every run of `tracking`, a stage
//!   of well under a millisecond, and judge only the P50s, with a 2 ms floor
//!   ([`P50_ONLY`]): the slowed stage's P50 is at least 8 ms, its allowed maximum about
//!   2 ms, and the reference would have to be slower than 6 ms (its median P50 over 3
//!   replays) for the verdict to flip.

mod common;
use common::{redline, show};

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use redline_bench::regress::histogram::EncodedHistogram;
use redline_bench::regress::measurement::{
    Figures, Measurement, RepFigures, StageFigures, END_TO_END, FORMAT,
};
use redline_bench::regress::setup::{MachineInfo, RunSetup};
use redline_runtime::metrics::LatencyHistogram;

/// The tests that replay the real graph in real time take turns: two at once on a 2-core
/// machine slow the backbone past the deadline, the ladder sheds the stages after it, and
/// the slowed `tracking` stage would never run at all (seen in a full workspace run).
static REPLAYS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dir(name: &str) -> common::Dir {
    common::fresh_dir("regress-cli", name)
}

/// A short log (2 s, 60 frames), written once for all tests, in the build's temporary
/// directory (`target/tmp`): the next run replaces it (written under this process's name,
/// then renamed, so two runs at once each read a whole log; the log is seeded, so both
/// write the same one) instead of leaving one per run behind.
fn log() -> &'static Path {
    static LOG: OnceLock<PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let p = tmp.join("regress-cli-drive.mcap");
        let part = tmp.join(format!("regress-cli-drive.{}.mcap", std::process::id()));
        let o = redline()
            .args(["sim", "generate", "--seconds", "2", "-o"])
            .arg(&part)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        std::fs::rename(&part, &p).unwrap();
        p
    })
}

/// Fast replays: as fast as possible, one frame in flight.
const FAST: &str = r#"
release = "as_fast_as_possible"
frame_slots = 1
"#;

/// Tolerances no machine's noise reaches (a latency must grow 1000-fold and by a second,
/// a count by 1000 per replay; quality is not judged: as-fast-as-possible replays that
/// miss deadlines on a loaded machine vary in quality): a run judged with them passes
/// unless the plumbing fails.
const WIDE: &str = r#"
[regress]
reps = 3
warmup_frames = 10
p50 = { relative = 1000.0, floor_us = 1000000.0 }
p99 = { relative = 1000.0, floor_us = 1000000.0 }
p999 = { relative = 1000.0, floor_us = 1000000.0 }
max = { relative = 1000.0, floor_us = 1000000.0 }
deadline_misses = 1000.0
late_publishes = 1000.0
degraded_frames = 1000.0
quality_drop = 1000.0
"#;

/// Judges the P50s only: a P50 fails above twice its reference and 2 ms more.
const P50_ONLY: &str = r#"
[regress]
reps = 3
warmup_frames = 10
p50 = { relative = 1.0, floor_us = 2000.0 }
p99 = { relative = 1000.0, floor_us = 1000000.0 }
p999 = { relative = 1000.0, floor_us = 1000000.0 }
max = { relative = 1000.0, floor_us = 1000000.0 }
deadline_misses = 1000.0
late_publishes = 1000.0
degraded_frames = 1000.0
quality_drop = 1000.0
"#;

/// The passing config: [`FAST`] judged with [`WIDE`] tolerances.
fn passing() -> String {
    format!("{FAST}{WIDE}")
}

/// The failing config: [`FAST`] with 8 ms of busy time in every `tracking` run, judged on
/// its P50s ([`P50_ONLY`]).
fn slowed() -> String {
    format!("{FAST}{P50_ONLY}\n[slowdown.tracking]\nbusy_ms = 8.0\n")
}

fn write(d: &Path, name: &str, text: &str) -> PathBuf {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `redline regress LOG --config CONFIG ARGS... --out OUT`.
fn regress(config: &Path, out: &Path, args: &[&OsStr]) -> Output {
    redline()
        .arg("regress")
        .arg(log())
        .arg("--config")
        .arg(config)
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn cannot_run_exits_2_with_what_to_do() {
    let d = dir("exit2");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "regress".into(),
                d.join("missing.mcap").display().to_string(),
            ],
            "does not exist",
        ),
        (
            vec![
                "regress".into(),
                "--baseline".into(),
                d.join("none.json").display().to_string(),
            ],
            "--update-baseline",
        ),
        (
            vec![
                "regress".into(),
                "--baseline".into(),
                write(&d, "bad.json", "{ not json").display().to_string(),
            ],
            "is not a redline measurement",
        ),
        (
            vec![
                "regress".into(),
                "--baseline".into(),
                write(
                    &d,
                    "old.json",
                    r#"{"format": "redline-latency-measurement/0"}"#,
                )
                .display()
                .to_string(),
            ],
            "has format 'redline-latency-measurement/0'",
        ),
        (
            vec![
                "regress".into(),
                "--against".into(),
                d.join("no-such-binary").display().to_string(),
            ],
            "no such file",
        ),
        (
            vec!["regress".into(), "--frames".into(), "0".into()],
            "--frames 0: give at least 1 frame",
        ),
        (
            vec!["regress".into(), "--against".into(), "/bin/sh".into()],
            "is not a redline build with `regress` support",
        ),
        (
            vec![
                "report".into(),
                "merge".into(),
                write(&d, "empty.json", "").display().to_string(),
            ],
            "is not a redline measurement",
        ),
    ];
    for (args, expect) in cases {
        let o = redline().current_dir(&d).args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(expect),
            "{args:?}: expected {expect:?}: {}",
            show(&o)
        );
        assert!(!err.contains("panicked"), "{}", show(&o));
    }
}

#[test]
fn baseline_update_compare_and_exit_codes() {
    let _turn = REPLAYS.lock().unwrap_or_else(|e| e.into_inner());
    let d = dir("baseline");
    let pass = write(&d, "pass.toml", &passing());
    let slow = write(&d, "slow.toml", &slowed());
    let base = d.join("baseline.json");
    let o = regress(
        &pass,
        &d.join("record"),
        &[
            "--baseline".as_ref(),
            base.as_os_str(),
            "--update-baseline".as_ref(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(stdout(&o).contains("wrote baseline"), "{}", show(&o));
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(text.contains("\"format\": \"redline-latency-measurement/1\""));
    assert!(!text.contains("\"timeline\""), "baselines keep no timeline");

    // Same build and config: pass, exit 0, a verdict table.
    let o = regress(
        &pass,
        &d.join("same"),
        &["--baseline".as_ref(), base.as_os_str()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains("PASS: all") && out.contains("end_to_end p99") && out.contains("tracking p50"),
        "{out}"
    );
    assert!(!out.contains("WARNING"), "same config, same setup: {out}");
    for f in [
        "measurement.json",
        "verdict.txt",
        "verdict.json",
        "latency.hlog",
        "timeline.svg",
        "percentiles_end_to_end.svg",
        "percentiles_backbone.svg",
        "percentiles_tracking.svg",
    ] {
        assert!(d.join("same").join(f).is_file(), "missing {f}");
    }
    let verdict = std::fs::read_to_string(d.join("same/verdict.txt")).unwrap();
    assert!(verdict.contains("PASS: all"), "{verdict}");

    // 8 ms more in every tracking run: exit 1, the stage named, the slowdown warned about.
    let o = regress(
        &slow,
        &d.join("slow"),
        &["--baseline".as_ref(), base.as_os_str()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains("REGRESSION") && out.contains("  tracking p50:"),
        "{out}"
    );
    assert!(
        out.contains("DIFFERENT SETUP") && out.contains("tracking: +0% +8 ms"),
        "the slowdown is named: {out}"
    );
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("slow/verdict.json")).unwrap())
            .unwrap();
    let failed: Vec<&str> = verdict["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pass"] == false)
        .map(|r| r["figure"].as_str().unwrap())
        .collect();
    assert!(failed.contains(&"tracking p50"), "{failed:?}");

    // The interval log: one interval per replay and histogram, every sample in it.
    let m = Measurement::load(&d.join("same/measurement.json")).unwrap();
    let samples = m.histogram(END_TO_END).unwrap().unwrap().count();
    check_hlog_with_hdrhistogram_py(&d.join("same/latency.hlog"), m.reps.len(), samples);
}

/// A stored measurement: one replay whose end-to-end and `backbone` histograms hold
/// `e2e` and `stage` (ns), measured with `lanes` lanes.
fn stored(label: &str, e2e: &[u64], stage: &[u64], lanes: usize) -> Measurement {
    let hist = |values: &[u64]| {
        let mut h = LatencyHistogram::new();
        values.iter().for_each(|&v| h.record(v));
        h
    };
    let (e, s) = (hist(e2e), hist(stage));
    Measurement {
        format: FORMAT.into(),
        created_unix_s: 1,
        machines: vec![MachineInfo::detect()],
        setups: vec![RunSetup {
            redline_version: "0.1.0".into(),
            config_hash: format!("{lanes:016x}"),
            release: "AsFastAsPossible".into(),
            lanes,
            frame_slots: 1,
            perception: "Network".into(),
            slowdown: vec![],
            source: "stored".into(),
            frames_per_rep: e2e.len() as u64,
            warmup_frames: 0,
            deadline_ns: 33_333_333,
            budgets_ns: [("backbone".to_string(), 8_000_000)].into(),
        }],
        reps: vec![RepFigures {
            label: label.into(),
            started_unix_ms: 1_700_000_000_000,
            wall_ms: 1000.0,
            frames: e2e.len() as u64,
            end_to_end: Figures::from(&e.summary()),
            stages: vec![StageFigures {
                name: "backbone".into(),
                figures: Figures::from(&s.summary()),
            }],
            deadline_misses: 0,
            late_publishes: 0,
            degraded_frames: 0,
            mode_frames: [("nominal".to_string(), e2e.len() as u64)].into(),
            quality: Default::default(),
        }],
        histograms: vec![
            EncodedHistogram::encode(END_TO_END, &e),
            EncodedHistogram::encode("backbone", &s),
        ],
        timeline: None,
    }
}

#[test]
fn merge_adds_stored_measurements_losslessly() {
    let d = dir("merge");
    // 1..=1000 µs end to end on one machine, 1001..=3000 µs on another setup.
    let a_e2e: Vec<u64> = (1..=1000).map(|us| us * 1000).collect();
    let b_e2e: Vec<u64> = (1001..=3000).map(|us| us * 1000).collect();
    let a = stored("first", &a_e2e, &[2_000_000; 10], 2);
    let b = stored("second", &b_e2e, &[4_000_000; 30], 1);
    let (pa, pb) = (d.join("a.json"), d.join("b.json"));
    a.save(&pa).unwrap();
    b.save(&pb).unwrap();
    let merged = d.join("merged.json");
    let o = redline()
        .args(["report", "merge"])
        .arg(&pa)
        .arg(&pb)
        .arg("-o")
        .arg(&merged)
        .arg("--plots")
        .arg(d.join("plots"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("WARNING: merging 2 different run setups") && err.contains("lanes: 2 vs 1"),
        "{}",
        show(&o)
    );
    // The table: the union's percentiles (1..=3000 µs: P50 1.5 ms, max 3 ms).
    let out = stdout(&o);
    let e2e_line = out
        .lines()
        .find(|l| l.starts_with("end_to_end "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        e2e_line.contains(" 3000 ") && e2e_line.contains("1.500 ms"),
        "{e2e_line}"
    );
    assert!(out.contains("2 files, 2 replays"), "{out}");

    let m = Measurement::load(&merged).unwrap();
    let labels: Vec<&str> = m.reps.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["first", "second"]);
    assert_eq!(m.setups.len(), 2);
    let recorded = |h: &LatencyHistogram| -> Vec<(u64, u64)> {
        h.as_hdr()
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    };
    let mut union = LatencyHistogram::new();
    a_e2e.iter().chain(&b_e2e).for_each(|&v| union.record(v));
    let got = m.histogram(END_TO_END).unwrap().unwrap();
    assert_eq!(recorded(&got), recorded(&union));
    let backbone = m.histogram("backbone").unwrap().unwrap();
    assert_eq!(backbone.count(), 40);
    for f in ["percentiles_end_to_end.svg", "percentiles_backbone.svg"] {
        let svg = std::fs::read_to_string(d.join("plots").join(f)).unwrap();
        assert!(svg.contains("merged: P50"), "{f}");
    }
}

#[test]
fn ab_runs_both_builds_alternately() {
    let _turn = REPLAYS.lock().unwrap_or_else(|e| e.into_inner());
    let d = dir("ab");
    let pass = write(&d, "pass.toml", &passing());
    let slow = write(&d, "slow.toml", &slowed());
    let me = env!("CARGO_BIN_EXE_redline");
    // This build against itself: pass.
    let o = regress(&pass, &d.join("same"), &["--against".as_ref(), me.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        stdout(&o).contains("median of 3 paired ratios"),
        "{}",
        show(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("reference: end to end").count(), 3, "{err}");
    assert!(d.join("same/reference.json").is_file());
    let hlog = std::fs::read_to_string(d.join("same/latency.hlog")).unwrap();
    assert!(hlog.contains("Tag=reference.backbone,") && hlog.contains("Tag=candidate.end_to_end,"));

    // The candidate side slowed (its config), the reference not: exit 1, stage named.
    let o = regress(
        &slow,
        &d.join("slow"),
        &[
            "--against-config".as_ref(),
            pass.as_os_str(),
            "--against".as_ref(),
            me.as_ref(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains("REGRESSION") && out.contains("  tracking p50:"),
        "{out}"
    );
}

/// Reads the interval log with HdrHistogram_py (`pip install hdrhistogram`): every
/// interval decodes and the end-to-end intervals hold every sample. Skipped loudly without
/// the package, except in CI (the `CI` variable set), where it must be there.
fn check_hlog_with_hdrhistogram_py(hlog: &Path, reps: usize, e2e_samples: u64) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/check_hlog.py");
    let ready = Command::new("python3")
        .args(["-c", "import hdrh.log"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install HdrHistogram_py: pip install hdrhistogram"
        );
        eprintln!(
            "\n*** SKIPPED the HdrHistogram_py check of {}: `pip install hdrhistogram` to run it ***\n",
            hlog.display()
        );
        return;
    }
    let o = Command::new("python3")
        .arg(&script)
        .arg(hlog)
        .args(["--tag", "end_to_end"])
        .args(["--intervals", &reps.to_string()])
        .args(["--samples", &e2e_samples.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
}
