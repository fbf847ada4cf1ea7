//! `ebbdb::verify` finds nothing wrong in databases that only ebbdb wrote: random puts (with
//! TTLs), deletes, batches, keyspace deletes and re-creates, default-TTL changes, expiry,
//! partial and full compaction, hints written by the background worker and by merges, reopen
//! between rounds. Guards the checks against false alarms (sequence numbers, hint agreement,
//! keyspace ids, the active segment's tail).

mod common;

use std::time::Duration;

use common::{clock, T0};
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl, WriteBatch};

/// xorshift: a seed reproduces a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn databases_ebbdb_wrote_verify_clean() -> Result<(), Box<dyn std::error::Error>> {
    let mut hints = 0;
    for seed in 1..=4u64 {
        let dir = tempfile::tempdir()?;
        let clock = clock();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for round in 0..4 {
            let store = Store::open_with(
                dir.path(),
                Options::default()
                    .clock(clock.clone())
                    .sync(if round % 2 == 0 {
                        SyncPolicy::Never
                    } else {
                        SyncPolicy::Always
                    })
                    .segment_size(4096)
                    .tick_interval(Duration::from_millis(5)),
            )?;
            let names = ["a", "b", "c"];
            for _ in 0..400 {
                let name = names[rng.below(3) as usize];
                let ks = store.keyspace_or_create(name, DefaultTtl::Seconds(50))?;
                let key = format!("k{}", rng.below(60)).into_bytes();
                let value = vec![b'v'; 10 + rng.below(200) as usize];
                match rng.below(20) {
                    0..=7 => ks.put(&key, &value)?,
                    8..=10 => {
                        ks.put_with_ttl(&key, &value, Ttl::Seconds(1 + rng.below(30) as u32))?
                    }
                    11 => ks.put_with_ttl(&key, &value, Ttl::Never)?,
                    12 | 13 => {
                        ks.delete(&key)?;
                    }
                    14 => {
                        let mut b = WriteBatch::new();
                        for j in 0..1 + rng.below(5) {
                            b.put(&ks, format!("b{j}"), &value);
                        }
                        b.delete(&ks, &key);
                        store.write_batch(b)?;
                    }
                    15 => ks.set_default_ttl(match rng.below(3) {
                        0 => DefaultTtl::Off,
                        1 => DefaultTtl::NeverExpire,
                        _ => DefaultTtl::Seconds(1 + rng.below(40) as u32),
                    })?,
                    16 => clock.advance(Duration::from_secs(rng.below(20))),
                    17 => {
                        store.compact()?;
                    }
                    18 if rng.below(10) == 0 => store.delete_keyspace(name)?,
                    18 => {
                        store.maintain()?;
                    }
                    _ => {
                        if rng.below(8) == 0 {
                            store.compact_full()?;
                        }
                    }
                }
            }
            // Give the worker a moment to write hints for freshly sealed segments.
            std::thread::sleep(Duration::from_millis(30));
            drop(store);
            let report = ebbdb::verify(dir.path())?;
            assert!(
                report.is_clean(),
                "seed {seed} round {round}: {:#?}",
                report.problems
            );
            assert!(report.segments >= 1 && report.records > 0);
            hints += report.hints;
            clock.advance(Duration::from_secs(5));
        }
        let _ = T0;
    }
    assert!(hints > 0, "the runs produced hint files to check");
    Ok(())
}
