//! On-disk formats: segment header, record, hint file.
//!
//! Every constant here mirrors a byte grid in DESIGN.md ("On-disk format"); the unit tests in
//! `record.rs` and `hint.rs` pin the offsets so the code and the document cannot drift apart.
//! All integers are little-endian. Every decoder checks a length against its limit and against
//! the bytes actually left *before* allocating or slicing.

pub mod hint;
pub mod record;
pub mod varint;

/// Format version written in every file header. Bump on any layout change.
pub const FORMAT_VERSION: u32 = 4;

/// Magic at the start of a segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"EBBDBSEG";
/// Length of the segment header; the first record starts here.
pub const SEGMENT_HEADER_LEN: usize = 32;

/// Magic at the start of a hint file.
pub const HINT_MAGIC: [u8; 8] = *b"EBBDBHNT";

/// Why bytes failed to decode. Recovery uses the difference between "ran out of bytes" and
/// "bytes are wrong" to tell a torn tail from corruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes remain than the structure needs.
    Truncated,
    /// The stored CRC does not match the bytes.
    BadChecksum,
    /// A length field exceeds its limit.
    BadLength,
    /// An impossible field value (unknown kind, bad magic, unknown version, bad TTL).
    BadField,
    /// An all-zero header: the end of the written part of a file.
    End,
    /// A damaged record after which searching for the next one would cost more than a scan
    /// allows (`log::scan::scan_all`): the rest of the segment is not searched.
    Unsearched,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            DecodeError::Truncated => "truncated record",
            DecodeError::BadChecksum => "checksum mismatch",
            DecodeError::BadLength => "length field out of range",
            DecodeError::BadField => "invalid field value",
            DecodeError::End => "zeroed bytes",
            DecodeError::Unsearched => {
                "damaged record; finding the next record would cost more than the scan allows \
                 (crafted bytes?), so the rest of the segment was not searched"
            }
        };
        f.write_str(s)
    }
}

/// Segment file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's file id.
    pub id: u32,
    /// The global sequence number at the moment the file was created. No record in this file
    /// that was *appended* (not copied by a merge) has a smaller sequence number, and a merge
    /// output holds only records that were live when this number was taken.
    pub created_seq: u64,
}

impl SegmentHeader {
    /// Encodes the 32-byte header.
    #[must_use]
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        use byteorder::{ByteOrder, LittleEndian as LE};
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        LE::write_u32(&mut b[8..12], FORMAT_VERSION);
        LE::write_u32(&mut b[12..16], self.id);
        LE::write_u64(&mut b[16..24], self.created_seq);
        let crc = crc32fast::hash(&b[0..28]);
        LE::write_u32(&mut b[28..32], crc);
        b
    }

    /// Decodes and checks a header.
    ///
    /// # Errors
    /// `Truncated` if fewer than 32 bytes; `BadField` for wrong magic or version;
    /// `BadChecksum` if the CRC does not match.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        use byteorder::{ByteOrder, LittleEndian as LE};
        let b = b.get(..SEGMENT_HEADER_LEN).ok_or(DecodeError::Truncated)?;
        if b[0..8] != SEGMENT_MAGIC {
            return Err(DecodeError::BadField);
        }
        if LE::read_u32(&b[28..32]) != crc32fast::hash(&b[0..28]) {
            return Err(DecodeError::BadChecksum);
        }
        if LE::read_u32(&b[8..12]) != FORMAT_VERSION {
            return Err(DecodeError::BadField);
        }
        Ok(Self {
            id: LE::read_u32(&b[12..16]),
            created_seq: LE::read_u64(&b[16..24]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trip_and_checks() {
        let h = SegmentHeader {
            id: 7,
            created_seq: 99,
        };
        let b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        assert_eq!(SegmentHeader::decode(&b[..31]), Err(DecodeError::Truncated));
        for bit in 0..(28 * 8) {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::decode(&c).is_err(), "bit {bit}");
        }
        // DESIGN.md grid: magic 0..8, version 8..12, id 12..16, created_seq 16..24, crc 28..32.
        assert_eq!(&b[0..8], b"EBBDBSEG");
        assert_eq!(b[8], 4);
        assert_eq!(b[12], 7);
        assert_eq!(b[16], 99);
    }
}
