//! The write path: appends, keydir updates, rotation, keyspace changes.
//!
//! A write runs in three steps under the log mutex: decide (is there a live older version? a
//! delete of a missing key writes nothing), encode and append to the active buffer, apply to
//! the key directory. The keydir is updated under the same mutex that orders the log, so the
//! keydir and the log agree on which version is newest. The fsync (SyncPolicy::Always) happens
//! after the mutex is released, shared with concurrent writers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::{MutexGuard, RwLockWriteGuard};

use super::read::SegRef;
use super::{Inner, LogState};
use crate::error::{Error, Result};
use crate::expiry::worker::Message;
use crate::expiry::Timer;
use crate::format::record::{self, Kind, Meta, FLAG_DOC, FLAG_IN_BATCH, FLAG_SHADOWS};
use crate::keydir::{Entry, Key, KeyspaceCore, KeyspaceState, Slot, WriteSecs};
use crate::log::manifest::{KeyspaceMeta, StoreError};
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
    /// The put's value is a document item from the document layer (record flag `DOC`).
    pub(crate) doc: bool,
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

/// The checks every op passes before it is applied: its keyspace still exists, key and value
/// within the limits, a valid own TTL.
fn check_ops(ops: &[Op]) -> Result<()> {
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

/// The write guards of one write's keyspaces (inline for the usual one or two: no allocation
/// per write).
type Guards<'a> = smallvec::SmallVec<[(u32, RwLockWriteGuard<'a, KeyspaceState>); 2]>;

/// Ops of a write whose key-directory entries are asked for together ([`KeyMap::prefetch`]).
///
/// [`KeyMap::prefetch`]: crate::keydir::KeyMap::prefetch
const PREFETCH_OPS: usize = 1024;

/// Pacing delays are slept once a millisecond is owed (shorter sleeps overshoot by a large
/// share of themselves), and at most this much per write call, so no single call waits
/// long.
const PACE_SLEEP_MIN_NS: u64 = 1_000_000;
const PACE_SLEEP_MAX_NS: u64 = 5_000_000;

thread_local! {
    /// Pacing delay this thread owes and has not slept yet ([`Inner::pace`]): each writer
    /// waits for its own writes, so several writers are paced as one is. Kept per thread, not
    /// per store: a thread that writes to two stores pays one's debt at its next write to
    /// either, which changes how long it waits in all, not for what.
    static PACE_OWED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Write-locks the state of every keyspace `ops` touch, in id order.
fn lock_keyspaces(ops: &[Op]) -> Guards<'_> {
    let mut cores: smallvec::SmallVec<[&Arc<KeyspaceCore>; 2]> =
        ops.iter().map(|op| &op.ks).collect();
    cores.sort_by_key(|c| c.id);
    cores.dedup_by_key(|c| c.id);
    cores.into_iter().map(|c| (c.id, c.state.write())).collect()
}

/// An expired version a write replaces before the reaper got to it: keyspace, key, the
/// second it expired, and its record's file and length.
type SupersededExpired = (Arc<KeyspaceCore>, Vec<u8>, u64, u32, u64);

/// What a write did to each op: whether a live version existed before it.
pub(crate) type Existed = Vec<bool>;

/// The live version of a key as seen by a compare-and-write check, under the log mutex. The
/// value is read only if the check asks for it.
pub(crate) struct Current<'a> {
    pub(super) inner: &'a Inner,
    pub(super) key: &'a [u8],
    pub(super) found: Option<(Entry, SegRef)>,
}

impl Current<'_> {
    /// True if the key has a live version.
    pub(crate) fn exists(&self) -> bool {
        self.found.is_some()
    }

    /// The live value, if any.
    pub(crate) fn value(&self) -> Result<Option<Vec<u8>>> {
        match &self.found {
            Some((e, seg)) => self.inner.read_value(seg, e, self.key).map(Some),
            None => Ok(None),
        }
    }
}

impl Inner {
    /// For every keyspace with an open scan, records the version each key of the batch has
    /// before it (`scans.rs`). Caller holds the log mutex and the keyspaces' write locks.
    fn record_before_images(
        &self,
        ops: &[Op],
        guards: &[(u32, RwLockWriteGuard<'_, KeyspaceState>)],
        batch_seq: u64,
        now: u64,
    ) -> Result<()> {
        for op in ops {
            let mut scans = op.ks.scans.lock();
            if !scans.any_open() || scans.has(batch_seq, &op.key) {
                continue;
            }
            let Some((_, st)) = guards.iter().find(|(id, _)| *id == op.ks.id) else {
                continue;
            };
            let image = match st.get(op.key.as_slice()) {
                None => None,
                Some(e) => {
                    let read = self
                        .locate(e)
                        .ok_or_else(|| {
                            Error::corruption(
                                crate::log::segment_path(&self.dir, e.file),
                                u64::from(e.offset),
                                "segment of a key-directory entry is not published",
                            )
                        })
                        .and_then(|seg| self.read_value(&seg, e, &op.key));
                    match read {
                        Ok(value) => Some((*e, value)),
                        // Expired at this batch's `now` (so at every later scan `now` too): a
                        // merge may already have dropped its record while the key directory
                        // still names it. A scan that started earlier could have seen it live;
                        // it sees the key as absent instead, never a wrong value. Also expired
                        // if a later `now` finds it so: a segment that died whole is dropped
                        // before the reaper frees its keys (DESIGN §7), possibly after this
                        // batch took its instant.
                        Err(_) if !st.is_live(e, now.max(self.now_s())) => None,
                        Err(err) => return Err(err),
                    }
                }
            };
            scans.record(batch_seq, &op.key, image);
        }
        Ok(())
    }

    /// Applies `ops` (a batch when `atomic`), returning for each whether the key was live before.
    pub(crate) fn apply(&self, ops: &[Op], atomic: bool) -> Result<Existed> {
        self.apply_checked(ops, atomic, None::<fn(&Current<'_>) -> Result<()>>, None)
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
        at_ms: Option<u64>,
    ) -> Result<Existed> {
        check_ops(ops)?;
        self.apply_planned(atomic, at_ms, |view| {
            if let (Some(check), Some(first)) = (check, ops.first()) {
                check(&view.current(&first.ks, &first.key))?;
            }
            Ok(std::borrow::Cow::Borrowed(ops))
        })
    }

    /// The write path proper. `plan` runs under the log mutex, sees live versions through its
    /// [`View`](super::planned::View) (nothing else can write meanwhile) and returns the ops to
    /// apply, so a read-modify-write is atomic (`engine/planned.rs`). `apply_checked` is the
    /// special case of ops fixed in advance with a check of the first op's live version.
    pub(crate) fn apply_planned<'o>(
        &self,
        atomic: bool,
        at_ms: Option<u64>,
        plan: impl FnOnce(&super::planned::View<'_>) -> Result<std::borrow::Cow<'o, [Op]>>,
    ) -> Result<Existed> {
        self.check_writable()?;
        // A slab page a map may need for this write's inserts is made before any lock: here
        // if none is kept, else by the sync thread (DESIGN.md §3.1, "Huge slab pages"); with
        // no sync thread to ask, one spare at a time is made here, as before there was one.
        if crate::keydir::stock_spare_page() && !self.send(Message::StockPages) {
            crate::keydir::spare_page_request_lost();
        }
        // The write's instant: taken here, or by a caller that already stamped it into the
        // value (the document layer's `_ts`/`_etag`), so the record header and the value agree.
        // Either way it comes from `now_ms()`, so it never precedes a time already handed out.
        let now_ms = match at_ms {
            Some(t) => t,
            None => self.now_ms(),
        };
        let now = now_ms / 1000;
        check_write_second(now)?;
        // Expiry events of versions this write replaced before the reaper got to them.
        let mut events: Vec<crate::expiry::ExpiryEvent> = Vec::new();
        let (existed, pos, appended) = {
            let mut log = self.log.lock();
            let appended_from = log.appended;
            self.check_writable()?;
            let planned = plan(&super::planned::View::new(self, now_ms, log.next_seq))?;
            let ops: &[Op] = &planned;
            // Again under the log mutex, which `delete_keyspace` holds while it drops a
            // keyspace: a write racing the delete either lands before it or fails with 404, and
            // never puts entries into (or arms timers for) a dropped keyspace.
            check_ops(ops)?;
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
            // Record lengths depend on the header fields (varints), all known here but the
            // SHADOWS flag, which lives in the tag byte and changes no length.
            let header_meta = Meta {
                kind: Kind::BatchHeader,
                flags: 0,
                keyspace: 0,
                ttl: ItemTtl::Inherit,
                seq: log.next_seq,
                write_ms: now_ms,
            };
            let header_len = record::encoded_len(&header_meta, 0, 4);
            let first = log.next_seq + u64::from(batch);
            let total = usize::from(batch) * header_len
                + ops
                    .iter()
                    .zip(first..)
                    .map(|(op, seq)| {
                        let (kind, value_len, ttl) = match &op.put {
                            Some((v, t)) => (Kind::Put, v.len(), *t),
                            None => (Kind::Tombstone, 0, ItemTtl::Inherit),
                        };
                        let meta = Meta {
                            kind,
                            flags: 0,
                            keyspace: op.ks.id,
                            ttl,
                            seq,
                            write_ms: now_ms,
                        };
                        record::encoded_len(&meta, op.key.len(), value_len)
                    })
                    .sum::<usize>();
            self.make_room(&mut log, total as u64)?;
            let log = &mut *log;
            let file = log.active.id();
            let start_len = log.active.len();
            let mut seq = log.next_seq;
            let mut added = SegStats {
                total: total as u64,
                hint_bytes: ops
                    .iter()
                    .map(|op| op.key.len() as u64 + crate::compaction::policy::HINT_ENTRY_BYTES)
                    .sum(),
                ttl_epoch: self.ttl_epoch.load(Ordering::Acquire),
                ..SegStats::default()
            };
            let mut dead: Vec<(u32, u64)> = Vec::new();
            let mut existed = Vec::with_capacity(ops.len());
            // Every keyspace the ops touch stays write-locked until all of them are applied
            // (taken in id order; readers take one at a time), so a reader sees all of a
            // batch or none of it.
            let mut guards = lock_keyspaces(ops);
            let mut superseded_expired: Vec<SupersededExpired> = Vec::new();
            // A key left a key directory: its room is given back (`KeyMap::trim`).
            let mut removed = false;
            // The expiry timers, locked on first use (a leaf lock: taken after the keyspaces').
            let mut expiry: Option<parking_lot::MutexGuard<'_, super::ExpiryState>> = None;
            if batch {
                // Open scans must not see half of this batch either: record before-images
                // first, so a failed value read refuses the batch before anything is appended.
                self.record_before_images(ops, &guards, seq, now)?;
            }
            if batch {
                let header = header_meta;
                let n = u32::try_from(ops.len()).unwrap_or(u32::MAX);
                log.active
                    .append_with(|buf| record::encode(buf, &header, &[], &n.to_le_bytes()));
                added.dead += header_len as u64;
                seq += 1;
            }
            for (i, op) in ops.iter().enumerate() {
                // The entries of the next ops, and the free slots their new keys will take,
                // asked for together before they are read one by one (DESIGN.md §3.1); a
                // chunk at a time, so that what is asked for is still in cache when used.
                if ops.len() > 1 && i % PREFETCH_OPS == 0 {
                    let part = &ops[i..ops.len().min(i + PREFETCH_OPS)];
                    for (id, st) in &guards {
                        let keys = part.iter().filter(|op| op.ks.id == *id);
                        st.map.prefetch(keys.map(|op| &op.key[..]));
                    }
                }
                let Some(st) = guards
                    .iter_mut()
                    .find(|(id, _)| *id == op.ks.id)
                    .map(|(_, g)| &mut **g)
                else {
                    return Err(Error::NotFound(format!("keyspace '{}'", op.ks.name)));
                };
                let KeyspaceState {
                    map,
                    history,
                    census,
                    departures,
                    ..
                } = st;
                let slot = map.entry(Key::from_slice(&op.key));
                let live = match &slot {
                    Slot::Occupied(o) => {
                        let e = o.get();
                        let at = ttl::expires_at(e.ts.get(), e.own_ttl(), history);
                        let live = !ttl::is_expired(at, now);
                        if !live {
                            // This version expired and is replaced before the reaper got to
                            // it: it is reported here (once: its timer, if it fires later,
                            // finds the key re-armed or gone).
                            superseded_expired.push((
                                Arc::clone(&op.ks),
                                op.key.clone(),
                                at,
                                e.file,
                                u64::from(e.len),
                            ));
                        }
                        live
                    }
                    Slot::Vacant(_) => false,
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
                if op.doc && kind == Kind::Put {
                    flags |= FLAG_DOC;
                }
                let meta = Meta {
                    kind,
                    flags,
                    keyspace: op.ks.id,
                    ttl: own,
                    seq,
                    write_ms: now_ms,
                };
                let at = log
                    .active
                    .append_with(|buf| record::encode(buf, &meta, &op.key, value));
                let len = (log.active.len() - at) as usize;
                if live || kind == Kind::Tombstone {
                    added.shadowing += 1;
                }
                // The key's timer in charge: kept from the version being replaced if it does
                // not fire later than the new deadline (it fires early and is re-armed), filed
                // anew otherwise; the old one is stale then, as it is when the new version
                // cannot expire or the key is deleted.
                let old_armed = match &slot {
                    Slot::Occupied(o) => o.get().armed,
                    Slot::Vacant(_) => ttl::NEVER,
                };
                let ts = WriteSecs::saturating(meta.ts());
                let deadline = if kind == Kind::Put {
                    ttl::expires_at(ts.get(), own, history)
                } else {
                    ttl::NEVER
                };
                // Expired on arrival: the write's instant was taken before the log mutex, and
                // while it waited a reaper pass completed past this version's deadline
                // (`reaped_upto`, under the expiry lock, which is held from here on). No timer
                // armed now would be reported before that watermark frees the version at the
                // next open, so the write reports it itself and keeps it out of the key
                // directory (reads at that instant see it expired anyway).
                let arrived_expired = deadline != ttl::NEVER
                    && deadline <= expiry.get_or_insert_with(|| self.expiry.lock()).reaped_upto;
                if arrived_expired {
                    superseded_expired.push((
                        Arc::clone(&op.ks),
                        op.key.clone(),
                        deadline,
                        file,
                        len as u64,
                    ));
                }
                let old = if kind == Kind::Put && !arrived_expired {
                    added.dies_by = added.dies_by.max(deadline);
                    if crate::compaction::policy::expires_soon(deadline, now) {
                        added.soon += len as u64;
                    }
                    let armed = if deadline != ttl::NEVER && old_armed <= deadline {
                        old_armed
                    } else if deadline == ttl::NEVER && old_armed == ttl::NEVER {
                        ttl::NEVER
                    } else {
                        let ex = expiry.get_or_insert_with(|| self.expiry.lock());
                        if old_armed != ttl::NEVER {
                            ex.stale += 1;
                        }
                        if deadline != ttl::NEVER {
                            ex.timers.insert(
                                deadline,
                                Timer {
                                    keyspace: op.ks.id,
                                    key: Key::from_slice(&op.key),
                                },
                            );
                        }
                        deadline
                    };
                    let entry = Entry {
                        seq,
                        file,
                        offset: u32::try_from(at).unwrap_or(u32::MAX),
                        len: u32::try_from(len).unwrap_or(u32::MAX),
                        ts,
                        ttl: own.to_wire(),
                        flags,
                        armed,
                    };
                    census.add(&entry);
                    match slot {
                        Slot::Occupied(mut o) => Some(o.insert(entry)),
                        Slot::Vacant(v) => {
                            v.insert(entry);
                            None
                        }
                    }
                } else {
                    added.dead += len as u64;
                    if kind == Kind::Put {
                        // Expired on arrival: never named by the key directory.
                        added.replaced += len as u64;
                    }
                    if old_armed != ttl::NEVER {
                        expiry.get_or_insert_with(|| self.expiry.lock()).stale += 1;
                    }
                    // A departure also when nothing was there: a put that expired on arrival
                    // never enters the map, and what tracks keys by their writes must hear so.
                    *departures += 1;
                    match slot {
                        Slot::Occupied(o) => {
                            removed = true;
                            Some(o.remove())
                        }
                        Slot::Vacant(_) => None,
                    }
                };
                if let Some(old) = old {
                    census.remove(&old);
                    dead.push((old.file, u64::from(old.len)));
                }
                seq += 1;
            }
            drop(expiry);
            debug_assert_eq!(
                log.active.len() - start_len,
                total as u64,
                "room made for the records appended"
            );
            log.next_seq = seq;
            for (_, st) in &mut guards {
                st.applied_seq = seq;
                // A trim also goes on while it walks the index tables (a few per call).
                if removed || st.map.trimming() {
                    st.map.trim();
                }
            }
            drop(guards);
            log.appended += total as u64;
            self.appends.fetch_add(1, Ordering::AcqRel);
            log.segstats.entry(file).or_default().add(&added);
            for (f, bytes) in dead {
                if let Some(s) = log.segstats.get_mut(&f) {
                    s.dead += bytes;
                    s.replaced += bytes;
                }
            }
            if !superseded_expired.is_empty() {
                for (_, _, at, file, len) in &superseded_expired {
                    if let Some(s) = log.segstats.get_mut(file) {
                        s.note_expired(*len, *at);
                    }
                }
                self.expirations
                    .fetch_add(superseded_expired.len() as u64, Ordering::Relaxed);
                if self.has_subscribers() {
                    events = superseded_expired
                        .into_iter()
                        .map(|(ks, key, at, _, _)| crate::expiry::ExpiryEvent {
                            keyspace: ks.name.clone(),
                            key,
                            expired_at: at,
                        })
                        .collect();
                }
            }
            // This write's records are all appended: a flush may let readers take up to here.
            log.active.end_unit();
            if !matches!(self.opts.sync, SyncPolicy::Always) {
                if log.active.wants_flush() {
                    if let Err(e) = log.active.flush_whole_pages() {
                        self.poison();
                        // The write is applied in memory: its reports still go out.
                        self.publish_expirations(&events);
                        return Err(e.into());
                    }
                }
                if log.appended - log.sync_behind_asked >= super::SYNC_BEHIND_BYTES {
                    log.sync_behind_asked = log.appended;
                    self.send(Message::SyncBehind);
                }
            }
            (existed, log.appended, log.appended - appended_from)
        };
        // Published once the log mutex is let go: sending takes time and is no part of the
        // write's order (events come in no promised order, DESIGN.md §11).
        self.publish_expirations(&events);
        if matches!(self.opts.sync, SyncPolicy::Always) {
            self.sync_to(pos)?;
        }
        // If expiry has fallen behind, this write handles a share of the backlog (no lock is
        // held here): expiry keeps pace with the writers instead of piling up.
        self.assist_reaping(existed.len(), now);
        // And if merges have fallen behind, it waits its share (no lock is held here either).
        self.pace(appended);
        self.commit_if_far_behind()?;
        Ok(existed)
    }

    /// A write's pause when merges have fallen behind: while the policy's last choice on this
    /// store (the background worker's or an explicit `compact()`'s) left segments due for a
    /// merge to the next one (`Selection::deferred`) and the
    /// reclaim debt (the bytes only a merge gets back) was over `policy::PRESSURE_DEBT_PPM` of
    /// the sealed bytes, each write owes a delay in proportion to the bytes it appended and to
    /// how far the debt is over (`policy::pace_ns`). A thread sleeps what it owes once that is
    /// a millisecond or more, at most 5 ms per write call (the rest stays owed). The further
    /// writers outrun the merges, the more of the machine they leave them (DESIGN.md §7,
    /// "Pacing", for what was measured).
    fn pace(&self, appended: u64) {
        let debt = self.reclaim_debt_ppm.load(Ordering::Relaxed);
        if debt <= crate::compaction::policy::PRESSURE_DEBT_PPM {
            return;
        }
        let ns = crate::compaction::policy::pace_ns(appended, debt);
        let take = PACE_OWED_NS.with(|owed| {
            let total = owed.get().saturating_add(ns);
            let take = if total >= PACE_SLEEP_MIN_NS {
                total.min(PACE_SLEEP_MAX_NS)
            } else {
                0
            };
            owed.set(total - take);
            take
        });
        if take > 0 {
            self.paced_ns.fetch_add(take, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_nanos(take));
        }
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

    /// Replaces the manifest for a catalogue change (create or delete a keyspace, change a
    /// default TTL) or a merge's publish, whose in-memory state is applied only after this
    /// returns `Ok`. A failure before the rename changed nothing, on disk or in memory (a
    /// merge's unpublished outputs are leftovers that open removes): the error is returned and
    /// the store stays writable. Only a failure after the rename (the directory fsync) poisons.
    pub(crate) fn store_manifest_unless_unchanged(
        &self,
        manifest: &crate::log::manifest::Manifest,
    ) -> Result<()> {
        let high_water = self.hw_ms.load(Ordering::Acquire) / 1000;
        match manifest.store(&self.dir, high_water) {
            Ok(()) => Ok(()),
            Err(StoreError::Unchanged(e)) => Err(e),
            Err(StoreError::Uncertain(e)) => {
                self.poison();
                Err(e)
            }
        }
    }

    /// Takes the manifest lock and the log mutex for a manifest replacement made under the
    /// log mutex (a catalogue change, a merge publish), after committing the rotations so far
    /// without it, so that [`Inner::replace_manifest`] seldom has an fsync of its own to do.
    pub(crate) fn lock_for_manifest(
        &self,
    ) -> Result<(MutexGuard<'_, ()>, MutexGuard<'_, LogState>)> {
        let manifest = self.lock_manifest()?;
        Ok((manifest, self.log.lock()))
    }

    /// Takes the manifest lock after committing the rotations so far (without it).
    pub(crate) fn lock_manifest(&self) -> Result<MutexGuard<'_, ()>> {
        self.commit_rotations()?;
        Ok(self.manifest_lock.lock())
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
        // The manifest lock is held throughout (no other catalogue change in between); the
        // log mutex only to copy the manifest and to apply the change to it after the store,
        // whose fsyncs run without it (writers to other keyspaces go on; rotations in between
        // only add to `log.manifest`), as a merge's publish does. Nothing can write to the
        // new keyspace before it is in the catalogue.
        let _manifest = self.lock_manifest()?;
        if self.catalog.read().by_name.contains_key(name) {
            return Err(Error::Conflict(format!("keyspace '{name}' already exists")));
        }
        let history = vec![TtlChange {
            since: now,
            default,
        }];
        let (id, next) = {
            let id = self.log.lock().manifest.next_keyspace_id;
            (id, next_id(id)?)
        };
        let add = |m: &mut crate::log::manifest::Manifest| {
            m.next_keyspace_id = next;
            m.keyspaces.push(KeyspaceMeta {
                id,
                name: name.to_string(),
                history: history.clone(),
            });
        };
        let (manifest, taken) = {
            let mut log = self.log.lock();
            let mut manifest = log.manifest.clone();
            add(&mut manifest);
            manifest.next_seq = log.next_seq;
            (manifest, std::mem::take(&mut log.pending))
        };
        self.store_manifest_with(&manifest, taken)?;
        add(&mut self.log.lock().manifest);
        let core = Arc::new(KeyspaceCore {
            id,
            name: name.to_string(),
            state: parking_lot::RwLock::new(KeyspaceState {
                history,
                ..KeyspaceState::default()
            }),
            dropped: false.into(),
            scans: parking_lot::Mutex::default(),
            ordering: parking_lot::Mutex::new(()),
            walks: 0.into(),
        });
        let mut cat = self.catalog.write();
        cat.by_name.insert(name.to_string(), Arc::clone(&core));
        cat.by_id.insert(id, Arc::clone(&core));
        Ok(core)
    }

    pub(crate) fn delete_keyspace(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let (_manifest, mut log) = self.lock_for_manifest()?;
        let core = self.keyspace_by_name(name)?;
        let mut manifest = log.manifest.clone();
        manifest.keyspaces.retain(|k| k.id != core.id);
        manifest.next_seq = log.next_seq;
        self.replace_manifest(&mut log, &manifest)?;
        log.manifest = manifest;
        core.dropped.store(true, Ordering::Release);
        // The keyspace's timers are counted stale while its lock is held and before it leaves
        // the catalogue: a reaper or sweep that finds a key gone, or the keyspace gone, drops
        // its timer and subtracts it, so the count must already hold it (subtracting first
        // clamped at zero and left the count too high for good).
        let map = {
            let mut st = core.state.write();
            let mut armed = 0;
            st.map
                .for_each(|_, e| armed += usize::from(e.armed != ttl::NEVER));
            self.expiry.lock().stale += armed;
            st.census = crate::keydir::Census::default();
            std::mem::take(&mut st.map)
        };
        {
            let mut cat = self.catalog.write();
            cat.by_name.remove(name);
            cat.by_id.remove(&core.id);
        }
        map.for_each(|_, e| {
            if let Some(s) = log.segstats.get_mut(&e.file) {
                s.dead += u64::from(e.len);
                s.replaced += u64::from(e.len);
            }
        });
        Ok(())
    }

    /// Changes a keyspace's default TTL from now on, durably, and re-times inheriting items.
    ///
    /// The manifest lock is held throughout (no other manifest replacement, so no other
    /// change and no second time fence, can come in between); the log mutex only while the
    /// new manifest is built and while the new history is installed. The manifest's fsyncs run
    /// without it, as a merge's publish does: writers to every keyspace go on meanwhile,
    /// stamped at the fence instant (DESIGN.md §4.3).
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
        let _manifest = self.lock_manifest()?;
        let (fence, before, history, manifest, taken) = {
            let mut log = self.log.lock();
            // Again now: `delete_keyspace` holds the manifest lock while it drops one.
            if ks.dropped.load(Ordering::Acquire) {
                return Err(Error::NotFound(format!("keyspace '{}'", ks.name)));
            }
            // `since` is taken with time stopped until the new history is installed and the
            // items it moved earlier are re-timed (the fence drops after that).
            let fence = self.raise_time_fence();
            let now = fence.at / 1000;
            let before = ks.state.read().history.clone();
            if before.last().is_some_and(|c| c.since > now) {
                // Cannot happen (`now` never goes back and every `since` was a `now`), but a
                // history out of order would break `expires_at`: refuse rather than corrupt
                // it.
                return Err(Error::Corruption {
                    file: self.dir.join("MANIFEST"),
                    offset: 0,
                    reason: format!("default-TTL history of '{}' is ahead of the clock", ks.name),
                });
            }
            let mut history = before.clone();
            history.push(TtlChange {
                since: now,
                default,
            });
            let mut manifest = log.manifest.clone();
            if let Some(m) = manifest.keyspaces.iter_mut().find(|m| m.id == ks.id) {
                m.history.clone_from(&history);
            }
            manifest.next_seq = log.next_seq;
            (
                fence,
                before,
                history,
                manifest,
                std::mem::take(&mut log.pending),
            )
        };
        self.store_manifest_with(&manifest, taken)?;
        // Installed under the log mutex and the keyspace's write lock together, as the epoch
        // is bumped: a write computes its deadlines (`dies_by`) with one history and tags
        // them with that history's epoch. Rotations since the copy only added to
        // `log.manifest`.
        let mut guard = {
            let mut log = self.log.lock();
            if let Some(m) = log.manifest.keyspaces.iter_mut().find(|m| m.id == ks.id) {
                m.history.clone_from(&history);
            }
            let mut st = ks.state.write();
            st.history = history;
            // After the new history is in place (and before anyone can read it: `st` and the
            // log mutex are held): a `dies_by` computed in the new epoch used the new history.
            self.ttl_epoch.fetch_add(1, Ordering::AcqRel);
            st
        };
        // Re-time: file a timer for every item whose deadline moved earlier than its armed
        // timer (the one it had goes stale). Timers that now fire early (deadline moved later)
        // are re-armed by the reaper; timers of items that can no longer expire are disarmed
        // when they fire. See DESIGN.md "Re-timing". Under the keyspace's write lock (kept
        // from the install on) and the expiry lock, but not the log mutex: writes to other
        // keyspaces go on (those filing timers wait for the expiry lock). The fence is still
        // up, so no reaper pass can complete past `since` before this walk has filed or
        // handled what it must.
        let st = &mut *guard;
        let want_events = self.has_subscribers();
        let mut ex = self.expiry.lock();
        // Items whose new deadline a completed reaper pass has already passed (`reaped_upto`,
        // at most this very second): a timer filed there would never be reported before that
        // watermark frees the item at the next open, so they expire here, with their events.
        let mut due_now: Vec<(Key, u64)> = Vec::new();
        let history = &st.history;
        st.map.for_each_mut(|key, e| {
            if e.own_ttl() == ItemTtl::Never {
                return;
            }
            let deadline = ttl::expires_at(e.ts.get(), e.own_ttl(), history);
            let earlier = ttl::expires_at(e.ts.get(), e.own_ttl(), &before);
            if deadline != ttl::NEVER && deadline < earlier && deadline <= ex.reaped_upto {
                due_now.push((key.clone(), deadline));
            } else if deadline != ttl::NEVER && deadline < earlier && deadline < e.armed {
                if e.armed != ttl::NEVER {
                    ex.stale += 1;
                }
                e.armed = deadline;
                ex.timers.insert(
                    deadline,
                    Timer {
                        keyspace: ks.id,
                        key: key.clone(),
                    },
                );
            }
        });
        // In deadline and key order, whatever the map's layout: the events come out so.
        due_now.sort_unstable_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        let mut events = Vec::new();
        // Per freed item: its file, record length and deadline, counted dead once the log
        // mutex is taken (after the keyspace lock, in the lock order).
        let mut freed: Vec<(u32, u64, u64)> = Vec::new();
        for (key, at) in &due_now {
            let Some(e) = st.remove(key) else {
                continue;
            };
            st.departures += 1;
            st.census.remove(&e);
            if e.armed != ttl::NEVER {
                ex.stale += 1;
            }
            freed.push((e.file, u64::from(e.len), *at));
            if want_events {
                events.push(crate::expiry::ExpiryEvent {
                    keyspace: ks.name.clone(),
                    key: key.to_vec(),
                    expired_at: *at,
                });
            }
        }
        drop(ex);
        drop(guard);
        drop(fence);
        if !freed.is_empty() {
            let mut log = self.log.lock();
            for (file, len, at) in freed {
                if let Some(s) = log.segstats.get_mut(&file) {
                    s.dead += len;
                    s.note_expired(len, at);
                }
            }
        }
        self.expirations
            .fetch_add(due_now.len() as u64, Ordering::Relaxed);
        self.publish_expirations(&events);
        Ok(())
    }
}
