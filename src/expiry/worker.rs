//! The background threads: the upkeep worker, fed by a bounded channel, and the reaper.
//!
//! With a clock that drives background work (the system clock) the worker wakes every tick
//! interval to run the compaction policy and, under `SyncPolicy::Periodic`, fsync; it also
//! writes hint files for newly sealed segments. The reaper handles fired expiry timers just past
//! each whole second, on its own thread so that a long merge never holds expiry up. A job that
//! fails or panics records its error for `stats()` (`worker_error`, `worker_failures`) until a
//! later job of the worker succeeds; a failing merge is retried with exponential backoff.
//! Foreground calls (`maintain`, `compact`) report only their own errors: one background
//! failure never wedges them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::options::SyncPolicy;

/// Nice steps the upkeep and reaper threads run below the thread that opened the store (the
/// sync thread, which writers may wait for, keeps its priority): with three busy threads on
/// two cores, the scheduler then runs a writer ahead of them (DESIGN.md §11). An opener
/// already near nice 19 gets a smaller gap (the value stops at 19).
const BACKGROUND_NICE: i32 = 5;

/// Messages to the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Look at the clock now.
    Tick,
    /// Run the compaction policy.
    Compact,
    /// Write the hint file of this freshly sealed segment.
    WriteHint(u32),
    /// fsync what the writers appended so far (`SYNC_BEHIND_BYTES`), off the write path.
    /// Handled by the sync thread.
    SyncBehind,
    /// A rotation is waiting for its fsyncs and manifest (`Inner::commit_rotations`).
    /// Handled by the sync thread.
    Rotated,
    /// Make spare slab pages for the key directories (`keydir::stock_spare_pages`), so that
    /// a writer does not take a fresh page's first fault itself. Handled by the sync thread,
    /// which is idle between fsyncs.
    StockPages,
    /// Stop.
    Shutdown,
}

/// Owner's end of the worker.
#[derive(Debug)]
pub struct WorkerHandle {
    tx: Sender<Message>,
    thread: Option<JoinHandle<()>>,
    /// The reaper thread and the sender whose drop stops it (only with a clock that drives
    /// background work).
    reaper: Option<(Sender<()>, JoinHandle<()>)>,
    /// The sync thread and its channel.
    sync: Option<(Sender<Message>, JoinHandle<()>)>,
    /// The thread warming the page cache after open, and the flag that stops it.
    warm: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl WorkerHandle {
    /// Sends without blocking; a full channel drops the message (every message is an
    /// idempotent request, and hints missing are rebuilt by scanning at open). True if sent.
    pub fn try_send(&self, msg: Message) -> bool {
        match (&self.sync, msg) {
            (Some((tx, _)), Message::SyncBehind | Message::Rotated | Message::StockPages) => {
                tx.try_send(msg).is_ok()
            }
            _ => self.tx.try_send(msg).is_ok(),
        }
    }

    /// Stops the threads and waits for them.
    pub fn shutdown(mut self) {
        if let Some((stop, thread)) = self.warm.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
        if let Some((tx, thread)) = self.sync.take() {
            let _ = tx.send(Message::Shutdown);
            let _ = thread.join();
        }
        let _ = self.tx.send(Message::Shutdown);
        if let Some((stop, thread)) = self.reaper.take() {
            drop(stop);
            let _ = thread.join();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Exponential backoff for a background job that keeps failing (a merge on a full disk, a
/// damaged segment): the first retry waits `BACKOFF_MIN`, each failure doubles the wait up to
/// `BACKOFF_MAX`, a success resets it. So a persistent failure costs a few attempts a minute,
/// not one every tick, and a transient one clears by itself.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    not_before: Option<Instant>,
}

const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

impl Backoff {
    fn ready(&self) -> bool {
        self.not_before.is_none_or(|t| Instant::now() >= t)
    }

    fn failed(&mut self) {
        let wait = BACKOFF_MIN
            .saturating_mul(1u32 << self.failures.min(6))
            .min(BACKOFF_MAX);
        self.failures = self.failures.saturating_add(1);
        self.not_before = Some(Instant::now() + wait);
    }

    fn succeeded(&mut self) {
        *self = Self::default();
    }
}

/// Records the outcome of a background job: a failure is kept (with a count) for `stats()`
/// until a later job succeeds. `Closed`/`Poisoned` are not failures of the job.
fn record(inner: &Inner, outcome: std::thread::Result<Result<()>>) -> bool {
    let failure = match outcome {
        Ok(Ok(())) | Ok(Err(Error::Closed | Error::Poisoned)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Some(format!("worker panicked: {what}"))
        }
    };
    let mut state = inner.worker_error.lock();
    match failure {
        Some(msg) => {
            state.last = Some(msg);
            state.failures += 1;
            false
        }
        None => {
            state.last = None;
            true
        }
    }
}

/// How long the reaper waits for its next pass: the tick interval, but no later than just past
/// the next whole second of the engine's clock. Deadlines
/// are whole seconds, so a second's expirations are handled (and their events published) within
/// a few milliseconds of coming due rather than up to a tick later.
fn next_wait(inner: &Inner, tick: Duration) -> Duration {
    let into_second = inner.now_ms() % 1000;
    tick.min(Duration::from_millis(1000 - into_second + 2))
}

/// Starts the worker for `inner`.
///
/// # Errors
/// The OS error if the thread cannot be spawned.
pub(crate) fn spawn(inner: Arc<Inner>) -> Result<WorkerHandle> {
    let (tx, rx) = bounded::<Message>(1024);
    let inner_for_reaper = Arc::clone(&inner);
    let thread = std::thread::Builder::new()
        .name("ebbdb-upkeep".into())
        .spawn(move || {
            crate::log::mmap::lower_thread_priority(BACKGROUND_NICE);
            let tick = inner.opts.tick_interval;
            let background = inner.opts.clock.drives_background();
            let mut last_sync = Instant::now();
            let mut compaction = Backoff::default();
            let mut next_tick = Instant::now() + tick;
            // Write calls seen at the last tick, and since when that count has not moved: a
            // store with no write for `IDLE_AFTER_SECS` is merged from a lower dead share, the
            // segments that were there when it went idle (ids below `idle_below`, read once per
            // quiet period) only.
            let mut writes_seen = inner.appends.load(Ordering::Acquire);
            let mut quiet_since = Instant::now();
            let mut idle_below: Option<u32> = None;
            // Per keyspace, its walks and waits (`Inner::rehash_idle_maps`).
            let mut rehash = std::collections::HashMap::new();
            let run = |job: &mut dyn FnMut() -> Result<()>| {
                record(&inner, catch_unwind(AssertUnwindSafe(job)))
            };
            loop {
                let msg = match rx.recv_deadline(next_tick) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => Message::Tick,
                    Err(RecvTimeoutError::Disconnected) => Message::Shutdown,
                };
                match msg {
                    Message::Shutdown => {
                        // What an ordering asked to give back, before the store goes.
                        crate::log::mmap::release_free_memory_if_asked();
                        break;
                    }
                    Message::Tick => {}
                    Message::Compact => {
                        // An explicit request: tried now, whatever the backoff says.
                        let ok = run(&mut || {
                            inner.reap()?;
                            crate::compaction::run(&inner, false).map(|_| ())
                        });
                        if ok {
                            compaction.succeeded();
                        } else {
                            inner.reclaim_debt_ppm.store(0, Ordering::Relaxed);
                            compaction.failed();
                        }
                    }
                    Message::WriteHint(id) => {
                        run(&mut || {
                            crate::compaction::write_hint_for(
                                &inner,
                                id,
                                crate::compaction::HintWait::IfShortLived,
                            )
                            .map(|_| ())
                        });
                    }
                    // The sync thread's (sent here only if it could not be started).
                    Message::SyncBehind | Message::Rotated => {}
                    Message::StockPages => crate::keydir::stock_spare_pages(),
                }
                // The tick's work, when it is due: also while other messages keep arriving.
                if Instant::now() < next_tick {
                    continue;
                }
                next_tick = Instant::now() + tick;
                if background {
                    // The policy is cheap (it reads counters) and what it finds under TTL
                    // churn is mostly whole dead segments (dropped unread), so it runs every
                    // tick: reclaiming follows the reaper, which runs on its own thread.
                    // It backs off while merges keep failing.
                    let writes = inner.appends.load(Ordering::Acquire);
                    if writes != writes_seen {
                        writes_seen = writes;
                        quiet_since = Instant::now();
                        idle_below = None;
                    } else if idle_below.is_none()
                        && quiet_since.elapsed()
                            >= Duration::from_secs(crate::compaction::policy::IDLE_AFTER_SECS)
                    {
                        idle_below = Some(inner.log.lock().manifest.next_file_id);
                    }
                    if compaction.ready() {
                        let pass = || match idle_below {
                            Some(below) => crate::compaction::run_idle(&inner, below),
                            None => crate::compaction::run(&inner, false),
                        };
                        if run(&mut || pass().map(|_| ())) {
                            compaction.succeeded();
                        } else {
                            // A panic skips `merge::run`'s own reset: writers are not paced
                            // for merges that are not running.
                            inner.reclaim_debt_ppm.store(0, Ordering::Relaxed);
                            compaction.failed();
                        }
                    }
                }
                if !inner.hints_deferred.lock().is_empty() {
                    run(&mut || crate::compaction::write_deferred_hints(&inner));
                }
                run(&mut || {
                    inner.rehash_idle_maps(&mut rehash, Instant::now());
                    Ok(())
                });
                // Memory an ordering freed, given back here rather than by its walk.
                crate::log::mmap::release_free_memory_if_asked();
                if let SyncPolicy::Periodic(every) = inner.opts.sync {
                    if last_sync.elapsed() >= every {
                        run(&mut || inner.periodic_sync());
                        last_sync = Instant::now();
                    }
                }
            }
        })?;
    let inner_for_sync = Arc::clone(&inner_for_reaper);
    let reaper = if inner_for_reaper.opts.clock.drives_background() {
        let (stop, stopped) = bounded::<()>(0);
        match spawn_reaper(inner_for_reaper, stopped) {
            Ok(reaper) => Some((stop, reaper)),
            Err(e) => {
                let _ = tx.send(Message::Shutdown);
                let _ = thread.join();
                return Err(e);
            }
        }
    } else {
        None
    };
    let mut handle = WorkerHandle {
        tx,
        thread: Some(thread),
        reaper,
        sync: None,
        warm: None,
    };
    if inner_for_sync.opts.warm_on_open {
        // Best effort: a store whose warming thread cannot start reads from disk as asked.
        handle.warm = spawn_warm(&inner_for_sync).ok();
    }
    match spawn_sync(inner_for_sync) {
        Ok(sync) => handle.sync = Some(sync),
        Err(e) => {
            handle.shutdown();
            return Err(e);
        }
    }
    Ok(handle)
}

/// Starts the thread that reads the sealed segments into the page cache after open
/// (`log::warm`). It holds the segments of the moment, newest first, and lets each go once
/// warmed, or as soon as it sees that a merge retired it (whose file is deleted only when its
/// last holder lets go).
fn spawn_warm(inner: &Inner) -> Result<(Arc<AtomicBool>, JoinHandle<()>)> {
    let segs: Vec<_> = inner
        .segments
        .read()
        .sealed
        .values()
        .rev()
        .cloned()
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("ebbdb-warm".into())
        .spawn(move || {
            crate::log::mmap::lower_thread_priority(BACKGROUND_NICE);
            crate::log::warm::warm(segs, crate::log::warm::room(), &stopped);
        })?;
    Ok((stop, thread))
}

/// Starts the sync thread: it commits rotations (`Inner::commit_rotations`: fsyncs and a
/// manifest, up to hundreds of milliseconds on a busy disk) and syncs behind the writers, on
/// its own thread so that neither waits for a merge on the upkeep worker, and the writers
/// do not wait for either (unless the disk falls far behind: `commit_if_far_behind`).
/// Failures poison the store (each is a failed fsync, rename or manifest write) and are recorded for `stats()`; its successes do not clear the worker's.
fn spawn_sync(inner: Arc<Inner>) -> Result<(Sender<Message>, JoinHandle<()>)> {
    let (tx, rx) = bounded::<Message>(1024);
    let thread = std::thread::Builder::new()
        .name("ebbdb-sync".into())
        .spawn(move || {
            let run = |job: &mut dyn FnMut() -> Result<()>| {
                let outcome = catch_unwind(AssertUnwindSafe(job));
                if !matches!(outcome, Ok(Ok(()))) {
                    record(&inner, outcome);
                }
            };
            loop {
                let msg = rx.recv();
                // Once the store is closing (close commits what is left itself) or crashing
                // (`Store::simulate_crash`: nothing more may reach the disk), queued requests
                // are dropped.
                if inner.is_closed() {
                    break;
                }
                match msg {
                    Ok(Message::Rotated) => run(&mut || inner.commit_rotations()),
                    // A failure poisons the store, as any failed fsync does (the pages it
                    // covered may be lost while marked clean).
                    Ok(Message::SyncBehind) => run(&mut || inner.sync_behind()),
                    Ok(Message::StockPages) => crate::keydir::stock_spare_pages(),
                    Ok(Message::Shutdown) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            // A request for spare pages may be left in the channel: another store's writers
            // must be able to ask again.
            crate::keydir::spare_page_request_lost();
        })?;
    Ok((tx, thread))
}

/// Starts the reaper: a thread that handles fired timers just past each whole second (and at
/// least every tick), and again at once while a backlog is left. It has its own thread so that
/// a merge or a hint (seconds of work on big segments) never holds expiry up: expired entries
/// leave memory, and their events are published, within milliseconds of coming due. Writers
/// still step in if it falls behind (`Inner::assist_reaping`). Its failures are recorded for
/// `stats()`; its successes do not clear the worker's (a merge failure stays reported until a
/// merge succeeds).
fn spawn_reaper(inner: Arc<Inner>, stopped: Receiver<()>) -> Result<JoinHandle<()>> {
    let thread = std::thread::Builder::new()
        .name("ebbdb-reaper".into())
        .spawn(move || {
            crate::log::mmap::lower_thread_priority(BACKGROUND_NICE);
            let tick = inner.opts.tick_interval;
            loop {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    inner.reap()?;
                    if inner.timers_need_sweep() {
                        inner.sweep_stale_timers();
                    }
                    Ok(())
                }));
                let ok = matches!(outcome, Ok(Ok(())));
                if !ok {
                    record(&inner, outcome);
                }
                let wait = if ok && inner.reap_backlog.load(Ordering::Relaxed) > 0 {
                    // A pass is bounded; the backlog it left is taken at once.
                    Duration::ZERO
                } else {
                    next_wait(&inner, tick)
                };
                match stopped.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        })?;
    Ok(thread)
}
