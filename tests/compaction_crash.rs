//! A merge stopped after each of its steps (as if the process died there) leaves a directory
//! that opens to the same live data.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{clock, opts};
use ebbdb::compaction::merge::CrashPoint;
use ebbdb::{DefaultTtl, Store, Ttl};

fn live(store: &Store) -> ebbdb::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    store.keyspace("ks")?.iter().collect()
}

#[test]
fn merge_stopped_at_every_step_reopens_to_the_same_data() -> ebbdb::Result<()> {
    for point in [
        CrashPoint::AfterOutputs,
        CrashPoint::AfterPublish,
        CrashPoint::AfterKeydirMove,
    ] {
        let dir = tempfile::tempdir()?;
        let c = clock();
        let expected;
        {
            let store = Store::open_with(dir.path(), opts(&c))?;
            let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
            for i in 0..120u32 {
                ks.put(
                    format!("k{:03}", i % 40),
                    format!("v{i}-{}", "x".repeat(50)),
                )?;
                if i % 3 == 0 {
                    ks.put_with_ttl(format!("t{i:03}"), "short", Ttl::Seconds(5))?;
                }
                if i % 7 == 0 {
                    ks.delete(format!("k{:03}", (i + 1) % 40))?;
                }
            }
            c.advance(Duration::from_secs(5));
            store.maintain()?;
            expected = live(&store)?;
            assert!(!expected.is_empty());
            // Make the writes durable first: a crash keeps only a prefix of unsynced writes
            // (the rotations the sync thread had not committed yet are lost, DESIGN.md §8
            // step 7), and this test is about what the merge does.
            store.sync()?;
            store.set_merge_crash_point(Some(point));
            let err = store.compact_full().expect_err("injected crash");
            assert!(err.to_string().contains("injected crash"), "{err}");
            // After the simulated death the handle refuses writes.
            assert!(ks.put("x", "y").is_err());
        }
        let store = Store::open_with(dir.path(), opts(&c))?;
        assert_eq!(live(&store)?, expected, "after a crash at {point:?}");
        // The reopened store can finish the work.
        store.compact_full()?;
        assert_eq!(
            live(&store)?,
            expected,
            "after re-running the merge ({point:?})"
        );
        drop(store);
        let store = Store::open_with(dir.path(), opts(&c))?;
        assert_eq!(live(&store)?, expected, "after a second reopen ({point:?})");
    }
    Ok(())
}
