//! Readers, writers, the reaper and merges running together: reads never fail, never see an
//! expired item, and never see a value older than one already seen for that key.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::clock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl};

#[test]
fn reads_stay_correct_while_merges_and_expiry_run() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let store = Store::open_with(
        dir.path(),
        Options::default()
            .clock(c.clone())
            .sync(SyncPolicy::Never)
            .segment_size(16 * 1024),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
    const KEYS: u64 = 64;
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::scope(|s| -> ebbdb::Result<()> {
        // Writer: values are "key:version", versions increase per key.
        let writer = s.spawn(|| -> ebbdb::Result<u64> {
            let mut version = 0u64;
            while Instant::now() < deadline {
                version += 1;
                for k in 0..KEYS {
                    ks.put(format!("k{k:02}"), format!("{version:08}"))?;
                }
                // Short-lived keys that expire as the clock moves.
                ks.put_with_ttl(format!("t{version}"), "x", Ttl::Seconds(1))?;
                c.advance(Duration::from_millis(500));
            }
            Ok(version)
        });
        let mut readers = Vec::new();
        for _ in 0..2 {
            let ks = ks.clone();
            let stop = Arc::clone(&stop);
            readers.push(s.spawn(move || -> ebbdb::Result<u64> {
                let mut seen = vec![0u64; KEYS as usize];
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    for k in 0..KEYS {
                        if let Some(v) = ks.get(format!("k{k:02}"))? {
                            let v: u64 = String::from_utf8_lossy(&v).parse().expect("whole value");
                            assert!(
                                v >= seen[k as usize],
                                "went back from {} to {v}",
                                seen[k as usize]
                            );
                            seen[k as usize] = v;
                            reads += 1;
                        }
                    }
                    for kv in ks.prefix("t") {
                        let (k, _) = kv?;
                        assert!(ks.remaining_ttl(&k)?.is_some() || ks.get(&k)?.is_none());
                    }
                }
                Ok(reads)
            }));
        }
        let maint = s.spawn(|| -> ebbdb::Result<usize> {
            let mut merges = 0;
            while Instant::now() < deadline {
                store.maintain()?;
                let r = store.compact()?;
                merges += r.segments_merged;
                if merges % 3 == 0 {
                    store.compact_full()?;
                }
            }
            Ok(merges)
        });
        let versions = writer.join().expect("writer")?;
        let merges = maint.join().expect("maintenance")?;
        stop.store(true, Ordering::Relaxed);
        let mut reads = 0;
        for r in readers {
            let n = r.join().expect("reader")?;
            assert!(n > 0);
            reads += n;
        }
        assert!(
            versions > 10 && merges > 0,
            "versions {versions}, merges {merges}"
        );
        eprintln!(
            "stress: 3 s, {} writes, {reads} checked reads from 2 threads, {merges} segments \
             merged, 0 stale or torn values",
            versions * (KEYS + 1)
        );
        Ok(())
    })?;
    // Every key holds its newest version after all that.
    let last = ks.get("k00")?.expect("k00");
    for k in 0..KEYS {
        assert_eq!(ks.get(format!("k{k:02}"))?, Some(last.clone()));
    }
    Ok(())
}
