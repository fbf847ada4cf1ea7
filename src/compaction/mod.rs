//! Compaction: choose segments (policy), merge them without their dead records (merge), and
//! write hint files for sealed segments.

hooked_mod!(merge);
pub(crate) mod policy;

use std::fs::File;
use std::io::Write;
use std::sync::atomic::Ordering;

use crate::engine::Inner;
use crate::error::{Error, IoContext, Result};
use crate::faults::{self, FaultKind};
use crate::format::hint::HintWriter;
use crate::log::scan::scan_all;
use crate::log::{hint_path, sync_dir};
use crate::options::RecoveryMode;
use crate::stats::{CompactionReport, SegStats};

/// Runs the policy (or a full merge) now.
pub(crate) fn run(inner: &Inner, full: bool) -> Result<CompactionReport> {
    merge::run(inner, full, None)
}

/// Runs the policy as for a store that has been idle for [`policy::IDLE_AFTER_SECS`]: the
/// segments with an id below `idle_below` (those there when the writes stopped) are merged
/// from half the usual dead share (`policy::dead_ratio_when`), the later ones (this idle
/// period's outputs) from the usual one. The background worker's choice; an explicit
/// `compact` keeps the usual share (but under the policy's pressure rule, as the worker's
/// other passes).
pub(crate) fn run_idle(inner: &Inner, idle_below: u32) -> Result<CompactionReport> {
    merge::run(inner, false, Some(idle_below))
}

/// When [`write_hint_for`] leaves a segment without a hint for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HintWait {
    /// About to die whole, or short-lived (`policy::short_lived`): a segment just sealed.
    IfShortLived,
    /// About to die whole only: a segment that outlived its short-lived grace, or a close.
    IfDying,
}

impl HintWait {
    /// True when a segment with counters `s` keeps waiting for its hint at `now`, under the
    /// default-TTL epoch `epoch` (the current one): the one rule for sealed segments, the
    /// worker's second look, and a merge's outputs.
    pub(crate) fn holds(self, s: &SegStats, now: u64, epoch: u64) -> bool {
        policy::dying_soon(s, now)
            || (self == HintWait::IfShortLived && policy::short_lived(s, epoch))
    }
}

/// How long a short-lived segment's hint waits: twice the horizon that made it short-lived.
/// Past that the segment was not merged as expected (a merge backlog, a default-TTL change),
/// and it gets its hint.
const SHORT_LIVED_GRACE_SECS: u64 = 2 * policy::SHORT_LIVED_SECS;

/// Writes the hint file of sealed segment `id` (if it is still published and has none),
/// unless its records are small and in key order (`policy::hint_worth`: then it never gets
/// one, and opens scan it), or unless the segment is about to die whole
/// (`policy::dying_soon`), or, with [`HintWait::IfShortLived`], at least half of its bytes
/// were due within a minute of being written (`policy::short_lived`): then it is set aside
/// in `hints_deferred`, because a hint only speeds up opening and this segment will be
/// dropped, or merged, within about a minute (a merge's outputs follow the same rule,
/// `merge::Outputs::finish`). Under TTL churn that saves writing (and sorting) a hint of
/// about a fifth of every segment's size, and the disk space it holds.
/// [`write_deferred_hints`] writes it after all if the segment outlives its expected end.
/// Returns true when the segment was set aside (or stays so, from when it first was).
pub(crate) fn write_hint_for(inner: &Inner, id: u32, wait: HintWait) -> Result<bool> {
    let Some(seg) = inner.segments.read().sealed.get(&id).cloned() else {
        return Ok(false);
    };
    let now = inner.now_s();
    let always = inner.opts.hint_every_segment;
    // `small`: the hint would take more than an eighth of the segment; it is then written
    // only if the records are out of key order (`policy::hint_worth`), which a scan finds out
    // unless open or a merge already did (`key_ordered`).
    let (small, ordered, defer) = {
        let log = inner.log.lock();
        // Read under the log mutex, which a default-TTL change holds while it bumps it.
        let epoch = inner.ttl_epoch.load(Ordering::Acquire);
        log.segstats.get(&id).map_or((false, false, false), |s| {
            (
                !policy::hint_worth(s.hint_bytes, s.total, true, always),
                s.key_ordered,
                wait.holds(s, now, epoch),
            )
        })
    };
    if small && ordered {
        return Ok(false);
    }
    if defer {
        inner.hints_deferred.lock().entry(id).or_insert(now);
        return Ok(true);
    }
    let path = hint_path(&inner.dir, id);
    if path.exists() || seg.is_damaged() {
        return Ok(false);
    }
    // A hint must list every record of its segment: one built from a scan that stopped at
    // damage would hide the records after it from every later open.
    let mut w = HintWriter::new(id);
    let end = usize::try_from(seg.len()).unwrap_or(usize::MAX);
    let damage = scan_all(seg.bytes(), end, |off, len, rec| {
        w.add(&rec.meta, rec.key, off, len);
    });
    if let Some(first) = damage.first() {
        seg.mark_damaged();
        inner
            .damage
            .segment(damage.iter().map(|d| d.len() as u64).sum());
        if inner.opts.recovery == RecoveryMode::Strict {
            return Err(Error::corruption(
                seg.path(),
                first.offset as u64,
                first.err.to_string(),
            ));
        }
        return Ok(false);
    }
    let (entries, descents) = w.shape();
    if small && policy::few_runs(descents, entries) {
        // Small records in key order: opens scan this segment. Noted, so that a close's pass
        // over the segments without a hint does not scan it again.
        if let Some(s) = inner.log.lock().segstats.get_mut(&id) {
            s.key_ordered = true;
        }
        return Ok(false);
    }
    write_hint_file(inner, id, w).map(|()| false)
}

/// True when sealed segment `id` is known to need no hint: small records known to be in key
/// order (`policy::hint_worth`). A close's pass over the segments without a hint skips it
/// without charging its budget ([`write_hint_for`] reads the same counters itself).
pub(crate) fn known_without_hint(inner: &Inner, id: u32) -> bool {
    let always = inner.opts.hint_every_segment;
    inner
        .log
        .lock()
        .segstats
        .get(&id)
        .is_some_and(|s| !policy::hint_worth(s.hint_bytes, s.total, s.key_ordered, always))
}

/// Writes the hints set aside by [`write_hint_for`] for segments that are no longer about to die
/// whole and no longer within their short-lived grace, and forgets those of segments that are
/// gone.
pub(crate) fn write_deferred_hints(inner: &Inner) -> Result<()> {
    let ids: Vec<(u32, u64)> = inner
        .hints_deferred
        .lock()
        .iter()
        .map(|(&id, &since)| (id, since))
        .collect();
    let now = inner.now_s();
    for (id, since) in ids {
        let wait = if now < since.saturating_add(SHORT_LIVED_GRACE_SECS) {
            HintWait::IfShortLived
        } else {
            HintWait::IfDying
        };
        // Still waiting: the entry stays as it is, with the second it was first set aside.
        // Written, gone, or failed: forgotten (a failure is reported, not retried each tick).
        let kept = write_hint_for(inner, id, wait);
        if !matches!(kept, Ok(true)) {
            inner.hints_deferred.lock().remove(&id);
        }
        kept?;
    }
    Ok(())
}

/// Writes a finished hint atomically (tmp, fsync, rename).
pub(crate) fn write_hint_file(inner: &Inner, id: u32, w: HintWriter) -> Result<()> {
    let path = hint_path(&inner.dir, id);
    let tmp = path.with_extension("hint.tmp");
    (|| {
        faults::check(&tmp, FaultKind::Create)?;
        let mut f = File::create(&tmp)?;
        faults::check(&tmp, FaultKind::Write)?;
        f.write_all(&w.finish())?;
        faults::sync_file(&f, &tmp, false)?;
        faults::rename(&tmp, &path)
    })()
    .at(&tmp)?;
    sync_dir(&inner.dir).at(&inner.dir)?;
    Ok(())
}
