//! The directory lock: one open handle per directory, across processes and within one.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::error::{Error, IoContext, Result};

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
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
            Err(TryLockError::Error(e)) => Err(Error::io_at(&path, e)),
        }
    }
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
