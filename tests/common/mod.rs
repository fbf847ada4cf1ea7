//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use ebbdb::clock::ManualClock;
use ebbdb::{Options, SyncPolicy};

pub const T0: u64 = 1_700_000_000;

pub fn clock() -> ManualClock {
    ManualClock::at_unix_secs(T0)
}

/// Small segments, no fsync: merges happen and tests stay fast.
pub fn opts(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
        .segment_size(4096)
}

/// Copies every regular file of `from` into `to`.
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// Segment files of `dir`, sorted by id.
pub fn segments(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut v: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    Ok(v)
}
