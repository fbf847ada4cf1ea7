//! `Container::create_items`: all items or none, each validated as `create_item`, one `_ts`,
//! 409 for live or repeated ids, and no double create when single creates race it.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{clock, opts, T0};
use ebbdb::{BulkCreate, ContainerProperties, Database, DefaultTtl, Error};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn refused(r: BulkCreate) -> Vec<(usize, u16)> {
    match r {
        BulkCreate::Refused(v) => v.into_iter().map(|(i, e)| (i, e.status_code())).collect(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn all_or_nothing_with_every_refusal_listed() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    let db = Database::open_with(dir.path(), opts(&clock).max_item_size(1000))?;
    let c = db.create_container(
        ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(100)),
    )?;
    c.create_item(&json!({"id": "live", "pk": "a"}))?;
    let items = vec![
        json!({"id": "ok", "pk": "a"}),
        json!({"id": "bad-ttl", "pk": "a", "ttl": 0}),
        json!({"id": "live", "pk": "a"}),
        json!({"id": "big", "pk": "a", "pad": "x".repeat(2000)}),
        json!({"id": "ok", "pk": "a"}),
        json!({"id": "ok", "pk": "b"}),
        json!([1, 2]),
        json!({"id": "", "pk": "a"}),
    ];
    assert_eq!(
        refused(c.create_items(&items)?),
        vec![(1, 400), (2, 409), (3, 413), (4, 409), (6, 400), (7, 400)]
    );
    assert_eq!(c.count()?, 1, "nothing was written");
    // Without the invalid ones, the live id is what is left to refuse.
    let rest: Vec<Value> = [0, 2, 5].iter().map(|&i| items[i].clone()).collect();
    assert_eq!(refused(c.create_items(&rest)?), vec![(1, 409)]);
    assert_eq!(c.count()?, 1);
    let rest: Vec<Value> = [0, 5].iter().map(|&i| items[i].clone()).collect();
    assert!(matches!(c.create_items(&rest)?, BulkCreate::Created(2)));
    assert_eq!(c.count()?, 3);
    assert!(matches!(c.create_items(&[])?, BulkCreate::Created(0)));

    // One `_ts` for the batch; an expired id may be created again, as with create_item.
    clock.advance(Duration::from_secs(100));
    let again = vec![
        json!({"id": "live", "pk": "a"}),
        json!({"id": "new", "pk": "a"}),
    ];
    assert!(matches!(c.create_items(&again)?, BulkCreate::Created(2)));
    let a: Value = c.read_item("a", "live")?;
    let b: Value = c.read_item("a", "new")?;
    assert_eq!(a["_ts"], T0 + 100);
    assert_eq!(b["_ts"], T0 + 100);
    assert_ne!(a["_etag"], b["_etag"]);
    // They expire together, 100 s after the batch.
    clock.advance(Duration::from_secs(99));
    assert_eq!(c.count()?, 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(c.count()?, 0);

    db.delete_container("c")?;
    assert!(matches!(c.create_items(&again), Err(Error::NotFound(_))));
    Ok(())
}

#[test]
fn survives_reopen_as_one_batch() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = clock();
    {
        let db = Database::open_with(dir.path(), opts(&clock))?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        let items: Vec<Value> = (0..300)
            .map(|i| json!({"id": format!("i{i}"), "pk": i % 5, "pad": "p".repeat(50)}))
            .collect();
        assert!(matches!(c.create_items(&items)?, BulkCreate::Created(300)));
    }
    let db = Database::open_with(dir.path(), opts(&clock))?;
    assert_eq!(db.container("c")?.count()?, 300);
    assert!(ebbdb::verify(dir.path()).is_err(), "open: locked");
    drop(db);
    let report = ebbdb::verify(dir.path())?;
    assert!(report.is_clean(), "{:?}", report.problems);
    Ok(())
}

#[test]
fn racing_single_creates_never_double_create() -> TestResult {
    for round in 0..20 {
        let dir = tempfile::tempdir()?;
        let clock = clock();
        let db = Database::open_with(dir.path(), opts(&clock))?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        let ids: Vec<String> = (0..20).map(|i| format!("r{round}-{i}")).collect();
        let barrier = Arc::new(Barrier::new(2));
        let single = {
            let (c, ids, barrier) = (c.clone(), ids.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                ids.iter()
                    .rev()
                    .filter(|id| {
                        c.create_item(&json!({"id": id, "pk": 1, "by": "single"}))
                            .is_ok()
                    })
                    .count()
            })
        };
        let items: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "pk": 1, "by": "bulk"}))
            .collect();
        barrier.wait();
        let bulk = match c.create_items(&items)? {
            BulkCreate::Created(n) => n,
            BulkCreate::Refused(r) => {
                assert!(r.iter().all(|(_, e)| e.status_code() == 409), "{r:?}");
                0
            }
            other => panic!("{other:?}"),
        };
        let single = single.join().map_err(|_| "thread panicked")?;
        // Either the whole batch won (and every single create after it got 409), or not one
        // of its items was written.
        assert!(bulk == 0 || bulk == 20, "round {round}: {bulk}");
        assert_eq!(
            single + bulk,
            20,
            "round {round}: each id created exactly once"
        );
        let by_bulk = c
            .items()?
            .filter(|v| v.as_ref().is_ok_and(|v| v["by"] == "bulk"))
            .count();
        assert_eq!(by_bulk, bulk);
    }
    Ok(())
}
