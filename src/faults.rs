//! The engine's I/O hooks, for tests: fault injection and a power-loss model.
//!
//! - **Faults**: make the k-th create, write, fsync, rename or truncate under one directory fail
//!   (a write may also go through only in part, or fail with `ENOSPC`). Every file-mutating
//!   call site of the engine goes through [`check`] (or [`write_all_at`]) with the path it
//!   touches.
//! - **Power loss**: every fsync of a file or a directory goes through [`sync_file`] /
//!   [`sync_dir`]. A directory being [`track`]ed records what each fsync made durable: a file's
//!   content as of the fsync (read just before it, so bytes written concurrently count as not
//!   durable), and, at a directory fsync, which names point at which files. [`power_loss`] then
//!   puts the directory back to exactly that: every durable name with its durable content,
//!   nothing else (un-fsynced writes, creates, renames and deletions are undone). Files are
//!   identified by inode, and the tracker keeps a handle on each so an inode cannot be reused
//!   while it is tracked. [`freeze_after`] makes every fsync after the n-th count for nothing,
//!   as if the power went out at that moment while the process ran on.
//!
//! With nothing armed or tracked each hook is one relaxed atomic load. Plans and trackers apply
//! only to paths under their directory, so tests running in parallel do not interfere. Not part
//! of the stable API.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};

/// The kind of file operation to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Creating a file.
    Create,
    /// Writing bytes.
    Write,
    /// `fsync` / `fdatasync` of a file or directory.
    Sync,
    /// Renaming a file.
    Rename,
    /// Truncating a file.
    Truncate,
}

/// What to fail.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Only operations on paths under this directory count.
    pub dir: PathBuf,
    /// Which operations count.
    pub kind: FaultKind,
    /// The 1-based index of the counted operation that fails (it and every later one fail
    /// too when `sticky`).
    pub nth: u64,
    /// Keep failing after the first failure (a dead disk) rather than once.
    pub sticky: bool,
    /// For writes: write the first half of the buffer before failing.
    pub partial: bool,
    /// Fail with `ENOSPC` instead of `EIO`.
    pub no_space: bool,
}

struct Armed {
    plan: FaultPlan,
    seen: u64,
    fired: u64,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static PLANS: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

/// Arms `plan` (replacing any plan for the same directory).
pub fn arm(plan: FaultPlan) {
    let mut plans = PLANS.lock();
    plans.retain(|a| a.plan.dir != plan.dir);
    plans.push(Armed {
        plan,
        seen: 0,
        fired: 0,
    });
    ARMED.store(true, Ordering::SeqCst);
}

/// Disarms the plan for `dir`; returns how many faults it injected.
pub fn disarm(dir: &Path) -> u64 {
    let mut plans = PLANS.lock();
    let fired = plans
        .iter()
        .filter(|a| a.plan.dir == dir)
        .map(|a| a.fired)
        .sum();
    plans.retain(|a| a.plan.dir != dir);
    ARMED.store(!plans.is_empty(), Ordering::SeqCst);
    fired
}

/// What to do with one operation.
enum Verdict {
    Go,
    Fail { partial: bool, no_space: bool },
}

fn verdict(path: &Path, kind: FaultKind) -> Verdict {
    if !ARMED.load(Ordering::Relaxed) {
        return Verdict::Go;
    }
    let mut plans = PLANS.lock();
    for a in plans.iter_mut() {
        if a.plan.kind != kind || !path.starts_with(&a.plan.dir) {
            continue;
        }
        a.seen += 1;
        if a.seen == a.plan.nth || (a.plan.sticky && a.seen > a.plan.nth) {
            a.fired += 1;
            return Verdict::Fail {
                partial: a.plan.partial,
                no_space: a.plan.no_space,
            };
        }
    }
    Verdict::Go
}

fn error(no_space: bool) -> io::Error {
    if no_space {
        io::Error::from_raw_os_error(28) // ENOSPC
    } else {
        io::Error::other("injected I/O error")
    }
}

/// Fails if the armed plan says this operation on `path` fails.
///
/// # Errors
/// The injected error.
pub fn check(path: &Path, kind: FaultKind) -> io::Result<()> {
    match verdict(path, kind) {
        Verdict::Go => Ok(()),
        Verdict::Fail { no_space, .. } => Err(error(no_space)),
    }
}

/// `pwrite` of the whole buffer, subject to the plan (which may write only part of it).
///
/// # Errors
/// The OS error, or the injected one.
pub fn write_all_at(file: &File, path: &Path, buf: &[u8], at: u64) -> io::Result<()> {
    match verdict(path, FaultKind::Write) {
        Verdict::Go => file.write_all_at(buf, at),
        Verdict::Fail { partial, no_space } => {
            if partial {
                file.write_all_at(buf.get(..buf.len() / 2).unwrap_or_default(), at)?;
            }
            Err(error(no_space))
        }
    }
}

// ---- power-loss model ----------------------------------------------------------------------

/// What one tracked directory has made durable.
struct Tracker {
    dir: PathBuf,
    /// Durable content by inode, with a handle that keeps the inode from being reused, and the
    /// stamp of the read that took it.
    content: HashMap<u64, (File, Vec<u8>, u64)>,
    /// Durable directory entries: name → inode.
    names: BTreeMap<String, u64>,
    /// fsyncs (file or directory) counted so far.
    syncs: u64,
    /// After this many fsyncs, later ones make nothing durable.
    freeze_after: Option<u64>,
}

impl Tracker {
    fn frozen(&self) -> bool {
        self.freeze_after.is_some_and(|n| self.syncs >= n)
    }
}

static TRACKING: AtomicBool = AtomicBool::new(false);
static TRACKERS: Mutex<Vec<Tracker>> = Mutex::new(Vec::new());

/// Orders what fsyncs read: a file's content is recorded only if it was read after the content
/// already recorded for that inode. Two fsyncs of one file racing (the worker's sync-behind and
/// a caller's `sync`) used to record in the order they finished, so an older read could
/// replace a newer one and the model lost bytes that were durable.
static STAMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Held across a directory fsync's listing, the fsync and its recording, so the listing
/// recorded last is the one taken last. Racing directory fsyncs (a hint's rename on the
/// worker, a manifest's in the foreground) used to record in the order they finished: an older
/// listing replaced a newer one, and after a power loss the model put back an old MANIFEST or
/// a MANIFEST naming a segment missing from the directory.
static DIR_SYNC: Mutex<()> = Mutex::new(());

/// Held (shared) across every rename the engine makes and (exclusive) while a directory fsync
/// lists the directory. A listing taken with `read_dir` while another thread renames a file in
/// the same directory can miss that file under both names; the model then recorded a directory
/// in which a segment the durable MANIFEST names had vanished ("active segment listed in
/// MANIFEST is missing" after a power cut, about once in 1,500 power-loss cycles while the sync
/// thread renamed rotation successors during a foreground directory fsync). A real
/// filesystem's rename is atomic, so the model's listing must be too.
static RENAMES: RwLock<()> = RwLock::new(());

/// `std::fs::rename`, subject to the fault plan (`FaultKind::Rename` on `from`) and atomic
/// with respect to the power-loss model's directory listings.
///
/// # Errors
/// The injected error or the OS error.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    check(from, FaultKind::Rename)?;
    let _atomic = TRACKING.load(Ordering::Relaxed).then(|| RENAMES.read());
    std::fs::rename(from, to)
}

/// Files of the model: everything in the directory but the lock file.
fn model_files(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "LOCK" || !entry.file_type()?.is_file() {
            continue;
        }
        out.push((name, entry.path()));
    }
    Ok(out)
}

/// Starts tracking `dir`: everything in it now counts as durable.
///
/// # Errors
/// Reading the directory or its files.
pub fn track(dir: &Path) -> io::Result<()> {
    let mut t = Tracker {
        dir: dir.to_path_buf(),
        content: HashMap::new(),
        names: BTreeMap::new(),
        syncs: 0,
        freeze_after: None,
    };
    for (name, path) in model_files(dir)? {
        let file = File::open(&path)?;
        let ino = file.metadata()?.ino();
        let bytes = std::fs::read(&path)?;
        t.content.insert(ino, (file, bytes, 0));
        t.names.insert(name, ino);
    }
    let mut all = TRACKERS.lock();
    all.retain(|x| x.dir != dir);
    all.push(t);
    TRACKING.store(true, Ordering::SeqCst);
    Ok(())
}

/// Stops tracking `dir` without touching it.
pub fn untrack(dir: &Path) {
    let mut all = TRACKERS.lock();
    all.retain(|t| t.dir != dir);
    TRACKING.store(!all.is_empty(), Ordering::SeqCst);
}

/// From the `n`-th fsync under `dir` on (counting from when it was tracked), fsyncs make
/// nothing durable: the power is out, but the process does not know.
pub fn freeze_after(dir: &Path, n: u64) {
    if let Some(t) = TRACKERS.lock().iter_mut().find(|t| t.dir == dir) {
        t.freeze_after = Some(n);
    }
}

/// Whether the power is already out for `dir` (see [`freeze_after`]).
#[must_use]
pub fn is_frozen(dir: &Path) -> bool {
    TRACKERS.lock().iter().any(|t| t.dir == dir && t.frozen())
}

/// fsyncs counted under `dir` so far.
#[must_use]
pub fn syncs(dir: &Path) -> u64 {
    TRACKERS
        .lock()
        .iter()
        .find(|t| t.dir == dir)
        .map_or(0, |t| t.syncs)
}

/// Simulates the power going out: stops tracking `dir` and puts it back to what was durable.
/// Every handle of the store must be gone (the test first crashes it, e.g. with
/// `Store::simulate_crash`, and drops it).
///
/// # Errors
/// `NotFound` if `dir` is not tracked; I/O errors rewriting the files.
pub fn power_loss(dir: &Path) -> io::Result<()> {
    let t = {
        let mut all = TRACKERS.lock();
        let Some(i) = all.iter().position(|t| t.dir == dir) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not tracked", dir.display()),
            ));
        };
        let t = all.swap_remove(i);
        TRACKING.store(!all.is_empty(), Ordering::SeqCst);
        t
    };
    for (_, path) in model_files(dir)? {
        std::fs::remove_file(path)?;
    }
    for (name, ino) in &t.names {
        let bytes = t.content.get(ino).map_or(&[][..], |(_, b, _)| b.as_slice());
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

/// The tracker for `path` (a file in a tracked directory, or the directory), if any.
fn with_tracker<R>(path: &Path, f: impl FnOnce(&mut Tracker) -> R) -> Option<R> {
    if !TRACKING.load(Ordering::Relaxed) {
        return None;
    }
    let mut all = TRACKERS.lock();
    let t = all
        .iter_mut()
        .find(|t| path == t.dir || path.parent() == Some(t.dir.as_path()))?;
    Some(f(t))
}

static STALLING: AtomicBool = AtomicBool::new(false);
static STALLS: Mutex<Vec<(PathBuf, std::time::Duration)>> = Mutex::new(Vec::new());

/// Makes every fsync under `dir` take at least `d` longer (a slow disk), until
/// [`stall_syncs`] is called again with a zero duration.
pub fn stall_syncs(dir: &Path, d: std::time::Duration) {
    let mut all = STALLS.lock();
    all.retain(|(p, _)| p != dir);
    if !d.is_zero() {
        all.push((dir.to_path_buf(), d));
    }
    STALLING.store(!all.is_empty(), Ordering::SeqCst);
}

fn stall(path: &Path) {
    if !STALLING.load(Ordering::Relaxed) {
        return;
    }
    let d = STALLS
        .lock()
        .iter()
        .find(|(dir, _)| path.starts_with(dir))
        .map(|(_, d)| *d);
    if let Some(d) = d {
        std::thread::sleep(d);
    }
}

/// fsyncs `file` (at `path`): data only with `data_only`, else data and metadata. Subject to
/// the fault plan; recorded by the power-loss model.
///
/// # Errors
/// The injected error or the OS error.
pub fn sync_file(file: &File, path: &Path, data_only: bool) -> io::Result<()> {
    check(path, FaultKind::Sync)?;
    stall(path);
    // What the fsync is sure to cover: the content before it starts.
    let before = if TRACKING.load(Ordering::Relaxed) {
        with_tracker(path, |_| ()).and_then(|()| {
            let stamp = STAMP.fetch_add(1, Ordering::SeqCst);
            let handle = File::open(path).ok()?;
            let ino = handle.metadata().ok()?.ino();
            let bytes = std::fs::read(path).ok()?;
            Some((ino, handle, bytes, stamp))
        })
    } else {
        None
    };
    if data_only {
        file.sync_data()?;
    } else {
        file.sync_all()?;
    }
    if let Some((ino, handle, bytes, stamp)) = before {
        with_tracker(path, |t| {
            t.syncs += 1;
            if !t.frozen() && t.content.get(&ino).is_none_or(|(_, _, had)| *had < stamp) {
                t.content.insert(ino, (handle, bytes, stamp));
            }
        });
    }
    Ok(())
}

/// fsyncs directory `dir` so that creations, renames and deletions in it are durable. Subject to
/// the fault plan; recorded by the power-loss model.
///
/// # Errors
/// The injected error or the OS error.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    check(dir, FaultKind::Sync)?;
    stall(dir);
    let _serial = TRACKING.load(Ordering::Relaxed).then(|| DIR_SYNC.lock());
    let listing = if TRACKING.load(Ordering::Relaxed) && with_tracker(dir, |_| ()).is_some() {
        let _no_rename_meanwhile = RENAMES.write();
        let mut names = BTreeMap::new();
        let mut handles = Vec::new();
        for (name, path) in model_files(dir)? {
            if let Ok(f) = File::open(&path) {
                let ino = f.metadata()?.ino();
                names.insert(name, ino);
                handles.push((ino, f));
            }
        }
        Some((names, handles))
    } else {
        None
    };
    File::open(dir)?.sync_all()?;
    if let Some((names, handles)) = listing {
        with_tracker(dir, |t| {
            t.syncs += 1;
            if t.frozen() {
                return;
            }
            // A name whose file was never fsynced keeps no content (it reads back empty),
            // unless the file's content was recorded earlier.
            for (ino, f) in handles {
                t.content.entry(ino).or_insert((f, Vec::new(), 0));
            }
            t.names = names;
        });
    }
    Ok(())
}
