//! A background failure never wedges the store: foreground calls report only their own errors,
//! the failure shows in `stats()` until a later job succeeds, and a merge that keeps failing is
//! retried with backoff, not on every tick.

mod common;

use std::path::Path;
use std::time::Duration;

use common::wait_until;

use ebbdb::clock::ManualClock;
use ebbdb::faults::{self, FaultKind, FaultPlan};
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

/// Fails every file creation under `dir` (merge outputs, hints) with ENOSPC until disarmed.
fn fail_creates(dir: &Path) {
    faults::arm(FaultPlan {
        dir: dir.to_path_buf(),
        kind: FaultKind::Create,
        nth: 1,
        sticky: true,
        partial: false,
        no_space: true,
    });
}

#[test]
fn a_failed_background_merge_does_not_wedge_foreground_calls() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(clock)
            .sync(SyncPolicy::Never)
            .segment_size(8 * 1024),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..200 {
        ks.put(format!("key-{i:03}"), [1u8; 200])?;
    }
    store.sync()?;
    // Overwrite in the same segments' worth of data so sealed segments hold garbage, without
    // a rotation after the plan is armed (a rotation creates a file too), and with every
    // rotation's manifest stored before (`sync` commits them; the sync thread might not yet).
    for i in 0..200 {
        ks.put(format!("key-{i:03}"), [2u8; 200])?;
    }
    store.sync()?;
    fail_creates(dir.path());
    store.request_compaction();
    wait_until("the background merge to fail", || {
        store.stats().worker_error.is_some()
    });
    let failures = store.stats().worker_failures;
    assert!(failures >= 1);
    let reported = store.stats().worker_error.unwrap_or_default();
    assert!(
        reported.contains(&dir.path().display().to_string()),
        "the failure names the file it concerns: {reported}"
    );
    faults::disarm(dir.path());

    // Foreground calls run their own work and succeed.
    store.maintain()?;
    store.compact()?;
    let full = store.compact_full()?;
    assert!(full.segments_merged > 0, "{full:?}");
    ks.put("after", "the failure")?;
    assert!(!store.is_poisoned());
    // The next background job that succeeds clears the reported failure.
    store.request_compaction();
    wait_until("the failure to clear", || {
        store.stats().worker_error.is_none()
    });
    for i in 0..200 {
        assert_eq!(ks.get(format!("key-{i:03}"))?, Some(vec![2u8; 200]));
    }
    Ok(())
}

#[test]
fn a_merge_that_keeps_failing_is_retried_with_backoff() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    // Real clock: the worker runs the compaction policy every tick of 5 ms.
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .sync(SyncPolicy::Never)
            .segment_size(64 * 1024)
            .tick_interval(Duration::from_millis(5)),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    // 400 keys, all in sealed segments (merge outputs, with their hints written by the merge).
    for i in 0..400 {
        ks.put(format!("key-{i:03}"), vec![1u8; 150])?;
    }
    store.compact_full()?;
    // Creations fail from here on. Overwriting 240 of the keys fits in the fresh active segment
    // (no file is created), and leaves the sealed segments 60 % dead: the policy must merge
    // them (not drop them: they still hold live records), and every merge fails creating its
    // output. Nothing else creates a file meanwhile, so each failed creation is one attempt;
    // arming first means the garbage cannot be merged before the failures are in place.
    fail_creates(dir.path());
    for i in 0..240 {
        ks.put(format!("key-{i:03}"), vec![2u8; 150])?;
    }
    let watch = Duration::from_millis(1500);
    std::thread::sleep(watch);
    let attempts = faults::disarm(dir.path());
    // Without backoff the policy would retry every 5 ms (~300 attempts); with it, the first
    // failure waits 1 s, so at most a handful of attempts fit in 1.5 s.
    assert!(
        attempts <= 6,
        "{attempts} failed creations in {watch:?}: the worker retries without backing off"
    );
    assert!(attempts >= 1, "the policy never tried to merge");
    assert!(
        !store.is_poisoned(),
        "a failed background merge poisons nothing"
    );
    // Once the disk is healthy again the garbage is merged in the background.
    wait_until("a background merge after recovery", || {
        store.stats().worker_error.is_none() && store.stats().merges > 1
    });
    for i in 0..400 {
        let want = if i < 240 { 2u8 } else { 1u8 };
        assert_eq!(ks.get(format!("key-{i:03}"))?, Some(vec![want; 150]));
    }
    Ok(())
}
