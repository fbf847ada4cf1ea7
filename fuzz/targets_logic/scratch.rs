//! A scratch directory for one fuzz input, on `/dev/shm` when it exists (tmpfs makes the fsyncs
//! of open and close nearly free, which keeps executions fast). Shared by the targets that open
//! real stores.

use std::path::Path;

pub fn scratch_dir() -> tempfile::TempDir {
    let mut b = tempfile::Builder::new();
    b.prefix("ebbdb-fuzz-");
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = b.tempdir_in(shm) {
            return d;
        }
    }
    b.tempdir().expect("create a temporary directory")
}
