//! `redline regress` and `redline report merge` as a CI job runs them: exit codes (0 pass,
//! 1 regression, 2 cannot run), messages, the output directory, baselines on disk, A/B
//! mode with worker processes, and the interval log read by HdrHistogram's own Python
//! reader.
//!
//! These tests check the plumbing, not the statistics (tests/tests/regress.rs does that on
//! alternating replays of a calibrated graph, with the default tolerances): the passing
//! runs use wide tolerances and the failing ones a slowdown of several milliseconds, so a
//! noisy machine cannot flip them.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn redline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redline"))
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("redline-regress-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn show(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A short log (4 s, 120 frames), written once for all tests.
fn log() -> &'static Path {
    static LOG: OnceLock<PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let d = dir("log");
        let p = d.join("drive.mcap");
        let o = redline()
            .args(["sim", "generate", "--seconds", "4", "-o"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        p
    })
}

/// Fast replays and tolerances wide enough that only a gross slowdown fails.
const LENIENT: &str = r#"
release = "as_fast_as_possible"
frame_slots = 1
[regress]
reps = 3
warmup_frames = 10
p50 = { relative = 1.0, floor_us = 500.0 }
p99 = { relative = 2.0, floor_us = 2000.0 }
p999 = { relative = 3.0, floor_us = 5000.0 }
max = { relative = 5.0, floor_us = 20000.0 }
deadline_misses = 1000.0
late_publishes = 1000.0
degraded_frames = 1000.0
"#;

/// LENIENT plus 8 ms of busy time in every backbone run (several times its own cost).
fn slowed() -> String {
    format!("{LENIENT}\n[slowdown.backbone]\nbusy_ms = 8.0\n")
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
fn baseline_update_compare_and_merge() {
    let d = dir("baseline");
    let lenient = write(&d, "lenient.toml", LENIENT);
    let slow = write(&d, "slow.toml", &slowed());
    let base = d.join("baseline.json");
    let o = regress(
        &lenient,
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
        &lenient,
        &d.join("same"),
        &["--baseline".as_ref(), base.as_os_str()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains("PASS: all") && out.contains("end_to_end p99"),
        "{out}"
    );
    for f in [
        "measurement.json",
        "verdict.txt",
        "verdict.json",
        "latency.hlog",
        "timeline.svg",
        "percentiles_end_to_end.svg",
        "percentiles_backbone.svg",
    ] {
        assert!(d.join("same").join(f).is_file(), "missing {f}");
    }

    // A slower backbone: exit 1, the stage named.
    let o = regress(
        &slow,
        &d.join("slow"),
        &["--baseline".as_ref(), base.as_os_str()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains("REGRESSION") && out.contains("  backbone p50:"),
        "{out}"
    );
    assert!(
        out.contains("DIFFERENT SETUP"),
        "the slowdown is named: {out}"
    );

    // Merge the two runs: replays and samples add up.
    let merged = d.join("merged.json");
    let o = redline()
        .args(["report", "merge"])
        .arg(d.join("same/measurement.json"))
        .arg(d.join("slow/measurement.json"))
        .arg("-o")
        .arg(&merged)
        .arg("--plots")
        .arg(d.join("merged-plots"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("WARNING: merging 2 different run setups"));
    let count = |p: &Path| -> (usize, u64) {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let reps = v["reps"].as_array().unwrap().len();
        let e2e = v["histograms"][0]["count"].as_u64().unwrap();
        (reps, e2e)
    };
    let (a, b, m) = (
        count(&d.join("same/measurement.json")),
        count(&d.join("slow/measurement.json")),
        count(&merged),
    );
    assert_eq!(m, (a.0 + b.0, a.1 + b.1));
    assert!(d.join("merged-plots/percentiles_backbone.svg").is_file());

    check_hlog_with_hdrhistogram_py(&d.join("same/latency.hlog"), a.0, a.1);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn ab_runs_both_builds_alternately() {
    let d = dir("ab");
    let lenient = write(&d, "lenient.toml", LENIENT);
    let slow = write(&d, "slow.toml", &slowed());
    let me = env!("CARGO_BIN_EXE_redline");
    // This build against itself: pass.
    let o = regress(
        &lenient,
        &d.join("same"),
        &["--against".as_ref(), me.as_ref()],
    );
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
            lenient.as_os_str(),
            "--against".as_ref(),
            me.as_ref(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains("REGRESSION") && out.contains("  backbone p50:"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(d);
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
