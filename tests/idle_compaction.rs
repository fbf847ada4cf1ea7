//! An idle store finishes compacting: segments left just below the dead share that writers
//! merge at (0.5 by default) are merged once no write has come for two seconds, from half that
//! share. Real clock (the background worker runs only with it), bounded waits.

use std::time::{Duration, Instant};

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

fn value(i: u32, generation: u8) -> Vec<u8> {
    let mut v = vec![generation; 100];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
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
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .sync(SyncPolicy::Never)
            .segment_size(64 * 1024)
            .tick_interval(Duration::from_millis(20)),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let n = 4_000u32;
    for i in 0..n {
        ks.put(i.to_be_bytes(), value(i, 1))?;
    }
    // Two keys in five rewritten: every segment of the first pass ends 40 % dead, below the
    // share a merge needs while writes come.
    for i in (0..n).filter(|i| i % 5 < 2) {
        ks.put(i.to_be_bytes(), value(i, 2))?;
    }
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
