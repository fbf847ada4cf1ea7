//! Expiry: the timers, the reaper that frees expired entries, and the background worker.
//!
//! Reads never depend on this module: they evaluate expiry themselves. The reaper exists to
//! free memory, to count expired bytes as dead for compaction, and to publish events. A timer
//! is a hint: when it fires, the reaper recomputes the entry's deadline from the current TTL
//! history and acts only if the entry is still the same record version (same sequence number)
//! and is really due; an early timer (the deadline moved later) is re-armed, a timer for an
//! entry that can no longer expire is dropped.

pub(crate) mod timers;
pub(crate) mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::engine::Inner;
use crate::error::Result;
use crate::keydir::{KeyspaceState, Slot};
use crate::ttl;

/// A scheduled expiry: which key to check, filed under its second in [`timers::Timers`]. The
/// key's entry names the second of the timer in charge (`Entry::armed`); a rewrite whose
/// deadline is not earlier keeps that timer (it fires early and is re-armed), so a key has one
/// timer in charge however often it is rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// Keyspace id.
    pub keyspace: u32,
    /// The key.
    /// Up to 23 bytes inline (no allocation per timer for the usual session or id keys).
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

/// Fired timers of one keyspace processed under one hold of its write lock:
/// big enough that a pass over millions of expirations is not dominated by locking, small
/// enough that a writer waiting for the keyspace waits for at most this many removals.
const REAP_CHUNK: usize = 1024;

/// Stale timers tolerated before a sweep, however few are in charge.
const SWEEP_MIN: usize = if cfg!(test) { 16 } else { 65_536 };

/// Overrides [`SWEEP_MIN`] (`usize::MAX`: not overridden), so integration tests can make
/// sweeps happen with a few thousand keys.
static SWEEP_MIN_OVERRIDE: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Test hook: sweep once more than `n` timers are stale (and they outnumber the ones in
/// charge), in every store of this process; `None` restores the default.
pub fn set_sweep_min(n: Option<usize>) {
    SWEEP_MIN_OVERRIDE.store(n.unwrap_or(usize::MAX), Ordering::Relaxed);
}

fn sweep_min() -> usize {
    match SWEEP_MIN_OVERRIDE.load(Ordering::Relaxed) {
        usize::MAX => SWEEP_MIN,
        n => n,
    }
}

/// Fired timers the worker takes from the backlog at a time. Each slice is handled in key order
/// within each second (a hashed map's index order, DESIGN.md §3.1), so the larger it is, the
/// closer together its keys lie in the map and
/// the more of each descent is already in cache: unsorted slices of 16,384 reaped ~420 k
/// timers/s against a writer in a 4 M-key keyspace, sorted slices of 65,536 ~600 k/s
/// (DESIGN.md §11).
const REAP_SLICE: usize = 64 * REAP_CHUNK;

/// Seconds expiry may lag behind the clock (timers due and not yet taken for handling) before
/// every write helps. The worker reaps at each tick (250 ms by default) and, while a backlog is
/// left, again at once, so a lag of two seconds means it has really fallen behind, not that a
/// second's worth of timers just came due.
pub(crate) const ASSIST_LAG_S: u64 = 2;

/// A lagging backlog this small is left to the worker: a few stragglers do not justify making
/// a write publish expiry events (with a `ManualClock`, whose worker never reaps on its own,
/// they wait for `maintain`).
pub(crate) const ASSIST_MIN_BACKLOG: usize = 1024;

/// Steps of giving key-directory room back ([`Inner::trim_key_directories`]) a pass that leaves
/// nothing due takes at most: about 16 ms of a reaper that wakes a few times a second.
const IDLE_TRIM_CALLS: usize = 16;

/// The most timers a write handles per key it wrote when it assists.
pub(crate) const ASSIST_PER_KEY: usize = 4;

impl Inner {
    /// Fires every timer due at the engine's `now` and handles all of them; returns how many
    /// items expired.
    pub(crate) fn reap(&self) -> Result<usize> {
        // In slices, so the backlog others see (and help with) is the real one.
        // Bounded by what was due when the pass began, so a pass always ends (and the worker
        // gets to compaction) even while timers keep firing; the next pass takes the rest.
        let mut expired = self.reap_upto(REAP_SLICE, 0, true)?;
        let slices = self.reap_backlog.load(Ordering::Relaxed) / REAP_SLICE as u64 + 1;
        for _ in 0..slices {
            if self.reap_backlog.load(Ordering::Relaxed) == 0 {
                break;
            }
            expired += self.reap_upto(REAP_SLICE, 0, true)?;
        }
        if self.reap_backlog.load(Ordering::Relaxed) == 0 {
            self.trim_key_directories(IDLE_TRIM_CALLS);
        }
        Ok(expired)
    }

    /// Up to `calls` steps of giving key-directory room back ([`KeyMap::trim`]: about a
    /// millisecond each under a keyspace's write lock), over the keyspaces that have some, for
    /// a reaper with nothing due: the chunks of a pass trim only when the pass leaves nothing
    /// due behind it ([`Inner::reap_upto`]), so room freed by a wave of expiries is given back
    /// here, a bounded step per pass.
    ///
    /// [`KeyMap::trim`]: crate::keydir::KeyMap::trim
    fn trim_key_directories(&self, calls: usize) {
        let mut due: Vec<_> = self.catalog.read().by_id.values().cloned().collect();
        let mut left = calls;
        // A step for each keyspace in turn, so one with much to give back does not keep the
        // others waiting; whether a keyspace has any is asked under its read lock, so a pass
        // with nothing to do holds no writer up.
        while left > 0 && !due.is_empty() {
            due.retain(|core| core.state.read().map.trim_due());
            for core in due.iter().take(left) {
                let mut st = core.state.write();
                st.map.trim();
                parking_lot::RwLockWriteGuard::unlock_fair(st);
                left -= 1;
            }
        }
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
            let _ = self.reap_upto(
                keys_written.saturating_mul(share).max(64),
                ASSIST_MIN_BACKLOG,
                false,
            );
        }
    }

    /// Takes up to `limit` of the timers due at `now`, oldest second first, if more than
    /// `min_backlog` are due, and handles them. Fired timers are grouped by keyspace (keeping
    /// deadline order within each) and handled `REAP_CHUNK` at a time, each chunk under one
    /// write lock of the keyspace; dead bytes are accounted under the log mutex once per call.
    /// Events are built only when someone subscribed. The second up to which events were
    /// delivered advances only when nothing due is left and nothing is in flight. With
    /// `may_trim` (the reaper's passes) and nothing left due after the take, the chunks give
    /// key-directory room back too.
    pub(crate) fn reap_upto(
        &self,
        limit: usize,
        min_backlog: usize,
        may_trim: bool,
    ) -> Result<usize> {
        let now = self.now_s();
        let (taken, handled, trim) = {
            let mut ex = self.expiry.lock();
            ex.fired_through = ex.fired_through.max(now);
            let due = ex.timers.due(now);
            let n = if due > min_backlog { limit.min(due) } else { 0 };
            let mut taken = Vec::new();
            let count = ex.timers.take(now, n, &mut taken);
            // Room is given back only by the reaper (`may_trim`; a write's assist never), and
            // only by a take that leaves nothing due: while a backlog is left, every
            // millisecond goes to expiring (see `handle_fired`).
            let trim = may_trim && count == due;
            ex.in_flight += count;
            self.reap_backlog
                .store((due - count) as u64, Ordering::Relaxed);
            let through = match ex.timers.next_deadline() {
                Some(at) if at <= now => at - 1,
                _ => now,
            };
            self.handled_through.fetch_max(through, Ordering::Relaxed);
            (taken, count, trim)
        };
        let expired = self.handle_fired(now, taken, trim);
        let complete = {
            let mut ex = self.expiry.lock();
            ex.in_flight -= handled;
            if handled > 0 {
                ex.published_through = ex.published_through.max(now);
            }
            // Complete only if nothing due at `now` is anywhere: not pending, not being
            // handled (or swept) by another thread, and not re-armed by a reaper with an
            // earlier `now` (it would be reported later, so `reaped_upto` must not pass it).
            let complete = ex.in_flight == 0 && ex.timers.next_deadline().is_none_or(|d| d > now);
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
    /// pass), handles every timer due by the latest second a reaper looked at
    /// (`fired_through`), so that `reaped_upto` can cover every event already published. Some
    /// versions of a second were reported and others not, which no watermark can say: without
    /// this, the reopened store reported the published ones again. Nothing later is taken,
    /// and nothing is done when no event past `reaped_upto` was published: timers not handled
    /// yet are reported by the next session, as before.
    pub(crate) fn finish_fired_timers(&self) {
        let now = self.now_s();
        let (taken, handled, through) = {
            let mut ex = self.expiry.lock();
            if ex.published_through <= ex.reaped_upto {
                return;
            }
            let through = ex.fired_through.min(now);
            let mut taken = Vec::new();
            let count = ex.timers.take(through, usize::MAX, &mut taken);
            ex.in_flight += count;
            self.reap_backlog.store(0, Ordering::Relaxed);
            (taken, count, through)
        };
        let expired = self.handle_fired(now, taken, true);
        self.expirations
            .fetch_add(expired as u64, Ordering::Relaxed);
        let upto = {
            let mut ex = self.expiry.lock();
            ex.in_flight -= handled;
            // Every timer with a deadline up to `through` has been handled: each item due by
            // then was reported (or re-armed later, which keeps it pending).
            let complete =
                ex.in_flight == 0 && ex.timers.next_deadline().is_none_or(|d| d > through);
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
    /// moved later, drops stale ones, publishes events. Returns how many items expired.
    /// `fired` comes as runs of one second each, as [`Timers::take`] moved them. With `trim`,
    /// each chunk's keyspace gives room back after it ([`crate::keydir::KeyMap::trim`]).
    fn handle_fired(&self, now: u64, fired: timers::Runs, trim: bool) -> usize {
        if fired.is_empty() {
            return 0;
        }
        let want_events = self.has_subscribers();
        let mut by_keyspace: Vec<(u32, Vec<(u64, Timer)>)> = Vec::new();
        for (at, timer) in timers::each_timer(fired) {
            match by_keyspace.iter_mut().find(|(id, _)| *id == timer.keyspace) {
                Some((_, list)) => list.push((at, timer)),
                None => by_keyspace.push((timer.keyspace, vec![(at, timer)])),
            }
        }
        let mut events = Vec::new();
        let mut expired = 0usize;
        // Per file: (dead bytes, items, oldest deadline).
        let mut dead: HashMap<u32, (u64, u64, u64)> = HashMap::new();
        let mut stale = 0usize;
        let mut rearm: Vec<(u64, Timer)> = Vec::new();
        for (ks_id, mut timers) in by_keyspace {
            let Some(core) = self.keyspace_by_id(ks_id) else {
                // A dropped keyspace: its entries are gone, its timers were counted stale.
                stale += timers.len();
                continue;
            };
            // Within each second, the order in which the map is cheapest to look up: an
            // ordered map's key order (consecutive descents share the upper nodes of the tree,
            // which stay in cache), a hashed map's index order (each table walked from one end
            // to the other). Deadline order between seconds is kept for events.
            // The locality is taken under a read lock in a statement of its own: the sort must
            // not hold it (a `match` on `state.read()…` would, to the end of the `match`, and a
            // writer waits for the keyspace holding the log mutex).
            let locality = core.state.read().map.locality();
            match locality {
                Some(loc) => timers.sort_by_cached_key(|(at, t)| (*at, loc.of(&t.key))),
                None => timers.sort_unstable_by(|a, b| (a.0, &a.1.key).cmp(&(b.0, &b.1.key))),
            }
            let mut timers = timers.into_iter();
            loop {
                let chunk: Vec<(u64, Timer)> = timers.by_ref().take(REAP_CHUNK).collect();
                if chunk.is_empty() {
                    break;
                }
                let mut st = core.state.write();
                let KeyspaceState {
                    map,
                    history,
                    census,
                    departures,
                    ..
                } = &mut *st;
                // The chunk's entries asked for together, then found in cache one by one.
                map.prefetch(chunk.iter().map(|(_, t)| &t.key));
                for (fired_at, timer) in chunk {
                    // One descent of the map per timer: decide and remove on the same entry.
                    let Slot::Occupied(mut slot) = map.entry(timer.key.clone()) else {
                        stale += 1;
                        continue;
                    };
                    let e = *slot.get();
                    if e.armed != fired_at {
                        // Not the timer in charge of this key (the key was rewritten with an
                        // earlier deadline or disarmed since): stale.
                        stale += 1;
                        continue;
                    }
                    let at = ttl::expires_at(e.ts.get(), e.own_ttl(), history);
                    if at <= now {
                        census.remove(&slot.remove());
                        *departures += 1;
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
                        slot.get_mut().armed = ttl::NEVER;
                    } else {
                        // Fired early (the deadline moved later): re-arm the same key.
                        slot.get_mut().armed = at;
                        rearm.push((at, timer));
                    }
                }
                // Tables the expiries left under a quarter full give room back (a table is
                // rehashed only then: at 1 M keys, a 64th of them), and the slab's end moves
                // into its holes; not while a backlog is left, whose expiries come first: in
                // the keeps-up run trimming took over half the reaper's time when the live set
                // swung, and the reaper fell behind the writer (DESIGN.md §3.1, "Spare pages
                // from the sync thread, and trims after the backlog").
                if trim {
                    map.trim();
                }
                // Re-armed timers go in before the keyspace lock is let go, so a sweep (which
                // checks entries under that lock) never sees an entry armed at a second whose
                // timer is not in place yet.
                if !rearm.is_empty() || stale > 0 {
                    let mut ex = self.expiry.lock();
                    for (at, timer) in rearm.drain(..) {
                        ex.timers.insert(at, timer);
                    }
                    ex.stale = ex.stale.saturating_sub(stale);
                    stale = 0;
                }
                // Handed to whoever waits (the writer, most often) rather than taken straight
                // back for the next chunk: a plain unlock let this loop re-take the lock ahead
                // of a woken writer chunk after chunk, and a write batch of 100 keys waited
                // 17 ms behind several chunks (DESIGN.md §11).
                parking_lot::RwLockWriteGuard::unlock_fair(st);
            }
        }
        if stale > 0 {
            let mut ex = self.expiry.lock();
            ex.stale = ex.stale.saturating_sub(stale);
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

    /// True when stale timers outnumber the ones in charge (and are worth a pass).
    pub(crate) fn timers_need_sweep(&self) -> bool {
        let ex = self.expiry.lock();
        ex.stale > sweep_min() && ex.stale > ex.timers.len().saturating_sub(ex.stale)
    }

    /// Drops stale timers (their key is gone, or its entry is armed at another second), one
    /// second's bucket at a time: the bucket is taken out (counted in flight, so no reaper
    /// declares its second complete meanwhile), each timer is checked against its key's entry
    /// under the keyspace's read lock, and the ones in charge are put back. Checking without
    /// the expiry lock is safe: an entry only becomes armed at a second by a thread that files
    /// a timer there itself, so a timer judged stale cannot become the one in charge. Returns
    /// how many were dropped.
    pub(crate) fn sweep_stale_timers(&self) -> usize {
        let seconds = {
            let ex = self.expiry.lock();
            ex.timers.seconds_after(0)
        };
        let mut dropped = 0;
        for at in seconds {
            let (timers, n) = {
                let mut ex = self.expiry.lock();
                let t = ex.timers.take_bucket(at);
                let n = t.iter().map(Vec::len).sum::<usize>();
                ex.in_flight += n;
                (t, n)
            };
            let mut keep = Vec::with_capacity(n);
            // A key can have two timers at one second (disarmed, then armed at that second
            // again); only one of them is in charge.
            let mut kept_keys: std::collections::HashSet<(u32, crate::keydir::Key)> =
                std::collections::HashSet::new();
            let mut by_keyspace: Vec<(u32, Vec<Timer>)> = Vec::new();
            for timer in timers.into_iter().flatten() {
                match by_keyspace.iter_mut().find(|(id, _)| *id == timer.keyspace) {
                    Some((_, list)) => list.push(timer),
                    None => by_keyspace.push((timer.keyspace, vec![timer])),
                }
            }
            for (ks_id, list) in by_keyspace {
                let Some(core) = self.keyspace_by_id(ks_id) else {
                    continue;
                };
                for part in list.chunks(REAP_CHUNK) {
                    let st = core.state.read();
                    for t in part {
                        let in_charge = st.get(t.key.as_slice()).is_some_and(|e| e.armed == at);
                        if in_charge && kept_keys.insert((t.keyspace, t.key.clone())) {
                            keep.push(t.clone());
                        }
                    }
                }
            }
            let mut ex = self.expiry.lock();
            dropped += n - keep.len();
            self.timers_swept
                .fetch_add((n - keep.len()) as u64, Ordering::Relaxed);
            ex.stale = ex.stale.saturating_sub(n - keep.len());
            for timer in keep {
                ex.timers.insert(at, timer);
            }
            ex.in_flight -= n;
        }
        dropped
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
        // Sent outside the subscriber list's lock: a slice's events take milliseconds to send,
        // and writes that report expired versions they replaced publish too.
        let subs = self.subscribers.lock().clone();
        let gone: Vec<_> = subs
            .into_iter()
            .filter(|tx| !events.iter().all(|ev| tx.send(ev.clone()).is_ok()))
            .collect();
        if !gone.is_empty() {
            self.subscribers
                .lock()
                .retain(|tx| !gone.iter().any(|g| g.same_channel(tx)));
        }
    }
}
