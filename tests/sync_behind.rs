//! Under `SyncPolicy::Never` the worker fsyncs the log in the background every few MiB
//! appended (DESIGN.md §5, "sync behind"), so that a rotation's fsync of the sealed segment,
//! which every writer waits for, covers little. Checked with the power-loss model: after writing
//! well past the threshold and waiting (bounded) for the background fsync, a power cut keeps the
//! first threshold's worth of writes, which nobody synced explicitly. Without the background
//! fsync nothing under `Never` is durable before a rotation, `sync()` or close, and every key
//! is lost.

use std::time::{Duration, Instant};

use ebbdb::clock::ManualClock;
use ebbdb::{faults, DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

fn key(i: u32) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k[4..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9).to_le_bytes());
    k
}

fn value(i: u32) -> Vec<u8> {
    let mut v = vec![0x5Au8; 100];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// A store directory with keyspace "k" (created under a clean close, so durable) whose file
/// operations are tracked for the power-loss model, with the options to open it again: a
/// `ManualClock` and `SyncPolicy::Never`.
fn tracked_dir() -> (tempfile::TempDir, ManualClock, Options) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let opts = Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never);
    {
        let store = Store::open_with(dir.path(), opts.clone()).expect("open");
        store
            .create_keyspace("k", DefaultTtl::Off)
            .expect("keyspace");
    }
    faults::track(dir.path()).expect("track");
    (dir, clock, opts)
}

/// Waits (at most 20 s) until a file of `dir` was fsynced after the count `before`: the
/// background fsync no caller asked for.
fn wait_for_a_background_fsync(dir: &std::path::Path, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while faults::syncs(dir) == before {
        assert!(
            Instant::now() < deadline,
            "no background fsync within 20 s of writing past the mark under SyncPolicy::Never"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn writes_past_the_threshold_are_synced_in_the_background_and_survive_a_power_cut() {
    let (dir, _clock, opts) = tracked_dir();
    let store = Store::open_with(dir.path(), opts.clone()).expect("reopen");
    let ks = store.keyspace("k").expect("keyspace");
    let syncs_before = faults::syncs(dir.path());
    // About 12 MiB of records (16-byte keys, 100-byte values, headers): past the 8 MiB
    // threshold, inside one 64 MiB segment (no rotation, whose fsync would also cover them).
    let n: u32 = 80_000;
    for i in 0..n {
        ks.put(key(i), value(i)).expect("put");
    }
    assert_eq!(store.stats().segments, 1, "the test needs a single segment");
    wait_for_a_background_fsync(dir.path(), syncs_before);
    store.simulate_crash();
    drop(ks);
    drop(store);
    faults::power_loss(dir.path()).expect("power loss");

    let store = Store::open_with(dir.path(), opts).expect("open after the power cut");
    let ks = store.keyspace("k").expect("keyspace");
    // The first 8 MiB hold more than 50,000 of these records: all were covered.
    let mut kept = 0u32;
    for i in 0..n {
        match ks.get(key(i)).expect("get") {
            Some(v) => {
                assert_eq!(v, value(i), "key {i} came back with another value");
                kept += 1;
            }
            None => break,
        }
    }
    assert!(kept >= 50_000, "only {kept} of the first writes survived");
    // What survived is a prefix: nothing after the first missing key.
    for i in kept..n {
        if let Some(v) = ks.get(key(i)).expect("get") {
            panic!(
                "key {i} survived after key {kept} was lost ({} bytes)",
                v.len()
            );
        }
    }
}

/// Sync behind writes and fsyncs the log up to a page boundary, and readers (and the durable
/// length recorded in `CLOCK`) may take from the file only up to the end of a whole write
/// before it: a batch the boundary cuts must not count as durable in part, since recovery
/// keeps a batch's records all or none. Batches of 40 records (about 5 KiB) straddle nearly
/// every page boundary; after the background fsync and a second's tick (which records the
/// durable length), a process crash and a strict reopen must find every batch whole or
/// absent, and all but the last few present.
#[test]
fn a_batch_cut_by_sync_behind_is_not_durable_in_part() {
    let (dir, clock, opts) = tracked_dir();
    let store = Store::open_with(dir.path(), opts.clone()).expect("reopen");
    let ks = store.keyspace("k").expect("keyspace");
    let syncs_before = faults::syncs(dir.path());
    // Batches until just past the 8 MiB at which sync behind is asked for, and no further:
    // what follows is far less than the 256 KiB at which writes flush, so the background's
    // own flush (up to a page boundary, the batch it cuts left in the buffer) is the file's
    // last, and what a claim in CLOCK must agree with after the crash.
    let per_batch = 40u32;
    let active_bytes = |store: &Store| {
        store
            .stats()
            .per_segment
            .iter()
            .find(|g| g.active)
            .map_or(0, |g| g.bytes)
    };
    let mut batches = 0u32;
    while active_bytes(&store) < 8 << 20 {
        let mut batch = WriteBatch::new();
        for i in batches * per_batch..(batches + 1) * per_batch {
            batch.put(&ks, key(i), value(i));
        }
        store.write_batch(batch).expect("batch");
        batches += 1;
    }
    assert_eq!(store.stats().segments, 1, "the test needs a single segment");
    wait_for_a_background_fsync(dir.path(), syncs_before);
    // A write in a later second records the durable length in CLOCK.
    clock.advance(Duration::from_secs(2));
    ks.put(b"tick", b"tock").expect("put");
    store.simulate_crash();
    drop(ks);
    drop(store);
    let store = Store::open_with(dir.path(), opts).expect("a strict open after the crash");
    let ks = store.keyspace("k").expect("keyspace");
    let mut whole = 0u32;
    for b in 0..batches {
        let found: Vec<bool> = (b * per_batch..(b + 1) * per_batch)
            .map(|i| {
                let got = ks.get(key(i)).expect("get");
                if let Some(v) = &got {
                    assert_eq!(v, &value(i), "key {i} came back with another value");
                }
                got.is_some()
            })
            .collect();
        assert!(
            found.iter().all(|&f| f) || found.iter().all(|&f| !f),
            "batch {b} came back in part"
        );
        if found[0] {
            assert_eq!(whole, b, "batch {b} survived after an earlier one was lost");
            whole += 1;
        }
    }
    assert!(
        whole >= 1_000,
        "only {whole} batches survived the background fsync"
    );
}
