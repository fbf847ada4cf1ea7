//! The crate's only `unsafe`: mapping sealed segment files read-only.
//!
//! Soundness argument (also in DESIGN.md, "mmap"): a mapping is undefined behaviour in Rust only
//! if the bytes change while a `&[u8]` over them is alive. We map a file only once it is
//! *sealed*: fully written, fsynced, and never opened for writing again by ebbdb. Files are
//! deleted (unlinked) only when the last `Arc<Segment>` holding the mapping is dropped, and an
//! unlinked file's pages stay valid for existing mappings anyway. Other processes are kept out
//! of the directory by the exclusive `LOCK`; a user who edits segment files by hand while the
//! database is open is outside the contract (the CRC on every read still turns most such edits
//! into `Error::Corruption` rather than a wrong answer).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::Mmap;

/// Maps a sealed segment file read-only. An empty file gets no mapping (mmap of length 0 fails).
///
/// # Errors
/// The OS error from `mmap`.
pub fn map_sealed(file: &File) -> io::Result<Option<Mmap>> {
    if file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: `file` is a sealed segment: ebbdb never writes to it again and deletes it only
    // after the last holder of this mapping is gone; the directory LOCK keeps other ebbdb
    // processes out. See the module docs and DESIGN.md for the full argument.
    let map = unsafe { Mmap::map(file)? };
    #[cfg(unix)]
    {
        // Point reads are random; tell the kernel not to read ahead.
        let _ = map.advise(memmap2::Advice::Random);
    }
    Ok(Some(map))
}
