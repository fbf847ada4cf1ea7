//! The served account: one Cosmos database per sub-directory of the `serve` directory, each an
//! [`ebbdb::Database`] opened once at start (or when created) and shared by every request.
//!
//! A database's directory name is its id with every byte but ASCII letters, digits, `-`, `_`
//! and inner `.` written as `%XX` (the export file-name rule), so any valid id maps to one
//! name and back. Sub-directories without a `MANIFEST`, and names that do not decode, are
//! not databases and are left alone. Deleting a database removes it from the map, deletes its
//! containers, syncs, renames the directory to `.deleted-…` (a name no id encodes to) and
//! removes that (a start finishes a removal that a crash interrupted); a request that still holds the old handle finishes against the unlinked
//! files and cannot touch a database created again under the same id.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use ebbdb::{Database, Error};
use sha2::{Digest, Sha256};

use crate::dump::file_stem;
use crate::serve::path::percent_decode;

/// One served database.
#[derive(Debug)]
pub struct Entry {
    pub id: String,
    pub db: Database,
    /// Unix seconds: the directory's creation (or, where the file system has none, its
    /// modification) time.
    pub ts: u64,
}

/// Every served database, by id.
#[derive(Debug)]
pub struct Catalog {
    root: PathBuf,
    opts: fn() -> Result<ebbdb::Options, String>,
    dbs: RwLock<BTreeMap<String, Arc<Entry>>>,
    deleted: AtomicU64,
}

/// The `_rid` of a database: 4 bytes derived from its id, base64 (Cosmos's shape).
pub fn database_rid(id: &str) -> String {
    rid(&[id])
}

/// The `_rid` of a container: 8 bytes, the database's 4 then 4 derived from both ids.
pub fn container_rid(db: &str, coll: &str) -> String {
    use base64::Engine;
    let mut bytes = digest(&[db])[..4].to_vec();
    bytes.extend_from_slice(&digest(&[db, coll])[..4]);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

fn rid(parts: &[&str]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(&digest(parts)[..4])
}

/// A database id: 1 to 255 characters, none of `/ \ ? #`, no trailing space (Cosmos's rules).
pub fn validate_database_id(id: &str) -> Result<(), Error> {
    let n = id.chars().count();
    if n == 0 || n > 255 {
        return Err(Error::BadRequest(format!(
            "a database id must have 1 to 255 characters, not {n}"
        )));
    }
    if let Some(c) = id.chars().find(|c| matches!(c, '/' | '\\' | '?' | '#')) {
        return Err(Error::BadRequest(format!(
            "the database id '{id}' contains the invalid character '{c}'"
        )));
    }
    if id.ends_with(' ') {
        return Err(Error::BadRequest(format!(
            "the database id '{id}' ends with a space"
        )));
    }
    if file_stem(id).len() > 255 {
        return Err(Error::BadRequest(format!(
            "the database id '{id}' is too long to be a directory name once encoded (ebbdb \
             serve keeps each database in its own directory)"
        )));
    }
    Ok(())
}

fn created_secs(dir: &Path) -> u64 {
    std::fs::metadata(dir)
        .and_then(|m| m.created().or_else(|_| m.modified()))
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

impl Catalog {
    /// Opens every database under `root` (created if missing). `opts` gives the options each
    /// database is opened with.
    pub fn open(root: &Path, opts: fn() -> Result<ebbdb::Options, String>) -> Result<Self, Error> {
        std::fs::create_dir_all(root).map_err(|source| Error::Io {
            path: Some(root.to_path_buf()),
            source,
        })?;
        let mut dbs = BTreeMap::new();
        let entries = std::fs::read_dir(root).map_err(|source| Error::Io {
            path: Some(root.to_path_buf()),
            source,
        })?;
        for entry in entries.flatten() {
            let dir = entry.path();
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(".deleted-") {
                // A delete that stopped between its rename and its removal: finish it.
                std::fs::remove_dir_all(&dir).map_err(|source| Error::Io {
                    path: Some(dir.clone()),
                    source,
                })?;
                continue;
            }
            if name.starts_with('.') || !dir.join("MANIFEST").is_file() {
                continue;
            }
            let Some(id) = percent_decode(name) else {
                continue;
            };
            if file_stem(&id) != name {
                continue;
            }
            let db = Database::open_with(&dir, opts().map_err(Error::InvalidOptions)?)?;
            let ts = created_secs(&dir);
            dbs.insert(id.clone(), Arc::new(Entry { id, db, ts }));
        }
        Ok(Self {
            root: root.to_path_buf(),
            opts,
            dbs: RwLock::new(dbs),
            deleted: AtomicU64::new(0),
        })
    }

    /// The database `id`; 404 if there is none.
    pub fn get(&self, id: &str) -> Result<Arc<Entry>, Error> {
        let dbs = self
            .dbs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        dbs.get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("database '{id}'")))
    }

    /// Every database, in id order.
    pub fn list(&self) -> Vec<Arc<Entry>> {
        let dbs = self
            .dbs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        dbs.values().cloned().collect()
    }

    /// Creates database `id`; 409 if it exists, 400 for an invalid id.
    pub fn create(&self, id: &str) -> Result<Arc<Entry>, Error> {
        validate_database_id(id)?;
        let mut dbs = self
            .dbs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if dbs.contains_key(id) {
            return Err(Error::Conflict(format!("database '{id}' already exists")));
        }
        let dir = self.root.join(file_stem(id));
        if dir.exists() {
            return Err(Error::Conflict(format!(
                "database '{id}': {} exists but holds no database ebbdb serve opened",
                dir.display()
            )));
        }
        let db = Database::open_with(&dir, (self.opts)().map_err(Error::InvalidOptions)?)?;
        let entry = Arc::new(Entry {
            id: id.to_owned(),
            db,
            ts: created_secs(&dir),
        });
        dbs.insert(id.to_owned(), Arc::clone(&entry));
        Ok(entry)
    }

    /// Deletes database `id` and its directory; 404 if there is none.
    pub fn delete(&self, id: &str) -> Result<(), Error> {
        let entry = {
            let mut dbs = self
                .dbs
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            dbs.remove(id)
                .ok_or_else(|| Error::NotFound(format!("database '{id}'")))?
        };
        for props in entry.db.containers()? {
            match entry.db.delete_container(&props.id) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        entry.db.store().sync()?;
        drop(entry);
        let dir = self.root.join(file_stem(id));
        let n = self.deleted.fetch_add(1, Ordering::Relaxed);
        let trash = self
            .root
            .join(format!(".deleted-{}-{n}", std::process::id()));
        std::fs::rename(&dir, &trash).map_err(|source| Error::Io {
            path: Some(dir.clone()),
            source,
        })?;
        std::fs::remove_dir_all(&trash).map_err(|source| Error::Io {
            path: Some(trash.clone()),
            source,
        })?;
        Ok(())
    }

    /// Syncs every database (at shutdown).
    pub fn sync_all(&self) -> Vec<(String, Error)> {
        let mut failures = Vec::new();
        for e in self.list() {
            if let Err(err) = e.db.store().sync() {
                failures.push((e.id.clone(), err));
            }
        }
        failures
    }

    /// Drops every handle (the databases close when the last request holding one ends).
    pub fn close(&self) {
        let mut dbs = self
            .dbs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        dbs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(validate_database_id("shop").is_ok());
        assert!(validate_database_id("").is_err());
        assert!(validate_database_id("a/b").is_err());
        assert!(validate_database_id("a ").is_err());
        assert!(validate_database_id(&"x".repeat(256)).is_err());
        // 100 characters that each encode to 6 bytes: valid for Cosmos, too long a file name.
        assert!(validate_database_id(&"é".repeat(100)).is_err());
    }

    #[test]
    fn rids_are_stable_and_distinct() {
        assert_eq!(database_rid("a"), database_rid("a"));
        assert_ne!(database_rid("a"), database_rid("b"));
        assert_eq!(database_rid("a").len(), 8);
        assert_eq!(container_rid("a", "c").len(), 12);
        assert!(container_rid("a", "c").starts_with(&database_rid("a")[..4]));
    }

    #[test]
    fn create_list_delete_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = || Ok(ebbdb::Options::default());
        let cat = Catalog::open(dir.path(), opts).expect("open");
        cat.create("shop").expect("create");
        cat.create("a b#").expect_err("invalid id");
        cat.create("Ünï").expect("create");
        assert!(matches!(cat.create("shop"), Err(Error::Conflict(_))));
        let ids: Vec<String> = cat.list().iter().map(|e| e.id.clone()).collect();
        assert_eq!(ids, ["shop", "Ünï"]);
        cat.close();
        drop(cat);
        let cat = Catalog::open(dir.path(), opts).expect("reopen");
        assert_eq!(cat.list().len(), 2);
        cat.delete("shop").expect("delete");
        assert!(matches!(cat.get("shop"), Err(Error::NotFound(_))));
        assert!(matches!(cat.delete("shop"), Err(Error::NotFound(_))));
        assert!(!dir.path().join("shop").exists());
        cat.create("shop").expect("create again");
        // A delete interrupted after its rename is finished at the next start.
        let leftover = dir.path().join(".deleted-1-0");
        std::fs::create_dir_all(leftover.join("x")).expect("leftover");
        cat.close();
        drop(cat);
        let cat = Catalog::open(dir.path(), opts).expect("reopen");
        assert!(!leftover.exists());
        assert_eq!(cat.list().len(), 2);
    }
}
