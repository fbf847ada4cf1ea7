//! Reading the all-versions-and-deletes change feed (DESIGN.md §16.2) from a container's
//! history (`history.rs`).
//!
//! A page takes the cut `(n, s)` (the engine's `now` second and next sequence number, under the
//! log mutex) and returns the changes whose order key lies after the start position and below
//! `(n, 1, s, 0)`: every write below the cut, expiries of second `n` and earlier, and
//! expiries caused by a default-TTL change in an earlier second. Nothing can later appear
//! below that bound (DESIGN.md §16.2, "finality"), so a position never passes over a change.
//!
//! Expiries come from two places, and one expiry may be seen in both (it is then one key and
//! reported once): the anchors (an item's newest version, walked first) and the records that a
//! write leaves when it finds the previous version expired (read second, so a write that
//! lands between the cut and the anchor walk and overwrites an anchor is still seen).

use std::collections::{BTreeMap, BinaryHeap};
use std::ops::Bound;

use serde_json::{json, Map, Value};

use super::history::{
    anchor_key, Anchor, OrderKey, Record, KIND_CREATE, KIND_DELETE, KIND_EXPIRY, KIND_REPLACE,
};
use super::ChangeFeedStart;
use crate::doc::container::Container;
use crate::doc::partition;
use crate::doc::stored;
use crate::error::{Error, Result};
use crate::ttl;

/// One all-versions page.
pub(super) struct AllPage {
    /// Where the page started (exclusive).
    pub(super) start: OrderKey,
    /// The changes, in feed order, with their keys.
    pub(super) changes: Vec<(OrderKey, Value)>,
    /// The position after the page.
    pub(super) next: OrderKey,
    /// The Unix second at which the earliest expiry not reportable yet becomes reportable.
    pub(super) wake_at: Option<u64>,
}

/// Where a change of the page comes from.
enum Source {
    /// An expiry derived from an anchor: item key, the version's lsn, its expiry second.
    Expiry(Vec<u8>, u64, u64),
    /// A change record.
    Record(Record),
}

fn damaged(what: &str) -> Error {
    Error::Corruption {
        file: std::path::PathBuf::from("change feed history"),
        offset: 0,
        reason: format!("a damaged {what}"),
    }
}

pub(super) fn no_retention(id: &str) -> Error {
    Error::BadRequest(format!(
        "container '{id}' has no change feed retention: the all-versions-and-deletes mode needs \
         one (ContainerProperties::with_change_feed_retention_minutes, or \
         changeFeedPolicy.retentionDuration)"
    ))
}

fn scope_check(container: &str, prefix: Option<&[u8]>, k: &OrderKey) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(b"ebbdb-change-feed-all-1");
    h.update(container.as_bytes());
    h.update(&[u8::from(prefix.is_some())]);
    h.update(prefix.unwrap_or_default());
    h.update(&k.record_key());
    h.finalize()
}

/// The continuation of an all-versions position.
pub(super) fn encode(container: &str, prefix: Option<&[u8]>, k: &OrderKey) -> String {
    json!({
        "v": 1,
        "m": "all",
        "s": k.secs,
        "c": k.class,
        "l": k.lsn,
        "b": k.sub,
        "h": scope_check(container, prefix, k),
    })
    .to_string()
}

fn decode(token: &str, container: &str, prefix: Option<&[u8]>) -> Result<OrderKey> {
    let invalid = || {
        Error::BadRequest(
            "the continuation is not valid for this container, partition key and mode".into(),
        )
    };
    let v: Value = serde_json::from_str(token).map_err(|_| invalid())?;
    let small = |f: &str| {
        v[f].as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .ok_or_else(invalid)
    };
    let k = OrderKey {
        secs: v["s"].as_u64().ok_or_else(invalid)?,
        class: small("c")?,
        lsn: v["l"].as_u64().ok_or_else(invalid)?,
        sub: small("b")?,
    };
    if v["v"] != 1
        || v["m"] != "all"
        || v["h"].as_u64() != Some(u64::from(scope_check(container, prefix, &k)))
    {
        return Err(invalid());
    }
    Ok(k)
}

fn gone(secs: u64, retention: u64, now: u64) -> Error {
    Error::Gone(format!(
        "the change feed position (second {secs}) is older than the container's retention \
         window ({retention} s before second {now}); start again from the beginning or now"
    ))
}

impl Container {
    /// One all-versions page from `start`, at most `max` changes, within `prefix`.
    pub(super) fn all_versions_page(
        &self,
        start: &ChangeFeedStart,
        max: usize,
        prefix: Option<&[u8]>,
    ) -> Result<AllPage> {
        let guard = self.hist.read();
        let Some(h) = guard.as_ref() else {
            return Err(no_retention(self.id()));
        };
        let (now_ms, cut) = self.ks.feed_cut();
        let n = now_ms / 1000;
        let r = h.retention;
        let exhausted = OrderKey {
            secs: n,
            class: 1,
            lsn: cut.saturating_sub(1),
            sub: 1,
        };
        let p = match start {
            ChangeFeedStart::Beginning => OrderKey {
                secs: (n + 1).saturating_sub(r),
                ..OrderKey::ZERO
            },
            ChangeFeedStart::Now => exhausted,
            ChangeFeedStart::Time(t) => {
                if t.saturating_add(r) <= n {
                    return Err(gone(*t, r, n));
                }
                OrderKey {
                    secs: *t,
                    ..OrderKey::ZERO
                }
            }
            ChangeFeedStart::Continuation(token) => {
                let k = decode(token, self.id(), prefix)?;
                if k.secs.saturating_add(r) <= n {
                    return Err(gone(k.secs, r, n));
                }
                k
            }
        };
        let q = OrderKey {
            secs: n,
            class: 1,
            lsn: cut,
            sub: 0,
        };
        let history = self.ks.ttl_history();
        let max = max.max(1);

        // 1. Expiries of items' newest versions, from the anchors: the `max` smallest keys in
        //    (p, q); anchors whose expiry left the window are collected for deletion.
        let mut best: BinaryHeap<(OrderKey, Vec<u8>, u64)> = BinaryHeap::new();
        let mut more = false;
        let mut stale: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut wake_at: Option<u64> = None;
        for kv in h.ks.prefix(anchor_key(prefix.unwrap_or_default())) {
            let (akey, v) = kv?;
            let a = Anchor::decode(&v).ok_or_else(|| damaged("anchor"))?;
            let e = a.expires_at(&history);
            if e == ttl::NEVER {
                continue;
            }
            if e.saturating_add(r) <= n {
                stale.push((akey, v));
                continue;
            }
            let k = a.expiry_key(e, &history, None);
            if k >= q {
                let when = if k.class == 2 { e + 1 } else { e };
                wake_at = Some(wake_at.map_or(when, |w| w.min(when)));
                continue;
            }
            if k <= p {
                continue;
            }
            let item_key = akey.get(1..).unwrap_or_default().to_vec();
            if best.len() < max {
                best.push((k, item_key, e));
            } else {
                more = true;
                if best.peek().is_some_and(|(top, _, _)| k < *top) {
                    best.pop();
                    best.push((k, item_key, e));
                }
            }
        }

        // 2. Change records in (p, q), in key order: the first `max` within the partition.
        let mut merged: BTreeMap<OrderKey, Source> = BTreeMap::new();
        for (k, item_key, e) in best {
            merged.insert(k, Source::Expiry(item_key, k.lsn, e));
        }
        let mut taken = 0;
        for kv in h.ks.range((
            Bound::Excluded(p.record_key()),
            Bound::Excluded(q.record_key()),
        )) {
            let (rk, v) = kv?;
            let k = OrderKey::from_record_key(&rk).ok_or_else(|| damaged("record key"))?;
            let rec = Record::decode(&v).ok_or_else(|| damaged("record"))?;
            if prefix.is_some_and(|px| !rec.item_key.starts_with(px)) {
                continue;
            }
            if taken >= max {
                more = true;
                break;
            }
            taken += 1;
            // The same expiry seen through its anchor is the same key: reported once.
            merged.insert(k, Source::Record(rec));
        }
        more |= merged.len() > max;

        // 3. The page.
        let mut changes = Vec::with_capacity(merged.len().min(max));
        for (k, src) in merged.into_iter().take(max) {
            let v = match src {
                Source::Expiry(item_key, lsn, e) => self.expiry_json(&item_key, lsn, e)?,
                Source::Record(rec) => self.record_json(&rec)?,
            };
            changes.push((k, v));
        }
        let next = match changes.last() {
            Some((k, _)) if more => *k,
            _ => p.max(exhausted),
        };
        drop(guard);
        if !stale.is_empty() {
            self.forget_anchors(stale)?;
        }
        Ok(AllPage {
            start: p,
            changes,
            next,
            wake_at,
        })
    }

    /// Deletes anchors whose expiry left the retention window, each only if unchanged.
    fn forget_anchors(&self, stale: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let guard = self.hist.read();
        let Some(h) = guard.as_ref() else {
            return Ok(());
        };
        h.ks.write_planned(false, |view| {
            let mut ops = Vec::new();
            for (akey, v) in stale {
                if view.get(&akey)?.as_deref() == Some(v.as_slice()) {
                    ops.push((akey, None));
                }
            }
            Ok(ops)
        })?;
        Ok(())
    }

    /// `id` and partition key value of an item key.
    fn identity(&self, item_key: &[u8]) -> Result<(String, Option<Value>)> {
        let (pk, id) = partition::decode_key(item_key).ok_or_else(|| damaged("item key"))?;
        Ok((id, pk.to_json_value()))
    }

    /// `{"id", <partition key at its path>}` and the metadata's `partitionKey`.
    fn previous_of(&self, id: &str, pk: Option<Value>) -> (Value, Value) {
        let path = &self.props.partition_key_path;
        let mut previous = Map::new();
        previous.insert("id".into(), Value::String(id.to_string()));
        let mut pk_meta = Map::new();
        if let Some(pk) = pk {
            pk_meta.insert(path.trim_start_matches('/').to_string(), pk.clone());
            let segs: Vec<String> = path
                .split('/')
                .skip(1)
                .map(|s| s.replace("~1", "/").replace("~0", "~"))
                .collect();
            let mut at = &mut previous;
            for (i, seg) in segs.iter().enumerate() {
                if i + 1 == segs.len() {
                    at.insert(seg.clone(), pk.clone());
                    break;
                }
                let slot = at
                    .entry(seg.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                let Value::Object(m) = slot else { break };
                at = m;
            }
        }
        (Value::Object(previous), Value::Object(pk_meta))
    }

    fn expiry_json(&self, item_key: &[u8], lsn: u64, e: u64) -> Result<Value> {
        let (id, pk) = self.identity(item_key)?;
        let (previous, pk_meta) = self.previous_of(&id, pk);
        Ok(json!({
            "current": {},
            "previous": previous,
            "metadata": {
                "operationType": "delete",
                "timeToLiveExpired": true,
                "lsn": lsn,
                "crts": e,
                "previousImageLSN": lsn,
                "id": id,
                "partitionKey": pk_meta,
            },
        }))
    }

    fn record_json(&self, rec: &Record) -> Result<Value> {
        match rec.kind {
            KIND_EXPIRY => self.expiry_json(&rec.item_key, rec.lsn, rec.crts),
            KIND_DELETE => {
                let (id, pk) = self.identity(&rec.item_key)?;
                let (previous, pk_meta) = self.previous_of(&id, pk);
                let mut meta = json!({
                    "operationType": "delete",
                    "lsn": rec.lsn,
                    "crts": rec.crts,
                    "id": id,
                    "partitionKey": pk_meta,
                });
                if let Some(prev) = rec.prev {
                    meta["previousImageLSN"] = Value::from(prev);
                }
                Ok(json!({"current": {}, "previous": previous, "metadata": meta}))
            }
            KIND_CREATE | KIND_REPLACE => {
                let doc: Value = stored::parse(&rec.doc).map_err(|_| damaged("item"))?;
                let mut meta = json!({
                    "operationType": if rec.kind == KIND_CREATE { "create" } else { "replace" },
                    "lsn": rec.lsn,
                    "crts": rec.crts,
                });
                if let Some(prev) = rec.prev {
                    meta["previousImageLSN"] = Value::from(prev);
                }
                Ok(json!({"current": doc, "metadata": meta}))
            }
            _ => Err(damaged("record")),
        }
    }
}
