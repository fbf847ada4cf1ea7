//! `docs/contract.md` §1–§2: every TTL rule of the document layer, one named test per rule (and
//! per cell of the rule 3 matrix). Time is a `ManualClock`; nothing sleeps. Times in comments
//! are seconds after the item's creation unless said otherwise.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{Container, ContainerProperties, Database, DefaultTtl, ItemOptions, Options};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T0: u64 = 1_700_000_000;

/// A database in a temporary directory with a manual clock standing at `T0`.
struct Env {
    dir: tempfile::TempDir,
    clock: ManualClock,
    db: Database,
}

impl Env {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let clock = ManualClock::at_unix_secs(T0);
        let db = Database::open_with(dir.path(), opts(&clock))?;
        Ok(Self { dir, clock, db })
    }

    fn container(&self, ttl: DefaultTtl) -> ebbdb::Result<Container> {
        self.db
            .create_container(ContainerProperties::new("c", "/pk").with_default_ttl(ttl))
    }

    fn set_ttl(&self, ttl: DefaultTtl) -> ebbdb::Result<Container> {
        self.db
            .replace_container(ContainerProperties::new("c", "/pk").with_default_ttl(ttl))
    }

    /// Moves the clock to `secs` seconds after `T0` (forward only).
    fn at(&self, secs: u64) {
        self.clock.set_unix_millis((T0 + secs) * 1000);
    }

    /// Drops the database (every container handle must be gone) and opens it again.
    fn reopen(self) -> Result<Self, Box<dyn std::error::Error>> {
        let Env { dir, clock, db } = self;
        drop(db);
        let db = Database::open_with(dir.path(), opts(&clock))?;
        Ok(Self { dir, clock, db })
    }
}

fn opts(clock: &ManualClock) -> Options {
    Options::default().clock(clock.clone())
}

/// Small segments and no fsync, so merges happen quickly.
fn small_opts(clock: &ManualClock) -> Options {
    opts(clock)
        .segment_size(4096)
        .sync(ebbdb::SyncPolicy::Never)
}

fn item(id: &str, pk: &str) -> Value {
    json!({"id": id, "pk": pk, "body": format!("{id} in {pk}")})
}

fn item_ttl(id: &str, pk: &str, ttl: i64) -> Value {
    json!({"id": id, "pk": pk, "body": format!("{id} in {pk}"), "ttl": ttl})
}

/// The status of a failed call, `None` on success.
fn status<T>(r: ebbdb::Result<T>) -> Option<u16> {
    r.err().map(|e| e.status_code())
}

/// True if `id` in partition `pk` reads back (200), false on 404; any other error fails.
fn live(c: &Container, pk: &str, id: &str) -> ebbdb::Result<bool> {
    match c.read_item::<Value>(pk, id) {
        Ok(v) => {
            assert_eq!(v["id"], id);
            Ok(true)
        }
        Err(e) if e.status_code() == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

fn ids(c: &Container) -> ebbdb::Result<Vec<String>> {
    let mut out = Vec::new();
    for v in c.items()? {
        out.push(v?["id"].as_str().unwrap_or_default().to_owned());
    }
    Ok(out)
}

fn ids_in(c: &Container, pk: &str) -> ebbdb::Result<Vec<String>> {
    let mut out = Vec::new();
    for v in c.items_in_partition(pk)? {
        out.push(v?["id"].as_str().unwrap_or_default().to_owned());
    }
    Ok(out)
}

/// Asserts an item stays readable for a very long time (100 years).
fn assert_never_expires(env: &Env, c: &Container, id: &str) -> TestResult {
    for secs in [1, 10, 1_000, 1_000_000, 100 * 365 * 86_400] {
        env.at(secs);
        assert!(live(c, "p", id)?, "{id} gone at +{secs}s");
    }
    assert_eq!(c.count()?, 1);
    Ok(())
}

/// Asserts an item created at `T0` is readable at `e - 1` and gone from `e` on.
fn assert_expires_at(env: &Env, c: &Container, id: &str, e: u64) -> TestResult {
    env.at(e - 1);
    assert!(live(c, "p", id)?, "{id} gone at {}s", e - 1);
    assert_eq!(c.count()?, 1);
    env.at(e);
    assert!(!live(c, "p", id)?, "{id} alive at {e}s");
    assert_eq!(c.count()?, 0);
    env.at(e + 1_000);
    assert!(!live(c, "p", id)?, "{id} alive at {}s", e + 1_000);
    Ok(())
}

// ---------------------------------------------------------------- §1 time

#[test]
fn section1_ts_is_whole_unix_seconds_of_the_write() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    env.clock.set_unix_millis(T0 * 1000 + 999);
    let stored = c.create_item(&item("a", "p"))?;
    assert_eq!(stored["_ts"], json!(T0));
    env.clock.set_unix_millis((T0 + 1) * 1000);
    let stored = c.upsert_item(&item("a", "p"))?;
    assert_eq!(stored["_ts"], json!(T0 + 1));
    let read: Value = c.read_item("p", "a")?;
    assert_eq!(read["_ts"], json!(T0 + 1));
    Ok(())
}

#[test]
fn section1_boundary_ts_plus_e_equal_now_is_expired() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    // Written 0.7 s into second T0: `_ts` is T0, so the item expires 9.3 s later, at T0 + 10.
    env.clock.set_unix_millis(T0 * 1000 + 700);
    c.create_item(&item("a", "p"))?;
    c.create_item(&item_ttl("b", "p", 3))?;
    env.clock.set_unix_millis((T0 + 3) * 1000 - 1);
    assert!(live(&c, "p", "b")?, "own ttl 3: alive 1 ms before _ts + 3");
    env.clock.set_unix_millis((T0 + 3) * 1000);
    assert!(!live(&c, "p", "b")?, "own ttl 3: expired at _ts + 3 == now");
    env.clock.set_unix_millis((T0 + 10) * 1000 - 1);
    assert!(live(&c, "p", "a")?, "alive 1 ms before _ts + 10");
    assert_eq!(c.count()?, 1);
    env.clock.set_unix_millis((T0 + 10) * 1000);
    assert!(!live(&c, "p", "a")?, "expired at _ts + 10 == now");
    assert_eq!(c.count()?, 0);
    Ok(())
}

// ---------------------------------------------------------------- rule 1

#[test]
fn rule1_default_ttl_is_off_by_default() -> TestResult {
    let env = Env::new()?;
    let props = ContainerProperties::new("c", "/pk");
    assert_eq!(props.default_ttl, DefaultTtl::Off);
    assert!(props.to_json_value().get("defaultTtl").is_none());
    let c = env.db.create_container(props)?;
    assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
    // Off: nothing expires, not even an item with its own ttl.
    c.create_item(&item_ttl("a", "p", 1))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule1_default_ttl_json_forms() -> TestResult {
    let parse = |v: Value| -> ebbdb::Result<DefaultTtl> {
        let mut body = json!({"id": "c", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}});
        if !v.is_null() {
            body["defaultTtl"] = v;
        }
        Ok(ContainerProperties::from_json_value(&body)?.default_ttl)
    };
    assert_eq!(parse(Value::Null)?, DefaultTtl::Off, "absent is Off");
    assert_eq!(parse(json!(-1))?, DefaultTtl::NeverExpire);
    assert_eq!(parse(json!(1))?, DefaultTtl::Seconds(1));
    assert_eq!(
        parse(json!(2_147_483_647))?,
        DefaultTtl::Seconds(2_147_483_647)
    );
    let never = ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::NeverExpire);
    assert_eq!(never.to_json_value()["defaultTtl"], json!(-1));
    let secs = ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::Seconds(90));
    assert_eq!(secs.to_json_value()["defaultTtl"], json!(90));
    Ok(())
}

#[test]
fn rule1_seconds_bounds_one_and_i32_max_accepted_zero_and_above_rejected() -> TestResult {
    let env = Env::new()?;
    for (i, n) in [1u32, 2_147_483_647].into_iter().enumerate() {
        let c = env.db.create_container(
            ContainerProperties::new(format!("ok{i}"), "/pk")
                .with_default_ttl(DefaultTtl::Seconds(n)),
        )?;
        assert_eq!(c.properties().default_ttl, DefaultTtl::Seconds(n));
    }
    for (i, n) in [0u32, 2_147_483_648, u32::MAX].into_iter().enumerate() {
        let r = env.db.create_container(
            ContainerProperties::new(format!("bad{i}"), "/pk")
                .with_default_ttl(DefaultTtl::Seconds(n)),
        );
        assert_eq!(status(r), Some(400), "defaultTtl {n}");
        assert_eq!(status(env.db.container(&format!("bad{i}"))), Some(404));
    }
    Ok(())
}

// ---------------------------------------------------------------- rule 2

#[test]
fn rule2_item_ttl_absent_minus_one_and_range_accepted() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(5))?;
    let absent = c.create_item(&item("absent", "p"))?;
    assert!(absent.get("ttl").is_none());
    for (id, ttl) in [("never", -1i64), ("one", 1), ("max", 2_147_483_647)] {
        let stored = c.create_item(&item_ttl(id, "p", ttl))?;
        assert_eq!(stored["ttl"], json!(ttl), "{id}");
    }
    assert_eq!(c.count()?, 4);
    env.at(1);
    assert!(!live(&c, "p", "one")?);
    env.at(5);
    assert!(!live(&c, "p", "absent")?);
    env.at(2_147_483_646);
    assert!(live(&c, "p", "never")?);
    assert!(live(&c, "p", "max")?, "2147483647 s is about 68 years");
    assert_eq!(c.count()?, 2);
    env.at(2_147_483_647);
    assert!(!live(&c, "p", "max")?);
    assert!(live(&c, "p", "never")?);
    assert_eq!(c.count()?, 1);
    Ok(())
}

// ---------------------------------------------------------------- rule 3: the 9 cells

#[test]
fn rule3_matrix_item_absent_container_off() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    c.create_item(&item("a", "p"))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule3_matrix_item_absent_container_never_expire() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::NeverExpire)?;
    c.create_item(&item("a", "p"))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule3_matrix_item_absent_container_seconds() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    assert_expires_at(&env, &c, "a", 10)
}

#[test]
fn rule3_matrix_item_never_container_off() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    c.create_item(&item_ttl("a", "p", -1))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule3_matrix_item_never_container_never_expire() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::NeverExpire)?;
    c.create_item(&item_ttl("a", "p", -1))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule3_matrix_item_never_container_seconds() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item_ttl("a", "p", -1))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule3_matrix_item_seconds_container_off_is_ignored() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    c.create_item(&item_ttl("a", "p", 5))?;
    assert_never_expires(&env, &c, "a")
}

#[test]
fn rule3_matrix_item_seconds_container_never_expire() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::NeverExpire)?;
    c.create_item(&item_ttl("a", "p", 5))?;
    assert_expires_at(&env, &c, "a", 5)
}

#[test]
fn rule3_matrix_item_seconds_container_seconds_own_ttl_wins() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    // m may exceed n ...
    c.create_item(&item_ttl("long", "p", 20))?;
    // ... or be below it.
    c.create_item(&item_ttl("short", "q", 3))?;
    env.at(2);
    assert!(live(&c, "q", "short")?);
    env.at(3);
    assert!(!live(&c, "q", "short")?);
    assert_eq!(c.count()?, 1);
    assert_expires_at(&env, &c, "long", 20)
}

// ---------------------------------------------------------------- rule 4

#[test]
fn rule4_replace_restarts_countdown() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    env.at(8);
    let stored = c.replace_item("p", "a", &item("a", "p"))?;
    assert_eq!(stored["_ts"], json!(T0 + 8));
    env.at(17);
    assert!(live(&c, "p", "a")?, "replaced at 8: alive at 17");
    env.at(18);
    assert!(!live(&c, "p", "a")?, "replaced at 8: gone at 18");
    Ok(())
}

#[test]
fn rule4_upsert_restarts_countdown() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    env.at(9);
    c.upsert_item(&item("a", "p"))?;
    env.at(18);
    assert!(live(&c, "p", "a")?);
    env.at(19);
    assert!(!live(&c, "p", "a")?);
    Ok(())
}

#[test]
fn rule4_write_restarts_countdown_of_own_ttl() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::NeverExpire)?;
    c.create_item(&item_ttl("a", "p", 5))?;
    env.at(4);
    c.replace_item("p", "a", &item_ttl("a", "p", 5))?;
    env.at(8);
    assert!(live(&c, "p", "a")?);
    env.at(9);
    assert!(!live(&c, "p", "a")?);
    Ok(())
}

#[test]
fn rule4_changing_ttl_is_an_ordinary_update() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(100))?;
    c.create_item(&item_ttl("a", "p", 5))?;
    env.at(3);
    let stored = c.replace_item("p", "a", &item_ttl("a", "p", 20))?;
    assert_eq!(stored["ttl"], json!(20));
    env.at(22);
    assert!(live(&c, "p", "a")?, "ttl 20 written at 3: alive at 22");
    env.at(23);
    assert!(!live(&c, "p", "a")?, "ttl 20 written at 3: gone at 23");
    Ok(())
}

#[test]
fn rule4_removing_ttl_reinherits_the_default() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item_ttl("a", "p", -1))?;
    env.at(100);
    assert!(live(&c, "p", "a")?);
    let stored = c.replace_item("p", "a", &item("a", "p"))?;
    assert!(stored.get("ttl").is_none());
    let read: Value = c.read_item("p", "a")?;
    assert!(read.get("ttl").is_none(), "removed ttl stays removed");
    env.at(109);
    assert!(live(&c, "p", "a")?);
    env.at(110);
    assert!(!live(&c, "p", "a")?, "inherits 10 s from the write at 100");
    Ok(())
}

// ---------------------------------------------------------------- rule 5

/// A container with default 10 holding `a` (expired at 10) and `b` (own ttl -1), clock at 10.
fn expired_setup(env: &Env) -> Result<(Container, Value), Box<dyn std::error::Error>> {
    let c = env.container(DefaultTtl::Seconds(10))?;
    let a = c.create_item(&item("a", "p"))?;
    c.create_item(&item_ttl("b", "p", -1))?;
    env.at(10);
    Ok((c, a))
}

#[test]
fn rule5_expired_point_read_is_404() -> TestResult {
    let env = Env::new()?;
    let (c, _) = expired_setup(&env)?;
    let err = c.read_item::<Value>("p", "a").err();
    assert_eq!(err.as_ref().map(ebbdb::Error::status_code), Some(404));
    assert!(err.is_some_and(|e| e.is_not_found()));
    Ok(())
}

#[test]
fn rule5_expired_replace_is_404_and_writes_nothing() -> TestResult {
    let env = Env::new()?;
    let (c, _) = expired_setup(&env)?;
    assert_eq!(status(c.replace_item("p", "a", &item("a", "p"))), Some(404));
    assert_eq!(status(c.read_item::<Value>("p", "a")), Some(404));
    assert_eq!(c.count()?, 1);
    Ok(())
}

#[test]
fn rule5_expired_delete_is_404() -> TestResult {
    let env = Env::new()?;
    let (c, _) = expired_setup(&env)?;
    assert_eq!(status(c.delete_item("p", "a")), Some(404));
    assert_eq!(c.count()?, 1);
    Ok(())
}

#[test]
fn rule5_conditional_write_with_old_etag_is_404_not_412() -> TestResult {
    let env = Env::new()?;
    let (c, a) = expired_setup(&env)?;
    let etag = a["_etag"].as_str().ok_or("no _etag")?.to_owned();
    let opts = ItemOptions::default().if_match(etag);
    assert_eq!(
        status(c.replace_item_with("p", "a", &item("a", "p"), &opts)),
        Some(404)
    );
    assert_eq!(
        status(c.upsert_item_with(&item("a", "p"), &opts)),
        Some(404)
    );
    assert_eq!(status(c.delete_item_with("p", "a", &opts)), Some(404));
    // A different etag is a 404 too: there is no live item to differ from.
    let other = ItemOptions::default().if_match("\"something-else\"");
    assert_eq!(
        status(c.replace_item_with("p", "a", &item("a", "p"), &other)),
        Some(404)
    );
    assert_eq!(status(c.read_item::<Value>("p", "a")), Some(404));
    Ok(())
}

#[test]
fn rule5_expired_absent_from_count_items_and_partition_scan() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    for id in ["a", "b", "c"] {
        c.create_item(&item(id, "p"))?;
    }
    c.create_item(&item_ttl("keep", "p", -1))?;
    c.create_item(&item("x", "q"))?;
    env.at(5);
    c.upsert_item(&item("b", "p"))?; // b now expires at 15
    env.at(9);
    assert_eq!(c.count()?, 5);
    env.at(10);
    // Nothing purged yet (no maintain, no compaction): counts are still exact.
    assert_eq!(c.count()?, 2);
    assert_eq!(ids(&c)?, ["b", "keep"]);
    assert_eq!(ids_in(&c, "p")?, ["b", "keep"]);
    assert!(ids_in(&c, "q")?.is_empty());
    env.at(15);
    assert_eq!(c.count()?, 1);
    assert_eq!(ids(&c)?, ["keep"]);
    Ok(())
}

#[test]
fn rule5_create_of_expired_id_succeeds_as_if_new() -> TestResult {
    let env = Env::new()?;
    let (c, old) = expired_setup(&env)?;
    let fresh = c.create_item(&json!({"id": "a", "pk": "p", "generation": 2}))?;
    assert_eq!(fresh["_ts"], json!(T0 + 10));
    assert_ne!(fresh["_etag"], old["_etag"]);
    let read: Value = c.read_item("p", "a")?;
    assert_eq!(read["generation"], 2);
    assert!(
        read.get("body").is_none(),
        "nothing of the expired item is left"
    );
    assert_eq!(c.count()?, 2);
    // Its countdown starts at the new write.
    env.at(19);
    assert!(live(&c, "p", "a")?);
    env.at(20);
    assert!(!live(&c, "p", "a")?);
    Ok(())
}

#[test]
fn rule5_upsert_of_expired_id_creates_a_fresh_item() -> TestResult {
    let env = Env::new()?;
    let (c, _) = expired_setup(&env)?;
    c.upsert_item(&json!({"id": "a", "pk": "p", "generation": 2}))?;
    let read: Value = c.read_item("p", "a")?;
    assert_eq!(read["generation"], 2);
    assert!(read.get("body").is_none());
    assert_eq!(read["_ts"], json!(T0 + 10));
    Ok(())
}

// ---------------------------------------------------------------- rule 6

#[test]
fn rule6_off_to_seconds_expires_past_items_at_once() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    c.create_item(&item("old", "p"))?; // _ts 0
    c.create_item(&item_ttl("own5", "p", 5))?; // own ttl ignored while Off
    c.create_item(&item_ttl("own200", "p", 200))?;
    c.create_item(&item_ttl("never", "p", -1))?;
    env.at(50);
    c.create_item(&item("young", "p"))?; // _ts 50
    env.at(100);
    assert_eq!(c.count()?, 5, "nothing expires while Off");
    env.set_ttl(DefaultTtl::Seconds(60))?;
    // At once, in the same second as the change.
    assert!(!live(&c, "p", "old")?, "0 + 60 <= 100");
    assert!(!live(&c, "p", "own5")?, "0 + 5 <= 100");
    assert!(live(&c, "p", "young")?, "50 + 60 > 100");
    assert!(live(&c, "p", "own200")?);
    assert!(live(&c, "p", "never")?);
    assert_eq!(c.count()?, 3);
    env.at(109);
    assert!(live(&c, "p", "young")?);
    env.at(110);
    assert!(!live(&c, "p", "young")?);
    env.at(199);
    assert!(live(&c, "p", "own200")?);
    env.at(200);
    assert!(!live(&c, "p", "own200")?);
    assert_eq!(ids(&c)?, ["never"]);
    Ok(())
}

#[test]
fn rule6_off_to_never_expire_activates_own_ttls() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    c.create_item(&item("inherit", "p"))?;
    c.create_item(&item_ttl("own5", "p", 5))?;
    c.create_item(&item_ttl("own50", "p", 50))?;
    env.at(20);
    env.set_ttl(DefaultTtl::NeverExpire)?;
    assert!(!live(&c, "p", "own5")?);
    assert!(live(&c, "p", "own50")?);
    env.at(50);
    assert!(!live(&c, "p", "own50")?);
    env.at(1_000_000);
    assert!(live(&c, "p", "inherit")?);
    assert_eq!(c.count()?, 1);
    Ok(())
}

#[test]
fn rule6_seconds_to_shorter_seconds_retimes_live_items() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(100))?;
    c.create_item(&item("a", "p"))?;
    env.at(40);
    c.create_item(&item("b", "p"))?;
    env.at(50);
    env.set_ttl(DefaultTtl::Seconds(30))?;
    assert!(!live(&c, "p", "a")?, "0 + 30 <= 50: gone at once");
    assert!(live(&c, "p", "b")?);
    env.at(69);
    assert!(live(&c, "p", "b")?);
    env.at(70);
    assert!(!live(&c, "p", "b")?, "40 + 30");
    Ok(())
}

#[test]
fn rule6_seconds_to_longer_seconds_retimes_live_items() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    env.at(5);
    env.set_ttl(DefaultTtl::Seconds(50))?;
    env.at(10);
    assert!(live(&c, "p", "a")?, "lengthened before it expired");
    env.at(49);
    assert!(live(&c, "p", "a")?);
    db_maintain_and_compact(&env)?;
    assert!(
        live(&c, "p", "a")?,
        "background work does not change the answer"
    );
    env.at(50);
    assert!(!live(&c, "p", "a")?);
    Ok(())
}

fn db_maintain_and_compact(env: &Env) -> ebbdb::Result<()> {
    env.db.maintain()?;
    env.db.compact()?;
    env.db.compact_full()?;
    Ok(())
}

#[test]
fn rule6_turning_off_stops_future_expiry_also_for_own_ttl() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("inherit", "p"))?;
    c.create_item(&item_ttl("own20", "p", 20))?;
    env.at(5);
    env.set_ttl(DefaultTtl::Off)?;
    c.create_item(&item_ttl("later", "p", 1))?;
    env.at(1_000_000);
    db_maintain_and_compact(&env)?;
    for id in ["inherit", "own20", "later"] {
        assert!(live(&c, "p", id)?, "{id}");
    }
    assert_eq!(c.count()?, 3);
    Ok(())
}

#[test]
fn rule6_seconds_to_never_expire_stops_inherited_expiry_only() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("inherit", "p"))?;
    c.create_item(&item_ttl("own20", "p", 20))?;
    env.at(5);
    env.set_ttl(DefaultTtl::NeverExpire)?;
    env.at(19);
    assert_eq!(c.count()?, 2);
    env.at(20);
    assert!(!live(&c, "p", "own20")?);
    env.at(1_000_000);
    assert!(live(&c, "p", "inherit")?);
    assert_eq!(c.count()?, 1);
    Ok(())
}

// ---------------------------------------------------------------- rule 7

#[test]
fn rule7_turning_ttl_off_after_expiry_does_not_revive() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    c.create_item(&item_ttl("own", "p", 5))?;
    env.at(12);
    // Not observed before the change: it still expired under the setting in force then.
    env.set_ttl(DefaultTtl::Off)?;
    assert!(!live(&c, "p", "a")?);
    assert!(!live(&c, "p", "own")?);
    assert_eq!(c.count()?, 0);
    assert!(ids(&c)?.is_empty());
    env.at(1_000);
    assert!(!live(&c, "p", "a")?);
    assert_eq!(status(c.replace_item("p", "a", &item("a", "p"))), Some(404));
    Ok(())
}

#[test]
fn rule7_turning_ttl_off_in_the_second_of_expiry_does_not_revive() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    c.create_item(&item("b", "p"))?;
    env.at(10);
    assert!(!live(&c, "p", "a")?, "observed expired at 10");
    // Same second: the old setting was in force during second 10, so both are expired.
    env.set_ttl(DefaultTtl::Off)?;
    assert!(!live(&c, "p", "a")?);
    assert!(
        !live(&c, "p", "b")?,
        "expired in second 10 even though not read before"
    );
    env.at(11);
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn rule7_lengthening_ttl_after_expiry_does_not_revive() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    c.create_item(&item_ttl("own", "p", 5))?;
    env.at(12);
    env.set_ttl(DefaultTtl::Seconds(1_000))?;
    assert!(!live(&c, "p", "a")?);
    env.set_ttl(DefaultTtl::NeverExpire)?;
    assert!(!live(&c, "p", "a")?);
    assert!(!live(&c, "p", "own")?);
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn rule7_expiry_is_final_across_reopen() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    c.create_item(&item_ttl("keep", "p", -1))?;
    env.at(15);
    env.set_ttl(DefaultTtl::Off)?;
    drop(c);
    let env = env.reopen()?;
    let c = env.db.container("c")?;
    assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
    assert!(!live(&c, "p", "a")?);
    assert!(live(&c, "p", "keep")?);
    assert_eq!(c.count()?, 1);
    env.at(100);
    assert!(!live(&c, "p", "a")?);
    Ok(())
}

#[test]
fn rule7_expiry_is_final_across_compaction() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    c.create_item(&item("b", "p"))?;
    c.create_item(&item_ttl("keep", "p", -1))?;
    env.at(15);
    // b: setting turned off before any purge ran; a: purged first, then turned off.
    env.db.maintain()?;
    env.db.compact_full()?;
    env.set_ttl(DefaultTtl::Off)?;
    env.db.compact_full()?;
    assert!(!live(&c, "p", "a")?);
    assert!(!live(&c, "p", "b")?);
    assert_eq!(c.count()?, 1);
    drop(c);
    let env = env.reopen()?;
    let c = env.db.container("c")?;
    assert!(!live(&c, "p", "a")?);
    assert!(!live(&c, "p", "b")?);
    assert_eq!(ids(&c)?, ["keep"]);
    Ok(())
}

#[test]
fn rule7_expiry_is_final_when_off_before_purge_then_compacted() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    env.at(15);
    env.set_ttl(DefaultTtl::Off)?;
    env.db.maintain()?;
    env.db.compact()?;
    env.db.compact_full()?;
    assert!(!live(&c, "p", "a")?);
    drop(c);
    let env = env.reopen()?;
    let c = env.db.container("c")?;
    assert!(!live(&c, "p", "a")?);
    assert_eq!(c.count()?, 0);
    Ok(())
}

#[test]
fn rule7_clock_stepping_back_revives_nothing() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    env.at(20);
    assert!(!live(&c, "p", "a")?);
    env.clock.set_unix_millis(T0 * 1000);
    assert!(!live(&c, "p", "a")?, "clock stepped back without reopen");
    assert_eq!(c.count()?, 0);
    // Writes are not stamped in the past either.
    let fresh = c.create_item(&item("b", "p"))?;
    assert!(
        fresh["_ts"].as_u64().is_some_and(|ts| ts >= T0 + 20),
        "_ts {} went backwards",
        fresh["_ts"]
    );
    Ok(())
}

#[test]
fn rule7_clock_stepping_back_across_reopen_revives_nothing() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    c.create_item(&item("a", "p"))?;
    c.create_item(&item_ttl("own", "p", 5))?;
    env.at(20);
    assert!(!live(&c, "p", "a")?);
    assert_eq!(c.count()?, 0);
    drop(c);
    env.clock.set_unix_millis(T0 * 1000);
    let env = env.reopen()?;
    let c = env.db.container("c")?;
    assert!(!live(&c, "p", "a")?);
    assert!(!live(&c, "p", "own")?);
    assert_eq!(c.count()?, 0);
    assert!(ids(&c)?.is_empty());
    // The database's "now" did not go back either: a new write is stamped no earlier than 20.
    let fresh = c.create_item(&item("b", "p"))?;
    assert!(
        fresh["_ts"].as_u64().is_some_and(|ts| ts >= T0 + 20),
        "new _ts {} is before the high-water mark",
        fresh["_ts"]
    );
    Ok(())
}

/// The high-water mark of "now" must reach `CLOCK` even when another thread holds the clock
/// file (here: `Store::sync`, which fsyncs it under its mutex) at the moment a read first sees
/// a new second. Otherwise a clean close loses that second, and with the clock stepped back an
/// item that a reader saw expired is alive again after the restart.
#[test]
fn rule7_clock_step_back_across_reopen_with_concurrent_sync_revives_nothing() -> TestResult {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    for trial in 0..20 {
        let env = Env::new()?;
        let c = env.container(DefaultTtl::Seconds(10))?;
        c.create_item(&item("a", "p"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let syncs = Arc::new(AtomicUsize::new(0));
        let syncer = {
            let db = env.db.clone();
            let (stop, syncs) = (Arc::clone(&stop), Arc::clone(&syncs));
            std::thread::spawn(move || -> ebbdb::Result<()> {
                while !stop.load(Ordering::Relaxed) {
                    db.store().sync()?;
                    syncs.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        };
        while syncs.load(Ordering::Relaxed) < 2 {
            std::thread::yield_now();
        }
        env.at(10);
        assert!(!live(&c, "p", "a")?, "trial {trial}: expired at 10");
        stop.store(true, Ordering::Relaxed);
        syncer.join().map_err(|_| "syncer panicked")??;
        drop(c);
        env.clock.set_unix_millis(T0 * 1000);
        let env = env.reopen()?;
        let c = env.db.container("c")?;
        assert!(
            !live(&c, "p", "a")?,
            "trial {trial}: seen expired at 10, alive again after a restart with the clock at 0 \
             (store now = {} ms after T0)",
            env.db.store().now_unix_millis() - T0 * 1000
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- rule 8

#[test]
fn rule8_inherited_default_is_never_written_into_the_item() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(60))?;
    let stored = c.create_item(&item("a", "p"))?;
    assert!(stored.get("ttl").is_none());
    let read: Value = c.read_item("p", "a")?;
    assert!(read.get("ttl").is_none());
    assert_eq!(read["body"], "a in p");
    let listed: Vec<Value> = c.items()?.collect::<ebbdb::Result<_>>()?;
    assert_eq!(listed.len(), 1);
    assert!(listed.iter().all(|v| v.get("ttl").is_none()));
    // Not in the stored bytes either.
    for kv in c.keyspace().iter() {
        let (_, bytes) = kv?;
        let raw: Value = serde_json::from_slice(&bytes)?;
        assert!(raw.get("ttl").is_none(), "stored bytes carry a ttl: {raw}");
    }
    // Changing the default does not write it either.
    env.set_ttl(DefaultTtl::Seconds(90))?;
    drop(c);
    let env = env.reopen()?;
    let c = env.db.container("c")?;
    let read: Value = c.read_item("p", "a")?;
    assert!(read.get("ttl").is_none());
    Ok(())
}

#[test]
fn rule8_explicit_ttl_is_returned_as_stored() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(60))?;
    let off = env
        .db
        .create_container(ContainerProperties::new("off", "/pk"))?;
    for (id, ttl) in [("t30", 30i64), ("never", -1), ("max", 2_147_483_647)] {
        let stored = c.create_item(&item_ttl(id, "p", ttl))?;
        assert_eq!(stored["ttl"], json!(ttl));
        let read: Value = c.read_item("p", id)?;
        assert_eq!(read["ttl"], json!(ttl), "{id}");
    }
    off.create_item(&item_ttl("own", "p", 5))?;
    let read: Value = off.read_item("p", "own")?;
    assert_eq!(read["ttl"], json!(5), "ttl kept as stored even while Off");
    Ok(())
}

// ---------------------------------------------------------------- rules 9 and 10

fn segment_record_bytes(db: &Database) -> u64 {
    db.stats().per_segment.iter().map(|s| s.bytes).sum()
}

#[test]
fn rule9_expiry_writes_no_delete_record() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    for i in 0..20 {
        c.create_item(&item(&format!("i{i}"), "p"))?;
    }
    let before = segment_record_bytes(&env.db);
    env.at(10);
    assert_eq!(c.count()?, 0);
    let reaped = env.db.maintain()?;
    assert_eq!(reaped, 20, "maintain reaps every expired item");
    assert_eq!(
        segment_record_bytes(&env.db),
        before,
        "expiry appended records to the log"
    );
    Ok(())
}

#[test]
fn rule9_dropping_an_expired_record_never_resurrects_an_older_version() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let small = || small_opts(&clock);
    let pad = "x".repeat(300);
    {
        let db = Database::open_with(dir.path(), small())?;
        let c = db.create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
        )?;
        // Old version, never expiring, in an early segment full of live items.
        c.create_item(&json!({"id": "k", "pk": "p", "v": 1, "ttl": -1}))?;
        for i in 0..20 {
            c.create_item(&json!({"id": format!("live{i}"), "pk": "p", "pad": pad}))?;
        }
        // New version with a short ttl, in later segments full of expiring items.
        clock.advance(Duration::from_secs(1));
        c.upsert_item(&json!({"id": "k", "pk": "p", "v": 2, "ttl": 5}))?;
        for i in 0..40 {
            c.create_item(&json!({"id": format!("tmp{i}"), "pk": "p", "pad": pad, "ttl": 5}))?;
        }
        assert!(
            db.stats().segments >= 3,
            "segments: {}",
            db.stats().segments
        );
        clock.advance(Duration::from_secs(3_600));
        assert_eq!(status(c.read_item::<Value>("p", "k")), Some(404));
        db.maintain()?;
        let report = db.compact()?;
        assert!(
            report.segments_merged + report.segments_dropped > 0,
            "the policy merged nothing: {report:?}"
        );
        assert_eq!(status(c.read_item::<Value>("p", "k")), Some(404));
        assert_eq!(c.count()?, 20);
    }
    let db = Database::open_with(dir.path(), small())?;
    let c = db.container("c")?;
    assert_eq!(
        status(c.read_item::<Value>("p", "k")),
        Some(404),
        "old version came back after restart"
    );
    assert_eq!(c.count()?, 20);
    db.compact_full()?;
    assert_eq!(status(c.read_item::<Value>("p", "k")), Some(404));
    drop(c);
    drop(db);
    let db = Database::open_with(dir.path(), small())?;
    let c = db.container("c")?;
    assert_eq!(status(c.read_item::<Value>("p", "k")), Some(404));
    assert_eq!(c.count()?, 20);
    Ok(())
}

#[test]
fn rule9_purged_expired_version_stays_gone_when_ttl_is_turned_off_and_reopened() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(T0);
    let small = || small_opts(&clock);
    let pad = "x".repeat(300);
    let props = |ttl| ContainerProperties::new("c", "/pk").with_default_ttl(ttl);
    {
        let db = Database::open_with(dir.path(), small())?;
        let c = db.create_container(props(DefaultTtl::Seconds(100)))?;
        // v1 never expires; it sits in a segment that stays mostly live.
        c.create_item(&json!({"id": "k", "pk": "p", "v": 1, "ttl": -1}))?;
        for i in 0..20 {
            c.create_item(&json!({"id": format!("live{i}"), "pk": "p", "ttl": -1, "pad": pad}))?;
        }
        // v2 inherits the default and expires, with a segment's worth of company.
        clock.advance(Duration::from_secs(1));
        c.upsert_item(&json!({"id": "k", "pk": "p", "v": 2}))?;
        for i in 0..40 {
            c.create_item(&json!({"id": format!("tmp{i}"), "pk": "p", "pad": pad}))?;
        }
        clock.advance(Duration::from_secs(3_600));
        db.maintain()?;
        let report = db.compact()?;
        assert!(
            report.segments_merged + report.segments_dropped > 0,
            "{report:?}"
        );
        // Turning TTL off now must not bring back v1 (nor v2).
        db.replace_container(props(DefaultTtl::Off))?;
        assert_eq!(status(c.read_item::<Value>("p", "k")), Some(404));
        assert_eq!(c.count()?, 20);
    }
    for _ in 0..2 {
        let db = Database::open_with(dir.path(), small())?;
        let c = db.container("c")?;
        assert_eq!(c.properties().default_ttl, DefaultTtl::Off);
        assert_eq!(
            status(c.read_item::<Value>("p", "k")),
            Some(404),
            "an older version came back"
        );
        assert_eq!(c.count()?, 20);
        db.compact_full()?;
    }
    Ok(())
}

#[test]
fn rule10_purge_is_observable_only_through_stats() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    let pad = "y".repeat(500);
    for i in 0..50 {
        c.create_item(&json!({"id": format!("e{i}"), "pk": "p", "pad": pad}))?;
    }
    for i in 0..5 {
        c.create_item(&json!({"id": format!("k{i}"), "pk": "p", "ttl": -1, "n": i}))?;
    }
    let fresh = env.db.stats();
    assert_eq!(fresh.expired_items, 0);
    env.at(10);
    // Exact before any purge.
    assert_eq!(c.count()?, 5);
    let before = env.db.stats();
    assert_eq!(before.expired_items, 50, "{before:?}");
    assert!(before.expired_bytes >= 50 * 500, "{before:?}");
    env.db.maintain()?;
    assert_eq!(c.count()?, 5);
    let report = env.db.compact_full()?;
    assert!(report.bytes_after < report.bytes_before, "{report:?}");
    let after = env.db.stats();
    assert_eq!(after.expired_items, 0, "{after:?}");
    assert_eq!(after.expired_bytes, 0, "{after:?}");
    assert_eq!(after.oldest_unpurged_expiry, None);
    assert!(
        after.segment_bytes + 50 * 500 <= before.segment_bytes,
        "purge freed too little: {} -> {}",
        before.segment_bytes,
        after.segment_bytes
    );
    // The purge changes nothing a reader can see.
    assert_eq!(c.count()?, 5);
    assert_eq!(ids(&c)?, ["k0", "k1", "k2", "k3", "k4"]);
    let k3: Value = c.read_item("p", "k3")?;
    assert_eq!(k3["n"], 3);
    assert_eq!(status(c.read_item::<Value>("p", "e7")), Some(404));
    Ok(())
}

/// Creates `n` padded items `e0..` inheriting the default, and `k0..k4` with ttl -1.
fn padded(c: &Container, n: usize) -> ebbdb::Result<()> {
    let pad = "y".repeat(500);
    for i in 0..n {
        c.create_item(&json!({"id": format!("e{i}"), "pk": "p", "pad": pad}))?;
    }
    for i in 0..5 {
        c.create_item(&json!({"id": format!("k{i}"), "pk": "p", "ttl": -1, "n": i}))?;
    }
    Ok(())
}

/// Runs expiry and a full compaction; asserts every expired byte is gone from disk and the
/// five `k` items are intact.
fn assert_purged(env: &Env, c: &Container, expired: u64) -> TestResult {
    let before = env.db.stats();
    assert_eq!(before.expired_items, expired, "{before:?}");
    env.db.maintain()?;
    env.db.compact_full()?;
    let after = env.db.stats();
    assert_eq!(after.expired_items, 0, "{after:?}");
    assert_eq!(after.expired_bytes, 0, "{after:?}");
    assert!(
        after.segment_bytes + expired * 500 <= before.segment_bytes,
        "purge freed too little: {} -> {}",
        before.segment_bytes,
        after.segment_bytes
    );
    assert_eq!(c.count()?, 5);
    assert_eq!(ids(c)?, ["k0", "k1", "k2", "k3", "k4"]);
    Ok(())
}

#[test]
fn rule10_items_expired_by_turning_ttl_on_are_purged() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Off)?;
    padded(&c, 30)?;
    env.at(100);
    env.set_ttl(DefaultTtl::Seconds(60))?;
    assert_eq!(c.count()?, 5);
    assert_purged(&env, &c, 30)
}

#[test]
fn rule10_items_expired_by_shortening_ttl_are_purged() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(1_000))?;
    padded(&c, 30)?;
    env.at(10);
    env.db.maintain()?;
    env.set_ttl(DefaultTtl::Seconds(5))?;
    assert_eq!(c.count()?, 5);
    assert_purged(&env, &c, 30)
}

#[test]
fn rule10_lengthened_items_are_purged_after_their_new_deadline() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    padded(&c, 30)?;
    env.at(5);
    env.set_ttl(DefaultTtl::Seconds(50))?;
    env.at(10);
    assert_eq!(env.db.maintain()?, 0, "nothing is due at the old deadline");
    env.db.compact_full()?;
    assert_eq!(c.count()?, 35);
    env.at(50);
    assert_eq!(c.count()?, 5);
    assert_purged(&env, &c, 30)
}

#[test]
fn rule10_items_expired_before_ttl_turned_off_are_still_purged() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    padded(&c, 30)?;
    env.at(20);
    env.set_ttl(DefaultTtl::Off)?;
    assert_eq!(c.count()?, 5);
    assert_purged(&env, &c, 30)
}

#[test]
fn rule10_expired_items_are_purged_after_reopen() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(10))?;
    padded(&c, 30)?;
    env.at(20);
    drop(c);
    let env = env.reopen()?;
    let c = env.db.container("c")?;
    assert_eq!(c.count()?, 5);
    assert_purged(&env, &c, 30)
}

#[test]
fn rule5_scan_sees_one_now() -> TestResult {
    let env = Env::new()?;
    let c = env.container(DefaultTtl::Seconds(100))?;
    for (i, ttl) in [10i64, 20, 30].into_iter().enumerate() {
        c.create_item(&item_ttl(&format!("i{i}"), "p", ttl))?;
    }
    env.at(9);
    let mut it = c.items()?;
    let first = it.next().ok_or("empty scan")??;
    assert_eq!(first["id"], "i0");
    // Time moves on while the scan is open; the scan still answers as of its start.
    env.at(25);
    let rest: Vec<Value> = it.collect::<ebbdb::Result<_>>()?;
    let rest_ids: Vec<_> = rest.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(rest_ids, [json!("i1"), json!("i2")]);
    assert_eq!(ids(&c)?, ["i2"], "a new scan sees the new now");
    Ok(())
}
