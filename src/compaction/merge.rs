//! Merging segments: copy live records into new segments, drop dead ones, publish atomically.
//!
//! Steps (each a crash point the tests stop at, see DESIGN.md "Crash safety of compaction"):
//! 1. Under the log mutex, choose the segments and take `snapshot_seq` (the next sequence
//!    number) and `outside_min` (the smallest `created_seq` of every segment that stays).
//! 2. Walk the chosen segments. A put the key directory points at and that is live is copied;
//!    any other record is dead and is dropped, or replaced by a marker when dropping it could
//!    let an older version of its key come back (the no-resurrection rule, below). Copies are
//!    written once every record is decided, by deadline, lasting ones last in key order
//!    (DESIGN.md §7, "Output order"). Outputs are new segment files with
//!    `created_seq = snapshot_seq`, all fsynced, each with a hint file unless it is about to
//!    die whole or short-lived (its hint then waits, DESIGN.md §2.3).
//!    A crash here leaves files the manifest does not list: deleted on open.
//! 3. Make the log durable up to every write appended so far (the drops in step 2 may rely on
//!    any of them), then publish: write the manifest that swaps inputs for outputs (atomic
//!    rename). From here a crash opens the new set; the old files are unlisted and deleted on
//!    open.
//! 4. Add outputs to the segment set, move key-directory entries that still point at their old
//!    location, account dead bytes of copies that were superseded meanwhile. Without the log
//!    mutex: writers go on during the moves.
//! 5. Remove inputs from the set; their files are unlinked when the last reader drops them.
//!
//! No-resurrection rule for a dead record `R` of key `K` with sequence `s`:
//! - if `R` is a put without the SHADOWS flag, no live older version existed when it was
//!   written, and any older version on disk is itself expired or deleted forever: drop it;
//! - if the key directory holds a newer version of `K` that has the SHADOWS flag, that version
//!   (or, later, its own marker) hides every older one: drop `R`;
//! - if every segment that stays was created after `s` (`outside_min > s`), no older version
//!   of `K` can be outside this merge (a segment created after `s` only ever received records
//!   appended after `s` or copies of records live after `s`): drop `R`;
//! - otherwise write a marker: a tombstone with `R`'s sequence number and key.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::engine::Inner;
use crate::error::{Error, IoContext, Result};
use crate::faults::{self, FaultKind};
use crate::format::hint::HintWriter;
use crate::format::record::{self, Kind, Meta, Record, FLAG_MARKER, FLAG_SHADOWS};
use crate::format::SegmentHeader;
use crate::keydir::{Key, KeyspaceCore, KeyspaceState, WriteSecs};
use crate::log::manifest::{Manifest, SealedSegment};
use crate::log::scan::{scan, scan_all, ScanEnd};
use crate::log::segment::Segment;
use crate::log::{hint_path, segment_path, segment_tmp_path, sync_dir};
use crate::options::RecoveryMode;
use crate::stats::{CompactionReport, SegStats};
use crate::ttl::{self, ItemTtl};

use super::policy;

/// Where a merge can be stopped by tests, to check that every step is crash safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // each names the step a merge has just finished
pub enum CrashPoint {
    /// Outputs written and fsynced, manifest not yet replaced.
    AfterOutputs,
    /// Manifest replaced, memory not yet updated, old files not deleted.
    AfterPublish,
    /// Key directory moved, old segments not yet retired.
    AfterKeydirMove,
}

/// The most bytes an output of copies that expire takes, for segments of `segment_size`
/// bytes: an eighth of it (8 MiB by default), at least 64 KiB, at most the segment size.
/// Copies are written by deadline, so such an output dies from its front, and whole at its
/// last deadline; the smaller it is, the sooner that comes and the less of it is dead
/// meanwhile. Each merge under TTL churn leaves about one such output partly dead at any
/// time, about half of it dead on average: 4 MiB each with 8 MiB outputs, 32 MiB each with
/// full-size ones (DESIGN.md section 7, "Output size").
#[must_use]
pub fn expiring_output_bytes(segment_size: u64) -> u64 {
    (segment_size / 8).max(64 << 10).min(segment_size)
}

/// Copies due within this many seconds of the merge go to the small outputs of
/// [`expiring_output_bytes`]; later ones are written with the lasting records. Each merge may
/// end with a small output of the latest such copies, which dies within this horizon: with
/// no horizon, a merge of mostly lasting records and a few copies due in a day left a small
/// file that no rule took for that day, one per merge (a review's probe: 169 files of under
/// 1 KiB after 400 merges, 4 before).
pub const SPLIT_HORIZON_SECS: u64 = 600;

struct Output {
    id: u32,
    writer: BufWriter<File>,
    len: u64,
    /// It holds a copy due within [`SPLIT_HORIZON_SECS`]: it ends at
    /// [`expiring_output_bytes`], and before the first record written after those copies
    /// when the merge keeps a lasting copy (`Outputs::split_lasting`), so that it dies
    /// whole.
    expiring: bool,
    hint: HintWriter,
    stats: SegStats,
}

/// A finished output: its id, byte accounting and length.
type Written = (u32, SegStats, u64);

struct Outputs<'a> {
    inner: &'a Inner,
    snapshot_seq: u64,
    /// The default-TTL epoch read before any deadline was computed: the outputs' `dies_by`
    /// is exact only in it.
    ttl_epoch: u64,
    /// The merge's instant: the outputs' `soon` bytes, and which hints wait.
    now: u64,
    done: Vec<Output>,
    current: Option<Output>,
    /// The merge keeps a copy that is due after [`SPLIT_HORIZON_SECS`] or never: the
    /// records written after the copies due within it (those copies, and the markers) start
    /// an output of their own. Without such a copy the markers follow the last copies due
    /// soon, as before: an output of markers alone is all dead, and the usual share would
    /// take it again at every reclaim (a review's probe: 180 markers rewritten 60 times).
    split_lasting: bool,
    /// Every output file created, for cleanup if the merge fails before `finish`.
    created: Vec<u32>,
    finished: bool,
}

impl Drop for Outputs<'_> {
    /// A merge that fails before its outputs are finished removes them (they are unpublished
    /// `.seg.tmp` files, which the next open would remove anyway).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.current = None;
        self.done.clear();
        remove_outputs(&self.inner.dir, &self.created);
    }
}

impl Outputs<'_> {
    /// A copy with this deadline is due after [`SPLIT_HORIZON_SECS`] (or never): it is
    /// written with the lasting records.
    fn due_later(&self, deadline: u64) -> bool {
        deadline > self.now.saturating_add(SPLIT_HORIZON_SECS)
    }

    /// Appends a record (a copy with its current `deadline`, or a marker with 0) to the
    /// current output, starting a new one when it is full.
    fn place(
        &mut self,
        meta: &Meta,
        key: &[u8],
        bytes: &[u8],
        deadline: u64,
    ) -> Result<(u32, u32)> {
        let need = bytes.len() as u64;
        // Markers (deadline 0), copies that never expire, and copies due after the horizon
        // are written as before: together, in outputs of the segment size.
        let lasting = deadline == 0 || self.due_later(deadline);
        let expiring_cap = expiring_output_bytes(self.inner.opts.segment_size);
        let full = self.current.as_ref().is_some_and(|o| {
            o.len > SegmentHeader::LEN
                && (o.len + need > self.inner.opts.segment_size
                    || (o.expiring
                        && ((lasting && self.split_lasting) || o.len + need > expiring_cap)))
        });
        if full {
            if let Some(o) = self.current.take() {
                self.done.push(o);
            }
        }
        if self.current.is_none() {
            let id = {
                let mut log = self.inner.log.lock();
                let id = log.manifest.next_file_id;
                log.manifest.next_file_id = crate::engine::next_id(id)?;
                id
            };
            let header = SegmentHeader {
                id,
                created_seq: self.snapshot_seq,
            };
            // Written under a temporary name: a `.seg` file appears only once the manifest
            // names it, so opening can tell an unpublished output from anything else.
            let path = segment_tmp_path(&self.inner.dir, id);
            faults::check(&path, FaultKind::Create).at(&path)?;
            let file = File::options()
                .create_new(true)
                .write(true)
                .open(&path)
                .at(&path)?;
            self.created.push(id);
            let mut writer = BufWriter::with_capacity(1 << 20, file);
            writer.write_all(&header.encode()).at(&path)?;
            self.current = Some(Output {
                id,
                writer,
                len: SegmentHeader::LEN,
                expiring: false,
                hint: HintWriter::new(id),
                stats: SegStats {
                    ttl_epoch: self.ttl_epoch,
                    ..SegStats::default()
                },
            });
        }
        let o = self.current.as_mut().ok_or(Error::Closed)?;
        let offset =
            u32::try_from(o.len).map_err(|_| Error::TooLarge("merge output offset".into()))?;
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        faults::check(&self.inner.dir, FaultKind::Write)?;
        o.writer.write_all(bytes)?;
        o.len += need;
        o.expiring |= !lasting;
        o.hint.add(meta, key, offset, len);
        o.stats.total += need;
        o.stats.hint_bytes += key.len() as u64 + policy::HINT_ENTRY_BYTES;
        if meta.flags & FLAG_SHADOWS != 0 || meta.kind == Kind::Tombstone {
            o.stats.shadowing += 1;
        }
        if meta.kind == Kind::Tombstone {
            o.stats.dead += need;
            if meta.flags & FLAG_MARKER != 0 {
                o.stats.markers += need;
            }
        }
        o.stats.dies_by = o.stats.dies_by.max(deadline);
        if meta.kind == Kind::Put && policy::expires_soon(deadline, self.now) {
            o.stats.soon += need;
        }
        Ok((o.id, offset))
    }

    /// fsyncs every output and writes its hint, unless the output is about to die whole or
    /// short-lived (sorted by deadline, most outputs of a merge under TTL churn are): such a
    /// hint waits as a sealed segment's does (`compaction::write_hint_for`), and the caller
    /// sets those outputs aside once they are in the segment set. Returns the outputs, and
    /// the ids whose hint waits.
    fn finish(mut self) -> Result<(Vec<Written>, Vec<u32>)> {
        if let Some(o) = self.current.take() {
            self.done.push(o);
        }
        let mut out = Vec::new();
        let mut waiting = Vec::new();
        for mut o in std::mem::take(&mut self.done) {
            let file = o
                .writer
                .into_inner()
                .map_err(|e| Error::from(e.into_error()))?;
            faults::sync_file(&file, &segment_tmp_path(&self.inner.dir, o.id), false)?;
            // The current epoch, as `write_hint_for` reads it: a default changed during the
            // merge makes the outputs' deadlines stale, and then their hints do not wait.
            let epoch = self.inner.ttl_epoch.load(Ordering::Acquire);
            let (entries, descents) = o.hint.shape();
            o.stats.key_ordered = policy::few_runs(descents, entries);
            let s = &o.stats;
            let always = self.inner.opts.hint_every_segment;
            if !policy::hint_worth(s.hint_bytes, s.total, s.key_ordered, always) {
                // Small records in key order: opens scan the output (`policy::hint_worth`).
            } else if super::HintWait::IfShortLived.holds(&o.stats, self.now, epoch) {
                waiting.push(o.id);
            } else {
                super::write_hint_file(self.inner, o.id, o.hint)?;
            }
            out.push((o.id, o.stats, o.len));
        }
        self.finished = true;
        Ok((out, waiting))
    }
}

impl SegmentHeader {
    const LEN: u64 = crate::format::SEGMENT_HEADER_LEN as u64;
}

struct Move {
    /// The keyspace's id (its core is in `Copying::keyspaces`: no reference count touched per
    /// record, a cache line the writer's own clones keep moving between cores).
    ks: u32,
    /// Inline for keys of up to 23 bytes: a merge moves up to millions of entries, and an
    /// allocation each cost a tenth of its time.
    key: Key,
    seq: u64,
    from: (u32, u32),
    to: (u32, u32),
    len: u32,
}

/// Records of one input decided per hold of a keyspace's read lock. Taking the lock per record
/// let every decision queue behind the writer and the reaper (a waiting writer holds new
/// readers back): with TTLs spread over a minute, a merge of half-dead segments copied about a
/// thousand records a second and the worker merged once in two minutes while dead bytes piled
/// up (DESIGN.md §7).
const DECIDE_PER_LOCK: usize = 512;

/// [`DECIDE_PER_LOCK`] for an input in which nothing was replaced ([`decide`]) while every
/// expiry has been reported: its puts without the SHADOWS flag are decided from their own
/// metadata, without a lookup (a few tens of nanoseconds each), and what held such a merge up
/// was the wait for each lock. The records that may still need a lookup ([`may_look_up`])
/// are counted, and a chunk ends at [`DECIDE_PER_LOCK`] of them too, so a hold stays within
/// 512 lookups (a review measured 9.4-10 ms holds for a clean segment of tombstones decided
/// 8,192 at a time, against 1 ms).
const DECIDE_PER_LOCK_CLEAN: usize = 8192;

/// True when deciding `rec` may take a key-directory lookup even in a clean input: anything
/// but a put, and a put that shadows an older version ([`decide`]).
fn may_look_up(rec: &Record<'_>) -> bool {
    rec.meta.kind != Kind::Put || rec.meta.flags & FLAG_SHADOWS != 0
}

/// A merge reads at most this many segments' worth of input (the policy picks overdue, then
/// the deadest); the rest waits for the next merge, which the worker starts after its next
/// expiry pass. One merge of every half-dead segment at once (35 segments, 2 GiB) ran for tens
/// of seconds while dead bytes kept piling up in the segments it had not reached.
const MERGE_INPUT_SEGMENTS: u64 = 4;

/// A record decided to be copied, or a no-resurrection marker to write, not written yet:
/// both are written once every input is decided, in output order ([`order_copies`]). The
/// record is `len` bytes at `off` of the merge's input number `input`; its other header
/// fields are read again from there when it is written (the mapping does not change), so
/// that a merge of four segments of small records, which holds millions of these at once,
/// keeps 64 bytes per record rather than the 104 a copy of its header and its move took
/// (DESIGN.md §7, "Merge memory"). A marker is encoded anew from the record it stands for
/// and moves no entry.
struct Copy {
    deadline: u64,
    seq: u64,
    key: Key,
    ks: u32,
    input: u32,
    off: u32,
    len: u32,
    marker: bool,
}

/// The order copies are written in: by deadline (records that expire together share output
/// files, which then die whole and are dropped unread, DESIGN.md §7), records that never
/// expire last and in key order (a compacted store scans them sequentially), ties by keyspace
/// and key, then newest first: the order open and the hint count as key order, so a marker
/// and a copy of one key (a key deleted and written again) do not count as a break (a
/// review's probe: outputs with 36-73 breaks in 700-800 records, each given a hint, with
/// such ties in arbitrary order).
fn order_copies(copies: &mut [Copy]) {
    copies.sort_unstable_by(|a, b| {
        (a.deadline, a.ks, &a.key, std::cmp::Reverse(a.seq)).cmp(&(
            b.deadline,
            b.ks,
            &b.key,
            std::cmp::Reverse(b.seq),
        ))
    });
}

/// The copy step's state: what is decided from the key directory and where kept records go.
struct Copying<'a, 'r> {
    inner: &'a Inner,
    now: u64,
    outside_min: u64,
    /// Expiries after this second may not have been reported yet ([`Chosen`]).
    unreported_after: u64,
    outputs: Outputs<'a>,
    copies: Vec<Copy>,
    /// Per input: nothing in it was replaced when the merge began ([`decide`]).
    clean: Vec<bool>,
    keyspaces: HashMap<u32, Option<Arc<KeyspaceCore>>>,
    report: &'r mut CompactionReport,
}

impl Copying<'_, '_> {
    /// Decides every record of `pending` (read from `seg`, the merge's input number `input`),
    /// one read lock per keyspace, then notes the copies and the markers (written by
    /// [`Copying::write_copies`]); empties `pending`.
    fn settle(
        &mut self,
        input: usize,
        seg: &Segment,
        pending: &mut Vec<(u32, u32, Record<'_>)>,
    ) -> Result<()> {
        // Per record: the decision and, when copied, the deadline (`None`: a dropped
        // keyspace's record, dead and needing no marker).
        let mut decided: Vec<Option<(Decision, u64)>> = vec![None; pending.len()];
        // One read lock per keyspace in the chunk (records of several keyspaces interleave:
        // a document write and its history record share a batch).
        let mut ids: Vec<u32> = pending.iter().map(|(_, _, r)| r.meta.keyspace).collect();
        ids.sort_unstable();
        ids.dedup();
        for ks_id in ids {
            let inner = self.inner;
            let core = self
                .keyspaces
                .entry(ks_id)
                .or_insert_with(|| inner.keyspace_by_id(ks_id));
            // A dropped keyspace: its records are dead and need no marker (left `None`).
            let Some(core) = core else { continue };
            let st = core.state.read();
            let clean = self.clean[input];
            for (slot, (off, _, rec)) in decided.iter_mut().zip(pending.iter()) {
                if rec.meta.keyspace == ks_id {
                    let d = decide(
                        &st,
                        seg.id,
                        *off,
                        rec,
                        (self.now, self.outside_min, self.unreported_after),
                        clean,
                    );
                    // A clean segment's copy names a version the key directory still points
                    // at, or one replaced since the merge began (or since freed as expired).
                    debug_assert!(
                        !clean
                            || !matches!(d.0, Decision::Copy)
                            || st.get(rec.key).is_none_or(|e| {
                                (e.file, e.offset) == (seg.id, *off)
                                    || e.seq >= self.outputs.snapshot_seq
                            }),
                        "a clean segment's record was replaced before the merge began"
                    );
                    *slot = Some(d);
                }
            }
            // A waiting writer goes next (see `handle_fired`).
            parking_lot::RwLockReadGuard::unlock_fair(st);
        }
        let input = u32::try_from(input).map_err(|_| Error::TooLarge("merge inputs".into()))?;
        for ((off, len, rec), d) in pending.drain(..).zip(decided) {
            let Some((decision, deadline)) = d else {
                continue;
            };
            // Only puts are copied ([`decide`]), which `write_copies` relies on to tell a
            // marker from a copy.
            debug_assert!(!matches!(decision, Decision::Copy) || rec.meta.kind == Kind::Put);
            let marker = match decision {
                Decision::Drop => continue,
                Decision::Copy => false,
                // Written with the lasting copies, in key order: markers written as they were
                // decided (input order, random keys) broke the output's key order, so it got a
                // hint a quarter its size (DESIGN.md §7, "Output order").
                Decision::Marker => true,
            };
            self.copies.push(Copy {
                deadline: if marker { ttl::NEVER } else { deadline },
                seq: rec.meta.seq,
                key: Key::from_slice(rec.key),
                ks: rec.meta.keyspace,
                input,
                off,
                len,
                marker,
            });
        }
        Ok(())
    }

    /// Writes the noted copies and markers in output order and returns the copies' moves,
    /// destinations filled in, in that order.
    fn write_copies(&mut self, inputs: &[Arc<Segment>]) -> Result<Vec<Move>> {
        let mut copies = std::mem::take(&mut self.copies);
        order_copies(&mut copies);
        self.outputs.split_lasting = copies
            .iter()
            .any(|c| !c.marker && self.outputs.due_later(c.deadline));
        let mut moves = Vec::with_capacity(copies.len());
        let mut buf = Vec::new();
        for Copy {
            deadline,
            seq,
            key,
            ks,
            input,
            off,
            len,
            marker,
        } in copies
        {
            let seg = &inputs[input as usize];
            // The scan decoded this record in this mapping, so it is there and its header
            // reads; never copy an empty stand-in if that ever failed.
            let (raw, meta) = seg
                .read(off, len)
                .and_then(|raw| Some((raw, record::plausible(raw)?)))
                .ok_or_else(|| {
                    Error::corruption(seg.path(), u64::from(off), "a merge input's record changed")
                })?;
            if marker {
                let meta = Meta {
                    kind: Kind::Tombstone,
                    flags: FLAG_SHADOWS | FLAG_MARKER,
                    ttl: ItemTtl::Inherit,
                    ..meta
                };
                buf.clear();
                record::encode(&mut buf, &meta, &key, &[]);
                self.report.markers_written += 1;
                // Deadline 0, as before: a marker sets no `dies_by` (sorted with the lasting
                // records only for the order).
                self.outputs.place(&meta, &key, &buf, 0)?;
                continue;
            }
            let to = self.outputs.place(&meta, &key, raw, deadline)?;
            self.report.records_copied += 1;
            moves.push(Move {
                ks,
                key,
                seq,
                from: (seg.id, off),
                to,
                len,
            });
        }
        Ok(moves)
    }
}

/// What happens to a record at `off` of segment `file`, and, when it is copied, its deadline.
/// `clean`: nothing in the segment was replaced when the merge began
/// ([`SegStats::replaced`](crate::stats::SegStats) was 0 under the log mutex).
/// `bounds` is the merge's `(now, outside_min, unreported_after)`.
fn decide(
    st: &KeyspaceState,
    file: u32,
    off: u32,
    rec: &Record<'_>,
    bounds: (u64, u64, u64),
    clean: bool,
) -> (Decision, u64) {
    let (now, outside_min, unreported_after) = bounds;
    let droppable_unlooked = rec.meta.flags & FLAG_SHADOWS == 0 || outside_min > rec.meta.seq;
    if rec.meta.kind == Kind::Put && (clean || droppable_unlooked) {
        let at = ttl::expires_at(
            WriteSecs::saturating(rec.meta.ts()).get(),
            rec.meta.ttl,
            &st.history,
        );
        if !ttl::is_expired(at, now) {
            // In a clean segment an unexpired put is its key's newest version, or was when
            // the merge began (a write since then has a sequence number past the outputs'
            // `created_seq`, so what it replaced or deleted stays hidden while the copy is on
            // disk, and the move finds the entry changed and counts the copy dead): copied
            // without a lookup, with the deadline an entry naming it has (same write second
            // and TTL). With TTLs spread over a minute and keys written once, this is most of
            // what a merge used to look up.
            if clean {
                return (Decision::Copy, at);
            }
        } else if droppable_unlooked && at <= unreported_after {
            // A put expired by its own metadata is dead whatever the key directory says (an
            // entry naming it has the same deadline, and expiry is final), so when the
            // no-resurrection rule lets it go without a lookup (no SHADOWS flag, or nothing
            // older outside the merge) and its expiry was reported (or no one listens) none is
            // made.
            return (Decision::Drop, ttl::NEVER);
        }
    }
    decide_by_lookup(st, file, off, rec, bounds)
}

/// The decision taken from the key directory: copy the live version it names, drop a dead
/// record that cannot bring an older version back, or replace it with a marker (the
/// no-resurrection rule, module docs and DESIGN.md section 6). An expired version it still
/// names whose deadline is after `unreported_after` is copied too: its expiry event may not
/// have gone out yet, and the next open reports it only if the record is still on disk
/// (DESIGN.md section 11).
fn decide_by_lookup(
    st: &KeyspaceState,
    file: u32,
    off: u32,
    rec: &Record<'_>,
    (now, outside_min, unreported_after): (u64, u64, u64),
) -> (Decision, u64) {
    let current = st.get(rec.key);
    let named =
        rec.meta.kind == Kind::Put && current.is_some_and(|e| e.file == file && e.offset == off);
    let live =
        named && current.is_some_and(|e| st.is_live(e, now) || st.expires_at(e) > unreported_after);
    let unshadowed = rec.meta.flags & FLAG_SHADOWS == 0 && rec.meta.kind == Kind::Put;
    let hidden_by_newer =
        current.is_some_and(|e| e.seq > rec.meta.seq && e.flags & FLAG_SHADOWS != 0);
    let nothing_older_outside = outside_min > rec.meta.seq;
    if live {
        (
            Decision::Copy,
            current.map_or(ttl::NEVER, |e| st.expires_at(e)),
        )
    } else if unshadowed || hidden_by_newer || nothing_older_outside {
        (Decision::Drop, ttl::NEVER)
    } else {
        (Decision::Marker, ttl::NEVER)
    }
}

fn crash_here(inner: &Inner, at: CrashPoint) -> Result<()> {
    let observer = inner.merge_observer.lock().clone();
    if let Some(observe) = observer {
        (observe.0)(at);
    }
    if *inner.merge_crash_at.lock() == Some(at) {
        inner.poison();
        return Err(Error::from(std::io::Error::other(format!(
            "injected crash at {at:?}"
        ))));
    }
    Ok(())
}

pub(crate) fn run(inner: &Inner, full: bool, idle_below: Option<u32>) -> Result<CompactionReport> {
    let result = run_locked(inner, full, idle_below);
    if result.is_err() {
        // Writers are not paced for a merge that failed: whoever runs the next one (the
        // background worker backs off for up to a minute) publishes the debt again.
        inner.reclaim_debt_ppm.store(0, Ordering::Relaxed);
    }
    result
}

/// [`run`], under `merge_lock`.
fn run_locked(inner: &Inner, full: bool, idle_below: Option<u32>) -> Result<CompactionReport> {
    let _one_at_a_time = inner.merge_lock.lock();
    inner.check_writable()?;
    // 1. Choose, then check the inputs; under Salvage a damaged input is set aside for good
    // and the choice made again without it (the no-resurrection bound depends on the set).
    let Chosen {
        now,
        snapshot_seq,
        outside_min,
        unreported_after,
        inputs,
        clean,
        dropped,
    } = loop {
        let Some(chosen) = choose(inner, full, idle_below)? else {
            return Ok(CompactionReport::default());
        };
        if check_inputs(inner, &chosen.inputs)? {
            break chosen;
        }
    };
    let mut report = CompactionReport {
        segments_merged: inputs.len(),
        segments_dropped: dropped.len(),
        bytes_before: inputs.iter().chain(&dropped).map(|s| s.len()).sum(),
        ..CompactionReport::default()
    };

    // 2. Copy.
    let outputs = Outputs {
        inner,
        snapshot_seq,
        ttl_epoch: inner.ttl_epoch.load(Ordering::Acquire),
        now,
        done: Vec::new(),
        current: None,
        split_lasting: false,
        created: Vec::new(),
        finished: false,
    };
    let mut copying = Copying {
        inner,
        now,
        outside_min,
        unreported_after,
        outputs,
        copies: Vec::new(),
        clean,
        keyspaces: HashMap::new(),
        report: &mut report,
    };
    for (input, seg) in inputs.iter().enumerate() {
        let mut failure: Option<Error> = None;
        // Unreported expiries (a subscriber while the reaper is behind) are decided by lookup
        // whatever the segment: only without them are a clean input's puts lookup-free.
        let per_lock = if copying.clean[input] && copying.unreported_after == u64::MAX {
            DECIDE_PER_LOCK_CLEAN
        } else {
            DECIDE_PER_LOCK
        };
        let mut pending: Vec<(u32, u32, Record<'_>)> = Vec::with_capacity(per_lock);
        let mut lookups = 0;
        let end = scan(seg.bytes(), |off, len, rec| {
            if failure.is_some() {
                return;
            }
            pending.push((off, len, *rec));
            if may_look_up(rec) {
                lookups += 1;
            }
            if pending.len() == per_lock || lookups == DECIDE_PER_LOCK {
                lookups = 0;
                if let Err(e) = copying.settle(input, seg, &mut pending) {
                    failure = Some(e);
                }
            }
        });
        if failure.is_none() {
            if let Err(e) = copying.settle(input, seg, &mut pending) {
                failure = Some(e);
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if let ScanEnd::Bad { offset, err } = end {
            return Err(Error::corruption(
                seg.path(),
                offset as u64,
                err.to_string(),
            ));
        }
    }
    let mut moves = copying.write_copies(&inputs)?;
    let Copying {
        outputs, keyspaces, ..
    } = copying;
    order_moves(&mut moves, &keyspaces);
    let (written, hints_waiting) = outputs.finish()?;
    report.segments_written = written.len();
    crash_here(inner, CrashPoint::AfterOutputs)?;

    // Every drop above was decided from the key directory, which may point at newer versions
    // (or miss deleted keys) whose records still sit in the write buffer under
    // `SyncPolicy::Never`/`Periodic`. Publishing would make those drops durable before the
    // writes that justify them: a crash would then lose a key whose old version was synced.
    // So the log is made durable up to everything appended so far (which covers every write
    // the decisions saw) before the manifest swaps the inputs out.
    let decided_upto = inner.log.lock().appended;
    // Until the manifest names them, the outputs are ours to remove if anything fails (the
    // worker retries failed merges: leaving them would fill the disk a copy per attempt).
    let unpublished = UnpublishedOutputs {
        inner,
        ids: written.iter().map(|&(id, _, _)| id).collect(),
    };
    inner.sync_to(decided_upto)?;

    // 3. Publish. The outputs' byte accounting goes in with the manifest, so a write that
    // supersedes a moved copy from now on finds its segment's counters. A manifest failure
    // before its rename changes nothing (the outputs are still `.seg.tmp` leftovers).
    //
    // The manifest's fsyncs run without the log mutex (writers go on; the manifest lock keeps
    // every other manifest replacement out), so the change is applied to `log.manifest` after
    // the store: rotations in between only add to it, and no key-directory entry points at an
    // output before step 4.
    let retired: HashSet<u32> = inputs.iter().chain(&dropped).map(|s| s.id).collect();
    {
        let _manifest = inner.lock_manifest()?;
        // Retired files are unlinked when their last reader lets go; until then the manifest
        // lists them so that opening may delete them (and nothing else unlisted).
        let mut still_retired = {
            let log = inner.log.lock();
            log.manifest.retired.clone()
        };
        still_retired.retain(|id| segment_path(&inner.dir, *id).exists());
        still_retired.extend(retired.iter().copied());
        still_retired.sort_unstable();
        still_retired.dedup();
        let swap = |m: &mut Manifest| {
            m.sealed.retain(|s| !retired.contains(&s.id));
            m.sealed.extend(
                written
                    .iter()
                    .map(|&(id, _, len)| SealedSegment { id, len }),
            );
            m.retired.clone_from(&still_retired);
        };
        let (manifest, taken) = {
            let mut log = inner.log.lock();
            let mut manifest: Manifest = log.manifest.clone();
            swap(&mut manifest);
            manifest.next_seq = log.next_seq;
            (manifest, std::mem::take(&mut log.pending))
        };
        inner.store_manifest_with(&manifest, taken)?;
        let mut log = inner.log.lock();
        swap(&mut log.manifest);
        // A merge whose outputs hold as many bytes as its inputs, dropping nothing, reclaimed
        // nothing: its outputs wait for the next merge or drop that does (`Rules::reclaim_gen`).
        let before: u64 = inputs.iter().map(|s| s.len()).sum();
        let after: u64 = written.iter().map(|&(_, _, len)| len).sum();
        let sterile_in = if dropped.is_empty() && after >= before {
            log.reclaim_gen.saturating_add(1)
        } else {
            log.reclaim_gen = log.reclaim_gen.saturating_add(1);
            0
        };
        log.segstats.extend(written.iter().map(|&(id, stats, _)| {
            (
                id,
                SegStats {
                    sterile_in,
                    sterile_dead: stats.dead,
                    ..stats
                },
            )
        }));
    }
    unpublished.published();
    crash_here(inner, CrashPoint::AfterPublish)?;
    // The manifest names the outputs: give them their real names (a crash before this is
    // rolled forward at open) and map them. A failure here leaves the disk ahead of memory:
    // poison.
    let opened = publish_names(inner, &written)
        .and_then(|()| {
            written
                .iter()
                .map(|(id, _, _)| Segment::open(&inner.dir, *id).map(Arc::new))
                .collect::<Result<Vec<_>>>()
        })
        .inspect_err(|_| inner.poison())?;

    // 4. Outputs in, key directory moved. Neither needs the log mutex, so writers are not held
    // up by a big merge: each keyspace lock is taken for a chunk of moves at a time, and an
    // entry moves only if it still points at the copied version (a write or an expiry in the
    // meantime wins, and the copy is counted dead).
    {
        let mut set = inner.segments.write();
        for seg in &opened {
            set.sealed.insert(seg.id, Arc::clone(seg));
            report.bytes_after += seg.len();
        }
    }
    // Outputs whose hint waits join the sealed segments whose hint waits, once in the set (the
    // worker forgets a waiting id whose segment it does not find there): it writes each one's
    // if the output outlives the wait (`compaction::write_deferred_hints`).
    if !hints_waiting.is_empty() {
        let mut deferred = inner.hints_deferred.lock();
        for id in hints_waiting {
            deferred.entry(id).or_insert(now);
        }
    }
    let mut superseded: HashMap<u32, u64> = HashMap::new();
    for chunk in moves.chunk_by(|a, b| a.ks == b.ks) {
        let Some(Some(core)) = chunk.first().and_then(|m| keyspaces.get(&m.ks)) else {
            continue;
        };
        for part in chunk.chunks(MOVES_PER_LOCK) {
            let mut st = core.state.write();
            // The part's entries asked for together, then found in cache one by one.
            st.map.prefetch(part.iter().map(|m| &m.key));
            for m in part {
                if !st.relocate(&m.key, m.seq, m.from, m.to) {
                    *superseded.entry(m.to.0).or_default() += u64::from(m.len);
                }
            }
            parking_lot::RwLockWriteGuard::unlock_fair(st);
        }
    }
    crash_here(inner, CrashPoint::AfterKeydirMove)?;

    // 5. Retire inputs.
    {
        let mut set = inner.segments.write();
        for id in &retired {
            if let Some(seg) = set.sealed.remove(id) {
                seg.mark_obsolete();
            }
        }
    }
    {
        let mut log = inner.log.lock();
        for id in &retired {
            log.segstats.remove(id);
        }
        for (id, dead) in superseded {
            if let Some(s) = log.segstats.get_mut(&id) {
                s.dead += dead;
                s.replaced += dead;
            }
        }
    }
    inner
        .merges
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(report)
}

/// Puts `moves` in the order they are cheapest to apply, keyspace by keyspace: an ordered
/// map's in key order (consecutive descents share the upper levels of the tree, which stay in
/// the caches), a hashed map's in its index order ([`KeyMap::locality`]: each index table is
/// walked from one end to the other instead of one cache miss per move), so each hold of the
/// write lock is shorter. Moves are independent (each checks that the entry still names its
/// source), so the order changes nothing else.
///
/// [`KeyMap::locality`]: crate::keydir::KeyMap::locality
fn order_moves(moves: &mut [Move], keyspaces: &HashMap<u32, Option<Arc<KeyspaceCore>>>) {
    moves.sort_unstable_by_key(|m| m.ks);
    for chunk in moves.chunk_by_mut(|a, b| a.ks == b.ks) {
        let locality = keyspaces
            .get(&chunk[0].ks)
            .and_then(Option::as_ref)
            .and_then(|core| core.state.read().map.locality());
        match locality {
            Some(loc) => chunk.sort_by_cached_key(|m| loc.of(&m.key)),
            None => chunk.sort_unstable_by(|a, b| a.key.cmp(&b.key)),
        }
    }
}

/// Finished merge outputs that no manifest names yet: removed on drop unless published. (After
/// a failed directory fsync the store is poisoned and open settles the files.)
struct UnpublishedOutputs<'a> {
    inner: &'a Inner,
    ids: Vec<u32>,
}

impl UnpublishedOutputs<'_> {
    fn published(mut self) {
        self.ids.clear();
    }
}

impl Drop for UnpublishedOutputs<'_> {
    fn drop(&mut self) {
        if self
            .inner
            .poisoned
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return; // the manifest may name them after all: leave them to open
        }
        remove_outputs(&self.inner.dir, &self.ids);
    }
}

/// Removes unpublished merge outputs (their `.seg.tmp` and hint files), best effort: open
/// removes whatever is left.
fn remove_outputs(dir: &std::path::Path, ids: &[u32]) {
    for &id in ids {
        let _ = std::fs::remove_file(segment_tmp_path(dir, id));
        let _ = std::fs::remove_file(hint_path(dir, id));
    }
}

/// Key-directory moves made under one keyspace write lock (a millisecond or two). The lock goes
/// to a waiting writer or reaper at each release, so smaller chunks spent most of their time
/// waiting for it to come back: 256 per lock moved at 4.1-4.4 µs per entry under mixed-TTL
/// churn, 1,024 at 2.1-2.3 µs (DESIGN.md §7).
const MOVES_PER_LOCK: usize = 1024;

/// Renames published outputs from `.seg.tmp` to `.seg` and fsyncs the directory.
fn publish_names(inner: &Inner, written: &[(u32, SegStats, u64)]) -> Result<()> {
    for (id, _, _) in written {
        let tmp = segment_tmp_path(&inner.dir, *id);
        faults::rename(&tmp, &segment_path(&inner.dir, *id)).at(&tmp)?;
    }
    sync_dir(&inner.dir).at(&inner.dir)?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Decision {
    Copy,
    Drop,
    Marker,
}

/// What a merge works on.
struct Chosen {
    /// The merge's instant, read under the log mutex with the rest: a put the reaper freed
    /// and a write then replaced before the snapshot has expired by then (the reaper read its
    /// clock before it freed the entry, and the clock never goes back), so no clean segment
    /// gets a record copied that was replaced before the merge began.
    now: u64,
    snapshot_seq: u64,
    outside_min: u64,
    /// With an expiry subscriber, the second through which expiries were reported when the
    /// merge began (`reaped_upto`; it only grows, so an older value only keeps more): an
    /// expired put the key directory still names with a later deadline is copied, not
    /// dropped, until the reaper reports it. `u64::MAX` without one (as for `early_drop`).
    unreported_after: u64,
    inputs: Vec<Arc<Segment>>,
    /// Per input: its `replaced` count was 0 (read with `snapshot_seq`, under the log mutex).
    clean: Vec<bool>,
    dropped: Vec<Arc<Segment>>,
}

/// Step 1: under the log mutex, picks the segments (never a damaged one: its unreadable bytes
/// cannot be proven dead) and takes `snapshot_seq` and `outside_min`.
fn choose(inner: &Inner, full: bool, idle_below: Option<u32>) -> Result<Option<Chosen>> {
    // A segment that died whole may go before the reaper frees its keys, unless someone
    // subscribed to expiry events: after a crash, those keys would be gone from disk without
    // their events (taken before the log mutex: the subscriber list is a leaf lock).
    let early_drop = !inner.has_subscribers();
    let unreported_after = if early_drop {
        u64::MAX
    } else {
        inner.expiry.lock().reaped_upto
    };
    let mut log = inner.log.lock();
    let now = inner.now_s();
    // An active segment that is mostly dead (and not tiny) is sealed so the policy can
    // reclaim it too; otherwise expired data in a slow-growing log would wait for rotation.
    let active_id = log.active.id();
    let active_ratio = policy::dead_ratio_when(
        inner.opts.compaction_dead_ratio,
        idle_below.is_some_and(|below| active_id < below),
    );
    let active = log.segstats.get(&active_id).copied().unwrap_or_default();
    if active.total >= inner.opts.segment_size / 16
        && active.dead > 0
        && active.dead_share() >= active_ratio
    {
        inner.rotate(&mut log)?;
    }
    let set = inner.segments.read();
    // Only segments that are open and undamaged are candidates: a listed segment that Salvage
    // could not open, or one found damaged, stays as it is.
    let candidates: Vec<u32> = log
        .manifest
        .sealed_ids()
        .into_iter()
        .filter(|id| set.sealed.get(id).is_some_and(|s| !s.is_damaged()))
        .collect();
    let rules = policy::Rules {
        dead_ratio: inner.opts.compaction_dead_ratio,
        max_lag_secs: inner.opts.max_reclaim_lag.as_secs(),
        max_merge_bytes: MERGE_INPUT_SEGMENTS.saturating_mul(inner.opts.segment_size),
        // Read under the log mutex, which a default-TTL change holds while it bumps the epoch.
        early_drop: early_drop.then(|| inner.ttl_epoch.load(Ordering::Acquire)),
        idle_below,
        reclaim_gen: log.reclaim_gen,
        coalesce_below: inner.opts.segment_size / 2,
    };
    let sel = policy::select(&candidates, &log.segstats, now, &rules, full);
    // Writers are paced while merges are behind: this one leaves segments due for a merge to
    // the next (`Inner::pace`). Not for a full compaction (everything is "due" then), and only
    // on a store whose clock drives background work: one whose caller compacts it when it
    // likes would leave writers paced until that caller's next call.
    if inner.opts.clock.drives_background() && !full {
        let debt = if sel.deferred > 0 {
            policy::debt_ppm(sel.debt, sel.kept)
        } else {
            0
        };
        inner.reclaim_debt_ppm.store(debt, Ordering::Relaxed);
    }
    if sel.is_empty() {
        return Ok(None);
    }
    let retired: HashSet<u32> = sel.drop.iter().chain(&sel.merge).copied().collect();
    let outside_min = set
        .sealed
        .values()
        .filter(|s| !retired.contains(&s.id))
        .map(|s| s.header.created_seq)
        .chain(std::iter::once(log.active.header.created_seq))
        .min()
        .unwrap_or(u64::MAX);
    let pick = |ids: &[u32]| -> Vec<Arc<Segment>> {
        ids.iter()
            .filter_map(|id| set.sealed.get(id).cloned())
            .collect()
    };
    let inputs = pick(&sel.merge);
    let clean = inputs
        .iter()
        .map(|seg| log.segstats.get(&seg.id).is_some_and(|s| s.replaced == 0))
        .collect();
    Ok(Some(Chosen {
        now,
        snapshot_seq: log.next_seq,
        outside_min,
        unreported_after,
        inputs,
        clean,
        dropped: pick(&sel.drop),
    }))
}

/// Reads every input whole before anything is written: a merge must never drop the records
/// behind damage (zeroed bytes end a plain scan as if the segment ended there). Returns true
/// when all are whole. Damage is `Error::Corruption` (Strict: nothing written, inputs stay
/// published) or, under Salvage, marks the segment damaged and counts it (returns false: the
/// caller chooses again without it).
fn check_inputs(inner: &Inner, inputs: &[Arc<Segment>]) -> Result<bool> {
    let mut whole = true;
    for seg in inputs {
        let end = usize::try_from(seg.len()).unwrap_or(usize::MAX);
        let damage = scan_all(seg.bytes(), end, |_, _, _| {});
        let Some(first) = damage.first() else {
            continue;
        };
        if inner.opts.recovery == RecoveryMode::Strict {
            return Err(Error::corruption(
                seg.path(),
                first.offset as u64,
                format!("{} (merge refused: the input stays as it is)", first.err),
            ));
        }
        seg.mark_damaged();
        inner
            .damage
            .segment(damage.iter().map(|d| d.len() as u64).sum());
        whole = false;
    }
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keydir::{Entry, Key};
    use crate::ttl::{DefaultTtl, TtlChange};

    /// A noted copy stays 64 bytes (a merge holds millions at once; DESIGN.md §7, "Merge
    /// memory").
    #[test]
    fn a_noted_copy_takes_64_bytes() {
        assert_eq!(std::mem::size_of::<Copy>(), 64);
    }

    fn code(d: &(Decision, u64)) -> (u8, u64) {
        (
            match d.0 {
                Decision::Copy => 0,
                Decision::Drop => 1,
                Decision::Marker => 2,
            },
            d.1,
        )
    }

    #[test]
    fn dropping_without_a_lookup_decides_as_the_lookup_would() {
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut checked = 0u64;
        let mut clean_checked = 0u64;
        // Random history, record, entry and instants (2 M cases found no difference in review).
        for _ in 0..200_000 {
            let mut history = Vec::new();
            let mut since = 0;
            for i in 0..1 + next(4) {
                if i > 0 {
                    since += next(30);
                }
                let default = match next(4) {
                    0 => DefaultTtl::Off,
                    1 => DefaultTtl::NeverExpire,
                    _ => DefaultTtl::Seconds(1 + next(25) as u32),
                };
                history.push(TtlChange { since, default });
            }
            let own = match next(3) {
                0 => ItemTtl::Inherit,
                1 => ItemTtl::Never,
                _ => ItemTtl::Seconds(1 + next(25) as u32),
            };
            let kind = if next(4) == 0 {
                Kind::Tombstone
            } else {
                Kind::Put
            };
            let flags = if next(2) == 0 { FLAG_SHADOWS } else { 0 };
            let seq = 10 + next(50);
            let write_ms = next(80_000);
            let meta = Meta {
                kind,
                flags,
                keyspace: 1,
                ttl: own,
                seq,
                write_ms,
            };
            let rec = Record {
                meta,
                key: b"k",
                value: b"",
            };
            let (file, off) = (7, 64);
            let mut st = KeyspaceState {
                history,
                ..KeyspaceState::default()
            };
            let entry = |seq: u64, file: u32, off: u32, ts: u64, ttl: ItemTtl, flags: u8| Entry {
                seq,
                file,
                offset: off,
                len: 30,
                ts: WriteSecs::saturating(ts),
                ttl: ttl.to_wire(),
                flags,
                armed: ttl::NEVER,
            };
            let mut names_it = false;
            match next(4) {
                0 => {}
                1 if kind == Kind::Put => {
                    names_it = true;
                    st.map.insert(
                        Key::from_slice(b"k"),
                        entry(seq, file, off, meta.ts(), own, flags),
                    );
                }
                _ => {
                    let s = if next(2) == 0 {
                        seq + 1 + next(10)
                    } else {
                        seq.saturating_sub(1 + next(5))
                    };
                    let f = if next(2) == 0 { FLAG_SHADOWS } else { 0 };
                    st.map.insert(
                        Key::from_slice(b"k"),
                        entry(s, 20 + next(6) as u32, 64, next(80), own, f),
                    );
                }
            }
            let now = next(120);
            let outside_min = next(80);
            // Expiries reported through a random second, or no one listening.
            let unreported_after = if next(2) == 0 { u64::MAX } else { next(120) };
            let bounds = (now, outside_min, unreported_after);
            let a = code(&decide_by_lookup(&st, file, off, &rec, bounds));
            let b = code(&decide(&st, file, off, &rec, bounds, false));
            assert_eq!(
                a, b,
                "rec {meta:?} st {st:?} now {now} outside_min {outside_min}"
            );
            // Without any lookup in a clean segment: the same decision whenever the key
            // directory names the record, as it does for every unexpired put of such a
            // segment (the debug assertion in `settle` checks that in every merge).
            if names_it {
                let c = code(&decide(&st, file, off, &rec, bounds, true));
                assert_eq!(a, c, "clean: rec {meta:?} st {st:?} now {now}");
                clean_checked += 1;
            }
            checked += 1;
        }
        assert!(checked > 0 && clean_checked > 0);
    }
}
