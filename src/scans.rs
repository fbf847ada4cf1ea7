//! Batches are all-or-nothing for scans too: the before-images an open scan needs.
//!
//! A scan ([`super::Iter`]) walks the key directory in chunks, so a batch that lands between
//! two chunks could show its new values in later chunks and its old values in earlier ones:
//! half a batch. To prevent that, every scan registers the keyspace's `applied_seq` at its
//! start (`start`: every record below it was applied when the scan began). While any scan of a
//! keyspace is open, a batch writing to it first records, per key it touches, the version that
//! key had before the batch (the entry and a copy of its value, or "absent"), tagged with the
//! batch's sequence number. A scan that meets a key whose newest version was written by a batch
//! at or after its `start` uses the before-image of the *first* such batch instead, and keys a
//! post-start batch deleted are brought back from their before-images. So every batch that
//! committed after a scan started is invisible to it as a whole; batches before it are fully
//! visible, because a batch holds the write locks of all its keyspaces while it applies.
//! Single writes keep the usual scan semantics (seen or not, each atomically).
//!
//! Before-images hold value copies, not file locations: compaction may drop the old record
//! once the key directory no longer points at it. Images older than every open scan are
//! pruned when a scan ends and when a batch records new ones; with no scan open nothing is
//! recorded, so batches cost nothing extra then.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::keydir::{Entry, Key};

/// A key's version before a batch: its entry and value, or `None` if it had no entry.
pub(crate) type Image = Option<(Entry, Vec<u8>)>;

/// Open scans and the before-images they may need (one per keyspace, behind a mutex that is
/// taken after the keyspace's state lock).
#[derive(Debug, Default)]
pub(crate) struct ScanRegistry {
    /// Start sequence → number of open scans with that start.
    open: BTreeMap<u64, usize>,
    /// Key → (batch sequence, image before that batch), oldest batch first.
    images: BTreeMap<Key, Vec<(u64, Image)>>,
}

impl ScanRegistry {
    /// Registers a scan starting at `start`.
    pub(crate) fn open(&mut self, start: u64) {
        *self.open.entry(start).or_insert(0) += 1;
    }

    /// Unregisters a scan and drops the images no open scan can need any more.
    pub(crate) fn close(&mut self, start: u64) {
        if let Some(n) = self.open.get_mut(&start) {
            *n -= 1;
            if *n == 0 {
                self.open.remove(&start);
            }
        }
        self.prune();
    }

    /// True when at least one scan is open (batches must then record images).
    pub(crate) fn any_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Records `key`'s image before batch `seq` (the first image per key and batch wins: a
    /// batch that writes a key twice keeps the version from before the batch).
    pub(crate) fn record(&mut self, seq: u64, key: &[u8], image: Image) {
        let list = self.images.entry(Key::from_slice(key)).or_default();
        if list.last().is_some_and(|(s, _)| *s == seq) {
            return;
        }
        list.push((seq, image));
    }

    /// Whether the image of `key` for a batch of this sequence is already recorded.
    pub(crate) fn has(&self, seq: u64, key: &[u8]) -> bool {
        self.images
            .get(key)
            .and_then(|l| l.last())
            .is_some_and(|(s, _)| *s == seq)
    }

    /// Drops images of batches older than every open scan (all of them when none is open).
    pub(crate) fn prune(&mut self) {
        match self.open.keys().next().copied() {
            None => self.images.clear(),
            Some(oldest) => self.images.retain(|_, list| {
                list.retain(|(seq, _)| *seq >= oldest);
                !list.is_empty()
            }),
        }
    }

    /// The version of `key` a scan that started at `start` must see, if a batch at or after
    /// `start` changed it: the image before the first such batch.
    pub(crate) fn before(&self, key: &[u8], start: u64) -> Option<&Image> {
        self.images
            .get(key)?
            .iter()
            .find(|(seq, _)| *seq >= start)
            .map(|(_, image)| image)
    }

    /// Keys in `(lower, upper)` that a batch at or after `start` changed, with the image the
    /// scan must see, in key order.
    pub(crate) fn changed_in<'a>(
        &'a self,
        lower: Bound<&'a [u8]>,
        upper: Bound<&'a [u8]>,
        start: u64,
    ) -> impl Iterator<Item = (&'a [u8], &'a Image)> + 'a {
        self.images
            .range::<[u8], _>((lower, upper))
            .filter_map(move |(k, list)| {
                list.iter()
                    .find(|(seq, _)| *seq >= start)
                    .map(|(_, image)| (k.as_slice(), image))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_sees_the_image_before_the_first_batch_after_its_start() {
        let mut r = ScanRegistry::default();
        r.open(10);
        r.record(12, b"k", Some((Entry::at_seq(3), b"v3".to_vec())));
        r.record(20, b"k", Some((Entry::at_seq(13), b"v13".to_vec())));
        assert_eq!(
            r.before(b"k", 10).cloned().flatten().map(|(e, _)| e.seq),
            Some(3)
        );
        assert_eq!(
            r.before(b"k", 15).cloned().flatten().map(|(e, _)| e.seq),
            Some(13)
        );
        assert!(r.before(b"k", 21).is_none());
        assert!(r.has(20, b"k"));
        assert!(!r.has(12, b"k"));
    }

    #[test]
    fn images_go_when_no_scan_needs_them() {
        let mut r = ScanRegistry::default();
        r.open(10);
        r.open(15);
        r.record(12, b"a", None);
        r.record(16, b"b", None);
        r.close(10);
        assert!(r.before(b"a", 0).is_none(), "older than every open scan");
        assert!(r.before(b"b", 15).is_some());
        r.close(15);
        assert!(!r.any_open());
        assert!(r.before(b"b", 0).is_none());
    }

    #[test]
    fn changed_keys_in_a_range() {
        let mut r = ScanRegistry::default();
        r.open(1);
        for (i, k) in [b"a", b"c", b"e"].iter().enumerate() {
            r.record(5 + i as u64, *k, None);
        }
        let keys: Vec<&[u8]> = r
            .changed_in(Bound::Excluded(b"a"), Bound::Included(b"e"), 6)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, vec![&b"c"[..], &b"e"[..]]);
    }
}
