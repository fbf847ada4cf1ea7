//! Expiry notification lag with the real clock: 100 k items that expire in the same second;
//! for each event, the time from the item's expiry (`expired_at`, a whole second) to its
//! arrival at a subscriber. The worker ticks every 250 ms (the default).
//!
//! Run: `cargo bench --bench expiry_lag` (EBBDB_LAG_ITEMS to change the count).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn main() -> ebbdb::Result<()> {
    let n: usize = std::env::var("EBBDB_LAG_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let events = store.subscribe_expirations();
    let ks = store.create_keyspace("lag", DefaultTtl::NeverExpire)?;
    // Start just after a second boundary so all writes land in one second.
    while now_ms() % 1000 > 50 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let written_in = now_ms() / 1000;
    for i in 0..n as u64 {
        ks.put_with_ttl(i.to_be_bytes(), [0u8; 32], Ttl::Seconds(2))?;
    }
    let last_write = now_ms() / 1000;
    let mut lags = Vec::with_capacity(n);
    while lags.len() < n {
        match events.recv_timeout(Duration::from_secs(30)) {
            Ok(ev) => lags.push(now_ms().saturating_sub(ev.expired_at * 1000)),
            Err(_) => break,
        }
    }
    lags.sort_unstable();
    let pct = |p: f64| {
        lags.get(((lags.len() as f64 * p) as usize).min(lags.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "expiry lag, {n} items written in second {} (last write second {}), {} events received",
        written_in,
        last_write,
        lags.len()
    );
    println!(
        "lag from expiry second to event: p50 {} ms, p99 {} ms, max {} ms",
        pct(0.50),
        pct(0.99),
        lags.last().copied().unwrap_or(0)
    );
    Ok(())
}
