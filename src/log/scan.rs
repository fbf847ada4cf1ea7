//! Walking the records of a segment, with batch framing.
//!
//! A batch is accepted only when its header and every member decode; the callback sees the
//! members (never the header) only after that check, so recovery applies a batch all or
//! nothing.
//!
//! Two walks: [`scan`] stops at the first record that does not decode and reads an all-zero
//! header as the end (the active segment's preallocated tail); [`scan_all`] walks a segment of
//! known length to its end, treats zeros as damage and resynchronises after each damaged range
//! ([`resync`]), so recovery can tell "damage followed by good records" from a torn tail.

use crate::format::record::{self, Kind, Record, FLAG_IN_BATCH, MIN_RECORD_LEN};
use crate::format::{DecodeError, SEGMENT_HEADER_LEN};

/// How a scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte up to `end` decoded; `end` is the file length or the start of zeroed bytes.
    Clean {
        /// Offset just past the last whole record.
        end: usize,
    },
    /// A record (or a batch) starting at `offset` failed to decode.
    Bad {
        /// Offset of the first bad record or of the header of the incomplete batch.
        offset: usize,
        /// Why.
        err: DecodeError,
    },
}

impl ScanEnd {
    /// Offset up to which the segment is whole.
    #[must_use]
    pub fn valid_len(self) -> usize {
        match self {
            ScanEnd::Clean { end } => end,
            ScanEnd::Bad { offset, .. } => offset,
        }
    }
}

/// Calls `f(offset, record)` for every put and tombstone in `bytes` (a whole segment file,
/// header included) in file order, stopping at the first record that does not decode. An
/// all-zero record header ends the scan as [`ScanEnd::Clean`]: in the active segment that is
/// the preallocated tail. (Sealed segments, whose length is known, use [`scan_all`].)
pub fn scan<'a>(bytes: &'a [u8], mut f: impl FnMut(u32, u32, &Record<'a>)) -> ScanEnd {
    let mut pos = SEGMENT_HEADER_LEN;
    let mut members: Vec<(u32, u32, Record<'a>)> = Vec::new();
    while pos < bytes.len() {
        match unit(bytes, pos, &mut members, None) {
            Ok(end) => {
                for (off, l, m) in &members {
                    f(*off, *l, m);
                }
                pos = end;
            }
            Err(DecodeError::End) => return ScanEnd::Clean { end: pos },
            Err(err) => return ScanEnd::Bad { offset: pos, err },
        }
    }
    ScanEnd::Clean { end: pos }
}

/// A damaged range of a segment: bytes in which no record (or whole batch) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    /// First damaged byte (where a record should have started).
    pub offset: usize,
    /// Where the next record that decodes starts (or the end of the scanned range).
    pub end: usize,
    /// Why the record at `offset` did not decode (`End` for zeroed bytes).
    pub err: DecodeError,
}

impl Damage {
    /// Bytes skipped.
    #[must_use]
    pub fn len(&self) -> usize {
        self.end - self.offset
    }

    /// True for an empty range (never produced by the scanners).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.end == self.offset
    }
}

/// Scans `bytes[..end]` (a segment, header included) all the way to `end`, for segments whose
/// length is known: zeroed bytes before `end` are damage, not the end of the data. After a
/// bad record it looks for the next offset where a record (or a whole batch) decodes
/// ([`resync`]), reports the skipped range, and goes on; `f` sees every record of every unit
/// that decodes. Returns the damaged ranges, in file order (empty for a whole segment).
pub fn scan_all<'a>(
    bytes: &'a [u8],
    end: usize,
    mut f: impl FnMut(u32, u32, &Record<'a>),
) -> Vec<Damage> {
    let bytes = bytes.get(..end).unwrap_or(bytes);
    let mut damage = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN;
    let mut members: Vec<(u32, u32, Record<'a>)> = Vec::new();
    let mut budget = resync_budget(bytes.len());
    while pos < bytes.len() {
        let err = match unit(bytes, pos, &mut members, None) {
            Ok(next) => {
                for (off, l, m) in &members {
                    f(*off, *l, m);
                }
                pos = next;
                continue;
            }
            Err(err) => err,
        };
        // The failed unit is charged too: damage crafted as long-claiming headers each
        // followed by a small good record would otherwise cost (headers × claimed length)
        // here while every resynchronisation found the next record for almost nothing.
        let next = charge_failed(bytes, pos, &mut budget)
            .and_then(|()| resync(bytes, pos + 1, &mut budget));
        match next {
            Some(next) => {
                damage.push(Damage {
                    offset: pos,
                    end: next,
                    err,
                });
                pos = next;
            }
            None => {
                damage.push(Damage {
                    offset: pos,
                    end: bytes.len(),
                    err: DecodeError::Unsearched,
                });
                break;
            }
        }
    }
    damage
}

/// Bytes a [`scan_all`] may hash while resynchronising, per byte scanned ...
pub const RESYNC_WORK_PER_BYTE: usize = 64;
/// ... and at least this many, whatever the length.
pub const RESYNC_WORK_FLOOR: usize = 256 << 20;

/// The resynchronisation budget of a scan over `len` bytes: sliding over random bytes hashes
/// a few times the range, up to about 19 times over 32 MiB (candidate headers claim long
/// bodies), so honest damage never meets it; a range crafted to repeat valid-looking headers that claim long bodies would
/// otherwise cost time quadratic in its length.
#[must_use]
pub fn resync_budget(len: usize) -> usize {
    len.saturating_mul(RESYNC_WORK_PER_BYTE)
        .max(RESYNC_WORK_FLOOR)
}

/// The first offset at or after `from` where a record (or a whole batch) decodes, or
/// `bytes.len()` if there is none; `None` once the bytes hashed would pass `budget` (what is
/// left of it is updated). Cheap field checks come before the CRC, so sliding over garbage or
/// zeros costs a few comparisons per byte. A batch member is never a place to resume: a batch
/// whose header is lost is skipped whole (all or nothing, even in salvage), and the members of
/// a torn batch at the end of the active segment do not make its tail look like damage
/// followed by good records.
#[must_use]
pub fn resync(bytes: &[u8], from: usize, budget: &mut usize) -> Option<usize> {
    let mut members = Vec::new();
    let mut pos = from;
    while pos + MIN_RECORD_LEN <= bytes.len() {
        if plausible(bytes, pos) {
            if unit(bytes, pos, &mut members, None).is_ok() {
                return Some(pos);
            }
            charge_failed(bytes, pos, budget)?;
        }
        pos += 1;
    }
    Some(bytes.len())
}

/// Takes what decoding the failed unit at `pos` hashed out of `budget`; `None` when that is
/// more than is left. Measured by decoding it again, counting: only damage pays for this,
/// never a scan of whole records.
fn charge_failed(bytes: &[u8], pos: usize, budget: &mut usize) -> Option<()> {
    let mut hashed = 0;
    let _ = unit(bytes, pos, &mut Vec::new(), Some(&mut hashed));
    *budget = budget.checked_sub(hashed)?;
    Some(())
}

/// A header that passes its own checks ([`record::plausible`]) and is not a batch member.
fn plausible(bytes: &[u8], pos: usize) -> bool {
    bytes
        .get(pos..)
        .and_then(record::plausible)
        .is_some_and(|m| m.flags & FLAG_IN_BATCH == 0)
}

/// Decodes the unit at `pos`: one put or tombstone, or a batch header and all its members.
/// On success `members` holds the records to apply (never the batch header) and the result is
/// where the unit ends. With `hashed`, adds what each decode hashes (the length its header
/// claims, when the bytes are there).
fn unit<'a>(
    bytes: &'a [u8],
    pos: usize,
    members: &mut Vec<(u32, u32, Record<'a>)>,
    mut hashed: Option<&mut usize>,
) -> Result<usize, DecodeError> {
    members.clear();
    let mut decode = |rest: &'a [u8]| {
        if let Some(h) = hashed.as_deref_mut() {
            // A body past the end is `Truncated` before any hashing.
            let claimed = record::claimed_len(rest).unwrap_or(0);
            if claimed <= rest.len() {
                *h = h.saturating_add(claimed);
            }
        }
        record::decode(rest)
    };
    let rest = bytes.get(pos..).unwrap_or_default();
    let rec = decode(rest)?;
    let len = rec.encoded_len();
    if rec.meta.kind != Kind::BatchHeader {
        members.push((offset32(pos), len32(len), rec));
        return Ok(pos + len);
    }
    let count = record::batch_count(&rec);
    let mut at = pos + len;
    for _ in 0..count {
        let rest = bytes.get(at..).unwrap_or_default();
        match decode(rest) {
            Ok(m) if m.meta.kind != Kind::BatchHeader => {
                let mlen = m.encoded_len();
                members.push((offset32(at), len32(mlen), m));
                at += mlen;
            }
            Ok(_) => return Err(DecodeError::BadField),
            Err(DecodeError::End) => return Err(DecodeError::Truncated),
            Err(err) => return Err(err),
        }
    }
    Ok(at)
}

fn offset32(pos: usize) -> u32 {
    u32::try_from(pos).unwrap_or(u32::MAX)
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record::{encode, Meta, FLAG_IN_BATCH};
    use crate::format::SegmentHeader;
    use crate::ttl::ItemTtl;

    fn meta(kind: Kind, seq: u64, flags: u8) -> Meta {
        Meta {
            kind,
            flags,
            keyspace: 1,
            ttl: ItemTtl::Inherit,
            seq,
            write_ms: 5,
        }
    }

    fn file_with_batch() -> (Vec<u8>, usize) {
        let mut b = SegmentHeader {
            id: 1,
            created_seq: 1,
        }
        .encode()
        .to_vec();
        encode(&mut b, &meta(Kind::Put, 1, 0), b"a", b"1");
        let batch_at = b.len();
        encode(
            &mut b,
            &meta(Kind::BatchHeader, 2, 0),
            b"",
            &2u32.to_le_bytes(),
        );
        encode(&mut b, &meta(Kind::Put, 3, FLAG_IN_BATCH), b"b", b"2");
        encode(&mut b, &meta(Kind::Tombstone, 4, FLAG_IN_BATCH), b"a", b"");
        (b, batch_at)
    }

    #[test]
    fn whole_file_scans_clean_and_skips_batch_header() {
        let (b, _) = file_with_batch();
        let mut seen = Vec::new();
        let end = scan(&b, |_, _, r| seen.push(r.meta.seq));
        assert_eq!(end, ScanEnd::Clean { end: b.len() });
        assert_eq!(seen, vec![1, 3, 4]);
    }

    #[test]
    fn scan_all_reports_zeroed_and_flipped_ranges_and_keeps_the_rest() {
        let (mut b, batch_at) = file_with_batch();
        let len = b.len();
        // Zero the first record: scan() sees a clean end, scan_all() damage then the batch.
        b[32..batch_at].fill(0);
        assert_eq!(scan(&b, |_, _, _| {}), ScanEnd::Clean { end: 32 });
        let mut seen = Vec::new();
        let d = scan_all(&b, len, |_, _, r| seen.push(r.meta.seq));
        assert_eq!(
            d,
            vec![Damage {
                offset: 32,
                end: batch_at,
                err: DecodeError::End
            }]
        );
        assert_eq!(seen, vec![3, 4]);
        // A flipped byte in the batch header: the batch is skipped whole (its members are
        // never applied without it).
        let (mut b, batch_at) = file_with_batch();
        b[batch_at + 20] ^= 1;
        let mut seen = Vec::new();
        let d = scan_all(&b, len, |_, _, r| seen.push(r.meta.seq));
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].offset, d[0].end), (batch_at, len));
        assert_eq!(seen, vec![1]);
        // A whole file has no damage; a file cut short has its tail reported.
        let (b, _) = file_with_batch();
        assert!(scan_all(&b, len, |_, _, _| {}).is_empty());
        let d = scan_all(&b[..len - 3], len - 3, |_, _, _| {});
        assert_eq!(d.last().map(|d| d.end), Some(len - 3));
    }

    #[test]
    fn every_cut_inside_a_batch_drops_the_whole_batch() {
        let (b, batch_at) = file_with_batch();
        for cut in batch_at + 1..b.len() {
            let mut seen = Vec::new();
            let end = scan(&b[..cut], |_, _, r| seen.push(r.meta.seq));
            assert_eq!(end.valid_len(), batch_at, "cut {cut}");
            assert_eq!(seen, vec![1], "cut {cut}");
        }
    }

    /// The header of a put that claims a `claimed`-byte value: valid on its own (check byte
    /// included), its CRC never matching what follows it.
    fn long_claiming_header(claimed: usize) -> Vec<u8> {
        let value = vec![0xA5; claimed];
        let mut rec = Vec::new();
        encode(&mut rec, &meta(Kind::Put, 9, 0), b"", &value);
        rec.truncate(rec.len() - claimed);
        rec
    }

    #[test]
    fn a_region_of_headers_claiming_long_bodies_stops_at_the_budget() {
        let (mut b, _) = file_with_batch();
        let damaged_at = b.len();
        // 2 MiB of one header repeated, each claiming 256 KiB: about 140,000 candidates that
        // pass the header checks and would hash 256 KiB each (36 GB) without a bound.
        let header = long_claiming_header(256 << 10);
        while b.len() < damaged_at + (2 << 20) {
            b.extend_from_slice(&header);
        }
        encode(&mut b, &meta(Kind::Put, 10, 0), b"z", b"after");
        let mut budget = 64 << 20;
        assert_eq!(resync(&b, damaged_at, &mut budget), None);
        let mut seen = Vec::new();
        let d = scan_all(&b, b.len(), |_, _, r| seen.push(r.meta.seq));
        assert_eq!(
            d,
            vec![Damage {
                offset: damaged_at,
                end: b.len(),
                err: DecodeError::Unsearched
            }]
        );
        assert_eq!(
            seen,
            vec![1, 3, 4],
            "the records before the region are kept"
        );
    }

    #[test]
    fn random_damage_resynchronises_well_within_the_budget() {
        let (mut b, _) = file_with_batch();
        let damaged_at = b.len();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..(1 << 20) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push((x >> 24) as u8);
        }
        let good = b.len();
        encode(&mut b, &meta(Kind::Put, 10, 0), b"z", b"after");
        let start = resync_budget(b.len());
        let mut budget = start;
        assert_eq!(resync(&b, damaged_at + 1, &mut budget), Some(good));
        // Random bytes hash a few times their length (about twice here, 19 times over 32 MiB,
        // where longer claimed bodies fit); the budget allows 64 times.
        let spent = start - budget;
        assert!(spent < 32 * (1 << 20), "spent {spent} bytes");
    }

    #[test]
    fn failed_decodes_between_good_records_are_charged_too() {
        // [a header claiming 256 KiB, its CRC wrong][a small good record], repeated over
        // 1 MiB: each resynchronisation finds the next good record a few bytes on, so only the
        // scan's own failed decodes add up (about 70,000 × 256 KiB unbounded).
        let (mut b, _) = file_with_batch();
        let damaged_at = b.len();
        let header = long_claiming_header(256 << 10);
        let mut seq = 100;
        while b.len() < damaged_at + (1 << 20) {
            b.extend_from_slice(&header);
            encode(&mut b, &meta(Kind::Put, seq, 0), b"k", b"v");
            seq += 1;
        }
        // Good records past the region, enough for every header's claimed body to fit.
        while b.len() < damaged_at + (1 << 20) + (256 << 10) + 4096 {
            encode(&mut b, &meta(Kind::Put, seq, 0), b"k", b"v");
            seq += 1;
        }
        let d = scan_all(&b, b.len(), |_, _, _| {});
        let last = d.last().expect("damage");
        assert_eq!(last.err, DecodeError::Unsearched, "{} ranges", d.len());
        assert_eq!(last.end, b.len());
        // About 1,000 charged failures of 256 KiB fit in the 256 MiB floor.
        assert!(d.len() < 2_000, "{} damaged ranges", d.len());
    }
}
