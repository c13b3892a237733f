//! The network's configuration and the constants of its layer widths.
//!
//! Contract: [`NetConfig`] says everything that shapes a network (image size, channels,
//! classes, seed, optional trained layers) and [`NetConfig::validate`] rejects unusable
//! values with a reason; [`ActQParams`] / [`HeadQParams`] hold the activation quantization
//! a calibration produced. The seed stream ids here are part of the model: changing one
//! changes every seeded weight.
//!
//! Cost: plain data; nothing here allocates except cloning a config. Never: no I/O, no
//! global state.

use crate::conv::{Conv2d, ConvShape, ModelError};
use crate::quant::QParams;
use std::sync::Arc;

/// Input channels of the backbone (RGB).
pub const IMAGE_CHANNELS: usize = 3;
/// Box regression channels of the detection head: `dx, dy, log_length, log_width,
/// sin_yaw, cos_yaw`.
pub const REG_CHANNELS: usize = 6;
/// Hidden channels of the detection head.
pub const DET_HIDDEN: usize = 32;
/// Hidden channels of the segmentation head.
pub const SEG_HIDDEN: usize = 16;
/// Channels of the backbone's intermediate activations.
pub const BACKBONE_HIDDEN: [usize; 2] = [16, 32];

/// Quantized layers loaded from a calibrated weights file ([`crate::weights`]): when
/// [`NetConfig::trained`] holds them, [`Backbone::new`](super::Backbone::new), [`DetHead::new`](super::DetHead::new) and
/// [`SegHead::new`](super::SegHead::new) use these layers instead of the seeded ones.
#[derive(Clone, Debug)]
pub struct TrainedLayers {
    /// The three backbone layers, first to last.
    pub backbone: Vec<Conv2d>,
    /// Detection head: hidden, heatmap, regression.
    pub det: Vec<Conv2d>,
    /// Segmentation head: hidden, logits.
    pub seg: Vec<Conv2d>,
}

/// Configuration of the reference network.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Camera image height fed to the backbone (default 64).
    pub in_h: usize,
    /// Camera image width fed to the backbone (default 128).
    pub in_w: usize,
    /// Backbone output channels (default 64).
    pub feat_c: usize,
    /// BEV feature channels; must equal `feat_c` (default 64).
    pub bev_c: usize,
    /// Detection classes (heatmap channels, default 3).
    pub classes: usize,
    /// Segmentation classes (default 3: other, drivable, lane marking).
    pub seg_classes: usize,
    /// Seed of every weight and calibration stream (ignored when `trained` is set).
    pub seed: u64,
    /// Calibrated INT8 layers to use instead of the seeded ones (default `None`). Set it from
    /// [`crate::weights::QuantizedNetwork::net_config`], which also sets the shape fields
    /// to the file's.
    pub trained: Option<Arc<TrainedLayers>>,
}

impl PartialEq for NetConfig {
    /// Field by field; trained layers compare by identity (the same loaded file).
    fn eq(&self, o: &Self) -> bool {
        self.in_h == o.in_h
            && self.in_w == o.in_w
            && self.feat_c == o.feat_c
            && self.bev_c == o.bev_c
            && self.classes == o.classes
            && self.seg_classes == o.seg_classes
            && self.seed == o.seed
            && match (&self.trained, &o.trained) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            in_h: 64,
            in_w: 128,
            feat_c: 64,
            bev_c: 64,
            classes: 3,
            seg_classes: 3,
            seed: 0x5EED_2ED1_14E0,
            trained: None,
        }
    }
}

impl NetConfig {
    /// Checks the configuration: image sides in `1..=4096`, `feat_c` in `1..=1024`,
    /// `bev_c == feat_c`, `classes` in `1..=64`, `seg_classes` in `1..=255`.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |reason: String| Err(ModelError::InvalidConfig { reason });
        if !(1..=4096).contains(&self.in_h) || !(1..=4096).contains(&self.in_w) {
            return bad(format!(
                "image {}x{}: in_h and in_w must be in 1..=4096",
                self.in_h, self.in_w
            ));
        }
        if !(1..=1024).contains(&self.feat_c) {
            return bad(format!("feat_c = {}: must be in 1..=1024", self.feat_c));
        }
        if self.bev_c != self.feat_c {
            return bad(format!(
                "bev_c = {} but feat_c = {}: the BEV grid carries the backbone features, set \
                 bev_c = feat_c",
                self.bev_c, self.feat_c
            ));
        }
        if !(1..=64).contains(&self.classes) {
            return bad(format!("classes = {}: must be in 1..=64", self.classes));
        }
        if !(1..=255).contains(&self.seg_classes) {
            return bad(format!(
                "seg_classes = {}: must be in 1..=255 (argmax writes u8)",
                self.seg_classes
            ));
        }
        Ok(())
    }

    /// The shapes of the three backbone layers for this config.
    pub fn backbone_shapes(&self) -> [ConvShape; 3] {
        let chans = [
            IMAGE_CHANNELS,
            BACKBONE_HIDDEN[0],
            BACKBONE_HIDDEN[1],
            self.feat_c,
        ];
        std::array::from_fn(|i| ConvShape {
            in_c: chans[i],
            out_c: chans[i + 1],
            k: 3,
            stride: 2,
            pad: 1,
        })
    }
}

/// Stream ids of the seeded layers (stable: changing them changes every model).
pub(super) mod stream {
    pub const BACKBONE: u64 = 0x100;
    pub const BACKBONE_CALIB: u64 = 0x1FF;
    pub const DET: u64 = 0x200;
    pub const DET_CALIB: u64 = 0x2FF;
    pub const SEG: u64 = 0x300;
    pub const SEG_CALIB: u64 = 0x3FF;
}

/// Activation quantization of one head: hidden output, then one per output group.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadQParams {
    /// Hidden activation (post-ReLU).
    pub hidden: QParams,
    /// Output groups, in order.
    pub outs: Vec<QParams>,
}

/// Per-tensor activation quantization of the whole network (the calibration result).
/// The backbone input is fixed ([`Backbone::input_q`](super::Backbone::input_q)); the heads' input is the
/// backbone's output.
#[derive(Clone, Debug, PartialEq)]
pub struct ActQParams {
    /// Output of each backbone layer.
    pub backbone: [QParams; 3],
    /// Detection head.
    pub det: HeadQParams,
    /// Segmentation head.
    pub seg: HeadQParams,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{Backbone, DetHead, SegHead};

    #[test]
    fn bad_configs_are_rejected_with_reasons() {
        let d = NetConfig::default();
        for cfg in [
            NetConfig {
                in_h: 0,
                ..d.clone()
            },
            NetConfig {
                in_w: 5000,
                ..d.clone()
            },
            NetConfig {
                bev_c: 32,
                ..d.clone()
            },
            NetConfig {
                feat_c: 0,
                bev_c: 0,
                ..d.clone()
            },
            NetConfig {
                classes: 0,
                ..d.clone()
            },
            NetConfig {
                seg_classes: 300,
                ..d.clone()
            },
        ] {
            let err = Backbone::new(&cfg)
                .err()
                .or_else(|| DetHead::with_input_q(&cfg, 2, 2, QParams::new(0.1, 0)).err())
                .or_else(|| SegHead::with_input_q(&cfg, 2, 2, QParams::new(0.1, 0)).err());
            assert!(
                matches!(err, Some(ModelError::InvalidConfig { .. })),
                "{cfg:?}: {err:?}"
            );
        }
        assert!(DetHead::with_input_q(&d, 0, 3, QParams::new(0.1, 0)).is_err());
        assert!(SegHead::with_input_q(&d, 3, 3, QParams::new(0.0, 0)).is_err());
    }
}
