//! Expiry that keeps up, on the real clock (issue 17): the workload of the main crate's
//! `benches/keeps_up.rs`, run the same way for every engine.
//!
//! One writer inserts fresh keys (`bench::key` of a counter) with 100-byte values (`bench::value`:
//! the expiry stamp, then incompressible bytes) and a TTL of 10 s, in batches of 100, as fast as
//! it can, for a fixed duration, with no fsync per write. Nothing but each engine's own
//! background mechanism does upkeep (see [`open`]). Every second the writer samples the
//! directory's bytes, the live bytes (keys written within the last TTL × 116 bytes, computed by
//! the harness the same way for every engine), `RssAnon`, and probes 20 keys written more than
//! TTL + 1 s ago (any value returned is stale) and 20 written less than TTL − 1 s ago (all must
//! be found).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::bench::{dir_bytes, key, peak_rss, value, Rng, VALUE_LEN};
use crate::engines::{expiry_of, open as open_plain, Durability, Engine, Kind, OpenOpts, Res};

pub const TTL_SECS: u64 = 10;
pub const DEFAULT_SECS: u64 = 60;
const BATCH: u64 = 100;
/// Key + value bytes of one record: what "live bytes" counts per live key.
pub const RECORD: u64 = 16 + VALUE_LEN as u64;
const PROBES: u64 = 20;

/// The mixed-TTL variant (`--keeps-up-mixed=N`, passed to the child as
/// `PEERS_KEEPS_UP_MIXED_MAX`): each key's TTL is uniform in 1..=N s, and one key in ten has
/// none, as the main crate's `EBBDB_KEEPS_UP_MIXED=1 EBBDB_KEEPS_UP_MIXED_MAX=N`. `None`: one
/// TTL of [`TTL_SECS`] for every key.
pub fn mixed_max() -> Option<u64> {
    std::env::var("PEERS_KEEPS_UP_MIXED_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u64| n > 0)
}

/// Key `i`'s TTL in the mixed variant (`None`: it never expires), a function of `i` alone so
/// that the harness recomputes it instead of storing one per key.
pub fn mixed_ttl(i: u64, max: u64) -> Option<u64> {
    let h = crate::bench::mix(i ^ 0x7117_7117);
    (!h.is_multiple_of(10)).then(|| 1 + (h >> 8) % max)
}

/// Run length: `PEERS_KEEPS_UP_SECS` (set by the parent from `--keeps-up-secs=N`), default 60.
pub fn secs() -> u64 {
    std::env::var("PEERS_KEEPS_UP_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SECS)
}

pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn now_secs() -> u64 {
    now_millis() / 1000
}

/// The engines this workload runs (sled is skipped).
pub fn runs(kind: Kind) -> bool {
    kind != Kind::Sled
}

/// Whether the setup's reads check the expiry stamp in the value (so a value the engine still
/// returns past its expiry never reaches the application).
pub fn checks_stamp(kind: Kind) -> bool {
    matches!(kind, Kind::Redb | Kind::Fjall)
}

/// The TTL mechanism of each setup, for the report.
pub fn mechanism(kind: Kind, mixed: bool) -> &'static str {
    match kind {
        Kind::Ebbdb if mixed => "keyspace `DefaultTtl::NeverExpire` and each put's own TTL (`WriteBatch::put_with_ttl`, `Ttl::Seconds` or `Ttl::Never`), `SystemClock`, background worker only (no `compact()` call); reads: ebbdb's own expiry check",
        #[cfg(feature = "rocksdb")]
        Kind::Rocksdb if mixed => "compaction filter removing every value whose expiry stamp passed on the real clock (`DB::open_with_ttl` has one TTL per database), same options as above otherwise; reads are RocksDB's raw answer",
        Kind::Ebbdb => "keyspace `DefaultTtl::Seconds(10)`, `SystemClock`, background worker only (no `compact()` call); reads: ebbdb's own expiry check",
        Kind::Redb => "expiry stamp in the value + expiry index table written in the same transaction + sweeper thread (every 100 ms, deletes expired keys in transactions of ≤ 1,000); reads check the stamp",
        Kind::Fjall => "compaction filter (`Database::builder(..).with_compaction_filter_factories`) removing every value whose expiry stamp passed, default leveled compaction; reads check the stamp",
        Kind::Sled => "skipped",
        #[cfg(feature = "rocksdb")]
        Kind::Rocksdb => "`DB::open_with_ttl` (10 s): RocksDB's TTL compaction filter, same options as above otherwise; reads are RocksDB's raw answer (it returns expired entries until a compaction drops them)",
    }
}

/// Each engine's setup for this workload: no fsync per write, real clock, own upkeep only.
pub fn open(kind: Kind, dir: &Path, mixed: bool) -> Res<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match kind {
        Kind::Ebbdb if mixed => crate::engines::open_ebbdb_per_item_ttl(dir)?,
        Kind::Ebbdb => open_plain(
            kind,
            dir,
            &OpenOpts {
                durability: Durability::Relaxed, // SyncPolicy::Never
                clock: None,                     // SystemClock
                ttl_secs: Some(TTL_SECS as u32),
            },
        )?,
        Kind::Redb => Box::new(crate::engines::RedbTtl::open(dir)?),
        Kind::Fjall => Box::new(crate::peers::Fjall::open_filter_ttl(dir)?),
        Kind::Sled => return Err("sled is not run in keeps_up".into()),
        #[cfg(feature = "rocksdb")]
        Kind::Rocksdb if mixed => Box::new(crate::peers::Rocks::open_filter_ttl(dir)?),
        #[cfg(feature = "rocksdb")]
        Kind::Rocksdb => Box::new(crate::peers::Rocks::open_with_ttl(dir, TTL_SECS)?),
    })
}

/// RssAnon of this process (bytes).
fn rss_anon() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU seconds (user + system, all threads) this process has used so far.
fn cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name; utime and stime are the 14th and
            // 15th fields of the line, in clock ticks (100 per second on Linux).
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// Phase `keepsup`: the workload for `secs` seconds on a fresh directory.
pub fn run(kind: Kind, dir: &Path, secs: u64) -> Res<Value> {
    let load_start = crate::report::loadavg();
    let cpu_start = cpu_secs();
    let mixed = mixed_max();
    let eng = open(kind, dir, mixed.is_some())?;
    let ttl_ms = TTL_SECS * 1000;
    let mut rng = Rng::new(17);
    let mut buf: Vec<([u8; 16], [u8; VALUE_LEN])> = Vec::with_capacity(BATCH as usize);
    // Wall-clock millis at which batch b was written (keys b * BATCH ..).
    let mut batch_at: Vec<u64> = Vec::new();
    let mut lat_us: Vec<u32> = Vec::new();
    // (seconds since start, disk bytes, live bytes, RssAnon)
    let mut samples: Vec<(f64, u64, u64, u64)> = Vec::new();
    let (mut probes, mut raw_stale, mut app_stale) = (0u64, 0u64, 0u64);
    let (mut live_probes, mut live_missing) = (0u64, 0u64);
    let mut written = 0u64;
    // Mixed TTLs: keys live by expiry second, and those that never expire.
    let mut due: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    let (mut due_keys, mut lasting) = (0u64, 0u64);
    let mut ttls: Vec<Option<u32>> = Vec::with_capacity(BATCH as usize);
    // Key i's expiry stamp (Unix seconds; `u64::MAX`: never), given the batches written.
    let expiry_at = |batch_at: &[u64], i: u64| {
        let written_s = batch_at[(i / BATCH) as usize] / 1000;
        match mixed {
            Some(max) => mixed_ttl(i, max).map_or(u64::MAX, |t| written_s + t),
            None => written_s + TTL_SECS,
        }
    };
    let start = Instant::now();
    // The wall clock against a monotonic one: a step of the wall clock (a virtual machine
    // resumed, a time daemon) moves the whole-second rule under the probes below, which
    // read it; the largest step either way is reported.
    let wall_start = now_millis();
    let mut clock_step_ms = 0i64;
    let mut next_sample = 1;
    while start.elapsed() < Duration::from_secs(secs) {
        let at = now_millis();
        for i in written..written + BATCH {
            let ttl = match mixed {
                Some(max) => mixed_ttl(i, max),
                None => Some(TTL_SECS),
            };
            let expiry = ttl.map_or(u64::MAX, |t| at / 1000 + t);
            if mixed.is_some() {
                match ttl {
                    Some(_) => {
                        *due.entry(expiry).or_default() += 1;
                        due_keys += 1;
                    }
                    None => lasting += 1,
                }
            }
            ttls.push(ttl.map(|t| t as u32));
            buf.push((key(i), value(i, expiry)));
        }
        let refs: Vec<(&[u8], &[u8])> = buf.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let t = Instant::now();
        if mixed.is_some() {
            eng.put_batch_expiring(&refs, &ttls)?;
        } else {
            eng.put_batch(&refs)?;
        }
        lat_us.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        ttls.clear();
        buf.clear();
        batch_at.push(at);
        written += BATCH;
        let elapsed = start.elapsed().as_secs();
        if elapsed < next_sample {
            continue;
        }
        next_sample = elapsed + 1;
        let now = now_millis();
        let step = now as i64 - (wall_start as i64 + start.elapsed().as_millis() as i64);
        if step.abs() > clock_step_ms.abs() {
            clock_step_ms = step;
            if step.abs() > 100 {
                eprintln!(
                    "[{}] the wall clock is {step} ms off the monotonic clock at {elapsed} s",
                    kind.name()
                );
            }
        }
        let live = if mixed.is_some() {
            // A key is live while its stamp is after the current second.
            while let Some((&e, &c)) = due.first_key_value() {
                if e > now / 1000 {
                    break;
                }
                due.pop_first();
                due_keys -= c;
            }
            due_keys + lasting
        } else {
            // Keys written within the last TTL are live.
            let first_live = batch_at.partition_point(|&b| b + ttl_ms <= now) as u64;
            written - first_live * BATCH
        };
        samples.push((
            start.elapsed().as_secs_f64(),
            dir_bytes(dir),
            live * RECORD,
            rss_anon(),
        ));
        if mixed.is_some() {
            // Random keys: expired more than 1 s ago (any value returned is stale), or with
            // more than 1 s left (all must be found), up to 20 of each.
            let now_s = now / 1000;
            let (mut old, mut young) = (0, 0);
            for _ in 0..20 * PROBES {
                if old == PROBES && young == PROBES {
                    break;
                }
                let i = rng.below(written);
                let e = expiry_at(&batch_at, i);
                if e.saturating_add(1) < now_s && old < PROBES {
                    old += 1;
                    probes += 1;
                    if eng.get(&key(i))?.is_some() {
                        raw_stale += 1;
                        app_stale += u64::from(!checks_stamp(kind));
                    }
                } else if e > now_s + 1 && young < PROBES {
                    young += 1;
                    live_probes += 1;
                    live_missing += u64::from(eng.get(&key(i))?.is_none());
                }
            }
            continue;
        }
        // Keys written more than TTL + 1 s ago: any value returned is stale.
        let old = batch_at.partition_point(|&b| b + ttl_ms + 1000 < now) as u64;
        if old > 0 {
            for _ in 0..PROBES {
                let i = rng.below(old * BATCH);
                probes += 1;
                if eng.get(&key(i))?.is_some() {
                    raw_stale += 1;
                    app_stale += u64::from(!checks_stamp(kind));
                }
            }
        }
        // Keys whose deadline by the whole-second rule (the second stamped plus the TTL; an
        // engine stamps the write in that second or a later one) is more than a second after
        // this one: all must be found. (Counted in milliseconds from the stamp, as this once
        // was, a key stamped at the end of its second had as little as a millisecond left
        // when the probe came: 11 such keys of 12,000 read as missing in one run, correctly
        // expired by the time the probe ran.)
        let young = batch_at.partition_point(|&b| b / 1000 + TTL_SECS <= now / 1000 + 1) as u64;
        if young < batch_at.len() as u64 {
            for _ in 0..PROBES {
                let i = young * BATCH + rng.below(written - young * BATCH);
                live_probes += 1;
                if eng.get(&key(i))?.is_none() {
                    live_missing += 1;
                    let again = eng.get(&key(i))?.is_some();
                    let b = batch_at[(i / BATCH) as usize];
                    eprintln!(
                        "[{}] live key {i} not found at {:.3} s, written at {b} ms, {} ms before its whole-second deadline at the probe; found on a second read: {again}",
                        kind.name(),
                        start.elapsed().as_secs_f64(),
                        ((b / 1000 + TTL_SECS) * 1000) as i64 - now_millis() as i64,
                    );
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu_start;
    // Live count against the truly live set, by the whole-second rule every engine's stamp
    // follows: a key is live while its expiry stamp (write second + TTL) is after now. With an
    // exact count of its own (ebbdb's `Keyspace::len`) the engine is asked at one instant.
    // Otherwise a full scan: `raw` counts every pair it returns, `app` those whose stamp is
    // after the second the scan began (what a stamp-checking reader sees). A scan takes
    // seconds here, during which a tenth of the live set expires per second: an engine that
    // checks expiry per key as it goes would land between the live sets at either end.
    let true_live_at = |s: u64| match mixed {
        Some(_) => (0..written)
            .filter(|&i| expiry_at(&batch_at, i) > s)
            .count() as u64,
        None => {
            batch_at
                .iter()
                .filter(|&&b| b / 1000 + TTL_SECS > s)
                .count() as u64
                * BATCH
        }
    };
    // The engine is asked first and the truly live set counted after, for the second the
    // question was asked in: counting tens of millions of written keys takes a second or more,
    // and an exact engine asked after that answered for a later second (0.980 of a set
    // counted for the earlier one, in a run at 690 k writes/s).
    let now_s = now_secs();
    let (mut count_raw, mut count_app) = (0u64, 0u64);
    let scan_start = Instant::now();
    match eng.live_count()? {
        Some(n) => (count_raw, count_app) = (n, n),
        None => eng
            .scan(&mut |_, v| {
                count_raw += 1;
                count_app += u64::from(expiry_of(v) > now_s);
            })
            .map(|_| ())?,
    }
    let scan_secs = scan_start.elapsed().as_secs_f64();
    let asked_until = now_secs();
    let true_live = true_live_at(now_s);
    let true_live_after = true_live_at(asked_until);
    let count_seen = if checks_stamp(kind) {
        count_app
    } else {
        count_raw
    };
    let note = eng.note();
    let rss_end = rss_anon();
    let t = Instant::now();
    drop(eng);
    let close_secs = t.elapsed().as_secs_f64();
    let second_half: Vec<f64> = samples
        .iter()
        .filter(|s| s.0 >= secs as f64 / 2.0)
        .map(|s| s.1 as f64 / s.2.max(1) as f64)
        .collect();
    // Writes in each whole second of the run (wall clock), to show stalls.
    let per_sec = {
        let t0 = batch_at.first().copied().unwrap_or(0) / 1000;
        let mut v = vec![0u64; secs as usize + 2];
        for &b in &batch_at {
            if let Some(c) = v.get_mut((b / 1000 - t0) as usize) {
                *c += BATCH;
            }
        }
        let whole = (batch_at.last().copied().unwrap_or(0) / 1000).saturating_sub(t0) as usize;
        v.truncate(whole); // the first and last seconds are partial
        v.into_iter().skip(1).collect::<Vec<_>>()
    };
    lat_us.sort_unstable();
    let pct = |q: usize| lat_us.get(lat_us.len() * q / 100).copied().unwrap_or(0);
    Ok(json!({
        "secs": secs,
        "mixed_max": mixed,
        "writes": written,
        "writes_per_s": written as f64 / elapsed,
        "amp_max": second_half.iter().copied().fold(0.0, f64::max),
        "amp_end": second_half.last().copied().unwrap_or(0.0),
        "true_live": true_live,
        "true_live_after_scan": true_live_after,
        "scan_secs": scan_secs,
        "count_raw": count_raw,
        "count_app": count_seen,
        "probes": probes,
        "raw_stale": raw_stale,
        "stale": app_stale,
        "live_probes": live_probes,
        "live_missing": live_missing,
        "clock_step_ms": clock_step_ms,
        "rss_anon_peak": samples.iter().map(|s| s.3).max().unwrap_or(0).max(rss_end),
        "rss_peak": peak_rss(),
        "batch_p99_ms": f64::from(pct(99)) / 1000.0,
        "batch_max_ms": f64::from(lat_us.last().copied().unwrap_or(0)) / 1000.0,
        "disk_end": samples.last().map_or(0, |s| s.1),
        "close_secs": close_secs,
        "cpu_secs": cpu,
        "load_start": load_start,
        "slowest_second": per_sec.iter().min().copied(),
        "fastest_second": per_sec.iter().max().copied(),
        "note": note,
        "samples": samples,
    }))
}
