//! TTL scenarios ported from the Azure Cosmos DB SDK test suites (the .NET, Java and Python
//! "time to live" tests). The SDK tests sleep in real time; here a `ManualClock` is moved, and
//! every time is in seconds after the item was created.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{Container, ContainerProperties, Database, DefaultTtl, Options, SyncPolicy};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

struct Env {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
}

impl Env {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        // Start half-way through a second, as a real SDK test would.
        let clock = ManualClock::at_unix_millis(T0 * 1000 + 500);
        let db = Database::open_with(
            dir.path(),
            Options::default()
                .clock(clock.clone())
                .sync(SyncPolicy::Never),
        )?;
        Ok(Self {
            _dir: dir,
            clock,
            db,
        })
    }

    fn container(&self, ttl: DefaultTtl) -> ebbdb::Result<Container> {
        self.db
            .create_container(ContainerProperties::new("sessions", "/userId").with_default_ttl(ttl))
    }

    /// Moves the clock to `secs` seconds after the items were created.
    fn at(&self, secs: u64) {
        self.clock.set_unix_millis((T0 + secs) * 1000 + 500);
    }

    fn sleep(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }
}

fn doc(id: &str) -> Value {
    json!({"id": id, "userId": "u1", "cart": ["book"], "total": 12.5})
}

fn doc_ttl(id: &str, ttl: i64) -> Value {
    json!({"id": id, "userId": "u1", "cart": ["book"], "total": 12.5, "ttl": ttl})
}

/// True on 200, false on 404; other errors fail the test.
fn readable(c: &Container, id: &str) -> ebbdb::Result<bool> {
    match c.read_item::<Value>("u1", id) {
        Ok(v) => {
            assert_eq!(v["id"], id);
            assert_eq!(v["total"], 12.5);
            Ok(true)
        }
        Err(e) if e.status_code() == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[test]
fn container_ttl_5_item_without_ttl_is_gone_at_7s() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    c.create_item(&doc("d"))?;
    env.at(4);
    assert!(readable(&c, "d")?);
    env.at(7);
    assert!(!readable(&c, "d")?);
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn container_ttl_5_item_ttl_minus_1_is_readable_at_5s() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    c.create_item(&doc_ttl("d", -1))?;
    c.create_item(&doc("control"))?;
    env.at(5);
    assert!(readable(&c, "d")?);
    assert!(!readable(&c, "control")?);
    env.at(10_000);
    assert!(readable(&c, "d")?);
    Ok(())
}

#[test]
fn container_ttl_5_item_ttl_2_is_gone_at_4s() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    c.create_item(&doc_ttl("d", 2))?;
    env.at(1);
    assert!(readable(&c, "d")?);
    env.at(4);
    assert!(!readable(&c, "d")?);
    Ok(())
}

#[test]
fn container_ttl_5_item_ttl_8_readable_at_6s_gone_at_10s() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    c.create_item(&doc_ttl("d", 8))?;
    env.at(6);
    assert!(readable(&c, "d")?, "own ttl 8 outlives the container's 5");
    env.at(10);
    assert!(!readable(&c, "d")?);
    Ok(())
}

#[test]
fn container_ttl_minus_1_items_without_ttl_and_minus_1_never_expire() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::NeverExpire)?;
    c.create_item(&doc("plain"))?;
    c.create_item(&doc_ttl("never", -1))?;
    env.at(1000);
    assert!(readable(&c, "plain")?);
    assert!(readable(&c, "never")?);
    assert_eq!(c.count()?, 2);
    Ok(())
}

#[test]
fn container_ttl_minus_1_item_ttl_2_is_gone_at_4s() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::NeverExpire)?;
    c.create_item(&doc_ttl("d", 2))?;
    env.at(1);
    assert!(readable(&c, "d")?);
    env.at(4);
    assert!(!readable(&c, "d")?);
    Ok(())
}

#[test]
fn container_without_ttl_item_ttl_5_is_readable_at_7s() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    let stored = c.create_item(&doc_ttl("d", 5))?;
    assert_eq!(stored["ttl"], 5);
    env.at(7);
    assert!(readable(&c, "d")?);
    env.at(1000);
    assert!(readable(&c, "d")?);
    Ok(())
}

#[test]
fn container_ttl_8_delete_after_expiry_is_404_and_recreate_succeeds() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(8))?;
    c.create_item(&doc("d"))?;
    env.at(10);
    assert_eq!(
        c.delete_item("u1", "d").err().map(|e| e.status_code()),
        Some(404)
    );
    let again = c.create_item(&json!({"id": "d", "userId": "u1", "cart": [], "total": 12.5}))?;
    assert_eq!(again["_ts"], json!(T0 + 10));
    let read: Value = c.read_item("u1", "d")?;
    assert_eq!(read["cart"], json!([]));
    env.at(17);
    assert!(readable(&c, "d")?);
    env.at(18);
    assert!(!readable(&c, "d")?);
    Ok(())
}

#[test]
fn upsert_at_3s_restarts_the_countdown() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&doc("d"))?;
    env.sleep(3);
    c.upsert_item(&json!({"id": "d", "userId": "u1", "cart": ["book", "pen"], "total": 12.5}))?;
    env.at(10);
    assert!(
        readable(&c, "d")?,
        "without the upsert it would be gone at 10"
    );
    let read: Value = c.read_item("u1", "d")?;
    assert_eq!(read["cart"], json!(["book", "pen"]));
    env.at(12);
    assert!(readable(&c, "d")?);
    env.at(13);
    assert!(!readable(&c, "d")?);
    Ok(())
}

#[test]
fn iteration_returns_nothing_after_expiry() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    for i in 0..10 {
        c.create_item(&json!({"id": format!("d{i}"), "userId": format!("u{}", i % 3)}))?;
    }
    env.at(4);
    assert_eq!(c.items()?.count(), 10);
    assert_eq!(c.items_in_partition("u1")?.count(), 3);
    env.at(5);
    assert_eq!(c.items()?.count(), 0);
    for u in ["u0", "u1", "u2"] {
        assert_eq!(c.items_in_partition(u)?.count(), 0);
    }
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn replacing_container_without_default_ttl_turns_ttl_off_for_new_items() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    let replaced = env
        .db
        .replace_container(ContainerProperties::new("sessions", "/userId"))?;
    assert_eq!(replaced.properties().default_ttl, DefaultTtl::Off);
    assert!(replaced
        .properties()
        .to_json_value()
        .get("defaultTtl")
        .is_none());
    assert_eq!(
        env.db.container("sessions")?.properties().default_ttl,
        DefaultTtl::Off
    );
    c.create_item(&doc("plain"))?;
    c.create_item(&doc_ttl("own", 2))?;
    env.at(1000);
    assert!(readable(&c, "plain")?);
    assert!(readable(&c, "own")?, "own ttl is ignored while TTL is off");
    assert!(readable(&replaced, "own")?);
    assert_eq!(c.count()?, 2);
    Ok(())
}
