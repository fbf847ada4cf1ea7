//! A sealed segment whose every record has expired is dropped as a file without waiting for
//! the reaper to free its keys one timer at a time (DESIGN §7, "Dropping a segment that died
//! whole"), but only when its deadlines are exact (no default-TTL change since they were
//! counted) and no expiry subscriber needs the keys' events to survive a crash.

mod common;

use std::time::Duration;

use common::{clock, opts};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Keyspace, Store, Ttl};

const KEYS: u32 = 300;

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut v = format!("value-{i:05}-").into_bytes();
    v.resize(100, b'v');
    v
}

/// A store with `KEYS` keys in a keyspace with a 10 s default TTL, spread over many sealed
/// 4 KiB segments.
fn filled(dir: &std::path::Path, c: &ManualClock) -> ebbdb::Result<(Store, Keyspace)> {
    let store = Store::open_with(dir, opts(c))?;
    let ks = store.create_keyspace("sessions", DefaultTtl::Seconds(10))?;
    for i in 0..KEYS {
        ks.put(key(i), value(i))?;
    }
    assert!(store.stats().segments > 5, "{:?}", store.stats());
    Ok((store, ks))
}

fn sealed_segments(store: &Store) -> usize {
    store
        .stats()
        .per_segment
        .iter()
        .filter(|s| !s.active)
        .count()
}

#[test]
fn a_segment_that_died_whole_goes_before_its_keys_are_reaped() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (store, ks) = filled(dir.path(), &c)?;
    let sealed = sealed_segments(&store);

    // One second before the deadline nothing is dead.
    c.advance(Duration::from_secs(9));
    assert_eq!(store.run_compaction_policy()?.segments_dropped, 0);
    assert_eq!(ks.len()?, KEYS as usize);

    c.advance(Duration::from_secs(1));
    let report = store.run_compaction_policy()?;
    assert_eq!(report.segments_dropped, sealed, "{report:?}");
    assert_eq!(sealed_segments(&store), 0);
    // The key directory still holds the expired entries (no reaper ran), and no read sees
    // them or trips over their missing files. `stats()` counts them as not purged (not
    // reaped yet), with the bytes they took, though their records are gone.
    let s = store.stats();
    assert_eq!(s.expired_items, u64::from(KEYS), "{s:?}");
    assert!(s.expired_bytes > s.segment_bytes, "{s:?}");
    assert_eq!(s.expirations, 0);
    for i in 0..KEYS {
        assert_eq!(ks.get(key(i))?, None, "key {i}");
    }
    assert_eq!(ks.iter().count(), 0);
    assert_eq!(ks.len()?, 0);
    store.check_census().map_err(ebbdb::Error::BadRequest)?;

    // The reaper frees them later, with nothing left to account against.
    store.compact()?;
    assert_eq!(store.stats().expirations, u64::from(KEYS));
    store.check_census().map_err(ebbdb::Error::BadRequest)?;
    // A new version of a key whose old entry pointed into a dropped file.
    ks.put_with_ttl(key(7), b"again", Ttl::Never)?;
    drop((ks, store));

    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("sessions")?;
    assert_eq!(ks.len()?, 1);
    assert_eq!(ks.get(key(7))?, Some(b"again".to_vec()));
    Ok(())
}

#[test]
fn a_default_ttl_change_keeps_segments_until_their_deadlines_are_counted_again() -> ebbdb::Result<()>
{
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (store, ks) = filled(dir.path(), &c)?;
    // Every item is 5 s old: the new default gives it 995 s more. The segments' deadlines were
    // counted under the old default, which would have them all dead at 10 s.
    c.advance(Duration::from_secs(5));
    ks.set_default_ttl(DefaultTtl::Seconds(1000))?;
    c.advance(Duration::from_secs(6));
    assert_eq!(store.run_compaction_policy()?.segments_dropped, 0);
    for i in 0..KEYS {
        assert_eq!(ks.get(key(i))?, Some(value(i)), "key {i}");
    }
    drop((ks, store));

    // Opening counts the deadlines again, under the new default.
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("sessions")?;
    assert_eq!(ks.len()?, KEYS as usize);
    assert_eq!(store.run_compaction_policy()?.segments_dropped, 0);
    c.advance(Duration::from_secs(989));
    assert!(store.run_compaction_policy()?.segments_dropped > 0);
    assert_eq!(ks.len()?, 0);
    for i in 0..KEYS {
        assert_eq!(ks.get(key(i))?, None, "key {i}");
    }
    Ok(())
}

#[test]
fn an_expiry_subscriber_keeps_segments_until_the_reaper_reported_their_keys() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (store, _ks) = filled(dir.path(), &c)?;
    let sealed = sealed_segments(&store);
    let events = store.subscribe_expirations();
    c.advance(Duration::from_secs(10));
    assert_eq!(store.run_compaction_policy()?.segments_dropped, 0);
    assert!(events.try_recv().is_err());
    // The expiry pass reports every key; then the segments are dead by the reaper's count
    // (and the active one, all dead, is sealed and dropped too).
    let report = store.compact()?;
    assert!(report.segments_dropped >= sealed, "{report:?}");
    assert_eq!(events.try_iter().count(), KEYS as usize);
    Ok(())
}

/// Segments counted at open carry the epoch of the open: a default-TTL change after the open
/// makes their deadlines stale too (a review found them treated as exact, and 288 of 300 live
/// keys dropped).
#[test]
fn a_default_ttl_change_after_a_reopen_keeps_the_segments_counted_at_open() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (store, ks) = filled(dir.path(), &c)?;
    drop((ks, store));
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("sessions")?;
    let sealed_at_open = sealed_segments(&store);
    c.advance(Duration::from_secs(5));
    ks.set_default_ttl(DefaultTtl::Seconds(1000))?;
    // Writes after the change seal the segment that was active at open.
    let other = store.create_keyspace("other", DefaultTtl::Seconds(1))?;
    for i in 0..40 {
        other.put(key(i), value(i))?;
    }
    assert!(sealed_segments(&store) > sealed_at_open);
    c.advance(Duration::from_secs(6));
    store.run_compaction_policy()?;
    for i in 0..KEYS {
        assert_eq!(ks.get(key(i))?, Some(value(i)), "key {i}");
    }
    drop((ks, other, store));
    let store = Store::open_with(dir.path(), opts(&c))?;
    assert_eq!(store.keyspace("sessions")?.len()?, KEYS as usize);
    Ok(())
}

/// A subscriber arriving while a compaction run is deciding would not stop an early drop, and
/// a crash then would lose its events: subscribing waits for the run to end.
#[test]
fn subscribing_waits_for_a_compaction_run_in_progress() -> ebbdb::Result<()> {
    use ebbdb::compaction::merge::CrashPoint;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (store, _ks) = filled(dir.path(), &c)?;
    c.advance(Duration::from_secs(10));
    // Ends with the subscriber (from a thread started while the run was at its outputs) and
    // whether it had subscribed before the run went on.
    type Seen = Option<(std::thread::JoinHandle<()>, bool)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    {
        let (s2, seen2) = (store.clone(), Arc::clone(&seen));
        store.set_merge_observer(Some(Arc::new(move |at| {
            if at != CrashPoint::AfterOutputs {
                return;
            }
            let (tx, rx) = crossbeam_channel::bounded(1);
            let s3 = s2.clone();
            let t = std::thread::spawn(move || {
                let events = s3.subscribe_expirations();
                let _ = tx.send(());
                drop(events);
            });
            // A bounded wait for something that must not happen while the run holds on.
            let early = rx.recv_timeout(Duration::from_millis(200)).is_ok();
            *seen2.lock().expect("observer state") = Some((t, early));
        })));
    }
    let report = store.run_compaction_policy()?;
    store.set_merge_observer(None);
    assert!(report.segments_dropped > 0, "{report:?}");
    let (t, early) = seen
        .lock()
        .expect("observer state")
        .take()
        .expect("observer ran");
    t.join().expect("subscriber thread");
    assert!(!early, "subscribed in the middle of a compaction run");
    Ok(())
}
