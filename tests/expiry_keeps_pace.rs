//! Expiry keeps pace with writers: once the reaping backlog (fired timers nobody handled yet)
//! is large, every write handles a share of it, so the backlog shrinks while writes go on even
//! if the background worker does nothing (here: a `ManualClock`, whose worker never reaps on
//! its own). Reads stay exact throughout: expiry is evaluated by reads, not by the reaper.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

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

    // New writes, no maintain(): each write handles its share of the backlog.
    let mut writes = 0u64;
    while store.stats().expiry_backlog > 65_536 {
        ks.put((expiring + writes).to_be_bytes(), b"fresh")?;
        writes += 1;
        assert!(writes < 100_000, "the backlog does not shrink with writes");
    }
    let handled = expiring - store.stats().expiry_backlog;
    assert!(
        handled >= writes * 4,
        "{writes} writes handled only {handled} expirations"
    );
    assert_eq!(store.stats().expirations, handled);
    assert_eq!(ks.len()? as u64, writes);
    // The worker's pass (here: maintain) finishes the rest.
    store.maintain()?;
    assert_eq!(store.stats().expiry_backlog, 0);
    assert_eq!(store.stats().expirations, expiring);
    assert_eq!(store.stats().live_items, writes);
    Ok(())
}
