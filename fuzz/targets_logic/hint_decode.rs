//! Logic of the `hint_decode` fuzz target, shared with `tests/fuzz_corpus.rs`.
//!
//! Input: arbitrary bytes, decoded as a hint file both for the segment id its header names and
//! for id 1. Checks: `hint::decode` never panics; an accepted file yields a bounded entry list
//! that re-encodes (with `HintWriter`) to a file decoding to the same entries.

use ebbdb::format::hint::{self, HintEntry, HintWriter};

/// Runs one input.
pub fn run(data: &[u8]) {
    let named = data
        .get(12..16)
        .map_or(1, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    for id in [named, 1] {
        if let Ok(entries) = hint::decode(data, id) {
            assert!(
                entries.len() * hint::MIN_ENTRY_LEN + 32 <= data.len(),
                "more entries than bytes"
            );
            let again = encode(id, &entries);
            let back = hint::decode(&again, id).expect("a re-encoded hint decodes");
            // The writer orders entries by keyspace, key, newest first (stable for ties).
            let mut want = entries.clone();
            want.sort_by(|a, b| {
                (a.meta.keyspace, &a.key)
                    .cmp(&(b.meta.keyspace, &b.key))
                    .then(b.meta.seq.cmp(&a.meta.seq))
            });
            assert_eq!(back, want, "hint round trip");
        }
    }
}

fn encode(id: u32, entries: &[HintEntry]) -> Vec<u8> {
    let mut w = HintWriter::new(id);
    for e in entries {
        w.add(&e.meta, &e.key, e.offset, e.len);
    }
    w.finish()
}

/// Seed inputs: an empty hint file and one with a few entries.
pub fn seeds() -> Vec<Vec<u8>> {
    use ebbdb::format::record::{Kind, Meta, FLAG_MARKER, FLAG_SHADOWS};
    use ebbdb::ttl::ItemTtl;
    let meta = |kind, flags, ttl, seq| Meta {
        kind,
        flags,
        keyspace: 2,
        ttl,
        seq,
        write_ms: 1_700_000_000_500,
    };
    let mut w = HintWriter::new(7);
    w.add(
        &meta(Kind::Put, 0, ItemTtl::Seconds(60), 10),
        b"alpha",
        32,
        77,
    );
    w.add(
        &meta(Kind::Put, FLAG_SHADOWS, ItemTtl::Never, 11),
        b"beta",
        109,
        90,
    );
    w.add(
        &meta(
            Kind::Tombstone,
            FLAG_SHADOWS | FLAG_MARKER,
            ItemTtl::Inherit,
            12,
        ),
        b"alpha",
        199,
        45,
    );
    vec![HintWriter::new(1).finish(), w.finish()]
}
