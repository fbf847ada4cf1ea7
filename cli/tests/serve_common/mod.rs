//! Shared by the `ebbdb serve` tests: the built binary started on a free port in a given
//! directory (stopped with Ctrl-C or killed on drop), and requests signed the way the SDKs sign
//! them (HMAC-SHA256 over verb, resource type, link and date, with the emulator key).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;

pub const KEY: &str =
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";
/// The date requests are signed with: now (the server refuses dates 15 minutes away).
pub fn date() -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now())
}

pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Server {
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, &[])
    }

    pub fn start_with(dir: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ebbdb"))
            .arg("serve")
            .arg(dir)
            .args(["--addr", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ebbdb serve");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).expect("first line");
        let base = line
            .split("listening on ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_end_matches('/')
            .to_owned();
        child.stdout = Some(reader.into_inner());
        Self { child, base }
    }

    /// Ctrl-C, then the exit status and what it printed.
    pub fn interrupt(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not stop on Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        (status.code(), out)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn sign(key: &str, verb: &str, resource_type: &str, link: &str, date: &str) -> String {
    let text = format!(
        "{}\n{}\n{}\n{}\n\n",
        verb.to_lowercase(),
        resource_type,
        link,
        date.to_lowercase()
    );
    let mut mac =
        Hmac::<Sha256>::new_from_slice(&STANDARD.decode(key).expect("key")).expect("hmac");
    mac.update(text.as_bytes());
    let sig = STANDARD.encode(mac.finalize().into_bytes());
    let token = format!("type=master&ver=1.0&sig={sig}");
    token
        .replace('%', "%25")
        .replace('=', "%3D")
        .replace('&', "%26")
        .replace('+', "%2B")
        .replace('/', "%2F")
}

/// A signed request: `path` as sent, `resource_type` and `link` as signed.
pub fn signed(
    http: &reqwest::Client,
    base: &str,
    method: Method,
    path: &str,
    resource_type: &str,
    link: &str,
) -> reqwest::RequestBuilder {
    let date = date();
    http.request(method.clone(), format!("{base}{path}"))
        .header("x-ms-date", date.clone())
        .header("x-ms-version", "2018-12-31")
        .header(
            "authorization",
            sign(KEY, method.as_str(), resource_type, link, &date),
        )
}

/// A JSON body (reqwest's own `json` needs a feature this test does not pull in).
pub trait JsonBody {
    fn js(self, v: &Value) -> Self;
}

impl JsonBody for reqwest::RequestBuilder {
    fn js(self, v: &Value) -> Self {
        self.header("content-type", "application/json")
            .body(v.to_string())
    }
}

pub async fn send(rb: reqwest::RequestBuilder) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let resp = rb.send().await.expect("send");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
    };
    (status, headers, body)
}

/// Creates database `db` and container `coll` (partition key `/pk`).
pub async fn setup(http: &reqwest::Client, base: &str, db: &str, coll: &str) {
    let (s, _, _) =
        send(signed(http, base, Method::POST, "/dbs", "dbs", "").js(&json!({"id": db}))).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _, _) = send(
        signed(
            http,
            base,
            Method::POST,
            &format!("/dbs/{db}/colls"),
            "colls",
            &format!("dbs/{db}"),
        )
        .js(&json!({"id": coll, "partitionKey": {"paths": ["/pk"], "kind": "Hash", "version": 2}})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
}

pub fn assert_cosmos_error(status: StatusCode, body: &Value, want: StatusCode, code: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}
