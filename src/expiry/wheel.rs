//! PLACEHOLDER (replaced by the hierarchical wheel): a binary heap with the same API.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Handle to a scheduled timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle(u64);

/// Timers keyed by deadline second.
#[derive(Debug)]
pub struct TimerWheel<T> {
    now: u64,
    next: u64,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    vals: HashMap<u64, T>,
}

impl<T> TimerWheel<T> {
    /// New wheel at `now`.
    #[must_use]
    pub fn new(now: u64) -> Self {
        Self {
            now,
            next: 0,
            heap: BinaryHeap::new(),
            vals: HashMap::new(),
        }
    }
    /// Current second.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }
    /// Schedule.
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerHandle {
        self.next += 1;
        self.heap.push(Reverse((deadline, self.next)));
        self.vals.insert(self.next, value);
        TimerHandle(self.next)
    }
    /// Cancel.
    pub fn cancel(&mut self, h: TimerHandle) -> Option<T> {
        self.vals.remove(&h.0)
    }
    /// Pending count.
    #[must_use]
    pub fn len(&self) -> usize {
        self.vals.len()
    }
    /// Empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }
    /// Earliest deadline.
    #[must_use]
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|r| r.0 .0)
    }
    /// Fire everything due.
    pub fn advance(&mut self, now: u64, fired: &mut Vec<(u64, T)>) {
        if now < self.now {
            return;
        }
        self.now = now;
        while let Some(Reverse((d, id))) = self.heap.peek().copied() {
            if d > now {
                break;
            }
            self.heap.pop();
            if let Some(v) = self.vals.remove(&id) {
                fired.push((d, v));
            }
        }
    }
}
