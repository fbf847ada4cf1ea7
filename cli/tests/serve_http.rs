//! `ebbdb serve` over real HTTP (reqwest): master-key auth, Cosmos error bodies and headers,
//! malformed requests, queries and paging, many concurrent clients with no lost write,
//! graceful shutdown that syncs (data there after a restart), patch and transactional batch,
//! the change feed (latest version), what is not served.
//!
//! Each test starts the built binary on a free port in its own temporary directory and signs
//! its requests the way the SDKs do (`serve_common`).

mod serve_common;

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use serve_common::{assert_cosmos_error, date, send, setup, sign, signed, JsonBody, Server, KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    // Correctly signed: 200.
    let (s, h, body) = send(signed(&http, base, Method::GET, "/dbs", "dbs", "")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["Databases"], json!([]));
    for name in [
        "x-ms-activity-id",
        "x-ms-request-charge",
        "x-ms-session-token",
    ] {
        assert!(h.contains_key(name), "{name} missing");
    }
    let d = date();
    // No authorization header.
    let (s, _, body) = send(
        http.get(format!("{base}/dbs"))
            .header("x-ms-date", d.clone()),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
    // Signed with another key.
    let other = STANDARD.encode([7u8; 64]);
    let (s, _, body) = send(
        http.get(format!("{base}/dbs"))
            .header("x-ms-date", d.clone())
            .header("authorization", sign(&other, "GET", "dbs", "", &d)),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
    // A valid signature for another verb, resource or date does not carry over.
    let (s, _, _) = send(
        http.get(format!("{base}/dbs"))
            .header("x-ms-date", d.clone())
            .header("authorization", sign(KEY, "POST", "dbs", "", &d)),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = send(
        http.get(format!("{base}/dbs/a"))
            .header("x-ms-date", d.clone())
            .header("authorization", sign(KEY, "GET", "dbs", "dbs/b", &d)),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
    let (s, _, _) = send(
        http.get(format!("{base}/dbs"))
            .header("x-ms-date", later)
            .header("authorization", sign(KEY, "GET", "dbs", "", &d)),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Correctly signed but dated 20 minutes ago (a replay), or with no date at all: 401.
    let old = httpdate::fmt_http_date(std::time::SystemTime::now() - Duration::from_secs(20 * 60));
    let (s, _, body) = send(
        http.get(format!("{base}/dbs"))
            .header("x-ms-date", old.clone())
            .header("authorization", sign(KEY, "GET", "dbs", "", &old)),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
    assert!(body["message"]
        .as_str()
        .is_some_and(|m| m.contains("not valid at the current time")));
    let (s, _, body) = send(
        http.get(format!("{base}/dbs"))
            .header("authorization", sign(KEY, "GET", "dbs", "", "")),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
    // Garbage tokens.
    for token in [
        "",
        "type%3Dmaster",
        "type%3Daad%26ver%3D1.0%26sig%3Dx",
        "%zz",
    ] {
        let (s, _, body) = send(
            http.get(format!("{base}/dbs"))
                .header("x-ms-date", d.clone())
                .header("authorization", token),
        )
        .await;
        assert_cosmos_error(s, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    // Auth comes first: an unknown path without a signature is a 401, not a 404.
    let (s, _, _) = send(http.get(format!("{base}/nowhere"))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_errors_and_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    setup(&http, base, "shop", "orders").await;
    let docs = "/dbs/shop/colls/orders/docs";
    let link = "dbs/shop/colls/orders";
    let post = || signed(&http, base, Method::POST, docs, "docs", link);
    let item = |id: &str| (format!("{docs}/{id}"), format!("{link}/docs/{id}"));

    // Create: 201, etag header = body _etag, 409 on a duplicate.
    let (s, h, body) = send(
        post()
            .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
            .js(&json!({"id": "a", "pk": "C1", "n": 1})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let etag = body["_etag"].as_str().expect("etag").to_owned();
    assert_eq!(h["etag"], etag.as_str());
    assert_eq!(h["content-type"], "application/json");
    let (s, _, body) = send(post().js(&json!({"id": "a", "pk": "C1"}))).await;
    assert_cosmos_error(s, &body, StatusCode::CONFLICT, "Conflict");
    // A partition key header that differs from the body's: 400, nothing written.
    let (s, _, body) = send(
        post()
            .header("x-ms-documentdb-partitionkey", "[\"C2\"]")
            .js(&json!({"id": "b", "pk": "C1"})),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");

    // Read: needs the partition key; If-None-Match with the etag: 304.
    let (p, l) = item("a");
    let get = |pk: Option<&str>| {
        let rb = signed(&http, base, Method::GET, &p, "docs", &l);
        match pk {
            Some(pk) => rb.header("x-ms-documentdb-partitionkey", pk.to_owned()),
            None => rb,
        }
    };
    let (s, _, body) = send(get(Some("[\"C1\"]"))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["n"], 1);
    let (s, _, body) = send(get(None)).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    for bad in ["C1", "[\"C1\", 2]", "[[1]]", "{}"] {
        let (s, _, body) = send(get(Some(bad))).await;
        assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    }
    let (s, _, _) = send(get(Some("[\"C1\"]")).header("if-none-match", etag.clone())).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    let (s, _, body) = send(get(Some("[\"C9\"]"))).await;
    assert_cosmos_error(s, &body, StatusCode::NOT_FOUND, "NotFound");

    // Replace with a stale If-Match: 412; upsert; delete 204 then 404.
    let put = || {
        signed(&http, base, Method::PUT, &p, "docs", &l)
            .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
    };
    let (s, _, body) = send(put().js(&json!({"id": "a", "pk": "C1", "n": 2}))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (s, _, body) = send(
        put()
            .header("if-match", etag.clone())
            .js(&json!({"id": "a", "pk": "C1", "n": 3})),
    )
    .await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
    );
    let (s, _, body) = send(
        post()
            .header("x-ms-documentdb-is-upsert", "true")
            .js(&json!({"id": "a", "pk": "C1", "n": 4})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["n"], 4);
    let del = || {
        signed(&http, base, Method::DELETE, &p, "docs", &l)
            .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
    };
    let (s, _, body) = send(del()).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(body, Value::Null);
    let (s, _, body) = send(del()).await;
    assert_cosmos_error(s, &body, StatusCode::NOT_FOUND, "NotFound");

    // Malformed bodies and headers.
    let (s, _, body) = send(post().body("{not json")).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (s, _, body) = send(post().js(&json!([1, 2]))).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (s, _, body) = send(post().js(&json!({"id": "t", "pk": "C1", "ttl": 0}))).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    assert!(body["message"]
        .as_str()
        .is_some_and(|m| m.contains("The input ttl '0' is invalid")));
    let (s, _, body) = send(
        post()
            .header("x-ms-documentdb-is-upsert", "maybe")
            .js(&json!({"id": "t", "pk": "C1"})),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // Over the body limit: 413 without reading it all; an item over 2 MiB: 413 too.
    let (s, _, body) = send(post().body(vec![b' '; 5 * 1024 * 1024])).await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
    );
    let big = json!({"id": "big", "pk": "C1", "blob": "x".repeat(2 * 1024 * 1024 + 1)});
    let (s, _, body) = send(post().js(&big)).await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
    );
    // A query with a content type that is not a query's: 415.
    let (s, _, body) = send(
        post()
            .header("x-ms-documentdb-isquery", "true")
            .header("content-type", "text/plain")
            .body("{\"query\": \"SELECT * FROM c\"}"),
    )
    .await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
    );
    // Unknown paths, bad escapes, methods a resource does not have.
    let (s, _, body) = send(signed(
        &http,
        base,
        Method::GET,
        "/dbs/shop/users",
        "users",
        "dbs/shop",
    ))
    .await;
    assert_cosmos_error(s, &body, StatusCode::NOT_FOUND, "NotFound");
    let (s, _, body) = send(signed(
        &http,
        base,
        Method::GET,
        "/dbs/%zz",
        "dbs",
        "dbs/%zz",
    ))
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (s, _, body) = send(signed(&http, base, Method::PUT, "/dbs", "dbs", "")).await;
    assert_cosmos_error(s, &body, StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed");
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/nope/colls/x/docs/y",
            "docs",
            "dbs/nope/colls/x/docs/y",
        )
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::NOT_FOUND, "NotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_page_and_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    setup(&http, base, "shop", "orders").await;
    let docs = "/dbs/shop/colls/orders/docs";
    let link = "dbs/shop/colls/orders";
    for i in 0..5 {
        let (s, _, _) =
            send(signed(&http, base, Method::POST, docs, "docs", link).js(
                &json!({"id": format!("i{i}"), "pk": if i % 2 == 0 { "A" } else { "B" }, "n": i}),
            ))
            .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let query = |body: Value| {
        signed(&http, base, Method::POST, docs, "docs", link)
            .header("x-ms-documentdb-isquery", "true")
            .header("content-type", "application/query+json")
            .body(body.to_string())
    };
    let q = json!({"query": "SELECT VALUE c.n FROM c WHERE c.n >= @min ORDER BY c.n",
                   "parameters": [{"name": "@min", "value": 1}]});
    // Without a partition key or range: substatus 1004, as the gateway answers.
    let (s, h, body) = send(query(q.clone())).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    assert_eq!(h["x-ms-substatus"], "1004");
    let info: Value = serde_json::from_str(body["additionalErrorInfo"].as_str().expect("plan"))
        .expect("the plan is JSON text");
    assert_eq!(info["queryRanges"][0]["min"], "");
    // The query plan asks the SDK for no work of its own, over the whole range.
    let (s, _, plan) = send(
        signed(&http, base, Method::POST, docs, "docs", link)
            .header("x-ms-cosmos-is-query-plan-request", "True")
            .header("content-type", "application/json")
            .body(q.to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(plan["queryInfo"]["orderBy"], json!([]));
    assert_eq!(plan["queryRanges"][0]["max"], "FF");
    // Against the one range, paged by 2 with continuations.
    let mut rows = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut rb = query(q.clone())
            .header("x-ms-documentdb-partitionkeyrangeid", "0")
            .header("x-ms-max-item-count", "2");
        if let Some(t) = &token {
            rb = rb.header("x-ms-continuation", t.clone());
        }
        let (s, h, body) = send(rb).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let docs = body["Documents"].as_array().expect("Documents").clone();
        assert_eq!(h["x-ms-item-count"], docs.len().to_string().as_str());
        assert!(docs.len() <= 2);
        rows.extend(docs);
        pages += 1;
        token = h
            .get("x-ms-continuation")
            .map(|v| v.to_str().expect("text").to_owned());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(rows, vec![json!(1), json!(2), json!(3), json!(4)]);
    assert_eq!(pages, 2);
    // One partition.
    let (s, _, body) =
        send(query(q.clone()).header("x-ms-documentdb-partitionkey", "[\"B\"]")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["Documents"], json!([1, 3]));
    // A damaged continuation, a bad page size, a bad query: 400.
    for (name, value) in [
        ("x-ms-continuation", "garbage"),
        ("x-ms-max-item-count", "0"),
        ("x-ms-documentdb-partitionkeyrangeid", "7"),
    ] {
        let (s, _, body) = send(
            query(q.clone())
                .header("x-ms-documentdb-partitionkey", "[\"B\"]")
                .header(name, value),
        )
        .await;
        if name == "x-ms-documentdb-partitionkeyrangeid" {
            // A partition key wins over a range id.
            assert_eq!(s, StatusCode::OK, "{body}");
        } else {
            assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
        }
    }
    let (s, _, body) = send(
        query(json!({"query": "SELECT FROM"})).header("x-ms-documentdb-partitionkeyrangeid", "0"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (s, _, body) = send(
        query(json!({"query": "SELECT * FROM c"}))
            .header("x-ms-documentdb-partitionkeyrangeid", "7"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");

    // Partition key ranges: one, then 304 for its etag.
    let ranges = || {
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/pkranges",
            "pkranges",
            link,
        )
    };
    let (s, h, body) = send(ranges()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["PartitionKeyRanges"][0]["id"], "0");
    let tag = h["etag"].to_str().expect("etag").to_owned();
    let (s, _, _) = send(ranges().header("if-none-match", tag)).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_lose_no_write_and_shutdown_syncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start(&data);
    let http = reqwest::Client::new();
    let base = server.base.clone();
    setup(&http, &base, "shop", "orders").await;
    const CLIENTS: usize = 16;
    const WRITES: usize = 40;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let http = reqwest::Client::new();
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for w in 0..WRITES {
                let id = format!("c{c}-w{w}");
                let (s, _, body) = send(
                    signed(
                        &http,
                        &base,
                        Method::POST,
                        "/dbs/shop/colls/orders/docs",
                        "docs",
                        "dbs/shop/colls/orders",
                    )
                    .header("x-ms-documentdb-is-upsert", "true")
                    .js(&json!({"id": id, "pk": format!("p{}", w % 4), "c": c, "w": w})),
                )
                .await;
                assert_eq!(s, StatusCode::OK, "{body}");
                acked.push((id, format!("p{}", w % 4)));
                let path = format!("/dbs/shop/colls/orders/docs/{}", acked[acked.len() - 1].0);
                let link = format!("dbs/shop/colls/orders/docs/{}", acked[acked.len() - 1].0);
                let (s, _, body) = send(
                    signed(&http, &base, Method::GET, &path, "docs", &link)
                        .header("x-ms-documentdb-partitionkey", format!("[\"p{}\"]", w % 4)),
                )
                .await;
                assert_eq!(s, StatusCode::OK, "{body}");
                assert_eq!(body["w"], w);
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.expect("client task"));
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{} upserts + {} reads from {CLIENTS} clients in {secs:.2} s ({:.0} requests/s)",
        acked.len(),
        acked.len(),
        (2 * acked.len()) as f64 / secs
    );
    assert_eq!(acked.len(), CLIENTS * WRITES);

    // Ctrl-C: exit 0 after syncing; every acknowledged write is there after a restart.
    let (code, out) = server.interrupt();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("synced and closed"), "{out}");
    let db = ebbdb::Database::open(data.join("shop")).expect("reopen");
    let orders = db.container("orders").expect("container");
    assert_eq!(orders.count().expect("count"), CLIENTS * WRITES);
    for (id, pk) in &acked {
        let v: Value = orders
            .read_item(pk.as_str(), id)
            .expect("acknowledged write");
        assert_eq!(v["id"], id.as_str());
    }
    drop(orders);
    drop(db);
    // And the server serves the same directory again.
    let again = Server::start(&data);
    let (s, _, body) = send(signed(
        &http,
        &again.base,
        Method::GET,
        "/dbs/shop/colls/orders",
        "colls",
        "dbs/shop/colls/orders",
    ))
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["id"], "orders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_documents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    setup(&http, base, "shop", "orders").await;
    let docs = "/dbs/shop/colls/orders/docs";
    let link = "dbs/shop/colls/orders";
    let (s, _, created) = send(
        signed(&http, base, Method::POST, docs, "docs", link)
            .js(&json!({"id": "a", "pk": "C1", "n": 1, "tags": ["x"], "old": true})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let patch_in = |id: &str, pk: &str| {
        signed(
            &http,
            base,
            Method::PATCH,
            &format!("{docs}/{id}"),
            "docs",
            &format!("{link}/docs/{id}"),
        )
        .header("x-ms-documentdb-partitionkey", format!("[\"{pk}\"]"))
    };
    let patch = |id: &str| patch_in(id, "C1");
    let get = || {
        signed(
            &http,
            base,
            Method::GET,
            &format!("{docs}/a"),
            "docs",
            &format!("{link}/docs/a"),
        )
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
    };

    // Success: 200, the patched item, its etag as the header, the usual response headers.
    let (s, h, body) = send(patch("a").js(&json!({"operations": [
        {"op": "set", "path": "/status", "value": "shipped"},
        {"op": "incr", "path": "/n", "value": 2},
        {"op": "add", "path": "/tags/-", "value": "y"},
        {"op": "remove", "path": "/old"},
    ]})))
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["status"], &body["n"], &body["tags"]),
        (&json!("shipped"), &json!(3), &json!(["x", "y"]))
    );
    assert!(body.get("old").is_none(), "{body}");
    let etag = body["_etag"].as_str().expect("etag").to_owned();
    assert_ne!(Some(etag.as_str()), created["_etag"].as_str());
    assert_eq!(h["etag"], etag.as_str());
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["x-ms-request-charge"], "1");
    assert!(h.contains_key("x-ms-session-token") && h.contains_key("x-ms-activity-id"));
    let (_, _, read) = send(get()).await;
    assert_eq!(read, body);
    // The bare array of operations (what the JavaScript SDK sends without a condition).
    let (s, _, body) =
        send(patch("a").js(&json!([{"op": "set", "path": "/bare", "value": 1}]))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["bare"], 1);
    let etag = body["_etag"].as_str().expect("etag").to_owned();

    // If-Match: the current etag patches, a stale one is 412 and writes nothing.
    let (s, _, body) = send(
        patch("a")
            .header("if-match", etag.clone())
            .js(&json!({"operations": [{"op": "incr", "path": "/n", "value": 1}]})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["n"], 4);
    let (s, _, body) = send(
        patch("a")
            .header("if-match", etag.clone())
            .js(&json!({"operations": [{"op": "incr", "path": "/n", "value": 100}]})),
    )
    .await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
    );
    // The condition: met, it patches; not met, 412 and nothing written.
    let (s, _, body) = send(patch("a").js(&json!({
        "condition": "FROM c WHERE c.n = 4",
        "operations": [{"op": "replace", "path": "/status", "value": "done"}],
    })))
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "done");
    let (s, _, body) = send(patch("a").js(&json!({
        "condition": "FROM c WHERE c.n > 100",
        "operations": [{"op": "set", "path": "/status", "value": "lost"}],
    })))
    .await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
    );
    let (_, _, read) = send(get()).await;
    assert_eq!((&read["n"], &read["status"]), (&json!(4), &json!("done")));

    // 404: a missing item, or the right id in another partition.
    let (s, _, body) =
        send(patch("zz").js(&json!({"operations": [{"op": "set", "path": "/a", "value": 1}]})))
            .await;
    assert_cosmos_error(s, &body, StatusCode::NOT_FOUND, "NotFound");
    let (s, _, body) = send(
        patch_in("a", "C9").js(&json!({"operations": [{"op": "set", "path": "/a", "value": 1}]})),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::NOT_FOUND, "NotFound");

    // 400: an unknown op, a missing value, a protected path, a target that is not there,
    // a body that is not the patch shape, no partition key header; nothing written.
    for bad in [
        json!({"operations": [{"op": "frob", "path": "/n", "value": 1}]}),
        json!({"operations": [{"op": "set", "path": "/n"}]}),
        json!({"operations": [{"op": "set", "path": "/pk", "value": "C2"}]}),
        json!({"operations": [{"op": "set", "path": "/id", "value": "b"}]}),
        json!({"operations": [{"op": "remove", "path": "/nothing"}]}),
        json!({"operations": [{"op": "incr", "path": "/status", "value": 1}]}),
        json!({"operations": []}),
        json!({"operations": [{"op": "set", "path": "/n", "value": 0}], "condition": 5}),
        json!([{"op": "set", "path": "/nothing/x", "value": 0}]),
        json!({"ops": []}),
        json!("set"),
    ] {
        let (s, _, body) = send(patch("a").js(&bad)).await;
        assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    }
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::PATCH,
            &format!("{docs}/a"),
            "docs",
            &format!("{link}/docs/a"),
        )
        .js(&json!({"operations": [{"op": "set", "path": "/n", "value": 0}]})),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // More than 10 operations: 400.
    let many: Vec<Value> = (0..11)
        .map(|i| json!({"op": "set", "path": format!("/f{i}"), "value": i}))
        .collect();
    let (s, _, body) = send(patch("a").js(&json!({ "operations": many }))).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // A patch that makes the item too large: 413.
    let (s, _, body) = send(patch("a").js(&json!({"operations": [
        {"op": "set", "path": "/blob", "value": "x".repeat(2 * 1024 * 1024 + 1)}
    ]})))
    .await;
    assert_cosmos_error(
        s,
        &body,
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
    );
    let (_, _, after) = send(get()).await;
    assert_eq!(after, read, "a refused patch wrote something");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    setup(&http, base, "shop", "orders").await;
    let docs = "/dbs/shop/colls/orders/docs";
    let link = "dbs/shop/colls/orders";
    let batch = |ops: &Value| {
        signed(&http, base, Method::POST, docs, "docs", link)
            .header("x-ms-cosmos-is-batch-request", "True")
            .header("x-ms-cosmos-batch-atomic", "True")
            .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
            .js(ops)
    };
    let get = |id: &str| {
        signed(
            &http,
            base,
            Method::GET,
            &format!("{docs}/{id}"),
            "docs",
            &format!("{link}/docs/{id}"),
        )
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
    };

    // Every operation type, each seeing the ones before it: 200, one result per operation.
    let (s, _, body) = send(batch(&json!([
        {"operationType": "Create", "resourceBody": {"id": "a", "pk": "C1", "n": 1}},
        {"operationType": "Create", "resourceBody": {"id": "b", "pk": "C1", "n": 1}},
        {"operationType": "Upsert", "resourceBody": {"id": "c", "pk": "C1", "n": 1}},
        {"operationType": "Replace", "id": "b", "resourceBody": {"id": "b", "pk": "C1", "n": 2}},
        {"operationType": "Patch", "id": "a",
         "resourceBody": {"operations": [{"op": "incr", "path": "/n", "value": 5}]}},
        {"operationType": "Read", "id": "a"},
        {"operationType": "Delete", "id": "c"},
    ])))
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let results = body.as_array().expect("array");
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["statusCode"].as_u64().expect("statusCode"))
        .collect();
    assert_eq!(statuses, [201, 201, 201, 200, 200, 200, 204]);
    assert_eq!(results[5]["resourceBody"]["n"], 6);
    assert_eq!(results[5]["eTag"], results[4]["resourceBody"]["_etag"]);
    assert_eq!(results[3]["resourceBody"]["n"], 2);
    assert!(results[6].get("resourceBody").is_none());
    assert!(results.iter().all(|r| r["requestCharge"] == 1));
    let (s, _, a) = send(get("a")).await;
    assert_eq!((s, &a["n"]), (StatusCode::OK, &json!(6)));
    let (s, _, _) = send(get("c")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // A failing create in the middle: 207, its 409, 424 for the others, nothing written.
    let (s, _, body) = send(batch(&json!([
        {"operationType": "Create", "resourceBody": {"id": "new1", "pk": "C1"}},
        {"operationType": "Patch", "id": "a",
         "resourceBody": {"operations": [{"op": "set", "path": "/n", "value": 100}]}},
        {"operationType": "Create", "resourceBody": {"id": "b", "pk": "C1"}},
        {"operationType": "Create", "resourceBody": {"id": "new2", "pk": "C1"}},
    ])))
    .await;
    assert_eq!(s, StatusCode::MULTI_STATUS, "{body}");
    let statuses: Vec<u64> = body
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["statusCode"].as_u64().expect("statusCode"))
        .collect();
    assert_eq!(statuses, [424, 424, 409, 424]);
    assert!(body[2]["message"].as_str().is_some_and(|m| !m.is_empty()));
    for id in ["new1", "new2"] {
        let (s, _, _) = send(get(id)).await;
        assert_eq!(
            s,
            StatusCode::NOT_FOUND,
            "{id} was written by a failed batch"
        );
    }
    let (_, _, after) = send(get("a")).await;
    assert_eq!(after, a, "a failed batch patched 'a'");

    // The failing operation's own status: 404, 412 (stale ifMatch), 400 (another partition
    // key in the body), 412 (a patch condition not met).
    let stale = a["_etag"].as_str().expect("etag").to_owned();
    let (s, _, fresh) = send(
        signed(
            &http,
            base,
            Method::PATCH,
            &format!("{docs}/a"),
            "docs",
            &format!("{link}/docs/a"),
        )
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
        .js(&json!({"operations": [{"op": "set", "path": "/v", "value": 2}]})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{fresh}");
    for (ops, want) in [
        (json!([{"operationType": "Delete", "id": "nope"}]), 404),
        (
            json!([{"operationType": "Replace", "id": "a", "ifMatch": stale,
                    "resourceBody": {"id": "a", "pk": "C1"}}]),
            412,
        ),
        (
            json!([{"operationType": "Create", "resourceBody": {"id": "x", "pk": "C2"}}]),
            400,
        ),
        (
            json!([{"operationType": "Patch", "id": "a", "resourceBody": {
                "condition": "FROM c WHERE c.v = 1",
                "operations": [{"op": "set", "path": "/v", "value": 3}]}}]),
            412,
        ),
    ] {
        let (s, _, body) = send(batch(&ops)).await;
        assert_eq!(s, StatusCode::MULTI_STATUS, "{body}");
        assert_eq!(body[0]["statusCode"], want, "{body}");
    }
    // The current etag works.
    let (s, _, body) = send(batch(&json!([{"operationType": "Replace", "id": "a",
        "ifMatch": fresh["_etag"], "resourceBody": {"id": "a", "pk": "C1", "n": 7}}])))
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body[0]["statusCode"], 200);

    // Malformed batches: a 400 for the whole request, nothing written.
    for bad in [
        json!([]),
        json!({"operationType": "Create"}),
        json!([{"operationType": "Frob", "id": "a"}]),
        json!([{"operationType": "Read"}]),
        json!([{"operationType": "Create", "resourceBody": {"id": "m", "pk": "C1"}},
               {"operationType": "Replace", "id": "a"}]),
        json!([{"operationType": "Patch", "id": "a",
                "resourceBody": {"operations": [{"op": "frob", "path": "/n"}]}}]),
        Value::Array(
            (0..101)
                .map(|i| json!({"operationType": "Read", "id": format!("r{i}")}))
                .collect(),
        ),
    ] {
        let (s, _, body) = send(batch(&bad)).await;
        assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    }
    let (s, _, _) = send(get("m")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // No partition key header: 400.
    let (s, _, body) = send(
        signed(&http, base, Method::POST, docs, "docs", link)
            .header("x-ms-cosmos-is-batch-request", "True")
            .header("x-ms-cosmos-batch-atomic", "True")
            .js(&json!([{"operationType": "Read", "id": "a"}])),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_served_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    setup(&http, base, "shop", "orders").await;
    let link = "dbs/shop/colls/orders";
    // A bulk (non-atomic) batch request: 501, nothing written.
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::POST,
            "/dbs/shop/colls/orders/docs",
            "docs",
            link,
        )
        .header("x-ms-cosmos-is-batch-request", "True")
        .header("x-ms-cosmos-batch-atomic", "False")
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
        .js(&json!([{"operationType": "Create", "resourceBody": {"id": "a", "pk": "C1"}}])),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::NOT_IMPLEMENTED, "NotImplemented");
    let (s, _, _) = send(
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/docs/a",
            "docs",
            "dbs/shop/colls/orders/docs/a",
        )
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]"),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/docs",
            "docs",
            link,
        )
        .header("a-im", "Full-Fidelity Feed")
        .header("x-ms-cosmos-changefeed-wire-format-version", "2021-09-15"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // Served, but this container has no change feed retention: a 400 that says so.
    assert!(body["message"]
        .as_str()
        .is_some_and(|m| m.contains("all-versions-and-deletes") && m.contains("retention")));
    // The wire format header with the latest-version A-IM is a contradiction.
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/docs",
            "docs",
            link,
        )
        .header("a-im", "Incremental feed")
        .header("x-ms-cosmos-changefeed-wire-format-version", "2021-09-15"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // The latest-version feed is served: the container is empty, so 304.
    let (s, _, _) = send(
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/docs",
            "docs",
            link,
        )
        .header("a-im", "Incremental feed"),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_feed_latest_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let http = reqwest::Client::new();
    let base = &server.base;
    // A container with TTL on (the items' own `ttl` counts), partition key `/pk`.
    setup(&http, base, "shop", "other").await;
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::POST,
            "/dbs/shop/colls",
            "colls",
            "dbs/shop",
        )
        .js(&json!({
            "id": "orders",
            "partitionKey": {"paths": ["/pk"], "kind": "Hash", "version": 2},
            "defaultTtl": -1
        })),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let link = "dbs/shop/colls/orders";
    let create = |doc: Value| {
        let http = &http;
        async move {
            let (s, _, body) = send(
                signed(
                    http,
                    base,
                    Method::POST,
                    "/dbs/shop/colls/orders/docs",
                    "docs",
                    link,
                )
                .js(&doc),
            )
            .await;
            assert_eq!(s, StatusCode::CREATED, "{body}");
        }
    };
    let feed = || {
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/docs",
            "docs",
            link,
        )
        .header("a-im", "Incremental Feed")
    };
    let ids = |body: &Value| -> Vec<String> {
        body["Documents"]
            .as_array()
            .expect("Documents")
            .iter()
            .map(|d| d["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let etag = |h: &reqwest::header::HeaderMap| -> String {
        h.get("etag")
            .expect("etag")
            .to_str()
            .expect("text")
            .to_owned()
    };

    // An empty container: 304 with an etag, from the beginning and from now.
    let (s, h, body) = send(feed()).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED, "{body}");
    assert!(!etag(&h).is_empty());
    // A short-lived item: written, expired after its second, never in the feed.
    create(json!({"id": "gone", "pk": "C1", "ttl": 1})).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for i in 0..5 {
        let pk = if i % 2 == 0 { "C1" } else { "C2" };
        create(json!({"id": format!("o{i}"), "pk": pk, "n": i})).await;
    }
    // `*`: from now, nothing yet.
    let (s, h, _) = send(feed().header("if-none-match", "*")).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    let from_now = etag(&h);

    // First page from the beginning (2 items), then its continuation (the rest).
    let (s, h, body) = send(feed().header("x-ms-max-item-count", "2")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o0", "o1"]);
    assert_eq!(body["_count"], 2);
    assert!(body["_rid"].is_string());
    assert_eq!(h.get("x-ms-item-count").expect("count"), "2");
    let (s, h, body) = send(feed().header("if-none-match", etag(&h))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o2", "o3", "o4"]);
    // Nothing new: 304 with the same etag.
    let at_end = etag(&h);
    let (s, h, body) = send(feed().header("if-none-match", &at_end)).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED, "{body}");
    assert_eq!(body, Value::Null);
    assert_eq!(etag(&h), at_end);

    // A new write and an update appear on the next read, from either continuation.
    create(json!({"id": "o5", "pk": "C2"})).await;
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::PUT,
            "/dbs/shop/colls/orders/docs/o0",
            "docs",
            "dbs/shop/colls/orders/docs/o0",
        )
        .header("x-ms-documentdb-partitionkey", "[\"C1\"]")
        .js(&json!({"id": "o0", "pk": "C1", "n": 100})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (s, h, body) = send(feed().header("if-none-match", &at_end)).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o5", "o0"]);
    assert_eq!(body["Documents"][1]["n"], 100);
    let (s, _, _) = send(feed().header("if-none-match", etag(&h))).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    let (s, _, body) = send(feed().header("if-none-match", &from_now)).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o5", "o0"]);

    // From the beginning again: each live item once, in the order of its last write.
    let (s, _, body) = send(feed()).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o1", "o2", "o3", "o4", "o5", "o0"]);

    // One partition (by key, or the one range "0" for the whole container).
    let (s, h, body) = send(feed().header("x-ms-documentdb-partitionkey", "[\"C2\"]")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o1", "o3", "o5"]);
    let c2_end = etag(&h);
    let (s, _, _) = send(
        feed()
            .header("x-ms-documentdb-partitionkey", "[\"C2\"]")
            .header("if-none-match", &c2_end),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    let (s, _, body) = send(feed().header("x-ms-documentdb-partitionkeyrangeid", "0")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body).len(), 6);
    let (s, _, body) = send(feed().header("x-ms-documentdb-partitionkeyrangeid", "1")).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // A start time: items last written at or after it (all of them here; none in the future).
    let (s, _, body) =
        send(feed().header("if-modified-since", "Thu, 01 Jan 2015 00:00:00 GMT")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body).len(), 6);
    let (s, _, _) = send(feed().header("if-modified-since", "Fri, 01 Jan 2100 00:00:00 GMT")).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);

    // Bad continuations: garbage, and another partition's token.
    for token in ["not-a-token", "{\"v\":1}", c2_end.as_str()] {
        let (s, _, body) = send(feed().header("if-none-match", token)).await;
        assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    }
    // Bad headers: a start time that is no date, an A-IM that is no feed, a hash range.
    let (s, _, body) = send(feed().header("if-modified-since", "yesterday")).await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (s, _, body) = send(
        signed(
            &http,
            base,
            Method::GET,
            "/dbs/shop/colls/orders/docs",
            "docs",
            link,
        )
        .header("a-im", "everything"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (s, _, body) = send(
        feed()
            .header("x-ms-read-key-type", "EffectivePartitionKeyRange")
            .header("x-ms-start-epk", "14F5")
            .header("x-ms-end-epk", "not hex"),
    )
    .await;
    assert_cosmos_error(s, &body, StatusCode::BAD_REQUEST, "BadRequest");

    // What the Python SDK sends for `partition_key="C2"`: the effective partition key (hash)
    // range of "C2", [its hash, its hash + 1); in small pages, so most pages of the whole
    // container hold no C2 item.
    let by_hash = || {
        feed()
            .header("x-ms-documentdb-partitionkeyrangeid", "0")
            .header("x-ms-read-key-type", "EffectivePartitionKeyRange")
            .header("x-ms-start-epk", "2EB999D0F7D077C880FC4BDCA5E75699")
            .header("x-ms-end-epk", "2EB999D0F7D077C880FC4BDCA5E7569A")
            .header("x-ms-max-item-count", "1")
    };
    let mut seen = Vec::new();
    let (s, mut h, body) = send(by_hash()).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    seen.extend(ids(&body));
    loop {
        let (s, next, body) = send(by_hash().header("if-none-match", etag(&h))).await;
        if s == StatusCode::NOT_MODIFIED {
            break;
        }
        assert_eq!(s, StatusCode::OK, "{body}");
        seen.extend(ids(&body));
        h = next;
    }
    assert_eq!(seen, ["o1", "o3", "o5"]);
    // A new C1 item is not in C2's range; a new C2 item is.
    let c2_hash_end = etag(&h);
    create(json!({"id": "o6", "pk": "C1"})).await;
    let (s, _, _) = send(by_hash().header("if-none-match", &c2_hash_end)).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    create(json!({"id": "o7", "pk": "C2"})).await;
    let (s, _, body) = send(by_hash().header("if-none-match", &c2_hash_end)).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["o7"]);
}
