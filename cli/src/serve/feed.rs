//! The change feed over REST: `GET /dbs/{db}/colls/{coll}/docs` with `A-IM: Incremental feed`
//! (latest-version mode, the library's [`Container::read_change_feed`]).
//!
//! Where it starts: `If-None-Match` absent is the beginning (or `If-Modified-Since`, an HTTP
//! date, when given), `*` is now, anything else is a continuation this server returned as the
//! `etag` header. The reply is 200 with `{"_rid", "Documents", "_count"}` and the `etag` of
//! the next request, or 304 (no body) with that `etag` when nothing changed. Scope: the whole
//! container (`x-ms-documentdb-partitionkeyrangeid` may name the one range, `0`) or one
//! partition (`x-ms-documentdb-partitionkey`), or an effective partition key (hash) range,
//! which the Python SDK sends for `partition_key=` (items kept by their own hash). The
//! all-versions-and-deletes mode (`A-IM: Full-Fidelity Feed`, with or without a
//! `x-ms-cosmos-changefeed-wire-format-version` header, as the SDKs send it) is the library's
//! mode of the same name (DESIGN.md §16.2): items are `{"current", "previous", "metadata"}`,
//! a container without a change feed retention is a 400, a position older than the window 410.

use axum::http::StatusCode;
use ebbdb::{ChangeFeedMode, ChangeFeedOptions, ChangeFeedStart, Container};
use serde_json::{json, Value};

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
    let mode = if aim == FULL_FIDELITY {
        ChangeFeedMode::AllVersionsAndDeletes
    } else if aim == INCREMENTAL {
        if req.header(WIRE_FORMAT_VERSION)?.is_some() {
            return Err(bad(format!(
                "{WIRE_FORMAT_VERSION} belongs to the all-versions-and-deletes change feed \
                 (A-IM: Full-Fidelity Feed), not to A-IM: Incremental feed"
            )));
        }
        ChangeFeedMode::LatestVersion
    } else {
        return Err(bad(format!(
            "A-IM must be 'Incremental feed' (latest version) or 'Full-Fidelity Feed' (all \
             versions and deletes), not '{aim}'"
        )));
    };
    match req.header(names::PARTITION_KEY_RANGE_ID)? {
        None | Some("0") => {}
        Some(other) => {
            return Err(bad(format!(
                "there is no partition key range '{other}'; this server has one, '0'"
            )))
        }
    }
    // The Python SDK scopes `partition_key=` by an effective partition key (hash) range, not
    // by the partition key header: [start, end) of the MurmurHash3 of the key (hash V2, the
    // version this server reports for every container). Items are kept by their own hash.
    let mut epk_range = None;
    if let Some(kind) = req.header(READ_KEY_TYPE)? {
        if !kind.eq_ignore_ascii_case("EffectivePartitionKeyRange") {
            return Err(bad(format!(
                "{READ_KEY_TYPE} must be EffectivePartitionKeyRange, not '{kind}'"
            )));
        }
        let lo = req
            .header(START_EPK)?
            .unwrap_or("")
            .trim()
            .to_ascii_uppercase();
        let hi = req
            .header(END_EPK)?
            .unwrap_or("FF")
            .trim()
            .to_ascii_uppercase();
        let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex(&lo) || !hex(&hi) || hi.is_empty() {
            return Err(bad(format!(
                "{START_EPK} and {END_EPK} must be hexadecimal effective partition keys, not \
                 '{lo}' and '{hi}'"
            )));
        }
        if !(lo.is_empty() && hi == "FF") {
            epk_range = Some((lo, hi));
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
    let mut opts = ChangeFeedOptions::default().mode(mode).start(start);
    if let Some(n) = req.max_item_count()? {
        opts = opts.max_item_count(n);
    }
    if let Some(pk) = req.partition_key()? {
        opts = opts.partition_key(pk);
    }
    let mut page = c
        .read_change_feed(&opts)
        .map_err(|e| Reply::from_ebbdb(&e))?;
    if let Some((lo, hi)) = &epk_range {
        // Pages of the whole container, filtered, until one keeps an item or the feed ends
        // (the continuation is then past everything read: nothing in range was skipped).
        let path = c.properties().partition_key_path;
        loop {
            let last_empty = page.changes.is_empty();
            page.changes.retain(|change| {
                // All versions: the item is `current`, or `previous` for deletes and expiries.
                let item = match (mode, change.get("current"), change.get("previous")) {
                    (ChangeFeedMode::AllVersionsAndDeletes, Some(cur), _)
                        if cur.as_object().is_some_and(|m| !m.is_empty()) =>
                    {
                        cur
                    }
                    (ChangeFeedMode::AllVersionsAndDeletes, _, Some(prev)) => prev,
                    _ => change,
                };
                let epk = effective_partition_key(item, &path);
                epk.as_str() >= lo.as_str() && epk.as_str() < hi.as_str()
            });
            if !page.changes.is_empty() || last_empty {
                break;
            }
            opts = opts.start(ChangeFeedStart::Continuation(page.continuation.clone()));
            page = c
                .read_change_feed(&opts)
                .map_err(|e| Reply::from_ebbdb(&e))?;
        }
    }
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

/// An item's effective partition key, as the SDKs compute it for hash V2: the MurmurHash3
/// (x64, 128 bits, seed 0) of the value's binary form, bytes reversed, the top two bits
/// cleared, in upper-case hex. `path` is the container's partition key path.
fn effective_partition_key(item: &Value, path: &str) -> String {
    let mut v = Some(item);
    for seg in path.split('/').skip(1) {
        let name = seg.replace("~1", "/").replace("~0", "~");
        v = v.and_then(|x| x.as_object()).and_then(|o| o.get(&name));
    }
    let mut bytes = Vec::new();
    match v {
        None => bytes.push(0x00),
        Some(Value::Null) => bytes.push(0x01),
        Some(Value::Bool(false)) => bytes.push(0x02),
        Some(Value::Bool(true)) => bytes.push(0x03),
        Some(Value::Number(n)) => {
            bytes.push(0x05);
            bytes.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_le_bytes());
        }
        Some(Value::String(s)) => {
            bytes.push(0x08);
            bytes.extend_from_slice(s.as_bytes());
            bytes.push(0xFF);
        }
        // Not a partition key value (the library refuses such items): hashed as undefined.
        Some(_) => bytes.push(0x00),
    }
    let (low, high) = murmur3_x64_128(&bytes);
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&low.to_le_bytes());
    h[8..].copy_from_slice(&high.to_le_bytes());
    h.reverse();
    h[0] &= 0x3F;
    h.iter().map(|b| format!("{b:02X}")).collect()
}

/// MurmurHash3 x64 128 with seed 0: `(h1, h2)`.
fn murmur3_x64_128(data: &[u8]) -> (u64, u64) {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    fn fmix(mut k: u64) -> u64 {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    }
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w)
    };
    let (mut h1, mut h2) = (0u64, 0u64);
    let mut blocks = data.chunks_exact(16);
    for block in &mut blocks {
        let k1 = word(&block[..8])
            .wrapping_mul(C1)
            .rotate_left(31)
            .wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        let k2 = word(&block[8..])
            .wrapping_mul(C2)
            .rotate_left(33)
            .wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    if tail.len() > 8 {
        h2 ^= word(&tail[8..])
            .wrapping_mul(C2)
            .rotate_left(33)
            .wrapping_mul(C1);
    }
    if !tail.is_empty() {
        h1 ^= word(&tail[..tail.len().min(8)])
            .wrapping_mul(C1)
            .rotate_left(31)
            .wrapping_mul(C2);
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_partition_keys_match_the_sdk() {
        // Computed by azure-cosmos 4.17.1 (PartitionKey(path, version=2)
        // ._get_effective_partition_key_string).
        let expected = [
            (json!("A"), "14F53A0810CE6727EB1CD722D321216F"),
            (json!("C1"), "39E00F5B1180FA0C712DCD67678CD7BC"),
            (json!(""), "32E9366E637A71B4E710384B2F4970A0"),
            (
                json!("a much longer partition key value over sixteen bytes"),
                "2150BD86EFB1480A0A2B7802E28E11EB",
            ),
            (json!(5), "19C08621B135968252FB34B4CF66F811"),
            (json!(1.5), "35C5DDEB6C795D16A9963C73C54E97BC"),
            (json!(-0.0), "3D018BB1DF3DB27235766E81FD10406E"),
            (json!(true), "0E711127C5B5A8E4726AC6DD306A3E59"),
            (json!(false), "2FE1BE91E90A3439635E0E9E37361EF2"),
            (json!(null), "378867E4430E67857ACE5C908374FE16"),
            (json!("\u{fc}\u{20ac}"), "0994AC0CEC9BF983A0F24AF918B376E2"),
        ];
        for (value, want) in expected {
            let item = json!({"pk": value, "nested": {"k": value}});
            assert_eq!(effective_partition_key(&item, "/pk"), want, "{value}");
            assert_eq!(effective_partition_key(&item, "/nested/k"), want, "{value}");
        }
    }
}
