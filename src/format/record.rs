//! The record: the unit of the append-only log.
//!
//! ```text
//! offset size field
//!  0     4    crc32      CRC32 (IEEE) of bytes [4, 40 + key_len + value_len)
//!  4     1    kind       1 put, 2 tombstone, 3 batch header
//!  5     1    flags      bit 0 SHADOWS, bit 1 IN_BATCH, bit 2 MARKER
//!  6     2    reserved   zero
//!  8     4    keyspace   keyspace id
//! 12     4    ttl        i32: 0 inherit, -1 never, n > 0 seconds
//! 16     8    seq        global sequence number, strictly increasing in append order
//! 24     8    write_ms   write time, Unix milliseconds (engine clock)
//! 32     4    key_len
//! 36     4    value_len
//! 40     ..   key, then value
//! ```
//! A batch header has an empty key and a 4-byte value: the number of member records that follow
//! it immediately. Its CRC covers only itself; recovery accepts the batch only when every member
//! decodes.

use byteorder::{ByteOrder, LittleEndian as LE};

use super::DecodeError;
use crate::options::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::ttl::ItemTtl;

/// Length of the fixed record header.
pub const RECORD_HEADER_LEN: usize = 40;

/// Offsets of the header fields (see the grid above and DESIGN.md).
pub mod offsets {
    /// CRC32.
    pub const CRC: usize = 0;
    /// Kind byte.
    pub const KIND: usize = 4;
    /// Flags byte.
    pub const FLAGS: usize = 5;
    /// Keyspace id.
    pub const KEYSPACE: usize = 8;
    /// Own TTL.
    pub const TTL: usize = 12;
    /// Sequence number.
    pub const SEQ: usize = 16;
    /// Write time.
    pub const WRITE_MS: usize = 24;
    /// Key length.
    pub const KEY_LEN: usize = 32;
    /// Value length.
    pub const VALUE_LEN: usize = 36;
}

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
/// Every flag bit a record may carry.
pub const KNOWN_FLAGS: u8 = FLAG_SHADOWS | FLAG_IN_BATCH | FLAG_MARKER;

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
        RECORD_HEADER_LEN + self.key.len() + self.value.len()
    }
}

/// Encoded length of a record with these key and value lengths.
#[must_use]
pub fn encoded_len(key_len: usize, value_len: usize) -> usize {
    RECORD_HEADER_LEN + key_len + value_len
}

/// Appends an encoded record to `out`. Callers have checked the key and value limits.
pub fn encode(out: &mut Vec<u8>, meta: &Meta, key: &[u8], value: &[u8]) {
    let start = out.len();
    out.resize(start + RECORD_HEADER_LEN, 0);
    let h = &mut out[start..];
    h[offsets::KIND] = meta.kind as u8;
    h[offsets::FLAGS] = meta.flags;
    LE::write_u32(&mut h[offsets::KEYSPACE..], meta.keyspace);
    LE::write_i32(&mut h[offsets::TTL..], meta.ttl.to_wire());
    LE::write_u64(&mut h[offsets::SEQ..], meta.seq);
    LE::write_u64(&mut h[offsets::WRITE_MS..], meta.write_ms);
    LE::write_u32(
        &mut h[offsets::KEY_LEN..],
        u32::try_from(key.len()).unwrap_or(u32::MAX),
    );
    LE::write_u32(
        &mut h[offsets::VALUE_LEN..],
        u32::try_from(value.len()).unwrap_or(u32::MAX),
    );
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32fast::hash(&out[start + 4..]);
    LE::write_u32(&mut out[start..start + 4], crc);
}

/// Decodes the record at the start of `b`.
///
/// # Errors
/// `End` for an all-zero header, `Truncated` when `b` ends inside the record, `BadLength` for
/// a key or value length over the engine limits, `BadChecksum`, or `BadField` for an unknown
/// kind, flag or TTL value.
pub fn decode(b: &[u8]) -> Result<Record<'_>, DecodeError> {
    let h = b.get(..RECORD_HEADER_LEN).ok_or(DecodeError::Truncated)?;
    if h.iter().all(|&x| x == 0) {
        return Err(DecodeError::End);
    }
    let key_len = LE::read_u32(&h[offsets::KEY_LEN..]) as usize;
    let value_len = LE::read_u32(&h[offsets::VALUE_LEN..]) as usize;
    if key_len > MAX_KEY_SIZE || value_len > MAX_VALUE_SIZE {
        return Err(DecodeError::BadLength);
    }
    let total = RECORD_HEADER_LEN + key_len + value_len;
    let body = b.get(..total).ok_or(DecodeError::Truncated)?;
    if LE::read_u32(&body[offsets::CRC..]) != crc32fast::hash(&body[4..]) {
        return Err(DecodeError::BadChecksum);
    }
    let kind = Kind::from_u8(h[offsets::KIND]).ok_or(DecodeError::BadField)?;
    let flags = h[offsets::FLAGS];
    let ttl = ItemTtl::from_wire(LE::read_i32(&h[offsets::TTL..])).ok_or(DecodeError::BadField)?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(DecodeError::BadField);
    }
    let key = &body[RECORD_HEADER_LEN..RECORD_HEADER_LEN + key_len];
    let value = &body[RECORD_HEADER_LEN + key_len..];
    if kind == Kind::BatchHeader && (key_len != 0 || value_len != 4) {
        return Err(DecodeError::BadField);
    }
    Ok(Record {
        meta: Meta {
            kind,
            flags,
            keyspace: LE::read_u32(&h[offsets::KEYSPACE..]),
            ttl,
            seq: LE::read_u64(&h[offsets::SEQ..]),
            write_ms: LE::read_u64(&h[offsets::WRITE_MS..]),
        },
        key,
        value,
    })
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
        assert_eq!(encoded_len(5, 11), b.len());
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

    #[test]
    fn offsets_match_design_grid() {
        let b = sample();
        assert_eq!(b[offsets::KIND], 1);
        assert_eq!(b[offsets::FLAGS], FLAG_SHADOWS);
        assert_eq!(LE::read_u32(&b[offsets::KEYSPACE..]), 3);
        assert_eq!(LE::read_i32(&b[offsets::TTL..]), 30);
        assert_eq!(LE::read_u64(&b[offsets::SEQ..]), 0x0102_0304_0506_0708);
        assert_eq!(LE::read_u64(&b[offsets::WRITE_MS..]), 1_700_000_000_123);
        assert_eq!(LE::read_u32(&b[offsets::KEY_LEN..]), 5);
        assert_eq!(LE::read_u32(&b[offsets::VALUE_LEN..]), 11);
        assert_eq!(&b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + 5], b"key-1");
        assert_eq!(LE::read_u32(&b[offsets::CRC..]), crc32fast::hash(&b[4..]));
    }

    #[test]
    fn zero_header_is_end_and_huge_lengths_are_rejected_before_allocating() {
        assert_eq!(decode(&[0u8; 64]), Err(DecodeError::End));
        let mut b = sample();
        LE::write_u32(&mut b[offsets::VALUE_LEN..], u32::MAX);
        assert_eq!(decode(&b), Err(DecodeError::BadLength));
    }
}
