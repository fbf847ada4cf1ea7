//! A reader sees all of a batch or none of it: counts, point reads across the batch, and scans
//! (which walk the key directory in chunks of 256, so a batch could otherwise straddle them).
//!
//! A writer moves the database from generation `g - 1` to `g` in one `WriteBatch`: the same
//! `KEYS` keys (split over two keyspaces) are set to `g`, and `SHIFT` keys are deleted and
//! re-created under new names. Readers check that every view
//! they get (one `len()`, one full scan, one prefix scan) shows exactly one generation. Run with
//! 1, 2, 3 and 7 readers, over two keyspaces (the batch spans both).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Keyspace, Options, Store, SyncPolicy, WriteBatch};

/// Keys rewritten by every batch (spans three scan chunks).
const KEYS: usize = 600;
/// Keys deleted and re-created under a new name by every batch.
const SHIFT: usize = 40;
const GENERATIONS: u64 = 60;

fn fixed_key(i: usize) -> String {
    format!("fixed-{i:04}")
}

fn moving_key(g: u64, i: usize) -> String {
    format!("moving-{g:04}-{i:03}")
}

fn batch(a: &Keyspace, b: &Keyspace, g: u64) -> WriteBatch {
    let mut w = WriteBatch::new();
    let v = g.to_le_bytes();
    for i in 0..KEYS {
        w.put(if i % 2 == 0 { a } else { b }, fixed_key(i), v);
    }
    for i in 0..SHIFT {
        if g > 0 {
            w.delete(a, moving_key(g - 1, i));
        }
        w.put(a, moving_key(g, i), v);
    }
    w
}

/// The generations a scan of `ks` saw (one per value), and how many keys it returned.
fn scan_generations(ks: &Keyspace, prefix: Option<&str>) -> ebbdb::Result<(Vec<u64>, usize)> {
    let iter = match prefix {
        Some(p) => ks.prefix(p),
        None => ks.iter(),
    };
    let mut gens = Vec::new();
    let mut n = 0;
    for kv in iter {
        let (_, v) = kv?;
        n += 1;
        let g = u64::from_le_bytes(v.as_slice().try_into().unwrap_or([0xff; 8]));
        if !gens.contains(&g) {
            gens.push(g);
        }
    }
    Ok((gens, n))
}

fn reader(a: &Keyspace, b: &Keyspace, stop: &AtomicBool) -> Result<usize, String> {
    let mut views = 0;
    let fail = |e: ebbdb::Error| e.to_string();
    while !stop.load(Ordering::Acquire) {
        // Counts: keyspace a holds KEYS/2 fixed keys and SHIFT moving keys in every generation.
        let len = a.len().map_err(fail)?;
        if len != KEYS / 2 + SHIFT {
            return Err(format!("len() saw {len} keys: part of a batch"));
        }
        let (gens, n) = scan_generations(a, None).map_err(fail)?;
        if gens.len() != 1 || n != KEYS / 2 + SHIFT {
            return Err(format!("a scan saw generations {gens:?} and {n} keys"));
        }
        let (gens_b, n_b) = scan_generations(b, Some("fixed-")).map_err(fail)?;
        if gens_b.len() != 1 || n_b != KEYS / 2 {
            return Err(format!(
                "a prefix scan saw generations {gens_b:?} and {n_b} keys"
            ));
        }
        let (moving, n_m) = scan_generations(a, Some("moving-")).map_err(fail)?;
        if moving.len() != 1 || n_m != SHIFT {
            return Err(format!(
                "a scan of moving keys saw generations {moving:?} and {n_m} keys"
            ));
        }
        views += 1;
    }
    Ok(views)
}

fn run(readers: usize, sync: SyncPolicy) -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(ManualClock::at_unix_secs(1_700_000_000))
            .sync(sync)
            .segment_size(256 * 1024),
    )?;
    let a = store.create_keyspace("a", DefaultTtl::Off)?;
    let b = store.create_keyspace("b", DefaultTtl::Off)?;
    store.write_batch(batch(&a, &b, 0))?;
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..readers)
        .map(|_| {
            let (a, b, stop) = (a.clone(), b.clone(), Arc::clone(&stop));
            std::thread::spawn(move || reader(&a, &b, &stop))
        })
        .collect();
    for g in 1..=GENERATIONS {
        store.write_batch(batch(&a, &b, g))?;
        if g % 20 == 0 {
            store.compact()?;
        }
    }
    stop.store(true, Ordering::Release);
    for h in handles {
        match h.join().expect("reader thread") {
            Ok(_) => {}
            Err(what) => panic!("{readers} readers, {sync:?}: {what}"),
        }
    }
    let (gens, _) = scan_generations(&a, None)?;
    assert_eq!(gens, vec![GENERATIONS], "the last batch is fully visible");
    Ok(())
}

#[test]
fn batch_visibility_one_reader() -> ebbdb::Result<()> {
    run(1, SyncPolicy::Never)
}

#[test]
fn batch_visibility_two_readers() -> ebbdb::Result<()> {
    run(2, SyncPolicy::Always)
}

#[test]
fn batch_visibility_three_readers() -> ebbdb::Result<()> {
    run(3, SyncPolicy::Never)
}

#[test]
fn batch_visibility_seven_readers() -> ebbdb::Result<()> {
    run(7, SyncPolicy::Periodic(std::time::Duration::from_millis(3)))
}

/// A scan that is open across several batches sees none of them, including keys they delete.
#[test]
fn a_scan_open_across_batches_sees_none_of_them() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default().clock(ManualClock::at_unix_secs(1_700_000_000)),
    )?;
    let a = store.create_keyspace("a", DefaultTtl::Off)?;
    let b = store.create_keyspace("b", DefaultTtl::Off)?;
    store.write_batch(batch(&a, &b, 0))?;
    let mut scan = a.iter();
    let first = scan.next().transpose()?;
    assert!(first.is_some());
    for g in 1..=3 {
        store.write_batch(batch(&a, &b, g))?;
    }
    let rest: Vec<(Vec<u8>, Vec<u8>)> = scan.collect::<ebbdb::Result<_>>()?;
    assert_eq!(rest.len() + 1, KEYS / 2 + SHIFT);
    assert!(
        rest.iter().all(|(_, v)| v.as_slice() == 0u64.to_le_bytes()),
        "the scan saw a batch that committed after it started"
    );
    assert!(rest
        .iter()
        .any(|(k, _)| k.as_slice() == moving_key(0, 1).as_bytes()));
    // A new scan sees the last batch whole.
    let (gens, n) = scan_generations(&a, None)?;
    assert_eq!((gens, n), (vec![3], KEYS / 2 + SHIFT));
    Ok(())
}
