//! When the worker hashes an ordered key directory again (DESIGN.md §3.1, "Hashed again when
//! walks stop"): a pure decision over the keyspace's walk count, its layout and the time, so
//! that it can be tested without a store.
//!
//! A walk in key order orders a hashed map, and an ordered map serves point operations through
//! B-trees, slower than the hashed layout (at 1 M keys a `get` took about 1 µs instead of 0.6,
//! an insert three times as long). Once no walk has begun for a while, the map is worth
//! hashing again. A walk that orders the map again after a hashing shows that the keyspace is
//! walked now and then, so the wait doubles each time, up to a cap: a keyspace walked
//! periodically settles at a wait at least its period and stays ordered, or, for periods
//! past the cap (32 minutes by default), goes through one hashing and one ordering per walk.

use std::time::{Duration, Instant};

/// The most the wait grows to, in multiples of the configured one.
const MAX_WAIT_FACTOR: u32 = 64;

/// One keyspace's watch, kept by the worker between its ticks.
#[derive(Debug, Clone)]
pub struct RehashWatch {
    /// The walk count at the last look.
    seen: u64,
    /// When that count last moved (or a hashing was last tried).
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

    /// Looks at the keyspace at `now`, given its walk count. True if its map should be hashed
    /// now: no walk for the wait and `ordered()` says the map is ordered (asked only then, so
    /// a look at a keyspace that is walked or waiting takes no lock). The caller then tries
    /// and reports with [`RehashWatch::tried`]. `after` is the configured wait: the first one,
    /// and the one the wait goes back to when the walks after a hashing stayed away for the
    /// whole cap.
    pub fn look(
        &mut self,
        walks: u64,
        now: Instant,
        after: Duration,
        ordered: impl FnOnce() -> bool,
    ) -> bool {
        let cap = after.saturating_mul(MAX_WAIT_FACTOR);
        if walks != self.seen {
            self.seen = walks;
            self.moved_at = now;
            if let Some(at) = self.hashed_at.take() {
                // Walked again after a hashing: wait longer next time, unless that walk came
                // so long after it that the keyspace may as well be walked once in a while.
                self.wait = if now.saturating_duration_since(at) < cap {
                    self.wait.saturating_mul(2).min(cap)
                } else {
                    after
                };
            }
            return false;
        }
        now.saturating_duration_since(self.moved_at) >= self.wait && ordered()
    }

    /// Reports a try that [`RehashWatch::look`] asked for, at `now`: the next try comes a whole
    /// wait later, and only a map actually hashed (`hashed`) makes the next walk count as a
    /// walk after a hashing.
    pub fn tried(&mut self, now: Instant, hashed: bool) {
        self.moved_at = now;
        if hashed {
            self.hashed_at = Some(now);
        }
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
        // Walks keep moving: never (and the layout is not even asked for).
        for i in 1..100 {
            assert!(!w.look(5 + i, t0 + secs(i), AFTER, || panic!("not due")));
        }
        let last = t0 + secs(99);
        assert!(!w.look(104, last + secs(29), AFTER, || panic!("not due")));
        assert!(w.look(104, last + secs(30), AFTER, || true), "due");
        // A try that failed (given up, or too large): the next try is a whole wait later, and
        // a walk after it does not count as a walk after a hashing.
        w.tried(last + secs(30), false);
        assert!(!w.look(104, last + secs(31), AFTER, || panic!("not due")));
        assert!(w.look(104, last + secs(60), AFTER, || true));
        assert!(!w.look(105, last + secs(61), AFTER, || true));
        assert_eq!(w.wait(), AFTER);
    }

    #[test]
    fn a_hashed_map_is_left_alone() {
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        assert!(!w.look(0, t0 + secs(3600), AFTER, || false));
    }

    /// A walker of period `period` seconds over `hours`, the worker looking every quarter
    /// second: how many hashings (each undone by the next walk) it causes.
    fn hashings(period: u64, hours: u64) -> (u64, Duration) {
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        let (mut walks, mut hashed, mut ordered) = (0, 0, true);
        for tick in 0..hours * 3600 * 4 {
            let now = t0 + Duration::from_millis(tick * 250);
            if tick % (period * 4) == 0 {
                walks += 1;
                ordered = true;
            }
            if w.look(walks, now, AFTER, || ordered) {
                w.tried(now, true);
                ordered = false;
                hashed += 1;
            }
        }
        (hashed, w.wait())
    }

    #[test]
    fn a_periodic_walker_settles_at_a_wait_past_its_period() {
        // Below the cap (32 minutes at 30 s): a few hashings while the wait doubles past the
        // period, then none.
        for period in [10, 29, 45, 61, 90, 120, 300, 1000, 1900] {
            let (n, wait) = hashings(period, 8);
            assert!(wait >= secs(period), "period {period} s: wait {wait:?}");
            assert!(n <= 7, "period {period} s: {n} hashings in 8 h");
        }
        // Past the cap: at most one hashing per walk (the walks come further apart than the
        // cap, so each one starts the wait afresh).
        let (n, wait) = hashings(3000, 8);
        assert_eq!(wait, AFTER);
        assert!(n <= 10, "{n} hashings in 8 h");
    }

    #[test]
    fn a_walk_long_after_a_hashing_starts_the_wait_afresh() {
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        let mut now = t0;
        for walks in 1..=3 {
            now += w.wait();
            assert!(w.look(walks - 1, now, AFTER, || true));
            w.tried(now, true);
            now += secs(1);
            assert!(!w.look(walks, now, AFTER, || true));
        }
        assert_eq!(w.wait(), AFTER * 8);
        now += w.wait();
        assert!(w.look(3, now, AFTER, || true));
        w.tried(now, true);
        now += AFTER * MAX_WAIT_FACTOR;
        assert!(!w.look(4, now, AFTER, || true));
        assert_eq!(w.wait(), AFTER);
    }

    #[test]
    fn a_walk_that_found_the_map_hashed_still_counts() {
        // The count moves whatever the layout: a walk orders the map it finds hashed.
        let t0 = Instant::now();
        let mut w = RehashWatch::new(0, t0, AFTER);
        assert!(!w.look(1, t0 + secs(40), AFTER, || false));
        assert!(!w.look(1, t0 + secs(69), AFTER, || true));
        assert!(w.look(1, t0 + secs(70), AFTER, || true));
    }
}
