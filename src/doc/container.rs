//! [`Container`]: JSON items with `id`, partition key, `ttl`, `_ts` and `_etag`.
//!
//! An item is stored under the engine key `encode_prefix(pk) ++ id`, so the items of one
//! partition are adjacent and `items_in_partition` is a prefix scan. The stored value is the
//! item's JSON with `_ts` and `_etag` set by the write; the item's own `ttl` (if any) is both
//! kept in the JSON (returned as stored) and given to the engine as the record's TTL. The
//! inherited default is never written into the item.

// The atomic bulk create (`Container::create_items`), in its own file.
mod bulk;
// The query planner's choice (point read, partition, index, scan) and the runs.
mod query;
pub use bulk::BulkCreate;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::database::Database;
use super::feed::{add_history, HistorySlot};
use super::partition::{self, PartitionKey};
use super::precheck;
use super::properties::ContainerProperties;
use super::query::{PageSpec, Query, QueryOptions};
use super::stored;
use super::validate;
use crate::engine::{Current, Existed, Iter, Keyspace, KeyspaceView, PlannedOp};
use crate::error::{Error, Result};
use crate::ttl::ItemTtl;

/// Options of a conditional write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemOptions {
    /// Write only if the live item's `_etag` equals this (else 412; 404 if there is no live
    /// item).
    pub if_match: Option<String>,
    /// Patch only: write only if the live item matches this filter predicate, written in the
    /// query dialect as `FROM c WHERE …` (else 412). Other writes refuse it with 400.
    pub filter_predicate: Option<String>,
}

impl ItemOptions {
    /// Sets `if_match`.
    #[must_use]
    pub fn if_match(mut self, etag: impl Into<String>) -> Self {
        self.if_match = Some(etag.into());
        self
    }

    /// Sets the conditional patch's `filter_predicate` (`"FROM c WHERE c.status = 'open'"`).
    #[must_use]
    pub fn filter_predicate(mut self, predicate: impl Into<String>) -> Self {
        self.filter_predicate = Some(predicate.into());
        self
    }

    /// 400 if a write other than a patch is given a filter predicate.
    pub(super) fn refuse_predicate(&self) -> Result<()> {
        if self.filter_predicate.is_some() {
            return Err(Error::BadRequest(
                "filter_predicate applies to patch only".into(),
            ));
        }
        Ok(())
    }
}

/// A container of JSON items.
///
/// ```
/// use ebbdb::{Database, ContainerProperties, DefaultTtl, ItemOptions};
/// use serde_json::{json, Value};
///
/// let dir = tempfile::tempdir()?;
/// let db = Database::open(dir.path())?;
/// let c = db.create_container(ContainerProperties::new("carts", "/user").with_default_ttl(DefaultTtl::NeverExpire))?;
/// let stored = c.create_item(&json!({"id": "1", "user": "ann", "items": 3, "ttl": 3600}))?;
/// let etag = stored["_etag"].as_str().unwrap_or_default().to_string();
/// c.replace_item_with("ann", "1", &json!({"id": "1", "user": "ann", "items": 4}), &ItemOptions::default().if_match(etag))?;
/// let now: Value = c.read_item("ann", "1")?;
/// assert_eq!(now["items"], 4);
/// assert!(now.get("ttl").is_none());     // removing `ttl` makes the item inherit again
/// assert_eq!(c.count()?, 1);
/// # Ok::<(), ebbdb::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Container {
    pub(super) db: Database,
    pub(super) props: ContainerProperties,
    pub(super) ks: Keyspace,
    /// The all-versions change feed's history, shared by every handle of this container
    /// (`None` without a change feed retention).
    pub(super) hist: HistorySlot,
}

/// An item prepared for writing.
struct Prepared {
    key: Vec<u8>,
    bytes: Vec<u8>,
    ttl: ItemTtl,
    stored: Value,
    /// The write's instant: stamped into `_ts`/`_etag` and given to the engine for the record
    /// header, so expiry and `_ts` use the same second.
    at_ms: u64,
}

impl Container {
    pub(crate) fn new(db: Database, props: ContainerProperties, ks: Keyspace) -> Self {
        let hist = db.history_slot(&props);
        Self {
            db,
            props,
            ks,
            hist,
        }
    }

    /// A planned write of items (`engine/planned.rs`): `plan` runs under the log mutex and
    /// returns the item writes. With a change feed retention, their history is added to the
    /// same log batch (`feed/history.rs`), so a crash keeps both or neither.
    pub(super) fn write_items(
        &self,
        plan: impl FnOnce(&KeyspaceView<'_, '_>) -> Result<Vec<PlannedOp>>,
    ) -> Result<Existed> {
        // Recursive: the single-item writes already hold it (and a waiting writer must not
        // block this thread's second read).
        let guard = self.hist.read_recursive();
        match guard.as_ref() {
            None => self.ks.write_planned(true, plan),
            Some(h) => self.ks.write_planned_pair(&h.ks, |items, hist| {
                let ops = plan(items)?;
                if ops.is_empty() {
                    return Ok(Vec::new());
                }
                let ttl_history = self.ks.ttl_history();
                add_history(ops, items, hist, h.retention, &ttl_history)
            }),
        }
    }

    /// A single-item write on a container that keeps history: the check and the stamp
    /// (`_ts`, `_etag`) happen at the write's instant under the log mutex, so `_ts` never
    /// decreases along the log (the all-versions order relies on it). `put` is the prepared
    /// item and its id; `None` deletes.
    fn write_one_stamped(
        &self,
        key: &[u8],
        put: Option<(&Value, &str)>,
        check: impl FnOnce(&Current<'_>) -> Result<()>,
    ) -> Result<Option<Value>> {
        let limit = self.db.max_item_size();
        let mut out = None;
        let mut stage = self.db.indexes().stage(&self.ks);
        let done = self.write_items(|view| {
            check(&view.current(key))?;
            match put {
                Some((stored, id)) => {
                    let Value::Object(map) = stored.clone() else {
                        return Err(Error::BadRequest("item must be a JSON object".into()));
                    };
                    let (bytes, ttl, stored) = finish(map, id, view.now_ms(), limit)?;
                    stage.put(key, Some(&stored));
                    out = Some(stored);
                    Ok(vec![(key.to_vec(), Some((bytes, ttl)))])
                }
                None => {
                    stage.put(key, None);
                    Ok(vec![(key.to_vec(), None)])
                }
            }
        });
        stage.finish(&done);
        done?;
        Ok(out)
    }

    /// The container's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.props.id
    }

    /// The container's current properties (the default TTL as in force now).
    #[must_use]
    pub fn properties(&self) -> ContainerProperties {
        let mut p = self.props.clone();
        p.default_ttl = self.ks.default_ttl();
        p
    }

    /// The engine keyspace holding the items.
    #[must_use]
    pub fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    fn prepare(&self, item: &impl Serialize) -> Result<(Prepared, PartitionKey, String)> {
        // Before anything else walks the item: bounded recursion, finite numbers.
        precheck::check(item).map_err(precheck::Refused::into_error)?;
        let value = serde_json::to_value(item)
            .map_err(|e| Error::BadRequest(format!("item is not valid JSON: {e}")))?;
        validate::item_object(&value)?;
        let pk = partition::extract(&value, &self.props.partition_key_path)?;
        let Value::Object(mut map) = value else {
            return Err(Error::BadRequest("item must be a JSON object".into()));
        };
        let id = validate::validate_id(map.get("id"))?.to_string();
        let ttl = validate::parse_item_ttl(map.get("ttl"))?;
        validate::strip_system_properties(&mut map);
        let now_ms = self.ks.store().now_unix_millis();
        map.insert("_ts".into(), Value::from(now_ms / 1000));
        map.insert("_etag".into(), Value::String(new_etag(now_ms)));
        let stored = Value::Object(map);
        let bytes = serde_json::to_vec(&stored).map_err(|e| Error::BadRequest(e.to_string()))?;
        let limit = self.db.max_item_size();
        if bytes.len() > limit {
            return Err(Error::TooLarge(format!(
                "item '{id}' is {} bytes; the limit is {limit} bytes",
                bytes.len()
            )));
        }
        let key = partition::encode_key(&pk, &id);
        Ok((
            Prepared {
                key,
                bytes,
                ttl,
                stored,
                at_ms: now_ms,
            },
            pk,
            id,
        ))
    }

    /// Creates an item; 409 if an item with the same id is live in the same partition.
    ///
    /// # Errors
    /// 400 for an invalid item, 409 on conflict, 413 when too large.
    pub fn create_item(&self, item: &impl Serialize) -> Result<Value> {
        let (p, _, id) = self.prepare(item)?;
        let check = |cur: &Current<'_>| {
            if cur.exists() {
                Err(Error::Conflict(format!("item '{id}' already exists")))
            } else {
                Ok(())
            }
        };
        // Held across the write: retention cannot be turned on or off between this choice and
        // the write (`replace_container` takes the slot's write lock).
        let slot = self.hist.read_recursive();
        if slot.is_some() {
            let stored = self.write_one_stamped(&p.key, Some((&p.stored, &id)), check)?;
            self.db.notify_change();
            return Ok(stored.unwrap_or(p.stored));
        }
        let mut stage = self.db.indexes().stage(&self.ks);
        let done = self
            .ks
            .write_checked(&p.key, Some((p.bytes, p.ttl)), p.at_ms, |cur| {
                check(cur)?;
                stage.put(&p.key, Some(&p.stored));
                Ok(())
            });
        stage.finish(&done);
        done?;
        self.db.notify_change();
        Ok(p.stored)
    }

    /// Creates or replaces an item.
    ///
    /// # Errors
    /// 400 for an invalid item, 413 when too large.
    pub fn upsert_item(&self, item: &impl Serialize) -> Result<Value> {
        self.upsert_item_with(item, &ItemOptions::default())
    }

    /// Upsert with options: with `if_match`, the write happens only over a live item with that
    /// etag (404 if none, 412 if it differs).
    ///
    /// # Errors
    /// As [`Container::upsert_item`], plus 404/412 for `if_match`.
    pub fn upsert_item_with(&self, item: &impl Serialize, opts: &ItemOptions) -> Result<Value> {
        opts.refuse_predicate()?;
        let (p, _, id) = self.prepare(item)?;
        // Held across the write: retention cannot be turned on or off between this choice and
        // the write (`replace_container` takes the slot's write lock).
        let slot = self.hist.read_recursive();
        if slot.is_some() {
            let stored = self.write_one_stamped(&p.key, Some((&p.stored, &id)), |cur| {
                check_etag(&id, cur, opts, false)
            })?;
            self.db.notify_change();
            return Ok(stored.unwrap_or(p.stored));
        }
        // Always the checked write: the index (if any) is staged under the log mutex, where a
        // newly registered index is also registered, so no write slips past its build.
        {
            let mut stage = self.db.indexes().stage(&self.ks);
            let done = self
                .ks
                .write_checked(&p.key, Some((p.bytes, p.ttl)), p.at_ms, |cur| {
                    check_etag(&id, cur, opts, false)?;
                    stage.put(&p.key, Some(&p.stored));
                    Ok(())
                });
            stage.finish(&done);
            done?;
        }
        self.db.notify_change();
        Ok(p.stored)
    }

    /// Replaces a live item; 404 if it is missing or expired.
    ///
    /// # Errors
    /// 400 when the body's id or partition key differ from the arguments, 404, 413.
    pub fn replace_item(
        &self,
        pk: impl Into<PartitionKey>,
        id: &str,
        item: &impl Serialize,
    ) -> Result<Value> {
        self.replace_item_with(pk, id, item, &ItemOptions::default())
    }

    /// Replace with options (`if_match` → 412 on a different etag).
    ///
    /// # Errors
    /// As [`Container::replace_item`], plus 412.
    pub fn replace_item_with(
        &self,
        pk: impl Into<PartitionKey>,
        id: &str,
        item: &impl Serialize,
        opts: &ItemOptions,
    ) -> Result<Value> {
        opts.refuse_predicate()?;
        let pk = pk.into();
        let (p, body_pk, body_id) = self.prepare(item)?;
        if body_id != id {
            return Err(Error::BadRequest(format!(
                "the item's 'id' '{body_id}' differs from the id '{id}' being replaced"
            )));
        }
        if body_pk != pk {
            return Err(Error::BadRequest(format!(
                "the item's partition key at '{}' differs from the partition key of the item being replaced",
                self.props.partition_key_path
            )));
        }
        // Held across the write: retention cannot be turned on or off between this choice and
        // the write (`replace_container` takes the slot's write lock).
        let slot = self.hist.read_recursive();
        if slot.is_some() {
            let stored = self.write_one_stamped(&p.key, Some((&p.stored, id)), |cur| {
                check_etag(id, cur, opts, true)
            })?;
            self.db.notify_change();
            return Ok(stored.unwrap_or(p.stored));
        }
        let mut stage = self.db.indexes().stage(&self.ks);
        let done = self
            .ks
            .write_checked(&p.key, Some((p.bytes, p.ttl)), p.at_ms, |cur| {
                check_etag(id, cur, opts, true)?;
                stage.put(&p.key, Some(&p.stored));
                Ok(())
            });
        stage.finish(&done);
        done?;
        self.db.notify_change();
        Ok(p.stored)
    }

    /// Reads a live item; 404 if missing or expired.
    ///
    /// # Errors
    /// 404; 400 if the stored JSON does not deserialize into `T`.
    pub fn read_item<T: DeserializeOwned>(
        &self,
        pk: impl Into<PartitionKey>,
        id: &str,
    ) -> Result<T> {
        let key = partition::encode_key(&pk.into(), id);
        // Parsed straight from the log's mapping: no copy of the stored JSON.
        self.ks
            .get_with(&key, |bytes| stored::parse(bytes))?
            .ok_or_else(|| Error::NotFound(format!("item '{id}'")))?
            .map_err(|e| {
                Error::BadRequest(format!("item '{id}' does not fit the requested type: {e}"))
            })
    }

    /// Deletes a live item; 404 if missing or expired.
    ///
    /// # Errors
    /// 404.
    pub fn delete_item(&self, pk: impl Into<PartitionKey>, id: &str) -> Result<()> {
        self.delete_item_with(pk, id, &ItemOptions::default())
    }

    /// Delete with options (`if_match` → 412 on a different etag).
    ///
    /// # Errors
    /// 404, 412.
    pub fn delete_item_with(
        &self,
        pk: impl Into<PartitionKey>,
        id: &str,
        opts: &ItemOptions,
    ) -> Result<()> {
        opts.refuse_predicate()?;
        let key = partition::encode_key(&pk.into(), id);
        // Held across the write: retention cannot be turned on or off between this choice and
        // the write (`replace_container` takes the slot's write lock).
        let slot = self.hist.read_recursive();
        if slot.is_some() {
            self.write_one_stamped(&key, None, |cur| check_etag(id, cur, opts, true))?;
            self.db.notify_change();
            return Ok(());
        }
        let mut stage = self.db.indexes().stage(&self.ks);
        let done = self
            .ks
            .write_checked(&key, None, self.ks.store().now_unix_millis(), |cur| {
                check_etag(id, cur, opts, true)?;
                stage.put(&key, None);
                Ok(())
            });
        stage.finish(&done);
        done?;
        self.db.notify_change();
        Ok(())
    }

    /// Exact number of live items.
    ///
    /// # Errors
    /// 404 if the container was deleted.
    pub fn count(&self) -> Result<usize> {
        self.ks.len()
    }

    /// Every live item, in partition then id order.
    ///
    /// # Errors
    /// 404 if the container was deleted.
    pub fn items(&self) -> Result<Items> {
        self.check_exists()?;
        Ok(Items {
            inner: self.ks.iter(),
        })
    }

    /// The live items of one partition (a prefix scan).
    ///
    /// # Errors
    /// 404 if the container was deleted.
    pub fn items_in_partition(&self, pk: impl Into<PartitionKey>) -> Result<Items> {
        self.check_exists()?;
        Ok(Items {
            inner: self.ks.prefix(partition::encode_prefix(&pk.into())),
        })
    }

    /// Runs a query over every partition (see [`Query`] and `docs/contract.md` §7).
    ///
    /// # Errors
    /// 400 for a syntax error (naming the position), an unknown function, an unbound
    /// parameter or an unsupported clause; 404 if the container was deleted.
    pub fn query<T: DeserializeOwned>(&self, q: &Query) -> Result<QueryResults<T>> {
        self.query_with(q, &QueryOptions::default())
    }

    /// Runs a query with options; with a partition key only that partition's items are read.
    /// `max_item_count` and `continuation` are ignored here (see [`Container::query_page`]).
    ///
    /// # Errors
    /// As [`Container::query`].
    pub fn query_with<T: DeserializeOwned>(
        &self,
        q: &Query,
        opts: &QueryOptions,
    ) -> Result<QueryResults<T>> {
        let (rows, _) = self.run_query(q, opts, &PageSpec::default())?;
        Ok(QueryResults {
            rows: rows.into_typed(),
        })
    }

    /// One page of a query: at most `opts.max_item_count` rows, and a continuation token if
    /// more follow. Pass the token back in `opts.continuation` (with the same query) for the
    /// next page. Each page evaluates expiry at its own `now`; an item that stays unchanged
    /// and live is returned exactly once across the pages (DISTINCT and aggregate queries are
    /// recomputed per page and paged by position in the result).
    ///
    /// # Errors
    /// As [`Container::query`]; 400 for a continuation that does not belong to this query.
    pub fn query_page<T: DeserializeOwned>(
        &self,
        q: &Query,
        opts: &QueryOptions,
    ) -> Result<QueryPage<T>> {
        // A token's cursor means something only in this container and partition scope.
        let mut scope = self.props.id.as_bytes().to_vec();
        scope.push(0);
        if let Some(pk) = &opts.partition_key {
            scope.extend_from_slice(&partition::encode_prefix(pk));
        }
        let page = PageSpec {
            after: opts
                .continuation
                .as_deref()
                .map(|token| super::query::decode_continuation(token, q, &scope))
                .transpose()?,
            max: Some(opts.max_item_count.unwrap_or(100).max(1)),
        };
        let (rows, cursor) = self.run_query(q, opts, &page)?;
        let items = rows.into_typed().collect::<Result<Vec<T>>>()?;
        Ok(QueryPage {
            items,
            continuation: cursor.map(|c| super::query::encode_continuation(&c, q, &scope)),
        })
    }

    pub(super) fn check_exists(&self) -> Result<()> {
        self.ks.check_alive()
    }
}

/// Stamps a changed item for writing at `now_ms` (patch, batch): its `ttl` validated (§3),
/// nesting and numbers checked, system properties replaced by a fresh `_ts`/`_etag`, size
/// checked (413). Returns the bytes, the record's own TTL and the stored item.
pub(super) fn finish(
    mut map: Map<String, Value>,
    id: &str,
    now_ms: u64,
    limit: usize,
) -> Result<(Vec<u8>, ItemTtl, Value)> {
    let ttl = validate::parse_item_ttl(map.get("ttl"))?;
    validate::strip_system_properties(&mut map);
    precheck::check(&map).map_err(precheck::Refused::into_error)?;
    map.insert("_ts".into(), Value::from(now_ms / 1000));
    map.insert("_etag".into(), Value::String(new_etag(now_ms)));
    let stored = Value::Object(map);
    let bytes = serde_json::to_vec(&stored).map_err(|e| Error::BadRequest(e.to_string()))?;
    if bytes.len() > limit {
        return Err(Error::TooLarge(format!(
            "item '{id}' is {} bytes; the limit is {limit} bytes",
            bytes.len()
        )));
    }
    Ok((bytes, ttl, stored))
}

/// The `_etag` of a stored item.
pub(super) fn etag_of(doc: &Value) -> Option<&str> {
    doc.get("_etag").and_then(Value::as_str)
}

fn check_etag(id: &str, cur: &Current<'_>, opts: &ItemOptions, must_exist: bool) -> Result<()> {
    if !cur.exists() {
        if must_exist || opts.if_match.is_some() {
            return Err(Error::NotFound(format!("item '{id}'")));
        }
        return Ok(());
    }
    if let Some(want) = &opts.if_match {
        let bytes = cur.value()?.unwrap_or_default();
        let v: Map<String, Value> = stored::parse(&bytes).unwrap_or_default();
        if v.get("_etag").and_then(Value::as_str) != Some(want.as_str()) {
            return Err(Error::PreconditionFailed(format!(
                "item '{id}' has changed (etag does not match)"
            )));
        }
    }
    Ok(())
}

/// A fresh etag: the write time plus a per-process random value and a counter, so two writes
/// never share one.
fn new_etag(now_ms: u64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(now_ms);
        h.finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("\"{now_ms:012x}-{salt:016x}-{n:08x}\"")
}

/// Iterator over live items as JSON values.
#[derive(Debug)]
pub struct Items {
    inner: Iter,
}

impl Iterator for Items {
    type Item = Result<Value>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(
            self.inner
                .next()?
                .and_then(|(_, bytes)| parse_stored(&bytes)),
        )
    }
}

/// The rows of a query, converted to `T` one at a time.
#[derive(Debug)]
pub struct QueryResults<T> {
    rows: super::query::Typed<T>,
}

impl<T: DeserializeOwned> Iterator for QueryResults<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        self.rows.next()
    }
}

/// One page of query results.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryPage<T> {
    /// The rows of this page.
    pub items: Vec<T>,
    /// Where the next page starts (pass it as `QueryOptions::continuation`), or `None` after
    /// the last page.
    pub continuation: Option<String>,
}

/// A stored item's JSON (a 400 if the bytes are not an item).
fn parse_stored(bytes: &[u8]) -> Result<Value> {
    stored::parse(bytes).map_err(|e| Error::BadRequest(format!("stored item is not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::batch::TransactionalBatch;
    use crate::doc::patch::PatchOp;
    use serde_json::json;

    /// Each live item key of `c` with whether its record carries the `DOC` flag.
    fn flags(c: &Container) -> Vec<(Vec<u8>, bool)> {
        let mut it = c.keyspace().iter();
        let mut out = Vec::new();
        while let Some(r) = it.next_with_doc(|k, _, doc| (k.to_vec(), doc)) {
            out.push(r.expect("read"));
        }
        out
    }

    #[test]
    fn every_item_write_marks_its_record_a_document_and_a_raw_put_does_not() {
        let dir = tempfile::tempdir().expect("dir");
        // Hints for these small records too: the reopen below reads the merge's hints.
        let opts = || crate::Options {
            hint_every_segment: true,
            ..crate::Options::default()
        };
        let db = Database::open_with(dir.path(), opts()).expect("open");
        for props in [
            ContainerProperties::new("plain", "/pk"),
            // Writes its items together with the change feed's history (a planned pair).
            ContainerProperties::new("fed", "/pk").with_change_feed_retention_minutes(10),
        ] {
            let c = db.create_container(props).expect("container");
            c.create_item(&json!({"id": "created", "pk": "a"}))
                .expect("create");
            c.upsert_item(&json!({"id": "upserted", "pk": "a"}))
                .expect("upsert");
            c.create_item(&json!({"id": "replaced", "pk": "a"}))
                .expect("create");
            c.replace_item(
                "a",
                "replaced",
                &json!({"id": "replaced", "pk": "a", "v": 2}),
            )
            .expect("replace");
            c.create_item(&json!({"id": "patched", "pk": "a", "n": 1}))
                .expect("create");
            c.patch_item("a", "patched", &[PatchOp::incr("/n", 1)])
                .expect("patch");
            let mut batch = TransactionalBatch::new("a");
            batch
                .create_item(&json!({"id": "batched1", "pk": "a"}))
                .upsert_item(&json!({"id": "batched2", "pk": "a"}));
            assert!(c.execute_batch(&batch).expect("batch").is_success());
            c.create_items(&[json!({"id": "bulk", "pk": "a"})])
                .expect("bulk");
            let raw = partition::encode_key(&"a".into(), "raw");
            c.keyspace()
                .put(&raw, br#"{"id":"raw","pk":"a"}"#)
                .expect("raw put");
        }
        let raw = partition::encode_key(&"a".into(), "raw");
        let check = |db: &Database, when: &str| {
            for id in ["plain", "fed"] {
                let seen = flags(&db.container(id).expect("container"));
                assert_eq!(seen.len(), 8, "{id} {when}");
                for (key, doc) in seen {
                    let name = String::from_utf8_lossy(&key);
                    assert_eq!(doc, key != raw, "{id} {when}: {name}");
                }
            }
        };
        check(&db, "as written");
        // Reads take the flag from the record itself (CRC-checked), so it travels with the
        // record's bytes: through a merge (which copies them) and reopens with and without
        // hints (which must find the same records).
        db.compact_full().expect("compact");
        check(&db, "after a merge");
        drop(db);
        let db = Database::open_with(dir.path(), opts()).expect("reopen");
        check(&db, "reopened from hints");
        drop(db);
        // Reads take the flag from the record, not the hint: `verify` compares the merged
        // segments' hints with their records, flags included.
        assert_eq!(crate::verify(dir.path()).expect("verify").problems, vec![]);
        let mut hints = 0;
        for entry in std::fs::read_dir(dir.path()).expect("dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "hint") {
                std::fs::remove_file(&path).expect("remove hint");
                hints += 1;
            }
        }
        assert!(hints > 0, "the merge wrote hints");
        let db = Database::open(dir.path()).expect("reopen");
        check(&db, "reopened by scanning");
    }
}
