//! Damage inside the active (newest) segment: only a tail past the last durable point may be
//! cut. A bad record below it, or one followed by records that still decode, is corruption:
//! `Error::Corruption` naming the file and offset (Strict), or skipped and counted with the
//! rest kept (Salvage). Issue 9, findings 5 and 14.

mod common;

use std::path::{Path, PathBuf};

use common::{clock, segments};
use ebbdb::clock::ManualClock;
use ebbdb::format::record;
use ebbdb::{DefaultTtl, Error, Options, RecoveryMode, Store, SyncPolicy};

const KEYS: u32 = 30;

fn opts(c: &ManualClock) -> Options {
    Options::default()
        .clock(c.clone())
        .sync(SyncPolicy::Always)
        .segment_size(1 << 20)
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i:03}-{}", "v".repeat(40)).into_bytes()
}

/// A database whose records all sit in the active segment; returns that file and the offset
/// of each record (key i at `offsets[i]`).
fn build(dir: &Path, c: &ManualClock) -> ebbdb::Result<(PathBuf, Vec<u64>)> {
    let store = Store::open_with(dir, opts(c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let mut offsets = Vec::new();
    for i in 0..KEYS {
        offsets.push(store.stats().segment_bytes);
        ks.put(format!("k{i:03}"), value(i))?;
    }
    let seg = segments(dir)?.pop().expect("one segment");
    assert_eq!(
        segments(dir)?.len(),
        1,
        "everything is in the active segment"
    );
    Ok((seg, offsets))
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) -> std::io::Result<()> {
    let mut b = std::fs::read(path)?;
    f(&mut b);
    std::fs::write(path, &b)
}

fn expect_corruption(dir: &Path, c: &ManualClock, file: &Path, offset: u64) {
    match Store::open_with(dir, opts(c)) {
        Err(Error::Corruption {
            file: f, offset: o, ..
        }) => {
            assert_eq!(f, file);
            assert_eq!(o, offset);
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(store) => {
            let ks = store.keyspace("ks").expect("keyspace");
            panic!(
                "expected corruption, but open succeeded with {} of {KEYS} keys",
                ks.len().expect("len")
            );
        }
    }
}

/// Salvage opens, skips exactly the damaged keys, keeps every other acknowledged key and
/// counts the damage.
fn expect_salvage(dir: &Path, c: &ManualClock, damaged: &[u32]) -> ebbdb::Result<()> {
    let store = Store::open_with(dir, opts(c).recovery(RecoveryMode::Salvage))?;
    let ks = store.keyspace("ks")?;
    for i in 0..KEYS {
        let got = ks.get(format!("k{i:03}"))?;
        if damaged.contains(&i) {
            assert_eq!(got, None, "k{i:03} was damaged");
        } else {
            assert_eq!(got, Some(value(i)), "k{i:03} must survive salvage");
        }
    }
    let st = store.stats();
    assert!(st.damaged_segments >= 1, "{st:?}");
    assert!(st.skipped_bytes > 0, "{st:?}");
    // The salvaged store stays usable and reopens.
    ks.put("after", "salvage")?;
    drop(ks);
    drop(store);
    let store = Store::open_with(dir, opts(c).recovery(RecoveryMode::Salvage))?;
    assert_eq!(
        store.keyspace("ks")?.get("after")?,
        Some(b"salvage".to_vec())
    );
    Ok(())
}

#[test]
fn flipped_byte_in_an_fsynced_record_is_corruption_not_a_torn_tail() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (seg, offsets) = build(dir.path(), &c)?;
    let victim = offsets[5];
    edit(&seg, |b| b[victim as usize + 45] ^= 0x01)?;
    expect_corruption(dir.path(), &c, &seg, victim);
    expect_salvage(dir.path(), &c, &[5])
}

#[test]
fn flipped_length_field_in_an_fsynced_record_is_corruption() -> ebbdb::Result<()> {
    // A length that points past the end reads as "truncated", the classic torn-tail look. The
    // header's check byte catches almost every such flip (as a bad checksum); this is the rare
    // one that keeps it valid: the header is rewritten whole with a 60 MiB value length.
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (seg, offsets) = build(dir.path(), &c)?;
    let victim = offsets[3];
    edit(&seg, |b| {
        let at = victim as usize;
        let rec = record::decode(&b[at..]).expect("record 3 decodes");
        let (meta, key) = (rec.meta, rec.key.to_vec());
        let mut long = Vec::new();
        record::encode(&mut long, &meta, &key, &vec![0; 60 << 20]);
        let header = long.len() - key.len() - (60 << 20);
        assert_eq!(
            record::decode(&long[..header + key.len() + 10]).map(|_| ()),
            Err(ebbdb::format::DecodeError::Truncated)
        );
        b[at..at + header].copy_from_slice(&long[..header]);
    })?;
    expect_corruption(dir.path(), &c, &seg, victim);
    expect_salvage(dir.path(), &c, &[3])
}

#[test]
fn zeroed_record_header_in_the_active_segment_is_corruption() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (seg, offsets) = build(dir.path(), &c)?;
    let victim = offsets[10] as usize;
    edit(&seg, |b| b[victim..victim + record::MIN_RECORD_LEN].fill(0))?;
    expect_corruption(dir.path(), &c, &seg, victim as u64);
    expect_salvage(dir.path(), &c, &[10])
}

#[test]
fn damage_in_the_last_durable_record_is_corruption() -> ebbdb::Result<()> {
    // Nothing follows the last record, so only a persisted durable point can tell a flipped
    // byte there from a torn write.
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (seg, offsets) = build(dir.path(), &c)?;
    let victim = offsets[KEYS as usize - 1];
    edit(&seg, |b| b[victim as usize + 50] ^= 0x80)?;
    expect_corruption(dir.path(), &c, &seg, victim);
    expect_salvage(dir.path(), &c, &[KEYS - 1])
}

#[test]
fn active_segment_cut_below_its_durable_point_is_corruption() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (seg, offsets) = build(dir.path(), &c)?;
    let cut = offsets[20];
    edit(&seg, |b| b.truncate(cut as usize))?;
    expect_corruption(dir.path(), &c, &seg, cut);
    let lost: Vec<u32> = (20..KEYS).collect();
    expect_salvage(dir.path(), &c, &lost)
}

#[test]
fn a_region_too_costly_to_search_is_corruption_not_a_torn_tail() -> ebbdb::Result<()> {
    // Past the last record, one valid-looking header repeated over 2 MiB, each copy claiming a
    // 256 KiB body: searching for the next record from every offset would hash tens of
    // gigabytes. The search stops at its budget; what it did not search is not taken for a
    // torn tail (records may follow it), so Strict refuses and Salvage cuts it off.
    let dir = tempfile::tempdir()?;
    let c = clock();
    let (seg, offsets) = build(dir.path(), &c)?;
    let mut end = 0;
    edit(&seg, |b| {
        let last = offsets[KEYS as usize - 1] as usize;
        let rec = record::decode(&b[last..]).expect("the last record decodes");
        end = last + rec.encoded_len();
        let mut long = Vec::new();
        let claimed = 256 << 10;
        record::encode(&mut long, &rec.meta, b"", &vec![0xA5; claimed]);
        long.truncate(long.len() - claimed);
        b.truncate(end);
        while b.len() < end + (2 << 20) {
            b.extend_from_slice(&long);
        }
    })?;
    match Store::open_with(dir.path(), opts(&c)) {
        Err(Error::Corruption {
            file,
            offset,
            reason,
            ..
        }) => {
            assert_eq!((file, offset), (seg.clone(), end as u64));
            assert!(reason.contains("not searched"), "{reason}");
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("expected corruption, but open succeeded"),
    }
    // `verify` names as a problem what a Strict open refuses.
    let report = ebbdb::verify(dir.path())?;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == seg && p.offset == end as u64 && p.message.contains("not searched")),
        "{report:?}"
    );
    expect_salvage(dir.path(), &c, &[])
}
