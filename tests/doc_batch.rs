//! `docs/contract.md` §8, transactional batch: statuses of every operation, each operation
//! seeing the ones before it, 424s and nothing written on failure, whole-batch errors, all or
//! nothing for concurrent readers (point reads, iterators, queries, counts in a tight loop)
//! and for a crash at every byte of the batch's records; random batches against a model of the rules.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{copy_dir, segments};
use ebbdb::clock::ManualClock;
use ebbdb::{
    Container, ContainerProperties, Database, DefaultTtl, Error, ItemOptions, Options, PatchOp,
    Query, SyncPolicy, TransactionalBatch,
};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

struct Env {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
    c: Container,
}

fn env_with(opts: Options, ttl: DefaultTtl) -> Result<Env, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), opts.clock(clock.clone()))?;
    let c = db.create_container(ContainerProperties::new("c", "/pk").with_default_ttl(ttl))?;
    c.create_item(&json!({"id": "old", "pk": "p", "n": 1}))?;
    c.create_item(&json!({"id": "other", "pk": "q", "n": 1}))?;
    Ok(Env {
        _dir: dir,
        clock,
        db,
        c,
    })
}

fn env() -> Result<Env, Box<dyn std::error::Error>> {
    env_with(Options::default(), DefaultTtl::Off)
}

/// Every item of the container, in key order.
fn all(c: &Container) -> Result<Vec<Value>, Error> {
    c.items()?.collect()
}

fn statuses(r: &ebbdb::TransactionalBatchResponse) -> Vec<u16> {
    r.results.iter().map(|x| x.status_code).collect()
}

#[test]
fn every_operation_succeeds_with_its_status() -> TestResult {
    let e = env()?;
    let mut b = TransactionalBatch::new("p");
    b.create_item(&json!({"id": "a", "pk": "p", "n": 1}))
        .upsert_item(&json!({"id": "b", "pk": "p", "n": 2}))
        .upsert_item(&json!({"id": "old", "pk": "p", "n": 3}))
        .replace_item("a", &json!({"id": "a", "pk": "p", "n": 4}))
        .patch_item("b", &[PatchOp::incr("/n", 10)])
        .read_item("old")
        .delete_item("a");
    let r = e.c.execute_batch(&b)?;
    assert!(r.is_success());
    assert_eq!(r.status_code(), 200);
    assert_eq!(statuses(&r), [201, 201, 200, 200, 200, 200, 204]);
    assert_eq!(
        r.results[4].item.as_ref().map(|v| v["n"].clone()),
        Some(json!(12))
    );
    assert_eq!(
        r.results[5].item.as_ref().map(|v| v["n"].clone()),
        Some(json!(3))
    );
    assert!(r.results[6].item.is_none() && r.results[6].etag.is_none());
    for x in &r.results[..6] {
        let item = x.item.as_ref().ok_or("item")?;
        assert_eq!(x.etag.as_deref(), item["_etag"].as_str());
        assert_eq!(item["_ts"], json!(T0));
    }
    // The writes are what a read returns afterwards.
    assert_eq!(
        e.c.read_item::<Value>("p", "b")?,
        r.results[4].item.clone().ok_or("b")?
    );
    assert_eq!(
        e.c.read_item::<Value>("p", "old")?,
        r.results[2].item.clone().ok_or("old")?
    );
    assert!(e
        .c
        .read_item::<Value>("p", "a")
        .is_err_and(|e| e.is_not_found()));
    // Every write has its own etag.
    let mut etags: Vec<_> = r.results[..5]
        .iter()
        .filter_map(|x| x.etag.clone())
        .collect();
    etags.sort();
    etags.dedup();
    assert_eq!(etags.len(), 5);
    Ok(())
}

#[test]
fn create_then_patch_of_the_same_id_in_one_batch() -> TestResult {
    let e = env()?;
    let mut b = TransactionalBatch::new("p");
    b.create_item(&json!({"id": "new", "pk": "p", "tags": []}))
        .patch_item(
            "new",
            &[PatchOp::add("/tags/-", "x"), PatchOp::set("/ttl", 60)],
        )
        .patch_item("new", &[PatchOp::incr("/count", 1)])
        .read_item("new");
    let r = e.c.execute_batch(&b)?;
    assert_eq!(statuses(&r), [201, 200, 200, 200]);
    let got: Value = e.c.read_item("p", "new")?;
    assert_eq!(
        (
            got["tags"].clone(),
            got["ttl"].clone(),
            got["count"].clone()
        ),
        (json!(["x"]), json!(60), json!(1))
    );
    assert_eq!(r.results[3].item.as_ref(), Some(&got));
    Ok(())
}

#[test]
fn upsert_twice_is_201_then_200_and_delete_then_create_works() -> TestResult {
    let e = env()?;
    let mut b = TransactionalBatch::new("p");
    b.upsert_item(&json!({"id": "u", "pk": "p"}))
        .upsert_item(&json!({"id": "u", "pk": "p", "v": 2}))
        .delete_item("old")
        .create_item(&json!({"id": "old", "pk": "p", "fresh": true}));
    let r = e.c.execute_batch(&b)?;
    assert_eq!(statuses(&r), [201, 200, 204, 201]);
    assert_eq!(e.c.read_item::<Value>("p", "old")?["fresh"], true);
    Ok(())
}

/// Runs `b`, expects it to fail at `at` with `status`, everything else 424, nothing written.
fn fails(c: &Container, b: &TransactionalBatch, at: usize, status: u16) -> TestResult {
    let before = all(c)?;
    let r = c.execute_batch(b)?;
    assert!(!r.is_success());
    assert_eq!(r.status_code(), status);
    for (i, x) in r.results.iter().enumerate() {
        let want = if i == at { status } else { 424 };
        assert_eq!(x.status_code, want, "operation {i}: {x:?}");
        assert!(x.item.is_none() && x.etag.is_none());
    }
    assert!(r.results[at].message.is_some());
    assert_eq!(all(c)?, before, "a failed batch wrote something");
    Ok(())
}

#[test]
fn a_conflict_fails_the_batch_with_409_and_424s() -> TestResult {
    let e = env()?;
    let mut b = TransactionalBatch::new("p");
    b.create_item(&json!({"id": "a", "pk": "p"}))
        .upsert_item(&json!({"id": "old", "pk": "p", "n": 9}))
        .create_item(&json!({"id": "a", "pk": "p"}))
        .read_item("a");
    fails(&e.c, &b, 2, 409)
}

#[test]
fn missing_items_fail_with_404() -> TestResult {
    let e = env()?;
    for (i, op) in ["replace", "delete", "read", "patch"]
        .into_iter()
        .enumerate()
    {
        let mut b = TransactionalBatch::new("p");
        b.upsert_item(&json!({"id": "x", "pk": "p"}));
        match op {
            "replace" => b.replace_item("nope", &json!({"id": "nope", "pk": "p"})),
            "delete" => b.delete_item("nope"),
            "read" => b.read_item("nope"),
            _ => b.patch_item("nope", &[PatchOp::set("/a", 1)]),
        };
        b.delete_item("old");
        fails(&e.c, &b, 1, 404).map_err(|err| format!("{i} {op}: {err}"))?;
    }
    // An item deleted earlier in the batch is missing for the ones after.
    let mut b = TransactionalBatch::new("p");
    b.delete_item("old").read_item("old");
    fails(&e.c, &b, 1, 404)
}

#[test]
fn if_match_and_filter_predicate_fail_with_412() -> TestResult {
    let e = env()?;
    let stale = ItemOptions::default().if_match("\"stale\"");
    let mut b = TransactionalBatch::new("p");
    b.patch_item("old", &[PatchOp::incr("/n", 1)])
        .replace_item_with("old", &json!({"id": "old", "pk": "p"}), &stale);
    fails(&e.c, &b, 1, 412)?;
    let mut b = TransactionalBatch::new("p");
    b.delete_item_with("old", &stale);
    fails(&e.c, &b, 0, 412)?;
    let mut b = TransactionalBatch::new("p");
    b.upsert_item_with(&json!({"id": "old", "pk": "p"}), &stale);
    fails(&e.c, &b, 0, 412)?;
    // The patch before it changed the etag the condition sees.
    let etag = e.c.read_item::<Value>("p", "old")?["_etag"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut b = TransactionalBatch::new("p");
    b.patch_item("old", &[PatchOp::incr("/n", 1)])
        .patch_item_with(
            "old",
            &[PatchOp::incr("/n", 1)],
            &ItemOptions::default().if_match(etag),
        );
    fails(&e.c, &b, 1, 412)?;
    let mut b = TransactionalBatch::new("p");
    b.patch_item("old", &[PatchOp::set("/s", "shipped")])
        .patch_item_with(
            "old",
            &[PatchOp::incr("/n", 1)],
            &ItemOptions::default().filter_predicate("FROM c WHERE c.s = 'open'"),
        );
    fails(&e.c, &b, 1, 412)
}

/// Adds one operation to a batch.
type AddOp = Box<dyn Fn(&mut TransactionalBatch)>;

#[test]
fn invalid_operations_fail_with_400_or_413() -> TestResult {
    let e = env_with(Options::default().max_item_size(2000), DefaultTtl::Off)?;
    let cases: Vec<(AddOp, u16)> = vec![
        (
            Box::new(|b| {
                b.create_item(&json!({"id": "x", "pk": "other-partition"}));
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.create_item(&json!({"pk": "p"}));
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.create_item(&json!([1, 2]));
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.create_item(&json!({"id": "x", "pk": "p", "ttl": 0}));
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.create_item(&json!({"id": "x", "pk": "p", "big": "x".repeat(2000)}));
            }),
            413,
        ),
        (
            Box::new(|b| {
                b.replace_item("old", &json!({"id": "other-id", "pk": "p"}));
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.patch_item("old", &[PatchOp::remove("/missing")]);
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.patch_item("old", &[PatchOp::set("/id", "x")]);
            }),
            400,
        ),
        (
            Box::new(|b| {
                b.upsert_item_with(
                    &json!({"id": "x", "pk": "p"}),
                    &ItemOptions::default().filter_predicate("FROM c"),
                );
            }),
            400,
        ),
    ];
    for (i, (add, status)) in cases.iter().enumerate() {
        let mut b = TransactionalBatch::new("p");
        b.upsert_item(&json!({"id": "first", "pk": "p"}));
        add(&mut b);
        b.read_item("old");
        fails(&e.c, &b, 1, *status).map_err(|err| format!("case {i}: {err}"))?;
    }
    Ok(())
}

#[test]
fn whole_batch_problems_are_errors_of_execute_batch() -> TestResult {
    let e = env()?;
    assert!(matches!(
        e.c.execute_batch(&TransactionalBatch::new("p")),
        Err(Error::BadRequest(_))
    ));
    let mut b = TransactionalBatch::new("p");
    for i in 0..101 {
        b.upsert_item(&json!({"id": format!("i{i}"), "pk": "p"}));
    }
    assert!(matches!(e.c.execute_batch(&b), Err(Error::BadRequest(_))));
    assert_eq!(e.c.count()?, 2);
    let mut b = TransactionalBatch::new("p");
    for i in 0..100 {
        b.upsert_item(&json!({"id": format!("i{i}"), "pk": "p"}));
    }
    assert!(e.c.execute_batch(&b)?.is_success());
    assert_eq!(e.c.count()?, 102);
    let mut b = TransactionalBatch::new("p");
    for i in 0..3 {
        b.upsert_item(&json!({"id": format!("big{i}"), "pk": "p", "v": "x".repeat(800_000)}));
    }
    assert!(matches!(e.c.execute_batch(&b), Err(Error::TooLarge(_))));
    assert_eq!(e.c.count()?, 102);
    e.db.delete_container("c")?;
    let mut b = TransactionalBatch::new("p");
    b.read_item("old");
    assert!(matches!(e.c.execute_batch(&b), Err(Error::NotFound(_))));
    Ok(())
}

#[test]
fn expired_items_are_absent_to_the_batch() -> TestResult {
    let e = env_with(Options::default(), DefaultTtl::Seconds(10))?;
    e.clock.advance(Duration::from_secs(10));
    let mut b = TransactionalBatch::new("p");
    b.replace_item("old", &json!({"id": "old", "pk": "p"}));
    fails(&e.c, &b, 0, 404)?;
    let mut b = TransactionalBatch::new("p");
    b.create_item(&json!({"id": "old", "pk": "p", "again": true}))
        .read_item("old");
    let r = e.c.execute_batch(&b)?;
    assert_eq!(statuses(&r), [201, 200]);
    e.clock.advance(Duration::from_secs(9));
    assert_eq!(e.c.read_item::<Value>("p", "old")?["again"], true);
    e.clock.advance(Duration::from_secs(1));
    assert!(e
        .c
        .read_item::<Value>("p", "old")
        .is_err_and(|e| e.is_not_found()));
    Ok(())
}

#[test]
fn a_batch_of_reads_writes_nothing() -> TestResult {
    let e = env()?;
    let before = e.db.stats().segment_bytes;
    let mut b = TransactionalBatch::new("p");
    b.read_item("old").read_item("old");
    assert_eq!(statuses(&e.c.execute_batch(&b)?), [200, 200]);
    assert_eq!(e.db.stats().segment_bytes, before);
    Ok(())
}

#[test]
fn readers_never_see_part_of_a_batch() -> TestResult {
    let e = env_with(
        Options::default()
            .sync(SyncPolicy::Never)
            .segment_size(64 * 1024),
        DefaultTtl::Off,
    )?;
    let c = e.c.clone();
    // Ten items that every batch rewrites with its generation, and two accounts between
    // which each batch moves one unit: readers must see one generation and a sum of 100.
    // (Checked to fail, in scans, with the batch written as separate records.)
    let mut b = TransactionalBatch::new("g");
    for i in 0..10 {
        b.upsert_item(&json!({"id": format!("i{i}"), "pk": "g", "gen": 0}));
    }
    b.upsert_item(&json!({"id": "acct-a", "pk": "g", "balance": 100}))
        .upsert_item(&json!({"id": "acct-b", "pk": "g", "balance": 0}));
    assert!(c.execute_batch(&b)?.is_success());
    // Fillers between them, so a scan of the partition spans several chunks (of 256 keys).
    for i in 0..10 {
        for k in 0..40 {
            c.upsert_item(&json!({"id": format!("i{i}-f{k:02}"), "pk": "g"}))?;
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (c, stop, reads) = (c.clone(), Arc::clone(&stop), Arc::clone(&reads));
            std::thread::spawn(move || -> Result<(), String> {
                let gens =
                    Query::new("SELECT VALUE c.gen FROM c WHERE c.pk = 'g' AND IS_DEFINED(c.gen)");
                let sum = Query::new("SELECT VALUE SUM(c.balance) FROM c WHERE c.pk = 'g'");
                while !stop.load(Ordering::Relaxed) {
                    let items: Vec<Value> = c
                        .items_in_partition("g")
                        .and_then(|i| i.collect())
                        .map_err(|e| e.to_string())?;
                    let g: Vec<&Value> = items.iter().filter_map(|v| v.get("gen")).collect();
                    let total: i64 = items.iter().filter_map(|v| v["balance"].as_i64()).sum();
                    if g.len() != 10 || g.iter().any(|x| *x != g[0]) || total != 100 {
                        return Err(format!(
                            "reader {r}: a partial batch in a scan: {g:?}, sum {total}"
                        ));
                    }
                    let q: Vec<Value> = c
                        .query(&gens)
                        .and_then(|i| i.collect())
                        .map_err(|e| e.to_string())?;
                    if q.len() != 10 || q.iter().any(|x| *x != q[0]) {
                        return Err(format!("reader {r}: a partial batch in a query: {q:?}"));
                    }
                    let s: Vec<Value> = c
                        .query(&sum)
                        .and_then(|i| i.collect())
                        .map_err(|e| e.to_string())?;
                    if s != [json!(100)] {
                        return Err(format!("reader {r}: sum {s:?}"));
                    }
                    let a: Value = c.read_item("g", "acct-a").map_err(|e| e.to_string())?;
                    let n = c.count().map_err(|e| e.to_string())?;
                    if n != 414
                        || a["balance"]
                            .as_i64()
                            .is_none_or(|x| !(0..=100).contains(&x))
                    {
                        return Err(format!("reader {r}: count {n}, {a}"));
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    // At least 300 batches, and on until the readers have checked more than ten times (a
    // reader that stopped has failed: its error is reported below): on a loaded machine the
    // readers, each pass a scan, two queries and a count, had made only four passes by the
    // 300th batch.
    let started = std::time::Instant::now();
    let mut g = 0u64;
    while g < 300 || reads.load(Ordering::Relaxed) <= 10 {
        if started.elapsed() > Duration::from_secs(120)
            || readers.iter().any(std::thread::JoinHandle::is_finished)
        {
            break;
        }
        g += 1;
        let mut b = TransactionalBatch::new("g");
        for i in 0..10 {
            b.upsert_item(&json!({"id": format!("i{i}"), "pk": "g", "gen": g}));
        }
        let (from, to) = if g % 2 == 1 {
            ("acct-a", "acct-b")
        } else {
            ("acct-b", "acct-a")
        };
        b.patch_item(from, &[PatchOp::incr("/balance", -1)])
            .patch_item(to, &[PatchOp::incr("/balance", 1)]);
        let r = c.execute_batch(&b)?;
        assert!(r.is_success(), "{r:?}");
        if g.is_multiple_of(50) {
            e.db.compact()?;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in readers {
        t.join().map_err(|_| "reader panicked")??;
    }
    assert!(
        reads.load(Ordering::Relaxed) > 10,
        "readers ran {} times",
        reads.load(Ordering::Relaxed)
    );
    Ok(())
}

#[test]
fn a_crash_at_every_byte_of_the_batch_keeps_all_or_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let opts = || {
        Options::default()
            .clock(clock.clone())
            .sync(SyncPolicy::Always)
    };
    let (before_state, after_state, from, to);
    {
        let db = Database::open_with(dir.path(), opts())?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        c.create_item(&json!({"id": "keep", "pk": "p", "n": 1}))?;
        c.create_item(&json!({"id": "gone", "pk": "p"}))?;
        before_state = all(&c)?;
        from = db.stats().segment_bytes;
        let mut b = TransactionalBatch::new("p");
        b.create_item(&json!({"id": "new", "pk": "p"}))
            .patch_item("keep", &[PatchOp::incr("/n", 1)])
            .delete_item("gone")
            .upsert_item(&json!({"id": "up", "pk": "p", "v": [1, 2, 3]}));
        assert!(c.execute_batch(&b)?.is_success());
        to = db.stats().segment_bytes;
        after_state = all(&c)?;
    }
    assert_ne!(before_state, after_state);
    let seg = segments(dir.path())?.pop().ok_or("no segment")?;
    let full = std::fs::read(&seg)?;
    let mut seen = [0usize; 2];
    for cut in from..=to {
        let work = tempfile::tempdir()?;
        copy_dir(dir.path(), work.path())?;
        std::fs::write(
            work.path().join(seg.file_name().ok_or("name")?),
            full.get(..cut as usize).ok_or("cut")?,
        )?;
        // As in tests/crash_truncate.rs: the CLOCK written at close would call the cut damage.
        std::fs::remove_file(work.path().join("CLOCK"))?;
        let db = Database::open_with(work.path(), Options::default().clock(clock.clone()))?;
        let got = all(&db.container("c")?)?;
        if cut == to {
            assert_eq!(got, after_state, "cut at the end");
            seen[1] += 1;
        } else {
            assert_eq!(
                got, before_state,
                "cut at {cut} of {from}..{to}: part of the batch survived"
            );
            seen[0] += 1;
        }
    }
    assert!(seen[0] > 200, "{seen:?}");
    Ok(())
}

mod model {
    //! Random batches against a reference model of the batch rules: statuses (with 424s),
    //! and the container's contents after each batch (nothing of a failed one), with TTL
    //! expiry and reopen in between.

    use std::collections::BTreeMap;
    use std::time::Duration;

    use ebbdb::clock::{Clock, ManualClock};
    use ebbdb::{
        ContainerProperties, Database, DefaultTtl, Options, PatchOp, SyncPolicy, TransactionalBatch,
    };
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[derive(Debug, Clone)]
    enum BOp {
        Create(u8),
        Upsert(u8),
        Replace(u8),
        Delete(u8),
        Read(u8),
        Incr(u8),
        BadPatch(u8),
    }

    #[derive(Debug, Clone)]
    enum Step {
        Batch(Vec<BOp>),
        Advance(u8),
        Reopen,
    }

    fn bop() -> impl Strategy<Value = BOp> {
        let id = 0u8..5;
        prop_oneof![
            3 => id.clone().prop_map(BOp::Create),
            2 => id.clone().prop_map(BOp::Upsert),
            2 => id.clone().prop_map(BOp::Replace),
            2 => id.clone().prop_map(BOp::Delete),
            2 => id.clone().prop_map(BOp::Read),
            3 => id.clone().prop_map(BOp::Incr),
            1 => id.prop_map(BOp::BadPatch),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => proptest::collection::vec(bop(), 1..8).prop_map(Step::Batch),
            2 => (1u8..4).prop_map(Step::Advance),
            1 => Just(Step::Reopen),
        ]
    }

    /// id → (n, expires at second)
    type Model = BTreeMap<String, (i64, u64)>;

    /// The statuses the rules give, and the model after the batch (unchanged on failure).
    fn expect(model: &Model, ops: &[BOp], now: u64) -> (Vec<u16>, Model) {
        let mut m: Model = model
            .iter()
            .filter(|(_, (_, exp))| *exp > now)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut statuses = Vec::new();
        for op in ops {
            let status = match op {
                BOp::Create(i) => match m.entry(format!("k{i}")) {
                    std::collections::btree_map::Entry::Occupied(_) => 409,
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert((0, now + 10));
                        201
                    }
                },
                BOp::Upsert(i) => {
                    let old = m.insert(format!("k{i}"), (0, now + 10));
                    if old.is_some() {
                        200
                    } else {
                        201
                    }
                }
                BOp::Replace(i) => match m.get_mut(&format!("k{i}")) {
                    Some(v) => {
                        *v = (0, now + 10);
                        200
                    }
                    None => 404,
                },
                BOp::Delete(i) => {
                    if m.remove(&format!("k{i}")).is_some() {
                        204
                    } else {
                        404
                    }
                }
                BOp::Read(i) => {
                    if m.contains_key(&format!("k{i}")) {
                        200
                    } else {
                        404
                    }
                }
                BOp::Incr(i) => match m.get_mut(&format!("k{i}")) {
                    Some(v) => {
                        *v = (v.0 + 1, now + 10);
                        200
                    }
                    None => 404,
                },
                BOp::BadPatch(i) => {
                    if m.contains_key(&format!("k{i}")) {
                        400
                    } else {
                        404
                    }
                }
            };
            if status >= 400 {
                let at = statuses.len();
                let all = (0..ops.len())
                    .map(|j| if j == at { status } else { 424 })
                    .collect();
                return (all, model.clone());
            }
            statuses.push(status);
        }
        (statuses, m)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn batches_follow_the_rules(steps in proptest::collection::vec(step(), 1..30)) {
            let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let clock = ManualClock::at_unix_secs(super::T0);
            let opts = || Options::default().clock(clock.clone()).sync(SyncPolicy::Never).segment_size(8 * 1024);
            let run = || -> Result<(), Box<dyn std::error::Error>> {
                let mut db = Database::open_with(dir.path(), opts())?;
                let mut c = db.create_container(ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(10)))?;
                let mut model = Model::new();
                for s in steps.clone() {
                    match s {
                        Step::Batch(ops) => {
                            let now = clock.now_unix_millis() / 1000;
                            let mut b = TransactionalBatch::new("p");
                            for op in &ops {
                                match op {
                                    BOp::Create(i) => b.create_item(&json!({"id": format!("k{i}"), "pk": "p", "n": 0})),
                                    BOp::Upsert(i) => b.upsert_item(&json!({"id": format!("k{i}"), "pk": "p", "n": 0})),
                                    BOp::Replace(i) => b.replace_item(&format!("k{i}"), &json!({"id": format!("k{i}"), "pk": "p", "n": 0})),
                                    BOp::Delete(i) => b.delete_item(&format!("k{i}")),
                                    BOp::Read(i) => b.read_item(&format!("k{i}")),
                                    BOp::Incr(i) => b.patch_item(&format!("k{i}"), &[PatchOp::incr("/n", 1)]),
                                    BOp::BadPatch(i) => b.patch_item(&format!("k{i}"), &[PatchOp::remove("/missing")]),
                                };
                            }
                            let r = c.execute_batch(&b)?;
                            let (want, after) = expect(&model, &ops, now);
                            let got: Vec<u16> = r.results.iter().map(|x| x.status_code).collect();
                            assert_eq!(got, want, "{ops:?}");
                            model = after;
                        }
                        Step::Advance(n) => clock.advance(Duration::from_secs(u64::from(n))),
                        Step::Reopen => {
                            drop(c);
                            drop(db);
                            db = Database::open_with(dir.path(), opts())?;
                            c = db.container("c")?;
                        }
                    }
                    let now = clock.now_unix_millis() / 1000;
                    let got: BTreeMap<String, i64> = c
                        .items()?
                        .map(|v| v.map(|v: Value| (v["id"].as_str().unwrap_or("").to_string(), v["n"].as_i64().unwrap_or(-1))))
                        .collect::<ebbdb::Result<_>>()?;
                    let want: BTreeMap<String, i64> = model
                        .iter()
                        .filter(|(_, (_, exp))| *exp > now)
                        .map(|(k, (n, _))| (k.clone(), *n))
                        .collect();
                    assert_eq!(got, want);
                }
                Ok(())
            };
            run().map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
}
