//! Candidate layouts for the key directory, measured alone (no engine): the B-tree it is today
//! against hash tables, and a prototype of a hash table with the key order kept in sorted runs
//! ([`Runs`]), for the operations the engine makes of it, and churn as under TTLs (the oldest
//! key out, a new one in). The numbers for the design question of DESIGN.md §3.1 ("Why still
//! a B-tree").
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

/// A prototype of the design DESIGN.md §3.1 weighs: entries in slots, found through a hash
/// table of slot numbers (64 open-addressing tables picked by the hash's top bits, so growing
/// one rehashes a 64th of the keys), and the key order kept apart as sorted runs of slot
/// references (the key's first 8 bytes, then the slot). A new key's reference goes to an
/// unsorted batch of [`FRESH`]; a full batch is sorted into a run, and the two newest runs are
/// merged while the older is at most 4 times the newer and the two hold at most [`RUN_CAP`]
/// (so a merge holds the writer for a bounded time). A removal only marks the slot dead: its
/// reference is dropped when a merge or a purge meets it, and only then is the slot reused, so
/// every reference still compares by the key it was sorted by.
struct Runs {
    fold: Fold,
    slots: Vec<(K, E)>,
    dead: Vec<bool>,
    free: Vec<u32>,
    tables: Vec<Table>,
    live: usize,
    runs: Vec<Vec<Ref>>,
    fresh: Vec<Ref>,
    dead_refs: usize,
}

/// An open-addressing table of slot numbers: `ctrl` is 0 for empty, 1 for a removed entry,
/// 0x80 | 7 bits of the hash for a full one.
#[derive(Clone)]
struct Table {
    ctrl: Vec<u8>,
    slot: Vec<u32>,
    used: usize,
    live: usize,
}

/// A key's place in the order: its first 8 bytes (big-endian) and its slot, in 12 bytes.
#[derive(Clone, Copy)]
struct Ref([u32; 3]);

impl Ref {
    fn new(k: &K, slot: usize) -> Self {
        let pre = prefix(k);
        Self([(pre >> 32) as u32, pre as u32, slot as u32])
    }
    fn pre(self) -> u64 {
        (u64::from(self.0[0]) << 32) | u64::from(self.0[1])
    }
    fn slot(self) -> usize {
        self.0[2] as usize
    }
}

fn prefix(k: &K) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&k.bytes[..8]);
    u64::from_be_bytes(b)
}

const FRESH: usize = 256;
const RUN_CAP: usize = 1 << 18;

impl Runs {
    fn new() -> Self {
        let empty = Table {
            ctrl: vec![0; 16],
            slot: vec![0; 16],
            used: 0,
            live: 0,
        };
        Self {
            fold: fold_seed(),
            slots: Vec::new(),
            dead: Vec::new(),
            free: Vec::new(),
            tables: vec![empty; 64],
            live: 0,
            runs: Vec::new(),
            fresh: Vec::new(),
            dead_refs: 0,
        }
    }

    fn tag(h: u64) -> u8 {
        0x80 | ((h >> 50) as u8 & 0x7f)
    }

    /// (table, position) of `k`.
    fn find(&self, k: &K, h: u64) -> Option<(usize, usize)> {
        let ti = (h >> 58) as usize;
        let t = &self.tables[ti];
        let mask = t.ctrl.len() - 1;
        let mut p = h as usize & mask;
        loop {
            match t.ctrl[p] {
                0 => return None,
                c if c == Self::tag(h) && self.slots[t.slot[p] as usize].0 == *k => {
                    return Some((ti, p))
                }
                _ => p = (p + 1) & mask,
            }
        }
    }

    fn grow(&mut self, ti: usize) {
        let cap = ((self.tables[ti].live + 1) * 2).next_power_of_two().max(16);
        let mut t = Table {
            ctrl: vec![0; cap],
            slot: vec![0; cap],
            used: 0,
            live: self.tables[ti].live,
        };
        let old = &self.tables[ti];
        for (&c, &s) in old.ctrl.iter().zip(&old.slot) {
            if c >= 0x80 {
                let h = self.fold.hash_one(self.slots[s as usize].0);
                let mut p = h as usize & (cap - 1);
                while t.ctrl[p] != 0 {
                    p = (p + 1) & (cap - 1);
                }
                t.ctrl[p] = Self::tag(h);
                t.slot[p] = s;
                t.used += 1;
            }
        }
        self.tables[ti] = t;
    }

    fn less(&self, a: Ref, b: Ref) -> bool {
        match a.pre().cmp(&b.pre()) {
            std::cmp::Ordering::Equal => self.slots[a.slot()].0 < self.slots[b.slot()].0,
            o => o.is_lt(),
        }
    }

    /// Drops the references to dead slots from `run`, freeing those slots.
    fn drop_dead(&mut self, run: &mut Vec<Ref>) {
        let before = run.len();
        let (dead, free) = (&self.dead, &mut self.free);
        run.retain(|r| {
            let gone = dead[r.slot()];
            if gone {
                free.push(r.0[2]);
            }
            !gone
        });
        self.dead_refs -= before - run.len();
    }

    fn flush(&mut self) {
        let mut fresh = std::mem::take(&mut self.fresh);
        self.drop_dead(&mut fresh);
        let slots = &self.slots;
        fresh.sort_unstable_by(|a, b| {
            (a.pre(), &slots[a.slot()].0).cmp(&(b.pre(), &slots[b.slot()].0))
        });
        self.runs.push(fresh);
        while let [.., a, b] = &self.runs[..] {
            if a.len() > 4 * b.len() || a.len() + b.len() > RUN_CAP {
                break;
            }
            let (b, a) = (
                self.runs.pop().unwrap_or_default(),
                self.runs.pop().unwrap_or_default(),
            );
            let mut out = Vec::with_capacity(a.len() + b.len());
            let (mut i, mut j) = (0, 0);
            while i < a.len() && j < b.len() {
                if self.less(b[j], a[i]) {
                    out.push(b[j]);
                    j += 1;
                } else {
                    out.push(a[i]);
                    i += 1;
                }
            }
            out.extend_from_slice(&a[i..]);
            out.extend_from_slice(&b[j..]);
            self.drop_dead(&mut out);
            self.runs.push(out);
        }
    }

    /// Drops the dead references of the run holding the most of them.
    fn purge(&mut self) {
        let most = (0..self.runs.len())
            .max_by_key(|&i| self.runs[i].iter().filter(|r| self.dead[r.slot()]).count());
        if let Some(i) = most {
            let mut run = std::mem::take(&mut self.runs[i]);
            self.drop_dead(&mut run);
            self.runs[i] = run;
        }
    }
}

impl Layout for Runs {
    fn insert(&mut self, k: K, e: E) {
        let h = self.fold.hash_one(k);
        if let Some((ti, p)) = self.find(&k, h) {
            let s = self.tables[ti].slot[p] as usize;
            self.slots[s].1 = e;
            return;
        }
        let ti = (h >> 58) as usize;
        if (self.tables[ti].used + 1) * 8 > self.tables[ti].ctrl.len() * 7 {
            self.grow(ti);
        }
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = (k, e);
                self.dead[s as usize] = false;
                s as usize
            }
            None => {
                self.slots.push((k, e));
                self.dead.push(false);
                self.slots.len() - 1
            }
        };
        let t = &mut self.tables[ti];
        let mask = t.ctrl.len() - 1;
        let mut p = h as usize & mask;
        while t.ctrl[p] >= 0x80 {
            p = (p + 1) & mask;
        }
        if t.ctrl[p] == 0 {
            t.used += 1;
        }
        t.ctrl[p] = Self::tag(h);
        t.slot[p] = s as u32;
        t.live += 1;
        self.live += 1;
        self.fresh.push(Ref::new(&k, s));
        if self.fresh.len() >= FRESH {
            self.flush();
        }
    }
    fn get(&self, k: &K) -> Option<&E> {
        let (ti, p) = self.find(k, self.fold.hash_one(k))?;
        Some(&self.slots[self.tables[ti].slot[p] as usize].1)
    }
    fn remove(&mut self, k: &K) -> Option<E> {
        let (ti, p) = self.find(k, self.fold.hash_one(k))?;
        let t = &mut self.tables[ti];
        let s = t.slot[p] as usize;
        t.ctrl[p] = 1;
        t.live -= 1;
        self.live -= 1;
        self.dead[s] = true;
        self.dead_refs += 1;
        let e = self.slots[s].1;
        if self.dead_refs > self.live / 2 + 4096 {
            self.purge();
        }
        Some(e)
    }
    /// A merge of every run and the sorted fresh batch, the smallest head taken each step.
    fn walk(&self) -> usize {
        let slots = &self.slots;
        let mut fresh = self.fresh.clone();
        fresh.sort_unstable_by(|a, b| {
            (a.pre(), &slots[a.slot()].0).cmp(&(b.pre(), &slots[b.slot()].0))
        });
        let mut heads: Vec<&[Ref]> = self.runs.iter().map(Vec::as_slice).collect();
        heads.push(&fresh);
        let mut n = 0;
        loop {
            let mut best: Option<usize> = None;
            for (i, h) in heads.iter().enumerate() {
                if let Some(&r) = h.first() {
                    if best.is_none_or(|b| self.less(r, heads[b][0])) {
                        best = Some(i);
                    }
                }
            }
            let Some(b) = best else { break };
            let r = heads[b][0];
            heads[b] = &heads[b][1..];
            if !self.dead[r.slot()] {
                black_box(&slots[r.slot()]);
                n += 1;
            }
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
    // Churn as under TTLs: the oldest key leaves, a new one comes, `n` times; each pair timed.
    let mut slowest = std::time::Duration::ZERO;
    let t = Instant::now();
    for (j, &i) in ins.iter().enumerate() {
        let one = Instant::now();
        black_box(map.remove(&key(i)));
        map.insert(key(n + j as u64), E([i; 5]));
        slowest = slowest.max(one.elapsed());
    }
    let churn = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    let walked = map.walk();
    let walk_after = t.elapsed().as_nanos() as f64 / walked.max(1) as f64;
    assert_eq!(walked as u64, n);
    // Half of the keys the churn brought in, in random order.
    let t = Instant::now();
    for &i in gets.iter().take(n as usize / 2) {
        black_box(map.remove(&key(n + i)));
    }
    let remove = t.elapsed().as_nanos() as f64 / (n / 2) as f64;
    println!(
        "| {name} | {insert:.0} | {get:.0} | {remove:.0} | {walk:.0} | {bytes:.0} | {churn:.0} | {:.2} | {walk_after:.0} |",
        slowest.as_secs_f64() * 1e3
    );
}

const LAYOUTS: [&str; 5] = [
    "B-tree (today)",
    "hash, SipHash-1-3",
    "hash, keyed fold",
    "hash (keyed fold) + B-tree of keys",
    "hash (keyed fold) + sorted runs (prototype)",
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
            3 => run(
                name,
                n,
                Both(HashMap::with_hasher(fold_seed()), BTreeSet::new()),
            ),
            _ => run(name, n, Runs::new()),
        }
        return;
    }
    println!("{n} keys; ns per operation; RssAnon growth over the inserts per key; churn: the");
    println!("oldest key removed and a new one inserted, n times (the slowest pair in ms), then");
    println!("an ordered walk of what is left");
    println!("| layout | insert | get | remove | ordered walk | bytes/key | churn | slowest churn pair (ms) | walk after churn |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
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
