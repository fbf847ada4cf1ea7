//! A merge copies the unexpired puts of a segment in which nothing was replaced without asking
//! the key directory (DESIGN.md §7). A write between the merge's decisions and its key-directory
//! move must still win: the copy it replaced is counted as replaced in its output, so a later
//! merge asks about it again and a deleted key does not come back after the tombstone is gone.

use std::sync::{Arc, Mutex};

use ebbdb::clock::ManualClock;
use ebbdb::compaction::merge::CrashPoint;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

fn options() -> Options {
    Options::default()
        .clock(ManualClock::at_unix_secs(1_700_000_000))
        .sync(SyncPolicy::Never)
        .segment_size(64 * 1024)
}

#[test]
fn a_write_during_a_merge_beats_the_copy_made_without_a_lookup() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), options())?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..3000 {
        ks.put(format!("k{i:05}"), [1u8; 64])?;
    }
    store
        .check_clean_segments()
        .map_err(ebbdb::Error::BadRequest)?;
    // Once every record is decided (and copied: nothing was replaced before), one key is
    // overwritten and one deleted, before the outputs are published and the entries moved.
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let (writer_ks, seen) = (ks.clone(), Arc::clone(&failed));
    store.set_merge_observer(Some(Arc::new(move |step| {
        if step != CrashPoint::AfterOutputs {
            return;
        }
        let ks = writer_ks.clone();
        let result = std::thread::spawn(move || -> ebbdb::Result<bool> {
            ks.put("k00001", b"new")?;
            ks.delete("k00002")
        })
        .join();
        if !matches!(result, Ok(Ok(true))) {
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{result:?}"));
        }
    })));
    let report = store.compact_full()?;
    store.set_merge_observer(None);
    assert!(report.records_copied >= 3000, "{report:?}");
    assert!(failed.lock().unwrap_or_else(|p| p.into_inner()).is_empty());
    // The output holds the old versions of both keys; it must say so.
    store
        .check_clean_segments()
        .map_err(ebbdb::Error::BadRequest)?;
    assert_eq!(ks.get("k00001")?, Some(b"new".to_vec()));
    assert_eq!(ks.get("k00002")?, None);

    // A second full merge takes everything, tombstone included: had the first output claimed
    // to be clean, its copy of k00002 would be copied again without a lookup while the
    // tombstone, with nothing older left outside the merge, went.
    store.compact_full()?;
    assert_eq!(ks.get("k00002")?, None);
    drop(ks);
    drop(store);
    let store = Store::open_with(dir.path(), options())?;
    store
        .check_clean_segments()
        .map_err(ebbdb::Error::BadRequest)?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.get("k00001")?, Some(b"new".to_vec()));
    assert_eq!(ks.get("k00002")?, None, "a deleted key came back");
    assert_eq!(ks.get("k00003")?, Some(vec![1u8; 64]));
    assert_eq!(ks.len()?, 2999);
    Ok(())
}
