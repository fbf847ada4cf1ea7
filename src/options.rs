//! Options for opening a [`Store`](crate::Store) or [`Database`](crate::Database).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};

/// Largest key the engine accepts, in bytes.
pub const MAX_KEY_SIZE: usize = 64 * 1024;
/// Largest value the engine accepts, in bytes (the record length field is 32 bits, and a record
/// must fit in one segment).
pub const MAX_VALUE_SIZE: usize = 64 * 1024 * 1024;

/// Largest `segment_size`: record offsets and lengths are 32-bit (key directory, hint files),
/// so no byte of a segment may lie at or beyond 4 GiB.
pub const MAX_SEGMENT_SIZE: u64 = u32::MAX as u64;

/// When a write's bytes reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// A write returns after its bytes are fsynced. Concurrent writers share one fsync (group
    /// commit). The default.
    #[default]
    Always,
    /// Writes return once in the OS page cache; a background thread fsyncs at this interval.
    /// A crash keeps a prefix of the writes that includes every one before the last completed
    /// fsync (see [`SyncPolicy::Never`] for what a process crash can lose).
    Periodic(Duration),
    /// No write waits for an fsync: the log is fsynced on [`Store::sync`](crate::Store::sync)
    /// and close, and in the background after each segment rotation and every 8 MiB appended.
    /// A crash keeps a prefix of the writes that includes every one before the last completed
    /// `sync()`. A power loss can take anything after that; a process crash takes the write
    /// buffer (up to 256 KiB) and, if a segment rotation's background commit had not finished
    /// (usually milliseconds), everything written since that rotation.
    Never,
}

impl SyncPolicy {
    /// True when the active segment is zero-filled ahead of the writes: worth it when writes are
    /// fsynced as they come (`Always`, or `Periodic` at an interval under a second); under
    /// `Never` or a slow `Periodic` it only writes every page twice.
    pub(crate) fn preallocates(self) -> bool {
        match self {
            SyncPolicy::Always => true,
            SyncPolicy::Periodic(every) => every < Duration::from_secs(1),
            SyncPolicy::Never => false,
        }
    }
}

/// What the engine does about damage: a bad record in a sealed segment or below the active
/// segment's durable point, a segment that is missing or not its recorded length, a segment
/// file the manifest does not account for, or damage a merge meets. (A torn tail of the active
/// segment past its durable point is not damage: it is cut in both modes.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Report [`Error::Corruption`](crate::Error::Corruption) naming the file and offset, and
    /// change nothing. The default.
    #[default]
    Strict,
    /// Open anyway: skip each damaged range and keep every record that still decodes after
    /// it; leave damaged segments and unaccounted-for files in place (never merged or
    /// deleted). What was skipped is counted in [`Stats`](crate::Stats)
    /// (`damaged_segments`, `skipped_bytes`, `unlisted_files`).
    Salvage,
}

/// How the engine is opened and tuned. Built with chained setters:
///
/// ```
/// use ebbdb::{Options, SyncPolicy};
/// let opts = Options::default().sync(SyncPolicy::Never).segment_size(8 << 20);
/// assert_eq!(opts.segment_size_bytes(), 8 << 20);
/// ```
#[derive(Clone)]
pub struct Options {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sync: SyncPolicy,
    pub(crate) segment_size: u64,
    pub(crate) max_item_size: usize,
    pub(crate) recovery: RecoveryMode,
    pub(crate) compaction_dead_ratio: f64,
    pub(crate) max_reclaim_lag: Duration,
    pub(crate) tick_interval: Duration,
    pub(crate) use_hints: bool,
    pub(crate) warm_on_open: bool,
    pub(crate) rehash_after: Option<Duration>,
    /// Records per part of a keyspace's records that open merges on a thread of its own before
    /// it builds the keyspace's map (and the timer count
    /// from which open files timers in ranges on several threads): see `recovery::build`.
    /// Only the `test-hooks` feature changes it, so that small test stores take the sharded
    /// paths of open too.
    pub(crate) open_shard_records: usize,
    /// Writes a hint for every sealed segment, even one whose hint would take more than an
    /// eighth of it (`compaction::policy::hint_worth`). Only the `test-hooks` feature sets it,
    /// so that test stores of small records keep going through the hint paths.
    pub(crate) hint_every_segment: bool,
    /// A clean close seals an active segment holding at least this many bytes, to write its
    /// hint (`Inner::seal_large_active`). Only the `test-hooks` feature changes it, so that
    /// small test stores take that path under their crash tests too.
    pub(crate) close_seal_bytes: u64,
    /// The most segment bytes a clean close scans to write missing hints
    /// (`Inner::write_missing_hints`). Only the `test-hooks` feature changes it.
    pub(crate) close_hint_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            sync: SyncPolicy::Always,
            segment_size: 64 << 20,
            max_item_size: 2 << 20,
            recovery: RecoveryMode::Strict,
            compaction_dead_ratio: 0.5,
            max_reclaim_lag: Duration::from_secs(600),
            tick_interval: Duration::from_millis(250),
            use_hints: true,
            warm_on_open: true,
            rehash_after: Some(Duration::from_secs(30)),
            open_shard_records: crate::engine::OPEN_SHARD_RECORDS,
            hint_every_segment: false,
            close_seal_bytes: crate::engine::CLOSE_SEAL_BYTES,
            close_hint_bytes: crate::engine::CLOSE_HINT_BYTES,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("clock", &self.clock)
            .field("sync", &self.sync)
            .field("segment_size", &self.segment_size)
            .field("max_item_size", &self.max_item_size)
            .field("recovery", &self.recovery)
            .field("compaction_dead_ratio", &self.compaction_dead_ratio)
            .field("max_reclaim_lag", &self.max_reclaim_lag)
            .field("tick_interval", &self.tick_interval)
            .field("use_hints", &self.use_hints)
            .field("warm_on_open", &self.warm_on_open)
            .field("rehash_after", &self.rehash_after)
            .field("open_shard_records", &self.open_shard_records)
            .field("hint_every_segment", &self.hint_every_segment)
            .field("close_seal_bytes", &self.close_seal_bytes)
            .field("close_hint_bytes", &self.close_hint_bytes)
            .finish()
    }
}

impl Options {
    /// Uses `clock` for every timestamp (e.g. a [`ManualClock`](crate::clock::ManualClock) in tests).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets the durability policy (default [`SyncPolicy::Always`]).
    #[must_use]
    pub fn sync(mut self, policy: SyncPolicy) -> Self {
        self.sync = policy;
        self
    }

    /// Rotates the active segment once it reaches `bytes` (default 64 MiB, at least 4 KiB, at
    /// most [`MAX_SEGMENT_SIZE`]: a larger value is refused when the store is opened).
    #[must_use]
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes.max(4096);
        self
    }

    /// The configured segment size.
    #[must_use]
    pub fn segment_size_bytes(&self) -> u64 {
        self.segment_size
    }

    /// Largest document the document layer accepts, serialized (default 2 MiB); larger → 413.
    #[must_use]
    pub fn max_item_size(mut self, bytes: usize) -> Self {
        self.max_item_size = bytes.min(MAX_VALUE_SIZE);
        self
    }

    /// Test hook: open cuts a keyspace's records into parts of about `records` records (at
    /// least 1) once it has two parts' worth, merges them side by side, and files timers in
    /// ranges on several threads from that many timers on (at most 16,384). The default
    /// (131,072) leaves the
    /// small stores of crash and power-loss tests in one part; a few records per part sends
    /// them through the paths of many parts (and of a map built from parts with rests under a
    /// slab page).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn open_shard_records(mut self, records: usize) -> Self {
        self.open_shard_records = records.max(1);
        self
    }

    /// Writes a hint file for every sealed segment, also where the hint would take more than an
    /// eighth of the segment (small records), which by default go without one and are scanned
    /// at open. Test stores hold small records, and this keeps them on the hint paths.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn hint_every_segment(mut self, on: bool) -> Self {
        self.hint_every_segment = on;
        self
    }

    /// A clean close seals the active segment once it holds this many bytes (4 MiB by
    /// default), so that the close writes its hint. Test stores are small, and a few hundred
    /// bytes take them down that path.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn close_seal_bytes(mut self, bytes: u64) -> Self {
        self.close_seal_bytes = bytes;
        self
    }

    /// The most segment bytes a clean close scans to write the hints still missing (256 MiB
    /// by default), so that tests reach the budget with small stores.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn close_hint_bytes(mut self, bytes: u64) -> Self {
        self.close_hint_bytes = bytes;
        self
    }

    /// What to do about damaged files (default [`RecoveryMode::Strict`]).
    #[must_use]
    pub fn recovery(mut self, mode: RecoveryMode) -> Self {
        self.recovery = mode;
        self
    }

    /// A sealed segment is merged once this share of its bytes is dead (default 0.5).
    #[must_use]
    pub fn compaction_dead_ratio(mut self, ratio: f64) -> Self {
        self.compaction_dead_ratio = ratio.clamp(0.0, 1.0);
        self
    }

    /// A segment holding expired bytes older than this is merged whatever its dead share, so
    /// expired data in cold segments is purged within this bound (default 10 minutes).
    #[must_use]
    pub fn max_reclaim_lag(mut self, lag: Duration) -> Self {
        self.max_reclaim_lag = lag;
        self
    }

    /// How often the background worker looks at the clock (default 250 ms).
    #[must_use]
    pub fn tick_interval(mut self, every: Duration) -> Self {
        self.tick_interval = every.max(Duration::from_millis(1));
        self
    }

    /// Checks the combination of settings; opening calls this first.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`](crate::Error::InvalidOptions) naming the setting, for a
    /// `segment_size` above [`MAX_SEGMENT_SIZE`] (offsets inside a segment are 32-bit).
    pub fn validate(&self) -> crate::Result<()> {
        if self.segment_size > MAX_SEGMENT_SIZE {
            return Err(crate::Error::InvalidOptions(format!(
                "segment_size {} is above the limit of {MAX_SEGMENT_SIZE} bytes (offsets inside \
                 a segment are 32-bit)",
                self.segment_size
            )));
        }
        Ok(())
    }

    /// Whether opening reads hint files (default true). Off forces a full scan of every
    /// segment; useful to measure what hints buy.
    #[must_use]
    pub fn use_hints(mut self, on: bool) -> Self {
        self.use_hints = on;
        self
    }

    /// Whether opening reads the sealed segments into the OS page cache in the background
    /// (default true), newest first, as many as fit in half of the memory the OS reports
    /// available (`MemAvailable`, lowered to what the process's memory cgroup has left). The
    /// first reads after a restart then find their record in memory instead of waiting for
    /// a 4 KiB disk read each. Off, a store reads from disk only what is asked for: for a
    /// machine whose page cache is better spent on other files.
    #[must_use]
    pub fn warm_on_open(mut self, on: bool) -> Self {
        self.warm_on_open = on;
        self
    }

    /// How long a keyspace's key directory stays in key order after the last walk in key
    /// order (`range`, `prefix`, `iter`, a query that scans) before the background worker
    /// lays it out for point operations again (default 30 s; `None`: never). A key directory
    /// starts out hashed, which serves `get`, `put` and `delete` fastest; the first walk in
    /// key order sorts it, and from then on point operations go through B-trees, about 1.5
    /// times slower for a `get` and three times for a new key at a million keys. The worker
    /// hashes it again off the keyspace's lock; each time a walk orders it again after that,
    /// the worker waits twice as long (up to 64 times this), so a keyspace walked periodically
    /// (less than 64 times this apart) soon stays in key order. The hashed layout takes about a third more memory than
    /// the ordered one (95-116 against 67-86 MB of anonymous memory at a million keys), and
    /// while the worker hashes, both layouts and a copy of the entries are held (about 200
    /// MB at a million keys). At least 1 ms.
    #[must_use]
    pub fn rehash_after(mut self, idle: Option<Duration>) -> Self {
        self.rehash_after = idle.map(|d| d.max(Duration::from_millis(1)));
        self
    }
}

/// Where the key directories of this process ask Linux for transparent huge pages
/// ([`set_huge_pages`]). Only where the system's setting for them is `madvise` (Debian's and
/// Ubuntu's default); with `always` the key directory's slab pages, aligned to 2 MiB, are
/// huge whatever this says, and with `never` nothing is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HugePages {
    /// Never asks.
    Off = 0,
    /// Asks for the slab pages (2 MiB each) made once the process's key directories hold
    /// [`HUGE_PAGES_FROM_BYTES`] of them: about two million keys.
    #[default]
    LargeMaps = 1,
    /// Asks for every slab page, and for the large temporaries of an open and of a walk in
    /// key order.
    All = 2,
}

/// The slab bytes past which [`HugePages::LargeMaps`] asks for huge pages: 128 MiB, 64 pages
/// of 32,768 entries.
pub const HUGE_PAGES_FROM_BYTES: usize = 128 << 20;

/// Sets where this process's key directories ask for transparent huge pages, from now on
/// (memory already taken keeps what it was given). The default, [`HugePages::LargeMaps`]:
/// a map of tens of millions of keys misses the TLB less with huge pages (under TTL churn of
/// 10-19 M keys, ten minutes, the expiry kept disk within 1.29 times the live bytes with them
/// and let it reach 2.19 without them, measured), but a fresh huge page costs milliseconds,
/// not a fraction of one, on a virtual machine that gives its free memory back to the host
/// (free page reporting, common under cloud hypervisors), where a fill, an open and the first
/// walk in key order of a million keys measured 20-50 % slower when every page asked (on
/// this project's benchmark machine, DESIGN.md §3.1). The
/// setting is the process's, not a store's: the slab pages and their spare are shared by
/// every store the process opens.
pub fn set_huge_pages(policy: HugePages) {
    crate::log::mmap::set_huge_pages(policy);
}
