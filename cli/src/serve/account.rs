//! The account resource (`GET /`) and databases (`/dbs`, `/dbs/{db}`).
//!
//! The account advertises one region whose endpoint is the address the client reached this
//! server at (its `Host` header, with this server's scheme), so an SDK's endpoint discovery
//! keeps talking to this server over plain http instead of switching to an address it cannot
//! reach.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use super::catalog::{database_rid, Catalog, Entry};
use super::reply::Reply;
use super::request::{bad, Request};

/// The name the single advertised region goes by.
const REGION: &str = "ebbdb";

/// `GET /`.
pub fn account(req: &Request) -> Reply {
    if req.method != Method::GET {
        return not_allowed(&req.method, "the account");
    }
    let location = json!([{"name": REGION, "databaseAccountEndpoint": req.endpoint}]);
    let query_engine = json!({
        "maxSqlQueryInputLength": 262_144,
        "maxJoinsPerSqlQuery": 5,
        "maxLogicalAndPerSqlQuery": 500,
        "maxLogicalOrPerSqlQuery": 500,
        "maxUdfRefPerSqlQuery": 10,
        "maxInExpressionItemsCount": 16_000,
        "queryMaxInMemorySortDocumentCount": 500,
        "maxQueryRequestTimeoutFraction": 0.9,
        "sqlAllowNonFiniteNumbers": false,
        "sqlAllowAggregateFunctions": true,
        "sqlAllowSubQuery": false,
        "sqlAllowScalarSubQuery": false,
        "allowNewKeywords": true,
        "sqlAllowLike": true,
        "sqlAllowGroupByClause": true,
        "maxSpatialQueryCells": 12,
        "spatialMaxGeometryPointCount": 256,
        "sqlDisableOptimizationFlags": 0,
        "sqlAllowTop": true,
        "enableSpatialIndexing": false
    });
    Reply::ok(json!({
        "_self": "",
        "id": "ebbdb",
        "_rid": "ebbdb",
        "media": "//media/",
        "addresses": "//addresses/",
        "_dbs": "//dbs/",
        "writableLocations": location,
        "readableLocations": location,
        "enableMultipleWriteLocations": false,
        "continuousBackupEnabled": false,
        "enableNRegionSynchronousCommit": false,
        "userReplicationPolicy": {"asyncReplication": false, "minReplicaSetSize": 1, "maxReplicasetSize": 1},
        "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
        "systemReplicationPolicy": {"minReplicaSetSize": 1, "maxReplicasetSize": 1},
        "readPolicy": {"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
        "queryEngineConfiguration": query_engine.to_string()
    }))
}

/// The REST shape of a database.
pub fn database_json(e: &Entry) -> Value {
    let rid = database_rid(&e.id);
    json!({
        "id": e.id,
        "_rid": rid,
        "_self": format!("dbs/{rid}/"),
        "_etag": format!("\"{rid}-{}\"", e.ts),
        "_colls": "colls/",
        "_users": "users/",
        "_ts": e.ts,
    })
}

/// `/dbs`: list (GET) and create (POST).
pub fn databases(cat: &Catalog, req: &Request) -> Reply {
    match req.method {
        Method::GET => {
            let dbs: Vec<Value> = cat.list().iter().map(|e| database_json(e)).collect();
            let n = dbs.len();
            Reply::ok(json!({"_rid": "", "Databases": dbs, "_count": n}))
                .header("x-ms-item-count", n.to_string())
        }
        Method::POST => {
            let body = match req.json() {
                Ok(v) => v,
                Err(r) => return r,
            };
            let Some(id) = body.get("id").and_then(Value::as_str) else {
                return bad("a database needs a string 'id'");
            };
            match cat.create(id) {
                Ok(e) => Reply::with(StatusCode::CREATED, database_json(&e)).etag_from_body(),
                Err(e) => Reply::from_ebbdb(&e),
            }
        }
        ref m => not_allowed(m, "/dbs"),
    }
}

/// `/dbs/{db}`: read (GET) and delete (DELETE).
pub fn database(cat: &Catalog, req: &Request, id: &str) -> Reply {
    match req.method {
        Method::GET => match cat.get(id) {
            Ok(e) => Reply::ok(database_json(&e)).etag_from_body(),
            Err(e) => Reply::from_ebbdb(&e),
        },
        Method::DELETE => match cat.delete(id) {
            Ok(()) => Reply::empty(StatusCode::NO_CONTENT),
            Err(e) => Reply::from_ebbdb(&e),
        },
        ref m => not_allowed(m, "a database"),
    }
}

/// A 405 naming the method and the resource.
pub fn not_allowed(method: &Method, what: &str) -> Reply {
    Reply::error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not supported on {what}"),
    )
}
