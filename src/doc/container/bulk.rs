//! Bulk create: many items in one atomic write, for loading data (`ebbdb import`).
//!
//! Every item is checked exactly as [`Container::create_item`] checks it (shape, `id`,
//! partition key, `ttl`, size, and 409 for an `(partition key, id)` that is live or repeats
//! an earlier item of the same call). Either every item is valid and all of them are written
//! as one engine batch (readers and crashes see all or none), or nothing is written and the
//! refused items are listed. All items share one `_ts`: the instant of the batch, which is also
//! the write time of their records, so expiry and `_ts` agree as for single writes.

use std::collections::HashSet;

use serde_json::Value;

use super::{new_etag, Container};
use crate::error::{Error, Result};

/// What [`Container::create_items`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum BulkCreate {
    /// Every item was created, in one atomic write; the number of items.
    Created(usize),
    /// Nothing was written. Each refused item's index in the input and the error that
    /// `create_item` would have given for it (400, 409 or 413); items not listed were valid.
    Refused(Vec<(usize, Error)>),
}

impl Container {
    /// Creates every item of `items` in one atomic write, or none of them.
    ///
    /// Each item is validated as [`Container::create_item`] validates it; an item whose
    /// partition key and id are live in the container, or repeat those of an earlier item in
    /// `items`, is a 409. When any item is refused, nothing is written and every refused item
    /// is reported in [`BulkCreate::Refused`], so a caller can drop them and try again. The
    /// liveness check and the write are one step under the engine's write lock, so no
    /// concurrent write can slip in between. An empty `items` writes nothing.
    ///
    /// ```
    /// use ebbdb::{BulkCreate, ContainerProperties, Database};
    /// use serde_json::json;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let db = Database::open(dir.path())?;
    /// let c = db.create_container(ContainerProperties::new("c", "/pk"))?;
    /// let ok = c.create_items(&[json!({"id": "a", "pk": 1}), json!({"id": "b", "pk": 1})])?;
    /// assert!(matches!(ok, BulkCreate::Created(2)));
    /// let refused = c.create_items(&[json!({"id": "c", "pk": 1}), json!({"id": "a", "pk": 1})])?;
    /// assert!(matches!(refused, BulkCreate::Refused(ref r) if r.len() == 1 && r[0].0 == 1));
    /// assert_eq!(c.count()?, 2);
    /// # Ok::<(), ebbdb::Error>(())
    /// ```
    ///
    /// # Errors
    /// 404 if the container was deleted; I/O errors and a poisoned store (nothing is written).
    pub fn create_items(&self, items: &[Value]) -> Result<BulkCreate> {
        self.check_exists()?;
        let mut refused = Vec::new();
        let mut puts = Vec::with_capacity(items.len());
        let mut index = Vec::with_capacity(items.len());
        let mut seen = HashSet::new();
        let mut docs = Vec::with_capacity(items.len());
        let at_ms = self.ks.store().now_unix_millis();
        for (i, item) in items.iter().enumerate() {
            let prepared = self.prepare(item).and_then(|(p, _, id)| {
                let (bytes, stored) = self.restamp(p.stored, at_ms, &id)?;
                Ok((p.key, bytes, p.ttl, id, stored))
            });
            match prepared {
                Ok((key, bytes, ttl, id, stored)) => {
                    if !seen.insert(key.clone()) {
                        refused.push((
                            i,
                            Error::Conflict(format!(
                                "item '{id}' appears twice with the same partition key"
                            )),
                        ));
                        continue;
                    }
                    index.push((i, id));
                    docs.push(stored);
                    puts.push((key, bytes, ttl));
                }
                Err(e) => refused.push((i, e)),
            }
        }
        if !refused.is_empty() {
            // Nothing is written: name the live ids among the valid items too (a plain read
            // suffices, as no write depends on it), so one call reports every refusal.
            for ((i, id), (key, _, _)) in index.iter().zip(&puts) {
                if self.ks.contains_key(key)? {
                    refused.push((*i, Error::Conflict(format!("item '{id}' already exists"))));
                }
            }
            refused.sort_by_key(|(i, _)| *i);
            return Ok(BulkCreate::Refused(refused));
        }
        if puts.is_empty() {
            return Ok(BulkCreate::Created(0));
        }
        let n = puts.len();
        let mut stage = self.db.indexes().stage(&self.ks);
        // Held across the write, as in `create_item`.
        let slot = self.hist.read_recursive();
        let done = if slot.is_some() {
            self.create_all_with_history(puts, &mut stage)
        } else {
            let keys: Vec<Vec<u8>> = puts.iter().map(|(k, _, _)| k.clone()).collect();
            self.ks.create_all(puts, at_ms, || {
                for (key, doc) in keys.iter().zip(&docs) {
                    stage.put(key, Some(doc));
                }
            })
        };
        // Refused (a key is live): nothing was staged, nothing to settle.
        stage.finish(&done);
        let live = done?;
        if live.is_empty() {
            return Ok(BulkCreate::Created(n));
        }
        Ok(BulkCreate::Refused(
            live.into_iter()
                .filter_map(|j| index.get(j).cloned())
                .map(|(i, id)| (i, Error::Conflict(format!("item '{id}' already exists"))))
                .collect(),
        ))
    }

    /// The write of [`Container::create_items`] on a container that keeps history: the
    /// liveness check and the stamp happen at the write's instant under the log mutex (as for
    /// every write of such a container), and the history goes into the same log batch.
    /// Returns the indexes (into `puts`) of the keys found live; nothing is written then.
    fn create_all_with_history(
        &self,
        puts: Vec<(Vec<u8>, Vec<u8>, crate::ttl::ItemTtl)>,
        stage: &mut crate::doc::index::Stage<'_>,
    ) -> Result<Vec<usize>> {
        let limit = self.db.max_item_size();
        let mut live = Vec::new();
        self.write_items(|view| {
            live = puts
                .iter()
                .enumerate()
                .filter(|(_, (key, _, _))| view.exists(key))
                .map(|(j, _)| j)
                .collect();
            if !live.is_empty() {
                return Ok(Vec::new());
            }
            let mut ops = Vec::with_capacity(puts.len());
            // Staged only once every item is stamped: a later item's 413 writes nothing, and
            // must leave nothing staged (a failed stage marks the index broken).
            let mut stamped = Vec::with_capacity(puts.len());
            for (key, bytes, ttl) in &puts {
                let map: serde_json::Map<String, Value> = crate::doc::stored::parse(bytes)
                    .map_err(|e| Error::BadRequest(e.to_string()))?;
                let id = map
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let (bytes, own, stored) = super::finish(map, &id, view.now_ms(), limit)?;
                debug_assert_eq!(own, *ttl);
                stamped.push(stored);
                ops.push((key.clone(), Some((bytes, own))));
            }
            for ((key, _, _), stored) in puts.iter().zip(&stamped) {
                stage.put(key, Some(stored));
            }
            Ok(ops)
        })?;
        Ok(live)
    }

    /// Stamps a prepared item with the batch's instant: `_ts`, a fresh `_etag`, its bytes
    /// (checked against the item size limit again, as the stamp's length may differ).
    fn restamp(&self, stored: Value, at_ms: u64, id: &str) -> Result<(Vec<u8>, Value)> {
        let Value::Object(mut map) = stored else {
            return Err(Error::BadRequest("item must be a JSON object".into()));
        };
        map.insert("_ts".into(), Value::from(at_ms / 1000));
        map.insert("_etag".into(), Value::String(new_etag(at_ms)));
        let stored = Value::Object(map);
        let bytes = serde_json::to_vec(&stored).map_err(|e| Error::BadRequest(e.to_string()))?;
        let limit = self.db.max_item_size();
        if bytes.len() > limit {
            return Err(Error::TooLarge(format!(
                "item '{id}' is {} bytes; the limit is {limit} bytes",
                bytes.len()
            )));
        }
        Ok((bytes, stored))
    }
}
