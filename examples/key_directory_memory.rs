//! Resident memory the key directory takes per key: writes `N` new 16-byte keys with 100-byte
//! values (batches of 100, no fsync) into a new keyspace and prints the growth of `RssAnon`
//! (anonymous memory: the key directory, and the expiry timers with `ttl`) per key.
//!
//! Run: `cargo run --release --example key_directory_memory -- 4000000 [ttl]`

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

/// `RssAnon` of this process in bytes (0 where /proc is missing).
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() -> ebbdb::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(4_000_000);
    let ttl = args.next().is_some_and(|a| a == "ttl");
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let default = if ttl {
        DefaultTtl::Seconds(3600)
    } else {
        DefaultTtl::Off
    };
    let ks = store.create_keyspace("k", default)?;
    let before = rss_anon();
    let value = [7u8; 100];
    let mut batch = WriteBatch::new();
    for i in 0..n {
        // A fixed permutation, so keys arrive in random order; then the counter.
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
        key[8..].copy_from_slice(&i.to_be_bytes());
        batch.put(&ks, key, value);
        if i % 100 == 99 {
            store.write_batch(std::mem::take(&mut batch))?;
        }
    }
    store.write_batch(batch)?;
    let grown = rss_anon().saturating_sub(before);
    #[allow(clippy::cast_precision_loss)] // a ratio to print
    let per_key = grown as f64 / n.max(1) as f64;
    println!(
        "{n} keys{}: RssAnon grew {per_key:.1} bytes per key (key bytes: 16)",
        if ttl { " with a TTL" } else { "" },
    );
    Ok(())
}
