//! Expiry timers in one bucket per second (a calendar queue).
//!
//! Deadlines are whole seconds and a time-ordered workload writes its keys' deadlines in a
//! handful of distinct seconds at a time, so the timers of one second share a bucket: an
//! ordered map from second to bucket, each bucket a list of fixed-capacity chunks of
//! [`Timer`]s. A timer costs its 32 bytes and nothing else (no slab slot, no handle, no
//! per-timer list item): chunks are allocated at their final capacity and never grow by
//! copying, so no allocation is ever twice the size it needs.
//!
//! A timer has no handle and cannot be cancelled in place. Which timer of a key is in
//! charge is recorded in the key directory instead (`Entry::armed`, the second of the key's
//! timer): a fired timer whose second is not its key's `armed` second (or whose key is gone)
//! is *stale* and is dropped. The owner counts stale timers exactly (`stale`) and sweeps them
//! out when they outnumber the ones in charge (see `Inner::sweep_stale_timers`), so memory
//! stays proportional to the keys with a deadline, not to the number of writes.

use std::collections::BTreeMap;

use super::Timer;

/// The smallest chunk. A new chunk holds half as many timers as the bucket already has, within
/// `CHUNK_MIN..=CHUNK_MAX`, so the room left in the last chunk is at most a third of the
/// bucket's capacity: small buckets (mixed TTLs spread keys over many seconds) waste little,
/// big ones (a second of a fast writer's keys) allocate few chunks.
const CHUNK_MIN: usize = 8;
/// The largest chunk (16 KiB of timers).
const CHUNK_MAX: usize = 512;

/// The timers due in one second.
#[derive(Debug, Default)]
struct Bucket {
    /// Chunks, each allocated with its final capacity; only the last one may have room.
    chunks: Vec<Vec<Timer>>,
    len: usize,
}

impl Bucket {
    fn push(&mut self, timer: Timer) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < c.capacity() => c.push(timer),
            _ => {
                let cap = (self.len / 2).clamp(CHUNK_MIN, CHUNK_MAX);
                let mut chunk = Vec::with_capacity(cap);
                chunk.push(timer);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }
}

/// Pending expiry timers by second.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    buckets: BTreeMap<u64, Bucket>,
    len: usize,
}

impl Timers {
    /// Schedules `timer` at second `at`.
    pub(crate) fn insert(&mut self, at: u64, timer: Timer) {
        self.buckets.entry(at).or_default().push(timer);
        self.len += 1;
    }

    /// Timers pending (stale ones included).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The earliest second with a pending timer.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.buckets.first_key_value().map(|(at, _)| *at)
    }

    /// Timers due at or before `upto`.
    pub(crate) fn due(&self, upto: u64) -> usize {
        self.buckets.range(..=upto).map(|(_, b)| b.len).sum()
    }

    /// Takes up to `limit` timers due at or before `upto`, earliest second first, into `out`
    /// with their seconds (each timer is moved into `out`; an emptied chunk is freed).
    pub(crate) fn take(&mut self, upto: u64, limit: usize, out: &mut Vec<(u64, Timer)>) {
        let mut want = limit;
        while want > 0 {
            let Some(mut first) = self.buckets.first_entry() else {
                break;
            };
            let at = *first.key();
            if at > upto {
                break;
            }
            let bucket = first.get_mut();
            while want > 0 {
                let Some(chunk) = bucket.chunks.last_mut() else {
                    break;
                };
                let n = chunk.len().min(want);
                out.extend(chunk.drain(chunk.len() - n..).map(|t| (at, t)));
                if chunk.is_empty() {
                    bucket.chunks.pop();
                }
                bucket.len -= n;
                self.len -= n;
                want -= n;
            }
            if bucket.len == 0 {
                first.remove();
            }
        }
    }

    /// Removes and returns the whole bucket of second `at` (for a sweep).
    pub(crate) fn take_bucket(&mut self, at: u64) -> Vec<Timer> {
        let Some(bucket) = self.buckets.remove(&at) else {
            return Vec::new();
        };
        self.len -= bucket.len;
        let mut all = Vec::with_capacity(bucket.len);
        for chunk in bucket.chunks {
            all.extend(chunk);
        }
        all
    }

    /// The seconds that have timers, after `after`.
    pub(crate) fn seconds_after(&self, after: u64) -> Vec<u64> {
        self.buckets
            .range(after.saturating_add(1)..)
            .map(|(at, _)| *at)
            .collect()
    }

    /// Heap bytes held (chunk capacities and bucket headers), for tests and stats.
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.buckets
            .values()
            .map(|b| {
                std::mem::size_of::<Bucket>()
                    + b.chunks.capacity() * std::mem::size_of::<Vec<Timer>>()
                    + b.chunks
                        .iter()
                        .map(|c| c.capacity() * std::mem::size_of::<Timer>())
                        .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keydir::Key;

    fn timer(i: u64) -> Timer {
        Timer {
            keyspace: (i % 3) as u32,
            key: Key::from_slice(&i.to_be_bytes()),
        }
    }

    #[test]
    fn takes_in_second_order_and_respects_limits() {
        let mut t = Timers::default();
        for i in 0..10_000u64 {
            t.insert(100 + (i * 7919) % 50, timer(i));
        }
        assert_eq!(t.len(), 10_000);
        assert_eq!(t.next_deadline(), Some(100));
        assert_eq!(t.due(99), 0);
        assert_eq!(t.due(100), 200);
        assert_eq!(t.due(149), 10_000);
        let mut out = Vec::new();
        t.take(99, 1_000, &mut out);
        assert!(out.is_empty(), "nothing is due before 100");
        t.take(120, 1_500, &mut out);
        assert_eq!(out.len(), 1_500);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "earliest first");
        assert!(out.iter().all(|(at, _)| *at <= 120));
        t.take(120, usize::MAX, &mut out);
        assert_eq!(out.len(), 21 * 200, "every timer due by 120");
        assert_eq!(t.len(), 10_000 - 21 * 200);
        assert_eq!(t.next_deadline(), Some(121));
        // Every timer came out exactly once, at the second it was inserted at.
        t.take(u64::MAX, usize::MAX, &mut out);
        assert_eq!(t.len(), 0);
        let mut seen: Vec<u64> = out
            .iter()
            .map(|(at, tm)| {
                let i = u64::from_be_bytes(tm.key.as_slice().try_into().expect("8-byte key"));
                assert_eq!(*at, 100 + (i * 7919) % 50);
                i
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn take_bucket_and_seconds_after() {
        let mut t = Timers::default();
        for i in 0..100u64 {
            t.insert(10 + i % 4, timer(i));
        }
        assert_eq!(t.seconds_after(10), vec![11, 12, 13]);
        assert_eq!(t.seconds_after(u64::MAX), Vec::<u64>::new());
        let b = t.take_bucket(12);
        assert_eq!(b.len(), 25);
        assert_eq!(t.len(), 75);
        assert!(t.take_bucket(12).is_empty());
        assert_eq!(t.due(13), 75);
    }

    #[test]
    fn memory_is_close_to_the_timers_themselves() {
        // One big second and many small ones: the waste of partly filled chunks stays small.
        let mut t = Timers::default();
        for i in 0..100_000u64 {
            t.insert(1, timer(i));
        }
        for i in 0..100_000u64 {
            t.insert(1_000 + i % 3_600, timer(i));
        }
        let per_timer = t.heap_bytes() as f64 / t.len() as f64;
        let size = std::mem::size_of::<Timer>() as f64;
        assert!(
            per_timer < size * 1.4,
            "{per_timer:.1} bytes per {size}-byte timer"
        );
    }
}
