//! The background worker: one named thread fed by a bounded channel.
//!
//! With a clock that drives background work (the system clock) it wakes every tick interval to
//! reap expired entries, run the compaction policy and, under `SyncPolicy::Periodic`, fsync.
//! It also writes hint files for newly sealed segments. A job that fails or panics records its
//! error; callers see it as [`Error::Worker`] from `maintain`, `compact`,
//! `sync` and in `stats()`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

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
    /// fsync now.
    Sync,
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

/// Starts the worker for `inner`.
///
/// # Errors
/// The OS error if the thread cannot be spawned.
pub(crate) fn spawn(inner: Arc<Inner>) -> Result<WorkerHandle> {
    let (tx, rx) = bounded::<Message>(1024);
    let thread = std::thread::Builder::new()
        .name("ebbdb-expiry".into())
        .spawn(move || {
            let tick = inner.opts.tick_interval;
            let background = inner.opts.clock.drives_background();
            let mut last_sync = Instant::now();
            let mut ticks: u64 = 0;
            loop {
                let msg = match rx.recv_timeout(tick) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => Message::Tick,
                    Err(RecvTimeoutError::Disconnected) => Message::Shutdown,
                };
                let job = || -> Result<()> {
                    match msg {
                        Message::Shutdown => Ok(()),
                        Message::Tick => {
                            if background {
                                inner.reap()?;
                                ticks += 1;
                                // The policy is cheap (it reads counters), but merging is not:
                                // look every 4 ticks.
                                if ticks.is_multiple_of(4) {
                                    crate::compaction::run(&inner, false)?;
                                }
                            }
                            if let SyncPolicy::Periodic(every) = inner.opts.sync {
                                if last_sync.elapsed() >= every {
                                    inner.periodic_sync()?;
                                    last_sync = Instant::now();
                                }
                            }
                            Ok(())
                        }
                        Message::Compact => {
                            inner.reap()?;
                            crate::compaction::run(&inner, false).map(|_| ())
                        }
                        Message::Sync => inner.periodic_sync(),
                        Message::WriteHint(id) => crate::compaction::write_hint_for(&inner, id),
                    }
                };
                match catch_unwind(AssertUnwindSafe(job)) {
                    Ok(Ok(())) => {}
                    Ok(Err(Error::Closed | Error::Poisoned)) => {}
                    Ok(Err(e)) => *inner.worker_error.lock() = Some(e.to_string()),
                    Err(panic) => {
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "panic".into());
                        *inner.worker_error.lock() = Some(format!("worker panicked: {what}"));
                    }
                }
                if msg == Message::Shutdown {
                    break;
                }
            }
        })?;
    Ok(WorkerHandle {
        tx,
        thread: Some(thread),
    })
}
