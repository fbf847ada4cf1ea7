//! A segment about to die whole gets no hint file (a hint only speeds up opening, and this
//! segment will be dropped within seconds); if it outlives its expected death because a
//! default-TTL change moved its deadlines later, the worker writes the hint after all. Either
//! way, reopening finds every live key.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{hint_files, wait_until};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
        .segment_size(32 * 1024)
        .tick_interval(Duration::from_millis(5))
        .hint_every_segment(true)
}

/// Opens a store in `dir`, writes 2,000 keys with a 10 s TTL and waits until the worker has
/// deferred the hint of every sealed segment. Returns the store and the sealed count.
/// Deletes every hint file of the store in `dir` (closed).
fn remove_hints(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "hint") {
            std::fs::remove_file(path)?;
        }
    }
    Ok(())
}

/// True once no hint waits and every sealed segment has one.
fn every_hint_written(store: &Store, dir: &Path) -> bool {
    store.stats().hints_deferred == 0 && hint_files(dir) == store.stats().segments - 1
}

/// Creates keyspace "mixed" and writes 2,000 keys to it: nine in ten live 40 s, one never
/// expires, so no segment dies whole but each is short-lived.
fn write_mixed(store: &Store) -> ebbdb::Result<ebbdb::Keyspace> {
    // Items' own TTLs apply under a default that is not off.
    let ks = store.create_keyspace("mixed", DefaultTtl::NeverExpire)?;
    for i in 0..2_000u32 {
        let ttl = if i % 10 == 0 {
            ebbdb::Ttl::Never
        } else {
            ebbdb::Ttl::Seconds(40)
        };
        ks.put_with_ttl(i.to_be_bytes(), [7u8; 100], ttl)?;
    }
    Ok(ks)
}

fn store_of_dying_segments(dir: &Path, clock: &ManualClock) -> ebbdb::Result<(Store, usize)> {
    let store = Store::open_with(dir, opts(clock))?;
    let sessions = store.create_keyspace("sessions", DefaultTtl::Seconds(10))?;
    for i in 0..2_000u32 {
        sessions.put(i.to_be_bytes(), [7u8; 100])?;
    }
    let sealed = store.stats().segments - 1;
    wait_until("every sealed segment's hint to be deferred", || {
        store.stats().hints_deferred == sealed
    });
    Ok((store, sealed))
}

#[test]
fn dying_segments_get_their_hint_only_if_they_outlive_it() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let (store, sealed) = store_of_dying_segments(dir.path(), &clock)?;
    assert!(sealed >= 4, "{sealed} sealed segments");
    let sessions = store.keyspace("sessions")?;
    assert_eq!(
        hint_files(dir.path()),
        0,
        "no hint for segments about to die"
    );

    // A segment whose records never expire gets its hint as usual.
    let kept = store.create_keyspace("kept", DefaultTtl::Off)?;
    for i in 0..600u32 {
        kept.put(i.to_be_bytes(), [8u8; 100])?;
    }
    wait_until("hints of the segments that do not expire", || {
        hint_files(dir.path()) > 0
    });

    // The TTL grows to an hour: the deferred segments now outlive their expected death (10 s,
    // plus 5 s of grace for the reaper), and the worker writes their hints.
    sessions.set_default_ttl(DefaultTtl::Seconds(3600))?;
    clock.advance(Duration::from_secs(16));
    wait_until("the deferred hints to be written", || {
        store.stats().hints_deferred == 0
    });
    // (The worker may still be on the last hints requested at rotation: wait for them too.)
    wait_until("every sealed segment to have its hint", || {
        hint_files(dir.path()) == store.stats().segments - 1
    });
    drop((sessions, kept, store));

    let store = Store::open_with(dir.path(), opts(&clock))?;
    let sessions = store.keyspace("sessions")?;
    let kept = store.keyspace("kept")?;
    assert_eq!(sessions.len()?, 2_000);
    assert_eq!(kept.len()?, 600);
    assert_eq!(sessions.get(1_999u32.to_be_bytes())?, Some(vec![7u8; 100]));
    Ok(())
}

#[test]
fn a_store_reopened_without_the_deferred_hints_finds_every_key() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    drop(store_of_dying_segments(dir.path(), &clock)?);
    assert_eq!(hint_files(dir.path()), 0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let sessions = store.keyspace("sessions")?;
    assert_eq!(sessions.len()?, 2_000);
    clock.advance(Duration::from_secs(10));
    assert_eq!(sessions.len()?, 0, "and they still expire on time");
    Ok(())
}

/// Deferral survives a close: a segment whose hint was deferred when the store closed gets it
/// after the reopen once it outlives its expected death (otherwise every later open would
/// scan it).
#[test]
fn a_hint_deferred_at_close_is_written_after_the_reopen() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let (store, sealed) = store_of_dying_segments(dir.path(), &clock)?;
    drop(store);
    assert_eq!(hint_files(dir.path()), 0);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    // Still about to die: still deferred (the close sealed the active segment too).
    assert!(
        store.stats().hints_deferred >= sealed,
        "{:?}",
        store.stats()
    );
    store
        .keyspace("sessions")?
        .set_default_ttl(DefaultTtl::Seconds(3600))?;
    clock.advance(Duration::from_secs(16));
    wait_until("every sealed segment to have its hint", || {
        every_hint_written(&store, dir.path())
    });
    Ok(())
}

/// A sealed segment still without a hint when the store closes (sealed just before, or found
/// without one at open and the worker's tick not come yet) gets it at the close, so the next
/// open reads the hint instead of scanning the segment. Segments about to die whole stay
/// without one.
#[test]
fn a_close_writes_the_hints_still_missing() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let slow_ticks = |clock: &ManualClock| opts(clock).tick_interval(Duration::from_secs(3600));
    let sealed = {
        let store = Store::open_with(dir.path(), opts(&clock))?;
        let kept = store.create_keyspace("kept", DefaultTtl::Off)?;
        for i in 0..1_000u32 {
            kept.put(i.to_be_bytes(), [8u8; 100])?;
        }
        store.stats().segments - 1
    };
    assert!(sealed >= 3, "{sealed} sealed segments");
    // Take the hints away: the next open finds the segments without them, and with a tick
    // an hour away its worker writes none.
    remove_hints(dir.path())?;
    {
        let store = Store::open_with(dir.path(), slow_ticks(&clock))?;
        assert_eq!(store.stats().hints_deferred, sealed);
        assert_eq!(hint_files(dir.path()), 0);
    }
    assert_eq!(hint_files(dir.path()), sealed, "written at the close");
    let store = Store::open_with(dir.path(), slow_ticks(&clock))?;
    assert_eq!(store.keyspace("kept")?.len()?, 1_000);
    drop(store);
    // Segments about to die whole are left alone at the close too.
    let other = tempfile::tempdir()?;
    let (store, dying) = store_of_dying_segments(other.path(), &clock)?;
    drop(store);
    assert!(dying >= 4, "{dying} dying segments");
    assert_eq!(hint_files(other.path()), 0, "none for the dying segments");
    Ok(())
}

/// A close whose final sync fails writes no hint: a rotation it could not commit leaves the
/// sealed segment named active on disk, the next session appends to it, and a hint written
/// at the close would hide those records from every later open.
#[test]
fn a_close_whose_sync_fails_writes_no_hint() -> ebbdb::Result<()> {
    use ebbdb::faults::{self, FaultKind, FaultPlan};
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let slow_ticks = opts(&clock).tick_interval(Duration::from_secs(3600));
    {
        let store = Store::open_with(dir.path(), opts(&clock))?;
        let kept = store.create_keyspace("kept", DefaultTtl::Off)?;
        for i in 0..1_000u32 {
            kept.put(i.to_be_bytes(), [8u8; 100])?;
        }
    }
    remove_hints(dir.path())?;
    {
        let store = Store::open_with(dir.path(), slow_ticks.clone())?;
        assert!(store.stats().hints_deferred >= 3);
        store.keyspace("kept")?.put(b"late", [9u8; 100])?;
        // The close's sync is the next fsync in the directory, and fails once.
        faults::arm(FaultPlan {
            dir: dir.path().to_path_buf(),
            kind: FaultKind::Sync,
            nth: 1,
            sticky: false,
            partial: false,
            no_space: false,
        });
    }
    assert!(faults::disarm(dir.path()) > 0, "the close's sync failed");
    assert_eq!(hint_files(dir.path()), 0, "no hint after a failed close");
    // Every acknowledged key is back (the late one too, or not: its sync failed).
    let store = Store::open_with(dir.path(), slow_ticks)?;
    let kept = store.keyspace("kept")?;
    assert!((1_000..=1_001).contains(&kept.len()?));
    for i in 0..1_000u32 {
        assert!(kept.get(i.to_be_bytes())?.is_some(), "key {i}");
    }
    Ok(())
}

/// A segment at least half of whose bytes expire within a minute of being written is merged or
/// dropped within about that long, so its hint waits too, not only a segment about to die
/// whole. Still there two minutes later (nothing merged it), it gets its hint; a close before
/// that writes it; and a default-TTL change ends the wait.
#[test]
fn short_lived_segments_get_their_hint_only_if_they_outlast_the_wait() -> ebbdb::Result<()> {
    let write = |store: &Store| -> ebbdb::Result<usize> {
        write_mixed(store)?;
        let sealed = store.stats().segments - 1;
        assert!(sealed >= 4, "{sealed} sealed segments");
        wait_until("every sealed segment's hint to be deferred", || {
            store.stats().hints_deferred == sealed
        });
        Ok(sealed)
    };

    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    write(&store)?;
    assert_eq!(
        hint_files(dir.path()),
        0,
        "no hint for short-lived segments"
    );
    clock.advance(Duration::from_secs(121));
    wait_until("the hints once the wait is over", || {
        every_hint_written(&store, dir.path())
    });
    drop(store);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    assert_eq!(store.keyspace("mixed")?.len()?, 200);
    drop(store);

    // Closed before the wait is over: the close writes them.
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let sealed = write(&store)?;
    drop(store);
    assert!(hint_files(dir.path()) >= sealed, "written at the close");

    // A default-TTL change may have moved the deadlines later: the wait ends.
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let sessions = store.create_keyspace("sessions", DefaultTtl::Seconds(40))?;
    for i in 0..2_000u32 {
        sessions.put(i.to_be_bytes(), [7u8; 100])?;
    }
    let sealed = store.stats().segments - 1;
    // Each segment dies whole 40 s after its writes: deferred as dying (within 30 s) or as
    // short-lived.
    wait_until("every sealed segment's hint to be deferred", || {
        store.stats().hints_deferred == sealed
    });
    sessions.set_default_ttl(DefaultTtl::Seconds(3600))?;
    clock.advance(Duration::from_secs(46));
    wait_until("the hints after the default changed", || {
        every_hint_written(&store, dir.path())
    });
    Ok(())
}

/// A merge writes its outputs sorted by deadline, so under TTL churn most of them are
/// short-lived (or about to die whole) too: their hints wait like a sealed segment's, while
/// the outputs of records that never expire get theirs with the merge.
#[test]
fn a_merge_leaves_its_short_lived_outputs_without_a_hint_for_now() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = write_mixed(&store)?;
    let report = store.compact_full()?;
    assert!(report.segments_written >= 4, "{report:?}");
    let sealed = store.stats().segments - 1;
    // (The merged segments' own waits are forgotten at the worker's next tick.)
    wait_until("every output to have its hint or wait for it", || {
        store.stats().hints_deferred + hint_files(dir.path()) == sealed
    });
    let waiting = store.stats().hints_deferred;
    assert!(waiting >= 3, "{waiting} outputs wait for their hint");
    assert!(
        hint_files(dir.path()) >= 1,
        "the output of the lasting records has its hint"
    );
    clock.advance(Duration::from_secs(121));
    wait_until("the outputs' hints once the wait is over", || {
        every_hint_written(&store, dir.path())
    });
    drop((ks, store));
    let store = Store::open_with(dir.path(), opts(&clock))?;
    assert_eq!(store.keyspace("mixed")?.len()?, 200);
    Ok(())
}
