//! The engine's headline figures at 1 M keys, printed as a table (not criterion: each figure is
//! one long run, and RSS must be read around a single load).
//!
//! Run: `cargo bench --bench figures` (EBBDB_KEYS=200000 for a quicker run).
//! 16-byte keys, 100-byte values, `SyncPolicy::Never` unless said.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, Store, SyncPolicy};

fn keys(n: usize) -> Vec<[u8; 16]> {
    // A fixed permutation (multiplicative hash) so inserts arrive in random key order.
    (0..n as u64)
        .map(|i| {
            let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0xA5A5_A5A5;
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&x.to_be_bytes());
            k[8..].copy_from_slice(&i.to_be_bytes());
            k
        })
        .collect()
}

/// `(RssAnon, RssFile)` of this process in bytes: anonymous memory (the key directory, timers)
/// apart from the file-backed pages of mapped segments an open touched, which the kernel can
/// drop under memory pressure.
fn rss_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("RssAnon:"), field("RssFile:"))
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:>10.0} ops/s", n as f64 / d.as_secs_f64())
}

/// Child mode: open the store in `dir` in a fresh process and print its RSS growth per key.
fn rss_child(dir: &str, n: usize) -> ebbdb::Result<()> {
    let before = rss_bytes();
    let store = Store::open_with(dir, Options::default())?;
    let after = rss_bytes();
    assert_eq!(store.keyspace("bench")?.len()?, n);
    let per_key = |a: u64, b: u64| a.saturating_sub(b) as f64 / n as f64;
    println!(
        "{:.1} anonymous, {:.1} file-backed",
        per_key(after.0, before.0),
        per_key(after.1, before.1)
    );
    Ok(())
}

/// The RSS growth per key of opening the `n`-key store in `dir`, measured in a fresh process
/// ([`rss_child`]): memory freed earlier in this one would hide growth.
fn rss_per_key_after_open(dir: &std::path::Path, n: usize) -> ebbdb::Result<String> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .env("EBBDB_RSS_CHILD", dir)
        .env("EBBDB_KEYS", n.to_string())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Bytes of the regular files in `dir` (allocated or logical, whichever is smaller).
fn dir_bytes(dir: &std::path::Path) -> ebbdb::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len().min(meta.blocks() * 512);
        }
    }
    Ok(total)
}

/// Space after churn: `n` keys in batches of 1,000, then `n` more operations (half overwrites
/// of existing keys, a quarter deletes, a quarter new keys); the directory's bytes over the
/// live items' key and value bytes right after, after ten idle seconds (background upkeep
/// only), and after `compact_full()`.
fn space_after_churn(n: usize) -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let ks = store.create_keyspace("bench", DefaultTtl::Off)?;
    let key = |i: u64| {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0x5A5A;
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&x.to_be_bytes());
        k[8..].copy_from_slice(&i.to_be_bytes());
        k
    };
    let n = n as u64;
    for chunk in 0..n.div_ceil(1_000) {
        let mut batch = ebbdb::WriteBatch::new();
        for i in chunk * 1_000..((chunk + 1) * 1_000).min(n) {
            batch.put(&ks, key(i), [1u8; 100]);
        }
        store.write_batch(batch)?;
    }
    let (mut x, mut next) = (0x2545_F491_4F6C_DD1D_u64, n);
    for _ in 0..n.div_ceil(1_000) {
        let mut batch = ebbdb::WriteBatch::new();
        for _ in 0..1_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 4 {
                0 | 1 => batch.put(&ks, key(x % next), [2u8; 100]),
                2 => batch.delete(&ks, key(x % next)),
                _ => {
                    next += 1;
                    batch.put(&ks, key(next - 1), [3u8; 100])
                }
            };
        }
        store.write_batch(batch)?;
    }
    store.sync()?;
    let user = |store: &Store| store.stats().live_items as f64 * 116.0;
    let churned = dir_bytes(dir.path())? as f64 / user(&store);
    std::thread::sleep(Duration::from_secs(10));
    let idle = dir_bytes(dir.path())? as f64 / user(&store);
    let merges = store.stats().merges;
    store.compact_full()?;
    let full = dir_bytes(dir.path())? as f64 / user(&store);
    println!(
        "space after churn, over live key+value bytes: {churned:.2}x; 10 s idle {idle:.2}x ({merges} merges); compact_full {full:.2}x"
    );
    Ok(())
}

/// A default-TTL change on a keyspace of `n` keys (written without fsync, so the change's
/// manifest fsync waits for them) while another thread puts to another keyspace: the longest
/// change and the slowest put.
fn ttl_change_stall(n: usize) -> ebbdb::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let ks = store.create_keyspace("bench", DefaultTtl::Seconds(86_400))?;
    let other = store.create_keyspace("other", DefaultTtl::Off)?;
    for (i, chunk) in keys(n).chunks(1_000).enumerate() {
        let mut batch = ebbdb::WriteBatch::new();
        for k in chunk {
            batch.put(&ks, k, [i as u8; 100]);
        }
        store.write_batch(batch)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> ebbdb::Result<Duration> {
            let mut slowest = Duration::ZERO;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                other.put(i.to_be_bytes(), [9u8; 100])?;
                slowest = slowest.max(t.elapsed());
                i += 1;
            }
            Ok(slowest)
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut longest = Duration::ZERO;
    for d in [
        DefaultTtl::Seconds(3_600),
        DefaultTtl::NeverExpire,
        DefaultTtl::Seconds(7_200),
        DefaultTtl::Off,
        DefaultTtl::Seconds(600),
    ] {
        let t = Instant::now();
        ks.set_default_ttl(d)?;
        longest = longest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let slowest = writer.join().map_err(|_| ebbdb::Error::Closed)??;
    println!(
        "default-TTL change, {n} keys: longest {:.1} ms; slowest put to another keyspace meanwhile {:.1} ms",
        longest.as_secs_f64() * 1e3,
        slowest.as_secs_f64() * 1e3
    );
    Ok(())
}

fn main() -> ebbdb::Result<()> {
    if let Ok(dir) = std::env::var("EBBDB_RSS_CHILD") {
        let n = std::env::var("EBBDB_KEYS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        return rss_child(&dir, n);
    }
    let n: usize = std::env::var("EBBDB_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let ks_bytes = keys(n);
    let value = [7u8; 100];
    let dir = tempfile::tempdir()?;
    println!("ebbdb figures, {n} keys, 16-byte keys, 100-byte values");

    // Insert throughput, random order, no fsync.
    {
        let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
        let ks = store.create_keyspace("bench", DefaultTtl::Off)?;
        let t = Instant::now();
        for k in &ks_bytes {
            ks.put(k, value)?;
        }
        store.sync()?;
        println!(
            "insert (1 thread, random order)        {}",
            rate(n, t.elapsed())
        );

        // Warm random gets.
        let mut idx: Vec<usize> = (0..n).collect();
        let mut x = 0x1234_5678_u64;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            idx.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let t = Instant::now();
        let mut found = 0usize;
        for &i in &idx {
            found += usize::from(ks.get(ks_bytes[i])?.is_some());
        }
        assert_eq!(found, n);
        println!(
            "get (1 thread, uniform random, warm)    {}",
            rate(n, t.elapsed())
        );
        let t = Instant::now();
        let mut bytes = 0usize;
        for &i in &idx {
            bytes += ks.get_with(ks_bytes[i], <[u8]>::len)?.unwrap_or(0);
        }
        assert_eq!(bytes, n * value.len());
        println!(
            "get_with (zero-copy, same keys)         {}",
            rate(n, t.elapsed())
        );
        // The first scan orders the key directory, which was hashed since the keyspace was
        // created (DESIGN.md §3.1); another thread puts to another keyspace meanwhile, and
        // its slowest put shows how long the ordering held the write path.
        let other = store.create_keyspace("other", DefaultTtl::Off)?;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let putter = {
            let (other, done) = (other.clone(), Arc::clone(&done));
            std::thread::spawn(move || -> ebbdb::Result<(Duration, u64)> {
                let mut slowest = Duration::ZERO;
                let mut i = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = Instant::now();
                    other.put(i.to_be_bytes(), [1u8; 100])?;
                    slowest = slowest.max(t.elapsed());
                    i += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok((slowest, i))
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        let scanned = ks.iter().filter(Result::is_ok).count();
        assert_eq!(scanned, n);
        let took = t.elapsed();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let (slowest, puts) = putter.join().expect("putter")?;
        println!(
            "full scan (keys in order; the first)    {}  (slowest of {puts} puts to another keyspace meanwhile {:.2} ms)",
            rate(n, took),
            slowest.as_secs_f64() * 1e3
        );
        let t = Instant::now();
        let (mut scanned, mut bytes) = (0usize, 0usize);
        let mut it = ks.iter();
        while let Some(len) = it.next_with(|_, v| v.len()) {
            bytes += len?;
            scanned += 1;
        }
        assert_eq!((scanned, bytes), (n, n * value.len()));
        println!(
            "full scan, zero-copy (Iter::next_with)  {}",
            rate(n, t.elapsed())
        );
    }

    // Open (recovery) time with hints and without, and RSS per key.
    {
        // As the fill left it: random keys in write order, so every sealed segment has its
        // hint (scanning one would need a sort). Best of 3.
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
            best = best.min(t.elapsed().as_secs_f64());
            drop(store);
        }
        println!("open after the fill (hinted)            {best:>10.3} s  (best of 3)");
        // Point reads right after a restart: open builds the key directory hashed, as a
        // keyspace written since open has it (DESIGN.md §3.1, "Open builds hashed maps").
        // A prime stride (every key once, far apart, unless it divides the key count).
        let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
        let ks = store.keyspace("bench")?;
        let t = Instant::now();
        let mut found = 0usize;
        for i in 0..n {
            found += usize::from(ks.get(ks_bytes[i * 7_919 % n])?.is_some());
        }
        assert_eq!(found, n);
        println!(
            "get after reopen (uniform random)       {}",
            rate(n, t.elapsed())
        );
        drop(ks);
        drop(store);
        let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
        store.compact_full()?;
        drop(store);
        let t = Instant::now();
        let store = Store::open_with(dir.path(), Options::default().use_hints(false))?;
        let no_hints = t.elapsed();
        drop(store);
        let t = Instant::now();
        let store = Store::open_with(dir.path(), Options::default())?;
        let with_hints = t.elapsed();
        assert_eq!(store.keyspace("bench")?.len()?, n);
        drop(store);
        println!(
            "open without hints                      {:>10.3} s",
            no_hints.as_secs_f64()
        );
        let count = |ext: &str| -> usize {
            std::fs::read_dir(dir.path()).map_or(0, |d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.path().extension().is_some_and(|x| x == ext))
                })
                .count()
            })
        };
        // After a full compaction the segments hold small records in key order: by default
        // they go without hints (DESIGN.md §2.3), and this open scans them too.
        println!(
            "open, default ({} hints, {} segments)    {:>10.3} s  ({:.1}x faster)",
            count("hint"),
            count("seg"),
            with_hints.as_secs_f64(),
            no_hints.as_secs_f64() / with_hints.as_secs_f64()
        );
        let per_key = rss_per_key_after_open(dir.path(), n)?;
        println!("RSS growth per key after open           {per_key} bytes (key bytes: 16)");
    }

    // Open with hints of a store whose keys carry their own TTLs (1 h to 1 day, so none
    // expires during the run): the open also arms a timer per key and counts the census.
    {
        let dir = tempfile::tempdir()?;
        let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
        let ks = store.create_keyspace("bench", DefaultTtl::NeverExpire)?;
        for (i, chunk) in ks_bytes.chunks(1_000).enumerate() {
            let mut batch = ebbdb::WriteBatch::new();
            for (j, k) in chunk.iter().enumerate() {
                let spread = ((i * 1_000 + j) as u64).wrapping_mul(0x9E37_79B9) % 82_800;
                batch.put_with_ttl(&ks, k, value, ebbdb::Ttl::Seconds(3_600 + spread as u32));
            }
            store.write_batch(batch)?;
        }
        store.compact_full()?;
        drop(ks);
        drop(store);
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let store = Store::open_with(dir.path(), Options::default())?;
            best = best.min(t.elapsed().as_secs_f64());
            assert_eq!(store.keyspace("bench")?.len()?, n);
        }
        println!("open, every key with a TTL (hinted)     {best:>10.3} s  (best of 3)");
        let per_key = rss_per_key_after_open(dir.path(), n)?;
        println!("RSS growth per key after that open      {per_key} bytes (key bytes: 16)");
    }

    space_after_churn(n)?;
    ttl_change_stall(n)?;

    // Durable puts: 1 thread vs 4 threads (group commit).
    for threads in [1usize, 4] {
        let d = tempfile::tempdir()?;
        let store = Store::open_with(d.path(), Options::default().sync(SyncPolicy::Always))?;
        let ks = store.create_keyspace("d", DefaultTtl::Off)?;
        let per = 2_000;
        let t = Instant::now();
        std::thread::scope(|s| {
            for th in 0..threads {
                let ks = ks.clone();
                let ks_bytes = &ks_bytes;
                s.spawn(move || {
                    for i in 0..per {
                        let _ = ks.put(ks_bytes[(th * per + i) % ks_bytes.len()], value);
                    }
                });
            }
        });
        println!(
            "durable put (fsync), {threads} thread(s)         {}",
            rate(threads * per, t.elapsed())
        );
    }

    // Document layer vs engine on the same bytes: 1 KiB JSON documents.
    {
        let d = tempfile::tempdir()?;
        let docs = 50_000usize.min(n);
        let db = Database::open_with(d.path(), Options::default().sync(SyncPolicy::Never))?;
        let c = db.create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(3600)),
        )?;
        let filler = "x".repeat(900);
        let items: Vec<serde_json::Value> = (0..docs)
            .map(|i| serde_json::json!({"id": format!("item{i}"), "pk": format!("p{}", i % 100), "body": filler}))
            .collect();
        let raw: Vec<Vec<u8>> = items
            .iter()
            .map(|v| serde_json::to_vec(v).unwrap_or_default())
            .collect();
        let t = Instant::now();
        for it in &items {
            c.create_item(it)?;
        }
        let doc_create = t.elapsed();
        let t = Instant::now();
        for i in 0..docs {
            let _: serde_json::Value = c.read_item(format!("p{}", i % 100), &format!("item{i}"))?;
        }
        let doc_read = t.elapsed();
        let t = Instant::now();
        for it in &items {
            c.upsert_item(it)?;
        }
        let doc_upsert = t.elapsed();
        let ks = db
            .store()
            .create_keyspace("raw", DefaultTtl::Seconds(3600))?;
        let t = Instant::now();
        for (i, r) in raw.iter().enumerate() {
            ks.put(format!("p{}/item{i}", i % 100), r)?;
        }
        let raw_put = t.elapsed();
        let t = Instant::now();
        for i in 0..docs {
            let _ = ks.get(format!("p{}/item{i}", i % 100))?;
        }
        let raw_get = t.elapsed();
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "doc create_item (1 KiB)                 {}  ({:.2}x engine put)",
            rate(docs, doc_create),
            ratio(doc_create, raw_put)
        );
        println!(
            "doc upsert_item (1 KiB)                 {}  ({:.2}x engine put)",
            rate(docs, doc_upsert),
            ratio(doc_upsert, raw_put)
        );
        println!(
            "doc read_item   (1 KiB)                 {}  ({:.2}x engine get)",
            rate(docs, doc_read),
            ratio(doc_read, raw_get)
        );
        println!(
            "engine put      (same bytes)            {}",
            rate(docs, raw_put)
        );
        println!(
            "engine get      (same bytes)            {}",
            rate(docs, raw_get)
        );

        // Two threads.
        let c = Arc::new(c);
        let t = Instant::now();
        std::thread::scope(|s| {
            for th in 0..2 {
                let c = Arc::clone(&c);
                let items = &items;
                s.spawn(move || {
                    for it in items.iter().skip(th).step_by(2) {
                        let _ = c.upsert_item(it);
                    }
                });
            }
        });
        let doc2 = t.elapsed();
        let t = Instant::now();
        std::thread::scope(|s| {
            for th in 0..2 {
                let ks = ks.clone();
                let raw = &raw;
                s.spawn(move || {
                    for (i, r) in raw.iter().enumerate().skip(th).step_by(2) {
                        let _ = ks.put(format!("p{}/item{i}", i % 100), r);
                    }
                });
            }
        });
        let raw2 = t.elapsed();
        println!(
            "doc upsert_item, 2 threads              {}  ({:.2}x engine put, 2 threads)",
            rate(docs, doc2),
            ratio(doc2, raw2)
        );
    }
    Ok(())
}
