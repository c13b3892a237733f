//! Quantization error as SQNR: one tensor's signal and noise energies
//! ([`SqnrAccumulator`]) and every activation tensor of an INT8 network against its float
//! reference ([`NetworkSqnr`]).
//!
//! Contract: SQNR is `10 · log10(Σ x² / Σ (x − x̂)²)` dB, `x` the float activation and `x̂`
//! the dequantized INT8 one, summed in `f64` in element order (`+inf` without error).
//!
//! Cost: the network-level comparison runs both networks and allocates: offline tooling
//! only (`redline quantize`). Never: called per frame.

use super::{channel_group, channel_group_i8, Tensor};
use crate::conv::{exact_len, ModelError};
use crate::network::{Backbone, DetHead, FloatNetwork, SegHead};
use crate::quant::{dequantize, QParams};
use redline_runtime::det_math as dm;

/// Signal and noise energies of one tensor: SQNR in dB (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SqnrAccumulator {
    /// `Σ x²` of the reference.
    pub signal: f64,
    /// `Σ (x − x̂)²`.
    pub noise: f64,
    /// Elements compared.
    pub count: u64,
}

impl SqnrAccumulator {
    /// Adds a reference tensor and its approximation, element by element (extra elements
    /// of the longer one are ignored).
    pub fn add(&mut self, reference: &[f32], approx: &[f32]) {
        for (&x, &y) in reference.iter().zip(approx) {
            let (x, y) = (f64::from(x), f64::from(y));
            self.signal += x * x;
            self.noise += (x - y) * (x - y);
            self.count += 1;
        }
    }

    /// Adds a reference and the dequantized `i8` tensor `q` in `qp`.
    fn add_quantized(&mut self, reference: &[f32], q: &[i8], qp: QParams) {
        for (&x, &v) in reference.iter().zip(q) {
            let (x, y) = (f64::from(x), f64::from(dequantize(v, qp)));
            self.signal += x * x;
            self.noise += (x - y) * (x - y);
            self.count += 1;
        }
    }

    /// `10 · log10(signal / noise)` dB (`sqnr_db`).
    pub fn db(&self) -> f64 {
        sqnr_db(self.signal, self.noise)
    }
}

/// `10 · log10(signal / noise)`: `+inf` when `noise` is 0, `-inf` when `signal` is 0 and
/// `noise` is not.
fn sqnr_db(signal: f64, noise: f64) -> f64 {
    if noise <= 0.0 {
        f64::INFINITY
    } else if signal <= 0.0 {
        f64::NEG_INFINITY
    } else {
        10.0 * dm::log10(signal / noise)
    }
}

/// SQNR of every activation tensor of an INT8 network against its float reference,
/// accumulated over inputs.
#[derive(Clone, Debug, Default)]
pub struct NetworkSqnr {
    acc: [SqnrAccumulator; 8],
}

impl NetworkSqnr {
    /// Empty accumulators.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the INT8 backbone on `input` (the quantized image) and compares its three
    /// activations with the float ones (`float_acts`, from
    /// [`FloatNetwork::backbone_forward`] on the dequantized image). Returns the INT8
    /// features.
    pub fn add_backbone(
        &mut self,
        backbone: &Backbone,
        input: &[i8],
        float_acts: &[Vec<f32>],
    ) -> Result<Vec<i8>, ModelError> {
        let (h, w, c) = backbone.output_shape();
        let mut scratch = vec![0i8; backbone.scratch_len()];
        let mut out = vec![0i8; h * w * c];
        backbone.forward(input, &mut scratch, &mut out)?;
        let layers = backbone.layers();
        let (hw1, hw2) = (
            backbone.act_hw(1).unwrap_or((0, 0)),
            backbone.act_hw(2).unwrap_or((0, 0)),
        );
        let n1 = hw1.0 * hw1.1 * layers[0].out_c;
        let n2 = hw2.0 * hw2.1 * layers[1].out_c;
        let (a1, rest) = scratch.split_at(n1);
        let a2 = &rest[..n2];
        let q: [(&[i8], QParams); 3] = [
            (a1, layers[0].out_q),
            (a2, layers[1].out_q),
            (&out, layers[2].out_q),
        ];
        for (i, ((qa, qp), fa)) in q.iter().zip(float_acts).enumerate() {
            exact_len(fa.len(), qa.len(), "float reference activation")?;
            self.acc[i].add_quantized(fa, qa, *qp);
        }
        Ok(out)
    }

    /// Runs both INT8 heads on `bev` (the quantized BEV grid) and both float heads on
    /// `float_bev` (the float grid), and compares every activation.
    pub fn add_heads(
        &mut self,
        float: &FloatNetwork,
        det: &DetHead,
        seg: &SegHead,
        bev: &[i8],
        float_bev: &[f32],
    ) -> Result<(), ModelError> {
        let (ny, nx, dc) = det.output_shape();
        let cells = ny * nx;
        let mut scratch = vec![0i8; det.scratch_len().max(seg.scratch_len())];
        let mut out = vec![0i8; cells * dc];
        det.forward(bev, &mut scratch, &mut out)?;
        let (fh, fo) = float.det.forward(float_bev, cells)?;
        let hq = det.act_qparams();
        let classes = det.classes();
        let nh = det.scratch_len();
        self.acc[Tensor::DetHidden.index()].add_quantized(&fh, &scratch[..nh], hq.hidden);
        self.acc[Tensor::DetHeat.index()].add_quantized(
            &channel_group(&fo, dc, 0, classes),
            &channel_group_i8(&out, dc, 0, classes),
            det.heat_q(),
        );
        self.acc[Tensor::DetReg.index()].add_quantized(
            &channel_group(&fo, dc, classes, dc - classes),
            &channel_group_i8(&out, dc, classes, dc - classes),
            det.reg_q(),
        );
        let sc = seg.out_channels();
        let mut logits = vec![0i8; cells * sc];
        seg.forward(bev, &mut scratch, &mut logits)?;
        let (fh, fo) = float.seg.forward(float_bev, cells)?;
        let ns = seg.scratch_len();
        self.acc[Tensor::SegHidden.index()].add_quantized(
            &fh,
            &scratch[..ns],
            seg.act_qparams().hidden,
        );
        self.acc[Tensor::SegLogits.index()].add_quantized(&fo, &logits, seg.logit_q());
        Ok(())
    }

    /// The accumulator of tensor `t`.
    pub fn get(&self, t: Tensor) -> SqnrAccumulator {
        self.acc[t.index()]
    }

    /// `(tensor name, SQNR dB)` for every tensor, in network order.
    pub fn table(&self) -> Vec<(&'static str, f64)> {
        Tensor::ALL
            .iter()
            .map(|&t| (t.name(), self.get(t).db()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::quantize;

    #[test]
    fn sqnr_of_a_known_error() {
        // Signal energy 4 * 100 = 400, noise 4 * 0.01 = 0.04: 10 * log10(1e4) = 40 dB.
        let x = [10.0f32, -10.0, 10.0, -10.0];
        let y = [10.1f32, -10.1, 9.9, -9.9];
        let mut a = SqnrAccumulator::default();
        a.add(&x, &y);
        assert!((a.db() - 40.0).abs() < 1e-3, "{}", a.db());
        a.add(&x, &x);
        assert!((a.db() - 43.0103).abs() < 1e-3, "{}", a.db());
        assert_eq!(sqnr_db(1.0, 0.0), f64::INFINITY);
        assert_eq!(sqnr_db(0.0, 1.0), f64::NEG_INFINITY);
        // Quantization of a uniform signal: about 6.02 dB per bit + 1.76 dB (full scale sine)
        // — for a uniform full-scale signal the SQNR of 8 bits is 20*log10(256) = 48.2 dB.
        let q = QParams::new(2.0 / 256.0, 0);
        let xs: Vec<f32> = (0..100_000)
            .map(|i| -1.0 + 2.0 * (i as f32 + 0.5) / 1e5)
            .collect();
        let qs: Vec<i8> = xs.iter().map(|&v| quantize(v, q)).collect();
        let mut b = SqnrAccumulator::default();
        b.add_quantized(&xs, &qs, q);
        assert!((b.db() - 48.16).abs() < 0.3, "{}", b.db());
    }
}
