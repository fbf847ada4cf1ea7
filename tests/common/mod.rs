//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use ebbdb::clock::ManualClock;
use ebbdb::{Options, SyncPolicy};

pub const T0: u64 = 1_700_000_000;

pub fn clock() -> ManualClock {
    ManualClock::at_unix_secs(T0)
}

/// Default options but for the manual clock and no fsync, and a hint for every sealed
/// segment: by default a segment of records as small as most tests write goes without one
/// (`Options::hint_every_segment`, a test hook), and the tests of hints need them. The crash,
/// power-loss and model tests take both ways.
pub fn manual(clock: &ManualClock) -> Options {
    Options::default()
        .clock(clock.clone())
        .sync(SyncPolicy::Never)
        .hint_every_segment(true)
}

/// Small segments, no fsync: merges happen and tests stay fast.
pub fn opts(clock: &ManualClock) -> Options {
    manual(clock).segment_size(4096)
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

/// Hint files in `dir`.
pub fn hint_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".hint"))
                .count()
        })
        .unwrap_or(0)
}

/// Waits (at most 20 s, polling every 5 ms) for a background thread to make `cond` true.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Sets the flag when dropped, so a test thread that panics also stops the threads it races.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Starts a thread that runs `maintain()` and `compact()` back to back until `stop` is set,
/// advancing `clock` by `step` every `every`-th round: upkeep racing a test's foreground work.
pub fn spawn_upkeep(
    store: &ebbdb::Store,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    clock: &ManualClock,
    every: u32,
    step: std::time::Duration,
) -> std::thread::JoinHandle<ebbdb::Result<()>> {
    let (store, stop, clock) = (store.clone(), std::sync::Arc::clone(stop), clock.clone());
    std::thread::spawn(move || {
        let mut n = 0u32;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if n.is_multiple_of(every) {
                clock.advance(step);
            }
            store.maintain()?;
            store.compact()?;
            n += 1;
        }
        Ok(())
    })
}
