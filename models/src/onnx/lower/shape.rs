//! The shape operators (`Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Transpose`): views
//! of the same bytes where the memory order allows, a copy where it does not.

use super::*;

impl Lowerer<'_> {
    pub(super) fn reshape_like(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let (t, is_q) = match v {
            Val::Q(t) => (t, true),
            Val::Dq(t) => (t, false),
            Val::C(c) => {
                let shape = self.new_shape(n, &c.shape)?;
                self.set(
                    &n.outputs[0],
                    Val::C(Const {
                        shape,
                        data: c.data,
                    }),
                );
                return Ok(());
            }
            v => return Err(n.unsupported(format!("cannot reshape {}", kind_name(&v)))),
        };
        let shape = self.new_shape(n, &t.shape)?;
        let t = self.row_major(t)?;
        let t = T { shape, ..t };
        self.set(&n.outputs[0], if is_q { Val::Q(t) } else { Val::Dq(t) });
        Ok(())
    }

    pub(super) fn new_shape(&self, n: &Node, s: &[usize]) -> Result<Vec<usize>, EngineError> {
        let total: usize = s.iter().product();
        let rank = s.len() as i64;
        let norm = |a: i64, r: i64| if a < 0 { a + r } else { a };
        let out = match n.op.as_str() {
            "Reshape" => {
                let spec = self
                    .konst(n, 1)?
                    .to_i64()
                    .ok_or_else(|| n.unsupported("shape must be integers"))?;
                let allowzero = n.int("allowzero", 0)? != 0;
                let mut out = Vec::with_capacity(spec.len());
                let mut infer = None;
                for (i, &d) in spec.iter().enumerate() {
                    match d {
                        -1 => {
                            infer = Some(i);
                            out.push(1)
                        }
                        0 if !allowzero => {
                            out.push(*s.get(i).ok_or_else(|| {
                                n.unsupported("0 in shape beyond the input's rank")
                            })?)
                        }
                        d if d >= 0 => out.push(d as usize),
                        _ => return Err(n.unsupported(format!("bad shape entry {d}"))),
                    }
                }
                if let Some(i) = infer {
                    let known: usize = out.iter().product();
                    if known == 0 || !total.is_multiple_of(known) {
                        return Err(n.unsupported(format!(
                            "cannot infer -1 of {spec:?} for {total} elements"
                        )));
                    }
                    out[i] = total / known;
                }
                out
            }
            "Flatten" => {
                let a = norm(n.int("axis", 1)?, rank).clamp(0, rank) as usize;
                vec![s[..a].iter().product(), s[a..].iter().product()]
            }
            "Squeeze" => {
                let axes = match n.ints("axes")? {
                    Some(a) => a,
                    None if n.input(1).is_some() => self.konst(n, 1)?.to_i64().unwrap_or_default(),
                    None => (0..rank).filter(|&a| s[a as usize] == 1).collect(),
                };
                let axes: Vec<usize> = axes.iter().map(|&a| norm(a, rank) as usize).collect();
                s.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect()
            }
            _ => {
                let axes = match n.ints("axes")? {
                    Some(a) => a,
                    None => self.konst(n, 1)?.to_i64().unwrap_or_default(),
                };
                let r = rank + axes.len() as i64;
                let mut axes: Vec<usize> = axes.iter().map(|&a| norm(a, r) as usize).collect();
                axes.sort_unstable();
                let mut out: Vec<usize> = s.to_vec();
                for a in axes {
                    if a > out.len() {
                        return Err(n.unsupported("Unsqueeze axis out of range"));
                    }
                    out.insert(a, 1);
                }
                out
            }
        };
        if out.iter().product::<usize>() != total {
            return Err(n.unsupported(format!(
                "new shape {out:?} does not hold the {total} elements of {s:?}"
            )));
        }
        Ok(out)
    }

    pub(super) fn transpose(&mut self, n: &Node) -> Result<(), EngineError> {
        let v = self.input(n, 0)?;
        let (t, is_q) = match v {
            Val::Q(t) => (t, true),
            Val::Dq(t) => (t, false),
            v => return Err(n.unsupported(format!("cannot transpose {}", kind_name(&v)))),
        };
        let rank = t.shape.len();
        let perm: Vec<usize> = match n.ints("perm")? {
            Some(p) => p.iter().map(|&x| x as usize).collect(),
            None => (0..rank).rev().collect(),
        };
        let mut seen = perm.clone();
        seen.sort_unstable();
        if seen != (0..rank).collect::<Vec<_>>() {
            return Err(n.unsupported(format!("perm {perm:?} is not a permutation of 0..{rank}")));
        }
        let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
        let out = if rank == 4 && perm == [0, 3, 1, 2] && t.layout == Layout::RowMajor {
            // Row-major [N,H,W,C] viewed as NCHW: its memory is already NHWC.
            T {
                shape,
                layout: Layout::Nhwc,
                ..t
            }
        } else if rank == 4 && perm == [0, 2, 3, 1] && t.layout == Layout::Nhwc {
            T {
                shape,
                layout: Layout::RowMajor,
                ..t
            }
        } else {
            let t = self.row_major(t)?;
            let buf = self.permute_copy(&t, &perm);
            T {
                buf,
                shape,
                layout: Layout::RowMajor,
                ..t
            }
        };
        self.set(&n.outputs[0], if is_q { Val::Q(out) } else { Val::Dq(out) });
        Ok(())
    }
}
