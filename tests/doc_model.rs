//! Model test: random sequences of item writes, reads, deletes, default-TTL changes, clock
//! moves, expiry, compaction and reopens, checked after every step against a plain in-memory
//! model that implements `docs/contract.md` §2 on its own (it shares no code with `ebbdb::ttl`).
//!
//! The model's expiry rule, straight from contract §1–§2: an item written at second `ts` with
//! its own ttl is expired at second `now` if some default-TTL setting that was in force at some
//! second `t` with `ts <= t <= now` gives it an effective TTL `e` (rule 3) with `ts + e <= t`.
//! A setting is in force from the second it was made up to and including the second it was
//! replaced (during the second of a change both were in force, so an item that was expired in
//! that second under the old setting has expired: rule 7). Finality is also kept directly: at
//! every observation the model forgets every item it finds expired, so an item can never come
//! back in the model.

use std::collections::BTreeMap;
use std::time::Duration;

use ebbdb::clock::ManualClock;
use ebbdb::{
    Container, ContainerProperties, Database, DefaultTtl, ItemOptions, Options, PartitionKey,
    SyncPolicy,
};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value};

const T0: u64 = 1_700_000_000;
const IDS: [&str; 4] = ["a", "b", "c", "d"];
/// Partition keys in the order the store keeps partitions: undefined, the number 1, "p", "q".
const PKS: usize = 4;

fn partition_key(pk: usize) -> PartitionKey {
    match pk {
        0 => PartitionKey::UNDEFINED,
        1 => PartitionKey::from(1i64),
        2 => PartitionKey::from("p"),
        _ => PartitionKey::from("q"),
    }
}

/// A default-TTL setting as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Def {
    Off,
    Never,
    Secs(u32),
}

impl Def {
    fn to_ebb(self) -> DefaultTtl {
        match self {
            Def::Off => DefaultTtl::Off,
            Def::Never => DefaultTtl::NeverExpire,
            Def::Secs(n) => DefaultTtl::Seconds(n),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        id: usize,
        pk: usize,
        ttl: Option<i64>,
    },
    Upsert {
        id: usize,
        pk: usize,
        ttl: Option<i64>,
    },
    Replace {
        id: usize,
        pk: usize,
        ttl: Option<i64>,
    },
    /// Replace with `if_match`: the last etag this key had (`current`), or a wrong one.
    ReplaceIfMatch {
        id: usize,
        pk: usize,
        current: bool,
    },
    Delete {
        id: usize,
        pk: usize,
    },
    DeleteIfMatch {
        id: usize,
        pk: usize,
        current: bool,
    },
    Read {
        id: usize,
        pk: usize,
    },
    SetDefault(Def),
    Advance(u64),
    AdvanceMs(u64),
    /// The system clock steps back by this many seconds; the database's "now" must not.
    StepBack(u64),
    Maintain,
    Compact,
    CompactFull,
    Reopen,
}

/// An item as the model knows it.
#[derive(Debug, Clone)]
struct MItem {
    ts: u64,
    ttl: Option<i64>,
    /// What the write returned; every read must return exactly this.
    stored: Value,
}

struct Model {
    /// The database's "now": the highest clock reading so far (contract §2 rule 7).
    now_ms: u64,
    /// What the (manual) system clock says; may be behind `now_ms` after a step back.
    clock_ms: u64,
    /// Every default-TTL setting with the second it was made, oldest first.
    history: Vec<(u64, Def)>,
    /// Live items by (partition, id); ordered as the store orders them.
    items: BTreeMap<(usize, usize), MItem>,
    /// The last etag each key was written with, live or not.
    etags: BTreeMap<(usize, usize), String>,
}

impl Model {
    fn now_s(&self) -> u64 {
        self.now_ms / 1000
    }

    /// Effective TTL under one setting (contract §2 rule 3), `None` for never.
    fn effective(def: Def, own: Option<i64>) -> Option<u64> {
        match (def, own) {
            (Def::Off, _) | (_, Some(-1)) | (Def::Never, None) => None,
            (_, Some(m)) => u64::try_from(m).ok(),
            (Def::Secs(n), None) => Some(u64::from(n)),
        }
    }

    fn expired(&self, it: &MItem) -> bool {
        let now = self.now_s();
        self.history.iter().enumerate().any(|(i, &(since, def))| {
            let until = self.history.get(i + 1).map_or(u64::MAX, |next| next.0);
            let lo = since.max(it.ts);
            let hi = until.min(now);
            match Self::effective(def, it.ttl) {
                Some(e) if lo <= hi => lo.max(it.ts + e) <= hi,
                _ => false,
            }
        })
    }

    /// An observation at the current second: forget every expired item for good.
    fn observe(&mut self) {
        let expired: Vec<_> = self
            .items
            .iter()
            .filter(|(_, it)| self.expired(it))
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            self.items.remove(&k);
        }
    }

    fn current_default(&self) -> Def {
        self.history.last().map_or(Def::Off, |h| h.1)
    }
}

struct Sut {
    dir: tempfile::TempDir,
    clock: ManualClock,
    db: Option<Database>,
    c: Option<Container>,
    /// Records per key-directory shard at each open.
    per_shard: usize,
    /// Whether every sealed segment gets a hint.
    hint_all: bool,
}

/// The options of every open: records per key-directory shard `per_shard` (a few send this
/// small store through a large one's sharded open), and a hint for every sealed segment if
/// `hint_all` (by default segments of records as small as these go without one and opens scan
/// them).
fn opts(clock: &ManualClock, per_shard: usize, hint_all: bool) -> Options {
    Options::default()
        .clock(clock.clone())
        .segment_size(4096)
        .sync(SyncPolicy::Never)
        .open_shard_records(per_shard)
        .hint_every_segment(hint_all)
}

impl Sut {
    fn c(&self) -> Result<&Container, String> {
        self.c.as_ref().ok_or_else(|| "no container".to_owned())
    }

    fn db(&self) -> Result<&Database, String> {
        self.db.as_ref().ok_or_else(|| "no database".to_owned())
    }

    fn reopen(&mut self) -> Result<(), String> {
        self.c = None;
        self.db = None;
        let db = Database::open_with(
            self.dir.path(),
            opts(&self.clock, self.per_shard, self.hint_all),
        )
        .map_err(|e| format!("reopen: {e}"))?;
        self.c = Some(
            db.container("m")
                .map_err(|e| format!("container after reopen: {e}"))?,
        );
        self.db = Some(db);
        Ok(())
    }
}

fn body(id: usize, pk: usize, ttl: Option<i64>, n: usize) -> Value {
    let mut v = json!({"id": IDS[id], "n": n, "pad": "x".repeat(100 + (n % 7) * 40)});
    match pk {
        0 => {}
        1 => v["pk"] = json!(1),
        2 => v["pk"] = json!("p"),
        _ => v["pk"] = json!("q"),
    }
    if let Some(t) = ttl {
        v["ttl"] = json!(t);
    }
    v
}

fn status<T>(r: &ebbdb::Result<T>) -> Option<u16> {
    r.as_ref().err().map(ebbdb::Error::status_code)
}

/// Checks a successful write's result and records it in the model.
fn record_write(
    model: &mut Model,
    key: (usize, usize),
    ttl: Option<i64>,
    n: usize,
    r: ebbdb::Result<Value>,
    what: &str,
) -> Result<(), String> {
    let stored = r.map_err(|e| format!("{what} {key:?}: expected success, got {e}"))?;
    let now = model.now_s();
    if stored["_ts"] != json!(now) || stored["n"] != json!(n) {
        return Err(format!(
            "{what} {key:?}: stored {stored} (now {now}, n {n})"
        ));
    }
    if stored.get("ttl").cloned() != ttl.map(Value::from) {
        return Err(format!("{what} {key:?}: ttl {:?} stored as {stored}", ttl));
    }
    let etag = stored["_etag"]
        .as_str()
        .ok_or_else(|| format!("{what}: no _etag in {stored}"))?
        .to_owned();
    if model.etags.get(&key) == Some(&etag) {
        return Err(format!("{what} {key:?}: etag {etag} reused"));
    }
    model.etags.insert(key, etag);
    model.items.insert(
        key,
        MItem {
            ts: now,
            ttl,
            stored,
        },
    );
    Ok(())
}

fn expect_status<T: std::fmt::Debug>(
    r: &ebbdb::Result<T>,
    want: u16,
    what: &str,
) -> Result<(), String> {
    if status(r) == Some(want) {
        Ok(())
    } else {
        Err(format!("{what}: expected {want}, got {r:?}"))
    }
}

fn etag_for(model: &Model, key: (usize, usize), current: bool) -> String {
    if current {
        model
            .etags
            .get(&key)
            .cloned()
            .unwrap_or_else(|| "\"never-written\"".to_owned())
    } else {
        "\"wrong-etag\"".to_owned()
    }
}

/// Compares count, iteration and every partition scan with the model.
fn check_all(model: &mut Model, sut: &Sut, step: usize) -> Result<(), String> {
    model.observe();
    let c = sut.c()?;
    let count = c.count().map_err(|e| e.to_string())?;
    if count != model.items.len() {
        return Err(format!(
            "step {step}: count {count}, model {} at {}",
            model.items.len(),
            model.now_s() - T0
        ));
    }
    let got: Vec<Value> = c
        .items()
        .and_then(Iterator::collect)
        .map_err(|e| e.to_string())?;
    let want: Vec<Value> = model.items.values().map(|it| it.stored.clone()).collect();
    if got != want {
        return Err(format!("step {step}: items()\n got {got:?}\nwant {want:?}"));
    }
    for pk in 0..PKS {
        let got: Vec<Value> = c
            .items_in_partition(partition_key(pk))
            .and_then(Iterator::collect)
            .map_err(|e| e.to_string())?;
        let want: Vec<Value> = model
            .items
            .range((pk, 0)..(pk + 1, 0))
            .map(|(_, it)| it.stored.clone())
            .collect();
        if got != want {
            return Err(format!(
                "step {step}: items_in_partition({pk})\n got {got:?}\nwant {want:?}"
            ));
        }
    }
    let stats = sut.db()?.stats();
    // The container catalogue holds one live entry of its own.
    let live = usize::try_from(stats.live_items).unwrap_or(usize::MAX);
    if live != model.items.len() + 1 {
        return Err(format!(
            "step {step}: stats.live_items {live}, model {} + 1 catalogue entry",
            model.items.len()
        ));
    }
    Ok(())
}

/// Runs `ops` twice: with a hint for every sealed segment, and with the default hints.
fn run(initial: Def, ops: &[Op]) -> Result<(), String> {
    run_sharded(initial, ops, 16_384, true)?;
    run_sharded(initial, ops, 16_384, false)
}

/// As [`run`], opening with `per_shard` records per key-directory shard and every hint or
/// the default ones.
fn run_sharded(initial: Def, ops: &[Op], per_shard: usize, hint_all: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let clock = ManualClock::at_unix_secs(T0);
    let db = Database::open_with(dir.path(), opts(&clock, per_shard, hint_all))
        .map_err(|e| e.to_string())?;
    let c = db
        .create_container(ContainerProperties::new("m", "/pk").with_default_ttl(initial.to_ebb()))
        .map_err(|e| e.to_string())?;
    let mut sut = Sut {
        dir,
        clock,
        db: Some(db),
        c: Some(c),
        per_shard,
        hint_all,
    };
    let mut model = Model {
        now_ms: T0 * 1000,
        clock_ms: T0 * 1000,
        history: vec![(T0, initial)],
        items: BTreeMap::new(),
        etags: BTreeMap::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        model.observe();
        let n = step;
        let what = format!("step {step} {op:?} at +{}ms", model.now_ms - T0 * 1000);
        match *op {
            Op::Create { id, pk, ttl } => {
                let r = sut.c()?.create_item(&body(id, pk, ttl, n));
                if model.items.contains_key(&(pk, id)) {
                    expect_status(&r, 409, &what)?;
                } else {
                    record_write(&mut model, (pk, id), ttl, n, r, &what)?;
                }
            }
            Op::Upsert { id, pk, ttl } => {
                let r = sut.c()?.upsert_item(&body(id, pk, ttl, n));
                record_write(&mut model, (pk, id), ttl, n, r, &what)?;
            }
            Op::Replace { id, pk, ttl } => {
                let r = sut
                    .c()?
                    .replace_item(partition_key(pk), IDS[id], &body(id, pk, ttl, n));
                if model.items.contains_key(&(pk, id)) {
                    record_write(&mut model, (pk, id), ttl, n, r, &what)?;
                } else {
                    expect_status(&r, 404, &what)?;
                }
            }
            Op::ReplaceIfMatch { id, pk, current } => {
                let opts = ItemOptions::default().if_match(etag_for(&model, (pk, id), current));
                let r = sut.c()?.replace_item_with(
                    partition_key(pk),
                    IDS[id],
                    &body(id, pk, None, n),
                    &opts,
                );
                match (model.items.contains_key(&(pk, id)), current) {
                    (false, _) => expect_status(&r, 404, &what)?,
                    (true, false) => expect_status(&r, 412, &what)?,
                    (true, true) => record_write(&mut model, (pk, id), None, n, r, &what)?,
                }
            }
            Op::Delete { id, pk } => {
                let r = sut.c()?.delete_item(partition_key(pk), IDS[id]);
                if model.items.remove(&(pk, id)).is_some() {
                    r.map_err(|e| format!("{what}: {e}"))?;
                } else {
                    expect_status(&r, 404, &what)?;
                }
            }
            Op::DeleteIfMatch { id, pk, current } => {
                let opts = ItemOptions::default().if_match(etag_for(&model, (pk, id), current));
                let r = sut.c()?.delete_item_with(partition_key(pk), IDS[id], &opts);
                match (model.items.contains_key(&(pk, id)), current) {
                    (false, _) => expect_status(&r, 404, &what)?,
                    (true, false) => expect_status(&r, 412, &what)?,
                    (true, true) => {
                        r.map_err(|e| format!("{what}: {e}"))?;
                        model.items.remove(&(pk, id));
                    }
                }
            }
            Op::Read { id, pk } => {
                let r = sut.c()?.read_item::<Value>(partition_key(pk), IDS[id]);
                match model.items.get(&(pk, id)) {
                    Some(it) => {
                        let got = r.map_err(|e| format!("{what}: expected the item, got {e}"))?;
                        if got != it.stored {
                            return Err(format!("{what}: read {got}, model {}", it.stored));
                        }
                    }
                    None => expect_status(&r, 404, &what)?,
                }
            }
            Op::SetDefault(def) => {
                sut.db()?
                    .replace_container(
                        ContainerProperties::new("m", "/pk").with_default_ttl(def.to_ebb()),
                    )
                    .map_err(|e| format!("{what}: {e}"))?;
                model.history.push((model.now_s(), def));
            }
            Op::Advance(secs) => {
                sut.clock.advance(Duration::from_secs(secs));
                model.clock_ms += secs * 1000;
                model.now_ms = model.now_ms.max(model.clock_ms);
            }
            Op::AdvanceMs(ms) => {
                sut.clock.advance(Duration::from_millis(ms));
                model.clock_ms += ms;
                model.now_ms = model.now_ms.max(model.clock_ms);
            }
            Op::StepBack(secs) => {
                model.clock_ms -= secs * 1000;
                sut.clock.set_unix_millis(model.clock_ms);
            }
            Op::Maintain => {
                sut.db()?.maintain().map_err(|e| format!("{what}: {e}"))?;
            }
            Op::Compact => {
                sut.db()?.compact().map_err(|e| format!("{what}: {e}"))?;
            }
            Op::CompactFull => {
                sut.db()?
                    .compact_full()
                    .map_err(|e| format!("{what}: {e}"))?;
            }
            Op::Reopen => {
                sut.reopen()?;
                let def = sut.c()?.properties().default_ttl;
                if def != model.current_default().to_ebb() {
                    return Err(format!("{what}: default ttl {def:?} after reopen"));
                }
            }
        }
        check_all(&mut model, &sut, step).map_err(|e| format!("{e}\n(after {what})"))?;
    }
    // Finally: everything purged and reopened still agrees.
    sut.db()?.maintain().map_err(|e| e.to_string())?;
    sut.db()?.compact_full().map_err(|e| e.to_string())?;
    sut.reopen()?;
    check_all(&mut model, &sut, ops.len())
}

fn ttl_strategy() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(-1)),
        2 => (1i64..=20).prop_map(Some),
    ]
}

fn def_strategy() -> impl Strategy<Value = Def> {
    prop_oneof![
        Just(Def::Off),
        Just(Def::Never),
        (1u32..=20).prop_map(Def::Secs),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let id = 0..IDS.len();
    let pk = 0..PKS;
    prop_oneof![
        6 => (id.clone(), pk.clone(), ttl_strategy())
            .prop_map(|(id, pk, ttl)| Op::Create { id, pk, ttl }),
        5 => (id.clone(), pk.clone(), ttl_strategy())
            .prop_map(|(id, pk, ttl)| Op::Upsert { id, pk, ttl }),
        4 => (id.clone(), pk.clone(), ttl_strategy())
            .prop_map(|(id, pk, ttl)| Op::Replace { id, pk, ttl }),
        2 => (id.clone(), pk.clone(), any::<bool>())
            .prop_map(|(id, pk, current)| Op::ReplaceIfMatch { id, pk, current }),
        3 => (id.clone(), pk.clone()).prop_map(|(id, pk)| Op::Delete { id, pk }),
        1 => (id.clone(), pk.clone(), any::<bool>())
            .prop_map(|(id, pk, current)| Op::DeleteIfMatch { id, pk, current }),
        5 => (id, pk).prop_map(|(id, pk)| Op::Read { id, pk }),
        3 => def_strategy().prop_map(Op::SetDefault),
        6 => (0u64..=15).prop_map(Op::Advance),
        1 => (1u64..=999).prop_map(Op::AdvanceMs),
        1 => (1u64..=30).prop_map(Op::StepBack),
        1 => Just(Op::Maintain),
        1 => Just(Op::Compact),
        1 => Just(Op::CompactFull),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    })]

    // Half the cases reopen with a few records per key-directory shard: the container's
    // items and history then come back through a large store's sharded open. Half, chosen
    // apart, write a hint for every segment; the others leave these small records' segments
    // without one, to be scanned.
    #[test]
    fn model_agrees_with_ebbdb(
        initial in def_strategy(),
        ops in proptest::collection::vec(op_strategy(), 1..80),
        per_shard in prop_oneof![Just(16_384usize), 1usize..4],
        hint_all in proptest::bool::ANY,
    ) {
        run_sharded(initial, &ops, per_shard, hint_all).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------- fixed sequences

/// Default change in the very second an item reaches its deadline, never observed before.
#[test]
fn model_off_in_the_second_of_expiry() -> Result<(), String> {
    run(
        Def::Secs(5),
        &[
            Op::Create {
                id: 0,
                pk: 2,
                ttl: None,
            },
            Op::Advance(5),
            Op::SetDefault(Def::Off),
            Op::Read { id: 0, pk: 2 },
            Op::Reopen,
            Op::Read { id: 0, pk: 2 },
        ],
    )
}

/// Off → n → Off with writes in between, reopen and full compaction.
#[test]
fn model_toggle_default_with_compaction() -> Result<(), String> {
    run(
        Def::Off,
        &[
            Op::Create {
                id: 0,
                pk: 0,
                ttl: Some(3),
            },
            Op::Create {
                id: 1,
                pk: 1,
                ttl: None,
            },
            Op::Advance(10),
            Op::SetDefault(Def::Secs(12)),
            Op::Upsert {
                id: 2,
                pk: 2,
                ttl: Some(-1),
            },
            Op::Advance(2),
            Op::SetDefault(Def::Off),
            Op::CompactFull,
            Op::Reopen,
            Op::Advance(15),
            Op::Create {
                id: 0,
                pk: 0,
                ttl: None,
            },
            Op::ReplaceIfMatch {
                id: 0,
                pk: 0,
                current: true,
            },
            Op::DeleteIfMatch {
                id: 1,
                pk: 1,
                current: false,
            },
        ],
    )
}

/// The clock steps back across a reopen after an item expired.
#[test]
fn model_clock_steps_back_across_reopen() -> Result<(), String> {
    run(
        Def::Secs(10),
        &[
            Op::Create {
                id: 0,
                pk: 2,
                ttl: None,
            },
            Op::Create {
                id: 1,
                pk: 3,
                ttl: Some(-1),
            },
            Op::Advance(12),
            Op::StepBack(12),
            Op::Reopen,
            Op::Read { id: 0, pk: 2 },
            Op::Upsert {
                id: 2,
                pk: 2,
                ttl: Some(5),
            },
            Op::Advance(4),
            Op::Read { id: 2, pk: 2 },
            Op::Advance(1),
            Op::Read { id: 2, pk: 2 },
        ],
    )
}
