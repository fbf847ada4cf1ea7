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

use super::{seg_at, seg_slot, Keyspace, SegRef, Shown, CHUNK};
use crate::error::Result;
use crate::format::record::FLAG_IN_BATCH;

/// Reads the live versions of chosen keys, in the order given (see the module note).
#[derive(Debug)]
pub(crate) struct Picked {
    ks: Keyspace,
    now: u64,
    start: u64,
    keys: VecDeque<Vec<u8>>,
    buf: VecDeque<(Vec<u8>, Shown)>,
    segs: Vec<(u32, SegRef)>,
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
            keys: VecDeque::new(),
            buf: VecDeque::new(),
            segs: Vec::new(),
        }
    }
}

impl Picked {
    /// The keys to read, in the order they are returned.
    pub(crate) fn set_keys(&mut self, keys: Vec<Vec<u8>>) {
        self.keys = keys.into();
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
                Some((k, Shown::Value(v))) => return Some(Ok(f(&k, &v, false))),
                Some((k, Shown::Entry(e, slot))) => {
                    let Some(seg) = seg_at(&self.segs, slot) else {
                        continue; // its segment is gone: it died whole after this scan's `now` (DESIGN §7)
                    };
                    return Some(
                        self.ks
                            .inner()
                            .with_record(seg, &e, &k, |v, doc| f(&k, v, doc)),
                    );
                }
                None => {}
            }
            if self.keys.is_empty() {
                return None;
            }
            self.refill();
        }
    }

    fn refill(&mut self) {
        let st = self.ks.core.state.read();
        let scans = self.ks.core.scans.lock();
        let set = self.ks.inner().segments.read();
        self.segs.clear();
        for _ in 0..CHUNK {
            let Some(k) = self.keys.pop_front() else {
                break;
            };
            let entry = st.get(k.as_slice());
            // A batch that committed after the start is not seen: the key as it was before the
            // first such batch (also for a key such a batch deleted).
            let after_start =
                entry.is_none_or(|e| e.seq >= self.start && e.flags & FLAG_IN_BATCH != 0);
            if after_start {
                if let Some(image) = scans.before(&k, self.start) {
                    if let Some((old, value)) = image {
                        if st.is_live(old, self.now) {
                            self.buf.push_back((k, Shown::Value(value.clone())));
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
            self.buf.push_back((k, Shown::Entry(*e, slot)));
        }
        drop((set, scans, st));
        warm(self.buf.iter().map(|(_, shown)| shown), &self.segs);
    }
}

impl Drop for Picked {
    fn drop(&mut self) {
        self.ks.core.scans.lock().close(self.start);
    }
}

impl Iterator for Picked {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.buf.pop_front() {
                Some((k, Shown::Value(v))) => return Some(Ok((k, v))),
                Some((k, Shown::Entry(e, slot))) => {
                    let Some(seg) = seg_at(&self.segs, slot) else {
                        continue; // its segment is gone: it died whole after this scan's `now` (DESIGN §7)
                    };
                    return Some(self.ks.inner().read_value(seg, &e, &k).map(|v| (k, v)));
                }
                None => {}
            }
            if self.keys.is_empty() {
                return None;
            }
            self.refill();
        }
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
