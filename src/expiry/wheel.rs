//! Hierarchical timer wheel with whole-second resolution.
//!
//! [`TimerWheel<T>`] owns each pending value `T` from [`TimerWheel::insert`]
//! until [`TimerWheel::advance`] fires it or [`TimerWheel::cancel`] returns it.
//!
//! # Layout
//!
//! * **Slab**: entries in a `Vec` of slots with a `u32` generation bumped on
//!   free, plus an index-linked free list. A [`TimerHandle`] is `(index,
//!   generation)`, so a stale handle is rejected in O(1).
//! * **Lists**: each live entry is on exactly one intrusive doubly-linked list
//!   threaded through the slab by `u32` indices, and records which. Chosen over
//!   per-slot `Vec<(index, generation)>` with lazy skipping because cancel then
//!   truly removes: no tombstones carried through cascades, no memory growth
//!   under cancel-heavy use (TTL rewrites), no bitmap bits for dead-only slots.
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
//! 1. Every occupied slab slot is on exactly the list its `list` field names;
//!    `len` counts them. A wheel slot's bitmap bit is set iff its list is
//!    non-empty.
//! 2. Every wheel/overflow entry has `deadline > now` and is placed as above
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
const DEAD_HANDLE: TimerHandle = TimerHandle {
    index: NIL,
    generation: 0,
};

/// Handle to a pending timer, returned by [`TimerWheel::insert`] and accepted
/// by [`TimerWheel::cancel`]. Once the timer fires or is cancelled the handle
/// goes stale and is recognised as such by its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    index: u32,
    generation: u32,
}

struct Node<T> {
    deadline: u64,
    value: T,
    prev: u32,
    next: u32,
    list: u16,
}

enum Slot<T> {
    Vacant(u32),
    Occupied(Node<T>),
}

struct Entry<T> {
    generation: u32,
    slot: Slot<T>,
}

/// A hierarchical timer wheel mapping whole-second deadlines to values `T`.
///
/// See the [module documentation](self) for layout, invariants and costs.
pub struct TimerWheel<T> {
    now: u64,
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
    heads: [u32; LISTS],
    occupied: [u64; LEVELS],
    overflow_min: u64,
}

/// The 6-bit digit of `time` for `level`.
fn digit(time: u64, level: usize) -> usize {
    ((time >> (SLOT_BITS as usize * level)) & (SLOTS as u64 - 1)) as usize
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
            heads: [NIL; LISTS],
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
        let (prev, next, list) = (NIL, NIL, 0);
        let node = Node {
            deadline,
            value,
            prev,
            next,
            list,
        };
        let Some(handle) = self.alloc(node) else {
            return DEAD_HANDLE;
        };
        self.place(handle.index, deadline);
        handle
    }

    /// Cancels a pending timer and returns its value, or `None` if the handle
    /// is stale (the timer already fired or was cancelled). O(1).
    pub fn cancel(&mut self, handle: TimerHandle) -> Option<T> {
        let entry = self.entries.get(handle.index as usize)?;
        if entry.generation != handle.generation || !matches!(entry.slot, Slot::Occupied(_)) {
            return None;
        }
        self.unlink(handle.index);
        self.release(handle.index).map(|node| node.value)
    }

    /// A lower bound on the earliest pending deadline; `None` iff empty.
    ///
    /// The result is exact when the earliest timer is due (deadline `<= now`,
    /// found by scanning the due list, which is non-empty only between an
    /// `insert` of a past deadline and the next `advance`) or sits on level 0
    /// (deadline in the same 64-second block as `now`). Otherwise it is the
    /// start second of the earliest occupied higher-level slot (at most
    /// `64^k - 1` seconds early for level `k`), or, for timers beyond the
    /// wheel's ~2^42 s horizon, a lower bound that may be stale after
    /// cancellations. Either way it is `> now` unless something is due, and
    /// `advance(t)` with `t` below the returned value fires nothing.
    #[must_use]
    pub fn next_deadline(&self) -> Option<u64> {
        let mut due: Option<u64> = None;
        let mut cursor = self.heads.get(DUE).copied().unwrap_or(NIL);
        while let Some(node) = self.node(cursor) {
            due = Some(due.map_or(node.deadline, |d| d.min(node.deadline)));
            cursor = node.next;
        }
        if due.is_some() {
            return due;
        }
        let wheel = self.next_slot().map(|(at, _)| at);
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
            let next = self.next_slot().into_iter().chain(self.overflow_event());
            let Some((at, list)) = next.min().filter(|&(at, _)| at <= now) else {
                break;
            };
            self.now = self.now.max(at);
            let mut cursor = self.take_list(list);
            while let Some(node) = self.node(cursor) {
                let (next, deadline) = (node.next, node.deadline);
                if list < SLOTS && deadline <= self.now {
                    // Level 0: every entry in the slot has this very deadline.
                    if let Some(node) = self.release(cursor) {
                        fired.push((node.deadline, node.value));
                    }
                } else {
                    self.place(cursor, deadline);
                }
                cursor = next;
            }
        }
        self.now = now;
    }

    /// The earliest occupied wheel slot as `(start second, list)`.
    fn next_slot(&self) -> Option<(u64, usize)> {
        let mut best: Option<(u64, usize)> = None;
        for (level, &bits) in self.occupied.iter().enumerate() {
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
        self.heads.get(OVERFLOW).is_some_and(|&h| h != NIL)
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

    /// Pushes the (unlinked) entry `index` onto the list for `deadline`.
    fn place(&mut self, index: u32, deadline: u64) {
        let list = self.list_for(deadline);
        let Some(head) = self.heads.get_mut(list) else {
            return;
        };
        let old = mem::replace(head, index);
        if let Some(node) = self.node_mut(index) {
            node.prev = NIL;
            node.next = old;
            node.list = list as u16;
        }
        if let Some(node) = self.node_mut(old) {
            node.prev = index;
        }
        self.set_occupied(list, true);
        if list == OVERFLOW {
            self.overflow_min = self.overflow_min.min(deadline);
        }
    }

    /// Removes the entry `index` from whatever list it is on.
    fn unlink(&mut self, index: u32) {
        let Some(node) = self.node(index) else { return };
        let (prev, next, list) = (node.prev, node.next, usize::from(node.list));
        if prev == NIL {
            if let Some(head) = self.heads.get_mut(list) {
                *head = next;
            }
        } else if let Some(p) = self.node_mut(prev) {
            p.next = next;
        }
        if let Some(n) = self.node_mut(next) {
            n.prev = prev;
        }
        if prev == NIL && next == NIL {
            self.set_occupied(list, false);
            if list == OVERFLOW {
                self.overflow_min = u64::MAX;
            }
        }
    }

    /// Detaches a whole list and returns its head; its nodes keep stale links
    /// that the caller follows once and overwrites.
    fn take_list(&mut self, list: usize) -> u32 {
        self.set_occupied(list, false);
        if list == OVERFLOW {
            self.overflow_min = u64::MAX;
        }
        self.heads
            .get_mut(list)
            .map_or(NIL, |head| mem::replace(head, NIL))
    }

    /// Fires the due list, sorted by deadline.
    fn drain_due(&mut self, fired: &mut Vec<(u64, T)>) {
        let start = fired.len();
        let mut cursor = self.take_list(DUE);
        while let Some(next) = self.node(cursor).map(|node| node.next) {
            if let Some(node) = self.release(cursor) {
                fired.push((node.deadline, node.value));
            }
            cursor = next;
        }
        if let Some(batch) = fired.get_mut(start..) {
            batch.sort_by_key(|&(deadline, _)| deadline);
        }
    }

    /// Sets or clears a wheel slot's bitmap bit (`DUE`/`OVERFLOW` have none).
    fn set_occupied(&mut self, list: usize, on: bool) {
        if let Some(bits) = self.occupied.get_mut(list / SLOTS) {
            let bit = 1u64 << (list % SLOTS);
            *bits = if on { *bits | bit } else { *bits & !bit };
        }
    }

    fn node(&self, index: u32) -> Option<&Node<T>> {
        match &self.entries.get(index as usize)?.slot {
            Slot::Occupied(node) => Some(node),
            Slot::Vacant(_) => None,
        }
    }

    fn node_mut(&mut self, index: u32) -> Option<&mut Node<T>> {
        match &mut self.entries.get_mut(index as usize)?.slot {
            Slot::Occupied(node) => Some(node),
            Slot::Vacant(_) => None,
        }
    }

    /// Stores `node` in a free slab slot; `None` only if the slab is full.
    fn alloc(&mut self, node: Node<T>) -> Option<TimerHandle> {
        let index = self.free_head;
        if let Some(entry) = self.entries.get_mut(index as usize) {
            if let Slot::Vacant(next_free) = entry.slot {
                self.free_head = next_free;
                entry.slot = Slot::Occupied(node);
                self.len += 1;
                let generation = entry.generation;
                return Some(TimerHandle { index, generation });
            }
        }
        let index = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != NIL)?;
        let generation = 0;
        let slot = Slot::Occupied(node);
        self.entries.push(Entry { generation, slot });
        self.len += 1;
        Some(TimerHandle { index, generation })
    }

    /// Frees slab slot `index` (already unlinked) and returns its node.
    fn release(&mut self, index: u32) -> Option<Node<T>> {
        let entry = self.entries.get_mut(index as usize)?;
        match mem::replace(&mut entry.slot, Slot::Vacant(self.free_head)) {
            Slot::Occupied(node) => {
                entry.generation = entry.generation.wrapping_add(1);
                self.free_head = index;
                self.len = self.len.saturating_sub(1);
                Some(node)
            }
            vacant => {
                entry.slot = vacant;
                None
            }
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
        assert_eq!(w.heads.get(OVERFLOW), Some(&NIL));
        assert_eq!(run(&mut w, now + B36).len(), 1);
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
