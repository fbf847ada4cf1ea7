//! A merge that reclaims nothing is not repeated until something else is reclaimed.
//!
//! Found by a review: a merge keeps a tombstone as a marker while an older segment may still
//! hold the version it deletes, and counts it dead, so a segment of such markers is all dead
//! and qualifies for a merge at once, whose output is the same markers again. One `compact()`
//! ran 77 merges rewriting the same 46 KB of markers, and the background worker would have
//! merged it at every tick for as long as the older segment stayed (DESIGN.md section 7).

mod common;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Store};

#[test]
fn a_segment_of_needed_markers_is_not_merged_again_and_again() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c).segment_size(64 * 1024))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let n = 40_000u32;
    for i in 0..n {
        ks.put(i.to_be_bytes(), vec![1u8; 100])?;
    }
    store.compact_full()?;
    // One key in twenty deleted: the tombstones fill segments of their own, and the puts they
    // delete stay in segments that are 95 % live, so every marker must be kept.
    for i in (0..n).step_by(20) {
        ks.delete(i.to_be_bytes())?;
    }
    let first = store.compact()?;
    let merges = store.stats().merges;
    for round in 0..3 {
        let again = store.compact()?;
        assert!(
            again.segments_merged == 0,
            "compact() {round} after {first:?} merged again: {again:?}"
        );
    }
    assert_eq!(store.stats().merges, merges);
    for i in 0..n {
        assert_eq!(
            ks.get(i.to_be_bytes())?,
            (i % 20 != 0).then(|| vec![1u8; 100]),
            "key {i}"
        );
    }
    // A reopen keeps every deleted key deleted (the markers did their job).
    drop((ks, store));
    let store = Store::open_with(dir.path(), opts(&c).segment_size(64 * 1024))?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.len()?, (n - n / 20) as usize);
    assert_eq!(ks.get(0u32.to_be_bytes())?, None);
    Ok(())
}
