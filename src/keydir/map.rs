//! The ordered map behind a keyspace's key directory: B-trees over consecutive key ranges.
//!
//! One `BTreeMap` of a million entries has to be built by one thread, and building it was
//! two fifths of an open (51 of 131 ms at 1 M keys, DESIGN.md §3.1). Split into shards by key
//! range, the shards are built side by side, one per core. Everything else sees one map: a key
//! belongs to the shard whose range holds it (the shards' first keys are kept apart, so
//! finding it is a binary search of a few keys), and iteration walks the shards in order.
//!
//! The split points are chosen when the map is built at open, from the keys it then holds; a
//! map that starts empty has one shard. Shards are never split or joined later: one that grows
//! or empties stays correct, and the next open balances them again.

use std::collections::btree_map::{self, BTreeMap};
use std::ops::Bound;

use super::{key_order, Entry, Key};

/// Key → entry, ordered by key, in shards by key range (module docs).
#[derive(Debug)]
pub struct KeyMap {
    /// Never empty. Shard `i > 0` holds the keys from `starts[i - 1]` (included) up to
    /// `starts[i]` (excluded); shard 0 the keys below `starts[0]`, the last one the rest.
    shards: Vec<BTreeMap<Key, Entry>>,
    /// The first key of every shard but the first, strictly increasing.
    starts: Vec<Key>,
}

impl Default for KeyMap {
    fn default() -> Self {
        Self {
            shards: vec![BTreeMap::new()],
            starts: Vec::new(),
        }
    }
}

/// A shard of a map being built: its first key (`None` for the first shard) and its entries.
pub type Shard = (Option<Key>, BTreeMap<Key, Entry>);

impl KeyMap {
    /// The map made of `shards`, given in key order. Panics (in debug builds) if a shard
    /// after the first has no first key, the first keys do not increase, or an entry lies
    /// outside its shard's range.
    #[must_use]
    pub fn from_shards(shards: Vec<Shard>) -> Self {
        let mut map = Self {
            shards: Vec::with_capacity(shards.len().max(1)),
            starts: Vec::with_capacity(shards.len().saturating_sub(1)),
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

    /// The index of the shard whose range holds `key`.
    #[inline]
    fn shard_of(&self, key: &[u8]) -> usize {
        self.starts
            .partition_point(|s| key_order(s, key) != std::cmp::Ordering::Greater)
    }

    /// Shards the map is split into.
    #[cfg(any(test, feature = "test-hooks"))]
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The entry for `key`.
    pub(super) fn get(&self, key: &Key) -> Option<&Entry> {
        self.shards[self.shard_of(key)].get(key)
    }

    /// As [`KeyMap::get`], mutable.
    pub(super) fn get_mut(&mut self, key: &Key) -> Option<&mut Entry> {
        let i = self.shard_of(key);
        self.shards[i].get_mut(key)
    }

    /// Removes `key`'s entry.
    pub(super) fn remove(&mut self, key: &Key) -> Option<Entry> {
        let i = self.shard_of(key);
        self.shards[i].remove(key)
    }

    /// Entries in each shard, in key order.
    #[cfg(test)]
    pub(crate) fn shard_lens(&self) -> Vec<usize> {
        self.shards.iter().map(BTreeMap::len).collect()
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
        let i = self.shard_of(&key);
        self.shards[i].insert(key, e)
    }

    /// The slot of `key`, for a decision and a change in one descent.
    pub fn entry(&mut self, key: Key) -> btree_map::Entry<'_, Key, Entry> {
        let i = self.shard_of(&key);
        self.shards[i].entry(key)
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

    /// Every entry, in key order.
    #[cfg(test)]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Key, &Entry)> {
        self.shards.iter().flatten()
    }

    /// Every entry, in key order, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut Entry)> {
        self.shards.iter_mut().flatten()
    }

    /// Calls `f` on every entry, in key order (a plain loop over each shard's tree: the walks
    /// at open run a million times through it).
    pub fn for_each(&self, mut f: impl FnMut(&Key, &Entry)) {
        for tree in &self.shards {
            for (k, e) in tree {
                f(k, e);
            }
        }
    }

    /// Every entry's value, in key order.
    pub fn values(&self) -> impl Iterator<Item = &Entry> {
        self.shards.iter().flat_map(BTreeMap::values)
    }

    /// Entries.
    #[cfg(test)]
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards.iter().map(BTreeMap::len).sum()
    }

    /// True if there is no entry.
    #[cfg(test)]
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(BTreeMap::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Key {
        Key::from_slice(s.as_bytes())
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

    /// Ranges, lookups and changes across shard boundaries agree with a single B-tree, for
    /// every pair of bounds drawn from keys inside, between and at the boundaries.
    #[test]
    fn a_split_map_behaves_as_one_tree() {
        let keys = [
            "", "a", "c", "cz", "d", "d\0", "k", "lz", "m", "ma", "z", "zz",
        ];
        let (mut map, mut one) = split(&keys);
        assert_eq!(map.shards(), 3);
        let probes = [
            "", "0", "b", "c", "d", "d\0", "e", "l", "m", "m\0", "y", "zz", "zzz",
        ];
        let bound = |i: usize, s: &'static str| match i {
            0 => Bound::Included(s.as_bytes()),
            1 => Bound::Excluded(s.as_bytes()),
            _ => Bound::Unbounded,
        };
        for round in 0..2 {
            for a in probes {
                for b in probes {
                    for (ia, ib) in (0..3).flat_map(|x| (0..3).map(move |y| (x, y))) {
                        let bounds = (bound(ia, a), bound(ib, b));
                        let got: Vec<_> = map.range(bounds).map(|(k, e)| (k.clone(), *e)).collect();
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
                        assert_eq!(got, want, "round {round}: {bounds:?}");
                        let back: Vec<_> =
                            map.range(bounds).rev().map(|(k, _)| k.clone()).collect();
                        assert_eq!(
                            back,
                            want.iter()
                                .rev()
                                .map(|(k, _)| k.clone())
                                .collect::<Vec<_>>()
                        );
                    }
                }
                assert_eq!(map.get(&k(a)), one.get(a.as_bytes()));
                assert_eq!(
                    map.contains_key(a.as_bytes()),
                    one.contains_key(a.as_bytes())
                );
            }
            assert_eq!(map.len(), one.len());
            let all: Vec<_> = map.iter().map(|(k, _)| k.clone()).collect();
            assert_eq!(all, one.keys().cloned().collect::<Vec<_>>());
            // Change it: every probe key inserted, every original key at an odd position
            // removed, and the rest bumped through `entry` and `get_mut`.
            for (i, p) in probes.iter().enumerate() {
                assert_eq!(
                    map.insert(k(p), Entry::at_seq(100 + i as u64)),
                    one.insert(k(p), Entry::at_seq(100 + i as u64))
                );
            }
            for (i, s) in keys.iter().enumerate() {
                if i % 2 == 1 {
                    assert_eq!(map.remove(&k(s)), one.remove(s.as_bytes()));
                } else if let btree_map::Entry::Occupied(mut o) = map.entry(k(s)) {
                    o.get_mut().seq += 1000;
                    one.get_mut(s.as_bytes()).expect("same keys").seq += 1000;
                }
            }
            for e in map.iter_mut().map(|(_, e)| e) {
                e.file += 1;
            }
            for e in one.values_mut() {
                e.file += 1;
            }
            assert_eq!(
                map.values().copied().collect::<Vec<_>>(),
                one.values().copied().collect::<Vec<_>>()
            );
        }
        let empty = KeyMap::default();
        assert!(
            empty.is_empty()
                && empty
                    .range((Bound::Unbounded, Bound::Unbounded))
                    .next()
                    .is_none()
        );
    }
}
