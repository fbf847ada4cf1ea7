//! Regressions found in review of the query engine: a damaged continuation, aggregate and GROUP BY projection rules, -0.0 in DISTINCT, surrogate pairs, planner pinning, paging, deep chains.
use ebbdb::clock::ManualClock;
use ebbdb::{Container, ContainerProperties, Database, DefaultTtl, Options, Query, QueryOptions};
use serde_json::{json, Value};

const T0: u64 = 1_700_000_000;

fn setup(pk: &str) -> (tempfile::TempDir, ManualClock, Database, Container) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_unix_secs(T0);
    let db =
        Database::open_with(dir.path(), Options::default().clock(clock.clone())).expect("open");
    let c = db
        .create_container(
            ContainerProperties::new("c", pk).with_default_ttl(DefaultTtl::NeverExpire),
        )
        .expect("container");
    (dir, clock, db, c)
}

fn run(c: &Container, q: &Query) -> Vec<Value> {
    c.query(q)
        .and_then(|rows| rows.collect::<ebbdb::Result<Vec<Value>>>())
        .unwrap_or_else(|e| panic!("{}: {e}", &q.text()[..q.text().len().min(80)]))
}

/// A property chain of 999 links is accepted by the parser (MAX_LINKS = 1000) and must
/// evaluate without exhausting the stack of an ordinary (2 MiB) thread.
#[test]
fn deep_property_chain_within_limits_evaluates() {
    let (_d, _k, _db, c) = setup("/pk");
    c.create_item(&json!({"id": "1", "pk": "a"}))
        .expect("test step");
    let text = format!("SELECT VALUE c{} FROM c", ".a".repeat(990));
    let h = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || run(&c, &Query::new(text)).len())
        .expect("test step");
    assert_eq!(h.join().expect("test step"), 0);
}

/// DISTINCT must treat values that compare equal as one: 0 and -0.0 are equal under `=`.
#[test]
fn distinct_negative_zero() {
    let (_d, _k, _db, c) = setup("/pk");
    c.create_item(&json!({"id": "1", "pk": "a", "v": 0}))
        .expect("test step");
    c.create_item(&json!({"id": "2", "pk": "a", "v": -0.0}))
        .expect("test step");
    let eq = run(&c, &Query::new("SELECT VALUE c.id FROM c WHERE c.v = 0"));
    assert_eq!(eq.len(), 2, "both are = 0");
    let d = run(&c, &Query::new("SELECT DISTINCT VALUE c.v FROM c"));
    assert_eq!(d.len(), 1, "DISTINCT gave {d:?}");
}

fn deep(text: String) -> usize {
    let (_d, _k, _db, c) = setup("/pk");
    c.create_item(&json!({"id": "1", "pk": "a"}))
        .expect("test step");
    let h = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || run(&c, &Query::new(text)).len())
        .expect("test step");
    h.join().expect("test step")
}

/// 999 ANDs (MAX_LINKS 1000) inside 120 nested calls (MAX_DEPTH 128): accepted by the parser,
/// must evaluate on a 2 MiB thread.
#[test]
fn deep_and_chain_inside_calls_evaluates() {
    let inner = format!("true{}", " AND true".repeat(999));
    let closing = ")".repeat(120);
    let text = format!(
        "SELECT VALUE {}({inner}{closing}) FROM c",
        "IS_BOOL(".repeat(120)
    );
    assert!(deep(text) <= 1);
}

#[test]
fn deep_and_chain_evaluates() {
    let text = format!("SELECT * FROM c WHERE true{}", " AND true".repeat(999));
    assert_eq!(deep(text), 1);
}

fn all_pages(c: &Container, q: &Query, opts: &QueryOptions, max: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut token = None;
    for _ in 0..1000 {
        let page = c
            .query_page::<Value>(q, &opts.clone().max_item_count(max).continuation(token))
            .unwrap_or_else(|e| panic!("{}: {e}", q.text()));
        out.extend(page.items);
        token = page.continuation;
        if token.is_none() {
            return out;
        }
    }
    panic!("no end")
}

fn seed(c: &Container) {
    let docs = [
        json!({"id": "a1", "pk": "a", "n": 1, "g": "x", "arr": [1, 2, 3]}),
        json!({"id": "a2", "pk": "a", "n": 1.0, "g": "y", "arr": []}),
        json!({"id": "a3", "pk": "a", "n": "1", "arr": [4]}),
        json!({"id": "b1", "pk": "b", "n": 2, "g": "x", "arr": [5, 6]}),
        json!({"id": "b2", "pk": "b", "g": "x", "arr": "no"}),
        json!({"id": "c1", "pk": 1, "n": null, "arr": [7, 8, 9, 10]}),
        json!({"id": "c2", "pk": 1.0, "n": true, "arr": [11]}),
        json!({"id": "c3", "pk": "1", "n": [1], "arr": [12]}),
        json!({"id": "d1", "n": {"a": 1}, "arr": [13, 14]}),
        json!({"id": "d2", "pk": null, "n": -3, "arr": [15]}),
    ];
    for d in docs {
        c.create_item(&d).expect("test step");
    }
}

#[test]
fn paging_equals_full_result() {
    let (_d, _k, _db, c) = setup("/pk");
    seed(&c);
    let queries = [
        "SELECT * FROM c",
        "SELECT VALUE c.id FROM c ORDER BY c.n",
        "SELECT VALUE c.id FROM c ORDER BY c.n DESC",
        "SELECT VALUE [c.id, x] FROM c JOIN x IN c.arr",
        "SELECT VALUE [c.id, x] FROM c JOIN x IN c.arr ORDER BY c.n DESC",
        "SELECT VALUE [c.id, x] FROM c JOIN x IN c.arr WHERE c.pk = 1",
        "SELECT VALUE [c.id, x] FROM c JOIN x IN c.arr WHERE c.pk = 'a'",
        "SELECT TOP 7 VALUE [c.id, x] FROM c JOIN x IN c.arr",
        "SELECT VALUE [c.id, x] FROM c JOIN x IN c.arr OFFSET 3 LIMIT 9",
        "SELECT VALUE [c.id, x] FROM c JOIN x IN c.arr ORDER BY x DESC OFFSET 3 LIMIT 9",
        "SELECT DISTINCT VALUE c.n FROM c",
        "SELECT DISTINCT VALUE c.n FROM c ORDER BY c.n",
        "SELECT c.g, COUNT(1) AS n FROM c GROUP BY c.g",
        "SELECT VALUE COUNT(1) FROM c",
        "SELECT VALUE c.id FROM c WHERE c.pk = 1",
        "SELECT VALUE c.id FROM c WHERE c.pk = 1 AND c.id = 'c2'",
        "SELECT VALUE c.n FROM c",
        "SELECT TOP 3 VALUE c.id FROM c ORDER BY c.pk",
    ];
    for text in queries {
        let q = Query::new(text);
        let full = run(&c, &q);
        for max in 1..4 {
            let paged = all_pages(&c, &q, &QueryOptions::default(), max);
            assert_eq!(paged, full, "{text} max={max}");
        }
    }
}

/// `c.pk = 1` must match items whose pk is 1 and 1.0 (one partition) but not "1".
#[test]
fn planner_pins_numeric_partition_correctly() {
    let (_d, _k, _db, c) = setup("/pk");
    seed(&c);
    let ids = run(&c, &Query::new("SELECT VALUE c.id FROM c WHERE c.pk = 1"));
    assert_eq!(ids, vec![json!("c1"), json!("c2")]);
    let ids = run(&c, &Query::new("SELECT VALUE c.id FROM c WHERE c.pk = '1'"));
    assert_eq!(ids, vec![json!("c3")]);
    let ids = run(
        &c,
        &Query::new("SELECT VALUE c.id FROM c WHERE c.pk = null"),
    );
    assert_eq!(ids, vec![json!("d2")]);
    let ids = run(
        &c,
        &Query::new("SELECT VALUE c.id FROM c WHERE NOT (c.pk = 'a') AND c.pk = 'b'"),
    );
    assert_eq!(ids, vec![json!("b1"), json!("b2")]);
    let ids = run(
        &c,
        &Query::new("SELECT VALUE c.id FROM c WHERE c.pk = 'a' OR c.pk = 'b'"),
    );
    assert_eq!(ids.len(), 5);
}

/// Nested/escaped partition key paths.
#[test]
fn planner_escaped_nested_path() {
    let (_d, _k, _db, c) = setup("/a~1b/c~0d");
    c.create_item(&json!({"id": "1", "a/b": {"c~d": "v"}}))
        .expect("test step");
    c.create_item(&json!({"id": "2", "a/b": {"c~d": "w"}}))
        .expect("test step");
    let ids = run(
        &c,
        &Query::new("SELECT VALUE c.id FROM c WHERE c[\"a/b\"][\"c~d\"] = 'v'"),
    );
    assert_eq!(ids, vec![json!("1")]);
    let ids = run(
        &c,
        &Query::new("SELECT VALUE c.id FROM c WHERE c[\"a/b\"][\"c~d\"] = 'v' AND c.id = '1'"),
    );
    assert_eq!(ids, vec![json!("1")]);
}

/// A projection mixing an aggregate with a per-row value without GROUP BY is a 400 in Cosmos.
#[test]
fn value_mixing_aggregate_and_row_value_is_400() {
    let (_d, _k, _db, c) = setup("/pk");
    seed(&c);
    let r = c.query::<Value>(&Query::new("SELECT VALUE [c.id, COUNT(1)] FROM c"));
    match r {
        Err(e) => assert_eq!(e.status_code(), 400),
        Ok(rows) => panic!("not a 400: {:?}", rows.collect::<Vec<_>>()),
    }
}

/// Projecting a value that is not grouped is a 400 in Cosmos.
#[test]
fn group_by_projection_of_ungrouped_field_is_400() {
    let (_d, _k, _db, c) = setup("/pk");
    seed(&c);
    let r = c.query::<Value>(&Query::new(
        "SELECT c.id, COUNT(1) AS n FROM c GROUP BY c.g",
    ));
    match r {
        Err(e) => assert_eq!(e.status_code(), 400),
        Ok(rows) => panic!("not a 400: {:?}", rows.collect::<Vec<_>>()),
    }
}

/// A damaged continuation (here: a huge "emitted" count) must be a 400, never a panic.
#[test]
fn damaged_continuation_emitted_overflow() {
    let (_d, _k, _db, c) = setup("/pk");
    seed(&c);
    let q = Query::new("SELECT VALUE c.id FROM c");
    let p = c
        .query_page::<Value>(&q, &QueryOptions::default().max_item_count(1))
        .expect("test step");
    let mut tok: Value =
        serde_json::from_str(p.continuation.as_deref().expect("test step")).expect("test step");
    tok["c"]["e"] = json!(u64::MAX);
    let damaged = tok.to_string();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.query_page::<Value>(
            &q,
            &QueryOptions::default()
                .max_item_count(1)
                .continuation(Some(damaged)),
        )
        .map(|p| (p.items, p.continuation))
    }));
    match r {
        Err(_) => panic!("query_page panicked on a damaged token"),
        Ok(Err(e)) => assert_eq!(e.status_code(), 400),
        Ok(Ok(page)) => panic!("accepted a damaged token: {page:?}"),
    }
}

#[test]
fn plain_count_matches_filtered_count_with_expiry() {
    let (_d, k, _db, c) = setup("/pk");
    seed(&c);
    c.create_item(&json!({"id": "t1", "pk": "a", "ttl": 5}))
        .expect("test step");
    c.create_item(&json!({"id": "t2", "pk": "b", "ttl": 50}))
        .expect("test step");
    let count = |text: &str| run(&c, &Query::new(text));
    assert_eq!(
        count("SELECT VALUE COUNT(1) FROM c"),
        count("SELECT VALUE COUNT(1) FROM c WHERE true")
    );
    k.advance(std::time::Duration::from_secs(10));
    assert_eq!(count("SELECT VALUE COUNT(1) FROM c"), vec![json!(11)]);
    assert_eq!(
        count("SELECT VALUE COUNT(1) FROM c WHERE true"),
        vec![json!(11)]
    );
}

/// A JSON-style surrogate pair escape in a string literal (as Cosmos accepts) is not a 400.
#[test]
fn surrogate_pair_escape_in_string_literal() {
    let (_d, _k, _db, c) = setup("/pk");
    c.create_item(&json!({"id": "1", "pk": "a", "s": "\u{1F600}"}))
        .expect("test step");
    let r = c.query::<Value>(&Query::new(
        r"SELECT VALUE c.id FROM c WHERE c.s = '\ud83d\ude00'",
    ));
    let rows: Vec<Value> = r
        .and_then(|r| r.collect())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows, vec![json!("1")]);
}
