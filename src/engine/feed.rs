//! Reading a keyspace in the order of its last writes, for the document layer's change feed.
//!
//! Every record carries a sequence number, strictly increasing in commit order, kept by
//! compaction (records are copied verbatim) and recovery. A key-directory entry holds the
//! sequence number of its key's newest version, so "each live key's newest version, in the
//! order of its last write" is the live entries sorted by `seq`.
//!
//! A page is taken against a *cut*: the store's next sequence number read under the log
//! mutex ([`Inner::feed_cut`]). Every write below the cut has been applied to the key directory
//! (writes are applied under that mutex); writes at or above it are left to a later page. So a
//! scan that walks the key directory in chunks (never holding a keyspace lock for the whole
//! keyspace) still misses nothing: a key rewritten between two chunks has a sequence number at
//! or above the cut and is reported, with its new version, by a later page.
//!
//! Invariant: [`Keyspace::changes_after`] returns only versions that are live at the caller's
//! `now` and whose sequence number lies strictly between `after` and the cut, smallest first.

use std::collections::BinaryHeap;
use std::ops::Bound;

use super::{Inner, Keyspace};
use crate::error::Result;

/// Entries examined per keyspace read-lock hold.
const CHUNK: usize = 1024;

/// One change: the key, the sequence number of its newest version, and the value.
pub(crate) type Change = (Vec<u8>, u64, Vec<u8>);

impl Inner {
    /// The engine's `now` (ms) and next sequence number, read together under the log mutex:
    /// every write with a lower sequence number is applied, and every later write gets a
    /// higher one and a write time no earlier than this `now`.
    pub(crate) fn feed_cut(&self) -> (u64, u64) {
        let log = self.log.lock();
        (self.now_ms(), log.next_seq)
    }
}

impl Keyspace {
    /// See [`Inner::feed_cut`].
    pub(crate) fn feed_cut(&self) -> (u64, u64) {
        self.store().inner.feed_cut()
    }

    /// Up to `max` live versions (at second `now`) with `after < seq < cut`, within `prefix`
    /// and written at or after second `since`, smallest sequence number first, and the position
    /// the next page starts after: the last sequence number considered (the largest picked if
    /// more versions remain, else `cut - 1`).
    pub(crate) fn changes_after(
        &self,
        after: u64,
        cut: u64,
        prefix: Option<&[u8]>,
        since: u64,
        now: u64,
        max: usize,
    ) -> Result<(Vec<Change>, u64)> {
        self.check_alive()?;
        let max = max.max(1);
        // The `max` smallest sequence numbers seen (a max-heap, so the largest is evicted).
        let mut best: BinaryHeap<(u64, Vec<u8>)> = BinaryHeap::new();
        let mut more = false;
        let mut lower: Bound<Vec<u8>> = match prefix {
            Some(p) => Bound::Included(p.to_vec()),
            None => Bound::Unbounded,
        };
        'walk: loop {
            let st = self.core().read_ordered();
            let range = st
                .ordered()
                .range((lower.as_ref().map(Vec::as_slice), Bound::Unbounded));
            let mut taken = 0;
            let mut last = None;
            for (k, e) in range {
                if prefix.is_some_and(|p| !k.starts_with(p)) {
                    break 'walk;
                }
                taken += 1;
                last = Some(k);
                if e.seq > after && e.seq < cut && e.ts.get() >= since && st.is_live(e, now) {
                    if best.len() < max {
                        best.push((e.seq, k.to_vec()));
                    } else {
                        more = true;
                        if best.peek().is_some_and(|(top, _)| e.seq < *top) {
                            best.pop();
                            best.push((e.seq, k.to_vec()));
                        }
                    }
                }
                if taken >= CHUNK {
                    break;
                }
            }
            match last {
                Some(k) if taken >= CHUNK => lower = Bound::Excluded(k.to_vec()),
                _ => break,
            }
        }
        let picked = best.into_sorted_vec();
        let next_after = match picked.last() {
            Some((seq, _)) if more => *seq,
            _ => cut.saturating_sub(1).max(after),
        };
        let mut out = Vec::with_capacity(picked.len());
        for (seq, key) in picked {
            // Read the version that was picked; a key rewritten since has a sequence number at
            // or above the cut and is reported by a later page; a deleted or expired one is not
            // reported at all.
            let found = {
                let st = self.core().state.read();
                self.store()
                    .inner
                    .lookup(&st, &key, now)
                    .filter(|(e, _)| e.seq == seq)
            };
            if let Some((e, seg)) = found {
                let value = self.store().inner.read_value(&seg, &e, &key)?;
                out.push((key, seq, value));
            }
        }
        Ok((out, next_after))
    }
}

impl Keyspace {
    /// The keyspace's default-TTL history (oldest first), for the all-versions change feed,
    /// which computes the expiry second of item versions it keeps outside the key directory.
    pub(crate) fn ttl_history(&self) -> Vec<crate::ttl::TtlChange> {
        self.core().state.read().history.clone()
    }
}
