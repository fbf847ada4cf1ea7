//! `_ts` and expiry use the same instant: the one the engine stamps on the record.
//!
//! A clock that moves a little on every read makes the document layer's and the engine's
//! clock reads fall in different seconds whenever they are separate reads. The item must then
//! still expire exactly at `_ts + ttl` (docs/contract.md §1), not a second later, and `_ts` must
//! be what a reopen finds in the record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebbdb::clock::Clock;
use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, SyncPolicy};
use serde_json::{json, Value};

const T0: u64 = 1_700_000_000;

/// Unix milliseconds that advance by `step` after every read.
#[derive(Debug, Clone, Default)]
struct SteppingClock {
    ms: Arc<AtomicU64>,
    step: Arc<AtomicU64>,
}

impl Clock for SteppingClock {
    fn now_unix_millis(&self) -> u64 {
        let step = self.step.load(Ordering::SeqCst);
        self.ms.fetch_add(step, Ordering::SeqCst)
    }

    fn drives_background(&self) -> bool {
        false
    }
}

fn opts(clock: &SteppingClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
}

#[test]
fn an_item_expires_exactly_at_ts_plus_ttl() -> ebbdb::Result<()> {
    for write in ["create", "upsert", "replace"] {
        let dir = tempfile::tempdir()?;
        let clock = SteppingClock::default();
        clock.ms.store(T0 * 1000 + 900, Ordering::SeqCst);
        let db = Database::open_with(dir.path(), opts(&clock))?;
        let c = db.create_container(
            ContainerProperties::new("c", "/pk").with_default_ttl(DefaultTtl::NeverExpire),
        )?;
        if write == "replace" {
            c.create_item(&json!({"id": "a", "pk": "p"}))?;
        }
        // Every clock read from here on moves time by 300 ms: two separate reads 900 ms into
        // a second land in different seconds.
        let now = db.store().now_unix_millis();
        clock.ms.store(now - now % 1000 + 900, Ordering::SeqCst);
        clock.step.store(300, Ordering::SeqCst);
        let item = json!({"id": "a", "pk": "p", "ttl": 5});
        let stored = match write {
            "create" => c.create_item(&item)?,
            "upsert" => c.upsert_item(&item)?,
            _ => c.replace_item("p", "a", &item)?,
        };
        clock.step.store(0, Ordering::SeqCst);
        let ts = stored["_ts"].as_u64().expect("_ts");
        let read: Value = c.read_item("p", "a")?;
        assert_eq!(read["_ts"], stored["_ts"], "{write}: stored _ts");

        clock.ms.store((ts + 5) * 1000 - 1, Ordering::SeqCst);
        assert!(
            c.read_item::<Value>("p", "a").is_ok(),
            "{write}: live until _ts + ttl"
        );
        clock.ms.store((ts + 5) * 1000, Ordering::SeqCst);
        let gone = c.read_item::<Value>("p", "a");
        assert_eq!(
            gone.map_err(|e| e.status_code()).err(),
            Some(404),
            "{write}: the item must be expired at _ts + ttl = {}",
            ts + 5
        );
    }
    Ok(())
}
