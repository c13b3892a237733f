//! The INT8 heads on the bird's-eye-view grid: one generic two-layer 1x1 head, [`Head`],
//! parametrised by its [`HeadKind`]: [`DetHead`] (heatmap + box regression) and
//! [`SegHead`] (segmentation logits and [`SegHead::argmax`]).
//!
//! Contract: BEV row `r` of the output depends only on BEV row `r` of the input, so
//! `forward_rows*` over any static split of `0..ny` equals `forward`, and a row chunk needs
//! scratch only for its own rows. The output groups of a head (detection: `classes`
//! heatmap channels, then [`REG_CHANNELS`] box channels) are written side by side into one
//! tensor, each with its own output quantization.
//!
//! Cost: construction allocates (and, when seeded, runs the float head once for
//! calibration); `forward*` cost [`Head::macs`] multiply-adds for the whole grid. Never:
//! the per-frame calls allocate, lock, log or panic (wrong buffer sizes are errors).

use super::config::{
    stream, ActQParams, HeadQParams, NetConfig, TrainedLayers, DET_HIDDEN, REG_CHANNELS, SEG_HIDDEN,
};
use super::float_reference::{FloatHead, FloatNetwork};
use super::{bev_q, invalid_config, min_max, one_by_one, prefix};
use crate::conv::{exact_len, ChannelSlot, Conv2d, ModelError};
use crate::quant::{dequantize, QParams};
use redline_runtime::rng::SplitMix64;
use std::marker::PhantomData;
use std::ops::Range;

/// Feature vectors used to calibrate a head.
const HEAD_CALIB_PIXELS: usize = 1024;

/// What distinguishes the heads: hidden width, output channel groups, seed streams.
pub trait HeadKind: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Name in messages and weight files (`"det"`, `"seg"`).
    const NAME: &'static str;
    /// Hidden channels.
    const HIDDEN: usize;
    /// Weight and calibration seed streams.
    const STREAMS: (u64, u64);
    /// Output channel groups, each a layer with its own output scale.
    fn groups(cfg: &NetConfig) -> Vec<usize>;
    /// This head's layers in trained weights.
    fn trained(t: &TrainedLayers) -> &[Conv2d];
}

/// Marker of the detection head: groups `[classes, 6]` (heatmap, box regression).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Det;

/// Marker of the segmentation head: one group of `seg_classes` logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg;

impl HeadKind for Det {
    const NAME: &'static str = "det";
    const HIDDEN: usize = DET_HIDDEN;
    const STREAMS: (u64, u64) = (stream::DET, stream::DET_CALIB);
    fn groups(cfg: &NetConfig) -> Vec<usize> {
        vec![cfg.classes, REG_CHANNELS]
    }
    fn trained(t: &TrainedLayers) -> &[Conv2d] {
        &t.det
    }
}

impl HeadKind for Seg {
    const NAME: &'static str = "seg";
    const HIDDEN: usize = SEG_HIDDEN;
    const STREAMS: (u64, u64) = (stream::SEG, stream::SEG_CALIB);
    fn groups(cfg: &NetConfig) -> Vec<usize> {
        vec![cfg.seg_classes]
    }
    fn trained(t: &TrainedLayers) -> &[Conv2d] {
        &t.seg
    }
}

/// Random post-ReLU feature vectors in `q`: each element is `zero_point` (real 0) with
/// probability 1/2, else uniform over `zero_point..=127`.
fn head_calibration_input(rng: &mut SplitMix64, c: usize, q: QParams) -> Vec<i8> {
    let zp = i32::from(q.zero_point);
    (0..HEAD_CALIB_PIXELS * c)
        .map(|_| {
            if rng.next_u64() & 1 == 0 {
                q.zero_point
            } else {
                rng.range_i32(zp, 127) as i8
            }
        })
        .collect()
}

/// A 1x1 two-layer head on the BEV grid: hidden conv + ReLU, then one or more output convs
/// writing consecutive channel groups of one output tensor. `K` says which head
/// ([`Det`], [`Seg`]); use the aliases [`DetHead`] and [`SegHead`].
#[derive(Clone, Debug)]
pub struct Head<K: HeadKind> {
    hidden: Conv2d,
    outs: Vec<Conv2d>,
    ny: usize,
    nx: usize,
    out_c: usize,
    kind: PhantomData<K>,
}

/// The detection head: conv1x1 bev_c→32 ReLU, conv1x1 32→(`classes` heatmap logits + 6 box
/// regression channels), on a `ny × nx` BEV grid.
pub type DetHead = Head<Det>;

/// The segmentation head: conv1x1 bev_c→16 ReLU, conv1x1 16→`seg_classes` logits.
pub type SegHead = Head<Seg>;

fn check_grid(ny: usize, nx: usize) -> Result<(), ModelError> {
    if ny == 0 || nx == 0 || ny > 4096 || nx > 4096 {
        return Err(invalid_config(format!(
            "BEV grid {ny}x{nx}: both sides must be in 1..=4096"
        )));
    }
    Ok(())
}

impl<K: HeadKind> Head<K> {
    /// The head for a `ny × nx` grid whose features use [`bev_q`]`(cfg)`: trained layers
    /// when [`NetConfig::trained`] is set, else seeded and calibrated (module docs).
    pub fn new(cfg: &NetConfig, ny: usize, nx: usize) -> Result<Self, ModelError> {
        if let Some(t) = &cfg.trained {
            check_grid(ny, nx)?;
            return Self::from_layers(cfg, K::trained(t).to_vec(), ny, nx);
        }
        Self::with_input_q(cfg, ny, nx, bev_q(cfg)?)
    }

    /// The seeded head for BEV features quantized with `in_q` (calibrated on seeded random
    /// features in `in_q`). With [`NetConfig::trained`] set, the trained layers, whose input
    /// parameters must then equal `in_q`.
    pub fn with_input_q(
        cfg: &NetConfig,
        ny: usize,
        nx: usize,
        in_q: QParams,
    ) -> Result<Self, ModelError> {
        cfg.validate()?;
        check_grid(ny, nx)?;
        if !in_q.is_valid() {
            return Err(invalid_config(format!(
                "BEV input scale {}: must be finite and > 0",
                in_q.scale
            )));
        }
        if let Some(t) = &cfg.trained {
            let head = Self::from_layers(cfg, K::trained(t).to_vec(), ny, nx)?;
            if head.input_q() != in_q {
                return Err(invalid_config(format!(
                    "the trained {} head expects BEV input {:?}, not {in_q:?}",
                    K::NAME,
                    head.input_q()
                )));
            }
            return Ok(head);
        }
        let float = FloatHead::seeded::<K>(cfg)?;
        let mut calib_rng = SplitMix64::stream(cfg.seed, K::STREAMS.1);
        let x: Vec<f32> = head_calibration_input(&mut calib_rng, cfg.bev_c, in_q)
            .iter()
            .map(|&v| dequantize(v, in_q))
            .collect();
        let (h, o) = float.forward(&x, HEAD_CALIB_PIXELS)?;
        let (lo, hi) = min_max(&h);
        let hidden = QParams::from_min_max(lo, hi);
        let out_c = float.out.shape.out_c;
        let mut outs = Vec::with_capacity(float.groups.len());
        let mut first = 0;
        for &n in &float.groups {
            let (lo, hi) = o
                .chunks_exact(out_c)
                .flat_map(|px| &px[first..first + n])
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
            outs.push(QParams::from_min_max(lo, hi));
            first += n;
        }
        Self::from_float_head(cfg, &float, in_q, &HeadQParams { hidden, outs }, ny, nx)
    }

    /// Quantizes a float head: BEV input `in_q`, activations `act`.
    fn from_float_head(
        cfg: &NetConfig,
        float: &FloatHead,
        in_q: QParams,
        act: &HeadQParams,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        let hidden = float
            .hidden
            .quantize(in_q, &[float.hidden.shape.out_c], &[act.hidden])?;
        let outs = float.out.quantize(act.hidden, &float.groups, &act.outs)?;
        Self::from_layers(cfg, hidden.into_iter().chain(outs).collect(), ny, nx)
    }

    /// Assembles the head from quantized layers (hidden, then the output groups), checking
    /// their shapes against `cfg` and the chaining of their quantization parameters.
    pub fn from_layers(
        cfg: &NetConfig,
        layers: Vec<Conv2d>,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        cfg.validate()?;
        check_grid(ny, nx)?;
        let groups = K::groups(cfg);
        let mut it = layers.into_iter();
        let hidden = it
            .next()
            .ok_or_else(|| invalid_config(format!("{} head has no layers", K::NAME)))?;
        let outs: Vec<Conv2d> = it.collect();
        let got: Vec<usize> = outs.iter().map(|c| c.out_c).collect();
        let shape_ok = hidden.shape() == one_by_one(cfg.bev_c, K::HIDDEN)
            && hidden.relu
            && got == groups
            && outs
                .iter()
                .all(|c| c.shape() == one_by_one(K::HIDDEN, c.out_c) && !c.relu);
        if !shape_ok {
            return Err(invalid_config(format!(
                "{} head layers do not match the config: expected 1x1 {} -> {} ReLU, then \
                 output groups {groups:?} without ReLU; got {:?} then groups {got:?}",
                K::NAME,
                cfg.bev_c,
                K::HIDDEN,
                hidden.shape()
            )));
        }
        if let Some(c) = outs.iter().find(|c| c.in_q != hidden.out_q) {
            return Err(invalid_config(format!(
                "{} head output layer input quantization {:?} is not the hidden output's {:?}",
                K::NAME,
                c.in_q,
                hidden.out_q
            )));
        }
        Ok(Self {
            hidden,
            outs,
            ny,
            nx,
            out_c: groups.iter().sum(),
            kind: PhantomData,
        })
    }

    /// Quantization of the BEV input.
    pub fn input_q(&self) -> QParams {
        self.hidden.in_q
    }

    /// Channels per BEV cell of the output.
    pub fn out_channels(&self) -> usize {
        self.out_c
    }

    /// Output shape `(ny, nx, out_channels)`.
    pub fn output_shape(&self) -> (usize, usize, usize) {
        (self.ny, self.nx, self.out_c)
    }

    /// Scratch elements a whole-grid forward pass needs (`ny * nx * hidden`).
    pub fn scratch_len(&self) -> usize {
        self.scratch_len_rows(self.ny)
    }

    /// Scratch elements a `forward_rows*` call over `rows` BEV rows needs.
    fn scratch_len_rows(&self, rows: usize) -> usize {
        rows * self.nx * self.hidden.out_c
    }

    /// Multiply-adds of one whole-grid forward pass.
    pub fn macs(&self) -> u64 {
        let px = (self.ny * self.nx) as u64;
        px * (self.hidden.in_c * self.hidden.out_c + self.hidden.out_c * self.out_c) as u64
    }

    /// The layers: hidden, then the output groups.
    pub fn layers(&self) -> impl Iterator<Item = &Conv2d> {
        std::iter::once(&self.hidden).chain(&self.outs)
    }

    /// Quantization of the hidden activation and of each output group.
    pub fn act_qparams(&self) -> HeadQParams {
        HeadQParams {
            hidden: self.hidden.out_q,
            outs: self.outs.iter().map(|c| c.out_q).collect(),
        }
    }

    fn check_common(&self, bev: &[i8], rows: &Range<usize>) -> Result<(), ModelError> {
        exact_len(
            bev.len(),
            self.ny * self.nx * self.hidden.in_c,
            "BEV feature input",
        )?;
        if rows.start > rows.end || rows.end > self.ny {
            return Err(ModelError::RowsOutOfRange {
                start: rows.start,
                end: rows.end,
                out_h: self.ny,
            });
        }
        Ok(())
    }

    /// Like [`Head::forward_rows`], but `out_rows` holds only the requested rows
    /// (`rows.len() * nx * out_channels` elements): disjoint chunks for parallel lanes.
    /// Afterwards the first `rows.len() · nx · hidden` elements of `scratch` hold the hidden
    /// activation of these rows. No allocation.
    pub fn forward_rows_into(
        &self,
        bev: &[i8],
        scratch: &mut [i8],
        out_rows: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        self.check_common(bev, &rows)?;
        let n = rows.end - rows.start;
        exact_len(out_rows.len(), n * self.nx * self.out_c, "head output rows")?;
        if n == 0 {
            return Ok(());
        }
        let hid = prefix(scratch, self.scratch_len_rows(n), "head scratch")?;
        let row_in = self.nx * self.hidden.in_c;
        let bev_rows = &bev[rows.start * row_in..rows.end * row_in];
        // 1x1 stride-1 convolutions are row-local: the chunk is an n-row image of its own.
        self.hidden.forward(bev_rows, n, self.nx, hid)?;
        let mut offset = 0;
        for conv in &self.outs {
            let slot = ChannelSlot {
                pixel_stride: self.out_c,
                channel_offset: offset,
            };
            conv.forward_rows_into_slot(hid, n, self.nx, out_rows, slot, 0..n)?;
            offset += conv.out_c;
        }
        Ok(())
    }

    /// Computes BEV rows `rows` of `out` (the whole `ny * nx * out_channels` tensor; other
    /// rows untouched) from `bev` (the whole `ny * nx * bev_c` grid). `scratch` needs at
    /// least `rows.len() · nx · hidden` elements. No allocation.
    pub fn forward_rows(
        &self,
        bev: &[i8],
        scratch: &mut [i8],
        out: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), ModelError> {
        self.check_common(bev, &rows)?;
        exact_len(out.len(), self.ny * self.nx * self.out_c, "head output")?;
        let row_out = self.nx * self.out_c;
        let dst = &mut out[rows.start * row_out..rows.end * row_out];
        self.forward_rows_into(bev, scratch, dst, rows)
    }

    /// The whole grid. No allocation.
    pub fn forward(
        &self,
        bev: &[i8],
        scratch: &mut [i8],
        out: &mut [i8],
    ) -> Result<(), ModelError> {
        self.forward_rows(bev, scratch, out, 0..self.ny)
    }
}

impl Head<Det> {
    /// Quantizes the float detection head of `float` for a `ny × nx` grid: BEV input
    /// quantized like the backbone output (`act.backbone[2]`).
    pub fn from_float(
        float: &FloatNetwork,
        act: &ActQParams,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        float.check_shapes()?;
        Self::from_float_head(&float.config, &float.det, act.backbone[2], &act.det, ny, nx)
    }

    /// Quantization of the heatmap logits (channels `0..classes`).
    pub fn heat_q(&self) -> QParams {
        self.outs[0].out_q
    }

    /// Quantization of the box regression channels (`classes..classes + 6`).
    pub fn reg_q(&self) -> QParams {
        self.outs[1].out_q
    }

    /// Heatmap classes.
    pub fn classes(&self) -> usize {
        self.outs[0].out_c
    }
}

impl Head<Seg> {
    /// Quantizes the float segmentation head of `float` for a `ny × nx` grid.
    pub fn from_float(
        float: &FloatNetwork,
        act: &ActQParams,
        ny: usize,
        nx: usize,
    ) -> Result<Self, ModelError> {
        float.check_shapes()?;
        Self::from_float_head(&float.config, &float.seg, act.backbone[2], &act.seg, ny, nx)
    }

    /// Quantization of the logits.
    pub fn logit_q(&self) -> QParams {
        self.outs[0].out_q
    }

    /// Per-cell class: [`argmax_classes`] with this head's class count.
    pub fn argmax(&self, logits: &[i8], out_class: &mut [u8]) -> Result<(), ModelError> {
        argmax_classes(logits, self.out_c, out_class)
    }
}

/// Per-cell class: the index of the largest of each cell's `classes` logits (ties: the
/// lowest index). `logits` is `n * classes` for any `n` cells (whole grid or a row chunk),
/// `out_class` is `n`. One per-tensor scale, so the `i8` argmax is the real-valued argmax.
/// No allocation.
pub fn argmax_classes(
    logits: &[i8],
    classes: usize,
    out_class: &mut [u8],
) -> Result<(), ModelError> {
    if classes == 0 {
        return Err(ModelError::BufferSize {
            what: "segmentation classes",
            expected: 1,
            got: 0,
        });
    }
    exact_len(
        logits.len(),
        out_class.len().saturating_mul(classes),
        "segmentation logits (cells * seg_classes)",
    )?;
    for (cell, o) in logits.chunks_exact(classes).zip(out_class.iter_mut()) {
        let mut best = 0usize;
        for (i, &v) in cell.iter().enumerate().skip(1) {
            if v > cell[best] {
                best = i;
            }
        }
        *o = best as u8;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::tests::{bev_from_backbone, stats};
    use crate::network::Backbone;
    use proptest::prelude::*;

    #[test]
    fn heads_have_documented_shapes_and_spread() {
        let cfg = NetConfig::default();
        let b = Backbone::new(&cfg).unwrap();
        let (ny, nx) = (20, 24);
        let bev = bev_from_backbone(&b, ny, nx, 11);
        let det = DetHead::new(&cfg, ny, nx).unwrap();
        assert_eq!(det.input_q(), b.output_q());
        assert_eq!(det.out_channels(), 3 + 6);
        assert_eq!(det.output_shape(), (ny, nx, 9));
        assert_eq!(det.scratch_len(), ny * nx * DET_HIDDEN);
        assert_eq!(det.macs(), (ny * nx * (64 * 32 + 32 * 9)) as u64);
        let mut s = vec![0i8; det.scratch_len()];
        let mut o = vec![0i8; ny * nx * 9];
        det.forward(&bev, &mut s, &mut o).unwrap();
        let heat: Vec<i8> = o.chunks_exact(9).flat_map(|c| c[..3].to_vec()).collect();
        let reg: Vec<i8> = o.chunks_exact(9).flat_map(|c| c[3..].to_vec()).collect();
        for (name, v, q) in [("heat", heat, det.heat_q()), ("reg", reg, det.reg_q())] {
            let (_, std, sat, _) = stats(&v, q.zero_point);
            assert!(std > 5.0, "{name} std {std}");
            assert!(sat < 0.05, "{name} saturated {sat}");
        }
        assert_ne!(det.heat_q(), det.reg_q());

        let seg = SegHead::new(&cfg, ny, nx).unwrap();
        assert_eq!(seg.output_shape(), (ny, nx, 3));
        assert_eq!(seg.scratch_len(), ny * nx * SEG_HIDDEN);
        let mut s = vec![0i8; seg.scratch_len()];
        let mut logits = vec![0i8; ny * nx * 3];
        seg.forward(&bev, &mut s, &mut logits).unwrap();
        let (_, std, sat, _) = stats(&logits, seg.logit_q().zero_point);
        assert!(std > 5.0 && sat < 0.05, "seg std {std} sat {sat}");
        let mut cls = vec![0u8; ny * nx];
        seg.argmax(&logits, &mut cls).unwrap();
        // More than one class appears.
        let mut seen = [false; 3];
        cls.iter().for_each(|&c| seen[c as usize] = true);
        assert!(
            seen.iter().filter(|&&s| s).count() >= 2,
            "classes seen {seen:?}"
        );
    }

    #[test]
    fn argmax_ties_go_to_the_lowest_class() {
        let seg =
            SegHead::with_input_q(&NetConfig::default(), 1, 4, QParams::new(0.05, -128)).unwrap();
        let logits = [5, 5, 1, -3, 7, 7, 0, 0, 0, 1, 2, 3];
        let mut cls = [9u8; 4];
        seg.argmax(&logits, &mut cls).unwrap();
        assert_eq!(cls, [0, 1, 0, 2]);
        assert!(seg.argmax(&logits[1..], &mut cls).is_err());
        assert!(seg.argmax(&logits, &mut cls[1..]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn head_row_splits_equal_forward(cuts in proptest::collection::vec(0usize..=9, 0..4), seed in any::<u64>()) {
            let cfg = NetConfig { feat_c: 16, bev_c: 16, ..NetConfig::default() };
            let (ny, nx) = (9, 7);
            let q = QParams::new(0.02, -128);
            let det = DetHead::with_input_q(&cfg, ny, nx, q).unwrap();
            let seg = SegHead::with_input_q(&cfg, ny, nx, q).unwrap();
            let mut r = SplitMix64::new(seed);
            let bev: Vec<i8> = (0..ny * nx * 16).map(|_| r.next_i8()).collect();
            let mut bounds: Vec<usize> = cuts.clone();
            bounds.extend([0, ny]);
            bounds.sort_unstable();
            for (oc, scratch_rows, fwd, rows_fn, into_fn) in [
                (det.out_channels(), det.scratch_len_rows(ny),
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8]| det.forward(b, s, o)) as &dyn Fn(&[i8], &mut [i8], &mut [i8]) -> Result<(), ModelError>,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| det.forward_rows(b, s, o, r)) as &dyn Fn(&[i8], &mut [i8], &mut [i8], Range<usize>) -> Result<(), ModelError>,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| det.forward_rows_into(b, s, o, r)) as &dyn Fn(&[i8], &mut [i8], &mut [i8], Range<usize>) -> Result<(), ModelError>),
                (seg.out_channels(), seg.scratch_len_rows(ny),
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8]| seg.forward(b, s, o)) as _,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| seg.forward_rows(b, s, o, r)) as _,
                 &(|b: &[i8], s: &mut [i8], o: &mut [i8], r: Range<usize>| seg.forward_rows_into(b, s, o, r)) as _),
            ] {
                let mut scratch = vec![0i8; scratch_rows];
                let mut whole = vec![0i8; ny * nx * oc];
                fwd(&bev, &mut scratch, &mut whole).unwrap();
                let mut split = vec![0x33i8; whole.len()];
                for p in bounds.windows(2).rev() {
                    rows_fn(&bev, &mut scratch, &mut split, p[0]..p[1]).unwrap();
                }
                prop_assert_eq!(&split, &whole);
                let row = nx * oc;
                let mut sliced = vec![0x33i8; whole.len()];
                for p in bounds.windows(2) {
                    // Each chunk gets only the scratch its own rows need.
                    let n = p[1] - p[0];
                    let mut small = vec![0i8; n * nx * if oc == 9 { DET_HIDDEN } else { SEG_HIDDEN }];
                    into_fn(&bev, &mut small, &mut sliced[p[0] * row..p[1] * row], p[0]..p[1]).unwrap();
                }
                prop_assert_eq!(&sliced, &whole);
            }
        }
    }
}
