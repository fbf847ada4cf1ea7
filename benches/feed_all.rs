//! The all-versions-and-deletes change feed (DESIGN.md §16.2): read throughput from the
//! beginning over N items (items/s), and the lag from an item's expiry instant to its delivery
//! on the push API with the real clock (p50/p99/max).
//!
//! `cargo bench --bench feed_all` (`EBBDB_FEED_ITEMS`, default 1,000,000;
//! `EBBDB_FEED_EXPIRIES`, default 200).

use std::time::{Duration, Instant};

use ebbdb::clock::{Clock, SystemClock};
use ebbdb::{
    ChangeFeedMode, ChangeFeedOptions, ChangeFeedStart, ContainerProperties, Database, DefaultTtl,
    Options, SyncPolicy, TransactionalBatch,
};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = env_usize("EBBDB_FEED_ITEMS", 1_000_000);
    let expiries = env_usize("EBBDB_FEED_EXPIRIES", 200);
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let c = db.create_container(
        ContainerProperties::new("c", "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_change_feed_retention_minutes(24 * 60),
    )?;

    // N creates, written in batches of 100 (one partition key per batch).
    let t = Instant::now();
    for b in 0..n.div_ceil(100) {
        let mut batch = TransactionalBatch::new(format!("p{b}"));
        for i in b * 100..((b + 1) * 100).min(n) {
            batch.create_item(&json!({"id": format!("i{i}"), "pk": format!("p{b}"), "n": i}));
        }
        assert!(c.execute_batch(&batch)?.is_success());
    }
    println!(
        "write {n} items with history (batches of 100): {:.2} s",
        t.elapsed().as_secs_f64()
    );

    for page_size in [10_000usize, 100_000] {
        let t = Instant::now();
        let mut opts = ChangeFeedOptions::default()
            .mode(ChangeFeedMode::AllVersionsAndDeletes)
            .max_item_count(page_size);
        let mut read = 0;
        loop {
            let page = c.read_change_feed(&opts)?;
            if page.changes.is_empty() {
                break;
            }
            read += page.changes.len();
            opts = opts.start(ChangeFeedStart::Continuation(page.continuation));
        }
        assert_eq!(read, n);
        let s = t.elapsed().as_secs_f64();
        println!(
            "read {read} changes from the beginning, pages of {page_size}: {s:.2} s = {:.0} items/s",
            read as f64 / s
        );
    }

    // Expiry lag on the push API: items with ttl 1..=3 s created over a few seconds; each
    // expiry's delivery time minus its instant ((_ts + ttl) * 1000 ms).
    let e = db.create_container(
        ContainerProperties::new("e", "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_change_feed_retention_minutes(60),
    )?;
    let rx = e
        .change_feed_iter(
            &ChangeFeedOptions::default()
                .mode(ChangeFeedMode::AllVersionsAndDeletes)
                .start(ChangeFeedStart::Now),
        )?
        .into_receiver(expiries * 4);
    // Deliveries are timestamped by their own thread as they arrive.
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(expiries);
        while got.len() < expiries {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(Ok(v)) if v["metadata"]["timeToLiveExpired"] == true => {
                    let now = SystemClock.now_unix_millis();
                    got.push((v["metadata"]["id"].as_str().unwrap_or("").to_string(), now));
                }
                Ok(Ok(_)) => {}
                _ => break,
            }
        }
        got
    });
    let mut instants = std::collections::HashMap::new();
    for i in 0..expiries {
        let ttl = 1 + (i % 3) as u64;
        let stored = e.create_item(&json!({"id": format!("x{i}"), "pk": "p", "ttl": ttl}))?;
        let ts = stored["_ts"].as_u64().ok_or("ts")?;
        instants.insert(format!("x{i}"), (ts + ttl) * 1000);
        std::thread::sleep(Duration::from_millis(13));
    }
    let got = receiver.join().map_err(|_| "receiver panicked")?;
    assert_eq!(got.len(), expiries, "every expiry delivered once");
    let mut lags = Vec::with_capacity(expiries);
    for (id, now) in got {
        let at = instants.get(&id).ok_or("unknown id")?;
        if now < *at {
            println!("early delivery of {id}: {} ms before its instant", at - now);
        }
        lags.push(now.saturating_sub(*at));
    }
    lags.sort_unstable();
    let pct = |p: f64| lags[((lags.len() as f64 * p) as usize).min(lags.len() - 1)];
    println!(
        "push API expiry lag over {expiries} expiries (real clock): p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        lags[lags.len() - 1]
    );
    Ok(())
}
