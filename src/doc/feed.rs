//! The change feed: [`Container::read_change_feed`] (pull, with pages and continuations) and
//! [`ChangeFeedIter`] (push: a blocking iterator, or a channel fed by a thread).
//!
//! Latest-version mode reads the container's key directory in the order of each item's last
//! write (the engine's sequence numbers, `engine/feed.rs`): each live item's newest version
//! once, deletes and expiries not shown. A continuation names a position in that order (the
//! last sequence number considered), so it resumes exactly across writes, restarts and
//! compactions (records keep their sequence numbers). The all-versions-and-deletes mode reads
//! the container's history (`feed/history.rs`, `feed/all.rs`, DESIGN.md §16.2): every create,
//! replace and delete and every expiry, each once, for containers with a change feed
//! retention.
//!
//! Writes of the document layer (create, upsert, replace, delete, patch, batch) signal a
//! [`ChangeSignal`] shared by the database's handles; a waiting iterator wakes on it (and
//! re-polls every 200 ms in any case).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::Value;

use super::container::Container;
use super::partition::{self, PartitionKey};
use super::stored;
use crate::error::{Error, Result};

mod all;
mod history;

use history::OrderKey;
pub(crate) use history::{add_history, History, HistorySlot};

/// How often a waiting [`ChangeFeedIter`] polls even without a signal.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// Where a change feed starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ChangeFeedStart {
    /// Every live item (the default).
    #[default]
    Beginning,
    /// Only changes made after this call.
    Now,
    /// Items last written at or after this Unix second.
    Time(u64),
    /// Resume after a page: its `continuation`.
    Continuation(String),
}

/// What a change feed reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeFeedMode {
    /// Each live item's newest version once, in the order of its last write (the default).
    #[default]
    LatestVersion,
    /// Every create, replace (upsert, patch) and delete, and every TTL expiry, each once, in
    /// commit order (DESIGN.md §16.2). Needs the container's change feed retention (else 400).
    AllVersionsAndDeletes,
}

/// Options of [`Container::read_change_feed`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChangeFeedOptions {
    /// Where to start (ignored by a continuation's own position).
    pub start: ChangeFeedStart,
    /// Latest version, or all versions and deletes.
    pub mode: ChangeFeedMode,
    /// Page size (default 100).
    pub max_item_count: Option<usize>,
    /// Only this partition's items.
    pub partition_key: Option<PartitionKey>,
}

impl ChangeFeedOptions {
    /// Sets where the feed starts.
    #[must_use]
    pub fn start(mut self, start: ChangeFeedStart) -> Self {
        self.start = start;
        self
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, mode: ChangeFeedMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the page size.
    #[must_use]
    pub fn max_item_count(mut self, n: usize) -> Self {
        self.max_item_count = Some(n);
        self
    }

    /// Restricts the feed to one partition key.
    #[must_use]
    pub fn partition_key(mut self, pk: impl Into<PartitionKey>) -> Self {
        self.partition_key = Some(pk.into());
        self
    }
}

/// One page of a change feed.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeFeedPage {
    /// The changes, oldest first: items as stored, each with `_lsn` (its position).
    pub changes: Vec<Value>,
    /// Where the next page starts: pass it as [`ChangeFeedStart::Continuation`]. Always set,
    /// also after an empty page.
    pub continuation: String,
}

/// A continuation's content: the last sequence number considered and the start time filter.
#[derive(Debug, Clone, Copy)]
struct Position {
    after: u64,
    since: u64,
}

/// A latest-version page: the start position, the changes with their sequence numbers, and
/// the position after the page.
type LatestPage = (Position, Vec<(u64, Value)>, Position);

/// A position in either mode.
#[derive(Debug, Clone, Copy)]
enum Pos {
    Latest(Position),
    All(OrderKey),
}

/// A page as read: the start position, the changes each with the position after it, the
/// position after the page, and (all versions) the Unix second of the next expiry.
type Page = (Pos, Vec<(Pos, Value)>, Pos, Option<u64>);

fn scope_check(container: &str, prefix: Option<&[u8]>, after: u64, since: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(b"ebbdb-change-feed-1");
    h.update(container.as_bytes());
    h.update(&[u8::from(prefix.is_some())]);
    h.update(prefix.unwrap_or_default());
    h.update(&after.to_le_bytes());
    h.update(&since.to_le_bytes());
    h.finalize()
}

fn encode(container: &str, prefix: Option<&[u8]>, pos: &Position) -> String {
    serde_json::json!({
        "v": 1,
        "m": "latest",
        "p": pos.after,
        "t": pos.since,
        "h": scope_check(container, prefix, pos.after, pos.since),
    })
    .to_string()
}

fn decode(token: &str, container: &str, prefix: Option<&[u8]>) -> Result<Position> {
    let invalid = || {
        Error::BadRequest(
            "the continuation is not valid for this container, partition key and mode".into(),
        )
    };
    let v: Value = serde_json::from_str(token).map_err(|_| invalid())?;
    let (Some(after), Some(since)) = (v["p"].as_u64(), v["t"].as_u64()) else {
        return Err(invalid());
    };
    if v["v"] != 1
        || v["m"] != "latest"
        || v["h"].as_u64() != Some(u64::from(scope_check(container, prefix, after, since)))
    {
        return Err(invalid());
    }
    Ok(Position { after, since })
}

/// Wakes change-feed iterators when the document layer writes.
/// A write costs one atomic increment while nobody waits.
#[derive(Debug, Default)]
pub(crate) struct ChangeSignal {
    generation: AtomicU64,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl ChangeSignal {
    /// Called after every document-layer write.
    pub(crate) fn notify(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this after a waiter's check of the generation.
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    fn current(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Waits until the generation moves past `seen` or `timeout` passes.
    fn wait(&self, seen: u64, timeout: Duration) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.lock.lock();
        if self.generation.load(Ordering::SeqCst) == seen {
            self.cv.wait_for(&mut g, timeout);
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Container {
    /// One page of the change feed (`docs/contract.md` §8).
    ///
    /// ```
    /// use ebbdb::{ChangeFeedOptions, ChangeFeedStart, ContainerProperties, Database};
    /// use serde_json::json;
    /// let dir = tempfile::tempdir()?;
    /// let db = Database::open(dir.path())?;
    /// let c = db.create_container(ContainerProperties::new("orders", "/customer"))?;
    /// let page = c.read_change_feed(&ChangeFeedOptions::default())?;
    /// assert!(page.changes.is_empty());
    /// c.create_item(&json!({"id": "1", "customer": "ann"}))?;
    /// let next = ChangeFeedOptions::default().start(ChangeFeedStart::Continuation(page.continuation));
    /// assert_eq!(c.read_change_feed(&next)?.changes[0]["id"], "1");
    /// # Ok::<(), ebbdb::Error>(())
    /// ```
    ///
    /// # Errors
    /// 400 for a continuation of another container, partition key or mode (or a damaged
    /// one), and for [`ChangeFeedMode::AllVersionsAndDeletes`] on a container without a change
    /// feed retention; 410 ([`Error::Gone`]) in that mode for a continuation or start time
    /// older than the retention window; 404 if the container was deleted; storage errors.
    pub fn read_change_feed(&self, opts: &ChangeFeedOptions) -> Result<ChangeFeedPage> {
        self.ks.check_alive()?;
        let prefix = opts.partition_key.as_ref().map(partition::encode_prefix);
        let (_, changes, next, _) = self.feed_page(opts, prefix.as_deref())?;
        Ok(ChangeFeedPage {
            changes: changes.into_iter().map(|(_, v)| v).collect(),
            continuation: self.encode_pos(prefix.as_deref(), &next),
        })
    }

    fn encode_pos(&self, prefix: Option<&[u8]>, pos: &Pos) -> String {
        match pos {
            Pos::Latest(p) => encode(self.id(), prefix, p),
            Pos::All(k) => all::encode(self.id(), prefix, k),
        }
    }

    /// One page from `opts.start` in `opts.mode`.
    fn feed_page(&self, opts: &ChangeFeedOptions, prefix: Option<&[u8]>) -> Result<Page> {
        let max = opts.max_item_count.unwrap_or(100).max(1);
        if opts.mode == ChangeFeedMode::AllVersionsAndDeletes {
            let page = self.all_versions_page(&opts.start, max, prefix)?;
            return Ok((
                Pos::All(page.start),
                page.changes
                    .into_iter()
                    .map(|(k, v)| (Pos::All(k), v))
                    .collect(),
                Pos::All(page.next),
                page.wake_at,
            ));
        }
        let (start, changes, next) = self.latest_page(opts, prefix)?;
        Ok((
            Pos::Latest(start),
            changes
                .into_iter()
                .map(|(seq, v)| {
                    (
                        Pos::Latest(Position {
                            after: seq,
                            since: start.since,
                        }),
                        v,
                    )
                })
                .collect(),
            Pos::Latest(next),
            None,
        ))
    }

    /// One latest-version page from `opts.start`: the start position, the changes with their
    /// sequence numbers, and the position after the page.
    fn latest_page(&self, opts: &ChangeFeedOptions, prefix: Option<&[u8]>) -> Result<LatestPage> {
        let (now_ms, cut) = self.ks.feed_cut();
        let pos = match &opts.start {
            ChangeFeedStart::Beginning => Position { after: 0, since: 0 },
            ChangeFeedStart::Now => Position {
                after: cut.saturating_sub(1),
                since: 0,
            },
            ChangeFeedStart::Time(t) => Position {
                after: 0,
                since: *t,
            },
            ChangeFeedStart::Continuation(token) => decode(token, self.id(), prefix)?,
        };
        let max = opts.max_item_count.unwrap_or(100).max(1);
        let (found, after) =
            self.ks
                .changes_after(pos.after, cut, prefix, pos.since, now_ms / 1000, max)?;
        let changes = found
            .into_iter()
            .map(|(_, seq, bytes)| {
                let mut v: Value = stored::parse(&bytes)
                    .map_err(|e| Error::BadRequest(format!("stored item is not JSON: {e}")))?;
                if let Value::Object(m) = &mut v {
                    m.insert("_lsn".into(), Value::from(seq));
                }
                Ok((seq, v))
            })
            .collect::<Result<Vec<(u64, Value)>>>()?;
        let next = Position {
            after,
            since: pos.since,
        };
        Ok((pos, changes, next))
    }

    /// A blocking iterator over the change feed from `opts.start`: it returns changes as
    /// they come and waits (woken by writes of this database's handles, and every
    /// 200 ms) when there are none.
    ///
    /// # Errors
    /// As [`Container::read_change_feed`], for the first page.
    pub fn change_feed_iter(&self, opts: &ChangeFeedOptions) -> Result<ChangeFeedIter> {
        self.ks.check_alive()?;
        let prefix = opts.partition_key.as_ref().map(partition::encode_prefix);
        let (start, changes, next, wake_at) = self.feed_page(opts, prefix.as_deref())?;
        let mut opts = opts.clone();
        opts.start = ChangeFeedStart::Continuation(self.encode_pos(prefix.as_deref(), &next));
        Ok(ChangeFeedIter {
            container: self.clone(),
            opts,
            returned: start,
            prefix,
            buf: changes.into_iter().collect(),
            signal: self.db.change_signal(),
            wake_at,
        })
    }
}

/// A blocking iterator of changes (see [`Container::change_feed_iter`]). Never ends by itself;
/// [`ChangeFeedIter::next_timeout`] waits at most a given time.
#[derive(Debug)]
pub struct ChangeFeedIter {
    container: Container,
    /// Options whose start is the continuation after the last page read.
    opts: ChangeFeedOptions,
    /// The position after the last change returned.
    returned: Pos,
    prefix: Option<Vec<u8>>,
    /// Changes read but not returned yet, each with the position after it.
    buf: std::collections::VecDeque<(Pos, Value)>,
    signal: Arc<ChangeSignal>,
    /// All versions: the Unix second of the next expiry not reported yet, if known.
    wake_at: Option<u64>,
}

impl ChangeFeedIter {
    /// Where this iterator stands: a continuation that resumes after the last change it
    /// returned, for a later [`Container::read_change_feed`] or iterator (also after a
    /// restart).
    #[must_use]
    pub fn continuation(&self) -> String {
        match (&self.opts.start, self.buf.is_empty()) {
            // Nothing buffered: after the last page read.
            (ChangeFeedStart::Continuation(c), true) => c.clone(),
            // Changes read but not returned come again after the last one returned.
            _ => self
                .container
                .encode_pos(self.prefix.as_deref(), &self.returned),
        }
    }

    /// The next change, waiting at most `timeout` for one (`Ok(None)` if none came).
    ///
    /// # Errors
    /// As [`Container::read_change_feed`].
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Value>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((pos, v)) = self.buf.pop_front() {
                self.returned = pos;
                return Ok(Some(v));
            }
            let seen = self.signal.current();
            let (_, changes, next, wake_at) = self
                .container
                .feed_page(&self.opts, self.prefix.as_deref())?;
            self.wake_at = wake_at;
            self.opts.start = ChangeFeedStart::Continuation(
                self.container.encode_pos(self.prefix.as_deref(), &next),
            );
            if changes.is_empty() {
                self.returned = next;
            } else {
                self.buf.extend(changes);
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let mut wait = (deadline - now).min(POLL);
            if let Some(at) = self.wake_at {
                // Wake at the next expiry's instant (by the database's clock), not a poll later.
                let now_ms = self.container.ks.store().now_unix_millis();
                let due = Duration::from_millis(at.saturating_mul(1000).saturating_sub(now_ms));
                wait = wait.min(due);
            }
            if !wait.is_zero() {
                self.signal.wait(seen, wait);
            }
        }
    }

    /// Moves the iterator to a thread that sends each change (or the error that stops it) on
    /// a bounded channel; the thread ends when the returned receiver is dropped (within 200 ms).
    /// Until then it holds the container, and so the store, open.
    #[must_use]
    pub fn into_receiver(mut self, capacity: usize) -> ChangeReceiver {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        let closed = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&closed);
        let spawned = std::thread::Builder::new()
            .name("ebbdb-change-feed".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match self.next_timeout(POLL) {
                        Ok(None) => {}
                        Ok(Some(v)) => {
                            if tx.send(Ok(v)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            // No thread: the receiver reports why and then ends.
            let (etx, erx) = crossbeam_channel::bounded(1);
            let _ = etx.send(Err(Error::Io {
                path: None,
                source: e,
            }));
            return ChangeReceiver { rx: erx, closed };
        }
        ChangeReceiver { rx, closed }
    }
}

impl Iterator for ChangeFeedIter {
    type Item = Result<Value>;

    /// Blocks until a change comes (or an error).
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(v)) => return Some(Ok(v)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The receiving end of [`ChangeFeedIter::into_receiver`]: a `crossbeam_channel::Receiver`
/// (through `Deref`) whose feeding thread stops when this is dropped.
#[derive(Debug)]
pub struct ChangeReceiver {
    rx: crossbeam_channel::Receiver<Result<Value>>,
    closed: Arc<AtomicBool>,
}

impl std::ops::Deref for ChangeReceiver {
    type Target = crossbeam_channel::Receiver<Result<Value>>;

    fn deref(&self) -> &Self::Target {
        &self.rx
    }
}

impl Drop for ChangeReceiver {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}
