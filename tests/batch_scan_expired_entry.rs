//! Regression (found in review): a batch written while a scan is open reads the before-image of every key it touches,
//! including an expired-but-not-yet-reaped entry. If a merge retired that entry's segment (it
//! does not copy expired records), the before-image read finds no published segment and the
//! batch fails with `Error::Corruption` on a healthy database.
//!
//! To get an expired, unreaped entry at merge time deterministically, the reap of
//! `compact_full` runs while a default-TTL change holds the time fence (its `now` is clamped),
//! and the merge itself runs after the fence dropped and the clock moved on.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{faults, DefaultTtl, Options, Store, SyncPolicy, Ttl, WriteBatch};

const T0: u64 = 1_700_000_000;

#[test]
fn batch_with_open_scan_on_key_whose_expired_record_was_merged_away() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Never),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
    let other = store.create_keyspace("other", DefaultTtl::Off)?;
    ks.put_with_ttl(b"k", b"old", Ttl::Seconds(5))?;
    ks.put(b"a", b"1")?;

    faults::stall_syncs(dir.path(), Duration::from_millis(800));
    let changer = std::thread::spawn(move || other.set_default_ttl(DefaultTtl::Seconds(60)));
    std::thread::sleep(Duration::from_millis(300)); // changer holds the log mutex and the fence
    clock.set_unix_millis((T0 + 10) * 1000);
    let s2 = store.clone();
    let compactor = std::thread::spawn(move || s2.compact_full());
    std::thread::sleep(Duration::from_millis(300)); // its reap ran at the fenced `now`
    faults::stall_syncs(dir.path(), Duration::ZERO);
    changer.join().expect("changer")?;
    let report = compactor.join().expect("compactor")?;
    assert!(report.segments_merged >= 1, "{report:?}");

    eprintln!(
        "now {} (want {}), remaining {:?}, stats {:?}",
        store.now_unix_millis(),
        (T0 + 10) * 1000,
        ks.remaining_ttl(b"k")?,
        report
    );
    assert_eq!(ks.get(b"k")?, None, "k expired");
    assert_eq!(ks.get(b"a")?, Some(b"1".to_vec()));

    let scan = ks.iter(); // an open scan makes batches record before-images
    let mut batch = WriteBatch::new();
    batch.put(&ks, b"k", b"new");
    batch.put(&ks, b"a", b"2");
    let result = store.write_batch(batch);
    drop(scan);
    result.expect("a batch on a healthy store must not fail");
    assert_eq!(ks.get(b"k")?, Some(b"new".to_vec()));
    Ok(())
}
