//! TTL churn on simulated time: a fixed live set of fresh keys (think sessions), each written
//! once with a TTL, at a steady rate; the same writes with and without TTL.
//!
//! Every value carries its expiry (Unix seconds) in its first 8 bytes, for every engine, so the
//! harness can tell a stale read (a value returned past its expiry) whatever the engine. ebbdb
//! gets the TTL natively (keyspace default TTL on a `ManualClock`, background worker only);
//! fjall and RocksDB drop expired values in a compaction filter reading the same simulated
//! clock (fjall's reads also check the stamp); redb and sled are swept by the harness: a full scan every `sweep_every` ticks deleting
//! every key whose expiry has passed.

use std::path::Path;
use std::time::{Duration, Instant};

use ebbdb::clock::ManualClock;
use serde_json::{json, Value};

use crate::bench::{dir_bytes, key, peak_rss, value, Rng, BATCH, VALUE_LEN};
use crate::engines::{expiry_of, open, Durability, Engine, Kind, OpenOpts, Res};

pub const START: u64 = 1_700_000_000;

#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Keys live at any time once warm.
    pub live: u64,
    /// TTL of every write, simulated seconds.
    pub ttl_secs: u64,
    /// Ticks per TTL: each tick writes `live / ticks_per_ttl` fresh keys.
    pub ticks_per_ttl: u64,
    /// Ticks of writing (the churn).
    pub churn_ticks: u64,
    /// Ticks after the churn, writes stopped, to watch space come back.
    pub drain_ticks: u64,
    /// Sweep interval for the sweeping peers, in ticks.
    pub sweep_every: u64,
    /// Reads per tick, uniform over the keys written in the last two TTLs.
    pub reads_per_tick: u64,
}

impl Params {
    pub fn new(live: u64) -> Self {
        Params {
            live,
            ttl_secs: 3600,
            ticks_per_ttl: 100,
            churn_ticks: 400,
            drain_ticks: 300,
            sweep_every: 5,
            reads_per_tick: 200,
        }
    }
    pub fn tick_secs(&self) -> u64 {
        self.ttl_secs / self.ticks_per_ttl
    }
    pub fn per_tick(&self) -> u64 {
        self.live / self.ticks_per_ttl
    }
}

/// Deletes every key whose embedded expiry has passed: the sweeping peers' TTL mechanism.
pub fn sweep(eng: &dyn Engine, now: u64) -> Res<u64> {
    let mut dead = Vec::new();
    eng.scan(&mut |k, v| {
        if expiry_of(v) <= now {
            dead.push(k.to_vec());
        }
    })?;
    for chunk in dead.chunks(BATCH) {
        eng.delete_batch(chunk)?;
    }
    Ok(dead.len() as u64)
}

/// Phase `ttl` (`with_ttl`) or `nottl` (same writes, no expiry, no upkeep, no reads).
pub fn churn(kind: Kind, dir: &Path, p: Params, with_ttl: bool) -> Res<Value> {
    let clock = ManualClock::at_unix_secs(START);
    let o = OpenOpts {
        durability: Durability::Relaxed,
        clock: Some(clock.clone()),
        ttl_secs: with_ttl.then_some(p.ttl_secs as u32),
    };
    let eng = open(kind, dir, &o)?;
    let baseline = dir_bytes(dir);
    let (w, ts) = (p.per_tick(), p.tick_secs());
    let mut rng = Rng::new(7);
    let (mut foreground, mut upkeep) = (Duration::ZERO, Duration::ZERO);
    let (mut reads, mut expired_reads, mut stale, mut live_missing, mut swept) = (0u64, 0, 0, 0, 0);
    let mut samples: Vec<(u64, u64, u64)> = Vec::new(); // (sim secs, disk bytes, live bytes)
    let mut native = false;
    let mut buf: Vec<([u8; 16], [u8; VALUE_LEN])> = Vec::with_capacity(BATCH);
    let total_ticks = p.churn_ticks + if with_ttl { p.drain_ticks } else { 0 };
    for tick in 0..total_ticks {
        let now = START + tick * ts;
        clock.set_unix_millis(now * 1000);
        let t0 = Instant::now();
        if tick < p.churn_ticks {
            let expiry = if with_ttl { now + p.ttl_secs } else { u64::MAX };
            for id in tick * w..(tick + 1) * w {
                buf.push((key(id), value(id, expiry)));
                if buf.len() == BATCH || id + 1 == (tick + 1) * w {
                    let refs: Vec<(&[u8], &[u8])> =
                        buf.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                    eng.put_batch(&refs)?;
                    buf.clear();
                }
            }
        }
        let t1 = Instant::now();
        if with_ttl {
            native = eng.ttl_tick()?;
            if !native && tick % p.sweep_every == 0 {
                swept += sweep(&*eng, now)?;
            }
        }
        if tick < p.churn_ticks {
            upkeep += t1.elapsed();
            foreground += t0.elapsed();
        }
        if !with_ttl {
            continue;
        }
        if tick >= p.churn_ticks {
            std::thread::sleep(Duration::from_millis(10)); // let background threads run
        }
        // Reads over the keys written in the last two TTLs: about half should be expired.
        let written = w * tick.min(p.churn_ticks - 1) + w;
        let lo = written.saturating_sub(2 * p.live);
        for _ in 0..p.reads_per_tick {
            let id = lo + rng.below(written - lo);
            let should_expire = START + (id / w) * ts + p.ttl_secs <= now;
            reads += 1;
            expired_reads += u64::from(should_expire);
            match eng.get(&key(id))? {
                Some(v) if expiry_of(&v) <= now => stale += 1,
                Some(_) => {}
                None if !should_expire => live_missing += 1,
                None => {}
            }
        }
        let live_ticks = (tick.min(p.churn_ticks - 1) + 1)
            .saturating_sub((tick + 1).saturating_sub(p.ticks_per_ttl))
            .min(p.ticks_per_ttl);
        let live_bytes = live_ticks * w * (16 + VALUE_LEN as u64);
        samples.push((
            tick * ts,
            dir_bytes(dir).saturating_sub(baseline),
            live_bytes,
        ));
    }
    let writes = p.churn_ticks * w;
    let mut out = json!({
        "writes_per_s": writes as f64 / foreground.as_secs_f64(),
        "upkeep_secs": upkeep.as_secs_f64(),
        "rss": peak_rss(),
    });
    if with_ttl {
        out["native"] = json!(native);
        out["reads"] = json!(reads);
        out["expired_reads"] = json!(expired_reads);
        out["stale"] = json!(stale);
        out["live_missing"] = json!(live_missing);
        out["swept"] = json!(swept);
        out["baseline"] = json!(baseline);
        out["samples"] = json!(samples);
        out["note"] = json!(eng.note());
        summarize(&p, &samples, &mut out);
    }
    drop(eng);
    Ok(out)
}

/// Space amplification in steady state and reclamation lag.
fn summarize(p: &Params, samples: &[(u64, u64, u64)], out: &mut Value) {
    let ts = p.tick_secs();
    // Steady state: the last two TTLs of the churn.
    let steady: Vec<f64> = samples
        .iter()
        .filter(|s| s.0 / ts >= p.churn_ticks - 2 * p.ticks_per_ttl && s.0 / ts < p.churn_ticks)
        .map(|s| s.1 as f64 / s.2.max(1) as f64)
        .collect();
    let mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
    let max = steady.iter().copied().fold(0.0, f64::max);
    out["amp_mean"] = json!(mean);
    out["amp_max"] = json!(max);
    // Reclamation lag: disk bytes (above the empty store) at the last write are the reference.
    // An engine that freed bytes the instant they expired would be down to (1 - q) of it when
    // a share q of the last live set has expired; the lag of the q-quantile byte is how much
    // later the engine got there.
    let last = p.churn_ticks - 1;
    let reference = samples.get(last as usize).map_or(0, |s| s.1);
    let end = samples.last().map_or(0, |s| s.1);
    out["left_share"] = json!(end as f64 / reference.max(1) as f64);
    out["lag_horizon_secs"] =
        json!(samples.last().map_or(0, |s| s.0) - (last + p.ticks_per_ttl) * ts);
    for (name, q) in [("lag50_secs", 0.5), ("lag90_secs", 0.9)] {
        let ideal = (last as f64 + p.ticks_per_ttl as f64 * q) * ts as f64;
        let hit = samples
            .iter()
            .skip(last as usize)
            .find(|s| (s.1 as f64) <= (1.0 - q) * reference as f64);
        out[name] = hit.map_or(Value::Null, |s| json!(s.0 as f64 - ideal));
    }
}
