//! Expiry: the timer wheel, the reaper that frees expired entries, and the background worker.
//!
//! Reads never depend on this module: they evaluate expiry themselves. The reaper exists to
//! free memory, to count expired bytes as dead for compaction, and to publish events. A timer
//! is a hint: when it fires, the reaper recomputes the entry's deadline from the current TTL
//! history and acts only if the entry is still the same record version (same sequence number)
//! and is really due; an early timer (the deadline moved later) is re-armed, a timer for an
//! entry that can no longer expire is dropped.

hooked_mod!(wheel);
pub(crate) mod worker;

use std::collections::btree_map::Entry as BTreeEntry;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::engine::Inner;
use crate::error::Result;
use crate::keydir::KeyspaceState;
use crate::ttl;
use wheel::TimerHandle;

/// A scheduled expiry: which key to check. Each key has at most one (its entry holds the
/// handle); a rewrite of the key moves the timer rather than adding one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// Keyspace id.
    pub keyspace: u32,
    /// The key.
    /// Up to 16 bytes inline (no allocation per timer for the usual session or id keys).
    pub key: crate::keydir::Key,
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

/// Fired timers of one keyspace processed under one hold of its write lock (and of the wheel):
/// big enough that a pass over millions of expirations is not dominated by locking, small
/// enough that a writer waiting for the keyspace waits for at most this many removals.
const REAP_CHUNK: usize = 1024;

/// Fired timers the worker takes from the backlog at a time.
const REAP_SLICE: usize = 16 * REAP_CHUNK;

/// Seconds expiry may lag behind the clock (timers due and not yet taken for handling) before
/// every write helps. The worker reaps at each tick (250 ms by default) and, while a backlog is
/// left, again at once, so a lag of two seconds means it has really fallen behind, not that a
/// second's worth of timers just came due.
pub(crate) const ASSIST_LAG_S: u64 = 2;

/// A lagging backlog this small is left to the worker: a few stragglers do not justify making
/// a write publish expiry events (with a `ManualClock`, whose worker never reaps on its own,
/// they wait for `maintain`).
pub(crate) const ASSIST_MIN_BACKLOG: usize = 1024;

/// The most timers a write handles per key it wrote when it assists.
pub(crate) const ASSIST_PER_KEY: usize = 4;

impl Inner {
    /// Fires every timer due at the engine's `now` and handles all of them; returns how many
    /// items expired.
    pub(crate) fn reap(&self) -> Result<usize> {
        // In slices, so the backlog others see (and help with) is the real one.
        // Bounded by what was due when the pass began, so a pass always ends (and the worker
        // gets to compaction) even while timers keep firing; the next pass takes the rest.
        let mut expired = self.reap_upto(REAP_SLICE, 0)?;
        let slices = self.reap_backlog.load(Ordering::Relaxed) / REAP_SLICE as u64 + 1;
        for _ in 0..slices {
            if self.reap_backlog.load(Ordering::Relaxed) == 0 {
                break;
            }
            expired += self.reap_upto(REAP_SLICE, 0)?;
        }
        Ok(expired)
    }

    /// A write's share of reaping when the worker has fallen behind: expiry lags the write's
    /// `now` by more than [`ASSIST_LAG_S`]. Expiry therefore keeps pace with any write rate:
    /// the more a writer outruns the worker, the more of the backlog it handles itself.
    pub(crate) fn assist_reaping(&self, keys_written: usize, now: u64) {
        let lag = now.saturating_sub(self.handled_through.load(Ordering::Relaxed));
        if lag > ASSIST_LAG_S {
            // The share grows with the lag (1 timer per key written just past the threshold,
            // up to ASSIST_PER_KEY), so writers slow down gradually rather than in steps: a
            // step makes the write rate, and TTL seconds later the expiry rate, oscillate.
            let share = (lag - ASSIST_LAG_S).clamp(1, ASSIST_PER_KEY as u64) as usize;
            let _ = self.reap_upto(keys_written.saturating_mul(share).max(64), ASSIST_MIN_BACKLOG);
        }
    }

    /// Moves every timer due at `now` from the wheel into the backlog, then handles up to
    /// `limit` of the oldest, if more than `min_backlog` are queued. Fired timers are grouped by keyspace (keeping deadline order
    /// within each) and handled `REAP_CHUNK` at a time, each chunk under one write lock of the
    /// keyspace and one lock of the wheel; dead bytes are accounted under the log mutex once per
    /// call. Events are built only when someone subscribed. The second up to which events were
    /// delivered advances only when the backlog is empty and nothing is in flight.
    pub(crate) fn reap_upto(&self, limit: usize, min_backlog: usize) -> Result<usize> {
        let now = self.now_s();
        let taken: Vec<Timer> = {
            let mut ex = self.expiry.lock();
            if ex.wheel.now() < now || ex.wheel.next_deadline().is_some_and(|d| d <= now) {
                let mut fired = Vec::new();
                ex.wheel.advance(now, &mut fired);
                ex.due.extend(fired);
            }
            let n = if ex.due.len() > min_backlog {
                limit.min(ex.due.len())
            } else {
                0
            };
            let taken: Vec<Timer> = ex.due.drain(..n).map(|(_, t)| t).collect();
            ex.in_flight += taken.len();
            self.reap_backlog
                .store(ex.due.len() as u64, Ordering::Relaxed);
            let through = ex
                .due
                .front()
                .map_or(ex.wheel.now(), |(deadline, _)| deadline.saturating_sub(1));
            self.handled_through.fetch_max(through, Ordering::Relaxed);
            taken
        };
        let handled = taken.len();
        let expired = self.handle_fired(now, taken);
        let complete = {
            let mut ex = self.expiry.lock();
            ex.in_flight -= handled;
            if handled > 0 {
                ex.published_through = ex.published_through.max(now);
            }
            // Complete only if nothing due at `now` is anywhere: not queued, not being handled
            // by another reaper, and not re-armed into the wheel by a reaper with an earlier
            // `now` (it would be reported later, so `reaped_upto` must not pass it).
            let complete = ex.due.is_empty()
                && ex.in_flight == 0
                && ex.wheel.next_deadline().is_none_or(|d| d > now);
            if complete {
                ex.reaped_upto = ex.reaped_upto.max(now);
            }
            complete
        };
        if complete {
            self.record_reaped_upto(now);
        }
        self.expirations
            .fetch_add(expired as u64, Ordering::Relaxed);
        Ok(expired)
    }

    /// At a clean close (no other thread left): if a pass left stragglers after publishing
    /// events past `reaped_upto` (a write's assist stops at `ASSIST_MIN_BACKLOG`; a bounded
    /// pass), handles every timer already fired into the backlog, so that `reaped_upto` can
    /// cover every event already published. Some versions of a second were reported and
    /// others not, which no watermark can say: without this, the reopened store reported the
    /// published ones again. The wheel is not advanced, and nothing is done when no event
    /// past `reaped_upto` was published: timers not handled yet are reported by the next
    /// session, as before.
    pub(crate) fn finish_fired_timers(&self) {
        let now = self.now_s();
        let taken: Vec<Timer> = {
            let mut ex = self.expiry.lock();
            if ex.published_through <= ex.reaped_upto {
                return;
            }
            let taken: Vec<Timer> = ex.due.drain(..).map(|(_, t)| t).collect();
            ex.in_flight += taken.len();
            self.reap_backlog.store(0, Ordering::Relaxed);
            taken
        };
        let handled = taken.len();
        let expired = self.handle_fired(now, taken);
        self.expirations
            .fetch_add(expired as u64, Ordering::Relaxed);
        let upto = {
            let mut ex = self.expiry.lock();
            ex.in_flight -= handled;
            // Every timer with a deadline up to the wheel's `now` has fired and been handled:
            // each item due by then was reported (or re-armed later, which keeps it pending).
            let through = ex.wheel.now().min(now);
            let complete = ex.due.is_empty()
                && ex.in_flight == 0
                && ex.wheel.next_deadline().is_none_or(|d| d > through);
            (complete && through > ex.reaped_upto).then(|| {
                ex.reaped_upto = through;
                through
            })
        };
        if let Some(upto) = upto {
            self.record_reaped_upto(upto);
        }
    }

    /// Handles fired timers: frees the entries that are due, re-arms the ones whose deadline
    /// moved later, publishes events. Returns how many items expired.
    fn handle_fired(&self, now: u64, fired: Vec<Timer>) -> usize {
        if fired.is_empty() {
            return 0;
        }
        let want_events = self.has_subscribers();
        let mut by_keyspace: Vec<(u32, Vec<Timer>)> = Vec::new();
        for timer in fired {
            match by_keyspace.iter_mut().find(|(id, _)| *id == timer.keyspace) {
                Some((_, list)) => list.push(timer),
                None => by_keyspace.push((timer.keyspace, vec![timer])),
            }
        }
        let mut events = Vec::new();
        let mut expired = 0usize;
        // Per file: (dead bytes, items, oldest deadline).
        let mut dead: HashMap<u32, (u64, u64, u64)> = HashMap::new();
        for (ks_id, timers) in by_keyspace {
            let Some(core) = self.keyspace_by_id(ks_id) else {
                continue; // dropped keyspace: its entries are gone already
            };
            let mut timers = timers.into_iter().peekable();
            while timers.peek().is_some() {
                let mut st = core.state.write();
                let mut ex = self.expiry.lock();
                let KeyspaceState {
                    map,
                    history,
                    census,
                    ..
                } = &mut *st;
                for timer in timers.by_ref().take(REAP_CHUNK) {
                    // One descent of the map per timer: decide and remove on the same entry.
                    let BTreeEntry::Occupied(mut slot) = map.entry(timer.key.clone()) else {
                        continue;
                    };
                    let e = *slot.get();
                    if ex.wheel.contains(e.timer) {
                        // A write re-armed the key's timer after this one fired: that one is
                        // in charge.
                        continue;
                    }
                    let at = ttl::expires_at(e.ts.get(), e.own_ttl(), history);
                    if at <= now {
                        census.remove(&slot.remove());
                        let d = dead.entry(e.file).or_insert((0, 0, ttl::NEVER));
                        d.0 += u64::from(e.len);
                        d.1 += 1;
                        d.2 = d.2.min(at);
                        expired += 1;
                        if want_events {
                            events.push(ExpiryEvent {
                                keyspace: core.name.clone(),
                                key: timer.key.to_vec(),
                                expired_at: at,
                            });
                        }
                    } else if at == ttl::NEVER {
                        slot.get_mut().timer = TimerHandle::NONE;
                    } else {
                        // Fired early (the deadline moved later): re-arm the same key.
                        slot.get_mut().timer = ex.wheel.insert(at, timer);
                    }
                }
            }
        }
        if !dead.is_empty() {
            let mut log = self.log.lock();
            for (file, (bytes, items, oldest)) in dead {
                if let Some(s) = log.segstats.get_mut(&file) {
                    s.dead += bytes;
                    s.note_expired_many(bytes, items, oldest);
                }
            }
        }
        self.publish_expirations(&events);
        expired
    }

    /// True when someone subscribed to expiry events (so they are worth building).
    pub(crate) fn has_subscribers(&self) -> bool {
        !self.subscribers.lock().is_empty()
    }

    /// Sends `events` to every subscriber, forgetting subscribers that went away.
    pub(crate) fn publish_expirations(&self, events: &[ExpiryEvent]) {
        if events.is_empty() {
            return;
        }
        let mut subs = self.subscribers.lock();
        subs.retain(|tx| events.iter().all(|ev| tx.send(ev.clone()).is_ok()));
    }
}
