//! One small trait over the engines under test, and one implementation per engine, each in
//! its recommended configuration (see `describe`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use ebbdb::clock::ManualClock;
use redb::ReadableDatabase;

/// Block/page cache for every engine that has one: redb's and sled's default, given to fjall
/// (default 32 MiB; its docs recommend 20-25% of RAM) and RocksDB (default 32 MiB; its tuning
/// guide recommends about a third of RAM) too. ebbdb has no cache: keys live in RAM, values are
/// read through mmap.
pub const CACHE_BYTES: u64 = 1 << 30;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The engines, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Ebbdb,
    Redb,
    Fjall,
    Sled,
    #[cfg(feature = "rocksdb")]
    Rocksdb,
}

impl Kind {
    pub fn all() -> Vec<Kind> {
        vec![
            Kind::Ebbdb,
            Kind::Redb,
            Kind::Fjall,
            Kind::Sled,
            #[cfg(feature = "rocksdb")]
            Kind::Rocksdb,
        ]
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Ebbdb => "ebbdb",
            Kind::Redb => "redb",
            Kind::Fjall => "fjall",
            Kind::Sled => "sled",
            #[cfg(feature = "rocksdb")]
            Kind::Rocksdb => "rocksdb",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::all().into_iter().find(|k| k.name() == s)
    }

    /// Version and configuration, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Ebbdb => "ebbdb (this repo): `Options::default()`; relaxed = `SyncPolicy::Never`, durable = `SyncPolicy::Always` (group commit); batches = `WriteBatch`; TTL = keyspace `DefaultTtl::Seconds`, `ManualClock`, background worker only (no `compact()` call)",
            Kind::Redb => "redb 4.6.0: `Database::create`, default cache (1 GiB); batch = one write transaction; relaxed = `Durability::None` commits (since redb 3 they free pages too) with every 64th `Immediate`, so the non-durable state held in memory stays bounded; durable = `Immediate` per write; TTL = expiry in the value + periodic full-scan sweep",
            Kind::Fjall => "fjall 3.1.13: `Database::builder(dir).cache_size(1 GiB)`, default keyspace options (leveled compaction, lz4); relaxed = journal in OS buffers (`batch()` default `PersistMode::Buffer`); durable = `persist(PersistMode::SyncAll)` after each write; batch = `Database::batch`; TTL = compaction filter (`with_compaction_filter_factories`) removing values whose embedded expiry passed on the simulated clock, reads check the stamp",
            Kind::Sled => "sled 0.34.7: `Config::new().path(dir).open()` defaults (1 GiB cache, background flush every 500 ms); durable = `flush()` after each write; batch = `apply_batch`; TTL = expiry in the value + periodic full-scan sweep",
            #[cfg(feature = "rocksdb")]
            Kind::Rocksdb => "RocksDB 7.8.3 (Debian librocksdb-dev) via rocksdb 0.20.1: bindings generated from the system headers, nothing compiled from source; defaults + `increase_parallelism(2)`, 1 GiB LRU block cache, 10-bit Bloom filter, dynamic level bytes; relaxed = WAL without sync; durable = `WriteOptions::set_sync(true)`; batch = `WriteBatch`; TTL = compaction filter dropping values whose embedded expiry passed on the simulated clock",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// No fsync per write.
    Relaxed,
    /// fsync before each write returns.
    Fsync,
}

/// How to open an engine.
#[derive(Clone)]
pub struct OpenOpts {
    pub durability: Durability,
    /// Simulated time (ebbdb's clock; the RocksDB compaction filter reads it too).
    pub clock: Option<ManualClock>,
    /// Native TTL in seconds, for engines that have one.
    pub ttl_secs: Option<u32>,
}

impl OpenOpts {
    pub fn relaxed() -> Self {
        OpenOpts {
            durability: Durability::Relaxed,
            clock: None,
            ttl_secs: None,
        }
    }
}

/// The operations every workload is written against.
pub trait Engine: Send + Sync {
    /// One write (fsynced in `Durability::Fsync` mode).
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()>;
    /// Writes applied together, in the engine's batch mechanism.
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()>;
    /// Writes applied together, each with its own TTL in seconds (`None`: it never expires).
    /// Engines whose expiry reads the stamp in the value ignore `ttls`.
    fn put_batch_expiring(&self, items: &[(&[u8], &[u8])], ttls: &[Option<u32>]) -> Res<()> {
        let _ = ttls;
        self.put_batch(items)
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>>;
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()>;
    /// Visits every pair in key order; returns the count.
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64>;
    /// Makes everything written so far durable.
    fn sync(&self) -> Res<()>;
    /// TTL hook, called once per simulated tick. Returns true when the engine handles expiry
    /// itself (no sweep from the harness).
    fn ttl_tick(&self) -> Res<bool> {
        Ok(false)
    }
    /// The engine's own exact count of live keys, where it has one (ebbdb's `Keyspace::len`).
    fn live_count(&self) -> Res<Option<u64>> {
        Ok(None)
    }
    /// Engine-specific counters worth reporting after the TTL churn.
    fn note(&self) -> Option<String> {
        None
    }
    /// The engine's own full compaction, where it has one (false if not: sled).
    fn compact_full(&mut self) -> Res<bool> {
        Ok(false)
    }
}

pub fn open(kind: Kind, dir: &Path, o: &OpenOpts) -> Res<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match kind {
        Kind::Ebbdb => Box::new(Ebb::open(dir, o)?),
        Kind::Redb => Box::new(Redb::open(dir, o)?),
        Kind::Fjall => Box::new(crate::peers::Fjall::open(dir, o)?),
        Kind::Sled => Box::new(crate::peers::Sled::open(dir, o)?),
        #[cfg(feature = "rocksdb")]
        Kind::Rocksdb => Box::new(crate::peers::Rocks::open(dir, o)?),
    })
}

/// Expiry (Unix seconds) stored in the first 8 bytes of every value.
pub fn expiry_of(value: &[u8]) -> u64 {
    value.get(..8).map_or(u64::MAX, |b| {
        u64::from_be_bytes(b.try_into().unwrap_or([0xff; 8]))
    })
}

// ---------------------------------------------------------------------------------------------

struct Ebb {
    store: ebbdb::Store,
    ks: ebbdb::Keyspace,
}

impl Ebb {
    fn open(dir: &Path, o: &OpenOpts) -> Res<Self> {
        let sync = match o.durability {
            Durability::Relaxed => ebbdb::SyncPolicy::Never,
            Durability::Fsync => ebbdb::SyncPolicy::Always,
        };
        let mut opts = ebbdb::Options::default().sync(sync);
        if let Some(c) = &o.clock {
            opts = opts.clock(c.clone());
        }
        let store = ebbdb::Store::open_with(dir, opts)?;
        let default = o
            .ttl_secs
            .map_or(ebbdb::DefaultTtl::Off, ebbdb::DefaultTtl::Seconds);
        let ks = store.keyspace_or_create("bench", default)?;
        Ok(Ebb { store, ks })
    }
}

/// The mixed-TTL `keeps_up` setup: `SyncPolicy::Never`, the real clock, and a keyspace whose
/// default is `DefaultTtl::NeverExpire`, so that each put's own TTL applies (with the default
/// off, as in Cosmos DB, an item's own TTL is ignored).
pub fn open_ebbdb_per_item_ttl(dir: &Path) -> Res<Box<dyn Engine>> {
    let opts = ebbdb::Options::default().sync(ebbdb::SyncPolicy::Never);
    let store = ebbdb::Store::open_with(dir, opts)?;
    let ks = store.keyspace_or_create("bench", ebbdb::DefaultTtl::NeverExpire)?;
    Ok(Box::new(Ebb { store, ks }))
}

impl Engine for Ebb {
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        Ok(self.ks.put(key, value)?)
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        let mut b = ebbdb::WriteBatch::new();
        for (k, v) in items {
            b.put(&self.ks, k, v);
        }
        Ok(self.store.write_batch(b)?)
    }
    fn put_batch_expiring(&self, items: &[(&[u8], &[u8])], ttls: &[Option<u32>]) -> Res<()> {
        let mut b = ebbdb::WriteBatch::new();
        for ((k, v), ttl) in items.iter().zip(ttls) {
            let ttl = ttl.map_or(ebbdb::Ttl::Never, ebbdb::Ttl::Seconds);
            b.put_with_ttl(&self.ks, k, v, ttl);
        }
        Ok(self.store.write_batch(b)?)
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.ks.get(key)?)
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        let mut b = ebbdb::WriteBatch::new();
        for k in keys {
            b.delete(&self.ks, k);
        }
        Ok(self.store.write_batch(b)?)
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        // Zero-copy, as redb's guards and fjall's slices are: the pair is lent, not copied.
        let mut n = 0;
        let mut it = self.ks.iter();
        while let Some(r) = it.next_with(|k, v| f(k, v)) {
            r?;
            n += 1;
        }
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        Ok(self.store.sync()?)
    }
    fn ttl_tick(&self) -> Res<bool> {
        // Native TTL; upkeep is the background worker's alone (issue 17: no `compact()` here).
        Ok(true)
    }
    fn compact_full(&mut self) -> Res<bool> {
        self.store.compact_full()?;
        Ok(true)
    }
    fn live_count(&self) -> Res<Option<u64>> {
        Ok(Some(self.ks.len()? as u64))
    }
    fn note(&self) -> Option<String> {
        let s = self.store.stats();
        Some(format!(
            "{} merges, {} expirations, {} segments at the end",
            s.merges, s.expirations, s.segments
        ))
    }
}

// ---------------------------------------------------------------------------------------------

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("bench");

struct Redb {
    db: redb::Database,
    durable: bool,
    commits: AtomicU64,
}

impl Redb {
    fn open(dir: &Path, o: &OpenOpts) -> Res<Self> {
        let db = redb::Database::create(dir.join("bench.redb"))?;
        let me = Redb {
            db,
            durable: o.durability == Durability::Fsync,
            commits: AtomicU64::new(0),
        };
        me.write(|_| Ok(()))?;
        Ok(me)
    }

    /// One write transaction. Durable mode: the default `Immediate` (an fsync per commit).
    /// Relaxed mode, batches and single writes alike: `Durability::None` (since redb 3 these
    /// commits free pages too), every 64th commit `Immediate` so what the non-durable commits
    /// hold in memory stays bounded.
    fn write(&self, f: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> Res<()>) -> Res<()> {
        let mut tx = self.db.begin_write()?;
        let n = self.commits.fetch_add(1, Ordering::Relaxed);
        if !self.durable && n % 64 != 63 {
            tx.set_durability(redb::Durability::None)?;
        }
        {
            let mut t = tx.open_table(REDB_TABLE)?;
            f(&mut t)?;
        }
        tx.commit()?;
        Ok(())
    }
}

impl Engine for Redb {
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        self.write(|t| {
            t.insert(key, value)?;
            Ok(())
        })
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        self.write(|t| {
            for (k, v) in items {
                t.insert(*k, *v)?;
            }
            Ok(())
        })
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REDB_TABLE)?;
        Ok(t.get(key)?.map(|g| g.value().to_vec()))
    }
    fn compact_full(&mut self) -> Res<bool> {
        // A durable commit first (relaxed commits are pending), then compaction until it
        // reports nothing left to do.
        let tx = self.db.begin_write()?;
        tx.commit()?;
        while self.db.compact()? {}
        Ok(true)
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        self.write(|t| {
            for k in keys {
                t.remove(k.as_slice())?;
            }
            Ok(())
        })
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        use redb::ReadableTable;
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REDB_TABLE)?;
        let mut n = 0;
        for item in t.iter()? {
            let (k, v) = item?;
            f(k.value(), v.value());
            n += 1;
        }
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        let tx = self.db.begin_write()?;
        tx.commit()?; // Immediate: fsyncs and frees pages of earlier non-durable commits
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------

/// Expiry index of the `keeps_up` redb setup: expiry (Unix seconds, big-endian) then the key.
const REDB_EXPIRY: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("expiry");

/// Keys swept per write transaction by [`RedbTtl`]'s sweeper.
const SWEEP_BATCH: usize = 1000;

/// redb with TTL done the way an application would: every value carries its expiry, an index
/// table (expiry, key) is written in the same transaction, and a sweeper thread deletes expired
/// keys in transactions of up to 1,000, waking every 100 ms. No fsync per write: commits use
/// `Durability::None`, every 64th commit (writer's or sweeper's) `Immediate`, which keeps what
/// redb reuse the pages earlier commits freed.
pub struct RedbTtl {
    shared: std::sync::Arc<RedbShared>,
    sweeper: Option<std::thread::JoinHandle<()>>,
}

struct RedbShared {
    db: redb::Database,
    commits: AtomicU64,
    swept: AtomicU64,
    stop: std::sync::atomic::AtomicBool,
}

impl RedbShared {
    fn begin(&self) -> Res<redb::WriteTransaction> {
        let mut tx = self.db.begin_write()?;
        if self.commits.fetch_add(1, Ordering::Relaxed) % 64 != 63 {
            tx.set_durability(redb::Durability::None)?;
        }
        Ok(tx)
    }

    /// Deletes up to `SWEEP_BATCH` keys whose expiry is at or before `now`; how many.
    fn sweep(&self, now: u64) -> Res<usize> {
        use redb::ReadableTable;
        let tx = self.begin()?;
        let n = {
            let mut idx = tx.open_table(REDB_EXPIRY)?;
            let mut main = tx.open_table(REDB_TABLE)?;
            let upper = (now + 1).to_be_bytes();
            let dead: Vec<Vec<u8>> = idx
                .range(..&upper[..])?
                .take(SWEEP_BATCH)
                .map(|e| e.map(|(k, _)| k.value().to_vec()))
                .collect::<Result<_, _>>()?;
            for k in &dead {
                idx.remove(k.as_slice())?;
                main.remove(&k[8..])?;
            }
            dead.len()
        };
        tx.commit()?;
        self.swept.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl RedbTtl {
    pub fn open(dir: &Path) -> Res<Self> {
        let shared = std::sync::Arc::new(RedbShared {
            db: redb::Database::create(dir.join("bench.redb"))?,
            commits: AtomicU64::new(0),
            swept: AtomicU64::new(0),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        let tx = shared.db.begin_write()?;
        tx.open_table(REDB_TABLE)?;
        tx.open_table(REDB_EXPIRY)?;
        tx.commit()?;
        let s = std::sync::Arc::clone(&shared);
        let sweeper = std::thread::spawn(move || {
            while !s.stop.load(Ordering::Relaxed) {
                match s.sweep(crate::keeps_up::now_secs()) {
                    Ok(n) if n == SWEEP_BATCH => {}
                    Ok(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
                    Err(e) => {
                        eprintln!("redb sweeper: {e}");
                        return;
                    }
                }
            }
        });
        Ok(RedbTtl {
            shared,
            sweeper: Some(sweeper),
        })
    }
}

impl Drop for RedbTtl {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.sweeper.take() {
            let _ = h.join();
        }
    }
}

impl Engine for RedbTtl {
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        self.put_batch(&[(key, value)])
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        let tx = self.shared.begin()?;
        {
            let mut main = tx.open_table(REDB_TABLE)?;
            let mut idx = tx.open_table(REDB_EXPIRY)?;
            let mut ik = Vec::with_capacity(8 + 16);
            for (k, v) in items {
                main.insert(*k, *v)?;
                ik.clear();
                ik.extend_from_slice(&expiry_of(v).to_be_bytes());
                ik.extend_from_slice(k);
                idx.insert(ik.as_slice(), ())?;
            }
        }
        tx.commit()?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        let tx = self.shared.db.begin_read()?;
        let t = tx.open_table(REDB_TABLE)?;
        Ok(t.get(key)?.map(|g| g.value().to_vec()))
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        let tx = self.shared.begin()?;
        {
            let mut t = tx.open_table(REDB_TABLE)?;
            for k in keys {
                t.remove(k.as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        use redb::ReadableTable;
        let tx = self.shared.db.begin_read()?;
        let t = tx.open_table(REDB_TABLE)?;
        let mut n = 0;
        for item in t.iter()? {
            let (k, v) = item?;
            f(k.value(), v.value());
            n += 1;
        }
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        let tx = self.shared.db.begin_write()?;
        tx.commit()?;
        Ok(())
    }
    fn note(&self) -> Option<String> {
        Some(format!(
            "{} keys swept",
            self.shared.swept.load(Ordering::Relaxed)
        ))
    }
}
