//! Open time of a store of 1 M random 16-byte keys (100-byte values) in a fresh process:
//! open, then one `get`, the way an application starts. The first run writes the store into
//! the directory given (and closes it cleanly, so its segments are hinted); every run then
//! opens it once and prints the time. Run it several times, each a new process, so that each
//! open pays what a restarted application pays (its memory faulted in for the first time):
//!
//! ```sh
//! cargo build --release --example open_fresh
//! for i in 1 2 3 4 5; do ./target/release/examples/open_fresh /tmp/ebbdb-open; done
//! ```
//!
//! The warming of the page cache after open (`Options::warm_on_open`) is off, so that only
//! the open is timed; the OS page cache is not dropped (see `benches/peers` for that).

use std::path::PathBuf;
use std::time::Instant;

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, WriteBatch};

const KEYS: u64 = 1_000_000;

/// A random-looking 16-byte key for `i`: 8 mixed bytes, then `i`.
fn key(i: u64) -> [u8; 16] {
    let mut x = i ^ 0x5EED;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&x.to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

fn main() -> ebbdb::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "/tmp/ebbdb-open".into()),
    );
    if !dir.exists() {
        let store = Store::open_with(&dir, Options::default().sync(SyncPolicy::Never))?;
        let ks = store.create_keyspace("k", DefaultTtl::Off)?;
        let mut batch = WriteBatch::new();
        for i in 0..KEYS {
            batch.put(&ks, key(i), [7u8; 100]);
            if batch.len() == 1000 {
                store.write_batch(std::mem::take(&mut batch))?;
            }
        }
        store.write_batch(batch)?;
        println!("wrote {KEYS} keys into {}", dir.display());
    }
    let t = Instant::now();
    let store = Store::open_with(
        &dir,
        Options::default()
            .sync(SyncPolicy::Never)
            .warm_on_open(false),
    )?;
    let ks = store.keyspace("k")?;
    let found = ks.get(key(5))?.is_some();
    let took = t.elapsed();
    println!(
        "open and a first get: {:.1} ms (key found: {found})",
        took.as_secs_f64() * 1e3
    );
    Ok(())
}
