//! Model test: random operation sequences (put, put with TTL, delete, batch, get, range, clock
//! advance, default-TTL change, expiry pass, compaction, reopen) against a plain in-memory
//! model that implements `docs/contract.md` §2 by itself (flag-based expiry, re-checked at every
//! event), so it shares no code with `ttl.rs`.

mod common;

#[path = "common/model.rs"]
mod model;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{clock, opts};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Keyspace, Store, Ttl, WriteBatch};
use model::Model;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8, Option<Ttl>),
    Delete(u8),
    Batch(Vec<(u8, Option<u8>)>),
    Advance(u64),
    SetDefault(DefaultTtl),
    Maintain,
    Compact,
    CompactFull,
    Reopen,
}

fn ttl_strategy() -> impl Strategy<Value = Option<Ttl>> {
    prop_oneof![
        Just(None),
        Just(Some(Ttl::Never)),
        (1u32..12).prop_map(|n| Some(Ttl::Seconds(n))),
    ]
}

fn default_strategy() -> impl Strategy<Value = DefaultTtl> {
    prop_oneof![
        Just(DefaultTtl::Off),
        Just(DefaultTtl::NeverExpire),
        (1u32..12).prop_map(DefaultTtl::Seconds),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8, any::<u8>(), ttl_strategy()).prop_map(|(k, v, t)| Op::Put(k, v, t)),
        2 => (0u8..8).prop_map(Op::Delete),
        1 => proptest::collection::vec((0u8..8, proptest::option::of(any::<u8>())), 1..5).prop_map(Op::Batch),
        3 => (0u64..8).prop_map(Op::Advance),
        1 => default_strategy().prop_map(Op::SetDefault),
        1 => Just(Op::Maintain),
        1 => Just(Op::Compact),
        1 => Just(Op::CompactFull),
        1 => Just(Op::Reopen),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

fn value(v: u8) -> Vec<u8> {
    let mut out = vec![v; 40 + usize::from(v % 64)];
    out.push(b'!');
    out
}

/// Checks every point read and the count; and, if `walk`, every scan. A scan orders a hashed
/// key directory (it stays so until the store reopens), so scans come every few operations
/// only and most checks run against whichever layout the writes left.
fn check(ks: &Keyspace, model: &Model, walk: bool) -> ebbdb::Result<()> {
    let want = model.live();
    assert_eq!(ks.len()?, want.len(), "len");
    for k in 0..8u8 {
        assert_eq!(ks.get(key(k))?, want.get(&key(k)).cloned(), "get {k}");
        // The zero-copy read sees the same value (from the mapping or the unflushed tail).
        assert_eq!(
            ks.get_with(key(k), <[u8]>::to_vec)?,
            want.get(&key(k)).cloned(),
            "get_with {k}"
        );
    }
    if !walk {
        return Ok(());
    }
    let got: BTreeMap<Vec<u8>, Vec<u8>> = ks.iter().collect::<ebbdb::Result<_>>()?;
    assert_eq!(got, want, "scan at now={}", model.now);
    // The zero-copy scan sees the same pairs, in the same order.
    let mut lent = Vec::new();
    let mut it = ks.iter();
    while let Some(pair) = it.next_with(|k, v| (k.to_vec(), v.to_vec())) {
        lent.push(pair?);
    }
    let want_pairs: Vec<(Vec<u8>, Vec<u8>)> = want.clone().into_iter().collect();
    assert_eq!(lent, want_pairs, "next_with scan at now={}", model.now);
    let range: Vec<Vec<u8>> = ks
        .range(key(2)..key(5))
        .map(|r| r.map(|(k, _)| k))
        .collect::<ebbdb::Result<_>>()?;
    let want_range: Vec<Vec<u8>> = want.range(key(2)..key(5)).map(|(k, _)| k.clone()).collect();
    assert_eq!(range, want_range, "range");
    Ok(())
}

/// Runs `ops` against the engine and the model; every open splits the key directory into
/// shards of about `per_shard` records once it holds two shards' worth, and writes a hint for
/// every sealed segment if `hint_all` (by default segments of records as small as these go
/// without one and are scanned at open). Every other reopen, and every other scan, makes the
/// key directory hashed again (open and scans order it), so the hashed layout also serves
/// recovered state, merges and expiries as much as the ordered one. Returns
/// the most shards a reopen gave the key directory, and how many checks found it hashed.
fn run(ops: &[Op], per_shard: usize, hint_all: bool) -> ebbdb::Result<(usize, usize)> {
    let dir = tempfile::tempdir()?;
    let c: ManualClock = clock();
    let open = || {
        Store::open_with(
            dir.path(),
            opts(&c)
                .open_shard_records(per_shard)
                .hint_every_segment(hint_all),
        )
    };
    let mut store = open()?;
    let mut ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    let mut shards = 0;
    let mut model = Model {
        now: c.now_secs(),
        ..Model::default()
    };
    let mut hashed = 0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Put(k, v, ttl) => {
                match ttl {
                    Some(t) => ks.put_with_ttl(key(*k), value(*v), *t)?,
                    None => ks.put(key(*k), value(*v))?,
                }
                model.put(key(*k), value(*v), *ttl);
            }
            Op::Delete(k) => {
                let existed = ks.delete(key(*k))?;
                assert_eq!(existed, model.delete(&key(*k)), "delete {k}");
            }
            Op::Batch(writes) => {
                let mut b = WriteBatch::new();
                for (k, v) in writes {
                    match v {
                        Some(v) => {
                            b.put(&ks, key(*k), value(*v));
                        }
                        None => {
                            b.delete(&ks, key(*k));
                        }
                    }
                }
                store.write_batch(b)?;
                for (k, v) in writes {
                    match v {
                        Some(v) => model.put(key(*k), value(*v), None),
                        None => {
                            model.delete(&key(*k));
                        }
                    }
                }
            }
            Op::Advance(s) => {
                c.advance(Duration::from_secs(*s));
                model.advance(*s);
            }
            Op::SetDefault(d) => {
                ks.set_default_ttl(*d)?;
                model.set_default(*d);
            }
            Op::Maintain => {
                store.maintain()?;
            }
            Op::Compact => {
                store.compact()?;
            }
            Op::CompactFull => {
                store.compact_full()?;
            }
            Op::Reopen => {
                drop(ks);
                drop(store);
                store = open()?;
                ks = store.keyspace("ks")?;
                shards = shards.max(store.key_directory_shards("ks")?);
                assert_eq!(ks.default_ttl(), model.default);
                // Open builds a hashed map; every other time a walk orders it at once, so
                // that both layouts serve what an open recovered.
                if i % 2 == 0 {
                    if let Some(first) = ks.iter().next() {
                        first?;
                    }
                }
            }
        }
        hashed += usize::from(store.key_directory_hashed("ks")?);
        let walk = i % 8 == 7 || i + 1 == ops.len();
        check(&ks, &model, walk)?;
        if walk && i % 16 == 7 {
            // The walk ordered it; every other time, back to hashed for the next eight: one
            // insert at a time, or built in bulk off the lock as the worker does once walks
            // stop.
            if i % 32 == 7 {
                store.hash_key_directory("ks")?;
            } else {
                assert!(store.rehash_key_directory("ks")?);
            }
        }
        // len() and stats() come from the census; it must agree with the key directory and
        // with the model after every operation.
        if let Err(e) = store.check_census() {
            panic!("after {op:?}: {e}");
        }
        // A merge copies the unexpired puts of a segment that counts nothing replaced without
        // asking the key directory; that count must be right after every operation.
        if let Err(e) = store.check_clean_segments() {
            panic!("after {op:?}: {e}");
        }
        assert_eq!(
            store.stats().live_items,
            model.live().len() as u64,
            "stats().live_items"
        );
    }
    Ok((shards, hashed))
}

trait NowSecs {
    fn now_secs(&self) -> u64;
}

impl NowSecs for ManualClock {
    fn now_secs(&self) -> u64 {
        use ebbdb::clock::Clock;
        self.now_unix_millis() / 1000
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op_strategy(), 1..60)) {
        // Each case with every hint and with the default ones (none for these small records).
        for hint_all in [true, false] {
            run(&ops, 16_384, hint_all).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }

    // The same with a few records per key-directory shard: every reopen takes a large
    // store's sharded open (maps built side by side, timers filed in ranges). A test of its
    // own, so the seeds saved for the one above still replay the cases they were saved for.
    #[test]
    fn engine_matches_model_with_sharded_opens(
        ops in proptest::collection::vec(op_strategy(), 1..60),
        per_shard in 1usize..4,
    ) {
        for hint_all in [true, false] {
            run(&ops, per_shard, hint_all).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
}

/// A long fixed sequence exercising rotation, merges with markers, and reopen together, with
/// the default shard size and with two records per shard, each with every hint and without.
#[test]
fn long_fixed_sequence() -> ebbdb::Result<()> {
    let mut ops = Vec::new();
    for round in 0u8..30 {
        for k in 0u8..8 {
            let ttl = match (round + k) % 4 {
                0 => None,
                1 => Some(Ttl::Never),
                _ => Some(Ttl::Seconds(u32::from(1 + (k % 5)))),
            };
            ops.push(Op::Put(k, round.wrapping_mul(7).wrapping_add(k), ttl));
        }
        ops.push(Op::Delete(round % 8));
        ops.push(Op::Advance(u64::from(round % 4)));
        if round % 5 == 0 {
            ops.push(Op::SetDefault(DefaultTtl::Seconds(3)));
        }
        if round % 7 == 0 {
            ops.push(Op::SetDefault(DefaultTtl::Off));
        }
        ops.push(if round % 3 == 0 {
            Op::Compact
        } else {
            Op::Maintain
        });
        if round % 6 == 5 {
            ops.push(Op::Reopen);
        }
    }
    for hint_all in [true, false] {
        let (shards, hashed) = run(&ops, 16_384, hint_all)?;
        assert_eq!(shards, 1, "a store this small opens in one shard");
        let (shards, hashed_too) = run(&ops, 2, hint_all)?;
        assert!(shards > 1, "two records per shard split the key directory");
        // Both layouts answer a good share of the checks.
        for h in [hashed, hashed_too] {
            assert!(
                h > ops.len() / 4 && h < ops.len() * 3 / 4,
                "{h} of {} checks on a hashed key directory",
                ops.len()
            );
        }
    }
    Ok(())
}
