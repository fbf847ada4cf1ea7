//! The active segment: the one file being appended to.
//!
//! Writers append encoded records to an in-memory buffer (the *tail*) under the log mutex; the
//! tail is written to the file (`pwrite` where the file's written bytes end) up to a page
//! boundary when it grows past a threshold, and whole before an fsync and at rotation.
//! Readers never take the log mutex (which is held across fsyncs by catalogue changes): they
//! read the flushed part
//! through the shared [`ActiveFile`] (mapping or `pread`), and the unflushed tail under the
//! tail's own mutex, which is held only for an append, a copy, or the `pwrite` of a flush.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::mmap::{map_active, ActiveMap};
use super::{segment_path, segment_tmp_path};
use crate::faults::{self, FaultKind};
use crate::format::{SegmentHeader, SEGMENT_HEADER_LEN};

/// Flush the buffer to the file once it holds this much.
pub const FLUSH_THRESHOLD: usize = 256 * 1024;

/// The active file is kept zero-filled this far beyond the written records. Appends then
/// overwrite blocks that already exist, so most `fdatasync`s need not commit a file-size or
/// block-allocation change (measured on this class of disk: ~48 µs vs ~75 µs for a 4 KiB
/// append). Recovery keeps an all-zero tail; sealing trims it.
pub const PREALLOCATE: u64 = 1 << 20;

/// The part of the active segment readers share.
#[derive(Debug)]
pub struct ActiveFile {
    /// File id.
    pub id: u32,
    /// The file, opened read-write.
    pub file: File,
    /// Bytes of the file readers may take from it (header included): whole writes, never
    /// written again. The file may hold more (the first bytes of the write a flush of whole
    /// pages cut), which readers take from the tail.
    pub flushed: AtomicU64,
    /// Bytes known to be on stable storage: `flushed` as it was when the last successful
    /// fsync began (`CLOCK` records it, see `engine::clockfile`).
    pub durable: AtomicU64,
    /// Read-only mapping of the file (its flushed prefix is read from here); `None` if the
    /// mapping failed, in which case reads use `pread`.
    map: Option<ActiveMap>,
    /// Appended bytes from `flushed` on (the first of them may also be in the file already).
    /// `flushed` only changes under this lock, so a reader holding it sees the two agree.
    tail: Mutex<Vec<u8>>,
    /// The file's final name (`NNNNNNNNNN.seg`).
    path: PathBuf,
    /// True while the file still has its staging name (`.seg.tmp`): a rotation's successor
    /// keeps it until the manifest names the file (DESIGN.md §5, "Rotation").
    staged: AtomicBool,
}

impl ActiveFile {
    /// Reads `len` bytes at `offset` if they are already in the file.
    ///
    /// # Errors
    /// The OS error from `pread`.
    pub fn read_flushed(&self, offset: u32, len: u32) -> io::Result<Option<Vec<u8>>> {
        let end = u64::from(offset) + u64::from(len);
        if end > self.flushed.load(Ordering::Acquire) {
            return Ok(None);
        }
        if let Some(bytes) = self.read_mapped(offset, len) {
            return Ok(Some(bytes.to_vec()));
        }
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, u64::from(offset))?;
        Ok(Some(buf))
    }
}

impl ActiveFile {
    /// Copies `len` bytes at `offset` wherever they are: the file (if flushed) or the
    /// unflushed tail. `None` if they are past everything appended.
    ///
    /// # Errors
    /// The OS error from `pread`.
    pub fn read_any(&self, offset: u32, len: u32) -> io::Result<Option<Vec<u8>>> {
        if let Some(bytes) = self.read_flushed(offset, len)? {
            return Ok(Some(bytes));
        }
        let tail = self.tail.lock();
        let flushed = self.flushed.load(Ordering::Acquire);
        match u64::from(offset).checked_sub(flushed) {
            Some(start) => {
                let start = usize::try_from(start).unwrap_or(usize::MAX);
                Ok(start
                    .checked_add(len as usize)
                    .and_then(|end| tail.get(start..end))
                    .map(<[u8]>::to_vec))
            }
            // Flushed between the first look and taking the lock.
            None => {
                drop(tail);
                self.read_flushed(offset, len)
            }
        }
    }

    /// fsyncs the file's data (with its metadata when `data_only` is false).
    ///
    /// # Errors
    /// The OS error from `fdatasync`/`fsync`.
    pub fn sync(&self, data_only: bool) -> io::Result<()> {
        let upto = self.flushed.load(Ordering::Acquire);
        faults::sync_file(&self.file, &self.current_path(), data_only)?;
        self.durable.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// The name the file has now: its staging name until [`ActiveFile::publish_name`].
    #[must_use]
    pub fn current_path(&self) -> PathBuf {
        if self.staged.load(Ordering::Acquire) {
            self.path.with_extension("seg.tmp")
        } else {
            self.path.clone()
        }
    }

    /// True while the file has its staging name: no manifest on disk lists it yet, and a
    /// crash before one does frees its id for reuse.
    #[must_use]
    pub fn is_staged(&self) -> bool {
        self.staged.load(Ordering::Acquire)
    }

    /// Gives a staged file its final name (no directory fsync: once the manifest names the
    /// file, opening renames a staged one itself). Nothing to do for a file that has it.
    ///
    /// # Errors
    /// The OS error from `rename`.
    pub fn publish_name(&self) -> io::Result<()> {
        if !self.staged.load(Ordering::Acquire) {
            return Ok(());
        }
        let from = self.current_path();
        faults::rename(&from, &self.path)?;
        self.staged.store(false, Ordering::Release);
        Ok(())
    }

    /// The flushed record at `offset` straight from the mapping, if it is there.
    #[must_use]
    pub fn read_mapped(&self, offset: u32, len: u32) -> Option<&[u8]> {
        let flushed = self.flushed.load(Ordering::Acquire);
        self.map
            .as_ref()?
            .slice(u64::from(offset), u64::from(len), flushed)
    }

    fn new(id: u32, file: File, flushed: u64, map_len: u64, path: PathBuf, staged: bool) -> Self {
        let map = map_active(&file, map_len.max(flushed)).ok();
        Self {
            id,
            file,
            flushed: AtomicU64::new(flushed),
            durable: AtomicU64::new(flushed),
            map,
            tail: Mutex::new(Vec::with_capacity(FLUSH_THRESHOLD * 2)),
            path,
            staged: AtomicBool::new(staged),
        }
    }
}

/// The writer's view of the active segment (lives inside the log mutex).
#[derive(Debug)]
pub struct ActiveWriter {
    /// Shared with readers.
    pub shared: Arc<ActiveFile>,
    /// Header of this file.
    pub header: SegmentHeader,
    /// Logical length: flushed bytes plus the tail.
    len: u64,
    /// Bytes of the file written so far: `flushed`, or past it after a flush of whole pages,
    /// whose last bytes begin a record that is still in the tail too (`flushed` only ever
    /// ends at a record's end, so no reader finds half a record in the file).
    written: u64,
    /// Where each write's records appended since the last flush end ([`ActiveWriter::end_unit`]:
    /// the tail's batch boundaries), for a flush of whole pages to end `flushed` at the last
    /// of them before the page boundary.
    ends: Vec<u64>,
    /// Physical length of the file: written records, then zeros.
    zeroed_to: u64,
    /// How far ahead to zero-fill: `PREALLOCATE`, but never more than a segment.
    prealloc: u64,
}

impl ActiveWriter {
    /// Creates segment `id` with its header written: under its final name, fsynced, or, when
    /// `staged` (a rotation's successor, named only once a manifest lists it), under its
    /// staging name (`.seg.tmp`) and not fsynced (the rotation's commit does that before the
    /// manifest names it). The caller fsyncs the directory (through the manifest write that
    /// lists the file).
    ///
    /// # Errors
    /// Any OS error.
    pub fn create(
        dir: &Path,
        id: u32,
        created_seq: u64,
        map_len: u64,
        staged: bool,
    ) -> io::Result<Self> {
        let header = SegmentHeader { id, created_seq };
        let path = if staged {
            segment_tmp_path(dir, id)
        } else {
            segment_path(dir, id)
        };
        faults::check(&path, FaultKind::Create)?;
        let file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)?;
        faults::write_all_at(&file, &path, &header.encode(), 0)?;
        if !staged {
            faults::sync_file(&file, &path, false)?;
        }
        let len = SEGMENT_HEADER_LEN as u64;
        let shared = ActiveFile::new(id, file, len, map_len, segment_path(dir, id), staged);
        Ok(Self {
            shared: Arc::new(shared),
            header,
            len,
            written: len,
            ends: Vec::new(),
            zeroed_to: len,
            prealloc: PREALLOCATE.min(map_len.max(4096)),
        })
    }

    /// Reopens an existing segment whose records are whole up to `valid_len`. When the bytes
    /// after it are all zero (preallocated space) they are kept; anything else (a torn tail) is
    /// cut off. A tail with any non-zero byte is never kept: a stale record in it could line up
    /// with later appends and be read back by a later recovery. The file is fsynced either
    /// way, so `valid_len` is durable before anything claims it is (a process crash leaves
    /// written bytes in the page cache, not on disk).
    ///
    /// # Errors
    /// Any OS error.
    pub fn reopen(
        dir: &Path,
        header: SegmentHeader,
        valid_len: u64,
        zero_tail: bool,
        map_len: u64,
    ) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(segment_path(dir, header.id))?;
        let physical = file.metadata()?.len();
        let zeroed_to = if physical != valid_len && !zero_tail {
            let path = segment_path(dir, header.id);
            faults::check(&path, FaultKind::Truncate)?;
            file.set_len(valid_len)?;
            faults::sync_file(&file, &path, false)?;
            valid_len
        } else {
            faults::sync_file(&file, &segment_path(dir, header.id), true)?;
            physical.max(valid_len)
        };
        let path = segment_path(dir, header.id);
        Ok(Self {
            shared: Arc::new(ActiveFile::new(
                header.id, file, valid_len, map_len, path, false,
            )),
            header,
            len: valid_len,
            written: valid_len,
            ends: Vec::new(),
            zeroed_to,
            prealloc: PREALLOCATE.min(map_len.max(4096)),
        })
    }

    /// File id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// Turns zero-filling ahead off for this file. It only pays when appends are fsynced one
    /// by one (an overwrite of existing blocks needs no size change committed); under
    /// `SyncPolicy::Never` it wrote every page twice.
    #[must_use]
    pub fn without_preallocation(mut self) -> Self {
        self.prealloc = 0;
        self
    }

    /// Cuts preallocated space off the end (before sealing), without an fsync; true if the
    /// file's length changed (its fsync must then include metadata).
    ///
    /// # Errors
    /// The OS error from `ftruncate`.
    pub fn trim(&self) -> io::Result<bool> {
        if self.shared.file.metadata()?.len() > self.len {
            faults::check(&self.shared.current_path(), FaultKind::Truncate)?;
            self.shared.file.set_len(self.len)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Logical length (flushed + buffered).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when no record has been appended.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len <= SEGMENT_HEADER_LEN as u64
    }

    /// Appends whatever `encode` writes into the buffer, returning the offset where it starts.
    pub fn append_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> u64 {
        let at = self.len;
        let mut tail = self.shared.tail.lock();
        let before = tail.len();
        encode(&mut tail);
        self.len += (tail.len() - before) as u64;
        at
    }

    /// Marks the end of a write's records (a batch's header and members, or a single record):
    /// a flush of whole pages lets readers take from the file only up to such an end, so the
    /// file's readable part never ends inside a batch, whose records recovery keeps all or
    /// none of (and the durable length recorded in `CLOCK` is that readable part).
    pub fn end_unit(&mut self) {
        if self.ends.last() != Some(&self.len) {
            self.ends.push(self.len);
        }
    }

    /// True when the buffer should be written out.
    #[must_use]
    pub fn wants_flush(&self) -> bool {
        self.shared.tail.lock().len() >= FLUSH_THRESHOLD
    }

    /// Writes the buffer to the file (no fsync).
    ///
    /// # Errors
    /// The OS error from `pwrite`; the buffer is kept so nothing is silently dropped, and the
    /// caller poisons the store.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_out(false)
    }

    /// Writes the buffer up to the last page boundary it crosses (no fsync), so the file's
    /// written bytes end at a page boundary and the next write starts a fresh page. A write
    /// into a page that writeback holds locked waits for it: with ext4's delayed allocation an
    /// fsync of the file locks its dirty pages while it allocates their blocks, which waits for
    /// the journal, and a writer adding to the page the previous write ended in was held up to
    /// 112 ms (DESIGN.md §5, "Flushes end at page boundaries"). Readers take from the file only
    /// whole writes (`flushed` moves to the last end marked by [`ActiveWriter::end_unit`] at
    /// or before the boundary): the write the boundary cuts stays whole in the buffer for them,
    /// while the next flush writes on from the boundary.
    ///
    /// # Errors
    /// As [`ActiveWriter::flush`].
    pub fn flush_whole_pages(&mut self) -> io::Result<()> {
        self.write_out(true)
    }

    fn write_out(&mut self, whole_pages: bool) -> io::Result<()> {
        // Readers copy from the tail under this lock, so `flushed` and the tail change together.
        let mut tail = self.shared.tail.lock();
        let flushed = self.shared.flushed.load(Ordering::Acquire);
        debug_assert_eq!(flushed + tail.len() as u64, self.len);
        let mut end = self.len;
        if whole_pages {
            end -= end % super::mmap::page_bytes();
        }
        if end <= self.written {
            return Ok(());
        }
        // Bytes of the tail, from where the file's written bytes end to `end`.
        let (from, to) = (self.written - flushed, end - flushed);
        let (from, to) = (
            usize::try_from(from).unwrap_or(usize::MAX),
            usize::try_from(to).unwrap_or(usize::MAX),
        );
        if end > self.zeroed_to && self.prealloc > 0 {
            // Extend with zeros well past this write, so the next appends overwrite.
            let target = end + self.prealloc;
            let zeros = vec![0u8; (target - end) as usize];
            let path = self.shared.current_path();
            faults::write_all_at(&self.shared.file, &path, &zeros, end)?;
            self.zeroed_to = target;
        }
        faults::write_all_at(
            &self.shared.file,
            &self.shared.current_path(),
            &tail[from..to],
            self.written,
        )?;
        self.written = end;
        // The last record end at or before `end` (the whole tail when all of it went out).
        let whole = self.ends.partition_point(|&e| e <= end);
        let readable = match whole {
            _ if !whole_pages => end,
            0 => flushed,
            i => self.ends[i - 1],
        };
        self.ends.drain(..whole);
        tail.drain(..usize::try_from(readable - flushed).unwrap_or(usize::MAX));
        self.shared.flushed.store(readable, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flush of whole pages writes the file up to the last page boundary the buffer crosses
    /// and lets readers take from the file only up to the last end of a write before it
    /// (`end_unit`), so neither a record nor a batch is ever half in the file for them; every
    /// record reads back the same whichever side it is on; a full flush then writes the rest,
    /// and the file holds every byte once, in order.
    #[test]
    fn whole_page_flushes_end_at_a_page_boundary_and_lose_nothing() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut w = ActiveWriter::create(dir.path(), 1, 0, 1 << 20, false)?.without_preallocation();
        let page = crate::log::mmap::page_bytes();
        let mut appended: Vec<(u64, Vec<u8>)> = Vec::new();
        let file_len = |w: &ActiveWriter| w.shared.file.metadata().map(|m| m.len());
        let reads_back = |w: &ActiveWriter, appended: &[(u64, Vec<u8>)]| -> io::Result<()> {
            for (at, bytes) in appended {
                let (at, len) = (u32::try_from(*at).unwrap_or(u32::MAX), bytes.len() as u32);
                assert_eq!(w.shared.read_any(at, len)?.as_ref(), Some(bytes), "at {at}");
            }
            Ok(())
        };
        // Writes of one to three records of several sizes, some larger than a page.
        let mut unit_ends = vec![SEGMENT_HEADER_LEN as u64];
        for round in 0..40u32 {
            for part in 0..=round % 3 {
                let size = [3_001, 17, 9_000, 250, 4_096][(round + part) as usize % 5];
                let bytes: Vec<u8> = (0..size).map(|i| ((i + round) % 251) as u8).collect();
                let at = w.append_with(|b| b.extend_from_slice(&bytes));
                appended.push((at, bytes));
            }
            w.end_unit();
            unit_ends.push(w.len());
            if round % 3 != 1 {
                w.flush_whole_pages()?;
                let flushed = w.shared.flushed.load(Ordering::Acquire);
                assert!(
                    w.written % page == 0 || w.written == SEGMENT_HEADER_LEN as u64,
                    "round {round}: written to {}",
                    w.written
                );
                assert!(
                    w.len() - w.written < page,
                    "round {round}: a whole page not written"
                );
                assert_eq!(file_len(&w)?, w.written);
                assert!(flushed <= w.written);
                assert!(
                    unit_ends.contains(&flushed),
                    "round {round}: readers may read the file to {flushed}, not a write's end"
                );
            }
            reads_back(&w, &appended)?;
        }
        assert!(w.shared.flushed.load(Ordering::Acquire) > SEGMENT_HEADER_LEN as u64);
        w.flush()?;
        assert_eq!(w.shared.flushed.load(Ordering::Acquire), w.len());
        assert_eq!(file_len(&w)?, w.len());
        reads_back(&w, &appended)?;
        let mut on_disk = vec![0u8; usize::try_from(w.len()).unwrap_or(usize::MAX)];
        w.shared.file.read_exact_at(&mut on_disk, 0)?;
        let records: Vec<u8> = appended.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(&on_disk[SEGMENT_HEADER_LEN..], &records[..]);
        Ok(())
    }
}
