//! OMG CDR (XCDR1, little endian) as ROS 2 puts it on the wire and in MCAP files.
//!
//! Contract:
//! - Every buffer starts with the 4-byte encapsulation header `[0x00, 0x01, 0x00, 0x00]`
//!   (CDR_LE). Each primitive is aligned to its own size (1, 2, 4 or 8 bytes), counted from
//!   the first byte *after* that header, padding bytes are zero.
//! - Strings are a `u32` length that counts the terminating NUL, the UTF-8 bytes, then the
//!   NUL. Sequences are a `u32` element count followed by the elements; fixed-size arrays are
//!   the elements only. Structs add no alignment of their own.
//! - [`CdrWriter`] never fails while writing; a length that does not fit the `u32` length
//!   prefix is clamped and remembered, and [`CdrWriter::try_finish`] reports it
//!   ([`CdrWriter::finish`] is the unchecked form for callers that know their sizes).
//! - [`CdrReader`] never panics on bad input: every read is bounds-checked and returns a
//!   [`CdrError`] naming the offset; sequence lengths are checked against the bytes left before
//!   anything is allocated, so a corrupt length cannot make a caller allocate gigabytes.
//!
//! Cost: writing appends to one `Vec<u8>` (reuse its allocation with
//! [`CdrWriter::with_buffer`]); reading is zero-copy ([`CdrReader::bytes`] borrows).
//! Neither side locks, logs or spawns threads.

/// The CDR little-endian encapsulation header that starts every ROS 2 message.
pub const CDR_LE_HEADER: [u8; 4] = [0x00, 0x01, 0x00, 0x00];

/// Errors while reading CDR data. Each says where the data went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdrError {
    /// The data ended before a field was complete.
    #[error(
        "CDR data truncated: {need} more bytes needed at offset {at}; the message was cut or its \
         type does not match the schema it was decoded with"
    )]
    Truncated {
        /// Offset (after the encapsulation header) where the read started.
        at: usize,
        /// Bytes the read needed.
        need: usize,
    },
    /// The encapsulation header is not CDR little endian.
    #[error(
        "CDR encapsulation header {0:02x?} is not little-endian plain CDR [00, 01, 00, 00]; only \
         ROS 2 CDR_LE messages are supported"
    )]
    BadHeader([u8; 4]),
    /// A string is not NUL-terminated or not UTF-8.
    #[error(
        "CDR string at offset {at} is malformed ({why}); the message is corrupt or was decoded \
         with the wrong schema"
    )]
    BadString {
        /// Offset of the string's length prefix.
        at: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A length prefix is larger than the data that is left (or than a fixed limit).
    #[error(
        "CDR {what} length {len} is larger than the {left} bytes left in the message; the data \
         is corrupt or was decoded with the wrong schema"
    )]
    TooLong {
        /// What the length is for.
        what: &'static str,
        /// The length read.
        len: u64,
        /// Bytes left in the message.
        left: usize,
    },
    /// A length given to the writer does not fit in the `u32` CDR length prefix.
    #[error(
        "CDR {what} of {len} elements does not fit the u32 length prefix; split the data into \
         smaller messages"
    )]
    LengthOverflow {
        /// What the length is for.
        what: &'static str,
        /// The length that did not fit.
        len: usize,
    },
    /// A value is out of its allowed range (e.g. a bool that is neither 0 nor 1).
    #[error("CDR {what} at offset {at} has invalid value {value}")]
    BadValue {
        /// What was read.
        what: &'static str,
        /// Offset of the value.
        at: usize,
        /// The raw value.
        value: u64,
    },
    /// Bytes were left after the last field.
    #[error(
        "CDR message has {left} unread bytes after its last field; it was decoded with the wrong \
         schema"
    )]
    TrailingBytes {
        /// Bytes left (beyond up to 3 padding bytes, which are allowed).
        left: usize,
    },
}

/// Writes CDR little-endian data with ROS 2's alignment rules.
#[derive(Debug, Clone)]
pub struct CdrWriter {
    buf: Vec<u8>,
    overflow: Option<(&'static str, usize)>,
}

impl Default for CdrWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl CdrWriter {
    /// A writer with a fresh buffer holding the encapsulation header.
    pub fn new() -> Self {
        Self::with_buffer(Vec::new())
    }

    /// A writer that reuses `buf`'s allocation: the buffer is cleared, then the header written.
    pub fn with_buffer(mut buf: Vec<u8>) -> Self {
        buf.clear();
        buf.extend_from_slice(&CDR_LE_HEADER);
        CdrWriter {
            buf,
            overflow: None,
        }
    }

    /// Bytes written so far, header included.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when only the header has been written.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == CDR_LE_HEADER.len()
    }

    fn align(&mut self, n: usize) {
        let pos = self.buf.len() - CDR_LE_HEADER.len();
        let pad = (n - pos % n) % n;
        self.buf.resize(self.buf.len() + pad, 0);
    }

    fn len32(&mut self, what: &'static str, len: usize) -> u32 {
        match u32::try_from(len) {
            Ok(v) => v,
            Err(_) => {
                if self.overflow.is_none() {
                    self.overflow = Some((what, len));
                }
                u32::MAX
            }
        }
    }

    /// Writes a `u8`.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Writes an `i8`.
    pub fn i8(&mut self, v: i8) {
        self.buf.push(v as u8);
    }
    /// Writes a `bool` as one byte (0 or 1).
    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }
    /// Writes a `u16`, 2-aligned.
    pub fn u16(&mut self, v: u16) {
        self.align(2);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a `u32`, 4-aligned.
    pub fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes an `i32`, 4-aligned.
    pub fn i32(&mut self, v: i32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a `u64`, 8-aligned.
    pub fn u64(&mut self, v: u64) {
        self.align(8);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes an `f32`, 4-aligned.
    pub fn f32(&mut self, v: f32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes an `f64`, 8-aligned.
    pub fn f64(&mut self, v: f64) {
        self.align(8);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a string: `u32` length including the NUL, the bytes, the NUL.
    pub fn string(&mut self, s: &str) {
        let n = self.len32("string", s.len() + 1);
        self.u32(n);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    /// Writes a `uint8[]` sequence: `u32` count, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.seq_len(b.len());
        self.buf.extend_from_slice(b);
    }
    /// Writes the `u32` element count that starts a sequence; the caller writes the elements.
    pub fn seq_len(&mut self, n: usize) {
        let n = self.len32("sequence", n);
        self.u32(n);
    }
    /// Writes a fixed-size `float64[N]` array (no count).
    pub fn f64_array(&mut self, v: &[f64]) {
        for &x in v {
            self.f64(x);
        }
    }

    /// The encoded bytes, header included. Lengths too large for `u32` were clamped; use
    /// [`CdrWriter::try_finish`] to be told.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }

    /// The encoded bytes, or [`CdrError::LengthOverflow`] when a string or sequence was longer
    /// than a `u32` length prefix allows (the data would be corrupt).
    pub fn try_finish(self) -> Result<Vec<u8>, CdrError> {
        match self.overflow {
            Some((what, len)) => Err(CdrError::LengthOverflow { what, len }),
            None => Ok(self.buf),
        }
    }
}

/// Reads CDR little-endian data written by [`CdrWriter`] or by any ROS 2 middleware.
#[derive(Debug, Clone)]
pub struct CdrReader<'a> {
    /// The data after the encapsulation header.
    data: &'a [u8],
    pos: usize,
}

impl<'a> CdrReader<'a> {
    /// Checks the encapsulation header and positions the reader on the first field.
    pub fn new(bytes: &'a [u8]) -> Result<Self, CdrError> {
        if bytes.len() < 4 {
            return Err(CdrError::Truncated {
                at: 0,
                need: 4 - bytes.len(),
            });
        }
        let head = [bytes[0], bytes[1], bytes[2], bytes[3]];
        // Byte 2..4 are options; ROS 2 writers leave them zero but readers must ignore them.
        if head[0] != 0x00 || head[1] != 0x01 {
            return Err(CdrError::BadHeader(head));
        }
        Ok(CdrReader {
            data: &bytes[4..],
            pos: 0,
        })
    }

    /// Offset of the next read, counted after the encapsulation header.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    fn align(&mut self, n: usize) -> Result<(), CdrError> {
        let pad = (n - self.pos % n) % n;
        if pad > self.remaining() {
            return Err(CdrError::Truncated {
                at: self.pos,
                need: pad,
            });
        }
        self.pos += pad;
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], CdrError> {
        self.align(N)?;
        let s = self
            .data
            .get(self.pos..self.pos + N)
            .ok_or(CdrError::Truncated {
                at: self.pos,
                need: N,
            })?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        self.pos += N;
        Ok(out)
    }

    /// Reads a `u8`.
    pub fn u8(&mut self) -> Result<u8, CdrError> {
        Ok(self.take::<1>()?[0])
    }
    /// Reads an `i8`.
    pub fn i8(&mut self) -> Result<i8, CdrError> {
        Ok(self.take::<1>()?[0] as i8)
    }
    /// Reads a `bool`; values other than 0 and 1 are an error.
    pub fn bool(&mut self) -> Result<bool, CdrError> {
        let at = self.pos;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(CdrError::BadValue {
                what: "bool",
                at,
                value: u64::from(v),
            }),
        }
    }
    /// Reads a `u16`.
    pub fn u16(&mut self) -> Result<u16, CdrError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    /// Reads a `u32`.
    pub fn u32(&mut self) -> Result<u32, CdrError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    /// Reads an `i32`.
    pub fn i32(&mut self) -> Result<i32, CdrError> {
        Ok(i32::from_le_bytes(self.take()?))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self) -> Result<u64, CdrError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    /// Reads an `f32`.
    pub fn f32(&mut self) -> Result<f32, CdrError> {
        Ok(f32::from_le_bytes(self.take()?))
    }
    /// Reads an `f64`.
    pub fn f64(&mut self) -> Result<f64, CdrError> {
        Ok(f64::from_le_bytes(self.take()?))
    }

    /// Reads `n` raw bytes without copying (no alignment).
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], CdrError> {
        if n > self.remaining() {
            return Err(CdrError::Truncated {
                at: self.pos,
                need: n,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Reads a string. A length of 0 (written by some middlewares for "") is accepted.
    pub fn string(&mut self) -> Result<&'a str, CdrError> {
        self.align(4)?;
        let at = self.pos;
        let len = self.u32()? as usize;
        if len == 0 {
            return Ok("");
        }
        if len > self.remaining() {
            return Err(CdrError::TooLong {
                what: "string",
                len: len as u64,
                left: self.remaining(),
            });
        }
        let raw = self.bytes(len)?;
        let (body, nul) = raw.split_at(len - 1);
        if nul != [0] {
            return Err(CdrError::BadString {
                at,
                why: "missing NUL terminator",
            });
        }
        std::str::from_utf8(body).map_err(|_| CdrError::BadString {
            at,
            why: "not valid UTF-8",
        })
    }

    /// Reads a sequence count and checks that `count * min_elem_size` bytes are left, so a
    /// corrupt count is an error instead of a huge allocation.
    pub fn seq_len(&mut self, what: &'static str, min_elem_size: usize) -> Result<usize, CdrError> {
        let n = self.u32()? as usize;
        let need = n.saturating_mul(min_elem_size.max(1));
        if need > self.remaining() {
            return Err(CdrError::TooLong {
                what,
                len: n as u64,
                left: self.remaining(),
            });
        }
        Ok(n)
    }

    /// Reads a `uint8[]` sequence without copying.
    pub fn byte_seq(&mut self, what: &'static str) -> Result<&'a [u8], CdrError> {
        let n = self.seq_len(what, 1)?;
        self.bytes(n)
    }

    /// Reads a `float64[]` sequence.
    pub fn f64_seq(&mut self, what: &'static str) -> Result<Vec<f64>, CdrError> {
        let n = self.seq_len(what, 8)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.f64()?);
        }
        Ok(v)
    }

    /// Reads a fixed-size `float64[N]` array.
    pub fn f64_array<const N: usize>(&mut self) -> Result<[f64; N], CdrError> {
        let mut a = [0.0; N];
        for x in a.iter_mut() {
            *x = self.f64()?;
        }
        Ok(a)
    }

    /// Checks that nothing but alignment padding (at most 3 bytes, as some writers pad the
    /// message to 4) is left.
    pub fn finish(&self) -> Result<(), CdrError> {
        let left = self.remaining();
        if left > 3 {
            return Err(CdrError::TrailingBytes { left });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_and_alignment_match_ros2() {
        let mut w = CdrWriter::new();
        w.u8(7);
        w.f64(1.5);
        w.string("ab");
        w.u16(3);
        w.seq_len(0);
        w.u64(9);
        let b = w.finish();
        assert_eq!(&b[..4], &CDR_LE_HEADER);
        // u8 at 0, pad to 8, f64 at 8..16, string len at 16 (=3), "ab\0" 20..23, pad 23,
        // u16 at 24, pad to 28, seq len 28..32, u64 at 32..40.
        assert_eq!(b.len(), 4 + 40);
        assert_eq!(b[4], 7);
        assert_eq!(&b[5..12], &[0; 7]);
        assert_eq!(f64::from_le_bytes(b[12..20].try_into().unwrap()), 1.5);
        assert_eq!(&b[20..24], &3u32.to_le_bytes());
        assert_eq!(&b[24..27], b"ab\0");
        assert_eq!(&b[28..30], &3u16.to_le_bytes());
        let mut r = CdrReader::new(&b).unwrap();
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.f64().unwrap(), 1.5);
        assert_eq!(r.string().unwrap(), "ab");
        assert_eq!(r.u16().unwrap(), 3);
        assert_eq!(r.seq_len("x", 8).unwrap(), 0);
        assert_eq!(r.u64().unwrap(), 9);
        r.finish().unwrap();
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(
            CdrReader::new(&[0, 0, 0, 0]),
            Err(CdrError::BadHeader(_))
        ));
        assert!(matches!(
            CdrReader::new(&[0, 1]),
            Err(CdrError::Truncated { .. })
        ));
        let mut w = CdrWriter::new();
        w.u32(1_000_000);
        let b = w.finish();
        let mut r = CdrReader::new(&b).unwrap();
        assert!(matches!(
            r.byte_seq("data"),
            Err(CdrError::TooLong { len: 1_000_000, .. })
        ));
        let mut r = CdrReader::new(&b[..6]).unwrap();
        assert!(matches!(r.u32(), Err(CdrError::Truncated { .. })));
        // string without NUL
        let b = [0, 1, 0, 0, 2, 0, 0, 0, b'a', b'b'];
        let mut r = CdrReader::new(&b).unwrap();
        assert!(matches!(r.string(), Err(CdrError::BadString { .. })));
        let b = [0, 1, 0, 0, 2];
        let mut r = CdrReader::new(&b).unwrap();
        assert!(matches!(r.bool(), Err(CdrError::BadValue { .. })));
    }

    #[test]
    fn with_buffer_reuses_and_clears() {
        let mut w = CdrWriter::new();
        w.u64(5);
        let b = w.finish();
        let cap = b.capacity();
        let w = CdrWriter::with_buffer(b);
        assert!(w.is_empty());
        let b = w.finish();
        assert_eq!(b, CDR_LE_HEADER.to_vec());
        assert_eq!(b.capacity(), cap);
    }

    proptest! {
        #[test]
        fn primitives_round_trip(a in any::<u8>(), b in any::<u64>(), c in any::<i32>(),
                                 d in any::<f64>(), e in ".{0,20}", f in any::<u16>(),
                                 g in any::<f32>(), h in proptest::collection::vec(any::<u8>(), 0..40),
                                 i in any::<bool>()) {
            let mut w = CdrWriter::new();
            w.u8(a); w.u64(b); w.i8(a as i8); w.i32(c); w.bool(i); w.f64(d); w.string(&e);
            w.u16(f); w.f32(g); w.bytes(&h); w.f64(d);
            let buf = w.try_finish().unwrap();
            let mut r = CdrReader::new(&buf).unwrap();
            prop_assert_eq!(r.u8().unwrap(), a);
            prop_assert_eq!(r.u64().unwrap(), b);
            prop_assert_eq!(r.i8().unwrap(), a as i8);
            prop_assert_eq!(r.i32().unwrap(), c);
            prop_assert_eq!(r.bool().unwrap(), i);
            prop_assert_eq!(r.f64().unwrap().to_bits(), d.to_bits());
            prop_assert_eq!(r.string().unwrap(), e.as_str());
            prop_assert_eq!(r.u16().unwrap(), f);
            prop_assert_eq!(r.f32().unwrap().to_bits(), g.to_bits());
            prop_assert_eq!(r.byte_seq("h").unwrap(), &h[..]);
            prop_assert_eq!(r.f64().unwrap().to_bits(), d.to_bits());
            prop_assert!(r.finish().is_ok());
        }

        #[test]
        fn truncation_never_panics(cut in 0usize..60, s in ".{0,8}") {
            let mut w = CdrWriter::new();
            w.u8(1); w.string(&s); w.f64(2.0); w.bytes(&[1, 2, 3]); w.u64(4);
            let buf = w.finish();
            let cut = cut.min(buf.len());
            if let Ok(mut r) = CdrReader::new(&buf[..cut]) {
                let res = (|| -> Result<(), CdrError> {
                    r.u8()?; r.string()?; r.f64()?; r.byte_seq("b")?; r.u64()?; Ok(())
                })();
                prop_assert_eq!(res.is_ok(), cut == buf.len());
            }
        }
    }
}
