//! The log: segment files on disk, the directory lock, the manifest and recovery scanning.
//!
//! Layout of a database directory:
//! - `LOCK`: held with an exclusive OS file lock while a handle is open.
//! - `MANIFEST`: the published set of segments and the keyspace catalogue (see `manifest.rs`).
//! - `CLOCK`: the engine's time high-water mark (see `engine::clockfile`).
//! - `NNNNNNNNNN.seg`: segments; `NNNNNNNNNN.hint`: their hint files.
//! - `NNNNNNNNNN.seg.tmp`: a merge output not yet named by the manifest.

// Never public, not even with `test-hooks`: these map, truncate and write segment files, and a
// safe function that could map a file and then change it would be unsound (DESIGN.md §9).
pub(crate) mod active;
pub(crate) mod lock;
pub(crate) mod mmap;
pub(crate) mod segment;
pub(crate) mod warm;

hooked_mod!(manifest);
hooked_mod!(scan);

use std::io;
use std::path::{Path, PathBuf};

/// Path of segment `id` in `dir`.
#[must_use]
pub fn segment_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.seg"))
}

/// Path under which a merge writes output segment `id` until the manifest names it.
#[must_use]
pub fn segment_tmp_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.seg.tmp"))
}

/// Path of the hint file of segment `id` in `dir`.
#[must_use]
pub fn hint_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.hint"))
}

/// Parses `NNNNNNNNNN.seg` / `NNNNNNNNNN.hint` / `NNNNNNNNNN.seg.tmp` file names.
#[must_use]
pub fn parse_file_name(name: &str) -> Option<(u32, &'static str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id = stem.parse().ok()?;
    match ext {
        "seg" => Some((id, "seg")),
        "hint" => Some((id, "hint")),
        "seg.tmp" => Some((id, "seg.tmp")),
        _ => None,
    }
}

/// fsyncs a directory so that creations, renames and deletions in it are durable.
///
/// # Errors
/// The OS error from opening or syncing the directory.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    crate::faults::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        let d = Path::new("/x");
        let p = segment_path(d, 42);
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert_eq!(parse_file_name(name), Some((42, "seg")));
        assert_eq!(parse_file_name("0000000042.hint"), Some((42, "hint")));
        assert_eq!(parse_file_name("42.seg"), None);
        assert_eq!(parse_file_name("0000000042.seg.tmp"), Some((42, "seg.tmp")));
        assert_eq!(parse_file_name("0000000042.hint.tmp"), None);
        assert_eq!(parse_file_name("MANIFEST"), None);
    }
}
