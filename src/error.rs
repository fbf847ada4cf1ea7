//! The one error type of the crate.
//!
//! Variants are the things a caller can act on. Client errors of the document layer map to the
//! Azure Cosmos DB HTTP status codes through [`Error::status_code`], so code ported from Cosmos
//! keeps its `match` on 404/409/412.

use std::path::{Path, PathBuf};

/// Result type of every fallible ebbdb call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ebbdb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request was malformed: invalid TTL, bad id, bad JSON shape, oversized key (HTTP 400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// An [`Options`](crate::Options) value the engine cannot work with (refused at open).
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// The item, container or keyspace does not exist or has expired (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    /// The item or container already exists (HTTP 409).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A change feed position older than the container's retention window: the history it
    /// needs may be gone (HTTP 410). Start again from `Beginning` or `Now`.
    #[error("gone: {0}")]
    Gone(String),
    /// An `if_match` etag did not match the live item (HTTP 412).
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A value or document is larger than the configured limit (HTTP 413).
    #[error("entity too large: {0}")]
    TooLarge(String),
    /// Another process or handle already has the directory open.
    #[error("database directory {0} is locked by another handle or process")]
    Locked(PathBuf),
    /// Bytes on disk failed their checksum or are otherwise impossible.
    #[error("corruption in {file} at offset {offset}: {reason}")]
    Corruption {
        /// The file holding the bad bytes.
        file: PathBuf,
        /// Byte offset of the first bad record or structure.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A write-ahead fsync failed earlier; the store refuses writes until it is reopened.
    #[error(
        "store is poisoned after a failed fsync or write; reopen it to recover acknowledged data"
    )]
    Poisoned,
    /// The store has been closed.
    #[error("store is closed")]
    Closed,
    /// An operating-system I/O error, naming the file or directory it concerns where known.
    #[error("I/O error{}: {source}", on_path(path.as_deref()))]
    Io {
        /// The file or directory the failed operation was on.
        path: Option<PathBuf>,
        /// The OS error (its `kind()` and `raw_os_error()` are the OS's).
        source: std::io::Error,
    },
}

fn on_path(path: Option<&Path>) -> String {
    path.map(|p| format!(" on {}", p.display()))
        .unwrap_or_default()
}

impl From<std::io::Error> for Error {
    fn from(source: std::io::Error) -> Self {
        Error::Io { path: None, source }
    }
}

/// Attaches the path an I/O operation was on to its error.
pub(crate) trait IoContext<T> {
    /// Converts an `io::Result` into a [`Result`] whose error names `path`.
    fn at(self, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|source| Error::io_at(path, source))
    }
}

impl Error {
    /// The Azure Cosmos DB HTTP status code matching this error, where one exists.
    ///
    /// Client errors give 400, 404, 409, 412 or 413; [`Error::Locked`] gives 423; storage
    /// failures give 500.
    #[must_use]
    pub fn status_code(&self) -> u16 {
        match self {
            Error::BadRequest(_) | Error::InvalidOptions(_) => 400,
            Error::NotFound(_) => 404,
            Error::Conflict(_) => 409,
            Error::Gone(_) => 410,
            Error::PreconditionFailed(_) => 412,
            Error::TooLarge(_) => 413,
            Error::Locked(_) => 423,
            Error::Corruption { .. } | Error::Poisoned | Error::Closed | Error::Io { .. } => 500,
        }
    }

    /// True when this error is a 404 (missing or expired).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }

    /// An [`Error::Io`] naming `path`.
    pub(crate) fn io_at(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: Some(path.as_ref().to_path_buf()),
            source,
        }
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_name_their_path() {
        let e = Error::io_at(
            "/db/MANIFEST.tmp",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert_eq!(
            e.to_string(),
            "I/O error on /db/MANIFEST.tmp: permission denied"
        );
        assert!(matches!(&e, Error::Io { path: Some(p), source }
            if p == Path::new("/db/MANIFEST.tmp") && source.kind() == std::io::ErrorKind::PermissionDenied));
        let bare = Error::from(std::io::Error::other("x"));
        assert_eq!(bare.to_string(), "I/O error: x");
        assert_eq!(bare.status_code(), 500);
    }
}
