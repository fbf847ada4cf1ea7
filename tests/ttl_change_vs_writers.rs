//! Default-TTL changes racing writers, merges and expiry passes.
//!
//! A default change stores its manifest without the log mutex, installs the new history under
//! it, and re-times the keyspace under its write lock only (DESIGN.md §5, "Default-TTL changes
//! off the write path"). Here writers keep writing to the keyspace being changed and to
//! another one while a thread flips its default between settings under which nothing can
//! expire during the race (`NeverExpire`, `Off`, a million seconds), and other threads run
//! `compact` and `maintain` (merges, early drops of segments judged dead whole, which depend
//! on the default-TTL epoch) and move the clock. Afterwards every key holds its last value,
//! the census and the merge's clean-segment counts agree with the key directory, a reopen
//! shows the same, and a one-second default then expires every inheriting item with one event
//! each.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{clock, opts, spawn_upkeep};
use ebbdb::{DefaultTtl, Keyspace, Store};

const WRITERS: usize = 2;
const KEYS: u32 = 300;
const ROUNDS: u32 = 40;

/// Every key of `ks` with its value.
fn contents(ks: &Keyspace) -> BTreeMap<Vec<u8>, Vec<u8>> {
    ks.iter().collect::<ebbdb::Result<_>>().expect("scan")
}

#[test]
fn default_changes_racing_writers_merges_and_expiry_lose_nothing() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let changed = store.create_keyspace("changed", DefaultTtl::NeverExpire)?;
    let other = store.create_keyspace("other", DefaultTtl::Seconds(1_000_000))?;
    let stop = Arc::new(AtomicBool::new(false));

    // Writer `w` writes keys w, w + WRITERS, ... in rounds; the last round's values stay.
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (changed, other) = (changed.clone(), other.clone());
            std::thread::spawn(move || -> ebbdb::Result<()> {
                for round in 0..ROUNDS {
                    for k in (w as u32..KEYS).step_by(WRITERS) {
                        let value = format!("{round}-{k}");
                        changed.put(format!("k{k:04}"), &value)?;
                        other.put(format!("k{k:04}"), &value)?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    let changer = {
        let (changed, stop) = (changed.clone(), Arc::clone(&stop));
        std::thread::spawn(move || -> ebbdb::Result<u32> {
            let settings = [
                DefaultTtl::Off,
                DefaultTtl::Seconds(1_000_000),
                DefaultTtl::NeverExpire,
            ];
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                changed.set_default_ttl(settings[n as usize % settings.len()])?;
                n += 1;
            }
            Ok(n)
        })
    };
    let upkeep = spawn_upkeep(&store, &stop, &c, 3, Duration::from_secs(1));
    for w in writers {
        w.join().expect("writer")?;
    }
    stop.store(true, Ordering::Relaxed);
    let changes = changer.join().expect("changer")?;
    upkeep.join().expect("upkeep")?;
    assert!(changes > 0, "no default change ran during the writes");

    let want: BTreeMap<Vec<u8>, Vec<u8>> = (0..KEYS)
        .map(|k| {
            (
                format!("k{k:04}").into_bytes(),
                format!("{}-{k}", ROUNDS - 1).into_bytes(),
            )
        })
        .collect();
    assert_eq!(contents(&changed), want, "after {changes} default changes");
    assert_eq!(contents(&other), want);
    store.check_census().map_err(ebbdb::Error::BadRequest)?;
    store
        .check_clean_segments()
        .map_err(ebbdb::Error::BadRequest)?;
    let default = changed.default_ttl();
    drop((changed, other, store));

    let store = Store::open_with(dir.path(), opts(&c))?;
    let changed = store.keyspace("changed")?;
    assert_eq!(
        changed.default_ttl(),
        default,
        "the last change survives a reopen"
    );
    assert_eq!(contents(&changed), want);
    assert_eq!(contents(&store.keyspace("other")?), want);
    store.check_census().map_err(ebbdb::Error::BadRequest)?;

    // Every item inherits: a one-second default expires all of them, one event each.
    let events = store.subscribe_expirations();
    changed.set_default_ttl(DefaultTtl::Seconds(1))?;
    c.advance(Duration::from_secs(2));
    store.maintain()?;
    assert_eq!(changed.len()?, 0);
    let mut reported: Vec<Vec<u8>> = events
        .try_iter()
        .filter(|e| e.keyspace == "changed")
        .map(|e| e.key)
        .collect();
    reported.sort();
    assert_eq!(reported, want.keys().cloned().collect::<Vec<_>>());
    assert_eq!(store.keyspace("other")?.len()?, KEYS as usize);
    Ok(())
}
