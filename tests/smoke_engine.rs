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

/// A batch may only hold keyspaces of the store it is written to: mixing two stores, or
/// writing one store's batch to another, is refused with 400 and writes nothing anywhere.
#[test]
fn a_batch_across_stores_is_refused() -> ebbdb::Result<()> {
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let a = Store::open(dir_a.path())?;
    let b = Store::open(dir_b.path())?;
    let ka = a.create_keyspace("ks", DefaultTtl::Off)?;
    let kb = b.create_keyspace("ks", DefaultTtl::Off)?;

    let mut mixed = WriteBatch::new();
    mixed.put(&ka, "x", "1").put(&kb, "y", "2");
    assert!(matches!(
        a.write_batch(mixed.clone()),
        Err(Error::BadRequest(_))
    ));
    assert!(matches!(b.write_batch(mixed), Err(Error::BadRequest(_))));

    let mut only_b = WriteBatch::new();
    only_b.put(&kb, "y", "2");
    assert!(matches!(
        a.write_batch(only_b.clone()),
        Err(Error::BadRequest(_))
    ));
    assert_eq!(ka.get("x")?, None);
    assert_eq!(kb.get("y")?, None);
    b.write_batch(only_b)?;
    assert_eq!(kb.get("y")?, Some(b"2".to_vec()));
    Ok(())
}

/// The active segment is zero-filled ahead of the writes only when writes are fsynced as they
/// come (there it saves committing a size change per fsync); under `Never` that would write
/// every page twice, so the file ends where the records end.
#[test]
fn only_synced_stores_zero_fill_ahead() -> ebbdb::Result<()> {
    for (policy, ahead) in [(SyncPolicy::Always, true), (SyncPolicy::Never, false)] {
        let dir = tempfile::tempdir()?;
        let store = Store::open_with(dir.path(), Options::default().sync(policy))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        for i in 0..100u32 {
            ks.put(i.to_be_bytes(), [1u8; 100])?;
        }
        store.sync()?;
        let active = std::fs::read_dir(dir.path())?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
            .map(|e| e.metadata().map(|m| m.len()))
            .collect::<std::io::Result<Vec<u64>>>()?;
        assert_eq!(active.len(), 1, "{policy:?}");
        let written = store.stats().segment_bytes;
        assert_eq!(
            active[0] > written,
            ahead,
            "{policy:?}: file {} written {written}",
            active[0]
        );
        drop(ks);
        drop(store);
        let store = Store::open_with(dir.path(), Options::default().sync(policy))?;
        assert_eq!(store.keyspace("ks")?.len()?, 100);
    }
    Ok(())
}
