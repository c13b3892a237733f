//! Building the camera rig of a log at open, from its `camera_info` and static transforms or
//! a calibration file, as the reader's [`SensorMap`] says; and listing what a log holds.
//!
//! Promises: with the default map, cameras are discovered from `/cam/<name>/camera_info`
//! (redline's own layout). With cameras listed, exactly those cameras are read in the listed
//! order; each camera's intrinsics come from its `camera_info` topic when readable, else
//! from the calibration file, and its mount from the static transform chain `base_link` → …
//! → its frame, else from the calibration file, else zero (an issue says so). A listed
//! image topic the log lacks, or a camera with no intrinsics anywhere, is an error that
//! names the camera, lists the log's image-like topics and points to `redline log info`.
//! Cost: one pass over the calibration, transform and map channels at open.

use std::collections::{BTreeMap, BTreeSet};

use super::decode::{kind_of, map_data, video_message, Kind};
use super::merge::RawIter;
use super::reader::{check_calibration, LogReader};
use super::sensor_map::{mount_in_base, Rig, BASE_FRAME};
use super::{camera_of_topic, LogError, LogIssueKind, RoadMapData};
use crate::image_decode::{decode_compressed, jpeg_size, Compression};
use crate::msgs::{
    CameraInfo, CompressedImage, Image, RoadMap, RosMessage, TfMessage, TransformStamped,
};
use crate::video::{is_video, VideoStream};
use redline_pipeline::camera::CameraSpec;
use redline_pipeline::perception::Preprocess;

/// One channel of a log, with its message count and time range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelStats {
    /// Topic.
    pub topic: String,
    /// Schema name, e.g. `sensor_msgs/msg/Image`.
    pub schema: String,
    /// Message encoding, e.g. `cdr`.
    pub encoding: String,
    /// Messages read.
    pub count: u64,
    /// First and last log time, ns (0, 0 without messages).
    pub first_ns: u64,
    /// Last log time, ns.
    pub last_ns: u64,
}

/// The first message of a camera topic (`Image`, `CompressedImage` or `CameraInfo`), as
/// `redline log info` describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraSample {
    /// Topic.
    pub topic: String,
    /// Schema name.
    pub schema: String,
    /// The image encoding (`bayer_rggb8`, ...), the compressed stream's kind (`jpeg`, `png`,
    /// else the message's format string), or the `camera_info`'s distortion model with how
    /// far it moves the image border (`plumb_bob (17 px)`; undone by the preprocess stage).
    pub format: String,
    /// Width, px (0 when it cannot be read).
    pub width: u32,
    /// Height, px (0 when it cannot be read).
    pub height: u32,
    /// Why redline cannot use it as it is (an unread encoding, an undecodable stream, a lens
    /// distortion model it does not know); `None` when it can.
    pub problem: Option<String>,
    /// An image whose header stamp is zero while its log time is not (a driver that does
    /// not stamp: such a log replays with `[sensors] stamps = "log_time"`).
    pub unstamped: bool,
}

/// What the log's calibration channels hold, gathered in one pass.
#[derive(Default)]
struct Calibration {
    /// First readable `camera_info` per topic.
    infos: BTreeMap<String, CameraInfo>,
    /// Topics in the order their first `camera_info` was read.
    info_order: Vec<String>,
    tfs: Vec<TransformStamped>,
    map: Option<RoadMapData>,
}

impl LogReader {
    /// Every channel with its message count and log-time range (reads the whole data
    /// section once, decoding nothing).
    pub fn channel_stats(&mut self) -> Vec<ChannelStats> {
        let wanted: BTreeSet<u16> = self.channels.keys().copied().collect();
        let mut seen: BTreeMap<u16, (u64, u64, u64)> = BTreeMap::new();
        let mut raws = RawIter::new(self, wanted, 0, u64::MAX);
        while let Some(raw) = raws.next_raw() {
            let t = raw.key.0;
            let e = seen.entry(raw.channel).or_insert((0, t, t));
            e.0 += 1;
            e.1 = e.1.min(t);
            e.2 = e.2.max(t);
        }
        self.channels
            .iter()
            .map(|(id, c)| {
                let (count, first_ns, last_ns) = seen.get(id).copied().unwrap_or((0, 0, 0));
                ChannelStats {
                    topic: c.topic.clone(),
                    schema: c.schema.clone(),
                    encoding: c.encoding.clone(),
                    count,
                    first_ns,
                    last_ns,
                }
            })
            .collect()
    }

    /// The first message of every camera topic (images, compressed images, calibrations),
    /// described: what it holds and whether redline can use it. Reads until each such topic
    /// has given one message (often only the first chunk).
    pub fn camera_samples(&mut self) -> Vec<CameraSample> {
        let kinds: BTreeMap<u16, Kind> = self
            .channels
            .iter()
            .filter_map(|(id, c)| {
                let k = kind_of(&c.schema)?;
                matches!(
                    k,
                    Kind::Image | Kind::CompressedImage | Kind::CompressedVideo | Kind::CameraInfo
                )
                .then_some((*id, k))
            })
            .collect();
        let max_side = self.limits.max_image_side;
        let mut samples: BTreeMap<u16, CameraSample> = BTreeMap::new();
        // A video topic's sample is its first picture: read on to the first keyframe.
        let mut videos: BTreeMap<u16, VideoStream> = BTreeMap::new();
        let mut raws = RawIter::new(self, kinds.keys().copied().collect(), 0, u64::MAX);
        while samples.len() < kinds.len() {
            let Some(raw) = raws.next_raw() else { break };
            if samples.contains_key(&raw.channel) {
                continue;
            }
            let Some(ch) = raws.reader.channels.get(&raw.channel) else {
                continue;
            };
            let mut sample = CameraSample {
                topic: ch.topic.clone(),
                schema: ch.schema.clone(),
                format: String::new(),
                width: 0,
                height: 0,
                problem: None,
                unstamped: false,
            };
            let unstamped = |h: &crate::msgs::Header| h.stamp.to_ns() == Ok(0) && raw.key.0 != 0;
            let undecodable = |e: &dyn std::fmt::Display| Some(format!("undecodable: {e}"));
            // The first picture of a video stream (`Ok(None)`: read on), or why there is none.
            let mut video = |format: &str, data: &[u8]| {
                let stream = (videos.entry(raw.channel))
                    .or_insert_with(|| VideoStream::with_max_side(max_side));
                match stream.picture(format, data) {
                    Ok(None) => Ok(None),
                    Ok(Some(img)) => Ok(Some((img.width, img.height))),
                    Err(_) if stream.awaits_first_keyframe() => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            };
            match kinds[&raw.channel] {
                Kind::CompressedVideo => match video_message(&ch.schema, &raw.data) {
                    Ok((_, format, data)) => {
                        sample.format = format.clone();
                        match video(&format, &data) {
                            Ok(None) => continue,
                            Ok(Some(size)) => (sample.width, sample.height) = size,
                            Err(e) => sample.problem = Some(e),
                        }
                    }
                    Err(e) => sample.problem = undecodable(&e),
                },
                Kind::Image => match Image::from_cdr(&raw.data) {
                    Ok(img) => {
                        sample.unstamped = unstamped(&img.header);
                        (sample.width, sample.height) = (img.width, img.height);
                        sample.problem = img.to_rgb().err().map(|e| e.to_string());
                        sample.format = img.encoding;
                    }
                    Err(e) => sample.problem = undecodable(&e),
                },
                Kind::CompressedImage => match CompressedImage::from_cdr(&raw.data) {
                    // A driver's H.264 or H.265 stream as CompressedImage.
                    Ok(msg) if is_video(&msg.format) => {
                        sample.unstamped = unstamped(&msg.header);
                        sample.format = msg.format.clone();
                        match video(&msg.format, &msg.data) {
                            Ok(None) => continue,
                            Ok(Some(size)) => (sample.width, sample.height) = size,
                            Err(e) => sample.problem = Some(e),
                        }
                    }
                    Ok(msg) => {
                        sample.unstamped = unstamped(&msg.header);
                        let size = match Compression::sniff(&msg.data) {
                            Some(Compression::Jpeg) => {
                                sample.format = "jpeg".into();
                                jpeg_size(&msg.data)
                            }
                            Some(Compression::Png) => {
                                sample.format = "png".into();
                                decode_compressed(&msg, max_side).map(|i| (i.width, i.height))
                            }
                            None => {
                                sample.format = msg.format.clone();
                                decode_compressed(&msg, max_side).map(|i| (i.width, i.height))
                            }
                        };
                        match size {
                            Ok((w, h)) => (sample.width, sample.height) = (w, h),
                            Err(e) => sample.problem = Some(e.to_string()),
                        }
                    }
                    Err(e) => sample.problem = undecodable(&e),
                },
                _ => match CameraInfo::from_cdr(&raw.data) {
                    Ok(ci) => {
                        // The published images' size (after region of interest and binning).
                        let k = ci.to_intrinsics();
                        (sample.width, sample.height) = (k.width, k.height);
                        sample.format = ci.distortion_model.clone();
                        match ci.border_distortion_px() {
                            Err(_) => {
                                sample.problem = Some(format!(
                                    "lens distortion of unknown model {:?}, not corrected",
                                    ci.distortion_model
                                ))
                            }
                            // Undistorted by the preprocess stage: say by how much.
                            Ok(Some(px)) => {
                                sample.format = format!("{} ({px:.0} px)", sample.format)
                            }
                            Ok(None) => {}
                        }
                    }
                    Err(e) => sample.problem = undecodable(&e),
                },
            }
            samples.insert(raw.channel, sample);
        }
        samples.into_values().collect()
    }

    /// Whether every camera's images come as `CompressedImage` (the graph can then decode
    /// JPEG itself: [`LogReader::set_keep_jpeg`]) at the rig's one size (no camera resized
    /// when read).
    pub fn cameras_compressed(&self) -> bool {
        !self.cameras.is_empty()
            && self.resizers.iter().all(Option::is_none)
            && (0..self.cameras.len()).all(|cam| {
                let mut chans = self.image_cams.iter().filter(|(_, &c)| c == cam).peekable();
                chans.peek().is_some()
                    && chans.all(|(id, _)| {
                        self.channels
                            .get(id)
                            .is_some_and(|c| kind_of(&c.schema) == Some(Kind::CompressedImage))
                    })
            })
    }

    /// Pass JPEG camera images on compressed ([`super::Payload::Jpeg`], after checking their
    /// size from the JPEG header) instead of decoding them; PNG is still decoded.
    pub fn set_keep_jpeg(&mut self, on: bool) {
        self.keep_jpeg = on;
    }

    /// The odometry topic this reader uses.
    pub fn odometry_topic(&self) -> &str {
        self.sensors.odometry_topic()
    }

    /// The image topic of camera `cam` (rig order), if any.
    pub fn image_topic_of(&self, cam: usize) -> Option<&str> {
        self.image_cams
            .iter()
            .find(|(_, &c)| c == cam)
            .and_then(|(id, _)| self.channels.get(id))
            .map(|c| c.topic.as_str())
    }

    /// Image-like topics of the log, for error messages.
    fn image_topics(&self) -> String {
        let v: Vec<String> = self
            .channels
            .values()
            .filter(|c| {
                matches!(
                    kind_of(&c.schema),
                    Some(Kind::Image | Kind::CompressedImage | Kind::CompressedVideo)
                )
            })
            .map(|c| format!("{} ({})", c.topic, c.schema))
            .collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    }

    fn mismatch(&self, what: String) -> LogError {
        LogError::SensorMismatch {
            path: self.path.clone(),
            what,
            found: self.image_topics(),
        }
    }

    /// Reads camera_info, the static transforms and the map, and builds the camera rig.
    pub(super) fn load_rig(&mut self) -> Result<(), LogError> {
        let cal = self.read_calibration();
        if self.sensors.cameras.is_empty() {
            self.discover_rig(&cal)?;
        } else {
            self.mapped_rig(&cal)?;
        }
        self.map = cal.map;
        self.static_tf = cal.tfs;
        self.plan_resize();
        Ok(())
    }

    /// Cameras of different image sizes: the graph takes one size, so every camera larger
    /// than the rig's smallest (by area; the first of equals) has its images resized to it
    /// when read (exact area averaging, [`Preprocess`]) and its intrinsics scaled to match;
    /// an issue says so per camera. A resized camera's own size, which its images are
    /// checked against, is its resize's input.
    fn plan_resize(&mut self) {
        self.resizers = vec![None; self.cameras.len()];
        let Some((w, h)) = self
            .cameras
            .iter()
            .map(|c| (c.width, c.height))
            .min_by_key(|&(w, h)| u64::from(w) * u64::from(h))
        else {
            return;
        };
        let mut notes = Vec::new();
        for (cam, spec) in self.cameras.iter_mut().enumerate() {
            let (nw, nh) = (spec.width, spec.height);
            if (nw, nh) == (w, h) {
                continue;
            }
            let Ok(pre) = Preprocess::new(nw as usize, nh as usize, w as usize, h as usize) else {
                // A side Preprocess refuses: the camera's images stay its size, and are
                // reported as of the wrong size.
                continue;
            };
            let (sx, sy) = (f64::from(w) / f64::from(nw), f64::from(h) / f64::from(nh));
            (spec.fx, spec.cx, spec.fy, spec.cy) =
                (spec.fx * sx, spec.cx * sx, spec.fy * sy, spec.cy * sy);
            (spec.width, spec.height) = (w, h);
            self.resizers[cam] = Some(pre);
            let detail = format!(
                "camera {}: its {nw}x{nh} images are resized to {w}x{h} (the rig's smallest \
                 camera; the graph takes one image size) when read, its intrinsics scaled",
                spec.name
            );
            notes.push(detail);
        }
        for detail in notes {
            self.issue(LogIssueKind::ResizedCamera, detail);
        }
    }

    fn read_calibration(&mut self) -> Calibration {
        let tf_topic = self.sensors.tf_static_topic().to_string();
        let map_topic = self.sensors.map_topic().to_string();
        let kinds: BTreeMap<u16, Kind> = self
            .channels
            .iter()
            .filter_map(|(id, c)| {
                let k = kind_of(&c.schema)?;
                let wanted = match k {
                    Kind::CameraInfo => true,
                    Kind::Tf => c.topic == tf_topic,
                    Kind::Map => c.topic == map_topic,
                    _ => false,
                };
                wanted.then_some((*id, k))
            })
            .collect();
        let mut cal = Calibration::default();
        let mut raws = RawIter::new(self, kinds.keys().copied().collect(), 0, u64::MAX);
        while let Some(raw) = raws.next_raw() {
            let reader = &mut *raws.reader;
            let Some(ch) = reader.channels.get(&raw.channel).cloned() else {
                continue;
            };
            let bad = |e: &dyn std::fmt::Display| format!("{} at {} ns: {e}", ch.topic, raw.key.0);
            let issue = match kinds.get(&raw.channel) {
                Some(Kind::CameraInfo) if !cal.infos.contains_key(&ch.topic) => {
                    match CameraInfo::from_cdr(&raw.data) {
                        Ok(ci) => match check_calibration(&ci, &reader.limits) {
                            Ok(()) => {
                                cal.info_order.push(ch.topic.clone());
                                cal.infos.insert(ch.topic.clone(), ci);
                                None
                            }
                            Err(why) => Some(format!("{}; the calibration is ignored", bad(&why))),
                        },
                        Err(e) => Some(bad(&e)),
                    }
                }
                Some(Kind::Tf) => match TfMessage::from_cdr(&raw.data) {
                    Ok(tf) => {
                        cal.tfs.extend(tf.transforms);
                        None
                    }
                    Err(e) => Some(bad(&e)),
                },
                Some(Kind::Map) if cal.map.is_none() => {
                    match RoadMap::from_cdr(&raw.data)
                        .map_err(|e| e.to_string())
                        .and_then(map_data)
                    {
                        Ok(m) => {
                            cal.map = Some(m);
                            None
                        }
                        Err(e) => Some(bad(&e)),
                    }
                }
                _ => None,
            };
            if let Some(detail) = issue {
                reader.issue(LogIssueKind::UndecodableMessage, detail);
            }
        }
        cal
    }

    /// Mount of a camera whose optical frame is `frame`, from the static transforms.
    fn mount_of(cal: &Calibration, frame: &str) -> Option<(f64, f64, f64, f64, f64)> {
        let (p, q) = mount_in_base(&cal.tfs, frame)?;
        let (yaw, pitch) = q.camera_mount_angles();
        let m = (p.x, p.y, p.z, yaw, pitch);
        // A mount that is not finite (a corrupt transform) counts as missing.
        [m.0, m.1, m.2, m.3, m.4]
            .iter()
            .all(|x| x.is_finite())
            .then_some(m)
    }

    fn spec_from_info(name: &str, ci: &CameraInfo) -> CameraSpec {
        let k = ci.to_intrinsics();
        CameraSpec {
            name: name.to_string(),
            width: k.width,
            height: k.height,
            fx: k.fx,
            fy: k.fy,
            cx: k.cx,
            cy: k.cy,
            x: 0.0,
            y: 0.0,
            z: 0.0,
            yaw: 0.0,
            pitch: 0.0,
            // A model redline does not know is reported by `check_distortion`.
            distortion: ci.distortion().unwrap_or_default(),
        }
    }

    /// Records a [`LogIssueKind::LensDistortion`] when camera `name`'s calibration has a
    /// distortion model redline does not know: its images are then used as they are (known
    /// models are undistorted by the preprocess stage, [`CameraSpec::distortion`]).
    fn check_distortion(&mut self, name: &str, topic: &str, ci: &CameraInfo) {
        if let Err(why) = ci.distortion() {
            self.issue(
                LogIssueKind::LensDistortion,
                format!(
                    "camera {name}: {topic} has a {why}; its images are used as ideal pinholes, \
                     not undistorted, which misplaces what the BEV stage projects from this \
                     camera: replay the rectified image topic (image_rect, image_rect_color) \
                     if the log has one"
                ),
            );
        }
    }

    fn set_mount(spec: &mut CameraSpec, m: (f64, f64, f64, f64, f64)) {
        (spec.x, spec.y, spec.z, spec.yaw, spec.pitch) = m;
    }

    /// redline's own layout: `/cam/<name>/camera_info`, `base_link` → `cam_<name>`.
    fn discover_rig(&mut self, cal: &Calibration) -> Result<(), LogError> {
        for topic in &cal.info_order {
            let Some(name) = camera_of_topic(topic, "camera_info") else {
                self.issue(
                    LogIssueKind::UnknownSchema,
                    format!("camera_info on topic {topic} is not /cam/<name>/camera_info and no [sensors] table names it; ignored"),
                );
                continue;
            };
            if self.cameras.len() >= self.limits.max_cameras {
                self.issue(LogIssueKind::OverLimit, format!("{topic} declares camera {name}, one more than the {} cameras allowed (ReadLimits::max_cameras, `max_cameras` in the config's [log] table); it is ignored", self.limits.max_cameras));
                continue;
            }
            let mut spec = Self::spec_from_info(name, &cal.infos[topic]);
            self.check_distortion(name, topic, &cal.infos[topic]);
            let child = format!("cam_{name}");
            match Self::mount_of(cal, &child) {
                Some(m) => Self::set_mount(&mut spec, m),
                None => self.issue(
                    LogIssueKind::MissingTransform,
                    format!("no {BASE_FRAME} -> {child} transform on {}; camera {name} is assumed at the origin looking forward", self.sensors.tf_static_topic()),
                ),
            }
            self.cameras.push(spec);
        }
        if self.cameras.is_empty() {
            return Err(LogError::NoCameras {
                path: self.path.clone(),
                found: self.image_topics(),
            });
        }
        let image_channels: Vec<(u16, usize)> = self
            .channels
            .iter()
            .filter(|(_, c)| kind_of(&c.schema) == Some(Kind::Image))
            .filter_map(|(id, c)| {
                let name = camera_of_topic(&c.topic, "image_raw")?;
                let i = self.cameras.iter().position(|s| s.name == name)?;
                Some((*id, i))
            })
            .collect();
        self.image_cams.extend(image_channels);
        Ok(())
    }

    /// The cameras the `[sensors]` table lists, in its order.
    fn mapped_rig(&mut self, cal: &Calibration) -> Result<(), LogError> {
        let rig = match &self.sensors.calibration {
            Some(p) => Some(Rig::load(p)?),
            None => None,
        };
        let topics = self.sensors.cameras.clone();
        for (i, cam) in topics.iter().enumerate() {
            let channels: Vec<u16> = self
                .channels
                .iter()
                .filter(|(_, c)| c.topic == cam.image)
                .map(|(id, _)| *id)
                .collect();
            if channels.is_empty() {
                return Err(self.mismatch(format!(
                    "camera {} reads images from {}, which the log does not have",
                    cam.name, cam.image
                )));
            }
            if let Some(id) = channels.iter().find(|id| {
                !matches!(
                    kind_of(&self.channels[id].schema),
                    Some(Kind::Image | Kind::CompressedImage | Kind::CompressedVideo)
                )
            }) {
                let schema = self.channels[id].schema.clone();
                return Err(self.mismatch(format!(
                    "camera {} reads images from {}, whose type is {schema}, not sensor_msgs/msg/Image or CompressedImage, foxglove_msgs/msg/CompressedVideo, ffmpeg_image_transport_msgs/msg/FFMPEGPacket or h264_msgs/msg/Packet",
                    cam.name, cam.image
                )));
            }
            let info = cam.camera_info.as_ref().and_then(|t| cal.infos.get(t));
            let from_file = rig.as_ref().and_then(|r| r.spec(&cam.name));
            let mut spec = match (info, &from_file) {
                (Some(ci), _) => {
                    let topic = cam.camera_info.as_deref().unwrap_or_default();
                    self.check_distortion(&cam.name, topic, ci);
                    Self::spec_from_info(&cam.name, ci)
                }
                (None, Some(s)) => s.clone(),
                (None, None) => {
                    let where_ = match &cam.camera_info {
                        Some(t) => format!("the log has no readable camera_info on {t}"),
                        None => "[sensors] names no camera_info topic for it".to_string(),
                    };
                    let file = match &self.sensors.calibration {
                        Some(p) => format!(
                            "the calibration file {} has no [[camera]] named {:?}",
                            p.display(),
                            cam.name
                        ),
                        None => {
                            "no calibration file is given (`calibration` in [sensors])".to_string()
                        }
                    };
                    return Err(self.mismatch(format!(
                        "camera {} has no intrinsics: {where_}, and {file}; add a [[camera]] for it to a calibration file",
                        cam.name
                    )));
                }
            };
            spec.name = cam.name.clone();
            let frame = cam
                .frame_id
                .clone()
                .or_else(|| info.map(|ci| ci.header.frame_id.clone()))
                .filter(|f| !f.is_empty());
            match (frame.as_deref().and_then(|f| Self::mount_of(cal, f)), &from_file) {
                (Some(m), _) => Self::set_mount(&mut spec, m),
                (None, Some(s)) => {
                    Self::set_mount(&mut spec, (s.x, s.y, s.z, s.yaw, s.pitch));
                }
                (None, None) => self.issue(
                    LogIssueKind::MissingTransform,
                    format!(
                        "no static transform chain {BASE_FRAME} -> {} on {} and no calibration file entry; camera {} is assumed at the origin looking forward",
                        frame.as_deref().unwrap_or("(its frame: set frame_id in [[sensors.cameras]])"),
                        self.sensors.tf_static_topic(),
                        cam.name
                    ),
                ),
            }
            self.cameras.push(spec);
            for id in channels {
                self.image_cams.insert(id, i);
            }
        }
        Ok(())
    }
}
