//! A merge writes the records it keeps by deadline, and the ones that never expire last, in
//! key order: outputs then die whole in deadline order, and a compacted store reads its
//! lasting keys sequentially (DESIGN.md §7, "Output order").

mod common;

use common::{clock, opts, segments};
use ebbdb::format::record::Kind;
use ebbdb::ttl::ItemTtl;
use ebbdb::{DefaultTtl, Store, Ttl};

#[test]
fn a_full_merge_writes_by_deadline_then_lasting_keys_in_key_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = clock();
    let store = Store::open_with(dir.path(), opts(&c)).expect("open");
    let ks = store
        .create_keyspace("ks", DefaultTtl::NeverExpire)
        .expect("keyspace");
    const N: u64 = 3000;
    // Keys in a scrambled order (a multiplier coprime to N), every third with a TTL.
    let key = |i: u64| format!("k{:05}", (i * 1_237) % N);
    let ttl = |i: u64| {
        i.is_multiple_of(3)
            .then(|| 100 * (1 + u32::try_from(i % 9).unwrap_or(0)))
    };
    for round in 0..2 {
        for i in 0..N {
            let value = format!("{round}-{i}").repeat(8);
            match ttl(i) {
                Some(s) => ks.put_with_ttl(key(i), value, Ttl::Seconds(s)),
                None => ks.put(key(i), value),
            }
            .expect("put");
        }
    }
    let report = store.compact_full().expect("compact");
    assert!(report.records_copied >= N, "{report:?}");
    // Closed before the files are read: a merged-away segment is unlinked when its last
    // holder (a reader, the sync thread, the hint writer) lets go, which may be after
    // `compact_full` returns; listed then, its puts were counted as second copies.
    drop(ks);
    drop(store);

    // Every put left on disk, in file order, files in id order (outputs are numbered as they
    // are started).
    let mut seen: Vec<(u64, Vec<u8>)> = Vec::new();
    for path in segments(dir.path()).expect("segments") {
        let bytes = std::fs::read(&path).expect("read");
        ebbdb::log::scan::scan(&bytes, |_, _, rec| {
            if rec.meta.kind == Kind::Put {
                let deadline = match rec.meta.ttl {
                    ItemTtl::Seconds(s) => rec.meta.write_ms / 1000 + u64::from(s),
                    _ => u64::MAX,
                };
                seen.push((deadline, rec.key.to_vec()));
            }
        });
    }
    assert_eq!(seen.len() as u64, N, "one copy per key");
    let out_of_order = seen.windows(2).filter(|w| w[0] >= w[1]).count();
    assert_eq!(out_of_order, 0, "records not in (deadline, key) order");
    // Several deadlines and the lasting keys: the order is not trivially the key order.
    assert!(seen.first().is_some_and(|(d, _)| *d != u64::MAX));
    assert!(seen.last().is_some_and(|(d, _)| *d == u64::MAX));
    // And the store reads the same after a reopen.
    let store = Store::open_with(dir.path(), opts(&c)).expect("reopen");
    let ks = store.keyspace("ks").expect("keyspace");
    for i in 0..N {
        let want = format!("1-{i}").repeat(8);
        assert_eq!(ks.get(key(i)).expect("get"), Some(want.into_bytes()));
    }
}

#[test]
fn outputs_of_expiring_copies_stay_small_hold_nothing_lasting_and_die_whole() {
    // 1 MiB segments: outputs of copies that expire end at 128 KiB
    // (`merge::expiring_output_bytes`) and before the first record that never expires.
    let dir = tempfile::tempdir().expect("tempdir");
    let c = clock();
    let seg = 1u64 << 20;
    let cap = ebbdb::compaction::merge::expiring_output_bytes(seg);
    assert_eq!(cap, 128 << 10);
    let o = || opts(&c).segment_size(seg);
    let store = Store::open_with(dir.path(), o()).expect("open");
    let ks = store
        .create_keyspace("ks", DefaultTtl::NeverExpire)
        .expect("keyspace");
    const N: u64 = 20_000;
    let key = |i: u64| format!("k{:06}", (i * 7_919) % N);
    // Every tenth key never expires; the others expire over 100..=500 s, within the horizon
    // of the small outputs (`merge::SPLIT_HORIZON_SECS`).
    let ttl = |i: u64| (!i.is_multiple_of(10)).then(|| 100 + u32::try_from(i % 401).unwrap_or(0));
    for i in 0..N {
        match ttl(i) {
            Some(s) => ks.put_with_ttl(key(i), [7u8; 100], Ttl::Seconds(s)),
            None => ks.put(key(i), [9u8; 100]),
        }
        .expect("put");
    }
    let report = store.compact_full().expect("compact");
    assert!(report.segments_written > 8, "{report:?}");
    drop(ks);
    drop(store);

    let mut expiring_files = 0;
    for path in segments(dir.path()).expect("segments") {
        let bytes = std::fs::read(&path).expect("read");
        let (mut expiring, mut lasting) = (0, 0);
        ebbdb::log::scan::scan(&bytes, |_, _, rec| match rec.meta.ttl {
            ItemTtl::Seconds(_) => expiring += 1,
            _ => lasting += 1,
        });
        if expiring > 0 {
            expiring_files += 1;
            assert_eq!(
                lasting, 0,
                "{path:?} mixes lasting records with expiring ones"
            );
            assert!(bytes.len() as u64 <= cap, "{path:?}: {} bytes", bytes.len());
        }
    }
    assert!(expiring_files > 8, "{expiring_files}");

    // Half the deadlines pass: the outputs holding them are dropped whole, unread.
    c.advance(std::time::Duration::from_secs(300));
    let store = Store::open_with(dir.path(), o()).expect("reopen");
    let report = store.compact().expect("compact");
    assert!(
        report.segments_dropped * 3 >= expiring_files,
        "{report:?} of {expiring_files} expiring outputs"
    );
    // At most the output holding the 300th second is merged rather than dropped.
    assert!(report.records_copied <= cap / 100, "{report:?}");
    let ks = store.keyspace("ks").expect("keyspace");
    for i in 0..N {
        let want = match ttl(i) {
            Some(s) if u64::from(s) > 300 => Some(vec![7u8; 100]),
            Some(_) => None,
            None => Some(vec![9u8; 100]),
        };
        assert_eq!(ks.get(key(i)).expect("get"), want, "key {i}");
    }
}
