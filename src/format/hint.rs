//! Hint files: a compact index of one sealed segment, so opening need not read the values.
//!
//! ```text
//! header (16 bytes)
//!  0  8  magic "EBBDBHNT"
//!  8  4  hint version: 3
//! 12  4  segment id this hint describes
//! version 3 body
//!  0  8  base_ms         the smallest write_ms of the entries (0 if none)
//!     entries, one per put or tombstone record of the segment, sorted by keyspace, then key,
//!     then newest first; integers are LEB128 varints (at most 10 bytes, no overlong form):
//!        kind            1 byte (as in the record)
//!        flags           1 byte (as in the record)
//!        keyspace        varint
//!        ttl             varint, zigzag of the record's i32 wire form
//!        key_len         varint
//!        seq             varint
//!        write_ms        varint, minus base_ms
//!        offset          varint, of the record in the segment
//!        len             varint, of the whole record
//!        key             key_len bytes
//! footer (16 bytes)
//!  0  8  entry count
//!  8  4  crc32 of every byte before the footer's crc (header, body, count)
//! 12  4  reserved        zero
//! ```
//! A version-3 entry for a 16-byte key takes about 33 bytes where version 2 took 56. Version-2
//! hints (fixed 40-byte entries) belonged to format-2 directories, which this build does not
//! open; one found anyway fails the version check and its segment is scanned. A hint is written complete
//! and fsynced before the segment is published; a hint that fails any check is ignored and its
//! segment scanned instead.

use byteorder::{ByteOrder, LittleEndian as LE};

use super::record::{Kind, Meta, KNOWN_FLAGS};
use super::varint::{self, unzigzag, zigzag};
use super::{DecodeError, HINT_MAGIC};
use crate::options::MAX_KEY_SIZE;
use crate::ttl::ItemTtl;

/// Length of the hint header.
pub const HINT_HEADER_LEN: usize = 16;
/// Length of an entry without its key in the in-memory layout `HintWriter` sorts.
pub const HINT_ENTRY_LEN: usize = 40;
/// The fewest bytes a version-3 entry takes (kind, flags, seven one-byte varints, empty key).
pub const MIN_ENTRY_LEN: usize = 9;
/// The hint version this build writes.
pub const HINT_VERSION: u32 = 3;
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

/// An entry's sort fields in `HintWriter::finish`: keyspace, the key's first eight bytes as a
/// big-endian word, the key, the sequence number, and where the entry lies in the buffer.
type SortFields<'a> = (u32, u64, &'a [u8], u64, usize, usize);

/// Builds a hint file in memory.
#[derive(Debug)]
pub struct HintWriter {
    buf: Vec<u8>,
    count: u64,
    /// Where each encoded entry lies in `buf`, for sorting in `finish`.
    spans: Vec<(usize, usize)>,
    /// Entries that sort before the entry added last in their keyspace (key, then newest
    /// first): breaks in the key order of the segment's records, keyspace by keyspace.
    descents: u64,
    /// Per keyspace, the index in `spans` of the entry added last.
    last: Vec<(u32, usize)>,
}

impl HintWriter {
    /// Starts a hint for segment `segment_id`.
    #[must_use]
    pub fn new(segment_id: u32) -> Self {
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(&HINT_MAGIC);
        let mut v = [0u8; 8];
        LE::write_u32(&mut v[0..4], HINT_VERSION);
        LE::write_u32(&mut v[4..8], segment_id);
        buf.extend_from_slice(&v);
        Self {
            buf,
            count: 0,
            spans: Vec::new(),
            descents: 0,
            last: Vec::new(),
        }
    }

    /// `(entries, descents)` of what was added: the entries, and how many of them sort
    /// before the one added last in their keyspace (0 for records added in key order,
    /// keyspace by keyspace, as open loads them).
    #[must_use]
    pub fn shape(&self) -> (u64, u64) {
        (self.count, self.descents)
    }

    /// Adds the entry for a record at `offset` of length `len`.
    pub fn add(&mut self, meta: &Meta, key: &[u8], offset: u32, len: u32) {
        let mut e = [0u8; HINT_ENTRY_LEN];
        e[0] = meta.kind as u8;
        e[1] = meta.flags & KNOWN_FLAGS;
        LE::write_u32(&mut e[4..8], meta.keyspace);
        LE::write_i32(&mut e[8..12], meta.ttl.to_wire());
        LE::write_u32(&mut e[12..16], u32::try_from(key.len()).unwrap_or(u32::MAX));
        LE::write_u64(&mut e[16..24], meta.seq);
        LE::write_u64(&mut e[24..32], meta.write_ms);
        LE::write_u32(&mut e[32..36], offset);
        LE::write_u32(&mut e[36..40], len);
        let here = self.spans.len();
        match self
            .last
            .iter_mut()
            .rev()
            .find(|(ks, _)| *ks == meta.keyspace)
        {
            Some((_, at)) => {
                let (ps, pe) = self.spans[*at];
                let prev = &self.buf[ps..pe];
                let prev_seq = LE::read_u64(&prev[16..24]);
                if crate::keydir::key_order(&prev[HINT_ENTRY_LEN..], key)
                    .then(meta.seq.cmp(&prev_seq))
                    .is_gt()
                {
                    self.descents += 1;
                }
                *at = here;
            }
            None => self.last.push((meta.keyspace, here)),
        }
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
    pub fn finish(self) -> Vec<u8> {
        self.finish_with(true)
    }

    /// As [`HintWriter::finish`], but the entries in the order they were added: a hint no
    /// writer of this build makes, for tests of what reads hints.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn finish_unsorted(self) -> Vec<u8> {
        self.finish_with(false)
    }

    fn finish_with(mut self, sorted: bool) -> Vec<u8> {
        let buf = &self.buf;
        // Each entry's sort fields decoded once, not at every comparison; the order is total
        // (sequence numbers are unique), so an unstable sort gives the one sorted result. The
        // key's first eight bytes as a big-endian word (zero-padded) order keys as their bytes
        // do wherever they differ, so the byte comparison runs only on ties (with a `memcmp`
        // call per comparison the sort was 4-7 % of a bulk fill's samples, on the upkeep
        // thread).
        let mut order: Vec<SortFields<'_>> = self
            .spans
            .iter()
            .map(|&(start, end)| {
                let at = |r: std::ops::Range<usize>| {
                    buf.get(start + r.start..start + r.end).unwrap_or_default()
                };
                let key = buf.get(start + HINT_ENTRY_LEN..end).unwrap_or_default();
                let mut word = [0u8; 8];
                let n = key.len().min(8);
                word[..n].copy_from_slice(&key[..n]);
                (
                    LE::read_u32(at(4..8)),
                    u64::from_be_bytes(word),
                    key,
                    LE::read_u64(at(16..24)),
                    start,
                    end,
                )
            })
            .collect();
        if sorted {
            order.sort_unstable_by(|a, b| {
                (a.0, a.1)
                    .cmp(&(b.0, b.1))
                    .then_with(|| a.2.cmp(b.2))
                    .then(b.3.cmp(&a.3))
            });
        }
        let base_ms = order
            .iter()
            .map(|o| LE::read_u64(buf.get(o.4 + 24..o.4 + 32).unwrap_or(&[0; 8])))
            .min()
            .unwrap_or(0);
        let mut out = Vec::with_capacity(self.buf.len() / 2 + HINT_FOOTER_LEN);
        out.extend_from_slice(self.buf.get(..HINT_HEADER_LEN).unwrap_or_default());
        out.extend_from_slice(&base_ms.to_le_bytes());
        for &(_, _, _, _, start, end) in &order {
            let (Some(e), Some(key)) = (
                buf.get(start..start + HINT_ENTRY_LEN),
                buf.get(start + HINT_ENTRY_LEN..end),
            ) else {
                continue;
            };
            out.push(e[0]);
            out.push(e[1]);
            varint::put(&mut out, u64::from(LE::read_u32(&e[4..8])));
            varint::put(&mut out, zigzag(LE::read_i32(&e[8..12])));
            varint::put(&mut out, key.len() as u64);
            varint::put(&mut out, LE::read_u64(&e[16..24]));
            varint::put(&mut out, LE::read_u64(&e[24..32]).saturating_sub(base_ms));
            varint::put(&mut out, u64::from(LE::read_u32(&e[32..36])));
            varint::put(&mut out, u64::from(LE::read_u32(&e[36..40])));
            out.extend_from_slice(key);
        }
        drop(order);
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
    f: impl FnMut(&Meta, &[u8], u32, u32),
) -> Result<u64, DecodeError> {
    // A first pass validates every entry; the second hands them out, so a bad entry late in
    // the file cannot leave the caller with half a segment.
    visit_once(b, segment_id, |_| {}, |_, _, _, _| {})?;
    visit_once(b, segment_id, |_| {}, f)
}

/// Like [`visit`], but decodes the entries once, handing each out as it is decoded: `count` is
/// called first with the entry count (checked against the file's size), then `f` per entry. On
/// an error the caller has seen some of the entries and must discard them all.
pub fn visit_once(
    b: &[u8],
    segment_id: u32,
    count: impl FnOnce(u64),
    mut f: impl FnMut(&Meta, &[u8], u32, u32),
) -> Result<u64, DecodeError> {
    let (entries, expected) = Entries::open(b, segment_id)?;
    count(expected);
    let mut seen = 0u64;
    for entry in entries {
        let (meta, key, offset, len) = entry?;
        seen += 1;
        f(&meta, key, offset, len);
    }
    if seen != expected {
        return Err(DecodeError::BadLength);
    }
    Ok(expected)
}

/// One decoded entry: `(meta, key, offset, len)`, the key borrowed from the hint's bytes.
pub type Decoded<'b> = (Meta, &'b [u8], u32, u32);

/// A hint's entries, decoded one at a time from a byte position: what [`visit_once`] walks,
/// and what open keeps of a checked hint instead of a decoded copy of it (it decodes a range
/// of the entries again as it merges them, DESIGN.md §2.3). An error ends the walk (every
/// later call gives `None`).
#[derive(Debug, Clone)]
pub struct Entries<'b> {
    /// The hint's bytes up to the end of the range walked.
    body: &'b [u8],
    /// Where the next entry starts.
    pos: usize,
    base_ms: u64,
}

impl<'b> Entries<'b> {
    /// The entries of hint `b` of segment `segment_id`, once its header, footer and checksum
    /// check out, and their count (checked against the file's size; the entries themselves
    /// are checked as they are decoded).
    ///
    /// # Errors
    /// As [`decode`], for what is checked before the entries.
    pub fn open(b: &'b [u8], segment_id: u32) -> Result<(Self, u64), DecodeError> {
        let (body_end, count) = check(b, segment_id)?;
        let base_ms = b
            .get(HINT_HEADER_LEN..HINT_HEADER_LEN + 8)
            .map(LE::read_u64)
            .ok_or(DecodeError::Truncated)?;
        let body = b.get(..body_end).ok_or(DecodeError::Truncated)?;
        let entries = Self {
            body,
            pos: HINT_HEADER_LEN + 8,
            base_ms,
        };
        Ok((entries, count))
    }

    /// Where the next entry starts, in the hint's bytes.
    #[must_use]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The base of the write times in the hint, for [`Entries::resume`].
    #[must_use]
    pub fn base_ms(&self) -> u64 {
        self.base_ms
    }

    /// The entries from byte `from` to byte `to` of hint `b`, which [`Entries::open`] checked
    /// before (its base of write times `base_ms`, both positions ones [`Entries::pos`] gave):
    /// a range of them decoded again, without checking the whole file again.
    #[must_use]
    pub fn resume(b: &'b [u8], base_ms: u64, from: usize, to: usize) -> Self {
        let body = b.get(..to).unwrap_or(b);
        Self {
            body,
            pos: from.min(body.len()),
            base_ms,
        }
    }

    fn decode_next(&mut self) -> Result<Decoded<'b>, DecodeError> {
        let body = self.body;
        let mut pos = self.pos;
        let (&kind, &flags) = match (body.get(pos), body.get(pos + 1)) {
            (Some(k), Some(fl)) => (k, fl),
            _ => return Err(DecodeError::Truncated),
        };
        pos += 2;
        let kind = kind_of(kind)?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::BadField);
        }
        let keyspace =
            u32::try_from(varint::get(body, &mut pos)?).map_err(|_| DecodeError::BadField)?;
        let ttl_wire = unzigzag(varint::get(body, &mut pos)?)?;
        let ttl = ItemTtl::from_wire(ttl_wire).ok_or(DecodeError::BadField)?;
        let key_len =
            usize::try_from(varint::get(body, &mut pos)?).map_err(|_| DecodeError::BadLength)?;
        if key_len > MAX_KEY_SIZE {
            return Err(DecodeError::BadLength);
        }
        let seq = varint::get(body, &mut pos)?;
        let write_ms = self
            .base_ms
            .checked_add(varint::get(body, &mut pos)?)
            .ok_or(DecodeError::BadField)?;
        let offset =
            u32::try_from(varint::get(body, &mut pos)?).map_err(|_| DecodeError::BadField)?;
        let len = u32::try_from(varint::get(body, &mut pos)?).map_err(|_| DecodeError::BadField)?;
        let key = body
            .get(pos..pos.checked_add(key_len).ok_or(DecodeError::BadLength)?)
            .ok_or(DecodeError::Truncated)?;
        self.pos = pos + key_len;
        let meta = Meta {
            kind,
            flags,
            keyspace,
            ttl,
            seq,
            write_ms,
        };
        Ok((meta, key, offset, len))
    }
}

impl<'b> Iterator for Entries<'b> {
    type Item = Result<Decoded<'b>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.body.len() {
            return None;
        }
        let entry = self.decode_next();
        if entry.is_err() {
            self.pos = self.body.len();
        }
        Some(entry)
    }
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
    let version = LE::read_u32(&b[8..12]);
    if b[0..8] != HINT_MAGIC || version != HINT_VERSION || LE::read_u32(&b[12..16]) != segment_id {
        return Err(DecodeError::BadField);
    }
    let count = LE::read_u64(&footer[0..8]);
    let entries_start = HINT_HEADER_LEN + 8;
    if body_end < entries_start {
        return Err(DecodeError::Truncated);
    }
    let max_entries = (body_end - entries_start) / MIN_ENTRY_LEN;
    if count > max_entries as u64 {
        return Err(DecodeError::BadLength);
    }
    Ok((body_end, count))
}

fn kind_of(b: u8) -> Result<Kind, DecodeError> {
    match b {
        1 => Ok(Kind::Put),
        2 => Ok(Kind::Tombstone),
        _ => Err(DecodeError::BadField),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record::FLAG_SHADOWS;

    #[test]
    fn the_writer_counts_breaks_of_key_order_within_each_keyspace() {
        let shape = |adds: &[(u32, u64, &[u8])]| {
            let mut w = HintWriter::new(1);
            for &(keyspace, seq, key) in adds {
                let mut e = entry(seq, key);
                e.meta.keyspace = keyspace;
                w.add(&e.meta, &e.key, e.offset, e.len);
            }
            w.shape()
        };
        assert_eq!(shape(&[]), (0, 0));
        assert_eq!(shape(&[(1, 1, b"a"), (1, 2, b"b"), (1, 3, b"bb")]), (3, 0));
        assert_eq!(shape(&[(1, 1, b"b"), (1, 2, b"a")]), (2, 1), "smaller key");
        // The same key: newest first is in order, oldest first is not.
        assert_eq!(shape(&[(1, 9, b"k"), (1, 3, b"k")]), (2, 0));
        assert_eq!(shape(&[(1, 3, b"k"), (1, 9, b"k")]), (2, 1));
        // Keyspace by keyspace (open loads each apart): interleaved is no break, a smaller
        // key than the last of the same keyspace is.
        assert_eq!(shape(&[(1, 1, b"a"), (2, 2, b"a"), (1, 3, b"b")]), (3, 0));
        assert_eq!(shape(&[(1, 1, b"z"), (2, 2, b"a"), (1, 3, b"a")]), (3, 1));
        // Eight-byte words compared as bytes: 0x80 sorts after 0x7f.
        let (hi, lo) = ([0x80u8; 9], [0x7fu8; 9]);
        assert_eq!(shape(&[(1, 1, &hi), (1, 2, &lo)]).1, 1);
        assert_eq!(shape(&[(1, 1, &lo), (1, 2, &hi)]).1, 0);
    }

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
        assert_eq!(LE::read_u32(&b[8..12]), HINT_VERSION);
        assert_eq!(LE::read_u32(&b[12..16]), 9);
        // base_ms, then the first entry: kind, flags, keyspace 2, ttl -1 (zigzag 1), key_len 0,
        // seq 3, write_ms - base 0, offset 32, len 77.
        assert_eq!(LE::read_u64(&b[16..24]), 1234);
        assert_eq!(&b[24..33], &[1, FLAG_SHADOWS, 2, 1, 0, 3, 0, 32, 77]);
        // Four entries of 9 bytes plus their 5 key bytes.
        assert_eq!(b.len(), HINT_HEADER_LEN + 8 + 4 * 9 + 5 + HINT_FOOTER_LEN);
    }

    #[test]
    fn entries_come_out_in_byte_order_whatever_their_first_eight_bytes() {
        // Keys of 0-12 bytes from a two-letter alphabet with zeros, so that keys share their
        // first eight bytes, end inside them, or differ from a zero-padded neighbour only in
        // length: the word comparison must never disagree with the bytes' order.
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut entries = Vec::new();
        for seq in 1..=3000u64 {
            let key: Vec<u8> = (0..next(13))
                .map(|_| [0u8, b'a', b'b'][next(3) as usize])
                .collect();
            let mut e = entry(seq, &key);
            e.meta.keyspace = 1 + next(3) as u32;
            entries.push(e);
        }
        let mut expected = entries.clone();
        expected.sort_by(|a, b| {
            (a.meta.keyspace, &a.key, std::cmp::Reverse(a.meta.seq)).cmp(&(
                b.meta.keyspace,
                &b.key,
                std::cmp::Reverse(b.meta.seq),
            ))
        });
        assert_eq!(decode(&build(&entries), 9), Ok(expected));
    }

    /// A hint in the fixed-entry layout of version 2, as earlier builds wrote it.
    fn build_fixed(id: u32, entries: &[HintEntry]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&HINT_MAGIC);
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&id.to_le_bytes());
        for e in entries {
            let mut f = [0u8; HINT_ENTRY_LEN];
            f[0] = e.meta.kind as u8;
            f[1] = e.meta.flags;
            LE::write_u32(&mut f[4..8], e.meta.keyspace);
            LE::write_i32(&mut f[8..12], e.meta.ttl.to_wire());
            LE::write_u32(&mut f[12..16], e.key.len() as u32);
            LE::write_u64(&mut f[16..24], e.meta.seq);
            LE::write_u64(&mut f[24..32], e.meta.write_ms);
            LE::write_u32(&mut f[32..36], e.offset);
            LE::write_u32(&mut f[36..40], e.len);
            b.extend_from_slice(&f);
            b.extend_from_slice(&e.key);
        }
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b
    }

    #[test]
    fn version_2_hints_are_refused_not_misread() {
        let entries = vec![entry(4, b"a"), entry(1, b"a"), entry(2, b"bcd")];
        let b = build_fixed(9, &entries);
        assert_eq!(decode(&b, 9), Err(DecodeError::BadField));
    }

    #[test]
    fn compact_entries_are_small_and_exact_at_the_limits() {
        let mut big = entry(u64::MAX >> 2, &[0xAB; 16]);
        big.meta.ttl = ItemTtl::Seconds(crate::ttl::MAX_TTL_SECS);
        big.meta.keyspace = u32::MAX;
        big.meta.write_ms = u64::MAX;
        big.offset = u32::MAX;
        big.len = u32::MAX;
        let mut typical = entry(3_000_000, &[0xCD; 16]);
        typical.meta.write_ms = 1_700_000_000_123;
        typical.meta.ttl = ItemTtl::Inherit;
        typical.offset = 60 << 20;
        typical.len = 156;
        let mut early = typical.clone();
        early.meta.seq = 7;
        early.meta.write_ms = 0;
        early.key = vec![0x01; 16];
        let b = build(&[big.clone(), typical.clone(), early.clone()]);
        let back = decode(&b, 9).expect("decodes");
        assert_eq!(back, vec![early, typical, big]);
        // A 16-byte key with a 24-bit sequence number, a 26-bit offset and write times within
        // a few seconds of each other: about half the 56 bytes of a version-2 entry.
        let mut w = HintWriter::new(9);
        for i in 0..1000u64 {
            let mut m = entry(3_000_000 + i, &(i as u128).to_be_bytes());
            m.meta.write_ms = 1_700_000_000_000 + i;
            m.meta.ttl = ItemTtl::Inherit;
            m.offset = (60 << 20) + i as u32 * 156;
            m.len = 156;
            w.add(&m.meta, &m.key, m.offset, m.len);
        }
        let per_entry = (w.finish().len() - HINT_HEADER_LEN - 8 - HINT_FOOTER_LEN) / 1000;
        assert!(per_entry <= 33, "{per_entry} bytes per entry");
    }

    #[test]
    fn unknown_flag_bits_are_refused_even_under_a_good_checksum() {
        let mut e = entry(1, b"k");
        e.meta.flags = KNOWN_FLAGS;
        let good = build(&[e.clone()]);
        assert_eq!(decode(&good, 9), Ok(vec![e.clone()]));
        for bit in 0..8u8 {
            let flag = 1u8 << bit;
            if KNOWN_FLAGS & flag != 0 {
                continue;
            }
            let mut b = good.clone();
            // The first entry's flags byte, then a checksum that matches again.
            b[HINT_HEADER_LEN + 8 + 1] |= flag;
            let crc_end = b.len() - HINT_FOOTER_LEN + 8;
            let crc = crc32fast::hash(&b[..crc_end]);
            LE::write_u32(&mut b[crc_end..crc_end + 4], crc);
            assert_eq!(decode(&b, 9), Err(DecodeError::BadField), "bit {bit}");
        }
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
