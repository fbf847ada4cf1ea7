//! A sealed segment: an immutable file read through a read-only mapping.
//!
//! Invariant: once a `Segment` exists its file is never written again. A segment found damaged
//! (by opening or by a merge's check) is marked so and never merged, dropped or hinted. When compaction retires
//! a segment it is marked obsolete and its files are unlinked when the last `Arc<Segment>` (the
//! last reader holding the mapping) is dropped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::Mmap;

use super::{hint_path, mmap, segment_path};
use crate::error::{Error, IoContext, Result};
use crate::format::{SegmentHeader, SEGMENT_HEADER_LEN};

/// A sealed, mapped segment.
#[derive(Debug)]
pub struct Segment {
    /// File id.
    pub id: u32,
    /// Decoded header.
    pub header: SegmentHeader,
    path: PathBuf,
    hint: PathBuf,
    map: Option<Mmap>,
    obsolete: AtomicBool,
    damaged: AtomicBool,
}

impl Segment {
    /// Opens and maps segment `id` of `dir`, checking its header.
    ///
    /// # Errors
    /// [`Error::Corruption`] for a bad header; [`Error::Io`] for OS errors.
    pub fn open(dir: &Path, id: u32) -> Result<Self> {
        let path = segment_path(dir, id);
        let file = File::open(&path).at(&path)?;
        Self::from_file(dir, id, &file)
    }

    /// Maps segment `id` of `dir` from a file already open: a rotation seals the active file
    /// this way, whatever name it has at that moment (DESIGN.md §5, "Rotation").
    ///
    /// # Errors
    /// As [`Segment::open`].
    pub fn from_file(dir: &Path, id: u32, file: &File) -> Result<Self> {
        let path = segment_path(dir, id);
        let map = mmap::map_sealed(file).at(&path)?;
        let bytes: &[u8] = map.as_deref().unwrap_or_default();
        let header = SegmentHeader::decode(bytes)
            .map_err(|e| Error::corruption(&path, 0, format!("segment header: {e}")))?;
        if header.id != id {
            return Err(Error::corruption(
                &path,
                0,
                "segment header names another file id",
            ));
        }
        Ok(Self {
            id,
            header,
            hint: hint_path(dir, id),
            path,
            map,
            obsolete: AtomicBool::new(false),
            damaged: AtomicBool::new(false),
        })
    }

    /// Opens segment `id` for salvage: like [`Segment::open`], but a header that fails its
    /// checks is replaced by `{id, created_seq: 0}` (0 is the safe guess for the
    /// no-resurrection rule: it only ever makes a merge keep more markers) and the segment is
    /// marked damaged.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened or mapped.
    pub fn open_damaged(dir: &Path, id: u32) -> Result<Self> {
        let path = segment_path(dir, id);
        let file = File::open(&path)?;
        let map = mmap::map_sealed(&file)?;
        let bytes: &[u8] = map.as_deref().unwrap_or_default();
        let header = SegmentHeader::decode(bytes)
            .ok()
            .filter(|h| h.id == id)
            .unwrap_or(SegmentHeader { id, created_seq: 0 });
        Ok(Self {
            id,
            header,
            hint: hint_path(dir, id),
            path,
            map,
            obsolete: AtomicBool::new(false),
            damaged: AtomicBool::new(true),
        })
    }

    /// Records that damage was found in this segment: it is never merged or dropped (its
    /// unreadable bytes cannot be proven dead), and it gets no hint.
    pub fn mark_damaged(&self) {
        self.damaged.store(true, Ordering::SeqCst);
    }

    /// True once damage was found in this segment.
    #[must_use]
    pub fn is_damaged(&self) -> bool {
        self.damaged.load(Ordering::SeqCst)
    }

    /// Asks the kernel to start reading `len` bytes at `offset` into the page cache
    /// (`MADV_WILLNEED`), without waiting for them. Best effort: a failure is ignored, and a
    /// range past the end is cut to it.
    pub fn will_need(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        if let Some(m) = &self.map {
            let len = len.min(m.len().saturating_sub(offset));
            if len > 0 {
                let _ = m.advise_range(memmap2::Advice::WillNeed, offset, len);
            }
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    /// All bytes of the file.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// File length.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Bytes of records (file length minus header).
    #[must_use]
    pub fn data_len(&self) -> u64 {
        self.len().saturating_sub(SEGMENT_HEADER_LEN as u64)
    }

    /// `len` bytes at `offset`, if inside the file.
    #[must_use]
    pub fn read(&self, offset: u32, len: u32) -> Option<&[u8]> {
        let start = offset as usize;
        self.bytes().get(start..start.checked_add(len as usize)?)
    }

    /// The segment's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True once a merge retired this segment (its files go when the last holder lets go).
    #[must_use]
    pub fn is_obsolete(&self) -> bool {
        self.obsolete.load(Ordering::SeqCst)
    }

    /// Unlink the files once the last holder drops this segment.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::SeqCst);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::SeqCst) {
            // Unlink after the mapping is gone; failures leave a file that the next open
            // removes because the manifest no longer lists it.
            self.map = None;
            let _ = std::fs::remove_file(&self.hint);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
