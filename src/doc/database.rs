//! [`Database`]: containers over one [`Store`].
//!
//! Each container is an engine keyspace named `c:{id}`, whose default TTL (and its history) is
//! the container's `defaultTtl`. The rest of the container's properties (partition key path,
//! indexing mode) live as JSON in the system keyspace `__containers`. The keyspace is the
//! source of truth for TTL; the system entry says the container exists.
//!
//! Crash windows: create writes the keyspace first, then the system entry; delete removes the
//! system entry first, then the keyspace. A crash in between leaves a keyspace without a system
//! entry, which is not a container, and the next create of that id deletes it first.
//!
//! Catalogue changes (create, create-if-not-exists, replace, delete) are serialised by one
//! mutex shared by every clone of the [`Database`]: the existence check, the leftover cleanup
//! and the two writes of a create are one step, so a racing create of the same id sees the
//! first one's system entry (409) instead of deleting its keyspace as a leftover. Item
//! operations never take this mutex.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use serde_json::Value;

use super::container::Container;
use super::feed::{History, HistorySlot};
use super::properties::ContainerProperties;
use crate::engine::{Keyspace, Store};
use crate::error::{Error, Result};
use crate::options::Options;
use crate::stats::{CompactionReport, Stats};
use crate::ttl::DefaultTtl;

const SYSTEM_KEYSPACE: &str = "__containers";

pub(crate) fn keyspace_name(id: &str) -> String {
    format!("c:{id}")
}

/// The keyspace of a container's change feed history (all-versions-and-deletes mode,
/// `feed/history.rs`); it exists while the container has a change feed retention.
pub(crate) fn history_keyspace_name(id: &str) -> String {
    format!("__feed:{id}")
}

/// A database of containers holding JSON items, with Cosmos DB TTL semantics.
///
/// ```
/// use ebbdb::{Database, Options, ContainerProperties, DefaultTtl};
/// use ebbdb::clock::ManualClock;
/// use serde_json::json;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let clock = ManualClock::at_unix_secs(1_700_000_000);
/// let db = Database::open_with(dir.path(), Options::default().clock(clock.clone()))?;
/// let orders = db.create_container(
///     ContainerProperties::new("orders", "/customerId").with_default_ttl(DefaultTtl::Seconds(90 * 86_400)))?;
/// orders.create_item(&json!({"id": "SO05", "customerId": "C1", "ttl": 30}))?;
/// clock.advance(Duration::from_secs(30));
/// assert_eq!(orders.read_item::<serde_json::Value>("C1", "SO05").unwrap_err().status_code(), 404);
/// # Ok::<(), ebbdb::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Database {
    store: Store,
    system: Keyspace,
    max_item_size: usize,
    /// Serialises catalogue changes (see the module note).
    catalog: Arc<Mutex<()>>,
    /// Wakes change-feed iterators after document-layer writes (`feed.rs`).
    changes: Arc<super::feed::ChangeSignal>,
    /// Per container id, the history of its all-versions change feed, shared by every handle
    /// of that container so that turning retention on or off reaches handles opened before.
    histories: Arc<Mutex<HashMap<String, HistorySlot>>>,
    /// The containers' secondary indexes (`doc/index/`), built when a container is first
    /// opened in this process.
    indexes: Arc<super::index::Registry>,
}

impl Database {
    /// Opens (creating if needed) the database in `dir` with default options.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, Options::default())
    }

    /// Opens (creating if needed) the database in `dir`.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(dir: impl AsRef<Path>, opts: Options) -> Result<Self> {
        let max_item_size = opts.max_item_size;
        let store = Store::open_with(dir, opts)?;
        let system = store.keyspace_or_create_internal(SYSTEM_KEYSPACE, DefaultTtl::Off)?;
        Ok(Self {
            store,
            system,
            max_item_size,
            catalog: Arc::new(Mutex::new(())),
            changes: Arc::default(),
            histories: Arc::default(),
            indexes: Arc::default(),
        })
    }

    /// The engine underneath.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Creates a container.
    ///
    /// Concurrent creates of one id are serialised: exactly one succeeds, the others get 409.
    ///
    /// # Errors
    /// 400 for invalid properties (messages in `docs/contract.md` §3), 409 if it exists, I/O
    /// errors.
    pub fn create_container(&self, props: ContainerProperties) -> Result<Container> {
        props.validate()?;
        let _catalog = self.catalog.lock();
        if self.system.contains_key(props.id.as_bytes())? {
            return Err(Error::Conflict(format!(
                "container '{}' already exists",
                props.id
            )));
        }
        self.create_locked(props)
    }

    /// Creates a container, or opens it if one with this id exists (the Cosmos SDKs'
    /// `CreateContainerIfNotExists`). Race-free: however many threads call it at once, one
    /// creates the container and every caller gets a handle to that one.
    ///
    /// An existing container is returned as it is, with *its* properties: a different
    /// `defaultTtl` or indexing mode in `props` is ignored (use
    /// [`Database::replace_container`] to change them), as the Cosmos SDKs do. A different
    /// partition key path is an error, also as in the Cosmos SDKs (which throw an
    /// `ArgumentException`): items written by this caller would be partitioned differently
    /// than the caller expects.
    ///
    /// # Errors
    /// 400 for invalid properties or when the existing container has another partition key
    /// path; I/O errors.
    pub fn create_container_if_not_exists(&self, props: ContainerProperties) -> Result<Container> {
        props.validate()?;
        let _catalog = self.catalog.lock();
        if !self.system.contains_key(props.id.as_bytes())? {
            return self.create_locked(props);
        }
        let existing = self.container(&props.id)?;
        let path = &existing.properties().partition_key_path;
        if *path != props.partition_key_path {
            return Err(Error::BadRequest(format!(
                "The requested partition key path '{}' does not match existing container '{}' \
                 with partition key path '{path}'",
                props.partition_key_path, props.id
            )));
        }
        Ok(existing)
    }

    /// The second half of a create, under the catalogue mutex, once the id is known to be free.
    fn create_locked(&self, props: ContainerProperties) -> Result<Container> {
        let name = keyspace_name(&props.id);
        // A keyspace without a system entry is left over from an interrupted create or delete
        // (with the catalogue mutex held, no create of this id is half done in this process).
        match self.store.delete_keyspace_internal(&name) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let ks = self
            .store
            .create_keyspace_internal(&name, props.default_ttl)?;
        // A history keyspace without retention in the catalogue is a leftover too; a fresh
        // one is created before the entry that says retention is on.
        let history = self.fresh_history(&props)?;
        self.system.put(props.id.as_bytes(), stored_json(&props)?)?;
        self.histories.lock().insert(
            props.id.clone(),
            Arc::new(parking_lot::RwLock::new(history)),
        );
        self.indexes.ensure(&ks, props.indexed_paths()?)?;
        Ok(Container::new(self.clone(), props, ks))
    }

    /// Deletes any history keyspace of `props.id` and, if `props` has a retention, creates an
    /// empty one. Caller holds the catalogue mutex.
    fn fresh_history(&self, props: &ContainerProperties) -> Result<Option<History>> {
        let name = history_keyspace_name(&props.id);
        match self.store.delete_keyspace_internal(&name) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        match props.retention_secs() {
            None => Ok(None),
            Some(retention) => Ok(Some(History {
                ks: self
                    .store
                    .create_keyspace_internal(&name, DefaultTtl::NeverExpire)?,
                retention,
            })),
        }
    }

    /// The history slot shared by every handle of container `props.id`, loaded on first use.
    pub(crate) fn history_slot(&self, props: &ContainerProperties) -> HistorySlot {
        let mut map = self.histories.lock();
        Arc::clone(map.entry(props.id.clone()).or_insert_with(|| {
            let history = props.retention_secs().and_then(|retention| {
                self.store
                    .keyspace(&history_keyspace_name(&props.id))
                    .ok()
                    .map(|ks| History { ks, retention })
            });
            Arc::new(parking_lot::RwLock::new(history))
        }))
    }

    /// Opens an existing container.
    ///
    /// # Errors
    /// 404 if there is none.
    pub fn container(&self, id: &str) -> Result<Container> {
        let mut props = self.properties(id)?;
        loop {
            let ks = self.container_keyspace(&props)?;
            props.default_ttl = ks.default_ttl();
            let paths = props.indexed_paths()?;
            self.indexes.ensure(&ks, paths.clone())?;
            // A `replace_container` between reading the properties and making sure of their
            // index would have had its new policy's index replaced by the old one's: read
            // them again, and make sure of the newer ones. (Not under the catalogue lock,
            // which a replace holds while it builds an index: opens would wait that long.)
            let now = self.properties(id)?;
            if now.indexed_paths()? == paths {
                return Ok(Container::new(self.clone(), props, ks));
            }
            props = now;
        }
    }

    fn properties(&self, id: &str) -> Result<ContainerProperties> {
        let bytes = self
            .system
            .get(id.as_bytes())?
            .ok_or_else(|| Error::NotFound(format!("container '{id}'")))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::corruption(
                self.store.path(),
                0,
                format!("container properties of '{id}': {e}"),
            )
        })?;
        ContainerProperties::from_json_value(&v)
    }

    fn container_keyspace(&self, props: &ContainerProperties) -> Result<Keyspace> {
        self.store
            .keyspace(&keyspace_name(&props.id))
            .map_err(|_| Error::NotFound(format!("container '{}'", props.id)))
    }

    /// Replaces a container's properties: `defaultTtl` (from this moment on, `docs/contract.md`
    /// §2 rule 6) and indexing mode. The partition key path cannot change.
    ///
    /// # Errors
    /// 400 for invalid properties or a changed partition key path, 404 if it does not exist.
    pub fn replace_container(&self, props: ContainerProperties) -> Result<Container> {
        props.validate()?;
        let _catalog = self.catalog.lock();
        let old = self.properties(&props.id)?;
        if old.partition_key_path != props.partition_key_path {
            return Err(Error::BadRequest(format!(
                "the partition key path of container '{}' cannot change (from '{}' to '{}')",
                props.id, old.partition_key_path, props.partition_key_path
            )));
        }
        let ks = self.container_keyspace(&props)?;
        if ks.default_ttl() != props.default_ttl {
            ks.set_default_ttl(props.default_ttl)?;
            // A default-TTL change can expire items at once: wake change-feed iterators.
            self.notify_change();
        }
        if old.change_feed_retention_minutes != props.change_feed_retention_minutes {
            // No item write of this container runs while its slot is write-locked.
            let slot = self.history_slot(&old);
            let mut history = slot.write();
            match (history.as_mut(), props.retention_secs()) {
                (Some(h), Some(retention)) => {
                    self.system.put(props.id.as_bytes(), stored_json(&props)?)?;
                    h.retention = retention;
                }
                (None, Some(_)) => {
                    // Keyspace first, then the entry: a crash in between leaves a leftover.
                    let fresh = self.fresh_history(&props)?;
                    self.system.put(props.id.as_bytes(), stored_json(&props)?)?;
                    *history = fresh;
                }
                (_, None) => {
                    // Entry first, then the keyspace: a crash in between leaves a leftover.
                    self.system.put(props.id.as_bytes(), stored_json(&props)?)?;
                    *history = None;
                    match self
                        .store
                        .delete_keyspace_internal(&history_keyspace_name(&props.id))
                    {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        } else {
            self.system.put(props.id.as_bytes(), stored_json(&props)?)?;
        }
        self.indexes.ensure(&ks, props.indexed_paths()?)?;
        Ok(Container::new(self.clone(), props, ks))
    }

    /// Deletes a container; its items become garbage for compaction.
    ///
    /// # Errors
    /// 404 if it does not exist.
    pub fn delete_container(&self, id: &str) -> Result<()> {
        let _catalog = self.catalog.lock();
        if let Ok(ks) = self.store.keyspace(&keyspace_name(id)) {
            self.indexes.remove(ks.core().id);
        }
        if !self.system.delete(id.as_bytes())? {
            return Err(Error::NotFound(format!("container '{id}'")));
        }
        if let Some(slot) = self.histories.lock().remove(id) {
            *slot.write() = None;
        }
        for name in [keyspace_name(id), history_keyspace_name(id)] {
            match self.store.delete_keyspace_internal(&name) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Properties of every container, sorted by id.
    ///
    /// # Errors
    /// I/O or corruption errors reading the catalogue.
    pub fn containers(&self) -> Result<Vec<ContainerProperties>> {
        let mut out = Vec::new();
        for entry in self.system.iter() {
            let (id, _) = entry?;
            let id = String::from_utf8_lossy(&id).into_owned();
            let mut props = self.properties(&id)?;
            if let Ok(ks) = self.container_keyspace(&props) {
                props.default_ttl = ks.default_ttl();
            }
            out.push(props);
        }
        Ok(out)
    }

    /// Runs the compaction policy now. See [`Store::compact`].
    ///
    /// # Errors
    /// As [`Store::compact`].
    pub fn compact(&self) -> Result<CompactionReport> {
        self.store.compact()
    }

    /// Merges every segment now. See [`Store::compact_full`].
    ///
    /// # Errors
    /// As [`Store::compact_full`].
    pub fn compact_full(&self) -> Result<CompactionReport> {
        self.store.compact_full()
    }

    /// Statistics of the underlying store.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.store.stats()
    }

    /// Runs expiry now. See [`Store::maintain`].
    ///
    /// # Errors
    /// As [`Store::maintain`].
    pub fn maintain(&self) -> Result<usize> {
        let n = self.store.maintain()?;
        // Expired items are gone from the key directory now: their index entries go too.
        self.indexes.sweep_all();
        Ok(n)
    }

    /// The containers' secondary indexes.
    pub(crate) fn indexes(&self) -> &super::index::Registry {
        &self.indexes
    }

    /// Test hook: while paused, writers do not wake the indexer thread, so queued index
    /// changes wait for a reader (or for a writer past the queue's bound) to apply them.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn pause_indexer(&self, paused: bool) {
        self.indexes
            .paused
            .store(paused, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn max_item_size(&self) -> usize {
        self.max_item_size
    }

    /// The signal change-feed iterators wait on.
    pub(crate) fn change_signal(&self) -> Arc<super::feed::ChangeSignal> {
        Arc::clone(&self.changes)
    }

    /// Wakes change-feed iterators: called after every document-layer write.
    pub(crate) fn notify_change(&self) {
        self.changes.notify();
    }
}

/// The system entry: the properties without `defaultTtl` (the keyspace holds it).
fn stored_json(props: &ContainerProperties) -> Result<Vec<u8>> {
    let mut p = props.clone();
    p.default_ttl = DefaultTtl::Off;
    serde_json::to_vec(&p.to_json_value()).map_err(|e| Error::BadRequest(e.to_string()))
}
