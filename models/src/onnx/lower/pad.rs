//! ONNX `Pad` of a computed tensor (quantized, dequantized or float), every mode
//! (`constant`, `reflect`, `edge`, `wrap`), negative pads (crops) included, opset 2's
//! attributes and opset 11+'s inputs (with opset 18's `axes`).
//!
//! Contract: the output keeps the input's memory layout (an NHWC tensor's pads are mapped
//! to its memory order) and quantization, so padding a quantized tensor is exact: a pad of
//! real value `v` must be a quantized value of the tensor's scale and zero point (0 always
//! is, the usual case), else the node is refused naming the value. A pad of all zeros is
//! the input itself (no step; a shifted-window transformer pads by 0 when the feature map
//! is a multiple of its window). Otherwise one [`Step::Pad`] copies the input into a new
//! buffer, row by row over the lanes (`kernels::pad`); its index maps are built here, once.

use super::shape::Moved;
use super::*;
use crate::onnx::kernels::PadGeometry;

impl Lowerer<'_> {
    pub(super) fn pad(&mut self, n: &Node) -> Result<(), EngineError> {
        let (t, kind) = self.movable(n, "pad")?;
        let rank = t.shape.len();
        let ints = |s: &Self, i: usize| -> Result<Option<Vec<i64>>, EngineError> {
            match n.input(i) {
                None => Ok(None),
                Some(_) => s
                    .konst(n, i)?
                    .to_i64()
                    .map(Some)
                    .ok_or_else(|| n.unsupported(format!("input {i} must hold integers"))),
            }
        };
        let pads = match ints(self, 1)? {
            Some(p) => p,
            None => n
                .ints("pads")?
                .ok_or_else(|| n.unsupported("the pads (input 1 or attribute) are missing"))?,
        };
        let axes: Vec<usize> = match ints(self, 3)? {
            Some(a) => a
                .iter()
                .map(|&a| super::shape::axis_index(n, a, rank))
                .collect::<Result<_, _>>()?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(n.unsupported(format!(
                "{} pads for {} axes: ONNX wants two per axis (all begins, then all ends)",
                pads.len(),
                axes.len()
            )));
        }
        // Per logical axis: (before, after).
        let mut around = vec![(0i64, 0i64); rank];
        for (k, &a) in axes.iter().enumerate() {
            around[a] = (pads[k], pads[k + axes.len()]);
        }
        if around.iter().all(|&p| p == (0, 0)) {
            self.set(&n.outputs[0], kind.wrap(t));
            return Ok(());
        }
        let mode = n.string("mode", "constant")?;
        if !matches!(mode.as_str(), "constant" | "reflect" | "edge" | "wrap") {
            return Err(n.unsupported(format!(
                "mode {mode:?} (ONNX has constant, reflect, edge and wrap)"
            )));
        }
        let fill = if mode == "constant" {
            self.pad_fill(n, &t, kind)?
        } else {
            Vec::new()
        };
        let mut shape = t.shape.clone();
        for (a, &(b, e)) in around.iter().enumerate() {
            let out = (t.shape[a] as i64)
                .checked_add(b)
                .and_then(|o| o.checked_add(e))
                .unwrap_or(i64::MAX);
            if out <= 0 {
                return Err(n.unsupported(format!(
                    "pads {pads:?} leave axis {a} of {:?} empty: empty tensors are not \
                     supported",
                    t.shape
                )));
            }
            shape[a] = usize::try_from(out).unwrap_or(usize::MAX);
            if mode == "reflect" && t.shape[a] < 2 && (b, e) != (0, 0) {
                return Err(n.unsupported("reflect padding of an axis of one element"));
            }
        }
        if elements_within(&shape).is_none() {
            return Err(too_large(n, &shape));
        }
        // Memory order: NHWC tensors keep their layout.
        let nhwc = t.layout == Layout::Nhwc && rank == 4;
        let order: Vec<usize> = if nhwc {
            vec![0, 2, 3, 1]
        } else {
            (0..rank).collect()
        };
        let elem = kind.elem_bytes();
        let in_dims: Vec<usize> = order.iter().map(|&a| t.shape[a]).collect();
        let mut in_strides = vec![elem; rank];
        for d in (0..rank.saturating_sub(1)).rev() {
            in_strides[d] = in_strides[d + 1] * in_dims[d + 1];
        }
        let maps: Vec<Vec<i32>> = order
            .iter()
            .map(|&a| pad_map(&mode, t.shape[a], shape[a], around[a].0))
            .collect::<Option<_>>()
            .ok_or_else(|| n.unsupported("an axis is too long for a pad map"))?;
        let run = maps.last().map_or((0, 0, 0), |m| longest_run(m));
        let geom = PadGeometry {
            out_shape: order.iter().map(|&a| shape[a]).collect(),
            maps,
            in_strides,
            elem,
            fill,
            run,
        };
        self.touch(t.buf);
        let dst = self.new_buf(geom.rows() * geom.row_bytes());
        self.steps.push(Step::Pad {
            geom: Box::new(geom),
            src: t.buf,
            dst,
        });
        let out = T {
            buf: dst,
            shape,
            ..t
        };
        self.set(&n.outputs[0], kind.wrap(out));
        Ok(())
    }

    /// The bytes of one element of a constant pad's value, in the tensor's own form.
    fn pad_fill(&self, n: &Node, t: &T, kind: Moved) -> Result<Vec<i8>, EngineError> {
        let value = match n.input(2) {
            Some(_) => Some(self.konst(n, 2)?),
            None => None,
        };
        let attr = n.float("value", 0.0)?;
        Ok(match kind {
            Moved::F32 => {
                let v = value.map_or(Some(attr), |c| c.to_f32().first().copied());
                let v = v.ok_or_else(|| n.unsupported("the pad value is empty"))?;
                v.to_le_bytes().iter().map(|&b| b as i8).collect()
            }
            // Quantized bytes: the value is stored in the tensor's type (uint8 or int8).
            Moved::Q => {
                let raw = match &value {
                    Some(c) => match &c.data {
                        ConstData::U8(v) => v.first().map(|&x| i32::from(x) - 128),
                        ConstData::I8(v) => v.first().map(|&x| i32::from(x)),
                        _ => None,
                    },
                    None if self.is_u8(&n.inputs[0]) => Some(-128),
                    None => Some(0),
                };
                let raw = raw.ok_or_else(|| {
                    n.unsupported("the pad value of a quantized tensor must be one uint8 or int8")
                })?;
                vec![raw as i8]
            }
            // A dequantized tensor: the real value must be one of its quantized values.
            Moved::Dq => {
                let v = match &value {
                    Some(c) => c.to_f32().first().copied(),
                    None => Some(attr),
                }
                .ok_or_else(|| n.unsupported("the pad value is empty"))?;
                let (scale, zp) = (t.q.scale, i32::from(t.q.zero_point));
                let q = (v / scale).round() as i64 + i64::from(zp);
                let exact = (-128..=127).contains(&q) && (q - i64::from(zp)) as f32 * scale == v;
                if !exact {
                    return Err(n.unsupported(format!(
                        "the pad value {v} is not a quantized value of the tensor (scale \
                         {scale}, zero point {zp}); pad with 0 or run the model with --engine \
                         onnxruntime"
                    )));
                }
                vec![q as i8]
            }
        })
    }
}

/// The input coordinate of each of `out` output coordinates of an axis of `len` elements
/// padded by `before` (negative: cropped) in ONNX `mode`, `-1` for a constant pad.
fn pad_map(mode: &str, len: usize, out: usize, before: i64) -> Option<Vec<i32>> {
    let len = i64::try_from(len).ok()?;
    (0..out as i64)
        .map(|o| {
            let i = o - before;
            let m = if (0..len).contains(&i) {
                i
            } else {
                match mode {
                    "edge" => i.clamp(0, len - 1),
                    "wrap" => i.rem_euclid(len),
                    "reflect" => {
                        // Mirror without repeating the edge: period 2·(len − 1).
                        let p = 2 * (len - 1).max(1);
                        let r = i.rem_euclid(p);
                        if r < len {
                            r
                        } else {
                            p - r
                        }
                    }
                    _ => -1,
                }
            };
            i32::try_from(m).ok()
        })
        .collect()
}

/// The longest run of `map` that reads consecutive input coordinates: (first output
/// coordinate, its input coordinate, length).
fn longest_run(map: &[i32]) -> (usize, usize, usize) {
    let (mut best, mut start) = ((0, 0, 0), 0);
    for o in 0..=map.len() {
        let continues = o < map.len() && o > start && map[o - 1] >= 0 && map[o] == map[o - 1] + 1;
        if o < map.len() && (o == start || continues) {
            continue;
        }
        // The run [start, o) ended.
        if start < map.len() && map[start] >= 0 && o - start > best.2 {
            best = (start, map[start] as usize, o - start);
        }
        start = o;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_maps_follow_onnx_modes() {
        // Input [a b c] (0 1 2), two before and three after.
        assert_eq!(
            pad_map("constant", 3, 8, 2).unwrap(),
            [-1, -1, 0, 1, 2, -1, -1, -1]
        );
        assert_eq!(pad_map("edge", 3, 8, 2).unwrap(), [0, 0, 0, 1, 2, 2, 2, 2]);
        assert_eq!(pad_map("wrap", 3, 8, 2).unwrap(), [1, 2, 0, 1, 2, 0, 1, 2]);
        // numpy.pad(mode="reflect"): c b | a b c | b a b
        assert_eq!(
            pad_map("reflect", 3, 8, 2).unwrap(),
            [2, 1, 0, 1, 2, 1, 0, 1]
        );
        // A crop: one removed before, one after.
        assert_eq!(pad_map("constant", 4, 2, -1).unwrap(), [1, 2]);
    }

    #[test]
    fn longest_run_finds_the_copied_middle() {
        assert_eq!(longest_run(&[-1, -1, 0, 1, 2, -1]), (2, 0, 3));
        assert_eq!(longest_run(&[1, 0, 1, 2, 1]), (1, 0, 3));
        assert_eq!(longest_run(&[-1, -1]), (0, 0, 0));
        assert_eq!(longest_run(&[4, 5]), (0, 4, 2));
        assert_eq!(longest_run(&[-1, 0, 1]), (1, 0, 2));
    }
}
