//! Camera images in the recording (optional: `redline replay --record-images`).
//!
//! Contract: images are the frame's *input* — what each camera delivered for frame k, read
//! from an [`ImageSource`] by the writer thread when it writes frame k — not a graph output,
//! so recording them adds nothing to the hot path (no copy into the ring). Each present
//! image is JPEG-encoded (quality [`JPEG_QUALITY`], pure-Rust `jpeg-encoder`) on the writer
//! thread and written as a `foxglove.CompressedImage` on `/camera/<name>/image/compressed`,
//! frame id `cam_<name>`. A camera absent from the frame writes nothing; a frame the source
//! no longer holds writes no images (counted in [`ImageStats::frames_missing`]). With every
//! frame's images go the cameras' calibrations ([`calibration`], on
//! `/camera/<name>/calibration`) and mounts ([`mount`], on [`MOUNTS_TOPIC`]) when the source
//! knows them ([`ImageSource::specs`]): a few hundred bytes per camera, repeated so that a
//! player that seeks finds them.
//!
//! Cost: encoding is the writer thread's largest job (six 256 × 128 cameras: a few ms per
//! frame); when it falls behind, the ring fills and frames are dropped from the recording
//! (counted), never waited for.

use std::sync::Arc;

use foxglove::messages::{CameraCalibration, FrameTransform, Quaternion, Timestamp, Vector3};

use redline_pipeline::camera::CameraSpec;
use redline_pipeline::sensors::FrameSource;

/// JPEG quality of recorded images.
pub const JPEG_QUALITY: u8 = 85;

/// Where the writer thread finds a frame's camera images (rgb8, rig order).
pub trait ImageSource: Send + std::fmt::Debug {
    /// Camera names, rig order.
    fn cameras(&self) -> Vec<String>;
    /// Width and height of every image, px.
    fn size(&self) -> (usize, usize);
    /// The cameras' calibrations and mounts, rig order (written beside the images so that
    /// Foxglove's Image panel can draw the 3D scene over them); empty when unknown.
    fn specs(&self) -> Vec<CameraSpec> {
        Vec::new()
    }
    /// Calls `f(camera, rgb8)` for every image camera `camera` delivered for frame `frame`;
    /// false when the source no longer holds the frame.
    fn images(&self, frame: u64, f: &mut dyn FnMut(usize, &[u8])) -> bool;
}

/// The replay's frame source as an [`ImageSource`]. Only a source held in memory: a
/// streaming one ([`FrameSource::streaming`]) frees its windows while the graph runs, so it
/// is never read from the writer thread (every frame then counts as missing).
#[derive(Debug)]
pub struct FeedImages(pub Arc<dyn FrameSource>);

impl ImageSource for FeedImages {
    fn cameras(&self) -> Vec<String> {
        self.0.cameras().iter().map(|c| c.name.clone()).collect()
    }

    fn size(&self) -> (usize, usize) {
        self.0.image_size()
    }

    fn specs(&self) -> Vec<CameraSpec> {
        self.0.cameras().to_vec()
    }

    fn images(&self, frame: u64, f: &mut dyn FnMut(usize, &[u8])) -> bool {
        if self.0.streaming() {
            return false;
        }
        let Some(fr) = usize::try_from(frame).ok().and_then(|k| self.0.frame(k)) else {
            return false;
        };
        let (w, h) = self.0.image_size();
        let len = w * h * 3;
        for (c, img) in fr.images.chunks_exact(len).enumerate() {
            if c < 32 && fr.present & (1 << c) != 0 {
                f(c, img);
            }
        }
        true
    }
}

/// Images written and frames whose images were no longer available.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImageStats {
    /// Images written.
    pub images_written: u64,
    /// Frames whose images the source no longer held.
    pub frames_missing: u64,
    /// Images that could not be encoded (a size JPEG cannot hold, over 65535 px).
    pub encode_failures: u64,
}

/// The topic of camera `name`'s images.
pub fn topic(name: &str) -> String {
    format!("/camera/{name}/image/compressed")
}

/// The topic of camera `name`'s calibration (`foxglove.CameraCalibration`).
pub fn calibration_topic(name: &str) -> String {
    format!("/camera/{name}/calibration")
}

/// The topic of the cameras' mounts (`foxglove.FrameTransform`, `base_link` → `cam_<name>`).
pub const MOUNTS_TOPIC: &str = "/tf_static";

/// Camera `spec`'s calibration as Foxglove draws with it: `K` and `P` from its intrinsics
/// (redline's convention, as in the `camera_info` it writes), `R` identity, its lens
/// (`equidistant` under Foxglove's name for the same model, `kannala_brandt`).
pub fn calibration(spec: &CameraSpec, t: Timestamp) -> CameraCalibration {
    let (fx, fy, cx, cy) = (spec.fx, spec.fy, spec.cx, spec.cy);
    let (model, d) = spec.distortion.ros_model();
    CameraCalibration {
        timestamp: Some(t),
        frame_id: format!("cam_{}", spec.name),
        width: spec.width,
        height: spec.height,
        distortion_model: if model == "equidistant" {
            "kannala_brandt"
        } else {
            model
        }
        .to_string(),
        d,
        k: vec![fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
        r: vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        p: vec![fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0],
    }
}

/// Camera `spec`'s mount: its optical frame `cam_<name>` in `base_link`.
pub fn mount(spec: &CameraSpec, t: Timestamp) -> FrameTransform {
    let [x, y, z, w] = spec.optical_rotation();
    FrameTransform {
        timestamp: Some(t),
        parent_frame_id: "base_link".to_string(),
        child_frame_id: format!("cam_{}", spec.name),
        translation: Some(Vector3 {
            x: spec.x,
            y: spec.y,
            z: spec.z,
        }),
        rotation: Some(Quaternion { x, y, z, w }),
    }
}

/// JPEG-encodes an rgb8 image into `out` (cleared first).
pub fn encode_jpeg(rgb: &[u8], w: usize, h: usize, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    let (w, h) = (
        u16::try_from(w).map_err(|_| format!("width {w} over 65535"))?,
        u16::try_from(h).map_err(|_| format!("height {h} over 65535"))?,
    );
    jpeg_encoder::Encoder::new(&mut *out, JPEG_QUALITY)
        .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_encodes_as_a_jpeg() {
        let (w, h) = (64, 32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        encode_jpeg(&rgb, w, h, &mut out).unwrap();
        assert_eq!(&out[..2], &[0xff, 0xd8], "SOI marker");
        assert_eq!(&out[out.len() - 2..], &[0xff, 0xd9], "EOI marker");
        assert!(encode_jpeg(&rgb, 70_000, 1, &mut out).is_err());
    }
}
