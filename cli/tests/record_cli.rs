//! `redline replay --record out.mcap` as a user runs it: the recording leaves the output
//! hash alone, its counts reach the terminal and report.json, and the file is read back by
//! the reference Python MCAP reader with the Foxglove schemas decoded and checked against
//! report.json (tools/foxglove/check_record.py). The Python check is skipped loudly without
//! its packages, except in CI (the `CI` variable set), where they must be there.
//!
//! Lockstep replays, so outputs are reproducible on a busy machine.

mod common;
use common::{redline, show};

use std::path::Path;
use std::process::{Command, Output};

const FRAMES: &str = "45";

fn dir(name: &str) -> common::Dir {
    common::fresh_dir("record-cli", name)
}

fn replay(extra: &[&std::ffi::OsStr]) -> Output {
    let o = redline()
        .args(["replay", "--mode", "lockstep", "--frames", FRAMES])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    o
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

/// Runs tools/foxglove/check_record.py on `mcap` and `report_dir/report.json`.
fn python_check(mcap: &Path, report_dir: &Path) {
    let ready = Command::new("python3")
        .args([
            "-c",
            "import mcap, mcap_protobuf, foxglove_schemas_protobuf",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install the Python MCAP reader and the Foxglove schemas: \
             pip install mcap mcap-protobuf-support foxglove-schemas-protobuf"
        );
        eprintln!(
            "\n*** SKIPPED the Python check of {}: `pip install mcap mcap-protobuf-support \
             foxglove-schemas-protobuf` to run it ***\n",
            mcap.display()
        );
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/foxglove/check_record.py");
    let o = Command::new("python3")
        .arg(script)
        .arg(mcap)
        .arg(report_dir.join("report.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(", 0 failed"), "{out}");
    eprintln!("{out}");
}

#[test]
fn recording_is_read_back_by_python_and_leaves_the_output_hash_alone() {
    let d = dir("plain");
    let (plain, recorded, mcap) = (d.join("plain"), d.join("recorded"), d.join("out.mcap"));
    replay(&["--report".as_ref(), plain.as_os_str()]);
    let o = replay(&[
        "--report".as_ref(),
        recorded.as_os_str(),
        "--record".as_ref(),
        mcap.as_os_str(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("recorded {FRAMES} frames to {}", mcap.display()))
            && stdout.contains("0 dropped"),
        "{}",
        show(&o)
    );
    let (a, b) = (report(&plain), report(&recorded));
    assert_eq!(
        a["output_hash"], b["output_hash"],
        "recording changed the outputs"
    );
    assert!(a.get("record").is_none(), "no --record, no record entry");
    let r = &b["record"];
    assert_eq!(r["frames_written"], serde_json::json!(45), "{r}");
    assert_eq!(r["frames_dropped"], serde_json::json!(0), "{r}");
    assert_eq!(
        r["bytes"].as_u64(),
        Some(std::fs::metadata(&mcap).unwrap().len())
    );
    python_check(&mcap, &recorded);
}

/// A critical stage (planning) panics: its fallback stands in from then on (degraded frames)
/// and the ladder goes to safe_stop; the per-frame status and mode in the file still add up
/// to the report's. With `--record-images`: every camera's image of every frame, as JPEG.
#[test]
fn a_degraded_replay_is_recorded_as_the_report_tells_it() {
    let d = dir("faults");
    let cfg = d.join("faults.toml");
    std::fs::write(
        &cfg,
        "[faults]\nseed = 3\n\n[[faults.stage]]\nstage = \"planning\"\nfault = \"panic\"\nframes = \"10..12\"\n",
    )
    .unwrap();
    let (rep, mcap) = (d.join("report"), d.join("faults.mcap"));
    replay(&[
        "--config".as_ref(),
        cfg.as_os_str(),
        "--report".as_ref(),
        rep.as_os_str(),
        "--record".as_ref(),
        mcap.as_os_str(),
        "--record-images".as_ref(),
    ]);
    let r = report(&rep);
    let images = &r["record"]["images"];
    assert_eq!(
        images["images_written"].as_u64(),
        Some(45 * r["graph"]["cameras"].as_u64().unwrap()),
        "{images}"
    );
    let safe_stop = r["runtime"]["mode_residency"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["mode"] == "safe_stop"))
        .map(|m| m["frames"].clone());
    assert!(
        r["runtime"]["frames_degraded"].as_u64() > Some(0)
            && safe_stop.and_then(|f| f.as_u64()) > Some(0),
        "the fault degraded no frame or the ladder did not move: {}",
        r["runtime"]
    );
    python_check(&mcap, &rep);
}

#[test]
fn an_unwritable_record_path_is_refused_before_the_replay() {
    let o = redline()
        .args(["replay", "--mode", "lockstep", "--frames", "3", "--record"])
        .arg("/nonexistent-dir/out.mcap")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        err.contains("--record /nonexistent-dir/out.mcap") && err.contains("cannot create"),
        "{}",
        show(&o)
    );
}
