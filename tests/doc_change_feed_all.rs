//! `docs/contract.md` §8, change feed in all-versions-and-deletes mode (DESIGN.md §16.2): every
//! operation type, expiries reported exactly once (while open, while closed, after a default-TTL
//! change, after compaction purged them, after a write found the item expired), the retention
//! window (410), continuations across reopen and compaction, the push API, a crash at every
//! byte of a write keeping an item and its history together, and a model test against a
//! reference feed.

mod common;

use std::time::Duration;

use common::{copy_dir, segments};
use ebbdb::clock::{Clock, ManualClock};
use ebbdb::{
    ChangeFeedMode, ChangeFeedOptions, ChangeFeedStart, Container, ContainerProperties, Database,
    DefaultTtl, Error, Options, PatchOp, SyncPolicy, TransactionalBatch,
};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
        .segment_size(16 * 1024)
}

fn props(ttl: DefaultTtl, retention_minutes: u32) -> ContainerProperties {
    ContainerProperties::new("c", "/pk")
        .with_default_ttl(ttl)
        .with_change_feed_retention_minutes(retention_minutes)
}

struct Env {
    dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
    c: Container,
}

fn env(ttl: DefaultTtl) -> Result<Env, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let c = db.create_container(props(ttl, 60))?;
    Ok(Env { dir, clock, db, c })
}

fn all() -> ChangeFeedOptions {
    ChangeFeedOptions::default().mode(ChangeFeedMode::AllVersionsAndDeletes)
}

fn from(token: &str) -> ChangeFeedOptions {
    all().start(ChangeFeedStart::Continuation(token.to_string()))
}

/// Reads pages of `size` from `token` until one is empty.
fn drain(c: &Container, token: &str, size: usize) -> Result<(Vec<Value>, String), Error> {
    let mut out = Vec::new();
    let mut token = token.to_string();
    loop {
        let page = c.read_change_feed(&from(&token).max_item_count(size))?;
        assert!(page.changes.len() <= size);
        token = page.continuation;
        if page.changes.is_empty() {
            return Ok((out, token));
        }
        out.extend(page.changes);
    }
}

/// `op:id` for each change, `expire:id` for expiries.
fn shape(changes: &[Value]) -> Vec<String> {
    changes
        .iter()
        .map(|v| {
            let m = &v["metadata"];
            let id = v["current"]["id"]
                .as_str()
                .or_else(|| m["id"].as_str())
                .unwrap_or("?");
            let op = if m["timeToLiveExpired"] == true {
                "expire"
            } else {
                m["operationType"].as_str().unwrap_or("?")
            };
            format!("{op}:{id}")
        })
        .collect()
}

fn start_token(c: &Container) -> Result<String, Error> {
    Ok(c.read_change_feed(&all().start(ChangeFeedStart::Now))?
        .continuation)
}

#[test]
fn every_operation_type_in_commit_order_with_metadata() -> TestResult {
    let e = env(DefaultTtl::Off)?;
    let t = start_token(&e.c)?;
    let a = e.c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))?;
    e.clock.advance(Duration::from_secs(1));
    e.c.upsert_item(&json!({"id": "b", "pk": "p"}))?; // upsert of a new item: a create
    e.c.upsert_item(&json!({"id": "a", "pk": "p", "n": 2}))?; // a replace
    e.c.replace_item("p", "a", &json!({"id": "a", "pk": "p", "n": 3}))?;
    let patched = e.c.patch_item("p", "a", &[PatchOp::incr("/n", 1)])?;
    e.c.delete_item("p", "b")?;
    let mut batch = TransactionalBatch::new("p");
    batch
        .create_item(&json!({"id": "x", "pk": "p"}))
        .patch_item("x", &[PatchOp::set("/k", 1)])
        .delete_item("x")
        .read_item("a");
    assert!(e.c.execute_batch(&batch)?.is_success());
    assert!(matches!(
        e.c.create_items(&[json!({"id": "y", "pk": "q"}), json!({"id": "z", "pk": "q"})])?,
        ebbdb::BulkCreate::Created(2)
    ));
    // Refused writes leave nothing in the feed.
    assert!(e.c.create_item(&json!({"id": "a", "pk": "p"})).is_err());
    assert!(e.c.delete_item("p", "nope").is_err());
    let mut failing = TransactionalBatch::new("p");
    failing
        .create_item(&json!({"id": "w", "pk": "p"}))
        .create_item(&json!({"id": "a", "pk": "p"}));
    assert!(!e.c.execute_batch(&failing)?.is_success());

    let (changes, _) = drain(&e.c, &t, 3)?;
    assert_eq!(
        shape(&changes),
        [
            "create:a",
            "create:b",
            "replace:a",
            "replace:a",
            "replace:a",
            "delete:b",
            "create:x",
            "replace:x",
            "delete:x",
            "create:y",
            "create:z"
        ]
    );
    // Metadata: increasing lsns, crts = `_ts`, previousImageLSN = the replaced version's lsn.
    let lsn = |i: usize| changes[i]["metadata"]["lsn"].as_u64().unwrap_or(0);
    for i in 1..changes.len() {
        assert!(lsn(i) > lsn(i - 1), "{changes:?}");
    }
    assert_eq!(changes[0]["current"], a);
    assert_eq!(changes[0]["metadata"]["crts"], T0);
    assert!(changes[0]["metadata"].get("previousImageLSN").is_none());
    assert_eq!(changes[2]["metadata"]["previousImageLSN"], lsn(0));
    assert_eq!(changes[3]["metadata"]["previousImageLSN"], lsn(2));
    assert_eq!(changes[4]["current"], patched);
    assert_eq!(changes[4]["current"]["n"], 4);
    assert_eq!(changes[4]["metadata"]["crts"], T0 + 1);
    let del = &changes[5];
    assert_eq!(del["current"], json!({}));
    assert_eq!(del["previous"], json!({"id": "b", "pk": "p"}));
    assert_eq!(del["metadata"]["id"], "b");
    assert_eq!(del["metadata"]["partitionKey"], json!({"pk": "p"}));
    assert_eq!(del["metadata"]["previousImageLSN"], lsn(1));
    assert!(del["metadata"].get("timeToLiveExpired").is_none());
    // Latest-version mode is unchanged by the history.
    let latest = e.c.read_change_feed(&ChangeFeedOptions::default())?;
    let ids: Vec<&str> = latest
        .changes
        .iter()
        .filter_map(|v| v["id"].as_str())
        .collect();
    assert_eq!(ids, ["a", "y", "z"]);
    Ok(())
}

#[test]
fn an_expiry_while_open_is_reported_once_in_its_second() -> TestResult {
    let e = env(DefaultTtl::NeverExpire)?;
    let t = start_token(&e.c)?;
    e.c.create_item(&json!({"id": "a", "pk": "p", "ttl": 10}))?;
    e.c.create_item(&json!({"id": "keep", "pk": "p"}))?;
    let (first, t) = drain(&e.c, &t, 10)?;
    assert_eq!(shape(&first), ["create:a", "create:keep"]);
    e.clock.advance(Duration::from_millis(9_999));
    let (none, t) = drain(&e.c, &t, 10)?;
    assert!(none.is_empty(), "{none:?}");
    e.clock.advance(Duration::from_millis(1));
    // The item is expired now (`_ts + ttl <= now`), and the feed says so in that second.
    let (expired, t) = drain(&e.c, &t, 10)?;
    assert_eq!(shape(&expired), ["expire:a"]);
    let m = &expired[0]["metadata"];
    assert_eq!(m["operationType"], "delete");
    assert_eq!(m["crts"], T0 + 10);
    assert_eq!(m["lsn"], first[0]["metadata"]["lsn"]);
    assert_eq!(expired[0]["previous"], json!({"id": "a", "pk": "p"}));
    e.clock.advance(Duration::from_secs(100));
    e.db.maintain()?;
    e.db.compact_full()?;
    let (again, _) = drain(&e.c, &t, 10)?;
    assert!(again.is_empty(), "{again:?}");
    // From the beginning: create then expiry, once each.
    let (whole, _) = drain_beginning(&e.c, 1)?;
    assert_eq!(shape(&whole), ["create:a", "create:keep", "expire:a"]);
    Ok(())
}

/// Drains from the beginning (the first page with `Beginning`, then continuations).
fn drain_beginning(c: &Container, size: usize) -> Result<(Vec<Value>, String), Error> {
    let page = c.read_change_feed(&all().max_item_count(size))?;
    let (rest, token) = drain(c, &page.continuation, size)?;
    let mut out = page.changes;
    out.extend(rest);
    Ok((out, token))
}

#[test]
fn an_expiry_while_closed_is_reported_after_reopen() -> TestResult {
    let e = env(DefaultTtl::Seconds(30))?;
    let t = start_token(&e.c)?;
    e.c.create_item(&json!({"id": "a", "pk": "p"}))?;
    e.c.create_item(&json!({"id": "b", "pk": "p", "ttl": 5}))?;
    let (created, t) = drain(&e.c, &t, 10)?;
    assert_eq!(shape(&created), ["create:a", "create:b"]);
    let Env { dir, clock, db, c } = e;
    drop(c);
    drop(db);
    clock.advance(Duration::from_secs(1000));
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let c = db.container("c")?;
    let (expired, t) = drain(&c, &t, 1)?;
    assert_eq!(shape(&expired), ["expire:b", "expire:a"]);
    assert_eq!(expired[0]["metadata"]["crts"], T0 + 5);
    assert_eq!(expired[1]["metadata"]["crts"], T0 + 30);
    let (none, _) = drain(&c, &t, 10)?;
    assert!(none.is_empty());
    Ok(())
}

#[test]
fn a_default_ttl_change_reports_each_item_it_expires() -> TestResult {
    let e = env(DefaultTtl::Off)?;
    let t = start_token(&e.c)?;
    for i in 0..5 {
        e.c.create_item(&json!({"id": format!("i{i}"), "pk": "p"}))?;
    }
    e.c.create_item(&json!({"id": "forever", "pk": "p", "ttl": -1}))?;
    e.c.create_item(&json!({"id": "young", "pk": "p", "ttl": 1000}))?;
    e.clock.advance(Duration::from_secs(100));
    let (created, t) = drain(&e.c, &t, 100)?;
    assert_eq!(created.len(), 7);
    // Off → 10 s: the five inheriting items expire at once; the others do not.
    e.db.replace_container(props(DefaultTtl::Seconds(10), 60))?;
    e.c.create_item(&json!({"id": "after", "pk": "p"}))?;
    let (same_second, t) = drain(&e.c, &t, 100)?;
    // Caused by the change in this second: they come after this second's writes, so not yet.
    assert_eq!(shape(&same_second), ["create:after"]);
    e.clock.advance(Duration::from_secs(1));
    let (expired, t) = drain(&e.c, &t, 2)?;
    assert_eq!(
        shape(&expired),
        [
            "expire:i0",
            "expire:i1",
            "expire:i2",
            "expire:i3",
            "expire:i4"
        ]
    );
    for x in &expired {
        assert_eq!(x["metadata"]["crts"], T0 + 100);
    }
    // Turning TTL off again revives nothing and reports nothing more.
    e.db.replace_container(props(DefaultTtl::Off, 60))?;
    e.clock.advance(Duration::from_secs(3000));
    let (none, _) = drain(&e.c, &t, 100)?;
    assert!(none.is_empty(), "{none:?}");
    Ok(())
}

#[test]
fn a_write_in_the_second_of_a_default_change_comes_after_the_expiry_it_found() -> TestResult {
    let e = env(DefaultTtl::Off)?;
    let t = start_token(&e.c)?;
    e.c.create_item(&json!({"id": "a", "pk": "p"}))?;
    e.c.create_item(&json!({"id": "b", "pk": "p"}))?;
    e.clock.advance(Duration::from_secs(100));
    e.db.replace_container(props(DefaultTtl::Seconds(10), 60))?;
    // Same second: `a` is expired (the change did it), so this is a create after its expiry;
    // `b`'s expiry, caused by the change, comes after this second's writes.
    e.c.create_item(&json!({"id": "a", "pk": "p", "n": 2}))?;
    e.clock.advance(Duration::from_secs(1));
    let (changes, _) = drain(&e.c, &t, 1)?;
    assert_eq!(
        shape(&changes),
        ["create:a", "create:b", "expire:a", "create:a", "expire:b"]
    );
    assert_eq!(changes[2]["metadata"]["crts"], T0 + 100);
    assert_eq!(changes[4]["metadata"]["crts"], T0 + 100);
    Ok(())
}

#[test]
fn a_write_that_finds_the_item_expired_comes_after_its_expiry() -> TestResult {
    let e = env(DefaultTtl::NeverExpire)?;
    let t = start_token(&e.c)?;
    e.c.create_item(&json!({"id": "a", "pk": "p", "ttl": 3}))?;
    e.clock.advance(Duration::from_secs(3));
    // Nobody read in between: the create over the expired item is a create, after the expiry.
    e.c.create_item(&json!({"id": "a", "pk": "p", "ttl": 3}))?;
    e.clock.advance(Duration::from_secs(4));
    e.c.upsert_item(&json!({"id": "a", "pk": "p"}))?;
    let (changes, _) = drain(&e.c, &t, 1)?;
    assert_eq!(
        shape(&changes),
        ["create:a", "expire:a", "create:a", "expire:a", "create:a"]
    );
    assert_eq!(changes[1]["metadata"]["crts"], T0 + 3);
    assert_eq!(changes[3]["metadata"]["crts"], T0 + 6);
    Ok(())
}

#[test]
fn expiries_survive_compaction_purging_the_items() -> TestResult {
    let e = env(DefaultTtl::Seconds(5))?;
    let t = start_token(&e.c)?;
    for i in 0..300 {
        e.c.create_item(&json!({"id": format!("i{i:03}"), "pk": "p", "pad": "x".repeat(100)}))?;
    }
    let (created, t) = drain(&e.c, &t, 1000)?;
    assert_eq!(created.len(), 300);
    e.clock.advance(Duration::from_secs(10));
    e.db.maintain()?;
    e.db.compact_full()?;
    assert_eq!(e.db.stats().expired_items, 0, "purged");
    let (expired, t) = drain(&e.c, &t, 64)?;
    assert_eq!(expired.len(), 300);
    assert!(shape(&expired).iter().all(|s| s.starts_with("expire:")));
    let (none, _) = drain(&e.c, &t, 64)?;
    assert!(none.is_empty());
    Ok(())
}

#[test]
fn continuations_resume_exactly_across_reopen_and_compaction() -> TestResult {
    let e = env(DefaultTtl::Seconds(50))?;
    let mut token = start_token(&e.c)?;
    let mut seen = Vec::new();
    let Env {
        dir,
        clock,
        mut db,
        mut c,
    } = e;
    for round in 0..6 {
        for i in 0..40 {
            let id = format!("i{:02}", (round * 7 + i) % 50);
            c.upsert_item(&json!({"id": id, "pk": "p", "round": round, "pad": "y".repeat(200)}))?;
            if i % 9 == 0 {
                let _ = c.delete_item("p", &format!("i{:02}", (i + round) % 50));
            }
        }
        clock.advance(Duration::from_secs(20));
        let page = c.read_change_feed(&from(&token).max_item_count(17))?;
        seen.extend(page.changes);
        token = page.continuation;
        drop(c);
        drop(db);
        db = Database::open_with(dir.path(), opts(&clock))?;
        db.compact_full()?;
        c = db.container("c")?;
    }
    clock.advance(Duration::from_secs(100));
    let (rest, _) = drain(&c, &token, 13)?;
    seen.extend(rest);
    // The same history read in one go from the start (retention is an hour) is identical.
    let (whole, _) = drain_beginning(&c, 1000)?;
    assert_eq!(seen, whole);
    let lsns: Vec<(u64, u64)> = whole
        .iter()
        .map(|v| {
            (
                v["metadata"]["crts"].as_u64().unwrap_or(0),
                v["metadata"]["lsn"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        lsns.windows(2).all(|w| w[0].0 <= w[1].0),
        "crts never decreases"
    );
    assert!(shape(&whole).iter().any(|s| s.starts_with("expire:")));
    assert!(shape(&whole).iter().any(|s| s.starts_with("delete:")));
    Ok(())
}

#[test]
fn a_position_older_than_the_retention_window_is_gone() -> TestResult {
    let e = env(DefaultTtl::Off)?;
    // One minute of retention.
    e.db.replace_container(props(DefaultTtl::Off, 1))?;
    let c = e.db.container("c")?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    let page = c.read_change_feed(&all())?;
    assert_eq!(shape(&page.changes), ["create:a"]);
    e.clock.advance(Duration::from_secs(59));
    assert!(c.read_change_feed(&from(&page.continuation)).is_ok());
    e.clock.advance(Duration::from_secs(1));
    let err = c
        .read_change_feed(&from(&page.continuation))
        .err()
        .ok_or("no error")?;
    assert!(matches!(err, Error::Gone(_)), "{err}");
    assert_eq!(err.status_code(), 410);
    let old = all().start(ChangeFeedStart::Time(T0));
    assert_eq!(
        c.read_change_feed(&old).err().map(|e| e.status_code()),
        Some(410)
    );
    // The beginning is what the window still holds: the create's history has aged out.
    let fresh = c.read_change_feed(&all())?;
    assert!(fresh.changes.is_empty(), "{:?}", fresh.changes);
    // The latest-version feed is not limited by the window.
    assert_eq!(
        c.read_change_feed(&ChangeFeedOptions::default())?
            .changes
            .len(),
        1
    );
    Ok(())
}

#[test]
fn bad_input_is_a_typed_error() -> TestResult {
    let e = env(DefaultTtl::Off)?;
    let token = start_token(&e.c)?;
    let latest =
        e.c.read_change_feed(&ChangeFeedOptions::default())?
            .continuation;
    let mut damaged: Value = serde_json::from_str(&token)?;
    damaged["l"] = json!(12345);
    for t in [
        "",
        "{}",
        "[1]",
        "not json",
        latest.as_str(),
        &damaged.to_string(),
        r#"{"v":1,"m":"all","s":1,"c":300,"l":1,"b":1,"h":1}"#,
    ] {
        assert!(
            matches!(e.c.read_change_feed(&from(t)), Err(Error::BadRequest(_))),
            "{t}"
        );
    }
    // An all-versions token in latest-version mode.
    let as_latest =
        ChangeFeedOptions::default().start(ChangeFeedStart::Continuation(token.clone()));
    assert!(matches!(
        e.c.read_change_feed(&as_latest),
        Err(Error::BadRequest(_))
    ));
    // Another partition's scope.
    assert!(matches!(
        e.c.read_change_feed(&from(&token).partition_key("p")),
        Err(Error::BadRequest(_))
    ));
    // A container without retention: a clear 400, also for the push API.
    let plain =
        e.db.create_container(ContainerProperties::new("plain", "/pk"))?;
    let err = plain.read_change_feed(&all()).err().ok_or("no error")?;
    assert_eq!(err.status_code(), 400);
    assert!(err.to_string().contains("retention"), "{err}");
    assert!(plain.change_feed_iter(&all()).is_err());
    // Retention values: JSON and builder.
    for bad in [
        json!(-1),
        json!("10"),
        json!(1.5),
        json!(35_791_395),
        json!(null),
    ] {
        let v = json!({"id": "r", "partitionKey": {"paths": ["/pk"]},
            "changeFeedPolicy": {"retentionDuration": bad}});
        assert_eq!(
            ContainerProperties::from_json_value(&v)
                .err()
                .map(|e| e.status_code()),
            Some(400),
            "{v}"
        );
    }
    let v = json!({"id": "r", "partitionKey": {"paths": ["/pk"]}, "changeFeedPolicy": 5});
    assert!(ContainerProperties::from_json_value(&v).is_err());
    let v = json!({"id": "r", "partitionKey": {"paths": ["/pk"]},
        "changeFeedPolicy": {"retentionDuration": 0}});
    assert_eq!(
        ContainerProperties::from_json_value(&v)?.change_feed_retention_minutes,
        None
    );
    let p = ContainerProperties::new("r", "/pk").with_change_feed_retention_minutes(10);
    assert_eq!(
        p.to_json_value()["changeFeedPolicy"]["retentionDuration"],
        10
    );
    assert_eq!(ContainerProperties::from_json_value(&p.to_json_value())?, p);
    let mut too_long = p.clone();
    too_long.change_feed_retention_minutes = Some(u32::MAX);
    assert_eq!(
        e.db.create_container(too_long)
            .err()
            .map(|e| e.status_code()),
        Some(400)
    );
    Ok(())
}

#[test]
fn partition_scope_and_retention_on_and_off_for_every_handle() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    c.create_item(&json!({"id": "before", "pk": "p"}))?;
    assert!(c.read_change_feed(&all()).is_err());
    // Turned on through another handle: this handle's writes keep history from now on.
    db.replace_container(props(DefaultTtl::Off, 10))?;
    let t = start_token(&c)?;
    c.upsert_item(&json!({"id": "before", "pk": "p", "n": 1}))?;
    c.create_item(&json!({"id": "q1", "pk": "q"}))?;
    c.delete_item("p", "before")?;
    let (changes, _) = drain(&c, &t, 10)?;
    assert_eq!(
        shape(&changes),
        ["replace:before", "create:q1", "delete:before"]
    );
    let only_q = c.read_change_feed(&all().partition_key("q"))?;
    assert_eq!(shape(&only_q.changes), ["create:q1"]);
    // Reopen keeps the setting; turning it off drops the history keyspace.
    drop(c);
    drop(db);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let c = db.container("c")?;
    assert_eq!(c.properties().change_feed_retention_minutes, Some(10));
    assert_eq!(drain_beginning(&c, 10)?.0.len(), 3);
    db.replace_container(ContainerProperties::new("c", "/pk"))?;
    assert!(c.read_change_feed(&all()).is_err());
    assert!(db.store().keyspace("__feed:c").is_err());
    c.create_item(&json!({"id": "after", "pk": "p"}))?;
    // On again: a fresh history, nothing from before.
    db.replace_container(props(DefaultTtl::Off, 10))?;
    assert!(drain_beginning(&c, 10)?.0.is_empty());
    db.delete_container("c")?;
    assert!(db.store().keyspace("__feed:c").is_err());
    Ok(())
}

#[test]
fn anchors_of_items_expired_beyond_the_window_are_forgotten() -> TestResult {
    let e = env(DefaultTtl::Seconds(5))?;
    e.db.replace_container(props(DefaultTtl::Seconds(5), 1))?;
    let c = e.db.container("c")?;
    for i in 0..20 {
        c.create_item(&json!({"id": format!("i{i}"), "pk": "p"}))?;
    }
    let hist = e.db.store().keyspace("__feed:c")?;
    assert_eq!(hist.len()?, 40, "a change record and an anchor per item");
    e.clock.advance(Duration::from_secs(5 + 60));
    let page = c.read_change_feed(&all())?;
    assert!(page.changes.is_empty(), "{:?}", page.changes);
    assert_eq!(hist.len()?, 0, "change records aged out, anchors forgotten");
    Ok(())
}

#[test]
fn the_push_api_wakes_for_writes_and_expiries() -> TestResult {
    let e = env(DefaultTtl::NeverExpire)?;
    let it = e.c.change_feed_iter(&all().start(ChangeFeedStart::Now))?;
    let rx = it.into_receiver(16);
    e.c.create_item(&json!({"id": "a", "pk": "p", "ttl": 2}))?;
    let got = rx.recv_timeout(Duration::from_secs(10))??;
    assert_eq!(shape(&[got]), ["create:a"]);
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    e.clock.advance(Duration::from_secs(2));
    let got = rx.recv_timeout(Duration::from_secs(10))??;
    assert_eq!(shape(&[got]), ["expire:a"]);
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    // The iterator's continuation resumes after what it returned.
    let mut it = e.c.change_feed_iter(&all().start(ChangeFeedStart::Now))?;
    e.c.create_item(&json!({"id": "b", "pk": "p"}))?;
    e.c.create_item(&json!({"id": "c", "pk": "p"}))?;
    let first = it.next_timeout(Duration::from_secs(5))?.ok_or("none")?;
    assert_eq!(shape(&[first]), ["create:b"]);
    let (rest, _) = drain(&e.c, &it.continuation(), 10)?;
    assert_eq!(shape(&rest), ["create:c"]);
    Ok(())
}

#[test]
fn real_clock_expiry_reaches_the_push_api_within_a_second() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let c = db.create_container(
        ContainerProperties::new("c", "/pk")
            .with_default_ttl(DefaultTtl::NeverExpire)
            .with_change_feed_retention_minutes(5),
    )?;
    let rx = c
        .change_feed_iter(&all().start(ChangeFeedStart::Now))?
        .into_receiver(16);
    let stored = c.create_item(&json!({"id": "a", "pk": "p", "ttl": 1}))?;
    let created = rx.recv_timeout(Duration::from_secs(5))??;
    assert_eq!(shape(&[created]), ["create:a"]);
    let expired = rx.recv_timeout(Duration::from_secs(5))??;
    let now_ms = ebbdb::clock::SystemClock.now_unix_millis();
    assert_eq!(shape(&[expired]), ["expire:a"]);
    let instant_ms = (stored["_ts"].as_u64().ok_or("ts")? + 1) * 1000;
    assert!(now_ms >= instant_ms, "delivered before the expiry instant");
    // Generous for a shared machine; the benchmark measures the real lag.
    assert!(now_ms - instant_ms < 1000, "lag {} ms", now_ms - instant_ms);
    Ok(())
}

#[test]
fn a_crash_at_every_byte_of_a_write_keeps_the_item_and_its_history_together() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let (from_at, to_at);
    {
        let db = Database::open_with(
            dir.path(),
            Options::default()
                .clock(clock.clone())
                .sync(SyncPolicy::Always),
        )?;
        let c = db.create_container(props(DefaultTtl::Off, 60))?;
        c.create_item(&json!({"id": "a", "pk": "p", "n": 1}))?;
        from_at = db.stats().segment_bytes;
        c.upsert_item(&json!({"id": "a", "pk": "p", "n": 2}))?;
        to_at = db.stats().segment_bytes;
    }
    let seg = segments(dir.path())?.pop().ok_or("no segment")?;
    let full = std::fs::read(&seg)?;
    let mut seen = [0usize; 2];
    for cut in from_at..=to_at {
        let work = tempfile::tempdir()?;
        copy_dir(dir.path(), work.path())?;
        std::fs::write(
            work.path().join(seg.file_name().ok_or("name")?),
            full.get(..cut as usize).ok_or("cut")?,
        )?;
        std::fs::remove_file(work.path().join("CLOCK"))?;
        let db = Database::open_with(work.path(), Options::default().clock(clock.clone()))?;
        let c = db.container("c")?;
        let item: Value = c.read_item("p", "a")?;
        let feed = drain_beginning(&c, 10)?.0;
        if cut == to_at {
            assert_eq!(item["n"], 2);
            assert_eq!(shape(&feed), ["create:a", "replace:a"], "cut at the end");
            seen[1] += 1;
        } else {
            assert_eq!(item["n"], 1, "cut at {cut}");
            assert_eq!(
                shape(&feed),
                ["create:a"],
                "cut at {cut}: history without its item"
            );
            seen[0] += 1;
        }
    }
    assert!(seen[0] > 100, "{seen:?}");
    Ok(())
}

mod model {
    //! Random writes, deletes, clock advances, compaction, reopen and reads against a
    //! reference feed: every change and every expiry once, in the order DESIGN.md §16.2 states.

    use std::collections::BTreeMap;
    use std::time::Duration;

    use ebbdb::clock::ManualClock;
    use ebbdb::{
        ChangeFeedMode, ChangeFeedOptions, ChangeFeedStart, Container, ContainerProperties,
        Database, DefaultTtl, Options, PatchOp, SyncPolicy,
    };
    use proptest::prelude::*;
    use serde_json::{json, Value};

    const T0: u64 = 1_700_000_000;

    #[derive(Debug, Clone)]
    enum Step {
        Create(u8, Option<u8>),
        Upsert(u8, Option<u8>),
        Replace(u8),
        Patch(u8),
        Delete(u8),
        Advance(u16),
        Read(u8),
        Compact,
        Reopen,
    }

    fn ttl() -> impl Strategy<Value = Option<u8>> {
        prop_oneof![2 => Just(None), 2 => (1u8..6).prop_map(Some), 1 => Just(Some(0))]
    }

    fn step() -> impl Strategy<Value = Step> {
        let id = 0u8..4;
        prop_oneof![
            3 => (id.clone(), ttl()).prop_map(|(i, t)| Step::Create(i, t)),
            3 => (id.clone(), ttl()).prop_map(|(i, t)| Step::Upsert(i, t)),
            1 => id.clone().prop_map(Step::Replace),
            1 => id.clone().prop_map(Step::Patch),
            2 => id.prop_map(Step::Delete),
            3 => (0u16..2500).prop_map(Step::Advance),
            2 => (1u8..5).prop_map(Step::Read),
            1 => Just(Step::Compact),
            1 => Just(Step::Reopen),
        ]
    }

    fn item(id: u8, t: Option<u8>) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("id".into(), json!(id.to_string()));
        m.insert("pk".into(), json!("p"));
        if t.is_some() {
            m.insert("ttl".into(), ttl_json(t));
        }
        m
    }

    /// The item's `ttl` property: `Some(0)` stands for `-1`.
    fn ttl_json(t: Option<u8>) -> Value {
        match t {
            None => Value::Null,
            Some(0) => json!(-1),
            Some(n) => json!(n),
        }
    }

    /// Container default: 4 s. A version's expiry second.
    fn deadline(ts: u64, t: Option<u8>) -> Option<u64> {
        match t {
            None => Some(ts + 4),
            Some(0) => None,
            Some(n) => Some(ts + u64::from(n)),
        }
    }

    /// The reference: item → (its newest version's model number, `_ts`, deadline), and the
    /// feed as (order key, description), order key = (second, class, number).
    #[derive(Default)]
    struct Reference {
        items: BTreeMap<u8, (u64, u64, Option<u64>)>,
        feed: Vec<((u64, u8, u64), String)>,
        n: u64,
    }

    impl Reference {
        fn live(&self, id: u8, now: u64) -> bool {
            self.items
                .get(&id)
                .is_some_and(|(_, _, d)| d.is_none_or(|d| d > now))
        }

        fn write(&mut self, id: u8, now: u64, t: Option<u8>, op: &str) {
            if let Some((n, _, Some(d))) = self.items.get(&id) {
                if *d <= now {
                    let n = *n;
                    self.feed.push(((*d, 0, n), format!("expire:{id}")));
                }
            }
            self.n += 1;
            self.feed.push(((now, 1, self.n), format!("{op}:{id}")));
            self.items.insert(id, (self.n, now, deadline(now, t)));
        }

        fn delete(&mut self, id: u8, now: u64) {
            self.n += 1;
            self.feed.push(((now, 1, self.n), format!("delete:{id}")));
            self.items.remove(&id);
        }

        /// Every change up to the end of time, in order.
        fn complete(mut self) -> Vec<String> {
            for (id, (n, _, d)) in &self.items {
                if let Some(d) = d {
                    self.feed.push(((*d, 0, *n), format!("expire:{id}")));
                }
            }
            self.feed.sort_by_key(|(k, _)| *k);
            self.feed.into_iter().map(|(_, s)| s).collect()
        }
    }

    fn shape(v: &Value) -> String {
        let m = &v["metadata"];
        let id = v["current"]["id"]
            .as_str()
            .or_else(|| m["id"].as_str())
            .unwrap_or("?");
        let op = if m["timeToLiveExpired"] == true {
            "expire"
        } else {
            m["operationType"].as_str().unwrap_or("?")
        };
        format!("{op}:{id}")
    }

    fn opts(clock: &ManualClock) -> Options {
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Never)
            .segment_size(8 * 1024)
    }

    fn read(
        c: &Container,
        token: &mut String,
        size: usize,
        got: &mut Vec<String>,
    ) -> Result<usize, ebbdb::Error> {
        let page = c.read_change_feed(
            &ChangeFeedOptions::default()
                .mode(ChangeFeedMode::AllVersionsAndDeletes)
                .start(ChangeFeedStart::Continuation(token.clone()))
                .max_item_count(size),
        )?;
        *token = page.continuation;
        got.extend(page.changes.iter().map(shape));
        Ok(page.changes.len())
    }

    fn run(steps: &[Step]) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let clock = ManualClock::at_unix_secs(T0);
        let mut db = Database::open_with(dir.path(), opts(&clock))?;
        let mut c = db.create_container(
            ContainerProperties::new("c", "/pk")
                .with_default_ttl(DefaultTtl::Seconds(4))
                .with_change_feed_retention_minutes(1000),
        )?;
        let mut token = c
            .read_change_feed(
                &ChangeFeedOptions::default()
                    .mode(ChangeFeedMode::AllVersionsAndDeletes)
                    .start(ChangeFeedStart::Now),
            )?
            .continuation;
        let mut reference = Reference::default();
        let mut got = Vec::new();
        let mut now_ms = T0 * 1000;
        for s in steps {
            let now = now_ms / 1000;
            match s {
                Step::Create(id, t) => {
                    let r = c.create_item(&item(*id, *t));
                    let live = reference.live(*id, now);
                    assert_eq!(r.is_ok(), !live, "create {id}");
                    if !live {
                        reference.write(*id, now, *t, "create");
                    }
                }
                Step::Upsert(id, t) => {
                    c.upsert_item(&item(*id, *t))?;
                    let op = if reference.live(*id, now) {
                        "replace"
                    } else {
                        "create"
                    };
                    reference.write(*id, now, *t, op);
                }
                Step::Replace(id) => {
                    let r = c.replace_item(
                        "p",
                        &id.to_string(),
                        &json!({"id": id.to_string(), "pk": "p"}),
                    );
                    let live = reference.live(*id, now);
                    assert_eq!(r.is_ok(), live, "replace {id}");
                    if live {
                        reference.write(*id, now, None, "replace");
                    }
                }
                Step::Patch(id) => {
                    let r = c.patch_item("p", &id.to_string(), &[PatchOp::incr("/n", 1)]);
                    let live = reference.live(*id, now);
                    assert_eq!(r.is_ok(), live, "patch {id}");
                    if live {
                        // A patch keeps the stored `ttl` property: the same own TTL.
                        let t = reference_ttl_of(&c, *id).ok_or("patched item unreadable")?;
                        reference.write(*id, now, t, "replace");
                    }
                }
                Step::Delete(id) => {
                    let r = c.delete_item("p", &id.to_string());
                    let live = reference.live(*id, now);
                    assert_eq!(r.is_ok(), live, "delete {id}");
                    if live {
                        reference.delete(*id, now);
                    }
                }
                Step::Advance(ms) => {
                    clock.advance(Duration::from_millis(u64::from(*ms)));
                    now_ms += u64::from(*ms);
                }
                Step::Read(size) => {
                    read(&c, &mut token, usize::from(*size), &mut got)?;
                }
                Step::Compact => {
                    db.maintain()?;
                    db.compact_full()?;
                }
                Step::Reopen => {
                    drop(c);
                    drop(db);
                    db = Database::open_with(dir.path(), opts(&clock))?;
                    c = db.container("c")?;
                }
            }
        }
        clock.advance(Duration::from_secs(60));
        while read(&c, &mut token, 7, &mut got)? > 0 {}
        assert_eq!(got, reference.complete());
        Ok(())
    }

    /// The own TTL a patched item keeps, read from the item itself.
    fn reference_ttl_of(c: &Container, id: u8) -> Option<Option<u8>> {
        let v: Value = c.read_item("p", &id.to_string()).ok()?;
        Some(match v.get("ttl") {
            None => None,
            Some(t) if t == -1 => Some(0),
            Some(t) => t.as_u64().and_then(|n| u8::try_from(n).ok()),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn the_feed_equals_the_reference(steps in proptest::collection::vec(step(), 1..60)) {
            run(&steps).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
}
