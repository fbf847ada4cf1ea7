//! The directory lock: one open handle per directory, across processes and within one.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// Retries of a lock found held (see [`DirLock::acquire`]).
const LOCK_RETRIES: u32 = 10;
/// Wait between those retries.
const LOCK_RETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// Holds the exclusive lock on `LOCK` until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock on `dir/LOCK`.
    ///
    /// # Errors
    /// [`Error::Locked`] when another process or handle holds it; [`Error::Io`] otherwise.
    pub fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join("LOCK");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .at(&path)?;
        lock_file(&file, dir, &path)?;
        Ok(Self { _file: file })
    }
}

/// Takes an exclusive lock on `file` (the `LOCK` file at `path` of `dir`), or
/// [`Error::Locked`].
///
/// A lock just released can still look held for a moment: a child process that another thread
/// of this program is starting holds a copy of the descriptor (and so of the lock) from its
/// fork until its exec closes it. A few short retries bridge that window; a lock really held is
/// still reported within 50 ms, never waited for.
pub(crate) fn lock_file(file: &File, dir: &Path, path: &Path) -> Result<()> {
    for attempt in 0..=LOCK_RETRIES {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if attempt < LOCK_RETRIES => {
                std::thread::sleep(LOCK_RETRY_WAIT);
            }
            Err(TryLockError::WouldBlock) => break,
            Err(TryLockError::Error(e)) => return Err(Error::io_at(path, e)),
        }
    }
    Err(Error::Locked(dir.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_fails_until_first_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DirLock::acquire(dir.path()).expect("first lock");
        assert!(matches!(
            DirLock::acquire(dir.path()),
            Err(Error::Locked(_))
        ));
        drop(first);
        assert!(DirLock::acquire(dir.path()).is_ok());
    }
}
