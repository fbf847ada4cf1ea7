//! Compaction never turns detected damage into silent loss: a merge that meets a damaged input
//! fails with `Error::Corruption` and leaves the input published (Strict), or leaves the
//! damaged segment alone and merges the rest (Salvage). Issue 9, findings 16 and 21.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{clock, opts, segments};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Error, RecoveryMode, Store};

type Reads = BTreeMap<String, Result<Option<Vec<u8>>, String>>;

fn build(dir: &Path, c: &ManualClock) -> ebbdb::Result<()> {
    let store = Store::open_with(dir, opts(c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..100u32 {
        ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
    }
    store.compact_full()?;
    store.sync()?;
    Ok(())
}

fn reads(store: &Store) -> ebbdb::Result<Reads> {
    let ks = store.keyspace("ks")?;
    Ok((0..100u32)
        .map(|i| {
            let k = format!("k{i:03}");
            let v = ks.get(&k).map_err(|e| e.to_string());
            (k, v)
        })
        .collect())
}

/// Zeroes 300 bytes in the middle of the first sealed segment (which has a hint, so opening
/// does not read the values and succeeds).
fn zero_middle(dir: &Path) -> ebbdb::Result<PathBuf> {
    let seg = segments(dir)?
        .into_iter()
        .find(|s| s.with_extension("hint").exists())
        .expect("a sealed segment with a hint");
    let mut b = std::fs::read(&seg)?;
    // From a record boundary, so the first zeroed byte is an all-zero record header.
    let mut offsets = Vec::new();
    ebbdb::log::scan::scan(&b, |off, _, _| offsets.push(off as usize));
    let mid = offsets[offsets.len() / 3];
    b[mid..mid + 300].fill(0);
    std::fs::write(&seg, &b)?;
    Ok(seg)
}

fn readable(r: &Reads) -> usize {
    r.values().filter(|v| matches!(v, Ok(Some(_)))).count()
}

#[test]
fn merge_meeting_zeroed_bytes_fails_and_keeps_the_input() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    build(dir.path(), &c)?;
    let seg = zero_middle(dir.path())?;
    let store = Store::open_with(dir.path(), opts(&c))?;
    let before = reads(&store)?;
    assert!(readable(&before) >= 90, "{before:?}");
    match store.compact_full() {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, seg),
        other => panic!("a merge over zeroed bytes must report corruption, got {other:?}"),
    }
    assert!(seg.exists(), "the damaged input was deleted");
    assert_eq!(
        reads(&store)?,
        before,
        "the failed merge changed what reads see"
    );
    drop(store);
    let store = Store::open_with(dir.path(), opts(&c))?;
    assert_eq!(reads(&store)?, before, "after reopen");
    Ok(())
}

#[test]
fn salvage_merge_leaves_the_damaged_segment_and_keeps_every_readable_key() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    build(dir.path(), &c)?;
    let seg = zero_middle(dir.path())?;
    let o = || opts(&c).recovery(RecoveryMode::Salvage);
    let store = Store::open_with(dir.path(), o())?;
    let before = reads(&store)?;
    store.compact_full()?;
    assert!(seg.exists(), "the damaged segment was deleted");
    assert!(store.stats().damaged_segments >= 1, "damage is counted");
    let after = reads(&store)?;
    for (k, v) in &before {
        if let Ok(Some(_)) = v {
            assert_eq!(after.get(k), Some(v), "{k} was readable before the merge");
        }
    }
    assert_eq!(
        store.keyspace("ks")?.len()?,
        100,
        "len agrees with the key set"
    );
    // Later merges keep working.
    store.compact_full()?;
    store.compact_full()?;
    drop(store);
    let store = Store::open_with(dir.path(), o())?;
    let again = reads(&store)?;
    assert!(readable(&again) >= readable(&before), "{again:?}");
    Ok(())
}

#[test]
fn salvage_skipped_segment_is_counted_and_does_not_break_compaction() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    build(dir.path(), &c)?;
    // Break a sealed segment's header: Salvage skips it.
    let seg = segments(dir.path())?
        .into_iter()
        .find(|s| s.with_extension("hint").exists())
        .expect("a sealed segment");
    let mut b = std::fs::read(&seg)?;
    b[3] ^= 0xFF;
    std::fs::write(&seg, &b)?;
    assert!(matches!(
        Store::open_with(dir.path(), opts(&c)),
        Err(Error::Corruption { .. })
    ));
    let store = Store::open_with(dir.path(), opts(&c).recovery(RecoveryMode::Salvage))?;
    let ks = store.keyspace("ks")?;
    ks.put("new", "value")?;
    store.compact_full()?;
    store.compact_full()?;
    assert_eq!(ks.get("new")?, Some(b"value".to_vec()));
    assert!(seg.exists(), "the damaged segment was deleted");
    let st = store.stats();
    assert!(st.damaged_segments >= 1, "{st:?}");
    Ok(())
}
