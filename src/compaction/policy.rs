//! Which sealed segments to compact.
//!
//! - A segment whose every byte is dead and that holds no record needing the no-resurrection
//!   check is *dropped*: deleted without being read.
//! - A segment whose dead share reaches the threshold is merged.
//! - A segment holding expired bytes whose oldest deadline is older than the maximum
//!   reclamation lag is merged whatever its dead share, so expired data in cold segments is
//!   purged within a bound.

use std::collections::HashMap;

use crate::stats::SegStats;
use crate::ttl;

/// What the policy chose.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Delete without reading.
    pub drop: Vec<u32>,
    /// Read and rewrite.
    pub merge: Vec<u32>,
}

impl Selection {
    /// True when there is nothing to do.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.merge.is_empty()
    }
}

/// Chooses among `sealed` segments. `full` merges every one that is not dropped.
#[must_use]
pub fn select(
    sealed: &[u32],
    stats: &HashMap<u32, SegStats>,
    now: u64,
    dead_ratio: f64,
    max_lag_secs: u64,
    full: bool,
) -> Selection {
    let mut sel = Selection::default();
    for &id in sealed {
        let s = stats.get(&id).copied().unwrap_or_default();
        if s.dead >= s.total && s.shadowing == 0 {
            sel.drop.push(id);
        } else if full
            || s.dead >= s.total
            || (s.dead > 0 && s.dead_share() >= dead_ratio)
            || (s.oldest_expiry != ttl::NEVER
                && s.oldest_expiry.saturating_add(max_lag_secs) <= now)
        {
            sel.merge.push(id);
        }
    }
    sel
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(total: u64, dead: u64, shadowing: u64, oldest: u64) -> SegStats {
        SegStats {
            total,
            dead,
            shadowing,
            oldest_expiry: oldest,
            ..SegStats::default()
        }
    }

    #[test]
    fn thresholds() {
        let mut m = HashMap::new();
        m.insert(1, st(100, 100, 0, ttl::NEVER)); // all dead, nothing shadowed: drop
        m.insert(2, st(100, 100, 3, ttl::NEVER)); // all dead but shadowing: merge
        m.insert(3, st(100, 50, 0, ttl::NEVER)); // at threshold: merge
        m.insert(4, st(100, 49, 0, ttl::NEVER)); // below: keep
        m.insert(5, st(100, 10, 0, 1000)); // expired bytes older than the lag: merge
        m.insert(6, st(100, 10, 0, 1500)); // expired bytes within the lag: keep
        let sel = select(&[1, 2, 3, 4, 5, 6], &m, 2000, 0.5, 600, false);
        assert_eq!(sel.drop, vec![1]);
        assert_eq!(sel.merge, vec![2, 3, 5]);
        let full = select(&[1, 2, 3, 4, 5, 6], &m, 2000, 0.5, 600, true);
        assert_eq!(full.merge, vec![2, 3, 4, 5, 6]);
    }
}
