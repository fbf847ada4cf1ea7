//! An older version must never come back because a newer expired (or deleted) one was dropped
//! by a compaction that did not include the older one's segment, before or after a restart.

mod common;

use std::time::Duration;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Store, Ttl};

/// Fills the active segment with `n` records of throwaway keys so it rotates.
fn filler(ks: &ebbdb::Keyspace, tag: &str, n: usize) -> ebbdb::Result<()> {
    for i in 0..n {
        ks.put(format!("{tag}{i:04}"), vec![b'f'; 200])?;
    }
    Ok(())
}

fn scenario(
    kill: impl Fn(&ebbdb::Keyspace, &ebbdb::clock::ManualClock) -> ebbdb::Result<()>,
) -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
        // Segment A: K without expiry among data that stays live.
        ks.put("K", "old version")?;
        filler(&ks, "live", 40)?;
        // Segment B: garbage (overwritten right away) plus the newer version of K.
        filler(&ks, "junk", 20)?;
        kill(&ks, &c)?;
        filler(&ks, "junk", 20)?;
        filler(&ks, "tail", 40)?;
        assert_eq!(ks.get("K")?, None);
        let report = store.compact()?;
        assert!(
            report.segments_merged + report.segments_dropped > 0,
            "{report:?}"
        );
        assert!(
            store
                .stats()
                .per_segment
                .iter()
                .any(|s| !s.active && s.dead_share < 0.5),
            "the segment holding the old version must stay out of the merge"
        );
        assert_eq!(ks.get("K")?, None);
        // A second policy run (the marker, if any, is carried, not dropped).
        store.compact()?;
        assert_eq!(ks.get("K")?, None);
    }
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.get("K")?, None, "resurrected after reopen");
    assert_eq!(
        ks.iter()
            .filter(|r| r.as_ref().is_ok_and(|(k, _)| k == b"K"))
            .count(),
        0
    );
    store.compact()?;
    drop(ks);
    drop(store);
    let store = Store::open_with(dir.path(), opts(&c))?;
    assert_eq!(
        store.keyspace("ks")?.get("K")?,
        None,
        "resurrected after compact + reopen"
    );
    Ok(())
}

#[test]
fn expired_newer_version_does_not_resurrect_the_older_one() -> ebbdb::Result<()> {
    scenario(|ks, c| {
        ks.put_with_ttl("K", "short-lived", Ttl::Seconds(5))?;
        c.advance(Duration::from_secs(5));
        Ok(())
    })
}

#[test]
fn deleted_key_does_not_resurrect() -> ebbdb::Result<()> {
    scenario(|ks, _| {
        assert!(ks.delete("K")?);
        Ok(())
    })
}

#[test]
fn write_once_expired_keys_need_no_marker() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(10))?;
    ks.put_with_ttl("cold", "stays", Ttl::Never)?;
    filler(&ks, "x", 100)?;
    c.advance(Duration::from_secs(10));
    store.maintain()?;
    let report = store.compact_full()?;
    assert_eq!(report.markers_written, 0, "{report:?}");
    assert_eq!(ks.len()?, 1);
    Ok(())
}
