//! Picked reads: the live values of a chosen set of keys, with a scan's semantics.
//!
//! The document layer's secondary indexes (`doc/index/`) name candidate keys; reading them one
//! `get` at a time could show half of a transactional batch (one key before it, the next after
//! it). A [`Picked`] reader registers with the keyspace's open scans exactly as an [`Iter`]
//! does, evaluates expiry at one `now`, and shows every key as that scan would: a batch that
//! committed after its start is invisible as a whole (before-images, `scans.rs`), one before it
//! fully visible.
//!
//! Invariant: the registration (the start sequence and `now`) is taken when the reader is
//! created, so a caller that creates it while holding its own lock knows which writes it can
//! see; the keys are supplied later ([`Picked::set_keys`]), sorted and distinct.
//!
//! [`Iter`]: super::Iter

use std::collections::VecDeque;
use std::ops::Range;

use super::{seg_at, seg_slot, Keyspace, SegRef, Shown, CHUNK};
use crate::error::Result;
use crate::format::record::FLAG_IN_BATCH;

/// Reads the live versions of chosen keys, in the order given (see the module note).
#[derive(Debug)]
pub(crate) struct Picked {
    ks: Keyspace,
    now: u64,
    start: u64,
    keys: KeyList,
    /// The next key of `keys` to look up.
    next: usize,
    /// Looked-up keys (their index in `keys`) and what the reader shows for them.
    buf: VecDeque<(usize, Shown)>,
    segs: Vec<(u32, SegRef)>,
}

/// Keys in one buffer: a picked read's candidates take one allocation, not one each (10,000
/// small allocations and frees were a tenth of an indexed query that returns 10,000 items).
#[derive(Debug, Default)]
pub(crate) struct KeyList {
    bytes: Vec<u8>,
    spans: Vec<Range<usize>>,
}

impl KeyList {
    /// Appends `key`.
    pub(crate) fn push(&mut self, key: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.spans.push(start..self.bytes.len());
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The `i`th key (empty past the end).
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        self.spans
            .get(i)
            .and_then(|r| self.bytes.get(r.clone()))
            .unwrap_or_default()
    }

    /// The keys, copied out (for tests).
    #[cfg(test)]
    pub(crate) fn to_vecs(&self) -> Vec<Vec<u8>> {
        (0..self.len()).map(|i| self.get(i).to_vec()).collect()
    }

    /// Sorts the keys and drops repeats.
    pub(crate) fn sort_dedup(&mut self) {
        let bytes = &self.bytes;
        let key = |r: &Range<usize>| &bytes[r.clone()];
        self.spans.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        self.spans.dedup_by(|a, b| key(a) == key(b));
    }
}

impl<'a> FromIterator<&'a [u8]> for KeyList {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(iter: I) -> Self {
        let mut list = Self::default();
        for k in iter {
            list.push(k);
        }
        list
    }
}

impl Keyspace {
    /// A picked reader registered now (its `now` and start sequence are fixed here).
    pub(crate) fn picked(&self) -> Picked {
        let now = self.inner().now_s();
        let start = {
            let st = self.core.state.read();
            let start = st.applied_seq;
            self.core.scans.lock().open(start);
            start
        };
        Picked {
            ks: self.clone(),
            now,
            start,
            keys: KeyList::default(),
            next: 0,
            buf: VecDeque::new(),
            segs: Vec::new(),
        }
    }
}

impl Picked {
    /// The keys to read, in the order they are returned.
    pub(crate) fn set_keys(&mut self, keys: KeyList) {
        self.keys = keys;
        self.next = 0;
    }

    /// The `now` this reader evaluates expiry at (Unix seconds).
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// The next live pair, given to `f` with the value in place (see `Iter::next_with`).
    pub(crate) fn next_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8], bool) -> R,
    ) -> Option<Result<R>> {
        loop {
            match self.buf.pop_front() {
                Some((i, Shown::Value(v))) => return Some(Ok(f(self.keys.get(i), &v, false))),
                Some((i, Shown::Entry(e, slot))) => {
                    let Some(seg) = seg_at(&self.segs, slot) else {
                        continue; // its segment is gone: it died whole after this scan's `now` (DESIGN §7)
                    };
                    let k = self.keys.get(i);
                    return Some(
                        self.ks
                            .inner()
                            .with_record(seg, &e, k, |v, doc| f(k, v, doc)),
                    );
                }
                None => {}
            }
            if self.next >= self.keys.len() {
                return None;
            }
            self.refill();
        }
    }

    fn refill(&mut self) {
        let st = self.ks.core.state.read();
        let end = self.keys.len().min(self.next + CHUNK);
        // A hashed map: the chunk's slots asked for together, then found in cache one by one
        // (before the scans' mutex and the segment set are taken, which writers also take).
        st.map.prefetch((self.next..end).map(|i| self.keys.get(i)));
        let scans = self.ks.core.scans.lock();
        let set = self.ks.inner().segments.read();
        self.segs.clear();
        for i in self.next..end {
            let k = self.keys.get(i);
            let entry = st.get(k);
            // A batch that committed after the start is not seen: the key as it was before the
            // first such batch (also for a key such a batch deleted).
            let after_start =
                entry.is_none_or(|e| e.seq >= self.start && e.flags & FLAG_IN_BATCH != 0);
            if after_start {
                if let Some(image) = scans.before(k, self.start) {
                    if let Some((old, value)) = image {
                        if st.is_live(old, self.now) {
                            self.buf.push_back((i, Shown::Value(value.clone())));
                        }
                    }
                    continue;
                }
            }
            let Some(e) = entry else { continue };
            if !st.is_live(e, self.now) {
                continue;
            }
            let slot = seg_slot(&mut self.segs, &set, e.file);
            self.buf.push_back((i, Shown::Entry(*e, slot)));
        }
        self.next = end;
        drop((set, scans, st));
        warm(self.buf.iter().map(|(_, shown)| shown), &self.segs);
    }
}

impl Drop for Picked {
    fn drop(&mut self) {
        self.ks.core.scans.lock().close(self.start);
    }
}

/// Touches every cache line of the records a chunk is about to read, before any is read.
///
/// The keys an index picks are scattered over the log, so each record is a cache miss (or a
/// page fault). Taken one at a time, between the decoding and parsing of the previous item,
/// those misses come one after another; a loop of independent loads lets the processor have
/// many in flight at once (an indexed filter over 1 M items: 40-43 ms to 38-39 ms when it was
/// added; done for a full scan too, it cost 2 %, so `Iter` prefetches a few records ahead
/// instead, which here measured 28-30 ms against this loop's 26-27 ms, on later code).
/// Called with no lock held, as a page fault may wait for the disk.
fn warm<'a>(chunk: impl Iterator<Item = &'a Shown>, segs: &[(u32, SegRef)]) {
    let mut sum = 0u8;
    for shown in chunk {
        let Shown::Entry(e, slot) = shown else {
            continue;
        };
        let bytes = seg_at(segs, *slot)
            .and_then(|seg| seg.mapped(e.offset, e.len))
            .unwrap_or_default();
        // Every 64th byte, and the last: a record need not start on a cache line.
        for b in bytes.iter().step_by(64).chain(bytes.last()) {
            sum = sum.wrapping_add(*b);
        }
    }
    std::hint::black_box(sum);
}

#[cfg(test)]
mod tests {
    use super::KeyList;

    /// `sort_dedup` orders the keys as bytes (a prefix before its extensions) and keeps one
    /// of each; `get` returns every key whole, and nothing past the end.
    #[test]
    fn a_key_list_sorts_and_drops_repeats() {
        let keys: [&[u8]; 7] = [b"b", b"ab", b"", b"a", b"ab", b"\xff", b"a\x00"];
        let mut list: KeyList = keys.iter().copied().collect();
        assert_eq!(list.len(), 7);
        assert_eq!(list.get(1), b"ab");
        list.sort_dedup();
        let want: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"a".to_vec(),
            b"a\x00".to_vec(),
            b"ab".to_vec(),
            b"b".to_vec(),
            b"\xff".to_vec(),
        ];
        assert_eq!(list.to_vecs(), want);
        assert_eq!(list.get(6), b"");
    }
}
