//! Fleet sharding as a fleet runs it: three logs split over two `redline replay --shard`
//! processes (one with `--shard auto` and a Slurm environment), their measurement files
//! merged by `redline report merge`. What must hold exactly: the shards together replay
//! every frame of every log once, and the merged histograms are the shards' histograms
//! added without loss (counts and every bucket), whatever the timing. (Latencies measured
//! by other processes are other values: a merge can only be compared bucket by bucket with
//! the runs it merged, never with a re-run.)

mod common;
use common::{check, redline};

use std::path::PathBuf;

use redline_bench::regress::measurement::{Measurement, END_TO_END};

fn frames_of(m: &Measurement) -> u64 {
    m.histogram(END_TO_END).unwrap().unwrap().count()
}

#[test]
fn shards_replay_every_log_once_and_merge_without_loss() {
    let d = std::env::temp_dir().join(format!("redline-shard-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let logs: Vec<PathBuf> = (0..3).map(|i| d.join(format!("log{i}.mcap"))).collect();
    // 1, 1.5 and 2 s: 30, 45 and 60 frames.
    for (i, p) in logs.iter().enumerate() {
        let secs = format!("{}", 1.0 + 0.5 * i as f64);
        check(
            redline()
                .args([
                    "sim",
                    "generate",
                    "--seed",
                    &format!("{}", 10 + i),
                    "--seconds",
                    &secs,
                    "-o",
                ])
                .arg(p)
                .output()
                .unwrap(),
        );
    }
    let out = d.join("out");
    let replay = |shard: &str, env: &[(&str, &str)]| {
        let mut c = redline();
        c.args([
            "replay",
            "--mode",
            "lockstep",
            "--perception",
            "oracle",
            "--shard",
            shard,
            "--report",
        ])
        .arg(&out)
        .args(&logs);
        for (k, v) in env {
            c.env(k, v);
        }
        check(c.output().unwrap())
    };
    replay("0/2", &[]);
    // shard 1 of 2 from a Slurm array's environment (task ids 5..6)
    let o = replay(
        "auto",
        &[
            ("SLURM_ARRAY_TASK_ID", "6"),
            ("SLURM_ARRAY_TASK_MIN", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
        ],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("shard 1/2: 1 of 3 logs"));
    let files: Vec<PathBuf> = ["shard-0-of-2", "shard-1-of-2"]
        .iter()
        .map(|s| out.join(s).join("measurement.json"))
        .collect();
    let parts: Vec<Measurement> = files
        .iter()
        .map(|f| Measurement::load(f).unwrap())
        .collect();
    // log0 + log2 (30 + 60 frames) and log1 (45 frames)
    assert_eq!(frames_of(&parts[0]), 90);
    assert_eq!(frames_of(&parts[1]), 45);

    let merged_path = d.join("merged.json");
    check(
        redline()
            .args(["report", "merge"])
            .args(&files)
            .arg("-o")
            .arg(&merged_path)
            .output()
            .unwrap(),
    );
    let merged = Measurement::load(&merged_path).unwrap();
    assert_eq!(merged.reps.len(), 2);
    let mut names = vec![END_TO_END.to_string()];
    names.extend(merged.stage_names());
    assert!(names.len() > 5, "{names:?}");
    for name in &names {
        let mut want = parts[0].histogram(name).unwrap().unwrap();
        want.add(&parts[1].histogram(name).unwrap().unwrap());
        let got = merged.histogram(name).unwrap().unwrap();
        assert_eq!(got.count(), want.count(), "{name}");
        assert!(
            got.as_hdr() == want.as_hdr(),
            "{name}: merged histogram differs bucket by bucket"
        );
    }
    assert_eq!(
        frames_of(&merged),
        30 + 45 + 60,
        "every frame of every log, once"
    );

    // A shard that gets no log says so and succeeds.
    let o = check(
        redline()
            .args(["replay", "--mode", "lockstep", "--shard", "3/4"])
            .args(&logs)
            .output()
            .unwrap(),
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to do"));

    // `redline regress` takes the same shards; the merged shards are judged with --judge.
    let cfg = d.join("regress.toml");
    std::fs::write(&cfg, "[regress]\nreps = 1\nwarmup_frames = 5\n").unwrap();
    let regress = |extra: &[&str], logs: &[PathBuf]| {
        let mut c = redline();
        c.arg("regress")
            .arg("--config")
            .arg(&cfg)
            .args(["--mode", "lockstep", "--perception", "oracle", "--out"])
            .arg(d.join("regress"))
            .args(extra)
            .args(logs);
        c.output().unwrap()
    };
    check(regress(&["--shard", "0/2"], &logs));
    check(regress(&["--shard", "1/2"], &logs));
    let files: Vec<PathBuf> = ["shard-0-of-2", "shard-1-of-2"]
        .iter()
        .map(|s| d.join("regress").join(s).join("measurement.json"))
        .collect();
    let parts: Vec<Measurement> = files
        .iter()
        .map(|f| Measurement::load(f).unwrap())
        .collect();
    // each log's frames after 5 warm-up frames: log0 + log2, and log1
    assert_eq!(frames_of(&parts[0]), 25 + 55);
    assert_eq!(frames_of(&parts[1]), 40);
    check(
        redline()
            .args(["report", "merge"])
            .args(&files)
            .arg("-o")
            .arg(&merged_path)
            .output()
            .unwrap(),
    );
    assert_eq!(frames_of(&Measurement::load(&merged_path).unwrap()), 120);
    // One process measuring all three logs is a baseline the merged shards compare with
    // setup by setup (one per log): no setup warning.
    let baseline = d.join("baseline.json");
    let b = baseline.to_str().unwrap();
    check(regress(&["--baseline", b, "--update-baseline"], &logs));
    assert_eq!(frames_of(&Measurement::load(&baseline).unwrap()), 120);
    let judged = regress(
        &["--judge", merged_path.to_str().unwrap(), "--baseline", b],
        &[],
    );
    let text = String::from_utf8_lossy(&judged.stdout);
    assert!(
        matches!(judged.status.code(), Some(0 | 1)) && text.contains("judged"),
        "{text}\n{}",
        String::from_utf8_lossy(&judged.stderr)
    );
    assert!(!text.contains("DIFFERENT SETUP"), "{text}");
    std::fs::remove_dir_all(&d).ok();
}
