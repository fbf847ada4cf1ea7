//! Fault injection for tests: make the k-th create, write, fsync, rename or truncate under one
//! directory fail (a write may also go through only in part, or fail with `ENOSPC`).
//!
//! Every file-mutating call site of the engine goes through [`check`] (or [`write_all_at`]) with
//! the path it touches. With no plan armed this is one relaxed atomic load. A plan applies only
//! to paths under its directory, so tests running in parallel in one process do not interfere.
//! Not part of the stable API.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

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
