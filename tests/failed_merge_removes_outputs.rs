//! Regression (found in review): a merge whose publish fails *before* the manifest rename (the case DESIGN §5 says
//! "changes nothing" and does not poison) leaves its fully written outputs (`.seg.tmp` + `.hint`)
//! on disk: `Outputs::finish` sets `finished`, so the Drop cleanup no longer runs, and nothing
//! else removes them until the next open. Every retry (the worker retries with backoff for
//! ever) writes another full copy, so a full disk (ENOSPC on MANIFEST.tmp) gets fuller.

use ebbdb::clock::ManualClock;
use ebbdb::faults::{self, FaultKind, FaultPlan};
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

fn leftovers(dir: &std::path::Path) -> (usize, u64) {
    let mut n = 0;
    let mut bytes = 0;
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".seg.tmp") {
            n += 1;
            bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    (n, bytes)
}

#[test]
fn failed_publishes_leave_merge_outputs_behind() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(ManualClock::at_unix_secs(1_700_000_000))
            .sync(SyncPolicy::Never)
            .segment_size(64 * 1024),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..500 {
        ks.put(format!("key-{i:04}"), [7u8; 200])?;
    }
    store.compact_full()?; // seal everything; the active segment is now empty
    assert_eq!(leftovers(dir.path()).0, 0);

    for attempt in 1..=3 {
        // Only the manifest's rename fails (ENOSPC-like), i.e. StoreError::Unchanged.
        faults::arm(FaultPlan {
            dir: dir.path().join("MANIFEST.tmp"),
            kind: FaultKind::Rename,
            nth: 1,
            sticky: false,
            partial: false,
            no_space: true,
        });
        let r = store.compact_full();
        faults::disarm(&dir.path().join("MANIFEST.tmp"));
        assert!(
            r.is_err(),
            "attempt {attempt}: the publish was made to fail"
        );
        assert!(
            !store.is_poisoned(),
            "a failure before the rename does not poison"
        );
        let (n, bytes) = leftovers(dir.path());
        eprintln!("after failed attempt {attempt}: {n} .seg.tmp files, {bytes} bytes");
    }
    let (n, bytes) = leftovers(dir.path());
    assert_eq!(
        n, 0,
        "{n} unpublished merge outputs ({bytes} bytes) left on disk by failed merges"
    );
    Ok(())
}
