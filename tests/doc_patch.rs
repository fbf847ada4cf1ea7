//! `docs/contract.md` §8, patch: every operation and error rule on its own, the Cosmos FAQ's
//! edge cases (10 operations, system properties, `ttl`), conditional patches, atomicity
//! (all ops or none; concurrent read-modify-writes never lose an update) and the TTL restart.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{
    Container, ContainerProperties, Database, DefaultTtl, Error, ItemOptions, Options, PatchOp,
};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

struct Env {
    dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
    c: Container,
}

fn env_ttl(ttl: DefaultTtl) -> Result<Env, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), Options::default().clock(clock.clone()))?;
    let c = db.create_container(ContainerProperties::new("orders", "/pk").with_default_ttl(ttl))?;
    c.create_item(&json!({
        "id": "1", "pk": "a", "n": 5, "status": "open",
        "tags": ["x", "y", "z"], "o": {"inner": 1}, "s": "text", "a~b": 1, "c/d": 2
    }))?;
    Ok(Env { dir, clock, db, c })
}

fn env() -> Result<Env, Box<dyn std::error::Error>> {
    env_ttl(DefaultTtl::Off)
}

fn read(c: &Container) -> Result<Value, ebbdb::Error> {
    c.read_item("a", "1")
}

/// The status of a failed call (a description of what came instead otherwise).
fn status<T: std::fmt::Debug>(r: ebbdb::Result<T>) -> String {
    match r {
        Err(e) => e.status_code().to_string(),
        Ok(v) => format!("<Ok({v:?})>"),
    }
}

/// Patches, checks the call's answer is what a read returns, and returns it.
fn patch(c: &Container, ops: &[PatchOp]) -> Result<Value, Box<dyn std::error::Error>> {
    let v = c.patch_item("a", "1", ops)?;
    assert_eq!(v, read(c)?);
    Ok(v)
}

/// A failing patch: its status, and the item unchanged (same etag).
fn refused(c: &Container, ops: &[PatchOp]) -> Result<String, Box<dyn std::error::Error>> {
    let before = read(c)?;
    let s = status(c.patch_item("a", "1", ops));
    assert_eq!(read(c)?, before, "a failed patch changed the item");
    Ok(s)
}

#[test]
fn add_creates_a_missing_property() -> TestResult {
    let e = env()?;
    assert_eq!(
        patch(&e.c, &[PatchOp::add("/color", "red")])?["color"],
        "red"
    );
    assert_eq!(
        patch(&e.c, &[PatchOp::add("/o/new", 2)])?["o"],
        json!({"inner": 1, "new": 2})
    );
    Ok(())
}

#[test]
fn add_replaces_an_existing_property() -> TestResult {
    let e = env()?;
    assert_eq!(patch(&e.c, &[PatchOp::add("/n", 7)])?["n"], 7);
    Ok(())
}

#[test]
fn add_at_an_array_index_inserts_and_shifts() -> TestResult {
    let e = env()?;
    assert_eq!(
        patch(&e.c, &[PatchOp::add("/tags/1", "new")])?["tags"],
        json!(["x", "new", "y", "z"])
    );
    Ok(())
}

#[test]
fn add_at_dash_or_length_appends() -> TestResult {
    let e = env()?;
    assert_eq!(
        patch(&e.c, &[PatchOp::add("/tags/-", "d")])?["tags"],
        json!(["x", "y", "z", "d"])
    );
    assert_eq!(
        patch(&e.c, &[PatchOp::add("/tags/4", "e")])?["tags"],
        json!(["x", "y", "z", "d", "e"])
    );
    Ok(())
}

#[test]
fn add_past_the_end_of_an_array_is_400() -> TestResult {
    let e = env()?;
    assert_eq!(refused(&e.c, &[PatchOp::add("/tags/4", "d")])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::add("/tags/01", "d")])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::add("/tags/x", "d")])?, "400");
    Ok(())
}

#[test]
fn a_missing_parent_is_400_for_every_op() -> TestResult {
    let e = env()?;
    for op in [
        PatchOp::add("/no/x", 1),
        PatchOp::set("/no/x", 1),
        PatchOp::replace("/no/x", 1),
        PatchOp::remove("/no/x"),
        PatchOp::incr("/no/x", 1),
        PatchOp::move_from("/n", "/no/x"),
        PatchOp::add("/n/x", 1), // the parent is a number
        PatchOp::add("/tags/9/x", 1),
    ] {
        assert_eq!(refused(&e.c, std::slice::from_ref(&op))?, "400", "{op:?}");
    }
    Ok(())
}

#[test]
fn set_creates_or_overwrites() -> TestResult {
    let e = env()?;
    assert_eq!(
        patch(&e.c, &[PatchOp::set("/status", "shipped")])?["status"],
        "shipped"
    );
    assert_eq!(
        patch(&e.c, &[PatchOp::set("/fresh", json!({"k": [1]}))])?["fresh"],
        json!({"k": [1]})
    );
    Ok(())
}

#[test]
fn set_at_an_array_index_replaces_the_element() -> TestResult {
    let e = env()?;
    assert_eq!(
        patch(&e.c, &[PatchOp::set("/tags/1", "Y")])?["tags"],
        json!(["x", "Y", "z"])
    );
    assert_eq!(
        patch(&e.c, &[PatchOp::set("/tags/-", "w")])?["tags"],
        json!(["x", "Y", "z", "w"])
    );
    assert_eq!(refused(&e.c, &[PatchOp::set("/tags/9", "q")])?, "400");
    Ok(())
}

#[test]
fn replace_changes_an_existing_value() -> TestResult {
    let e = env()?;
    assert_eq!(patch(&e.c, &[PatchOp::replace("/o", 2)])?["o"], 2);
    assert_eq!(
        patch(&e.c, &[PatchOp::replace("/tags/0", "X")])?["tags"],
        json!(["X", "y", "z"])
    );
    Ok(())
}

#[test]
fn replace_of_a_missing_path_is_400() -> TestResult {
    let e = env()?;
    assert_eq!(refused(&e.c, &[PatchOp::replace("/missing", 1)])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::replace("/tags/3", 1)])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::replace("/tags/-", 1)])?, "400");
    Ok(())
}

#[test]
fn remove_deletes_a_property_or_an_element() -> TestResult {
    let e = env()?;
    let v = patch(
        &e.c,
        &[PatchOp::remove("/status"), PatchOp::remove("/tags/0")],
    )?;
    assert!(v.get("status").is_none());
    assert_eq!(v["tags"], json!(["y", "z"]));
    Ok(())
}

#[test]
fn remove_of_a_missing_path_is_400() -> TestResult {
    let e = env()?;
    assert_eq!(refused(&e.c, &[PatchOp::remove("/missing")])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::remove("/tags/3")])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::remove("/tags/-")])?, "400");
    Ok(())
}

#[test]
fn incr_adds_positive_negative_and_fractional_amounts() -> TestResult {
    let e = env()?;
    assert_eq!(patch(&e.c, &[PatchOp::incr("/n", 10)])?["n"], 15);
    assert_eq!(patch(&e.c, &[PatchOp::incr("/n", -20)])?["n"], -5);
    assert_eq!(patch(&e.c, &[PatchOp::incr("/n", 0.5)])?["n"], -4.5);
    Ok(())
}

#[test]
fn incr_creates_a_missing_field() -> TestResult {
    let e = env()?;
    assert_eq!(patch(&e.c, &[PatchOp::incr("/count", 3)])?["count"], 3);
    assert_eq!(
        patch(&e.c, &[PatchOp::incr("/o/deep", 2)])?["o"],
        json!({"inner": 1, "deep": 2})
    );
    Ok(())
}

#[test]
fn incr_of_a_non_number_is_400() -> TestResult {
    let e = env()?;
    assert_eq!(refused(&e.c, &[PatchOp::incr("/s", 1)])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::incr("/o", 1)])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::incr("/n", "1")])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::incr("/n", Value::Null)])?, "400");
    Ok(())
}

#[test]
fn move_takes_the_value_to_the_new_path() -> TestResult {
    let e = env()?;
    let v = patch(&e.c, &[PatchOp::move_from("/status", "/o/state")])?;
    assert!(v.get("status").is_none());
    assert_eq!(v["o"], json!({"inner": 1, "state": "open"}));
    let v = patch(&e.c, &[PatchOp::move_from("/tags/0", "/tags/-")])?;
    assert_eq!(v["tags"], json!(["y", "z", "x"]));
    Ok(())
}

#[test]
fn move_onto_an_existing_path_replaces_it() -> TestResult {
    let e = env()?;
    let v = patch(&e.c, &[PatchOp::move_from("/s", "/n")])?;
    assert_eq!(v["n"], "text");
    assert!(v.get("s").is_none());
    Ok(())
}

#[test]
fn move_from_a_missing_path_is_400() -> TestResult {
    let e = env()?;
    assert_eq!(
        refused(&e.c, &[PatchOp::move_from("/missing", "/x")])?,
        "400"
    );
    Ok(())
}

#[test]
fn move_into_its_own_child_is_400() -> TestResult {
    let e = env()?;
    assert_eq!(
        refused(&e.c, &[PatchOp::move_from("/o", "/o/inner2")])?,
        "400"
    );
    Ok(())
}

#[test]
fn pointer_escapes_name_properties_with_slash_and_tilde() -> TestResult {
    let e = env()?;
    let v = patch(
        &e.c,
        &[
            PatchOp::incr("/a~0b", 1),
            PatchOp::incr("/c~1d", 1),
            PatchOp::add("/x~1~0", 0),
        ],
    )?;
    assert_eq!(
        (v["a~b"].clone(), v["c/d"].clone(), v["x/~"].clone()),
        (json!(2), json!(3), json!(0))
    );
    assert_eq!(refused(&e.c, &[PatchOp::add("/bad~2", 1)])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::add("no-slash", 1)])?, "400");
    assert_eq!(refused(&e.c, &[PatchOp::add("", 1)])?, "400");
    Ok(())
}

#[test]
fn id_partition_key_and_system_properties_cannot_be_patched() -> TestResult {
    let e = env()?;
    for path in [
        "/id",
        "/pk",
        "/_ts",
        "/_etag",
        "/_rid",
        "/_self",
        "/_attachments",
    ] {
        assert_eq!(refused(&e.c, &[PatchOp::set(path, "v")])?, "400", "{path}");
        assert_eq!(refused(&e.c, &[PatchOp::remove(path)])?, "400", "{path}");
        assert_eq!(
            refused(&e.c, &[PatchOp::move_from(path, "/elsewhere")])?,
            "400",
            "{path}"
        );
        assert_eq!(
            refused(&e.c, &[PatchOp::move_from("/s", path)])?,
            "400",
            "{path}"
        );
    }
    Ok(())
}

#[test]
fn a_nested_partition_key_and_its_parents_are_protected() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Database::open(dir.path())?;
    let c = db.create_container(ContainerProperties::new("c", "/address/zip"))?;
    c.create_item(&json!({"id": "1", "address": {"zip": "123", "street": "Main"}}))?;
    for op in [
        PatchOp::set("/address", json!({})),
        PatchOp::remove("/address/zip"),
        PatchOp::set("/address/zip", "9"),
    ] {
        assert_eq!(
            status(c.patch_item("123", "1", std::slice::from_ref(&op))),
            "400",
            "{op:?}"
        );
    }
    let v = c.patch_item("123", "1", &[PatchOp::set("/address/street", "High")])?;
    assert_eq!(v["address"], json!({"zip": "123", "street": "High"}));
    Ok(())
}

#[test]
fn at_most_ten_operations() -> TestResult {
    let e = env()?;
    let ten: Vec<PatchOp> = (0..10).map(|_| PatchOp::incr("/n", 1)).collect();
    assert_eq!(patch(&e.c, &ten)?["n"], 15);
    let eleven: Vec<PatchOp> = (0..11).map(|_| PatchOp::incr("/n", 1)).collect();
    assert_eq!(refused(&e.c, &eleven)?, "400");
    assert_eq!(refused(&e.c, &[])?, "400");
    Ok(())
}

#[test]
fn operations_apply_in_order_and_atomically() -> TestResult {
    let e = env()?;
    // Each op sees the ones before it.
    let v = patch(
        &e.c,
        &[
            PatchOp::add("/new", json!([])),
            PatchOp::add("/new/-", 1),
            PatchOp::incr("/new/0", 1),
        ],
    )?;
    assert_eq!(v["new"], json!([2]));
    // A failing last op leaves nothing of the first ones.
    assert_eq!(
        refused(
            &e.c,
            &[
                PatchOp::set("/status", "closed"),
                PatchOp::incr("/n", 1),
                PatchOp::remove("/nope")
            ]
        )?,
        "400"
    );
    assert_eq!(read(&e.c)?["status"], "open");
    Ok(())
}

#[test]
fn a_missing_or_expired_item_is_404() -> TestResult {
    let e = env_ttl(DefaultTtl::Seconds(10))?;
    assert_eq!(
        status(e.c.patch_item("a", "nope", &[PatchOp::set("/x", 1)])),
        "404"
    );
    assert_eq!(
        status(e.c.patch_item("b", "1", &[PatchOp::set("/x", 1)])),
        "404"
    );
    e.clock.advance(Duration::from_secs(10));
    assert_eq!(
        status(e.c.patch_item("a", "1", &[PatchOp::set("/x", 1)])),
        "404"
    );
    // An expired item's old etag is a 404 too, not a 412.
    let opts = ItemOptions::default().if_match("\"whatever\"");
    assert_eq!(
        status(e.c.patch_item_with("a", "1", &[PatchOp::set("/x", 1)], &opts)),
        "404"
    );
    Ok(())
}

#[test]
fn if_match_guards_the_patch() -> TestResult {
    let e = env()?;
    let etag = read(&e.c)?["_etag"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let stale = ItemOptions::default().if_match("\"stale\"");
    assert_eq!(
        status(e.c.patch_item_with("a", "1", &[PatchOp::incr("/n", 1)], &stale)),
        "412"
    );
    let v = e.c.patch_item_with(
        "a",
        "1",
        &[PatchOp::incr("/n", 1)],
        &ItemOptions::default().if_match(etag.clone()),
    )?;
    assert_eq!(v["n"], 6);
    // The patch renewed the etag: the old one no longer matches.
    assert_ne!(v["_etag"], json!(etag));
    assert_eq!(
        status(e.c.patch_item_with(
            "a",
            "1",
            &[PatchOp::incr("/n", 1)],
            &ItemOptions::default().if_match(etag)
        )),
        "412"
    );
    Ok(())
}

#[test]
fn filter_predicate_match_patches_and_mismatch_is_412() -> TestResult {
    let e = env()?;
    let open =
        ItemOptions::default().filter_predicate("FROM c WHERE c.status = 'open' AND c.n > 1");
    let v =
        e.c.patch_item_with("a", "1", &[PatchOp::set("/status", "shipped")], &open)?;
    assert_eq!(v["status"], "shipped");
    let before = read(&e.c)?;
    assert_eq!(
        status(e.c.patch_item_with("a", "1", &[PatchOp::set("/status", "x")], &open)),
        "412"
    );
    assert_eq!(read(&e.c)?, before);
    // Undefined is not a match either.
    let undefined = ItemOptions::default().filter_predicate("from c where c.nothing = 1");
    assert_eq!(
        status(e.c.patch_item_with("a", "1", &[PatchOp::set("/x", 1)], &undefined)),
        "412"
    );
    // No WHERE: every item matches; functions and the item's system properties are visible.
    let all = ItemOptions::default().filter_predicate("FROM c");
    e.c.patch_item_with("a", "1", &[PatchOp::set("/x", 1)], &all)?;
    let f = ItemOptions::default()
        .filter_predicate("FROM c WHERE ARRAY_CONTAINS(c.tags, 'y') AND IS_DEFINED(c._etag)");
    assert_eq!(
        e.c.patch_item_with("a", "1", &[PatchOp::set("/x", 2)], &f)?["x"],
        2
    );
    Ok(())
}

#[test]
fn filter_predicate_and_if_match_both_apply() -> TestResult {
    let e = env()?;
    let etag = read(&e.c)?["_etag"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let opts = ItemOptions::default()
        .if_match(etag)
        .filter_predicate("FROM c WHERE c.n = 99");
    assert_eq!(
        status(e.c.patch_item_with("a", "1", &[PatchOp::set("/x", 1)], &opts)),
        "412"
    );
    Ok(())
}

#[test]
fn a_bad_filter_predicate_is_400_naming_the_position() -> TestResult {
    let e = env()?;
    for text in [
        "FROM c WHERE",
        "SELECT * FROM c",
        "FROM c WHERE c.n = @p",
        "FROM c WHERE COUNT(1) > 0",
        "FROM c ORDER BY c.n",
        "FROM c WHERE NOPE(c.n)",
    ] {
        let opts = ItemOptions::default().filter_predicate(text);
        match e
            .c
            .patch_item_with("a", "1", &[PatchOp::set("/x", 1)], &opts)
        {
            Err(Error::BadRequest(_)) => {}
            other => panic!("{text}: expected 400, got {other:?}"),
        }
    }
    let opts = ItemOptions::default().filter_predicate("FROM c WHERE c.n = = 1");
    match e
        .c
        .patch_item_with("a", "1", &[PatchOp::set("/x", 1)], &opts)
    {
        Err(Error::BadRequest(m)) => assert!(m.contains("position 19"), "{m}"),
        other => panic!("expected 400, got {other:?}"),
    }
    Ok(())
}

#[test]
fn filter_predicate_on_other_writes_is_400() -> TestResult {
    let e = env()?;
    let opts = ItemOptions::default().filter_predicate("FROM c");
    let item = json!({"id": "1", "pk": "a"});
    assert_eq!(status(e.c.replace_item_with("a", "1", &item, &opts)), "400");
    assert_eq!(status(e.c.upsert_item_with(&item, &opts)), "400");
    assert_eq!(status(e.c.delete_item_with("a", "1", &opts)), "400");
    Ok(())
}

#[test]
fn a_patch_is_a_write_ts_etag_and_ttl_countdown_renewed() -> TestResult {
    let e = env_ttl(DefaultTtl::Seconds(10))?;
    let before = read(&e.c)?;
    e.clock.advance(Duration::from_secs(8));
    let v = e.c.patch_item("a", "1", &[PatchOp::incr("/n", 1)])?;
    assert_eq!(v["_ts"], json!(T0 + 8));
    assert_ne!(v["_etag"], before["_etag"]);
    e.clock.advance(Duration::from_secs(9)); // 17 s after the create, 9 after the patch
    assert_eq!(read(&e.c)?["n"], 6);
    e.clock.advance(Duration::from_secs(1));
    assert_eq!(status(read(&e.c)), "404");
    Ok(())
}

#[test]
fn ttl_can_be_set_and_removed() -> TestResult {
    let e = env_ttl(DefaultTtl::Seconds(100))?;
    let v = e.c.patch_item("a", "1", &[PatchOp::set("/ttl", 5)])?;
    assert_eq!(v["ttl"], 5);
    e.clock.advance(Duration::from_secs(4));
    let v = e.c.patch_item("a", "1", &[PatchOp::remove("/ttl")])?;
    assert!(
        v.get("ttl").is_none(),
        "the inherited default is never written"
    );
    e.clock.advance(Duration::from_secs(50));
    assert!(read(&e.c).is_ok(), "back on the container default of 100 s");
    e.c.patch_item("a", "1", &[PatchOp::set("/ttl", 2)])?;
    e.clock.advance(Duration::from_secs(2));
    assert_eq!(status(read(&e.c)), "404");
    Ok(())
}

#[test]
fn an_invalid_ttl_is_the_cosmos_400() -> TestResult {
    let e = env()?;
    for (v, shown) in [
        (json!(0), "0"),
        (json!(-2), "-2"),
        (json!(10.5), "10.5"),
        (json!("5"), "5"),
        (Value::Null, "null"),
    ] {
        let before = read(&e.c)?;
        match e.c.patch_item("a", "1", &[PatchOp::set("/ttl", v.clone())]) {
            Err(Error::BadRequest(m)) => assert_eq!(
                m,
                format!("The input ttl '{shown}' is invalid. Ensure to provide a nonzero positive integer less than or equal to '2147483647', or '-1' which means never expire.")
            ),
            other => panic!("{v}: {other:?}"),
        }
        assert_eq!(read(&e.c)?, before);
    }
    Ok(())
}

#[test]
fn a_result_over_the_size_limit_is_413() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().max_item_size(1000))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    c.create_item(&json!({"id": "1", "pk": "a"}))?;
    assert_eq!(
        status(c.patch_item("a", "1", &[PatchOp::set("/big", "x".repeat(1000))])),
        "413"
    );
    assert!(c.read_item::<Value>("a", "1")?.get("big").is_none());
    Ok(())
}

#[test]
fn a_result_nested_too_deep_is_400() -> TestResult {
    let e = env()?;
    let mut deep = json!(1);
    for _ in 0..130 {
        deep = json!([deep]);
    }
    assert_eq!(refused(&e.c, &[PatchOp::set("/deep", deep)])?, "400");
    Ok(())
}

#[test]
fn concurrent_increments_never_lose_an_update() -> TestResult {
    let e = env()?;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = e.c.clone();
            std::thread::spawn(move || -> ebbdb::Result<()> {
                for _ in 0..100 {
                    c.patch_item("a", "1", &[PatchOp::incr("/n", 1)])?;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "thread panicked")??;
    }
    assert_eq!(read(&e.c)?["n"], 405);
    Ok(())
}

#[test]
fn a_patch_survives_reopen() -> TestResult {
    let e = env()?;
    let v =
        e.c.patch_item("a", "1", &[PatchOp::set("/status", "done")])?;
    let path = e.dir.path().to_path_buf();
    drop(e.c);
    drop(e.db);
    let db = Database::open_with(&path, Options::default().clock(e.clock.clone()))?;
    assert_eq!(db.container("orders")?.read_item::<Value>("a", "1")?, v);
    Ok(())
}

#[test]
fn a_deleted_container_is_404() -> TestResult {
    let e = env()?;
    e.db.delete_container("orders")?;
    assert_eq!(
        status(e.c.patch_item("a", "1", &[PatchOp::set("/x", 1)])),
        "404"
    );
    Ok(())
}
