//! How a failure reaches the user: one message on stderr and an exit code (listed in
//! `--help`, see `EXIT_CODES` in `main.rs`). Every library error maps to exactly one code.

use std::fmt::Display;

/// Any other failure (I/O, ...).
pub const OTHER: u8 = 1;
/// No database, container, keyspace or item.
pub const NOT_FOUND: u8 = 3;
/// Refused by the database (400, 409, 412, 413), or an import/put with refused items.
pub const REFUSED: u8 = 4;
/// Locked by another process.
pub const LOCKED: u8 = 5;
/// Corruption.
pub const CORRUPT: u8 = 6;
/// Bad command-line arguments (clap's own code for what it refuses).
pub const USAGE: u8 = 2;

/// A failed command: the exit code and what to tell the user.
#[derive(Debug)]
pub struct Failure {
    /// Process exit code.
    pub code: u8,
    /// The message (printed after `ebbdb: error: `), or empty when the command already
    /// printed what went wrong.
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A failure whose details were already printed.
    pub fn quiet(code: u8) -> Self {
        Self::new(code, "")
    }

    /// Prints the message to stderr.
    pub fn print(&self) {
        if !self.message.is_empty() {
            eprintln!("ebbdb: error: {}", self.message);
        }
    }
}

impl From<ebbdb::Error> for Failure {
    fn from(e: ebbdb::Error) -> Self {
        use ebbdb::Error as E;
        let code = match &e {
            E::Locked(_) => LOCKED,
            E::Corruption { .. } => CORRUPT,
            E::NotFound(_) => NOT_FOUND,
            E::BadRequest(_)
            | E::Conflict(_)
            | E::PreconditionFailed(_)
            | E::TooLarge(_)
            | E::InvalidOptions(_) => REFUSED,
            _ => OTHER,
        };
        let message = match &e {
            E::Locked(dir) => format!(
                "{} is locked by another process (a running program has this database open); \
                 close it and try again",
                dir.display()
            ),
            E::Corruption {
                file,
                offset,
                reason,
            } => format!(
                "corruption in {} at offset {offset}: {reason} (run `ebbdb verify` for a full \
                 report)",
                file.display()
            ),
            _ => with_status(&e),
        };
        Self::new(code, message)
    }
}

/// The error text, with its Cosmos status code for client errors.
pub fn with_status(e: &ebbdb::Error) -> String {
    match e.status_code() {
        400 | 404 | 409 | 412 | 413 => format!("{e} ({})", e.status_code()),
        _ => e.to_string(),
    }
}

/// An I/O failure on `what` (a path or a description).
pub fn io(what: impl Display, e: std::io::Error) -> Failure {
    Failure::new(OTHER, format!("{what}: {e}"))
}
