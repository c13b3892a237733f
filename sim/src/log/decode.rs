//! Decoding one raw message of a log into a [`Payload`].
//!
//! Promises: a message whose schema or encoding redline does not read, or that fails to
//! decode or convert, becomes a [`LogIssue`](super::LogIssue) on the reader and is skipped
//! (`None`); an image of the wrong size is kept as a [`Payload::Image`] with an
//! [`ImageIssue`] so the rest of the frame stays usable. The odometry topic may be a pose
//! topic or the `/tf` tree: decoding it is stateful (the previous pose, the tree so far:
//! [`TfEgo`]), in log-time order, reset by each [`LogReader::messages`] call. A camera
//! topic's images are decoded by [`decode_image`] from a detached [`CameraTopic`], on the
//! topic's thread (`camera_threads`); `decode` takes the result back in log order. Cost:
//! allocates the decoded message. Never panics on bad data.

use super::reader::{LogReader, RawMsg};
use super::{ImageIssue, LogIssueKind, LogMessage, Payload, RoadMapData, Stamps};
use crate::image_decode::{decode_compressed, jpeg_size, Compression};
use crate::msgs::{
    CameraInfo, CompressedImage, CompressedVideo, FfmpegPacket, GroundTruthMsg, H264Packet, Image,
    Odometry, PoseStamped, PoseWithCovarianceStamped, Quaternion, RoadMap, RosMessage, TfMessage,
    TransformStamped, Vector3,
};
use crate::types::{EgoState, RgbImage};
use crate::video::VideoStream;
use redline_pipeline::perception::Preprocess;
use redline_runtime::det_math as dm;

/// The message types redline reads, by schema name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Image,
    CompressedImage,
    /// `foxglove_msgs/msg/CompressedVideo`, `ffmpeg_image_transport_msgs/msg/FFMPEGPacket` or
    /// `h264_msgs/msg/Packet`: one picture of a video stream ([`crate::video`]).
    CompressedVideo,
    CameraInfo,
    Odometry,
    /// `geometry_msgs/msg/PoseStamped` or `PoseWithCovarianceStamped`: an ego pose without
    /// velocity, usable as the odometry topic.
    Pose,
    Tf,
    GroundTruth,
    Map,
}

impl LogReader {
    /// Decodes `raw`; `None` (and an issue) when it cannot be used.
    pub(super) fn decode(&mut self, mut raw: RawMsg) -> Option<LogMessage> {
        let ch = self.channels.get(&raw.channel)?.clone();
        let at = raw.key.0;
        let undecodable = |e: &dyn std::fmt::Display| {
            (
                LogIssueKind::UndecodableMessage,
                format!(
                    "{} message at {at} ns cannot be decoded: {e}; skipped",
                    ch.topic
                ),
            )
        };
        let kind = if ch.encoding == "cdr" {
            kind_of(&ch.schema)
        } else {
            None
        };
        let Some(kind) = kind else {
            self.issue(
                LogIssueKind::UnknownSchema,
                format!(
                    "topic {} has schema {:?} with encoding {:?}, which redline does not read; its messages are skipped",
                    ch.topic, ch.schema, ch.encoding
                ),
            );
            return None;
        };
        let res: Result<(u64, Payload), (LogIssueKind, String)> = (|| match kind {
            Kind::Image | Kind::CompressedImage | Kind::CompressedVideo => {
                if !self.image_cams.contains_key(&raw.channel) {
                    return Err((
                        LogIssueKind::UnknownSchema,
                        format!("image topic {} belongs to no camera of the rig (no camera_info for it and no [sensors] entry); its messages are skipped", ch.topic),
                    ));
                }
                // Decoded on the camera's thread: sent ahead by `Messages`' look-ahead, or now.
                if !self.camera_threads.was_sent(raw.channel, raw.key) {
                    self.send_camera_ahead(&mut raw);
                }
                self.camera_threads.take(raw.channel, raw.key)
            }
            // Another odometry source than the rig's (e.g. a second localiser): read, unused.
            Kind::Odometry if ch.topic != self.sensors.odometry_topic() => Ok((0, Payload::Unused)),
            Kind::Odometry => {
                let m = Odometry::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let ego = m.to_ego().map_err(|e| undecodable(&e))?;
                Ok((ego.stamp_ns, Payload::Odometry(ego)))
            }
            Kind::Pose if ch.topic != self.sensors.odometry_topic() => Ok((0, Payload::Unused)),
            Kind::Pose => {
                let (header, pose) = if ch.schema == PoseStamped::SCHEMA_NAME {
                    let m = PoseStamped::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                    (m.header, m.pose)
                } else {
                    let m = PoseWithCovarianceStamped::from_cdr(&raw.data)
                        .map_err(|e| undecodable(&e))?;
                    (m.header, m.pose.pose)
                };
                let stamp = header.stamp.to_ns().map_err(|e| undecodable(&e))?;
                // Speed and yaw rate are filled in below, on the clock that places the pose.
                let ego = EgoState {
                    stamp_ns: stamp,
                    x: pose.position.x,
                    y: pose.position.y,
                    yaw: pose.orientation.yaw(),
                    v: 0.0,
                    yaw_rate: 0.0,
                };
                Ok((stamp, Payload::Odometry(ego)))
            }
            Kind::GroundTruth => {
                let m = GroundTruthMsg::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let gt = m.to_gt().map_err(|e| undecodable(&e))?;
                Ok((gt.stamp_ns, Payload::GroundTruth(gt)))
            }
            Kind::Map => {
                let m = RoadMap::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = m.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
                let d = map_data(m).map_err(|e| undecodable(&e))?;
                Ok((stamp, Payload::Map(d)))
            }
            Kind::CameraInfo => {
                let m = CameraInfo::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = m.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
                Ok((stamp, Payload::CameraInfo))
            }
            // The transform tree as the ego source ([sensors] odometry = "/tf").
            Kind::Tf if ch.topic == self.sensors.odometry_topic() => {
                let m = TfMessage::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                match self.tf_ego.update(&m.transforms) {
                    Some(Ok(ego)) => Ok((ego.stamp_ns, Payload::Odometry(ego))),
                    Some(Err(e)) => Err(undecodable(&e)),
                    None => Ok((0, Payload::Unused)),
                }
            }
            Kind::Tf => {
                let m = TfMessage::from_cdr(&raw.data).map_err(|e| undecodable(&e))?;
                let stamp = match m.transforms.first() {
                    Some(t) => t.header.stamp.to_ns().map_err(|e| undecodable(&e))?,
                    None => 0,
                };
                Ok((stamp, Payload::Tf))
            }
        })();
        let res = res.map(|(stamp_ns, payload)| match (self.sensors.stamps, payload) {
            // Placed by when the recorder logged it ([sensors] stamps = "log_time").
            (Stamps::LogTime, Payload::Odometry(mut ego)) => {
                ego.stamp_ns = at;
                (at, Payload::Odometry(ego))
            }
            (Stamps::LogTime, Payload::GroundTruth(mut gt)) => {
                gt.stamp_ns = at;
                (at, Payload::GroundTruth(gt))
            }
            (Stamps::LogTime, p @ (Payload::Image { .. } | Payload::Jpeg { .. })) => (at, p),
            (_, p) => (stamp_ns, p),
        });
        let res = res.map(|(stamp_ns, payload)| match (kind, payload) {
            (Kind::Pose | Kind::Tf, Payload::Odometry(pose)) => {
                let ego = with_velocity(self.last_pose.as_ref(), pose);
                self.last_pose = Some(ego);
                (stamp_ns, Payload::Odometry(ego))
            }
            (_, p) => (stamp_ns, p),
        });
        match res {
            Ok((stamp_ns, payload)) => Some(LogMessage {
                topic: ch.topic,
                log_time_ns: at,
                stamp_ns,
                payload,
            }),
            Err((kind, detail)) => {
                self.issue(kind, detail);
                None
            }
        }
    }
}

/// A video message (`CompressedVideo`, `FFMPEGPacket` or `h264_msgs/msg/Packet`, by
/// `schema`): its picture's stamp, its codec and its bytes.
pub(super) fn video_message(schema: &str, cdr: &[u8]) -> Result<(u64, String, Vec<u8>), String> {
    if schema == H264Packet::SCHEMA_NAME {
        let m = H264Packet::from_cdr(cdr).map_err(|e| e.to_string())?;
        let stamp = m.header.stamp.to_ns().map_err(|e| e.to_string())?;
        Ok((stamp, "h264".to_string(), m.data))
    } else if schema == FfmpegPacket::SCHEMA_NAME {
        let m = FfmpegPacket::from_cdr(cdr).map_err(|e| e.to_string())?;
        let stamp = m.header.stamp.to_ns().map_err(|e| e.to_string())?;
        Ok((stamp, m.codec().to_string(), m.data))
    } else {
        let m = CompressedVideo::from_cdr(cdr).map_err(|e| e.to_string())?;
        let stamp = m.timestamp.to_ns().map_err(|e| e.to_string())?;
        Ok((stamp, m.format, m.data))
    }
}

/// `img` if it has the camera's size `want`, else the issue.
fn sized(img: RgbImage, want: (u32, u32)) -> Result<RgbImage, ImageIssue> {
    if (img.width, img.height) == want {
        Ok(img)
    } else {
        Err(ImageIssue::WrongSize {
            got: (img.width, img.height),
            want,
        })
    }
}

impl LogReader {
    /// Whether [`LogReader::decode`] decodes `channel`'s messages on a camera's thread (an
    /// image, compressed image or video topic of a rig camera): the condition under which
    /// `Messages` may send them ahead. Must match `decode`'s own path exactly.
    pub(super) fn camera_channel(&self, channel: u16) -> bool {
        self.channels.get(&channel).is_some_and(|ch| {
            ch.encoding == "cdr"
                && matches!(
                    kind_of(&ch.schema),
                    Some(Kind::Image | Kind::CompressedImage | Kind::CompressedVideo)
                )
                && self.image_cams.contains_key(&channel)
        })
    }

    /// Sends `raw` (a message of a [`LogReader::camera_channel`]) to its camera's thread
    /// now, ahead of its decoding; its bytes go with it.
    pub(super) fn send_camera_ahead(&mut self, raw: &mut RawMsg) {
        if !self.camera_threads.has(raw.channel) {
            // The topic's first message in this read: its thread starts. (A topic that
            // cannot be described has no thread; `take` reports its messages.)
            let Some(topic) = self.camera_topic(raw.channel) else {
                return;
            };
            self.camera_threads.start(raw.channel, topic);
        }
        let cdr = std::mem::take(&mut raw.data);
        self.camera_threads.send(raw.channel, raw.key, cdr);
    }

    /// How `channel`'s images are decoded, detached from the reader (for its thread).
    fn camera_topic(&self, channel: u16) -> Option<CameraTopic> {
        let ch = self.channels.get(&channel)?;
        let kind = kind_of(&ch.schema)?;
        let cam = *self.image_cams.get(&channel)?;
        let resizer = self.resizers.get(cam).cloned().flatten();
        // The camera's own size: a resized camera's is its resize's input.
        let want = match &resizer {
            Some(pre) => {
                let (w, h) = pre.input_size();
                (w as u32, h as u32)
            }
            None => {
                let spec = self.cameras.get(cam)?;
                (spec.width, spec.height)
            }
        };
        Some(CameraTopic {
            topic: ch.topic.clone(),
            schema: ch.schema.clone(),
            kind,
            cam,
            want,
            resizer,
            max_image_side: self.limits.max_image_side,
            keep_jpeg: self.keep_jpeg,
        })
    }
}

/// How one camera topic's messages are decoded: everything [`decode_image`] needs, detached
/// from the reader, so that it runs on the camera's thread (`camera_threads`).
#[derive(Clone, Debug)]
pub(super) struct CameraTopic {
    pub(super) topic: String,
    pub(super) schema: String,
    /// `Image`, `CompressedImage` or `CompressedVideo`.
    pub(super) kind: Kind,
    /// The rig camera.
    pub(super) cam: usize,
    /// The size its pictures must have: the camera's, or its resize's input.
    pub(super) want: (u32, u32),
    /// The resize to the rig's size, for a camera of another size.
    pub(super) resizer: Option<Preprocess>,
    pub(super) max_image_side: u32,
    /// JPEG passed on compressed ([`LogReader::set_keep_jpeg`]).
    pub(super) keep_jpeg: bool,
}

/// Decodes one message (`cdr`, logged at `at` ns) of camera topic `t`, with the topic's
/// video stream state `video` (H.264/H.265 cameras): its stamp and payload, or the issue
/// that skips it.
pub(super) fn decode_image(
    t: &CameraTopic,
    video: &mut VideoStream,
    at: u64,
    cdr: &[u8],
) -> Result<(u64, Payload), (LogIssueKind, String)> {
    let undecodable = |e: &dyn std::fmt::Display| {
        (
            LogIssueKind::UndecodableMessage,
            format!(
                "{} message at {at} ns cannot be decoded: {e}; skipped",
                t.topic
            ),
        )
    };
    let (cam, want) = (t.cam, t.want);
    let (stamp, image) = if t.kind == Kind::Image {
        let msg = Image::from_cdr(cdr).map_err(|e| undecodable(&e))?;
        let stamp = msg.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
        // The size is checked before converting (no copy of a wrong image).
        let image =
            if (msg.width, msg.height) != want && Image::bytes_per_pixel(&msg.encoding).is_some() {
                Err(ImageIssue::WrongSize {
                    got: (msg.width, msg.height),
                    want,
                })
            } else {
                msg.into_rgb()
            };
        (stamp, image)
    } else if t.kind == Kind::CompressedVideo {
        let (stamp, format, data) = video_message(&t.schema, cdr).map_err(|e| undecodable(&e))?;
        match video_picture(video, &format, &data, want) {
            Some(image) => (stamp, image),
            // Parameter sets alone: no picture, nothing missing.
            None => return Ok((stamp, Payload::Unused)),
        }
    } else {
        let msg = CompressedImage::from_cdr(cdr).map_err(|e| undecodable(&e))?;
        let stamp = msg.header.stamp.to_ns().map_err(|e| undecodable(&e))?;
        if crate::video::is_video(&msg.format) {
            // A driver that publishes its H.264 or H.265 stream as CompressedImage.
            match video_picture(video, &msg.format, &msg.data, want) {
                Some(image) => (stamp, image),
                None => return Ok((stamp, Payload::Unused)),
            }
        } else if t.keep_jpeg && Compression::sniff(&msg.data) == Some(Compression::Jpeg) {
            // Passed on compressed: only the header is read here.
            let payload = match jpeg_size(&msg.data) {
                Ok(size) if size == want => Payload::Jpeg {
                    cam,
                    data: msg.data,
                },
                Ok(got) => Payload::Image {
                    cam,
                    image: Err(ImageIssue::WrongSize { got, want }),
                },
                Err(e) => Payload::Image {
                    cam,
                    image: Err(graph_undecodable(&msg.data, e)),
                },
            };
            return Ok((stamp, payload));
        } else {
            let image = decode_compressed(&msg, t.max_image_side).and_then(|img| sized(img, want));
            (stamp, image)
        }
    };
    // Resized to the rig's size when the camera is resized.
    let image = match (image, &t.resizer) {
        (Ok(img), Some(pre)) => Ok(resize_rgb(pre, &img)),
        (image, _) => image,
    };
    Ok((stamp, Payload::Image { cam, image }))
}

/// The picture of one access unit of `video`'s stream, checked against the camera's size
/// `want`; `None` when the unit holds no picture (parameter sets alone).
fn video_picture(
    video: &mut VideoStream,
    format: &str,
    data: &[u8],
    want: (u32, u32),
) -> Option<Result<RgbImage, ImageIssue>> {
    match video.picture(format, data) {
        Ok(None) => None,
        Ok(Some(img)) => Some(sized(img, want)),
        Err(e) => Some(Err(e)),
    }
}

/// `img` resized by `pre` (exact area averaging; built for its size, see `plan_resize`) to
/// 8-bit RGB: `Preprocess` gives `round_half_away(avg − 128)`, so adding 128 back is the
/// rounded average.
fn resize_rgb(pre: &Preprocess, img: &RgbImage) -> RgbImage {
    let mut q = vec![0i8; pre.output_len()];
    let (w, h) = pre.output_size();
    // The size was checked against the camera's before; a mismatch would give black.
    let data = match pre.run(&img.data, &mut q) {
        Ok(()) => q.iter().map(|&v| (v as i16 + 128) as u8).collect(),
        Err(_) => vec![0; q.len()],
    };
    RgbImage {
        width: w as u32,
        height: h as u32,
        data,
    }
}

/// `base_link`'s pose from a dynamic transform tree (`/tf`): the latest transform of each
/// frame to its parent, composed from `base_link` up to the root (`map`, `odom`, ...); the
/// log's static transforms (`/tf_static`, e.g. `base_footprint` → `base_link`) seed it.
#[derive(Debug, Default)]
pub(super) struct TfEgo {
    /// child frame → (parent frame, translation, rotation), the latest received.
    edges: std::collections::BTreeMap<String, (String, Vector3, Quaternion)>,
}

impl TfEgo {
    /// A tree that starts with the static transforms `statics`.
    pub(super) fn seeded(statics: &[TransformStamped]) -> TfEgo {
        let mut tree = TfEgo::default();
        for t in statics {
            tree.insert(t);
        }
        tree
    }

    fn insert(&mut self, t: &TransformStamped) -> String {
        let child = t.child_frame_id.trim_start_matches('/').to_string();
        self.edges.insert(
            child.clone(),
            (
                t.header.frame_id.trim_start_matches('/').to_string(),
                t.transform.translation,
                t.transform.rotation,
            ),
        );
        child
    }

    /// Takes the transforms of one `/tf` message. When one of them lies on `base_link`'s
    /// chain (`base_link`'s own, or one of its ancestors'), `base_link`'s pose in the root
    /// of the chain, stamped with the latest stamp among them (speed and yaw rate 0:
    /// differenced by the caller); `None` when none does. A loop in the tree or a bad stamp
    /// is an error.
    fn update(&mut self, transforms: &[TransformStamped]) -> Option<Result<EgoState, String>> {
        let mut moved = std::collections::BTreeMap::new();
        for t in transforms {
            let child = self.insert(t);
            moved.insert(child, t.header.stamp);
        }
        // Compose up the chain: pose_root = edge_k ∘ … ∘ edge_base.
        let (mut t, mut q) = (Vector3::default(), Quaternion::IDENTITY);
        let mut frame = super::sensor_map::BASE_FRAME;
        let mut stamp: Option<u64> = None;
        for _ in 0..=self.edges.len() {
            let Some((parent, et, eq)) = self.edges.get(frame) else {
                return stamp.map(|stamp_ns| {
                    Ok(EgoState {
                        stamp_ns,
                        x: t.x,
                        y: t.y,
                        yaw: q.yaw(),
                        v: 0.0,
                        yaw_rate: 0.0,
                    })
                });
            };
            if let Some(s) = moved.get(frame) {
                match s.to_ns() {
                    Ok(s) => stamp = Some(stamp.map_or(s, |m| m.max(s))),
                    Err(e) => return Some(Err(e.to_string())),
                }
            }
            let r =
                *eq * Quaternion {
                    x: t.x,
                    y: t.y,
                    z: t.z,
                    w: 0.0,
                } * eq.conjugate();
            t = Vector3 {
                x: et.x + r.x,
                y: et.y + r.y,
                z: et.z + r.z,
            };
            q = *eq * q;
            frame = parent;
        }
        Some(Err(format!(
            "the transform tree above {} loops",
            super::sensor_map::BASE_FRAME
        )))
    }
}

/// The longest gap between two poses whose difference gives the speed and yaw rate.
const MAX_POSE_GAP_NS: u64 = 1_000_000_000;

/// `pose` (a pose-only ego state) with its forward speed and yaw rate from the previous pose
/// of the odometry topic: the displacement along the mean heading and the heading change
/// (wrapped to (−π, π]) over the time between them. Without a previous pose less than
/// [`MAX_POSE_GAP_NS`] older (the first pose, after a gap, or out of order), both are 0.
fn with_velocity(prev: Option<&EgoState>, pose: EgoState) -> EgoState {
    let Some(p) = prev
        .filter(|p| p.stamp_ns < pose.stamp_ns && pose.stamp_ns - p.stamp_ns <= MAX_POSE_GAP_NS)
    else {
        return pose;
    };
    let dt = (pose.stamp_ns - p.stamp_ns) as f64 * 1e-9;
    let pi = std::f64::consts::PI;
    let mut turn = pose.yaw - p.yaw;
    if turn > pi {
        turn -= 2.0 * pi;
    } else if turn <= -pi {
        turn += 2.0 * pi;
    }
    let (s, c) = dm::sin_cos(p.yaw + 0.5 * turn);
    EgoState {
        v: ((pose.x - p.x) * c + (pose.y - p.y) * s) / dt,
        yaw_rate: turn / dt,
        ..pose
    }
}

pub(super) fn kind_of(schema: &str) -> Option<Kind> {
    match schema {
        n if n == Image::SCHEMA_NAME => Some(Kind::Image),
        n if n == CompressedImage::SCHEMA_NAME => Some(Kind::CompressedImage),
        n if n == CompressedVideo::SCHEMA_NAME
            || n == FfmpegPacket::SCHEMA_NAME
            || n == H264Packet::SCHEMA_NAME =>
        {
            Some(Kind::CompressedVideo)
        }
        n if n == CameraInfo::SCHEMA_NAME => Some(Kind::CameraInfo),
        n if n == Odometry::SCHEMA_NAME => Some(Kind::Odometry),
        n if n == PoseStamped::SCHEMA_NAME || n == PoseWithCovarianceStamped::SCHEMA_NAME => {
            Some(Kind::Pose)
        }
        n if n == TfMessage::SCHEMA_NAME => Some(Kind::Tf),
        n if n == GroundTruthMsg::SCHEMA_NAME => Some(Kind::GroundTruth),
        n if n == RoadMap::SCHEMA_NAME => Some(Kind::Map),
        _ => None,
    }
}

pub(super) fn map_data(m: RoadMap) -> Result<RoadMapData, String> {
    if m.centre_x.len() != m.centre_y.len() {
        return Err(format!(
            "map centre line has {} x but {} y coordinates",
            m.centre_x.len(),
            m.centre_y.len()
        ));
    }
    Ok(RoadMapData {
        lanes: m.lanes,
        lane_width: m.lane_width,
        centre: m.centre_x.into_iter().zip(m.centre_y).collect(),
    })
}

/// Why a JPEG stream kept for the graph's decoder is unusable; for a feature that decoder
/// lacks (progressive, ...), also how to replay the log anyway.
fn graph_undecodable(data: &[u8], issue: ImageIssue) -> ImageIssue {
    use redline_pipeline::jpeg::{JpegDecoder, JpegError};
    match (JpegDecoder::peek_info(data), issue) {
        (Err(JpegError::Unsupported { .. }), ImageIssue::Undecodable { format, why }) => {
            ImageIssue::Undecodable {
                format,
                why: format!(
                    "{why}; or read the log into memory (`redline replay --in-memory`), which \
                     decodes such images when reading"
                ),
            }
        }
        (_, issue) => issue,
    }
}
