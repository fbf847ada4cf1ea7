//! Damage inside a sealed segment: zeroed bytes are not "the end of the data", and a sealed
//! segment that ends before its recorded length (even exactly at a record boundary) is
//! corruption, with or without its hint. Issue 9, findings 5 and 15.

mod common;

use std::path::{Path, PathBuf};

use common::{clock, opts, segments};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Error, RecoveryMode, Store};

fn build(dir: &Path, c: &ManualClock) -> ebbdb::Result<()> {
    let store = Store::open_with(dir, opts(c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..100u32 {
        ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
    }
    // Hints for the sealed segments.
    store.compact_full()?;
    for i in 100..110u32 {
        ks.put(format!("k{i:03}"), vec![b'v'; 100])?;
    }
    store.sync()?;
    Ok(())
}

/// The first sealed segment (it has a hint) and the offsets of its records.
fn first_sealed(dir: &Path) -> ebbdb::Result<(PathBuf, Vec<usize>)> {
    let seg = segments(dir)?
        .into_iter()
        .find(|s| s.with_extension("hint").exists())
        .expect("a sealed segment with a hint");
    let bytes = std::fs::read(&seg)?;
    let mut offsets = Vec::new();
    let end = ebbdb::log::scan::scan(&bytes, |off, _, _| offsets.push(off as usize));
    assert_eq!(end.valid_len(), bytes.len());
    assert!(offsets.len() > 4);
    Ok((seg, offsets))
}

fn is_corruption_of(r: ebbdb::Result<Store>, file: &Path) -> bool {
    match r {
        Err(Error::Corruption { file: f, .. }) => f == file,
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(store) => {
            let n = store.keyspace("ks").and_then(|k| k.len()).unwrap_or(0);
            panic!("expected corruption, open succeeded with {n} keys");
        }
    }
}

#[test]
fn zeroed_record_header_in_a_sealed_segment_is_corruption() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    build(dir.path(), &c)?;
    let (seg, offsets) = first_sealed(dir.path())?;
    let at = offsets[2];
    let mut b = std::fs::read(&seg)?;
    b[at..at + ebbdb::format::record::MIN_RECORD_LEN].fill(0);
    std::fs::write(&seg, &b)?;
    let r = Store::open_with(dir.path(), opts(&c).use_hints(false));
    match r {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, seg);
            assert_eq!(offset, at as u64);
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("zeroed bytes inside a sealed segment were read as its end"),
    }
    // Salvage keeps the records after the zeroed one and counts the damage.
    let store = Store::open_with(
        dir.path(),
        opts(&c).use_hints(false).recovery(RecoveryMode::Salvage),
    )?;
    let ks = store.keyspace("ks")?;
    assert_eq!(ks.len()?, 109, "only the zeroed record is lost");
    assert!(store.stats().damaged_segments >= 1);
    Ok(())
}

#[test]
fn sealed_segment_cut_at_a_record_boundary_is_corruption() -> ebbdb::Result<()> {
    for use_hints in [true, false] {
        let dir = tempfile::tempdir()?;
        let c = clock();
        build(dir.path(), &c)?;
        let (seg, offsets) = first_sealed(dir.path())?;
        let cut = offsets[offsets.len() - 2];
        let b = std::fs::read(&seg)?;
        std::fs::write(&seg, &b[..cut])?;
        let r = Store::open_with(dir.path(), opts(&c).use_hints(use_hints));
        assert!(is_corruption_of(r, &seg), "hints {use_hints}");
        // The hint is not deleted: it still describes the segment as it was.
        assert!(seg.with_extension("hint").exists());
        let store = Store::open_with(
            dir.path(),
            opts(&c)
                .use_hints(use_hints)
                .recovery(RecoveryMode::Salvage),
        )?;
        assert_eq!(store.keyspace("ks")?.len()?, 108, "hints {use_hints}");
        assert!(store.stats().damaged_segments >= 1);
    }
    Ok(())
}
