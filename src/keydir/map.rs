//! The map behind a keyspace's key directory, in one of two layouts.
//!
//! - **Hashed** (every map that starts empty): the entries in a slab (a vector of slots; a
//!   freed slot is reused by the next insert) and index tables of slot numbers, each element
//!   a slot and 32 bits of the key's hash. A point lookup, insert or removal costs one hash, a
//!   probe and one slot read, whatever the map's size, where a B-tree descent of a million
//!   keys is about twenty comparisons and a cache miss per level (DESIGN.md §3.1, "Hashed
//!   until something asks for order"). Past [`SPLIT_AT`] keys the index is 2,048 tables of
//!   unequal shares, so a table that grows rehashes a small part of the index, and never
//!   reads the slab to do it. The hash is keyed per map, so keys chosen to collide cannot be
//!   computed ahead.
//! - **Ordered**: B-trees over consecutive key ranges (shards). One `BTreeMap` of a million
//!   entries has to be built by one thread, and building it was two fifths of an open (51 of
//!   131 ms at 1 M keys); split by key range, the shards are built side by side, one per core.
//!   A key belongs to the shard whose range holds it (the shards' first keys are kept apart, so
//!   finding it is a binary search of a few keys), and iteration walks the shards in order.
//!   The split points are chosen when a hashed map is ordered (or, for a map too large to be
//!   hashed, when open builds it); shards are never split or joined later (one that grows or
//!   empties stays correct).
//!
//! Open builds hashed maps too, in bulk ([`KeyMap::hashed_from`]). A hashed map becomes
//! ordered the first time something needs its keys in order (a range or prefix scan:
//! [`KeyMap::ordered`] is `None` until [`KeyMap::make_ordered`]), and stays so until no walk
//! has begun for a while: the worker then hashes it again ([`KeyMap::begin_hashing`]).

use std::collections::btree_map::{self, BTreeMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::hash_table::{self, HashTable};
use smallvec::SmallVec;
use std::ops::Bound;

use super::{key_order, Entry, Key, WriteSecs};
use crate::log::mmap::{MappedIntoIter, MappedVec};

/// Key → entry (module docs).
#[derive(Debug)]
pub struct KeyMap {
    layout: Layout,
}

#[derive(Debug)]
enum Layout {
    Hashed(Hashed),
    Ordered(Ordered),
}

impl Default for KeyMap {
    /// An empty map, hashed.
    fn default() -> Self {
        Self {
            layout: Layout::Hashed(Hashed::new()),
        }
    }
}

/// A shard of a map being built: its first key (`None` for the first shard) and its entries.
pub type Shard = (Option<Key>, BTreeMap<Key, Entry>);

/// Entries moved per [`KeyMap::trim`] when the slab gives room back: about a millisecond under
/// the keyspace's write lock (4,096 held it 4 ms in the keeps-up run, DESIGN.md §3.1).
const TRIM_BUDGET: usize = 1024;

/// Index tables [`KeyMap::trim`] looks at per call once a quarter of the entries has left:
/// shrinking one rehashes it (about 0.15 ms for a table of 40 K elements), and looking at all
/// 512 tables (as many as there were then) in one call held a writer for up to 23 ms
/// (DESIGN.md §3.1). With four times as many tables, each a quarter the size, 32 per call is
/// the same work per call as 8 were.
const SHRINK_TABLES_PER_TRIM: usize = 32;

/// Index tables at or below this room are left as they are (lower in unit tests, whose maps
/// stay small).
const SHRINK_MIN_CAPACITY: usize = if cfg!(test) { 64 } else { 256 };

/// Records per shard when a hashed map is ordered (as open's build, DESIGN.md §3.1).
const SHARD_RECORDS: usize = 1 << 14;

/// Entries from which [`Ordered::from_unsorted`] sorts and builds on two cores.
const PARALLEL_ORDER_MIN: usize = if cfg!(test) { 1 << 10 } else { 1 << 16 };

/// Sorts `entries` by key, keeps one of each key, and moves them into shards of `per_shard`
/// records appended to `out` (what is left in `entries` holds nothing: empty keys).
/// `later`: these entries follow others in key order, so their first shard is given its first
/// key too.
fn sorted_shards(
    entries: &mut [(Key, Entry)],
    per_shard: usize,
    later: bool,
    out: &mut Vec<Shard>,
) {
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // One of each key, moved to the front (the repeats end up after `kept`).
    let mut kept = 0;
    for r in 0..entries.len() {
        if kept == 0 || entries[r].0 != entries[kept - 1].0 {
            entries.swap(kept, r);
            kept += 1;
        }
    }
    for (n, chunk) in entries[..kept].chunks_mut(per_shard.max(1)).enumerate() {
        let tree: BTreeMap<Key, Entry> = chunk
            .iter_mut()
            .map(|e| std::mem::replace(e, (Key::default(), HOLE)))
            .collect();
        let start = if n == 0 && !later {
            None
        } else {
            tree.keys().next().cloned()
        };
        out.push((start, tree));
    }
}

/// Runs `upper` on a scoped thread named `name` while this thread runs `lower`, and waits for
/// both: true if the thread ran `upper`, false if none could be started (`upper` has then not
/// run). A panic in `upper` goes on in this thread.
fn side_by_side(name: &str, upper: impl FnOnce() + Send, lower: impl FnOnce()) -> bool {
    std::thread::scope(|s| {
        let upper = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, upper);
        lower();
        match upper {
            Ok(handle) => {
                if let Err(panic) = handle.join() {
                    std::panic::resume_unwind(panic);
                }
                true
            }
            Err(_) => false,
        }
    })
}

/// How [`Ordered::from_unsorted`] sorts: on one core, on two (the upper half on a thread of
/// its own), or split in two halves as on two cores but both done by the calling thread (what
/// it does when no thread can be started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrderOn {
    OneCore,
    TwoCores,
    #[cfg_attr(not(test), allow(dead_code))]
    NoThread,
}

/// A key's entry, found by [`KeyMap::entry`] for a decision and a change in one lookup.
pub enum Slot<'m> {
    /// The key has an entry.
    Occupied(Occupied<'m>),
    /// The key has none.
    Vacant(Vacant<'m>),
}

/// A [`Slot`] holding an entry.
pub enum Occupied<'m> {
    #[doc(hidden)]
    Tree(btree_map::OccupiedEntry<'m, Key, Entry>),
    #[doc(hidden)]
    Hash {
        index: hash_table::OccupiedEntry<'m, Elem>,
        slab: &'m mut Slab,
    },
}

/// A [`Slot`] without an entry.
pub enum Vacant<'m> {
    #[doc(hidden)]
    Tree(btree_map::VacantEntry<'m, Key, Entry>),
    #[doc(hidden)]
    Hash {
        index: &'m mut HashTable<Elem>,
        slab: &'m mut Slab,
        key: Key,
        stored: u32,
    },
}

impl Occupied<'_> {
    /// The entry.
    #[must_use]
    pub fn get(&self) -> &Entry {
        match self {
            Self::Tree(o) => o.get(),
            Self::Hash { index, slab } => &slab.slots[slot_of(*index.get())].1,
        }
    }

    /// The entry, mutable.
    pub fn get_mut(&mut self) -> &mut Entry {
        match self {
            Self::Tree(o) => o.get_mut(),
            Self::Hash { index, slab } => &mut slab.slots[slot_of(*index.get())].1,
        }
    }

    /// Replaces the entry with `e`, returning the old one (and, in a hashed map, points the
    /// index element's hint at `e`'s record).
    pub fn insert(&mut self, e: Entry) -> Entry {
        if let Self::Hash { index, .. } = self {
            index.get_mut().aim(&e);
        }
        std::mem::replace(self.get_mut(), e)
    }

    /// Removes the entry, returning it.
    pub fn remove(self) -> Entry {
        match self {
            Self::Tree(o) => o.remove(),
            Self::Hash { index, slab } => {
                let (v, _) = index.remove();
                slab.free(slot_of(v)).1
            }
        }
    }
}

impl Vacant<'_> {
    /// Puts `e` in the slot.
    pub fn insert(self, e: Entry) {
        match self {
            Self::Tree(v) => {
                v.insert(e);
            }
            Self::Hash {
                index,
                slab,
                key,
                stored,
            } => {
                let slot = slab.alloc(key, e);
                index.insert_unique(spread(stored), Elem::new(slot, stored, &e), |&v| {
                    spread(stored_of(v))
                });
            }
        }
    }
}

/// Index tables a hashed map is split into once it holds [`SPLIT_AT`] keys (one until then:
/// a keyspace of a few keys, of which a store may have thousands, costs one empty table).
const TABLES: usize = 2048;

/// Keys [`KeyMap::prefetch`] places on the stack (the callers ask for up to 1,024 at a time:
/// a write batch's prefetch window, a reaper chunk, a merge part, a chunk of picked keys).
const PREFETCH_KEYS: usize = 1024;

/// Keys at which a hashed map's one index table is dealt into [`TABLES`] (once).
const SPLIT_AT: usize = 1 << 16;

/// Hash values a key's index table is picked by (bits 40..55 of its hash).
const PICKS: usize = 1 << 15;

/// Which index table each of the [`PICKS`] values leads to: table `i` takes a share of them
/// proportional to `2^(i / TABLES)`, so the largest table holds about twice the keys of the
/// smallest. A table's room doubles when it is seven-eighths full; with equal shares every
/// table doubled within the same few thousand writes, so a write batch of 100 keys, which
/// touches most tables, paid for several doublings at once (DESIGN.md §3.1). Spread over a
/// factor of two, the tables double one at a time, evenly across the map's growth, and their
/// memory follows the map's size instead of swinging by two with it.
fn picks() -> &'static [u16; PICKS] {
    static PICKS_TO_TABLE: std::sync::OnceLock<[u16; PICKS]> = std::sync::OnceLock::new();
    PICKS_TO_TABLE.get_or_init(|| {
        let share = |i: usize| (i as f64 / TABLES as f64).exp2();
        let total: f64 = (0..TABLES).map(share).sum();
        let mut out = [0u16; PICKS];
        let (mut table, mut upto) = (0, 0.0);
        let mut end = share(0) / total * PICKS as f64;
        for (at, slot) in out.iter_mut().enumerate() {
            // Each pick goes to the table whose share covers its midpoint.
            while at as f64 + 0.5 > end && table + 1 < TABLES {
                upto += share(table);
                table += 1;
                end = (upto + share(table)) / total * PICKS as f64;
            }
            #[allow(clippy::cast_possible_truncation)] // below TABLES
            let t = table as u16;
            *slot = t;
        }
        out
    })
}

/// The hash bits 32..64 of `key` that an index element stores (a `Key` hashes as its bytes,
/// so a byte slice gives the same bits).
#[inline]
fn stored_bits<K: std::hash::Hash + ?Sized>(keyed: &Keyed, key: &K) -> u32 {
    #[allow(clippy::cast_possible_truncation)] // the high half, on purpose
    let bits = (keyed.hash_one(key) >> 32) as u32;
    bits
}

/// The index table of a key with stored bits `stored`, in a map of `tables` tables (one, or
/// [`TABLES`]): bits 40..55 of its hash pick it.
#[inline]
fn table_for(picks: &[u16; PICKS], tables: usize, stored: u32) -> usize {
    if tables == 1 {
        return 0;
    }
    usize::from(picks[(stored as usize >> 8) % PICKS])
}

/// An index element: a slab slot, the key's hash bits 32..64, and where the entry's record
/// was when the element was last written. That place is a hint: a lookup reads it in the
/// element it has just found and starts loading the record while the slot's cache line is
/// still on its way, so the record's miss overlaps the slot's instead of following it
/// (DESIGN.md §3.1, "The record's place in the index"). Every change of an entry's place
/// goes through [`Occupied::insert`] or [`KeyMap::relocate`], which move the hint too; a
/// change through [`Occupied::get_mut`] would leave it stale, and the reader would then
/// prefetch the wrong bytes and find the record where the entry says, as without a hint.
#[derive(Debug, Clone, Copy)]
pub struct Elem {
    slot: u32,
    stored: u32,
    file: u32,
    offset: u32,
}

impl Elem {
    const EMPTY: Self = Self {
        slot: 0,
        stored: 0,
        file: 0,
        offset: 0,
    };

    #[inline]
    fn new(slot: u32, stored: u32, e: &Entry) -> Self {
        Self {
            slot,
            stored,
            file: e.file,
            offset: e.offset,
        }
    }

    /// Points the hint at `e`'s record.
    #[inline]
    fn aim(&mut self, e: &Entry) {
        self.file = e.file;
        self.offset = e.offset;
    }
}

#[inline]
fn slot_of(v: Elem) -> usize {
    v.slot as usize
}

#[inline]
fn stored_of(v: Elem) -> u32 {
    v.stored
}

/// The index tables' hash of an element, from its stored 32 bits alone (so a table grows
/// without reading the slab): folded so that every stored bit reaches the low bits, which
/// pick a bucket, and the top seven, which are its tag.
#[inline]
fn spread(stored: u32) -> u64 {
    fold(u64::from(stored) ^ PI, E)
}

/// The entries of a hashed map, each in a slot that keeps its number while the entry lives.
/// A removed entry's slot is reused by the next insert; [`Hashed::trim`] moves entries from
/// the end into holes so the vector can shrink after a wave of removals.
#[derive(Debug, Default)]
pub struct Slab {
    slots: Pages,
    /// Bit `i` set: `slots[i]` holds an entry.
    held: Vec<u64>,
    /// Slots not held below `slots.len()`; may also name slots that were cut off the end or
    /// taken since, which [`Slab::alloc`] skips.
    free: Vec<u32>,
    /// Slots held.
    live: usize,
    /// The most slots held since [`Hashed::trim`] last began going through the index tables:
    /// kept here, where inserts count, so a wave of removals is seen against the height it
    /// fell from however rarely `trim` is called.
    peak: usize,
}

/// Bit `i` of `words` (false past their end).
#[inline]
fn bit(words: &[u64], i: usize) -> bool {
    words.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
}

/// Slots per page of a [`Pages`] (2 MiB: one huge page, [`Lines::page`]).
const PAGE: usize = 32_768;

/// Slots per slab page, for open's choice of part sizes (whole pages are taken as they are).
pub const SLAB_PAGE: usize = PAGE;

/// A slab's slots, in pages of [`PAGE`]: growing never moves a slot (but within a short first
/// page, [`FIRST_PAGE`]). As one vector, the slab doubled by `realloc`, and going from 2^23 to
/// 2^24 slots (512 MiB) held a write batch for about 23 ms (the slowest batch of the keeps-up
/// runs, at 8-9 M keys); the end also gives whole pages back as it shrinks.
#[derive(Debug, Default)]
struct Pages {
    /// Every page is full of slots (holes past `len`).
    pages: Vec<Lines>,
    len: usize,
}

/// A slot on a cache line of its own: a lookup that reaches its slot then reads its key and its
/// entry with one memory access instead of two for most slots (64 bytes from an allocation
/// aligned to 16 straddle two lines three times in four).
#[derive(Debug)]
#[repr(align(64))]
struct Line((Key, Entry));

const _: () = assert!(
    std::mem::size_of::<(Key, Entry)>() == 64,
    "a slot fills its cache line exactly"
);

/// Words of held bits, and free-list entries, a trim lets a slab keep beyond what it needs
/// before it cuts them (a page's slots when pages were 4,096).
const TRIM_SLACK: usize = 4096;

/// Slots of a slab's first page: it doubles up to [`PAGE`] while it is the only one, so that
/// each of many small keyspaces does not hold a page of 4,096 slots (256 KiB; a review
/// measured 400 keyspaces of 3 keys at 105 MB after an open that gave each a full page).
const FIRST_PAGE: usize = 16;

/// A page's slots: a whole page in a mapping of its own, 2 MiB aligned and advised to huge
/// pages where they are asked for ([`MappedVec`]; DESIGN.md §3.1, "Huge slab pages"); a
/// short first page, or a whole one elsewhere, on the heap.
#[derive(Debug)]
enum Lines {
    Heap(Vec<Line>),
    Mapped(MappedVec<Line>),
}

impl Default for Lines {
    fn default() -> Self {
        Self::Heap(Vec::new())
    }
}

impl Lines {
    /// An empty page with room for [`PAGE`] slots.
    fn page() -> Self {
        MappedVec::with_capacity(PAGE)
            .map_or_else(|| Self::Heap(Vec::with_capacity(PAGE)), Self::Mapped)
    }

    /// `size` empty slots: a whole page from [`Lines::page`], fewer on the heap.
    fn holes(size: usize) -> Self {
        Self::filled(size, std::iter::empty())
    }

    /// `size` slots: the values of `from`, then holes; a whole page from [`Lines::page`],
    /// fewer on the heap.
    fn filled(size: usize, from: impl Iterator<Item = (Key, Entry)>) -> Self {
        let mut lines = if size == PAGE {
            Self::page()
        } else {
            Self::Heap(Vec::with_capacity(size))
        };
        lines.fill(size, from);
        lines
    }

    /// Appends the values of `from`, then holes, up to `size` slots.
    fn fill(&mut self, size: usize, from: impl Iterator<Item = (Key, Entry)>) {
        let mut from = from.fuse();
        while self.len() < size {
            self.push(Line(from.next().unwrap_or((Key::default(), HOLE))));
        }
    }

    fn push(&mut self, line: Line) {
        match self {
            Self::Heap(v) => v.push(line),
            Self::Mapped(v) => v.push(line),
        }
    }

    /// Whether this is a heap page with no room left and none asked for yet.
    fn is_unallocated(&self) -> bool {
        matches!(self, Self::Heap(v) if v.capacity() == 0)
    }
}

impl std::ops::Deref for Lines {
    type Target = [Line];

    #[inline]
    fn deref(&self) -> &[Line] {
        match self {
            Self::Heap(v) => v,
            Self::Mapped(v) => v,
        }
    }
}

impl std::ops::DerefMut for Lines {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Line] {
        match self {
            Self::Heap(v) => v,
            Self::Mapped(v) => v,
        }
    }
}

/// The slots of a [`Lines`], moved out in order.
enum LinesIter {
    Heap(std::vec::IntoIter<Line>),
    Mapped(MappedIntoIter<Line>),
}

impl Iterator for LinesIter {
    type Item = Line;

    #[inline]
    fn next(&mut self) -> Option<Line> {
        match self {
            Self::Heap(i) => i.next(),
            Self::Mapped(i) => i.next(),
        }
    }
}

impl IntoIterator for Lines {
    type Item = Line;
    type IntoIter = LinesIter;

    fn into_iter(self) -> LinesIter {
        match self {
            Self::Heap(v) => LinesIter::Heap(v.into_iter()),
            Self::Mapped(v) => LinesIter::Mapped(v.into_iter()),
        }
    }
}

impl Pages {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    /// Slots the pages have room for. Only a first page that is the only one may be short.
    fn room(&self) -> usize {
        match self.pages.as_slice() {
            [only] => only.len(),
            pages => pages.len() * PAGE,
        }
    }

    fn push(&mut self, v: (Key, Entry)) {
        if self.len == self.room() {
            match self.pages.as_mut_slice() {
                [only] if only.len() < PAGE => {
                    // The only page, short, doubles (a copy of at most half a page; into a
                    // page of its own when it becomes whole).
                    let grown = (only.len() * 2).min(PAGE);
                    let mut lines = match std::mem::take(only) {
                        Lines::Heap(mut v) if grown < PAGE => {
                            v.reserve_exact(grown - v.len());
                            Lines::Heap(v)
                        }
                        old => {
                            let mut lines = take_spare_page();
                            for (at, line) in lines.iter_mut().zip(old) {
                                *at = line;
                            }
                            lines
                        }
                    };
                    lines.fill(grown, std::iter::empty());
                    *only = lines;
                }
                [] => self.pages.push(Lines::holes(FIRST_PAGE)),
                _ => self.pages.push(take_spare_page()),
            }
        }
        let i = self.len;
        self.pages[i / PAGE][i % PAGE].0 = v;
        self.len += 1;
    }

    /// Takes the last slot off; a page left empty is freed once another one is (one spare
    /// page, so a map going up and down across a page boundary does not allocate each time).
    fn pop(&mut self) -> Option<(Key, Entry)> {
        let last = self.len.checked_sub(1)?;
        let v = std::mem::replace(&mut self[last], (Key::default(), HOLE));
        self.len = last;
        while self.pages.len() * PAGE >= self.len + 2 * PAGE {
            if let Some(page) = self.pages.pop() {
                // All holes (every slot past the length is one): another map's next page.
                offer_spare_page(page);
            }
        }
        Some(v)
    }

    fn swap(&mut self, a: usize, b: usize) {
        let va = std::mem::replace(&mut self[a], (Key::default(), HOLE));
        let vb = std::mem::replace(&mut self[b], va);
        self[a] = vb;
    }

    fn iter(&self) -> impl Iterator<Item = &(Key, Entry)> {
        self.pages
            .iter()
            .flat_map(|p| p.iter().map(|l| &l.0))
            .take(self.len)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut (Key, Entry)> {
        let len = self.len;
        self.pages
            .iter_mut()
            .flat_map(|p| p.iter_mut().map(|l| &mut l.0))
            .take(len)
    }

    fn into_iter(self) -> impl Iterator<Item = (Key, Entry)> {
        let len = self.len;
        self.pages
            .into_iter()
            .flat_map(|p| p.into_iter().map(|l| l.0))
            .take(len)
    }
}

impl Pages {
    /// Slot `i`, if below the length.
    #[inline]
    fn get(&self, i: usize) -> Option<&(Key, Entry)> {
        (i < self.len).then(|| &self[i])
    }
}

impl std::ops::Index<usize> for Pages {
    type Output = (Key, Entry);

    #[inline]
    fn index(&self, i: usize) -> &(Key, Entry) {
        &self.pages[i / PAGE][i % PAGE].0
    }
}

impl std::ops::IndexMut<usize> for Pages {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut (Key, Entry) {
        &mut self.pages[i / PAGE][i % PAGE].0
    }
}

/// Entries a hashed map holds at most (slots are numbered in 32 bits); the insert that would
/// pass it orders the map first, and a B-tree has no such bound. Lower in unit tests, so that
/// the switch is tested.
const MAX_SLOTS: usize = if cfg!(test) {
    1 << 18
} else {
    u32::MAX as usize
};

/// What an empty slot holds: an empty inline key (no allocation) and a zeroed entry.
const HOLE: Entry = Entry {
    seq: 0,
    file: 0,
    offset: 0,
    len: 0,
    ts: WriteSecs::ZERO,
    ttl: 0,
    flags: 0,
    armed: 0,
};

impl Slab {
    /// A slab of `n` entries: the full `pages`, then `rest` (the other entries, exactly that
    /// many) in pages made from them directly, rather than made of holes and then written.
    fn filled(mut pages: Vec<Lines>, rest: impl Iterator<Item = (Key, Entry)>, n: usize) -> Self {
        let mut rest = rest.fuse();
        if n >= PAGE {
            SPARES_WANTED.store(true, Ordering::Relaxed);
        }
        let more = n.div_ceil(PAGE) - pages.len();
        // Fewer entries than a page: one short page, as the map would have grown it.
        let size = if n < PAGE {
            n.next_power_of_two().clamp(FIRST_PAGE, PAGE)
        } else {
            PAGE
        };
        pages.extend((0..more).map(|_| Lines::filled(size, rest.by_ref().take(size))));
        debug_assert!(rest.next().is_none());
        let mut held = vec![u64::MAX; n / 64];
        if !n.is_multiple_of(64) {
            held.push((1 << (n % 64)) - 1);
        }
        Self {
            slots: Pages { pages, len: n },
            held,
            free: Vec::new(),
            live: n,
            peak: n,
        }
    }

    #[inline]
    fn is_held(&self, i: usize) -> bool {
        bit(&self.held, i)
    }

    fn set_held(&mut self, i: usize, on: bool) {
        if self.held.len() <= i / 64 {
            self.held.resize(i / 64 + 1, 0);
        }
        if on {
            self.held[i / 64] |= 1 << (i % 64);
        } else {
            self.held[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Puts `(key, e)` in a free slot, or a new one at the end. Callers keep below
    /// [`MAX_SLOTS`] entries ([`KeyMap::entry`] orders a full map first).
    fn alloc(&mut self, key: Key, e: Entry) -> u32 {
        self.live += 1;
        self.peak = self.peak.max(self.live);
        while let Some(h) = self.free.pop() {
            let i = h as usize;
            if i < self.slots.len() && !self.is_held(i) {
                self.slots[i] = (key, e);
                self.set_held(i, true);
                return h;
            }
        }
        let i = self.slots.len();
        let Ok(slot) = u32::try_from(i) else {
            unreachable!("a hashed map holds fewer than MAX_SLOTS entries");
        };
        self.slots.push((key, e));
        self.set_held(i, true);
        slot
    }

    /// Takes slot `i`'s entry out and frees the slot.
    fn free(&mut self, i: usize) -> (Key, Entry) {
        let out = std::mem::replace(&mut self.slots[i], (Key::default(), HOLE));
        self.set_held(i, false);
        #[allow(clippy::cast_possible_truncation)] // slots are numbered in u32
        self.free.push(i as u32);
        self.live -= 1;
        out
    }
}

/// The hashed layout: a slab of entries and index tables of slot numbers (one, or
/// [`TABLES`] of unequal shares, [`picks`]).
#[derive(Debug)]
struct Hashed {
    index: Vec<HashTable<Elem>>,
    slab: Slab,
    keyed: Keyed,
    picks: &'static [u16; PICKS],
    /// While the map is being ordered off its lock ([`KeyMap::begin_ordering`]): every key
    /// whose entry may have changed since (written, removed, changed in place, or moved to
    /// another slot).
    touched: Option<Vec<Key>>,
    /// A walk changed entries in place while the map was being ordered (any may differ).
    touched_all: bool,
    /// The next index table [`Hashed::trim`] looks at, while it goes through them (a bounded
    /// number per call).
    shrink_at: Option<usize>,
    /// Where each index table's buckets lie, one per table, for the prefetches of lookups and
    /// [`KeyMap::prefetch`] (a hint only).
    ends: Box<[TableEnd]>,
    /// Records per shard when the map is ordered ([`SHARD_RECORDS`], or fewer when open was
    /// told to build from smaller parts: `Options::open_shard_records`, a test hook).
    shard_records: usize,
    /// How many parts open built the map from (1 for a map that grew by inserts): what
    /// [`KeyMap::shards`] tells of a hashed map, for tests.
    parts: usize,
}

/// Where an index table's memory lies, as last seen by a lookup or [`KeyMap::prefetch`]: the
/// table's bucket count then, and the address at which its elements end and its control
/// bytes begin. A hint: the address only aims prefetches. Every reallocation of a hashbrown
/// table changes its bucket count, so a stale address lasts only while a reader races the
/// recomputation (a wasted prefetch, never a wrong answer).
#[derive(Debug, Default)]
struct TableEnd {
    buckets: AtomicUsize,
    end: AtomicUsize,
}

impl Hashed {
    fn new() -> Self {
        Self {
            index: vec![HashTable::new()],
            slab: Slab::default(),
            keyed: Keyed::new(),
            picks: picks(),
            touched: None,
            touched_all: false,
            shrink_at: None,
            ends: Box::new([TableEnd::default()]),
            shard_records: SHARD_RECORDS,
            parts: 1,
        }
    }

    /// Where index table `t`'s elements end and its control bytes begin, if it has any
    /// element. hashbrown lays a table out as the elements in reverse order (bucket `i` at
    /// `end - (i + 1) * size_of::<Elem>()`), then one control byte per bucket from `end`; a
    /// lookup of hash `h` starts at bucket `h & (buckets - 1)`. Nothing here is read through
    /// the address: it only aims prefetches.
    fn table_end(&self, t: usize) -> Option<usize> {
        debug_assert_eq!(self.ends.len(), self.index.len());
        let table = &self.index[t];
        let seen = self.ends.get(t)?;
        let buckets = table.num_buckets();
        if seen.buckets.load(Ordering::Acquire) == buckets {
            return Some(seen.end.load(Ordering::Relaxed));
        }
        // A table with no element has nothing to aim at; it is looked at again next time
        // (finding that no bucket is full costs next to nothing), not cached as empty.
        let i = table.iter_buckets().next()?;
        let at = std::ptr::from_ref(table.get_bucket(i)?).addr();
        let end = at.wrapping_add((i + 1) * std::mem::size_of::<Elem>());
        seen.end.store(end, Ordering::Relaxed);
        seen.buckets.store(buckets, Ordering::Release);
        Some(end)
    }

    /// The addresses of the control group and of the element at the home bucket of stored
    /// bits `stored` in index table `t` (where hashbrown's lookup starts), if known.
    #[inline]
    fn home(&self, t: usize, stored: u32) -> Option<(usize, usize)> {
        let end = self.table_end(t)?;
        #[allow(clippy::cast_possible_truncation)] // the low bits pick the bucket
        let at = spread(stored) as usize & (self.index[t].num_buckets() - 1);
        Some((
            end.wrapping_add(at),
            end.wrapping_sub((at + 1) * std::mem::size_of::<Elem>()),
        ))
    }

    /// Asks for the control group and the element at the home bucket of stored bits `stored`
    /// in index table `t`, without waiting for either.
    #[inline]
    fn prefetch_home(&self, t: usize, stored: u32) {
        if let Some((control, element)) = self.home(t, stored) {
            crate::log::mmap::prefetch_addr(control);
            crate::log::mmap::prefetch_addr(element);
        }
    }

    /// Notes that `key`'s entry may change, if the map is being ordered.
    #[inline]
    fn touch(&mut self, key: &Key) {
        if let Some(t) = &mut self.touched {
            t.push(key.clone());
        }
    }

    /// `key`'s index table and stored hash bits.
    #[inline]
    fn place(&self, key: &Key) -> (usize, u32) {
        let stored = stored_bits(&self.keyed, key);
        (self.table_of(stored), stored)
    }

    #[inline]
    fn table_of(&self, stored: u32) -> usize {
        table_for(self.picks, self.index.len(), stored)
    }

    /// `key`'s slot, if it has an entry.
    #[inline]
    fn find(&self, key: &Key) -> Option<usize> {
        self.find_hinted(key, |_, _| {})
    }

    /// As [`Hashed::find`], calling `hint` with the record place of the first element whose
    /// stored hash bits match, before that element's slot is read (see
    /// [`KeyMap::get_hinted`]).
    #[inline]
    fn find_hinted(&self, key: &Key, hint: impl FnOnce(u32, u32)) -> Option<usize> {
        let (t, stored) = self.place(key);
        // The element is asked for with the control bytes that lead to it, not after them.
        self.prefetch_home(t, stored);
        let slots = &self.slab.slots;
        let mut hint = Some(hint);
        self.index[t]
            .find(spread(stored), |&v| {
                if stored_of(v) != stored {
                    return false;
                }
                let line = &slots[slot_of(v)];
                if let Some(hint) = hint.take() {
                    // The slot's line first, then the record: both on their way before
                    // either is waited for.
                    crate::log::mmap::prefetch_ref(line);
                    hint(v.file, v.offset);
                }
                line.0 == *key
            })
            .map(|&v| slot_of(v))
    }

    /// Before an insert: a single index table that has reached [`SPLIT_AT`] keys is dealt
    /// into [`TABLES`] (by the stored hash bits: the slab is not read).
    fn split_if_due(&mut self) {
        if self.index.len() > 1 || self.index[0].len() < SPLIT_AT {
            return;
        }
        let one = std::mem::take(&mut self.index);
        self.index = (0..TABLES).map(|_| HashTable::new()).collect();
        self.ends = (0..TABLES).map(|_| TableEnd::default()).collect();
        for v in one.into_iter().flatten() {
            let t = self.table_of(stored_of(v));
            self.index[t].insert_unique(spread(stored_of(v)), v, |&w| spread(stored_of(w)));
        }
    }

    /// True if [`Hashed::trim`] has work: index tables being gone through, a quarter of the
    /// entries gone since they were last looked at, or a quarter of the slab's slots holes.
    fn trim_due(&self) -> bool {
        let slots = self.slab.slots.len();
        self.shrink_at.is_some()
            || self.slab.live * 4 < self.slab.peak * 3
            || slots - self.slab.live > (slots / 4).max(1024)
    }

    /// After removals: an index table left under a quarter full gives half its room back, and
    /// when a quarter of the slab's slots are holes, up to `budget` entries move from its end
    /// into holes (their index elements renumbered) and the end is cut; a wave of expiries
    /// gives its memory back over the following passes, a bounded step each.
    fn trim(&mut self, budget: usize) {
        // (`Hashed::trim_due` says when a call here has work; keep the two in step.)
        // The index tables are looked at only once a quarter of the keys has left since the
        // last look: looking at all of them on every call made a deleting write batch 60-100 %
        // slower (a review's probe: 0.47-0.55 µs per delete without, 0.82-1.12 µs with).
        let live = self.slab.live;
        if self.shrink_at.is_none() && live * 4 < self.slab.peak * 3 {
            self.shrink_at = Some(0);
            self.slab.peak = live;
        }
        if let Some(from) = self.shrink_at {
            let to = (from + SHRINK_TABLES_PER_TRIM).min(self.index.len());
            for t in &mut self.index[from..to] {
                if t.capacity() > SHRINK_MIN_CAPACITY && t.len() * 4 < t.capacity() {
                    t.shrink_to(t.len() * 2, |&v| spread(stored_of(v)));
                }
            }
            self.shrink_at = (to < self.index.len()).then_some(to);
        }
        let mut moved = 0;
        while moved < budget
            && self.slab.slots.len() - self.slab.live > (self.slab.slots.len() / 4).max(1024)
        {
            let last = self.slab.slots.len() - 1;
            if self.slab.is_held(last) {
                let s = &mut self.slab;
                let hole = loop {
                    match s.free.pop() {
                        Some(h) if (h as usize) < last && !s.is_held(h as usize) => break h,
                        Some(_) => {}
                        // Every hole below the end is on the free list: not reached.
                        None => return,
                    }
                };
                let key = self.slab.slots[last].0.clone();
                let (t, stored) = self.place(&key);
                if let Some(v) = self.index[t].find_mut(spread(stored), |&v| slot_of(v) == last) {
                    v.slot = hole;
                }
                // The copy of an ordering in progress may have passed the hole already.
                self.touch(&key);
                self.slab.slots.swap(last, hole as usize);
                self.slab.set_held(hole as usize, true);
            }
            self.slab.slots.pop();
            self.slab.set_held(last, false);
            moved += 1;
        }
        let s = &mut self.slab;
        let len = s.slots.len();
        if s.held.len() > len.div_ceil(64) + TRIM_SLACK {
            s.held.truncate(len.div_ceil(64));
            s.held.shrink_to_fit();
        }
        if s.free.len() > 2 * (len - s.live) + TRIM_SLACK {
            s.free.retain(|&h| (h as usize) < len);
            s.free.shrink_to_fit();
        }
    }
}

/// The ordered layout: B-trees over consecutive key ranges.
#[derive(Debug)]
pub struct Ordered {
    /// Never empty. Shard `i > 0` holds the keys from `starts[i - 1]` (included) up to
    /// `starts[i]` (excluded); shard 0 the keys below `starts[0]`, the last one the rest.
    shards: Vec<BTreeMap<Key, Entry>>,
    /// The first key of every shard but the first, strictly increasing.
    starts: Vec<Key>,
    /// Records per shard when the map was ordered, kept for the next ordering should the map
    /// be hashed again ([`KeyMap::shard_records`]).
    per_shard: usize,
    /// While the map is being hashed off its lock ([`KeyMap::begin_hashing`]): every key whose
    /// entry may have changed since (written, removed, changed in place).
    touched: Option<Vec<Key>>,
    /// A walk changed entries in place while the map was being hashed (any may differ).
    touched_all: bool,
}

/// The hash key of a hashed map that is yet to be built ([`KeyMap::hashed_from`]): its index
/// elements can then be computed beforehand, on other threads.
#[derive(Debug, Clone)]
pub struct HashKey(Keyed);

impl HashKey {
    /// A new key (two random words).
    #[must_use]
    pub fn new() -> Self {
        Self(Keyed::new())
    }

    /// One part of a map to be built by [`KeyMap::hashed_from`], from `part`'s entries laid
    /// out in slab pages: their index elements, their slots numbered from 0 in `part`'s order
    /// and dealt by the index table each belongs in (of [`TABLES`]). Open prepares its parts on
    /// every core as their merges finish; only the rests (the entries after a part's last
    /// whole page) and the index tables are left for the build.
    #[must_use]
    pub fn prepare(&self, part: PartPages) -> HashedPart {
        let picks = picks();
        let entries = || {
            part.pages
                .iter()
                .flat_map(|p| p.iter())
                .chain(part.page.iter())
                .map(|l| &l.0)
        };
        // Each key is hashed twice, to count and then to deal, rather than its table and
        // element kept in between: at 1 M keys that buffer was 24 MB of fresh memory to
        // fault in, where a hash costs a few nanoseconds.
        let mut starts = vec![0u32; TABLES + 1];
        for (key, _) in entries() {
            starts[table_for(picks, TABLES, stored_bits(&self.0, key)) + 1] += 1;
        }
        for t in 0..TABLES {
            starts[t + 1] += starts[t];
        }
        let mut next = starts.clone();
        let mut elems = vec![Elem::EMPTY; part.len()];
        for ((key, e), slot) in entries().zip(0u32..) {
            let stored = stored_bits(&self.0, key);
            let at = &mut next[table_for(picks, TABLES, stored)];
            elems[*at as usize] = Elem::new(slot, stored, e);
            *at += 1;
        }
        HashedPart {
            pages: part.pages,
            rest: part.page,
            starts,
            elems,
        }
    }
}

/// A part's entries, in order, written straight into slab pages as they come (open's merges
/// hand their survivors here instead of collecting them in a vector first: at 1 M keys that
/// vector was 64 MB of memory to fault in and copy once more).
#[derive(Debug, Default)]
pub struct PartPages {
    /// Whole pages.
    pages: Vec<Lines>,
    /// The page being filled (fewer than [`PAGE`] entries).
    page: Lines,
    /// The next page, made and faulted in ahead by [`PartPages::ready`].
    next: Option<Lines>,
}

/// Whole pages of holes made ahead, off every lock ([`stock_spare_page`],
/// [`stock_spare_pages`]), for a map that grows by inserts to take under its keyspace's write
/// lock ([`take_spare_page`]): making one there (a fresh 2 MiB mapping faulted in, which may
/// compact memory to find a huge page, and 32,768 holes written) held the lock writers wait
/// for. At most [`SPARES`] are kept, for the whole process.
static SPARE_PAGES: parking_lot::Mutex<Vec<Lines>> = parking_lot::Mutex::new(Vec::new());

/// Spare pages kept at most: two, so that while a background thread makes the next one, the
/// writer that took a spare leaves one for the next map that needs a page.
const SPARES: usize = 2;

/// Spare pages in [`SPARE_PAGES`] (read without its lock by [`stock_spare_page`]).
static SPARE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Set once a map took a whole page by inserts: until then no spare is made, so a process
/// whose maps stay under a page never holds one.
static SPARES_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set while a writer makes a spare page, so that writers arriving meanwhile do not each make
/// one too.
static SPARE_MAKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set while a background thread makes spare pages ([`stock_spare_pages`]): a flag apart from
/// the writers', so that a writer finding none kept makes its own page rather than leave its
/// map to make one under its lock while the background is still at it (a page too many is
/// dropped by [`offer_spare_page`]).
static STOCKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set from when a writer asks a background thread for spare pages ([`stock_spare_page`]
/// returned true) until that thread starts making them ([`stock_spare_pages`]) or the request
/// is known lost ([`spare_page_request_lost`]): a request per page taken, not one per write
/// (a writer that finds none kept asks again regardless).
static STOCK_ASKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A writer's part in keeping spare pages, before it takes any lock (an atomic load when
/// nothing is to be done). With no spare kept it makes one itself, as this write's inserts may
/// need it, and returns true; with fewer than [`SPARES`] kept it returns true once per request
/// in flight ([`STOCK_ASKED`]): the caller then asks a background thread to run
/// [`stock_spare_pages`] (and calls [`spare_page_request_lost`] if it cannot ask).
/// So the page's first fault, 5-20 ms on a machine whose memory must be compacted or backed by
/// its host, is taken off the writers' latency whenever the background keeps up.
pub fn stock_spare_page() -> bool {
    let count = SPARE_COUNT.load(Ordering::Relaxed);
    if count >= SPARES || !SPARES_WANTED.load(Ordering::Relaxed) {
        return false;
    }
    if count == 0 {
        if !SPARE_MAKING.swap(true, Ordering::Acquire) {
            offer_spare_page(Lines::holes(PAGE));
            SPARE_MAKING.store(false, Ordering::Release);
        }
        // Asked again even if a request is in flight: it may have been lost (a store closed
        // before its sync thread got to it), and a second request costs nothing.
        STOCK_ASKED.store(true, Ordering::Release);
        return true;
    }
    !STOCK_ASKED.swap(true, Ordering::AcqRel)
}

/// A background thread's part: makes spare pages until [`SPARES`] are kept (unless another
/// background thread is at it), and ends the request [`stock_spare_page`] made.
pub fn stock_spare_pages() {
    STOCK_ASKED.store(false, Ordering::Release);
    if STOCKING.swap(true, Ordering::Acquire) {
        return;
    }
    for _ in 0..SPARES {
        if SPARE_COUNT.load(Ordering::Relaxed) >= SPARES || !SPARES_WANTED.load(Ordering::Relaxed) {
            break;
        }
        offer_spare_page(Lines::holes(PAGE));
    }
    STOCKING.store(false, Ordering::Release);
}

/// Ends a request [`stock_spare_page`] made that no thread will serve (the message could not
/// be sent, or its thread stopped first), so that a later write asks again.
pub fn spare_page_request_lost() {
    STOCK_ASKED.store(false, Ordering::Release);
}

/// Keeps `page` (a whole page of holes) as a spare if fewer than [`SPARES`] are kept; drops it
/// otherwise. Called also under a keyspace's write lock, for a page a map let go.
fn offer_spare_page(page: Lines) {
    if page.len() != PAGE {
        return;
    }
    if let Some(mut spares) = SPARE_PAGES.try_lock() {
        if spares.len() < SPARES {
            spares.push(page);
            SPARE_COUNT.store(spares.len(), Ordering::Relaxed);
        }
    }
}

/// A whole page of holes: a spare if one is kept, else made here.
fn take_spare_page() -> Lines {
    SPARES_WANTED.store(true, Ordering::Relaxed);
    if SPARE_COUNT.load(Ordering::Relaxed) > 0 {
        let mut spares = SPARE_PAGES.lock();
        let page = spares.pop();
        SPARE_COUNT.store(spares.len(), Ordering::Relaxed);
        if let Some(page) = page {
            return page;
        }
    }
    Lines::holes(PAGE)
}

/// Entries a part's first page holds on the heap before it moves to a page of its own
/// ([`Lines::page`]): a part of a few entries (a small keyspace's) then takes a few
/// kilobytes, not a huge page of 2 MiB to fault in and clear.
const PART_ON_HEAP: usize = PAGE / 16;

impl PartPages {
    /// Makes room for the next `n` pushes ahead, faulted in, so that pushing them under a lock
    /// others wait for (the copy of a map being hashed again, under its read lock) never
    /// faults in a page of 2 MiB there (DESIGN.md §3.1, "Huge slab pages").
    pub fn ready(&mut self, n: usize) {
        let len = self.page.len();
        let needs_page = if self.page.is_unallocated() {
            !self.pages.is_empty() || n > PART_ON_HEAP
        } else if matches!(self.page, Lines::Heap(_)) && self.pages.is_empty() {
            len + n > PART_ON_HEAP
        } else {
            len + n >= PAGE
        };
        if needs_page && self.next.is_none() {
            let mut page = Lines::page();
            if let Lines::Mapped(v) = &mut page {
                v.prefault();
            }
            self.next = Some(page);
        }
    }

    /// A new empty page: the one made ahead, if any.
    fn new_page(&mut self) -> Lines {
        self.next.take().unwrap_or_else(Lines::page)
    }

    /// Appends `v`.
    pub fn push(&mut self, v: (Key, Entry)) {
        let len = self.page.len();
        if self.page.is_unallocated() && !self.pages.is_empty() {
            self.page = self.new_page();
        } else if len == PART_ON_HEAP
            && self.pages.is_empty()
            && matches!(self.page, Lines::Heap(_))
        {
            let mut lines = self.new_page();
            lines.fill(len, std::mem::take(&mut self.page).into_iter().map(|l| l.0));
            self.page = lines;
        }
        self.page.push(Line(v));
        if self.page.len() == PAGE {
            self.pages.push(std::mem::take(&mut self.page));
        }
    }

    fn len(&self) -> usize {
        self.pages.len() * PAGE + self.page.len()
    }
}

/// A part of a hashed map to be built ([`HashKey::prepare`]).
#[derive(Debug)]
pub struct HashedPart {
    /// The part's first entries, in whole slab pages.
    pages: Vec<Lines>,
    /// The entries after them (fewer than a page).
    rest: Lines,
    /// Index table `t`'s elements are `elems[starts[t]..starts[t + 1]]`.
    starts: Vec<u32>,
    elems: Vec<Elem>,
}

impl HashedPart {
    fn len(&self) -> usize {
        self.elems.len()
    }
}

impl Default for HashKey {
    fn default() -> Self {
        Self::new()
    }
}

/// The hasher of a hashed map: a multiply-fold over the key's bytes eight at a time, keyed by
/// two random words drawn when the map is made (from `std`'s `RandomState`, which the
/// operating system seeds). SipHash, `std`'s default, cost 100-300 ns more per operation
/// (DESIGN.md §3.1).
#[derive(Debug, Clone)]
struct Keyed {
    seed: u64,
    mul: u64,
}

impl Keyed {
    fn new() -> Self {
        let r = std::collections::hash_map::RandomState::new();
        let seed = r.hash_one(0x6562_6264_625f_6b64_u64);
        let mul = r.hash_one(0x6d75_6c74_6970_6c79_u64) | 1;
        Self { seed, mul }
    }
}

impl BuildHasher for Keyed {
    type Hasher = Fold;

    #[inline]
    fn build_hasher(&self) -> Fold {
        Fold {
            state: self.seed,
            mul: self.mul,
        }
    }
}

/// The full 128-bit product of `a` and `b`, its halves folded together by xor.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    #[allow(clippy::cast_possible_truncation)] // the halves, on purpose
    let (lo, hi) = (p as u64, (p >> 64) as u64);
    lo ^ hi
}

/// A running [`Keyed`] hash.
#[derive(Debug)]
struct Fold {
    state: u64,
    mul: u64,
}

/// Odd constants mixed into each word so that a zero word still moves the state (the
/// fractional digits of pi and e).
const PI: u64 = 0x243f_6a88_85a3_08d3;
const E: u64 = 0xb7e1_5162_8aed_2a6b;

impl Hasher for Fold {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut s = self.state;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            s = fold(s ^ u64::from_le_bytes(w) ^ PI, self.mul);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // Zero padding is told apart by the length, which `[u8]`'s hash writes first.
            s = fold(s ^ u64::from_le_bytes(w) ^ E, self.mul);
        }
        self.state = s;
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.state = fold(self.state ^ n as u64 ^ E, self.mul);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold(self.state ^ PI, (self.mul ^ E) | 1)
    }
}

/// Where keys' index elements sit in a hashed map, as of when it was taken
/// ([`KeyMap::locality`]): sorting a batch of keys by [`Locality::of`] before looking them up
/// walks each index table from one end to the other instead of jumping around it, so most
/// lookups find their table's cache line already loaded or on its way (DESIGN.md §3.1). Only
/// an order: a table that grew since gives a coarser order, never a wrong answer.
#[derive(Debug, Clone)]
pub struct Locality {
    keyed: Keyed,
    picks: &'static [u16; PICKS],
    /// Each index table's bucket mask when taken.
    masks: Vec<u64>,
}

impl Locality {
    /// `key`'s index table in the high bits and its home bucket in that table below them.
    #[inline]
    #[must_use]
    pub fn of(&self, key: &Key) -> u64 {
        let stored = stored_bits(&self.keyed, key);
        let t = table_for(self.picks, self.masks.len(), stored);
        ((t as u64) << 40) | (spread(stored) & self.masks[t])
    }
}

impl KeyMap {
    /// The ordered map made of `shards`, given in key order. Panics (in debug builds) if a
    /// shard after the first has no first key, the first keys do not increase, or an entry
    /// lies outside its shard's range.
    #[cfg(test)]
    #[must_use]
    pub fn from_shards(shards: Vec<Shard>) -> Self {
        Self {
            layout: Layout::Ordered(Ordered::from_shards(shards)),
        }
    }

    /// The map in key order, if it is ordered (else [`KeyMap::make_ordered`] first).
    #[must_use]
    pub fn ordered(&self) -> Option<&Ordered> {
        match &self.layout {
            Layout::Ordered(o) => Some(o),
            Layout::Hashed(_) => None,
        }
    }

    /// Orders a hashed map at once (nothing if it already is): its entries sorted by key and
    /// cut into shards of [`KeyMap::shard_records`], about 0.1 s per million keys under
    /// whatever lock the caller holds. Walks order off the lock instead ([`KeyMap::begin_ordering`]); this
    /// serves their fallbacks, a map reaching `MAX_SLOTS`, and tests (DESIGN.md §3.1).
    pub fn make_ordered(&mut self) {
        let Layout::Hashed(h) = &mut self.layout else {
            return;
        };
        let slab = std::mem::take(&mut h.slab);
        let mut all: Vec<(Key, Entry)> = Vec::with_capacity(slab.live);
        for (i, pair) in slab.slots.into_iter().enumerate() {
            if bit(&slab.held, i) {
                all.push(pair);
            }
        }
        let per_shard = h.shard_records;
        self.layout = Layout::Ordered(Ordered::from_unsorted(all, per_shard));
    }

    /// Starts ordering a hashed map without holding its lock for the sort (DESIGN.md §3.1,
    /// "Ordering off the lock"): from now on every key whose entry may change is noted.
    /// False if the map is ordered (nothing to do).
    pub fn begin_ordering(&mut self) -> bool {
        match &mut self.layout {
            Layout::Hashed(h) => {
                h.touched = Some(Vec::new());
                h.touched_all = false;
                true
            }
            Layout::Ordered(_) => false,
        }
    }

    /// Copies the entries of up to `max` slots from slot `from` on into `out`: the slot to go
    /// on from, or `None` once every slot was passed (or the map is ordered).
    pub fn copy_entries(
        &self,
        from: usize,
        max: usize,
        out: &mut Vec<(Key, Entry)>,
    ) -> Option<usize> {
        let Layout::Hashed(h) = &self.layout else {
            return None;
        };
        let end = h.slab.slots.len().min(from.saturating_add(max));
        if from >= end {
            return None;
        }
        for i in from..end {
            if h.slab.is_held(i) {
                out.push(h.slab.slots[i].clone());
            }
        }
        Some(end)
    }

    /// The keys noted since [`KeyMap::begin_ordering`] or the last call, the note started
    /// afresh.
    pub fn take_touched(&mut self) -> Touched {
        match &mut self.layout {
            Layout::Hashed(h) if h.touched_all => Touched::All,
            Layout::Hashed(h) => match &mut h.touched {
                Some(t) => Touched::Keys(std::mem::take(t)),
                None => Touched::All,
            },
            Layout::Ordered(_) => Touched::Ordered,
        }
    }

    /// Ends an ordering: the map becomes `ordered`, which the caller built from a copy and
    /// brought up to date with every key noted since (under this map's write lock, so none
    /// is left).
    /// Returns the hashed layout it replaced, for the caller to drop once the lock is let go
    /// (freeing a slab of 2 M entries held writers for about 10 ms).
    #[must_use]
    pub fn finish_ordering(&mut self, ordered: Ordered) -> Option<Retired> {
        if let Layout::Hashed(h) = &self.layout {
            debug_assert!(h.touched.as_ref().is_some_and(Vec::is_empty) && !h.touched_all);
            return Some(Retired(std::mem::replace(
                &mut self.layout,
                Layout::Ordered(ordered),
            )));
        }
        None
    }

    /// True if the map's entries fit the hashed layout (fewer than [`MAX_SLOTS`]; a hashed map
    /// reaching that many is ordered for good).
    #[must_use]
    pub fn hashable(&self) -> bool {
        self.len() < MAX_SLOTS
    }

    /// Starts hashing an ordered map again without holding its lock for the build (DESIGN.md
    /// §3.1, "Hashed again when walks stop"): from now on every key whose entry may change is
    /// noted. False if the map is hashed (nothing to do).
    pub fn begin_hashing(&mut self) -> bool {
        match &mut self.layout {
            Layout::Ordered(o) => {
                o.touched = Some(Vec::new());
                o.touched_all = false;
                true
            }
            Layout::Hashed(_) => false,
        }
    }

    /// Copies up to `max` entries in key order, from the first key after `after` (from the
    /// first key if `None`), into `out`: the last key copied, or `None` once every entry was
    /// passed (or the map is hashed).
    pub fn copy_ordered(
        &self,
        after: Option<&Key>,
        max: usize,
        out: &mut PartPages,
    ) -> Option<Key> {
        let Layout::Ordered(o) = &self.layout else {
            return None;
        };
        let lower = after.map_or(Bound::Unbounded, |k| Bound::Excluded(k.as_slice()));
        let mut last = None;
        for (k, e) in o.range((lower, Bound::Unbounded)).take(max) {
            out.push((k.clone(), *e));
            last = Some(k);
        }
        last.cloned()
    }

    /// The keys noted since [`KeyMap::begin_hashing`] or the last call, the note started
    /// afresh; `None` if the hashing cannot be finished by replaying keys (a walk changed
    /// entries in place, or the map is not being hashed): the caller then gives it up
    /// ([`KeyMap::abandon_hashing`]).
    pub fn take_touched_while_hashing(&mut self) -> Option<Vec<Key>> {
        match &mut self.layout {
            Layout::Ordered(o) if !o.touched_all => o.touched.as_mut().map(std::mem::take),
            _ => None,
        }
    }

    /// Stops noting changed keys: the hashing begun by [`KeyMap::begin_hashing`] is given up
    /// and the map stays ordered.
    pub fn abandon_hashing(&mut self) {
        if let Layout::Ordered(o) = &mut self.layout {
            o.touched = None;
            o.touched_all = false;
        }
    }

    /// Ends a hashing: the map becomes `hashed`, which the caller built from a copy and
    /// brought up to date with every key noted since (under this map's write lock, so none is
    /// left). Returns the ordered layout it replaced, for the caller to drop once the lock is
    /// let go; `None` (and nothing changed) if the map was not being hashed.
    #[must_use]
    pub fn finish_hashing(&mut self, hashed: KeyMap) -> Option<Retired> {
        match &self.layout {
            Layout::Ordered(o) if o.touched.is_some() => {
                debug_assert!(o.touched.as_ref().is_some_and(Vec::is_empty) && !o.touched_all);
                Some(Retired(std::mem::replace(&mut self.layout, hashed.layout)))
            }
            _ => None,
        }
    }

    /// The hashed map of `entries` (no key twice), built in one pass as open builds its maps
    /// ([`KeyMap::hashed_from`]); shards of `per_shard` records when it is ordered again.
    #[must_use]
    pub fn hashed_of(entries: PartPages, per_shard: usize) -> Self {
        let key = HashKey::new();
        let part = key.prepare(entries);
        Self::hashed_from(&key, vec![part], per_shard)
    }

    /// Sets `key`'s entry to `e`, or removes it if `None` (a removal leaves the room for
    /// [`KeyMap::trim`], as [`KeyMap::remove`] does).
    pub fn set(&mut self, key: Key, e: Option<Entry>) {
        match e {
            Some(e) => match self.entry(key) {
                Slot::Occupied(mut o) => {
                    o.insert(e);
                }
                Slot::Vacant(v) => v.insert(e),
            },
            None => {
                self.remove(&key);
            }
        }
    }

    /// The hashed map of the entries of `parts` (no key in two of them, none twice), each
    /// prepared by [`HashKey::prepare`] of `key`, built in one pass instead of one insert at a
    /// time (DESIGN.md §3.1, "Open builds hashed maps"). The slab takes every part's whole
    /// pages as they are, then the parts' rests, copied into pages of their own; the index
    /// tables are each sized once for their share and filled from every part's elements for
    /// them while they sit in the cache (inserts one by one went to a random table each, a
    /// cache miss apiece, and doubled every table on the way), the two halves of the tables
    /// side by side where there are two cores. At [`MAX_SLOTS`] entries or more the map is
    /// ordered instead, as a hashed map reaching that many is.
    #[must_use]
    pub fn hashed_from(key: &HashKey, parts: Vec<HashedPart>, per_shard: usize) -> Self {
        // Ordering cuts shards of at most SHARD_RECORDS, fewer where a test asks for small
        // parts so that its walks cross shard boundaries.
        let per_shard = per_shard.clamp(1, SHARD_RECORDS);
        let n: usize = parts.iter().map(HashedPart::len).sum();
        if n >= MAX_SLOTS {
            let all: Vec<(Key, Entry)> = parts
                .into_iter()
                .flat_map(|p| {
                    let pages = p.pages.into_iter().flat_map(Lines::into_iter);
                    pages.chain(p.rest).map(|l| l.0)
                })
                .collect();
            return Self {
                layout: Layout::Ordered(Ordered::from_unsorted(all, per_shard)),
            };
        }
        let mut h = Hashed::new();
        h.keyed = key.0.clone();
        h.shard_records = per_shard;
        h.parts = parts.len().max(1);
        if n >= SPLIT_AT {
            h.index = (0..TABLES).map(|_| HashTable::new()).collect();
            h.ends = (0..TABLES).map(|_| TableEnd::default()).collect();
        }
        // Where each part's slots start: its whole pages among the others', its rest after
        // all of those.
        let whole: usize = parts.iter().map(|p| p.pages.len()).sum();
        let mut bases = Vec::with_capacity(parts.len());
        let (mut page_at, mut rest_at) = (0, whole * PAGE);
        for p in &parts {
            bases.push((page_at, p.pages.len() * PAGE, rest_at));
            page_at += p.pages.len() * PAGE;
            rest_at += p.rest.len();
        }
        let mut pages = Vec::with_capacity(n.div_ceil(PAGE));
        let mut rests = Vec::with_capacity(n - whole * PAGE);
        let mut indexes = Vec::with_capacity(parts.len());
        for p in parts {
            pages.extend(p.pages);
            rests.extend(p.rest);
            indexes.push((p.starts, p.elems));
        }
        h.slab = Slab::filled(pages, rests.into_iter().map(|l| l.0), n);
        let single = h.index.len() == 1;
        let fill = |first: usize, index: &mut [HashTable<Elem>]| {
            let hasher = |&v: &Elem| spread(stored_of(v));
            for (t, table) in (first..).zip(index.iter_mut()) {
                let of = |(starts, elems): &'_ (Vec<u32>, Vec<Elem>)| {
                    if single {
                        (0, elems.len())
                    } else {
                        (starts[t] as usize, starts[t + 1] as usize)
                    }
                };
                // Every part's elements for the next table, on their way while this one is
                // filled: the parts are as many streams through memory as there are parts,
                // more than the processor follows by itself.
                if !single && t + 1 < TABLES {
                    for (starts, elems) in &indexes {
                        if let Some(v) = elems.get(starts[t + 1] as usize) {
                            crate::log::mmap::prefetch_ref(v);
                        }
                    }
                }
                table.reserve(indexes.iter().map(|p| of(p).1 - of(p).0).sum(), hasher);
                for (p, &(page_at, in_pages, rest_at)) in indexes.iter().zip(&bases) {
                    let (from, to) = of(p);
                    for &v in &p.1[from..to] {
                        let local = v.slot as usize;
                        let slot = if local < in_pages {
                            page_at + local
                        } else {
                            rest_at + local - in_pages
                        };
                        #[allow(clippy::cast_possible_truncation)] // n < MAX_SLOTS
                        let v = Elem {
                            slot: slot as u32,
                            ..v
                        };
                        table.insert_unique(spread(stored_of(v)), v, hasher);
                    }
                }
            }
        };
        let mid = h.index.len() / 2;
        let (low, high) = h.index.split_at_mut(mid);
        // The upper half on a thread of its own where there are two cores: Some(true) if it
        // ran there, Some(false) if the lower half is done and the upper one is left.
        let upper_done = (!single
            && std::thread::available_parallelism().is_ok_and(|c| c.get() >= 2))
        .then(|| {
            side_by_side(
                "ebbdb-index",
                || fill(mid, &mut *high),
                || fill(0, &mut *low),
            )
        });
        match upper_done {
            Some(true) => {}
            Some(false) => fill(mid, high),
            None => {
                fill(0, low);
                fill(mid, high);
            }
        }
        Self {
            layout: Layout::Hashed(h),
        }
    }

    /// Makes an ordered map hashed again (nothing if it is hashed): for tests, so that the
    /// hashed layout also serves what an open recovered.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn make_hashed(&mut self) {
        let Layout::Ordered(o) = &mut self.layout else {
            return;
        };
        let shards = std::mem::take(&mut o.shards);
        *self = Self::default();
        for (k, e) in shards.into_iter().flatten() {
            if let Slot::Vacant(v) = self.entry(k) {
                v.insert(e);
            }
        }
    }

    /// True if the map is hashed.
    #[cfg(any(test, feature = "test-hooks"))]
    #[must_use]
    pub fn is_hashed(&self) -> bool {
        matches!(self.layout, Layout::Hashed(_))
    }

    /// Shards the map is split into; for a hashed map, the parts open built it from (1 for one
    /// that grew by inserts), so that tests see open take its paths of many parts.
    #[cfg(any(test, feature = "test-hooks"))]
    #[must_use]
    pub fn shards(&self) -> usize {
        match &self.layout {
            Layout::Ordered(o) => o.shards.len(),
            Layout::Hashed(h) => h.parts,
        }
    }

    /// What [`KeyMap::trim`] cuts: the slots a hashed map's slab spans (entries and holes) and
    /// the buckets its index tables have allocated; `None` for an ordered map. For tests.
    #[cfg(any(test, feature = "test-hooks"))]
    #[must_use]
    pub fn room(&self) -> Option<(usize, usize)> {
        match &self.layout {
            Layout::Ordered(_) => None,
            Layout::Hashed(h) => Some((
                h.slab.slots.len(),
                h.index.iter().map(HashTable::num_buckets).sum(),
            )),
        }
    }

    /// Records per shard when the map is ordered: [`SHARD_RECORDS`], or fewer for a map open
    /// built from smaller parts (`Options::open_shard_records`, a test hook).
    #[must_use]
    pub fn shard_records(&self) -> usize {
        match &self.layout {
            Layout::Hashed(h) => h.shard_records,
            Layout::Ordered(o) => o.per_shard,
        }
    }

    /// The order in which a batch of lookups is cheapest, if the map is hashed (an ordered
    /// map is cheapest in key order).
    #[must_use]
    pub fn locality(&self) -> Option<Locality> {
        match &self.layout {
            Layout::Hashed(h) => Some(Locality {
                keyed: h.keyed.clone(),
                picks: h.picks,
                masks: h
                    .index
                    .iter()
                    .map(|t| t.num_buckets().saturating_sub(1) as u64)
                    .collect(),
            }),
            Layout::Ordered(_) => None,
        }
    }

    /// Asks for the slab slots of `keys` ahead of a batch of lookups under one lock (the
    /// reaper's removals, a merge's moves, a write batch): each key's index element is found
    /// by its stored hash bits alone and its slot's cache line requested without waiting, and
    /// for each key not found, the free slot the next insert will take; the batch then finds
    /// its slots in cache instead of paying one memory latency per key (DESIGN.md §3.1).
    /// Changes nothing; nothing for an ordered map.
    pub fn prefetch<'k, K>(&self, keys: impl IntoIterator<Item = &'k K>)
    where
        K: std::hash::Hash + ?Sized + 'k,
    {
        let Layout::Hashed(h) = &self.layout else {
            return;
        };
        // First the index tables: each key's first control group and bucket, for all the keys
        // before any is looked up, so that their misses overlap (a lookup reads the control
        // bytes, then the element they point to: two misses one after the other, and the
        // processor had only a few keys' worth in flight at once).
        let mut places: SmallVec<[(u32, u32); PREFETCH_KEYS]> = SmallVec::new();
        for key in keys {
            let stored = stored_bits(&h.keyed, key);
            #[allow(clippy::cast_possible_truncation)] // under TABLES
            let t = h.table_of(stored) as u32;
            places.push((t, stored));
            h.prefetch_home(t as usize, stored);
        }
        let mut absent = 0;
        for &(t, stored) in &places {
            match h.index[t as usize].find(spread(stored), |&v| stored_of(v) == stored) {
                // The key (for the comparison) and the entry: one cache line (`Line`).
                Some(&v) => crate::log::mmap::prefetch_ref(&h.slab.slots[slot_of(v)]),
                None => absent += 1,
            }
        }
        // Inserts take free slots from the end of the list (slots past the end are new,
        // and consecutive).
        for &i in h.slab.free.iter().rev().take(absent) {
            if let Some(line) = h.slab.slots.get(i as usize) {
                crate::log::mmap::prefetch_ref(line);
            }
        }
    }

    /// The entry for `key`.
    #[inline]
    pub(super) fn get(&self, key: &Key) -> Option<&Entry> {
        match &self.layout {
            Layout::Hashed(h) => h.find(key).map(|i| &h.slab.slots[i].1),
            Layout::Ordered(o) => o.shards[o.shard_of(key)].get(key),
        }
    }

    /// As [`KeyMap::get`], calling `hint` with the file and offset an index element of a
    /// hashed map remembers for the entry (see [`Elem`]) before the entry itself is read, so
    /// that the caller can start loading the record meanwhile. Called at most once, for the
    /// first element whose stored hash bits match (nearly always the key's own); never for an
    /// ordered map, and for a key with no entry only if another key shares its 32 stored
    /// hash bits.
    #[inline]
    pub(super) fn get_hinted(&self, key: &Key, hint: impl FnOnce(u32, u32)) -> Option<&Entry> {
        match &self.layout {
            Layout::Hashed(h) => h.find_hinted(key, hint).map(|i| &h.slab.slots[i].1),
            Layout::Ordered(o) => o.shards[o.shard_of(key)].get(key),
        }
    }

    /// Moves `key`'s entry to the record at `to` (file, offset) if it is still record `seq`
    /// at `from`: what a merge does for each record it copied. In a hashed map the index
    /// element's hint moves with it. False if the entry is gone or was replaced.
    pub(super) fn relocate(
        &mut self,
        key: &Key,
        seq: u64,
        from: (u32, u32),
        to: (u32, u32),
    ) -> bool {
        let moved = |e: &mut Entry| {
            let ours = (e.file, e.offset) == from && e.seq == seq;
            if ours {
                (e.file, e.offset) = to;
            }
            ours
        };
        match &mut self.layout {
            Layout::Hashed(h) => {
                h.touch(key);
                let (t, stored) = h.place(key);
                let slots = &h.slab.slots;
                let Some(v) = h.index[t].find_mut(spread(stored), |&v| {
                    stored_of(v) == stored && slots[slot_of(v)].0 == *key
                }) else {
                    return false;
                };
                let ours = moved(&mut h.slab.slots[slot_of(*v)].1);
                if ours {
                    (v.file, v.offset) = to;
                }
                ours
            }
            Layout::Ordered(o) => {
                o.touch(key);
                let i = o.shard_of(key);
                o.shards[i].get_mut(key).is_some_and(moved)
            }
        }
    }

    /// As [`KeyMap::get`], mutable.
    #[cfg(test)]
    pub(super) fn get_mut(&mut self, key: &Key) -> Option<&mut Entry> {
        match &mut self.layout {
            Layout::Hashed(h) => {
                h.touch(key);
                h.find(key).map(|i| &mut h.slab.slots[i].1)
            }
            Layout::Ordered(o) => {
                o.touch(key);
                let i = o.shard_of(key);
                o.shards[i].get_mut(key)
            }
        }
    }

    /// Removes `key`'s entry.
    pub(super) fn remove(&mut self, key: &Key) -> Option<Entry> {
        match &mut self.layout {
            Layout::Hashed(h) => {
                h.touch(key);
                let (t, stored) = h.place(key);
                let slots = &h.slab.slots;
                let found = h.index[t].find_entry(spread(stored), |&v| {
                    stored_of(v) == stored && slots[slot_of(v)].0 == *key
                });
                let (v, _) = found.ok()?.remove();
                Some(h.slab.free(slot_of(v)).1)
            }
            Layout::Ordered(o) => {
                o.touch(key);
                let i = o.shard_of(key);
                o.shards[i].remove(key)
            }
        }
    }

    /// Entries in each shard (each table, if hashed).
    #[cfg(test)]
    pub(crate) fn shard_lens(&self) -> Vec<usize> {
        match &self.layout {
            Layout::Hashed(h) => h.index.iter().map(HashTable::len).collect(),
            Layout::Ordered(o) => o.shards.iter().map(BTreeMap::len).collect(),
        }
    }

    /// True if `key` has an entry.
    #[cfg(test)]
    #[must_use]
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(&Key::from_slice(key)).is_some()
    }

    /// Inserts `e` under `key`, returning the entry it replaced.
    #[cfg(test)]
    pub fn insert(&mut self, key: Key, e: Entry) -> Option<Entry> {
        match self.entry(key) {
            Slot::Occupied(mut o) => Some(o.insert(e)),
            Slot::Vacant(v) => {
                v.insert(e);
                None
            }
        }
    }

    /// The slot of `key`, for a decision and a change in one lookup. A removal through it
    /// leaves the hashed layout's room as it is, as [`KeyMap::remove`] does; [`KeyMap::trim`]
    /// gives it back (the reaper calls it after each chunk of expiries, the write path after a
    /// batch that removed keys).
    pub fn entry(&mut self, key: Key) -> Slot<'_> {
        if let Layout::Hashed(h) = &self.layout {
            if h.slab.live >= MAX_SLOTS {
                self.make_ordered();
            }
        }
        match &mut self.layout {
            Layout::Hashed(h) => {
                h.split_if_due();
                h.touch(&key);
                let (t, stored) = h.place(&key);
                h.prefetch_home(t, stored);
                let slots = &h.slab.slots;
                let found = h.index[t].find_entry(spread(stored), |&v| {
                    stored_of(v) == stored && slots[slot_of(v)].0 == key
                });
                match found {
                    Ok(index) => Slot::Occupied(Occupied::Hash {
                        index,
                        slab: &mut h.slab,
                    }),
                    Err(absent) => Slot::Vacant(Vacant::Hash {
                        index: absent.into_table(),
                        slab: &mut h.slab,
                        key,
                        stored,
                    }),
                }
            }
            Layout::Ordered(o) => {
                o.touch(&key);
                let i = o.shard_of(&key);
                match o.shards[i].entry(key) {
                    btree_map::Entry::Occupied(o) => Slot::Occupied(Occupied::Tree(o)),
                    btree_map::Entry::Vacant(v) => Slot::Vacant(Vacant::Tree(v)),
                }
            }
        }
    }

    /// True while [`KeyMap::trim`] goes through the index tables a few per call, so callers
    /// that trim only after removals keep calling it until it is through.
    #[must_use]
    pub fn trimming(&self) -> bool {
        matches!(&self.layout, Layout::Hashed(h) if h.shrink_at.is_some())
    }

    /// True if [`KeyMap::trim`] has room to give back (a hashed map's index tables or slab).
    #[must_use]
    pub fn trim_due(&self) -> bool {
        matches!(&self.layout, Layout::Hashed(h) if h.trim_due())
    }

    /// Gives back room in hashed tables left under a quarter full (after removals through
    /// [`KeyMap::entry`]); a table is rehashed only if it shrinks.
    pub fn trim(&mut self) {
        if let Layout::Hashed(h) = &mut self.layout {
            h.trim(TRIM_BUDGET);
        }
    }

    /// Every entry, in key order if the map is ordered.
    #[cfg(test)]
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&Key, &Entry)> + '_> {
        match &self.layout {
            Layout::Hashed(h) => Box::new(
                h.slab
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| h.slab.is_held(*i))
                    .map(|(_, (k, e))| (k, e)),
            ),
            Layout::Ordered(o) => Box::new(o.shards.iter().flatten()),
        }
    }

    /// Calls `f` on every entry, mutable, in key order if the map is ordered.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&Key, &mut Entry)) {
        match &mut self.layout {
            Layout::Hashed(h) => {
                h.touched_all |= h.touched.is_some();
                let Slab { slots, held, .. } = &mut h.slab;
                for (i, (k, e)) in slots.iter_mut().enumerate() {
                    if bit(held, i) {
                        f(k, e);
                    }
                }
            }
            Layout::Ordered(o) => {
                o.touched_all |= o.touched.is_some();
                for t in &mut o.shards {
                    for (k, e) in t {
                        f(k, e);
                    }
                }
            }
        }
    }

    /// Calls `f` on every entry, in key order if the map is ordered (a plain loop over each
    /// shard or table: the walks at open run a million times through it).
    pub fn for_each(&self, mut f: impl FnMut(&Key, &Entry)) {
        match &self.layout {
            Layout::Hashed(h) => {
                for (i, (k, e)) in h.slab.slots.iter().enumerate() {
                    if h.slab.is_held(i) {
                        f(k, e);
                    }
                }
            }
            Layout::Ordered(o) => {
                for t in &o.shards {
                    for (k, e) in t {
                        f(k, e);
                    }
                }
            }
        }
    }

    /// Entries.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.layout {
            Layout::Hashed(h) => h.slab.live,
            Layout::Ordered(o) => o.shards.iter().map(BTreeMap::len).sum(),
        }
    }

    /// True if there is no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        match &self.layout {
            Layout::Hashed(h) => h.slab.live == 0,
            Layout::Ordered(o) => o.shards.iter().all(BTreeMap::is_empty),
        }
    }
}

/// A layout an ordering or a hashing replaced ([`KeyMap::finish_ordering`],
/// [`KeyMap::finish_hashing`]), to be dropped with no lock held.
pub struct Retired(#[allow(dead_code)] Layout);

/// What changed in a map being ordered ([`KeyMap::take_touched`]).
pub enum Touched {
    /// These keys (some more than once).
    Keys(Vec<Key>),
    /// Possibly every entry: order the map under its lock instead.
    All,
    /// The map was ordered meanwhile (by an insert past the slot limit).
    Ordered,
}

impl Ordered {
    /// The map of `all`, sorted here; of entries with equal keys one is kept (a copy taken
    /// while the map changed may hold a key twice; the caller replays it).
    ///
    /// From [`PARALLEL_ORDER_MIN`] entries on, the entries are split at their median key
    /// (a selection, linear) and the two halves sorted and built into shards side by side,
    /// the upper half on a scoped thread: at 1 M keys the sort and the build took 50 and 40
    /// ms on one core, most of what a first scan pays to order a hashed map (DESIGN.md §3.1).
    /// If the thread cannot be started, the calling thread does both halves. Shards hold
    /// `per_shard` records (the last of each half fewer).
    #[must_use]
    pub fn from_unsorted(all: Vec<(Key, Entry)>, per_shard: usize) -> Self {
        let on = if all.len() >= PARALLEL_ORDER_MIN
            && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
        {
            OrderOn::TwoCores
        } else {
            OrderOn::OneCore
        };
        Self::from_unsorted_on(all, per_shard, on)
    }

    /// [`Ordered::from_unsorted`], sorting as `on` says. The halves are sorted in place, in
    /// the one buffer, and their entries moved out of it into the trees (a second buffer for
    /// the upper half was half the copy again at the peak: 32 MB per million keys).
    fn from_unsorted_on(mut all: Vec<(Key, Entry)>, per_shard: usize, on: OrderOn) -> Self {
        if on == OrderOn::OneCore || all.len() < 2 {
            let mut shards = Vec::new();
            sorted_shards(&mut all, per_shard, false, &mut shards);
            return Self::from_shards(shards).with_shard_records(per_shard);
        }
        let mid = all.len() / 2;
        // Every key below `mid` is at most the key at `mid`, every key from it on at least:
        // only a key equal to that one can be in both halves.
        all.select_nth_unstable_by(mid, |a, b| a.0.cmp(&b.0));
        let (lower, upper) = all.split_at_mut(mid);
        let mut low_shards = Vec::new();
        let mut high_shards = Vec::new();
        let spawned = on == OrderOn::TwoCores
            && side_by_side(
                "ebbdb-order",
                || sorted_shards(upper, per_shard, true, &mut high_shards),
                || sorted_shards(lower, per_shard, false, &mut low_shards),
            );
        if !spawned {
            // No thread (the entries are still in `upper`), or none asked for.
            let (lower, upper) = all.split_at_mut(mid);
            if low_shards.is_empty() {
                sorted_shards(lower, per_shard, false, &mut low_shards);
            }
            sorted_shards(upper, per_shard, true, &mut high_shards);
        }
        drop(all);
        // A key in both halves (the input held it twice): one is kept, as in one sort.
        let first_high = high_shards
            .first()
            .and_then(|(_, t)| t.keys().next().cloned());
        if let (Some(first), Some((_, last_low))) = (first_high, low_shards.last_mut()) {
            if last_low.last_key_value().is_some_and(|(k, _)| *k == first) {
                last_low.pop_last();
            }
        }
        if low_shards.len() > 1 && low_shards.last().is_some_and(|(_, t)| t.is_empty()) {
            low_shards.pop();
        }
        if low_shards.first().is_some_and(|(_, t)| t.is_empty()) {
            // A lower half emptied by that removal: the upper half's shards come first.
            low_shards.clear();
            if let Some((start, _)) = high_shards.first_mut() {
                *start = None;
            }
        }
        low_shards.extend(high_shards);
        Self::from_shards(low_shards).with_shard_records(per_shard)
    }

    /// The map, noting that it was cut into shards of `per_shard` records.
    fn with_shard_records(mut self, per_shard: usize) -> Self {
        self.per_shard = per_shard;
        self
    }

    /// Notes `key` as changed, while the map is being hashed.
    fn touch(&mut self, key: &Key) {
        if let Some(t) = &mut self.touched {
            t.push(key.clone());
        }
    }

    /// The ordered map made of `shards`, given in key order (see [`KeyMap::from_shards`]).
    fn from_shards(shards: Vec<Shard>) -> Self {
        let mut map = Self {
            shards: Vec::with_capacity(shards.len().max(1)),
            starts: Vec::with_capacity(shards.len().saturating_sub(1)),
            per_shard: SHARD_RECORDS,
            touched: None,
            touched_all: false,
        };
        for (i, (start, tree)) in shards.into_iter().enumerate() {
            if i > 0 {
                debug_assert!(
                    start.is_some(),
                    "a shard after the first needs its first key"
                );
                map.starts.push(start.unwrap_or_default());
            }
            map.shards.push(tree);
        }
        if map.shards.is_empty() {
            map.shards.push(BTreeMap::new());
        }
        debug_assert!(map.starts.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(map
            .shards
            .iter()
            .enumerate()
            .all(|(i, t)| { t.keys().all(|k| map.shard_of(k) == i) }));
        map
    }

    /// Sets `key`'s entry to `e`, or removes it if `None`.
    pub fn set(&mut self, key: Key, e: Option<Entry>) {
        let i = self.shard_of(&key);
        match e {
            Some(e) => {
                self.shards[i].insert(key, e);
            }
            None => {
                self.shards[i].remove(&key);
            }
        }
    }

    /// The index of the shard whose range holds `key`.
    #[inline]
    fn shard_of(&self, key: &[u8]) -> usize {
        self.starts
            .partition_point(|s| key_order(s, key) != std::cmp::Ordering::Greater)
    }

    /// Entries whose keys lie within `bounds`, in key order.
    pub fn range<'m, 'b>(
        &'m self,
        bounds: (Bound<&'b [u8]>, Bound<&'b [u8]>),
    ) -> impl DoubleEndedIterator<Item = (&'m Key, &'m Entry)> + use<'m, 'b> {
        let first = match bounds.0 {
            Bound::Included(k) | Bound::Excluded(k) => self.shard_of(k),
            Bound::Unbounded => 0,
        };
        let last = match bounds.1 {
            Bound::Included(k) | Bound::Excluded(k) => self.shard_of(k),
            Bound::Unbounded => self.shards.len() - 1,
        };
        // Bounds the wrong way round give nothing (a B-tree's `range` would panic).
        let shards = self.shards.get(first..=last).unwrap_or_default();
        let empty = match bounds {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b) | Bound::Included(b)) => {
                a >= b
            }
            _ => false,
        };
        let shards = if empty { &[][..] } else { shards };
        shards.iter().flat_map(move |t| t.range::<[u8], _>(bounds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Key {
        Key::from_slice(s.as_bytes())
    }

    /// Every entry, in the map's order.
    fn entries(map: &KeyMap) -> Vec<(Key, Entry)> {
        map.iter().map(|(k, e)| (k.clone(), *e)).collect()
    }

    /// What [`KeyMap::get_hinted`] tells before the entry is read, and the entry it returns.
    fn hinted(map: &KeyMap, key: &Key) -> (Option<(u32, u32)>, Option<Entry>) {
        let mut hint = None;
        let e = map.get_hinted(key, |file, offset| hint = Some((file, offset)));
        (hint, e.copied())
    }

    /// An index element remembers where its entry's record lies: set by an insert, moved by
    /// an overwrite, by a merge's relocation (only of the record it copied) and with a trim's
    /// move of the entry into a hole; left stale by a change in place, when the entry read is
    /// still the map's. An ordered map gives no hint.
    #[test]
    fn index_elements_remember_where_the_record_lies() {
        let at = |seq: u64, file: u32, offset: u32| Entry {
            file,
            offset,
            ..Entry::at_seq(seq)
        };
        let name = |i: u32| k(&format!("k{i}"));
        let mut map = KeyMap::default();
        let n = u32::try_from(SPLIT_AT).expect("small") + 3000;
        for i in 0..n {
            map.insert(name(i), at(u64::from(i), 1, i * 10));
        }
        // A key whose 32 stored hash bits another key shares may be handed that key's place
        // (tens of thousands of keys share some pair about one run in two): such keys are
        // checked for their entry only.
        let Layout::Hashed(h) = &map.layout else {
            unreachable!("hashed")
        };
        let keyed = h.keyed.clone();
        let mut seen = std::collections::HashMap::new();
        for i in 0..n {
            *seen.entry(stored_bits(&keyed, &name(i))).or_insert(0) += 1;
        }
        let own = |i: u32| seen[&stored_bits(&keyed, &name(i))] == 1;
        let mut alone = (0..n).filter(|&i| own(i));
        let (a, b) = (alone.next().expect("a key"), alone.next().expect("a key"));

        assert_eq!(
            hinted(&map, &name(a)),
            (Some((1, a * 10)), Some(at(u64::from(a), 1, a * 10)))
        );
        assert_eq!(
            map.insert(name(a), at(900, 2, 7)),
            Some(at(u64::from(a), 1, a * 10))
        );
        assert_eq!(hinted(&map, &name(a)), (Some((2, 7)), Some(at(900, 2, 7))));
        assert!(
            !map.relocate(&name(a), u64::from(a), (2, 7), (3, 64)),
            "an older record"
        );
        assert!(
            !map.relocate(&name(a), 900, (2, 8), (3, 64)),
            "another place"
        );
        assert!(!map.relocate(&k("absent"), 900, (2, 7), (3, 64)));
        assert!(map.relocate(&name(a), 900, (2, 7), (3, 64)));
        assert_eq!(
            hinted(&map, &name(a)),
            (Some((3, 64)), Some(at(900, 3, 64)))
        );
        map.get_mut(&name(b)).expect("present").file = 9;
        assert_eq!(
            hinted(&map, &name(b)),
            (Some((1, b * 10)), Some(at(u64::from(b), 9, b * 10))),
            "stale hint, the entry as changed"
        );
        assert_eq!(hinted(&map, &k("absent")).1, None);

        // Removing keys in the lower half leaves holes that trims fill from the slab's end.
        for i in (0..n / 2).filter(|&i| i != a && i != b) {
            assert!(map.remove(&name(i)).is_some());
        }
        let slots_before = match &map.layout {
            Layout::Hashed(h) => h.slab.slots.len(),
            Layout::Ordered(_) => unreachable!("hashed"),
        };
        for _ in 0..64 {
            map.trim();
        }
        let Layout::Hashed(h) = &map.layout else {
            unreachable!("hashed")
        };
        assert!(
            h.slab.slots.len() < slots_before,
            "entries moved into holes"
        );
        let mut checked = 0;
        for i in n / 2..n {
            let e = at(u64::from(i), 1, i * 10);
            let (hint, got) = hinted(&map, &name(i));
            assert_eq!(got, Some(e));
            if own(i) {
                assert_eq!(hint, Some((1, i * 10)), "key {i}");
                checked += 1;
            }
        }
        assert!(checked * 100 >= (n - n / 2) * 99, "{checked} hints checked");

        map.make_ordered();
        assert_eq!(
            hinted(&map, &name(n - 1)),
            (None, Some(at(u64::from(n - 1), 1, (n - 1) * 10)))
        );
    }

    /// `Ordered::from_unsorted` keeps one entry per key, in key order, with every key in the
    /// shard `shard_of` names and no empty shard, whichever way it sorts (one core; two, with
    /// a thread; two halves without one): random keys, keys given twice, a key given twice
    /// at the split (the only key that can fall in both halves) with a lower half of one
    /// shard and of one shard plus that key, and one key many times over.
    #[test]
    fn ordering_an_unsorted_copy_keeps_one_entry_per_key_in_order() {
        let key_of = |i: u64| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            // Some keys longer than the inline bytes.
            let mut b = format!("{h:016x}").into_bytes();
            if i.is_multiple_of(5) {
                b.extend_from_slice(b"-longer-than-inline");
            }
            Key::from_slice(&b)
        };
        let check = |all: Vec<(Key, Entry)>, want: &[Key], what: &str| {
            for on in [OrderOn::OneCore, OrderOn::TwoCores, OrderOn::NoThread] {
                let o = Ordered::from_unsorted_on(all.clone(), SHARD_RECORDS, on);
                let got: Vec<Key> = o.shards.iter().flat_map(|t| t.keys().cloned()).collect();
                assert_eq!(got, want, "{what}, {on:?}");
                for (i, t) in o.shards.iter().enumerate() {
                    assert!(
                        !t.is_empty() || o.shards.len() == 1,
                        "{what}, {on:?}: empty shard"
                    );
                    assert!(
                        t.keys().all(|k| o.shard_of(k) == i),
                        "{what}, {on:?}: misplaced"
                    );
                }
                assert_eq!(o.starts.len() + 1, o.shards.len(), "{what}, {on:?}");
            }
        };
        for n in [1u64, 10, 700, 5000, 40_000] {
            let mut all: Vec<(Key, Entry)> =
                (0..n).map(|i| (key_of(i), Entry::at_seq(i))).collect();
            all.extend((0..n).step_by(7).map(|i| (key_of(i), Entry::at_seq(i))));
            let mut want: Vec<Key> = (0..n).map(key_of).collect();
            want.sort();
            check(all, &want, &format!("{n} keys, every seventh twice"));
        }
        // `m` distinct keys and the one at sorted place `mid - 1` again, so that the split at
        // `mid = (m + 1) / 2` falls between its two copies: the lower half ends with one, the
        // upper starts with the other. With a lower half of `SHARD_RECORDS + 1` distinct keys
        // its last shard holds only that key, and is left empty when it is dropped.
        for lower in [3usize, 100, SHARD_RECORDS, SHARD_RECORDS + 1] {
            let m = 2 * lower - 1;
            let mut want: Vec<Key> = (0..m as u64).map(key_of).collect();
            want.sort();
            let mid = m.div_ceil(2);
            let twice = want[mid - 1].clone();
            let mut all: Vec<(Key, Entry)> =
                want.iter().map(|k| (k.clone(), Entry::at_seq(1))).collect();
            all.push((twice.clone(), Entry::at_seq(2)));
            let mut sorted: Vec<Key> = all.iter().map(|(k, _)| k.clone()).collect();
            sorted.sort();
            assert_eq!(all.len() / 2, mid);
            assert!(
                sorted[mid - 1] == twice && sorted[mid] == twice,
                "the copies straddle"
            );
            check(
                all,
                &want,
                &format!("a lower half of {lower} keys, its last one twice"),
            );
        }
        for n in [3usize, 5000] {
            let all = vec![(k("same"), Entry::at_seq(0)); n];
            check(all, &[k("same")], &format!("one key {n} times"));
        }
    }

    /// A map split at "d" and "m", holding `keys`, beside the same keys in one B-tree.
    fn split(keys: &[&str]) -> (KeyMap, BTreeMap<Key, Entry>) {
        let mut shards: Vec<Shard> = vec![
            (None, BTreeMap::new()),
            (Some(k("d")), BTreeMap::new()),
            (Some(k("m")), BTreeMap::new()),
        ];
        let mut one = BTreeMap::new();
        for (i, s) in keys.iter().enumerate() {
            let at = if *s < "d" {
                0
            } else if *s < "m" {
                1
            } else {
                2
            };
            shards[at].1.insert(k(s), Entry::at_seq(i as u64));
            one.insert(k(s), Entry::at_seq(i as u64));
        }
        (KeyMap::from_shards(shards), one)
    }

    /// Ranges of `map` (ordered) agree with `one` for every pair of bounds drawn from `probes`.
    fn same_ranges(map: &KeyMap, one: &BTreeMap<Key, Entry>, probes: &[&'static str]) {
        let ord = map.ordered().expect("an ordered map");
        let bound = |i: usize, s: &'static str| match i {
            0 => Bound::Included(s.as_bytes()),
            1 => Bound::Excluded(s.as_bytes()),
            _ => Bound::Unbounded,
        };
        for a in probes {
            for b in probes {
                for (ia, ib) in (0..3).flat_map(|x| (0..3).map(move |y| (x, y))) {
                    let bounds = (bound(ia, a), bound(ib, b));
                    let got: Vec<_> = ord.range(bounds).map(|(k, e)| (k.clone(), *e)).collect();
                    let ok = match bounds {
                        (Bound::Included(x), Bound::Included(y)) => x <= y,
                        (Bound::Excluded(x), Bound::Excluded(y)) => x < y,
                        (
                            Bound::Included(x) | Bound::Excluded(x),
                            Bound::Included(y) | Bound::Excluded(y),
                        ) => x < y,
                        _ => true,
                    };
                    let want: Vec<_> = if ok {
                        one.range::<[u8], _>(bounds)
                            .map(|(k, e)| (k.clone(), *e))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    assert_eq!(got, want, "{bounds:?}");
                    let back: Vec<_> = ord.range(bounds).rev().map(|(k, _)| k.clone()).collect();
                    assert_eq!(
                        back,
                        want.iter()
                            .rev()
                            .map(|(k, _)| k.clone())
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
    }

    /// Lookups and changes through every entry point agree with a single B-tree: every probe
    /// key inserted, every original key at an odd position removed, the rest bumped through
    /// `entry` and `get_mut`, every entry changed through `for_each_mut`.
    fn change_both(
        map: &mut KeyMap,
        one: &mut BTreeMap<Key, Entry>,
        keys: &[&str],
        probes: &[&str],
    ) {
        for p in probes {
            assert_eq!(map.get(&k(p)), one.get(p.as_bytes()));
            assert_eq!(
                map.contains_key(p.as_bytes()),
                one.contains_key(p.as_bytes())
            );
        }
        for (i, p) in probes.iter().enumerate() {
            assert_eq!(
                map.insert(k(p), Entry::at_seq(100 + i as u64)),
                one.insert(k(p), Entry::at_seq(100 + i as u64))
            );
        }
        for (i, s) in keys.iter().enumerate() {
            if i % 2 == 1 {
                assert_eq!(map.remove(&k(s)), one.remove(s.as_bytes()));
            } else if i % 4 == 2 {
                if let Slot::Occupied(mut o) = map.entry(k(s)) {
                    o.get_mut().seq += 1000;
                    one.get_mut(s.as_bytes()).expect("same keys").seq += 1000;
                }
            } else if let Some(e) = map.get_mut(&k(s)) {
                e.seq += 2000;
                one.get_mut(s.as_bytes()).expect("same keys").seq += 2000;
            }
        }
        map.for_each_mut(|_, e| e.file += 1);
        for e in one.values_mut() {
            e.file += 1;
        }
        assert_eq!(map.len(), one.len());
        assert_eq!(map.is_empty(), one.is_empty());
    }

    const KEYS: [&str; 12] = [
        "", "a", "c", "cz", "d", "d\0", "k", "lz", "m", "ma", "z", "zz",
    ];
    const PROBES: [&str; 13] = [
        "", "0", "b", "c", "d", "d\0", "e", "l", "m", "m\0", "y", "zz", "zzz",
    ];

    /// Ranges, lookups and changes across shard boundaries agree with a single B-tree, for
    /// every pair of bounds drawn from keys inside, between and at the boundaries.
    #[test]
    fn a_split_map_behaves_as_one_tree() {
        let (mut map, mut one) = split(&KEYS);
        assert_eq!(map.shards(), 3);
        for _round in 0..2 {
            same_ranges(&map, &one, &PROBES);
            let all: Vec<_> = entries(&map);
            assert_eq!(
                all,
                one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
            );
            change_both(&mut map, &mut one, &KEYS, &PROBES);
        }
        let empty = KeyMap::from_shards(Vec::new());
        assert!(
            empty.is_empty()
                && empty.ordered().is_some_and(|o| o
                    .range((Bound::Unbounded, Bound::Unbounded))
                    .next()
                    .is_none())
        );
    }

    /// The addresses `KeyMap::prefetch` aims at are where a lookup reads: for every index
    /// table (one, then after the split all of them), `table_end` less a bucket's offset is
    /// that bucket's element, and a key's element lies in the control group its hash starts
    /// at (for nearly every key: a probe goes on to later groups only past a full group).
    /// Fails if hashbrown lays its tables out, or starts its probes, differently.
    #[test]
    fn prefetches_aim_at_the_buckets_a_lookup_reads() {
        let mut map = KeyMap::default();
        for n in [1_000u64, 3 * SPLIT_AT as u64] {
            let keys: Vec<Key> = (0..n)
                .map(|i| Key::from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()))
                .collect();
            for (i, key) in keys.iter().enumerate() {
                map.insert(key.clone(), Entry::at_seq(i as u64));
            }
            map.prefetch(keys.iter());
            let Layout::Hashed(h) = &map.layout else {
                panic!("hashed");
            };
            let mut in_first_group = 0;
            for key in &keys {
                let (t, stored) = h.place(key);
                let table = &h.index[t];
                let (control, home) = h.home(t, stored).expect("a table holding keys");
                let mask = table.num_buckets() - 1;
                let start = spread(stored) as usize & mask;
                let address = |i: usize| table.get_bucket(i).map(|v| std::ptr::from_ref(v).addr());
                // The element aimed at is the home bucket's, wherever hashbrown keeps it.
                if let Some(at_home) = address(start) {
                    assert_eq!(home, at_home, "the home element");
                }
                // The control bytes, one per bucket, are taken to begin where the elements end
                // (hashbrown shows no address of them: this only ties the two together).
                assert_eq!(
                    control - start,
                    home + (start + 1) * std::mem::size_of::<Elem>()
                );
                let at = table
                    .find_bucket_index(spread(stored), |&v| {
                        stored_of(v) == stored && h.slab.slots[slot_of(v)].0 == *key
                    })
                    .expect("found");
                assert_eq!(
                    address(at),
                    Some(
                        home.wrapping_add(
                            start
                                .wrapping_sub(at)
                                .wrapping_mul(std::mem::size_of::<Elem>())
                        )
                    ),
                    "elements lie in reverse bucket order"
                );
                if (at.wrapping_sub(start) & mask) < 16 {
                    in_first_group += 1;
                }
            }
            assert!(
                in_first_group * 10 >= keys.len() * 9,
                "{in_first_group} of {n} keys in the group their probe starts at"
            );
        }
    }

    /// A map that starts empty is hashed and behaves as a B-tree for every point operation;
    /// ordered, it holds the same entries in key order, with ranges that agree, and it goes on
    /// agreeing through further changes.
    #[test]
    fn a_hashed_map_behaves_as_a_tree_and_orders_into_one() {
        let mut map = KeyMap::default();
        assert!(map.ordered().is_none() && map.is_empty());
        let mut one = BTreeMap::new();
        for (i, s) in KEYS.iter().enumerate() {
            assert_eq!(map.insert(k(s), Entry::at_seq(i as u64)), None);
            one.insert(k(s), Entry::at_seq(i as u64));
        }
        change_both(&mut map, &mut one, &KEYS, &PROBES);
        let mut unordered = entries(&map);
        unordered.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            unordered,
            one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
        );
        map.make_ordered();
        assert_eq!(map.shards(), 1);
        same_ranges(&map, &one, &PROBES);
        change_both(&mut map, &mut one, &KEYS, &PROBES);
        same_ranges(&map, &one, &PROBES);
        map.make_ordered();
        same_ranges(&map, &one, &PROBES);
    }

    /// Many keys, of every length around the inline limit and the hash's eight-byte words:
    /// inserted, half removed (through `remove` and through `entry`, so tables grow, shrink
    /// and are trimmed), then ordered into several shards that cut where the keys do. The
    /// tables hold their shares of the keys, and every answer agrees with a B-tree.
    #[test]
    fn many_keys_grow_shrink_and_order_across_tables_and_shards() {
        let mut map = KeyMap::default();
        let mut one = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = SPLIT_AT + 3 * SHARD_RECORDS + 17;
        let mut keys = Vec::with_capacity(n);
        for i in 0..n {
            let len = (next() % 40) as usize;
            let mut key: Vec<u8> = (0..len).map(|_| (next() % 4) as u8).collect();
            key.extend_from_slice(&(i as u32).to_be_bytes()[..usize::from(i % 3 == 0)]);
            let key = Key::from_slice(&key);
            let e = Entry::at_seq(i as u64);
            assert_eq!(map.insert(key.clone(), e), one.insert(key.clone(), e));
            keys.push(key);
        }
        // Table `i` holds about `2^(i/TABLES)` parts of the keys (`picks`).
        let lens = map.shard_lens();
        assert_eq!(lens.len(), TABLES);
        let parts: f64 = (0..TABLES).map(|i| (i as f64 / TABLES as f64).exp2()).sum();
        for (i, &len) in lens.iter().enumerate() {
            let want = one.len() as f64 * (i as f64 / TABLES as f64).exp2() / parts;
            assert!(
                (len as f64 - want).abs() < want * 0.5 + 30.0,
                "table {i}: {len} keys, about {want:.0} expected"
            );
        }
        // The last eighth of the tables against the first (each eighth holds thousands of
        // keys, where one table holds a few dozen and varies by a third).
        let eighth = TABLES / 8;
        let first: usize = lens[..eighth].iter().sum();
        let last: usize = lens[TABLES - eighth..].iter().sum();
        assert!(
            last > first * 3 / 2,
            "{first} keys in the first eighth, {last} in the last"
        );
        for (i, key) in keys.iter().enumerate() {
            match i % 4 {
                0 => assert_eq!(map.remove(key), one.remove(key)),
                1 => {
                    let got = match map.entry(key.clone()) {
                        Slot::Occupied(o) => Some(o.remove()),
                        Slot::Vacant(_) => None,
                    };
                    assert_eq!(got, one.remove(key));
                }
                _ => assert_eq!(map.get(key), one.get(key)),
            }
        }
        map.trim();
        assert_eq!(map.len(), one.len());
        for key in &keys {
            assert_eq!(map.get(key), one.get(key));
        }
        map.make_ordered();
        let want: Vec<_> = one.iter().map(|(k, e)| (k.clone(), *e)).collect();
        assert_eq!(entries(&map), want);
        // Full shards, but for the last of each half when the halves were built side by side.
        let full = want.len().div_ceil(SHARD_RECORDS);
        let lens = map.shard_lens();
        let partial = lens.iter().filter(|&&l| l < SHARD_RECORDS).count();
        assert!(
            (full..=full + 1).contains(&lens.len()) && partial <= lens.len() + 1 - full,
            "{lens:?}"
        );
        let ord = map.ordered().expect("ordered");
        for w in want.iter().step_by(97) {
            let from = (Bound::Included(w.0.as_slice()), Bound::Unbounded);
            let got: Vec<_> = ord.range(from).take(50).map(|(k, _)| k.clone()).collect();
            let exp: Vec<_> = one
                .range::<[u8], _>(from)
                .take(50)
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(got, exp);
        }
        for key in &keys {
            assert_eq!(map.get(key), one.get(key));
        }
    }

    /// A map built in bulk from parts (as open builds one) holds what inserting the same
    /// entries one by one would: at every size around a slab page and the index's split into
    /// tables, from parts of every shape (empty, under a page, whole pages, pages and a rest).
    /// Every key is found, with its record's place as the hint; the map then takes inserts,
    /// removals and trims, and orders into the same tree. From `MAX_SLOTS` entries on it is
    /// ordered at once.
    #[test]
    fn a_map_built_in_bulk_holds_what_inserts_would() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in [
            0,
            1,
            5,
            64,
            PAGE - 1,
            PAGE,
            PAGE + 3,
            SPLIT_AT - 1,
            SPLIT_AT,
            SPLIT_AT + 3 * PAGE + 17,
            MAX_SLOTS - 1,
            MAX_SLOTS,
        ] {
            let mut all: Vec<(Key, Entry)> = (0..n)
                .map(|i| {
                    let key = Key::from_slice(&next().to_be_bytes()[..4 + i % 5]);
                    let e = Entry {
                        file: 7 + (i % 3) as u32,
                        offset: (i * 40) as u32,
                        ..Entry::at_seq(i as u64)
                    };
                    (key, e)
                })
                .collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all.dedup_by(|a, b| a.0 == b.0);
            let one: BTreeMap<Key, Entry> = all.iter().cloned().collect();
            // Parts of every shape, in key order as open's are.
            let shapes = [0, 3, PAGE, 2 * PAGE + 5, PAGE - 1, 0, 1, 64, 3 * PAGE];
            let hash_key = HashKey::new();
            let mut parts = Vec::new();
            let mut rest = all.as_slice();
            for shape in shapes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (part, tail) = rest.split_at((*shape).min(rest.len()));
                let mut pages = PartPages::default();
                for v in part {
                    pages.push(v.clone());
                }
                parts.push(hash_key.prepare(pages));
                rest = tail;
            }
            let mut map = KeyMap::hashed_from(&hash_key, parts, SHARD_RECORDS);
            assert_eq!(map.len(), one.len(), "{n} entries");
            if n >= MAX_SLOTS {
                assert!(map.ordered().is_some());
                assert_eq!(
                    entries(&map),
                    one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
                );
                continue;
            }
            assert!(map.is_hashed());
            let tables = if n >= SPLIT_AT { TABLES } else { 1 };
            assert_eq!(map.shard_lens().len(), tables);
            // A key whose stored hash bits another key shares may be handed that one's place;
            // every other key gets its own.
            let mut seen = std::collections::HashMap::new();
            for key in one.keys() {
                *seen.entry(stored_bits(&hash_key.0, key)).or_insert(0) += 1;
            }
            for (key, e) in &one {
                let (hint, got) = hinted(&map, key);
                assert_eq!(got, Some(*e));
                if seen[&stored_bits(&hash_key.0, key)] == 1 {
                    assert_eq!(hint, Some((e.file, e.offset)));
                }
            }
            // A map of fewer entries than a page holds one short page, as one grown by
            // inserts would; more, whole pages.
            let Layout::Hashed(h) = &map.layout else {
                unreachable!("hashed")
            };
            let room = match n {
                0 => 0,
                n if n < PAGE => n.next_power_of_two().clamp(FIRST_PAGE, PAGE),
                n => n.div_ceil(PAGE) * PAGE,
            };
            assert_eq!(h.slab.slots.room(), room, "{n} entries");
            let mut one = one;
            let keys: Vec<Key> = one.keys().cloned().collect();
            for (i, key) in keys.iter().enumerate().step_by(3) {
                assert_eq!(map.remove(key), one.remove(key));
                let fresh = Key::from_slice(&next().to_be_bytes());
                let e = Entry::at_seq((n + i) as u64);
                assert_eq!(map.insert(fresh.clone(), e), one.insert(fresh, e));
            }
            for (i, key) in keys.iter().enumerate() {
                if i % 3 == 1 {
                    assert_eq!(map.remove(key), one.remove(key));
                }
            }
            while {
                map.trim();
                map.trimming()
            } {}
            assert_eq!(map.len(), one.len());
            for (key, e) in &one {
                assert_eq!(map.get(key), Some(e));
            }
            map.make_ordered();
            assert_eq!(
                entries(&map),
                one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
            );
        }
    }

    /// A map that grows by inserts starts on a page of `FIRST_PAGE` slots, which doubles while
    /// it is the only one; a full page of `PAGE` slots comes after it, and every key keeps its
    /// entry through each growth.
    #[test]
    fn the_first_page_doubles_up_to_a_whole_page() {
        let mut map = KeyMap::default();
        let room = |map: &KeyMap| match &map.layout {
            Layout::Hashed(h) => h.slab.slots.room(),
            Layout::Ordered(_) => unreachable!("hashed"),
        };
        assert_eq!(room(&map), 0);
        let key = |i: usize| Key::from_slice(&(i as u64).to_be_bytes());
        for i in 0..PAGE + 1 {
            map.insert(key(i), Entry::at_seq(i as u64));
            let want = if i < PAGE {
                (i + 1).next_power_of_two().max(FIRST_PAGE)
            } else {
                2 * PAGE
            };
            assert_eq!(room(&map), want, "after {} keys", i + 1);
        }
        for i in 0..PAGE + 1 {
            assert_eq!(map.get(&key(i)), Some(&Entry::at_seq(i as u64)));
        }
    }

    /// Pages made ahead by writers (`stock_spare_page`) are taken by maps that grow, whole and
    /// full of holes: three maps growing side by side past several pages, with a spare stocked
    /// before every insert as the write path does, keep every entry, and no more than
    /// `SPARES` pages are ever kept.
    #[test]
    fn maps_take_spare_pages_and_keep_every_entry() {
        let mut maps: Vec<KeyMap> = (0..3).map(|_| KeyMap::default()).collect();
        let key = |m: usize, i: usize| Key::from_slice(format!("{m}-{i:08}").as_bytes());
        let n = 3 * PAGE + 5;
        for i in 0..n {
            // As the write path does: the writer's part, and the background's when asked.
            if stock_spare_page() {
                stock_spare_pages();
            }
            assert!(SPARE_COUNT.load(Ordering::Relaxed) <= SPARES);
            for (m, map) in maps.iter_mut().enumerate() {
                map.insert(key(m, i), Entry::at_seq(i as u64));
            }
        }
        assert!(
            SPARES_WANTED.load(Ordering::Relaxed),
            "a map took a whole page"
        );
        for (m, map) in maps.iter().enumerate() {
            assert_eq!(map.len(), n);
            for i in (0..n).step_by(97).chain([n - 1]) {
                assert_eq!(map.get(&key(m, i)), Some(&Entry::at_seq(i as u64)));
            }
            let Layout::Hashed(h) = &map.layout else {
                unreachable!("hashed")
            };
            assert_eq!(h.slab.slots.room(), n.div_ceil(PAGE) * PAGE);
        }
    }

    /// After nine keys in ten leave, trimming a bounded step at a time moves the survivors
    /// into the holes and cuts the slab to about the live keys, while every lookup, change
    /// and walk still agrees with a B-tree, before, during and after.
    #[test]
    fn trimming_gives_the_slab_back_and_keeps_every_answer() {
        let mut map = KeyMap::default();
        let mut one = BTreeMap::new();
        let n = 3 * SPLIT_AT;
        let key = |i: usize| {
            Key::from_slice(
                format!("key-{:08}", i.wrapping_mul(2_654_435_761) % 1_000_003).as_bytes(),
            )
        };
        for i in 0..n {
            let e = Entry::at_seq(i as u64);
            assert_eq!(map.insert(key(i), e), one.insert(key(i), e));
        }
        let slab_len = |m: &KeyMap| match &m.layout {
            Layout::Hashed(h) => h.slab.slots.len(),
            Layout::Ordered(_) => usize::MAX,
        };
        let full = slab_len(&map);
        assert_eq!(full, one.len());
        for i in (0..n).filter(|i| i % 10 != 3) {
            let got = if i % 2 == 0 {
                map.remove(&key(i))
            } else {
                match map.entry(key(i)) {
                    Slot::Occupied(o) => Some(o.remove()),
                    Slot::Vacant(_) => None,
                }
            };
            assert_eq!(got, one.remove(&key(i)));
        }
        let mut rounds = 0;
        loop {
            let before = slab_len(&map);
            map.trim();
            rounds += 1;
            // A write between trims lands in a hole or at the end; it must stay findable.
            let fresh = Key::from_slice(format!("fresh-{rounds}").as_bytes());
            let e = Entry::at_seq(1_000_000 + rounds);
            assert_eq!(map.insert(fresh.clone(), e), one.insert(fresh, e));
            for (k, e) in one.iter().step_by(7) {
                assert_eq!(map.get(k), Some(e));
            }
            if slab_len(&map) >= before {
                break;
            }
            assert!(before - slab_len(&map) <= TRIM_BUDGET + 1, "a bounded step");
        }
        assert!(rounds > 2, "{rounds} rounds");
        if let Layout::Hashed(h) = &map.layout {
            let pages = h.slab.slots.pages.len();
            assert!(
                pages * PAGE < h.slab.slots.len() + 2 * PAGE,
                "{pages} pages for {} slots",
                h.slab.slots.len()
            );
        }
        assert!(
            slab_len(&map) <= one.len() * 4 / 3 + 1024,
            "slab {} for {} keys",
            slab_len(&map),
            one.len()
        );
        assert_eq!(map.len(), one.len());
        for (k, e) in &one {
            assert_eq!(map.get(k), Some(e));
        }
        let mut walked = entries(&map);
        walked.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            walked,
            one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
        );
        for i in 0..n {
            let e = Entry::at_seq(2_000_000 + i as u64);
            assert_eq!(map.insert(key(i), e), one.insert(key(i), e));
        }
        map.make_ordered();
        assert_eq!(
            entries(&map),
            one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
        );
    }

    /// After a wave of removals the index tables give their room back a few per trim (each
    /// shrink rehashes a table under the keyspace's lock), and all of them in the end.
    #[test]
    fn index_tables_shrink_a_few_per_trim() {
        let mut map = KeyMap::default();
        let n = 3 * SPLIT_AT;
        let key = |i: usize| Key::from_slice(&(i as u64).to_le_bytes());
        for i in 0..n {
            map.insert(key(i), Entry::at_seq(i as u64));
        }
        map.trim();
        for i in (0..n).filter(|i| i % 8 != 0) {
            map.remove(&key(i));
        }
        let capacities = |m: &KeyMap| match &m.layout {
            Layout::Hashed(h) => h.index.iter().map(HashTable::capacity).collect::<Vec<_>>(),
            Layout::Ordered(_) => unreachable!("stays hashed"),
        };
        let oversized = |m: &KeyMap| match &m.layout {
            Layout::Hashed(h) => h
                .index
                .iter()
                .filter(|t| t.capacity() > SHRINK_MIN_CAPACITY && t.len() * 4 < t.capacity())
                .count(),
            Layout::Ordered(_) => unreachable!("stays hashed"),
        };
        let before = capacities(&map);
        assert!(
            oversized(&map) > SHRINK_TABLES_PER_TRIM,
            "the wave left room to give back"
        );
        map.trim();
        let after = capacities(&map);
        let shrunk = before.iter().zip(&after).filter(|(b, a)| a < b).count();
        assert!(
            (1..=SHRINK_TABLES_PER_TRIM).contains(&shrunk),
            "{shrunk} tables shrunk by one trim"
        );
        assert!(map.trimming(), "the walk goes on at the next calls");
        for _ in 0..TABLES / SHRINK_TABLES_PER_TRIM {
            map.trim();
        }
        assert_eq!(oversized(&map), 0, "every table looked at");
        assert!(!map.trimming(), "and is over");
        for i in 0..n {
            assert_eq!(map.get(&key(i)).is_some(), i % 8 == 0);
        }
    }

    /// Under churn (the oldest key leaves, a new one comes, as with TTLs) the slab and the
    /// index stay the size of the live keys: freed slots are reused.
    #[test]
    fn churn_reuses_slots() {
        let mut map = KeyMap::default();
        let live = SPLIT_AT + 1000;
        let key = |i: usize| {
            Key::from_slice(&(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes())
        };
        for i in 0..live {
            map.insert(key(i), Entry::at_seq(i as u64));
        }
        let room = |m: &KeyMap| match &m.layout {
            Layout::Hashed(h) => h.index.iter().map(HashTable::capacity).sum::<usize>(),
            Layout::Ordered(_) => usize::MAX,
        };
        let before = room(&map);
        for i in live..live * 8 {
            let gone = match map.entry(key(i - live)) {
                Slot::Occupied(o) => Some(o.remove()),
                Slot::Vacant(_) => None,
            };
            assert_eq!(gone.map(|e| e.seq), Some((i - live) as u64));
            map.insert(key(i), Entry::at_seq(i as u64));
            if i % 1000 == 0 {
                map.trim();
            }
        }
        let Layout::Hashed(h) = &map.layout else {
            panic!("still hashed");
        };
        assert_eq!(h.slab.live, live);
        assert_eq!(h.slab.slots.len(), live, "no slot left behind");
        assert!(h.slab.free.len() < 16, "{} free", h.slab.free.len());
        assert!(
            room(&map) <= before * 2,
            "index room {} after churn, {before} before",
            room(&map)
        );
    }

    /// A hashed map that reaches [`MAX_SLOTS`] entries becomes ordered at the next insert,
    /// with every entry, and takes further keys.
    #[test]
    fn a_full_hashed_map_orders_itself_and_goes_on() {
        let mut map = KeyMap::default();
        let key = |i: usize| Key::from_slice(&(i as u64).to_be_bytes());
        for i in 0..MAX_SLOTS {
            map.insert(key(i), Entry::at_seq(i as u64));
        }
        assert!(map.ordered().is_none());
        assert_eq!(map.insert(key(MAX_SLOTS), Entry::at_seq(0)), None);
        assert!(map.ordered().is_some());
        assert_eq!(map.len(), MAX_SLOTS + 1);
        let walked: Vec<u64> = map.iter().map(|(_, e)| e.seq).collect();
        let want: Vec<u64> = (0..MAX_SLOTS as u64).chain([0]).collect();
        assert_eq!(walked, want);
    }

    /// The steps of an ordering off the lock (`KeyspaceCore::read_ordered`), with changes
    /// between them: keys inserted, removed before and after their slot was copied, moved by
    /// a trim into a hole the copy had passed, changed through `get_mut`. The copy brought up
    /// to date with the noted keys equals the map. A walk that changes entries in place
    /// makes the note "everything".
    #[test]
    fn an_ordering_off_the_lock_catches_every_change_made_during_it() {
        let key = |i: usize| Key::from_slice(format!("k{:07}", (i * 7919) % 1_000_003).as_bytes());
        let mut map = KeyMap::default();
        let mut one = BTreeMap::new();
        let n = SPLIT_AT + 5000;
        for i in 0..n {
            map.insert(key(i), Entry::at_seq(i as u64));
            one.insert(key(i), Entry::at_seq(i as u64));
        }
        // Holes in the lower slots, so a trim during the copy moves entries into them.
        for i in (0..n / 2).filter(|i| i % 3 != 0) {
            assert_eq!(map.remove(&key(i)), one.remove(&key(i)));
        }
        assert!(map.begin_ordering());
        let mut copy = Vec::new();
        let mut at = map.copy_entries(0, n / 2, &mut copy).expect("more to copy");
        // Changes while the copy is half done.
        for i in n..n + 100 {
            map.insert(key(i), Entry::at_seq(i as u64));
            one.insert(key(i), Entry::at_seq(i as u64));
        }
        for i in [0, 3, n - 1, n - 2, n / 2 + 1] {
            assert_eq!(map.remove(&key(i)), one.remove(&key(i)));
        }
        if let Some(e) = map.get_mut(&key(6)) {
            e.seq = 42;
        }
        one.get_mut(&key(6)).expect("present").seq = 42;
        map.trim();
        map.trim();
        while let Some(next) = map.copy_entries(at, 1000, &mut copy) {
            at = next;
        }
        let mut ordered = Ordered::from_unsorted(copy, SHARD_RECORDS);
        let Touched::Keys(keys) = map.take_touched() else {
            panic!("keys noted");
        };
        assert!(keys.len() > 100, "{} keys noted", keys.len());
        for k in keys {
            let e = map.get(&k).copied();
            ordered.set(k, e);
        }
        assert!(map.finish_ordering(ordered).is_some());
        assert!(map.ordered().is_some());
        assert_eq!(
            entries(&map),
            one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>()
        );

        let mut map = KeyMap::default();
        map.insert(key(1), Entry::at_seq(1));
        assert!(map.begin_ordering());
        map.for_each_mut(|_, e| e.armed = 5);
        assert!(matches!(map.take_touched(), Touched::All));
        let mut ordered = KeyMap::default();
        ordered.make_ordered();
        assert!(
            !ordered.begin_ordering(),
            "an ordered map has nothing to order"
        );
        assert!(matches!(ordered.take_touched(), Touched::Ordered));
    }

    /// The steps of hashing an ordered map again off the lock (`KeyspaceCore::hash_off_lock`),
    /// with changes between them: keys inserted behind and ahead of the copy, removed behind
    /// and ahead of it, changed in place and relocated. The copy brought up to date with the
    /// noted keys equals the map, and the map is hashed afterwards; a walk that changes
    /// entries in place gives the hashing up, and the map stays ordered.
    #[test]
    fn a_hashing_off_the_lock_catches_every_change_made_during_it() {
        let key = |i: usize| Key::from_slice(format!("k{:07}", (i * 7919) % 1_000_003).as_bytes());
        for n in [0, 1, 100, SPLIT_AT + 5000] {
            let mut map = KeyMap::default();
            let mut one = BTreeMap::new();
            for i in 0..n {
                map.insert(key(i), Entry::at_seq(i as u64));
                one.insert(key(i), Entry::at_seq(i as u64));
            }
            map.make_ordered();
            assert!(map.hashable());
            assert!(map.begin_hashing());
            let mut copy = PartPages::default();
            let mut after = map.copy_ordered(None, (n / 2).max(1), &mut copy);
            assert_eq!(after.is_some(), n > 0);
            // Changes while the copy is half done: keys on both sides of it.
            let mid = after.clone();
            for i in n..n + 100 {
                map.insert(key(i), Entry::at_seq(i as u64));
                one.insert(key(i), Entry::at_seq(i as u64));
            }
            for i in (0..n).step_by(7) {
                assert_eq!(map.remove(&key(i)), one.remove(&key(i)));
            }
            for i in (3..n).step_by(11) {
                if let Some(e) = map.get_mut(&key(i)) {
                    e.seq += 1_000_000;
                }
                if let Some(e) = one.get_mut(&key(i)) {
                    e.seq += 1_000_000;
                }
            }
            if let Some((k, e)) = one.iter_mut().nth(1) {
                assert!(map.relocate(k, e.seq, (e.file, e.offset), (9, 99)));
                (e.file, e.offset) = (9, 99);
            }
            // The room for each chunk made ahead, as the hashing does before each read lock.
            while let Some(last) = {
                copy.ready(1000);
                map.copy_ordered(after.as_ref(), 1000, &mut copy)
            } {
                assert!(
                    after.as_ref().is_none_or(|a| *a < last),
                    "the copy moves on"
                );
                after = Some(last);
            }
            let mut hashed = KeyMap::hashed_of(copy, 77);
            let keys = map.take_touched_while_hashing().expect("keys noted");
            assert!(n == 0 || keys.len() >= 100, "{} keys noted", keys.len());
            for k in keys {
                let e = map.get(&k).copied();
                hashed.set(k, e);
            }
            assert!(map.finish_hashing(hashed).is_some());
            assert!(map.is_hashed(), "n = {n}, copy stopped at {mid:?}");
            assert_eq!(map.shard_records(), 77);
            let mut got = entries(&map);
            got.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(
                got,
                one.iter().map(|(k, e)| (k.clone(), *e)).collect::<Vec<_>>(),
                "n = {n}"
            );
            assert_eq!(map.len(), one.len());
            for (k, e) in &one {
                assert_eq!(map.get(k), Some(e));
            }
            assert!(!map.begin_hashing(), "a hashed map has nothing to hash");
            assert!(map.finish_hashing(KeyMap::default()).is_none());
        }

        // A walk that changes entries in place: the hashing is given up.
        let mut map = KeyMap::default();
        map.insert(key(1), Entry::at_seq(1));
        map.make_ordered();
        assert!(map.begin_hashing());
        map.for_each_mut(|_, e| e.armed = 5);
        assert!(map.take_touched_while_hashing().is_none());
        map.abandon_hashing();
        assert!(map.finish_hashing(KeyMap::default()).is_none());
        assert!(map.ordered().is_some());
        // Not being hashed: nothing to take, nothing to finish.
        assert!(map.take_touched_while_hashing().is_none());
    }

    /// `Locality::of` names each key's index table and its home bucket in `hashbrown`'s
    /// table, also after churn has left deleted elements behind (a mask taken from the room
    /// left would then be too small).
    #[test]
    fn locality_names_each_key_s_table_and_home_bucket() {
        let mut map = KeyMap::default();
        let key = |i: u32| Key::from_slice(&i.to_le_bytes());
        for i in 0..100_000u32 {
            map.insert(key(i), Entry::at_seq(u64::from(i)));
        }
        // Churn: every other key out, as many new ones in.
        for i in (0..100_000u32).step_by(2) {
            map.remove(&key(i));
            map.insert(key(200_000 + i), Entry::at_seq(1));
        }
        let keys: Vec<Key> = (1..100_000u32)
            .step_by(2)
            .chain((200_000..300_000).step_by(2))
            .map(key)
            .collect();
        let loc = map.locality().expect("a map that started empty is hashed");
        let Layout::Hashed(h) = &map.layout else {
            unreachable!("checked above")
        };
        assert_eq!(loc.masks.len(), TABLES, "split into its tables");
        let mut near = 0;
        for key in &keys {
            let (table, stored) = h.place(key);
            let of = loc.of(key);
            assert_eq!(of >> 40, table as u64, "the table comes first");
            let t = &h.index[table];
            assert_eq!(loc.masks[table] + 1, t.num_buckets() as u64);
            let home = of & loc.masks[table];
            let slot = h.find(key).expect("present");
            let at = t
                .find_bucket_index(spread(stored), |&v| slot_of(v) == slot)
                .expect("its element") as u64;
            // Where the element sits: its home bucket or a few groups of 16 after it.
            let distance = at.wrapping_sub(home) & loc.masks[table];
            assert!(distance < 256, "{distance} buckets past its home");
            near += usize::from(distance < 16);
        }
        assert!(
            near * 10 > keys.len() * 9,
            "{near} of {} in their home group",
            keys.len()
        );
        // Sorted by it, the keys visit each table once, in turn.
        let mut sorted = keys.clone();
        sorted.sort_by_cached_key(|k| loc.of(k));
        let tables: Vec<usize> = sorted.iter().map(|k| h.place(k).0).collect();
        assert!(tables.windows(2).all(|w| w[0] <= w[1]));
        map.make_ordered();
        assert!(
            map.locality().is_none(),
            "an ordered map is walked in key order"
        );
    }

    /// Every table gets picks, in order, their counts growing from about 11 to about 22.
    #[test]
    fn table_shares_grow_across_a_factor_of_two() {
        let p = picks();
        assert!(p.windows(2).all(|w| w[0] <= w[1] && w[1] - w[0] <= 1));
        let last = u16::try_from(TABLES - 1).expect("fits");
        assert_eq!((p[0], p[PICKS - 1]), (0, last));
        let count = |t: u16| p.iter().filter(|&&x| x == t).count();
        let (first, last) = (count(0), count(last));
        assert!(
            (10..=12).contains(&first) && (21..=23).contains(&last),
            "{first} {last}"
        );
    }

    /// Keys that differ only in trailing zero bytes, or in where the hash's words cut them,
    /// hash apart (the length is part of the hash), and two maps key their hashes apart.
    #[test]
    fn the_hash_tells_zero_padding_apart_and_is_keyed_per_map() {
        let keyed = Keyed::new();
        let zeros: Vec<u64> = (0..20)
            .map(|n| keyed.hash_one(Key::from_slice(&vec![0; n])))
            .collect();
        let mut distinct = zeros.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), zeros.len());
        let other = Keyed::new();
        let key = Key::from_slice(b"session:0001");
        assert_ne!(keyed.hash_one(&key), other.hash_one(&key));
        assert_eq!(keyed.hash_one(&key), keyed.hash_one(key.clone()));
    }
}
