//! Damage at every byte offset of every file type of a small database: each file (a sealed
//! merge output, its hint, a sealed segment of appended records, the active segment, MANIFEST,
//! CLOCK) is cut at every offset, has bytes flipped across it and runs of it zeroed; the
//! directory is then opened (Strict and Salvage), read, compacted, read again and reopened.
//!
//! The outcome must be a typed error or every acknowledged key with its value, and no deleted
//! key back — never a silent loss. Salvage may lose keys or bring back a deleted one only when
//! its damage counters say it skipped something. A key readable before a compaction is readable
//! after it and after a reopen: compaction never turns damage into loss. (Issue 9.)
//!
//! The default run sweeps every `STRIDE`-th offset; `EBBDB_DAMAGE_FULL=1` sweeps them all.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use common::{clock, copy_dir, opts};
use ebbdb::log::manifest::Manifest;
use ebbdb::{DefaultTtl, RecoveryMode, Store};

const STRIDE: usize = 53;

/// Acknowledged state: live keys with their values, and keys deleted for good.
struct Template {
    dir: tempfile::TempDir,
    live: BTreeMap<String, Vec<u8>>,
    deleted: Vec<String>,
    files: Vec<String>,
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| build().expect("build the template database"))
}

fn build() -> ebbdb::Result<Template> {
    let dir = tempfile::tempdir()?;
    let c = clock();
    let mut live = BTreeMap::new();
    let mut deleted = Vec::new();
    {
        let store = Store::open_with(dir.path(), opts(&c))?;
        let ks = store.create_keyspace("ks", DefaultTtl::Off)?;
        let put = |live: &mut BTreeMap<String, Vec<u8>>, i: u32, round: u32| -> ebbdb::Result<()> {
            let k = format!("k{i:03}");
            let v = format!("{k}-round{round}-{}", "x".repeat(40 + (i as usize % 30)));
            ks.put(&k, &v)?;
            live.insert(k, v.into_bytes());
            Ok(())
        };
        for i in 0..40 {
            put(&mut live, i, 0)?;
        }
        for i in (0..40).step_by(3) {
            put(&mut live, i, 1)?;
        }
        for i in (1..40).step_by(7) {
            let k = format!("k{i:03}");
            ks.delete(&k)?;
            live.remove(&k);
            deleted.push(k);
        }
        // Merge outputs with hints, then a rotation-sealed segment and an active one.
        store.compact_full()?;
        for i in 40..95 {
            put(&mut live, i, 2)?;
        }
        store.maintain()?;
        store.sync()?;
    }
    let m = Manifest::load(dir.path())?.expect("manifest");
    let active = m.active.expect("active");
    let mut sealed = m.sealed_ids();
    sealed.sort_unstable();
    assert!(sealed.len() >= 2, "{sealed:?}");
    let name = |id: u32, ext: &str| format!("{id:010}.{ext}");
    let hinted = *sealed
        .iter()
        .find(|id| dir.path().join(name(**id, "hint")).exists())
        .expect("a sealed segment with a hint");
    let last_sealed = *sealed.last().expect("sealed");
    let mut files = vec![
        name(hinted, "seg"),
        name(hinted, "hint"),
        name(active, "seg"),
        "MANIFEST".to_string(),
        "CLOCK".to_string(),
    ];
    if last_sealed != hinted {
        files.push(name(last_sealed, "seg"));
    }
    Ok(Template {
        dir,
        live,
        deleted,
        files,
    })
}

#[derive(Debug, Clone, Copy)]
enum Harm {
    Cut(usize),
    Flip(usize),
    Zero(usize),
}

fn harm(bytes: &[u8], h: Harm) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match h {
        Harm::Cut(at) => b.truncate(at),
        Harm::Flip(at) => b[at] ^= 0x5A,
        Harm::Zero(at) => {
            let end = (at + 16).min(b.len());
            b[at..end].fill(0);
        }
    }
    b
}

type Reads = BTreeMap<String, Result<Option<Vec<u8>>, String>>;

fn read_all(store: &Store) -> Option<Reads> {
    let ks = store.keyspace("ks").ok()?;
    let t = template();
    Some(
        t.live
            .keys()
            .chain(&t.deleted)
            .map(|k| (k.clone(), ks.get(k).map_err(|e| e.to_string())))
            .collect(),
    )
}

fn damage_counted(store: &Store) -> bool {
    let st = store.stats();
    st.damaged_segments + st.skipped_bytes + st.unlisted_files > 0
}

/// Checks what a store shows against the acknowledged state.
fn judge(reads: &Reads, lenient: bool) -> Result<(), String> {
    let t = template();
    for (k, got) in reads {
        match (t.live.get(k), got) {
            (_, Err(_)) => {} // a typed error
            (Some(want), Ok(Some(v))) if v != want => return Err(format!("{k}: wrong value")),
            (Some(_), Ok(Some(_))) | (None, Ok(None)) => {}
            (Some(_), Ok(None)) if !lenient => return Err(format!("{k}: silently lost")),
            (None, Ok(Some(_))) if !lenient => return Err(format!("{k}: deleted key is back")),
            _ => {}
        }
    }
    Ok(())
}

/// Opens `dir` in `mode`, reads, compacts, reads, reopens, reads.
fn exercise(dir: &Path, mode: RecoveryMode) -> Result<(), String> {
    let c = clock();
    let o = || opts(&c).recovery(mode);
    let Ok(store) = Store::open_with(dir, o()) else {
        return Ok(()); // a typed error
    };
    let salvage = mode == RecoveryMode::Salvage;
    let Some(before) = read_all(&store) else {
        return if salvage && damage_counted(&store) {
            Ok(())
        } else {
            Err("keyspace gone".into())
        };
    };
    judge(&before, salvage && damage_counted(&store)).map_err(|e| format!("open: {e}"))?;
    let compacted = store.compact_full();
    let after = read_all(&store).ok_or("keyspace gone after compaction")?;
    for (k, v) in &before {
        if let Ok(Some(want)) = v {
            if after.get(k) != Some(&Ok(Some(want.clone()))) {
                return Err(format!(
                    "{k}: readable before compaction ({compacted:?}), {:?} after",
                    after.get(k)
                ));
            }
        }
    }
    drop(store);
    let Ok(store) = Store::open_with(dir, o()) else {
        return Ok(());
    };
    let again = read_all(&store).ok_or("keyspace gone after reopen")?;
    for (k, v) in &before {
        if let Ok(Some(want)) = v {
            match again.get(k) {
                Some(Ok(Some(got))) if got == want => {}
                Some(Err(_)) => {}
                other => return Err(format!("{k}: readable before, {other:?} after reopen")),
            }
        }
    }
    Ok(())
}

fn sweep(file: &str) {
    let t = template();
    let original = std::fs::read(t.dir.path().join(file)).expect("read the template file");
    let full = std::env::var("EBBDB_DAMAGE_FULL").is_ok_and(|v| v == "1");
    let stride = if full { 1 } else { STRIDE };
    let mut harms = Vec::new();
    // Offset 0 and the last byte always; the rest by stride (shifted per kind of harm, so the
    // three kinds do not all land on the same record field).
    for (shift, make) in [
        (0, Harm::Cut as fn(usize) -> Harm),
        (17, Harm::Flip),
        (31, Harm::Zero),
    ] {
        let mut at = 0;
        while at < original.len() {
            harms.push(make(at));
            at += if at == 0 && shift > 0 { shift } else { stride };
        }
        harms.push(make(original.len() - 1));
    }
    let mut failures = Vec::new();
    for h in &harms {
        for mode in [RecoveryMode::Strict, RecoveryMode::Salvage] {
            let work = tempfile::tempdir().expect("tempdir");
            copy_dir(t.dir.path(), work.path()).expect("copy");
            let _ = std::fs::remove_file(work.path().join("LOCK"));
            std::fs::write(work.path().join(file), harm(&original, *h)).expect("write");
            if let Err(e) = exercise(work.path(), mode) {
                failures.push(format!("{file} {h:?} {mode:?}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        harms.len() * 2,
        failures.join("\n")
    );
}

#[test]
fn sealed_merge_output() {
    sweep(&template().files[0]);
}

#[test]
fn hint_file() {
    sweep(&template().files[1]);
}

#[test]
fn active_segment() {
    sweep(&template().files[2]);
}

#[test]
fn manifest() {
    sweep(&template().files[3]);
}

#[test]
fn clock_file() {
    sweep(&template().files[4]);
}

#[test]
fn sealed_appended_segment() {
    let files = &template().files;
    assert!(
        files.len() > 5,
        "the template has a rotation-sealed segment"
    );
    sweep(&files[5]);
}
