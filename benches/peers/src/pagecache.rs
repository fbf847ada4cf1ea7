//! Dropping a data directory's files from the OS page cache (the `cold` phase), and checking
//! with `mincore` how much of them is still resident.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::engines::Res;

/// The regular files under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => files(&e.path(), out),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
}

/// Evicts every regular file under `dir` from the page cache, as after a reboot; returns how.
/// Each file is fsynced (dirty pages cannot be dropped), then `sync`; as root, `1` is written
/// to /proc/sys/vm/drop_caches (the whole clean page cache, system-wide; not with
/// `PEERS_NO_DROP_CACHES` set, for a machine shared with other work); in any case each file
/// gets `posix_fadvise(POSIX_FADV_DONTNEED)` over its whole length (unprivileged, but it cannot
/// drop pages another process has mapped: call it with the engine closed).
pub fn evict(dir: &Path) -> Res<&'static str> {
    let mut all = Vec::new();
    files(dir, &mut all);
    for p in &all {
        File::open(p)?.sync_all()?;
    }
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let dropped = std::env::var_os("PEERS_NO_DROP_CACHES").is_none()
        && std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok();
    for p in &all {
        let f = File::open(p)?;
        // SAFETY: a valid open descriptor; offset 0 and length 0 mean the whole file.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(format!(
                "posix_fadvise({}): {}",
                p.display(),
                std::io::Error::from_raw_os_error(r)
            )
            .into());
        }
    }
    Ok(if dropped {
        "sync + drop_caches=1 + fadvise(DONTNEED)"
    } else {
        "fsync + fadvise(DONTNEED) (drop_caches not written)"
    })
}

/// Bytes of the regular files under `dir` resident in the page cache, and their total length:
/// each file mapped (no page is touched, so none is read in) and asked with `mincore`.
pub fn resident(dir: &Path) -> (u64, u64) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let mut all = Vec::new();
    files(dir, &mut all);
    let (mut res, mut total) = (0u64, 0u64);
    for p in &all {
        let Ok(f) = File::open(p) else { continue };
        let len = f.metadata().map_or(0, |m| m.len());
        if len == 0 {
            continue;
        }
        total += len;
        // SAFETY: a read-only shared mapping of an open file, unmapped below; never read.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            continue;
        }
        let mut vec = vec![0u8; len.div_ceil(page) as usize];
        // SAFETY: `addr` maps `len` bytes; `vec` has one byte per page of them.
        if unsafe { libc::mincore(addr, len as usize, vec.as_mut_ptr()) } == 0 {
            let pages = vec.iter().filter(|b| *b & 1 == 1).count() as u64;
            res += (pages * page).min(len);
        }
        // SAFETY: the mapping made above, with its length.
        unsafe { libc::munmap(addr, len as usize) };
    }
    (res, total)
}
