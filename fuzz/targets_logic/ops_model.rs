//! Logic of the `ops_model` fuzz target, shared with `tests/fuzz_corpus.rs`.
//!
//! The input bytes are read as a program of at most 64 operations on one keyspace of a store in
//! a fresh directory (`segment_size(4096)`, `SyncPolicy::Never`, a `ManualClock`), run side by
//! side with a plain `BTreeMap` model of `docs/contract.md` §2 that shares no code with the
//! engine. After every operation every read API (`get`, `contains_key`, `remaining_ttl`, `len`,
//! `iter`, `range`, `prefix`) must agree with the model.
//!
//! Each operation is one byte (`op % 13`) followed by its arguments:
//!
//! | op | operation                 | argument bytes                                        |
//! |----|---------------------------|-------------------------------------------------------|
//! | 0  | `put`                     | key, value                                            |
//! | 1  | `put_with_ttl`            | key, value, ttl                                       |
//! | 2  | `delete`                  | key (the returned "was live" is checked)              |
//! | 3  | `write_batch`             | n, then n × (kind, key, value[, ttl])                 |
//! | 4  | `get` of one key          | key                                                   |
//! | 5  | advance the clock         | seconds (`% 16`), milliseconds (`× 4`)                |
//! | 6  | step the clock back       | seconds (the engine's `now` must not go back)         |
//! | 7  | `set_default_ttl`         | setting                                               |
//! | 8  | `maintain` (expiry pass)  |                                                       |
//! | 9  | `compact`                 |                                                       |
//! | 10 | `compact_full`            |                                                       |
//! | 11 | close and reopen          | mode: even = clean close; odd = `sync`, then a crash  |
//! |    |                           | with power loss (`Store::simulate_crash`, then        |
//! |    |                           | `faults::power_loss`): nothing synced may be lost     |
//! | 12 | `sync`                    |                                                       |
//!
//! A key byte picks one of 10 keys (`% 10`), a value byte a value of `3 × byte + 1` bytes (so
//! segments rotate often), a TTL byte `Ttl::Never` (`% 13 == 0`) or `Ttl::Seconds(1..=12)`, a
//! setting byte Off, NeverExpire or `Seconds(1..=12)`.
//!
//! The model (contract §2): the engine's `now` is the largest clock reading seen by any call, in
//! whole seconds; a put stamps that second; an item's lifetime is its own TTL if it has one and
//! the keyspace default is not Off, else the default (Off and NeverExpire: no expiry); the item
//! is expired once `ts + lifetime <= now` under the setting in force at any moment (checked at
//! every event, and expiry is final: a later setting never revives it).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::scratch::scratch_dir;
use ebbdb::clock::{Clock, ManualClock};
use ebbdb::{faults, DefaultTtl, Expiry, Keyspace, Options, Store, SyncPolicy, Ttl, WriteBatch};

const T0_MS: u64 = 1_700_000_000_000;
const MAX_OPS: usize = 64;
const KEYS: u8 = 10;

struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = self.data.get(self.pos).copied();
        self.pos += 1;
        b
    }
}

fn key(b: u8) -> Vec<u8> {
    format!("key-{}", b % KEYS).into_bytes()
}

fn value(b: u8) -> Vec<u8> {
    let mut v = vec![b; 3 * usize::from(b)];
    v.push(b'.');
    v
}

fn ttl(b: u8) -> Ttl {
    match b % 13 {
        0 => Ttl::Never,
        n => Ttl::Seconds(u32::from(n)),
    }
}

fn setting(b: u8) -> DefaultTtl {
    match b % 14 {
        0 => DefaultTtl::Off,
        1 => DefaultTtl::NeverExpire,
        n => DefaultTtl::Seconds(u32::from(n - 1)),
    }
}

#[derive(Debug, Clone)]
struct Item {
    value: Vec<u8>,
    ts: u64,
    own: Option<Ttl>,
}

#[derive(Debug)]
struct Model {
    items: BTreeMap<Vec<u8>, Item>,
    default: DefaultTtl,
    /// Largest clock reading any engine call has seen, in milliseconds.
    high_water_ms: u64,
}

impl Model {
    fn now(&self) -> u64 {
        self.high_water_ms / 1000
    }

    /// Lifetime in seconds under the current setting, `None` for no expiry.
    fn lifetime(&self, it: &Item) -> Option<u64> {
        match (self.default, it.own) {
            (DefaultTtl::Off, _) | (_, Some(Ttl::Never)) | (DefaultTtl::NeverExpire, None) => None,
            (_, Some(Ttl::Seconds(n))) | (DefaultTtl::Seconds(n), None) => Some(u64::from(n)),
        }
    }

    /// An engine call happened with the clock at `clock_ms`: time may move on, and whatever
    /// the setting in force says is expired is gone for good.
    fn observe(&mut self, clock_ms: u64) {
        self.high_water_ms = self.high_water_ms.max(clock_ms);
        self.settle();
    }

    fn settle(&mut self) {
        let now = self.now();
        let dead: Vec<Vec<u8>> = self
            .items
            .iter()
            .filter(|(_, it)| self.lifetime(it).is_some_and(|l| it.ts + l <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in dead {
            self.items.remove(&k);
        }
    }

    fn put(&mut self, k: Vec<u8>, v: Vec<u8>, own: Option<Ttl>) {
        let ts = self.now();
        self.items.insert(k, Item { value: v, ts, own });
    }
}

/// Every read API against the model.
fn check(ks: &Keyspace, model: &Model, step: usize) {
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .items
        .iter()
        .map(|(k, it)| (k.clone(), it.value.clone()))
        .collect();
    let got: Vec<(Vec<u8>, Vec<u8>)> = ks.iter().collect::<Result<_, _>>().expect("iter succeeds");
    assert_eq!(got, want, "step {step}: scan at now={}", model.now());
    assert_eq!(ks.len().expect("len"), want.len(), "step {step}: len");
    assert_eq!(
        ks.is_empty().expect("is_empty"),
        want.is_empty(),
        "step {step}: is_empty"
    );
    for b in 0..KEYS {
        let k = key(b);
        let it = model.items.get(&k);
        assert_eq!(
            ks.get(&k).expect("get"),
            it.map(|i| i.value.clone()),
            "step {step}: get key-{b}"
        );
        assert_eq!(
            ks.contains_key(&k).expect("contains_key"),
            it.is_some(),
            "step {step}"
        );
        let expiry = ks.remaining_ttl(&k).expect("remaining_ttl");
        let want_expiry = it.map(|i| model.lifetime(i).map(|l| i.ts + l));
        let got_expiry = expiry.map(|e| match e {
            Expiry::Never => None,
            Expiry::At { unix_secs, .. } => Some(unix_secs),
        });
        assert_eq!(
            got_expiry, want_expiry,
            "step {step}: remaining_ttl key-{b}"
        );
    }
    let range: Vec<Vec<u8>> = ks
        .range(key(2)..key(6))
        .map(|r| r.map(|(k, _)| k))
        .collect::<Result<_, _>>()
        .expect("range");
    let want_range: Vec<Vec<u8>> = model
        .items
        .range(key(2)..key(6))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(range, want_range, "step {step}: range");
    let prefixed = ks.prefix(b"key-1").filter_map(Result::ok).count();
    let want_prefixed = model
        .items
        .keys()
        .filter(|k| k.starts_with(b"key-1"))
        .count();
    assert_eq!(prefixed, want_prefixed, "step {step}: prefix");
}

fn options(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .segment_size(4096)
        .sync(SyncPolicy::Never)
}

/// Stops the power-loss model's tracking of a directory when a run ends (panics included).
struct Untrack(std::path::PathBuf);

impl Drop for Untrack {
    fn drop(&mut self) {
        faults::untrack(&self.0);
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let dir = scratch_dir();
    let clock = ManualClock::at_unix_millis(T0_MS);
    // The power-loss model watches every fsync, so a crash can put back exactly what was durable.
    faults::track(dir.path()).expect("track the directory");
    let _untrack = Untrack(dir.path().to_path_buf());
    let mut store = Store::open_with(dir.path(), options(&clock)).expect("open");
    let mut ks = store
        .create_keyspace("ks", DefaultTtl::Off)
        .expect("create keyspace");
    let mut model = Model {
        items: BTreeMap::new(),
        default: DefaultTtl::Off,
        high_water_ms: T0_MS,
    };
    let mut input = Input { data, pos: 0 };
    for step in 0..MAX_OPS {
        let Some(op) = input.byte() else { break };
        let mut arg = || input.byte().unwrap_or(0);
        // Every operation below makes at least one engine call, which reads the clock.
        model.observe(clock.now_unix_millis());
        match op % 13 {
            0 => {
                let (k, v) = (key(arg()), value(arg()));
                ks.put(&k, &v).expect("put");
                model.put(k, v, None);
            }
            1 => {
                let (k, v, t) = (key(arg()), value(arg()), ttl(arg()));
                ks.put_with_ttl(&k, &v, t).expect("put_with_ttl");
                model.put(k, v, Some(t));
            }
            2 => {
                let k = key(arg());
                let was = ks.delete(&k).expect("delete");
                assert_eq!(was, model.items.remove(&k).is_some(), "step {step}: delete");
            }
            3 => {
                let n = 1 + arg() % 5;
                let mut batch = WriteBatch::new();
                let mut writes = Vec::new();
                for _ in 0..n {
                    let kind = arg() % 3;
                    let k = key(arg());
                    match kind {
                        0 => {
                            let v = value(arg());
                            batch.put(&ks, &k, &v);
                            writes.push((k, Some((v, None))));
                        }
                        1 => {
                            let (v, t) = (value(arg()), ttl(arg()));
                            batch.put_with_ttl(&ks, &k, &v, t);
                            writes.push((k, Some((v, Some(t)))));
                        }
                        _ => {
                            batch.delete(&ks, &k);
                            writes.push((k, None));
                        }
                    }
                }
                store.write_batch(batch).expect("write_batch");
                for (k, w) in writes {
                    match w {
                        Some((v, t)) => model.put(k, v, t),
                        None => {
                            model.items.remove(&k);
                        }
                    }
                }
            }
            4 => {
                let k = key(arg());
                let got = ks.get(&k).expect("get");
                assert_eq!(
                    got,
                    model.items.get(&k).map(|i| i.value.clone()),
                    "step {step}"
                );
            }
            5 => {
                let ms = u64::from(arg() % 16) * 1000 + u64::from(arg()) * 4;
                clock.advance(Duration::from_millis(ms));
            }
            6 => {
                let back = u64::from(arg()) * 1000;
                clock.set_unix_millis(clock.now_unix_millis().saturating_sub(back));
            }
            7 => {
                let d = setting(arg());
                ks.set_default_ttl(d).expect("set_default_ttl");
                assert_eq!(ks.default_ttl(), d, "step {step}: default_ttl");
                model.default = d;
            }
            8 => {
                store.maintain().expect("maintain");
            }
            9 => {
                store.compact().expect("compact");
            }
            10 => {
                store.compact_full().expect("compact_full");
            }
            11 => {
                let crash = arg() % 2 == 1;
                if crash {
                    // Everything acknowledged is durable after `sync`, so a crash that also
                    // loses the OS cache must lose nothing.
                    store.sync().expect("sync before the crash");
                    store.simulate_crash();
                }
                drop(ks);
                drop(store);
                if crash {
                    faults::power_loss(dir.path()).expect("power loss");
                    faults::track(dir.path()).expect("track again");
                }
                store = Store::open_with(dir.path(), options(&clock)).expect("reopen");
                ks = store.keyspace("ks").expect("keyspace after reopen");
                assert_eq!(
                    ks.default_ttl(),
                    model.default,
                    "step {step}: default after reopen"
                );
            }
            _ => {
                store.sync().expect("sync");
            }
        }
        model.observe(clock.now_unix_millis());
        check(&ks, &model, step);
    }
}

/// Seed inputs: short programs touching every operation.
pub fn seeds() -> Vec<Vec<u8>> {
    vec![
        // puts, a default change, a merge, then sync + crash with power loss, more writes,
        // another crash right after a full merge.
        vec![
            0, 1, 200, 1, 2, 200, 3, 7, 4, 0, 3, 200, 9, 11, 1, 4, 1, 0, 5, 90, 10, 11, 1, 4, 3,
        ],
        // puts, a TTL put, advance past it, reopen.
        vec![0, 1, 10, 1, 2, 20, 3, 5, 4, 0, 4, 2, 11, 4, 2],
        // default change with inheriting items, compaction, reopen.
        vec![
            0, 1, 200, 0, 2, 200, 0, 3, 200, 7, 5, 5, 6, 0, 9, 10, 11, 0, 1, 50, 5, 15, 0,
        ],
        // batch with put, TTL put and delete; step the clock back; expiry pass; sync.
        vec![
            3, 4, 0, 1, 9, 1, 2, 8, 3, 2, 1, 5, 2, 100, 6, 3, 8, 12, 11, 2, 2,
        ],
        // many big values: rotation, then deletes and a full merge.
        (0..30u8)
            .flat_map(|i| [0, i, 250])
            .chain([2, 1, 2, 2, 2, 3, 5, 1, 0, 10, 11])
            .collect(),
        // Off -> n expires old inheriting items at once; expiry is final under -1 afterwards.
        vec![0, 4, 1, 5, 9, 0, 7, 4, 7, 1, 5, 5, 0, 7, 0, 11],
    ]
}
