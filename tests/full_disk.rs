//! A real full disk: a 2 MiB tmpfs. Writes fail with a clear error once it is full, and
//! nothing already acknowledged is lost. Needs permission to mount (root); where that is
//! refused the test says so and checks nothing (the injected-ENOSPC cases in `faults.rs` still
//! cover the logic).

use std::process::Command;

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn writes_fail_cleanly_on_a_full_filesystem_and_acknowledged_data_survives(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "full_disk: cannot mount a tmpfs here; skipped (see faults.rs for injected ENOSPC)"
        );
        return Ok(());
    }
    let _mount = Mount(dir.path().to_path_buf());
    let db_dir = dir.path().join("db");
    let opts = || {
        Options::default()
            .sync(SyncPolicy::Always)
            .segment_size(256 * 1024)
    };
    let mut acked = Vec::new();
    let failure;
    {
        let store = Store::open_with(&db_dir, opts())?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        let mut i = 0u32;
        loop {
            let key = format!("key-{i:06}");
            match ks.put(&key, vec![b'x'; 1000]) {
                Ok(()) => acked.push(key),
                Err(e) => {
                    failure = e;
                    break;
                }
            }
            i += 1;
            assert!(i < 10_000, "a 2 MiB filesystem never filled up");
        }
        let msg = failure.to_string();
        assert!(
            msg.contains("No space left on device"),
            "unclear error on a full disk: {msg}"
        );
        // Further writes are refused, not silently dropped.
        assert!(ks.put("after", "x").is_err());
    }
    assert!(acked.len() > 500, "only {} writes fit", acked.len());
    let store = Store::open_with(&db_dir, opts())?;
    let ks = store.keyspace("ks")?;
    for key in &acked {
        assert_eq!(ks.get(key)?.map(|v| v.len()), Some(1000), "{key} lost");
    }
    eprintln!(
        "full_disk: {} acknowledged writes before ENOSPC ({failure}); all present after reopen",
        acked.len()
    );
    Ok(())
}
