//! The manifest: which segments make up the database, and the keyspace catalogue.
//!
//! ```text
//!  0  8  magic "EBBDBMAN"
//!  8  4  format version
//! 12  4  body length n
//! 16  4  crc32 of the body
//! 20  n  body: JSON (serde) of `Manifest`
//! ```
//! It is replaced atomically: written to `MANIFEST.tmp`, fsynced, renamed over `MANIFEST`, and
//! the directory fsynced. A segment file that the manifest does not list is not part of the
//! database; opening deletes it only when it provably is a leftover of this engine (see
//! `engine::recovery`). Sealed segments are listed with their exact length. Keyspace creation, deletion and default-TTL changes are durable because
//! they return only after the manifest that records them is.
//!
//! A failed [`Manifest::store`] says how far it got ([`StoreError`]): before the rename nothing
//! changed (the old manifest is in force and `MANIFEST.tmp` is ignored); after it, the new
//! manifest is in place but, with the directory fsync failed, may not survive a power loss.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use byteorder::{ByteOrder, LittleEndian as LE};
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::faults::{self, FaultKind};
use crate::format::FORMAT_VERSION;
use crate::ttl::TtlChange;

const MAGIC: [u8; 8] = *b"EBBDBMAN";
const HEADER_LEN: usize = 20;
const MAX_BODY: usize = 256 << 20;

/// How a failed [`Manifest::store`] left the directory.
#[derive(Debug)]
pub enum StoreError {
    /// Failed before the rename: `MANIFEST` is the old one, untouched; nothing changed.
    Unchanged(Error),
    /// The rename happened but the directory fsync failed: the new manifest is in place, but
    /// whether it survives a power loss is unknown.
    Uncertain(Error),
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unchanged(e) | StoreError::Uncertain(e) => e,
        }
    }
}

/// A keyspace in the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceMeta {
    /// Internal id carried by every record; never reused.
    pub id: u32,
    /// User-visible name.
    pub name: String,
    /// Every default-TTL setting since creation, oldest first (never empty).
    pub history: Vec<TtlChange>,
}

/// A sealed segment in the manifest: its id and its exact length. The length is what makes a
/// sealed segment verifiable: a file that is shorter (even cut exactly at a record boundary) or
/// longer is damaged, and zeroed bytes before this length are damage, not the end of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedSegment {
    /// File id.
    pub id: u32,
    /// File length in bytes, header included, as fsynced before this manifest was written.
    pub len: u64,
}

/// The manifest contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Next file id to hand out.
    pub next_file_id: u32,
    /// A floor for the next sequence number (the log itself may hold higher ones).
    pub next_seq: u64,
    /// Next keyspace id to hand out.
    pub next_keyspace_id: u32,
    /// Sealed segments (appended-and-sealed or merge outputs) with their lengths.
    pub sealed: Vec<SealedSegment>,
    /// The segment being appended to.
    pub active: Option<u32>,
    /// Live keyspaces.
    pub keyspaces: Vec<KeyspaceMeta>,
    /// The engine's time high-water mark (Unix seconds) when this manifest was written: a
    /// floor for `now` on open, besides `CLOCK`.
    pub high_water: u64,
    /// Segments a merge retired whose files may still exist (they are unlinked when their last
    /// reader lets go). Opening deletes their files; nothing else unlisted is deleted unless it
    /// provably holds no data (DESIGN.md "Crash safety", step 4).
    pub retired: Vec<u32>,
}

impl Manifest {
    /// True when `id` is the active segment or a sealed one.
    #[must_use]
    pub fn lists(&self, id: u32) -> bool {
        self.active == Some(id) || self.sealed.iter().any(|s| s.id == id)
    }

    /// Ids of the sealed segments, in manifest order.
    #[must_use]
    pub fn sealed_ids(&self) -> Vec<u32> {
        self.sealed.iter().map(|s| s.id).collect()
    }

    /// Reads `dir/MANIFEST`, or `None` if there is none.
    ///
    /// # Errors
    /// [`Error::Corruption`] if the file fails its checks; [`Error::Io`] on OS errors.
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join("MANIFEST");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io_at(&path, e)),
        };
        let bad = |reason: &str| Error::corruption(&path, 0, reason.to_string());
        let header = bytes
            .get(..HEADER_LEN)
            .ok_or_else(|| bad("manifest truncated"))?;
        if header[0..8] != MAGIC {
            return Err(bad("bad manifest magic"));
        }
        let version = LE::read_u32(&header[8..12]);
        if version != FORMAT_VERSION {
            return Err(bad(&format!(
                "manifest format version {version}, this build reads version {FORMAT_VERSION}"
            )));
        }
        let n = LE::read_u32(&header[12..16]) as usize;
        if n > MAX_BODY {
            return Err(bad("manifest length out of range"));
        }
        let body = bytes
            .get(HEADER_LEN..HEADER_LEN + n)
            .ok_or_else(|| bad("manifest truncated"))?;
        if crc32fast::hash(body) != LE::read_u32(&header[16..20]) {
            return Err(bad("manifest checksum mismatch"));
        }
        let manifest: Self =
            serde_json::from_slice(body).map_err(|e| bad(&format!("manifest body: {e}")))?;
        if let Some(why) = manifest.duplicate() {
            return Err(bad(&why));
        }
        Ok(Some(manifest))
    }

    /// What the manifest lists twice, if anything: a segment id (sealed or active), a keyspace
    /// id or a keyspace name. The engine never writes such a manifest; opening one would give
    /// two keyspaces one set of records (the catalogue keeps one of them by id), so it is
    /// damage.
    fn duplicate(&self) -> Option<String> {
        let mut segments: Vec<u32> = self
            .sealed
            .iter()
            .map(|s| s.id)
            .chain(self.active)
            .collect();
        segments.sort_unstable();
        if let Some(w) = segments.windows(2).find(|w| w[0] == w[1]) {
            return Some(format!("manifest lists segment {} twice", w[0]));
        }
        let mut ids: Vec<u32> = self.keyspaces.iter().map(|k| k.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Some(format!("manifest lists keyspace id {} twice", w[0]));
        }
        let mut names: Vec<&str> = self.keyspaces.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Some(format!("manifest lists keyspace '{}' twice", w[0]));
        }
        None
    }

    /// Atomically replaces `dir/MANIFEST` with `self`, its `high_water` raised to at least
    /// `high_water` (the engine's time high-water mark, Unix seconds).
    ///
    /// # Errors
    /// [`StoreError::Unchanged`] for a failure before the rename (an OS error naming the file,
    /// or [`Error::TooLarge`] for a body `load` would refuse): the old manifest stays in force.
    /// [`StoreError::Uncertain`] when the directory fsync after the rename failed. `high_water`
    /// (the engine's time high-water mark, seconds) is recorded if it is newer than the
    /// manifest's own.
    pub fn store(&self, dir: &Path, high_water: u64) -> Result<(), StoreError> {
        self.write_tmp_and_rename(dir, high_water)
            .map_err(StoreError::Unchanged)?;
        super::sync_dir(dir).at(dir).map_err(StoreError::Uncertain)
    }

    /// Everything up to and including the rename. On failure `MANIFEST` is untouched: `rename`
    /// either replaces it atomically or, when it fails, changes nothing.
    fn write_tmp_and_rename(&self, dir: &Path, high_water: u64) -> Result<()> {
        let body = if high_water > self.high_water {
            let mut m = self.clone();
            m.high_water = high_water;
            serde_json::to_vec(&m)
        } else {
            serde_json::to_vec(self)
        }
        .map_err(|e| Error::from(std::io::Error::from(e)))?;
        check_body_len(body.len())?;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&MAGIC);
        let mut h = [0u8; 12];
        LE::write_u32(&mut h[0..4], FORMAT_VERSION);
        LE::write_u32(&mut h[4..8], u32::try_from(body.len()).unwrap_or(u32::MAX));
        LE::write_u32(&mut h[8..12], crc32fast::hash(&body));
        out.extend_from_slice(&h);
        out.extend_from_slice(&body);
        let tmp = dir.join("MANIFEST.tmp");
        (|| {
            faults::check(&tmp, FaultKind::Create)?;
            let mut f = File::create(&tmp)?;
            faults::check(&tmp, FaultKind::Write)?;
            f.write_all(&out)?;
            faults::sync_file(&f, &tmp, false)?;
            faults::rename(&tmp, &dir.join("MANIFEST"))
        })()
        .at(&tmp)
    }
}

/// Refuses to write a manifest that [`Manifest::load`] would refuse to read (a database that
/// cannot be opened again), before anything is written.
fn check_body_len(n: usize) -> Result<()> {
    if n > MAX_BODY {
        return Err(Error::TooLarge(format!(
            "the manifest would be {n} bytes; the limit is {MAX_BODY} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ttl::DefaultTtl;

    #[test]
    fn an_unloadable_manifest_is_never_written() {
        assert!(check_body_len(MAX_BODY).is_ok());
        assert!(matches!(
            check_body_len(MAX_BODY + 1),
            Err(Error::TooLarge(_))
        ));
        let dir = tempfile::tempdir().expect("tempdir");
        let m = Manifest {
            keyspaces: vec![KeyspaceMeta {
                id: 1,
                name: "x".repeat(MAX_BODY),
                history: Vec::new(),
            }],
            ..Manifest::default()
        };
        assert!(matches!(
            m.store(dir.path(), 0),
            Err(StoreError::Unchanged(Error::TooLarge(_)))
        ));
        assert_eq!(Manifest::load(dir.path()).expect("load"), None);
    }

    /// A manifest that lists a segment, a keyspace id or a keyspace name twice is damage, named
    /// in the error; with every one listed once it loads.
    #[test]
    fn a_manifest_listing_something_twice_is_refused() {
        let ks = |id: u32, name: &str| KeyspaceMeta {
            id,
            name: name.into(),
            history: Vec::new(),
        };
        let good = Manifest {
            sealed: vec![
                SealedSegment { id: 1, len: 64 },
                SealedSegment { id: 2, len: 64 },
            ],
            active: Some(3),
            keyspaces: vec![ks(1, "a"), ks(2, "b")],
            ..Manifest::default()
        };
        let mut twice_sealed = good.clone();
        twice_sealed.sealed[1].id = 1;
        let mut active_sealed = good.clone();
        active_sealed.active = Some(2);
        let mut twice_id = good.clone();
        twice_id.keyspaces[1].id = 1;
        let mut twice_name = good.clone();
        twice_name.keyspaces[1].name = "a".into();
        for (m, want) in [
            (&twice_sealed, "segment 1 twice"),
            (&active_sealed, "segment 2 twice"),
            (&twice_id, "keyspace id 1 twice"),
            (&twice_name, "keyspace 'a' twice"),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            m.store(dir.path(), 0).expect("store");
            match Manifest::load(dir.path()) {
                Err(Error::Corruption { reason, .. }) => assert!(reason.contains(want), "{reason}"),
                other => panic!("{want}: {other:?}"),
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        good.store(dir.path(), 0).expect("store");
        assert_eq!(Manifest::load(dir.path()).expect("load"), Some(good));
    }

    #[test]
    fn store_load_round_trip_and_corruption() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(Manifest::load(dir.path()).expect("load"), None);
        let m = Manifest {
            next_file_id: 4,
            next_seq: 10,
            next_keyspace_id: 2,
            sealed: vec![
                SealedSegment { id: 1, len: 4096 },
                SealedSegment { id: 2, len: 77 },
            ],
            active: Some(3),
            high_water: 1_700_000_000,
            retired: vec![],
            keyspaces: vec![KeyspaceMeta {
                id: 1,
                name: "orders".into(),
                history: vec![TtlChange {
                    since: 0,
                    default: DefaultTtl::Seconds(5),
                }],
            }],
        };
        m.store(dir.path(), 5).expect("store");
        assert_eq!(Manifest::load(dir.path()).expect("load"), Some(m.clone()));
        m.store(dir.path(), 1_800_000_000).expect("store");
        let back = Manifest::load(dir.path()).expect("load").expect("some");
        assert_eq!(back.high_water, 1_800_000_000);
        let path = dir.path().join("MANIFEST");
        let mut b = fs::read(&path).expect("read");
        let last = b.len() - 1;
        b[last] ^= 1;
        fs::write(&path, &b).expect("write");
        assert!(matches!(
            Manifest::load(dir.path()),
            Err(Error::Corruption { .. })
        ));
    }
}
