//! Opening a database directory for a command: refuses to create one by accident (only
//! `import` may create a database, in a new or empty directory), maps "locked" to its own exit code (the library's lock is
//! a non-blocking try, so this never waits), and applies the testing clock
//! `EBBDB_NOW_UNIX_MS` when it is set.

use std::path::Path;

use ebbdb::clock::ManualClock;
use ebbdb::{Database, Options, Store};

use crate::fail::{self, Failure};

/// The environment variable that pins "now" (Unix milliseconds), for tests.
pub const NOW_VAR: &str = "EBBDB_NOW_UNIX_MS";

/// Options for every open: the default ones, with the pinned clock if `EBBDB_NOW_UNIX_MS` is set.
pub fn options() -> Result<Options, Failure> {
    let opts = Options::default();
    match std::env::var(NOW_VAR) {
        Ok(v) => {
            let ms: u64 = v.trim().parse().map_err(|_| {
                Failure::new(
                    fail::OTHER,
                    format!("{NOW_VAR} must be a whole number of milliseconds, not '{v}'"),
                )
            })?;
            Ok(opts.clock(ManualClock::at_unix_millis(ms)))
        }
        Err(_) => Ok(opts),
    }
}

/// Fails unless `dir` holds a database (a `MANIFEST` file).
pub fn require_database(dir: &Path) -> Result<(), Failure> {
    if !dir.is_dir() {
        return Err(Failure::new(
            fail::NOT_FOUND,
            format!("{} does not exist or is not a directory", dir.display()),
        ));
    }
    if !dir.join("MANIFEST").is_file() {
        return Err(Failure::new(
            fail::NOT_FOUND,
            format!("no ebbdb database in {} (no MANIFEST file)", dir.display()),
        ));
    }
    Ok(())
}

/// Opens the byte engine of an existing database.
pub fn store(dir: &Path) -> Result<Store, Failure> {
    require_database(dir)?;
    Ok(Store::open_with(dir, options()?)?)
}

/// Opens the document layer of an existing database.
pub fn database(dir: &Path) -> Result<Database, Failure> {
    require_database(dir)?;
    Ok(Database::open_with(dir, options()?)?)
}

/// Opens the document layer, creating the database if `dir` does not exist or is empty. A
/// directory that holds other files but no database is refused, so a mistyped path never
/// gets database files written into it.
pub fn database_or_create(dir: &Path) -> Result<Database, Failure> {
    if dir.exists() && !dir.join("MANIFEST").is_file() {
        let mut entries = std::fs::read_dir(dir).map_err(|e| fail::io(dir.display(), e))?;
        if entries.next().is_some() {
            return Err(Failure::new(
                fail::NOT_FOUND,
                format!(
                    "{} is not empty and holds no ebbdb database (no MANIFEST file); name a \
                     new or empty directory",
                    dir.display()
                ),
            ));
        }
    }
    Ok(Database::open_with(dir, options()?)?)
}
