//! The change feed over REST: `GET /dbs/{db}/colls/{coll}/docs` with `A-IM: Incremental feed`
//! (latest-version mode, the library's [`Container::read_change_feed`]).
//!
//! Where it starts: `If-None-Match` absent is the beginning (or `If-Modified-Since`, an HTTP
//! date, when given), `*` is now, anything else is a continuation this server returned as the
//! `etag` header. The reply is 200 with `{"_rid", "Documents", "_count"}` and the `etag` of
//! the next request, or 304 (no body) with that `etag` when nothing changed. Scope: the whole
//! container (`x-ms-documentdb-partitionkeyrangeid` may name the one range, `0`) or one
//! partition (`x-ms-documentdb-partitionkey`); an effective partition key (hash) range narrower
//! than the whole, which the Python SDK sends for `partition_key=`, is a 400. The all-versions-and-deletes mode (`A-IM:
//! Full-Fidelity Feed`, or a `x-ms-cosmos-changefeed-wire-format-version` header) is not built:
//! 400.

use axum::http::StatusCode;
use ebbdb::{ChangeFeedMode, ChangeFeedOptions, ChangeFeedStart, Container};
use serde_json::json;

use super::catalog::container_rid;
use super::reply::Reply;
use super::request::{bad, names, Request};

/// The `A-IM` value of the latest-version feed.
const INCREMENTAL: &str = "incremental feed";
/// The `A-IM` value of the all-versions-and-deletes feed.
const FULL_FIDELITY: &str = "full-fidelity feed";
/// Sent (with `A-IM: Full-Fidelity Feed`) by the SDKs for all-versions-and-deletes.
const WIRE_FORMAT_VERSION: &str = "x-ms-cosmos-changefeed-wire-format-version";
/// `EffectivePartitionKeyRange` with the two bounds below: a hash range scope.
const READ_KEY_TYPE: &str = "x-ms-read-key-type";
const START_EPK: &str = "x-ms-start-epk";
const END_EPK: &str = "x-ms-end-epk";

/// One page of the change feed, `aim` being the request's `A-IM` header.
pub fn read(c: &Container, req: &Request, db: &str, aim: &str) -> Result<Reply, Reply> {
    let aim = aim.trim().to_ascii_lowercase();
    if aim == FULL_FIDELITY || req.header(WIRE_FORMAT_VERSION)?.is_some() {
        return Err(bad(
            "the all-versions-and-deletes change feed mode (A-IM: Full-Fidelity Feed) is not \
             built in ebbdb; only the latest-version change feed (A-IM: Incremental feed) is \
             served",
        ));
    }
    if aim != INCREMENTAL {
        return Err(bad(format!(
            "A-IM must be 'Incremental feed' (the latest-version change feed), not '{aim}'"
        )));
    }
    match req.header(names::PARTITION_KEY_RANGE_ID)? {
        None | Some("0") => {}
        Some(other) => {
            return Err(bad(format!(
                "there is no partition key range '{other}'; this server has one, '0'"
            )))
        }
    }
    // The Python SDK scopes `partition_key=` by an effective partition key (hash) range
    // rather than the partition key header; ebbdb does not compute Cosmos' partition key
    // hashes, so such a range is refused rather than answered with the whole container.
    if let Some(kind) = req.header(READ_KEY_TYPE)? {
        let start_epk = req.header(START_EPK)?.unwrap_or("");
        let end_epk = req.header(END_EPK)?.unwrap_or("FF");
        let whole = start_epk.is_empty() && end_epk.eq_ignore_ascii_case("FF");
        if kind.eq_ignore_ascii_case("EffectivePartitionKeyRange") && !whole {
            return Err(bad(format!(
                "a change feed scoped by an effective partition key range ({start_epk} to \
                 {end_epk}) is not served by ebbdb; scope it with the \
                 x-ms-documentdb-partitionkey header, or read the whole container"
            )));
        }
    }
    let start = match req.if_none_match()?.map(|s| s.trim().to_owned()) {
        Some(s) if s == "*" => ChangeFeedStart::Now,
        Some(s) if !s.is_empty() => ChangeFeedStart::Continuation(s),
        _ => match req.header("if-modified-since")? {
            None => ChangeFeedStart::Beginning,
            Some(date) => {
                let t = httpdate::parse_http_date(date.trim()).map_err(|_| {
                    bad(format!(
                        "If-Modified-Since must be an HTTP date (e.g. 'Mon, 23 Nov 2026 \
                         08:00:00 GMT'), not '{date}'"
                    ))
                })?;
                let secs = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                ChangeFeedStart::Time(secs)
            }
        },
    };
    let mut opts = ChangeFeedOptions::default()
        .mode(ChangeFeedMode::LatestVersion)
        .start(start);
    if let Some(n) = req.max_item_count()? {
        opts = opts.max_item_count(n);
    }
    if let Some(pk) = req.partition_key()? {
        opts = opts.partition_key(pk);
    }
    let page = c
        .read_change_feed(&opts)
        .map_err(|e| Reply::from_ebbdb(&e))?;
    if page.changes.is_empty() {
        return Ok(Reply::empty(StatusCode::NOT_MODIFIED)
            .header("etag", page.continuation)
            .header("x-ms-item-count", "0"));
    }
    let n = page.changes.len();
    Ok(Reply::ok(json!({
        "_rid": container_rid(db, c.id()),
        "Documents": page.changes,
        "_count": n,
    }))
    .header("etag", page.continuation)
    .header("x-ms-item-count", n.to_string()))
}
