//! Every read and item command on the fixture database, run as a user runs the binary.

mod common;

use common::{ebbdb_at, fixture, stderr, stdout, T0};
use serde_json::{json, Value};

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn help_lists_commands_and_exit_codes() {
    let _serial = common::serial();
    let out = ebbdb_at(T0).arg("--help").output().expect("run");
    assert!(out.status.success());
    let text = stdout(&out);
    for cmd in [
        "stats",
        "containers",
        "get",
        "put",
        "delete",
        "query",
        "scan",
        "compact",
        "verify",
        "export",
        "import",
        "serve",
    ] {
        assert!(text.contains(cmd), "--help lacks {cmd}: {text}");
    }
    assert!(text.contains("Exit codes:"), "{text}");
    assert!(text.contains("5  the directory is locked"), "{text}");
    assert!(text.contains("EBBDB_NOW_UNIX_MS"), "{text}");
}

#[test]
fn stats_and_containers() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path());
    let out = ebbdb_at(T0 + 100)
        .args(["stats", "--json"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    let ks = v["keyspaces"].as_array().expect("keyspaces");
    let orders = ks
        .iter()
        .find(|k| k["name"] == "c:orders")
        .expect("c:orders");
    assert_eq!(orders["container"], "orders");
    assert_eq!(orders["live_items"], 4); // D4 expired at T0 + 10
    assert_eq!(orders["default_ttl"], 3600);
    let raw = ks.iter().find(|k| k["name"] == "raw").expect("raw");
    assert_eq!(raw["container"], Value::Null);
    assert_eq!(raw["live_items"], 2); // `c\n` expired at T0 + 50
    assert!(v["expired_items"].as_u64().unwrap_or(0) >= 2, "{v}");
    assert!(v["segments"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert_eq!(v["now"], T0 + 100);

    let out = ebbdb_at(T0 + 100)
        .arg("stats")
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("c:orders (container 'orders'): 4 live"),
        "{text}"
    );
    assert!(text.contains("expired items"), "{text}");

    let out = ebbdb_at(T0 + 100)
        .args(["containers", "--json"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(v[0]["id"], "notes");
    assert_eq!(v[0]["itemCount"], 1);
    assert!(v[0].get("defaultTtl").is_none());
    assert_eq!(v[1]["id"], "orders");
    assert_eq!(v[1]["defaultTtl"], 3600);
    assert_eq!(v[1]["partitionKey"]["paths"], json!(["/customerId"]));
    assert_eq!(v[1]["itemCount"], 4);

    let out = ebbdb_at(T0 + 100)
        .arg("containers")
        .arg(dir.path())
        .output()
        .expect("run");
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("orders"))
        .expect("orders row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["orders", "/customerId", "3600", "consistent", "4"]);
}

#[test]
fn get_put_delete() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path());
    let d = dir.path();
    let out = ebbdb_at(T0 + 100)
        .args(["get", "--json"])
        .arg(d)
        .args(["orders", "C1", "A1"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let item: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(common::body(item.clone()), common::fixture_items()[0]);
    assert_eq!(item["_ts"], T0);

    // A number partition key needs --pk-json; as a string it is another partition.
    let out = ebbdb_at(T0 + 100)
        .arg("get")
        .arg(d)
        .args(["orders", "7", "E5", "--pk-json"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("\"E5\""));
    let out = ebbdb_at(T0 + 100)
        .arg("get")
        .arg(d)
        .args(["orders", "7", "E5"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
    // An item without a partition key value is in the "undefined" partition.
    let out = ebbdb_at(T0 + 100)
        .arg("put")
        .arg(d)
        .args(["orders", "-"])
        .write_stdin("{\"id\": \"U\"}")
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    for (pk, found) in [("undefined", true), ("null", false)] {
        let out = ebbdb_at(T0 + 100)
            .arg("get")
            .arg(d)
            .args(["orders", pk, "U", "--pk-json"])
            .output()
            .expect("run");
        assert_eq!(out.status.success(), found, "{pk}: {}", stderr(&out));
    }

    // Expired: 404, exit 3.
    let out = ebbdb_at(T0 + 100)
        .arg("get")
        .arg(d)
        .args(["orders", "C2", "D4"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("(404)"), "{}", stderr(&out));

    // put from stdin: one good item, one with a bad ttl (reported by number, exit 4).
    let input = "{\"id\": \"P1\", \"customerId\": \"C9\", \"ttl\": 5}\n{\"id\": \"P2\", \"customerId\": \"C9\", \"ttl\": 0}\n";
    let out = ebbdb_at(T0 + 100)
        .arg("put")
        .arg(d)
        .args(["orders", "-"])
        .write_stdin(input)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stdout(&out).contains("upserted 1 items"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("item 2 (line 2)"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("The input ttl '0' is invalid"),
        "{}",
        stderr(&out)
    );
    let out = ebbdb_at(T0 + 101)
        .args(["get", "--json"])
        .arg(d)
        .args(["orders", "C9", "P1"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let p1: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(p1["ttl"], 5);
    assert_eq!(p1["_ts"], T0 + 100); // written by the put, at its "now"

    let out = ebbdb_at(T0 + 102)
        .arg("delete")
        .arg(d)
        .args(["orders", "C1", "A1"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    for _ in 0..2 {
        let out = ebbdb_at(T0 + 102)
            .arg("get")
            .arg(d)
            .args(["orders", "C1", "A1"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(3));
    }
    let out = ebbdb_at(T0 + 102)
        .arg("delete")
        .arg(d)
        .args(["orders", "C1", "A1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
    let out = ebbdb_at(T0 + 102)
        .arg("get")
        .arg(d)
        .args(["missing", "C1", "A1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn query_lines_table_params_partition_and_errors() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path());
    let d = dir.path();
    let out = ebbdb_at(T0 + 100)
        .arg("query")
        .arg(d)
        .args([
            "orders",
            "SELECT VALUE c.id FROM c WHERE c.total >= @min ORDER BY c.total",
        ])
        .args(["--param", "@min=20"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json_lines(&out),
        vec![json!("B2"), json!("C3"), json!("E5")]
    );

    let out = ebbdb_at(T0 + 100)
        .arg("query")
        .arg(d)
        .args([
            "orders",
            "SELECT c.id, c.total FROM c ORDER BY c.total DESC",
            "--format",
            "table",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["id", "total"]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["E5", "50"]
    );
    assert_eq!(lines.last().copied(), Some("(4 rows)"));

    let out = ebbdb_at(T0 + 100)
        .arg("query")
        .arg(d)
        .args([
            "orders",
            "SELECT VALUE c.id FROM c",
            "--partition-key",
            "C1",
            "--json",
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut ids = json_lines(&out);
    ids.sort_by_key(|v| v.to_string());
    assert_eq!(ids, vec![json!("A1"), json!("B2")]);

    let out = ebbdb_at(T0 + 100)
        .arg("query")
        .arg(d)
        .args(["orders", "SELEKT * FROM c"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("(400)"), "{}", stderr(&out));
    let out = ebbdb_at(T0 + 100)
        .arg("query")
        .arg(d)
        .args(["orders", "SELECT * FROM c", "--param", "min=1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn scan_prints_bytes_safely() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path());
    let d = dir.path();
    let out = ebbdb_at(T0 + 20)
        .arg("scan")
        .arg(d)
        .arg("raw")
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        // `\x00\x01` is valid UTF-8: its control characters are escaped as Rust does.
        "a\t1\nb\\xff\t\\0\\u{1}\nc\\n\tline\\nbreak\n"
    );
    let out = ebbdb_at(T0 + 20)
        .args(["scan", "--json"])
        .arg(d)
        .arg("raw")
        .output()
        .expect("run");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[0],
        json!({"key": "a", "value": "1", "expires_at": null})
    );
    assert_eq!(
        rows[1],
        json!({"key_hex": "62ff", "value": "\u{0}\u{1}", "expires_at": null})
    );
    assert_eq!(
        rows[2],
        json!({"key": "c\n", "value": "line\nbreak", "expires_at": T0 + 50})
    );
    let out = ebbdb_at(T0 + 20)
        .arg("scan")
        .arg(d)
        .args(["raw", "--prefix", "b", "--limit", "1"])
        .output()
        .expect("run");
    assert_eq!(stdout(&out), "b\\xff\t\\0\\u{1}\n");
    // After `c\n` expired it is gone from scans.
    let out = ebbdb_at(T0 + 60)
        .arg("scan")
        .arg(d)
        .arg("raw")
        .output()
        .expect("run");
    assert_eq!(stdout(&out).lines().count(), 2);
    let out = ebbdb_at(T0 + 60)
        .arg("scan")
        .arg(d)
        .arg("nope")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn compact_full_purges_expired_records() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path());
    let out = ebbdb_at(T0 + 4000)
        .args(["compact", "--full", "--json"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert!(v["segments_merged"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert!(
        v["bytes_after"].as_u64() < v["bytes_before"].as_u64(),
        "{v}"
    );
    let out = ebbdb_at(T0 + 4000)
        .arg("compact")
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("merged "), "{}", stdout(&out));
    // Every item of `orders` but C3 (ttl -1) has expired by T0 + 4000.
    let out = ebbdb_at(T0 + 4000)
        .args(["query", "--json"])
        .arg(dir.path())
        .args(["orders", "SELECT VALUE c.id FROM c"])
        .output()
        .expect("run");
    assert_eq!(json_lines(&out), vec![json!("C3")]);
}

#[test]
fn missing_database_serve_and_lock() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    for cmd in ["stats", "containers", "verify", "compact"] {
        let out = ebbdb_at(T0).arg(cmd).arg(&empty).output().expect("run");
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        assert!(
            stderr(&out).contains("no ebbdb database"),
            "{cmd}: {}",
            stderr(&out)
        );
    }
    assert_eq!(
        std::fs::read_dir(&empty).expect("ls").count(),
        0,
        "nothing created"
    );
    let out = ebbdb_at(T0)
        .arg("stats")
        .arg(dir.path().join("nope"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));

    // `serve` refuses a directory that is itself one database, and a key that is not base64,
    // before it listens.
    let one = dir.path().join("one");
    fixture(&one);
    let out = ebbdb_at(T0)
        .arg("serve")
        .arg(&one)
        .args(["--addr", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is an ebbdb database"),
        "{}",
        stderr(&out)
    );
    let out = ebbdb_at(T0)
        .arg("serve")
        .arg(dir.path().join("served"))
        .args(["--addr", "127.0.0.1:0", "--key", "not base64!"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--key"), "{}", stderr(&out));

    // A directory held open by a running program: exit 5 at once, for every kind of command.
    let db_dir = dir.path().join("db");
    fixture(&db_dir);
    let held = ebbdb::Database::open_with(&db_dir, common::options(T0)).expect("hold it open");
    let started = std::time::Instant::now();
    for args in [
        vec!["stats"],
        vec!["verify"],
        vec!["scan", "raw"],
        vec!["import", "x.json", "--container", "orders"],
    ] {
        let mut cmd = ebbdb_at(T0);
        cmd.arg(args[0]).arg(&db_dir).args(&args[1..]);
        if args[0] == "import" {
            let f = dir.path().join("x.json");
            std::fs::write(&f, "[]").expect("write");
            cmd = ebbdb_at(T0);
            cmd.arg("import")
                .arg(&db_dir)
                .arg(&f)
                .args(["--container", "orders"]);
        }
        let out = cmd.output().expect("run");
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("locked by another process"),
            "{}",
            stderr(&out)
        );
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    drop(held);
    let out = ebbdb_at(T0)
        .arg("stats")
        .arg(&db_dir)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
}
