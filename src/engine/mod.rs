//! The storage engine: [`Store`] (a database directory) and [`Keyspace`] (a named byte map).
//!
//! Lock order, everywhere: `manifest_lock` → `log` → a keyspace's `state` → `segments`. The
//! expiry timers, the sync state and the subscriber list are leaf locks, never held while
//! taking another. Readers take only a keyspace's `state` (read) and `segments` (read), so they
//! never wait for an fsync; the first walk in key order over a hashed key directory also takes
//! the keyspace's `ordering` mutex (before `state`) and `state` (write) for a few short spells
//! (`KeyspaceCore::read_ordered`); a rotation never does either (`rotation.rs`). A writer takes
//! `manifest_lock` only after letting `log` go, to commit rotations (`sync_to`, or
//! `commit_if_far_behind` on a disk far behind).

mod clockfile;
mod feed;
mod keyspace;
mod planned;
mod read;
mod recovery;
mod rotation;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex, RwLock};

pub use keyspace::{Expiry, Iter, Keyspace, WriteBatch};
pub(crate) use keyspace::{KeyList, Picked};
pub(crate) use planned::{KeyspaceView, PlannedOp};
pub(crate) use write::{next_id, Current, Existed};

/// Records per part of open's merges (`Options::open_shard_records` in tests).
pub(crate) const OPEN_SHARD_RECORDS: usize = recovery::PART_RECORDS;

use crate::error::{Error, IoContext, Result};
use crate::expiry::worker::{self, Message, WorkerHandle};
use crate::expiry::ExpiryEvent;
use crate::keydir::KeyspaceCore;
use crate::log::active::{ActiveFile, ActiveWriter};
use crate::log::lock::DirLock;
use crate::log::manifest::Manifest;
use crate::log::segment::Segment;
use crate::options::{Options, SyncPolicy};
use crate::stats::SegStats;
use crate::ttl::DefaultTtl;
use clockfile::{ClockFile, ClockState};

/// Longest keyspace name, in bytes (UTF-8). A container id (at most 255 characters, up to 1,020
/// bytes) with the document layer's `c:` prefix fits.
pub const MAX_KEYSPACE_NAME_BYTES: usize = 1024;

/// Keyspace names beginning with one of these belong to the document layer (`__containers`,
/// `c:{container id}`): [`Store::create_keyspace`] and [`Store::delete_keyspace`] refuse them,
/// so the document layer only ever deletes keyspaces it created. They can still be opened and
/// read with [`Store::keyspace`].
pub const RESERVED_KEYSPACE_PREFIXES: [&str; 2] = ["c:", "__"];

/// Checks a keyspace name a caller of the byte engine gives: non-empty, at most
/// [`MAX_KEYSPACE_NAME_BYTES`], and not in the reserved namespace.
fn check_user_keyspace_name(name: &str) -> Result<()> {
    write::check_keyspace_name(name)?;
    if RESERVED_KEYSPACE_PREFIXES
        .iter()
        .any(|p| name.starts_with(p))
    {
        return Err(Error::BadRequest(format!(
            "keyspace name '{name}' is reserved: names beginning with 'c:' or '__' belong to the \
             document layer"
        )));
    }
    Ok(())
}

/// An open database directory: the byte key-value engine.
///
/// Cheap to clone; all clones share one open directory. The background worker stops and the
/// log is flushed and fsynced when the last clone (and every [`Keyspace`] handle) is dropped.
///
/// ```
/// use ebbdb::{Store, DefaultTtl, Options, Ttl};
/// use ebbdb::clock::ManualClock;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let clock = ManualClock::at_unix_secs(1_700_000_000);
/// let store = Store::open_with(dir.path(), Options::default().clock(clock.clone()))?;
/// let sessions = store.create_keyspace("sessions", DefaultTtl::Seconds(60))?;
/// sessions.put(b"alice", b"token")?;
/// sessions.put_with_ttl(b"bob", b"token", Ttl::Seconds(5))?;
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(sessions.get(b"bob")?, None);          // expired the instant its TTL ran out
/// assert_eq!(sessions.len()?, 1);
/// # Ok::<(), ebbdb::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    _guard: Arc<Guard>,
}

/// The most segment bytes a close scans to write missing hints (`Inner::write_missing_hints`).
pub(crate) const CLOSE_HINT_BYTES: u64 = 256 << 20;

/// A clean close seals an active segment this large, to write its hint
/// ([`Inner::seal_large_active`]; `Options::close_seal_bytes`, a test hook, changes it).
pub(crate) const CLOSE_SEAL_BYTES: u64 = 4 << 20;

/// Stops the worker and flushes when the last user-facing handle goes away.
#[derive(Debug)]
struct Guard {
    inner: Arc<Inner>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.inner.close();
    }
}

/// Shared state of an open store.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) opts: Options,
    _lock: DirLock,
    pub(crate) log: Mutex<LogState>,
    pub(crate) segments: RwLock<SegmentSet>,
    pub(crate) catalog: RwLock<Catalog>,
    sync: Mutex<SyncState>,
    sync_cv: Condvar,
    /// Write calls appended (counted under the log mutex, under every sync policy): under
    /// `SyncPolicy::Always` a group commit's leader waits a moment for as many as the last
    /// fsync covered ([`Inner::gather`]); the upkeep worker counts a store idle once it has not
    /// moved for `policy::IDLE_AFTER_SECS`.
    pub(crate) appends: AtomicU64,
    /// The reclaim debt (parts per million of the sealed bytes kept) while merges are behind
    /// (the last choice left segments due for a merge to the next), 0 otherwise: writers are
    /// paced from `policy::PRESSURE_DEBT_PPM` on ([`Inner::pace`]). Published by every
    /// choice but a full compaction's, on a store whose clock drives background work only
    /// (a `ManualClock` store is never paced); a failed merge sets it to 0.
    pub(crate) reclaim_debt_ppm: AtomicU64,
    /// Pacing delay slept by writers since open (`Stats::paced`).
    pub(crate) paced_ns: AtomicU64,
    pub(crate) poisoned: AtomicBool,
    closed: AtomicBool,
    hw_ms: AtomicU64,
    /// While a default-TTL change is being made durable, the instant it takes effect: `now`
    /// stands still there for everyone (see [`TimeFence`]). [`NO_FENCE`] otherwise.
    fence_ms: AtomicU64,
    persisted_s: AtomicU64,
    clockfile: Mutex<(ClockFile, ClockState)>,
    /// Second handle to `CLOCK`, fsynced without holding `clockfile`.
    clock_sync: std::fs::File,
    pub(crate) expiry: Mutex<ExpiryState>,
    /// Timers due and not yet taken for handling, readable without the lock (for `stats()`).
    pub(crate) reap_backlog: AtomicU64,
    /// Every timer with a deadline at or before this second has been taken for handling
    /// (handled, or being handled). Writers compare it with their `now` after
    /// every write: expiry that lags by more than `ASSIST_LAG_S` seconds gets their help.
    pub(crate) handled_through: AtomicU64,
    pub(crate) subscribers: Mutex<Vec<Sender<ExpiryEvent>>>,
    pub(crate) expirations: AtomicU64,
    /// Stale timers dropped by sweeps since open.
    pub(crate) timers_swept: AtomicU64,
    pub(crate) merges: AtomicU64,
    /// Default-TTL changes since open (bumped under the log mutex after the new history is in
    /// place): a segment's `dies_by` is exact only if computed in the current epoch (see
    /// `policy::dead_whole`).
    pub(crate) ttl_epoch: AtomicU64,
    pub(crate) merge_lock: Mutex<()>,
    /// Serialises every manifest replacement (rotation commits, merge publishes, catalogue
    /// changes). Taken before `log`, and held across a manifest's fsyncs, which `log` is not
    /// when a rotation commits.
    pub(crate) manifest_lock: Mutex<()>,
    /// Rotations (numbered as `rotations_started` counts them) whose manifest is stored: every byte
    /// appended before them is in a file the manifest on disk accounts for.
    pub(crate) rotations_durable: AtomicU64,
    /// Rotations since open (changed under the log mutex); the last one's number is
    /// `LogState::pending`'s last `number`.
    pub(crate) rotations_started: AtomicU64,
    /// Sealed segments whose hint was not written because they were about to die whole or
    /// short-lived (`compaction::write_hint_for`), with the second each was set aside; the
    /// worker writes it if one outlives that.
    pub(crate) hints_deferred: Mutex<BTreeMap<u32, u64>>,
    worker: Mutex<Option<WorkerHandle>>,
    pub(crate) worker_error: Mutex<WorkerErrors>,
    pub(crate) merge_crash_at: Mutex<Option<crate::compaction::merge::CrashPoint>>,
    /// Test hook called at each merge step (see `Store::set_merge_observer`).
    pub(crate) merge_observer: Mutex<Option<ObserverSlot>>,
    /// Damage met and skipped (see `Stats::damaged_segments`).
    pub(crate) damage: crate::stats::DamageCounters,
}

/// `fence_ms` when no fence is up.
pub(crate) const NO_FENCE: u64 = u64::MAX;
/// `fence_ms` while a fence is being raised.
const FENCE_PENDING: u64 = u64::MAX - 1;

/// Time stands still while a default-TTL change becomes durable.
///
/// A change applies from the second `since` on, and the old setting applies up to and
/// including `since` (closed intervals, `ttl::expires_at`). Readers must therefore never
/// evaluate the old setting at a time after `since`: an item they saw expire then could be
/// live under the new setting. The change is installed only after its manifest is fsynced, and
/// readers must not wait for that fsync. So, while the change is in flight, every `now` the
/// store hands out is clamped to the fence instant `at` (`since = at / 1000`): readers keep
/// the old setting but see no later time, writers stamp `at`. Raising the fence is ordered
/// against `now_ms` (both SeqCst): a `now` taken before the fence's `hw_ms` read is at most
/// `at`; one taken after sees the fence (or spins for the instant it is pending). The new
/// history is installed before the fence drops, so a `now` past `at` always meets it.
pub(crate) struct TimeFence<'a> {
    inner: &'a Inner,
    /// The instant at which time stands still (Unix ms).
    pub(crate) at: u64,
}

impl Drop for TimeFence<'_> {
    fn drop(&mut self) {
        self.inner.fence_ms.store(NO_FENCE, Ordering::SeqCst);
    }
}

/// A test's callback at each merge step.
#[derive(Clone)]
pub(crate) struct ObserverSlot(
    pub(crate) Arc<dyn Fn(crate::compaction::merge::CrashPoint) + Send + Sync>,
);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObserverSlot")
    }
}

/// Background failures, for `stats()`.
#[derive(Debug, Default)]
pub(crate) struct WorkerErrors {
    /// The last background job's failure, until a later job succeeds.
    pub(crate) last: Option<String>,
    /// Background jobs that failed since open.
    pub(crate) failures: u64,
}

/// Everything guarded by the log mutex.
#[derive(Debug)]
pub(crate) struct LogState {
    pub(crate) active: ActiveWriter,
    pub(crate) next_seq: u64,
    pub(crate) manifest: Manifest,
    pub(crate) segstats: HashMap<u32, SegStats>,
    /// Total bytes ever appended in this process: a position for group commit.
    pub(crate) appended: u64,
    /// `appended` when the worker was last asked to sync behind the writers (policies other
    /// than `Always`; see [`SYNC_BEHIND_BYTES`]).
    pub(crate) sync_behind_asked: u64,
    /// Rotations whose manifest is not stored yet, oldest first (`Inner::commit_rotations`).
    pub(crate) pending: Vec<PendingSeal>,
    /// Merges and drops that reclaimed bytes since open: an output of a merge that reclaimed
    /// nothing is not merged again until this moves (`SegStats::sterile_in`).
    pub(crate) reclaim_gen: u64,
}

/// A rotation not yet made durable: the writers have moved on to `successor`, but the manifest
/// on disk still names `sealed` as the active segment (DESIGN.md §5, "Rotation").
#[derive(Debug)]
pub(crate) struct PendingSeal {
    /// The segment sealed: fsynced before any manifest lists it sealed.
    pub(crate) sealed: Arc<ActiveFile>,
    /// Its preallocated tail was cut: its fsync must include metadata.
    pub(crate) trimmed: bool,
    /// The file that became active: named `.seg` once a manifest lists it.
    pub(crate) successor: Arc<ActiveFile>,
    /// `Inner::rotations_started` just after this one.
    pub(crate) number: u64,
}

/// Under `SyncPolicy::Never` and `Periodic`, the sync thread fsyncs the log in the background
/// each time this many more bytes were appended, so that dirty pages never pile up: a
/// rotation's commit then fsyncs at most this much of the sealed segment, where it wrote out
/// the whole 64 MiB segment (35–48 ms at 550 k writes/s, when that fsync still held every
/// writer).
pub(crate) const SYNC_BEHIND_BYTES: u64 = 8 << 20;

/// The published segments.
#[derive(Debug)]
pub(crate) struct SegmentSet {
    pub(crate) sealed: BTreeMap<u32, Arc<Segment>>,
    pub(crate) active: Arc<ActiveFile>,
}

/// Keyspaces by name and by id.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    pub(crate) by_name: HashMap<String, Arc<KeyspaceCore>>,
    pub(crate) by_id: HashMap<u32, Arc<KeyspaceCore>>,
}

/// The longest a group commit's leader waits for the writers of the last group
/// ([`Inner::gather`]).
const GATHER: std::time::Duration = std::time::Duration::from_micros(100);

#[derive(Debug, Default)]
struct SyncState {
    synced: u64,
    in_progress: bool,
    /// Writes the last fsync covered, and the count of appends it covered up to.
    group: u64,
    covered: u64,
}

/// The expiry timers and how far expiry has been processed.
#[derive(Debug)]
pub(crate) struct ExpiryState {
    /// Pending timers by second. Those due at the latest `now` a reaper used are the reaping
    /// backlog: the reaper drains it; writers help when it grows (see `Inner::reap_upto`).
    pub(crate) timers: crate::expiry::timers::Timers,
    /// Timers in `timers` that are not in charge of their key (their key was deleted,
    /// disarmed, rewritten with an earlier deadline, or its keyspace dropped): exactly the
    /// pending timers minus the key-directory entries armed with one. Swept when they
    /// outnumber the others (`Inner::sweep_stale_timers`).
    pub(crate) stale: usize,
    /// The latest `now` a reaper took due timers at.
    pub(crate) fired_through: u64,
    pub(crate) reaped_upto: u64,
    /// Timers taken out of `timers` and being handled (or swept) right now.
    pub(crate) in_flight: usize,
    /// The latest `now` of a reaper that handled timers: events may have been published for
    /// deadlines up to it. Above `reaped_upto`, for part of a second (see
    /// `Inner::finish_fired_timers`).
    pub(crate) published_through: u64,
}

impl Store {
    /// Opens (creating if needed) the database in `dir` with default options.
    ///
    /// # Errors
    /// [`Error::Locked`] if another handle has it open, [`Error::Corruption`] for damaged
    /// files, [`Error::Io`] for OS errors.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, Options::default())
    }

    /// Opens (creating if needed) the database in `dir`.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(dir: impl AsRef<Path>, opts: Options) -> Result<Self> {
        let inner = Arc::new(recovery::open(dir.as_ref(), opts)?);
        let handle = worker::spawn(Arc::clone(&inner))?;
        *inner.worker.lock() = Some(handle);
        Ok(Self {
            _guard: Arc::new(Guard {
                inner: Arc::clone(&inner),
            }),
            inner,
        })
    }

    /// The directory this store lives in.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Creates keyspace `name` with default TTL `default`.
    ///
    /// # Errors
    /// [`Error::Conflict`] if it exists; [`Error::BadRequest`] for an invalid TTL, an empty
    /// name, a name longer than [`MAX_KEYSPACE_NAME_BYTES`] or one in the document layer's
    /// namespace ([`RESERVED_KEYSPACE_PREFIXES`]); I/O errors writing the manifest.
    pub fn create_keyspace(&self, name: &str, default: DefaultTtl) -> Result<Keyspace> {
        check_user_keyspace_name(name)?;
        self.create_keyspace_internal(name, default)
    }

    /// [`Store::create_keyspace`] without the reserved-namespace check, for the document layer.
    pub(crate) fn create_keyspace_internal(
        &self,
        name: &str,
        default: DefaultTtl,
    ) -> Result<Keyspace> {
        let core = self.inner.create_keyspace(name, default)?;
        Ok(Keyspace::new(self.clone(), core))
    }

    /// Opens existing keyspace `name`.
    ///
    /// # Errors
    /// [`Error::NotFound`] if there is none.
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        let core = self.inner.keyspace_by_name(name)?;
        Ok(Keyspace::new(self.clone(), core))
    }

    /// Opens keyspace `name`, creating it with `default` if it does not exist.
    ///
    /// # Errors
    /// As [`Store::create_keyspace`].
    pub fn keyspace_or_create(&self, name: &str, default: DefaultTtl) -> Result<Keyspace> {
        check_user_keyspace_name(name)?;
        self.keyspace_or_create_internal(name, default)
    }

    /// [`Store::keyspace_or_create`] without the reserved-namespace check, for the document
    /// layer.
    pub(crate) fn keyspace_or_create_internal(
        &self,
        name: &str,
        default: DefaultTtl,
    ) -> Result<Keyspace> {
        match self.keyspace(name) {
            Ok(ks) => Ok(ks),
            Err(Error::NotFound(_)) => match self.create_keyspace_internal(name, default) {
                Err(Error::Conflict(_)) => self.keyspace(name),
                other => other,
            },
            Err(e) => Err(e),
        }
    }

    /// Deletes keyspace `name`; its records become garbage for compaction.
    ///
    /// # Errors
    /// [`Error::NotFound`] if there is none; [`Error::BadRequest`] for a name in the document
    /// layer's namespace (delete the container instead); I/O errors writing the manifest.
    pub fn delete_keyspace(&self, name: &str) -> Result<()> {
        check_user_keyspace_name(name)?;
        self.inner.delete_keyspace(name)
    }

    /// [`Store::delete_keyspace`] without the reserved-namespace check, for the document layer.
    pub(crate) fn delete_keyspace_internal(&self, name: &str) -> Result<()> {
        self.inner.delete_keyspace(name)
    }

    /// Names of all keyspaces, sorted.
    #[must_use]
    pub fn keyspaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner.catalog.read().by_name.keys().cloned().collect();
        v.sort();
        v
    }

    /// Applies a [`WriteBatch`] atomically: after a crash, all of it or none of it.
    ///
    /// # Errors
    /// As [`Keyspace::put`].
    pub fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        self.inner.write_batch(batch)
    }

    /// Makes every acknowledged write durable now (flush + fsync).
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier failure; the fsync's error otherwise.
    pub fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Runs expiry now: fires every due timer, frees expired entries, publishes events.
    /// With a [`SystemClock`](crate::clock::SystemClock) the worker does this on its own.
    ///
    /// # Errors
    /// I/O errors writing the clock file.
    pub fn maintain(&self) -> Result<usize> {
        let expired = self.inner.reap()?;
        if self.inner.timers_need_sweep() {
            self.inner.sweep_stale_timers();
        }
        Ok(expired)
    }

    /// Runs the compaction policy now (expiry first): merges the segments it selects, until
    /// it selects nothing. Each merge reads at most a few segments (DESIGN.md §7), so a call
    /// that has much to do runs several; the report adds them up.
    ///
    /// # Errors
    /// I/O errors; a failed merge leaves the published state untouched (merges that completed
    /// before it stay done).
    pub fn compact(&self) -> Result<crate::stats::CompactionReport> {
        self.inner.reap()?;
        let mut report = crate::stats::CompactionReport::default();
        // Every merge retires at least one segment that existed when the call began or was
        // written by an earlier merge of it; the bound keeps writers that create garbage as
        // fast as it is merged from holding the call forever.
        let rounds = self.inner.segments.read().sealed.len() + 1;
        for _ in 0..rounds {
            let merged = crate::compaction::run(&self.inner, false)?;
            report.absorb(&merged);
            if merged.is_empty() {
                break;
            }
        }
        Ok(report)
    }

    /// Merges every sealed segment now (and seals the active one first).
    ///
    /// # Errors
    /// As [`Store::compact`].
    pub fn compact_full(&self) -> Result<crate::stats::CompactionReport> {
        self.inner.reap()?;
        self.inner.rotate_if_nonempty()?;
        crate::compaction::run(&self.inner, true)
    }

    /// A snapshot of the store's statistics.
    #[must_use]
    pub fn stats(&self) -> crate::stats::Stats {
        crate::stats::collect(&self.inner)
    }

    /// A channel receiving an [`ExpiryEvent`] for every item that expires from now on, once
    /// per item version. Items that expired while the store was closed are reported by the
    /// first expiry pass after open ([`Store::maintain`], or the worker's first tick). Events
    /// come in no particular order: expiry passes and writes that replace expired versions
    /// publish concurrently.
    ///
    /// Waits for a compaction run in progress to end: a run that found nobody subscribed may
    /// drop a segment whose items are not yet reported (DESIGN §7), and a subscriber must come
    /// either before that decision (which then waits for the events) or after it is on disk.
    #[must_use]
    pub fn subscribe_expirations(&self) -> crossbeam_channel::Receiver<ExpiryEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let _no_compaction_running = self.inner.merge_lock.lock();
        self.inner.subscribers.lock().push(tx);
        rx
    }

    /// The engine's current time in Unix milliseconds: the clock, but never earlier than any
    /// time the store has already used (also across restarts).
    #[must_use]
    pub fn now_unix_millis(&self) -> u64 {
        self.inner.now_ms()
    }

    /// True once a failed log write, log fsync or manifest replacement has poisoned the
    /// store: every write then fails with [`Error::Poisoned`] until it is reopened.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.inner.poisoned.load(Ordering::Acquire)
    }

    /// Sends the worker a message asking it to run the compaction policy soon.
    pub fn request_compaction(&self) {
        self.inner.send(Message::Compact);
    }

    /// Test hook: make the next merge stop at `at` as if the process died there (the store is
    /// poisoned; reopen it to check what survives).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn set_merge_crash_point(&self, at: Option<crate::compaction::merge::CrashPoint>) {
        *self.inner.merge_crash_at.lock() = at;
    }

    /// Test hook: `observe` is called (on the merging thread) as each merge reaches each step,
    /// so a test can check what other threads can do at that moment.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn set_merge_observer(
        &self,
        observe: Option<Arc<dyn Fn(crate::compaction::merge::CrashPoint) + Send + Sync>>,
    ) {
        *self.inner.merge_observer.lock() = observe.map(ObserverSlot);
    }
}

#[cfg(feature = "test-hooks")]
impl Store {
    /// Test hook: how many shards the key directory of keyspace `name` is split into, or for
    /// a hashed one, how many parts open built it from (`keydir::KeyMap::shards`; open merges
    /// a large keyspace's records in parts, and ordering cuts shards of the same size).
    ///
    /// # Errors
    /// `NotFound` if there is no such keyspace.
    #[doc(hidden)]
    pub fn key_directory_shards(&self, name: &str) -> Result<usize> {
        Ok(self.inner.keyspace_by_name(name)?.state.read().map.shards())
    }

    /// Test hook: what giving room back after expiries cuts in the key directory of keyspace
    /// `name` (`keydir::KeyMap::room`): the slots its slab spans, entries and holes, and the
    /// buckets of its index tables; `None` if the map is ordered.
    ///
    /// # Errors
    /// `NotFound` if there is no such keyspace.
    #[doc(hidden)]
    pub fn key_directory_room(&self, name: &str) -> Result<Option<(usize, usize)>> {
        Ok(self.inner.keyspace_by_name(name)?.state.read().map.room())
    }

    /// Test hook: true if the key directory of keyspace `name` is hashed (not ordered yet).
    ///
    /// # Errors
    /// `NotFound` if there is no such keyspace.
    #[doc(hidden)]
    pub fn key_directory_hashed(&self, name: &str) -> Result<bool> {
        Ok(self
            .inner
            .keyspace_by_name(name)?
            .state
            .read()
            .map
            .is_hashed())
    }

    /// Test hook: makes the key directory of keyspace `name` hashed again after something
    /// ordered it (open builds hashed maps, a walk in key order orders them), one insert at a
    /// time, as if its entries had been written since open.
    ///
    /// # Errors
    /// `NotFound` if there is no such keyspace.
    #[doc(hidden)]
    pub fn hash_key_directory(&self, name: &str) -> Result<()> {
        self.inner
            .keyspace_by_name(name)?
            .state
            .write()
            .map
            .make_hashed();
        Ok(())
    }

    /// Test hook: hashes the key directory of keyspace `name` again off its lock, as the
    /// worker does once walks in key order stop (`Options::rehash_after`), whatever the time
    /// since the last walk. True if the map is hashed afterwards.
    ///
    /// # Errors
    /// `NotFound` if there is no such keyspace.
    #[doc(hidden)]
    pub fn rehash_key_directory(&self, name: &str) -> Result<bool> {
        Ok(self.inner.keyspace_by_name(name)?.hash_off_lock())
    }

    /// Test hook: fires every due timer into the reaping backlog without handling any, as a
    /// worker that fell behind would leave it.
    #[doc(hidden)]
    pub fn queue_due_expirations(&self) -> Result<()> {
        self.inner.reap_upto(0, 0, false).map(|_| ())
    }

    /// Test hook: runs the compaction policy once (drops and a bounded merge) without the
    /// expiry pass that [`Store::compact`] runs first, as the background worker may when the
    /// reaper is behind.
    #[doc(hidden)]
    pub fn run_compaction_policy(&self) -> Result<crate::stats::CompactionReport> {
        crate::compaction::run(&self.inner, false)
    }

    /// Test hook: checks that in every sealed segment counting nothing replaced, each put not
    /// expired by its own metadata is the version the key directory names (what lets a merge
    /// copy those without a lookup, DESIGN.md §7); the first exception is the error.
    #[doc(hidden)]
    pub fn check_clean_segments(&self) -> std::result::Result<(), String> {
        use crate::format::record::Kind;
        use crate::keydir::WriteSecs;
        // No merge is between its publish and its key-directory moves (its outputs count
        // their stale copies only after the moves), and the log mutex keeps writes out while
        // the segments are read.
        let _no_merge = self.inner.merge_lock.lock();
        let log = self.inner.log.lock();
        let now = self.inner.now_s();
        let sealed: Vec<Arc<Segment>> = self
            .inner
            .segments
            .read()
            .sealed
            .values()
            .cloned()
            .collect();
        for seg in sealed {
            if log.segstats.get(&seg.id).is_none_or(|s| s.replaced != 0) {
                continue;
            }
            let mut err: Option<String> = None;
            crate::log::scan::scan(seg.bytes(), |off, _, rec| {
                if err.is_some() || rec.meta.kind != Kind::Put {
                    return;
                }
                // A dropped keyspace's records are dead to a merge without any decision.
                let Some(core) = self.inner.keyspace_by_id(rec.meta.keyspace) else {
                    return;
                };
                let st = core.state.read();
                let at = crate::ttl::expires_at(
                    WriteSecs::saturating(rec.meta.ts()).get(),
                    rec.meta.ttl,
                    &st.history,
                );
                if crate::ttl::is_expired(at, now) {
                    return;
                }
                if st
                    .get(rec.key)
                    .is_none_or(|e| (e.file, e.offset) != (seg.id, off))
                {
                    err = Some(format!(
                        "segment {} counts nothing replaced, but its unexpired put at {off} \
                         (seq {}) is not what the key directory names",
                        seg.id, rec.meta.seq
                    ));
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Test hook: checks every keyspace's census (the counts behind `len()` and `stats()`)
    /// against a walk over its key directory at the engine's `now`; the first disagreement is
    /// the error.
    #[doc(hidden)]
    pub fn check_census(&self) -> std::result::Result<(), String> {
        let now = self.inner.now_s();
        let cores: Vec<_> = self.inner.catalog.read().by_id.values().cloned().collect();
        for core in cores {
            let st = core.state.read();
            let mut walked = crate::keydir::Census::default();
            st.map.for_each(|_, e| walked.add(e));
            if walked != st.census {
                return Err(format!("keyspace '{}': census buckets drifted", core.name));
            }
            let (mut live, mut expired) = (0u64, 0u64);
            st.map.for_each(|_, e| {
                if st.is_live(e, now) {
                    live += 1;
                } else {
                    expired += 1;
                }
            });
            let c = st.count(now);
            if (c.live.items, c.expired.items) != (live, expired) {
                return Err(format!(
                    "keyspace '{}' at {now}: census says {} live, {} expired; the walk {live}, {expired}",
                    core.name, c.live.items, c.expired.items
                ));
            }
        }
        Ok(())
    }

    /// Test hook: the process dies now. The background worker stops, nothing more is written:
    /// what sits in the write buffer is lost, what was written to files stays (as after
    /// `kill -9`, the OS keeps its cache). Every later write fails with [`Error::Closed`];
    /// drop every handle, then reopen the directory to see what survived. Combine with
    /// `faults::power_loss` to also lose what was never fsynced.
    #[doc(hidden)]
    pub fn simulate_crash(&self) {
        self.inner.crash();
    }
}

impl Inner {
    /// See [`Store::simulate_crash`].
    #[cfg(feature = "test-hooks")]
    fn crash(&self) {
        self.closed.store(true, Ordering::Release);
        let worker = self.worker.lock().take();
        if let Some(w) = worker {
            w.shutdown();
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        let clock = self.opts.clock.now_unix_millis();
        // Readers in the same millisecond only load the high-water mark: a `fetch_max` on
        // every call made every read write one shared cache line.
        let seen = self.hw_ms.load(Ordering::SeqCst);
        let prev = if clock > seen {
            self.hw_ms.fetch_max(clock, Ordering::SeqCst)
        } else {
            seen
        };
        let mut now = prev.max(clock);
        loop {
            match self.fence_ms.load(Ordering::SeqCst) {
                // A fence is being raised: its instant is being read; wait the few
                // instructions until it is published.
                FENCE_PENDING => std::hint::spin_loop(),
                fence => {
                    now = now.min(fence);
                    break;
                }
            }
        }
        let secs = now / 1000;
        if secs > self.persisted_s.load(Ordering::Acquire) {
            self.persist_clock(secs, None);
        }
        now
    }

    pub(crate) fn now_s(&self) -> u64 {
        self.now_ms() / 1000
    }

    /// Stops time at the current instant until the returned fence is dropped; see
    /// [`TimeFence`]. Only one fence at a time: the caller (a default-TTL change) holds the
    /// manifest lock until its fence drops.
    pub(crate) fn raise_time_fence(&self) -> TimeFence<'_> {
        // The clock is the caller's code and may panic: read it before anything is pending.
        let clock = self.opts.clock.now_unix_millis();
        self.fence_ms.store(FENCE_PENDING, Ordering::SeqCst);
        let at = self.hw_ms.fetch_max(clock, Ordering::SeqCst).max(clock);
        self.fence_ms.store(at, Ordering::SeqCst);
        TimeFence { inner: self, at }
    }

    /// Records the high-water second (and optionally reaped-up-to) in `CLOCK`, without fsync.
    /// The mutex is held only for one 28-byte `pwrite`, never across an fsync.
    fn persist_clock(&self, secs: u64, reaped_upto: Option<u64>) {
        let durable = self.durable_point();
        let mut guard = self.clockfile.lock();
        let (file, state) = &mut *guard;
        if secs <= state.high_water && reaped_upto.is_none() {
            return; // another thread recorded this second first
        }
        state.high_water = state.high_water.max(secs);
        if let Some(r) = reaped_upto {
            state.reaped_upto = state.reaped_upto.max(r);
        }
        state.note_durable(durable);
        if file.write(*state).is_ok() {
            self.persisted_s
                .fetch_max(state.high_water, Ordering::AcqRel);
        }
    }

    pub(crate) fn record_reaped_upto(&self, upto: u64) {
        let durable = self.durable_point();
        let mut guard = self.clockfile.lock();
        let (file, state) = &mut *guard;
        state.reaped_upto = state.reaped_upto.max(upto);
        state.high_water = state
            .high_water
            .max(self.hw_ms.load(Ordering::Acquire) / 1000);
        state.note_durable(durable);
        let _ = file.write(*state);
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// True once `close` (or a simulated crash) began.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// Sends `msg` to the background threads without blocking: false if it was not sent (no
    /// worker, or its channel full).
    pub(crate) fn send(&self, msg: Message) -> bool {
        self.worker.lock().as_ref().is_some_and(|w| w.try_send(msg))
    }

    /// Waits until every byte appended up to `pos` is fsynced, sharing fsyncs between
    /// concurrent writers (group commit).
    pub(crate) fn sync_to(&self, pos: u64) -> Result<()> {
        let mut s = self.sync.lock();
        loop {
            if self.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned);
            }
            if s.synced >= pos {
                return Ok(());
            }
            if s.in_progress {
                self.sync_cv.wait(&mut s);
                continue;
            }
            s.in_progress = true;
            let (group, since) = (s.group, s.covered);
            drop(s);
            self.gather(group, since);
            let result = self.flush_and_fsync();
            s = self.sync.lock();
            s.in_progress = false;
            match result {
                Ok((upto, appends)) => {
                    s.synced = s.synced.max(upto);
                    s.group = appends.saturating_sub(s.covered);
                    s.covered = s.covered.max(appends);
                }
                Err(e) => {
                    // The leader reports the cause (e.g. ENOSPC); writers it was covering, and
                    // every later one, see `Poisoned`.
                    self.poison();
                    self.sync_cv.notify_all();
                    return Err(e);
                }
            }
            self.sync_cv.notify_all();
        }
    }

    /// Before a group commit's fsync, waits (at most [`GATHER`]) until as many writes as the
    /// last fsync covered (`group`) have been appended since it (`since`, the count it
    /// covered): the writers it released come back to the log some microseconds apart (each
    /// is woken in turn), and a leader that synced at once would cover only itself, leaving
    /// the rest to wait a whole fsync more. Yields rather than spins: on two cores the
    /// writers need the processor to get there. A lone writer never waits (a group of one is
    /// its own write).
    fn gather(&self, group: u64, since: u64) {
        let start = std::time::Instant::now();
        while self.appends.load(Ordering::Acquire).saturating_sub(since) < group
            && start.elapsed() < GATHER
        {
            std::thread::yield_now();
        }
    }

    /// Flushes the active buffer, commits the rotations before it and fsyncs the active file;
    /// returns the position covered.
    fn flush_and_fsync(&self) -> Result<(u64, u64)> {
        let (upto, appends, file, rotations) = {
            let mut log = self.log.lock();
            if let Err(e) = log.active.flush() {
                self.poison();
                return Err(Error::io_at(log.active.shared.current_path(), e));
            }
            let rotations = self.rotations_started.load(Ordering::Acquire);
            (
                log.appended,
                self.appends.load(Ordering::Acquire),
                Arc::clone(&log.active.shared),
                rotations,
            )
        };
        self.sync_active(&file, rotations)?;
        Ok((upto, appends))
    }

    /// fsyncs the active `file` after committing every rotation up to `rotations` (bytes
    /// before a rotation lie in files only its manifest makes part of the store); a failed
    /// fsync poisons.
    fn sync_active(&self, file: &crate::log::active::ActiveFile, rotations: u64) -> Result<()> {
        if self.rotations_durable.load(Ordering::Acquire) < rotations {
            self.commit_rotations()?;
            if self.rotations_durable.load(Ordering::Acquire) < rotations {
                return Err(Error::Poisoned);
            }
        }
        file.sync(true)
            .at(file.current_path())
            .inspect_err(|_| self.poison())
    }

    pub(crate) fn sync_all(&self) -> Result<()> {
        self.check_writable()?;
        let pos = self.log.lock().appended;
        self.sync_to(pos)?;
        self.record_durable_point();
        let clock_path = self.dir.join(clockfile::FILE_NAME);
        crate::faults::sync_file(&self.clock_sync, &clock_path, true).at(clock_path)?;
        Ok(())
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Take the handle out before joining: the worker may need this mutex to finish its
        // current job (a rotation sends it a message), so it must not be held across the join.
        let worker = self.worker.lock().take();
        if let Some(w) = worker {
            w.shutdown();
        }
        // Events already published for part of a second must not be published again by the
        // next session: finish the timers already fired (see `finish_fired_timers`).
        self.finish_fired_timers();
        // The last `now` any call used must survive the close, even if no call wrote it yet.
        self.persist_clock(self.hw_ms.load(Ordering::Acquire) / 1000, None);
        let synced = !self.poisoned.load(Ordering::Acquire) && {
            let pos = self.log.lock().appended;
            self.sync_to(pos).is_ok()
        };
        self.record_durable_point();
        let _ =
            crate::faults::sync_file(&self.clock_sync, &self.dir.join(clockfile::FILE_NAME), true);
        if synced {
            self.seal_large_active();
            self.write_missing_hints();
        }
    }

    /// At a clean close, seals the active segment if it holds at least [`CLOSE_SEAL_BYTES`]
    /// (`Options::close_seal_bytes`), so that the close can write its hint: the active
    /// segment never has one (the next session appends to it), and an open scans it and, its
    /// records in write order, sorts them. After a fill of 1 M random keys and overwrites that left
    /// half the data in the active segment, that was most of the open (DESIGN.md §2.3).
    /// Smaller active segments stay as they are: a new, nearly empty active segment per
    /// session is not worth it for a few megabytes. A failure leaves the segment active (a
    /// failed rotation poisons the store, and nothing more is written).
    fn seal_large_active(&self) {
        let mut log = self.log.lock();
        if log.active.is_empty()
            || log.active.len() < self.opts.close_seal_bytes
            || self.poisoned.load(Ordering::Acquire)
        {
            return;
        }
        if self.rotate(&mut log).is_err() {
            return;
        }
        drop(log);
        let _ = self.commit_rotations();
    }

    /// At a clean close, the hints of sealed segments still without one: sealed shortly
    /// before the close, or found without one at open while the worker's first tick had not
    /// come. The next open would scan them. Only segments whose rotation is committed (a
    /// segment the manifest on disk still names as active may be appended to by the next
    /// session, and a hint written now would hide those records from later opens), only when
    /// the close's sync succeeded, and at most [`CLOSE_HINT_BYTES`] of segments
    /// (`Options::close_hint_bytes`, a test hook; a store
    /// opened over many unhinted segments catches up over several closes; a segment known to
    /// need none, small records in key order, is skipped without being charged). Those about
    /// to die whole stay without one (`write_hint_for` sets them aside); a failure only leaves
    /// a segment to be scanned.
    fn write_missing_hints(&self) {
        let uncommitted: Vec<u32> = self
            .log
            .lock()
            .pending
            .iter()
            .map(|p| p.sealed.id)
            .collect();
        let sealed: Vec<(u32, u64)> = self
            .segments
            .read()
            .sealed
            .values()
            .map(|s| (s.id, s.len()))
            .collect();
        let mut budget = self.opts.close_hint_bytes;
        for (id, len) in sealed {
            if uncommitted.contains(&id)
                || crate::log::hint_path(&self.dir, id).exists()
                || crate::compaction::known_without_hint(self, id)
            {
                continue;
            }
            if self.poisoned.load(Ordering::Acquire) || len > budget {
                return;
            }
            budget -= len;
            let _ =
                crate::compaction::write_hint_for(self, id, crate::compaction::HintWait::IfDying);
        }
    }

    pub(crate) fn keyspace_by_name(&self, name: &str) -> Result<Arc<KeyspaceCore>> {
        self.catalog
            .read()
            .by_name
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("keyspace '{name}'")))
    }

    /// The worker's look at every keyspace's key directory (at each tick): an ordered map no
    /// walk has touched for `Options::rehash_after` is hashed again, off its lock (DESIGN.md
    /// §3.1, "Hashed again when walks stop"). `watches` is the worker's memory between ticks.
    pub(crate) fn rehash_idle_maps(
        &self,
        watches: &mut HashMap<u32, crate::keydir::RehashWatch>,
        now: std::time::Instant,
    ) {
        let Some(after) = self.opts.rehash_after else {
            return;
        };
        let cores: Vec<Arc<KeyspaceCore>> = self.catalog.read().by_id.values().cloned().collect();
        if watches.len() > cores.len() {
            let ids: std::collections::HashSet<u32> = cores.iter().map(|c| c.id).collect();
            watches.retain(|id, _| ids.contains(id));
        }
        // One hashing per tick at most (a map of a million keys takes about 0.1 s), so a
        // walk over many keyspaces is undone over several ticks, and a close waits for one.
        for core in cores {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            if core.dropped.load(Ordering::Acquire) {
                continue;
            }
            let walks = core.walks.load(Ordering::Relaxed);
            let watch = watches
                .entry(core.id)
                .or_insert_with(|| crate::keydir::RehashWatch::new(walks, now, after));
            if watch.look(walks, now, after, || {
                core.state.read().map.ordered().is_some()
            }) {
                let hashed = core.hash_off_lock();
                watch.tried(now, hashed);
                return;
            }
        }
    }

    pub(crate) fn keyspace_by_id(&self, id: u32) -> Option<Arc<KeyspaceCore>> {
        self.catalog.read().by_id.get(&id).cloned()
    }

    /// The worker's background fsync of what was appended so far (see [`SYNC_BEHIND_BYTES`]).
    pub(crate) fn sync_behind(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        // Only the whole pages are written and fsynced: the page the log ends in stays in the
        // buffer, so the writers never add to a page this fsync's writeback holds locked
        // (`ActiveWriter::flush_whole_pages`). Nothing here claims a position durable to
        // writers (as `sync_to` does); the file's own durable length still advances.
        let (file, rotations) = {
            let mut log = self.log.lock();
            if let Err(e) = log.active.flush_whole_pages() {
                self.poison();
                return Err(Error::io_at(log.active.shared.current_path(), e));
            }
            (
                Arc::clone(&log.active.shared),
                self.rotations_started.load(Ordering::Acquire),
            )
        };
        self.sync_active(&file, rotations)
    }

    /// Periodic durability for `SyncPolicy::Periodic`.
    pub(crate) fn periodic_sync(&self) -> Result<()> {
        if matches!(self.opts.sync, SyncPolicy::Periodic(_))
            && !self.poisoned.load(Ordering::Acquire)
        {
            let pos = self.log.lock().appended;
            self.sync_to(pos)?;
            self.record_durable_point();
            let clock_path = self.dir.join(clockfile::FILE_NAME);
            crate::faults::sync_file(&self.clock_sync, &clock_path, true).at(clock_path)?;
        }
        Ok(())
    }
}
