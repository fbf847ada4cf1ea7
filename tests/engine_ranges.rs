//! Issue 9, item 18: inverted or empty ranges give an empty scan, never a panic.
//!
//! Before the fix `Keyspace::range` with start > end (or `a..a` excluded at both ends) panicked
//! inside `BTreeMap::range` ("range start is greater than range end").

use std::ops::Bound;

use ebbdb::{DefaultTtl, Store};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn keys(it: ebbdb::Iter) -> ebbdb::Result<Vec<Vec<u8>>> {
    it.map(|kv| kv.map(|(k, _)| k)).collect()
}

#[test]
#[allow(clippy::reversed_empty_ranges)]
fn inverted_and_empty_ranges_are_empty() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path())?;
    let ks = store.create_keyspace("k", DefaultTtl::Off)?;
    for k in [b"a", b"b", b"c", b"d"] {
        ks.put(k, b"v")?;
    }
    let none: Vec<Vec<u8>> = Vec::new();
    assert_eq!(keys(ks.range(b"c".as_slice()..b"a".as_slice()))?, none);
    assert_eq!(keys(ks.range(b"c".as_slice()..=b"a".as_slice()))?, none);
    assert_eq!(keys(ks.range(b"b".as_slice()..b"b".as_slice()))?, none);
    assert_eq!(
        keys(ks.range::<&[u8], _>((Bound::Excluded(&b"b"[..]), Bound::Excluded(&b"b"[..]))))?,
        none
    );
    assert_eq!(
        keys(ks.range::<&[u8], _>((Bound::Excluded(&b"b"[..]), Bound::Included(&b"b"[..]))))?,
        none
    );
    assert_eq!(
        keys(ks.range::<&[u8], _>((Bound::Excluded(&b"c"[..]), Bound::Excluded(&b"a"[..]))))?,
        none
    );
    // Non-empty ranges still work, including a single key.
    assert_eq!(
        keys(ks.range(b"b".as_slice()..=b"b".as_slice()))?,
        vec![b"b".to_vec()]
    );
    assert_eq!(
        keys(ks.range(b"b".as_slice()..b"d".as_slice()))?,
        vec![b"b".to_vec(), b"c".to_vec()]
    );
    // Other range-like scans: a prefix past every key, an empty prefix.
    assert_eq!(keys(ks.prefix(b"zz"))?, none);
    assert_eq!(keys(ks.prefix(b""))?.len(), 4);
    assert_eq!(keys(ks.prefix([0xff, 0xff]))?, none);
    Ok(())
}

/// A range whose end lands exactly on a chunk boundary of the scan (256 keys), excluded.
#[test]
fn range_ending_at_a_chunk_boundary() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(
        dir.path(),
        ebbdb::Options::default().sync(ebbdb::SyncPolicy::Never),
    )?;
    let ks = store.create_keyspace("k", DefaultTtl::Off)?;
    for i in 0..600u32 {
        ks.put(i.to_be_bytes(), b"v")?;
    }
    for end in [255u32, 256, 257, 512] {
        let got = keys(ks.range(0u32.to_be_bytes()..end.to_be_bytes()))?;
        assert_eq!(got.len(), end as usize);
        let got = keys(ks.range(0u32.to_be_bytes()..=end.to_be_bytes()))?;
        assert_eq!(got.len(), end as usize + 1);
    }
    Ok(())
}
