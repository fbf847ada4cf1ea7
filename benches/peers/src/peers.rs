//! The LSM and log-structured peers: fjall, sled and RocksDB (see `Kind::describe`).

use std::path::Path;

use ebbdb::clock::{Clock, ManualClock};

use crate::engines::{expiry_of, Durability, Engine, OpenOpts, Res, CACHE_BYTES};

// ---------------------------------------------------------------------------------------------

/// Where fjall's expiry filter reads "now" (Unix seconds): the real clock in `keeps_up`, the
/// simulated clock in the TTL churn.
#[derive(Clone)]
pub enum Now {
    System,
    Manual(ManualClock),
}

impl Now {
    fn secs(&self) -> u64 {
        match self {
            Now::System => crate::keeps_up::now_secs(),
            Now::Manual(c) => c.now_unix_millis() / 1000,
        }
    }
}

/// fjall 3's TTL mechanism: a compaction filter removing every value whose expiry stamp (the
/// first 8 bytes, [`expiry_of`]) has passed. One filter per compaction, made by the factory.
struct ExpiryFactory(Now);

/// The filter of one compaction: "now" fixed when it started.
struct ExpiryFilter(u64);

impl fjall::compaction::filter::Factory for ExpiryFactory {
    fn name(&self) -> &str {
        "expiry-stamp"
    }
    fn make_filter(
        &self,
        _ctx: &fjall::compaction::filter::Context,
    ) -> Box<dyn fjall::compaction::filter::CompactionFilter> {
        // One "now" per compaction: an entry expiring during it is dropped by the next one.
        Box::new(ExpiryFilter(self.0.secs()))
    }
}

impl fjall::compaction::filter::CompactionFilter for ExpiryFilter {
    fn filter_item(
        &mut self,
        item: fjall::compaction::filter::ItemAccessor<'_>,
        _ctx: &fjall::compaction::filter::Context,
    ) -> fjall::compaction::filter::CompactionFilterResult {
        Ok(if expiry_of(&item.value()?) <= self.0 {
            fjall::compaction::filter::Verdict::Remove
        } else {
            fjall::compaction::filter::Verdict::Keep
        })
    }
}

pub struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
    durable: bool,
    /// Reads drop values whose stamp has passed (the TTL churn's "reads check the stamp").
    stamp_check: Option<Now>,
}

impl Fjall {
    /// `Database::builder(dir).cache_size(1 GiB)`, default keyspace options (leveled
    /// compaction, lz4); with a TTL, the expiry-stamp compaction filter reading `now`.
    fn open_with(dir: &Path, durable: bool, ttl: Option<Now>) -> Res<Self> {
        let mut b = fjall::Database::builder(dir).cache_size(CACHE_BYTES);
        if let Some(now) = &ttl {
            let factory: std::sync::Arc<dyn fjall::compaction::filter::Factory> =
                std::sync::Arc::new(ExpiryFactory(now.clone()));
            b = b.with_compaction_filter_factories(std::sync::Arc::new(move |name: &str| {
                (name == "bench").then(|| factory.clone())
            }));
        }
        let db = b.open()?;
        let ks = db.keyspace("bench", fjall::KeyspaceCreateOptions::default)?;
        Ok(Fjall {
            db,
            ks,
            durable,
            stamp_check: None,
        })
    }

    pub fn open(dir: &Path, o: &OpenOpts) -> Res<Self> {
        let ttl = match (&o.clock, o.ttl_secs) {
            (Some(c), Some(_)) => Some(Now::Manual(c.clone())),
            _ => None,
        };
        let mut me = Self::open_with(dir, o.durability == Durability::Fsync, ttl.clone())?;
        me.stamp_check = ttl;
        Ok(me)
    }

    /// The `keeps_up` setup: the expiry-stamp compaction filter on the real clock. Reads here
    /// are fjall's raw answer; the harness counts a returned expired value as one the
    /// application's stamp check would drop.
    pub fn open_filter_ttl(dir: &Path) -> Res<Self> {
        Self::open_with(dir, false, Some(Now::System))
    }

    fn after_write(&self) -> Res<()> {
        if self.durable {
            self.db.persist(fjall::PersistMode::SyncAll)?;
        }
        Ok(())
    }
}

impl Engine for Fjall {
    fn compact_full(&mut self) -> Res<bool> {
        self.ks.major_compact()?;
        Ok(true)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        self.ks.insert(key, value)?;
        self.after_write()
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        let mut b = self.db.batch();
        for (k, v) in items {
            b.insert(&self.ks, *k, *v);
        }
        b.commit()?;
        self.after_write()
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        let v = self.ks.get(key)?;
        if let (Some(now), Some(v)) = (&self.stamp_check, &v) {
            if expiry_of(v) <= now.secs() {
                return Ok(None);
            }
        }
        Ok(v.map(|v| v.to_vec()))
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        let mut b = self.db.batch();
        for k in keys {
            b.remove(&self.ks, k.as_slice());
        }
        b.commit()?;
        self.after_write()
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        let mut n = 0;
        for item in self.ks.iter() {
            let (k, v) = item.into_inner()?;
            f(&k, &v);
            n += 1;
        }
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        Ok(self.db.persist(fjall::PersistMode::SyncAll)?)
    }
    fn ttl_tick(&self) -> Res<bool> {
        // The compaction filter is passive: it drops expired values when fjall compacts.
        Ok(self.stamp_check.is_some())
    }
}

// ---------------------------------------------------------------------------------------------

pub struct Sled {
    db: sled::Db,
    durable: bool,
}

impl Sled {
    pub fn open(dir: &Path, o: &OpenOpts) -> Res<Self> {
        let db = sled::Config::new().path(dir).open()?;
        Ok(Sled {
            db,
            durable: o.durability == Durability::Fsync,
        })
    }
    fn after_write(&self) -> Res<()> {
        if self.durable {
            self.db.flush()?;
        }
        Ok(())
    }
}

impl Engine for Sled {
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        self.db.insert(key, value)?;
        self.after_write()
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        let mut b = sled::Batch::default();
        for (k, v) in items {
            b.insert(*k, *v);
        }
        self.db.apply_batch(b)?;
        self.after_write()
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.db.get(key)?.map(|v| v.to_vec()))
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        let mut b = sled::Batch::default();
        for k in keys {
            b.remove(k.as_slice());
        }
        self.db.apply_batch(b)?;
        self.after_write()
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        let mut n = 0;
        for item in self.db.iter() {
            let (k, v) = item?;
            f(&k, &v);
            n += 1;
        }
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        self.db.flush()?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------

#[cfg(feature = "rocksdb")]
pub struct Rocks {
    db: rocksdb::DB,
    wo: rocksdb::WriteOptions,
    ttl: bool,
}

#[cfg(feature = "rocksdb")]
impl Rocks {
    fn options() -> Res<rocksdb::Options> {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.increase_parallelism(2);
        opts.set_level_compaction_dynamic_level_bytes(true);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(CACHE_BYTES as usize)?);
        opts.set_block_based_table_factory(&table);
        Ok(opts)
    }

    /// The `keeps_up` setup: `DB::open_with_ttl`, RocksDB's own TTL (a timestamp appended to
    /// every value and a compaction filter dropping entries older than the TTL on the wall
    /// clock; reads may return expired entries until a compaction drops them).
    pub fn open_with_ttl(dir: &Path, ttl_secs: u64) -> Res<Self> {
        let opts = Self::options()?;
        let db = rocksdb::DB::open_with_ttl(&opts, dir, std::time::Duration::from_secs(ttl_secs))?;
        Ok(Rocks {
            db,
            wo: rocksdb::WriteOptions::default(),
            ttl: true,
        })
    }

    /// The mixed-TTL `keeps_up` setup: a compaction filter removing every value whose expiry
    /// stamp passed on the real clock (`open_with_ttl` has one TTL for the whole database).
    pub fn open_filter_ttl(dir: &Path) -> Res<Self> {
        let mut opts = Self::options()?;
        opts.set_compaction_filter("expiry", |_level, _key: &[u8], value: &[u8]| {
            if expiry_of(value) <= crate::keeps_up::now_secs() {
                rocksdb::compaction_filter::Decision::Remove
            } else {
                rocksdb::compaction_filter::Decision::Keep
            }
        });
        let db = rocksdb::DB::open(&opts, dir)?;
        Ok(Rocks {
            db,
            wo: rocksdb::WriteOptions::default(),
            ttl: true,
        })
    }

    pub fn open(dir: &Path, o: &OpenOpts) -> Res<Self> {
        let mut opts = Self::options()?;
        if let (Some(clock), Some(_)) = (&o.clock, o.ttl_secs) {
            let clock = clock.clone();
            opts.set_compaction_filter("expiry", move |_level, _key: &[u8], value: &[u8]| {
                if expiry_of(value) <= clock.now_unix_millis() / 1000 {
                    rocksdb::compaction_filter::Decision::Remove
                } else {
                    rocksdb::compaction_filter::Decision::Keep
                }
            });
        }
        let db = rocksdb::DB::open(&opts, dir)?;
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(o.durability == Durability::Fsync);
        Ok(Rocks {
            db,
            wo,
            ttl: o.ttl_secs.is_some(),
        })
    }
}

#[cfg(feature = "rocksdb")]
impl Engine for Rocks {
    fn compact_full(&mut self) -> Res<bool> {
        self.db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(true)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        Ok(self.db.put_opt(key, value, &self.wo)?)
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in items {
            b.put(k, v);
        }
        Ok(self.db.write_opt(b, &self.wo)?)
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.to_vec()))
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        let mut b = rocksdb::WriteBatch::default();
        for k in keys {
            b.delete(k);
        }
        Ok(self.db.write_opt(b, &self.wo)?)
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        let mut it = self.db.raw_iterator();
        it.seek_to_first();
        let mut n = 0;
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            f(k, v);
            n += 1;
            it.next();
        }
        it.status()?;
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        Ok(self.db.flush_wal(true)?)
    }
    fn ttl_tick(&self) -> Res<bool> {
        // The compaction filter is passive: it drops expired values when RocksDB compacts.
        Ok(self.ttl)
    }
}
