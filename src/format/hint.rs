//! Hint files: a compact index of one sealed segment, so opening need not read the values.
//!
//! ```text
//! header (16 bytes)
//!  0  8  magic "EBBDBHNT"
//!  8  4  hint version: 4 (3 is still read: the same without the summary)
//! 12  4  segment id this hint describes
//! body
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
//!     version 4: the summary (varints; [`Summary`]): per keyspace its id, byte range, count
//!        and a mark (position, key) every [`MARK_EVERY`] entries; then the largest sequence
//!        number and write time, shadowing entries, marker bytes, key bytes, largest record
//!        end; then the summary's length as 8 bytes
//! footer (16 bytes)
//!  0  8  entry count
//!  8  4  crc32 of every byte before the footer's crc (header, body, count)
//! 12  4  reserved        zero
//! ```
//! A version-3 entry for a 16-byte key takes about 33 bytes where version 2 took 56. Version-2
//! hints (fixed 40-byte entries) belonged to format-2 directories, which this build does not
//! open; one found anyway fails the version check and its segment is scanned. A hint is written
//! complete and fsynced before the segment is published; a hint that fails any check made
//! before it is used (header, footer, checksum, summary's shape) is ignored and its segment
//! scanned instead. A version-4 summary that checks out is used before the entries are
//! decoded; an entry that then disagrees with it fails the open (DESIGN.md §2.3).

use byteorder::{ByteOrder, LittleEndian as LE};

use super::record::{Kind, Meta, FLAG_MARKER, FLAG_SHADOWS, KNOWN_FLAGS};
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
/// The hint version this build writes (version 3, the same entries without the summary, is
/// still read).
pub const HINT_VERSION: u32 = 4;
/// A version-4 hint's summary marks the key and position of every this-many-th entry of each
/// keyspace, from the first.
pub const MARK_EVERY: usize = 256;
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
        self.finish_with(true, true)
    }

    /// As [`HintWriter::finish`], but the entries in the order they were added, as version 3
    /// (no summary): a hint no writer of this build makes, for tests of what reads hints.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn finish_unsorted(self) -> Vec<u8> {
        self.finish_with(false, false)
    }

    /// As [`HintWriter::finish`], as version 3 (no summary), as the builds before wrote.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn finish_v3(self) -> Vec<u8> {
        self.finish_with(true, false)
    }

    fn finish_with(mut self, sorted: bool, summary: bool) -> Vec<u8> {
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
        if !summary {
            if let Some(version) = out.get_mut(8..12) {
                version.copy_from_slice(&3u32.to_le_bytes());
            }
        }
        out.extend_from_slice(&base_ms.to_le_bytes());
        let mut sum = Summing::default();
        for &(_, _, _, _, start, end) in &order {
            let (Some(e), Some(key)) = (
                buf.get(start..start + HINT_ENTRY_LEN),
                buf.get(start + HINT_ENTRY_LEN..end),
            ) else {
                continue;
            };
            sum.entry(out.len(), e, key);
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
        if summary {
            sum.write(&mut out);
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

/// A keyspace's entries as the writer lays them out: id, first entry's position, end position,
/// count, marks (position, key).
type Laid = (u32, usize, usize, u64, Vec<(usize, Vec<u8>)>);

/// What a version-4 hint's summary says, gathered as the writer encodes the entries in order.
#[derive(Default)]
struct Summing {
    keyspaces: Vec<Laid>,
    totals: Totals,
}

impl Summing {
    /// Notes the entry `e` (in the writer's fixed layout) with key `key`, encoded from `at`.
    fn entry(&mut self, at: usize, e: &[u8], key: &[u8]) {
        let keyspace = LE::read_u32(&e[4..8]);
        if self.keyspaces.last().is_none_or(|k| k.0 != keyspace) {
            self.keyspaces.push((keyspace, at, at, 0, Vec::new()));
        }
        if let Some(k) = self.keyspaces.last_mut() {
            if usize::try_from(k.3).is_ok_and(|n| n.is_multiple_of(MARK_EVERY)) {
                k.4.push((at, key.to_vec()));
            }
            k.3 += 1;
        }
        let times = (LE::read_u64(&e[16..24]), LE::read_u64(&e[24..32]));
        let tombstone = e[0] == Kind::Tombstone as u8;
        let (offset, len) = (LE::read_u32(&e[32..36]), LE::read_u32(&e[36..40]));
        self.totals
            .note(tombstone, e[1], times, key.len(), offset, len);
    }

    /// Appends the summary to `out` (which holds the entries, each keyspace's ending where
    /// the next begins and the last's here), then its length.
    fn write(mut self, out: &mut Vec<u8>) {
        let end = out.len();
        let starts: Vec<usize> = self.keyspaces.iter().skip(1).map(|k| k.1).collect();
        for (k, next) in self
            .keyspaces
            .iter_mut()
            .zip(starts.into_iter().chain([end]))
        {
            k.2 = next;
        }
        self.write_ranges_kept(out);
    }

    /// As [`Summing::write`], with the keyspaces' ranges as they are.
    fn write_ranges_kept(&self, out: &mut Vec<u8>) {
        let start = out.len();
        varint::put(out, self.keyspaces.len() as u64);
        for (keyspace, from, to, count, marks) in &self.keyspaces {
            varint::put(out, u64::from(*keyspace));
            varint::put(out, *from as u64);
            varint::put(out, *to as u64);
            varint::put(out, *count);
            for (at, key) in marks {
                varint::put(out, *at as u64);
                varint::put(out, key.len() as u64);
                out.extend_from_slice(key);
            }
        }
        for v in self.totals.fields() {
            varint::put(out, v);
        }
        let len = (out.len() - start) as u64;
        out.extend_from_slice(&len.to_le_bytes());
    }
}

/// Hint `b` of segment `segment_id` (version 4) with its summary's `index`-th total (0 the
/// largest sequence number, then the largest write time, shadowing entries, marker bytes, key
/// bytes, the largest record end) set to `value`, or (6) the second mark of the first keyspace
/// moved one byte on, (7) given the first mark's key, or (8) the first keyspace's entries from
/// its second mark on said to be the next keyspace id's, or (9) the second mark naming the
/// entry before its own; and its checksum made right again: a
/// summary that lies, as only a writer's bug could make one, for tests of what reads hints.
#[cfg(test)]
pub(crate) fn with_summary_changed(b: &[u8], segment_id: u32, index: usize, value: u64) -> Vec<u8> {
    let (entries, count) = Entries::open(b, segment_id).expect("a good hint");
    let summary = entries.summary().expect("version 4").clone();
    let end = entries.body.len();
    let mut out = b[..end].to_vec();
    let mut sums = summary.totals.fields();
    if let Some(v) = sums.get_mut(index) {
        *v = value;
    }
    let mut keyspaces: Vec<_> = summary
        .keyspaces
        .iter()
        .map(|k| {
            let marks = k
                .marks
                .iter()
                .map(|&(at, key)| (at, key.to_vec()))
                .collect();
            (k.keyspace, k.from, k.to, k.count, marks)
        })
        .collect::<Vec<Laid>>();
    let first_key = keyspaces
        .first()
        .and_then(|k| k.4.first())
        .map(|m| m.1.clone());
    match index {
        6 => {
            if let Some(mark) = keyspaces.first_mut().and_then(|k| k.4.get_mut(1)) {
                mark.0 += 1;
            }
        }
        7 => {
            if let (Some(mark), Some(key)) = (
                keyspaces.first_mut().and_then(|k| k.4.get_mut(1)),
                first_key,
            ) {
                mark.1 = key;
            }
        }
        9 => {
            // The second mark names the entry before its own, position and key: a mark at a
            // real entry, only the wrong one.
            if let Some(k) = keyspaces.first_mut().filter(|k| k.4.len() > 1) {
                let mut walk = Entries::resume(b, entries.base_ms, k.1, k.2);
                for _ in 0..MARK_EVERY - 1 {
                    walk.next();
                }
                let at = walk.pos();
                if let Some(Ok((_, key, _, _))) = walk.next() {
                    k.4[1] = (at, key.to_vec());
                }
            }
        }
        8 => {
            // The first keyspace's entries from its second mark on, said to be the next
            // keyspace id's.
            if let Some(k) = keyspaces.first_mut().filter(|k| k.4.len() > 1) {
                let rest: Vec<(usize, Vec<u8>)> = k.4.split_off(1);
                let at = rest[0].0;
                let moved = (k.0 + 1, at, k.2, k.3 - MARK_EVERY as u64, rest);
                k.2 = at;
                k.3 = MARK_EVERY as u64;
                keyspaces.insert(1, moved);
            }
        }
        _ => {}
    }
    let sum = Summing {
        keyspaces,
        totals: Totals::from_fields(sums),
    };
    sum.write_ranges_kept(&mut out);
    out.extend_from_slice(&count.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out
}

/// Checks a version-4 hint's summary against its entries, all decoded: each keyspace's range
/// holds its count of that keyspace's entries, in order, each mark at its entry with its key,
/// and the totals are the entries'. `Ok(false)` for a version-3 hint (nothing to check).
/// Open checks the same as its merge decodes the entries (DESIGN.md §2.3); `ebbdb verify`
/// calls this.
///
/// # Errors
/// `BadField` for a summary that does not match its entries; what [`Entries::open`] and the
/// entries' decoding find.
pub fn check_summary(b: &[u8], segment_id: u32) -> Result<bool, DecodeError> {
    let (entries, _) = Entries::open(b, segment_id)?;
    let Some(summary) = entries.summary() else {
        return Ok(false);
    };
    let mut totals = Totals::default();
    for k in &summary.keyspaces {
        let mut walk = Entries::resume(b, entries.base_ms, k.from, k.to);
        let mut n = 0usize;
        let mut last: Option<(&[u8], u64)> = None;
        loop {
            let at = walk.pos();
            let Some(next) = walk.next() else { break };
            let (meta, key, offset, len) = next?;
            let mark = n
                .is_multiple_of(MARK_EVERY)
                .then(|| k.marks.get(n / MARK_EVERY));
            let in_order = last.is_none_or(|(lk, ls)| lk.cmp(key).then(meta.seq.cmp(&ls)).is_le());
            let mark_right = mark.is_none_or(|m| m == Some(&(at, key)));
            if meta.keyspace != k.keyspace || !in_order || !mark_right {
                return Err(DecodeError::BadField);
            }
            last = Some((key, meta.seq));
            n += 1;
            totals.add(&meta, key, offset, len);
        }
        if n as u64 != k.count {
            return Err(DecodeError::BadField);
        }
    }
    if totals != summary.totals {
        return Err(DecodeError::BadField);
    }
    Ok(true)
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
    /// A version-4 hint's summary, parsed.
    summary: Option<Box<Summary<'b>>>,
}

impl<'b> Entries<'b> {
    /// The entries of hint `b` of segment `segment_id`, once its header, footer and checksum
    /// check out, and their count (checked against the file's size; the entries themselves
    /// are checked as they are decoded).
    ///
    /// # Errors
    /// As [`decode`], for what is checked before the entries.
    pub fn open(b: &'b [u8], segment_id: u32) -> Result<(Self, u64), DecodeError> {
        let (body_end, count, summary) = check(b, segment_id)?;
        let base_ms = b
            .get(HINT_HEADER_LEN..HINT_HEADER_LEN + 8)
            .map(LE::read_u64)
            .ok_or(DecodeError::Truncated)?;
        let body = b.get(..body_end).ok_or(DecodeError::Truncated)?;
        let start = HINT_HEADER_LEN + 8;
        let summary = summary
            .map(|range| parse_summary(b, range, (start, body_end), count).map(Box::new))
            .transpose()?;
        let entries = Self {
            body,
            pos: start,
            base_ms,
            summary,
        };
        Ok((entries, count))
    }

    /// A version-4 hint's summary (checked as far as it can be without decoding the entries);
    /// none for version 3.
    #[must_use]
    pub fn summary(&self) -> Option<&Summary<'b>> {
        self.summary.as_deref()
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
            summary: None,
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

/// Where a hint's entries end, their count and, for a version-4 hint, where its summary lies.
type Checked = (usize, u64, Option<(usize, usize)>);

/// Checks header, footer and CRC; returns where the entries end, the entry count and, for a
/// version-4 hint, where its summary lies.
fn check(b: &[u8], segment_id: u32) -> Result<Checked, DecodeError> {
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
    if b[0..8] != HINT_MAGIC
        || !(3..=HINT_VERSION).contains(&version)
        || LE::read_u32(&b[12..16]) != segment_id
    {
        return Err(DecodeError::BadField);
    }
    let count = LE::read_u64(&footer[0..8]);
    let entries_start = HINT_HEADER_LEN + 8;
    if body_end < entries_start {
        return Err(DecodeError::Truncated);
    }
    let (entries_end, summary) = if version >= 4 {
        // The summary's length is the body's last 8 bytes; the summary lies before them.
        let len_at = body_end.checked_sub(8).filter(|&at| at >= entries_start);
        let len_at = len_at.ok_or(DecodeError::Truncated)?;
        let len = usize::try_from(LE::read_u64(&b[len_at..body_end]))
            .map_err(|_| DecodeError::BadLength)?;
        let start = len_at
            .checked_sub(len)
            .filter(|&at| at >= entries_start)
            .ok_or(DecodeError::BadLength)?;
        (start, Some((start, len_at)))
    } else {
        (body_end, None)
    };
    let max_entries = (entries_end - entries_start) / MIN_ENTRY_LEN;
    if count > max_entries as u64 {
        return Err(DecodeError::BadLength);
    }
    Ok((entries_end, count, summary))
}

/// One keyspace's entries in a version-4 hint, as its summary gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceEntries<'b> {
    pub keyspace: u32,
    /// The entries lie at bytes `from..to` of the hint.
    pub from: usize,
    pub to: usize,
    pub count: u64,
    /// The position and key of every [`MARK_EVERY`]-th entry, from the first.
    pub marks: Vec<(usize, &'b [u8])>,
}

/// What a version-4 hint's summary says of its entries: where each keyspace's lie, and what
/// open would otherwise count by decoding them all (DESIGN.md §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary<'b> {
    /// In keyspace order, each keyspace's entries after the one before.
    pub keyspaces: Vec<KeyspaceEntries<'b>>,
    pub totals: Totals,
}

/// What a hint's entries hold in all: what open needs of them before it merges them (the next
/// sequence number, the clock's floor, the segment's stats), and what a version-4 summary
/// states.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub max_seq: u64,
    pub max_write_ms: u64,
    /// Entries with `FLAG_SHADOWS`, and tombstones.
    pub shadowing: u64,
    /// Bytes of the tombstones with `FLAG_MARKER`.
    pub markers: u64,
    /// Bytes of all the keys.
    pub key_bytes: u64,
    /// The largest offset plus length of a record.
    pub max_end: u64,
}

impl Totals {
    /// Counts an entry: `meta`, `key`, the record's `offset` and `len`.
    pub fn add(&mut self, meta: &Meta, key: &[u8], offset: u32, len: u32) {
        let tombstone = meta.kind == Kind::Tombstone;
        self.note(
            tombstone,
            meta.flags,
            (meta.seq, meta.write_ms),
            key.len(),
            offset,
            len,
        );
    }

    /// [`Totals::add`] from the fields themselves.
    fn note(
        &mut self,
        tombstone: bool,
        flags: u8,
        (seq, write_ms): (u64, u64),
        key_len: usize,
        offset: u32,
        len: u32,
    ) {
        self.max_seq = self.max_seq.max(seq);
        self.max_write_ms = self.max_write_ms.max(write_ms);
        if flags & FLAG_SHADOWS != 0 || tombstone {
            self.shadowing += 1;
        }
        if tombstone && flags & FLAG_MARKER != 0 {
            self.markers += u64::from(len);
        }
        self.key_bytes += key_len as u64;
        self.max_end = self.max_end.max(u64::from(offset) + u64::from(len));
    }

    /// Counts what `other` counted too.
    pub fn absorb(&mut self, other: &Totals) {
        self.max_seq = self.max_seq.max(other.max_seq);
        self.max_write_ms = self.max_write_ms.max(other.max_write_ms);
        self.shadowing += other.shadowing;
        self.markers += other.markers;
        self.key_bytes += other.key_bytes;
        self.max_end = self.max_end.max(other.max_end);
    }

    /// The six totals in the summary's order.
    #[must_use]
    pub fn fields(&self) -> [u64; 6] {
        [
            self.max_seq,
            self.max_write_ms,
            self.shadowing,
            self.markers,
            self.key_bytes,
            self.max_end,
        ]
    }

    /// The totals from [`Totals::fields`].
    #[must_use]
    pub fn from_fields(f: [u64; 6]) -> Self {
        let [max_seq, max_write_ms, shadowing, markers, key_bytes, max_end] = f;
        Self {
            max_seq,
            max_write_ms,
            shadowing,
            markers,
            key_bytes,
            max_end,
        }
    }
}

/// Parses the summary at `b[from..to]` of a hint whose entries lie at `entries` and number
/// `count`, and checks that it is consistent with them: keyspaces in order, each holding
/// entries, their ranges one after another covering every entry, the counts adding up to the
/// footer's, a mark for every [`MARK_EVERY`]-th entry, the first at the keyspace's first
/// entry, each after the one before and inside its keyspace's range, every key within the
/// size limit. What it cannot check without decoding every entry (that each mark's position
/// is an entry's and its key that entry's, that the entries are in order and the totals
/// right) the reader checks as it decodes them.
fn parse_summary(
    b: &[u8],
    (from, to): (usize, usize),
    entries: (usize, usize),
    count: u64,
) -> Result<Summary<'_>, DecodeError> {
    let body = b.get(..to).ok_or(DecodeError::Truncated)?;
    let mut pos = from;
    let get = |pos: &mut usize| varint::get(body, pos);
    let size = |v: u64| usize::try_from(v).map_err(|_| DecodeError::BadLength);
    let n = get(&mut pos)?;
    let mut keyspaces = Vec::new();
    let mut next_from = entries.0;
    let mut total = 0u64;
    for _ in 0..n {
        let keyspace = u32::try_from(get(&mut pos)?).map_err(|_| DecodeError::BadField)?;
        let (k_from, k_to) = (size(get(&mut pos)?)?, size(get(&mut pos)?)?);
        let k_count = get(&mut pos)?;
        let ordered = keyspaces
            .last()
            .is_none_or(|k: &KeyspaceEntries<'_>| k.keyspace < keyspace);
        if !ordered || k_from != next_from || k_to <= k_from || k_to > entries.1 || k_count == 0 {
            return Err(DecodeError::BadField);
        }
        if k_count > ((k_to - k_from) / MIN_ENTRY_LEN) as u64 {
            return Err(DecodeError::BadLength);
        }
        let n_marks = size(k_count.div_ceil(MARK_EVERY as u64))?;
        let mut marks: Vec<(usize, &[u8])> = Vec::with_capacity(n_marks.min(to - from));
        for i in 0..n_marks {
            let at = size(get(&mut pos)?)?;
            let len = size(get(&mut pos)?)?;
            let key = body
                .get(pos..pos.checked_add(len).ok_or(DecodeError::BadLength)?)
                .ok_or(DecodeError::Truncated)?;
            pos += len;
            let after_last = marks.last().is_none_or(|&(last, _)| last < at);
            if len > MAX_KEY_SIZE || (i == 0 && at != k_from) || !after_last || at >= k_to {
                return Err(DecodeError::BadField);
            }
            marks.push((at, key));
        }
        total = total.checked_add(k_count).ok_or(DecodeError::BadLength)?;
        next_from = k_to;
        keyspaces.push(KeyspaceEntries {
            keyspace,
            from: k_from,
            to: k_to,
            count: k_count,
            marks,
        });
    }
    if next_from != entries.1 || total != count {
        return Err(DecodeError::BadLength);
    }
    let mut sums = [0u64; 6];
    for v in &mut sums {
        *v = get(&mut pos)?;
    }
    if pos != to {
        return Err(DecodeError::BadLength);
    }
    Ok(Summary {
        keyspaces,
        totals: Totals::from_fields(sums),
    })
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
        // Four entries of 9 bytes plus their 5 key bytes, then the summary: one keyspace (its
        // count, id, from 24, to 65, count 4, one mark: position 24 and the empty key: 7
        // bytes), the totals (max seq 4, max write_ms 1234 in two bytes, 4 shadowing, 0
        // marker bytes, 5 key bytes, largest end 109: 7 bytes), and its length (8).
        assert_eq!(
            b.len(),
            HINT_HEADER_LEN + 8 + 4 * 9 + 5 + 7 + 7 + 8 + HINT_FOOTER_LEN
        );
        let (all, _) = Entries::open(&b, 9).expect("checks out");
        let summary = all.summary().expect("version 4");
        assert_eq!(
            summary.keyspaces,
            vec![KeyspaceEntries {
                keyspace: 2,
                from: 24,
                to: 65,
                count: 4,
                marks: vec![(24, &b""[..])],
            }]
        );
        assert_eq!(summary.totals.fields(), [4, 1234, 4, 0, 5, 109]);
        // Version 3: the same without the summary.
        let mut w = HintWriter::new(9);
        for e in &entries {
            w.add(&e.meta, &e.key, e.offset, e.len);
        }
        let v3 = w.finish_v3();
        assert_eq!(v3.len(), HINT_HEADER_LEN + 8 + 4 * 9 + 5 + HINT_FOOTER_LEN);
        assert_eq!(decode(&v3, 9), decode(&b, 9));
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

    /// A version-4 hint's summary checks out against its entries; a version-3 hint has none;
    /// a summary with any total or a mark changed does not.
    #[test]
    fn a_summary_is_checked_against_every_entry() {
        let mut w = HintWriter::new(3);
        for i in 0..1_000u64 {
            let mut e = entry(i * 3 + 1, format!("key-{:05}", i * 7919 % 1_000).as_bytes());
            // Keyspaces 1, 3 and 5: the summary that says part of keyspace 1 is keyspace 2's
            // is in order, so only the entries can refute it.
            e.meta.keyspace = 1 + 2 * (i % 3) as u32;
            if i % 5 == 0 {
                e.meta.kind = Kind::Tombstone;
                e.meta.flags = FLAG_MARKER;
            }
            w.add(&e.meta, &e.key, e.offset, e.len);
        }
        let good = w.finish();
        assert_eq!(check_summary(&good, 3), Ok(true));
        let (entries, _) = Entries::open(&good, 3).expect("checks out");
        let summary = entries.summary().expect("version 4");
        assert_eq!(summary.keyspaces.len(), 3);
        assert!(summary.keyspaces.iter().all(|k| k.marks.len() == 2));
        assert!(summary.totals.markers > 0 && summary.totals.shadowing >= 200);
        for index in 0..10 {
            let bad = with_summary_changed(&good, 3, index, 12_345);
            let (_, _) = Entries::open(&bad, 3).expect("a summary of the right shape");
            assert_eq!(
                check_summary(&bad, 3),
                Err(DecodeError::BadField),
                "total {index}"
            );
        }
        let mut w = HintWriter::new(3);
        let e = entry(1, b"k");
        w.add(&e.meta, &e.key, e.offset, e.len);
        assert_eq!(check_summary(&w.finish_v3(), 3), Ok(false));
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
