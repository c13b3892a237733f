//! JPEG cameras decoded inside the frame, as a user replays a bag: a ROS 2 bag written by
//! the reference Python stack (`tests/python/write_foreign_bag.py`: JPEG `CompressedImage`
//! cameras, one stream damaged) replayed streamed — the graph's `jpeg_decode` stage
//! decodes — gives exactly the outputs of the same bag read into memory (`--in-memory`:
//! decoded when read), the latency table has a row per camera under the stage, and
//! `report.json` counts each camera's decoded and unusable images. Skips loudly when
//! python3 or its packages are missing (`.ci/run` installs them).

mod common;
use common::{check, output_hash};

#[test]
fn a_jpeg_bag_decoded_in_the_graph_matches_the_bag_decoded_when_read() {
    let dir = std::env::temp_dir().join(format!("redline-jpeg-cli-{}", std::process::id()));
    if !common::write_foreign_bag("jpeg_in_graph_cli", &dir, &["--corrupt", "7"]) {
        return;
    }
    let replay = |extra: &[&str], report: &str| {
        let o = check(
            common::redline()
                .current_dir(&dir)
                .args(["replay", "bag.mcap", "--config", "seeded.toml"])
                .args(["--mode", "lockstep", "--report", report])
                .args(extra)
                .output()
                .unwrap(),
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let streamed = replay(&[], "streamed");
    let in_memory = replay(&["--in-memory"], "in-memory");

    assert_eq!(output_hash(&streamed), output_hash(&in_memory));
    // Decoded in the frame: the stage's row, then one row per camera.
    let rows: Vec<&str> = streamed.lines().collect();
    let at = rows
        .iter()
        .position(|l| l.starts_with("jpeg_decode "))
        .unwrap_or_else(|| panic!("no jpeg_decode row in\n{streamed}"));
    assert!(rows[at + 1].trim_start().starts_with("per image: front"));
    assert!(rows[at + 2].trim_start().starts_with("per image: rear"));
    assert!(streamed.contains("1 of 40 images unusable"), "{streamed}");
    // In memory, images are decoded when read: no stage, the damaged one is an input issue.
    assert!(!in_memory.contains("jpeg_decode"), "{in_memory}");
    assert!(in_memory.contains("frame 7: camera rear"), "{in_memory}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("streamed/report.json")).unwrap())
            .unwrap();
    let cams = report["jpeg_decode"]
        .as_array()
        .expect("jpeg_decode in report.json");
    let counts: Vec<(String, u64, u64)> = cams
        .iter()
        .map(|c| {
            (
                c["camera"].as_str().unwrap().to_string(),
                c["decoded"].as_u64().unwrap(),
                c["failed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [("front".to_string(), 20, 0), ("rear".to_string(), 19, 1)]
    );
    assert!(cams[0]["time"]["p50_ns"].as_u64().unwrap() > 0);
    std::fs::remove_dir_all(&dir).ok();
}
