//! Huffman tables (built from DHT segments) and the entropy-coded-segment bit reader.
//!
//! Decoding looks up the next [`LOOKUP_BITS`] bits in a table that gives the code length and
//! symbol for every code that short (nearly all codes in camera images); longer codes (up
//! to 16 bits) fall back to the canonical `maxcode` walk of JPEG Annex F. The bit reader
//! keeps a 64-bit buffer, refills 8 bytes at a time when they hold no `0xFF`, and undoes
//! byte stuffing (`FF 00`) byte by byte otherwise. At a marker or at the end of the data it
//! feeds zero bits and counts them, so that running past the real data is detected
//! ([`BitReader::overran`]) instead of read out of bounds.

use super::JpegError;

/// Bits looked up at once; longer codes take the slow path.
pub(crate) const LOOKUP_BITS: u32 = 9;

/// The run an `ac_fast` entry gives for end of block.
const EOB_RUN: i32 = 0xff;

/// One Huffman table, ready for decoding. Fixed size: no allocation when a DHT is loaded.
#[derive(Clone, Debug)]
pub(crate) struct HuffTable {
    /// Indexed by the next `LOOKUP_BITS` bits: `(code length << 8) | symbol`, 0 when the
    /// code is longer than `LOOKUP_BITS` (or no code starts with these bits).
    lookup: [u16; 1 << LOOKUP_BITS],
    /// Largest code of each length (1..=16), -1 when there is none.
    maxcode: [i32; 18],
    /// `values` index of the first code of each length, minus that code.
    valoffset: [i32; 17],
    /// Symbols in code order.
    values: [u8; 256],
    /// AC tables only, indexed like `lookup`: when the code *and* its value bits fit in
    /// `LOOKUP_BITS`, `(value << 16) | (run << 8) | bits used` (run `EOB_RUN` for end of
    /// block, value 0 for ZRL); 0 otherwise.
    ac_fast: [i32; 1 << LOOKUP_BITS],
    /// Whether a DHT has defined this table.
    pub(crate) defined: bool,
}

impl HuffTable {
    pub(crate) const EMPTY: HuffTable = HuffTable {
        lookup: [0; 1 << LOOKUP_BITS],
        maxcode: [-1; 18],
        valoffset: [0; 17],
        values: [0; 256],
        ac_fast: [0; 1 << LOOKUP_BITS],
        defined: false,
    };

    /// Builds the table from a DHT's 16 code-length counts and its symbols.
    /// `is_dc`: DC symbols are sizes 0..=11 (8-bit precision); checked here so the decoder
    /// never shifts by an out-of-range amount.
    pub(crate) fn build(
        &mut self,
        counts: &[u8; 16],
        symbols: &[u8],
        is_dc: bool,
    ) -> Result<(), JpegError> {
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        if total > 256 || total != symbols.len() {
            return Err(JpegError::Corrupt {
                what: "Huffman table: symbol count does not match its code-length counts",
            });
        }
        for &s in symbols {
            let bad = if is_dc { s > 11 } else { (s & 0x0f) > 10 };
            if bad {
                return Err(JpegError::Corrupt {
                    what: "Huffman table: symbol out of range for 8-bit baseline",
                });
            }
        }
        self.lookup = [0; 1 << LOOKUP_BITS];
        self.maxcode = [-1; 18];
        self.valoffset = [0; 17];
        self.values = [0; 256];
        self.values[..total].copy_from_slice(symbols);
        let mut code: u32 = 0;
        let mut k: usize = 0;
        for len in 1..=16u32 {
            let n = counts[len as usize - 1] as u32;
            if n > 0 {
                self.valoffset[len as usize] = k as i32 - code as i32;
                for _ in 0..n {
                    // Codes of this length must fit in `len` bits.
                    if code >= (1u32 << len) {
                        return Err(JpegError::Corrupt {
                            what: "Huffman table: more codes than fit in their lengths",
                        });
                    }
                    if len <= LOOKUP_BITS {
                        let shift = LOOKUP_BITS - len;
                        let first = (code << shift) as usize;
                        let entry = ((len as u16) << 8) | self.values[k] as u16;
                        for slot in &mut self.lookup[first..first + (1usize << shift)] {
                            *slot = entry;
                        }
                    }
                    code += 1;
                    k += 1;
                }
                self.maxcode[len as usize] = code as i32 - 1;
            }
            code <<= 1;
        }
        self.maxcode[17] = i32::MAX;
        self.ac_fast = [0; 1 << LOOKUP_BITS];
        if !is_dc {
            self.build_ac_fast();
        }
        self.defined = true;
        Ok(())
    }
}

impl HuffTable {
    fn build_ac_fast(&mut self) {
        for (look, fast) in self.ac_fast.iter_mut().enumerate() {
            let entry = self.lookup[look];
            if entry == 0 {
                continue;
            }
            let (len, rs) = ((entry >> 8) as u32, entry as u8);
            let (run, size) = ((rs >> 4) as i32, (rs & 15) as u32);
            if size == 0 {
                *fast = match run {
                    0 => (EOB_RUN << 8) | len as i32,
                    15 => (15 << 8) | len as i32, // ZRL: 15 zeros and a zero
                    _ => 0,
                };
                continue;
            }
            if len + size > LOOKUP_BITS {
                continue; // value bits beyond the lookahead
            }
            let bits = ((look as u32) >> (LOOKUP_BITS - len - size)) & ((1 << size) - 1);
            let v = extend(bits as i32, size);
            *fast = (v << 16) | (run << 8) | (len + size) as i32;
        }
    }
}

/// JPEG's EXTEND: `s` raw bits as a signed value (top bit 0 means negative).
#[inline(always)]
fn extend(v: i32, s: u32) -> i32 {
    if v < (1 << (s - 1)) {
        v - (1 << s) + 1
    } else {
        v
    }
}

/// Reads the bits of one entropy-coded segment (between SOS/RSTn and the next marker).
#[derive(Debug)]
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte of `data` to load.
    pub(crate) pos: usize,
    /// Bits, most significant first; the low `64 - nbits` bits are zero.
    bits: u64,
    nbits: u32,
    /// Zero bits fed in past a marker or the end of the data, still in `bits` (they are the
    /// last `padding` of the `nbits`).
    padding: u32,
}

const fn has_ff_byte(w: u64) -> bool {
    let x = !w;
    (x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080) != 0
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8], pos: usize) -> Self {
        BitReader {
            data,
            pos,
            bits: 0,
            nbits: 0,
            padding: 0,
        }
    }

    /// Whether a read took bits that are not in the data (truncated or corrupt segment).
    #[inline]
    pub(crate) fn overran(&self) -> bool {
        self.nbits < self.padding
    }

    /// Fills the buffer to at least 57 bits.
    #[inline]
    fn refill(&mut self) {
        if self.nbits <= 56 && self.pos + 8 <= self.data.len() && self.padding == 0 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.data[self.pos..self.pos + 8]);
            let w = u64::from_be_bytes(b);
            if !has_ff_byte(w) {
                let take = (64 - self.nbits) / 8;
                let filled = self.nbits + take * 8;
                self.bits |= w >> self.nbits;
                if filled < 64 {
                    self.bits &= !(u64::MAX >> filled);
                }
                self.nbits = filled;
                self.pos += take as usize;
                return;
            }
        }
        self.refill_slow();
    }

    #[cold]
    fn refill_slow(&mut self) {
        while self.nbits <= 56 {
            let byte = if self.padding > 0 || self.pos >= self.data.len() {
                None
            } else if self.data[self.pos] != 0xff {
                self.pos += 1;
                Some(self.data[self.pos - 1])
            } else {
                match self.data.get(self.pos + 1) {
                    Some(0x00) => {
                        self.pos += 2;
                        Some(0xff)
                    }
                    // A marker (or the data ends inside FF): stop before it.
                    _ => None,
                }
            };
            match byte {
                Some(b) => self.bits |= (b as u64) << (56 - self.nbits),
                None => self.padding = self.padding.saturating_add(8),
            }
            self.nbits += 8;
        }
    }

    /// The next `n` bits (1..=16) without consuming them.
    #[inline]
    fn peek(&mut self, n: u32) -> u32 {
        if self.nbits < n {
            self.refill();
        }
        (self.bits >> (64 - n)) as u32
    }

    #[inline]
    fn consume(&mut self, n: u32) {
        self.bits <<= n;
        self.nbits -= n;
    }

    /// Makes sure at least 32 bits are buffered (one symbol and its value).
    #[inline]
    pub(crate) fn ensure32(&mut self) {
        if self.nbits < 32 {
            self.refill();
        }
    }

    /// Decodes one Huffman symbol. Call [`Self::ensure32`] first.
    #[inline]
    pub(crate) fn decode(&mut self, t: &HuffTable) -> Result<u8, JpegError> {
        let look = (self.bits >> (64 - LOOKUP_BITS)) as usize;
        let entry = t.lookup[look];
        if entry != 0 {
            self.consume((entry >> 8) as u32);
            return Ok(entry as u8);
        }
        self.decode_slow(t)
    }

    #[cold]
    fn decode_slow(&mut self, t: &HuffTable) -> Result<u8, JpegError> {
        let code16 = self.peek(16) as i32;
        for len in (LOOKUP_BITS + 1)..=16 {
            let code = code16 >> (16 - len);
            if code <= t.maxcode[len as usize] {
                let idx = t.valoffset[len as usize] + code;
                self.consume(len);
                return match t.values.get(idx as usize) {
                    Some(&v) if idx >= 0 => Ok(v),
                    _ => Err(JpegError::Corrupt {
                        what: "Huffman code points outside its table",
                    }),
                };
            }
        }
        Err(JpegError::Corrupt {
            what: "invalid Huffman code in the entropy-coded data",
        })
    }

    /// Reads `s` bits (0..=16) and sign-extends them as JPEG's EXTEND does.
    /// Call [`Self::ensure32`] before the symbol this value belongs to.
    #[inline]
    pub(crate) fn receive_extend(&mut self, s: u32) -> i32 {
        if s == 0 {
            return 0;
        }
        let v = (self.bits >> (64 - s)) as i32;
        self.consume(s);
        extend(v, s)
    }

    /// Decodes the AC coefficients of one block (zigzag positions 1..64) into
    /// `coef[zigzag[k]]`, dequantized by `q[k]`; returns whether any is non-zero.
    ///
    /// The bit buffer lives in locals inside the loop (written back only around refills and
    /// slow decodes), so the compiler keeps it in registers.
    #[inline(always)]
    pub(crate) fn decode_ac(
        &mut self,
        ac: &HuffTable,
        q: &[u16; 64],
        zigzag: &[usize; 64],
        coef: &mut [i32; 64],
    ) -> Result<bool, JpegError> {
        let (mut bits, mut nbits) = (self.bits, self.nbits);
        let mut k = 1usize;
        let mut any = false;
        while k < 64 {
            if nbits < 32 {
                (self.bits, self.nbits) = (bits, nbits);
                self.refill();
                (bits, nbits) = (self.bits, self.nbits);
            }
            let fast = ac.ac_fast[(bits >> (64 - LOOKUP_BITS)) as usize];
            let (run, v) = if fast != 0 {
                let used = (fast & 0xff) as u32;
                bits <<= used;
                nbits -= used;
                let run = (fast >> 8) & 0xff;
                if run == EOB_RUN {
                    break;
                }
                (run as usize, fast >> 16)
            } else {
                (self.bits, self.nbits) = (bits, nbits);
                let rs = self.decode(ac)?;
                let (run, size) = ((rs >> 4) as usize, (rs & 15) as u32);
                let v = self.receive_extend(size);
                (bits, nbits) = (self.bits, self.nbits);
                if size == 0 && run != 15 {
                    break; // EOB (other runs with size 0 are treated as EOB, as libjpeg does)
                }
                (run, v)
            };
            k += run;
            if k > 63 {
                (self.bits, self.nbits) = (bits, nbits);
                return Err(JpegError::Corrupt {
                    what: "AC coefficient run past the end of its block",
                });
            }
            coef[zigzag[k]] = v.wrapping_mul(q[k] as i32);
            any |= v != 0;
            k += 1;
        }
        (self.bits, self.nbits) = (bits, nbits);
        Ok(any)
    }

    /// Drops the buffered bits and returns the position of the marker that ends this
    /// segment (or the end of the data). Bytes before `pos` were consumed; bytes between
    /// `pos` and the marker are skipped.
    pub(crate) fn finish_segment(&mut self) -> usize {
        self.bits = 0;
        self.nbits = 0;
        self.padding = 0;
        let mut p = self.pos;
        loop {
            match self.data.get(p..p + 2) {
                Some(&[0xff, m]) if m != 0x00 => return p,
                Some(_) => p += 1,
                None => return self.data.len(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ff_byte_detection() {
        assert!(has_ff_byte(0x00ff_0000_0000_0000));
        assert!(has_ff_byte(0xffff_ffff_ffff_ffff));
        assert!(!has_ff_byte(0xfe01_7f80_00fe_1234));
    }

    #[test]
    fn decodes_codes_long_and_short_and_unstuffs() {
        // Lengths: two codes of 1 bit? No: one 2-bit code (00 -> 5), one 12-bit code.
        let mut counts = [0u8; 16];
        counts[1] = 1;
        counts[11] = 1;
        let mut t = HuffTable::EMPTY;
        t.build(&counts, &[0x05, 0x0a], false).unwrap();
        // Code "00" then 12-bit code "010000000000" then value bits.
        // Bits: 00 010000000000 11111111 ... -> bytes 0x10 0x03 0xFC (stuffed FF? no)
        let data = [0x10, 0x03, 0xff, 0x00, 0xff, 0xd9];
        let mut r = BitReader::new(&data, 0);
        r.ensure32();
        assert_eq!(r.decode(&t).unwrap(), 5);
        assert_eq!(r.decode(&t).unwrap(), 0x0a);
        // Remaining real bits: 0b11 from 0x03, then 0xff (unstuffed).
        assert_eq!(r.receive_extend(2), 3);
        assert_eq!(r.receive_extend(8), 255);
        assert!(!r.overran());
        assert_eq!(r.receive_extend(1), -1); // padding bit 0 -> -1
        assert!(r.overran());
        assert_eq!(r.finish_segment(), 4);
    }

    #[test]
    fn rejects_overfull_tables() {
        let mut counts = [0u8; 16];
        counts[0] = 3; // three 1-bit codes
        let mut t = HuffTable::EMPTY;
        assert!(t.build(&counts, &[0, 1, 2], true).is_err());
    }
}
