//! Expiry that keeps up, as a user with a session store would run it: one writer inserts new
//! 16-byte keys with 100-byte values and a TTL (default 10 s) as fast as it can, in batches of
//! 100, `SyncPolicy::Never`, `Options::default()` otherwise, the real clock, and nothing but the
//! background worker doing upkeep (no `compact()` call). Every second it samples the data
//! directory's bytes, the store's live bytes, anonymous RSS, and reads a few keys to check that
//! nothing expired is returned. Reports disk ÷ live bytes over the second half (max and end),
//! writes/s, the slowest batch, RSS, and a final exactness check (`len()` against the keys
//! written within the TTL).
//!
//! The same run without TTL (keys deleted after `TTL` seconds' worth of writes, so the live set
//! is comparable) gives the cost of expiry to the foreground.
//!
//! Run: `cargo bench --bench keeps_up` (EBBDB_KEEPS_UP_SECS=60, EBBDB_KEEPS_UP_TTL=10,
//! EBBDB_KEEPS_UP_ONLY=ttl|nottl for one of the two runs, EBBDB_KEEPS_UP_MALLINFO=1 for glibc's heap figures at each verbose sample, EBBDB_KEEPS_UP_MIXED=1 for TTLs uniform in 1 s..1 h with 10 % of keys without TTL, EBBDB_KEEPS_UP_MIXED_MAX=N to make the longest TTL N s, EBBDB_KEEPS_UP_HUGE=off|all for `ebbdb::set_huge_pages`,
//! EBBDB_KEEPS_UP_VERBOSE=1 for a line per second and one per batch over 15 ms, with the
//! writer thread's CPU time, page faults and context switches over that batch, and for a batch
//! still running at 30 ms the writer's system call and kernel stack at that moment).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ebbdb::{DefaultTtl, Options, Store, SyncPolicy, Ttl, WriteBatch};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes of the regular files in `dir` (allocated or logical, whichever is smaller).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len().min(m.blocks() * 512))
                .sum()
        })
        .unwrap_or(0)
}

/// A field of /proc/self/status in bytes (`RssAnon`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Xs(u64);

impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`-th key written: 16 random-looking bytes that can be computed again.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i).to_le_bytes());
    k[8..].copy_from_slice(&mix(i ^ 0x5555_5555).to_le_bytes());
    k
}

#[derive(Default)]
struct Outcome {
    writes_per_s: f64,
    max_amp: f64,
    end_amp: f64,
    slowest_batch: Duration,
    p99_batch: Duration,
    rss_anon: u64,
    stale: u64,
    /// Keys whose TTL had more than a second left (whole seconds) that a read did not find.
    missing: u64,
    live_keys: u64,
    /// Most live keys seen at a sample.
    peak_live: u64,
    /// Time the writer was paced while merges fell behind (`Stats::paced`).
    paced: Duration,
}

fn run(with_ttl: bool, secs: u64, ttl: u64, mixed: bool) -> ebbdb::Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_with(dir.path(), Options::default().sync(SyncPolicy::Never))?;
    let default = if with_ttl {
        DefaultTtl::Seconds(ttl as u32)
    } else {
        DefaultTtl::Off
    };
    let ks = store.create_keyspace("sessions", default)?;
    let value = [0x5Au8; 100];
    let mut rng = Xs(0x9E37_79B9_7F4A_7C15);
    let start = Instant::now();
    let mut next_sample = 1;
    let mut last_written = 0u64;
    // The longest TTL of the mixed load (`EBBDB_KEEPS_UP_MIXED_MAX`, default 3600 s): a run
    // shorter than it never reaches a steady state, so a shorter maximum shows one.
    let mixed_max = env("EBBDB_KEEPS_UP_MIXED_MAX", 3600).max(1);
    let mut written = 0u64;
    let mut batch_times = Vec::new();
    // (second, disk bytes, live bytes)
    let mut samples: Vec<(u64, u64, u64)> = Vec::new();
    let mut peak_live = 0u64;
    let mut stale = 0u64;
    let mut missing = 0u64;
    // Key i was written at second written_at[i / 100].
    let mut written_at: Vec<u64> = Vec::new();
    let mut deleted = 0u64;
    let verbose = std::env::var("EBBDB_KEEPS_UP_VERBOSE").is_ok();
    // While a batch runs, when it began (µs since `start`, 0 between batches): a verbose run's
    // watchdog reports where the writer is when one takes over 30 ms.
    let batch_began = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watchdog = verbose.then(|| spawn_watchdog(start, std::sync::Arc::clone(&batch_began)));
    while start.elapsed() < Duration::from_secs(secs) {
        let usage_before = verbose.then(thread_usage);
        let t = Instant::now();
        if verbose {
            let began = t.duration_since(start).as_micros().max(1) as u64;
            batch_began.store(began, std::sync::atomic::Ordering::Relaxed);
        }
        let mut batch = WriteBatch::new();
        let second = now_s();
        written_at.push(second);
        for _ in 0..100 {
            let k = key(written);
            if with_ttl && mixed {
                match rng.next() % 10 {
                    0 => batch.put_with_ttl(&ks, k, value, Ttl::Never),
                    _ => batch.put_with_ttl(
                        &ks,
                        k,
                        value,
                        Ttl::Seconds(1 + (rng.next() % mixed_max) as u32),
                    ),
                };
            } else {
                batch.put(&ks, k, value);
            }
            if !with_ttl {
                // Without TTL the writer keeps a comparable live set itself: it deletes the
                // keys written `ttl` seconds ago.
                let horizon = second.saturating_sub(ttl);
                // At most two deletes per write, so the no-TTL writer catches up smoothly.
                let mut budget = 2;
                while budget > 0
                    && deleted < written
                    && written_at[(deleted / 100) as usize] < horizon
                {
                    budget -= 1;
                    batch.delete(&ks, key(deleted));
                    deleted += 1;
                }
            }
            written += 1;
        }
        store.write_batch(batch)?;
        let took = t.elapsed();
        batch_began.store(0, std::sync::atomic::Ordering::Relaxed);
        batch_times.push(took);
        if let Some(before) = usage_before.filter(|_| took > Duration::from_millis(15)) {
            let after = thread_usage();
            let d: Vec<i64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
            let s = store.stats();
            println!(
                "    slow batch {took:?} at {:.2}s: writer CPU user {} µs sys {} µs, faults {} minor {} major, switches {} waits {} preempted; segments {} merges {} expirations {} backlog {}",
                start.elapsed().as_secs_f64(),
                d[0], d[1], d[2], d[3], d[4], d[5],
                s.segments,
                s.merges,
                s.expirations,
                s.expiry_backlog
            );
        }
        let elapsed = start.elapsed().as_secs();
        if elapsed >= next_sample {
            next_sample = elapsed + 1;
            let written_last_sample = std::mem::replace(&mut last_written, written);
            let s = store.stats();
            samples.push((elapsed, dir_bytes(dir.path()), s.live_bytes));
            peak_live = peak_live.max(s.live_items);
            if verbose {
                // Where the disk goes: published segments (their dead share), hints, and
                // files retired but still held by a reader (directory less published).
                let dead: f64 = s
                    .per_segment
                    .iter()
                    .map(|g| g.bytes as f64 * g.dead_share)
                    .sum();
                let mib = |b: f64| b / 1048576.0;
                println!(
                    "    t={elapsed}s MiB: live {:.0} segments {:.0} (dead {:.0}) hints {:.0} other {:.0}",
                    mib(s.live_bytes as f64),
                    mib(s.segment_bytes as f64),
                    mib(dead),
                    mib(s.hint_bytes as f64),
                    mib(samples.last().map_or(0, |x| x.1) as f64)
                        - mib((s.segment_bytes + s.hint_bytes) as f64),
                );
                println!(
                    "    t={elapsed}s writes {} live {} expired-unpurged {} backlog {} timers {} segments {} merges {} expirations {} rss {} MiB",
                    written - written_last_sample,
                    s.live_items,
                    s.expired_items,
                    s.expiry_backlog,
                    s.timers_armed,
                    s.segments,
                    s.merges,
                    s.expirations,
                    status_bytes("RssAnon:") >> 20
                );
                if std::env::var("EBBDB_KEEPS_UP_MALLINFO").is_ok() {
                    print_mallinfo(elapsed);
                }
            }
            if with_ttl && !mixed {
                // Spot-check exactness: a key whose TTL ran out more than a second ago must
                // be gone, and one whose TTL has more than a second left must be found.
                let now = now_s();
                let mut check_live = |i: u64, what: &str| -> ebbdb::Result<()> {
                    let at = written_at[(i / 100) as usize];
                    if at + ttl > now + 1 && ks.get(key(i))?.is_none() {
                        missing += 1;
                        let again = ks.get(key(i))?.is_some();
                        println!(
                            "    MISSING {what} key {i} written at {at}, now {now}, found on a second read: {again}"
                        );
                    }
                    Ok(())
                };
                for _ in 0..20 {
                    let i = rng.next() % written;
                    if written_at[(i / 100) as usize] + ttl + 1 < now && ks.get(key(i))?.is_some() {
                        stale += 1;
                    }
                    check_live(i, "live")?;
                }
                // The newest keys, which a merge or a drop may be racing.
                for back in 1..=20u64.min(written) {
                    check_live(written - back * 37 % written, "new")?;
                }
            }
        }
    }
    if let Some((stop, thread)) = watchdog {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = thread.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let live_keys = ks.len()? as u64;
    let half = samples.len() / 2;
    let amps: Vec<f64> = samples[half..]
        .iter()
        .map(|&(_, disk, live)| disk as f64 / live.max(1) as f64)
        .collect();
    for &(sec, disk, live) in &samples {
        if sec % 5 == 0 {
            println!(
                "  {} t={sec:>3}s disk {:>7.1} MiB live {:>7.1} MiB ratio {:>5.2}",
                if with_ttl { "ttl  " } else { "nottl" },
                disk as f64 / 1048576.0,
                live as f64 / 1048576.0,
                disk as f64 / live.max(1) as f64
            );
        }
    }
    batch_times.sort();
    let p99 = batch_times
        .get(batch_times.len() * 99 / 100)
        .copied()
        .unwrap_or_default();
    Ok(Outcome {
        writes_per_s: written as f64 / elapsed,
        max_amp: amps.iter().copied().fold(0.0, f64::max),
        end_amp: amps.last().copied().unwrap_or(0.0),
        slowest_batch: batch_times.last().copied().unwrap_or_default(),
        p99_batch: p99,
        rss_anon: status_bytes("RssAnon:"),
        stale,
        missing,
        live_keys,
        peak_live,
        paced: store.stats().paced,
    })
}

/// `EBBDB_KEEPS_UP_MALLINFO=1`: glibc's heap figures at each sample (all arenas): the heap's
/// size, the bytes allocated in it and free in it, and what is mapped apart. They tell a
/// leak (allocated bytes growing) from the heap's free pages being touched (DESIGN.md §3,
/// "Resident memory over time").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn print_mallinfo(elapsed: u64) {
    // SAFETY: `mallinfo2` takes no arguments, only reads the allocator's counters under its
    // own locks, and returns a plain struct by value.
    #[allow(unsafe_code)]
    let m = unsafe { libc::mallinfo2() };
    println!(
        "    t={elapsed}s malloc MiB: heap {} allocated {} free {} mapped apart {}",
        m.arena >> 20,
        m.uordblks >> 20,
        m.fordblks >> 20,
        m.hblkhd >> 20
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn print_mallinfo(_elapsed: u64) {}

/// A verbose run's watchdog: every 5 ms it looks at the batch in progress, and once one has
/// run 30 ms it prints the writer thread's system call and kernel stack (Linux's
/// `/proc/self/task/<tid>/syscall` and `stack`, the latter readable by root only), once per
/// batch: what a slow batch waits on, which its CPU and switch counts cannot tell.
type Watchdog = (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
);

fn spawn_watchdog(
    start: Instant,
    batch_began: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Watchdog {
    use std::sync::atomic::Ordering;
    let writer = writer_tid();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let mut reported = 0;
        while !stopped.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
            let began = batch_began.load(Ordering::Relaxed);
            let now = start.elapsed().as_micros() as u64;
            if began == 0 || began == reported || now.saturating_sub(began) < 30_000 {
                continue;
            }
            reported = began;
            let read = |what: &str| {
                std::fs::read_to_string(format!("/proc/self/task/{writer}/{what}"))
                    .unwrap_or_else(|e| format!("({e})"))
            };
            println!(
                "    watchdog: batch at {:.3}s running {} ms; writer syscall: {}    kernel stack:\n{}",
                began as f64 / 1e6,
                (now - began) / 1000,
                read("syscall"),
                read("stack")
            );
        }
    });
    (stop, thread)
}

/// The calling thread's id (Linux), for the watchdog's `/proc` paths.
#[cfg(target_os = "linux")]
fn writer_tid() -> i32 {
    // SAFETY: `gettid` takes no arguments and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::gettid()
    }
}

#[cfg(not(target_os = "linux"))]
fn writer_tid() -> i32 {
    0
}

/// The calling thread's CPU time (user, system, in µs), page faults (minor, major) and
/// context switches (voluntary: it waited; involuntary: it was preempted), for the verbose
/// report of a slow batch: the deltas over the batch tell work done in the writer from waits.
#[cfg(target_os = "linux")]
fn thread_usage() -> [i64; 6] {
    // SAFETY: `rusage` is plain integers, for which all zeros is a valid value.
    #[allow(unsafe_code)]
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `getrusage` writes the calling thread's figures into the struct it is given,
    // which is ours and of the right type; it keeps no pointer to it.
    #[allow(unsafe_code)]
    unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru)
    };
    [
        ru.ru_utime.tv_sec * 1_000_000 + ru.ru_utime.tv_usec,
        ru.ru_stime.tv_sec * 1_000_000 + ru.ru_stime.tv_usec,
        ru.ru_minflt,
        ru.ru_majflt,
        ru.ru_nvcsw,
        ru.ru_nivcsw,
    ]
}

#[cfg(not(target_os = "linux"))]
fn thread_usage() -> [i64; 6] {
    [0; 6]
}

fn main() -> ebbdb::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    // EBBDB_KEEPS_UP_HUGE=off|all sets ebbdb::set_huge_pages (LargeMaps otherwise).
    match std::env::var("EBBDB_KEEPS_UP_HUGE").as_deref() {
        Ok("off") => ebbdb::set_huge_pages(ebbdb::HugePages::Off),
        Ok("all") => ebbdb::set_huge_pages(ebbdb::HugePages::All),
        _ => {}
    }
    let secs = env("EBBDB_KEEPS_UP_SECS", 60);
    let ttl = env("EBBDB_KEEPS_UP_TTL", 10);
    let mixed = env("EBBDB_KEEPS_UP_MIXED", 0) == 1;
    println!("keeps up: {secs} s, TTL {ttl} s{}, batches of 100, SyncPolicy::Never, real clock, background upkeep only", if mixed { " (mixed)" } else { "" });
    // EBBDB_KEEPS_UP_ONLY=ttl or =nottl runs one of the two (both otherwise).
    let only = std::env::var("EBBDB_KEEPS_UP_ONLY").unwrap_or_default();
    let with = if only == "nottl" {
        Outcome::default()
    } else {
        run(true, secs, ttl, mixed)?
    };
    let without = if only == "ttl" {
        Outcome::default()
    } else {
        run(false, secs, ttl, mixed)?
    };
    for (name, o) in [("with TTL", &with), ("without TTL", &without)] {
        println!(
            "{name:>12}: {:>8.0} writes/s, disk/live 2nd half max {:.2} end {:.2}, batch p99 {:?} max {:?}, RssAnon {:.0} MiB ({:.0} B per peak live key, {}), live keys {}, stale {}, live keys missing {}, paced {:.1} s",
            o.writes_per_s,
            o.max_amp,
            o.end_amp,
            o.p99_batch,
            o.slowest_batch,
            o.rss_anon as f64 / 1048576.0,
            o.rss_anon as f64 / o.peak_live.max(1) as f64,
            o.peak_live,
            o.live_keys,
            o.stale,
            o.missing,
            o.paced.as_secs_f64()
        );
    }
    println!(
        "TTL write rate / no-TTL write rate: {:.2}",
        with.writes_per_s / without.writes_per_s.max(1.0)
    );
    if with.stale + with.missing + without.stale + without.missing > 0 {
        eprintln!("keeps up: a read returned an expired key or missed a live one");
        std::process::exit(1);
    }
    Ok(())
}
