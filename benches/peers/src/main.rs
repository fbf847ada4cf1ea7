//! Peer-comparison benchmark: ebbdb against redb, fjall, sled and RocksDB.
//!
//! `cargo run --release -- [--quick] [--engines=ebbdb,redb,...]` runs every workload for every
//! engine, each phase in a child process (this binary re-executed with `PEERS_CHILD` set, so
//! peak RSS is per engine and phase), and writes `docs/benchmarks.md` with two SVG plots.
//!
//! `--keeps-up` (or `--keeps-up-secs=N`, default 60) runs only the real-clock TTL churn of
//! `keeps_up.rs` for every engine and replaces that section of `docs/benchmarks.md` (and its
//! plot), leaving the rest of the file as it is.
//!
//! `--query` runs only the query comparison of `query.rs` (ebbdb's Cosmos SQL with and
//! without secondary indexes against SQLite with `json_extract`, with and without an
//! expression index) and prints its table; `PEERS_QUERY_ITEMS` sets the item count (1 M).

mod bench;
mod engines;
mod keeps_up;
mod pagecache;
mod peers;
mod plots;
mod query;
mod report;
mod ttl;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use engines::{Kind, Res};

/// Sizes for one run.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub quick: bool,
    /// Keys in the fill / read / scan workloads.
    pub n: u64,
    /// fsync-per-op writes from 1 thread, and in total from 4 threads.
    pub durable_1: u64,
    pub durable_4: u64,
    pub ttl: ttl::Params,
}

impl Config {
    fn new(quick: bool) -> Self {
        if std::env::var_os("PEERS_SMOKE").is_some() {
            // A smoke test of every workload (seconds, not minutes): numbers mean nothing.
            Config {
                quick: true,
                n: 10_000,
                durable_1: 100,
                durable_4: 200,
                ttl: ttl::Params {
                    churn_ticks: 250,
                    drain_ticks: 110,
                    ..ttl::Params::new(5_000)
                },
            }
        } else if quick {
            Config {
                quick,
                n: 100_000,
                durable_1: 1_000,
                durable_4: 2_000,
                ttl: ttl::Params::new(50_000),
            }
        } else {
            Config {
                quick,
                n: 1_000_000,
                durable_1: 2_000,
                durable_4: 4_000,
                ttl: ttl::Params::new(200_000),
            }
        }
    }
}

/// `reopen` and `cold` read the directory `load` left (`cold` removes it), so they follow it.
const PHASES: [&str; 7] = ["load", "reopen", "cold", "durable", "space", "ttl", "nottl"];

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let cfg = Config::new(quick);
    if let Ok(phase) = std::env::var("PEERS_CHILD") {
        match child(&phase, cfg) {
            Ok(v) => println!("RESULT {v}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if std::env::args().any(|a| a == "--query") {
        if let Err(e) = query::run() {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    let from = std::env::args().find_map(|a| a.strip_prefix("--report-from=").map(PathBuf::from));
    // `--keeps-up-mixed=N`: the keeps-up run with TTLs uniform in 1..=N s and a tenth of
    // the keys without one (120 s unless `--keeps-up-secs` says otherwise).
    let mixed = std::env::args().find_map(|a| {
        a.strip_prefix("--keeps-up-mixed=")
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&n| n > 0)
    });
    let keeps_up = std::env::args()
        .find_map(|a| {
            if a == "--keeps-up" {
                Some(keeps_up::DEFAULT_SECS)
            } else {
                a.strip_prefix("--keeps-up-secs=")
                    .and_then(|s| s.parse().ok())
            }
        })
        .or(mixed.map(|_| 2 * keeps_up::DEFAULT_SECS));
    let res = match (from, keeps_up) {
        (Some(path), _) => report_from(&path, cfg),
        (None, Some(secs)) => parent_keeps_up(cfg, secs, mixed),
        (None, None) => parent(cfg),
    };
    if let Err(e) = res {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn child(phase: &str, cfg: Config) -> Res<Value> {
    let name = std::env::var("PEERS_ENGINE")?;
    let kind = Kind::parse(&name).ok_or_else(|| format!("unknown engine {name}"))?;
    let dir = PathBuf::from(std::env::var("PEERS_DIR")?);
    match phase {
        "load" => bench::load(kind, &dir, cfg.n),
        "reopen" => bench::reopen(kind, &dir, cfg.n),
        "cold" => bench::cold(kind, &dir, cfg.n),
        "durable" => bench::durable(kind, &dir, cfg.durable_1, cfg.durable_4),
        "space" => bench::space(kind, &dir, cfg.n),
        "ttl" => ttl::churn(kind, &dir, cfg.ttl, true),
        "nottl" => ttl::churn(kind, &dir, cfg.ttl, false),
        "keepsup" => keeps_up::run(kind, &dir, keeps_up::secs()),
        other => Err(format!("unknown phase {other}").into()),
    }
}

/// Runs one phase in a child process; its result, or why it failed.
fn run_child(
    kind: Kind,
    phase: &str,
    dir: &Path,
    quick: bool,
    limit: Duration,
) -> Result<Value, String> {
    run_child_env(kind, phase, dir, quick, limit, &[])
}

/// [`run_child`] with extra environment variables for the child.
fn run_child_env(
    kind: Kind,
    phase: &str,
    dir: &Path,
    quick: bool,
    limit: Duration,
    env: &[(&str, String)],
) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    if quick {
        cmd.arg("--quick");
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let mut child = cmd
        .env("PEERS_CHILD", phase)
        .env("PEERS_ENGINE", kind.name())
        .env("PEERS_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let t = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(s) => break s,
            None if t.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {} s", limit.as_secs()));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("child exited with {status}"));
    }
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or("no RESULT line")?;
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// Re-renders docs/benchmarks.md and the plots from a saved raw result file.
fn report_from(path: &Path, cfg: Config) -> Res<()> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let run = report::Run::from_json(&v, cfg)?;
    if v.get("keeps_up_secs").is_some() {
        return report::write_keeps_up(&docs_dir(), &run);
    }
    report::write(&docs_dir(), &run)
}

/// Where the report goes: `PEERS_DOCS`, or the repository's `docs/`.
fn docs_dir() -> PathBuf {
    std::env::var_os("PEERS_DOCS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs"),
        PathBuf::from,
    )
}

/// The ebbdb revision measured: `PEERS_EBBDB_REV`, or git's HEAD of the repository this crate
/// sits in, marked when its sources have uncommitted changes.
fn ebbdb_rev() -> String {
    if let Ok(r) = std::env::var("PEERS_EBBDB_REV") {
        return r;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(head) => match git(&["status", "--porcelain", "--", "src", "Cargo.toml"]) {
            Some(s) if !s.is_empty() => format!("{head} + uncommitted changes to src/"),
            _ => head,
        },
        None => "unknown".into(),
    }
}

/// The engines named by `--engines=` (all by default).
fn selected_kinds() -> Vec<Kind> {
    let only: Option<Vec<String>> = std::env::args().find_map(|a| {
        a.strip_prefix("--engines=")
            .map(|s| s.split(',').map(String::from).collect())
    });
    Kind::all()
        .into_iter()
        .filter(|k| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|n| n == k.name()))
        })
        .collect()
}

/// `--keeps-up`: the real-clock TTL churn, one engine after the other, each in a child process.
fn parent_keeps_up(cfg: Config, secs: u64, mixed: Option<u64>) -> Res<()> {
    let started = Instant::now();
    let load_start = report::loadavg();
    let docs = docs_dir();
    std::fs::create_dir_all(&docs)?;
    let data = match std::env::var("PEERS_DATA") {
        Ok(d) => tempfile::Builder::new()
            .prefix("ebbdb-peers")
            .tempdir_in(d)?,
        Err(_) => tempfile::Builder::new().prefix("ebbdb-peers").tempdir()?,
    };
    let fsync_ms = report::fsync_latency_ms(data.path());
    let kinds: Vec<Kind> = selected_kinds()
        .into_iter()
        .filter(|k| keeps_up::runs(*k))
        .collect();
    let limit = Duration::from_secs(secs + 300);
    let mut results: BTreeMap<&'static str, Map<String, Value>> = BTreeMap::new();
    let mut failures: Vec<(String, String, String)> = Vec::new();
    for &kind in &kinds {
        let dir = data.path().join(kind.name()).join("keepsup");
        eprintln!("[{}] keeps-up {secs} s ...", kind.name());
        let t = Instant::now();
        match run_child_env(
            kind,
            "keepsup",
            &dir,
            false,
            limit,
            &[
                ("PEERS_KEEPS_UP_SECS", secs.to_string()),
                (
                    "PEERS_KEEPS_UP_MIXED_MAX",
                    mixed.map_or_else(String::new, |n| n.to_string()),
                ),
            ],
        ) {
            Ok(Value::Object(m)) => {
                eprintln!(
                    "[{}] keeps-up done in {:.1} s: {:.0} writes/s, disk/live end {:.2}, stale {} (raw {}), RssAnon peak {:.0} MiB",
                    kind.name(),
                    t.elapsed().as_secs_f64(),
                    report::num(&m, "writes_per_s").unwrap_or(0.0),
                    report::num(&m, "amp_end").unwrap_or(0.0),
                    report::num(&m, "stale").unwrap_or(0.0),
                    report::num(&m, "raw_stale").unwrap_or(0.0),
                    report::num(&m, "rss_anon_peak").unwrap_or(0.0) / 1048576.0,
                );
                results.insert(kind.name(), m);
            }
            Ok(other) => failures.push((
                kind.name().into(),
                "keepsup".into(),
                format!("bad result {other}"),
            )),
            Err(e) => {
                eprintln!("[{}] keeps-up FAILED: {e}", kind.name());
                failures.push((kind.name().into(), "keepsup".into(), e));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    let run = report::Run {
        cfg,
        kinds,
        results,
        failures,
        secs: started.elapsed().as_secs_f64(),
        fsync_ms,
        load_start,
        load_end: report::loadavg(),
        ebbdb_rev: ebbdb_rev(),
    };
    let mut raw_json = run.to_json();
    raw_json["keeps_up_secs"] = Value::from(secs);
    let raw = std::env::temp_dir().join(format!("ebbdb-peers-keeps-up-{secs}s.json"));
    std::fs::write(&raw, raw_json.to_string())?;
    eprintln!(
        "raw results: {} (re-render with --report-from=that path)",
        raw.display()
    );
    report::write_keeps_up(&docs, &run)?;
    eprintln!("updated {}", docs.join("benchmarks.md").display());
    Ok(())
}

fn parent(cfg: Config) -> Res<()> {
    let started = Instant::now();
    let load_start = report::loadavg();
    let docs = docs_dir();
    std::fs::create_dir_all(&docs)?;
    let data = match std::env::var("PEERS_DATA") {
        Ok(d) => tempfile::Builder::new()
            .prefix("ebbdb-peers")
            .tempdir_in(d)?,
        Err(_) => tempfile::Builder::new().prefix("ebbdb-peers").tempdir()?,
    };
    let limit = Duration::from_secs(if cfg.quick { 600 } else { 1800 });
    let mut results: BTreeMap<&'static str, Map<String, Value>> = BTreeMap::new();
    let mut failures: Vec<(String, String, String)> = Vec::new();
    let fsync_ms = report::fsync_latency_ms(data.path());
    let kinds = selected_kinds();
    // Phase-major, so every engine runs a phase under similar machine conditions. The durable
    // phase (fsync latency swings the most) runs twice, engines in reverse order the second
    // time, and keeps each engine's better round.
    let mut plan: Vec<(&str, Kind)> = Vec::new();
    for phase in PHASES {
        plan.extend(kinds.iter().map(|k| (phase, *k)));
        if phase == "durable" {
            plan.extend(kinds.iter().rev().map(|k| (phase, *k)));
        }
    }
    for (phase, kind) in plan {
        let root = data.path().join(kind.name());
        let entry = results.entry(kind.name()).or_default();
        let on_load = matches!(phase, "reopen" | "cold");
        if on_load && !entry.contains_key("fill_ops") {
            continue;
        }
        let dir = root.join(if on_load { "load" } else { phase });
        let t = Instant::now();
        eprintln!("[{}] {phase} ...", kind.name());
        match run_child(kind, phase, &dir, cfg.quick, limit) {
            Ok(Value::Object(m)) => {
                for (k, v) in m {
                    let k = match phase {
                        "nottl" => format!("nottl_{k}"),
                        "ttl" => format!("ttl_{k}"),
                        _ => k,
                    };
                    let better = match (entry.get(&k).and_then(Value::as_f64), v.as_f64()) {
                        (Some(old), Some(new)) if phase == "durable" && k != "rss_durable" => {
                            new > old
                        }
                        _ => true,
                    };
                    if better {
                        entry.insert(k, v);
                    }
                }
                eprintln!(
                    "[{}] {phase} done in {:.1} s",
                    kind.name(),
                    t.elapsed().as_secs_f64()
                );
            }
            Ok(other) => failures.push((
                kind.name().into(),
                phase.into(),
                format!("bad result {other}"),
            )),
            Err(e) => {
                eprintln!("[{}] {phase} FAILED: {e}", kind.name());
                failures.push((kind.name().into(), phase.into(), e));
            }
        }
        if !matches!(phase, "load" | "reopen") {
            let _ = std::fs::remove_dir_all(&dir); // `cold` removes the load directory
        }
    }
    let run = report::Run {
        cfg,
        kinds,
        results,
        failures,
        secs: started.elapsed().as_secs_f64(),
        fsync_ms,
        load_start,
        load_end: report::loadavg(),
        ebbdb_rev: ebbdb_rev(),
    };
    let raw = std::env::temp_dir().join(format!(
        "ebbdb-peers-{}.json",
        if cfg.quick { "quick" } else { "full" }
    ));
    std::fs::write(&raw, run.to_json().to_string())?;
    eprintln!(
        "raw results: {} (re-render with --report-from=that path)",
        raw.display()
    );
    report::write(&docs, &run)?;
    eprintln!(
        "wrote {} in {:.0} s",
        docs.join("benchmarks.md").display(),
        run.secs
    );
    Ok(())
}
