#![allow(dead_code)]
//! A plain model of one keyspace under the TTL rules (docs/contract.md §2), written without
//! any of `ttl.rs`: an item is dropped at the first event at which the setting in force says
//! `ts + e <= now`, and a drop is never undone. Tests call [`Model::settle`] (through the
//! helpers) at every event; between events nothing can change what a read returns, because the
//! clock only moves through [`Model::advance`].

use std::collections::BTreeMap;

use ebbdb::{DefaultTtl, Ttl};

/// One stored item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub value: Vec<u8>,
    pub ts: u64,
    pub ttl: Option<Ttl>,
}

/// The live items of one keyspace, its default TTL and the current second.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub items: BTreeMap<Vec<u8>, Item>,
    pub default: DefaultTtl,
    pub now: u64,
}

impl Model {
    /// A model at second `now` with default `default`.
    pub fn new(now: u64, default: DefaultTtl) -> Self {
        Self {
            items: BTreeMap::new(),
            default,
            now,
        }
    }

    /// The TTL in force for `it` under the current default.
    pub fn effective(&self, it: &Item) -> Option<u64> {
        match (self.default, it.ttl) {
            (DefaultTtl::Off, _) | (_, Some(Ttl::Never)) | (DefaultTtl::NeverExpire, None) => None,
            (_, Some(Ttl::Seconds(m))) => Some(u64::from(m)),
            (DefaultTtl::Seconds(n), None) => Some(u64::from(n)),
        }
    }

    /// Drops every item the current setting says is expired at `now`.
    pub fn settle(&mut self) {
        let now = self.now;
        let expired: Vec<Vec<u8>> = self
            .items
            .iter()
            .filter(|(_, it)| self.effective(it).is_some_and(|e| it.ts + e <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            self.items.remove(&k);
        }
    }

    /// A put at the current second.
    pub fn put(&mut self, k: Vec<u8>, v: Vec<u8>, ttl: Option<Ttl>) {
        self.items.insert(
            k,
            Item {
                value: v,
                ts: self.now,
                ttl,
            },
        );
        self.settle();
    }

    /// A delete; returns whether the key was live.
    pub fn delete(&mut self, k: &[u8]) -> bool {
        self.items.remove(k).is_some()
    }

    /// The clock moves `secs` forward.
    pub fn advance(&mut self, secs: u64) {
        self.now += secs;
        self.settle();
    }

    /// The clock moves to second `now` (never back).
    pub fn advance_to(&mut self, now: u64) {
        self.now = self.now.max(now);
        self.settle();
    }

    /// The default TTL changes now. Both settings count during this second: the old one was
    /// settled at this second before (by the event that moved the clock here), the new one is
    /// settled now.
    pub fn set_default(&mut self, d: DefaultTtl) {
        self.settle();
        self.default = d;
        self.settle();
    }

    /// Key → value of the live items.
    pub fn live(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.items
            .iter()
            .map(|(k, it)| (k.clone(), it.value.clone()))
            .collect()
    }
}
