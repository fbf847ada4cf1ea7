//! The history behind the all-versions-and-deletes change feed (DESIGN.md §16.2): what a
//! container with a change feed retention writes beside each item, in the same log batch.
//!
//! The history keyspace `__feed:{id}` (default TTL "never", so own TTLs apply) holds:
//! - *change records* under `k ++ order key` (see [`OrderKey`]), own TTL = the retention: one
//!   per create, replace (upsert, patch) and delete, and one per *expired predecessor*: a
//!   write that finds the item's previous version expired records that expiry, because the
//!   anchor that described it is overwritten;
//! - *anchors* under `a ++ item key`, no TTL: the item's newest version (its sequence number,
//!   `_ts` and own TTL), from which its expiry second is computed with the container's TTL
//!   history whenever a page is read. Deleted with the item; an anchor whose expiry left the
//!   retention window is deleted by the next page read.
//!
//! A change record's value: kind u8 (1 create, 2 replace, 3 delete, 4 expiry) | lsn u64 |
//! crts u64 | previous lsn u64 (0: none) | item key length u32 | item key | the item as
//! stored (creates and replaces). An anchor's: lsn u64 | `_ts` u64 | own TTL i32 (wire form).
//! Integers little-endian.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::engine::Keyspace;
use crate::engine::{KeyspaceView, PlannedOp};
use crate::error::{Error, Result};
use crate::ttl::{self, ItemTtl, TtlChange};

/// A container's history keyspace and retention window (seconds).
#[derive(Debug, Clone)]
pub(crate) struct History {
    pub(crate) ks: Keyspace,
    pub(crate) retention: u64,
}

/// Shared by every handle of one container: `None` while the container has no retention.
/// Item writes hold it for reading, so turning retention on or off waits for them.
pub(crate) type HistorySlot = Arc<RwLock<Option<History>>>;

pub(crate) const KIND_CREATE: u8 = 1;
pub(crate) const KIND_REPLACE: u8 = 2;
pub(crate) const KIND_DELETE: u8 = 3;
pub(crate) const KIND_EXPIRY: u8 = 4;

/// A change's place in the all-versions order: (second, class, lsn, sub), compared in that
/// order (DESIGN.md §16.2):
/// - a write: `(_ts, 1, its lsn, 1)`;
/// - the expiry of a version at second `E`: `(E, 0, the version's lsn, 0)`: at the start of
///   its second, before that second's writes (none of which can have found it live);
/// - an expiry *caused* by a default-TTL change made in second `E` (the version was not
///   expired under the settings before it): `(E, 2, lsn, 0)`, after that second's writes, or
///   `(E, 1, w, 0)` just before the write `w` of that second which found it expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct OrderKey {
    pub(crate) secs: u64,
    pub(crate) class: u8,
    pub(crate) lsn: u64,
    pub(crate) sub: u8,
}

impl OrderKey {
    pub(crate) const ZERO: OrderKey = OrderKey {
        secs: 0,
        class: 0,
        lsn: 0,
        sub: 0,
    };

    pub(crate) fn write(ts: u64, lsn: u64) -> Self {
        OrderKey {
            secs: ts,
            class: 1,
            lsn,
            sub: 1,
        }
    }

    /// The change record key: `k` ++ the order key, big-endian, so key order is feed order.
    pub(crate) fn record_key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(19);
        k.push(b'k');
        k.extend_from_slice(&self.secs.to_be_bytes());
        k.push(self.class);
        k.extend_from_slice(&self.lsn.to_be_bytes());
        k.push(self.sub);
        k
    }

    pub(crate) fn from_record_key(k: &[u8]) -> Option<Self> {
        if k.len() != 19 || k.first() != Some(&b'k') {
            return None;
        }
        Some(OrderKey {
            secs: u64::from_be_bytes(k.get(1..9)?.try_into().ok()?),
            class: *k.get(9)?,
            lsn: u64::from_be_bytes(k.get(10..18)?.try_into().ok()?),
            sub: *k.get(18)?,
        })
    }
}

/// The anchor key of an item key.
pub(crate) fn anchor_key(item_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(item_key.len() + 1);
    k.push(b'a');
    k.extend_from_slice(item_key);
    k
}

/// An item's newest version as its anchor records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub(crate) lsn: u64,
    pub(crate) ts: u64,
    pub(crate) ttl: ItemTtl,
}

impl Anchor {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(20);
        v.extend_from_slice(&self.lsn.to_le_bytes());
        v.extend_from_slice(&self.ts.to_le_bytes());
        v.extend_from_slice(&self.ttl.to_wire().to_le_bytes());
        v
    }

    pub(crate) fn decode(v: &[u8]) -> Option<Self> {
        if v.len() != 20 {
            return None;
        }
        Some(Anchor {
            lsn: u64::from_le_bytes(v.get(0..8)?.try_into().ok()?),
            ts: u64::from_le_bytes(v.get(8..16)?.try_into().ok()?),
            ttl: ItemTtl::from_wire(i32::from_le_bytes(v.get(16..20)?.try_into().ok()?))?,
        })
    }

    /// The second this version expires at (or [`ttl::NEVER`]).
    pub(crate) fn expires_at(&self, history: &[TtlChange]) -> u64 {
        ttl::expires_at(self.ts, self.ttl, history)
    }

    /// Where this version's expiry at second `e` sits in the feed order; `superseder` is the
    /// write (second, lsn) that found it expired, if any.
    pub(crate) fn expiry_key(
        &self,
        e: u64,
        history: &[TtlChange],
        superseder: Option<(u64, u64)>,
    ) -> OrderKey {
        if !caused_by_change(self, e, history) {
            return OrderKey {
                secs: e,
                class: 0,
                lsn: self.lsn,
                sub: 0,
            };
        }
        match superseder {
            Some((ts, lsn)) if ts == e => OrderKey {
                secs: e,
                class: 1,
                lsn,
                sub: 0,
            },
            _ => OrderKey {
                secs: e,
                class: 2,
                lsn: self.lsn,
                sub: 0,
            },
        }
    }
}

/// True if the version's expiry at `e` was caused by a default-TTL change made in second `e`:
/// under the settings before that change it would not have expired by then.
fn caused_by_change(a: &Anchor, e: u64, history: &[TtlChange]) -> bool {
    let Some(i) = history.iter().position(|c| c.since == e) else {
        return false;
    };
    i > 0 && ttl::expires_at(a.ts, a.ttl, history.get(..i).unwrap_or_default()) > e
}

/// A change record's content.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub(crate) kind: u8,
    pub(crate) lsn: u64,
    pub(crate) crts: u64,
    pub(crate) prev: Option<u64>,
    pub(crate) item_key: Vec<u8>,
    pub(crate) doc: Vec<u8>,
}

impl Record {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(29 + self.item_key.len() + self.doc.len());
        v.push(self.kind);
        v.extend_from_slice(&self.lsn.to_le_bytes());
        v.extend_from_slice(&self.crts.to_le_bytes());
        v.extend_from_slice(&self.prev.unwrap_or(0).to_le_bytes());
        v.extend_from_slice(
            &u32::try_from(self.item_key.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        v.extend_from_slice(&self.item_key);
        v.extend_from_slice(&self.doc);
        v
    }

    pub(crate) fn decode(v: &[u8]) -> Option<Self> {
        let kind = *v.first()?;
        if !(KIND_CREATE..=KIND_EXPIRY).contains(&kind) {
            return None;
        }
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(v.get(at..at + 8)?.try_into().ok()?))
        };
        let klen = u32::from_le_bytes(v.get(25..29)?.try_into().ok()?) as usize;
        let end = 29usize.checked_add(klen)?;
        Some(Record {
            kind,
            lsn: u64_at(1)?,
            crts: u64_at(9)?,
            prev: Some(u64_at(17)?).filter(|p| *p != 0),
            item_key: v.get(29..end)?.to_vec(),
            doc: v.get(end..)?.to_vec(),
        })
    }
}

/// Adds the history of `ops` (item writes on the container's keyspace, in order) to the same
/// write: per put a change record and the new anchor (and the record of an expired
/// predecessor), per delete of a live item a change record and the anchor's removal. Runs in
/// the plan, under the log mutex, at the write's instant; `ttl_history` is the container's.
pub(crate) fn add_history(
    ops: Vec<PlannedOp>,
    items: &KeyspaceView<'_, '_>,
    hist: &KeyspaceView<'_, '_>,
    retention: u64,
    ttl_history: &[TtlChange],
) -> Result<Vec<(bool, PlannedOp)>> {
    let ts = items.now_ms() / 1000;
    let keep = ItemTtl::Seconds(
        u32::try_from(retention)
            .unwrap_or(u32::MAX)
            .min(ttl::MAX_TTL_SECS),
    );
    // The first op's sequence number: a batch header comes first whenever history is added.
    let base = items.next_seq() + 1;
    let mut out: Vec<(bool, PlannedOp)> = Vec::with_capacity(ops.len() * 3);
    // Within this write: key → live after the earlier ops, and its anchor.
    let mut live: HashMap<Vec<u8>, bool> = HashMap::new();
    let mut anchors: HashMap<Vec<u8>, Option<Anchor>> = HashMap::new();
    for (key, put) in ops {
        let was_live = match live.get(&key) {
            Some(l) => *l,
            None => items.exists(&key),
        };
        let prev = match anchors.get(&key) {
            Some(a) => *a,
            None => read_anchor(hist, &key)?,
        };
        let lsn = base + out.len() as u64;
        let is_put = put.is_some();
        let ttl_of_put = put.as_ref().map(|(_, t)| *t);
        let doc = put.as_ref().map(|(v, _)| v.clone()).unwrap_or_default();
        out.push((false, (key.clone(), put)));
        let akey = anchor_key(&key);
        if is_put {
            if !was_live {
                if let Some(a) = prev {
                    let e = a.expires_at(ttl_history);
                    if e != ttl::NEVER && e <= ts {
                        let k = a.expiry_key(e, ttl_history, Some((ts, lsn)));
                        let rec = Record {
                            kind: KIND_EXPIRY,
                            lsn: a.lsn,
                            crts: e,
                            prev: Some(a.lsn),
                            item_key: key.clone(),
                            doc: Vec::new(),
                        };
                        out.push((true, (k.record_key(), Some((rec.encode(), keep)))));
                    }
                }
            }
            let rec = Record {
                kind: if was_live { KIND_REPLACE } else { KIND_CREATE },
                lsn,
                crts: ts,
                prev: if was_live { prev.map(|a| a.lsn) } else { None },
                item_key: key.clone(),
                doc,
            };
            out.push((
                true,
                (
                    OrderKey::write(ts, lsn).record_key(),
                    Some((rec.encode(), keep)),
                ),
            ));
            let anchor = Anchor {
                lsn,
                ts,
                ttl: ttl_of_put.unwrap_or_default(),
            };
            out.push((true, (akey, Some((anchor.encode(), ItemTtl::Inherit)))));
            anchors.insert(key.clone(), Some(anchor));
            live.insert(key, true);
        } else {
            if !was_live {
                // A delete of an absent item changes nothing the feed reports.
                continue;
            }
            let rec = Record {
                kind: KIND_DELETE,
                lsn,
                crts: ts,
                prev: prev.map(|a| a.lsn),
                item_key: key.clone(),
                doc: Vec::new(),
            };
            out.push((
                true,
                (
                    OrderKey::write(ts, lsn).record_key(),
                    Some((rec.encode(), keep)),
                ),
            ));
            if prev.is_some() {
                out.push((true, (akey, None)));
            }
            anchors.insert(key.clone(), None);
            live.insert(key, false);
        }
    }
    Ok(out)
}

fn read_anchor(hist: &KeyspaceView<'_, '_>, item_key: &[u8]) -> Result<Option<Anchor>> {
    match hist.get(&anchor_key(item_key))? {
        None => Ok(None),
        Some(v) => Anchor::decode(&v)
            .map(Some)
            .ok_or_else(|| Error::BadRequest("a change feed anchor is damaged".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_keys_sort_as_encoded() {
        let keys = [
            OrderKey {
                secs: 5,
                class: 0,
                lsn: 9,
                sub: 0,
            },
            OrderKey {
                secs: 5,
                class: 1,
                lsn: 3,
                sub: 0,
            },
            OrderKey::write(5, 3),
            OrderKey::write(5, 300),
            OrderKey {
                secs: 5,
                class: 2,
                lsn: 1,
                sub: 0,
            },
            OrderKey {
                secs: 6,
                class: 0,
                lsn: 0,
                sub: 0,
            },
        ];
        for w in keys.windows(2) {
            assert!(w[0] < w[1]);
            assert!(w[0].record_key() < w[1].record_key());
        }
        for k in keys {
            assert_eq!(OrderKey::from_record_key(&k.record_key()), Some(k));
        }
        assert_eq!(OrderKey::from_record_key(b"k12"), None);
    }

    #[test]
    fn records_and_anchors_round_trip_and_refuse_damage() {
        let r = Record {
            kind: KIND_REPLACE,
            lsn: 7,
            crts: 1_700_000_000,
            prev: Some(3),
            item_key: b"\x02pk\x00id".to_vec(),
            doc: br#"{"id":"id"}"#.to_vec(),
        };
        assert_eq!(Record::decode(&r.encode()), Some(r.clone()));
        let bytes = r.encode();
        for cut in 0..29 {
            assert_eq!(Record::decode(&bytes[..cut]), None);
        }
        assert_eq!(Record::decode(&[9u8; 40]), None);
        let a = Anchor {
            lsn: 1,
            ts: 2,
            ttl: ItemTtl::Seconds(30),
        };
        assert_eq!(Anchor::decode(&a.encode()), Some(a));
        assert_eq!(Anchor::decode(&a.encode()[..19]), None);
    }

    #[test]
    fn an_expiry_caused_by_a_default_change_sorts_after_that_seconds_writes() {
        let h = vec![
            TtlChange {
                since: 0,
                default: crate::ttl::DefaultTtl::Off,
            },
            TtlChange {
                since: 100,
                default: crate::ttl::DefaultTtl::Seconds(10),
            },
        ];
        let a = Anchor {
            lsn: 4,
            ts: 50,
            ttl: ItemTtl::Inherit,
        };
        let e = a.expires_at(&h);
        assert_eq!(e, 100);
        assert_eq!(a.expiry_key(e, &h, None).class, 2);
        assert_eq!(
            a.expiry_key(e, &h, Some((100, 9))),
            OrderKey {
                secs: 100,
                class: 1,
                lsn: 9,
                sub: 0
            }
        );
        // Own TTL: expired at 60 whatever the change did.
        let own = Anchor {
            lsn: 4,
            ts: 50,
            ttl: ItemTtl::Seconds(10),
        };
        let h2 = vec![
            TtlChange {
                since: 0,
                default: crate::ttl::DefaultTtl::NeverExpire,
            },
            TtlChange {
                since: 60,
                default: crate::ttl::DefaultTtl::Seconds(5),
            },
        ];
        assert_eq!(own.expires_at(&h2), 60);
        assert_eq!(own.expiry_key(60, &h2, None).class, 0);
    }
}
