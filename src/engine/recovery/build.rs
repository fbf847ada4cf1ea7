//! Building a keyspace's key directory at open from its loaded runs, in shards by key range,
//! side by side on every core.
//!
//! Every run (the records of one file, sorted by key, newest first) is cut at the same split
//! keys, so each shard merges the pieces that fall in its range and lays its survivors out
//! for a hashed map ([`HashKey::prepare`]), which is then built from the shards' parts
//! ([`KeyMap::hashed_from`]). All records of a key are in one shard, so a shard decides its
//! keys exactly as one merge of everything would. What the pass over the survivors gathers
//! besides the map (census, live bytes per file, expired records to free) is kept per shard
//! in a [`Survivors`] and added up at the end; the timers are filed afterwards
//! ([`file_timers`]).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::{
    loaded_entry, merge_runs_with, FileIdHasher, FileLive, HintRun, Run, Tally, LOADED_TOMBSTONE,
};

use crate::compaction::policy;
use crate::expiry::timers::{Filing, Timers};
use crate::expiry::Timer;
use crate::keydir::{Entry, Gathered, HashKey, Key, KeyMap, PartPages, SLAB_PAGE};
use crate::ttl::{self, TtlChange};

/// Records per shard of an ordered map (at most; `Options::open_shard_records` may ask for
/// fewer), and until "Huge slab pages" (DESIGN.md §3.1) per part of open's merges too.
/// Chosen when each part built a B-tree of its own (open built ordered maps until 2026-12-07):
/// smaller parts left less behind, each thread's merged vector and sort scratch being freed
/// into its allocator arena between the tree nodes. Measured then at 1 M keys (RSS growth per
/// key after open, open time): one shard 69.1 B, 127 ms; 65 k records per shard 78.7 B, 75 ms;
/// 16 k 72.3 B, 71 ms; 4 k 71.1 B, 79 ms.
pub(crate) const SHARD_RECORDS: usize = 1 << 14;
/// Records per part of open's merges by default (`Options::open_shard_records`): 128 K, four
/// slab pages of 2 MiB, which the map takes whole. A part's entries after its last whole page
/// are copied into pages of the map's own; with parts of [`SHARD_RECORDS`] (under one page)
/// that was every entry (DESIGN.md §3.1, "Huge slab pages").
pub(crate) const PART_RECORDS: usize = 1 << 17;
/// Parts per thread open's merges are cut into at least, where parts of two slab pages or more
/// allow it (parts vary in size and lose overwritten records, so one page would often leave
/// none whole): a keyspace of 300 K records still merges on every core.
const PARTS_PER_THREAD: usize = 4;
/// At most this many parts (each costs a split key, and the index tables are filled from each
/// part's elements in turn).
const MAX_SHARDS: usize = 256;

/// One deadline in this many is sampled to cut the filing of timers into ranges.
const SAMPLE_EVERY: usize = 64;

/// Live bytes and deadline per segment file.
pub(super) type LiveByFile = HashMap<u32, FileLive, BuildHasherDefault<FileIdHasher>>;

/// The deadlines of the entries that have one: how many, the earliest and latest, and a
/// sample (one in [`SAMPLE_EVERY`]) for cutting their filing into ranges.
pub(super) struct Deadlines {
    pub(super) count: usize,
    /// `(u64::MAX, 0)` while there is none.
    pub(super) span: (u64, u64),
    pub(super) sample: Vec<u64>,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            count: 0,
            span: (u64::MAX, 0),
            sample: Vec::new(),
        }
    }
}

impl Deadlines {
    fn note(&mut self, at: u64) {
        if self.count.is_multiple_of(SAMPLE_EVERY) {
            self.sample.push(at);
        }
        self.count += 1;
        self.span = (self.span.0.min(at), self.span.1.max(at));
    }

    fn absorb(&mut self, other: Deadlines) {
        self.count += other.count;
        self.span = (self.span.0.min(other.span.0), self.span.1.max(other.span.1));
        self.sample.extend(other.sample);
    }
}

/// What a pass over the survivors of some keys gathered besides the map.
#[derive(Default)]
pub(super) struct Survivors {
    /// The kept entries, for their census.
    pub(super) census: Gathered,
    /// The kept entries' bytes and latest deadline per file.
    pub(super) live: LiveByFile,
    /// The kept entries' deadlines (each marked in its entry's `armed`).
    pub(super) deadlines: Deadlines,
    /// Puts freed because they expired and were reported before the last close:
    /// `(file, record length, deadline)`.
    pub(super) expired: Vec<(u32, u64, u64)>,
    /// What the merge decoded of each hint run read in place: `(file, tally)`.
    pub(super) tallies: Vec<(u32, Tally)>,
}

impl Survivors {
    /// Adds what `other` gathered (hashed by file: survivors come in key order, so with keys
    /// written in random order each one is in another file).
    pub(super) fn absorb(&mut self, other: Survivors) {
        self.census.absorb(other.census);
        self.deadlines.absorb(other.deadlines);
        for (file, l) in other.live {
            self.live.entry(file).or_default().add(&l);
        }
        self.expired.extend(other.expired);
        self.tallies.extend(other.tallies);
    }
}

/// What decides whether a key's newest record enters the key directory.
pub(super) struct Rules<'a> {
    /// Its default-TTL history.
    pub(super) history: &'a [TtlChange],
    /// Expiries through this second were reported before the last close.
    pub(super) reaped_upto: u64,
    /// The open's `now`.
    pub(super) now: u64,
}

impl Rules<'_> {
    /// Decides a key's newest record (a tombstone too), marking the second of its timer
    /// (filed by [`file_timers`]), and counts it in `acc` if kept.
    fn keep(&self, acc: &mut Survivors, (_, e): &mut (Key, Entry)) -> bool {
        if e.flags & LOADED_TOMBSTONE != 0 {
            return false;
        }
        let at = ttl::expires_at(e.ts.get(), e.own_ttl(), self.history);
        if at <= self.reaped_upto {
            // Expired and already reported before the last close: free it now.
            acc.expired.push((e.file, u64::from(e.len), at));
            return false;
        }
        if at != ttl::NEVER {
            e.armed = at;
            acc.deadlines.note(at);
        }
        acc.census.add(e);
        let live = acc.live.entry(e.file).or_default();
        live.bytes += u64::from(e.len);
        live.dies_by = live.dies_by.max(at);
        if policy::expires_soon(at, self.now) {
            live.soon += u64::from(e.len);
        }
        true
    }
}

/// A shard's first key (none for the first) and the next shard's (none for the last).
type Bounds = (Option<Key>, Option<Key>);

/// A shard to build: its first key (none for the first) and its piece of every run.
type Job<'r> = (Option<Key>, Vec<Piece<'r>>);

/// A shard's piece of one run.
enum Piece<'r> {
    Decoded(&'r mut [(Key, Entry)]),
    /// The entries of a hint run from byte `from` to byte `to`, the run's `index`-th up to
    /// (not including) its `end`-th, their keys within the shard's `bounds` (its first key, the
    /// next shard's first key).
    Hint {
        run: &'r HintRun,
        from: usize,
        to: usize,
        index: usize,
        end: usize,
        bounds: Bounds,
    },
}

impl<'r> Piece<'r> {
    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            Piece::Decoded(p) => p.len(),
            Piece::Hint { run, from, to, .. } => run.entries(*from, *to).count(),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Piece::Decoded(p) => p.is_empty(),
            // By its bytes: the count comes from the marks' places.
            Piece::Hint { from, to, .. } => from >= to,
        }
    }

    /// Its records, in order; a decoded piece's keys are moved out.
    fn records(self) -> Records<'r> {
        match self {
            Piece::Decoded(p) => Records::Decoded(p.iter_mut()),
            Piece::Hint {
                run,
                from,
                to,
                index,
                end,
                bounds,
            } => Records::Hint {
                entries: run.entries(from, to),
                run,
                last: None,
                tally: Tally::default(),
                index,
                end,
                bounds,
            },
        }
    }
}

/// The records of a [`Piece`].
pub(super) enum Records<'r> {
    Decoded(std::slice::IterMut<'r, (Key, Entry)>),
    Hint {
        entries: crate::format::hint::Entries<'r>,
        run: &'r HintRun,
        /// The key and sequence number of the entry before.
        last: Option<(&'r [u8], u64)>,
        /// What was decoded, added to the run's when the piece ends.
        tally: Tally,
        /// The index in the run of the next entry, and of the entry after the piece's last:
        /// a piece that does not hold as many entries as the cuts counted fails (so every
        /// index is right, and every mark is checked).
        index: usize,
        end: usize,
        bounds: Bounds,
    },
}

impl<'r> Records<'r> {
    /// All of hint run `run`'s entries, checked as the merge checks them.
    pub(super) fn whole(run: &'r HintRun) -> Self {
        Records::Hint {
            entries: run.entries(run.from, run.to),
            run,
            last: None,
            tally: Tally::default(),
            index: 0,
            end: run.len,
            bounds: (None, None),
        }
    }
}

impl Iterator for Records<'_> {
    type Item = (Key, Entry);

    fn next(&mut self) -> Option<(Key, Entry)> {
        match self {
            Records::Decoded(it) => it.next().map(|(k, e)| (std::mem::take(k), *e)),
            Records::Hint {
                entries,
                run,
                last,
                tally,
                index,
                end,
                bounds,
            } => {
                let at = entries.pos();
                let Some(next) = entries.next() else {
                    if *index != *end {
                        return run.broke();
                    }
                    run.tally.lock().absorb(tally);
                    *tally = Tally::default();
                    return None;
                };
                let Ok((meta, key, offset, len)) = next else {
                    return run.broke();
                };
                tally.add(&meta, key, offset, len);
                // In its keyspace, in order (key, then newest first), inside its shard and its
                // segment, and where a mark is, the entry the mark names: so a summary's
                // ranges and marks are held to the entries before anything built from them
                // is kept (DESIGN.md §2.3).
                let in_order =
                    last.is_none_or(|(k, seq)| k.cmp(key).then(meta.seq.cmp(&seq)).is_le());
                let in_shard = bounds.0.as_ref().is_none_or(|l| key >= l.as_slice())
                    && bounds.1.as_ref().is_none_or(|u| key < u.as_slice());
                let marked = !index.is_multiple_of(super::MARK_EVERY)
                    || run
                        .marks
                        .get(*index / super::MARK_EVERY)
                        .is_some_and(|(k, pos)| *pos == at && k.as_slice() == key);
                *index += 1;
                if meta.keyspace != run.keyspace
                    || !in_order
                    || !in_shard
                    || !marked
                    || u64::from(offset) + u64::from(len) > run.seg_len
                {
                    return run.broke();
                }
                *last = Some((key, meta.seq));
                Some((
                    Key::from_slice(key),
                    loaded_entry(run.file, offset, len, &meta),
                ))
            }
        }
    }
}

/// The timers of every entry of `maps` (keyspace id, map) that has a deadline, filed at once
/// (`timers::Filing`) after the maps are built: `armed` entries in all, their seconds within
/// `span`. Filing them per shard and joining the sets cost memory: with deadlines spread over
/// a day, each shard's bucket of a second held one or two timers in a chunk of eight, and the
/// chunks freed after the join stayed in the allocator's arenas (RSS growth per key after
/// opening 1 M keys with TTLs of 1 h to 1 day: 133.5 bytes inserted one by one, 196.5 joined).
///
/// With `threads` above one and at least `ranged_from` timers ([`SHARD_RECORDS`] but in tests),
/// the seconds are cut into up
/// to that many ranges (8 at most) at quantiles of `sample` (seconds of some of the timers), so
/// each range holds about as many timers; each is filed by its own thread walking every map
/// for the timers in it, and the sets are joined (their seconds do not overlap). The first and
/// last ranges are open-ended: a timer outside `span` is still filed. 1 M timers over a day:
/// 87 ms filed by one thread.
pub(super) fn file_timers(
    maps: &[(u32, &KeyMap)],
    deadlines: &Deadlines,
    threads: usize,
    ranged_from: usize,
) -> Timers {
    let Deadlines {
        count,
        span,
        ref sample,
    } = *deadlines;
    // The first second of every range but the first.
    let cuts = if count >= ranged_from && threads > 1 {
        quantiles(sample.clone(), threads.min(8))
    } else {
        Vec::new()
    };
    let parts = cuts.len() + 1;
    // Range `i`: from `cuts[i - 1]` (the first: from 0) up to `cuts[i] - 1` (the last: on).
    let ranges = (0..parts).map(|i| {
        let lo = if i == 0 { 0 } else { cuts[i - 1] };
        let hi = cuts.get(i).map_or(u64::MAX, |c| c - 1);
        (lo, hi)
    });
    let filed = super::side_by_side(ranges.collect(), parts, false, |(), range| {
        file_range(maps, count.div_ceil(parts), span, range)
    });
    let mut all = Timers::default();
    for part in filed {
        all.join(part);
    }
    all
}

/// The timers of `maps` whose seconds lie within `lo..=hi`: about `len` of them, their seconds
/// expected within `span`.
fn file_range(
    maps: &[(u32, &KeyMap)],
    len: usize,
    span: (u64, u64),
    (lo, hi): (u64, u64),
) -> Timers {
    let mine = |at: u64| at != ttl::NEVER && (lo..=hi).contains(&at);
    let mut filing = Filing::new(len, (span.0.max(lo), span.1.min(hi)));
    if filing.wants_counts() {
        for (_, map) in maps {
            map.for_each(|_, e| {
                if mine(e.armed) {
                    filing.count(e.armed);
                }
            });
        }
    }
    for &(keyspace, map) in maps {
        map.for_each(|key, e| {
            if mine(e.armed) {
                let key = key.clone();
                filing.file(e.armed, Timer { keyspace, key });
            }
        });
    }
    filing.finish()
}

/// Up to `shards - 1` strictly increasing keys that cut the records of `runs` into about
/// equal parts: quantiles of a sample of every `step`-th record of the runs laid end to end
/// (the count carries from one run to the next, so short runs are sampled as often as long
/// ones; taking each run's first record would sample only the smallest key of each short run,
/// and a sample of the largest run alone would put every cut inside it when each file holds a
/// key range of its own, as with keys that grow over time).
fn split_keys(runs: &[Run], shards: usize) -> Vec<Key> {
    let total: usize = runs.iter().map(Run::len).sum();
    let step = (total / (shards * 32)).max(1);
    let mut sample: Vec<Key> = Vec::with_capacity(total / step + 1);
    let mut at = 0;
    for run in runs {
        match run {
            Run::Decoded(v) => {
                while let Some((k, _)) = v.get(at) {
                    sample.push(k.clone());
                    at += step;
                }
            }
            Run::Hint(h) => at = h.sample(at, step, &mut sample),
        }
        at = at.saturating_sub(run.len());
    }
    let sample: Vec<&Key> = sample.iter().collect();
    quantiles(sample, shards).into_iter().cloned().collect()
}

/// Up to `parts - 1` strictly increasing values that cut `sample` into about equal parts, each
/// above the smallest value (a cut there would leave the first part empty).
fn quantiles<T: Ord + Copy>(mut sample: Vec<T>, parts: usize) -> Vec<T> {
    sample.sort_unstable();
    let mut cuts: Vec<T> = Vec::with_capacity(parts.saturating_sub(1));
    for i in 1..parts {
        let Some(&at) = sample.get(i * sample.len() / parts) else {
            break;
        };
        if sample.first().is_some_and(|&first| first < at)
            && cuts.last().is_none_or(|&last| last < at)
        {
            cuts.push(at);
        }
    }
    cuts
}

/// `runs` cut into shards of about `per_shard` records, each with its first key (none for
/// the first) and its pieces of every run.
fn split(runs: &mut [Run], per_shard: usize) -> Vec<Job<'_>> {
    let total: usize = runs.iter().map(Run::len).sum();
    let shards = (total / per_shard.max(1)).clamp(1, MAX_SHARDS);
    let starts = if shards > 1 {
        split_keys(runs, shards)
    } else {
        Vec::new()
    };
    // Each shard's pieces of every run.
    let mut jobs: Vec<Job<'_>> = std::iter::once(None)
        .chain(starts.into_iter().map(Some))
        .map(|s| (s, Vec::new()))
        .collect();
    for run in runs.iter_mut() {
        match run {
            Run::Decoded(run) => {
                let mut rest: &mut [(Key, Entry)] = run;
                for i in 0..jobs.len() {
                    let cut = match jobs.get(i + 1) {
                        Some((Some(next), _)) => rest.partition_point(|(k, _)| k < next),
                        _ => rest.len(),
                    };
                    let (piece, tail) = std::mem::take(&mut rest).split_at_mut(cut);
                    if !piece.is_empty() {
                        jobs[i].1.push(Piece::Decoded(piece));
                    }
                    rest = tail;
                }
            }
            Run::Hint(run) => {
                let run: &HintRun = run;
                let mut start = (run.from, 0);
                for i in 0..jobs.len() {
                    let next = jobs.get(i + 1).and_then(|(k, _)| k.clone());
                    let end = match &next {
                        Some(next) => run.cut(next, start),
                        None => (run.to, run.len),
                    };
                    if end.0 < start.0 || end.1 < start.1 {
                        // A cut before the one before: only marks out of place give one.
                        run.broke::<()>();
                    }
                    let piece = Piece::Hint {
                        run,
                        from: start.0,
                        to: end.0,
                        index: start.1,
                        end: end.1,
                        bounds: (jobs[i].0.clone(), next),
                    };
                    if !piece.is_empty() {
                        jobs[i].1.push(piece);
                    }
                    start = end;
                }
            }
        }
    }
    jobs
}

/// The key directory of a keyspace from its `runs` (each sorted by key, newest first), with
/// what its survivors gathered: the records merged in parts of about `per_part` records on
/// up to `threads` threads, then built into one hashed map (ordered later in shards of at
/// most [`SHARD_RECORDS`], fewer if `per_part` is). Each key's first record in the
/// merged order (its newest; between equal sequence numbers, the one from the earlier run) is
/// decided by `rules`.
///
/// # Errors
/// The segment id of a hint run that no longer decoded (its file changed since open checked
/// it): the map would miss its records.
pub(super) fn build(
    mut runs: Vec<Run>,
    rules: &Rules<'_>,
    per_part: usize,
    threads: usize,
) -> Result<(KeyMap, Survivors), u32> {
    let total: usize = runs.iter().map(Run::len).sum();
    let per_part = per_part.min((total / (PARTS_PER_THREAD * threads.max(1))).max(2 * SLAB_PAGE));
    let jobs = split(&mut runs, per_part);
    let hash_key = HashKey::new();
    let one = |pieces: Vec<Piece<'_>>| {
        let mut acc = Survivors::default();
        let iters: Vec<_> = pieces.into_iter().map(Piece::records).collect();
        // The survivors go straight into slab pages, and are then laid out for a hashed map
        // on this thread (wasted only for a keyspace too large to be hashed).
        let mut kept = PartPages::default();
        merge_runs_with(iters, |r| rules.keep(&mut acc, r), |r| kept.push(r));
        (hash_key.prepare(kept), acc)
    };
    let threads = threads.min(jobs.len());
    let built = super::side_by_side(jobs, threads, false, |(), (_, pieces)| one(pieces));
    let mut all = Survivors::default();
    let mut parts = Vec::with_capacity(built.len());
    for (part, acc) in built {
        parts.push(part);
        all.absorb(acc);
    }
    // A run whose entries did not decode, or whose pieces did not decode as many entries as
    // its count (its marks would be wrong), fails the open.
    let broken = runs.iter().find_map(|run| match run {
        Run::Hint(h)
            if h.broken.load(std::sync::atomic::Ordering::Relaxed)
                || h.tally.lock().count != h.len as u64 =>
        {
            Some(h.file)
        }
        _ => None,
    });
    all.tallies.extend(runs.iter().filter_map(|run| match run {
        Run::Hint(h) => Some((h.file, *h.tally.lock())),
        Run::Decoded(_) => None,
    }));
    // The runs' records were moved out by the merges, but dropping them still visits each
    // (10 ms at 1 M records): their room goes before the map's, on every core.
    super::side_by_side(runs, threads, false, |(), run| drop(run));
    if let Some(file) = broken {
        return Err(file);
    }
    // Hashed, as a map that starts empty is (DESIGN.md §3.1, "Open builds hashed maps"), or
    // ordered when it holds more entries than a hashed map may.
    Ok((
        KeyMap::hashed_from(&hash_key, parts, per_part.min(SHARD_RECORDS)),
        all,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::{load_hint, HintBytes, HintLoad, Loader};
    use super::*;
    use crate::format::hint::HintWriter;
    use crate::format::record::{Kind, Meta};
    use crate::keydir::WriteSecs;
    use crate::ttl::{DefaultTtl, ItemTtl};
    use std::sync::Arc;

    /// A run of decoded records, as the tests make them.
    type Run = Vec<(Key, Entry)>;

    /// `runs` as decoded runs.
    fn decoded(runs: &[Run]) -> Vec<super::Run> {
        runs.iter().cloned().map(super::Run::Decoded).collect()
    }

    /// `runs` written as hint files (segment `i` for run `i`, keyspace 3's records between a
    /// few of keyspaces 2 and 4) and loaded back as keyspace 3's hint runs (an empty decoded
    /// run where a run is empty). Each record's file must be its run's index.
    fn hinted(runs: &[Run]) -> Vec<super::Run> {
        let meta = |ks: u32, e: &Entry| Meta {
            kind: if e.flags & LOADED_TOMBSTONE != 0 {
                Kind::Tombstone
            } else {
                Kind::Put
            },
            flags: e.flags & !LOADED_TOMBSTONE,
            keyspace: ks,
            ttl: ItemTtl::from_wire(e.ttl).expect("a valid TTL"),
            seq: e.seq,
            write_ms: e.ts.get() * 1000 + e.seq % 1000,
        };
        runs.iter()
            .enumerate()
            .map(|(i, run)| {
                let id = i as u32;
                let mut w = HintWriter::new(id);
                for (ks, extra) in [(2u32, 3u64), (4, 300)] {
                    for j in 0..extra {
                        let (k, mut e) = rec(j, 1 << 40 | j, id, 1_000, None, false);
                        e.offset = 0;
                        w.add(&meta(ks, &e), &k, 0, 1);
                    }
                }
                for (k, e) in run {
                    assert_eq!(e.file, id);
                    w.add(&meta(3, e), k, e.offset, e.len);
                }
                let mut loader = Loader::default();
                let bytes = Arc::new(HintBytes::Read(w.finish()));
                assert_eq!(
                    load_hint(bytes, id, u64::MAX, true, &mut loader),
                    HintLoad::Used
                );
                assert!(loader.keys.is_empty(), "a sorted hint is read in place");
                let mut ours: Vec<super::Run> = loader
                    .hints
                    .into_iter()
                    .filter(|(ks, _)| *ks == 3)
                    .map(|(_, h)| super::Run::Hint(h))
                    .collect();
                assert!(ours.len() <= 1);
                ours.pop().unwrap_or(super::Run::Decoded(Vec::new()))
            })
            .collect()
    }

    /// `build` of decoded `runs`.
    fn build_of(
        runs: &[Run],
        rules: &Rules<'_>,
        per: usize,
        threads: usize,
    ) -> (KeyMap, Survivors) {
        build(decoded(runs), rules, per, threads).expect("no hint run")
    }

    /// A record of `key` with sequence number `seq` in `file`, written at second `ts`, with
    /// its own TTL `ttl` (or inheriting), maybe a tombstone.
    fn rec(key: u64, seq: u64, file: u32, ts: u64, ttl: Option<u32>, dead: bool) -> (Key, Entry) {
        let own = ttl.map_or(ItemTtl::Inherit, ItemTtl::Seconds);
        let key = Key::from_slice(&key.to_be_bytes()[3..]);
        let entry = Entry {
            seq,
            file,
            offset: (seq % 1000) as u32,
            len: 40 + (seq % 7) as u32,
            ts: WriteSecs::saturating(ts),
            ttl: own.to_wire(),
            flags: if dead { LOADED_TOMBSTONE } else { 0 },
            armed: ttl::NEVER,
        };
        (key, entry)
    }

    /// Many short runs of random keys (one per file of a small segment size) are cut into
    /// shards of about the size asked for.
    #[test]
    fn many_short_runs_are_split_evenly() {
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut seq = 0;
        let runs: Vec<Run> = (0..2_000)
            .map(|file| {
                let mut run: Run = (0..100)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        seq += 1;
                        rec(x >> 24, seq, file, 1_000, None, false)
                    })
                    .collect();
                run.sort_by(super::super::record_order);
                run
            })
            .collect();
        let history = [TtlChange {
            since: 0,
            default: DefaultTtl::Off,
        }];
        let rules = Rules {
            history: &history,
            reaped_upto: 0,
            now: 1_000,
        };
        // Decoded, and read from hints in place (sampled from their marks): as even.
        for mut split_runs in [decoded(&runs), hinted(&runs)] {
            let lens: Vec<usize> = split(&mut split_runs, 10_000)
                .iter()
                .map(|(_, pieces)| pieces.iter().map(|p| p.len()).sum())
                .collect();
            assert_eq!(lens.len(), 20);
            assert!(lens.iter().all(|&n| n < 3 * 10_000), "{lens:?}");
        }
        let (map, _) = build_of(&runs, &rules, 10_000, 2);
        assert_eq!(map.len(), runs.iter().map(Vec::len).sum::<usize>());
    }

    /// Three keyspaces' maps filed together: every timer keeps its keyspace, key and second,
    /// whichever path files them; a keyspace without deadlines adds none.
    #[test]
    fn timers_of_several_keyspaces_are_filed_together() {
        let rules = rules_30s();
        for far in [false, true] {
            let mut built = Vec::new();
            for ks in 0..3u32 {
                let mut run: Run = (0..500u64)
                    .map(|i| {
                        let ttl = match ks {
                            0 => Some(100 + (i % 3) as u32),
                            1 if far && i == 7 => Some(u32::MAX >> 2),
                            1 => Some(1 + (i % 90) as u32),
                            _ => None,
                        };
                        let mut r = rec(i * 3 + u64::from(ks), i + 1, ks, 1_000, ttl, false);
                        if ks == 2 {
                            r.1.ttl = ItemTtl::Never.to_wire();
                        }
                        r
                    })
                    .collect();
                run.sort_by(super::super::record_order);
                let (map, acc) = build_of(&[run], &rules, 100, 2);
                built.push((ks + 10, map, acc));
            }
            let maps: Vec<(u32, &KeyMap)> = built.iter().map(|(id, m, _)| (*id, m)).collect();
            let mut deadlines = Deadlines::default();
            for (_, _, a) in &built {
                deadlines.absorb(Deadlines {
                    sample: a.deadlines.sample.clone(),
                    ..a.deadlines
                });
            }
            assert_eq!(deadlines.count, 1_000);
            let mut out = Vec::new();
            file_timers(&maps, &deadlines, 2, SHARD_RECORDS).take(u64::MAX, usize::MAX, &mut out);
            let mut got: Vec<(u64, u32, Key)> = crate::expiry::timers::each_timer(out)
                .map(|(at, t)| (at, t.keyspace, t.key))
                .collect();
            got.sort_unstable();
            let mut want: Vec<(u64, u32, Key)> = built
                .iter()
                .flat_map(|(id, m, _)| {
                    m.iter()
                        .filter(|(_, e)| e.armed != ttl::NEVER)
                        .map(move |(k, e)| (e.armed, *id, k.clone()))
                })
                .collect();
            want.sort_unstable();
            assert_eq!(got.len(), 1_000);
            assert!(
                got.iter().all(|(_, id, _)| *id != 12),
                "keyspace 12 has no deadline"
            );
            assert_eq!(got, want, "far {far}");
        }
    }

    /// Enough timers to be filed in ranges of seconds by several threads: the same set as one
    /// thread files, whether the seconds are spread, bunched at the ends, or in two seconds.
    #[test]
    fn timers_filed_in_ranges_side_by_side_are_the_same_set() {
        let rules = rules_30s();
        // Spread; bunched at both ends; two seconds; three seconds (fewer than the threads);
        // one far deadline among near ones; spread too wide to count (filed by sorting).
        for shape in 0..6u64 {
            let mut run: Run = (0..40_000u64)
                .map(|i| {
                    let ttl = match shape {
                        0 => 1 + (i * 7919) % 5_000,
                        1 if i % 2 == 0 => 1 + i % 3,
                        1 => 90_000 - i % 3,
                        2 => 10 + i % 2,
                        3 => 10 + i % 3,
                        4 if i == 777 => 900_000_000,
                        4 => 1 + i % 100,
                        _ => 1 + (i * 7919) % 50_000_000,
                    };
                    rec(i, i + 1, 1, 1_000, Some(ttl as u32), false)
                })
                .collect();
            run.sort_by(super::super::record_order);
            let (map, acc) = build_of(&[run], &rules, SHARD_RECORDS, 2);
            assert_eq!(acc.deadlines.count, 40_000);
            let want = fired(&mut file_timers(
                &[(1, &map)],
                &acc.deadlines,
                1,
                SHARD_RECORDS,
            ));
            assert_eq!(want.len(), 40_000);
            assert!(!acc.deadlines.sample.is_empty());
            for threads in [2, 3, 8] {
                let mut got = file_timers(&[(1, &map)], &acc.deadlines, threads, SHARD_RECORDS);
                assert_eq!(got.len(), 40_000);
                assert_eq!(fired(&mut got), want, "shape {shape}, {threads} threads");
            }
        }
    }

    /// A keyspace whose default TTL has been 30 s since second 0, opened at second 1,000
    /// with nothing reported expired yet.
    fn rules_30s() -> Rules<'static> {
        const HISTORY: [TtlChange; 1] = [TtlChange {
            since: 0,
            default: DefaultTtl::Seconds(30),
        }];
        Rules {
            history: &HISTORY,
            reaped_upto: 0,
            now: 1_000,
        }
    }

    /// Every timer of `t`, taken out, with its second, sorted.
    fn fired(t: &mut Timers) -> Vec<(u64, Key)> {
        let mut out = Vec::new();
        t.take(u64::MAX, usize::MAX, &mut out);
        let mut all: Vec<_> = crate::expiry::timers::each_timer(out)
            .map(|(at, t)| (at, t.key))
            .collect();
        all.sort_unstable();
        all
    }

    /// Random runs over overlapping and disjoint key ranges, built with every shard size and
    /// thread count: the map, census, timers, live bytes and freed records equal those of one
    /// shard built on this thread.
    #[test]
    fn shards_build_what_one_merge_builds() {
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let history = [TtlChange {
            since: 0,
            default: DefaultTtl::Seconds(50),
        }];
        let rules = Rules {
            history: &history,
            reaped_upto: 1_030,
            now: 1_040,
        };
        for round in 0..12 {
            let mut seq = 0;
            let runs: Vec<Run> = (0..1 + next(6))
                .map(|file| {
                    // Half the rounds give each file its own key range (keys that grow).
                    let base = if round % 2 == 0 { 0 } else { file * 5_000 };
                    let mut run: Run = (0..next(3_000))
                        .map(|_| {
                            seq += 1;
                            // Rounds 0-5 keep the deadlines within a few minutes, so the
                            // timers are counted per second; the rest span 34 years.
                            let ttl = match next(4) {
                                0 => None,
                                1 if round >= 6 => Some(u32::MAX >> 2),
                                _ => Some(next(120) as u32 + 1),
                            };
                            let key = base + next(if round % 3 == 0 { 50 } else { 8_000 });
                            rec(key, seq, file as u32, 1_000 + next(40), ttl, next(9) == 0)
                        })
                        .collect();
                    run.sort_by(super::super::record_order);
                    run
                })
                .collect();
            // Copies of records in later files with the same sequence number (as a merge
            // output beside its input): between equal records the earlier run wins (each
            // record's file is its run's, so the winner tells).
            let mut runs = runs;
            for i in 1..runs.len() {
                let copies: Vec<(Key, Entry)> = runs[..i]
                    .iter()
                    .flatten()
                    .filter(|_| next(20) == 0)
                    .map(|(k, e)| {
                        (
                            k.clone(),
                            Entry {
                                file: i as u32,
                                ..*e
                            },
                        )
                    })
                    .collect();
                runs[i].extend(copies);
                runs[i].sort_by(super::super::record_order);
            }
            let (want, want_acc) = build_of(&runs, &rules, usize::MAX, 1);
            assert_eq!(split(&mut decoded(&runs), usize::MAX).len(), 1);
            let want_fired = fired(&mut file_timers(
                &[(3, &want)],
                &want_acc.deadlines,
                1,
                SHARD_RECORDS,
            ));
            // Each timer is its entry's: the key at the second the entry is armed for.
            let mut armed_pairs: Vec<(u64, Key)> = want
                .iter()
                .filter(|(_, e)| e.armed != ttl::NEVER)
                .map(|(k, e)| (e.armed, k.clone()))
                .collect();
            armed_pairs.sort_unstable();
            assert_eq!(want_fired, armed_pairs);
            let armed = want.iter().filter(|(_, e)| e.armed != ttl::NEVER).count();
            assert!(armed > 0);
            assert_eq!(want_fired.len(), armed, "a timer for every armed entry");
            let cases = [(1, 1), (7, 2), (100, 2), (1_000, 3), (SHARD_RECORDS, 2)];
            // Each case with decoded runs, then with the same runs read from hints in place.
            for ((per_shard, threads), hint) in
                cases.into_iter().flat_map(|c| [(c, false), (c, true)])
            {
                let (got, acc) = if hint {
                    build(hinted(&runs), &rules, per_shard, threads).expect("hint runs decode")
                } else {
                    build_of(&runs, &rules, per_shard, threads)
                };
                let total: usize = runs.iter().map(Vec::len).sum();
                if per_shard < total / 2 {
                    assert!(
                        split(&mut decoded(&runs), per_shard).len() > 1,
                        "round {round}: {total} records in one shard"
                    );
                }
                // A hashed map holds its entries in slab order: compared in key order.
                let mut a: Vec<_> = got.iter().map(|(k, e)| (k.clone(), *e)).collect();
                let mut b: Vec<_> = want.iter().map(|(k, e)| (k.clone(), *e)).collect();
                a.sort_by(|x, y| x.0.cmp(&y.0));
                b.sort_by(|x, y| x.0.cmp(&y.0));
                assert!(a.windows(2).all(|w| w[0].0 < w[1].0), "a key twice");
                assert_eq!(a, b, "round {round}, {per_shard} per shard, hints {hint}");
                assert_eq!(
                    acc.census.clone().finish(),
                    want_acc.census.clone().finish()
                );
                let mut live: Vec<_> = acc
                    .live
                    .iter()
                    .map(|(f, l)| (*f, l.bytes, l.dies_by, l.soon))
                    .collect();
                let mut live_want: Vec<_> = want_acc
                    .live
                    .iter()
                    .map(|(f, l)| (*f, l.bytes, l.dies_by, l.soon))
                    .collect();
                live.sort_unstable();
                live_want.sort_unstable();
                assert_eq!(live, live_want);
                let mut freed = acc.expired.clone();
                let mut freed_want = want_acc.expired.clone();
                freed.sort_unstable();
                freed_want.sort_unstable();
                assert_eq!(freed, freed_want);
                assert_eq!(
                    (acc.deadlines.count, acc.deadlines.span),
                    (want_acc.deadlines.count, want_acc.deadlines.span)
                );
                assert_eq!(
                    fired(&mut file_timers(
                        &[(3, &got)],
                        &acc.deadlines,
                        threads,
                        per_shard
                    )),
                    want_fired
                );
            }
        }
    }
}
