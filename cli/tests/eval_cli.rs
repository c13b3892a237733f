//! `redline eval` on a log recorded with another rig than the shipped models declare (a
//! 10° telephoto instead of 20°), as a user meets it: refused with the camera and both
//! values, or, with `check_rig = false` in the config, evaluated with a warning in the
//! text and `rig_mismatch` in the `--json` file. Plumbing only: no assertion on quality.

mod common;
use common::{redline, show};

#[test]
fn eval_refuses_a_log_from_another_rig_unless_the_config_runs_it_anyway() {
    let d = common::fresh_dir("eval-cli", "rig");
    let log = d.join("tele10.mcap");
    let o = redline()
        .args([
            "sim",
            "generate",
            "--seed",
            "3",
            "--seconds",
            "0.3",
            "--tele-hfov",
            "10",
        ])
        .arg("-o")
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));

    let o = redline().arg("eval").arg(&log).output().unwrap();
    let text = show(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("camera 7 (front_tele)")
            && text.contains("10.0 degrees")
            && text.contains("trained with 20.0")
            && text.contains("check_rig = false"),
        "{text}"
    );
    assert!(!text.contains("panicked"), "{text}");

    let cfg = d.join("anyway.toml");
    std::fs::write(&cfg, "check_rig = false\n").unwrap();
    let json = d.join("eval.json");
    let o = redline()
        .arg("eval")
        .arg(&log)
        .arg("--config")
        .arg(&cfg)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = show(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("WARNING: this log's rig is NOT the models'") && text.contains("front_tele"),
        "{text}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON");
    let m = v["logs"][0]["rig_mismatch"].as_str().expect("rig_mismatch");
    assert!(m.contains("front_tele"), "{m}");
}

#[test]
fn a_missing_log_is_named_with_the_os_error_at_most_once() {
    let d = common::fresh_dir("eval-cli", "missing");
    let log = d.join("not-there.mcap");
    for cmd in ["replay", "eval"] {
        let o = redline().arg(cmd).arg(&log).output().unwrap();
        let text = show(&o);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {text}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("not-there.mcap"), "{cmd}: {text}");
        // replay's log error quotes the OS error (eval checks the path first); the CLI must
        // not print it a second time.
        let want = usize::from(cmd == "replay");
        assert_eq!(err.matches("os error 2").count(), want, "{cmd}: {text}");
        assert!(!text.contains("panicked"), "{cmd}: {text}");
    }
}
