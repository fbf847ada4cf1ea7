//! Hierarchical timer wheel with whole-second resolution.
//!
//! [`TimerWheel<T>`] owns each pending value `T` from [`TimerWheel::insert`]
//! until [`TimerWheel::advance`] fires it or [`TimerWheel::cancel`] returns it.
//!
//! # Layout
//!
//! * **Slab**: values in a `Vec` of slots with a `u32` generation bumped on
//!   free, plus an index-linked free list. A [`TimerHandle`] is `(index,
//!   generation)`, so a stale handle is rejected in O(1).
//! * **Lists**: each wheel slot (and the due and overflow lists) is a
//!   contiguous `Vec` of 16-byte `(deadline, index, generation)` items.
//!   Cascading reads a slot sequentially and re-buckets by deadline without
//!   touching the slab; only firing does (independent loads, no pointer
//!   chasing). Drained vectors are kept for reuse up to `KEEP_CAPACITY`.
//! * **Tombstones**: `cancel` frees the slab slot and leaves its item in place;
//!   an item whose generation no longer matches is dropped when it reaches
//!   firing (or is carried along by cascades until then). `len` counts live
//!   timers exactly; tombstones are counted too, and once they outnumber
//!   `max(len, COMPACT_MIN)` every list is swept, so memory stays O(len).
//! * **Levels**: 7 levels of 64 slots with a `u64` occupancy bitmap each; a
//!   level-`k` slot spans `64^k` s. On levels 0..=5 a `deadline > now` goes to
//!   the level of the highest bit where it differs from `now`, in the slot of
//!   its 6-bit digit there (higher digits equal `now`'s; this one exceeds it).
//!   Level 6 is a ring of 2^36 s blocks 1..=63 ahead of `now`'s block, so all
//!   deadlines up to at least `now + 63 * 2^36` (~2^42 s) are in the wheel.
//! * **Due list**: inserts with `deadline <= now`; fired, sorted, by the next
//!   `advance` (even `advance(now)`).
//! * **Overflow list**: anything beyond the ring, re-placed at the first second
//!   its earliest deadline fits the ring. `overflow_min` bounds its deadlines
//!   from below (exact after re-placement, possibly stale after cancels).
//!
//! # Invariants (between public calls)
//!
//! 1. Every live timer has exactly one item (with its generation) on some
//!    list; `len` counts live timers, `stale` the tombstone items. A wheel
//!    slot's bitmap bit is set iff its list is non-empty (maybe only stale).
//! 2. Every wheel/overflow item has `deadline > now` and is placed as above
//!    relative to `now`, so every occupied wheel slot starts after `now`.
//!
//! # Advancing
//!
//! `advance` never walks empty seconds: it repeatedly takes the earliest of the
//! occupied slots' start seconds (a `rotate_right` + `trailing_zeros` per
//! level) and the overflow re-placement time, jumps `now` there and processes
//! it. A level-0 slot fires (one shared deadline); a higher slot cascades into
//! lower levels (or the due list, if due that very second). Slots starting
//! after the target stay valid, as the target cannot have left their enclosing
//! block. Cost: O(fired + cascaded + occupied slots passed).
//!
//! No arithmetic overflows, for any `u64` deadline. Limits: at most
//! `u32::MAX - 1` live timers (beyond that `insert` drops the value and returns
//! a dead handle); a handle is only confused after 2^32 reuses of its slot.

use std::{fmt, mem};

const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const LEVELS: usize = 7;
const TOP: usize = LEVELS - 1;
const TOP_SHIFT: u32 = SLOT_BITS * TOP as u32;
const WHEEL_LISTS: usize = LEVELS * SLOTS;
const DUE: usize = WHEEL_LISTS;
const OVERFLOW: usize = WHEEL_LISTS + 1;
const LISTS: usize = WHEEL_LISTS + 2;
const _: () = assert!(DUE / SLOTS == LEVELS && OVERFLOW / SLOTS == LEVELS);
const NIL: u32 = u32::MAX;
const DEAD_HANDLE: TimerHandle = TimerHandle::NONE;
/// A drained list keeps its allocation for reuse if it holds at most this many items.
const KEEP_CAPACITY: usize = 4096;
/// Tombstones always tolerated before a sweep (small under test to exercise it).
const COMPACT_MIN: usize = if cfg!(test) { 4 } else { 1024 };

/// Handle to a pending timer, returned by [`TimerWheel::insert`] and accepted
/// by [`TimerWheel::cancel`]. Once the timer fires or is cancelled the handle
/// goes stale and is recognised as such by its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    index: u32,
    generation: u32,
}

impl TimerHandle {
    /// A handle that never names a pending timer.
    pub const NONE: TimerHandle = TimerHandle {
        index: NIL,
        generation: 0,
    };
}

impl Default for TimerHandle {
    fn default() -> Self {
        Self::NONE
    }
}

/// A list item: live iff the slab slot `index` still has `generation`.
#[derive(Clone, Copy)]
struct Item {
    deadline: u64,
    index: u32,
    generation: u32,
}

/// A slab slot; the generation is bumped when an occupied slot is freed.
enum Entry<T> {
    Vacant { generation: u32, next_free: u32 },
    Occupied { generation: u32, value: T },
}

/// A hierarchical timer wheel mapping whole-second deadlines to values `T`.
///
/// See the [module documentation](self) for layout, invariants and costs.
pub struct TimerWheel<T> {
    now: u64,
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
    stale: usize,
    lists: Vec<Vec<Item>>,
    occupied: [u64; LEVELS],
    overflow_min: u64,
}

/// The 6-bit digit of `time` for `level`.
fn digit(time: u64, level: usize) -> usize {
    ((time >> (SLOT_BITS as usize * level)) & (SLOTS as u64 - 1)) as usize
}

/// Whether `item` still refers to the pending timer it was created for.
fn is_live<T>(entries: &[Entry<T>], item: &Item) -> bool {
    let entry = entries.get(item.index as usize);
    matches!(entry, Some(Entry::Occupied { generation, .. }) if *generation == item.generation)
}

impl<T> TimerWheel<T> {
    /// Creates an empty wheel whose current second is `now`.
    #[must_use]
    pub fn new(now: u64) -> Self {
        Self {
            now,
            entries: Vec::new(),
            free_head: NIL,
            len: 0,
            stale: 0,
            lists: (0..LISTS).map(|_| Vec::new()).collect(),
            occupied: [0; LEVELS],
            overflow_min: u64::MAX,
        }
    }

    /// The wheel's current second: the last second passed to
    /// [`advance`](Self::advance) (or to [`new`](Self::new)).
    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Number of pending (neither fired nor cancelled) timers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` if no timer is pending.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `value` to fire at `deadline`. A deadline `<= now()` is due:
    /// it fires on the next [`advance`](Self::advance), even `advance(now())`.
    /// O(1) amortised.
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerHandle {
        let Some(handle) = self.alloc(value) else {
            return DEAD_HANDLE;
        };
        let (index, generation) = (handle.index, handle.generation);
        self.place(Item {
            deadline,
            index,
            generation,
        });
        handle
    }

    /// Cancels a pending timer and returns its value, or `None` if the handle
    /// is stale (the timer already fired or was cancelled). O(1) amortised.
    pub fn cancel(&mut self, handle: TimerHandle) -> Option<T> {
        let value = self.release(handle.index, handle.generation)?;
        self.stale += 1;
        if self.stale > self.len.max(COMPACT_MIN) {
            self.compact();
        }
        Some(value)
    }

    /// Moves a pending timer to `deadline`, keeping its value, and returns its new handle (the
    /// old one goes stale); `None` if the handle is stale. The old list item becomes a
    /// tombstone, swept like a cancelled timer's. O(1) amortised.
    pub fn reschedule(&mut self, handle: TimerHandle, deadline: u64) -> Option<TimerHandle> {
        let entry = self.entries.get_mut(handle.index as usize)?;
        let Entry::Occupied { generation, .. } = entry else {
            return None;
        };
        if *generation != handle.generation {
            return None;
        }
        *generation = generation.wrapping_add(1);
        let moved = TimerHandle {
            index: handle.index,
            generation: *generation,
        };
        self.stale += 1;
        self.place(Item {
            deadline,
            index: moved.index,
            generation: moved.generation,
        });
        if self.stale > self.len.max(COMPACT_MIN) {
            self.compact();
        }
        Some(moved)
    }

    /// True while `handle`'s timer is pending (neither fired nor cancelled).
    #[must_use]
    pub fn contains(&self, handle: TimerHandle) -> bool {
        is_live(
            &self.entries,
            &Item {
                deadline: 0,
                index: handle.index,
                generation: handle.generation,
            },
        )
    }

    /// A lower bound on the earliest pending deadline; `None` iff empty.
    ///
    /// The result is exact when the earliest timer is due (deadline `<= now`,
    /// found by scanning the due list, which is non-empty only between an
    /// `insert` of a past deadline and the next `advance`) or sits on level 0
    /// (deadline in the same 64-second block as `now`; found by scanning
    /// level 0 past tombstone-only slots). Otherwise it is the start second of
    /// the earliest occupied higher-level slot (at most `64^k - 1` seconds
    /// early for level `k`, or later still if that slot holds only cancelled
    /// timers), or, for timers beyond the wheel's ~2^42 s horizon, a lower
    /// bound that may be stale after cancellations. Either way it is `> now`
    /// unless something is due, and `advance(t)` with `t` below the returned
    /// value fires nothing.
    #[must_use]
    pub fn next_deadline(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let due = self.lists.get(DUE).into_iter().flatten();
        let due = due
            .filter(|i| is_live(&self.entries, i))
            .map(|i| i.deadline);
        if let Some(due) = due.min() {
            return Some(due);
        }
        let wheel = self.next_slot(true).map(|(at, _)| at);
        let overflow = self.has_overflow().then_some(self.overflow_min);
        wheel.into_iter().chain(overflow).min()
    }

    /// Advances the wheel to second `now` and appends every timer with
    /// `deadline <= now` to `fired` as `(deadline, value)`, in non-decreasing
    /// deadline order. If `now < self.now()` this is a no-op. Cost is
    /// proportional to the timers fired or cascaded and the occupied slots
    /// passed, not to the number of seconds skipped.
    pub fn advance(&mut self, now: u64, fired: &mut Vec<(u64, T)>) {
        if now < self.now {
            return;
        }
        loop {
            self.drain_due(fired);
            let next = self
                .next_slot(false)
                .into_iter()
                .chain(self.overflow_event());
            let Some((at, list)) = next.min().filter(|&(at, _)| at <= now) else {
                break;
            };
            self.now = self.now.max(at);
            let mut batch = self.lists.get_mut(list).map(mem::take).unwrap_or_default();
            self.set_occupied(list, false);
            if list == OVERFLOW {
                self.overflow_min = u64::MAX;
            }
            if list < SLOTS {
                // Level 0: every item in the slot has this very deadline.
                fired.reserve(batch.len());
                for item in batch.drain(..) {
                    if item.deadline <= self.now {
                        self.fire(item, fired);
                    } else {
                        self.place(item);
                    }
                }
            } else {
                for item in batch.drain(..) {
                    self.place(item);
                }
            }
            self.recycle(list, batch);
        }
        self.now = now;
    }

    /// The earliest occupied wheel slot as `(start second, list)`; with
    /// `live_only`, level-0 slots holding only tombstones are skipped.
    fn next_slot(&self, live_only: bool) -> Option<(u64, usize)> {
        let mut best: Option<(u64, usize)> = None;
        for (level, &bits) in self.occupied.iter().enumerate() {
            let bits = if live_only && level == 0 {
                self.live_level0(bits)
            } else {
                bits
            };
            if bits == 0 {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let current = digit(self.now, level);
            let offset = bits.rotate_right(current as u32).trailing_zeros();
            let start = (self.now >> shift)
                .checked_add(u64::from(offset))
                .and_then(|block| block.checked_mul(1u64 << shift));
            let Some(start) = start else { continue };
            let list = level * SLOTS + (current + offset as usize) % SLOTS;
            if best.is_none_or(|(b, _)| start < b) {
                best = Some((start, list));
            }
        }
        best
    }

    /// The subset of level-0 slots in `bits` holding at least one live item.
    fn live_level0(&self, bits: u64) -> u64 {
        let slots = self.lists.iter().take(SLOTS).enumerate();
        slots
            .filter(|&(slot, items)| {
                (bits >> slot) & 1 == 1 && items.iter().any(|i| is_live(&self.entries, i))
            })
            .fold(0, |live, (slot, _)| live | 1 << slot)
    }

    /// When the overflow list must next be re-examined, as `(second, list)`.
    fn overflow_event(&self) -> Option<(u64, usize)> {
        if !self.has_overflow() {
            return None;
        }
        // The earliest overflow entry fits the top ring once now's block is
        // at most 63 blocks behind its own; `block < 2^28`, so no overflow.
        let block = (self.overflow_min >> TOP_SHIFT).saturating_sub(SLOTS as u64 - 1);
        Some(((block << TOP_SHIFT).max(self.now), OVERFLOW))
    }

    fn has_overflow(&self) -> bool {
        self.lists.get(OVERFLOW).is_some_and(|l| !l.is_empty())
    }

    /// Which list an entry with `deadline` belongs on, relative to `now`.
    fn list_for(&self, deadline: u64) -> usize {
        if deadline <= self.now {
            return DUE;
        }
        let high_bit = (deadline ^ self.now).checked_ilog2().unwrap_or(0);
        let level = (high_bit / SLOT_BITS) as usize;
        if level < TOP {
            return level * SLOTS + digit(deadline, level);
        }
        let ahead = (deadline >> TOP_SHIFT).saturating_sub(self.now >> TOP_SHIFT);
        if ahead < SLOTS as u64 {
            TOP * SLOTS + digit(deadline, TOP)
        } else {
            OVERFLOW
        }
    }

    /// Pushes `item` onto the list for its deadline.
    fn place(&mut self, item: Item) {
        let list = self.list_for(item.deadline);
        if let Some(items) = self.lists.get_mut(list) {
            items.push(item);
        }
        self.set_occupied(list, true);
        if list == OVERFLOW {
            self.overflow_min = self.overflow_min.min(item.deadline);
        }
    }

    /// Hands a drained list's allocation back to `list` unless it is large
    /// or the list has meanwhile been refilled.
    fn recycle(&mut self, list: usize, batch: Vec<Item>) {
        if let Some(items) = self.lists.get_mut(list) {
            if items.capacity() == 0 && batch.capacity() <= KEEP_CAPACITY {
                *items = batch;
            }
        }
    }

    /// Fires everything on the due list, sorted by deadline.
    fn drain_due(&mut self, fired: &mut Vec<(u64, T)>) {
        let Some(mut batch) = self.lists.get_mut(DUE).map(mem::take) else {
            return;
        };
        batch.sort_unstable_by_key(|item| item.deadline);
        for item in batch.drain(..) {
            self.fire(item, fired);
        }
        self.recycle(DUE, batch);
    }

    /// Releases `item`'s timer into `fired`, or drops it if it is a tombstone.
    fn fire(&mut self, item: Item, fired: &mut Vec<(u64, T)>) {
        match self.release(item.index, item.generation) {
            Some(value) => fired.push((item.deadline, value)),
            None => self.stale = self.stale.saturating_sub(1),
        }
    }

    /// Drops every tombstone, clearing bits of wheel slots left empty.
    fn compact(&mut self) {
        let entries = &self.entries;
        for (list, items) in self.lists.iter_mut().enumerate() {
            items.retain(|item| is_live(entries, item));
            if items.capacity() > KEEP_CAPACITY && items.len() < items.capacity() / 4 {
                items.shrink_to_fit();
            }
            if let (true, Some(bits)) = (items.is_empty(), self.occupied.get_mut(list / SLOTS)) {
                *bits &= !(1u64 << (list % SLOTS));
            }
        }
        let overflow = self.lists.get(OVERFLOW).into_iter().flatten();
        self.overflow_min = overflow.map(|i| i.deadline).min().unwrap_or(u64::MAX);
        self.stale = 0;
    }

    /// Sets or clears a wheel slot's bitmap bit (`DUE`/`OVERFLOW` have none).
    fn set_occupied(&mut self, list: usize, on: bool) {
        if let Some(bits) = self.occupied.get_mut(list / SLOTS) {
            let bit = 1u64 << (list % SLOTS);
            *bits = if on { *bits | bit } else { *bits & !bit };
        }
    }

    /// Stores `value` in a free slab slot; `None` only if the slab is full.
    fn alloc(&mut self, value: T) -> Option<TimerHandle> {
        let index = self.free_head;
        if let Some(entry) = self.entries.get_mut(index as usize) {
            if let Entry::Vacant {
                generation,
                next_free,
            } = *entry
            {
                self.free_head = next_free;
                *entry = Entry::Occupied { generation, value };
                self.len += 1;
                return Some(TimerHandle { index, generation });
            }
        }
        let index = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != NIL)?;
        let generation = 0;
        self.entries.push(Entry::Occupied { generation, value });
        self.len += 1;
        Some(TimerHandle { index, generation })
    }

    /// Frees slab slot `index` if it still holds `generation`; returns its value.
    fn release(&mut self, index: u32, generation: u32) -> Option<T> {
        let entry = self.entries.get_mut(index as usize)?;
        if !matches!(entry, Entry::Occupied { generation: g, .. } if *g == generation) {
            return None;
        }
        let next_free = self.free_head;
        let generation = generation.wrapping_add(1);
        match mem::replace(
            entry,
            Entry::Vacant {
                generation,
                next_free,
            },
        ) {
            Entry::Occupied { value, .. } => {
                self.free_head = index;
                self.len = self.len.saturating_sub(1);
                Some(value)
            }
            Entry::Vacant { .. } => None,
        }
    }
}

impl<T> fmt::Debug for TimerWheel<T> {
    /// Summarises the wheel (`now`, `len`, `next_deadline`); values are not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("now", &self.now)
            .field("len", &self.len)
            .field("next_deadline", &self.next_deadline())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod reschedule_tests {
    use super::*;

    #[test]
    fn reschedule_moves_a_timer_and_keeps_one_pending() {
        let mut w = TimerWheel::new(100);
        let h = w.insert(200, "k");
        let h2 = w.reschedule(h, 150).expect("pending");
        assert!(!w.contains(h) && w.contains(h2));
        assert_eq!(w.len(), 1);
        assert!(w.reschedule(h, 300).is_none(), "stale handle");
        let mut fired = Vec::new();
        w.advance(160, &mut fired);
        assert_eq!(fired, vec![(150, "k")]);
        w.advance(400, &mut fired);
        assert_eq!(fired.len(), 1, "the old deadline does not fire again");
        assert!(!w.contains(h2));
    }

    #[test]
    fn many_reschedules_keep_memory_bounded() {
        let mut w = TimerWheel::new(0);
        let mut h = w.insert(10, 1u32);
        for i in 0..100_000u64 {
            h = w.reschedule(h, 10 + i % 5000).expect("pending");
        }
        assert_eq!(w.len(), 1);
        let items: usize = w.lists.iter().map(Vec::len).sum();
        assert!(
            items <= 2 * COMPACT_MIN + 2,
            "{items} list items for one timer"
        );
        assert!(!w.contains(TimerHandle::NONE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashSet};

    const B36: u64 = 1 << 36;
    const B40: u64 = 1 << 40;
    const MAX: u64 = u64::MAX;

    fn run<T>(wheel: &mut TimerWheel<T>, now: u64) -> Vec<(u64, T)> {
        let mut fired = Vec::new();
        wheel.advance(now, &mut fired);
        fired
    }

    fn in_order<T>(fired: &[(u64, T)]) -> bool {
        fired
            .iter()
            .zip(fired.iter().skip(1))
            .all(|(a, b)| a.0 <= b.0)
    }

    #[test]
    fn due_immediately_fires_on_same_second() {
        let mut w = TimerWheel::new(100);
        let h = w.insert(100, 'a');
        w.insert(7, 'b');
        assert_eq!(w.next_deadline(), Some(7));
        let shown = format!("{w:?}");
        assert!(shown.contains("len: 2") && shown.contains("next_deadline: Some(7)"));
        assert_eq!(run(&mut w, 100), vec![(7, 'b'), (100, 'a')]);
        assert!(w.is_empty());
        assert_eq!(w.cancel(h), None);
    }

    #[test]
    fn cancel_before_and_after_fire() {
        let mut w = TimerWheel::new(0);
        let (a, b) = (w.insert(5000, 1), w.insert(5000, 2));
        assert_eq!((w.cancel(a), w.cancel(a)), (Some(1), None));
        assert_eq!(run(&mut w, 4999), vec![]);
        assert_eq!(run(&mut w, 5000), vec![(5000, 2)]);
        assert_eq!((w.cancel(b), w.next_deadline()), (None, None));
    }

    #[test]
    fn stale_handle_after_slot_reuse() {
        let mut w = TimerWheel::new(0);
        let old = w.insert(10, "old");
        assert_eq!(w.cancel(old), Some("old"));
        let new = w.insert(20, "new");
        assert_eq!(old.index, new.index);
        assert_eq!((w.cancel(old), w.len()), (None, 1));
        assert_eq!(w.cancel(new), Some("new"));
    }

    #[test]
    fn huge_deadlines_never_fire_early() {
        let deadlines = [MAX - 1, MAX, B40, B36, B36 - 1];
        let targets = [B36 - 2, B36 - 1, B36, B40 - 1, B40, MAX - 2];
        for start in [0, B36 - 3, MAX - 100] {
            let mut w = TimerWheel::new(start);
            for (i, &d) in deadlines.iter().enumerate() {
                w.insert(d, i);
            }
            let mut all = Vec::new();
            for target in targets.into_iter().chain([MAX - 1, MAX]) {
                let fired = run(&mut w, target);
                assert!(fired.iter().all(|&(d, _)| d <= w.now()));
                if let Some(next) = w.next_deadline().filter(|_| target >= start) {
                    assert!(next > w.now(), "pending timer looks due");
                }
                all.extend(fired);
            }
            assert!(w.is_empty() && in_order(&all) && all.len() == deadlines.len());
        }
    }

    #[test]
    fn horizon_covers_two_to_the_36_across_block_boundaries() {
        let now = (1u64 << 42) - 1;
        let mut w = TimerWheel::new(now);
        w.insert(now + B36, ());
        w.insert(now + 63 * B36, ());
        assert!(w.lists.get(OVERFLOW).is_some_and(Vec::is_empty));
        assert_eq!(run(&mut w, now + B36).len(), 1);
    }

    #[test]
    fn cancel_heavy_use_keeps_tombstones_bounded() {
        let mut w = TimerWheel::new(0);
        w.insert(1 << 20, u64::MAX);
        for i in 0..100_000u64 {
            let h = w.insert(1000 + i % 5000, i);
            assert_eq!(w.cancel(h), Some(i));
            let items: usize = w.lists.iter().map(Vec::len).sum();
            assert!(items <= 2 * COMPACT_MIN + 2 && w.len() == 1);
        }
        assert!(w.next_deadline().is_some_and(|d| d <= 1 << 20));
        assert_eq!(run(&mut w, 1 << 20), vec![(1 << 20, u64::MAX)]);
        assert_eq!((w.stale, w.next_deadline()), (0, None));
    }

    #[test]
    fn advance_backwards_is_noop() {
        let mut w = TimerWheel::new(1000);
        w.insert(1500, ());
        w.insert(900, ());
        assert!(run(&mut w, 500).is_empty());
        assert_eq!((w.now(), w.len()), (1000, 2));
        assert_eq!(run(&mut w, 1500).len(), 2);
    }

    #[test]
    fn far_jump_fires_everything_in_order() {
        let mut w = TimerWheel::new(0);
        let (mut x, mut expected) = (1u64, Vec::new());
        for i in 0..3000u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            w.insert(x >> (i % 64), i);
            expected.push((x >> (i % 64), i));
        }
        let mut got = run(&mut w, MAX);
        assert!(in_order(&got) && w.is_empty());
        got.sort_unstable();
        expected.sort_unstable();
        assert_eq!(got, expected);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(i64),
        InsertAt(u64),
        Aligned(u32, u64),
        Cancel(usize),
        CancelStale(usize),
        Advance(u64),
        Seek(u64),
        Back(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            40 => (0i64..1 << 20).prop_map(Op::Insert),
            3 => (1i64 << 30..1 << 44).prop_map(Op::Insert),
            3 => (-1i64 << 12..0).prop_map(Op::Insert),
            2 => prop_oneof![any::<u64>(), MAX - 1000..=MAX].prop_map(Op::InsertAt),
            4 => (1u32..=6, 1u64..=64).prop_map(|(level, ahead)| Op::Aligned(level, ahead)),
            12 => any::<usize>().prop_map(Op::Cancel),
            3 => any::<usize>().prop_map(Op::CancelStale),
            30 => (0u64..1 << 18).prop_map(Op::Advance),
            3 => (1u64 << 30..1 << 44).prop_map(Op::Advance),
            1 => prop_oneof![0u64..1 << 62, any::<u64>()].prop_map(Op::Advance),
            3 => (1u64..1 << 10).prop_map(Op::Back),
            8 => (0u64..2).prop_map(Op::Seek),
        ]
    }

    fn start() -> impl Strategy<Value = u64> {
        let near_b36 = B36 - (1 << 19)..B36 + 10;
        let near_b42 = (1u64 << 42) - (1 << 38)..1 << 42;
        prop_oneof![0u64..1 << 40, near_b36, near_b42, MAX - (1 << 41)..=MAX]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        #[test]
        fn matches_reference_model(start in start(), ops in prop::collection::vec(op(), 1..300)) {
            let (mut w, mut now) = (TimerWheel::new(start), start);
            let (mut heap, mut cancelled) = (BinaryHeap::new(), HashSet::new());
            let (mut live, mut dead) = (Vec::new(), Vec::new());
            let mut earliest: Option<u64> = None;
            for (id, op) in (0u64..).zip(ops) {
                // Seek: advance to exactly the earliest pending deadline, or the second before.
                let seek = |back: u64| {
                    earliest.map_or(0, |e| e.saturating_sub(back).saturating_sub(now))
                };
                let op = if let Op::Seek(back) = op { Op::Advance(seek(back)) } else { op };
                let deadline = match op {
                    Op::Insert(off) => Some(now.saturating_add_signed(off)),
                    Op::InsertAt(at) => Some(at),
                    // A slot boundary `ahead` slots into level `level`'s future.
                    Op::Aligned(level, ahead) => (now >> (6 * level))
                        .checked_add(ahead)
                        .and_then(|block| block.checked_mul(1 << (6 * level))),
                    _ => None,
                };
                if let Some(d) = deadline {
                    live.push((w.insert(d, id), id));
                    heap.push((Reverse(d), id));
                }
                match op {
                    Op::Cancel(i) if !live.is_empty() => {
                        let (h, id) = live.swap_remove(i % live.len());
                        prop_assert_eq!(w.cancel(h), Some(id));
                        cancelled.insert(id);
                        dead.push(h);
                    }
                    Op::CancelStale(i) if !dead.is_empty() => {
                        let h = dead.get(i % dead.len()).copied();
                        prop_assert_eq!(h.and_then(|h| w.cancel(h)), None);
                    }
                    Op::Back(by) => {
                        prop_assert!(run(&mut w, now.saturating_sub(by)).is_empty());
                        prop_assert_eq!(w.now(), now);
                    }
                    Op::Advance(by) => {
                        now = now.saturating_add(by);
                        let fired = run(&mut w, now);
                        prop_assert_eq!(w.now(), now);
                        prop_assert!(in_order(&fired), "out of order: {:?}", fired);
                        let mut expected = Vec::new();
                        while let Some(&(Reverse(d), id)) = heap.peek().filter(|e| e.0 .0 <= now) {
                            heap.pop();
                            if !cancelled.remove(&id) {
                                expected.push((d, id));
                            }
                        }
                        let mut got = fired;
                        got.sort_unstable();
                        expected.sort_unstable();
                        prop_assert_eq!(&got, &expected, "now {}", now);
                        let ids: HashSet<u64> = got.iter().map(|&(_, id)| id).collect();
                        dead.extend(live.iter().filter(|(_, id)| ids.contains(id)).map(|e| e.0));
                        live.retain(|(_, id)| !ids.contains(id));
                        let next = w.next_deadline();
                        prop_assert!(next.is_none_or(|n| n > now), "{:?} not after {}", next, now);
                    }
                    _ => {}
                }
                prop_assert_eq!(w.len(), live.len());
                let live_ids = heap.iter().filter(|(_, id)| !cancelled.contains(id));
                earliest = live_ids.map(|&(Reverse(d), _)| d).min();
                let next = w.next_deadline();
                prop_assert_eq!(next.is_some(), earliest.is_some());
                if let (Some(next), Some(e)) = (next, earliest) {
                    prop_assert!(next <= e, "bound {} above earliest {}", next, e);
                    if e <= now || e >> SLOT_BITS == now >> SLOT_BITS {
                        prop_assert_eq!(next, e, "level 0 / due must be exact");
                    }
                }
            }
        }
    }
}
