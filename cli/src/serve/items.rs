//! Documents: `/dbs/{db}/colls/{coll}/docs` (create, upsert, query, read feed) and
//! `/dbs/{db}/colls/{coll}/docs/{id}` (read, replace, patch, delete); a POST with
//! `x-ms-cosmos-is-batch-request: True` is a transactional batch (`batch.rs`); a GET with
//! `A-IM` is the change feed (`feed.rs`).
//!
//! Point operations need the `x-ms-documentdb-partitionkey` header; on a create or upsert it
//! is optional, and when given must name the partition the body's partition key path holds
//! (else 400, nothing written). A PATCH body is `{"operations": [...], "condition": "FROM c
//! WHERE ..."}` or the bare array of operations (an item that does not meet the condition:
//! 412). `If-Match` makes replace,
//! upsert, patch and delete conditional (412 on another etag, 404 when the item is missing or
//! expired); `If-None-Match` on a read gives 304 when the item still has that etag.
//! Everything else (validation, TTL, 409, 413) is the library's, with its Cosmos status codes.

use axum::http::{Method, StatusCode};
use ebbdb::{Container, ItemOptions, PartitionKey, Query, QueryOptions};
use serde_json::{json, Value};

use super::account::not_allowed;
use super::catalog::container_rid;
use super::reply::Reply;
use super::request::{bad, names, Request};

/// The substatus that tells an SDK a cross-partition query needs its query plan.
const CROSS_PARTITION_QUERY_NOT_SERVABLE: &str = "1004";

/// `/dbs/{db}/colls/{coll}/docs`.
pub fn documents(c: &Container, req: &Request, db: &str) -> Reply {
    let r = || -> Result<Reply, Reply> {
        match req.method {
            Method::POST => {
                if req.flag(names::IS_BATCH_REQUEST)? {
                    return super::batch::run(c, req);
                }
                if req.flag(names::IS_QUERY_PLAN)? {
                    return Ok(query_plan(req));
                }
                let content_type = req.header("content-type")?.unwrap_or("");
                let query_type = content_type.starts_with("application/query+json")
                    || content_type.starts_with("application/sql");
                if req.flag(names::IS_QUERY)? || query_type {
                    if !query_type && !content_type.starts_with("application/json") {
                        return Err(Reply::error(
                            StatusCode::UNSUPPORTED_MEDIA_TYPE,
                            format!(
                                "a query needs Content-Type: application/query+json, not \
                                 '{content_type}'"
                            ),
                        ));
                    }
                    return query(c, req, db);
                }
                write(c, req)
            }
            Method::GET => {
                if let Some(aim) = req.header("a-im")? {
                    return super::feed::read(c, req, db, aim);
                }
                read_feed(c, req, db)
            }
            ref m => Ok(not_allowed(m, "a document collection")),
        }
    };
    r().unwrap_or_else(|e| e)
}

/// `/dbs/{db}/colls/{coll}/docs/{id}`.
pub fn document(c: &Container, req: &Request, id: &str) -> Reply {
    let r = || -> Result<Reply, Reply> {
        let pk = req.required_partition_key()?;
        match req.method {
            Method::GET => {
                let item: Value = c.read_item(pk, id).map_err(|e| Reply::from_ebbdb(&e))?;
                let etag = item.get("_etag").and_then(Value::as_str).map(str::to_owned);
                if let (Some(want), Some(have)) = (req.if_none_match()?, etag.as_deref()) {
                    if want.trim() == have {
                        return Ok(Reply::empty(StatusCode::NOT_MODIFIED).header("etag", have));
                    }
                }
                Ok(Reply::ok(item).etag_from_body())
            }
            Method::PUT => {
                let body = req.json()?;
                let opts = item_options(req)?;
                let stored = c
                    .replace_item_with(pk, id, &body, &opts)
                    .map_err(|e| Reply::from_ebbdb(&e))?;
                super::reply::bump_lsn();
                Ok(Reply::ok(stored).etag_from_body())
            }
            Method::DELETE => {
                let opts = item_options(req)?;
                c.delete_item_with(pk, id, &opts)
                    .map_err(|e| Reply::from_ebbdb(&e))?;
                super::reply::bump_lsn();
                Ok(Reply::empty(StatusCode::NO_CONTENT))
            }
            Method::PATCH => {
                let body = req.json()?;
                let (ops, opts) = super::batch::patch_body(&body, item_options(req)?)?;
                let stored = c
                    .patch_item_with(pk, id, &ops, &opts)
                    .map_err(|e| Reply::from_ebbdb(&e))?;
                super::reply::bump_lsn();
                Ok(Reply::ok(stored).etag_from_body())
            }
            ref m => Ok(not_allowed(m, "a document")),
        }
    };
    r().unwrap_or_else(|e| e)
}

fn item_options(req: &Request) -> Result<ItemOptions, Reply> {
    Ok(match req.if_match()? {
        Some(etag) => ItemOptions::default().if_match(etag),
        None => ItemOptions::default(),
    })
}

/// Create, or upsert with `x-ms-documentdb-is-upsert: true`.
fn write(c: &Container, req: &Request) -> Result<Reply, Reply> {
    let body = req.json()?;
    if let Some(header_pk) = req.partition_key()? {
        let path = c.properties().partition_key_path;
        if let Some(body_pk) = body_partition_key(&body, &path) {
            if body_pk != header_pk {
                return Err(bad(
                    "PartitionKey extracted from document doesn't match the one specified in \
                     the header.",
                ));
            }
        }
    }
    let upsert = req.flag(names::IS_UPSERT)?;
    let (stored, status) = if upsert {
        let opts = item_options(req)?;
        (c.upsert_item_with(&body, &opts), StatusCode::OK)
    } else {
        (c.create_item(&body), StatusCode::CREATED)
    };
    let stored = stored.map_err(|e| Reply::from_ebbdb(&e))?;
    super::reply::bump_lsn();
    Ok(Reply::with(status, stored).etag_from_body())
}

/// The partition key the body holds at `path` (`/a/b`, `~1` and `~0` escapes), or `None`
/// when the body is not an object or the value is not a scalar (the library then refuses
/// the item with its own message).
fn body_partition_key(body: &Value, path: &str) -> Option<PartitionKey> {
    let mut v = body;
    for seg in path.split('/').skip(1) {
        let name = seg.replace("~1", "/").replace("~0", "~");
        match v.as_object()?.get(&name) {
            Some(next) => v = next,
            None => return Some(PartitionKey::UNDEFINED),
        }
    }
    match v {
        Value::Null => Some(PartitionKey::NULL),
        Value::Bool(b) => Some(PartitionKey::from(*b)),
        Value::String(s) => Some(PartitionKey::from(s.as_str())),
        Value::Number(n) => n.as_f64().map(PartitionKey::from),
        _ => None,
    }
}

/// `GET .../docs`: every live item (of the header's partition, when given), paged.
fn read_feed(c: &Container, req: &Request, db: &str) -> Result<Reply, Reply> {
    run_page(
        c,
        req,
        db,
        Query::new("SELECT * FROM c"),
        req.partition_key()?,
    )
}

/// A query: `{"query": "...", "parameters": [{"name": "@x", "value": ...}]}`.
fn query(c: &Container, req: &Request, db: &str) -> Result<Reply, Reply> {
    let body = req.json()?;
    let q = parse_query(&body)?;
    let pk = req.partition_key()?;
    if pk.is_none() {
        match req.header(names::PARTITION_KEY_RANGE_ID)? {
            Some("0") => {}
            Some(other) => {
                return Err(bad(format!(
                    "there is no partition key range '{other}'; this server has one, '0'"
                )))
            }
            None => {
                // As the Azure gateway does for a query it does not run across partitions
                // itself: the SDK then asks for the query plan and sends the query to each
                // partition key range (here, the one range).
                // The body carries the plan too (`additionalErrorInfo`, a JSON string): the
                // JavaScript SDK asks for the plan only when it finds that field.
                let mut reply = Reply::error(
                    StatusCode::BAD_REQUEST,
                    "The provided cross partition query can not be directly served by the \
                     gateway. This is a first chance (internal) exception that all newer \
                     clients will know how to handle gracefully.",
                )
                .header("x-ms-substatus", CROSS_PARTITION_QUERY_NOT_SERVABLE);
                if let Some(Value::Object(body)) = reply.body.as_mut() {
                    body.insert(
                        "additionalErrorInfo".to_owned(),
                        Value::String(plan().to_string()),
                    );
                }
                return Err(reply);
            }
        }
    }
    run_page(c, req, db, q, pk)
}

/// The query of a query body.
pub fn parse_query(body: &Value) -> Result<Query, Reply> {
    let Some(text) = body.get("query").and_then(Value::as_str) else {
        return Err(bad("a query body needs a string 'query'"));
    };
    let mut q = Query::new(text);
    match body.get("parameters") {
        None | Some(Value::Null) => {}
        Some(Value::Array(params)) => {
            for p in params {
                let Some(name) = p.get("name").and_then(Value::as_str) else {
                    return Err(bad("every query parameter needs a string 'name'"));
                };
                // A parameter without a value is bound to nothing (Cosmos: undefined); the
                // library has no undefined value, so it is refused rather than guessed.
                let Some(value) = p.get("value") else {
                    return Err(bad(format!("query parameter '{name}' has no 'value'")));
                };
                q = q.param(name, value.clone());
            }
        }
        Some(_) => return Err(bad("query 'parameters' must be an array")),
    }
    Ok(q)
}

fn run_page(
    c: &Container,
    req: &Request,
    db: &str,
    q: Query,
    pk: Option<PartitionKey>,
) -> Result<Reply, Reply> {
    let mut opts = QueryOptions::default().continuation(req.continuation()?);
    if let Some(n) = req.max_item_count()? {
        opts = opts.max_item_count(n);
    }
    if let Some(pk) = pk {
        opts = opts.partition_key(pk);
    }
    let page = c
        .query_page::<Value>(&q, &opts)
        .map_err(|e| Reply::from_ebbdb(&e))?;
    let n = page.items.len();
    let mut reply = Reply::ok(json!({
        "_rid": container_rid(db, c.id()),
        "Documents": page.items,
        "_count": n,
    }))
    .header("x-ms-item-count", n.to_string());
    if let Some(token) = page.continuation {
        reply = reply.header(names::CONTINUATION, token);
    }
    Ok(reply)
}

/// The query plan: run the query unchanged against the whole range. ebbdb evaluates every
/// clause (ORDER BY, aggregates, DISTINCT, TOP, OFFSET/LIMIT) itself over the one range, so
/// the plan asks the SDK for no work of its own: no ordering, no aggregation, no rewriting.
fn query_plan(req: &Request) -> Reply {
    if let Err(r) = req.json().and_then(|b| parse_query(&b)) {
        return r;
    }
    Reply::ok(plan())
}

/// The one plan every query gets (see [`query_plan`]).
fn plan() -> Value {
    json!({
        "partitionedQueryExecutionInfoVersion": 2,
        "queryInfo": {
            "distinctType": "None",
            "top": null,
            "offset": null,
            "limit": null,
            "orderBy": [],
            "orderByExpressions": [],
            "groupByExpressions": [],
            "groupByAliases": [],
            "aggregates": [],
            "groupByAliasToAggregateType": {},
            "rewrittenQuery": "",
            "hasSelectValue": false,
            "dCountInfo": null,
            "hasNonStreamingOrderBy": false
        },
        "queryRanges": [{"min": "", "max": "FF", "isMinInclusive": true, "isMaxInclusive": false}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_key_from_body() {
        let b = json!({"id": "1", "a": {"b/c": 5, "n": null}, "s": "x"});
        assert_eq!(body_partition_key(&b, "/s"), Some(PartitionKey::from("x")));
        assert_eq!(
            body_partition_key(&b, "/a/b~1c"),
            Some(PartitionKey::from(5.0))
        );
        assert_eq!(body_partition_key(&b, "/a/n"), Some(PartitionKey::NULL));
        assert_eq!(body_partition_key(&b, "/zz"), Some(PartitionKey::UNDEFINED));
        assert_eq!(body_partition_key(&b, "/a"), None);
        assert_eq!(body_partition_key(&json!([1]), "/a"), None);
    }

    #[test]
    fn query_bodies() {
        assert!(parse_query(&json!({"query": "SELECT * FROM c"})).is_ok());
        let q = parse_query(&json!({"query": "SELECT * FROM c WHERE c.a = @a",
            "parameters": [{"name": "@a", "value": 1}]}))
        .expect("query");
        assert_eq!(
            q,
            Query::new("SELECT * FROM c WHERE c.a = @a").param("@a", 1)
        );
        for bad in [
            json!({}),
            json!({"query": 5}),
            json!({"query": "x", "parameters": {}}),
            json!({"query": "x", "parameters": [{"value": 1}]}),
            json!({"query": "x", "parameters": [{"name": "@a"}]}),
        ] {
            assert_eq!(
                parse_query(&bad).expect_err("refused").status,
                StatusCode::BAD_REQUEST
            );
        }
    }
}
