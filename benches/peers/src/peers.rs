//! The LSM and log-structured peers: fjall, sled and RocksDB (see `Kind::describe`).

use std::path::Path;

#[cfg(feature = "rocksdb")]
use ebbdb::clock::Clock;

#[cfg(feature = "rocksdb")]
use crate::engines::expiry_of;
use crate::engines::{Durability, Engine, OpenOpts, Res, CACHE_BYTES};

// ---------------------------------------------------------------------------------------------

pub struct Fjall {
    ks: fjall::Keyspace,
    part: fjall::PartitionHandle,
    durable: bool,
}

impl Fjall {
    pub fn open(dir: &Path, o: &OpenOpts) -> Res<Self> {
        let ks = fjall::Config::new(dir).cache_size(CACHE_BYTES).open()?;
        let part = ks.open_partition("bench", fjall::PartitionCreateOptions::default())?;
        Ok(Fjall {
            ks,
            part,
            durable: o.durability == Durability::Fsync,
        })
    }
    /// The `keeps_up` setup: fjall 2.x has no compaction filter; its TTL mechanism is FIFO
    /// compaction with a TTL, which drops whole segments (disk tables) created more than
    /// `ttl_secs` ago, checked whenever a flush triggers compaction. No size limit.
    pub fn open_fifo_ttl(dir: &Path, ttl_secs: u64) -> Res<Self> {
        let ks = fjall::Config::new(dir).cache_size(CACHE_BYTES).open()?;
        let fifo = fjall::compaction::Fifo::new(u64::MAX, Some(ttl_secs));
        let opts = fjall::PartitionCreateOptions::default()
            .compaction_strategy(fjall::compaction::Strategy::Fifo(fifo));
        let part = ks.open_partition("bench", opts)?;
        Ok(Fjall {
            ks,
            part,
            durable: false,
        })
    }
    fn after_write(&self) -> Res<()> {
        if self.durable {
            self.ks.persist(fjall::PersistMode::SyncAll)?;
        }
        Ok(())
    }
}

impl Engine for Fjall {
    fn put(&self, key: &[u8], value: &[u8]) -> Res<()> {
        self.part.insert(key, value)?;
        self.after_write()
    }
    fn put_batch(&self, items: &[(&[u8], &[u8])]) -> Res<()> {
        let mut b = self.ks.batch();
        for (k, v) in items {
            b.insert(&self.part, *k, *v);
        }
        b.commit()?;
        self.after_write()
    }
    fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.part.get(key)?.map(|v| v.to_vec()))
    }
    fn delete_batch(&self, keys: &[Vec<u8>]) -> Res<()> {
        let mut b = self.ks.batch();
        for k in keys {
            b.remove(&self.part, k.as_slice());
        }
        b.commit()?;
        self.after_write()
    }
    fn scan(&self, f: &mut dyn FnMut(&[u8], &[u8])) -> Res<u64> {
        let mut n = 0;
        for item in self.part.iter() {
            let (k, v) = item?;
            f(&k, &v);
            n += 1;
        }
        Ok(n)
    }
    fn sync(&self) -> Res<()> {
        Ok(self.ks.persist(fjall::PersistMode::SyncAll)?)
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
