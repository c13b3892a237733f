//! [`FaultyFeed`]: any frame source with the `[[faults.sensor]]` rules applied.
//!
//! All faults are resolved when the feed is built (start-up: allocates, copies every frame a
//! fault changes); during the run [`FrameSource::frame`] returns either the inner source's
//! frame or the changed copy, found by binary search: no allocation, no I/O.

use redline_pipeline::camera::CameraSpec;
use redline_pipeline::sensors::{FrameSource, FrameTruth, SensorFrame};
use redline_pipeline::types::{EgoPose, RoadMap};
use redline_runtime::rng::SplitMix64;

use super::{
    Corruption, FaultConfig, FaultError, FrameSet, SensorFault, SensorFaultKind, SensorFaultRecord,
    ODOMETRY,
};

/// How far back a delayed sensor is searched for data that had arrived, frames.
const DELAY_LOOKBACK: usize = 256;

/// A sensor of the rig, as a fault target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Camera(usize),
    Odometry,
}

/// What one sensor delivers in one frame, once faults are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivered {
    /// The data of this frame of the inner source (its own, or an older one).
    From(usize),
    /// Nothing.
    Nothing,
}

/// A frame source with sensor faults injected (see the [module docs](super)).
#[derive(Debug)]
pub struct FaultyFeed<F: FrameSource> {
    inner: F,
    /// Frames a fault changed, by frame number, sorted.
    changed: Vec<(usize, SensorFrame)>,
    /// The inner source's issues and one per injected fault, by frame.
    issues: Vec<(u64, String)>,
    records: Vec<SensorFaultRecord>,
    source: String,
}

/// One rule, resolved.
struct Rule<'a> {
    index: usize,
    spec: &'a SensorFault,
    target: Target,
    hits: Vec<bool>,
}

impl<F: FrameSource> FaultyFeed<F> {
    /// Applies `cfg`'s sensor rules to `inner` (its stage rules are ignored here). Fails when
    /// the table is invalid or a rule names no camera of `inner`'s rig.
    pub fn new(inner: F, cfg: &FaultConfig) -> Result<Self, FaultError> {
        cfg.validate()?;
        let names: Vec<&str> = inner.cameras().iter().map(|c| c.name.as_str()).collect();
        let n = inner.frame_count();
        let mut rules = Vec::with_capacity(cfg.sensor.len());
        for (i, spec) in cfg.sensor.iter().enumerate() {
            let target = if spec.target == ODOMETRY {
                Target::Odometry
            } else if let Some(c) = names.iter().position(|&c| c == spec.target) {
                Target::Camera(c)
            } else {
                let mut valid: Vec<String> = names.iter().map(|c| format!("\"{c}\"")).collect();
                valid.push(format!("\"{ODOMETRY}\""));
                return Err(FaultError::UnknownTarget {
                    rule: i + 1,
                    name: spec.target.clone(),
                    valid: valid.join(", "),
                });
            };
            let set: FrameSet =
                spec.frame_set(cfg.seed, i)
                    .map_err(|what| FaultError::Invalid {
                        table: "sensor",
                        rule: i + 1,
                        what,
                    })?;
            rules.push(Rule {
                index: i,
                spec,
                target,
                hits: (0..n).map(|k| set.contains(k as u64)).collect(),
            });
        }

        let mut targets: Vec<Target> = (0..names.len()).map(Target::Camera).collect();
        targets.push(Target::Odometry);
        // Per target, what each frame delivers.
        let delivered: Vec<Vec<Delivered>> = targets
            .iter()
            .map(|&t| resolve(&inner, &rules, t, n))
            .collect();

        let mut issues: Vec<(u64, String)> = Vec::new();
        let mut changed = Vec::new();
        for k in 0..n {
            let corrupting: Vec<&Rule> = rules
                .iter()
                .filter(|r| r.hits[k] && r.spec.fault == SensorFaultKind::Corrupt)
                .collect();
            let moved = delivered.iter().any(|d| d[k] != Delivered::From(k));
            if !moved && corrupting.is_empty() {
                continue;
            }
            let Some(own) = inner.frame(k) else { continue };
            let mut frame = own.clone();
            for (t, d) in targets.iter().zip(&delivered) {
                apply_delivery(&inner, &mut frame, *t, d[k]);
            }
            for r in corrupting {
                corrupt(&mut frame, r, cfg.seed, k, inner.image_len());
            }
            changed.push((k, frame));
        }
        for r in &rules {
            let t = targets
                .iter()
                .position(|&t| t == r.target)
                .unwrap_or_default();
            for k in (0..n).filter(|&k| r.hits[k]) {
                issues.push((k as u64, describe(&inner, r, &names, k, delivered[t][k])));
            }
        }
        // Stable: the inner source's issues of a frame stay first, in their order.
        let mut all: Vec<(u64, String)> = inner.issues().to_vec();
        all.extend(issues);
        all.sort_by_key(|(k, _)| *k);
        let records = rules
            .iter()
            .map(|r| {
                let frames: Vec<u64> = (0..n).filter(|&k| r.hits[k]).map(|k| k as u64).collect();
                SensorFaultRecord {
                    rule: r.index + 1,
                    target: r.spec.target.clone(),
                    fault: r.spec.fault,
                    injected: frames.len() as u64,
                    frames: frames
                        .into_iter()
                        .take(SensorFaultRecord::MAX_FRAMES)
                        .collect(),
                }
            })
            .collect();
        let source = if rules.is_empty() {
            inner.describe().to_string()
        } else {
            format!(
                "{} with {} sensor fault rules (seed {})",
                inner.describe(),
                rules.len(),
                cfg.seed
            )
        };
        Ok(FaultyFeed {
            inner,
            changed,
            issues: all,
            records,
            source,
        })
    }

    /// The source without faults.
    pub fn inner(&self) -> &F {
        &self.inner
    }

    /// What each `[[faults.sensor]]` rule injected.
    pub fn records(&self) -> &[SensorFaultRecord] {
        &self.records
    }

    /// Frames a fault changed.
    pub fn changed_frames(&self) -> usize {
        self.changed.len()
    }
}

/// What `target` delivers in each of the `n` frames under `rules`: drop decides first, then
/// freeze (what it delivered in the previous frame), then delay (the newest own data of an
/// earlier frame that had arrived by this frame's release).
fn resolve<F: FrameSource>(inner: &F, rules: &[Rule], target: Target, n: usize) -> Vec<Delivered> {
    let hit = |kind: SensorFaultKind, k: usize| {
        rules
            .iter()
            .any(|r| r.target == target && r.spec.fault == kind && r.hits[k])
    };
    let delay_ns = |k: usize| -> u64 {
        rules
            .iter()
            .filter(|r| r.target == target && r.spec.fault == SensorFaultKind::Delay && r.hits[k])
            .map(|r| (r.spec.delay_ms.unwrap_or(0.0) * 1e6).round() as u64)
            .max()
            .unwrap_or(0)
    };
    let stamp = |k: usize| inner.frame(k).map_or(0, |f| f.stamp_ns);
    // Whether frame j's own data exists at all (neither dropped nor replaced by a freeze).
    let produced = |j: usize| !hit(SensorFaultKind::Drop, j) && !hit(SensorFaultKind::Freeze, j);
    let mut out: Vec<Delivered> = Vec::with_capacity(n);
    for k in 0..n {
        let d = if hit(SensorFaultKind::Drop, k) {
            Delivered::Nothing
        } else if hit(SensorFaultKind::Freeze, k) {
            match k {
                0 => Delivered::From(0),
                _ => out[k - 1],
            }
        } else if delay_ns(k) > 0 {
            let release = stamp(k);
            (k.saturating_sub(DELAY_LOOKBACK)..k)
                .rev()
                .find(|&j| produced(j) && stamp(j).saturating_add(delay_ns(j)) <= release)
                .map_or(Delivered::Nothing, Delivered::From)
        } else {
            Delivered::From(k)
        };
        out.push(d);
    }
    out
}

/// Puts what `target` delivers into `frame` (a copy of its own frame).
fn apply_delivery<F: FrameSource>(
    inner: &F,
    frame: &mut SensorFrame,
    target: Target,
    d: Delivered,
) {
    let source = match d {
        Delivered::From(j) => inner.frame(j),
        Delivered::Nothing => None,
    };
    match target {
        Target::Camera(c) => {
            let len = inner.image_len();
            let Some(dst) = frame.images.get_mut(c * len..(c + 1) * len) else {
                return;
            };
            match source {
                Some(src) if (src.present >> c) & 1 == 1 => {
                    if let Some(bytes) = src.images.get(c * len..(c + 1) * len) {
                        dst.copy_from_slice(bytes);
                    }
                    frame.present |= 1 << c;
                    if let (Some(s), Some(d)) = (
                        src.camera_stamps_ns.get(c),
                        frame.camera_stamps_ns.get_mut(c),
                    ) {
                        *d = *s;
                    }
                }
                _ => {
                    dst.fill(0);
                    frame.present &= !(1 << c);
                }
            }
        }
        Target::Odometry => match source {
            Some(src) => {
                frame.ego = src.ego;
                frame.ego_present = src.ego_present;
            }
            None => {
                frame.ego = EgoPose::default();
                frame.ego_present = false;
            }
        },
    }
}

/// Damages what rule `r` targets in `frame` (frame number `k`), deterministically.
fn corrupt(frame: &mut SensorFrame, r: &Rule, seed: u64, k: usize, image_len: usize) {
    let mut rng = SplitMix64::stream(
        seed ^ (r.index as u64).wrapping_mul(0xA24B_AED4_963E_E407),
        k as u64,
    );
    match r.target {
        Target::Camera(c) => {
            if (frame.present >> c) & 1 == 0 {
                return; // nothing delivered, nothing to damage
            }
            let Some(img) = frame.images.get_mut(c * image_len..(c + 1) * image_len) else {
                return;
            };
            let fraction = r.spec.corrupt_fraction();
            match r.spec.corrupt.unwrap_or_default() {
                Corruption::Noise => {
                    for b in img.iter_mut() {
                        if rng.chance(fraction) {
                            *b = rng.next_u64() as u8;
                        }
                    }
                }
                Corruption::Truncate => {
                    let lost = ((img.len() as f64) * fraction).round() as usize;
                    let keep = img.len() - lost.min(img.len());
                    img[keep..].fill(0);
                }
            }
        }
        Target::Odometry => {
            if !frame.ego_present {
                return;
            }
            let e = &mut frame.ego;
            for v in [&mut e.x, &mut e.y, &mut e.yaw, &mut e.v, &mut e.yaw_rate] {
                *v = f64::from_bits(rng.next_u64());
            }
        }
    }
}

/// The input-issue line for rule `r` in frame `k`.
fn describe<F: FrameSource>(
    inner: &F,
    r: &Rule,
    names: &[&str],
    k: usize,
    delivered: Delivered,
) -> String {
    let what = match r.target {
        Target::Camera(c) => format!("camera {}", names[c]),
        Target::Odometry => ODOMETRY.to_string(),
    };
    let data = match r.target {
        Target::Camera(_) => "image",
        Target::Odometry => "pose",
    };
    let stamp = |j: usize| inner.frame(j).map_or(0, |f| f.stamp_ns);
    let got = match delivered {
        Delivered::Nothing => format!("no {data}"),
        Delivered::From(j) if j == k => format!("its own {data}"),
        Delivered::From(j) => format!(
            "the {data} of frame {j} ({:.1} ms old)",
            stamp(k).saturating_sub(stamp(j)) as f64 / 1e6
        ),
    };
    let fault = match r.spec.fault {
        SensorFaultKind::Drop => "dropped".to_string(),
        SensorFaultKind::Freeze => "frozen".to_string(),
        SensorFaultKind::Delay => format!("delayed {:.1} ms", r.spec.delay_ms.unwrap_or(0.0)),
        SensorFaultKind::Corrupt => match (r.target, r.spec.corrupt.unwrap_or_default()) {
            (Target::Odometry, _) => "corrupted (random bits in every field)".to_string(),
            (_, Corruption::Noise) => format!(
                "corrupted (noise in {:.0}% of the bytes)",
                r.spec.corrupt_fraction() * 100.0
            ),
            (_, Corruption::Truncate) => format!(
                "corrupted (truncated: the last {:.0}% of the bytes lost)",
                r.spec.corrupt_fraction() * 100.0
            ),
        },
    };
    let damaged = match (r.spec.fault, delivered) {
        (SensorFaultKind::Corrupt, Delivered::From(_)) => ", damaged",
        (SensorFaultKind::Corrupt, Delivered::Nothing) => " (nothing to damage)",
        _ => "",
    };
    format!(
        "injected fault (sensor rule #{}): {what} {fault}: the frame got {got}{damaged}",
        r.index + 1
    )
}

impl<F: FrameSource> FrameSource for FaultyFeed<F> {
    fn cameras(&self) -> &[CameraSpec] {
        self.inner.cameras()
    }
    fn image_size(&self) -> (usize, usize) {
        self.inner.image_size()
    }
    fn period_ns(&self) -> u64 {
        self.inner.period_ns()
    }
    fn map(&self) -> &RoadMap {
        self.inner.map()
    }
    fn frame_count(&self) -> usize {
        self.inner.frame_count()
    }
    fn frame(&self, k: usize) -> Option<&SensorFrame> {
        match self.changed.binary_search_by_key(&k, |(j, _)| *j) {
            Ok(i) => Some(&self.changed[i].1),
            Err(_) => self.inner.frame(k),
        }
    }
    fn issues(&self) -> &[(u64, String)] {
        &self.issues
    }
    fn describe(&self) -> &str {
        &self.source
    }
    fn streaming(&self) -> bool {
        self.inner.streaming()
    }
    fn advance(&self) -> Option<std::ops::Range<usize>> {
        self.inner.advance()
    }
    fn forget_truth_before(&self, frame: usize) {
        self.inner.forget_truth_before(frame)
    }
    fn truth(&self, k: usize) -> Option<FrameTruth> {
        match self.changed.binary_search_by_key(&k, |(j, _)| *j) {
            Ok(i) => {
                let f = &self.changed[i].1;
                Some(FrameTruth {
                    ego: f.ego,
                    gt: f.gt.clone(),
                })
            }
            Err(_) => self.inner.truth(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::Feed;
    use std::sync::Arc;

    const P: u64 = 100_000_000;
    const LEN: usize = 2 * 3; // one 2x1 image

    fn camera(name: &str) -> CameraSpec {
        CameraSpec {
            name: name.into(),
            width: 2,
            height: 1,
            fx: 1.0,
            fy: 1.0,
            cx: 1.0,
            cy: 0.5,
            x: 0.0,
            y: 0.0,
            z: 1.0,
            yaw: 0.0,
            pitch: 0.0,
            distortion: Default::default(),
        }
    }

    /// Ten frames of cameras `a` (bytes k + 1) and `b` (bytes 100 + k), odometry x = k.
    fn feed() -> Arc<Feed> {
        let frames = (0..10u64)
            .map(|k| {
                let mut images = vec![k as u8 + 1; LEN];
                images.extend(vec![100 + k as u8; LEN]);
                SensorFrame {
                    stamp_ns: k * P,
                    images,
                    present: 0b11,
                    camera_stamps_ns: vec![k * P; 2],
                    ego: EgoPose {
                        stamp_ns: k * P,
                        x: k as f64,
                        ..EgoPose::default()
                    },
                    ego_present: true,
                    gt: vec![],
                    jpeg: Vec::new(),
                    jpeg_len: Vec::new(),
                }
            })
            .collect();
        Arc::new(Feed {
            cameras: vec![camera("a"), camera("b")],
            width: 2,
            height: 1,
            period_ns: P,
            map: Box::default(),
            frames,
            issues: vec![(0, "from the log".into())],
            source: "ten frames".into(),
        })
    }

    fn faulty(toml_text: &str) -> Result<FaultyFeed<Arc<Feed>>, FaultError> {
        FaultyFeed::new(feed(), &toml::from_str(toml_text).unwrap())
    }

    fn cam(f: &FaultyFeed<Arc<Feed>>, k: usize, c: usize) -> (&[u8], bool, u64) {
        let fr = f.frame(k).unwrap();
        (
            &fr.images[c * LEN..(c + 1) * LEN],
            (fr.present >> c) & 1 == 1,
            fr.camera_stamps_ns[c],
        )
    }

    const RULES: &str = r#"
[[sensor]]
target = "a"
fault = "drop"
frames = "3"
[[sensor]]
target = "b"
fault = "freeze"
frames = "4..7"
[[sensor]]
target = "a"
fault = "delay"
delay_ms = 150.0
frames = "5..=6"
[[sensor]]
target = "odometry"
fault = "drop"
frames = "2"
[[sensor]]
target = "odometry"
fault = "freeze"
frames = "8.."
"#;

    #[test]
    fn drop_freeze_and_delay_deliver_what_the_docs_say() {
        let f = faulty(RULES).unwrap();
        let inner = f.inner();
        // Untouched frames are the inner source's own, not copies.
        assert!(std::ptr::eq(f.frame(0).unwrap(), inner.frame(0).unwrap()));
        assert!(std::ptr::eq(f.frame(1).unwrap(), inner.frame(1).unwrap()));
        // Drop: nothing, black.
        assert_eq!(cam(&f, 3, 0), (&[0u8; LEN][..], false, 3 * P));
        assert_eq!(cam(&f, 3, 1), (&[103u8; LEN][..], true, 3 * P));
        // Freeze: frame 3's image and stamp, until the fault ends.
        for k in 4..7 {
            assert_eq!(cam(&f, k, 1), (&[103u8; LEN][..], true, 3 * P), "frame {k}");
        }
        assert_eq!(cam(&f, 7, 1), (&[107u8; LEN][..], true, 7 * P));
        // Delay 150 ms: frame 5 gets frame 4's image (arrived at 400 ms); frame 6 too (frame
        // 5's arrives at 650 ms, after frame 6's release at 600 ms); frame 7 its own.
        assert_eq!(cam(&f, 5, 0), (&[5u8; LEN][..], true, 4 * P));
        assert_eq!(cam(&f, 6, 0), (&[5u8; LEN][..], true, 4 * P));
        assert_eq!(cam(&f, 7, 0), (&[8u8; LEN][..], true, 7 * P));
        // Odometry: dropped in frame 2, frozen at frame 7's pose from frame 8 on.
        assert!(!f.frame(2).unwrap().ego_present);
        for k in 8..10 {
            let e = f.frame(k).unwrap();
            assert!(e.ego_present);
            assert_eq!((e.ego.x, e.ego.stamp_ns), (7.0, 7 * P), "frame {k}");
        }
        // Every hit is an issue naming its rule, after the source's own issues.
        assert_eq!(f.issues()[0], (0, "from the log".to_string()));
        let count = |rule: usize| {
            f.issues()
                .iter()
                .filter(|(_, s)| s.starts_with(&format!("injected fault (sensor rule #{rule})")))
                .count() as u64
        };
        for r in f.records() {
            assert_eq!(count(r.rule), r.injected, "{r:?}");
        }
        let injected: Vec<u64> = f.records().iter().map(|r| r.injected).collect();
        assert_eq!(injected, vec![1, 3, 2, 1, 2]);
        let line = &f
            .issues()
            .iter()
            .find(|(k, s)| *k == 6 && s.contains("camera a"))
            .unwrap()
            .1;
        assert!(
            line.contains("camera a delayed 150.0 ms") && line.contains("frame 4 (200.0 ms old)"),
            "{line}"
        );
        assert!(f.issues().windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn corruption_is_seeded_and_leaves_the_rest_alone() {
        let rules = |seed: u64| {
            format!(
                "seed = {seed}\n[[sensor]]\ntarget = \"b\"\nfault = \"corrupt\"\nfraction = 1.0\nframes = \"1\"\n\
                 [[sensor]]\ntarget = \"a\"\nfault = \"corrupt\"\ncorrupt = \"truncate\"\nframes = \"1\"\n\
                 [[sensor]]\ntarget = \"odometry\"\nfault = \"corrupt\"\nframes = \"1\"\n"
            )
        };
        let one = faulty(&rules(1)).unwrap();
        let again = faulty(&rules(1)).unwrap();
        let other = faulty(&rules(2)).unwrap();
        let (noisy, present, _) = cam(&one, 1, 1);
        assert!(present);
        assert_ne!(noisy, &[101u8; LEN][..]);
        assert_eq!(noisy, cam(&again, 1, 1).0, "same seed, same bytes");
        assert_ne!(noisy, cam(&other, 1, 1).0, "another seed, other bytes");
        // Truncated by half: the last 3 of 6 bytes lost.
        assert_eq!(cam(&one, 1, 0).0, &[2, 2, 2, 0, 0, 0][..]);
        let e = one.frame(1).unwrap().ego;
        assert_ne!(e.x.to_bits(), 1f64.to_bits());
        assert_eq!(e.stamp_ns, P, "the stamp is left alone");
        assert_eq!(one.changed_frames(), 1);
    }

    #[test]
    fn unknown_cameras_list_the_rig() {
        let e = faulty("[[sensor]]\ntarget = \"c\"\nfault = \"drop\"\nframes = \"1\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("#1") && e.contains("\"c\"") && e.contains("\"a\", \"b\", \"odometry\""),
            "{e}"
        );
        let e = faulty("[[sensor]]\ntarget = \"a\"\nfault = \"drop\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("frames ="), "{e}");
    }
}
