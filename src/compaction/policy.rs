//! Which sealed segments to compact.
//!
//! - A segment whose every byte is dead and that holds no record needing the no-resurrection
//!   check is *dropped*: deleted without being read.
//! - A segment whose dead share reaches the threshold is merged; while the store is under
//!   pressure (its reclaim debt, the reclaimable bytes of the segments a share rule may take,
//!   at [`PRESSURE_DEBT_PPM`] of the sealed bytes or more), from the lower share an idle
//!   store uses.
//! - A segment holding expired bytes whose oldest deadline is older than the maximum
//!   reclamation lag is merged whatever its dead share, so expired data in cold segments is
//!   purged within a bound.
//! - A segment about to die whole (every record still live in it expires within
//!   [`DYING_HORIZON_SECS`], and none shadows an older version) is left alone: it will be
//!   dropped unread, and merging it now would copy records only to expire them seconds later.
//!   Under TTL churn in time order this is the common case, and merging half-dead segments
//!   was the worker's main cost. The deferral ends [`REAP_GRACE_SECS`] after the segment was
//!   due to die (a default-TTL change can move its records' deadlines later), and the lag
//!   bound above still applies.

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
    /// Reclaim debt: the reclaimable bytes of the segments a share rule may take (not those
    /// dropped now, resting, or left to die whole), which only a merge gets back.
    pub debt: u64,
    /// Bytes of the sealed segments that stay on disk after the drops: the base the debt is
    /// a share of ([`PRESSURE_DEBT_PPM`]).
    pub kept: u64,
    /// Bytes of segments due for a merge that this one leaves to the next (the input bound):
    /// more than 0 when merges are behind.
    pub deferred: u64,
}

impl Selection {
    /// True when there is nothing to do.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.merge.is_empty()
    }
}

/// A segment whose live records all expire within this many seconds is not merged (module
/// docs). Waiting costs at most this long of its dead bytes on disk; under uniform TTLs a
/// segment goes from half dead to dead in about half the time its writes took.
pub const DYING_HORIZON_SECS: u64 = 30;

/// How long past its `dies_by` a segment may wait for the reaper before the ordinary rules
/// apply again.
pub const REAP_GRACE_SECS: u64 = 5;

/// A put due within this many seconds of being counted is "soon" (`SegStats::soon`). A
/// segment at least half of whose bytes are reaches the merge's dead share (0.5 by default)
/// within about this long and is merged or dropped: a hint written for it would be read by no
/// open.
pub const SHORT_LIVED_SECS: u64 = 60;

/// True when a put with deadline `at`, counted at second `now`, is due within
/// [`SHORT_LIVED_SECS`].
#[must_use]
pub fn expires_soon(at: u64, now: u64) -> bool {
    at != ttl::NEVER && at <= now.saturating_add(SHORT_LIVED_SECS)
}

/// True when at least half of `s`'s bytes were due within [`SHORT_LIVED_SECS`] when counted,
/// under the default-TTL history of epoch `ttl_epoch` (the current one: a default changed
/// since may have moved those deadlines later).
#[must_use]
pub fn short_lived(s: &SegStats, ttl_epoch: u64) -> bool {
    s.soon > 0 && s.soon.saturating_mul(2) >= s.total && s.ttl_epoch >= ttl_epoch
}

/// True when `s` is about to die whole at `now` and should wait for the drop.
#[must_use]
pub fn dying_soon(s: &SegStats, now: u64) -> bool {
    s.shadowing == 0
        && s.dies_by != ttl::NEVER
        && s.dies_by <= now.saturating_add(DYING_HORIZON_SECS)
        && now <= s.dies_by.saturating_add(REAP_GRACE_SECS)
}

/// A hint entry's bytes besides its key, as `SegStats::hint_bytes` counts them: kind, flags,
/// keyspace, TTL, key length, a 3-4 byte sequence number, a write time relative to the hint's
/// base, a 3-4 byte offset and the length (16-byte keys and 100-byte values: 15.8 bytes an
/// entry on average, `cargo bench --bench figures` before this rule).
pub const HINT_ENTRY_BYTES: u64 = 16;

/// A segment in key order gets a hint only if the hint would take at most `1 / HINT_SHARE_DIV`
/// of it.
pub const HINT_SHARE_DIV: u64 = 8;

/// A segment's records count as in key order while at most one in this many is smaller than
/// the one before it in its keyspace (`few_runs`).
pub const RUN_MIN: u64 = 64;

/// True when `descents` breaks of key order among `records` records leave runs of
/// [`RUN_MIN`] records on average: the stable sort of open merges such runs for about the
/// cost of a pass.
#[must_use]
pub fn few_runs(descents: u64, records: u64) -> bool {
    descents.saturating_mul(RUN_MIN) <= records
}

/// True when a hint is worth writing for a segment of `seg_bytes` bytes whose hint would take
/// about `hint_bytes` and whose records are (`key_ordered`) or are not in key order. A hint
/// spares an open two things: reading the values, and sorting records that are not in key
/// order (the hint's entries are sorted). For a segment in key order with records of less
/// than about 260 bytes (16-byte keys) the first is small and the hint repeats most of the
/// segment: 31.8 bytes per 136-byte record, 1.44 instead of 1.17 times the live bytes after
/// a full compaction, while an open of 1 M such keys that scans instead takes 0.087 s
/// instead of 0.047 s. A segment in write order of random keys (a fill) or in deadline
/// order (a merge under TTLs) keeps its hint: scanning it needs a sort, and opening 1 M keys
/// took 0.11-0.20 s instead of 0.06-0.13 s (DESIGN.md §2.3). `always` is the `test-hooks`
/// option that writes every hint, so that small test stores keep going through the hint
/// paths.
#[must_use]
pub fn hint_worth(hint_bytes: u64, seg_bytes: u64, key_ordered: bool, always: bool) -> bool {
    always || !key_ordered || hint_bytes.saturating_mul(HINT_SHARE_DIV) <= seg_bytes
}

/// How long no write may have come before the background worker counts the store as idle
/// ([`dead_ratio_when`]).
pub const IDLE_AFTER_SECS: u64 = 2;

/// The dead share at which the background worker merges a segment: `dead_ratio` while writes
/// come, half of it once the store has been idle for [`IDLE_AFTER_SECS`]. A store merges at
/// half dead so that writers do not pay for rewriting segments that will die further anyway;
/// when the writes stop, what is left just below that share would stay on disk for good (up
/// to twice the live bytes), and merging it then takes nothing from a writer. Half: a
/// segment left below it is at most a third larger than its live records (0.25 of it dead at
/// the default 0.5).
#[must_use]
pub fn dead_ratio_when(dead_ratio: f64, idle: bool) -> f64 {
    if idle {
        dead_ratio / 2.0
    } else {
        dead_ratio
    }
}

/// The reclaim debt's share of the sealed bytes kept (parts per million: 6 %) from which the
/// policy merges segments whose own reclaimable share reaches the one it uses when idle
/// ([`dead_ratio_when`]), deadest first, and from which writers are paced while merges are
/// behind ([`Selection::deferred`], [`pace_ns`]). Segments each just under the usual share would hold the store
/// near twice its live bytes, and under mixed TTLs a segment the writer wrote crosses the
/// usual share only after about half its life: merges started late and did not catch up
/// (DESIGN.md §7, "Pressure").
pub const PRESSURE_DEBT_PPM: u64 = 60_000;

/// The debt share (parts per million: 12 %) at which writers are paced at full strength.
pub const PACE_FULL_DEBT_PPM: u64 = 120_000;

/// A write's delay per byte it appended, at full pacing: 2.7 µs for a 136-byte record, about
/// three times what writing it costs on its own.
pub const PACE_NS_PER_BYTE: u64 = 20;

/// The delay owed by a write that appended `bytes` while the reclaim debt stood at
/// `debt_ppm` (published as 0 while merges keep up): none up to [`PRESSURE_DEBT_PPM`], rising in
/// proportion to [`PACE_NS_PER_BYTE`] at [`PACE_FULL_DEBT_PPM`] and beyond.
#[must_use]
pub fn pace_ns(bytes: u64, debt_ppm: u64) -> u64 {
    let over = debt_ppm
        .saturating_sub(PRESSURE_DEBT_PPM)
        .min(PACE_FULL_DEBT_PPM - PRESSURE_DEBT_PPM);
    let ns = u128::from(bytes) * u128::from(PACE_NS_PER_BYTE) * u128::from(over)
        / u128::from(PACE_FULL_DEBT_PPM - PRESSURE_DEBT_PPM);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The share `debt` is of `kept`, in parts per million (0 when nothing is kept).
#[must_use]
pub fn debt_ppm(debt: u64, kept: u64) -> u64 {
    if kept == 0 {
        return 0;
    }
    u64::try_from(u128::from(debt) * 1_000_000 / u128::from(kept)).unwrap_or(u64::MAX)
}

/// Dead bytes of `s` a merge could reclaim: all but the no-resurrection markers a merge wrote
/// into it (`SegStats::markers`), which a merge keeps while the versions they hide may be on
/// disk. Counted, a segment a quarter markers would be merged again and again under pressure
/// for the one record each expiry frees (a review's probe: 240 merges writing 12.4 MB in two
/// minutes to reclaim 120 records).
#[must_use]
pub fn reclaimable(s: &SegStats) -> u64 {
    s.dead.min(s.total).saturating_sub(s.markers)
}

/// True when `reclaimable` of `total` bytes reach `num / den`.
fn share_at_least(reclaimable: u64, total: u64, (num, den): (u64, u64)) -> bool {
    total > 0 && u128::from(reclaimable) * u128::from(den) >= u128::from(total) * u128::from(num)
}

/// How a segment stands before any share is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Deleted unread.
    Dropped,
    /// Resting (a merge that reclaimed nothing wrote it) or about to die whole: no share rule
    /// takes it.
    Left,
    /// Overdue (reclamation-lag bound): merged whatever its share.
    Overdue,
    /// Merged if its share says so.
    Open,
}

/// True when `s` holds expired bytes older than the reclamation-lag bound.
fn overdue(s: &SegStats, now: u64, max_lag_secs: u64) -> bool {
    s.oldest_expiry != ttl::NEVER && s.oldest_expiry.saturating_add(max_lag_secs) <= now
}

/// The policy's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Dead share at which a segment is merged.
    pub dead_ratio: f64,
    /// Reclamation-lag bound: expired bytes older than this are merged whatever the share.
    pub max_lag_secs: u64,
    /// Input bound of one merge (at least one segment is taken).
    pub max_merge_bytes: u64,
    /// `Some(epoch)` when a segment may be dropped as soon as it has died whole, before the
    /// reaper has freed its keys ([`dead_whole`]): the current default-TTL epoch, which a
    /// segment's `dies_by` must have been computed in. `None` when the reaper must go first
    /// (an expiry subscriber needs every event to survive a crash).
    pub early_drop: Option<u64>,
    /// `Some(id)` while the store is idle: segments with a lower id, written before the
    /// writes stopped, are merged from [`dead_ratio_when`]`(dead_ratio, true)`. Segments
    /// created since (this idle period's merge outputs) keep the usual share, so an output
    /// whose kept no-resurrection markers count as dead is not merged again and again.
    pub idle_below: Option<u32>,
    /// The reclaim generation (`LogState::reclaim_gen`): a segment written by a merge that
    /// reclaimed nothing in this generation (`SegStats::sterile_in == reclaim_gen + 1`) is
    /// not merged again (but by a full merge) until another merge or drop reclaims something,
    /// or more of it dies (an expiry: the reclamation-lag bound still holds): it would be
    /// copied whole again. Without this, a segment of markers that an older,
    /// mostly live segment keeps needed was merged at every chance (77 merges in one
    /// `compact()` of a probe).
    pub reclaim_gen: u64,
    /// Sealed segments smaller than this that hold a record that never expires are merged
    /// together once there are [`COALESCE_MIN_SEGMENTS`] of them with at least this many
    /// bytes in all and nothing else is to be merged (0: never): half the segment size. A clean close seals an active segment
    /// of a few megabytes (`Inner::seal_large_active`), so a store that only gains keys and
    /// is opened and closed often would otherwise keep one small file per session for good
    /// (a review's probe: 200 sessions, 201 segments); merge outputs' last files are small too.
    pub coalesce_below: u64,
}

/// How many small sealed segments (`Rules::coalesce_below`) it takes to merge them together.
pub const COALESCE_MIN_SEGMENTS: usize = 8;

/// True when every record of `s` still counted live has expired at `now` by its `dies_by`,
/// computed under the default-TTL history of `epoch` or later (a default change can move
/// deadlines later, so an older `dies_by` proves nothing), and none shadows an older version.
/// Expiry is final, so such a segment holds nothing any read can ever return again.
#[must_use]
pub fn dead_whole(s: &SegStats, now: u64, epoch: u64) -> bool {
    // `u64::MAX`: no deadline was counted with an epoch, so nothing says `dies_by` is exact
    // (such a segment waits for the ordinary drop).
    s.shadowing == 0
        && s.dies_by != ttl::NEVER
        && s.dies_by <= now
        && s.ttl_epoch != u64::MAX
        && s.ttl_epoch >= epoch
}

/// How `s` stands under `rules` at `now`, before any share is compared.
fn standing(s: &SegStats, now: u64, rules: &Rules) -> Standing {
    let reaped = s.dead >= s.total && s.shadowing == 0;
    if reaped
        || rules
            .early_drop
            .is_some_and(|epoch| dead_whole(s, now, epoch))
    {
        Standing::Dropped
    } else if s.sterile_in != 0
        && s.sterile_in == rules.reclaim_gen.saturating_add(1)
        && s.dead <= s.sterile_dead
    {
        // Merging it again would reclaim nothing (see `Rules::reclaim_gen`).
        Standing::Left
    } else if overdue(s, now, rules.max_lag_secs) {
        Standing::Overdue
    } else if dying_soon(s, now) {
        // Left to die whole.
        Standing::Left
    } else {
        Standing::Open
    }
}

/// Chooses among `sealed` segments. `full` merges every one that is not dropped; otherwise the
/// merge takes at most `max_merge_bytes` of input (at least one segment): the oldest
/// candidate, then overdue segments (longest overdue first), then the deadest, and leaves the
/// rest to the next merge. Drops are not bounded: they read nothing.
#[must_use]
pub fn select(
    sealed: &[u32],
    stats: &HashMap<u32, SegStats>,
    now: u64,
    rules: &Rules,
    full: bool,
) -> Selection {
    let Rules {
        dead_ratio,
        max_lag_secs,
        max_merge_bytes,
        idle_below,
        coalesce_below,
        ..
    } = *rules;
    let mut sel = Selection::default();
    // Small segments the rules below leave alone, that will not die by themselves.
    let mut small: Vec<u32> = Vec::new();
    // Each segment's standing, once (a segment without counters stands as an empty one).
    let judged: Vec<(u32, SegStats, Standing)> = sealed
        .iter()
        .map(|&id| {
            let s = stats.get(&id).copied().unwrap_or_default();
            (id, s, standing(&s, now, rules))
        })
        .collect();
    // The debt counts the segments a share rule may take: not those dropped now, resting, or
    // left to die whole (their dead bytes go without a merge or not at all).
    for (_, s, standing) in &judged {
        match standing {
            Standing::Dropped => {}
            Standing::Left => sel.kept = sel.kept.saturating_add(s.total),
            Standing::Overdue | Standing::Open => {
                sel.kept = sel.kept.saturating_add(s.total);
                sel.debt = sel.debt.saturating_add(reclaimable(s));
            }
        }
    }
    let pressed = !full && share_at_least(sel.debt, sel.kept, (PRESSURE_DEBT_PPM, 1_000_000));
    let pressed_share = dead_ratio_when(dead_ratio, true);
    for &(id, s, standing) in &judged {
        let dead_ratio = dead_ratio_when(dead_ratio, idle_below.is_some_and(|below| id < below));
        match standing {
            Standing::Dropped => sel.drop.push(id),
            _ if full => sel.merge.push(id),
            Standing::Left => {}
            Standing::Overdue => sel.merge.push(id),
            Standing::Open => {
                let r = reclaimable(&s);
                let pressed_in = pressed && r > 0 && r as f64 >= pressed_share * s.total as f64;
                if s.dead >= s.total || (s.dead > 0 && s.dead_share() >= dead_ratio) || pressed_in {
                    sel.merge.push(id);
                } else if s.total < coalesce_below && s.dies_by == ttl::NEVER {
                    small.push(id);
                }
            }
        }
    }
    // Housekeeping, so only when there is nothing else to merge: under churn the merges that
    // reclaim space come first, and a merge's small last output may yet be merged with them.
    if !full
        && sel.merge.is_empty()
        && small.len() >= COALESCE_MIN_SEGMENTS
        && small
            .iter()
            .map(|id| stats.get(id).map_or(0, |s| s.total))
            .sum::<u64>()
            >= coalesce_below
    {
        sel.merge.extend(small);
        sel.merge.sort_unstable();
    }
    if !full {
        let stat = |id: &u32| stats.get(id).copied().unwrap_or_default();
        sel.deferred = bound_merge(
            &mut sel.merge,
            &stat,
            |s| overdue(s, now, max_lag_secs),
            max_merge_bytes,
        );
    }
    sel
}

/// Keeps of `merge` at most `max_bytes` of input (at least one segment), in id order, and
/// returns the bytes it left out: the
/// oldest candidate first (lowest id: ids only grow, so every candidate reaches the front
/// eventually and none starves behind deadlier or overdue newcomers); then the overdue ones,
/// longest overdue first (the reclamation-lag bound); then the rest by dead share, deadest
/// first (compared as a cross product, exact in integers); ids break ties.
fn bound_merge(
    merge: &mut Vec<u32>,
    stat: &impl Fn(&u32) -> SegStats,
    overdue: impl Fn(&SegStats) -> bool,
    max_bytes: u64,
) -> u64 {
    let due = merge.iter().map(|id| stat(id).total).sum::<u64>();
    if due <= max_bytes {
        return 0;
    }
    let oldest = merge.iter().copied().min();
    let rank = |id: &u32| {
        let s = stat(id);
        if Some(*id) == oldest {
            (0, 0)
        } else if overdue(&s) {
            (1, s.oldest_expiry)
        } else {
            (2, 0)
        }
    };
    merge.sort_by(|a, b| {
        let (sa, sb) = (stat(a), stat(b));
        rank(a)
            .cmp(&rank(b))
            .then_with(|| {
                (u128::from(sb.dead) * u128::from(sa.total.max(1)))
                    .cmp(&(u128::from(sa.dead) * u128::from(sb.total.max(1))))
            })
            .then(a.cmp(b))
    });
    let mut input = 0u64;
    let mut keep = 0;
    for id in merge.iter() {
        input = input.saturating_add(stat(id).total);
        if keep > 0 && input > max_bytes {
            break;
        }
        keep += 1;
    }
    merge.truncate(keep);
    merge.sort_unstable();
    due.saturating_sub(merge.iter().map(|id| stat(id).total).sum::<u64>())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn rules(dead_ratio: f64, max_lag_secs: u64, max_merge_bytes: u64) -> Rules {
        Rules {
            dead_ratio,
            max_lag_secs,
            max_merge_bytes,
            early_drop: None,
            idle_below: None,
            reclaim_gen: 0,
            coalesce_below: 0,
        }
    }

    #[test]
    fn small_lasting_segments_are_merged_together_once_there_are_enough() {
        let half = 1_000;
        let small = |total: u64| st(total, 0, 0, ttl::NEVER);
        let rules = Rules {
            coalesce_below: half,
            ..rules(0.5, 600, u64::MAX)
        };
        let mut m = HashMap::new();
        for id in 1..=7 {
            m.insert(id, small(200));
        }
        let ids: Vec<u32> = (1..=7).collect();
        assert!(select(&ids, &m, 2000, &rules, false).is_empty(), "seven");
        m.insert(8, small(200));
        let ids: Vec<u32> = (1..=8).collect();
        assert_eq!(select(&ids, &m, 2000, &rules, false).merge, ids, "eight");
        // Eight, but less than half a segment in all: not yet.
        let mut tiny = HashMap::new();
        for id in 1..=8 {
            tiny.insert(id, small(100));
        }
        assert!(select(&ids, &tiny, 2000, &rules, false).is_empty());
        // Not while another segment is due for a merge (it goes alone).
        m.insert(9, st(100, 60, 0, ttl::NEVER));
        let with_due: Vec<u32> = (1..=9).collect();
        assert_eq!(select(&with_due, &m, 2000, &rules, false).merge, vec![9]);
        m.remove(&9);
        // A segment of half the size or more, or one whose records all expire, is not small.
        m.insert(8, small(half));
        assert!(select(&ids, &m, 2000, &rules, false).is_empty());
        m.insert(
            8,
            SegStats {
                dies_by: 5_000,
                ..small(200)
            },
        );
        assert!(select(&ids, &m, 2000, &rules, false).is_empty());
        // Off when 0.
        m.insert(8, small(200));
        let off = Rules {
            coalesce_below: 0,
            ..rules
        };
        assert!(select(&ids, &m, 2000, &off, false).is_empty());
    }

    fn st(total: u64, dead: u64, shadowing: u64, oldest: u64) -> SegStats {
        SegStats {
            total,
            dead,
            shadowing,
            oldest_expiry: oldest,
            dies_by: ttl::NEVER,
            ..SegStats::default()
        }
    }

    #[test]
    fn a_hint_is_worth_it_out_of_key_order_or_up_to_an_eighth_of_its_segment() {
        assert!(hint_worth(100, 800, true, false));
        assert!(!hint_worth(100, 799, true, false));
        assert!(hint_worth(100, 799, false, false), "out of key order");
        assert!(hint_worth(100, 799, true, true), "the test hook");
        assert!(hint_worth(0, 0, true, false), "nothing to list");
        assert!(
            !hint_worth(u64::MAX / 4, u64::MAX / 2, true, false),
            "no overflow"
        );
        assert!(few_runs(0, 0));
        assert!(few_runs(2, 128));
        assert!(!few_runs(3, 128));
        assert!(!few_runs(u64::MAX / 2, u64::MAX / 4), "no overflow");
    }

    #[test]
    fn short_lived_means_half_the_bytes_due_within_the_horizon_in_the_current_epoch() {
        let now = 1_000;
        assert!(expires_soon(now + SHORT_LIVED_SECS, now));
        assert!(!expires_soon(now + SHORT_LIVED_SECS + 1, now));
        assert!(!expires_soon(ttl::NEVER, now));
        let seg = |total: u64, soon: u64, ttl_epoch: u64| SegStats {
            total,
            soon,
            ttl_epoch,
            ..SegStats::default()
        };
        assert!(short_lived(&seg(100, 50, 2), 2));
        assert!(!short_lived(&seg(100, 49, 2), 2), "less than half");
        assert!(
            !short_lived(&seg(100, 100, 1), 2),
            "counted before a default changed"
        );
        assert!(!short_lived(&seg(0, 0, 2), 2), "empty");
    }

    #[test]
    fn a_segment_dead_whole_is_dropped_before_the_reaper_frees_it_only_when_allowed() {
        let now = 10_000;
        let epoch = 3;
        let seg = |dies_by: u64, shadowing: u64, ttl_epoch: u64| SegStats {
            dies_by,
            shadowing,
            ttl_epoch,
            ..st(100, 10, 0, ttl::NEVER)
        };
        let mut m = HashMap::new();
        m.insert(1, seg(now, 0, epoch)); // every live record expired at `now`: drop
        m.insert(2, seg(now - 100, 0, epoch + 1)); // counted in a later epoch: drop
        m.insert(3, seg(now + 1, 0, epoch)); // one record still live: wait
        m.insert(4, seg(now - 100, 1, epoch)); // shadows an older version: never early
        m.insert(5, seg(now - 100, 0, epoch - 1)); // counted before a default change: wait
        m.insert(6, seg(ttl::NEVER, 0, epoch)); // a record that never expires
        m.insert(7, seg(now - 100, 0, u64::MAX)); // no epoch known: wait for the reaper
        let ids = [1, 2, 3, 4, 5, 6, 7];
        let early = Rules {
            early_drop: Some(epoch),
            ..rules(0.5, 600, u64::MAX)
        };
        assert_eq!(select(&ids, &m, now, &early, false).drop, vec![1, 2]);
        // Without permission (an expiry subscriber) only what the reaper freed goes.
        assert!(select(&ids, &m, now, &rules(0.5, 600, u64::MAX), false)
            .drop
            .is_empty());
        for id in ids {
            assert_eq!(dead_whole(&m[&id], now, epoch), id <= 2, "segment {id}");
        }
    }

    #[test]
    fn a_segment_about_to_die_whole_waits_for_the_drop() {
        let now = 10_000;
        let dying = |dies_by: u64, shadowing: u64| SegStats {
            dies_by,
            shadowing,
            ..st(100, 60, 0, ttl::NEVER)
        };
        let mut m = HashMap::new();
        m.insert(1, dying(now + 5, 0)); // 60 % dead, all dead in 5 s: wait
        m.insert(2, dying(now + DYING_HORIZON_SECS + 1, 0)); // too far off: merge
        m.insert(3, dying(now + 5, 1)); // shadows something: can never be dropped: merge
        m.insert(4, dying(now - 3, 0)); // overdue but within the reaper's grace: wait
        m.insert(5, dying(now - REAP_GRACE_SECS - 1, 0)); // overdue past grace: merge
        m.insert(6, dying(ttl::NEVER, 0)); // some record never expires: merge
        let sel = select(
            &[1, 2, 3, 4, 5, 6],
            &m,
            now,
            &rules(0.5, 600, u64::MAX),
            false,
        );
        assert!(sel.drop.is_empty());
        assert_eq!(sel.merge, vec![2, 3, 5, 6]);
        // Dead at last: dropped, deferral or not.
        m.insert(
            1,
            SegStats {
                dead: 100,
                ..dying(now + 5, 0)
            },
        );
        assert_eq!(
            select(&[1], &m, now, &rules(0.5, 600, u64::MAX), false).drop,
            vec![1]
        );
        // A full compaction merges everything it does not drop.
        assert_eq!(
            select(&[4], &m, now, &rules(0.5, 600, u64::MAX), true).merge,
            vec![4]
        );
        // The lag bound: expired bytes older than the lag are purged even from a segment
        // that waits to die.
        m.insert(
            7,
            SegStats {
                oldest_expiry: now - 700,
                ..dying(now + 5, 0)
            },
        );
        assert_eq!(
            select(&[7], &m, now, &rules(0.5, 600, u64::MAX), false).merge,
            vec![7]
        );
    }

    #[test]
    fn a_merge_takes_a_bounded_input_oldest_then_overdue_then_deadest() {
        let now = 10_000;
        let mut m = HashMap::new();
        m.insert(1, st(100, 60, 0, ttl::NEVER)); // 60 % dead
        m.insert(2, st(100, 90, 0, ttl::NEVER)); // 90 %
        m.insert(3, st(100, 75, 0, ttl::NEVER)); // 75 %
        m.insert(4, st(100, 10, 0, now - 700)); // overdue, 10 %
        m.insert(5, st(100, 100, 0, ttl::NEVER)); // dead: dropped, not counted
        let ids = [1, 2, 3, 4, 5];
        let sel = select(&ids, &m, now, &rules(0.5, 600, 250), false);
        assert_eq!(sel.drop, vec![5]);
        assert_eq!(
            sel.merge,
            vec![1, 4],
            "the oldest, then overdue, in id order"
        );
        assert_eq!(sel.deferred, 200, "2 and 3 wait for the next merge");
        assert_eq!(
            select(&ids, &m, now, &rules(0.5, 600, 300), false).merge,
            vec![1, 2, 4]
        );
        // At least one segment, however small the bound.
        assert_eq!(
            select(&ids, &m, now, &rules(0.5, 600, 1), false).merge,
            vec![1]
        );
        // After the oldest, longest overdue first, whatever the dead share.
        m.insert(6, st(100, 90, 0, now - 650));
        m.insert(7, st(100, 5, 0, now - 900));
        assert_eq!(
            select(&[3, 4, 6, 7], &m, now, &rules(0.5, 600, 300), false).merge,
            vec![3, 4, 7]
        );
        // Within the bound, or a full compaction: everything.
        let sel = select(&ids, &m, now, &rules(0.5, 600, 400), false);
        assert_eq!((sel.merge, sel.deferred), (vec![1, 2, 3, 4], 0));
        assert_eq!(
            select(&ids, &m, now, &rules(0.5, 600, 1), true).merge,
            vec![1, 2, 3, 4]
        );
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
        m.insert(7, st(10_000, 0, 0, ttl::NEVER)); // all live: the store is not under pressure
        let ids = [1, 2, 3, 4, 5, 6, 7];
        let sel = select(&ids, &m, 2000, &rules(0.5, 600, u64::MAX), false);
        assert_eq!(sel.drop, vec![1]);
        assert_eq!(sel.merge, vec![2, 3, 5]);
        let full = select(&ids, &m, 2000, &rules(0.5, 600, u64::MAX), true);
        assert_eq!(full.merge, vec![2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn an_idle_store_merges_at_half_the_dead_share() {
        assert_eq!(dead_ratio_when(0.5, false), 0.5);
        assert_eq!(dead_ratio_when(0.5, true), 0.25);
        assert_eq!(dead_ratio_when(0.0, true), 0.0);
        let mut m = HashMap::new();
        m.insert(1, st(100, 48, 0, ttl::NEVER)); // just below the share writers merge at
        m.insert(2, st(100, 25, 0, ttl::NEVER)); // at the idle share
        m.insert(3, st(100, 24, 0, ttl::NEVER)); // below it
        m.insert(4, st(100, 48, 0, ttl::NEVER)); // written since the store went idle
        m.insert(5, st(4000, 0, 0, ttl::NEVER)); // all live: the store is not under pressure
        let ids = [1, 2, 3, 4, 5];
        let busy = rules(0.5, 600, u64::MAX);
        assert!(select(&ids, &m, 2000, &busy, false).is_empty());
        let idle = Rules {
            idle_below: Some(4),
            ..rules(0.5, 600, u64::MAX)
        };
        assert_eq!(select(&ids, &m, 2000, &idle, false).merge, vec![1, 2]);
    }

    #[test]
    fn a_debt_of_six_percent_merges_from_the_idle_share() {
        let mut m = HashMap::new();
        m.insert(1, st(100, 26, 0, ttl::NEVER));
        m.insert(2, st(100, 4, 0, ttl::NEVER)); // below the idle share
        m.insert(3, st(100, 0, 0, ttl::NEVER));
        m.insert(4, st(100, 0, 0, ttl::NEVER));
        m.insert(5, st(100, 0, 0, ttl::NEVER));
        let busy = rules(0.5, 600, u64::MAX);
        // 30 of 500 bytes reclaimable: just at the pressure share.
        let ids = [1, 2, 3, 4, 5];
        assert_eq!(debt_ppm(30, 500), PRESSURE_DEBT_PPM);
        let sel = select(&ids, &m, 2000, &busy, false);
        assert_eq!((sel.merge, sel.debt, sel.kept), (vec![1], 30, 500));
        // One dead byte fewer: the usual share, which none of them reaches.
        m.insert(2, st(100, 3, 0, ttl::NEVER));
        assert!(select(&ids, &m, 2000, &busy, false).is_empty());
        // The share counts the sealed segments given, not every segment the map knows.
        m.insert(2, st(100, 4, 0, ttl::NEVER));
        m.insert(6, st(100, 0, 0, ttl::NEVER));
        assert!(select(&[1, 2, 3, 4, 5, 6], &m, 2000, &busy, false).is_empty());
        assert_eq!(select(&ids, &m, 2000, &busy, false).merge, vec![1]);
    }

    /// Found by a review of the first pressure rule: the share counted segments the same
    /// selection drops unread (and ones left to die whole) as debt, so a store whose remaining
    /// segments were barely dead merged one at the idle share.
    #[test]
    fn pressure_counts_only_segments_a_share_rule_may_take() {
        let mut m = HashMap::new();
        m.insert(1, st(100, 100, 0, ttl::NEVER)); // every byte dead: dropped unread
        m.insert(2, st(100, 100, 0, ttl::NEVER));
        m.insert(3, st(100, 25, 0, ttl::NEVER)); // below the usual share
        for id in 4..=7 {
            m.insert(id, st(100, 0, 0, ttl::NEVER));
        }
        let ids = [1, 2, 3, 4, 5, 6, 7];
        let busy = rules(0.5, 600, u64::MAX);
        let sel = select(&ids, &m, 2000, &busy, false);
        assert_eq!(sel.drop, vec![1, 2]);
        assert!(
            sel.merge.is_empty(),
            "25 of 500 bytes dead: {:?}",
            sel.merge
        );
        assert_eq!((sel.debt, sel.kept), (25, 500));
        // Left to die whole within the horizon: on disk, but no debt (25 of 700 bytes).
        let dying = SegStats {
            dies_by: 2010,
            ..st(100, 49, 0, ttl::NEVER)
        };
        m.insert(1, dying);
        m.insert(2, dying);
        let sel = select(&ids, &m, 2000, &busy, false);
        assert!(sel.is_empty(), "{sel:?}");
        assert_eq!((sel.debt, sel.kept), (25, 700));
        // Counted, the same two would make it 123 of 700 bytes, and 3 would be merged.
        m.insert(1, st(100, 49, 0, ttl::NEVER));
        m.insert(2, st(100, 49, 0, ttl::NEVER));
        let sel = select(&ids, &m, 2000, &busy, false);
        assert_eq!(sel.merge, vec![1, 2, 3]);
    }

    /// Found by a review: no-resurrection markers a merge carried over count as dead, but a
    /// merge keeps them while the versions they hide may be on disk, so counting them a
    /// segment a quarter markers was merged under pressure at every expiry in it.
    #[test]
    fn kept_markers_do_not_count_as_pressure_nor_as_a_share_under_it() {
        let mut m = HashMap::new();
        // 40 of 100 bytes dead, 30 of them markers: 10 reclaimable.
        let markers = SegStats {
            markers: 30,
            ..st(100, 40, 5, ttl::NEVER)
        };
        m.insert(1, markers);
        m.insert(2, st(100, 6, 0, ttl::NEVER));
        m.insert(3, st(100, 1, 0, ttl::NEVER));
        let busy = rules(0.5, 600, u64::MAX);
        // 17 of 300 bytes reclaimable: under 6 %, no pressure (counting markers: 47, 16 %).
        assert!(select(&[1, 2, 3], &m, 2000, &busy, false).is_empty());
        // Under pressure, the marker segment's share is its reclaimable bytes' share.
        m.insert(3, st(100, 45, 0, ttl::NEVER));
        assert_eq!(reclaimable(&markers), 10);
        assert_eq!(select(&[1, 2, 3], &m, 2000, &busy, false).merge, vec![3]);
        // Half dead by the usual rule, markers and all: merged as before.
        m.insert(
            1,
            SegStats {
                markers: 30,
                ..st(100, 50, 5, ttl::NEVER)
            },
        );
        assert_eq!(select(&[1, 2, 3], &m, 2000, &busy, false).merge, vec![1, 3]);
    }

    #[test]
    fn writers_are_paced_in_proportion_to_the_debt_over_the_pressure_share() {
        assert_eq!(pace_ns(1000, 0), 0);
        assert_eq!(pace_ns(1000, PRESSURE_DEBT_PPM), 0);
        let half = (PRESSURE_DEBT_PPM + PACE_FULL_DEBT_PPM) / 2;
        assert_eq!(pace_ns(1000, half), 1000 * PACE_NS_PER_BYTE / 2);
        assert_eq!(pace_ns(1000, PACE_FULL_DEBT_PPM), 1000 * PACE_NS_PER_BYTE);
        assert_eq!(pace_ns(1000, 1_000_000), 1000 * PACE_NS_PER_BYTE, "capped");
        assert_eq!(pace_ns(u64::MAX, 1_000_000), u64::MAX, "no overflow");
        assert_eq!(debt_ppm(1, 0), 0);
        assert_eq!(debt_ppm(u64::MAX, u64::MAX), 1_000_000);
    }

    #[test]
    fn an_output_that_reclaimed_nothing_waits_for_the_next_reclaim() {
        let mut m = HashMap::new();
        // All markers still needed, written by a merge that reclaimed nothing in generation 4.
        let sterile = SegStats {
            sterile_in: 5,
            sterile_dead: 100,
            ..st(100, 100, 7, ttl::NEVER)
        };
        m.insert(1, sterile);
        // More of a sterile segment died since (an expiry): worth merging again.
        m.insert(
            3,
            SegStats {
                sterile_in: 5,
                sterile_dead: 40,
                ..st(100, 60, 7, 1000)
            },
        );
        m.insert(2, st(100, 60, 0, ttl::NEVER));
        let at = |reclaim_gen| Rules {
            reclaim_gen,
            ..rules(0.5, 600, u64::MAX)
        };
        assert_eq!(
            select(&[1, 2, 3], &m, 2000, &at(4), false).merge,
            vec![2, 3]
        );
        // Something was reclaimed since: it may be worth merging again.
        assert_eq!(select(&[1, 2], &m, 2000, &at(5), false).merge, vec![1, 2]);
        // A full merge takes it whatever.
        assert_eq!(select(&[1, 2], &m, 2000, &at(4), true).merge, vec![1, 2]);
        // Never marked: merged as before.
        m.insert(1, st(100, 100, 7, ttl::NEVER));
        assert_eq!(select(&[1, 2], &m, 2000, &at(4), false).merge, vec![1, 2]);
    }

    #[test]
    fn no_candidate_starves_behind_deadlier_newcomers() {
        // Segment 1 is overdue and 10 % dead, segment 2 not overdue and 55 % dead; before every
        // merge, four segments' worth of deadlier candidates (overdue or not) come up. Both
        // must be merged within a few merges.
        let lag = 600;
        let now = 10_000;
        for newcomers_overdue in [false, true] {
            let mut m = HashMap::new();
            m.insert(1u32, st(100, 10, 0, now - lag - 1));
            m.insert(2u32, st(100, 55, 0, ttl::NEVER));
            let mut next = 3u32;
            let mut merged = HashSet::new();
            for _ in 0..3 {
                for _ in 0..4 {
                    let oldest = if newcomers_overdue {
                        now - lag
                    } else {
                        ttl::NEVER
                    };
                    m.insert(next, st(100, 90, 0, oldest));
                    next += 1;
                }
                let mut ids: Vec<u32> = m.keys().copied().collect();
                ids.sort_unstable();
                let sel = select(&ids, &m, now, &rules(0.5, lag, 400), false);
                for id in &sel.merge {
                    m.remove(id);
                    merged.insert(*id);
                }
            }
            assert!(
                merged.contains(&1) && merged.contains(&2),
                "newcomers overdue: {newcomers_overdue}, merged {merged:?}"
            );
        }
    }
}
