//! Review regressions for the census, the reaper thread, dying-segment deferral, deferred hints
//! and the read path (commits ff781e1..46a9388).

use ebbdb::ttl::{self, ItemTtl, TtlChange};
use ebbdb::DefaultTtl;
use proptest::prelude::*;

fn default_strategy() -> impl Strategy<Value = DefaultTtl> {
    prop_oneof![
        Just(DefaultTtl::Off),
        Just(DefaultTtl::NeverExpire),
        (1u32..20).prop_map(DefaultTtl::Seconds),
    ]
}

/// Sorted histories (as `set_default_ttl` builds them: `since` never decreases, several
/// changes may share a second).
fn history_strategy() -> impl Strategy<Value = Vec<TtlChange>> {
    (
        default_strategy(),
        proptest::collection::vec((0u64..6, default_strategy()), 0..8),
        0u64..10,
    )
        .prop_map(|(first, rest, start)| {
            let mut since = start;
            let mut h = vec![TtlChange {
                since,
                default: first,
            }];
            for (gap, d) in rest {
                since += gap;
                h.push(TtlChange { since, default: d });
            }
            h
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// DESIGN.md 3.1a: deadlines of inheriting entries never decrease in the write second,
    /// and those of own-TTL entries depend on `ts + m` alone and never decrease in it.
    #[test]
    fn census_keys_order_deadlines(h in history_strategy()) {
        let last = h.last().map_or(0, |c| c.since) + 30;
        let first = 0u64;
        let mut prev = 0;
        for ts in first..last {
            let at = ttl::expires_at(ts, ItemTtl::Inherit, &h);
            prop_assert!(at >= prev, "inherit: ts {} gives {} < {} for {:?}", ts, at, prev, h);
            prev = at;
        }
        let mut prev = 0;
        for due in first + 1..last + 25 {
            let bucket = ttl::expires_at(due - 1, ItemTtl::Seconds(1), &h);
            prop_assert!(bucket >= prev, "own: D {} gives {} < {} for {:?}", due, bucket, prev, h);
            prev = bucket;
            for m in 1..=due.saturating_sub(first).min(25) {
                let ts = due - u64::from(m as u32);
                if ts < first {
                    continue;
                }
                let at = ttl::expires_at(ts, ItemTtl::Seconds(m as u32), &h);
                prop_assert_eq!(at, bucket, "own: ts {} m {} vs bucket {} for {:?}", ts, m, due, h);
            }
        }
    }
}

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use ebbdb::{Options, Store, SyncPolicy};

fn manual_opts(c: &ebbdb::clock::ManualClock) -> Options {
    Options::default()
        .clock(c.clone())
        .sync(SyncPolicy::Never)
        .segment_size(1 << 20)
}

/// Expiry events are exactly once per expired item version, also across a clean close and
/// reopen (DESIGN.md section 11, `tests/expiry_events.rs`). Writers that assist a lagging
/// reaper handle timers and publish their events, but stop at `ASSIST_MIN_BACKLOG`
/// stragglers, so the pass is never "complete" and `reaped_upto` (CLOCK) does not move; the
/// versions they reported are still the newest records on disk and are reported again after
/// the reopen.
#[test]
fn events_reported_by_assisting_writers_are_not_reported_again_after_reopen() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = common::clock();
    let mut seen: BTreeMap<(Vec<u8>, u64), u32> = BTreeMap::new();
    let first_session = {
        let store = Store::open_with(dir.path(), manual_opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Seconds(10))?;
        let other = store.create_keyspace("other", DefaultTtl::Off)?;
        for i in 0..3_000u32 {
            ks.put(format!("k{i:05}"), "v")?;
        }
        let events = store.subscribe_expirations();
        // Expiry now lags by more than two seconds: every write helps.
        c.advance(Duration::from_secs(14));
        for i in 0..200u32 {
            other.put(format!("o{i}"), "v")?;
        }
        for e in events.try_iter() {
            *seen.entry((e.key, e.expired_at)).or_default() += 1;
        }
        assert!(!seen.is_empty(), "the writers reported some expirations");
        assert!(seen.values().all(|&n| n == 1));
        events
    };
    // Whatever the first session reported while closing went to its subscribers too.
    for e in first_session.try_iter() {
        *seen.entry((e.key, e.expired_at)).or_default() += 1;
    }
    let store = Store::open_with(dir.path(), manual_opts(&c))?;
    let events = store.subscribe_expirations();
    store.maintain()?;
    for e in events.try_iter() {
        *seen.entry((e.key, e.expired_at)).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "{} of {} expired versions reported twice, e.g. {:?}",
        twice.len(),
        seen.len(),
        twice.first()
    );
    assert_eq!(seen.len(), 3_000, "every version reported");
    Ok(())
}

/// With the real clock (reaper thread), writers (some assisting), `maintain` callers and
/// default-TTL changes all at once: no expired version is reported twice, in the session or
/// after a clean reopen, and every reported expiry is counted.
#[test]
fn concurrent_reapers_report_each_expired_version_once() -> ebbdb::Result<()> {
    use ebbdb::Ttl;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    let dir = tempfile::tempdir()?;
    let opts = || {
        Options::default()
            .sync(SyncPolicy::Never)
            .segment_size(256 * 1024)
            .tick_interval(Duration::from_millis(10))
    };
    let mut seen: BTreeMap<(Vec<u8>, u64), u32> = BTreeMap::new();
    let first_session = {
        let store = Store::open_with(dir.path(), opts())?;
        let events = store.subscribe_expirations();
        let ks = store.create_keyspace("ks", DefaultTtl::Seconds(1))?;
        let stop_flag = AtomicBool::new(false);
        let stop = &stop_flag;
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let ks = &ks;
                s.spawn(move || {
                    let mut i = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("k{}", (i.wrapping_mul(7919) + t) % 3000);
                        let r = if i.is_multiple_of(3) {
                            ks.put_with_ttl(&key, "v", Ttl::Seconds(1 + i % 2))
                        } else {
                            ks.put(&key, "v")
                        };
                        r.expect("put");
                        i = i.wrapping_add(1);
                    }
                });
            }
            let store = &store;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    store.maintain().expect("maintain");
                    std::thread::sleep(Duration::from_millis(3));
                }
            });
            let ks = &ks;
            s.spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(700));
                    ks.set_default_ttl(DefaultTtl::Seconds(1 + n % 3))
                        .expect("set_default_ttl");
                    n += 1;
                }
            });
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                for e in events.try_iter() {
                    *seen.entry((e.key, e.expired_at)).or_default() += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        });
        for e in events.try_iter() {
            *seen.entry((e.key, e.expired_at)).or_default() += 1;
        }
        // (Within the session two versions of a key can share an `expired_at`: a write
        // stamped with a `now` taken before the reaper freed the previous version. So only
        // the reports across the reopen are compared.)
        assert!(seen.len() > 100, "only {} expirations", seen.len());
        events
    };
    for e in first_session.try_iter() {
        *seen.entry((e.key, e.expired_at)).or_default() += 1;
    }
    std::thread::sleep(Duration::from_millis(3500));
    let store = Store::open_with(dir.path(), opts())?;
    let events = store.subscribe_expirations();
    store.maintain()?;
    std::thread::sleep(Duration::from_millis(300));
    let again: Vec<_> = events
        .try_iter()
        .filter(|e| seen.contains_key(&(e.key.clone(), e.expired_at)))
        .collect();
    assert!(
        again.is_empty(),
        "{} reported again after the reopen, e.g. {:?}",
        again.len(),
        again.first()
    );
    assert_eq!(store.keyspace("ks")?.len()?, 0);
    Ok(())
}

/// Keys written once each (so every key has one version): with the reaper thread, `maintain`
/// callers, writers and default-TTL changes all at once, each key is reported at most once.
#[test]
fn concurrent_reapers_report_a_single_version_once() -> ebbdb::Result<()> {
    use ebbdb::Ttl;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .sync(SyncPolicy::Never)
            .segment_size(256 * 1024)
            .tick_interval(Duration::from_millis(10)),
    )?;
    let events = store.subscribe_expirations();
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(1))?;
    let stop_flag = AtomicBool::new(false);
    let stop = &stop_flag;
    let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let ks = &ks;
            s.spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("t{t}-{i}");
                    let r = if i.is_multiple_of(3) {
                        ks.put_with_ttl(&key, "v", Ttl::Seconds(1 + i % 2))
                    } else {
                        ks.put(&key, "v")
                    };
                    r.expect("put");
                    i += 1;
                }
            });
        }
        let store = &store;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                store.maintain().expect("maintain");
            }
        });
        let ks = &ks;
        s.spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(300));
                ks.set_default_ttl(DefaultTtl::Seconds(1 + n % 3))
                    .expect("set_default_ttl");
                n += 1;
            }
        });
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(4) {
            for e in events.try_iter() {
                *seen.entry(e.key).or_default() += 1;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    std::thread::sleep(Duration::from_millis(4500));
    store.maintain()?;
    for e in events.try_iter() {
        *seen.entry(e.key).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "{} keys reported twice: {:?}",
        twice.len(),
        twice.first()
    );
    assert_eq!(ks.len()?, 0);
    assert_eq!(seen.len() as u64, store.stats().expirations);
    Ok(())
}

/// A write takes its `now` before the log mutex. If it waits there (here: a keyspace creation
/// holds the mutex across a slow manifest fsync) while the clock passes the second in which
/// the new version's deadline falls and a reaper pass completes (`reaped_upto` = that
/// second), the version was inserted with a deadline already covered by `reaped_upto`. Closed
/// before the next pass, the store freed it at open as "already reported": its expiry event
/// was never published, in either session. The write now sees that under the wheel's lock and
/// reports the version itself ("expired on arrival", DESIGN.md §11).
#[test]
fn a_write_that_waited_for_the_log_mutex_is_not_freed_unreported_at_open() -> ebbdb::Result<()> {
    use ebbdb::faults;

    let dir = tempfile::tempdir()?;
    let c = common::clock();
    let mut reported = 0;
    let first_session = {
        let store = Store::open_with(dir.path(), manual_opts(&c))?;
        let events = store.subscribe_expirations();
        let ks = store.create_keyspace("ks", DefaultTtl::Seconds(1))?;
        faults::stall_syncs(dir.path(), Duration::from_millis(1200));
        std::thread::scope(|s| -> ebbdb::Result<()> {
            let creator = s.spawn(|| store.create_keyspace("other", DefaultTtl::Off).map(|_| ()));
            std::thread::sleep(Duration::from_millis(300)); // it holds the log mutex now
            let writer = s.spawn(|| ks.put("k", "v")); // takes now = T0, then waits
            std::thread::sleep(Duration::from_millis(300));
            c.advance(Duration::from_secs(1));
            store.maintain()?; // complete at T0 + 1: reaped_upto = T0 + 1
            creator.join().expect("creator")?;
            writer.join().expect("writer")?;
            Ok(())
        })?;
        faults::stall_syncs(dir.path(), Duration::ZERO);
        assert_eq!(ks.get("k")?, None, "expired at T0 + 1");
        reported += events.try_iter().filter(|e| e.key == b"k").count();
        events
    };
    reported += first_session.try_iter().filter(|e| e.key == b"k").count();
    let store = Store::open_with(dir.path(), manual_opts(&c))?;
    let events = store.subscribe_expirations();
    store.maintain()?;
    reported += events.try_iter().filter(|e| e.key == b"k").count();
    assert_eq!(
        reported, 1,
        "the version of k that expired at T0 + 1 is reported once"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// 04fc8f8 changed the hint sort (fields decoded once, unstable sort): the entries must
    /// come out in exactly the order of a stable sort by (keyspace, key, newest seq first), the
    /// order open relies on, and with every field intact.
    #[test]
    fn hint_order_is_keyspace_key_newest_first(
        recs in proptest::collection::vec((1u32..4, proptest::collection::vec(0u8..4, 0..4), any::<bool>()), 0..60)
    ) {
        use ebbdb::format::hint::{decode, HintEntry, HintWriter};
        use ebbdb::format::record::{Kind, Meta};
        let mut w = HintWriter::new(7);
        let mut want = Vec::new();
        for (i, (ks, key, tomb)) in recs.into_iter().enumerate() {
            // Unique sequence numbers, in no particular order.
            let seq = (i as u64 * 7919) % 1009 + 1;
            let meta = Meta {
                kind: if tomb { Kind::Tombstone } else { Kind::Put },
                flags: 0,
                keyspace: ks,
                ttl: ItemTtl::Inherit,
                seq,
                write_ms: 1_000 * seq,
            };
            let offset = 32 + 50 * i as u32;
            w.add(&meta, &key, offset, 50);
            want.push(HintEntry { meta, offset, len: 50, key });
        }
        want.sort_by(|a, b| {
            a.meta.keyspace.cmp(&b.meta.keyspace)
                .then(a.key.cmp(&b.key))
                .then(b.meta.seq.cmp(&a.meta.seq))
        });
        let got = decode(&w.finish(), 7).expect("valid hint");
        prop_assert_eq!(got, want);
    }
}
