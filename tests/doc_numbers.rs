//! Numbers read back exactly as they were acknowledged.
//!
//! Every finite `f64` (all bit patterns: subnormals, ±0.0, the extremes, integers near 2^53 and
//! 2^63) and every `i64`/`u64` placed in an item must come back with the same bits and the same
//! kind (integer or float) from `create_item`'s answer, `read_item`, `items()`, `upsert_item`'s
//! answer and a read after reopening. Numbers JSON cannot hold are refused with 400.

use ebbdb::clock::ManualClock;
use ebbdb::{Container, ContainerProperties, Database, Options, SyncPolicy};
use proptest::prelude::*;
use serde::Serialize;
use serde_json::{json, Number, Value};

const T0: u64 = 1_700_000_000;

/// A number's identity: its kind and exact bits (`==` on `Value` treats -0.0 as 0.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exact {
    U(u64),
    I(i64),
    F(u64),
}

fn exact(n: &Number) -> Exact {
    if let Some(u) = n.as_u64() {
        Exact::U(u)
    } else if let Some(i) = n.as_i64() {
        Exact::I(i)
    } else {
        Exact::F(n.as_f64().map_or(u64::MAX, f64::to_bits))
    }
}

/// The numbers of `v["n"]` (a number or an array of numbers), as exact identities.
fn numbers(v: &Value) -> Vec<Exact> {
    match &v["n"] {
        Value::Number(n) => vec![exact(n)],
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_number().map_or(Exact::F(u64::MAX), exact))
            .collect(),
        other => panic!("n is not a number: {other}"),
    }
}

fn open(dir: &std::path::Path) -> Database {
    Database::open_with(
        dir,
        Options::default()
            .clock(ManualClock::at_unix_secs(T0))
            .sync(SyncPolicy::Never),
    )
    .expect("open")
}

fn container(db: &Database) -> Container {
    match db.container("n") {
        Ok(c) => c,
        Err(_) => db
            .create_container(ContainerProperties::new("n", "/pk"))
            .expect("create container"),
    }
}

/// Writes `n` through every write path and checks every read path returns it bit for bit.
fn round_trip(dir: &std::path::Path, id: &str, n: &Value) {
    let want = numbers(&json!({ "n": n }));
    {
        let db = open(dir);
        let c = container(&db);
        let created = c
            .create_item(&json!({"id": id, "pk": "p", "n": n}))
            .expect("create");
        assert_eq!(numbers(&created), want, "create_item's answer");
        let read: Value = c.read_item("p", id).expect("read");
        assert_eq!(numbers(&read), want, "read_item");
        let listed: Vec<Value> = c
            .items()
            .expect("items")
            .collect::<ebbdb::Result<_>>()
            .expect("items");
        let mine = listed
            .iter()
            .find(|v| v["id"] == id)
            .expect("the item is listed");
        assert_eq!(numbers(mine), want, "items()");
        // Upsert what was read back: the value must survive a second trip unchanged.
        let upserted = c.upsert_item(&read).expect("upsert");
        assert_eq!(numbers(&upserted), want, "upsert_item's answer");
        let read2: Value = c.read_item("p", id).expect("read after upsert");
        assert_eq!(numbers(&read2), want, "read_item after upsert");
        drop(db);
    }
    let db = open(dir);
    let c = container(&db);
    let read: Value = c.read_item("p", id).expect("read after reopen");
    assert_eq!(numbers(&read), want, "read_item after reopen");
}

fn finite_f64() -> impl Strategy<Value = f64> {
    any::<u64>()
        .prop_map(f64::from_bits)
        .prop_filter("finite", |f| f.is_finite())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn any_finite_f64_round_trips(fs in proptest::collection::vec(finite_f64(), 1..16)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let arr: Vec<Value> = fs.iter().map(|f| json!(f)).collect();
        round_trip(dir.path(), "x", &Value::Array(arr));
    }

    #[test]
    fn any_integer_round_trips(i in any::<i64>(), u in any::<u64>()) {
        let dir = tempfile::tempdir().expect("tempdir");
        round_trip(dir.path(), "i", &json!([i, u]));
    }
}

#[test]
fn edge_numbers_round_trip() {
    let two53 = 9_007_199_254_740_992_f64;
    let two63 = 9_223_372_036_854_775_808_f64;
    let mut edges = vec![
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        f64::from_bits(1),
        f64::from_bits(0x000f_ffff_ffff_ffff),
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        0.1,
        1.0 / 3.0,
        4.444_444_444_444_444_6e111,
    ];
    for base in [two53, two63, -two53, -two63] {
        let mut x = base;
        for _ in 0..3 {
            x = x.next_down();
        }
        for _ in 0..7 {
            edges.push(x);
            x = x.next_up();
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, f) in edges.iter().enumerate() {
        round_trip(dir.path(), &format!("f{i}"), &json!(f));
    }
    let ints: Vec<Value> = [
        json!(9_007_199_254_740_993_u64),
        json!(-9_007_199_254_740_993_i64),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(1_u64 << 63),
    ]
    .into();
    round_trip(dir.path(), "ints", &Value::Array(ints));
}

/// Integer literals beyond u64 become the nearest double, and stay that double.
#[test]
fn long_integer_literals_become_one_stable_double() {
    let text = format!(
        r#"{{"id": "SO05", "pk": "p", "n": [{}, 18446744073709551616, -9223372036854775809]}}"#,
        "4".repeat(111) + "1"
    );
    let item: Value = serde_json::from_str(&text).expect("parse");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let c = container(&db);
    let created = c.create_item(&item).expect("create");
    let read: Value = c.read_item("p", "SO05").expect("read");
    assert_eq!(numbers(&created), numbers(&read));
    assert_eq!(
        numbers(&read),
        vec![
            Exact::F(4.444_444_444_444_444_6e111_f64.to_bits()),
            Exact::F(18_446_744_073_709_551_616_f64.to_bits()),
            Exact::F((-9_223_372_036_854_775_809_f64).to_bits()),
        ]
    );
}

#[derive(Serialize)]
struct Reading {
    id: String,
    pk: String,
    value: f64,
}

#[test]
fn non_finite_numbers_are_refused_not_stored_as_null() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let c = container(&db);
    for (i, bad) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
        .into_iter()
        .enumerate()
    {
        let r = Reading {
            id: format!("r{i}"),
            pk: "p".into(),
            value: bad,
        };
        let err = c.create_item(&r).expect_err("non-finite must be refused");
        assert_eq!(err.status_code(), 400, "{err}");
        assert!(err.to_string().contains("'value'"), "{err}");
        assert_eq!(
            c.upsert_item(&r).map_err(|e| e.status_code()).err(),
            Some(400)
        );
    }
    assert_eq!(c.count().expect("count"), 0);
    // Text that overflows a double is a parse error, never infinity or null.
    let props = ContainerProperties::from_json_str(
        r#"{"id": "x", "partitionKey": {"paths": ["/pk"]}, "defaultTtl": 1e400}"#,
    );
    assert_eq!(props.map_err(|e| e.status_code()).err(), Some(400));
}
