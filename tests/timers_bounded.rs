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
        let st = store.stats();
        assert!(
            st.timers_armed <= SESSIONS,
            "round {round}: {} timers armed for {SESSIONS} keys",
            st.timers_armed
        );
        // Every rewrite's deadline is later than the timer in charge (the clock moved on, or
        // the TTL grew): the timer is kept and fires early, so nothing goes stale.
        assert_eq!(
            st.timers_stale, 0,
            "round {round}: rewrites left timers behind"
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

/// Deletes and rewrites with an earlier deadline leave the old timer behind (timers have no
/// handle to cancel them by); such stale timers are counted exactly, dropped when they fire,
/// and swept all at once when they outnumber the armed ones, so they never pile up.
#[test]
fn stale_timers_are_counted_and_swept() -> ebbdb::Result<()> {
    const N: usize = 150_000;
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("s", DefaultTtl::Seconds(MONTH))?;
    for chunk in (0..N).collect::<Vec<_>>().chunks(1_000) {
        let mut batch = WriteBatch::new();
        for &i in chunk {
            batch.put(&ks, key(i), b"v");
        }
        store.write_batch(batch)?;
    }
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (N, 0));

    // Deleting two thirds: their timers go stale and now outnumber the armed ones.
    for i in 0..100_000 {
        ks.delete(key(i))?;
    }
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (50_000, 100_000));
    assert_eq!(store.maintain()?, 0);
    let st = store.stats();
    assert_eq!(
        (st.timers_armed, st.timers_stale),
        (50_000, 0),
        "the sweep dropped every stale timer and kept every armed one"
    );

    // An earlier deadline files a new timer; the later one goes stale (too few to sweep).
    for i in 100_000..N {
        ks.put_with_ttl(key(i), b"w", Ttl::Seconds(60))?;
    }
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (50_000, 50_000));
    let events = store.subscribe_expirations();
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        store.maintain()?,
        50_000,
        "every key expired through its new timer"
    );
    assert_eq!(events.try_iter().count(), 50_000);
    assert_eq!(ks.len()?, 0);
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (0, 50_000));
    clock.advance(Duration::from_secs(u64::from(MONTH)));
    assert_eq!(store.maintain()?, 0, "a stale timer expires nothing");
    assert_eq!(events.try_iter().count(), 0);
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (0, 0));
    Ok(())
}
