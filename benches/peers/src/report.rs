//! docs/benchmarks.md (the plots are in `plots.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::engines::{Kind, Res};
use crate::Config;

const NOTES: &str = "
How to read the TTL table:

- Disk bytes are the directory's files, each counted as min(length, allocated blocks): neither
  sparse holes nor space preallocated past the end of a file (RocksDB's WAL while open) count.
  Disk / live bytes divides that, above the empty store, by 116 × the keys live at that moment,
  averaged over the last two TTLs of the writes.
- Reclamation lag: disk usage above the empty store at the last write is the reference. The
  90th-percentile lag is when usage first fell to 10% of it, minus when an engine that freed
  bytes the instant they expire would get there (when 90% of the last live set has expired);
  the median lag likewise with 50%. `> N` means it never got there: N simulated seconds after
  the last item expired the run ended; the row above says how much was still on disk.
- Write cost: write throughput with expiry and its upkeep, over the same writes with no TTL and
  no upkeep (both on the simulated clock, ticks back to back: the upkeep that a real deployment
  spreads over 36 s per tick runs here between two batches, so its share is exaggerated the same
  way for every engine).
- Stale reads for the sweeping peers are set by the sweep interval. RocksDB's filter only runs
  when RocksDB compacts; with its default 64 MiB write buffer and 4-file level-0 trigger this
  churn starts few compactions, and in these runs the filter removed none of the keys the
  reads asked for: every read of an expired key returned it.

![disk over simulated time](peers-ttl-space.svg)

Other notes:

- Phases run phase by phase (every engine's fill, then every engine's reopen, ...), so engines
  compared in one row ran minutes apart at most. The durable phase runs twice (engines in
  reverse order the second time) and each engine keeps its better round.
- Warm reads run right after the fill, while the LSM engines (fjall, RocksDB) may still be
  compacting in the background; that is one reason their reads after reopen can be faster.
- Durable fill: each put returns after its own sync call. Counted with `strace -c` on the quick
  durable phase, with redb 2 and fjall 2 (not re-counted since the upgrade) (1,000 writes from 1 thread then 2,000 from 4): ebbdb 1 `fdatasync` per write
  from one thread and shared ones under concurrency (group commit: 1,694 for 3,000 writes);
  redb one `fdatasync` per commit (3,008); fjall one `fsync` per `persist` (3,014); RocksDB
  1,821 `fdatasync` (its WAL group commit shares some); sled's `flush()` calls
  `sync_file_range` (2,998), which neither flushes the drive's write cache nor file metadata,
  so sled's figures are not for the same guarantee. fsync latency on this virtual disk varies
  run to run by 2× or more: compare these rows with care.
- Reads after reopen run in a new process (engine caches cold), but the OS page cache is not
  dropped. Peak RSS is VmHWM of the child process that ran the phase.
- Cold random gets (page cache dropped), as after a reboot: another new process, after the
  reopen phase, first drops the directory's files from the page cache (each file fsynced, then
  `sync`, `1` written to /proc/sys/vm/drop_caches when run as root, and
  `posix_fadvise(POSIX_FADV_DONTNEED)` on every file; the method used is in the raw results),
  then opens the engine (the open time beside it includes that cold open and a first read) and
  runs the warm reads' gets (same keys, same count). The rate averages over the whole run, in
  which the page cache warms up again; `mincore` gives the share still resident after the
  eviction (its row in the resources table).
- Space after churn: a fresh directory, the fill, then one operation per key in 1,000-op
  batches (each batch's puts, then its deletes); disk (files counted as min(length,
  allocated)) over 116 bytes per key the harness knows to be live. The full compaction is each
  engine's own call (ebbdb `compact_full`, redb `compact` after a durable commit, until it
  reports nothing left, fjall `major_compact`, RocksDB `compact_range` over everything; sled
  has none), measured when the call returns.
";

pub struct Run {
    pub cfg: Config,
    pub kinds: Vec<Kind>,
    pub results: BTreeMap<&'static str, Map<String, Value>>,
    pub failures: Vec<(String, String, String)>,
    pub secs: f64,
    pub fsync_ms: f64,
    pub load_start: String,
    pub load_end: String,
    pub ebbdb_rev: String,
}

impl Run {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "engines": self.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "results": self.results,
            "failures": self.failures,
            "secs": self.secs,
            "fsync_ms": self.fsync_ms,
            "load_start": self.load_start,
            "load_end": self.load_end,
            "ebbdb_rev": self.ebbdb_rev,
        })
    }

    pub fn from_json(v: &Value, cfg: Config) -> Res<Run> {
        let kinds: Vec<Kind> = v["engines"]
            .as_array()
            .ok_or("no engines")?
            .iter()
            .filter_map(|n| Kind::parse(n.as_str()?))
            .collect();
        let mut results = BTreeMap::new();
        for k in &kinds {
            if let Some(m) = v["results"].get(k.name()).and_then(Value::as_object) {
                results.insert(k.name(), m.clone());
            }
        }
        Ok(Run {
            cfg,
            kinds,
            results,
            failures: serde_json::from_value(v["failures"].clone())?,
            secs: v["secs"].as_f64().unwrap_or(0.0),
            fsync_ms: v["fsync_ms"].as_f64().unwrap_or(f64::NAN),
            load_start: v["load_start"].as_str().unwrap_or("").to_string(),
            load_end: v["load_end"].as_str().unwrap_or("").to_string(),
            ebbdb_rev: v["ebbdb_rev"].as_str().unwrap_or("unknown").to_string(),
        })
    }
}

/// What the load average at the start says about the machine: with nothing else running it
/// is near 0 (the engines' own load comes later, in the end figure).
fn sharing(load_start: &str) -> &'static str {
    match load_start.trim().parse::<f64>() {
        Ok(l) if l < 0.5 => "Nothing else ran on the machine when the run started.",
        Ok(_) => {
            "The load average was not near zero when the run started: other work may have run on \
             the same 2 cores (the load average also counts work that had just finished)."
        }
        Err(_) => "The load of the machine was not recorded.",
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(String::from))
        .unwrap_or_default()
}

pub const COLORS: [&str; 5] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"];

/// Mean latency of a 128-byte write + fdatasync in `dir`, milliseconds.
pub fn fsync_latency_ms(dir: &Path) -> f64 {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let Ok(mut f) = std::fs::File::create(&path) else {
        return f64::NAN;
    };
    let t = Instant::now();
    for _ in 0..200 {
        if f.write_all(&[0u8; 128])
            .and_then(|()| f.sync_data())
            .is_err()
        {
            return f64::NAN;
        }
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0 / 200.0;
    let _ = std::fs::remove_file(path);
    ms
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!(
        "{cores} cores ({cpu}), {mem_gib:.0} GiB RAM, Linux {}, {rustc}",
        kernel.trim()
    )
}

pub fn num(m: &Map<String, Value>, k: &str) -> Option<f64> {
    m.get(k).and_then(Value::as_f64)
}

fn fmt_num(x: f64) -> String {
    if x >= 100.0 || (x.fract() == 0.0 && x >= 0.0) {
        let s = format!("{x:.0}");
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A table row: each engine's value and its ratio to ebbdb's.
fn row(out: &mut String, run: &Run, label: &str, key: &str, scale: f64) {
    let base = run.results.get("ebbdb").and_then(|m| num(m, key));
    let _ = write!(out, "| {label} |");
    for k in &run.kinds {
        let cell = match run.results.get(k.name()).and_then(|m| num(m, key)) {
            Some(v) => match base {
                Some(b) if k.name() != "ebbdb" && b > 0.0 => {
                    format!(" {} ({:.2}×)", fmt_num(v * scale), v / b)
                }
                _ => format!(" {}", fmt_num(v * scale)),
            },
            None => " —".into(),
        };
        let _ = write!(out, "{cell} |");
    }
    out.push('\n');
}

fn header(out: &mut String, run: &Run, first: &str) {
    let _ = write!(out, "| {first} |");
    for k in &run.kinds {
        let _ = write!(out, " {} |", k.name());
    }
    out.push('\n');
    out.push_str("|---|");
    for _ in &run.kinds {
        out.push_str("---:|");
    }
    out.push('\n');
}

fn text_row(
    out: &mut String,
    run: &Run,
    label: &str,
    f: impl Fn(&Map<String, Value>) -> Option<String>,
) {
    let _ = write!(out, "| {label} |");
    for k in &run.kinds {
        let cell = run
            .results
            .get(k.name())
            .and_then(&f)
            .unwrap_or_else(|| "—".into());
        let _ = write!(out, " {cell} |");
    }
    out.push('\n');
}

pub fn write(docs: &Path, run: &Run) -> Res<()> {
    let c = &run.cfg;
    let p = &c.ttl;
    let mib = 1.0 / (1024.0 * 1024.0);
    let mut o = String::new();
    let cmd = format!(
        "cd benches/peers && nice -n 19 cargo run --release -j 1{}",
        if c.quick { " -- --quick" } else { "" }
    );
    let _ = writeln!(o, "# Benchmarks against peers\n");
    let _ = writeln!(o, "ebbdb against redb, fjall, sled and RocksDB on the same machine, in the same run. Generated by `benches/peers` (its own Cargo workspace; CI never builds it):\n\n```sh\n{cmd}\n```\n");
    let _ = writeln!(o, "ebbdb measured at commit `{}`.\n", run.ebbdb_rev);
    let _ = writeln!(o, "Size: {} keys{}, 16-byte keys, 100-byte values (incompressible), keys written in random order. The whole run took {:.0} s.\n", fmt_num(c.n as f64), if c.quick { " (`--quick`)" } else { "" }, run.secs);
    let _ = writeln!(o, "Machine: {}; one fdatasync ≈ {:.2} ms on the data directory's disk; 1-minute load average {} at the start and {} at the end of the run. {} Treat differences under ~20% as noise.\n", machine(), run.fsync_ms, run.load_start, run.load_end, sharing(&run.load_start));
    o.push_str("## Engines and configurations\n\n");
    for k in &run.kinds {
        let _ = writeln!(o, "- {}", k.describe());
    }
    if !run.failures.is_empty() {
        o.push_str("\nFailed phases (their cells show —):\n\n");
        for (e, ph, why) in &run.failures {
            let _ = writeln!(o, "- {e} / {ph}: {why}");
        }
    }
    o.push_str("\n## Throughput\n\nops/s unless said; in parentheses the ratio to ebbdb's figure in this run (above 1× = the peer is higher).\n\n");
    header(&mut o, run, "workload");
    row(
        &mut o,
        run,
        "bulk fill, 1,000-op batches, no fsync",
        "fill_ops",
        1.0,
    );
    row(
        &mut o,
        run,
        &format!("durable fill, fsync per op, 1 thread ({} ops)", c.durable_1),
        "durable_1t",
        1.0,
    );
    row(
        &mut o,
        run,
        &format!(
            "durable fill, fsync per op, 4 threads ({} ops)",
            c.durable_4
        ),
        "durable_4t",
        1.0,
    );
    row(&mut o, run, "uniform random reads, warm", "warm_reads", 1.0);
    row(
        &mut o,
        run,
        "uniform random reads after reopen",
        "cold_reads",
        1.0,
    );
    row(
        &mut o,
        run,
        "cold random get (page cache dropped)",
        "cold_get_ops",
        1.0,
    );
    row(
        &mut o,
        run,
        "90% reads / 10% overwrites, 2 threads",
        "mixed_ops",
        1.0,
    );
    row(&mut o, run, "full scan (keys/s)", "scan_keys_per_s", 1.0);
    o.push_str("\nResources (lower is better; ratio to ebbdb in parentheses):\n\n");
    header(&mut o, run, "measure");
    row(
        &mut o,
        run,
        "open time after the fill (ms, open + first read)",
        "open_secs",
        1000.0,
    );
    row(
        &mut o,
        run,
        "open time, page cache dropped (ms, open + first read)",
        "cold_open_secs",
        1000.0,
    );
    text_row(
        &mut o,
        run,
        "page cache dropped: resident before → after eviction, of the directory (MiB)",
        |m| {
            Some(format!(
                "{:.1} → {:.1} of {:.1}",
                num(m, "cold_resident_before")? * mib,
                num(m, "cold_resident_after")? * mib,
                num(m, "cold_bytes")? * mib
            ))
        },
    );
    row(
        &mut o,
        run,
        "disk after the fill (MiB)",
        "disk_after_fill",
        mib,
    );
    row(
        &mut o,
        run,
        "disk / live bytes after churn (fill, then 1 op per key: ½ overwrites, ¼ deletes, ¼ new keys)",
        "space_churned",
        1.0,
    );
    row(
        &mut o,
        run,
        "the same after 10 idle seconds (background work only)",
        "space_idle",
        1.0,
    );
    row(
        &mut o,
        run,
        "the same after the engine's full compaction (sled has none)",
        "space_full",
        1.0,
    );
    row(
        &mut o,
        run,
        "peak RSS: fill + warm reads + scan + 90/10 (MiB)",
        "rss_load",
        mib,
    );
    row(
        &mut o,
        run,
        "peak RSS: reopen + reads (MiB)",
        "rss_reopen",
        mib,
    );
    o.push_str("\n![ops/s relative to ebbdb](peers-throughput.svg)\n");

    let _ = write!(o, "\n## TTL churn (simulated time)\n\nA live set of {} keys: every {} simulated seconds (one tick) {} fresh keys are written with a TTL of {} s, so the live set turns over once per TTL; {} ticks of writes ({} writes), then {} ticks with writes stopped. Every value carries its expiry in its first 8 bytes for every engine, so a read returning a value past that expiry is counted as stale whatever the engine. {} reads per tick pick uniformly among the keys written in the last two TTLs (about half of them should be expired).\n\n",
        fmt_num(p.live as f64), p.tick_secs(), fmt_num(p.per_tick() as f64), p.ttl_secs, p.churn_ticks, fmt_num((p.churn_ticks * p.per_tick()) as f64), p.drain_ticks, p.reads_per_tick);
    let _ = write!(o, "TTL mechanisms: ebbdb — keyspace default TTL on a `ManualClock`, background worker only (no `compact()` call: the ticks run faster than real time, so this shows how far the worker's real-time cadence lags simulated time); fjall — compaction filter comparing the embedded expiry with the same simulated clock, reads check the stamp; RocksDB — compaction filter comparing the embedded expiry with the same simulated clock (passive: runs only when RocksDB compacts; `DB::open_with_ttl` uses the wall clock, so it cannot follow simulated time); redb, sled — full-scan sweep every {} ticks ({} simulated seconds) deleting every key whose expiry passed. Reads are the engine's raw answer (fjall's after its stamp check): an application that decodes the expiry on every read could hide stale values for the peers, at that cost.\n\n", p.sweep_every, p.sweep_every * p.tick_secs());
    header(&mut o, run, "measure");
    text_row(&mut o, run, "stale reads (share of all reads)", |m| {
        let (s, r) = (num(m, "ttl_stale")?, num(m, "ttl_reads")?);
        Some(format!(
            "{:.2}% ({} of {})",
            100.0 * s / r.max(1.0),
            fmt_num(s),
            fmt_num(r)
        ))
    });
    text_row(
        &mut o,
        run,
        "stale reads (share of reads of expired keys)",
        |m| {
            let (s, r) = (num(m, "ttl_stale")?, num(m, "ttl_expired_reads")?);
            Some(format!("{:.1}%", 100.0 * s / r.max(1.0)))
        },
    );
    text_row(&mut o, run, "live keys not found (must be 0)", |m| {
        num(m, "ttl_live_missing").map(fmt_num)
    });
    text_row(
        &mut o,
        run,
        "disk / live bytes, steady state (mean / max)",
        |m| {
            Some(format!(
                "{:.2} / {:.2}",
                num(m, "ttl_amp_mean")?,
                num(m, "ttl_amp_max")?
            ))
        },
    );
    text_row(
        &mut o,
        run,
        "disk above the empty store at the end, share of that at the last write",
        |m| Some(format!("{:.0}%", 100.0 * num(m, "ttl_left_share")?)),
    );
    for (label, key) in [
        (
            "reclamation lag, median byte (simulated s)",
            "ttl_lag50_secs",
        ),
        (
            "reclamation lag, 90th-percentile byte (simulated s)",
            "ttl_lag90_secs",
        ),
    ] {
        text_row(&mut o, run, label, |m| match num(m, key) {
            Some(l) => Some(format!("{l:.0}")),
            None => Some(format!("> {:.0}", num(m, "ttl_lag_horizon_secs")?)),
        });
    }
    row(
        &mut o,
        run,
        "writes/s with TTL (upkeep included)",
        "ttl_writes_per_s",
        1.0,
    );
    row(
        &mut o,
        run,
        "writes/s, same load without TTL",
        "nottl_writes_per_s",
        1.0,
    );
    text_row(
        &mut o,
        run,
        "write cost of expiry (with / without TTL)",
        |m| {
            Some(format!(
                "{:.2}×",
                num(m, "ttl_writes_per_s")? / num(m, "nottl_writes_per_s")?
            ))
        },
    );
    text_row(
        &mut o,
        run,
        "upkeep time during the writes (s: compact / sweep)",
        |m| num(m, "ttl_upkeep_secs").map(|s| format!("{s:.2}")),
    );
    row(&mut o, run, "peak RSS, TTL churn (MiB)", "ttl_rss", mib);
    text_row(&mut o, run, "engine counters", |m| {
        m.get("ttl_note").and_then(Value::as_str).map(String::from)
    });
    o.push_str(NOTES);
    // The keeps-up section comes from its own run (`--keeps-up`), and the sections after it
    // are written by hand (change feed, queries): all carried over as they are.
    let old = std::fs::read_to_string(docs.join("benchmarks.md")).unwrap_or_default();
    if let Some(rest) = carried_over(&old) {
        o.push('\n');
        o.push_str(rest.trim_end());
        o.push('\n');
    }
    std::fs::write(docs.join("benchmarks.md"), o)?;
    std::fs::write(docs.join("peers-throughput.svg"), crate::plots::bars(run))?;
    std::fs::write(docs.join("peers-ttl-space.svg"), crate::plots::lines(run))?;
    Ok(())
}

const KEEPS_UP_BEGIN: &str = "<!-- keeps-up: generated by `cargo run --release -- --keeps-up` -->";
const KEEPS_UP_END: &str = "<!-- /keeps-up -->";

/// What follows the generated sections of a benchmarks.md: from the keeps-up section (its
/// begin marker, or its heading if the marker was lost in an edit) to the end.
fn carried_over(md: &str) -> Option<&str> {
    match md.find(KEEPS_UP_BEGIN) {
        Some(a) => Some(&md[a..]),
        None => md.find("\n## Expiry that keeps up").map(|a| &md[a + 1..]),
    }
}

const MIXED_BEGIN: &str =
    "<!-- keeps-up-mixed: generated by `cargo run --release -- --keeps-up-mixed=N` -->";
const MIXED_END: &str = "<!-- /keeps-up-mixed -->";

/// A generated section of a benchmarks.md between `begin` and `end`, markers included.
fn section<'m>(md: &'m str, begin: &str, end: &str) -> Option<&'m str> {
    let a = md.find(begin)?;
    let b = md[a..].find(end)? + a + end.len();
    Some(&md[a..b])
}

/// Disk over time, one row per 5 s: each engine's directory size (MiB) and disk ÷ live bytes
/// at the first sample at or after that second.
fn keeps_up_over_time(o: &mut String, run: &Run, secs: f64) {
    let mib = 1.0 / (1024.0 * 1024.0);
    o.push_str("Disk over time (MiB on disk, and ÷ live bytes in parentheses; the first sample at or after each 5 s mark):\n\n");
    header(o, run, "s");
    let mut t = 5.0;
    while t <= secs + 0.5 {
        let _ = write!(o, "| {t:.0} |");
        for k in &run.kinds {
            let cell = run
                .results
                .get(k.name())
                .and_then(|m| m.get("samples"))
                .and_then(Value::as_array)
                .and_then(|v| {
                    v.iter()
                        .filter_map(Value::as_array)
                        .find(|s| {
                            s.first()
                                .and_then(Value::as_f64)
                                .is_some_and(|x| x >= t - 0.5)
                        })
                        .and_then(|s| {
                            let disk = s.get(1)?.as_f64()?;
                            let live = s.get(2)?.as_f64()?.max(1.0);
                            Some(format!("{:.0} ({:.2}×)", disk * mib, disk / live))
                        })
                })
                .unwrap_or_else(|| "—".into());
            let _ = write!(o, " {cell} |");
        }
        o.push('\n');
        t += 5.0;
    }
    o.push('\n');
}

/// Writes (or replaces) the keeps-up section of docs/benchmarks.md and its plot.
pub fn write_keeps_up(docs: &Path, run: &Run) -> Res<()> {
    use crate::keeps_up::{mechanism, RECORD, TTL_SECS};
    let mib = 1.0 / (1024.0 * 1024.0);
    let secs = run
        .results
        .values()
        .find_map(|m| num(m, "secs"))
        .unwrap_or(0.0);
    let mixed = run
        .results
        .values()
        .find_map(|m| num(m, "mixed_max"))
        .map(|n| n as u64);
    let flag = match mixed {
        Some(n) if secs == 2.0 * crate::keeps_up::DEFAULT_SECS as f64 => {
            format!("--keeps-up-mixed={n}")
        }
        Some(n) => format!("--keeps-up-mixed={n} --keeps-up-secs={secs:.0}"),
        None if secs == crate::keeps_up::DEFAULT_SECS as f64 => "--keeps-up".to_string(),
        None => format!("--keeps-up-secs={secs:.0}"),
    };
    let (begin, end, svg) = match mixed {
        Some(_) => (MIXED_BEGIN, MIXED_END, "peers-keeps-up-mixed.svg"),
        None => (KEEPS_UP_BEGIN, KEEPS_UP_END, "peers-keeps-up.svg"),
    };
    let names: Vec<&str> = run.kinds.iter().map(|k| k.name()).collect();
    let mut o = String::new();
    let _ = writeln!(o, "{begin}\n");
    if let Some(n) = mixed {
        let _ = writeln!(o, "## Expiry that keeps up, mixed TTLs (real clock)\n");
        let _ = writeln!(o, "The same workload with a TTL per key, uniform in 1..={n} s, and one key in ten without a TTL (the main crate's `EBBDB_KEEPS_UP_MIXED=1 EBBDB_KEEPS_UP_MIXED_MAX={n}`): no file dies whole before it is merged, so space depends on merges of partly expired files. Each key's TTL is a hash of its counter; its expiry stamp is the write second plus the TTL (never: `u64::MAX`), and live bytes count the keys whose stamp is after the current second. Probes: 20 random keys expired more than 1 s ago and 20 with more than 1 s left. Everything else as in the section above.\n\n```sh\ncd benches/peers && nice -n 19 cargo run --release -j 1 -- {flag}\n```\n");
    } else {
        let _ = writeln!(o, "## Expiry that keeps up (real clock)\n");
        let _ = writeln!(o, "The workload of the main crate's `benches/keeps_up.rs` (issue 17), run the same way for every engine, each in its own process:\n\n```sh\ncd benches/peers && nice -n 19 cargo run --release -j 1 -- {flag}\n```\n");
        let _ = writeln!(o, "One writer inserts fresh 16-byte keys (a hash of a counter, then the counter: random order, recomputable) with 100-byte incompressible values and a TTL of {TTL_SECS} s, in batches of 100, as fast as it can for {secs:.0} s, with no fsync per write (ebbdb `SyncPolicy::Never` and `Options::default()` otherwise; RocksDB WAL without sync; fjall journal in OS buffers; redb `Durability::None` commits with every 64th `Immediate`). The real clock, and nothing but each engine's own background mechanism doing upkeep: no `compact()`, no harness sweep. Every value carries its expiry (Unix seconds) in its first 8 bytes. Every second the writer samples the data directory's bytes (files counted as min(length, allocated)), the live bytes (keys written within the last {TTL_SECS} s × {RECORD} bytes, computed by the harness the same way for every engine), `RssAnon` from /proc/self/status, reads 20 random keys written more than {} s ago (any value returned is expired) and 20 written less than {} s ago (all must be found). Sled is not run.\n", TTL_SECS + 1, TTL_SECS - 1);
    }
    let _ = writeln!(o, "ebbdb measured at commit `{}`. Machine: {}; 1-minute load average {} at the start and {} at the end; the whole run took {:.0} s. {} Every figure comes from that single run.\n", run.ebbdb_rev, machine(), run.load_start, run.load_end, run.secs, sharing(&run.load_start));
    o.push_str("TTL mechanisms:\n\n");
    for k in &run.kinds {
        let _ = writeln!(o, "- {}: {}", k.name(), mechanism(*k, mixed.is_some()));
    }
    if !run.failures.is_empty() {
        o.push_str("\nFailed (their cells show —):\n\n");
        for (e, ph, why) in &run.failures {
            let _ = writeln!(o, "- {e} / {ph}: {why}");
        }
    }
    o.push('\n');
    header(&mut o, run, "measure");
    row(&mut o, run, "writes/s", "writes_per_s", 1.0);
    text_row(
        &mut o,
        run,
        "disk ÷ live bytes, second half: max / end",
        |m| {
            Some(format!(
                "{:.2} / {:.2}",
                num(m, "amp_max")?,
                num(m, "amp_end")?
            ))
        },
    );
    text_row(
        &mut o,
        run,
        "writes in the slowest / fastest whole second",
        |m| {
            Some(format!(
                "{} / {}",
                fmt_num(num(m, "slowest_second")?),
                fmt_num(num(m, "fastest_second")?)
            ))
        },
    );
    row(&mut o, run, "disk at the end (MiB)", "disk_end", mib);
    text_row(
        &mut o,
        run,
        &match mixed {
            Some(_) => "stale reads reaching the application (of probes of keys expired > 1 s ago)"
                .to_string(),
            None => format!(
                "stale reads reaching the application (of probes of keys > {} s old)",
                TTL_SECS + 1
            ),
        },
        |m| {
            Some(format!(
                "{} of {}",
                fmt_num(num(m, "stale")?),
                fmt_num(num(m, "probes")?)
            ))
        },
    );
    text_row(
        &mut o,
        run,
        "of those probes, values the engine still returned (before any stamp check)",
        |m| Some(fmt_num(num(m, "raw_stale")?)),
    );
    text_row(&mut o, run, "live keys not found (must be 0)", |m| {
        Some(format!(
            "{} of {}",
            fmt_num(num(m, "live_missing")?),
            fmt_num(num(m, "live_probes")?)
        ))
    });
    text_row(
        &mut o,
        run,
        "live count ÷ truly live keys at the end: what the application sees (engine's raw answer); ebbdb `Keyspace::len()`, the others a full scan",
        |m| {
            let t = num(m, "true_live")?.max(1.0);
            Some(format!(
                "{:.3} ({:.3})",
                num(m, "count_app")? / t,
                num(m, "count_raw")? / t
            ))
        },
    );
    row(&mut o, run, "peak RssAnon (MiB)", "rss_anon_peak", mib);
    row(&mut o, run, "peak RSS, VmHWM (MiB)", "rss_peak", mib);
    row(&mut o, run, "batch latency p99 (ms)", "batch_p99_ms", 1.0);
    row(&mut o, run, "batch latency max (ms)", "batch_max_ms", 1.0);
    text_row(
        &mut o,
        run,
        "CPU seconds used, all threads (per second of the run)",
        |m| {
            let (c, s) = (num(m, "cpu_secs")?, num(m, "secs")?);
            Some(format!("{c:.0} ({:.2})", c / s.max(1.0)))
        },
    );
    text_row(&mut o, run, "1-minute load average when it started", |m| {
        m.get("load_start")
            .and_then(Value::as_str)
            .map(String::from)
    });
    text_row(&mut o, run, "engine counters", |m| {
        m.get("note").and_then(Value::as_str).map(String::from)
    });
    let _ = writeln!(o, "\nIn parentheses: the ratio to ebbdb's figure. Disk ÷ live bytes: every sample from {:.0} s on; the end is the last sample. Stale reads: a value returned to the application for a key whose expiry passed more than 1 s ago. The second row counts what the engine itself still returned; for redb and fjall the read path compares the stamp and drops those, at the cost of carrying the stamp in every value. Peak RssAnon: the largest of the per-second samples and the one at the end, in the engine's child process. Live bytes follow each engine's own write rate: when a writer slows down, its live line drops and disk ÷ live rises until the space is reclaimed. The slowest whole second shows whether a writer took turns with its own upkeep: until 2026-12-08 ebbdb's did (its reaper, slowed by giving key-directory room back, fell behind the keys written a TTL earlier at full speed, and the writers assisted it), and its live line swung with a period of about twice the TTL (DESIGN.md §3.1, \"Spare pages from the sync thread, and trims after the backlog\").\n", secs / 2.0);
    let _ = writeln!(o, "![keeps up: disk over time]({svg})\n");
    keeps_up_over_time(&mut o, run, secs);
    let _ = writeln!(o, "Engines in this section: {}.\n", names.join(", "));
    o.push_str(end);
    let path = docs.join("benchmarks.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let new = match section(&old, begin, end) {
        Some(found) => old.replacen(found, &o, 1),
        // The mixed section goes right after the single-TTL one (carried over with it by
        // `write`), or at the end.
        None => match (mixed, section(&old, KEEPS_UP_BEGIN, KEEPS_UP_END)) {
            (Some(_), Some(single)) => old.replacen(single, &format!("{single}\n\n{o}"), 1),
            _ => format!("{}\n{o}\n", old.trim_end()),
        },
    };
    std::fs::write(&path, new)?;
    std::fs::write(docs.join(svg), crate::plots::keeps_up(run, secs))?;
    Ok(())
}
