//! Speed of issue 12's features, each against what a user would write without it:
//! - patch (`incr` of one field) vs read + `replace_item_with(if_match)`, same items, same run;
//! - a transactional batch of 100 upserts vs 100 single upserts, durable (`SyncPolicy::Always`);
//! - the lag from a write to its arrival on the change feed's push API (real clock);
//! - change-feed (latest version) read throughput from the beginning over N items.
//!
//! Run with: `cargo run --release --example patch_batch_feed` (`EBBDB_FEED_ITEMS`, default
//! 1,000,000, sets the change-feed size).

use std::time::Instant;

use ebbdb::{
    ChangeFeedOptions, ChangeFeedStart, ContainerProperties, Database, ItemOptions, Options,
    PatchOp, SyncPolicy, TransactionalBatch,
};
use serde_json::{json, Value};

fn rate(n: usize, secs: f64) -> String {
    format!("{:.0}/s", n as f64 / secs)
}

fn patch_vs_replace() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    let items = 10_000;
    for i in 0..items {
        c.create_item(
            &json!({"id": format!("i{i}"), "pk": format!("p{}", i % 100), "n": 0,
            "name": "some text of a typical item", "tags": ["a", "b", "c"], "price": 12.5}),
        )?;
    }
    let ops = 100_000;
    for round in 0..2 {
        let t = Instant::now();
        for k in 0..ops {
            let i = (k * 7919) % items;
            c.patch_item(
                format!("p{}", i % 100),
                &format!("i{i}"),
                &[PatchOp::incr("/n", 1)],
            )?;
        }
        let patch = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for k in 0..ops {
            let i = (k * 7919) % items;
            let (pk, id) = (format!("p{}", i % 100), format!("i{i}"));
            let mut v: Value = c.read_item(pk.as_str(), &id)?;
            let etag = v["_etag"].as_str().unwrap_or_default().to_string();
            v["n"] = json!(v["n"].as_i64().unwrap_or(0) + 1);
            c.replace_item_with(pk.as_str(), &id, &v, &ItemOptions::default().if_match(etag))?;
        }
        let rmw = t.elapsed().as_secs_f64();
        println!(
            "round {round}: patch incr {} vs read + replace(if_match) {} ({:.2}x), {ops} ops over {items} items, no fsync",
            rate(ops, patch),
            rate(ops, rmw),
            rmw / patch
        );
    }
    Ok(())
}

fn batch_vs_single() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Always))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    let rounds = 30;
    let t = Instant::now();
    for r in 0..rounds {
        for i in 0..100 {
            c.upsert_item(&json!({"id": format!("s{r}-{i}"), "pk": "p", "v": i}))?;
        }
    }
    let single = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for r in 0..rounds {
        let mut b = TransactionalBatch::new("p");
        for i in 0..100 {
            b.upsert_item(&json!({"id": format!("b{r}-{i}"), "pk": "p", "v": i}));
        }
        assert!(c.execute_batch(&b)?.is_success());
    }
    let batch = t.elapsed().as_secs_f64();
    let n = rounds * 100;
    println!(
        "durable upserts: 100 single {} ({:.1} ms per 100) vs batch of 100 {} ({:.2} ms per batch): {:.0}x",
        rate(n, single),
        single * 1000.0 / rounds as f64,
        rate(n, batch),
        batch * 1000.0 / rounds as f64,
        single / batch
    );
    Ok(())
}

fn feed_throughput() -> ebbdb::Result<()> {
    let n: usize = std::env::var("EBBDB_FEED_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    let t = Instant::now();
    for chunk in 0..n.div_ceil(100) {
        let mut b = TransactionalBatch::new("p");
        for i in chunk * 100..((chunk + 1) * 100).min(n) {
            b.upsert_item(&json!({"id": format!("{i:08}"), "pk": "p", "v": i}));
        }
        c.execute_batch(&b)?;
    }
    println!("loaded {n} items in {:.1} s", t.elapsed().as_secs_f64());
    for page_size in [1_000, 10_000] {
        let t = Instant::now();
        let mut got = 0;
        let mut opts = ChangeFeedOptions::default()
            .start(ChangeFeedStart::Beginning)
            .max_item_count(page_size);
        loop {
            let page = c.read_change_feed(&opts)?;
            if page.changes.is_empty() {
                break;
            }
            got += page.changes.len();
            opts = opts.start(ChangeFeedStart::Continuation(page.continuation));
        }
        assert_eq!(got, n);
        let secs = t.elapsed().as_secs_f64();
        println!(
            "change feed from the beginning, pages of {page_size}: {got} items in {secs:.1} s, {}",
            rate(got, secs)
        );
    }
    Ok(())
}

/// Lag from a write's call to its arrival on the push API (`into_receiver`), real clock.
fn push_lag() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    let rx = c
        .change_feed_iter(&ChangeFeedOptions::default().start(ChangeFeedStart::Now))?
        .into_receiver(4096);
    let n = 2_000;
    let start = Instant::now();
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || -> ebbdb::Result<Vec<f64>> {
            let mut sent = Vec::with_capacity(n);
            for i in 0..n {
                sent.push(start.elapsed().as_secs_f64());
                c.upsert_item(&json!({"id": format!("{i}"), "pk": "p"}))?;
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            Ok(sent)
        })
    };
    let mut arrived = vec![0.0; n];
    for _ in 0..n {
        let v = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| ebbdb::Error::BadRequest(e.to_string()))??;
        let i: usize = v["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        arrived[i] = start.elapsed().as_secs_f64();
    }
    let sent = writer
        .join()
        .map_err(|_| ebbdb::Error::BadRequest("writer panicked".into()))??;
    let mut lags: Vec<f64> = arrived
        .iter()
        .zip(&sent)
        .map(|(a, s)| (a - s).max(0.0))
        .collect();
    lags.sort_by(f64::total_cmp);
    let pct = |p: f64| lags[((lags.len() - 1) as f64 * p) as usize] * 1000.0;
    println!(
        "push API lag from a write call (one writer, {n} upserts 0.5 ms apart): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    Ok(())
}

fn main() -> ebbdb::Result<()> {
    patch_vs_replace()?;
    batch_vs_single()?;
    push_lag()?;
    feed_throughput()
}
