//! Opening a directory: lock, manifest, segments (hint or scan), torn-tail truncation, key
//! directory, timers.
//!
//! Per key the record with the highest sequence number wins, whichever file it is in: merge
//! outputs hold records of many ages, so file order means nothing. Tombstones (and compaction
//! markers) take part in that contest and are dropped only at the end, so an older put can
//! never win against a newer delete because of the order in which files were read.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use super::clockfile::{ClockFile, DurablePoint};
use super::{Catalog, ExpiryState, Inner, LogState, SegmentSet};
use crate::error::{Error, IoContext, Result};
use crate::format::hint::MARK_EVERY;
use crate::format::record::{Kind, Meta, FLAG_MARKER, FLAG_SHADOWS};
use crate::format::{hint, DecodeError, SegmentHeader, SEGMENT_HEADER_LEN};
use crate::keydir::{Entry, Key, KeyspaceCore, KeyspaceState};
use crate::log::active::ActiveWriter;
use crate::log::lock::DirLock;
use crate::log::manifest::{Manifest, SealedSegment};
use crate::log::scan::scan_all;
use crate::log::segment::Segment;
use crate::log::{hint_path, parse_file_name, segment_path};
use crate::options::{Options, RecoveryMode};
use crate::stats::{DamageCounters, SegStats};
use crate::ttl;

/// Largest sequence number a healthy database can reach (see the range check in `open`).
pub(crate) const MAX_SEQ: u64 = 1 << 62;
/// Largest file or keyspace id a healthy database can reach.
pub(crate) const MAX_FILE_ID: u32 = 1 << 31;

/// In-memory-only flag marking a loaded tombstone (record flags use bits 0–2).
const LOADED_TOMBSTONE: u8 = 0x80;

mod build;
pub(crate) use build::{PART_RECORDS, SHARD_RECORDS};

/// Bytes of one file the key directory points at, and the latest deadline among them.
#[derive(Default)]
struct FileLive {
    bytes: u64,
    dies_by: u64,
    /// Of `bytes`, those due within `policy::SHORT_LIVED_SECS` of the open.
    soon: u64,
}

impl FileLive {
    /// Counts what `other` counted too.
    fn add(&mut self, other: &FileLive) {
        self.bytes += other.bytes;
        self.dies_by = self.dies_by.max(other.dies_by);
        self.soon += other.soon;
    }
}

/// Hashes a segment file id with one multiply: ids are the store's own small integers, not
/// input anyone chooses, and SipHash per surviving key was 3 % of an open's samples.
#[derive(Default)]
struct FileIdHasher(u64);

impl std::hash::Hasher for FileIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Every put and tombstone seen, per keyspace, in no particular order. Sorting by key and then
/// by sequence (newest first) and keeping the first of each key picks the newest record; the
/// sorted result bulk-builds the key directory with full B-tree nodes.
///
/// One loader per file (files load in parallel), absorbed in manifest order, so the result is
/// the same as loading them one by one. Keyspaces and files are few: they are kept in short
/// vectors (the one used last is checked first) rather than hashed per record.
#[derive(Default)]
struct Loader {
    keys: Vec<(u32, Vec<(Key, Entry)>)>,
    /// The sorted runs kept as a hint's bytes (`HintRun`), per keyspace: a file's records
    /// are either here or in `keys`.
    hints: Vec<(u32, HintRun)>,
    /// What each version-4 hint read in place says its entries hold, per file.
    summaries: Vec<(u32, Tally)>,
    max_seq: u64,
    max_write_ms: u64,
    stats: Vec<(u32, SegStats)>,
}

/// The item for `id` in a short vector of `(id, item)`, added if missing; the last one is
/// checked first (records of one file or keyspace come in long runs).
fn slot<T: Default>(v: &mut Vec<(u32, T)>, id: u32) -> &mut T {
    let i = match v.iter().rposition(|(k, _)| *k == id) {
        Some(i) => i,
        None => {
            v.push((id, T::default()));
            v.len() - 1
        }
    };
    &mut v[i].1
}

impl Loader {
    fn stats_of(&mut self, file: u32) -> &mut SegStats {
        slot(&mut self.stats, file)
    }

    /// Counts a record of `file` in the file's stats and the loader's maxima.
    fn note(&mut self, file: u32, len: u32, meta: &Meta, key: &[u8]) {
        self.max_seq = self.max_seq.max(meta.seq);
        self.max_write_ms = self.max_write_ms.max(meta.write_ms);
        let stats = self.stats_of(file);
        stats.hint_bytes += key.len() as u64 + crate::compaction::policy::HINT_ENTRY_BYTES;
        if meta.flags & FLAG_SHADOWS != 0 || meta.kind == Kind::Tombstone {
            stats.shadowing += 1;
        }
        if meta.kind == Kind::Tombstone && meta.flags & FLAG_MARKER != 0 {
            stats.markers += u64::from(len);
        }
    }

    fn add(&mut self, file: u32, offset: u32, len: u32, meta: &Meta, key: &[u8]) {
        self.note(file, len, meta, key);
        let entry = loaded_entry(file, offset, len, meta);
        let keys = match self.keys.last_mut() {
            Some((ks, list)) if *ks == meta.keyspace => list,
            _ => slot(&mut self.keys, meta.keyspace),
        };
        if keys.len() == keys.capacity() {
            // Doubling, as `push` would.
            crate::log::mmap::reserve_temporary(
                keys,
                keys.capacity().max(64),
                crate::log::mmap::Filled::Freely,
            );
        }
        keys.push((Key::from_slice(key), entry));
    }

    /// Sorts each keyspace's records (key, then newest first; hint files are written in that
    /// order already, scanned segments are in log order), and notes in the stats of the loaded
    /// file(s) whether they came in key order up to a few breaks: `policy::few_runs` of the
    /// breaks within each keyspace, summed, over all the records, as `HintWriter::shape`
    /// counts them for a merge's output (`SegStats::key_ordered`, which decides whether a
    /// segment of small records needs a hint; one rule on both sides, or a segment a merge
    /// left without a hint would be scanned again after every open). A keyspace's records
    /// in a few runs (a merge's output in key order) take the stable sort, which merges
    /// runs; in random order (a fill's segment) or in deadline order (a merge's under TTLs)
    /// the unstable one: 1 M random keys opened in 0.11 s instead of 0.12 s.
    fn sort(&mut self) {
        use crate::compaction::policy::{few_runs, RUN_MIN};
        // A hint run was checked to be in order as it was read: no descent.
        let total = self.keys.iter().map(|(_, l)| l.len() as u64).sum::<u64>()
            + self.hints.iter().map(|(_, h)| h.len as u64).sum::<u64>();
        let limit = total / RUN_MIN + 1;
        let mut descents_all = 0u64;
        for (_, list) in &mut self.keys {
            let records = list.len() as u64;
            // Counted until there are too many to be a few runs, in this keyspace and in the
            // whole file: a count that stops at its cap decides both, one that does not is
            // exact.
            let cap = records / RUN_MIN + 1 + limit;
            let descents = list
                .windows(2)
                .filter(|w| record_order(&w[0], &w[1]).is_gt())
                .take(usize::try_from(cap).unwrap_or(usize::MAX))
                .count() as u64;
            descents_all = descents_all.saturating_add(descents);
            if descents == 0 {
                continue;
            }
            if few_runs(descents, records) {
                list.sort_by(record_order);
            } else {
                list.sort_unstable_by(record_order);
            }
        }
        let ordered = few_runs(descents_all, total);
        for (_, st) in &mut self.stats {
            st.key_ordered = ordered;
        }
    }

    /// What `parts` loaded (each sorted), in their order: per keyspace, one sorted run per
    /// part, merged when taken.
    fn combine(parts: Vec<Loader>) -> Combined {
        let mut all = Combined::default();
        for part in parts {
            all.summaries.extend(part.summaries);
            all.max_seq = all.max_seq.max(part.max_seq);
            all.max_write_ms = all.max_write_ms.max(part.max_write_ms);
            for (file, st) in part.stats {
                let mine = slot(&mut all.stats, file);
                mine.shadowing += st.shadowing;
                mine.markers += st.markers;
                mine.hint_bytes += st.hint_bytes;
                mine.key_ordered = st.key_ordered;
                mine.total = st.total;
            }
            for (ks, list) in part.keys {
                slot(&mut all.runs, ks).push(Run::Decoded(list));
            }
            for (ks, run) in part.hints {
                slot(&mut all.runs, ks).push(Run::Hint(run));
            }
        }
        all
    }
}

/// The entry a record of `file` at `offset`, `len` bytes long, gets in the key directory
/// (a tombstone's marked, until the merge at open drops it).
fn loaded_entry(file: u32, offset: u32, len: u32, meta: &Meta) -> Entry {
    let tombstone = if meta.kind == Kind::Tombstone {
        LOADED_TOMBSTONE
    } else {
        0
    };
    Entry {
        seq: meta.seq,
        file,
        offset,
        len,
        ts: crate::keydir::WriteSecs::saturating(meta.ts()),
        ttl: meta.ttl.to_wire(),
        flags: meta.flags | tombstone,
        armed: ttl::NEVER,
    }
}

/// Records of one keyspace from one file, sorted by key, newest first: decoded into
/// `(key, entry)` pairs (a scanned segment's, and tests'), or a checked hint's entries kept as
/// its bytes and decoded again as the merge at open reads them (DESIGN.md §2.3, "Hints read
/// in place").
enum Run {
    Decoded(Vec<(Key, Entry)>),
    Hint(HintRun),
}

impl Run {
    fn len(&self) -> usize {
        match self {
            Run::Decoded(v) => v.len(),
            Run::Hint(h) => h.len,
        }
    }
}

/// The error for a hint whose entries, decoded by the merge, are not what was checked before
/// (its summary, its marks, or its bytes changed under the mapping).
fn hint_mismatch(dir: &Path, file: u32) -> Error {
    Error::corruption(
        hint_path(dir, file),
        0,
        "hint's entries do not match its summary (or the file changed while open read it); \
         deleting the hint lets open scan its segment",
    )
}

/// A hint file's bytes: mapped, or read where mapping failed (and in tests).
enum HintBytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for HintBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            HintBytes::Mapped(m) => m,
            HintBytes::Read(v) => v,
        }
    }
}

/// One keyspace's entries of a checked hint whose entries were found in order (keyspace, key,
/// newest first): what the merge at open reads them from, in place of a decoded copy.
struct HintRun {
    bytes: Arc<HintBytes>,
    file: u32,
    /// The keyspace of the entries, and the length of the file's segment: the merge checks
    /// each entry against both, and that each comes after the one before (a version-4 hint's
    /// entries were not decoded before the merge, DESIGN.md §2.3).
    keyspace: u32,
    seg_len: u64,
    base_ms: u64,
    /// The entries' bytes in the hint: `from..to`.
    from: usize,
    to: usize,
    /// Entries.
    len: usize,
    /// The key and byte position of every [`MARK_EVERY`]-th entry, from the first: where a
    /// cut by key starts decoding.
    marks: Vec<(Key, usize)>,
    /// Set if decoding the entries again failed (the file changed under the mapping since it
    /// was checked): open then fails rather than miss the records.
    broken: AtomicBool,
    /// What the merge decoded of the entries, added up as each piece ends.
    tally: Mutex<Tally>,
}

/// What was decoded of a hint's entries: checked at the end of open against what a
/// version-4 hint's summary said of them (the summary is what open used before the merge:
/// the largest sequence number and write time, the stats), and each run's count against its
/// own (DESIGN.md §2.3).
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
struct Tally {
    count: u64,
    totals: hint::Totals,
}

impl Tally {
    /// Counts an entry.
    fn add(&mut self, meta: &Meta, key: &[u8], offset: u32, len: u32) {
        self.count += 1;
        self.totals.add(meta, key, offset, len);
    }

    /// Counts what `other` counted too.
    fn absorb(&mut self, other: &Tally) {
        self.count += other.count;
        self.totals.absorb(&other.totals);
    }
}

impl HintRun {
    /// Notes that the merge found an entry it cannot take (the open then fails); none.
    fn broke<T>(&self) -> Option<T> {
        self.broken.store(true, Ordering::Relaxed);
        None
    }

    /// The entries from byte `from` to byte `to`.
    fn entries(&self, from: usize, to: usize) -> hint::Entries<'_> {
        hint::Entries::resume(&self.bytes, self.base_ms, from, to)
    }

    /// Adds the keys of entries `at`, `at + step`, ... to `sample`, and returns the index
    /// after the last one taken (where the next sample would have been). Each is decoded
    /// onwards from the one taken before it when that lies fewer than [`MARK_EVERY`] entries
    /// back, else from the mark before it: at most `min(step, MARK_EVERY)` entries decoded per
    /// key taken.
    fn sample(&self, mut at: usize, step: usize, sample: &mut Vec<Key>) -> usize {
        // A walk and the index of the entry it decodes next.
        let mut walk: Option<(hint::Entries<'_>, usize)> = None;
        while at < self.len {
            let (mut entries, mut index) = match walk.take() {
                Some((e, i)) if i <= at && at - i < MARK_EVERY => (e, i),
                _ => {
                    let Some(&(_, pos)) = self.marks.get(at / MARK_EVERY) else {
                        break;
                    };
                    (self.entries(pos, self.to), at / MARK_EVERY * MARK_EVERY)
                }
            };
            while index < at && entries.next().is_some() {
                index += 1;
            }
            let Some(Ok((_, key, _, _))) = entries.next() else {
                break; // the merge finds the damage and fails the open
            };
            sample.push(Key::from_slice(key));
            walk = Some((entries, at + 1));
            at += step;
        }
        at
    }

    /// The byte position and index of the first entry whose key is not below `key`, which
    /// lies at or after `after` (a position and index this gave for a smaller key, or the
    /// run's start): decoded from `after` or from the last mark below `key`, whichever comes
    /// later, so the cuts of one run decode each entry at most once beyond a mark's worth per
    /// cut.
    fn cut(&self, key: &Key, after: (usize, usize)) -> (usize, usize) {
        let m = self.marks.partition_point(|(k, _)| k < key);
        let (mut pos, mut index) = match m.checked_sub(1).and_then(|i| self.marks.get(i)) {
            Some(&(_, at)) if (m - 1) * MARK_EVERY > after.1 => (at, (m - 1) * MARK_EVERY),
            _ => after,
        };
        let mut entries = self.entries(pos, self.to);
        while let Some(Ok((_, k, _, _))) = entries.next() {
            if k >= key.as_slice() {
                break;
            }
            index += 1;
            pos = entries.pos();
        }
        (pos, index)
    }
}

/// Every file's records, as sorted runs per keyspace.
#[derive(Default)]
struct Combined {
    runs: Vec<(u32, Vec<Run>)>,
    /// What each version-4 hint read in place says its entries hold, per file.
    summaries: Vec<(u32, Tally)>,
    max_seq: u64,
    max_write_ms: u64,
    stats: Vec<(u32, SegStats)>,
}

impl Combined {
    /// The sorted runs of keyspace `id`, one per file that holds its records.
    fn take_runs(&mut self, id: u32) -> Vec<Run> {
        match self.runs.iter().position(|(k, _)| *k == id) {
            Some(i) => self.runs.swap_remove(i).1,
            None => Vec::new(),
        }
    }
}

/// Key order, then newest first: the order of a hint file and of the merge at open.
fn record_order(a: &(Key, Entry), b: &(Key, Entry)) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then(b.1.seq.cmp(&a.1.seq))
}

/// Merges sorted runs (in `record_order`) into one, keeping the first record of each key;
/// between equal records the earlier run wins, as a stable sort of the runs laid end to end
/// would have it. A heap of run indices, so thousands of segments cost `log k` per record.
#[cfg(test)]
fn merge_runs(runs: Vec<Vec<(Key, Entry)>>) -> Vec<(Key, Entry)> {
    let mut out = Vec::with_capacity(runs.iter().map(Vec::len).sum());
    merge_runs_with(
        runs.into_iter().map(Vec::into_iter).collect(),
        |_| true,
        |r| out.push(r),
    );
    out
}

/// As `merge_runs` (the tests' form), over runs given as iterators, handing `out` only the
/// records for which `keep` (called on each key's first record, which it may change) says so,
/// in order: open's pass over the survivors runs while each record is in the cache, instead of
/// as one more pass over a vector of a million, and the survivors go straight where they are
/// kept (open's slab pages) rather than through a vector of their own.
fn merge_runs_with<I: Iterator<Item = (Key, Entry)>>(
    mut runs: Vec<I>,
    mut keep: impl FnMut(&mut (Key, Entry)) -> bool,
    mut out: impl FnMut((Key, Entry)),
) {
    let mut heads: Vec<Option<(Key, Entry)>> = runs.iter_mut().map(Iterator::next).collect();
    // True when run `a`'s head comes before run `b`'s.
    let before = |heads: &[Option<(Key, Entry)>], a: usize, b: usize| match (&heads[a], &heads[b]) {
        (Some(x), Some(y)) => record_order(x, y).then(a.cmp(&b)).is_lt(),
        (Some(_), None) => true,
        _ => false,
    };
    let sift_down = |heap: &mut [usize], heads: &[Option<(Key, Entry)>], mut i: usize| loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut first = i;
        if l < heap.len() && before(heads, heap[l], heap[first]) {
            first = l;
        }
        if r < heap.len() && before(heads, heap[r], heap[first]) {
            first = r;
        }
        if first == i {
            break;
        }
        heap.swap(i, first);
        i = first;
    };
    let mut heap: Vec<usize> = (0..heads.len()).filter(|&i| heads[i].is_some()).collect();
    for i in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, &heads, i);
    }
    let mut emit = |mut done: (Key, Entry)| {
        if keep(&mut done) {
            out(done);
        }
    };
    // The first record of the key being read, decided once the next key comes.
    let mut first: Option<(Key, Entry)> = None;
    while let Some(&top) = heap.first() {
        let Some(item) = heads[top].take() else {
            break;
        };
        heads[top] = runs[top].next();
        if heads[top].is_none() {
            heap.swap_remove(0);
        }
        sift_down(&mut heap, &heads, 0);
        if first.as_ref().is_some_and(|(k, _)| *k == item.0) {
            continue; // an older record of the same key
        }
        if let Some(done) = first.replace(item) {
            emit(done);
        }
    }
    if let Some(done) = first {
        emit(done);
    }
}

pub(super) fn open(dir: &Path, opts: Options) -> Result<Inner> {
    opts.validate()?;
    std::fs::create_dir_all(dir).at(dir)?;
    let lock = DirLock::acquire(dir)?;
    let manifest = match Manifest::load(dir)? {
        Some(m) => m,
        None => init(dir)?,
    };
    let damage = DamageCounters::default();
    let mut manifest = manifest;
    clean_directory(dir, &mut manifest, &opts, &damage)?;
    let (clockfile, clock_state) = ClockFile::open(dir)?;

    let mut parts = Vec::with_capacity(manifest.sealed.len() + 1);
    let mut sealed = BTreeMap::new();
    for (entry, loaded) in
        manifest
            .sealed
            .iter()
            .zip(load_all_sealed(dir, &manifest.sealed, &opts, &damage))
    {
        let (seg, part) = loaded?;
        parts.push(part);
        if let Some(seg) = seg {
            sealed.insert(entry.id, Arc::new(seg));
        }
    }
    let sealed_max_seq = parts.iter().map(|p| p.max_seq).max().unwrap_or(0);
    let active_id = manifest.active.ok_or_else(|| {
        Error::corruption(dir.join("MANIFEST"), 0, "manifest names no active segment")
    })?;
    let created_seq = manifest.next_seq.max(sealed_max_seq.saturating_add(1));
    let mut active_part = Loader::default();
    let mut active = load_active(
        dir,
        active_id,
        clock_state.durable,
        &opts,
        created_seq,
        &mut active_part,
        &damage,
    )?;
    active_part.sort();
    parts.push(active_part);
    let mut loader = Loader::combine(parts);
    if !opts.sync.preallocates() {
        active = active.without_preallocation();
    }

    // Build the catalogue and the key directories. `now` never goes below a time the engine
    // has durably used: CLOCK, the newest write in the log, the high-water mark of the last
    // manifest write, and every default-TTL change (each was made at the `now` of its call).
    let newest_change = manifest
        .keyspaces
        .iter()
        .flat_map(|k| k.history.iter().map(|c| c.since))
        .max()
        .unwrap_or(0);
    let now_floor_s = clock_state
        .high_water
        .max(loader.max_write_ms / 1000)
        .max(manifest.high_water)
        .max(newest_change);
    let clock_now = opts.clock.now_unix_millis();
    let now_ms = clock_now.max(now_floor_s.saturating_mul(1000));
    let now = now_ms / 1000;
    let mut catalog = Catalog::default();
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    // What every keyspace's survivors gathered besides their census, and which keyspaces have
    // timers to file.
    let mut found_all = build::Survivors::default();
    let mut with_timers = Vec::new();
    for meta in &manifest.keyspaces {
        let mut state = KeyspaceState {
            history: meta.history.clone(),
            ..KeyspaceState::default()
        };
        // One pass over the survivors, as the runs are merged, does what the key directory's
        // census and the per-segment live bytes need, instead of a walk of the built map for
        // each, and marks each entry's timer second; shard by shard, on every core (`build`).
        // The timers are filed after every keyspace is built, by two walks of the maps that
        // have any (`build::file_timers`).
        let rules = build::Rules {
            history: &state.history,
            reaped_upto: clock_state.reaped_upto,
            now,
        };
        let (map, mut found) = build::build(
            loader.take_runs(meta.id),
            &rules,
            opts.open_shard_records,
            threads,
        )
        .map_err(|file| hint_mismatch(dir, file))?;
        if found.deadlines.count > 0 {
            with_timers.push(meta.id);
        }
        state.map = map;
        state.census = std::mem::take(&mut found.census).finish();
        found_all.absorb(found);
        let core = Arc::new(KeyspaceCore {
            id: meta.id,
            name: meta.name.clone(),
            state: RwLock::new(state),
            dropped: AtomicBool::new(false),
            scans: parking_lot::Mutex::default(),
            ordering: parking_lot::Mutex::new(()),
            walks: 0.into(),
        });
        catalog.by_name.insert(meta.name.clone(), Arc::clone(&core));
        catalog.by_id.insert(meta.id, core);
    }

    // Every version-4 hint read in place held what its summary said (open used the summary's
    // sequence numbers, write times and stats before the merge decoded the entries). Runs of
    // keyspaces the manifest no longer lists (records of a deleted keyspace that no merge has
    // dropped yet) were not merged: they are decoded here to be counted.
    for (_, runs) in std::mem::take(&mut loader.runs) {
        for run in runs {
            let Run::Hint(h) = run else { continue };
            // Checked as the merge checks its pieces: keyspace, order, marks, segment.
            build::Records::whole(&h).for_each(drop);
            let tally = *h.tally.lock();
            if h.broken.load(Ordering::Relaxed) || tally.count != h.len as u64 {
                return Err(hint_mismatch(dir, h.file));
            }
            found_all.tallies.push((h.file, tally));
        }
    }
    for (file, said) in &loader.summaries {
        let found = found_all.tallies.iter().filter(|(f, _)| f == file).fold(
            Tally::default(),
            |mut all, (_, t)| {
                all.absorb(t);
                all
            },
        );
        if found != *said {
            return Err(hint_mismatch(dir, *file));
        }
    }

    // Every keyspace's timers, filed at once now that every map is built.
    let timers = {
        let states: Vec<_> = with_timers
            .iter()
            .filter_map(|id| catalog.by_id.get(id))
            .map(|core| (core.id, core.state.read()))
            .collect();
        let maps: Vec<(u32, &crate::keydir::KeyMap)> =
            states.iter().map(|(id, st)| (*id, &st.map)).collect();
        build::file_timers(
            &maps,
            &found_all.deadlines,
            threads,
            opts.open_shard_records.min(SHARD_RECORDS),
        )
    };

    // Dead bytes per segment = total - bytes of entries the key directory points at.
    let mut segstats: HashMap<u32, SegStats> = loader.stats.into_iter().collect();
    for s in segstats.values_mut() {
        s.dead = s.total;
        // Every deadline below is counted under the history as it stands at open: the first
        // epoch of this process (a default-TTL change after this makes them stale).
        s.ttl_epoch = 0;
    }
    for (file, live) in found_all.live {
        if let Some(s) = segstats.get_mut(&file) {
            s.dead = s.dead.saturating_sub(live.bytes);
            s.dies_by = s.dies_by.max(live.dies_by);
            s.soon = live.soon;
        }
    }
    for (file, len, at) in found_all.expired {
        if let Some(s) = segstats.get_mut(&file) {
            s.note_expired(len, at);
        }
    }
    // Which dead puts were replaced rather than expired is not told apart here: every dead
    // byte not known to have expired (superseded versions, tombstones, batch headers) counts,
    // so a merge asks the key directory about such a segment's records (DESIGN.md §7).
    for s in segstats.values_mut() {
        s.replaced = s.dead.saturating_sub(s.expired_bytes);
    }
    for id in sealed.keys() {
        segstats.entry(*id).or_default();
    }
    segstats.entry(active.id()).or_default();
    // Sealed segments without a hint (deferred when the store closed, or never written) are
    // handed to the worker, which writes each one's hint unless the segment is about to die
    // whole or short-lived, and then once it outlives that (`compaction::write_deferred_hints`,
    // the wait counted from now): otherwise every later open would scan them. Not those
    // whose records are too small for a hint to pay (`policy::hint_worth`): they stay without.
    let hints_deferred: BTreeMap<u32, u64> = sealed
        .keys()
        .copied()
        .filter(|id| {
            segstats.get(id).is_none_or(|s| {
                crate::compaction::policy::hint_worth(
                    s.hint_bytes,
                    s.total,
                    s.key_ordered,
                    opts.hint_every_segment,
                )
            })
        })
        .filter(|id| !crate::log::hint_path(dir, *id).exists())
        .map(|id| (id, now))
        .collect();

    // The loaded runs and the builds' scratch are gone: their memory goes back to the
    // system rather than staying in the allocator's heaps (DESIGN.md §3.1, "Open builds
    // hashed maps").
    crate::log::mmap::release_free_memory();

    // Counters near their type's end can only come from damaged files (2^62 writes or 2^31
    // files are not reachable); refusing them keeps every later increment from overflowing.
    let next_seq = manifest.next_seq.max(loader.max_seq.saturating_add(1));
    if next_seq > MAX_SEQ
        || manifest.next_file_id > MAX_FILE_ID
        || manifest.next_keyspace_id > MAX_FILE_ID
    {
        return Err(Error::corruption(
            dir.join("MANIFEST"),
            0,
            "sequence number, file id or keyspace id out of range",
        ));
    }
    let set = SegmentSet {
        sealed,
        active: Arc::clone(&active.shared),
    };
    Ok(Inner {
        dir: dir.to_path_buf(),
        _lock: lock,
        log: Mutex::new(LogState {
            active,
            next_seq,
            manifest,
            segstats,
            appended: 0,
            sync_behind_asked: 0,
            reclaim_gen: 0,
            pending: Vec::new(),
        }),
        segments: RwLock::new(set),
        catalog: RwLock::new(catalog),
        sync: Mutex::new(super::SyncState::default()),
        sync_cv: Condvar::new(),
        appends: AtomicU64::new(0),
        reclaim_debt_ppm: AtomicU64::new(0),
        paced_ns: AtomicU64::new(0),
        poisoned: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        hw_ms: AtomicU64::new(now_ms),
        fence_ms: AtomicU64::new(super::NO_FENCE),
        persisted_s: AtomicU64::new(clock_state.high_water),
        clock_sync: clockfile.syncer()?,
        clockfile: Mutex::new((clockfile, clock_state)),
        expiry: Mutex::new(ExpiryState {
            timers,
            stale: 0,
            fired_through: 0,
            reaped_upto: clock_state.reaped_upto,
            in_flight: 0,
            published_through: 0,
        }),
        reap_backlog: AtomicU64::new(0),
        handled_through: AtomicU64::new(now.saturating_sub(1)),
        subscribers: Mutex::new(Vec::new()),
        expirations: AtomicU64::new(0),
        timers_swept: AtomicU64::new(0),
        merges: AtomicU64::new(0),
        ttl_epoch: AtomicU64::new(0),
        merge_lock: Mutex::new(()),
        manifest_lock: Mutex::new(()),
        rotations_durable: AtomicU64::new(0),
        rotations_started: AtomicU64::new(0),
        hints_deferred: Mutex::new(hints_deferred),
        worker: Mutex::new(None),
        worker_error: Mutex::new(super::WorkerErrors::default()),
        merge_crash_at: Mutex::new(None),
        merge_observer: Mutex::new(None),
        damage,
        opts,
    })
}

/// A new directory: first active segment and manifest.
fn init(dir: &Path) -> Result<Manifest> {
    // A crash while creating a database can leave the first segment without a manifest; it
    // holds no record (records are appended only after the manifest lists the segment), so it
    // is removed. A segment that holds records without a manifest is real damage.
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some((_, kind)) = name.to_str().and_then(parse_file_name) {
            let empty = entry.metadata()?.len() <= crate::format::SEGMENT_HEADER_LEN as u64;
            if kind == "seg" && !empty {
                return Err(Error::corruption(
                    dir.join("MANIFEST"),
                    0,
                    "segment files present but no MANIFEST",
                ));
            }
            std::fs::remove_file(entry.path()).at(entry.path())?;
        }
    }
    let manifest = Manifest {
        next_file_id: 2,
        next_seq: 1,
        next_keyspace_id: 1,
        sealed: Vec::new(),
        active: Some(1),
        keyspaces: Vec::new(),
        high_water: 0,
        retired: Vec::new(),
    };
    ActiveWriter::create(dir, 1, 1, 0, false)?;
    manifest.store(dir, 0)?;
    Ok(manifest)
}

/// What opening does with one file the manifest does not list.
enum Verdict {
    /// Provably this engine's unpublished or retired leftover, or holds no data: delete.
    Delete,
    /// A published merge output still under its temporary name: rename it (roll forward).
    Publish,
    /// Nothing proves it is ours to delete: refuse to open (Strict) or leave it (Salvage).
    Foreign,
    /// Leave it: a hint whose segment is foreign, or a file that is not ours to judge.
    Keep,
}

/// Puts the directory in the state the manifest describes, deleting only what can be proven to
/// be this engine's own leftover:
/// - temporaries (`MANIFEST.tmp`, `*.hint.tmp`) and unlisted `*.seg.tmp` (merge outputs whose
///   publish did not happen: a merge output is named `.seg` only after the manifest lists it);
/// - files of segments the manifest lists as `retired` (merge inputs whose unlink did not
///   happen);
/// - an unlisted `.seg` of at most a header's length (a rotation's new file created just
///   before a crash; it holds no record, so deleting it can lose nothing);
/// - a hint whose segment file does not exist.
///
/// A listed segment found only as `.seg.tmp` is renamed (its publish happened, the rename did
/// not). Any other unlisted segment file — an older `MANIFEST` put back, a file copied in from
/// elsewhere — is `Error::Corruption` naming it, before anything is deleted (Strict), or left
/// alone and counted in `Stats::unlisted_files` (Salvage; new file ids then skip its id).
fn clean_directory(
    dir: &Path,
    manifest: &mut Manifest,
    opts: &Options,
    damage: &DamageCounters,
) -> Result<()> {
    let mut plan = Vec::new();
    let mut max_id = 0u32;
    let names: Vec<String> = std::fs::read_dir(dir)
        .at(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    for name in &names {
        let path = dir.join(name);
        if name == "MANIFEST.tmp" || name.ends_with(".hint.tmp") {
            plan.push((path, Verdict::Delete));
            continue;
        }
        let Some((id, kind)) = parse_file_name(name) else {
            continue;
        };
        max_id = max_id.max(id);
        let listed = manifest.lists(id);
        let retired = manifest.retired.contains(&id);
        let verdict = match kind {
            "seg.tmp" if listed && !segment_path(dir, id).exists() => Verdict::Publish,
            "seg.tmp" => Verdict::Delete,
            _ if listed => Verdict::Keep,
            _ if retired => Verdict::Delete,
            "seg" if std::fs::metadata(&path).at(&path)?.len() <= SEGMENT_HEADER_LEN as u64 => {
                Verdict::Delete
            }
            "seg" => Verdict::Foreign,
            // A hint: derived data, deleted only when its segment file is gone.
            _ if segment_path(dir, id).exists() => Verdict::Keep,
            _ => Verdict::Delete,
        };
        plan.push((path, verdict));
    }
    let salvage = opts.recovery == RecoveryMode::Salvage;
    if !salvage {
        if let Some((path, _)) = plan.iter().find(|(_, v)| matches!(v, Verdict::Foreign)) {
            return Err(Error::corruption(
                path,
                0,
                "segment file not listed in MANIFEST, and not a leftover this engine can prove \
                 it wrote (an older MANIFEST put back, or a file from elsewhere?); nothing was \
                 deleted",
            ));
        }
    }
    let mut renamed = false;
    for (path, verdict) in plan {
        match verdict {
            Verdict::Delete => std::fs::remove_file(&path).at(&path)?,
            Verdict::Publish => {
                crate::faults::rename(&path, &path.with_extension("")).at(&path)?;
                renamed = true;
            }
            Verdict::Foreign => {
                damage.unlisted_files.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Keep => {}
        }
    }
    if renamed {
        crate::log::sync_dir(dir)?;
    }
    // Never hand out an id a file in the directory already has.
    if max_id >= manifest.next_file_id && max_id < MAX_FILE_ID {
        manifest.next_file_id = crate::engine::next_id(max_id)?;
    }
    Ok(())
}

/// Loads sealed segment `entry`: checks its header and its length against the manifest, then
/// takes its records from the hint or by a full scan. Damage of any kind is
/// `Error::Corruption` (Strict) or, under Salvage, skipped, counted and the segment marked
/// damaged (its readable records are kept).
fn load_sealed(
    dir: &Path,
    entry: SealedSegment,
    opts: &Options,
    loader: &mut Loader,
    damage: &DamageCounters,
) -> Result<Option<Segment>> {
    debug_assert!(loader.keys.is_empty() && loader.hints.is_empty() && loader.stats.is_empty());
    let id = entry.id;
    let path = segment_path(dir, id);
    let salvage = opts.recovery == RecoveryMode::Salvage;
    let seg = match Segment::open(dir, id) {
        Ok(s) => s,
        Err(Error::Io { source: e, .. }) if e.kind() == std::io::ErrorKind::NotFound => {
            if salvage {
                damage.segment(entry.len);
                return Ok(None);
            }
            return Err(Error::corruption(
                &path,
                0,
                "segment listed in MANIFEST is missing",
            ));
        }
        Err(e @ Error::Corruption { .. }) if salvage => {
            let _ = e;
            Segment::open_damaged(dir, id)?
        }
        Err(e) => return Err(e),
    };
    // The manifest recorded the exact length: a shorter file (even one cut at a record
    // boundary) lost records, a longer one was written by someone else.
    let mut skipped = 0u64;
    if seg.len() != entry.len {
        if !salvage {
            return Err(Error::corruption(
                &path,
                seg.len().min(entry.len),
                format!(
                    "sealed segment is {} bytes, MANIFEST recorded {}",
                    seg.len(),
                    entry.len
                ),
            ));
        }
        seg.mark_damaged();
        skipped += entry.len.saturating_sub(seg.len());
    }
    let end = usize::try_from(seg.len().min(entry.len)).unwrap_or(usize::MAX);
    if opts.use_hints && !seg.is_damaged() {
        if let Some(bytes) = read_hint(&hint_path(dir, id)) {
            // Under Salvage a hint is decoded into vectors: nothing can then fail the open
            // after the check (a run read in place fails it if its bytes change under it).
            match load_hint(Arc::new(bytes), id, entry.len, !salvage, loader) {
                HintLoad::Used => {
                    loader.stats_of(id).total = seg.data_len();
                    return Ok(Some(seg));
                }
                HintLoad::PastEnd if !salvage => {
                    return Err(Error::corruption(
                        hint_path(dir, id),
                        0,
                        "hint lists records past the end of its segment",
                    ));
                }
                HintLoad::PastEnd | HintLoad::Bad => *loader = Loader::default(),
            }
        }
    }
    let found = scan_all(seg.bytes(), end, |off, len, rec| {
        loader.add(id, off, len, &rec.meta, rec.key);
    });
    if let Some(first) = found.first() {
        if !salvage {
            return Err(Error::corruption(
                seg.path(),
                first.offset as u64,
                first.err.to_string(),
            ));
        }
        seg.mark_damaged();
        skipped += found.iter().map(|d| d.len() as u64).sum::<u64>();
    }
    if seg.is_damaged() {
        damage.segment(skipped);
    }
    // Every byte after the header counts: batch headers and damaged ranges are dead bytes.
    loader.stats_of(id).total = seg.data_len();
    Ok(Some(seg))
}

/// The bytes of the hint file at `path`, mapped (read where the system refuses to map it);
/// none if it cannot be read (a missing hint is not an error: its segment is scanned).
fn read_hint(path: &Path) -> Option<HintBytes> {
    let file = std::fs::File::open(path).ok()?;
    if let Ok(Some(map)) = crate::log::mmap::map_whole(&file) {
        return Some(HintBytes::Mapped(map));
    }
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut buf).ok()?;
    Some(HintBytes::Read(buf))
}

/// What became of a hint.
#[derive(Debug, PartialEq, Eq)]
enum HintLoad {
    /// Its entries are in the loader.
    Used,
    /// It checks out but lists records past the end of its segment.
    PastEnd,
    /// It does not check out; the loader holds some of its entries and must be discarded.
    Bad,
}

/// Loads the hint `bytes` of segment `id` (`seg_len` bytes long) into `loader`: checked whole
/// (header, footer, checksum, every entry), its stats counted, and kept as runs of its own
/// bytes per keyspace (`HintRun`), which the merge at open decodes again as it reads them:
/// decoding every entry into a vector of `(key, entry)` pairs wrote twice the hint's size of
/// new memory, a third of an open's page faults (DESIGN.md §2.3, "Hints read in place"). A
/// hint whose entries are not in order (keyspace, key, newest first), which no writer of
/// this build makes, is decoded into vectors instead and sorted as a scanned segment is; so is
/// every hint unless `in_place`.
fn load_hint(
    bytes: Arc<HintBytes>,
    id: u32,
    seg_len: u64,
    in_place: bool,
    loader: &mut Loader,
) -> HintLoad {
    let Ok((mut entries, count)) = hint::Entries::open(&bytes, id) else {
        return HintLoad::Bad;
    };
    let base_ms = entries.base_ms();
    if let (Some(summary), true) = (entries.summary(), in_place) {
        // Version 4: what the entries hold is in the summary; they are decoded only by the
        // merge, which checks each as it reads it.
        let totals = summary.totals;
        if totals.max_end > seg_len {
            return HintLoad::PastEnd;
        }
        loader.max_seq = loader.max_seq.max(totals.max_seq);
        loader.max_write_ms = loader.max_write_ms.max(totals.max_write_ms);
        let stats = loader.stats_of(id);
        stats.hint_bytes += totals
            .key_bytes
            .saturating_add(count.saturating_mul(crate::compaction::policy::HINT_ENTRY_BYTES));
        stats.shadowing += totals.shadowing;
        stats.markers += totals.markers;
        loader.summaries.push((id, Tally { count, totals }));
        loader.hints = summary
            .keyspaces
            .iter()
            .map(|k| {
                let run = HintRun {
                    bytes: Arc::clone(&bytes),
                    file: id,
                    keyspace: k.keyspace,
                    seg_len,
                    base_ms,
                    from: k.from,
                    to: k.to,
                    len: usize::try_from(k.count).unwrap_or(usize::MAX),
                    marks: k
                        .marks
                        .iter()
                        .map(|&(at, key)| (Key::from_slice(key), at))
                        .collect(),
                    broken: AtomicBool::new(false),
                    tally: Mutex::default(),
                };
                (k.keyspace, run)
            })
            .collect();
        return HintLoad::Used;
    }
    let mut fits = true;
    let mut sorted = true;
    let mut runs: Vec<(u32, HintRun)> = Vec::new();
    // The keyspace, key and sequence number of the entry before.
    let mut prev: Option<(u32, &[u8], u64)> = None;
    let mut seen = 0u64;
    loop {
        let at = entries.pos();
        let Some(next) = entries.next() else {
            break;
        };
        let Ok((meta, key, offset, len)) = next else {
            return HintLoad::Bad;
        };
        seen += 1;
        fits &= u64::from(offset) + u64::from(len) <= seg_len;
        loader.note(id, len, &meta, key);
        let same_keyspace = match prev {
            Some((ks, pk, pseq)) if ks == meta.keyspace => {
                sorted &= pk.cmp(key).then(meta.seq.cmp(&pseq)).is_le();
                true
            }
            Some((ks, _, _)) => {
                sorted &= ks < meta.keyspace;
                false
            }
            None => false,
        };
        if !same_keyspace {
            if let Some((_, run)) = runs.last_mut() {
                run.to = at;
            }
            runs.push((
                meta.keyspace,
                HintRun {
                    bytes: Arc::clone(&bytes),
                    file: id,
                    keyspace: meta.keyspace,
                    seg_len,
                    base_ms,
                    from: at,
                    to: at,
                    len: 0,
                    marks: Vec::new(),
                    broken: AtomicBool::new(false),
                    tally: Mutex::default(),
                },
            ));
        }
        if let Some((_, run)) = runs.last_mut() {
            if run.len.is_multiple_of(MARK_EVERY) {
                run.marks.push((Key::from_slice(key), at));
            }
            run.len += 1;
        }
        prev = Some((meta.keyspace, key, meta.seq));
    }
    if seen != count {
        return HintLoad::Bad;
    }
    if !fits {
        return HintLoad::PastEnd;
    }
    if let Some((_, run)) = runs.last_mut() {
        run.to = entries.pos();
    }
    if sorted && in_place {
        loader.hints = runs;
        return HintLoad::Used;
    }
    drop(runs);
    // Out of order, or not to be read in place: decoded as before, the stats counted again
    // from nothing.
    *loader = Loader::default();
    match hint::visit_once(
        &bytes,
        id,
        |_| {},
        |meta, key, offset, len| loader.add(id, offset, len, meta, key),
    ) {
        Ok(_) => HintLoad::Used,
        Err(_) => HintLoad::Bad,
    }
}

/// A sealed segment (none if Salvage gave it up) and what was loaded from it.
type LoadedSealed = (Option<Segment>, Loader);

/// Loads every sealed segment, each into a loader of its own, on up to as many threads as
/// the machine has cores (decoding hints is most of an open's work). Results come back in
/// `entries`' order, so absorbing them in order (and reporting the first error in that order)
/// is what loading them one by one would have done.
fn load_all_sealed(
    dir: &Path,
    entries: &[SealedSegment],
    opts: &Options,
    damage: &DamageCounters,
) -> Vec<Result<LoadedSealed>> {
    let one = |(): &mut (), entry: &SealedSegment| {
        let mut part = Loader::default();
        let seg = load_sealed(dir, *entry, opts, &mut part, damage)?;
        part.sort();
        Ok((seg, part))
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(entries.len());
    side_by_side(entries.iter().collect(), threads, threads > 1, one)
}

/// `work` applied to every one of `jobs`, on `threads` threads side by side, the results in
/// the jobs' order: this thread and `threads - 1` helpers, or, with `spare_this_thread`,
/// `threads` helpers while this one waits (loading hints: vectors allocated by helpers stay
/// out of this thread's allocator arena, which builds the key directory next; opening 1 M keys
/// took 5 ms longer when it loaded hints too). Each thread takes the next job left and keeps
/// one `S` for all the jobs it takes. A helper the system refuses to start leaves its share to
/// the others, this thread included when none started (open never fails for want of a
/// thread); a panic in a helper is raised again here, as on this thread.
fn side_by_side<J: Send, S: Default, T: Send>(
    jobs: Vec<J>,
    threads: usize,
    spare_this_thread: bool,
    work: impl Fn(&mut S, J) -> T + Sync,
) -> Vec<T> {
    let queue = Mutex::new(jobs.into_iter().enumerate());
    let take = || {
        let mut state = S::default();
        let mut done = Vec::new();
        loop {
            let next = queue.lock().next();
            let Some((i, job)) = next else {
                break;
            };
            done.push((i, work(&mut state, job)));
        }
        done
    };
    let mut out = if threads <= 1 && !spare_this_thread {
        take()
    } else {
        std::thread::scope(|s| {
            let wanted = if spare_this_thread {
                threads
            } else {
                threads - 1
            };
            let helpers: Vec<_> = (0..wanted)
                .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, take).ok())
                .collect();
            let mut all = if spare_this_thread && !helpers.is_empty() {
                Vec::new()
            } else {
                take()
            };
            for h in helpers {
                all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            }
            all
        })
    };
    out.sort_unstable_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, t)| t).collect()
}

/// Loads the active segment. Only a tail past the durable point `CLOCK` recorded for it may be
/// cut as torn: a bad record below that point, or one followed by a record (or whole batch)
/// that still decodes, is damage, not an unfinished write. Damage is `Error::Corruption`
/// (Strict) or, under Salvage, skipped and counted with every readable record kept.
fn load_active(
    dir: &Path,
    id: u32,
    durable: DurablePoint,
    opts: &Options,
    created_seq: u64,
    loader: &mut Loader,
    damage: &DamageCounters,
) -> Result<ActiveWriter> {
    let path = segment_path(dir, id);
    let salvage = opts.recovery == RecoveryMode::Salvage;
    let claimed = if durable.segment == id {
        durable.len.max(SEGMENT_HEADER_LEN as u64)
    } else {
        SEGMENT_HEADER_LEN as u64
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && salvage => {
            damage.segment(claimed);
            return Ok(ActiveWriter::create(
                dir,
                id,
                created_seq,
                opts.segment_size,
                false,
            )?);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::corruption(
                &path,
                0,
                "active segment listed in MANIFEST is missing",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let header = SegmentHeader::decode(&bytes)
        .map_err(|e| Error::corruption(&path, 0, format!("segment header: {e}")))?;
    if header.id != id {
        return Err(Error::corruption(
            &path,
            0,
            "segment header names another file id",
        ));
    }
    let found = scan_all(&bytes, bytes.len(), |off, len, rec| {
        loader.add(id, off, len, &rec.meta, rec.key);
    });
    // A damaged range that runs to the end of the file is the tail: nothing after it decodes.
    let (tail, interior) = match found.split_last() {
        Some((last, rest)) if last.end == bytes.len() => (Some(*last), rest),
        _ => (None, found.as_slice()),
    };
    let valid = tail.map_or(bytes.len(), |t| t.offset) as u64;
    let lost_durable = claimed.saturating_sub(valid);
    // Unless the search stopped before the end (`Unsearched`): records may follow it, so it is
    // damage (Strict refuses), though salvage cuts there like a tail, so that new writes never
    // land behind a range no open can search past.
    let unsearched = tail
        .filter(|t| t.err == DecodeError::Unsearched)
        .map_or(0, |t| t.len() as u64);
    let problem = interior
        .first()
        .map(|d| {
            (
                d.offset as u64,
                format!("{} (and records after it decode: not a torn tail)", d.err),
            )
        })
        .or_else(|| (unsearched > 0).then(|| (valid, DecodeError::Unsearched.to_string())))
        .or_else(|| {
            (lost_durable > 0).then(|| {
                let why = tail.map_or("ends".to_string(), |t| t.err.to_string());
                (
                    valid,
                    format!("{why} below the durable point ({claimed} bytes were fsynced)"),
                )
            })
        });
    if let Some((offset, reason)) = problem {
        if !salvage {
            return Err(Error::corruption(&path, offset, reason));
        }
        let skipped: u64 = interior.iter().map(|d| d.len() as u64).sum();
        damage.segment(skipped.saturating_add(lost_durable.max(unsearched)));
    }
    let zero_tail = bytes
        .get(valid as usize..)
        .is_some_and(|t| t.iter().all(|&b| b == 0));
    loader.stats_of(id).total = valid.saturating_sub(SEGMENT_HEADER_LEN as u64);
    Ok(ActiveWriter::reopen(
        dir,
        header,
        valid,
        zero_tail,
        opts.segment_size,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::hint::HintWriter;
    use crate::ttl::ItemTtl;

    /// A run of decoded records, as the tests make them.
    type Run = Vec<(Key, Entry)>;

    /// A put of `key` in keyspace `ks` with sequence number `seq`.
    fn put(ks: u32, seq: u64) -> Meta {
        Meta {
            kind: Kind::Put,
            flags: 0,
            keyspace: ks,
            ttl: ItemTtl::Inherit,
            seq,
            write_ms: 5_000 + seq,
        }
    }

    /// How a test hint is written.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Form {
        /// Version 4, sorted, with its summary (what this build writes).
        V4,
        /// Version 3, sorted (what the builds before wrote).
        V3,
        /// Version 3, in the order the entries were added (no writer makes it).
        V3Unsorted,
    }

    /// A hint of segment 7 whose entries of keyspaces 1 and 2 are given in an order that is
    /// not the hint's.
    fn mixed_hint(form: Form) -> Vec<u8> {
        let mut w = HintWriter::new(7);
        for i in (0..600u64).rev() {
            let ks = 1 + (i % 2) as u32;
            w.add(
                &put(ks, 10 + i),
                format!("key{:04}", i * 7 % 600).as_bytes(),
                i as u32 * 10,
                10,
            );
        }
        match form {
            Form::V4 => w.finish(),
            Form::V3 => w.finish_v3(),
            Form::V3Unsorted => w.finish_unsorted(),
        }
    }

    /// A loaded record: key, sequence number, offset and length.
    type Loaded = (Vec<u8>, u64, u32, u32);

    /// What the loader holds, decoded and per keyspace, in key order, newest first.
    fn loaded(mut loader: Loader) -> Vec<(u32, Vec<Loaded>)> {
        loader.sort();
        let mut all: Vec<(u32, Vec<_>)> = Vec::new();
        for (ks, list) in loader.keys {
            all.push((
                ks,
                list.iter()
                    .map(|(k, e)| (k.to_vec(), e.seq, e.offset, e.len))
                    .collect(),
            ));
        }
        for (ks, run) in &loader.hints {
            let mut list = Vec::new();
            for entry in run.entries(run.from, run.to) {
                let (meta, key, offset, len) = entry.expect("decodes");
                list.push((key.to_vec(), meta.seq, offset, len));
            }
            assert_eq!(list.len(), run.len);
            all.push((*ks, list));
        }
        all.sort_by_key(|(ks, _)| *ks);
        all
    }

    /// A sorted hint is kept as its bytes, one run per keyspace (version 4 from its summary,
    /// version 3 from a pass over its entries); the same entries out of order, or not to be
    /// read in place (Salvage), are decoded and sorted; all load the same records, stats and
    /// maxima.
    #[test]
    fn a_hint_is_read_in_place_when_sorted_and_decoded_when_not() {
        let mut results = Vec::new();
        let forms = [
            (Form::V4, true),
            (Form::V3, true),
            (Form::V3Unsorted, true),
            (Form::V4, false),
            (Form::V3, false),
        ];
        for (form, in_place) in forms {
            let mut loader = Loader::default();
            let bytes = Arc::new(HintBytes::Read(mixed_hint(form)));
            let got = load_hint(bytes, 7, 6_000, in_place, &mut loader);
            assert_eq!(got, HintLoad::Used);
            let kept = form != Form::V3Unsorted && in_place;
            assert_eq!(
                loader.summaries.len(),
                usize::from(kept && form == Form::V4)
            );
            assert_eq!(loader.hints.len(), if kept { 2 } else { 0 });
            assert_eq!(loader.keys.is_empty(), kept);
            let stats = loader.stats_of(7).hint_bytes;
            let maxima = (loader.max_seq, loader.max_write_ms);
            let records = loaded(loader);
            assert_eq!(records.len(), 2);
            assert!(records
                .iter()
                .all(|(_, l)| l.len() == 300 && l.windows(2).all(|w| w[0].0 < w[1].0)));
            results.push((records, stats, maxima));
        }
        for other in &results[1..] {
            assert_eq!(results[0], *other);
        }
        assert_eq!(results[0].2, (609, 5_609));
    }

    /// A hint listing records past its segment's end, or damaged, is not used.
    #[test]
    fn a_hint_past_its_segment_or_damaged_is_not_used() {
        let mut loader = Loader::default();
        let bytes = Arc::new(HintBytes::Read(mixed_hint(Form::V4)));
        assert_eq!(
            load_hint(bytes, 7, 5_999, true, &mut loader),
            HintLoad::PastEnd
        );
        let mut loader = Loader::default();
        let bytes = Arc::new(HintBytes::Read(mixed_hint(Form::V4)));
        assert_eq!(
            load_hint(bytes, 8, 6_000, true, &mut loader),
            HintLoad::Bad,
            "another segment's"
        );
        let mut damaged = mixed_hint(Form::V4);
        damaged[100] ^= 1;
        let mut loader = Loader::default();
        let bytes = Arc::new(HintBytes::Read(damaged));
        assert_eq!(load_hint(bytes, 7, 6_000, true, &mut loader), HintLoad::Bad);
    }

    /// A hint run whose bytes no longer decode when the merge reads them fails the build with
    /// its segment's id, rather than leave its records out.
    #[test]
    fn a_hint_that_changed_after_its_check_fails_the_build() {
        let mut loader = Loader::default();
        let good = mixed_hint(Form::V4);
        let bytes = Arc::new(HintBytes::Read(good.clone()));
        assert_eq!(
            load_hint(bytes, 7, 6_000, true, &mut loader),
            HintLoad::Used
        );
        let (_, mut run) = loader.hints.swap_remove(0);
        let mut changed = good;
        // The kind byte of the run's middle entry: 9 is no kind.
        let middle = run.marks.get(1).map_or(run.from, |m| m.1);
        changed[middle] = 9;
        run.bytes = Arc::new(HintBytes::Read(changed));
        let history = [ttl::TtlChange {
            since: 0,
            default: ttl::DefaultTtl::Off,
        }];
        let rules = build::Rules {
            history: &history,
            reaped_upto: 0,
            now: 10,
        };
        let built = build::build(vec![super::Run::Hint(run)], &rules, usize::MAX, 1);
        assert_eq!(built.err(), Some(7));
    }

    /// Options for a store of many small hinted segments, opened in many small parts.
    fn small_segments() -> Options {
        Options::default()
            .sync(crate::SyncPolicy::Never)
            .segment_size(64 << 10)
            .hint_every_segment(true)
            .warm_on_open(false)
            .open_shard_records(7)
    }

    /// The id in the name of the segment or hint file at `path`.
    fn file_id(path: &std::path::Path) -> u32 {
        path.file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .expect("an id")
    }

    /// A version-4 hint whose summary does not match its entries (each total changed, a mark
    /// moved, given another entry's key or naming the entry before its own, entries said to be
    /// a keyspace the manifest does not list) fails the open rather than let open use what it
    /// says; the hint as written opens and reads back every key.
    #[test]
    fn a_summary_that_does_not_match_its_entries_fails_the_open() {
        let dir = tempfile::tempdir().expect("dir");
        let opts = small_segments;
        let key = |i: u32| format!("k{:05}", i * 7 % 3_000);
        {
            let store = crate::Store::open_with(dir.path(), opts()).expect("open");
            let ks = store
                .create_keyspace("a", crate::DefaultTtl::Off)
                .expect("ks");
            for i in 0..3_000u32 {
                ks.put(key(i), [1u8; 40]).expect("put");
                if i % 10 == 0 {
                    ks.delete(key(i / 2)).expect("delete");
                }
            }
        }
        let names: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").path())
            .collect();
        let hint = names
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "hint"))
            .expect("a hint");
        let id = file_id(hint);
        let good = std::fs::read(hint).expect("read");
        let (entries, _) = hint::Entries::open(&good, id).expect("checks out");
        let s = entries.summary().expect("version 4");
        // The second mark of the first keyspace is the one moved.
        assert!(s.keyspaces.first().is_some_and(|k| k.marks.len() > 1));
        let totals = s.totals.fields();
        let copy_with = |bytes: &[u8]| {
            let copy = tempfile::tempdir().expect("dir");
            for name in &names {
                let to = copy.path().join(name.file_name().expect("name"));
                if name == hint {
                    std::fs::write(to, bytes).expect("write");
                } else {
                    std::fs::copy(name, to).expect("copy");
                }
            }
            copy
        };
        for index in 0..10 {
            let value = totals.get(index).map_or(0, |v| v + 1);
            let copy = copy_with(&hint::with_summary_changed(&good, id, index, value));
            match crate::Store::open_with(copy.path(), opts()) {
                Err(Error::Corruption { .. }) => {}
                other => panic!("summary total {index} changed: {:?}", other.map(drop)),
            }
        }
        let copy = copy_with(&good);
        let store = crate::Store::open_with(copy.path(), opts()).expect("open");
        let ks = store.keyspace("a").expect("ks");
        let deleted: std::collections::HashSet<String> =
            (0..3_000u32).step_by(10).map(|i| key(i / 2)).collect();
        let mut live = 0;
        for i in 0..3_000u32 {
            let got = ks.get(key(i)).expect("get");
            if !deleted.contains(&key(i)) {
                assert_eq!(got.as_deref(), Some(&[1u8; 40][..]), "{}", key(i));
                live += 1;
            }
        }
        assert!(live > 2_000);
    }

    /// A store whose hints a build before this one wrote (version 3, no summary) opens with
    /// this build from those hints (read in place after a pass) and reads back every key.
    #[test]
    fn a_store_with_version_3_hints_opens_and_reads_every_key() {
        let dir = tempfile::tempdir().expect("dir");
        let opts = small_segments;
        let key = |i: u32| format!("k{:05}", i * 7_919 % 5_000);
        {
            let store = crate::Store::open_with(dir.path(), opts()).expect("open");
            let ks = store
                .create_keyspace("a", crate::DefaultTtl::Off)
                .expect("ks");
            for i in 0..5_000u32 {
                ks.put(key(i), i.to_le_bytes()).expect("put");
            }
        }
        let mut hints = 0;
        for entry in std::fs::read_dir(dir.path()).expect("list") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "hint") {
                continue;
            }
            let id = file_id(&path);
            let bytes = std::fs::read(&path).expect("read");
            let mut w = HintWriter::new(id);
            for e in hint::decode(&bytes, id).expect("decodes") {
                w.add(&e.meta, &e.key, e.offset, e.len);
            }
            let v3 = w.finish_v3();
            assert_eq!(hint::check_summary(&v3, id), Ok(false));
            std::fs::write(&path, v3).expect("write");
            // The segment's last record damaged: a scan at open would refuse the store, so
            // opening proves the hint was used (the damage is found by that record's read).
            let seg = path.with_extension("seg");
            let mut bytes = std::fs::read(&seg).expect("read");
            if let Some(last) = bytes.last_mut() {
                *last ^= 0x55;
            }
            std::fs::write(&seg, bytes).expect("write");
            hints += 1;
        }
        assert!(hints >= 2);
        let store = crate::Store::open_with(dir.path(), opts()).expect("open from the hints");
        let ks = store.keyspace("a").expect("ks");
        let mut damaged = 0;
        for i in 0..5_000u32 {
            match ks.get(key(i)) {
                Ok(got) => assert_eq!(got.as_deref(), Some(&i.to_le_bytes()[..]), "{}", key(i)),
                Err(Error::Corruption { .. }) => damaged += 1,
                Err(e) => panic!("{}: {e}", key(i)),
            }
        }
        assert_eq!(damaged, hints, "one damaged record per segment");
        assert_eq!(ks.len().expect("len"), 5_000);
    }

    fn rec(key: &[u8], seq: u64, file: u32) -> (Key, Entry) {
        let entry = Entry {
            seq,
            file,
            offset: 0,
            len: 1,
            ts: crate::keydir::WriteSecs::default(),
            ttl: 0,
            flags: 0,
            armed: ttl::NEVER,
        };
        (Key::from_slice(key), entry)
    }

    fn picked(out: &[(Key, Entry)]) -> Vec<(Vec<u8>, u64, u32)> {
        out.iter()
            .map(|(k, e)| (k.to_vec(), e.seq, e.file))
            .collect()
    }

    #[test]
    fn merging_runs_keeps_the_newest_record_of_each_key_in_key_order() {
        // Keys shorter and longer than the eight bytes compared as a word, sharing prefixes.
        let long_a = b"prefix00-a".as_slice();
        let long_b = b"prefix00-b".as_slice();
        let runs = vec![
            vec![rec(b"a", 5, 1), rec(b"a", 2, 1), rec(long_b, 1, 1)],
            vec![rec(b"a", 9, 2), rec(b"b", 3, 2), rec(long_a, 4, 2)],
            vec![],
            vec![rec(b"b", 7, 3), rec(long_b, 8, 3)],
        ];
        let out = merge_runs(runs);
        assert_eq!(
            picked(&out),
            vec![
                (b"a".to_vec(), 9, 2),
                (b"b".to_vec(), 7, 3),
                (long_a.to_vec(), 4, 2),
                (long_b.to_vec(), 8, 3),
            ]
        );
    }

    #[test]
    fn between_equal_records_the_earlier_run_wins() {
        let runs = vec![vec![rec(b"k", 4, 1)], vec![rec(b"k", 4, 2)]];
        assert_eq!(picked(&merge_runs(runs)), vec![(b"k".to_vec(), 4, 1)]);
        let runs = vec![vec![rec(b"k", 4, 2)], vec![rec(b"k", 4, 1)]];
        assert_eq!(picked(&merge_runs(runs)), vec![(b"k".to_vec(), 4, 2)]);
    }

    #[test]
    fn merging_many_runs_matches_a_sort_of_all_records() {
        // 40 runs of pseudo-random keys and sequence numbers, against sort + dedup.
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut seq = 0;
        let runs: Vec<Run> = (0..40)
            .map(|file| {
                let mut run: Run = (0..200)
                    .map(|_| {
                        seq += 1;
                        // Short keys and keys longer than a word with a shared prefix.
                        let n = next() % 300;
                        let k = if n % 2 == 0 {
                            format!("k{n}")
                        } else {
                            format!("prefix--{n}")
                        };
                        rec(k.as_bytes(), seq, file)
                    })
                    .collect();
                run.sort_by(record_order);
                run
            })
            .collect();
        let mut all: Run = runs.iter().flatten().cloned().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.seq.cmp(&a.1.seq)));
        all.dedup_by(|later, kept| later.0 == kept.0);
        assert_eq!(picked(&merge_runs(runs.clone())), picked(&all));
        // `keep` sees each key's newest record only, and a key whose newest record it drops
        // (here: an odd sequence number, as open drops a tombstone) is gone: an older record
        // of it never takes its place. It may change what it keeps.
        let mut calls = 0;
        let iters = runs.into_iter().map(Vec::into_iter).collect();
        let mut kept = Vec::new();
        merge_runs_with(
            iters,
            |(_, e)| {
                calls += 1;
                e.offset = 7;
                e.seq % 2 == 0
            },
            |r| kept.push(r),
        );
        assert_eq!(calls, all.len());
        all.retain(|(_, e)| e.seq % 2 == 0);
        assert!(all.len() > 20 && kept.iter().all(|(_, e)| e.offset == 7));
        assert_eq!(picked(&kept), picked(&all));
    }
}
