//! Query speed (criterion): Cosmos SQL over ~300-byte JSON items, with and without secondary
//! indexes. The SQLite comparison of the same workloads is `benches/peers` (`--query`).
//!
//! Run: `cargo bench --bench query` (1 M items; `EBBDB_QUERY_ITEMS=100000` for a quicker
//! run). Items: `id`, `pk` among 1,000 values, `status` among 10, `bucket` among 100, a number
//! `n`, a nested object and an array. The indexed container indexes `/status/?`, `/bucket/?`
//! and `/n/?`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ebbdb::{Container, ContainerProperties, Database, DefaultTtl, Options, Query, SyncPolicy};
use serde::Deserialize;
use serde_json::{json, Value};

fn item(i: u64) -> Value {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    json!({
        "id": format!("item-{i:08}"),
        "pk": format!("p{:04}", i % 1000),
        "status": format!("status-{}", (x >> 8) % 10),
        "bucket": (x >> 16) % 100,
        "n": x % 1_000_000,
        "customer": {"name": format!("Customer {}", x % 50_000), "city": "Lisbon", "zip": format!("{:05}", x % 99_999)},
        "tags": ["alpha", "beta", format!("t{}", x % 7)],
        "note": "a short free-text note to bring the item to about three hundred bytes"
    })
}

fn items() -> u64 {
    std::env::var("EBBDB_QUERY_ITEMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

fn container(db: &Database, id: &str, indexed: bool) -> Container {
    let p = ContainerProperties::new(id, "/pk").with_default_ttl(DefaultTtl::NeverExpire);
    let p = if indexed {
        p.with_included_paths(["/status/?", "/bucket/?", "/n/?"])
    } else {
        p
    };
    db.create_container(p).expect("container")
}

fn count(c: &Container, text: &str) -> usize {
    c.query::<Value>(&Query::new(text)).expect("query").count()
}

/// An item as an application would declare it (system properties ignored).
#[derive(Deserialize)]
struct Item {
    id: String,
    pk: String,
    status: String,
    bucket: u64,
    n: u64,
    customer: Customer,
    tags: Vec<String>,
    note: String,
}

#[derive(Deserialize)]
struct Customer {
    name: String,
    city: String,
    zip: String,
}

/// As [`count`], the rows parsed into [`Item`]s, each read (so none is optimised away).
fn count_typed(c: &Container, text: &str) -> usize {
    c.query::<Item>(&Query::new(text))
        .expect("query")
        .map(|r| {
            let it = r.expect("row");
            let c = &it.customer;
            std::hint::black_box((&it.id, &it.pk, &it.status, it.bucket, it.n, &it.tags));
            std::hint::black_box((&it.note, &c.name, &c.city, &c.zip));
        })
        .count()
}

fn bench(cr: &mut Criterion) {
    let n = items();
    let dir = tempfile::tempdir().expect("tempdir");
    let db =
        Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Never)).expect("open");
    let plain = container(&db, "plain", false);
    let indexed = container(&db, "indexed", true);
    for i in 0..n {
        let it = item(i);
        plain.create_item(&it).expect("create");
        indexed.create_item(&it).expect("create");
    }
    let mut g = cr.benchmark_group("query");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.bench_function("single partition (n/1000 items)", |b| {
        b.iter(|| count(&plain, "SELECT * FROM c WHERE c.pk = 'p0042'"));
    });
    g.throughput(Throughput::Elements(n));
    g.bench_function("filter 1%, no index (scan)", |b| {
        b.iter(|| count(&plain, "SELECT * FROM c WHERE c.bucket = 42"));
    });
    g.throughput(Throughput::Elements(n / 100));
    g.bench_function("filter 1%, indexed", |b| {
        b.iter(|| count(&indexed, "SELECT * FROM c WHERE c.bucket = 42"));
    });
    // The same two with the rows parsed into a struct, as an application would: the caller's
    // parse of 10,000 rows into `Value`s is about 10 ms of the indexed query (DESIGN §14.1).
    g.throughput(Throughput::Elements(n));
    g.bench_function("filter 1%, no index (scan), typed rows", |b| {
        b.iter(|| count_typed(&plain, "SELECT * FROM c WHERE c.bucket = 42"));
    });
    g.throughput(Throughput::Elements(n / 100));
    g.bench_function("filter 1%, indexed, typed rows", |b| {
        b.iter(|| count_typed(&indexed, "SELECT * FROM c WHERE c.bucket = 42"));
    });
    g.bench_function("range 1%, indexed", |b| {
        b.iter(|| {
            count(
                &indexed,
                "SELECT * FROM c WHERE c.n >= 500000 AND c.n < 510000",
            )
        });
    });
    g.throughput(Throughput::Elements(10));
    // Served by an index walk in order, stopping after 10 rows (DESIGN §14.1).
    g.bench_function("TOP 10 ORDER BY indexed n, range on n", |b| {
        b.iter(|| {
            count(
                &indexed,
                "SELECT TOP 10 * FROM c WHERE c.n >= 500000 ORDER BY c.n",
            )
        });
    });
    g.throughput(Throughput::Elements(n));
    g.bench_function("COUNT(1)", |b| {
        b.iter(|| count(&plain, "SELECT VALUE COUNT(1) FROM c"));
    });
    g.bench_function("COUNT(1) WHERE indexed status", |b| {
        b.iter(|| {
            count(
                &indexed,
                "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'status-3'",
            )
        });
    });
    g.finish();

    let mut w = cr.benchmark_group("writes");
    w.sample_size(10).throughput(Throughput::Elements(1000));
    let mut next = n;
    for (name, c) in [("no index", &plain), ("3 indexed paths", &indexed)] {
        w.bench_function(name, |b| {
            b.iter_batched(
                || {
                    next += 1000;
                    (next - 1000..next).map(item).collect::<Vec<Value>>()
                },
                |batch| {
                    for it in &batch {
                        c.upsert_item(it).expect("upsert");
                    }
                },
                BatchSize::PerIteration,
            );
        });
    }
    w.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
