//! Hint files: a compact index of one sealed segment, so opening need not read the values.
//!
//! ```text
//! header (16 bytes)
//!  0  8  magic "EBBDBHNT"
//!  8  4  format version
//! 12  4  segment id this hint describes
//! entry (40 bytes + key), one per put or tombstone record of the segment, sorted by
//!       keyspace, then key, then newest first
//!  0  1  kind            (as in the record)
//!  1  1  flags           (as in the record)
//!  2  2  reserved        zero
//!  4  4  keyspace
//!  8  4  ttl             i32, as in the record
//! 12  4  key_len
//! 16  8  seq
//! 24  8  write_ms
//! 32  4  offset          of the record in the segment
//! 36  4  len             of the whole record
//! 40  .. key
//! footer (16 bytes)
//!  0  8  entry count
//!  8  4  crc32 of every byte before the footer's crc (header, entries, count)
//! 12  4  reserved        zero
//! ```
//! A hint is written complete and fsynced before the segment is published; a hint that fails
//! any check is ignored and its segment scanned instead.

use byteorder::{ByteOrder, LittleEndian as LE};

use super::record::{Kind, Meta};
use super::{DecodeError, FORMAT_VERSION, HINT_MAGIC};
use crate::options::MAX_KEY_SIZE;
use crate::ttl::ItemTtl;

/// Length of the hint header.
pub const HINT_HEADER_LEN: usize = 16;
/// Length of an entry without its key.
pub const HINT_ENTRY_LEN: usize = 40;
/// Length of the footer.
pub const HINT_FOOTER_LEN: usize = 16;

/// One hint entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintEntry {
    /// The record's header fields.
    pub meta: Meta,
    /// Offset of the record in its segment.
    pub offset: u32,
    /// Length of the whole record.
    pub len: u32,
    /// The key.
    pub key: Vec<u8>,
}

/// Builds a hint file in memory.
#[derive(Debug)]
pub struct HintWriter {
    buf: Vec<u8>,
    count: u64,
    /// Where each encoded entry lies in `buf`, for sorting in `finish`.
    spans: Vec<(usize, usize)>,
}

impl HintWriter {
    /// Starts a hint for segment `segment_id`.
    #[must_use]
    pub fn new(segment_id: u32) -> Self {
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(&HINT_MAGIC);
        let mut v = [0u8; 8];
        LE::write_u32(&mut v[0..4], FORMAT_VERSION);
        LE::write_u32(&mut v[4..8], segment_id);
        buf.extend_from_slice(&v);
        Self {
            buf,
            count: 0,
            spans: Vec::new(),
        }
    }

    /// Adds the entry for a record at `offset` of length `len`.
    pub fn add(&mut self, meta: &Meta, key: &[u8], offset: u32, len: u32) {
        let mut e = [0u8; HINT_ENTRY_LEN];
        e[0] = meta.kind as u8;
        e[1] = meta.flags;
        LE::write_u32(&mut e[4..8], meta.keyspace);
        LE::write_i32(&mut e[8..12], meta.ttl.to_wire());
        LE::write_u32(&mut e[12..16], u32::try_from(key.len()).unwrap_or(u32::MAX));
        LE::write_u64(&mut e[16..24], meta.seq);
        LE::write_u64(&mut e[24..32], meta.write_ms);
        LE::write_u32(&mut e[32..36], offset);
        LE::write_u32(&mut e[36..40], len);
        let start = self.buf.len();
        self.buf.extend_from_slice(&e);
        self.buf.extend_from_slice(key);
        self.spans.push((start, self.buf.len()));
        self.count += 1;
    }

    /// Finishes the file and returns its bytes. Entries are written sorted by keyspace, key,
    /// then newest first, so each hint is one sorted run and opening merges runs instead of
    /// sorting every entry.
    #[must_use]
    pub fn finish(mut self) -> Vec<u8> {
        let buf = &self.buf;
        // Each entry's sort fields decoded once, not at every comparison; the order is total
        // (sequence numbers are unique), so an unstable sort gives the one sorted result.
        let mut order: Vec<(u32, &[u8], u64, usize, usize)> = self
            .spans
            .iter()
            .map(|&(start, end)| {
                let at = |r: std::ops::Range<usize>| {
                    buf.get(start + r.start..start + r.end).unwrap_or_default()
                };
                (
                    LE::read_u32(at(4..8)),
                    buf.get(start + HINT_ENTRY_LEN..end).unwrap_or_default(),
                    LE::read_u64(at(16..24)),
                    start,
                    end,
                )
            })
            .collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)).then(b.2.cmp(&a.2)));
        let spans: Vec<(usize, usize)> = order.into_iter().map(|o| (o.3, o.4)).collect();
        self.spans = spans;
        let mut out = Vec::with_capacity(self.buf.len() + HINT_FOOTER_LEN);
        out.extend_from_slice(self.buf.get(..HINT_HEADER_LEN).unwrap_or_default());
        for &(s, e) in &self.spans {
            out.extend_from_slice(self.buf.get(s..e).unwrap_or_default());
        }
        self.buf = out;
        let mut f = [0u8; 8];
        LE::write_u64(&mut f, self.count);
        self.buf.extend_from_slice(&f);
        let crc = crc32fast::hash(&self.buf);
        let mut c = [0u8; 8];
        LE::write_u32(&mut c[0..4], crc);
        self.buf.extend_from_slice(&c);
        self.buf
    }
}

/// Decodes a whole hint file for segment `segment_id`.
///
/// # Errors
/// Any structural problem: wrong magic, version or segment id, bad CRC, truncation, a length
/// over its limit, or a count that does not match.
pub fn decode(b: &[u8], segment_id: u32) -> Result<Vec<HintEntry>, DecodeError> {
    let mut out = Vec::new();
    visit(b, segment_id, |meta, key, offset, len| {
        out.push(HintEntry {
            meta: *meta,
            offset,
            len,
            key: key.to_vec(),
        });
    })?;
    Ok(out)
}

/// Checks a whole hint file, then calls `f(meta, key, offset, len)` for every entry, borrowing
/// the keys from `b` (no allocation per entry). Nothing is passed to `f` unless the whole file
/// is valid.
///
/// # Errors
/// As [`decode`].
pub fn visit(
    b: &[u8],
    segment_id: u32,
    mut f: impl FnMut(&Meta, &[u8], u32, u32),
) -> Result<u64, DecodeError> {
    let (body_end, count) = check(b, segment_id)?;
    let mut seen = 0u64;
    // First pass validates every entry; the second hands them out, so a bad entry late in
    // the file cannot leave the caller with half a segment.
    walk(b, body_end, |_, _, _, _| seen += 1)?;
    if seen != count {
        return Err(DecodeError::BadLength);
    }
    walk(b, body_end, &mut f)?;
    Ok(count)
}

/// Checks header, footer and CRC; returns where the entries end and the entry count.
fn check(b: &[u8], segment_id: u32) -> Result<(usize, u64), DecodeError> {
    if b.len() < HINT_HEADER_LEN + HINT_FOOTER_LEN {
        return Err(DecodeError::Truncated);
    }
    let body_end = b.len() - HINT_FOOTER_LEN;
    let footer = &b[body_end..];
    let crc_end = body_end + 8;
    if LE::read_u32(&footer[8..12]) != crc32fast::hash(&b[..crc_end]) {
        return Err(DecodeError::BadChecksum);
    }
    if LE::read_u32(&footer[12..16]) != 0 {
        return Err(DecodeError::BadField);
    }
    if b[0..8] != HINT_MAGIC
        || LE::read_u32(&b[8..12]) != FORMAT_VERSION
        || LE::read_u32(&b[12..16]) != segment_id
    {
        return Err(DecodeError::BadField);
    }
    let count = LE::read_u64(&footer[0..8]);
    // Each entry takes at least HINT_ENTRY_LEN bytes.
    let max_entries = (body_end - HINT_HEADER_LEN) / HINT_ENTRY_LEN;
    if count > max_entries as u64 {
        return Err(DecodeError::BadLength);
    }
    Ok((body_end, count))
}

fn walk(
    b: &[u8],
    body_end: usize,
    mut f: impl FnMut(&Meta, &[u8], u32, u32),
) -> Result<(), DecodeError> {
    let mut pos = HINT_HEADER_LEN;
    while pos < body_end {
        let e = b
            .get(pos..pos + HINT_ENTRY_LEN)
            .ok_or(DecodeError::Truncated)?;
        let key_len = LE::read_u32(&e[12..16]) as usize;
        if key_len > MAX_KEY_SIZE {
            return Err(DecodeError::BadLength);
        }
        let key_end = pos + HINT_ENTRY_LEN + key_len;
        if key_end > body_end {
            return Err(DecodeError::Truncated);
        }
        let key = b
            .get(pos + HINT_ENTRY_LEN..key_end)
            .ok_or(DecodeError::Truncated)?;
        let kind = match e[0] {
            1 => Kind::Put,
            2 => Kind::Tombstone,
            _ => return Err(DecodeError::BadField),
        };
        let ttl = ItemTtl::from_wire(LE::read_i32(&e[8..12])).ok_or(DecodeError::BadField)?;
        let meta = Meta {
            kind,
            flags: e[1],
            keyspace: LE::read_u32(&e[4..8]),
            ttl,
            seq: LE::read_u64(&e[16..24]),
            write_ms: LE::read_u64(&e[24..32]),
        };
        f(
            &meta,
            key,
            LE::read_u32(&e[32..36]),
            LE::read_u32(&e[36..40]),
        );
        pos = key_end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record::FLAG_SHADOWS;

    fn entry(seq: u64, key: &[u8]) -> HintEntry {
        HintEntry {
            meta: Meta {
                kind: Kind::Put,
                flags: FLAG_SHADOWS,
                keyspace: 2,
                ttl: ItemTtl::Never,
                seq,
                write_ms: 1234,
            },
            offset: 32,
            len: 77,
            key: key.to_vec(),
        }
    }

    fn build(entries: &[HintEntry]) -> Vec<u8> {
        let mut w = HintWriter::new(9);
        for e in entries {
            w.add(&e.meta, &e.key, e.offset, e.len);
        }
        w.finish()
    }

    #[test]
    fn round_trip_and_grid() {
        let entries = vec![
            entry(1, b"a"),
            entry(2, b"bcd"),
            entry(3, b""),
            entry(4, b"a"),
        ];
        let b = build(&entries);
        // Written sorted by key, newest first within a key.
        let sorted = vec![
            entry(3, b""),
            entry(4, b"a"),
            entry(1, b"a"),
            entry(2, b"bcd"),
        ];
        assert_eq!(decode(&b, 9), Ok(sorted));
        assert_eq!(&b[0..8], b"EBBDBHNT");
        assert_eq!(LE::read_u32(&b[12..16]), 9);
        let e = &b[HINT_HEADER_LEN..];
        assert_eq!(LE::read_u64(&e[16..24]), 3);
        assert_eq!(LE::read_u32(&e[32..36]), 32);
        assert_eq!(
            b.len(),
            HINT_HEADER_LEN + 4 * HINT_ENTRY_LEN + 5 + HINT_FOOTER_LEN
        );
    }

    #[test]
    fn wrong_segment_truncation_and_flips_are_rejected() {
        let b = build(&[entry(1, b"k1"), entry(2, b"k2")]);
        assert!(decode(&b, 8).is_err());
        for n in 0..b.len() {
            assert!(decode(&b[..n], 9).is_err(), "prefix {n}");
        }
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&c, 9).is_err(), "bit {bit}");
        }
    }
}
