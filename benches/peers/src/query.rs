//! The query comparison: ebbdb's Cosmos SQL over JSON items, with and without secondary
//! indexes, against SQLite holding the same JSON as text, queried with `json_extract`, with and
//! without an expression index. Same items, same machine, same run.
//!
//! Items (~300 bytes as stored): `id`, `pk` among 1,000 values, `status` among 10, `bucket`
//! among 100 (the 1 % filter), a number `n`, a nested object and an array. The indexed ebbdb
//! container indexes `/status/?`, `/bucket/?` and `/n/?`; SQLite gets the same three
//! expression indexes. Each query is run 5 times; the median is reported.

use std::time::{Duration, Instant};

use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, Query, SyncPolicy};
use rusqlite::{params, Connection};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::engines::Res;

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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(mut f: impl FnMut() -> Res<T>) -> Res<(Duration, T)> {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let t = Instant::now();
        last = Some(f()?);
        times.push(t.elapsed());
    }
    Ok((median(times), last.ok_or("no run")?))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn rows(c: &ebbdb::Container, text: &str) -> Res<usize> {
    Ok(c.query::<Value>(&Query::new(text))?.count())
}

/// Rows as the stored JSON text, unparsed (`Box<RawValue>`): what a service that forwards
/// items as JSON takes, and what SQLite's `body` column gives before the caller parses it.
fn text_rows(c: &ebbdb::Container, text: &str) -> Res<usize> {
    let mut k = 0;
    for r in c.query::<Box<RawValue>>(&Query::new(text))? {
        if r?.get().starts_with('{') {
            k += 1;
        }
    }
    Ok(k)
}

fn first_u64(c: &ebbdb::Container, text: &str) -> Res<u64> {
    let v: Vec<Value> = c
        .query::<Value>(&Query::new(text))?
        .collect::<ebbdb::Result<_>>()?;
    Ok(v.first().and_then(Value::as_u64).unwrap_or(0))
}

pub fn run() -> Res<()> {
    let n: u64 = std::env::var("PEERS_QUERY_ITEMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(
        dir.path().join("ebbdb"),
        Options::default().sync(SyncPolicy::Never),
    )?;
    let plain = db.create_container(
        ContainerProperties::new("plain", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
    )?;
    let indexed = db.create_container(
        ContainerProperties::new("indexed", "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_included_paths(["/status/?", "/bucket/?", "/n/?"]),
    )?;
    let items: Vec<Value> = (0..n).map(item).collect();
    let bytes = serde_json::to_vec(&items[0])?.len();
    println!("items: {n}, first item {bytes} bytes as JSON (+ ~70 bytes of _ts/_etag in ebbdb)");

    // Writes: one create per item, the two containers taking turns per 10,000 items so both
    // see the same store size and background work.
    let (mut w_plain, mut w_indexed) = (Duration::ZERO, Duration::ZERO);
    for chunk in items.chunks(10_000) {
        let t = Instant::now();
        for it in chunk {
            plain.create_item(it)?;
        }
        w_plain += t.elapsed();
        let t = Instant::now();
        for it in chunk {
            indexed.create_item(it)?;
        }
        w_indexed += t.elapsed();
    }

    let conn = Connection::open(dir.path().join("sqlite.db"))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;
         CREATE TABLE docs (pk TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (pk, id));
         CREATE TABLE docs_ix (pk TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (pk, id));
         CREATE INDEX ix_status ON docs_ix (json_extract(body, '$.status'));
         CREATE INDEX ix_bucket ON docs_ix (json_extract(body, '$.bucket'));
         CREATE INDEX ix_n ON docs_ix (json_extract(body, '$.n'));",
    )?;
    let sqlite_load = |table: &str| -> Res<Duration> {
        let t = Instant::now();
        for chunk in items.chunks(10_000) {
            let tx = conn.unchecked_transaction()?;
            {
                let mut st = tx.prepare_cached(&format!(
                    "INSERT INTO {table} (pk, id, body) VALUES (?1, ?2, ?3)"
                ))?;
                for it in chunk {
                    st.execute(params![
                        it["pk"].as_str(),
                        it["id"].as_str(),
                        it.to_string()
                    ])?;
                }
            }
            tx.commit()?;
        }
        Ok(t.elapsed())
    };
    let s_plain = sqlite_load("docs")?;
    let s_indexed = sqlite_load("docs_ix")?;

    let rate = |d: Duration| format!("{:.0} items/s", n as f64 / d.as_secs_f64());
    println!();
    println!("| measurement | ebbdb | SQLite | ebbdb / SQLite |");
    println!("|---|---|---|---|");
    println!(
        "| writes, no index | {} | {} (10k per transaction) | |",
        rate(w_plain),
        rate(s_plain)
    );
    println!(
        "| writes, 3 indexed paths | {} ({:.2}x of no index) | {} ({:.2}x of no index) | |",
        rate(w_indexed),
        w_plain.as_secs_f64() / w_indexed.as_secs_f64(),
        rate(s_indexed),
        s_plain.as_secs_f64() / s_indexed.as_secs_f64()
    );

    let sq_count =
        |sql: &str| -> Res<u64> { Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64) };
    // SQLite's rows: the `body` text of each, parsed into a `Value` as ebbdb's rows are, or
    // (`parse` false) left as text.
    let sq_bodies = |sql: &str, parse: bool| -> Res<usize> {
        let mut st = conn.prepare_cached(sql)?;
        let mut rows = st.query([])?;
        let mut k = 0;
        while let Some(r) = rows.next()? {
            let body: String = r.get(0)?;
            let object = if parse {
                serde_json::from_str::<Value>(&body)?.is_object()
            } else {
                body.starts_with('{')
            };
            if object {
                k += 1;
            }
        }
        Ok(k)
    };
    let sq_rows = |sql: &str| sq_bodies(sql, true);
    let line = |what: &str, e: (Duration, usize), s: (Duration, usize)| {
        println!(
            "| {what} | {} ({} rows) | {} ({} rows) | {:.2}x faster |",
            ms(e.0),
            e.1,
            ms(s.0),
            s.1,
            s.0.as_secs_f64() / e.0.as_secs_f64()
        );
    };

    // Single partition, 1,000 items (n / 1000 with fewer items), returned as JSON values.
    let e = time(|| rows(&plain, "SELECT * FROM c WHERE c.pk = 'p0042'"))?;
    let s = time(|| sq_rows("SELECT body FROM docs WHERE pk = 'p0042'"))?;
    line("single partition, every item of it", e, s);

    // Cross-partition filter on a field without an index: 1 % of the items.
    let e = time(|| rows(&plain, "SELECT * FROM c WHERE c.bucket = 42"))?;
    let s = time(|| sq_rows("SELECT body FROM docs WHERE json_extract(body, '$.bucket') = 42"))?;
    line("filter, no index (1 %)", e, s);
    let scan = e.0;
    println!(
        "| scan rate, no index | {:.2} M items/s | {:.2} M items/s | |",
        n as f64 / e.0.as_secs_f64() / 1e6,
        n as f64 / s.0.as_secs_f64() / 1e6
    );
    let s_scan = s.0;

    // The same filter through an index.
    let e = time(|| rows(&indexed, "SELECT * FROM c WHERE c.bucket = 42"))?;
    let s = time(|| sq_rows("SELECT body FROM docs_ix WHERE json_extract(body, '$.bucket') = 42"))?;
    line("filter, indexed (1 %)", e, s);
    // How many times faster the indexed query ran than the scan, for each store.
    let speedup = |what: &str, scans: (Duration, Duration), e: Duration, s: Duration| {
        println!(
            "| index speedup over the scan{what} | {:.1}x | {:.1}x | |",
            scans.0.as_secs_f64() / e.as_secs_f64(),
            scans.1.as_secs_f64() / s.as_secs_f64()
        );
    };
    speedup("", (scan, s_scan), e.0, s.0);

    // The same two with the rows left as JSON text (SQLite's rows are not parsed either).
    let sq_text = |sql: &str| sq_bodies(sql, false);
    let e = time(|| text_rows(&plain, "SELECT * FROM c WHERE c.bucket = 42"))?;
    let s = time(|| sq_text("SELECT body FROM docs WHERE json_extract(body, '$.bucket') = 42"))?;
    line("filter, no index (1 %), rows as JSON text", e, s);
    let (scan_text, s_scan_text) = (e.0, s.0);
    let e = time(|| text_rows(&indexed, "SELECT * FROM c WHERE c.bucket = 42"))?;
    let s = time(|| sq_text("SELECT body FROM docs_ix WHERE json_extract(body, '$.bucket') = 42"))?;
    line("filter, indexed (1 %), rows as JSON text", e, s);
    speedup(", rows as JSON text", (scan_text, s_scan_text), e.0, s.0);

    // A range on an indexed number (about 1 %).
    let e = time(|| {
        rows(
            &indexed,
            "SELECT * FROM c WHERE c.n >= 500000 AND c.n < 510000",
        )
    })?;
    let s = time(|| {
        sq_rows("SELECT body FROM docs_ix WHERE json_extract(body, '$.n') >= 500000 AND json_extract(body, '$.n') < 510000")
    })?;
    line("range, indexed (1 %)", e, s);

    // ORDER BY on the indexed number with a range on it and TOP 10: ebbdb walks the index in
    // order and stops after 10 rows; without the index, a scan keeps the 10 best rows.
    let text = "SELECT TOP 10 * FROM c WHERE c.n >= 500000 ORDER BY c.n";
    let e = time(|| rows(&indexed, text))?;
    let s = time(|| {
        sq_rows("SELECT body FROM docs_ix WHERE json_extract(body, '$.n') >= 500000 ORDER BY json_extract(body, '$.n') LIMIT 10")
    })?;
    line("TOP 10 ORDER BY indexed n, range on n", e, s);
    let e = time(|| rows(&plain, text))?;
    let s = time(|| {
        sq_rows("SELECT body FROM docs WHERE json_extract(body, '$.n') >= 500000 ORDER BY json_extract(body, '$.n') LIMIT 10")
    })?;
    line("same, no index (scan, best 10 kept)", e, s);

    // Counts.
    let e = time(|| first_u64(&plain, "SELECT VALUE COUNT(1) FROM c").map(|v| v as usize))?;
    let s = time(|| sq_count("SELECT COUNT(*) FROM docs").map(|v| v as usize))?;
    line("COUNT(1) FROM c", e, s);
    let e = time(|| {
        first_u64(
            &indexed,
            "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'status-3'",
        )
        .map(|v| v as usize)
    })?;
    let s = time(|| {
        sq_count("SELECT COUNT(*) FROM docs_ix WHERE json_extract(body, '$.status') = 'status-3'")
            .map(|v| v as usize)
    })?;
    line("COUNT(1) WHERE indexed status (10 %)", e, s);
    let e = time(|| {
        first_u64(
            &plain,
            "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'status-3'",
        )
        .map(|v| v as usize)
    })?;
    let s = time(|| {
        sq_count("SELECT COUNT(*) FROM docs WHERE json_extract(body, '$.status') = 'status-3'")
            .map(|v| v as usize)
    })?;
    line("COUNT(1) WHERE status, no index", e, s);
    Ok(())
}
