//! Statistics: what is live, what is expired but not yet purged, and what is on disk.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::Inner;
use crate::ttl;

/// Per-segment byte accounting, kept under the log mutex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegStats {
    /// Bytes of records in the segment (header excluded).
    pub total: u64,
    /// Bytes of records no longer reachable: superseded, deleted, expired and reaped, batch
    /// headers, tombstones.
    pub dead: u64,
    /// Of `dead`, bytes of puts the key directory stopped naming for another reason than
    /// their expiry: superseded or deleted, expired on arrival, their keyspace dropped, or
    /// copied by a merge after a newer write (and, after an open, every dead byte not known
    /// to have expired). An expired version replaced before the reaper freed it counts here
    /// and in `expired_bytes`. While this is 0, every put in the segment that has not expired by its
    /// own metadata is its key's newest version, so a merge copies those without a lookup
    /// (DESIGN.md §7).
    pub replaced: u64,
    /// Bytes of puts that, when counted (written, copied by a merge, or found at open), were
    /// due to expire within `policy::SHORT_LIVED_SECS`: a segment mostly of those is merged or
    /// dropped within about that long, so its hint waits (`compaction::write_hint_for`, and a
    /// merge's for its outputs).
    pub soon: u64,
    /// Records whose removal needs the no-resurrection check (SHADOWS flag or tombstone).
    pub shadowing: u64,
    /// Of `dead`, bytes of no-resurrection markers a merge wrote (tombstones with the MARKER
    /// flag). They stay while a version they hide may be on disk, so a merge of the segment
    /// may keep them all: the pressure rule does not count them (`policy::reclaimable`).
    pub markers: u64,
    /// Of `dead`, bytes that are dead because they expired.
    pub expired_bytes: u64,
    /// Number of expired-and-reaped records still in the file.
    pub expired_items: u64,
    /// Earliest deadline among those expired records ([`ttl::NEVER`] if none).
    pub oldest_expiry: u64,
    /// The second by which every record still live in the segment will have expired, under
    /// the TTL history when each was counted ([`ttl::NEVER`] if some record never expires or
    /// it is not known). A hint for the policy: a segment about to die whole is not merged.
    pub dies_by: u64,
    /// The oldest default-TTL epoch (`Inner::ttl_epoch`) under which a deadline folded into
    /// `dies_by` was computed (`u64::MAX` if none was; open sets 0 for what it counted):
    /// `dies_by` is exact only if no default changed since, which is what dropping a segment
    /// before its keys are reaped relies on.
    pub ttl_epoch: u64,
    /// `g + 1` for the output of a merge that reclaimed nothing while the reclaim generation
    /// (`LogState::reclaim_gen`) was `g`; 0 otherwise. Merging it again before another merge
    /// or drop reclaims something would keep all of it again (a segment of no-resurrection
    /// markers still needed): the policy leaves it (`policy::Rules::reclaim_gen`) while its
    /// dead bytes stay `sterile_dead` (more dead bytes, an expiry say, make it worth merging).
    pub sterile_in: u64,
    /// `dead` when `sterile_in` was set.
    pub sterile_dead: u64,
    /// About how many bytes the segment's hint file would take: `policy::HINT_ENTRY_BYTES`
    /// plus the key per put and tombstone. A segment whose records are in key order gets a
    /// hint only while this is at most an eighth of `total` (`policy::hint_worth`): for
    /// smaller records it would nearly copy the segment's headers and keys, and scanning the
    /// segment at open costs little more.
    pub hint_bytes: u64,
    /// True when the segment's records are known to lie in key order within each keyspace,
    /// up to a few breaks (`policy::few_runs`): an open that scans it needs no real sort.
    /// Set by open for what it loaded and by a merge for its outputs; false when not so or
    /// not known (anything appended since).
    pub key_ordered: bool,
}

impl Default for SegStats {
    fn default() -> Self {
        Self {
            total: 0,
            dead: 0,
            replaced: 0,
            soon: 0,
            shadowing: 0,
            markers: 0,
            expired_bytes: 0,
            expired_items: 0,
            oldest_expiry: ttl::NEVER,
            dies_by: 0,
            ttl_epoch: u64::MAX,
            sterile_in: 0,
            sterile_dead: 0,
            hint_bytes: 0,
            key_ordered: false,
        }
    }
}

impl SegStats {
    /// Adds another accounting (for records appended together).
    pub fn add(&mut self, o: &SegStats) {
        self.total += o.total;
        self.dead += o.dead;
        self.replaced += o.replaced;
        self.soon += o.soon;
        self.shadowing += o.shadowing;
        self.markers += o.markers;
        self.expired_bytes += o.expired_bytes;
        self.expired_items += o.expired_items;
        self.oldest_expiry = self.oldest_expiry.min(o.oldest_expiry);
        self.dies_by = self.dies_by.max(o.dies_by);
        self.ttl_epoch = self.ttl_epoch.min(o.ttl_epoch);
        self.hint_bytes += o.hint_bytes;
        if o.total > 0 {
            self.key_ordered &= o.key_ordered;
        }
    }

    /// Records that a record of `len` bytes expired at `at` (its bytes are already dead).
    pub fn note_expired(&mut self, len: u64, at: u64) {
        self.note_expired_many(len, 1, at);
    }

    /// Records that `items` records of `bytes` bytes in all expired, the earliest at `oldest`.
    pub fn note_expired_many(&mut self, bytes: u64, items: u64, oldest: u64) {
        self.expired_bytes += bytes;
        self.expired_items += items;
        self.oldest_expiry = self.oldest_expiry.min(oldest);
    }

    /// Share of dead bytes, 0.0 for an empty segment.
    #[must_use]
    pub fn dead_share(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.dead.min(self.total) as f64 / self.total as f64
        }
    }
}

/// One segment in [`Stats`].
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentStats {
    /// File id.
    pub id: u32,
    /// Record bytes.
    pub bytes: u64,
    /// Share of those bytes that is dead.
    pub dead_share: f64,
    /// True for the segment being appended to.
    pub active: bool,
}

/// A snapshot of a store's statistics.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    /// Items live now.
    pub live_items: u64,
    /// Record bytes of live items.
    pub live_bytes: u64,
    /// Items that have expired and are not purged yet: entries the reaper has not freed (their
    /// records may already be gone, with a segment dropped whole once every record in it had
    /// expired) and freed items whose records are still on disk.
    pub expired_items: u64,
    /// Record bytes of those items: what they took on disk, so at most what they still take.
    pub expired_bytes: u64,
    /// Bytes of the published segments (sealed files plus the active one's written length).
    /// Retired segments still held by a reader are not counted here (see `disk_bytes`).
    pub segment_bytes: u64,
    /// Bytes of hint files.
    pub hint_bytes: u64,
    /// All bytes in the directory (segments, hints, manifest, clock), including retired
    /// segments whose deletion waits for a reader to let go of them.
    pub disk_bytes: u64,
    /// Number of segments, the active one included.
    pub segments: usize,
    /// Per segment.
    pub per_segment: Vec<SegmentStats>,
    /// Earliest deadline among the items counted in `expired_items` (Unix seconds).
    pub oldest_unpurged_expiry: Option<u64>,
    /// Items expired by the reaper since open.
    pub expirations: u64,
    /// Merges run since open.
    pub merges: u64,
    /// Fired expiry timers not handled yet (the reaping backlog). Writes help drain it once
    /// expiry lags the clock by more than two seconds, so it stays bounded at any write rate.
    pub expiry_backlog: u64,
    /// Time writers spent paced since open: while merges fall behind (more segments are due
    /// for a merge than one takes, and the bytes only a merge reclaims are over 6 % of the
    /// sealed bytes), each write waits in proportion to the bytes it wrote, so that disk
    /// follows the live set at any write rate (DESIGN.md §7, "Pacing").
    pub paced: std::time::Duration,
    /// Sealed segments without a hint file because they are about to die whole, or because at
    /// least half of their bytes expire within a minute of being written (a hint only speeds
    /// up opening; one is written if the segment outlives its expected death, or is still
    /// there two minutes later, or by a clean close within its 256 MiB budget).
    pub hints_deferred: usize,
    /// Expiry timers armed: at most one per live (or expired, not yet reaped) key with a
    /// deadline, however often keys are rewritten.
    pub timers_armed: usize,
    /// Expiry timers left behind by deletes and by rewrites with an earlier deadline, not yet
    /// swept (they are dropped when they fire, or all at once when they outnumber the armed
    /// ones).
    pub timers_stale: usize,
    /// Stale timers dropped by sweeps since open (the others were dropped when they fired).
    pub timers_swept: u64,
    /// The last background job's failure, until a later job succeeds (failing merges are
    /// retried with exponential backoff, from 1 s up to 60 s).
    pub worker_error: Option<String>,
    /// Background jobs that failed since open.
    pub worker_failures: u64,
    /// Segments found damaged since open (by opening or by a merge). Under
    /// [`RecoveryMode::Salvage`](crate::RecoveryMode::Salvage) their readable records are kept
    /// and the segment is never merged or deleted; under `Strict` the damage is an error.
    pub damaged_segments: u64,
    /// Bytes that `Salvage` skipped as unreadable (damaged ranges, missing files, cut tails of
    /// durable data) when opening.
    pub skipped_bytes: u64,
    /// Files named like segments or hints that the manifest does not account for and that
    /// `Salvage` left alone (see DESIGN.md "Crash safety", step 4).
    pub unlisted_files: u64,
}

/// Counters of damage met and skipped (shown in [`Stats`]).
#[derive(Debug, Default)]
pub(crate) struct DamageCounters {
    pub(crate) damaged_segments: AtomicU64,
    pub(crate) skipped_bytes: AtomicU64,
    pub(crate) unlisted_files: AtomicU64,
}

impl DamageCounters {
    /// Counts a damaged segment and `skipped` unreadable bytes in it.
    pub(crate) fn segment(&self, skipped: u64) {
        self.damaged_segments.fetch_add(1, Ordering::Relaxed);
        self.skipped_bytes.fetch_add(skipped, Ordering::Relaxed);
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionReport {
    /// Segments read and rewritten.
    pub segments_merged: usize,
    /// Segments deleted without being read (every record dead, nothing to shadow).
    pub segments_dropped: usize,
    /// Output segments written.
    pub segments_written: usize,
    /// Live records copied.
    pub records_copied: u64,
    /// Dead records carried forward as markers (see DESIGN.md "No resurrection").
    pub markers_written: u64,
    /// Bytes of the retired segments.
    pub bytes_before: u64,
    /// Bytes of the new segments.
    pub bytes_after: u64,
}

impl CompactionReport {
    /// True when the merge neither read nor dropped anything.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.segments_merged == 0 && self.segments_dropped == 0
    }

    /// Adds `other`'s counts to these (several merges reported as one).
    pub fn absorb(&mut self, other: &CompactionReport) {
        self.segments_merged += other.segments_merged;
        self.segments_dropped += other.segments_dropped;
        self.segments_written += other.segments_written;
        self.records_copied += other.records_copied;
        self.markers_written += other.markers_written;
        self.bytes_before += other.bytes_before;
        self.bytes_after += other.bytes_after;
    }
}

pub(crate) fn collect(inner: &Inner) -> Stats {
    let now = inner.now_s();
    let mut st = Stats::default();
    let mut oldest = ttl::NEVER;
    let cores: Vec<_> = inner.catalog.read().by_id.values().cloned().collect();
    for core in cores {
        let count = core.state.read().count(now);
        st.live_items += count.live.items;
        st.live_bytes += count.live.bytes;
        st.expired_items += count.expired.items;
        st.expired_bytes += count.expired.bytes;
        oldest = oldest.min(count.oldest_expired);
    }
    {
        let log = inner.log.lock();
        let active = log.active.id();
        let mut ids: Vec<_> = log.segstats.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(s) = log.segstats.get(&id) {
                st.expired_items += s.expired_items;
                st.expired_bytes += s.expired_bytes;
                oldest = oldest.min(s.oldest_expiry);
                st.per_segment.push(SegmentStats {
                    id,
                    bytes: s.total,
                    dead_share: s.dead_share(),
                    active: id == active,
                });
            }
        }
    }
    st.segments = st.per_segment.len();
    {
        let set = inner.segments.read();
        st.segment_bytes = set.sealed.values().map(|s| s.len()).sum::<u64>();
    }
    st.segment_bytes += inner.log.lock().active.len();
    if let Ok(rd) = std::fs::read_dir(&inner.dir) {
        for entry in rd.flatten() {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".hint") {
                st.hint_bytes += len;
            }
            st.disk_bytes += len;
        }
    }
    st.oldest_unpurged_expiry = (oldest != ttl::NEVER).then_some(oldest);
    st.expirations = inner.expirations.load(Ordering::Relaxed);
    st.merges = inner.merges.load(Ordering::Relaxed);
    {
        let ex = inner.expiry.lock();
        st.timers_armed = ex.timers.len().saturating_sub(ex.stale);
        st.timers_stale = ex.stale;
        st.timers_swept = inner.timers_swept.load(Ordering::Relaxed);
    }
    st.hints_deferred = inner.hints_deferred.lock().len();
    st.expiry_backlog = inner.reap_backlog.load(Ordering::Relaxed);
    st.paced = std::time::Duration::from_nanos(inner.paced_ns.load(Ordering::Relaxed));
    {
        let w = inner.worker_error.lock();
        st.worker_error.clone_from(&w.last);
        st.worker_failures = w.failures;
    }
    st.damaged_segments = inner.damage.damaged_segments.load(Ordering::Relaxed);
    st.skipped_bytes = inner.damage.skipped_bytes.load(Ordering::Relaxed);
    st.unlisted_files = inner.damage.unlisted_files.load(Ordering::Relaxed);
    st
}
