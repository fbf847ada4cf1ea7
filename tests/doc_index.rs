//! Secondary indexes (`indexingPolicy.includedPaths`): the policy's JSON shape and its 400s,
//! the index kept in step with every kind of write, expiry (never a row through an index after
//! its deadline; entries go when the item is reaped), memory that follows the live set, the
//! rebuild at open, and batches that readers see whole or not at all through the index.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ebbdb::{
    Container, ContainerProperties, Database, DefaultTtl, PatchOp, Query, TransactionalBatch,
};
use serde_json::{json, Value};

fn open(dir: &std::path::Path, clock: &ebbdb::clock::ManualClock) -> Database {
    Database::open_with(dir, common::opts(clock)).expect("open")
}

fn indexed(db: &Database) -> Container {
    indexed_with_history(db, false)
}

/// With `history`, the container also keeps an all-versions change feed: its writes take the
/// stamped path (the write's instant under the log mutex, history in the same log batch).
fn indexed_with_history(db: &Database, history: bool) -> Container {
    let props = ContainerProperties::new("c", "/pk")
        .with_default_ttl(DefaultTtl::NeverExpire)
        .with_included_paths(["/status/?", "/n/?", "/o/k/?"]);
    let props = if history {
        props.with_change_feed_retention_minutes(60)
    } else {
        props
    };
    db.create_container(props).expect("container")
}

fn ids(c: &Container, text: &str) -> Vec<String> {
    let mut out: Vec<String> = c
        .query::<Value>(&Query::new(text))
        .and_then(|rows| rows.collect::<ebbdb::Result<Vec<Value>>>())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .into_iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect();
    out.sort();
    out
}

fn count(c: &Container, text: &str) -> u64 {
    c.query::<Value>(&Query::new(text))
        .and_then(|mut rows| rows.next().unwrap_or(Ok(Value::Null)))
        .ok()
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("{text}: no count"))
}

/// Asserts that `text` runs as `plan` says (`query_plan`) and returns exactly the ids
/// `0..n` whose remainder by `m` is `r` (sorted as `ids` sorts them).
/// `what` names the case in a failure.
fn assert_ids_by_remainder(
    c: &Container,
    text: &str,
    plan: &str,
    (n, m, r): (i32, i32, i32),
    what: &str,
) {
    assert_eq!(
        c.query_plan(&Query::new(text)).ok().as_deref(),
        Some(plan),
        "{what}: {text}"
    );
    let mut want: Vec<String> = (0..n)
        .filter(|i| i % m == r)
        .map(|i| i.to_string())
        .collect();
    want.sort();
    assert_eq!(ids(c, text), want, "{what}: {text}");
}

#[test]
fn the_policy_round_trips_in_the_cosmos_shape() {
    let body = json!({"id": "c", "partitionKey": {"paths": ["/pk"]},
        "indexingPolicy": {"indexingMode": "consistent", "automatic": true,
            "includedPaths": [{"path": "/status/?"}, {"path": "/\"a b\"/*", "indexes": []}],
            "excludedPaths": [{"path": "/*"}]}});
    let p = ContainerProperties::from_json_value(&body).expect("parse");
    assert_eq!(p.included_paths, vec!["/status/?", "/\"a b\"/*"]);
    assert_eq!(p.excluded_paths, vec!["/*"]);
    let back = p.to_json_value();
    assert_eq!(
        back["indexingPolicy"],
        json!({"indexingMode": "consistent",
            "includedPaths": [{"path": "/status/?"}, {"path": "/\"a b\"/*"}],
            "excludedPaths": [{"path": "/*"}]})
    );
    assert_eq!(
        ContainerProperties::from_json_value(&back).ok(),
        Some(p.clone())
    );
    // The catalogue keeps it across a reopen.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    {
        let db = open(dir.path(), &clock);
        db.create_container(p.clone()).expect("create");
    }
    let db = open(dir.path(), &clock);
    let c = db.container("c").expect("open");
    assert_eq!(c.properties().included_paths, p.included_paths);
    assert_eq!(
        c.query_plan(&Query::new("SELECT * FROM c WHERE c.status = 'x'"))
            .ok()
            .as_deref(),
        Some("index /status")
    );
}

#[test]
fn malformed_policies_are_400s() {
    let with = |policy: Value| json!({"id": "c", "partitionKey": {"paths": ["/pk"]}, "indexingPolicy": policy});
    for policy in [
        json!({"includedPaths": "/status/?"}),
        json!({"includedPaths": [{"path": 3}]}),
        json!({"includedPaths": ["/status/?"]}),
        json!({"includedPaths": [{}]}),
        json!({"includedPaths": [{"path": "status/?"}]}),
        json!({"includedPaths": [{"path": "/status"}]}),
        json!({"includedPaths": [{"path": "/a//b/?"}]}),
        json!({"includedPaths": [{"path": "/a b/?"}]}),
        json!({"excludedPaths": [{"path": "/x"}]}),
        json!({"excludedPaths": {}}),
    ] {
        let e = ContainerProperties::from_json_value(&with(policy.clone()))
            .expect_err(&policy.to_string());
        assert_eq!(e.status_code(), 400, "{policy}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path(), &common::clock());
    let bad = ContainerProperties::new("c", "/pk").with_included_paths(["/status"]);
    assert_eq!(
        db.create_container(bad)
            .map(|_| ())
            .expect_err("refused")
            .status_code(),
        400
    );
    let many = ContainerProperties::new("c", "/pk")
        .with_included_paths((0..17).map(|i| format!("/p{i}/?")));
    assert_eq!(
        db.create_container(many)
            .map(|_| ())
            .expect_err("refused")
            .status_code(),
        400
    );
}

#[test]
fn every_kind_of_write_keeps_the_index_in_step() {
    writes_keep_the_index_in_step(false);
}

#[test]
fn every_kind_of_write_keeps_the_index_in_step_with_a_change_feed_retention() {
    writes_keep_the_index_in_step(true);
}

fn writes_keep_the_index_in_step(history: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path(), &common::clock());
    let c = indexed_with_history(&db, history);
    let q = "SELECT VALUE c.id FROM c WHERE c.status = 'open'";
    assert_eq!(
        c.query_plan(&Query::new(q)).ok().as_deref(),
        Some("index /status")
    );
    c.create_item(&json!({"id": "1", "pk": "a", "status": "open"}))
        .expect("create");
    c.upsert_item(&json!({"id": "2", "pk": "a", "status": "open"}))
        .expect("upsert");
    c.upsert_item(&json!({"id": "3", "pk": "b", "status": "closed"}))
        .expect("upsert");
    assert_eq!(ids(&c, q), ["1", "2"]);
    // Replace moves an item out of the value; upsert back in; delete; patch.
    c.replace_item("a", "1", &json!({"id": "1", "pk": "a", "status": "closed"}))
        .expect("replace");
    assert_eq!(ids(&c, q), ["2"]);
    c.upsert_item(&json!({"id": "3", "pk": "b", "status": "open"}))
        .expect("upsert");
    assert_eq!(ids(&c, q), ["2", "3"]);
    c.delete_item("a", "2").expect("delete");
    assert_eq!(ids(&c, q), ["3"]);
    c.patch_item("a", "1", &[PatchOp::set("/status", "open")])
        .expect("patch");
    assert_eq!(ids(&c, q), ["1", "3"]);
    c.patch_item("b", "3", &[PatchOp::remove("/status")])
        .expect("patch");
    assert_eq!(ids(&c, q), ["1"]);
    // A transactional batch, and a bulk create.
    let mut batch = TransactionalBatch::new("a");
    batch
        .create_item(&json!({"id": "4", "pk": "a", "status": "open"}))
        .patch_item("1", &[PatchOp::set("/status", "done")])
        .upsert_item(&json!({"id": "5", "pk": "a", "status": "new"}))
        .patch_item("5", &[PatchOp::set("/status", "open")]);
    assert!(c.execute_batch(&batch).expect("batch").is_success());
    assert_eq!(ids(&c, q), ["4", "5"]);
    // A failed batch changes nothing, in the index either.
    let mut failing = TransactionalBatch::new("a");
    failing
        .upsert_item(&json!({"id": "6", "pk": "a", "status": "open"}))
        .create_item(&json!({"id": "4", "pk": "a", "status": "open"}));
    assert!(!c.execute_batch(&failing).expect("batch").is_success());
    assert_eq!(ids(&c, q), ["4", "5"]);
    let bulk = c.create_items(&[
        json!({"id": "7", "pk": "c", "status": "open", "n": 7}),
        json!({"id": "8", "pk": "c", "status": "open", "n": 8.0}),
    ]);
    assert!(matches!(bulk, Ok(ebbdb::BulkCreate::Created(2))));
    assert_eq!(ids(&c, q), ["4", "5", "7", "8"]);
    assert_eq!(
        count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'open'"),
        4
    );
    assert_eq!(ids(&c, "SELECT VALUE c.id FROM c WHERE c.n = 8"), ["8"]);
    // Only the live versions hold entries: status of 1 (done), 4, 5, 7, 8 (open) and n of
    // 7 and 8; item 3 has no indexed value left, so it is not tracked (no stale entries).
    let (entries, keys) = c.index_size().expect("an index");
    assert_eq!((entries, keys), (5 + 2, 5));
}

#[test]
fn expired_items_never_come_through_the_index_and_their_entries_go_when_reaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = open(dir.path(), &clock);
    let c = indexed(&db);
    for i in 0..100 {
        let ttl = if i % 2 == 0 { 10 } else { -1 };
        c.create_item(
            &json!({"id": format!("{i:03}"), "pk": "a", "status": "open", "n": i, "ttl": ttl}),
        )
        .expect("create");
    }
    let q = "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'open'";
    assert_eq!(count(&c, q), 100);
    clock.advance(Duration::from_secs(9));
    assert_eq!(count(&c, q), 100);
    clock.advance(Duration::from_secs(1));
    // At the deadline: gone from the indexed count, the indexed rows and ranges at once.
    assert_eq!(count(&c, q), 50);
    assert_eq!(
        ids(&c, "SELECT VALUE c.id FROM c WHERE c.status = 'open'").len(),
        50
    );
    assert_eq!(count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.n < 10"), 5);
    assert_eq!(
        ids(&c, "SELECT VALUE c.n FROM c WHERE c.n BETWEEN 0 AND 3"),
        ["1", "3"]
    );
    assert_eq!(c.index_size().map(|s| s.1), Some(100));
    db.maintain().expect("expiry");
    // Reaped: the index follows the live set.
    assert_eq!(c.index_size(), Some((100, 50)));
    assert_eq!(count(&c, q), 50);
}

#[test]
fn writes_alone_make_the_index_forget_reaped_items() {
    // The sweep that runs as the index grows (not `Database::maintain`'s) must notice keys
    // the engine's reaper freed: it walks only when keys left the key directory since the
    // last sweep, so this fails if a reaped key is not counted as gone.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = Database::open_with(dir.path(), common::manual(&clock)).expect("open");
    let c = indexed(&db);
    let create = |i: usize, pk: &str, ttl: i64| {
        c.create_item(&json!({"id": format!("{i:05}"), "pk": pk, "n": i, "ttl": ttl}))
            .expect("create");
    };
    // Past the first sweep's threshold with nothing gone: that sweep finds nothing to drop.
    for i in 0..5000 {
        create(i, "short", 10);
    }
    assert_eq!(c.index_size(), Some((5000, 5000)));
    clock.advance(Duration::from_secs(10));
    // The engine's own expiry pass: the document layer is not told.
    db.store().maintain().expect("reap");
    assert_eq!(c.index_size(), Some((5000, 5000)));
    // The next sweep is due by 10,000 tracked keys at the latest (twice the size at the
    // first threshold, whenever the queue was applied): these take the set past it.
    for i in 0..10_000 {
        create(i, "long", -1);
    }
    assert_eq!(c.index_size(), Some((10_000, 10_000)));
    assert_eq!(
        count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.n >= 0"),
        10_000
    );
}

#[test]
fn overwriting_one_item_does_not_grow_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path(), &common::clock());
    let c = indexed(&db);
    for i in 0..2000 {
        c.upsert_item(&json!({"id": "x", "pk": "a", "status": format!("s{}", i % 7), "n": i, "o": {"k": i % 3}}))
            .expect("upsert");
    }
    assert_eq!(c.index_size(), Some((3, 1)));
    c.delete_item("a", "x").expect("delete");
    assert_eq!(c.index_size(), Some((0, 0)));
}

#[test]
fn the_index_is_rebuilt_at_open_and_when_the_policy_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    {
        let db = open(dir.path(), &clock);
        let c = indexed(&db);
        for i in 0..300 {
            c.create_item(&json!({"id": format!("{i}"), "pk": format!("p{}", i % 7), "status": if i % 3 == 0 { "open" } else { "closed" }, "n": i, "ttl": if i % 10 == 0 { 5 } else { -1 }}))
                .expect("create");
        }
        c.delete_item("p0", "0").expect("delete");
    }
    clock.advance(Duration::from_secs(5));
    let db = open(dir.path(), &clock);
    let c = db.container("c").expect("open");
    let q = "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'open'";
    assert_eq!(
        c.query_plan(&Query::new(q)).ok().as_deref(),
        Some("index /status")
    );
    // 100 open, less the deleted "0" and the expired multiples of 30 (30, 60, …, 270).
    assert_eq!(count(&c, q), 100 - 1 - 9);
    // A new policy: the new path is built, the old one dropped.
    let c = db
        .replace_container(c.properties().with_included_paths(["/pk/?"]))
        .expect("replace");
    let by_pk = Query::new("SELECT VALUE COUNT(1) FROM c WHERE c.pk IN ('p1', 'p2')");
    assert_eq!(c.query_plan(&by_pk).ok().as_deref(), Some("index /pk"));
    let scanned: u64 = (1..300)
        .filter(|i| i % 7 == 1 || i % 7 == 2)
        .filter(|i| i % 10 != 0)
        .count() as u64;
    assert_eq!(
        count(
            &c,
            "SELECT VALUE COUNT(1) FROM c WHERE c.pk IN ('p1', 'p2')"
        ),
        scanned
    );
    let plain = c.properties();
    let none = ContainerProperties::new("c", "/pk").with_default_ttl(plain.default_ttl);
    let c = db.replace_container(none).expect("replace");
    assert_eq!(c.index_size(), None);
    assert_eq!(c.query_plan(&Query::new(q)).ok().as_deref(), Some("scan"));
}

/// An indexing policy on a container created empty (or given one while empty) builds its
/// index without walking the container: the walk would order its hashed key directory for
/// good, and there is nothing to read. The index must still hold every item written after,
/// through creates, replaces, deletes and a policy change, and agree with a scan.
#[test]
fn an_index_built_over_an_empty_container_leaves_its_key_directory_hashed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = open(dir.path(), &clock);
    let c = indexed(&db);
    let hashed = |db: &Database| db.store().key_directory_hashed("c:c").expect("keyspace");
    assert!(hashed(&db), "no walk at the creation");
    for i in 0..200 {
        c.create_item(&json!({"id": format!("{i}"), "pk": format!("p{}", i % 5), "status": if i % 4 == 0 { "open" } else { "closed" }, "n": i}))
            .expect("create");
    }
    c.replace_item(
        "p1",
        "1",
        &json!({"id": "1", "pk": "p1", "status": "open", "n": 1}),
    )
    .expect("replace");
    c.delete_item("p0", "0").expect("delete");
    let q = "SELECT VALUE c.id FROM c WHERE c.status = 'open'";
    assert_eq!(
        c.query_plan(&Query::new(q)).ok().as_deref(),
        Some("index /status")
    );
    // 50 multiples of 4, less the deleted "0", plus "1".
    let mut want: Vec<String> = (4..200).step_by(4).map(|i| i.to_string()).collect();
    want.push("1".to_string());
    want.sort();
    assert_eq!(ids(&c, q), want);
    assert!(hashed(&db), "point writes and an index query order nothing");

    // Emptied, then a new policy: again nothing to walk.
    let empty = db
        .create_container(
            ContainerProperties::new("e", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
        )
        .expect("container");
    empty
        .create_item(&json!({"id": "x", "pk": "a", "n": 7}))
        .expect("create");
    empty.delete_item("a", "x").expect("delete");
    let empty = db
        .replace_container(empty.properties().with_included_paths(["/n/?"]))
        .expect("replace");
    assert!(db.store().key_directory_hashed("c:e").expect("keyspace"));
    for i in 0..20 {
        empty
            .create_item(&json!({"id": format!("{i}"), "pk": "a", "n": i % 3}))
            .expect("create");
    }
    assert_ids_by_remainder(
        &empty,
        "SELECT VALUE c.id FROM c WHERE c.n = 2",
        "index /n",
        (20, 3, 2),
        "a policy given to an emptied container",
    );

    // A scan orders the map; the index and the scan agree.
    let scanned = ids(
        &c,
        "SELECT VALUE c.id FROM c WHERE c.status = 'open' OR c.n < 0",
    );
    assert_eq!(
        c.query_plan(&Query::new(
            "SELECT VALUE c.id FROM c WHERE c.status = 'open' OR c.n < 0"
        ))
        .ok()
        .as_deref(),
        Some("scan")
    );
    assert_eq!(scanned, ids(&c, q));
    assert!(!hashed(&db), "a cross-partition scan walks in key order");
}

/// A policy given to an empty container while a writer creates items in it: the build skips
/// its walk only if the registration found the key directory empty, and every item written
/// after the registration stages into the new set, so the index must hold every item, whether
/// the registration came before the first write or between two. Checked against a scan.
#[test]
fn a_policy_set_while_writes_arrive_on_an_empty_container_misses_no_item() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = Arc::new(open(dir.path(), &clock));
    for round in 0..8 {
        let id = format!("r{round}");
        let c = db
            .create_container(
                ContainerProperties::new(&id, "/pk").with_default_ttl(DefaultTtl::NeverExpire),
            )
            .expect("container");
        let writer = {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..400 {
                    c.create_item(
                        &json!({"id": format!("{i}"), "pk": format!("p{}", i % 3), "n": i % 4}),
                    )
                    .expect("create");
                }
            })
        };
        // Early in the writes, at a different point each round.
        for _ in 0..round * 20 {
            std::thread::yield_now();
        }
        let c = db
            .replace_container(c.properties().with_included_paths(["/n/?"]))
            .expect("replace");
        writer.join().expect("writer");
        let what = format!("round {round}");
        let q = "SELECT VALUE c.id FROM c WHERE c.n = 1";
        assert_ids_by_remainder(&c, q, "index /n", (400, 4, 1), &what);
        let scanned = "SELECT VALUE c.id FROM c WHERE c.n = 1 OR c.pk = 'none'";
        assert_ids_by_remainder(&c, scanned, "scan", (400, 4, 1), &what);
    }
}

/// A writer moves a token between items with transactional batches (one item leaves
/// `status = 'hot'`, another enters it, in one batch) while readers count and list the hot
/// items through the index: they must always see exactly one.
#[test]
fn readers_see_a_batch_whole_or_not_at_all_through_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path(), &common::clock());
    let c = indexed(&db);
    for i in 0..50 {
        let status = if i == 0 { "hot" } else { "cold" };
        c.create_item(&json!({"id": format!("{i}"), "pk": "a", "status": status, "n": i}))
            .expect("create");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let c = c.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut hot = 0;
            let mut moves = 0u32;
            while !stop.load(Ordering::Relaxed) || moves < 200 {
                let next = (hot * 7 + 3) % 50;
                if next == hot {
                    hot = (hot + 1) % 50;
                    continue;
                }
                let mut b = TransactionalBatch::new("a");
                b.patch_item(&format!("{hot}"), &[PatchOp::set("/status", "cold")])
                    .patch_item(&format!("{next}"), &[PatchOp::set("/status", "hot")]);
                assert!(c.execute_batch(&b).expect("batch").is_success());
                hot = next;
                moves += 1;
                if moves > 5000 {
                    break;
                }
            }
        })
    };
    let mut checks = 0;
    while checks < 300 {
        assert_eq!(
            count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'hot'"),
            1
        );
        assert_eq!(
            ids(&c, "SELECT VALUE c.id FROM c WHERE c.status = 'hot'").len(),
            1
        );
        assert_eq!(
            ids(
                &c,
                "SELECT VALUE c.id FROM c WHERE c.status IN ('hot', 'cold')"
            )
            .len(),
            50
        );
        checks += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
}

/// Batches delete one hot item and create another while readers count the hot ones through
/// the index. The items carry a `ttl`, so the count looks each settled one up in the key
/// directory: that lookup must agree with the reader's snapshot even though writes stage
/// their index entries into a queue the indexer applies later (a delete staged after the
/// reader registered must not be seen by the lookup).
#[test]
fn an_indexed_count_that_looks_items_up_sees_delete_and_create_batches_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path(), &common::clock());
    let c = indexed(&db);
    let hot =
        |i: u64| json!({"id": format!("{i}"), "pk": "a", "status": "hot", "n": i, "ttl": 3600});
    for i in 0..20 {
        c.create_item(&hot(i)).expect("create");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let c = c.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            // Items `first..first + 20` are live; each batch retires the oldest and adds one.
            let mut first = 0u64;
            while !stop.load(Ordering::Relaxed) || first < 2000 {
                let mut b = TransactionalBatch::new("a");
                b.delete_item(&format!("{first}"))
                    .create_item(&hot(first + 20));
                assert!(c.execute_batch(&b).expect("batch").is_success());
                first += 1;
                if first > 50_000 {
                    break;
                }
            }
        })
    };
    for _ in 0..300 {
        assert_eq!(
            count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'hot'"),
            20
        );
        assert_eq!(
            ids(&c, "SELECT VALUE c.id FROM c WHERE c.status = 'hot'").len(),
            20
        );
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert_eq!(
        count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'hot'"),
        20
    );
}

/// An indexed `COUNT(1) WHERE` counts items that cannot expire without reading them; items
/// without a `ttl` of their own expire by the container's default, so the count must drop at
/// that deadline, also when the default was set after the items were written and across a
/// reopen (the index is rebuilt).
#[test]
fn an_indexed_count_follows_the_containers_default_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let q = "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'open'";
    {
        let db = open(dir.path(), &clock);
        let props = |id: &str, ttl| {
            ContainerProperties::new(id, "/pk")
                .with_default_ttl(ttl)
                .with_included_paths(["/status/?"])
        };
        let fixed = db
            .create_container(props("fixed", DefaultTtl::Seconds(10)))
            .expect("container");
        let later = db
            .create_container(props("later", DefaultTtl::NeverExpire))
            .expect("container");
        for i in 0..20 {
            let item = json!({"id": format!("{i:02}"), "pk": "a", "status": "open"});
            fixed.create_item(&item).expect("create");
            later.create_item(&item).expect("create");
        }
        assert_eq!((count(&fixed, q), count(&later, q)), (20, 20));
        clock.advance(Duration::from_secs(5));
        // A default set later counts from each item's write: these expire at 8 s.
        let later = db
            .replace_container(props("later", DefaultTtl::Seconds(8)))
            .expect("replace");
        clock.advance(Duration::from_secs(2));
        assert_eq!((count(&fixed, q), count(&later, q)), (20, 20));
        clock.advance(Duration::from_secs(1));
        assert_eq!((count(&fixed, q), count(&later, q)), (20, 0));
        clock.advance(Duration::from_secs(2));
        assert_eq!((count(&fixed, q), count(&later, q)), (0, 0));
    }
    // Back to no expiry after the reopen: expired items stay expired (expiry is final) and
    // new items count without a deadline.
    let db = open(dir.path(), &clock);
    let later = db.container("later").expect("container");
    assert_eq!(count(&later, q), 0);
    let never = ContainerProperties::new("later", "/pk")
        .with_default_ttl(DefaultTtl::NeverExpire)
        .with_included_paths(["/status/?"]);
    let later = db.replace_container(never).expect("replace");
    later
        .create_item(&json!({"id": "new", "pk": "a", "status": "open"}))
        .expect("create");
    clock.advance(Duration::from_secs(100));
    assert_eq!(count(&later, q), 1);
}

/// An indexed `COUNT(1) WHERE` in a container without a default TTL counts items whose own
/// `ttl` can never make them expire without looking them up, and the others at their
/// deadline: also an item that gained a `ttl` by a later write, on the same value or another,
/// and with an `IN` list that repeats a value. Checked against the same items unindexed.
#[test]
fn an_indexed_count_sees_items_that_gained_a_ttl_expire() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = open(dir.path(), &clock);
    let props = |id: &str, paths: &[&str]| {
        ContainerProperties::new(id, "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_included_paths(paths.iter().copied())
    };
    let ix = db
        .create_container(props("ix", &["/status/?"]))
        .expect("container");
    let plain = db.create_container(props("plain", &[])).expect("container");
    let both = |item: Value| {
        ix.upsert_item(&item).expect("upsert");
        plain.upsert_item(&item).expect("upsert");
    };
    for i in 0..30 {
        let status = if i % 3 == 0 { "closed" } else { "open" };
        let mut item =
            json!({"id": format!("{i:02}"), "pk": format!("p{}", i % 4), "status": status});
        match i % 5 {
            0 => item["ttl"] = json!(-1),
            1 => item["ttl"] = json!(20),
            _ => {}
        }
        both(item);
    }
    // Items written without a `ttl` gain one: on the same value, and moving to another.
    both(json!({"id": "02", "pk": "p2", "status": "open", "ttl": 5}));
    both(json!({"id": "03", "pk": "p3", "status": "open", "ttl": 5}));
    // An item that had a `ttl` loses it (it may stay marked: a lookup, not a wrong count).
    both(json!({"id": "01", "pk": "p1", "status": "open"}));
    let queries = [
        "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'open'",
        "SELECT VALUE COUNT(1) FROM c WHERE c.status IN ('open', 'closed', 'open')",
        "SELECT VALUE COUNT(1) FROM c WHERE c.status >= 'a'",
    ];
    let mut seen = Vec::new();
    for secs in [0, 4, 1, 14, 1, 10] {
        clock.advance(Duration::from_secs(secs));
        for q in queries {
            let n = count(&ix, q);
            assert_eq!(n, count(&plain, q), "{q} after {secs} s more");
            seen.push(n);
        }
    }
    // 30 items: 20 open, 10 closed; `02` and `03` (now open) expire at 5 s, the five with
    // `ttl` 20 except `01` (ids 06, 11, 16, 21, 26) at 20 s.
    assert_eq!(seen[..3], [21, 30, 30]);
    assert_eq!(seen[6..9], [19, 28, 28], "at 5 s");
    assert_eq!(seen[15..], [16, 23, 23], "at 30 s");
}

/// Items reaped while their index versions are still queued are forgotten too. A sweep that
/// ran between two chunks of the queue used to record the reap's departures as dealt with
/// while the reaped keys' versions were still queued; once settled they were tracked keys the
/// key directory does not hold, and every later sweep (growth or `Database::maintain`) was
/// skipped.
#[test]
fn items_reaped_while_their_versions_are_queued_are_forgotten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = Database::open_with(dir.path(), common::manual(&clock)).expect("open");
    let paths: Vec<String> = (0..16).map(|p| format!("/p{p}/?")).collect();
    let b = db
        .create_container(
            ContainerProperties::new("b", "/pk")
                .with_default_ttl(DefaultTtl::NeverExpire)
                .with_included_paths(paths.iter().map(String::as_str)),
        )
        .expect("container b");
    let item = |id: String, i: usize, ttl: Option<i64>| {
        let mut m = serde_json::Map::new();
        m.insert("id".into(), json!(id));
        m.insert("pk".into(), json!("p"));
        for p in 0..16 {
            m.insert(
                format!("p{p}"),
                json!(format!("value-{p:02}-{i:08}-padding-padding")),
            );
        }
        if let Some(t) = ttl {
            m.insert("ttl".into(), json!(t));
        }
        Value::Object(m)
    };
    // 4,000 live items, applied (just under the first sweep at 4,096 tracked keys).
    let items: Vec<Value> = (0..4000)
        .map(|i| item(format!("keep{i:05}"), i, None))
        .collect();
    b.create_items(&items).expect("bulk");
    assert_eq!(b.index_size(), Some((64_000, 4000)));
    // Queued and left there until the reap has freed the expiring ones: 2,000 more lasting
    // items (their changes come first: applying them takes the set past its first sweep's
    // threshold while the expiring items' changes still wait), then 1,100 items that expire
    // in 1 s (2,200 changes, more than one 2,048 chunk).
    db.pause_indexer(true);
    let items: Vec<Value> = (4000..6000)
        .map(|i| item(format!("keep{i:05}"), i, None))
        .collect();
    b.create_items(&items).expect("bulk");
    let items: Vec<Value> = (0..1100)
        .map(|i| item(format!("ttl{i:05}"), 10_000 + i, Some(1)))
        .collect();
    b.create_items(&items).expect("bulk ttl");
    clock.advance(Duration::from_secs(2));
    assert_eq!(db.store().maintain().expect("reap"), 1100);
    // This reader applies the queue a chunk at a time, sweeping in between.
    let _ = b.index_size();
    db.pause_indexer(false);
    // An explicit maintain sweeps keys the key directory no longer holds (DESIGN §14.1).
    db.maintain().expect("maintain");
    assert_eq!(
        b.index_size(),
        Some((96_000, 6000)),
        "reaped keys still indexed"
    );
}

/// `Keyspace::create_all` used to stage (take the index queue) inside its check while holding
/// the keyspace's state read lock, and a reader holds the queue while it takes that read lock.
/// With the reaper parked for the write lock in between (a fair lock queues new readers behind
/// a waiting writer), the three deadlocked. Runs the three for 5 s and fails if one of them
/// makes no progress for 3 s.
#[test]
fn a_bulk_create_an_indexed_reader_and_the_reaper_do_not_deadlock() {
    use std::sync::atomic::AtomicU64;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = Database::open_with(dir.path(), common::manual(&clock)).expect("open");
    let c = indexed(&db);
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let mut threads = Vec::new();
    {
        let (c, stop, progress) = (c.clone(), Arc::clone(&stop), Arc::clone(&progress));
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let items: Vec<Value> = (0..200)
                    .map(|i| {
                        n += 1;
                        json!({"id": format!("{n}-{i}"), "pk": "p", "status": "hot", "n": n, "ttl": 1})
                    })
                    .collect();
                c.create_items(&items).expect("bulk");
                progress[0].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (c, stop, progress) = (c.clone(), Arc::clone(&stop), Arc::clone(&progress));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = ids(&c, "SELECT VALUE c.id FROM c WHERE c.status = 'none'");
                progress[1].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (db, clock, stop, progress) = (
            db.clone(),
            clock.clone(),
            Arc::clone(&stop),
            Arc::clone(&progress),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                clock.advance(Duration::from_secs(1));
                db.store().maintain().expect("reap");
                progress[2].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = std::time::Instant::now();
    let mut last = [0u64; 3];
    let mut still = [std::time::Instant::now(); 3];
    while start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        let now: Vec<u64> = progress.iter().map(|p| p.load(Ordering::Relaxed)).collect();
        for i in 0..3 {
            if now[i] != last[i] {
                still[i] = std::time::Instant::now();
                last[i] = now[i];
            }
        }
        if still.iter().any(|s| s.elapsed() > Duration::from_secs(3)) {
            panic!(
                "a thread made no progress for 3 s after {:?}: deadlock (counts {now:?})",
                start.elapsed()
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let stopping = std::time::Instant::now();
    while !threads.iter().all(std::thread::JoinHandle::is_finished) {
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "threads did not stop: deadlock (counts {last:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for t in threads {
        t.join().expect("thread");
    }
}

/// `Database::maintain` during a build used to sweep the entry-less version a delete left (the
/// build's only sign that the key was written after its scan read it); the build then added the
/// deleted item from its older read as a settled version, which an indexed COUNT counts
/// without a lookup (no `ttl`), and the sweep had recorded the delete's departure, so later
/// sweeps skipped it.
#[test]
fn maintain_during_a_build_keeps_no_deleted_item() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = Database::open_with(dir.path(), common::manual(&clock)).expect("open");
    let props = |paths: &[&str]| {
        ContainerProperties::new("c", "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_included_paths(paths.iter().copied())
    };
    let c = db.create_container(props(&["/n/?"])).expect("container");
    let n = 20_000usize;
    for chunk in (0..n).collect::<Vec<_>>().chunks(2000) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"id": format!("{i:06}"), "pk": "p", "n": i, "status": "s"}))
            .collect();
        c.create_items(&items).expect("bulk");
    }
    // Deletion order: a fixed pseudo-random permutation.
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let order = Arc::new(std::sync::Mutex::new(order));
    for round in 0..40 {
        let done = Arc::new(AtomicBool::new(false));
        let deleter = {
            let (c, db, done, order) =
                (c.clone(), db.clone(), Arc::clone(&done), Arc::clone(&order));
            std::thread::spawn(move || {
                let probe = Query::new("SELECT VALUE COUNT(1) FROM c WHERE c.n >= 0");
                while !done.load(Ordering::Relaxed) {
                    let Some(i) = order.lock().expect("order").pop() else {
                        break;
                    };
                    c.delete_item("p", &format!("{i:06}")).expect("delete");
                    // Sweep while the new set is being built (its plan is not the index yet).
                    if c.query_plan(&probe).expect("plan").starts_with("index") {
                        break;
                    }
                    db.maintain().expect("maintain");
                }
            })
        };
        let paths: &[&str] = if round % 2 == 0 {
            &["/n/?", "/status/?"]
        } else {
            &["/n/?"]
        };
        db.replace_container(props(paths)).expect("replace");
        done.store(true, Ordering::Relaxed);
        deleter.join().expect("deleter");
        let live = count(&c, "SELECT VALUE COUNT(1) FROM c");
        let indexed = count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.n >= 0");
        if indexed != live {
            // `Database::maintain` should make the index forget deleted items.
            db.maintain().expect("maintain");
            let again = count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.n >= 0");
            panic!("round {round}: indexed COUNT {indexed}, live {live}; after maintain {again}");
        }
    }
}

/// Dropping every handle (with the indexer thread started) closes the store: it reopens.
#[test]
fn dropping_the_database_with_the_indexer_running_closes_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    for round in 0..20 {
        let db = Database::open_with(dir.path(), common::manual(&clock)).expect("open");
        let c = if round == 0 {
            indexed(&db)
        } else {
            db.container("c").expect("c")
        };
        for i in 0..3000 {
            c.upsert_item(&json!({"id": format!("{i}"), "pk": "a", "status": "hot", "n": round}))
                .expect("upsert");
        }
        // Leave work queued for the indexer, then drop everything (container on another thread).
        std::thread::spawn(move || drop(c)).join().expect("drop c");
        drop(db);
    }
    let db = Database::open_with(dir.path(), common::manual(&clock)).expect("reopen");
    let c = db.container("c").expect("c");
    assert_eq!(
        count(&c, "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'hot'"),
        3000
    );
}

/// A partition key value over the limit is refused (400) before anything is staged in the
/// index, by every kind of write; the index stays in use. (An engine key over its limit used
/// to fail inside the write, after staging, which marked the index broken: every later query
/// scanned.)
#[test]
fn an_overlong_partition_key_is_refused_before_the_index_sees_it() {
    for history in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = common::clock();
        let db = open(dir.path(), &clock);
        let c = indexed_with_history(&db, history);
        c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))
            .expect("create");
        let plan = |c: &Container| {
            c.query_plan(&Query::new("SELECT * FROM c WHERE c.n = 1"))
                .expect("plan")
        };
        assert_eq!(plan(&c), "index /n");
        let longest = "k".repeat(ebbdb::doc::partition::MAX_PARTITION_KEY_BYTES);
        c.create_item(&json!({"id": "b", "pk": longest, "n": 1}))
            .expect("the longest partition key is accepted");
        for huge in [format!("{longest}x"), "k".repeat(70 * 1024)] {
            let item = json!({"id": "x", "pk": huge, "n": 1});
            let e = c.create_item(&item).expect_err("create");
            assert_eq!(e.status_code(), 400, "{e}");
            assert!(e.to_string().contains("maximum is 2048"), "{e}");
            assert_eq!(c.upsert_item(&item).expect_err("upsert").status_code(), 400);
            let mut batch = TransactionalBatch::new(huge.as_str());
            batch.upsert_item(&item);
            let r = c.execute_batch(&batch).expect("batch response");
            assert_eq!(r.status_code(), 400);
            let bulk = c.create_items(std::slice::from_ref(&item)).expect("bulk");
            assert!(
                matches!(bulk, ebbdb::BulkCreate::Refused(ref r) if r.len() == 1 && r[0].1.status_code() == 400),
                "{bulk:?}"
            );
            assert_eq!(
                plan(&c),
                "index /n",
                "history {history}: the index is in use"
            );
        }
        assert_eq!(ids(&c, "SELECT * FROM c WHERE c.n = 1").len(), 2);
    }
}

/// Queries racing policy changes: a query that planned with an index set that is then replaced
/// (a changed `includedPaths`) must not answer from it once writes stage only into the new
/// one. Two items swap values in one batch, so exactly one holds `n = 1` at every instant.
#[test]
fn queries_racing_a_policy_change_answer_from_a_set_that_sees_every_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::clock();
    let db = open(dir.path(), &clock);
    let props = |paths: &[&str]| {
        ContainerProperties::new("c", "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_included_paths(paths.iter().copied())
    };
    let c = db.create_container(props(&["/n/?"])).expect("container");
    c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))
        .expect("a");
    c.create_item(&json!({"id": "b", "pk": "p", "n": 2}))
        .expect("b");
    let stop = AtomicBool::new(false);
    // Rounds the changer completed: the queries go on until it has done a few, however the
    // two threads are scheduled (on a loaded machine the 3,000 queries could otherwise all
    // run before its first policy change).
    let rounds = AtomicU64::new(0);
    std::thread::scope(|s| {
        let changer = s.spawn(|| {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let paths: &[&str] = if round.is_multiple_of(2) {
                    &["/n/?", "/m/?"]
                } else {
                    &["/n/?"]
                };
                db.replace_container(props(paths)).expect("replace");
                let (one, two) = if round.is_multiple_of(2) {
                    ("b", "a")
                } else {
                    ("a", "b")
                };
                let mut batch = TransactionalBatch::new("p");
                batch
                    .upsert_item(&json!({"id": one, "pk": "p", "n": 1}))
                    .upsert_item(&json!({"id": two, "pk": "p", "n": 2}));
                assert!(c.execute_batch(&batch).expect("batch").is_success());
                round += 1;
                rounds.store(round, Ordering::Relaxed);
            }
            round
        });
        let stop_on_panic = common::StopOnDrop(&stop);
        let started = std::time::Instant::now();
        let mut i = 0;
        // A changer that panicked has finished: its panic surfaces at the join below.
        while (i < 3000 || rounds.load(Ordering::Relaxed) < 20) && !changer.is_finished() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "the policy changer made {} rounds in two minutes",
                rounds.load(Ordering::Relaxed)
            );
            let text = if i % 2 == 0 {
                "SELECT VALUE c.id FROM c WHERE c.n = 1"
            } else {
                "SELECT VALUE COUNT(1) FROM c WHERE c.n = 1"
            };
            let got: Vec<Value> = c
                .query::<Value>(&Query::new(text))
                .and_then(|r| r.collect())
                .expect("query");
            if i % 2 == 0 {
                assert_eq!(got.len(), 1, "{text}: {got:?}");
            } else {
                assert_eq!(got, vec![json!(1)], "{text}");
            }
            i += 1;
        }
        drop(stop_on_panic);
        assert!(changer.join().expect("changer") >= 20);
    });
}
