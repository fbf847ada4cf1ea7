use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{Container, ContainerProperties, Database, DefaultTtl, Options, Query, QueryOptions};
use serde_json::{json, Value};

const T0: u64 = 1_700_000_000;

/// Every path the cases query, indexed when the suite runs with indexes.
const INDEXED_PATHS: [&str; 11] = [
    "/id/?", "/pk/?", "/n/?", "/s/?", "/flag/?", "/nul/?", "/a/?", "/o/k/?", "/tags/?",
    "/missing/?", "/total/?",
];

/// A container's properties in this run of the suite (with or without indexes).
fn props(id: &str, pk: &str) -> ContainerProperties {
    let p = ContainerProperties::new(id, pk).with_default_ttl(DefaultTtl::NeverExpire);
    if INDEXED {
        p.with_included_paths(INDEXED_PATHS)
    } else {
        p
    }
}

fn setup() -> (tempfile::TempDir, ManualClock, Database, Container) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_unix_secs(T0);
    let db =
        Database::open_with(dir.path(), Options::default().clock(clock.clone())).expect("open");
    let c = db
        .create_container(props("orders", "/pk"))
        .expect("container");
    for doc in [
        json!({"id": "1", "pk": "a", "n": 5, "s": "apple", "tags": ["x", "y"], "o": {"k": 1}}),
        json!({"id": "2", "pk": "a", "n": 2.5, "s": "Banana", "tags": ["y"], "flag": true}),
        json!({"id": "3", "pk": "b", "n": "5", "s": "cherry", "nul": null}),
        json!({"id": "4", "pk": "b", "s": "date", "flag": false}),
        json!({"id": "5", "pk": "c", "n": -1, "s": "50% off"}),
    ] {
        c.create_item(&doc).expect("create");
    }
    (dir, clock, db, c)
}

fn run(c: &Container, text: &str) -> Vec<Value> {
    c.query(&Query::new(text))
        .and_then(|rows| rows.collect::<ebbdb::Result<Vec<Value>>>())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn ids(c: &Container, text: &str) -> Vec<String> {
    run(c, text)
        .into_iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect()
}

#[test]
fn select_star_returns_items_with_system_properties() {
    let (_d, _c, _db, c) = setup();
    let rows = run(&c, "SELECT * FROM c WHERE c.id = '1'");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["s"], "apple");
    assert!(rows[0]["_ts"].is_u64() && rows[0]["_etag"].is_string());
}

#[test]
fn projections_aliases_and_constructors() {
    let (_d, _c, _db, c) = setup();
    let rows = run(
        &c,
        "SELECT c.id, c.o.k AS k, {\"t\": c.tags[0]} AS first, [c.n, 1] AS arr FROM c WHERE c.id = '1'",
    );
    assert_eq!(
        rows,
        vec![json!({"id": "1", "k": 1, "first": {"t": "x"}, "arr": [5, 1]})]
    );
    // Undefined values are left out of the projected object.
    let rows = run(&c, "SELECT c.id, c.flag FROM c WHERE c.id = '1'");
    assert_eq!(rows, vec![json!({"id": "1"})]);
    // SELECT VALUE of an undefined value yields no row.
    assert_eq!(run(&c, "SELECT VALUE c.flag FROM c ORDER BY c.id").len(), 2);
    assert_eq!(
        run(&c, "SELECT VALUE c[\"s\"] FROM c WHERE c.id = '3'"),
        vec![json!("cherry")]
    );
}

#[test]
fn comparisons_across_types_are_undefined_and_drop_the_row() {
    let (_d, _c, _db, c) = setup();
    // "5" (a string) is neither = 5 nor > 1: different types compare as undefined.
    assert_eq!(ids(&c, "SELECT VALUE c.id FROM c WHERE c.n = 5"), vec!["1"]);
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.n > 1"),
        vec!["1", "2"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.n != 5"),
        vec!["2", "5"]
    );
    // Missing properties are undefined, not null.
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.nul = null"),
        vec!["3"]
    );
    assert!(ids(&c, "SELECT VALUE c.id FROM c WHERE c.missing = null").is_empty());
    // Strings compare by code point: "Banana" < "b".
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.s < 'b'"),
        vec!["1", "2", "5"]
    );
}

#[test]
fn three_valued_and_or_not() {
    let (_d, _c, _db, c) = setup();
    // flag is undefined for 1, 3 and 5: NOT undefined is undefined, so they are dropped.
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE NOT c.flag"),
        vec!["4"]
    );
    // undefined OR true is true. undefined AND false is false, so NOT of it is true: only 3
    // (undefined AND undefined) stays undefined below and is dropped.
    assert_eq!(
        run(&c, "SELECT VALUE c.id FROM c WHERE c.flag OR c.n = 5").len(),
        2
    );
    assert_eq!(
        ids(
            &c,
            "SELECT VALUE c.id FROM c WHERE NOT (c.flag AND c.n = 99)"
        ),
        vec!["1", "2", "4", "5"]
    );
}

#[test]
fn in_between_like_coalesce_ternary_and_arithmetic() {
    let (_d, _c, _db, c) = setup();
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk IN ('b', 'c')"),
        vec!["3", "4", "5"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk NOT IN ('a', 'b')"),
        vec!["5"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.n BETWEEN 0 AND 5"),
        vec!["1", "2"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.s LIKE '%an%'"),
        vec!["2"]
    );
    assert_eq!(
        ids(
            &c,
            "SELECT VALUE c.id FROM c WHERE c.s LIKE '50!%%' ESCAPE '!'"
        ),
        vec!["5"]
    );
    assert_eq!(
        run(&c, "SELECT VALUE c.flag ?? 'none' FROM c WHERE c.id = '1'"),
        vec![json!("none")]
    );
    assert_eq!(
        run(
            &c,
            "SELECT VALUE (c.n > 3 ? 'big' : 'small') FROM c WHERE c.id = '2'"
        ),
        vec![json!("small")]
    );
    assert_eq!(
        run(&c, "SELECT VALUE c.n * 2 + 1 FROM c WHERE c.id = '1'"),
        vec![json!(11)]
    );
    assert_eq!(
        run(&c, "SELECT VALUE c.s || '!' FROM c WHERE c.id = '4'"),
        vec![json!("date!")]
    );
    assert!(
        run(&c, "SELECT VALUE c.n + 1 FROM c WHERE c.id = '3'").is_empty(),
        "string + number is undefined"
    );
}

#[test]
fn system_functions() {
    let (_d, _c, _db, c) = setup();
    let one = |e: &str| {
        run(&c, &format!("SELECT VALUE {e} FROM c WHERE c.id = '1'"))
            .pop()
            .unwrap_or(Value::String("<undefined>".into()))
    };
    assert_eq!(one("IS_DEFINED(c.flag)"), json!(false));
    assert_eq!(one("IS_NUMBER(c.n)"), json!(true));
    assert_eq!(one("IS_STRING(c.s)"), json!(true));
    assert_eq!(one("IS_ARRAY(c.tags)"), json!(true));
    assert_eq!(one("IS_OBJECT(c.o)"), json!(true));
    assert_eq!(one("IS_BOOL(c.n)"), json!(false));
    assert_eq!(one("IS_NULL(c.n)"), json!(false));
    assert_eq!(one("STARTSWITH(c.s, 'APP', true)"), json!(true));
    assert_eq!(one("ENDSWITH(c.s, 'le')"), json!(true));
    assert_eq!(one("CONTAINS(c.s, 'ppl')"), json!(true));
    assert_eq!(one("UPPER(c.s)"), json!("APPLE"));
    assert_eq!(one("LOWER('AbC')"), json!("abc"));
    assert_eq!(one("LENGTH(c.s)"), json!(5));
    assert_eq!(one("SUBSTRING(c.s, 1, 3)"), json!("ppl"));
    assert_eq!(one("CONCAT(c.s, '-', c.id)"), json!("apple-1"));
    assert_eq!(one("INDEX_OF(c.s, 'l')"), json!(3));
    assert_eq!(one("ARRAY_CONTAINS(c.tags, 'y')"), json!(true));
    assert_eq!(one("ARRAY_LENGTH(c.tags)"), json!(2));
    assert_eq!(one("ABS(-3)"), json!(3));
    assert_eq!(one("FLOOR(2.7)"), json!(2));
    assert_eq!(one("CEILING(2.1)"), json!(3));
    assert_eq!(one("ROUND(2.5)"), json!(3));
    assert_eq!(
        one("UPPER(c.n)"),
        json!("<undefined>"),
        "a string function on a number"
    );
}

#[test]
fn order_by_across_types_top_offset_limit_distinct() {
    let (_d, _c, _db, c) = setup();
    // undefined < numbers < strings: 4 (no n), 5 (-1), 2 (2.5), 1 (5), 3 ("5").
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c ORDER BY c.n"),
        vec!["4", "5", "2", "1", "3"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c ORDER BY c.n DESC"),
        vec!["3", "1", "2", "5", "4"]
    );
    assert_eq!(
        ids(&c, "SELECT TOP 2 VALUE c.id FROM c ORDER BY c.id DESC"),
        vec!["5", "4"]
    );
    assert_eq!(
        ids(
            &c,
            "SELECT VALUE c.id FROM c ORDER BY c.id OFFSET 1 LIMIT 2"
        ),
        vec!["2", "3"]
    );
    assert_eq!(
        ids(&c, "SELECT DISTINCT VALUE c.pk FROM c ORDER BY c.pk"),
        vec!["a", "b", "c"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c ORDER BY c.pk DESC, c.id"),
        vec!["5", "3", "4", "1", "2"]
    );
}

#[test]
fn aggregates() {
    let (_d, _c, _db, c) = setup();
    assert_eq!(run(&c, "SELECT VALUE COUNT(1) FROM c"), vec![json!(5)]);
    assert_eq!(
        run(&c, "SELECT VALUE COUNT(c.n) FROM c"),
        vec![json!(4)],
        "COUNT counts defined values"
    );
    assert_eq!(
        run(&c, "SELECT VALUE SUM(c.n) FROM c WHERE IS_NUMBER(c.n)"),
        vec![json!(6.5)]
    );
    assert!(
        run(&c, "SELECT VALUE SUM(c.n) FROM c").is_empty(),
        "SUM over a string is undefined"
    );
    assert_eq!(
        run(&c, "SELECT VALUE AVG(c.n) FROM c WHERE c.pk = 'a'"),
        vec![json!(3.75)]
    );
    assert_eq!(run(&c, "SELECT VALUE MIN(c.n) FROM c"), vec![json!(-1)]);
    assert_eq!(
        run(&c, "SELECT VALUE MAX(c.n) FROM c"),
        vec![json!("5")],
        "strings sort after numbers"
    );
    assert_eq!(
        run(&c, "SELECT COUNT(1) AS n, MAX(c.id) AS last FROM c"),
        vec![json!({"n": 5, "last": "5"})]
    );
    assert_eq!(
        run(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.pk = 'zzz'"),
        vec![json!(0)]
    );
}

#[test]
fn parameters_and_partition_scoped_queries() {
    let (_d, _c, _db, c) = setup();
    let q = Query::new("SELECT VALUE c.id FROM c WHERE c.n >= @min AND c.pk = @pk")
        .param("@min", 2)
        .param("pk", "a");
    let got: Vec<String> = c
        .query(&q)
        .expect("query")
        .collect::<ebbdb::Result<_>>()
        .expect("rows");
    assert_eq!(got, vec!["1", "2"]);
    let q = Query::new("SELECT VALUE c.id FROM c ORDER BY c.id");
    let got: Vec<String> = c
        .query_with(&q, &QueryOptions::default().partition_key("b"))
        .expect("query")
        .collect::<ebbdb::Result<_>>()
        .expect("rows");
    assert_eq!(got, vec!["3", "4"]);
}

#[test]
fn bad_queries_are_400s_naming_the_position() {
    let (_d, _c, _db, c) = setup();
    for text in [
        "SELECT * FROM c WHERE",
        "SELECT * FRM c",
        "SELECT FOO(c.a) FROM c",
        "SELECT * FROM c WHERE c.a = @missing",
        "SELECT c.id, COUNT(1) FROM c",
        "SELECT * FROM c WHERE COUNT(1) > 1",
        "SELECT * FROM c WHERE c.s = 'unterminated",
        "SELECT TOP -1 * FROM c",
        "SELECT VALUE t FROM c JOIN t IN COUNT(1)",
    ] {
        let e = c.query::<Value>(&Query::new(text)).expect_err(text);
        assert_eq!(e.status_code(), 400, "{text}: {e}");
    }
    let e = c
        .query::<Value>(&Query::new("SELECT * FROM c WHERE c.a =="))
        .expect_err("syntax");
    assert!(e.to_string().contains("position"), "{e}");
}

#[test]
fn expired_items_appear_in_no_clause_count_or_aggregate() {
    let (_d, clock, _db, c) = setup();
    c.create_item(&json!({"id": "t1", "pk": "a", "n": 100, "ttl": 10}))
        .expect("create");
    c.create_item(&json!({"id": "t2", "pk": "b", "n": 200, "ttl": 20}))
        .expect("create");
    assert_eq!(run(&c, "SELECT VALUE COUNT(1) FROM c"), vec![json!(7)]);
    clock.advance(Duration::from_secs(10));
    assert_eq!(run(&c, "SELECT VALUE COUNT(1) FROM c"), vec![json!(6)]);
    assert_eq!(
        run(&c, "SELECT VALUE MAX(c.n) FROM c WHERE IS_NUMBER(c.n)"),
        vec![json!(200)]
    );
    assert!(ids(&c, "SELECT VALUE c.id FROM c WHERE c.id = 't1'").is_empty());
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        run(&c, "SELECT VALUE SUM(c.n) FROM c WHERE IS_NUMBER(c.n)"),
        vec![json!(6.5)]
    );
    assert!(!ids(&c, "SELECT VALUE c.id FROM c ORDER BY c.n DESC").contains(&"t2".to_string()));
}

/// Items the document layer wrote are read only as far as a query needs (their records say
/// so); a value put through the key-value API (bypassing the indexes, so the property is an
/// unindexed one) is not vouched for: it is read to its end, so
/// a repeated name yields its last occurrence (as the parser has it) and damage after the
/// wanted property is still refused.
#[test]
fn a_raw_put_into_a_container_is_read_whole_and_checked() {
    let (_d, _c, _db, c) = setup();
    let dup = ebbdb::doc::partition::encode_key(&"zzz".into(), "dup");
    c.keyspace()
        .put(&dup, br#"{"id":"dup","pk":"zzz","m":1,"m":50}"#)
        .expect("raw put");
    assert_eq!(
        run(&c, "SELECT VALUE c.m FROM c WHERE c.m >= 50"),
        vec![json!(50)]
    );
    assert_eq!(run(&c, "SELECT VALUE c.m FROM c WHERE c.m = 1"), Vec::<Value>::new());
    // Written by the container, the same properties are read as usual.
    c.create_item(&json!({"id": "fine", "pk": "zzz", "m": 60}))
        .expect("create");
    assert_eq!(
        run(&c, "SELECT VALUE c.m FROM c WHERE c.m >= 50 ORDER BY c.m"),
        vec![json!(50), json!(60)]
    );
    let cut = ebbdb::doc::partition::encode_key(&"zzz".into(), "cut");
    c.keyspace()
        .put(&cut, br#"{"_etag":"x","id":"cut","pk":"zzz","n":7,"x":tru}"#)
        .expect("raw put");
    assert!(c
        .query::<Value>(&Query::new("SELECT VALUE c._etag FROM c"))
        .and_then(|r| r.collect::<ebbdb::Result<Vec<_>>>())
        .is_err());
}

/// A query naming more top-level properties than the early stop tracks (64) reads every
/// item whole: a property after the 64th is found, a repeated name in a raw put yields its last
/// occurrence, and damage after the 64th is refused.
#[test]
fn a_query_naming_more_than_sixty_four_properties_reads_items_whole() {
    let (_d, _c, _db, c) = setup();
    let names: Vec<String> = (0..64).map(|i| format!("a{i:02}")).collect();
    let mut item = serde_json::Map::new();
    item.insert("id".into(), json!("wide"));
    item.insert("pk".into(), json!("zzz"));
    for (i, n) in names.iter().enumerate() {
        item.insert(n.clone(), json!(i));
    }
    item.insert("zz".into(), json!("last"));
    c.create_item(&Value::Object(item)).expect("create");
    let listed = |extra: &str| {
        let mut all: Vec<String> = names.iter().map(|n| format!("c.{n}")).collect();
        if !extra.is_empty() {
            all.push(extra.to_string());
        }
        all.join(", ")
    };
    let sixty_five = format!(
        "SELECT VALUE [{}] FROM c WHERE c.id = 'wide'",
        listed("c.zz")
    );
    let want: Vec<Value> = (0..64).map(|i| json!(i)).chain([json!("last")]).collect();
    assert_eq!(run(&c, &sixty_five), vec![Value::Array(want)]);
    let filtered = format!("SELECT VALUE [{}] FROM c WHERE c.zz = 'last'", listed(""));
    assert_eq!(run(&c, &filtered).len(), 1);

    let mut text = String::from(r#"{"id":"raw","pk":"zzz""#);
    for (i, n) in names.iter().enumerate() {
        text.push_str(&format!(r#","{n}":{i}"#));
    }
    let key = ebbdb::doc::partition::encode_key(&"zzz".into(), "raw");
    let repeated = format!(r#"{text},"a00":99}}"#);
    c.keyspace().put(&key, repeated.as_bytes()).expect("raw put");
    let first = format!("SELECT VALUE c.a00 FROM c WHERE c.pk = 'zzz' AND c.a63 = 63 AND IS_ARRAY([{}])", listed(""));
    // A raw put is not indexed: the partition is scanned ("raw" sorts before "wide").
    assert_eq!(run(&c, &first), vec![json!(99), json!(0)]);
    let damaged = format!(r#"{text},"zz":tru"#);
    c.keyspace().put(&key, damaged.as_bytes()).expect("raw put");
    assert!(c
        .query::<Value>(&Query::new(format!("SELECT {} FROM c", listed(""))))
        .and_then(|r| r.collect::<ebbdb::Result<Vec<_>>>())
        .is_err());
}

/// An equality on the partition key path reads only that partition, and an equality on `id`
/// with a known partition is a point read: proven by a damaged (non-JSON) item elsewhere,
/// which a full scan trips over. Results are the same as with the partition given in options.
#[test]
fn the_planner_reads_only_the_pinned_partition() {
    let (_d, _c, _db, c) = setup();
    let junk_key = ebbdb::doc::partition::encode_key(&"zzz".into(), "junk");
    c.keyspace().put(&junk_key, b"not json").expect("raw put");
    let full = c.query::<Value>(&Query::new("SELECT * FROM c"));
    assert!(
        full.is_err(),
        "a full scan meets the damaged item (this is what makes the test able to fail)"
    );
    assert_eq!(
        ids(
            &c,
            "SELECT VALUE c.id FROM c WHERE c.pk = 'a' ORDER BY c.id"
        ),
        vec!["1", "2"]
    );
    let q = Query::new("SELECT VALUE c.id FROM c WHERE @p = c.pk AND c.n > 1").param("@p", "a");
    let got: Vec<String> = c
        .query(&q)
        .expect("query")
        .collect::<ebbdb::Result<_>>()
        .expect("rows");
    assert_eq!(got, vec!["1", "2"]);
    assert_eq!(
        ids(
            &c,
            "SELECT VALUE c.s FROM c WHERE c.pk = 'b' AND c.id = '3'"
        ),
        vec!["cherry"]
    );
    assert!(ids(
        &c,
        "SELECT VALUE c.s FROM c WHERE c.pk = 'b' AND c.id = '1'"
    )
    .is_empty());
    // The id equality alone cannot pin a partition: without an index on /id this one scans,
    // and meets the junk; with one, it reads only the items the index names.
    let by_id = c.query::<Value>(&Query::new("SELECT * FROM c WHERE c.id = '1'"));
    assert_eq!(by_id.is_err(), !INDEXED);
}

/// Reading one partition, a query skips the WHERE terms the partition makes true for the
/// items the container wrote, and only those: the other terms still filter, a second
/// equality on the partition key naming another value still refuses every item, a numeric
/// partition key (`1` = `1.0`, `0` = `-0`) is pinned and skipped the same way, and a value put
/// through the key-value API under the partition's prefix, whose body names another
/// partition, is checked by the whole WHERE.
#[test]
fn a_pinned_partition_skips_only_the_terms_it_makes_true() {
    let (_d, _c, _db, c) = setup();
    let stray = ebbdb::doc::partition::encode_key(&"a".into(), "stray");
    c.keyspace()
        .put(&stray, br#"{"id":"stray","pk":"b","n":9}"#)
        .expect("raw put");
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 'a'"),
        vec!["1", "2"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 'a' AND c.n > 3"),
        vec!["1"]
    );
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 'a' AND c.pk = 'b'"),
        Vec::<String>::new()
    );
    assert_eq!(
        run(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.pk = 'a' AND c.n >= 2.5"),
        vec![json!(2)]
    );
    let q = Query::new("SELECT * FROM c WHERE c.pk = @p").param("@p", "a");
    let got: Vec<Value> = c
        .query(&q)
        .expect("query")
        .collect::<ebbdb::Result<_>>()
        .expect("rows");
    assert_eq!(got.len(), 2);
    assert_eq!(got[1]["s"], "Banana");
    // The stray body names partition 'b', but 'b' reads only what lies under 'b's prefix.
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 'b' ORDER BY c.id"),
        vec!["3", "4"]
    );
    // A patch would turn the stray into a document item contradicting its key: refused, alone
    // or in a batch, and the stray stays out of partition 'a's results.
    let err = c
        .patch_item("a", "stray", &[ebbdb::PatchOp::set("/n", 1)])
        .expect_err("a patch of a value from another partition");
    assert!(matches!(err, ebbdb::Error::BadRequest(_)), "{err:?}");
    let mut batch = ebbdb::TransactionalBatch::new("a");
    batch.patch_item("stray", &[ebbdb::PatchOp::set("/n", 1)]);
    let done = c.execute_batch(&batch).expect("batch");
    assert!(!done.is_success());
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 'a'"),
        vec!["1", "2"]
    );
    // A value whose partition key matches its key is patched as an item.
    let home = ebbdb::doc::partition::encode_key(&"a".into(), "home");
    c.keyspace()
        .put(&home, br#"{"id":"home","pk":"a","n":0}"#)
        .expect("raw put");
    c.patch_item("a", "home", &[ebbdb::PatchOp::set("/n", 1)])
        .expect("patch");
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 'a' AND c.n = 1"),
        vec!["home"]
    );
    for (id, pk) in [("one", json!(1)), ("zero", json!(-0.0)), ("t", json!(true))] {
        c.create_item(&json!({"id": id, "pk": pk, "n": 1}))
            .expect("create");
    }
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 1.0 AND c.n = 1"),
        vec!["one"]
    );
    assert_eq!(ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 0"), vec!["zero"]);
    assert_eq!(ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = true"), vec!["t"]);
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.pk = 1 AND c.pk = 2"),
        Vec::<String>::new()
    );
}

/// A partition key path naming a system property: the property is stamped anew when an
/// item is written, so the item's key need not name what its text holds there, and the
/// WHERE's equality on it is evaluated as written.
#[test]
fn a_system_property_partition_key_is_still_checked_by_the_where() {
    let (_d, _c, db, _) = setup();
    let c = db.create_container(props("sys", "/_rid")).expect("container");
    c.create_item(&json!({"id": "1", "_rid": "a", "n": 1}))
        .expect("create");
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c._rid = 'a'"),
        Vec::<String>::new()
    );
    let q = Query::new("SELECT VALUE c.id FROM c");
    let opts = QueryOptions {
        partition_key: Some("a".into()),
        ..QueryOptions::default()
    };
    let all: Vec<Value> = c
        .query_with(&q, &opts)
        .expect("query")
        .collect::<ebbdb::Result<_>>()
        .expect("rows");
    assert_eq!(all, vec![json!("1")]);
}

#[test]
fn join_iterates_an_items_array() {
    let (_d, _c, _db, c) = setup();
    assert_eq!(
        ids(&c, "SELECT VALUE t FROM c JOIN t IN c.tags ORDER BY t"),
        vec!["x", "y", "y"]
    );
    assert_eq!(
        run(
            &c,
            "SELECT c.id, t AS tag FROM c JOIN t IN c.tags WHERE t = 'y' ORDER BY c.id"
        ),
        vec![
            json!({"id": "1", "tag": "y"}),
            json!({"id": "2", "tag": "y"})
        ]
    );
    // SELECT * with a JOIN returns each alias's value.
    let rows = run(&c, "SELECT * FROM c JOIN t IN c.tags WHERE c.id = '2'");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["t"], "y");
    assert_eq!(rows[0]["c"]["id"], "2");
    // Items without the array (or with a non-array) give no rows; counts follow the rows.
    assert_eq!(
        run(&c, "SELECT VALUE COUNT(1) FROM c JOIN t IN c.tags"),
        vec![json!(3)]
    );
    // Nested joins see the earlier alias.
    c.create_item(&json!({"id": "j", "pk": "j", "lines": [{"qty": [1, 2]}, {"qty": [3]}]}))
        .expect("create");
    assert_eq!(
        run(
            &c,
            "SELECT VALUE SUM(q) FROM c JOIN l IN c.lines JOIN q IN l.qty"
        ),
        vec![json!(6)]
    );
}

#[test]
fn group_by_with_aggregates_and_missing_fields() {
    let (_d, _c, _db, c) = setup();
    assert_eq!(
        run(&c, "SELECT c.pk, COUNT(1) AS n FROM c GROUP BY c.pk"),
        vec![
            json!({"pk": "a", "n": 2}),
            json!({"pk": "b", "n": 2}),
            json!({"pk": "c", "n": 1})
        ]
    );
    // Items missing the grouping field form one group whose field is left out.
    assert_eq!(
        run(&c, "SELECT c.flag, COUNT(1) AS n FROM c GROUP BY c.flag"),
        vec![
            json!({"n": 3}),
            json!({"flag": false, "n": 1}),
            json!({"flag": true, "n": 1})
        ]
    );
    // SUM over a group holding a string is undefined: that field is left out.
    assert_eq!(
        run(&c, "SELECT c.pk, SUM(c.n) AS total FROM c GROUP BY c.pk"),
        vec![
            json!({"pk": "a", "total": 7.5}),
            json!({"pk": "b"}),
            json!({"pk": "c", "total": -1})
        ]
    );
    assert_eq!(
        run(&c, "SELECT VALUE COUNT(1) FROM c GROUP BY c.pk"),
        vec![json!(2), json!(2), json!(1)]
    );
    for bad in [
        "SELECT * FROM c GROUP BY c.pk",
        "SELECT c.pk FROM c GROUP BY c.pk ORDER BY c.pk",
        "SELECT COUNT(1) FROM c GROUP BY COUNT(1)",
    ] {
        let e = c.query::<Value>(&Query::new(bad)).expect_err(bad);
        assert_eq!(e.status_code(), 400, "{bad}");
    }
}

fn all_pages(c: &Container, q: &Query, opts: QueryOptions) -> (Vec<Value>, usize) {
    let mut token = None;
    let mut rows = Vec::new();
    let mut pages = 0;
    loop {
        let page = c
            .query_page::<Value>(q, &opts.clone().continuation(token))
            .expect("page");
        pages += 1;
        assert!(page.items.len() <= opts.max_item_count.unwrap_or(100));
        rows.extend(page.items);
        match page.continuation {
            Some(t) => token = Some(t),
            None => return (rows, pages),
        }
        assert!(pages < 1000, "paging does not end");
    }
}

#[test]
fn paging_returns_every_row_once_in_order() {
    let (_d, _c, _db, c) = setup();
    for i in 0..45 {
        c.create_item(&json!({"id": format!("p{i:02}"), "pk": format!("k{}", i % 4), "n": i % 7}))
            .expect("create");
    }
    for text in [
        "SELECT VALUE c.id FROM c",
        "SELECT VALUE c.id FROM c ORDER BY c.n DESC, c.id",
        "SELECT VALUE c.id FROM c WHERE STARTSWITH(c.id, 'p') ORDER BY c.id OFFSET 3 LIMIT 30",
        "SELECT TOP 17 VALUE c.id FROM c ORDER BY c.n",
        "SELECT TOP 17 VALUE c.id FROM c",
        "SELECT DISTINCT VALUE c.n FROM c",
        "SELECT c.pk, COUNT(1) AS n FROM c GROUP BY c.pk",
        "SELECT VALUE t FROM c JOIN t IN c.tags",
    ] {
        let q = Query::new(text);
        let whole = run(&c, text);
        for size in [1, 4, 10, 100] {
            let (paged, pages) = all_pages(&c, &q, QueryOptions::default().max_item_count(size));
            assert_eq!(paged, whole, "{text}, pages of {size}");
            assert!(pages >= whole.len().div_ceil(size).max(1), "{text}");
        }
    }
}

/// `SELECT *` rows are the stored texts, copied into one buffer per page: they must come out
/// whole and each the right item where rows are dropped after being kept (the cursor's own
/// item on a continued page, the sort-and-cut of an `ORDER BY` with a bound over more than 64
/// rows, `OFFSET`), as the rows `SELECT VALUE c` builds do.
#[test]
fn select_star_rows_are_their_own_items_through_cuts_and_pages() {
    let (_d, _c, _db, c) = setup();
    for i in 0..150 {
        let pad = "x".repeat(i % 13);
        c.create_item(&json!({"id": format!("m{i:03}"), "pk": format!("k{}", i % 3),
            "n": (i * 37) % 150, "s": pad}))
            .expect("create");
    }
    for (star, value) in [
        (
            "SELECT TOP 5 * FROM c ORDER BY c.n DESC",
            "SELECT TOP 5 VALUE c FROM c ORDER BY c.n DESC",
        ),
        (
            "SELECT TOP 9 * FROM c WHERE c.n >= 3 ORDER BY c.n",
            "SELECT TOP 9 VALUE c FROM c WHERE c.n >= 3 ORDER BY c.n",
        ),
        (
            "SELECT * FROM c WHERE c.n >= 10 ORDER BY c.s DESC OFFSET 20 LIMIT 90",
            "SELECT VALUE c FROM c WHERE c.n >= 10 ORDER BY c.s DESC OFFSET 20 LIMIT 90",
        ),
        (
            "SELECT * FROM c WHERE c.n >= 10",
            "SELECT VALUE c FROM c WHERE c.n >= 10",
        ),
    ] {
        let whole = run(&c, value);
        assert!(whole.len() >= 5, "{value}");
        assert_eq!(run(&c, star), whole, "{star}");
        for size in [1, 7, 64] {
            let opts = QueryOptions::default().max_item_count(size);
            let (paged, _) = all_pages(&c, &Query::new(star), opts);
            assert_eq!(paged, whole, "{star}, pages of {size}");
        }
    }
}

#[test]
fn paging_survives_writes_and_reopen_between_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_unix_secs(T0);
    let open =
        || Database::open_with(dir.path(), Options::default().clock(clock.clone())).expect("open");
    let db = open();
    let c = db
        .create_container(props("c", "/pk"))
        .expect("container");
    for i in 0..30 {
        c.create_item(
            &json!({"id": format!("i{i:02}"), "pk": "p", "ttl": if i % 5 == 0 { 15 } else { -1 }}),
        )
        .expect("create");
    }
    let q = Query::new("SELECT VALUE c.id FROM c ORDER BY c.id");
    let opts = QueryOptions::default().max_item_count(8);
    let first = c.query_page::<String>(&q, &opts).expect("page 1");
    assert_eq!(first.items.len(), 8);
    // Between pages: new items before and after the cursor, a delete, expiry, a reopen.
    c.create_item(&json!({"id": "a-new", "pk": "p"}))
        .expect("create before");
    c.create_item(&json!({"id": "z-new", "pk": "p"}))
        .expect("create after");
    c.delete_item("p", "i20").expect("delete");
    drop(c);
    drop(db);
    clock.advance(Duration::from_secs(15));
    let db = open();
    let c = db.container("c").expect("container");
    let mut seen = first.items.clone();
    let mut token = first.continuation;
    while let Some(t) = token {
        let page = c
            .query_page::<String>(&q, &opts.clone().continuation(Some(t)))
            .expect("page");
        seen.extend(page.items);
        token = page.continuation;
    }
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen, "no row twice");
    for i in 0..30 {
        let id = format!("i{i:02}");
        let expired_later = i % 5 == 0 && i >= 8;
        let deleted = i == 20;
        assert_eq!(
            seen.contains(&id),
            !(expired_later || deleted),
            "{id}: unchanged live items appear exactly once; expired or deleted ones after the cursor do not"
        );
    }
    assert!(seen.contains(&"z-new".to_string()));
    assert!(
        !seen.contains(&"a-new".to_string()),
        "inserted before the cursor: not revisited"
    );
}

#[test]
fn a_continuation_only_resumes_its_own_query() {
    let (_d, _c, _db, c) = setup();
    let q = Query::new("SELECT VALUE c.id FROM c ORDER BY c.id");
    let page = c
        .query_page::<Value>(&q, &QueryOptions::default().max_item_count(2))
        .expect("page");
    let token = page.continuation.expect("more pages");
    let other = Query::new("SELECT VALUE c.id FROM c ORDER BY c.s");
    for (query, t) in [
        (&other, token.clone()),
        (&q, "garbage".to_string()),
        (&q, token.replace('1', "2")),
    ] {
        let e = c
            .query_page::<Value>(query, &QueryOptions::default().continuation(Some(t)))
            .expect_err("foreign or damaged token");
        assert_eq!(e.status_code(), 400);
    }
    // Nor another partition's or container's page of the same query: the cursor is an item
    // key, meaningful only where it was taken.
    let unordered = Query::new("SELECT VALUE c.id FROM c");
    let in_a = QueryOptions::default().partition_key("a").max_item_count(1);
    let first = c.query_page::<Value>(&unordered, &in_a).expect("page");
    let token = first.continuation.expect("partition a has two items");
    let resumed = c
        .query_page::<Value>(&unordered, &in_a.clone().continuation(Some(token.clone())))
        .expect("same scope");
    assert_eq!(resumed.items.len(), 1);
    let in_b = QueryOptions::default().partition_key("b").continuation(Some(token.clone()));
    let e = c.query_page::<Value>(&unordered, &in_b).expect_err("another partition");
    assert_eq!(e.status_code(), 400);
    let everywhere = QueryOptions::default().continuation(Some(token.clone()));
    let e = c.query_page::<Value>(&unordered, &everywhere).expect_err("no partition");
    assert_eq!(e.status_code(), 400);
    let other = _db.create_container(props("other", "/pk")).expect("container");
    let e = other.query_page::<Value>(&unordered, &in_a.clone().continuation(Some(token))).expect_err("another container");
    assert_eq!(e.status_code(), 400);
}
