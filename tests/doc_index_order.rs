//! `ORDER BY` served by a secondary index (`query/ordered.rs`): with a WHERE term on the
//! ordered path and a bound, the index is walked in value order and the walk stops when the
//! page is full. Results are those of the same query without an index, stale entries
//! included; a damaged item past the bound is never read.

mod common;

use ebbdb::{Container, ContainerProperties, Database, DefaultTtl, Query, QueryOptions};
use serde_json::{json, Value};

fn containers(db: &Database) -> (Container, Container) {
    let plain = db
        .create_container(
            ContainerProperties::new("plain", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
        )
        .expect("plain");
    let indexed = db
        .create_container(
            ContainerProperties::new("indexed", "/pk")
                .with_default_ttl(DefaultTtl::NeverExpire)
                .with_included_paths(["/n/?", "/s/?", "/o/k/?"]),
        )
        .expect("indexed");
    (plain, indexed)
}

fn rows(c: &Container, text: &str) -> Vec<Value> {
    c.query::<Value>(&Query::new(text))
        .and_then(|rows| rows.collect())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn paged(c: &Container, text: &str, size: usize) -> Vec<Value> {
    paged_with(c, text, size, |_, _| {})
}

/// Every row of `text` in pages of `size`, calling `between(i, page)` after page `i`.
fn paged_with(
    c: &Container,
    text: &str,
    size: usize,
    mut between: impl FnMut(u64, &[Value]),
) -> Vec<Value> {
    let mut out = Vec::new();
    let mut token = None;
    for i in 0.. {
        let page = c
            .query_page::<Value>(
                &Query::new(text),
                &QueryOptions::default()
                    .max_item_count(size)
                    .continuation(token),
            )
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        between(i, &page.items);
        out.extend(page.items);
        match page.continuation {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    out
}

/// Items with repeated values (1 and 1.0 alike), values of other types at the path, missing
/// values, and a detour through other values first so that stale entries exist.
fn fill(plain: &Container, indexed: &Container) {
    let n_of = |i: u64| -> Value {
        match i % 9 {
            0 => json!(null),
            1 => json!("seven"),
            2 => json!([1, 2]),
            3 => json!(1.0),
            4 => json!(1),
            _ => json!((i * 37) % 23),
        }
    };
    // More items than a walk takes per hold of the lock, so long walks take several.
    for i in 0..400u64 {
        let pk = format!("p{}", i % 4);
        let mut item = json!({
            "id": format!("{i:03}"),
            "pk": pk,
            "s": format!("s{}", (i * 7) % 11),
            "o": {"k": i % 5},
        });
        if i % 13 != 0 {
            item["n"] = n_of(i);
        }
        // A first version with other values: its entries go stale when it is replaced.
        let mut first = item.clone();
        first["n"] = json!(1000 - i);
        first["s"] = json!(format!("z{i}"));
        indexed.create_item(&first).expect("create");
        indexed
            .replace_item(pk.as_str(), &format!("{i:03}"), &item)
            .expect("replace");
        plain.create_item(&item).expect("create");
    }
}

#[test]
fn an_index_walk_in_order_gives_the_unindexed_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open_with(dir.path(), common::opts(&common::clock())).expect("open");
    let (plain, indexed) = containers(&db);
    fill(&plain, &indexed);
    for text in [
        "SELECT TOP 7 VALUE c.id FROM c WHERE c.n >= 3 ORDER BY c.n",
        "SELECT TOP 7 VALUE c.id FROM c WHERE c.n >= 3 ORDER BY c.n DESC",
        "SELECT TOP 5 c.id, c.n FROM c WHERE c.n <= 1 ORDER BY c.n DESC",
        "SELECT TOP 9 VALUE c.id FROM c WHERE c.n = 1 ORDER BY c.n",
        "SELECT TOP 12 VALUE c.id FROM c WHERE c.n IN (4, 1, 4, 20) ORDER BY c.n DESC",
        "SELECT TOP 6 c.id, c.n, c.o FROM c WHERE c.n BETWEEN 2 AND 15 AND c.pk != 'p1' ORDER BY c.n",
        "SELECT VALUE c.id FROM c WHERE c.n > 5 ORDER BY c.n OFFSET 4 LIMIT 6",
        "SELECT TOP 8 VALUE c.id FROM c WHERE STARTSWITH(c.s, 's1') ORDER BY c.s DESC",
        "SELECT TOP 8 VALUE c.s FROM c WHERE c.s > 's3' ORDER BY c.s",
        "SELECT TOP 10 VALUE c.id FROM c WHERE c.o.k >= 1 ORDER BY c.o.k DESC",
        "SELECT TOP 3 VALUE c.id FROM c WHERE c.n >= 100 ORDER BY c.n",
        "SELECT TOP 0 VALUE c.id FROM c WHERE c.n >= 0 ORDER BY c.n",
        "SELECT TOP 300 VALUE c.id FROM c WHERE c.n >= 0 ORDER BY c.n",
        "SELECT TOP 300 VALUE c.id FROM c WHERE c.n >= 1 ORDER BY c.n DESC",
        "SELECT TOP 250 VALUE c.id FROM c WHERE c.n IN (22, 1, 5, 9, 0) ORDER BY c.n DESC",
        "SELECT TOP 250 VALUE c.id FROM c WHERE c.s >= 's' ORDER BY c.s",
    ] {
        let want = rows(&plain, text);
        assert_eq!(rows(&indexed, text), want, "{text}");
        for size in [1, 4] {
            assert_eq!(paged(&indexed, text, size), want, "{text} in pages of {size}");
        }
    }
    // Unbounded, the page size is the bound.
    let text = "SELECT VALUE c.id FROM c WHERE c.n >= 2 ORDER BY c.n DESC";
    assert_eq!(paged(&indexed, text, 5), rows(&plain, text));
}

#[test]
fn the_walk_stops_when_the_page_is_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open_with(dir.path(), common::opts(&common::clock())).expect("open");
    let (_plain, indexed) = containers(&db);
    for i in 0..50u64 {
        indexed
            .create_item(&json!({"id": format!("{i:03}"), "pk": "a", "n": i}))
            .expect("create");
    }
    // The item with the largest `n` is damaged behind the index's back: its entry stays.
    let junk = ebbdb::doc::partition::encode_key(&"a".into(), "049");
    indexed.keyspace().put(&junk, b"not json").expect("raw put");
    let top = "SELECT TOP 3 VALUE c.n FROM c WHERE c.n >= 10 ORDER BY c.n";
    assert_eq!(rows(&indexed, top), vec![json!(10), json!(11), json!(12)]);
    // Reading every candidate (no bound), or walking from the other end, meets it.
    for text in [
        "SELECT VALUE c.n FROM c WHERE c.n >= 10 ORDER BY c.n",
        "SELECT TOP 3 VALUE c.n FROM c WHERE c.n >= 10 ORDER BY c.n DESC",
    ] {
        let e = indexed
            .query::<Value>(&Query::new(text))
            .expect_err("the damaged item is read");
        assert_eq!(e.status_code(), 400, "{text}: {e}");
    }
}

/// Moving items' values so far, by id: a walk may only return a value an item really held.
type History = std::collections::HashMap<String, std::collections::HashSet<u64>>;

/// A container indexed on `/n` with 200 items that are never written again (even `n`) and 40
/// that transactional batches keep moving (odd `n`), and the values each has held.
fn moving_setup(db: &Database) -> (Container, History) {
    let c = db
        .create_container(
            ContainerProperties::new("moving", "/pk")
                .with_default_ttl(DefaultTtl::NeverExpire)
                .with_included_paths(["/n/?"]),
        )
        .expect("container");
    let mut history = History::new();
    for i in 0..200u64 {
        c.create_item(&json!({"id": format!("s{i:03}"), "pk": "p", "n": i * 2}))
            .expect("create");
    }
    for i in 0..40u64 {
        let id = format!("m{i:02}");
        let n = (i * 10 + 1) % 400;
        c.create_item(&json!({"id": id, "pk": "p", "n": n}))
            .expect("create");
        history.entry(id).or_default().insert(n);
    }
    (c, history)
}

/// [`moving_setup`] in a fresh database, its history behind a lock the mover shares.
fn moving() -> (
    tempfile::TempDir,
    Database,
    Container,
    std::sync::Mutex<History>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open_with(dir.path(), common::opts(&common::clock())).expect("open");
    let (c, history) = moving_setup(&db);
    (dir, db, c, std::sync::Mutex::new(history))
}

/// One batch moving four items to new odd values, some behind a walk, some ahead of it.
fn move_four(c: &Container, history: &std::sync::Mutex<History>, round: u64) {
    let mut b = ebbdb::TransactionalBatch::new("p");
    let mut h = history.lock().expect("history");
    for j in 0..4u64 {
        let id = format!("m{:02}", (round * 7 + j * 11) % 40);
        let n = (round * 97 + j * 131) % 200 * 2 + 1;
        h.entry(id.clone()).or_default().insert(n);
        b.upsert_item(&json!({"id": id, "pk": "p", "n": n}));
    }
    drop(h);
    let r = c.execute_batch(&b).expect("batch");
    assert!(r.is_success(), "batch status {}", r.status_code());
}

/// What every walk over the moving items must satisfy, whatever it met concurrently: values
/// in order, every unchanged item once, and each moving item at a value it held; no item
/// twice within one query (`paged`: across pages a moved item may be met again at its new
/// value, as Cosmos allows for an item changed between pages).
fn check_walk(got: &[Value], history: &History, paged: bool, what: &str) {
    let mut seen = std::collections::HashSet::new();
    let mut last = 0u64;
    for row in got {
        let id = row["id"].as_str().expect("id").to_string();
        let n = row["n"].as_u64().expect("n");
        assert!(n >= last, "{what}: {n} after {last}");
        last = n;
        let first = seen.insert(id.clone());
        assert!(
            first || (paged && history.contains_key(&id)),
            "{what}: {id} twice"
        );
        if let Some(held) = history.get(&id) {
            assert!(held.contains(&n), "{what}: {id} at {n}, never held");
        } else {
            assert_eq!(format!("s{:03}", n / 2), id, "{what}: unchanged item moved");
        }
    }
    let unchanged = seen.iter().filter(|id| id.starts_with('s')).count();
    assert_eq!(unchanged, 200, "{what}: every unchanged item exactly once");
}

/// Pages of an ordered walk with a transactional batch committed between every two pages.
#[test]
fn pages_of_an_index_walk_survive_batches_moving_items_between_them() {
    let (_dir, _db, c, history) = moving();
    for (size, text) in [
        (7, "SELECT c.id, c.n FROM c WHERE c.n >= 0 ORDER BY c.n"),
        (
            13,
            "SELECT TOP 1000 c.id, c.n FROM c WHERE c.n >= 0 ORDER BY c.n",
        ),
    ] {
        assert_eq!(c.query_plan(&Query::new(text)).expect("plan"), "index /n");
        let got = paged_with(&c, text, size, |round, page| {
            // One page is one query: no item twice within it.
            let mut ids = std::collections::HashSet::new();
            for row in page {
                assert!(
                    ids.insert(row["id"].clone()),
                    "{text}: {} twice in a page",
                    row["id"]
                );
            }
            move_four(&c, &history, round);
        });
        check_walk(&got, &history.lock().expect("history"), true, text);
    }
}

/// Runs `walk(i)` for `i` in `0..walks`, and on until the other thread has committed a few
/// batches (on a loaded machine the walks could otherwise all run before its first), while
/// that thread keeps committing batches that move items ([`move_four`]).
fn racing_batches(
    c: &Container,
    history: &std::sync::Mutex<History>,
    walks: usize,
    mut walk: impl FnMut(usize),
) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const MIN_ROUNDS: u64 = 5;
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|s| {
        let mover = s.spawn(|| {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                move_four(c, history, round);
                round += 1;
                rounds.store(round, Ordering::Relaxed);
            }
            round
        });
        let guard = common::StopOnDrop(&stop);
        let started = std::time::Instant::now();
        let mut i = 0;
        // A mover that panicked has finished: its panic surfaces at the join below.
        while (i < walks || rounds.load(Ordering::Relaxed) < MIN_ROUNDS) && !mover.is_finished() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "the mover made {} rounds in two minutes",
                rounds.load(Ordering::Relaxed)
            );
            walk(i);
            i += 1;
        }
        drop(guard);
        assert!(mover.join().expect("mover") >= MIN_ROUNDS, "the mover ran");
    });
}

/// Ordered walks racing a thread that commits transactional batches moving items.
#[test]
fn an_index_walk_racing_batches_that_move_items() {
    let (_dir, _db, c, history) = moving();
    let texts = [
        "SELECT TOP 1000 c.id, c.n FROM c WHERE c.n >= 0 ORDER BY c.n",
        "SELECT TOP 1000 c.id, c.n FROM c WHERE c.n BETWEEN 0 AND 1000 ORDER BY c.n",
    ];
    for text in texts {
        assert_eq!(c.query_plan(&Query::new(text)).expect("plan"), "index /n");
    }
    racing_batches(&c, &history, 300, |walk| {
        let text = texts[walk % texts.len()];
        let got = rows(&c, text);
        // The mover records a value before its batch commits, so every value read is
        // in the history by now.
        check_walk(&got, &history.lock().expect("history"), false, text);
    });
}

/// Walks that stop early (`TOP`) while batches move items: a walk longer than one take of
/// the index meets groups as they are after such a batch, and an item it reads as it was
/// before the batch must not be returned at its new place. Every unchanged item whose value
/// lies below the largest value returned must be there: nothing may stand in its place.
#[test]
fn an_index_walk_that_stops_early_racing_batches_returns_a_prefix() {
    let (_dir, _db, c, history) = moving();
    let text = "SELECT TOP 150 c.id, c.n FROM c WHERE c.n >= 0 ORDER BY c.n";
    assert_eq!(c.query_plan(&Query::new(text)).expect("plan"), "index /n");
    racing_batches(&c, &history, 400, |_| {
        let got = rows(&c, text);
        assert_eq!(got.len(), 150);
        let top = got
            .iter()
            .filter_map(|r| r["n"].as_u64())
            .max()
            .expect("rows");
        let ids: std::collections::HashSet<&str> =
            got.iter().filter_map(|r| r["id"].as_str()).collect();
        for i in 0..200u64 {
            if i * 2 < top {
                let id = format!("s{i:03}");
                assert!(
                    ids.contains(id.as_str()),
                    "{id} (n = {}) missing below {top}",
                    i * 2
                );
            }
        }
    });
}
