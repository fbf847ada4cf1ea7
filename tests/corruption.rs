//! Damaged files: a bad record inside a sealed segment is `Error::Corruption` naming the file
//! and offset (or salvaged on request); a damaged hint falls back to scanning; never a wrong
//! value.

mod common;

use common::{clock, opts, segments};
use ebbdb::{DefaultTtl, Error, RecoveryMode, Store};

fn build(dir: &std::path::Path) -> ebbdb::Result<()> {
    let c = clock();
    let store = Store::open_with(dir, opts(&c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..100u32 {
        ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
    }
    store.sync()?;
    Ok(())
}

#[test]
fn flipped_byte_in_sealed_segment_is_reported_with_file_and_offset() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    build(dir.path())?;
    let segs = segments(dir.path())?;
    assert!(segs.len() >= 3);
    let victim = &segs[0];
    let mut bytes = std::fs::read(victim)?;
    bytes[32 + 60] ^= 0x10; // inside the first record's value (header, 4-byte key, 100-byte value)
    std::fs::write(victim, &bytes)?;
    // Hints would let open skip reading the values: disable them to force the scan.
    let c = clock();
    match Store::open_with(dir.path(), opts(&c).use_hints(false)) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(&file, victim);
            assert_eq!(offset, 32);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // Salvage opens and keeps the other segments' data.
    let store = Store::open_with(
        dir.path(),
        opts(&c).use_hints(false).recovery(RecoveryMode::Salvage),
    )?;
    let ks = store.keyspace("ks")?;
    assert!(ks.len()? > 50);
    assert_eq!(ks.get("k099")?, Some(vec![b'v'; 100]));
    Ok(())
}

#[test]
fn damaged_value_read_through_a_hint_is_corruption_not_a_wrong_value() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    build(dir.path())?;
    let c = clock();
    // Let the worker write hints: open, compact_full writes hints for its outputs.
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        store.compact_full()?;
    }
    let segs = segments(dir.path())?;
    let victim = segs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a merged segment");
    let mut bytes = std::fs::read(victim)?;
    let last = bytes.len() - 5;
    bytes[last] ^= 0x01; // a value byte of the last record
    std::fs::write(victim, &bytes)?;
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    let mut corrupt = 0;
    for i in 0..100u32 {
        match ks.get(format!("k{i:03}")) {
            Ok(Some(v)) => assert_eq!(v, vec![b'v'; 100]),
            Ok(None) => panic!("k{i:03} missing"),
            Err(Error::Corruption { .. }) => corrupt += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(corrupt, 1);
    Ok(())
}

#[test]
fn corrupt_hint_falls_back_to_scanning() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    build(dir.path())?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        store.compact_full()?;
    }
    let hints: Vec<_> = std::fs::read_dir(dir.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "hint"))
        .collect();
    assert!(!hints.is_empty());
    for h in &hints {
        let mut b = std::fs::read(h)?;
        let mid = b.len() / 2;
        b[mid] ^= 0xFF;
        std::fs::write(h, &b)?;
    }
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.len()?, 100);
    assert_eq!(ks.get("k050")?, Some(vec![b'v'; 100]));
    Ok(())
}

#[test]
fn garbage_manifest_is_corruption_not_a_panic() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    build(dir.path())?;
    std::fs::write(
        dir.path().join("MANIFEST"),
        b"EBBDBMAN\x01\x00\x00\x00garbage",
    )?;
    let c = clock();
    assert!(matches!(
        Store::open_with(dir.path(), opts(&c)),
        Err(Error::Corruption { .. })
    ));
    Ok(())
}
