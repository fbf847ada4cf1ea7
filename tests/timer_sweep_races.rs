//! Sweeps of stale timers racing writers, reaping, default-TTL changes and keyspace drops.
//! A test binary of its own: it lowers the sweep threshold for the whole process.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Store, Ttl};

mod common;

use common::{manual as opts, T0};

/// Writers that put (with long, short or no TTL), delete and shorten deadlines race a thread
/// that advances the clock and runs expiry (reaping, re-arming and sweeping). Afterwards every
/// key is in the state its last write left, every expired version was reported once, and no
/// timer is left over.
#[test]
fn sweeps_and_reaping_race_writers() -> ebbdb::Result<()> {
    const THREADS: usize = 3;
    const KEYS: usize = 20_000;
    const OPS: usize = 60_000;
    // Sweep as soon as 64 timers are stale (65,536 otherwise), so sweeps race the writers.
    ebbdb::expiry::set_sweep_min(Some(64));
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("s", DefaultTtl::Seconds(3_600))?;
    let events = store.subscribe_expirations();
    let done = std::sync::atomic::AtomicBool::new(false);
    let started = std::time::Instant::now();
    let finals: Vec<Vec<u8>> = std::thread::scope(|s| {
        let upkeep = s.spawn(|| -> ebbdb::Result<()> {
            let mut round = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                clock.advance(Duration::from_secs(1));
                store.maintain()?;
                round += 1;
                // Default-TTL changes re-time items under the writers' feet (finite ones
                // only: every key written with the default still expires by the end).
                match round % 50 {
                    10 => ks.set_default_ttl(DefaultTtl::Seconds(20))?,
                    30 => ks.set_default_ttl(DefaultTtl::Seconds(3_600))?,
                    // A keyspace full of armed and stale timers, dropped while the reaper
                    // and the sweeps run.
                    40 => {
                        let name = format!("doomed{round}");
                        let doomed = store.create_keyspace(&name, DefaultTtl::Seconds(5))?;
                        for i in 0..300 {
                            doomed.put(format!("d{i}"), b"x")?;
                            if i % 3 == 0 {
                                doomed.delete(format!("d{i}"))?;
                            }
                        }
                        store.delete_keyspace(&name)?;
                    }
                    _ => {}
                }
            }
            Ok(())
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ks, store, started) = (&ks, &store, &started);
                s.spawn(move || -> ebbdb::Result<Vec<u8>> {
                    // Per key of this thread: 0 absent or expiring, 1 never expires.
                    let mut last = vec![0u8; KEYS];
                    let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t as u64 + 1);
                    // `OPS` operations, and on until a sweep has run (bounded): on a loaded
                    // machine the upkeep thread got so few turns meanwhile that none did.
                    for n in 0.. {
                        if n >= OPS
                            && n % 256 == 0
                            && (store.stats().timers_swept > 0
                                || started.elapsed() > Duration::from_secs(120))
                        {
                            break;
                        }
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
    assert!(
        st.timers_swept > 0,
        "no sweep ran: the race was not exercised"
    );
    let events: Vec<_> = events.try_iter().collect();
    assert_eq!(
        events.len() as u64,
        st.expirations,
        "one event per version the reaper expired"
    );
    let mut seen = std::collections::HashSet::new();
    for ev in events {
        assert!(
            seen.insert((ev.key.clone(), ev.expired_at)),
            "{:?} at {} reported twice",
            String::from_utf8_lossy(&ev.key),
            ev.expired_at
        );
    }
    Ok(())
}
