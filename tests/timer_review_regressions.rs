//! Regressions found by a review of the per-second expiry timers (each test failed before its fix).

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Store, Ttl};

mod common;

use common::{manual as opts, T0};

/// A key whose timer in charge is at second D, disarmed (delete / put Never) and re-armed at
/// the same second D again leaves a second timer *at D* for the same key. Both pass the sweep's
/// check (`entry.armed == at`), so the sweep cannot drop the stale one: they are counted stale
/// but stay until D fires, and every maintain/reaper tick re-sweeps every bucket in vain.
/// Memory grows with the number of writes (one timer per delete+put pair).
#[test]
fn same_second_rearm_duplicates_are_never_swept() -> ebbdb::Result<()> {
    const CYCLES: usize = 70_000; // > SWEEP_MIN (65,536) in a non-test build of the crate
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("s", DefaultTtl::NeverExpire)?;
    for _ in 0..CYCLES {
        ks.put_with_ttl("k", b"v", Ttl::Seconds(3_600))?;
        ks.delete("k")?;
    }
    ks.put_with_ttl("k", b"v", Ttl::Seconds(3_600))?;
    let st = store.stats();
    assert_eq!((st.timers_armed, st.timers_stale), (1, CYCLES));
    // Stale outnumber armed and exceed SWEEP_MIN: maintain sweeps.
    store.maintain()?;
    store.maintain()?;
    let st = store.stats();
    assert_eq!(
        (st.timers_armed, st.timers_stale),
        (1, 0),
        "one key, yet {} timers pending after two sweeps",
        st.timers_armed + st.timers_stale
    );
    Ok(())
}

/// `set_default_ttl` re-timing could file a timer at a second `reaped_upto` already covers:
/// the new deadline is clamped to `since` = now, and a pass that completed at this same second
/// has `reaped_upto == now`. Such a timer was never handled before the close, and the next
/// open freed the item as "expired and already reported": its event was lost. Now the change
/// expires such items itself and reports them, once.
#[test]
fn retimed_to_a_reaped_second_is_reported_once() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    {
        let store = Store::open_with(dir.path(), opts(&clock))?;
        let events = store.subscribe_expirations();
        let ks = store.create_keyspace("s", DefaultTtl::Seconds(1_000))?;
        ks.put("k", b"v")?;
        ks.put_with_ttl("own", b"v", Ttl::Seconds(2_000))?;
        clock.advance(Duration::from_secs(10));
        assert_eq!(store.maintain()?, 0); // reaped_upto = T0 + 10
        ks.set_default_ttl(DefaultTtl::Seconds(5))?; // deadline = max(T0+5, since=T0+10)
        assert!(ks.get("k")?.is_none(), "expired now under the new default");
        assert_eq!(ks.len()?, 1, "the item with its own TTL is untouched");
        let got: Vec<_> = events.try_iter().collect();
        assert_eq!(got.len(), 1, "reported when the change expired it: {got:?}");
        assert_eq!(
            (got[0].key.as_slice(), got[0].expired_at),
            (&b"k"[..], T0 + 10)
        );
        let st = store.stats();
        assert_eq!((st.timers_armed, st.timers_stale), (1, 1));
        assert_eq!(store.maintain()?, 0, "nothing left to expire");
        assert_eq!(events.try_iter().count(), 0);
    }
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let events = store.subscribe_expirations();
    store.maintain()?;
    assert_eq!(
        events.try_iter().count(),
        0,
        "not reported again after a reopen"
    );
    assert_eq!(store.keyspace("s")?.len()?, 1);
    Ok(())
}

/// `delete_keyspace` takes the map under the keyspace lock, lets it go, and only then counts
/// its armed entries stale under the expiry lock. A reaper (or sweep) that meets the dropped
/// keyspace in that window (`keyspace_by_id` is None, or the keys are already gone) subtracts
/// first; `saturating_sub` clamps at 0 and the later `+= n` leaves `stale` too high for ever.
/// Probabilistic: loops until the drift shows or the budget runs out.
#[test]
fn keyspace_drop_racing_reaper_drifts_stale_count() -> ebbdb::Result<()> {
    const KEYS: usize = 20_000;
    const ROUNDS: usize = 300;
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    for round in 0..ROUNDS {
        let name = format!("x{round}");
        let ks = store.create_keyspace(&name, DefaultTtl::NeverExpire)?;
        for c in 0..KEYS / 1_000 {
            let mut batch = ebbdb::WriteBatch::new();
            for i in 0..1_000 {
                batch.put_with_ttl(&ks, format!("k{c}-{i}"), b"v", Ttl::Seconds(1));
            }
            store.write_batch(batch)?;
        }
        drop(ks);
        clock.advance(Duration::from_secs(2));
        std::thread::scope(|s| {
            let a = s.spawn(|| store.maintain());
            let b = s.spawn(|| store.maintain());
            std::thread::yield_now();
            store.delete_keyspace(&name).expect("drop");
            a.join().expect("a").expect("maintain");
            b.join().expect("b").expect("maintain");
        });
        store.maintain()?;
        let st = store.stats();
        assert_eq!(
            (st.timers_armed, st.timers_stale),
            (0, 0),
            "round {round}: no timer is pending, yet the counts say otherwise"
        );
    }
    Ok(())
}
