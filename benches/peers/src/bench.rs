//! The standard workloads: bulk fill, durable fill, random reads (warm, after reopen, and
//! after reopen with the page cache dropped), 90/10 read/write, full scan, open time. Each
//! phase runs in its own child process.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use crate::engines::{open, Durability, Engine, Kind, OpenOpts, Res};

pub const VALUE_LEN: usize = 100;
pub const BATCH: usize = 1000;

/// splitmix64: keys, value bytes and random choices.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        mix(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Key `i`: a hash prefix (so sequential `i` arrive in random key order), then `i`.
pub fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i ^ 0x5EED).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// Value for key `i`: the expiry (Unix seconds, `u64::MAX` for none), then incompressible bytes.
pub fn value(i: u64, expiry: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    v[..8].copy_from_slice(&expiry.to_be_bytes());
    for (j, chunk) in v[8..].chunks_mut(8).enumerate() {
        let r = mix(i.wrapping_mul(31).wrapping_add(j as u64)).to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    v
}

/// Peak resident set of this process (VmHWM), bytes.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
        })
        .map_or(0, |kb| kb * 1024)
}

/// Bytes of the files under `dir`, each counted as min(length, allocated): neither sparse holes
/// nor space preallocated past the end of a file (RocksDB's WAL) count.
pub fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(m) = e.metadata() {
                total += if m.is_dir() {
                    dir_bytes(&e.path())
                } else {
                    m.len().min(m.blocks() * 512)
                };
            }
        }
    }
    total
}

fn rate(ops: u64, secs: f64) -> f64 {
    ops as f64 / secs.max(1e-9)
}

fn fill(eng: &dyn Engine, n: u64) -> Res<()> {
    let mut buf: Vec<([u8; 16], [u8; VALUE_LEN])> = Vec::with_capacity(BATCH);
    for i in 0..n {
        buf.push((key(i), value(i, u64::MAX)));
        if buf.len() == BATCH || i + 1 == n {
            let refs: Vec<(&[u8], &[u8])> = buf.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            eng.put_batch(&refs)?;
            buf.clear();
        }
    }
    Ok(())
}

fn random_reads(eng: &dyn Engine, n: u64, reads: u64, seed: u64) -> Res<f64> {
    let mut rng = Rng::new(seed);
    let t = Instant::now();
    for _ in 0..reads {
        let i = rng.below(n);
        if eng.get(&key(i))?.is_none() {
            return Err(format!("key {i} missing").into());
        }
    }
    Ok(rate(reads, t.elapsed().as_secs_f64()))
}

/// Phase `load`: bulk fill (1,000-op batches, no fsync, one sync at the end), warm random
/// reads, full scan, 90/10 read/write from 2 threads. Peak RSS covers all of it.
pub fn load(kind: Kind, dir: &Path, n: u64) -> Res<Value> {
    let eng: Arc<dyn Engine> = open(kind, dir, &OpenOpts::relaxed())?.into();
    let t = Instant::now();
    fill(&*eng, n)?;
    eng.sync()?;
    let fill_ops = rate(n, t.elapsed().as_secs_f64());
    let disk_after_fill = dir_bytes(dir);

    let reads = n;
    let warm_reads = random_reads(&*eng, n, reads, 1)?;

    let t = Instant::now();
    let mut bytes = 0u64;
    let count = eng.scan(&mut |k, v| bytes += (k.len() + v.len()) as u64)?;
    let scan_secs = t.elapsed().as_secs_f64();
    if count != n {
        return Err(format!("scan saw {count} keys, expected {n}").into());
    }

    // 90/10 from 2 threads: each op picks a uniform key; one in ten overwrites it.
    let per_thread = n / 2;
    let t = Instant::now();
    let handles: Vec<_> = (0..2u64)
        .map(|th| {
            let eng = Arc::clone(&eng);
            std::thread::spawn(move || -> Res<()> {
                let mut rng = Rng::new(100 + th);
                for _ in 0..per_thread {
                    let r = rng.next();
                    let i = (r >> 8) % n;
                    if r.is_multiple_of(10) {
                        eng.put(&key(i), &value(i ^ r, u64::MAX))?;
                    } else if eng.get(&key(i))?.is_none() {
                        return Err(format!("key {i} missing").into());
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "mixed thread panicked")??;
    }
    let mixed_ops = rate(2 * per_thread, t.elapsed().as_secs_f64());
    eng.sync()?;
    drop(eng);
    Ok(json!({
        "fill_ops": fill_ops,
        "disk_after_fill": disk_after_fill,
        "warm_reads": warm_reads,
        "scan_keys_per_s": rate(count, scan_secs),
        "scan_secs": scan_secs,
        "mixed_ops": mixed_ops,
        "rss_load": peak_rss(),
    }))
}

/// Phase `reopen`, in a fresh process on the `load` directory: open time (open + first read),
/// then uniform random reads with the engine's caches cold (the OS page cache is not dropped).
pub fn reopen(kind: Kind, dir: &Path, n: u64) -> Res<Value> {
    let rss_before = peak_rss();
    let t = Instant::now();
    let eng = open(kind, dir, &OpenOpts::relaxed())?;
    eng.get(&key(0))?.ok_or("key 0 missing after reopen")?;
    let open_secs = t.elapsed().as_secs_f64();
    let rss_open = peak_rss();
    let cold_reads = random_reads(&*eng, n, n, 2)?;
    drop(eng);
    Ok(json!({
        "open_secs": open_secs,
        "rss_after_open": rss_open.saturating_sub(rss_before),
        "cold_reads": cold_reads,
        "rss_reopen": peak_rss(),
    }))
}

/// Phase `cold`, in a fresh process on the `load` directory after `reopen`: the directory's
/// files dropped from the OS page cache (`pagecache::evict`), as after a reboot, then the open
/// time (open + first read, so the open reads cold too) and the warm reads' random gets (same
/// generator, seed and count) with both the engine's caches and the page cache cold.
pub fn cold(kind: Kind, dir: &Path, n: u64) -> Res<Value> {
    let (before, total) = crate::pagecache::resident(dir);
    let method = crate::pagecache::evict(dir)?;
    let (after, _) = crate::pagecache::resident(dir);
    let t = Instant::now();
    let eng = open(kind, dir, &OpenOpts::relaxed())?;
    eng.get(&key(0))?.ok_or("key 0 missing after reopen")?;
    let open_secs = t.elapsed().as_secs_f64();
    let (after_open, _) = crate::pagecache::resident(dir);
    let reads = random_reads(&*eng, n, n, 1)?;
    let (after_reads, _) = crate::pagecache::resident(dir);
    drop(eng);
    let mib = |b: u64| b as f64 / 1048576.0;
    eprintln!(
        "[{}] cold: evicted by {method}; resident {:.1} -> {:.1} MiB of {:.1} MiB, {:.1} MiB after open, {:.1} MiB after the gets",
        kind.name(),
        mib(before),
        mib(after),
        mib(total),
        mib(after_open),
        mib(after_reads),
    );
    Ok(json!({
        "cold_open_secs": open_secs,
        "cold_get_ops": reads,
        "cold_evict": method,
        "cold_bytes": total,
        "cold_resident_before": before,
        "cold_resident_after": after,
        "cold_resident_open": after_open,
        "cold_resident_end": after_reads,
    }))
}

/// Phase `durable`: fsync per write, 1 thread then 4 threads, on a fresh directory.
pub fn durable(kind: Kind, dir: &Path, ops_1: u64, ops_4: u64) -> Res<Value> {
    let o = OpenOpts {
        durability: Durability::Fsync,
        clock: None,
        ttl_secs: None,
    };
    let eng: Arc<dyn Engine> = open(kind, dir, &o)?.into();
    let t = Instant::now();
    for i in 0..ops_1 {
        eng.put(&key(i), &value(i, u64::MAX))?;
    }
    let one = rate(ops_1, t.elapsed().as_secs_f64());
    let per = ops_4 / 4;
    let t = Instant::now();
    let handles: Vec<_> = (0..4u64)
        .map(|th| {
            let eng = Arc::clone(&eng);
            std::thread::spawn(move || -> Res<()> {
                for j in 0..per {
                    let i = ops_1 + th * per + j;
                    eng.put(&key(i), &value(i, u64::MAX))?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "durable thread panicked")??;
    }
    let four = rate(per * 4, t.elapsed().as_secs_f64());
    Ok(json!({ "durable_1t": one, "durable_4t": four, "rss_durable": peak_rss() }))
}

/// Phase `space`, on a fresh directory: `n` keys filled, then `n` more operations in batches of
/// 1,000 (half overwrites of keys written so far, a quarter deletes of such keys, a quarter new
/// keys; each batch's puts, then its deletes), then the directory's bytes over the live items'
/// key and value bytes (116 each, live keys tracked by the harness): right after, after 10 idle
/// seconds (each engine's own background work only), and after the engine's full compaction.
pub fn space(kind: Kind, dir: &Path, n: u64) -> Res<Value> {
    let mut eng = open(kind, dir, &OpenOpts::relaxed())?;
    fill(&*eng, n)?;
    let mut live = vec![true; n as usize];
    let mut rng = Rng::new(0x2545_F491);
    let mut next = n;
    let mut puts: Vec<([u8; 16], [u8; VALUE_LEN])> = Vec::with_capacity(BATCH);
    let mut dels: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    for _ in 0..n.div_ceil(BATCH as u64) {
        let mut deleted = Vec::new();
        for _ in 0..BATCH {
            let r = rng.next();
            match r % 4 {
                0 | 1 => {
                    let i = (r >> 8) % next;
                    puts.push((key(i), value(i ^ 0xF00D, u64::MAX)));
                    live[i as usize] = true;
                }
                2 => {
                    let i = (r >> 8) % next;
                    dels.push(key(i).to_vec());
                    deleted.push(i);
                }
                _ => {
                    puts.push((key(next), value(next, u64::MAX)));
                    live.push(true);
                    next += 1;
                }
            }
        }
        let refs: Vec<(&[u8], &[u8])> = puts.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        eng.put_batch(&refs)?;
        eng.delete_batch(&dels)?;
        for i in deleted {
            live[i as usize] = false;
        }
        puts.clear();
        dels.clear();
    }
    eng.sync()?;
    let user = live.iter().filter(|l| **l).count() as f64 * (16 + VALUE_LEN) as f64;
    let churned = dir_bytes(dir) as f64 / user;
    std::thread::sleep(std::time::Duration::from_secs(10));
    let idle = dir_bytes(dir) as f64 / user;
    let full = if eng.compact_full()? {
        eng.sync()?;
        Some(dir_bytes(dir) as f64 / user)
    } else {
        None
    };
    Ok(json!({
        "space_churned": churned,
        "space_idle": idle,
        "space_full": full,
        "rss_space": peak_rss(),
    }))
}
