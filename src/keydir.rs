//! The key directory: per keyspace, an ordered map from key to the newest record's location and
//! expiry metadata.
//!
//! Invariants:
//! - an entry points at the newest *put* of its key that is on disk (tombstones are not kept:
//!   a deleted key has no entry);
//! - an entry may be expired but not yet reaped; every read filters with [`KeyspaceState::live`]
//!   against one frozen `now`, so reaping is invisible except in stats and events;
//! - `history` holds every default-TTL setting of the keyspace (never empty), so expiry is a
//!   pure function of the entry and the history.

use std::cmp::Ordering;
use std::num::NonZeroU8;
use std::sync::atomic::{AtomicBool, AtomicU64};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::ttl::{self, DefaultTtl, ItemTtl, TtlChange};

mod census;
mod map;
mod rehash;
pub use census::{Census, Count, Gathered};
pub use map::{
    spare_page_request_lost, stock_spare_page, stock_spare_pages, HashKey, KeyMap, Ordered,
    PartPages, Slot, Touched, SLAB_PAGE,
};
pub use rehash::RehashWatch;

/// A key as stored in the key directory: keys up to 23 bytes live inline in the map's nodes, so
/// comparisons during a lookup do not chase a pointer per key (the difference between one and
/// several cache misses per tree level) and a lookup builds its probe without allocating.
/// Ordered as bytes: two inline keys by `inline_order`, any other pair by [`key_order`].
/// 24 bytes, as a `Vec` would be.
#[derive(Clone, Eq)]
pub struct Key(Repr);

/// A [`Key`]'s bytes: inline (the key zero-padded to [`INLINE`] bytes, then its length), or
/// allocated.
#[derive(Clone, Eq, PartialEq)]
enum Repr {
    Inline(Inline),
    Heap(Box<[u8]>),
}

/// An inline key: its bytes, zero-padded, then its length. `repr(C)` keeps that order: the
/// length's niche marks `Repr::Heap` (whose box lies in bytes 0..16), so the enum needs no tag
/// byte and the bytes start the key, 8-aligned. With a tag byte first (a plain `u8` length)
/// the bytes sat at offset 1, and the copies of keys through open's merge of sorted runs
/// were split around it and stalled on store forwarding: an open of 1 M keys took 47-60 ms
/// instead of 35-48.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
struct Inline {
    bytes: [u8; INLINE],
    /// The key's length plus one (0 is the niche that marks `Repr::Heap`).
    len_1: NonZeroU8,
}

/// Key bytes held inside a [`Key`] (longer keys are allocated). 23 makes the inline form 24
/// bytes with the length, as large as the boxed form; document keys (a partition key's prefix
/// and an id) are often 17-23 bytes, and with 16 every comparison with one dereferenced its
/// allocation.
const INLINE: usize = 23;

impl Key {
    /// A key holding a copy of `bytes`.
    #[must_use]
    pub fn from_slice(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE {
            let mut inline = [0; INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            #[allow(clippy::cast_possible_truncation)] // at most INLINE + 1
            let len_1 = NonZeroU8::new(bytes.len() as u8 + 1).unwrap_or(NonZeroU8::MIN);
            Self(Repr::Inline(Inline {
                bytes: inline,
                len_1,
            }))
        } else {
            Self(Repr::Heap(bytes.into()))
        }
    }

    /// The key's bytes.
    #[must_use]
    #[inline(always)]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(Inline { bytes, len_1 }) => &bytes[..usize::from(len_1.get() - 1)],
            Repr::Heap(b) => b,
        }
    }
}

impl Default for Key {
    fn default() -> Self {
        Self::from_slice(&[])
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

// Sound for the maps: `Key`'s order is `[u8]`'s (`key_order` only computes it faster), and its
// equality and hash are the bytes'.
impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

// The bytes' equality, compared like `key_order` (opening compares every key with its
// neighbour twice: when the sorted runs are merged and when the tree is built from them; a
// `memcmp` call each was a tenth of an open).
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

// As the bytes hash (required by `Borrow<[u8]>`).
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl Ord for Key {
    #[inline(always)]
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => {
                inline_order(&a.bytes, &b.bytes).then(a.len_1.cmp(&b.len_1))
            }
            _ => key_order(self.as_slice(), other.as_slice()),
        }
    }
}

/// The order of two inline keys (each zero-padded to [`INLINE`] bytes, then its length): as
/// big-endian words, bytes 0..8, 8..16 and 15..23, stopping at the first that differs (the
/// first, for random keys). Padded bytes order two keys as their bytes do, except that a key
/// and its extension by zero bytes pad alike; the length, the last byte of the third word,
/// then puts the shorter first, as the byte order does (byte 15 of that word was already
/// found equal).
#[inline(always)]
fn inline_order(a: &[u8; INLINE], b: &[u8; INLINE]) -> Ordering {
    let word = |x: &[u8; INLINE], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&x[at..at + 8]);
        u64::from_be_bytes(w)
    };
    word(a, 0)
        .cmp(&word(b, 0))
        .then_with(|| word(a, 8).cmp(&word(b, 8)))
        .then_with(|| word(a, INLINE - 8).cmp(&word(b, INLINE - 8)))
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// `a.cmp(b)` for byte strings, eight bytes at a time as big-endian words while both have
/// eight left, inline: the B-tree's comparisons called `memcmp` once each, and at 1 M keys a
/// lookup is about twenty comparisons (a fifth faster this way, DESIGN.md §3.1).
#[inline]
#[must_use]
pub fn key_order(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a, mut b) = (a, b);
    while let (Some((x, ra)), Some((y, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        (a, b) = (ra, rb);
    }
    a.cmp(b)
}

/// A write second in 40 bits (5 bytes, alignment 1): up to 2^40 - 1 s after the Unix epoch,
/// the year 36812. Keeps [`Entry`] at 40 bytes where a `u64` would make it 48; a `u32` ran out
/// in 2106.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteSecs([u8; 5]);

impl WriteSecs {
    /// The largest second that fits.
    pub const MAX: u64 = (1 << 40) - 1;

    /// Second 0.
    pub const ZERO: Self = Self([0; 5]);

    /// `secs`, or `None` if it is past [`WriteSecs::MAX`].
    #[must_use]
    pub fn new(secs: u64) -> Option<Self> {
        if secs > Self::MAX {
            return None;
        }
        let b = secs.to_le_bytes();
        Some(Self([b[0], b[1], b[2], b[3], b[4]]))
    }

    /// `secs`, or [`WriteSecs::MAX`] if it is past it (for records read from disk, which the
    /// write path never gives such a time).
    #[must_use]
    pub fn saturating(secs: u64) -> Self {
        Self::new(secs.min(Self::MAX)).unwrap_or(Self([0xff; 5]))
    }

    /// The second.
    #[must_use]
    pub fn get(self) -> u64 {
        let [a, b, c, d, e] = self.0;
        u64::from_le_bytes([a, b, c, d, e, 0, 0, 0])
    }
}

/// Location and expiry metadata of a key's newest record (40 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Sequence number of the record.
    pub seq: u64,
    /// Segment file id.
    pub file: u32,
    /// Offset of the record in the file.
    pub offset: u32,
    /// Length of the whole record.
    pub len: u32,
    /// Write second (`_ts`).
    pub ts: WriteSecs,
    /// The record's own TTL in its 4-byte wire form (see [`Entry::own_ttl`]).
    pub ttl: i32,
    /// Record flags (SHADOWS).
    pub flags: u8,
    /// The second of the expiry timer in charge of this key ([`ttl::NEVER`] if none): of the
    /// key's timers, the one filed under this second acts when it fires, any other is stale.
    /// A later version whose deadline is not earlier keeps it (it fires early and is
    /// re-armed), so a key has one timer in charge however often it is rewritten.
    pub armed: u64,
}

impl Entry {
    /// An entry for tests: sequence number `seq` in file 1 at offset 0, length 0, written at
    /// second 0, inheriting the default TTL, no timer.
    #[cfg(test)]
    pub(crate) fn at_seq(seq: u64) -> Self {
        Self {
            seq,
            file: 1,
            offset: 0,
            len: 0,
            ts: WriteSecs::default(),
            ttl: 0,
            flags: 0,
            armed: ttl::NEVER,
        }
    }

    /// The record's own TTL.
    #[must_use]
    pub fn own_ttl(&self) -> ItemTtl {
        ItemTtl::from_wire(self.ttl).unwrap_or_default()
    }
}

/// The mutable state of one keyspace.
#[derive(Debug, Default)]
pub struct KeyspaceState {
    /// Key → newest record.
    pub map: KeyMap,
    /// Counts of `map`'s entries by expiry class, kept in step with every insert and removal
    /// (so `len()` and `stats()` do not walk `map`).
    pub census: Census,
    /// Default-TTL settings, oldest first.
    pub history: Vec<TtlChange>,
    /// One past the sequence number of the last write applied to this keyspace: a scan that
    /// starts now has seen every record below it (see `scans.rs`).
    pub applied_seq: u64,
    /// How many times a write or an expiry has left a key out of `map` since open: a delete,
    /// a put that expired on arrival, an expiry freed by the reaper or by a default-TTL
    /// change (a keyspace drop empties the map instead). Derived state that must forget keys
    /// that leave (the document layer's secondary indexes) walks only when this moved.
    pub departures: u64,
}

impl KeyspaceState {
    /// The current default TTL.
    #[must_use]
    pub fn default_ttl(&self) -> DefaultTtl {
        self.history.last().map_or(DefaultTtl::Off, |c| c.default)
    }

    /// First second at which `e` is expired, or [`ttl::NEVER`].
    #[must_use]
    pub fn expires_at(&self, e: &Entry) -> u64 {
        ttl::expires_at(e.ts.get(), e.own_ttl(), &self.history)
    }

    /// The entry for `key` if it is live at second `now`.
    #[must_use]
    pub fn live(&self, key: &[u8], now: u64) -> Option<&Entry> {
        self.get(key)
            .filter(|e| !ttl::is_expired(self.expires_at(e), now))
    }

    /// As [`KeyspaceState::live`], calling `hint` with where the index remembers the
    /// entry's record before the entry is read (see `KeyMap::get_hinted`): a reader starts
    /// loading the record then, instead of after the entry arrived.
    #[inline]
    pub fn live_hinted(&self, key: &[u8], now: u64, hint: impl FnOnce(u32, u32)) -> Option<&Entry> {
        self.map
            .get_hinted(&Key::from_slice(key), hint)
            .filter(|e| self.is_live(e, now))
    }

    /// The entry for `key`, live or not. The map is searched with `key` as a [`Key`], so its
    /// comparisons are [`key_order`]'s, eight bytes at a time inline, rather than a `memcmp`
    /// call each; a key longer than [`INLINE`] costs an allocation for that, and still wins
    /// (DESIGN.md §3.1, "Lookups compare as keys").
    #[must_use]
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.map.get(&Key::from_slice(key))
    }

    /// Points `key`'s entry at the merge output `to` (file, offset) if it is still record
    /// `seq` at `from`; false if it is gone or was replaced meanwhile.
    pub fn relocate(&mut self, key: &[u8], seq: u64, from: (u32, u32), to: (u32, u32)) -> bool {
        self.map.relocate(&Key::from_slice(key), seq, from, to)
    }

    /// True if `key` has an entry.
    #[must_use]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Removes `key`'s entry from the map only (the caller keeps the census).
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        self.map.remove(&Key::from_slice(key))
    }

    /// True if `e` is live at `now`.
    #[must_use]
    pub fn is_live(&self, e: &Entry, now: u64) -> bool {
        !ttl::is_expired(self.expires_at(e), now)
    }

    /// Live and expired-but-unreaped entries at `now`, from the census (no walk).
    #[must_use]
    pub fn count(&self, now: u64) -> Count {
        self.census.count(now, &self.history)
    }
}

/// A keyspace: its identity and its state.
#[derive(Debug)]
pub struct KeyspaceCore {
    /// Internal id carried by records.
    pub id: u32,
    /// User-visible name.
    pub name: String,
    /// Map and TTL history.
    pub state: RwLock<KeyspaceState>,
    /// Set when the keyspace is deleted; handles still held by callers then fail with 404.
    pub dropped: AtomicBool,
    /// Open scans and the batch before-images they need (taken after `state`).
    pub(crate) scans: parking_lot::Mutex<crate::scans::ScanRegistry>,
    /// Held by the one walk that orders a hashed map ([`KeyspaceCore::read_ordered`]), or by
    /// the worker hashing an ordered one again ([`KeyspaceCore::hash_off_lock`]); taken
    /// before `state`.
    pub(crate) ordering: parking_lot::Mutex<()>,
    /// Walks in key order begun (each chunk of a scan counts): the worker hashes an ordered
    /// map again once this stops moving (DESIGN.md §3.1, "Hashed again when walks stop").
    pub(crate) walks: AtomicU64,
}

/// Slots copied per read lock while a map is ordered off its lock: writers to the keyspace
/// wait at most for one such copy (16 K slots, 1 MiB, into a vector allocated before the lock
/// is taken; copying 64 K slots into one growing vector held writers up to 12 ms at 2 M keys).
const ORDER_COPY_SLOTS: usize = 1 << 14;

/// Entries from which an ordering gives the freed hashed layout's memory back to the system
/// (`mmap::release_free_memory_soon`, by the upkeep thread): 4 MB of slab and more.
const RELEASE_AFTER_ORDERING: usize = 1 << 16;

/// Keys brought up to date per read lock while a map is ordered off its lock.
const ORDER_REPLAY_KEYS: usize = 1 << 12;

/// Rounds of bringing the copy up to date under read locks before the last round, which
/// holds the write lock whatever is left.
const ORDER_ROUNDS: usize = 8;

impl KeyspaceCore {
    /// A read lock on the state, its map ordered first if it is hashed: what a walk in key
    /// order holds. The ordering is done off the lock (DESIGN.md §3.1, "Ordering off the
    /// lock"): the entries are copied a chunk at a time under read locks, sorted and built
    /// into B-trees with no lock held, and the keys written meanwhile are replayed into them,
    /// in rounds under read locks, the last one under the write lock. Only a write lock makes
    /// an ordered map hashed again ([`KeyspaceCore::hash_off_lock`], under the `ordering`
    /// mutex this holds until its read lock is taken), so that read lock sees it ordered.
    pub fn read_ordered(&self) -> OrderedRead<'_> {
        self.walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let st = self.state.read();
        if st.map.ordered().is_some() {
            return OrderedRead(st);
        }
        drop(st);
        let _one = self.ordering.lock();
        let mut st = self.state.write();
        if !st.map.begin_ordering() {
            // Ordered by the walk that held `ordering` before this one.
            return OrderedRead(RwLockWriteGuard::downgrade(st));
        }
        let len = st.map.len();
        let per_shard = st.map.shard_records();
        drop(st);
        // One vector for the whole copy, sized before any lock is taken, with room for a
        // chunk more at each lock (so the copy never grows it under the lock) and no second
        // copy afterwards: chunks of their own, moved into one vector at the end, were a second
        // copy of every entry (64 MB at 1 M keys).
        let mut all: Vec<(Key, Entry)> = Vec::new();
        // Prefaulted only if made huge: the policy is read once, here.
        let mut prefault = crate::log::mmap::reserve_temporary(
            &mut all,
            len + ORDER_COPY_SLOTS,
            crate::log::mmap::Filled::UnderLock,
        );
        let mut at = 0;
        loop {
            all.reserve(ORDER_COPY_SLOTS);
            // Any huge page's first fault taken here, not under the read lock.
            prefault = prefault && crate::log::mmap::prefault_temporary(&all, ORDER_COPY_SLOTS);
            let next = self
                .state
                .read()
                .map
                .copy_entries(at, ORDER_COPY_SLOTS, &mut all);
            match next {
                Some(next) => at = next,
                None => break,
            }
        }
        let mut ordered = Ordered::from_unsorted(all, per_shard);
        let mut round = 0;
        loop {
            let mut st = self.state.write();
            let keys = match st.map.take_touched() {
                Touched::Keys(keys) => keys,
                Touched::All => {
                    st.map.make_ordered();
                    return OrderedRead(RwLockWriteGuard::downgrade(st));
                }
                Touched::Ordered => return OrderedRead(RwLockWriteGuard::downgrade(st)),
            };
            if keys.len() <= ORDER_REPLAY_KEYS || round == ORDER_ROUNDS {
                for key in keys {
                    let e = st.map.get(&key).copied();
                    ordered.set(key, e);
                }
                let old = st.map.finish_ordering(ordered);
                // The hashed layout is freed with no lock held, and a large one's memory given
                // back by the upkeep thread (the call walks the allocator's heaps: worth it
                // for megabytes, not for each of thousands of small keyspaces).
                drop(st);
                drop(old);
                if len >= RELEASE_AFTER_ORDERING {
                    crate::log::mmap::release_free_memory_soon();
                }
                let st = self.state.read();
                if st.map.ordered().is_some() {
                    return OrderedRead(st);
                }
                // Hashed again meanwhile: a deleted keyspace's map is emptied into a new
                // (hashed) one, and a test hook hashes maps. Order it again.
                drop(st);
                return self.read_ordered_again();
            }
            drop(st);
            self.replay(&keys, |key, e| ordered.set(key, e));
            round += 1;
        }
    }
}

/// Entries copied per read lock while an ordered map is hashed again off its lock (as
/// [`ORDER_COPY_SLOTS`] for an ordering: a writer waits at most for one such copy).
const HASH_COPY_KEYS: usize = 1 << 14;

impl KeyspaceCore {
    /// Makes an ordered map hashed again, off its lock (DESIGN.md §3.1, "Hashed again when
    /// walks stop"), the mirror of the ordering in [`KeyspaceCore::read_ordered`]: the entries
    /// are copied in key order a chunk at a time under read locks, built into a hashed map with
    /// no lock held, and the keys written meanwhile replayed into it, in rounds under read
    /// locks, the last one under the write lock. True if this call hashed the map (or found it
    /// hashed); false if it stays ordered: too large for the hashed layout (also when the
    /// writes meanwhile made it so), or a walk changed entries in place meanwhile (a
    /// default-TTL change), which gives the hashing up.
    pub fn hash_off_lock(&self) -> bool {
        let one = self.ordering.lock();
        let mut st = self.state.write();
        if !st.map.hashable() {
            return false;
        }
        if !st.map.begin_hashing() {
            return true;
        }
        let len = st.map.len();
        let per_shard = st.map.shard_records();
        drop(st);
        let mut copy = PartPages::default();
        let mut after: Option<Key> = None;
        loop {
            // Room for the chunk made before the lock: a page of 2 MiB faulted in under it
            // would hold up the writers waiting behind the read lock.
            copy.ready(HASH_COPY_KEYS);
            let next =
                self.state
                    .read()
                    .map
                    .copy_ordered(after.as_ref(), HASH_COPY_KEYS, &mut copy);
            match next {
                Some(last) => after = Some(last),
                None => break,
            }
        }
        let mut hashed = KeyMap::hashed_of(copy, per_shard);
        let mut round = 0;
        loop {
            let mut st = self.state.write();
            let Some(keys) = st.map.take_touched_while_hashing() else {
                st.map.abandon_hashing();
                return false;
            };
            if keys.len() <= ORDER_REPLAY_KEYS || round == ORDER_ROUNDS {
                for key in keys {
                    let e = st.map.get(&key).copied();
                    hashed.set(key, e);
                }
                let old = st.map.finish_hashing(hashed);
                let now_hashed = st.map.ordered().is_none();
                // The ordered layout is freed with no lock held, not even `ordering` (a walk
                // may be waiting for it): a million entries in B-trees took 26 ms to free, 31
                // with the memory given back.
                drop(st);
                drop(one);
                let freed = old.is_some();
                drop(old);
                if freed && len >= RELEASE_AFTER_ORDERING {
                    crate::log::mmap::release_free_memory();
                }
                return freed && now_hashed;
            }
            drop(st);
            self.replay(&keys, |key, e| hashed.set(key, e));
            round += 1;
        }
    }
}

impl KeyspaceCore {
    /// Hands `set` each of `keys` with its entry now (`None` if it has none), reading them
    /// [`ORDER_REPLAY_KEYS`] per read lock: the replay rounds of an ordering or hashing off
    /// the lock. A key changed after its replay here is noted again for the next round.
    fn replay(&self, keys: &[Key], mut set: impl FnMut(Key, Option<Entry>)) {
        for chunk in keys.chunks(ORDER_REPLAY_KEYS) {
            let st = self.state.read();
            for key in chunk {
                set(key.clone(), st.map.get(key).copied());
            }
        }
    }

    /// [`KeyspaceCore::read_ordered`] once more, after its map was made hashed again between
    /// its last write lock and its read lock (the `ordering` mutex is held by the caller).
    fn read_ordered_again(&self) -> OrderedRead<'_> {
        let mut st = self.state.write();
        st.map.make_ordered();
        OrderedRead(RwLockWriteGuard::downgrade(st))
    }
}

/// A read lock on a keyspace's state whose map is ordered ([`KeyspaceCore::read_ordered`]).
pub struct OrderedRead<'a>(RwLockReadGuard<'a, KeyspaceState>);

impl OrderedRead<'_> {
    /// The map in key order.
    #[must_use]
    pub fn ordered(&self) -> &Ordered {
        match self.0.map.ordered() {
            Some(o) => o,
            // Made ordered before this lock was taken or by the lock downgraded into it, and
            // only a write lock makes an ordered map hashed again (`hash_off_lock`).
            None => unreachable!("an ordered read holds an ordered map"),
        }
    }
}

impl std::ops::Deref for OrderedRead<'_> {
    type Target = KeyspaceState;

    fn deref(&self) -> &KeyspaceState {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key takes 24 bytes in the map's nodes whether inline or not, and keys up to
    /// [`INLINE`] bytes are held inline (no allocation to build or compare them).
    #[test]
    fn a_key_takes_24_bytes_and_short_ones_are_inline() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        for len in 0..=40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 1) as u8).collect();
            let k = Key::from_slice(&bytes);
            assert_eq!(k.as_slice(), bytes.as_slice());
            assert_eq!(matches!(k.0, Repr::Inline(_)), len <= INLINE, "{len}");
        }
    }

    /// `key_order` is the byte order, around every eight-byte step: lengths 0 to 40, keys
    /// sharing prefixes of every length, bytes that differ in their high bit.
    #[test]
    fn key_order_is_the_byte_order() {
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = [0x00, 0x01, 0x7f, 0x80, 0xff];
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for _ in 0..400 {
            let len = (next() % 41) as usize;
            let key: Vec<u8> = (0..len).map(|_| alphabet[(next() % 5) as usize]).collect();
            // A sibling sharing a prefix of random length, then differing or ending.
            let cut = (next() % (len as u64 + 1)) as usize;
            let mut sibling = key[..cut].to_vec();
            sibling.extend((0..next() % 10).map(|_| alphabet[(next() % 5) as usize]));
            keys.push(key);
            keys.push(sibling);
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(key_order(a, b), a.cmp(b), "{a:?} {b:?}");
                let (ka, kb) = (Key::from_slice(a), Key::from_slice(b));
                assert_eq!(ka.cmp(&kb), a.cmp(b));
                assert_eq!(ka == kb, a == b, "{a:?} {b:?}");
            }
        }
    }

    /// Lookups find the same entries whether the key fits inline (compared by `key_order`)
    /// or not (`<[u8]>::cmp`).
    #[test]
    fn lookups_agree_for_short_and_long_keys() {
        let mut st = KeyspaceState::default();
        let e = Entry::at_seq;
        let keys: Vec<Vec<u8>> = (0u64..300)
            .map(|i| {
                let mut k = (i * 7919 % 1000).to_be_bytes().to_vec();
                k.truncate((i % 25) as usize);
                k.extend(std::iter::repeat_n(b'x', (i % 11) as usize));
                k
            })
            .collect();
        for (i, k) in keys.iter().enumerate() {
            st.map.insert(Key::from_slice(k), e(i as u64));
        }
        for k in &keys {
            let want = st.map.get(&Key::from_slice(k)).map(|e| e.seq);
            assert!(want.is_some());
            assert_eq!(st.get(k).map(|e| e.seq), want);
            assert!(st.contains(k));
            let mut longer = k.clone();
            longer.push(0xEE);
            assert_eq!(
                st.get(&longer).is_some(),
                st.map.contains_key(longer.as_slice())
            );
        }
        for k in &keys {
            assert!(st.remove(k).is_some() || !st.map.contains_key(k.as_slice()));
        }
        assert!(st.map.is_empty());
    }

    #[test]
    fn entry_is_small() {
        assert_eq!(std::mem::size_of::<Entry>(), 40);
    }

    #[test]
    fn write_secs_round_trip_past_2106() {
        for s in [0, 1, u64::from(u32::MAX), 5_000_000_000, WriteSecs::MAX] {
            assert_eq!(WriteSecs::new(s).map(WriteSecs::get), Some(s));
        }
        assert_eq!(WriteSecs::new(WriteSecs::MAX + 1), None);
        assert_eq!(WriteSecs::saturating(u64::MAX).get(), WriteSecs::MAX);
    }

    #[test]
    fn live_filters_by_history() {
        let mut st = KeyspaceState {
            history: vec![TtlChange {
                since: 0,
                default: DefaultTtl::Seconds(10),
            }],
            ..KeyspaceState::default()
        };
        let e = Entry {
            seq: 1,
            file: 1,
            offset: 32,
            len: 50,
            ts: WriteSecs::saturating(100),
            ttl: 0,
            flags: 0,
            armed: ttl::NEVER,
        };
        st.map.insert(Key::from_slice(b"k"), e);
        assert!(st.live(b"k", 109).is_some());
        assert!(st.live(b"k", 110).is_none());
    }
}
