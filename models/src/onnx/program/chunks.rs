//! How a step splits its output rows into chunks over the lanes: the chunk counts
//! ([`chunks_for`], [`conv_chunks`]: fixed by the step's shape, never by the lane count),
//! the arena pointer the lanes share ([`SendPtr`]) and the row splitters that hand each
//! chunk its own rows of the step's output ([`split_rows`], [`split_rows_f32`]).
//!
//! Contract: the chunks of one call cover disjoint rows of the step's output buffer, which
//! the planner keeps apart from every buffer the step reads; a chunk's result depends only on
//! its rows, so any lane count gives the same bytes. Cost: no allocation.

use super::Buffer;
use crate::engine::{EngineError, Lanes};
use crate::onnx::kernels::Window;
use std::ops::Range;

/// Weights above this many bytes (a quarter of a 1 MiB L2) make a convolution split its
/// rows into no more chunks than there are lanes to run them ([`conv_chunks`]).
const WIDE_WEIGHTS_BYTES: usize = 256 * 1024;

/// The chunk count of a convolution's `rows` output rows costing `per_row` each, its
/// weights `weight_bytes` long, run by `width` lanes ([`crate::engine::Lanes::width`]):
/// [`chunks_for`], but at most `width` when the weights outgrow L2. Each chunk streams all
/// the layer's weights through the cache once (channel blocks outermost inside a chunk),
/// so ResNet-18's 7×7 layers (2.4 MB of weights, 7 rows) read them from L3 7 times in 7
/// chunks, and once per lane in `width`. Against the four chunks before, measured on the
/// Zen 4 VM with both binaries alternated (best of 6-7 rounds): one thread unchanged
/// (8.415 vs 8.418 ms, `redline model profile --engine native --in-sequence`), two
/// threads 4.33-4.36 -> 4.30 ms (`redline model bench --threads 2`), within the noise.
/// The outputs never depend on the split, so a lane-dependent count changes no bit.
pub(super) fn conv_chunks(rows: usize, per_row: usize, weight_bytes: usize, width: usize) -> usize {
    let chunks = chunks_for(rows, per_row);
    if weight_bytes > WIDE_WEIGHTS_BYTES {
        chunks.min(width.max(1))
    } else {
        chunks
    }
}

/// Fixed chunk count for `items` rows costing `per_item` units each: enough chunks for two
/// to eight lanes, never more than the rows, independent of the lane count.
pub(crate) fn chunks_for(items: usize, per_item: usize) -> usize {
    let work = items.saturating_mul(per_item.max(1));
    (work / 32_768).clamp(1, 16).min(items.max(1))
}

/// Chunks of a quantized global average pool over one `h × w × c` image ([`PoolSplit`](
/// super::PoolSplit)): [`chunks_for`] its rows (1: not split). Fixed at load, since the
/// partial sums' scratch is planned for it.
pub(crate) fn global_pool_chunks(h: usize, w: usize, c: usize) -> usize {
    chunks_for(h, w.saturating_mul(c))
}

/// A raw pointer that may cross to the lanes (each chunk writes its own disjoint range).
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut u8);
// SAFETY: the pointer is only dereferenced through `elems_mut`, whose callers hand every
// chunk a disjoint byte range of one live buffer (see `split_rows`).
unsafe impl Send for SendPtr {}
// SAFETY: as above: shared between lanes, but each lane writes only its own chunk.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// Elements `first..first + len` (of type `T`) of the buffer at byte `offset`.
    ///
    /// # Safety
    /// `offset + (first + len) · size_of::<T>()` must lie inside that buffer, `offset` must
    /// be aligned for `T`, and no other live reference may cover those elements.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn elems_mut<T>(&self, offset: usize, first: usize, len: usize) -> &mut [T] {
        // SAFETY: guaranteed by the caller (bounds, alignment, exclusivity); T is i8 or u8
        // here and buffers start at `ALIGN`-byte offsets of the aligned arena.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(offset).cast::<T>().add(first), len) }
    }

    /// The first `len` elements (of type `T`) of the buffer at byte `offset`, read-only:
    /// what a chunk running on another lane reads of a step's input.
    ///
    /// # Safety
    /// `offset + len · size_of::<T>()` must lie inside that buffer, `offset` must be aligned
    /// for `T`, and nothing may write those elements while the slice lives.
    pub(super) unsafe fn elems<T>(&self, offset: usize, len: usize) -> &[T] {
        // SAFETY: guaranteed by the caller (bounds, alignment, no writer).
        unsafe { std::slice::from_raw_parts(self.0.add(offset).cast::<T>(), len) }
    }
}

/// Splits rows `0..rows` of `row_len` bytes each of buffer `d` into the static partition of
/// [`chunks_for`] and runs `f(row range, those rows of d)` on each chunk over the lanes.
pub(super) fn split_rows(
    lanes: &dyn Lanes,
    base: SendPtr,
    d: &Buffer,
    rows: usize,
    row_len: usize,
    cost_per_row: usize,
    f: &(dyn Fn(Range<usize>, &mut [i8]) + Sync),
) {
    split_rows_in(
        lanes,
        base,
        d,
        rows,
        row_len,
        chunks_for(rows, cost_per_row),
        f,
    );
}

/// Rows `r` of a batch of images of `out_h` rows each, split at image boundaries: (image,
/// its rows, their place in `r` counted from `r.start`). A convolution runs one image at a
/// time.
pub(super) fn image_rows(
    r: Range<usize>,
    out_h: usize,
) -> impl Iterator<Item = (usize, Range<usize>, Range<usize>)> {
    let out_h = out_h.max(1);
    let start = r.start;
    let mut row = r.start;
    std::iter::from_fn(move || {
        if row >= r.end {
            return None;
        }
        let (b, oy) = (row / out_h, row % out_h);
        let end = ((b + 1) * out_h).min(r.end);
        let item = (b, oy..oy + (end - row), row - start..end - start);
        row = end;
        Some(item)
    })
}

/// [`split_rows`] over `rows` rows of `row_elems` `f32` elements of buffer `d`, each row
/// costing `cost_per_row`: `f(row range, those rows of d)`. An error if a chunk is not
/// 4-byte aligned (planned buffers are 64-byte aligned, so never).
pub(super) fn split_rows_f32(
    lanes: &dyn Lanes,
    base: SendPtr,
    d: &Buffer,
    (rows, row_elems, cost_per_row): (usize, usize, usize),
    f: &(dyn Fn(Range<usize>, &mut [f32]) + Sync),
) -> Result<(), EngineError> {
    let chunks = chunks_for(rows, cost_per_row);
    split_rows_f32_in(lanes, base, d, (rows, row_elems), chunks, f)
}

/// [`split_rows_f32`] into `chunks` chunks.
pub(super) fn split_rows_f32_in(
    lanes: &dyn Lanes,
    base: SendPtr,
    d: &Buffer,
    (rows, row_elems): (usize, usize),
    chunks: usize,
    f: &(dyn Fn(Range<usize>, &mut [f32]) + Sync),
) -> Result<(), EngineError> {
    let failed = std::sync::atomic::AtomicBool::new(false);
    split_rows_in(lanes, base, d, rows, row_elems * 4, chunks, &|r, out| {
        match bytemuck::try_cast_slice_mut::<i8, f32>(out) {
            Ok(y) => f(r, y),
            Err(_) => failed.store(true, std::sync::atomic::Ordering::Relaxed),
        }
    });
    if failed.into_inner() {
        return Err(EngineError::Run("a float buffer is not 4-byte aligned"));
    }
    Ok(())
}

/// The rows of an elementwise float step over `n` elements: one element a row, a cheap one.
pub(super) fn elementwise(n: usize) -> (usize, usize, usize) {
    (n, 1, 2)
}

/// The rows of a pooling step (`batch · out_h` output rows of `out_w · c` elements, each
/// element reading the window's `kh · kw` taps): (rows, row elements, cost of a row).
pub(super) fn window_rows(win: &Window, c: usize, batch: usize) -> (usize, usize, usize) {
    let row_len = win.out_w * c;
    (batch * win.out_h, row_len, row_len * win.kh * win.kw)
}

/// [`split_rows`] into `chunks` chunks.
pub(super) fn split_rows_in(
    lanes: &dyn Lanes,
    base: SendPtr,
    d: &Buffer,
    rows: usize,
    row_len: usize,
    chunks: usize,
    f: &(dyn Fn(Range<usize>, &mut [i8]) + Sync),
) {
    debug_assert!(rows * row_len <= d.bytes);
    lanes.for_each_chunk(rows, chunks, &|r: Range<usize>| {
        // SAFETY: rows `r` of `d` lie inside it (`rows · row_len <= d.bytes`); the chunks
        // of one call are disjoint, and `d` is the step's output, planned disjoint from
        // every buffer live at the step.
        let out = unsafe { base.elems_mut::<i8>(d.offset, r.start * row_len, r.len() * row_len) };
        f(r, out);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_rows_split_a_row_range_at_image_boundaries() {
        let got: Vec<_> = image_rows(3..11, 4).collect();
        assert_eq!(got, vec![(0, 3..4, 0..1), (1, 0..4, 1..5), (2, 0..3, 5..8)]);
        assert_eq!(image_rows(5..5, 4).count(), 0);
    }

    #[test]
    fn wide_weights_cap_the_chunks_at_the_lanes_and_nothing_else_does() {
        // ResNet-18's 7×7 layer: 7 rows, 2.4 MB of weights.
        let per_row = 512 * 9 * 512 * 7;
        assert_eq!(chunks_for(7, per_row), 7);
        assert_eq!(conv_chunks(7, per_row, 2_359_296, 1), 1);
        assert_eq!(conv_chunks(7, per_row, 2_359_296, 2), 2);
        assert_eq!(conv_chunks(7, per_row, 2_359_296, 16), 7);
        // Small weights: the shape's own count whatever the lanes; never more chunks than
        // rows, never 0.
        assert_eq!(conv_chunks(7, per_row, 36_864, 1), 7);
        assert_eq!(conv_chunks(56, 1 << 20, WIDE_WEIGHTS_BYTES, 1), 16);
        assert_eq!(conv_chunks(56, 1 << 20, WIDE_WEIGHTS_BYTES + 1, 4), 4);
        assert_eq!(conv_chunks(2, 1 << 20, 10 << 20, 8), 2);
        assert_eq!(conv_chunks(1, 1, 10 << 20, 0), 1);
        assert_eq!(conv_chunks(0, 0, 0, 1), 1);
    }
}
