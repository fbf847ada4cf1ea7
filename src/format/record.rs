//! The record: the unit of the append-only log.
//!
//! ```text
//! offset size field
//!  0     4    crc32      CRC32 (IEEE) of every byte after it, to the end of the value
//!  4     1    tag        bits 0-1 kind (1 put, 2 tombstone, 3 batch header), bits 2-5 flags
//!                        (SHADOWS, IN_BATCH, MARKER, DOC), bits 6-7 zero
//!  5     ..   keyspace   varint (LEB128, shortest form), keyspace id
//!        ..   ttl        varint, zigzag of the i32 wire form: 0 inherit, -1 never, n > 0 seconds
//!        ..   seq        varint, global sequence number, strictly increasing in append order
//!        ..   write_ms   varint, write time, Unix milliseconds (engine clock)
//!        ..   key_len    varint
//!        ..   value_len  varint
//!  h     1    check      low byte of the CRC32 of bytes [4, h): the header alone
//!  h + 1 ..   key, then value
//! ```
//! A put of a 16-byte key and a 100-byte value takes 20 header bytes (a 40-byte fixed header
//! before format 3). A batch header has an empty key and a 4-byte value: the number of member
//! records that follow it immediately. Its CRC covers only itself; recovery accepts the batch
//! only when every member decodes.

use byteorder::{ByteOrder, LittleEndian as LE};

use super::{varint, DecodeError};
use crate::options::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::ttl::ItemTtl;

/// Offset of the CRC32 of the rest of the record.
pub const CRC_AT: usize = 0;
/// Offset of the tag byte (kind and flags).
pub const TAG_AT: usize = 4;
/// Offset of the first varint.
const FIELDS_AT: usize = 5;
/// The fewest bytes a record takes: CRC, tag, six one-byte varints, the check byte.
pub const MIN_RECORD_LEN: usize = FIELDS_AT + 6 + 1;
/// The most bytes a record header takes: CRC, tag, the six varints at their longest for the
/// values the decoder accepts (keyspace and TTL 5, sequence number and write time 10, key length
/// 3, value length 4), the check byte.
pub const MAX_HEADER_LEN: usize = FIELDS_AT + 5 + 5 + 10 + 10 + 3 + 4 + 1;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A key's new value.
    Put = 1,
    /// A deletion (written by `delete`) or a compaction marker (flag MARKER).
    Tombstone = 2,
    /// Start of an atomic batch; value = member count (u32).
    BatchHeader = 3,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Kind::Put),
            2 => Some(Kind::Tombstone),
            3 => Some(Kind::BatchHeader),
            _ => None,
        }
    }
}

/// Flag: when this record was written the key had a live older version, so dropping this
/// record could expose it (see DESIGN.md "No resurrection").
pub const FLAG_SHADOWS: u8 = 1;
/// Flag: the record is a member of a batch.
pub const FLAG_IN_BATCH: u8 = 2;
/// Flag: a tombstone written by compaction in place of a dropped dead record.
pub const FLAG_MARKER: u8 = 4;
/// Flag: the value is a document item as the document layer wrote it, one JSON object
/// serialized from a map (so valid JSON, with no property name repeated). Set only by the
/// document layer's item writes, never by the key-value API, whatever bytes it is given; a
/// query may then stop reading an item once it has the properties it needs (DESIGN §14).
pub const FLAG_DOC: u8 = 8;
/// Every flag bit a record may carry.
pub const KNOWN_FLAGS: u8 = FLAG_SHADOWS | FLAG_IN_BATCH | FLAG_MARKER | FLAG_DOC;

/// The header fields of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Record kind.
    pub kind: Kind,
    /// Flag bits.
    pub flags: u8,
    /// Keyspace id.
    pub keyspace: u32,
    /// The record's own TTL.
    pub ttl: ItemTtl,
    /// Sequence number.
    pub seq: u64,
    /// Write time in Unix milliseconds.
    pub write_ms: u64,
}

impl Meta {
    /// Write second (`_ts`).
    #[must_use]
    pub fn ts(&self) -> u64 {
        self.write_ms / 1000
    }
}

/// A decoded record borrowing its key and value from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Header fields.
    pub meta: Meta,
    /// Key bytes.
    pub key: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
}

impl Record<'_> {
    /// Encoded length of this record.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        encoded_len(&self.meta, self.key.len(), self.value.len())
    }
}

/// The tag byte: kind in bits 0-1, flags in bits 2-5.
fn tag(meta: &Meta) -> u8 {
    (meta.kind as u8) | ((meta.flags & KNOWN_FLAGS) << 2)
}

/// Bytes of the header (CRC to check byte) of a record with these fields.
fn header_len(meta: &Meta, key_len: usize, value_len: usize) -> usize {
    FIELDS_AT
        + varint::len(u64::from(meta.keyspace))
        + varint::len(varint::zigzag(meta.ttl.to_wire()))
        + varint::len(meta.seq)
        + varint::len(meta.write_ms)
        + varint::len(key_len as u64)
        + varint::len(value_len as u64)
        + 1
}

/// Encoded length of a record with these header fields and key and value lengths. Every value
/// has one varint encoding, so this is exact.
#[must_use]
pub fn encoded_len(meta: &Meta, key_len: usize, value_len: usize) -> usize {
    header_len(meta, key_len, value_len) + key_len + value_len
}

/// Appends an encoded record to `out`. Callers have checked the key and value limits.
pub fn encode(out: &mut Vec<u8>, meta: &Meta, key: &[u8], value: &[u8]) {
    let start = out.len();
    out.reserve(MAX_HEADER_LEN + key.len() + value.len());
    out.extend_from_slice(&[0; 4]);
    out.push(tag(meta));
    varint::put(out, u64::from(meta.keyspace));
    varint::put(out, varint::zigzag(meta.ttl.to_wire()));
    varint::put(out, meta.seq);
    varint::put(out, meta.write_ms);
    varint::put(out, key.len() as u64);
    varint::put(out, value.len() as u64);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[start + TAG_AT..]);
    let check = crc.clone().finalize() as u8;
    out.push(check);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    crc.update(&out[out.len() - key.len() - value.len() - 1..]);
    LE::write_u32(&mut out[start..start + 4], crc.finalize());
}

/// A header that passed every check but the record's CRC.
struct Header {
    meta: Meta,
    key_len: usize,
    value_len: usize,
    /// Where the key starts.
    body_at: usize,
    /// The CRC state after the header and its check byte.
    crc: crc32fast::Hasher,
}

/// Reads and checks the header at the start of `b`: tag, varints (shortest forms, values in
/// range), lengths within the engine limits, and the check byte. Tried at every offset of a
/// damaged range ([`plausible`]), so nothing here depends on the length of the body.
fn header(b: &[u8]) -> Result<Header, DecodeError> {
    let h = b.get(..MIN_RECORD_LEN).ok_or(DecodeError::Truncated)?;
    if h.iter().all(|&x| x == 0) {
        return Err(DecodeError::End);
    }
    let tag = h[TAG_AT];
    let kind = Kind::from_u8(tag & 3).ok_or(DecodeError::BadField)?;
    if tag >> 6 != 0 {
        return Err(DecodeError::BadField);
    }
    let flags = (tag >> 2) & KNOWN_FLAGS;
    let mut pos = FIELDS_AT;
    let keyspace = u32::try_from(varint::get(b, &mut pos)?).map_err(|_| DecodeError::BadField)?;
    let ttl = ItemTtl::from_wire(varint::unzigzag(varint::get(b, &mut pos)?)?)
        .ok_or(DecodeError::BadField)?;
    let seq = varint::get(b, &mut pos)?;
    let write_ms = varint::get(b, &mut pos)?;
    let key_len = varint::get(b, &mut pos)?;
    let value_len = varint::get(b, &mut pos)?;
    let (Ok(key_len), Ok(value_len)) = (usize::try_from(key_len), usize::try_from(value_len))
    else {
        return Err(DecodeError::BadLength);
    };
    if key_len > MAX_KEY_SIZE || value_len > MAX_VALUE_SIZE {
        return Err(DecodeError::BadLength);
    }
    let check = *b.get(pos).ok_or(DecodeError::Truncated)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&b[TAG_AT..pos]);
    if crc.clone().finalize() as u8 != check {
        return Err(DecodeError::BadChecksum);
    }
    crc.update(&b[pos..=pos]);
    if kind == Kind::BatchHeader && (key_len != 0 || value_len != 4) {
        return Err(DecodeError::BadField);
    }
    Ok(Header {
        meta: Meta {
            kind,
            flags,
            keyspace,
            ttl,
            seq,
            write_ms,
        },
        key_len,
        value_len,
        body_at: pos + 1,
        crc,
    })
}

/// Decodes the record at the start of `b`.
///
/// # Errors
/// `End` when the first [`MIN_RECORD_LEN`] bytes are zero (no record starts with a zero tag),
/// `Truncated` when `b` ends inside the record, `BadLength` for a key or value length over
/// the engine limits, `BadChecksum` when the check byte or the CRC does not match, or
/// `BadField` for an unknown kind, flag or TTL value or an overlong varint.
pub fn decode(b: &[u8]) -> Result<Record<'_>, DecodeError> {
    let Header {
        meta,
        key_len,
        value_len,
        body_at,
        mut crc,
    } = header(b)?;
    let end = body_at + key_len + value_len;
    let body = b.get(body_at..end).ok_or(DecodeError::Truncated)?;
    crc.update(body);
    if LE::read_u32(&b[CRC_AT..]) != crc.finalize() {
        return Err(DecodeError::BadChecksum);
    }
    Ok(Record {
        meta,
        key: &body[..key_len],
        value: &body[key_len..],
    })
}

/// The header fields of the record that may start at `b`, if its header passes every check
/// but the CRC of the whole record: what a scan sliding over damage tries before paying for a
/// CRC (random bytes pass about once in 13,000 offsets: tag, varints, limits and the check
/// byte).
#[must_use]
pub fn plausible(b: &[u8]) -> Option<Meta> {
    header(b).ok().map(|h| h.meta)
}

/// The length of the record that may start at `b` as its header claims it (header, key and
/// value), if the header passes its own checks: what decoding it would hash at most.
#[must_use]
pub fn claimed_len(b: &[u8]) -> Option<usize> {
    header(b).ok().map(|h| h.body_at + h.key_len + h.value_len)
}

/// Member count of a batch header record.
#[must_use]
pub fn batch_count(rec: &Record<'_>) -> u32 {
    if rec.value.len() == 4 {
        LE::read_u32(rec.value)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            kind: Kind::Put,
            flags: FLAG_SHADOWS,
            keyspace: 3,
            ttl: ItemTtl::Seconds(30),
            seq: 0x0102_0304_0506_0708,
            write_ms: 1_700_000_000_123,
        }
    }

    fn sample() -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, &meta(), b"key-1", b"value bytes");
        out
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let r = decode(&b).expect("decodes");
        assert_eq!(r.meta, meta());
        assert_eq!(r.key, b"key-1");
        assert_eq!(r.value, b"value bytes");
        assert_eq!(r.encoded_len(), b.len());
        assert_eq!(encoded_len(&meta(), 5, 11), b.len());
    }

    #[test]
    fn every_prefix_is_truncated() {
        let b = sample();
        for n in 0..b.len() {
            assert_eq!(decode(&b[..n]), Err(DecodeError::Truncated), "prefix {n}");
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let b = sample();
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            // A flip in a length field may also show up as Truncated or BadLength; what matters
            // is that no flipped record decodes.
            assert!(decode(&c).is_err(), "bit {bit} went undetected");
        }
    }

    /// A record from raw header field bytes (tag and varints, unchecked), with a correct
    /// check byte and CRC: what a buggy or hostile writer could produce.
    fn seal(fields: &[u8], body: &[u8]) -> Vec<u8> {
        let mut b = vec![0; 4];
        b.extend_from_slice(fields);
        b.push(crc32fast::hash(&b[4..]) as u8);
        b.extend_from_slice(body);
        let crc = crc32fast::hash(&b[4..]);
        LE::write_u32(&mut b[..4], crc);
        b
    }

    #[test]
    fn layout_matches_design_grid() {
        let m = Meta { seq: 300, ..meta() };
        let mut b = Vec::new();
        encode(&mut b, &m, b"key-1", b"value bytes");
        // tag: kind 1 | SHADOWS << 2; keyspace 3; ttl 30 zigzagged; seq 300 in two bytes.
        assert_eq!(b[TAG_AT..FIELDS_AT + 4], [5, 3, 60, 0xAC, 0x02]);
        let mut pos = FIELDS_AT + 4;
        assert_eq!(varint::get(&b, &mut pos), Ok(1_700_000_000_123));
        assert_eq!(b[pos..pos + 2], [5, 11]);
        let check = pos + 2;
        assert_eq!(b[check], crc32fast::hash(&b[TAG_AT..check]) as u8);
        assert_eq!(&b[check + 1..check + 6], b"key-1");
        assert_eq!(&b[check + 6..], b"value bytes");
        assert_eq!(LE::read_u32(&b[CRC_AT..]), crc32fast::hash(&b[4..]));
        assert_eq!(seal(&b[TAG_AT..check], &b[check + 1..]), b);
    }

    #[test]
    fn a_session_record_takes_twenty_header_bytes() {
        // A 16-byte key and a 100-byte value, the 3 millionth write, written in 2026.
        let m = Meta {
            kind: Kind::Put,
            flags: 0,
            keyspace: 1,
            ttl: ItemTtl::Inherit,
            seq: 3_000_000,
            write_ms: 1_795_000_000_000,
        };
        assert_eq!(encoded_len(&m, 16, 100), 136);
        let mut b = Vec::new();
        encode(&mut b, &m, &[7; 16], &[9; 100]);
        assert_eq!(b.len(), 136);
        let longest = Meta {
            kind: Kind::Put,
            flags: KNOWN_FLAGS,
            keyspace: u32::MAX,
            ttl: ItemTtl::Never,
            seq: u64::MAX,
            write_ms: u64::MAX,
        };
        assert!(
            encoded_len(&longest, MAX_KEY_SIZE, MAX_VALUE_SIZE)
                <= MAX_HEADER_LEN + MAX_KEY_SIZE + MAX_VALUE_SIZE
        );
        let mut b = Vec::new();
        encode(&mut b, &longest, b"k", b"v");
        assert_eq!(decode(&b).map(|r| r.meta), Ok(longest));
    }

    #[test]
    fn malformed_headers_with_valid_checksums_are_refused() {
        // kind, keyspace 1, ttl 0, seq 1, write_ms 1, key_len 1, value_len 1
        let good = [1, 1, 0, 1, 1, 1, 1];
        assert!(decode(&seal(&good, b"kv")).is_ok());
        let cases: [(&[u8], &[u8], DecodeError); 7] = [
            (&[0, 1, 0, 1, 1, 1, 1], b"kv", DecodeError::BadField), // kind 0
            (&[0x41, 1, 0, 1, 1, 1, 1], b"kv", DecodeError::BadField), // tag bit 6
            (
                &[1, 0x81, 0x00, 0, 1, 1, 1, 1],
                b"kv",
                DecodeError::BadField,
            ), // overlong
            (&[1, 1, 3, 1, 1, 1, 1], b"kv", DecodeError::BadField), // ttl -2
            (&[3, 1, 0, 1, 1, 1, 4], b"kvvvv", DecodeError::BadField), // batch header with key
            (
                &[1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 1, 1, 1, 1],
                b"kv",
                DecodeError::BadField,
            ), // keyspace past u32
            (
                &[1, 1, 0, 1, 1, 0x80, 0x80, 0x80, 0x40, 1],
                b"",
                DecodeError::BadLength,
            ), // 128 MiB key
        ];
        for (fields, body, err) in cases {
            assert_eq!(
                decode(&seal(fields, body)).map(|r| r.meta),
                Err(err),
                "{fields:?}"
            );
        }
    }

    #[test]
    fn random_bytes_rarely_look_like_a_header() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut bytes = vec![0u8; 1 << 20];
        for b in &mut bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = (x >> 24) as u8;
        }
        let passed = (0..bytes.len() - MAX_HEADER_LEN)
            .filter(|&i| plausible(&bytes[i..]).is_some())
            .count();
        // 82 of these 2^20 offsets (about 1 in 13,000): the tag, TTL and check-byte odds.
        assert!(passed < bytes.len() / 1000, "{passed} plausible offsets");
    }

    #[test]
    fn zero_header_is_end_and_huge_lengths_are_rejected_before_allocating() {
        assert_eq!(decode(&[0u8; 64]), Err(DecodeError::End));
        assert_eq!(decode(&[0u8; MIN_RECORD_LEN]), Err(DecodeError::End));
        assert_eq!(
            decode(&[0u8; MIN_RECORD_LEN - 1]),
            Err(DecodeError::Truncated)
        );
        // A value length of 2^35 is refused from the header, whatever follows.
        let b = seal(
            &[1, 1, 0, 1, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
            b"k",
        );
        assert_eq!(decode(&b).map(|r| r.meta), Err(DecodeError::BadLength));
    }
}
