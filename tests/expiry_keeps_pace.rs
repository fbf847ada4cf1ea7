//! Expiry keeps pace with writers: once expiry lags the clock by more than two seconds (fired
//! timers nobody handled), every write handles a share of the backlog, so it shrinks while
//! writes go on even if the background worker does nothing (here: a `ManualClock`, whose worker
//! never reaps on its own). Reads stay exact throughout: expiry is evaluated by reads, not by
//! the reaper.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl};

#[test]
fn writes_drain_a_large_reaping_backlog() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Never),
    )?;
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
/// assists' chunks made the reaper and the writers take turns, DESIGN.md §3.1 "Trims after
/// the backlog"). Then passes with nothing due cut the slab down to about the live keys, and
/// the entries moved into its holes still answer.
#[test]
fn room_is_given_back_after_the_backlog_not_during_it() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Never),
    )?;
    let ks = store.create_keyspace("sessions", DefaultTtl::Seconds(10))?;
    let n = 200_000u64;
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
    let full = store.key_directory_slots("sessions")?;
    assert_eq!(full as u64, n);

    clock.advance(Duration::from_secs(13));
    store.queue_due_expirations()?;
    let mut writes = 0u64;
    while store.stats().expiry_backlog > 1_024 {
        ks.put((n + writes).to_be_bytes(), b"fresh")?;
        writes += 1;
        assert!(writes < 100_000, "the backlog does not shrink with writes");
    }
    assert!(
        store.key_directory_slots("sessions")? >= full,
        "writes that assist the reaper gave room back while a backlog was left"
    );

    let survivors = (0..n).filter(|&i| keeps(i)).count() as u64 + writes;
    let mut slots = store.key_directory_slots("sessions")?;
    for _ in 0..100 {
        store.maintain()?;
        let now = store.key_directory_slots("sessions")?;
        if now == slots {
            break;
        }
        slots = now;
    }
    assert_eq!(store.stats().expiry_backlog, 0);
    assert_eq!(ks.len()? as u64, survivors);
    assert!(
        (slots as u64) < survivors + survivors / 3 + 1_100,
        "{slots} slots left for {survivors} live keys"
    );
    for i in (0..n).filter(|&i| keeps(i)) {
        assert_eq!(ks.get(i.to_be_bytes())?, Some(i.to_le_bytes().to_vec()));
    }
    for i in 0..writes {
        assert_eq!(ks.get((n + i).to_be_bytes())?, Some(b"fresh".to_vec()));
    }
    Ok(())
}
