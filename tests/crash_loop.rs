//! Kill -9 crash loop. The test re-runs its own binary as a child that writes (puts with and
//! without TTL, deletes, batches, default-TTL changes, document upserts, explicit `sync()`s)
//! while the background worker reaps and compacts small segments. Each cycle uses one sync
//! policy, in turn `Always`, `Never` and `Periodic`. The child reports each operation before it
//! starts ("I ...") and once it is acknowledged ("A"). The parent SIGKILLs it at a random
//! moment, reopens, and checks: every durable write is there or has correctly expired, nothing
//! deleted or expired came back, no value is corrupt, and a batch is all or nothing. A write is
//! durable when acknowledged under `Always`, or once a later `sync()` was acknowledged under
//! `Never`/`Periodic`; the writes after the last durable point may be lost, but only as a
//! suffix: the store must equal the model after some prefix of them (the in-flight operation
//! included or not). Default-TTL changes are durable when acknowledged, under every policy.
//! Every other run of three cycles opens with a few records per key-directory shard
//! (`Options::open_shard_records`, a test hook), so the child's open and the checks take the
//! sharded open of a large store too. Every other run of six writes a hint for every sealed
//! segment (`Options::hint_every_segment`, a test hook); the others take the default, under
//! which segments of records as small as these go without one and opens scan them. Cycles 2
//! and 3 of every four write their keys in key order instead of at random, which leaves
//! sealed segments without a hint by default; the test fails if no check met one.
//!
//! Cycles: `EBBDB_CRASH_CYCLES` (default 4; CI runs 30). Seed: `EBBDB_CRASH_SEED`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ebbdb::{ContainerProperties, Database, DefaultTtl, Options, SyncPolicy, Ttl, WriteBatch};

/// Keys `k0` … `k159`: the random cycles use the first 40 (many versions per key), the
/// key-order cycles all of them (one break of key order per 160 records).
const KEYS: u64 = 160;
/// Keys the random cycles write.
const RANDOM_KEYS: u64 = 40;
/// Long TTL: never expires during a run.
const LONG: u32 = 3600;
/// Short TTL: expires during the run, so the reaper and compaction have work.
const SHORT: u32 = 1;

/// A tiny deterministic generator (xorshift), so a seed reproduces a run.
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

/// The sync policy of cycle `n` (the child reads it from `EBBDB_CRASH_SYNC`).
fn policy(name: &str) -> SyncPolicy {
    match name {
        "never" => SyncPolicy::Never,
        "periodic" => SyncPolicy::Periodic(Duration::from_millis(30)),
        _ => SyncPolicy::Always,
    }
}

fn child_opts(sync: SyncPolicy, per_shard: usize, hint_all: bool) -> Options {
    Options::default()
        .sync(sync)
        .segment_size(16 * 1024)
        .tick_interval(Duration::from_millis(20))
        .compaction_dead_ratio(0.3)
        .open_shard_records(per_shard)
        .hint_every_segment(hint_all)
}

/// Whether cycle `cycle` writes a hint for every sealed segment: every other run of six
/// cycles, so each sync policy meets both ways, sharded and not.
fn hint_all(cycle: u64) -> bool {
    (cycle / 6) % 2 == 1
}

/// Whether the child of cycle `cycle` writes its keys in key order (cycles 2 and 3 of every
/// four) rather than at random: sealed segments of such small records in key order get no
/// hint by default, so the checks' opens scan them and the worker and the close pass them
/// by.
fn key_order(cycle: u64) -> bool {
    cycle % 4 >= 2
}

/// Segment files in `dir` without a hint file beside them.
fn unhinted_segments(dir: &std::path::Path) -> std::io::Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "seg") && !path.with_extension("hint").exists() {
            n += 1;
        }
    }
    Ok(n)
}

/// Records per key-directory shard at the opens of cycle `cycle`: every other pair of three
/// cycles (one of each sync policy) opens with a few, so the child's open and the checks'
/// build the key directory in shards side by side and file timers in ranges, as a large
/// store's open does; the others with the default, under which this store stays in one shard.
fn shard_records(cycle: u64) -> usize {
    if (cycle / 3) % 2 == 1 {
        2 + (cycle % 3) as usize
    } else {
        16_384
    }
}

/// The child: writes until killed. Runs only when the parent starts it.
#[test]
#[ignore = "child process of crash_loop_kill_9; started by the parent test"]
fn crash_child() {
    let Ok(dir) = std::env::var("EBBDB_CRASH_DIR") else {
        return;
    };
    let seed: u64 = std::env::var("EBBDB_CRASH_CHILD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = Rng(seed | 1);
    let sync = policy(&std::env::var("EBBDB_CRASH_SYNC").unwrap_or_default());
    let per_shard = std::env::var("EBBDB_CRASH_SHARD_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16_384);
    let hint_all = std::env::var("EBBDB_CRASH_HINT_ALL").is_ok_and(|v| v == "1");
    let in_order = std::env::var("EBBDB_CRASH_KEY_ORDER").is_ok_and(|v| v == "1");
    // The key names in byte order, for the key-order cycles, from a random place.
    let mut names: Vec<String> = (0..KEYS).map(|k| format!("k{k}")).collect();
    names.sort();
    let mut cursor = usize::try_from(rng.below(KEYS)).unwrap_or(0);
    let mut next_key = |rng: &mut Rng| {
        if in_order {
            cursor = (cursor + 1) % names.len();
            names[cursor].clone()
        } else {
            format!("k{}", rng.below(RANDOM_KEYS))
        }
    };
    let db = Database::open_with(&dir, child_opts(sync, per_shard, hint_all)).expect("child open");
    let store = db.store().clone();
    let ks = store
        .keyspace_or_create("ks", DefaultTtl::NeverExpire)
        .expect("keyspace");
    let docs = match db.container("docs") {
        Ok(c) => c,
        Err(_) => db
            .create_container(ContainerProperties::new("docs", "/pk"))
            .expect("container"),
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    // libtest prints "test crash_child ... " without a newline: start our log on a fresh line.
    // "R": the keyspace and the container exist (the parent's first kill waits for it).
    let _ = writeln!(out);
    let _ = writeln!(out, "R");
    let _ = out.flush();
    let mut n = 0u64;
    loop {
        n += 1;
        let key = next_key(&mut rng);
        let value = format!("{seed}-{n}");
        match rng.below(21) {
            20 => {
                let _ = writeln!(out, "I {} S", now_ms());
                let _ = out.flush();
                store.sync().expect("sync");
            }
            0..=7 => {
                let _ = writeln!(out, "I {} P {key} {value} {LONG}", now_ms());
                let _ = out.flush();
                ks.put_with_ttl(&key, &value, Ttl::Seconds(LONG))
                    .expect("put");
            }
            8..=10 => {
                let _ = writeln!(out, "I {} P {key} {value} {SHORT}", now_ms());
                let _ = out.flush();
                ks.put_with_ttl(&key, &value, Ttl::Seconds(SHORT))
                    .expect("put short");
            }
            11..=13 => {
                let _ = writeln!(out, "I {} D {key}", now_ms());
                let _ = out.flush();
                ks.delete(&key).expect("delete");
            }
            14..=16 => {
                let k2 = next_key(&mut rng);
                let k3 = next_key(&mut rng);
                let _ = writeln!(out, "I {} B {key} {value}a {k2} {value}b {k3}", now_ms());
                let _ = out.flush();
                let mut b = WriteBatch::new();
                b.put_with_ttl(&ks, &key, format!("{value}a"), Ttl::Seconds(LONG));
                b.put_with_ttl(&ks, &k2, format!("{value}b"), Ttl::Seconds(LONG));
                b.delete(&ks, &k3);
                store.write_batch(b).expect("batch");
            }
            17 => {
                // Default-TTL change between two long settings: no item's fate changes, but
                // the history grows and must survive.
                let d = if n.is_multiple_of(2) {
                    DefaultTtl::NeverExpire
                } else {
                    DefaultTtl::Seconds(7200)
                };
                let _ = writeln!(
                    out,
                    "I {} T {}",
                    now_ms(),
                    if n.is_multiple_of(2) { -1 } else { 7200 }
                );
                let _ = out.flush();
                ks.set_default_ttl(d).expect("default");
            }
            _ => {
                let _ = writeln!(out, "I {} J {key} {value}", now_ms());
                let _ = out.flush();
                docs.upsert_item(&serde_json::json!({"id": key, "pk": "p", "v": value}))
                    .expect("doc");
            }
        }
        let _ = writeln!(out, "A {}", now_ms());
        let _ = out.flush();
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    /// Value and the Unix second before which it is certainly live / after which it is
    /// certainly expired (we only know the write second to within the op's duration).
    Put {
        value: String,
        written_after: u64,
        written_before: u64,
        ttl: u32,
    },
    Absent,
}

type State = BTreeMap<String, Val>;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn now_s() -> u64 {
    now_ms() / 1000
}

/// Splits "I <ms> <op...>" / "A <ms>" into the time (seconds) and the rest.
fn stamp(line: &str) -> Option<(&str, u64, String)> {
    let mut it = line.splitn(3, ' ');
    let tag = it.next()?;
    let ms: u64 = it.next()?.parse().ok()?;
    Some((
        tag,
        ms / 1000,
        it.next().map(|r| format!("I {r}")).unwrap_or_default(),
    ))
}

/// Applies one logged operation to the model.
fn apply(
    state: &mut State,
    docs: &mut BTreeMap<String, String>,
    default: &mut i64,
    line: &str,
    started: u64,
    acked: u64,
) {
    let p: Vec<&str> = line.split_whitespace().collect();
    let put = |value: &str, ttl: &str| Val::Put {
        value: value.to_string(),
        written_after: started,
        written_before: acked,
        ttl: ttl.parse().unwrap_or(LONG),
    };
    match p.as_slice() {
        ["I", "P", k, v, ttl] => {
            state.insert((*k).to_string(), put(v, ttl));
        }
        ["I", "D", k] => {
            state.insert((*k).to_string(), Val::Absent);
        }
        ["I", "B", k1, v1, k2, v2, k3] => {
            state.insert((*k1).to_string(), put(v1, "3600"));
            state.insert((*k2).to_string(), put(v2, "3600"));
            state.insert((*k3).to_string(), Val::Absent);
        }
        ["I", "T", d] => *default = d.parse().unwrap_or(-1),
        ["I", "J", k, v] => {
            docs.insert((*k).to_string(), (*v).to_string());
        }
        ["I", "S"] => {}
        other => panic!("unknown log line {other:?}"),
    }
}

/// Whether the store's answer `got` for a key is allowed by the model value `want`, read at
/// some second within `reads` (seconds taken just before and just after that key's read: the
/// clock may tick over during the reads, so one key may be read a second later than another,
/// and even during one read). The engine's write second lies within the op's stamps, and an
/// item is expired from its write second plus its TTL on.
fn allowed(want: &Val, got: Option<&str>, reads: (u64, u64)) -> bool {
    match (want, got) {
        (Val::Absent, None) => true,
        (Val::Absent, Some(_)) => false,
        (
            Val::Put {
                value,
                written_after,
                written_before,
                ttl,
            },
            got,
        ) => {
            // Live at every second the read may have happened in / expired at every one.
            let surely_live = reads.1 < written_after + u64::from(*ttl);
            let surely_dead = reads.0 >= written_before + u64::from(*ttl);
            match got {
                Some(g) if g == value => !surely_dead,
                Some(_) => false,
                None => !surely_live,
            }
        }
    }
}

/// Opens a copy of the store at `dir` on a clock `LATER` seconds ahead of the wall clock and
/// checks that every item the model (`state`, as recovered) gives a short TTL is gone and
/// every other key reads as `got` read it. Reads right after the kill rarely meet a short
/// item that has certainly expired (the child's reaper frees each within a tick of its
/// deadline), so without this an expired item coming back through a read would go unseen.
/// A copy, because opening the store itself on that clock would move its clock ahead of the
/// next child's stamps.
fn expired_later(
    dir: &std::path::Path,
    state: &State,
    got: &BTreeMap<String, (Option<String>, (u64, u64))>,
    cycle: u64,
    seed: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    const LATER: u64 = 3;
    let copy = tempfile::tempdir()?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name()))?;
        }
    }
    let clock = ebbdb::clock::ManualClock::at_unix_secs(now_s() + LATER);
    let db = Database::open_with(
        copy.path(),
        Options::default()
            .sync(SyncPolicy::Never)
            .clock(clock)
            .open_shard_records(shard_records(cycle))
            .hint_every_segment(hint_all(cycle)),
    )?;
    let ks = db.store().keyspace("ks")?;
    for k in 0..KEYS {
        let key = format!("k{k}");
        let short =
            matches!(state.get(&key), Some(Val::Put { ttl, .. }) if u64::from(*ttl) < LATER);
        let want = if short {
            None
        } else {
            got.get(&key).and_then(|(v, _)| v.clone())
        };
        let later = ks
            .get(&key)?
            .map(|v| String::from_utf8(v).expect("utf-8 value"));
        assert_eq!(
            later,
            want,
            "cycle {cycle} seed {seed}: {key} read {LATER} s later (model {:?})",
            state.get(&key)
        );
    }
    Ok(())
}

#[test]
fn crash_loop_kill_9() -> Result<(), Box<dyn std::error::Error>> {
    let cycles: u64 = std::env::var("EBBDB_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("EBBDB_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    eprintln!("crash loop: {cycles} cycles, EBBDB_CRASH_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let mut state = State::new();
    let mut docs = BTreeMap::new();
    let mut default: i64 = -1;
    let mut acked_total = 0u64;
    // Checks that opened the store in key-directory shards.
    let mut sharded = 0u64;
    // Checks that met sealed segments without a hint.
    let mut unhinted = 0u64;
    // Whether a child has reported the keyspace and the container created ("R").
    let mut created = false;
    // Operations acknowledged since the last durable point: (op, started, acknowledged).
    let mut tail: Vec<(String, u64, u64)> = Vec::new();
    let names = ["always", "never", "periodic"];
    for cycle in 0..cycles {
        let sync_name = names[(cycle % 3) as usize];
        let always = sync_name == "always";
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EBBDB_CRASH_DIR", dir.path())
            .env("EBBDB_CRASH_SYNC", sync_name)
            .env(
                "EBBDB_CRASH_SHARD_RECORDS",
                shard_records(cycle).to_string(),
            )
            .env(
                "EBBDB_CRASH_HINT_ALL",
                if hint_all(cycle) { "1" } else { "0" },
            )
            .env(
                "EBBDB_CRASH_KEY_ORDER",
                if key_order(cycle) { "1" } else { "0" },
            )
            .env(
                "EBBDB_CRASH_CHILD_SEED",
                (seed ^ (cycle + 1).wrapping_mul(0x9E37)).to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let run_for = Duration::from_millis(150 + rng.below(600));
        let mut started = Instant::now();
        let mut pending: Option<(String, u64)> = None;
        let mut acked = 0;
        let mut drain = |pending: &mut Option<(String, u64)>, line: String| match stamp(&line) {
            Some(("A", at, _)) => {
                if let Some((op, t0)) = pending.take() {
                    acked += 1;
                    if op.starts_with("I T") {
                        // Durable once acknowledged (the manifest), whatever the policy.
                        apply(&mut state, &mut docs, &mut default, &op, t0, at);
                    } else if always {
                        apply(&mut state, &mut docs, &mut default, &op, t0, at);
                    } else if op == "I S" {
                        for (op, t0, at) in tail.drain(..) {
                            apply(&mut state, &mut docs, &mut default, &op, t0, at);
                        }
                    } else {
                        tail.push((op, t0, at));
                    }
                }
            }
            Some(("I", at, op)) => *pending = Some((op, at)),
            _ => {}
        };
        if !created {
            // Until a child has created the keyspace and the container (the first does, under
            // `Always`: durably), the kill's time counts from then: a loaded machine can take
            // longer than `run_for` to start the child, and a kill before they existed left
            // nothing to check ("keyspace 'ks' not found").
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(line) if line == "R" => break,
                    Ok(line) => drain(&mut pending, line),
                    Err(e) => {
                        let _ = child.kill();
                        return Err(format!("the child did not open the store: {e:?}").into());
                    }
                }
            }
            created = true;
            started = Instant::now();
        }
        while started.elapsed() < run_for {
            match rx.recv_timeout(Duration::from_millis(10)) {
                Ok(line) => drain(&mut pending, line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        child.kill()?; // SIGKILL
        child.wait()?;
        // The in-flight operation, if it wrote, wrote before this second ended.
        let killed = now_s();
        // The child is gone, so its pipe ends: the reader has every line it wrote once it
        // returns (a bounded wait could lose lines on a loaded machine).
        let _ = reader.join();
        while let Ok(line) = rx.try_recv() {
            drain(&mut pending, line);
        }
        acked_total += acked;

        // Sealed segments the kill left without a hint, under the default rule (the active
        // one never has one).
        if !hint_all(cycle) && unhinted_segments(dir.path())? > 1 {
            unhinted += 1;
        }
        // Verify: the store must equal the durable model plus some prefix of the operations
        // after it (the in-flight one last, if it is a write).
        let db = Database::open_with(
            dir.path(),
            Options::default()
                .sync(SyncPolicy::Never)
                .open_shard_records(shard_records(cycle))
                .hint_every_segment(hint_all(cycle)),
        )?;
        if db.store().key_directory_shards("ks")? > 1 {
            sharded += 1;
        }
        let ks = db.store().keyspace("ks")?;
        let c = db.container("docs")?;
        // Each key's answer, with the seconds just before and after its read.
        let mut got: BTreeMap<String, (Option<String>, (u64, u64))> = BTreeMap::new();
        let mut got_docs = BTreeMap::new();
        for k in 0..KEYS {
            let key = format!("k{k}");
            let before = now_s();
            let v = ks
                .get(&key)?
                .map(|v| String::from_utf8(v).expect("utf-8 value"));
            got.insert(key.clone(), (v, (before, now_s())));
            if let Ok(doc) = c.read_item::<serde_json::Value>("p", &key) {
                got_docs.insert(key, doc["v"].as_str().unwrap_or_default().to_string());
            }
        }
        let mut candidates: Vec<(String, u64, u64)> = tail.clone();
        if let Some((op, t0)) = &pending {
            if !op.starts_with("I T") && op != "I S" {
                candidates.push((op.clone(), *t0, killed));
            }
        }
        let mut model = (state.clone(), docs.clone(), default);
        let mut matched = None;
        for n in 0..=candidates.len() {
            if n > 0 {
                let (op, t0, at) = &candidates[n - 1];
                apply(&mut model.0, &mut model.1, &mut model.2, op, *t0, *at);
            }
            let keys_ok = (0..KEYS).all(|k| {
                let key = format!("k{k}");
                let want = model.0.get(&key).cloned().unwrap_or(Val::Absent);
                let (value, reads) = got.get(&key).cloned().unwrap_or_default();
                allowed(&want, value.as_deref(), reads)
            });
            if keys_ok && model.1 == got_docs {
                matched = Some(model.clone());
            }
        }
        let Some(recovered) = matched else {
            panic!(
                "cycle {cycle} ({sync_name}, {} records per shard) seed {seed}: the store matches \
                 no prefix of the {} \
                 operations after the last durable point; store {got:?}, docs {got_docs:?}, \
                 durable model {state:?}, durable docs {docs:?}, default {default}, after it \
                 {tail:?}, in flight {pending:?}",
                shard_records(cycle),
                tail.len()
            );
        };
        // What was recovered is the history from now on.
        (state, docs) = (recovered.0, recovered.1);
        tail.clear();
        let want_default = if default == -1 {
            DefaultTtl::NeverExpire
        } else {
            DefaultTtl::Seconds(7200)
        };
        let alt_ok = pending
            .as_ref()
            .is_some_and(|(op, _)| op.starts_with("I T"));
        assert!(
            ks.default_ttl() == want_default || alt_ok,
            "cycle {cycle} seed {seed}: default TTL lost"
        );
        if alt_ok {
            default = match ks.default_ttl() {
                DefaultTtl::Seconds(_) => 7200,
                _ => -1,
            };
        }
        drop((ks, c, db));
        expired_later(dir.path(), &state, &got, cycle, seed)?;
    }
    eprintln!(
        "crash loop: {cycles} cycles ({sharded} checked in key-directory shards, \
         {unhinted} with sealed segments without a hint), \
         {acked_total} acknowledged writes checked, 0 lost"
    );
    assert!(acked_total > 0, "the child never acknowledged a write");
    assert!(
        cycles < 6 || sharded > 0,
        "no check opened the store in key-directory shards"
    );
    assert!(
        cycles < 4 || unhinted > 0,
        "no check met a sealed segment left without a hint"
    );
    Ok(())
}
