//! A keyspace large enough that open splits its key directory into shards by key range
//! (`keydir::KeyMap`, DESIGN.md §3.1; open's parts cut at 16 K records): lookups, ranges, prefixes, writes, deletes, expiry,
//! counts and merges across shard boundaries agree with a model, through reopens.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use common::{clock, manual};
use ebbdb::{DefaultTtl, Store, Ttl, WriteBatch};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Key → (value, deadline in seconds after the start, if any).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

struct Rng(u64);

impl Rng {
    fn next(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }

    /// A key of a few shapes: short, inline-length, longer than 16 bytes, sharing prefixes.
    fn key(&mut self) -> Vec<u8> {
        let n = self.next(60_000);
        match self.next(4) {
            0 => format!("a{n}").into_bytes(),
            1 => format!("user/{n:06}/session").into_bytes(),
            2 => format!("m{n:05}").into_bytes(),
            _ => n.to_be_bytes().to_vec(),
        }
    }
}

/// The live part of `model` at `elapsed` seconds.
fn live(model: &Model, elapsed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(_, (_, d))| d.is_none_or(|d| elapsed < d))
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect()
}

/// Every kind of scan and some lookups against the model.
fn check(store: &Store, model: &Model, elapsed: u64, rng: &mut Rng) -> TestResult {
    let ks = store.keyspace("ks")?;
    let want = live(model, elapsed);
    assert_eq!(ks.len()?, want.len());
    let all: Vec<(Vec<u8>, Vec<u8>)> = ks.iter().collect::<ebbdb::Result<_>>()?;
    assert!(all == want, "full scan differs");
    for _ in 0..60 {
        let (a, b) = (rng.key(), rng.key());
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let bounds = match rng.next(3) {
            0 => (Bound::Included(lo.clone()), Bound::Excluded(hi.clone())),
            1 => (Bound::Excluded(lo.clone()), Bound::Included(hi.clone())),
            _ => (Bound::Included(lo.clone()), Bound::Unbounded),
        };
        let got: Vec<Vec<u8>> = ks
            .range::<Vec<u8>, _>(bounds.clone())
            .map(|kv| kv.map(|(k, _)| k))
            .collect::<ebbdb::Result<_>>()?;
        let expect: Vec<Vec<u8>> = want
            .iter()
            .map(|(k, _)| k)
            .filter(|k| match &bounds.0 {
                Bound::Included(l) => *k >= l,
                Bound::Excluded(l) => *k > l,
                Bound::Unbounded => true,
            })
            .filter(|k| match &bounds.1 {
                Bound::Included(h) => *k <= h,
                Bound::Excluded(h) => *k < h,
                Bound::Unbounded => true,
            })
            .cloned()
            .collect();
        assert!(got == expect, "range {bounds:?}");
        let p = &lo[..lo.len().min(1 + rng.next(4) as usize)];
        let got = ks.prefix(p).count();
        assert_eq!(got, want.iter().filter(|(k, _)| k.starts_with(p)).count());
        let probe = rng.key();
        let expect = want
            .binary_search_by(|(k, _)| k.as_slice().cmp(&probe))
            .ok()
            .map(|i| want[i].1.clone());
        assert_eq!(ks.get(&probe)?, expect);
    }
    Ok(())
}

#[test]
fn a_sharded_key_directory_behaves_as_one_map() -> TestResult {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut model = Model::new();
    let mut elapsed = 0;
    let put =
        |b: &mut WriteBatch, ks: &ebbdb::Keyspace, model: &mut Model, rng: &mut Rng, at: u64| {
            let k = rng.key();
            let v = rng.next(1 << 20).to_le_bytes().to_vec();
            if rng.next(3) == 0 {
                let ttl = 1 + rng.next(100) as u32;
                b.put_with_ttl(ks, k.clone(), v.clone(), Ttl::Seconds(ttl));
                model.insert(k, (v, Some(at + u64::from(ttl))));
            } else {
                b.put(ks, k.clone(), v.clone());
                model.insert(k, (v, None));
            }
        };
    {
        let store = Store::open_with(dir.path(), manual(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
        for _ in 0..80 {
            let mut b = WriteBatch::new();
            for _ in 0..1_000 {
                put(&mut b, &ks, &mut model, &mut rng, elapsed);
            }
            store.write_batch(b)?;
        }
        assert_eq!(
            store.key_directory_shards("ks")?,
            1,
            "a map that grew by writes"
        );
    }
    for round in 0..3 {
        // Parts of 16 K records (the default is 128 K), so that 80 K keys open in several.
        let store = Store::open_with(dir.path(), manual(&c).open_shard_records(1 << 14))?;
        let shards = store.key_directory_shards("ks")?;
        assert!(
            shards >= 2,
            "round {round}: {} keys in {shards} shard",
            model.len()
        );
        check(&store, &model, elapsed, &mut rng)?;
        // Writes and deletes across the shards, then expiry, then a full merge.
        let ks = store.keyspace("ks")?;
        let mut b = WriteBatch::new();
        for _ in 0..3_000 {
            if rng.next(3) == 0 {
                let k = rng.key();
                b.delete(&ks, k.clone());
                model.remove(&k);
            } else {
                put(&mut b, &ks, &mut model, &mut rng, elapsed);
            }
        }
        // Keys below and above every other.
        b.put(&ks, Vec::new(), b"lowest");
        model.insert(Vec::new(), (b"lowest".to_vec(), None));
        b.put(&ks, vec![0xff; 20], b"highest");
        model.insert(vec![0xff; 20], (b"highest".to_vec(), None));
        store.write_batch(b)?;
        check(&store, &model, elapsed, &mut rng)?;
        c.advance(Duration::from_secs(40));
        elapsed += 40;
        check(&store, &model, elapsed, &mut rng)?;
        store.compact_full()?;
        check(&store, &model, elapsed, &mut rng)?;
        model.retain(|_, (_, d)| d.is_none_or(|d| elapsed < d));
    }
    Ok(())
}
