//! One sequential scan: MCUs in raster order, each block Huffman-decoded, dequantized and
//! inverse-transformed straight into its component plane; restart markers checked and the
//! DC predictors reset at each; after every MCU row the rows that are complete are handed
//! to colour conversion (when this scan completes the image), so they are converted while
//! still in cache.

use super::color::{self, RowScratch};
use super::huffman::{BitReader, HuffTable};
use super::idct;
use super::markers::{Frame, Scan};
use super::JpegError;

/// Where each zigzag position goes in the (transposed) block the IDCT takes: column-major,
/// `u * 8 + v` for horizontal frequency `u`, vertical frequency `v`.
const ZIGZAG: [usize; 64] = transpose_indices(ZIGZAG_NATURAL);

const fn transpose_indices(natural: [usize; 64]) -> [usize; 64] {
    let mut t = [0; 64];
    let mut k = 0;
    while k < 64 {
        t[k] = (natural[k] % 8) * 8 + natural[k] / 8;
        k += 1;
    }
    t
}

/// Natural (row-major) index of each zigzag position.
const ZIGZAG_NATURAL: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

/// One block of coefficients, aligned for the IDCT's vector loads; all zero between blocks.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Coefs(pub(crate) [i32; 64]);

/// Tables and buffers a scan reads and writes (all owned by the decoder, sized at `new`).
pub(crate) struct ScanContext<'a> {
    pub(crate) huff: &'a [HuffTable; 8],
    pub(crate) qt: &'a [[u16; 64]; 4],
    pub(crate) restart_interval: usize,
    pub(crate) planes: &'a mut [u8],
    pub(crate) scratch: &'a mut RowScratch,
    pub(crate) out: &'a mut [u8],
    /// Output rows already colour-converted.
    pub(crate) rows_out: &'a mut usize,
}

/// Decodes one block into `block` (8 rows of 8 pixels, `stride` apart).
#[inline]
#[allow(clippy::too_many_arguments)] // the hot loop passes what it holds
fn decode_block(
    r: &mut BitReader<'_>,
    dc: &HuffTable,
    ac: &HuffTable,
    q: &[u16; 64],
    pred: &mut i32,
    coef: &mut Coefs,
    block: &mut [u8],
    stride: usize,
) -> Result<(), JpegError> {
    r.ensure32();
    let s = r.decode(dc)? as u32;
    let diff = r.receive_extend(s);
    *pred = pred.wrapping_add(diff);
    let coef = &mut coef.0;
    coef[0] = pred.wrapping_mul(q[0] as i32);
    let any_ac = r.decode_ac(ac, q, &ZIGZAG, coef);
    let any_ac = match any_ac {
        Ok(any) => any,
        Err(e) => {
            *coef = [0; 64];
            return Err(e);
        }
    };
    if any_ac {
        idct::idct_8x8(coef, block, stride);
        // Back to all zeros for the next block (only blocks with AC coefficients dirty it).
        *coef = [0; 64];
    } else {
        let value = idct::dc_only_value(coef[0]);
        for row in 0..8 {
            block[row * stride..row * stride + 8].fill(value);
        }
    }
    Ok(())
}

/// Decodes the scan whose entropy-coded data starts at `data[pos]`; returns the position of
/// the marker that follows it.
pub(crate) fn decode_scan(
    data: &[u8],
    pos: usize,
    frame: &mut Frame,
    scan: &Scan,
    ctx: &mut ScanContext<'_>,
) -> Result<usize, JpegError> {
    let interleaved = scan.ncomp > 1;
    let (mcus_x, mcus_y) = if interleaved {
        (frame.mcus_x, frame.mcus_y)
    } else {
        let c = &frame.comps[scan.comps[0]];
        (c.width.div_ceil(8), c.height.div_ceil(8))
    };
    // Converting rows as they complete only works when this scan finishes the image.
    let completes_image = frame.comps[..frame.ncomp]
        .iter()
        .enumerate()
        .all(|(i, c)| c.scanned || scan.comps[..scan.ncomp].contains(&i));
    let mut preds = [0i32; 3];
    let mut coef = Coefs([0; 64]);
    let mut reader = BitReader::new(data, pos);
    let mut mcus_left = ctx.restart_interval;
    let mut next_rst = 0u8;
    for my in 0..mcus_y {
        for mx in 0..mcus_x {
            if ctx.restart_interval > 0 {
                if mcus_left == 0 {
                    reader = restart(&mut reader, data, next_rst)?;
                    next_rst = (next_rst + 1) & 7;
                    preds = [0; 3];
                    mcus_left = ctx.restart_interval;
                }
                mcus_left -= 1;
            }
            for (si, &ci) in scan.comps[..scan.ncomp].iter().enumerate() {
                let comp = &frame.comps[ci];
                let (bh, bv) = if interleaved {
                    (comp.h, comp.v)
                } else {
                    (1, 1)
                };
                let q = &ctx.qt[comp.tq];
                let (dc, ac) = (&ctx.huff[comp.dc_table], &ctx.huff[comp.ac_table]);
                let plane = &mut ctx.planes[comp.offset..comp.offset + comp.stride * comp.rows];
                for by in 0..bv {
                    for bx in 0..bh {
                        let x = (mx * bh + bx) * 8;
                        let y = (my * bv + by) * 8;
                        let at = y * comp.stride + x;
                        let block = plane.get_mut(at..at + 7 * comp.stride + 8).ok_or(
                            JpegError::Corrupt {
                                what: "block outside its component plane",
                            },
                        )?;
                        decode_block(
                            &mut reader,
                            dc,
                            ac,
                            q,
                            &mut preds[si],
                            &mut coef,
                            block,
                            comp.stride,
                        )?;
                    }
                }
            }
        }
        if reader.overran() {
            return Err(JpegError::Truncated {
                what: "entropy-coded data ends before the last block (or a marker interrupts it)",
            });
        }
        for &ci in &scan.comps[..scan.ncomp] {
            let comp = &mut frame.comps[ci];
            let bv = if interleaved { comp.v } else { 1 };
            comp.rows_done = ((my + 1) * bv * 8).min(comp.height);
        }
        if completes_image && my + 1 < mcus_y {
            let ready = color::rows_ready(frame);
            if ready > *ctx.rows_out {
                color::convert_rows(
                    frame,
                    ctx.planes,
                    *ctx.rows_out,
                    ready,
                    ctx.out,
                    ctx.scratch,
                );
                *ctx.rows_out = ready;
            }
        }
    }
    for &ci in &scan.comps[..scan.ncomp] {
        frame.comps[ci].scanned = true;
    }
    Ok(reader.finish_segment())
}

/// Ends the current restart interval: expects `RSTn` with `n == expected` and returns a
/// reader for the next interval.
fn restart<'a>(
    reader: &mut BitReader<'a>,
    data: &'a [u8],
    expected: u8,
) -> Result<BitReader<'a>, JpegError> {
    if reader.overran() {
        return Err(JpegError::Truncated {
            what: "restart interval's data ends early",
        });
    }
    let mut at = reader.finish_segment();
    // Fill bytes (FF FF ...) may precede a marker.
    while data.get(at..at + 2) == Some(&[0xff, 0xff]) {
        at += 1;
    }
    match data.get(at..at + 2) {
        Some(&[0xff, m]) if m == 0xd0 + expected => Ok(BitReader::new(data, at + 2)),
        Some(_) => Err(JpegError::Corrupt {
            what: "missing or out-of-order restart marker (RSTn)",
        }),
        None => Err(JpegError::Truncated {
            what: "data ends where a restart marker should be",
        }),
    }
}
