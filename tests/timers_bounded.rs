//! Expiry timers are bounded by keys, not by writes: every key has at most one armed timer,
//! moved in place when the key is rewritten.
//!
//! Refreshing a set of sessions over and over under a long TTL (the usual session-store
//! pattern) must keep `stats().timers_armed` at the number of sessions; deleting keys, making
//! them never expire, turning the default off and back on, and reopening must not leave extra
//! timers behind, and every key must still expire on time.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl, WriteBatch};

const T0: u64 = 1_700_000_000;
const SESSIONS: usize = 2_000;
const MONTH: u32 = 30 * 86_400;

fn key(i: usize) -> String {
    format!("session-{i:05}")
}

fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
}

#[test]
fn refreshing_keys_keeps_one_timer_per_key() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("sessions", DefaultTtl::Seconds(MONTH))?;
    for round in 0..25 {
        for i in 0..SESSIONS {
            if round % 2 == 0 {
                ks.put(key(i), b"token")?;
            } else {
                ks.put_with_ttl(key(i), b"token", Ttl::Seconds(MONTH + round))?;
            }
        }
        let mut batch = WriteBatch::new();
        for i in 0..100 {
            batch.put(&ks, key(i), b"batched");
        }
        store.write_batch(batch)?;
        clock.advance(Duration::from_secs(10));
        store.maintain()?;
        let armed = store.stats().timers_armed;
        assert!(
            armed <= SESSIONS,
            "round {round}: {armed} timers armed for {SESSIONS} keys"
        );
    }
    assert_eq!(store.stats().timers_armed, SESSIONS);

    // Deletes and never-expiring rewrites disarm.
    for i in 0..500 {
        ks.delete(key(i))?;
    }
    for i in 500..1000 {
        ks.put_with_ttl(key(i), b"forever", Ttl::Never)?;
    }
    assert_eq!(store.stats().timers_armed, SESSIONS - 1000);

    // Turning the default off and on again re-times without piling up timers.
    ks.set_default_ttl(DefaultTtl::Off)?;
    ks.set_default_ttl(DefaultTtl::Seconds(60))?;
    ks.set_default_ttl(DefaultTtl::Seconds(30))?;
    assert!(store.stats().timers_armed <= SESSIONS - 1000);

    // Everything with a deadline still expires, through the timers.
    let events = store.subscribe_expirations();
    clock.advance(Duration::from_secs(u64::from(MONTH) + 100));
    let expired = store.maintain()?;
    assert_eq!(expired, SESSIONS - 1000, "every expiring key fired once");
    assert_eq!(events.try_iter().count(), SESSIONS - 1000);
    assert_eq!(ks.len()?, 500, "the never-expiring keys remain");
    assert_eq!(store.stats().timers_armed, 0);
    drop(ks);
    drop(store);

    // Reopen: one timer per key with a deadline.
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.keyspace("sessions")?;
    for i in 0..300 {
        ks.put_with_ttl(key(i), b"again", Ttl::Seconds(5))?;
        ks.put_with_ttl(key(i), b"again", Ttl::Seconds(7))?;
    }
    assert_eq!(store.stats().timers_armed, 300);
    drop(ks);
    drop(store);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    assert_eq!(store.stats().timers_armed, 300);
    clock.advance(Duration::from_secs(7));
    assert_eq!(store.maintain()?, 300);
    Ok(())
}
