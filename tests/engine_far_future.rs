//! Issue 9, item 23: write times past 2106.
//!
//! Before the fix the key directory kept write seconds as `u32`, saturated: with the clock at
//! 5e9 s (year 2128) a put succeeded and a get returned `None` at once.

use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{ContainerProperties, Database, DefaultTtl, Error, Expiry, Options, Store, Ttl};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const YEAR_2128: u64 = 5_000_000_000;

fn opts(clock: &ManualClock) -> Options {
    Options::default().clock(clock.clone())
}

#[test]
fn store_works_past_2106() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(YEAR_2128);
    {
        let store = Store::open_with(dir.path(), opts(&clock))?;
        let ks = store.create_keyspace("k", DefaultTtl::Seconds(100))?;
        ks.put(b"inherit", b"1")?;
        ks.put_with_ttl(b"own", b"2", Ttl::Seconds(10))?;
        ks.put_with_ttl(b"never", b"3", Ttl::Never)?;
        assert_eq!(ks.get(b"inherit")?, Some(b"1".to_vec()));
        assert_eq!(
            ks.remaining_ttl(b"own")?,
            Some(Expiry::At {
                unix_secs: YEAR_2128 + 10,
                remaining: Duration::from_secs(10)
            })
        );
        clock.advance(Duration::from_secs(9));
        assert_eq!(ks.get(b"own")?, Some(b"2".to_vec()));
        assert_eq!(ks.len()?, 3);
        clock.advance(Duration::from_secs(1));
        assert_eq!(ks.get(b"own")?, None);
        assert_eq!(ks.len()?, 2);
        store.compact_full()?;
    }
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.keyspace("k")?;
    assert_eq!(ks.get(b"inherit")?, Some(b"1".to_vec()));
    assert_eq!(ks.get(b"own")?, None);
    clock.advance(Duration::from_secs(90));
    assert_eq!(ks.get(b"inherit")?, None);
    assert_eq!(ks.get(b"never")?, Some(b"3".to_vec()));
    Ok(())
}

#[test]
fn documents_carry_ts_past_2106() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(YEAR_2128);
    let db = Database::open_with(dir.path(), opts(&clock))?;
    let c = db.create_container(
        ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
    )?;
    let stored = c.create_item(&json!({"id": "a", "pk": "p", "ttl": 30}))?;
    assert_eq!(stored["_ts"], json!(YEAR_2128));
    let back: Value = c.read_item("p", "a")?;
    assert_eq!(back["_ts"], json!(YEAR_2128));
    clock.advance(Duration::from_secs(30));
    assert!(c
        .read_item::<Value>("p", "a")
        .is_err_and(|e| e.is_not_found()));
    Ok(())
}

/// Write seconds are kept in 40 bits (up to year 36812); a clock beyond that is refused at
/// write time with a clear error instead of storing a wrong `_ts`.
#[test]
fn write_times_beyond_the_representable_range_are_refused() -> TestResult {
    let last = (1u64 << 40) - 1;
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(last);
    let store = Store::open_with(dir.path(), opts(&clock))?;
    let ks = store.create_keyspace("k", DefaultTtl::Off)?;
    ks.put(b"a", b"1")?;
    assert_eq!(ks.get(b"a")?, Some(b"1".to_vec()));
    clock.advance(Duration::from_secs(1));
    match ks.put(b"b", b"2") {
        Err(Error::BadRequest(m)) => assert_eq!(
            m,
            "the clock reads 1099511627776 s since the Unix epoch; write times up to \
             1099511627775 s (year 36812) can be stored"
        ),
        other => panic!("expected 400, got {other:?}"),
    }
    assert!(!store.is_poisoned());
    assert_eq!(ks.get(b"a")?, Some(b"1".to_vec()));
    Ok(())
}
