//! Crash recovery: cut the active segment at every byte of its last records and reopen. The
//! result must be exactly a prefix of the acknowledged writes, with batches all or nothing.
//! (The cut models a torn write, so `CLOCK`, whose durable point postdates the cut, is removed.)

mod common;

use std::collections::BTreeMap;

use common::{clock, copy_dir, segments};
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[test]
fn every_cut_of_the_tail_recovers_a_prefix_of_acknowledged_writes() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let opts = || Options::default().clock(c.clone()).sync(SyncPolicy::Always);
    // states[i] = model after the i-th acknowledged write; ends[i] = active file length then.
    let mut states: Vec<Model> = vec![Model::new()];
    let mut ends = Vec::new();
    let seg;
    {
        let store = Store::open_with(dir.path(), opts())?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        seg = segments(dir.path())?.pop().expect("one segment");
        // Logical end of the written records (the file itself is zero-filled further ahead).
        ends.push(store.stats().segment_bytes);
        let mut model = Model::new();
        for i in 0..12u32 {
            let key = format!("k{}", i % 5).into_bytes();
            if i % 4 == 3 {
                // A batch of three writes, one a delete.
                let mut b = WriteBatch::new();
                b.put(&ks, format!("b{i}a"), "x")
                    .put(&ks, format!("b{i}b"), "y");
                b.delete(&ks, &key);
                store.write_batch(b)?;
                model.insert(format!("b{i}a").into_bytes(), b"x".to_vec());
                model.insert(format!("b{i}b").into_bytes(), b"y".to_vec());
                model.remove(&key);
            } else {
                let value = format!("value-{i}").into_bytes();
                ks.put(&key, &value)?;
                model.insert(key, value);
            }
            states.push(model.clone());
            ends.push(store.stats().segment_bytes);
        }
    }
    let full = std::fs::read(&seg)?;
    let from = ends[ends.len() - 6];
    let last = *ends.last().expect("ends");
    assert!(full.len() as u64 >= last && full[last as usize..].iter().all(|&b| b == 0));
    let mut checked = 0;
    for cut in from..=last {
        let work = tempfile::tempdir()?;
        copy_dir(dir.path(), work.path())?;
        let name = seg.file_name().expect("file name");
        std::fs::write(work.path().join(name), &full[..cut as usize])?;
        // A cut models a crash during the write after `whole`: the CLOCK of that moment could
        // claim durable at most what was acknowledged before it. The CLOCK written at close
        // claims every write (a cut below that is corruption: tests/active_damage.rs), so it
        // goes, and recovery has only the log to tell a torn tail.
        std::fs::remove_file(work.path().join("CLOCK"))?;
        // The number of writes whose bytes are all below the cut.
        let whole = ends.iter().filter(|&&e| e <= cut).count() - 1;
        let store = Store::open_with(work.path(), Options::default().clock(c.clone()))?;
        let ks = store.keyspace("ks")?;
        let got: Model = ks.iter().collect::<ebbdb::Result<_>>()?;
        assert_eq!(
            got, states[whole],
            "cut at {cut}: expected the state after write {whole}"
        );
        // And the store is writable after the truncation.
        ks.put("after", "crash")?;
        checked += 1;
    }
    assert!(checked > 100, "checked {checked} cuts");
    Ok(())
}

#[test]
fn garbage_after_the_last_record_is_truncated_not_fatal() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), common::opts(&c).segment_size(1 << 20))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        ks.put("a", "1")?;
    }
    let seg = segments(dir.path())?.pop().expect("segment");
    let mut bytes = std::fs::read(&seg)?;
    // Past the records the file is zero-filled ahead; put garbage right after the records.
    let good = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(bytes.len(), |p| p + 1);
    bytes.truncate(good);
    bytes.extend_from_slice(&[0xAB; 77]);
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&seg, &bytes)?;
    let store = Store::open_with(dir.path(), common::opts(&c))?;
    assert_eq!(store.keyspace("ks")?.get("a")?, Some(b"1".to_vec()));
    assert_eq!(std::fs::metadata(&seg)?.len() as usize, good);
    Ok(())
}
