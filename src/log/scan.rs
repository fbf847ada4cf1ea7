//! Walking the records of a segment, with batch framing.
//!
//! A batch is accepted only when its header and every member decode; the callback sees the
//! members (never the header) only after that check, so recovery applies a batch all or
//! nothing.

use crate::format::record::{self, Kind, Record};
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
/// header included) in file order, stopping at the first record that does not decode.
pub fn scan<'a>(bytes: &'a [u8], mut f: impl FnMut(u32, u32, &Record<'a>)) -> ScanEnd {
    let mut pos = SEGMENT_HEADER_LEN;
    let mut members: Vec<(u32, u32, Record<'a>)> = Vec::new();
    while pos < bytes.len() {
        let rest = bytes.get(pos..).unwrap_or_default();
        let rec = match record::decode(rest) {
            Ok(r) => r,
            Err(DecodeError::End) => return ScanEnd::Clean { end: pos },
            Err(err) => return ScanEnd::Bad { offset: pos, err },
        };
        let len = rec.encoded_len();
        if rec.meta.kind != Kind::BatchHeader {
            f(offset32(pos), len32(len), &rec);
            pos += len;
            continue;
        }
        let batch_start = pos;
        let count = record::batch_count(&rec);
        pos += len;
        members.clear();
        for _ in 0..count {
            let rest = bytes.get(pos..).unwrap_or_default();
            match record::decode(rest) {
                Ok(m) if m.meta.kind != Kind::BatchHeader => {
                    let mlen = m.encoded_len();
                    members.push((offset32(pos), len32(mlen), m));
                    pos += mlen;
                }
                Ok(_) => {
                    return ScanEnd::Bad {
                        offset: batch_start,
                        err: DecodeError::BadField,
                    }
                }
                Err(DecodeError::End) => {
                    return ScanEnd::Bad {
                        offset: batch_start,
                        err: DecodeError::Truncated,
                    }
                }
                Err(err) => {
                    return ScanEnd::Bad {
                        offset: batch_start,
                        err,
                    }
                }
            }
        }
        for (off, l, m) in &members {
            f(*off, *l, m);
        }
    }
    ScanEnd::Clean { end: pos }
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
    fn every_cut_inside_a_batch_drops_the_whole_batch() {
        let (b, batch_at) = file_with_batch();
        for cut in batch_at + 1..b.len() {
            let mut seen = Vec::new();
            let end = scan(&b[..cut], |_, _, r| seen.push(r.meta.seq));
            assert_eq!(end.valid_len(), batch_at, "cut {cut}");
            assert_eq!(seen, vec![1], "cut {cut}");
        }
    }
}
