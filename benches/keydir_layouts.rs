//! Candidate layouts for the key directory, measured alone (no engine): the B-tree it is today
//! against hash tables, for the operations the engine makes of it. The numbers for the design
//! question of DESIGN.md §3.1 ("Why still a B-tree").
//!
//! Run: `cargo bench --bench keydir_layouts` (EBBDB_KEYS=4000000 for a bigger map; default
//! 1 M). Keys are 16 random bytes held in a 24-byte key as the engine holds them (length and
//! inline bytes), values 40 bytes like an `Entry`. Each layout runs in a process of its own,
//! so its `RssAnon` growth is its own memory.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::time::Instant;

/// A key as the key directory holds one up to 16 bytes: length, then the bytes inline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct K {
    bytes: [u8; 16],
    len: u8,
    _pad: [u8; 7],
}

/// An entry's 40 bytes.
#[derive(Clone, Copy, Default)]
struct E([u64; 5]);

fn key(i: u64) -> K {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0xA5A5_A5A5;
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&x.to_be_bytes());
    bytes[8..].copy_from_slice(&i.to_be_bytes());
    K {
        bytes,
        len: 16,
        _pad: [0; 7],
    }
}

/// A keyed multiply-fold hash (the shape of foldhash or wyhash): the seed comes from the
/// standard library's random state, so keys chosen to collide cannot be precomputed.
#[derive(Clone)]
struct Fold(u64);

impl BuildHasher for Fold {
    type Hasher = FoldHasher;
    fn build_hasher(&self) -> FoldHasher {
        FoldHasher(self.0)
    }
}

fn fold_seed() -> Fold {
    Fold(RandomState::new().hash_one(0u8) | 1)
}

struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            let m = u128::from(self.0 ^ w) * u128::from(0x2d35_8dcc_aa6c_78a5_u64);
            self.0 = (m as u64) ^ ((m >> 64) as u64);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

fn rss_anon() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A random order of `0..n` (a fixed permutation).
fn order(n: u64, salt: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = 0x2545_F491_4F6C_DD1D ^ salt;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// What one layout must do: the engine's point operations and an ordered walk.
trait Layout {
    fn insert(&mut self, k: K, e: E);
    fn get(&self, k: &K) -> Option<&E>;
    fn remove(&mut self, k: &K) -> Option<E>;
    /// Visits every key in key order; returns how many.
    fn walk(&self) -> usize;
}

impl Layout for BTreeMap<K, E> {
    fn insert(&mut self, k: K, e: E) {
        BTreeMap::insert(self, k, e);
    }
    fn get(&self, k: &K) -> Option<&E> {
        BTreeMap::get(self, k)
    }
    fn remove(&mut self, k: &K) -> Option<E> {
        BTreeMap::remove(self, k)
    }
    fn walk(&self) -> usize {
        let mut n = 0;
        for kv in self {
            black_box(kv);
            n += 1;
        }
        n
    }
}

impl<S: BuildHasher> Layout for HashMap<K, E, S> {
    fn insert(&mut self, k: K, e: E) {
        HashMap::insert(self, k, e);
    }
    fn get(&self, k: &K) -> Option<&E> {
        HashMap::get(self, k)
    }
    fn remove(&mut self, k: &K) -> Option<E> {
        HashMap::remove(self, k)
    }
    /// In key order only by sorting the keys first: the cost of an order made on demand.
    fn walk(&self) -> usize {
        let mut keys: Vec<&K> = self.keys().collect();
        keys.sort_unstable();
        let mut n = 0;
        for k in keys {
            black_box(self.get(k));
            n += 1;
        }
        n
    }
}

/// A hash table for the entries and a B-tree of the keys alone for the order.
struct Both<S>(HashMap<K, E, S>, BTreeSet<K>);

impl<S: BuildHasher> Layout for Both<S> {
    fn insert(&mut self, k: K, e: E) {
        if self.0.insert(k, e).is_none() {
            self.1.insert(k);
        }
    }
    fn get(&self, k: &K) -> Option<&E> {
        self.0.get(k)
    }
    fn remove(&mut self, k: &K) -> Option<E> {
        let e = self.0.remove(k)?;
        self.1.remove(k);
        Some(e)
    }
    fn walk(&self) -> usize {
        let mut n = 0;
        for k in &self.1 {
            black_box(self.0.get(k));
            n += 1;
        }
        n
    }
}

fn run(name: &str, n: u64, mut map: impl Layout) {
    let ins = order(n, 1);
    let gets = order(n, 2);
    let rss0 = rss_anon();
    let t = Instant::now();
    for &i in &ins {
        map.insert(key(i), E([i; 5]));
    }
    let insert = t.elapsed().as_nanos() as f64 / n as f64;
    let bytes = rss_anon().saturating_sub(rss0) as f64 / n as f64;
    let t = Instant::now();
    let mut found = 0u64;
    for &i in &gets {
        found += map.get(&key(i)).map_or(0, |e| u64::from(e.0[0] == i));
    }
    let get = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(found, n, "{name}: every key is there with its value");
    let t = Instant::now();
    let walked = map.walk();
    let walk = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(walked as u64, n);
    let t = Instant::now();
    for &i in gets.iter().take(n as usize / 2) {
        black_box(map.remove(&key(i)));
    }
    let remove = t.elapsed().as_nanos() as f64 / (n / 2) as f64;
    println!("| {name} | {insert:.0} | {get:.0} | {remove:.0} | {walk:.0} | {bytes:.0} |");
}

const LAYOUTS: [&str; 4] = [
    "B-tree (today)",
    "hash, SipHash-1-3",
    "hash, keyed fold",
    "hash (keyed fold) + B-tree of keys",
];

fn main() {
    let n: u64 = std::env::var("EBBDB_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // Each layout runs in a process of its own, so that its memory is not what another one
    // freed.
    if let Some(which) = std::env::var("EBBDB_LAYOUT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        let name = LAYOUTS[which % LAYOUTS.len()];
        match which {
            0 => run(name, n, BTreeMap::<K, E>::new()),
            1 => run(name, n, HashMap::<K, E>::new()),
            2 => run(name, n, HashMap::<K, E, Fold>::with_hasher(fold_seed())),
            _ => run(
                name,
                n,
                Both(HashMap::with_hasher(fold_seed()), BTreeSet::new()),
            ),
        }
        return;
    }
    println!("{n} keys; ns per operation; RssAnon growth over the inserts per key");
    println!("| layout | insert | get | remove | ordered walk | bytes/key |");
    println!("|---|---:|---:|---:|---:|---:|");
    let Ok(me) = std::env::current_exe() else {
        eprintln!("cannot find this program to run the layouts");
        std::process::exit(1);
    };
    for (which, name) in LAYOUTS.iter().enumerate() {
        let status = std::process::Command::new(&me)
            .env("EBBDB_LAYOUT", which.to_string())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("layout {name} failed");
            std::process::exit(1);
        }
    }
}
