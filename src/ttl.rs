//! TTL policy and expiry maths (`docs/contract.md` §2).
//!
//! An item's expiry is a pure function of three things that are all durable: its write second
//! `ts`, its own TTL, and the keyspace's *history* of default-TTL settings. Reads evaluate that
//! function against one frozen `now`, so the answer never depends on whether the background purge
//! has run, and because the history is kept (not just the current setting) an item that expired
//! under an earlier setting stays expired after the setting changes: expiry is final.

use serde::{Deserialize, Serialize};

/// Largest TTL in seconds (`i32::MAX`, as in Azure Cosmos DB).
pub const MAX_TTL_SECS: u32 = 2_147_483_647;

/// A never-expiring deadline.
pub const NEVER: u64 = u64::MAX;

/// The default TTL of a keyspace or container (Cosmos `defaultTtl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum DefaultTtl {
    /// `defaultTtl` absent: nothing expires, not even items with their own `ttl`.
    #[default]
    Off,
    /// `defaultTtl: -1`: items expire only when they carry their own `ttl`.
    NeverExpire,
    /// `defaultTtl: n`: items without their own `ttl` expire `n` seconds after their last write.
    Seconds(u32),
}

impl DefaultTtl {
    /// The Cosmos JSON value: `None` for Off, `-1`, or `n`.
    #[must_use]
    pub fn to_json_value(self) -> Option<i64> {
        match self {
            DefaultTtl::Off => None,
            DefaultTtl::NeverExpire => Some(-1),
            DefaultTtl::Seconds(n) => Some(i64::from(n)),
        }
    }

    /// Checks the seconds are in `1..=2147483647`.
    pub(crate) fn is_valid(self) -> bool {
        match self {
            DefaultTtl::Seconds(n) => (1..=MAX_TTL_SECS).contains(&n),
            _ => true,
        }
    }
}

/// A TTL given explicitly on a write (`put_with_ttl`, an item's own `ttl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ttl {
    /// `ttl: -1`: never expires while the keyspace has TTL on.
    Never,
    /// `ttl: n`: expires `n` seconds after the write (when the keyspace has TTL on).
    Seconds(u32),
}

/// The TTL stored with a record: inherit the default, or the record's own.
///
/// On disk this is an `i32`: `0` inherit, `-1` never, `n > 0` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ItemTtl {
    /// No own TTL: the keyspace default applies.
    #[default]
    Inherit,
    /// Own TTL `-1`.
    Never,
    /// Own TTL of `n` seconds.
    Seconds(u32),
}

impl ItemTtl {
    /// The on-disk `i32` encoding.
    #[must_use]
    pub fn to_wire(self) -> i32 {
        match self {
            ItemTtl::Inherit => 0,
            ItemTtl::Never => -1,
            ItemTtl::Seconds(n) => i32::try_from(n.min(MAX_TTL_SECS)).unwrap_or(i32::MAX),
        }
    }

    /// Decodes the on-disk `i32`; `None` for values no writer produces.
    #[must_use]
    pub fn from_wire(v: i32) -> Option<Self> {
        match v {
            0 => Some(ItemTtl::Inherit),
            -1 => Some(ItemTtl::Never),
            n if n > 0 => Some(ItemTtl::Seconds(n.unsigned_abs())),
            _ => None,
        }
    }
}

impl From<Option<Ttl>> for ItemTtl {
    fn from(t: Option<Ttl>) -> Self {
        match t {
            None => ItemTtl::Inherit,
            Some(Ttl::Never) => ItemTtl::Never,
            Some(Ttl::Seconds(n)) => ItemTtl::Seconds(n),
        }
    }
}

/// One default-TTL setting and the second from which it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtlChange {
    /// Unix second at which this setting took effect.
    pub since: u64,
    /// The setting.
    pub default: DefaultTtl,
}

/// The deadline an item would have if `default` had always been in force.
#[must_use]
pub fn deadline_under(ts: u64, own: ItemTtl, default: DefaultTtl) -> u64 {
    let secs = match (default, own) {
        (DefaultTtl::Off, _)
        | (_, ItemTtl::Never)
        | (DefaultTtl::NeverExpire, ItemTtl::Inherit) => return NEVER,
        (_, ItemTtl::Seconds(m)) => m,
        (DefaultTtl::Seconds(n), ItemTtl::Inherit) => n,
    };
    ts.saturating_add(u64::from(secs))
}

/// The first Unix second at which an item written at `ts` with TTL `own` is expired, given the
/// keyspace's default-TTL `history` (sorted by `since`, non-empty), or [`NEVER`].
///
/// Setting `i` is in force over the closed interval `[since_i, since_{i+1}]`: both settings
/// count during the second of a change, so a reader that saw the item expired in that second
/// under the old setting can never see it alive again under the new one. The item is expired at
/// the first second, in any interval that overlaps its life, at which that interval's setting
/// says it is past its deadline. Later settings never undo an earlier expiry
/// (`docs/contract.md` §2 rule 7).
#[must_use]
pub fn expires_at(ts: u64, own: ItemTtl, history: &[TtlChange]) -> u64 {
    if let [only] = history {
        return deadline_under(ts, own, only.default);
    }
    // Skip settings whose interval ended before the write.
    let first = history.partition_point(|c| c.since <= ts).saturating_sub(1);
    let tail = history.get(first..).unwrap_or_default();
    for (i, change) in tail.iter().enumerate() {
        let end = tail.get(i + 1).map_or(NEVER, |next| next.since);
        let deadline = deadline_under(ts, own, change.default);
        if deadline == NEVER {
            continue;
        }
        let at = deadline.max(change.since).max(ts);
        if at <= end {
            return at;
        }
    }
    NEVER
}

/// The Cosmos 400 for an invalid TTL; `field` is `ttl` or `defaultTtl`, `shown` the value as
/// written. The one place this text lives (engine and document layer both use it).
pub(crate) fn invalid_ttl(field: &str, shown: &str) -> crate::error::Error {
    crate::error::Error::BadRequest(format!(
        "The input {field} '{shown}' is invalid. Ensure to provide a nonzero positive integer less \
         than or equal to '{MAX_TTL_SECS}', or '-1' which means never expire."
    ))
}

/// True when an item with deadline `expires_at` is expired at second `now`
/// (`docs/contract.md` §1: `_ts + e <= now_s`).
#[must_use]
pub fn is_expired(expires_at: u64, now: u64) -> bool {
    expires_at <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(changes: &[(u64, DefaultTtl)]) -> Vec<TtlChange> {
        changes
            .iter()
            .map(|&(since, default)| TtlChange { since, default })
            .collect()
    }

    #[test]
    fn matrix_of_spec_section_2() {
        use DefaultTtl::*;
        let ts = 1000;
        let cases = [
            (ItemTtl::Inherit, Off, NEVER),
            (ItemTtl::Inherit, NeverExpire, NEVER),
            (ItemTtl::Inherit, Seconds(10), 1010),
            (ItemTtl::Never, Off, NEVER),
            (ItemTtl::Never, NeverExpire, NEVER),
            (ItemTtl::Never, Seconds(10), NEVER),
            (ItemTtl::Seconds(20), Off, NEVER),
            (ItemTtl::Seconds(20), NeverExpire, 1020),
            (ItemTtl::Seconds(20), Seconds(10), 1020),
        ];
        for (own, default, want) in cases {
            assert_eq!(
                expires_at(ts, own, &h(&[(0, default)])),
                want,
                "{own:?} {default:?}"
            );
        }
    }

    #[test]
    fn turning_ttl_on_expires_old_items_at_the_change() {
        let hist = h(&[(0, DefaultTtl::Off), (500, DefaultTtl::Seconds(10))]);
        assert_eq!(expires_at(100, ItemTtl::Inherit, &hist), 500);
        assert_eq!(expires_at(495, ItemTtl::Inherit, &hist), 505);
    }

    #[test]
    fn expiry_is_final_when_ttl_is_turned_off_or_lengthened() {
        let hist = h(&[
            (0, DefaultTtl::Seconds(10)),
            (50, DefaultTtl::Off),
            (60, DefaultTtl::Seconds(1000)),
        ]);
        // Expired at 10 under the first setting; turning TTL off later does not undo it.
        assert_eq!(expires_at(0, ItemTtl::Inherit, &hist), 10);
        // Written at 45, deadline 55 under the first setting, but TTL was off from 50 to 60;
        // from 60 on the deadline is 45 + 1000.
        assert_eq!(expires_at(45, ItemTtl::Inherit, &hist), 1045);
    }

    #[test]
    fn the_second_of_a_change_counts_for_both_settings() {
        let hist = h(&[(0, DefaultTtl::Seconds(10)), (10, DefaultTtl::Off)]);
        assert_eq!(expires_at(0, ItemTtl::Inherit, &hist), 10);
        assert_eq!(expires_at(1, ItemTtl::Inherit, &hist), NEVER);
    }

    #[test]
    fn wire_round_trip() {
        for t in [
            ItemTtl::Inherit,
            ItemTtl::Never,
            ItemTtl::Seconds(1),
            ItemTtl::Seconds(MAX_TTL_SECS),
        ] {
            assert_eq!(ItemTtl::from_wire(t.to_wire()), Some(t));
        }
        assert_eq!(ItemTtl::from_wire(-2), None);
    }

    #[test]
    fn boundary_is_inclusive() {
        assert!(is_expired(10, 10));
        assert!(!is_expired(10, 9));
    }
}
