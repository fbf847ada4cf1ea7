//! Time sources. Every timestamp the engine uses comes from the configured [`Clock`].
//!
//! The engine never trusts the clock to move forward: it keeps its own high-water mark on top of
//! it (see `engine::now`), so a clock that steps back revives nothing.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_unix_millis(&self) -> u64;

    /// Whether background maintenance (expiry reaping, compaction policy) should run on its own
    /// timer. A [`ManualClock`] returns `false`: time only moves when a test moves it, so the
    /// same work runs when the caller asks for it (`maintain`, `compact`).
    fn drives_background(&self) -> bool {
        true
    }
}

/// The operating system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use ebbdb::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::at_unix_secs(1_700_000_000);
/// let seen_by_db = clock.clone();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(seen_by_db.now_unix_millis(), 1_700_000_005_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `secs` seconds after the Unix epoch.
    #[must_use]
    pub fn at_unix_secs(secs: u64) -> Self {
        Self::at_unix_millis(secs.saturating_mul(1000))
    }

    /// A clock standing at `millis` milliseconds after the Unix epoch.
    #[must_use]
    pub fn at_unix_millis(millis: u64) -> Self {
        Self {
            millis: Arc::new(AtomicU64::new(millis)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `millis`, forwards or backwards (to simulate a clock that steps back).
    pub fn set_unix_millis(&self, millis: u64) {
        self.millis.store(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }

    fn drives_background(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_and_steps_both_ways() {
        let c = ManualClock::at_unix_secs(10);
        let d = c.clone();
        c.advance(Duration::from_millis(1500));
        assert_eq!(d.now_unix_millis(), 11_500);
        d.set_unix_millis(3);
        assert_eq!(c.now_unix_millis(), 3);
        assert!(!c.drives_background());
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_unix_millis() > 1_577_836_800_000);
        assert!(SystemClock.drives_background());
    }
}
