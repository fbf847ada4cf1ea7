//! Logic of the `record_decode` fuzz target, shared with `tests/fuzz_corpus.rs` (which includes
//! this file with `#[path]`, so the corpus replay runs exactly what the fuzzer runs).
//!
//! Input: arbitrary bytes. Checks: `record::decode` never panics; an accepted record re-encodes
//! and decodes to the same record; `SegmentHeader::decode` round-trips; `scan` over the bytes
//! (after a valid segment header) never panics, reports records in increasing, in-bounds,
//! non-overlapping positions that each decode on their own, and a valid length within the input.

use ebbdb::format::record::{self, Kind};
use ebbdb::format::{SegmentHeader, SEGMENT_HEADER_LEN};
use ebbdb::log::scan::{scan, ScanEnd};

/// Runs one input.
pub fn run(data: &[u8]) {
    if let Ok(rec) = record::decode(data) {
        let len = rec.encoded_len();
        assert!(len <= data.len(), "record longer than its input");
        let mut again = Vec::new();
        record::encode(&mut again, &rec.meta, rec.key, rec.value);
        assert_eq!(again.len(), len, "re-encoded length");
        let back = record::decode(&again).expect("a re-encoded record decodes");
        assert_eq!(back, rec, "record round trip");
        if rec.meta.kind == Kind::BatchHeader {
            assert!(
                rec.key.is_empty() && rec.value.len() == 4,
                "batch header shape"
            );
        }
        // Every field has one encoding (shortest varints, no spare bits), so the record is
        // reproduced byte for byte.
        assert_eq!(again[..], data[..len], "re-encoded bytes");
    }

    if let Ok(h) = SegmentHeader::decode(data) {
        assert_eq!(
            SegmentHeader::decode(&h.encode()),
            Ok(h),
            "header round trip"
        );
    }

    // The same bytes as the body of a segment.
    let mut seg = SegmentHeader {
        id: 1,
        created_seq: 1,
    }
    .encode()
    .to_vec();
    seg.extend_from_slice(data);
    let mut next = SEGMENT_HEADER_LEN;
    let end = scan(&seg, |off, len, rec| {
        let (off, len) = (off as usize, len as usize);
        assert!(off >= next, "records out of order or overlapping");
        assert!(off + len <= seg.len(), "record past the end");
        assert_eq!(len, rec.encoded_len(), "reported length");
        assert_ne!(
            rec.meta.kind,
            Kind::BatchHeader,
            "scan reports a batch header"
        );
        let alone = record::decode(&seg[off..]).expect("a scanned record decodes alone");
        assert_eq!(&alone, rec, "scanned record");
        next = off + len;
    });
    assert!(
        end.valid_len() >= SEGMENT_HEADER_LEN,
        "valid length before the header"
    );
    assert!(end.valid_len() <= seg.len(), "valid length past the end");
    if let ScanEnd::Bad { offset, .. } = end {
        assert!(offset < seg.len(), "bad offset past the end");
    }
}

/// Seed inputs: well-formed records of each kind, a batch, and an all-zero header.
pub fn seeds() -> Vec<Vec<u8>> {
    use ebbdb::format::record::{Meta, FLAG_IN_BATCH, FLAG_MARKER, FLAG_SHADOWS};
    use ebbdb::ttl::ItemTtl;
    let meta = |kind, flags, ttl, seq| Meta {
        kind,
        flags,
        keyspace: 1,
        ttl,
        seq,
        write_ms: 1_700_000_000_123,
    };
    let one = |m: Meta, k: &[u8], v: &[u8]| {
        let mut b = Vec::new();
        record::encode(&mut b, &m, k, v);
        b
    };
    let mut batch = one(
        meta(Kind::BatchHeader, 0, ItemTtl::Inherit, 3),
        b"",
        &2u32.to_le_bytes(),
    );
    batch.extend(one(
        meta(Kind::Put, FLAG_IN_BATCH, ItemTtl::Never, 4),
        b"b",
        b"two",
    ));
    batch.extend(one(
        meta(
            Kind::Tombstone,
            FLAG_IN_BATCH | FLAG_SHADOWS,
            ItemTtl::Inherit,
            5,
        ),
        b"a",
        b"",
    ));
    let mut two = one(
        meta(Kind::Put, 0, ItemTtl::Seconds(30), 1),
        b"key",
        b"value",
    );
    two.extend(one(
        meta(
            Kind::Tombstone,
            FLAG_SHADOWS | FLAG_MARKER,
            ItemTtl::Inherit,
            2,
        ),
        b"key",
        b"",
    ));
    vec![
        one(
            meta(Kind::Put, FLAG_SHADOWS, ItemTtl::Seconds(30), 7),
            b"key-1",
            b"some value bytes",
        ),
        one(meta(Kind::Tombstone, 0, ItemTtl::Inherit, 8), b"key-2", b""),
        two,
        batch,
        vec![0u8; 48],
        SegmentHeader {
            id: 3,
            created_seq: 9,
        }
        .encode()
        .to_vec(),
    ]
}
