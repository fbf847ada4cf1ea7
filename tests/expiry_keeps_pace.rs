//! Expiry keeps pace with writers: once expiry lags the clock by more than two seconds (fired
//! timers nobody handled), every write handles a share of the backlog, so it shrinks while
//! writes go on even if the background worker does nothing (here: a `ManualClock`, whose worker
//! never reaps on its own). Reads stay exact throughout: expiry is evaluated by reads, not by
//! the reaper.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl, WriteBatch};

/// A store on a `ManualClock` (whose worker never reaps on its own) under
/// `SyncPolicy::Never`, in a fresh directory (kept alive by the first element).
fn manual_store() -> ebbdb::Result<(tempfile::TempDir, ManualClock, Store)> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Never),
    )?;
    Ok((dir, clock, store))
}

#[test]
fn writes_drain_a_large_reaping_backlog() -> ebbdb::Result<()> {
    let (_dir, clock, store) = manual_store()?;
    let ks = store.create_keyspace("sessions", DefaultTtl::Seconds(10))?;
    let expiring = 200_000u64;
    for i in 0..expiring {
        ks.put(i.to_be_bytes(), b"token")?;
    }
    clock.advance(Duration::from_secs(10));
    store.queue_due_expirations()?;
    let stats = store.stats();
    assert_eq!(
        stats.expiry_backlog, expiring,
        "every timer fired, none handled"
    );
    assert_eq!(ks.len()?, 0, "reads see the expiry at once, backlog or not");

    // Expiry is one second behind: a second's expirations just came due, the worker's next
    // pass will take them. Writes do not help yet.
    for i in 0..1_000u64 {
        ks.put((expiring + i).to_be_bytes(), b"fresh")?;
    }
    assert_eq!(
        store.stats().expiry_backlog,
        expiring,
        "a lag of one second is not falling behind"
    );
    // Three seconds behind: the worker has fallen behind, and each write handles its share,
    // down to the last 1,024 (stragglers that wait for the worker).
    clock.advance(Duration::from_secs(3));
    let before = store.stats().expiry_backlog;
    let mut writes = 0u64;
    while store.stats().expiry_backlog > 1_024 {
        ks.put((expiring + 1_000 + writes).to_be_bytes(), b"fresh")?;
        writes += 1;
        assert!(writes < 100_000, "the backlog does not shrink with writes");
    }
    assert!(
        (writes - 1) * 64 < before,
        "{writes} writes for a backlog of {before}: each must handle at least 64"
    );
    assert_eq!(
        store.stats().expirations,
        expiring - store.stats().expiry_backlog
    );
    assert_eq!(ks.len()? as u64, writes + 1_000);
    store.maintain()?;
    assert_eq!(store.stats().expiry_backlog, 0);
    assert_eq!(store.stats().expirations, expiring);
    assert_eq!(store.stats().live_items, writes + 1_000);
    Ok(())
}

/// Room in the key directory is given back by the reaper once nothing is due, not while a
/// backlog is left: a write that assists spends its share on expiring (trimming in the
/// assists' chunks made the reaper and the writers take turns, DESIGN.md §3.1 "Spare pages
/// from the sync thread, and trims after the backlog"). Then passes with nothing due cut the
/// slab down to about the live keys and shrink the index tables (the keyspace grew by inserts
/// only, so nothing but the inserts saw how many keys it held), and the entries moved into
/// the slab's holes still answer.
#[test]
fn room_is_given_back_after_the_backlog_not_during_it() -> ebbdb::Result<()> {
    let (_dir, clock, store) = manual_store()?;
    let ks = store.create_keyspace("sessions", DefaultTtl::Seconds(10))?;
    // Enough keys that the index tables outgrow the room below which they are left alone.
    let n = 700_000u64;
    // One key in 50 never expires: the survivors lie all over the slab, so cutting it means
    // moving them.
    let keeps = |i: u64| i % 50 == 7;
    for i in 0..n {
        if keeps(i) {
            ks.put_with_ttl(i.to_be_bytes(), i.to_le_bytes(), Ttl::Never)?;
        } else {
            ks.put(i.to_be_bytes(), b"token")?;
        }
    }
    let room = |store: &Store| -> ebbdb::Result<(usize, usize)> {
        Ok(store
            .key_directory_room("sessions")?
            .expect("a map that grew by inserts is hashed"))
    };
    let (full_slots, full_index) = room(&store)?;
    assert_eq!(full_slots as u64, n);
    assert!(full_index as u64 >= n);

    clock.advance(Duration::from_secs(13));
    store.queue_due_expirations()?;
    let mut writes = 0u64;
    while store.stats().expiry_backlog > 5_000 {
        ks.put((n + writes).to_be_bytes(), b"fresh")?;
        writes += 1;
        assert!(writes < 100_000, "the backlog does not shrink with writes");
    }
    // A batch large enough that its share covers all that is due: its assist empties the
    // backlog, and still gives nothing back.
    let mut batch = WriteBatch::new();
    for _ in 0..5_000 {
        batch.put(&ks, (n + writes).to_be_bytes(), b"fresh");
        writes += 1;
    }
    store.write_batch(batch)?;
    assert_eq!(store.stats().expiry_backlog, 0);
    // (The writes' own keys may add a slot or index buckets before any hole is free.)
    let (slots, index) = room(&store)?;
    assert!(
        slots >= full_slots && index >= full_index,
        "writes that assist the reaper gave room back (only the reaper may): \
         {slots} slots of {full_slots}, index buckets {index} of {full_index}"
    );

    let survivors = (0..n).filter(|&i| keeps(i)).count() as u64 + writes;
    let mut left = room(&store)?;
    for _ in 0..200 {
        store.maintain()?;
        let now = room(&store)?;
        if now == left {
            break;
        }
        left = now;
    }
    assert_eq!(store.stats().expiry_backlog, 0);
    assert_eq!(ks.len()? as u64, survivors);
    let (slots, index) = left;
    assert!(
        (slots as u64) < survivors + survivors / 3 + 1_100,
        "{slots} slots left for {survivors} live keys"
    );
    assert!(
        index < full_index / 4,
        "index buckets {index} left of {full_index} for {survivors} live keys"
    );
    for i in (0..n).filter(|&i| keeps(i)) {
        assert_eq!(ks.get(i.to_be_bytes())?, Some(i.to_le_bytes().to_vec()));
    }
    for i in 0..writes {
        assert_eq!(ks.get((n + i).to_be_bytes())?, Some(b"fresh".to_vec()));
    }
    Ok(())
}
