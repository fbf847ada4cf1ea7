//! Containers (`/dbs/{db}/colls`, `/dbs/{db}/colls/{coll}`) and their partition key ranges
//! (`/dbs/{db}/colls/{coll}/pkranges`).
//!
//! A container is an ebbdb container: `partitionKey` (one path), `defaultTtl` and
//! `indexingPolicy.indexingMode` are kept, other properties the SDKs send (`version`,
//! included paths, ...) are accepted and not stored. Replace (PUT) is how `defaultTtl`
//! changes (§2 rule 6 of the contract applies). Every container has exactly one partition
//! key range, id `"0"`, covering the whole hash space; it never splits, so its change feed
//! (which the SDKs drain until `304 Not Modified`) has one page and a constant etag.

use axum::http::{Method, StatusCode};
use ebbdb::ContainerProperties;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::account::not_allowed;
use super::catalog::{container_rid, database_rid, Catalog, Entry};
use super::reply::Reply;
use super::request::{bad, Request};

/// The etag of the (never changing) partition key range feed.
const RANGES_ETAG: &str = "\"ebbdb-pkranges-1\"";

/// The REST shape of a container, with the system properties the SDKs read.
pub fn container_json(e: &Entry, props: &ContainerProperties) -> Value {
    let mut v = props.to_json_value();
    let rid = container_rid(&e.id, &props.id);
    let etag = {
        let digest = Sha256::digest(v.to_string().as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("\"{hex}\"")
    };
    if let Some(obj) = v.as_object_mut() {
        if let Some(pk) = obj.get_mut("partitionKey").and_then(Value::as_object_mut) {
            pk.insert("version".to_owned(), json!(2));
        }
        obj.insert("_rid".to_owned(), json!(rid));
        obj.insert(
            "_self".to_owned(),
            json!(format!("dbs/{}/colls/{rid}/", database_rid(&e.id))),
        );
        obj.insert("_etag".to_owned(), json!(etag));
        obj.insert("_ts".to_owned(), json!(e.ts));
        obj.insert("_docs".to_owned(), json!("docs/"));
        obj.insert("_sprocs".to_owned(), json!("sprocs/"));
        obj.insert("_triggers".to_owned(), json!("triggers/"));
        obj.insert("_udfs".to_owned(), json!("udfs/"));
        obj.insert("_conflicts".to_owned(), json!("conflicts/"));
    }
    v
}

fn database(cat: &Catalog, db: &str) -> Result<std::sync::Arc<Entry>, Reply> {
    cat.get(db).map_err(|e| Reply::from_ebbdb(&e))
}

fn properties(req: &Request) -> Result<ContainerProperties, Reply> {
    let body = req.json()?;
    ContainerProperties::from_json_value(&body).map_err(|e| Reply::from_ebbdb(&e))
}

/// `/dbs/{db}/colls`: list (GET) and create (POST).
pub fn containers(cat: &Catalog, req: &Request, db: &str) -> Reply {
    let e = match database(cat, db) {
        Ok(e) => e,
        Err(r) => return r,
    };
    match req.method {
        Method::GET => {
            match e.db.containers() {
                Ok(all) => {
                    let colls: Vec<Value> = all.iter().map(|p| container_json(&e, p)).collect();
                    let n = colls.len();
                    Reply::ok(json!({"_rid": database_rid(db), "DocumentCollections": colls, "_count": n}))
                    .header("x-ms-item-count", n.to_string())
                }
                Err(err) => Reply::from_ebbdb(&err),
            }
        }
        Method::POST => {
            let props = match properties(req) {
                Ok(p) => p,
                Err(r) => return r,
            };
            match e.db.create_container(props) {
                Ok(c) => Reply::with(StatusCode::CREATED, container_json(&e, &c.properties()))
                    .etag_from_body(),
                Err(err) => Reply::from_ebbdb(&err),
            }
        }
        ref m => not_allowed(m, "/dbs/{db}/colls"),
    }
}

/// `/dbs/{db}/colls/{coll}`: read (GET), replace (PUT), delete (DELETE).
pub fn container(cat: &Catalog, req: &Request, db: &str, id: &str) -> Reply {
    let e = match database(cat, db) {
        Ok(e) => e,
        Err(r) => return r,
    };
    match req.method {
        Method::GET => match e.db.container(id) {
            Ok(c) => Reply::ok(container_json(&e, &c.properties())).etag_from_body(),
            Err(err) => Reply::from_ebbdb(&err),
        },
        Method::PUT => {
            let props = match properties(req) {
                Ok(p) => p,
                Err(r) => return r,
            };
            if props.id != id {
                return bad(format!(
                    "the body's id '{}' differs from the container '{id}' being replaced",
                    props.id
                ));
            }
            match e.db.replace_container(props) {
                Ok(c) => Reply::ok(container_json(&e, &c.properties())).etag_from_body(),
                Err(err) => Reply::from_ebbdb(&err),
            }
        }
        Method::DELETE => match e.db.delete_container(id) {
            Ok(()) => Reply::empty(StatusCode::NO_CONTENT),
            Err(err) => Reply::from_ebbdb(&err),
        },
        ref m => not_allowed(m, "a container"),
    }
}

/// The one partition key range of every container.
pub fn the_range() -> Value {
    json!({
        "_rid": "AAAAAAAAAAACAAAAAAAAUA==",
        "id": "0",
        "_etag": RANGES_ETAG,
        "minInclusive": "",
        "maxExclusive": "FF",
        "ridPrefix": 0,
        "_self": "pkranges/0/",
        "throughputFraction": 1,
        "status": "online",
        "parents": [],
        "ownedArchivalPKRangeIds": [],
        "_ts": 0,
        "_lsn": 1
    })
}

/// `GET /dbs/{db}/colls/{coll}/pkranges`: the one range; `304` once the client has it (its
/// `If-None-Match` is the feed's etag).
pub fn partition_key_ranges(cat: &Catalog, req: &Request, db: &str, id: &str) -> Reply {
    if req.method != Method::GET {
        return not_allowed(&req.method, "partition key ranges");
    }
    let e = match database(cat, db) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(err) = e.db.container(id) {
        return Reply::from_ebbdb(&err);
    }
    match req.if_none_match() {
        Ok(Some(tag)) if tag.trim() == RANGES_ETAG => {
            return Reply::empty(StatusCode::NOT_MODIFIED).header("etag", RANGES_ETAG);
        }
        Ok(_) => {}
        Err(r) => return r,
    }
    Reply::ok(json!({
        "_rid": container_rid(db, id),
        "PartitionKeyRanges": [the_range()],
        "_count": 1
    }))
    .header("etag", RANGES_ETAG)
    .header("x-ms-item-count", "1")
}

/// The container a document request names (404 for a missing database or container).
pub fn open_container(cat: &Catalog, db: &str, id: &str) -> Result<ebbdb::Container, Reply> {
    database(cat, db)?
        .db
        .container(id)
        .map_err(|err| Reply::from_ebbdb(&err))
}
