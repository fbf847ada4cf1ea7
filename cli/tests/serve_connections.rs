//! `ebbdb serve` under connection trouble and load: broken and half-closed connections,
//! random signed requests, clients that stall their headers or body, a locked database
//! directory, and a load run
//! (concurrent clients for a bounded time: requests/s and p99 latency of point reads and
//! upserts, then every acknowledged write checked after Ctrl-C).

mod serve_common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use serve_common::{date, send, setup, sign, signed, JsonBody, Server, KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_connections_do_not_hurt_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let addr = server.base.trim_start_matches("http://").to_owned();
    // Half a request line; half the headers; a body shorter than its length; garbage.
    for raw in [
        &b"GET /dbs HT"[..],
        b"POST /dbs HTTP/1.1\r\nHost: x\r\nContent-Le",
        b"POST /dbs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"id\":",
        b"\x00\x01\x02 not http at all\r\n\r\n",
    ] {
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        s.write_all(raw).expect("write");
        let _ = s.shutdown(std::net::Shutdown::Write);
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    // Still serving.
    let http = reqwest::Client::new();
    let (s, _, body) = send(signed(&http, &server.base, Method::GET, "/", "", "")).await;
    assert_eq!(s, StatusCode::OK);
    let endpoint = body["writableLocations"][0]["databaseAccountEndpoint"]
        .as_str()
        .expect("endpoint");
    assert_eq!(endpoint, format!("{}/", server.base));
}

/// A small deterministic generator (xorshift64*), so a failure names a reproducible case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

/// Percent-encodes every byte but unreserved ASCII, as the SDKs encode names.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// 400 correctly signed requests with random methods, paths, Cosmos headers and bodies
/// (valid, truncated and hostile JSON): every answer is a Cosmos-shaped 2xx/3xx/4xx (never a
/// 5xx, never a dropped connection), and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_signed_requests_get_cosmos_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    setup(&http, &server.base, "db", "c").await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // (No `..`: the client's URL parser would resolve it before sending.)
    let names = ["db", "c", "x", "a b", "é", "%", "+", "", "dbs"];
    let real: [&[&str]; 7] = [
        &["dbs"],
        &["dbs", "db"],
        &["dbs", "db", "colls"],
        &["dbs", "db", "colls", "c"],
        &["dbs", "db", "colls", "c", "docs"],
        &["dbs", "db", "colls", "c", "docs", "x"],
        &["dbs", "db", "colls", "c", "pkranges"],
    ];
    let kinds = ["dbs", "colls", "docs", "pkranges", "users", "sprocs"];
    let bodies = [
        "",
        "{",
        "[]",
        "null",
        "{\"id\": \"x\", \"pk\": \"p\"}",
        "{\"id\": \"x\", \"pk\": {\"a\": 1}}",
        "{\"id\": 5}",
        "{\"id\": \"\"}",
        "{\"id\": \"c\", \"partitionKey\": {\"paths\": [\"/pk\"]}, \"defaultTtl\": 0}",
        "{\"id\": \"y\", \"pk\": \"p\", \"n\": 1e400}",
        "{\"query\": \"SELECT * FROM c WHERE\"}",
        "{\"query\": \"SELECT VALUE COUNT(1) FROM c\", \"parameters\": [{\"name\": \"@a\"}]}",
        "{\"query\": \"SELECT * FROM c\", \"parameters\": 7}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]",
    ];
    let headers: [(&str, &[&str]); 7] = [
        (
            "x-ms-documentdb-partitionkey",
            &["[\"p\"]", "[]", "[{}]", "p", "[1,2]", "[null]", "[1e999]"],
        ),
        ("x-ms-documentdb-is-upsert", &["true", "false", "maybe"]),
        ("x-ms-documentdb-isquery", &["true", "nope"]),
        (
            "x-ms-max-item-count",
            &["1", "-1", "0", "-5", "abc", "99999999999999999999"],
        ),
        ("x-ms-continuation", &["", "garbage", "eyJ9"]),
        ("if-match", &["*", "\"x\"", ""]),
        ("x-ms-documentdb-partitionkeyrangeid", &["0", "1", ""]),
    ];
    let mut seen = std::collections::BTreeMap::new();
    for case in 0..400 {
        let method = rng.pick(&["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]);
        let depth = (rng.next() % 7) as usize;
        let mut segs = Vec::new();
        if rng.next().is_multiple_of(3) {
            for i in 0..depth {
                segs.push(if i % 2 == 0 {
                    rng.pick(&kinds)
                } else {
                    rng.pick(&names)
                });
            }
        } else {
            segs.extend_from_slice(real[(rng.next() % real.len() as u64) as usize]);
        }
        let segs: Vec<&str> = segs.into_iter().filter(|s| !s.is_empty()).collect();
        let (rtype, link) = if segs.is_empty() {
            (String::new(), String::new())
        } else if segs.len() % 2 == 1 {
            (
                segs[segs.len() - 1].to_lowercase(),
                segs[..segs.len() - 1].join("/"),
            )
        } else {
            (segs[segs.len() - 2].to_lowercase(), segs.join("/"))
        };
        let path = format!(
            "/{}",
            segs.iter().map(|s| encode(s)).collect::<Vec<_>>().join("/")
        );
        let m = Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = signed(&http, &server.base, m, &path, &rtype, &link);
        for (name, values) in &headers {
            if rng.next().is_multiple_of(3) {
                rb = rb.header(*name, rng.pick(values));
            }
        }
        if rng.next().is_multiple_of(2) {
            rb = rb.header(
                "content-type",
                rng.pick(&["application/json", "application/query+json", "text/plain"]),
            );
        }
        let body = rng.pick(&bodies);
        let resp =
            rb.body(body.to_owned()).send().await.unwrap_or_else(|e| {
                panic!("case {case}: {method} {path} {body:?}: no answer: {e}")
            });
        let status = resp.status();
        *seen.entry(status.as_u16()).or_insert(0) += 1;
        let bytes = resp.bytes().await.expect("body");
        assert!(
            status.as_u16() < 500,
            "case {case}: {method} {path} {body:?}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        if status.as_u16() >= 400 && method != "HEAD" {
            let v: Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("case {case}: {status} body is not JSON ({e})"));
            assert!(
                v["code"].is_string() && v["message"].is_string(),
                "case {case}: {v}"
            );
        }
    }
    eprintln!("random requests by status: {seen:?}");
    // The cases reach past routing and auth into the handlers (not all one kind of refusal).
    assert!(seen.len() >= 6 && seen.contains_key(&400), "{seen:?}");
    // Still serving (the random deletes may have removed the database itself).
    let (st, _, _) = send(signed(&http, &server.base, Method::GET, "/dbs", "dbs", "")).await;
    assert_eq!(st, StatusCode::OK);
}

#[test]
fn a_locked_database_stops_the_server_from_starting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let held = ebbdb::Database::open(data.join("shop")).expect("create and hold");
    let out = Command::new(env!("CARGO_BIN_EXE_ebbdb"))
        .arg("serve")
        .arg(&data)
        .args(["--addr", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("locked"));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(&dir.path().join("data"), &["--request-timeout", "1"]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    // Headers that never end: the connection is closed after the timeout.
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    s.write_all(b"GET /dbs HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "the stalled connection stayed open for {waited:?}"
    );
    // A signed request whose body stalls: 408 with a Cosmos body.
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    let d = date();
    let head = format!(
        "POST /dbs HTTP/1.1\r\nHost: {addr}\r\nx-ms-date: {d}\r\nauthorization: {}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"id\":",
        sign(KEY, "POST", "dbs", "", &d)
    );
    s.write_all(head.as_bytes()).expect("write");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut reply = vec![0u8; 4096];
    let n = s.read(&mut reply).expect("a reply");
    let reply = String::from_utf8_lossy(&reply[..n]).to_string();
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("\"code\":\"RequestTimeout\""), "{reply}");
    // A body declared far too large: 413 at once, without waiting for it.
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    let d = date();
    let head = format!(
        "POST /dbs HTTP/1.1\r\nHost: {addr}\r\nx-ms-date: {d}\r\nauthorization: {}\r\n\
         content-type: application/json\r\ncontent-length: 104857600\r\n\r\n{{",
        sign(KEY, "POST", "dbs", "", &d)
    );
    s.write_all(head.as_bytes()).expect("write");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut reply = vec![0u8; 4096];
    let n = s.read(&mut reply).expect("a reply");
    let reply = String::from_utf8_lossy(&reply[..n]).to_string();
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("RequestEntityTooLarge"), "{reply}");
    // The server still answers everyone else.
    let http = reqwest::Client::new();
    let (st, _, _) = send(signed(&http, &server.base, Method::GET, "/dbs", "dbs", "")).await;
    assert_eq!(st, StatusCode::OK);
}

/// Milliseconds at quantile `q` of sorted latencies.
fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Latencies of point reads and upserts, and per client the last value acknowledged for each
/// of its ids.
struct Run {
    reads: Vec<Duration>,
    writes: Vec<Duration>,
    acked: Vec<(usize, Vec<Option<u64>>)>,
}

const IDS: usize = 50;

/// `clients` clients for `secs` seconds against `base` (database `load`, container `items`),
/// each alternating an upsert of one of its own [`IDS`] ids (a counter as the value) and a
/// point read of one of them, which must see the last value written.
async fn drive(base: &str, clients: usize, secs: u64) -> Run {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let base = base.to_owned();
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut last = vec![None::<u64>; IDS];
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            let mut n: u64 = 0;
            while Instant::now() < until {
                let slot = (n as usize) % IDS;
                let id = format!("c{c}-{slot}");
                let pk = format!("p{}", slot % 5);
                let t = Instant::now();
                let (s, _, body) = send(
                    signed(
                        &http,
                        &base,
                        Method::POST,
                        "/dbs/load/colls/items/docs",
                        "docs",
                        "dbs/load/colls/items",
                    )
                    .header("x-ms-documentdb-is-upsert", "true")
                    .header("x-ms-documentdb-partitionkey", format!("[\"{pk}\"]"))
                    .js(&json!({"id": id, "pk": pk, "v": n})),
                )
                .await;
                writes.push(t.elapsed());
                assert!(s.is_success(), "{s}: {body}");
                last[slot] = Some(n);
                let read_slot = (n as usize * 7) % IDS;
                if let Some(want) = last[read_slot] {
                    let id = format!("c{c}-{read_slot}");
                    let path = format!("/dbs/load/colls/items/docs/{id}");
                    let link = format!("dbs/load/colls/items/docs/{id}");
                    let t = Instant::now();
                    let (s, _, body) = send(
                        signed(&http, &base, Method::GET, &path, "docs", &link).header(
                            "x-ms-documentdb-partitionkey",
                            format!("[\"p{}\"]", read_slot % 5),
                        ),
                    )
                    .await;
                    reads.push(t.elapsed());
                    assert_eq!(s, StatusCode::OK, "{body}");
                    assert_eq!(
                        body["v"], want,
                        "a read saw another value than the last write"
                    );
                }
                n += 1;
            }
            (c, last, reads, writes)
        }));
    }
    let mut run = Run {
        reads: Vec::new(),
        writes: Vec::new(),
        acked: Vec::new(),
    };
    for t in tasks {
        let (c, last, r, w) = t.await.expect("client");
        run.reads.extend(r);
        run.writes.extend(w);
        run.acked.push((c, last));
    }
    run.reads.sort();
    run.writes.sort();
    run
}

fn report(who: &str, run: &Run, clients: usize, secs: u64) {
    let total = (run.reads.len() + run.writes.len()) as f64;
    eprintln!(
        "load, {who}: {clients} clients, {secs} s: {:.0} requests/s; point reads {} (p50 {:.2} ms, p99 {:.2} ms), upserts {} (p50 {:.2} ms, p99 {:.2} ms), 0 errors",
        total / secs as f64,
        run.reads.len(),
        quantile_ms(&run.reads, 0.5),
        quantile_ms(&run.reads, 0.99),
        run.writes.len(),
        quantile_ms(&run.writes, 0.5),
        quantile_ms(&run.writes, 0.99),
    );
}

/// The load run: `EBBDB_SERVE_LOAD_CLIENTS` clients (default 8) for `EBBDB_SERVE_LOAD_SECS`
/// seconds (default 2); no request may fail, and after Ctrl-C every id must hold the last
/// value its client had acknowledged. With `EBBDB_SERVE_LOAD_PEER=http://host:port` the same
/// load then runs against that server too (e.g. `@vercel/cosmosdb-server --no-ssl`), for a
/// comparison in the same run (its writes are not checked on disk).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_point_reads_and_upserts_lose_nothing() {
    let clients = env_or("EBBDB_SERVE_LOAD_CLIENTS", 8) as usize;
    let secs = env_or("EBBDB_SERVE_LOAD_SECS", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start(&data);
    let http = reqwest::Client::new();
    setup(&http, &server.base, "load", "items").await;
    let run = drive(&server.base, clients, secs).await;
    report("ebbdb serve", &run, clients, secs);
    assert!(!run.reads.is_empty() && !run.writes.is_empty());
    let (code, out) = server.interrupt();
    assert_eq!(code, Some(0), "{out}");
    // Every acknowledged write, after Ctrl-C and a reopen.
    let db = ebbdb::Database::open(data.join("load")).expect("reopen");
    let items = db.container("items").expect("container");
    let mut checked = 0;
    for (c, last) in &run.acked {
        for (slot, want) in last.iter().enumerate() {
            let Some(want) = want else { continue };
            let v: Value = items
                .read_item(format!("p{}", slot % 5), &format!("c{c}-{slot}"))
                .expect("an acknowledged write");
            assert_eq!(v["v"], *want);
            checked += 1;
        }
    }
    assert!(checked > 0);
    if let Ok(peer) = std::env::var("EBBDB_SERVE_LOAD_PEER") {
        let peer = peer.trim_end_matches('/').to_owned();
        setup(&http, &peer, "load", "items").await;
        let run = drive(&peer, clients, secs).await;
        report(&peer, &run, clients, secs);
    }
}
