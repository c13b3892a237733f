//! Bags as users have them. A ROS 2 bag directory: a recording split over three MCAP files
//! (`tests/python/write_foreign_bag.py --split`: `metadata.yaml` and `bag_0.mcap` …) is
//! listed by `redline log info` and replays to the output hash of the same recording in one
//! file; a SQLite bag is refused with the way to convert it. A camera with lens distortion in
//! its `camera_info`: the same images replay to other outputs than with an ideal pinhole (the
//! preprocess stage undistorts them). Skips loudly when python3 or its packages are missing
//! (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn check(o: Output) -> Output {
    assert!(
        o.status.success(),
        "exit {:?}\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Writes the foreign bag with `args` into `dir` and a 2-camera config beside it; false
/// (after a loud skip line) when python3 or a package is missing.
fn write_bag(dir: &Path, args: &[&str]) -> bool {
    let _ = std::fs::remove_dir_all(dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/write_foreign_bag.py");
    let out = match Command::new("python3")
        .arg(&script)
        .arg(dir)
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("\n==== SKIPPED: bag_dir_cli: cannot run python3 ({e}) ====\n");
            return false;
        }
    };
    if out.status.code() == Some(3) {
        eprintln!(
            "\n==== SKIPPED: bag_dir_cli: {} ====\n",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return false;
    }
    check(out);
    // The bag has 2 cameras: the untrained network of any shape.
    let config = std::fs::read_to_string(dir.join("redline.toml")).unwrap();
    std::fs::write(
        dir.join("seeded.toml"),
        format!("network = \"seeded\"\n{config}"),
    )
    .unwrap();
    true
}

fn redline(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redline"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn hash_of(dir: &Path, bag: &str) -> String {
    let o = check(redline(
        dir,
        &[
            "replay",
            bag,
            "--config",
            "seeded.toml",
            "--mode",
            "lockstep",
        ],
    ));
    let stdout = String::from_utf8(o.stdout).unwrap();
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("output hash "))
        .unwrap_or_else(|| panic!("no output hash in\n{stdout}"))
        .to_string()
}

#[test]
fn a_split_bag_directory_replays_like_its_recording_in_one_file() {
    let tmp = std::env::temp_dir().join(format!("redline-bag-dir-cli-{}", std::process::id()));
    let (one, split): (PathBuf, PathBuf) = (tmp.join("one"), tmp.join("split"));
    if !write_bag(&one, &["--frames", "12"]) {
        return;
    }
    assert!(write_bag(&split, &["--frames", "12", "--split", "5"]));

    let info = check(redline(&split, &["log", "info", "bag"]));
    let info = String::from_utf8(info.stdout).unwrap();
    assert!(
        info.contains("files:") && info.contains("bag_0.mcap") && info.contains("bag_2.mcap"),
        "{info}"
    );
    assert!(info.contains("/localization/kinematic_state"), "{info}");
    assert_eq!(hash_of(&split, "bag"), hash_of(&one, "bag.mcap"));

    // A bag stored in SQLite: refused, with the conversion to run.
    let meta = split.join("bag").join("metadata.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(
        &meta,
        text.replace("storage_identifier: mcap", "storage_identifier: sqlite3"),
    )
    .unwrap();
    let o = redline(&split, &["replay", "bag", "--config", "seeded.toml"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("SQLite") && err.contains("ros2 bag convert"),
        "{err}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn a_distorted_camera_is_undistorted_before_the_network() {
    let tmp = std::env::temp_dir().join(format!("redline-lens-cli-{}", std::process::id()));
    let (pinhole, lens) = (tmp.join("pinhole"), tmp.join("lens"));
    if !write_bag(&pinhole, &["--frames", "6"]) {
        return;
    }
    assert!(write_bag(&lens, &["--frames", "6", "--distortion", "-0.3"]));
    // The same images; only the front camera_info's k1 differs, and only the preprocess
    // stage reads it.
    assert_ne!(hash_of(&pinhole, "bag.mcap"), hash_of(&lens, "bag.mcap"));
    let info = check(redline(&lens, &["log", "info", "bag.mcap"]));
    let info = String::from_utf8(info.stdout).unwrap();
    assert!(info.contains("plumb_bob (17 px)"), "{info}");
    std::fs::remove_dir_all(&tmp).ok();
}
