//! Closing a store never hangs, even while the background worker is in the middle of a job
//! that rotates the log (and so talks to the worker handle the close is shutting down).
//!
//! Real clock (the worker then ticks, reaps and compacts on its own), a writer overwriting a
//! small key set so the active segment is mostly dead and compaction keeps sealing it, and the
//! last handle dropped while that goes on. Every close must finish within a deadline.

use std::sync::mpsc;
use std::time::Duration;

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl};

const ROUNDS: usize = 40;
const DEADLINE: Duration = Duration::from_secs(20);

fn opts(sync: SyncPolicy) -> Options {
    Options::default()
        .sync(sync)
        .segment_size(32 * 1024)
        .tick_interval(Duration::from_millis(1))
        .compaction_dead_ratio(0.2)
}

fn round(dir: &std::path::Path, sync: SyncPolicy, writes: usize) -> ebbdb::Result<()> {
    let store = Store::open_with(dir, opts(sync))?;
    let ks = store.keyspace_or_create("ks", DefaultTtl::Seconds(1))?;
    for i in 0..writes {
        let key = format!("k{}", i % 16);
        ks.put_with_ttl(key.as_bytes(), [7u8; 200], Ttl::Seconds(1))?;
        if i % 64 == 0 {
            store.request_compaction();
        }
    }
    store.request_compaction();
    // `ks` and `store` are the last handles: dropping them closes the store.
    Ok(())
}

#[test]
fn close_never_waits_forever_for_a_busy_worker() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    for r in 0..ROUNDS {
        let sync = match r % 3 {
            0 => SyncPolicy::Never,
            1 => SyncPolicy::Periodic(Duration::from_millis(2)),
            _ => SyncPolicy::Always,
        };
        let writes = if matches!(sync, SyncPolicy::Always) {
            300
        } else {
            3000
        };
        let path = dir.path().to_path_buf();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(round(&path, sync, writes));
        });
        match rx.recv_timeout(DEADLINE) {
            Ok(result) => result?,
            Err(_) => panic!("round {r} ({sync:?}): opening, writing and closing took over {DEADLINE:?}: close hung"),
        }
    }
    Ok(())
}
