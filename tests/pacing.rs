//! Writers are paced while merges fall behind: once the bytes only a merge can reclaim pass
//! 6 % of the sealed bytes and the policy leaves segments due for a merge to the next one,
//! each write waits in proportion to what it wrote (`Stats::paced`), and a store that only
//! gains keys is never paced. Real clock (the background worker runs only with it), bounded
//! waits.

use std::time::{Duration, Instant};

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

/// A store with 256 KiB segments and a 10 ms tick, under `sync`.
fn open(dir: &std::path::Path, sync: SyncPolicy) -> ebbdb::Result<Store> {
    Store::open_with(
        dir,
        Options::default()
            .sync(sync)
            .segment_size(256 * 1024)
            .tick_interval(Duration::from_millis(10)),
    )
}

fn value(key: u32, round: u32) -> Vec<u8> {
    let mut v = vec![0u8; 200];
    v[..4].copy_from_slice(&key.to_le_bytes());
    v[4..8].copy_from_slice(&round.to_le_bytes());
    v
}

#[test]
fn overwrites_faster_than_merges_are_paced_and_lose_nothing() -> ebbdb::Result<()> {
    for sync in [
        SyncPolicy::Never,
        SyncPolicy::Periodic(Duration::from_millis(50)),
    ] {
        let dir = tempfile::tempdir()?;
        let store = open(dir.path(), sync)?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        let keys = 2_000u32;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut round = 0u32;
        // Every round rewrites every key: each sealed segment dies whole but for the
        // no-resurrection rule (its records shadow older versions), so only merges reclaim
        // it, and a round seals two segments faster than a merge of four takes them.
        while store.stats().paced.is_zero() && Instant::now() < deadline {
            round += 1;
            let mut batch = WriteBatch::new();
            for k in 0..keys {
                batch.put(&ks, k.to_be_bytes(), value(k, round));
            }
            store.write_batch(batch)?;
        }
        let stats = store.stats();
        assert!(
            !stats.paced.is_zero(),
            "{sync:?}: {round} rounds of overwrites in 20 s and no write was paced: {stats:?}"
        );
        for k in 0..keys {
            assert_eq!(
                ks.get(k.to_be_bytes())?,
                Some(value(k, round)),
                "{sync:?} key {k}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_store_that_only_gains_keys_is_not_paced() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), SyncPolicy::Never)?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    // 100,000 keys, about 22 MB: 80-odd sealed segments, none with a dead byte.
    let mut k = 0u32;
    while k < 100_000 {
        let mut batch = WriteBatch::new();
        for _ in 0..1_000 {
            batch.put(&ks, k.to_be_bytes(), value(k, 0));
            k += 1;
        }
        store.write_batch(batch)?;
    }
    let stats = store.stats();
    assert!(
        stats.segments > 4,
        "the fill was meant to seal segments: {stats:?}"
    );
    assert_eq!(stats.paced, Duration::ZERO, "{stats:?}");
    assert_eq!(ks.len()?, k as usize);
    Ok(())
}
