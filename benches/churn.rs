//! TTL churn: a steady stream of writes, each a new key with a 60 s TTL, so the live set holds
//! at 100 k keys; run for 20 simulated minutes with only the work the background worker does
//! (an expiry pass every second, the compaction policy every 4 s). Reports disk bytes / live
//! bytes over time and the reclamation lag (expiry → bytes gone), and the foreground write cost
//! of expiry (the same stream without TTL, no purge work).
//!
//! Run: `cargo bench --bench churn` (EBBDB_CHURN_KEYS, EBBDB_CHURN_MINUTES, EBBDB_SEGMENT_KB).

use std::time::{Duration, Instant};

use ebbdb::clock::ManualClock;
use ebbdb::{DefaultTtl, Options, Store, SyncPolicy};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ebbdb::Result<()> {
    let live_keys = env("EBBDB_CHURN_KEYS", 100_000);
    let minutes = env("EBBDB_CHURN_MINUTES", 20);
    let segment = env("EBBDB_SEGMENT_KB", 1024) * 1024;
    let ttl = 60u64;
    let per_sec = live_keys / ttl;
    let value = [0x5Au8; 100];
    println!(
        "TTL churn: {live_keys} live keys, {ttl} s TTL, {per_sec} writes/s, {minutes} simulated minutes, {} KiB segments",
        segment / 1024
    );

    let mut results = Vec::new();
    for with_ttl in [true, false] {
        let dir = tempfile::tempdir()?;
        let clock = ManualClock::at_unix_secs(1_700_000_000);
        let store = Store::open_with(
            dir.path(),
            Options::default()
                .clock(clock.clone())
                .sync(SyncPolicy::Never)
                .segment_size(segment),
        )?;
        let default = if with_ttl {
            DefaultTtl::Seconds(ttl as u32)
        } else {
            DefaultTtl::Off
        };
        let ks = store.create_keyspace("sessions", default)?;
        let mut next = 0u64;
        let mut write_time = Duration::ZERO;
        let mut samples = Vec::new();
        let mut max_lag = 0u64;
        let mut rewritten = 0u64;
        let start = Instant::now();
        for second in 0..minutes * 60 {
            let t = Instant::now();
            for _ in 0..per_sec {
                // Without TTL the live set is kept fixed by deleting the key written 60 s ago.
                ks.put(next.to_be_bytes(), value)?;
                if !with_ttl && next >= live_keys {
                    ks.delete((next - live_keys).to_be_bytes())?;
                }
                next += 1;
            }
            write_time += t.elapsed();
            clock.advance(Duration::from_secs(1));
            store.maintain()?;
            if second % 4 == 3 {
                rewritten += store.compact()?.bytes_after;
            }
            let s = store.stats();
            if let Some(oldest) = s.oldest_unpurged_expiry {
                max_lag = max_lag.max((store.now_unix_millis() / 1000).saturating_sub(oldest));
            }
            if second % 60 == 59 {
                let amp = s.segment_bytes as f64 / s.live_bytes.max(1) as f64;
                samples.push((second + 1, s.segment_bytes, s.live_bytes, amp, s.live_items));
            }
        }
        let total = start.elapsed();
        let writes = next;
        let user_bytes = writes * (40 + 8 + value.len() as u64);
        let write_amp = (user_bytes + rewritten) as f64 / user_bytes as f64;
        println!(
            "{}: compaction rewrote {rewritten} bytes; write amplification {write_amp:.2}",
            if with_ttl { "with TTL" } else { "without TTL" }
        );
        results.push((with_ttl, writes, write_time, total, samples, max_lag));
    }

    for (with_ttl, writes, write_time, total, samples, max_lag) in &results {
        println!();
        println!(
            "{}: {writes} writes, foreground {:.0} writes/s, wall {:.1} s",
            if *with_ttl {
                "with TTL (expiry + compaction)"
            } else {
                "without TTL (explicit deletes)"
            },
            *writes as f64 / write_time.as_secs_f64(),
            total.as_secs_f64()
        );
        if *with_ttl {
            println!("| minute | segment bytes | live bytes | disk/live | live items |");
            println!("|---:|---:|---:|---:|---:|");
            for (s, disk, live, amp, items) in samples {
                println!("| {} | {disk} | {live} | {amp:.2} | {items} |", s / 60);
            }
            let steady: Vec<f64> = samples
                .iter()
                .skip(samples.len() / 2)
                .map(|s| s.3)
                .collect();
            let mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
            let worst = steady.iter().copied().fold(0.0, f64::max);
            println!("steady state (second half): disk/live mean {mean:.2}, worst {worst:.2}");
            println!("reclamation lag (expiry -> bytes gone), worst observed: {max_lag} s");
        }
    }
    if let [a, b] = results.as_slice() {
        let rate = |writes: u64, time: Duration| writes as f64 / time.as_secs_f64();
        println!();
        println!(
            "write cost of expiry: TTL stream runs at {:.2}x the throughput of the same stream with explicit deletes",
            rate(a.1, a.2) / rate(b.1, b.2)
        );
    }
    Ok(())
}
