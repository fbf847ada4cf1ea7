//! The write path: appends, keydir updates, rotation, keyspace changes.
//!
//! A write runs in three steps under the log mutex: decide (is there a live older version? a
//! delete of a missing key writes nothing), encode and append to the active buffer, apply to
//! the key directory. The keydir is updated under the same mutex that orders the log, so the
//! keydir and the log agree on which version is newest. The fsync (SyncPolicy::Always) happens
//! after the mutex is released, shared with concurrent writers.

use std::collections::btree_map::Entry as Entry_;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::read::SegRef;
use super::{Inner, LogState};
use crate::error::{Error, IoContext, Result};
use crate::expiry::worker::Message;
use crate::expiry::Timer;
use crate::format::record::{self, Kind, Meta, FLAG_IN_BATCH, FLAG_SHADOWS};
use crate::keydir::{Entry, Key, KeyspaceCore, KeyspaceState, WriteSecs};
use crate::log::active::ActiveWriter;
use crate::log::manifest::{KeyspaceMeta, StoreError};
use crate::log::segment::Segment;
use crate::options::{SyncPolicy, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::stats::SegStats;
use crate::ttl::{self, DefaultTtl, ItemTtl, TtlChange};

/// One write of a batch or a single call.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub(crate) ks: Arc<KeyspaceCore>,
    pub(crate) key: Vec<u8>,
    /// `Some((value, ttl))` for a put, `None` for a delete.
    pub(crate) put: Option<(Vec<u8>, ItemTtl)>,
}

pub(crate) fn check_key_value(key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::BadRequest(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_SIZE} bytes",
            key.len()
        )));
    }
    if value.len() > MAX_VALUE_SIZE {
        return Err(Error::TooLarge(format!(
            "value of {} bytes exceeds the limit of {MAX_VALUE_SIZE} bytes",
            value.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_ttl(ttl: ItemTtl) -> Result<()> {
    match ttl {
        ItemTtl::Seconds(n) if n == 0 || n > ttl::MAX_TTL_SECS => {
            Err(ttl::invalid_ttl("ttl", &n.to_string()))
        }
        _ => Ok(()),
    }
}

/// Checks what every keyspace name must satisfy, reserved or not: non-empty and at most
/// [`super::MAX_KEYSPACE_NAME_BYTES`] (so the manifest listing it stays loadable).
pub(crate) fn check_keyspace_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::BadRequest("keyspace name must not be empty".into()));
    }
    if name.len() > super::MAX_KEYSPACE_NAME_BYTES {
        return Err(Error::BadRequest(format!(
            "keyspace name is {} bytes long; the maximum is {} bytes",
            name.len(),
            super::MAX_KEYSPACE_NAME_BYTES
        )));
    }
    Ok(())
}

fn check_default(default: DefaultTtl) -> Result<()> {
    if default.is_valid() {
        Ok(())
    } else {
        let v = default.to_json_value().unwrap_or(0);
        Err(ttl::invalid_ttl("defaultTtl", &v.to_string()))
    }
}

/// The id after `id`, refusing to go past what `open` accepts (a store at the limit refuses the
/// operation but stays openable).
pub(crate) fn next_id(id: u32) -> Result<u32> {
    id.checked_add(1)
        .filter(|&n| n <= super::recovery::MAX_FILE_ID)
        .ok_or_else(|| Error::TooLarge("file or keyspace ids exhausted".into()))
}

/// Refuses a write at a second the key directory cannot hold ([`WriteSecs::MAX`], the year
/// 36812), before anything is written, rather than storing a wrong `_ts`.
fn check_write_second(now: u64) -> Result<()> {
    if now > WriteSecs::MAX {
        return Err(Error::BadRequest(format!(
            "the clock reads {now} s since the Unix epoch; write times up to {} s (year 36812) \
             can be stored",
            WriteSecs::MAX
        )));
    }
    Ok(())
}

/// What a write did to each op: whether a live version existed before it.
pub(crate) type Existed = Vec<bool>;

/// The live version of a key as seen by a compare-and-write check, under the log mutex. The
/// value is read only if the check asks for it.
pub(crate) struct Current<'a> {
    inner: &'a Inner,
    log: &'a LogState,
    key: &'a [u8],
    found: Option<(Entry, SegRef)>,
}

impl Current<'_> {
    /// True if the key has a live version.
    pub(crate) fn exists(&self) -> bool {
        self.found.is_some()
    }

    /// The live value, if any.
    pub(crate) fn value(&self) -> Result<Option<Vec<u8>>> {
        match &self.found {
            Some((e, seg)) => self
                .inner
                .read_value_locked(self.log, seg, e, self.key)
                .map(Some),
            None => Ok(None),
        }
    }
}

impl Inner {
    /// Applies `ops` (a batch when `atomic`), returning for each whether the key was live before.
    pub(crate) fn apply(&self, ops: &[Op], atomic: bool) -> Result<Existed> {
        self.apply_checked(ops, atomic, None::<fn(&Current<'_>) -> Result<()>>)
    }

    /// As [`Inner::apply`], but first calls `check` with the first op's live version (if any)
    /// under the log mutex, so a caller can compare-and-write atomically.
    ///
    /// Each op is decided and applied with one descent of the key directory (`BTreeMap::entry`):
    /// whether a live version exists (the SHADOWS bit) and the replacement happen on the same
    /// entry, under the log mutex that also orders the records. Later ops of a batch therefore
    /// see earlier ones. A lone delete of a key that is not live writes nothing; inside a batch
    /// such a delete still writes its (harmless) tombstone, so the batch header can be written
    /// before the members.
    pub(crate) fn apply_checked(
        &self,
        ops: &[Op],
        atomic: bool,
        check: Option<impl FnOnce(&Current<'_>) -> Result<()>>,
    ) -> Result<Existed> {
        for op in ops {
            if op.ks.dropped.load(Ordering::Acquire) {
                return Err(Error::NotFound(format!("keyspace '{}'", op.ks.name)));
            }
            let value = op.put.as_ref().map_or(&[][..], |(v, _)| v.as_slice());
            check_key_value(&op.key, value)?;
            if let Some((_, ttl)) = &op.put {
                check_ttl(*ttl)?;
            }
        }
        self.check_writable()?;
        let now_ms = self.now_ms();
        let now = now_ms / 1000;
        check_write_second(now)?;
        let mut timers = Vec::new();
        let (existed, pos) = {
            let mut log = self.log.lock();
            self.check_writable()?;
            if let (Some(check), Some(first)) = (check, ops.first()) {
                let found = {
                    let st = first.ks.state.read();
                    self.lookup(&st, &first.key, now)
                };
                check(&Current {
                    inner: self,
                    log: &log,
                    key: &first.key,
                    found,
                })?;
            }
            if let [op] = ops {
                if op.put.is_none() && op.ks.state.read().live(&op.key, now).is_none() {
                    return Ok(vec![false]);
                }
            }
            if ops.is_empty() {
                return Ok(Vec::new());
            }
            let batch = atomic && ops.len() > 1;
            // Never take a counter past what `open` accepts: a store at the limit refuses writes
            // but stays openable.
            if log.next_seq.saturating_add(ops.len() as u64 + 1) > super::recovery::MAX_SEQ {
                return Err(Error::TooLarge("sequence numbers exhausted".into()));
            }
            let header_len = record::encoded_len(0, 4);
            let total = usize::from(batch) * header_len
                + ops
                    .iter()
                    .map(|op| {
                        record::encoded_len(
                            op.key.len(),
                            op.put.as_ref().map_or(0, |(v, _)| v.len()),
                        )
                    })
                    .sum::<usize>();
            self.make_room(&mut log, total as u64)?;
            let log = &mut *log;
            let file = log.active.id();
            let mut seq = log.next_seq;
            let mut added = SegStats {
                total: total as u64,
                ..SegStats::default()
            };
            let mut dead: Vec<(u32, u64)> = Vec::new();
            let mut existed = Vec::with_capacity(ops.len());
            if batch {
                let header = Meta {
                    kind: Kind::BatchHeader,
                    flags: 0,
                    keyspace: 0,
                    ttl: ItemTtl::Inherit,
                    seq,
                    write_ms: now_ms,
                };
                let n = u32::try_from(ops.len()).unwrap_or(u32::MAX);
                log.active
                    .append_with(|buf| record::encode(buf, &header, &[], &n.to_le_bytes()));
                added.dead += header_len as u64;
                seq += 1;
            }
            for op in ops {
                let mut st = op.ks.state.write();
                let KeyspaceState { map, history } = &mut *st;
                let slot = map.entry(Key::from_slice(&op.key));
                let live = match &slot {
                    Entry_::Occupied(o) => {
                        let e = o.get();
                        !ttl::is_expired(ttl::expires_at(e.ts.get(), e.own_ttl(), history), now)
                    }
                    Entry_::Vacant(_) => false,
                };
                existed.push(live);
                let (kind, value, own) = match &op.put {
                    Some((v, t)) => (Kind::Put, v.as_slice(), *t),
                    None => (Kind::Tombstone, &[][..], ItemTtl::Inherit),
                };
                let mut flags = if live { FLAG_SHADOWS } else { 0 };
                if batch {
                    flags |= FLAG_IN_BATCH;
                }
                let meta = Meta {
                    kind,
                    flags,
                    keyspace: op.ks.id,
                    ttl: own,
                    seq,
                    write_ms: now_ms,
                };
                let len = record::encoded_len(op.key.len(), value.len());
                let at = log
                    .active
                    .append_with(|buf| record::encode(buf, &meta, &op.key, value));
                if live || kind == Kind::Tombstone {
                    added.shadowing += 1;
                }
                let old = if kind == Kind::Put {
                    let entry = Entry {
                        seq,
                        file,
                        offset: u32::try_from(at).unwrap_or(u32::MAX),
                        len: u32::try_from(len).unwrap_or(u32::MAX),
                        ts: WriteSecs::saturating(meta.ts()),
                        ttl: own.to_wire(),
                        flags,
                    };
                    let deadline = ttl::expires_at(entry.ts.get(), own, history);
                    if deadline != ttl::NEVER {
                        timers.push((
                            deadline,
                            Timer {
                                keyspace: op.ks.id,
                                key: op.key.as_slice().into(),
                                seq,
                            },
                        ));
                    }
                    match slot {
                        Entry_::Occupied(mut o) => Some(o.insert(entry)),
                        Entry_::Vacant(v) => {
                            v.insert(entry);
                            None
                        }
                    }
                } else {
                    added.dead += len as u64;
                    match slot {
                        Entry_::Occupied(o) => Some(o.remove()),
                        Entry_::Vacant(_) => None,
                    }
                };
                if let Some(old) = old {
                    dead.push((old.file, u64::from(old.len)));
                }
                seq += 1;
            }
            log.next_seq = seq;
            log.appended += total as u64;
            log.segstats.entry(file).or_default().add(&added);
            for (f, bytes) in dead {
                if let Some(s) = log.segstats.get_mut(&f) {
                    s.dead += bytes;
                }
            }
            if !matches!(self.opts.sync, SyncPolicy::Always) && log.active.wants_flush() {
                if let Err(e) = log.active.flush() {
                    self.poison();
                    return Err(e.into());
                }
            }
            (existed, log.appended)
        };
        if !timers.is_empty() {
            let mut ex = self.expiry.lock();
            for (deadline, t) in timers {
                ex.wheel.insert(deadline, t);
            }
        }
        if matches!(self.opts.sync, SyncPolicy::Always) {
            self.sync_to(pos)?;
        }
        Ok(existed)
    }

    /// Rotates the active segment if `incoming` more bytes would overflow it.
    fn make_room(&self, log: &mut LogState, incoming: u64) -> Result<()> {
        if !log.active.is_empty() && log.active.len() + incoming > self.opts.segment_size {
            self.rotate(log)?;
        }
        if log.active.len() + incoming > u64::from(u32::MAX) {
            return Err(Error::TooLarge("write does not fit in a segment".into()));
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one (caller holds the log mutex).
    pub(crate) fn rotate(&self, log: &mut LogState) -> Result<()> {
        let sealed_id = log.active.id();
        let seal = (|| -> Result<Arc<Segment>> {
            let path = crate::log::segment_path(&self.dir, sealed_id);
            log.active.flush().at(&path)?;
            log.active.trim_and_sync().at(&path)?;
            Ok(Arc::new(Segment::open(&self.dir, sealed_id)?))
        })();
        let segment = match seal {
            Ok(s) => s,
            Err(e) => {
                self.poison();
                return Err(e);
            }
        };
        let new_id = log.manifest.next_file_id;
        let fresh = ActiveWriter::create(&self.dir, new_id, log.next_seq, self.opts.segment_size)
            .at(crate::log::segment_path(&self.dir, new_id))?;
        let mut manifest = log.manifest.clone();
        manifest.next_file_id = next_id(new_id)?;
        manifest.next_seq = log.next_seq;
        manifest.sealed.push(sealed_id);
        manifest.active = Some(new_id);
        // The new file is not removed on failure: if the rename went through before the error,
        // the manifest on disk already names it. The store is poisoned instead.
        self.store_manifest(&manifest)?;
        log.manifest = manifest;
        log.segstats.entry(new_id).or_default();
        {
            let mut set = self.segments.write();
            set.sealed.insert(sealed_id, segment);
            set.active = Arc::clone(&fresh.shared);
        }
        log.active = fresh;
        self.send(Message::WriteHint(sealed_id));
        Ok(())
    }

    /// Replaces the manifest for a rotation or a merge, which change files before it: any
    /// failure poisons the store (every later write fails), and reopening reads whichever
    /// manifest is on disk, both of which are consistent with the files.
    pub(crate) fn store_manifest(&self, manifest: &crate::log::manifest::Manifest) -> Result<()> {
        manifest.store(&self.dir).map_err(|e| {
            self.poison();
            e.into()
        })
    }

    /// Replaces the manifest for a catalogue change (create or delete a keyspace, change a
    /// default TTL), whose in-memory state is applied only after this returns `Ok`. A failure
    /// before the rename changed nothing, on disk or in memory: the error is returned and the
    /// store stays writable. Only a failure after the rename (the directory fsync) poisons.
    fn store_catalog_manifest(&self, manifest: &crate::log::manifest::Manifest) -> Result<()> {
        match manifest.store(&self.dir) {
            Ok(()) => Ok(()),
            Err(StoreError::Unchanged(e)) => Err(e),
            Err(StoreError::Uncertain(e)) => {
                self.poison();
                Err(e)
            }
        }
    }

    pub(crate) fn rotate_if_nonempty(&self) -> Result<()> {
        self.check_writable()?;
        let mut log = self.log.lock();
        if log.active.is_empty() {
            return Ok(());
        }
        self.rotate(&mut log)
    }

    pub(crate) fn create_keyspace(
        &self,
        name: &str,
        default: DefaultTtl,
    ) -> Result<Arc<KeyspaceCore>> {
        check_keyspace_name(name)?;
        check_default(default)?;
        self.check_writable()?;
        let now = self.now_s();
        let mut log = self.log.lock();
        if self.catalog.read().by_name.contains_key(name) {
            return Err(Error::Conflict(format!("keyspace '{name}' already exists")));
        }
        let id = log.manifest.next_keyspace_id;
        let history = vec![TtlChange {
            since: now,
            default,
        }];
        let mut manifest = log.manifest.clone();
        manifest.next_keyspace_id = next_id(id)?;
        manifest.next_seq = log.next_seq;
        manifest.keyspaces.push(KeyspaceMeta {
            id,
            name: name.to_string(),
            history: history.clone(),
        });
        self.store_catalog_manifest(&manifest)?;
        log.manifest = manifest;
        let core = Arc::new(KeyspaceCore {
            id,
            name: name.to_string(),
            state: parking_lot::RwLock::new(KeyspaceState {
                history,
                ..KeyspaceState::default()
            }),
            dropped: false.into(),
        });
        let mut cat = self.catalog.write();
        cat.by_name.insert(name.to_string(), Arc::clone(&core));
        cat.by_id.insert(id, Arc::clone(&core));
        Ok(core)
    }

    pub(crate) fn delete_keyspace(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let mut log = self.log.lock();
        let core = self.keyspace_by_name(name)?;
        let mut manifest = log.manifest.clone();
        manifest.keyspaces.retain(|k| k.id != core.id);
        manifest.next_seq = log.next_seq;
        self.store_catalog_manifest(&manifest)?;
        log.manifest = manifest;
        core.dropped.store(true, Ordering::Release);
        {
            let mut cat = self.catalog.write();
            cat.by_name.remove(name);
            cat.by_id.remove(&core.id);
        }
        let map = std::mem::take(&mut core.state.write().map);
        for e in map.values() {
            if let Some(s) = log.segstats.get_mut(&e.file) {
                s.dead += u64::from(e.len);
            }
        }
        Ok(())
    }

    /// Changes a keyspace's default TTL from now on, durably, and re-times inheriting items.
    pub(crate) fn set_default_ttl(
        &self,
        ks: &Arc<KeyspaceCore>,
        default: DefaultTtl,
    ) -> Result<()> {
        check_default(default)?;
        self.check_writable()?;
        if ks.dropped.load(Ordering::Acquire) {
            return Err(Error::NotFound(format!("keyspace '{}'", ks.name)));
        }
        let now = self.now_s();
        let mut log = self.log.lock();
        let mut history = ks.state.read().history.clone();
        history.push(TtlChange {
            since: now,
            default,
        });
        let mut manifest = log.manifest.clone();
        if let Some(m) = manifest.keyspaces.iter_mut().find(|m| m.id == ks.id) {
            m.history.clone_from(&history);
        }
        manifest.next_seq = log.next_seq;
        self.store_catalog_manifest(&manifest)?;
        log.manifest = manifest;
        let mut st = ks.state.write();
        let before = std::mem::replace(&mut st.history, history);
        // Re-time: schedule every item whose deadline moved earlier. Timers that fire early
        // (deadline moved later) are re-armed by the reaper; timers of items that can no longer
        // expire are dropped when they fire. See DESIGN.md "Re-timing".
        let mut timers = Vec::new();
        for (key, e) in &st.map {
            if e.own_ttl() == ItemTtl::Never {
                continue;
            }
            let deadline = st.expires_at(e);
            let earlier = ttl::expires_at(e.ts.get(), e.own_ttl(), &before);
            if deadline != ttl::NEVER && deadline < earlier {
                timers.push((deadline, Box::<[u8]>::from(key.as_slice()), e.seq));
            }
        }
        drop(st);
        drop(log);
        let mut ex = self.expiry.lock();
        for (deadline, key, seq) in timers {
            ex.wheel.insert(
                deadline,
                Timer {
                    keyspace: ks.id,
                    key,
                    seq,
                },
            );
        }
        Ok(())
    }
}
