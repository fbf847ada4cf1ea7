//! A default-TTL change racing readers and a moving clock never brings an expired item back.
//!
//! Items have a 2 s default. At +1 s one thread turns TTL off while another moves the clock to
//! +2 s (the items' deadline) and reader threads read every item over and over. Once any reader
//! has seen an item expired, no reader may see it live again, and after the dust settles it is
//! still expired (expiry is final: docs/contract.md §2 rule 7). Run with 1, 2, 3 and 6 readers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Keyspace, Options, Store, SyncPolicy};

const T0: u64 = 1_700_000_000;
const ITEMS: usize = 100;

fn key(i: usize) -> String {
    format!("item-{i:04}")
}

/// Logical time for ordering reads across threads: a read *starts* when it takes a stamp
/// before calling `get` and *ends* when it takes one after. A live observation contradicts an
/// expired one only if the live read started after the expired read ended (reads that overlap
/// may be ordered either way: each `get` evaluates expiry at its own `now`).
static STAMP: AtomicU64 = AtomicU64::new(0);

/// Reads every item `passes` times; returns the first resurrection seen, if any. `seen_expired`
/// maps an item to the earliest end stamp of a read that found it expired.
fn reader(
    ks: &Keyspace,
    seen_expired: &Mutex<HashMap<usize, u64>>,
    passes: usize,
) -> Option<String> {
    for _ in 0..passes {
        for i in 0..ITEMS {
            let start = STAMP.fetch_add(1, Ordering::SeqCst);
            let live = match ks.get(key(i)) {
                Ok(v) => v.is_some(),
                Err(e) => return Some(format!("read failed: {e}")),
            };
            let end = STAMP.fetch_add(1, Ordering::SeqCst);
            let mut seen = seen_expired.lock().unwrap_or_else(|p| p.into_inner());
            if live {
                if let Some(&expired_end) = seen.get(&i) {
                    if expired_end < start {
                        return Some(format!("{} was seen expired, then live again", key(i)));
                    }
                }
            } else {
                let e = seen.entry(i).or_insert(end);
                *e = (*e).min(end);
            }
        }
    }
    None
}

fn race(readers: usize, rounds: usize, sync: SyncPolicy) -> ebbdb::Result<()> {
    for round in 0..rounds {
        let dir = tempfile::tempdir()?;
        let clock = ManualClock::at_unix_secs(T0);
        let store = Store::open_with(
            dir.path(),
            Options::default().clock(clock.clone()).sync(sync),
        )?;
        let ks = store.create_keyspace("sessions", DefaultTtl::Seconds(2))?;
        for i in 0..ITEMS {
            ks.put(key(i), b"token")?;
        }
        clock.set_unix_millis((T0 + 1) * 1000);
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let start = Arc::new(Barrier::new(readers + 2));
        let mut handles = Vec::new();
        for _ in 0..readers {
            let (ks, seen, start) = (ks.clone(), Arc::clone(&seen), Arc::clone(&start));
            handles.push(std::thread::spawn(move || {
                start.wait();
                reader(&ks, &seen, 20)
            }));
        }
        let turn_off = {
            let (ks, start) = (ks.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                ks.set_default_ttl(DefaultTtl::Off)
            })
        };
        start.wait();
        clock.set_unix_millis((T0 + 2) * 1000);
        for h in handles {
            if let Some(what) = h.join().expect("reader thread") {
                panic!("round {round}, {readers} readers, {sync:?}: {what}");
            }
        }
        turn_off.join().expect("changer thread")?;
        // Settled: every item seen expired is still expired, now and after a reopen.
        let expired: HashSet<usize> = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        for &i in &expired {
            assert_eq!(
                ks.get(key(i))?,
                None,
                "round {round}: {} came back after the change landed",
                key(i)
            );
        }
        drop(ks);
        drop(store);
        let store = Store::open_with(dir.path(), Options::default().clock(clock.clone()))?;
        let ks = store.keyspace("sessions")?;
        for &i in &expired {
            assert_eq!(
                ks.get(key(i))?,
                None,
                "round {round}: {} came back after reopen",
                key(i)
            );
        }
    }
    Ok(())
}

#[test]
fn ttl_off_vs_clock_vs_one_reader() -> ebbdb::Result<()> {
    race(1, 40, SyncPolicy::Always)
}

#[test]
fn ttl_off_vs_clock_vs_two_readers() -> ebbdb::Result<()> {
    race(2, 30, SyncPolicy::Never)
}

#[test]
fn ttl_off_vs_clock_vs_three_readers() -> ebbdb::Result<()> {
    race(3, 30, SyncPolicy::Periodic(Duration::from_millis(5)))
}

#[test]
fn ttl_off_vs_clock_vs_six_readers() -> ebbdb::Result<()> {
    race(6, 20, SyncPolicy::Always)
}
