//! Basic engine round trips: put/get/delete, TTL, reopen, batches, compaction.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Error, Options, Store, SyncPolicy, Ttl, WriteBatch};

fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
        .segment_size(4096)
}

#[test]
fn put_get_delete_reopen() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    {
        let store = Store::open_with(dir.path(), opts(&clock))?;
        let ks = store.create_keyspace("a", DefaultTtl::Off)?;
        for i in 0..200u32 {
            ks.put(format!("k{i:04}"), format!("v{i}"))?;
        }
        assert!(ks.delete("k0000")?);
        assert!(!ks.delete("k0000")?);
        assert_eq!(ks.get("k0001")?, Some(b"v1".to_vec()));
        assert_eq!(ks.get("k0000")?, None);
        assert_eq!(ks.len()?, 199);
        assert!(matches!(
            Store::open_with(dir.path(), opts(&clock)),
            Err(Error::Locked(_))
        ));
    }
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.keyspace("a")?;
    assert_eq!(ks.len()?, 199);
    assert_eq!(ks.get("k0199")?, Some(b"v199".to_vec()));
    assert_eq!(ks.get("k0000")?, None);
    let keys: Vec<_> = ks
        .prefix("k001")
        .map(|r| r.map(|(k, _)| k))
        .collect::<Result<_, _>>()?;
    assert_eq!(keys.len(), 10);
    Ok(())
}

#[test]
fn ttl_expires_and_compaction_purges() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("s", DefaultTtl::Seconds(10))?;
    for i in 0..300u32 {
        ks.put(format!("k{i:04}"), vec![7u8; 100])?;
    }
    ks.put_with_ttl("keep", b"x", Ttl::Never)?;
    clock.advance(Duration::from_secs(10));
    assert_eq!(ks.len()?, 1);
    assert_eq!(store.maintain()?, 300);
    let before = store.stats();
    let report = store.compact_full()?;
    let after = store.stats();
    assert!(
        after.segment_bytes < before.segment_bytes / 5,
        "{before:?} {after:?} {report:?}"
    );
    drop(ks);
    drop(store);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.keyspace("s")?;
    assert_eq!(ks.len()?, 1);
    let mut b = WriteBatch::new();
    b.put(&ks, "x", "1").put(&ks, "y", "2");
    store.write_batch(b)?;
    assert_eq!(ks.len()?, 3);
    Ok(())
}
