//! Sharded opens against a model: every reopen splits the key directory into shards of one to
//! four records (`Options::open_shard_records`, a test hook), over three keyspaces whose keys
//! (one to four letters of "abc") are prefixes of each other and fall on split points. After
//! every operation the scans (`iter`, `next_with`), random `range` bounds (inverted ones too),
//! `prefix`, `get`, `len`, `stats()` and the census agree with the model, and every item the
//! model expired was reported once. Then edge cases of the sharded open: everything expired at
//! open, one far deadline among near ones (timers filed in ranges), the last representable
//! write second, the census's sorting path, and a zero-copy scan while merges retire segments.
//!
//! Seeds and steps: `EBBDB_SHARDED_SEEDS` (default 20), `EBBDB_SHARDED_STEPS` (default 300).

mod common;
#[path = "common/model.rs"]
mod model;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use common::{clock, opts};
use ebbdb::{Clock, DefaultTtl, Store, Ttl, WriteBatch};
use model::Model;

struct Rng(u64);
impl Rng {
    fn next(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
    fn key(&mut self) -> Vec<u8> {
        let len = 1 + self.next(4) as usize;
        (0..len).map(|_| b"abc"[self.next(3) as usize]).collect()
    }
    fn ttl(&mut self) -> Option<Ttl> {
        match self.next(4) {
            0 => None,
            1 => Some(Ttl::Never),
            _ => Some(Ttl::Seconds(1 + self.next(12) as u32)),
        }
    }
    fn default(&mut self) -> DefaultTtl {
        match self.next(3) {
            0 => DefaultTtl::Off,
            1 => DefaultTtl::NeverExpire,
            _ => DefaultTtl::Seconds(1 + self.next(12) as u32),
        }
    }
    fn bound(&mut self) -> Bound<Vec<u8>> {
        match self.next(3) {
            0 => Bound::Included(self.key()),
            1 => Bound::Excluded(self.key()),
            _ => Bound::Unbounded,
        }
    }
}

const NAMES: [&str; 3] = ["x", "y", "z"];

fn in_bounds(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    (match lo {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    }) && (match hi {
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
        Bound::Unbounded => true,
    })
}

fn check(store: &Store, models: &[Model], rng: &mut Rng, what: &str) {
    for (name, m) in NAMES.iter().zip(models) {
        let ks = store.keyspace(name).expect("ks");
        let want = m.live();
        let got: BTreeMap<_, _> = ks.iter().collect::<ebbdb::Result<_>>().expect("scan");
        assert_eq!(got, want, "{what}: scan of {name} at {}", m.now);
        let mut lent = Vec::new();
        let mut it = ks.iter();
        while let Some(p) = it.next_with(|k, v| (k.to_vec(), v.to_vec())) {
            lent.push(p.expect("next_with"));
        }
        assert_eq!(
            lent,
            want.clone().into_iter().collect::<Vec<_>>(),
            "{what}: next_with"
        );
        assert_eq!(ks.len().expect("len"), want.len(), "{what}: len of {name}");
        for _ in 0..20 {
            let (lo, hi) = (rng.bound(), rng.bound());
            let got: Vec<Vec<u8>> = ks
                .range::<Vec<u8>, _>((lo.clone(), hi.clone()))
                .map(|r| r.map(|(k, _)| k))
                .collect::<ebbdb::Result<_>>()
                .expect("range");
            let exp: Vec<Vec<u8>> = want
                .keys()
                .filter(|k| in_bounds(k, &lo, &hi))
                .cloned()
                .collect();
            assert_eq!(got, exp, "{what}: range {lo:?}..{hi:?} of {name}");
            let p = rng.key();
            let p = &p[..rng.next(p.len() as u64 + 1) as usize];
            let got: Vec<Vec<u8>> = ks
                .prefix(p)
                .map(|r| r.map(|(k, _)| k))
                .collect::<ebbdb::Result<_>>()
                .expect("prefix");
            let exp: Vec<Vec<u8>> = want.keys().filter(|k| k.starts_with(p)).cloned().collect();
            assert_eq!(got, exp, "{what}: prefix {p:?} of {name}");
            let k = rng.key();
            assert_eq!(
                ks.get(&k).expect("get"),
                want.get(&k).cloned(),
                "{what}: get"
            );
        }
    }
    store
        .check_census()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let live: usize = models.iter().map(|m| m.live().len()).sum();
    assert_eq!(store.stats().live_items, live as u64, "{what}: stats live");
}

fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let mut rng = Rng(seed);
    let mut per_shard = 1 + rng.next(4) as usize;
    let force: Option<usize> = std::env::var("EBBDB_SHARDED_PER_SHARD")
        .ok()
        .and_then(|s| s.parse().ok());
    let open = |per: usize| {
        let per = force.unwrap_or(per);
        Store::open_with(dir.path(), opts(&c).open_shard_records(per)).expect("open")
    };
    let mut store = open(per_shard);
    let mut models: Vec<Model> = Vec::new();
    for name in NAMES {
        let d = rng.default();
        store.create_keyspace(name, d).expect("create");
        models.push(Model::new(c.now_unix_millis() / 1000, d));
    }
    let mut max_shards = 0;
    let mut events = store.subscribe_expirations();
    let mut pending: std::collections::BTreeSet<(usize, Vec<u8>)> = Default::default();
    let mut reported: std::collections::BTreeSet<(usize, Vec<u8>)> = Default::default();
    for step in 0..steps {
        let before: Vec<std::collections::BTreeSet<Vec<u8>>> = models
            .iter()
            .map(|m| m.items.keys().cloned().collect())
            .collect();
        let mut touched: Vec<(usize, Vec<u8>)> = Vec::new();
        let i = rng.next(3) as usize;
        let ks = store.keyspace(NAMES[i]).expect("ks");
        let op = rng.next(100);
        let what;
        match op {
            0..=39 => {
                let (k, v, t) = (
                    rng.key(),
                    rng.next(1 << 30).to_le_bytes().to_vec(),
                    rng.ttl(),
                );
                match t {
                    Some(t) => ks.put_with_ttl(&k, &v, t).expect("put"),
                    None => ks.put(&k, &v).expect("put"),
                }
                touched.push((i, k.clone()));
                models[i].put(k.clone(), v, t);
                what = format!("step {step}: put {k:?} {t:?}");
            }
            40..=49 => {
                let k = rng.key();
                let existed = ks.delete(&k).expect("delete");
                assert_eq!(existed, models[i].delete(&k), "step {step}: delete {k:?}");
                touched.push((i, k.clone()));
                what = format!("step {step}: delete");
            }
            50..=54 => {
                let mut b = WriteBatch::new();
                let mut w = Vec::new();
                for _ in 0..1 + rng.next(5) {
                    let j = rng.next(3) as usize;
                    let ksj = store.keyspace(NAMES[j]).expect("ks");
                    let k = rng.key();
                    if rng.next(3) == 0 {
                        b.delete(&ksj, &k);
                        w.push((j, k, None));
                    } else {
                        let v = rng.next(1 << 30).to_le_bytes().to_vec();
                        let t = rng.ttl();
                        match t {
                            Some(t) => b.put_with_ttl(&ksj, &k, &v, t),
                            None => b.put(&ksj, &k, &v),
                        };
                        w.push((j, k, Some((v, t))));
                    }
                }
                store.write_batch(b).expect("batch");
                for (j, k, p) in w {
                    touched.push((j, k.clone()));
                    match p {
                        Some((v, t)) => models[j].put(k, v, t),
                        None => {
                            models[j].delete(&k);
                        }
                    }
                }
                what = format!("step {step}: batch");
            }
            55..=69 => {
                let s = rng.next(6);
                c.advance(Duration::from_secs(s));
                for m in &mut models {
                    m.advance(s);
                }
                what = format!("step {step}: advance {s}");
            }
            70..=74 => {
                let d = rng.default();
                ks.set_default_ttl(d).expect("default");
                models[i].set_default(d);
                what = format!("step {step}: default {d:?}");
            }
            75..=82 => {
                store.maintain().expect("maintain");
                for e in events.try_iter() {
                    let j = NAMES.iter().position(|n| *n == e.keyspace).expect("name");
                    reported.insert((j, e.key));
                }
                for p in &pending {
                    assert!(
                        reported.contains(p),
                        "seed {seed} step {step}: no expiry event for {p:?} after maintain"
                    );
                }
                pending.clear();
                reported.clear();
                what = format!("step {step}: maintain");
            }
            83..=87 => {
                store.compact().expect("compact");
                what = format!("step {step}: compact");
            }
            88..=90 => {
                store.compact_full().expect("compact");
                what = format!("step {step}: compact_full");
            }
            _ => {
                drop(ks);
                drop(store);
                per_shard = 1 + rng.next(4) as usize;
                for e in events.try_iter() {
                    let j = NAMES.iter().position(|n| *n == e.keyspace).expect("name");
                    reported.insert((j, e.key));
                }
                store = open(per_shard);
                events = store.subscribe_expirations();
                for n in NAMES {
                    max_shards = max_shards.max(store.key_directory_shards(n).expect("shards"));
                }
                what = format!("step {step}: reopen per_shard {per_shard}");
            }
        }
        for t in &touched {
            pending.remove(t);
            reported.remove(t);
        }
        for (j, m) in models.iter().enumerate() {
            for k in &before[j] {
                if !m.items.contains_key(k) && !touched.contains(&(j, k.clone())) {
                    pending.insert((j, k.clone()));
                }
            }
        }
        if std::env::var("EBBDB_SHARDED_TRACE").is_ok() {
            eprintln!("{what} ks {i} now {}", models[0].now);
        }
        check(&store, &models, &mut rng, &format!("seed {seed} {what}"));
    }
    assert!(
        force.is_some() || max_shards > 1,
        "seed {seed}: never sharded"
    );
}

#[test]
fn sharded_opens_match_the_model() {
    let seeds: u64 = std::env::var("EBBDB_SHARDED_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for s in 0..seeds {
        let steps = std::env::var("EBBDB_SHARDED_STEPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300);
        run(
            0x9E37_79B9_7F4A_7C15 ^ (s.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1),
            steps,
        );
    }
}

fn drain(rx: &crossbeam_channel::Receiver<ebbdb::ExpiryEvent>) -> Vec<(String, Vec<u8>, u64)> {
    rx.try_iter()
        .map(|e| (e.keyspace, e.key, e.expired_at))
        .collect()
}

/// Every key of two keyspaces expired before the sharded open: nothing is live, the reaper
/// reports each once, and new keys below, between and above the old split keys behave.
#[test]
fn everything_expired_at_a_sharded_open() {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || opts(&c).open_shard_records(2);
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        for name in ["a", "b"] {
            let ks = store
                .create_keyspace(name, DefaultTtl::Seconds(5))
                .expect("ks");
            for i in 0..200u32 {
                let k = format!("k{i:04}");
                if i % 2 == 0 {
                    ks.put(&k, b"v").expect("put");
                } else {
                    ks.put_with_ttl(&k, b"v", Ttl::Seconds(1 + i % 7))
                        .expect("put");
                }
            }
        }
    }
    c.advance(Duration::from_secs(10));
    let store = Store::open_with(dir.path(), o()).expect("open");
    let rx = store.subscribe_expirations();
    assert!(store.key_directory_shards("a").expect("shards") > 1);
    for name in ["a", "b"] {
        let ks = store.keyspace(name).expect("ks");
        assert_eq!(ks.len().expect("len"), 0);
        assert_eq!(ks.iter().count(), 0);
        assert_eq!(ks.prefix("k01").count(), 0);
    }
    store.check_census().expect("census");
    store.maintain().expect("maintain");
    let ev = drain(&rx);
    assert_eq!(ev.len(), 400, "every expired key reported once");
    let ks = store.keyspace("a").expect("ks");
    for k in ["", "k", "k0100", "k00995", "zz"] {
        ks.put_with_ttl(k, b"new", Ttl::Never).expect("put");
    }
    let keys: Vec<Vec<u8>> = ks.iter().map(|r| r.expect("scan").0).collect();
    assert_eq!(
        keys,
        vec![
            b"".to_vec(),
            b"k".to_vec(),
            b"k00995".to_vec(),
            b"k0100".to_vec(),
            b"zz".to_vec()
        ]
    );
    assert_eq!(ks.len().expect("len"), 5);
    store.check_census().expect("census");
    drop(ks);
    drop(store);
    let store = Store::open_with(dir.path(), o()).expect("open");
    assert_eq!(store.keyspace("a").expect("ks").len().expect("len"), 5);
    assert_eq!(store.keyspace("b").expect("ks").len().expect("len"), 0);
}

/// Timers filed in ranges at a sharded open, one of them 68 years away: every near one fires
/// when due, the far one when its second comes, each once.
#[test]
fn far_deadline_among_near_ones_at_a_sharded_open() {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || opts(&c).open_shard_records(2);
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store.create_keyspace("a", DefaultTtl::Off).expect("ks");
        for i in 0..300u32 {
            let ttl = if i == 150 {
                i32::MAX as u32
            } else {
                1 + i % 50
            };
            ks.put_with_ttl(format!("k{i:04}"), b"v", Ttl::Seconds(ttl))
                .expect("put");
        }
        ks.set_default_ttl(DefaultTtl::NeverExpire)
            .expect("default");
    }
    let store = Store::open_with(dir.path(), o()).expect("open");
    let rx = store.subscribe_expirations();
    let ks = store.keyspace("a").expect("ks");
    let mut seen = 0;
    for s in 1..=50u64 {
        c.advance(Duration::from_secs(1));
        store.maintain().expect("maintain");
        let ev = drain(&rx);
        seen += ev.len();
        assert_eq!(ks.len().expect("len"), 300 - seen, "second {s}");
        assert!(
            ev.iter().all(|e| e.2 == common::T0 + s),
            "second {s}: {ev:?}"
        );
    }
    assert_eq!(seen, 299);
    c.advance(Duration::from_secs(u64::from(i32::MAX as u32)));
    store.maintain().expect("maintain");
    assert_eq!(drain(&rx).len(), 1);
    assert_eq!(ks.len().expect("len"), 0);
    store.check_census().expect("census");
}

/// A clock near the last write second the key directory holds: sharded open, expiry, counts.
#[test]
fn sharded_open_near_the_last_write_second() {
    let dir = tempfile::tempdir().expect("dir");
    let top = (1u64 << 40) - 100;
    let c = ebbdb::clock::ManualClock::at_unix_secs(top);
    let o = || common::opts(&c).open_shard_records(1);
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store
            .create_keyspace("a", DefaultTtl::Seconds(30))
            .expect("ks");
        for i in 0..100u32 {
            match i % 3 {
                0 => ks.put(format!("k{i:03}"), b"v").expect("put"),
                1 => ks
                    .put_with_ttl(format!("k{i:03}"), b"v", Ttl::Seconds(i32::MAX as u32))
                    .expect("put"),
                _ => ks
                    .put_with_ttl(format!("k{i:03}"), b"v", Ttl::Seconds(1 + i % 20))
                    .expect("put"),
            }
        }
    }
    let store = Store::open_with(dir.path(), o()).expect("open");
    let rx = store.subscribe_expirations();
    let ks = store.keyspace("a").expect("ks");
    assert_eq!(ks.len().expect("len"), 100);
    c.advance(Duration::from_secs(25));
    store.maintain().expect("maintain");
    let n = drain(&rx).len();
    assert_eq!(ks.len().expect("len"), 100 - n);
    assert_eq!(
        n,
        (0..100u32)
            .filter(|i| i % 3 == 2) // own TTLs of 1-20 s: all due within 25 s
            .count()
    );
    c.advance(Duration::from_secs(5));
    store.maintain().expect("maintain");
    let n2 = drain(&rx).len();
    assert_eq!(n2, 34);
    assert_eq!(ks.len().expect("len"), 33);
    store.check_census().expect("census");
}

/// Own TTLs spread over more seconds than the census counts in an array (the sorting path),
/// inheriting entries from many write seconds, a default-TTL history: counts at every step
/// after a sharded open agree with the scans.
#[test]
fn census_sorting_path_after_a_sharded_open() {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || opts(&c).open_shard_records(3);
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store
            .create_keyspace("a", DefaultTtl::Seconds(400_000))
            .expect("ks");
        for i in 0..400u32 {
            let k = format!("k{:05}", (i * 7919) % 400);
            if i % 2 == 0 {
                ks.put_with_ttl(&k, b"v", Ttl::Seconds(1 + i * 2_000))
                    .expect("put");
            } else {
                ks.put(&k, b"v").expect("put");
            }
            c.advance(Duration::from_secs(1 + u64::from(i % 3) * 500));
            if i == 200 {
                ks.set_default_ttl(DefaultTtl::Seconds(250_000))
                    .expect("default");
            }
        }
    }
    let store = Store::open_with(dir.path(), o()).expect("open");
    let ks = store.keyspace("a").expect("ks");
    assert!(store.key_directory_shards("a").expect("shards") > 1);
    for _ in 0..200 {
        assert_eq!(ks.len().expect("len"), ks.iter().count());
        store.check_census().expect("census");
        c.advance(Duration::from_secs(5_000));
        if ks.iter().count().is_multiple_of(3) {
            store.maintain().expect("maintain");
        }
    }
}

/// A next_with scan across chunk and shard boundaries while segments rotate, merge and retire
/// under it, values sitting in the active segment's unflushed tail: each pair it lends is the
/// key's value at some point during the scan, keys in order, none missing that was never
/// touched.
#[test]
fn next_with_while_segments_retire() {
    let dir = tempfile::tempdir().expect("dir");
    let c = clock();
    let o = || opts(&c).open_shard_records(7);
    let val = |i: u32, gen: u32| {
        format!("value-{i:05}-{gen}-{}", "p".repeat((i % 50) as usize)).into_bytes()
    };
    {
        let store = Store::open_with(dir.path(), o()).expect("open");
        let ks = store.create_keyspace("a", DefaultTtl::Off).expect("ks");
        for i in 0..2_000u32 {
            ks.put(format!("k{i:05}"), val(i, 0)).expect("put");
        }
    }
    let store = Store::open_with(dir.path(), o()).expect("open");
    assert!(store.key_directory_shards("a").expect("shards") > 100);
    let ks = store.keyspace("a").expect("ks");
    let mut it = ks.iter();
    let mut got = Vec::new();
    let mut n = 0u32;
    while let Some(p) = it.next_with(|k, v| (k.to_vec(), v.to_vec())) {
        got.push(p.expect("next_with"));
        n += 1;
        if n.is_multiple_of(97) {
            // Overwrite keys ahead and behind (generation 1), some through a batch.
            for j in (0..2_000u32).step_by(13) {
                ks.put(format!("k{j:05}"), val(j, 1)).expect("put");
            }
        }
        if n.is_multiple_of(301) {
            store.compact_full().expect("compact");
        }
    }
    assert_eq!(got.len(), 2_000);
    for (i, (k, v)) in got.iter().enumerate() {
        let i = i as u32;
        assert_eq!(k, &format!("k{i:05}").into_bytes());
        assert!(
            v == &val(i, 0) || (i.is_multiple_of(13) && v == &val(i, 1)),
            "k{i:05}: {:?}",
            String::from_utf8_lossy(v)
        );
    }
}
