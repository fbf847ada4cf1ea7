//! Regression (found in review): `raise_time_fence` used to publish FENCE_PENDING, then call
//! the user's `Clock`. If that
//! call panics, the fence stays PENDING for ever (no `TimeFence` exists yet to drop it), and
//! every later `now_ms()` (every read, write, scan, stats) spins for ever.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use ebbdb::clock::{Clock, ManualClock};
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

#[derive(Debug, Clone)]
struct FlakyClock {
    inner: ManualClock,
    panic_next: Arc<AtomicBool>,
}

impl Clock for FlakyClock {
    fn now_unix_millis(&self) -> u64 {
        if self.panic_next.swap(false, Ordering::SeqCst) {
            panic!("clock source failed");
        }
        self.inner.now_unix_millis()
    }
    fn drives_background(&self) -> bool {
        false
    }
}

#[test]
fn a_panicking_clock_during_set_default_ttl_wedges_the_store() -> ebbdb::Result<()> {
    let dir = tempfile::tempdir()?;
    let panic_next = Arc::new(AtomicBool::new(false));
    let clock = FlakyClock {
        inner: ManualClock::at_unix_secs(1_700_000_000),
        panic_next: Arc::clone(&panic_next),
    };
    let store = Store::open_with(
        dir.path(),
        Options::default().clock(clock).sync(SyncPolicy::Never),
    )?;
    let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
    ks.put(b"a", b"1")?;

    panic_next.store(true, Ordering::SeqCst);
    let ks2 = ks.clone();
    let r = std::thread::spawn(move || ks2.set_default_ttl(DefaultTtl::Seconds(60))).join();
    assert!(r.is_err(), "set_default_ttl panicked with the clock");

    // The clock works again. A read must answer.
    let (tx, rx) = mpsc::channel();
    let ks3 = ks.clone();
    std::thread::spawn(move || {
        let _ = tx.send(ks3.get(b"a").map(|v| v.is_some()));
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(r) => assert!(r?),
        Err(_) => panic!("a get() hung for 5 s after a clock panic inside set_default_ttl"),
    }
    Ok(())
}
