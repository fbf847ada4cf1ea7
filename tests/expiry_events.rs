//! Expiry events: exactly once per expired item version, including items that expired while
//! the store was closed; and the worker with the real clock.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{clock, opts};
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl};

#[test]
fn every_expired_key_is_reported_exactly_once() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let events = store.subscribe_expirations();
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(10))?;
    for i in 0..500u32 {
        ks.put(format!("k{i}"), "v")?;
    }
    ks.put("rewritten", "v")?;
    ks.put_with_ttl("forever", "v", Ttl::Never)?;
    c.advance(Duration::from_secs(5));
    ks.put("rewritten", "v2")?; // its first timer is now stale
    c.advance(Duration::from_secs(5));
    assert_eq!(store.maintain()?, 500);
    assert_eq!(store.maintain()?, 0, "a second pass finds nothing");
    let got: Vec<_> = events.try_iter().collect();
    assert_eq!(got.len(), 500);
    let keys: BTreeSet<_> = got.iter().map(|e| e.key.clone()).collect();
    assert_eq!(keys.len(), 500, "no duplicates");
    assert!(got
        .iter()
        .all(|e| e.keyspace == "ks" && e.expired_at == common::T0 + 10));
    c.advance(Duration::from_secs(5));
    assert_eq!(store.maintain()?, 1);
    assert_eq!(
        events.try_iter().map(|e| e.key).collect::<Vec<_>>(),
        vec![b"rewritten".to_vec()]
    );
    assert_eq!(store.stats().expirations, 501);
    Ok(())
}

#[test]
fn keys_expired_while_closed_are_reported_on_open_and_only_once() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Seconds(10))?;
        ks.put("early", "v")?;
        c.advance(Duration::from_secs(10));
        ks.put("late", "v")?;
        let events = store.subscribe_expirations();
        assert_eq!(store.maintain()?, 1);
        assert_eq!(events.try_iter().count(), 1);
    }
    c.advance(Duration::from_secs(100));
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let events = store.subscribe_expirations();
        assert_eq!(store.keyspace("ks")?.len()?, 0);
        store.maintain()?;
        let keys: Vec<_> = events.try_iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            vec![b"late".to_vec()],
            "only the key that expired while closed"
        );
    }
    let store = Store::open_with(dir.path(), opts(&c))?;
    let events = store.subscribe_expirations();
    store.maintain()?;
    assert_eq!(events.try_iter().count(), 0, "nothing is reported twice");
    Ok(())
}

#[test]
fn default_ttl_change_retimes_timers() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(100))?;
    ks.put("a", "v")?;
    ks.set_default_ttl(DefaultTtl::Seconds(5))?;
    c.advance(Duration::from_secs(5));
    assert_eq!(
        store.maintain()?,
        1,
        "moved earlier: a new timer fires at 5 s"
    );
    ks.put("b", "v")?;
    ks.set_default_ttl(DefaultTtl::Seconds(50))?;
    c.advance(Duration::from_secs(5));
    assert_eq!(store.maintain()?, 0, "moved later: the early timer re-arms");
    c.advance(Duration::from_secs(45));
    assert_eq!(store.maintain()?, 1);
    Ok(())
}

/// The one test on the real clock: the worker reaps on its own within a bounded wait.
#[test]
fn worker_reaps_with_the_real_clock() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .sync(SyncPolicy::Never)
            .tick_interval(Duration::from_millis(50)),
    )?;
    let events = store.subscribe_expirations();
    let ks = store.create_keyspace("ks", DefaultTtl::Seconds(1))?;
    let written = Instant::now();
    ks.put("a", "v")?;
    let ev = events
        .recv_timeout(Duration::from_secs(10))
        .expect("event within 10 s");
    assert_eq!(ev.key, b"a".to_vec());
    assert!(
        written.elapsed() <= Duration::from_secs(3),
        "lag {:?}",
        written.elapsed()
    );
    assert_eq!(ks.get("a")?, None);
    Ok(())
}
