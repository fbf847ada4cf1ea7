//! What survives a reopen (containers, items, `_etag`s, TTL history), typed items, nested
//! partition key paths and partition scans.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{
    Container, ContainerProperties, Database, DefaultTtl, IndexingMode, ItemOptions, Options,
    PartitionKey,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

/// A directory and a clock; the database is opened and closed around them.
struct Env {
    dir: tempfile::TempDir,
    clock: ManualClock,
}

impl Env {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        Ok(Self {
            dir: tempfile::tempdir()?,
            clock: ManualClock::at_unix_secs(T0),
        })
    }

    fn open(&self) -> ebbdb::Result<Database> {
        Database::open_with(
            self.dir.path(),
            Options::default().clock(self.clock.clone()),
        )
    }

    fn at(&self, secs: u64) {
        self.clock.set_unix_millis((T0 + secs) * 1000);
    }
}

fn status<T>(r: ebbdb::Result<T>) -> Option<u16> {
    r.err().map(|e| e.status_code())
}

fn all(c: &Container) -> ebbdb::Result<Vec<Value>> {
    c.items()?.collect()
}

fn ids_in(c: &Container, pk: impl Into<PartitionKey>) -> ebbdb::Result<Vec<String>> {
    let mut out = Vec::new();
    for v in c.items_in_partition(pk)? {
        out.push(v?["id"].as_str().unwrap_or("<no id>").to_owned());
    }
    Ok(out)
}

#[test]
fn containers_items_and_etags_survive_reopen() -> TestResult {
    let env = Env::new()?;
    let mut stored = Vec::new();
    {
        let db = env.open()?;
        let off = db.create_container(ContainerProperties::new("off", "/pk"))?;
        let never = db.create_container(
            ContainerProperties::new("never", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
        )?;
        let secs = db.create_container(
            ContainerProperties::new("secs", "/tenant")
                .with_default_ttl(DefaultTtl::Seconds(3600))
                .with_indexing_mode(IndexingMode::Lazy),
        )?;
        stored.push(off.create_item(&json!({"id": "a", "pk": "p", "n": [1, 2, {"x": null}]}))?);
        stored.push(never.create_item(&json!({"id": "b", "pk": 7, "s": "ünïcødé", "ttl": 50}))?);
        env.clock.advance(Duration::from_secs(3));
        stored.push(secs.create_item(&json!({"id": "c", "tenant": "t", "f": 1.25}))?);
        // A later write replaces the first version; only the last etag must survive.
        stored.push(secs.upsert_item(&json!({"id": "d", "tenant": "t", "v": 1}))?);
        let last = secs.upsert_item(&json!({"id": "d", "tenant": "t", "v": 2}))?;
        assert_ne!(stored.last().map(|v| &v["_etag"]), Some(&last["_etag"]));
        stored.pop();
        stored.push(last);
    }
    let db = env.open()?;
    let list = db.containers()?;
    let summary: Vec<_> = list
        .iter()
        .map(|p| {
            (
                p.id.as_str(),
                p.partition_key_path.as_str(),
                p.default_ttl,
                p.indexing_mode,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "never",
                "/pk",
                DefaultTtl::NeverExpire,
                IndexingMode::Consistent
            ),
            ("off", "/pk", DefaultTtl::Off, IndexingMode::Consistent),
            (
                "secs",
                "/tenant",
                DefaultTtl::Seconds(3600),
                IndexingMode::Lazy
            ),
        ]
    );
    let json_ttls: Vec<_> = list
        .iter()
        .map(|p| p.to_json_value().get("defaultTtl").cloned())
        .collect();
    assert_eq!(json_ttls, [Some(json!(-1)), None, Some(json!(3600))]);
    let off = db.container("off")?;
    let never = db.container("never")?;
    let secs = db.container("secs")?;
    let a: Value = off.read_item("p", "a")?;
    let b: Value = never.read_item(7, "b")?;
    let c: Value = secs.read_item("t", "c")?;
    let d: Value = secs.read_item("t", "d")?;
    assert_eq!([a, b, c, d].as_slice(), stored.as_slice());
    assert_eq!(secs.count()?, 2);
    // Etags from before the reopen still work as preconditions.
    let etag = stored[3]["_etag"].as_str().ok_or("no etag")?.to_owned();
    let d3 = secs.replace_item_with(
        "t",
        "d",
        &json!({"id": "d", "tenant": "t", "v": 3}),
        &ItemOptions::default().if_match(etag.clone()),
    )?;
    let fresh = d3["_etag"].as_str().ok_or("no etag")?;
    assert!(
        stored.iter().all(|v| v["_etag"].as_str() != Some(fresh)),
        "an etag was reused across a reopen"
    );
    assert_eq!(
        status(secs.delete_item_with("t", "d", &ItemOptions::default().if_match(etag))),
        Some(412)
    );
    Ok(())
}

#[test]
fn caller_supplied_system_properties_are_ignored() -> TestResult {
    let env = Env::new()?;
    let db = env.open()?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    let v = c.create_item(&json!({"id": "a", "pk": "p", "_ts": 5, "_etag": "\"mine\""}))?;
    assert_eq!(v["_ts"], json!(T0));
    assert_ne!(v["_etag"], json!("\"mine\""));
    assert!(v["_etag"].is_string());
    let read: Value = c.read_item("p", "a")?;
    assert_eq!(read, v);
    Ok(())
}

#[test]
fn ttl_history_survives_reopen() -> TestResult {
    let env = Env::new()?;
    {
        let db = env.open()?;
        let c = db.create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(100)),
        )?;
        c.create_item(&json!({"id": "retimed", "pk": "p"}))?; // deadline 100, then 60
        c.create_item(&json!({"id": "expired", "pk": "p", "ttl": 10}))?;
        env.at(50);
        db.replace_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(60)),
        )?;
    }
    {
        let db = env.open()?;
        let c = db.container("c")?;
        assert_eq!(c.properties().default_ttl, DefaultTtl::Seconds(60));
        env.at(59);
        let read: Value = c.read_item("p", "retimed")?;
        assert_eq!(read["_ts"], json!(T0));
        assert_eq!(status(c.read_item::<Value>("p", "expired")), Some(404));
        // Turn TTL off after `expired` expired but never observe it in this process again.
        db.replace_container(ContainerProperties::new("c", "/pk"))?;
    }
    let db = env.open()?;
    let c = db.container("c")?;
    assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
    env.at(10_000);
    assert_eq!(status(c.read_item::<Value>("p", "expired")), Some(404));
    let read: Value = c.read_item("p", "retimed")?;
    assert_eq!(read["id"], "retimed", "TTL is off: no longer expires");
    assert_eq!(c.count()?, 1);
    Ok(())
}

#[test]
fn ttl_turned_on_before_reopen_expires_old_items() -> TestResult {
    let env = Env::new()?;
    {
        let db = env.open()?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        c.create_item(&json!({"id": "old", "pk": "p"}))?;
        env.at(100);
        c.create_item(&json!({"id": "new", "pk": "p"}))?;
        db.replace_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(30)),
        )?;
    }
    let db = env.open()?;
    let c = db.container("c")?;
    assert_eq!(status(c.read_item::<Value>("p", "old")), Some(404));
    assert_eq!(ids_in(&c, "p")?, ["new"]);
    env.at(130);
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn delete_container_then_reopen_is_gone_and_recreate_starts_empty() -> TestResult {
    let env = Env::new()?;
    {
        let db = env.open()?;
        let c = db.create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(10)),
        )?;
        let keep = db.create_container(ContainerProperties::new("keep", "/pk"))?;
        for i in 0..10 {
            c.create_item(&json!({"id": format!("i{i}"), "pk": "p", "ttl": -1}))?;
        }
        keep.create_item(&json!({"id": "k", "pk": "p"}))?;
        db.delete_container("c")?;
    }
    {
        let db = env.open()?;
        assert_eq!(status(db.container("c")), Some(404));
        let ids: Vec<_> = db.containers()?.into_iter().map(|p| p.id).collect();
        assert_eq!(ids, ["keep"]);
        assert_eq!(db.container("keep")?.count()?, 1);
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
        assert_eq!(c.count()?, 0);
        assert!(all(&c)?.is_empty());
        assert_eq!(status(c.read_item::<Value>("p", "i3")), Some(404));
        c.create_item(&json!({"id": "i3", "pk": "p", "gen": 2}))?;
        db.compact_full()?;
    }
    let db = env.open()?;
    let c = db.container("c")?;
    assert_eq!(
        c.count()?,
        1,
        "old items of the deleted container came back"
    );
    let i3: Value = c.read_item("p", "i3")?;
    assert_eq!(i3["gen"], 2);
    assert_eq!(status(c.read_item::<Value>("p", "i4")), Some(404));
    Ok(())
}

#[test]
fn delete_and_recreate_container_without_reopen_starts_empty() -> TestResult {
    let env = Env::new()?;
    let db = env.open()?;
    let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    c.create_item(&json!({"id": "a", "pk": "p"}))?;
    db.delete_container("c")?;
    let c2 = db.create_container(
        ContainerProperties::new("c", "/other").with_default_ttl(DefaultTtl::NeverExpire),
    )?;
    assert_eq!(c2.count()?, 0);
    assert_eq!(c2.properties().partition_key_path, "/other");
    assert_eq!(status(c2.read_item::<Value>("p", "a")), Some(404));
    assert_eq!(
        status(c.count()),
        Some(404),
        "the old handle is for the deleted one"
    );
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    sku: String,
    qty: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    id: String,
    customer_id: String,
    total: f64,
    lines: Vec<Line>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<i64>,
    note: Option<String>,
}

/// The same order read with the system properties.
#[derive(Debug, Deserialize)]
struct Stamped {
    id: String,
    #[serde(rename = "_ts")]
    ts: u64,
    #[serde(rename = "_etag")]
    etag: String,
}

#[test]
fn typed_items_round_trip_across_reopen() -> TestResult {
    let env = Env::new()?;
    let o1 = Order {
        id: "SO1".into(),
        customer_id: "C1".into(),
        total: 99.5,
        lines: vec![
            Line {
                sku: "A".into(),
                qty: 2,
            },
            Line {
                sku: "B".into(),
                qty: 1,
            },
        ],
        ttl: Some(3600),
        note: None,
    };
    let o2 = Order {
        id: "SO2".into(),
        customer_id: "C1".into(),
        total: 0.0,
        lines: vec![],
        ttl: None,
        note: Some("gift".into()),
    };
    {
        let db = env.open()?;
        let c = db.create_container(
            ContainerProperties::new("orders", "/customerId")
                .with_default_ttl(DefaultTtl::Seconds(86_400)),
        )?;
        let v = c.create_item(&o1)?;
        assert_eq!(v["customerId"], "C1");
        c.create_item(&o2)?;
        let back: Order = c.read_item("C1", "SO1")?;
        assert_eq!(back, o1);
    }
    let db = env.open()?;
    let c = db.container("orders")?;
    let back1: Order = c.read_item("C1", "SO1")?;
    let back2: Order = c.read_item("C1", "SO2")?;
    assert_eq!(back1, o1);
    assert_eq!(back2, o2);
    let stamped: Stamped = c.read_item("C1", "SO2")?;
    assert_eq!(stamped.id, "SO2");
    assert_eq!(stamped.ts, T0);
    assert!(!stamped.etag.is_empty());
    // A type that does not fit is a 400, not a panic.
    assert_eq!(status(c.read_item::<Vec<u8>>("C1", "SO1")), Some(400));
    // Typed upsert over a typed item.
    let mut o3 = o1.clone();
    o3.total = 1.0;
    o3.ttl = None;
    c.upsert_item(&o3)?;
    let back3: Order = c.read_item("C1", "SO1")?;
    assert_eq!(back3, o3);
    env.at(86_400);
    assert_eq!(status(c.read_item::<Order>("C1", "SO1")), Some(404));
    Ok(())
}

#[test]
fn nested_partition_key_path() -> TestResult {
    let env = Env::new()?;
    {
        let db = env.open()?;
        let c = db.create_container(ContainerProperties::new("people", "/address/zip"))?;
        c.create_item(&json!({"id": "ann", "address": {"zip": 98052, "city": "Redmond"}}))?;
        c.create_item(&json!({"id": "bob", "address": {"zip": 98052}}))?;
        c.create_item(&json!({"id": "cat", "address": {"zip": "98052"}}))?;
        c.create_item(&json!({"id": "dan", "address": {"city": "nowhere"}}))?;
        c.create_item(&json!({"id": "eve"}))?;
        c.create_item(&json!({"id": "fay", "address": {"zip": null}}))?;
        c.create_item(&json!({"id": "gus", "zip": 98052}))?; // top-level zip is not the path
                                                             // Same id in another partition is a different item.
        c.create_item(&json!({"id": "ann", "address": {"zip": 10001}}))?;
        assert_eq!(
            c.create_item(&json!({"id": "ann", "address": {"zip": 98052.0}}))
                .err()
                .map(|e| e.status_code()),
            Some(409)
        );
    }
    let db = env.open()?;
    let c = db.container("people")?;
    assert_eq!(c.properties().partition_key_path, "/address/zip");
    let ann: Value = c.read_item(98052, "ann")?;
    assert_eq!(ann["address"]["city"], "Redmond");
    let ann2: Value = c.read_item(10001, "ann")?;
    assert_eq!(ann2["address"]["zip"], 10001);
    assert_eq!(ids_in(&c, 98052)?, ["ann", "bob"]);
    assert_eq!(ids_in(&c, "98052")?, ["cat"]);
    assert_eq!(ids_in(&c, PartitionKey::UNDEFINED)?, ["dan", "eve", "gus"]);
    assert_eq!(ids_in(&c, PartitionKey::NULL)?, ["fay"]);
    assert_eq!(ids_in(&c, 10001)?, ["ann"]);
    assert_eq!(status(c.read_item::<Value>("98052", "ann")), Some(404));
    assert_eq!(c.count()?, 8);
    c.replace_item(
        98052,
        "bob",
        &json!({"id": "bob", "address": {"zip": 98052, "street": "1 Main"}}),
    )?;
    let bob: Value = c.read_item(98052, "bob")?;
    assert_eq!(bob["address"]["street"], "1 Main");
    Ok(())
}

#[test]
fn items_in_partition_returns_only_that_partition() -> TestResult {
    let env = Env::new()?;
    let items = [
        json!({"id": "s1", "pk": "a"}),
        json!({"id": "s2", "pk": "a"}),
        json!({"id": "s3", "pk": "ab"}), // "a" is a prefix of "ab": must not leak
        json!({"id": "s4", "pk": ""}),
        json!({"id": "s5", "pk": "a\u{0}b"}), // NUL inside the key
        json!({"id": "n1", "pk": null}),
        json!({"id": "u1"}),
        json!({"id": "i1", "pk": 1}),
        json!({"id": "f1", "pk": 1.0}),
        json!({"id": "i10", "pk": 10}),
        json!({"id": "z0", "pk": 0}),
        json!({"id": "zneg", "pk": -0.0}),
        json!({"id": "bt", "pk": true}),
        json!({"id": "bf", "pk": false}),
        json!({"id": "fr", "pk": 1.5}),
    ];
    let check = |c: &Container| -> TestResult {
        assert_eq!(ids_in(c, "a")?, ["s1", "s2"]);
        assert_eq!(ids_in(c, "ab")?, ["s3"]);
        assert_eq!(ids_in(c, "")?, ["s4"]);
        assert_eq!(ids_in(c, "a\u{0}b")?, ["s5"]);
        assert_eq!(ids_in(c, PartitionKey::NULL)?, ["n1"]);
        assert_eq!(ids_in(c, PartitionKey::UNDEFINED)?, ["u1"]);
        // 1 and 1.0 are one partition.
        assert_eq!(ids_in(c, 1i64)?, ["f1", "i1"]);
        assert_eq!(ids_in(c, 1.0)?, ["f1", "i1"]);
        assert_eq!(ids_in(c, 1u32)?, ["f1", "i1"]);
        assert_eq!(ids_in(c, 10)?, ["i10"]);
        assert_eq!(ids_in(c, 0)?, ["z0", "zneg"]);
        assert_eq!(ids_in(c, 1.5)?, ["fr"]);
        assert_eq!(ids_in(c, true)?, ["bt"]);
        assert_eq!(ids_in(c, false)?, ["bf"]);
        assert!(ids_in(c, "b")?.is_empty());
        assert!(ids_in(c, 2)?.is_empty());
        assert!(ids_in(c, "1")?.is_empty(), "string '1' is not number 1");
        let i1: Value = c.read_item(1.0, "i1")?;
        assert_eq!(i1["pk"], 1);
        let f1: Value = c.read_item(1i64, "f1")?;
        assert_eq!(f1["pk"], 1.0);
        assert_eq!(all(c)?.len(), items.len());
        assert_eq!(c.count()?, items.len());
        Ok(())
    };
    {
        let db = env.open()?;
        let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
        for it in &items {
            c.create_item(it)?;
        }
        // Same id, pk 1 written as 1.0: the same item.
        assert_eq!(
            status(c.create_item(&json!({"id": "i1", "pk": 1.0}))),
            Some(409)
        );
        check(&c)?;
    }
    let db = env.open()?;
    let c = db.container("c")?;
    check(&c)?;
    // Deleting through another spelling of the same partition.
    c.delete_item(1.0, "i1")?;
    assert_eq!(ids_in(&c, 1)?, ["f1"]);
    c.delete_item(PartitionKey::NULL, "n1")?;
    assert!(ids_in(&c, PartitionKey::NULL)?.is_empty());
    assert_eq!(ids_in(&c, PartitionKey::UNDEFINED)?, ["u1"]);
    Ok(())
}

#[test]
fn handles_are_clone_send_sync() {
    fn assert_handle<T: Clone + Send + Sync + 'static>() {}
    assert_handle::<Database>();
    assert_handle::<Container>();
}

#[test]
fn reopen_without_hints_sees_the_same_state() -> TestResult {
    let env = Env::new()?;
    let small = || {
        Options::default()
            .clock(env.clock.clone())
            .segment_size(4096)
            .sync(ebbdb::SyncPolicy::Never)
    };
    let expected: Vec<Value>;
    {
        let db = Database::open_with(env.dir.path(), small())?;
        let c = db.create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(20)),
        )?;
        for i in 0..30 {
            let ttl = if i % 3 == 0 { json!(-1) } else { json!(5 + i) };
            c.create_item(
                &json!({"id": format!("i{i:02}"), "pk": "p", "ttl": ttl, "pad": "x".repeat(150)}),
            )?;
        }
        for i in 0..10 {
            c.delete_item("p", &format!("i{:02}", i * 3 + 1))?;
        }
        // Lasting items in a container of their own: more segments for the reopen to read
        // (a merge under the pressure rule would otherwise leave one sealed segment).
        let pad = db.create_container(ContainerProperties::new("pad", "/pk"))?;
        for i in 0..40 {
            pad.create_item(&json!({"id": format!("q{i:02}"), "pk": "p", "pad": "y".repeat(150)}))?;
        }
        env.at(20);
        c.upsert_item(&json!({"id": "i00", "pk": "p", "v": 2}))?;
        db.maintain()?;
        db.compact()?;
        db.replace_container(ContainerProperties::new("c", "/pk"))?;
        expected = all(&c)?;
        let segments = db.stats().segments;
        assert!(
            segments >= 3,
            "several segments to reopen without hints: {segments}"
        );
    }
    // Ids 0..29: multiples of 3 never expire (10), the others had ttl 5 + i and half were
    // deleted; of the rest (i % 3 == 2) those with 5 + i <= 20 expired.
    let ids: Vec<String> = expected
        .iter()
        .map(|v| v["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        ids.len(),
        10 + (0..30).filter(|i| i % 3 == 2 && 5 + i > 20).count()
    );
    for hints in [true, false] {
        let db = Database::open_with(env.dir.path(), small().use_hints(hints))?;
        let c = db.container("c")?;
        assert_eq!(all(&c)?, expected, "use_hints({hints})");
        assert_eq!(c.count()?, expected.len());
        assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
    }
    Ok(())
}
