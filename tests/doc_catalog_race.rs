//! Issue 9, items 3 and 13: container create / create-or-open racing on one id.
//!
//! Before the fix, two creates of one id could both pass the existence check; the second then
//! deleted the first's keyspace as a "leftover", both returned `Ok`, and the first's items (and
//! handles) were gone.

use std::sync::{Arc, Barrier};
use std::thread;

use ebbdb::clock::ManualClock;
use ebbdb::{ContainerProperties, Database, Error, Options, SyncPolicy};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const ROUNDS: usize = 50;

fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
}

/// Two threads create the same container at once: exactly one wins, the other gets 409, and the
/// winner's container keeps working.
#[test]
fn concurrent_create_of_one_id_has_one_winner() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    for round in 0..ROUNDS {
        let id = format!("c{round}");
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (db, id, barrier) = (db.clone(), id.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    barrier.wait();
                    db.create_container(ContainerProperties::new(id, "/pk"))
                })
            })
            .collect();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked"))
            .collect::<Result<_, _>>()?;
        let mut winners = Vec::new();
        for r in results {
            match r {
                Ok(c) => winners.push(c),
                Err(e) => assert_eq!(e.status_code(), 409, "round {round}: {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one create wins");
        for c in winners {
            c.create_item(&json!({"id": "a", "pk": "p"}))?;
            assert_eq!(c.count()?, 1, "round {round}");
        }
    }
    Ok(())
}

/// How a thread gets the container: the handle, and whether this call created it (`None` when
/// the API does not say).
type Open = fn(&Database, &str) -> ebbdb::Result<(ebbdb::Container, Option<bool>)>;

/// `threads` threads each create-or-open container `c{round}` and upsert their own item.
fn create_or_open_race(threads: usize, open: Open) -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    {
        let db = Database::open_with(dir.path(), opts(&clock))?;
        for round in 0..ROUNDS {
            let id = format!("c{round}");
            let barrier = Arc::new(Barrier::new(threads));
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (db, id, barrier) = (db.clone(), id.clone(), Arc::clone(&barrier));
                    thread::spawn(move || -> ebbdb::Result<Option<bool>> {
                        barrier.wait();
                        let (c, created) = open(&db, &id)?;
                        c.upsert_item(&json!({"id": format!("t{t}"), "pk": "p"}))?;
                        Ok(created)
                    })
                })
                .collect();
            let mut created = Vec::new();
            for h in handles {
                created.extend(h.join().map_err(|_| "thread panicked")??);
            }
            if !created.is_empty() {
                let n = created.iter().filter(|&&c| c).count();
                assert_eq!(n, 1, "round {round}: exactly one thread created it");
            }
            assert_eq!(db.container(&id)?.count()?, threads, "round {round}");
        }
    }
    // Every acknowledged upsert survives a reopen too.
    let db = Database::open_with(dir.path(), opts(&clock))?;
    for round in 0..ROUNDS {
        let c = db.container(&format!("c{round}"))?;
        for t in 0..threads {
            let _: Value = c.read_item("p", &format!("t{t}"))?;
        }
    }
    Ok(())
}

/// The pattern callers wrote before `create_container_if_not_exists` existed.
fn create_or_open_by_hand(
    db: &Database,
    id: &str,
) -> ebbdb::Result<(ebbdb::Container, Option<bool>)> {
    match db.create_container(ContainerProperties::new(id, "/pk")) {
        Ok(c) => Ok((c, Some(true))),
        Err(Error::Conflict(_)) => Ok((db.container(id)?, Some(false))),
        Err(e) => Err(e),
    }
}

#[test]
fn create_or_open_by_hand_2_threads() -> TestResult {
    create_or_open_race(2, create_or_open_by_hand)
}

#[test]
fn create_or_open_by_hand_8_threads() -> TestResult {
    create_or_open_race(8, create_or_open_by_hand)
}

fn create_if_not_exists(
    db: &Database,
    id: &str,
) -> ebbdb::Result<(ebbdb::Container, Option<bool>)> {
    let c = db.create_container_if_not_exists(ContainerProperties::new(id, "/pk"))?;
    Ok((c, None))
}

#[test]
fn create_if_not_exists_2_threads() -> TestResult {
    create_or_open_race(2, create_if_not_exists)
}

#[test]
fn create_if_not_exists_3_threads() -> TestResult {
    create_or_open_race(3, create_if_not_exists)
}

#[test]
fn create_if_not_exists_4_threads() -> TestResult {
    create_or_open_race(4, create_if_not_exists)
}

#[test]
fn create_if_not_exists_8_threads() -> TestResult {
    create_or_open_race(8, create_if_not_exists)
}

/// Mixed callers: half use `create_container` (and open on 409), half
/// `create_container_if_not_exists`; still one container and every upsert kept.
#[test]
fn create_and_create_if_not_exists_mixed_4_threads() -> TestResult {
    fn mixed(db: &Database, id: &str) -> ebbdb::Result<(ebbdb::Container, Option<bool>)> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        if N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(2)
        {
            create_or_open_by_hand(db, id).map(|(c, _)| (c, None))
        } else {
            create_if_not_exists(db, id)
        }
    }
    create_or_open_race(4, mixed)
}

/// An existing container is returned with its own properties; a different partition key path
/// is a 400 (the Cosmos SDKs throw an `ArgumentException` naming both paths).
#[test]
fn create_if_not_exists_returns_the_existing_container() -> TestResult {
    use ebbdb::DefaultTtl;
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let first = db.create_container_if_not_exists(
        ContainerProperties::new("orders", "/pk").with_default_ttl(DefaultTtl::Seconds(60)),
    )?;
    first.create_item(&json!({"id": "a", "pk": "p"}))?;
    let again = db.create_container_if_not_exists(ContainerProperties::new("orders", "/pk"))?;
    assert_eq!(again.properties().default_ttl, DefaultTtl::Seconds(60));
    assert_eq!(again.count()?, 1);
    assert_eq!(
        db.container("orders")?.properties().default_ttl,
        DefaultTtl::Seconds(60)
    );
    match db.create_container_if_not_exists(ContainerProperties::new("orders", "/other")) {
        Err(Error::BadRequest(m)) => assert_eq!(
            m,
            "The requested partition key path '/other' does not match existing container \
             'orders' with partition key path '/pk'"
        ),
        other => panic!("expected 400, got {other:?}"),
    }
    assert_eq!(
        db.create_container(ContainerProperties::new("orders", "/pk"))
            .map(|_| ())
            .map_err(|e| e.status_code()),
        Err(409)
    );
    Ok(())
}
