//! Full-scan rate of 1 M random 16-byte keys (100-byte values, no TTL) written in random
//! order, before and after `compact_full()`: a merge writes the records that never expire in
//! key order, so the compacted store scans sequentially (DESIGN.md §7, "Output order").
//!
//! ```sh
//! cargo run --release --example scan_after_compaction
//! ```

use std::time::Instant;

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

fn scans(ks: &ebbdb::Keyspace, when: &str) -> ebbdb::Result<()> {
    for round in 0..3 {
        let t = Instant::now();
        let mut n = 0u64;
        for kv in ks.iter() {
            kv?;
            n += 1;
        }
        let rate = n as f64 / t.elapsed().as_secs_f64() / 1e6;
        println!("{when}, scan {round}: {n} keys, {rate:.2} M keys/s");
    }
    Ok(())
}

fn main() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let ks = store.create_keyspace("k", DefaultTtl::Off)?;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut batch = WriteBatch::new();
    for i in 0..1_000_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&x.to_be_bytes());
        key[8..].copy_from_slice(&i.to_be_bytes());
        batch.put(&ks, key, [7u8; 100]);
        if batch.len() == 1000 {
            store.write_batch(std::mem::take(&mut batch))?;
        }
    }
    scans(&ks, "written in random order")?;
    let t = Instant::now();
    store.compact_full()?;
    println!("compact_full: {:.2} s", t.elapsed().as_secs_f64());
    scans(&ks, "after compact_full")?;
    Ok(())
}
