//! Writes racing `delete_keyspace` either land before the delete or fail with 404; none
//! succeeds into a keyspace that is already gone, and none leaves an armed timer behind.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl};

#[test]
fn writes_racing_a_keyspace_delete_leave_nothing_behind() -> ebbdb::Result<()> {
    for threads in [2usize, 3, 4, 8] {
        for round in 0..20 {
            let dir = tempfile::tempdir()?;
            let store = Store::open_with(
                dir.path(),
                Options::default()
                    .clock(ManualClock::at_unix_secs(1_700_000_000))
                    .sync(SyncPolicy::Never),
            )?;
            let ks = store.create_keyspace("doomed", DefaultTtl::Seconds(60))?;
            let start = Arc::new(Barrier::new(threads));
            let writers: Vec<_> = (0..threads - 1)
                .map(|t| {
                    let (ks, start) = (ks.clone(), Arc::clone(&start));
                    std::thread::spawn(move || {
                        start.wait();
                        let mut outcomes = Vec::new();
                        for i in 0..200 {
                            let r = ks.put_with_ttl(format!("k{t}-{i}"), b"v", Ttl::Seconds(30));
                            outcomes.push(r.map_err(|e| e.status_code()));
                        }
                        let ttl = ks.set_default_ttl(DefaultTtl::Seconds(90));
                        (outcomes, ttl.map_err(|e| e.status_code()))
                    })
                })
                .collect();
            start.wait();
            std::thread::sleep(Duration::from_micros(50 * round));
            store.delete_keyspace("doomed")?;
            for w in writers {
                let (outcomes, ttl) = w.join().expect("writer");
                // Once one write saw the delete, every later one must too.
                let first_404 = outcomes.iter().position(|r| *r == Err(404));
                if let Some(i) = first_404 {
                    assert!(
                        outcomes[i..].iter().all(|r| *r == Err(404)),
                        "{threads} threads, round {round}: a write succeeded after one saw the delete"
                    );
                }
                assert!(outcomes.iter().all(|r| matches!(r, Ok(()) | Err(404))));
                assert!(matches!(ttl, Ok(()) | Err(404)));
            }
            assert_eq!(
                store.stats().timers_armed,
                0,
                "{threads} threads, round {round}: timers armed for a deleted keyspace"
            );
            assert!(store.keyspace("doomed").is_err());
        }
    }
    Ok(())
}
