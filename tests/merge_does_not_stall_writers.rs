//! A merge does not hold writers up while it moves key-directory entries.
//!
//! At every step of a merge after its outputs are written (the publish, the key-directory
//! move), a write from another thread must complete promptly. The merge is paused at each step
//! by a test observer, which waits (bounded) for the other thread's write; before the fix the
//! merge held the log mutex through the publish and the whole move (about 0.1 s per million
//! moved entries), so the write could not complete until the merge finished.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

#[test]
fn writers_proceed_while_a_merge_publishes_and_moves_entries() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(ManualClock::at_unix_secs(1_700_000_000))
            .sync(SyncPolicy::Never)
            .segment_size(64 * 1024),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..3000 {
        ks.put(format!("k{i:05}"), [1u8; 64])?;
    }
    let stuck: Arc<Mutex<Vec<String>>> = Arc::default();
    let (writer_ks, seen) = (ks.clone(), Arc::clone(&stuck));
    store.set_merge_observer(Some(Arc::new(move |step| {
        let (tx, rx) = mpsc::channel();
        let ks = writer_ks.clone();
        std::thread::spawn(move || {
            let _ = tx.send(ks.put(format!("during-{step:?}"), b"x"));
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{step:?}: {e}")),
            Err(_) => seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{step:?}: a write waited 5 s for the merge")),
        }
    })));
    let report = store.compact_full()?;
    store.set_merge_observer(None);
    assert!(report.records_copied >= 3000, "{report:?}");
    let stuck = stuck.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(stuck.is_empty(), "{stuck:?}");
    for step in ["AfterPublish", "AfterKeydirMove"] {
        assert_eq!(ks.get(format!("during-{step}"))?, Some(b"x".to_vec()));
    }
    assert_eq!(ks.get("k00042")?, Some(vec![1u8; 64]));
    Ok(())
}
