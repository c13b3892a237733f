//! BEV view transform: camera feature maps → the bird's-eye-view grid, by a projection table
//! built once.
//!
//! Contract: [`BevProjector::new`] validates the rig and grid and evaluates the camera
//! model `cells · cams · lifts` times (start-up only); [`BevProjector::project`] then only
//! looks the table up — per cell and lift height at most two views, each read at one
//! feature-map cell ([`BevSampling::Nearest`]) or linearly between the two feature rows
//! around the point ([`BevSampling::RowLinear`], weights in 1/256), and the taps' weighted
//! mean taken exactly in the zero-point-relative integer domain with halves rounded away
//! from the zero point.
//! With several lift heights a cell's output is their features concatenated, in the order
//! the heights were given (`lifts · C` channels). Per frame it never allocates, locks or
//! panics; bad sizes are a [`PerceptionError`].
//!
//! Why several heights: a cell sampled at one height `z` reads, along a camera ray, the
//! object that ray meets first; an object at range `r` is met by the rays to every cell
//! from `r · (h − z) / h` on (camera height `h`), so at `z > 0` its near edge in the BEV
//! lies in front of it (at 0.5 m under a 1.6 m camera, a car 50 m ahead covers the cells
//! from 34 m on), while at `z = 0` the edge is the object's own near face. Higher heights
//! see object bodies rather than their ground contact; the network takes both.
//!
//! Why row-linear sampling: on flat ground a feature row spans several metres of range far
//! away (at 50 m under a 1.6 m camera with a 726 px focal length and 2-pixel rows, about
//! 4 m), so with nearest sampling a run of cells along the ray reads one identical vector
//! and the heads cannot tell where in the run an object's contact line is. Interpolating
//! between rows makes the cell's features vary continuously with its range.
//!
//! Cost: O(cells · lifts · channels · taps) per frame (taps ≤ 2 nearest, ≤ 4 row-linear),
//! integer only; where the CPU has AVX2 an AVX2 build of the same loop (same bytes).
//! Measured (`cargo bench -p redline-bench --bench kernels`, section 4; seven cameras,
//! 64×64×32 features, two heights into 80×48): 29 µs nearest, 60 µs row-linear (AVX2; 46 and 199 µs with the baseline build).

use std::ops::Range;

use super::{check_bev, check_size, use_avx2_builds, PerceptionError};
use crate::types::BevSpec;

/// Most cameras a [`BevProjector`] accepts.
pub const MAX_CAMERAS: usize = 64;
/// Most lift heights a [`BevProjector`] samples.
pub const MAX_LIFTS: usize = 8;

/// Table entry meaning "no source".
const NO_SOURCE: u32 = u32::MAX;
/// A view's taps' weights sum to this (weights are in 1/256).
pub const VIEW_WEIGHT: u16 = 256;

/// How a BEV cell reads a camera's feature map at the pixel `(u, v)` its point projects to.
/// A property of the model (it was trained with one); the pipeline's `bev_sampling`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BevSampling {
    /// The feature-map cell containing the pixel: `(floor(u / stride_x), floor(v / stride_y))`.
    #[default]
    Nearest,
    /// Column as `Nearest`; rows linear between the two whose centres bracket the pixel:
    /// with `p = v / stride_y − 0.5`, rows `floor(p)` and `floor(p) + 1` weighted
    /// `256 − w` and `w = round(256 · (p − floor(p)))` (clamped to the map's first and last
    /// rows; a zero weight drops its tap).
    RowLinear,
}

impl BevSampling {
    /// The config / `meta.json` spelling.
    pub fn name(self) -> &'static str {
        match self {
            BevSampling::Nearest => "nearest",
            BevSampling::RowLinear => "row_linear",
        }
    }

    /// Every sampling, in declaration order.
    pub const ALL: [BevSampling; 2] = [BevSampling::Nearest, BevSampling::RowLinear];

    /// The sampling [`BevSampling::name`] spells `name`, if any.
    pub fn from_name(name: &str) -> Option<BevSampling> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One (cell, lift) entry: up to four taps (two per view, the more central view first),
/// as element offsets of channel 0 in the stacked feature maps and weights in 1/256; the
/// used taps come first, and their weights sum to `VIEW_WEIGHT` per view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    off: [u32; 4],
    w: [u16; 4],
    /// Taps used (0..=4).
    taps: u8,
    /// Views seen (0..=2): the weights sum to `views · VIEW_WEIGHT`.
    views: u8,
    /// Taps of the first view (the rest are the second's).
    first_taps: u8,
}

impl Entry {
    const NONE: Entry = Entry {
        off: [NO_SOURCE; 4],
        w: [0; 4],
        taps: 0,
        views: 0,
        first_taps: 0,
    };

    /// The taps of view `v` (0 or 1) as a range of tap indices.
    fn view_taps(&self, v: usize) -> Range<usize> {
        match (v, self.views) {
            (0, 1..) => 0..self.first_taps as usize,
            (1, 2) => self.first_taps as usize..self.taps as usize,
            _ => 0..0,
        }
    }

    /// View `v`'s heaviest tap (the first on a tie), if the view exists.
    fn main_tap(&self, v: usize) -> Option<u32> {
        let r = self.view_taps(v);
        let mut best: Option<(u16, u32)> = None;
        for t in r {
            if best.is_none_or(|(w, _)| self.w[t] > w) {
                best = Some((self.w[t], self.off[t]));
            }
        }
        best.map(|(_, o)| o)
    }

    fn push(&mut self, off: u32, w: u16) {
        if w == 0 {
            return;
        }
        let t = self.taps as usize;
        if t > 0 && self.off[t - 1] == off {
            self.w[t - 1] += w;
            return;
        }
        self.off[t] = off;
        self.w[t] = w;
        self.taps += 1;
    }
}

/// One feature-map cell a BEV cell samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BevSource {
    /// Camera index.
    pub cam: usize,
    /// Feature-map column (`u / stride_x`).
    pub col: usize,
    /// Feature-map row (`v / stride_y`).
    pub row: usize,
}

/// BEV view transform by a projection table built once.
///
/// For each BEV cell centre lifted to each height of `lifts_m` (ego frame) and each camera, the
/// projection closure gives a pixel `(u, v)`; if it lies in `[0, img_w) × [0, img_h)` the
/// cell samples feature-map cell `(floor(u / stride_x), floor(v / stride_y))` with
/// `stride_x = img_w / feat_w`, `stride_y = img_h / feat_h` (or two rows around it, see
/// [`BevSampling`]). A cell seen by several cameras
/// keeps the two most central views (smallest normalised distance of `(u, v)` from the image
/// centre; ties go to the lower camera index) and averages them. Cells seen by none get the
/// zero point. Each height has its own two sources per cell and its own `C` output
/// channels (heights in the order given); the choice of heights is the caller's (the
/// pipeline's `bev_lift_m`, which the model was trained with).
#[derive(Debug, Clone)]
pub struct BevProjector {
    nx: usize,
    ny: usize,
    channels: usize,
    cams: usize,
    feat_w: usize,
    feat_h: usize,
    /// Lift heights sampled (at least one).
    lifts: usize,
    sampling: BevSampling,
    /// Run the AVX2 build ([`use_avx2_builds`]; only where the CPU has AVX2).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    avx2: bool,
    /// Per cell (row-major) and lift height (inner): the taps.
    table: Vec<Entry>,
    coverage: f32,
}

impl BevProjector {
    /// Builds the projection table with [`BevSampling::Nearest`]. `project(cam, x, y, z)`
    /// maps an ego-frame point to pixel coordinates of camera `cam`'s `img_w × img_h` image,
    /// or `None` if it is not in view (e.g. behind the camera). Called `cells · cams ·
    /// lifts` times, here only.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bev: &BevSpec,
        cams: usize,
        img_w: usize,
        img_h: usize,
        feat_w: usize,
        feat_h: usize,
        channels: usize,
        lifts_m: &[f32],
        project: &dyn Fn(usize, f64, f64, f64) -> Option<(f64, f64)>,
    ) -> Result<Self, PerceptionError> {
        Self::with_sampling(
            bev,
            cams,
            img_w,
            img_h,
            feat_w,
            feat_h,
            channels,
            lifts_m,
            BevSampling::Nearest,
            project,
        )
    }

    /// As [`new`](Self::new), reading the feature maps as `sampling` says.
    #[allow(clippy::too_many_arguments)]
    pub fn with_sampling(
        bev: &BevSpec,
        cams: usize,
        img_w: usize,
        img_h: usize,
        feat_w: usize,
        feat_h: usize,
        channels: usize,
        lifts_m: &[f32],
        sampling: BevSampling,
        project: &dyn Fn(usize, f64, f64, f64) -> Option<(f64, f64)>,
    ) -> Result<Self, PerceptionError> {
        let cells = check_bev(bev)?;
        if cams == 0 || cams > MAX_CAMERAS {
            return Err(PerceptionError::BadConfig(format!(
                "BEV projector needs 1..={MAX_CAMERAS} cameras, got {cams}"
            )));
        }
        if img_w == 0 || img_h == 0 || feat_w == 0 || feat_h == 0 {
            return Err(PerceptionError::BadConfig(format!(
                "BEV projector image {img_w}x{img_h} and feature map {feat_w}x{feat_h} must \
                 be non-empty"
            )));
        }
        if feat_w > img_w || feat_h > img_h {
            return Err(PerceptionError::BadConfig(format!(
                "feature map {feat_w}x{feat_h} is larger than the image {img_w}x{img_h}; the \
                 backbone downsamples, so pass (image size, feature size) in that order"
            )));
        }
        if channels == 0 {
            return Err(PerceptionError::BadConfig(
                "BEV projector needs at least one feature channel".into(),
            ));
        }
        if lifts_m.is_empty() || lifts_m.len() > MAX_LIFTS {
            return Err(PerceptionError::BadConfig(format!(
                "BEV projector samples 1..={MAX_LIFTS} lift heights, got {}",
                lifts_m.len()
            )));
        }
        if let Some(bad) = lifts_m.iter().find(|h| !h.is_finite()) {
            return Err(PerceptionError::BadConfig(format!(
                "BEV lift height {bad} m is not finite"
            )));
        }
        let feat_len = cams
            .checked_mul(feat_h)
            .and_then(|v| v.checked_mul(feat_w))
            .and_then(|v| v.checked_mul(channels))
            .filter(|&v| v < NO_SOURCE as usize)
            .ok_or_else(|| {
                PerceptionError::BadConfig(format!(
                    "stacked feature maps {cams}x{feat_h}x{feat_w}x{channels} exceed 2^32 \
                     elements; reduce cameras, resolution or channels"
                ))
            })?;
        let _ = feat_len;
        let sx = img_w as f64 / feat_w as f64;
        let sy = img_h as f64 / feat_h as f64;
        let (half_w, half_h) = (img_w as f64 / 2.0, img_h as f64 / 2.0);
        // The (up to) two most central views of the point (x, y, z) and their taps.
        let two_most_central = |x: f64, y: f64, z: f64| -> Entry {
            // (centrality, camera, u, v); smaller centrality is more central.
            let mut best: [(f64, usize, f64, f64); 2] = [(f64::INFINITY, usize::MAX, 0.0, 0.0); 2];
            for c in 0..cams {
                let Some((u, v)) = project(c, x, y, z) else {
                    continue;
                };
                // Written so that NaN fails the test.
                if !(u >= 0.0 && u < img_w as f64 && v >= 0.0 && v < img_h as f64) {
                    continue;
                }
                let du = (u - half_w) / half_w;
                let dv = (v - half_h) / half_h;
                let d = du * du + dv * dv;
                if d < best[0].0 {
                    best[1] = best[0];
                    best[0] = (d, c, u, v);
                } else if d < best[1].0 {
                    best[1] = (d, c, u, v);
                }
            }
            let mut entry = Entry::NONE;
            for &(_, c, u, v) in best.iter().filter(|b| b.1 != usize::MAX) {
                let col = ((u / sx) as usize).min(feat_w - 1);
                let off = |row: usize| (((c * feat_h + row) * feat_w + col) * channels) as u32;
                match sampling {
                    BevSampling::Nearest => {
                        let row = ((v / sy) as usize).min(feat_h - 1);
                        entry.push(off(row), VIEW_WEIGHT);
                    }
                    BevSampling::RowLinear => {
                        let p = v / sy - 0.5;
                        let last = feat_h - 1;
                        if p <= 0.0 {
                            entry.push(off(0), VIEW_WEIGHT);
                        } else if p >= last as f64 {
                            entry.push(off(last), VIEW_WEIGHT);
                        } else {
                            let r0 = p as usize; // floor: p > 0
                            let w1 = ((p - r0 as f64) * f64::from(VIEW_WEIGHT)).round() as u16;
                            entry.push(off(r0), VIEW_WEIGHT - w1);
                            entry.push(off(r0 + 1), w1);
                        }
                    }
                }
                entry.views += 1;
                if entry.views == 1 {
                    entry.first_taps = entry.taps;
                }
            }
            entry
        };
        let mut table = Vec::with_capacity(cells * lifts_m.len());
        for iy in 0..bev.ny {
            for ix in 0..bev.nx {
                let (x, y) = bev.centre(ix, iy);
                for &lift_m in lifts_m {
                    table.push(two_most_central(x as f64, y as f64, lift_m as f64));
                }
            }
        }
        // A cell is seen when any of its heights has a source.
        let seen = table
            .chunks_exact(lifts_m.len())
            .filter(|entries| entries.iter().any(|e| e.views > 0))
            .count();
        Ok(Self {
            nx: bev.nx,
            ny: bev.ny,
            channels,
            cams,
            feat_w,
            feat_h,
            lifts: lifts_m.len(),
            sampling,
            avx2: use_avx2_builds(),
            table,
            coverage: seen as f32 / cells as f32,
        })
    }

    /// The table of lift height `lift` (an index into the heights given to `new`; empty
    /// past the last) as feature-map pixel indices, `(cam · feat_h + row) · feat_w + col`,
    /// of the (up to) two views of every BEV cell in row-major order, `-1` where a view is
    /// absent. With [`BevSampling::Nearest`] this is the whole table: [`project`](Self::project)
    /// averages the two (or copies the one, or writes the zero point for none); with
    /// `RowLinear` each view's heavier row (see [`source_taps`](Self::source_taps) for the
    /// table itself). For exporting the view transform to training code, so that it uses
    /// this table rather than a re-implementation; allocates (not for frames).
    pub fn source_pixels(&self, lift: usize) -> Vec<[i32; 2]> {
        let c = self.channels as u32;
        let pixel = |o: Option<u32>| o.map_or(-1, |o| (o / c) as i32);
        self.lift_entries(lift)
            .map(|e| [pixel(e.main_tap(0)), pixel(e.main_tap(1))])
            .collect()
    }

    /// The table of lift height `lift` (empty past the last) as every BEV cell's (row-major)
    /// four taps `(feature-map pixel index, weight in 1/256)`, unused taps `(-1, 0)`: the
    /// cell is `zp + round_half_away(Σ w · (q − zp) / Σ w)` (the zero point when `Σ w = 0`).
    /// For exporting to training code; allocates (not for frames).
    pub fn source_taps(&self, lift: usize) -> Vec<[(i32, u16); 4]> {
        let c = self.channels as u32;
        self.lift_entries(lift)
            .map(|e| {
                let mut taps = [(-1, 0); 4];
                for (t, slot) in taps.iter_mut().enumerate().take(e.taps as usize) {
                    *slot = ((e.off[t] / c) as i32, e.w[t]);
                }
                taps
            })
            .collect()
    }

    /// The entries of lift height `lift`, cells in row-major order (none past the last).
    fn lift_entries(&self, lift: usize) -> impl Iterator<Item = &Entry> {
        let n = if lift < self.lifts {
            self.table.len()
        } else {
            0
        };
        self.table[..n].iter().skip(lift).step_by(self.lifts)
    }

    /// How the feature maps are read.
    pub fn sampling(&self) -> BevSampling {
        self.sampling
    }

    /// Lift heights sampled: the output has `lifts · C` channels.
    pub fn lifts(&self) -> usize {
        self.lifts
    }

    /// Fraction of BEV cells seen by at least one camera (at any lift height).
    pub fn coverage(&self) -> f32 {
        self.coverage
    }

    /// Elements of the stacked feature maps `project` expects: `cams · feat_h · feat_w · C`.
    pub fn feats_len(&self) -> usize {
        self.cams * self.feat_h * self.feat_w * self.channels
    }

    /// Elements of the BEV output: `ny · nx · lifts · C`.
    pub fn output_len(&self) -> usize {
        self.ny * self.nx * self.lifts * self.channels
    }

    /// The (at most two) feature cells BEV cell `(ix, iy)` samples at the first lift
    /// height, most central view first (with `RowLinear`, each view's heavier row).
    /// Out-of-grid cells have none.
    pub fn sources(&self, ix: usize, iy: usize) -> [Option<BevSource>; 2] {
        self.sources_at(ix, iy, 0)
    }

    /// As [`sources`](Self::sources), at lift height `lift` (none past the last).
    pub fn sources_at(&self, ix: usize, iy: usize, lift: usize) -> [Option<BevSource>; 2] {
        if ix >= self.nx || iy >= self.ny || lift >= self.lifts {
            return [None; 2];
        }
        let entry = &self.table[(iy * self.nx + ix) * self.lifts + lift];
        [0, 1].map(|v| {
            entry.main_tap(v).map(|off| {
                let cell = off as usize / self.channels;
                BevSource {
                    cam: cell / (self.feat_w * self.feat_h),
                    row: (cell / self.feat_w) % self.feat_h,
                    col: cell % self.feat_w,
                }
            })
        })
    }

    /// Projects BEV rows `rows` (an `iy` range). `feats`: stacked NHWC feature maps
    /// (`cams · feat_h · feat_w · C`, zero point `zp`). `out` is either the whole BEV map
    /// (`ny · nx · L · C` for `L` lift heights, rows written in place) or just these rows
    /// (`rows.len() · nx · L · C`, e.g.
    /// a `chunks_mut` piece handed to one lane of a static parallel split). Private while
    /// the BEV stage projects the whole grid on one lane: make it public for a row split.
    ///
    /// Two sources average as `zp + round_half_away(((a − zp) + (b − zp)) / 2)`: exact
    /// in the real domain, with halves rounded away from the zero point.
    fn project_rows(
        &self,
        feats: &[i8],
        zp: i8,
        out: &mut [i8],
        rows: Range<usize>,
    ) -> Result<(), PerceptionError> {
        check_size("BEV projector feature maps", feats.len(), self.feats_len())?;
        if rows.start > rows.end || rows.end > self.ny {
            return Err(PerceptionError::BadRows {
                start: rows.start,
                end: rows.end,
                ny: self.ny,
            });
        }
        let c = self.channels;
        let row_len = self.nx * self.lifts * c;
        let base = if out.len() == self.output_len() {
            rows.start * row_len
        } else if out.len() == rows.len() * row_len {
            0
        } else {
            return Err(PerceptionError::BadSize {
                what: "BEV projector output (whole map, or exactly the requested rows)",
                got: out.len(),
                want: self.output_len(),
            });
        };
        // One table entry per (cell, lift height): the output's C-channel pieces in order.
        let per_row = self.nx * self.lifts;
        let cells = &self.table[rows.start * per_row..rows.end * per_row];
        let out = &mut out[base..base + rows.len() * row_len];
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only where `use_avx2_builds()` (called by
            // `with_sampling`) saw `is_x86_feature_detected!("avx2")` hold, and tests only
            // ever clear it; AVX2 is all `project_entries_avx2` requires.
            unsafe { project_entries_avx2(feats, zp, out, cells, c) };
            return Ok(());
        }
        project_entries(feats, zp, out, cells, c);
        Ok(())
    }

    /// Projects the whole grid: `project_rows(feats, zp, out, 0..ny)`.
    pub fn project(&self, feats: &[i8], zp: i8, out: &mut [i8]) -> Result<(), PerceptionError> {
        self.project_rows(feats, zp, out, 0..self.ny)
    }
}

/// The per-frame loop of [`BevProjector::project_rows`]: `out` (`cells.len() · c`) from the
/// table entries `cells`. Integer-only, so every instruction set gives the same bytes.
#[inline(always)]
fn project_entries(feats: &[i8], zp: i8, out: &mut [i8], cells: &[Entry], c: usize) {
    let zpw = zp as i32;
    for (dst, e) in out.chunks_exact_mut(c).zip(cells.iter()) {
        let tap = |t: usize| {
            let o = e.off[t] as usize;
            &feats[o..o + c]
        };
        const EVEN: [u16; 4] = [VIEW_WEIGHT, VIEW_WEIGHT, 0, 0];
        match (e.taps, e.views) {
            (0, _) => dst.fill(zp),
            // One view read at one row: a copy.
            (1, _) => dst.copy_from_slice(tap(0)),
            // Two views, one row each: their mean (constant weights, so it folds to a sum
            // and a shift).
            (2, 2) if e.w == EVEN => weighted_mean(dst, [tap(0), tap(1)], &EVEN, zpw, 9),
            // The general weighted mean; the weights sum to 256 or 512.
            (taps, views) => {
                let shift = if views == 2 { 9 } else { 8 };
                match taps {
                    2 => weighted_mean(dst, [tap(0), tap(1)], &e.w, zpw, shift),
                    3 => weighted_mean(dst, [tap(0), tap(1), tap(2)], &e.w, zpw, shift),
                    _ => weighted_mean(dst, [tap(0), tap(1), tap(2), tap(3)], &e.w, zpw, shift),
                }
            }
        }
    }
}

/// [`project_entries`] compiled for AVX2 (the weighted means vectorise 8 channels wide; the
/// baseline x86-64 target has no 32-bit vector multiply).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn project_entries_avx2(feats: &[i8], zp: i8, out: &mut [i8], cells: &[Entry], c: usize) {
    project_entries(feats, zp, out, cells, c)
}

/// `dst[k] = sat(zp + round_half_away(Σ_t w[t] · (src[t][k] − zp) / 2^shift))`, the
/// weights' sum being `2^shift`. Branch-free so that it vectorises: for `D = 2^shift`,
/// `round_half_away(a / D) = (a + D/2 − [a < 0]) >> shift` (arithmetic shift = floor).
#[inline(always)]
fn weighted_mean<const N: usize>(
    dst: &mut [i8],
    src: [&[i8]; N],
    w: &[u16; 4],
    zp: i32,
    shift: u32,
) {
    let n = dst.len();
    // Same lengths as `dst`, so the loop below needs no bounds checks.
    let src = src.map(|s| &s[..n]);
    let half = 1i32 << (shift - 1);
    for k in 0..n {
        let mut acc = 0i32;
        for t in 0..N {
            acc += i32::from(w[t]) * (i32::from(src[t][k]) - zp);
        }
        let h = (acc + half + (acc >> 31)) >> shift;
        dst[k] = (zp + h).clamp(-128, 127) as i8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::FRAC_PI_2;

    const IMG_W: usize = 64;
    const IMG_H: usize = 32;
    const CAM_HEIGHT: f64 = 1.5;

    /// Pinhole camera at the ego origin (height 1.5 m) looking along +x rotated by
    /// `yaws[cam]` (left positive), 90° horizontal field of view.
    fn pinhole(yaws: &[f64]) -> impl Fn(usize, f64, f64, f64) -> Option<(f64, f64)> + '_ {
        move |cam, x, y, z| {
            let (s, c) = redline_runtime::det_math::sin_cos(yaws[cam]);
            let xc = c * x + s * y;
            let yc = -s * x + c * y;
            let zc = z - CAM_HEIGHT;
            if xc < 0.1 {
                return None;
            }
            let f = IMG_W as f64 / 2.0;
            Some((
                IMG_W as f64 / 2.0 - f * yc / xc,
                IMG_H as f64 / 2.0 - f * zc / xc,
            ))
        }
    }

    /// A grid with a cell centred on y = 0.
    const ODD_BEV: BevSpec = BevSpec {
        nx: 40,
        ny: 49,
        res: 1.0,
        x0: -8.0,
        y0: -24.5,
    };

    #[test]
    fn projector_maps_straight_ahead_to_centre_column() {
        let cam = pinhole(&[0.0]);
        let (fw, fh) = (16, 8);
        let p = BevProjector::new(&ODD_BEV, 1, IMG_W, IMG_H, fw, fh, 1, &[0.0], &cam).unwrap();
        let (ix, iy) = ODD_BEV.cell(10.5, 0.0).unwrap();
        let [first, second] = p.sources(ix, iy);
        let s = first.expect("cell ahead is seen");
        assert_eq!(second, None);
        assert_eq!(s.cam, 0);
        assert_eq!(s.col, fw / 2); // u = 32 -> column 32 / 4
                                   // Below the horizon (ground is below the camera): lower image half.
        assert!(s.row >= fh / 2);
        // Behind the camera: unseen.
        let (bx, by) = ODD_BEV.cell(-5.5, 0.0).unwrap();
        assert_eq!(p.sources(bx, by), [None, None]);

        // Feature value = column index; the projected map carries it.
        let mut feats = vec![0i8; p.feats_len()];
        for r in 0..fh {
            for c in 0..fw {
                feats[r * fw + c] = c as i8;
            }
        }
        let mut out = vec![0i8; p.output_len()];
        p.project(&feats, -7, &mut out).unwrap();
        assert_eq!(out[iy * ODD_BEV.nx + ix], (fw / 2) as i8);
        assert_eq!(out[by * ODD_BEV.nx + bx], -7);
        // Left of the axis maps left of the centre column.
        let (lx, ly) = ODD_BEV.cell(10.5, 5.0).unwrap();
        assert!(out[ly * ODD_BEV.nx + lx] < (fw / 2) as i8);
    }

    #[test]
    fn projector_coverage() {
        // One forward camera with a 90° field of view sees the wedge |y| < x ahead; four
        // cameras at 90° steps see almost everything.
        let one = pinhole(&[0.0]);
        let p1 =
            BevProjector::new(&BevSpec::DEFAULT, 1, IMG_W, IMG_H, 16, 8, 1, &[0.5], &one).unwrap();
        let yaws = [0.0, FRAC_PI_2, 2.0 * FRAC_PI_2, -FRAC_PI_2];
        let four = pinhole(&yaws);
        let p4 =
            BevProjector::new(&BevSpec::DEFAULT, 4, IMG_W, IMG_H, 16, 8, 1, &[0.5], &four).unwrap();
        let c1 = p1.coverage();
        let c4 = p4.coverage();
        // Wedge |y| < x for 0 < x < 64 clipped to |y| < 24: (576 + 1920) / 3840 = 0.65.
        assert!((c1 - 0.65).abs() < 0.02, "{c1}");
        assert!(c4 > 0.9 && c4 <= 1.0, "{c4}");
        // Count by hand against the sources table.
        let seen = (0..BevSpec::DEFAULT.ny)
            .flat_map(|iy| (0..BevSpec::DEFAULT.nx).map(move |ix| (ix, iy)))
            .filter(|&(ix, iy)| p1.sources(ix, iy)[0].is_some())
            .count();
        assert_eq!(c1, seen as f32 / (80.0 * 48.0));
        let never = |_: usize, _: f64, _: f64, _: f64| None;
        let p0 = BevProjector::new(&BevSpec::DEFAULT, 1, IMG_W, IMG_H, 16, 8, 1, &[0.5], &never)
            .unwrap();
        assert_eq!(p0.coverage(), 0.0);
    }

    #[test]
    fn projector_averages_two_cameras_and_keeps_the_most_central() {
        // Two identical cameras: every seen cell has both; values average with
        // round-half-away from the zero point.
        let yaws = [0.0, 0.0];
        let cam = pinhole(&yaws);
        let (fw, fh, ch) = (8, 4, 2);
        let p = BevProjector::new(&ODD_BEV, 2, IMG_W, IMG_H, fw, fh, ch, &[0.0], &cam).unwrap();
        let per_cam = fw * fh * ch;
        let mut feats = vec![0i8; p.feats_len()];
        for i in 0..per_cam {
            feats[i] = if i % 2 == 0 { 10 } else { -10 };
            feats[per_cam + i] = if i % 2 == 0 { 21 } else { -21 };
        }
        let (ix, iy) = ODD_BEV.cell(10.5, 0.0).unwrap();
        let [a, b] = p.sources(ix, iy);
        assert_eq!((a.unwrap().cam, b.unwrap().cam), (0, 1));
        let mut out = vec![0i8; p.output_len()];
        let o = (iy * ODD_BEV.nx + ix) * ch;
        p.project(&feats, 0, &mut out).unwrap();
        assert_eq!(&out[o..o + 2], &[16, -16]); // 15.5 -> 16, -15.5 -> -16
                                                // Halves round away from the zero point, not away from 0 (a naive (a + b) / 2
                                                // would give 16 and -16 here):
                                                // zp = 20: 20 + round((-10 + 1) / 2 = -4.5 -> -5) = 15.
        p.project(&feats, 20, &mut out).unwrap();
        assert_eq!(out[o], 15);
        // zp = -20: -20 + round((10 - 1) / 2 = 4.5 -> 5) = -15.
        p.project(&feats, -20, &mut out).unwrap();
        assert_eq!(out[o + 1], -15);

        // Three cameras: straight ahead, the forward one is most central; the two yawed
        // ones tie and the lower index wins.
        let yaws3 = [0.0, 0.35, -0.35];
        let cam3 = pinhole(&yaws3);
        let p3 = BevProjector::new(&ODD_BEV, 3, IMG_W, IMG_H, fw, fh, 1, &[0.0], &cam3).unwrap();
        let [a, b] = p3.sources(ix, iy);
        assert_eq!((a.unwrap().cam, b.unwrap().cam), (0, 1));
        // Far to the right, the right-looking camera is the most central.
        let (rx, ry) = ODD_BEV.cell(10.5, -8.0).unwrap();
        assert_eq!(p3.sources(rx, ry)[0].unwrap().cam, 2);
    }

    #[test]
    fn projector_rows_split_matches_whole_and_checks_sizes() {
        let yaws = [0.0, FRAC_PI_2, -FRAC_PI_2];
        let cam = pinhole(&yaws);
        let (fw, fh, ch) = (8, 4, 3);
        let p = BevProjector::new(&BevSpec::DEFAULT, 3, IMG_W, IMG_H, fw, fh, ch, &[0.5], &cam)
            .unwrap();
        let feats: Vec<i8> = (0..p.feats_len()).map(|i| (i * 37 % 251) as i8).collect();
        let mut whole = vec![0i8; p.output_len()];
        p.project(&feats, 3, &mut whole).unwrap();
        // In-place rows into the whole buffer.
        let mut split = vec![0i8; p.output_len()];
        p.project_rows(&feats, 3, &mut split, 0..20).unwrap();
        p.project_rows(&feats, 3, &mut split, 20..48).unwrap();
        assert_eq!(whole, split);
        // Row chunks, as a lane would get them.
        let row_len = 80 * ch;
        let mut chunked = vec![0i8; p.output_len()];
        let (top, bottom) = chunked.split_at_mut(13 * row_len);
        p.project_rows(&feats, 3, top, 0..13).unwrap();
        p.project_rows(&feats, 3, bottom, 13..48).unwrap();
        assert_eq!(whole, chunked);

        assert!(matches!(
            p.project_rows(&feats, 3, &mut split, 40..49),
            Err(PerceptionError::BadRows { .. })
        ));
        assert!(matches!(
            p.project(&feats[1..], 3, &mut split),
            Err(PerceptionError::BadSize { .. })
        ));
        assert!(matches!(
            p.project(&feats, 3, &mut split[1..]),
            Err(PerceptionError::BadSize { .. })
        ));
        assert!(BevProjector::new(&BevSpec::DEFAULT, 0, 64, 32, 8, 4, 1, &[0.0], &cam).is_err());
        assert!(BevProjector::new(&BevSpec::DEFAULT, 1, 64, 32, 128, 4, 1, &[0.0], &cam).is_err());
        assert!(
            BevProjector::new(&BevSpec::DEFAULT, 1, 64, 32, 8, 4, 1, &[f32::NAN], &cam).is_err()
        );
        // A projection returning NaN is treated as unseen, not a panic.
        let nan = |_: usize, _: f64, _: f64, _: f64| Some((f64::NAN, 1.0));
        let pn = BevProjector::new(&BevSpec::DEFAULT, 1, 64, 32, 8, 4, 1, &[0.0], &nan).unwrap();
        assert_eq!(pn.coverage(), 0.0);
    }

    #[test]
    fn several_lift_heights_concatenate_the_single_height_projections() {
        let yaws = [0.0, FRAC_PI_2, -FRAC_PI_2];
        let cam = pinhole(&yaws);
        let (fw, fh, ch) = (16, 16, 3);
        let lifts = [0.5f32, 0.0, 1.2];
        let many = BevProjector::new(&BevSpec::DEFAULT, 3, IMG_W, IMG_H, fw, fh, ch, &lifts, &cam)
            .unwrap();
        assert_eq!(many.lifts(), 3);
        assert_eq!(many.output_len(), 48 * 80 * 3 * ch);
        let feats: Vec<i8> = (0..many.feats_len())
            .map(|i| (i * 53 % 241) as i8)
            .collect();
        let mut out = vec![0i8; many.output_len()];
        many.project(&feats, -7, &mut out).unwrap();
        let mut coverage = 0.0f32;
        for (l, &h) in lifts.iter().enumerate() {
            let one = BevProjector::new(&BevSpec::DEFAULT, 3, IMG_W, IMG_H, fw, fh, ch, &[h], &cam)
                .unwrap();
            assert_eq!(many.source_pixels(l), one.source_pixels(0), "lift {h}");
            assert_eq!(many.sources_at(40, 24, l), one.sources(40, 24));
            let mut single = vec![0i8; one.output_len()];
            one.project(&feats, -7, &mut single).unwrap();
            // Cell k's channels for height l sit at (k * lifts + l) * ch.
            for (k, want) in single.chunks_exact(ch).enumerate() {
                let o = (k * lifts.len() + l) * ch;
                assert_eq!(&out[o..o + ch], want, "cell {k}, lift {h}");
            }
            coverage = coverage.max(one.coverage());
        }
        assert!(many.coverage() >= coverage);
        assert!(many.source_pixels(3).is_empty());
        assert_eq!(many.sources_at(40, 24, 3), [None, None]);
        // Rows split the same way as with one height.
        let mut rows = vec![0i8; 10 * 80 * 3 * ch];
        many.project_rows(&feats, -7, &mut rows, 5..15).unwrap();
        assert_eq!(rows[..], out[5 * 80 * 3 * ch..15 * 80 * 3 * ch]);
        // Straight ahead the ground (0 m) moves through the feature rows faster than 0.5 m
        // does: more distinct sources along the ray, so finer range.
        let distinct = |l: usize| {
            let t = many.source_pixels(l);
            (0..80)
                .map(|ix| t[24 * 80 + ix])
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        };
        assert!(distinct(1) > distinct(0), "{} {}", distinct(1), distinct(0));
    }

    #[test]
    fn lift_heights_are_checked() {
        let cam = pinhole(&[0.0]);
        let new =
            |lifts: &[f32]| BevProjector::new(&BevSpec::DEFAULT, 1, 64, 32, 8, 4, 1, lifts, &cam);
        for bad in [
            &[][..],
            &[0.0; MAX_LIFTS + 1][..],
            &[0.5, f32::INFINITY][..],
        ] {
            let e = new(bad).unwrap_err().to_string();
            assert!(e.contains("lift height"), "{e}");
        }
        assert!(new(&[0.0; MAX_LIFTS]).is_ok());
    }

    #[test]
    fn row_linear_sampling_interpolates_rows_and_keeps_the_integer_mean_exact() {
        let yaws = [0.0, 0.0];
        let cam = pinhole(&yaws);
        let (fw, fh, ch) = (16, 16, 2);
        let build = |cams: usize, s: BevSampling| {
            BevProjector::with_sampling(&ODD_BEV, cams, IMG_W, IMG_H, fw, fh, ch, &[0.0], s, &cam)
                .unwrap()
        };
        let lin = build(1, BevSampling::RowLinear);
        let near = build(1, BevSampling::Nearest);
        assert_eq!(lin.sampling(), BevSampling::RowLinear);
        assert_eq!(lin.coverage(), near.coverage());
        // Every seen cell's taps weigh 256 in all, on one column and adjacent rows.
        for (taps, pix) in lin.source_taps(0).iter().zip(near.source_pixels(0)) {
            let used: Vec<_> = taps.iter().filter(|t| t.1 > 0).collect();
            if pix[0] < 0 {
                assert!(used.is_empty());
                continue;
            }
            assert_eq!(used.iter().map(|t| u32::from(t.1)).sum::<u32>(), 256);
            assert!(used.len() <= 2);
            if let [a, b] = used[..] {
                assert_eq!(b.0 - a.0, fw as i32, "adjacent rows of one column");
            }
            assert!(used.iter().any(|t| (t.0 - pix[0]).abs() <= fw as i32));
        }
        // Feature = 8 · row: the projection reads 8 · (v / stride − 0.5), so straight ahead
        // it takes more distinct values along the ray than nearest sampling, and follows
        // the exact interpolation to within rounding.
        let mut feats = vec![0i8; lin.feats_len()];
        for r in 0..fh {
            for c in 0..fw {
                let o = (r * fw + c) * ch;
                feats[o] = (8 * r) as i8;
                feats[o + 1] = -((8 * r) as i8);
            }
        }
        let run = |p: &BevProjector| {
            let mut out = vec![0i8; p.output_len()];
            p.project(&feats, 0, &mut out).unwrap();
            out
        };
        let (ol, on) = (run(&lin), run(&near));
        let (_, iy) = ODD_BEV.cell(10.5, 0.0).unwrap();
        let ahead = |out: &[i8]| -> Vec<i8> {
            (0..ODD_BEV.nx)
                .filter(|&ix| near.sources(ix, iy)[0].is_some())
                .map(|ix| out[(iy * ODD_BEV.nx + ix) * ch])
                .collect()
        };
        let distinct = |v: Vec<i8>| {
            v.into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        };
        assert!(distinct(ahead(&ol)) > distinct(ahead(&on)));
        for ix in 0..ODD_BEV.nx {
            let (x, y) = ODD_BEV.centre(ix, iy);
            let Some((_, v)) = cam(0, x as f64, y as f64, 0.0) else {
                continue;
            };
            if !(0.0..IMG_H as f64).contains(&v) || x < 1.0 {
                continue;
            }
            let p = (v / (IMG_H / fh) as f64 - 0.5).clamp(0.0, (fh - 1) as f64);
            let o = (iy * ODD_BEV.nx + ix) * ch;
            assert!(
                (f64::from(ol[o]) - 8.0 * p).abs() <= 0.5 + 8.0 / 512.0,
                "{ix}: {}",
                ol[o]
            );
            assert_eq!(ol[o + 1], -ol[o], "symmetric about the zero point");
        }

        // Two views, random features, any zero point: the integer weighted mean, checked
        // against the real-valued one rounded half away from the zero point.
        let two = build(2, BevSampling::RowLinear);
        let feats: Vec<i8> = (0..two.feats_len()).map(|i| (i * 97 % 253) as i8).collect();
        for zp in [-128i8, -3, 0, 17] {
            let mut out = vec![0i8; two.output_len()];
            two.project(&feats, zp, &mut out).unwrap();
            for (k, taps) in two.source_taps(0).iter().enumerate() {
                let wsum: f64 = taps.iter().map(|t| f64::from(t.1)).sum();
                for c in 0..ch {
                    let got = out[k * ch + c];
                    if wsum == 0.0 {
                        assert_eq!(got, zp);
                        continue;
                    }
                    let mean: f64 = taps
                        .iter()
                        .filter(|t| t.1 > 0)
                        .map(|t| {
                            f64::from(t.1)
                                * f64::from(feats[t.0 as usize * ch + c] as i32 - zp as i32)
                        })
                        .sum::<f64>()
                        / wsum;
                    let want = (f64::from(zp) + mean.signum() * (mean.abs() + 0.5).floor())
                        .clamp(-128.0, 127.0);
                    assert_eq!(f64::from(got), want, "cell {k} ch {c} zp {zp}");
                }
            }
        }
        // The AVX2 build and the baseline one give the same bytes (where this CPU has AVX2).
        let mut base = two.clone();
        base.avx2 = false;
        let mut a = vec![0i8; two.output_len()];
        let mut b = vec![0i8; two.output_len()];
        for zp in [-128i8, 5] {
            two.project(&feats, zp, &mut a).unwrap();
            base.project(&feats, zp, &mut b).unwrap();
            assert_eq!(a, b, "zp {zp}, avx2 {}", two.avx2);
        }
        assert_eq!(BevSampling::RowLinear.name(), "row_linear");
    }
}
