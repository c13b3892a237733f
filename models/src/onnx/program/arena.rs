//! The arena every step's buffers live in: one allocation sized at load, each buffer at an
//! offset where no buffer alive at the same time lies ([`plan`]). Contract: buffers whose
//! step ranges overlap never overlap in memory; every offset is [`ALIGN`]-aligned. Load time
//! only (allocates freely); nothing here runs per frame.

/// Arena alignment of every buffer (cache line).
pub(crate) const ALIGN: usize = 64;

/// A buffer of the arena.
#[derive(Clone, Debug)]
pub(crate) struct Buffer {
    pub bytes: usize,
    pub offset: usize,
    /// First and last step that touch it (graph inputs: first = 0).
    pub first: usize,
    pub last: usize,
}

/// Assigns offsets: largest buffers first, each at the lowest aligned offset that overlaps no
/// already placed buffer whose lifetime overlaps its own. Returns the arena size.
pub(crate) fn plan(buffers: &mut [Buffer]) -> usize {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by(|&a, &b| buffers[b].bytes.cmp(&buffers[a].bytes).then(a.cmp(&b)));
    let mut placed: Vec<usize> = Vec::with_capacity(buffers.len());
    let mut total = 0;
    for &i in &order {
        let (f, l, size) = (buffers[i].first, buffers[i].last, buffers[i].bytes.max(1));
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .map(|&j| &buffers[j])
            .filter(|b| b.first <= l && f <= b.last)
            .map(|b| (b.offset, b.offset + b.bytes.max(1)))
            .collect();
        busy.sort_unstable();
        let mut off = 0;
        for (s, e) in busy {
            if off + size <= s {
                break;
            }
            off = off.max(e.div_ceil(ALIGN) * ALIGN);
        }
        buffers[i].offset = off;
        total = total.max(off + size);
        placed.push(i);
    }
    total.div_ceil(ALIGN) * ALIGN
}
