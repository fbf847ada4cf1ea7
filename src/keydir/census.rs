//! The census of a keyspace: how many entries (and record bytes) the key directory holds, and
//! how many of them are expired at a given `now`, without walking the entries.
//!
//! Whether an entry is expired depends on the keyspace's default-TTL history, which can change
//! at any time, so the census does not count by deadline. It counts by a key that does not
//! depend on the history and in whose order deadlines never decrease, for any history:
//! - an entry that inherits the default TTL, by its write second `ts`: its deadline
//!   `ttl::expires_at(ts, Inherit, history)` never decreases as `ts` grows;
//! - an entry with its own TTL of `m` seconds, by `ts + m`: its deadline depends on `ts + m`
//!   alone (DESIGN.md "Census" has the argument) and never decreases as that grows;
//! - an entry that never expires (own TTL `-1`), in one tally.
//!
//! So the expired entries of each class are a prefix of its buckets in key order, and counting
//! them takes one deadline per bucket up to the first bucket that is still live. The reaper
//! removes expired entries as they come due, so that prefix is the reaping backlog, measured in
//! seconds rather than entries: `len()` and `stats()` cost O(seconds behind), not O(entries),
//! and a default-TTL change re-times the census for free.

use std::collections::BTreeMap;

use super::Entry;
use crate::ttl::{self, ItemTtl, TtlChange};

/// Entries and their record bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Entries.
    pub items: u64,
    /// Record bytes of those entries.
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: u64) {
        self.items += 1;
        self.bytes += bytes;
    }

    fn sub(&mut self, bytes: u64) {
        self.items = self.items.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    fn plus(&mut self, o: Tally) {
        self.items += o.items;
        self.bytes += o.bytes;
    }
}

/// What the census says about one `now`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    /// Live entries.
    pub live: Tally,
    /// Entries that are expired but still in the key directory (not reaped yet).
    pub expired: Tally,
    /// The earliest deadline among those, [`ttl::NEVER`] if none.
    pub oldest_expired: u64,
}

/// Per-class buckets of entries (module docs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Census {
    /// Entries inheriting the default TTL, by write second.
    inherit: BTreeMap<u64, Tally>,
    /// Entries with their own TTL in seconds, by write second + TTL.
    own: BTreeMap<u64, Tally>,
    /// Entries that never expire.
    never: Tally,
    /// All entries.
    total: Tally,
}

/// Where an entry is counted.
enum Class {
    Inherit(u64),
    Own(u64),
    Never,
}

fn class(e: &Entry) -> Class {
    match e.own_ttl() {
        ItemTtl::Inherit => Class::Inherit(e.ts.get()),
        ItemTtl::Seconds(m) => Class::Own(e.ts.get().saturating_add(u64::from(m))),
        ItemTtl::Never => Class::Never,
    }
}

/// Adds to the bucket at `at`, trying the last bucket first (new writes land there).
fn bump(map: &mut BTreeMap<u64, Tally>, at: u64, bytes: u64) {
    if let Some(mut last) = map.last_entry() {
        if *last.key() == at {
            last.get_mut().add(bytes);
            return;
        }
    }
    map.entry(at).or_default().add(bytes);
}

/// Takes from the bucket at `at`, trying the first bucket first (the reaper removes there).
fn drop_one(map: &mut BTreeMap<u64, Tally>, at: u64, bytes: u64) {
    if let Some(mut first) = map.first_entry() {
        if *first.key() == at {
            first.get_mut().sub(bytes);
            if first.get().items == 0 {
                first.remove();
            }
            return;
        }
    }
    if let std::collections::btree_map::Entry::Occupied(mut o) = map.entry(at) {
        o.get_mut().sub(bytes);
        if o.get().items == 0 {
            o.remove();
        }
    }
}

impl Census {
    /// Counts a new entry.
    pub fn add(&mut self, e: &Entry) {
        let bytes = u64::from(e.len);
        self.total.add(bytes);
        match class(e) {
            Class::Inherit(at) => bump(&mut self.inherit, at, bytes),
            Class::Own(at) => bump(&mut self.own, at, bytes),
            Class::Never => self.never.add(bytes),
        }
    }

    /// Forgets an entry counted by [`Census::add`].
    pub fn remove(&mut self, e: &Entry) {
        let bytes = u64::from(e.len);
        self.total.sub(bytes);
        match class(e) {
            Class::Inherit(at) => drop_one(&mut self.inherit, at, bytes),
            Class::Own(at) => drop_one(&mut self.own, at, bytes),
            Class::Never => self.never.sub(bytes),
        }
    }

    /// Every entry, live or expired.
    #[cfg(test)]
    #[must_use]
    pub fn total(&self) -> Tally {
        self.total
    }

    /// Live and expired entries at second `now` under `history`. Cost: one deadline per bucket
    /// that is expired, plus one per class.
    #[must_use]
    pub fn count(&self, now: u64, history: &[TtlChange]) -> Count {
        let mut expired = Tally::default();
        let mut oldest = ttl::NEVER;
        for (&ts, t) in &self.inherit {
            let at = ttl::expires_at(ts, ItemTtl::Inherit, history);
            if !ttl::is_expired(at, now) {
                break;
            }
            expired.plus(*t);
            oldest = oldest.min(at);
        }
        for (&due, t) in &self.own {
            // Any write second and TTL with this sum has this deadline (module docs).
            let at = ttl::expires_at(due.saturating_sub(1), ItemTtl::Seconds(1), history);
            if !ttl::is_expired(at, now) {
                break;
            }
            expired.plus(*t);
            oldest = oldest.min(at);
        }
        let live = Tally {
            items: self.total.items.saturating_sub(expired.items),
            bytes: self.total.bytes.saturating_sub(expired.bytes),
        };
        Count {
            live,
            expired,
            oldest_expired: oldest,
        }
    }
}

/// A census gathered at open, entry by entry, and counted at once by [`Gathered::finish`].
///
/// Bucketing each entry as it came (a B-tree descent per entry, into buckets in random order,
/// then adding up every shard's buckets) was a quarter of opening a store whose entries have
/// TTLs (1 M entries with TTLs of 1 h to 1 day: 175 ms opens, 130 ms without the census).
/// Here an entry costs a slot update or a push ([`Pile`]); `finish` counts each class in a
/// dense array of seconds (one pass, the array within the cache for a span of days) or, for
/// seconds spread thinly over a longer span, sorts them, and builds each B-tree from its
/// buckets in order.
#[derive(Debug, Default, Clone)]
pub struct Gathered {
    /// Entries inheriting the default TTL, by write second.
    inherit: Pile,
    /// Entries with their own TTL in seconds, by write second + TTL.
    own: Pile,
    /// Entries that never expire.
    never: Tally,
    /// All entries.
    total: Tally,
}

/// Seconds a [`Pile`] tallies in place.
const HELD: usize = 64;

/// Most pairs per chunk of a [`Pile`] (64 KiB): chunks that stop growing there waste at most
/// one partly filled chunk per shard, where one vector grown by doubling (and copied at each
/// growth) could reserve twice its pairs.
const CHUNK: usize = 4096;

/// The seconds of one class of entries, gathered.
#[derive(Debug, Default, Clone)]
struct Pile {
    /// Tallies of up to [`HELD`] seconds, second `s` in slot `s % HELD` (empty: no items), so
    /// entries written in the same few seconds (a store filled without TTLs) take no memory
    /// per entry.
    held: Vec<(u64, Tally)>,
    /// Tallies of other piles added to this one.
    tallies: Vec<(u64, Tally)>,
    /// `(second, record bytes)` of the entries whose slot held another second, in chunks
    /// (adding a shard's pile moves its chunks, copies nothing).
    spilled: Vec<Vec<(u64, u32)>>,
}

impl Pile {
    fn add(&mut self, at: u64, bytes: u32) {
        if self.held.is_empty() {
            self.held = vec![(0, Tally::default()); HELD];
        }
        let slot = &mut self.held[(at % HELD as u64) as usize];
        if slot.1.items == 0 || slot.0 == at {
            slot.0 = at;
            slot.1.add(u64::from(bytes));
            return;
        }
        match self.spilled.last_mut() {
            Some(last) if last.len() < last.capacity() => last.push((at, bytes)),
            last => {
                // Small first (a keyspace of a few entries), doubling up to `CHUNK`.
                let cap = last.map_or(16, |c| c.capacity() * 2).min(CHUNK);
                let mut chunk = Vec::with_capacity(cap);
                chunk.push((at, bytes));
                self.spilled.push(chunk);
            }
        }
    }

    fn absorb(&mut self, other: Pile) {
        self.tallies
            .extend(other.held.into_iter().filter(|(_, t)| t.items > 0));
        self.tallies.extend(other.tallies);
        self.spilled.extend(other.spilled);
    }

    /// One bucket per second, tallied.
    fn buckets(mut self) -> BTreeMap<u64, Tally> {
        self.tallies
            .extend(self.held.drain(..).filter(|(_, t)| t.items > 0));
        let (tallies, spilled) = (self.tallies, self.spilled);
        let n = tallies.len() + spilled.iter().map(Vec::len).sum::<usize>();
        if n == 0 {
            return BTreeMap::new();
        }
        let seconds = || {
            tallies
                .iter()
                .map(|&(at, _)| at)
                .chain(spilled.iter().flatten().map(|&(at, _)| at))
        };
        let lo = seconds().min().unwrap_or(0);
        let width = seconds().max().unwrap_or(0) - lo;
        // Counting in a dense array of 16-byte tallies, one per second of the span, is
        // cheaper than sorting when the span is at most `n` (the tallies and pairs, at most
        // one per entry) plus 131,072 seconds (a day and a half): the array then costs at
        // most 16 bytes per entry beyond 2 MiB, freed at once.
        if width < (n as u64).saturating_add(1 << 17) {
            let mut dense = vec![Tally::default(); width as usize + 1];
            for &(at, t) in &tallies {
                dense[(at - lo) as usize].plus(t);
            }
            for &(at, bytes) in spilled.iter().flatten() {
                dense[(at - lo) as usize].add(u64::from(bytes));
            }
            drop((tallies, spilled));
            return dense
                .into_iter()
                .zip(lo..)
                .filter(|(t, _)| t.items > 0)
                .map(|(t, at)| (at, t))
                .collect();
        }
        let mut all = tallies;
        all.reserve_exact(n - all.len());
        for chunk in spilled {
            all.extend(chunk.into_iter().map(|(at, bytes)| {
                let mut t = Tally::default();
                t.add(u64::from(bytes));
                (at, t)
            }));
        }
        all.sort_unstable_by_key(|&(at, _)| at);
        // Equal seconds, now side by side, are added into the first of them.
        all.dedup_by(|(at, t), (first_at, first)| {
            let same = at == first_at;
            if same {
                first.plus(*t);
            }
            same
        });
        all.into_iter().collect()
    }
}

impl Gathered {
    /// Notes an entry.
    pub fn add(&mut self, e: &Entry) {
        self.total.add(u64::from(e.len));
        match class(e) {
            Class::Inherit(at) => self.inherit.add(at, e.len),
            Class::Own(at) => self.own.add(at, e.len),
            Class::Never => self.never.add(u64::from(e.len)),
        }
    }

    /// Adds what `other` gathered.
    pub fn absorb(&mut self, other: Gathered) {
        self.inherit.absorb(other.inherit);
        self.own.absorb(other.own);
        self.never.plus(other.never);
        self.total.plus(other.total);
    }

    /// The census of every entry noted.
    #[must_use]
    pub fn finish(self) -> Census {
        Census {
            inherit: self.inherit.buckets(),
            own: self.own.buckets(),
            never: self.never,
            total: self.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keydir::WriteSecs;
    use crate::ttl::DefaultTtl;

    fn entry(ts: u64, own: ItemTtl, len: u32) -> Entry {
        Entry {
            seq: 0,
            file: 1,
            offset: 0,
            len,
            ts: WriteSecs::saturating(ts),
            ttl: own.to_wire(),
            flags: 0,
            armed: crate::ttl::NEVER,
        }
    }

    fn histories() -> Vec<Vec<TtlChange>> {
        use DefaultTtl::*;
        let h = |c: &[(u64, DefaultTtl)]| {
            c.iter()
                .map(|&(since, default)| TtlChange { since, default })
                .collect::<Vec<_>>()
        };
        vec![
            h(&[(0, Off)]),
            h(&[(0, NeverExpire)]),
            h(&[(0, Seconds(10))]),
            h(&[(0, Seconds(10)), (50, Off), (60, Seconds(1000))]),
            h(&[
                (0, Off),
                (20, Seconds(5)),
                (30, NeverExpire),
                (40, Seconds(1)),
            ]),
            h(&[(0, Seconds(100)), (25, Seconds(3)), (26, Seconds(200))]),
            h(&[
                (0, Seconds(7)),
                (7, Off),
                (8, Seconds(7)),
                (9, Off),
                (10, Seconds(2)),
            ]),
        ]
    }

    /// The census agrees with a walk over the entries for every `now`, under many histories
    /// and mixes of own TTLs, including after removals.
    #[test]
    fn census_equals_a_walk() {
        let owns = [
            ItemTtl::Inherit,
            ItemTtl::Never,
            ItemTtl::Seconds(1),
            ItemTtl::Seconds(4),
            ItemTtl::Seconds(30),
            ItemTtl::Seconds(2000),
        ];
        let mut entries = Vec::new();
        for ts in 0..70u64 {
            for (i, own) in owns.iter().enumerate() {
                if !(ts as usize + i).is_multiple_of(3) {
                    entries.push(entry(ts, *own, 10 + i as u32));
                }
            }
        }
        let mut census = Census::default();
        for e in &entries {
            census.add(e);
        }
        // Remove every fifth entry.
        let kept: Vec<Entry> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                if i.is_multiple_of(5) {
                    census.remove(e);
                    None
                } else {
                    Some(*e)
                }
            })
            .collect();
        for history in histories() {
            for now in 0..2200u64 {
                let mut want = Count {
                    oldest_expired: ttl::NEVER,
                    ..Count::default()
                };
                for e in &kept {
                    let at = ttl::expires_at(e.ts.get(), e.own_ttl(), &history);
                    if ttl::is_expired(at, now) {
                        want.expired.add(u64::from(e.len));
                        want.oldest_expired = want.oldest_expired.min(at);
                    } else {
                        want.live.add(u64::from(e.len));
                    }
                }
                assert_eq!(census.count(now, &history), want, "now {now} {history:?}");
            }
        }
    }

    #[test]
    fn removing_everything_leaves_nothing() {
        let mut census = Census::default();
        let es = [
            entry(5, ItemTtl::Inherit, 3),
            entry(5, ItemTtl::Inherit, 4),
            entry(9, ItemTtl::Seconds(2), 5),
            entry(1, ItemTtl::Never, 6),
        ];
        for e in &es {
            census.add(e);
        }
        assert_eq!(
            census.total(),
            Tally {
                items: 4,
                bytes: 18
            }
        );
        for e in es.iter().rev() {
            census.remove(e);
        }
        assert_eq!(census, Census::default());
    }

    /// A census gathered in shards and counted at once equals one counted entry by entry,
    /// through the dense array (seconds close together) and through sorting (spread out).
    #[test]
    fn gathered_census_equals_one_counted_entry_by_entry() {
        for spread in [1u64, 7, 999_999] {
            let mut one_by_one = Census::default();
            let mut gathered = Gathered::default();
            let mut shard = Gathered::default();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for i in 0..5_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let own = match x % 4 {
                    0 => ItemTtl::Inherit,
                    1 => ItemTtl::Never,
                    _ => ItemTtl::Seconds(1 + (x >> 40) as u32 % 100),
                };
                let e = entry(
                    1_000 + (x >> 8) % 300 * spread,
                    own,
                    1 + (x >> 20) as u32 % 500,
                );
                one_by_one.add(&e);
                // Most go through shards; some straight into the pile the shards are added
                // to, so it finishes with seconds held in its own slots too.
                if i % 5 == 0 {
                    gathered.add(&e);
                } else {
                    shard.add(&e);
                }
                if i % 700 == 699 {
                    gathered.absorb(std::mem::take(&mut shard));
                }
            }
            gathered.absorb(shard);
            assert_eq!(gathered.finish(), one_by_one, "spread {spread}");
        }
        assert_eq!(Gathered::default().finish(), Census::default());
    }
}
