//! Issue 9, item 22: a container create whose manifest write fails before the rename changes
//! nothing, so it must not poison the store, and its error names the file.
//!
//! Before the fix every write after such a failure (e.g. EACCES on the directory) returned
//! `Poisoned` until the database was reopened, and the error read "Permission denied (os error
//! 13)" without saying which file.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ebbdb::clock::ManualClock;
use ebbdb::faults::{self, FaultKind, FaultPlan};
use ebbdb::{ContainerProperties, Database, DefaultTtl, Error, Options};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn plan(dir: &Path, kind: FaultKind) -> FaultPlan {
    FaultPlan {
        dir: dir.to_path_buf(),
        kind,
        nth: 1,
        sticky: false,
        partial: false,
        no_space: false,
    }
}

/// Opens a database, then makes the next `create_container` fail while writing the manifest
/// (by `fail`), and checks that nothing was lost or poisoned.
fn failed_create_changes_nothing(fail: impl FnOnce(&Path) -> TestResult) -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let opts = || Options::default().clock(clock.clone());
    {
        let db = Database::open_with(dir.path(), opts())?;
        let orders = db.create_container(ContainerProperties::new("orders", "/pk"))?;
        orders.create_item(&json!({"id": "a", "pk": "p"}))?;

        let restore = PermissionsGuard(dir.path().to_path_buf());
        fail(dir.path())?;
        let err = db
            .create_container(ContainerProperties::new("carts", "/user"))
            .map(|_| ())
            .expect_err("the manifest write was made to fail");
        drop(restore);
        faults::disarm(dir.path());
        assert_eq!(err.status_code(), 500, "{err}");
        assert!(
            err.to_string().contains("MANIFEST.tmp"),
            "the error names the file: {err}"
        );

        assert!(!db.store().is_poisoned(), "nothing lost durability: {err}");
        assert!(db.container("carts").is_err_and(|e| e.is_not_found()));
        orders.create_item(&json!({"id": "b", "pk": "p"}))?;
        let carts = db.create_container(ContainerProperties::new("carts", "/user"))?;
        carts.create_item(&json!({"id": "c", "user": "u"}))?;
        db.replace_container(
            ContainerProperties::new("carts", "/user").with_default_ttl(DefaultTtl::Seconds(60)),
        )?;
    }
    let db = Database::open_with(dir.path(), opts())?;
    assert_eq!(db.container("orders")?.count()?, 2);
    let carts = db.container("carts")?;
    assert_eq!(carts.properties().default_ttl, DefaultTtl::Seconds(60));
    let _: Value = carts.read_item("u", "c")?;
    Ok(())
}

/// Restores the directory's permissions however the test ends.
struct PermissionsGuard(std::path::PathBuf);

impl Drop for PermissionsGuard {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
    }
}

/// The reported case: the directory became read-only (EACCES on `MANIFEST.tmp`). When the
/// test runs with privileges that ignore permissions (root), the same failure is injected at
/// the same call instead.
#[test]
fn read_only_directory_fails_the_create_without_poisoning() -> TestResult {
    failed_create_changes_nothing(|dir| {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555))?;
        let probe = dir.join("probe");
        if std::fs::File::create(&probe).is_ok() {
            // Permissions do not bind us (root or CAP_DAC_OVERRIDE): inject the failure.
            std::fs::remove_file(&probe)?;
            faults::arm(plan(dir, FaultKind::Create));
        }
        Ok(())
    })
}

#[test]
fn failed_manifest_write_does_not_poison() -> TestResult {
    failed_create_changes_nothing(|dir| {
        faults::arm(plan(dir, FaultKind::Write));
        Ok(())
    })
}

#[test]
fn failed_manifest_fsync_does_not_poison() -> TestResult {
    failed_create_changes_nothing(|dir| {
        faults::arm(plan(dir, FaultKind::Sync));
        Ok(())
    })
}

#[test]
fn failed_manifest_rename_does_not_poison() -> TestResult {
    failed_create_changes_nothing(|dir| {
        faults::arm(plan(dir, FaultKind::Rename));
        Ok(())
    })
}

/// After the rename, a failed directory fsync leaves it unknown whether the new manifest is
/// durable: that one still poisons (and the store reopens consistently).
#[test]
fn failed_directory_fsync_after_the_rename_poisons() -> TestResult {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::at_unix_secs(1_700_000_000);
    let opts = || Options::default().clock(clock.clone());
    {
        let db = Database::open_with(dir.path(), opts())?;
        // The manifest's own fsync is the first, the directory's the second.
        faults::arm(FaultPlan {
            nth: 2,
            ..plan(dir.path(), FaultKind::Sync)
        });
        let r = db.create_container(ContainerProperties::new("carts", "/user"));
        faults::disarm(dir.path());
        let err = r.map(|_| ()).expect_err("directory fsync was made to fail");
        assert!(db.store().is_poisoned(), "{err}");
        assert!(matches!(
            db.create_container(ContainerProperties::new("x", "/pk")),
            Err(Error::Poisoned)
        ));
    }
    let db = Database::open_with(dir.path(), opts())?;
    // The rename happened, so the keyspace exists; without its system entry it is not a
    // container, and creating it again works.
    assert!(db.container("carts").is_err_and(|e| e.is_not_found()));
    db.create_container(ContainerProperties::new("carts", "/user"))?;
    Ok(())
}
