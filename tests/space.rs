//! Expired data is physically purged: after expiry and compaction, disk bytes drop to about
//! the live data.

mod common;

use std::time::Duration;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Store, Ttl};

#[test]
fn disk_bytes_drop_to_about_the_live_data() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c).segment_size(64 * 1024))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(60))?;
    for i in 0..200u32 {
        ks.put_with_ttl(format!("keep{i:04}"), vec![1u8; 100], Ttl::Never)?;
    }
    for i in 0..5_000u32 {
        ks.put(format!("tmp{i:05}"), vec![2u8; 100])?;
    }
    let before = store.stats();
    c.advance(Duration::from_secs(60));
    assert_eq!(ks.len()?, 200);
    let s = store.stats();
    assert_eq!(s.expired_items, 5_000, "expired but not yet purged");
    store.compact()?;
    let after = store.stats();
    // What may stay is a tail of expired records in the active segment, when that is under
    // the 1/16 of a segment below which `compact` does not seal it.
    assert!(
        after.expired_bytes < 64 * 1024 / 16,
        "expired bytes left: {after:?}"
    );
    let active = after.per_segment.iter().find(|s| s.active);
    assert_eq!(
        after.expired_bytes,
        active.map_or(0, |s| s.bytes) * u64::from(after.expired_items > 0),
        "only the active segment holds expired records: {after:?}"
    );
    assert_eq!(ks.len()?, 200);
    // Live record bytes vs segment bytes (headers and the system overhead aside).
    let ratio = after.segment_bytes as f64 / after.live_bytes as f64;
    assert!(ratio < 1.5, "disk/live = {ratio:.2}: {after:?}");
    assert!(
        after.segment_bytes * 10 < before.segment_bytes,
        "{before:?} -> {after:?}"
    );
    Ok(())
}
