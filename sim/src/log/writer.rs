//! [`LogWriter`]: writes a sensor log in the format the parent module's docs specify.
//!
//! Promises: identical input gives a byte-identical file on any machine (single-threaded zstd,
//! and [`finish`](LogWriter::finish) rewrites the summary in canonical order, see `summary`);
//! camera_info and `/tf_static` are written once at t = 0; image data lengths are checked
//! before writing. Cost: one reusable encode buffer, a 1 MiB `BufWriter`, the mcap crate's
//! in-memory chunk; allocates per channel and per message (I/O side, not a real-time stage).
//! Never panics on caller input: a bad camera index or image size is a [`LogError`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use mcap::records::MessageHeader;
use mcap::{Compression, WriteOptions};

use super::summary::canonicalize_summary;
use super::{
    camera_info_topic, camera_of_topic, image_topic, mcap_err, LogError, LogOptions, LogStats,
    TOPIC_GROUND_TRUTH, TOPIC_MAP, TOPIC_ODOM, TOPIC_TF_STATIC,
};
use crate::cdr::CdrWriter;
use crate::msgs::{
    CameraInfo, GroundTruthMsg, Header, Image, Odometry, RoadMap, RosMessage, TfMessage,
};
use crate::types::{EgoState, GroundTruth, RgbImage};
use redline_pipeline::camera::CameraSpec;

#[derive(Debug)]
struct OutChannel {
    id: u16,
    topic: String,
    count: u64,
    sequence: u32,
}

#[derive(Debug, Clone, Copy)]
struct CamChannels {
    image: usize,
    info: usize,
}

/// Writes a sensor log. Drop without [`LogWriter::finish`] still finishes the file but
/// swallows errors: call `finish`.
pub struct LogWriter {
    path: PathBuf,
    mcap: mcap::Writer<BufWriter<File>>,
    channels: Vec<OutChannel>,
    cams: Vec<CamChannels>,
    odom: usize,
    tf: usize,
    gt: usize,
    map: usize,
    buf: Vec<u8>,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("path", &self.path)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl LogWriter {
    /// Creates the file, registers schemas and channels, and writes each camera's
    /// `camera_info` and the `/tf_static` mounts at t = 0.
    pub fn create(path: &Path, cameras: &[CameraSpec]) -> Result<LogWriter, LogError> {
        Self::create_with(path, cameras, LogOptions::default())
    }

    /// [`LogWriter::create`] with explicit chunk size and compression level.
    pub fn create_with(
        path: &Path,
        cameras: &[CameraSpec],
        options: LogOptions,
    ) -> Result<LogWriter, LogError> {
        let io = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io)?;
        let opts = WriteOptions::new()
            .profile("ros2")
            .library("redline-sim")
            .compression(Some(Compression::Zstd))
            .compression_level(options.zstd_level)
            .compression_threads(0)
            .chunk_size(Some(options.chunk_size.max(1)));
        let mcap = opts
            .create(BufWriter::with_capacity(1 << 20, file))
            .map_err(|e| mcap_err(path, e))?;
        let mut w = LogWriter {
            path: path.to_path_buf(),
            mcap,
            channels: Vec::new(),
            cams: Vec::new(),
            odom: 0,
            tf: 0,
            gt: 0,
            map: 0,
            buf: Vec::new(),
        };
        let image_schema = w.schema::<Image>()?;
        let info_schema = w.schema::<CameraInfo>()?;
        for c in cameras {
            let image = w.channel(image_schema, &image_topic(&c.name))?;
            let info = w.channel(info_schema, &camera_info_topic(&c.name))?;
            w.cams.push(CamChannels { image, info });
        }
        let s = w.schema::<Odometry>()?;
        w.odom = w.channel(s, TOPIC_ODOM)?;
        let s = w.schema::<TfMessage>()?;
        w.tf = w.channel(s, TOPIC_TF_STATIC)?;
        let s = w.schema::<GroundTruthMsg>()?;
        w.gt = w.channel(s, TOPIC_GROUND_TRUTH)?;
        let s = w.schema::<RoadMap>()?;
        w.map = w.channel(s, TOPIC_MAP)?;

        for (i, c) in cameras.iter().enumerate() {
            let ch = w.cams[i].info;
            w.put(ch, 0, &CameraInfo::from_spec(c))?;
        }
        let tf = w.tf;
        w.put(tf, 0, &TfMessage::camera_mounts(cameras))?;
        Ok(w)
    }

    fn schema<M: RosMessage>(&mut self) -> Result<u16, LogError> {
        self.mcap
            .add_schema(M::NAME, "ros2msg", M::schema().as_bytes())
            .map_err(|e| mcap_err(&self.path, e))
    }

    fn channel(&mut self, schema: u16, topic: &str) -> Result<usize, LogError> {
        let id = self
            .mcap
            .add_channel(schema, topic, "cdr", &BTreeMap::new())
            .map_err(|e| mcap_err(&self.path, e))?;
        self.channels.push(OutChannel {
            id,
            topic: topic.to_string(),
            count: 0,
            sequence: 0,
        });
        Ok(self.channels.len() - 1)
    }

    fn put<M: RosMessage>(&mut self, ch: usize, log_time: u64, m: &M) -> Result<(), LogError> {
        let mut w = CdrWriter::with_buffer(std::mem::take(&mut self.buf));
        m.write(&mut w);
        self.put_encoded(ch, log_time, w, M::NAME)
    }

    fn put_encoded(
        &mut self,
        ch: usize,
        log_time: u64,
        w: CdrWriter,
        what: &'static str,
    ) -> Result<(), LogError> {
        let data = w
            .try_finish()
            .map_err(|source| LogError::Encode { what, source })?;
        let c = &mut self.channels[ch];
        let header = MessageHeader {
            channel_id: c.id,
            sequence: c.sequence,
            log_time,
            publish_time: log_time,
        };
        c.sequence = c.sequence.wrapping_add(1);
        c.count += 1;
        let res = self.mcap.write_to_known_channel(&header, &data);
        self.buf = data;
        res.map_err(|e| mcap_err(&self.path, e))
    }

    /// Writes the road map at t = 0 (call once; readers use the first map message).
    pub fn write_map(
        &mut self,
        lanes: u32,
        lane_width: f64,
        centre: &[(f64, f64)],
    ) -> Result<(), LogError> {
        if centre.is_empty() {
            return Err(LogError::EmptyMap(0));
        }
        let m = RoadMap {
            header: Header::new(0, "map"),
            lanes,
            lane_width,
            centre_x: centre.iter().map(|p| p.0).collect(),
            centre_y: centre.iter().map(|p| p.1).collect(),
        };
        let ch = self.map;
        self.put(ch, 0, &m)?;
        Ok(())
    }

    fn cam(&self, cam: usize) -> Result<CamChannels, LogError> {
        self.cams.get(cam).copied().ok_or(LogError::NoSuchCamera {
            cam,
            cameras: self.cams.len(),
        })
    }

    /// Writes one `rgb8` image of camera `cam` (rig order) taken at `stamp_ns`. The image may
    /// differ in size from the camera's calibration (readers then report
    /// [`ImageIssue::WrongSize`](crate::msgs::ImageIssue::WrongSize)) but its data must be `width * height * 3` bytes.
    pub fn write_image(
        &mut self,
        cam: usize,
        stamp_ns: u64,
        img: &RgbImage,
    ) -> Result<(), LogError> {
        let ch = self.cam(cam)?.image;
        if img.data.len() as u64 != img.width as u64 * img.height as u64 * 3 {
            return Err(LogError::BadImage {
                width: img.width,
                height: img.height,
                len: img.data.len(),
            });
        }
        let frame = format!("cam_{}", self.camera_name(cam));
        let mut w = CdrWriter::with_buffer(std::mem::take(&mut self.buf));
        Image::encode_rgb(&mut w, &Header::new(stamp_ns, &frame), img);
        self.put_encoded(ch, stamp_ns, w, Image::SCHEMA_NAME)
    }

    fn camera_name(&self, cam: usize) -> &str {
        let t = &self.channels[self.cams[cam].image].topic;
        camera_of_topic(t, "image_raw").unwrap_or("")
    }

    /// Writes an arbitrary image message on camera `cam`'s topic with an explicit log time:
    /// for fault injection (late images, other encodings, corrupt layouts).
    pub fn write_raw_image(
        &mut self,
        cam: usize,
        log_time_ns: u64,
        msg: &Image,
    ) -> Result<(), LogError> {
        let ch = self.cam(cam)?.image;
        self.put(ch, log_time_ns, msg)
    }

    /// Writes the ego odometry at its stamp.
    pub fn write_odometry(&mut self, ego: &EgoState) -> Result<(), LogError> {
        let ch = self.odom;
        self.put(ch, ego.stamp_ns, &Odometry::from_ego(ego))
    }

    /// Writes ground truth at its stamp.
    pub fn write_ground_truth(&mut self, gt: &GroundTruth) -> Result<(), LogError> {
        let ch = self.gt;
        self.put(ch, gt.stamp_ns, &GroundTruthMsg::from_gt(gt))
    }

    /// Flushes the last chunk, writes the summary and footer, and reports what was written.
    pub fn finish(mut self) -> Result<LogStats, LogError> {
        self.mcap.finish().map_err(|e| mcap_err(&self.path, e))?;
        let path = self.path.clone();
        let per_topic: Vec<(String, u64)> = self
            .channels
            .iter()
            .map(|c| (c.topic.clone(), c.count))
            .collect();
        let messages = per_topic.iter().map(|p| p.1).sum();
        let mut out = self.mcap.into_inner();
        out.flush().map_err(|source| LogError::Io {
            path: path.clone(),
            source,
        })?;
        let mut file = out.into_inner().map_err(|e| LogError::Io {
            path: path.clone(),
            source: e.into_error(),
        })?;
        canonicalize_summary(&mut file).map_err(|source| LogError::Io {
            path: path.clone(),
            source,
        })?;
        let bytes = file
            .metadata()
            .map_err(|source| LogError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        Ok(LogStats {
            messages,
            bytes,
            per_topic,
        })
    }
}
