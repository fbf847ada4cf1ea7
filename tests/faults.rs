//! Injected I/O faults: for every k, make the k-th create / write / fsync / rename / truncate
//! of a scripted workload (puts, TTL puts, deletes, batches, a default-TTL change, rotations and
//! a full merge) fail — once, partially, with ENOSPC, or for good — then reopen with a healthy
//! file layer. The failing call must return an error; after a failed log fsync the store must
//! refuse writes; and the reopened store must hold exactly the acknowledged writes (the one
//! failing operation may or may not have landed).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::clock;
use ebbdb::clock::ManualClock;
use ebbdb::faults::{self, FaultKind, FaultPlan};
use ebbdb::{DefaultTtl, Error, Options, Store, SyncPolicy, Ttl, WriteBatch};

type Model = BTreeMap<String, String>;

/// How many injected faults poisoned the store (each followed by a refused write).
static POISONED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug, Clone)]
enum Op {
    Put(String, String, Option<u32>),
    Delete(String),
    Batch(Vec<(String, Option<String>)>),
    SetDefault(DefaultTtl),
    Advance(u64),
    CompactFull,
}

fn script() -> Vec<Op> {
    let mut ops = Vec::new();
    for i in 0..36u32 {
        let k = format!("k{}", i % 9);
        let v = format!("v{i}-{}", "x".repeat(60));
        ops.push(match i % 6 {
            0..=2 => Op::Put(k, v, None),
            3 => Op::Put(k, v, Some(2)),
            4 => Op::Delete(format!("k{}", (i + 3) % 9)),
            _ => Op::Batch(vec![(k, Some(v)), (format!("k{}", (i + 1) % 9), None)]),
        });
        if i == 18 {
            ops.push(Op::SetDefault(DefaultTtl::Seconds(600)));
        }
        if i % 10 == 9 {
            ops.push(Op::Advance(3));
        }
    }
    ops.push(Op::CompactFull);
    ops.push(Op::Put("last".into(), "after merge".into(), None));
    ops
}

/// Applies `op` to the model. TTLs of 2 s with 3 s advances: an item with its own TTL is gone
/// at the next advance.
fn apply(model: &mut Model, ttl_items: &mut Vec<String>, op: &Op) {
    match op {
        Op::Put(k, v, ttl) => {
            model.insert(k.clone(), v.clone());
            ttl_items.retain(|t| t != k);
            if ttl.is_some() {
                ttl_items.push(k.clone());
            }
        }
        Op::Delete(k) => {
            model.remove(k);
            ttl_items.retain(|t| t != k);
        }
        Op::Batch(ws) => {
            for (k, v) in ws {
                ttl_items.retain(|t| t != k);
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
        }
        Op::Advance(_) => {
            for k in ttl_items.drain(..) {
                model.remove(&k);
            }
        }
        Op::SetDefault(_) | Op::CompactFull => {}
    }
}

fn run_op(store: &Store, clock: &ManualClock, op: &Op) -> ebbdb::Result<()> {
    let ks = store.keyspace("ks")?;
    match op {
        Op::Put(k, v, None) => ks.put(k, v),
        Op::Put(k, v, Some(t)) => ks.put_with_ttl(k, v, Ttl::Seconds(*t)),
        Op::Delete(k) => ks.delete(k).map(|_| ()),
        Op::Batch(ws) => {
            let mut b = WriteBatch::new();
            for (k, v) in ws {
                match v {
                    Some(v) => b.put(&ks, k, v),
                    None => b.delete(&ks, k),
                };
            }
            store.write_batch(b)
        }
        Op::SetDefault(d) => ks.set_default_ttl(*d),
        Op::Advance(s) => {
            clock.advance(Duration::from_secs(*s));
            Ok(())
        }
        Op::CompactFull => store.compact_full().map(|_| ()),
    }
}

fn opts(c: &ManualClock) -> Options {
    Options::default()
        .clock(c.clone())
        .sync(SyncPolicy::Always)
        .segment_size(4096)
        // Every clean close seals its active segment (a test hook; 4 MiB by default), so the
        // injected faults also meet a close's rotation and hint.
        .close_seal_bytes(512)
}

fn contents(dir: &Path, c: &ManualClock) -> ebbdb::Result<Option<Model>> {
    let store = Store::open_with(dir, opts(c))?;
    let Ok(ks) = store.keyspace("ks") else {
        return Ok(None);
    };
    let mut m = Model::new();
    for kv in ks.iter() {
        let (k, v) = kv?;
        m.insert(
            String::from_utf8_lossy(&k).into_owned(),
            String::from_utf8_lossy(&v).into_owned(),
        );
    }
    Ok(Some(m))
}

/// Runs the script with `plan` armed; returns whether the fault fired.
fn one(
    kind: FaultKind,
    nth: u64,
    partial: bool,
    no_space: bool,
    sticky: bool,
) -> Result<bool, Box<dyn std::error::Error>> {
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let dir = tempfile::tempdir_in(base)?;
    let c = clock();
    faults::arm(FaultPlan {
        dir: dir.path().to_path_buf(),
        kind,
        nth,
        sticky,
        partial,
        no_space,
    });
    let ops = script();
    let mut model = Model::new();
    let mut ttl_items = Vec::new();
    let mut failed_op: Option<Op> = None;
    let mut keyspace_made = false;
    match Store::open_with(dir.path(), opts(&c)) {
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
        Ok(store) => {
            keyspace_made = store.create_keyspace("ks", DefaultTtl::NeverExpire).is_ok();
            if keyspace_made {
                for op in &ops {
                    match run_op(&store, &c, op) {
                        Ok(()) => apply(&mut model, &mut ttl_items, op),
                        Err(e) => {
                            if no_space {
                                let msg = e.to_string();
                                assert!(
                                    msg.contains("No space left") || matches!(e, Error::Poisoned),
                                    "ENOSPC must surface clearly: {msg}"
                                );
                            }
                            if store.is_poisoned() {
                                // After a failed log write/fsync or manifest write nothing more
                                // is accepted.
                                let again = store.keyspace("ks")?.put("probe", "x");
                                assert!(matches!(again, Err(Error::Poisoned)), "{again:?}");
                                POISONED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            failed_op = Some(op.clone());
                            break;
                        }
                    }
                }
            }
        }
    }
    let fired = faults::disarm(dir.path()) > 0;
    let got = contents(dir.path(), &c)
        .map_err(|e| format!("{kind:?} #{nth} partial {partial}: reopen failed: {e}"))?;
    let Some(got) = got else {
        assert!(
            !keyspace_made,
            "{kind:?} #{nth}: an acknowledged keyspace was lost"
        );
        return Ok(fired);
    };
    let mut with_failed = model.clone();
    if let Some(op) = &failed_op {
        let mut t = ttl_items.clone();
        apply(&mut with_failed, &mut t, op);
    }
    assert!(
        got == model || got == with_failed,
        "{kind:?} #{nth} (partial {partial}, enospc {no_space}, sticky {sticky}): failed op {failed_op:?}\n got {got:?}\nwant {model:?}"
    );
    Ok(fired)
}

#[test]
fn every_injected_fault_leaves_exactly_the_acknowledged_data(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut injected = 0;
    let cases = [
        (FaultKind::Create, false, false, false),
        (FaultKind::Write, false, false, false),
        (FaultKind::Write, true, false, false),
        (FaultKind::Write, true, true, true),
        (FaultKind::Sync, false, false, false),
        (FaultKind::Sync, false, false, true),
        (FaultKind::Rename, false, false, false),
        (FaultKind::Truncate, false, false, false),
    ];
    for (kind, partial, no_space, sticky) in cases {
        let mut k = 1;
        while one(kind, k, partial, no_space, sticky)? {
            injected += 1;
            k += 1;
            assert!(k < 2_000, "runaway");
        }
    }
    let poisoned = POISONED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("fault injection: {injected} faults injected, {poisoned} poisoned the store, every reopen consistent");
    assert!(injected > 100, "only {injected} faults injected");
    assert!(poisoned > 20, "only {poisoned} faults poisoned the store");
    Ok(())
}
