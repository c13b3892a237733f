//! Grouping log messages into sensor frames for replay.
//!
//! Contract:
//! - With frame period `P`, a message with header stamp `t` belongs to frame
//!   `k = round(t / P)`, whose tick is `k * P`. Images, odometry and ground truth take part;
//!   map, camera_info and tf messages only advance time.
//! - An image whose log time (arrival) is more than `P / 2` after its frame's tick is *late*:
//!   it is recorded as [`FrameIssue::LateCamera`] and not used. An image that cannot be used
//!   (wrong size or encoding) is a [`FrameIssue::BadImage`]; the rest of the frame is intact.
//!   A camera with nothing at all is [`FrameIssue::MissingCamera`]; a frame without odometry
//!   has [`FrameIssue::MissingOdometry`].
//! - Frame `k` is emitted once a message arrives with log time beyond `k * P + P` (so a late
//!   image, up to one period after its tick, is still seen and recorded in its own frame), or
//!   at [`FrameGrouper::finish`]. Frames come out strictly in index order, one per index
//!   between the first and the last (an index with no message is emitted with everything
//!   missing), except that a jump of more than [`MAX_GAP_FRAMES`] is skipped and recorded as
//!   [`FrameIssue::Gap`]. A message for a frame already emitted is recorded as
//!   [`FrameIssue::Stale`] in the next emitted frame.
//! - Deterministic: output depends only on the message sequence.
//!
//! Cost: this runs on the I/O side of replay (it moves decoded images, allocates per frame);
//! it is not a real-time stage. It never panics on bad input and spawns no threads.

use std::collections::VecDeque;

use crate::log::{LogError, LogMessage, LogReader, Payload};
use crate::types::{EgoState, GroundTruth, RgbImage};

/// Jumps in frame index larger than this are skipped instead of emitting empty frames.
pub const MAX_GAP_FRAMES: u64 = 300;

/// Something wrong with one frame's sensor data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameIssue {
    /// No image from this camera.
    MissingCamera {
        /// Camera name.
        cam: String,
    },
    /// The camera's image arrived more than half a period after the frame's tick; not used.
    LateCamera {
        /// Camera name.
        cam: String,
        /// Arrival minus tick, ns.
        late_by_ns: u64,
    },
    /// The camera's image is unusable (size, encoding, duplicate); not used.
    BadImage {
        /// Camera name.
        cam: String,
        /// Why.
        why: String,
    },
    /// No odometry for this frame.
    MissingOdometry,
    /// A message arrived for a frame that had already been emitted; dropped.
    Stale {
        /// Its topic.
        topic: String,
        /// The frame it belonged to.
        frame: u64,
        /// Arrival minus that frame's tick, ns.
        late_by_ns: u64,
    },
    /// The log jumps over this many frame periods before this frame; they are not emitted.
    Gap {
        /// Frames skipped.
        frames_skipped: u64,
    },
}

/// All sensor data of one frame.
#[derive(Clone, Debug, PartialEq)]
pub struct SensorFrame {
    /// Frame index `k` (tick `k * period`).
    pub index: u64,
    /// The tick, ns.
    pub stamp_ns: u64,
    /// One slot per camera, rig order.
    pub images: Vec<Option<RgbImage>>,
    /// Per camera, a JPEG stream kept compressed (a reader set to keep JPEG); a camera has
    /// an image or a stream, not both.
    pub jpegs: Vec<Option<Vec<u8>>>,
    /// Ego odometry.
    pub ego: Option<EgoState>,
    /// Ground truth.
    pub gt: Option<GroundTruth>,
    /// What was wrong, in the order found (missing items last, in camera order).
    pub issues: Vec<FrameIssue>,
}

#[derive(Debug)]
struct Pending {
    frame: SensorFrame,
    /// Something (image, late image or bad image) came from each camera.
    seen: Vec<bool>,
}

/// Groups a log-time-ordered message stream into frames.
#[derive(Debug)]
pub struct FrameGrouper {
    names: Vec<String>,
    period: u64,
    /// Open frames, consecutive indices starting at `first_open`.
    open: VecDeque<Pending>,
    first_open: Option<u64>,
    ready: VecDeque<SensorFrame>,
    carry: Vec<FrameIssue>,
}

impl FrameGrouper {
    /// A grouper for `cameras` cameras named `cam0`, `cam1`, …; a period of 0 is taken as 1 ns.
    pub fn new(cameras: usize, period_ns: u64) -> Self {
        Self::with_names((0..cameras).map(|i| format!("cam{i}")).collect(), period_ns)
    }

    /// A grouper for cameras with these names (rig order), e.g. from [`LogReader::cameras`].
    pub fn with_names(names: Vec<String>, period_ns: u64) -> Self {
        FrameGrouper {
            names,
            period: period_ns.max(1),
            open: VecDeque::new(),
            first_open: None,
            ready: VecDeque::new(),
            carry: Vec::new(),
        }
    }

    /// The frame period, ns.
    pub fn period_ns(&self) -> u64 {
        self.period
    }

    fn frame_of(&self, stamp: u64) -> u64 {
        stamp / self.period + u64::from(stamp % self.period >= self.period.div_ceil(2))
    }

    fn tick(&self, k: u64) -> u64 {
        k.saturating_mul(self.period)
    }

    fn new_pending(&self, index: u64) -> Pending {
        Pending {
            frame: SensorFrame {
                index,
                stamp_ns: self.tick(index),
                images: vec![None; self.names.len()],
                jpegs: vec![None; self.names.len()],
                ego: None,
                gt: None,
                issues: Vec::new(),
            },
            seen: vec![false; self.names.len()],
        }
    }

    fn close_front(&mut self) {
        if let Some(mut p) = self.open.pop_front() {
            self.first_open = Some(p.frame.index + 1);
            let mut issues = std::mem::take(&mut self.carry);
            issues.append(&mut p.frame.issues);
            for (i, seen) in p.seen.iter().enumerate() {
                if !seen {
                    issues.push(FrameIssue::MissingCamera {
                        cam: self.names[i].clone(),
                    });
                }
            }
            if p.frame.ego.is_none() {
                issues.push(FrameIssue::MissingOdometry);
            }
            p.frame.issues = issues;
            self.ready.push_back(p.frame);
        }
    }

    /// Adds one message (in log-time order) and returns the oldest completed frame, if any.
    /// When one message completes several frames, the others come from
    /// [`FrameGrouper::next_ready`], later pushes, or [`FrameGrouper::finish`].
    pub fn push(&mut self, msg: LogMessage) -> Option<SensorFrame> {
        let participates = matches!(
            msg.payload,
            Payload::Image { .. }
                | Payload::Jpeg { .. }
                | Payload::Odometry(_)
                | Payload::GroundTruth(_)
        );
        if participates {
            self.place(
                msg.topic.clone(),
                msg.log_time_ns,
                msg.stamp_ns,
                msg.payload,
            );
        }
        // Close every frame whose horizon (tick + period) the log has passed.
        while let Some(front) = self.open.front() {
            let horizon = self.tick(front.frame.index).saturating_add(self.period);
            if msg.log_time_ns > horizon {
                self.close_front();
            } else {
                break;
            }
        }
        self.ready.pop_front()
    }

    fn place(&mut self, topic: String, log_time: u64, stamp: u64, payload: Payload) {
        let k = self.frame_of(stamp);
        let tick = self.tick(k);
        let late_by = log_time.saturating_sub(tick);
        let first = *self.first_open.get_or_insert(k);
        if k < first {
            self.carry.push(FrameIssue::Stale {
                topic,
                frame: k,
                late_by_ns: late_by,
            });
            return;
        }
        let newest = first + self.open.len() as u64; // first index not open yet
        if k >= newest && k - newest > MAX_GAP_FRAMES {
            while !self.open.is_empty() {
                self.close_front();
            }
            self.carry.push(FrameIssue::Gap {
                frames_skipped: k - newest,
            });
            self.first_open = Some(k);
        }
        let first = self.first_open.unwrap_or(k);
        while first + (self.open.len() as u64) <= k {
            let idx = first + self.open.len() as u64;
            let p = self.new_pending(idx);
            self.open.push_back(p);
        }
        let half = self.period / 2;
        let names = &self.names;
        let Some(p) = self.open.get_mut((k - first) as usize) else {
            return;
        };
        match payload {
            Payload::Image { cam, image } => {
                let Some(name) = names.get(cam) else {
                    return;
                };
                if late_by > half {
                    p.seen[cam] = true;
                    p.frame.issues.push(FrameIssue::LateCamera {
                        cam: name.clone(),
                        late_by_ns: late_by,
                    });
                    return;
                }
                match image {
                    Ok(img) if p.frame.images[cam].is_none() => {
                        p.seen[cam] = true;
                        p.frame.images[cam] = Some(img);
                    }
                    Ok(_) => p.frame.issues.push(FrameIssue::BadImage {
                        cam: name.clone(),
                        why: "a second image for this frame; the first is kept".to_string(),
                    }),
                    Err(e) => {
                        p.seen[cam] = true;
                        p.frame.issues.push(FrameIssue::BadImage {
                            cam: name.clone(),
                            why: e.to_string(),
                        });
                    }
                }
            }
            Payload::Jpeg { cam, data } => {
                let Some(name) = names.get(cam) else {
                    return;
                };
                if late_by > half {
                    p.seen[cam] = true;
                    p.frame.issues.push(FrameIssue::LateCamera {
                        cam: name.clone(),
                        late_by_ns: late_by,
                    });
                } else if p.frame.images[cam].is_none() && p.frame.jpegs[cam].is_none() {
                    p.seen[cam] = true;
                    p.frame.jpegs[cam] = Some(data);
                } else {
                    p.frame.issues.push(FrameIssue::BadImage {
                        cam: name.clone(),
                        why: "a second image for this frame; the first is kept".to_string(),
                    });
                }
            }
            // A second odometry or ground truth for one frame: the first is kept.
            Payload::Odometry(ego) if p.frame.ego.is_none() => p.frame.ego = Some(ego),
            Payload::GroundTruth(gt) if p.frame.gt.is_none() => p.frame.gt = Some(gt),
            _ => {}
        }
    }

    /// The next completed frame not yet returned, if any.
    pub fn next_ready(&mut self) -> Option<SensorFrame> {
        self.ready.pop_front()
    }

    /// End of the stream: closes all open frames. Returns them one per call, oldest first;
    /// call until it returns `None`.
    pub fn finish(&mut self) -> Option<SensorFrame> {
        while !self.open.is_empty() {
            self.close_front();
        }
        self.ready.pop_front()
    }
}

/// Median spacing of up to 64 stamps; `None` with fewer than two distinct stamps.
fn infer_period(stamps: &mut [u64]) -> Option<u64> {
    stamps.sort_unstable();
    let mut d: Vec<u64> = stamps
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d > 0)
        .collect();
    if d.is_empty() {
        return None;
    }
    d.sort_unstable();
    Some(d[d.len() / 2])
}

/// The frame period of a log: the median spacing of its first odometry stamps, or of the
/// first camera's image stamps when it has no odometry.
pub fn log_period(reader: &mut LogReader) -> Result<u64, LogError> {
    let odom = reader.odometry_topic().to_string();
    let mut s: Vec<u64> = reader
        .messages(&[odom.as_str()], 0, u64::MAX)
        // A `/tf` odometry topic also carries transforms that do not move the ego.
        .filter(|m| matches!(m.payload, crate::log::Payload::Odometry(_)))
        .take(64)
        .map(|m| m.stamp_ns)
        .collect();
    match infer_period(&mut s) {
        Some(p) => Ok(p),
        None => {
            let topic = reader.image_topic_of(0).unwrap_or_default().to_string();
            let mut s: Vec<u64> = reader
                .messages(&[topic.as_str()], 0, u64::MAX)
                .take(64)
                .map(|m| m.stamp_ns)
                .collect();
            infer_period(&mut s).ok_or_else(|| LogError::UnknownPeriod {
                path: reader.path().to_path_buf(),
            })
        }
    }
}

/// Reads a whole log into frames. The frame period is `period_ns`, or else inferred as the
/// median spacing of the first odometry stamps (or of the first camera's image stamps when
/// the log has no odometry). Damage becomes frame issues and [`LogReader::issues`].
pub fn read_frames(
    reader: &mut LogReader,
    period_ns: Option<u64>,
) -> Result<Vec<SensorFrame>, LogError> {
    let period = match period_ns {
        Some(p) => p,
        None => log_period(reader)?,
    };
    let names = reader.cameras().iter().map(|c| c.name.clone()).collect();
    let mut g = FrameGrouper::with_names(names, period);
    let mut frames = Vec::new();
    for m in reader.messages(&[], 0, u64::MAX) {
        if let Some(f) = g.push(m) {
            frames.push(f);
        }
        while let Some(f) = g.next_ready() {
            frames.push(f);
        }
    }
    while let Some(f) = g.finish() {
        frames.push(f);
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{ImageIssue, TOPIC_ODOM};

    const P: u64 = 100;

    fn img(v: u8) -> RgbImage {
        RgbImage {
            width: 1,
            height: 1,
            data: vec![v; 3],
        }
    }

    fn image(cam: usize, stamp: u64, log: u64, v: u8) -> LogMessage {
        LogMessage {
            topic: format!("/cam/cam{cam}/image_raw"),
            log_time_ns: log,
            stamp_ns: stamp,
            payload: Payload::Image {
                cam,
                image: Ok(img(v)),
            },
        }
    }

    fn odom(stamp: u64) -> LogMessage {
        LogMessage {
            topic: TOPIC_ODOM.into(),
            log_time_ns: stamp,
            stamp_ns: stamp,
            payload: Payload::Odometry(EgoState {
                stamp_ns: stamp,
                ..EgoState::default()
            }),
        }
    }

    fn run(g: &mut FrameGrouper, msgs: Vec<LogMessage>) -> Vec<SensorFrame> {
        let mut out = Vec::new();
        for m in msgs {
            out.extend(g.push(m));
            while let Some(f) = g.next_ready() {
                out.push(f);
            }
        }
        while let Some(f) = g.finish() {
            out.push(f);
        }
        out
    }

    #[test]
    fn frames_in_order_with_late_missing_and_bad() {
        let mut g = FrameGrouper::new(2, P);
        let bad = LogMessage {
            topic: "/cam/cam1/image_raw".into(),
            log_time_ns: 200,
            stamp_ns: 200,
            payload: Payload::Image {
                cam: 1,
                image: Err(ImageIssue::WrongEncoding {
                    got: "mono8".into(),
                }),
            },
        };
        let frames = run(
            &mut g,
            vec![
                image(0, 0, 0, 1),
                image(1, 2, 2, 2),
                odom(0),
                image(0, 100, 100, 3),
                odom(100),
                // camera 1 of frame 1 arrives 70 ns after its tick: late
                image(1, 100, 170, 4),
                image(0, 200, 200, 5),
                odom(200),
                bad,
                // frame 3: camera 1 missing, no odometry
                image(0, 301, 301, 6),
            ],
        );
        let idx: Vec<u64> = frames.iter().map(|f| f.index).collect();
        assert_eq!(idx, vec![0, 1, 2, 3]);
        assert!(frames[0].issues.is_empty());
        assert_eq!(frames[0].images, vec![Some(img(1)), Some(img(2))]);
        assert_eq!(
            frames[1].issues,
            vec![FrameIssue::LateCamera {
                cam: "cam1".into(),
                late_by_ns: 70
            }]
        );
        assert_eq!(frames[1].images, vec![Some(img(3)), None]);
        assert!(
            matches!(&frames[2].issues[..], [FrameIssue::BadImage { cam, why }] if cam == "cam1" && why.contains("mono8"))
        );
        assert_eq!(frames[2].images[0], Some(img(5)));
        assert!(frames[2].ego.is_some());
        assert_eq!(
            frames[3].issues,
            vec![
                FrameIssue::MissingCamera { cam: "cam1".into() },
                FrameIssue::MissingOdometry
            ]
        );
        assert_eq!(frames[3].stamp_ns, 300);
    }

    #[test]
    fn frames_are_emitted_as_time_passes() {
        let mut g = FrameGrouper::new(1, P);
        assert!(g.push(image(0, 0, 0, 1)).is_none());
        assert!(g.push(odom(0)).is_none());
        assert!(g.push(image(0, 100, 100, 1)).is_none());
        // log time 201 > tick 0 + period: frame 0 is done
        let f = g.push(image(0, 200, 201, 1)).unwrap();
        assert_eq!(f.index, 0);
        assert!(f.issues.is_empty());
    }

    #[test]
    fn stale_gap_and_bad_period_do_not_panic() {
        let g = FrameGrouper::new(1, 0);
        assert_eq!(g.period_ns(), 1);
        let mut g = FrameGrouper::new(1, P);
        let frames = run(
            &mut g,
            vec![
                image(0, 0, 0, 1),
                odom(0),
                image(0, 500, 500, 1),
                odom(500),
                // for frame 0, long gone
                image(0, 0, 520, 1),
                // jump of 10^6 frames
                odom(P * 1_000_000),
                image(7, 0, P * 1_000_000, 1), // camera index out of range: ignored
            ],
        );
        assert_eq!(frames.len(), 6 + 1);
        assert!(frames[5].issues.is_empty(), "{:?}", frames[5].issues);
        let last = frames.last().unwrap();
        assert_eq!(last.index, 1_000_000);
        assert!(last
            .issues
            .iter()
            .any(|i| matches!(i, FrameIssue::Gap { .. })));
        assert!(frames
            .iter()
            .flat_map(|f| &f.issues)
            .any(|i| matches!(i, FrameIssue::Stale { frame: 0, .. })));
    }

    #[test]
    fn period_inference() {
        assert_eq!(infer_period(&mut [0, 33, 67, 100, 133]), Some(33));
        assert_eq!(infer_period(&mut [5, 5]), None);
        assert_eq!(infer_period(&mut []), None);
    }
}
