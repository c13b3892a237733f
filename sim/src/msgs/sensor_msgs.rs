//! `sensor_msgs`: camera images (`Image`) and calibrations (`CameraInfo`), with conversions to
//! and from the sim's [`RgbImage`] and [`CameraSpec`].
//!
//! Promises: an image in any encoding of [`PixelEncoding`] (8- and 16-bit RGB, BGR and grey,
//! Bayer mosaics, YUV 4:2:2) converts to an [`RgbImage`] whatever its row padding; any other
//! encoding or an inconsistent layout is an [`ImageIssue`], never a panic or an out-of-bounds
//! read. A calibration written by [`CameraInfo::from_spec`] carries the spec's lens (an ideal
//! pinhole: `plumb_bob` with zero coefficients). Cost: [`Image::encode_rgb`] copies the pixels once (into the writer);
//! decoding copies them once out of the buffer; [`Image::into_rgb`] moves unpadded data.

use super::pixel_encoding::{to_rgb8, PixelEncoding, RawImage};
use super::std_msgs::{Header, HEADER_DEF, TIME_DEF};
use super::ImageIssue;
use crate::cdr::{CdrError, CdrReader, CdrWriter};
use crate::types::RgbImage;
use redline_pipeline::camera::{CameraSpec, Distortion};
use redline_runtime::det_math as dm;

pub(super) const ROI_DEF: (&str, &str) = (
    "sensor_msgs/RegionOfInterest",
    "uint32 x_offset\nuint32 y_offset\nuint32 height\nuint32 width\nbool do_rectify\n",
);

/// `sensor_msgs/msg/Image`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Stamp and camera frame.
    pub header: Header,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// Pixel encoding, e.g. `rgb8`.
    pub encoding: String,
    /// 1 when multi-byte pixel values are big endian.
    pub is_bigendian: u8,
    /// Row length, bytes.
    pub step: u32,
    /// `step * height` bytes.
    pub data: Vec<u8>,
}

ros_message!(
    Image,
    "sensor_msgs/msg/Image",
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\n\
     uint32 step\nuint8[] data\n",
    [HEADER_DEF, TIME_DEF]
);

impl Image {
    /// An `rgb8` image message holding a copy of `img`.
    pub fn from_rgb(img: &RgbImage, stamp_ns: u64, frame_id: &str) -> Image {
        Image {
            header: Header::new(stamp_ns, frame_id),
            height: img.height,
            width: img.width,
            encoding: "rgb8".to_string(),
            is_bigendian: 0,
            step: img.width.saturating_mul(3),
            data: img.data.clone(),
        }
    }

    /// Encodes `img` as an `rgb8` image message without building an [`Image`] (no copy
    /// besides the one into `w`).
    pub fn encode_rgb(w: &mut CdrWriter, header: &Header, img: &RgbImage) {
        header.encode(w);
        w.u32(img.height);
        w.u32(img.width);
        w.string("rgb8");
        w.u8(0);
        w.u32(img.width.saturating_mul(3));
        w.bytes(&img.data);
    }

    /// Bytes per pixel of the encodings redline converts (see [`PixelEncoding`]); `None` for
    /// any other.
    pub fn bytes_per_pixel(encoding: &str) -> Option<usize> {
        PixelEncoding::parse(encoding).map(PixelEncoding::bytes_per_pixel)
    }

    /// Converts the message to an [`RgbImage`] as `cv_bridge` converts it to `rgb8`: rows
    /// with padding are compacted, channels reordered, alpha dropped, grey replicated, 16-bit
    /// samples scaled, Bayer mosaics demosaiced and YUV 4:2:2 and 4:2:0 converted (see
    /// [`PixelEncoding`] for the encodings and the formulas).
    pub fn to_rgb(&self) -> Result<RgbImage, ImageIssue> {
        let enc = self.check_layout()?;
        let data = to_rgb8(
            enc,
            &RawImage {
                width: self.width as usize,
                height: self.height as usize,
                step: self.step as usize,
                big_endian: self.is_bigendian != 0,
                data: &self.data,
            },
        )?;
        Ok(RgbImage {
            width: self.width,
            height: self.height,
            data,
        })
    }

    /// Like [`Image::to_rgb`], consuming the message so that unpadded `rgb8` data is moved,
    /// not copied.
    pub fn into_rgb(self) -> Result<RgbImage, ImageIssue> {
        self.check_layout()?;
        if self.encoding == "rgb8" && self.step == self.width * 3 {
            let mut data = self.data;
            data.truncate(self.width as usize * 3 * self.height as usize);
            Ok(RgbImage {
                width: self.width,
                height: self.height,
                data,
            })
        } else {
            self.to_rgb()
        }
    }

    /// Checks the encoding and that `step` and the data cover every row.
    fn check_layout(&self) -> Result<PixelEncoding, ImageIssue> {
        let Some(enc) = PixelEncoding::parse(&self.encoding) else {
            return Err(ImageIssue::WrongEncoding {
                got: self.encoding.clone(),
            });
        };
        let bad = ImageIssue::BadLayout {
            width: self.width,
            height: self.height,
            step: self.step,
            len: self.data.len(),
        };
        let row = (self.width as u64) * enc.bytes_per_pixel() as u64;
        let need = (self.step as u64) * enc.data_rows(self.height as u64);
        if (self.step as u64) < row || (self.data.len() as u64) < need {
            return Err(bad);
        }
        Ok(enc)
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.u32(self.height);
        w.u32(self.width);
        w.string(&self.encoding);
        w.u8(self.is_bigendian);
        w.u32(self.step);
        w.bytes(&self.data);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Image {
            header: Header::decode(r)?,
            height: r.u32()?,
            width: r.u32()?,
            encoding: r.string()?.to_string(),
            is_bigendian: r.u8()?,
            step: r.u32()?,
            data: r.byte_seq("image data")?.to_vec(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// sensor_msgs/msg/CompressedImage

/// `sensor_msgs/msg/CompressedImage`: a JPEG or PNG stream (decoded by
/// [`crate::image_decode`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompressedImage {
    /// Stamp and camera frame.
    pub header: Header,
    /// Format as the publisher wrote it, e.g. `jpeg` or `bgr8; jpeg compressed bgr8`.
    pub format: String,
    /// The compressed bytes.
    pub data: Vec<u8>,
}

ros_message!(
    CompressedImage,
    "sensor_msgs/msg/CompressedImage",
    "std_msgs/Header header\nstring format\nuint8[] data\n",
    [HEADER_DEF, TIME_DEF]
);

impl CompressedImage {
    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.string(&self.format);
        w.bytes(&self.data);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(CompressedImage {
            header: Header::decode(r)?,
            format: r.string()?.to_string(),
            data: r.byte_seq("compressed image data")?.to_vec(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// sensor_msgs/msg/CameraInfo

/// `sensor_msgs/RegionOfInterest`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionOfInterest {
    /// Left column.
    pub x_offset: u32,
    /// Top row.
    pub y_offset: u32,
    /// Rows (0 = full image).
    pub height: u32,
    /// Columns (0 = full image).
    pub width: u32,
    /// Whether to rectify the region.
    pub do_rectify: bool,
}

/// `sensor_msgs/msg/CameraInfo`.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraInfo {
    /// Stamp and camera (optical) frame.
    pub header: Header,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// Distortion model, `plumb_bob` for ours (all coefficients zero).
    pub distortion_model: String,
    /// Distortion coefficients.
    pub d: Vec<f64>,
    /// Intrinsic matrix, row major.
    pub k: [f64; 9],
    /// Rectification matrix, row major.
    pub r: [f64; 9],
    /// Projection matrix 3x4, row major.
    pub p: [f64; 12],
    /// Horizontal binning.
    pub binning_x: u32,
    /// Vertical binning.
    pub binning_y: u32,
    /// Region of interest.
    pub roi: RegionOfInterest,
}

/// Pinhole intrinsics taken from a [`CameraInfo`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraIntrinsics {
    /// Width, px.
    pub width: u32,
    /// Height, px.
    pub height: u32,
    /// Focal length, px.
    pub fx: f64,
    /// Focal length, px.
    pub fy: f64,
    /// Principal point, px.
    pub cx: f64,
    /// Principal point, px.
    pub cy: f64,
}

ros_message!(
    CameraInfo,
    "sensor_msgs/msg/CameraInfo",
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring distortion_model\nfloat64[] d\n\
     float64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\nuint32 binning_y\n\
     sensor_msgs/RegionOfInterest roi\n",
    [HEADER_DEF, TIME_DEF, ROI_DEF]
);

impl CameraInfo {
    /// The calibration of `spec`'s camera (its lens in `camera_info` form, an ideal pinhole
    /// as `plumb_bob` with zero coefficients), frame `cam_<name>`, stamp 0.
    pub fn from_spec(spec: &CameraSpec) -> CameraInfo {
        let (fx, fy, cx, cy) = (spec.fx, spec.fy, spec.cx, spec.cy);
        let (model, d) = spec.distortion.ros_model();
        CameraInfo {
            header: Header::new(0, &format!("cam_{}", spec.name)),
            height: spec.height,
            width: spec.width,
            distortion_model: model.to_string(),
            d,
            k: [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
            r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p: [fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0],
            binning_x: 0,
            binning_y: 0,
            roi: RegionOfInterest::default(),
        }
    }

    /// Size, focal lengths and principal point of the images the camera publishes: `k` and
    /// the size are the sensor's full resolution, so a region of interest (`roi`, all zeros:
    /// the whole sensor) crops them and binning divides them, as image_geometry's
    /// `PinholeCameraModel` reads a `CameraInfo`: size `roi / binning`, `fx / binning_x`,
    /// `cx' = (cx − x_offset) / binning_x` (same in y; binning 0 means 1). Without binning
    /// or a region, exactly `k` and the size.
    pub fn to_intrinsics(&self) -> CameraIntrinsics {
        let (bx, by) = (self.binning_x.max(1), self.binning_y.max(1));
        let roi = &self.roi;
        let (w, h, ox, oy) = if roi.width > 0 && roi.height > 0 {
            (roi.width, roi.height, roi.x_offset, roi.y_offset)
        } else {
            (self.width, self.height, 0, 0)
        };
        CameraIntrinsics {
            width: w / bx,
            height: h / by,
            fx: self.k[0] / f64::from(bx),
            fy: self.k[4] / f64::from(by),
            cx: (self.k[2] - f64::from(ox)) / f64::from(bx),
            cy: (self.k[5] - f64::from(oy)) / f64::from(by),
        }
    }

    /// The lens distortion this calibration declares (see [`Distortion::from_ros`]); `Err`
    /// names a model redline does not know.
    pub fn distortion(&self) -> Result<Distortion, String> {
        Distortion::from_ros(&self.distortion_model, &self.d)
    }

    /// How far lens distortion moves pixels at the image border, px: the largest distance,
    /// over points along the four edges, between where the pinhole model (`k`) puts a ray and
    /// where the distortion model puts it. `Ok(None)` for an ideal pinhole; `Err` (from
    /// [`CameraInfo::distortion`]) for a model redline does not know.
    pub fn border_distortion_px(&self) -> Result<Option<f64>, String> {
        let model = match self.distortion()? {
            Distortion::None => return Ok(None),
            m => m,
        };
        let k = self.to_intrinsics();
        let (w, h) = (k.width as f64, k.height as f64);
        let mut worst: f64 = 0.0;
        const STEPS: usize = 32;
        for i in 0..=STEPS {
            let f = i as f64 / STEPS as f64;
            for (u, v) in [(f * w, 0.0), (f * w, h), (0.0, f * h), (w, f * h)] {
                let (x, y) = ((u - k.cx) / k.fx, (v - k.cy) / k.fy);
                let (xd, yd) = model.distort(x, y);
                worst = worst.max(dm::hypot((xd - x) * k.fx, (yd - y) * k.fy));
            }
        }
        // `max` skips NaN (a model that diverges there): worst is finite or infinite.
        Ok(Some(worst))
    }

    /// Appends the message to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.header.encode(w);
        w.u32(self.height);
        w.u32(self.width);
        w.string(&self.distortion_model);
        w.seq_len(self.d.len());
        w.f64_array(&self.d);
        w.f64_array(&self.k);
        w.f64_array(&self.r);
        w.f64_array(&self.p);
        w.u32(self.binning_x);
        w.u32(self.binning_y);
        w.u32(self.roi.x_offset);
        w.u32(self.roi.y_offset);
        w.u32(self.roi.height);
        w.u32(self.roi.width);
        w.bool(self.roi.do_rectify);
    }

    /// Reads the message.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(CameraInfo {
            header: Header::decode(r)?,
            height: r.u32()?,
            width: r.u32()?,
            distortion_model: r.string()?.to_string(),
            d: r.f64_seq("distortion coefficients")?,
            k: r.f64_array()?,
            r: r.f64_array()?,
            p: r.f64_array()?,
            binning_x: r.u32()?,
            binning_y: r.u32()?,
            roi: RegionOfInterest {
                x_offset: r.u32()?,
                y_offset: r.u32()?,
                height: r.u32()?,
                width: r.u32()?,
                do_rectify: r.bool()?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::test_support::{f, header, round_trip};
    use crate::msgs::RosMessage;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn image_round_trips(h in header(), w in 0u32..7, ht in 0u32..5, enc in "[a-z0-9]{0,7}",
                             be in any::<u8>(), extra in 0u32..3, seed in any::<u8>()) {
            let step = w * 3 + extra;
            let data = (0..step * ht).map(|i| (i as u8).wrapping_add(seed)).collect();
            round_trip(&Image { header: h, height: ht, width: w, encoding: enc, is_bigendian: be, step, data });
        }

        #[test]
        fn camera_info_round_trips(h in header(), d in proptest::collection::vec(f(), 0..6),
                                   k in proptest::array::uniform9(f()), p0 in f(), bx in any::<u32>(),
                                   rect in any::<bool>(), model in "[a-z_]{0,11}") {
            let mut p = [0.0; 12];
            p[0] = p0;
            round_trip(&CameraInfo { header: h, height: 3, width: 5, distortion_model: model, d, k,
                r: k, p, binning_x: bx, binning_y: 1,
                roi: RegionOfInterest { x_offset: 1, y_offset: 2, height: 3, width: 4, do_rectify: rect } });
        }
    }

    #[test]
    fn image_converts_to_rgb() {
        let img = RgbImage {
            width: 2,
            height: 2,
            data: (0..12).collect(),
        };
        let mut msg = Image::from_rgb(&img, 5, "cam_front");
        assert_eq!(msg.to_rgb().unwrap(), img);
        let mut w = CdrWriter::new();
        Image::encode_rgb(&mut w, &Header::new(5, "cam_front"), &img);
        assert_eq!(w.finish(), msg.to_cdr());
        // padded rows
        let padded = Image {
            step: 8,
            data: vec![0, 1, 2, 3, 4, 5, 99, 99, 6, 7, 8, 9, 10, 11, 99, 99],
            ..msg.clone()
        };
        assert_eq!(padded.clone().into_rgb().unwrap(), img);
        // other 8-bit encodings convert to the same RGB
        let bgr = Image {
            encoding: "bgr8".into(),
            data: img
                .data
                .chunks(3)
                .flat_map(|p| [p[2], p[1], p[0]])
                .collect(),
            ..msg.clone()
        };
        assert_eq!(bgr.into_rgb().unwrap(), img);
        let bgra = Image {
            encoding: "bgra8".into(),
            step: 8,
            data: img
                .data
                .chunks(3)
                .flat_map(|p| [p[2], p[1], p[0], 255])
                .collect(),
            ..msg.clone()
        };
        assert_eq!(bgra.to_rgb().unwrap(), img);
        let mono = Image {
            encoding: "mono8".into(),
            step: 2,
            data: vec![1, 2, 3, 4],
            ..msg.clone()
        };
        assert_eq!(
            mono.to_rgb().unwrap().data,
            vec![1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
        );
        msg.encoding = "16UC1".into();
        assert_eq!(
            msg.to_rgb(),
            Err(ImageIssue::WrongEncoding {
                got: "16UC1".into()
            })
        );
        msg.encoding = "rgb8".into();
        msg.data.truncate(5);
        assert!(matches!(msg.to_rgb(), Err(ImageIssue::BadLayout { .. })));
    }

    #[test]
    fn border_distortion_is_measured_per_model() {
        let mut ci = CameraInfo::from_spec(&CameraSpec {
            name: "front".into(),
            width: 1920,
            height: 1080,
            fx: 1000.0,
            fy: 1000.0,
            cx: 960.0,
            cy: 540.0,
            x: 0.0,
            y: 0.0,
            z: 0.0,
            yaw: 0.0,
            pitch: 0.0,
            distortion: Default::default(),
        });
        assert_eq!(ci.border_distortion_px(), Ok(None), "an ideal pinhole");
        // Barrel k1 = -0.3: worst at the corner (x, y) = (-0.96, -0.54), r² = 1.2132, which
        // moves by (1 - (1 - 0.3 r²)) · r · f = 0.36396 · 1.10145 · 1000 px.
        ci.d = vec![-0.3, 0.0, 0.0, 0.0, 0.0];
        let px = ci.border_distortion_px().unwrap().unwrap();
        assert!((px - 0.36396 * 1101.45).abs() < 0.5, "{px}");
        // A fisheye with zero coefficients still maps r to atan(r): 1.10145 - 0.83347 at f.
        ci.distortion_model = "equidistant".into();
        ci.d = vec![0.0; 4];
        let px = ci.border_distortion_px().unwrap().unwrap();
        assert!(
            (px - (1.10145 - dm::atan(1.10145f64)) * 1000.0).abs() < 0.5,
            "{px}"
        );
        // Unknown models: nothing to say with zero coefficients, unknown size with others.
        ci.distortion_model = "kannala_brandt".into();
        assert_eq!(ci.border_distortion_px(), Ok(None));
        ci.d = vec![0.1];
        assert!(ci.border_distortion_px().is_err());
    }

    #[test]
    fn camera_info_from_spec_is_an_ideal_pinhole() {
        let spec = CameraSpec {
            name: "front".into(),
            width: 320,
            height: 192,
            fx: 200.0,
            fy: 201.0,
            cx: 160.0,
            cy: 96.5,
            x: 1.5,
            y: 0.0,
            z: 1.6,
            yaw: 0.0,
            pitch: 0.05,
            distortion: Default::default(),
        };
        let ci = CameraInfo::from_spec(&spec);
        assert_eq!(ci.header.frame_id, "cam_front");
        assert_eq!(
            ci.to_intrinsics(),
            CameraIntrinsics {
                width: 320,
                height: 192,
                fx: 200.0,
                fy: 201.0,
                cx: 160.0,
                cy: 96.5
            }
        );
        assert_eq!(
            (ci.distortion_model.as_str(), &ci.d[..]),
            ("plumb_bob", &[0.0; 5][..])
        );
        // A lens goes into the calibration and back.
        let lens = Distortion::Polynomial {
            k: [-0.28, 0.07, 0.01, 0.0, 0.0, 0.0],
            p: [0.001, -0.002],
        };
        let ci = CameraInfo::from_spec(&CameraSpec {
            distortion: lens.clone(),
            ..spec
        });
        assert_eq!(ci.distortion(), Ok(lens));
    }
}
