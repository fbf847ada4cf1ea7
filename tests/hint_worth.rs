//! A sealed segment whose records lie in key order gets a hint file only when the hint would
//! take at most an eighth of it (DESIGN.md §2.3): records of 16-byte keys and 100-byte values
//! go without one (the hint would repeat a quarter of the segment) and are scanned at open;
//! records of a few hundred bytes or more get one. A segment out of key order (random keys in
//! write order, a merge's output sorted by deadline) keeps its hint whatever its records'
//! size: scanning it at open would need a sort. Either way every key comes back.

mod common;

use common::{clock, hint_files, segments, T0};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

/// Default options (hints by the rule), the manual clock, 64 KiB segments.
fn opts(c: &ManualClock) -> Options {
    Options::default()
        .clock(c.clone())
        .sync(SyncPolicy::Never)
        .segment_size(64 * 1024)
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:012}").into_bytes()
}

/// Key `i` of a random-looking order (a bijection of `0..n` for the `n` used here).
fn shuffled(i: usize) -> usize {
    (i * 7_919) % 3_001
}

/// Writes `n` keys with `value_len`-byte values (`with` mixes in the value byte), merges
/// everything, closes (a close writes every hint still missing), and returns the number of
/// segments and hint files left.
fn fill(dir: &std::path::Path, c: &ManualClock, n: usize, value_len: usize) -> (usize, usize) {
    let store = Store::open_with(dir, opts(c)).expect("open");
    let ks = store
        .create_keyspace("ks", DefaultTtl::Off)
        .expect("keyspace");
    for i in 0..n {
        ks.put(key(i), vec![(i % 251) as u8; value_len])
            .expect("put");
    }
    store.compact_full().expect("compact");
    drop(ks);
    drop(store);
    (segments(dir).expect("segments").len(), hint_files(dir))
}

fn check(dir: &std::path::Path, c: &ManualClock, n: usize, value_len: usize) {
    let store = Store::open_with(dir, opts(c)).expect("reopen");
    let ks = store.keyspace("ks").expect("keyspace");
    assert_eq!(ks.len().expect("len"), n);
    for i in 0..n {
        assert_eq!(
            ks.get(key(i)).expect("get"),
            Some(vec![(i % 251) as u8; value_len]),
            "key {i}"
        );
    }
}

#[test]
fn segments_of_small_records_go_without_a_hint_and_still_open_whole() {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let (segs, hints) = fill(dir.path(), &c, 3_000, 100);
    assert!(segs > 3, "several sealed segments: {segs}");
    assert_eq!(hints, 0, "a hint would be a quarter of each segment");
    check(dir.path(), &c, 3_000, 100);
    // The reopen's worker and close do not write them either.
    assert_eq!(hint_files(dir.path()), 0);
}

#[test]
fn segments_of_large_records_get_their_hint() {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let (segs, hints) = fill(dir.path(), &c, 600, 1_000);
    assert!(segs > 3, "several sealed segments: {segs}");
    // Every sealed segment (all but the active one) has its hint.
    assert_eq!(hints, segs - 1, "{segs} segments");
    check(dir.path(), &c, 600, 1_000);
}

#[test]
fn the_rule_is_per_segment_around_an_eighth() {
    // A 16-byte key counts a 32-byte hint entry: 256-byte records are at the eighth. Records
    // well under it (150-byte values) get none; well over it (400-byte values), one each.
    for (value_len, hinted) in [(150, false), (400, true)] {
        let dir = tempfile::tempdir().expect("dir");
        let c = ManualClock::at_unix_secs(T0);
        let (segs, hints) = fill(dir.path(), &c, 1_500, value_len);
        assert!(segs > 2, "{value_len}: {segs} segments");
        let want = if hinted { segs - 1 } else { 0 };
        assert_eq!(hints, want, "{value_len}-byte values, {segs} segments");
        check(dir.path(), &c, 1_500, value_len);
    }
}

#[test]
fn hints_written_by_the_test_hook_are_still_read_and_a_store_without_them_opens() {
    // Written with every hint, reopened with the default rule: the hints stay and are used;
    // deleted, the segments are scanned.
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c).hint_every_segment(true)).expect("open");
        let ks = store
            .create_keyspace("ks", DefaultTtl::Off)
            .expect("keyspace");
        for i in 0..3_000 {
            ks.put(key(i), vec![(i % 251) as u8; 100]).expect("put");
        }
        store.compact_full().expect("compact");
    }
    let hints = hint_files(dir.path());
    assert!(hints > 3, "every merge output got one: {hints}");
    check(dir.path(), &c, 3_000, 100);
    assert_eq!(
        hint_files(dir.path()),
        hints,
        "the default rule deletes no hint"
    );
    for seg in segments(dir.path()).expect("segments") {
        let _ = std::fs::remove_file(seg.with_extension("hint"));
    }
    check(dir.path(), &c, 3_000, 100);
}

#[test]
fn small_records_out_of_key_order_keep_their_hint() {
    // Random key order in every sealed segment: no merge (nothing is dead), closed.
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c)).expect("open");
        let ks = store
            .create_keyspace("ks", DefaultTtl::Off)
            .expect("keyspace");
        for i in 0..3_001 {
            let k = shuffled(i);
            ks.put(key(k), vec![(k % 251) as u8; 100]).expect("put");
        }
    }
    let segs = segments(dir.path()).expect("segments").len();
    assert!(segs > 3, "several sealed segments: {segs}");
    assert_eq!(hint_files(dir.path()), segs - 1, "every sealed segment");
    check(dir.path(), &c, 3_001, 100);
}

#[test]
fn a_merge_under_ttls_writes_in_deadline_order_and_keeps_the_hints() {
    // Keys in key order, TTLs in another order, each put followed by an overwrite of one
    // other key (so that most of every segment is dead and merged): the merge's outputs are
    // sorted by deadline, so out of key order, and get their hints.
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let n = 3_000;
    {
        let store = Store::open_with(dir.path(), opts(&c)).expect("open");
        let ks = store
            .create_keyspace("ks", DefaultTtl::NeverExpire)
            .expect("keyspace");
        for i in 0..n {
            let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x ^= x >> 29;
            let ttl = ebbdb::Ttl::Seconds(3_600 + (x % 100_000) as u32);
            ks.put_with_ttl(key(i), vec![(i % 251) as u8; 100], ttl)
                .expect("put");
            ks.put(b"overwritten", [0; 300]).expect("put");
        }
        ks.delete(b"overwritten").expect("delete");
        store.compact_full().expect("compact");
    }
    let segs = segments(dir.path()).expect("segments").len();
    assert!(segs > 3, "several segments: {segs}");
    assert_eq!(hint_files(dir.path()), segs - 1, "every merge output");
    check(dir.path(), &c, n, 100);
}

#[test]
fn a_merge_output_left_without_a_hint_is_not_taken_up_again_after_a_reopen() {
    // One merge output: 3,000 keys of keyspace "a" in key order, and in keyspace "b" a key
    // with a TTL (copied first: outputs are sorted by deadline) before a smaller one without:
    // one break of key order in 3,002 records. The merge leaves it without a hint; every
    // open must judge the order the same way and not hand it to the worker again (which
    // would scan it once more per session, and a close would charge it to its budget).
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let n = 3_000;
    {
        let store = Store::open_with(dir.path(), opts(&c).segment_size(1 << 20)).expect("open");
        let a = store
            .create_keyspace("a", DefaultTtl::Off)
            .expect("keyspace");
        let b = store
            .create_keyspace("b", DefaultTtl::NeverExpire)
            .expect("keyspace");
        b.put_with_ttl(b"b9", b"later", ebbdb::Ttl::Seconds(3_600))
            .expect("put");
        b.put(b"b0", b"kept").expect("put");
        for i in 0..n {
            a.put(key(i), vec![(i % 251) as u8; 100]).expect("put");
            a.put(b"overwritten", [0; 300]).expect("put");
        }
        a.delete(b"overwritten").expect("delete");
        let report = store.compact_full().expect("compact");
        assert_eq!(report.segments_written, 1, "{report:?}");
    }
    assert_eq!(hint_files(dir.path()), 0, "small records in key order");
    for round in 0..3 {
        let store = Store::open_with(dir.path(), opts(&c)).expect("reopen");
        assert_eq!(
            store.stats().hints_deferred,
            0,
            "round {round}: the output is not handed to the worker"
        );
        let a = store.keyspace("a").expect("keyspace");
        assert_eq!(a.len().expect("len"), n);
        let b = store.keyspace("b").expect("keyspace");
        assert_eq!(b.get(b"b0").expect("get").as_deref(), Some(&b"kept"[..]));
        assert_eq!(b.get(b"b9").expect("get").as_deref(), Some(&b"later"[..]));
    }
    assert_eq!(hint_files(dir.path()), 0);
}

#[test]
fn a_clean_close_seals_a_large_active_segment_so_that_it_gets_its_hint() {
    // 170,000 records of about 136 bytes in random key order: 23 MiB, all in the active
    // segment (64 MiB by default). The close seals it and writes its hint; the next session
    // appends to a new active segment, and its close, with little written, seals nothing.
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || Options::default().clock(c.clone()).sync(SyncPolicy::Never);
    let n = 170_000;
    let k = |i: usize| {
        let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 31;
        let mut key = x.to_be_bytes().to_vec();
        key.extend_from_slice(&(i as u64).to_be_bytes());
        key
    };
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store
            .create_keyspace("ks", DefaultTtl::Off)
            .expect("keyspace");
        for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
            let mut b = ebbdb::WriteBatch::new();
            for &i in chunk {
                b.put(&ks, k(i), [(i % 251) as u8; 100]);
            }
            store.write_batch(b).expect("batch");
        }
        assert_eq!(
            segments(dir.path()).expect("segments").len(),
            1,
            "all active"
        );
    }
    assert_eq!(
        segments(dir.path()).expect("segments").len(),
        2,
        "sealed at close"
    );
    assert_eq!(hint_files(dir.path()), 1, "and hinted");
    {
        let store = Store::open_with(dir.path(), o()).expect("reopen");
        let ks = store.keyspace("ks").expect("keyspace");
        assert_eq!(ks.len().expect("len"), n);
        for i in (0..n).step_by(97) {
            assert_eq!(
                ks.get(k(i)).expect("get"),
                Some(vec![(i % 251) as u8; 100]),
                "key {i}"
            );
        }
        ks.put(b"one more", b"small").expect("put");
    }
    assert_eq!(
        segments(dir.path()).expect("segments").len(),
        2,
        "a small active segment stays active"
    );
    let store = Store::open_with(dir.path(), o()).expect("reopen");
    let ks = store.keyspace("ks").expect("keyspace");
    assert_eq!(ks.len().expect("len"), n + 1);
}

#[test]
fn sessions_that_each_seal_a_small_segment_do_not_pile_up_files() {
    // Every session adds 5 KiB of new keys and closes, which seals its active segment (the
    // test hook lowers the close's threshold to 4 KiB): one small segment per session, none
    // with a dead byte. Eight of them, half a segment (32 KiB) in all, are merged together.
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || opts(&c).close_seal_bytes(4 * 1024);
    let sessions = 40;
    let per = 40;
    let mut most = 0;
    for s in 0..sessions {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store
            .keyspace_or_create("ks", DefaultTtl::Off)
            .expect("keyspace");
        for i in 0..per {
            ks.put(key(s * per + i), [7u8; 100]).expect("put");
        }
        store.compact().expect("compact");
        drop(ks);
        drop(store);
        most = most.max(segments(dir.path()).expect("segments").len());
    }
    // Up to seven small ones waiting, the merged ones (about 43 KiB each), the active one.
    assert!(
        most <= 16,
        "at most {most} segments over {sessions} sessions"
    );
    let store = Store::open_with(dir.path(), o()).expect("open");
    let ks = store.keyspace("ks").expect("keyspace");
    assert_eq!(ks.len().expect("len"), sessions * per);
    for i in 0..sessions * per {
        assert_eq!(
            ks.get(key(i)).expect("get"),
            Some(vec![7u8; 100]),
            "key {i}"
        );
    }
}

#[test]
fn a_close_spends_its_hint_budget_only_on_segments_it_scans() {
    // Ten sealed segments of small records in key order (no hint; open knows their order),
    // then a session that writes random keys and closes: the close seals that active segment
    // and must write its hint. The close's budget (100 KiB here, a test hook) is smaller than
    // the ordered segments, which it passes by without scanning and must not charge.
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || {
        opts(&c)
            .close_seal_bytes(8 * 1024)
            .close_hint_bytes(100 * 1024)
    };
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store
            .create_keyspace("ks", DefaultTtl::Off)
            .expect("keyspace");
        for i in 0..5_000 {
            ks.put(key(i), [1u8; 100]).expect("put");
        }
    }
    let before = segments(dir.path()).expect("segments").len();
    assert!(before > 10, "{before} segments");
    assert_eq!(hint_files(dir.path()), 0, "small records in key order");
    {
        let store = Store::open_with(dir.path(), o()).expect("reopen");
        let ks = store.keyspace("ks").expect("keyspace");
        for i in 0..100 {
            ks.put(key(5_000 + shuffled(i)), [2u8; 100]).expect("put");
        }
    }
    assert_eq!(
        segments(dir.path()).expect("segments").len(),
        before + 1,
        "the close sealed the active segment"
    );
    assert_eq!(
        hint_files(dir.path()),
        1,
        "and wrote its hint within the budget"
    );
    let store = Store::open_with(dir.path(), o()).expect("reopen");
    let ks = store.keyspace("ks").expect("keyspace");
    assert_eq!(ks.len().expect("len"), 5_100);
    assert_eq!(ks.get(key(4_999)).expect("get"), Some(vec![1u8; 100]));
    assert_eq!(
        ks.get(key(5_000 + shuffled(7))).expect("get"),
        Some(vec![2u8; 100])
    );
}

/// A store of keys `0..n` (shuffled) with 100-byte values, every record in sealed segments
/// merged in key order (`compact_full`), the active segment empty.
fn compacted(
    dir: &std::path::Path,
    c: &ManualClock,
    n: usize,
) -> ebbdb::Result<(Store, ebbdb::Keyspace)> {
    let store = Store::open_with(dir, opts(c))?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    for i in 0..n {
        ks.put(key(shuffled(i)), [1u8; 100])?;
    }
    store.compact_full()?;
    Ok((store, ks))
}

/// Runs `compact()` on `store`, closes it (a close writes every hint the rule wants and is
/// still missing), and checks that the merge kept markers and that none of its outputs got a
/// hint (`why` says what a hint would mean). Returns the merge's report.
fn merge_alone_without_hints(
    dir: &std::path::Path,
    store: Store,
    ks: ebbdb::Keyspace,
    why: &str,
) -> ebbdb::Result<ebbdb::CompactionReport> {
    let before = segments(dir)?;
    let report = store.compact()?;
    assert!(
        report.markers_written > 0,
        "the merge keeps markers: {report:?}"
    );
    drop(ks);
    drop(store);
    let outputs: Vec<_> = segments(dir)?
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(!outputs.is_empty(), "the merge wrote an output");
    for seg in &outputs {
        assert!(
            !seg.with_extension("hint").exists(),
            "{} got a hint: {why}",
            seg.display()
        );
    }
    Ok(report)
}

/// A merge that leaves older versions outside it keeps the deletes it drops as
/// no-resurrection markers, written with the lasting records in key order: the output stays
/// in key order and, its records being small, goes without a hint. Written as they were
/// decided (input order: random keys), the markers broke that order and the output got a hint
/// a quarter its size (the peers' space benchmark: 1.35 instead of 1.27 times the live bytes
/// after 10 idle seconds).
#[test]
fn markers_keep_a_merge_output_in_key_order() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let n = 3_000;
    let (store, ks) = compacted(dir.path(), &c, n)?;
    // Deletes of one key in ten, in random order: the active segment holds their tombstones
    // alone, all dead, while the store as a whole is a tenth dead (under the pressure share),
    // so the next merge takes that segment alone and keeps each delete as a marker.
    for i in (0..n).filter(|i| i % 10 == 0) {
        ks.delete(key(shuffled(i)))?;
    }
    merge_alone_without_hints(dir.path(), store, ks, "its markers are out of key order")?;
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    for i in 0..n {
        let want = (i % 10 != 0).then(|| vec![1u8; 100]);
        assert_eq!(ks.get(key(shuffled(i)))?, want, "key {i}");
    }
    Ok(())
}

/// The same with a marker and a copy of one key in the merge (a key deleted, then written
/// again): the two are written newest first, the order open and the hint count as key order,
/// so the output still goes without a hint. Found by a review: with such ties in arbitrary
/// order the outputs had 36-73 breaks in 700-800 records and each got a hint.
#[test]
fn a_marker_and_a_copy_of_one_key_keep_key_order() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let n = 3_000;
    let (store, ks) = compacted(dir.path(), &c, n)?;
    // One key in ten deleted and written again with a one-byte value, one in ten deleted:
    // the active segment ends two thirds dead and is merged alone, every delete kept as a
    // marker (the compacted segments hold the older versions), a fifth dead themselves.
    for i in (0..n).filter(|i| i % 10 == 0 || i % 10 == 5) {
        ks.delete(key(shuffled(i)))?;
        if i % 10 == 0 {
            ks.put(key(shuffled(i)), [2u8])?;
        }
    }
    let report = merge_alone_without_hints(
        dir.path(),
        store,
        ks,
        "a key's marker and copy are out of order",
    )?;
    assert!(
        report.records_copied > 0,
        "copies in the merge too: {report:?}"
    );
    let store = Store::open_with(dir.path(), opts(&c))?;
    let ks = store.keyspace("ks")?;
    for i in 0..n {
        let want = match i % 10 {
            0 => Some(vec![2u8]),
            5 => None,
            _ => Some(vec![1u8; 100]),
        };
        assert_eq!(ks.get(key(shuffled(i)))?, want, "key {i}");
    }
    Ok(())
}
