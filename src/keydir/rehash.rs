//! When the worker hashes an ordered key directory again (DESIGN.md §3.1, "Hashed again when
//! walks stop"): a pure decision over the keyspace's walk count, its layout and the time, so
//! that it can be tested without a store.
//!
//! A walk in key order orders a hashed map, and an ordered map serves point operations through
//! B-trees, slower than the hashed layout (at 1 M keys a `get` took about 1 µs instead of 0.6,
//! an insert or delete three to five times as long). Once no walk has begun for a while, the
//! map is worth hashing again; if walks keep coming back soon after each hashing, every
//! hashing is followed by a new ordering, so the wait doubles each time that happens.

use std::time::{Duration, Instant};

/// The most the wait grows to, in multiples of the configured one.
const MAX_WAIT_FACTOR: u32 = 64;

/// One keyspace's watch, kept by the worker between its ticks.
#[derive(Debug, Clone)]
pub struct RehashWatch {
    /// The walk count at the last look.
    seen: u64,
    /// When that count last moved (or the map was last hashed, or tried).
    moved_at: Instant,
    /// How long the count must stay put before the map is hashed.
    wait: Duration,
    /// When the map was last hashed, until the next walk.
    hashed_at: Option<Instant>,
}

impl RehashWatch {
    /// A watch starting at walk count `walks`, at `now`, waiting `after`.
    #[must_use]
    pub fn new(walks: u64, now: Instant, after: Duration) -> Self {
        Self {
            seen: walks,
            moved_at: now,
            wait: after,
            hashed_at: None,
        }
    }

    /// Looks at the keyspace at `now`: its walk count and whether its map is ordered. True if
    /// the map should be hashed now (the caller does it; the next look counts from here).
    /// `after` is the configured wait, from which the current one starts again when a
    /// hashing held for longer than the wait.
    pub fn look(&mut self, walks: u64, ordered: bool, now: Instant, after: Duration) -> bool {
        if walks != self.seen {
            self.seen = walks;
            self.moved_at = now;
            if let Some(at) = self.hashed_at.take() {
                self.wait = if now.saturating_duration_since(at) < self.wait {
                    // Walked again soon after a hashing: wait longer next time.
                    self.wait
                        .saturating_mul(2)
                        .min(after.saturating_mul(MAX_WAIT_FACTOR))
                } else {
                    after
                };
            }
            return false;
        }
        if ordered && now.saturating_duration_since(self.moved_at) >= self.wait {
            self.moved_at = now;
            self.hashed_at = Some(now);
            return true;
        }
        false
    }

    /// The current wait.
    #[cfg(test)]
    fn wait(&self) -> Duration {
        self.wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(30);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn an_ordered_map_is_hashed_once_walks_stop_for_the_wait() {
        let t0 = Instant::now();
        let mut w = RehashWatch::new(5, t0, AFTER);
        // Walks keep moving: never.
        for i in 1..100 {
            assert!(!w.look(5 + i, true, t0 + secs(i), AFTER));
        }
        let last = t0 + secs(99);
        assert!(!w.look(104, true, last + secs(29), AFTER), "too soon");
        assert!(w.look(104, true, last + secs(30), AFTER), "due");
        // Tried: the next try is a whole wait later (a hashing given up is not retried at
        // every tick).
        assert!(!w.look(104, true, last + secs(31), AFTER));
        assert!(w.look(104, true, last + secs(60), AFTER));
    }

    #[test]
    fn a_hashed_map_is_left_alone() {
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        assert!(!w.look(0, false, t0 + secs(3600), AFTER));
    }

    #[test]
    fn walks_soon_after_each_hashing_double_the_wait_up_to_its_cap() {
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        let mut now = t0;
        let mut walks = 0;
        let mut waits = Vec::new();
        for _ in 0..10 {
            now += w.wait();
            assert!(w.look(walks, true, now, AFTER));
            // A walk orders the map again one second after the hashing.
            walks += 1;
            now += secs(1);
            assert!(!w.look(walks, true, now, AFTER));
            waits.push(w.wait().as_secs());
        }
        assert_eq!(
            waits,
            [60, 120, 240, 480, 960, 1920, 1920, 1920, 1920, 1920]
        );
        // A hashing that held for longer than the wait starts the wait afresh.
        now += w.wait();
        assert!(w.look(walks, true, now, AFTER));
        walks += 1;
        now += w.wait() + secs(1);
        assert!(!w.look(walks, true, now, AFTER));
        assert_eq!(w.wait(), AFTER);
    }

    #[test]
    fn a_walk_that_found_the_map_hashed_still_counts() {
        // The count moves whatever the layout: a walk orders the map it finds hashed.
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        assert!(!w.look(1, false, t0 + secs(40), AFTER));
        assert!(!w.look(1, true, t0 + secs(69), AFTER));
        assert!(w.look(1, true, t0 + secs(70), AFTER));
    }
}
