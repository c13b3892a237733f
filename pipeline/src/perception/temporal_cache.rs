//! Temporal BEV cache: the last K BEV maps with their ego poses, warped into the current
//! ego frame and fused with the current map.
//!
//! Contract: [`TemporalCache::new`] allocates the ring and the accumulator (the only
//! allocations); [`TemporalCache::fuse`] never allocates, locks or panics and is
//! bit-identical on every machine: the warp geometry is one f64 code path (no fused
//! multiply-add), the fusion integer with halves rounded away from the zero point (the
//! division by `2 + m` is an exact fixed-point reciprocal, checked over its whole range),
//! and where the CPU has AVX2 the same code compiled for it. A frame whose
//! timestamp does not advance resets the cache (a log jump), so stale maps are never fused.
//!
//! Cost: O(K · cells · channels) integer work plus O(K · cells) float work for the warp per
//! frame; measured 0.15 ms with K = 2 at 80×48×64 with AVX2 (0.37 ms with the baseline
//! build and a lookup table before; `cargo bench -p redline-bench --bench kernels`).

use super::{check_bev, check_size, use_avx2_builds, PerceptionError};
use crate::types::{BevSpec, EgoPose};
use redline_runtime::det_math as dm;

/// Integer division rounding half away from zero; `d > 0` (the reference [`fuse_round`]
/// is checked against).
#[cfg(test)]
fn div_round(n: i64, d: i64) -> i64 {
    if n >= 0 {
        (n + d / 2) / d
    } else {
        -((-n + d / 2) / d)
    }
}

/// Most past BEV maps a [`TemporalCache`] keeps.
pub const MAX_TEMPORAL_K: usize = 4;

/// Largest |weighted sum| of zero-point-relative values in a fused cell:
/// `255 · (2 + MAX_TEMPORAL_K)`.
const FUSE_MAX_SUM: i32 = 255 * (2 + MAX_TEMPORAL_K as i32);

/// Fixed-point shift of [`fuse_divisor`]'s reciprocals.
const FUSE_SHIFT: u32 = 20;

/// The reciprocal `M` that divides by `2 · weight` exactly for every numerator the fusion
/// forms: `floor(n / (2w)) = (n · M) >> 20` with `M = ceil(2^20 / (2w))` for
/// `0 <= n <= 2 · FUSE_MAX_SUM + w` (the error there, `n · (M · 2w − 2^20) / 2^20 / 2w`,
/// stays below `1 / 2w`; checked exhaustively by a test), and `n · M < 2^31`. Then
/// `round_half_away(a / w) = sign(a) · floor((2|a| + w) / (2w))`.
const fn fuse_divisor(weight: i32) -> i32 {
    let d = 2 * weight;
    ((1 << FUSE_SHIFT) + d - 1) / d
}

// No overflow: the largest numerator times the largest reciprocal (weight 2) fits an i32.
const _: () = assert!(
    ((2 * FUSE_MAX_SUM + 2 + MAX_TEMPORAL_K as i32) as i64 * (fuse_divisor(2) as i64)) < (1 << 31)
);

/// `round_half_away(a / weight)` for `|a| <= FUSE_MAX_SUM`, by [`fuse_divisor`]'s
/// reciprocal `mul`; branch-free, so that it vectorises.
#[inline(always)]
fn fuse_round(a: i32, weight: i32, mul: i32) -> i32 {
    let s = a >> 31; // 0, or -1 for a negative sum
    let mag = (a ^ s) - s;
    let q = ((2 * mag + weight) * mul) >> FUSE_SHIFT;
    (q ^ s) - s
}

/// Rigid transform from the current ego frame to a cached ego frame:
/// `p_prev = R(yaw) · p_cur + t`.
#[derive(Clone, Copy, Debug, Default)]
struct Xform {
    c: f64,
    s: f64,
    tx: f64,
    ty: f64,
}

impl Xform {
    fn between(prev: &EgoPose, cur: &EgoPose) -> Self {
        // world = P_cur + R(yaw_cur)·p_cur ;  p_prev = R(-yaw_prev)·(world - P_prev)
        let dyaw = cur.yaw - prev.yaw;
        let (sp, cp) = dm::sin_cos(prev.yaw);
        let (dx, dy) = (cur.x - prev.x, cur.y - prev.y);
        Self {
            c: dm::cos(dyaw),
            s: dm::sin(dyaw),
            tx: cp * dx + sp * dy,
            ty: -sp * dx + cp * dy,
        }
    }

    /// Cell index (row-major) of the cached grid containing the transformed point.
    #[inline]
    fn source_cell(&self, bev: &BevSpec, x: f64, y: f64) -> Option<usize> {
        let px = self.c * x - self.s * y + self.tx;
        let py = self.s * x + self.c * y + self.ty;
        let fx = ((px - bev.x0 as f64) / bev.res as f64).floor();
        let fy = ((py - bev.y0 as f64) / bev.res as f64).floor();
        // Written so that NaN fails the test.
        if fx >= 0.0 && fy >= 0.0 && fx < bev.nx as f64 && fy < bev.ny as f64 {
            Some(fy as usize * bev.nx + fx as usize)
        } else {
            None
        }
    }
}

/// Temporal BEV cache: the last K BEV maps with their ego poses, in a ring allocated once.
///
/// [`fuse`](Self::fuse) warps every cached map into the current ego frame (nearest cell;
/// outside the cached grid → zero point) and writes
/// `out = zp + round_half_away((2·(cur − zp) + Σ_k (warped_k − zp)) / (2 + m))` with `m`
/// the number of cached maps, then stores the current, unfused map. The first frame, and a
/// frame whose timestamp is not newer than the newest cached one (a log jump: the cache is
/// reset), give `out = current`.
#[derive(Debug, Clone)]
pub struct TemporalCache {
    bev: BevSpec,
    channels: usize,
    k: usize,
    map_len: usize,
    ring: Vec<i8>,
    poses: [EgoPose; MAX_TEMPORAL_K],
    count: usize,
    next: usize,
    /// Per-channel accumulator of one cell.
    acc: Vec<i32>,
    /// Run the AVX2 build ([`use_avx2_builds`]; only where the CPU has AVX2).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    avx2: bool,
}

impl TemporalCache {
    /// The default history length.
    pub const DEFAULT_K: usize = 2;

    /// Allocates a ring for `k` (1..=4) maps of `ny · nx · channels` elements.
    pub fn new(bev: &BevSpec, channels: usize, k: usize) -> Result<Self, PerceptionError> {
        let cells = check_bev(bev)?;
        if !(1..=MAX_TEMPORAL_K).contains(&k) {
            return Err(PerceptionError::BadConfig(format!(
                "temporal cache length {k} must be in 1..={MAX_TEMPORAL_K} (default {})",
                Self::DEFAULT_K
            )));
        }
        if channels == 0 {
            return Err(PerceptionError::BadConfig(
                "temporal cache needs at least one feature channel".into(),
            ));
        }
        let map_len = cells.checked_mul(channels).ok_or_else(|| {
            PerceptionError::BadConfig("temporal cache map size overflows".into())
        })?;
        Ok(Self {
            bev: *bev,
            channels,
            k,
            map_len,
            ring: vec![0; map_len * k],
            poses: [EgoPose::default(); MAX_TEMPORAL_K],
            count: 0,
            next: 0,
            acc: vec![0; channels],
            avx2: use_avx2_builds(),
        })
    }

    /// For every cell of the grid taken at `cur` (row-major), the cell of the grid taken at
    /// `prev` that [`fuse`](Self::fuse) reads when it warps that cached map, or `-1` when
    /// it falls outside (the zero point is used). The warp geometry of `fuse`, exported
    /// for training code; allocates (not for frames).
    pub fn warp_sources(bev: &BevSpec, prev: &EgoPose, cur: &EgoPose) -> Vec<i32> {
        let xf = Xform::between(prev, cur);
        let mut out = Vec::with_capacity(bev.nx * bev.ny);
        for iy in 0..bev.ny {
            for ix in 0..bev.nx {
                let (x, y) = bev.centre(ix, iy);
                out.push(
                    xf.source_cell(bev, x as f64, y as f64)
                        .map_or(-1, |c| c as i32),
                );
            }
        }
        out
    }

    /// Elements of one BEV map: `ny · nx · channels`.
    pub fn map_len(&self) -> usize {
        self.map_len
    }

    /// Maps currently cached (0..=K).
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when nothing is cached (first frame, or just reset).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Forgets every cached map; the next frame passes through unfused.
    pub fn reset(&mut self) {
        self.count = 0;
        self.next = 0;
    }

    /// Fuses `current` (taken at `ego`, zero point `zp`) with the warped cached maps into
    /// `out`, then caches `current`. No allocation.
    pub fn fuse(
        &mut self,
        current: &[i8],
        zp: i8,
        ego: &EgoPose,
        out: &mut [i8],
    ) -> Result<(), PerceptionError> {
        check_size(
            "temporal cache current BEV map",
            current.len(),
            self.map_len,
        )?;
        check_size("temporal cache output BEV map", out.len(), self.map_len)?;
        if self.count > 0 {
            let newest = (self.next + self.k - 1) % self.k;
            if ego.stamp_ns <= self.poses[newest].stamp_ns {
                self.reset();
            }
        }
        if self.count == 0 {
            out.copy_from_slice(current);
        } else {
            let m = self.count;
            let mut xf = [Xform::default(); MAX_TEMPORAL_K];
            let mut slots = [0usize; MAX_TEMPORAL_K];
            for j in 0..m {
                // Oldest first; the order does not matter for the integer sum.
                let slot = (self.next + self.k - m + j) % self.k;
                slots[j] = slot;
                xf[j] = Xform::between(&self.poses[slot], ego);
            }
            let c = self.channels;
            let weight = 2 + m as i32;
            let zpw = zp as i32;
            let (ring, acc) = (&self.ring, &mut self.acc[..c]);
            let job = FuseJob {
                bev: &self.bev,
                xf: &xf[..m],
                slots: &slots[..m],
                ring,
                map_len: self.map_len,
                current,
                zp: zpw,
                weight,
                mul: fuse_divisor(weight),
            };
            #[cfg(target_arch = "x86_64")]
            if self.avx2 {
                // SAFETY: `avx2` is true only where `use_avx2_builds()` (called by `new`)
                // saw `is_x86_feature_detected!("avx2")` hold, and tests only ever clear
                // it; AVX2 is all `fuse_cells_avx2` requires.
                unsafe { fuse_cells_avx2(&job, acc, out) };
            } else {
                fuse_cells(&job, acc, out);
            }
            #[cfg(not(target_arch = "x86_64"))]
            fuse_cells(&job, acc, out);
        }
        let slot = self.next;
        self.ring[slot * self.map_len..(slot + 1) * self.map_len].copy_from_slice(current);
        self.poses[slot] = *ego;
        self.next = (self.next + 1) % self.k;
        self.count = (self.count + 1).min(self.k);
        Ok(())
    }

    /// Samples `prev` (taken at `prev_pose`) into the ego frame of `cur_pose`: for each
    /// current cell centre, ego → world with `cur_pose`, world → ego with `prev_pose`,
    /// nearest cached cell; outside → `zp`. On a size mismatch `out` is filled with `zp`
    /// (use [`try_warp`](Self::try_warp) to get the error). No allocation. The reference
    /// for the warp geometry [`fuse`](Self::fuse) uses; compiled for tests only.
    #[cfg(test)]
    fn warp(
        bev: &BevSpec,
        channels: usize,
        prev: &[i8],
        prev_pose: &EgoPose,
        cur_pose: &EgoPose,
        zp: i8,
        out: &mut [i8],
    ) {
        if Self::try_warp(bev, channels, prev, prev_pose, cur_pose, zp, out).is_err() {
            out.fill(zp);
        }
    }

    /// [`warp`](Self::warp) that reports a size mismatch instead of filling `zp`.
    #[cfg(test)]
    fn try_warp(
        bev: &BevSpec,
        channels: usize,
        prev: &[i8],
        prev_pose: &EgoPose,
        cur_pose: &EgoPose,
        zp: i8,
        out: &mut [i8],
    ) -> Result<(), PerceptionError> {
        let want = bev
            .nx
            .checked_mul(bev.ny)
            .and_then(|v| v.checked_mul(channels))
            .unwrap_or(usize::MAX);
        check_size("warp source BEV map", prev.len(), want)?;
        check_size("warp output BEV map", out.len(), want)?;
        let xf = Xform::between(prev_pose, cur_pose);
        for iy in 0..bev.ny {
            for ix in 0..bev.nx {
                let (x, y) = bev.centre(ix, iy);
                let o = (iy * bev.nx + ix) * channels;
                let dst = &mut out[o..o + channels];
                match xf.source_cell(bev, x as f64, y as f64) {
                    Some(cell) => {
                        dst.copy_from_slice(&prev[cell * channels..(cell + 1) * channels])
                    }
                    None => dst.fill(zp),
                }
            }
        }
        Ok(())
    }
}

/// What [`fuse_cells`] reads.
struct FuseJob<'a> {
    bev: &'a BevSpec,
    /// Per cached map (`m` of them): the transform into it and its ring slot.
    xf: &'a [Xform],
    slots: &'a [usize],
    ring: &'a [i8],
    map_len: usize,
    current: &'a [i8],
    zp: i32,
    /// `2 + m`, and its [`fuse_divisor`].
    weight: i32,
    mul: i32,
}

/// The per-frame loop of [`TemporalCache::fuse`] once there is history: every cell's
/// `2 (cur − zp) + Σ_j (warped_j − zp)` in `acc` (one cell's channels), then
/// `sat(zp + round_half_away(acc / (2 + m)))`.
#[inline(always)]
fn fuse_cells(job: &FuseJob, acc: &mut [i32], out: &mut [i8]) {
    let (bev, c, zpw) = (job.bev, acc.len(), job.zp);
    for iy in 0..bev.ny {
        for ix in 0..bev.nx {
            let (x, y) = bev.centre(ix, iy);
            let o = (iy * bev.nx + ix) * c;
            for (a, &q) in acc.iter_mut().zip(&job.current[o..o + c]) {
                *a = 2 * (q as i32 - zpw);
            }
            for (xf, &slot) in job.xf.iter().zip(job.slots) {
                // Outside the cached grid the warped value is the zero point: adds 0.
                if let Some(cell) = xf.source_cell(bev, x as f64, y as f64) {
                    let s = slot * job.map_len + cell * c;
                    for (a, &q) in acc.iter_mut().zip(&job.ring[s..s + c]) {
                        *a += q as i32 - zpw;
                    }
                }
            }
            for (d, &a) in out[o..o + c].iter_mut().zip(acc.iter()) {
                // |a| <= 255 · weight <= FUSE_MAX_SUM: in fuse_round's exact range.
                *d = (zpw + fuse_round(a, job.weight, job.mul)).clamp(-128, 127) as i8;
            }
        }
    }
}

/// [`fuse_cells`] compiled for AVX2 (integer sums 8 wide; the cell transform's `f64`
/// arithmetic is the same IEEE operations, no fused multiply-add, so the same cells).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fuse_cells_avx2(job: &FuseJob, acc: &mut [i32], out: &mut [i8]) {
    fuse_cells(job, acc, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::FRAC_PI_2;

    #[test]
    fn the_fusion_reciprocal_divides_exactly_over_its_whole_range() {
        for weight in 2..=(2 + MAX_TEMPORAL_K as i32) {
            let mul = fuse_divisor(weight);
            assert!(i64::from(2 * FUSE_MAX_SUM + weight) * i64::from(mul) < 1 << 31);
            for a in -FUSE_MAX_SUM..=FUSE_MAX_SUM {
                let want = div_round(i64::from(a), i64::from(weight));
                assert_eq!(
                    i64::from(fuse_round(a, weight, mul)),
                    want,
                    "{a} / {weight}"
                );
            }
        }
    }

    fn pose(stamp_ns: u64, x: f64, y: f64, yaw: f64) -> EgoPose {
        EgoPose {
            stamp_ns,
            x,
            y,
            yaw,
            ..EgoPose::default()
        }
    }

    /// A map with value `v` at the cell containing ego point (x, y), `zp` elsewhere.
    fn blob(bev: &BevSpec, ch: usize, x: f32, y: f32, v: i8, zp: i8) -> Vec<i8> {
        let mut m = vec![zp; bev.nx * bev.ny * ch];
        let (ix, iy) = bev.cell(x, y).unwrap();
        let o = (iy * bev.nx + ix) * ch;
        m[o..o + ch].fill(v);
        m
    }

    fn cells_with(bev: &BevSpec, ch: usize, m: &[i8], v: i8) -> Vec<(usize, usize)> {
        (0..bev.ny)
            .flat_map(|iy| (0..bev.nx).map(move |ix| (ix, iy)))
            .filter(|&(ix, iy)| m[(iy * bev.nx + ix) * ch] == v)
            .collect()
    }

    #[test]
    fn the_avx2_build_fuses_the_same_bytes_as_the_baseline() {
        let bev = BevSpec::DEFAULT;
        let ch = 9;
        let mut fast = TemporalCache::new(&bev, ch, 3).unwrap();
        let mut base = fast.clone();
        base.avx2 = false;
        let mut rng = redline_runtime::rng::SplitMix64::new(5);
        let (mut a, mut b) = (vec![0i8; fast.map_len], vec![0i8; fast.map_len]);
        for frame in 1..6u64 {
            let cur: Vec<i8> = (0..fast.map_len).map(|_| rng.next_u64() as i8).collect();
            let pose = EgoPose {
                stamp_ns: frame * 33_000_000,
                x: 0.7 * frame as f64,
                y: 0.1 * frame as f64,
                yaw: 0.03 * frame as f64,
                ..EgoPose::default()
            };
            for zp in [-128i8, 3] {
                let (mut f, mut g) = (fast.clone(), base.clone());
                f.fuse(&cur, zp, &pose, &mut a).unwrap();
                g.fuse(&cur, zp, &pose, &mut b).unwrap();
                assert_eq!(a, b, "frame {frame}, zp {zp}, avx2 {}", fast.avx2);
            }
            fast.fuse(&cur, -128, &pose, &mut a).unwrap();
            base.fuse(&cur, -128, &pose, &mut b).unwrap();
        }
    }

    #[test]
    fn warp_keeps_world_points_fixed_when_driving_forward() {
        let bev = BevSpec::DEFAULT;
        let ch = 2;
        // World point P = (10.5, 2.5) seen from the origin.
        let prev = blob(&bev, ch, 10.5, 2.5, 99, -3);
        let p0 = pose(0, 0.0, 0.0, 0.0);
        let p1 = pose(100, 3.0, 0.0, 0.0);
        let mut out = vec![0i8; prev.len()];
        TemporalCache::warp(&bev, ch, &prev, &p0, &p1, -3, &mut out);
        // After 3 m forward, P is 3 cells further back.
        assert_eq!(
            cells_with(&bev, ch, &out, 99),
            vec![bev.cell(7.5, 2.5).unwrap()]
        );
        // The strip that came into view at the front is the zero point.
        let (fx, fy) = bev.cell(63.5, 0.5).unwrap();
        assert_eq!(out[(fy * bev.nx + fx) * ch], -3);

        // Same motion somewhere else in the world with a heading: still 3 cells.
        let h = 0.7;
        let q0 = pose(0, 100.0, -50.0, h);
        let q1 = pose(100, 100.0 + 3.0 * dm::cos(h), -50.0 + 3.0 * dm::sin(h), h);
        TemporalCache::warp(&bev, ch, &prev, &q0, &q1, -3, &mut out);
        assert_eq!(
            cells_with(&bev, ch, &out, 99),
            vec![bev.cell(7.5, 2.5).unwrap()]
        );
    }

    #[test]
    fn warp_rotates_with_ego_yaw() {
        let bev = BevSpec::DEFAULT;
        let prev = blob(&bev, 1, 10.5, 2.5, 50, 0);
        let p0 = pose(0, 0.0, 0.0, 0.0);
        // Ego turns 90° left in place: a point ahead appears on the right.
        let p1 = pose(100, 0.0, 0.0, FRAC_PI_2);
        let mut out = vec![0i8; prev.len()];
        TemporalCache::warp(&bev, 1, &prev, &p0, &p1, 0, &mut out);
        assert_eq!(
            cells_with(&bev, 1, &out, 50),
            vec![bev.cell(2.5, -10.5).unwrap()]
        );
        // Wrong sizes fill the zero point, no panic; try_warp reports it.
        let mut short = vec![9i8; 10];
        TemporalCache::warp(&bev, 1, &prev, &p0, &p1, 4, &mut short);
        assert!(short.iter().all(|&v| v == 4));
        assert!(TemporalCache::try_warp(&bev, 1, &prev, &p0, &p1, 4, &mut short).is_err());
        // Non-finite poses give the zero point everywhere.
        let bad = pose(100, f64::NAN, 0.0, 0.0);
        TemporalCache::warp(&bev, 1, &prev, &p0, &bad, 4, &mut out);
        assert!(out.iter().all(|&v| v == 4));
    }

    #[test]
    fn fuse_weights_current_twice_each_cached_once() {
        let bev = BevSpec::DEFAULT;
        let ch = 3;
        let zp = 5;
        let mut tc = TemporalCache::new(&bev, ch, 2).unwrap();
        let n = tc.map_len();
        let still = |t| pose(t, 10.0, 20.0, 0.3);
        let mut out = vec![0i8; n];
        // First frame passes through.
        let a = vec![zp + 30; n];
        tc.fuse(&a, zp, &still(1), &mut out).unwrap();
        assert_eq!(out, a);
        assert_eq!(tc.len(), 1);
        // (2·0 + 30) / 3 = 10 -> zp + 10.
        let b = vec![zp; n];
        tc.fuse(&b, zp, &still(2), &mut out).unwrap();
        assert!(out.iter().all(|&v| v == zp + 10), "{:?}", &out[..3]);
        // K = 2: (2·(-20) + 0 + 30) / 4 = -2.5 -> -3 (half away from zero).
        let c = vec![zp - 20; n];
        tc.fuse(&c, zp, &still(3), &mut out).unwrap();
        assert!(out.iter().all(|&v| v == zp - 3), "{:?}", &out[..3]);
        assert_eq!(tc.len(), 2);
        // Oldest (a) dropped: (2·0 + 0 - 20) / 4 = -5.
        tc.fuse(&b, zp, &still(4), &mut out).unwrap();
        assert!(out.iter().all(|&v| v == zp - 5));
        // Saturation instead of wrap-around.
        let mut tc = TemporalCache::new(&bev, ch, 1).unwrap();
        tc.fuse(&vec![127; n], -128, &still(1), &mut out).unwrap();
        tc.fuse(&vec![127; n], -128, &still(2), &mut out).unwrap();
        assert!(out.iter().all(|&v| v == 127));
    }

    #[test]
    fn fuse_aligns_cached_features_by_ego_motion() {
        let bev = BevSpec::DEFAULT;
        let mut tc = TemporalCache::new(&bev, 1, 2).unwrap();
        let mut out = vec![0i8; tc.map_len()];
        tc.fuse(
            &blob(&bev, 1, 20.5, -4.5, 90, 0),
            0,
            &pose(0, 0.0, 0.0, 0.0),
            &mut out,
        )
        .unwrap();
        // Drive 5 m: the same world point is seen at x = 15.5 now, in both maps.
        tc.fuse(
            &blob(&bev, 1, 15.5, -4.5, 90, 0),
            0,
            &pose(1, 5.0, 0.0, 0.0),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            cells_with(&bev, 1, &out, 90),
            vec![bev.cell(15.5, -4.5).unwrap()]
        );
    }

    #[test]
    fn fuse_resets_when_time_does_not_advance() {
        let bev = BevSpec::DEFAULT;
        let mut tc = TemporalCache::new(&bev, 1, 3).unwrap();
        let n = tc.map_len();
        let mut out = vec![0i8; n];
        for t in 1..=3 {
            tc.fuse(&vec![60; n], 0, &pose(t * 100, 0.0, 0.0, 0.0), &mut out)
                .unwrap();
        }
        assert_eq!(tc.len(), 3);
        // Time goes backwards: cache reset, output is the current map unchanged.
        let cur = vec![-9; n];
        tc.fuse(&cur, 0, &pose(50, 0.0, 0.0, 0.0), &mut out)
            .unwrap();
        assert_eq!(out, cur);
        assert_eq!(tc.len(), 1);
        // Same timestamp again: also a reset.
        tc.fuse(&vec![30; n], 0, &pose(50, 0.0, 0.0, 0.0), &mut out)
            .unwrap();
        assert!(out.iter().all(|&v| v == 30));
        assert_eq!(tc.len(), 1);
        // Explicit reset.
        tc.reset();
        assert!(tc.is_empty());
        tc.fuse(&vec![1; n], 0, &pose(60, 0.0, 0.0, 0.0), &mut out)
            .unwrap();
        assert!(out.iter().all(|&v| v == 1));
        // Sizes and configuration are checked.
        assert!(tc
            .fuse(&vec![1; n - 1], 0, &pose(70, 0.0, 0.0, 0.0), &mut out)
            .is_err());
        assert!(TemporalCache::new(&bev, 1, 0).is_err());
        assert!(TemporalCache::new(&bev, 1, 5).is_err());
        assert!(TemporalCache::new(&bev, 0, 2).is_err());
    }
}
