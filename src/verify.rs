//! [`verify`]: a read-only integrity check of a database directory (`ebbdb verify`).
//!
//! It reads every record of every segment the manifest lists and every hint file, with the
//! decoders opening uses (`format/`, `log/scan.rs`, `log/manifest.rs`), and checks:
//! - the manifest (magic, version, length, CRC, JSON body);
//! - each sealed segment: present, exactly the length the manifest recorded, a valid header
//!   naming its own id, and every record's CRC and fields from the header to that length
//!   (zeroed bytes before the end are damage, as opening treats them);
//! - the active segment: the same, except that a tail past the durable point `CLOCK`
//!   recorded, after which nothing decodes, is an unfinished write that opening cuts (a note,
//!   not a problem); zeros at its end are its preallocated space;
//! - each hint: magic, version, segment id, CRC, every entry, and that its entries are exactly
//!   the puts and tombstones of its segment (offset, length, header fields and key), so the
//!   key directory that opening builds from hints is the one a full scan of the log builds;
//! - every record: a keyspace id the manifest has handed out, and a sequence number no other
//!   record of a listed segment carries; a put flagged `DOC` (a document item the document
//!   layer wrote) holds one JSON object;
//! - files the manifest does not account for: a segment that opening would refuse is a
//!   problem; leftovers that opening removes are notes.
//!
//! Invariant: it never changes the directory. It opens files read-only, creates nothing, and
//! holds the directory lock (`LOCK`, opened without creating it) for the whole run, so it
//! never reads files a running store is changing: a directory that another handle or process
//! has open is [`Error::Locked`] at once, never a wait. A directory whose `LOCK` file is absent
//! (never opened by ebbdb, or copied without it) is read without a lock.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use byteorder::{ByteOrder, LittleEndian as LE};

use crate::error::{Error, IoContext, Result};
use crate::format::hint::{self, HINT_FOOTER_LEN};
use crate::format::record::{Kind, Meta, Record, FLAG_DOC};
use crate::format::{DecodeError, SegmentHeader, FORMAT_VERSION, SEGMENT_HEADER_LEN};
use crate::log::manifest::Manifest;
use crate::log::scan::{scan_all, Damage};
use crate::log::{hint_path, parse_file_name, segment_path, segment_tmp_path};

/// Most findings reported per file for one kind of mismatch (the rest are counted).
const MAX_PER_FILE: usize = 20;

/// One finding of [`verify`]: a file, a byte offset in it, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file.
    pub file: PathBuf,
    /// Byte offset in the file of the bad structure (0 for whole-file findings).
    pub offset: u64,
    /// What is wrong, in words.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.message
        )
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Corruption: data that fails a check, and that opening in
    /// [`RecoveryMode::Strict`](crate::RecoveryMode::Strict) would refuse or a read would
    /// fail on (a bad hint, which opening ignores in favour of scanning its segment, is
    /// reported here too).
    pub problems: Vec<Finding>,
    /// Harmless states worth knowing: an unfinished write at the end of the active segment,
    /// leftover temporary or retired files that the next open removes, a missing `CLOCK`.
    pub notes: Vec<Finding>,
    /// Segment files read (sealed and active).
    pub segments: usize,
    /// Hint files read.
    pub hints: usize,
    /// Records (puts and tombstones) that decoded.
    pub records: u64,
    /// Bytes read from segments and hints.
    pub bytes_read: u64,
    /// Keys whose newest record is a put, in keyspaces that exist (before expiry: expired
    /// items not yet purged are counted).
    pub keys: u64,
    /// Keyspaces the manifest lists.
    pub keyspaces: usize,
}

impl VerifyReport {
    /// True when no problem was found.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, file: &Path, offset: u64, message: impl Into<String>) {
        self.problems.push(Finding {
            file: file.to_path_buf(),
            offset,
            message: message.into(),
        });
    }

    fn note(&mut self, file: &Path, offset: u64, message: impl Into<String>) {
        self.notes.push(Finding {
            file: file.to_path_buf(),
            offset,
            message: message.into(),
        });
    }
}

/// Checks every record, hint and CRC of the database in `dir` without changing anything.
/// Corruption is reported in the returned [`VerifyReport`] (each problem with its file and
/// offset), not as an error.
///
/// It reads every record of every segment the manifest lists (also sealed segments that have a
/// hint, which opening would not scan), checks each hint against its segment entry by entry
/// (so the key directory opening builds from hints is the one the log gives), and checks the
/// manifest, segment lengths and headers, keyspace ids, unique sequence numbers, and files the
/// manifest does not account for. An unfinished write at the end of the active segment (past
/// the durable point in `CLOCK`), which opening cuts, is a note, not a problem.
///
/// It never modifies the directory: files are opened read-only and read (not mapped), nothing
/// is created or deleted. It holds the directory lock for the whole run, opening `LOCK`
/// without creating it, so a database that a [`Store`](crate::Store) or
/// [`Database`](crate::Database) has open (in this or another process) is
/// [`Error::Locked`] at once, never a wait; a directory without a `LOCK` file is read
/// unlocked. Each segment is read into memory whole, one at a time.
///
/// ```
/// use ebbdb::{DefaultTtl, Store};
///
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path())?;
/// store.create_keyspace("k", DefaultTtl::Off)?.put(b"a", b"1")?;
/// drop(store);
/// let report = ebbdb::verify(dir.path())?;
/// assert!(report.is_clean(), "{:?}", report.problems);
/// assert_eq!(report.keys, 1);
/// # Ok::<(), ebbdb::Error>(())
/// ```
///
/// # Errors
/// [`Error::Locked`] if another handle or process has the directory open; [`Error::NotFound`]
/// if `dir` holds no database (no `MANIFEST`); [`Error::Io`] for OS errors reading it.
pub fn verify(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    verify_with_progress(dir, |_, _| {})
}

/// [`verify`], calling `progress(bytes_done, bytes_total)` after each file it reads.
///
/// # Errors
/// As [`verify`].
pub fn verify_with_progress(
    dir: impl AsRef<Path>,
    mut progress: impl FnMut(u64, u64),
) -> Result<VerifyReport> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(Error::NotFound(format!(
            "no database directory at {}",
            dir.display()
        )));
    }
    let _lock = lock(dir)?;
    let mut report = VerifyReport::default();
    let manifest_path = dir.join("MANIFEST");
    if !manifest_path.exists() {
        return Err(Error::NotFound(format!(
            "no ebbdb database in {} (no MANIFEST file)",
            dir.display()
        )));
    }
    let manifest = match Manifest::load(dir) {
        Ok(Some(m)) => m,
        Ok(None) => {
            return Err(Error::NotFound(format!(
                "no ebbdb database in {} (no MANIFEST file)",
                dir.display()
            )))
        }
        Err(Error::Corruption {
            file,
            offset,
            reason,
        }) => {
            report.problem(&file, offset, reason);
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    report.keyspaces = manifest.keyspaces.len();
    let durable = read_clock(dir, &mut report)?;
    check_unlisted(dir, &manifest, &mut report)?;

    let total: u64 = listed_files(dir, &manifest)
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let mut done = 0u64;
    let mut log = LogCheck {
        next_keyspace_id: manifest.next_keyspace_id,
        ..LogCheck::default()
    };
    for entry in &manifest.sealed {
        let Some(path) = present(dir, entry.id, &mut report) else {
            report.problem(
                &segment_path(dir, entry.id),
                0,
                "segment listed in MANIFEST is missing",
            );
            continue;
        };
        let bytes = fs::read(&path).at(&path)?;
        done += bytes.len() as u64;
        report.segments += 1;
        report.bytes_read += bytes.len() as u64;
        let records = check_sealed(&path, entry.id, entry.len, &bytes, &mut report, &mut log);
        drop(bytes);
        let hp = hint_path(dir, entry.id);
        if let Ok(hint_bytes) = fs::read(&hp) {
            done += hint_bytes.len() as u64;
            report.hints += 1;
            report.bytes_read += hint_bytes.len() as u64;
            check_hint(&hp, entry.id, entry.len, &hint_bytes, &records, &mut report);
        }
        progress(done.min(total), total);
    }
    if let Some(id) = manifest.active {
        let path = present(dir, id, &mut report).unwrap_or_else(|| segment_path(dir, id));
        match fs::read(&path) {
            Ok(bytes) => {
                done += bytes.len() as u64;
                report.segments += 1;
                report.bytes_read += bytes.len() as u64;
                let claimed = match durable {
                    Some((seg, len)) if seg == id => len.max(SEGMENT_HEADER_LEN as u64),
                    _ => SEGMENT_HEADER_LEN as u64,
                };
                check_active(&path, id, &bytes, claimed, &mut report, &mut log);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                report.problem(&path, 0, "active segment listed in MANIFEST is missing");
            }
            Err(e) => return Err(Error::io_at(&path, e)),
        }
        progress(done.min(total), total);
    } else {
        report.problem(&manifest_path, 0, "manifest names no active segment");
    }
    log.finish(&manifest, &mut report);
    Ok(report)
}

/// Takes the directory lock without creating `LOCK`.
fn lock(dir: &Path) -> Result<Option<File>> {
    let path = dir.join("LOCK");
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io_at(&path, e)),
    };
    crate::log::lock::lock_file(&file, dir, &path)?;
    Ok(Some(file))
}

/// Every listed segment and hint file, for the progress total.
fn listed_files(dir: &Path, m: &Manifest) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = m
        .sealed
        .iter()
        .flat_map(|s| [segment_path(dir, s.id), hint_path(dir, s.id)])
        .collect();
    out.extend(m.active.map(|id| segment_path(dir, id)));
    out
}

/// The file holding listed segment `id`: its `.seg`, or a published merge output or
/// rotation successor still under its temporary name (opening renames it).
fn present(dir: &Path, id: u32, report: &mut VerifyReport) -> Option<PathBuf> {
    let path = segment_path(dir, id);
    if path.exists() {
        return Some(path);
    }
    let tmp = segment_tmp_path(dir, id);
    if tmp.exists() {
        report.note(
            &tmp,
            0,
            "listed segment still under its temporary name; opening renames it",
        );
        return Some(tmp);
    }
    None
}

/// Reads `CLOCK` (DESIGN.md §2.5): the active segment's durable point, if recorded. A missing
/// or unreadable file is a note: opening falls back to the log.
fn read_clock(dir: &Path, report: &mut VerifyReport) -> Result<Option<(u32, u64)>> {
    let path = dir.join("CLOCK");
    let b = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report.note(
                &path,
                0,
                "no CLOCK file; opening falls back to the log's times",
            );
            return Ok(None);
        }
        Err(e) => return Err(Error::io_at(&path, e)),
    };
    match b.get(..44) {
        Some(h)
            if h[0..8] == *b"EBBDBCLK"
                && LE::read_u32(&h[8..12]) == FORMAT_VERSION
                && LE::read_u32(&h[40..44]) == crc32fast::hash(&h[..40]) =>
        {
            Ok(Some((LE::read_u32(&h[12..16]), LE::read_u64(&h[32..40]))))
        }
        _ => {
            report.note(
                &path,
                0,
                "CLOCK fails its checks; opening falls back to the log's times and treats the \
                 whole active segment as possibly unsynced",
            );
            Ok(None)
        }
    }
}

/// Files named like segments or hints that the manifest does not list, judged as opening
/// judges them (`engine::recovery::clean_directory`).
fn check_unlisted(dir: &Path, m: &Manifest, report: &mut VerifyReport) -> Result<()> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .at(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    names.sort();
    for name in &names {
        let path = dir.join(name);
        if name == "MANIFEST.tmp" || name.ends_with(".hint.tmp") {
            report.note(&path, 0, "leftover temporary file; opening removes it");
            continue;
        }
        let Some((id, kind)) = parse_file_name(name) else {
            continue;
        };
        if m.lists(id) {
            continue;
        }
        let len = fs::metadata(&path).map(|md| md.len()).unwrap_or(0);
        if m.retired.contains(&id) {
            report.note(&path, 0, "retired by a merge; opening removes it");
        } else if kind == "seg.tmp" {
            report.note(
                &path,
                0,
                "unpublished merge output or rotation successor; opening removes it",
            );
        } else if kind == "seg" && len <= SEGMENT_HEADER_LEN as u64 {
            report.note(&path, 0, "empty unlisted segment; opening removes it");
        } else if kind == "seg" {
            report.problem(
                &path,
                0,
                "segment file not listed in MANIFEST (an older MANIFEST put back, or a file \
                 from elsewhere?); opening refuses the directory",
            );
        } else if !segment_path(dir, id).exists() {
            report.note(
                &path,
                0,
                "hint of a segment that no longer exists; opening removes it",
            );
        }
    }
    Ok(())
}

/// A record as a segment scan saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    offset: u32,
    len: u32,
    meta: Meta,
    key: Vec<u8>,
}

/// Every record of `bytes[..end]` that decodes, the DOC puts among them that hold no
/// document (offset and why), and the damaged ranges.
fn scan_records(bytes: &[u8], end: usize) -> (Vec<Seen>, Vec<(u32, String)>, Vec<Damage>) {
    let mut records = Vec::new();
    let mut bad_docs = Vec::new();
    let damage = scan_all(bytes, end, |offset, len, rec| {
        records.push(Seen {
            offset,
            len,
            meta: rec.meta,
            key: rec.key.to_vec(),
        });
        if let Some(why) = not_a_document(rec) {
            bad_docs.push((offset, why));
        }
    });
    (records, bad_docs, damage)
}

/// For a put flagged `DOC` (written by the document layer as one JSON object): why its value
/// is not a JSON object, if it is not. (Repeated names, which the layer never writes, are not
/// looked for.)
fn not_a_document(rec: &Record<'_>) -> Option<String> {
    if rec.meta.kind != Kind::Put || rec.meta.flags & FLAG_DOC == 0 {
        return None;
    }
    // Read as a query reads an item naming no property: the checking skim vouches for most
    // without building anything, the parser decides the rest.
    match crate::doc::stored::parse_fields(rec.value, &[], false) {
        Ok(v) if v.is_object() => None,
        Ok(_) => Some("a JSON value that is not an object".to_string()),
        Err(e) => Some(format!("not JSON ({e})")),
    }
}

/// Reports the records of `path` flagged a document item whose value is not one (the first
/// [`MAX_PER_FILE`], then how many more).
fn report_documents(path: &Path, bad: &[(u32, String)], report: &mut VerifyReport) {
    for (offset, why) in bad.iter().take(MAX_PER_FILE) {
        report.problem(
            path,
            u64::from(*offset),
            format!("record is flagged a document item but its value is {why}"),
        );
    }
    if bad.len() > MAX_PER_FILE {
        report.problem(
            path,
            0,
            format!(
                "{} more records flagged a document item are not one",
                bad.len() - MAX_PER_FILE
            ),
        );
    }
}

/// Checks across the whole log: keyspace ids, unique sequence numbers, the newest record of
/// every key.
#[derive(Default)]
struct LogCheck {
    next_keyspace_id: u32,
    seqs: HashSet<u64>,
    newest: HashMap<(u32, Vec<u8>), (u64, bool)>,
    reported: usize,
}

impl LogCheck {
    fn record(&mut self, file: &Path, rec: &Seen, report: &mut VerifyReport) {
        report.records += 1;
        if !self.seqs.insert(rec.meta.seq) && self.reported < MAX_PER_FILE {
            self.reported += 1;
            report.problem(
                file,
                u64::from(rec.offset),
                format!(
                    "sequence number {} is carried by another record too",
                    rec.meta.seq
                ),
            );
        }
        let put = rec.meta.kind == Kind::Put;
        let slot = self
            .newest
            .entry((rec.meta.keyspace, rec.key.clone()))
            .or_insert((rec.meta.seq, put));
        if rec.meta.seq >= slot.0 {
            *slot = (rec.meta.seq, put);
        }
    }

    fn finish(self, m: &Manifest, report: &mut VerifyReport) {
        let live: HashSet<u32> = m.keyspaces.iter().map(|k| k.id).collect();
        report.keys = self
            .newest
            .iter()
            .filter(|((ks, _), (_, put))| *put && live.contains(ks))
            .count() as u64;
    }
}

/// Checks one sealed segment's length, header and records; returns the records that decoded.
fn check_sealed(
    path: &Path,
    id: u32,
    listed_len: u64,
    bytes: &[u8],
    report: &mut VerifyReport,
    log: &mut LogCheck,
) -> Vec<Seen> {
    let len = bytes.len() as u64;
    if len != listed_len {
        report.problem(
            path,
            len.min(listed_len),
            format!("sealed segment is {len} bytes, MANIFEST recorded {listed_len}"),
        );
    }
    if !check_header(path, id, bytes, report) {
        return Vec::new();
    }
    let end = usize::try_from(len.min(listed_len)).unwrap_or(usize::MAX);
    let (records, bad_docs, damage) = scan_records(bytes, end);
    for d in damage {
        report.problem(
            path,
            d.offset as u64,
            format!(
                "{} ({} bytes up to offset {} unreadable)",
                describe(d.err),
                d.len(),
                d.end
            ),
        );
    }
    report_documents(path, &bad_docs, report);
    check_records(path, &records, report, log);
    records
}

/// Checks the active segment. `claimed` is the durable length `CLOCK` recorded for it.
fn check_active(
    path: &Path,
    id: u32,
    bytes: &[u8],
    claimed: u64,
    report: &mut VerifyReport,
    log: &mut LogCheck,
) {
    if !check_header(path, id, bytes, report) {
        return;
    }
    let (records, bad_docs, damage) = scan_records(bytes, bytes.len());
    // A damaged range running to the end of the file is the tail (as opening sees it).
    let (tail, interior) = match damage.split_last() {
        Some((last, rest)) if last.end == bytes.len() => (Some(*last), rest),
        _ => (None, damage.as_slice()),
    };
    for d in interior {
        report.problem(
            path,
            d.offset as u64,
            format!(
                "{} ({} bytes up to offset {} unreadable, and records after it decode: not \
                 a torn tail)",
                describe(d.err),
                d.len(),
                d.end
            ),
        );
    }
    let valid = tail.map_or(bytes.len(), |t| t.offset) as u64;
    if let Some(t) = tail.filter(|t| t.err == DecodeError::Unsearched) {
        // Records may follow a range the search gave up on: opening refuses it (Strict).
        report.problem(path, t.offset as u64, describe(t.err));
    } else if valid < claimed {
        report.problem(
            path,
            valid,
            format!(
                "{} below the durable point ({claimed} bytes were fsynced)",
                tail.map_or("the file ends".to_string(), |t| describe(t.err))
            ),
        );
    } else if let Some(t) = tail {
        let zeros = bytes
            .get(t.offset..)
            .is_some_and(|rest| rest.iter().all(|&b| b == 0));
        if !zeros {
            report.note(
                path,
                t.offset as u64,
                format!(
                    "unfinished write of {} bytes past the durable point ({}); opening cuts it",
                    t.len(),
                    describe(t.err)
                ),
            );
        }
    }
    report_documents(path, &bad_docs, report);
    check_records(path, &records, report, log);
}

fn check_header(path: &Path, id: u32, bytes: &[u8], report: &mut VerifyReport) -> bool {
    match SegmentHeader::decode(bytes) {
        Ok(h) if h.id == id => true,
        Ok(h) => {
            report.problem(
                path,
                0,
                format!("segment header names file id {}, not {id}", h.id),
            );
            false
        }
        Err(e) => {
            report.problem(path, 0, format!("segment header: {}", describe(e)));
            false
        }
    }
}

fn check_records(path: &Path, records: &[Seen], report: &mut VerifyReport, log: &mut LogCheck) {
    let mut bad = 0usize;
    for rec in records {
        let ks = rec.meta.keyspace;
        if (ks == 0 || ks >= log.next_keyspace_id) && bad < MAX_PER_FILE {
            bad += 1;
            report.problem(
                path,
                u64::from(rec.offset),
                format!("record names keyspace id {ks}, which MANIFEST never handed out"),
            );
        }
        log.record(path, rec, report);
    }
}

/// Checks a hint file and that its entries are exactly `records` (the segment's puts and
/// tombstones, as scanned).
fn check_hint(
    path: &Path,
    id: u32,
    seg_len: u64,
    bytes: &[u8],
    records: &[Seen],
    report: &mut VerifyReport,
) {
    let mut entries = Vec::new();
    if let Err(e) = hint::visit(bytes, id, |meta, key, offset, len| {
        entries.push(Seen {
            offset,
            len,
            meta: *meta,
            key: key.to_vec(),
        });
    }) {
        let len = bytes.len() as u64;
        let (offset, what) = match e {
            DecodeError::Truncated => (len, "the file is too short to be a hint".to_string()),
            DecodeError::BadChecksum => (
                len.saturating_sub(HINT_FOOTER_LEN as u64 - 8),
                "footer checksum does not match the file (cut short, or changed)".to_string(),
            ),
            other => (0, describe(other)),
        };
        report.problem(
            path,
            offset,
            format!(
                "hint file: {what}; opening ignores it and scans the segment (no data is \
                 lost; deleting the hint silences this)"
            ),
        );
        return;
    }
    if hint::check_summary(bytes, id).is_err() {
        report.problem(
            path,
            0,
            "hint file: its summary does not match its entries; opening fails with a \
             corruption error (deleting the hint lets opening scan the segment instead)"
                .to_string(),
        );
    }
    let by_offset: HashMap<u32, &Seen> = records.iter().map(|r| (r.offset, r)).collect();
    let mut listed = HashSet::new();
    let mut bad = 0usize;
    for e in &entries {
        listed.insert(e.offset);
        let problem = if u64::from(e.offset) + u64::from(e.len) > seg_len {
            Some("lists a record past the end of its segment".to_string())
        } else {
            match by_offset.get(&e.offset) {
                None => Some("lists a record that its segment does not hold".to_string()),
                Some(r) if *r != e => Some(format!(
                    "entry (seq {}) differs from the segment's record there (seq {})",
                    e.meta.seq, r.meta.seq
                )),
                Some(_) => None,
            }
        };
        if let Some(p) = problem {
            bad += 1;
            if bad <= MAX_PER_FILE {
                report.problem(
                    path,
                    0,
                    format!("entry for segment offset {}: {p}", e.offset),
                );
            }
        }
    }
    for r in records {
        if !listed.contains(&r.offset) {
            bad += 1;
            if bad <= MAX_PER_FILE {
                report.problem(
                    path,
                    0,
                    format!(
                        "has no entry for the record at segment offset {} (seq {})",
                        r.offset, r.meta.seq
                    ),
                );
            }
        }
    }
    if bad > MAX_PER_FILE {
        report.problem(
            path,
            0,
            format!(
                "{} more hint entries disagree with the segment",
                bad - MAX_PER_FILE
            ),
        );
    }
}

fn describe(e: DecodeError) -> String {
    match e {
        DecodeError::End => "zeroed bytes".into(),
        other => other.to_string(),
    }
}
