//! The canonical summary section: makes a finished MCAP file byte-deterministic.
//!
//! Promises: after [`canonicalize_summary`], the schema and channel records of the summary are
//! sorted by id and the summary CRC matches, so identical input gives an identical file; record
//! lengths and group offsets do not change, so every index stays valid. A file it does not
//! understand (too short, no footer, records that overrun) is left untouched, never damaged.
//! Cost: reads the footer and the summary section once and rewrites the section in place when
//! its order changed. Never panics on malformed input.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

use mcap::records::op;

use super::{read_u32, read_u64};

/// CRC-32 (IEEE), as MCAP uses.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The mcap crate writes the summary's schema and channel records in `HashMap` order, which
/// differs from run to run. Sort each run of them by id in place (lengths and group offsets do
/// not change) and fix the summary CRC, so that identical input gives an identical file.
pub(super) fn canonicalize_summary(f: &mut File) -> std::io::Result<()> {
    const FOOTER: u64 = 1 + 8 + 20;
    let len = f.metadata()?.len();
    if len < 8 + FOOTER + 8 {
        return Ok(());
    }
    let footer_pos = len - 8 - FOOTER;
    let mut footer = [0u8; FOOTER as usize];
    f.seek(SeekFrom::Start(footer_pos))?;
    f.read_exact(&mut footer)?;
    let (Some(summary_start), Some(offsets_start), Some(saved_crc)) = (
        read_u64(&footer, 9),
        read_u64(&footer, 17),
        read_u32(&footer, 25),
    ) else {
        return Ok(());
    };
    if footer[0] != op::FOOTER || summary_start == 0 || summary_start > footer_pos {
        return Ok(());
    }
    let end = if offsets_start != 0 {
        offsets_start
    } else {
        footer_pos
    };
    let mut section = vec![0u8; (footer_pos + 25 - summary_start) as usize];
    f.seek(SeekFrom::Start(summary_start))?;
    f.read_exact(&mut section)?;
    let body_end = (end.saturating_sub(summary_start) as usize).min(section.len());
    // (opcode, start, end) of each record
    let mut recs = Vec::new();
    let mut pos = 0usize;
    while pos + 9 <= body_end {
        let l = read_u64(&section, pos + 1).unwrap_or(u64::MAX);
        let Some(next) = usize::try_from(l)
            .ok()
            .and_then(|l| (pos + 9).checked_add(l))
        else {
            return Ok(());
        };
        if next > body_end {
            return Ok(());
        }
        recs.push((section[pos], pos, next));
        pos = next;
    }
    let mut out = section.clone();
    let mut i = 0;
    while i < recs.len() {
        let opc = recs[i].0;
        let mut j = i;
        while j < recs.len() && recs[j].0 == opc {
            j += 1;
        }
        if opc == op::SCHEMA || opc == op::CHANNEL {
            let mut run: Vec<&[u8]> = recs[i..j].iter().map(|r| &section[r.1..r.2]).collect();
            run.sort_by_key(|r| {
                u16::from_le_bytes([
                    r.get(9).copied().unwrap_or(0),
                    r.get(10).copied().unwrap_or(0),
                ])
            });
            let mut at = recs[i].1;
            for r in run {
                out[at..at + r.len()].copy_from_slice(r);
                at += r.len();
            }
        }
        i = j;
    }
    if out != section {
        f.seek(SeekFrom::Start(summary_start))?;
        f.write_all(&out[..body_end])?;
        if saved_crc != 0 {
            f.seek(SeekFrom::Start(footer_pos + 25))?;
            f.write_all(&crc32(&out).to_le_bytes())?;
        }
        f.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_reference() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }
}
