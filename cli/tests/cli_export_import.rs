//! `ebbdb export` and `ebbdb import`: a round trip keeps ids, partition keys, bodies (numbers
//! bit for bit) and each item's remaining lifetime under a pinned clock; expired items are not
//! exported; import reports malformed JSON, a bad `ttl`, an oversized item and a duplicate id
//! by item number and line, and writes each batch all or nothing.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{body, ebbdb_at, fixture, fixture_items, stderr, stdout, T0};
use ebbdb::clock::ManualClock;
use ebbdb::{Database, DefaultTtl, Options};
use serde_json::{json, Value};

fn export(db: &Path, out: &Path, at: u64, extra: &[&str]) -> std::process::Output {
    ebbdb_at(at)
        .arg("export")
        .arg(db)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("run")
}

fn import(db: &Path, from: &Path, at: u64, extra: &[&str]) -> std::process::Output {
    ebbdb_at(at)
        .arg("import")
        .arg(db)
        .arg(from)
        .args(extra)
        .output()
        .expect("run")
}

/// The items of an export file (array or NDJSON), by id.
fn exported(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read export");
    let mut items: Vec<Value> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text).expect("a JSON array")
    } else {
        text.lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    items.sort_by_key(|v| v["id"].to_string());
    items
}

fn without_ttl(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.remove("ttl");
    }
    v
}

#[test]
fn export_writes_arrays_with_remaining_ttl_and_skips_expired_items() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    fixture(&db);
    let out_dir = dir.path().join("out");
    let out = export(&db, &out_dir, T0 + 100, &["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(summary["containers"][1]["id"], "orders");
    assert_eq!(summary["containers"][1]["exported"], 4);

    let props: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("orders.container.json")).expect("props"),
    )
    .expect("json");
    assert_eq!(props["id"], "orders");
    assert_eq!(props["defaultTtl"], 3600);
    assert_eq!(props["partitionKey"]["paths"], json!(["/customerId"]));
    assert_eq!(props["indexingPolicy"]["indexingMode"], "consistent");

    let items = exported(&out_dir.join("orders.json"));
    let ids: Vec<&str> = items.iter().filter_map(|v| v["id"].as_str()).collect();
    assert_eq!(ids, ["A1", "B2", "C3", "E5"], "D4 expired at T0 + 10");
    let by_id = |id: &str| items.iter().find(|v| v["id"] == id).cloned().expect(id);
    assert_eq!(by_id("A1")["ttl"], 3500); // inherits 3600, written at T0, now T0 + 100
    assert_eq!(by_id("B2")["ttl"], 500);
    assert_eq!(by_id("C3")["ttl"], -1);
    for item in &items {
        for p in ["_ts", "_etag", "_rid", "_self", "_attachments"] {
            assert!(item.get(p).is_none(), "{p} exported: {item}");
        }
    }
    let fixture: Vec<Value> = fixture_items();
    assert_eq!(without_ttl(by_id("A1")), without_ttl(fixture[0].clone()));
    assert_eq!(without_ttl(by_id("E5")), without_ttl(fixture[4].clone()));
    // Container with TTL off: the item is exported as it is.
    assert_eq!(
        exported(&out_dir.join("notes.json")),
        vec![json!({"id": "n1", "k": "x", "text": "hello"})]
    );

    // --ttl original keeps each item's own ttl (or none).
    let orig = dir.path().join("orig");
    let out = export(
        &db,
        &orig,
        T0 + 100,
        &["--ttl", "original", "--container", "orders"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let items = exported(&orig.join("orders.json"));
    assert!(items[0].get("ttl").is_none(), "{}", items[0]);
    assert_eq!(items[1]["ttl"], 600);
    assert!(!orig.join("notes.json").exists());

    // Everything but C3 has expired by T0 + 4000.
    let late = dir.path().join("late");
    let out = export(
        &db,
        &late,
        T0 + 4000,
        &["--ndjson", "--container", "orders"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let items = exported(&late.join("orders.ndjson"));
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], "C3");

    let out = export(
        &db,
        &dir.path().join("x"),
        T0 + 100,
        &["--container", "nope"],
    );
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn round_trip_keeps_ids_keys_bodies_and_remaining_ttl() {
    let _serial = common::serial();
    for ndjson in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("src");
        fixture(&src);
        let out_dir = dir.path().join("out");
        let flags: &[&str] = if ndjson { &["--ndjson"] } else { &[] };
        let out = export(&src, &out_dir, T0 + 100, flags);
        assert!(out.status.success(), "{}", stderr(&out));

        // Imported 900 s later into a new database.
        let t1 = T0 + 1000;
        let dst = dir.path().join("dst");
        let out = import(&dst, &out_dir, t1, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out).contains("orders: 4 items imported, 0 refused"),
            "{}",
            stdout(&out)
        );

        // Each item lives exactly its remaining lifetime from t1 (A1: 3500 s, B2: 500 s).
        let clock = ManualClock::at_unix_secs(t1 + 499);
        let db = Database::open_with(&dst, Options::default().clock(clock.clone())).expect("open");
        let orders = db.container("orders").expect("orders");
        assert_eq!(orders.properties().default_ttl, DefaultTtl::Seconds(3600));
        assert_eq!(
            db.container("notes")
                .expect("notes")
                .count()
                .expect("count"),
            1
        );
        let fx = fixture_items();
        let read = |pk: Value, id: &str| -> Option<Value> {
            let r = match pk {
                Value::Number(n) => orders.read_item::<Value>(n.as_f64().unwrap_or(0.0), id),
                other => orders.read_item::<Value>(other.as_str().unwrap_or_default(), id),
            };
            r.ok().map(body)
        };
        let a1 = read(json!("C1"), "A1").expect("A1 live");
        assert_eq!(without_ttl(a1), without_ttl(fx[0].clone()));
        let b2 = read(json!("C1"), "B2").expect("B2 live at t1 + 499");
        assert_eq!(without_ttl(b2.clone()), without_ttl(fx[1].clone()));
        assert_eq!(
            b2["big"].as_f64().map(f64::to_bits),
            Some(1e300f64.to_bits())
        );
        let c3 = read(json!("C2"), "C3").expect("C3");
        assert_eq!(c3, fx[2]);
        assert!(c3["neg"]
            .as_f64()
            .is_some_and(|x| x == 0.0 && x.is_sign_negative()));
        assert_eq!(
            read(json!(7), "E5").map(without_ttl),
            Some(without_ttl(fx[4].clone()))
        );
        assert!(read(json!("C2"), "D4").is_none());
        clock.advance(Duration::from_secs(1)); // t1 + 500
        assert!(
            read(json!("C1"), "B2").is_none(),
            "B2 outlived its remaining 500 s"
        );
        assert!(read(json!("C1"), "A1").is_some());
        clock.advance(Duration::from_secs(2999)); // t1 + 3499
        assert!(read(json!("C1"), "A1").is_some());
        clock.advance(Duration::from_secs(1)); // t1 + 3500
        assert!(
            read(json!("C1"), "A1").is_none(),
            "A1 outlived its remaining 3500 s"
        );
        assert!(read(json!("C2"), "C3").is_some());
    }
}

/// Writes `lines` (one item per line, so item n is on line n + 1 of an array).
fn array_file(path: &Path, items: &[String]) {
    let text = format!("[\n{}\n]\n", items.join(",\n"));
    std::fs::write(path, text).expect("write");
}

#[test]
fn import_reports_bad_items_by_number_and_imports_the_rest() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    fixture(&db);
    let big = "y".repeat(3 << 20);
    let items = vec![
        r#"{"id": "ok1", "customerId": "Z"}"#.to_string(),
        r#"{"id": "t1", "customerId": "Z", "ttl": 0}"#.to_string(),
        r#"{"id": "t2", "customerId": "Z", "ttl": "x"}"#.to_string(),
        format!(r#"{{"id": "big", "customerId": "Z", "pad": "{big}"}}"#),
        r#"{"id": "ok1", "customerId": "Z"}"#.to_string(),
        r#"{"id": "A1", "customerId": "C1"}"#.to_string(),
        r#"{"id": , "customerId": "Z"}"#.to_string(),
        r#"{"id": "ok2", "customerId": "Z", "ttl": 60}"#.to_string(),
    ];
    let file = dir.path().join("bad.json");
    array_file(&file, &items);
    let out = import(&db, &file, T0 + 100, &["--container", "orders"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    for (n, what) in [
        (2, "The input ttl '0' is invalid"),
        (3, "The input ttl 'x' is invalid"),
        (4, "(413)"),
        (5, "(409)"),
        (6, "(409)"),
        (7, "malformed JSON"),
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("item {n} (line {})", n + 1)))
            .unwrap_or_else(|| panic!("item {n} not reported: {err}"));
        assert!(line.contains(what), "item {n}: {line}");
    }
    assert!(
        !err.contains("item 1 ") && !err.contains("item 8 "),
        "{err}"
    );
    assert!(
        stdout(&out).contains("orders: 2 items imported, 6 refused"),
        "{}",
        stdout(&out)
    );
    for (id, found) in [("ok1", true), ("ok2", true), ("t1", false), ("big", false)] {
        let out = ebbdb_at(T0 + 100)
            .arg("get")
            .arg(&db)
            .args(["orders", "Z", id])
            .output()
            .expect("run");
        assert_eq!(out.status.success(), found, "{id}");
    }

    // NDJSON: a malformed line is one bad item; the next line is read as usual.
    let file = dir.path().join("lines.ndjson");
    std::fs::write(
        &file,
        "{\"id\": \"l1\", \"customerId\": \"L\"}\n{\"id\": \"l2\", \n\n{\"id\": \"l3\", \"customerId\": \"L\"}\n",
    )
    .expect("write");
    let out = import(&db, &file, T0 + 100, &["--container", "orders"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("item 2 (line 2): malformed JSON"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("2 items imported, 1 refused"),
        "{}",
        stdout(&out)
    );

    // A broken array structure stops the file; the items before it are imported (skip mode).
    let file = dir.path().join("broken.json");
    std::fs::write(
        &file,
        "[{\"id\": \"m1\", \"customerId\": \"M\"}\n {\"id\": \"m2\", \"customerId\": \"M\"}]",
    )
    .expect("write");
    let out = import(&db, &file, T0 + 100, &["--container", "orders"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("line 2: malformed JSON: expected ',' or ']' after item 1"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("1 items imported"),
        "{}",
        stdout(&out)
    );

    // A file into a container that does not exist, without properties: 404 (exit 3).
    let out = import(&db, &file, T0 + 100, &["--container", "nope"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    // A file needs --container.
    let out = import(&db, &file, T0 + 100, &[]);
    assert_eq!(out.status.code(), Some(4));
    // A directory with other files in it is not made into a database.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("notes.txt"), "mine").expect("write");
    let out = import(&other, &file, T0 + 100, &["--container", "orders"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("holds no ebbdb database"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&other).expect("ls").count(), 1);
}

#[test]
fn on_error_stop_writes_whole_batches_only() {
    let _serial = common::serial();
    let items: Vec<String> = (1..=3)
        .map(|i| format!(r#"{{"id": "s{i}", "customerId": "S"}}"#))
        .chain([r#"{"id": "s4", "customerId": "S", "ttl": 1.5}"#.to_string()])
        .chain([r#"{"id": "s5", "customerId": "S"}"#.to_string()])
        .collect();
    for (batch, imported) in [("2", 2usize), ("10", 0)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("db");
        fixture(&db);
        let file = dir.path().join("s.json");
        array_file(&file, &items);
        let out = import(
            &db,
            &file,
            T0 + 100,
            &[
                "--container",
                "orders",
                "--on-error",
                "stop",
                "--batch-size",
                batch,
            ],
        );
        assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
        assert!(stderr(&out).contains("item 4 (line 5)"), "{}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("{imported} items imported")),
            "{}",
            stdout(&out)
        );
        let out = ebbdb_at(T0 + 100)
            .args(["query", "--json"])
            .arg(&db)
            .args([
                "orders",
                "SELECT VALUE c.id FROM c WHERE c.customerId = 'S'",
            ])
            .output()
            .expect("run");
        assert_eq!(
            stdout(&out).lines().count(),
            imported,
            "batch size {batch}: {}",
            stdout(&out)
        );
    }
    // Across batches a repeated id is a 409 against the item already written.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    fixture(&db);
    let file = dir.path().join("d.json");
    array_file(
        &file,
        &[
            r#"{"id": "d", "customerId": "D"}"#.into(),
            r#"{"id": "d", "customerId": "D"}"#.into(),
        ],
    );
    let out = import(
        &db,
        &file,
        T0 + 100,
        &["--container", "orders", "--batch-size", "1"],
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("item 2 (line 3): conflict: item 'd' already exists (409)"),
        "{}",
        stderr(&out)
    );
}
