//! Expiry: the timer wheel, the reaper that frees expired entries, and the background worker.
//!
//! Reads never depend on this module: they evaluate expiry themselves. The reaper exists to
//! free memory, to count expired bytes as dead for compaction, and to publish events. A timer
//! is a hint: when it fires, the reaper recomputes the entry's deadline from the current TTL
//! history and acts only if the entry is still the same record version (same sequence number)
//! and is really due; an early timer (the deadline moved later) is re-armed, a timer for an
//! entry that can no longer expire is dropped.

pub mod wheel;
pub mod worker;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::engine::Inner;
use crate::error::Result;
use crate::keydir::KeyspaceCore;
use crate::ttl;
use wheel::TimerHandle;

/// A scheduled expiry: which key to check. Each key has at most one (its entry holds the
/// handle); a rewrite of the key moves the timer rather than adding one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// Keyspace id.
    pub keyspace: u32,
    /// The key.
    pub key: Box<[u8]>,
}

/// Published when an item expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiryEvent {
    /// Keyspace (or, in the document layer, the engine keyspace of the container).
    pub keyspace: String,
    /// The expired key.
    pub key: Vec<u8>,
    /// Unix second at which the item expired.
    pub expired_at: u64,
}

impl Inner {
    /// Fires every timer due at the engine's `now`; returns how many items expired.
    pub(crate) fn reap(&self) -> Result<usize> {
        let now = self.now_s();
        let mut fired = Vec::new();
        self.expiry.lock().wheel.advance(now, &mut fired);
        let mut events = Vec::new();
        let mut dead = Vec::new();
        let mut current: Option<(u32, Option<Arc<KeyspaceCore>>)> = None;
        for (_, timer) in fired {
            if current.as_ref().map(|c| c.0) != Some(timer.keyspace) {
                current = Some((timer.keyspace, self.keyspace_by_id(timer.keyspace)));
            }
            let Some(core) = current.as_ref().and_then(|c| c.1.as_ref()) else {
                continue;
            };
            let mut st = core.state.write();
            let Some(e) = st.map.get(&*timer.key).copied() else {
                continue;
            };
            if self.expiry.lock().wheel.contains(e.timer) {
                // A write re-armed the key's timer after this one fired: that one is in charge.
                continue;
            }
            let at = st.expires_at(&e);
            if at <= now {
                st.map.remove(&*timer.key);
                drop(st);
                dead.push((e.file, u64::from(e.len), at));
                events.push(ExpiryEvent {
                    keyspace: core.name.clone(),
                    key: timer.key.into_vec(),
                    expired_at: at,
                });
            } else {
                let key = timer.key.clone();
                let handle = if at == ttl::NEVER {
                    TimerHandle::NONE
                } else {
                    // Fired early (the deadline moved later): re-arm the same key.
                    self.expiry.lock().wheel.insert(at, timer)
                };
                if let Some(e) = st.map.get_mut(&*key) {
                    e.timer = handle;
                }
            }
        }
        if !dead.is_empty() {
            let mut log = self.log.lock();
            for (file, len, at) in dead {
                if let Some(s) = log.segstats.get_mut(&file) {
                    s.dead += len;
                    s.note_expired(len, at);
                }
            }
        }
        {
            let mut ex = self.expiry.lock();
            ex.reaped_upto = ex.reaped_upto.max(now);
        }
        self.record_reaped_upto(now);
        let n = events.len();
        self.expirations.fetch_add(n as u64, Ordering::Relaxed);
        if n > 0 {
            let mut subs = self.subscribers.lock();
            subs.retain(|tx| events.iter().all(|ev| tx.send(ev.clone()).is_ok()));
        }
        Ok(n)
    }
}
