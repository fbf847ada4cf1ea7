//! The time floor recovered at open covers every time the engine has durably used: `CLOCK`,
//! the high-water mark written with every manifest, and every default-TTL change in the
//! manifest's histories. Losing `CLOCK` and a clock that steps back revive nothing. Issue 9,
//! finding 11.

mod common;

use std::time::Duration;

use common::{clock, opts, T0};
use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Store, Ttl};

#[test]
fn default_ttl_change_time_is_a_floor_for_now_after_losing_clock() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        ks.put("item", "v")?;
        c.advance(Duration::from_secs(100));
        ks.set_default_ttl(DefaultTtl::Seconds(10))?;
        assert_eq!(ks.get("item")?, None, "expired by the default change");
    }
    std::fs::remove_file(dir.path().join("CLOCK"))?;
    // The clock stepped back to before the change.
    let back = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&back))?;
    assert!(store.now_unix_millis() >= (T0 + 100) * 1000);
    assert_eq!(store.keyspace("ks")?.get("item")?, None, "revived");
    Ok(())
}

#[test]
fn manifest_high_water_is_a_floor_for_now_after_losing_clock() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::NeverExpire)?;
        store.create_keyspace("other", DefaultTtl::Off)?;
        ks.put_with_ttl("item", "v", Ttl::Seconds(20))?;
        c.advance(Duration::from_secs(50));
        assert_eq!(ks.get("item")?, None);
        // A manifest write at T0 + 50 that leaves no history entry of that time behind.
        store.delete_keyspace("other")?;
    }
    std::fs::remove_file(dir.path().join("CLOCK"))?;
    let back = ManualClock::at_unix_secs(T0);
    let store = Store::open_with(dir.path(), opts(&back))?;
    assert!(store.now_unix_millis() >= (T0 + 50) * 1000);
    assert_eq!(store.keyspace("ks")?.get("item")?, None, "revived");
    Ok(())
}
