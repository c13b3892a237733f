//! Marker segments: the frame header (SOF0/SOF1), quantization tables (DQT), Huffman tables
//! (DHT), the restart interval (DRI), scan headers (SOS), Adobe's APP14 colour transform;
//! and the classification of every other marker as skipped or unsupported.
//!
//! Every length is checked against the data before it is used; nothing here allocates.

use super::huffman::HuffTable;
use super::JpegError;

/// Reads big-endian fields from the data, with bounds checks that turn into
/// [`JpegError::Truncated`].
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn u8(&mut self) -> Result<u8, JpegError> {
        let b = *self.data.get(self.pos).ok_or(JpegError::Truncated {
            what: "inside a marker segment",
        })?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, JpegError> {
        Ok(((self.u8()? as u16) << 8) | self.u8()? as u16)
    }

    /// The body of the segment whose length field is next (the length counts itself).
    pub(crate) fn segment(&mut self) -> Result<&'a [u8], JpegError> {
        let len = self.u16()? as usize;
        if len < 2 {
            return Err(JpegError::Corrupt {
                what: "marker segment length below 2",
            });
        }
        let body = self
            .data
            .get(self.pos..self.pos + len - 2)
            .ok_or(JpegError::Truncated {
                what: "a marker segment runs past the end of the data",
            })?;
        self.pos += len - 2;
        Ok(body)
    }

    /// The next marker code: skips fill bytes (`FF FF ...`); the byte before must be `FF`.
    pub(crate) fn marker(&mut self) -> Result<u8, JpegError> {
        if self.u8().map_err(|_| JpegError::Truncated {
            what: "no EOI marker",
        })? != 0xff
        {
            return Err(JpegError::Corrupt {
                what: "expected a marker (0xFF) between segments",
            });
        }
        loop {
            let m = self.u8().map_err(|_| JpegError::Truncated {
                what: "data ends inside a marker",
            })?;
            if m != 0xff {
                return Ok(m);
            }
        }
    }
}

/// One frame component as the SOF declares it, with its plane layout.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Component {
    pub(crate) id: u8,
    pub(crate) h: usize,
    pub(crate) v: usize,
    pub(crate) tq: usize,
    /// Sample columns and rows of this component (before upsampling).
    pub(crate) width: usize,
    pub(crate) height: usize,
    /// Output pixels per sample, horizontally and vertically (1 or 2).
    pub(crate) ratio_h: usize,
    pub(crate) ratio_v: usize,
    /// Where its plane starts in the planes buffer, bytes per plane row, plane rows.
    pub(crate) offset: usize,
    pub(crate) stride: usize,
    pub(crate) rows: usize,
    /// Huffman table slots chosen by the current scan.
    pub(crate) dc_table: usize,
    pub(crate) ac_table: usize,
    /// Sample rows decoded so far (for row-by-row colour conversion).
    pub(crate) rows_done: usize,
    /// Whether a scan has covered this component.
    pub(crate) scanned: bool,
}

/// The frame header and its derived layout.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Frame {
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) ncomp: usize,
    pub(crate) comps: [Component; 3],
    pub(crate) hmax: usize,
    pub(crate) vmax: usize,
    pub(crate) mcus_x: usize,
    pub(crate) mcus_y: usize,
}

/// What an SOF marker means for this decoder: `Ok(())` for SOF0/SOF1.
pub(crate) fn check_sof_kind(marker: u8) -> Result<(), JpegError> {
    let what = match marker {
        0xc0 | 0xc1 => return Ok(()),
        0xc2 => "progressive DCT (SOF2)",
        0xc3 => "lossless (SOF3)",
        0xc5..=0xc7 => "hierarchical (SOF5-7)",
        0xc9..=0xcb | 0xcd..=0xcf => "arithmetic coding (SOF9-15)",
        _ => "unknown frame type",
    };
    Err(JpegError::Unsupported { what })
}

/// Parses an SOF0/SOF1 body (precision, size, components) and lays out the planes.
pub(crate) fn parse_sof(body: &[u8]) -> Result<Frame, JpegError> {
    let mut c = Cursor { data: body, pos: 0 };
    let precision = c.u8()?;
    if precision != 8 {
        return Err(JpegError::Unsupported {
            what: "sample precision other than 8 bits (12-bit JPEG)",
        });
    }
    let height = c.u16()? as usize;
    let width = c.u16()? as usize;
    let ncomp = c.u8()? as usize;
    if height == 0 {
        return Err(JpegError::Unsupported {
            what: "height 0 in the frame header (height given by a DNL marker)",
        });
    }
    if width == 0 {
        return Err(JpegError::Corrupt {
            what: "width 0 in the frame header",
        });
    }
    match ncomp {
        1 | 3 => {}
        4 => {
            return Err(JpegError::Unsupported {
                what: "4 components (CMYK / YCCK)",
            })
        }
        _ => {
            return Err(JpegError::Unsupported {
                what: "component count other than 1 (grey) or 3 (YCbCr)",
            })
        }
    }
    if body.len() != 6 + 3 * ncomp {
        return Err(JpegError::Corrupt {
            what: "frame header length does not match its component count",
        });
    }
    let mut f = Frame {
        width,
        height,
        ncomp,
        ..Frame::default()
    };
    for i in 0..ncomp {
        let id = c.u8()?;
        let hv = c.u8()?;
        let tq = c.u8()? as usize;
        let (h, v) = ((hv >> 4) as usize, (hv & 15) as usize);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return Err(JpegError::Corrupt {
                what: "sampling factor outside 1..=4",
            });
        }
        if tq > 3 {
            return Err(JpegError::Corrupt {
                what: "quantization table index above 3",
            });
        }
        if f.comps[..i].iter().any(|p| p.id == id) {
            return Err(JpegError::Corrupt {
                what: "two components with the same id",
            });
        }
        f.comps[i] = Component {
            id,
            h,
            v,
            tq,
            ..Component::default()
        };
    }
    let comps = &mut f.comps[..ncomp];
    f.hmax = comps.iter().map(|c| c.h).max().unwrap_or(1);
    f.vmax = comps.iter().map(|c| c.v).max().unwrap_or(1);
    if ncomp > 1 && comps.iter().map(|c| c.h * c.v).sum::<usize>() > 10 {
        return Err(JpegError::Corrupt {
            what: "more than 10 blocks per MCU",
        });
    }
    f.mcus_x = width.div_ceil(8 * f.hmax);
    f.mcus_y = height.div_ceil(8 * f.vmax);
    let mut offset = 0;
    for comp in f.comps[..ncomp].iter_mut() {
        comp.ratio_h = ratio(f.hmax, comp.h)?;
        comp.ratio_v = ratio(f.vmax, comp.v)?;
        comp.width = (width * comp.h).div_ceil(f.hmax);
        comp.height = (height * comp.v).div_ceil(f.vmax);
        comp.stride = f.mcus_x * comp.h * 8;
        comp.rows = f.mcus_y * comp.v * 8;
        comp.offset = offset;
        offset += comp.stride * comp.rows;
    }
    Ok(f)
}

fn ratio(max: usize, factor: usize) -> Result<usize, JpegError> {
    match max / factor {
        1 if max == factor => Ok(1),
        2 if max == 2 * factor => Ok(2),
        _ => Err(JpegError::Unsupported {
            what: "chroma subsampling other than 1:1 or 2:1 in each direction",
        }),
    }
}

/// Bytes of component planes a frame of at most `width`×`height` can need (any sampling
/// factors up to 4, so at most 31 rows and columns of MCU padding), for 3 components.
pub(crate) fn planes_capacity(width: usize, height: usize) -> usize {
    3 * (width + 31) * (height + 31)
}

/// Parses a DQT body into the four table slots (zigzag order, 8- or 16-bit entries).
pub(crate) fn parse_dqt(
    body: &[u8],
    tables: &mut [[u16; 64]; 4],
    defined: &mut [bool; 4],
) -> Result<(), JpegError> {
    let mut c = Cursor { data: body, pos: 0 };
    while c.pos < body.len() {
        let pq_tq = c.u8()?;
        let (pq, tq) = (pq_tq >> 4, (pq_tq & 15) as usize);
        if tq > 3 || pq > 1 {
            return Err(JpegError::Corrupt {
                what: "quantization table id above 3 or precision above 16 bits",
            });
        }
        for q in tables[tq].iter_mut() {
            *q = if pq == 0 { c.u8()? as u16 } else { c.u16()? };
        }
        defined[tq] = true;
    }
    Ok(())
}

/// Parses a DHT body into the DC (0..4) and AC (4..8) table slots.
pub(crate) fn parse_dht(body: &[u8], tables: &mut [HuffTable; 8]) -> Result<(), JpegError> {
    let mut c = Cursor { data: body, pos: 0 };
    while c.pos < body.len() {
        let tc_th = c.u8()?;
        let (tc, th) = ((tc_th >> 4) as usize, (tc_th & 15) as usize);
        if tc > 1 || th > 3 {
            return Err(JpegError::Corrupt {
                what: "Huffman table class above 1 or id above 3",
            });
        }
        let mut counts = [0u8; 16];
        for n in counts.iter_mut() {
            *n = c.u8()?;
        }
        let total: usize = counts.iter().map(|&n| n as usize).sum();
        let symbols = body.get(c.pos..c.pos + total).ok_or(JpegError::Truncated {
            what: "Huffman table symbols run past their segment",
        })?;
        c.pos += total;
        tables[tc * 4 + th].build(&counts, symbols, tc == 0)?;
    }
    Ok(())
}

/// Parses a DRI body: MCUs per restart interval (0 = none).
pub(crate) fn parse_dri(body: &[u8]) -> Result<usize, JpegError> {
    if body.len() != 2 {
        return Err(JpegError::Corrupt {
            what: "DRI segment length is not 4",
        });
    }
    Ok(((body[0] as usize) << 8) | body[1] as usize)
}

/// A scan header: which frame components (by index) it codes, in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    pub(crate) ncomp: usize,
    pub(crate) comps: [usize; 3],
}

/// Parses an SOS body, sets each component's table slots, and checks that the scan is a
/// sequential (baseline) one whose tables are all defined.
pub(crate) fn parse_sos(
    body: &[u8],
    frame: &mut Frame,
    huff: &[HuffTable; 8],
    qt_defined: &[bool; 4],
) -> Result<Scan, JpegError> {
    let mut c = Cursor { data: body, pos: 0 };
    let ns = c.u8()? as usize;
    if ns == 0 || ns > frame.ncomp || body.len() != 4 + 2 * ns {
        return Err(JpegError::Corrupt {
            what: "scan header: bad component count or length",
        });
    }
    let mut scan = Scan {
        ncomp: ns,
        comps: [0; 3],
    };
    for i in 0..ns {
        let id = c.u8()?;
        let tables = c.u8()?;
        let idx = frame.comps[..frame.ncomp]
            .iter()
            .position(|comp| comp.id == id)
            .ok_or(JpegError::Corrupt {
                what: "scan names a component the frame does not have",
            })?;
        if scan.comps[..i].contains(&idx) {
            return Err(JpegError::Corrupt {
                what: "scan names a component twice",
            });
        }
        let (td, ta) = ((tables >> 4) as usize, (tables & 15) as usize);
        if td > 3 || ta > 3 || !huff[td].defined || !huff[4 + ta].defined {
            return Err(JpegError::Corrupt {
                what: "scan uses a Huffman table that no DHT defined",
            });
        }
        let comp = &mut frame.comps[idx];
        if !qt_defined[comp.tq] {
            return Err(JpegError::Corrupt {
                what: "component uses a quantization table that no DQT defined",
            });
        }
        comp.dc_table = td;
        comp.ac_table = 4 + ta;
        scan.comps[i] = idx;
    }
    let (ss, se, ahal) = (c.u8()?, c.u8()?, c.u8()?);
    if ss != 0 || se != 63 || ahal != 0 {
        return Err(JpegError::Unsupported {
            what: "spectral selection or successive approximation (progressive scan)",
        });
    }
    if ns > 1
        && scan.comps[..ns]
            .iter()
            .map(|&i| frame.comps[i].h * frame.comps[i].v)
            .sum::<usize>()
            > 10
    {
        return Err(JpegError::Corrupt {
            what: "more than 10 blocks per MCU in a scan",
        });
    }
    Ok(scan)
}

/// Adobe APP14: whether the body says "no colour transform" (RGB or CMYK stored as is).
pub(crate) fn adobe_no_transform(body: &[u8]) -> bool {
    body.len() >= 12 && &body[..5] == b"Adobe" && body[11] == 0
}

/// The body of a DHT segment holding the four Huffman tables of JPEG Annex K.3 (luminance
/// and chrominance, DC and AC, in slots 0 and 1), as libjpeg writes them. Motion-JPEG
/// cameras often send frames without a DHT and mean these tables.
pub(crate) const STANDARD_DHT: [u8; 416] = [
    0x00, 0x00, 0x01, 0x05, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x10, 0x00, 0x02,
    0x01, 0x03, 0x03, 0x02, 0x04, 0x03, 0x05, 0x05, 0x04, 0x04, 0x00, 0x00, 0x01, 0x7d, 0x01, 0x02,
    0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71,
    0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0, 0x24, 0x33,
    0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a,
    0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53,
    0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73,
    0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x92,
    0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9,
    0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
    0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2, 0xe3, 0xe4,
    0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
    0x01, 0x00, 0x03, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x11, 0x00, 0x02,
    0x01, 0x02, 0x04, 0x04, 0x03, 0x04, 0x07, 0x05, 0x04, 0x04, 0x00, 0x01, 0x02, 0x77, 0x00, 0x01,
    0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71, 0x13, 0x22,
    0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0, 0x15, 0x62,
    0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a,
    0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a,
    0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
    0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
    0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe2, 0xe3,
    0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
];
