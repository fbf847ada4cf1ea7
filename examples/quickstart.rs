//! The main job: open a database, write orders with TTLs, watch them expire and be purged.
//!
//! Time is simulated with a `ManualClock` so the whole 90-day story runs in a second.
//! Run with: `cargo run --release --example quickstart`; with `-- --keep DIR` the database is
//! left in `DIR` (created if missing; it must not already hold a database) for the `ebbdb`
//! command-line tool to look at, instead of a temporary directory that is removed at the end.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, SyncPolicy};
use serde_json::{json, Value};

fn main() -> ebbdb::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keep = match args.as_slice() {
        [] => None,
        [flag, dir] if flag == "--keep" => Some(std::path::PathBuf::from(dir)),
        _ => {
            eprintln!("usage: quickstart [--keep DIR]");
            std::process::exit(2);
        }
    };
    let temp = tempfile::tempdir()?;
    let path = keep.clone().unwrap_or_else(|| temp.path().to_path_buf());
    if path.join("MANIFEST").exists() {
        eprintln!(
            "{} already holds a database; name a new directory",
            path.display()
        );
        std::process::exit(2);
    }
    // A kept database is looked at later with the real clock, so its story is set to end a
    // minute ago (the new orders at the end are then live for 90 days); otherwise it starts
    // at a fixed instant.
    let start = match keep {
        Some(_) => {
            use ebbdb::clock::{Clock, SystemClock};
            (SystemClock.now_unix_millis() / 1000).saturating_sub(90 * 86_400 + 3600 + 90)
        }
        None => 1_700_000_000,
    };
    let clock = ManualClock::at_unix_secs(start);
    let db = Database::open_with(
        &path,
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Never)
            .segment_size(256 * 1024),
    )?;
    println!("opened {}", path.display());

    let orders = db.create_container(
        ContainerProperties::new("orders", "/customerId")
            .with_default_ttl(DefaultTtl::Seconds(90 * 86_400)),
    )?;
    // 2,000 ordinary orders inherit the 90-day default.
    for i in 0..2_000 {
        orders.create_item(&json!({
            "id": format!("SO{i:05}"), "customerId": format!("C{}", i % 50),
            "total": i, "lines": ["widget", "gadget"], "note": "x".repeat(200),
        }))?;
    }
    // A few with their own ttl: a 30-second hold, a 1-hour quote, and one kept forever.
    orders.create_item(&json!({"id": "HOLD1", "customerId": "C1", "ttl": 30}))?;
    orders.create_item(&json!({"id": "QUOTE7", "customerId": "C2", "ttl": 3600}))?;
    orders.create_item(&json!({"id": "AUDIT", "customerId": "C3", "ttl": -1}))?;
    show(&db, &orders, "after writing")?;

    clock.advance(Duration::from_secs(30));
    let hold = orders.read_item::<Value>("C1", "HOLD1");
    println!(
        "t+30s: HOLD1 -> {}",
        hold.map_or_else(|e| format!("{} ({e})", e.status_code()), |_| "found".into())
    );

    clock.advance(Duration::from_secs(3600));
    println!(
        "t+1h: QUOTE7 -> {}",
        status(orders.read_item::<Value>("C2", "QUOTE7"))
    );

    clock.advance(Duration::from_secs(90 * 86_400));
    println!(
        "t+90d: SO00001 -> {}",
        status(orders.read_item::<Value>("C1", "SO00001"))
    );
    show(
        &db,
        &orders,
        "after 90 days, before compaction (expired but not yet purged)",
    )?;

    let expired = db.maintain()?;
    let report = db.compact()?;
    println!(
        "expiry pass freed {expired} items; compaction merged {} segments, dropped {} unread, {} -> {} bytes",
        report.segments_merged, report.segments_dropped, report.bytes_before, report.bytes_after
    );
    show(&db, &orders, "after compaction")?;
    let audit: Value = orders.read_item("C3", "AUDIT")?;
    println!("AUDIT survives: {audit}");
    // New business after the purge: these inherit the 90-day default from now on.
    for (i, total) in [120, 75, 310].into_iter().enumerate() {
        orders.create_item(
            &json!({"id": format!("NEW{i}"), "customerId": format!("C{i}"), "total": total}),
        )?;
    }
    show(&db, &orders, "after three new orders")?;
    if let Some(dir) = keep {
        drop(orders);
        drop(db);
        println!(
            "database kept in {}; try: cargo run -p ebbdb-cli -- stats {}",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

fn status(r: ebbdb::Result<Value>) -> String {
    match r {
        Ok(_) => "found".into(),
        Err(e) => format!("{}", e.status_code()),
    }
}

fn show(db: &Database, orders: &ebbdb::Container, when: &str) -> ebbdb::Result<()> {
    let s = db.stats();
    println!(
        "{when}: count={} live_items={} expired_unpurged={} segments={} segment_bytes={}",
        orders.count()?,
        s.live_items,
        s.expired_items,
        s.segments,
        s.segment_bytes
    );
    Ok(())
}
