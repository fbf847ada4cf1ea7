//! `docs/contract.md` §3: every validation and error row, with the exact Cosmos messages where
//! the contract gives them.

use ebbdb::clock::ManualClock;
use ebbdb::{
    Container, ContainerProperties, Database, DefaultTtl, Error, IndexingMode, ItemOptions, Options,
};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

fn default_ttl_msg(v: &str) -> String {
    format!(
        "The input defaultTtl '{v}' is invalid. Ensure to provide a nonzero positive integer less \
         than or equal to '2147483647', or '-1' which means never expire."
    )
}

fn ttl_msg(v: &str) -> String {
    format!(
        "The input ttl '{v}' is invalid. Ensure to provide a nonzero positive integer less than \
         or equal to '2147483647', or '-1' which means never expire."
    )
}

const NONE_WITH_TTL: &str =
    "Indexing mode value cannot be 'none' when 'defaultTtl' is specified in the collection";

struct Env {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
}

fn env() -> Result<Env, Box<dyn std::error::Error>> {
    env_with(Options::default())
}

fn env_with(opts: Options) -> Result<Env, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), opts.clock(clock.clone()))?;
    Ok(Env {
        _dir: dir,
        clock,
        db,
    })
}

/// The message of a 400, or a description of what came instead.
fn bad_request<T: std::fmt::Debug>(r: ebbdb::Result<T>) -> String {
    match r {
        Err(Error::BadRequest(m)) => {
            assert_eq!(Error::BadRequest(m.clone()).status_code(), 400);
            m
        }
        other => format!("<expected BadRequest, got {other:?}>"),
    }
}

fn status<T>(r: ebbdb::Result<T>) -> Option<u16> {
    r.err().map(|e| e.status_code())
}

fn props_json(default_ttl: Value) -> Value {
    json!({"id": "c", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}, "defaultTtl": default_ttl})
}

/// Asserts `defaultTtl: v` is rejected with the exact message showing `shown`, through every
/// way of building properties from JSON, and that no container was created.
fn rejects_default_ttl(v: Value, shown: &str) -> TestResult {
    let want = default_ttl_msg(shown);
    let body = props_json(v);
    assert_eq!(
        bad_request(ContainerProperties::from_json_value(&body)),
        want
    );
    assert_eq!(
        bad_request(ContainerProperties::from_json_str(&body.to_string())),
        want
    );
    let via_serde = serde_json::from_value::<ContainerProperties>(body).err();
    assert_eq!(via_serde.map(|e| e.to_string()), Some(want));
    Ok(())
}

// ---------------------------------------------------------------- defaultTtl

#[test]
fn default_ttl_zero_is_400() -> TestResult {
    rejects_default_ttl(json!(0), "0")?;
    let e = env()?;
    let props = ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(0));
    assert_eq!(
        bad_request(e.db.create_container(props.clone())),
        default_ttl_msg("0")
    );
    assert_eq!(status(e.db.container("c")), Some(404), "nothing created");
    e.db.create_container(ContainerProperties::new("c", "/pk"))?;
    assert_eq!(
        bad_request(e.db.replace_container(props)),
        default_ttl_msg("0")
    );
    assert_eq!(
        e.db.container("c")?.properties().default_ttl,
        DefaultTtl::Off
    );
    Ok(())
}

#[test]
fn default_ttl_minus_two_is_400() -> TestResult {
    rejects_default_ttl(json!(-2), "-2")
}

#[test]
fn default_ttl_above_max_is_400() -> TestResult {
    rejects_default_ttl(json!(2_147_483_648_i64), "2147483648")?;
    let e = env()?;
    let props =
        ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(2_147_483_648));
    assert_eq!(
        bad_request(e.db.create_container(props)),
        default_ttl_msg("2147483648")
    );
    assert_eq!(status(e.db.container("c")), Some(404));
    Ok(())
}

#[test]
fn default_ttl_null_is_400() -> TestResult {
    rejects_default_ttl(Value::Null, "null")
}

#[test]
fn default_ttl_fraction_is_400() -> TestResult {
    rejects_default_ttl(json!(10.5), "10.5")
}

#[test]
fn default_ttl_exponent_form_is_400() -> TestResult {
    let body = r#"{"id": "c", "partitionKey": {"paths": ["/pk"]}, "defaultTtl": 1e1}"#;
    let msg = bad_request(ContainerProperties::from_json_str(body));
    // serde_json reads `1e1` as the float 10.0 and cannot keep the written form.
    assert!(
        msg == default_ttl_msg("1e1") || msg == default_ttl_msg("10.0"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn default_ttl_string_is_400() -> TestResult {
    rejects_default_ttl(json!("10"), "10")
}

#[test]
fn default_ttl_bool_array_object_are_400() -> TestResult {
    rejects_default_ttl(json!(true), "true")?;
    rejects_default_ttl(json!([]), "[]")?;
    rejects_default_ttl(json!({}), "{}")
}

#[test]
fn default_ttl_valid_values_parse() -> TestResult {
    let p = ContainerProperties::from_json_value(&props_json(json!(-1)))?;
    assert_eq!(p.default_ttl, DefaultTtl::NeverExpire);
    let p = ContainerProperties::from_json_value(&props_json(json!(2_147_483_647)))?;
    assert_eq!(p.default_ttl, DefaultTtl::Seconds(2_147_483_647));
    Ok(())
}

// ---------------------------------------------------------------- item ttl

/// Asserts item `ttl: v` is rejected with the exact message on create, upsert and replace, in
/// containers with TTL Off, NeverExpire and Seconds, and that nothing is written.
fn rejects_item_ttl(v: Value, shown: &[&str]) -> TestResult {
    let e = env()?;
    let settings = [
        ("off", DefaultTtl::Off),
        ("never", DefaultTtl::NeverExpire),
        ("secs", DefaultTtl::Seconds(10)),
    ];
    for (name, setting) in settings {
        let c =
            e.db.create_container(ContainerProperties::new(name, "/pk").with_default_ttl(setting))?;
        let bad = json!({"id": "x", "pk": "p", "ttl": v});
        let check = |what: &str, msg: String| {
            assert!(
                shown.iter().any(|s| msg == ttl_msg(s)),
                "{what} in container {name} with ttl {v}: {msg}"
            );
        };
        check("create", bad_request(c.create_item(&bad)));
        check("upsert", bad_request(c.upsert_item(&bad)));
        assert_eq!(c.count()?, 0, "a rejected write stored something");
        let good = c.create_item(&json!({"id": "x", "pk": "p", "n": 1}))?;
        check("replace", bad_request(c.replace_item("p", "x", &bad)));
        check("upsert over", bad_request(c.upsert_item(&bad)));
        let now: Value = c.read_item("p", "x")?;
        assert_eq!(now, good, "a rejected replace changed the item");
    }
    Ok(())
}

#[test]
fn item_ttl_zero_is_400() -> TestResult {
    rejects_item_ttl(json!(0), &["0"])
}

#[test]
fn item_ttl_minus_two_is_400() -> TestResult {
    rejects_item_ttl(json!(-2), &["-2"])
}

#[test]
fn item_ttl_above_max_is_400() -> TestResult {
    rejects_item_ttl(json!(2_147_483_648_i64), &["2147483648"])
}

#[test]
fn item_ttl_null_is_400() -> TestResult {
    rejects_item_ttl(Value::Null, &["null"])
}

#[test]
fn item_ttl_fraction_is_400() -> TestResult {
    rejects_item_ttl(json!(10.5), &["10.5"])
}

#[test]
fn item_ttl_exponent_form_is_400() -> TestResult {
    let v: Value = serde_json::from_str("1e1")?;
    // serde_json cannot keep the written form `1e1`; it reads the float 10.0.
    rejects_item_ttl(v, &["1e1", "10.0"])
}

#[test]
fn item_ttl_string_is_400() -> TestResult {
    rejects_item_ttl(json!("5"), &["5"])
}

#[test]
fn item_ttl_bool_is_400() -> TestResult {
    rejects_item_ttl(json!(true), &["true"])
}

#[test]
fn item_ttl_array_is_400() -> TestResult {
    rejects_item_ttl(json!([]), &["[]"])
}

#[test]
fn item_ttl_object_is_400() -> TestResult {
    rejects_item_ttl(json!({}), &["{}"])
}

// ---------------------------------------------------------------- indexing mode none

#[test]
fn indexing_none_with_default_ttl_is_400_on_create() -> TestResult {
    let e = env()?;
    for ttl in [DefaultTtl::NeverExpire, DefaultTtl::Seconds(10)] {
        let props = ContainerProperties::new("c", "/pk")
            .with_default_ttl(ttl)
            .with_indexing_mode(IndexingMode::None);
        assert_eq!(bad_request(e.db.create_container(props)), NONE_WITH_TTL);
        assert_eq!(status(e.db.container("c")), Some(404));
    }
    let body = json!({"id": "c", "partitionKey": {"paths": ["/pk"]}, "defaultTtl": 5,
                      "indexingPolicy": {"indexingMode": "none"}});
    assert_eq!(
        bad_request(ContainerProperties::from_json_value(&body)),
        NONE_WITH_TTL
    );
    // None without a default TTL is fine.
    let c = e.db.create_container(
        ContainerProperties::new("c", "/pk").with_indexing_mode(IndexingMode::None),
    )?;
    assert_eq!(c.properties().indexing_mode, IndexingMode::None);
    Ok(())
}

#[test]
fn indexing_none_with_default_ttl_is_400_on_replace_adding_ttl() -> TestResult {
    let e = env()?;
    let none = ContainerProperties::new("c", "/pk").with_indexing_mode(IndexingMode::None);
    e.db.create_container(none.clone())?;
    assert_eq!(
        bad_request(e.db.replace_container(none.with_default_ttl(DefaultTtl::Seconds(10)))),
        NONE_WITH_TTL
    );
    let c = e.db.container("c")?;
    assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
    assert_eq!(c.properties().indexing_mode, IndexingMode::None);
    Ok(())
}

#[test]
fn indexing_none_with_default_ttl_is_400_on_replace_setting_none() -> TestResult {
    let e = env()?;
    let with_ttl = ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(10));
    let c = e.db.create_container(with_ttl.clone())?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    assert_eq!(
        bad_request(e.db.replace_container(with_ttl.with_indexing_mode(IndexingMode::None))),
        NONE_WITH_TTL
    );
    let c = e.db.container("c")?;
    assert_eq!(c.properties().default_ttl, DefaultTtl::Seconds(10));
    assert_eq!(c.properties().indexing_mode, IndexingMode::Consistent);
    // The TTL stayed in force.
    e.clock.advance(std::time::Duration::from_secs(10));
    assert_eq!(status(c.read_item::<Value>("p", "a")), Some(404));
    Ok(())
}

// ---------------------------------------------------------------- item shape and id

fn container(e: &Env) -> ebbdb::Result<Container> {
    e.db.create_container(ContainerProperties::new("c", "/pk"))
}

/// Asserts the item is rejected with a 400 whose message contains every one of `words`, on
/// create and upsert, and nothing is stored.
fn rejects_item(c: &Container, item: &Value, words: &[&str]) -> TestResult {
    for (what, msg) in [
        ("create", bad_request(c.create_item(item))),
        ("upsert", bad_request(c.upsert_item(item))),
    ] {
        for w in words {
            assert!(
                msg.contains(w),
                "{what} of {item}: message {msg:?} lacks {w:?}"
            );
        }
    }
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn id_missing_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"pk": "p", "n": 1}), &["'id'", "missing"])
}

#[test]
fn id_not_a_string_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    for id in [
        json!(1),
        Value::Null,
        json!(true),
        json!(["a"]),
        json!({"a": 1}),
    ] {
        rejects_item(&c, &json!({"id": id, "pk": "p"}), &["'id'", "string"])?;
    }
    Ok(())
}

#[test]
fn id_empty_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "", "pk": "p"}), &["'id'", "empty"])
}

#[test]
fn id_of_256_chars_is_400_and_255_is_fine() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(
        &c,
        &json!({"id": "a".repeat(256), "pk": "p"}),
        &["'id'", "255"],
    )?;
    // Characters, not bytes: 256 two-byte characters are too long, 255 are fine.
    rejects_item(
        &c,
        &json!({"id": "é".repeat(256), "pk": "p"}),
        &["'id'", "255"],
    )?;
    let long = "é".repeat(255);
    c.create_item(&json!({"id": long, "pk": "p"}))?;
    let read: Value = c.read_item("p", &long)?;
    assert_eq!(read["id"], json!(long));
    c.create_item(&json!({"id": "a".repeat(255), "pk": "p"}))?;
    assert_eq!(c.count()?, 2);
    Ok(())
}

#[test]
fn id_with_slash_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "a/b", "pk": "p"}), &["'id'", "'/'"])
}

#[test]
fn id_with_backslash_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "a\\b", "pk": "p"}), &["'id'", "'\\'"])
}

#[test]
fn id_with_question_mark_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "a?b", "pk": "p"}), &["'id'", "'?'"])
}

#[test]
fn id_with_hash_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "#a", "pk": "p"}), &["'id'", "'#'"])
}

#[test]
fn item_not_an_object_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    for v in [
        json!([1, 2]),
        json!("a"),
        json!(5),
        Value::Null,
        json!(true),
    ] {
        rejects_item(&c, &v, &["object"])?;
        let msg = bad_request(c.replace_item("p", "a", &v));
        assert!(msg.contains("object"), "{msg}");
    }
    Ok(())
}

#[test]
fn partition_key_object_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "a", "pk": {"x": 1}}), &["/pk", "object"])
}

#[test]
fn partition_key_array_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    rejects_item(&c, &json!({"id": "a", "pk": ["x"]}), &["/pk", "array"])?;
    let nested =
        e.db.create_container(ContainerProperties::new("n", "/a/b"))?;
    rejects_item(
        &nested,
        &json!({"id": "a", "a": {"b": []}}),
        &["/a/b", "array"],
    )
}

#[test]
fn replace_with_different_body_id_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    let stored = c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))?;
    c.create_item(&json!({"id": "b", "pk": "p", "n": 2}))?;
    let msg = bad_request(c.replace_item("p", "a", &json!({"id": "b", "pk": "p", "n": 3})));
    assert!(msg.contains("'id'"), "{msg}");
    let a: Value = c.read_item("p", "a")?;
    assert_eq!(a, stored);
    let b: Value = c.read_item("p", "b")?;
    assert_eq!(b["n"], 2);
    Ok(())
}

#[test]
fn replace_with_different_body_partition_key_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    let stored = c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))?;
    let msg = bad_request(c.replace_item("p", "a", &json!({"id": "a", "pk": "q", "n": 3})));
    assert!(msg.contains("partition key"), "{msg}");
    // A body without the partition key is the undefined partition: also different.
    let msg = bad_request(c.replace_item("p", "a", &json!({"id": "a", "n": 3})));
    assert!(msg.contains("partition key"), "{msg}");
    let a: Value = c.read_item("p", "a")?;
    assert_eq!(a, stored);
    assert_eq!(status(c.read_item::<Value>("q", "a")), Some(404));
    Ok(())
}

// ---------------------------------------------------------------- 413

#[test]
fn item_over_configured_max_item_size_is_413() -> TestResult {
    let e = env_with(Options::default().max_item_size(1024))?;
    let c = container(&e)?;
    let big = json!({"id": "a", "pk": "p", "pad": "x".repeat(2000)});
    for r in [c.create_item(&big), c.upsert_item(&big)] {
        assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
    }
    assert_eq!(c.count()?, 0);
    let small = c.create_item(&json!({"id": "a", "pk": "p", "pad": "x".repeat(800)}))?;
    assert_eq!(status(c.replace_item("p", "a", &big)), Some(413));
    let now: Value = c.read_item("p", "a")?;
    assert_eq!(now, small);
    Ok(())
}

#[test]
fn item_over_default_two_mib_is_413() -> TestResult {
    let e = env_with(Options::default().sync(ebbdb::SyncPolicy::Never))?;
    let c = container(&e)?;
    let over = json!({"id": "a", "pk": "p", "pad": "x".repeat(2 * 1024 * 1024)});
    assert_eq!(status(c.create_item(&over)), Some(413));
    let under = json!({"id": "a", "pk": "p", "pad": "x".repeat(2 * 1024 * 1024 - 200)});
    c.create_item(&under)?;
    let read: Value = c.read_item("p", "a")?;
    assert_eq!(
        read["pad"].as_str().map(str::len),
        Some(2 * 1024 * 1024 - 200)
    );
    Ok(())
}

// ---------------------------------------------------------------- 409

#[test]
fn create_of_live_id_is_409_other_partition_is_fine() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    let first = c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))?;
    let r = c.create_item(&json!({"id": "a", "pk": "p", "n": 2}));
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    assert_eq!(status(r), Some(409));
    let now: Value = c.read_item("p", "a")?;
    assert_eq!(now, first, "a conflicting create changed the item");
    c.create_item(&json!({"id": "a", "pk": "q", "n": 3}))?;
    c.create_item(&json!({"id": "a", "n": 4}))?; // undefined partition
    assert_eq!(c.count()?, 3);
    // After a delete the id is free again.
    c.delete_item("p", "a")?;
    c.create_item(&json!({"id": "a", "pk": "p", "n": 5}))?;
    let now: Value = c.read_item("p", "a")?;
    assert_eq!(now["n"], 5);
    Ok(())
}

#[test]
fn container_create_of_existing_id_is_409() -> TestResult {
    let e = env()?;
    let c = e.db.create_container(
        ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(10)),
    )?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    let r =
        e.db.create_container(ContainerProperties::new("c", "/other"));
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    let c = e.db.container("c")?;
    assert_eq!(c.properties().partition_key_path, "/pk");
    assert_eq!(c.properties().default_ttl, DefaultTtl::Seconds(10));
    assert_eq!(c.count()?, 1);
    Ok(())
}

// ---------------------------------------------------------------- 404

#[test]
fn missing_item_read_replace_delete_are_404() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    assert_eq!(status(c.read_item::<Value>("p", "zz")), Some(404));
    assert_eq!(
        status(c.read_item::<Value>("q", "a")),
        Some(404),
        "wrong partition"
    );
    assert_eq!(
        status(c.replace_item("q", "a", &json!({"id": "a", "pk": "q"}))),
        Some(404)
    );
    assert_eq!(status(c.delete_item("q", "a")), Some(404));
    assert_eq!(status(c.delete_item("p", "zz")), Some(404));
    let etag_opts = ItemOptions::default().if_match("\"x\"");
    assert_eq!(
        status(c.upsert_item_with(&json!({"id": "zz", "pk": "p"}), &etag_opts)),
        Some(404)
    );
    assert_eq!(status(c.delete_item_with("p", "zz", &etag_opts)), Some(404));
    c.delete_item("p", "a")?;
    let r = c.read_item::<Value>("p", "a");
    assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
    assert_eq!(status(c.delete_item("p", "a")), Some(404), "second delete");
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn missing_container_is_404() -> TestResult {
    let e = env()?;
    assert!(matches!(e.db.container("nope"), Err(Error::NotFound(_))));
    assert_eq!(status(e.db.delete_container("nope")), Some(404));
    assert_eq!(
        status(e.db.replace_container(ContainerProperties::new("nope", "/pk"))),
        Some(404)
    );
    assert!(e.db.containers()?.is_empty());
    Ok(())
}

#[test]
fn deleted_container_and_its_handles_are_404() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    e.db.delete_container("c")?;
    assert_eq!(status(e.db.container("c")), Some(404));
    assert_eq!(status(e.db.delete_container("c")), Some(404));
    assert_eq!(status(c.count()), Some(404));
    assert_eq!(status(c.items()), Some(404));
    assert_eq!(status(c.items_in_partition("p")), Some(404));
    assert_eq!(status(c.read_item::<Value>("p", "a")), Some(404));
    Ok(())
}

// ---------------------------------------------------------------- 412

#[test]
fn if_match_with_different_etag_is_412() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    let v1 = c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))?;
    let etag1 = v1["_etag"].as_str().ok_or("no _etag")?.to_owned();
    let v2 = c.replace_item_with(
        "p",
        "a",
        &json!({"id": "a", "pk": "p", "n": 2}),
        &ItemOptions::default().if_match(etag1.clone()),
    )?;
    let etag2 = v2["_etag"].as_str().ok_or("no _etag")?.to_owned();
    assert_ne!(etag1, etag2, "every write gets a new etag");
    let stale = ItemOptions::default().if_match(etag1);
    let r = c.replace_item_with("p", "a", &json!({"id": "a", "pk": "p", "n": 3}), &stale);
    assert!(matches!(r, Err(Error::PreconditionFailed(_))), "{r:?}");
    assert_eq!(status(r), Some(412));
    assert_eq!(
        status(c.upsert_item_with(&json!({"id": "a", "pk": "p", "n": 4}), &stale)),
        Some(412)
    );
    assert_eq!(status(c.delete_item_with("p", "a", &stale)), Some(412));
    let now: Value = c.read_item("p", "a")?;
    assert_eq!(now, v2, "a failed precondition changed the item");
    // The current etag works.
    c.delete_item_with("p", "a", &ItemOptions::default().if_match(etag2))?;
    assert_eq!(c.count()?, 0);
    Ok(())
}

// ---------------------------------------------------------------- Locked

#[test]
fn second_open_of_same_directory_is_locked() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), Options::default().clock(clock.clone()))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    let second = Database::open_with(dir.path(), Options::default().clock(clock.clone()));
    assert!(matches!(second, Err(Error::Locked(_))), "{second:?}");
    assert!(matches!(Database::open(dir.path()), Err(Error::Locked(_))));
    // A clone is the same handle, not a second open.
    let clone = db.clone();
    assert_eq!(clone.container("c")?.count()?, 1);
    drop(clone);
    drop(c);
    drop(db);
    let db = Database::open_with(dir.path(), Options::default().clock(clock))?;
    assert_eq!(db.container("c")?.count()?, 1);
    Ok(())
}

// ---------------------------------------------------------------- status codes

#[test]
fn status_codes_of_every_client_error() {
    let cases: [(Error, u16); 6] = [
        (Error::BadRequest(String::new()), 400),
        (Error::NotFound(String::new()), 404),
        (Error::Conflict(String::new()), 409),
        (Error::PreconditionFailed(String::new()), 412),
        (Error::TooLarge(String::new()), 413),
        (Error::Locked(std::path::PathBuf::from("/x")), 423),
    ];
    for (err, code) in cases {
        assert_eq!(err.status_code(), code, "{err:?}");
        assert_eq!(err.is_not_found(), code == 404, "{err:?}");
    }
}

#[test]
fn status_codes_from_real_operations() -> TestResult {
    let e = env_with(Options::default().max_item_size(256))?;
    let c = container(&e)?;
    let v = c.create_item(&json!({"id": "a", "pk": "p"}))?;
    assert!(v["_etag"].is_string());
    assert_eq!(
        status(c.create_item(&json!({"id": "", "pk": "p"}))),
        Some(400)
    );
    assert_eq!(status(c.read_item::<Value>("p", "b")), Some(404));
    assert_eq!(
        status(c.create_item(&json!({"id": "a", "pk": "p"}))),
        Some(409)
    );
    assert_eq!(
        status(c.delete_item_with("p", "a", &ItemOptions::default().if_match("\"no\""))),
        Some(412)
    );
    assert_eq!(
        status(c.create_item(&json!({"id": "b", "pk": "p", "pad": "x".repeat(300)}))),
        Some(413)
    );
    Ok(())
}

// ---------------------------------------------------------------- corruption

#[test]
fn corrupt_segment_is_reported_naming_file_and_offset() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let opts = || {
        Options::default()
            .clock(clock.clone())
            .segment_size(4096)
            .sync(ebbdb::SyncPolicy::Never)
            .use_hints(false)
    };
    {
        let db = Database::open_with(dir.path(), opts())?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        for i in 0..40 {
            c.create_item(&json!({"id": format!("i{i}"), "pk": "p", "pad": "z".repeat(200)}))?;
        }
    }
    // Flip bytes in the middle of the first segment, which is sealed.
    let mut segs: Vec<_> = std::fs::read_dir(dir.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 2, "expected several segments: {segs:?}");
    let first = segs.first().ok_or("no segment")?.clone();
    let mut bytes = std::fs::read(&first)?;
    let mid = bytes.len() / 2;
    for b in bytes.iter_mut().skip(mid).take(16) {
        *b ^= 0xA5;
    }
    std::fs::write(&first, bytes)?;
    let r = Database::open_with(dir.path(), opts()).and_then(|db| {
        db.container("c")
            .and_then(|c| c.items()?.collect::<ebbdb::Result<Vec<_>>>())
    });
    match r {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, first);
            assert!(
                offset > 0 && offset <= mid as u64,
                "offset {offset}, damage at {mid}"
            );
        }
        other => panic!("expected Corruption, got {other:?}"),
    }
    Ok(())
}

#[test]
fn container_id_rules_are_400() -> TestResult {
    let e = env()?;
    for id in [
        String::new(),
        "a/b".into(),
        "a\\b".into(),
        "a?b".into(),
        "a#b".into(),
        "x".repeat(256),
    ] {
        let r =
            e.db.create_container(ContainerProperties::new(id.clone(), "/pk"));
        let msg = bad_request(r);
        assert!(msg.contains("'id'"), "container id {id:?}: {msg}");
    }
    assert!(e.db.containers()?.is_empty());
    Ok(())
}

#[test]
fn invalid_partition_key_path_is_400() -> TestResult {
    let e = env()?;
    for path in ["pk", "", "/", "/a/", "/a//b"] {
        let msg = bad_request(e.db.create_container(ContainerProperties::new("c", path)));
        assert!(msg.contains("partition key path"), "{path:?}: {msg}");
    }
    assert!(e.db.containers()?.is_empty());
    Ok(())
}

#[test]
fn replace_container_changing_partition_key_path_is_400() -> TestResult {
    let e = env()?;
    let c = container(&e)?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    let msg = bad_request(e.db.replace_container(
        ContainerProperties::new("c", "/other").with_default_ttl(DefaultTtl::Seconds(1)),
    ));
    assert!(msg.contains("partition key path"), "{msg}");
    let c = e.db.container("c")?;
    assert_eq!(c.properties().partition_key_path, "/pk");
    assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
    e.clock.advance(std::time::Duration::from_secs(5));
    assert_eq!(c.count()?, 1);
    Ok(())
}
