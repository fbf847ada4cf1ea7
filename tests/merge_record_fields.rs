//! What a merge writes, record by record: a copy is its input record byte for byte (header
//! included: IN_BATCH and the record's own TTL kept), and a no-resurrection marker is
//! `Meta{Tombstone, SHADOWS|MARKER, keyspace, Inherit, seq, write_ms}` of the record it stands
//! for, also when that record was a batch member with its own TTL or in another keyspace. A
//! merge reads each kept record's header again from its input when it writes it (DESIGN.md
//! §7, "Merge memory"), so this pins the fields to the input's.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{clock, opts, segments};
use ebbdb::format::record::{Kind, Meta, FLAG_IN_BATCH, FLAG_MARKER, FLAG_SHADOWS};
use ebbdb::log::scan::scan;
use ebbdb::{DefaultTtl, Store, Ttl, WriteBatch};

fn filler(ks: &ebbdb::Keyspace, tag: &str, n: usize) -> ebbdb::Result<()> {
    for i in 0..n {
        ks.put(format!("{tag}{i:04}"), vec![b'f'; 200])?;
    }
    Ok(())
}

/// Every record of every segment file: seq -> (meta, key, value).
type Records = HashMap<u64, (Meta, Vec<u8>, Vec<u8>)>;

fn records(dir: &std::path::Path) -> ebbdb::Result<Records> {
    let mut out = HashMap::new();
    for p in segments(dir)? {
        let bytes = std::fs::read(&p)?;
        scan(&bytes, |_, _, r| {
            out.insert(r.meta.seq, (r.meta, r.key.to_vec(), r.value.to_vec()));
        });
    }
    Ok(out)
}

#[test]
fn a_merge_copies_records_unchanged_and_markers_take_their_records_fields() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
    let other = store.create_keyspace("other", DefaultTtl::NeverExpire)?;
    // Segment A (stays out of the merge): the old versions.
    ks.put("K-expiring", "old")?;
    ks.put("K-deleted-in-a-batch-with-a-long-key", "old")?;
    other.put("O", "old")?;
    filler(&ks, "live", 40)?;
    // Segment B: garbage, then a batch whose members shadow A's versions.
    filler(&ks, "junk", 20)?;
    let mut b = WriteBatch::new();
    b.put_with_ttl(&ks, "K-expiring", "short-lived", Ttl::Seconds(5));
    b.delete(&ks, "K-deleted-in-a-batch-with-a-long-key");
    b.put_with_ttl(&other, "O", "expiring too", Ttl::Seconds(5));
    b.put_with_ttl(&ks, "stays", "batch member copied", Ttl::Seconds(3600));
    store.write_batch(b)?;
    c.advance(Duration::from_secs(6));
    filler(&ks, "junk", 20)?;
    filler(&ks, "tail", 40)?;
    store.sync()?;
    let before = records(dir.path())?;
    let report = store.compact()?;
    assert!(report.segments_merged > 0, "{report:?}");
    // Closed before the files are read: a merged-away segment is unlinked when its last
    // holder (a reader, the sync thread) lets go, which may be just after a listing finds it.
    drop((ks, other));
    drop(store);
    let after = records(dir.path())?;

    let mut markers = 0;
    let mut batch_copies = 0;
    for (seq, (meta, key, value)) in &after {
        let (orig, okey, ovalue) = before.get(seq).expect("every record after has a source");
        assert_eq!(key, okey);
        if meta.flags & FLAG_MARKER != 0 && orig.flags & FLAG_MARKER == 0 {
            markers += 1;
            let want = Meta {
                kind: Kind::Tombstone,
                flags: FLAG_SHADOWS | FLAG_MARKER,
                keyspace: orig.keyspace,
                ttl: ebbdb::ttl::ItemTtl::Inherit,
                seq: orig.seq,
                write_ms: orig.write_ms,
            };
            assert_eq!(*meta, want, "marker for {:?}", String::from_utf8_lossy(key));
            assert!(value.is_empty());
        } else {
            assert_eq!(meta, orig, "copy of {:?}", String::from_utf8_lossy(key));
            assert_eq!(value, ovalue);
            if meta.flags & FLAG_IN_BATCH != 0 {
                batch_copies += 1;
            }
        }
    }
    assert_eq!(markers, 3, "{report:?}");
    assert!(batch_copies >= 1);
    let store = Store::open_with(dir.path(), opts(&c))?;
    assert_eq!(store.keyspace("ks")?.get("K-expiring")?, None);
    assert_eq!(
        store
            .keyspace("ks")?
            .get("K-deleted-in-a-batch-with-a-long-key")?,
        None
    );
    assert_eq!(store.keyspace("other")?.get("O")?, None);
    assert!(store.keyspace("ks")?.get("stays")?.is_some());
    Ok(())
}
