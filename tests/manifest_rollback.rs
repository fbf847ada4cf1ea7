//! Opening deletes only files it can prove are its own unpublished leftovers. An older
//! `MANIFEST` put back, or a stray file named like a segment, is refused with an error naming
//! the file (Strict) or left alone (Salvage); nothing is deleted. Issue 9, finding 17.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{clock, opts};
use ebbdb::{DefaultTtl, Error, RecoveryMode, Store};

/// Segment and hint files that hold data. (A segment of only a header holds no record: opening
/// may delete it whoever wrote it, as it does for a rotation interrupted before its manifest.)
fn listing(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.metadata().is_ok_and(|m| m.len() > 32))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg") || n.ends_with(".hint"))
        .collect())
}

#[test]
fn older_manifest_put_back_deletes_nothing() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let old_manifest;
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        for i in 0..60u32 {
            ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
        }
        store.sync()?;
        old_manifest = std::fs::read(dir.path().join("MANIFEST"))?;
        for i in 60..200u32 {
            ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
        }
        store.compact_full()?;
    }
    std::fs::write(dir.path().join("MANIFEST"), &old_manifest)?;
    let before = listing(dir.path())?;
    match Store::open_with(dir.path(), opts(&c)) {
        Err(Error::Corruption { file, .. }) => {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            assert!(
                name.is_some_and(|n| n.ends_with(".seg")),
                "the error names a segment file: {}",
                file.display()
            );
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(s) => panic!(
            "opened with an old manifest: {} keys",
            s.keyspace("ks").and_then(|k| k.len()).unwrap_or(0)
        ),
    }
    assert_eq!(listing(dir.path())?, before, "files were deleted");
    // Salvage opens what the old manifest lists and leaves the other files alone.
    if let Ok(store) = Store::open_with(dir.path(), opts(&c).recovery(RecoveryMode::Salvage)) {
        let st = store.stats();
        assert!(st.unlisted_files > 0 || st.damaged_segments > 0, "{st:?}");
        drop(store);
    }
    assert!(
        listing(dir.path())?.is_superset(&before),
        "salvage deleted files"
    );
    Ok(())
}

#[test]
fn stray_file_named_like_a_segment_is_not_deleted() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let other = tempfile::tempdir()?;
    let c = clock();
    for d in [dir.path(), other.path()] {
        let store = Store::open_with(d, opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        for i in 0..10u32 {
            ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
        }
    }
    let stray = dir.path().join("0000000777.seg");
    std::fs::copy(other.path().join("0000000001.seg"), &stray)?;
    match Store::open_with(dir.path(), opts(&c)) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, stray),
        Err(e) => panic!("expected corruption naming the stray file, got {e}"),
        Ok(_) => panic!("opened past a stray segment file"),
    }
    assert!(stray.exists(), "the stray file was deleted");
    let store = Store::open_with(dir.path(), opts(&c).recovery(RecoveryMode::Salvage))?;
    assert_eq!(store.keyspace("ks")?.len()?, 10);
    assert_eq!(store.stats().unlisted_files, 1);
    drop(store);
    assert!(stray.exists(), "salvage deleted the stray file");
    Ok(())
}
