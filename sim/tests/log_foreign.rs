//! A ROS 2 bag written by an independent writer (the PyPI `mcap-ros2-support` package, JPEG
//! by Pillow) with Autoware-style topics, JPEG `CompressedImage` cameras, odometry on another
//! topic, a chain of static transforms for one camera and a calibration file for the other,
//! replays through a `[sensors]` map. Skips loudly when python3 or the packages are missing
//! (`.ci/run` installs them).

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use redline_pipeline::camera::Distortion;
use redline_sim::feed::Feed;
use redline_sim::log::{LogReader, ReadLimits, SensorMap};

#[test]
fn an_autoware_style_bag_with_jpeg_cameras_replays_through_a_sensors_table() {
    let Some(dir) = write_foreign("autoware", &[]) else {
        return;
    };
    let bag = dir.join("bag.mcap");

    // redline's default layout does not fit: the error names the image topics and the way out.
    let e = Feed::from_log(&bag, None).unwrap_err().to_string();
    assert!(
        e.contains("/sensing/camera/front/image_raw/compressed") && e.contains("redline log info"),
        "{e}"
    );

    let feed = read_foreign(&dir, "bag.mcap");
    assert!(feed.issues.is_empty(), "{:?}", feed.issues);
    assert_eq!(feed.frames.len(), 20);
    assert_eq!((feed.width, feed.height), (160, 96));
    assert_eq!(feed.period_ns, 100_000_000);

    // front: intrinsics from its camera_info, mount from base_link -> sensor_kit -> optical
    let front = &feed.cameras[0];
    assert_eq!(front.name, "front");
    assert_eq!((front.fx, front.cx, front.cy), (120.0, 80.0, 48.0));
    assert!(
        (front.x - 1.5).abs() < 1e-9 && (front.z - 1.6).abs() < 1e-9,
        "{front:?}"
    );
    assert!(front.yaw.abs() < 1e-9 && (front.pitch - 5f64.to_radians()).abs() < 1e-9);
    // rear: everything from the calibration file
    let rear = &feed.cameras[1];
    assert_eq!(rear.name, "rear");
    assert!(
        (rear.x + 1.0).abs() < 1e-12 && (rear.yaw.abs() - PI).abs() < 1e-12,
        "{rear:?}"
    );

    for (k, f) in feed.frames.iter().enumerate() {
        assert_eq!(f.present, 0b11, "frame {k}: both cameras decoded");
        assert!(
            f.ego_present,
            "frame {k}: odometry from /localization/kinematic_state"
        );
        assert!(
            (f.ego.x - k as f64).abs() < 1e-9,
            "frame {k}: ego x {}",
            f.ego.x
        );
        // the red square (JPEG keeps it red) at rows 50..70, columns 20+4k..40+4k
        let (w, x, y) = (160, 30 + 4 * k, 60);
        let px = &f.images[(y * w + x) * 3..][..3];
        assert!(px[0] > 150 && px[1] < 80 && px[2] < 80, "frame {k}: {px:?}");
    }

    // what `redline log info` reads
    let mut r = LogReader::open_any(&bag, ReadLimits::default()).unwrap();
    let stats = r.channel_stats();
    let count = |t: &str| stats.iter().find(|c| c.topic == t).map(|c| c.count);
    assert_eq!(count("/localization/kinematic_state"), Some(20));
    assert_eq!(count("/sensing/camera/rear/image_raw/compressed"), Some(20));
    assert_eq!(count("/tf_static"), Some(1));
    std::fs::remove_dir_all(&dir).ok();
}

/// Writes the foreign bag with `args` into a fresh directory (returned); `None` (after a loud
/// skip line) when python3 or a package is missing.
fn write_foreign(tag: &str, args: &[&str]) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("redline-foreign-{tag}-{}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/write_foreign_bag.py");
    let out = match std::process::Command::new("python3")
        .arg(&script)
        .arg(&dir)
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("\n==== SKIPPED: foreign bag {tag}: cannot run python3 ({e}) ====\n");
            return None;
        }
    };
    if out.status.code() == Some(3) {
        eprintln!(
            "\n==== SKIPPED: foreign bag {tag}: {} ====\n",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    assert!(
        out.status.success(),
        "write_foreign_bag.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(dir)
}

/// Reads `dir/bag` (a file or a bag directory) through the `[sensors]` table the writer left.
fn read_foreign(dir: &Path, bag: &str) -> Feed {
    let text = std::fs::read_to_string(dir.join("redline.toml")).unwrap();
    let sensors = sensors_of(dir, &text);
    Feed::from_log_mapped(&dir.join(bag), None, ReadLimits::default(), &sensors).unwrap()
}

/// The `[sensors]` table of config `text`, its calibration file `dir/rig.toml`.
fn sensors_of(dir: &Path, text: &str) -> SensorMap {
    let table: toml::Table = toml::from_str(text).unwrap();
    let mut sensors: SensorMap = table["sensors"].clone().try_into().unwrap();
    sensors.calibration = Some(dir.join("rig.toml"));
    sensors
}

/// [`write_foreign`] then [`read_foreign`] of its `bag.mcap`, the directory removed.
fn foreign_feed(tag: &str, args: &[&str]) -> Option<Feed> {
    let dir = write_foreign(tag, args)?;
    let feed = read_foreign(&dir, "bag.mcap");
    std::fs::remove_dir_all(&dir).ok();
    Some(feed)
}

/// Raw `sensor_msgs/msg/Image` cameras in the encodings camera drivers write (Bayer mosaics,
/// YUV 4:2:2 and 4:2:0, 16-bit) replay: each is the rgb8 bag's picture as cv_bridge would convert it —
/// identical where the encoding holds the same bytes, the flat areas identical after a
/// demosaic, close after YUV's chroma subsampling — and a cut-off image is a frame issue
/// naming the camera, not a failed replay.
#[test]
fn raw_image_bags_in_camera_encodings_replay_as_their_rgb_picture() {
    let frames = "4";
    let Some(reference) = foreign_feed("rgb8", &["--raw", "rgb8", "--frames", frames]) else {
        return;
    };
    let (w, h) = (160usize, 96usize);
    let cams = 2;
    assert_eq!(reference.frames.len(), 4);
    assert!(reference.issues.is_empty(), "{:?}", reference.issues);
    for (k, f) in reference.frames.iter().enumerate() {
        assert_eq!(f.present, 0b11, "rgb8 frame {k}");
        let px = &f.images[(60 * w + 30 + 4 * k) * 3..][..3];
        assert_eq!(px, [200, 30, 30], "rgb8 frame {k}: the square");
    }
    let mean_abs_diff = |a: &[u8], b: &[u8]| {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| x.abs_diff(y) as f64)
            .sum::<f64>()
            / a.len() as f64
    };
    for enc in [
        "bgr8",
        "rgb16",
        "bgr16",
        "bayer_rggb8",
        "bayer_bggr8",
        "bayer_gbrg8",
        "bayer_grbg8",
        "bayer_rggb16",
        "yuv422",
        "yuv422_yuy2",
        "nv21",
        "nv12",
    ] {
        let dir = write_foreign(enc, &["--raw", enc, "--frames", frames, "--corrupt", "2"])
            .expect("python3 ran for rgb8");
        let feed = read_foreign(&dir, "bag.mcap");
        // `redline log info`: the first image of each camera, its encoding and size.
        let mut r = LogReader::open_any(&dir.join("bag.mcap"), ReadLimits::default()).unwrap();
        let samples = r.camera_samples();
        std::fs::remove_dir_all(&dir).ok();
        let image = samples
            .iter()
            .find(|c| c.topic == "/sensing/camera/front/image_raw")
            .unwrap();
        assert_eq!(
            (
                image.format.as_str(),
                image.width,
                image.height,
                &image.problem
            ),
            (enc, 160, 96, &None)
        );
        assert_eq!(feed.frames.len(), 4, "{enc}");
        for (k, (f, r)) in feed.frames.iter().zip(&reference.frames).enumerate() {
            if k == 2 {
                // The rear image is cut off halfway: that camera is missing, with the reason.
                assert_eq!(f.present, 0b01, "{enc} frame 2");
                assert!(
                    feed.issues.iter().any(|(frame, why)| *frame == 2
                        && why.contains("camera rear")
                        && why.contains("layout is inconsistent")),
                    "{enc}: {:?}",
                    feed.issues
                );
                continue;
            }
            assert_eq!(f.present, 0b11, "{enc} frame {k}");
            assert_eq!(f.images.len(), cams * w * h * 3);
            let diff = mean_abs_diff(&f.images, &r.images);
            let square = &f.images[(60 * w + 30 + 4 * k) * 3..][..3];
            if !enc.starts_with("bayer") && !enc.starts_with("yuv") && !enc.starts_with("nv") {
                assert_eq!(f.images, r.images, "{enc} frame {k}: same bytes as rgb8");
            } else if enc.starts_with("bayer") {
                // Flat areas demosaic to themselves; only edges blur.
                assert_eq!(square, [200, 30, 30], "{enc} frame {k}");
                assert!(diff < 3.0, "{enc} frame {k}: mean |diff| {diff}");
            } else {
                // 4:2:2 or 4:2:0 chroma and video-range rounding: close, not identical.
                assert!(
                    square[0] > 180 && square[1] < 50 && square[2] < 50,
                    "{enc} frame {k}: {square:?}"
                );
                assert!(diff < 3.0, "{enc} frame {k}: mean |diff| {diff}");
            }
        }
    }
}

/// A recording split over three MCAP files in a ROS 2 bag directory (`metadata.yaml`, the
/// transforms and calibration only in the first file, channel ids numbered anew in each)
/// reads as the same frames as the one-file bag; a cut-off middle file loses only what was
/// cut (its frames reported missing), and the issue names that file.
#[test]
fn a_split_bag_directory_reads_as_one_log() {
    let Some(one) = write_foreign("one-file", &["--frames", "20"]) else {
        return;
    };
    let split = write_foreign("split", &["--frames", "20", "--split", "7"]).expect("python3 ran");
    let whole = read_foreign(&one, "bag.mcap");
    let parts = read_foreign(&split, "bag");
    assert!(parts.issues.is_empty(), "{:?}", parts.issues);
    assert_eq!(parts.frames.len(), 20);
    assert_eq!(
        (parts.width, parts.height, parts.period_ns),
        (whole.width, whole.height, whole.period_ns)
    );
    assert_eq!(
        format!("{:?}", parts.cameras),
        format!("{:?}", whole.cameras)
    );
    for (k, (a, b)) in parts.frames.iter().zip(&whole.frames).enumerate() {
        assert_eq!(a.stamp_ns, b.stamp_ns, "frame {k}");
        assert_eq!(a.present, 0b11, "frame {k}");
        assert_eq!(a.present, b.present, "frame {k}");
        assert_eq!(a.images, b.images, "frame {k}");
        assert_eq!(format!("{:?}", a.ego), format!("{:?}", b.ego), "frame {k}");
    }
    let mut r = LogReader::open_any(&split.join("bag"), ReadLimits::default()).unwrap();
    let names: Vec<String> = r
        .files()
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["bag_0.mcap", "bag_1.mcap", "bag_2.mcap"]);
    let stats = r.channel_stats();
    let count = |t: &str| stats.iter().find(|c| c.topic == t).map(|c| c.count);
    assert_eq!(count("/localization/kinematic_state"), Some(20));
    assert_eq!(
        count("/sensing/camera/front/image_raw/compressed"),
        Some(20)
    );
    assert_eq!(count("/tf_static"), Some(1));
    assert_eq!(stats.len(), 5, "one channel per topic across the files");

    // Cut the middle file (frames 7..14) in half: its summary is gone (a linear scan reads
    // what is left), the other files are untouched.
    let middle = split.join("bag").join("bag_1.mcap");
    let bytes = std::fs::read(&middle).unwrap();
    std::fs::write(&middle, &bytes[..bytes.len() / 2]).unwrap();
    let cut = read_foreign(&split, "bag");
    assert!(
        cut.issues.iter().any(|(_, why)| why.contains("bag_1.mcap")),
        "{:?}",
        cut.issues
    );
    let complete = |f: &redline_pipeline::sensors::SensorFrame| f.present == 0b11;
    let by_stamp = |s: u64| cut.frames.iter().find(|f| f.stamp_ns == s);
    for (k, b) in whole.frames.iter().enumerate() {
        if !(7..14).contains(&k) {
            let a = by_stamp(b.stamp_ns).unwrap_or_else(|| panic!("frame {k} kept"));
            assert!(complete(a) && a.images == b.images, "frame {k}");
        }
    }
    // The writer's one compressed chunk per file is cut: its frames are reported missing,
    // none is made up.
    for k in 7..14 {
        let a = by_stamp(whole.frames[k].stamp_ns);
        assert!(a.is_some_and(|a| !complete(a)), "frame {k}");
        assert!(
            cut.issues
                .iter()
                .any(|(f, why)| *f == k as u64 && why.contains("missing")),
            "frame {k}: {:?}",
            cut.issues
        );
    }
    std::fs::remove_dir_all(&one).ok();
    std::fs::remove_dir_all(&split).ok();
}

/// A camera_info's lens distortion reaches the camera rig (the preprocess stage undoes it),
/// and `redline log info` shows how far it moves the border; a model redline does not know
/// is used as a pinhole, and the replay says so: a log issue naming the camera and the model.
#[test]
fn lens_distortion_in_camera_info_reaches_the_rig_or_is_reported() {
    let Some(dir) = write_foreign("distorted", &["--frames", "3", "--distortion", "-0.3"]) else {
        return;
    };
    let feed = read_foreign(&dir, "bag.mcap");
    assert!(feed.issues.is_empty(), "{:?}", feed.issues);
    assert_eq!(
        feed.cameras[0].distortion,
        Distortion::Polynomial {
            k: [-0.3, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0, 0.0]
        }
    );
    assert!(
        feed.cameras[1].distortion.is_none(),
        "rear: from the calibration file"
    );
    assert_eq!(feed.frames.len(), 3);

    let unknown = write_foreign(
        "distorted-unknown",
        &[
            "--frames",
            "3",
            "--distortion",
            "0.1",
            "--distortion-model",
            "kannala_brandt",
        ],
    )
    .expect("python3 ran");
    let odd = read_foreign(&unknown, "bag.mcap");
    std::fs::remove_dir_all(&unknown).ok();
    let found: Vec<&String> = odd
        .issues
        .iter()
        .filter(|(_, why)| why.contains("LensDistortion"))
        .map(|(_, why)| why)
        .collect();
    assert_eq!(found.len(), 1, "{:?}", odd.issues);
    assert!(
        found[0].contains("camera front")
            && found[0].contains("kannala_brandt")
            && found[0].contains("image_rect"),
        "{}",
        found[0]
    );
    assert!(odd.cameras[0].distortion.is_none(), "used as a pinhole");
    assert_eq!(odd.frames.len(), 3, "the log still replays");

    // `redline log info` describes each camera topic's first message.
    let mut r = LogReader::open_any(&dir.join("bag.mcap"), ReadLimits::default()).unwrap();
    let samples = r.camera_samples();
    let sample = |topic: &str| samples.iter().find(|c| c.topic == topic).unwrap();
    let info = sample("/sensing/camera/front/camera_info");
    // k1 = -0.3 with f = 120 px on 160x96: the corners move by 16.9 px, undistorted.
    assert_eq!(
        (info.format.as_str(), info.width, info.height, &info.problem),
        ("plumb_bob (17 px)", 160, 96, &None)
    );
    let jpeg = sample("/sensing/camera/rear/image_raw/compressed");
    assert_eq!(
        (jpeg.format.as_str(), jpeg.width, jpeg.height, &jpeg.problem),
        ("jpeg", 160, 96, &None)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A bag whose drivers left header stamps zero: the default (header stamps) cannot place its
/// frames and says which `[sensors]` key fixes it; with `stamps = "log_time"` it replays, each
/// message placed by when the recorder logged it.
#[test]
fn zero_header_stamps_replay_by_log_time() {
    let Some(dir) = write_foreign("zero-stamps", &["--frames", "6", "--zero-stamps"]) else {
        return;
    };
    let text = std::fs::read_to_string(dir.join("redline.toml")).unwrap();
    let sensors = sensors_of(&dir, &text);
    let bag = dir.join("bag.mcap");
    // `redline log info` sees it in the first images (and suggests the key).
    let mut r = LogReader::open_any(&bag, ReadLimits::default()).unwrap();
    let samples = r.camera_samples();
    assert!(
        samples
            .iter()
            .filter(|c| c.topic.contains("image_raw"))
            .all(|c| c.unstamped),
        "{samples:?}"
    );
    assert!(samples
        .iter()
        .all(|c| c.topic.contains("image_raw") || !c.unstamped));
    let e = Feed::from_log_mapped(&bag, None, ReadLimits::default(), &sensors)
        .unwrap_err()
        .to_string();
    assert!(e.contains("stamps = \"log_time\""), "{e}");

    // The key as a user writes it in the config's [sensors] table.
    let text = text.replace("[sensors]\n", "[sensors]\nstamps = \"log_time\"\n");
    let sensors = sensors_of(&dir, &text);
    let feed = Feed::from_log_mapped(&bag, None, ReadLimits::default(), &sensors).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(feed.frames.len(), 6, "{:?}", feed.issues);
    assert_eq!(feed.period_ns, 100_000_000);
    for (k, f) in feed.frames.iter().enumerate() {
        assert_eq!(f.present, 0b11, "frame {k}: {:?}", feed.issues);
        assert!(
            f.ego_present && (f.ego.x - k as f64).abs() < 1e-9,
            "frame {k}"
        );
    }
}

/// Cameras of different sizes (the rear camera at twice the front's resolution): the rear's
/// images are resized to the front's size when read and its intrinsics scaled, with a note
/// saying so; its pictures match the same bag with equal sizes.
#[test]
fn cameras_of_different_sizes_are_resized_to_the_smallest() {
    let Some(same) = write_foreign("equal-sizes", &["--frames", "4"]) else {
        return;
    };
    let mixed = write_foreign("mixed-sizes", &["--frames", "4", "--rear-size", "320x192"])
        .expect("python3 ran");
    let (a, b) = (
        read_foreign(&same, "bag.mcap"),
        read_foreign(&mixed, "bag.mcap"),
    );
    std::fs::remove_dir_all(&same).ok();
    std::fs::remove_dir_all(&mixed).ok();
    assert_eq!((b.width, b.height), (160, 96));
    let rear = &b.cameras[1];
    assert_eq!(
        (rear.width, rear.height, rear.fx, rear.cx),
        (160, 96, 120.0, 80.0)
    );
    let notes: Vec<&String> = b
        .issues
        .iter()
        .map(|(_, why)| why)
        .filter(|why| why.contains("ResizedCamera"))
        .collect();
    assert!(
        notes.len() == 1 && notes[0].contains("camera rear") && notes[0].contains("320x192"),
        "{:?}",
        b.issues
    );
    assert_eq!(b.frames.len(), a.frames.len());
    let len = 160 * 96 * 3;
    for (k, (fa, fb)) in a.frames.iter().zip(&b.frames).enumerate() {
        assert_eq!(fb.present, 0b11, "frame {k}");
        assert_eq!(
            fa.images[..len],
            fb.images[..len],
            "frame {k}: the front is untouched"
        );
        let (ra, rb) = (&fa.images[len..], &fb.images[len..]);
        let mad = ra
            .iter()
            .zip(rb)
            .map(|(&x, &y)| x.abs_diff(y) as f64)
            .sum::<f64>()
            / len as f64;
        // Upscaled by Pillow, JPEG-coded at 4x the pixels, area-averaged back: close.
        assert!(mad < 4.0, "frame {k}: rear mean |diff| {mad}");
    }
}

/// A bag in SQLite storage (`--storage sqlite3`: `bag_0.db3` and `metadata.yaml`, as ROS 2
/// Humble records by default) reads to the MCAP recording's frames, byte for byte; a file
/// cut short loses only the frames whose pages are gone (reported, none made up); the
/// transactions a dead recorder left in its write-ahead log (`-wal`) are read, as SQLite
/// recovers them.
#[test]
fn a_sqlite_bag_reads_like_its_mcap_recording() {
    let Some(one) = write_foreign("db3-mcap", &["--frames", "20"]) else {
        return;
    };
    let db3 = write_foreign(
        "db3",
        &[
            "--frames",
            "20",
            "--storage",
            "sqlite3",
            "--page-size",
            "1024",
        ],
    )
    .expect("python3 ran");
    let whole = read_foreign(&one, "bag.mcap");
    let same = |feed: &Feed, why: &str| {
        assert_eq!(feed.frames.len(), whole.frames.len(), "{why}");
        assert_eq!(
            format!("{:?}", feed.cameras),
            format!("{:?}", whole.cameras),
            "{why}"
        );
        for (k, (a, b)) in feed.frames.iter().zip(&whole.frames).enumerate() {
            assert_eq!(
                (a.stamp_ns, a.present, &a.images),
                (b.stamp_ns, b.present, &b.images),
                "{why}: frame {k}"
            );
            assert_eq!(
                format!("{:?}", a.ego),
                format!("{:?}", b.ego),
                "{why}: frame {k}"
            );
        }
    };
    let feed = read_foreign(&db3, "bag");
    assert!(feed.issues.is_empty(), "{:?}", feed.issues);
    same(&feed, "the bag directory");
    // SQLite's largest page (its header stores 65536 as 1): every image on its leaf page.
    let big = write_foreign(
        "db3-64k",
        &[
            "--frames",
            "20",
            "--storage",
            "sqlite3",
            "--page-size",
            "65536",
        ],
    )
    .expect("python3 ran");
    same(&read_foreign(&big, "bag"), "64 KiB pages");
    std::fs::remove_dir_all(&big).ok();
    let file = db3.join("bag").join("bag_0.db3");
    let mut r = LogReader::open_any(&file, ReadLimits::default()).unwrap();
    assert!(r.is_indexed() && r.issues().is_empty(), "{:?}", r.issues());
    let stats = r.channel_stats();
    let count = |t: &str| stats.iter().find(|c| c.topic == t).map(|c| c.count);
    assert_eq!(count("/localization/kinematic_state"), Some(20));
    assert_eq!(count("/sensing/camera/rear/image_raw/compressed"), Some(20));
    assert_eq!(count("/tf_static"), Some(1));

    // A recorder in write-ahead-log mode that died: every message is still in the -wal
    // file, in committed transactions. They read as SQLite recovers them.
    let wal = write_foreign(
        "db3-wal",
        &["--frames", "20", "--storage", "sqlite3", "--wal-crash"],
    )
    .expect("python3 ran");
    let crashed = read_foreign(&wal, "bag");
    assert!(crashed.issues.is_empty(), "{:?}", crashed.issues);
    same(&crashed, "from the -wal file");
    // Bytes after the last commit (an unfinished transaction): not read, and said.
    let wal_file = wal.join("bag").join("bag_0.db3-wal");
    let log = std::fs::read(&wal_file).unwrap();
    let mut longer = log.clone();
    longer.extend(vec![7u8; 1000]);
    std::fs::write(&wal_file, &longer).unwrap();
    let r = LogReader::open_any(&wal.join("bag"), ReadLimits::default()).unwrap();
    assert!(
        r.issues()
            .iter()
            .any(|i| i.detail.contains("last 1000 bytes")),
        "{:?}",
        r.issues()
    );
    // The log cut in its middle: the transactions before the cut read, the rest are lost.
    std::fs::write(&wal_file, &log[..log.len() / 2]).unwrap();
    let half = read_foreign(&wal, "bag");
    let kept = half.frames.iter().filter(|f| f.present == 0b11).count();
    assert!(kept > 0 && kept < 20, "{kept}");
    assert!(
        half.issues.iter().any(|(_, why)| why.contains("-wal")),
        "{:?}",
        half.issues
    );
    std::fs::remove_dir_all(&wal).ok();

    // Cut the file at two thirds: rows and overflow pages past the cut are gone.
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let cut = read_foreign(&db3, "bag");
    assert!(
        cut.issues
            .iter()
            .any(|(_, why)| why.contains("outside the file")),
        "{:?}",
        cut.issues
    );
    let complete: Vec<_> = cut.frames.iter().filter(|f| f.present == 0b11).collect();
    assert!(
        !complete.is_empty() && complete.len() < 20,
        "{}",
        complete.len()
    );
    for f in complete {
        let b = whole
            .frames
            .iter()
            .find(|b| b.stamp_ns == f.stamp_ns)
            .unwrap();
        assert_eq!(f.images, b.images, "a frame kept is the recording's");
    }
    std::fs::remove_dir_all(&one).ok();
    std::fs::remove_dir_all(&db3).ok();
}

/// A log whose ego comes from a localiser's pose alone
/// (`geometry_msgs/msg/PoseWithCovarianceStamped`, named as the `[sensors]` odometry topic)
/// replays with the pose of the odometry bag of the same drive and its speed and yaw rate
/// from consecutive poses (a 10 m/s arc at 0.2 rad/s: the chord's speed, within 2e-5 of the
/// arc's); the first pose has none (0).
#[test]
fn a_pose_only_odometry_topic_gives_the_ego_its_speed_and_yaw_rate() {
    let Some(odom) = write_foreign("odom-arc", &["--frames", "8", "--turn", "0.2"]) else {
        return;
    };
    let pose = write_foreign("pose-arc", &["--frames", "8", "--turn", "0.2", "--pose"])
        .expect("python3 ran");
    let want = read_foreign(&odom, "bag.mcap");
    let got = read_foreign(&pose, "bag.mcap");
    assert!(got.issues.is_empty(), "{:?}", got.issues);
    assert_eq!(got.frames.len(), 8);
    for (k, (a, b)) in got.frames.iter().zip(&want.frames).enumerate() {
        assert!(a.ego_present && b.ego_present, "frame {k}");
        let (a, b) = (&a.ego, &b.ego);
        assert_eq!(
            (a.stamp_ns, a.x, a.y, a.yaw),
            (b.stamp_ns, b.x, b.y, b.yaw),
            "frame {k}"
        );
        assert_eq!(
            (b.v, b.yaw_rate),
            (10.0, 0.2),
            "frame {k}: the odometry's twist"
        );
        if k == 0 {
            assert_eq!((a.v, a.yaw_rate), (0.0, 0.0), "no pose before the first");
        } else {
            assert!((a.v - 10.0).abs() < 2e-4, "frame {k}: v {}", a.v);
            assert!(
                (a.yaw_rate - 0.2).abs() < 1e-9,
                "frame {k}: yaw rate {}",
                a.yaw_rate
            );
        }
    }
    // Read from the middle (`replay --start`): the pose before the start still gives the
    // first one its speed.
    let first = first_ego_from(&pose.join("bag.mcap"), &pose, 550_000_000);
    assert_eq!(first.stamp_ns, want.frames[6].ego.stamp_ns);
    assert!((first.v - 10.0).abs() < 2e-4, "{first:?}");
    std::fs::remove_dir_all(&odom).ok();
    std::fs::remove_dir_all(&pose).ok();
}

/// The first ego state [`LogReader::messages`] gives from `offset_ns` into the log at
/// `bag`, read through the `[sensors]` table the writer left in `dir`.
fn first_ego_from(bag: &Path, dir: &Path, offset_ns: u64) -> redline_sim::types::EgoState {
    let text = std::fs::read_to_string(dir.join("redline.toml")).unwrap();
    let sensors = sensors_of(dir, &text);
    let mut r = LogReader::open_mapped(bag, ReadLimits::default(), &sensors).unwrap();
    let start = r.time_range().0 + offset_ns;
    let odom = r.odometry_topic().to_string();
    let first = r
        .messages(&[odom.as_str()], start, u64::MAX)
        .find_map(|m| match m.payload {
            redline_sim::log::Payload::Odometry(ego) => Some(ego),
            _ => None,
        });
    first.expect("an ego state after the start")
}

/// A log whose ego lives only in the transform tree (`/tf`: `map` → `odom` every 5 frames,
/// `odom` → `base_link` each frame, a wheel beside it), named as the odometry topic: the
/// chain composes to the drive's pose in `map`, and speed and yaw rate come from
/// consecutive poses.
#[test]
fn a_transform_tree_odometry_topic_composes_the_ego_pose() {
    let Some(odom) = write_foreign("odom-arc-tf", &["--frames", "8", "--turn", "0.2"]) else {
        return;
    };
    let tf = write_foreign("tf-arc", &["--frames", "8", "--turn", "0.2", "--tf-ego"])
        .expect("python3 ran");
    let want = read_foreign(&odom, "bag.mcap");
    let got = read_foreign(&tf, "bag.mcap");
    assert!(got.issues.is_empty(), "{:?}", got.issues);
    assert_eq!((got.frames.len(), got.period_ns), (8, want.period_ns));
    for (k, (a, b)) in got.frames.iter().zip(&want.frames).enumerate() {
        assert!(a.ego_present, "frame {k}");
        let (a, b) = (&a.ego, &b.ego);
        assert_eq!(a.stamp_ns, b.stamp_ns, "frame {k}");
        let close = (a.x - b.x).abs() < 1e-9 && (a.y - b.y).abs() < 1e-9;
        assert!(
            close && (a.yaw - b.yaw).abs() < 1e-9,
            "frame {k}: {a:?} vs {b:?}"
        );
        if k > 0 {
            assert!((a.v - 10.0).abs() < 2e-4, "frame {k}: v {}", a.v);
            assert!(
                (a.yaw_rate - 0.2).abs() < 1e-6,
                "frame {k}: yaw rate {}",
                a.yaw_rate
            );
        }
    }
    // Read from frame 6 (`replay --start`): `map` -> `odom` came at frame 5, before the
    // start; the pose is still composed in `map`, with its speed.
    let first = first_ego_from(&tf.join("bag.mcap"), &tf, 550_000_000);
    let b = &want.frames[6].ego;
    assert_eq!(first.stamp_ns, b.stamp_ns);
    assert!(
        (first.x - b.x).abs() < 1e-9 && (first.y - b.y).abs() < 1e-9,
        "{first:?}"
    );
    assert!((first.v - 10.0).abs() < 2e-4, "{first:?}");
    // A mobile robot's tree: odom -> base_footprint moves, base_footprint -> base_link is
    // static (0.3 m up, in /tf_static): the same pose in the plane.
    let robot = write_foreign(
        "tf-footprint",
        &[
            "--frames",
            "8",
            "--turn",
            "0.2",
            "--tf-ego",
            "--tf-footprint",
        ],
    )
    .expect("python3 ran");
    let feet = read_foreign(&robot, "bag.mcap");
    assert!(feet.issues.is_empty(), "{:?}", feet.issues);
    for (k, (a, b)) in feet.frames.iter().zip(&got.frames).enumerate() {
        assert!(a.ego_present, "frame {k}");
        assert_eq!(format!("{:?}", a.ego), format!("{:?}", b.ego), "frame {k}");
    }
    std::fs::remove_dir_all(&robot).ok();
    std::fs::remove_dir_all(&odom).ok();
    std::fs::remove_dir_all(&tf).ok();
}

/// A file-compressed split bag (`--compress-files`: `bag_K.mcap.zstd`) reads as the same
/// frames as the one-file bag, with every decompressed copy kept (the default budget) and
/// with a temporary-disk budget of one byte, which keeps one copy at a time: each file is
/// then decompressed again when the read reaches it.
#[test]
fn a_file_compressed_split_bag_reads_as_one_log_within_its_disk_budget() {
    let Some(one) = write_foreign("zstd-one", &["--frames", "20"]) else {
        return;
    };
    let packed = write_foreign(
        "zstd-split",
        &["--frames", "20", "--split", "7", "--compress-files"],
    )
    .expect("python3 ran");
    let whole = read_foreign(&one, "bag.mcap");
    let text = std::fs::read_to_string(packed.join("redline.toml")).unwrap();
    let sensors = sensors_of(&packed, &text);
    let bag = packed.join("bag");
    let tight = ReadLimits {
        unpacked_disk_bytes: 1,
        ..ReadLimits::default()
    };
    for (limits, what) in [(ReadLimits::default(), "default"), (tight, "one byte")] {
        let feed = Feed::from_log_mapped(&bag, None, limits, &sensors).unwrap();
        assert!(feed.issues.is_empty(), "{what}: {:?}", feed.issues);
        assert_eq!(feed.frames.len(), whole.frames.len(), "{what}");
        for (k, (a, b)) in feed.frames.iter().zip(&whole.frames).enumerate() {
            assert_eq!(a.stamp_ns, b.stamp_ns, "{what}: frame {k}");
            assert_eq!(a.images, b.images, "{what}: frame {k}");
            assert_eq!(
                format!("{:?}", a.ego),
                format!("{:?}", b.ego),
                "{what}: frame {k}"
            );
        }
        let mut r = LogReader::open_mapped(&bag, limits, &sensors).unwrap();
        let at_open = r.decompressions();
        let n = r.messages(&[], 0, u64::MAX).count();
        assert!(n >= 60, "{what}: {n} messages");
        let after = r.decompressions();
        match what {
            "default" => assert_eq!((at_open, after), (3, 3), "{what}"),
            _ => assert!(
                at_open >= 3 && after > at_open,
                "{what}: {at_open} then {after}"
            ),
        }
    }
    std::fs::remove_dir_all(&one).ok();
    std::fs::remove_dir_all(&packed).ok();
}

/// A split bag whose recorder died just after starting a new file (an empty last file, no
/// metadata.yaml) still reads: the empty file is an `UnreadableFile` issue, the frames are
/// the whole recording's. So is an unreadable file that sorts first (the next file is then
/// the log's first); a directory of nothing readable is the first file's error.
#[test]
fn an_empty_or_unreadable_file_of_a_split_bag_is_an_issue_not_the_end() {
    let Some(one) = write_foreign("unreadable-one", &["--frames", "12"]) else {
        return;
    };
    let split = write_foreign("unreadable-split", &["--frames", "12", "--split", "5"])
        .expect("python3 ran");
    let whole = read_foreign(&one, "bag.mcap");
    let bag = split.join("bag");
    std::fs::remove_file(bag.join("metadata.yaml")).unwrap();
    std::fs::write(bag.join("bag_3.mcap"), b"").unwrap();
    std::fs::write(bag.join("bag.mcap"), b"not a bag at all").unwrap();
    let feed = read_foreign(&split, "bag");
    assert_eq!(feed.frames.len(), whole.frames.len());
    for (k, (a, b)) in feed.frames.iter().zip(&whole.frames).enumerate() {
        assert_eq!(
            (a.stamp_ns, &a.images),
            (b.stamp_ns, &b.images),
            "frame {k}"
        );
    }
    let r = LogReader::open_any(&bag, ReadLimits::default()).unwrap();
    let unreadable: Vec<&str> = r
        .issues()
        .iter()
        .filter(|i| i.kind == redline_sim::log::LogIssueKind::UnreadableFile)
        .map(|i| i.detail.as_str())
        .collect();
    assert_eq!(unreadable.len(), 2, "{unreadable:?}");
    assert!(
        unreadable
            .iter()
            .any(|d| d.starts_with("bag.mcap: nothing in it can be read"))
            && unreadable
                .iter()
                .any(|d| d.starts_with("bag_3.mcap: nothing")),
        "{unreadable:?}"
    );
    for f in ["bag_0.mcap", "bag_1.mcap", "bag_2.mcap"] {
        std::fs::write(bag.join(f), b"").unwrap();
    }
    let Err(e) = LogReader::open_any(&bag, ReadLimits::default()) else {
        panic!("a bag of nothing readable opened");
    };
    let e = e.to_string();
    assert!(e.contains("bag.mcap is neither an MCAP file"), "{e}");
    std::fs::remove_dir_all(&one).ok();
    std::fs::remove_dir_all(&split).ok();
}

/// H.264 and H.265 cameras (`--video`: libx264 and libx265 through PyAV, a keyframe every 5
/// frames) decode to the very pictures FFmpeg's decoder gives (converted to RGB by the same
/// BT.601 formulas), every pixel: as `foxglove_msgs/msg/CompressedVideo`, as a
/// `CompressedImage` of format `h264`/`h265`, as `ffmpeg_image_transport_msgs/msg/FFMPEGPacket`,
/// as `h264_msgs/msg/Packet` (H.264),
/// and with B-frames (each message stamped with its picture's time: the pictures land in
/// their frames; those the reordering delays past their frame are reported late). The H.265
/// bags are 164x90 (coded 168x96: the picture is cropped), their B-frame one has x265's
/// open groups of pictures (CRA keyframes whose leading pictures need the group before),
/// and one is Main 10 (10-bit samples, rounded to 8 bits before the conversion). Streams
/// whose VUI signals BT.709 (H.264 video range, H.265 full range) are converted by that
/// matrix. A
/// damaged access unit is an issue and the stream resumes at the next keyframe (H.265 with
/// open groups: without the leading pictures, each an issue); a read that starts inside a
/// group of pictures is pre-read from its keyframe, whatever the message type.
#[test]
fn video_cameras_decode_to_ffmpegs_pictures_exactly() {
    // FFmpeg's pictures of a bag's camera, every frame in display order.
    let pictures =
        |dir: &Path, cam: &str| std::fs::read(dir.join(format!("video_{cam}.rgb"))).unwrap();
    for codec in ["h264", "h265"] {
        let (name, (w, h), size) = match codec {
            "h264" => ("H.264", (160usize, 96usize), "160x96"),
            _ => ("H.265", (164, 90), "164x90"),
        };
        let forms: &[&str] = match codec {
            "h264" => &["", "-image", "-ffmpeg", "-bframes", "-bt709", "-packet"],
            _ => &["", "-image", "-ffmpeg", "-bframes", "-10bit", "-bt709full"],
        };
        for &form in forms {
            let mode = format!("{codec}{form}");
            let args = [
                "--frames",
                "12",
                "--video",
                &mode,
                "--corrupt",
                "7",
                "--size",
                size,
            ];
            let Some(dir) = write_foreign(&format!("video-{mode}"), &args) else {
                return;
            };
            let ffmpeg = [pictures(&dir, "front"), pictures(&dir, "rear")];
            let picture = |cam: usize, k: usize| &ffmpeg[cam][k * w * h * 3..][..w * h * 3];
            let feed = read_foreign(&dir, "bag.mcap");
            assert_eq!(feed.frames.len(), 12, "{mode}");
            let mut exact = 0;
            for (k, f) in feed.frames.iter().enumerate() {
                for (cam, cam_name) in ["front", "rear"].iter().enumerate() {
                    if f.present & (1 << cam) == 0 {
                        continue;
                    }
                    let got = &f.images[cam * w * h * 3..][..w * h * 3];
                    assert!(got == picture(cam, k), "{mode}: frame {k} {cam_name}");
                    exact += 1;
                }
            }
            let issue = |k: u64, what: &str| {
                feed.issues
                    .iter()
                    .any(|(frame, why)| *frame == k && why.contains(what))
            };
            // The rear unit 7 (in coding order) is cut: an issue, then the pictures up to
            // the next keyframe.
            let anywhere = |what: &str| feed.issues.iter().any(|(_, why)| why.contains(what));
            let damaged = format!("camera rear: {name} access unit cannot be decoded");
            assert!(anywhere(&damaged), "{mode}: {:?}", feed.issues);
            if form == "-bframes" {
                // Reordered pictures arrive after the frame that shows them: late, not
                // misplaced (and the pictures after the damage may be too late to say why
                // they are missing: the reader's own read below does).
                assert!(issue(1, "camera front late"), "{mode}: {:?}", feed.issues);
                assert!(exact >= 12, "{mode}: {exact} pictures used");
            } else {
                assert!(anywhere("after a damaged access unit"), "{mode}");
                // Everything but rear 7, 8, 9.
                assert!(issue(7, &damaged), "{mode}");
                assert!(issue(8, "after a damaged access unit"), "{mode}");
                assert_eq!(exact, 24 - 3, "{mode}: {:?}", feed.issues);
                assert!(
                    feed.frames[10].present == 0b11,
                    "{mode}: the keyframe at 10"
                );
            }

            // A read from frame 2: every video camera (a CompressedImage one too, told by
            // its first message's format) is pre-read from 2 s before (its keyframe at 0),
            // so its first picture is frame 2's, exact.
            let text = std::fs::read_to_string(dir.join("redline.toml")).unwrap();
            let sensors = sensors_of(&dir, &text);
            let mut r =
                LogReader::open_mapped(&dir.join("bag.mcap"), ReadLimits::default(), &sensors)
                    .unwrap();
            let (start, _) = r.time_range();
            let t0 = 1_700_000_000_000_000_000u64;
            // The whole read, the rear camera's refusals by the frame that shows them.
            let rear: Vec<(u64, String)> = (r.messages(&[], start, u64::MAX))
                .filter_map(|m| match m.payload {
                    redline_sim::log::Payload::Image {
                        cam: 1,
                        image: Err(e),
                    } => Some(((m.stamp_ns - t0) / 100_000_000, e.to_string())),
                    _ => None,
                })
                .collect();
            let refused = |what: &str| rear.iter().any(|(_, why)| why.contains(what));
            assert!(refused("after a damaged access unit"), "{mode}: {rear:?}");
            if mode == "h265-bframes" {
                // Coding order 0 3 2 1 5 4 8 7 6 10 9 11 (5 and 10: CRA keyframes, 4 and 9
                // their leading pictures): 7 is cut, 6 follows the damage, and the stream
                // resumes at the CRA 10, whose leading picture 9 needs the group before.
                assert!(
                    (rear.iter()).any(|(k, why)| *k == 9 && why.contains("leading picture (RASL)")),
                    "{mode}: {rear:?}"
                );
            }
            let from = start + 2 * 100_000_000;
            let mut first_picture = None;
            let mut waiting = 0;
            for m in r.messages(&[], from, u64::MAX) {
                if let redline_sim::log::Payload::Image { cam: 0, image } = m.payload {
                    match image {
                        Ok(img) if first_picture.is_none() => {
                            first_picture = Some((m.stamp_ns, img.data))
                        }
                        Err(e) if e.to_string().contains("first keyframe") => waiting += 1,
                        _ => {}
                    }
                }
            }
            let (at, data) = first_picture.expect("a picture");
            // (With B-frames a picture shown at 1 arrives after frame 2's time: it comes
            // first.)
            let k = ((at - t0) / 100_000_000) as usize;
            match form {
                "-bframes" => assert!(k <= 2, "{mode}: {k}"),
                _ => assert_eq!(k, 2, "{mode}"),
            }
            assert!(data == picture(0, k), "{mode}: picture {k}");
            assert_eq!(
                waiting, 0,
                "{mode}: pre-rolled, nothing waits for a keyframe"
            );
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}
