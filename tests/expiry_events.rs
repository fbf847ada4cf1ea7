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

/// Expiry is not held up by a merge: while a background merge is paused (on the worker
/// thread), a key with a 1 s TTL still expires and its event arrives. Before the reaper had a
/// thread of its own, the worker reaped between merges, so a long merge delayed every expiry.
#[test]
fn expiry_events_arrive_while_a_merge_is_running() -> ebbdb::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc, Mutex};

    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .sync(SyncPolicy::Never)
            .segment_size(64 * 1024)
            .tick_interval(Duration::from_millis(20)),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let short = store.create_keyspace("short", DefaultTtl::Seconds(1))?;
    let events = Arc::new(Mutex::new(store.subscribe_expirations()));
    let first = Arc::new(AtomicBool::new(true));
    let (done_tx, done_rx) = mpsc::channel::<Result<Duration, String>>();
    let done_tx = Mutex::new(done_tx);
    let (events_in, short_in) = (Arc::clone(&events), short.clone());
    store.set_merge_observer(Some(Arc::new(move |_step| {
        if !first.swap(false, Ordering::SeqCst) {
            return;
        }
        // The merge is paused here; expiry must go on without it.
        let outcome = (|| {
            let t = Instant::now();
            short_in.put("session", "v").map_err(|e| e.to_string())?;
            let rx = events_in.lock().map_err(|_| "poisoned".to_string())?;
            loop {
                match rx.recv_timeout(Duration::from_secs(10)) {
                    Ok(ev) if ev.key == b"session" => return Ok(t.elapsed()),
                    Ok(_) => {}
                    Err(_) => return Err("no expiry event within 10 s of a paused merge".into()),
                }
            }
        })();
        if let Ok(tx) = done_tx.lock() {
            let _ = tx.send(outcome);
        }
    })));
    // The garbage comes after the observer: with the real clock the worker runs the policy
    // every tick, and on a loaded machine it merged the overwritten segments while the writes
    // went on, so a merge requested after them found nothing left and the observer never ran.
    // Whichever merge comes first now, on a tick or on request, is paused: the segment where
    // the first pass ends holds the second pass's first keys, so it is merged, never dropped.
    for round in 0..2u8 {
        for i in 0..2000 {
            ks.put(format!("k{i:05}"), [round; 64])?;
        }
    }
    store.request_compaction();
    let outcome = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the background merge ran");
    store.set_merge_observer(None);
    // Whole-second deadlines: a 1 s TTL ends at the next whole second after the write.
    let lag = outcome.map_err(ebbdb::Error::BadRequest)?;
    assert!(lag <= Duration::from_secs(10), "{lag:?}");
    assert_eq!(short.get("session")?, None);
    assert_eq!(ks.get("k00042")?, Some(vec![1u8; 64]));
    Ok(())
}
