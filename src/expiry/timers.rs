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
/// big ones (a second of a fast writer's keys) allocate few chunks. (Timers filed at open,
/// [`Filing`], have chunks of exactly their second's count, up to `CHUNK_MAX`.)
const CHUNK_MIN: usize = 8;
/// The largest chunk (16 KiB of timers).
const CHUNK_MAX: usize = 512;

/// A bucket being filed whose number of timers is known: its chunks are allocated with exactly
/// the room still due, up to [`CHUNK_MAX`] each.
struct Filling {
    bucket: Bucket,
    due: usize,
}

impl Filling {
    fn new(due: usize) -> Self {
        Self {
            bucket: Bucket::default(),
            due,
        }
    }

    fn push(&mut self, timer: Timer) {
        let b = &mut self.bucket;
        match b.chunks.last_mut() {
            Some(c) if c.len() < c.capacity() => c.push(timer),
            _ => {
                // More timers than announced get chunks of one: no room is ever left.
                let left = self.due.saturating_sub(b.len).clamp(1, CHUNK_MAX);
                let mut chunk = Vec::with_capacity(left);
                chunk.push(timer);
                b.chunks.push(chunk);
            }
        }
        b.len += 1;
    }
}

/// Buckets being filed, by second, in order.
type Fillings = Vec<(u64, Filling)>;

/// Files a known number of timers at once, in two walks over them (open, once every keyspace's
/// key directory is built): [`Filing::count`] each timer's second, then [`Filing::file`] each
/// timer, then [`Filing::finish`]. Each second's timers go into chunks of exactly their
/// number, up to [`CHUNK_MAX`] each, so no chunk has room, and the buckets are built in order.
///
/// Inserting a million timers one by one, their seconds in key order (random), cost a cache
/// miss or two each (165 ms at open). When the seconds span little more than there are
/// timers, they are counted per second in an array (4 bytes per second of the span, which is
/// at most one per timer plus 65,536, and 48 per second that has timers) and dealt straight
/// into their chunks; otherwise ([`Filing::wants_counts`] false, or a second outside the span
/// announced) they are collected and sorted first. A timer whose second was not counted is
/// still filed, one by one.
pub(crate) struct Filing(Stage);

/// Where a [`Filing`] is.
enum Stage {
    /// First walk: timers per second of `min..`.
    Counting { min: u64, counts: Vec<u32> },
    /// Second walk: each second's index among `buckets`, which get the timers.
    Dealing {
        min: u64,
        index: Vec<u32>,
        buckets: Fillings,
        strays: Vec<(u64, Timer)>,
    },
    /// Collecting every timer, to sort.
    Sorting(Vec<(u64, Timer)>),
}

impl Filing {
    /// A filing of `len` timers whose seconds lie within `min..=max`.
    pub(crate) fn new(len: usize, (min, max): (u64, u64)) -> Self {
        let span = usize::try_from(max.wrapping_sub(min))
            .ok()
            .filter(|_| min <= max)
            .and_then(|s| s.checked_add(1))
            .filter(|&s| s <= len.saturating_add(1 << 16));
        Self(match span {
            Some(span) if len > 0 => Stage::Counting {
                min,
                counts: vec![0; span],
            },
            _ => Stage::Sorting(Vec::with_capacity(len)),
        })
    }

    /// True while the first walk is wanted (its counts are used).
    pub(crate) fn wants_counts(&self) -> bool {
        matches!(self.0, Stage::Counting { .. })
    }

    /// Counts a timer at second `at` (first walk).
    pub(crate) fn count(&mut self, at: u64) {
        let Stage::Counting { min, counts } = &mut self.0 else {
            return;
        };
        let n = at
            .checked_sub(*min)
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| counts.get_mut(o));
        match n.and_then(|n| n.checked_add(1).map(|m| (n, m))) {
            Some((n, m)) => *n = m,
            // Outside the span, or 4 G timers in one second: sort instead.
            None => self.0 = Stage::Sorting(Vec::new()),
        }
    }

    /// Files `timer` at second `at` (second walk).
    pub(crate) fn file(&mut self, at: u64, timer: Timer) {
        if let Stage::Counting { min, counts } = &mut self.0 {
            let (min, mut index) = (*min, std::mem::take(counts));
            let mut buckets: Fillings = Vec::new();
            for (second, n) in (min..).zip(index.iter_mut()) {
                if *n > 0 {
                    buckets.push((second, Filling::new(*n as usize)));
                    *n = u32::try_from(buckets.len() - 1).unwrap_or(u32::MAX);
                }
            }
            self.0 = Stage::Dealing {
                min,
                index,
                buckets,
                strays: Vec::new(),
            };
        }
        match &mut self.0 {
            Stage::Dealing {
                min,
                index,
                buckets,
                strays,
            } => {
                let i = at
                    .checked_sub(*min)
                    .and_then(|o| usize::try_from(o).ok())
                    .and_then(|o| index.get(o))
                    .map(|&i| i as usize);
                match i.and_then(|i| buckets.get_mut(i)) {
                    Some((second, f)) if *second == at => f.push(timer),
                    _ => strays.push((at, timer)),
                }
            }
            Stage::Sorting(all) => all.push((at, timer)),
            Stage::Counting { .. } => {}
        }
    }

    /// The filed set.
    pub(crate) fn finish(self) -> Timers {
        let (buckets, strays) = match self.0 {
            Stage::Counting { .. } => return Timers::default(),
            Stage::Dealing {
                buckets, strays, ..
            } => (buckets, strays),
            Stage::Sorting(mut all) => {
                all.sort_unstable_by_key(|(at, _)| *at);
                let mut buckets: Fillings = Vec::new();
                for (at, _) in &all {
                    match buckets.last_mut() {
                        Some((last, f)) if last == at => f.due += 1,
                        _ => buckets.push((*at, Filling::new(1))),
                    }
                }
                let mut all = all.into_iter();
                for (_, f) in &mut buckets {
                    for (_, timer) in all.by_ref().take(f.due) {
                        f.push(timer);
                    }
                }
                (buckets, Vec::new())
            }
        };
        debug_assert!(strays.is_empty(), "timers at seconds that were not counted");
        let mut filed = Timers {
            len: buckets.iter().map(|(_, f)| f.bucket.len).sum(),
            buckets: buckets
                .into_iter()
                .filter(|(_, f)| f.bucket.len > 0)
                .map(|(at, f)| (at, f.bucket))
                .collect(),
        };
        for (at, timer) in strays {
            filed.insert(at, timer);
        }
        filed
    }
}

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

/// Timers taken out by [`Timers::take`]: runs of one second each, as their chunks left the
/// buckets.
pub(crate) type Runs = Vec<(u64, Vec<Timer>)>;

/// Each timer of `runs` with its second, in the order taken.
pub(crate) fn each_timer(runs: Runs) -> impl Iterator<Item = (u64, Timer)> {
    runs.into_iter()
        .flat_map(|(at, run)| run.into_iter().map(move |t| (at, t)))
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

    /// Adds every timer of `other`, whose buckets are not merged with this set's: a bucket of
    /// `other` at a second this set has too is added timer by timer (open files disjoint
    /// ranges of seconds side by side, so that does not happen there).
    pub(crate) fn join(&mut self, other: Timers) {
        for (at, bucket) in other.buckets {
            match self.buckets.entry(at) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    self.len += bucket.len;
                    v.insert(bucket);
                }
                std::collections::btree_map::Entry::Occupied(_) => {
                    for timer in bucket.chunks.into_iter().flatten() {
                        self.insert(at, timer);
                    }
                }
            }
        }
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
    /// as runs of one second each, and returns how many it took. Whole chunks are moved, not
    /// their timers: the owner holds the expiry lock here, which every write that files a
    /// timer needs, and copying 65,536 timers one by one into a fresh vector held it 4–13 ms
    /// in a mixed-TTL run (DESIGN.md §11). Only a chunk split by `limit` is copied (its last
    /// timers, at most a chunk's worth).
    pub(crate) fn take(&mut self, upto: u64, limit: usize, out: &mut Runs) -> usize {
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
                let run = if n == chunk.len() {
                    bucket.chunks.pop().unwrap_or_default()
                } else {
                    chunk.split_off(chunk.len() - n)
                };
                out.push((at, run));
                bucket.len -= n;
                self.len -= n;
                want -= n;
            }
            if bucket.len == 0 {
                first.remove();
            }
        }
        limit - want
    }

    /// Removes and returns the whole bucket of second `at` (for a sweep), as its chunks: moved,
    /// not copied, for the same reason as [`Timers::take`].
    pub(crate) fn take_bucket(&mut self, at: u64) -> Vec<Vec<Timer>> {
        let Some(bucket) = self.buckets.remove(&at) else {
            return Vec::new();
        };
        self.len -= bucket.len;
        bucket.chunks
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

    /// `Timers::take`, flattened: checks the count it returns and that no run is empty.
    fn take_flat(t: &mut Timers, upto: u64, limit: usize) -> Vec<(u64, Timer)> {
        let mut runs = Vec::new();
        let n = t.take(upto, limit, &mut runs);
        assert!(runs.iter().all(|(_, run)| !run.is_empty()));
        let flat: Vec<(u64, Timer)> = each_timer(runs).collect();
        assert_eq!(flat.len(), n);
        flat
    }

    /// A take moves whole chunks (their buffers leave the bucket as they are); only the chunk
    /// the limit splits is copied, and what stays of it stays in the bucket.
    #[test]
    fn take_moves_whole_chunks() {
        let mut t = Timers::default();
        for i in 0..3_000u64 {
            t.insert(7, timer(i));
        }
        let buffers: Vec<*const Timer> = t.buckets[&7].chunks.iter().map(|c| c.as_ptr()).collect();
        assert!(buffers.len() > 3);
        let last = t.buckets[&7].chunks.last().map_or(0, Vec::len);
        let mut runs = Vec::new();
        assert_eq!(t.take(7, last + 100, &mut runs), last + 100);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0].1.as_ptr(),
            buffers[buffers.len() - 1],
            "moved, not copied"
        );
        assert_eq!(runs[1].1.len(), 100);
        assert!(
            !buffers.contains(&runs[1].1.as_ptr()),
            "the split part is a copy"
        );
        let left = &t.buckets[&7];
        assert_eq!(left.len, 3_000 - last - 100);
        assert_eq!(left.chunks.iter().map(Vec::len).sum::<usize>(), left.len);
        assert_eq!(t.len(), left.len);
        // The split chunk stays the bucket's last, in its own buffer and capacity, so the
        // next timer of that second goes into its room, not into a new chunk.
        let split = left.chunks.last().expect("a chunk left");
        assert_eq!(split.as_ptr(), buffers[buffers.len() - 2]);
        let (room, chunks) = (split.capacity() - split.len(), left.chunks.len());
        assert!(room >= 100);
        t.insert(7, timer(9_999));
        let left = &t.buckets[&7];
        assert_eq!(left.chunks.len(), chunks);
        assert_eq!(
            left.chunks.last().map(|c| c.capacity() - c.len()),
            Some(room - 1)
        );
        assert_eq!(
            take_flat(&mut t, 7, usize::MAX).len(),
            3_000 - last - 100 + 1
        );
        assert_eq!(t.len(), 0);
        assert_eq!(t.next_deadline(), None);
    }

    /// Filing timers at once gives the set inserting them one by one gives (the same timers
    /// at the same seconds), in no more memory, with full chunks but the last of each second,
    /// and behaves the same afterwards.
    #[test]
    fn filing_at_once_matches_inserting_one_by_one() {
        // Spreads within and beyond what the count array takes, and one far-off second.
        for spread in [1u64, 3, 700, 50_000, 200_000, 0] {
            let mut one = Timers::default();
            let mut all = Vec::new();
            for i in 0..20_000u64 {
                let at = match spread {
                    0 if i % 2 == 0 => u64::MAX - 1,
                    0 => 5,
                    _ => 1_000 + (i * 7919) % spread,
                };
                one.insert(at, timer(i));
                all.push((at, timer(i)));
            }
            let lo = all.iter().map(|(at, _)| *at).min().unwrap_or(0);
            let hi = all.iter().map(|(at, _)| *at).max().unwrap_or(0);
            let mut filing = Filing::new(all.len(), (lo, hi));
            assert_eq!(filing.wants_counts(), spread != 0 && spread <= 85_536);
            if filing.wants_counts() {
                for (at, _) in &all {
                    filing.count(*at);
                }
            }
            for (at, t) in all {
                filing.file(at, t);
            }
            let mut filed = filing.finish();
            assert_eq!(filed.len(), one.len());
            assert!(filed.heap_bytes() <= one.heap_bytes(), "spread {spread}");
            for b in filed.buckets.values() {
                assert!(
                    b.chunks.iter().all(|c| c.len() == c.capacity()),
                    "spread {spread}"
                );
                assert!(b.chunks.iter().all(|c| c.len() <= CHUNK_MAX));
                assert_eq!(b.chunks.iter().map(Vec::len).sum::<usize>(), b.len);
            }
            assert_eq!(filed.seconds_after(0), one.seconds_after(0));
            for t in [&mut filed, &mut one] {
                t.insert(1_000, timer(1 << 40));
            }
            let drain = |t: &mut Timers| {
                let mut v: Vec<(u64, Vec<u8>)> = take_flat(t, u64::MAX, usize::MAX)
                    .into_iter()
                    .map(|(at, t)| (at, t.key.to_vec()))
                    .collect();
                v.sort_unstable();
                v
            };
            assert_eq!(drain(&mut filed), drain(&mut one));
            assert_eq!(filed.len(), 0);
        }
        assert_eq!(Filing::new(0, (1, 0)).finish().len(), 0);
        // A second outside the span announced turns the filing into a sort, and loses nothing.
        let mut filing = Filing::new(3, (10, 12));
        for at in [10, 12, 99] {
            filing.count(at);
        }
        assert!(!filing.wants_counts());
        for (i, at) in [10u64, 12, 99].into_iter().enumerate() {
            filing.file(at, timer(i as u64));
        }
        let filed = filing.finish();
        assert_eq!(filed.seconds_after(0), vec![10, 12, 99]);
        assert_eq!(filed.len(), 3);
    }

    /// Joining sets keeps every timer at its second, the buckets of a second both have too.
    #[test]
    fn joining_sets_keeps_every_timer() {
        let mut a = Timers::default();
        let mut b = Timers::default();
        for i in 0..300u64 {
            a.insert(10 + i % 5, timer(i));
            b.insert(14 + i % 5, timer(1_000 + i));
        }
        let mut joined = Timers::default();
        joined.join(Timers::default());
        assert_eq!(joined.len(), 0);
        joined.join(a);
        let mut a = joined;
        a.join(b);
        assert_eq!(a.len(), 600);
        assert_eq!(a.seconds_after(0), (10..19).collect::<Vec<_>>());
        assert_eq!(a.due(13), 240);
        assert_eq!(a.due(14), 300 + 60);
        let out = take_flat(&mut a, u64::MAX, usize::MAX);
        assert_eq!(out.len(), 600);
        assert!(out.iter().all(|(at, t)| {
            let i = u64::from_be_bytes(t.key.as_slice().try_into().expect("8-byte key"));
            *at == if i < 1_000 {
                10 + i % 5
            } else {
                14 + (i - 1_000) % 5
            }
        }));
        assert_eq!(a.len(), 0);
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
        let mut out = take_flat(&mut t, 99, 1_000);
        assert!(out.is_empty(), "nothing is due before 100");
        out.extend(take_flat(&mut t, 120, 1_500));
        assert_eq!(out.len(), 1_500);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "earliest first");
        assert!(out.iter().all(|(at, _)| *at <= 120));
        out.extend(take_flat(&mut t, 120, usize::MAX));
        assert_eq!(out.len(), 21 * 200, "every timer due by 120");
        assert_eq!(t.len(), 10_000 - 21 * 200);
        assert_eq!(t.next_deadline(), Some(121));
        // Every timer came out exactly once, at the second it was inserted at.
        out.extend(take_flat(&mut t, u64::MAX, usize::MAX));
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
        let b: Vec<Timer> = t.take_bucket(12).into_iter().flatten().collect();
        assert_eq!(b.len(), 25);
        assert!(b.iter().all(|tm| {
            let i = u64::from_be_bytes(tm.key.as_slice().try_into().expect("8-byte key"));
            i % 4 == 2
        }));
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
