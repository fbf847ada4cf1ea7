//! Secondary indexes: ordered in-memory indexes of the paths a container's
//! `indexingPolicy.includedPaths` names (DESIGN.md §"Secondary indexes").
//!
//! - `policy.rs`: the Cosmos path strings and which of them are indexed.
//! - `encode.rs`: the order-preserving encoding of indexed values.
//! - this file: [`IndexSet`] (one per container: per path a `BTreeMap` from encoded value to
//!   the item keys holding it, each with a version count and an expiry mark, and per item key
//!   the versions whose entries it holds), the [`Registry`]
//!   of a database's index sets, and the write and query protocols.
//!
//! The index is derived state: never persisted, built from the key directory when a container
//! is first opened in the process, kept in step by the document layer's writes.
//!
//! Invariants (the consistency argument is DESIGN.md's):
//! 1. A write's version is *queued* before the write is applied (in its check or plan, under
//!    the engine's log mutex, so versions get ids in the order the key directory applies
//!    them) and its settle is queued after it returns; the queue is applied in that order, so
//!    an older version's entries are removed only *after* a newer write is applied. Whoever
//!    looks at the tables applies the queue first ([`IndexSet::current`]), so to a reader the
//!    index holds an entry for every version that is, or may yet become, visible.
//! 2. A query applies the queue, registers its reader (its scan start and `now`) while no
//!    write can queue, and takes its candidates under the same hold of the index lock; then it
//!    reads the candidates through the key directory and runs the whole WHERE on what it
//!    read. An index entry therefore never decides a row by itself: superfluous entries cost a
//!    read, never a wrong row. An exact count that consults the key directory keeps writes
//!    from queueing until it has.
//! 3. Memory follows the key directory: a superseded version goes when its successor's
//!    settle is applied, a version with no indexed value is not kept, keys the key directory
//!    no longer holds (expired and reaped) are swept when the index has doubled since the last
//!    sweep and at [`Database::maintain`](crate::Database::maintain), and the queue is applied
//!    by the indexer thread once it holds [`WAKE_AT`] changes, by the writer itself past
//!    [`APPLY_AT`].
//! 4. A write whose outcome is unknown (an error after its version was queued) marks the set
//!    broken; queries then scan until it is rebuilt (at the next open of the container).

pub(crate) mod encode;
mod keyhash;
pub(crate) mod policy;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use serde_json::Value;
use smallvec::SmallVec;

use self::keyhash::KeyHash;
use crate::engine::{KeyList, Keyspace, Picked};
use crate::error::Result;
use crate::ttl::{DefaultTtl, ItemTtl};

/// What a query asks of one indexed path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Probe {
    /// Equal to one of these scalars (`=`, `IN`).
    Values(Vec<Value>),
    /// Within these inclusive bounds, in the type of the bound(s) (`<`, `<=`, `>`, `>=`,
    /// `BETWEEN`).
    Range {
        lo: Option<Value>,
        hi: Option<Value>,
    },
    /// A string starting with this (`STARTSWITH`, case-sensitive).
    Prefix(String),
}

type Ranges = Vec<(Bound<Vec<u8>>, Bound<Vec<u8>>)>;

/// The first and one-past-the-last tag of the type class `t` belongs to (booleans are one
/// class: `false < true` compare).
fn type_class(t: u8) -> (u8, u8) {
    match t {
        encode::FALSE | encode::TRUE => (encode::FALSE, encode::TRUE + 1),
        t => (t, t + 1),
    }
}

impl Probe {
    /// The encoded key ranges of the probe (supersets: every matching value lies inside).
    fn ranges(&self) -> Ranges {
        let enc = |v: &Value| {
            let mut b = Vec::new();
            encode::encode(v, &mut b).then_some(b)
        };
        let prefix_range = |p: Vec<u8>| {
            let end = encode::prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
            (Bound::Included(p), end)
        };
        match self {
            Probe::Values(vs) => vs.iter().filter_map(enc).map(prefix_range).collect(),
            Probe::Prefix(p) => {
                let mut b = vec![encode::STRING];
                encode::encode_str_body(p, &mut b);
                vec![prefix_range(b)]
            }
            Probe::Range { lo, hi } => {
                let lo_tag = lo.as_ref().and_then(encode::tag);
                let hi_tag = hi.as_ref().and_then(encode::tag);
                let class = match (lo_tag, hi_tag) {
                    (Some(t), _) | (None, Some(t)) => type_class(t),
                    (None, None) => return Vec::new(),
                };
                let start = match (lo, lo_tag) {
                    (Some(v), Some(_)) => enc(v).map_or(Bound::Unbounded, Bound::Included),
                    _ => Bound::Included(vec![class.0]),
                };
                let end = match (hi, hi_tag) {
                    (Some(v), Some(t)) if type_class(t) == class => enc(v)
                        .and_then(|b| encode::prefix_end(&b))
                        .map_or(Bound::Unbounded, Bound::Excluded),
                    _ => Bound::Excluded(vec![class.1]),
                };
                vec![(start, end)]
            }
        }
    }
}

/// One version of an item as the index holds it: the id its write was given, whether that
/// write is still in flight, its encoded value per path (`ABSENT` where not indexed), and
/// whether its own `ttl` could make it expire (a number of seconds, or not readable).
#[derive(Debug)]
struct Version {
    id: u64,
    pending: bool,
    enc: Encoded,
    may_expire: bool,
}

/// A version's encoded values, one per path: inline up to 32 bytes (three short scalars),
/// so staging a version allocates nothing for them.
type Encoded = SmallVec<[u8; 32]>;

/// Whether the item `doc` (as stored) could expire by its own `ttl`: the same field, read the
/// same way, that gave its record its own TTL. Absent or `-1` cannot; anything else might.
fn may_expire(doc: Option<&Value>) -> bool {
    doc.is_some_and(|d| {
        !matches!(
            crate::doc::validate::parse_item_ttl(d.get("ttl")),
            Ok(ItemTtl::Inherit | ItemTtl::Never)
        )
    })
}

/// The item keys holding one value at one path, with their version counts (and the
/// [`MAY_EXPIRE`] mark). Unordered: a
/// query sorts the candidates it collects (several values or ranges need merging anyway), and
/// an insert is a hash, not a search comparing keys that share long prefixes. A value held by
/// one key (a unique number, an id-like field) keeps it inline: no table to allocate, hash
/// or free per write.
#[derive(Debug)]
enum Postings {
    One(ItemKey, u32),
    // Boxed so the common form stays 24 bytes in the tree's nodes (a table inline is 48).
    #[allow(clippy::box_collection)]
    Many(Box<HashMap<ItemKey, u32, KeyHash>>),
}

/// Set in a posting's count once a version that might expire (by its own `ttl`) held the
/// value, and kept until no version of the key holds it: an exact count looks such a key up
/// in the key directory, and one marked needlessly costs only that lookup.
const MAY_EXPIRE: u32 = 1 << 31;

/// A posting count's [`MAY_EXPIRE`] mark for a version that might expire or not.
fn mark(expires: bool) -> u32 {
    if expires {
        MAY_EXPIRE
    } else {
        0
    }
}

impl Postings {
    /// The postings of a value one version of `key` holds.
    fn one(key: &ItemKey, expires: bool) -> Self {
        Postings::One(Arc::clone(key), 1 | mark(expires))
    }

    /// Counts one more version of `key` holding this value (`expires`: that version might
    /// expire).
    fn add(&mut self, key: &ItemKey, hash: KeyHash, expires: bool) {
        let mark = mark(expires);
        match self {
            Postings::One(k, n) if **k == **key => *n = (*n + 1) | mark,
            Postings::One(k, n) => {
                let mut m = HashMap::with_capacity_and_hasher(2, hash);
                m.insert(Arc::clone(k), *n);
                m.insert(Arc::clone(key), 1 | mark);
                *self = Postings::Many(Box::new(m));
            }
            Postings::Many(m) => match m.get_mut(&**key) {
                Some(n) => *n = (*n + 1) | mark,
                None => {
                    m.insert(Arc::clone(key), 1 | mark);
                }
            },
        }
    }

    /// Counts one version of `key` fewer; true when no key holds the value any more.
    fn remove(&mut self, key: &[u8]) -> bool {
        match self {
            Postings::One(k, n) => {
                if **k == *key {
                    *n -= 1;
                }
                *n & !MAY_EXPIRE == 0
            }
            Postings::Many(m) => {
                if let Some(n) = m.get_mut(key) {
                    *n -= 1;
                    if *n & !MAY_EXPIRE == 0 {
                        m.remove(key);
                    }
                }
                m.is_empty()
            }
        }
    }

    /// The keys with whether a version that might expire held the value.
    fn marked(&self) -> impl Iterator<Item = (&ItemKey, bool)> {
        let (one, many) = match self {
            Postings::One(k, n) => (Some((k, n)), None),
            Postings::Many(m) => (None, Some(m.iter())),
        };
        one.into_iter()
            .chain(many.into_iter().flatten())
            .map(|(k, n)| (k, n & MAY_EXPIRE != 0))
    }

    fn keys(&self) -> impl Iterator<Item = &ItemKey> {
        let (one, many) = match self {
            Postings::One(k, _) => (Some(k), None),
            Postings::Many(m) => (None, Some(m.keys())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    fn len(&self) -> usize {
        match self {
            Postings::One(..) => 1,
            Postings::Many(m) => m.len(),
        }
    }
}

/// An encoded value as a tree key: inline up to 16 bytes (a number takes 9, a short string
/// its length plus 3), so the comparisons of a search stay in the tree's nodes instead of
/// following a pointer per key.
type ValueKey = SmallVec<[u8; 16]>;

/// An item key, allocated once per tracked key and shared by its postings on every path.
pub(crate) type ItemKey = Arc<[u8]>;

/// The candidates of one indexed value: its encoding and the item keys holding it.
pub(crate) type Group = (Box<[u8]>, Vec<ItemKey>);

#[derive(Debug, Default)]
struct Tables {
    /// Per path: encoded value → item key → how many versions hold that entry (two levels:
    /// a value's bytes are stored once, and a value is found by one ordered search).
    trees: Vec<BTreeMap<ValueKey, Postings>>,
    /// Item key → the versions with entries (oldest first; usually one).
    by_key: HashMap<ItemKey, SmallVec<[Version; 1]>, KeyHash>,
    /// The keys of `by_key` that have a pending or more than one version (the writes in
    /// flight and those the indexer has not caught up with: few), so that an exact count can
    /// tell a key with one settled version without looking it up in `by_key`.
    unsure: HashSet<ItemKey, KeyHash>,
    /// Sweep when `by_key` grows past this.
    sweep_at: usize,
    /// The key directory's departure count the last complete sweep dealt with (read when it
    /// began): with no key gone since, a sweep would find nothing and is skipped.
    swept_departures: u64,
    /// The hash keys of every postings map (drawn once: a new value's map is cheap).
    hash: KeyHash,
}

/// The secondary indexes of one container.
#[derive(Debug)]
pub(crate) struct IndexSet {
    paths: Vec<Vec<String>>,
    /// Built and not broken: queries may use it.
    ready: AtomicBool,
    /// A write's outcome was unknown: rebuild before use.
    broken: AtomicBool,
    /// Replaced or removed (set under the engine's log mutex): writes no longer stage here,
    /// so a query that planned with it and registers after this must not use it.
    retired: AtomicBool,
    t: RwLock<Tables>,
    /// The container's keyspace (the sweep looks keys up in its key directory).
    ks: Keyspace,
    /// The next version id (0 is the build's); taken under the engine's log mutex, so ids
    /// follow the order in which the key directory applies the writes.
    next: AtomicU64,
    /// Staged versions and settles not yet applied to `t`, in the order they happened (a
    /// version is queued under the log mutex before its write is applied, its settle after).
    /// Readers apply the queue before they look (see [`IndexSet::current`]); the database's
    /// indexer thread applies it in the background, and a writer finding it long applies it
    /// itself.
    pending: Mutex<VecDeque<Pending>>,
    /// The indexer has been asked to apply the queue and has not started yet.
    woken: AtomicBool,
}

/// A change to the index tables waiting in [`IndexSet::pending`].
#[derive(Debug)]
enum Pending {
    /// A version about to be applied.
    Stage(ItemKey, Version),
    /// The write of version `id` of the key returned.
    Settle(ItemKey, u64),
}

/// Queue length at which a writer wakes the indexer.
const WAKE_AT: usize = 512;
/// Queue length at which a writer applies the queue itself (the indexer is behind).
const APPLY_AT: usize = 1 << 16;
/// Queue entries applied per hold of the tables' lock by the indexer.
const APPLY_CHUNK: usize = 2048;
/// A reader applies what is left while holding the queue (writers wait to stage) once this
/// little is left, so it finishes however fast writers queue.
const FINAL_AT: usize = 256;

const MIN_SWEEP: usize = 4096;

/// The value at `path` in `doc`, if any.
fn at_path<'v>(doc: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(doc, |v, seg| v.get(seg))
}

/// The values of an encoded version, one slice per path.
fn split(enc: &[u8], n: usize) -> SmallVec<[&[u8]; 4]> {
    let mut out = SmallVec::new();
    let mut rest = enc;
    for _ in 0..n {
        let len = encode::encoded_len(rest).unwrap_or(rest.len());
        let (v, r) = rest.split_at(len.min(rest.len()));
        out.push(v);
        rest = r;
    }
    out
}

impl IndexSet {
    fn new(paths: Vec<Vec<String>>, ks: Keyspace) -> Self {
        let trees = paths.iter().map(|_| BTreeMap::new()).collect();
        Self {
            paths,
            ready: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            t: RwLock::new(Tables {
                trees,
                sweep_at: MIN_SWEEP,
                ..Tables::default()
            }),
            ks,
            next: AtomicU64::new(1),
            pending: Mutex::new(VecDeque::new()),
            woken: AtomicBool::new(false),
        }
    }

    /// The indexed paths (property names from the item's root).
    pub(crate) fn paths(&self) -> &[Vec<String>] {
        &self.paths
    }

    /// True when queries may use the set. A query checks again after it registered its
    /// reader (candidates, walk or count taken): a set retired before that point missed
    /// writes the reader must see, and the query scans instead.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
            && !self.broken.load(Ordering::Acquire)
            && !self.retired.load(Ordering::SeqCst)
    }

    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    fn encode_doc(&self, doc: Option<&Value>) -> Encoded {
        let mut out = Encoded::new();
        for p in &self.paths {
            let found = doc.and_then(|d| at_path(d, p));
            if !found.is_some_and(|v| encode::encode(v, &mut out)) {
                out.push(encode::ABSENT);
            }
        }
        out
    }

    fn add_entries(&self, t: &mut Tables, key: &ItemKey, enc: &[u8], expires: bool) {
        let hash = t.hash;
        for (tree, v) in t.trees.iter_mut().zip(split(enc, self.paths.len())) {
            if v.first().is_some_and(|&b| b != encode::ABSENT) {
                match tree.get_mut(v) {
                    Some(p) => p.add(key, hash, expires),
                    None => {
                        tree.insert(ValueKey::from_slice(v), Postings::one(key, expires));
                    }
                }
            }
        }
    }

    fn remove_entries(&self, t: &mut Tables, key: &[u8], enc: &[u8]) {
        for (tree, v) in t.trees.iter_mut().zip(split(enc, self.paths.len())) {
            if v.first().is_some_and(|&b| b != encode::ABSENT) {
                let Some(postings) = tree.get_mut(v) else {
                    continue;
                };
                if postings.remove(key) {
                    tree.remove(v);
                }
            }
        }
    }

    fn all_absent(enc: &[u8]) -> bool {
        enc.iter().all(|&b| b == encode::ABSENT)
    }

    /// Brings `key`'s membership of [`Tables::unsure`] in step with its versions, after they
    /// changed: a member while it has a pending or more than one version.
    fn track(t: &mut Tables, key: &[u8]) {
        match t.by_key.get_key_value(key) {
            Some((k, list)) if is_unsure(list) => {
                if !t.unsure.contains(key) {
                    t.unsure.insert(Arc::clone(k));
                }
            }
            _ => {
                t.unsure.remove(key);
            }
        }
    }

    /// Queues the version a write is about to apply (`None`: a delete). Called under the
    /// engine's log mutex, before the write is appended. Returns the key's allocation and
    /// the version's id, for its settle.
    fn stage(&self, key: &[u8], doc: Option<&Value>) -> (ItemKey, u64) {
        let v = Version {
            id: 0,
            pending: true,
            enc: self.encode_doc(doc),
            may_expire: may_expire(doc),
        };
        let key: ItemKey = Arc::from(key);
        let mut q = self.pending.lock();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        q.push_back(Pending::Stage(Arc::clone(&key), Version { id, ..v }));
        (key, id)
    }

    /// Applies queued changes, in order.
    fn apply(&self, t: &mut Tables, ops: impl IntoIterator<Item = Pending>) {
        for op in ops {
            match op {
                Pending::Stage(key, v) => self.apply_stage(t, &key, v),
                Pending::Settle(key, id) => self.apply_settle(t, &key, id),
            }
        }
    }

    /// Adds a staged version's entries. A tracked key's allocation is shared by all of them.
    fn apply_stage(&self, t: &mut Tables, key: &ItemKey, v: Version) {
        if let Some((shared, _)) = t.by_key.get_key_value(&**key) {
            let shared = Arc::clone(shared);
            self.add_entries(t, &shared, &v.enc, v.may_expire);
            if let Some(list) = t.by_key.get_mut(&**key) {
                list.push(v);
            }
        } else {
            self.add_entries(t, key, &v.enc, v.may_expire);
            t.by_key.insert(Arc::clone(key), smallvec::smallvec![v]);
        }
        Self::track(t, key);
    }

    /// After version `id` of `key` was applied: the key's older versions go, this one is
    /// settled (and dropped if it holds no entry, once the set is built).
    fn apply_settle(&self, t: &mut Tables, key: &[u8], id: u64) {
        let built = self.ready.load(Ordering::Acquire);
        let Some(list) = t.by_key.get_mut(key) else {
            return;
        };
        // The usual case, in place: the key's one version is this write's.
        if let [v] = list.as_mut_slice() {
            if v.id == id && !(built && Self::all_absent(&v.enc)) {
                v.pending = false;
                t.unsure.remove(key);
                return;
            }
        }
        let mut old: SmallVec<[Version; 1]> = SmallVec::new();
        let mut keep: SmallVec<[Version; 1]> = SmallVec::new();
        for v in list.drain(..) {
            if v.id < id {
                old.push(v);
            } else if v.id == id {
                if !(built && Self::all_absent(&v.enc)) {
                    keep.push(Version {
                        pending: false,
                        ..v
                    });
                }
            } else {
                keep.push(v);
            }
        }
        if keep.is_empty() {
            t.by_key.remove(key);
        } else {
            *list = keep;
        }
        Self::track(t, key);
        for v in old {
            self.remove_entries(t, key, &v.enc);
        }
    }

    /// Queues the settles of the versions in `staged` (their writes returned). Returns the
    /// queue's length.
    fn settle(&self, staged: Vec<(ItemKey, u64)>) -> usize {
        let mut q = self.pending.lock();
        q.extend(staged.into_iter().map(|(k, id)| Pending::Settle(k, id)));
        q.len()
    }

    /// Applies everything queued so far, a chunk per hold of the tables' lock, then sweeps
    /// if the set has grown enough (the indexer's work, and a writer's when it is behind).
    fn catch_up(&self) {
        self.woken.store(false, Ordering::Release);
        loop {
            let mut t = self.t.write();
            let chunk: Vec<Pending> = {
                let mut q = self.pending.lock();
                let n = q.len().min(APPLY_CHUNK);
                q.drain(..n).collect()
            };
            let done = chunk.len() < APPLY_CHUNK;
            self.apply(&mut t, chunk);
            self.sweep_if_grown(&mut t, None);
            if done {
                return;
            }
            parking_lot::RwLockWriteGuard::unlock_fair(t);
        }
    }

    /// Applies everything queued now, in one go (the build's flushes).
    fn apply_queued(&self, t: &mut Tables) {
        let all = std::mem::take(&mut *self.pending.lock());
        self.apply(t, all);
    }

    /// The tables with every change queued so far applied, and `then` run while nothing can
    /// be queued (so a reader registered in it sees exactly the writes whose versions the
    /// tables hold: invariant 2). Writers wait to stage only while the last few queued
    /// changes are applied.
    fn current<R>(&self, then: impl FnOnce() -> R) -> (RwLockReadGuard<'_, Tables>, R) {
        let (t, q, r) = self.current_held(then);
        drop(q);
        (t, r)
    }

    /// As [`IndexSet::current`], with the (empty) queue still held: no write can stage
    /// until it is let go, so none is in flight for a key whose one version is settled.
    fn current_held<R>(
        &self,
        then: impl FnOnce() -> R,
    ) -> (
        RwLockReadGuard<'_, Tables>,
        MutexGuard<'_, VecDeque<Pending>>,
        R,
    ) {
        // Nothing queued (the indexer kept up): readers share the tables.
        {
            let t = self.t.read();
            let q = self.pending.lock();
            if q.is_empty() {
                let r = then();
                return (t, q, r);
            }
        }
        let mut t = self.t.write();
        loop {
            let mut q = self.pending.lock();
            if q.len() <= FINAL_AT {
                self.apply(&mut t, q.drain(..));
                self.sweep_if_grown(&mut t, Some(&q));
                let r = then();
                return (RwLockWriteGuard::downgrade(t), q, r);
            }
            let n = q.len().min(APPLY_CHUNK);
            let chunk: Vec<Pending> = q.drain(..n).collect();
            drop(q);
            self.apply(&mut t, chunk);
            self.sweep_if_grown(&mut t, None);
        }
    }

    /// Sweeps once the set has doubled since the last sweep (checked wherever queued changes
    /// are applied, so it does not depend on who applies them). `held`: the queue, if the
    /// caller holds it (see [`IndexSet::sweep_locked`]).
    fn sweep_if_grown(&self, t: &mut Tables, held: Option<&VecDeque<Pending>>) {
        if self.ready.load(Ordering::Acquire) && t.by_key.len() > t.sweep_at {
            self.sweep_locked(t, held);
        }
    }

    /// Drops the settled versions of keys the key directory no longer holds (expired and
    /// reaped, or removed behind the document layer's back). The caller holds the tables, and
    /// the queue when it passes it as `held` (else it is taken here, briefly).
    fn sweep_locked(&self, t: &mut Tables, held: Option<&VecDeque<Pending>>) {
        // During the build an entry-less settled version is the build's only sign that a
        // write came after its scan read the key: a sweep must not take it away.
        if !self.ready.load(Ordering::Acquire) {
            return;
        }
        let ks = &self.ks;
        // Every tracked key was in the key directory when its version settled (or the build
        // read it); one that is gone left it since, and leaving counts a departure. Read
        // before the walk, so a key leaving during it is caught by the next sweep.
        let departures = ks.core().state.read().departures;
        if departures == t.swept_departures {
            t.sweep_at = (t.by_key.len() * 2).max(MIN_SWEEP);
            return;
        }
        // The departures counted so far are dealt with only if none of their writes is still
        // queued (its versions arrive later) and no gone key keeps a pending version (settled
        // later): otherwise the next sweep must look again, however few keys leave meanwhile.
        // Looked at after reading the count: a write stages before it is applied, so one whose
        // departure was counted has its versions queued by then.
        let mut settled_all = match held {
            Some(q) => q.is_empty(),
            None => self.pending.lock().is_empty(),
        };
        // Only the keys that are gone are copied (a reference count each); the key directory
        // is looked up under its read lock 1,024 keys at a time.
        let mut gone: Vec<ItemKey> = Vec::new();
        {
            let mut keys = t.by_key.keys();
            loop {
                let st = ks.core().state.read();
                let mut n = 0;
                for k in keys.by_ref() {
                    if !st.contains(k.as_ref()) {
                        gone.push(Arc::clone(k));
                    }
                    n += 1;
                    if n == 1024 {
                        break;
                    }
                }
                if n < 1024 {
                    break;
                }
            }
        }
        for k in gone {
            let Some(list) = t.by_key.remove(k.as_ref()) else {
                continue;
            };
            let mut keep: SmallVec<[Version; 1]> = SmallVec::new();
            for v in list {
                if v.pending {
                    keep.push(v);
                } else {
                    self.remove_entries(t, &k, &v.enc);
                }
            }
            if !keep.is_empty() {
                settled_all = false;
                t.by_key.insert(Arc::clone(&k), keep);
            }
            Self::track(t, &k);
        }
        if settled_all {
            t.swept_departures = departures;
        }
        t.sweep_at = (t.by_key.len() * 2).max(MIN_SWEEP);
    }

    /// Sweeps now (see [`IndexSet::settle`]).
    fn sweep(&self) {
        drop(self.current(|| ()));
        let mut t = self.t.write();
        self.sweep_locked(&mut t, None);
    }

    /// The build: every live item of the keyspace, read after the set was registered (so
    /// every later write stages its own version). A key some write already staged is skipped:
    /// that write's version is at least as new as what the scan read. `walk` false: the
    /// keyspace held no entry at the registration, so there is nothing to read and its key
    /// directory is not walked (which would order it).
    fn build(&self, walk: bool) -> Result<()> {
        let ks = &self.ks;
        // (item key, encoded values, may expire)
        type Built = (Vec<u8>, Encoded, bool);
        let mut batch: Vec<Built> = Vec::new();
        let flush = |batch: &mut Vec<Built>| {
            // Writes staged so far first: a key a write staged is skipped.
            let mut t = self.t.write();
            self.apply_queued(&mut t);
            for (key, enc, may_expire) in batch.drain(..) {
                if Self::all_absent(&enc) || t.by_key.contains_key(key.as_slice()) {
                    continue;
                }
                let shared: ItemKey = Arc::from(key.as_slice());
                self.add_entries(&mut t, &shared, &enc, may_expire);
                t.by_key.entry(shared).or_default().push(Version {
                    id: 0,
                    pending: false,
                    enc,
                    may_expire,
                });
            }
        };
        // `walk` false: the keyspace held nothing when the set was registered.
        if walk {
            for kv in ks.iter() {
                let (key, bytes) = kv?;
                // A stored item that does not parse indexes nothing; counted as one that might
                // expire, so a count looks it up.
                let (doc, expires) = match super::stored::parse::<Value>(&bytes) {
                    Ok(v) => {
                        let expires = may_expire(Some(&v));
                        (v, expires)
                    }
                    Err(_) => (Value::Null, true),
                };
                batch.push((key, self.encode_doc(Some(&doc)), expires));
                if batch.len() >= 1024 {
                    flush(&mut batch);
                }
            }
        }
        flush(&mut batch);
        // Writes during the build kept their entry-less versions (so the build could tell
        // the key was written); they go now.
        let mut t = self.t.write();
        self.apply_queued(&mut t);
        t.by_key.retain(|_, list| {
            list.retain(|v| v.pending || !Self::all_absent(&v.enc));
            !list.is_empty()
        });
        let unsure = t
            .by_key
            .iter()
            .filter(|(_, list)| is_unsure(list))
            .map(|(k, _)| Arc::clone(k))
            .collect::<Vec<_>>();
        t.unsure.clear();
        t.unsure.extend(unsure);
        t.sweep_at = (t.by_key.len() * 2).max(MIN_SWEEP);
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// The candidate keys of `probe` on path `path` that `keep` accepts, sorted and distinct,
    /// and a reader registered under the same hold of the lock (invariant 2).
    pub(crate) fn candidates(
        &self,
        path: usize,
        probe: &Probe,
        keep: impl Fn(&[u8]) -> bool,
    ) -> (Picked, KeyList) {
        let ranges = probe.ranges();
        let (t, picked) = self.current(|| self.ks.picked());
        let mut keys = KeyList::default();
        if let Some(tree) = t.trees.get(path) {
            for (lo, hi) in &ranges {
                let bounds = (
                    lo.as_ref().map(Vec::as_slice),
                    hi.as_ref().map(Vec::as_slice),
                );
                if empty_range(&bounds) {
                    continue;
                }
                for (_, postings) in tree.range::<[u8], _>(bounds) {
                    for k in postings.keys().filter(|k| keep(k)) {
                        keys.push(k);
                    }
                }
            }
        }
        drop(t);
        keys.sort_dedup();
        (picked, keys)
    }

    /// An index walk of `probe` on `path` in value order (descending with `desc`), a reader
    /// registered under the same hold of the lock as the walk's first groups (invariant 2),
    /// and those groups. [`Walk::more`] takes the next ones, a hold of the lock each.
    pub(crate) fn ordered(
        &self,
        path: usize,
        probe: &Probe,
        desc: bool,
        keep: &dyn Fn(&[u8]) -> bool,
    ) -> (Picked, Walk, Vec<Group>) {
        let mut ranges = disjoint(probe.ranges());
        if desc {
            ranges.reverse();
        }
        let mut walk = Walk {
            path,
            ranges,
            desc,
            at: 0,
            after: None,
            batch: WALK_FIRST,
        };
        let (t, picked) = self.current(|| self.ks.picked());
        let first = walk.collect(&t, keep);
        (picked, walk, first)
    }

    /// `COUNT` of the live items whose value at `path` satisfies `probe` exactly, without
    /// reading an item where the index is known to hold the item's current version (one
    /// settled version); the others are returned with a registered reader, to be read and
    /// filtered by the caller.
    pub(crate) fn count(
        &self,
        path: usize,
        probe: &Probe,
        keep: impl Fn(&[u8]) -> bool,
    ) -> (usize, Picked, KeyList) {
        let ranges = disjoint(probe.ranges());
        // The queue stays held until the key directory was consulted: a write staged after
        // the registration could otherwise be applied in between and change what a settled
        // version's lookup says about a snapshot that must not see it.
        let (t, queue, picked) = self.current_held(|| self.ks.picked());
        let now = picked.now();
        let mut n = 0usize;
        let mut unsure = KeyList::default();
        if let Some(tree) = t.trees.get(path) {
            // The key directory under one read lock: a consistent cut (writes are held at the
            // index lock meanwhile, and none is in flight for a key with one settled version).
            let st = self.ks.core().state.read();
            // A settled version that can expire neither by a default (none of the container's
            // settings was a number of seconds) nor by its own `ttl` is the key's current,
            // live version: counted without a lookup (a delete or a newer write would have
            // staged a second version; nothing else removes a key that cannot expire).
            // A failed write marks the set broken before it settles its version (whose write
            // may not have been applied): from then on every key is looked up.
            let lookup_all = self.broken.load(Ordering::Acquire)
                || st
                    .history
                    .iter()
                    .any(|c| matches!(c.default, DefaultTtl::Seconds(_)));
            // The ranges are disjoint and a key with one settled version holds one value, so
            // such a key comes once and is counted where it is met, by neither hashing nor
            // reading it (`unsure` is empty unless writes are in flight). The rest are
            // gathered, deduplicated (a key with several versions may come more than once)
            // and sorted: consecutive lookups in key order share the key directory's nodes.
            let mut look: Vec<&[u8]> = Vec::new();
            for (lo, hi) in &ranges {
                let bounds = (
                    lo.as_ref().map(Vec::as_slice),
                    hi.as_ref().map(Vec::as_slice),
                );
                for (_, postings) in tree.range::<[u8], _>(bounds) {
                    for (key, expires) in postings.marked() {
                        if !keep(key) {
                            continue;
                        }
                        if lookup_all
                            || expires
                            || (!t.unsure.is_empty() && t.unsure.contains(&**key))
                        {
                            look.push(key);
                        } else {
                            n += 1;
                        }
                    }
                }
            }
            look.sort_unstable();
            look.dedup();
            for key in look {
                match t.by_key.get(key).map(SmallVec::as_slice) {
                    Some([v]) if !v.pending => {
                        if (!lookup_all && !v.may_expire) || st.live(key, now).is_some() {
                            n += 1;
                        }
                    }
                    _ => unsure.push(key),
                }
            }
        }
        drop(queue);
        drop(t);
        (n, picked, unsure)
    }

    /// Entries held (all paths) and item keys tracked, for tests and the design note.
    pub(crate) fn size(&self) -> (usize, usize) {
        let (t, ()) = self.current(|| ());
        let entries = t
            .trees
            .iter()
            .flat_map(BTreeMap::values)
            .map(Postings::len)
            .sum();
        (entries, t.by_key.len())
    }
}

/// `ranges` (from [`Probe::ranges`]) in order, without repeats or empty ones: disjoint.
/// `IN` lists its values in its own order and may repeat one; encodings are self-delimiting,
/// so the prefix ranges of distinct values are disjoint, and a probe of bounds has one range.
fn disjoint(mut ranges: Ranges) -> Ranges {
    ranges.sort_by(|a, b| bound_cmp(&a.0, &b.0));
    ranges.dedup();
    ranges.retain(|(lo, hi)| {
        !empty_range(&(
            lo.as_ref().map(Vec::as_slice),
            hi.as_ref().map(Vec::as_slice),
        ))
    });
    ranges
}

/// Orders lower bounds (ranges from `Probe::ranges` start included or unbounded).
fn bound_cmp(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> std::cmp::Ordering {
    let key = |x: &Bound<Vec<u8>>| match x {
        Bound::Unbounded => None,
        Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
    };
    key(a).cmp(&key(b))
}

/// True while a key belongs in [`Tables::unsure`]: its versions are not one settled one.
fn is_unsure(versions: &[Version]) -> bool {
    !matches!(versions, [v] if !v.pending)
}

/// Where an index walk in value order stands: the probe's ranges in walk order, the range
/// being walked and the last value taken from it.
#[derive(Debug)]
pub(crate) struct Walk {
    path: usize,
    ranges: Ranges,
    desc: bool,
    at: usize,
    after: Option<Vec<u8>>,
    /// How many item keys the next hold of the lock takes (whole groups: at least one):
    /// [`WALK_FIRST`], doubling up to [`WALK_BATCH`].
    batch: usize,
}

/// How many item keys a walk takes per hold of the lock, once under way.
const WALK_BATCH: usize = 128;

/// How many the first hold takes: a `TOP 10` reads about that many, and each group taken
/// costs a copy of its keys (taking 128 made a `TOP 10 … ORDER BY` on an indexed path
/// 0.04 ms against SQLite's 0.01).
const WALK_FIRST: usize = 16;

impl Walk {
    /// The next groups (see [`IndexSet::ordered`]); empty when the walk is over.
    pub(crate) fn more(&mut self, set: &IndexSet, keep: &dyn Fn(&[u8]) -> bool) -> Vec<Group> {
        let (t, ()) = set.current(|| ());
        self.collect(&t, keep)
    }

    /// True if encoded `a` comes after encoded `b` in the walk's order.
    pub(crate) fn is_after(&self, a: &[u8], b: &[u8]) -> bool {
        if self.desc {
            a < b
        } else {
            a > b
        }
    }

    fn collect(&mut self, t: &Tables, keep: &dyn Fn(&[u8]) -> bool) -> Vec<Group> {
        let mut out: Vec<Group> = Vec::new();
        let mut taken = 0;
        let batch = self.batch;
        self.batch = (batch * 2).min(WALK_BATCH);
        let Some(tree) = t.trees.get(self.path) else {
            return out;
        };
        while let Some((lo, hi)) = self.ranges.get(self.at) {
            let (mut lo, mut hi) = (
                lo.as_ref().map(Vec::as_slice),
                hi.as_ref().map(Vec::as_slice),
            );
            if let Some(after) = &self.after {
                if self.desc {
                    hi = Bound::Excluded(after.as_slice());
                } else {
                    lo = Bound::Excluded(after.as_slice());
                }
            }
            let mut full = false;
            if !empty_range(&(lo, hi)) {
                let range = tree.range::<[u8], _>((lo, hi));
                let groups: Box<dyn Iterator<Item = (&ValueKey, &Postings)>> = if self.desc {
                    Box::new(range.rev())
                } else {
                    Box::new(range)
                };
                for (value, postings) in groups {
                    let keys: Vec<ItemKey> = postings.keys().filter(|k| keep(k)).cloned().collect();
                    self.after = Some(value.to_vec());
                    if !keys.is_empty() {
                        taken += keys.len();
                        out.push((value.as_slice().into(), keys));
                    }
                    if taken >= batch {
                        full = true;
                        break;
                    }
                }
            }
            if full {
                break;
            }
            self.at += 1;
            self.after = None;
        }
        out
    }
}

/// True for bounds `BTreeMap::range` would panic on (start after end).
fn empty_range(b: &(Bound<&[u8]>, Bound<&[u8]>)) -> bool {
    match b {
        (Bound::Included(a), Bound::Included(z)) => a > z,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(z))
        | (Bound::Excluded(a), Bound::Included(z)) => a >= z,
        _ => false,
    }
}

/// The index sets of a database's containers, by keyspace id.
type Sets = Mutex<HashMap<u32, Arc<IndexSet>>>;

/// The index sets of a database's containers, and the indexer thread that applies their
/// queued changes.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    sets: Arc<Sets>,
    /// Serialises builds (one container's build at a time).
    building: Mutex<()>,
    /// Started by the first wake; `None` inside once it could not be started.
    indexer: Mutex<Option<Indexer>>,
    /// Test hook (`Database::pause_indexer`): writers do not wake the indexer.
    pub(crate) paused: AtomicBool,
}

/// The thread `ebbdb-indexer`: applies a set's queue when a writer asks (by keyspace id).
#[derive(Debug)]
struct Indexer {
    tx: Option<crossbeam_channel::Sender<u32>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Ends and joins the indexer before the sets (and the keyspace handles it may hold
        // while it works) go, so the store is closed by whoever drops the database.
        if let Some(mut ix) = self.indexer.lock().take() {
            drop(ix.tx.take());
            if let Some(t) = ix.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Registry {
    /// Asks the indexer to apply the queue of keyspace `ks_id`'s set. False if there is no
    /// indexer (it could not be started, or it stopped): the caller applies it itself.
    fn wake(&self, ks_id: u32) -> bool {
        let mut ix = self.indexer.lock();
        if ix.is_none() {
            let (tx, rx) = crossbeam_channel::unbounded::<u32>();
            let sets = Arc::clone(&self.sets);
            let spawned = std::thread::Builder::new()
                .name("ebbdb-indexer".into())
                .spawn(move || {
                    while let Ok(id) = rx.recv() {
                        let found = sets.lock().get(&id).cloned();
                        if let Some(set) = found {
                            set.catch_up();
                        }
                    }
                });
            *ix = Some(match spawned {
                Ok(t) => Indexer {
                    tx: Some(tx),
                    thread: Some(t),
                },
                Err(_) => Indexer {
                    tx: None,
                    thread: None,
                },
            });
        }
        ix.as_ref()
            .and_then(|i| i.tx.as_ref())
            .is_some_and(|tx| tx.send(ks_id).is_ok())
    }

    /// The container's index set, if it has one.
    pub(crate) fn get(&self, ks: &Keyspace) -> Option<Arc<IndexSet>> {
        self.sets.lock().get(&ks.core().id).map(Arc::clone)
    }

    /// Makes the container's index set index exactly `paths`, building it if it is new,
    /// changed or broken. The set is registered under the engine's log mutex (an empty
    /// planned write), so every write applied after it stages into it, and every write
    /// applied before it is seen by the build's scan.
    pub(crate) fn ensure(&self, ks: &Keyspace, paths: Vec<Vec<String>>) -> Result<()> {
        let id = ks.core().id;
        let current = self.get(ks);
        let fine = |s: &Option<Arc<IndexSet>>| match s {
            Some(s) => s.paths == paths && !s.broken.load(Ordering::Acquire),
            None => paths.is_empty(),
        };
        if fine(&current) {
            return Ok(());
        }
        let _building = self.building.lock();
        if fine(&self.get(ks)) {
            return Ok(());
        }
        // The old set is retired and the new one registered under the log mutex (an empty
        // planned write): every write applied before it staged into the old set, every one
        // after it stages into the new one, and a query still holding the old set sees it
        // retired if it registers its reader after this point.
        let set = (!paths.is_empty()).then(|| Arc::new(IndexSet::new(paths, ks.clone())));
        // Whether the keyspace held no entry at the registration: every item is then written
        // after it and staged into the new set, so the build has nothing to read. Its walk in
        // key order would order a hashed key directory for good (DESIGN.md §3.1), so a
        // container created with an indexing policy would lose the hashed map's writes for
        // nothing. Looked at under the log mutex, as the registration is.
        let mut was_empty = false;
        let registered = ks.write_planned(false, |_| {
            was_empty = ks.core().state.read().map.is_empty();
            let mut sets = self.sets.lock();
            let old = match &set {
                Some(set) => sets.insert(id, Arc::clone(set)),
                None => sets.remove(&id),
            };
            if let Some(old) = old {
                old.retire();
            }
            Ok(Vec::new())
        });
        if registered.is_err() {
            // A store that refuses writes: nothing can change, queries scan.
            self.remove(id);
            return Ok(());
        }
        let Some(set) = set else {
            return Ok(()); // no paths: the old set, if any, is gone
        };
        if let Err(e) = set.build(!was_empty) {
            self.remove(id);
            return Err(e);
        }
        Ok(())
    }

    /// Forgets a container's set (deleted, or no longer to be used).
    pub(crate) fn remove(&self, ks_id: u32) {
        if let Some(old) = self.sets.lock().remove(&ks_id) {
            old.retire();
        }
    }

    /// Sweeps every set (after expiry ran).
    pub(crate) fn sweep_all(&self) {
        let sets: Vec<Arc<IndexSet>> = self.sets.lock().values().cloned().collect();
        for set in sets {
            set.sweep();
        }
    }

    /// A stage for one write (or batch) of keyspace `ks`.
    pub(crate) fn stage<'r>(&'r self, ks: &'r Keyspace) -> Stage<'r> {
        Stage {
            registry: self,
            ks,
            set: None,
            staged: Vec::new(),
        }
    }
}

/// The index side of one write: [`Stage::put`] (no document: a delete) under the engine's log
/// mutex (in the write's check or plan), then [`Stage::finish`] with the write's result.
pub(crate) struct Stage<'r> {
    registry: &'r Registry,
    ks: &'r Keyspace,
    set: Option<Arc<IndexSet>>,
    staged: Vec<(ItemKey, u64)>,
}

impl Stage<'_> {
    /// Stages the new version of `key` (`None`: deleted). Must run under the log mutex.
    pub(crate) fn put(&mut self, key: &[u8], doc: Option<&Value>) {
        if self.set.is_none() {
            match self.registry.get(self.ks) {
                Some(s) => self.set = Some(s),
                None => return,
            }
        }
        if let Some(set) = &self.set {
            self.staged.push(set.stage(key, doc));
        }
    }

    /// Settles the staged versions after the write returned `result`: applied on success;
    /// on an error the outcome is unknown and the set is marked broken (invariant 4).
    pub(crate) fn finish<T>(self, result: &Result<T>) {
        let Some(set) = self.set else { return };
        if self.staged.is_empty() {
            return;
        }
        if result.is_err() {
            set.broken.store(true, Ordering::Release);
        }
        let queued = set.settle(self.staged);
        // The indexer applies the queue off the writer's path; a writer applies it itself
        // when the indexer is missing or far behind, so the queue stays bounded.
        if queued >= APPLY_AT
            || (queued >= WAKE_AT
                && !self.registry.paused.load(Ordering::Acquire)
                && !set.woken.swap(true, Ordering::AcqRel)
                && !self.registry.wake(set.ks.core().id))
        {
            set.catch_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> ItemKey {
        Arc::from(s.as_bytes())
    }

    /// A store in `dir` with one keyspace and an index set on its path `n`, not built yet.
    fn set_on_n(dir: &std::path::Path) -> (crate::Store, Keyspace, IndexSet) {
        let store = crate::Store::open(dir).expect("open");
        let ks = store
            .create_keyspace("items", DefaultTtl::Off)
            .expect("keyspace");
        let set = IndexSet::new(vec![vec!["n".to_string()]], ks.clone());
        (store, ks, set)
    }

    /// A sweep that finds a gone key still holding a pending version does not count the
    /// departures so far as dealt with: once that version settles, the next sweep removes it
    /// even though no key left in between.
    #[test]
    fn a_sweep_meeting_a_pending_version_of_a_gone_key_leaves_the_departures_for_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_store, ks, set) = set_on_n(dir.path());
        set.build(true).expect("build");
        let doc = serde_json::json!({"n": 1});
        let departures = || ks.core().state.read().departures;
        // `a` is written, applied and settled as a document write would be.
        let (a, id) = set.stage(b"a", Some(&doc));
        ks.put(b"a", b"{}").expect("put");
        set.settle(vec![(a, id)]);
        set.apply_queued(&mut set.t.write());
        // `b`'s version is staged and in the tables, its write not applied or settled yet.
        let (b, id_b) = set.stage(b"b", Some(&doc));
        set.apply_queued(&mut set.t.write());
        // `a` leaves the key directory (a departure); a sweep now meets both keys gone.
        ks.delete(b"a").expect("delete");
        let left = departures();
        set.sweep_locked(&mut set.t.write(), None);
        {
            let t = set.t.read();
            assert!(
                !t.by_key.contains_key(&b"a"[..]),
                "settled and gone: dropped"
            );
            assert!(t.by_key.contains_key(&b"b"[..]), "pending: kept");
            assert_ne!(
                t.swept_departures, left,
                "not dealt with while one is pending"
            );
        }
        // `b`'s write turns out never to enter the key directory (it expired on arrival);
        // it settles, and the next sweep, with no new departure, still looks.
        set.settle(vec![(b, id_b)]);
        set.apply_queued(&mut set.t.write());
        assert_eq!(departures(), left);
        set.sweep_locked(&mut set.t.write(), None);
        let t = set.t.read();
        assert!(t.by_key.is_empty(), "settled and gone: dropped");
        assert!(t.trees.iter().all(BTreeMap::is_empty), "no entry left");
        assert_eq!(t.swept_departures, left);
    }

    #[test]
    fn postings_stay_small() {
        assert_eq!(std::mem::size_of::<Postings>(), 24);
    }

    #[test]
    fn postings_count_versions_per_key_across_the_inline_and_table_forms() {
        let hash = KeyHash::default();
        let (a, b) = (key("a"), key("b"));
        let mut p = Postings::One(Arc::clone(&a), 1);
        p.add(&a, hash, false);
        assert!(matches!(p, Postings::One(_, 2)));
        p.add(&b, hash, false);
        assert_eq!(p.len(), 2);
        let mut keys: Vec<&[u8]> = p.keys().map(|k| &**k).collect();
        keys.sort_unstable();
        assert_eq!(keys, [b"a", b"b"]);
        // Removing a key that holds no entry changes nothing.
        assert!(!p.remove(b"c"));
        assert!(!p.remove(b"a"));
        assert!(!p.remove(b"b"));
        assert_eq!(p.keys().count(), 1);
        assert!(p.remove(b"a"));
        let mut one = Postings::One(Arc::clone(&b), 1);
        assert!(!one.remove(b"a"));
        assert!(one.remove(b"b"));
    }

    /// The mark of a version that might expire stays with its key's posting until the last
    /// version holding the value goes, in both forms, and does not disturb the count.
    #[test]
    fn postings_keep_the_expiry_mark_until_the_keys_last_version_goes() {
        let hash = KeyHash::default();
        let (a, b) = (key("a"), key("b"));
        let marks = |p: &Postings| {
            let mut m: Vec<(Vec<u8>, bool)> = p.marked().map(|(k, e)| (k.to_vec(), e)).collect();
            m.sort();
            m
        };
        let mut p = Postings::One(Arc::clone(&a), 1);
        p.add(&a, hash, true);
        assert_eq!(marks(&p), [(b"a".to_vec(), true)]);
        assert!(!p.remove(b"a"), "one version left");
        assert_eq!(
            marks(&p),
            [(b"a".to_vec(), true)],
            "kept: one may still expire"
        );
        p.add(&b, hash, false);
        assert_eq!(marks(&p), [(b"a".to_vec(), true), (b"b".to_vec(), false)]);
        p.add(&b, hash, true);
        assert!(!p.remove(b"b"));
        assert_eq!(marks(&p), [(b"a".to_vec(), true), (b"b".to_vec(), true)]);
        assert!(!p.remove(b"b"), "a left");
        assert_eq!(marks(&p), [(b"a".to_vec(), true)]);
        assert!(p.remove(b"a"));
        // A fresh posting of an unmarked version is unmarked.
        let mut q = Postings::One(Arc::clone(&b), 1);
        q.add(&a, hash, false);
        assert!(q.marked().all(|(_, e)| !e));
    }

    /// An exact count over an `IN` list that repeats a value (`1` and `1.0` encode alike)
    /// counts a key with one settled version once, and hands back a key whose two versions
    /// hold two of the listed values once, to be read.
    #[test]
    fn a_count_meets_each_settled_key_once_and_hands_back_each_unsure_key_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_store, ks, set) = set_on_n(dir.path());
        set.build(true).expect("build");
        let write = |key: &[u8], n: i64| {
            let doc = serde_json::json!({ "n": n });
            let staged = set.stage(key, Some(&doc));
            ks.put(key, doc.to_string().as_bytes()).expect("put");
            set.settle(vec![staged]);
        };
        write(b"a", 1);
        write(b"b", 2);
        write(b"c", 3);
        // `a` moves to 2: its new version is staged (in the tables), its write in flight.
        let (_, _) = set.stage(b"a", Some(&serde_json::json!({ "n": 2 })));
        let probe = Probe::Values(vec![
            serde_json::json!(1),
            serde_json::json!(2),
            serde_json::json!(1.0),
            serde_json::json!(2),
        ]);
        let (n, _picked, unsure) = set.count(0, &probe, |_| true);
        assert_eq!(
            (n, unsure.to_vecs()),
            (1, vec![b"a".to_vec()]),
            "b counted, a to be read"
        );
        let only_c = set.count(0, &probe, |k| k == b"c");
        assert_eq!(
            (only_c.0, only_c.2.to_vecs()),
            (0, Vec::<Vec<u8>>::new()),
            "keep applies"
        );
    }

    /// `unsure` holds exactly the tracked keys with a pending or more than one version, after
    /// every kind of change to the tables: stage, settle (in place, of a newer version, of a
    /// delete), a sweep, and the build's end.
    #[test]
    fn the_unsure_keys_follow_every_change_to_the_versions() {
        fn check(set: &IndexSet) {
            let t = set.t.read();
            let mut want: Vec<&[u8]> = t
                .by_key
                .iter()
                .filter(|(_, l)| is_unsure(l))
                .map(|(k, _)| &**k)
                .collect();
            let mut have: Vec<&[u8]> = t.unsure.iter().map(|k| &**k).collect();
            want.sort_unstable();
            have.sort_unstable();
            assert_eq!(have, want);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (_store, ks, set) = set_on_n(dir.path());
        ks.put(b"old", b"{\"n\": 0}").expect("put");
        // Staged before the build reads `old`, settled after it: unsure across the build.
        let (old, id_old) = set.stage(b"old", Some(&serde_json::json!({"n": 9})));
        set.build(true).expect("build");
        check(&set);
        assert!(set.t.read().unsure.contains(&b"old"[..]));
        set.settle(vec![(old, id_old)]);
        set.apply_queued(&mut set.t.write());
        check(&set);
        let (one, two) = (serde_json::json!({"n": 1}), serde_json::json!({"n": 2}));
        let (a, id1) = set.stage(b"a", Some(&one));
        set.apply_queued(&mut set.t.write());
        check(&set);
        assert!(set.t.read().unsure.contains(&b"a"[..]), "pending");
        let (_, id2) = set.stage(b"a", Some(&two));
        let (b, id_b) = set.stage(b"b", Some(&one));
        set.apply_queued(&mut set.t.write());
        check(&set);
        // The first settle leaves the newer version pending; the second makes `a` sure.
        set.settle(vec![(Arc::clone(&a), id1)]);
        set.apply_queued(&mut set.t.write());
        check(&set);
        assert!(set.t.read().unsure.contains(&b"a"[..]));
        set.settle(vec![(Arc::clone(&a), id2), (b, id_b)]);
        set.apply_queued(&mut set.t.write());
        check(&set);
        assert!(set.t.read().unsure.is_empty());
        // A delete's version settles the key out of the tables.
        let (_, id3) = set.stage(b"a", None);
        set.apply_queued(&mut set.t.write());
        check(&set);
        set.settle(vec![(a, id3)]);
        set.apply_queued(&mut set.t.write());
        check(&set);
        assert!(!set.t.read().by_key.contains_key(&b"a"[..]));
        // A sweep that keeps a gone key's pending version keeps it unsure.
        let (c, id_c) = set.stage(b"c", Some(&one));
        set.apply_queued(&mut set.t.write());
        ks.put(b"x", b"{}").expect("put");
        ks.delete(b"x").expect("delete");
        set.sweep_locked(&mut set.t.write(), None);
        check(&set);
        assert!(set.t.read().unsure.contains(&b"c"[..]));
        set.settle(vec![(c, id_c)]);
        set.apply_queued(&mut set.t.write());
        set.sweep_locked(&mut set.t.write(), None);
        check(&set);
        assert!(set.t.read().unsure.is_empty());
    }
}
