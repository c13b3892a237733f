//! Bags as users have them. A ROS 2 bag directory: a recording split over three MCAP files
//! (`tests/python/write_foreign_bag.py --split`: `metadata.yaml` and `bag_0.mcap` …) is
//! listed by `redline log info` and replays to the output hash of the same recording in one
//! file; so does the recording in SQLite storage (`--storage sqlite3`, as ROS 2 Humble
//! records: the bag directory, or its `.db3` file alone; split, with zstd message
//! compression and 512-byte pages, which spill every image over overflow pages; and as the
//! `rosbags` package's rosbag2 writer writes it, SQLite or MCAP, messages compressed), and
//! compressed file by file (`--compress-files`, a file cut short keeping its first frames); a bag of
//! another storage plugin is refused with the way to convert it. A camera with lens distortion in
//! its `camera_info`: the same images replay to other outputs than with an ideal pinhole (the
//! preprocess stage undistorts them). Skips loudly when python3 or its packages are missing
//! (`.ci/run` installs them).

mod common;
use common::{check, output_hash};

use std::path::{Path, PathBuf};
use std::process::Output;

fn write_bag(dir: &Path, args: &[&str]) -> bool {
    common::write_foreign_bag("bag_dir_cli", dir, args)
}

fn redline(dir: &Path, args: &[&str]) -> Output {
    common::redline()
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
    output_hash(&String::from_utf8(o.stdout).unwrap())
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

    // Another storage plugin: refused, with the conversion to run.
    let meta = split.join("bag").join("metadata.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(
        &meta,
        text.replace("storage_identifier: mcap", "storage_identifier: bagfs"),
    )
    .unwrap();
    let o = redline(&split, &["replay", "bag", "--config", "seeded.toml"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("\"bagfs\"") && err.contains("ros2 bag convert"),
        "{err}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn sqlite_bags_replay_like_their_mcap_recording() {
    let tmp = std::env::temp_dir().join(format!("redline-db3-cli-{}", std::process::id()));
    let (one, db3, packed) = (tmp.join("one"), tmp.join("db3"), tmp.join("packed"));
    if !write_bag(&one, &["--frames", "12"]) {
        return;
    }
    assert!(write_bag(&db3, &["--frames", "12", "--storage", "sqlite3"]));
    assert!(write_bag(
        &packed,
        &[
            "--frames",
            "12",
            "--storage",
            "sqlite3",
            "--split",
            "5",
            "--compress-messages",
            "--page-size",
            "512",
        ],
    ));
    let want = hash_of(&one, "bag.mcap");
    assert_eq!(hash_of(&db3, "bag"), want, "the bag directory");
    assert_eq!(hash_of(&db3, "bag/bag_0.db3"), want, "its .db3 file alone");
    assert_eq!(
        hash_of(&packed, "bag"),
        want,
        "split, compressed, small pages"
    );

    let info = check(redline(&packed, &["log", "info", "bag"]));
    let info = String::from_utf8(info.stdout).unwrap();
    assert!(
        info.contains("bag_0.db3") && info.contains("bag_2.db3") && info.contains("messages:  38"),
        "{info}"
    );

    // Bags written by another implementation of rosbag2 (the `rosbags` package: schema
    // version 8 tables, its metadata.yaml), SQLite and MCAP, zstd message compression.
    for storage in ["sqlite3", "mcap"] {
        let dir = tmp.join(format!("rosbags-{storage}"));
        let args = [
            "--frames",
            "12",
            "--writer",
            "rosbags",
            "--storage",
            storage,
            "--compress-messages",
        ];
        if !write_bag(&dir, &args) {
            continue;
        }
        assert_eq!(hash_of(&dir, "bag"), want, "rosbags, {storage}");
    }
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

/// A camera_info that describes the sensor at full resolution with binning, or with the
/// images a region of interest of it (as binning and cropping camera drivers publish them):
/// the intrinsics are those of the images (image_geometry's reading), so both replay to the
/// output hash of the bag whose camera_info describes the images directly.
#[test]
fn a_binned_or_cropped_camera_info_describes_its_images() {
    let tmp = std::env::temp_dir().join(format!("redline-binning-cli-{}", std::process::id()));
    let (plain, binned, cropped) = (tmp.join("plain"), tmp.join("binned"), tmp.join("roi"));
    if !write_bag(&plain, &["--frames", "6"]) {
        return;
    }
    assert!(write_bag(&binned, &["--frames", "6", "--binning", "2"]));
    assert!(write_bag(&cropped, &["--frames", "6", "--roi"]));
    let want = hash_of(&plain, "bag.mcap");
    assert_eq!(hash_of(&binned, "bag.mcap"), want, "binning 2");
    assert_eq!(hash_of(&cropped, "bag.mcap"), want, "region of interest");
    let info = check(redline(&binned, &["log", "info", "bag.mcap"]));
    let info = String::from_utf8(info.stdout).unwrap();
    assert!(
        info.contains("CameraInfo       plumb_bob        160x96  ok"),
        "{info}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

/// A file-compressed bag (`ros2 bag record --compression-mode file`: each file one zstd
/// stream, `bag_K.mcap.zstd` / `bag_K.db3.zstd`) replays to the plain recording's output
/// hash, split or not, MCAP or SQLite, written by the script or by the `rosbags` package,
/// and so does one compressed file passed alone. A compressed file cut short keeps the
/// frames before the cut and says where the stream broke.
#[test]
fn file_compressed_bags_replay_like_their_plain_recording() {
    let tmp = std::env::temp_dir().join(format!("redline-zstd-cli-{}", std::process::id()));
    let one = tmp.join("one");
    if !write_bag(&one, &["--frames", "12"]) {
        return;
    }
    let want = hash_of(&one, "bag.mcap");
    let cases: [(&str, &[&str]); 4] = [
        ("split-mcap", &["--split", "5"]),
        ("sqlite", &["--storage", "sqlite3"]),
        (
            "rosbags-sqlite",
            &["--writer", "rosbags", "--storage", "sqlite3"],
        ),
        (
            "rosbags-mcap",
            &["--writer", "rosbags", "--storage", "mcap"],
        ),
    ];
    for (name, args) in cases {
        let dir = tmp.join(name);
        let mut all = vec!["--frames", "12", "--compress-files"];
        all.extend_from_slice(args);
        if !write_bag(&dir, &all) {
            continue;
        }
        assert_eq!(hash_of(&dir, "bag"), want, "{name}");
    }
    let sqlite = tmp.join("sqlite");
    assert_eq!(
        hash_of(&sqlite, "bag/bag_0.db3.zstd"),
        want,
        "the .db3.zstd file alone"
    );
    let o = check(redline(&tmp.join("split-mcap"), &["log", "info", "bag"]));
    let (info, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        info.contains("bag_0.mcap.zstd")
            && info.contains("messages:  38")
            && info.contains("decompressed from 3 zstd-compressed files"),
        "{info}"
    );
    assert!(
        err.contains("decompressing 3 zstd-compressed bag files"),
        "{err}"
    );

    // Cut the middle file of a split bag at two thirds (images large enough for several
    // zstd blocks): its first frames are read, the rest are missing, and the issue says why.
    let cut = tmp.join("cut");
    let args = [
        "--frames",
        "12",
        "--split",
        "5",
        "--size",
        "640x480",
        "--texture",
        "--compress-files",
    ];
    assert!(write_bag(&cut, &args));
    let middle = cut.join("bag").join("bag_1.mcap.zstd");
    let bytes = std::fs::read(&middle).unwrap();
    std::fs::write(&middle, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let info = String::from_utf8(check(redline(&cut, &["log", "info", "bag"])).stdout).unwrap();
    assert!(
        info.contains("issue: Truncated: bag_1.mcap.zstd: it is compressed with zstd and its stream breaks after"),
        "{info}"
    );
    let o = check(redline(
        &cut,
        &[
            "replay",
            "bag",
            "--config",
            "seeded.toml",
            "--mode",
            "lockstep",
        ],
    ));
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        out.contains("frames: 12 published")
            && out.contains("frame 8: camera front missing")
            && !out.contains("frame 7: camera front missing"),
        "{out}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}
