//! `ebbdb verify`: clean on a healthy database, and on damage (a flipped byte in a segment, a
//! truncated hint, a zeroed page) a non-zero exit with a report naming the file and offset;
//! never a change to the directory.

mod common;

use std::path::{Path, PathBuf};

use common::{ebbdb_at, snapshot, stderr, stdout, T0};
use ebbdb::{ContainerProperties, Database, DefaultTtl};
use serde_json::{json, Value};

/// A database whose sealed segments (64 KiB) have hint files: 400 items, then a full merge.
fn hinted_database(dir: &Path) {
    let db = Database::open_with(dir, common::options(T0).segment_size(64 << 10)).expect("open");
    let c = db
        .create_container(
            ContainerProperties::new("events", "/p").with_default_ttl(DefaultTtl::Seconds(3600)),
        )
        .expect("container");
    for i in 0..400 {
        c.create_item(&json!({"id": format!("e{i}"), "p": i % 7, "pad": "x".repeat(500)}))
            .expect("create");
    }
    db.compact_full().expect("merge");
    for i in 0..20 {
        c.upsert_item(&json!({"id": format!("e{i}"), "p": i % 7, "v": 2}))
            .expect("upsert");
    }
}

/// A sealed segment with a hint, at least `min_len` bytes long.
fn hinted_segment(dir: &Path, min_len: u64) -> (PathBuf, PathBuf) {
    let mut hints: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "hint"))
        .collect();
    hints.sort();
    for h in hints {
        let seg = h.with_extension("seg");
        if std::fs::metadata(&seg).map(|m| m.len()).unwrap_or(0) >= min_len {
            return (seg, h);
        }
    }
    panic!("no hinted segment of {min_len} bytes in {}", dir.display());
}

/// Runs verify, checks it changed nothing, returns (exit code, stdout).
fn verify(dir: &Path, json: bool) -> (Option<i32>, String) {
    let before = snapshot(dir);
    let mut cmd = ebbdb_at(T0 + 10);
    cmd.arg("verify").arg(dir);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("run");
    assert_eq!(snapshot(dir), before, "verify changed the directory");
    if out.status.code() != Some(0) {
        assert!(!stderr(&out).is_empty(), "a failing verify says why");
    }
    (out.status.code(), stdout(&out))
}

/// The offsets the report gives for `file`.
fn offsets_for(report: &str, file: &Path) -> Vec<u64> {
    let name = file.display().to_string();
    report
        .lines()
        .filter(|l| l.starts_with("problem: ") && l.contains(&format!("{name} at offset ")))
        .filter_map(|l| {
            let rest = l.split(" at offset ").nth(1)?;
            rest.split(':').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn a_healthy_database_verifies_clean() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    hinted_database(dir.path());
    let (code, out) = verify(dir.path(), false);
    assert_eq!(code, Some(0), "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.starts_with("ok: "), "{out}");
    let (code, out) = verify(dir.path(), true);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["clean"], true);
    assert!(v["hints"].as_u64().unwrap_or(0) >= 2, "{v}");
    // 400 events and the catalogue entry; the 20 upserts replaced events.
    assert_eq!(v["keys"], 401);
    assert!(v["records"].as_u64().unwrap_or(0) >= 421, "{v}");
}

#[test]
fn a_flipped_byte_in_a_segment_is_reported_with_file_and_offset() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    hinted_database(dir.path());
    let (seg, _) = hinted_segment(dir.path(), 4096);
    let mut b = std::fs::read(&seg).expect("read");
    b[3000] ^= 0x10;
    std::fs::write(&seg, &b).expect("write");
    let (code, out) = verify(dir.path(), false);
    assert_eq!(code, Some(6), "{out}");
    let offs = offsets_for(&out, &seg);
    assert_eq!(offs.len(), 1, "{out}");
    // The damaged record starts at or before the flipped byte (records are ~600 bytes).
    assert!((2000..=3000).contains(&offs[0]), "{out}");
    let (_, json) = verify(dir.path(), true);
    let v: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["clean"], false);
    assert_eq!(v["problems"][0]["file"], seg.display().to_string());
    assert_eq!(v["problems"][0]["offset"], offs[0]);
}

#[test]
fn a_truncated_hint_is_reported() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    hinted_database(dir.path());
    let (_, hint) = hinted_segment(dir.path(), 0);
    let b = std::fs::read(&hint).expect("read");
    std::fs::write(&hint, &b[..b.len() - 10]).expect("write");
    let (code, out) = verify(dir.path(), false);
    assert_eq!(code, Some(6), "{out}");
    let offs = offsets_for(&out, &hint);
    assert_eq!(offs.len(), 1, "{out}");
    assert!(out.contains("hint file"), "{out}");
}

#[test]
fn a_zeroed_page_is_reported_with_file_and_offset() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    hinted_database(dir.path());
    let (seg, _) = hinted_segment(dir.path(), 3 * 4096);
    let mut b = std::fs::read(&seg).expect("read");
    b[4096..8192].fill(0);
    std::fs::write(&seg, &b).expect("write");
    let (code, out) = verify(dir.path(), false);
    assert_eq!(code, Some(6), "{out}");
    let offs = offsets_for(&out, &seg);
    assert!(!offs.is_empty(), "{out}");
    assert!((3000..=4096).contains(&offs[0]), "{out}");
    // The hint still lists the records that are gone: the key directory disagrees with the log.
    assert!(
        out.contains("has no entry") || out.contains("does not hold"),
        "{out}"
    );
}

#[test]
fn damage_in_the_active_segment_and_a_foreign_segment_are_reported() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    hinted_database(dir.path());
    // The active segment is the highest-numbered .seg; flip a byte in its first record.
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    let active = segs.last().cloned().expect("a segment");
    let mut b = std::fs::read(&active).expect("read");
    b[40] ^= 1;
    std::fs::write(&active, &b).expect("write");
    let (code, out) = verify(dir.path(), false);
    assert_eq!(code, Some(6), "{out}");
    assert_eq!(offsets_for(&out, &active), vec![32], "{out}");

    let dir2 = tempfile::tempdir().expect("tempdir");
    hinted_database(dir2.path());
    let (seg, _) = hinted_segment(dir2.path(), 0);
    let foreign = dir2.path().join("0000009999.seg");
    std::fs::copy(&seg, &foreign).expect("copy");
    let (code, out) = verify(dir2.path(), false);
    assert_eq!(code, Some(6), "{out}");
    assert_eq!(offsets_for(&out, &foreign), vec![0], "{out}");
}

#[test]
fn commands_that_open_a_damaged_directory_name_the_file_and_offset() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    common::fixture(dir.path());
    // The fixture has one segment, the active one; damage its first record (below the
    // durable point that closing recorded, with good records after it).
    let seg = dir.path().join("0000000001.seg");
    let mut b = std::fs::read(&seg).expect("read");
    b[45] ^= 0x01;
    std::fs::write(&seg, &b).expect("write");
    let before = snapshot(dir.path());
    for args in [vec!["stats"], vec!["containers"], vec!["scan", "raw"]] {
        let out = ebbdb_at(T0 + 10)
            .arg(args[0])
            .arg(dir.path())
            .args(&args[1..])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(6), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("corruption in {} at offset 32", seg.display())),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a refused open changed nothing"
    );

    // A damaged MANIFEST: verify reports it (it cannot go further) and fails.
    let manifest = dir.path().join("MANIFEST");
    let mut m = std::fs::read(&manifest).expect("read");
    let last = m.len() - 1;
    m[last] ^= 0x20;
    std::fs::write(&manifest, &m).expect("write");
    let (code, out) = verify(dir.path(), false);
    assert_eq!(code, Some(6), "{out}");
    assert_eq!(offsets_for(&out, &manifest), vec![0], "{out}");
}
