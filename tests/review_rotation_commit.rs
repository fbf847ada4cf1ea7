//! Review regressions for rotations committed off the write path (DESIGN.md §5 "Rotation",
//! §8 step 7).

mod common;

use std::path::Path;
use std::time::Duration;

use ebbdb::faults::{self, FaultKind, FaultPlan};
use ebbdb::{DefaultTtl, Keyspace, Options, Store, SyncPolicy};

const VALUE: [u8; 300] = [7u8; 300];

fn key(i: usize) -> String {
    format!("key-{i:05}")
}

fn opts() -> Options {
    common::manual(&common::clock())
        .sync(SyncPolicy::Never)
        .segment_size(16 * 1024)
}

fn put_range(ks: &Keyspace, from: usize, to: usize) -> ebbdb::Result<()> {
    for i in from..to {
        ks.put(key(i), VALUE)?;
    }
    Ok(())
}

fn clock_segment(dir: &Path) -> u32 {
    let b = std::fs::read(dir.join("CLOCK")).expect("CLOCK");
    u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"))
}

/// A rotation commit fails (here the manifest's rename; ENOSPC on `MANIFEST.tmp` is the same)
/// after it fsynced the new, still staged, active file. The store is poisoned and closed: the
/// close records `CLOCK`'s durable point for that staged file, which no manifest lists. Once
/// the staged file is gone, its id is handed out again, and the next crash finds a durable
/// claim for the new file of that id that it cannot meet: the store refuses to open.
#[test]
fn failed_rotation_commit_leaves_no_durable_claim_for_a_reused_id(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path();

    // Session 1: the commit of the first rotation fails at the manifest rename.
    {
        let store = Store::open_with(path, opts())?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        put_range(&ks, 0, 40)?;
        store.sync()?;
        // Slow fsyncs: the sync thread's commit fsyncs the new file after this thread
        // flushed the records below into it.
        faults::stall_syncs(path, Duration::from_millis(300));
        faults::arm(FaultPlan {
            dir: path.to_path_buf(),
            kind: FaultKind::Rename,
            nth: 1,
            sticky: true,
            partial: false,
            no_space: false,
        });
        put_range(&ks, 40, 80)?;
        assert!(store.sync().is_err(), "the commit should have failed");
        faults::disarm(path);
        faults::stall_syncs(path, Duration::ZERO);
        drop(ks);
        drop(store); // close: poisoned, records the durable point, fsyncs CLOCK
    }
    let claimed = clock_segment(path);

    // Session 2: opening deletes the staged file (crash before any manifest is stored).
    {
        let store = Store::open_with(path, opts())?;
        store.simulate_crash();
    }

    // Session 3: the next rotation creates a file with the same id, commits it, and the
    // process dies before anything rewrote CLOCK.
    {
        let store = Store::open_with(path, opts())?;
        let ks = store.keyspace("ks")?;
        put_range(&ks, 1000, 1001)?;
        let reused = path.join(format!("{claimed:010}.seg"));
        let any_new = || {
            std::fs::read_dir(path)
                .map(|d| {
                    d.flatten().any(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.ends_with(".seg") && n != "0000000001.seg"
                    })
                })
                .unwrap_or(false)
        };
        common::wait_until("the rotation's commit", any_new);
        eprintln!(
            "CLOCK names segment {claimed}; file of that id now present: {}",
            reused.exists()
        );
        store.simulate_crash();
    }

    // Session 4: must open, with every key synced in session 1.
    let store = Store::open_with(path, opts())?;
    let ks = store.keyspace("ks")?;
    for i in 0..40 {
        assert_eq!(ks.get(key(i))?.as_deref(), Some(&VALUE[..]), "{}", key(i));
    }
    Ok(())
}
