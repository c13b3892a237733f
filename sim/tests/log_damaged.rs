//! Damaged and bad sensor logs: truncated copies (cut between and inside chunks), a corrupt
//! chunk with and without a summary, files that are not MCAP, and bad, late or missing images.
//! Whatever the damage, reading recovers what it can, reports the rest as issues and never
//! panics. Intact round trips: `log_roundtrip.rs`.

mod log_drive;

use log_drive::*;

use redline_sim::log::{
    LogError, LogIssueKind, LogMessage, LogOptions, LogReader, LogWriter, Payload,
};
use redline_sim::msgs::{Image, ImageIssue};
use redline_sim::replay::{read_frames, FrameIssue};

/// Chunk layout of an intact log: (start offset, end offset, messages in it).
fn chunk_layout(bytes: &[u8]) -> Vec<(u64, u64, usize)> {
    let s = mcap::Summary::read(bytes).unwrap().unwrap();
    let mut v: Vec<(u64, u64, usize)> = s
        .chunk_indexes
        .iter()
        .map(|ci| {
            let n = s
                .read_message_indexes(bytes, ci)
                .unwrap()
                .values()
                .map(|e| e.len())
                .sum();
            (
                ci.chunk_start_offset,
                ci.chunk_start_offset + ci.chunk_length,
                n,
            )
        })
        .collect();
    v.sort();
    v
}

/// Opens `bytes[..cut]` and checks that it yields a prefix of the log's messages, at least all
/// those of chunks complete before the cut. Returns how many it recovered beyond those.
fn check_cut(bytes: &[u8], layout: &[(u64, u64, usize)], cut: usize) -> usize {
    let all = expected_messages();
    let p = tmp(&format!("cut_{}_{cut}.mcap", bytes.len()));
    std::fs::write(&p, &bytes[..cut]).unwrap();
    let mut r = LogReader::open(&p).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
    assert!(!r.is_indexed());
    assert!(
        r.issues().iter().any(|i| matches!(
            i.kind,
            LogIssueKind::Truncated | LogIssueKind::UnindexedFile
        )),
        "cut {cut}: {:?}",
        r.issues()
    );
    assert_eq!(r.cameras().len(), 2);
    let msgs: Vec<LogMessage> = r.messages(&[], 0, u64::MAX).collect();
    let got: Vec<(String, u64)> = msgs
        .iter()
        .map(|m| (m.topic.clone(), m.log_time_ns))
        .collect();
    assert_eq!(got[..], all[..got.len()], "cut {cut}: not a prefix");
    msgs.iter().for_each(check_payload);
    let whole: usize = layout
        .iter()
        .filter(|c| c.1 as usize <= cut)
        .map(|c| c.2)
        .sum();
    assert!(got.len() >= whole, "cut {cut}: {} < {whole}", got.len());
    // Frames from a damaged log: in order, nothing panics.
    let frames = read_frames(&mut r, Some(P)).unwrap();
    assert!(frames.windows(2).all(|w| w[1].index == w[0].index + 1));
    got.len() - whole
}

#[test]
fn truncated_copies_yield_every_message_before_the_cut() {
    // Many small chunks: cuts between and inside chunks.
    let path = tmp("full.mcap");
    write_log(&path);
    let bytes = std::fs::read(&path).unwrap();
    let layout = chunk_layout(&bytes);
    let first_chunk_end = layout[0].1 as usize;
    for cut in [
        first_chunk_end,
        first_chunk_end + 100,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() * 4 / 5,
        layout.last().unwrap().1 as usize + 10,
        bytes.len() - 1,
    ] {
        check_cut(&bytes, &layout, cut);
    }
    // Cut before any chunk is complete: nothing readable, a clear error.
    let p = tmp("cut_head.mcap");
    std::fs::write(&p, &bytes[..layout[0].0 as usize + 20]).unwrap();
    assert!(matches!(
        LogReader::open(&p),
        Err(LogError::NoCameras { .. })
    ));

    // One big (default 4 MiB) chunk: the messages at the start of a cut chunk are recovered.
    let path = tmp("one_chunk.mcap");
    write_log_with(&path, LogOptions::default());
    let bytes = std::fs::read(&path).unwrap();
    let layout = chunk_layout(&bytes);
    assert_eq!(layout.len(), 1);
    let (start, end, _) = layout[0];
    let mut recovered = Vec::new();
    for f in [0.3, 0.6, 0.9] {
        let cut = start as usize + ((end - start) as f64 * f) as usize;
        recovered.push(check_cut(&bytes, &layout, cut));
    }
    assert!(
        recovered.windows(2).all(|w| w[0] <= w[1]) && recovered[2] > 4,
        "{recovered:?}"
    );
}

#[test]
fn corrupt_chunk_is_skipped_and_reported() {
    let path = tmp("corrupt_src.mcap");
    write_log(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let layout = chunk_layout(&bytes);
    let victim = layout.len() / 2;
    let (start, end, lost) = layout[victim];
    let mid = ((start + end) / 2) as usize;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0x5a;
    }
    let p = tmp("corrupt.mcap");
    std::fs::write(&p, &bytes).unwrap();
    let mut r = LogReader::open(&p).unwrap();
    let msgs: Vec<LogMessage> = r.messages(&[], 0, u64::MAX).collect();
    assert_eq!(msgs.len(), expected_messages().len() - lost);
    msgs.iter().for_each(check_payload);
    let corrupt: Vec<_> = r
        .issues()
        .iter()
        .filter(|i| i.kind == LogIssueKind::CorruptChunk)
        .collect();
    assert_eq!(corrupt.len(), 1, "{:?}", r.issues());
    assert!(corrupt[0].detail.contains(&start.to_string()));
    // The frames it hit report missing data instead of failing.
    let frames = read_frames(&mut r, Some(P)).unwrap();
    assert_eq!(frames.len(), FRAMES as usize);
    assert!(frames.iter().any(|f| !f.issues.is_empty()));

    // Same damage without a summary: the linear scan skips the chunk too.
    let cut = tmp("corrupt_cut.mcap");
    std::fs::write(&cut, &bytes[..layout.last().unwrap().1 as usize]).unwrap();
    let mut r = LogReader::open(&cut).unwrap();
    let n = r.messages(&[], 0, u64::MAX).count();
    assert_eq!(n, expected_messages().len() - lost);
    assert!(r
        .issues()
        .iter()
        .any(|i| i.kind == LogIssueKind::CorruptChunk));
}

#[test]
fn not_an_mcap_file_is_a_clear_error() {
    let p = tmp("random.bin");
    let mut s = 12345u64;
    let junk: Vec<u8> = (0..5000)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    std::fs::write(&p, &junk).unwrap();
    let e = LogReader::open(&p).unwrap_err();
    assert!(matches!(e, LogError::NotMcap { .. }), "{e}");
    assert!(e
        .to_string()
        .contains("neither an MCAP file nor a SQLite (.db3)"));
    std::fs::write(&p, b"").unwrap();
    assert!(matches!(LogReader::open(&p), Err(LogError::NotMcap { .. })));
    // MCAP magic followed by garbage: opens nothing, errors, does not panic.
    let mut m = b"\x89MCAP0\r\n".to_vec();
    m.extend_from_slice(&junk);
    std::fs::write(&p, &m).unwrap();
    assert!(LogReader::open(&p).is_err());
    // SQLite's magic followed by garbage: a clear error naming the file, no panic.
    let mut m = b"SQLite format 3\0".to_vec();
    m.extend_from_slice(&junk);
    std::fs::write(&p, &m).unwrap();
    let e = LogReader::open(&p).unwrap_err();
    assert!(matches!(e, LogError::Db3 { .. }), "{e}");
    assert!(matches!(
        LogReader::open(&tmp("does-not-exist.mcap")),
        Err(LogError::Io { .. })
    ));
}

#[test]
fn bad_images_late_and_missing_cameras_become_issues() {
    let path = tmp("faults.mcap");
    let cams = rig();
    let mut w = LogWriter::create_with(&path, &cams, small_chunks()).unwrap();
    for k in 0..8u64 {
        let t = k * P;
        for c in 0..2 {
            match (k, c) {
                (2, 1) => w.write_image(c, t, &pattern(c, k, W / 2, H)).unwrap(),
                (3, 0) => {
                    let mut m = Image::from_rgb(&pattern(c, k, W, H), t, "cam_front");
                    m.encoding = "16UC1".into(); // a depth image: not a camera redline reads
                    w.write_raw_image(c, t, &m).unwrap();
                }
                (4, 1) => {}
                (5, 0) => {} // written late, below
                _ => w.write_image(c, t, &pattern(c, k, W, H)).unwrap(),
            }
        }
        w.write_odometry(&ego(k)).unwrap();
        w.write_ground_truth(&gt(k)).unwrap();
        if k == 5 {
            let m = Image::from_rgb(&pattern(0, 5, W, H), t, "cam_front");
            w.write_raw_image(0, t + P * 7 / 10, &m).unwrap();
        }
    }
    assert!(matches!(
        w.write_image(9, 0, &pattern(0, 0, W, H)),
        Err(LogError::NoSuchCamera { cam: 9, cameras: 2 })
    ));
    let mut broken = pattern(0, 0, W, H);
    broken.data.pop();
    assert!(matches!(
        w.write_image(0, 0, &broken),
        Err(LogError::BadImage { .. })
    ));
    w.finish().unwrap();

    let mut r = LogReader::open(&path).unwrap();
    let imgs: Vec<LogMessage> = r
        .messages(
            &["/cam/front/image_raw", "/cam/left/image_raw"],
            0,
            u64::MAX,
        )
        .collect();
    let wrong_size = imgs
        .iter()
        .find(|m| m.stamp_ns == 2 * P && m.topic.contains("left"));
    assert!(matches!(
        wrong_size.map(|m| &m.payload),
        Some(Payload::Image {
            cam: 1,
            image: Err(ImageIssue::WrongSize {
                got: (80, 96),
                want: (160, 96)
            })
        })
    ));
    let wrong_enc = imgs
        .iter()
        .find(|m| m.stamp_ns == 3 * P && m.topic.contains("front"));
    assert!(matches!(
        wrong_enc.map(|m| &m.payload),
        Some(Payload::Image { cam: 0, image: Err(ImageIssue::WrongEncoding { got }) }) if got == "16UC1"
    ));

    let frames = read_frames(&mut r, None).unwrap();
    assert_eq!(frames.len(), 8);
    let only = |k: usize| &frames[k].issues;
    assert!(only(0).is_empty() && only(1).is_empty() && only(6).is_empty() && only(7).is_empty());
    assert!(
        matches!(&only(2)[..], [FrameIssue::BadImage { cam, why }] if cam == "left" && why.contains("80x96"))
    );
    assert!(frames[2].images[0].is_some() && frames[2].images[1].is_none());
    assert!(frames[2].ego.is_some() && frames[2].gt.is_some());
    assert!(
        matches!(&only(3)[..], [FrameIssue::BadImage { cam, why }] if cam == "front" && why.contains("16UC1"))
    );
    assert!(frames[3].images[1].is_some());
    assert_eq!(
        only(4),
        &vec![FrameIssue::MissingCamera { cam: "left".into() }]
    );
    assert_eq!(
        only(5),
        &vec![FrameIssue::LateCamera {
            cam: "front".into(),
            late_by_ns: P * 7 / 10
        }]
    );
    assert!(frames[5].images[0].is_none() && frames[5].images[1].is_some());
}
