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

/// Writers that put (with long, short or no TTL), delete and shorten deadlines race a thread
/// that advances the clock and runs expiry (reaping, re-arming and sweeping). Afterwards every
/// key is in the state its last write left, every expired version was reported once, and no
/// timer is left over.
#[test]
fn sweeps_and_reaping_race_writers() -> ebbdb::Result<()> {
    const THREADS: usize = 3;
    const KEYS: usize = 20_000;
    const OPS: usize = 60_000;
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("s", DefaultTtl::Seconds(3_600))?;
    let events = store.subscribe_expirations();
    let done = std::sync::atomic::AtomicBool::new(false);
    let finals: Vec<Vec<u8>> = std::thread::scope(|s| {
        let upkeep = s.spawn(|| -> ebbdb::Result<()> {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                clock.advance(Duration::from_secs(1));
                store.maintain()?;
            }
            Ok(())
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let ks = &ks;
                s.spawn(move || -> ebbdb::Result<Vec<u8>> {
                    // Per key of this thread: 0 absent or expiring, 1 never expires.
                    let mut last = vec![0u8; KEYS];
                    let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t as u64 + 1);
                    for _ in 0..OPS {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = (x % KEYS as u64) as usize;
                        let k = format!("t{t}-{i:05}");
                        match (x >> 32) % 6 {
                            0 | 1 => {
                                ks.delete(&k)?;
                                last[i] = 0;
                            }
                            2 => {
                                ks.put_with_ttl(&k, b"n", Ttl::Never)?;
                                last[i] = 1;
                            }
                            3 => {
                                let secs = 1 + ((x >> 40) % 30) as u32;
                                ks.put_with_ttl(&k, b"s", Ttl::Seconds(secs))?;
                                last[i] = 0;
                            }
                            _ => {
                                ks.put(&k, b"d")?;
                                last[i] = 0;
                            }
                        }
                    }
                    Ok(last)
                })
            })
            .collect();
        let finals = writers
            .into_iter()
            .map(|w| w.join().expect("writer panicked"))
            .collect::<ebbdb::Result<Vec<_>>>();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        upkeep.join().expect("upkeep panicked")?;
        finals
    })?;
    clock.advance(Duration::from_secs(3_700));
    store.maintain()?;
    for (t, last) in finals.iter().enumerate() {
        for (i, &never) in last.iter().enumerate() {
            let present = ks.get(format!("t{t}-{i:05}"))?.is_some();
            assert_eq!(present, never == 1, "key t{t}-{i:05}");
        }
    }
    let never: usize = finals
        .iter()
        .map(|l| l.iter().filter(|&&n| n == 1).count())
        .sum();
    assert_eq!(ks.len()?, never);
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (0, 0), "no timer left");
    assert_eq!(
        st.live_items, never as u64,
        "every expired version was reaped"
    );
    let mut seen = std::collections::HashSet::new();
    for ev in events.try_iter() {
        assert!(
            seen.insert((ev.key.clone(), ev.expired_at)),
            "{:?} at {} reported twice",
            String::from_utf8_lossy(&ev.key),
            ev.expired_at
        );
    }
    Ok(())
}
