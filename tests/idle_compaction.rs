//! An idle store finishes compacting: segments left just below the dead share that writers
//! merge at (0.5 by default) are merged once no write has come for two seconds, from half that
//! share; a store being written is never idle, whatever its sync policy; and an idle store
//! does not merge its own outputs again (kept no-resurrection markers count as dead); a busy
//! store whose reclaim debt is over 6 % of its sealed bytes merges from that share too. Real clock
//! (the background worker runs only with it), bounded waits.

use std::time::{Duration, Instant};

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

fn value(i: u32, generation: u8) -> Vec<u8> {
    let mut v = vec![generation; 100];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// A store in `dir` with 64 KiB segments and a 20 ms tick, under `sync`.
fn open(dir: &std::path::Path, sync: SyncPolicy) -> ebbdb::Result<Store> {
    Store::open_with(
        dir,
        Options::default()
            .sync(sync)
            .segment_size(64 * 1024)
            .tick_interval(Duration::from_millis(20)),
    )
}

/// Writes 30,000 lasting keys to a keyspace of their own, then keys 0..4,000 to `ks`, then
/// rewrites two in five of those: every segment of the first pass ends 40 % dead, below the
/// share a merge needs while writes come, and the sealed bytes as a whole stay below the
/// share at which a busy store merges from the idle share too (the reclaim debt's 6 %: the
/// lasting keys are there for that). Returns the key count of `ks`.
fn churn(store: &Store, ks: &ebbdb::Keyspace) -> ebbdb::Result<u32> {
    let base = store.create_keyspace("lasting", DefaultTtl::Off)?;
    // In batches: under `SyncPolicy::Always` one put at a time is one fsync each.
    for chunk in (0..30_000u32).collect::<Vec<_>>().chunks(1_000) {
        let mut batch = WriteBatch::new();
        for &i in chunk {
            batch.put(&base, i.to_be_bytes(), value(i, 9));
        }
        store.write_batch(batch)?;
    }
    let n = 4_000u32;
    for i in 0..n {
        ks.put(i.to_be_bytes(), value(i, 1))?;
    }
    for i in (0..n).filter(|i| i % 5 < 2) {
        ks.put(i.to_be_bytes(), value(i, 2))?;
    }
    let sealed: Vec<_> = store
        .stats()
        .per_segment
        .into_iter()
        .filter(|s| !s.active)
        .collect();
    let bytes: f64 = sealed.iter().map(|s| s.bytes as f64).sum();
    let dead: f64 = sealed.iter().map(|s| s.bytes as f64 * s.dead_share).sum();
    assert!(
        dead < 0.055 * bytes,
        "the churn was meant to leave the store's sealed bytes under 5.5 % dead: {dead} of {bytes}"
    );
    Ok(n)
}

/// The sealed segments' largest dead share.
fn deadest_sealed(store: &Store) -> f64 {
    store
        .stats()
        .per_segment
        .iter()
        .filter(|s| !s.active)
        .map(|s| s.dead_share)
        .fold(0.0, f64::max)
}

#[test]
fn an_idle_store_merges_what_writers_left_below_the_dead_share() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), SyncPolicy::Never)?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let n = churn(&store, &ks)?;
    let churned = store.stats();
    assert!(
        deadest_sealed(&store) < 0.5,
        "the churn was meant to leave every segment below half dead: {churned:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while deadest_sealed(&store) >= 0.25 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = store.stats();
    assert!(
        deadest_sealed(&store) < 0.25,
        "20 s idle left a sealed segment at least a quarter dead: {idle:?}"
    );
    assert!(idle.merges > churned.merges, "no merge ran: {idle:?}");
    assert!(
        idle.expired_bytes + idle.live_bytes < churned.expired_bytes + churned.live_bytes
            || idle.per_segment.iter().map(|s| s.bytes).sum::<u64>()
                < churned.per_segment.iter().map(|s| s.bytes).sum::<u64>(),
        "merging reclaimed nothing: {churned:?} -> {idle:?}"
    );
    // Nothing changed on the way.
    for i in 0..n {
        let want = value(i, if i % 5 < 2 { 2 } else { 1 });
        assert_eq!(ks.get(i.to_be_bytes())?, Some(want), "key {i}");
    }
    assert_eq!(ks.len()?, n as usize);
    Ok(())
}

/// Leaves the churned segments 40 % dead ([`churn`]), then writes fresh keys every 2 ms for
/// `busy` and returns the merges run meanwhile.
fn merges_while_writing(sync: SyncPolicy, busy: Duration) -> ebbdb::Result<u64> {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), sync)?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let fresh = store.create_keyspace("fresh", DefaultTtl::Off)?;
    churn(&store, &ks)?;
    let before = store.stats().merges;
    let end = Instant::now() + busy;
    let mut i = 0u32;
    while Instant::now() < end {
        fresh.put(i.to_be_bytes(), [7u8; 20])?;
        i += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(store.stats().merges - before)
}

/// Found by a review: the idle check read a counter of write calls kept only under
/// `SyncPolicy::Always`, so under `Never` and `Periodic` a store being written counted as idle
/// two seconds after open, for good.
#[test]
fn a_store_being_written_is_not_idle_under_any_sync_policy() -> ebbdb::Result<()> {
    for sync in [
        SyncPolicy::Always,
        SyncPolicy::Never,
        SyncPolicy::Periodic(Duration::from_millis(50)),
    ] {
        let merged = merges_while_writing(sync, Duration::from_secs(4))?;
        assert_eq!(
            merged, 0,
            "{sync:?}: writes every 2 ms, yet 40 %-dead segments were merged at the idle share"
        );
    }
    Ok(())
}

/// Found by a review: a merge keeps a tombstone as a marker while an older segment may hold
/// the version it deletes, and counts it dead; at the idle share an output of such markers
/// qualified again at once, and an idle store merged it every tick for good. Only segments
/// there when the writes stopped get the idle share.
#[test]
fn an_idle_store_does_not_merge_its_own_outputs_again() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), SyncPolicy::Always)?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let n = 2_000u32;
    for i in 0..n {
        ks.put(i.to_be_bytes(), value(i, 1))?;
    }
    store.compact_full()?;
    // Tombstones for one key in twenty: the segment holding them is mostly markers that
    // must stay while the compacted segment holds the puts they delete.
    for i in (0..n).step_by(20) {
        ks.delete(i.to_be_bytes())?;
    }
    for i in 0..40u32 {
        ks.put((n + i).to_be_bytes(), [3u8; 60])?;
    }
    std::thread::sleep(Duration::from_secs(4));
    let settled = store.stats().merges;
    std::thread::sleep(Duration::from_secs(3));
    let later = store.stats().merges - settled;
    assert!(
        later <= 1,
        "an idle store with nothing new to reclaim ran {later} merges in 3 s: {:?}",
        store.stats().per_segment
    );
    for i in 0..n {
        assert_eq!(
            ks.get(i.to_be_bytes())?,
            (i % 20 != 0).then(|| value(i, 1)),
            "key {i}"
        );
    }
    Ok(())
}

/// A busy store whose sealed bytes are a third dead, every segment below the usual share,
/// merges from the idle share while it is being written (the pressure rule: a reclaim debt of
/// 6 % of the sealed bytes). Without the rule the segments would wait, as
/// `a_store_being_written_is_not_idle_under_any_sync_policy` shows for a store below it.
#[test]
fn a_busy_store_a_third_dead_merges_below_the_usual_share() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), SyncPolicy::Never)?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let fresh = store.create_keyspace("fresh", DefaultTtl::Off)?;
    let n = 4_000u32;
    for i in 0..n {
        ks.put(i.to_be_bytes(), value(i, 1))?;
    }
    // Nine keys in twenty rewritten: the first pass's segments end 45 % dead.
    for i in (0..n).filter(|i| i % 20 < 9) {
        ks.put(i.to_be_bytes(), value(i, 2))?;
    }
    let before = store.stats().merges;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0u32;
    while store.stats().merges == before && Instant::now() < deadline {
        fresh.put(i.to_be_bytes(), [7u8; 20])?;
        i += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        store.stats().merges > before,
        "20 s of writes every 2 ms and no merge: {:?}",
        store.stats()
    );
    for i in 0..n {
        let want = value(i, if i % 20 < 9 { 2 } else { 1 });
        assert_eq!(ks.get(i.to_be_bytes())?, Some(want), "key {i}");
    }
    Ok(())
}
