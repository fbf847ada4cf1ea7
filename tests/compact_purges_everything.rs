//! One `compact()` purges every expired record the policy selects, however many segments that
//! takes: each merge reads at most four segments' worth (DESIGN.md §7), so `compact()` runs as
//! many as it needs. With a `ManualClock` nothing merges in the background, so a caller relies
//! on it (docs/contract.md rule 10). A review found a bounded `compact()` leaving 934 of 1,000
//! expired records on disk.

mod common;

use std::time::Duration;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Store, Ttl};

#[test]
fn one_compact_purges_every_expired_record_under_a_manual_clock() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    // 4 KiB segments (the tests' default): the merge bound is 16 KiB of input.
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(60))?;
    // Every segment: small keepers interleaved with larger expiring values, so each one ends
    // up well over half dead but never dead whole (~40 segments).
    for i in 0..1_000u32 {
        ks.put_with_ttl(format!("keep{i:05}"), vec![1u8; 8], Ttl::Never)?;
        ks.put(format!("tmp{i:05}"), vec![2u8; 100])?;
    }
    c.advance(Duration::from_secs(61));
    store.maintain()?;
    let before = store.stats();
    assert!(before.expired_items >= 900, "{before:?}");
    let report = store.compact()?;
    assert!(report.segments_merged > 4, "{report:?}");
    let after = store.stats();
    assert_eq!(ks.len()?, 1_000);
    assert_eq!(
        after.expired_items, 0,
        "compact() left expired records on disk: {report:?}\nbefore {before:?}\nafter {after:?}"
    );
    Ok(())
}
