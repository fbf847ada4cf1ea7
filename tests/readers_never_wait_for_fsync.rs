//! Readers never wait for an fsync.
//!
//! The log mutex is held across fsyncs (rotation, catalogue changes, a merge's publish). A read
//! of a record still in the write buffer must not need that mutex. With every fsync made 3 s
//! slow, a catalogue change holds the log mutex for seconds; meanwhile reads, scans and counts
//! of freshly written (unflushed) keys must answer at once. The bound is generous (a second) so
//! a loaded machine does not fail it; before the fix each read waited out the whole fsync.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use ebbdb::clock::ManualClock;
use ebbdb::{faults, DefaultTtl, Options, Store, SyncPolicy};

const STALL: Duration = Duration::from_secs(3);
const BOUND: Duration = Duration::from_secs(1);

#[test]
fn reads_of_buffered_records_do_not_wait_for_a_catalogue_fsync() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(ManualClock::at_unix_secs(1_700_000_000))
            .sync(SyncPolicy::Never),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let other = store.create_keyspace("other", DefaultTtl::Off)?;
    for i in 0..100 {
        ks.put(format!("k{i:03}"), format!("v{i}"))?;
    }
    faults::stall_syncs(dir.path(), STALL);
    let (started_tx, started_rx) = mpsc::channel();
    let changer = std::thread::spawn(move || {
        let _ = started_tx.send(());
        other.set_default_ttl(DefaultTtl::Seconds(60))
    });
    started_rx.recv().expect("changer started");
    // Give the changer time to take the log mutex and enter its slow fsync.
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    for i in 0..100 {
        assert_eq!(
            ks.get(format!("k{i:03}"))?,
            Some(format!("v{i}").into_bytes())
        );
    }
    assert_eq!(ks.iter().count(), 100);
    assert_eq!(ks.len()?, 100);
    let took = t.elapsed();
    faults::stall_syncs(dir.path(), Duration::ZERO);
    changer.join().expect("changer thread")?;
    assert!(
        took < BOUND,
        "reads of buffered records took {took:?} while a catalogue change was fsyncing"
    );
    Ok(())
}
