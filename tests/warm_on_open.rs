//! Warming the page cache after open (`Options::warm_on_open`, on by default) changes no
//! answer, and a close, a merge retiring segments or a reopen right behind it neither waits
//! for it nor leaves files behind.

use std::time::{Duration, Instant};

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

const KEYS: u32 = 20_000;

fn opts(warm: bool) -> Options {
    Options::default()
        .sync(SyncPolicy::Never)
        .segment_size(64 << 10)
        .warm_on_open(warm)
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; 100];
    v[..4].copy_from_slice(&round.to_le_bytes());
    v
}

fn segment_files(dir: &std::path::Path) -> std::io::Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        n += usize::from(name.to_string_lossy().ends_with(".seg"));
    }
    Ok(n)
}

#[test]
fn warming_on_or_off_reads_the_same_and_closes_at_once() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open_with(dir.path(), opts(true))?;
        let ks = store.create_keyspace("k", DefaultTtl::Off)?;
        for round in 0..2 {
            for i in 0..KEYS {
                ks.put(i.to_be_bytes(), value(i, round))?;
            }
        }
    }
    assert!(
        segment_files(dir.path())? > 50,
        "many sealed segments to warm"
    );
    for (n, warm) in [true, false, true, true, false].into_iter().enumerate() {
        let t = Instant::now();
        let store = Store::open_with(dir.path(), opts(warm))?;
        let ks = store.keyspace("k")?;
        if n % 2 == 0 {
            // A merge retiring segments the warming thread may still hold.
            store.compact()?;
        }
        for i in (0..KEYS).step_by(7) {
            assert_eq!(ks.get(i.to_be_bytes())?, Some(value(i, 1)), "key {i}");
        }
        assert_eq!(ks.len()?, KEYS as usize);
        drop(ks);
        drop(store);
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "open, reads and close took {:?}",
            t.elapsed()
        );
    }
    // Open and close at once, the warming thread still asking: nothing hangs, nothing is lost.
    for _ in 0..20 {
        drop(Store::open_with(dir.path(), opts(true))?);
    }
    let store = Store::open_with(dir.path(), opts(false))?;
    let ks = store.keyspace("k")?;
    assert_eq!(ks.len()?, KEYS as usize);
    for i in 0..KEYS {
        assert_eq!(ks.get(i.to_be_bytes())?, Some(value(i, 1)), "key {i}");
    }
    drop(ks);
    drop(store);
    let report = ebbdb::verify(dir.path())?;
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.keys, u64::from(KEYS));
    Ok(())
}
