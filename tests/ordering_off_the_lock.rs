//! The first walk in key order over a hashed key directory orders it off the lock (DESIGN.md
//! §3.1, "Ordering off the lock"): the entries are copied a chunk at a time, sorted with no
//! lock held, and the keys written meanwhile are replayed. Writers run during that walk here:
//! new keys, overwrites, deletes that make the slab give room back (so entries move from its
//! end into holes while the copy is under way), and a default-TTL change, which changes
//! entries in place. Afterwards the ordered map must hold exactly what a model of the writes
//! holds, and the walk itself must have seen every key nobody touched, once, in order. The map
//! is then hashed again off the lock (as the worker does once walks stop) while the writer runs
//! once more, and must again hold what the model holds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ebbdb::{DefaultTtl, Store, WriteBatch};

fn key(i: u64) -> Vec<u8> {
    // Random order, and long enough for some keys to be stored out of line.
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut k = format!("{h:016x}-{i}").into_bytes();
    if i.is_multiple_of(7) {
        k.extend_from_slice(b"-a-key-longer-than-the-inline-limit");
    }
    k
}

fn value(i: u64, round: u64) -> Vec<u8> {
    format!("v{i}-{round}").into_bytes()
}

/// `n` keys written, most of the upper half deleted, then the first walk while a writer
/// changes the upper half (and, with `retime`, the default TTL, once: whether that lands
/// inside the ordering depends on timing; the map-level test in `keydir/map.rs` covers that
/// case deterministically).
fn run(n: u64, retime: bool) -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(Store::open(dir.path())?);
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for chunk in 0..n.div_ceil(1000) {
        let mut b = WriteBatch::new();
        for i in chunk * 1000..((chunk + 1) * 1000).min(n) {
            b.put(&ks, key(i), value(i, 0));
            model.insert(key(i), value(i, 0));
        }
        store.write_batch(b)?;
    }
    // Delete most of the upper half, so the slab is more than a quarter holes and every
    // batch with a delete moves entries from its end.
    let half = n / 2;
    let mut b = WriteBatch::new();
    for i in half..n {
        if i % 4 != 0 {
            b.delete(&ks, key(i));
            model.remove(&key(i));
        }
    }
    store.write_batch(b)?;
    assert!(
        store.key_directory_hashed("ks")?,
        "a new keyspace starts hashed"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(&store, &ks, n, 1, retime, &stop);
    // The walk that orders the map, while the writer runs.
    let mut seen_static = 0u64;
    let mut last: Option<Vec<u8>> = None;
    for pair in ks.iter() {
        let (k, v) = pair?;
        if let Some(l) = &last {
            assert!(*l < k, "keys in order");
        }
        if let Some(i) = std::str::from_utf8(&k)
            .ok()
            .and_then(|s| s.split('-').nth(1))
            .and_then(|s| s.parse::<u64>().ok())
        {
            if i < half {
                assert_eq!(v, value(i, 0), "an untouched key's value");
                seen_static += 1;
            }
        }
        last = Some(k);
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().expect("writer")?;
    assert_eq!(seen_static, half, "every untouched key once");
    assert!(
        !store.key_directory_hashed("ks")?,
        "the walk ordered the map"
    );
    replay(&mut model, n, 1..rounds);
    let got: BTreeMap<Vec<u8>, Vec<u8>> = ks.iter().collect::<ebbdb::Result<_>>()?;
    assert_eq!(got.len(), model.len());
    assert!(got == model, "the ordered map holds what the writes left");
    for (k, v) in model.iter().step_by(13) {
        assert_eq!(ks.get(k)?.as_ref(), Some(v));
    }
    assert_eq!(ks.len()?, model.len());
    if let Err(e) = store.check_census() {
        panic!("{e}");
    }

    // Hashed again off the lock (as the worker does once walks stop), while the writer runs
    // once more: every key reads as the model says without a walk (which would order the map
    // again), then in a walk.
    stop.store(false, Ordering::Relaxed);
    let writer = spawn_writer(&store, &ks, n, rounds, false, &stop);
    let hashed = store.rehash_key_directory("ks")?;
    stop.store(true, Ordering::Relaxed);
    let end = writer.join().expect("writer")?;
    assert!(
        hashed,
        "no walk changed entries in place: the hashing finished"
    );
    assert!(store.key_directory_hashed("ks")?);
    replay(&mut model, n, rounds..end);
    for i in 0..n + 1000 {
        assert_eq!(ks.get(key(i))?, model.get(&key(i)).cloned(), "key {i}");
    }
    assert_eq!(ks.len()?, model.len());
    if let Err(e) = store.check_census() {
        panic!("{e}");
    }
    assert!(
        store.key_directory_hashed("ks")?,
        "gets leave the map hashed"
    );
    let got: BTreeMap<Vec<u8>, Vec<u8>> = ks.iter().collect::<ebbdb::Result<_>>()?;
    assert!(got == model, "ordered again by the walk, the same entries");
    assert!(!store.key_directory_hashed("ks")?);
    Ok(())
}

/// The writer: keys at or above `n / 2` only, rounds from `first` until `stop` (at least 50
/// rounds), with a default-TTL change at round 20 if `retime`. Its ops are a pure function of
/// the round, so the model replays them afterwards ([`replay`]). Returns the round after its
/// last.
fn spawn_writer(
    store: &Arc<Store>,
    ks: &ebbdb::Keyspace,
    n: u64,
    first: u64,
    retime: bool,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<ebbdb::Result<u64>> {
    let (store, ks, stop) = (Arc::clone(store), ks.clone(), Arc::clone(stop));
    std::thread::spawn(move || -> ebbdb::Result<u64> {
        let half = n / 2;
        let mut round = first;
        while !stop.load(Ordering::Relaxed) || round < first + 50 {
            let mut b = WriteBatch::new();
            for j in 0..50 {
                let i = half + (round * 131 + j * 17) % (n - half + 1000);
                if j % 3 == 0 {
                    b.delete(&ks, key(i));
                } else {
                    b.put(&ks, key(i), value(i, round));
                }
            }
            store.write_batch(b)?;
            if retime && round == 20 {
                ks.set_default_ttl(DefaultTtl::NeverExpire)?;
            }
            round += 1;
        }
        Ok(round)
    })
}

/// The writer's `rounds` applied to `model`.
fn replay(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, n: u64, rounds: std::ops::Range<u64>) {
    let half = n / 2;
    for round in rounds {
        for j in 0..50 {
            let i = half + (round * 131 + j * 17) % (n - half + 1000);
            if j % 3 == 0 {
                model.remove(&key(i));
            } else {
                model.insert(key(i), value(i, round));
            }
        }
    }
}

#[test]
fn ordering_while_writers_put_delete_and_move_entries() -> ebbdb::Result<()> {
    run(300_000, false)
}

#[test]
fn ordering_while_a_default_ttl_change_rewrites_entries_in_place() -> ebbdb::Result<()> {
    run(150_000, true)
}

/// A map made hashed again between the ordering's last write lock and the read lock the walk
/// then takes (a deleted keyspace's map is emptied into a new, hashed one; here the test hook
/// does it, over and over) is ordered again, not taken for ordered: a review found walks
/// panicking on `OrderedRead::ordered`'s invariant in 99 of 200 tries.
#[test]
fn a_map_hashed_again_during_the_ordering_is_ordered_again() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(Store::open(dir.path())?);
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let mut b = WriteBatch::new();
    for i in 0..50_000 {
        b.put(&ks, key(i), value(i, 0));
    }
    store.write_batch(b)?;
    let stop = Arc::new(AtomicBool::new(false));
    let hasher = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || -> ebbdb::Result<u64> {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                store.hash_key_directory("ks")?;
                n += 1;
            }
            Ok(n)
        })
    };
    for round in 0..100 {
        let first: Vec<Vec<u8>> = ks
            .iter()
            .take(10)
            .map(|r| r.map(|(k, _)| k))
            .collect::<ebbdb::Result<_>>()?;
        assert_eq!(first.len(), 10, "round {round}");
        assert!(
            first.windows(2).all(|w| w[0] < w[1]),
            "round {round}: in order"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let hashed = hasher.join().expect("hasher")?;
    assert!(hashed > 10, "the hook ran {hashed} times");
    Ok(())
}

/// The worker hashes a map again once no walk has begun for `Options::rehash_after` (real
/// clock, short wait, bounded poll), and not while walks keep coming; `None` turns it off.
#[test]
fn the_worker_hashes_a_map_again_once_walks_stop() -> ebbdb::Result<()> {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir()?;
    let opts = |after| {
        ebbdb::Options::default()
            .sync(ebbdb::SyncPolicy::Never)
            .tick_interval(Duration::from_millis(5))
            .rehash_after(after)
    };
    let store = Store::open_with(dir.path(), opts(Some(Duration::from_secs(2))))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let mut b = WriteBatch::new();
    for i in 0..5_000 {
        b.put(&ks, key(i), value(i, 0));
    }
    store.write_batch(b)?;
    // Walks every few milliseconds for a while: the map stays ordered.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        assert!(ks.prefix(b"0").count() > 0);
        assert!(!store.key_directory_hashed("ks")?, "walked within the wait");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Then none: hashed again within a bounded wait.
    let stopped = Instant::now();
    while !store.key_directory_hashed("ks")? {
        assert!(
            stopped.elapsed() < Duration::from_secs(20),
            "not hashed again 20 s after the last walk"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 0..5_000 {
        assert_eq!(ks.get(key(i))?, Some(value(i, 0)));
    }
    drop(ks);
    drop(store);

    // Off: an ordered map stays ordered.
    let store = Store::open_with(dir.path(), opts(None))?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.iter().count(), 5_000);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!store.key_directory_hashed("ks")?);
    Ok(())
}
