//! Issue 9, item 19: deeply nested items.
//!
//! Azure Cosmos DB allows 128 levels of nested objects and arrays. Before the fix an item 128
//! levels deep was accepted but then unreadable (`serde_json` parses at most 127), and at 10,000
//! levels `create_item` overflowed a 2 MiB thread stack and aborted the process. Depth here
//! counts the item object itself as level 1: `{"a": []}` is 2 levels deep.

use ebbdb::clock::ManualClock;
use ebbdb::{Container, ContainerProperties, Database, Error, Options};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const SMALL_STACK: usize = 256 << 10;

fn container() -> Result<(tempfile::TempDir, Container), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let db = Database::open_with(dir.path(), Options::default().clock(clock))?;
    let c = db.create_container(ContainerProperties::new("deep", "/pk"))?;
    Ok((dir, c))
}

/// An item `depth` levels deep (at least 2): arrays nested under `nested`.
fn deep_item(depth: usize) -> Value {
    let mut v = Value::Array(Vec::new());
    for _ in 2..depth {
        v = Value::Array(vec![v]);
    }
    // Not `json!({.., "nested": v})`: the macro converts `v` with `to_value`, which recurses.
    let mut item = serde_json::Map::new();
    item.insert("id".into(), json!("deep"));
    item.insert("pk".into(), json!("p"));
    item.insert("nested".into(), v);
    Value::Object(item)
}

/// Drops a deep value without recursing (the default drop recurses once per level).
fn drop_deep(v: Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(a) => stack.extend(a),
            Value::Object(m) => stack.extend(m.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

fn depth_of(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1)];
    while let Some((v, d)) = stack.pop() {
        let children: Vec<&Value> = match v {
            Value::Array(a) => a.iter().collect(),
            Value::Object(m) => m.values().collect(),
            _ => continue,
        };
        max = max.max(d);
        stack.extend(children.into_iter().map(|c| (c, d + 1)));
    }
    max
}

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::io::Result<T> {
    std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(f)?
        .join()
        .map_err(|_| std::io::Error::other("thread panicked"))
}

fn assert_too_deep<T: std::fmt::Debug>(r: ebbdb::Result<T>) {
    match r {
        Err(Error::BadRequest(m)) => assert_eq!(
            m,
            "item is nested more than 128 levels deep (objects and arrays); the limit is 128"
        ),
        other => panic!("expected 400 for a too deeply nested item, got {other:?}"),
    }
}

#[test]
fn item_128_levels_deep_is_stored_and_reads_back() -> TestResult {
    let (_dir, c) = container()?;
    let item = deep_item(128);
    assert_eq!(depth_of(&item), 128);
    c.create_item(&item)?;
    let back: Value = c.read_item("p", "deep")?;
    assert_eq!(back["nested"], item["nested"]);
    assert_eq!(c.count()?, 1);
    let all: Vec<Value> = c.items()?.collect::<ebbdb::Result<_>>()?;
    assert_eq!(all.len(), 1);
    c.upsert_item(&item)?;
    c.replace_item("p", "deep", &item)?;
    Ok(())
}

#[test]
fn item_129_levels_deep_is_refused() -> TestResult {
    let (_dir, c) = container()?;
    let item = deep_item(129);
    assert_eq!(depth_of(&item), 129);
    assert_too_deep(c.create_item(&item));
    assert_too_deep(c.upsert_item(&item));
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn item_100000_levels_deep_is_refused_on_a_small_stack() -> TestResult {
    let (_dir, c) = container()?;
    on_small_stack(move || {
        for depth in [10_000, 100_000] {
            let item = deep_item(depth);
            assert_too_deep(c.create_item(&item));
            assert_too_deep(c.upsert_item(&item));
            assert_too_deep(c.replace_item("p", "deep", &item));
            drop_deep(item);
        }
        assert_eq!(c.count().ok(), Some(0));
    })?;
    Ok(())
}

/// A typed item with a recursive shape: each `Some(Box<Node>)` is one more object level.
#[derive(Serialize, Deserialize)]
struct Node {
    id: String,
    pk: String,
    next: Option<Box<Node>>,
}

impl Node {
    fn chain(depth: usize) -> Node {
        let mut n = Node {
            id: "deep".into(),
            pk: "p".into(),
            next: None,
        };
        for _ in 1..depth {
            n = Node {
                id: "deep".into(),
                pk: "p".into(),
                next: Some(Box::new(n)),
            };
        }
        n
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(mut n) = next {
            next = n.next.take();
        }
    }
}

#[test]
fn typed_item_10000_levels_deep_is_refused_on_a_small_stack() -> TestResult {
    let (_dir, c) = container()?;
    on_small_stack(move || {
        assert_too_deep(c.create_item(&Node::chain(10_000)));
        assert_too_deep(c.create_item(&Node::chain(129)));
        let ok = c.create_item(&Node::chain(128)).map(|v| depth_of(&v));
        assert_eq!(ok.ok(), Some(128));
        let back: Option<Node> = c.read_item("p", "deep").ok();
        assert!(back.is_some());
    })?;
    Ok(())
}
