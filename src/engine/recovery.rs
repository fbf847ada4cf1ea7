//! Opening a directory: lock, manifest, segments (hint or scan), torn-tail truncation, key
//! directory, timers.
//!
//! Per key the record with the highest sequence number wins, whichever file it is in: merge
//! outputs hold records of many ages, so file order means nothing. Tombstones (and compaction
//! markers) take part in that contest and are dropped only at the end, so an older put can
//! never win against a newer delete because of the order in which files were read.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use super::clockfile::ClockFile;
use super::{Catalog, ExpiryState, Inner, LogState, SegmentSet};
use crate::error::{Error, Result};
use crate::expiry::wheel::{TimerHandle, TimerWheel};
use crate::expiry::Timer;
use crate::format::record::{Kind, Meta, FLAG_SHADOWS};
use crate::format::{hint, SegmentHeader};
use crate::keydir::{Entry, Key, KeyspaceCore, KeyspaceState};
use crate::log::active::ActiveWriter;
use crate::log::lock::DirLock;
use crate::log::manifest::Manifest;
use crate::log::scan::{scan, ScanEnd};
use crate::log::segment::Segment;
use crate::log::{hint_path, parse_file_name, segment_path};
use crate::options::{Options, RecoveryMode};
use crate::stats::SegStats;
use crate::ttl;

/// Largest sequence number a healthy database can reach (see the range check in `open`).
pub(crate) const MAX_SEQ: u64 = 1 << 62;
/// Largest file or keyspace id a healthy database can reach.
pub(crate) const MAX_FILE_ID: u32 = 1 << 31;

/// In-memory-only flag marking a loaded tombstone (record flags use bits 0–2).
const LOADED_TOMBSTONE: u8 = 0x80;

/// Every put and tombstone seen, per keyspace, in no particular order. Sorting by key and then
/// by sequence (newest first) and keeping the first of each key picks the newest record; the
/// sorted result bulk-builds the key directory with full B-tree nodes.
#[derive(Default)]
struct Loader {
    keys: HashMap<u32, Vec<(Key, Entry)>>,
    max_seq: u64,
    max_write_ms: u64,
    stats: HashMap<u32, SegStats>,
}

impl Loader {
    fn add(&mut self, file: u32, offset: u32, len: u32, meta: &Meta, key: &[u8]) {
        self.max_seq = self.max_seq.max(meta.seq);
        self.max_write_ms = self.max_write_ms.max(meta.write_ms);
        let s = self.stats.entry(file).or_default();
        if meta.flags & FLAG_SHADOWS != 0 || meta.kind == Kind::Tombstone {
            s.shadowing += 1;
        }
        let tombstone = if meta.kind == Kind::Tombstone {
            LOADED_TOMBSTONE
        } else {
            0
        };
        let entry = Entry {
            seq: meta.seq,
            file,
            offset,
            len,
            ts: crate::keydir::WriteSecs::saturating(meta.ts()),
            ttl: meta.ttl.to_wire(),
            flags: meta.flags | tombstone,
            timer: TimerHandle::NONE,
        };
        self.keys
            .entry(meta.keyspace)
            .or_default()
            .push((Key::from_slice(key), entry));
    }
}

pub(super) fn open(dir: &Path, opts: Options) -> Result<Inner> {
    std::fs::create_dir_all(dir)?;
    let lock = DirLock::acquire(dir)?;
    let manifest = match Manifest::load(dir)? {
        Some(m) => m,
        None => init(dir)?,
    };
    remove_unlisted(dir, &manifest)?;
    let (clockfile, clock_state) = ClockFile::open(dir)?;

    let mut loader = Loader::default();
    let mut sealed = BTreeMap::new();
    for &id in &manifest.sealed {
        match load_sealed(dir, id, &opts, &mut loader) {
            Ok(Some(seg)) => {
                sealed.insert(id, Arc::new(seg));
            }
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    }
    let active_id = manifest.active.ok_or_else(|| {
        Error::corruption(dir.join("MANIFEST"), 0, "manifest names no active segment")
    })?;
    let active = load_active(dir, active_id, opts.segment_size, &mut loader)?;

    // Build the catalogue and the key directories.
    let now_floor_s = clock_state.high_water.max(loader.max_write_ms / 1000);
    let clock_now = opts.clock.now_unix_millis();
    let now_ms = clock_now.max(now_floor_s.saturating_mul(1000));
    let now = now_ms / 1000;
    let mut catalog = Catalog::default();
    let mut wheel = TimerWheel::new(now);
    let mut dead: Vec<(u32, u64, bool, u64)> = Vec::new();
    for meta in &manifest.keyspaces {
        let mut state = KeyspaceState {
            history: meta.history.clone(),
            ..KeyspaceState::default()
        };
        if let Some(mut pairs) = loader.keys.remove(&meta.id) {
            // Stable sort: it finds the sorted runs that hint files contribute and merges
            // them, so only scanned segments pay for a full sort.
            pairs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.seq.cmp(&a.1.seq)));
            pairs.dedup_by(|later, kept| later.0 == kept.0);
            pairs.retain_mut(|(key, e)| {
                if e.flags & LOADED_TOMBSTONE != 0 {
                    return false;
                }
                let at = state.expires_at(e);
                if at <= clock_state.reaped_upto {
                    // Expired and already reported before the last close: free it now.
                    dead.push((e.file, u64::from(e.len), true, at));
                    return false;
                }
                if at != ttl::NEVER {
                    e.timer = wheel.insert(
                        at,
                        Timer {
                            keyspace: meta.id,
                            key: key.as_slice().into(),
                        },
                    );
                }
                true
            });
            state.map = pairs.into_iter().collect::<BTreeMap<_, _>>();
        }
        let core = Arc::new(KeyspaceCore {
            id: meta.id,
            name: meta.name.clone(),
            state: RwLock::new(state),
            dropped: AtomicBool::new(false),
            scans: parking_lot::Mutex::default(),
        });
        catalog.by_name.insert(meta.name.clone(), Arc::clone(&core));
        catalog.by_id.insert(meta.id, core);
    }

    // Dead bytes per segment = total - bytes of entries the key directory points at.
    let mut segstats = loader.stats;
    for s in segstats.values_mut() {
        s.dead = s.total;
    }
    for core in catalog.by_id.values() {
        for e in core.state.read().map.values() {
            if let Some(s) = segstats.get_mut(&e.file) {
                s.dead = s.dead.saturating_sub(u64::from(e.len));
            }
        }
    }
    for (file, len, expired, at) in dead {
        if let Some(s) = segstats.get_mut(&file) {
            if expired {
                s.note_expired(len, at);
            }
        }
    }
    for id in sealed.keys() {
        segstats.entry(*id).or_default();
    }
    segstats.entry(active.id()).or_default();

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
        }),
        segments: RwLock::new(set),
        catalog: RwLock::new(catalog),
        sync: Mutex::new(super::SyncState::default()),
        sync_cv: Condvar::new(),
        poisoned: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        hw_ms: AtomicU64::new(now_ms),
        fence_ms: AtomicU64::new(super::NO_FENCE),
        persisted_s: AtomicU64::new(clock_state.high_water),
        clock_sync: clockfile.syncer()?,
        clockfile: Mutex::new((clockfile, clock_state)),
        expiry: Mutex::new(ExpiryState {
            wheel,
            reaped_upto: clock_state.reaped_upto,
        }),
        subscribers: Mutex::new(Vec::new()),
        expirations: AtomicU64::new(0),
        merges: AtomicU64::new(0),
        merge_lock: Mutex::new(()),
        worker: Mutex::new(None),
        worker_error: Mutex::new(super::WorkerErrors::default()),
        merge_crash_at: Mutex::new(None),
        opts,
    })
}

/// A new directory: first active segment and manifest.
fn init(dir: &Path) -> Result<Manifest> {
    // A crash while creating a database can leave the first segment without a manifest; it
    // holds no record (records are appended only after the manifest lists the segment), so it
    // is removed. A segment that holds records without a manifest is real damage.
    for entry in std::fs::read_dir(dir)? {
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
            std::fs::remove_file(entry.path())?;
        }
    }
    let manifest = Manifest {
        next_file_id: 2,
        next_seq: 1,
        next_keyspace_id: 1,
        sealed: Vec::new(),
        active: Some(1),
        keyspaces: Vec::new(),
    };
    ActiveWriter::create(dir, 1, 1, 0)?;
    manifest.store(dir)?;
    Ok(manifest)
}

/// Deletes segment and hint files the manifest does not list (unpublished merge outputs, a
/// segment created just before a crash, files of retired segments).
fn remove_unlisted(dir: &Path, manifest: &Manifest) -> Result<()> {
    let listed = |id: u32| manifest.sealed.contains(&id) || manifest.active == Some(id);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == "MANIFEST.tmp" || name.ends_with(".hint.tmp") {
            std::fs::remove_file(entry.path())?;
            continue;
        }
        if let Some((id, _)) = parse_file_name(name) {
            if !listed(id) {
                std::fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

fn load_sealed(
    dir: &Path,
    id: u32,
    opts: &Options,
    loader: &mut Loader,
) -> Result<Option<Segment>> {
    let seg = match Segment::open(dir, id) {
        Ok(s) => s,
        Err(e) if opts.recovery == RecoveryMode::Salvage => {
            let _ = e;
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if opts.use_hints {
        if let Ok(bytes) = std::fs::read(hint_path(dir, id)) {
            // A hint is used only if it is whole and every entry lies inside its segment.
            let data_end = seg.len();
            let mut fits = true;
            let valid = hint::visit(&bytes, id, |_, _, offset, len| {
                fits &= u64::from(offset) + u64::from(len) <= data_end;
            });
            if valid.is_ok() && fits {
                let _ = hint::visit(&bytes, id, |meta, key, offset, len| {
                    loader.add(id, offset, len, meta, key);
                });
                loader.stats.entry(id).or_default().total = seg.data_len();
                return Ok(Some(seg));
            }
        }
    }
    let end = scan(seg.bytes(), |off, len, rec| {
        loader.add(id, off, len, &rec.meta, rec.key)
    });
    if let ScanEnd::Bad { offset, err } = end {
        if opts.recovery == RecoveryMode::Strict {
            return Err(Error::corruption(
                seg.path(),
                offset as u64,
                err.to_string(),
            ));
        }
        // Salvage: the records before the damage are loaded; the rest is dead bytes.
    }
    // Every byte after the header counts: batch headers and salvaged tails are dead bytes.
    loader.stats.entry(id).or_default().total = seg.data_len();
    Ok(Some(seg))
}

fn load_active(dir: &Path, id: u32, map_len: u64, loader: &mut Loader) -> Result<ActiveWriter> {
    let path = segment_path(dir, id);
    let bytes = std::fs::read(&path)?;
    let header = SegmentHeader::decode(&bytes)
        .map_err(|e| Error::corruption(&path, 0, format!("segment header: {e}")))?;
    if header.id != id {
        return Err(Error::corruption(
            &path,
            0,
            "segment header names another file id",
        ));
    }
    // The active segment may end in a torn write: keep the whole records (and whole batches)
    // and cut the rest.
    let end = scan(&bytes, |off, len, rec| {
        loader.add(id, off, len, &rec.meta, rec.key)
    });
    let valid = end.valid_len() as u64;
    let zero_tail = bytes
        .get(end.valid_len()..)
        .is_some_and(|t| t.iter().all(|&b| b == 0));
    loader.stats.entry(id).or_default().total =
        valid.saturating_sub(crate::format::SEGMENT_HEADER_LEN as u64);
    Ok(ActiveWriter::reopen(
        dir, header, valid, zero_tail, map_len,
    )?)
}
