//! Shared by the CLI tests: a small fixture database built with the library under a pinned
//! clock, and the `ebbdb` binary run as a user runs it (with `EBBDB_NOW_UNIX_MS` pinning "now").

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use ebbdb::clock::ManualClock;
use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, SyncPolicy, Ttl};
use serde_json::{json, Value};

/// Serialises the tests of one test binary. The directory lock is an `flock` on an open file:
/// a child process that another test thread is starting inherits a copy of every open file
/// until it `exec`s, so a database this process just closed can still read as locked for that
/// instant (and the `ebbdb` child then exits with code 5). Tests hold this for their whole run.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The fixture's write instant (Unix seconds).
pub const T0: u64 = 1_700_000_000;

/// The `ebbdb` binary with "now" pinned to `now_s` (Unix seconds), and a time limit so a hang
/// fails the test instead of stalling it.
pub fn ebbdb_at(now_s: u64) -> Command {
    let mut c = Command::cargo_bin("ebbdb").expect("the ebbdb binary is built");
    c.env("EBBDB_NOW_UNIX_MS", (now_s * 1000).to_string())
        .timeout(Duration::from_secs(60));
    c
}

/// Options of a fixture database at `now_s`.
pub fn options(now_s: u64) -> Options {
    Options::default()
        .clock(ManualClock::at_unix_secs(now_s))
        .sync(SyncPolicy::Never)
}

/// The fixture: container `orders` (`/customerId`, defaultTtl 3600) written at `T0` with
/// - `A1` (C1, inherits 3600 s), `B2` (C1, ttl 600), `C3` (C2, ttl -1), `D4` (C2, ttl 10),
///   `E5` (partition key 7, a number; inherits);
/// - container `notes` (`/k`, TTL off) with one item;
/// - byte keyspace `raw` with keys `a`, `b\xff` (not UTF-8) and `c\n` (a control character).
pub fn fixture(dir: &Path) {
    let db = Database::open_with(dir, options(T0)).expect("open fixture");
    let orders = db
        .create_container(
            ContainerProperties::new("orders", "/customerId")
                .with_default_ttl(DefaultTtl::Seconds(3600)),
        )
        .expect("orders");
    for item in fixture_items() {
        orders.create_item(&item).expect("create");
    }
    let notes = db
        .create_container(ContainerProperties::new("notes", "/k"))
        .expect("notes");
    notes
        .create_item(&json!({"id": "n1", "k": "x", "text": "hello"}))
        .expect("note");
    let raw = db
        .store()
        .create_keyspace("raw", DefaultTtl::NeverExpire)
        .expect("raw");
    raw.put(b"a", b"1").expect("put");
    raw.put(b"b\xff", b"\x00\x01").expect("put");
    raw.put_with_ttl(b"c\n", b"line\nbreak", Ttl::Seconds(50))
        .expect("put");
}

/// The items of `orders` in the fixture.
pub fn fixture_items() -> Vec<Value> {
    vec![
        json!({"id": "A1", "customerId": "C1", "total": 10.5, "tags": ["x", "y"], "n": 0.1}),
        json!({"id": "B2", "customerId": "C1", "total": 20, "ttl": 600, "big": 1e300}),
        json!({"id": "C3", "customerId": "C2", "total": 30, "ttl": -1, "neg": -0.0}),
        json!({"id": "D4", "customerId": "C2", "total": 40, "ttl": 10}),
        json!({"id": "E5", "customerId": 7, "total": 50, "nested": {"a": [1, {"b": null}]}}),
    ]
}

/// Stdout of a finished command, as text.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stderr of a finished command, as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file of `dir` with its bytes, sorted by name.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("read"),
            )
        })
        .collect();
    v.sort();
    v
}

/// An item without the properties the database sets (`_ts`, `_etag`).
pub fn body(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.remove("_ts");
        m.remove("_etag");
    }
    v
}
