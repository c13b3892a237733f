//! The `jpeg_decode` stage: each camera's JPEG stream, as the `sensors` stage copied it into the
//! arena, decoded into the camera's RGB image — part of the measured frame, parallel over
//! cameras. Present only when the frame source passes JPEG on
//! ([`crate::sensors::FrameSource::jpeg_capacity`] > 0).
//!
//! Contract: camera `c`'s stream is `jpeg[c * capacity..][..len[c]]` (`len[c]` 0: nothing
//! usable this frame). A stream that decodes to the camera's size gives its pixels and
//! `camera_present[c]` = 1; anything else (absent, corrupt, other size, a JPEG feature the
//! decoder does not support) gives black pixels and 0, so the rest of the graph sees a
//! missing camera, as for a raw image. Hot path: one [`JpegDecoder`] per camera, with every
//! buffer allocated at start-up; no allocation, no lock, no I/O, no panic. Deterministic:
//! integer decoding, one chunk per camera whatever the lane count.
//!
//! Each camera's decode is timed (two clock reads) into [`JpegDecodeTimes`], shared with the
//! report: the stage's row in the latency table is the slowest lane's share of the cameras,
//! these are the cost of one camera's image (`redline replay` prints them under the stage's
//! row). Recording is a relaxed atomic add into fixed log-linear buckets (32 per power of
//! two: within 3 %), so timing stays allocation and lock free and never alters an output.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use redline_runtime::metrics::LatencySummary;
use redline_runtime::{FrameInfo, Stage, StageError, StageIo};

use crate::jpeg::JpegDecoder;

const E_SHAPE: StageError = StageError::new("decode: buffer sizes do not match the rig");

/// One camera's decoder and the outcome of its last decode.
#[derive(Debug)]
struct Camera {
    decoder: JpegDecoder,
    ok: bool,
    /// Duration of the last decode, ns.
    took_ns: u64,
}

/// Sub-buckets per power of two in [`CameraTimes`] (precision 1/32).
const SUB: u64 = 32;
/// Buckets: exact below 32 ns, then 32 per power of two up to 2^40 ns (about 18 min;
/// longer is counted in the last bucket).
const BUCKETS: usize = (SUB as usize) * 36;

fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let ns = ns.min((1 << 40) - 1);
    let shift = 63 - ns.leading_zeros() as u64 - 5;
    ((shift + 1) * SUB + ((ns >> shift) & (SUB - 1))) as usize
}

/// The largest value bucket `i` holds (what a percentile reports).
fn bucket_high(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = i / SUB - 1;
    ((((i % SUB) | SUB) + 1) << shift) - 1
}

/// One camera's decode times.
struct CameraTimes {
    buckets: Box<[AtomicU64]>,
    decoded: AtomicU64,
    failed: AtomicU64,
    max_ns: AtomicU64,
    sum_ns: AtomicU64,
}

/// Per-camera decode times of a [`JpegDecodeStage`], shared with whoever reports them.
pub struct JpegDecodeTimes {
    names: Vec<String>,
    cameras: Vec<CameraTimes>,
}

impl std::fmt::Debug for JpegDecodeTimes {
    // Hand-written: the derived form would print every bucket.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JpegDecodeTimes")
            .field("cameras", &self.cameras.len())
            .finish()
    }
}

/// One camera's decode cost over a run (serialized into `report.json`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CameraDecodeCost {
    /// Camera name (rig order).
    pub camera: String,
    /// Images decoded to the camera's size.
    pub decoded: u64,
    /// Streams that were absent, corrupt, of another size or unsupported (camera missing).
    pub failed: u64,
    /// Decode time of one image, every attempt counted.
    pub time: LatencySummary,
}

impl JpegDecodeTimes {
    /// Counters for the cameras named (rig order; allocates them: start-up only).
    pub fn new(names: Vec<String>) -> Self {
        JpegDecodeTimes {
            cameras: (0..names.len())
                .map(|_| CameraTimes {
                    buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
                    decoded: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                    max_ns: AtomicU64::new(0),
                    sum_ns: AtomicU64::new(0),
                })
                .collect(),
            names,
        }
    }

    /// Hot path: one relaxed add per counter, no allocation.
    fn record(&self, cam: usize, ns: u64, ok: bool) {
        let Some(t) = self.cameras.get(cam) else {
            return;
        };
        t.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        t.max_ns.fetch_max(ns, Ordering::Relaxed);
        t.sum_ns.fetch_add(ns, Ordering::Relaxed);
        if ok { &t.decoded } else { &t.failed }.fetch_add(1, Ordering::Relaxed);
    }

    /// Each camera's cost so far (not for the hot path: scans the buckets).
    pub fn summary(&self) -> Vec<CameraDecodeCost> {
        self.cameras
            .iter()
            .zip(&self.names)
            .map(|(t, camera)| {
                let counts: Vec<u64> = t
                    .buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect();
                let count: u64 = counts.iter().sum();
                let max_ns = t.max_ns.load(Ordering::Relaxed);
                let at = |q: f64| -> u64 {
                    let rank = ((q * count as f64).ceil() as u64).max(1);
                    let mut seen = 0;
                    for (i, c) in counts.iter().enumerate() {
                        seen += c;
                        if seen >= rank {
                            return bucket_high(i).min(max_ns);
                        }
                    }
                    max_ns
                };
                let time = if count == 0 {
                    LatencySummary::default()
                } else {
                    LatencySummary {
                        count,
                        // the first used bucket's lowest value
                        min_ns: counts.iter().position(|&c| c > 0).map_or(0, |i| {
                            if i == 0 {
                                0
                            } else {
                                bucket_high(i - 1) + 1
                            }
                        }),
                        mean_ns: t.sum_ns.load(Ordering::Relaxed) as f64 / count as f64,
                        p50_ns: at(0.5),
                        p90_ns: at(0.9),
                        p99_ns: at(0.99),
                        p999_ns: at(0.999),
                        max_ns,
                        p99_over_p50: match at(0.5) {
                            0 => 0.0,
                            p50 => at(0.99) as f64 / p50 as f64,
                        },
                    }
                };
                CameraDecodeCost {
                    camera: camera.clone(),
                    decoded: t.decoded.load(Ordering::Relaxed),
                    failed: t.failed.load(Ordering::Relaxed),
                    time,
                }
            })
            .collect()
    }
}

/// Decodes every camera's JPEG stream (see the module docs).
#[derive(Debug)]
pub struct JpegDecodeStage {
    cameras: Vec<Camera>,
    width: usize,
    height: usize,
    capacity: usize,
    times: Arc<JpegDecodeTimes>,
}

impl JpegDecodeStage {
    /// For `cams` cameras of `width` x `height` px whose streams have at most `capacity`
    /// bytes (allocates the decoders' buffers); each decode is timed into `times`.
    pub fn new(
        cams: usize,
        width: usize,
        height: usize,
        capacity: usize,
        times: Arc<JpegDecodeTimes>,
    ) -> Self {
        JpegDecodeStage {
            cameras: (0..cams)
                .map(|_| Camera {
                    decoder: JpegDecoder::new(width, height),
                    ok: false,
                    took_ns: 0,
                })
                .collect(),
            width,
            height,
            capacity,
            times,
        }
    }
}

impl Stage for JpegDecodeStage {
    fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
        let jpeg = io.input::<u8>(0)?;
        let lens = io.input::<u32>(1)?;
        let images = io.output::<u8>(0)?;
        let present = io.output::<u32>(1)?;
        let cams = self.cameras.len();
        let (w, h, cap) = (self.width, self.height, self.capacity);
        if jpeg.len() != cams * cap
            || lens.len() != cams
            || images.len() != cams * w * h * 3
            || present.len() != cams
        {
            return Err(E_SHAPE);
        }
        io.parallel_chunks_mut_pair(images, &mut self.cameras, cams, &|c, img, cam| {
            let cam = &mut cam[0];
            let n = (lens[c] as usize).min(cap);
            let start = Instant::now();
            cam.ok = n > 0
                && cam
                    .decoder
                    .decode_into(&jpeg[c * cap..c * cap + n], img)
                    .is_ok_and(|info| (info.width, info.height) == (w, h));
            cam.took_ns = start.elapsed().as_nanos() as u64;
            if !cam.ok {
                img.fill(0);
            }
        });
        for (c, (p, cam)) in present.iter_mut().zip(&self.cameras).enumerate() {
            *p = u32::from(cam.ok);
            self.times.record(c, cam.took_ns, cam.ok);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_within_three_percent() {
        let mut prev_high = None;
        for i in 0..BUCKETS {
            let high = bucket_high(i);
            if let Some(p) = prev_high {
                assert_eq!(bucket_of(p + 1), i, "bucket {i} starts after {p}");
            }
            assert_eq!(bucket_of(high), i, "bucket {i} ends at {high}");
            prev_high = Some(high);
        }
        for ns in [
            1u64,
            31,
            32,
            33,
            1000,
            7_741_000,
            123_456_789,
            10_000_000_000,
        ] {
            let high = bucket_high(bucket_of(ns));
            assert!(
                high >= ns && (high - ns) as f64 <= ns as f64 / 32.0,
                "{ns} -> {high}"
            );
        }
    }

    #[test]
    fn summary_reports_each_cameras_percentiles_and_failures() {
        let t = JpegDecodeTimes::new(vec!["front".into(), "rear".into()]);
        for k in 1..=100u64 {
            t.record(0, k * 1_000_000, true);
        }
        t.record(1, 5_000, false);
        let s = t.summary();
        assert_eq!(s[0].camera, "front");
        assert_eq!((s[0].decoded, s[0].failed, s[0].time.count), (100, 0, 100));
        let near = |got: u64, want: u64| got >= want && got <= want + want / 32;
        assert!(near(s[0].time.p50_ns, 50_000_000), "{:?}", s[0].time);
        assert!(near(s[0].time.p99_ns, 99_000_000), "{:?}", s[0].time);
        assert_eq!(s[0].time.max_ns, 100_000_000);
        assert!((s[0].time.mean_ns - 50.5e6).abs() < 1.0);
        assert_eq!((s[1].decoded, s[1].failed, s[1].time.count), (0, 1, 1));
        assert!(near(s[1].time.p50_ns, 5_000) && s[1].time.p50_ns <= 5_000);
    }
}
