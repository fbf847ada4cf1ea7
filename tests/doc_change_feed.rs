//! `docs/contract.md` §8, change feed (latest-version mode): the Cosmos SDK scenarios, start
//! positions, partition scope, deletes and expiries left out, continuations across reopen and
//! compaction, a model test against a reference feed, concurrent writers, and the push API.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ebbdb::clock::{Clock, ManualClock};
use ebbdb::{
    ChangeFeedMode, ChangeFeedOptions, ChangeFeedStart, Container, ContainerProperties, Database,
    DefaultTtl, Error, Options, PatchOp, SyncPolicy, TransactionalBatch,
};
use proptest::prelude::*;
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

struct Env {
    dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
    c: Container,
}

fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
        .segment_size(16 * 1024)
}

fn env_ttl(ttl: DefaultTtl) -> Result<Env, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk").with_default_ttl(ttl))?;
    Ok(Env { dir, clock, db, c })
}

fn env() -> Result<Env, Box<dyn std::error::Error>> {
    env_ttl(DefaultTtl::Off)
}

fn from(token: &str) -> ChangeFeedOptions {
    ChangeFeedOptions::default().start(ChangeFeedStart::Continuation(token.to_string()))
}

fn ids(changes: &[Value]) -> Vec<String> {
    changes
        .iter()
        .map(|v| v["id"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Reads pages of `size` from `token` until one is empty; returns the changes and the final
/// continuation.
fn drain(c: &Container, token: &str, size: usize) -> Result<(Vec<Value>, String), Error> {
    let mut all = Vec::new();
    let mut token = token.to_string();
    loop {
        let page = c.read_change_feed(&from(&token).max_item_count(size))?;
        assert!(page.changes.len() <= size);
        token = page.continuation;
        if page.changes.is_empty() {
            return Ok((all, token));
        }
        all.extend(page.changes);
    }
}

#[test]
fn sdk_scenario_beginning_continuations_and_page_sizes() -> TestResult {
    let e = env()?;
    // From the beginning on an empty container: nothing, and a continuation.
    let first =
        e.c.read_change_feed(&ChangeFeedOptions::default().start(ChangeFeedStart::Beginning))?;
    assert!(first.changes.is_empty());
    assert!(!first.continuation.is_empty());
    // Create one: [it].
    e.c.create_item(&json!({"id": "a", "pk": "p"}))?;
    let one = e.c.read_change_feed(&from(&first.continuation))?;
    assert_eq!(ids(&one.changes), ["a"]);
    // Two more: from the saved continuation, page size 1 and 100, both in order.
    e.c.create_item(&json!({"id": "b", "pk": "p"}))?;
    e.c.create_item(&json!({"id": "c", "pk": "q"}))?;
    let p1 =
        e.c.read_change_feed(&from(&one.continuation).max_item_count(1))?;
    assert_eq!(ids(&p1.changes), ["b"]);
    let p2 =
        e.c.read_change_feed(&from(&p1.continuation).max_item_count(1))?;
    assert_eq!(ids(&p2.changes), ["c"]);
    let big =
        e.c.read_change_feed(&from(&one.continuation).max_item_count(100))?;
    assert_eq!(ids(&big.changes), ["b", "c"]);
    // From the final continuation: nothing.
    assert!(e
        .c
        .read_change_feed(&from(&big.continuation))?
        .changes
        .is_empty());
    assert!(e
        .c
        .read_change_feed(&from(&p2.continuation))?
        .changes
        .is_empty());
    // Items come as stored, with their position.
    let stored: Value = e.c.read_item("p", "b")?;
    let got = &big.changes[0];
    assert_eq!(got["_etag"], stored["_etag"]);
    assert!(got["_lsn"].as_u64() < big.changes[1]["_lsn"].as_u64());
    Ok(())
}

#[test]
fn a_future_start_time_gives_nothing_until_then() -> TestResult {
    let e = env()?;
    e.c.create_item(&json!({"id": "a", "pk": "p"}))?;
    let future = ChangeFeedOptions::default().start(ChangeFeedStart::Time(T0 + 60));
    let page = e.c.read_change_feed(&future)?;
    assert!(page.changes.is_empty());
    e.c.create_item(&json!({"id": "b", "pk": "p"}))?;
    assert!(e
        .c
        .read_change_feed(&from(&page.continuation))?
        .changes
        .is_empty());
    e.clock.advance(Duration::from_secs(60));
    e.c.upsert_item(&json!({"id": "a", "pk": "p", "v": 2}))?;
    assert_eq!(
        ids(&e.c.read_change_feed(&from(&page.continuation))?.changes),
        ["a"]
    );
    Ok(())
}

#[test]
fn start_time_keeps_items_written_since() -> TestResult {
    let e = env()?;
    e.c.create_item(&json!({"id": "old", "pk": "p"}))?;
    e.clock.advance(Duration::from_secs(10));
    e.c.create_item(&json!({"id": "new", "pk": "p"}))?;
    let page =
        e.c.read_change_feed(&ChangeFeedOptions::default().start(ChangeFeedStart::Time(T0 + 10)))?;
    assert_eq!(ids(&page.changes), ["new"]);
    Ok(())
}

#[test]
fn start_now_skips_what_exists() -> TestResult {
    let e = env()?;
    e.c.create_item(&json!({"id": "before", "pk": "p"}))?;
    let now =
        e.c.read_change_feed(&ChangeFeedOptions::default().start(ChangeFeedStart::Now))?;
    assert!(now.changes.is_empty());
    e.c.create_item(&json!({"id": "after", "pk": "p"}))?;
    e.c.upsert_item(&json!({"id": "before", "pk": "p", "v": 2}))?;
    assert_eq!(
        ids(&e.c.read_change_feed(&from(&now.continuation))?.changes),
        ["after", "before"]
    );
    Ok(())
}

#[test]
fn latest_version_once_in_order_of_last_write() -> TestResult {
    let e = env()?;
    for id in ["a", "b", "c"] {
        e.c.create_item(&json!({"id": id, "pk": "p", "v": 1}))?;
    }
    e.c.patch_item("p", "a", &[PatchOp::set("/v", 2)])?;
    e.c.patch_item("p", "a", &[PatchOp::set("/v", 3)])?;
    e.c.replace_item("p", "b", &json!({"id": "b", "pk": "p", "v": 2}))?;
    let (all, token) = drain(
        &e.c,
        &e.c.read_change_feed(&ChangeFeedOptions::default().max_item_count(1))?
            .continuation,
        2,
    )?;
    // The first page (size 1) returned "c"; then a (v3) and b (v2), once each.
    assert_eq!(ids(&all), ["a", "b"]);
    assert_eq!(all[0]["v"], 3);
    e.c.upsert_item(&json!({"id": "c", "pk": "p", "v": 9}))?;
    let (again, _) = drain(&e.c, &token, 10)?;
    assert_eq!(ids(&again), ["c"]);
    Ok(())
}

#[test]
fn deletes_and_expiries_do_not_appear() -> TestResult {
    let e = env_ttl(DefaultTtl::Seconds(10))?;
    let start =
        e.c.read_change_feed(&ChangeFeedOptions::default())?
            .continuation;
    e.c.create_item(&json!({"id": "gone", "pk": "p"}))?;
    e.c.create_item(&json!({"id": "short", "pk": "p", "ttl": 2}))?;
    e.c.create_item(&json!({"id": "stays", "pk": "p"}))?;
    e.c.delete_item("p", "gone")?;
    e.clock.advance(Duration::from_secs(2));
    assert_eq!(ids(&drain(&e.c, &start, 10)?.0), ["stays"]);
    e.clock.advance(Duration::from_secs(8));
    assert!(drain(&e.c, &start, 10)?.0.is_empty());
    Ok(())
}

#[test]
fn a_batch_appears_whole_in_its_order() -> TestResult {
    let e = env()?;
    let start =
        e.c.read_change_feed(&ChangeFeedOptions::default())?
            .continuation;
    let mut b = TransactionalBatch::new("p");
    b.create_item(&json!({"id": "x", "pk": "p"}))
        .create_item(&json!({"id": "y", "pk": "p"}))
        .patch_item("x", &[PatchOp::set("/v", 1)]);
    assert!(e.c.execute_batch(&b)?.is_success());
    let got = drain(&e.c, &start, 1)?.0;
    assert_eq!(ids(&got), ["y", "x"]);
    assert_eq!(got[1]["v"], 1);
    Ok(())
}

#[test]
fn per_partition_key_feeds_and_their_continuations() -> TestResult {
    let e = env()?;
    for (id, pk) in [("1", "p"), ("2", "q"), ("3", "p")] {
        e.c.create_item(&json!({"id": id, "pk": pk}))?;
    }
    let p =
        e.c.read_change_feed(&ChangeFeedOptions::default().partition_key("p"))?;
    assert_eq!(ids(&p.changes), ["1", "3"]);
    e.c.create_item(&json!({"id": "4", "pk": "q"}))?;
    e.c.create_item(&json!({"id": "5", "pk": "p"}))?;
    let next =
        e.c.read_change_feed(&from(&p.continuation).partition_key("p"))?;
    assert_eq!(ids(&next.changes), ["5"]);
    // A continuation is tied to its scope.
    for wrong in [
        from(&p.continuation),
        from(&p.continuation).partition_key("q"),
    ] {
        assert!(matches!(
            e.c.read_change_feed(&wrong),
            Err(Error::BadRequest(_))
        ));
    }
    Ok(())
}

#[test]
fn bad_continuations_and_the_unbuilt_mode_are_400() -> TestResult {
    let e = env()?;
    let token =
        e.c.read_change_feed(&ChangeFeedOptions::default())?
            .continuation;
    let damaged = token.replace("\"p\":", "\"p\":1");
    for t in ["", "{}", "not json", damaged.as_str()] {
        assert!(
            matches!(e.c.read_change_feed(&from(t)), Err(Error::BadRequest(_))),
            "{t}"
        );
    }
    let other =
        e.db.create_container(ContainerProperties::new("other", "/pk"))?;
    assert!(matches!(
        other.read_change_feed(&from(&token)),
        Err(Error::BadRequest(_))
    ));
    let avad = ChangeFeedOptions::default().mode(ChangeFeedMode::AllVersionsAndDeletes);
    assert!(matches!(
        e.c.read_change_feed(&avad),
        Err(Error::BadRequest(_))
    ));
    e.db.delete_container("c")?;
    assert!(matches!(
        e.c.read_change_feed(&ChangeFeedOptions::default()),
        Err(Error::NotFound(_))
    ));
    Ok(())
}

#[test]
fn continuation_resumes_exactly_across_reopen_and_compaction() -> TestResult {
    let e = env()?;
    for i in 0..200 {
        e.c.create_item(&json!({"id": format!("i{i:03}"), "pk": "p", "pad": "x".repeat(100)}))?;
    }
    let page =
        e.c.read_change_feed(&ChangeFeedOptions::default().max_item_count(50))?;
    assert_eq!(
        ids(&page.changes),
        (0..50).map(|i| format!("i{i:03}")).collect::<Vec<_>>()
    );
    // Rewrite some read and some unread items, delete others, then compact and reopen.
    for i in (0..200).step_by(7) {
        e.c.upsert_item(&json!({"id": format!("i{i:03}"), "pk": "p", "v": 2}))?;
    }
    for i in (3..200).step_by(11) {
        let _ = e.c.delete_item("p", &format!("i{i:03}"));
    }
    e.db.compact_full()?;
    let path = e.dir.path().to_path_buf();
    let clock = e.clock.clone();
    drop(e.c);
    drop(e.db);
    let db = Database::open_with(&path, opts(&clock))?;
    let c = db.container("c")?;
    let (rest, _) = drain(&c, &page.continuation, 33)?;
    // Expected: the unread items not rewritten nor deleted, in creation order, then the
    // rewritten ones still live, in rewrite order.
    let deleted = |i: usize| i >= 3 && (i - 3).is_multiple_of(11);
    let mut want: Vec<String> = (50..200)
        .filter(|i: &usize| !i.is_multiple_of(7) && !deleted(*i))
        .map(|i| format!("i{i:03}"))
        .collect();
    want.extend(
        (0..200)
            .step_by(7)
            .filter(|i| !deleted(*i))
            .map(|i| format!("i{i:03}")),
    );
    assert_eq!(ids(&rest), want);
    Ok(())
}

#[test]
fn continuation_resumes_after_a_crash() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let durable = || {
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Always)
    };
    let token;
    {
        let db = Database::open_with(dir.path(), durable())?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        c.create_item(&json!({"id": "a", "pk": "p"}))?;
        token = c
            .read_change_feed(&ChangeFeedOptions::default())?
            .continuation;
        c.create_item(&json!({"id": "b", "pk": "p"}))?;
        c.upsert_item(&json!({"id": "a", "pk": "p", "v": 2}))?;
        db.store().simulate_crash();
    }
    let db = Database::open_with(dir.path(), durable())?;
    let c = db.container("c")?;
    c.create_item(&json!({"id": "c", "pk": "p"}))?;
    assert_eq!(ids(&drain(&c, &token, 2)?.0), ["b", "a", "c"]);
    Ok(())
}

#[test]
fn concurrent_writers_every_final_version_once_in_lsn_order() -> TestResult {
    let e = env()?;
    let mut token =
        e.c.read_change_feed(&ChangeFeedOptions::default())?
            .continuation;
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let c = e.c.clone();
            std::thread::spawn(move || -> ebbdb::Result<()> {
                for n in 0..300 {
                    c.upsert_item(
                        &json!({"id": format!("k{}", n % 40), "pk": "p", "w": w, "n": n}),
                    )?;
                }
                Ok(())
            })
        })
        .collect();
    let mut seen: Vec<(String, String)> = Vec::new(); // (id, etag)
    let mut last_lsn = 0;
    let mut collect = |changes: Vec<Value>| {
        for v in changes {
            let lsn = v["_lsn"].as_u64().unwrap_or(0);
            assert!(lsn > last_lsn, "lsn {lsn} after {last_lsn}");
            last_lsn = lsn;
            seen.push((
                v["id"].as_str().unwrap_or("").into(),
                v["_etag"].as_str().unwrap_or("").into(),
            ));
        }
    };
    while writers.iter().any(|w| !w.is_finished()) {
        let page = e.c.read_change_feed(&from(&token).max_item_count(7))?;
        token = page.continuation;
        collect(page.changes);
    }
    for w in writers {
        w.join().map_err(|_| "writer panicked")??;
    }
    let (rest, _) = drain(&e.c, &token, 7)?;
    collect(rest);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a version was delivered twice");
    let last: HashMap<&String, &String> = seen.iter().map(|(k, t)| (k, t)).collect();
    for item in e.c.items()? {
        let item = item?;
        let id = item["id"].as_str().unwrap_or("").to_string();
        assert_eq!(
            last.get(&id).map(|s| s.as_str()),
            item["_etag"].as_str(),
            "{id}: final version missing"
        );
    }
    Ok(())
}

#[test]
fn push_iterator_wakes_on_writes_and_resumes() -> TestResult {
    let e = env()?;
    e.c.create_item(&json!({"id": "old", "pk": "p"}))?;
    let mut it =
        e.c.change_feed_iter(&ChangeFeedOptions::default().start(ChangeFeedStart::Now))?;
    assert!(it.next_timeout(Duration::from_millis(10))?.is_none());
    let c = e.c.clone();
    let writer = std::thread::spawn(move || -> ebbdb::Result<()> {
        for id in ["x", "y", "z"] {
            c.create_item(&json!({"id": id, "pk": "p"}))?;
        }
        Ok(())
    });
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(it.next().ok_or("iterator ended")??);
    }
    writer.join().map_err(|_| "writer panicked")??;
    assert_eq!(ids(&got), ["x", "y", "z"]);
    // Its continuation resumes after what it returned.
    e.c.create_item(&json!({"id": "w", "pk": "p"}))?;
    assert_eq!(
        ids(&e.c.read_change_feed(&from(&it.continuation()))?.changes),
        ["w"]
    );
    // The channel form.
    let rx = it.into_receiver(16);
    let v = rx.recv_timeout(Duration::from_secs(10))??;
    assert_eq!(v["id"], "w");
    e.c.create_item(&json!({"id": "v", "pk": "p"}))?;
    assert_eq!(rx.recv_timeout(Duration::from_secs(10))??["id"], "v");
    Ok(())
}

#[derive(Debug, Clone)]
enum Step {
    Upsert(u8),
    Patch(u8),
    Delete(u8),
    Advance(u8),
    Read(u8),
    Compact,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..12).prop_map(Step::Upsert),
        2 => (0u8..12).prop_map(Step::Patch),
        1 => (0u8..12).prop_map(Step::Delete),
        1 => (1u8..4).prop_map(Step::Advance),
        3 => (1u8..6).prop_map(Step::Read),
        1 => Just(Step::Compact),
        1 => Just(Step::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The reference feed: every key's versions numbered; a page must return live keys whose
    /// newest version the reader has not had, each once, in write order; after draining, the
    /// reader has every live key's newest version.
    #[test]
    fn model(steps in proptest::collection::vec(step(), 1..60)) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let clock = ManualClock::at_unix_secs(T0);
        let run = || -> Result<(), Box<dyn std::error::Error>> {
            let mut db = Database::open_with(dir.path(), opts(&clock))?;
            let mut c = db.create_container(ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(5)))?;
            // key → (version, write order, expires at)
            let mut model: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
            let mut order = 0u64;
            let mut delivered: HashMap<String, u64> = HashMap::new();
            let mut token = c.read_change_feed(&ChangeFeedOptions::default())?.continuation;
            let now = |clock: &ManualClock| clock.now_unix_millis() / 1000;
            for s in steps.clone() {
                match s {
                    Step::Upsert(k) | Step::Patch(k) => {
                        let id = format!("k{k}");
                        let live = model.get(&id).filter(|(_, _, exp)| *exp > now(&clock)).map(|(v, _, _)| *v);
                        // Versions are numbered across keys, so a re-created key never reuses one.
                        let v = order + 1;
                        if matches!(s, Step::Patch(_)) {
                            let r = c.patch_item("p", &id, &[PatchOp::set("/v", v)]);
                            if live.is_none() {
                                assert!(r.is_err_and(|e| e.is_not_found()));
                                continue;
                            }
                            r?;
                        } else {
                            c.upsert_item(&json!({"id": id, "pk": "p", "v": v}))?;
                        }
                        order += 1;
                        model.insert(id, (v, order, now(&clock) + 5));
                    }
                    Step::Delete(k) => {
                        let id = format!("k{k}");
                        let live = model.get(&id).is_some_and(|(_, _, exp)| *exp > now(&clock));
                        let r = c.delete_item("p", &id);
                        assert_eq!(r.is_ok(), live);
                        model.remove(&id);
                    }
                    Step::Advance(n) => clock.advance(Duration::from_secs(u64::from(n))),
                    Step::Read(size) => {
                        let page = c.read_change_feed(&from(&token).max_item_count(usize::from(size)))?;
                        let t = now(&clock);
                        let mut pending: Vec<(u64, &String, u64)> = model
                            .iter()
                            .filter(|(id, (v, _, exp))| *exp > t && delivered.get(*id) != Some(v))
                            .map(|(id, (v, o, _))| (*o, id, *v))
                            .collect();
                        pending.sort();
                        let want: Vec<(String, u64)> = pending.iter().take(usize::from(size)).map(|(_, id, v)| ((*id).clone(), *v)).collect();
                        let got: Vec<(String, u64)> = page.changes.iter().map(|x| (x["id"].as_str().unwrap_or("").to_string(), x["v"].as_u64().unwrap_or(0))).collect();
                        assert_eq!(got, want);
                        for (id, v) in got {
                            delivered.insert(id, v);
                        }
                        token = page.continuation;
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
            // Drained: every live key's newest version delivered, nothing else pending.
            let (rest, _) = drain(&c, &token, 1000)?;
            for x in rest {
                delivered.insert(x["id"].as_str().unwrap_or("").to_string(), x["v"].as_u64().unwrap_or(0));
            }
            for (id, (v, _, exp)) in &model {
                if *exp > now(&clock) {
                    assert_eq!(delivered.get(id), Some(v), "{id}");
                }
            }
            Ok(())
        };
        run().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}
