//! [`TransactionalBatch`]: up to 100 operations on one partition key, all or nothing.
//!
//! The whole batch runs as one planned write (`engine/planned.rs`): under the log mutex, each
//! operation in order sees the effects of the ones before it through an overlay (key → the
//! item as the batch has left it, or absent), on top of the live versions. The writes are then
//! appended as one log batch and applied under the keyspace's write lock, so a crash and every
//! concurrent reader (point reads, iterators, queries) see all of them or none. When an
//! operation fails, the plan writes nothing and the response carries that operation's status
//! and 424 (Failed Dependency) for every other one.
//!
//! Whole-batch problems (no operations, more than [`MAX_BATCH_OPS`], bodies over the request
//! limit, a deleted container, a storage failure) are errors of
//! [`Container::execute_batch`] itself.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::container::{etag_of, finish, Container, ItemOptions};
use super::partition::{self, PartitionKey};
use super::patch::{check_home, compile, parse_current, patch_doc, PatchOp};
use super::precheck;
use super::query::Predicate;
use super::validate;
use crate::error::{Error, Result};

/// Most operations one batch may carry (Azure Cosmos DB's limit).
pub const MAX_BATCH_OPS: usize = 100;

/// Largest total size of a batch's item bodies (Azure Cosmos DB's request limit), or
/// `Options::max_item_size` if that is larger.
pub const MAX_BATCH_BYTES: usize = 2 * 1024 * 1024;

/// An item body given to the batch, converted when it was added (a conversion error is that
/// operation's 400 when the batch runs).
type Body = std::result::Result<Value, String>;

#[derive(Debug, Clone)]
enum Op {
    Create(Body),
    Upsert(Body, ItemOptions),
    Replace(String, Body, ItemOptions),
    Delete(String, ItemOptions),
    Read(String),
    Patch(String, Vec<PatchOp>, ItemOptions),
}

/// Operations on one partition key, executed in order and atomically by
/// [`Container::execute_batch`].
///
/// ```
/// use ebbdb::{ContainerProperties, Database, PatchOp, TransactionalBatch};
/// use serde_json::json;
/// let dir = tempfile::tempdir()?;
/// let db = Database::open(dir.path())?;
/// let c = db.create_container(ContainerProperties::new("orders", "/customer"))?;
/// let mut b = TransactionalBatch::new("ann");
/// b.create_item(&json!({"id": "1", "customer": "ann", "n": 1}))
///     .patch_item("1", &[PatchOp::incr("/n", 1)])
///     .read_item("1");
/// let r = c.execute_batch(&b)?;
/// assert!(r.is_success());
/// assert_eq!(r.results[2].item.as_ref().map(|v| v["n"].clone()), Some(json!(2)));
/// # Ok::<(), ebbdb::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TransactionalBatch {
    pk: PartitionKey,
    ops: Vec<Op>,
}

fn body(item: &impl Serialize) -> Body {
    precheck::check(item).map_err(|r| match r.into_error() {
        Error::BadRequest(m) => m,
        other => other.to_string(),
    })?;
    serde_json::to_value(item).map_err(|e| format!("item is not valid JSON: {e}"))
}

impl TransactionalBatch {
    /// An empty batch for the items of partition key `pk`.
    #[must_use]
    pub fn new(pk: impl Into<PartitionKey>) -> Self {
        Self {
            pk: pk.into(),
            ops: Vec::new(),
        }
    }

    /// The batch's partition key.
    #[must_use]
    pub fn partition_key(&self) -> &PartitionKey {
        &self.pk
    }

    /// Number of operations.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if the batch has no operation.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Creates an item (201; 409 if it is live).
    pub fn create_item(&mut self, item: &impl Serialize) -> &mut Self {
        self.ops.push(Op::Create(body(item)));
        self
    }

    /// Creates or replaces an item (201 or 200).
    pub fn upsert_item(&mut self, item: &impl Serialize) -> &mut Self {
        self.upsert_item_with(item, &ItemOptions::default())
    }

    /// Upsert with `if_match` (404 without a live item, 412 on another etag).
    pub fn upsert_item_with(&mut self, item: &impl Serialize, opts: &ItemOptions) -> &mut Self {
        self.ops.push(Op::Upsert(body(item), opts.clone()));
        self
    }

    /// Replaces the live item `id` (200; 404 if missing).
    pub fn replace_item(&mut self, id: &str, item: &impl Serialize) -> &mut Self {
        self.replace_item_with(id, item, &ItemOptions::default())
    }

    /// Replace with `if_match` (412 on another etag).
    pub fn replace_item_with(
        &mut self,
        id: &str,
        item: &impl Serialize,
        opts: &ItemOptions,
    ) -> &mut Self {
        self.ops
            .push(Op::Replace(id.to_string(), body(item), opts.clone()));
        self
    }

    /// Deletes the live item `id` (204; 404 if missing).
    pub fn delete_item(&mut self, id: &str) -> &mut Self {
        self.delete_item_with(id, &ItemOptions::default())
    }

    /// Delete with `if_match` (412 on another etag).
    pub fn delete_item_with(&mut self, id: &str, opts: &ItemOptions) -> &mut Self {
        self.ops.push(Op::Delete(id.to_string(), opts.clone()));
        self
    }

    /// Reads the item `id` as the batch has left it so far (200; 404 if missing).
    pub fn read_item(&mut self, id: &str) -> &mut Self {
        self.ops.push(Op::Read(id.to_string()));
        self
    }

    /// Patches the item `id` (200; the rules of [`Container::patch_item`]).
    pub fn patch_item(&mut self, id: &str, ops: &[PatchOp]) -> &mut Self {
        self.patch_item_with(id, ops, &ItemOptions::default())
    }

    /// Patch with `if_match` and `filter_predicate`.
    pub fn patch_item_with(&mut self, id: &str, ops: &[PatchOp], opts: &ItemOptions) -> &mut Self {
        self.ops
            .push(Op::Patch(id.to_string(), ops.to_vec(), opts.clone()));
        self
    }
}

/// The outcome of one operation of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOperationResult {
    /// HTTP status as Azure Cosmos DB reports it: 200, 201, 204 on success; the operation's
    /// own error status for the one that failed; 424 for every other one of a failed batch.
    pub status_code: u16,
    /// The item as stored (create, upsert, replace, patch) or read (read); `None` otherwise.
    pub item: Option<Value>,
    /// The item's `_etag` after the operation (`None` for delete and failures).
    pub etag: Option<String>,
    /// Why the operation failed (the failing one only).
    pub message: Option<String>,
}

/// The response of [`Container::execute_batch`].
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionalBatchResponse {
    /// One result per operation, in order.
    pub results: Vec<BatchOperationResult>,
}

impl TransactionalBatchResponse {
    /// True if every operation succeeded (and so every write was applied).
    #[must_use]
    pub fn is_success(&self) -> bool {
        self.results.iter().all(|r| r.status_code < 400)
    }

    /// 200 for a batch that succeeded, else the failing operation's status.
    #[must_use]
    pub fn status_code(&self) -> u16 {
        self.results
            .iter()
            .map(|r| r.status_code)
            .find(|&s| s >= 400 && s != 424)
            .unwrap_or(200)
    }
}

/// What one successful operation produced: its status, item, and the write (if any).
struct Done {
    status: u16,
    item: Option<Value>,
    write: Option<crate::engine::PlannedOp>,
}

/// Checks an item body against the batch: an object with a valid `id`, on the batch's
/// partition key; returns its properties and id.
fn item_of(body: &Body, pk: &PartitionKey, pk_path: &str) -> Result<(Map<String, Value>, String)> {
    let value = body.clone().map_err(Error::BadRequest)?;
    validate::item_object(&value)?;
    let item_pk = partition::extract(&value, pk_path)?;
    if &item_pk != pk {
        return Err(Error::BadRequest(format!(
            "the item's partition key at '{pk_path}' differs from the batch's partition key"
        )));
    }
    let Value::Object(map) = value else {
        return Err(Error::BadRequest("item must be a JSON object".into()));
    };
    let id = validate::validate_id(map.get("id"))?.to_string();
    Ok((map, id))
}

fn etag_matches(id: &str, current: Option<&Value>, opts: &ItemOptions) -> Result<()> {
    let Some(want) = &opts.if_match else {
        return Ok(());
    };
    match current {
        None => Err(Error::NotFound(format!("item '{id}'"))),
        Some(doc) if etag_of(doc) != Some(want.as_str()) => Err(Error::PreconditionFailed(
            format!("item '{id}' has changed (etag does not match)"),
        )),
        Some(_) => Ok(()),
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound(format!("item '{id}'"))
}

impl Container {
    /// Runs `batch` atomically (`docs/contract.md` §8): the operations in order, each seeing
    /// the ones before it; all of their writes or none, for a crash and for every concurrent
    /// reader. A failed operation is reported in the response (its own status, 424 for the
    /// others, nothing written), not as an error.
    ///
    /// # Errors
    /// 400 for an empty batch or more than 100 operations; 413 when the item bodies exceed
    /// [`MAX_BATCH_BYTES`] (or `max_item_size`, if larger); 404 if the container was deleted;
    /// storage errors.
    pub fn execute_batch(&self, batch: &TransactionalBatch) -> Result<TransactionalBatchResponse> {
        if batch.ops.is_empty() {
            return Err(Error::BadRequest(
                "a batch needs at least one operation".into(),
            ));
        }
        if batch.ops.len() > MAX_BATCH_OPS {
            return Err(Error::BadRequest(format!(
                "a batch may carry at most {MAX_BATCH_OPS} operations; this one has {}",
                batch.ops.len()
            )));
        }
        let limit = self.db.max_item_size();
        let request_limit = MAX_BATCH_BYTES.max(limit);
        let request_bytes: usize = batch
            .ops
            .iter()
            .map(|op| match op {
                Op::Create(Ok(v)) | Op::Upsert(Ok(v), _) | Op::Replace(_, Ok(v), _) => {
                    serde_json::to_vec(v).map_or(0, |b| b.len())
                }
                Op::Patch(_, ops, _) => ops
                    .iter()
                    .filter_map(PatchOp::value)
                    .map(|v| serde_json::to_vec(v).map_or(0, |b| b.len()))
                    .sum(),
                _ => 0,
            })
            .sum();
        if request_bytes > request_limit {
            return Err(Error::TooLarge(format!(
                "the batch's items are {request_bytes} bytes; the limit is {request_limit} bytes"
            )));
        }
        self.ks.check_alive()?;
        let pk_path = self.props.partition_key_path.clone();
        let mut results: Vec<BatchOperationResult> = Vec::with_capacity(batch.ops.len());
        let mut failed: Option<(usize, Error)> = None;
        let mut stage = self.db.indexes().stage(&self.ks);
        let done = self.write_items(|view| {
            let now_ms = view.now_ms();
            // Key → the item as the batch has left it (`None`: absent).
            let mut overlay: HashMap<Vec<u8>, Option<Value>> = HashMap::new();
            let mut writes = Vec::new();
            for (i, op) in batch.ops.iter().enumerate() {
                let id = match op {
                    Op::Create(b) | Op::Upsert(b, _) => b
                        .as_ref()
                        .ok()
                        .and_then(|v| v.get("id"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    Op::Replace(id, ..) | Op::Delete(id, _) | Op::Read(id) | Op::Patch(id, ..) => {
                        id.clone()
                    }
                };
                let key = partition::encode_key(&batch.pk, &id);
                let current = match overlay.get(&key) {
                    Some(v) => v.clone(),
                    None => parse_current(view.get(&key)?)?,
                };
                let done = (|| -> Result<Done> {
                    match op {
                        Op::Create(b) => {
                            let (map, id) = item_of(b, &batch.pk, &pk_path)?;
                            if current.is_some() {
                                return Err(Error::Conflict(format!("item '{id}' already exists")));
                            }
                            let (bytes, ttl, stored) = finish(map, &id, now_ms, limit)?;
                            Ok(Done {
                                status: 201,
                                item: Some(stored),
                                write: Some((key.clone(), Some((bytes, ttl)))),
                            })
                        }
                        Op::Upsert(b, opts) => {
                            opts.refuse_predicate()?;
                            let (map, id) = item_of(b, &batch.pk, &pk_path)?;
                            etag_matches(&id, current.as_ref(), opts)?;
                            let (bytes, ttl, stored) = finish(map, &id, now_ms, limit)?;
                            Ok(Done {
                                status: if current.is_some() { 200 } else { 201 },
                                item: Some(stored),
                                write: Some((key.clone(), Some((bytes, ttl)))),
                            })
                        }
                        Op::Replace(id, b, opts) => {
                            opts.refuse_predicate()?;
                            let (map, body_id) = item_of(b, &batch.pk, &pk_path)?;
                            if &body_id != id {
                                return Err(Error::BadRequest(format!(
                                    "the item's 'id' '{body_id}' differs from the id '{id}' being replaced"
                                )));
                            }
                            if current.is_none() {
                                return Err(not_found(id));
                            }
                            etag_matches(id, current.as_ref(), opts)?;
                            let (bytes, ttl, stored) = finish(map, id, now_ms, limit)?;
                            Ok(Done {
                                status: 200,
                                item: Some(stored),
                                write: Some((key.clone(), Some((bytes, ttl)))),
                            })
                        }
                        Op::Delete(id, opts) => {
                            opts.refuse_predicate()?;
                            if current.is_none() {
                                return Err(not_found(id));
                            }
                            etag_matches(id, current.as_ref(), opts)?;
                            Ok(Done {
                                status: 204,
                                item: None,
                                write: Some((key.clone(), None)),
                            })
                        }
                        Op::Read(id) => match &current {
                            Some(doc) => Ok(Done {
                                status: 200,
                                item: Some(doc.clone()),
                                write: None,
                            }),
                            None => Err(not_found(id)),
                        },
                        Op::Patch(id, ops, opts) => {
                            let patch = compile(ops, &pk_path)?;
                            let predicate = opts
                                .filter_predicate
                                .as_deref()
                                .map(Predicate::parse)
                                .transpose()?;
                            check_home(current.as_ref(), &batch.pk, &pk_path, id)?;
                            let (bytes, ttl, stored) = patch_doc(
                                current.clone(),
                                id,
                                &patch,
                                opts,
                                predicate.as_ref(),
                                now_ms,
                                limit,
                            )?;
                            Ok(Done {
                                status: 200,
                                item: Some(stored),
                                write: Some((key.clone(), Some((bytes, ttl)))),
                            })
                        }
                    }
                })();
                match done {
                    Ok(d) => {
                        if let Some((k, put)) = d.write {
                            overlay.insert(k.clone(), put.as_ref().and(d.item.clone()));
                            writes.push((k, put));
                        }
                        results.push(BatchOperationResult {
                            status_code: d.status,
                            etag: d.item.as_ref().and_then(etag_of).map(str::to_string),
                            item: d.item,
                            message: None,
                        });
                    }
                    Err(e) => {
                        failed = Some((i, e));
                        return Ok(Vec::new());
                    }
                }
            }
            // Every key the batch writes, staged once with the state the batch leaves it in.
            for (key, after) in &overlay {
                if writes.iter().any(|(k, _)| k == key) {
                    stage.put(key, after.as_ref());
                }
            }
            Ok(writes)
        });
        stage.finish(&done);
        done?;
        if failed.is_none() {
            self.db.notify_change();
        }
        if let Some((at, e)) = failed {
            let status = e.status_code();
            return Ok(TransactionalBatchResponse {
                results: (0..batch.ops.len())
                    .map(|i| BatchOperationResult {
                        status_code: if i == at { status } else { 424 },
                        item: None,
                        etag: None,
                        message: (i == at).then(|| e.to_string()),
                    })
                    .collect(),
            });
        }
        Ok(TransactionalBatchResponse { results })
    }
}
