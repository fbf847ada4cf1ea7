//! The background worker: one named thread fed by a bounded channel.
//!
//! With a clock that drives background work (the system clock) it wakes every tick interval to
//! reap expired entries, run the compaction policy and, under `SyncPolicy::Periodic`, fsync.
//! It also writes hint files for newly sealed segments. A job that fails or panics records its
//! error for `stats()` (`worker_error`, `worker_failures`) until a later job succeeds; a
//! failing merge is retried with exponential backoff. Foreground calls (`maintain`, `compact`)
//! report only their own errors: one background failure never wedges them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::options::SyncPolicy;

/// Messages to the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Look at the clock now.
    Tick,
    /// Run the compaction policy.
    Compact,
    /// Write the hint file of this freshly sealed segment.
    WriteHint(u32),
    /// Stop.
    Shutdown,
}

/// Owner's end of the worker.
#[derive(Debug)]
pub struct WorkerHandle {
    tx: Sender<Message>,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Sends without blocking; a full channel drops the message (every message is an
    /// idempotent request, and hints missing are rebuilt by scanning at open).
    pub fn try_send(&self, msg: Message) {
        let _ = self.tx.try_send(msg);
    }

    /// Stops the thread and waits for it.
    pub fn shutdown(mut self) {
        let _ = self.tx.send(Message::Shutdown);
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

/// How long the worker waits for its next tick: the tick interval, but no later than just past
/// the next whole second of the engine's clock when the clock drives background work. Deadlines
/// are whole seconds, so a second's expirations are handled (and their events published) within
/// a few milliseconds of coming due rather than up to a tick later.
fn next_wait(inner: &Inner, tick: Duration, background: bool) -> Duration {
    if !background {
        return tick;
    }
    let into_second = inner.now_ms() % 1000;
    tick.min(Duration::from_millis(1000 - into_second + 2))
}

/// Starts the worker for `inner`.
///
/// # Errors
/// The OS error if the thread cannot be spawned.
pub(crate) fn spawn(inner: Arc<Inner>) -> Result<WorkerHandle> {
    let (tx, rx) = bounded::<Message>(1024);
    let thread = std::thread::Builder::new()
        .name("ebbdb-upkeep".into())
        .spawn(move || {
            let tick = inner.opts.tick_interval;
            let background = inner.opts.clock.drives_background();
            let mut last_sync = Instant::now();
            let mut compaction = Backoff::default();
            let mut next_tick = Instant::now() + tick;
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
                    Message::Shutdown => break,
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
                            compaction.failed();
                        }
                    }
                    Message::WriteHint(id) => {
                        run(&mut || crate::compaction::write_hint_for(&inner, id));
                    }
                }
                // The tick's work, when it is due: also while other messages keep arriving.
                if Instant::now() < next_tick {
                    continue;
                }
                next_tick = Instant::now() + next_wait(&inner, tick, background);
                if background {
                    run(&mut || inner.reap().map(|_| ()));
                    if inner.reap_backlog.load(Ordering::Relaxed) > 0 {
                        // A pass is bounded; while a backlog is left the next one comes at
                        // once (after the policy below), not a tick later: reaping follows
                        // the backlog, not a cadence.
                        next_tick = Instant::now();
                    }
                    // The policy is cheap (it reads counters) and what it finds is mostly
                    // whole dead segments (dropped unread), so it runs after every expiry
                    // pass: reclaiming space then follows the backlog, not a fixed cadence.
                    // It backs off while merges keep failing.
                    if compaction.ready() {
                        if run(&mut || crate::compaction::run(&inner, false).map(|_| ())) {
                            compaction.succeeded();
                        } else {
                            compaction.failed();
                        }
                    }
                }
                if let SyncPolicy::Periodic(every) = inner.opts.sync {
                    if last_sync.elapsed() >= every {
                        run(&mut || inner.periodic_sync());
                        last_sync = Instant::now();
                    }
                }
            }
        })?;
    Ok(WorkerHandle {
        tx,
        thread: Some(thread),
    })
}
