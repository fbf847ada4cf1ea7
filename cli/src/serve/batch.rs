//! Transactional batch: `POST /dbs/{db}/colls/{coll}/docs` with
//! `x-ms-cosmos-is-batch-request: True` and `x-ms-cosmos-batch-atomic: True`, on the one
//! partition key of `x-ms-documentdb-partitionkey`.
//!
//! The body is a JSON array of operations as the SDKs send them:
//! `{"operationType": "Create"|"Upsert"|"Replace"|"Delete"|"Read"|"Patch", "id": ...,
//! "resourceBody": ..., "ifMatch": ...}` (a patch's `resourceBody` is a PATCH body,
//! `{"operations": [...], "condition": "FROM c WHERE ..."}` or the bare array of operations).
//! The library runs them in order, all or nothing ([`ebbdb::Container::execute_batch`]).
//!
//! The response body is one result per operation,
//! `{"statusCode": n, "requestCharge": 1, "eTag": ..., "resourceBody": ...}`. HTTP 200 when
//! every operation succeeded; when one failed (and so nothing was written) HTTP 207
//! Multi-Status: the failing operation carries its own status and every other one 424. The
//! SDKs read the array only from a response below 400 (the Python SDK then raises
//! `CosmosBatchOperationError` with the failing operation's index and status; the JavaScript
//! SDK's `items.batch` returns the response, `code` 207, with the results); from a 4xx they
//! raise a plain HTTP error without the results.
//!
//! A malformed batch (not an array, an unknown `operationType`, a missing `id` or
//! `resourceBody`, an operation naming another partition key, `ifNoneMatch`) is a 400 for the
//! whole request; so are the library's whole-batch errors (no operation, more than 100; 413
//! for bodies over the request limit). Non-atomic (bulk) batch requests are not served (501).

use axum::http::StatusCode;
use ebbdb::{Container, ItemOptions, PartitionKey, PatchOp, TransactionalBatch};
use serde_json::{json, Map, Value};

use super::reply::Reply;
use super::request::{bad, names, parse_partition_key, Request};

/// Runs a batch request; `Err` for a request that is not a batch this server runs.
pub fn run(c: &Container, req: &Request) -> Result<Reply, Reply> {
    if !req.flag(names::IS_BATCH_ATOMIC)? {
        return Err(Reply::error(
            StatusCode::NOT_IMPLEMENTED,
            "only atomic transactional batches (x-ms-cosmos-batch-atomic: True) are supported \
             by ebbdb serve; bulk (non-atomic) batch requests are not",
        ));
    }
    let pk = req.required_partition_key()?;
    let body = req.json()?;
    let batch = parse_batch(&body, pk)?;
    let response = c.execute_batch(&batch).map_err(|e| Reply::from_ebbdb(&e))?;
    let results: Vec<Value> = response
        .results
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("statusCode".into(), json!(r.status_code));
            m.insert("requestCharge".into(), json!(1));
            if let Some(etag) = &r.etag {
                m.insert("eTag".into(), json!(etag));
            }
            if let Some(item) = &r.item {
                m.insert("resourceBody".into(), item.clone());
            }
            if let Some(message) = &r.message {
                m.insert("message".into(), json!(message));
            }
            Value::Object(m)
        })
        .collect();
    if response.is_success() {
        super::reply::bump_lsn();
        Ok(Reply::ok(Value::Array(results)))
    } else {
        Ok(Reply::with(StatusCode::MULTI_STATUS, Value::Array(results)))
    }
}

/// The batch a request body describes, on partition key `pk`.
pub fn parse_batch(body: &Value, pk: PartitionKey) -> Result<TransactionalBatch, Reply> {
    let Value::Array(ops) = body else {
        return Err(bad(
            "a batch request body must be a JSON array of operations",
        ));
    };
    let mut batch = TransactionalBatch::new(pk.clone());
    for (i, op) in ops.iter().enumerate() {
        let Value::Object(o) = op else {
            return Err(bad(format!("batch operation {i} is not a JSON object")));
        };
        let kind = o.get("operationType").and_then(Value::as_str);
        let Some(kind) = kind else {
            return Err(bad(format!(
                "batch operation {i} needs a string 'operationType'"
            )));
        };
        if let Some(op_pk) = o.get("partitionKey") {
            let op_pk = match op_pk {
                Value::String(text) => parse_partition_key(text)?,
                other => parse_partition_key(&other.to_string())?,
            };
            if op_pk != pk {
                return Err(bad(format!(
                    "batch operation {i} names another partition key than the request's \
                     x-ms-documentdb-partitionkey; a transactional batch works on one"
                )));
            }
        }
        if o.get("ifNoneMatch").is_some_and(|v| !v.is_null()) {
            return Err(bad(format!(
                "batch operation {i}: ifNoneMatch is not supported in a batch by ebbdb serve"
            )));
        }
        let opts = match o.get("ifMatch") {
            None | Some(Value::Null) => ItemOptions::default(),
            Some(Value::String(etag)) if etag.trim() == "*" => ItemOptions::default(),
            Some(Value::String(etag)) => ItemOptions::default().if_match(etag.as_str()),
            Some(_) => {
                return Err(bad(format!(
                    "batch operation {i}: 'ifMatch' must be a string"
                )))
            }
        };
        let id = || {
            o.get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("batch operation {i} ({kind}) needs a string 'id'")))
        };
        let resource = || {
            o.get("resourceBody").ok_or_else(|| {
                bad(format!(
                    "batch operation {i} ({kind}) needs a 'resourceBody'"
                ))
            })
        };
        match kind.to_ascii_lowercase().as_str() {
            "create" => {
                if o.get("ifMatch").is_some_and(|v| !v.is_null()) {
                    return Err(bad(format!(
                        "batch operation {i}: a Create cannot carry 'ifMatch'"
                    )));
                }
                batch.create_item(resource()?);
            }
            "upsert" => {
                batch.upsert_item_with(resource()?, &opts);
            }
            "replace" => {
                batch.replace_item_with(id()?, resource()?, &opts);
            }
            "delete" => {
                batch.delete_item_with(id()?, &opts);
            }
            "read" => {
                if o.get("ifMatch").is_some_and(|v| !v.is_null()) {
                    return Err(bad(format!(
                        "batch operation {i}: a Read cannot carry 'ifMatch'"
                    )));
                }
                batch.read_item(id()?);
            }
            "patch" => {
                let (ops, opts) = patch_body(resource()?, opts)?;
                batch.patch_item_with(id()?, &ops, &opts);
            }
            _ => {
                return Err(bad(format!(
                    "batch operation {i} has an unknown operationType '{kind}' (Create, \
                     Upsert, Replace, Delete, Read or Patch)"
                )))
            }
        }
    }
    Ok(batch)
}

/// A PATCH body, `{"operations": [{"op": ..., "path": ..., ...}], "condition": "FROM c WHERE
/// ..."}`, or the bare array of operations (the JavaScript SDK sends that when it has no
/// condition): its operations, and `opts` with the condition as the filter predicate.
pub fn patch_body(body: &Value, opts: ItemOptions) -> Result<(Vec<PatchOp>, ItemOptions), Reply> {
    let (list, condition) = match body {
        Value::Array(list) => (list, None),
        Value::Object(o) => match o.get("operations") {
            Some(Value::Array(list)) => (list, o.get("condition")),
            _ => return Err(bad("a patch body needs an array 'operations'")),
        },
        _ => {
            return Err(bad(
                "a patch body must be {\"operations\": [...], \"condition\": ...} or an array \
                 of operations",
            ))
        }
    };
    let ops = list
        .iter()
        .map(|op| PatchOp::from_json_value(op).map_err(|e| Reply::from_ebbdb(&e)))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = match condition {
        None | Some(Value::Null) => opts,
        Some(Value::String(cond)) => opts.filter_predicate(cond.as_str()),
        Some(_) => {
            return Err(bad(
                "a patch 'condition' must be a string (FROM c WHERE ...)",
            ))
        }
    };
    Ok((ops, opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_bodies() {
        let (ops, opts) = patch_body(
            &json!({"operations": [{"op": "incr", "path": "/n", "value": 2},
                                   {"op": "move", "from": "/a", "path": "/b"}],
                    "condition": "FROM c WHERE c.n > 1"}),
            ItemOptions::default().if_match("e"),
        )
        .expect("patch body");
        assert_eq!(
            ops,
            vec![PatchOp::incr("/n", 2), PatchOp::move_from("/a", "/b")]
        );
        assert_eq!(
            opts.filter_predicate.as_deref(),
            Some("FROM c WHERE c.n > 1")
        );
        assert_eq!(opts.if_match.as_deref(), Some("e"));
        let (_, opts) = patch_body(
            &json!({"operations": [{"op": "remove", "path": "/n"}]}),
            ItemOptions::default(),
        )
        .expect("no condition");
        assert_eq!(opts.filter_predicate, None);
        let (ops, opts) = patch_body(
            &json!([{"op": "remove", "path": "/n"}]),
            ItemOptions::default(),
        )
        .expect("a bare array");
        assert_eq!(
            (ops, opts.filter_predicate),
            (vec![PatchOp::remove("/n")], None)
        );
        for b in [
            json!("remove"),
            json!([{"op": "frob", "path": "/n"}]),
            json!({}),
            json!({"operations": {}}),
            json!({"operations": [{"op": "frob", "path": "/n"}]}),
            json!({"operations": [{"op": "set", "path": "/n"}]}),
            json!({"operations": [{"op": "remove", "path": "/n"}], "condition": 3}),
        ] {
            let r = patch_body(&b, ItemOptions::default()).expect_err("refused");
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{b}");
        }
    }

    #[test]
    fn batch_bodies() {
        let pk = PartitionKey::from("C1");
        let b = parse_batch(
            &json!([
                {"operationType": "Create", "resourceBody": {"id": "a", "pk": "C1"}},
                {"operationType": "Upsert", "resourceBody": {"id": "b", "pk": "C1"}, "ifMatch": "e"},
                {"operationType": "Replace", "id": "a", "resourceBody": {"id": "a", "pk": "C1"}},
                {"operationType": "Patch", "id": "a",
                 "resourceBody": {"operations": [{"op": "set", "path": "/x", "value": 1}]}},
                {"operationType": "Read", "id": "a", "partitionKey": "[\"C1\"]"},
                {"operationType": "Delete", "id": "a"},
            ]),
            pk.clone(),
        )
        .expect("batch");
        assert_eq!(b.len(), 6);
        assert_eq!(b.partition_key(), &pk);
        for bad_body in [
            json!({"operationType": "Create"}),
            json!([1]),
            json!([{"id": "a"}]),
            json!([{"operationType": "Frob", "id": "a"}]),
            json!([{"operationType": "Create"}]),
            json!([{"operationType": "Read"}]),
            json!([{"operationType": "Replace", "id": "a"}]),
            json!([{"operationType": "Read", "id": "a", "partitionKey": "[\"C2\"]"}]),
            json!([{"operationType": "Read", "id": "a", "ifNoneMatch": "e"}]),
            json!([{"operationType": "Delete", "id": "a", "ifMatch": 5}]),
            json!([{"operationType": "Patch", "id": "a", "resourceBody": {"operations": [{"op": "x", "path": "/a"}]}}]),
        ] {
            let r = parse_batch(&bad_body, pk.clone()).expect_err("refused");
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad_body}");
        }
    }
}
